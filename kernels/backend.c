/* Backend creation from a spec, shape rules and op names (kernels/backend.h);
 * the checked calls are in kernels/door.c. */
#include "kernels/backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/aten_internal.h"
#include "kernels/cpu/host_internal.h" /* DRIFT_HOST_MAX_THREADS */
#ifdef DRIFT_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h" /* the profile and identity of a CUDA backend */
#endif

/* ------------------------------------------------------------------------ */
/* Creation                                                                   */

static int host_threads_default; /* 0: online cores (drift_backend_set_host_threads) */

void drift_backend_set_host_threads(int n) { host_threads_default = n >= 1 && n <= 256 ? n : 0; }

int drift_backend_host_threads(const drift_backend_opts *o, int *n, drift_err *err) {
    long v = host_threads_default;
    if (v == 0) {
        v = sysconf(_SC_NPROCESSORS_ONLN);
        if (v < 1) v = 1;
        if (v > DRIFT_HOST_MAX_THREADS) v = DRIFT_HOST_MAX_THREADS;
    }
    int rc = drift_backend_opt_int(o, "threads", 1, 256, &v, err);
    if (rc) return rc;
    *n = (int)v;
    return DRIFT_OK;
}

const char *drift_backend_opt_str(const drift_backend_opts *o, const char *key) {
    for (int i = 0; o && i < o->n; i++)
        if (strcmp(o->key[i], key) == 0) return o->value[i];
    return NULL;
}

int drift_backend_opt_int(const drift_backend_opts *o, const char *key, long lo, long hi, long *v, drift_err *err) {
    const char *s = drift_backend_opt_str(o, key);
    if (!s) return DRIFT_OK;
    char *end = NULL;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (errno || !*s || *end || x < lo || x > hi)
        return drift_err_set(err, DRIFT_E_INPUT, "backend", "backend '%s': option %s=%s: expected an integer in %ld..%ld",
                             o->spec, key, s, lo, hi);
    *v = x;
    return DRIFT_OK;
}

int drift_backend_opts_check(const drift_backend_opts *o, const char *const *keys, drift_err *err) {
    for (int i = 0; i < o->n; i++) {
        int known = 0;
        for (int k = 0; keys && keys[k]; k++) known |= strcmp(o->key[i], keys[k]) == 0;
        if (known) continue;
        char list[256] = "";
        size_t len = 0;
        for (int k = 0; keys && keys[k] && len < sizeof list; k++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", k ? ", " : "", keys[k]);
        return drift_err_set(err, DRIFT_E_INPUT, "backend", "backend '%s': unknown option '%s' (expected %s)", o->spec,
                             o->key[i], keys && keys[0] ? list : "no options");
    }
    return DRIFT_OK;
}

/* Splits "KIND[:N][:K=V...]" into its kind (returned in kind) and options. */
static int parse_spec(const char *spec, char *kind, size_t kind_sz, drift_backend_opts *o, drift_err *err) {
    memset(o, 0, sizeof *o);
    o->spec = spec;
    const char *p = spec, *colon = strchr(p, ':');
    size_t kl = colon ? (size_t)(colon - p) : strlen(p);
    if (kl == 0 || kl >= kind_sz)
        return drift_err_set(err, DRIFT_E_INPUT, "backend", "backend '%s': expected ref, cpu, cuda or cuda:N", spec);
    memcpy(kind, p, kl);
    kind[kl] = '\0';
    int first = 1;
    while (colon) {
        p = colon + 1;
        colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq && first && len > 0 && len <= 4 && strspn(p, "0123456789") == len) {
            o->device = atoi(p); /* cuda:N */
            first = 0;
            continue;
        }
        first = 0;
        size_t klen = eq ? (size_t)(eq - p) : 0, vlen = eq ? len - klen - 1 : 0;
        if (!eq || klen == 0 || vlen == 0 || klen >= sizeof o->key[0] || vlen >= sizeof o->value[0])
            return drift_err_set(err, DRIFT_E_INPUT, "backend",
                                 "backend '%s': option '%.*s': expected KEY=VALUE (or a device number after cuda)",
                                 spec, (int)len, p);
        if (o->n == DRIFT_BACKEND_MAX_OPTS)
            return drift_err_set(err, DRIFT_E_INPUT, "backend", "backend '%s': more than %d options", spec,
                                 DRIFT_BACKEND_MAX_OPTS);
        memcpy(o->key[o->n], p, klen);
        o->key[o->n][klen] = '\0';
        memcpy(o->value[o->n], eq + 1, vlen);
        o->value[o->n][vlen] = '\0';
        for (int i = 0; i < o->n; i++)
            if (strcmp(o->key[i], o->key[o->n]) == 0)
                return drift_err_set(err, DRIFT_E_INPUT, "backend", "backend '%s': option '%s' given twice", spec,
                                     o->key[i]);
        o->n++;
    }
    return DRIFT_OK;
}

