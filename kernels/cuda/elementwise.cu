/* Elementwise kernels: CAST, AFFINE, SILU, GELU_TANH (unary), ADD/SUB/MUL
 * with numpy broadcasting (binary), the timestep sinusoid and the GEMM
 * bias/rounding epilogue of the unfused path.
 *
 * Numerics: fp32 opmath, one rounding to the output dtype, the order of
 * operations of kernels/backend.h, every float operation an _rn intrinsic
 * (no FMA contraction): bit-identical to the cpu backend for CAST, ADD, SUB,
 * MUL, AFFINE. SILU and GELU_TANH call CUDA's precise expf/tanhf (max error
 * 2 fp32 ULPs each, CUDA Programming Guide, Mathematical Functions); the
 * sinusoid computes exp/sin/cos in fp64 and rounds once to fp32.
 *
 * Launch configurations: every kernel is a grid-stride loop of DCU_THREADS
 * threads per block, at most 32 blocks per SM; 32-bit indices when the
 * largest index fits (dcu_use_i32), else 64-bit. Binary ops pick FLAT (one
 * collapsed dim: same shapes, or a scalar operand) or GENERAL (per-element
 * index decomposition over up to 8 collapsed dims); before them, fp32/bf16
 * operands of a rows x D shape (D % 4 == 0, unit or zero innermost strides:
 * same shapes, a row or column broadcast) take ROWS4, four elements per
 * thread with 8/16-byte loads (the same values). */
#include "kernels/cuda/dev_common.cuh"

namespace {

/* sqrt(2/pi) as PyTorch computes kBeta (M_SQRT2 * M_2_SQRTPI * 0.5 in double,
 * then rounded to float) and kKappa. */
__device__ const float kGeluBeta = 0.7978845608028654f;
__device__ const float kGeluKappa = 0.044715f;

template <int OP>
DCU_DEV float unary_op(float v, float alpha, float beta) {
    if (OP == DCU_UN_CAST) return v;
    if (OP == DCU_UN_AFFINE) return __fadd_rn(__fmul_rn(v, alpha), beta);
    if (OP == DCU_UN_SILU) return __fdiv_rn(v, __fadd_rn(1.0f, expf(-v)));
    /* GELU tanh, PyTorch's order: x^3 = (x*x)*x; inner = kBeta*(x + kKappa*x^3);
       y = (0.5*x) * (1 + tanh(inner)) */
    float x3 = __fmul_rn(__fmul_rn(v, v), v);
    float inner = __fmul_rn(kGeluBeta, __fadd_rn(v, __fmul_rn(kGeluKappa, x3)));
    return __fmul_rn(__fmul_rn(0.5f, v), __fadd_rn(1.0f, tanhf(inner)));
}

template <int OP, typename I>
__global__ void k_unary(const void *__restrict__ x, int tx, void *__restrict__ y, int ty, I n, float alpha,
                        float beta) {
    I stride = (I)gridDim.x * (I)blockDim.x;
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < n; i += stride) {
        float v = dcu_ld<I>(x, tx, i);
        dcu_st<I>(y, ty, i, unary_op<OP>(v, alpha, beta));
    }
}

template <int OP>
DCU_DEV float binary_op(float a, float b) {
    if (OP == DCU_BIN_ADD) return __fadd_rn(a, b);
    if (OP == DCU_BIN_SUB) return __fsub_rn(a, b);
    return __fmul_rn(a, b);
}

struct BcastArgs {
    int nd;
    int64_t shape[DRIFT_MAX_DIMS];
    int64_t sa[DRIFT_MAX_DIMS];
    int64_t sb[DRIFT_MAX_DIMS];
};

template <int OP, typename I, bool FLAT>
__global__ void k_binary(const void *__restrict__ a, int ta, const void *__restrict__ b, int tb,
                         void *__restrict__ y, int ty, I n, BcastArgs bc) {
    I stride = (I)gridDim.x * (I)blockDim.x;
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < n; i += stride) {
        I oa, ob;
        if (FLAT) {
            oa = i * (I)bc.sa[0];
            ob = i * (I)bc.sb[0];
        } else {
            I rem = i;
            oa = 0;
            ob = 0;
            for (int d = bc.nd - 1; d >= 0; d--) {
                I s = (I)bc.shape[d];
                I c = rem % s;
                rem /= s;
                oa += c * (I)bc.sa[d];
                ob += c * (I)bc.sb[d];
            }
        }
        float va = dcu_ld<I>(a, ta, oa), vb = dcu_ld<I>(b, tb, ob);
        dcu_st<I>(y, ty, i, binary_op<OP>(va, vb));
    }
}

