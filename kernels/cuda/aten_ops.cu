/* The ATen-level ops of captured graphs on the GPU (backend.h DRIFT_OP_UNARY,
 * SCALAR, DIV, REDUCE, FILL; STRIDED and SCATTER are strided copies in
 * aten_cuda.c). Numerics as the cpu backend (kernels/cpu/cpu_aten_ops.c):
 * fp32 opmath, one rounding, every arithmetic operation an _rn intrinsic (no
 * FMA contraction), so NEG, RSQRT, SQRT, RECIP, ABS, RELU, the scalar ops
 * (except a general pow), DIV, REDUCE and FILL are bitwise equal to the cpu
 * backend; EXP, SIN, COS, TANH, SIGMOID, GELU_ERF and pow call CUDA's precise
 * functions (a few fp32 ULPs from glibc's). REDUCE sums sequentially per
 * output element, in index order, as the cpu backend. */
#include "kernels/cuda/dev_common.cuh"

namespace {

DCU_DEV float aten_unary(int sub, float x) {
    switch (sub) {
    case DRIFT_UNARY_NEG: return -x;
    case DRIFT_UNARY_EXP: return expf(x);
    case DRIFT_UNARY_SIN: return sinf(x);
    case DRIFT_UNARY_COS: return cosf(x);
    case DRIFT_UNARY_RSQRT: return __fdiv_rn(1.0f, __fsqrt_rn(x));
    case DRIFT_UNARY_SQRT: return __fsqrt_rn(x);
    case DRIFT_UNARY_TANH: return tanhf(x);
    case DRIFT_UNARY_SIGMOID: return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
    case DRIFT_UNARY_GELU_ERF: {
        float t = __fmul_rn(x, 0.70710678118654752440f);
        return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, erff(t)));
    }
    case DRIFT_UNARY_RECIP: return __fdiv_rn(1.0f, x);
    case DRIFT_UNARY_ABS: return fabsf(x);
    case DRIFT_UNARY_RELU: return x != x ? x : (x > 0.0f ? x : 0.0f);
    case DRIFT_UNARY_MASK_BIAS: return x != 0.0f ? 0.0f : __int_as_float(0xff800000);
    default: return x;
    }
}

DCU_DEV float aten_pow(float x, double e) {
    if (e == 2.0) return __fmul_rn(x, x);
    if (e == 3.0) return __fmul_rn(__fmul_rn(x, x), x);
    if (e == 0.5) return __fsqrt_rn(x);
    if (e == -0.5) return __fdiv_rn(1.0f, __fsqrt_rn(x));
    if (e == -1.0) return __fdiv_rn(1.0f, x);
    if (e == -2.0) return __fdiv_rn(1.0f, __fmul_rn(x, x));
    return powf(x, (float)e);
}

DCU_DEV float aten_scalar(int sub, float x, float s, double s64) {
    switch (sub) {
    case DRIFT_SCALAR_ADD: return __fadd_rn(x, s);
    case DRIFT_SCALAR_SUB: return __fsub_rn(x, s);
    case DRIFT_SCALAR_RSUB: return __fsub_rn(s, x);
    case DRIFT_SCALAR_MUL: return __fmul_rn(x, s);
    case DRIFT_SCALAR_DIV: return __fmul_rn(x, __fdiv_rn(1.0f, s));
    case DRIFT_SCALAR_POW: return aten_pow(x, s64);
    case DRIFT_SCALAR_RPOW: return powf(s, x);
    case DRIFT_SCALAR_MAX: return x != x ? x : (x < s ? s : x);
    case DRIFT_SCALAR_MIN: return x != x ? x : (x > s ? s : x);
    default: return x;
    }
}

template <typename I>
__global__ void k_aten_ew(const void *__restrict__ x, int tx, void *__restrict__ y, int ty, I n, int kind, int sub,
                          float s, double s64) {
    I stride = (I)gridDim.x * (I)blockDim.x;
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < n; i += stride) {
        float v = dcu_ld<I>(x, tx, i);
        dcu_st<I>(y, ty, i, kind ? aten_scalar(sub, v, s, s64) : aten_unary(sub, v));
    }
}

struct DivArgs {
    int nd;
    int64_t shape[DRIFT_MAX_DIMS];
    int64_t sa[DRIFT_MAX_DIMS];
    int64_t sb[DRIFT_MAX_DIMS];
};

