#include "formats/err.h"

#include <stdio.h>
#include <string.h>

void drift_err_clear(drift_err *err) {
    if (!err) return;
    err->code = DRIFT_OK;
    err->where[0] = '\0';
    err->msg[0] = '\0';
}

int drift_err_vset(drift_err *err, int code, const char *where, const char *fmt, va_list ap) {
    if (!err) return code;
    err->code = code;
    snprintf(err->where, sizeof err->where, "%s", where ? where : "");
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    return code;
}

int drift_err_set(drift_err *err, int code, const char *where, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    drift_err_vset(err, code, where, fmt, ap);
    va_end(ap);
    return code;
}

void drift_err_prefix(drift_err *err, const char *fmt, ...) {
    if (!err || err->code == DRIFT_OK) return;
    char pre[512], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    size_t np = strlen(pre);
    if (np + 2 >= sizeof err->msg) np = sizeof err->msg - 3;
    memcpy(err->msg, pre, np);
    memcpy(err->msg + np, ": ", 2);
    size_t room = sizeof err->msg - np - 3, no = strlen(old);
    if (no > room) no = room;
    memcpy(err->msg + np + 2, old, no);
    err->msg[np + 2 + no] = '\0';
}

int drift_err_exit_code(int code) {
    if (code == DRIFT_OK) return 0;
    if (code == DRIFT_E_CHECK) return 1;
    return 2;
}

const char *drift_err_format(const drift_err *err, char *buf, unsigned long bufsz) {
    if (!buf || bufsz == 0) return buf;
    if (!err) {
        buf[0] = '\0';
    } else if (err->where[0]) {
        snprintf(buf, bufsz, "%s: %s", err->where, err->msg);
    } else {
        snprintf(buf, bufsz, "%s", err->msg);
    }
    return buf;
}
