/* formats/params: parameter tables and the named_parameters() dump parser. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "formats/params.h"

static void add_ok(drift_param_table *t, const char *fqn, int ndim, const int64_t *shape, int wrap) {
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_param_table_add(t, fqn, ndim, shape, wrap, &err);
    if (rc != DRIFT_OK) print_error("add %s: %s: %s\n", fqn, err.where, err.msg);
    assert_int_equal(rc, DRIFT_OK);
}

static void test_add_find_derive(void **state) {
    (void)state;
    drift_param_table t;
    drift_param_table_init(&t);
    drift_err err;
    int w0 = -5, w1 = -5, w2 = -5;
    assert_int_equal(drift_param_table_add_wrap(&t, "blocks.0", &w0, &err), DRIFT_OK);
    assert_int_equal(drift_param_table_add_wrap(&t, "blocks.1", &w1, &err), DRIFT_OK);
    assert_int_equal(drift_param_table_add_wrap(&t, "blocks.10", &w2, &err), DRIFT_OK);
    assert_int_equal(w0, 0);
    assert_int_equal(w1, 1);
    assert_int_equal(w2, 2);
    int64_t s1[3] = {1, 6, 16};
    int64_t s2[2] = {16, 32};
    add_ok(&t, "patch_embedding.weight", 2, s2, DRIFT_PARAM_WRAP_AUTO);
    add_ok(&t, "blocks.0.scale_shift_table", 3, s1, DRIFT_PARAM_WRAP_AUTO);
    add_ok(&t, "blocks.1.norm2.weight", 1, s2, DRIFT_PARAM_WRAP_AUTO);
    add_ok(&t, "blocks.10.norm2.weight", 1, s2, DRIFT_PARAM_WRAP_AUTO); /* not blocks.1 */
    add_ok(&t, "blocks.1x.w", 0, NULL, DRIFT_PARAM_WRAP_AUTO);          /* no dotted prefix: root */
    add_ok(&t, "blocks.0.forced_root", 1, s2, DRIFT_PARAM_WRAP_ROOT);
    add_ok(&t, "elsewhere.w", 1, s2, 1);                                /* explicit, not a prefix */
    assert_int_equal(t.n, 7);
    assert_int_equal(t.params[0].wrap, -1);
    assert_int_equal(t.params[1].wrap, 0);
    assert_int_equal(t.params[2].wrap, 1);
    assert_int_equal(t.params[3].wrap, 2);
    assert_int_equal(t.params[4].wrap, -1);
    assert_int_equal(t.params[5].wrap, -1);
    assert_int_equal(t.params[6].wrap, 1);
    assert_int_equal(t.params[0].numel, 512);
    assert_int_equal(t.params[1].numel, 96);
    assert_int_equal(t.params[1].ndim, 3);
    assert_int_equal(t.params[1].shape[2], 16);
    assert_int_equal(t.params[4].numel, 1); /* scalar */
    assert_int_equal(t.params[4].ndim, 0);

    assert_string_equal(drift_param_table_local_name(&t, 0), "patch_embedding.weight");
    assert_string_equal(drift_param_table_local_name(&t, 1), "scale_shift_table");
    assert_string_equal(drift_param_table_local_name(&t, 2), "norm2.weight");
    assert_string_equal(drift_param_table_local_name(&t, 3), "norm2.weight");
    assert_string_equal(drift_param_table_local_name(&t, 5), "blocks.0.forced_root");
    assert_string_equal(drift_param_table_local_name(&t, 6), "elsewhere.w"); /* documented: full FQN */
    assert_null(drift_param_table_local_name(&t, 7));

    assert_int_equal(drift_param_table_find(&t, "blocks.10.norm2.weight"), 3);
    assert_int_equal(drift_param_table_find(&t, "blocks.10.norm2"), -1);
    assert_int_equal(drift_param_table_find(&t, NULL), -1);
    drift_param_table_free(&t);
    assert_int_equal(t.n, 0);
    assert_null(t.params);
    drift_param_table_free(&t);
    drift_param_table_free(NULL);
}

