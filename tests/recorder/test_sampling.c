/* Tests of recorder/sampling.c: step specs, site glob lists and the
 * recorder's option string (through drift_recorder_open's errors). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "recorder/recorder.h"

/* Parses spec; asserts success. */
static drift_recorder_steps *steps(const char *spec) {
    drift_recorder_steps *s = NULL;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_recorder_steps_parse(&s, spec, &err);
    if (rc) fail_msg("steps \"%s\": %s", spec, err.msg);
    assert_non_null(s);
    return s;
}

/* Steps 0..n-1 that match, as a string "0,5,10". */
static void matches(const drift_recorder_steps *s, int n, char *buf, size_t bufsz) {
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && k < bufsz; i++)
        if (drift_recorder_steps_match(s, i)) k += (size_t)snprintf(buf + k, bufsz - k, "%s%d", k ? "," : "", i);
}

static void expect_steps(const char *spec, int n, const char *want) {
    drift_recorder_steps *s = steps(spec);
    char got[1024];
    matches(s, n, got, sizeof got);
    if (strcmp(got, want) != 0) fail_msg("steps \"%s\" over 0..%d: got {%s}, expected {%s}", spec, n - 1, got, want);
    drift_recorder_steps_free(s);
}

static void test_step_specs(void **state) {
    (void)state;
    expect_steps("every:5", 21, "0,5,10,15,20");
    expect_steps("every:1", 4, "0,1,2,3");
    expect_steps("0,5,10", 12, "0,5,10");
    expect_steps("3:6", 10, "3,4,5,6");           /* both ends included */
    expect_steps("7:7", 10, "7");
    expect_steps("8:", 11, "8,9,10");
    expect_steps(":2", 10, "0,1,2");
    expect_steps("0:2,every:4", 13, "0,1,2,4,8,12");
    expect_steps(" 1 , 3:4 ,every:10 ", 21, "0,1,3,4,10,20");
    expect_steps("all", 3, "0,1,2");
    expect_steps("*", 3, "0,1,2");
    expect_steps("none", 5, "");
    expect_steps("  none ", 5, "");
    /* large steps */
    drift_recorder_steps *s = steps("100:200,every:1000000007");
    assert_true(drift_recorder_steps_match(s, 100));
    assert_true(drift_recorder_steps_match(s, 200));
    assert_false(drift_recorder_steps_match(s, 201));
    assert_false(drift_recorder_steps_match(s, 99));
    assert_true(drift_recorder_steps_match(s, 2000000014));
    assert_false(drift_recorder_steps_match(s, -5)); /* negative steps never match */
    drift_recorder_steps_free(s);
    s = steps("4611686018427387904"); /* 2^62 */
    assert_true(drift_recorder_steps_match(s, (int64_t)1 << 62));
    drift_recorder_steps_free(s);
    drift_recorder_steps_free(NULL);
}

static void expect_bad_steps(const char *spec, const char *needle) {
    drift_recorder_steps *s = (drift_recorder_steps *)0x1;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_recorder_steps_parse(&s, spec, &err);
    if (rc != DRIFT_E_USAGE) fail_msg("steps \"%s\": rc %d, expected DRIFT_E_USAGE", spec ? spec : "(null)", rc);
    assert_null(s);
    assert_int_equal(err.code, DRIFT_E_USAGE);
    if (!strstr(err.msg, needle)) fail_msg("steps \"%s\": message \"%s\" lacks \"%s\"", spec, err.msg, needle);
}