/* The common broadcast shapes, 4 output elements per thread: the collapsed
 * output is rows x D (D % 4 == 0), each operand's innermost stride is 1 (4
 * consecutive values) or 0 (one value for the 4), its row stride a multiple
 * of 4 (or 0). Dtypes are template constants (DRIFT_F32 / DRIFT_BF16): the
 * per-element values and their rounding are k_binary's, only the memory
 * access is wider. */
template <int OP, int TA, int TB, int TY>
__global__ void k_binary_rows4(const void *__restrict__ a, const void *__restrict__ b, void *__restrict__ y,
                               int64_t rows, int64_t D, int64_t sa0, int sa1, int64_t sb0, int sb1) {
    const int64_t n4 = rows * D / 4;
    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < n4; q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t e = q * 4, r = e / D, c = e - r * D;
        float va[4], vb[4], o[4];
        if (sa1) dcu_ld4<TA>(a, TA, r * sa0 + c, va);
        else va[0] = va[1] = va[2] = va[3] = dcu_ld<int64_t>(a, TA, r * sa0);
        if (sb1) dcu_ld4<TB>(b, TB, r * sb0 + c, vb);
        else vb[0] = vb[1] = vb[2] = vb[3] = dcu_ld<int64_t>(b, TB, r * sb0);
#pragma unroll
        for (int k = 0; k < 4; k++) o[k] = binary_op<OP>(va[k], vb[k]);
        dcu_st4<TY>(y, TY, e, o);
    }
}

template <int OP, int TA, int TB>
void rows4_ty(const dcu_ctx *ctx, unsigned blocks, const void *a, const void *b, void *y, drift_dtype ty, int64_t rows,
              int64_t D, int64_t sa0, int sa1, int64_t sb0, int sb1) {
    if (ty == DRIFT_F32)
        k_binary_rows4<OP, TA, TB, DRIFT_F32><<<blocks, DCU_THREADS, 0, ctx->stream>>>(a, b, y, rows, D, sa0, sa1, sb0, sb1);
    else
        k_binary_rows4<OP, TA, TB, DRIFT_BF16><<<blocks, DCU_THREADS, 0, ctx->stream>>>(a, b, y, rows, D, sa0, sa1, sb0, sb1);
}

/* 1 and the launch done when bc has the rows x D form of k_binary_rows4 with
 * fp32/bf16 operands and output, aligned; 0: the general kernels run. */
template <int OP>
int try_binary_rows4(const dcu_ctx *ctx, const void *a, drift_dtype ta, const void *b, drift_dtype tb, void *y,
                     drift_dtype ty, const drift_bcast *bc) {
    const auto ok_dt = [](drift_dtype t) { return t == DRIFT_F32 || t == DRIFT_BF16; };
    if (!ok_dt(ta) || !ok_dt(tb) || !ok_dt(ty) || bc->nd > 2) return 0;
    const int L = bc->nd - 1;
    const int64_t D = bc->shape[L], rows = bc->nd == 2 ? bc->shape[0] : 1;
    const int64_t sa1 = bc->sa[L], sb1 = bc->sb[L], sa0 = bc->nd == 2 ? bc->sa[0] : 0, sb0 = bc->nd == 2 ? bc->sb[0] : 0;
    if (D % 4 || (sa1 != 0 && sa1 != 1) || (sb1 != 0 && sb1 != 1) || (sa1 == 1 && sa0 % 4) || (sb1 == 1 && sb0 % 4))
        return 0;
    const auto aligned = [](const void *p, drift_dtype t, int64_t unit) {
        return unit == 0 || !((uintptr_t)p & (uintptr_t)(t == DRIFT_F32 ? 15 : 7));
    };
    if (!aligned(a, ta, sa1) || !aligned(b, tb, sb1) || !aligned(y, ty, 1)) return 0;
    const unsigned blocks = dcu_blocks_for(rows * D / 4, DCU_THREADS, ctx);
    if (ta == DRIFT_F32 && tb == DRIFT_F32) rows4_ty<OP, DRIFT_F32, DRIFT_F32>(ctx, blocks, a, b, y, ty, rows, D, sa0, (int)sa1, sb0, (int)sb1);
    else if (ta == DRIFT_F32) rows4_ty<OP, DRIFT_F32, DRIFT_BF16>(ctx, blocks, a, b, y, ty, rows, D, sa0, (int)sa1, sb0, (int)sb1);
    else if (tb == DRIFT_F32) rows4_ty<OP, DRIFT_BF16, DRIFT_F32>(ctx, blocks, a, b, y, ty, rows, D, sa0, (int)sa1, sb0, (int)sb1);
    else rows4_ty<OP, DRIFT_BF16, DRIFT_BF16>(ctx, blocks, a, b, y, ty, rows, D, sa0, (int)sa1, sb0, (int)sb1);
    return 1;
}