static void test_nested_wraps_first_in_call_order(void **state) {
    (void)state;
    drift_param_table t;
    drift_param_table_init(&t);
    drift_err err;
    int w;
    /* fully_shard on the inner module first, then the outer one */
    assert_int_equal(drift_param_table_add_wrap(&t, "blocks.0.attn1", &w, &err), DRIFT_OK);
    assert_int_equal(drift_param_table_add_wrap(&t, "blocks.0", &w, &err), DRIFT_OK);
    int64_t s[1] = {4};
    add_ok(&t, "blocks.0.attn1.to_q.weight", 1, s, DRIFT_PARAM_WRAP_AUTO);
    add_ok(&t, "blocks.0.norm2.weight", 1, s, DRIFT_PARAM_WRAP_AUTO);
    assert_int_equal(t.params[0].wrap, 0);
    assert_int_equal(t.params[1].wrap, 1);
    assert_string_equal(drift_param_table_local_name(&t, 0), "to_q.weight");
    assert_string_equal(drift_param_table_local_name(&t, 1), "norm2.weight");
    drift_param_table_free(&t);
}

static void add_fail(drift_param_table *t, const char *fqn, int ndim, const int64_t *shape, int wrap, int code,
                     const char *sub) {
    drift_err err;
    drift_err_clear(&err);
    size_t n0 = t->n;
    int rc = drift_param_table_add(t, fqn, ndim, shape, wrap, &err);
    if (rc != code || !strstr(err.msg, sub)) print_error("add %s: rc %d msg '%s'\n", fqn ? fqn : "(null)", rc, err.msg);
    assert_int_equal(rc, code);
    assert_non_null(strstr(err.msg, sub));
    assert_int_equal(t->n, n0);
}

static void test_add_errors(void **state) {
    (void)state;
    drift_param_table t;
    drift_param_table_init(&t);
    drift_err err;
    int w;
    assert_int_equal(drift_param_table_add_wrap(&t, "blocks.0", &w, &err), DRIFT_OK);
    assert_int_equal(drift_param_table_add_wrap(&t, "blocks.0", &w, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "declared twice"));
    assert_int_equal(drift_param_table_add_wrap(&t, "", &w, &err), DRIFT_E_INPUT);
    assert_int_equal(t.n_wraps, 1);
    int64_t ok[1] = {3};
    add_ok(&t, "a.w", 1, ok, DRIFT_PARAM_WRAP_AUTO);
    add_fail(&t, "a.w", 1, ok, DRIFT_PARAM_WRAP_AUTO, DRIFT_E_INPUT, "duplicate parameter \"a.w\"");
    add_fail(&t, "", 1, ok, DRIFT_PARAM_WRAP_AUTO, DRIFT_E_INPUT, "empty parameter name");
    add_fail(&t, NULL, 1, ok, DRIFT_PARAM_WRAP_AUTO, DRIFT_E_INPUT, "empty parameter name");
    add_fail(&t, "a b", 1, ok, DRIFT_PARAM_WRAP_AUTO, DRIFT_E_INPUT, "whitespace");
    add_fail(&t, "a..b", 1, ok, DRIFT_PARAM_WRAP_AUTO, DRIFT_E_INPUT, "empty dotted component");
    add_fail(&t, ".a", 1, ok, DRIFT_PARAM_WRAP_AUTO, DRIFT_E_INPUT, "empty dotted component");
    char longname[DRIFT_MAX_FQN + 1];
    memset(longname, 'x', DRIFT_MAX_FQN);
    longname[DRIFT_MAX_FQN] = '\0';
    add_fail(&t, longname, 1, ok, DRIFT_PARAM_WRAP_AUTO, DRIFT_E_INPUT, "over the limit");
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    add_fail(&t, "b.w", 9, nine, DRIFT_PARAM_WRAP_AUTO, DRIFT_E_INPUT, "9 dimensions");
    add_fail(&t, "b.w", -1, nine, DRIFT_PARAM_WRAP_AUTO, DRIFT_E_INPUT, "-1 dimensions");
    int64_t neg[2] = {4, -1};
    add_fail(&t, "b.w", 2, neg, DRIFT_PARAM_WRAP_AUTO, DRIFT_E_INPUT, "dimension 1 is -1");
    int64_t huge[2] = {(int64_t)1 << 30, (int64_t)1 << 19};
    add_fail(&t, "b.w", 2, huge, DRIFT_PARAM_WRAP_AUTO, DRIFT_E_INPUT, "2^48");
    int64_t edge[2] = {(int64_t)1 << 30, (int64_t)1 << 18}; /* exactly 2^48 is allowed */
    add_ok(&t, "b.edge", 2, edge, DRIFT_PARAM_WRAP_AUTO);
    assert_true(t.params[t.n - 1].numel == (int64_t)1 << 48);
    int64_t zero[2] = {0, 5};
    add_ok(&t, "b.empty", 2, zero, DRIFT_PARAM_WRAP_AUTO);
    assert_int_equal(t.params[t.n - 1].numel, 0);
    add_fail(&t, "b.w", 1, ok, 1, DRIFT_E_INTERNAL, "wrap index 1 out of range");
    add_fail(&t, "b.w", 1, ok, -3, DRIFT_E_INTERNAL, "wrap index -3");
    drift_param_table_free(&t);
}

