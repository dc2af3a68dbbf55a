/* Internal to kernels/cuda: the launchers of the fp64 oracle on the GPU
 * (ref_cuda_kernels.cu, ref_cuda_gemm.cu) for its host side (ref_cuda.c).
 * Every launcher reproduces kernels/ref/ref_backend.c's operations in its
 * order (the same sums in the same order, no FMA contraction: both .cu files
 * are compiled with --fmad=false), so the results are bit for bit the CPU
 * oracle's. Compiles as C11 and
 * as CUDA C++. Every pointer is device memory of doubles, validated by the
 * caller; launchers queue on `stream` and return the launch status. */
#ifndef DRIFT_KERNELS_CUDA_REF_CUDA_INTERNAL_H
#define DRIFT_KERNELS_CUDA_REF_CUDA_INTERNAL_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "formats/params.h" /* DRIFT_MAX_DIMS */
#include "kernels/aten_math64.h" /* DRIFT_ORACLE_METRIC_CHUNK */
#include "kernels/backend.h" /* the drift_unary_kind / drift_scalar_kind numbers */

enum { RCU_UN_COPY = 0, RCU_UN_AFFINE, RCU_UN_SILU, RCU_UN_GELU_TANH };
enum { RCU_BIN_ADD = 0, RCU_BIN_SUB, RCU_BIN_MUL, RCU_BIN_DIV };
enum { RCU_LAYER_NORM = 0, RCU_RMS_NORM = 1 };
/* rcu_gemm epilogues: + vec[n] (vec may be NULL), * scale, / vec[m] */
enum { RCU_EPI_BIAS = 0, RCU_EPI_SCALE, RCU_EPI_DIV_ROW };

/* A strided index space: element c (row-major over shape) reads
 * src[soff + sum c_i ss_i] and writes dst[doff + sum c_i ds_i]. */
typedef struct rcu_copy {
    int nd;
    int64_t shape[DRIFT_MAX_DIMS], ss[DRIFT_MAX_DIMS], ds[DRIFT_MAX_DIMS];
    int64_t soff, doff, n;
} rcu_copy;

/* Per-chunk metric partials (DRIFT_ORACLE_METRIC_CHUNK elements each;
 * combined on the host in chunk order). */
typedef struct rcu_metric_part {
    double sum_abs, sum_sq, sum_tr, sum_tt, sum_rr, max_d, max_ref;
    long long arg, nan_t, inf_t, nan_r, inf_r, n_diff;
} rcu_metric_part;

cudaError_t rcu_unary(cudaStream_t s, int op, const double *x, double *y, int64_t n, double alpha, double beta);
/* y[e] = a[off_a(e)] op b[off_b(e)]: the broadcast plan's (collapsed) shape
 * and strides of a and b (kernels/backend_impl.h drift_bcast; 0 where
 * broadcast), n elements. */
cudaError_t rcu_binary(cudaStream_t s, int op, const double *a, const double *b, double *y, int nd,
                       const int64_t *shape, const int64_t *sa, const int64_t *sb, int64_t n);
/* DRIFT_OP_UNARY (scalar_op 0, sub a drift_unary_kind) or DRIFT_OP_SCALAR
 * (scalar_op 1, sub a drift_scalar_kind, scalar s) in fp64, as
 * kernels/ref/ref_aten_ops.c. */
cudaError_t rcu_aten_ew(cudaStream_t s, int scalar_op, int sub, const double *x, double *y, int64_t n, double scalar);
/* y[o, k] = sum over i < n of x[o, i, k] (in index order), / n when mean. */
cudaError_t rcu_reduce(cudaStream_t s, const double *x, double *y, int64_t outer, int64_t n, int64_t inner, int mean);
/* DRIFT_OP_FILL: sub 0 value, 1 value + i * step, 2 linspace from value to step. */
cudaError_t rcu_fill(cudaStream_t s, double *y, int64_t n, int sub, double value, double step);
/* A batch of count GEMMs: GEMM z = (z0, z1) = (z / inner, z % inner) offsets
 * a, b, c and vec by z0 * x[0] + z1 * x[1] elements (x = a, b, c, v). */
