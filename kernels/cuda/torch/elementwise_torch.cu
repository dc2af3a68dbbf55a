/* GELU_TANH and SILU under the torch profile: torch's opmath expressions
 * (aten/src/ATen/native/cuda/ActivationGeluKernel.cu, ActivationSiluKernel.cu;
 * facts, drift's own code), written as plain C++ so that nvcc applies the
 * same FMA contraction it applies when it builds torch (no fast math):
 *   gelu tanh: kBeta = float(sqrt(2) * (2/sqrt(pi)) * 0.5) (evaluated in
 *              double), kKappa = 0.044715f; x3 = x*x*x;
 *              inner = kBeta * (x + kKappa * x3)   (nvcc: fmaf(kKappa, x3, x));
 *              y = 0.5f * x * (1 + tanhf(inner))
 *   silu:      y = x / (1 + expf(-x))
 *   rsqrt:     y = rsqrtf(x)    (torch's rsqrt_kernel_cuda: ::rsqrt, not 1 / sqrt rounded twice)
 * Inputs widened to fp32, output rounded once (RNE) to its dtype. 16-bit
 * tensors in and out (aligned, a multiple of 8 elements) take a kernel with
 * 16-byte loads and stores: the same expression per element. */
#include "kernels/cuda/dev_common.cuh"
#include "kernels/cuda/torch/torch_profile.h"

namespace {

constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double k2SqrtPi = 1.12837916709551257390;

template <int OP>
DCU_DEV float torch_unary(float x) {
    if (OP == DCT_UN_SILU) return x / (1.0f + expf(-x));
    if (OP == DCT_UN_RSQRT) return rsqrtf(x);
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

/* The same per element, 16 bytes per load and store (8 bf16/fp16 values of
 * dtype DT in and out, as torch's vectorized_elementwise_kernel<8>): the
 * values and their rounding are those of k_unary_torch, only the memory
 * access is wider. n8: groups of 8 elements. */
template <int OP, int DT>
__global__ void k_unary_torch_v8(const uint4 *__restrict__ x, uint4 *__restrict__ y, int64_t n8) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (int64_t)gridDim.x * blockDim.x) {
        uint4 v = x[i];
        uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint32_t lo = w[k] & 0xffffu, hi = w[k] >> 16;
            const float a = DT == DRIFT_BF16 ? dcu_bf16_to_f32(lo) : dcu_f16_to_f32(lo);
            const float b = DT == DRIFT_BF16 ? dcu_bf16_to_f32(hi) : dcu_f16_to_f32(hi);
            const float ra = torch_unary<OP>(a), rb = torch_unary<OP>(b);
            const uint32_t oa = DT == DRIFT_BF16 ? dcu_f32_to_bf16(ra) : dcu_f32_to_f16(ra);
            const uint32_t ob = DT == DRIFT_BF16 ? dcu_f32_to_bf16(rb) : dcu_f32_to_f16(rb);
            w[k] = (oa & 0xffffu) | (ob << 16);
        }
        y[i] = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

template <int OP>
cudaError_t launch_v8(const dcu_ctx *ctx, const void *x, void *y, drift_dtype dt, int64_t n) {
    const int64_t n8 = n / 8;
    const unsigned blocks = dcu_blocks_for(n8, DCU_THREADS, ctx);
    if (dt == DRIFT_BF16)
        k_unary_torch_v8<OP, DRIFT_BF16><<<blocks, DCU_THREADS, 0, ctx->stream>>>((const uint4 *)x, (uint4 *)y, n8);
    else
        k_unary_torch_v8<OP, DRIFT_F16><<<blocks, DCU_THREADS, 0, ctx->stream>>>((const uint4 *)x, (uint4 *)y, n8);
    return cudaGetLastError();
}

} // namespace

extern "C" cudaError_t dct_launch_unary(const dcu_ctx *ctx, int op, const void *x, drift_dtype tx, void *y,
                                        drift_dtype ty, int64_t n) {
    if (n <= 0) return cudaSuccess;
    /* 16-bit in and out, 16-byte aligned, whole groups of 8: the wide kernel */
    if (tx == ty && (tx == DRIFT_BF16 || tx == DRIFT_F16) && n % 8 == 0 && !((uintptr_t)x & 15) && !((uintptr_t)y & 15) &&
        (op == DCT_UN_SILU || op == DCT_UN_GELU_TANH))
        return op == DCT_UN_SILU ? launch_v8<DCT_UN_SILU>(ctx, x, y, tx, n) : launch_v8<DCT_UN_GELU_TANH>(ctx, x, y, tx, n);
    const unsigned blocks = dcu_blocks_for(n, DCU_THREADS, ctx);
    if (op == DCT_UN_SILU)
        k_unary_torch<DCT_UN_SILU><<<blocks, DCU_THREADS, 0, ctx->stream>>>(x, tx, y, ty, n);
    else if (op == DCT_UN_GELU_TANH)
        k_unary_torch<DCT_UN_GELU_TANH><<<blocks, DCU_THREADS, 0, ctx->stream>>>(x, tx, y, ty, n);
    else if (op == DCT_UN_RSQRT)
        k_unary_torch<DCT_UN_RSQRT><<<blocks, DCU_THREADS, 0, ctx->stream>>>(x, tx, y, ty, n);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}