template <typename I>
__global__ void k_sinusoid(const void *__restrict__ t, int tt, void *__restrict__ y, int ty, I nb, I dim,
                           float neg_log_period, int flip) {
    I n = nb * dim;
    I half = dim / 2;
    I stride = (I)gridDim.x * (I)blockDim.x;
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < n; i += stride) {
        I row = i / dim, col = i - row * dim;
        float out = 0.0f; /* odd dim: the last column is zero padding */
        if (col < 2 * half) {
            int first = col < half;
            I j = first ? col : col - half;
            /* freq_j = exp((-ln(max_period) * j) / half) in fp32; exp evaluated
               in fp64 and rounded once (correctly rounded but for ties) */
            float e = __fdiv_rn(__fmul_rn(neg_log_period, (float)j), (float)half);
            float freq = (float)exp((double)e);
            float arg = __fmul_rn(dcu_ld<I>(t, tt, row), freq);
            int want_sin = flip ? !first : first;
            out = want_sin ? (float)sin((double)arg) : (float)cos((double)arg);
        }
        dcu_st<I>(y, ty, i, out);
    }
}

template <typename I>
__global__ void k_bias_round(const float *__restrict__ src, I m, I n, I total, const void *__restrict__ bias,
                             int tbias, void *__restrict__ d, int td, I ldd, I stride_d) {
    I stride = (I)gridDim.x * (I)blockDim.x;
    I mn = m * n;
    for (I idx = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; idx < total; idx += stride) {
        I z = idx / mn, rem = idx - z * mn;
        I j = rem / m, i = rem - j * m;
        float v = src[idx];
        if (bias) v = __fadd_rn(v, dcu_ld<I>(bias, tbias, i));
        dcu_st<I>(d, td, i + j * ldd + z * stride_d, v);
    }
}

template <int OP>
cudaError_t launch_unary_t(const dcu_ctx *ctx, const void *x, drift_dtype tx, void *y, drift_dtype ty, int64_t n,
                           float alpha, float beta) {
    unsigned blocks = dcu_blocks_for(n, DCU_THREADS, ctx);
    if (dcu_use_i32(ctx, n))
        k_unary<OP, int32_t><<<blocks, DCU_THREADS, 0, ctx->stream>>>(x, tx, y, ty, (int32_t)n, alpha, beta);
    else
        k_unary<OP, int64_t><<<blocks, DCU_THREADS, 0, ctx->stream>>>(x, tx, y, ty, n, alpha, beta);
    return cudaGetLastError();
}

