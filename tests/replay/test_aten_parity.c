/* Parity per op-registry row (issue 31; tests/parity/aten_parity.h): every
 * row of replay/capture/aten_registry.c has a case in
 * tests/data/parity/aten_cases.jsonl (made by tests/parity/aten_cases.py),
 * a registry without a case is reported, and every case imports and runs on
 * ref, the fp64 oracle and cpu within its stated tolerance (bitwise with ref
 * where the op is exact). tests/gpu/test_parity.c runs the same cases on cuda. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "formats/json.h"
#include "tests/parity/aten_parity.h"

static aten_parity_set *load_cases(const char *file) {
    const char *src = getenv("DRIFT_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", file);
    drift_err e;
    drift_err_clear(&e);
    aten_parity_set *s = NULL;
    if (aten_parity_load(path, &s, &e)) fail_msg("%s: %s: %s", path, e.where, e.msg);
    return s;
}

static void test_every_row_has_a_case(void **st) {
    (void)st;
    aten_parity_set *s = load_cases("tests/data/parity/aten_cases.jsonl");
    char buf[4096];
    int missing = aten_parity_missing_rows(s, NULL, 0, buf, sizeof buf);
    if (missing)
        fail_msg("%d registry rows have no parity case (add them to tests/parity/aten_cases.py and regenerate "
                 "tests/data/parity/aten_cases.jsonl): %s", missing, buf);
    print_message("  %d cases cover every registry row\n", aten_parity_count(s));
    aten_parity_free(s);
}

/* The check can fail: a case set of the first line alone misses rows, and a name no case calls is reported. */
static void test_missing_row_is_reported(void **st) {
    (void)st;
    const char *tmp = getenv("DRIFT_TMP");
    char path[4096];
    snprintf(path, sizeof path, "%s/one_case.jsonl", tmp ? tmp : "/tmp");
    aten_parity_set *all = load_cases("tests/data/parity/aten_cases.jsonl");
    const char *src = getenv("DRIFT_SRC");
    char in[4096];
    snprintf(in, sizeof in, "%s/tests/data/parity/aten_cases.jsonl", src ? src : ".");
    FILE *f = fopen(in, "rb"), *g = fopen(path, "wb");
    assert_non_null(f);
    assert_non_null(g);
    int ch;
    while ((ch = fgetc(f)) != EOF && ch != '\n') fputc(ch, g);
    fputc('\n', g);
    fclose(f);
    fclose(g);
    drift_err e;
    drift_err_clear(&e);
    aten_parity_set *one = NULL;
    assert_int_equal(aten_parity_load(path, &one, &e), 0);
    assert_int_equal(aten_parity_count(one), 1);
    char buf[8192];
    int missing = aten_parity_missing_rows(one, NULL, 0, buf, sizeof buf);
    assert_true(missing > 100);
    assert_non_null(strstr(buf, "scaled_dot_product_attention"));
    const char *names[] = {"add", "scatter_reduce", "frobnicate"};
    assert_int_equal(aten_parity_missing_rows(all, names, 3, buf, sizeof buf), 1);
    assert_string_equal(buf, "frobnicate");
    aten_parity_free(one);
    aten_parity_free(all);
}

/* The checks can fail: an NMSE bound no fp32 exp meets, a captured shape the op does not give,
 * and an "exact" case that rounds (a sum of 1000-ish terms is not bitwise with the unrounded ref). */
