/* cuBLAS GEMMs: cublasGemmEx, cublasGemmStridedBatchedEx,
 * cublasGemmBatchedEx, cublasSgemm_v2, cublasHgemm, cublasSgemmStridedBatched,
 * cublasHgemmStridedBatched and their _64 variants, exported with the real
 * names and forwarded. Recorded: operand and output dtypes, compute type
 * (annotated with the handle's math mode: "+tf32" when TF32 tensor-op math
 * applies to fp32 operands, "+rpr" when reduced-precision reductions are
 * allowed for 16-bit operands), transposes, m/n/k, batch count. */
#include <cublas_api.h>
#include <string.h>

#include "recorder/intercept/intercept.h"

#define LIBCUBLAS "libcublas.so.13"

typedef cublasStatus_t (*fn_math_t)(cublasHandle_t, cublasMath_t *);
static icpt_sym s_math = ICPT_SYM_REAL(LIBCUBLAS, "cublasGetMathMode", NULL);

static int64_t mul3(int64_t a, int64_t b, int64_t c) {
    if (a <= 0 || b <= 0 || c <= 0) return 0;
    if (a > INT64_MAX / b) return INT64_MAX;
    int64_t ab = a * b;
    return ab > INT64_MAX / c ? INT64_MAX : ab * c;
}

static void gemm_row(drift_census_gemm *r, const char *api, cublasHandle_t h, int ta, int tb, int64_t m, int64_t n,
                     int64_t k, int at, int bt, int ct, int compute, int64_t batch) {
    char buf[DRIFT_CENSUS_TYPE_MAX];
    memset(r, 0, sizeof *r);
    icpt_range_path(r->range);
    icpt_copy(r->api, sizeof r->api, api);
    icpt_copy(r->a_type, sizeof r->a_type, icpt_cuda_type_name(at, buf, sizeof buf));
    icpt_copy(r->b_type, sizeof r->b_type, icpt_cuda_type_name(bt, buf, sizeof buf));
    icpt_copy(r->c_type, sizeof r->c_type, icpt_cuda_type_name(ct, buf, sizeof buf));
    icpt_copy(r->d_type, sizeof r->d_type, r->c_type);
    char comp[DRIFT_CENSUS_TYPE_MAX];
    icpt_copy(comp, sizeof comp, icpt_compute_type_name(compute, buf, sizeof buf));
    cublasMath_t mode = CUBLAS_DEFAULT_MATH;
    fn_math_t fm = h ? (fn_math_t)icpt_resolve(&s_math) : NULL;
    if (fm && fm(h, &mode) == CUBLAS_STATUS_SUCCESS) {
        size_t o = strlen(comp);
        int base = (int)mode & 15;
        if (base == CUBLAS_TF32_TENSOR_OP_MATH && at == CUDA_R_32F && o + 5 < sizeof comp) {
            memcpy(comp + o, "+tf32", 6);
            o += 5;
        }
        if (!((int)mode & CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) &&
            (at == CUDA_R_16BF || at == CUDA_R_16F) && o + 4 < sizeof comp)
            memcpy(comp + o, "+rpr", 5);
    }
    icpt_copy(r->compute_type, sizeof r->compute_type, comp);
    icpt_copy(r->transa, sizeof r->transa, icpt_op_name((int)ta));
    icpt_copy(r->transb, sizeof r->transb, icpt_op_name((int)tb));
    r->m = m;
    r->n = n;
    r->k = k;
    r->batch = batch;
    double b = (double)mul3(m, k, batch) * icpt_cuda_type_size(at) + (double)mul3(k, n, batch) * icpt_cuda_type_size(bt) +
               (double)mul3(m, n, batch) * icpt_cuda_type_size(ct);
    r->bytes = b >= 9.2e18 ? INT64_MAX : (int64_t)b;
}

/* Resolve, forward, record. */
#define GEMM_BODY(sym, type, call, api, ta, tb, m, n, k, at, bt, ct, comp, batch)                          \
    type real_ = (type)icpt_resolve(&sym);                                                                   \
    if (!real_) return CUBLAS_STATUS_NOT_INITIALIZED;                                                        \
    if (!icpt_enabled()) return real_ call;                                                                  \
    int outer_ = icpt_enter();                                                                               \
    cublasStatus_t rc_ = real_ call;                                                                         \
    if (outer_) {                                                                                            \
        drift_census_gemm row_;                                                                              \
        gemm_row(&row_, api, handle, (int)(ta), (int)(tb), (int64_t)(m), (int64_t)(n), (int64_t)(k), at, bt, \
                 ct, comp, (int64_t)(batch));                                                                \
        icpt_record_gemm(&row_, rc_ != CUBLAS_STATUS_SUCCESS);                                               \
    }                                                                                                        \
    icpt_leave();                                                                                            \
    return rc_

