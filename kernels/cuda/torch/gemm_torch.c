/* LINEAR under the torch profile: the cuBLAS / cuBLASLt calls PyTorch 2.11
 * makes for aten::linear on contiguous CUDA tensors (facts from torch's
 * aten/src/ATen/native/cuda/Blas.cpp and aten/src/ATen/cuda/CUDABlas.cpp;
 * drift's own code):
 *
 *  - linear(x, W, b) with b flattens x to [M, K] and calls addmm(b, x, W^T);
 *    linear(x, W) calls mm. In column-major terms both are
 *    gemm(transa = T, transb = N, m = N, n = M, k = K, A = W (lda K),
 *    B = x (ldb K), C = y (ldc N)).
 *  - addmm takes cuBLASLt with the bias in the epilogue (gemm_and_bias) when
 *    the bias is 1-D and contiguous and every matrix dimension is > 1 and
 *    < 65535*32 (M = 1 included: torch 2.11 measured): compute type 32F, scale type 32F,
 *    CUBLASLT_EPILOGUE_BIAS, A/B/C types = the operand dtype, beta 0, the
 *    preference's MAX_WORKSPACE_BYTES = torch's cuBLASLt workspace size and
 *    MIN_ALIGNMENT_{A,B,C}_BYTES of the three pointers (the largest power of
 *    two up to 256 dividing the address), and MIN_ALIGNMENT_D_BYTES of the
 *    *bias* pointer (as torch does); the first heuristic result is run. If
 *    cuBLASLt returns no algorithm torch falls back to the cuBLAS path.
 *  - otherwise (mm without bias, or a forced torch_gemm=cublas) the cuBLAS path: the bias (if any)
 *    is first copied into every row of y and cublasGemmEx runs with beta = 1
 *    (else 0), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP, math mode
 *    CUBLAS_DEFAULT_MATH (allow_bf16_reduced_precision_reduction defaults to
 *    True), on a handle with torch's workspace (32 MiB on sm_90,
 *    4096*2 + 16*8 KiB elsewhere, CUBLAS_WORKSPACE_CONFIG overrides: the recording's, from
 *    /libraries). A LINEAR that is a convolution's GEMM (DRIFT_LINEAR_CONV: torch runs cuDNN)
 *    keeps the default workspace whatever the recording set. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/torch/torch_profile.h"

static cudaDataType_t cuda_type(drift_dtype dt) {
    return dt == DRIFT_BF16 ? CUDA_R_16BF : dt == DRIFT_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* torch's _getAlignment: the largest power of two <= 256 dividing p. */
static uint32_t ptr_alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a % al) != 0) al /= 2;
    return al;
}

/* The heuristic's choice, for drift_backend_last_choice (drift invariance). */
static void describe_algo(dcu_ctx *ctx, const cublasLtMatmulAlgo_t *algo) {
    int32_t id = -1;
    uint32_t tile = 0, splitk = 0, red = 0, stages = 0;
    size_t n = 0;
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &n);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &n);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &n);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof red, &n);
    cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &n);
    snprintf(ctx->last_choice, sizeof ctx->last_choice, "cuBLASLt algo %d tile %u splitK %u reduction %u stages %u", (int)id,
             (unsigned)tile, (unsigned)splitk, (unsigned)red, (unsigned)stages);
}

static int lt_fail(cublasStatus_t s, const char *where, const char *what, drift_err *err) {
    return drift_err_set(err, DRIFT_E_IO, where, "%s: %s", what, cublasLtGetStatusString(s));
}

/* torch's gemm_and_bias. Returns DRIFT_OK, or DRIFT_E_UNSUPPORTED with
 * nothing queued when the heuristic has no algorithm (the caller then takes
 * the cuBLAS path, as torch does). */
static int gemm_and_bias(dcu_ctx *ctx, const void *x, const void *w, const void *bias, void *y, drift_dtype c,
                         int64_t M, int64_t N, int64_t K, const char *where, drift_err *err) {
    struct dct_state *st = ctx->torch;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cudaDataType_t t = cuda_type(c);
    int rc = DRIFT_OK;
    cublasStatus_t s = cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (s != CUBLAS_STATUS_SUCCESS) return lt_fail(s, where, "cublasLtMatmulDescCreate", err);
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    if (!s) s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (!s && bias) {
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep);
        if (!s) s = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    }
    /* A = W^T: stored k x m (transposed layout rows = k, cols = m), ld K */
    if (!s) s = cublasLtMatrixLayoutCreate(&la, t, (uint64_t)K, (uint64_t)N, K);
    if (!s) s = cublasLtMatrixLayoutCreate(&lb, t, (uint64_t)K, (uint64_t)M, K);
    if (!s) s = cublasLtMatrixLayoutCreate(&lc, t, (uint64_t)N, (uint64_t)M, N);
    if (!s) s = cublasLtMatmulPreferenceCreate(&pref);
    if (!s) {
        size_t ws = st->lt_ws_size;
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    }
    if (!s) {
        uint32_t aa = ptr_alignment(w), ab = ptr_alignment(x), ac = ptr_alignment(y), ad = ptr_alignment(bias);
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa);
        if (!s) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab);
        if (!s) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac, sizeof ac);
        /* torch passes the bias pointer's alignment as D's (a NULL bias: 256) */
        if (!s) s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof ad);
    }
    if (s) {
        rc = lt_fail(s, where, "building the cuBLASLt descriptors", err);
    } else {
        cublasLtMatmulHeuristicResult_t hr;
        memset(&hr, 0, sizeof hr);
        int nres = 0;
        s = cublasLtMatmulAlgoGetHeuristic(ctx->lt, desc, la, lb, lc, lc, pref, 1, &hr, &nres);
        if (s != CUBLAS_STATUS_SUCCESS || nres == 0) {
            rc = DRIFT_E_UNSUPPORTED;
        } else {
            const float alpha = 1.0f, beta = 0.0f;
            describe_algo(ctx, &hr.algo);
            s = cublasLtMatmul(ctx->lt, desc, &alpha, w, la, x, lb, &beta, y, lc, y, lc, &hr.algo, st->lt_ws,
                               st->lt_ws_size, ctx->stream);
            if (s) rc = lt_fail(s, where, "cublasLtMatmul (torch profile)", err);
        }
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    return rc;
}