/* ---- text dumps --------------------------------------------------------- */

static void parse_ok(drift_param_table *t, const char *text) {
    drift_err err;
    drift_err_clear(&err);
    drift_param_table_init(t);
    int rc = drift_param_table_parse_text(t, text, strlen(text), "p.txt", &err);
    if (rc != DRIFT_OK) print_error("%s: %s\n", err.where, err.msg);
    assert_int_equal(rc, DRIFT_OK);
}

static void parse_fail(const char *text, size_t len, int code, const char *where, const char *sub) {
    drift_param_table t;
    drift_param_table_init(&t);
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_param_table_parse_text(&t, text, len, "p.txt", &err);
    if (rc != code || strcmp(err.where, where) != 0 || !strstr(err.msg, sub))
        print_error("got rc %d where '%s' msg '%s'\n", rc, err.where, err.msg);
    assert_int_equal(rc, code);
    assert_string_equal(err.where, where);
    assert_non_null(strstr(err.msg, sub));
    assert_int_equal(t.n, 0);
    assert_int_equal(t.n_wraps, 0);
    assert_null(t.params);
}
#define PARSE_FAIL(text, code, where, sub) parse_fail((text), strlen(text), (code), (where), (sub))

static void test_dump_shapes_and_wraps(void **state) {
    (void)state;
    const char *text =
        "# named_parameters() of a 2-block Wan\n"
        "\n"
        "patch_embedding.weight torch.Size([1536, 16, 1, 2, 2])\n"
        "  patch_embedding.bias\t1536\n"
        "blocks.0.scale_shift_table (1, 6, 1536)\n"
        "blocks.0.norm2.weight [1536]\n"
        "blocks.0.norm2.bias (1536,)\n"
        "blocks.1.norm2.weight 1536\r\n"
        "blocks.1.scale_shift_table 1,6,1536   \n"
        "scale_shift_table [1, 2, 1536]\n"
        "step ()\n"
        "blocks.1.forced torch.Size([]) root\n"
        "blocks.0.dash 3 -\n"
        "other.w 4 blocks.1\n"
        "late.w 4 late\n"
        "# wraps: blocks.0 blocks.1\n"
        "# a comment: wraps: nope\n"
        "last.w [2, 2]"; /* no trailing newline */
    drift_param_table t;
    parse_ok(&t, text);
    assert_int_equal(t.n_wraps, 3);
    assert_string_equal(t.wraps[0], "blocks.0"); /* declared first, though declared last */
    assert_string_equal(t.wraps[1], "blocks.1");
    assert_string_equal(t.wraps[2], "late"); /* from a WRAP column, after the declared ones */
    assert_int_equal(t.n, 14);
    struct { const char *fqn; int ndim; int64_t numel; int wrap; const char *local; } exp[] = {
        {"patch_embedding.weight", 5, 1536 * 16 * 4, -1, "patch_embedding.weight"},
        {"patch_embedding.bias", 1, 1536, -1, "patch_embedding.bias"},
        {"blocks.0.scale_shift_table", 3, 6 * 1536, 0, "scale_shift_table"},
        {"blocks.0.norm2.weight", 1, 1536, 0, "norm2.weight"},
        {"blocks.0.norm2.bias", 1, 1536, 0, "norm2.bias"},
        {"blocks.1.norm2.weight", 1, 1536, 1, "norm2.weight"},
        {"blocks.1.scale_shift_table", 3, 6 * 1536, 1, "scale_shift_table"},
        {"scale_shift_table", 3, 2 * 1536, -1, "scale_shift_table"},
        {"step", 0, 1, -1, "step"},
        {"blocks.1.forced", 0, 1, -1, "blocks.1.forced"},
        {"blocks.0.dash", 1, 3, -1, "blocks.0.dash"},
        {"other.w", 1, 4, 1, "other.w"},
        {"late.w", 1, 4, 2, "w"},
        {"last.w", 2, 4, -1, "last.w"},
    };
    for (size_t i = 0; i < t.n; i++) {
        assert_string_equal(t.params[i].fqn, exp[i].fqn);
        assert_int_equal(t.params[i].ndim, exp[i].ndim);
        assert_int_equal(t.params[i].numel, exp[i].numel);
        assert_int_equal(t.params[i].wrap, exp[i].wrap);
        assert_string_equal(drift_param_table_local_name(&t, i), exp[i].local);
    }
    assert_int_equal(t.params[0].shape[0], 1536);
    assert_int_equal(t.params[0].shape[4], 2);
    drift_param_table_free(&t);

    /* empty input: empty table */
    parse_ok(&t, "");
    assert_int_equal(t.n, 0);
    drift_param_table_free(&t);
    parse_ok(&t, "# only comments\n\n   \n");
    assert_int_equal(t.n, 0);
    drift_param_table_free(&t);
}

