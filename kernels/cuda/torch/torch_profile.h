/* Internal to kernels/cuda: the `torch` kernel profile of the CUDA backend
 * (kernels/cuda/README.md, "The torch profile"). Compiles as C11 and as CUDA
 * C++. Not a public header.
 *
 * The profile reproduces what PyTorch 2.11 runs for an op on the same GPU:
 *   gemm_torch.c       LINEAR as aten::linear -> addmm/mm: cuBLASLt with the
 *                      bias epilogue (torch's gemm_and_bias) or cublasGemmEx
 *   bmm_torch.c        BMM as aten::bmm / baddbmm / mm: cublasGemm(StridedBatched)Ex
 *                      or cublasSgemm(StridedBatched) with torch's arguments
 *                      (kernels/torch_blas_args.c)
 *   norm_torch.cu      LAYER_NORM as vectorized_layer_norm_kernel, RMS_NORM as
 *                      its fused rms variant (x and w of one dtype) or the
 *                      composite (pow, reduce_kernel mean, add, rsqrt, mul)
 *   elementwise_torch.cu  GELU_TANH, SILU with torch's expressions
 *   sdpa_cudnn.c       ATTENTION through cuDNN's fused flash SDPA (backend API)
 *   flash_torch.cu     ATTENTION as torch's FlashAttention-2 (head dims no multiple of 8)
 *   softmax_torch.cu   SOFTMAX as torch's persistent warp softmax
 *   torch_profile.c    state, dispatch, library identity
 *
 * Its test knobs are the backend spec's torch options (cuda_backend.h), fixed
 * at creation in ctx->torch_opts and copied here. */
#ifndef DRIFT_KERNELS_CUDA_TORCH_PROFILE_H
#define DRIFT_KERNELS_CUDA_TORCH_PROFILE_H

#include <cublas_v2.h>

#include "kernels/cuda/cuda_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { DCT_GEMM_AUTO = 0, DCT_GEMM_LT = 1, DCT_GEMM_CUBLAS = 2 };

/* ctx->torch: owned by the backend (dct_torch_create / dct_torch_destroy). */
struct dct_state {
    cublasHandle_t cublas;   /* torch's cuBLAS handle: stream, workspace, default math */
    void *cublas_ws;         /* its workspace (device), the larger of the two sizes */
    size_t cublas_ws_size;   /* the recording's (CUBLAS_WORKSPACE_CONFIG), else torch's default */
    size_t cublas_ws_conv;   /* torch's default for the GPU: a convolution's GEMM (DRIFT_LINEAR_CONV) */
    void *lt_ws;             /* cuBLASLt workspace (device), lt_ws_size bytes */
    size_t lt_ws_size;
    int gemm_mode;           /* DCT_GEMM_* */
    int ln_threads, ln_combine;
    int rms_variant;         /* rms_variant bits: 1 flip vectorize, 2 descending shuffles,
                                4 composite when there is no weight, 8 composite always */
    int sdpa_off;            /* sdpa=exact: attention on the exact kernels */
    int sdpa_stats;          /* sdpa_stats=1: the training-mode graph (softmax stats out) */
    int sdpa_graph;          /* sdpa_graph: 0 auto, 1 unified, 2 composite (sdpa_cudnn.c) */
    int conv_heur;           /* conv_heur: 0 instant (torch's Conv_v8), 1 mode A, 2 mode B */
    int conv_skip;           /* conv_skip: engine configurations skipped */
    int flash_fast;          /* flash_fast=1: fast-math exp2 / reciprocal in flash_torch.cu */
    void *cudnn;             /* cudnnHandle_t (cudnn_graph.c), made on first use */
    struct dct_sdpa_cache *sdpa; /* SDPA plans (sdpa_cudnn.c) */
    struct dct_conv_cache *conv; /* convolution plans (conv_cudnn.c) */
};

/* ---- torch_profile.c ------------------------------------------------ */
/* Creates ctx->torch (cuBLAS handle and workspaces). Caller: the backend's
 * creation; dct_torch_destroy undoes it (NULL-safe). */
int dct_torch_create(dcu_ctx *ctx, drift_err *err);
void dct_torch_destroy(dcu_ctx *ctx);

/* Runs op under the torch profile when it has an implementation for it:
 * *handled = 1 and the status of the run; else *handled = 0, DRIFT_OK and
 * nothing queued, the fallback recorded (dct_torch_note_fallback) unless the
 * exact kernel is torch's arithmetic already; the caller runs the exact
 * kernel. Inputs validated by the caller. */
int dct_torch_run(dcu_ctx *ctx, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                  const char *where, int *handled, drift_err *err);
/* 1 if the exact kernel of this op kind computes torch's arithmetic already
 * (single IEEE operations per element, raw copies): no fallback to record. */
