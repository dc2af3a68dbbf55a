/* ATTENTION's optional additive bias (in3, kernels/backend.h) on the host
 * backends: softmax(scale * q k^T + bias) v against an explicit fp64 math
 * form computed here, for every broadcast pattern SDPA masks produce (a key
 * mask [B, 1, 1, Lk], a per-head full mask [1, H, Lq, Lk], a causal mask
 * [1, 1, Lq, Lk], a full [B, H, Lq, Lk] one), -inf entries (probability 0),
 * a row of -inf (NaN), both layouts (bitwise equal), the cpu backend's flash
 * key tiles (a 16-bit compute with more than 128 keys, a first tile wholly
 * masked), and a bias of zeros equal bit for bit to no bias. Also the shape
 * and dtype checks of the bias (clear errors). */
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

static uint64_t g_rng = 777;

static double unif(void) { return test_unif(&g_rng); }

static float *rand_vals(int64_t n, double a, drift_dtype dt) { return test_rand_vals(&g_rng, n, a, dt); }

static drift_tensor mk(const drift_backend *be, drift_dtype dt, const int64_t *s, const float *vals) {
    drift_tensor t;
    drift_err err;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = 4;
    memcpy(t.shape, s, 4 * sizeof(int64_t));
    t.be = be;
    if (drift_backend_alloc(be, &t, &err)) fail_msg("alloc: %s", err.msg);
    if (vals && drift_backend_upload_f32(be, &t, vals, &err)) fail_msg("upload: %s", err.msg);
    return t;
}

enum { BIAS_NONE, BIAS_KEY, BIAS_HEAD_FULL, BIAS_CAUSAL, BIAS_FULL, BIAS_ZERO, BIAS_ROW_MASKED, BIAS_FIRST_TILE };

typedef struct bcase {
    int64_t B, H, Lq, Lk, D;
    drift_dtype dt; /* q, k, v, compute and out */
    int kind;       /* BIAS_* */
} bcase;

/* The bias's shape for a case. */
static void bias_shape(const bcase *c, int64_t *s) {
    s[0] = c->B, s[1] = c->H, s[2] = c->Lq, s[3] = c->Lk;
    switch (c->kind) {
    case BIAS_KEY: s[1] = s[2] = 1; break;
    case BIAS_HEAD_FULL: s[0] = 1; break;
    case BIAS_CAUSAL: s[0] = s[1] = 1; break;
    case BIAS_ZERO: s[0] = s[1] = s[2] = 1; break;
    case BIAS_FIRST_TILE: s[1] = 1; break;
    default: break;
    }
}

/* Bias values: key masks with -inf on some keys (never a whole row, except
 * BIAS_ROW_MASKED's row 0 of each head), causal 0 / -inf, additive values. */
static float *bias_vals(const bcase *c, const int64_t *s) {
    const int64_t n = s[0] * s[1] * s[2] * s[3];
    float *b = malloc((size_t)n * sizeof(float));
    assert_non_null(b);
    for (int64_t e = 0; e < n; e++) {
        const int64_t j = e % s[3], i = (e / s[3]) % s[2], bb = e / (s[1] * s[2] * s[3]);
        float v = 0.0f;
        switch (c->kind) {
        case BIAS_KEY: v = (j % 3 == 1 || j >= c->Lk - bb) ? -INFINITY : 0.0f; break;
        case BIAS_HEAD_FULL: v = (float)(3.0 * (2.0 * unif() - 1.0)); break;
        case BIAS_CAUSAL: v = j <= i ? 0.0f : -INFINITY; break;
        case BIAS_FULL: v = (j + i) % 4 == 0 ? -INFINITY : (float)(2.0 * unif() - 1.0); break;
        case BIAS_ROW_MASKED: v = i == 0 || j % 2 ? -INFINITY : 0.5f; break;
        case BIAS_FIRST_TILE: v = j < 128 && i % 2 ? -INFINITY : (float)(unif() - 0.5); break;
        default: break;
        }
        b[e] = v;
    }
    return b;
}

