/* Library identity: text forms and the recording-vs-replay comparison
 * (formats/libraries.h). Pure: no HDF5, no CUDA. */
#include "formats/libraries.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void drift_libraries_init(drift_libraries *l) {
    if (l) memset(l, 0, sizeof *l);
}

int drift_libraries_known(const drift_libraries *l) {
    return l && (l->gpu_name[0] || l->cublaslt_version > 0);
}

const char *drift_libraries_version_text(const char *kind, int64_t v, char *buf, size_t sz) {
    if (!buf || sz == 0) return buf;
    if (v <= 0 || !kind) {
        snprintf(buf, sz, "unknown");
    } else if (strcmp(kind, "driver") == 0 || strcmp(kind, "runtime") == 0) {
        snprintf(buf, sz, "%lld.%lld", (long long)(v / 1000), (long long)(v % 1000 / 10));
    } else if (strcmp(kind, "cudnn") == 0 && v < 90000) { /* cuDNN 8 and older: major x 1000 */
        snprintf(buf, sz, "%lld.%lld.%lld", (long long)(v / 1000), (long long)(v % 1000 / 100), (long long)(v % 100));
    } else {
        snprintf(buf, sz, "%lld.%lld.%lld", (long long)(v / 10000), (long long)(v % 10000 / 100), (long long)(v % 100));
    }
    return buf;
}

const char *drift_libraries_escape(const char *s, char *buf, size_t sz) {
    if (!buf || sz < 4) return buf;
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        char tmp[5];
        size_t n;
        if (*p < 0x20 || *p >= 0x7f) n = (size_t)snprintf(tmp, sizeof tmp, "\\x%02x", *p);
        else if (*p == '\\') n = (size_t)snprintf(tmp, sizeof tmp, "\\\\");
        else n = (size_t)snprintf(tmp, sizeof tmp, "%c", *p);
        if (o + n + 1 > sz) { /* does not fit: end with "..." */
            while (o + 4 > sz && o > 0) o--;
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(buf + o, tmp, n);
        o += n;
    }
    buf[o] = '\0';
    return buf;
}

/* Appends printf output to buf at *len, never past sz. */
static void add(char *buf, size_t sz, size_t *len, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void add(char *buf, size_t sz, size_t *len, const char *fmt, ...) {
    if (*len >= sz) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, sz - *len, fmt, ap);
    va_end(ap);
    if (n > 0) *len = (size_t)n >= sz - *len ? sz - 1 : *len + (size_t)n;
}

const char *drift_libraries_describe(const drift_libraries *l, char *buf, size_t sz) {
    if (!buf || sz == 0) return buf;
    buf[0] = '\0';
    if (!l) return buf;
    size_t len = 0;
    char e[DRIFT_LIBRARIES_NAME_MAX * 4], v[32];
    add(buf, sz, &len, "%s", l->gpu_name[0] ? drift_libraries_escape(l->gpu_name, e, sizeof e) : "unknown GPU");
    if (l->cc_major > 0) add(buf, sz, &len, " (sm_%d%d)", l->cc_major, l->cc_minor);
    static const char *const kinds[5] = {"driver", "runtime", "cublaslt", "cublas", "cudnn"};
    static const char *const labels[5] = {"driver", "runtime", "cuBLASLt", "cuBLAS", "cuDNN"};
    const int64_t vals[5] = {l->driver_version, l->runtime_version, l->cublaslt_version, l->cublas_version,
                             l->cudnn_version};
    for (int k = 0; k < 5; k++)
        add(buf, sz, &len, ", %s %s", labels[k], drift_libraries_version_text(kinds[k], vals[k], v, sizeof v));
    if (l->torch_version[0]) add(buf, sz, &len, ", torch %s", drift_libraries_escape(l->torch_version, e, sizeof e));
    if (l->compiled) {
        char m[DRIFT_LIBRARIES_PATH_MAX * 4];
        add(buf, sz, &len, ", torch.compile (inductor %s: %s)",
            l->inductor_mode[0] ? drift_libraries_escape(l->inductor_mode, e, sizeof e) : "mode unknown",
            l->compiled_modules[0] ? drift_libraries_escape(l->compiled_modules, m, sizeof m) : "the model");
    }
    return buf;
}

int drift_libraries_compiled_message(const drift_libraries *rec, const char *first_site, char *msg, size_t sz) {
    if (!msg || sz == 0) return 0;
    msg[0] = '\0';
    if (!rec || !rec->compiled) return 0;
    char e[DRIFT_LIBRARIES_NAME_MAX * 4], m[DRIFT_LIBRARIES_PATH_MAX * 4], f[DRIFT_LIBRARIES_PATH_MAX * 4];
    size_t len = 0;
    add(msg, sz, &len, "bitwise equality with the recording is not expected: the recording ran torch.compile'd kernels "
        "(inductor %s; compiled: %s), replay follows eager semantics",
        rec->inductor_mode[0] ? drift_libraries_escape(rec->inductor_mode, e, sizeof e) : "mode unknown",
        rec->compiled_modules[0] ? drift_libraries_escape(rec->compiled_modules, m, sizeof m) : "the model");
    if (first_site && first_site[0])
        add(msg, sz, &len, "; it first shows at %s", drift_libraries_escape(first_site, f, sizeof f));
    else
        add(msg, sz, &len, "; no site diverged");
    return 1;
}

