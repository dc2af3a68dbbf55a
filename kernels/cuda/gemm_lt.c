/* GEMMs through cuBLASLt, with the numeric contract of kernels/backend.h:
 *  - compute type CUBLAS_COMPUTE_32F with fp32 scale type for every operand
 *    type (bf16, fp16, fp32): fp32 accumulation, no TF32 (a TF32 opt-in
 *    would be a new op attribute);
 *  - A, B and D types explicit; D rounded once from the fp32 accumulator
 *    (+ bias), so split-K algorithms are restricted to
 *    CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE (fp32 partials): INPLACE and
 *    OUTPUT_TYPE reduce in the output dtype and would round twice; with a
 *    fused bias split-K is not allowed at all (CUBLASLT_REDUCTION_SCHEME_NONE):
 *    measured on an H200 with CUDA 13.0, the split-K reduction kernel rounds
 *    the fp32 sum to the output type and then adds the bias (two roundings),
 *    while the non-split kernels add it in fp32;
 *  - a fused bias uses CUBLASLT_EPILOGUE_BIAS, whose bias vector must have
 *    the output dtype (cuBLASLt: "bias vector elements are the same type as
 *    the elements of output matrix" for non-fp8 kernels). A bias of another
 *    dtype (e.g. fp32 bias, bf16 output) takes the unfused path: cuBLASLt
 *    into an fp32 scratch, then one kernel adds the bias in fp32 and rounds
 *    once: the same values as a fused epilogue;
 *  - when cuBLASLt has no algorithm for a case (odd alignment, type mix),
 *    the unfused path, then the naive CUDA-core kernel (gemm_naive.cu) run
 *    instead; errors other than "not supported" are reported.
 * Descriptors, layouts and the chosen algorithm are cached per shape/type/
 * alignment key (DCU_GEMM_CACHE entries, round-robin replacement), so a
 * repeated shape costs one cublasLtMatmul call. Workspace: 32 MiB. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "formats/alloc.h"

#define DCU_GEMM_CACHE 128

typedef struct gemm_key {
    int32_t transa, transb;
    int64_t m, n, k, lda, ldb, ldd, stride_a, stride_b, stride_d, batch;
    int32_t ta, td, has_bias, tbias;
    uint32_t align_a, align_b, align_d;
} gemm_key;

typedef struct gemm_entry {
    int used;
    int supported; /* 0: cuBLASLt said no (remembered, so the fallback is immediate) */
    gemm_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} gemm_entry;

struct dcu_gemm_cache {
    gemm_entry e[DCU_GEMM_CACHE];
    int next;
};

static cudaDataType_t cuda_type(drift_dtype dt) {
    switch (dt) {
    case DRIFT_BF16: return CUDA_R_16BF;
    case DRIFT_F16: return CUDA_R_16F;
    default: return CUDA_R_32F;
    }
}

static uint32_t align_of(const void *p, int64_t stride_bytes, int64_t batch) {
    uint64_t v = (uint64_t)(uintptr_t)p;
    if (batch > 1) v |= (uint64_t)stride_bytes;
    uint32_t a = 256;
    while (a > 1 && (v & (a - 1))) a >>= 1;
    return a;
}

static void entry_free(gemm_entry *e) {
    if (!e->used) return;
    if (e->op) cublasLtMatmulDescDestroy(e->op);
    if (e->la) cublasLtMatrixLayoutDestroy(e->la);
    if (e->lb) cublasLtMatrixLayoutDestroy(e->lb);
    if (e->ld) cublasLtMatrixLayoutDestroy(e->ld);
    memset(e, 0, sizeof *e);
}

int dcu_gemm_cache_create(dcu_ctx *ctx, drift_err *err) {
    ctx->gemm_cache = drift_calloc(1, sizeof *ctx->gemm_cache);
    if (!ctx->gemm_cache) return drift_err_set(err, DRIFT_E_NOMEM, "cuda", "out of memory (GEMM cache)");
    return DRIFT_OK;
}

void dcu_gemm_cache_destroy(dcu_ctx *ctx) {
    if (!ctx || !ctx->gemm_cache) return;
    for (int i = 0; i < DCU_GEMM_CACHE; i++) entry_free(&ctx->gemm_cache->e[i]);
    free(ctx->gemm_cache);
    ctx->gemm_cache = NULL;
}

static int lt_status_err(cublasStatus_t s, drift_err *err, const char *what) {
    return drift_err_set(err, s == CUBLAS_STATUS_ALLOC_FAILED ? DRIFT_E_NOMEM : DRIFT_E_IO, "cuda gemm",
                         "cuBLASLt %s failed: %s (%d)", what, cublasLtGetStatusString(s), (int)s);
}

/* "Not supported" answers that send us to a fallback path rather than fail. */
static int lt_unsupported(cublasStatus_t s) {
    return s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE;
}

