/* LAYER_NORM and RMS_NORM under the torch profile (drift's own code; the
 * orders are facts about PyTorch's CUDA kernels).
 *
 * Unlike the exact kernels (dev_common.cuh's rule: every float operation an
 * explicit _rn intrinsic) the torch profile writes torch's expressions as
 * plain C++ so that nvcc contracts them into FMAs the way it does when it
 * builds torch (--fmad=true, no fast math). Where torch stores a value to
 * memory between two kernels (the composite rms_norm) the fused code here
 * rounds with explicit intrinsics instead, so no contraction crosses that
 * boundary.
 *
 * layer_norm (aten/src/ATen/native/cuda/layer_norm_kernel.cu,
 * vectorized_layer_norm_kernel, taken for fp32/bf16/fp16 rows with
 * N % 4 == 0, 16-byte aligned pointers, N <= 2^24): one block of (32, T/32)
 * threads per row (T = num_threads() = 128); thread t = x + 32 y reads
 * 4-element vectors t, t + T, ... and folds each element into its Welford
 * state in order (cuWelfordOnlineSum: delta = v - mean; count += 1;
 * mean += delta * (1/count); m2 += delta * (v - mean)); the warp combines
 * with shfl_down offsets 16, 8, 4, 2, 1 (cuWelfordCombine(own, other)); warps
 * combine pairwise through shared memory (upper half writes, lower half
 * merges, offsets T/64 ... 1); var = m2 / N; rstd = rsqrtf(var + eps);
 * y = w * (rstd * (x - mean)) + b (the same expression per affine case).
 *
 * rms_norm (aten/src/ATen/native/layer_norm.cpp): torch 2.11 runs the fused
 * vectorized_layer_norm_kernel<T, float, true> when x and w share a dtype
 * (k_rms_norm_fused_torch: layer_norm's thread layout, a sum of squares,
 * sigma2 / N) and the composite otherwise; both compute y = (u * r) * w in
 * fp32 and round once to x's dtype (tests/gpu/rms_norm_probe.py: 0 of
 * 6144..393216 elements differ from that, ~25% from rounding u * r first).
 * The two sum in different orders: at Wan 1.3B widths (1536) the composite's
 * order put 19 of 3.9M norm_q outputs one bf16 ULP off torch's fused kernel.
 * The composite's statistics: u = x.to(fp32); s = pow(u, 2) (torch computes u*u); m =
 * s.mean(-1), a reduce_kernel with MeanOps (sum, then * factor, factor =
 * float(rows) / numel); r = rsqrt(m + eps). The sum
 * follows reduce_kernel's order for a contiguous last-dim reduction
 * (aten/src/ATen/native/cuda/Reduce.cuh, setReduceConfig): rows of N > 128
 * floats are read as 4-wide vectors by block_width lanes with four
 * accumulators (vector element i into accumulator i), N <= 128 element-wise
 * with vt0 = 4 accumulators (element lane + k*bw into accumulator k % 4);
 * accumulators combine as ((a0 + a1) + a2) + a3; lanes combine through
 * shared memory when block_width > 32 (offsets bw/2 .. 32), then with
 * shfl_down offsets 16, 8, 4, 2, 1 (descending: drift_recorder.node_parity on
 * the H200 matched every row of 40 mean nodes of six zoo models, N 8 to 64,
 * with this order and under 80% with ascending); each row is one block_width-wide row of
 * the block (block_height rows per block). dct_reduce_config reproduces
 * torch's block shape and declines the configurations it does not emulate
 * (inter-warp or cross-block splits of one row). */
#include "kernels/cuda/dev_common.cuh"
#include "kernels/cuda/torch/torch_profile.h"