/* out[B, H, Lq, D] in double: softmax(scale q k^T + bias) v, bias broadcast. */
static void explicit_form(const bcase *c, const float *q, const float *k, const float *v, const float *bias,
                          const int64_t *bs, double scale, double *out) {
    double *s = malloc((size_t)c->Lk * sizeof(double));
    assert_non_null(s);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Lq; i++) {
                const float *qr = q + ((b * c->H + h) * c->Lq + i) * c->D;
                double m = -INFINITY;
                for (int64_t j = 0; j < c->Lk; j++) {
                    const float *kr = k + ((b * c->H + h) * c->Lk + j) * c->D;
                    double d = 0.0;
                    for (int64_t e = 0; e < c->D; e++) d += (double)qr[e] * kr[e];
                    d *= scale;
                    if (bias)
                        d += bias[(bs[0] > 1 ? b : 0) * bs[1] * bs[2] * bs[3] + (bs[1] > 1 ? h : 0) * bs[2] * bs[3] +
                                  (bs[2] > 1 ? i : 0) * bs[3] + j];
                    s[j] = d;
                    if (d > m) m = d;
                }
                double l = 0.0;
                for (int64_t j = 0; j < c->Lk; j++) l += s[j] = exp(s[j] - m);
                for (int64_t e = 0; e < c->D; e++) {
                    double o = 0.0;
                    for (int64_t j = 0; j < c->Lk; j++) o += s[j] * v[((b * c->H + h) * c->Lk + j) * c->D + e];
                    out[((b * c->H + h) * c->Lq + i) * c->D + e] = o / l;
                }
            }
    free(s);
}

/* Runs the case on be in layout 0 (and layout 1 on permuted data: bitwise the
 * same), compares with the explicit form within tol (relative to max |o|),
 * and returns the layout-0 result (caller frees). */
