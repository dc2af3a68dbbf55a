/* GEMM forms (kernels/gemm_forms.h): the cpu backend follows a recording
 * GPU's table (cpu:gpu_as=TABLE) for the LINEAR shapes it lists and keeps
 * drift's one rounding elsewhere:
 *  - split-K reduced in place in bf16 (TransformerTemporal's proj_out on the
 *    H200: M 2048, N 4, K 32, chunks of 16): bitwise equal to a naive loop
 *    of that form, and not to the one-rounding form;
 *  - the bias after the rounding (HunyuanVideo's timestep linear_1: M 1,
 *    N 20, K 256): bitwise equal to LINEAR without bias then ADD;
 *  - another M, or no gpu_as, or gpu_as=none: the one-rounding form;
 *  - a bad table name is DRIFT_E_INPUT naming the option;
 *  - which recordings get a table, and the spec it appends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/gemm_forms.h"
#include "test_rand.h"

#define H200 "h200-sm90-cublaslt-13.1.0"

static drift_tensor mk(drift_backend *be, drift_dtype dt, int nd, const int64_t *sh, const float *v) {
    drift_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt, t.ndim = nd;
    for (int i = 0; i < nd; i++) t.shape[i] = sh[i];
    drift_err e;
    assert_int_equal(drift_backend_alloc(be, &t, &e), DRIFT_OK);
    if (v) assert_int_equal(drift_backend_upload_f32(be, &t, v, &e), DRIFT_OK);
    return t;
}

/* LINEAR bf16 of x[M, K], w[N, K] (+ b[N]) on a backend made from spec; caller frees. */
static float *linear(const char *spec, int64_t M, int64_t N, int64_t K, const float *x, const float *w, const float *b) {
    drift_backend *be = NULL;
    drift_err e;
    assert_int_equal(drift_backend_create(spec, &be, &e), DRIFT_OK);
    drift_tensor tx = mk(be, DRIFT_BF16, 2, (const int64_t[]){M, K}, x), tw = mk(be, DRIFT_BF16, 2, (const int64_t[]){N, K}, w);
    drift_tensor tb = mk(be, DRIFT_BF16, 1, (const int64_t[]){N}, b), ty = mk(be, DRIFT_BF16, 2, (const int64_t[]){M, N}, NULL);
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = DRIFT_OP_LINEAR, op.compute = DRIFT_BF16, op.out = DRIFT_BF16, op.n_in = b ? 3 : 2;
    const drift_tensor *in[3] = {&tx, &tw, &tb};
    assert_int_equal(drift_backend_run(be, &op, in, &ty, &e), DRIFT_OK);
    float *y = malloc((size_t)(M * N) * sizeof(float));
    assert_non_null(y);
    assert_int_equal(drift_backend_download_f32(be, &ty, y, &e), DRIFT_OK);
    drift_tensor *all[] = {&tx, &tw, &tb, &ty};
    for (int i = 0; i < 4; i++) drift_backend_release(be, all[i]);
    drift_backend_free(be);
    return y;
}

/* fp32 sum of x[m, k0..k1) w[n, k0..k1) in drift's GEMM order (one fmaf chain: k1 - k0 <= 256). */
static float part(const float *x, const float *w, int64_t K, int64_t m, int64_t n, int64_t k0, int64_t k1) {
    float p = 0.0f;
    for (int64_t k = k0; k < k1; k++) p = fmaf(x[m * K + k], w[n * K + k], p);
    return p;
}

static int64_t count_diff(const float *a, const float *b, int64_t n) {
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof a[i]) != 0;
    return d;
}

static void test_splitk_inplace(void **state) {
    (void)state;
    const int64_t M = 2048, N = 4, K = 32, C = 16;
    uint64_t rng = 31;
    float *x = test_rand_vals(&rng, M * K, 2.0, DRIFT_BF16), *w = test_rand_vals(&rng, N * K, 1.0, DRIFT_BF16);
    float *b = test_rand_vals(&rng, N, 1.0, DRIFT_BF16);
    float *got = linear("cpu:gpu_as=" H200, M, N, K, x, w, b), *one = linear("cpu", M, N, K, x, w, b);
    float *want = malloc((size_t)(M * N) * sizeof(float)), *want1 = malloc((size_t)(M * N) * sizeof(float));
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float y = drift_round_to(part(x, w, K, m, n, 0, C) + b[n], DRIFT_BF16);
            want[m * N + n] = drift_round_to(y + part(x, w, K, m, n, C, K), DRIFT_BF16);
            want1[m * N + n] = drift_round_to(part(x, w, K, m, n, 0, K) + b[n], DRIFT_BF16);
        }
    assert_int_equal(count_diff(got, want, M * N), 0);
    assert_int_equal(count_diff(one, want1, M * N), 0);
    assert_true(count_diff(want, want1, M * N) > 0); /* the two forms do differ on these values */
    /* another M is not in the table: one rounding */
    float *half = linear("cpu:gpu_as=" H200, M / 2, N, K, x, w, b);
    assert_int_equal(count_diff(half, want1, (M / 2) * N), 0);
    float *none = linear("cpu:gpu_as=none", M, N, K, x, w, b);
    assert_int_equal(count_diff(none, want1, M * N), 0);
    free(x), free(w), free(b), free(got), free(one), free(want), free(want1), free(half), free(none);
}