namespace {

struct WD {
    float mean, sigma2, count;
};

DCU_DEV WD wd_online(float val, WD c) {
    float delta = val - c.mean;
    float new_count = c.count + 1.f;
    float new_mean = c.mean + delta * (1.f / new_count);
    WD r = {new_mean, c.sigma2 + delta * (val - new_mean), new_count};
    return r;
}

/* cuWelfordCombine(dataB = own, dataA = other) */
template <int COMBINE>
DCU_DEV WD wd_combine(WD b, WD a) {
    float delta = b.mean - a.mean;
    float count = a.count + b.count;
    float mean, sigma2;
    if (count > 0.f) {
        float coef = 1.f / count;
        float nA = a.count * coef;
        float nB = b.count * coef;
        if (COMBINE == 1)
            mean = fmaf(nA, a.mean, __fmul_rn(nB, b.mean));
        else if (COMBINE == 2)
            mean = fmaf(nB, b.mean, __fmul_rn(nA, a.mean));
        else
            mean = nA * a.mean + nB * b.mean;
        sigma2 = a.sigma2 + b.sigma2 + delta * delta * a.count * nB;
    } else {
        mean = 0.f;
        sigma2 = 0.f;
    }
    WD r = {mean, sigma2, count};
    return r;
}

template <int COMBINE>
__global__ void k_layer_norm_torch(const void *__restrict__ x, int tx, int N, const void *__restrict__ w, int tw,
                                   const void *__restrict__ b, int tb, void *__restrict__ y, int ty, float eps) {
    __shared__ float buf[3 * 32];
    const int64_t base = (int64_t)blockIdx.x * N;
    const int numx = blockDim.x * blockDim.y;
    const int thrx = threadIdx.x + threadIdx.y * blockDim.x;
    const int nvec = N / 4;
    WD wd = {0.f, 0.f, 0.f};
    for (int i = thrx; i < nvec; i += numx) {
#pragma unroll
        for (int ii = 0; ii < 4; ii++) wd = wd_online(dcu_ld<int64_t>(x, tx, base + 4 * i + ii), wd);
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        WD o = {__shfl_down_sync(0xffffffffu, wd.mean, offset), __shfl_down_sync(0xffffffffu, wd.sigma2, offset),
                __shfl_down_sync(0xffffffffu, wd.count, offset)};
        wd = wd_combine<COMBINE>(wd, o);
    }
    float mean, var;
    if (blockDim.y > 1) {
        float *msb = buf;
        float *cnt = buf + blockDim.y;
        for (int offset = blockDim.y / 2; offset > 0; offset /= 2) {
            if (threadIdx.x == 0 && (int)threadIdx.y >= offset && (int)threadIdx.y < 2 * offset) {
                const int wy = threadIdx.y - offset;
                msb[2 * wy] = wd.mean;
                msb[2 * wy + 1] = wd.sigma2;
                cnt[wy] = wd.count;
            }
            __syncthreads();
            if (threadIdx.x == 0 && (int)threadIdx.y < offset) {
                WD o = {msb[2 * threadIdx.y], msb[2 * threadIdx.y + 1], cnt[threadIdx.y]};
                wd = wd_combine<COMBINE>(wd, o);
            }
            __syncthreads();
        }
        if (threadIdx.x == 0 && threadIdx.y == 0) {
            msb[0] = wd.mean;
            msb[1] = wd.sigma2 / float(N);
        }
        __syncthreads();
        mean = msb[0];
        var = msb[1];
    } else {
        mean = __shfl_sync(0xffffffffu, wd.mean, 0);
        var = __shfl_sync(0xffffffffu, wd.sigma2, 0) / float(N);
    }
    const float rstd = rsqrtf(var + eps);
    if (w && b) {
        for (int i = thrx; i < nvec; i += numx)
#pragma unroll
            for (int ii = 0; ii < 4; ii++) {
                const int j = 4 * i + ii;
                float o = dcu_ld<int>(w, tw, j) * (rstd * (dcu_ld<int64_t>(x, tx, base + j) - mean)) +
                          dcu_ld<int>(b, tb, j);
                dcu_st<int64_t>(y, ty, base + j, o);
            }
    } else if (w) {
        for (int i = thrx; i < nvec; i += numx)
#pragma unroll
            for (int ii = 0; ii < 4; ii++) {
                const int j = 4 * i + ii;
                float o = dcu_ld<int>(w, tw, j) * (rstd * (dcu_ld<int64_t>(x, tx, base + j) - mean));
                dcu_st<int64_t>(y, ty, base + j, o);
            }
    } else if (b) {
        for (int i = thrx; i < nvec; i += numx)
#pragma unroll
            for (int ii = 0; ii < 4; ii++) {
                const int j = 4 * i + ii;
                float o = (rstd * (dcu_ld<int64_t>(x, tx, base + j) - mean)) + dcu_ld<int>(b, tb, j);
                dcu_st<int64_t>(y, ty, base + j, o);
            }
    } else {
        for (int i = thrx; i < nvec; i += numx)
#pragma unroll
            for (int ii = 0; ii < 4; ii++) {
                const int j = 4 * i + ii;
                float o = rstd * (dcu_ld<int64_t>(x, tx, base + j) - mean);
                dcu_st<int64_t>(y, ty, base + j, o);
            }
    }
}

/* One row per blockDim.x-wide row of the block; see the file comment.
 * TX/TW/TY: the dtypes as template constants (-1: the runtime tx/tw/ty);
 * vec: torch's 4-wide reduction layout, which the loads and the output pass
 * then also use (the per-element values and the reduction order are the
 * same either way: only the memory access is wider). */
/* reduce_kernel's sum of one row (of u*u for SQ, else of u) as the file comment describes; every
 * thread of the block calls it (it synchronises); the row's sum is valid in lane 0. */
template <int TX, int SQ>
DCU_DEV float torch_row_sum(const void *__restrict__ x, int tx, int64_t base, int N, bool active, int vec,
                            int shfl_asc, float *sm) {
    const int lane = threadIdx.x, bw = blockDim.x;
    float v = 0.f;
    if (active) {
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        if (vec) {
            for (int idx = lane; idx * 4 + 3 < N; idx += bw) {
                float u[4];
                dcu_ld4<TX>(x, tx, base + idx * 4, u);
#pragma unroll
                for (int i = 0; i < 4; i++) acc[i] = __fadd_rn(acc[i], SQ ? __fmul_rn(u[i], u[i]) : u[i]);
            }
        } else {
            int k = 0;
            for (int idx = lane; idx < N; idx += bw, k++) {
                float u = dcu_ld<int64_t>(x, tx, base + idx);
                acc[k & 3] = __fadd_rn(acc[k & 3], SQ ? __fmul_rn(u, u) : u);
            }
        }
        v = __fadd_rn(__fadd_rn(__fadd_rn(acc[0], acc[1]), acc[2]), acc[3]);
    }
    int dim_x = bw;
    if (dim_x > 32) {
        const int ab = threadIdx.x + threadIdx.y * blockDim.x;
        sm[ab] = v;
        for (int offset = dim_x / 2; offset >= 32; offset >>= 1) {
            __syncthreads();
            if ((int)threadIdx.x < offset && (int)threadIdx.x + offset < bw) {
                v = __fadd_rn(v, sm[ab + offset]);
                sm[ab] = v;
            }
        }
        dim_x = 32;
    }
    __syncthreads();
    if (shfl_asc) /* test variant: offsets 1 .. dim_x/2 */
        for (int offset = 1; offset < dim_x; offset <<= 1) v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, offset));
    else
        for (int offset = dim_x / 2; offset > 0; offset >>= 1) v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, offset));
    return v;
}