int drift_backend_create(const char *spec, drift_backend **out, drift_err *err) {
    if (!out) return drift_err_set(err, DRIFT_E_INTERNAL, "backend", "drift_backend_create: out is NULL");
    *out = NULL;
    if (!spec || !*spec)
        return drift_err_set(err, DRIFT_E_INPUT, "backend", "empty backend name (expected ref, cpu, cuda or cuda:N)");
    char kind[16];
    drift_backend_opts o;
    int rc = parse_spec(spec, kind, sizeof kind, &o, err);
    if (rc) return rc;
    if (strcmp(kind, "cuda") != 0 && strcmp(kind, "ref-cuda") != 0 && o.device != 0)
        return drift_err_set(err, DRIFT_E_INPUT, "backend", "backend '%s': only cuda and ref-cuda take a device number",
                             spec);
    if (strcmp(kind, "ref") == 0) return drift_ref_backend_create(&o, out, err);
    if (strcmp(kind, "cpu") == 0) return drift_cpu_backend_create(&o, out, err);
    if (strcmp(kind, "cuda") == 0 || strcmp(kind, "ref-cuda") == 0) { /* ref-cuda: the fp64 oracle on a GPU */
#ifdef DRIFT_HAVE_CUDA
        if (kind[0] == 'r') return drift_cuda_ref_backend_create(&o, out, err);
        return drift_cuda_backend_create_opts(&o, out, err);
#else
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, "backend",
                             "backend '%s': this drift was built without CUDA (configure with -DDRIFT_CUDA=ON)",
                             spec);
#endif
    }
    return drift_err_set(err, DRIFT_E_INPUT, "backend",
                         "unknown backend '%s' (expected ref, cpu, cuda, cuda:N or ref-cuda:N)", spec);
}

const char *drift_backend_kernels(const drift_backend *be) {
#ifdef DRIFT_HAVE_CUDA
    int p = drift_cuda_backend_kernel_profile(be);
    return p < 0 ? NULL : drift_cuda_kernel_profile_name(p);
#else
    (void)be;
    return NULL;
#endif
}

int64_t drift_backend_kernel_fallbacks(const drift_backend *be, char *ops, size_t ops_size, char *why,
                                       size_t why_size) {
    if (ops && ops_size) ops[0] = '\0';
    if (why && why_size) why[0] = '\0';
#ifdef DRIFT_HAVE_CUDA
    if (!drift_cuda_backend_is_cuda(be)) return 0;
    int64_t n = 0;
    const uint64_t mask = drift_cuda_backend_torch_fallbacks(be, &n);
    size_t len = 0;
    for (int k = 0; k < 64 && ops && ops_size; k++) {
        if (!(mask & (1ull << (unsigned)k))) continue;
        const char *r = drift_cuda_backend_torch_fallback_reason_of(be, k);
        int w = snprintf(ops + len, ops_size - len, "%s%s%s%s%s", len ? "; " : "", drift_op_name((drift_op_kind)k),
                         r[0] ? " (" : "", r, r[0] ? ")" : "");
        if (w < 0 || (size_t)w >= ops_size - len) break;
        len += (size_t)w;
    }
    if (why && why_size) snprintf(why, why_size, "%s", n ? drift_cuda_backend_torch_fallback_reason(be) : "");
    return n;
#else
    (void)be;
    return 0;
#endif
}

/* 1 if spec is "cuda", "cuda:..." (not ref-cuda). */
static int spec_is_cuda(const char *spec) { return spec && strncmp(spec, "cuda", 4) == 0 && (!spec[4] || spec[4] == ':'); }

