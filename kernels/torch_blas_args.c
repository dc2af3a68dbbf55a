/* torch's cuBLAS arguments for bmm / mm (torch_blas_args.h: the facts). */
#include "kernels/torch_blas_args.h"

#include <string.h>

static int64_t max1(int64_t v) { return v > 1 ? v : 1; }

/* torch's is_contiguous over (size, stride) pairs, outermost first: size-1 dims ignored. */
static int is_contig(int nd, const int64_t *size, const int64_t *stride) {
    int64_t expect = 1;
    for (int d = nd - 1; d >= 0; d--) {
        if (size[d] == 0) return 1;
        if (size[d] == 1) continue;
        if (stride[d] != expect) return 0;
        expect *= size[d];
    }
    return 1;
}

/* torch's is_non_overlapping_and_dense for a 2-D tensor. */
static int dense2(const drift_tba_operand *t) {
    const int64_t sz[2] = {t->rows, t->cols}, st[2] = {t->s_row, t->s_col};
    int order[2] = {0, 1}; /* dims by increasing stride, size < 2 last */
    if (sz[0] >= 2 && (sz[1] < 2 || st[0] < st[1])) order[0] = 0, order[1] = 1;
    else order[0] = 1, order[1] = 0;
    int64_t need = 1;
    for (int i = 0; i < 2; i++) {
        const int d = order[i];
        if (sz[d] < 2) return 1;
        if (st[d] != need) return 0;
        need *= sz[d];
    }
    return 1;
}

/* CUDABlas.cpp's cublasAdjustLdLevel3. */
static void adjust_ld(drift_tba_call *c) {
    if (c->n <= 1) c->ldc = max1(c->m);
    if (c->transa) {
        if (c->m <= 1) c->lda = max1(c->k);
    } else if (c->k <= 1) {
        c->lda = max1(c->m);
    }
    if (c->transb) {
        if (c->k <= 1) c->ldb = max1(c->n);
    } else if (c->n <= 1) {
        c->ldb = max1(c->k);
    }
}

static void contiguous(drift_tba_operand *t) {
    t->s_col = 1;
    t->s_row = t->cols;
    t->s_batch = t->rows * t->cols;
}

/* prepare_batch_matrix_for_cublas: strides indexed 1 (rows) and 2 (cols). */
static void prep_batch(drift_tba_operand *t, int tr, int64_t m, int64_t n, int *trans, int64_t *ld, int *copied) {
    const int64_t s_fast = tr ? t->s_col : t->s_row, s_lead = tr ? t->s_row : t->s_col;
    *copied = 0;
    if (s_fast == 1 && s_lead >= max1(m)) {
        *trans = 0;
        *ld = s_lead;
    } else if (s_lead == 1 && s_fast >= max1(n)) {
        *trans = 1;
        *ld = s_fast;
    } else {
        *trans = !tr;
        const int64_t sz[3] = {1, t->rows, t->cols}, st[3] = {t->s_batch, t->s_row, t->s_col};
        if (!(is_contig(3, sz, st) && t->s_row != 0 && t->s_col != 0)) {
            contiguous(t);
            *copied = 1;
        }
        *ld = t->s_row;
    }
}

int drift_tba_bmm(const drift_tba_operand *a, const drift_tba_operand *b, int64_t batch, drift_tba_call *c) {
    memset(c, 0, sizeof *c);
    const int64_t M = a->rows, K = a->cols, N = b->cols;
    if (M < 0 || K < 0 || N < 0 || batch < 0 || b->rows != K) return -1;
    /* the result: contiguous [B, M, N] */
    const int64_t rs1 = N, rs2 = 1;
    int tr;
    if (rs1 == 1 && (N == 1 || rs2 >= max1(M))) tr = 0;
    else tr = 1; /* rs2 == 1 and (M == 1 or rs1 = N >= max(1, N)): always true for a contiguous result */
    c->m = tr ? N : M;
    c->n = tr ? M : N;
    c->k = K;
    drift_tba_operand x = tr ? *b : *a, y = tr ? *a : *b;
    c->which_a = tr;
    prep_batch(&x, tr, c->m, c->k, &c->transa, &c->lda, &c->copy_a);
    prep_batch(&y, tr, c->k, c->n, &c->transb, &c->ldb, &c->copy_b);
    c->ldc = tr ? rs1 : rs2;
    c->stride_a = x.s_batch;
    c->stride_b = y.s_batch;
    c->stride_c = M * N;
    c->batch = batch;
    adjust_ld(c);
    return 0;
}

/* prepare_matrix_for_cublas(tensor, transpose_tensor, transpose_result). */
static void prep_mat(drift_tba_operand *t, int *trans, int *copied) {
    *copied = 0;
    if (dense2(t)) {
        const int64_t sz[2] = {t->rows, t->cols}, st[2] = {t->s_row, t->s_col};
        *trans = is_contig(2, sz, st);
    } else if (t->s_row == 1 && t->s_col >= max1(t->rows)) {
        *trans = 0;
    } else if (t->s_col == 1 && t->s_row >= max1(t->cols)) {
        *trans = 1;
    } else {
        *trans = 1;
        contiguous(t);
        *copied = 1;
    }
}

int drift_tba_mm(const drift_tba_operand *a, const drift_tba_operand *b, drift_tba_call *c) {
    memset(c, 0, sizeof *c);
    const int64_t M = a->rows, K = a->cols, N = b->cols;
    if (M < 0 || K < 0 || N < 0 || b->rows != K) return -1;
    const int tr = 1; /* a contiguous result is non-overlapping and dense: transpose_result = is_contiguous */
    drift_tba_operand x = *b, y = *a; /* tr: mata = mat2, matb = mat1 */
    c->which_a = 1;
    int ta, tb;
    prep_mat(&x, &ta, &c->copy_a);
    prep_mat(&y, &tb, &c->copy_b);
    ta = !ta;
    tb = !tb;
    c->transa = ta;
    c->transb = tb;
    c->m = x.cols; /* sizes_a[tr ? 1 : 0] */
    c->k = x.rows;
    c->n = y.rows; /* sizes_b[tr ? 0 : 1] */
    c->lda = (ta == tr) ? x.s_col : x.s_row;
    c->ldb = (tb == tr) ? y.s_col : y.s_row;
    c->ldc = N; /* result stride(0) */
    c->batch = 1;
    adjust_ld(c);
    return 0;
}

void drift_tba_dense(int64_t R, int64_t C, int transposed, int broadcast, drift_tba_operand *o) {
    o->rows = R;
    o->cols = C;
    if (transposed) {
        o->s_row = 1;
        o->s_col = R;
    } else {
        o->s_row = C;
        o->s_col = 1;
    }
    o->s_batch = broadcast ? 0 : R * C;
}
