/* drift's cpu GEMM (kernels/cpu/cpu_gemm.h) computes every output element in
 * the documented order, whatever M, N, the row's position, the layout, the
 * thread count and the path (AVX2+FMA or scalar):
 *  - bitwise equal to a naive loop written from the documented order
 *    (K blocks of 256, fmaf chain from 0 inside a block, block sums added
 *    in order), over shapes that cross every edge (M, N, K not multiples of
 *    the tiles, K = 1, 256, 257, 3*256+7, N over two chunks of packed B)
 *    and layouts x W^T, P V, strided;
 *  - bitwise equal on 1, 2, 3 and 8 threads;
 *  - the forced scalar path bitwise equal to the automatic one (on a CPU
 *    without AVX2+FMA both are the scalar path and the test says so);
 *  - one row alone equals the same row inside a batch of rows;
 *  - inf, -0, subnormals and NaN (NaN payloads compared as one NaN);
 *  - K = 0 writes zeros; an allocation failure returns -1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "kernels/cpu/cpu_gemm.h"

static uint64_t g_rng = 12345;

static float rnd(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)((double)(z >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0);
}

/* The documented order, written naively. */
static void reference(const drift_gemm *g) {
    for (int64_t m = 0; m < g->M; m++)
        for (int64_t n = 0; n < g->N; n++) {
            float c = 0.0f;
            for (int64_t k0 = 0; k0 < g->K; k0 += DRIFT_GEMM_KC) {
                float p = 0.0f;
                for (int64_t k = k0; k < g->K && k < k0 + DRIFT_GEMM_KC; k++)
                    p = fmaf(g->a[m * g->a_m + k * g->a_k], g->b[k * g->b_k + n * g->b_n], p);
                c = k0 == 0 ? p : c + p;
            }
            g->c[m * g->c_m + n] = c;
        }
}

/* Bitwise equality of the M x N results, every NaN counted as one value. */
static void assert_same(const float *x, const float *y, int64_t M, int64_t N, int64_t ld, const char *what) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            const float u = x[m * ld + n], v = y[m * ld + n];
            if (isnan(u) && isnan(v)) continue;
            if (memcmp(&u, &v, sizeof u) != 0)
                fail_msg("%s: C[%lld, %lld] = %a vs %a", what, (long long)m, (long long)n, (double)u, (double)v);
        }
}

typedef struct shape {
    int64_t M, N, K;
    int layout; /* 0: B is W[N, K] (x W^T); 1: B is [K, N] (P V); 2: both padded strides, B [N, K] */
} shape;

/* Fills a GEMM of shape s (operands random, C filled with garbage). Caller frees a, b, c. */
static drift_gemm make(const shape *s) {
    drift_gemm g;
    memset(&g, 0, sizeof g);
    g.M = s->M, g.N = s->N, g.K = s->K;
    const int64_t pad = s->layout == 2 ? 5 : 0;
    g.a_m = s->K + pad, g.a_k = 1;
    if (s->layout == 1)
        g.b_k = s->N, g.b_n = 1;
    else
        g.b_k = 1, g.b_n = s->K + pad;
    g.c_m = s->N + pad;
    float *a = malloc((size_t)(s->M * g.a_m + 1) * sizeof(float));
    float *b = malloc((size_t)(s->K * s->N + s->N * pad + 1) * sizeof(float));
    float *c = malloc((size_t)(s->M * g.c_m + 1) * sizeof(float));
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    for (int64_t i = 0; i < s->M * g.a_m; i++) a[i] = rnd();
    for (int64_t i = 0; i < s->K * s->N + s->N * pad; i++) b[i] = rnd();
    for (int64_t i = 0; i < s->M * g.c_m; i++) c[i] = 1e30f;
    g.a = a, g.b = b, g.c = c;
    return g;
}

static float *run(const drift_gemm *g0, int threads, int scalar) {
    drift_gemm g = *g0;
    const size_t n = (size_t)(g.M * g.c_m + 1);
    g.c = malloc(n * sizeof(float));
    assert_non_null(g.c);
    for (size_t i = 0; i < n; i++) g.c[i] = -7.0f; /* C is written, not read: any garbage */
    drift_cpu_gemm_force_scalar(scalar);
    assert_int_equal(drift_cpu_gemm(threads, &g), 0);
    drift_cpu_gemm_force_scalar(0);
    return g.c;
}

