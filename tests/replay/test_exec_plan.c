/* Tests of the executor's per-run plan (replay/exec/exec_plan.h), a pure
 * function of an assigned graph and the run's switches.
 *
 * A hand-built graph with a dead value, a recorded site, parameter-only
 * values and a widen / add / narrow chain pins liveness, use counts, the
 * cache's fixed set and the cast folding under each switch. On tiny-dit the
 * plan's live nodes are exactly what the executor's counters say it ran
 * (kernels plus every kind of alias), with and without sites: a plan that
 * disagrees with the run loop fails here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "formats/plan.h"
#include "kernels/backend.h"
#include "replay/exec/exec.h"
#include "replay/exec/exec_plan.h"
#include "replay/exec/forward.h"
#include "replay/exec/params_init.h"
#include "replay/ir/fuse.h"
#include "replay/ir/graph.h"

#define OK(call, errp)                                                                                   \
    do {                                                                                                 \
        int rc_ = (call);                                                                                \
        if (rc_ != DRIFT_OK) fail_msg("%s failed (%d): %s: %s", #call, rc_, (errp)->where, (errp)->msg); \
    } while (0)

/* ids of the hand-built graph */
enum { W = 0, ROPE, X, W16, Y, Y32, SUM, OUT, DEAD, N_VALUES };

static int add_node(drift_graph *g, drift_op_kind kind, drift_dtype compute, drift_dtype out, int n_in, int a, int b,
                    const char *site, drift_node_origin origin) {
    drift_err err;
    drift_err_clear(&err);
    drift_node_spec s;
    drift_node_spec_init(&s, kind);
    s.op.compute = compute;
    s.op.out = out;
    s.op.n_in = n_in;
    s.in[0] = a;
    s.in[1] = b;
    s.site = site;
    s.origin = origin;
    int id = -1;
    OK(drift_graph_add_node(g, &s, &id, &err), &err);
    return id;
}

/*  0 w (param fp32 [4,4])   1 rope (buffer fp32 [4])   2 latents (input bf16 [2,4])
 *  3 cast w -> bf16         4 linear(latents, 3) bf16  5 cast 4 -> fp32 (site "blocks.0:out")
 *  6 add(5, rope) fp32      7 cast 6 -> bf16 (output)  8 cast rope -> bf16 (site "rope:bf16", read by nothing) */
static drift_graph *small_graph(int assigned) {
    drift_err err;
    drift_err_clear(&err);
    drift_graph *g = NULL;
    OK(drift_graph_create(1, &g, &err), &err);
    const int64_t sw[2] = {4, 4}, sr[1] = {4}, sx[2] = {2, 4};
    OK(drift_graph_add_leaf(g, DRIFT_VAL_PARAM, "w", DRIFT_F32, 2, sw, NULL, &err), &err);
    OK(drift_graph_add_leaf(g, DRIFT_VAL_BUFFER, "rope", DRIFT_F32, 1, sr, NULL, &err), &err);
    OK(drift_graph_add_leaf(g, DRIFT_VAL_INPUT, "latents", DRIFT_BF16, 2, sx, NULL, &err), &err);
    assert_int_equal(add_node(g, DRIFT_OP_CAST, DRIFT_F32, DRIFT_BF16, 1, W, -1, NULL, DRIFT_ORIGIN_PARAM_CAST), W16);
    assert_int_equal(add_node(g, DRIFT_OP_LINEAR, DRIFT_BF16, DRIFT_BF16, 2, X, W16, NULL, DRIFT_ORIGIN_MODEL), Y);
    assert_int_equal(add_node(g, DRIFT_OP_CAST, DRIFT_F32, DRIFT_F32, 1, Y, -1, "blocks.0:out", DRIFT_ORIGIN_MODEL), Y32);
    assert_int_equal(add_node(g, DRIFT_OP_ADD, DRIFT_F32, DRIFT_F32, 2, Y32, ROPE, NULL, DRIFT_ORIGIN_MODEL), SUM);
    assert_int_equal(add_node(g, DRIFT_OP_CAST, DRIFT_F32, DRIFT_BF16, 1, SUM, -1, NULL, DRIFT_ORIGIN_MODEL), OUT);
    assert_int_equal(add_node(g, DRIFT_OP_CAST, DRIFT_F32, DRIFT_BF16, 1, ROPE, -1, "rope:bf16", DRIFT_ORIGIN_MODEL), DEAD);
    OK(drift_graph_set_output(g, OUT, &err), &err);
    assert_int_equal(drift_graph_count(g), N_VALUES);
    if (!assigned) { /* the same values in a semantic graph: the planner must refuse it */
        drift_graph_free(g);
        g = NULL;
        OK(drift_graph_create(0, &g, &err), &err);
        OK(drift_graph_add_leaf(g, DRIFT_VAL_PARAM, "w", DRIFT_F32, 2, sw, NULL, &err), &err);
    }
    return g;
}

