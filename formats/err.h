/* drift_err: the one error channel of every library function (DESIGN.md s10).
 * Functions that can fail return an int status (DRIFT_OK = 0) and, when
 * given a non-NULL caller-owned drift_err, fill it with a code, a message and
 * where it happened (file:line:col, file:/hdf5/path, or a flag name). */
#ifndef DRIFT_FORMATS_ERR_H
#define DRIFT_FORMATS_ERR_H

#include <stdarg.h>

enum drift_status {
    DRIFT_OK = 0,
    DRIFT_E_CHECK = 1,    /* a check the user asked for failed (exit 1) */
    DRIFT_E_USAGE = 2,    /* bad command-line usage (exit 2) */
    DRIFT_E_INPUT = 3,    /* bad input file or value: names file, field, expectation (exit 2) */
    DRIFT_E_IO = 4,       /* the OS or HDF5 refused an operation (exit 2) */
    DRIFT_E_NOMEM = 5,    /* an allocation failed or a size exceeds a limit (exit 2) */
    DRIFT_E_UNSUPPORTED = 6, /* valid but not implemented by this build/backend (exit 2) */
    DRIFT_E_INTERNAL = 7  /* a bug in drift (exit 2) */
};

typedef struct drift_err {
    int code;
    char where[512];
    char msg[1024];
} drift_err;

/* Clears err (NULL allowed). */
void drift_err_clear(drift_err *err);
/* Sets err (NULL allowed) and returns code, for `return drift_err_set(...)`.
 * where may be NULL (stored as ""). The last call wins: err is overwritten
 * whatever it held. The innermost cause sets err and returns its status;
 * callers on the way up keep it and add context with drift_err_prefix
 * instead of setting a second error. */
int drift_err_set(drift_err *err, int code, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int drift_err_vset(drift_err *err, int code, const char *where, const char *fmt, va_list ap);
/* Prepends "context: " to err->msg (no-op on NULL or an empty err). */
void drift_err_prefix(drift_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Process exit code for a status: 0, 1 (check failed) or 2 (anything else). */
int drift_err_exit_code(int code);
/* "where: msg" into buf (always NUL-terminated). Returns buf. */
const char *drift_err_format(const drift_err *err, char *buf, unsigned long bufsz);

#endif
