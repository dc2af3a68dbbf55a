/* Test helper (header only): runs a semantic graph under an all-fp32 plan on
 * one backend, the assign + backend + exec boilerplate of the captured-graph
 * tests. Any failure fails the cmocka test. Include after <cmocka.h> and the
 * drift headers. */
#ifndef DRIFT_TESTS_FP32_RUN_H
#define DRIFT_TESTS_FP32_RUN_H

#include <string.h>

#include "formats/plan.h"
#include "kernels/backend.h"
#include "replay/exec/exec.h"
#include "replay/ir/assign.h"

/* Assigns sem (borrowed) under an fp32 forward for side, runs it on backend
 * be_name ("cpu", "ref") with parameters ps, buffers bs and inputs is
 * (borrowed) and the optional site callback; *r receives the result (the
 * caller frees it with drift_exec_result_free). The run's error code, with e
 * filled (a failed assign or backend fails the test). */
static inline int test_try_run_fp32(const drift_graph *sem, drift_side side, const char *be_name, drift_hostset *ps,
                                    drift_hostset *bs, drift_hostset *is, drift_exec_site_fn on_site, void *user,
                                    drift_exec_result *r, drift_err *e) {
    drift_err_clear(e);
    drift_plan plan;
    drift_plan_init(&plan);
    plan.diffusion_forward_dtype = DRIFT_F32;
    drift_assign_opts o;
    drift_assign_opts_init(&o);
    o.side = side;
    drift_graph *as = NULL;
    if (drift_assign_dtypes(sem, &plan, NULL, NULL, &o, &as, e)) fail_msg("assign: %s", e->msg);
    drift_backend *be = NULL;
    if (drift_backend_create(be_name, &be, e)) fail_msg("backend %s: %s", be_name, e->msg);
    drift_exec_inputs in = {.params = ps, .buffers = bs, .inputs = is, .on_site = on_site, .user = user};
    memset(r, 0, sizeof *r);
    const int rc = drift_exec_run(as, be, &in, r, e);
    drift_backend_free(be);
    drift_graph_free(as);
    drift_plan_free(&plan);
    return rc;
}

/* The same, any failure failing the test. */
static inline void test_run_fp32(const drift_graph *sem, drift_side side, const char *be_name, drift_hostset *ps,
                                 drift_hostset *bs, drift_hostset *is, drift_exec_site_fn on_site, void *user,
                                 drift_exec_result *r) {
    drift_err e;
    if (test_try_run_fp32(sem, side, be_name, ps, bs, is, on_site, user, r, &e)) fail_msg("%s: %s", e.where, e.msg);
}

#endif