static void build(const drift_graph *g, int sites, int cached, int fuse, drift_exec_plan *p) {
    drift_err err;
    drift_err_clear(&err);
    drift_exec_plan_opts o = {.observe_sites = sites, .cached = cached, .fuse_casts = fuse};
    OK(drift_exec_plan_build(g, &o, p, &err), &err);
    assert_int_equal(p->n, N_VALUES);
    assert_int_equal(p->output, OUT);
}

static void test_liveness_and_uses(void **state) {
    (void)state;
    drift_graph *g = small_graph(1);
    drift_exec_plan p;
    /* output only: the dead cast does not run, nothing reads it */
    build(g, 0, 0, 0, &p);
    const unsigned char live0[N_VALUES] = {1, 1, 1, 1, 1, 1, 1, 1, 0};
    const int uses0[N_VALUES] = {1, 1, 1, 1, 1, 1, 1, 1, 0};
    assert_memory_equal(p.live, live0, sizeof live0);
    assert_memory_equal(p.uses, uses0, sizeof uses0);
    assert_int_equal(p.n_live, 8);
    assert_null(p.fixed);
    assert_int_equal(p.fused, 0);
    drift_exec_plan_free(&p);
    /* observed sites: the dead cast is a site, so it runs and reads rope a second time */
    build(g, 1, 0, 0, &p);
    const unsigned char live1[N_VALUES] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    const int uses1[N_VALUES] = {1, 2, 1, 1, 1, 1, 1, 1, 0};
    assert_memory_equal(p.live, live1, sizeof live1);
    assert_memory_equal(p.uses, uses1, sizeof uses1);
    assert_int_equal(p.n_live, 9);
    drift_exec_plan_free(&p);
    drift_graph_free(g);
}

static void test_fixed(void **state) {
    (void)state;
    drift_graph *g = small_graph(1);
    drift_exec_plan p;
    build(g, 1, 1, 0, &p);
    assert_non_null(p.fixed);
    /* parameters, buffers and what only they feed; never an input or what it reaches */
    const unsigned char fixed[N_VALUES] = {1, 1, 0, 1, 0, 0, 0, 0, 1};
    assert_memory_equal(p.fixed, fixed, sizeof fixed);
    drift_exec_plan_free(&p);
    drift_graph_free(g);
}

static void test_fuse(void **state) {
    (void)state;
    drift_graph *g = small_graph(1);
    drift_exec_plan p;
    /* sites not observed: the widening of the linear's output is skipped (the add reads bf16
       exactly), and the add rounds to bf16 itself, so the output cast is folded */
    build(g, 0, 0, 1, &p);
    assert_int_equal(p.fused, 1);
    assert_int_equal(p.fuse.n, N_VALUES);
    assert_int_equal(p.fuse.action[Y32], DRIFT_FUSE_SKIP_CAST);
    assert_int_equal(p.fuse.action[OUT], DRIFT_FUSE_FOLD_CAST);
    assert_int_equal(p.fuse.out[SUM], DRIFT_BF16);
    assert_int_equal(p.fuse.action[W16], DRIFT_FUSE_NONE); /* narrowing a parameter is a real rounding */
    drift_exec_plan_free(&p);
    /* observed: blocks.0:out is a site, so it is materialised in fp32 */
    build(g, 1, 0, 1, &p);
    assert_int_equal(p.fuse.action[Y32], DRIFT_FUSE_NONE);
    assert_int_equal(p.fuse.action[OUT], DRIFT_FUSE_FOLD_CAST);
    drift_exec_plan_free(&p);
    drift_graph_free(g);
}

static void test_pure(void **state) {
    (void)state;
    drift_graph *g = small_graph(1);
    drift_exec_plan a, b;
    build(g, 1, 1, 1, &a);
    build(g, 1, 1, 1, &b);
    assert_memory_equal(a.live, b.live, N_VALUES);
    assert_memory_equal(a.uses, b.uses, N_VALUES * sizeof *a.uses);
    assert_memory_equal(a.fixed, b.fixed, N_VALUES);
    assert_memory_equal(a.fuse.action, b.fuse.action, N_VALUES);
    assert_int_equal(drift_graph_count(g), N_VALUES);
    assert_int_equal(drift_graph_value(g, SUM)->op.out, DRIFT_F32); /* folding plans, never retypes the graph */
    drift_exec_plan_free(&a);
    drift_exec_plan_free(&b);
    drift_exec_plan_free(&b); /* freeing twice (zeroed) and NULL are fine */
    drift_exec_plan_free(NULL);
    drift_graph_free(g);
}

