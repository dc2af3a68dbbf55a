/* BMM under the torch profile: the cuBLAS call PyTorch 2.11 makes for
 * aten::bmm / baddbmm / mm / matmul on CUDA tensors (facts from torch's
 * aten/src/ATen/native/cuda/Blas.cpp and aten/src/ATen/cuda/CUDABlas.cpp;
 * drift's own code):
 *
 *  - bmm_out_cuda calls baddbmm_out_cuda_impl(result, result, batch1, batch2,
 *    beta 0, alpha 1); baddbmm copies self (broadcast) into the result first
 *    when beta != 0. The arguments (operand order: batch2 first for a
 *    contiguous result, transa/transb from the operands' strides, lda/ldb/ldc,
 *    batch strides, cublasAdjustLdLevel3) are derived in
 *    kernels/torch_blas_args.c (unit-tested on the CPU);
 *  - num_batches == 1 calls at::cuda::blas::gemm, else bgemm; mm (2-D) is
 *    addmm_out_cuda_impl with self = result, beta 0: never the cuBLASLt bias
 *    path (isInputCompliesAddmmCudaLt needs result != self), so gemm too;
 *  - gemm / bgemm take cuBLAS, not cuBLASLt, unless
 *    torch.backends.cuda.preferred_blas_library() is cublaslt (default on
 *    CUDA: cublas; TORCH_BLAS_PREFER_CUBLASLT=1 changes it). For bf16 / fp16:
 *    cublasGemmEx / cublasGemmStridedBatchedEx with A, B, C of the operand
 *    dtype, fp32 alpha and beta, compute type CUDA_R_32F (cuBLAS maps it to
 *    CUBLAS_COMPUTE_32F under the default math mode) and
 *    CUBLAS_GEMM_DEFAULT_TENSOR_OP; bgemm sets no math mode of its own, the
 *    handle's is CUBLAS_DEFAULT_MATH (TF32 off); gemm sets CUBLAS_DEFAULT_MATH
 *    too while allow_bf16_reduced_precision_reduction (and its fp16 twin) keep
 *    their default True. For fp32: cublasSgemm / cublasSgemmStridedBatched
 *    (allow_tf32 False: default math);
 *  - the handle has torch's workspace (32 MiB on sm_90) and the stream.
 *
 * drift hands the operands materialised (contiguous); op->layout says which
 * were transposed views or batch broadcasts in torch (DRIFT_BMM_*, set by the
 * importer): a transposed one is copied back into the transposed memory
 * order torch's view had (raw copy, rounded to the compute dtype on the way),
 * a broadcast one passes its first batch with batch stride 0, so cuBLAS sees
 * the call torch made. Leading dims are those of dense views (a view sliced
 * out of a wider tensor had a larger ld in torch: not known here).
 * Recorded fallbacks (the cpu backend's bodies on the host): a compute dtype
 * other than bf16 / fp16 / fp32, 2-D with an added term (addmm: torch's
 * cuBLASLt bias epilogue, not emulated here), K == 0, a BMM that stands for a
 * convolution (DRIFT_BMM_STAND_IN: cuDNN in torch). */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/torch/torch_profile.h"
#include "kernels/torch_blas_args.h"