int drift_backend_spec_with_kernels(const char *spec, const char *kernels, char *out, size_t sz, drift_err *err) {
    if (!out || sz == 0) return drift_err_set(err, DRIFT_E_INTERNAL, "backend", "spec_with_kernels: no output buffer");
    const char *s = spec ? spec : "cpu";
    int add = kernels && spec_is_cuda(s) && !strstr(s, "kernels=");
    int n = add ? snprintf(out, sz, "%s:kernels=%s", s, kernels) : snprintf(out, sz, "%s", s);
    if (n < 0 || (size_t)n >= sz)
        return drift_err_set(err, DRIFT_E_INPUT, "backend", "backend '%s': spec too long (at most %zu bytes)", s, sz - 1);
    return DRIFT_OK;
}

int drift_backend_libraries(const drift_backend *be, drift_libraries *out) {
    drift_libraries_init(out);
#ifdef DRIFT_HAVE_CUDA
    drift_cuda_identity id;
    if (!out || !drift_cuda_backend_is_cuda(be) || drift_cuda_backend_identity(be, &id, NULL)) return 0;
    snprintf(out->gpu_name, sizeof out->gpu_name, "%s", id.gpu_name);
    out->cc_major = id.cc_major;
    out->cc_minor = id.cc_minor;
    out->driver_version = id.driver_version;
    out->runtime_version = id.runtime_version;
    out->cublaslt_version = id.cublaslt_version;
    out->cublas_version = id.cublas_version;
    out->cudnn_version = id.cudnn_version;
    snprintf(out->cublaslt_path, sizeof out->cublaslt_path, "%s", id.cublaslt_path);
    snprintf(out->cudnn_path, sizeof out->cudnn_path, "%s", id.cudnn_path);
    return 1;
#else
    (void)be;
    return 0;
#endif
}

void drift_backend_free(drift_backend *be) {
    if (!be) return;
    if (be->destroy) be->destroy(be);
}

/* ------------------------------------------------------------------------ */
/* Shapes                                                                     */

#define NUMEL_LIMIT ((int64_t)1 << 48)

int64_t drift_shape_numel(int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > DRIFT_MAX_DIMS) return -1;
    if (ndim > 0 && !shape) return -1;
    int64_t n = 1;
    int zero = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || shape[i] > NUMEL_LIMIT) return -1;
        if (shape[i] == 0) {
            zero = 1;
            continue;
        }
        if (n > NUMEL_LIMIT / shape[i]) return -1;
        n *= shape[i];
    }
    return zero ? 0 : n;
}

static const char *const op_names[DRIFT_OP_COUNT] = {
    [DRIFT_OP_CAST] = "cast",
    [DRIFT_OP_LINEAR] = "linear",
    [DRIFT_OP_ADD] = "add",
    [DRIFT_OP_SUB] = "sub",
    [DRIFT_OP_MUL] = "mul",
    [DRIFT_OP_AFFINE] = "affine",
    [DRIFT_OP_SILU] = "silu",
    [DRIFT_OP_GELU_TANH] = "gelu_tanh",
    [DRIFT_OP_LAYER_NORM] = "layer_norm",
    [DRIFT_OP_RMS_NORM] = "rms_norm",
    [DRIFT_OP_ROPE] = "rope",
    [DRIFT_OP_ATTENTION] = "attention",
    [DRIFT_OP_PERMUTE] = "permute",
    [DRIFT_OP_NARROW] = "narrow",
    [DRIFT_OP_CONCAT] = "concat",
    [DRIFT_OP_VIEW] = "view",
    [DRIFT_OP_PATCHIFY] = "patchify",
    [DRIFT_OP_UNPATCHIFY] = "unpatchify",
    [DRIFT_OP_TIMESTEP_SINUSOID] = "timestep_sinusoid",
    [DRIFT_OP_UNARY] = "unary",
    [DRIFT_OP_SCALAR] = "scalar",
    [DRIFT_OP_DIV] = "div",
    [DRIFT_OP_REDUCE] = "reduce",
    [DRIFT_OP_STRIDED] = "strided",
    [DRIFT_OP_SCATTER] = "scatter",
    [DRIFT_OP_FILL] = "fill",
    [DRIFT_OP_BINARY] = "binary",
    [DRIFT_OP_WHERE] = "where",
    [DRIFT_OP_TAKE] = "take",
    [DRIFT_OP_PUT] = "put",
    [DRIFT_OP_ARGSORT] = "argsort",
    [DRIFT_OP_CUMSUM] = "cumsum",
    [DRIFT_OP_SOFTMAX] = "softmax",
    [DRIFT_OP_BMM] = "bmm",
    [DRIFT_OP_GROUP_NORM] = "group_norm",
    [DRIFT_OP_NONZERO] = "nonzero",
};