/* ---- cublasGemmEx ------------------------------------------------------------ */
typedef cublasStatus_t (*fn_gemmex_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                      const void *, const void *, cudaDataType, int, const void *, cudaDataType, int,
                                      const void *, void *, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
static icpt_sym s_gemmex = ICPT_SYM(LIBCUBLAS, "cublasGemmEx", NULL, cublasGemmEx);
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    GEMM_BODY(s_gemmex, fn_gemmex_t,
              (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc, computeType,
               algo),
              "cublasGemmEx", transa, transb, m, n, k, Atype, Btype, Ctype, computeType, 1);
}

typedef cublasStatus_t (*fn_gemmex64_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int64_t, int64_t,
                                        int64_t, const void *, const void *, cudaDataType, int64_t, const void *,
                                        cudaDataType, int64_t, const void *, void *, cudaDataType, int64_t,
                                        cublasComputeType_t, cublasGemmAlgo_t);
static icpt_sym s_gemmex64 = ICPT_SYM(LIBCUBLAS, "cublasGemmEx_64", NULL, cublasGemmEx_64);
cublasStatus_t cublasGemmEx_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
                               int64_t n, int64_t k, const void *alpha, const void *A, cudaDataType Atype,
                               int64_t lda, const void *B, cudaDataType Btype, int64_t ldb, const void *beta,
                               void *C, cudaDataType Ctype, int64_t ldc, cublasComputeType_t computeType,
                               cublasGemmAlgo_t algo) {
    GEMM_BODY(s_gemmex64, fn_gemmex64_t,
              (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc, computeType,
               algo),
              "cublasGemmEx_64", transa, transb, m, n, k, Atype, Btype, Ctype, computeType, 1);
}

/* ---- cublasGemmStridedBatchedEx ---------------------------------------------- */
typedef cublasStatus_t (*fn_gsbex_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                     const void *, const void *, cudaDataType, int, long long, const void *,
                                     cudaDataType, int, long long, const void *, void *, cudaDataType, int, long long,
                                     int, cublasComputeType_t, cublasGemmAlgo_t);
static icpt_sym s_gsbex = ICPT_SYM(LIBCUBLAS, "cublasGemmStridedBatchedEx", NULL, cublasGemmStridedBatchedEx);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
                                          int lda, long long int strideA, const void *B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void *beta, void *C, cudaDataType Ctype,
                                          int ldc, long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    GEMM_BODY(s_gsbex, fn_gsbex_t,
              (handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype,
               ldc, strideC, batchCount, computeType, algo),
              "cublasGemmStridedBatchedEx", transa, transb, m, n, k, Atype, Btype, Ctype, computeType, batchCount);
}

typedef cublasStatus_t (*fn_gsbex64_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int64_t, int64_t,
                                       int64_t, const void *, const void *, cudaDataType, int64_t, long long,
                                       const void *, cudaDataType, int64_t, long long, const void *, void *,
                                       cudaDataType, int64_t, long long, int64_t, cublasComputeType_t,
                                       cublasGemmAlgo_t);
static icpt_sym s_gsbex64 = ICPT_SYM(LIBCUBLAS, "cublasGemmStridedBatchedEx_64", NULL, cublasGemmStridedBatchedEx_64);
cublasStatus_t cublasGemmStridedBatchedEx_64(cublasHandle_t handle, cublasOperation_t transa,
                                             cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                                             const void *alpha, const void *A, cudaDataType Atype, int64_t lda,
                                             long long int strideA, const void *B, cudaDataType Btype, int64_t ldb,
                                             long long int strideB, const void *beta, void *C, cudaDataType Ctype,
                                             int64_t ldc, long long int strideC, int64_t batchCount,
                                             cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    GEMM_BODY(s_gsbex64, fn_gsbex64_t,
              (handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype,
               ldc, strideC, batchCount, computeType, algo),
              "cublasGemmStridedBatchedEx_64", transa, transb, m, n, k, Atype, Btype, Ctype, computeType, batchCount);
}

/* ---- cublasGemmBatchedEx ------------------------------------------------------- */
typedef cublasStatus_t (*fn_gbex_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                                    const void *const[], cudaDataType, int, const void *const[], cudaDataType, int,
                                    const void *, void *const[], cudaDataType, int, int, cublasComputeType_t,
                                    cublasGemmAlgo_t);
static icpt_sym s_gbex = ICPT_SYM(LIBCUBLAS, "cublasGemmBatchedEx", NULL, cublasGemmBatchedEx);
cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
                                   int n, int k, const void *alpha, const void *const Aarray[], cudaDataType Atype,
                                   int lda, const void *const Barray[], cudaDataType Btype, int ldb, const void *beta,
                                   void *const Carray[], cudaDataType Ctype, int ldc, int batchCount,
                                   cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    GEMM_BODY(s_gbex, fn_gbex_t,
              (handle, transa, transb, m, n, k, alpha, Aarray, Atype, lda, Barray, Btype, ldb, beta, Carray, Ctype,
               ldc, batchCount, computeType, algo),
              "cublasGemmBatchedEx", transa, transb, m, n, k, Atype, Btype, Ctype, computeType, batchCount);
}