static void test_dump_errors(void **state) {
    (void)state;
    PARSE_FAIL("a.w 4\nb.w\n", DRIFT_E_INPUT, "p.txt:2:4", "expected a shape after the parameter name \"b.w\"");
    PARSE_FAIL("a.w (1, x)\n", DRIFT_E_INPUT, "p.txt:1:9", "expected a dimension");
    PARSE_FAIL("a.w (1 2)\n", DRIFT_E_INPUT, "p.txt:1:8", "expected ',' or ')' in the shape opened at column 5");
    PARSE_FAIL("a.w [1, 2\n", DRIFT_E_INPUT, "p.txt:1:10", "expected ',' or ']'");
    PARSE_FAIL("a.w [1,]\n", DRIFT_E_INPUT, "p.txt:1:8", "expected a dimension");
    PARSE_FAIL("a.w (-1,)\n", DRIFT_E_INPUT, "p.txt:1:6", "expected a dimension");
    PARSE_FAIL("a.w torch.Size((1,))\n", DRIFT_E_INPUT, "p.txt:1:16", "expected '[' after \"torch.Size(\"");
    PARSE_FAIL("a.w torch.Size([1]\n", DRIFT_E_INPUT, "p.txt:1:19", "expected ')' closing");
    PARSE_FAIL("a.w x4\n", DRIFT_E_INPUT, "p.txt:1:5", "expected a shape");
    PARSE_FAIL("a.w 4x\n", DRIFT_E_INPUT, "p.txt:1:6", "expected whitespace or end of line after the shape");
    PARSE_FAIL("a.w 4 blocks.0 extra\n", DRIFT_E_INPUT, "p.txt:1:16", "expected end of line after the wrap column");
    PARSE_FAIL("a.w 4\n\n# x\na.w 5\n", DRIFT_E_INPUT, "p.txt:4:1", "duplicate parameter \"a.w\" (first on line 1)");
    PARSE_FAIL("# wraps: b c b\n", DRIFT_E_INPUT, "p.txt:1:14", "wrap \"b\" declared twice");
    PARSE_FAIL("# wraps: b\n#wraps: b\n", DRIFT_E_INPUT, "p.txt:2:9", "declared twice");
    PARSE_FAIL("# wraps: b root\n", DRIFT_E_INPUT, "p.txt:1:12", "root is implicit");
    PARSE_FAIL("a.w 1,2,3,4,5,6,7,8,9\n", DRIFT_E_INPUT, "p.txt:1:21", "more than 8 dimensions");
    PARSE_FAIL("a.w 1000000000000000\n", DRIFT_E_INPUT, "p.txt:1:5", "dimension too large");
    PARSE_FAIL("a.w (16777216, 16777216, 2)\n", DRIFT_E_INPUT, "p.txt:1:5", "2^48");
    PARSE_FAIL("a..w 4\n", DRIFT_E_INPUT, "p.txt:1:1", "empty dotted component");
    PARSE_FAIL("a.w 4 bad..wrap\n", DRIFT_E_INPUT, "p.txt:1:7", "empty dotted component");
    parse_fail("a.w 4\nb\0.w 4\n", 13, DRIFT_E_INPUT, "p.txt:2:2", "NUL byte");

    /* the table must be empty */
    drift_param_table t;
    drift_param_table_init(&t);
    drift_err err;
    int64_t s[1] = {1};
    assert_int_equal(drift_param_table_add(&t, "x", 1, s, DRIFT_PARAM_WRAP_AUTO, &err), DRIFT_OK);
    assert_int_equal(drift_param_table_parse_text(&t, "a.w 4\n", 6, "p.txt", &err), DRIFT_E_INTERNAL);
    assert_int_equal(t.n, 1);
    drift_param_table_free(&t);
}

