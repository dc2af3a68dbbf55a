/* drift bisect --fix-out (issue 35): the fix is an edit of the bad plan that
 * keeps the user's globs (replay/search/bisect.c drift_bisect_fix_edit),
 * written pretty (one pattern entry a line) and shown as a line diff against
 * the bad plan (cli/bisect_fix.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "cli/bisect_fix.c"
#include "replay/search/bisect.h"

static void plan_with(drift_plan *p, const char *name, const char *const *globs, const char *const *dtypes, size_t n) {
    drift_plan_init(p);
    snprintf(p->name, sizeof p->name, "%s", name);
    drift_err err;
    for (size_t i = 0; i < n; i++) {
        char v[256];
        snprintf(v, sizeof v, "%s=%s", globs[i], dtypes[i]);
        assert_int_equal(drift_plan_apply_flag(p, "--param-dtype", v, &err), 0);
    }
}

static void test_pretty_round_trip(void **state) {
    (void)state;
    static const char *const g[] = {"*.norm2.*", "blocks.0.norm2.weight"}, *const d[] = {"fp32", "bf16"};
    drift_plan p, q;
    plan_with(&p, "bad \"quoted\"", g, d, 2);
    p.fsdp_reduce_dtype = DRIFT_BF16;
    char *s = drift_bisect_plan_pretty(&p);
    assert_non_null(s);
    /* one key a line, one pattern entry a line */
    assert_non_null(strstr(s, "\n  \"param_dtype_patterns\": [\n    [\"*.norm2.*\", \"fp32\"],\n    [\"blocks.0.norm2.weight\", \"bf16\"]\n  ],\n"));
    assert_non_null(strstr(s, "\n  \"fsdp_reduce_dtype\": \"bf16\",\n"));
    drift_err err;
    drift_plan_init(&q);
    assert_int_equal(drift_plan_parse_json(&q, s, strlen(s), "pretty", &err), 0);
    assert_string_equal(q.name, p.name);
    assert_int_equal(q.n_patterns, 2);
    assert_string_equal(q.patterns[1].glob, "blocks.0.norm2.weight");
    assert_int_equal(q.patterns[1].dtype, DRIFT_BF16);
    assert_int_equal(q.fsdp_reduce_dtype, DRIFT_BF16);
    free(s);
    drift_plan_free(&p);
    drift_plan_free(&q);
    /* no patterns: an empty array on one line */
    drift_plan_init(&p);
    s = drift_bisect_plan_pretty(&p);
    assert_non_null(strstr(s, "\"param_dtype_patterns\": [],\n"));
    free(s);
}

static void test_line_diff(void **state) {
    (void)state;
    char *d = drift_bisect_line_diff("a\nb\n", "a\nb\n", "x", "y", 1);
    assert_string_equal(d, ""); /* equal: nothing */
    free(d);
    d = drift_bisect_line_diff("1\n2\n3\n4\n5\n6\n7\n", "1\n2\n3\n4\nX\n6\n7\n", "bad.json", "fix.json", 1);
    assert_string_equal(d, "--- bad.json\n+++ fix.json\n  ...\n  4\n- 5\n+ X\n  6\n  ...\n");
    free(d);
    d = drift_bisect_line_diff("a\n", "a\nb\n", "x", "y", 1);
    assert_string_equal(d, "--- x\n+++ y\n  a\n+ b\n");
    free(d);
}

/* diffs of one bad glob over four parameters (what --granularity param finds) */
static void param_diffs(drift_plan_diff *x) {
    static const char *const names[] = {"blocks.0.norm2.weight", "blocks.0.norm2.bias", "blocks.1.norm2.weight",
                                        "blocks.1.norm2.bias"};
    memset(x, 0, 4 * sizeof *x);
    for (int i = 0; i < 4; i++) {
        x[i].kind = DRIFT_DIFF_PARAM;
        x[i].which = i;
        snprintf(x[i].name, sizeof x[i].name, "%s", names[i]);
        snprintf(x[i].good_value, sizeof x[i].good_value, "bf16");
        snprintf(x[i].bad_value, sizeof x[i].bad_value, "fp32");
    }
}

static void test_fix_keeps_globs(void **state) {
    (void)state;
    static const char *const g[] = {"*.norm2.*"}, *const d[] = {"fp32"};
    drift_plan good, bad, fix;
    plan_with(&good, "good", NULL, NULL, 0);
    plan_with(&bad, "bad", g, d, 1);
    drift_plan_diff x[4];
    param_diffs(x);
    drift_err err;
    /* one culprit of the four: the glob stays, the culprit gets an exact entry below it */
    size_t one[] = {0};
    assert_int_equal(drift_bisect_fix_edit(&good, &bad, x, 4, one, 1, 1, &fix, &err), 0);
    assert_int_equal(fix.n_patterns, 2);
    assert_string_equal(fix.patterns[0].glob, "*.norm2.*");
    assert_string_equal(fix.patterns[1].glob, "blocks.0.norm2.weight");
    assert_int_equal(fix.patterns[1].dtype, DRIFT_BF16);
    drift_plan_free(&fix);
    /* every difference the glob makes is a culprit: the glob itself goes */
    size_t all[] = {0, 1, 2, 3};
    assert_int_equal(drift_bisect_fix_edit(&good, &bad, x, 4, all, 4, 1, &fix, &err), 0);
    assert_int_equal(fix.n_patterns, 0);
    drift_plan_free(&fix);
    /* globs 0 (the fallback): exact entries for every culprit, the glob kept */
    assert_int_equal(drift_bisect_fix_edit(&good, &bad, x, 4, all, 4, 0, &fix, &err), 0);
    assert_int_equal(fix.n_patterns, 5);
    assert_string_equal(fix.patterns[0].glob, "*.norm2.*");
    drift_plan_free(&fix);
    /* the good plan's glob the bad plan dropped comes back; a flag takes the good value */
    drift_plan_free(&good);
    drift_plan_free(&bad);
    static const char *const gg[] = {"*.norm2.*"}, *const gd[] = {"fp32"};
    plan_with(&good, "good", gg, gd, 1);
    plan_with(&bad, "bad", NULL, NULL, 0);
    bad.diffusion_forward_dtype = DRIFT_F32;
    drift_plan_diff y[2];
    memset(y, 0, sizeof y);
    y[0].kind = DRIFT_DIFF_FLAG;
    y[0].which = 2;
    y[1].kind = DRIFT_DIFF_PATTERN_DROP;
    y[1].which = 0;
    size_t both[] = {0, 1};
    assert_int_equal(drift_bisect_fix_edit(&good, &bad, y, 2, both, 2, 1, &fix, &err), 0);
    assert_int_equal(fix.diffusion_forward_dtype, DRIFT_BF16);
    assert_int_equal(fix.n_patterns, 1);
    assert_string_equal(fix.patterns[0].glob, "*.norm2.*");
    assert_string_equal(fix.name, "bad"); /* the caller renames it */
    drift_plan_free(&fix);
    drift_plan_free(&good);
    drift_plan_free(&bad);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pretty_round_trip),
        cmocka_unit_test(test_line_diff),
        cmocka_unit_test(test_fix_keeps_globs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