const char *drift_libraries_verdict_name(drift_libraries_verdict v) {
    return v == DRIFT_LIBRARIES_SAME ? "same" : v == DRIFT_LIBRARIES_DIFFER ? "differ" : "none";
}

/* One numbered field of the comparison. */
typedef struct field {
    const char *label, *kind; /* kind: drift_libraries_version_text's, NULL for a string */
    int64_t rec, here;
    const char *srec, *shere;
} field;

static int field_known(const field *f, int rec) {
    if (f->kind) return (rec ? f->rec : f->here) > 0;
    const char *s = rec ? f->srec : f->shere;
    return s && s[0];
}

static const char *field_text(const field *f, int rec, char *buf, size_t sz) {
    if (f->kind) return drift_libraries_version_text(f->kind, rec ? f->rec : f->here, buf, sz);
    char e[DRIFT_LIBRARIES_NAME_MAX * 4];
    snprintf(buf, sz, "'%s'", drift_libraries_escape(rec ? f->srec : f->shere, e, sizeof e));
    return buf;
}

static int field_equal(const field *f) { return f->kind ? f->rec == f->here : strcmp(f->srec, f->shere) == 0; }

drift_libraries_verdict drift_libraries_compare(const drift_libraries *rec, const drift_libraries *here, char *msg,
                                                size_t sz) {
    if (!msg || sz == 0) return DRIFT_LIBRARIES_NONE;
    msg[0] = '\0';
    if (!here || !drift_libraries_known(here)) {
        snprintf(msg, sz, "not a CUDA device: no library identity to compare with the recording's");
        return DRIFT_LIBRARIES_NONE;
    }
    if (!rec || !drift_libraries_known(rec)) {
        snprintf(msg, sz, "the trace records no library identity: bitwise equality with the recording cannot be judged");
        return DRIFT_LIBRARIES_NONE;
    }
    char ccr[16] = "", cch[16] = "";
    if (rec->cc_major > 0) snprintf(ccr, sizeof ccr, "sm_%d%d", rec->cc_major, rec->cc_minor);
    if (here->cc_major > 0) snprintf(cch, sizeof cch, "sm_%d%d", here->cc_major, here->cc_minor);
    /* the first five decide; driver and runtime are named only */
    const field fs[7] = {
        {"GPU", NULL, 0, 0, rec->gpu_name, here->gpu_name},
        {"compute capability", NULL, 0, 0, ccr, cch},
        {"cuBLASLt", "cublaslt", rec->cublaslt_version, here->cublaslt_version, NULL, NULL},
        {"cuBLAS", "cublas", rec->cublas_version, here->cublas_version, NULL, NULL},
        {"cuDNN", "cudnn", rec->cudnn_version, here->cudnn_version, NULL, NULL},
        {"CUDA driver", "driver", rec->driver_version, here->driver_version, NULL, NULL},
        {"CUDA runtime", "runtime", rec->runtime_version, here->runtime_version, NULL, NULL},
    };
    char diff[1024] = "", minor[512] = "", unknown[256] = "";
    size_t ld = 0, lm = 0, lu = 0;
    int n_diff = 0;
    for (int k = 0; k < 7; k++) {
        const field *f = &fs[k];
        int kr = field_known(f, 1), kh = field_known(f, 0);
        if (!kr || !kh) {
            if (k < 5) add(unknown, sizeof unknown, &lu, "%s%s", lu ? ", " : "", f->label);
            continue;
        }
        if (field_equal(f)) continue;
        char a[DRIFT_LIBRARIES_NAME_MAX * 4 + 4], b[DRIFT_LIBRARIES_NAME_MAX * 4 + 4];
        field_text(f, 0, a, sizeof a);
        field_text(f, 1, b, sizeof b);
        if (k < 5) {
            add(diff, sizeof diff, &ld, "%s%s %s here vs %s recorded", ld ? ", " : "", f->label, a, b);
            n_diff++;
        } else {
            add(minor, sizeof minor, &lm, "%s%s %s here vs %s recorded", lm ? ", " : "", f->label, a, b);
        }
    }
    size_t len = 0;
    if (n_diff) {
        add(msg, sz, &len, "bitwise equality with the recording is not expected: %s", diff);
    } else {
        char v1[32], v2[32], e[DRIFT_LIBRARIES_NAME_MAX * 4];
        add(msg, sz, &len, "same libraries as the recording (%s%s%s, cuBLASLt %s, cuDNN %s)",
            drift_libraries_escape(here->gpu_name, e, sizeof e), cch[0] ? " " : "", cch,
            drift_libraries_version_text("cublaslt", here->cublaslt_version, v1, sizeof v1),
            drift_libraries_version_text("cudnn", here->cudnn_version, v2, sizeof v2));
    }
    if (lu) add(msg, sz, &len, "; not known on both sides: %s", unknown);
    if (lm) add(msg, sz, &len, "; also %s (not expected to change cuBLAS(Lt)/cuDNN results)", minor);
    return n_diff ? DRIFT_LIBRARIES_DIFFER : DRIFT_LIBRARIES_SAME;
}

int drift_libraries_from_torch(const char *producer, const drift_libraries *l) {
    if (l && l->torch_version[0]) return 1;
    /* the binding names torch when the job had it loaded (a numpy-only recording has no torch kernels) */
    return producer && strncmp(producer, "drift-recorder-python ", 22) == 0 && strstr(producer, " torch ") != NULL;
}
