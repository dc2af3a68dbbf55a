/* The cpu backend: storage, transfers, metrics and the backend struct.
 * Op bodies: cpu_ops.c. Arguments are checked by the door (kernels/door.c).
 * Storage is float; a tensor's values are always
 * exactly representable in its dtype (fp32, bf16 or fp16; fp64 tensors
 * belong to the ref backend). */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "kernels/cpu/host_internal.h"

/* Declared here as well so that a netlib cblas.h (no OpenBLAS extensions)
 * still compiles; the library linked is OpenBLAS (CMake: find_library). */
void openblas_set_num_threads(int num_threads);

typedef struct cpu_ctx {
    int nthreads;
} cpu_ctx;

static int cpu_threads(const drift_backend *be) { return ((const cpu_ctx *)be->ctx)->nthreads; }

static int dtype_ok(drift_dtype dt) { return dt == DRIFT_F32 || dt == DRIFT_BF16 || dt == DRIFT_F16; }

static size_t cpu_elem_bytes(drift_dtype dt) {
    (void)dt;
    return sizeof(float);
}

static int cpu_supports_op(const drift_backend *be, const drift_op *op) {
    (void)be;
    if (!dtype_ok(op->out)) return 0;
    if ((op->kind == DRIFT_OP_LINEAR || op->kind == DRIFT_OP_ATTENTION) && !dtype_ok(op->compute)) return 0;
    return 1;
}

static int cpu_alloc(const drift_backend *be, drift_tensor *t, drift_err *err) {
    (void)be;
    float *d = drift_malloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof(float));
    if (!d)
        return drift_err_set(err, DRIFT_E_NOMEM, "cpu", "alloc: cannot allocate %lld elements", (long long)t->numel);
    t->data = d;
    return DRIFT_OK;
}

static void cpu_release(const drift_backend *be, drift_tensor *t) {
    (void)be;
    free(t->data);
}

/* A view of base's float storage elem_offset elements in (fits: checked). */
static int cpu_alias(const drift_backend *be, const drift_tensor *base, int64_t elem_offset, drift_tensor *out,
                     drift_err *err) {
    (void)be;
    (void)err;
    out->data = (float *)base->data + elem_offset;
    return DRIFT_OK;
}

static int cpu_upload_f32(const drift_backend *be, drift_tensor *t, const float *src, drift_err *err) {
    (void)be;
    (void)err;
    float *d = t->data;
    memcpy(d, src, (size_t)t->numel * sizeof(float));
    drift_dtype_round_n(d, (size_t)t->numel, t->dtype);
    return DRIFT_OK;
}

static int cpu_upload_f64(const drift_backend *be, drift_tensor *t, const double *src, drift_err *err) {
    (void)be;
    (void)err;
    float *d = t->data;
    for (int64_t i = 0; i < t->numel; i++) d[i] = (float)src[i]; /* RNE to fp32, then to dtype */
    drift_dtype_round_n(d, (size_t)t->numel, t->dtype);
    return DRIFT_OK;
}

static int cpu_download_f32(const drift_backend *be, const drift_tensor *t, float *dst, drift_err *err) {
    (void)be;
    (void)err;
    memcpy(dst, t->data, (size_t)t->numel * sizeof(float));
    return DRIFT_OK;
}

static int cpu_download_f64(const drift_backend *be, const drift_tensor *t, double *dst, drift_err *err) {
    (void)be;
    (void)err;
    const float *s = t->data;
    for (int64_t i = 0; i < t->numel; i++) dst[i] = s[i];
    return DRIFT_OK;
}

static int cpu_run(const drift_backend *be, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                   drift_err *err) {
    return drift_cpu_run_op(cpu_threads(be), op, in, out, err);
}

/* The one host pass (kernels/metric_acc.c); single-threaded, so the order
 * is the element order. */
static int cpu_metrics(const drift_backend *be, const drift_tensor *t, const drift_tensor *r, drift_metric_acc *acc,
                       drift_err *err) {
    (void)be;
    (void)err;
    drift_metric_acc_add_f32(acc, t->data, r->data, (size_t)t->numel, NULL, NULL);
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

int drift_cpu_backend_create(const drift_backend_opts *o, drift_backend **out, drift_err *err) {
    static const char *const keys[] = {"threads", NULL};
    int nthreads = 1;
    int rc = drift_backend_opts_check(o, keys, err);
    if (!rc) rc = drift_backend_host_threads(o, &nthreads, err);
    if (rc) return rc;
    drift_backend *be = drift_calloc(1, sizeof *be);
    cpu_ctx *ctx = drift_calloc(1, sizeof *ctx);
    if (!be || !ctx) {
        free(be);
        free(ctx);
        return drift_err_set(err, DRIFT_E_NOMEM, "cpu", "cannot allocate the cpu backend");
    }
    ctx->nthreads = nthreads;
    /* Fixed GEMM thread policy (host_internal.h): OpenBLAS's thread count is
     * process-global and may change GEMM bits, so every cpu backend pins it to
     * the policy's count when it is created. */
    openblas_set_num_threads(ctx->nthreads);
    be->name = "cpu";
    be->ctx = ctx;
    be->stores = dtype_ok;
    be->elem_bytes = cpu_elem_bytes;
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
