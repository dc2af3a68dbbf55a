/* Batch-composition notes (formats/batch_note.h): round trip, and every
 * malformed text rejected naming its field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "formats/batch_note.h"
#include "formats/trace.h"

static void test_round_trip(void **state) {
    (void)state;
    drift_batch_composition c, d;
    memset(&c, 0, sizeof c);
    c.micro_batch = 3;
    c.cfg = DRIFT_BATCH_CFG_JOINED;
    c.n = 4;
    int64_t s[4] = {7, 2, 7, 2};
    memcpy(c.samples, s, sizeof s);
    char text[DRIFT_TRACE_NOTE_MAX];
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_batch_note_format(&c, text, sizeof text, &err), DRIFT_OK);
    assert_string_equal(text, "batch-composition v1 micro=3 cfg=joined samples=7,2,7,2");
    assert_true(drift_batch_note_is(text));
    assert_int_equal(drift_batch_note_parse(text, &d, &err), DRIFT_OK);
    assert_int_equal(d.micro_batch, 3);
    assert_int_equal(d.cfg, DRIFT_BATCH_CFG_JOINED);
    assert_int_equal(d.n, 4);
    assert_memory_equal(d.samples, s, sizeof s);
    /* 32 positions of 5-digit ids fit a note */
    c.n = DRIFT_BATCH_NOTE_MAX_SAMPLES;
    for (int i = 0; i < c.n; i++) c.samples[i] = 99968 + i;
    assert_int_equal(drift_batch_note_format(&c, text, sizeof text, &err), DRIFT_OK);
    assert_int_equal(drift_batch_note_parse(text, &d, &err), DRIFT_OK);
    assert_int_equal(d.n, DRIFT_BATCH_NOTE_MAX_SAMPLES);
    assert_int_equal(d.samples[31], 99999);
    /* 32 of 13 digits do not: refused, not truncated */
    for (int i = 0; i < c.n; i++) c.samples[i] = 1000000000000LL + i;
    assert_int_equal(drift_batch_note_format(&c, text, sizeof text, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "bytes"));
}

static void expect_bad(const char *text, const char *field) {
    drift_batch_composition d;
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_batch_note_parse(text, &d, &err), DRIFT_E_INPUT);
    if (!strstr(err.msg, field)) fail_msg("'%s': message '%s' does not name '%s'", text, err.msg, field);
}

static void test_hostile(void **state) {
    (void)state;
    expect_bad("batch v1 micro=0", "does not start");
    expect_bad("batch-composition v1 cfg=none samples=0", "micro");
    expect_bad("batch-composition v1 micro=-1 cfg=none samples=0", "micro");
    expect_bad("batch-composition v1 micro=x cfg=none samples=0", "micro");
    expect_bad("batch-composition v1 micro=0 samples=0", "cfg");
    expect_bad("batch-composition v1 micro=0 cfg=both samples=0", "cfg");
    expect_bad("batch-composition v1 micro=0 cfg=none", "samples");
    expect_bad("batch-composition v1 micro=0 cfg=none samples=", "samples");
    expect_bad("batch-composition v1 micro=0 cfg=none samples=1,,2", "samples");
    expect_bad("batch-composition v1 micro=0 cfg=none samples=1,", "samples");
    expect_bad("batch-composition v1 micro=0 cfg=none samples=-3", "samples");
    expect_bad("batch-composition v1 micro=0 cfg=none samples=99999999999999999999", "samples");
    char many[512] = "batch-composition v1 micro=0 cfg=none samples=0";
    for (int i = 0; i < DRIFT_BATCH_NOTE_MAX_SAMPLES; i++) strcat(many, ",1");
    expect_bad(many, "samples");
    /* formatting checks its fields too */
    drift_batch_composition c;
    memset(&c, 0, sizeof c);
    char text[64];
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_batch_note_format(&c, text, sizeof text, &err), DRIFT_E_INPUT); /* n = 0 */
    c.n = 1;
    c.samples[0] = -1;
    assert_int_equal(drift_batch_note_format(&c, text, sizeof text, &err), DRIFT_E_INPUT);
    c.samples[0] = 1;
    assert_int_equal(drift_batch_note_format(&c, text, 8, &err), DRIFT_E_INPUT); /* does not fit */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_hostile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
