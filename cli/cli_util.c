#include "cli/cli_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int drift_cli_opt(int argc, char **argv, int *i, const char *name, const char **value) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *value = a + n + 1;
        return 1;
    }
    if (a[n] != '\0') return 0;
    if (*i + 1 >= argc) return -1;
    *value = argv[++*i];
    return 1;
}

int drift_cli_take_plan_arg(drift_cli_plan_args *a, const char *plan_opt, int argc, char **argv, int *i) {
    const char *v = NULL;
    int m = drift_cli_opt(argc, argv, i, plan_opt, &v);
    if (m != 0) {
        if (m > 0) a->file = v;
        return m;
    }
    char name[128];
    const char *arg = argv[*i];
    const char *eq = strchr(arg, '=');
    size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
    if (len >= sizeof name) return 0;
    memcpy(name, arg, len);
    name[len] = '\0';
    if (!drift_plan_is_flag(name)) return 0;
    m = drift_cli_opt(argc, argv, i, name, &v);
    if (m <= 0) return -1;
    if (a->n_flags >= DRIFT_CLI_MAX_PLAN_FLAGS) return -1;
    a->flag_name[a->n_flags] = arg; /* points at "--name..." in argv; name resolved below */
    a->flag_value[a->n_flags] = v;
    a->n_flags++;
    return 1;
}

int drift_cli_build_plan(const drift_cli_plan_args *a, drift_plan *out, drift_err *err) {
    int rc;
    drift_plan_init(out);
    if (a->file) {
        if ((rc = drift_plan_load_file(out, a->file, err))) return rc;
    } else {
        snprintf(out->source, sizeof out->source, "flags");
    }
    for (int k = 0; k < a->n_flags; k++) {
        char name[128];
        const char *arg = a->flag_name[k];
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (len >= sizeof name) len = sizeof name - 1;
        memcpy(name, arg, len);
        name[len] = '\0';
        if ((rc = drift_plan_apply_flag(out, name, a->flag_value[k], err))) {
            drift_plan_free(out);
            return rc;
        }
    }
    return DRIFT_OK;
}

int drift_cli_load_plan(const char *path, drift_plan *out, drift_err *err) {
    drift_plan_init(out);
    return drift_plan_load_file(out, path, err);
}

/* Length of the valid UTF-8 sequence at p that is not a C1 control, or 0. */
static size_t utf8_ok(const unsigned char *p) {
    if (p[0] < 0x80) return 1;
    size_t n = p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 && p[0] < 0xe0 ? 2 : 0;
    if (!n) return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    if (n == 2 && p[0] == 0xc2 && p[1] < 0xa0) return 0; /* U+0080..U+009F */
    if (n == 3 && p[0] == 0xe0 && p[1] < 0xa0) return 0; /* overlong */
    if (n == 4 && p[0] == 0xf0 && p[1] < 0x90) return 0;
    return n;
}

const char *drift_cli_printable(const char *s, char *buf, size_t sz) {
    if (!buf || !sz) return "";
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        size_t n = *p >= 0x20 && *p != 0x7f ? utf8_ok(p) : 0;
        if (o + (n ? n : 4) + 4 > sz) {
            snprintf(buf + o, sz - o, "...");
            return buf;
        }
        if (n) {
            memcpy(buf + o, p, n);
            o += n;
            p += n;
        } else {
            o += (size_t)snprintf(buf + o, sz - o, "\\x%02x", *p);
            p++;
        }
    }
    buf[o] = '\0';
    return buf;
}

int drift_cli_report(const char *cmd, const drift_err *err) {
    char buf[2048], safe[4096];
    fprintf(stderr, "drift %s: %s\n", cmd, drift_cli_printable(drift_err_format(err, buf, sizeof buf), safe, sizeof safe));
    return drift_err_exit_code(err->code);
}

int drift_cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "drift %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(see 'drift %s --help')\n", cmd);
    va_end(ap);
    return 2;
}

int drift_cli_progress_enabled(void) { return isatty(STDERR_FILENO); }