static void test_checks_can_fail(void **st) {
    (void)st;
    const char *tmp = getenv("DRIFT_TMP");
    char path[4096];
    snprintf(path, sizeof path, "%s/bad_cases.jsonl", tmp ? tmp : "/tmp");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    static const char *const head =
        "{\"format\":\"drift-aten-graph\",\"version\":1,\"nodes\":[{\"name\":\"x\",\"op\":\"placeholder\",\"target\":\"x\","
        "\"args\":[],\"kwargs\":{},\"val\":{\"shape\":[4,8],\"dtype\":\"float32\"},\"module\":\"\"},"
        "{\"name\":\"y\",\"op\":\"call_function\",\"target\":\"%s\",\"args\":[{\"node\":\"x\"}%s],\"kwargs\":{},"
        "\"val\":{\"shape\":%s,\"dtype\":\"float32\"},\"module\":\"m\"},{\"name\":\"output\",\"op\":\"output\","
        "\"target\":\"output\",\"args\":[[{\"node\":\"y\"}]],\"kwargs\":{},\"val\":null,\"module\":\"\"}],"
        "\"inputs\":[{\"node\":\"x\",\"kind\":\"buffer\",\"target\":\"x\"}],\"outputs\":[{\"node\":\"y\",\"name\":\"o\"}],"
        "\"parity\":{\"name\":\"%s\",\"seed\":1,\"inputs\":{\"x\":{\"gen\":\"unif\",\"lo\":-40,\"hi\":40}},%s}}\n";
    fprintf(f, head, "aten.exp.default", "", "[4,8]", "tight", "\"exact\":false,\"nmse\":1e-300");
    fprintf(f, head, "aten.neg.default", "", "[8,4]", "shape", "\"exact\":true");
    fprintf(f, head, "aten.sum.dim_IntList", ",[1]", "[4]", "rounds", "\"exact\":true");
    fprintf(f, head, "aten.neg.default", "", "[4,8]", "fine", "\"exact\":true");
    fclose(f);
    drift_err e;
    drift_err_clear(&e);
    aten_parity_set *s = NULL;
    assert_int_equal(aten_parity_load(path, &s, &e), 0);
    aten_parity_opts o = {NULL, NULL, NULL, 0};
    aten_parity_stats r = aten_parity_run(s, NULL, 0, &o);
    assert_int_equal(r.cases, 4);
    assert_int_equal(r.failed, 3);
    aten_parity_free(s);
}

static void test_cases_on_ref_and_cpu(void **st) {
    (void)st;
    aten_parity_set *s = load_cases("tests/data/parity/aten_cases.jsonl");
    /* a second cpu instance as the "device" whose outputs are dumped, as the GPU test dumps
     * cuda:kernels=torch's for tests/gpu/aten_parity.py: every line must be JSON */
    const char *tmp = getenv("DRIFT_TMP");
    char dump[4096];
    snprintf(dump, sizeof dump, "%s/aten_dump.jsonl", tmp ? tmp : "/tmp");
    drift_err e;
    drift_err_clear(&e);
    aten_parity_backend be = {"cpu:threads=1", NULL, 0};
    if (drift_backend_create(be.spec, &be.be, &e)) fail_msg("%s", e.msg);
    aten_parity_opts o = {getenv("ATEN_PARITY_ONLY"), fopen(dump, "w"), be.spec, getenv("ATEN_PARITY_VERBOSE") != NULL};
    assert_non_null(o.dump);
    aten_parity_stats r = aten_parity_run(s, &be, 1, &o);
    fclose(o.dump);
    drift_backend_free(be.be);
    print_message("  aten parity: %ld cases, %ld runs, %ld failed\n", r.cases, r.runs, r.failed);
    aten_parity_free(s);
    assert_int_equal(r.failed, 0);
    assert_true(r.cases > 0);
    FILE *f = fopen(dump, "rb");
    assert_non_null(f);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    long lines = 0;
    while ((got = getline(&line, &cap, f)) > 0) {
        drift_json_value *v = NULL;
        if (drift_json_parse(line, (size_t)got, dump, &v, &e)) fail_msg("%s: %s", e.where, e.msg);
        assert_non_null(drift_json_object_get(v, "out"));
        drift_json_free(v);
        lines++;
    }
    free(line);
    fclose(f);
    assert_true(lines >= r.cases); /* one per case and plan */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_row_has_a_case),
        cmocka_unit_test(test_missing_row_is_reported),
        cmocka_unit_test(test_checks_can_fail),
        cmocka_unit_test(test_cases_on_ref_and_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
