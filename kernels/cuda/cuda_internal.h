/* Internal to kernels/cuda: the backend context and the launchers the .cu
 * files export to the C side (backend_cuda.c, gemm_lt.c, attention_host.c).
 * Compiles as C11 and as CUDA C++ (nvcc). Not a public header.
 *
 * Launchers take device pointers that the caller has validated (shapes,
 * dtypes, bounds), queue their kernels on ctx->stream and return a
 * cudaError_t (cudaSuccess = 0) from the launch; they never synchronise
 * (except dcu_metrics_run, which must return host values). */
#ifndef DRIFT_KERNELS_CUDA_INTERNAL_H
#define DRIFT_KERNELS_CUDA_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <cublasLt.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "formats/dtype.h"
#include "formats/err.h"
#include "kernels/backend_impl.h"
#include "kernels/cuda/cuda_backend.h"

/* Forced GEMM paths (the spec's gemm= option). */
enum { DCU_GEMM_AUTO = 0, DCU_GEMM_UNFUSED = 1, DCU_GEMM_NAIVE = 2 };
/* Attention paths (the spec's attention= option), in the option's order. */
enum { DCU_ATTN_AUTO = 0, DCU_ATTN_UNFUSED = 1, DCU_ATTN_FUSED = 2, DCU_ATTN_FUSED_MMA = 3, DCU_ATTN_FUSED_WGMMA = 4 };

typedef struct dcu_gemm_cache dcu_gemm_cache; /* gemm_lt.c */

typedef struct dcu_ctx {
    int device;
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *lt_ws;               /* cuBLASLt workspace (device), lt_ws_size bytes */
    size_t lt_ws_size;
    cudaMemPool_t pool;        /* private stream-ordered pool, when supported */
    int have_pool;
    void *pinned[2];           /* host staging for upload/download */
    size_t pinned_size;        /* bytes of each */
    cudaEvent_t pin_ev[2];
    void *metrics_part;        /* device: per-block metric partials */
    int metrics_part_cap;      /* blocks they hold */
    void *metrics_host;        /* pinned host: the final metric result */
    int sm_count;
    int max_threads_per_sm;
    /* kernel variants, fixed at creation (cuda_backend.h) */
    int force_i64;
    int gemm_mode;
    int attn_mode;             /* DCU_ATTN_* */
    char attn_mode_name[16];
    size_t attn_budget;
    int metrics_grid;
    int norm_smem;
    dcu_gemm_cache *gemm_cache;
    /* kernel profile (cuda_backend.h: DRIFT_CUDA_KERNELS_*) and the torch
       profile's options (the spec's torch_* keys), fixed at creation */
    int kernel_profile;
    char last_choice[128];     /* what the last LINEAR's / BMM's library or ATTENTION's kernel chose ("" none;
                                  drift_backend_last_choice) */
    struct {
        int gemm_mode;          /* DCT_GEMM_* (torch_profile.h) */
        long cublas_ws;         /* bytes; 0: torch's default for the GPU */
        long lt_ws_kib;         /* KiB */
        int ln_threads, ln_combine, rms_variant;
        int sdpa_off, sdpa_stats;
        int sdpa_graph;         /* 0 auto, 1 unified, 2 composite */
        int flash_fast;         /* 1: FlashAttention-2's exp2 and 1/l as --use_fast_math's ex2 / rcp (flash_torch.cu) */
        int conv_heur, conv_skip; /* conv_heur: 0 instant, 1 a, 2 b */
    } torch_opts;
    struct dct_state *torch;   /* the torch profile's handles (kernels/cuda/torch/), NULL for exact */
    drift_backend *host;       /* the cpu backend for ops without a GPU kernel (host_ops_cuda.c), lazily; owned */
    uint64_t torch_fallback_mask; /* bit k: an op of kind k ran on the exact kernels under the torch profile */
    int64_t torch_fallbacks;      /* how many such runs */
    char torch_fallback_why[256]; /* the last fallback's reason ("" if none given) */
    char torch_fallback_kind_why[64][96]; /* per op kind: the first fallback's reason */
    drift_cuda_identity identity; /* GPU, driver and library versions, filled at creation */
    char name[32];
} dcu_ctx;

/* ---- memory (backend_cuda.c) ---------------------------------------- */
/* Stream-ordered device allocation on ctx->stream (pool when available,
 * else cudaMalloc). bytes == 0 gives NULL and success. */
