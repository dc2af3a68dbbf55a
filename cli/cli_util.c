#include "cli/cli_util.h"
#include "formats/outpath.h"
#include "formats/term_safe.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/json.h"

static int g_json_errors;

void drift_cli_set_json_errors(int on) { g_json_errors = on; }
int drift_cli_json_errors(void) { return g_json_errors; }

static const char *status_name(int code) {
    switch (code) {
    case DRIFT_E_CHECK: return "check";
    case DRIFT_E_USAGE: return "usage";
    case DRIFT_E_INPUT: return "input";
    case DRIFT_E_IO: return "io";
    case DRIFT_E_NOMEM: return "nomem";
    case DRIFT_E_UNSUPPORTED: return "unsupported";
    case DRIFT_E_INTERNAL: return "internal";
    default: return "error";
    }
}

/* The JSON error document on stdout (only for exit 2: an exit 1 has printed
 * the command's own document). */
static void json_error(const char *cmd, int code, const char *field, const char *msg) {
    if (!g_json_errors || drift_err_exit_code(code) != 2) return;
    drift_json_buf b;
    drift_json_buf_init_pretty(&b, 2);
    drift_json_buf_begin_object(&b);
    drift_json_buf_add_key(&b, "error");
    drift_json_buf_begin_object(&b);
    drift_json_buf_field_string(&b, "command", cmd);
    drift_json_buf_field_string(&b, "code", status_name(code));
    drift_json_buf_field_int(&b, "exit", 2);
    if (field && *field) drift_json_buf_field_string(&b, "field", field);
    else drift_json_buf_field_null(&b, "field");
    drift_json_buf_field_string(&b, "message", msg);
    drift_json_buf_end_object(&b);
    drift_json_buf_end_object(&b);
    char *doc = drift_json_buf_take(&b);
    drift_json_buf_free(&b);
    if (doc) {
        fflush(stdout);
        printf("%s\n", doc);
        fflush(stdout);
    }
    free(doc);
}

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

const char *drift_cli_printable(const char *s, char *buf, size_t sz) { return drift_term_safe(s, buf, sz); }

int drift_cli_report(const char *cmd, const drift_err *err) {
    char buf[2048], safe[4096];
    fprintf(stderr, "drift %s: %s\n", cmd, drift_cli_printable(drift_err_format(err, buf, sizeof buf), safe, sizeof safe));
    json_error(cmd, err->code, err->where, err->msg);
    return drift_err_exit_code(err->code);
}

static int usage_v(const char *cmd, const char *field, const char *fmt, va_list ap) {
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "drift %s: %s\n(see 'drift %s --help')\n", cmd, msg, cmd);
    json_error(cmd, DRIFT_E_USAGE, field, msg);
    return 2;
}

int drift_cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    /* the field is the option the message starts with ("--steps: ..."), if any */
    char field[128] = "";
    if (fmt[0] == '-' || (fmt[0] == '%' && fmt[1] == 's')) {
        char msg[256];
        va_list cp;
        va_copy(cp, ap);
        vsnprintf(msg, sizeof msg, fmt, cp);
        va_end(cp);
        size_t n = strcspn(msg, ": ");
        if (msg[0] == '-' && n < sizeof field) {
            memcpy(field, msg, n);
            field[n] = '\0';
        }
    }
    int rc = usage_v(cmd, field, fmt, ap);
    va_end(ap);
    return rc;
}

int drift_cli_usage_error_field(const char *cmd, const char *field, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = usage_v(cmd, field, fmt, ap);
    va_end(ap);
    return rc;
}

int drift_cli_progress_enabled(void) { return !g_json_errors && isatty(STDERR_FILENO); }

int drift_cli_check_output(const char *cmd, const char *field, const char *path, int force) {
    drift_err e;
    drift_err_clear(&e);
    int rc = drift_outpath_check(path, force, &e); /* formats/outpath.h: regular files only */
    if (!rc) return 0;
    if (rc == DRIFT_E_USAGE || strstr(e.msg, "no such directory")) /* said before any work, as a usage error */
        return drift_cli_usage_error_field(cmd, field, "%s: %s", field, e.msg);
    return drift_cli_report(cmd, &e);
}

int drift_cli_check_input(const char *cmd, const char *field, const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    char *hash = strstr(buf, "#rank=");
    if (hash) *hash = '\0';
    struct stat st;
    if (stat(buf, &st) != 0) {
        drift_err e;
        drift_err_set(&e, DRIFT_E_INPUT, buf, "cannot open: %s", strerror(errno));
        return drift_cli_report(cmd, &e);
    }
    if (S_ISDIR(st.st_mode)) {
        drift_err e;
        drift_err_set(&e, DRIFT_E_INPUT, buf, "is a directory (%s expects a drift trace file)", field);
        return drift_cli_report(cmd, &e);
    }
    if (!S_ISREG(st.st_mode)) { /* a FIFO would block the open forever */
        drift_err e;
        drift_err_set(&e, DRIFT_E_INPUT, buf, "is not a regular file (a FIFO, socket or device; %s expects a drift trace file)",
                      field);
        return drift_cli_report(cmd, &e);
    }
    return 0;
}

int drift_cli_check_device(const char *cmd, const char *field, const char *v) {
    /* a backend spec KIND[:N][:K=V...] (kernels/backend.h); the backend
     * judges the number and the options, this checks the kind */
    size_t kl = strcspn(v, ":");
    int host = (kl == 3 && strncmp(v, "cpu", 3) == 0) || (kl == 3 && strncmp(v, "ref", 3) == 0);
    int cuda = (kl == 4 && strncmp(v, "cuda", 4) == 0) || (kl == 8 && strncmp(v, "ref-cuda", 8) == 0);
    if (v[kl] == ':' && !v[kl + 1]) host = cuda = 0; /* "cuda:" */
    if (host) return 0;
    if (!cuda) {
        const char *hint = strncmp(v, "gpu", 3) == 0 || strncmp(v, "cud", 3) == 0 ? " (did you mean 'cuda'?)" : "";
        return drift_cli_usage_error_field(cmd, field, "%s: expected cpu, cuda or cuda:N, got '%s'%s", field, v, hint);
    }
#ifndef DRIFT_HAVE_CUDA
    drift_err e;
    drift_err_set(&e, DRIFT_E_UNSUPPORTED, field,
                  "'%s': this drift was built without CUDA (configure with -DDRIFT_CUDA=ON); use --device cpu", v);
    return drift_cli_report(cmd, &e);
#else
    return 0;
#endif
}

int drift_cli_check_devices(const char *cmd, const char *field, const char *list) {
    const char *p = list;
    for (int k = 0;; k++) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char one[64];
        if (n == 0 || n >= sizeof one)
            return drift_cli_usage_error_field(cmd, field, "%s: %s item in '%.200s' (expected a comma-separated list of cpu, "
                                               "cuda or cuda:N)", field, n ? "an over-long" : "an empty", list);
        memcpy(one, p, n);
        one[n] = '\0';
        /* the spelling only: mixing kinds and CUDA in this build are the replay's to judge */
        int ok = strcmp(one, "cpu") == 0 || strcmp(one, "cuda") == 0;
        if (!ok && strncmp(one, "cuda:", 5) == 0 && one[5]) {
            char *end = NULL;
            long d = strtol(one + 5, &end, 10);
            ok = end && !*end && d >= 0 && d <= 1024;
        }
        if (!ok)
            return drift_cli_usage_error_field(cmd, field, "%s: worker %d: expected cpu, cuda or cuda:N, got '%s'", field, k, one);
        if (!e) return 0;
        p = e + 1;
    }
}
