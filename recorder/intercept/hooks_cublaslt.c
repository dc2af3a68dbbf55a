/* cublasLtMatmul, exported with the real name and forwarded. The signature
 * is read from the matmul descriptor (compute type, scale type, transposes,
 * epilogue) and the four matrix layouts (types, rows, cols, batch count)
 * with the real library's getters; an attribute the library refuses reads
 * as "?" / -1. m, n come from D (rows x cols), k from A (cols if A is not
 * transposed, else rows). */
#include <cublasLt.h>
#include <string.h>

#include "recorder/intercept/intercept.h"

#define LIBLT "libcublasLt.so.13"

typedef cublasStatus_t (*fn_descget_t)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, void *, size_t,
                                       size_t *);
typedef cublasStatus_t (*fn_layget_t)(cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t, void *, size_t,
                                      size_t *);
static icpt_sym s_descget = ICPT_SYM_REAL(LIBLT, "cublasLtMatmulDescGetAttribute", NULL);
static icpt_sym s_layget = ICPT_SYM_REAL(LIBLT, "cublasLtMatrixLayoutGetAttribute", NULL);

typedef struct lt_layout {
    int type;           /* cudaDataType, -1 unknown */
    int64_t rows, cols, batch;
} lt_layout;

static void read_layout(fn_layget_t get, cublasLtMatrixLayout_t l, lt_layout *o) {
    o->type = -1;
    o->rows = o->cols = -1;
    o->batch = 1;
    if (!get || !l) return;
    uint32_t t = 0;
    uint64_t r = 0, c = 0;
    int32_t b = 1;
    size_t w = 0;
    if (get(l, CUBLASLT_MATRIX_LAYOUT_TYPE, &t, sizeof t, &w) == CUBLAS_STATUS_SUCCESS) o->type = (int)t;
    if (get(l, CUBLASLT_MATRIX_LAYOUT_ROWS, &r, sizeof r, &w) == CUBLAS_STATUS_SUCCESS && r <= (uint64_t)INT64_MAX)
        o->rows = (int64_t)r;
    if (get(l, CUBLASLT_MATRIX_LAYOUT_COLS, &c, sizeof c, &w) == CUBLAS_STATUS_SUCCESS && c <= (uint64_t)INT64_MAX)
        o->cols = (int64_t)c;
    if (get(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b, &w) == CUBLAS_STATUS_SUCCESS) o->batch = b;
}

static const char *type_or_unknown(int t, char *buf, size_t sz) {
    return t < 0 ? "?" : icpt_cuda_type_name(t, buf, sz);
}

static double mat_bytes(const lt_layout *l) {
    if (l->rows < 0 || l->cols < 0 || l->type < 0) return 0;
    return (double)l->rows * (double)l->cols * (double)(l->batch > 0 ? l->batch : 1) * icpt_cuda_type_size(l->type);
}

static void lt_row(drift_census_gemm *r, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                   cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d) {
    char buf[DRIFT_CENSUS_TYPE_MAX];
    memset(r, 0, sizeof *r);
    icpt_range_path(r->range);
    icpt_copy(r->api, sizeof r->api, "cublasLtMatmul");
    fn_descget_t dg = (fn_descget_t)icpt_resolve(&s_descget);
    fn_layget_t lg = (fn_layget_t)icpt_resolve(&s_layget);
    int32_t compute = -1, scale = -1, ta = -1, tb = -1;
    uint32_t epi = 0;
    size_t w = 0;
    int have_epi = 0;
    if (dg && desc) {
        if (dg(desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &compute, sizeof compute, &w) != CUBLAS_STATUS_SUCCESS)
            compute = -1;
        if (dg(desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, &scale, sizeof scale, &w) != CUBLAS_STATUS_SUCCESS) scale = -1;
        if (dg(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta, &w) != CUBLAS_STATUS_SUCCESS) ta = -1;
        if (dg(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb, &w) != CUBLAS_STATUS_SUCCESS) tb = -1;
        have_epi = dg(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi, &w) == CUBLAS_STATUS_SUCCESS;
    }
    icpt_copy(r->compute_type, sizeof r->compute_type, compute < 0 ? "?" : icpt_compute_type_name(compute, buf, sizeof buf));
    icpt_copy(r->scale_type, sizeof r->scale_type, type_or_unknown(scale, buf, sizeof buf));
    icpt_copy(r->epilogue, sizeof r->epilogue, have_epi ? icpt_epilogue_name(epi, buf, sizeof buf) : "?");
    icpt_copy(r->transa, sizeof r->transa, icpt_op_name(ta));
    icpt_copy(r->transb, sizeof r->transb, icpt_op_name(tb));
    lt_layout la, lb, lc, ld;
    read_layout(lg, a, &la);
    read_layout(lg, b, &lb);
    read_layout(lg, c, &lc);
    read_layout(lg, d, &ld);
    icpt_copy(r->a_type, sizeof r->a_type, type_or_unknown(la.type, buf, sizeof buf));
    icpt_copy(r->b_type, sizeof r->b_type, type_or_unknown(lb.type, buf, sizeof buf));
    icpt_copy(r->c_type, sizeof r->c_type, type_or_unknown(lc.type, buf, sizeof buf));
    icpt_copy(r->d_type, sizeof r->d_type, type_or_unknown(ld.type, buf, sizeof buf));
    r->m = ld.rows;
    r->n = ld.cols;
    r->k = ta == 0 ? la.cols : ta > 0 ? la.rows : -1;
    r->batch = ld.batch;
    double by = mat_bytes(&la) + mat_bytes(&lb) + mat_bytes(&ld);
    r->bytes = by >= 9.2e18 ? INT64_MAX : (int64_t)by;
}

typedef cublasStatus_t (*fn_lt_t)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *,
                                  cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t, const void *,
                                  const void *, cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t,
                                  const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t);
static icpt_sym s_lt = ICPT_SYM(LIBLT, "cublasLtMatmul", NULL, cublasLtMatmul);

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
    fn_lt_t real = (fn_lt_t)icpt_resolve(&s_lt);
    if (!real) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!icpt_enabled())
        return real(lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
                    workspaceSizeInBytes, stream);
    int outer = icpt_enter();
    cublasStatus_t rc = real(lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,
                             workspace, workspaceSizeInBytes, stream);
    if (outer) {
        drift_census_gemm row;
        lt_row(&row, computeDesc, Adesc, Bdesc, Cdesc, Ddesc);
        icpt_record_gemm(&row, rc != CUBLAS_STATUS_SUCCESS);
    }
    icpt_leave();
    return rc;
}