cudaError_t dcu_malloc(dcu_ctx *ctx, void **p, size_t bytes);
void dcu_free(dcu_ctx *ctx, void *p);
/* Sets err from a CUDA status; returns the drift status (DRIFT_OK on success). */
int dcu_check(cudaError_t e, drift_err *err, const char *where, const char *what);

/* ---- identity.c ---------------------------------------------------- */
/* Fills ctx->identity (never fails: unknown fields stay 0 / ""). */
void dcu_identity_fill(dcu_ctx *ctx);

/* ---- host_ops_cuda.c: ops without a GPU kernel yet, on the host ---- */
/* 1 if op has no GPU kernel: the closed opset's newer kinds and variants, and
 * roundings to an integer dtype. */
int dcu_op_needs_host(const drift_op *op, const drift_tensor *const *in);
/* Runs op through the cpu backend (ctx->host, created on first use): inputs
 * copied down exactly, the result copied back into out. dev is ctx's backend;
 * in and out borrowed. */
int dcu_run_on_host(dcu_ctx *ctx, const drift_backend *dev, const drift_op *op, const drift_tensor *const *in,
                    drift_tensor *out, drift_err *err);

/* ---- f64_cuda.c: ops that touch fp64, through the GPU oracle's bodies ---- */
/* 1 if op->out, op->compute or an input is F64. */
int dcu_op_is_f64(const drift_op *op, const drift_tensor *const *in);
/* The dtype a tensor of dt is stored in on the device: fp64 for fp64 and the
 * integer dtypes (formats/dtype.h drift_dtype_wide), else dt itself. */
static inline drift_dtype dcu_storage_dtype(drift_dtype dt) { return drift_dtype_wide(dt) ? DRIFT_F64 : dt; }
/* Runs such an op (arguments validated by the door): inputs widened to
 * fp64, drift_rcu_run_op on ctx's stream, the result kept (F64) or rounded
 * to fp32 and then to out's dtype. Temporaries its own; in, out borrowed. */
int dcu_run_f64(dcu_ctx *ctx, const drift_op *op, const drift_tensor *const *in, drift_tensor *out, const char *where,
                drift_err *err);
/* t (F64) narrowed RNE to a device fp32 copy in *tmp (caller: dcu_free). */
int dcu_f64_narrow(dcu_ctx *ctx, const drift_tensor *t, void **tmp, drift_err *err);

/* ---- elementwise.cu ------------------------------------------------- */
enum { DCU_UN_CAST = 0, DCU_UN_AFFINE, DCU_UN_SILU, DCU_UN_GELU_TANH };
enum { DCU_BIN_ADD = 0, DCU_BIN_SUB, DCU_BIN_MUL };

/* y[i] = round_ty(f(x[i])), i < n. */
cudaError_t dcu_launch_unary(const dcu_ctx *ctx, int op, const void *x, drift_dtype tx, void *y, drift_dtype ty,
                             int64_t n, float alpha, float beta);

/* Broadcast plan: drift_bcast (kernels/backend_impl.h). */
cudaError_t dcu_launch_binary(const dcu_ctx *ctx, int op, const void *a, drift_dtype ta, const void *b,
                              drift_dtype tb, void *y, drift_dtype ty, const drift_bcast *bc);

/* out[b, :] = sinusoid(t[b]) for b < nb, dim columns (see backend.h). */
cudaError_t dcu_launch_sinusoid(const dcu_ctx *ctx, const void *t, drift_dtype tt, void *y, drift_dtype ty,
                                int64_t nb, int dim, float neg_log_period, int flip);

/* GEMM epilogue of the unfused path, column-major D[m x n] per batch:
 * d[i + j*ldd + z*stride_d] = round_td(src[i + j*m + z*m*n] + bias[i]) (bias
 * optional, NULL). */
cudaError_t dcu_launch_bias_round(const dcu_ctx *ctx, const float *src, int64_t m, int64_t n, int64_t batch,
                                  const void *bias, drift_dtype tbias, void *d, drift_dtype td, int64_t ldd,
                                  int64_t stride_d);

/* ---- aten_ops.cu (captured graphs' ATen-level ops) ------------------ */
/* kind 0: y = unary_sub(x); kind 1: y = x (scalar_sub) s. */
cudaError_t dcu_launch_aten_ew(const dcu_ctx *ctx, int kind, int sub, const void *x, drift_dtype tx, void *y,
                               drift_dtype ty, int64_t n, double s);
cudaError_t dcu_launch_div(const dcu_ctx *ctx, const void *a, drift_dtype ta, const void *b, drift_dtype tb, void *y,
                           drift_dtype ty, const drift_bcast *bc);
