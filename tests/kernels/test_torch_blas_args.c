/* kernels/torch_blas_args.c: the cuBLAS arguments torch 2.11 derives for bmm
 * and mm. The expected calls were worked out by hand from Blas.cpp's
 * baddbmm_out_cuda_impl / prepare_batch_matrix_for_cublas, cublasCommonArgs
 * and cublasAdjustLdLevel3 (the facts in kernels/torch_blas_args.h); the mm
 * case of a linear (x @ W^T) must give the call kernels/cuda/torch/gemm_torch.c
 * makes for LINEAR without bias (T, N, lda = ldb = K, ldc = N), which is
 * bitwise with torch on the H200 (tests/gpu/torch_parity.sh). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels/torch_blas_args.h"

static void expect(const drift_tba_call *c, int which_a, int ta, int tb, int64_t m, int64_t n, int64_t k, int64_t lda,
                   int64_t ldb, int64_t ldc) {
    assert_int_equal(c->which_a, which_a);
    assert_int_equal(c->transa, ta);
    assert_int_equal(c->transb, tb);
    assert_int_equal(c->m, m);
    assert_int_equal(c->n, n);
    assert_int_equal(c->k, k);
    assert_int_equal(c->lda, lda);
    assert_int_equal(c->ldb, ldb);
    assert_int_equal(c->ldc, ldc);
}

static void test_bmm_contiguous(void **state) {
    (void)state;
    drift_tba_operand a, b;
    drift_tba_call c;
    /* T5Film's [2, 16, 16] x [2, 16, 16]: batch2 first, both 'n' */
    drift_tba_dense(16, 16, 0, 0, &a);
    drift_tba_dense(16, 16, 0, 0, &b);
    assert_int_equal(drift_tba_bmm(&a, &b, 2, &c), 0);
    expect(&c, 1, 0, 0, 16, 16, 16, 16, 16, 16);
    assert_int_equal(c.stride_a, 256);
    assert_int_equal(c.stride_b, 256);
    assert_int_equal(c.stride_c, 256);
    assert_int_equal(c.batch, 2);
    /* [4, 128, 64] x [4, 64, 96]: m = N, n = M, lda = N, ldb = K, ldc = N */
    drift_tba_dense(128, 64, 0, 0, &a);
    drift_tba_dense(64, 96, 0, 0, &b);
    assert_int_equal(drift_tba_bmm(&a, &b, 4, &c), 0);
    expect(&c, 1, 0, 0, 96, 128, 64, 96, 64, 96);
    assert_int_equal(c.stride_a, 64 * 96);
    assert_int_equal(c.stride_b, 128 * 64);
    assert_int_equal(c.stride_c, 128 * 96);
    assert_int_equal(c.copy_a + c.copy_b, 0);
}

static void test_bmm_transposed(void **state) {
    (void)state;
    drift_tba_operand a, b;
    drift_tba_call c;
    /* q @ k^T: batch2 = k.transpose(-1, -2) of a contiguous [B, N, K]: 't', lda = K */
    drift_tba_dense(32, 64, 0, 0, &a);
    drift_tba_dense(64, 48, 1, 0, &b);
    assert_int_equal(drift_tba_bmm(&a, &b, 3, &c), 0);
    expect(&c, 1, 1, 0, 48, 32, 64, 64, 64, 48);
    assert_int_equal(c.stride_a, 64 * 48);
    /* linear.transposed_in: x^T [2, 3, 16] (strides 48, 1, 3) @ W^T expanded [2, 16, 8] (0, 1, 16) */
    a.rows = 3, a.cols = 16, a.s_batch = 48, a.s_row = 1, a.s_col = 3;
    b.rows = 16, b.cols = 8, b.s_batch = 0, b.s_row = 1, b.s_col = 16;
    assert_int_equal(drift_tba_bmm(&a, &b, 2, &c), 0);
    expect(&c, 1, 1, 1, 8, 3, 16, 16, 3, 8);
    assert_int_equal(c.stride_a, 0);
    assert_int_equal(c.stride_b, 48);
    assert_int_equal(c.stride_c, 24);
}

static void test_bmm_size_one(void **state) {
    (void)state;
    drift_tba_operand a, b;
    drift_tba_call c;
    /* N = 1: the result's size-1 column makes transpose_result false: batch1 first */
    drift_tba_dense(5, 7, 0, 0, &a);
    drift_tba_dense(7, 1, 0, 0, &b);
    assert_int_equal(drift_tba_bmm(&a, &b, 2, &c), 0);
    expect(&c, 0, 1, 1, 5, 1, 7, 7, 1, 5); /* ldc 1 raised to m by cublasAdjustLdLevel3 */
    /* M = 1 */
    drift_tba_dense(1, 7, 0, 0, &a);
    drift_tba_dense(7, 4, 0, 0, &b);
    assert_int_equal(drift_tba_bmm(&a, &b, 2, &c), 0);
    expect(&c, 1, 0, 0, 4, 1, 7, 4, 7, 4);
    assert_int_equal(drift_tba_bmm(&a, &a, 2, &c), -1); /* inner dims 7 and 1 */
}

static void test_mm(void **state) {
    (void)state;
    drift_tba_operand x, w;
    drift_tba_call c;
    /* linear without bias as mm(x, W^T): gemm_torch.c's (T, N, N, M, K, lda K, ldb K, ldc N) */
    drift_tba_dense(64, 1536, 0, 0, &x);
    drift_tba_dense(1536, 512, 1, 0, &w);
    assert_int_equal(drift_tba_mm(&x, &w, &c), 0);
    expect(&c, 1, 1, 0, 512, 64, 1536, 1536, 1536, 512);
    /* both contiguous: (N, N, N, M, K, lda N, ldb K, ldc N) */
    drift_tba_dense(3, 16, 0, 0, &x);
    drift_tba_dense(16, 5, 0, 0, &w);
    assert_int_equal(drift_tba_mm(&x, &w, &c), 0);
    expect(&c, 1, 0, 0, 5, 3, 16, 5, 16, 5);
    /* a transposed first operand: 't' for cuBLAS's B, ldb = M */
    drift_tba_dense(3, 16, 1, 0, &x);
    assert_int_equal(drift_tba_mm(&x, &w, &c), 0);
    expect(&c, 1, 0, 1, 5, 3, 16, 5, 3, 5);
    /* a transposed view with a size-1 dim is contiguous to torch: 'n' */
    drift_tba_dense(1, 16, 1, 0, &x);
    assert_int_equal(drift_tba_mm(&x, &w, &c), 0);
    expect(&c, 1, 0, 0, 5, 1, 16, 5, 16, 5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bmm_contiguous),
        cmocka_unit_test(test_bmm_transposed),
        cmocka_unit_test(test_bmm_size_one),
        cmocka_unit_test(test_mm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