static void test_bias_after(void **state) {
    (void)state;
    const int64_t M = 1, N = 20, K = 256;
    uint64_t rng = 7;
    float *x = test_rand_vals(&rng, M * K, 4.0, DRIFT_BF16), *w = test_rand_vals(&rng, N * K, 1.0, DRIFT_BF16);
    float *b = test_rand_vals(&rng, N, 8.0, DRIFT_BF16);
    float *got = linear("cpu:gpu_as=" H200, M, N, K, x, w, b), *lin = linear("cpu", M, N, K, x, w, NULL);
    float *one = linear("cpu", M, N, K, x, w, b);
    float *want = malloc((size_t)N * sizeof(float));
    for (int64_t n = 0; n < N; n++) want[n] = drift_round_to(lin[n] + b[n], DRIFT_BF16);
    assert_int_equal(count_diff(got, want, N), 0);
    assert_true(count_diff(one, want, N) > 0);
    free(x), free(w), free(b), free(got), free(lin), free(one), free(want);
}

static void test_bad_table(void **state) {
    (void)state;
    drift_backend *be = NULL;
    drift_err e;
    drift_err_clear(&e);
    assert_int_equal(drift_backend_create("cpu:gpu_as=a100-cublaslt-12", &be, &e), DRIFT_E_INPUT);
    assert_null(be);
    assert_non_null(strstr(e.msg, "gpu_as=a100-cublaslt-12"));
    /* ref takes no gpu_as */
    assert_int_equal(drift_backend_create("ref:gpu_as=" H200, &be, &e), DRIFT_E_INPUT);
}

static void test_table_for_recording(void **state) {
    (void)state;
    drift_libraries l;
    drift_libraries_init(&l);
    snprintf(l.gpu_name, sizeof l.gpu_name, "NVIDIA H200");
    l.cc_major = 9, l.cc_minor = 0, l.cublaslt_version = 130100;
    snprintf(l.torch_version, sizeof l.torch_version, "2.11.0+cu130");
    const char *t = drift_gemm_table_for("drift-recorder-python 0.1.0 torch 2.11.0", &l);
    assert_non_null(t);
    assert_string_equal(t, H200);
    assert_null(drift_gemm_table_for(NULL, NULL));
    l.cublaslt_version = 120900;
    assert_null(drift_gemm_table_for("drift-recorder-python 0.1.0 torch 2.11.0", &l));
    l.cublaslt_version = 130100;
    snprintf(l.gpu_name, sizeof l.gpu_name, "NVIDIA H100 80GB HBM3");
    assert_null(drift_gemm_table_for("drift-recorder-python 0.1.0 torch 2.11.0", &l));
    char s[128];
    drift_err e;
    assert_int_equal(drift_backend_spec_with_gemm_table("cpu", t, s, sizeof s, &e), DRIFT_OK);
    assert_string_equal(s, "cpu:gpu_as=" H200);
    assert_int_equal(drift_backend_spec_with_gemm_table("cpu:threads=2", t, s, sizeof s, &e), DRIFT_OK);
    assert_string_equal(s, "cpu:threads=2:gpu_as=" H200);
    assert_int_equal(drift_backend_spec_with_gemm_table("cpu:gpu_as=none", t, s, sizeof s, &e), DRIFT_OK);
    assert_string_equal(s, "cpu:gpu_as=none");
    assert_int_equal(drift_backend_spec_with_gemm_table("cuda:0", t, s, sizeof s, &e), DRIFT_OK);
    assert_string_equal(s, "cuda:0");
    assert_int_equal(drift_backend_spec_with_gemm_table("cpu", NULL, s, sizeof s, &e), DRIFT_OK);
    assert_string_equal(s, "cpu");
    assert_int_equal(drift_backend_spec_with_gemm_table("cpu", t, s, 8, &e), DRIFT_E_INPUT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_splitk_inplace),
        cmocka_unit_test(test_bias_after),
        cmocka_unit_test(test_bad_table),
        cmocka_unit_test(test_table_for_recording),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