static void test_step_spec_errors(void **state) {
    (void)state;
    expect_bad_steps("", "empty step spec");
    expect_bad_steps("   ", "empty step spec");
    expect_bad_steps(NULL, "NULL");
    expect_bad_steps("every:0", "every:N needs an integer N >= 1");
    expect_bad_steps("every:", "every:N");
    expect_bad_steps("every:x", "every:N");
    expect_bad_steps("every:-3", "every:N");
    expect_bad_steps("5:3", "range end is before its start");
    expect_bad_steps("1,,2", "empty item");
    expect_bad_steps("1,", "empty item");
    expect_bad_steps(",1", "empty item");
    expect_bad_steps("-1", "not a non-negative integer");
    expect_bad_steps("1.5", "not a non-negative integer");
    expect_bad_steps("abc", "item \"abc\"");
    expect_bad_steps("1:2:3", "more than one ':'");
    expect_bad_steps(":", "at least one bound");
    expect_bad_steps("x:3", "range start");
    expect_bad_steps("3:y", "range end");
    expect_bad_steps("4611686018427387905", "not a non-negative integer"); /* 2^62 + 1 */
    expect_bad_steps("99999999999999999999999", "not a non-negative integer");
    expect_bad_steps("none,3", "cannot be combined");
    /* the message names the whole spec and the expected grammar */
    drift_recorder_steps *s = NULL;
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_recorder_steps_parse(&s, "0:10,evry:50", &err), DRIFT_E_USAGE);
    assert_non_null(strstr(err.msg, "\"0:10,evry:50\""));
    assert_non_null(strstr(err.msg, "every:N"));
    assert_string_equal(err.where, "store_steps");
}

static int site_match(const char *globs, const char *site) {
    drift_recorder_sites *s = NULL;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_recorder_sites_parse(&s, globs, &err);
    if (rc) fail_msg("sites \"%s\": %s", globs, err.msg);
    int m = drift_recorder_sites_match(s, site);
    drift_recorder_sites_free(s);
    return m;
}

static void test_site_globs(void **state) {
    (void)state;
    assert_true(site_match("*", "blocks.3.ffn:out"));
    assert_true(site_match("blocks.*:out", "blocks.3.ffn:out"));   /* '*' crosses dots */
    assert_false(site_match("blocks.*:out", "blocks.3.ffn:in"));
    assert_true(site_match("output:*,blocks.?.ffn:out", "blocks.3.ffn:out"));
    assert_false(site_match("output:*,blocks.?.ffn:out", "blocks.13.ffn:out"));
    assert_true(site_match("output:*, input:*:post_cast", "input:latents:post_cast")); /* spaces trimmed */
    assert_false(site_match("output:*", "Output:noise_pred"));     /* case-sensitive */
    assert_true(site_match("blocks.[0-2].*", "blocks.1.attn1:out"));
    assert_false(site_match("blocks.[!0-2].*", "blocks.1.attn1:out"));
    /* excludes */
    assert_false(site_match("blocks.*,!blocks.*.ffn:*", "blocks.3.ffn:out"));
    assert_true(site_match("blocks.*,!blocks.*.ffn:*", "blocks.3.attn1:out"));
    assert_true(site_match("!blocks.*", "output:noise_pred")); /* excludes only: the rest */
    assert_false(site_match("!blocks.*", "blocks.0:out"));
    assert_false(site_match("none", "anything"));
    assert_false(site_match("output:*", ""));

    const char *bad[] = {"", " ", "a,,b", "a,", "!", "a,!", "none,a"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        drift_recorder_sites *s = NULL;
        drift_err err;
        drift_err_clear(&err);
        int rc = drift_recorder_sites_parse(&s, bad[i], &err);
        if (rc != DRIFT_E_USAGE) fail_msg("sites \"%s\": rc %d, expected DRIFT_E_USAGE", bad[i], rc);
        assert_null(s);
        assert_string_equal(err.where, "store_sites");
    }
    drift_recorder_sites_free(NULL);
}

/* Options are parsed before the file is created: a bad option creates nothing. */
static void expect_bad_option(const char *opts, const char *needle) {
    char path[512];
    const char *tmp = getenv("DRIFT_TMP");
    snprintf(path, sizeof path, "%s/sampling_opts.h5", tmp && tmp[0] ? tmp : "/tmp");
    remove(path);
    drift_recorder *r = (drift_recorder *)0x1;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_recorder_open(&r, path, 0, 0, 1, "run", "tiny-dit", 1.0, "{}", opts, &err);
    if (rc != DRIFT_E_USAGE) fail_msg("options \"%s\": rc %d, expected DRIFT_E_USAGE", opts, rc);
    assert_null(r);
    if (!strstr(err.msg, needle)) fail_msg("options \"%s\": message \"%s\" lacks \"%s\"", opts, err.msg, needle);
    /* the same text through the thread's last error */
    if (!strstr(drift_recorder_last_error(), needle))
        fail_msg("last error \"%s\" lacks \"%s\"", drift_recorder_last_error(), needle);
    FILE *f = fopen(path, "rb");
    if (f) {
        fclose(f);
        fail_msg("options \"%s\": the trace was created anyway", opts);
    }
}

