/* The cpu backend's ATen-level ops (backend.h, aten_internal.h): fp32
 * storage holding values of the tensor's dtype; elementwise ops compute in
 * fp32 opmath in the order written and round once to op->out, as
 * PyTorch's CUDA kernels do. Specifics mirrored from torch's CUDA kernels:
 * x / s by a host scalar is x * (1/s) with the reciprocal rounded to fp32;
 * pow by 2, 3, 0.5, -0.5, -1, -2 is the multiply/sqrt/reciprocal form;
 * mean is the fp32 sum times (1/n) rounded to fp32. Sums run sequentially in
 * index order (torch's tree order differs: not bitwise against torch). */
#include <math.h>
#include <string.h>

#include "kernels/aten_internal.h"
#include "kernels/backend_impl.h"
#include "kernels/cpu/cpu_opset.h"
#include "kernels/cpu/host_internal.h"

static inline float *fd(const drift_tensor *t) { return (float *)t->data; }

static float unary(int sub, float x) {
    switch (sub) {
    case DRIFT_UNARY_NEG: return -x;
    case DRIFT_UNARY_EXP: return expf(x);
    case DRIFT_UNARY_SIN: return sinf(x);
    case DRIFT_UNARY_COS: return cosf(x);
    case DRIFT_UNARY_RSQRT: return 1.0f / sqrtf(x);
    case DRIFT_UNARY_SQRT: return sqrtf(x);
    case DRIFT_UNARY_TANH: return tanhf(x);
    case DRIFT_UNARY_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case DRIFT_UNARY_GELU_ERF: {
        float t = x * 0.70710678118654752440f; /* x * M_SQRT1_2 */
        return 0.5f * x * (1.0f + erff(t));    /* (0.5*x)*(1 + erf) */
    }
    case DRIFT_UNARY_RECIP: return 1.0f / x;
    case DRIFT_UNARY_ABS: return fabsf(x);
    case DRIFT_UNARY_RELU: return x != x ? x : (x > 0.0f ? x : 0.0f);
    case DRIFT_UNARY_MASK_BIAS: return x != 0.0f ? 0.0f : -INFINITY;
    default: return x;
    }
}

static float unary_any(const drift_op *op, float x) {
    return op->sub >= DRIFT_UNARY_LOG ? drift_cpu_unary_ext(op->sub, x, (float)op->scalar, (float)op->step)
                                      : unary(op->sub, x);
}

static float pow_scalar(float x, double e) {
    if (e == 2.0) return x * x;
    if (e == 3.0) return x * x * x;
    if (e == 0.5) return sqrtf(x);
    if (e == -0.5) return 1.0f / sqrtf(x);
    if (e == -1.0) return 1.0f / x;
    if (e == -2.0) return 1.0f / (x * x);
    return powf(x, (float)e);
}

static float scalar(int sub, float x, float s, double s64) {
    switch (sub) {
    case DRIFT_SCALAR_ADD: return x + s;
    case DRIFT_SCALAR_SUB: return x - s;
    case DRIFT_SCALAR_RSUB: return s - x;
    case DRIFT_SCALAR_MUL: return x * s;
    case DRIFT_SCALAR_DIV: {
        const float inv = 1.0f / s; /* CUDA: reciprocal of the host scalar in opmath */
        return x * inv;
    }
    case DRIFT_SCALAR_POW: return pow_scalar(x, s64);
    case DRIFT_SCALAR_RPOW: return powf(s, x);
    case DRIFT_SCALAR_MAX: return x != x ? x : (x < s ? s : x);
    case DRIFT_SCALAR_MIN: return x != x ? x : (x > s ? s : x);
    default: return x;
    }
}

typedef struct ew_job {
    const drift_op *op;
    const float *x;
    float *y;
} ew_job;

static void ew_range(void *p, int64_t b, int64_t e) {
    const ew_job *j = p;
    const float s = (float)j->op->scalar;
    if (j->op->kind == DRIFT_OP_UNARY)
        for (int64_t i = b; i < e; i++) j->y[i] = unary_any(j->op, j->x[i]);
    else
        for (int64_t i = b; i < e; i++) j->y[i] = scalar(j->op->sub, j->x[i], s, j->op->scalar);
    drift_dtype_round_n(j->y + b, (size_t)(e - b), j->op->out);
}

int drift_cpu_run_aten(int nthreads, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                       drift_err *err) {
    float *y = fd(out);
    switch (op->kind) {
    case DRIFT_OP_UNARY:
    case DRIFT_OP_SCALAR: {
        ew_job j = {op, fd(in[0]), y};
        drift_host_parallel_for(nthreads, out->numel, (int64_t)1 << 14, ew_range, &j);
        return DRIFT_OK;
    }
    case DRIFT_OP_DIV: {
        drift_bcast bc;
        drift_bcast_plan(in[0], in[1], &bc);
        for (int64_t e = 0; e < bc.numel; e++) {
            int64_t oa, ob;
            drift_bcast_offsets(&bc, e, &oa, &ob);
            y[e] = fd(in[0])[oa] / fd(in[1])[ob];
        }
        drift_dtype_round_n(y, (size_t)out->numel, op->out);
        return DRIFT_OK;
    }
    case DRIFT_OP_REDUCE:
    case DRIFT_OP_BINARY:
    case DRIFT_OP_CUMSUM:
    case DRIFT_OP_SOFTMAX:
    case DRIFT_OP_BMM:
    case DRIFT_OP_GROUP_NORM: return drift_cpu_run_opset(nthreads, op, in, out, err);
    case DRIFT_OP_STRIDED:
        for (int64_t e = 0; e < out->numel; e++) y[e] = fd(in[0])[drift_aten_strided_index(op, out->ndim, out->shape, e)];
        if (in[0]->dtype != op->out) drift_dtype_round_n(y, (size_t)out->numel, op->out);
        return DRIFT_OK;
    case DRIFT_OP_SCATTER:
        memcpy(y, fd(in[0]), (size_t)out->numel * sizeof(float));
        for (int64_t e = 0; e < in[1]->numel; e++) y[drift_aten_strided_index(op, in[1]->ndim, in[1]->shape, e)] = fd(in[1])[e];
        if (in[0]->dtype != op->out) drift_dtype_round_n(y, (size_t)out->numel, op->out);
        return DRIFT_OK;
    case DRIFT_OP_FILL:
        if (op->sub == 2) { /* torch's linspace: from both ends towards the middle, in opmath */
            const int64_t n = out->numel, half = n / 2;
            const float a = (float)op->scalar, b = (float)op->step, st = n > 1 ? (b - a) / (float)(n - 1) : 0.0f;
            for (int64_t i = 0; i < n; i++) {
                float t = i < half ? st * (float)i : st * (float)(n - i - 1);
                y[i] = i < half ? a + t : b - t;
            }
            drift_dtype_round_n(y, (size_t)n, op->out);
            return DRIFT_OK;
        }
        for (int64_t i = 0; i < out->numel; i++) {
            const double v = op->sub ? op->scalar + (double)i * op->step : op->scalar;
            y[i] = drift_round_to((float)v, op->out); /* fp64 -> fp32 -> out: double rounding only past fp32 */
        }
        return DRIFT_OK;
    default: break;
    }
    return drift_err_set(err, DRIFT_E_UNSUPPORTED, "op", "cpu backend: op %s not implemented", drift_op_name(op->kind));
}