typedef struct rcu_batch {
    int64_t count, inner;
    int64_t a[2], b[2], c[2], v[2];
} rcu_batch;

/* C[m*ldc + n] = epi(sum over k < K, in k order, of A[m*lda + k] * B(k, n)),
 * B(k, n) = b[n*ldb + k] when b_nk, else b[k*ldb + n]; m < M, n < N; batch
 * NULL: one GEMM, else at most 65535. */
cudaError_t rcu_gemm(cudaStream_t s, int b_nk, const double *a, int64_t lda, const double *b, int64_t ldb,
                     double *c, int64_t ldc, int64_t M, int64_t N, int64_t K, int epi, const double *vec,
                     double scale, const rcu_batch *batch);
/* LAYER_NORM / RMS_NORM over rows of D; scratch: 2 * rows doubles (device). */
cudaError_t rcu_norm(cudaStream_t s, int kind, const double *x, const double *w, const double *b, double *y,
                     int64_t rows, int64_t D, double eps, double *scratch);
cudaError_t rcu_rope(cudaStream_t s, const double *x, const double *cs, const double *sn, double *y, int64_t B,
                     int64_t L, int64_t H, int64_t Dh);
/* Rows of s (rows x cols, contiguous): m = max, s = exp(s - m) in place,
 * l[row] = their sum in column order. */
cudaError_t rcu_softmax_rows(cudaStream_t s, double *sc, int64_t rows, int64_t cols, double *l);
cudaError_t rcu_copy_run(cudaStream_t s, const double *src, double *dst, const rcu_copy *c);
cudaError_t rcu_patch(cudaStream_t s, int unpatchify, int channels_last, const double *x, double *y, int64_t B,
                      int64_t C, int64_t F, int64_t H, int64_t W, int64_t pf, int64_t ph, int64_t pw);
cudaError_t rcu_timestep(cudaStream_t s, const double *t, double *y, int64_t B, int64_t dim, double max_period,
                         int flip);
/* y = (float)x / (double)x, n elements (transfers as fp32 halve the bytes). */
cudaError_t rcu_to_f32(cudaStream_t s, const double *x, float *y, int64_t n);
cudaError_t rcu_from_f32(cudaStream_t s, const float *x, double *y, int64_t n);
/* The partials of t vs r (n elements) per chunk into part (device,
 * ceil(n / DRIFT_ORACLE_METRIC_CHUNK) entries). */
cudaError_t rcu_metrics(cudaStream_t s, const double *t, const double *r, int64_t n, rcu_metric_part *part);

/* Where drift_rcu_run_op runs: the device (already selected), the stream
 * every launch and scratch allocation is queued on, the attention score
 * budget in bytes, and a name for messages (borrowed). */
typedef struct rcu_exec {
    int device;
    cudaStream_t stream;
    size_t attn_budget;
    const char *name;
} rcu_exec;

/* The fp64 oracle's op bodies (ref_cuda.c): every tensor's data is device
 * doubles, whatever its logical dtype; arguments validated by the door.
 * The ref-cuda backend's run, and the cuda backend's fp64 path
 * (f64_cuda.c) on its own stream. */
int drift_rcu_run_op(const rcu_exec *x, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                     drift_err *err);

/* ref_cuda_host.c: ops with no device body yet run on the host through the
 * ref backend (the same bits as --device ref). 1 if op is one of them. */
int drift_rcu_op_needs_host(const drift_op *op, const drift_tensor *const *in);
/* Runs such an op: device doubles copied down, the ref body, the result copied
 * into out (synchronous on x->stream). in and out borrowed. */
int drift_rcu_run_on_host(const rcu_exec *x, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                          drift_err *err);

#ifdef __cplusplus
}
#endif

#endif
