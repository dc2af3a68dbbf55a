/* ROPE on x[B, L, H, Dh] with cos/sin tables [L, Dh] (diffusers Wan's
 * apply_rotary_emb): for each pair (x0, x1) = (x[2i], x[2i+1]),
 *   out[2i]   = x0*cos[2i]   - x1*sin[2i+1]
 *   out[2i+1] = x0*sin[2i+1] + x1*cos[2i]
 * in fp32 with one rounding to the output dtype; products and the sum are
 * separate _rn operations (no FMA), bit-identical to the cpu backend.
 * One thread per pair, grid-stride; 32- or 64-bit indexing. */
#include "kernels/cuda/dev_common.cuh"

namespace {

template <typename I>
__global__ void k_rope(const void *__restrict__ x, int tx, I npairs, I L, I H, I half, const void *__restrict__ cosb,
                       int tc, const void *__restrict__ sinb, int ts, void *__restrict__ y, int ty) {
    I stride = (I)gridDim.x * (I)blockDim.x;
    for (I p = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; p < npairs; p += stride) {
        I row = p / half, i = p - row * half; /* row = (b*L + l)*H + h */
        I l = (row / H) % L;
        I dh = 2 * half;
        I xi = row * dh + 2 * i, ti = l * dh + 2 * i;
        float x0 = dcu_ld<I>(x, tx, xi), x1 = dcu_ld<I>(x, tx, xi + 1);
        float c = dcu_ld<I>(cosb, tc, ti), s = dcu_ld<I>(sinb, ts, ti + 1);
        float o0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        float o1 = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
        dcu_st<I>(y, ty, xi, o0);
        dcu_st<I>(y, ty, xi + 1, o1);
    }
}

} // namespace

extern "C" cudaError_t dcu_launch_rope(const dcu_ctx *ctx, const void *x, drift_dtype tx, int64_t nb, int64_t L,
                                       int64_t H, int64_t Dh, const void *cosb, drift_dtype tc, const void *sinb,
                                       drift_dtype ts, void *y, drift_dtype ty) {
    if (Dh < 2 || (Dh & 1)) return cudaErrorInvalidValue;
    int64_t half = Dh / 2;
    int64_t npairs = nb * L * H * half;
    if (npairs <= 0) return cudaSuccess;
    unsigned blocks = dcu_blocks_for(npairs, DCU_THREADS, ctx);
    if (dcu_use_i32(ctx, npairs * 2 + Dh))
        k_rope<int32_t><<<blocks, DCU_THREADS, 0, ctx->stream>>>(x, tx, (int32_t)npairs, (int32_t)L, (int32_t)H,
                                                                 (int32_t)half, cosb, tc, sinb, ts, y, ty);
    else
        k_rope<int64_t><<<blocks, DCU_THREADS, 0, ctx->stream>>>(x, tx, npairs, L, H, half, cosb, tc, sinb, ts, y, ty);
    return cudaGetLastError();
}
