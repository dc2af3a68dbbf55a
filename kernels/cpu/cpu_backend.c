/* The cpu backend: storage, transfers, metrics and the backend struct.
 * Op bodies: cpu_ops.c. Arguments are checked by the door (kernels/door.c).
 * Storage is float for fp32, bf16 and fp16 (a tensor's values are always
 * exactly representable in its dtype) and double for fp64; an op that
 * touches fp64 runs the fp64 oracle's body (cpu_f64.c). */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "kernels/cpu/host_internal.h"

/* Declared here as well so that a netlib cblas.h (no OpenBLAS extensions)
 * still compiles; the library linked is OpenBLAS (CMake: find_library). */
void openblas_set_num_threads(int num_threads);

static int cpu_threads(const drift_backend *be) { return drift_host_backend_threads(be); }

static int dtype_ok(drift_dtype dt) { return drift_dtype_is_float(dt) || drift_dtype_is_int(dt); }

/* fp64 and the integer dtypes are stored as doubles (formats/dtype.h drift_dtype_wide). */
static size_t cpu_elem_bytes(drift_dtype dt) { return drift_dtype_wide(dt) ? sizeof(double) : sizeof(float); }

/* Every op at every stored dtype: fp64 ones through the oracle's bodies. */
static int cpu_supports_op(const drift_backend *be, const drift_op *op) {
    (void)be;
    if (!dtype_ok(op->out)) return 0;
    if ((op->kind == DRIFT_OP_LINEAR || op->kind == DRIFT_OP_ATTENTION) && !dtype_ok(op->compute)) return 0;
    return 1;
}

static int cpu_alloc(const drift_backend *be, drift_tensor *t, drift_err *err) {
    (void)be;
    void *d = drift_malloc((size_t)(t->numel > 0 ? t->numel : 1) * cpu_elem_bytes(t->dtype));
    if (!d)
        return drift_err_set(err, DRIFT_E_NOMEM, "cpu", "alloc: cannot allocate %lld elements", (long long)t->numel);
    t->data = d;
    return DRIFT_OK;
}

static void cpu_release(const drift_backend *be, drift_tensor *t) {
    (void)be;
    drift_free(t->data);
}

/* A view of base's float storage elem_offset elements in (fits: checked). */
static int cpu_alias(const drift_backend *be, const drift_tensor *base, int64_t elem_offset, drift_tensor *out,
                     drift_err *err) {
    (void)be;
    (void)err;
    out->data = (char *)base->data + (size_t)elem_offset * cpu_elem_bytes(base->dtype);
    return DRIFT_OK;
}

static int cpu_upload_f32(const drift_backend *be, drift_tensor *t, const float *src, drift_err *err) {
    (void)be;
    (void)err;
    if (drift_dtype_wide(t->dtype)) { /* widened exactly */
        double *w = t->data;
        for (int64_t i = 0; i < t->numel; i++) w[i] = src[i];
        return DRIFT_OK;
    }
    float *d = t->data;
    memcpy(d, src, (size_t)t->numel * sizeof(float));
    drift_dtype_round_n(d, (size_t)t->numel, t->dtype);
    return DRIFT_OK;
}

static int cpu_upload_f64(const drift_backend *be, drift_tensor *t, const double *src, drift_err *err) {
    (void)be;
    (void)err;
    if (drift_dtype_wide(t->dtype)) {
        memcpy(t->data, src, (size_t)t->numel * sizeof(double));
        return DRIFT_OK;
    }
    float *d = t->data;
    for (int64_t i = 0; i < t->numel; i++) d[i] = (float)src[i]; /* RNE to fp32, then to dtype */
    drift_dtype_round_n(d, (size_t)t->numel, t->dtype);
    return DRIFT_OK;
}

static int cpu_download_f32(const drift_backend *be, const drift_tensor *t, float *dst, drift_err *err) {
    (void)be;
    (void)err;
    if (drift_dtype_wide(t->dtype)) { /* narrowed RNE, as the ref backend does */
        const double *w = t->data;
        for (int64_t i = 0; i < t->numel; i++) dst[i] = (float)w[i];
        return DRIFT_OK;
    }
    memcpy(dst, t->data, (size_t)t->numel * sizeof(float));
    return DRIFT_OK;
}

static int cpu_download_f64(const drift_backend *be, const drift_tensor *t, double *dst, drift_err *err) {
    (void)be;
    (void)err;
    if (drift_dtype_wide(t->dtype)) {
        memcpy(dst, t->data, (size_t)t->numel * sizeof(double));
        return DRIFT_OK;
    }
    const float *s = t->data;
    for (int64_t i = 0; i < t->numel; i++) dst[i] = s[i];
    return DRIFT_OK;
}

static int cpu_run(const drift_backend *be, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                   drift_err *err) {
    if (drift_cpu_op_is_f64(op, in)) return drift_cpu_run_f64(cpu_threads(be), op, in, out, err);
    return drift_cpu_run_op(cpu_threads(be), drift_host_backend_attn_tile(be), drift_host_backend_gemm_table(be), op,
                            in, out, err);
}

/* The one host pass (kernels/metric_acc.c); single-threaded, so the order
 * is the element order. An fp64 side is narrowed to fp32 first (metrics
 * compare values widened to fp32, DESIGN.md s7). */
static int cpu_metrics(const drift_backend *be, const drift_tensor *t, const drift_tensor *r, drift_metric_acc *acc,
                       drift_err *err) {
    float *tmp[2] = {NULL, NULL};
    const float *v[2] = {t->data, r->data};
    const drift_tensor *side[2] = {t, r};
    int rc = DRIFT_OK;
    for (int k = 0; k < 2 && !rc; k++) {
        if (!drift_dtype_wide(side[k]->dtype)) continue;
        if (!(tmp[k] = drift_malloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof(float))))
            rc = drift_err_set(err, DRIFT_E_NOMEM, "cpu", "metrics: cannot allocate %lld elements", (long long)t->numel);
        else
            rc = cpu_download_f32(be, side[k], tmp[k], err);
        v[k] = tmp[k];
    }
    if (!rc) drift_metric_acc_add_f32(acc, v[0], v[1], (size_t)t->numel, NULL, NULL);
    drift_free(tmp[0]);
    drift_free(tmp[1]);
    return rc;
}

/* The cpu backend's entries (name, context, sync and destroy: drift_host_backend_new). */
static const drift_backend cpu_iface = {
    .stores = dtype_ok,
    .elem_bytes = cpu_elem_bytes,
    .supports_op = cpu_supports_op,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload_f32 = cpu_upload_f32,
    .upload_f64 = cpu_upload_f64,
    .download_f32 = cpu_download_f32,
    .download_f64 = cpu_download_f64,
    .run = cpu_run,
    .metrics = cpu_metrics,
    .alias = cpu_alias,
};

int drift_cpu_backend_create(const drift_backend_opts *o, drift_backend **out, drift_err *err) {
    drift_backend *be = NULL;
    int rc = drift_host_backend_new(o, "cpu", &cpu_iface, 1, &be, err);
    if (rc) return rc;
    if ((rc = drift_cpu_blas_space_check(drift_host_backend_threads(be), err))) { /* an error under ulimit -v, not a hang */
        drift_backend_free(be);
        return rc;
    }
    /* The GEMMs are drift's own (cpu_gemm.h) and OpenBLAS computes nothing
     * here; it is still linked (benchmarks), so its process-global thread
     * count stays pinned to the policy's, within the space checked above. */
    openblas_set_num_threads(drift_host_backend_threads(be));
    *out = be;
    return DRIFT_OK;
}