template <int OP>
cudaError_t launch_binary_t(const dcu_ctx *ctx, const void *a, drift_dtype ta, const void *b, drift_dtype tb,
                            void *y, drift_dtype ty, const drift_bcast *bc) {
    if (try_binary_rows4<OP>(ctx, a, ta, b, tb, y, ty, bc)) return cudaGetLastError();
    BcastArgs args;
    args.nd = bc->nd;
    int64_t maxa = 0, maxb = 0;
    for (int d = 0; d < DRIFT_MAX_DIMS; d++) {
        args.shape[d] = d < bc->nd ? bc->shape[d] : 1;
        args.sa[d] = d < bc->nd ? bc->sa[d] : 0;
        args.sb[d] = d < bc->nd ? bc->sb[d] : 0;
        if (d < bc->nd) {
            maxa += (bc->shape[d] - 1) * bc->sa[d];
            maxb += (bc->shape[d] - 1) * bc->sb[d];
        }
    }
    int64_t n = bc->numel;
    int64_t maxi = n > maxa ? n : maxa;
    if (maxb > maxi) maxi = maxb;
    /* the flat path multiplies i by the stride: bound that product too */
    if (bc->nd == 1) {
        int64_t pa = n * args.sa[0], pb = n * args.sb[0];
        if (pa > maxi) maxi = pa;
        if (pb > maxi) maxi = pb;
    }
    unsigned blocks = dcu_blocks_for(n, DCU_THREADS, ctx);
    bool flat = bc->nd == 1;
    if (dcu_use_i32(ctx, maxi)) {
        if (flat)
            k_binary<OP, int32_t, true><<<blocks, DCU_THREADS, 0, ctx->stream>>>(a, ta, b, tb, y, ty, (int32_t)n, args);
        else
            k_binary<OP, int32_t, false><<<blocks, DCU_THREADS, 0, ctx->stream>>>(a, ta, b, tb, y, ty, (int32_t)n, args);
    } else {
        if (flat)
            k_binary<OP, int64_t, true><<<blocks, DCU_THREADS, 0, ctx->stream>>>(a, ta, b, tb, y, ty, n, args);
        else
            k_binary<OP, int64_t, false><<<blocks, DCU_THREADS, 0, ctx->stream>>>(a, ta, b, tb, y, ty, n, args);
    }
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t dcu_launch_unary(const dcu_ctx *ctx, int op, const void *x, drift_dtype tx, void *y,
                                        drift_dtype ty, int64_t n, float alpha, float beta) {
    if (n <= 0) return cudaSuccess;
    switch (op) {
    case DCU_UN_CAST: return launch_unary_t<DCU_UN_CAST>(ctx, x, tx, y, ty, n, alpha, beta);
    case DCU_UN_AFFINE: return launch_unary_t<DCU_UN_AFFINE>(ctx, x, tx, y, ty, n, alpha, beta);
    case DCU_UN_SILU: return launch_unary_t<DCU_UN_SILU>(ctx, x, tx, y, ty, n, alpha, beta);
    case DCU_UN_GELU_TANH: return launch_unary_t<DCU_UN_GELU_TANH>(ctx, x, tx, y, ty, n, alpha, beta);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t dcu_launch_binary(const dcu_ctx *ctx, int op, const void *a, drift_dtype ta, const void *b,
                                         drift_dtype tb, void *y, drift_dtype ty, const drift_bcast *bc) {
    if (bc->numel <= 0) return cudaSuccess;
    if (bc->nd < 1 || bc->nd > DRIFT_MAX_DIMS) return cudaErrorInvalidValue;
    switch (op) {
    case DCU_BIN_ADD: return launch_binary_t<DCU_BIN_ADD>(ctx, a, ta, b, tb, y, ty, bc);
    case DCU_BIN_SUB: return launch_binary_t<DCU_BIN_SUB>(ctx, a, ta, b, tb, y, ty, bc);
    case DCU_BIN_MUL: return launch_binary_t<DCU_BIN_MUL>(ctx, a, ta, b, tb, y, ty, bc);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t dcu_launch_sinusoid(const dcu_ctx *ctx, const void *t, drift_dtype tt, void *y,
                                           drift_dtype ty, int64_t nb, int dim, float neg_log_period, int flip) {
    int64_t n = nb * (int64_t)dim;
    if (n <= 0) return cudaSuccess;
    unsigned blocks = dcu_blocks_for(n, DCU_THREADS, ctx);
    if (dcu_use_i32(ctx, n))
        k_sinusoid<int32_t><<<blocks, DCU_THREADS, 0, ctx->stream>>>(t, tt, y, ty, (int32_t)nb, (int32_t)dim,
                                                                     neg_log_period, flip);
    else
        k_sinusoid<int64_t><<<blocks, DCU_THREADS, 0, ctx->stream>>>(t, tt, y, ty, nb, (int64_t)dim, neg_log_period,
                                                                     flip);
    return cudaGetLastError();
}

extern "C" cudaError_t dcu_launch_bias_round(const dcu_ctx *ctx, const float *src, int64_t m, int64_t n,
                                             int64_t batch, const void *bias, drift_dtype tbias, void *d,
                                             drift_dtype td, int64_t ldd, int64_t stride_d) {
    int64_t total = m * n * batch;
    if (total <= 0) return cudaSuccess;
    int64_t maxd = (m - 1) + (n - 1) * ldd + (batch - 1) * stride_d + 1;
    int64_t maxi = total > maxd ? total : maxd;
    unsigned blocks = dcu_blocks_for(total, DCU_THREADS, ctx);
    if (dcu_use_i32(ctx, maxi))
        k_bias_round<int32_t><<<blocks, DCU_THREADS, 0, ctx->stream>>>(src, (int32_t)m, (int32_t)n, (int32_t)total,
                                                                       bias, tbias, d, td, (int32_t)ldd,
                                                                       (int32_t)stride_d);
    else
        k_bias_round<int64_t><<<blocks, DCU_THREADS, 0, ctx->stream>>>(src, m, n, total, bias, tbias, d, td, ldd,
                                                                       stride_d);
    return cudaGetLastError();
}