typedef cublasStatus_t (*fn_gbex64_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int64_t, int64_t,
                                      int64_t, const void *, const void *const[], cudaDataType, int64_t,
                                      const void *const[], cudaDataType, int64_t, const void *, void *const[],
                                      cudaDataType, int64_t, int64_t, cublasComputeType_t, cublasGemmAlgo_t);
static icpt_sym s_gbex64 = ICPT_SYM(LIBCUBLAS, "cublasGemmBatchedEx_64", NULL, cublasGemmBatchedEx_64);
cublasStatus_t cublasGemmBatchedEx_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                      int64_t m, int64_t n, int64_t k, const void *alpha, const void *const Aarray[],
                                      cudaDataType Atype, int64_t lda, const void *const Barray[], cudaDataType Btype,
                                      int64_t ldb, const void *beta, void *const Carray[], cudaDataType Ctype,
                                      int64_t ldc, int64_t batchCount, cublasComputeType_t computeType,
                                      cublasGemmAlgo_t algo) {
    GEMM_BODY(s_gbex64, fn_gbex64_t,
              (handle, transa, transb, m, n, k, alpha, Aarray, Atype, lda, Barray, Btype, ldb, beta, Carray, Ctype,
               ldc, batchCount, computeType, algo),
              "cublasGemmBatchedEx_64", transa, transb, m, n, k, Atype, Btype, Ctype, computeType, batchCount);
}

/* ---- typed fp32 / fp16 entry points ------------------------------------------ */
/* fp32: compute fp32; fp16 (Hgemm): compute fp16. Hgemm is declared for C++
 * only (it takes __half): the ABI passes pointers, so void pointers here. */
#define F32 CUDA_R_32F
#define F16 CUDA_R_16F

typedef cublasStatus_t (*fn_sgemm_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                     const float *, const float *, int, const float *, int, const float *, float *,
                                     int);
static icpt_sym s_sgemm = ICPT_SYM(LIBCUBLAS, "cublasSgemm_v2", NULL, cublasSgemm_v2);
cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
                              const float *beta, float *C, int ldc) {
    GEMM_BODY(s_sgemm, fn_sgemm_t, (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc),
              "cublasSgemm_v2", transa, transb, m, n, k, F32, F32, F32, CUBLAS_COMPUTE_32F, 1);
}

typedef cublasStatus_t (*fn_sgemm64_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int64_t, int64_t,
                                       int64_t, const float *, const float *, int64_t, const float *, int64_t,
                                       const float *, float *, int64_t);
static icpt_sym s_sgemm64 = ICPT_SYM(LIBCUBLAS, "cublasSgemm_v2_64", NULL, cublasSgemm_v2_64);
cublasStatus_t cublasSgemm_v2_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
                                 int64_t n, int64_t k, const float *alpha, const float *A, int64_t lda,
                                 const float *B, int64_t ldb, const float *beta, float *C, int64_t ldc) {
    GEMM_BODY(s_sgemm64, fn_sgemm64_t, (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc),
              "cublasSgemm_v2_64", transa, transb, m, n, k, F32, F32, F32, CUBLAS_COMPUTE_32F, 1);
}

typedef cublasStatus_t (*fn_ssb_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *,
                                   const float *, int, long long, const float *, int, long long, const float *,
                                   float *, int, long long, int);
static icpt_sym s_ssb = ICPT_SYM(LIBCUBLAS, "cublasSgemmStridedBatched", NULL, cublasSgemmStridedBatched);
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float *alpha, const float *A, int lda,
                                         long long int strideA, const float *B, int ldb, long long int strideB,
                                         const float *beta, float *C, int ldc, long long int strideC,
                                         int batchCount) {
    GEMM_BODY(s_ssb, fn_ssb_t,
              (handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
               batchCount),
              "cublasSgemmStridedBatched", transa, transb, m, n, k, F32, F32, F32, CUBLAS_COMPUTE_32F, batchCount);
}

typedef cublasStatus_t (*fn_ssb64_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int64_t, int64_t, int64_t,
                                     const float *, const float *, int64_t, long long, const float *, int64_t,
                                     long long, const float *, float *, int64_t, long long, int64_t);
