/* The fallback GEMM: one thread per output element on CUDA cores, used when
 * cuBLASLt has no algorithm for a layout/type combination (or when forced
 * with the spec option gemm=naive). Same semantics as the cuBLASLt path (fp32
 * accumulation, products and sums as separate _rn operations in k order,
 * then alpha, then bias, one rounding), only slow. Column-major, see
 * cuda_internal.h's dcu_gemm. Grid: x over m (coalesced stores), y over n,
 * z over the batch, each grid-strided. */
#include "kernels/cuda/dev_common.cuh"

namespace {

__global__ void k_gemm_naive(dcu_gemm g) {
    for (int64_t z = blockIdx.z; z < g.batch; z += gridDim.z) {
        for (int64_t j = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; j < g.n; j += (int64_t)gridDim.y * blockDim.y) {
            for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < g.m;
                 i += (int64_t)gridDim.x * blockDim.x) {
                int64_t abase = z * g.stride_a, bbase = z * g.stride_b;
                float acc = 0.0f;
                for (int64_t p = 0; p < g.k; p++) {
                    int64_t ai = abase + (g.transa ? p + i * g.lda : i + p * g.lda);
                    int64_t bi = bbase + (g.transb ? j + p * g.ldb : p + j * g.ldb);
                    acc = __fadd_rn(acc, __fmul_rn(dcu_ld<int64_t>(g.a, g.ta, ai), dcu_ld<int64_t>(g.b, g.tb, bi)));
                }
                float v = __fmul_rn(g.alpha, acc);
                if (g.bias) v = __fadd_rn(v, dcu_ld<int64_t>(g.bias, g.tbias, i));
                dcu_st<int64_t>(g.d, g.td, i + j * g.ldd + z * g.stride_d, v);
            }
        }
    }
}

unsigned clamp_grid(int64_t n, int per, int64_t cap) {
    int64_t b = (n + per - 1) / per;
    if (b > cap) b = cap;
    if (b < 1) b = 1;
    return (unsigned)b;
}

} // namespace

extern "C" cudaError_t dcu_launch_gemm_naive(const dcu_ctx *ctx, const dcu_gemm *g) {
    if (g->m <= 0 || g->n <= 0 || g->batch <= 0) return cudaSuccess;
    dim3 block(32, 8, 1);
    dim3 grid(clamp_grid(g->m, 32, 65535), clamp_grid(g->n, 8, 65535), clamp_grid(g->batch, 1, 65535));
    k_gemm_naive<<<grid, block, 0, ctx->stream>>>(*g);
    return cudaGetLastError();
}
