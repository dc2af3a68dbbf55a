/* ATTENTION's layout attribute (kernels/backend.h) on the host backends:
 * layout 1 (q, k, v, out [B, L, H, D]) gives bitwise the result of layout 0
 * ([B, H, L, D]) on the permuted data, on cpu (float bits) and ref (double
 * bits), for odd shapes: Lq != Lk, Lk not a multiple of 64, B = 2, H = 3,
 * Dv != Dh, Lq larger than the cpu backend's query tile, operands not yet in
 * the compute dtype, NaN and inf inputs. Also: shape inference and
 * validation of layout 1 (mismatches named, unknown layouts refused), and a
 * check that the comparison can fail (a permuted-back result that is not
 * transposed differs). */
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
#include "test_rand.h"

static uint64_t g_rng = 12345;

static float *rand_vals(int64_t n, double a, drift_dtype dt) { return test_rand_vals(&g_rng, n, a, dt); }

/* [B, n1, n2, D] -> [B, n2, n1, D]. */
static void swap12(const float *src, float *dst, int64_t B, int64_t n1, int64_t n2, int64_t D) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < n1; i++)
            for (int64_t j = 0; j < n2; j++)
                memcpy(dst + ((b * n2 + j) * n1 + i) * D, src + ((b * n1 + i) * n2 + j) * D, (size_t)D * sizeof(float));
}
static void swap12d(const double *src, double *dst, int64_t B, int64_t n1, int64_t n2, int64_t D) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < n1; i++)
            for (int64_t j = 0; j < n2; j++)
                memcpy(dst + ((b * n2 + j) * n1 + i) * D, src + ((b * n1 + i) * n2 + j) * D,
                       (size_t)D * sizeof(double));
}

static drift_tensor mk(const drift_backend *be, drift_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d,
                       const float *vals) {
    drift_tensor t;
    drift_err err;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = 4;
    t.shape[0] = a, t.shape[1] = b, t.shape[2] = c, t.shape[3] = d;
    t.be = be;
    if (drift_backend_alloc(be, &t, &err)) fail_msg("alloc: %s", err.msg);
    if (vals && drift_backend_upload_f32(be, &t, vals, &err)) fail_msg("upload: %s", err.msg);
    return t;
}

typedef struct acase {
    int64_t B, H, Lq, Lk, Dh, Dv;
    drift_dtype in_dt, compute, out;
    float scale;
    int specials; /* NaN in q, inf in k and v */
} acase;

/* Runs layout 0 on [B, H, L, D] data and layout 1 on its permutation on be;
 * the layout-1 result must equal the permuted layout-0 result bit for bit.
 * Returns the number of differing elements of a deliberately wrong
 * comparison (layout-1 result vs the unpermuted layout-0 result), which the
 * caller expects > 0 when H > 1 and Lq > 1. */