/* One row per blockDim.x-wide row of the block; see the file comment.
 * TX/TW/TY: the dtypes as template constants (-1: the runtime tx/tw/ty);
 * vec: torch's 4-wide reduction layout, which the loads and the output pass
 * then also use (the per-element values and the reduction order are the
 * same either way: only the memory access is wider). */
template <int TX, int TW, int TY>
__global__ void k_rms_norm_torch(const void *__restrict__ x, int tx, int64_t rows, int N, const void *__restrict__ w,
                                 int tw, void *__restrict__ y, int ty, float eps, int vec, float factor,
                                 int shfl_asc) {
    extern __shared__ float sm[];
    __shared__ float rs[512];
    const int64_t row = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
    const int lane = threadIdx.x, bw = blockDim.x;
    const int64_t base = row * N;
    const float v = torch_row_sum<TX, 1>(x, tx, base, N, row < rows && lane < N, vec, shfl_asc, sm);
    if (threadIdx.x == 0) {
        const float m = __fmul_rn(v, factor);
        rs[threadIdx.y] = rsqrtf(__fadd_rn(m, eps));
    }
    __syncthreads();
    if (row >= rows) return;
    const float r = rs[threadIdx.y];
    if (vec && N % 4 == 0) {
        for (int idx = lane; idx * 4 < N; idx += bw) {
            float u[4], o[4], g[4];
            dcu_ld4<TX>(x, tx, base + idx * 4, u);
            if (w) dcu_ld4<TW>(w, tw, (int64_t)idx * 4, g);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float t = __fmul_rn(u[i], r);
                o[i] = w ? __fmul_rn(t, g[i]) : t;
            }
            dcu_st4<TY>(y, ty, base + idx * 4, o);
        }
        return;
    }
    for (int j = lane; j < N; j += bw) {
        const float t = __fmul_rn(dcu_ld<int64_t>(x, tx, base + j), r);
        const float o = w ? __fmul_rn(t, dcu_ld<int>(w, tw, j)) : t;
        dcu_st<int64_t>(y, ty, base + j, o);
    }
}