/* torch's cuBLAS path (gemm_internal_cublas), with addmm's bias copy first. */
/* y's M rows = bias (N elements of es bytes): one row, then doubling copies
 * (cudaMemcpy2D refuses a source pitch of 0). */
static cudaError_t bias_rows(dcu_ctx *ctx, void *y, const void *bias, int64_t M, int64_t N, size_t es) {
    const size_t row = (size_t)N * es;
    cudaError_t e = cudaMemcpyAsync(y, bias, row, cudaMemcpyDeviceToDevice, ctx->stream);
    for (int64_t have = 1; e == cudaSuccess && have < M; have *= 2) {
        int64_t n = have < M - have ? have : M - have;
        e = cudaMemcpyAsync((char *)y + (size_t)have * row, y, (size_t)n * row, cudaMemcpyDeviceToDevice, ctx->stream);
    }
    return e;
}

static int gemm_cublas(dcu_ctx *ctx, const void *x, const void *w, const void *bias, void *y, drift_dtype c,
                       int64_t M, int64_t N, int64_t K, size_t ws, const char *where, drift_err *err) {
    struct dct_state *st = ctx->torch;
    size_t es = drift_dtype_size(c);
    if (bias) {
        /* result.copy_(bias.expand(M, N)): raw rows, same dtype */
        cudaError_t e = bias_rows(ctx, y, bias, M, N, es);
        if (e != cudaSuccess) return dcu_check(e, err, where, "copying the bias into the output");
    }
    /* _cublasAdjustLdLevel3 for (t, n, m = N, n = M, k = K) */
    int64_t lda = K, ldb = K, ldc = N;
    if (M <= 1) ldc = N > 1 ? N : 1;
    if (N <= 1) lda = K > 1 ? K : 1;
    if (M <= 1) ldb = K > 1 ? K : 1;
    if (N > INT32_MAX || M > INT32_MAX || K > INT32_MAX)
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, where, "cuBLAS dimensions exceed int32");
    const float alpha = 1.0f, beta = bias ? 1.0f : 0.0f;
    cudaDataType_t t = cuda_type(c);
    cublasStatus_t s = cublasSetStream(st->cublas, ctx->stream);
    if (!s) s = cublasSetWorkspace(st->cublas, st->cublas_ws, ws);
    if (!s) s = cublasSetMathMode(st->cublas, CUBLAS_DEFAULT_MATH);
    if (!s) {
        /* torch passes CUDA_R_32F, which cuBLAS maps to COMPUTE_32F under the default math mode */
        s = cublasGemmEx(st->cublas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &alpha, w, t, (int)lda, x, t,
                         (int)ldb, &beta, y, t, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP);
    }
    if (s != CUBLAS_STATUS_SUCCESS)
        return drift_err_set(err, DRIFT_E_IO, where, "cublasGemmEx (torch profile): %s", cublasGetStatusString(s));
    snprintf(ctx->last_choice, sizeof ctx->last_choice, "cublasGemmEx default tensor-op algo%s", bias ? ", bias copied" : "");
    return DRIFT_OK;
}

int dct_gemm_linear(dcu_ctx *ctx, const void *x, const void *w, const void *bias, void *y, drift_dtype c,
                    int64_t M, int64_t N, int64_t K, int conv, const char *where, drift_err *err) {
    struct dct_state *st = ctx->torch;
    if (M == 0 || N == 0) return DRIFT_OK;
    const int64_t lim = 65535LL * 32;
    /* torch 2.11 runs a bias linear through cuBLASLt's bias epilogue at M = 1 too (measured on the
       H200: nvjet_*_bias_* for M = 1, 2, 4, 8; torch_parity.py's temb cases) */
    int lt_ok = N > 1 && K > 1 && M < lim && N < lim && K < lim;
    int use_lt = st->gemm_mode == DCT_GEMM_LT || (st->gemm_mode == DCT_GEMM_AUTO && bias && lt_ok);
    if (st->gemm_mode == DCT_GEMM_CUBLAS) use_lt = 0;
    if (use_lt && K > 0) {
        int rc = gemm_and_bias(ctx, x, w, bias, y, c, M, N, K, where, err);
        if (rc != DRIFT_E_UNSUPPORTED) return rc;
    }
    if (K == 0) { /* empty reduction: y = bias (rows) or 0 */
        size_t es = drift_dtype_size(c);
        cudaError_t e = bias ? bias_rows(ctx, y, bias, M, N, es)
                             : cudaMemsetAsync(y, 0, (size_t)(M * N) * es, ctx->stream);
        return dcu_check(e, err, where, "writing an empty-reduction result");
    }
    return gemm_cublas(ctx, x, w, bias, y, c, M, N, K, conv ? st->cublas_ws_conv : st->cublas_ws_size, where, err);
}