static int64_t check_case(const drift_backend *be, const acase *c) {
    drift_err err;
    const int64_t nq = c->B * c->H * c->Lq * c->Dh, nk = c->B * c->H * c->Lk * c->Dh, nv = c->B * c->H * c->Lk * c->Dv,
                  no = c->B * c->H * c->Lq * c->Dv;
    float *q = rand_vals(nq, 2.0, c->in_dt), *k = rand_vals(nk, 2.0, c->in_dt), *v = rand_vals(nv, 1.0, c->in_dt);
    if (c->specials) {
        q[(((c->B - 1) * c->H + (c->H - 1)) * c->Lq + (c->Lq - 1)) * c->Dh] = NAN;
        k[c->Dh + 1 < nk ? c->Dh + 1 : 0] = INFINITY;
        v[nv / 2] = -INFINITY;
    }
    float *q1 = malloc((size_t)nq * sizeof(float)), *k1 = malloc((size_t)nk * sizeof(float)),
          *v1 = malloc((size_t)nv * sizeof(float));
    assert_true(q1 && k1 && v1);
    swap12(q, q1, c->B, c->H, c->Lq, c->Dh);
    swap12(k, k1, c->B, c->H, c->Lk, c->Dh);
    swap12(v, v1, c->B, c->H, c->Lk, c->Dv);

    drift_tensor tq0 = mk(be, c->in_dt, c->B, c->H, c->Lq, c->Dh, q), tk0 = mk(be, c->in_dt, c->B, c->H, c->Lk, c->Dh, k),
                 tv0 = mk(be, c->in_dt, c->B, c->H, c->Lk, c->Dv, v), to0 = mk(be, c->out, c->B, c->H, c->Lq, c->Dv, NULL);
    drift_tensor tq1 = mk(be, c->in_dt, c->B, c->Lq, c->H, c->Dh, q1),
                 tk1 = mk(be, c->in_dt, c->B, c->Lk, c->H, c->Dh, k1),
                 tv1 = mk(be, c->in_dt, c->B, c->Lk, c->H, c->Dv, v1),
                 to1 = mk(be, c->out, c->B, c->Lq, c->H, c->Dv, NULL);
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = DRIFT_OP_ATTENTION;
    op.compute = c->compute;
    op.out = c->out;
    op.n_in = 3;
    op.scale = c->scale;
    const drift_tensor *in0[3] = {&tq0, &tk0, &tv0}, *in1[3] = {&tq1, &tk1, &tv1};
    if (drift_backend_run(be, &op, in0, &to0, &err)) fail_msg("%s layout 0: %s: %s", drift_backend_name(be), err.where, err.msg);
    op.layout = 1;
    if (drift_backend_run(be, &op, in1, &to1, &err)) fail_msg("%s layout 1: %s: %s", drift_backend_name(be), err.where, err.msg);

    double *o0 = malloc((size_t)no * sizeof(double)), *o0p = malloc((size_t)no * sizeof(double)),
           *o1 = malloc((size_t)no * sizeof(double));
    assert_true(o0 && o0p && o1);
    assert_int_equal(drift_backend_download_f64(be, &to0, o0, &err), DRIFT_OK);
    assert_int_equal(drift_backend_download_f64(be, &to1, o1, &err), DRIFT_OK);
    swap12d(o0, o0p, c->B, c->H, c->Lq, c->Dv);
    int64_t bad = 0, nonfinite = 0, wrong = 0;
    for (int64_t i = 0; i < no; i++) {
        int same = (isnan(o1[i]) && isnan(o0p[i])) || memcmp(&o1[i], &o0p[i], sizeof(double)) == 0;
        if (!same && bad++ < 5)
            fprintf(stderr, "  %s B=%lld H=%lld Lq=%lld Lk=%lld: element %lld: layout 1 %.17g vs layout 0 %.17g\n",
                    drift_backend_name(be), (long long)c->B, (long long)c->H, (long long)c->Lq, (long long)c->Lk, (long long)i,
                    o1[i], o0p[i]);
        nonfinite += !isfinite(o1[i]);
        wrong += !((isnan(o1[i]) && isnan(o0[i])) || memcmp(&o1[i], &o0[i], sizeof(double)) == 0);
    }
    assert_int_equal(bad, 0);
    if (c->specials) assert_true(nonfinite > 0);
    else assert_int_equal(nonfinite, 0);

    drift_tensor *ts[8] = {&tq0, &tk0, &tv0, &to0, &tq1, &tk1, &tv1, &to1};
    for (int i = 0; i < 8; i++) drift_backend_release(be, ts[i]);
    free(q), free(k), free(v), free(q1), free(k1), free(v1), free(o0), free(o0p), free(o1);
    return wrong;
}

static const acase k_cases[] = {
    {2, 3, 5, 70, 16, 16, DRIFT_BF16, DRIFT_BF16, DRIFT_BF16, 0.0f, 0},
    {1, 2, 65, 129, 64, 64, DRIFT_BF16, DRIFT_BF16, DRIFT_F32, 0.0f, 0},
    {2, 3, 130, 7, 8, 12, DRIFT_F16, DRIFT_F16, DRIFT_F16, 0.25f, 0},   /* Dv != Dh, Lq > Lk */
    {2, 3, 33, 77, 32, 32, DRIFT_F32, DRIFT_BF16, DRIFT_BF16, 0.0f, 0}, /* operands rounded to compute first */
    {2, 3, 17, 40, 16, 16, DRIFT_F32, DRIFT_F32, DRIFT_F32, 0.0f, 0},
    {2, 3, 9, 65, 8, 8, DRIFT_BF16, DRIFT_BF16, DRIFT_BF16, 0.0f, 1},   /* NaN / inf */
    {1, 1, 1, 1, 2, 2, DRIFT_BF16, DRIFT_BF16, DRIFT_BF16, 0.0f, 0},
    {1, 3, 70, 1, 4, 4, DRIFT_BF16, DRIFT_BF16, DRIFT_F32, 0.0f, 0},    /* one key */
};

