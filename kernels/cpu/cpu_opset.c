/* The cpu backend's fp32 bodies of the closed opset's kernels (backend.h)
 * on floating tensors: fp32 storage holding values of the tensor's dtype,
 * fp32 opmath in the order written, one rounding to op->out. Ops that touch
 * an integer, bool or fp64 tensor never reach this file: they run the fp64
 * oracle's bodies (cpu_f64.c, kernels/ref/ref_opset.c), which is exact for
 * them. Sums and scans run sequentially in index order per output element,
 * whatever the thread count (torch's CUDA kernels reduce in trees: not
 * bitwise against torch for long reductions). */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "formats/alloc.h"
#include "kernels/aten_internal.h"
#include "kernels/backend_impl.h"
#include "kernels/cpu/cpu_gemm.h"
#include "kernels/cpu/cpu_opset.h"
#include "kernels/cpu/host_internal.h"

static inline float *fd(const drift_tensor *t) { return (float *)t->data; }

float drift_cpu_unary_ext(int sub, float x, float p, float q) {
    switch (sub) {
    case DRIFT_UNARY_LOG: return logf(x);
    case DRIFT_UNARY_LOG1P: return log1pf(x);
    case DRIFT_UNARY_EXPM1: return expm1f(x);
    case DRIFT_UNARY_LOG2: return log2f(x);
    case DRIFT_UNARY_LOG10: return log10f(x);
    case DRIFT_UNARY_ERF: return erff(x);
    case DRIFT_UNARY_FLOOR: return floorf(x);
    case DRIFT_UNARY_CEIL: return ceilf(x);
    case DRIFT_UNARY_ROUND: return nearbyintf(x);
    case DRIFT_UNARY_TRUNC: return truncf(x);
    case DRIFT_UNARY_SIGN: return x != x ? x : (float)((x > 0.0f) - (x < 0.0f));
    case DRIFT_UNARY_TAN: return tanf(x);
    case DRIFT_UNARY_ASIN: return asinf(x);
    case DRIFT_UNARY_ACOS: return acosf(x);
    case DRIFT_UNARY_ATAN: return atanf(x);
    case DRIFT_UNARY_SINH: return sinhf(x);
    case DRIFT_UNARY_COSH: return coshf(x);
    case DRIFT_UNARY_EXP2: return exp2f(x);
    case DRIFT_UNARY_SOFTPLUS: {
        const float bx = x * p;
        return bx > q ? x : log1pf(expf(bx)) / p;
    }
    case DRIFT_UNARY_HARDSIGMOID: return fminf(fmaxf(x + 3.0f, 0.0f), 6.0f) / 6.0f;
    case DRIFT_UNARY_HARDSWISH: return x * fminf(fmaxf(x + 3.0f, 0.0f), 6.0f) / 6.0f;
    case DRIFT_UNARY_MISH: return x * tanhf(log1pf(expf(x)));
    case DRIFT_UNARY_ELU: return x > 0.0f ? x : expm1f(x) * p;
    case DRIFT_UNARY_LEAKY_RELU: return x > 0.0f ? x : x * p;
    case DRIFT_UNARY_SQUARE: return x * x;
    case DRIFT_UNARY_FRAC: return x - truncf(x);
    default: return x;
    }
}

static float maxf_nan(float a, float b) { return (a != a || b != b) ? NAN : (a > b ? a : b); }
static float minf_nan(float a, float b) { return (a != a || b != b) ? NAN : (a < b ? a : b); }

/* torch's div_floor_floating in opmath */
static float floordivf(float a, float b) {
    if (b == 0.0f) return a / b;
    float mod = fmodf(a, b), div = (a - mod) / b;
    if (mod != 0.0f && ((b < 0.0f) != (mod < 0.0f))) div -= 1.0f;
    if (div == 0.0f) return copysignf(0.0f, a / b);
    float f = floorf(div);
    if (div - f > 0.5f) f += 1.0f;
    return f;
}

static float binary_f(int sub, float a, float b) {
    switch (sub) {
    case DRIFT_BINARY_MAX: return maxf_nan(a, b);
    case DRIFT_BINARY_MIN: return minf_nan(a, b);
    case DRIFT_BINARY_POW: return powf(a, b);
    case DRIFT_BINARY_ATAN2: return atan2f(a, b);
    case DRIFT_BINARY_REM: {
        float mod = fmodf(a, b);
        if (mod != 0.0f && ((b < 0.0f) != (mod < 0.0f))) mod += b;
        return mod;
    }
    case DRIFT_BINARY_FMOD: return fmodf(a, b);
    case DRIFT_BINARY_FLOORDIV: return floordivf(a, b);
    case DRIFT_BINARY_TRUNCDIV: return truncf(a / b);
    default: return NAN;
    }
}

