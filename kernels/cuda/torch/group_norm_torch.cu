/* GROUP_NORM under the torch profile: torch 2.11's CUDA group norm forward
 * (aten/src/ATen/native/cuda/group_norm_kernel.cu, GroupNormKernelImplInternal;
 * drift's own code, the order of operations is a fact about torch), for x
 * contiguous [N, C, *] with HxW = prod(*) > 1, all in fp32:
 *
 * RowwiseMomentsCUDAKernel, one block per (n, g) over its L = D * HxW elements
 * (D = C / G), T = 32 threads if L < 512 else 512: thread t runs Welford over
 * j = t, t + T, ... (n += 1; delta = x - mean; mean += delta / n;
 * m2 = fma(delta, x - mean, m2)); then WarpReduce (shfl_down offsets 16 .. 1,
 * combine(mine, lane + offset)) and, for T = 512, lane 0 of each warp to shared
 * memory and warp 0 combines them the same way (missing warps: the identity).
 * combine(a, b): a empty: b; b empty: a; delta = b.mean - a.mean,
 * n = a.n + b.n, r = b.n / n, mean = fma(delta, r, a.mean),
 * m2 = fma(delta * delta * a.n, r, a.m2 + b.m2) (nvcc contracts the final
 * multiply-add). mean = mean, rstd = rsqrtf(m2 / n + eps).
 *
 * ComputeFusedParams + the elementwise kernel: per (n, c) a = rstd * w[c]
 * (rstd without w), b = fma(-a, mean, beta[c] or 0); y = fma(a, x, b), rounded
 * once to y's dtype. Without weight and bias: y = (x - mean) * rstd. */
#include "kernels/cuda/dev_common.cuh"
#include "kernels/cuda/torch/torch_profile.h"

namespace {

struct welford {
    float mean, m2, nf;
};

DCU_DEV welford wf_combine(welford a, welford b) {
    if (a.nf == 0.f) return b;
    if (b.nf == 0.f) return a;
    const float delta = __fsub_rn(b.mean, a.mean);
    const float n = __fadd_rn(a.nf, b.nf);
    const float r = __fdiv_rn(b.nf, n);
    welford o;
    o.mean = __fmaf_rn(delta, r, a.mean);
    o.m2 = __fmaf_rn(__fmul_rn(__fmul_rn(delta, delta), a.nf), r, __fadd_rn(a.m2, b.m2));
    o.nf = n;
    return o;
}

DCU_DEV welford wf_warp(welford v) {
    for (int off = 16; off > 0; off >>= 1) {
        welford o;
        o.mean = __shfl_down_sync(0xffffffffu, v.mean, off);
        o.m2 = __shfl_down_sync(0xffffffffu, v.m2, off);
        o.nf = __shfl_down_sync(0xffffffffu, v.nf, off);
        v = wf_combine(v, o);
    }
    return v;
}

__global__ void k_gn_moments(const void *__restrict__ x, int tx, int64_t L, float eps, float *__restrict__ mean,
                             float *__restrict__ rstd) {
    __shared__ welford sh[32];
    const int64_t row = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
    welford v = {0.f, 0.f, 0.f};
    int64_t n = 0;
    for (int64_t j = tid; j < L; j += blockDim.x) {
        const float d = dcu_ld<int64_t>(x, tx, row * L + j);
        n += 1;
        const float nf = (float)n;
        const float delta = __fsub_rn(d, v.mean);
        v.mean = __fadd_rn(v.mean, __fdiv_rn(delta, nf));
        v.m2 = __fmaf_rn(delta, __fsub_rn(d, v.mean), v.m2);
        v.nf = nf;
    }
    v = wf_warp(v);
    if (blockDim.x > 32) {
        __syncthreads();
        if (lane == 0) sh[wid] = v;
        __syncthreads();
        const welford id = {0.f, 0.f, 0.f};
        v = tid < (int)(blockDim.x >> 5) ? sh[lane] : id;
        if (wid == 0) v = wf_warp(v);
    }
    if (tid == 0) {
        mean[row] = v.mean;
        rstd[row] = rsqrtf(__fadd_rn(__fdiv_rn(v.m2, v.nf), eps));
    }
}

__global__ void k_gn_apply(const void *__restrict__ x, int tx, const void *__restrict__ w, int tw,
                           const void *__restrict__ b, int tb, const float *__restrict__ mean,
                           const float *__restrict__ rstd, void *__restrict__ y, int ty, int64_t numel, int64_t C,
                           int64_t HxW, int64_t D) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= numel) return;
    const int64_t nc = e / HxW, c = nc % C, ng = (nc / C) * (C / D) + c / D;
    const float xv = dcu_ld<int64_t>(x, tx, e), m = mean[ng], r = rstd[ng];
    float out;
    if (!w && !b) {
        out = __fmul_rn(__fsub_rn(xv, m), r);
    } else {
        const float a = w ? __fmul_rn(r, dcu_ld<int64_t>(w, tw, c)) : r;
        const float bb = __fmaf_rn(-a, m, b ? dcu_ld<int64_t>(b, tb, c) : 0.f);
        out = __fmaf_rn(a, xv, bb);
    }
    dcu_st<int64_t>(y, ty, e, out);
}

} // namespace

extern "C" cudaError_t dct_launch_group_norm(dcu_ctx *ctx, const void *x, drift_dtype tx, int64_t N, int64_t C,
                                             int64_t HxW, int64_t G, const void *w, drift_dtype tw, const void *b,
                                             drift_dtype tb, float eps, void *y, drift_dtype ty, float *scratch) {
    const int64_t D = C / G, L = D * HxW, rows = N * G, numel = N * C * HxW;
    if (rows <= 0 || numel <= 0) return cudaSuccess;
    if (rows > 2147483647LL) return cudaErrorInvalidValue;
    const int T = L < 512 ? 32 : 512;
    k_gn_moments<<<(unsigned)rows, T, 0, ctx->stream>>>(x, (int)tx, L, eps, scratch, scratch + rows);
    const int bt = 256;
    const int64_t g = (numel + bt - 1) / bt;
    if (g > 2147483647LL) return cudaErrorInvalidValue;
    k_gn_apply<<<(unsigned)g, bt, 0, ctx->stream>>>(x, (int)tx, w, (int)tw, b, (int)tb, scratch, scratch + rows, y, (int)ty,
                                                   numel, C, HxW, D);
    return cudaGetLastError();
}
