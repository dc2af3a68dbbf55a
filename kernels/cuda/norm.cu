/* LAYER_NORM and RMS_NORM over the last dim: one block per row (grid-stride
 * over rows), fp32 accumulation, warp-shuffle + shared-memory block sums.
 *
 * Numerics: mean = sum(x)/D, var = sum((x-mean)^2)/D (two-pass, biased),
 * rstd = 1/sqrt(var+eps) with correctly rounded sqrt and division
 * (__fsqrt_rn, __fdiv_rn): identical to the cpu backend's 1.0f/sqrtf(...)
 * given the same sums. The sums themselves are in a fixed tree order
 * (thread-strided partial sums, butterfly warp sums, warp totals summed in
 * warp order), deterministic but not the cpu backend's order, so results
 * agree with it to within a few fp32 ULPs of the statistics, i.e. usually
 * bit-equal after rounding to bf16.
 *   layer_norm: y = ((x - mean) * rstd) * w + b
 *   rms_norm:   y = round_out((x * rstd) * w)   (one rounding, as torch 2.11)
 *
 * Launch configurations: block of 64 (D <= 256), 256 (D <= 2048) or 512
 * threads; rows cached in shared memory (each thread re-reads only the
 * elements it loaded, so no extra barrier) when D*4 <= 48 KiB - 256 B and
 * the spec option norm_smem is not 0, else re-read from global memory. */
#include "kernels/cuda/dev_common.cuh"

namespace {

DCU_DEV float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Block-wide sum, identical in every thread. red: 32 floats of shared memory. */
DCU_DEV float block_sum(float v, float *red) {
    v = warp_sum(v);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    __syncthreads(); /* red may still be read by the previous call */
    if (lane == 0) red[w] = v;
    __syncthreads();
    float t = 0.0f;
    for (int i = 0; i < nw; i++) t = __fadd_rn(t, red[i]);
    return t;
}

template <bool SMEM, typename I>
__global__ void k_layer_norm(const void *__restrict__ x, int tx, I rows, I dim, const void *__restrict__ w, int tw,
                             const void *__restrict__ b, int tb, void *__restrict__ y, int ty, float eps) {
    extern __shared__ float srow[];
    __shared__ float red[32];
    for (I row = (I)blockIdx.x; row < rows; row += (I)gridDim.x) {
        I base = row * dim;
        float s = 0.0f;
        for (I j = (I)threadIdx.x; j < dim; j += (I)blockDim.x) {
            float v = dcu_ld<I>(x, tx, base + j);
            if (SMEM) srow[j] = v;
            s = __fadd_rn(s, v);
        }
        s = block_sum(s, red);
        float mean = __fdiv_rn(s, (float)dim);
        float q = 0.0f;
        for (I j = (I)threadIdx.x; j < dim; j += (I)blockDim.x) {
            float v = SMEM ? srow[j] : dcu_ld<I>(x, tx, base + j);
            float dd = __fsub_rn(v, mean);
            q = __fadd_rn(q, __fmul_rn(dd, dd));
        }
        q = block_sum(q, red);
        float var = __fdiv_rn(q, (float)dim);
        float rstd = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(var, eps)));
        for (I j = (I)threadIdx.x; j < dim; j += (I)blockDim.x) {
            float v = SMEM ? srow[j] : dcu_ld<I>(x, tx, base + j);
            float o = __fmul_rn(__fsub_rn(v, mean), rstd);
            if (w) o = __fmul_rn(o, dcu_ld<I>(w, tw, j));
            if (b) o = __fadd_rn(o, dcu_ld<I>(b, tb, j));
            dcu_st<I>(y, ty, base + j, o);
        }
    }
}

template <bool SMEM, typename I>
__global__ void k_rms_norm(const void *__restrict__ x, int tx, I rows, I dim, const void *__restrict__ w, int tw,
                           void *__restrict__ y, int ty, float eps) {
    extern __shared__ float srow[];
    __shared__ float red[32];
    for (I row = (I)blockIdx.x; row < rows; row += (I)gridDim.x) {
        I base = row * dim;
        float s = 0.0f;
        for (I j = (I)threadIdx.x; j < dim; j += (I)blockDim.x) {
            float v = dcu_ld<I>(x, tx, base + j);
            if (SMEM) srow[j] = v;
            s = __fadd_rn(s, __fmul_rn(v, v));
        }
        s = block_sum(s, red);
        float ms = __fdiv_rn(s, (float)dim);
        float rstd = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(ms, eps)));
        for (I j = (I)threadIdx.x; j < dim; j += (I)blockDim.x) {
            float v = SMEM ? srow[j] : dcu_ld<I>(x, tx, base + j);
            float o = __fmul_rn(v, rstd);
            if (w) o = __fmul_rn(o, dcu_ld<I>(w, tw, j));
            dcu_st<I>(y, ty, base + j, o);
        }
    }
}

