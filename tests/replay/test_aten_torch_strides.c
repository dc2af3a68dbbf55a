/* Torch's strides of a captured tensor at another batch (replay/capture/aten_torch_strides.c,
 * al_torch_strides) and what they decide (measured on an H200 with cuBLAS API logs):
 * diffusers' TransformerTemporalModel, recorded at batch 2 with one frame, permutes a
 * contiguous [B, C, 1, H, W] to [B, H, W, 1, C] and reshapes it to [B*H*W, 1, C] for proj_in.
 * At batch 2 (and 3) the reshape copies: contiguous, one addmm with the bias in the epilogue
 * (LINEAR). At batch 1 it is a view with strides [1, C*H*W, C]: torch's linear takes
 * matmul + add_, matmul does not fold (bmm) and bmm clones that operand contiguous ('n'): drift
 * lowers BMM (exact layout: no A bits) + ADD. tests/data/graphs/rebatch/temporal_reshape_view.json
 * is that chain at small sizes (C 4, H 2, W 3, Linear 4 -> 8).
 *  - the program at each batch (the recorded one, and re-batched to 1, 2, 3): its GEMM ops and
 *    the values against the definition;
 *  - al_torch_strides on the fixture's nodes and on small graphs: as recorded at the recorded
 *    batch; a reshape's strides from its input's at the new batch (computeStride, contiguous
 *    where torch copies); a dense recorded layout re-derived at the new sizes; a slice kept. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include "tests/replay/rebatch_util.h"

#include "formats/plan.h"
#include "kernels/backend.h"
#include "replay/capture/aten_graph.h"
#include "replay/capture/aten_lower_internal.h"
#include "replay/capture/aten_model.h"
#include "replay/exec/exec.h"
#include "replay/ir/assign.h"
#include "tests/fp32_run.h"
#include "tests/slurp.h"

#define FIXTURE "temporal_reshape_view.json"

static drift_model *load(void) { return rb_load(FIXTURE); }

static char *read_fixture(size_t *len) { return rb_read(FIXTURE, len); }

/* The GEMM-related ops of g: LINEAR nodes (and how many of them have a bias input), BMM nodes
 * (the last one's layout), ADD nodes. */
typedef struct gemm_ops {
    int linear, linear_bias, bmm, bmm_layout, add;
} gemm_ops;

static gemm_ops count_ops(const drift_graph *g) {
    gemm_ops o = {0, 0, 0, -1, 0};
    for (int id = 0; id < drift_graph_count(g); id++) {
        const drift_value *v = drift_graph_value(g, id);
        if (v->kind != DRIFT_VAL_NODE) continue;
        if (v->op.kind == DRIFT_OP_LINEAR) o.linear++, o.linear_bias += v->op.n_in == 3;
        if (v->op.kind == DRIFT_OP_BMM) o.bmm++, o.bmm_layout = v->op.layout;
        if (v->op.kind == DRIFT_OP_ADD) o.add++;
    }
    return o;
}

static float xval(int64_t i) { return rb_xval(i); }
static float pval(int64_t k) { return rb_pval(k); }

/* Runs m on cpu: the input xval over its flat index, each parameter pval over its own. */
static void run(const drift_model *m, drift_exec_result *r) { rb_run(m, r); }

/* o [B, 8, 1, 2, 3]: o[s, n, 0, h, w] = sum_c W[n, c] x[s, c, 0, h, w] + b[n] (W [8, 4], b [8]). */
static void check_values(const drift_model *m, int B) {
    drift_exec_result r;
    run(m, &r);
    assert_int_equal(r.ndim, 5);
    assert_int_equal(r.shape[0], B);
    assert_int_equal(r.shape[1], 8);
    assert_int_equal(r.numel, (int64_t)B * 8 * 6);
    for (int s = 0; s < B; s++)
        for (int n = 0; n < 8; n++)
            for (int hw = 0; hw < 6; hw++) {
                double want = pval(n);
                for (int c = 0; c < 4; c++) want += (double)pval(n * 4 + c) * xval((s * 4 + c) * 6 + hw);
                const double got = r.f32[(s * 8 + n) * 6 + hw];
                if (fabs(got - want) > 1e-5 * (1.0 + fabs(want)))
                    fail_msg("batch %d: o[%d, %d, 0, %d] = %.9g, want %.9g", B, s, n, hw, got, want);
            }
    drift_exec_result_free(&r);
}

/* The fixture re-batched to B: its LINEAR / BMM / ADD counts, its values checked (check_values). */
static gemm_ops rebatched_ops(int B) {
    drift_model *base = load(), *m = NULL;
    drift_err e;
    drift_err_clear(&e);
    if (drift_capture_model_rebatch(base, B, &m, &e)) fail_msg("batch %d: %s", B, e.msg);
    const gemm_ops o = count_ops(m->sem);
    check_values(m, B);
    drift_model_free(m);
    drift_model_free(base);
    return o;
}

/* At the recorded batch 2 the reshape copied (recorded strides contiguous): one LINEAR with
 * its bias, no BMM, no ADD; re-batching to 2 is the same program. */
