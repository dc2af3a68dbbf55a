/* The cpu backend: storage, transfers, metrics and the backend struct.
 * Op bodies: cpu_ops.c. Storage is float; a tensor's values are always
 * exactly representable in its dtype (fp32, bf16 or fp16; fp64 tensors
 * belong to the ref backend). */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/host_internal.h"

/* Declared here as well so that a netlib cblas.h (no OpenBLAS extensions)
 * still compiles; the library linked is OpenBLAS (CMake: find_library). */
void openblas_set_num_threads(int num_threads);

typedef struct cpu_ctx {
    int nthreads;
} cpu_ctx;

static int cpu_threads(const drift_backend *be) { return ((const cpu_ctx *)be->ctx)->nthreads; }

static int dtype_ok(drift_dtype dt) { return dt == DRIFT_F32 || dt == DRIFT_BF16 || dt == DRIFT_F16; }

static int cpu_supports_op(const drift_backend *be, const drift_op *op) {
    (void)be;
    if (!op || (int)op->kind < 0 || op->kind >= DRIFT_OP_COUNT) return 0;
    if (!dtype_ok(op->out)) return 0;
    if ((op->kind == DRIFT_OP_LINEAR || op->kind == DRIFT_OP_ATTENTION) && !dtype_ok(op->compute)) return 0;
    return 1;
}

static int cpu_alloc(const drift_backend *be, drift_tensor *t, drift_err *err) {
    if (!t) return drift_err_set(err, DRIFT_E_INTERNAL, "cpu", "alloc: NULL tensor");
    if (!dtype_ok(t->dtype))
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, "cpu", "cpu backend stores fp32, bf16 and fp16 tensors, not %s",
                             drift_dtype_name(t->dtype));
    int64_t n = drift_shape_numel(t->ndim, t->shape);
    if (n < 0) return drift_err_set(err, DRIFT_E_INPUT, "cpu", "alloc: invalid shape (ndim %d)", t->ndim);
    float *d = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!d)
        return drift_err_set(err, DRIFT_E_NOMEM, "cpu", "alloc: cannot allocate %lld elements", (long long)n);
    t->data = d;
    t->numel = n;
    t->be = be;
    return DRIFT_OK;
}

static void cpu_release(const drift_backend *be, drift_tensor *t) {
    (void)be;
    if (!t) return;
    free(t->data);
    t->data = NULL;
}

/* A view of base's float storage elem_offset elements in (backend.h). */
static int cpu_alias(const drift_backend *be, const drift_tensor *base, int64_t elem_offset, drift_tensor *out,
                     drift_err *err) {
    if (!base || !base->data || base->be != be || !out)
        return drift_err_set(err, DRIFT_E_INPUT, "cpu", "alias: base not allocated on this backend");
    int64_t n = drift_shape_numel(out->ndim, out->shape);
    if (n < 0 || out->dtype != base->dtype || elem_offset < 0 || elem_offset > base->numel ||
        n > base->numel - elem_offset)
        return drift_err_set(err, DRIFT_E_INPUT, "cpu", "alias: %lld elements at offset %lld do not fit a %lld-element %s base",
                             (long long)n, (long long)elem_offset, (long long)base->numel, drift_dtype_name(base->dtype));
    out->data = (float *)base->data + elem_offset;
    out->numel = n;
    out->be = be;
    return DRIFT_OK;
}

static int check_io(const drift_backend *be, const drift_tensor *t, const void *buf, drift_err *err) {
    if (!t || !t->data || t->be != be)
        return drift_err_set(err, DRIFT_E_INPUT, "cpu", "transfer: tensor not allocated on this backend");
    if (!buf && t->numel > 0) return drift_err_set(err, DRIFT_E_INPUT, "cpu", "transfer: NULL host buffer");
    return DRIFT_OK;
}

static int cpu_upload_f32(const drift_backend *be, drift_tensor *t, const float *src, drift_err *err) {
    int rc = check_io(be, t, src, err);
    if (rc) return rc;
    float *d = t->data;
    memcpy(d, src, (size_t)t->numel * sizeof(float));
    drift_dtype_round_n(d, (size_t)t->numel, t->dtype);
    return DRIFT_OK;
}

static int cpu_upload_f64(const drift_backend *be, drift_tensor *t, const double *src, drift_err *err) {
    int rc = check_io(be, t, src, err);
    if (rc) return rc;
    float *d = t->data;
    for (int64_t i = 0; i < t->numel; i++) d[i] = (float)src[i]; /* RNE to fp32, then to dtype */
    drift_dtype_round_n(d, (size_t)t->numel, t->dtype);
    return DRIFT_OK;
}

static int cpu_download_f32(const drift_backend *be, const drift_tensor *t, float *dst, drift_err *err) {
    int rc = check_io(be, t, dst, err);
    if (rc) return rc;
    memcpy(dst, t->data, (size_t)t->numel * sizeof(float));
    return DRIFT_OK;
}

static int cpu_download_f64(const drift_backend *be, const drift_tensor *t, double *dst, drift_err *err) {
    int rc = check_io(be, t, dst, err);
    if (rc) return rc;
    const float *s = t->data;
    for (int64_t i = 0; i < t->numel; i++) dst[i] = s[i];
    return DRIFT_OK;
}