const char *drift_op_name(drift_op_kind k) {
    if ((int)k < 0 || k >= DRIFT_OP_COUNT) return "invalid";
    return op_names[k];
}

static void fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

#define SHAPE_BUF 160

int drift_op_shape_err(drift_err *err, const drift_op *op, const char *fmt, ...) {
    char where[64];
    snprintf(where, sizeof where, "op %s", drift_op_name(op->kind));
    va_list ap;
    va_start(ap, fmt);
    drift_err_vset(err, DRIFT_E_INPUT, where, fmt, ap);
    va_end(ap);
    return DRIFT_E_INPUT;
}

static int valid_tensor_shape(const drift_tensor *t) {
    return t && t->ndim >= 0 && t->ndim <= DRIFT_MAX_DIMS && drift_shape_numel(t->ndim, t->shape) >= 0;
}

static void copy_shape(const drift_tensor *t, int *ndim, int64_t *shape) {
    *ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++) shape[i] = t->shape[i];
}

void drift_attn_bias_strides(const drift_tensor *bias, int64_t s[3]) {
    const int64_t Lk = bias->shape[3], Lqb = bias->shape[2], Hb = bias->shape[1];
    s[0] = bias->shape[0] > 1 ? Hb * Lqb * Lk : 0;
    s[1] = Hb > 1 ? Lqb * Lk : 0;
    s[2] = Lqb > 1 ? Lk : 0;
}

int drift_op_norm_dim(int dim, int ndim) {
    if (dim < 0) dim += ndim;
    return (dim < 0 || dim >= ndim) ? -1 : dim;
}

static int patch_ok(const int *p) {
    for (int i = 0; i < 3; i++)
        if (p[i] < 1 || p[i] > 65536) return 0;
    return 1;
}

/* Inputs each kind takes: [lo, hi]. */
static void n_in_range(drift_op_kind k, int *lo, int *hi) {
    switch (k) {
    case DRIFT_OP_LINEAR: *lo = 2; *hi = 3; return;
    case DRIFT_OP_ADD: case DRIFT_OP_SUB: case DRIFT_OP_MUL: case DRIFT_OP_CONCAT: *lo = 2; *hi = 2; return;
    case DRIFT_OP_LAYER_NORM: *lo = 1; *hi = 3; return;
    case DRIFT_OP_RMS_NORM: *lo = 1; *hi = 2; return;
    case DRIFT_OP_ROPE: *lo = 3; *hi = 3; return;
    case DRIFT_OP_ATTENTION: *lo = 3; *hi = 4; return;
    default:
        if (drift_aten_is_kind(k)) drift_aten_n_in_range(k, lo, hi);
        else *lo = *hi = 1;
        return;
    }
}

/* Output shape rules. VIEW and UNPATCHIFY cannot derive their output shape
 * from the inputs alone: for them (*ndim, shape) on entry is the requested
 * output shape, validated here and left as is. */