static void run_all(const char *name) {
    drift_backend *be = NULL;
    drift_err err;
    assert_int_equal(drift_backend_create(name, &be, &err), DRIFT_OK);
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        int64_t wrong = check_case(be, &k_cases[i]);
        if (k_cases[i].H > 1 && k_cases[i].Lq > 1) assert_true(wrong > 0); /* the check can fail */
    }
    drift_backend_free(be);
}

static void test_cpu(void **state) {
    (void)state;
    run_all("cpu");
}

static void test_ref(void **state) {
    (void)state;
    run_all("ref");
}

/* The cpu backend tiles queries (tile = max(64, 2^20 / Lk) rows): Lq above
 * the tile in layout 1 too. */
static void test_cpu_query_tiles(void **state) {
    (void)state;
    drift_backend *be = NULL;
    drift_err err;
    assert_int_equal(drift_backend_create("cpu", &be, &err), DRIFT_OK);
    const acase c = {2, 3, 150, 20000, 8, 8, DRIFT_BF16, DRIFT_BF16, DRIFT_BF16, 0.0f, 0};
    assert_true(check_case(be, &c) > 0);
    drift_backend_free(be);
}

static int infer(const drift_op *op, const int64_t *qs, const int64_t *ks, const int64_t *vs, int64_t *out,
                 drift_err *err) {
    drift_tensor t[3];
    memset(t, 0, sizeof t);
    const int64_t *s[3] = {qs, ks, vs};
    const drift_tensor *in[3];
    for (int i = 0; i < 3; i++) {
        t[i].dtype = DRIFT_BF16;
        t[i].ndim = 4;
        memcpy(t[i].shape, s[i], 4 * sizeof(int64_t));
        t[i].numel = s[i][0] * s[i][1] * s[i][2] * s[i][3];
        in[i] = &t[i];
    }
    int nd = 0;
    return drift_op_infer_shape(op, in, &nd, out, err);
}

static void test_infer_shape(void **state) {
    (void)state;
    drift_err err;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = DRIFT_OP_ATTENTION;
    op.compute = op.out = DRIFT_BF16;
    op.n_in = 3;
    op.layout = 1;
    int64_t out[DRIFT_MAX_DIMS] = {0};
    /* [B, L, H, D]: Lq 5, Lk 7, H 3, Dh 16, Dv 8 */
    assert_int_equal(infer(&op, (int64_t[]){2, 5, 3, 16}, (int64_t[]){2, 7, 3, 16}, (int64_t[]){2, 7, 3, 8}, out, &err),
                     DRIFT_OK);
    assert_int_equal(out[0], 2);
    assert_int_equal(out[1], 5);
    assert_int_equal(out[2], 3);
    assert_int_equal(out[3], 8);
    /* heads differ (dim 2 in layout 1) */
    assert_int_equal(infer(&op, (int64_t[]){2, 5, 3, 16}, (int64_t[]){2, 7, 4, 16}, (int64_t[]){2, 7, 4, 16}, out, &err),
                     DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "layout 1"));
    /* k, v lengths differ (dim 1) */
    assert_int_equal(infer(&op, (int64_t[]){2, 5, 3, 16}, (int64_t[]){2, 7, 3, 16}, (int64_t[]){2, 6, 3, 16}, out, &err),
                     DRIFT_E_INPUT);
    /* shapes a layout-0 reading accepts (H 5, Lk 4, below): layout 1 refuses (H 3 vs 4) */
    assert_int_equal(infer(&op, (int64_t[]){2, 5, 3, 16}, (int64_t[]){2, 5, 4, 16}, (int64_t[]){2, 5, 4, 16}, out, &err),
                     DRIFT_E_INPUT);
    op.layout = 0;
    assert_int_equal(infer(&op, (int64_t[]){2, 5, 3, 16}, (int64_t[]){2, 5, 4, 16}, (int64_t[]){2, 5, 4, 16}, out, &err),
                     DRIFT_OK);
    assert_int_equal(out[2], 3);
    op.layout = 2;
    assert_int_equal(infer(&op, (int64_t[]){2, 5, 3, 16}, (int64_t[]){2, 7, 3, 16}, (int64_t[]){2, 7, 3, 16}, out, &err),
                     DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "layout"));
    op.layout = -1;
    assert_int_equal(infer(&op, (int64_t[]){2, 5, 3, 16}, (int64_t[]){2, 7, 3, 16}, (int64_t[]){2, 7, 3, 16}, out, &err),
                     DRIFT_E_INPUT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu),
        cmocka_unit_test(test_ref),
        cmocka_unit_test(test_cpu_query_tiles),
        cmocka_unit_test(test_infer_shape),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