static void test_bad_input(void **state) {
    (void)state;
    drift_err err;
    drift_err_clear(&err);
    drift_exec_plan p;
    drift_graph *sem = small_graph(0);
    assert_int_equal(drift_exec_plan_build(sem, NULL, &p, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "explicit dtypes"));
    assert_null(p.live);
    drift_exec_plan_free(&p);
    drift_graph_free(sem);
    drift_err_clear(&err);
    assert_int_equal(drift_exec_plan_build(NULL, NULL, &p, &err), DRIFT_E_INTERNAL);
    drift_graph *g = small_graph(1);
    assert_int_equal(drift_exec_plan_build(g, NULL, NULL, &err), DRIFT_E_INTERNAL);
    /* NULL options: output only, no cache, no folding */
    OK(drift_exec_plan_build(g, NULL, &p, &err), &err);
    assert_int_equal(p.n_live, 8);
    assert_null(p.fixed);
    assert_int_equal(p.fused, 0);
    drift_exec_plan_free(&p);
    drift_graph_free(g);
}

static int count_cb(const char *site, const drift_tensor *t, void *user, drift_err *err) {
    (void)site;
    (void)t;
    (void)err;
    (*(int *)user)++;
    return 0;
}

/* the plan's live nodes are what the run loop runs: kernels + aliases, per switch setting */
static void test_plan_matches_run(void **state) {
    (void)state;
    drift_err err;
    drift_err_clear(&err);
    drift_model *m = NULL;
    drift_forward *f = NULL;
    drift_hostset *inputs = NULL;
    const drift_hostset *bufs = NULL;
    drift_backend *be = NULL;
    OK(drift_model_create("tiny-dit", &m, &err), &err);
    OK(drift_model_seed_params(m, 7, &err), &err);
    OK(drift_params_init_inputs(&m->cfg, 3, &inputs, &err), &err);
    drift_plan plan;
    drift_plan_init(&plan);
    OK(drift_forward_prepare(m, &plan, DRIFT_SIDE_TRAINER, NULL, &f, &err), &err);
    drift_plan_free(&plan);
    OK(drift_model_buffers(m, f->rope, &bufs, &err), &err);
    OK(drift_backend_create("cpu", &be, &err), &err);
    const drift_graph *g = f->assigned;
    int64_t live_nodes[2][2];
    for (int sites = 0; sites <= 1; sites++)
        for (int fuse = 0; fuse <= 1; fuse++) {
            drift_exec_plan p;
            OK(drift_exec_plan_build(g, &(drift_exec_plan_opts){.observe_sites = sites, .fuse_casts = fuse}, &p, &err), &err);
            int64_t nodes = 0, n_sites = 0;
            for (int i = 0; i < p.n; i++) {
                const drift_value *v = drift_graph_value(g, i);
                if (p.live[i] && v->kind == DRIFT_VAL_NODE) nodes++;
                if (sites && v->site) n_sites++;
            }
            int seen = 0;
            drift_exec_stats st;
            drift_exec_inputs in = {.params = m->params, .buffers = bufs, .inputs = inputs,
                                    .on_site = sites ? count_cb : NULL, .user = &seen};
            drift_exec_options o = {.alias = 1, .fuse_casts = fuse, .stats = &st};
            drift_exec_result res;
            OK(drift_exec_run_ex(g, be, &in, &o, &res, &err), &err);
            int64_t ran = st.kernels + st.identity_casts + st.views_aliased + st.narrows_aliased + st.casts_skipped +
                          st.casts_folded;
            print_message("tiny-dit sites=%d fuse=%d: %lld live nodes of %d values, %lld ran (%lld kernels)\n", sites,
                          fuse, (long long)nodes, p.n, (long long)ran, (long long)st.kernels);
            assert_int_equal(ran, nodes);
            assert_int_equal(seen, n_sites);
            assert_true(nodes < p.n);
            live_nodes[sites][fuse] = nodes;
            if (fuse) assert_int_equal(st.casts_skipped + st.casts_folded, p.fuse.skipped + p.fuse.folded);
            drift_exec_result_free(&res);
            drift_exec_plan_free(&p);
        }
    /* observing sites never makes less run; folding never changes what is live */
    assert_true(live_nodes[0][0] <= live_nodes[1][0]);
    assert_int_equal(live_nodes[0][0], live_nodes[0][1]);
    assert_int_equal(live_nodes[1][0], live_nodes[1][1]);
    drift_backend_free(be);
    drift_hostset_free(inputs);
    drift_forward_free(f);
    drift_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_liveness_and_uses), cmocka_unit_test(test_fixed),   cmocka_unit_test(test_fuse),
        cmocka_unit_test(test_pure),              cmocka_unit_test(test_bad_input), cmocka_unit_test(test_plan_matches_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