static void check_shape(const shape *s) {
    drift_gemm g = make(s);
    reference(&g);
    char what[128];
    static const int threads[] = {1, 2, 3, 8};
    for (int t = 0; t < 4; t++) {
        float *c = run(&g, threads[t], 0);
        snprintf(what, sizeof what, "%lldx%lldx%lld layout %d, %d threads, %s vs the documented order",
                 (long long)s->M, (long long)s->N, (long long)s->K, s->layout, threads[t], drift_cpu_gemm_path());
        assert_same(c, g.c, s->M, s->N, g.c_m, what);
        free(c);
    }
    float *c = run(&g, 3, 1);
    snprintf(what, sizeof what, "%lldx%lldx%lld layout %d, forced scalar path", (long long)s->M, (long long)s->N,
             (long long)s->K, s->layout);
    assert_same(c, g.c, s->M, s->N, g.c_m, what);
    free(c);
    free((void *)g.a);
    free((void *)g.b);
    free(g.c);
}

static void test_documented_order(void **st) {
    (void)st;
    static const shape shapes[] = {
        {1, 1, 1, 0},     {1, 17, 3, 0},    {7, 5, 256, 1},   {6, 16, 257, 0},  {13, 33, 775, 0},
        {97, 129, 64, 1}, {97, 129, 64, 0}, {100, 300, 513, 2}, {200, 70, 40, 1}, {5, 260, 300, 2},
        {193, 257, 130, 0}, {3, 1500, 775, 0}, {7, 1500, 775, 1}, /* two chunks of packed B (1344 columns at K 775) */
    };
    print_message("  gemm path here: %s\n", drift_cpu_gemm_path());
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) check_shape(&shapes[i]);
}

/* Row r of a batch of M rows equals the same row computed alone (M = 1). */
static void test_row_alone(void **st) {
    (void)st;
    const shape s = {50, 70, 600, 0};
    drift_gemm g = make(&s);
    float *all = run(&g, 2, 0);
    for (int64_t r = 0; r < s.M; r += 7) {
        drift_gemm one = g;
        one.M = 1;
        one.a = g.a + r * g.a_m;
        float *c = run(&one, 1, 0);
        assert_same(c, all + r * g.c_m, 1, s.N, g.c_m, "one row alone vs inside the batch");
        free(c);
    }
    free(all);
    free((void *)g.a);
    free((void *)g.b);
    free(g.c);
}

static void test_special_values(void **st) {
    (void)st;
    const shape s = {14, 40, 600, 1};
    drift_gemm g = make(&s);
    float *a = (float *)g.a, *b = (float *)g.b;
    a[3] = INFINITY;
    a[g.a_m + 10] = -0.0f;
    a[2 * g.a_m + 300] = NAN;
    a[4 * g.a_m + 5] = 1e-41f; /* subnormal */
    b[7 * s.N + 2] = -INFINITY;
    b[9 * s.N + 3] = 1e-40f;
    for (int64_t n = 0; n < s.N; n++) b[3 * s.N + n] = 0.0f; /* a row of zeros: inf * 0 = NaN for row 0 */
    for (int64_t k = 0; k < s.K; k++) a[5 * g.a_m + k] = k % 2 ? -0.0f : 0.0f; /* -0 products: the sign of C's zero */
    reference(&g);
    float *c = run(&g, 3, 0), *cs = run(&g, 1, 1);
    assert_same(c, g.c, s.M, s.N, g.c_m, "special values, automatic path");
    assert_same(cs, g.c, s.M, s.N, g.c_m, "special values, scalar path");
    assert_true(isnan(g.c[0]));
    free(c);
    free(cs);
    free(a);
    free(b);
    free(g.c);
}

static void test_k_zero_and_nomem(void **st) {
    (void)st;
    float c[6] = {1, 2, 3, 4, 5, 6}, x = 1.0f;
    drift_gemm g = {2, 3, 0, &x, 0, 1, &x, 1, 0, c, 3};
    assert_int_equal(drift_cpu_gemm(2, &g), 0);
    for (int i = 0; i < 6; i++) assert_true(c[i] == 0.0f);
    const shape s = {10, 10, 10, 0};
    drift_gemm h = make(&s);
    for (long n = 0; n < 2; n++) { /* the packed B, then the A buffers */
        drift_alloc_fail_after(n);
        const int rc = drift_cpu_gemm(2, &h);
        drift_alloc_fail_after(-1);
        assert_int_equal(rc, -1);
    }
    free((void *)h.a);
    free((void *)h.b);
    free(h.c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_documented_order),
        cmocka_unit_test(test_row_alone),
        cmocka_unit_test(test_special_values),
        cmocka_unit_test(test_k_zero_and_nomem),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
