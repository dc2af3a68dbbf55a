/* drift invariance under allocation failure (formats/alloc.h): allocations
 * of drift_invariance_run fail once in turn (every one of the first 800:
 * opening, model, plan, inputs, the reference's setup; then every 13th: the
 * per-node work repeats), and each run reports DRIFT_E_NOMEM with a
 * message, leaks nothing (ASan builds) and crashes nowhere; then the clean
 * run succeeds. The full sweep (4,661 points) passed once; it takes minutes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "formats/alloc.h"
#include "formats/plan.h"
#include "replay/drive/invariance.h"
#include "replay/drive/synth.h"

const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libhdf5\n"; }

static void test_invariance_nomem(void **state) {
    (void)state;
    const char *tmp = getenv("DRIFT_TMP"), *data = getenv("DRIFT_TESTDATA");
    char plan_path[4096], trace[4096];
    snprintf(plan_path, sizeof plan_path, "%s/plans/wan2_2.json", data ? data : "tests/data");
    snprintf(trace, sizeof trace, "%s/inv_fault.h5", tmp ? tmp : "/tmp");
    drift_plan plan;
    drift_plan_init(&plan);
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_plan_load_file(&plan, plan_path, &err), DRIFT_OK);
    drift_synth_opts so;
    drift_synth_opts_init(&so);
    so.model = "tiny-dit:layers=1,batch=2";
    so.steps = 1;
    so.trainer_plan = so.rollout_plan = &plan;
    so.trainer_path = trace;
    assert_int_equal(drift_synth_record(&so, &err), DRIFT_OK);
    drift_backend *be = NULL;
    assert_int_equal(drift_backend_create("cpu:threads=1", &be, &err), DRIFT_OK);
    drift_invariance_opts o;
    drift_invariance_opts_init(&o);
    o.trace = trace;
    o.batches[0] = 1, o.batches[1] = 2;
    o.n_batches = 2;
    o.cfg_joined = 1;
    long n = 0;
    long runs = 0;
    for (;; n += n < 800 ? 1 : 13, runs++) {
        assert_true(n < 200000);
        drift_invariance_report rep;
        drift_err_clear(&err);
        drift_alloc_fail_after(n);
        int rc = drift_invariance_run(&o, be, &rep, &err);
        long hit = drift_alloc_injected();
        drift_alloc_fail_after(-1);
        drift_invariance_report_free(&rep);
        if (hit == 0) {
            assert_int_equal(rc, DRIFT_OK);
            assert_true(rep.n_cfg == 0); /* freed */
            break;
        }
        if (rc != DRIFT_E_NOMEM) {
            fprintf(stderr, "allocation %ld failed, but rc = %d: %s: %s\n", n, rc, err.where, err.msg);
            fail();
        }
        assert_true(err.msg[0] != '\0');
    }
    fprintf(stderr, "drift_invariance_run: %ld of about %ld allocation failure points, each DRIFT_E_NOMEM, then success\n",
            runs, n);
    assert_true(n > 100);
    drift_backend_free(be);
    drift_plan_free(&plan);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_invariance_nomem)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
