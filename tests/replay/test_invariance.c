/* drift invariance on the CPU (replay/drive/invariance.h): the exact
 * kernels are batch-invariant at every batch size, position and with CFG
 * joined; a test-only LINEAR whose reduction order depends on M (compiled
 * into this test only, hooked into a cpu backend's table) is caught at the
 * node it was planted in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "formats/dtype.h"
#include "formats/plan.h"
#include "kernels/backend_impl.h" /* the test hook replaces a table entry */
#include "replay/drive/invariance.h"
#include "replay/drive/synth.h"
#include "replay/models/family.h"

static char g_trace[4096], g_trace2[4096];
static drift_plan g_plan;

/* ---- the batch-dependent test kernel ---------------------------------------- */

static int (*g_cpu_run)(const drift_backend *, const drift_op *, const drift_tensor *const *, drift_tensor *,
                        drift_err *);
static int64_t g_hook_m;   /* split-K when M > g_hook_m */
static int64_t g_hook_k;   /* ... and K == g_hook_k (0: any K) */
static long g_hook_hits;

static int hooked_run(const drift_backend *be, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                      drift_err *err) {
    if (op->kind != DRIFT_OP_LINEAR) return g_cpu_run(be, op, in, out, err);
    int64_t K = in[0]->shape[in[0]->ndim - 1], N = in[1]->shape[0], M = in[0]->numel / K;
    if (M <= g_hook_m || (g_hook_k && K != g_hook_k)) return g_cpu_run(be, op, in, out, err);
    g_hook_hits++;
    const float *x = in[0]->data, *w = in[1]->data, *b = op->n_in > 2 ? in[2]->data : NULL;
    float *y = out->data;
    int64_t h = K / 2;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            /* split-K in two halves whose partial sums are rounded to the
             * output dtype before they are added: another reduction order,
             * chosen by M, as a GEMM heuristic chooses split-K */
            float p0 = 0.0f, p1 = 0.0f;
            for (int64_t k = 0; k < h; k++) p0 += x[m * K + k] * w[n * K + k];
            for (int64_t k = h; k < K; k++) p1 += x[m * K + k] * w[n * K + k];
            float acc = drift_round_to(p0, op->out) + drift_round_to(p1, op->out);
            if (b) acc += b[n];
            y[m * N + n] = drift_round_to(acc, op->out);
        }
    return DRIFT_OK;
}

static drift_backend *hooked_cpu(int64_t m_above, int64_t k_only) {
    drift_backend *be = NULL;
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_backend_create("cpu:threads=1", &be, &err), DRIFT_OK);
    g_cpu_run = be->run;
    be->run = hooked_run;
    g_hook_m = m_above;
    g_hook_k = k_only;
    g_hook_hits = 0;
    return be;
}

/* ---- fixtures ----------------------------------------------------------------- */

static int record(const char *model, const char *path) {
    drift_synth_opts so;
    drift_synth_opts_init(&so);
    so.model = model;
    so.steps = 2;
    so.trainer_plan = &g_plan;
    so.rollout_plan = &g_plan;
    so.trainer_path = path;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_synth_record(&so, &err);
    if (rc) fprintf(stderr, "record: %s: %s\n", err.where, err.msg);
    return rc;
}

static int setup(void **state) {
    (void)state;
    const char *tmp = getenv("DRIFT_TMP"), *data = getenv("DRIFT_TESTDATA");
    char plan[4096];
    snprintf(plan, sizeof plan, "%s/plans/wan2_2.json", data ? data : "tests/data");
    snprintf(g_trace, sizeof g_trace, "%s/inv1.h5", tmp ? tmp : "/tmp");
    snprintf(g_trace2, sizeof g_trace2, "%s/inv3.h5", tmp ? tmp : "/tmp");
    drift_plan_init(&g_plan);
    drift_err err;
    drift_err_clear(&err);
    if (drift_plan_load_file(&g_plan, plan, &err)) { fprintf(stderr, "%s: %s\n", err.where, err.msg); return -1; }
    if (record("tiny-dit", g_trace) || record("tiny-dit:batch=3", g_trace2)) return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    drift_plan_free(&g_plan);
    return 0;
}

static void run_check(const char *trace, const drift_backend *be, int cfg, drift_invariance_report *rep) {
    drift_invariance_opts o;
    drift_invariance_opts_init(&o);
    o.trace = trace;
    o.cfg_joined = cfg;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_invariance_run(&o, be, rep, &err);
    if (rc) fprintf(stderr, "invariance: %s: %s\n", err.where, err.msg);
    assert_int_equal(rc, DRIFT_OK);
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_exact_invariant_every_batch(void **state) {
    (void)state;
    drift_backend *be = NULL;
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_backend_create("cpu", &be, &err), DRIFT_OK);
    drift_invariance_report rep;
    run_check(g_trace, be, 1, &rep);
    /* batch 2, 4, 8 at two positions, and both CFG branches */
    assert_int_equal(rep.n_cfg, 8);
    assert_true(rep.has_composition);
    assert_int_equal(rep.composition.n, 1);
    assert_string_equal(rep.cfg[0].pad, "seeded");
    for (int i = 0; i < rep.n_cfg; i++) {
        const drift_inv_config *c = &rep.cfg[i];
        assert_true(c->bitwise);
        assert_int_equal(c->nodes_diff, 0);
        assert_int_equal(c->out_n_diff, 0);
        assert_int_equal(c->op.node, -1);
        /* every node of the forward was compared, not a handful */
        assert_int_equal(c->nodes_compared, rep.nodes);
    }
    /* the padding is real: the floor is not zero, so equal outputs say something */
    assert_true(rep.floor_mean_abs > 0);
    assert_true(rep.invariant);
    assert_non_null(strstr(rep.summary, "invariant"));
    drift_invariance_report_free(&rep);
    drift_backend_free(be);
}