#define LT_TRY(call)                                                                                                    \
    do {                                                                                                               \
        cublasStatus_t st_ = (call);                                                                                   \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                                            \
            if (lt_unsupported(st_)) {                                                                                 \
                e->supported = 0;                                                                                      \
                return 1;                                                                                              \
            }                                                                                                          \
            entry_free(e);                                                                                             \
            return -lt_status_err(st_, err, #call);                                                                    \
        }                                                                                                              \
    } while (0)

/* Builds descriptors and picks an algorithm into e. 0 ok, 1 unsupported,
 * negative: -(drift status) with err set. */
static int entry_build(dcu_ctx *ctx, gemm_entry *e, const dcu_gemm *g, drift_err *err) {
    const gemm_key *k = &e->key;
    cudaDataType_t tab = cuda_type(g->ta), tdd = cuda_type(g->td);
    LT_TRY(cublasLtMatmulDescCreate(&e->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t opa = g->transa ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    if (g->bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        int32_t bt = (int32_t)tdd;
        LT_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        LT_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
        LT_TRY(cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias));
    }
    uint64_t ar = (uint64_t)(g->transa ? g->k : g->m), ac = (uint64_t)(g->transa ? g->m : g->k);
    uint64_t br = (uint64_t)(g->transb ? g->n : g->k), bc = (uint64_t)(g->transb ? g->k : g->n);
    LT_TRY(cublasLtMatrixLayoutCreate(&e->la, tab, ar, ac, g->lda));
    LT_TRY(cublasLtMatrixLayoutCreate(&e->lb, tab, br, bc, g->ldb));
    LT_TRY(cublasLtMatrixLayoutCreate(&e->ld, tdd, (uint64_t)g->m, (uint64_t)g->n, g->ldd));
    if (g->batch > 1) {
        int32_t bcount = (int32_t)g->batch;
        LT_TRY(cublasLtMatrixLayoutSetAttribute(e->la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bcount, sizeof bcount));
        LT_TRY(cublasLtMatrixLayoutSetAttribute(e->lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bcount, sizeof bcount));
        LT_TRY(cublasLtMatrixLayoutSetAttribute(e->ld, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bcount, sizeof bcount));
        LT_TRY(cublasLtMatrixLayoutSetAttribute(e->la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &g->stride_a,
                                                sizeof g->stride_a));
        LT_TRY(cublasLtMatrixLayoutSetAttribute(e->lb, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &g->stride_b,
                                                sizeof g->stride_b));
        LT_TRY(cublasLtMatrixLayoutSetAttribute(e->ld, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &g->stride_d,
                                                sizeof g->stride_d));
    }
    cublasLtMatmulPreference_t pref = NULL;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = (uint64_t)ctx->lt_ws_size;
    /* split-K only with fp32 partials (NONE is always allowed); with a fused
       bias no split-K at all: cuBLASLt's split-K reduction adds the bias after
       rounding the sum to the output type (measured: H200, CUDA 13.0, algo 24
       with SPLITK_NUM 2..16: ~30% of outputs double-rounded) */
    uint32_t red = g->bias ? (uint32_t)CUBLASLT_REDUCTION_SCHEME_NONE : (uint32_t)CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    uint32_t aa = k->align_a, ab = k->align_b, ad = k->align_d;
    cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa, sizeof aa);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab, sizeof ab);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad, sizeof ad);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad, sizeof ad);
    cublasLtMatmulHeuristicResult_t hr;
    int returned = 0;
    memset(&hr, 0, sizeof hr);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(ctx->lt, e->op, e->la, e->lb, e->ld, e->ld, pref, 1, &hr, &returned);
    cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS || returned < 1 || hr.state != CUBLAS_STATUS_SUCCESS) {
        if (s == CUBLAS_STATUS_SUCCESS || lt_unsupported(s)) {
            e->supported = 0;
            return 1;
        }
        entry_free(e);
        return -lt_status_err(s, err, "cublasLtMatmulAlgoGetHeuristic");
    }
    e->algo = hr.algo;
    e->supported = 1;
    return 0;
}

/* One cuBLASLt matmul. 0 ok, 1 unsupported (nothing queued), negative:
 * -(drift status) with err set. */
