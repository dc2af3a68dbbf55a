/* cli/kernels_opt: which CUDA kernel profile --kernels, the device spec and
 * the trace's producer choose (docs/cli.md "Kernel profiles"), and the exit-2
 * refusals. */
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
#include "cli/kernels_opt.c"

static void pick_ok(const char *dev, const char *k, int from_torch, const char *profile, const char *shown,
                    const char *why_part) {
    drift_cli_kernels out;
    assert_int_equal(drift_cli_kernels_pick("replay", dev, k, from_torch, &out), 0);
    if (profile) assert_string_equal(out.profile, profile);
    else assert_null(out.profile);
    assert_string_equal(out.shown, shown);
    assert_non_null(strstr(out.why, why_part));
}

static void test_defaults(void **state) {
    (void)state;
    pick_ok("cuda", NULL, 1, "torch", "torch", "default: the trace was recorded from PyTorch");
    pick_ok("cuda:1", NULL, 0, "exact", "exact", "default: the trace was not recorded from PyTorch");
    pick_ok("cuda:0,cuda:1", NULL, 1, "torch", "torch", "default"); /* --devices */
    pick_ok(NULL, NULL, 1, NULL, "", "");                          /* cpu: no profile */
    pick_ok("cpu:threads=2", NULL, 1, NULL, "", "");
    pick_ok("ref-cuda:0", NULL, 1, NULL, "", "");                  /* the oracle has no profiles */
}

static void test_explicit(void **state) {
    (void)state;
    pick_ok("cuda:0", "exact", 1, "exact", "exact", "--kernels");
    pick_ok("cuda", "torch", 0, "torch", "torch", "--kernels");
    pick_ok("cpu", "exact", 0, NULL, "", "");                      /* exact on the host: what it is anyway */
    /* the spec's own kernels= keeps working, the library is not asked to add one */
    pick_ok("cuda:0:kernels=torch", NULL, 0, NULL, "torch", "--device");
    pick_ok("cuda:0:kernels=exact:gemm=naive", NULL, 1, NULL, "exact", "--device");
}

static void test_refused(void **state) {
    (void)state;
    drift_cli_kernels out;
    assert_int_equal(drift_cli_kernels_pick("replay", "cuda:0:kernels=torch", "exact", 0, &out), 2);
    assert_int_equal(drift_cli_kernels_pick("bisect", "cuda:0:kernels=torch", "torch", 0, &out), 2); /* even the same */
    assert_int_equal(drift_cli_kernels_pick("replay", "cpu", "torch", 1, &out), 2);
    assert_int_equal(drift_cli_kernels_pick("replay", NULL, "torch", 1, &out), 2);
}

static void test_choices(void **state) {
    (void)state;
    assert_string_equal(drift_cli_kernel_choices[0], "exact");
    assert_string_equal(drift_cli_kernel_choices[1], "torch");
    assert_null(drift_cli_kernel_choices[2]);
    assert_int_equal(drift_cli_trace_from_torch("/nonexistent/trace.h5"), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_defaults), cmocka_unit_test(test_explicit),
                                       cmocka_unit_test(test_refused), cmocka_unit_test(test_choices)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