int drift_op_infer_shape(const drift_op *op, const drift_tensor *const *in, int *ndim, int64_t *shape,
                         drift_err *err) {
    char s0[SHAPE_BUF], s1[SHAPE_BUF], s2[SHAPE_BUF];
    if (!op || !ndim || !shape)
        return drift_err_set(err, DRIFT_E_INTERNAL, "op", "drift_op_infer_shape: NULL argument");
    if ((int)op->kind < 0 || op->kind >= DRIFT_OP_COUNT)
        return drift_err_set(err, DRIFT_E_INPUT, "op", "invalid op kind %d", (int)op->kind);
    int lo, hi;
    n_in_range(op->kind, &lo, &hi);
    if (op->n_in < lo || op->n_in > hi)
        return drift_op_shape_err(err, op, "takes %d..%d inputs, got n_in = %d", lo, hi, op->n_in);
    if (!in) return drift_op_shape_err(err, op, "inputs array is NULL");
    for (int i = 0; i < op->n_in; i++) {
        if (!in[i]) return drift_op_shape_err(err, op, "input %d is NULL", i);
        if (!valid_tensor_shape(in[i])) return drift_op_shape_err(err, op, "input %d has an invalid shape", i);
    }
    if (drift_aten_is_kind(op->kind)) return drift_aten_infer_shape(op, in, ndim, shape, err);
    const drift_tensor *a = in[0], *b = op->n_in > 1 ? in[1] : NULL, *c = op->n_in > 2 ? in[2] : NULL;
    fmt_shape(s0, sizeof s0, a->ndim, a->shape);

    switch (op->kind) {
    case DRIFT_OP_CAST:
    case DRIFT_OP_AFFINE:
    case DRIFT_OP_SILU:
    case DRIFT_OP_GELU_TANH:
        copy_shape(a, ndim, shape);
        return DRIFT_OK;

    case DRIFT_OP_LINEAR: {
        if (a->ndim < 1) return drift_op_shape_err(err, op, "x must have at least 1 dim, got %s", s0);
        fmt_shape(s1, sizeof s1, b->ndim, b->shape);
        if (b->ndim != 2) return drift_op_shape_err(err, op, "weight must be [N, K], got %s", s1);
        int64_t K = a->shape[a->ndim - 1], N = b->shape[0];
        if (b->shape[1] != K) return drift_op_shape_err(err, op, "x %s and weight %s disagree on K", s0, s1);
        if (c) {
            fmt_shape(s2, sizeof s2, c->ndim, c->shape);
            if (c->ndim != 1 || c->shape[0] != N) return drift_op_shape_err(err, op, "bias must be [%lld], got %s", (long long)N, s2);
        }
        copy_shape(a, ndim, shape);
        shape[a->ndim - 1] = N;
        return DRIFT_OK;
    }

    case DRIFT_OP_ADD:
    case DRIFT_OP_SUB:
    case DRIFT_OP_MUL: {
        int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
        int64_t out[DRIFT_MAX_DIMS];
        for (int i = 0; i < nd; i++) {
            int ia = a->ndim - nd + i, ib = b->ndim - nd + i;
            int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
            if (da != db && da != 1 && db != 1) {
                fmt_shape(s1, sizeof s1, b->ndim, b->shape);
                return drift_op_shape_err(err, op, "shapes %s and %s do not broadcast", s0, s1);
            }
            out[i] = da == 1 ? db : da;
        }
        *ndim = nd;
        for (int i = 0; i < nd; i++) shape[i] = out[i];
        return DRIFT_OK;
    }

    case DRIFT_OP_LAYER_NORM:
    case DRIFT_OP_RMS_NORM: {
        if (a->ndim < 1) return drift_op_shape_err(err, op, "x must have at least 1 dim, got %s", s0);
        int64_t D = a->shape[a->ndim - 1];
        for (int i = 1; i < op->n_in; i++) {
            if (drift_shape_numel(in[i]->ndim, in[i]->shape) != D) {
                fmt_shape(s1, sizeof s1, in[i]->ndim, in[i]->shape);
                return drift_op_shape_err(err, op, "%s %s must have %lld elements (x is %s)", i == 1 ? "weight" : "bias", s1,
                                 (long long)D, s0);
            }
        }
        copy_shape(a, ndim, shape);
        return DRIFT_OK;
    }

    case DRIFT_OP_ROPE: {
        if (a->ndim != 4) return drift_op_shape_err(err, op, "x must be [B, L, H, Dh], got %s", s0);
        int64_t L = a->shape[1], Dh = a->shape[3];
        if (Dh % 2) return drift_op_shape_err(err, op, "head dim %lld of x %s must be even", (long long)Dh, s0);
        for (int i = 1; i < 3; i++) {
            const drift_tensor *t = in[i];
            fmt_shape(s1, sizeof s1, t->ndim, t->shape);
            if (t->ndim < 1 || t->shape[t->ndim - 1] != Dh || drift_shape_numel(t->ndim, t->shape) != L * Dh)
                return drift_op_shape_err(err, op, "%s table must be [L=%lld, Dh=%lld], got %s", i == 1 ? "cos" : "sin",
                                 (long long)L, (long long)Dh, s1);
        }
        copy_shape(a, ndim, shape);
        return DRIFT_OK;
    }

    case DRIFT_OP_ATTENTION: {
        fmt_shape(s1, sizeof s1, b->ndim, b->shape);
        fmt_shape(s2, sizeof s2, c->ndim, c->shape);
        if (op->layout != 0 && op->layout != 1)
            return drift_op_shape_err(err, op, "layout must be 0 ([B, H, L, D]) or 1 ([B, L, H, D]), got %d", op->layout);
        /* dims of H and L in this layout */
        const int hd = op->layout ? 2 : 1, ld = op->layout ? 1 : 2;
        const char *names = op->layout ? "[B, L, H, D] (layout 1)" : "[B, H, L, D]";
        if (a->ndim != 4 || b->ndim != 4 || c->ndim != 4)
            return drift_op_shape_err(err, op, "q, k, v must be %s, got %s, %s, %s", names, s0, s1, s2);
        if (a->shape[0] != b->shape[0] || a->shape[0] != c->shape[0] || a->shape[hd] != b->shape[hd] ||
            a->shape[hd] != c->shape[hd] || a->shape[3] != b->shape[3] || b->shape[ld] != c->shape[ld])
            return drift_op_shape_err(err, op, "q %s, k %s, v %s do not match (%s: q, k share B, H, Dh; k, v share Lk)", s0,
                             s1, s2, names);
        if (b->shape[ld] < 1 || a->shape[3] < 1)
            return drift_op_shape_err(err, op, "attention needs Lk >= 1 and Dh >= 1 (q %s, k %s, %s)", s0, s1, names);
        if (op->n_in > 3) { /* the additive bias [Bb, Hb, Lqb, Lk], in that order in either layout */
            const drift_tensor *bias = in[3];
            char s3[SHAPE_BUF];
            fmt_shape(s3, sizeof s3, bias->ndim, bias->shape);
            const int64_t want[4] = {a->shape[0], a->shape[hd], a->shape[ld], b->shape[ld]};
            int ok = bias->ndim == 4 && bias->shape[3] == want[3];
            for (int i = 0; ok && i < 3; i++) ok = bias->shape[i] == 1 || bias->shape[i] == want[i];
            if (!ok)
                return drift_op_shape_err(err, op,
                                          "bias %s must be [Bb, Hb, Lqb, Lk] with Bb in {1, %lld}, Hb in {1, %lld}, "
                                          "Lqb in {1, %lld}, Lk = %lld (q %s, k %s, %s)",
                                          s3, (long long)want[0], (long long)want[1], (long long)want[2],
                                          (long long)want[3], s0, s1, names);
            if (bias->dtype != DRIFT_DTYPE_INVALID && bias->dtype != DRIFT_F32 && bias->dtype != DRIFT_F64)
                return drift_op_shape_err(err, op, "bias must be fp32 (fp64 in the oracle), got %s",
                                          drift_dtype_name(bias->dtype));
        }
        copy_shape(a, ndim, shape);
        shape[3] = c->shape[3];
        return DRIFT_OK;
    }

    case DRIFT_OP_PERMUTE: {
        int seen[DRIFT_MAX_DIMS] = {0};
        for (int i = 0; i < a->ndim; i++) {
            int p = op->perm[i];
            if (p < 0 || p >= a->ndim || seen[p])
                return drift_op_shape_err(err, op, "perm is not a permutation of 0..%d (x %s)", a->ndim - 1, s0);
            seen[p] = 1;
        }
        *ndim = a->ndim;
        for (int i = 0; i < a->ndim; i++) shape[i] = a->shape[op->perm[i]];
        return DRIFT_OK;
    }

    case DRIFT_OP_NARROW: {
        int d = drift_op_norm_dim(op->dim, a->ndim);
        if (d < 0) return drift_op_shape_err(err, op, "dim %d out of range for %s", op->dim, s0);
        if (op->start < 0 || op->length < 0 || op->start > a->shape[d] || op->length > a->shape[d] - op->start)
            return drift_op_shape_err(err, op, "[%lld, %lld + %lld) out of range of dim %d (size %lld) of %s",
                             (long long)op->start, (long long)op->start, (long long)op->length, d,
                             (long long)a->shape[d], s0);
        copy_shape(a, ndim, shape);
        shape[d] = op->length;
        return DRIFT_OK;
    }

    case DRIFT_OP_CONCAT: {
        fmt_shape(s1, sizeof s1, b->ndim, b->shape);
        int d = drift_op_norm_dim(op->dim, a->ndim);
        if (d < 0 || a->ndim != b->ndim) return drift_op_shape_err(err, op, "cannot concat %s and %s along dim %d", s0, s1, op->dim);
        for (int i = 0; i < a->ndim; i++)
            if (i != d && a->shape[i] != b->shape[i])
                return drift_op_shape_err(err, op, "cannot concat %s and %s along dim %d", s0, s1, op->dim);
        if (a->dtype != b->dtype)
            return drift_op_shape_err(err, op, "inputs must share a dtype (%s vs %s)", drift_dtype_name(a->dtype),
                             drift_dtype_name(b->dtype));
        copy_shape(a, ndim, shape);
        shape[d] = a->shape[d] + b->shape[d];
        return DRIFT_OK;
    }

    case DRIFT_OP_VIEW: {
        int64_t n = drift_shape_numel(*ndim, shape);
        if (n < 0) return drift_op_shape_err(err, op, "requested view shape is invalid (pass it in ndim/shape)");
        if (n != drift_shape_numel(a->ndim, a->shape)) {
            fmt_shape(s1, sizeof s1, *ndim, shape);
            return drift_op_shape_err(err, op, "cannot view %s as %s (numel differs)", s0, s1);
        }
        return DRIFT_OK;
    }

    case DRIFT_OP_PATCHIFY: {
        const int *p = op->patch;
        if (a->ndim != 5) return drift_op_shape_err(err, op, "latents must be [B, C, F, H, W], got %s", s0);
        if (op->layout != 0 && op->layout != 1)
            return drift_op_shape_err(err, op, "layout must be 0 (features c, pf, ph, pw) or 1 (pf, ph, pw, c), got %d",
                                      op->layout);
        if (!patch_ok(p) || a->shape[2] % p[0] || a->shape[3] % p[1] || a->shape[4] % p[2])
            return drift_op_shape_err(err, op, "patch (%d, %d, %d) does not tile %s", p[0], p[1], p[2], s0);
        int64_t P = (int64_t)p[0] * p[1] * p[2];
        if (a->shape[1] > NUMEL_LIMIT / P) return drift_op_shape_err(err, op, "patch (%d, %d, %d) too large", p[0], p[1], p[2]);
        *ndim = 3;
        shape[0] = a->shape[0];
        shape[1] = (a->shape[2] / p[0]) * (a->shape[3] / p[1]) * (a->shape[4] / p[2]);
        shape[2] = a->shape[1] * P;
        return DRIFT_OK;
    }

    case DRIFT_OP_UNPATCHIFY: {
        const int *p = op->patch;
        if (a->ndim != 3) return drift_op_shape_err(err, op, "tokens must be [B, L, C*pf*ph*pw], got %s", s0);
        if (!patch_ok(p)) return drift_op_shape_err(err, op, "patch sizes must be in 1..65536, got (%d, %d, %d)", p[0], p[1], p[2]);
        if (*ndim != 5 || drift_shape_numel(5, shape) < 0)
            return drift_op_shape_err(err, op, "requested output shape must be [B, C, F, H, W] (pass it in ndim/shape)");
        fmt_shape(s1, sizeof s1, *ndim, shape);
        int64_t P = (int64_t)p[0] * p[1] * p[2];
        if (shape[0] != a->shape[0] || shape[1] > NUMEL_LIMIT / P || shape[1] * P != a->shape[2] || shape[2] % p[0] || shape[3] % p[1] ||
            shape[4] % p[2] || (shape[2] / p[0]) * (shape[3] / p[1]) * (shape[4] / p[2]) != a->shape[1])
            return drift_op_shape_err(err, op, "tokens %s with patch (%d, %d, %d) do not unpatchify into %s", s0, p[0], p[1],
                             p[2], s1);
        return DRIFT_OK;
    }

    case DRIFT_OP_TIMESTEP_SINUSOID:
        if (a->ndim != 1) return drift_op_shape_err(err, op, "timesteps must be [B], got %s", s0);
        if (op->dim < 1) return drift_op_shape_err(err, op, "embedding dim (op->dim) must be >= 1, got %d", op->dim);
        *ndim = 2;
        shape[0] = a->shape[0];
        shape[1] = op->dim;
        return DRIFT_OK;

    default:
        break;
    }
    return drift_err_set(err, DRIFT_E_INPUT, "op", "invalid op kind %d", (int)op->kind);
}
