/* The CUDA backend (kernels/backend.h's door, one GPU). Plain C: no CUDA
 * header is needed to include this file.
 *
 * Storage: tensors live in device memory in their native dtype (fp32 4 bytes,
 * bf16/fp16 2 bytes); fp64 tensors are not supported (supports_op says no,
 * alloc refuses them). All work of one backend is queued on its own CUDA
 * stream, in call order; run() and the uploads return before the device has
 * finished, download_*, metrics and sync wait. A CUDA error of queued work
 * surfaces at the next call that waits (DRIFT_E_IO, message names the call).
 *
 * Numerics (kernels/backend.h's contract, details in kernels/cuda/README.md):
 *  - pure IEEE ops (CAST, ADD/SUB/MUL, AFFINE, ROPE, layouts) are bit-identical
 *    to the cpu backend: fp32 opmath with explicit _rn intrinsics (no FMA
 *    contraction) and the exact RNE conversions of formats/dtype.h.
 *  - GEMMs use cuBLASLt, CUBLAS_COMPUTE_32F (no TF32), one rounding to the
 *    output dtype (split-K only with fp32 intermediates, and never with a
 *    fused bias: cuBLASLt's split-K reduction adds the bias after rounding).
 *  - reductions (norms, softmax sums, GEMM accumulation) use their own
 *    summation order: close to, not bit-identical with, the cpu backend.
 *  - transcendental functions are CUDA's precise ones (no fast math): expf,
 *    tanhf within 2 fp32 ULPs; the timestep sinusoid evaluates exp/sin/cos in
 *    fp64 and rounds once (correctly rounded but for double-rounding ties).
 *
 * Thread-safety: one backend per host thread at a time (it owns one stream,
 * one cuBLASLt handle, one scratch arena). Every entry point selects the
 * backend's device first (cudaSetDevice), so several backends on several
 * devices may be used from one thread.
 *
 * Kernel variants, options of the backend spec fixed at creation
 * (drift_backend_create("cuda:0:gemm=naive:i64=1", ...); tests use them to
 * reach every launch configuration; leave them out in production). The
 * library reads no environment.
 *   i64=1                 elementwise/layout kernels use 64-bit indexing
 *   gemm=auto|unfused|naive  the fused cuBLASLt path (default, with automatic
 *                         fallback), the unfused path (fp32 cuBLASLt output +
 *                         epilogue kernel) or the naive CUDA-core GEMM kernel
 *   attention=auto|unfused|fused|fused_mma|fused_wgmma  the attention path
 *                         (attention_lt.c); a forced fused kernel that does
 *                         not apply fails with DRIFT_E_UNSUPPORTED
 *   attn_scratch=BYTES    attention scratch budget (default 1 GiB): small
 *                         values force (batch*head, query-row) chunking
 *   metrics_grid=N        number of blocks of the metric reduction
 *   norm_smem=0           norms re-read rows from global memory instead of
 *                         caching them in shared memory */
#ifndef DRIFT_KERNELS_CUDA_BACKEND_H
#define DRIFT_KERNELS_CUDA_BACKEND_H

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of visible CUDA devices; 0 when there is none or the driver/runtime
 * reports an error (never fails). */
int drift_cuda_device_count(void);

/* The backend's CUDA stream (a cudaStream_t), for benchmarks and recorders
 * that want to order their own work after the backend's; NULL if be is not a
 * CUDA backend. Borrowed: do not destroy it. */
void *drift_cuda_backend_stream(const drift_backend *be);

/* 1 if be is a CUDA backend (drift_backend_create("cuda...")). */
int drift_cuda_backend_is_cuda(const drift_backend *be);

#ifdef __cplusplus
}
#endif

#endif