static int cpu_run(const drift_backend *be, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                   drift_err *err) {
    int rc = drift_host_check_run(be, op, in, out, sizeof(float), err);
    if (rc) return rc;
    return drift_cpu_run_op(cpu_threads(be), op, in, out, err);
}

/* Same pass as drift_metrics_accumulate_f32 (replay/analysis/metrics.h): fp64
 * differences of the fp32 values, sums in element order over pairs where
 * both sides are finite, first-occurrence argmax with indices continuing at
 * acc->numel, NaN/inf counts per side, n_diff over fp32 bit patterns with
 * NaN == NaN. Single-threaded: the order is the element order. */
static int cpu_metrics(const drift_backend *be, const drift_tensor *t, const drift_tensor *r, drift_metric_acc *acc,
                       drift_err *err) {
    if (!acc) return drift_err_set(err, DRIFT_E_INTERNAL, "cpu", "metrics: NULL acc");
    int rc = check_io(be, t, t ? t->data : NULL, err);
    if (!rc) rc = check_io(be, r, r ? r->data : NULL, err);
    if (rc) return rc;
    if (t->ndim < 0 || t->ndim > DRIFT_MAX_DIMS || t->ndim != r->ndim || t->numel != r->numel ||
        memcmp(t->shape, r->shape, (size_t)t->ndim * sizeof(int64_t)) != 0)
        return drift_err_set(err, DRIFT_E_INPUT, "cpu", "metrics: candidate and reference shapes differ");
    const float *tv = t->data, *rv = r->data;
    double sad = acc->sum_abs_diff, ssd = acc->sum_sq_diff, str = acc->sum_tr, stt = acc->sum_tt, srr = acc->sum_rr;
    double maxd = acc->max_abs_diff, maxr = acc->max_abs_ref;
    int64_t argmax = acc->argmax, base = acc->numel;
    int64_t nan_t = 0, inf_t = 0, nan_r = 0, inf_r = 0, n_diff = 0;
    for (int64_t i = 0; i < t->numel; i++) {
        float a = tv[i], b = rv[i];
        int a_nan = isnan(a), b_nan = isnan(b);
        if (drift_f32_bits(a) != drift_f32_bits(b) && !(a_nan && b_nan)) n_diff++;
        if (a_nan)
            nan_t++;
        else if (isinf(a))
            inf_t++;
        if (b_nan)
            nan_r++;
        else if (isinf(b))
            inf_r++;
        if (!isfinite(a) || !isfinite(b)) continue;
        double da = a, db = b, d = da - db, ad = fabs(d), ar = fabs(db);
        sad += ad;
        ssd += d * d;
        str += da * db;
        stt += da * da;
        srr += db * db;
        if (argmax < 0 || ad > maxd) {
            maxd = ad;
            argmax = base + i;
        }
        if (ar > maxr) maxr = ar;
    }
    acc->sum_abs_diff = sad;
    acc->sum_sq_diff = ssd;
    acc->sum_tr = str;
    acc->sum_tt = stt;
    acc->sum_rr = srr;
    acc->max_abs_diff = maxd;
    acc->max_abs_ref = maxr;
    acc->argmax = argmax;
    acc->numel = base + t->numel;
    acc->nan_t += nan_t;
    acc->inf_t += inf_t;
    acc->nan_r += nan_r;
    acc->inf_r += inf_r;
    acc->n_diff += n_diff;
    return DRIFT_OK;
}

static int cpu_sync(const drift_backend *be, drift_err *err) {
    (void)be;
    (void)err;
    return DRIFT_OK;
}

static void cpu_destroy(drift_backend *be) {
    if (!be) return;
    free(be->ctx);
    free(be);
}

int drift_cpu_backend_create(drift_backend **out, drift_err *err) {
    drift_backend *be = calloc(1, sizeof *be);
    cpu_ctx *ctx = calloc(1, sizeof *ctx);
    if (!be || !ctx) {
        free(be);
        free(ctx);
        return drift_err_set(err, DRIFT_E_NOMEM, "cpu", "cannot allocate the cpu backend");
    }
    ctx->nthreads = drift_host_threads();
    /* Fixed GEMM thread policy (host_internal.h): OpenBLAS's thread count is
     * process-global and may change GEMM bits, so every cpu backend pins it to
     * the policy's count when it is created. */
    openblas_set_num_threads(ctx->nthreads);
    be->name = "cpu";
    be->ctx = ctx;
    be->supports_op = cpu_supports_op;
    be->alloc = cpu_alloc;
    be->release = cpu_release;
    be->upload_f32 = cpu_upload_f32;
    be->upload_f64 = cpu_upload_f64;
    be->download_f32 = cpu_download_f32;
    be->download_f64 = cpu_download_f64;
    be->run = cpu_run;
    be->metrics = cpu_metrics;
    be->sync = cpu_sync;
    be->destroy = cpu_destroy;
    be->alias = cpu_alias;
    *out = be;
    return DRIFT_OK;
}
