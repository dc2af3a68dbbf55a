/* Recordings of torch.compile'd models (issue 36): the verdict a replay or
 * compare states beside the library verdict, and the compile-floor note. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "cli/cli_util.c"
#include "cli/compiled_out.c"

static void test_verdict(void **state) {
    (void)state;
    drift_libraries l;
    drift_libraries_init(&l);
    char msg[2048];
    assert_int_equal(drift_libraries_compiled_message(&l, "blocks.0:out", msg, sizeof msg), 0);
    assert_string_equal(msg, "");
    assert_int_equal(drift_libraries_compiled_message(NULL, NULL, msg, sizeof msg), 0);
    l.compiled = 1;
    snprintf(l.inductor_mode, sizeof l.inductor_mode, "default");
    snprintf(l.compiled_modules, sizeof l.compiled_modules, "<model>");
    assert_int_equal(drift_libraries_compiled_message(&l, "blocks.0.attn1:out", msg, sizeof msg), 1);
    assert_string_equal(msg, "bitwise equality with the recording is not expected: the recording ran torch.compile'd "
                             "kernels (inductor default; compiled: <model>), replay follows eager semantics; it first "
                             "shows at blocks.0.attn1:out");
    l.inductor_mode[0] = '\0';
    snprintf(l.compiled_modules, sizeof l.compiled_modules, "blocks.\x1b[2J");
    assert_int_equal(drift_libraries_compiled_message(&l, NULL, msg, sizeof msg), 1);
    assert_non_null(strstr(msg, "(inductor mode unknown; compiled: blocks.\\x1b[2J)"));
    assert_non_null(strstr(msg, "; no site diverged"));
    char d[4096];
    drift_libraries_describe(&l, d, sizeof d);
    assert_non_null(strstr(d, ", torch.compile (inductor mode unknown: blocks.\\x1b[2J)"));
}

static void test_floor_note(void **state) {
    (void)state;
    drift_compile_floor f;
    assert_int_equal(drift_compile_floor_parse("graph captured: X", &f), 0);
    assert_int_equal(drift_compile_floor_parse("compile-floor v1 site=output:noise_pred step=3 mean_abs_diff=0.0042 "
                                               "mean_abs=0.8 later=1", &f), 1);
    assert_true(f.known);
    assert_string_equal(f.site, "output:noise_pred");
    assert_int_equal(f.step, 3);
    assert_true(f.mean_abs_diff == 0.0042 && f.mean_abs == 0.8);
    assert_int_equal(drift_compile_floor_parse("compile-floor v1 site=output:noise_pred step=0", &f), -1);
    assert_int_equal(drift_compile_floor_parse("compile-floor v1 site=x step=0 mean_abs_diff=-1", &f), -1);
    assert_int_equal(drift_compile_floor_parse("compile-floor v1 site=x step=0 mean_abs_diff=nan", &f), -1);
    assert_int_equal(drift_compile_floor_parse("compile-floor v1 site=x step=a mean_abs_diff=1", &f), -1);
    assert_int_equal(drift_compile_floor_parse("compile-floor v1 junk", &f), -1);
    assert_false(f.known);
}

static void test_text(void **state) {
    (void)state;
    drift_libraries l;
    drift_libraries_init(&l);
    l.compiled = 1;
    snprintf(l.inductor_mode, sizeof l.inductor_mode, "max-autotune");
    drift_compile_floor fl;
    assert_int_equal(drift_compile_floor_parse("compile-floor v1 site=output:noise_pred step=0 mean_abs_diff=0.5", &fl), 1);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    drift_cli_compiled_text(f, "  ", &l, NULL, &fl);
    fclose(f);
    assert_non_null(strstr(buf, "  compiled: bitwise equality with the recording is not expected"));
    assert_non_null(strstr(buf, "  compile floor: output:noise_pred mean |eager - compiled| 0.5 at step 0 (compilation alone)"));
    free(buf);
    /* a plain recording: nothing */
    drift_libraries_init(&l);
    memset(&fl, 0, sizeof fl);
    f = open_memstream(&buf, &n);
    drift_cli_compiled_text(f, "  ", &l, NULL, &fl);
    fclose(f);
    assert_string_equal(buf, "");
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_verdict), cmocka_unit_test(test_floor_note),
                                       cmocka_unit_test(test_text)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
