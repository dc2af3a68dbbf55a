/* replay/analysis: the worst element (largest |d|) of a site, its two values
 * (drift_site_acc worst_t/worst_r) and, in a drift_sitecmp, its step and
 * offset within that step, through chunked adds, merges and step order. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "replay/analysis/metrics.h"
#include "replay/analysis/sitecmp.h"

static void test_chunks(void **state) {
    (void)state;
    drift_site_acc a;
    drift_metrics_site_init(&a, DRIFT_F32);
    assert_true(isnan(a.worst_t) && isnan(a.worst_r));
    const float t0[4] = {1, 2, 3, 4}, r0[4] = {1, 2.5f, 3, 4}; /* |d| 0.5 at 1 */
    const float t1[4] = {0, 0, 7, 0}, r1[4] = {0, 0, 5, 0};     /* |d| 2 at 2 (global 6) */
    const float t2[4] = {9, 0, 0, 0}, r2[4] = {7, 0, 0, 0};     /* |d| 2 again: a tie keeps the first */
    assert_int_equal(drift_metrics_site_add_f32(&a, t0, r0, 1, 4, NULL), DRIFT_OK);
    assert_true(a.worst_t == 2.0f && a.worst_r == 2.5f);
    assert_int_equal(drift_metrics_site_add_f32(&a, t1, r1, 1, 4, NULL), DRIFT_OK);
    assert_int_equal(a.m.argmax, 6);
    assert_true(a.worst_t == 7.0f && a.worst_r == 5.0f);
    assert_int_equal(drift_metrics_site_add_f32(&a, t2, r2, 1, 4, NULL), DRIFT_OK);
    assert_int_equal(a.m.argmax, 6);
    assert_true(a.worst_t == 7.0f && a.worst_r == 5.0f);
}

static void test_merge(void **state) {
    (void)state;
    const float t[3] = {1, 2, 3}, r[3] = {1, 2, 3.25f}, u[3] = {0, -4, 0}, v[3] = {0, 0, 0};
    drift_site_acc a, b, one;
    drift_metrics_site_init(&a, DRIFT_F32);
    drift_metrics_site_init(&b, DRIFT_F32);
    assert_int_equal(drift_metrics_site_add_f32(&a, t, r, 1, 3, NULL), DRIFT_OK);
    assert_int_equal(drift_metrics_site_add_f32(&b, u, v, 1, 3, NULL), DRIFT_OK);
    one = a;
    drift_metrics_site_merge(&one, &b); /* b's |d| 4 wins */
    assert_int_equal(one.m.argmax, 4);
    assert_true(one.worst_t == -4.0f && one.worst_r == 0.0f);
    one = b;
    drift_metrics_site_merge(&one, &a); /* b first: its worst stays */
    assert_int_equal(one.m.argmax, 1);
    assert_true(one.worst_t == -4.0f && one.worst_r == 0.0f);
    /* merging equals one pass over the concatenation */
    drift_site_acc all;
    drift_metrics_site_init(&all, DRIFT_F32);
    assert_int_equal(drift_metrics_site_add_f32(&all, t, r, 1, 3, NULL), DRIFT_OK);
    assert_int_equal(drift_metrics_site_add_f32(&all, u, v, 1, 3, NULL), DRIFT_OK);
    drift_site_acc m = a;
    drift_metrics_site_merge(&m, &b);
    assert_int_equal(m.m.argmax, all.m.argmax);
    assert_true(m.worst_t == all.worst_t && m.worst_r == all.worst_r);
}

static void test_sitecmp_steps(void **state) {
    (void)state;
    drift_sitecmp c;
    drift_sitecmp_init(&c, 1.0);
    const float same[4] = {1, 2, 3, 4};
    const float off[4] = {1, 2, 3.5f, 4}, off2[4] = {1, 2.25f, 3, 4};
    drift_trace_metric row;
    drift_sitecmp_begin_step(&c); /* step 10: equal */
    assert_int_equal(drift_sitecmp_add(&c, "s", DRIFT_F32, same, same, 4, 1, 10, &row, NULL), DRIFT_OK);
    drift_sitecmp_entry *e = drift_sitecmp_find(&c, "s");
    assert_non_null(e);
    assert_int_equal(e->worst_step, -1);
    assert_int_equal(e->worst_offset, -1);
    drift_sitecmp_begin_step(&c); /* step 11: |d| 0.25 at offset 1 */
    assert_int_equal(drift_sitecmp_add(&c, "s", DRIFT_F32, off2, same, 4, 1, 11, &row, NULL), DRIFT_OK);
    assert_int_equal(e->worst_step, 11);
    assert_int_equal(e->worst_offset, 1);
    drift_sitecmp_begin_step(&c); /* step 12: |d| 0.5 at offset 2 wins */
    assert_int_equal(drift_sitecmp_add(&c, "s", DRIFT_F32, off, same, 4, 1, 12, &row, NULL), DRIFT_OK);
    assert_int_equal(e->worst_step, 12);
    assert_int_equal(e->worst_offset, 2);
    assert_true(e->acc.worst_t == 3.5f && e->acc.worst_r == 3.0f);
    drift_sitecmp_begin_step(&c); /* step 13: smaller again, nothing moves */
    assert_int_equal(drift_sitecmp_add(&c, "s", DRIFT_F32, off2, same, 4, 1, 13, &row, NULL), DRIFT_OK);
    assert_int_equal(e->worst_step, 12);
    assert_int_equal(e->worst_offset, 2);
    drift_sitecmp_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunks),
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_sitecmp_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