/* input's element offset for flat output element e under numpy broadcasting */
static int64_t bc_off(const drift_tensor *t, const drift_tensor *out, int64_t e) {
    int64_t off = 0, s = 1;
    for (int d = out->ndim - 1; d >= 0; d--) {
        const int64_t idx = e % out->shape[d];
        e /= out->shape[d];
        const int k = d - (out->ndim - t->ndim);
        if (k < 0) continue;
        if (t->shape[k] != 1) off += idx * s;
        s *= t->shape[k];
    }
    return off;
}

static void split_dims(const drift_tensor *t, int d, int span, int64_t *outer, int64_t *n, int64_t *inner) {
    *outer = *n = *inner = 1;
    for (int i = 0; i < d; i++) *outer *= t->shape[i];
    for (int i = d; i < d + span && i < t->ndim; i++) *n *= t->shape[i];
    for (int i = d + span; i < t->ndim; i++) *inner *= t->shape[i];
}

static void run_reduce(const drift_op *op, const drift_tensor *x, drift_tensor *out) {
    const int d = drift_op_norm_dim(op->dim, x->ndim);
    int64_t outer, n, inner;
    split_dims(x, d, op->length > 0 ? (int)op->length : 1, &outer, &n, &inner);
    const float factor = 1.0f / (float)n;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < inner; k++) {
            const float *a = fd(x) + o * n * inner + k;
            float r = 0.0f;
            switch (op->sub) {
            case DRIFT_REDUCE_SUM:
            case DRIFT_REDUCE_MEAN:
                for (int64_t i = 0; i < n; i++) r += a[i * inner];
                if (op->sub == DRIFT_REDUCE_MEAN) r = r * factor;
                break;
            case DRIFT_REDUCE_PROD:
                r = 1.0f;
                for (int64_t i = 0; i < n; i++) r *= a[i * inner];
                break;
            case DRIFT_REDUCE_AMAX:
            case DRIFT_REDUCE_AMIN:
                r = a[0];
                for (int64_t i = 1; i < n; i++)
                    r = op->sub == DRIFT_REDUCE_AMAX ? maxf_nan(r, a[i * inner]) : minf_nan(r, a[i * inner]);
                break;
            case DRIFT_REDUCE_VAR: {
                float s = 0.0f, q = 0.0f;
                for (int64_t i = 0; i < n; i++) s += a[i * inner];
                const float mean = s / (float)n;
                for (int64_t i = 0; i < n; i++) {
                    const float dv = a[i * inner] - mean;
                    q += dv * dv;
                }
                r = q / ((float)n - (float)op->scalar);
                break;
            }
            default: break; /* any/all/argmax/argmin give bool/int64: the fp64 path */
            }
            fd(out)[o * inner + k] = r;
        }
    drift_dtype_round_n(fd(out), (size_t)out->numel, op->out);
}

static void run_cumsum(const drift_op *op, const drift_tensor *x, drift_tensor *out) {
    int d = x->ndim ? drift_op_norm_dim(op->dim, x->ndim) : 0;
    int64_t outer, n, inner;
    split_dims(x, d, x->ndim ? 1 : 0, &outer, &n, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t q = 0; q < inner; q++) {
            float acc = op->sub ? 1.0f : 0.0f;
            for (int64_t i = 0; i < n; i++) {
                const int64_t at = (o * n + i) * inner + q;
                acc = op->sub ? acc * fd(x)[at] : acc + fd(x)[at];
                fd(out)[at] = drift_round_to(acc, op->out);
            }
        }
}

typedef struct sm_job {
    const drift_op *op;
    const float *x;
    float *y;
    int64_t n, inner;
} sm_job;

static void softmax_lines(void *p, int64_t l0, int64_t l1) {
    const sm_job *j = p;
    for (int64_t l = l0; l < l1; l++) {
        const int64_t o = l / j->inner, q = l % j->inner;
        const float *a = j->x + o * j->n * j->inner + q;
        float *y = j->y + o * j->n * j->inner + q;
        float m = -INFINITY, s = 0.0f;
        for (int64_t i = 0; i < j->n; i++) m = maxf_nan(m, a[i * j->inner]);
        const float mm = m == -INFINITY ? 0.0f : m;
        for (int64_t i = 0; i < j->n; i++) s += expf(a[i * j->inner] - mm);
        const float ls = logf(s);
        for (int64_t i = 0; i < j->n; i++) {
            const float v = j->op->sub ? (a[i * j->inner] - mm) - ls : expf(a[i * j->inner] - mm) / s;
            y[i * j->inner] = drift_round_to(v, j->op->out);
        }
    }
}

typedef struct bmm_job {
    const float *a, *b;
    float *c;
    int64_t M, N, K;
    atomic_int nomem;
} bmm_job;

/* Matrices [b0, b1), each on one thread (the GEMM's bits do not depend on it). */
static void bmm_range(void *p, int64_t b0, int64_t b1) {
    bmm_job *j = p;
    for (int64_t b = b0; b < b1; b++) {
        const drift_gemm g = {j->M, j->N, j->K, j->a + b * j->M * j->K, j->K, 1, j->b + b * j->K * j->N, j->N, 1,
                              j->c + b * j->M * j->N, j->N};
        if (drift_cpu_gemm(1, &g)) atomic_store(&j->nomem, 1);
    }
}