static void test_recorded_batch_is_one_linear(void **state) {
    (void)state;
    drift_model *base = load();
    assert_int_equal(base->cfg.batch, 2);
    gemm_ops o = count_ops(base->sem);
    assert_int_equal(o.linear, 1);
    assert_int_equal(o.linear_bias, 1);
    assert_int_equal(o.bmm, 0);
    assert_int_equal(o.add, 0);
    drift_model_free(base);
    o = rebatched_ops(2);
    assert_int_equal(o.linear, 1);
    assert_int_equal(o.linear_bias, 1);
    assert_int_equal(o.bmm + o.add, 0);
}

/* Re-batched to 1 the reshape is a strided view: torch's linear runs matmul (no fold: bmm of
 * the operand cloned contiguous, W^T 't' with batch stride 0) and adds the bias on its own. */
static void test_batch1_view_is_bmm_and_add(void **state) {
    (void)state;
    const gemm_ops o = rebatched_ops(1);
    assert_int_equal(o.linear, 0);
    assert_int_equal(o.bmm, 1);
    assert_int_equal(o.bmm_layout, DRIFT_BMM_B_T | DRIFT_BMM_B_BCAST);
    assert_int_equal(o.add, 1);
}

/* Re-batched to 3 the reshape copies again (B and H, W do not merge): one LINEAR with bias. */
static void test_batch3_copy_is_one_linear(void **state) {
    (void)state;
    const gemm_ops o = rebatched_ops(3);
    assert_int_equal(o.linear, 1);
    assert_int_equal(o.linear_bias, 1);
    assert_int_equal(o.bmm + o.add, 0);
}

/* ---- al_torch_strides on a parsed graph with hand-set lowered sizes ---- */

typedef struct tctx {
    drift_aten_graph *g;
    fxv *fx;
    lctx c;
} tctx;

static void tctx_open(tctx *t, const char *json, size_t len, int64_t rb_from, int64_t rb_to) {
    drift_err e;
    drift_err_clear(&e);
    memset(t, 0, sizeof *t);
    if (drift_aten_graph_parse(json, len, "test", &t->g, &e)) fail_msg("%s: %s", e.where, e.msg);
    t->fx = calloc((size_t)t->g->n, sizeof *t->fx);
    assert_non_null(t->fx);
    t->c.g = t->g;
    t->c.fx = t->fx;
    t->c.rb_from = rb_from;
    t->c.rb_to = rb_to;
}

static void tctx_close(tctx *t) {
    free(t->fx);
    drift_aten_graph_free(t->g);
}

/* Node name's lowered view: sizes (nd of them). */
static void lowered(tctx *t, const char *name, int nd, const int64_t *size) {
    const int j = aten_find(t->g, name);
    assert_true(j >= 0);
    t->fx[j].kind = FX_TENSOR;
    t->fx[j].t.nd = nd;
    for (int d = 0; d < nd; d++) t->fx[j].t.size[d] = size[d];
}

/* al_torch_strides of node name: known, with these sizes and strides. */
static void expect(tctx *t, const char *name, int nd, const int64_t *size, const int64_t *stride) {
    const int j = aten_find(t->g, name);
    assert_true(j >= 0);
    int got_nd = 0;
    int64_t sz[DRIFT_MAX_DIMS], st[DRIFT_MAX_DIMS];
    assert_int_equal(al_torch_strides(&t->c, j, &got_nd, sz, st), 1);
    assert_int_equal(got_nd, nd);
    for (int d = 0; d < nd; d++) {
        if (sz[d] != size[d] || st[d] != stride[d])
            fail_msg("%s dim %d: size %lld stride %lld, want size %lld stride %lld", name, d, (long long)sz[d],
                     (long long)st[d], (long long)size[d], (long long)stride[d]);
    }
}

/* The fixture's permute and reshape at batches 2 (recorded, re-batching off or onto 2), 1, 3. */
static void test_strides_of_temporal_chain(void **state) {
    (void)state;
    size_t len = 0;
    char *json = read_fixture(&len);
    const int64_t rec[][2] = {{0, 0}, {2, 2}};
    for (int k = 0; k < 2; k++) { /* as recorded */
        tctx t;
        tctx_open(&t, json, len, rec[k][0], rec[k][1]);
        lowered(&t, "p", 5, (int64_t[]){2, 2, 3, 1, 4});
        lowered(&t, "r", 3, (int64_t[]){12, 1, 4});
        expect(&t, "p", 5, (int64_t[]){2, 2, 3, 1, 4}, (int64_t[]){24, 3, 1, 6, 6});
        expect(&t, "r", 3, (int64_t[]){12, 1, 4}, (int64_t[]){4, 4, 1});
        tctx_close(&t);
    }
    tctx t;
    tctx_open(&t, json, len, 2, 1);
    lowered(&t, "x", 5, (int64_t[]){1, 4, 1, 2, 3});
    lowered(&t, "p", 5, (int64_t[]){1, 2, 3, 1, 4});
    lowered(&t, "r", 3, (int64_t[]){6, 1, 4});
    expect(&t, "x", 5, (int64_t[]){1, 4, 1, 2, 3}, (int64_t[]){24, 6, 6, 3, 1});
    /* the permute's dense layout at batch 1 (the frame dim of size 1 inside the channels) */
    expect(&t, "p", 5, (int64_t[]){1, 2, 3, 1, 4}, (int64_t[]){24, 3, 1, 6, 6});
    /* torch's computeStride: a view [1, C*H*W, C] */
    expect(&t, "r", 3, (int64_t[]){6, 1, 4}, (int64_t[]){1, 24, 6});
    tctx_close(&t);
    tctx_open(&t, json, len, 2, 3);
    lowered(&t, "p", 5, (int64_t[]){3, 2, 3, 1, 4});
    lowered(&t, "r", 3, (int64_t[]){18, 1, 4});
    expect(&t, "r", 3, (int64_t[]){18, 1, 4}, (int64_t[]){4, 4, 1}); /* not viewable: copied */
    tctx_close(&t);
    /* a node without a lowered view (or another nd): the val's shape */
    tctx_open(&t, json, len, 2, 1);
    expect(&t, "r", 3, (int64_t[]){12, 1, 4}, (int64_t[]){4, 4, 1});
    tctx_close(&t);
    free(json);
}