/* torch's sum / mean over the last dim (reduce_kernel with SumOps / MeanOps: the row's sum, times
 * factor for a mean, rounded once to y's dtype); the same block shape and order as above. */
template <int TX>
__global__ void k_reduce_torch(const void *__restrict__ x, int tx, int64_t rows, int N, void *__restrict__ y, int ty,
                               int mean, float factor, int vec) {
    extern __shared__ float sm[];
    const int64_t row = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
    const float v = torch_row_sum<TX, 0>(x, tx, row * N, N, row < rows && (int)threadIdx.x < N, vec, 0, sm);
    if (threadIdx.x == 0 && row < rows) dcu_st<int64_t>(y, ty, row, mean ? v * factor : v);
}

/* torch's sum / mean over a dim that is not the innermost (dct_launch_reduce_mid): one thread
 * per output, its N inputs in order into 4 accumulators. */
__global__ void k_reduce_mid_torch(const void *__restrict__ x, int tx, int64_t outer, int64_t N, int64_t inner,
                                   void *__restrict__ y, int ty, int mean, float factor) {
    const int64_t total = outer * inner, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += stride) {
        const int64_t o = e / inner, k = e - o * inner;
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        for (int64_t i = 0; i < N; i++) acc[i & 3] = __fadd_rn(acc[i & 3], dcu_ld<int64_t>(x, tx, (o * N + i) * inner + k));
        const float v = __fadd_rn(__fadd_rn(__fadd_rn(acc[0], acc[1]), acc[2]), acc[3]);
        dcu_st<int64_t>(y, ty, e, mean ? __fmul_rn(v, factor) : v);
    }
}

/* torch 2.11's fused rms_norm: vectorized_layer_norm_kernel<T, float, true>,
 * taken when x and w share a dtype (or there is no weight). Thread layout and
 * combine order are layer_norm's (k_layer_norm_torch); the statistic is a
 * plain sum of squares (cuWelfordOnlineSum<., true>: sigma2 + val * val,
 * which nvcc contracts into an FMA; combine: own + other), then
 * sigma2 / float(N) and rsqrt(sigma2 + eps); y = w * (rstd * x). */