int dct_torch_exact_is_torch(drift_op_kind k);
/* Records that an op of kind k ran on the exact kernels; why (NULL: none
 * given) is kept as the last reason. */
void dct_torch_note_fallback(dcu_ctx *ctx, drift_op_kind k, const char *why);

/* ---- gemm_torch.c --------------------------------------------------- */
/* y[M, N] = x[M, K] W[N, K]^T (+ bias[N]), all of dtype c (bf16/fp16/fp32),
 * as torch's addmm (bias) or mm (no bias) on contiguous tensors. */
int dct_gemm_linear(dcu_ctx *ctx, const void *x, const void *w, const void *bias, void *y, drift_dtype c,
                    int64_t M, int64_t N, int64_t K, int conv, const char *where, drift_err *err);

/* ---- bmm_torch.c ---------------------------------------------------- */
/* BMM (any batch dims, 2-D = mm) as torch's cuBLAS call, op->layout's DRIFT_BMM_* bits saying how
 * torch held the operands. *handled = 0 with the fallback recorded and nothing queued where it
 * does not apply (the caller runs the host bodies); else *handled = 1 and the run's status.
 * Scratch is allocated and freed on ctx's stream; nothing is kept. Inputs validated by the caller. */
int dct_run_bmm(dcu_ctx *ctx, const drift_op *op, const drift_tensor *const *in, drift_tensor *out, const char *where,
                int *handled, drift_err *err);

/* ---- sdpa_cudnn.c -------------------------------------------------- */
/* q, k, v, o of dtype bf16/fp16 at element strides {b, h, l, d}. */
typedef struct dct_sdpa_args {
    int64_t B, H, Sq, Sk, D;
    const void *q, *k, *v;
    void *o;
    int64_t qs[4], ks[4], vs[4], os[4];
    drift_dtype dtype;
    float scale;
    const void *bias;     /* NULL, or ATTENTION's fp32 additive bias [Bb, Hb, Lqb, Sk], contiguous */
    int64_t bias_dims[3]; /* Bb, Hb, Lqb (each 1 or B, H, Sq) */
    int causal;           /* flash only: the bias is SDPA's is_causal with Sq == Sk (the importer's
                             flash order on a biased ATTENTION); flash masks it itself */
} dct_sdpa_args;
/* DRIFT_OK; DRIFT_E_UNSUPPORTED with the reason in why and nothing queued
 * (cuDNN absent or declining the graph: the caller falls back); other codes
 * are errors of the run itself. */
int dct_sdpa_cudnn(dcu_ctx *ctx, const dct_sdpa_args *a, char *why, size_t why_size, drift_err *err);
void dct_sdpa_cache_destroy(dcu_ctx *ctx);

/* ---- softmax_torch.cu ------------------------------------------------ */
/* 1 if torch takes its persistent warp softmax for a last-dim row of N elements of dtype tx. */
int dct_softmax_supported(int64_t N, drift_dtype tx);
/* y = softmax (log_sm: log_softmax) of each row of x [rows, N] in softmax_warp_forward's order. */
cudaError_t dct_launch_softmax(const dcu_ctx *ctx, const void *x, drift_dtype tx, void *y, drift_dtype ty, int64_t rows,
                               int64_t N, int log_sm);

/* ---- group_norm_torch.cu -------------------------------------------- */
/* y = group_norm(x [N, C, HxW] contiguous, G groups, optional w, b [C]) in torch 2.11's
 * order (RowwiseMoments' Welford, fused a * x + b); scratch: 2 * N * G floats of device
 * memory (mean, rstd). All pointers are the caller's, on ctx's device. */
cudaError_t dct_launch_group_norm(dcu_ctx *ctx, const void *x, drift_dtype tx, int64_t N, int64_t C, int64_t HxW,
                                  int64_t G, const void *w, drift_dtype tw, const void *b, drift_dtype tb, float eps,
                                  void *y, drift_dtype ty, float *scratch);

/* ---- flash_torch.cu -------------------------------------------------- */
/* 1 if torch's FlashAttention-2 forward is emulated for a (no mask, bf16/fp16, head dim <= 64);
 * else 0 with the reason in why. */
int dct_flash_supported(const dct_sdpa_args *a, char *why, size_t why_size);
/* o = attention(q, k, v) in flash_fwd_kernel's order (flash_torch.cu); fast: the spec's flash_fast. */
cudaError_t dct_launch_flash(dcu_ctx *ctx, const dct_sdpa_args *a, int fast);
/* Destroys the cuDNN handle (cudnn_graph.c; no-op without cuDNN). */
void dct_cudnn_destroy(dcu_ctx *ctx);