/* Recorded at batch 1: x [1, 5, 4] contiguous; s = x[:, 2:5] (a slice: [1, 3, 4], strides
 * [20, 4, 1], contiguous at batch 1 only); q a dense layout whose batch dim is not outermost
 * ([1, 3, 4] with strides [4, 4, 1] at batch 1: a permute of [3, B, 4]); n a node whose val
 * has no "stride". */
static const char small_graph[] =
    "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"},"
    " \"model_class\": \"T\", \"nodes\": ["
    " {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {},"
    "  \"val\": {\"shape\": [1, 5, 4], \"dtype\": \"float32\", \"stride\": [20, 4, 1]}, \"module\": \"\"},"
    " {\"name\": \"s\", \"op\": \"call_function\", \"target\": \"aten.slice.Tensor\", \"args\": [{\"node\": \"x\"}, 1, 2, 5],"
    "  \"kwargs\": {}, \"val\": {\"shape\": [1, 3, 4], \"dtype\": \"float32\", \"stride\": [20, 4, 1]}, \"module\": \"\"},"
    " {\"name\": \"q\", \"op\": \"call_function\", \"target\": \"aten.permute.default\", \"args\": [{\"node\": \"s\"}, [0, 1, 2]],"
    "  \"kwargs\": {}, \"val\": {\"shape\": [1, 3, 4], \"dtype\": \"float32\", \"stride\": [4, 4, 1]}, \"module\": \"\"},"
    " {\"name\": \"n\", \"op\": \"call_function\", \"target\": \"aten.neg.default\", \"args\": [{\"node\": \"s\"}],"
    "  \"kwargs\": {}, \"val\": {\"shape\": [1, 3, 4], \"dtype\": \"float32\"}, \"module\": \"\"},"
    " {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"n\"}]], \"kwargs\": {},"
    "  \"val\": null, \"module\": \"\"}],"
    " \"inputs\": [{\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],"
    " \"outputs\": [{\"node\": \"n\", \"name\": \"output:noise_pred\"}], \"constants\": {}, \"non_tensor_inputs\": {}}";

static void test_strides_rules(void **state) {
    (void)state;
    tctx t;
    tctx_open(&t, small_graph, strlen(small_graph), 1, 2);
    lowered(&t, "x", 3, (int64_t[]){2, 5, 4});
    lowered(&t, "s", 3, (int64_t[]){2, 3, 4});
    lowered(&t, "q", 3, (int64_t[]){2, 3, 4});
    lowered(&t, "n", 3, (int64_t[]){2, 3, 4});
    /* a slice (its size-1 batch dim's stride is no dense one): kept, not contiguous at batch 2 */
    expect(&t, "s", 3, (int64_t[]){2, 3, 4}, (int64_t[]){20, 4, 1});
    /* dense with the batch inside the rows: re-derived ([3, B, 4] contiguous, permuted) */
    expect(&t, "q", 3, (int64_t[]){2, 3, 4}, (int64_t[]){4, 8, 1});
    /* no "stride": contiguous at the sizes lowered */
    expect(&t, "n", 3, (int64_t[]){2, 3, 4}, (int64_t[]){12, 4, 1});
    tctx_close(&t);
    /* not re-batching: every node exactly as recorded, whatever the lowered sizes say */
    tctx_open(&t, small_graph, strlen(small_graph), 0, 0);
    lowered(&t, "q", 3, (int64_t[]){1, 3, 4});
    expect(&t, "q", 3, (int64_t[]){1, 3, 4}, (int64_t[]){4, 4, 1});
    expect(&t, "s", 3, (int64_t[]){1, 3, 4}, (int64_t[]){20, 4, 1});
    tctx_close(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recorded_batch_is_one_linear),
        cmocka_unit_test(test_batch1_view_is_bmm_and_add),
        cmocka_unit_test(test_batch3_copy_is_one_linear),
        cmocka_unit_test(test_strides_of_temporal_chain),
        cmocka_unit_test(test_strides_rules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