static int lt_matmul(dcu_ctx *ctx, const dcu_gemm *g, drift_err *err) {
    gemm_key key;
    memset(&key, 0, sizeof key);
    size_t ea = drift_dtype_size(g->ta), ed = drift_dtype_size(g->td);
    key.transa = g->transa;
    key.transb = g->transb;
    key.m = g->m;
    key.n = g->n;
    key.k = g->k;
    key.lda = g->lda;
    key.ldb = g->ldb;
    key.ldd = g->ldd;
    key.batch = g->batch;
    key.stride_a = g->batch > 1 ? g->stride_a : 0;
    key.stride_b = g->batch > 1 ? g->stride_b : 0;
    key.stride_d = g->batch > 1 ? g->stride_d : 0;
    key.ta = (int32_t)g->ta;
    key.td = (int32_t)g->td;
    key.has_bias = g->bias != NULL;
    key.tbias = g->bias ? (int32_t)g->tbias : 0;
    key.align_a = align_of(g->a, g->stride_a * (int64_t)ea, g->batch);
    key.align_b = align_of(g->b, g->stride_b * (int64_t)ea, g->batch);
    key.align_d = align_of(g->d, g->stride_d * (int64_t)ed, g->batch);
    if (g->batch > INT32_MAX) return 1;

    dcu_gemm_cache *c = ctx->gemm_cache;
    gemm_entry *e = NULL;
    for (int i = 0; i < DCU_GEMM_CACHE; i++) {
        if (c->e[i].used && memcmp(&c->e[i].key, &key, sizeof key) == 0) {
            e = &c->e[i];
            break;
        }
    }
    if (!e) {
        e = &c->e[c->next];
        c->next = (c->next + 1) % DCU_GEMM_CACHE;
        entry_free(e);
        e->used = 1;
        e->key = key;
        int rc = entry_build(ctx, e, g, err);
        if (rc < 0) return rc; /* entry freed */
    }
    if (!e->supported) return 1;
    if (g->bias) {
        cublasStatus_t s =
            cublasLtMatmulDescSetAttribute(e->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias);
        if (s != CUBLAS_STATUS_SUCCESS) return -lt_status_err(s, err, "setting the bias pointer");
    }
    float alpha = g->alpha, beta = 0.0f;
    cublasStatus_t s = cublasLtMatmul(ctx->lt, e->op, &alpha, g->a, e->la, g->b, e->lb, &beta, g->d, e->ld, g->d, e->ld,
                                      &e->algo, ctx->lt_ws, ctx->lt_ws_size, ctx->stream);
    if (s != CUBLAS_STATUS_SUCCESS) {
        if (lt_unsupported(s)) {
            e->supported = 0;
            return 1;
        }
        return -lt_status_err(s, err, "cublasLtMatmul");
    }
    return 0;
}

static int naive(dcu_ctx *ctx, const dcu_gemm *g, drift_err *err) {
    return dcu_check(dcu_launch_gemm_naive(ctx, g), err, "cuda gemm", "naive GEMM kernel");
}

/* fp32 cuBLASLt output into scratch, then bias + one rounding. 0 ok, 1 not
 * supported by cuBLASLt, negative on errors. */
static int unfused(dcu_ctx *ctx, const dcu_gemm *g, drift_err *err) {
    size_t bytes = (size_t)g->m * (size_t)g->n * (size_t)g->batch * sizeof(float);
    float *tmp = NULL;
    cudaError_t ce = dcu_malloc(ctx, (void **)&tmp, bytes);
    if (ce != cudaSuccess) return -dcu_check(ce, err, "cuda gemm", "allocating the fp32 GEMM scratch");
    dcu_gemm g2 = *g;
    g2.d = tmp;
    g2.td = DRIFT_F32;
    g2.ldd = g->m;
    g2.stride_d = g->m * g->n;
    g2.bias = NULL;
    int rc = lt_matmul(ctx, &g2, err);
    if (rc == 0) {
        ce = dcu_launch_bias_round(ctx, tmp, g->m, g->n, g->batch, g->bias, g->tbias, g->d, g->td, g->ldd,
                                   g->stride_d);
        if (ce != cudaSuccess) rc = -dcu_check(ce, err, "cuda gemm", "bias/rounding epilogue");
    }
    dcu_free(ctx, tmp);
    return rc;
}

int dcu_gemm_run(dcu_ctx *ctx, const dcu_gemm *g, drift_err *err) {
    if (g->m <= 0 || g->n <= 0 || g->batch <= 0) return DRIFT_OK;
    if (g->ta != g->tb)
        return drift_err_set(err, DRIFT_E_INTERNAL, "cuda gemm", "operand dtypes differ (%s vs %s)",
                             drift_dtype_name(g->ta), drift_dtype_name(g->tb));
    /* k == 0 (empty sum) and forced naive: the CUDA-core kernel */
    if (g->k <= 0 || ctx->gemm_mode == DCU_GEMM_NAIVE) return naive(ctx, g, err);
    int rc;
    int bias_aligned = !g->bias || ((uintptr_t)g->bias & 15u) == 0;
    if (ctx->gemm_mode == DCU_GEMM_AUTO && (!g->bias || (g->tbias == g->td && bias_aligned))) {
        rc = lt_matmul(ctx, g, err);
        if (rc <= 0) return -rc;
    }
    /* fused path refused (or bias of another dtype, or forced): fp32 scratch
       (aligned) + epilogue kernel, then the naive kernel */
    rc = unfused(ctx, g, err);
    if (rc <= 0) return -rc;
    return naive(ctx, g, err);
}