/* ---- conv_cudnn.c --------------------------------------------------- */
/* y = conv3d(x, w) without bias, as torch's cudnn_convolution: x [N, C, D,
 * H, W], w [K, C, kd, kh, kw], stride = kernel (patch embedding), no
 * padding, dilation 1, contiguous, all of dtype dt (bf16/fp16), fp32
 * compute; y [N, K, D/kd, H/kh, W/kw]. DRIFT_E_UNSUPPORTED with the reason in
 * why when cuDNN is absent or declines. */
int dct_conv3d_patch(dcu_ctx *ctx, const void *x, const int64_t *xshape, const void *w, const int64_t *wshape,
                     void *y, drift_dtype dt, char *why, size_t why_size, drift_err *err);
void dct_conv_cache_destroy(dcu_ctx *ctx);

/* ---- norm_torch.cu -------------------------------------------------- */
/* 1 if torch takes vectorized_layer_norm_kernel for these pointers and
 * width (fp32 rows, N % 4 == 0, 16-byte aligned, N <= 2^24). */
int dct_layer_norm_vectorizable(const void *x, const void *y, const void *w, const void *b, int64_t N);
/* x fp32-widened from tx, computed as torch's fp32 layer_norm, rounded to ty. */
cudaError_t dct_launch_layer_norm(const dcu_ctx *ctx, const void *x, drift_dtype tx, int64_t rows, int64_t N,
                                  const void *w, drift_dtype tw, const void *b, drift_dtype tb, void *y,
                                  drift_dtype ty, float eps, int threads, int combine);
/* Launch shape of torch's reduce_kernel for a contiguous last-dim fp32 sum
 * of rows x N: 1 if supported here (no inter-warp or cross-block split). */
typedef struct dct_reduce_cfg {
    int bw, bh;      /* block (x: lanes along the row, y: rows per block) */
    int vectorize;   /* 4-wide loads, 4 accumulators per thread */
    float factor;    /* MeanOps factor: (float)rows / (float)(rows*N) */
    int shfl_asc;    /* test variant: lane shuffles in ascending offsets 1 .. 16 (torch: 16 .. 1) */
} dct_reduce_cfg;
int dct_reduce_config(int64_t rows, int64_t N, dct_reduce_cfg *cfg);
/* torch's rms_norm: u = fp32(x); r = rsqrt(mean(u*u) + eps); y = round_ty((u * r) * w)
 * (w optional; one rounding, as torch 2.11's fused kernel and composite both do). */
cudaError_t dct_launch_rms_norm(const dcu_ctx *ctx, const void *x, drift_dtype tx, int64_t rows, int64_t N,
                                const void *w, drift_dtype tw, void *y, drift_dtype ty, float eps,
                                const dct_reduce_cfg *cfg);

/* torch's sum / mean over the contiguous last dim of rows x N (reduce_kernel with SumOps /
 * MeanOps, fp32 accumulation, cfg from dct_reduce_config): y[row] = round_ty(sum) or
 * round_ty(sum * cfg->factor). cfg->vectorize needs an fp32, 16-byte aligned x. */
cudaError_t dct_launch_reduce(const dcu_ctx *ctx, const void *x, drift_dtype tx, int64_t rows, int64_t N, void *y,
                              drift_dtype ty, int mean, const dct_reduce_cfg *cfg);
/* torch's sum / mean over one dim that is not the innermost (x as outer x N x inner, inner > 1,
 * N < 256: reduce_kernel maps block.x to the outputs, and each thread sums its output's N
 * inputs in order into vt0 = 4 accumulators, k % 4, combined ((a0 + a1) + a2) + a3).
 * 0 (cudaErrorInvalidValue) for N >= 256: torch splits those across threads, not emulated. */
cudaError_t dct_launch_reduce_mid(const dcu_ctx *ctx, const void *x, drift_dtype tx, int64_t outer, int64_t N,
                                  int64_t inner, void *y, drift_dtype ty, int mean);
/* torch's fused rms_norm (vectorized_layer_norm_kernel<T, float, true>, one
 * row per block of `threads`): r = rsqrt(sum(u*u) / N + eps) summed in
 * layer_norm's thread order; y = round_ty(w * (r * u)). N % 4 == 0. */
cudaError_t dct_launch_rms_norm_fused(const dcu_ctx *ctx, const void *x, drift_dtype tx, int64_t rows, int64_t N,
                                      const void *w, drift_dtype tw, void *y, drift_dtype ty, float eps, int threads);

/* ---- elementwise_torch.cu ------------------------------------------- */
enum { DCT_UN_SILU = 0, DCT_UN_GELU_TANH = 1, DCT_UN_RSQRT = 2 };
cudaError_t dct_launch_unary(const dcu_ctx *ctx, int op, const void *x, drift_dtype tx, void *y, drift_dtype ty,
                             int64_t n);

#ifdef __cplusplus
}
#endif

#endif
