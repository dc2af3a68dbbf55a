/* SOFTMAX / LOG_SOFTMAX over the last dim under the torch profile: torch's
 * persistent warp softmax (softmax_warp_forward, PersistentSoftmax.cuh; drift's
 * own code, the order is a fact about torch), which host_softmax takes for a
 * last-dim softmax of at most 1024 elements and 4096 bytes per row:
 *   W = min(next_pow2(N), 32) lanes per row, lane j holding x[j + W i] in
 *   order i (missing ones -inf), all fp32;
 *   m = the lane's max, then an xor butterfly over W lanes (offsets W/2 .. 1);
 *   e = expf(x - m); s = 0 + e_0 + e_1 ... per lane, the same butterfly;
 *   softmax: y = e / s (s == 0: NaN); log_softmax: y = x - m - logf(s);
 *   rounded once to the output dtype.
 * One warp per row here; the row's lanes are the warp's first W. */
#include "kernels/cuda/dev_common.cuh"
#include "kernels/cuda/torch/torch_profile.h"

namespace {

template <int IT> /* IT = next_pow2(N) / W elements per lane */
__global__ void k_softmax_torch(const void *__restrict__ x, int tx, void *__restrict__ y, int ty, int64_t rows, int N,
                                int W, int log_sm) {
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const int64_t base = row * N;
    float e[IT];
#pragma unroll
    for (int i = 0; i < IT; i++) {
        const int j = lane + i * W;
        e[i] = lane < W && j < N ? dcu_ld<int64_t>(x, tx, base + j) : -INFINITY;
    }
    float m = e[0];
#pragma unroll
    for (int i = 1; i < IT; i++) m = m > e[i] ? m : e[i];
    for (int off = W / 2; off > 0; off /= 2) {
        const float o = __shfl_xor_sync(0xffffffffu, m, off, W);
        m = m > o ? m : o;
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < IT; i++) {
        if (log_sm) {
            s += expf(e[i] - m);
        } else {
            e[i] = expf(e[i] - m);
            s += e[i];
        }
    }
    for (int off = W / 2; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off, W);
    if (lane >= W) return;
    if (log_sm) s = logf(s);
#pragma unroll
    for (int i = 0; i < IT; i++) {
        const int j = lane + i * W;
        if (j >= N) continue;
        const float v = log_sm ? e[i] - m - s : (s == 0.f ? __int_as_float(0x7fffffff) : e[i] / s);
        dcu_st<int64_t>(y, ty, base + j, v);
    }
}

} // namespace

extern "C" int dct_softmax_supported(int64_t N, drift_dtype tx) {
    return N >= 1 && N <= 1024 && N * (int64_t)drift_dtype_size(tx) <= 4096 &&
           (tx == DRIFT_F32 || tx == DRIFT_BF16 || tx == DRIFT_F16);
}

extern "C" cudaError_t dct_launch_softmax(const dcu_ctx *ctx, const void *x, drift_dtype tx, void *y, drift_dtype ty,
                                          int64_t rows, int64_t N, int log_sm) {
    if (rows <= 0) return cudaSuccess;
    int p2 = 1;
    while (p2 < N) p2 *= 2;
    const int W = p2 < 32 ? p2 : 32, it = p2 / W;
    const int warps = 4;
    const int64_t g = (rows + warps - 1) / warps;
    if (g > 2147483647LL) return cudaErrorInvalidValue;
#define SM_LAUNCH(IT)                                                                                        \
    k_softmax_torch<IT><<<(unsigned)g, warps * 32, 0, ctx->stream>>>(x, (int)tx, y, (int)ty, rows, (int)N, W, \
                                                                     log_sm)
    switch (it) {
    case 1: SM_LAUNCH(1); break;
    case 2: SM_LAUNCH(2); break;
    case 4: SM_LAUNCH(4); break;
    case 8: SM_LAUNCH(8); break;
    case 16: SM_LAUNCH(16); break;
    case 32: SM_LAUNCH(32); break;
    default: return cudaErrorInvalidValue;
    }
#undef SM_LAUNCH
    return cudaGetLastError();
}
