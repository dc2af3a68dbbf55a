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
#include "formats/test_trace_util.h"
#include "kernels/backend.h"

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
    drift_cli_kernels out; /* an unreadable trace is not from PyTorch: exact by default */
    assert_int_equal(drift_cli_kernels_pick_trace("replay", "cuda", NULL, "/nonexistent/trace.h5", &out), 0);
    assert_string_equal(out.profile, "exact");
}

/* A trace whose /libraries holds the given GEMM workspaces (0: not recorded). */
static const char *ws_trace(const char *name, int64_t cublas, int64_t lt) {
    drift_err err;
    drift_trace_writer *w = NULL;
    drift_trace_meta m = tt_meta();
    const char *p = tt_path(name);
    assert_int_equal(drift_trace_writer_create(&w, p, &m, &err), DRIFT_OK);
    drift_libraries l;
    memset(&l, 0, sizeof l);
    snprintf(l.torch_version, sizeof l.torch_version, "2.11.0");
    l.cublas_workspace = cublas;
    l.cublaslt_workspace = lt;
    assert_int_equal(drift_trace_writer_set_libraries(w, &l, &err), DRIFT_OK);
    assert_int_equal(drift_trace_writer_start(w, &err), DRIFT_OK);
    assert_int_equal(drift_trace_writer_close(w, &err), DRIFT_OK);
    return p;
}

/* The recording's GEMM workspaces become the torch profile's options (a run with
 * CUBLAS_WORKSPACE_CONFIG=:16:8 replays with torch's 128 KiB, not the 32 MiB default). */
static void test_recorded_workspaces(void **state) {
    (void)state;
    drift_cli_kernels out;
    char p[4096];
    snprintf(p, sizeof p, "%s", ws_trace("ws.h5", 131072, 2 << 20));
    assert_int_equal(drift_cli_kernels_pick_trace("replay", "cuda", NULL, p, &out), 0);
    assert_string_equal(out.profile, "torch:cublas_ws=131072:lt_ws_kib=2048");
    assert_non_null(strstr(out.why, "default: the trace was recorded from PyTorch; the recording's GEMM workspaces: "
                                    "cublas_ws=131072:lt_ws_kib=2048"));
    assert_string_equal(out.shown, "torch");
    char spec[256];
    drift_err err;
    assert_int_equal(drift_backend_spec_with_kernels("cuda:1", out.profile, spec, sizeof spec, &err), DRIFT_OK);
    assert_string_equal(spec, "cuda:1:kernels=torch:cublas_ws=131072:lt_ws_kib=2048");
    /* only one of the two recorded */
    snprintf(p, sizeof p, "%s", ws_trace("ws1.h5", 131072, 0));
    assert_int_equal(drift_cli_kernels_pick_trace("replay", "cuda", "torch", p, &out), 0);
    assert_string_equal(out.profile, "torch:cublas_ws=131072");
    /* untouched: the exact profile, a device spec that sets the workspace, no workspaces recorded, no trace */
    assert_int_equal(drift_cli_kernels_pick_trace("replay", "cuda", "exact", p, &out), 0);
    assert_string_equal(out.profile, "exact");
    assert_int_equal(drift_cli_kernels_pick_trace("replay", "cuda:0:cublas_ws=4096", NULL, p, &out), 0);
    assert_string_equal(out.profile, "torch");
    snprintf(p, sizeof p, "%s", ws_trace("ws0.h5", 0, 0));
    assert_int_equal(drift_cli_kernels_pick_trace("replay", "cuda", NULL, p, &out), 0);
    assert_string_equal(out.profile, "torch");
    assert_null(strstr(out.why, "workspaces"));
    assert_int_equal(drift_cli_kernels_pick_trace("replay", "cuda", "torch", "/nonexistent/trace.h5", &out), 0);
    assert_string_equal(out.profile, "torch");
    /* a usage error is still one */
    assert_int_equal(drift_cli_kernels_pick_trace("replay", "cpu", "torch", p, &out), 2);
}

static int setup(void **state) {
    (void)state;
    return tt_setup_tmp("test_kernels_opt");
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_defaults), cmocka_unit_test(test_explicit),
                                       cmocka_unit_test(test_refused), cmocka_unit_test(test_choices),
                                       cmocka_unit_test(test_recorded_workspaces)};
    return cmocka_run_group_tests(tests, setup, NULL);
}
