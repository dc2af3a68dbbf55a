/* cli/args: the option table parser, did-you-mean and help (docs/cli.md).
 * The CLI is not a library: its two files are compiled into this test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli/args.c"
#include "cli/cli_util.c"

static const char *const COLORS[] = {"red", "green", "blue", NULL};
static const drift_cli_opt_spec OPTS[] = {
    {"--steps", NULL, "A:B", "steps", NULL, 0},
    {"--threshold", NULL, "X", "threshold", NULL, 0},
    {"--threshold-floor", NULL, "K", "floor", NULL, 0},
    {"--color", NULL, "C", "a color", COLORS, 0},
    {"--all", NULL, NULL, "a switch", NULL, 0},
    {"--out", "-o", "FILE", "output", NULL, 0},
    {"--plan", NULL, "P", "plan file", NULL, 0},
    DRIFT_CLI_PLAN_FLAG_SPECS,
    {0}};
static const drift_cli_cmd_spec SPEC = {"t", "TRACE [options]", "A test command.\n", OPTS, "TRACE", 1, 1,
                                        NULL, "0 ok, 2 bad usage", "t x.h5 --all"};

static int parse(drift_cli_args *a, int *code, int n, ...) {
    static char *argv[32];
    va_list ap;
    va_start(ap, n);
    argv[0] = "t";
    for (int i = 0; i < n; i++) argv[i + 1] = va_arg(ap, char *);
    va_end(ap);
    return drift_cli_args_parse(&SPEC, n + 1, argv, a, code);
}

static void test_suggest(void **state) {
    (void)state;
    const char *names[] = {"--steps", "--threshold", "--threshold-floor", "--all"};
    assert_string_equal(drift_cli_suggest("--stpes", names, 4), "--steps");
    assert_string_equal(drift_cli_suggest("--step", names, 4), "--steps");
    assert_string_equal(drift_cli_suggest("--thresh", names, 4), "--threshold");
    assert_string_equal(drift_cli_suggest("--threshold-flor", names, 4), "--threshold-floor");
    assert_null(drift_cli_suggest("--bogus", names, 4));
    assert_null(drift_cli_suggest("", names, 4));
    const char *refs[] = {"trainer", "rollout", "oracle"};
    assert_string_equal(drift_cli_suggest("rolout", refs, 3), "rollout");
    assert_string_equal(drift_cli_suggest("ORACLE", refs, 3), "oracle");
    assert_null(drift_cli_suggest("x", refs, 3));
}

static void test_parse_values(void **state) {
    (void)state;
    drift_cli_args a;
    int code = -1;
    assert_int_equal(parse(&a, &code, 6, "x.h5", "--steps=2:5", "-o", "out.h5", "--all", "--color=green"), 0);
    assert_int_equal(a.n_pos, 1);
    assert_string_equal(a.pos[0], "x.h5");
    assert_string_equal(drift_cli_args_get(&a, "--steps"), "2:5");
    assert_string_equal(drift_cli_args_get(&a, "--out"), "out.h5");
    assert_string_equal(drift_cli_args_get(&a, "--color"), "green");
    assert_int_equal(drift_cli_args_count(&a, "--all"), 1);
    assert_null(drift_cli_args_get(&a, "--threshold"));
    drift_cli_args_free(&a);
    /* the same value twice is harmless */
    assert_int_equal(parse(&a, &code, 4, "x.h5", "--steps", "1", "--steps=1"), 0);
    assert_string_equal(drift_cli_args_get(&a, "--steps"), "1");
    drift_cli_args_free(&a);
}

static void test_parse_errors(void **state) {
    (void)state;
    drift_cli_args a;
    int code = -1;
    assert_int_equal(parse(&a, &code, 2, "x.h5", "--stpes=1"), 1);
    assert_int_equal(code, 2);
    code = -1;
    assert_int_equal(parse(&a, &code, 2, "x.h5", "--steps"), 1); /* no value */
    assert_int_equal(code, 2);
    code = -1;
    assert_int_equal(parse(&a, &code, 2, "x.h5", "--all=1"), 1); /* a switch takes none */
    assert_int_equal(code, 2);
    code = -1;
    assert_int_equal(parse(&a, &code, 3, "x.h5", "--color", "gren"), 1);
    assert_int_equal(code, 2);
    code = -1;
    assert_int_equal(parse(&a, &code, 5, "x.h5", "--steps", "1", "--steps", "2"), 1);
    assert_int_equal(code, 2);
    code = -1;
    assert_int_equal(parse(&a, &code, 1, "--all"), 1); /* missing TRACE */
    assert_int_equal(code, 2);
    code = -1;
    assert_int_equal(parse(&a, &code, 2, "x.h5", "y.h5"), 1); /* one TRACE */
    assert_int_equal(code, 2);
    code = -1;
    assert_int_equal(parse(&a, &code, 2, "--bogus", "--help"), 1); /* --help wins */
    assert_int_equal(code, 0);
}