static cudaDataType_t cuda_type(drift_dtype dt) {
    return dt == DRIFT_BF16 ? CUDA_R_16BF : dt == DRIFT_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* Runs torch's cuBLAS call c: C = alpha op(A) op(B) + beta C, all of dtype t. */
static int blas_call(dcu_ctx *ctx, const drift_tba_call *c, const void *a, const void *b, void *y, drift_dtype t,
                     float alpha, float beta, const char *where, drift_err *err) {
    struct dct_state *st = ctx->torch;
    const int64_t lim = 2147483647LL;
    if (c->m > lim || c->n > lim || c->k > lim || c->lda > lim || c->ldb > lim || c->ldc > lim || c->batch > lim)
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, where, "cuBLAS dimensions exceed int32");
    const cublasOperation_t oa = c->transa ? CUBLAS_OP_T : CUBLAS_OP_N, ob = c->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int m = (int)c->m, n = (int)c->n, k = (int)c->k, lda = (int)c->lda, ldb = (int)c->ldb, ldc = (int)c->ldc;
    cublasStatus_t s = cublasSetStream(st->cublas, ctx->stream);
    if (!s) s = cublasSetWorkspace(st->cublas, st->cublas_ws, st->cublas_ws_size);
    if (!s) s = cublasSetMathMode(st->cublas, CUBLAS_DEFAULT_MATH);
    const char *fn = "";
    if (!s && t == DRIFT_F32) {
        if (c->batch == 1) {
            fn = "cublasSgemm";
            s = cublasSgemm(st->cublas, oa, ob, m, n, k, &alpha, a, lda, b, ldb, &beta, y, ldc);
        } else {
            fn = "cublasSgemmStridedBatched";
            s = cublasSgemmStridedBatched(st->cublas, oa, ob, m, n, k, &alpha, a, lda, c->stride_a, b, ldb, c->stride_b,
                                          &beta, y, ldc, c->stride_c, (int)c->batch);
        }
    } else if (!s) {
        const cudaDataType_t ct = cuda_type(t);
        if (c->batch == 1) {
            fn = "cublasGemmEx";
            s = cublasGemmEx(st->cublas, oa, ob, m, n, k, &alpha, a, ct, lda, b, ct, ldb, &beta, y, ct, ldc,
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP);
        } else {
            fn = "cublasGemmStridedBatchedEx";
            s = cublasGemmStridedBatchedEx(st->cublas, oa, ob, m, n, k, &alpha, a, ct, lda, c->stride_a, b, ct, ldb,
                                           c->stride_b, &beta, y, ct, ldc, c->stride_c, (int)c->batch,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP);
        }
    }
    if (s != CUBLAS_STATUS_SUCCESS)
        return drift_err_set(err, DRIFT_E_IO, where, "%s (torch profile): %s", *fn ? fn : "cuBLAS setup",
                             cublasGetStatusString(s));
    snprintf(ctx->last_choice, sizeof ctx->last_choice, "%s %c%c m=%d n=%d k=%d batch=%lld", fn, c->transa ? 'T' : 'N',
             c->transb ? 'T' : 'N', m, n, k, (long long)c->batch);
    return DRIFT_OK;
}

/* Operand x (drift's contiguous [batch, R, C] of dtype tx) in the memory order torch's tensor had,
 * in dtype c: *p is x->data itself or a device copy in *tmp (caller frees). transposed: stored as
 * [batch', C, R]; first_only: only batch 0 (torch's stride-0 broadcast). */
static int operand(dcu_ctx *ctx, const drift_tensor *x, int64_t batch, int64_t R, int64_t C, int transposed,
                   int first_only, drift_dtype c, const void **p, void **tmp, const char *where, drift_err *err) {
    *tmp = NULL;
    *p = x->data;
    if (!transposed && x->dtype == c) return DRIFT_OK; /* a broadcast's first batch is the buffer's start */
    const int64_t nb = first_only ? 1 : batch;
    int rc = dcu_check(dcu_malloc(ctx, tmp, (size_t)(nb * R * C > 0 ? nb * R * C : 1) * drift_dtype_size(c)), err,
                       where, "allocating an operand in torch's layout");
    if (rc) return rc;
    dcu_copy cp;
    memset(&cp, 0, sizeof cp);
    cp.nd = 3;
    cp.shape[0] = nb, cp.shape[1] = R, cp.shape[2] = C;
    cp.ss[0] = R * C, cp.ss[1] = C, cp.ss[2] = 1;
    cp.ds[0] = R * C;
    cp.ds[1] = transposed ? 1 : C;
    cp.ds[2] = transposed ? R : 1;
    cp.src = x->data;
    cp.ts = x->dtype;
    cp.dst = *tmp;
    cp.td = c;
    dcu_copy_simplify(&cp);
    rc = dcu_check(dcu_launch_copy(ctx, &cp), err, where, "copying an operand into torch's layout");
    *p = *tmp;
    return rc;
}

/* y (contiguous, out's shape, dtype c) = the added term t broadcast to out's shape, rounded to c:
 * baddbmm's result.copy_(self) before the GEMM with beta. */
static int added_term(dcu_ctx *ctx, const drift_tensor *t, const drift_tensor *out, void *y, drift_dtype c,
                      const char *where, drift_err *err) {
    dcu_copy cp;
    memset(&cp, 0, sizeof cp);
    cp.nd = out->ndim;
    int64_t st = 1, dst = 1;
    for (int d = out->ndim - 1; d >= 0; d--) {
        const int td = d - (out->ndim - t->ndim);
        cp.shape[d] = out->shape[d];
        cp.ss[d] = td >= 0 && t->shape[td] != 1 ? st : 0;
        if (td >= 0) st *= t->shape[td];
        cp.ds[d] = dst;
        dst *= out->shape[d];
    }
    cp.src = t->data;
    cp.ts = t->dtype;
    cp.dst = y;
    cp.td = c;
    dcu_copy_simplify(&cp);
    return dcu_check(dcu_launch_copy(ctx, &cp), err, where, "copying the added term into the result");
}

