/* Attention kernels between the two cuBLASLt GEMMs (attention_lt.c):
 *   softmax rows: m = max_j s, p = expf(s - m) in fp32 (CUDA precise expf,
 *     <= 2 ULPs), l = sum p in fp32 (tree order: thread-strided partials,
 *     butterfly warp sums, warp totals in warp order), p rounded to the
 *     compute dtype for the P.V GEMM (l sums the unrounded p);
 *   finalize: o = (P.V)/l in fp32 (__fdiv_rn), rounded once to the output.
 * One block of 256 threads per row, grid-stride over rows.
 * A flash-style fused kernel (S and P never leaving shared memory) is the
 * planned optimisation; this unfused version favours exact semantics. */
#include "kernels/cuda/dev_common.cuh"

namespace {

constexpr int kRowThreads = 256;

DCU_DEV float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
DCU_DEV float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__global__ void __launch_bounds__(kRowThreads) k_softmax_rows(const float *__restrict__ s, int64_t rows, int64_t cols,
                                                             void *__restrict__ p, int tp, float *__restrict__ l) {
    __shared__ float red[kRowThreads / 32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const float *sr = s + row * cols;
        float m = -INFINITY;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, sr[j]);
        m = warp_max(m);
        __syncthreads();
        if (lane == 0) red[w] = m;
        __syncthreads();
        m = red[0];
        for (int i = 1; i < nw; i++) m = fmaxf(m, red[i]);
        float acc = 0.0f;
        int64_t pbase = row * cols;
        for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
            float e = expf(__fsub_rn(sr[j], m));
            acc = __fadd_rn(acc, e);
            dcu_st<int64_t>(p, tp, pbase + j, e);
        }
        acc = warp_sum(acc);
        __syncthreads();
        if (lane == 0) red[w] = acc;
        __syncthreads();
        if (threadIdx.x == 0) {
            float t = 0.0f;
            for (int i = 0; i < nw; i++) t = __fadd_rn(t, red[i]);
            l[row] = t;
        }
    }
}

template <typename I>
__global__ void k_attn_finalize(const float *__restrict__ o, const float *__restrict__ l, I nb, I nr, I dv, I lq,
                                I r0, void *__restrict__ out, int to) {
    I n = nb * nr * dv;
    I stride = (I)gridDim.x * (I)blockDim.x;
    for (I idx = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; idx < n; idx += stride) {
        I row = idx / dv, e = idx - row * dv; /* row = z*nr + i */
        I z = row / nr, i = row - z * nr;
        float v = __fdiv_rn(o[idx], l[row]);
        dcu_st<I>(out, to, (z * lq + r0 + i) * dv + e, v);
    }
}

/* s[(z*nr + i)*lk + j] += bias[b*bs0 + h*bs1 + (r0 + i)*bs2 + j] with bh0 + z = b*H + h:
 * one fp32 rounding, after the scale (ATTENTION's additive bias, kernels/backend.h). */
__global__ void k_attn_add_bias(float *__restrict__ s, const float *__restrict__ bias, int64_t nb, int64_t nr,
                                int64_t lk, int64_t bh0, int64_t H, int64_t r0, int64_t bs0, int64_t bs1, int64_t bs2) {
    const int64_t n = nb * nr * lk, stride = (int64_t)gridDim.x * (int64_t)blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * (int64_t)blockDim.x + (int64_t)threadIdx.x; idx < n; idx += stride) {
        const int64_t j = idx % lk, row = idx / lk, z = row / nr, i = row - z * nr;
        const int64_t bh = bh0 + z, b = bh / H, h = bh - b * H;
        s[idx] = __fadd_rn(s[idx], bias[b * bs0 + h * bs1 + (r0 + i) * bs2 + j]);
    }
}

} // namespace

extern "C" cudaError_t dcu_launch_attn_add_bias(const dcu_ctx *ctx, float *s, const float *bias, int64_t nb, int64_t nr,
                                                int64_t lk, int64_t bh0, int64_t H, int64_t r0, const int64_t *bs) {
    const int64_t n = nb * nr * lk;
    if (n <= 0) return cudaSuccess;
    k_attn_add_bias<<<dcu_blocks_for(n, DCU_THREADS, ctx), DCU_THREADS, 0, ctx->stream>>>(s, bias, nb, nr, lk, bh0, H, r0,
                                                                                        bs[0], bs[1], bs[2]);
    return cudaGetLastError();
}

extern "C" cudaError_t dcu_launch_softmax_rows(const dcu_ctx *ctx, const float *s, int64_t rows, int64_t cols,
                                               void *p, drift_dtype tp, float *l) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    int64_t cap = (int64_t)(ctx->sm_count > 0 ? ctx->sm_count : 132) * 16;
    unsigned blocks = (unsigned)(rows < cap ? rows : cap);
    k_softmax_rows<<<blocks, kRowThreads, 0, ctx->stream>>>(s, rows, cols, p, tp, l);
    return cudaGetLastError();
}

extern "C" cudaError_t dcu_launch_attn_finalize(const dcu_ctx *ctx, const float *o, const float *l, int64_t nb,
                                                int64_t nr, int64_t Dv, int64_t Lq, int64_t r0, void *out,
                                                drift_dtype to) {
    int64_t n = nb * nr * Dv;
    if (n <= 0) return cudaSuccess;
    int64_t maxo = nb * Lq * Dv;
    unsigned blocks = dcu_blocks_for(n, DCU_THREADS, ctx);
    if (dcu_use_i32(ctx, n > maxo ? n : maxo))
        k_attn_finalize<int32_t><<<blocks, DCU_THREADS, 0, ctx->stream>>>(o, l, (int32_t)nb, (int32_t)nr, (int32_t)Dv,
                                                                          (int32_t)Lq, (int32_t)r0, out, to);
    else
        k_attn_finalize<int64_t><<<blocks, DCU_THREADS, 0, ctx->stream>>>(o, l, nb, nr, Dv, Lq, r0, out, to);
    return cudaGetLastError();
}