cudaError_t dcu_launch_reduce(const dcu_ctx *ctx, const void *x, drift_dtype tx, void *y, drift_dtype ty,
                              int64_t outer, int64_t n, int64_t inner, int mean);
cudaError_t dcu_launch_fill(const dcu_ctx *ctx, void *y, drift_dtype ty, int64_t n, int iota, double value,
                            double step);

/* ---- norm.cu -------------------------------------------------------- */
cudaError_t dcu_launch_layer_norm(const dcu_ctx *ctx, const void *x, drift_dtype tx, int64_t rows, int64_t dim,
                                  const void *w, drift_dtype tw, const void *b, drift_dtype tb, void *y,
                                  drift_dtype ty, float eps);
cudaError_t dcu_launch_rms_norm(const dcu_ctx *ctx, const void *x, drift_dtype tx, int64_t rows, int64_t dim,
                                const void *w, drift_dtype tw, void *y, drift_dtype ty, float eps);

/* ---- rope.cu -------------------------------------------------------- */
cudaError_t dcu_launch_rope(const dcu_ctx *ctx, const void *x, drift_dtype tx, int64_t nb, int64_t L, int64_t H,
                            int64_t Dh, const void *cosb, drift_dtype tc, const void *sinb, drift_dtype ts, void *y,
                            drift_dtype ty);

/* ---- layout.cu ------------------------------------------------------ */
/* Strided copy over an index space of nd dims (row-major iteration):
 * dst[dbase + sum c_i*dst_stride_i] = convert(src[sbase + sum c_i*src_stride_i]).
 * Element offsets, not bytes. Same dtype: raw bit copy; else round to td. */
typedef struct dcu_copy {
    int nd;
    int64_t shape[DRIFT_MAX_DIMS];
    int64_t ss[DRIFT_MAX_DIMS];
    int64_t ds[DRIFT_MAX_DIMS];
    const void *src;
    drift_dtype ts;
    int64_t soff;
    void *dst;
    drift_dtype td;
    int64_t doff;
} dcu_copy;
/* Drops size-1 dims and merges chained neighbours in place. */
void dcu_copy_simplify(dcu_copy *c);
cudaError_t dcu_launch_copy(const dcu_ctx *ctx, const dcu_copy *c);

/* ---- aten_cuda.c ------------------------------------------------------ */
/* Runs an ATen-level op (DRIFT_OP_UNARY .. DRIFT_OP_FILL), arguments checked. */
int dcu_run_aten(dcu_ctx *ctx, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                 const char *where, drift_err *err);

/* ---- gemm (gemm_lt.c, gemm_naive.cu) -------------------------------- */
/* Column-major strided-batched GEMM:
 *   D_z[m x n] = round_td(alpha * op(A_z)[m x k] op(B_z)[k x n] (+ bias[m]))
 * op(X) = X^T when trans. A stored rows x cols = (transa ? k x m : m x k) with
 * leading dim lda; likewise B. fp32 accumulation; ta == tb. */
typedef struct dcu_gemm {
    int transa, transb;
    int64_t m, n, k;
    const void *a;
    drift_dtype ta;
    int64_t lda, stride_a;
    const void *b;
    drift_dtype tb;
    int64_t ldb, stride_b;
    void *d;
    drift_dtype td;
    int64_t ldd, stride_d;
    int64_t batch;
    float alpha;
    const void *bias; /* NULL: none; else m elements of tbias */
    drift_dtype tbias;
} dcu_gemm;
int dcu_gemm_run(dcu_ctx *ctx, const dcu_gemm *g, drift_err *err);
int dcu_gemm_cache_create(dcu_ctx *ctx, drift_err *err);
void dcu_gemm_cache_destroy(dcu_ctx *ctx);
cudaError_t dcu_launch_gemm_naive(const dcu_ctx *ctx, const dcu_gemm *g);

/* ---- attention.cu --------------------------------------------------- */
/* Rows of s (rows x cols fp32, contiguous): m = max, p = exp(s - m) (fp32),
 * l[row] = sum p (fp32), p_out = round_tp(p). */
cudaError_t dcu_launch_softmax_rows(const dcu_ctx *ctx, const float *s, int64_t rows, int64_t cols, void *p,
                                    drift_dtype tp, float *l);
/* out[(z*Lq + r0 + i)*Dv + e] = round_to(o[(z*nr + i)*Dv + e] / l[z*nr + i])
 * for z < nb, i < nr, e < Dv (out already offset to the chunk's first head). */