static double *run_case(const drift_backend *be, const bcase *c, double tol) {
    drift_err err;
    const int64_t nq = c->B * c->H * c->Lq * c->D, nk = c->B * c->H * c->Lk * c->D;
    g_rng = 777 + (uint64_t)(c->Lk * 31 + c->D); /* the same q, k, v whatever the bias */
    float *q = rand_vals(nq, 2.0, c->dt), *k = rand_vals(nk, 2.0, c->dt), *v = rand_vals(nk, 1.0, c->dt);
    int64_t bs[4];
    bias_shape(c, bs);
    float *bias = c->kind == BIAS_NONE ? NULL : bias_vals(c, bs);
    const int64_t qs[4] = {c->B, c->H, c->Lq, c->D}, ks[4] = {c->B, c->H, c->Lk, c->D};
    drift_tensor tq = mk(be, c->dt, qs, q), tk = mk(be, c->dt, ks, k), tv = mk(be, c->dt, ks, v),
                 to = mk(be, c->dt, qs, NULL), tb;
    memset(&tb, 0, sizeof tb);
    if (bias) tb = mk(be, DRIFT_F32, bs, bias);
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = DRIFT_OP_ATTENTION;
    op.compute = op.out = c->dt;
    op.n_in = bias ? 4 : 3;
    const drift_tensor *in[4] = {&tq, &tk, &tv, &tb};
    if (drift_backend_run(be, &op, in, &to, &err))
        fail_msg("%s kind %d: %s: %s", drift_backend_name(be), c->kind, err.where, err.msg);
    const int64_t no = nq;
    double *o = malloc((size_t)no * sizeof(double)), *want = malloc((size_t)no * sizeof(double));
    assert_true(o && want);
    assert_int_equal(drift_backend_download_f64(be, &to, o, &err), DRIFT_OK);
    const double scale = 1.0 / sqrt((double)c->D);
    explicit_form(c, q, k, v, bias, bs, (double)(float)scale, want);
    double big = 0.0, worst = 0.0;
    int64_t nan_rows = 0;
    for (int64_t e = 0; e < no; e++)
        if (isfinite(want[e]) && fabs(want[e]) > big) big = fabs(want[e]);
    for (int64_t e = 0; e < no; e++) {
        if (isnan(want[e])) {
            if (!isnan(o[e])) fail_msg("%s kind %d: element %lld: %g where the math form is NaN", drift_backend_name(be), c->kind, (long long)e, o[e]);
            nan_rows++;
            continue;
        }
        const double d = fabs(o[e] - want[e]) / (big > 0 ? big : 1.0);
        if (!(d <= worst)) worst = d;
    }
    if (!(worst <= tol))
        fail_msg("%s kind %d dt %s: max relative error %.3g > %.3g", drift_backend_name(be), c->kind, drift_dtype_name(c->dt), worst, tol);
    if (c->kind == BIAS_ROW_MASKED) assert_int_equal(nan_rows, c->B * c->H * c->D); /* row 0 of each head */
    else assert_int_equal(nan_rows, 0);

    /* layout 1: [B, L, H, D] operands, the bias as it is: the same bits */
    float *q1 = malloc((size_t)nq * sizeof(float)), *k1 = malloc((size_t)nk * sizeof(float)),
          *v1 = malloc((size_t)nk * sizeof(float));
    assert_true(q1 && k1 && v1);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++) {
            for (int64_t i = 0; i < c->Lq; i++)
                memcpy(q1 + ((b * c->Lq + i) * c->H + h) * c->D, q + ((b * c->H + h) * c->Lq + i) * c->D, (size_t)c->D * 4);
            for (int64_t j = 0; j < c->Lk; j++) {
                memcpy(k1 + ((b * c->Lk + j) * c->H + h) * c->D, k + ((b * c->H + h) * c->Lk + j) * c->D, (size_t)c->D * 4);
                memcpy(v1 + ((b * c->Lk + j) * c->H + h) * c->D, v + ((b * c->H + h) * c->Lk + j) * c->D, (size_t)c->D * 4);
            }
        }
    const int64_t qs1[4] = {c->B, c->Lq, c->H, c->D}, ks1[4] = {c->B, c->Lk, c->H, c->D};
    drift_tensor tq1 = mk(be, c->dt, qs1, q1), tk1 = mk(be, c->dt, ks1, k1), tv1 = mk(be, c->dt, ks1, v1),
                 to1 = mk(be, c->dt, qs1, NULL);
    const drift_tensor *in1[4] = {&tq1, &tk1, &tv1, &tb};
    op.layout = 1;
    if (drift_backend_run(be, &op, in1, &to1, &err)) fail_msg("layout 1: %s: %s", err.where, err.msg);
    double *o1 = malloc((size_t)no * sizeof(double));
    assert_non_null(o1);
    assert_int_equal(drift_backend_download_f64(be, &to1, o1, &err), DRIFT_OK);
    for (int64_t b = 0; b < c->B; b++)
        for (int64_t h = 0; h < c->H; h++)
            for (int64_t i = 0; i < c->Lq; i++)
                for (int64_t e = 0; e < c->D; e++) {
                    const double x0 = o[((b * c->H + h) * c->Lq + i) * c->D + e], x1 = o1[((b * c->Lq + i) * c->H + h) * c->D + e];
                    if (!((isnan(x0) && isnan(x1)) || memcmp(&x0, &x1, sizeof x0) == 0))
                        fail_msg("%s kind %d: layout 1 %.17g vs layout 0 %.17g", drift_backend_name(be), c->kind, x1, x0);
                }
    drift_tensor *ts[9] = {&tq, &tk, &tv, &to, &tq1, &tk1, &tv1, &to1, &tb};
    for (int i = 0; i < (bias ? 9 : 8); i++) drift_backend_release(be, ts[i]);
    free(q), free(k), free(v), free(q1), free(k1), free(v1), free(o1), free(bias), free(want);
    return o;
}

static const bcase k_cases[] = {
    {2, 3, 9, 20, 8, DRIFT_F32, BIAS_KEY},
    {2, 3, 9, 20, 8, DRIFT_F32, BIAS_HEAD_FULL},
    {2, 3, 9, 20, 8, DRIFT_F32, BIAS_CAUSAL},
    {2, 3, 9, 20, 8, DRIFT_F32, BIAS_FULL},
    {2, 3, 9, 20, 8, DRIFT_F32, BIAS_ROW_MASKED},
    {2, 2, 16, 16, 8, DRIFT_F32, BIAS_CAUSAL}, /* Lq == Lk: torch's tril */
    {2, 2, 20, 12, 16, DRIFT_F32, BIAS_CAUSAL}, /* Lq > Lk */
};

