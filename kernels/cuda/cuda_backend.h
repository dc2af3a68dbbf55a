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
 *                         caching them in shared memory
 *   kernels=exact|torch   the kernel profile (below); default exact
 *
 * Options of the torch profile (test knobs: tests/gpu/torch_parity.sh uses
 * them to learn which variant torch runs; leave them out in production):
 *   torch_gemm=auto|lt|cublas  auto: torch's rule (bias, any M: cuBLASLt
 *                         bias epilogue, else cublasGemmEx); lt: always cuBLASLt
 *                         (TORCH_BLAS_PREFER_CUBLASLT=1); cublas: always
 *                         cublasGemmEx (bias copied into the output, beta = 1)
 *   cublas_ws=BYTES       torch's cuBLAS workspace (default torch's: 32 MiB on
 *                         sm_90, else 8320 KiB; set it as CUBLAS_WORKSPACE_CONFIG
 *                         sets torch's)
 *   lt_ws_kib=N           cuBLASLt workspace limit in KiB (default 1024, torch's
 *                         CUBLASLT_WORKSPACE_SIZE; capped at cublas_ws)
 *   ln_threads=N          threads of the layer-norm block (default 128)
 *   ln_combine=0|1|2      how the Welford combine's mean is contracted (0: as
 *                         nvcc contracts the plain expression, 1/2: the two
 *                         explicit fmaf orders)
 *   rms_variant=0..15     rms_norm variants (composite reduction: bit 1 flips
 *                         the 4-wide vectorization, bit 2 lane shuffles 16..1;
 *                         bit 4: the composite, not the fused kernel, when
 *                         there is no weight; bit 8: the composite always)
 *   sdpa=auto|exact       exact: ATTENTION on the exact kernels (recorded fallback)
 *   sdpa_stats=0|1        cuDNN graph of training mode (stats output too)
 *   sdpa_graph=auto|unified|composite  cuDNN SDPA graph: one SDPA_FWD operation
 *                         (cuDNN >= 9.13) or the matmul/softmax/matmul graph;
 *                         auto: unified, composite where cuDNN declines it
 *   conv_heur=instant|a|b cuDNN heuristic mode of the patch convolution
 *   conv_skip=N           skip the first N engine configurations
 *   flash_fast=0|1        FlashAttention-2's exp2 / expf / log / 1/l as the
 *                         approximate instructions --use_fast_math emits
 *                         (test variant: torch's flash is built without it)
 *
 * Kernel profiles (kernels/cuda/README.md, "The torch profile"): `exact` is
 * drift's own order-defined kernels; `torch` runs, for LINEAR, LAYER_NORM,
 * RMS_NORM, GELU_TANH, SILU, REDUCE sum/mean over the last dims, UNARY rsqrt,
 * SOFTMAX and ATTENTION (cuDNN, or FlashAttention-2's order at head dims that
 * are no multiple of 8), what PyTorch 2.11 runs on the same GPU
 * (cuBLAS/cuBLASLt called with torch's descriptors, workspace and heuristic
 * query; torch's reduction orders; torch's math functions with nvcc's default
 * FMA contraction), so that a replay of a PyTorch recording can be bitwise
 * equal to it. Ops the torch profile has no implementation for run on the
 * exact kernels and are recorded (drift_cuda_backend_torch_fallbacks); ops
 * whose exact kernel is a single IEEE operation per element (CAST, ADD, SUB,
 * MUL, AFFINE, layouts, ROPE) are torch's arithmetic already and are not
 * counted. */
#ifndef DRIFT_KERNELS_CUDA_BACKEND_H
#define DRIFT_KERNELS_CUDA_BACKEND_H

#include <stdint.h>

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel profiles (see above). */
enum { DRIFT_CUDA_KERNELS_EXACT = 0, DRIFT_CUDA_KERNELS_TORCH = 1 };

/* "exact" -> DRIFT_CUDA_KERNELS_EXACT, "torch" -> DRIFT_CUDA_KERNELS_TORCH,
 * anything else (or NULL) -> -1. */
int drift_cuda_kernel_profile_parse(const char *s);
/* "exact" / "torch" (static string; "?" for an unknown value). */
const char *drift_cuda_kernel_profile_name(int profile);
/* The profile be was created with; -1 if be is not a CUDA backend. */
int drift_cuda_backend_kernel_profile(const drift_backend *be);

/* Ops that ran on the exact kernels although be uses the torch profile:
 * returns a mask with bit k set for drift_op_kind k; *count (NULL allowed)
 * gets the number of such runs. 0 for an exact-profile or non-CUDA backend. */
uint64_t drift_cuda_backend_torch_fallbacks(const drift_backend *be, int64_t *count);
/* The reason of the last such fallback ("" if none; borrowed, valid until
 * the next run on be). */
const char *drift_cuda_backend_torch_fallback_reason(const drift_backend *be);
/* The reason of the first fallback of an op of kind (a drift_op_kind) ("" if none; borrowed). */
const char *drift_cuda_backend_torch_fallback_reason_of(const drift_backend *be, int kind);

/* What the backend runs on, recorded at creation, for replay reports and for
 * comparing with a recording's (bitwise equality with torch is only expected
 * on the same GPU model with the same cuBLAS(Lt)/cuDNN builds). Versions are
 * the libraries' own runtime answers (cublasLtGetVersion, cublasGetVersion,
 * cudnnGetVersion: e.g. 130100 for 13.1.0, 91900 for 9.19.0), 0 when not
 * available; the paths are the shared objects actually loaded ("" if
 * unknown), so that LD_LIBRARY_PATH choices are visible. */
typedef struct drift_cuda_identity {
    char gpu_name[256];
    int cc_major, cc_minor;
    int driver_version;    /* cudaDriverGetVersion, e.g. 13000 */
    int runtime_version;   /* cudaRuntimeGetVersion */
    long cublaslt_version;
    long cublas_version;
    long cudnn_version;
    char cublaslt_path[512];
    char cudnn_path[512];
} drift_cuda_identity;

/* Fills *out for be. DRIFT_E_INPUT if be is not a CUDA backend. */
int drift_cuda_backend_identity(const drift_backend *be, drift_cuda_identity *out, drift_err *err);

/* The Conv3d patch embedding (kernel == stride, no padding, no bias) as
 * torch's cudnn_convolution, on a torch-profile backend: x [N, C, D, H, W],
 * w with K*C*kd*kh*kw elements in Conv3d's weight order [K, C, kd, kh, kw]
 * (any shape, e.g. the [K, C*kd*kh*kw] of a linear), y [N, K, D/kd, H/kh,
 * W/kw], all allocated on be in one dtype (bf16/fp16). Queued on be's
 * stream. DRIFT_E_UNSUPPORTED, saying why, when be is not a torch-profile
 * CUDA backend or cuDNN is absent or declines; DRIFT_E_INPUT for
 * inconsistent shapes. For the op-parity harness and a future convolution op
 * (the replay graph runs the patch embedding as PATCHIFY + LINEAR). */
int drift_cuda_torch_conv3d_patch(const drift_backend *be, const drift_tensor *x, const drift_tensor *w,
                                  const int kernel[3], drift_tensor *y, drift_err *err);

/* Free and total memory of CUDA device `device` (cudaMemGetInfo); 0, or -1
 * when there is no such device. */
int drift_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes);

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