cudaError_t dcu_launch_attn_finalize(const dcu_ctx *ctx, const float *o, const float *l, int64_t nb, int64_t nr,
                                     int64_t Dv, int64_t Lq, int64_t r0, void *out, drift_dtype to);
/* s[(z*nr + i)*lk + j] += bias[b*bs[0] + h*bs[1] + (r0 + i)*bs[2] + j] (fp32, one
 * rounding) for the chunk's nb (batch*head) slices from bh0 = b*H + h, nr rows from r0. */
cudaError_t dcu_launch_attn_add_bias(const dcu_ctx *ctx, float *s, const float *bias, int64_t nb, int64_t nr,
                                     int64_t lk, int64_t bh0, int64_t H, int64_t r0, const int64_t *bs);
/* ATTENTION (attention_lt.c) in either layout of op->layout (backend.h); bias: NULL or
 * its fp32 additive bias (in3), which only the unfused path takes. */
int dcu_attention_run(dcu_ctx *ctx, const drift_op *op, const drift_tensor *q, const drift_tensor *k,
                      const drift_tensor *v, const drift_tensor *bias, drift_tensor *out, drift_err *err);

/* ---- attention_fused.cu --------------------------------------------- */
/* Element strides of the fused kernel's operands: element (b, h, l, d) of
 * q at b*q[0] + h*q[1] + l*q[2] + d, likewise k, v and the output o; the
 * grid's bh index is b*H + h. Layout 0: {H*L*D, L*D, D}; layout 1:
 * {L*H*D, D, H*D}. */
typedef struct dcu_attn_strides {
    int64_t H;
    int64_t q[3], k[3], v[3], o[3];
} dcu_attn_strides;
/* 1 if every q/k/v stride is a multiple of 8 elements (16-byte rows for
 * cp.async; base pointers must be 16-byte aligned as well) and H >= 1. */
int dcu_attn_fused_strides_ok(const dcu_attn_strides *st);
/* 1 if ceil(Lq/128) * BH query tiles fit in one grid. */
int dcu_attn_fused_grid_ok(int64_t BH, int64_t Lq);
/* q, k, v in c (bf16/fp16) at st's strides, 16-byte aligned; out in to.
 * BH = B*H, D in {64, 128}, Lk >= 1; cudaErrorInvalidValue on bad strides. */
cudaError_t dcu_launch_attn_fused(const dcu_ctx *ctx, const void *q, const void *k, const void *v,
                                  const dcu_attn_strides *st, drift_dtype c, int64_t BH, int64_t Lq, int64_t Lk,
                                  int64_t D, float scale, void *out, drift_dtype to);

/* Opts func into smem bytes of dynamic shared memory on `device` (the
 * current device) once: done[] (caller-owned, DCU_MAX_DEVICES zeroed ints,
 * typically a static array beside the kernel) remembers it per device. */
#define DCU_MAX_DEVICES 64
cudaError_t dcu_func_smem_once(const void *func, int smem, int device, int *done);

/* ---- attention_wgmma.cu (sm_90a) ---------------------------------------- */
/* 1 when the wgmma kernel was compiled into this build and `device` can run
 * it (compute capability 9.0). */
int dcu_attn_wgmma_available(int device);
/* Same contract and requirements as dcu_launch_attn_fused (one more: the
 * device must be sm_90, see dcu_attn_wgmma_available). */
cudaError_t dcu_launch_attn_wgmma(const dcu_ctx *ctx, const void *q, const void *k, const void *v,
                                  const dcu_attn_strides *st, drift_dtype c, int64_t BH, int64_t Lq, int64_t Lk,
                                  int64_t D, float scale, void *out, drift_dtype to);

/* ---- metrics.cu ----------------------------------------------------- */
/* Result of one metric pass (local indices 0..n-1). */
typedef struct dcu_metric_res {
    double sum_abs, sum_sq, sum_tr, sum_tt, sum_rr;
    double max_d;        /* max |t - r| over finite pairs, -1 when none */
    int64_t arg;         /* first index attaining max_d, -1 when none */
    float max_r;         /* max |r| over finite pairs (0 when none) */
    float pad_;
    int64_t nan_t, inf_t, nan_r, inf_r, n_diff;
} dcu_metric_res;
/* Runs the fused reduction over n elements and waits for the result. */
int dcu_metrics_run(dcu_ctx *ctx, const void *t, drift_dtype tt, const void *r, drift_dtype tr, int64_t n,
                    dcu_metric_res *res, drift_err *err);

#ifdef __cplusplus
}
#endif

#endif