static void check_backend(const char *name, double tol32) {
    drift_backend *be = NULL;
    drift_err err;
    assert_int_equal(drift_backend_create(name, &be, &err), DRIFT_OK);
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) free(run_case(be, &k_cases[i], tol32));
    /* 16-bit compute: probabilities rounded; on cpu more than 128 keys take the flash key tiles */
    const bcase b16[] = {{2, 2, 6, 300, 16, DRIFT_BF16, BIAS_FIRST_TILE}, {2, 2, 6, 300, 16, DRIFT_BF16, BIAS_KEY},
                         {1, 2, 5, 40, 8, DRIFT_F16, BIAS_CAUSAL}};
    for (size_t i = 0; i < sizeof b16 / sizeof b16[0]; i++) free(run_case(be, &b16[i], 2e-2));
    drift_backend_free(be);
}

static void test_ref(void **state) {
    (void)state;
    check_backend("ref", 1e-6); /* operands fp32-valued, the oracle in fp64: only the scale's rounding differs */
}

static void test_cpu(void **state) {
    (void)state;
    check_backend("cpu", 2e-5);
}

/* A zero bias (broadcast [1, 1, 1, Lk]) is bit for bit no bias, flash tiles included. */
static void test_zero_bias_is_no_bias(void **state) {
    (void)state;
    const char *names[2] = {"cpu", "ref"};
    for (int n = 0; n < 2; n++) {
        drift_backend *be = NULL;
        drift_err err;
        assert_int_equal(drift_backend_create(names[n], &be, &err), DRIFT_OK);
        for (int big = 0; big < 2; big++) {
            bcase c = {2, 3, 7, big ? 260 : 33, 16, big ? DRIFT_BF16 : DRIFT_F32, BIAS_ZERO};
            double *with = run_case(be, &c, big ? 2e-2 : 2e-5);
            c.kind = BIAS_NONE;
            double *without = run_case(be, &c, big ? 2e-2 : 2e-5);
            assert_memory_equal(with, without, (size_t)(c.B * c.H * c.Lq * c.D) * sizeof(double));
            free(with);
            free(without);
        }
        drift_backend_free(be);
    }
}

static int infer_bias(const int64_t *bshape, drift_dtype bdt, drift_err *err) {
    drift_tensor t[4];
    memset(t, 0, sizeof t);
    const int64_t q[4] = {2, 3, 5, 16}, k[4] = {2, 3, 7, 16};
    const int64_t *s[4] = {q, k, k, bshape};
    const drift_tensor *in[4];
    for (int i = 0; i < 4; i++) {
        t[i].dtype = i == 3 ? bdt : DRIFT_BF16;
        t[i].ndim = 4;
        memcpy(t[i].shape, s[i], 4 * sizeof(int64_t));
        t[i].numel = s[i][0] * s[i][1] * s[i][2] * s[i][3];
        in[i] = &t[i];
    }
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = DRIFT_OP_ATTENTION;
    op.compute = op.out = DRIFT_BF16;
    op.n_in = 4;
    int nd = 0;
    int64_t out[DRIFT_MAX_DIMS];
    return drift_op_infer_shape(&op, in, &nd, out, err);
}

static void test_bias_checks(void **state) {
    (void)state;
    drift_err err;
    assert_int_equal(infer_bias((int64_t[]){2, 3, 5, 7}, DRIFT_F32, &err), DRIFT_OK);
    assert_int_equal(infer_bias((int64_t[]){1, 1, 1, 7}, DRIFT_F32, &err), DRIFT_OK);
    assert_int_equal(infer_bias((int64_t[]){2, 1, 5, 7}, DRIFT_F32, &err), DRIFT_OK);
    /* Lk must be whole */
    assert_int_equal(infer_bias((int64_t[]){2, 3, 5, 1}, DRIFT_F32, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "bias [2, 3, 5, 1]"));
    assert_non_null(strstr(err.msg, "Lk = 7"));
    /* a head count that is neither 1 nor H */
    assert_int_equal(infer_bias((int64_t[]){2, 2, 5, 7}, DRIFT_F32, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "Hb in {1, 3}"));
    /* no keys in the bias */
    assert_int_equal(infer_bias((int64_t[]){3, 5, 7, 0}, DRIFT_F32, &err), DRIFT_E_INPUT);
    /* bf16 bias: fp32 only */
    assert_int_equal(infer_bias((int64_t[]){1, 1, 1, 7}, DRIFT_BF16, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "bias must be fp32"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref),
        cmocka_unit_test(test_cpu),
        cmocka_unit_test(test_zero_bias_is_no_bias),
        cmocka_unit_test(test_bias_checks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