int norm_threads(int64_t dim) {
    if (dim <= 256) return 64;
    if (dim <= 2048) return 256;
    return 512;
}

unsigned norm_blocks(const dcu_ctx *ctx, int64_t rows) {
    int64_t cap = (int64_t)(ctx->sm_count > 0 ? ctx->sm_count : 132) * 16;
    return (unsigned)(rows < cap ? rows : cap);
}

bool norm_use_smem(const dcu_ctx *ctx, int64_t dim) {
    /* 48 KiB per block without opt-in, static red[] included */
    return ctx->norm_smem && dim * (int64_t)sizeof(float) <= 48 * 1024 - 256;
}

} // namespace

extern "C" cudaError_t dcu_launch_layer_norm(const dcu_ctx *ctx, const void *x, drift_dtype tx, int64_t rows,
                                             int64_t dim, const void *w, drift_dtype tw, const void *b,
                                             drift_dtype tb, void *y, drift_dtype ty, float eps) {
    if (rows <= 0 || dim <= 0) return cudaSuccess;
    int threads = norm_threads(dim);
    unsigned blocks = norm_blocks(ctx, rows);
    bool smem = norm_use_smem(ctx, dim);
    size_t sh = smem ? (size_t)dim * sizeof(float) : 0;
    bool i32 = dcu_use_i32(ctx, rows * dim + dim);
    if (smem && i32)
        k_layer_norm<true, int32_t><<<blocks, threads, sh, ctx->stream>>>(x, tx, (int32_t)rows, (int32_t)dim, w, tw,
                                                                          b, tb, y, ty, eps);
    else if (smem)
        k_layer_norm<true, int64_t><<<blocks, threads, sh, ctx->stream>>>(x, tx, rows, dim, w, tw, b, tb, y, ty, eps);
    else if (i32)
        k_layer_norm<false, int32_t><<<blocks, threads, 0, ctx->stream>>>(x, tx, (int32_t)rows, (int32_t)dim, w, tw,
                                                                          b, tb, y, ty, eps);
    else
        k_layer_norm<false, int64_t><<<blocks, threads, 0, ctx->stream>>>(x, tx, rows, dim, w, tw, b, tb, y, ty, eps);
    return cudaGetLastError();
}

extern "C" cudaError_t dcu_launch_rms_norm(const dcu_ctx *ctx, const void *x, drift_dtype tx, int64_t rows,
                                           int64_t dim, const void *w, drift_dtype tw, void *y, drift_dtype ty,
                                           float eps) {
    if (rows <= 0 || dim <= 0) return cudaSuccess;
    int threads = norm_threads(dim);
    unsigned blocks = norm_blocks(ctx, rows);
    bool smem = norm_use_smem(ctx, dim);
    size_t sh = smem ? (size_t)dim * sizeof(float) : 0;
    bool i32 = dcu_use_i32(ctx, rows * dim + dim);
    if (smem && i32)
        k_rms_norm<true, int32_t><<<blocks, threads, sh, ctx->stream>>>(x, tx, (int32_t)rows, (int32_t)dim, w, tw, y,
                                                                        ty, eps);
    else if (smem)
        k_rms_norm<true, int64_t><<<blocks, threads, sh, ctx->stream>>>(x, tx, rows, dim, w, tw, y, ty, eps);
    else if (i32)
        k_rms_norm<false, int32_t><<<blocks, threads, 0, ctx->stream>>>(x, tx, (int32_t)rows, (int32_t)dim, w, tw, y,
                                                                        ty, eps);
    else
        k_rms_norm<false, int64_t><<<blocks, threads, 0, ctx->stream>>>(x, tx, rows, dim, w, tw, y, ty, eps);
    return cudaGetLastError();
}