static void test_plan_flags_in_order(void **state) {
    (void)state;
    drift_cli_args a;
    int code = -1;
    assert_int_equal(parse(&a, &code, 8, "x.h5", "--param-dtype", "*.a.*=fp32", "--plan", "p.json",
                           "--param-dtype=*.b.*=bf16", "--diffusion-forward-dtype", "fp16"),
                     0);
    drift_cli_plan_args pa;
    assert_int_equal(drift_cli_args_plan(&a, "--plan", &pa), 0);
    assert_string_equal(pa.file, "p.json");
    assert_int_equal(pa.n_flags, 3);
    assert_string_equal(pa.flag_name[0], "--param-dtype");
    assert_string_equal(pa.flag_value[0], "*.a.*=fp32");
    assert_string_equal(pa.flag_value[1], "*.b.*=bf16");
    assert_string_equal(pa.flag_name[2], "--diffusion-forward-dtype");
    assert_string_equal(pa.flag_value[2], "fp16");
    drift_cli_args_free(&a);
}

static void test_help_lists_everything(void **state) {
    (void)state;
    char buf[16384];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    assert_non_null(f);
    drift_cli_print_help(&SPEC, f);
    fclose(f);
    for (const drift_cli_opt_spec *o = OPTS; o->name; o++) assert_non_null(strstr(buf, o->name));
    assert_non_null(strstr(buf, "-o, --out FILE"));
    assert_non_null(strstr(buf, "a color\n"));
    assert_non_null(strstr(buf, "one of: red|green|blue\n"));
    assert_non_null(strstr(buf, "\nexit: 0 ok, 2 bad usage\n"));
    assert_non_null(strstr(buf, "\nexample: drift t x.h5 --all\n"));
}

static void test_choice(void **state) {
    (void)state;
    assert_int_equal(drift_cli_check_choice("t", "--color", "blue", COLORS), 0);
    assert_int_equal(drift_cli_check_choice("t", "--color", "purple", COLORS), 2);
}

/* What fn wrote on stderr, into buf. */
static void stderr_of(void (*fn)(int *), int *rc, char *buf, size_t sz) {
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    fflush(stderr);
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    fn(rc);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(buf, 1, sz - 1, tmp);
    buf[n] = '\0';
    fclose(tmp);
}

static const char *const TOP_HELP = "usage: drift top TRACE [--ref TRACE] [--follow]\n"
                                    "  --follow     tail the trace\n  --interval MS  refresh\n"
                                    "  --batch-size N  not a flag--in-text\n";
static void call_unknown(int *rc) { *rc = drift_cli_unknown_option_in_help("top", "--folow=1", TOP_HELP); }
static void call_far(int *rc) { *rc = drift_cli_unknown_option_in_help("top", "--zzzzzz", TOP_HELP); }
static const char *const SORTS[] = {"order", "name", "mean", NULL};
static void call_choice(int *rc) { *rc = drift_cli_bad_choice("top", "--sort", "order, name or mean", "nme", SORTS); }

static void test_unknown_in_help(void **state) {
    (void)state;
    char buf[1024];
    int rc = -1;
    stderr_of(call_unknown, &rc, buf, sizeof buf);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(buf, "drift top: unknown option '--folow' (did you mean '--follow'?)\n"));
    stderr_of(call_far, &rc, buf, sizeof buf);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(buf, "drift top: unknown option '--zzzzzz'\n")); /* nothing close: no suggestion */
    stderr_of(call_choice, &rc, buf, sizeof buf);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(buf, "drift top: --sort: expected order, name or mean, got 'nme' (did you mean 'name'?)\n"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_suggest),          cmocka_unit_test(test_parse_values),
        cmocka_unit_test(test_parse_errors),     cmocka_unit_test(test_plan_flags_in_order),
        cmocka_unit_test(test_help_lists_everything), cmocka_unit_test(test_choice),
        cmocka_unit_test(test_unknown_in_help),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