static icpt_sym s_ssb64 = ICPT_SYM(LIBCUBLAS, "cublasSgemmStridedBatched_64", NULL, cublasSgemmStridedBatched_64);
cublasStatus_t cublasSgemmStridedBatched_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                            int64_t m, int64_t n, int64_t k, const float *alpha, const float *A,
                                            int64_t lda, long long int strideA, const float *B, int64_t ldb,
                                            long long int strideB, const float *beta, float *C, int64_t ldc,
                                            long long int strideC, int64_t batchCount) {
    GEMM_BODY(s_ssb64, fn_ssb64_t,
              (handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
               batchCount),
              "cublasSgemmStridedBatched_64", transa, transb, m, n, k, F32, F32, F32, CUBLAS_COMPUTE_32F, batchCount);
}

cublasStatus_t cublasHgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const void *alpha, const void *A, int lda, const void *B, int ldb, const void *beta,
                           void *C, int ldc);
typedef cublasStatus_t (*fn_hgemm_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                                     const void *, int, const void *, int, const void *, void *, int);
static icpt_sym s_hgemm = ICPT_SYM(LIBCUBLAS, "cublasHgemm", NULL, cublasHgemm);
cublasStatus_t cublasHgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           int k, const void *alpha, const void *A, int lda, const void *B, int ldb, const void *beta,
                           void *C, int ldc) {
    GEMM_BODY(s_hgemm, fn_hgemm_t, (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc),
              "cublasHgemm", transa, transb, m, n, k, F16, F16, F16, CUBLAS_COMPUTE_16F, 1);
}

cublasStatus_t cublasHgemm_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
                              int64_t n, int64_t k, const void *alpha, const void *A, int64_t lda, const void *B,
                              int64_t ldb, const void *beta, void *C, int64_t ldc);
typedef cublasStatus_t (*fn_hgemm64_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int64_t, int64_t,
                                       int64_t, const void *, const void *, int64_t, const void *, int64_t,
                                       const void *, void *, int64_t);
static icpt_sym s_hgemm64 = ICPT_SYM(LIBCUBLAS, "cublasHgemm_64", NULL, cublasHgemm_64);
cublasStatus_t cublasHgemm_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
                              int64_t n, int64_t k, const void *alpha, const void *A, int64_t lda, const void *B,
                              int64_t ldb, const void *beta, void *C, int64_t ldc) {
    GEMM_BODY(s_hgemm64, fn_hgemm64_t, (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc),
              "cublasHgemm_64", transa, transb, m, n, k, F16, F16, F16, CUBLAS_COMPUTE_16F, 1);
}

cublasStatus_t cublasHgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const void *alpha, const void *A, int lda,
                                         long long int strideA, const void *B, int ldb, long long int strideB,
                                         const void *beta, void *C, int ldc, long long int strideC, int batchCount);
typedef cublasStatus_t (*fn_hsb_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                                   const void *, int, long long, const void *, int, long long, const void *, void *,
                                   int, long long, int);
static icpt_sym s_hsb = ICPT_SYM(LIBCUBLAS, "cublasHgemmStridedBatched", NULL, cublasHgemmStridedBatched);
cublasStatus_t cublasHgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const void *alpha, const void *A, int lda,
                                         long long int strideA, const void *B, int ldb, long long int strideB,
                                         const void *beta, void *C, int ldc, long long int strideC, int batchCount) {
    GEMM_BODY(s_hsb, fn_hsb_t,
              (handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
               batchCount),
              "cublasHgemmStridedBatched", transa, transb, m, n, k, F16, F16, F16, CUBLAS_COMPUTE_16F, batchCount);
}

cublasStatus_t cublasHgemmStridedBatched_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                            int64_t m, int64_t n, int64_t k, const void *alpha, const void *A,
                                            int64_t lda, long long int strideA, const void *B, int64_t ldb,
                                            long long int strideB, const void *beta, void *C, int64_t ldc,
                                            long long int strideC, int64_t batchCount);
typedef cublasStatus_t (*fn_hsb64_t)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int64_t, int64_t, int64_t,
                                     const void *, const void *, int64_t, long long, const void *, int64_t, long long,
                                     const void *, void *, int64_t, long long, int64_t);
static icpt_sym s_hsb64 = ICPT_SYM(LIBCUBLAS, "cublasHgemmStridedBatched_64", NULL, cublasHgemmStridedBatched_64);
cublasStatus_t cublasHgemmStridedBatched_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                            int64_t m, int64_t n, int64_t k, const void *alpha, const void *A,
                                            int64_t lda, long long int strideA, const void *B, int64_t ldb,
                                            long long int strideB, const void *beta, void *C, int64_t ldc,
                                            long long int strideC, int64_t batchCount) {
    GEMM_BODY(s_hsb64, fn_hsb64_t,
              (handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC,
               batchCount),
              "cublasHgemmStridedBatched_64", transa, transb, m, n, k, F16, F16, F16, CUBLAS_COMPUTE_16F, batchCount);
}