static void test_option_errors(void **state) {
    (void)state;
    expect_bad_option("staging_mb=0", "staging_mb=0: expected an integer in 1..1048576");
    expect_bad_option("staging_mb=12x", "staging_mb");
    expect_bad_option("policy=wait", "expected drop_step or block");
    expect_bad_option("store_steps=every:0", "every:N needs an integer N >= 1");
    expect_bad_option("store_steps=5:1", "range end is before its start");
    expect_bad_option("store_sites=a,,b", "empty glob");
    expect_bad_option("bogus=1", "unknown recorder option \"bogus\"");
    expect_bad_option("policy", "expected key=value");
    expect_bad_option("auto_start=maybe", "expected 1 or 0");
    expect_bad_option("compress=zstd", "expected none, deflate or blosc");
    expect_bad_option("block_timeout_ms=-1", "block_timeout_ms");
    expect_bad_option("max_pending=0", "max_pending");
}

static void test_option_ok(void **state) {
    (void)state;
    char path[512];
    const char *tmp = getenv("DRIFT_TMP");
    snprintf(path, sizeof path, "%s/sampling_ok.h5", tmp && tmp[0] ? tmp : "/tmp");
    drift_recorder *r = NULL;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_recorder_open(&r, path, 1, 0, 1, "run", "tiny-dit", 1.0, NULL,
                                 " staging_bytes=65536 ; policy=block\nblock_timeout_ms=5;store_steps=0:10,every:50;"
                                 "store_sites=blocks.*,!blocks.*.ffn:*;;max_pending=8;quiet=1;producer=test 1.0",
                                 &err);
    if (rc) fail_msg("open: %s", err.msg);
    assert_int_equal(drift_recorder_counter(r, DRIFT_RECORDER_STAGING_BYTES), 65536);
    int64_t shp[1] = {4};
    int id = -1;
    assert_int_equal(drift_recorder_declare_site(r, "blocks.1:out", DRIFT_F32, 1, shp, &id, &err), DRIFT_OK);
    assert_int_equal(id, 0);
    assert_int_equal(drift_recorder_declare_site(r, "blocks.1.ffn:out", DRIFT_F32, 1, shp, &id, &err), DRIFT_OK);
    assert_int_equal(id, 1);
    assert_int_equal(drift_recorder_begin_step(r, 20, &err), DRIFT_OK);
    assert_int_equal(drift_recorder_wants_tensor(r, "blocks.1:out"), 0); /* step 20 not sampled */
    assert_int_equal(drift_recorder_end_step(r, &err), DRIFT_OK);
    assert_int_equal(drift_recorder_begin_step(r, 50, &err), DRIFT_OK);
    assert_int_equal(drift_recorder_wants_tensor(r, "blocks.1:out"), 1);
    assert_int_equal(drift_recorder_wants_tensor(r, "blocks.1.ffn:out"), 0);
    assert_int_equal(drift_recorder_wants_tensor(r, "output:x"), 0);
    assert_int_equal(drift_recorder_end_step(r, &err), DRIFT_OK);
    assert_int_equal(drift_recorder_close(r, &err), DRIFT_OK);
    assert_string_equal(drift_recorder_counter_name(DRIFT_RECORDER_DROPPED), "dropped");
    assert_string_equal(drift_recorder_counter_name(99), "?");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_specs),      cmocka_unit_test(test_step_spec_errors),
        cmocka_unit_test(test_site_globs),      cmocka_unit_test(test_option_errors),
        cmocka_unit_test(test_option_ok),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