int dct_run_bmm(dcu_ctx *ctx, const drift_op *op, const drift_tensor *const *in, drift_tensor *out, const char *where,
                int *handled, drift_err *err) {
    const drift_tensor *A = in[0], *B = in[1], *T = op->n_in > 2 ? in[2] : NULL;
    const drift_dtype c = op->compute;
    const int nd = A->ndim;
    *handled = 0;
    if (op->layout & DRIFT_BMM_STAND_IN) {
        dct_torch_note_fallback(ctx, op->kind, "bmm standing for a convolution (torch runs cuDNN's)");
        return DRIFT_OK;
    }
    if (c != DRIFT_BF16 && c != DRIFT_F16 && c != DRIFT_F32) {
        dct_torch_note_fallback(ctx, op->kind, "bmm: torch's cuBLAS call is reproduced for bf16, fp16 and fp32 only");
        return DRIFT_OK;
    }
    const int64_t M = A->shape[nd - 2], K = A->shape[nd - 1], N = B->shape[nd - 1];
    const int64_t batch = M * N > 0 ? out->numel / (M * N) : 0;
    const int use_t = T && op->beta != 0.0f; /* beta 0: torch neither copies nor reads self */
    if (K == 0 || (nd == 2 && use_t)) {
        dct_torch_note_fallback(ctx, op->kind, K == 0 ? "bmm: an empty reduction (torch scales self, no cuBLAS call)"
                                                      : "addmm with an added term: torch's cuBLASLt bias path is not "
                                                        "emulated for BMM");
        return DRIFT_OK;
    }
    const int lay = op->layout;
    const int at = (lay & DRIFT_BMM_A_T) != 0, bt = (lay & DRIFT_BMM_B_T) != 0;
    const int ab = nd > 2 && (lay & DRIFT_BMM_A_BCAST), bb = nd > 2 && (lay & DRIFT_BMM_B_BCAST);
    drift_tba_operand da, db;
    drift_tba_dense(M, K, at, ab, &da);
    drift_tba_dense(K, N, bt, bb, &db);
    drift_tba_call call;
    if ((nd == 2 ? drift_tba_mm(&da, &db, &call) : drift_tba_bmm(&da, &db, batch, &call)) != 0)
        return drift_err_set(err, DRIFT_E_INPUT, where, "bmm: operands [%lld, %lld] and [%lld, %lld] do not chain",
                             (long long)M, (long long)K, (long long)B->shape[nd - 2], (long long)N);
    /* torch's copy of an operand it cannot hand cuBLAS as it is: the contiguous one drift has */
    const int copied_a = call.which_a ? call.copy_b : call.copy_a, copied_b = call.which_a ? call.copy_a : call.copy_b;
    *handled = 1;
    const void *pa = NULL, *pb = NULL;
    void *ta = NULL, *tb = NULL, *ty = NULL, *yp = out->data;
    int rc = operand(ctx, A, batch, M, K, at && !copied_a, ab && !copied_a, c, &pa, &ta, where, err);
    if (!rc) rc = operand(ctx, B, batch, K, N, bt && !copied_b, bb && !copied_b, c, &pb, &tb, where, err);
    if (!rc && out->dtype != c) { /* torch's result is in c; a later cast rounds it */
        rc = dcu_check(dcu_malloc(ctx, &ty, (size_t)out->numel * drift_dtype_size(c)), err, where,
                       "allocating the GEMM result");
        yp = ty;
    }
    if (!rc && use_t) rc = added_term(ctx, T, out, yp, c, where, err);
    if (!rc)
        rc = blas_call(ctx, &call, call.which_a ? pb : pa, call.which_a ? pa : pb, yp, c, op->alpha,
                       use_t ? op->beta : 0.0f, where, err);
    if (!rc && ty)
        rc = dcu_check(dcu_launch_unary(ctx, DCU_UN_CAST, ty, c, out->data, out->dtype, out->numel, 0.0f, 0.0f), err,
                       where, "casting the GEMM result");
    if (rc)
        drift_err_prefix(err, "%s [torch profile, batch=%lld M=%lld N=%lld K=%lld layout=%d]", where, (long long)batch,
                         (long long)M, (long long)N, (long long)K, lay);
    dcu_free(ctx, ta);
    dcu_free(ctx, tb);
    dcu_free(ctx, ty);
    return rc;
}