static void test_dump_file(void **state) {
    (void)state;
    const char *tmp = getenv("DRIFT_TMP");
    char path[1024];
    snprintf(path, sizeof path, "%s/params_dump.txt", tmp ? tmp : "/tmp");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("# wraps: blocks.0\nblocks.0.w (2, 3)\nroot.w 5\nbroken\n", f);
    fclose(f);
    drift_param_table t;
    drift_param_table_init(&t);
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_param_table_parse_file(&t, path, &err), DRIFT_E_INPUT);
    char where[1100];
    snprintf(where, sizeof where, "%s:4:7", path);
    assert_string_equal(err.where, where);
    assert_int_equal(t.n, 0);

    f = fopen(path, "wb");
    assert_non_null(f);
    fputs("# wraps: blocks.0\nblocks.0.w (2, 3)\nroot.w 5\n", f);
    fclose(f);
    assert_int_equal(drift_param_table_parse_file(&t, path, &err), DRIFT_OK);
    assert_int_equal(t.n, 2);
    assert_int_equal(t.params[0].wrap, 0);
    assert_int_equal(t.params[0].numel, 6);
    assert_int_equal(t.params[1].wrap, -1);
    drift_param_table_free(&t);
    remove(path);

    assert_int_equal(drift_param_table_parse_file(&t, "/nonexistent/p.txt", &err), DRIFT_E_IO);
    assert_string_equal(err.where, "/nonexistent/p.txt");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_find_derive),
        cmocka_unit_test(test_nested_wraps_first_in_call_order),
        cmocka_unit_test(test_add_errors),
        cmocka_unit_test(test_dump_shapes_and_wraps),
        cmocka_unit_test(test_dump_errors),
        cmocka_unit_test(test_dump_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