template <int TX, int TW, int TY>
__global__ void k_rms_norm_fused_torch(const void *__restrict__ x, int tx, int N, const void *__restrict__ w, int tw,
                                       void *__restrict__ y, int ty, float eps) {
    __shared__ float buf[3 * 32];
    const int64_t base = (int64_t)blockIdx.x * N;
    const int numx = blockDim.x * blockDim.y;
    const int thrx = threadIdx.x + threadIdx.y * blockDim.x;
    const int nvec = N / 4;
    float s2 = 0.f;
    for (int i = thrx; i < nvec; i += numx) {
        float u[4];
        dcu_ld4<TX>(x, tx, base + 4 * i, u);
#pragma unroll
        for (int ii = 0; ii < 4; ii++) s2 = fmaf(u[ii], u[ii], s2);
    }
    for (int offset = 16; offset > 0; offset >>= 1) s2 = __fadd_rn(s2, __shfl_down_sync(0xffffffffu, s2, offset));
    float ms;
    if (blockDim.y > 1) {
        for (int offset = blockDim.y / 2; offset > 0; offset /= 2) {
            if (threadIdx.x == 0 && (int)threadIdx.y >= offset && (int)threadIdx.y < 2 * offset)
                buf[2 * (threadIdx.y - offset) + 1] = s2;
            __syncthreads();
            if (threadIdx.x == 0 && (int)threadIdx.y < offset) s2 = __fadd_rn(s2, buf[2 * threadIdx.y + 1]);
            __syncthreads();
        }
        if (threadIdx.x == 0 && threadIdx.y == 0) buf[1] = __fdiv_rn(s2, float(N));
        __syncthreads();
        ms = buf[1];
    } else {
        ms = __fdiv_rn(__shfl_sync(0xffffffffu, s2, 0), float(N));
    }
    const float rstd = rsqrtf(__fadd_rn(ms, eps));
    for (int i = thrx; i < nvec; i += numx) {
        float u[4], o[4], g[4];
        dcu_ld4<TX>(x, tx, base + 4 * i, u);
        if (w) dcu_ld4<TW>(w, tw, (int64_t)4 * i, g);
#pragma unroll
        for (int ii = 0; ii < 4; ii++) {
            const float t = __fmul_rn(rstd, u[ii]);
            o[ii] = w ? __fmul_rn(g[ii], t) : t;
        }
        dcu_st4<TY>(y, ty, base + 4 * i, o);
    }
}

int last_pow2(int64_t n) {
    int64_t p = 1;
    while (p * 2 <= n) p *= 2;
    return (int)p;
}

} // namespace

extern "C" int dct_layer_norm_vectorizable(const void *x, const void *y, const void *w, const void *b, int64_t N) {
    /* drift keeps 16-bit tensors too; torch would see them as fp32 after the
       upcast, whose fresh allocation is aligned: require the native buffers
       to be aligned to 4 elements of their own size (always true for
       drift's allocations and aliases at 16-byte offsets) */
    (void)y;
    if (N <= 0 || N % 4 != 0 || N > (1LL << 24)) return 0;
    const uintptr_t m = 7;
    if (((uintptr_t)x & m) || (w && ((uintptr_t)w & m)) || (b && ((uintptr_t)b & m))) return 0;
    return 1;
}

extern "C" cudaError_t dct_launch_layer_norm(const dcu_ctx *ctx, const void *x, drift_dtype tx, int64_t rows,
                                             int64_t N, const void *w, drift_dtype tw, const void *b, drift_dtype tb,
                                             void *y, drift_dtype ty, float eps, int threads, int combine) {
    if (rows <= 0) return cudaSuccess;
    if (rows > INT32_MAX || N > (1LL << 24) || threads < 32 || threads > 1024 || threads % 32)
        return cudaErrorInvalidValue;
    dim3 blk(32, threads / 32), grd((unsigned)rows);
    if (combine == 1)
        k_layer_norm_torch<1><<<grd, blk, 0, ctx->stream>>>(x, tx, (int)N, w, tw, b, tb, y, ty, eps);
    else if (combine == 2)
        k_layer_norm_torch<2><<<grd, blk, 0, ctx->stream>>>(x, tx, (int)N, w, tw, b, tb, y, ty, eps);
    else
        k_layer_norm_torch<0><<<grd, blk, 0, ctx->stream>>>(x, tx, (int)N, w, tw, b, tb, y, ty, eps);
    return cudaGetLastError();
}

