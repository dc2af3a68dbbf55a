/* The cuda backend's fp64 ops (cuda_internal.h): an op that touches F64
 * runs the GPU fp64 oracle's body (ref_cuda.c drift_rcu_run_op, no new
 * math) on this backend's stream, so a cuda replay of a graph's fp64 part
 * (Flux's RoPE table) gives the ref and ref-cuda backends' values bit for
 * bit under both kernel profiles. Non-F64 inputs are widened exactly into
 * device temporaries (bf16/fp16 through fp32); a non-F64 output is the fp64
 * result rounded to fp32 (RNE), then to its dtype, as the cpu backend does
 * (kernels/cpu/cpu_f64.c). */
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/ref_cuda_internal.h"

int dcu_op_is_f64(const drift_op *op, const drift_tensor *const *in) {
    if (drift_dtype_wide(op->out) || drift_dtype_wide(op->compute)) return 1;
    for (int i = 0; i < op->n_in; i++)
        if (drift_dtype_wide(in[i]->dtype)) return 1;
    return 0;
}

static size_t bytes_of(int64_t n, size_t es) { return (size_t)(n > 0 ? n : 1) * es; }

/* t's values as device doubles in *wide (caller frees *tmp, *tmp32). */
static int widen(dcu_ctx *ctx, const drift_tensor *t, drift_tensor *wide, void **tmp, void **tmp32, const char *where,
                 drift_err *err) {
    *wide = *t;
    int rc = dcu_check(dcu_malloc(ctx, tmp, bytes_of(t->numel, sizeof(double))), err, where, "fp64 op: scratch");
    if (rc) return rc;
    const float *f = t->data;
    if (t->dtype != DRIFT_F32) { /* bf16/fp16 -> fp32: exact */
        rc = dcu_check(dcu_malloc(ctx, tmp32, bytes_of(t->numel, sizeof(float))), err, where, "fp64 op: scratch");
        if (!rc)
            rc = dcu_check(dcu_launch_unary(ctx, DCU_UN_CAST, t->data, t->dtype, *tmp32, DRIFT_F32, t->numel, 0.0f, 0.0f),
                           err, where, "fp64 op: widening");
        f = *tmp32;
    }
    if (!rc) rc = dcu_check(rcu_from_f32(ctx->stream, f, *tmp, t->numel), err, where, "fp64 op: widening");
    wide->data = *tmp;
    return rc;
}

int dcu_run_f64(dcu_ctx *ctx, const drift_op *op, const drift_tensor *const *in, drift_tensor *out, const char *where,
                drift_err *err) {
    const rcu_exec x = {ctx->device, ctx->stream, ctx->attn_budget, ctx->name};
    enum { OUT = DRIFT_OP_MAX_IN }; /* tmp[OUT], tmp32[OUT]: the output's scratch */
    drift_tensor wide[DRIFT_OP_MAX_IN], wout = *out;
    const drift_tensor *win[DRIFT_OP_MAX_IN] = {NULL};
    void *tmp[DRIFT_OP_MAX_IN + 1] = {NULL}, *tmp32[DRIFT_OP_MAX_IN + 1] = {NULL};
    int rc = DRIFT_OK;
    for (int i = 0; i < op->n_in && !rc; i++) {
        win[i] = in[i];
        if (!drift_dtype_wide(in[i]->dtype) && !(rc = widen(ctx, in[i], &wide[i], &tmp[i], &tmp32[i], where, err)))
            win[i] = &wide[i];
    }
    if (!rc && !drift_dtype_wide(out->dtype)) {
        rc = dcu_check(dcu_malloc(ctx, &tmp[OUT], bytes_of(out->numel, sizeof(double))), err, where, "fp64 op: scratch");
        wout.data = tmp[OUT];
    }
    if (!rc) rc = drift_rcu_run_op(&x, op, win, &wout, err);
    if (!rc && !drift_dtype_wide(out->dtype)) {
        float *f = out->data;
        if (out->dtype != DRIFT_F32) {
            rc = dcu_check(dcu_malloc(ctx, &tmp32[OUT], bytes_of(out->numel, sizeof(float))), err, where, "fp64 op: scratch");
            f = tmp32[OUT];
        }
        if (!rc) rc = dcu_check(rcu_to_f32(ctx->stream, tmp[OUT], f, out->numel), err, where, "fp64 op: rounding");
        if (!rc && out->dtype != DRIFT_F32)
            rc = dcu_check(dcu_launch_unary(ctx, DCU_UN_CAST, f, DRIFT_F32, out->data, out->dtype, out->numel, 0.0f, 0.0f),
                           err, where, "fp64 op: rounding");
    }
    for (int i = 0; i <= OUT; i++) {
        dcu_free(ctx, tmp[i]);
        dcu_free(ctx, tmp32[i]);
    }
    return rc;
}

/* Narrows an F64 tensor to device fp32 for the metrics (caller frees *tmp). */
int dcu_f64_narrow(dcu_ctx *ctx, const drift_tensor *t, void **tmp, drift_err *err) {
    int rc = dcu_check(dcu_malloc(ctx, tmp, bytes_of(t->numel, sizeof(float))), err, ctx->name, "metrics: scratch");
    if (!rc) rc = dcu_check(rcu_to_f32(ctx->stream, t->data, *tmp, t->numel), err, ctx->name, "metrics: narrowing");
    return rc;
}
