/* formats/err.h's contract: the last drift_err_set wins, NULL err and NULL
 * where are accepted, drift_err_prefix adds context to a set error only,
 * exit codes 0 / 1 / 2. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <string.h>

#include "formats/err.h"

static void test_last_set_wins(void **state) {
    (void)state;
    drift_err e;
    drift_err_clear(&e);
    assert_int_equal(e.code, DRIFT_OK);
    assert_int_equal(drift_err_set(&e, DRIFT_E_INPUT, "plan.json:3:1", "first %d", 1), DRIFT_E_INPUT);
    assert_int_equal(drift_err_set(&e, DRIFT_E_IO, NULL, "second"), DRIFT_E_IO);
    assert_int_equal(e.code, DRIFT_E_IO);
    assert_string_equal(e.where, "");
    assert_string_equal(e.msg, "second");
    assert_int_equal(drift_err_set(NULL, DRIFT_E_NOMEM, "x", "ignored"), DRIFT_E_NOMEM);
}

static void test_prefix(void **state) {
    (void)state;
    drift_err e;
    drift_err_clear(&e);
    drift_err_prefix(&e, "context"); /* nothing set: no-op */
    assert_string_equal(e.msg, "");
    drift_err_set(&e, DRIFT_E_INPUT, "f", "cause");
    drift_err_prefix(&e, "probe slot %d", 2);
    assert_string_equal(e.msg, "probe slot 2: cause");
    drift_err_prefix(NULL, "x");
    char buf[64];
    assert_string_equal(drift_err_format(&e, buf, sizeof buf), "f: probe slot 2: cause");
}

static void test_exit_codes(void **state) {
    (void)state;
    assert_int_equal(drift_err_exit_code(DRIFT_OK), 0);
    assert_int_equal(drift_err_exit_code(DRIFT_E_CHECK), 1);
    assert_int_equal(drift_err_exit_code(DRIFT_E_INPUT), 2);
    assert_int_equal(drift_err_exit_code(DRIFT_E_INTERNAL), 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_last_set_wins),
        cmocka_unit_test(test_prefix),
        cmocka_unit_test(test_exit_codes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