extern "C" int dct_reduce_config(int64_t rows, int64_t N, dct_reduce_cfg *cfg) {
    if (rows < 1 || N < 1 || rows > INT32_MAX || N > INT32_MAX || rows * N > INT32_MAX) return 0;
    const int MAXT = 512;
    int64_t dim0 = N, dim1 = rows;
    const int vec = N > 128; /* torch: reduction on the fastest dim, dim0 > 128, vt0 >= input_vec_size */
    if (vec && N % 4 != 0) return 0; /* unaligned rows: torch's head/tail handling is not emulated */
    if (vec) dim0 /= 4;
    const int d0 = dim0 < MAXT ? last_pow2(dim0) : MAXT, d1 = dim1 < MAXT ? last_pow2(dim1) : MAXT;
    int bw = d0 < 32 ? d0 : 32;
    int bh = d1 < MAXT / bw ? d1 : MAXT / bw;
    bw = d0 < MAXT / bh ? d0 : MAXT / bh;
    const int64_t vpt = (N + bw - 1) / bw; /* values_per_thread: num_inputs / step_input */
    if (vpt >= (int64_t)bh * 16 || vpt >= 256) return 0; /* torch splits a row across warps */
    cfg->bw = bw;
    cfg->bh = bh;
    cfg->vectorize = vec;
    cfg->factor = (float)rows / (float)(rows * N);
    cfg->shfl_asc = 0;
    return 1;
}

extern "C" cudaError_t dct_launch_rms_norm(const dcu_ctx *ctx, const void *x, drift_dtype tx, int64_t rows, int64_t N,
                                           const void *w, drift_dtype tw, void *y, drift_dtype ty, float eps,
                                           const dct_reduce_cfg *cfg) {
    if (rows <= 0) return cudaSuccess;
    dim3 blk(cfg->bw, cfg->bh);
    const int64_t g = (rows + cfg->bh - 1) / cfg->bh;
    if (g > INT32_MAX) return cudaErrorInvalidValue;
    const size_t smem = cfg->bw > 32 ? (size_t)cfg->bw * cfg->bh * sizeof(float) : 0;
    /* the wide loads need 16-byte aligned rows of whole 4-element groups */
    const int wide = cfg->vectorize && N % 4 == 0 && !((uintptr_t)x & 15) && !((uintptr_t)y & 15) &&
                     (!w || !((uintptr_t)w & 15));
#define RMS_LAUNCH(TX, TW, TY)                                                                                   \
    k_rms_norm_torch<TX, TW, TY><<<(unsigned)g, blk, smem, ctx->stream>>>(x, tx, rows, (int)N, w, tw, y, ty, eps, \
                                                                          cfg->vectorize, cfg->factor, cfg->shfl_asc)
    const int tw_ = w ? (int)tw : (int)tx; /* no weight: any TW */
    if (wide && tx == DRIFT_BF16 && ty == DRIFT_BF16 && tw_ == DRIFT_BF16) RMS_LAUNCH(DRIFT_BF16, DRIFT_BF16, DRIFT_BF16);
    else if (wide && tx == DRIFT_BF16 && ty == DRIFT_BF16 && tw_ == DRIFT_F32) RMS_LAUNCH(DRIFT_BF16, DRIFT_F32, DRIFT_BF16);
    else if (wide && tx == DRIFT_F16 && ty == DRIFT_F16 && tw_ == DRIFT_F16) RMS_LAUNCH(DRIFT_F16, DRIFT_F16, DRIFT_F16);
    else if (wide && tx == DRIFT_F32 && ty == DRIFT_F32 && tw_ == DRIFT_F32) RMS_LAUNCH(DRIFT_F32, DRIFT_F32, DRIFT_F32);
    else if (wide && tx == DRIFT_F32 && ty == DRIFT_F32 && tw_ == DRIFT_BF16) RMS_LAUNCH(DRIFT_F32, DRIFT_BF16, DRIFT_F32);
    else RMS_LAUNCH(-1, -1, -1);
#undef RMS_LAUNCH
    return cudaGetLastError();
}