/* Per batch, acc = A B through drift's GEMM (cpu_gemm.h: its order depends
 * on K alone), then r = alpha acc (alpha != 1), r = r + beta c (baddbmm).
 * Threads over the batch when it has a matrix per thread, else inside each
 * GEMM. */
static int run_bmm(int nt, const drift_op *op, const drift_tensor *const *in, drift_tensor *out, drift_err *err) {
    const drift_tensor *A = in[0], *B = in[1];
    const int nd = A->ndim;
    const int64_t M = A->shape[nd - 2], K = A->shape[nd - 1], N = B->shape[nd - 1];
    const int64_t batch = M * N > 0 ? out->numel / (M * N) : 0;
    const float al = op->alpha, be = op->beta;
    bmm_job j = {fd(A), fd(B), fd(out), M, N, K, 0};
    if (batch >= nt)
        drift_host_parallel_for(nt, batch, 1, bmm_range, &j);
    else
        for (int64_t b = 0; b < batch; b++) {
            const drift_gemm g = {M, N, K, j.a + b * M * K, K, 1, j.b + b * K * N, N, 1, j.c + b * M * N, N};
            if (drift_cpu_gemm(nt, &g)) atomic_store(&j.nomem, 1);
        }
    if (atomic_load(&j.nomem))
        return drift_err_set(err, DRIFT_E_NOMEM, "op", "%s: out of memory for a scratch buffer",
                             drift_op_name(op->kind));
    for (int64_t e = 0; e < batch * M * N; e++) {
        float r = fd(out)[e];
        if (al != 1.0f) r = al * r;
        if (op->n_in > 2 && be != 0.0f) {
            const float c = fd(in[2])[bc_off(in[2], out, e)];
            r = r + (be == 1.0f ? c : be * c);
        }
        fd(out)[e] = r;
    }
    drift_dtype_round_n(fd(out), (size_t)out->numel, op->out);
    return DRIFT_OK;
}

static void run_group_norm(const drift_op *op, const drift_tensor *const *in, drift_tensor *out) {
    const drift_tensor *x = in[0];
    const int64_t N = x->shape[0], C = x->shape[1], G = op->length, cg = C / G;
    int64_t sp = 1;
    for (int i = 2; i < x->ndim; i++) sp *= x->shape[i];
    const int64_t cnt = cg * sp;
    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < G; g++) {
            const int64_t base = (n * C + g * cg) * sp;
            const float *a = fd(x) + base;
            float s = 0.0f, q = 0.0f;
            for (int64_t i = 0; i < cnt; i++) s += a[i];
            const float mean = s / (float)cnt;
            for (int64_t i = 0; i < cnt; i++) {
                const float dv = a[i] - mean;
                q += dv * dv;
            }
            const float rstd = 1.0f / sqrtf(q / (float)cnt + op->eps);
            for (int64_t i = 0; i < cnt; i++) {
                const int64_t c = g * cg + i / sp;
                float v = (a[i] - mean) * rstd;
                if (op->n_in > 1) v = v * fd(in[1])[c];
                if (op->n_in > 2) v = v + fd(in[2])[c];
                fd(out)[base + i] = v;
            }
        }
    drift_dtype_round_n(fd(out), (size_t)out->numel, op->out);
}

int drift_cpu_run_opset(int nthreads, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                        drift_err *err) {
    switch (op->kind) {
    case DRIFT_OP_REDUCE: run_reduce(op, in[0], out); return DRIFT_OK;
    case DRIFT_OP_BINARY:
        for (int64_t e = 0; e < out->numel; e++)
            fd(out)[e] = binary_f(op->sub, fd(in[0])[bc_off(in[0], out, e)], fd(in[1])[bc_off(in[1], out, e)]);
        drift_dtype_round_n(fd(out), (size_t)out->numel, op->out);
        return DRIFT_OK;
    case DRIFT_OP_CUMSUM: run_cumsum(op, in[0], out); return DRIFT_OK;
    case DRIFT_OP_SOFTMAX: {
        const drift_tensor *x = in[0];
        int d = x->ndim ? drift_op_norm_dim(op->dim, x->ndim) : 0;
        int64_t outer, n, inner;
        split_dims(x, d, x->ndim ? 1 : 0, &outer, &n, &inner);
        sm_job j = {op, fd(x), fd(out), n, inner};
        drift_host_parallel_for(nthreads, outer * inner, 64, softmax_lines, &j);
        return DRIFT_OK;
    }
    case DRIFT_OP_BMM: return run_bmm(nthreads, op, in, out, err);
    case DRIFT_OP_GROUP_NORM: run_group_norm(op, in, out); return DRIFT_OK;
    default: break;
    }
    return drift_err_set(err, DRIFT_E_UNSUPPORTED, "op", "cpu backend: op %s on %s not implemented",
                         drift_op_name(op->kind), drift_dtype_name(op->out));
}