static void test_recorded_padding(void **state) {
    (void)state;
    drift_backend *be = NULL;
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_backend_create("cpu", &be, &err), DRIFT_OK);
    drift_invariance_report rep;
    drift_invariance_opts o;
    drift_invariance_opts_init(&o);
    o.trace = g_trace2;
    o.sample = 1;
    o.step = 1;
    assert_int_equal(drift_invariance_run(&o, be, &rep, &err), DRIFT_OK);
    assert_int_equal(rep.recorded_batch, 3);
    assert_int_equal(rep.step, 1);
    assert_true(rep.has_composition);
    assert_int_equal(rep.composition.n, 3);
    assert_int_equal(rep.composition.samples[2], 2);
    assert_string_equal(rep.cfg[0].pad, "recorded");
    assert_true(rep.invariant);
    drift_invariance_report_free(&rep);
    /* bad input: a sample the step does not have, a step the trace does not have */
    o.sample = 3;
    assert_int_equal(drift_invariance_run(&o, be, &rep, &err), DRIFT_E_USAGE);
    assert_non_null(strstr(err.where, "--sample"));
    drift_invariance_report_free(&rep);
    o.sample = 0;
    o.step = 99;
    assert_int_equal(drift_invariance_run(&o, be, &rep, &err), DRIFT_E_USAGE);
    assert_non_null(strstr(err.where, "--step"));
    drift_invariance_report_free(&rep);
    drift_backend_free(be);
}

/* The widest M of a batch-1 forward of tiny-dit: tokens or text length. */
static int64_t batch1_m(void) {
    drift_family_config cfg;
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_family_parse("tiny-dit", &cfg, &err), DRIFT_OK);
    int64_t L = drift_family_tokens(&cfg);
    return L > cfg.text_len ? L : cfg.text_len;
}

static void test_batch_dependent_linear_caught(void **state) {
    (void)state;
    drift_backend *be = hooked_cpu(batch1_m(), 0);
    drift_invariance_report rep;
    run_check(g_trace, be, 0, &rep);
    assert_true(g_hook_hits > 0);
    assert_false(rep.invariant);
    const drift_inv_config *c = &rep.cfg[0]; /* batch 2, position 0 */
    assert_int_equal(c->batch, 2);
    assert_false(c->bitwise);
    /* the first linear whose M grows past the hook's threshold at batch 2 */
    assert_string_equal(c->op.kind, "linear");
    assert_string_equal(c->op.label, "patch_embedding");
    assert_int_equal(c->op.in_shape[0][0], 2);
    assert_int_equal(c->op_ref.in_shape[0][0], 1);
    assert_string_equal(c->op.kernel, ""); /* the cpu backend has no GEMM heuristic to name */
    assert_true(c->out_n_diff > 0);
    assert_non_null(strstr(rep.summary, "output changes with batch size: first at patch_embedding"));
    /* which configurations agree with each other (the micro-batch question):
     * at batch 2 and 4 the same linears take the split-K path (M > tokens),
     * so their outputs are identical though not batch 1's; at batch 8 the
     * text embedder's M = 8 x 8 passes the threshold too, another output */
    for (int i = 0; i < rep.n_cfg; i++) assert_false(rep.cfg[i].bitwise);
    assert_int_equal(rep.cfg[0].same_as, -1);
    assert_int_equal(rep.cfg[1].same_as, 0);
    assert_int_equal(rep.cfg[2].same_as, 0);
    assert_int_equal(rep.cfg[3].same_as, 0);
    assert_int_equal(rep.cfg[4].batch, 8);
    assert_int_equal(rep.cfg[4].same_as, -1);
    assert_int_equal(rep.cfg[5].same_as, 4);
    drift_invariance_report_free(&rep);
    drift_backend_free(be);
}

static void test_batch_dependent_ffn_caught(void **state) {
    (void)state;
    drift_family_config cfg;
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_family_parse("tiny-dit", &cfg, &err), DRIFT_OK);
    drift_backend *be = hooked_cpu(batch1_m(), cfg.ffn_dim); /* only the FFN's down projection */
    drift_invariance_report rep;
    run_check(g_trace, be, 1, &rep);
    assert_false(rep.invariant);
    for (int i = 0; i < rep.n_cfg; i++) {
        const drift_inv_config *c = &rep.cfg[i];
        assert_false(c->bitwise);
        assert_string_equal(c->op.label, "blocks.0.ffn.net.2");
        assert_string_equal(c->op.kind, "linear");
        assert_int_equal(c->op.in_shape[0][c->op.in_ndim[0] - 1], cfg.ffn_dim);
        assert_string_equal(c->first_site, "blocks.0.ffn:out");
        assert_true(c->site_n_diff > 0 && c->site_max_ulp > 0);
    }
    fprintf(stderr, "summary: %s\n", rep.summary);
    assert_non_null(strstr(rep.summary, "output changes with batch size: first at blocks.0.ffn.net.2 (linear"));
    assert_non_null(strstr(rep.summary, "; first recorded site blocks.0.ffn:out; exact at batch 1"));
    drift_invariance_report_free(&rep);
    drift_backend_free(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_invariant_every_batch),
        cmocka_unit_test(test_recorded_padding),
        cmocka_unit_test(test_batch_dependent_linear_caught),
        cmocka_unit_test(test_batch_dependent_ffn_caught),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
