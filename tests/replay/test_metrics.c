/* Tests of replay/metrics: every formula against values worked out by hand.
 * Expected values are exact unless a comment says otherwise; where a value
 * involves a rounding (a division, a square root, expm1), the literal is the
 * correctly rounded double, as printed by %.17g (checked with python3). */
#include <math.h>
#include <float.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "replay/analysis/metrics.h"

#define ASSERT_EXACT(got, want)                                                                     \
    do {                                                                                            \
        double g_ = (double)(got), w_ = (double)(want);                                             \
        if (!(g_ == w_)) fail_msg("%s = %.17g, expected %.17g (exact)", #got, g_, w_);              \
    } while (0)

/* |got - want| <= tol (tol: one unit of the last printed digit). */
#define ASSERT_NEAR(got, want, tol)                                                                 \
    do {                                                                                            \
        double g_ = (double)(got), w_ = (double)(want);                                             \
        if (!(fabs(g_ - w_) <= (tol)))                                                              \
            fail_msg("%s = %.17g, expected %.17g (tolerance %g)", #got, g_, w_, (double)(tol));     \
    } while (0)

static void acc_equal(const drift_metric_acc *a, const drift_metric_acc *b) {
    ASSERT_EXACT(a->sum_abs_diff, b->sum_abs_diff);
    ASSERT_EXACT(a->sum_sq_diff, b->sum_sq_diff);
    ASSERT_EXACT(a->sum_tr, b->sum_tr);
    ASSERT_EXACT(a->sum_tt, b->sum_tt);
    ASSERT_EXACT(a->sum_rr, b->sum_rr);
    ASSERT_EXACT(a->max_abs_diff, b->max_abs_diff);
    ASSERT_EXACT(a->max_abs_ref, b->max_abs_ref);
    assert_int_equal(a->argmax, b->argmax);
    assert_int_equal(a->numel, b->numel);
    assert_int_equal(a->nan_t, b->nan_t);
    assert_int_equal(a->inf_t, b->inf_t);
    assert_int_equal(a->nan_r, b->nan_r);
    assert_int_equal(a->inf_r, b->inf_r);
    assert_int_equal(a->n_diff, b->n_diff);
}

/* t = {1, 2, 3.5, -4}, r = {1, 2.5, 3, -4.25}
 * d = t - r = {0, -0.5, 0.5, 0.25}, |d| = {0, 0.5, 0.5, 0.25}
 * sum|d| = 1.25 -> mean = 1.25 / 4 = 0.3125
 * sum d^2 = 0 + 0.25 + 0.25 + 0.0625 = 0.5625 -> rmse = sqrt(0.5625 / 4) = sqrt(0.140625) = 0.375
 * max|d| = 0.5, first at index 1 (index 2 ties, the first wins)
 * max|r| = 4.25 -> rel_max = 0.5 / (4.25 + 1e-30) = 0.5 / 4.25 = 2/17 = 0.11764705882352941
 *   (4.25 + 1e-30 == 4.25 in fp64)
 * sum tr = 1 + 5 + 10.5 + 17 = 33.5; sum tt = 1 + 4 + 12.25 + 16 = 33.25;
 * sum rr = 1 + 6.25 + 9 + 18.0625 = 34.3125
 * cosine = 33.5 / sqrt(33.25 * 34.3125) = 33.5 / sqrt(1140.890625)
 *        = 33.5 / 33.777072475275299 = 0.99179702517208630
 * n_diff = 3 (indices 1, 2, 3) */
static const float T4[4] = {1.0f, 2.0f, 3.5f, -4.0f};
static const float R4[4] = {1.0f, 2.5f, 3.0f, -4.25f};

static void test_basic_hand(void **state) {
    (void)state;
    drift_metric_acc acc;
    drift_metric_acc_init(&acc);
    drift_metrics_accumulate_f32(T4, R4, 4, &acc);
    ASSERT_EXACT(acc.sum_abs_diff, 1.25);
    ASSERT_EXACT(acc.sum_sq_diff, 0.5625);
    ASSERT_EXACT(acc.sum_tr, 33.5);
    ASSERT_EXACT(acc.sum_tt, 33.25);
    ASSERT_EXACT(acc.sum_rr, 34.3125);
    ASSERT_EXACT(acc.max_abs_ref, 4.25);

    drift_site_metrics m;
    drift_metrics_finish(&acc, 1.0, &m);
    assert_int_equal(m.numel, 4);
    ASSERT_EXACT(m.mean_abs_diff, 0.3125);
    ASSERT_EXACT(m.max_abs_diff, 0.5);
    ASSERT_EXACT(m.rmse, 0.375);
    ASSERT_EXACT(m.rel_max, 0.11764705882352941);
    ASSERT_EXACT(m.rel_max, 2.0 / 17.0);
    ASSERT_EXACT(m.cosine, 0.9917970251720863);
    assert_int_equal(m.argmax, 1);
    assert_int_equal(m.n_diff, 3);
    assert_int_equal(m.bitwise_equal, 0);
    assert_int_equal(m.nan_t + m.inf_t + m.nan_r + m.inf_r, 0);
    /* s = 1: no CFG division */
    ASSERT_EXACT(m.cfg_divisor, 1.0);
    ASSERT_EXACT(m.mean_abs_diff_cfg, 0.3125);
    ASSERT_EXACT(m.max_abs_diff_cfg, 0.5);
    ASSERT_EXACT(m.rmse_cfg, 0.375);
    assert_int_equal(m.has_ulp, 0);
}

/* CFG: abs-diff metrics divided by s when s > 0 and s != 1.
 * s = 5: 0.3125 / 5 = 0.0625 (exact), 0.5 / 5 = 0.1, 0.375 / 5 = 0.075
 * (0.1 and 0.075 are the correctly rounded quotients, equal to the literals).
 * s = 0.5: 0.3125 / 0.5 = 0.625, 0.5 / 0.5 = 1, 0.375 / 0.5 = 0.75.
 * rel_max and cosine are ratios: unchanged. */
static void test_cfg_division(void **state) {
    (void)state;
    drift_metric_acc acc;
    drift_metric_acc_init(&acc);
    drift_metrics_accumulate_f32(T4, R4, 4, &acc);
    drift_site_metrics m;

    drift_metrics_finish(&acc, 5.0, &m);
    ASSERT_EXACT(m.cfg_divisor, 5.0);
    ASSERT_EXACT(m.mean_abs_diff_cfg, 0.0625);
    ASSERT_EXACT(m.max_abs_diff_cfg, 0.1);
    ASSERT_EXACT(m.rmse_cfg, 0.075);
    ASSERT_EXACT(m.mean_abs_diff, 0.3125); /* raw kept */
    ASSERT_EXACT(m.max_abs_diff, 0.5);
    ASSERT_EXACT(m.rmse, 0.375);
    ASSERT_EXACT(m.rel_max, 2.0 / 17.0);
    ASSERT_EXACT(m.cosine, 0.9917970251720863);

    drift_metrics_finish(&acc, 0.5, &m);
    ASSERT_EXACT(m.cfg_divisor, 0.5);
    ASSERT_EXACT(m.mean_abs_diff_cfg, 0.625);
    ASSERT_EXACT(m.max_abs_diff_cfg, 1.0);
    ASSERT_EXACT(m.rmse_cfg, 0.75);

    /* no division: s = 1, 0, negative, NaN, inf */
    const double no_cfg[] = {1.0, 0.0, -2.0, NAN, INFINITY};
    for (size_t i = 0; i < sizeof no_cfg / sizeof no_cfg[0]; i++) {
        drift_metrics_finish(&acc, no_cfg[i], &m);
        ASSERT_EXACT(m.cfg_divisor, 1.0);
        ASSERT_EXACT(m.mean_abs_diff_cfg, 0.3125);
        ASSERT_EXACT(m.max_abs_diff_cfg, 0.5);
        ASSERT_EXACT(m.rmse_cfg, 0.375);
    }
}

/* rel_max's guard: r = {0, 0, 0}, t = {0, 3, -1}: max|d| = 3, max|r| = 0,
 * rel_max = 3 / (0 + 1e-30) = 3 / 1e-30 = 3e+30 (the fp64 quotient of 3 by
 * the double nearest 1e-30 rounds to the double nearest 3e30). mean = 4/3 = 1.3333333333333333,
 * cosine = 0 (r is the zero vector, t is not), argmax = 1.
 * Both zero: rel_max = 0 / 1e-30 = 0, cosine = 1, bitwise equal, argmax 0
 * (the first element attains the max 0). */
static void test_rel_max_guard(void **state) {
    (void)state;
    const float t[3] = {0.0f, 3.0f, -1.0f}, r[3] = {0.0f, 0.0f, 0.0f};
    drift_metric_acc acc;
    drift_metric_acc_init(&acc);
    drift_metrics_accumulate_f32(t, r, 3, &acc);
    drift_site_metrics m;
    drift_metrics_finish(&acc, 1.0, &m);
    ASSERT_EXACT(m.rel_max, 3.0 / 1e-30);
    ASSERT_EXACT(m.rel_max, 3e30);
    ASSERT_NEAR(m.rel_max / 3e30, 1.0, 1e-15);
    ASSERT_EXACT(m.mean_abs_diff, 1.3333333333333333);
    ASSERT_EXACT(m.cosine, 0.0);
    assert_int_equal(m.argmax, 1);
    ASSERT_EXACT(drift_metrics_rel_max(3.0, 0.0), 3.0 / 1e-30);
    ASSERT_EXACT(drift_metrics_rel_max(0.5, 4.25), 2.0 / 17.0);

    drift_metric_acc_init(&acc);
    drift_metrics_accumulate_f32(r, r, 3, &acc);
    drift_metrics_finish(&acc, 1.0, &m);
    ASSERT_EXACT(m.rel_max, 0.0);
    ASSERT_EXACT(m.cosine, 1.0);
    ASSERT_EXACT(m.mean_abs_diff, 0.0);
    assert_int_equal(m.bitwise_equal, 1);
    assert_int_equal(m.argmax, 0);
}

/* Cosine edge cases:
 *  t = -r: sum_tr = -S, sum_tt = sum_rr = S -> -S / sqrt(S * S) = -1
 *  t = 2r, r = {1, 2, 2}: sum_tr = 18, sum_tt = 36, sum_rr = 9 -> 18 / sqrt(324) = 18 / 18 = 1
 *  orthogonal {1, 0} . {0, 1} = 0 -> 0
 *  t = 0, r != 0 -> 0 (defined); t != 0, r = 0 -> 0; both 0 -> 1 (defined) */
static double cosine_of(const float *t, const float *r, size_t n) {
    drift_metric_acc acc;
    drift_site_metrics m;
    drift_metric_acc_init(&acc);
    drift_metrics_accumulate_f32(t, r, n, &acc);
    drift_metrics_finish(&acc, 1.0, &m);
    return m.cosine;
}

static void test_cosine_edges(void **state) {
    (void)state;
    const float r[3] = {1.0f, 2.0f, 2.0f}, neg[3] = {-1.0f, -2.0f, -2.0f}, dbl[3] = {2.0f, 4.0f, 4.0f};
    const float zero[3] = {0.0f, 0.0f, 0.0f};
    const float e0[2] = {1.0f, 0.0f}, e1[2] = {0.0f, 1.0f};
    ASSERT_EXACT(cosine_of(neg, r, 3), -1.0);
    ASSERT_EXACT(cosine_of(dbl, r, 3), 1.0);
    ASSERT_EXACT(cosine_of(r, r, 3), 1.0);
    ASSERT_EXACT(cosine_of(e0, e1, 2), 0.0);
    ASSERT_EXACT(cosine_of(zero, r, 3), 0.0);
    ASSERT_EXACT(cosine_of(r, zero, 3), 0.0);
    ASSERT_EXACT(cosine_of(zero, zero, 3), 1.0);
    ASSERT_EXACT(cosine_of(NULL, NULL, 0), 1.0); /* empty: both zero vectors */
}

/* Non-finite handling: pairs with a NaN/inf on either side are counted and
 * skipped by the sums and maxima, but count in numel.
 *   i  t        r      d        bits differ?
 *   0  NaN      -NaN   skipped  no (NaN == NaN, whatever the sign/payload)
 *   1  1        1.5    -0.5     yes
 *   2  inf      1      skipped  yes
 *   3  2        2      0        no
 *   4  NaN(pl)  3      skipped  yes
 *   5  inf      inf    skipped  no
 *   6  0        -0     0        yes (+0 and -0 differ in bits)
 *   7  -1       -inf   skipped  yes
 * sum|d| = 0.5, numel = 8 -> mean = 0.0625; max|d| = 0.5 at index 1;
 * max|r| over finite pairs = max(1.5, 2, 0) = 2 -> rel_max = 0.25;
 * sum d^2 = 0.25 -> rmse = sqrt(0.25 / 8) = sqrt(0.03125) = 0.1767766952966369;
 * nan_t = 2 (0, 4), inf_t = 2 (2, 5), nan_r = 1 (0), inf_r = 2 (5, 7); n_diff = 5. */
static void test_nan_inf(void **state) {
    (void)state;
    const float qnan_payload = drift_bits_f32(0x7fc00123u);
    const float t[8] = {NAN, 1.0f, INFINITY, 2.0f, qnan_payload, INFINITY, 0.0f, -1.0f};
    const float r[8] = {-NAN, 1.5f, 1.0f, 2.0f, 3.0f, INFINITY, -0.0f, -INFINITY};
    drift_metric_acc acc;
    drift_metric_acc_init(&acc);
    drift_metrics_accumulate_f32(t, r, 8, &acc);
    drift_site_metrics m;
    drift_metrics_finish(&acc, 1.0, &m);
    assert_int_equal(m.numel, 8);
    ASSERT_EXACT(m.mean_abs_diff, 0.0625);
    ASSERT_EXACT(m.max_abs_diff, 0.5);
    assert_int_equal(m.argmax, 1);
    ASSERT_EXACT(acc.max_abs_ref, 2.0);
    ASSERT_EXACT(m.rel_max, 0.25);
    ASSERT_EXACT(m.rmse, 0.1767766952966369);
    assert_int_equal(m.nan_t, 2);
    assert_int_equal(m.inf_t, 2);
    assert_int_equal(m.nan_r, 1);
    assert_int_equal(m.inf_r, 2);
    assert_int_equal(m.n_diff, 5);
    assert_false(isnan(m.cosine));
    assert_false(isnan(m.mean_abs_diff));

    /* all-NaN on both sides: bitwise "equal", nothing in the sums, argmax -1 */
    const float nn[2] = {NAN, NAN};
    drift_metric_acc_init(&acc);
    drift_metrics_accumulate_f32(nn, nn, 2, &acc);
    drift_metrics_finish(&acc, 1.0, &m);
    assert_int_equal(m.n_diff, 0);
    assert_int_equal(m.bitwise_equal, 1);
    assert_int_equal(m.argmax, -1);
    assert_int_equal(m.nan_t, 2);
    assert_int_equal(m.nan_r, 2);
    ASSERT_EXACT(m.mean_abs_diff, 0.0);
}

/* First-occurrence argmax: |d| = {0, 1, 0, 1} -> 1, not 3. */
static void test_argmax_first(void **state) {
    (void)state;
    const float t[4] = {0.0f, 1.0f, 0.0f, 1.0f}, r[4] = {0.0f, 0.0f, 0.0f, 2.0f};
    drift_metric_acc acc;
    drift_metric_acc_init(&acc);
    drift_metrics_accumulate_f32(t, r, 4, &acc);
    assert_int_equal(acc.argmax, 1);
    ASSERT_EXACT(acc.max_abs_diff, 1.0);
}

/* t = {1, 2, 3.5, -4, 9, 0.5, 7}, r = {1, 2.5, 3, -4.25, 8, 0, 8}:
 * |d| = {0, .5, .5, .25, 1, .5, 1}: max 1 first at index 4 (index 6 ties).
 * Chunks [0,2) [2,5) [5,7) into one acc, and three accs merged, both equal
 * the one pass (every sum here is exact, so the order does not matter). */
static const float T7[7] = {1.0f, 2.0f, 3.5f, -4.0f, 9.0f, 0.5f, 7.0f};
static const float R7[7] = {1.0f, 2.5f, 3.0f, -4.25f, 8.0f, 0.0f, 8.0f};

static void test_chunks_and_merge(void **state) {
    (void)state;
    drift_metric_acc one, chunked, a, b, c;
    drift_metric_acc_init(&one);
    drift_metrics_accumulate_f32(T7, R7, 7, &one);
    assert_int_equal(one.argmax, 4);
    ASSERT_EXACT(one.sum_abs_diff, 3.75);
    assert_int_equal(one.n_diff, 6);

    drift_metric_acc_init(&chunked);
    drift_metrics_accumulate_f32(T7, R7, 2, &chunked);
    drift_metrics_accumulate_f32(T7 + 2, R7 + 2, 3, &chunked);
    drift_metrics_accumulate_f32(T7 + 5, R7 + 5, 2, &chunked);
    acc_equal(&chunked, &one);

    drift_metric_acc_init(&a);
    drift_metric_acc_init(&b);
    drift_metric_acc_init(&c);
    drift_metrics_accumulate_f32(T7, R7, 2, &a);
    drift_metrics_accumulate_f32(T7 + 2, R7 + 2, 3, &b);
    drift_metrics_accumulate_f32(T7 + 5, R7 + 5, 2, &c);
    assert_int_equal(b.argmax, 2); /* local index of 9 vs 8 inside b */
    drift_metric_acc_merge(&a, &b);
    drift_metric_acc_merge(&a, &c);
    acc_equal(&a, &one);

    drift_site_metrics m1, m2;
    drift_metrics_finish(&one, 3.0, &m1);
    drift_metrics_finish(&a, 3.0, &m2);
    ASSERT_EXACT(m1.mean_abs_diff, m2.mean_abs_diff);
    ASSERT_EXACT(m1.cosine, m2.cosine);
    ASSERT_EXACT(m1.rmse_cfg, m2.rmse_cfg);
}

/* Batched view (2, 3):
 *   row 0: t = {1, 2, 3},   r = {1, 2, 4}:  |d| = {0, 0, 1},    max|r| = 4    -> rel 0.25
 *   row 1: t = {0.5, 0, 0}, r = {0.25, 0, 0}: |d| = {0.25, 0, 0}, max|r| = 0.25 -> rel 1
 * per-row MAX = 1; the whole tensor's rel_max would be 1 / 4 = 0.25.
 * mean over all = (1 + 0.25) / 6 = 0.20833333333333334. */
static void test_batched_rel_max(void **state) {
    (void)state;
    const float t[6] = {1.0f, 2.0f, 3.0f, 0.5f, 0.0f, 0.0f}, r[6] = {1.0f, 2.0f, 4.0f, 0.25f, 0.0f, 0.0f};
    drift_metric_acc acc;
    drift_err err;
    drift_err_clear(&err);
    double rel = 0.0;
    drift_metric_acc_init(&acc);
    assert_int_equal(drift_metrics_accumulate_batched_f32(t, r, 2, 6, &acc, &rel, &err), DRIFT_OK);
    ASSERT_EXACT(rel, 1.0);
    drift_site_metrics m;
    drift_metrics_finish(&acc, 1.0, &m);
    ASSERT_EXACT(m.mean_abs_diff, 0.20833333333333334);
    ASSERT_EXACT(m.rel_max, 0.25); /* acc-global: one group */
    assert_int_equal(m.argmax, 2);

    /* batch = 1: the per-micro-batch rel_max = 0.25 */
    rel = 0.0;
    drift_metric_acc_init(&acc);
    assert_int_equal(drift_metrics_accumulate_batched_f32(t, r, 1, 6, &acc, &rel, &err), DRIFT_OK);
    ASSERT_EXACT(rel, 0.25);

    /* rel is in/out: a second micro-batch (row 1 only) raises the MAX to 1 */
    assert_int_equal(drift_metrics_accumulate_batched_f32(t + 3, r + 3, 1, 3, &acc, &rel, &err), DRIFT_OK);
    ASSERT_EXACT(rel, 1.0);
    assert_int_equal(acc.numel, 9);

    /* errors: batch 0, n not a multiple of batch; nothing added */
    drift_metric_acc_init(&acc);
    rel = 0.0;
    assert_int_equal(drift_metrics_accumulate_batched_f32(t, r, 0, 6, &acc, &rel, &err), DRIFT_E_INPUT);
    assert_int_equal(err.code, DRIFT_E_INPUT);
    drift_err_clear(&err);
    assert_int_equal(drift_metrics_accumulate_batched_f32(t, r, 4, 6, &acc, &rel, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "6 elements"));
    assert_int_equal(acc.numel, 0);
    ASSERT_EXACT(rel, 0.0);
}

/* ULP distances.
 * bf16: 1.0 = 0x3f80; 1.0078125 = 1 + 2^-7 = 0x3f81 -> 1 ULP;
 *       2.0 = 0x4000 vs 1.9921875 = 2 - 2^-7 = 0x3fff -> 1 ULP;
 *       -1.0 vs 1.0: |d| = 2 in ULPs of 1.0 (2^-7) = 256 ULPs, not the 32512
 *       representable values between them across zero.
 *       max = 256 (index 3), mean = (0 + 1 + 1 + 256) / 4 = 64.5
 * fp16: 1.0 vs 1 + 2^-10 = 1.0009765625 -> 1 ULP
 * fp32: 1.0 vs nextafterf(1, 2) -> 1 ULP; 0 vs -0 -> 0 ULP */
static void test_ulp(void **state) {
    (void)state;
    const float t[4] = {1.0f, 1.0078125f, 2.0f, -1.0f}, r[4] = {1.0f, 1.0f, 1.9921875f, 1.0f};
    drift_ulp_acc u;
    drift_metrics_ulp_init(&u);
    drift_metrics_accumulate_ulp_f32(t, r, 4, DRIFT_BF16, &u);
    assert_true(u.max_ulp == 256u);
    assert_int_equal(u.argmax, 3);
    assert_int_equal(u.count, 4);
    drift_site_metrics m;
    memset(&m, 0, sizeof m);
    drift_metrics_finish_ulp(&u, DRIFT_BF16, &m);
    assert_int_equal(m.has_ulp, 1);
    assert_int_equal(m.ulp_dtype, DRIFT_BF16);
    assert_true(m.ulp_max == 256u);
    ASSERT_EXACT(m.ulp_mean, 64.5);

    /* merge of [0,2) and [2,4) equals one pass */
    drift_ulp_acc a, b;
    drift_metrics_ulp_init(&a);
    drift_metrics_ulp_init(&b);
    drift_metrics_accumulate_ulp_f32(t, r, 2, DRIFT_BF16, &a);
    drift_metrics_accumulate_ulp_f32(t + 2, r + 2, 2, DRIFT_BF16, &b);
    drift_metrics_merge_ulp(&a, &b);
    assert_true(a.max_ulp == u.max_ulp);
    assert_int_equal(a.argmax, 3);
    ASSERT_EXACT(a.sum_ulp, u.sum_ulp);
    assert_int_equal(a.count, u.count);
    assert_int_equal(a.numel, 4);

    const float h1 = 1.0f, h2 = 1.0009765625f;
    drift_metrics_ulp_init(&u);
    drift_metrics_accumulate_ulp_f32(&h1, &h2, 1, DRIFT_F16, &u);
    assert_true(u.max_ulp == 1u);

    const float f1[2] = {1.0f, 0.0f}, f2[2] = {nextafterf(1.0f, 2.0f), -0.0f};
    drift_metrics_ulp_init(&u);
    drift_metrics_accumulate_ulp_f32(f1, f2, 2, DRIFT_F32, &u);
    assert_true(u.max_ulp == 1u);
    assert_int_equal(u.argmax, 0);
    ASSERT_EXACT(u.sum_ulp, 1.0);

    /* fp32 across zero (defect 22.7): -1e-30 vs 1e-30 is 2e-30 / ulp(1e-30)
     * = 2e-30 / 2^(-100-23) ~ 2^24 ULPs, not ~2e9; t in a lower binade than
     * r rounds up: 0.75 vs 1 in bf16 = 0.25 / 2^-7 = 32 */
    const float z1[3] = {-1e-30f, 0.75f, 3.0f}, z2[3] = {1e-30f, 1.0f, 0.0f};
    assert_true(drift_metrics_ulp_of_ref(z1[0], z2[0], DRIFT_F32) < (1u << 25));
    assert_true(drift_metrics_ulp_of_ref(z1[0], z2[0], DRIFT_F32) > (1u << 23));
    assert_true(drift_metrics_ulp_of_ref(z1[1], z2[1], DRIFT_BF16) == 32u);
    /* zero reference: the subnormal spacing of bf16 (2^-133): 3 / 2^-133 */
    assert_true(drift_metrics_ulp_of_ref(z1[2], z2[2], DRIFT_BF16) == (uint64_t)INT64_MAX);
    assert_true(drift_metrics_ulp_of_ref(0x1p-130f, 0.0f, DRIFT_BF16) == 8u);

    /* NaN on one side: max = UINT64_MAX at that index, excluded from the mean;
     * NaN on both sides: 0 ULP. {NaN vs NaN: 0, NaN vs 1: mismatch, 1 vs 1+2^-7: 1}
     * mean = (0 + 1) / 2 = 0.5 */
    const float nt[3] = {NAN, NAN, 1.0078125f}, nr[3] = {NAN, 1.0f, 1.0f};
    drift_metrics_ulp_init(&u);
    drift_metrics_accumulate_ulp_f32(nt, nr, 3, DRIFT_BF16, &u);
    assert_true(u.max_ulp == UINT64_MAX);
    assert_int_equal(u.argmax, 1);
    assert_int_equal(u.nan_mismatch, 1);
    assert_int_equal(u.count, 2);
    drift_metrics_finish_ulp(&u, DRIFT_BF16, &m);
    ASSERT_EXACT(m.ulp_mean, 0.5);
    assert_int_equal(m.ulp_nan_mismatch, 1);
}

/* Zero references (issue 35): a bf16 3 against 0 is 2^134 subnormal ULPs,
 * which drowned every max ulp in 9223372036854775807; such elements count in
 * zero_ref, and max/sum/count cover the rest (1 vs 1+2^-7: 1 ULP). Merging
 * adds the counts. 0 vs -0 is equal, not a zero reference. */
static void test_ulp_zero_reference(void **state) {
    (void)state;
    const float t[4] = {3.0f, 1.0078125f, 0.0f, -2.0f}, r[4] = {0.0f, 1.0f, -0.0f, 0.0f};
    drift_ulp_acc u, v;
    drift_metrics_ulp_init(&u);
    drift_metrics_accumulate_ulp_f32(t, r, 4, DRIFT_BF16, &u);
    assert_true(u.max_ulp == 1u);
    assert_int_equal(u.argmax, 1);
    assert_int_equal(u.zero_ref, 2);
    assert_int_equal(u.count, 2);
    drift_metrics_ulp_init(&v);
    drift_metrics_accumulate_ulp_f32(t, r, 1, DRIFT_BF16, &v);
    drift_metrics_merge_ulp(&u, &v);
    assert_int_equal(u.zero_ref, 3);
    drift_site_metrics m;
    memset(&m, 0, sizeof m);
    drift_metrics_finish_ulp(&u, DRIFT_BF16, &m);
    assert_true(m.ulp_max == 1u);
    assert_int_equal(m.ulp_zero_ref, 3);
    /* readable: exact below a million, powers of ten above, nan for NaN vs number */
    char b[32];
    assert_string_equal(drift_ulp_text(999999u, b, sizeof b), "999999");
    assert_string_equal(drift_ulp_text(3400000000u, b, sizeof b), "3.4e+09");
    assert_string_equal(drift_ulp_text((uint64_t)INT64_MAX, b, sizeof b), "9.2e+18");
    assert_string_equal(drift_ulp_text(UINT64_MAX, b, sizeof b), "nan");
}

/* Site accumulator over two micro-batches (batch = 1 each), bf16 site:
 *   mb 0: t = {1, 2, 3.5, -4}, r = {1, 2.5, 3, -4.25} -> rel 0.5 / 4.25 = 2/17
 *   mb 1: t = {0.5, 0},        r = {0.25, 0}          -> rel 0.25 / 0.25 = 1
 * rel_max = MAX = 1; mean = (1.25 + 0.25) / 6 = 0.25; argmax 1 (0.5 first at 1).
 * bf16 ULPs: mb 0: 1.0 vs 1.0: 0; 2.0 vs 2.5: bf16 ulp at 2 is 2^-6, 0.5 / 2^-6 = 32;
 *   3.5 vs 3.0: 32; -4 vs -4.25: ulp at 4 is 2^-5 -> 8. mb 1: 0.5 vs 0.25: 0x3f00 - 0x3e80 = 128;
 *   0 vs 0: 0. max 128 (index 4), mean (32 + 32 + 8 + 128) / 6 = 200 / 6 = 33.333333333333336 */
static void test_site_acc(void **state) {
    (void)state;
    const float t1[2] = {0.5f, 0.0f}, r1[2] = {0.25f, 0.0f};
    drift_err err;
    drift_err_clear(&err);
    drift_site_acc s, a, b;
    drift_metrics_site_init(&s, DRIFT_BF16);
    assert_int_equal(drift_metrics_site_add_f32(&s, T4, R4, 1, 4, &err), DRIFT_OK);
    assert_int_equal(drift_metrics_site_add_f32(&s, t1, r1, 1, 2, &err), DRIFT_OK);
    drift_site_metrics m;
    drift_metrics_site_finish(&s, 1.0, &m);
    assert_int_equal(s.rows, 2);
    ASSERT_EXACT(m.rel_max, 1.0);
    ASSERT_EXACT(m.mean_abs_diff, 0.25);
    assert_int_equal(m.argmax, 1);
    assert_int_equal(m.has_ulp, 1);
    assert_true(m.ulp_max == 128u);
    ASSERT_EXACT(m.ulp_mean, 200.0 / 6.0);
    ASSERT_EXACT(m.ulp_mean, 33.333333333333336);

    /* same through two site accs merged (two ranks) */
    drift_metrics_site_init(&a, DRIFT_BF16);
    drift_metrics_site_init(&b, DRIFT_BF16);
    assert_int_equal(drift_metrics_site_add_f32(&a, T4, R4, 1, 4, &err), DRIFT_OK);
    assert_int_equal(drift_metrics_site_add_f32(&b, t1, r1, 1, 2, &err), DRIFT_OK);
    drift_metrics_site_merge(&a, &b);
    acc_equal(&a.m, &s.m);
    drift_site_metrics m2;
    drift_metrics_site_finish(&a, 1.0, &m2);
    ASSERT_EXACT(m2.rel_max, 1.0);
    assert_true(m2.ulp_max == 128u);
    ASSERT_EXACT(m2.ulp_mean, m.ulp_mean);
    assert_int_equal(a.ulp.argmax, 4);

    /* no rows yet: finish falls back to the acc (empty) */
    drift_metrics_site_init(&a, DRIFT_DTYPE_INVALID);
    assert_int_equal(a.dtype, DRIFT_F32);
    drift_metrics_site_finish(&a, 1.0, &m2);
    assert_int_equal(m2.numel, 0);
    ASSERT_EXACT(m2.rel_max, 0.0);
    ASSERT_EXACT(m2.cosine, 1.0);
    ASSERT_EXACT(m2.mean_abs_diff, 0.0);
    ASSERT_EXACT(m2.rmse, 0.0);
    assert_int_equal(m2.argmax, -1);
    assert_int_equal(m2.bitwise_equal, 1);
}

/* Log-prob pairs: lp_new = {-1, 0.5, 2}, lp_old = {-1, 0.25, 2.5} -> d = {0, 0.25, -0.5}
 *   mean |d| = 0.75 / 3 = 0.25
 *   ratio: |expm1(0)| = 0, |expm1(0.25)| = 0.28402541668774150,
 *          |expm1(-0.5)| = 0.39346934028736658; sum = 0.67749475697510808,
 *          mean = 0.22583158565836936 (libm expm1; tolerance 1e-17, the last digit)
 *   approx_kl = 0.5 * (0 + 0.0625 + 0.25) / 3 = 0.5 * (0.3125 / 3) = 0.052083333333333336
 *   max |d| = 0.5 */
static void test_logprob(void **state) {
    (void)state;
    const float lp_new[3] = {-1.0f, 0.5f, 2.0f}, lp_old[3] = {-1.0f, 0.25f, 2.5f};
    drift_logprob_acc acc;
    drift_logprob_metrics m;
    drift_metrics_logprob_init(&acc);
    drift_metrics_accumulate_logprob_f32(lp_new, lp_old, 3, &acc);
    drift_metrics_finish_logprob(&acc, &m);
    assert_int_equal(m.count, 3);
    assert_int_equal(m.n_nonfinite, 0);
    ASSERT_EXACT(m.log_prob_mean_abs_diff, 0.25);
    ASSERT_NEAR(m.ratio_abs_minus_1, 0.22583158565836936, 1e-17);
    ASSERT_EXACT(m.approx_kl, 0.052083333333333336);
    ASSERT_EXACT(m.max_abs_diff, 0.5);

    /* merged from two micro-batches (or ranks) == one pass */
    drift_logprob_acc a, b;
    drift_logprob_metrics m2;
    drift_metrics_logprob_init(&a);
    drift_metrics_logprob_init(&b);
    drift_metrics_accumulate_logprob_f32(lp_new, lp_old, 1, &a);
    drift_metrics_accumulate_logprob_f32(lp_new + 1, lp_old + 1, 2, &b);
    drift_metrics_merge_logprob(&a, &b);
    drift_metrics_finish_logprob(&a, &m2);
    assert_int_equal(m2.count, 3);
    ASSERT_EXACT(m2.log_prob_mean_abs_diff, m.log_prob_mean_abs_diff);
    ASSERT_EXACT(m2.ratio_abs_minus_1, m.ratio_abs_minus_1);
    ASSERT_EXACT(m2.approx_kl, m.approx_kl);
    ASSERT_EXACT(m2.max_abs_diff, 0.5);

    /* identical log-probs: everything exactly 0 */
    drift_metrics_logprob_init(&a);
    drift_metrics_accumulate_logprob_f32(lp_old, lp_old, 3, &a);
    drift_metrics_finish_logprob(&a, &m2);
    ASSERT_EXACT(m2.log_prob_mean_abs_diff, 0.0);
    ASSERT_EXACT(m2.ratio_abs_minus_1, 0.0);
    ASSERT_EXACT(m2.approx_kl, 0.0);

    /* a non-finite pair counts in count and n_nonfinite, adds nothing:
     * pairs (NaN, 0) and (1, 0.5): mean |d| = 0.5 / 2 = 0.25,
     * approx_kl = 0.5 * 0.25 / 2 = 0.0625 */
    drift_metrics_logprob_init(&a);
    drift_metrics_add_logprob_pair(&a, NAN, 0.0);
    drift_metrics_add_logprob_pair(&a, 1.0, 0.5);
    drift_metrics_finish_logprob(&a, &m2);
    assert_int_equal(m2.count, 2);
    assert_int_equal(m2.n_nonfinite, 1);
    ASSERT_EXACT(m2.log_prob_mean_abs_diff, 0.25);
    ASSERT_EXACT(m2.approx_kl, 0.0625);

    /* empty: zeros */
    drift_metrics_logprob_init(&a);
    drift_metrics_finish_logprob(&a, &m2);
    assert_int_equal(m2.count, 0);
    ASSERT_EXACT(m2.ratio_abs_minus_1, 0.0);
}

/* value / floor: 2e-2 / 6.7e-4 = 29.850746268656717 (fp64 quotient);
 * 1.5 / 0.5 = 3; (1, 0) -> inf; (0, 0) -> 0; (0, 5) -> 0; NaN -> NaN. */
static void test_floor_ratio(void **state) {
    (void)state;
    ASSERT_EXACT(drift_metrics_floor_ratio(1.5, 0.5), 3.0);
    ASSERT_EXACT(drift_metrics_floor_ratio(2e-2, 6.7e-4), 2e-2 / 6.7e-4);
    ASSERT_NEAR(drift_metrics_floor_ratio(2e-2, 6.7e-4), 29.850746268656717, 1e-14);
    assert_true(isinf(drift_metrics_floor_ratio(1.0, 0.0)));
    assert_true(drift_metrics_floor_ratio(1.0, 0.0) > 0);
    ASSERT_EXACT(drift_metrics_floor_ratio(0.0, 0.0), 0.0);
    ASSERT_EXACT(drift_metrics_floor_ratio(0.0, 5.0), 0.0);
    assert_true(isnan(drift_metrics_floor_ratio(NAN, 1.0)));
    assert_true(isnan(drift_metrics_floor_ratio(1.0, NAN)));
}

/* Nudge by one ULP. fp32, every element:
 *   1 -> 1 + 2^-23;  -1 -> -(1 - 2^-24);  +0 and -0 -> 2^-149 (smallest subnormal);
 *   FLT_MAX -> nextafterf(FLT_MAX, -inf) (steps down, stays finite);
 *   +inf, NaN unchanged (not counted); -inf -> -FLT_MAX.  Changed: 6 of 8. */
static void test_nudge(void **state) {
    (void)state;
    float x[8] = {1.0f, -1.0f, 0.0f, -0.0f, FLT_MAX, INFINITY, NAN, -INFINITY};
    const float before[8] = {1.0f, -1.0f, 0.0f, -0.0f, FLT_MAX, INFINITY, NAN, -INFINITY};
    assert_int_equal(drift_metrics_nudge_ulp_f32(x, 8, DRIFT_F32, 1.0, 0), 6);
    ASSERT_EXACT(x[0], 1.0 + 0x1p-23);
    ASSERT_EXACT(x[1], -(1.0 - 0x1p-24));
    ASSERT_EXACT(x[2], 0x1p-149);
    ASSERT_EXACT(x[3], 0x1p-149);
    ASSERT_EXACT(x[4], nextafterf(FLT_MAX, 0.0f));
    assert_true(isinf(x[5]) && x[5] > 0);
    assert_true(isnan(x[6]));
    ASSERT_EXACT(x[7], -FLT_MAX);
    for (int i = 0; i < 8; i++) {
        if (i == 5 || i == 6) continue;
        assert_true(drift_dtype_ulp_distance(x[i], before[i], DRIFT_F32) == 1u);
    }

    /* bf16: 1 -> 1 + 2^-7; -1 -> -(1 - 2^-8); max finite 0x7f7f -> 0x7f7e; 0 -> 0x0001 (2^-133) */
    float hb[4] = {1.0f, -1.0f, drift_bf16_to_f32(0x7f7fu), 0.0f};
    assert_int_equal(drift_metrics_nudge_ulp_f32(hb, 4, DRIFT_BF16, 2.0, 0), 4);
    ASSERT_EXACT(hb[0], 1.0078125);
    ASSERT_EXACT(hb[1], -0.99609375);
    ASSERT_EXACT(hb[2], drift_bf16_to_f32(0x7f7eu));
    ASSERT_EXACT(hb[3], 0x1p-133);

    /* fp16: 1 -> 1 + 2^-10; 65504 (max) -> 65472; -0 -> 2^-24 */
    float hh[3] = {1.0f, 65504.0f, -0.0f};
    assert_int_equal(drift_metrics_nudge_ulp_f32(hh, 3, DRIFT_F16, 1.0, 0), 3);
    ASSERT_EXACT(hh[0], 1.0009765625);
    ASSERT_EXACT(hh[1], 65472.0);
    ASSERT_EXACT(hh[2], 0x1p-24);

    /* subset: deterministic in (seed, index), about the asked fraction,
     * every moved element moved by exactly one ULP */
    enum { N = 10000 };
    static float y1[N], y2[N], y3[N];
    for (int i = 0; i < N; i++) y1[i] = y2[i] = y3[i] = (float)(i - N / 2) * 0.37f;
    size_t c1 = drift_metrics_nudge_ulp_f32(y1, N, DRIFT_F32, 0.25, 42);
    size_t c2 = drift_metrics_nudge_ulp_f32(y2, N, DRIFT_F32, 0.25, 42);
    size_t c3 = drift_metrics_nudge_ulp_f32(y3, N, DRIFT_F32, 0.25, 43);
    assert_int_equal(c1, c2);
    assert_memory_equal(y1, y2, sizeof y1);
    assert_true(c1 > 2250 && c1 < 2750);
    assert_true(c3 > 2250 && c3 < 2750);
    assert_true(memcmp(y1, y3, sizeof y1) != 0);
    size_t moved = 0;
    for (int i = 0; i < N; i++) {
        float orig = (float)(i - N / 2) * 0.37f;
        uint64_t d = drift_dtype_ulp_distance(y1[i], orig, DRIFT_F32);
        assert_true(d <= 1u);
        moved += d;
    }
    assert_int_equal(moved, c1);
    /* chunking does not change the subset when indices line up: the first
     * half nudged alone equals the first half of the whole */
    for (int i = 0; i < N; i++) y2[i] = (float)(i - N / 2) * 0.37f;
    drift_metrics_nudge_ulp_f32(y2, N / 2, DRIFT_F32, 0.25, 42);
    assert_memory_equal(y1, y2, sizeof(float) * (N / 2));

    /* fraction 0 (or NaN): nothing */
    float z[2] = {1.0f, 2.0f};
    assert_int_equal(drift_metrics_nudge_ulp_f32(z, 2, DRIFT_F32, 0.0, 1), 0);
    assert_int_equal(drift_metrics_nudge_ulp_f32(z, 2, DRIFT_F32, NAN, 1), 0);
    ASSERT_EXACT(z[0], 1.0);
    ASSERT_EXACT(z[1], 2.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_hand),
        cmocka_unit_test(test_cfg_division),
        cmocka_unit_test(test_rel_max_guard),
        cmocka_unit_test(test_cosine_edges),
        cmocka_unit_test(test_nan_inf),
        cmocka_unit_test(test_argmax_first),
        cmocka_unit_test(test_chunks_and_merge),
        cmocka_unit_test(test_batched_rel_max),
        cmocka_unit_test(test_ulp),
        cmocka_unit_test(test_ulp_zero_reference),
        cmocka_unit_test(test_site_acc),
        cmocka_unit_test(test_logprob),
        cmocka_unit_test(test_floor_ratio),
        cmocka_unit_test(test_nudge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