__global__ void k_div(const void *__restrict__ a, int ta, const void *__restrict__ b, int tb, void *__restrict__ y,
                      int ty, int64_t n, DivArgs bc) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t rem = i, oa = 0, ob = 0;
        for (int d = bc.nd - 1; d >= 0; d--) {
            int64_t c = rem % bc.shape[d];
            rem /= bc.shape[d];
            oa += c * bc.sa[d];
            ob += c * bc.sb[d];
        }
        dcu_st<int64_t>(y, ty, i, __fdiv_rn(dcu_ld<int64_t>(a, ta, oa), dcu_ld<int64_t>(b, tb, ob)));
    }
}

__global__ void k_reduce(const void *__restrict__ x, int tx, void *__restrict__ y, int ty, int64_t outer, int64_t n,
                         int64_t inner, int mean) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x, total = outer * inner;
    const float factor = __fdiv_rn(1.0f, (float)n);
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const int64_t o = e / inner, k = e - o * inner;
        float s = 0.0f;
        for (int64_t i = 0; i < n; i++) s = __fadd_rn(s, dcu_ld<int64_t>(x, tx, (o * n + i) * inner + k));
        dcu_st<int64_t>(y, ty, e, mean ? __fmul_rn(s, factor) : s);
    }
}

__global__ void k_fill(void *__restrict__ y, int ty, int64_t n, int iota, double value, double step) {
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    if (iota == 2) { /* torch's linspace, as the cpu backend */
        const float a = (float)value, b = (float)step, st = n > 1 ? __fdiv_rn(__fsub_rn(b, a), (float)(n - 1)) : 0.0f;
        const int64_t half = n / 2;
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
            float t = i < half ? __fmul_rn(st, (float)i) : __fmul_rn(st, (float)(n - i - 1));
            dcu_st<int64_t>(y, ty, i, i < half ? __fadd_rn(a, t) : __fsub_rn(b, t));
        }
        return;
    }
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const double v = iota ? value + (double)i * step : value;
        dcu_st<int64_t>(y, ty, i, (float)v);
    }
}

} // namespace

extern "C" cudaError_t dcu_launch_aten_ew(const dcu_ctx *ctx, int kind, int sub, const void *x, drift_dtype tx, void *y,
                                          drift_dtype ty, int64_t n, double s) {
    const unsigned blocks = dcu_blocks_for(n, DCU_THREADS, ctx);
    if (dcu_use_i32(ctx, n))
        k_aten_ew<int32_t><<<blocks, DCU_THREADS, 0, ctx->stream>>>(x, tx, y, ty, (int32_t)n, kind, sub, (float)s, s);
    else
        k_aten_ew<int64_t><<<blocks, DCU_THREADS, 0, ctx->stream>>>(x, tx, y, ty, n, kind, sub, (float)s, s);
    return cudaGetLastError();
}

extern "C" cudaError_t dcu_launch_div(const dcu_ctx *ctx, const void *a, drift_dtype ta, const void *b, drift_dtype tb,
                                      void *y, drift_dtype ty, const drift_bcast *bc) {
    DivArgs args;
    args.nd = bc->nd;
    for (int i = 0; i < DRIFT_MAX_DIMS; i++) {
        args.shape[i] = bc->shape[i];
        args.sa[i] = bc->sa[i];
        args.sb[i] = bc->sb[i];
    }
    k_div<<<dcu_blocks_for(bc->numel, DCU_THREADS, ctx), DCU_THREADS, 0, ctx->stream>>>(a, ta, b, tb, y, ty, bc->numel,
                                                                                       args);
    return cudaGetLastError();
}

extern "C" cudaError_t dcu_launch_reduce(const dcu_ctx *ctx, const void *x, drift_dtype tx, void *y, drift_dtype ty,
                                         int64_t outer, int64_t n, int64_t inner, int mean) {
    k_reduce<<<dcu_blocks_for(outer * inner, DCU_THREADS, ctx), DCU_THREADS, 0, ctx->stream>>>(x, tx, y, ty, outer, n,
                                                                                              inner, mean);
    return cudaGetLastError();
}

extern "C" cudaError_t dcu_launch_fill(const dcu_ctx *ctx, void *y, drift_dtype ty, int64_t n, int iota, double value,
                                       double step) {
    k_fill<<<dcu_blocks_for(n, DCU_THREADS, ctx), DCU_THREADS, 0, ctx->stream>>>(y, ty, n, iota, value, step);
    return cudaGetLastError();
}