extern "C" cudaError_t dct_launch_rms_norm_fused(const dcu_ctx *ctx, const void *x, drift_dtype tx, int64_t rows,
                                                 int64_t N, const void *w, drift_dtype tw, void *y, drift_dtype ty,
                                                 float eps, int threads) {
    if (rows <= 0) return cudaSuccess;
    if (rows > INT32_MAX || N > (1LL << 24) || N % 4 || threads < 32 || threads > 1024 || threads % 32)
        return cudaErrorInvalidValue;
    dim3 blk(32, threads / 32), grd((unsigned)rows);
    /* the typed loads need rows of 16-bit elements 8-byte, fp32 16-byte aligned */
    const int wide = !((uintptr_t)x & 15) && !((uintptr_t)y & 15) && (!w || !((uintptr_t)w & 15));
#define RMSF_LAUNCH(TX, TW, TY) \
    k_rms_norm_fused_torch<TX, TW, TY><<<grd, blk, 0, ctx->stream>>>(x, tx, (int)N, w, tw, y, ty, eps)
    const int tw_ = w ? (int)tw : (int)tx; /* no weight: any TW */
    if (wide && tx == DRIFT_BF16 && ty == DRIFT_BF16 && tw_ == DRIFT_BF16) RMSF_LAUNCH(DRIFT_BF16, DRIFT_BF16, DRIFT_BF16);
    else if (wide && tx == DRIFT_F16 && ty == DRIFT_F16 && tw_ == DRIFT_F16) RMSF_LAUNCH(DRIFT_F16, DRIFT_F16, DRIFT_F16);
    else if (wide && tx == DRIFT_F32 && ty == DRIFT_F32 && tw_ == DRIFT_F32) RMSF_LAUNCH(DRIFT_F32, DRIFT_F32, DRIFT_F32);
    else RMSF_LAUNCH(-1, -1, -1);
#undef RMSF_LAUNCH
    return cudaGetLastError();
}

extern "C" cudaError_t dct_launch_reduce(const dcu_ctx *ctx, const void *x, drift_dtype tx, int64_t rows, int64_t N,
                                        void *y, drift_dtype ty, int mean, const dct_reduce_cfg *cfg) {
    if (rows <= 0) return cudaSuccess;
    dim3 blk(cfg->bw, cfg->bh);
    const int64_t g = (rows + cfg->bh - 1) / cfg->bh;
    if (g > INT32_MAX) return cudaErrorInvalidValue;
    const size_t smem = cfg->bw > 32 ? (size_t)cfg->bw * cfg->bh * sizeof(float) : 0;
    if (cfg->vectorize && tx == DRIFT_F32 && !((uintptr_t)x & 15))
        k_reduce_torch<DRIFT_F32><<<(unsigned)g, blk, smem, ctx->stream>>>(x, tx, rows, (int)N, y, ty, mean, cfg->factor, 1);
    else if (cfg->vectorize)
        return cudaErrorInvalidValue; /* torch's 4-wide layout is emulated for aligned fp32 rows only */
    else
        k_reduce_torch<-1><<<(unsigned)g, blk, smem, ctx->stream>>>(x, tx, rows, (int)N, y, ty, mean, cfg->factor, 0);
    return cudaGetLastError();
}

extern "C" cudaError_t dct_launch_reduce_mid(const dcu_ctx *ctx, const void *x, drift_dtype tx, int64_t outer,
                                            int64_t N, int64_t inner, void *y, drift_dtype ty, int mean) {
    if (outer <= 0 || inner <= 0 || N <= 0) return cudaSuccess;
    if (N >= 256 || outer > INT32_MAX || inner > INT32_MAX || outer * inner > INT32_MAX) return cudaErrorInvalidValue;
    const int64_t total = outer * inner;
    const float factor = (float)total / (float)(total * N); /* MeanOps: outputs / inputs, in float */
    const unsigned blocks = (unsigned)((total + 255) / 256);
    k_reduce_mid_torch<<<blocks, 256, 0, ctx->stream>>>(x, tx, outer, N, inner, y, ty, mean, factor);
    return cudaGetLastError();
}
