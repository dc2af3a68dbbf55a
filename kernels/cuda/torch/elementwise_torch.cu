/* GELU_TANH and SILU under the torch profile: torch's opmath expressions
 * (aten/src/ATen/native/cuda/ActivationGeluKernel.cu, ActivationSiluKernel.cu;
 * facts, drift's own code), written as plain C++ so that nvcc applies the
 * same FMA contraction it applies when it builds torch (no fast math):
 *   gelu tanh: kBeta = float(sqrt(2) * (2/sqrt(pi)) * 0.5) (evaluated in
 *              double), kKappa = 0.044715f; x3 = x*x*x;
 *              inner = kBeta * (x + kKappa * x3)   (nvcc: fmaf(kKappa, x3, x));
 *              y = 0.5f * x * (1 + tanhf(inner))
 *   silu:      y = x / (1 + expf(-x))
 * Inputs widened to fp32, output rounded once (RNE) to its dtype. */
#include "kernels/cuda/dev_common.cuh"
#include "kernels/cuda/torch/torch_profile.h"

namespace {

constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double k2SqrtPi = 1.12837916709551257390;

template <int OP>
DCU_DEV float torch_unary(float x) {
    if (OP == DCT_UN_SILU) return x / (1.0f + expf(-x));
    constexpr float kBeta = kSqrt2 * k2SqrtPi * float(0.5);
    constexpr float kKappa = 0.044715;
    float x_cube = x * x * x;
    float inner = kBeta * (x + kKappa * x_cube);
    return float(0.5) * x * (float(1) + tanhf(inner));
}

template <int OP>
__global__ void k_unary_torch(const void *__restrict__ x, int tx, void *__restrict__ y, int ty, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dcu_st<int64_t>(y, ty, i, torch_unary<OP>(dcu_ld<int64_t>(x, tx, i)));
}

} // namespace

extern "C" cudaError_t dct_launch_unary(const dcu_ctx *ctx, int op, const void *x, drift_dtype tx, void *y,
                                        drift_dtype ty, int64_t n) {
    if (n <= 0) return cudaSuccess;
    const unsigned blocks = dcu_blocks_for(n, DCU_THREADS, ctx);
    if (op == DCT_UN_SILU)
        k_unary_torch<DCT_UN_SILU><<<blocks, DCU_THREADS, 0, ctx->stream>>>(x, tx, y, ty, n);
    else if (op == DCT_UN_GELU_TANH)
        k_unary_torch<DCT_UN_GELU_TANH><<<blocks, DCU_THREADS, 0, ctx->stream>>>(x, tx, y, ty, n);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}
