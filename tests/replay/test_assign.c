/* Tests of replay/assign: one test per rule of docs/autocast.md on tiny
 * hand-built graphs, then the plan consequences on the Wan graph. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "formats/plan.h"
#include "replay/ir/assign.h"
#include "replay/ir/graph.h"
#include "replay/models/family.h"
#include "replay/models/wan_graph.h"

#define OK(call, errp)                                                                                   \
    do {                                                                                                 \
        int rc_ = (call);                                                                                \
        if (rc_ != DRIFT_OK) fail_msg("%s failed (%d): %s: %s", #call, rc_, (errp)->where, (errp)->msg); \
    } while (0)

/* ---- a tiny graph builder for the rule tests ---------------------------------- */

typedef struct tg {
    drift_graph *g;
    drift_err err;
} tg;

static tg *tg_new(void) {
    tg *t = calloc(1, sizeof *t);
    assert_non_null(t);
    drift_err_clear(&t->err);
    OK(drift_graph_create(0, &t->g, &t->err), &t->err);
    return t;
}

static void tg_free(tg *t) {
    drift_graph_free(t->g);
    free(t);
}

static int tg_leaf(tg *t, drift_value_kind k, const char *name, int ndim, int64_t d0, int64_t d1) {
    int64_t s[2] = {d0, d1};
    int id = -1;
    OK(drift_graph_add_leaf(t->g, k, name, k == DRIFT_VAL_INPUT ? DRIFT_DTYPE_INVALID : DRIFT_F32, ndim, s, &id,
                            &t->err),
       &t->err);
    return id;
}

static int tg_node(tg *t, drift_op_kind k, drift_dtype_rule rule, int n_in, int a, int b, int c) {
    drift_node_spec s;
    drift_node_spec_init(&s, k);
    s.op.n_in = n_in;
    s.in[0] = a;
    if (n_in > 1) s.in[1] = b;
    if (n_in > 2) s.in[2] = c;
    s.rule = rule;
    if (k == DRIFT_OP_LAYER_NORM || k == DRIFT_OP_RMS_NORM) s.op.eps = 1e-6f;
    if (k == DRIFT_OP_ATTENTION) s.op.scale = 0.25f;
    int id = -1;
    OK(drift_graph_add_node(t->g, &s, &id, &t->err), &t->err);
    return id;
}

static int tg_cast(tg *t, drift_dtype_rule rule, int x, drift_dtype to, int ref) {
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_CAST);
    s.op.n_in = 1;
    s.in[0] = x;
    s.rule = rule;
    s.rule_dtype = to;
    s.rule_ref = ref;
    int id = -1;
    OK(drift_graph_add_node(t->g, &s, &id, &t->err), &t->err);
    return id;
}

/* A plan with forward dtype fwd (both sides) and the given pattern flags. */
static void plan_make(drift_plan *p, const char *fwd, const char *const *flags) {
    drift_err err;
    drift_err_clear(&err);
    drift_plan_init(p);
    OK(drift_plan_apply_flag(p, "--diffusion-forward-dtype", fwd, &err), &err);
    OK(drift_plan_apply_flag(p, "--sglang-dit-precision", fwd, &err), &err);
    for (int i = 0; flags && flags[i]; i += 2) OK(drift_plan_apply_flag(p, flags[i], flags[i + 1], &err), &err);
}

/* Assigns t's graph under p; params of the graph are compiled through a
 * table made from the graph's own parameter leaves. */
static drift_graph *assign_with(const drift_graph *g, const drift_plan *p, drift_side side, const drift_dtype *handed) {
    drift_err err;
    drift_err_clear(&err);
    drift_param_table table;
    drift_param_table_init(&table);
    for (int i = 0; i < drift_graph_count(g); i++) {
        const drift_value *v = drift_graph_value(g, i);
        if (v->kind == DRIFT_VAL_PARAM) OK(drift_param_table_add(&table, v->name, v->ndim, v->shape, -1, &err), &err);
    }
    drift_compiled_plan cp;
    memset(&cp, 0, sizeof cp);
    drift_assign_opts o;
    drift_assign_opts_init(&o);
    o.side = side;
    if (handed)
        for (int i = 0; i < DRIFT_INPUT_COUNT; i++) o.handed_over[i] = handed[i];
    drift_graph *out = NULL;
    if (p && side != DRIFT_SIDE_ORACLE) {
        OK(drift_plan_compile(p, &table, &cp, &err), &err);
        OK(drift_assign_dtypes(g, p, &cp, &table, &o, &out, &err), &err);
    } else {
        OK(drift_assign_dtypes(g, p, NULL, NULL, &o, &out, &err), &err);
    }
    drift_compiled_plan_free(&cp);
    drift_param_table_free(&table);
    return out;
}

static const drift_value *A(const drift_graph *a, const drift_graph *sem, int sem_id) {
    int id = drift_assign_find(a, sem, sem_id);
    assert_true(id >= 0);
    return drift_graph_value(a, id);
}

/* dtype of input k of the assigned node for sem_id (after inserted casts) */
static drift_dtype in_dtype(const drift_graph *a, const drift_graph *sem, int sem_id, int k) {
    return drift_graph_value(a, A(a, sem, sem_id)->in[k])->dtype;
}

static int count_origin(const drift_graph *a, drift_node_origin o) {
    int n = 0;
    for (int i = 0; i < drift_graph_count(a); i++) {
        const drift_value *v = drift_graph_value(a, i);
        n += v->kind == DRIFT_VAL_NODE && v->origin == o;
    }
    return n;
}

/* ---- per rule ------------------------------------------------------------------------ */

/* Rule: parameters are fp32 masters cast to their forward dtype (FSDP). */
static void test_rule_param_cast(void **state) {
    (void)state;
    tg *t = tg_new();
    int w = tg_leaf(t, DRIFT_VAL_PARAM, "m.weight", 1, 4, 0);
    int x = tg_node(t, DRIFT_OP_SILU, DRIFT_RULE_PROMOTE, 1, w, 0, 0);
    drift_plan p;
    plan_make(&p, "bf16", NULL);
    drift_graph *a = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, NULL);
    int leaf = drift_graph_find_leaf(a, DRIFT_VAL_PARAM, "m.weight");
    assert_int_equal(drift_graph_value(a, leaf)->dtype, DRIFT_F32); /* the master */
    assert_int_equal(A(a, t->g, w)->dtype, DRIFT_BF16);             /* the forward copy */
    assert_int_equal(A(a, t->g, w)->origin, DRIFT_ORIGIN_PARAM_CAST);
    assert_int_equal(A(a, t->g, x)->dtype, DRIFT_BF16);
    drift_graph_free(a);
    drift_plan_free(&p);
    /* an override keeps it fp32: no cast at all */
    const char *f[] = {"--param-dtype", "m.*=fp32", NULL};
    plan_make(&p, "bf16", f);
    a = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, NULL);
    assert_int_equal(A(a, t->g, w)->kind, DRIFT_VAL_PARAM);
    assert_int_equal(A(a, t->g, x)->dtype, DRIFT_F32);
    assert_int_equal(count_origin(a, DRIFT_ORIGIN_PARAM_CAST), 0);
    drift_graph_free(a);
    drift_plan_free(&p);
    /* a bf16 FSDP master is a bf16 leaf (rounded at upload) */
    const char *m[] = {"--fsdp-master-dtype", "bf16", NULL};
    plan_make(&p, "fp32", m);
    a = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, NULL);
    assert_int_equal(drift_graph_value(a, drift_graph_find_leaf(a, DRIFT_VAL_PARAM, "m.weight"))->dtype, DRIFT_BF16);
    assert_int_equal(A(a, t->g, w)->dtype, DRIFT_F32); /* widened to the fp32 forward */
    drift_graph_free(a);
    drift_plan_free(&p);
    tg_free(t);
}

/* Rule: lower-precision list (linear, attention) casts every operand to the
 * autocast dtype; without autocast (fp32 forward) it follows promotion. */
static void test_rule_autocast_lower(void **state) {
    (void)state;
    tg *t = tg_new();
    int x = tg_leaf(t, DRIFT_VAL_INPUT, "cond", 2, 3, 8);
    int w = tg_leaf(t, DRIFT_VAL_PARAM, "lin.weight", 2, 4, 8);
    int b = tg_leaf(t, DRIFT_VAL_PARAM, "lin.bias", 1, 4, 0);
    int y = tg_node(t, DRIFT_OP_LINEAR, DRIFT_RULE_AUTOCAST_LOWER, 3, x, w, b);
    drift_plan p;
    plan_make(&p, "bf16", NULL);
    drift_graph *a = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, NULL);
    const drift_value *v = A(a, t->g, y);
    assert_int_equal(v->op.compute, DRIFT_BF16);
    assert_int_equal(v->op.out, DRIFT_BF16);
    for (int k = 0; k < 3; k++) assert_int_equal(in_dtype(a, t->g, y, k), DRIFT_BF16);
    assert_int_equal(drift_graph_value(a, v->in[0])->origin, DRIFT_ORIGIN_AUTOCAST); /* the fp32 input's cast */
    drift_graph_free(a);
    drift_plan_free(&p);
    /* fp16 autocast */
    plan_make(&p, "fp16", NULL);
    a = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, NULL);
    assert_int_equal(A(a, t->g, y)->op.out, DRIFT_F16);
    drift_graph_free(a);
    drift_plan_free(&p);
    /* fp32 forward: no autocast, no casts */
    plan_make(&p, "fp32", NULL);
    a = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, NULL);
    assert_int_equal(A(a, t->g, y)->op.compute, DRIFT_F32);
    assert_int_equal(A(a, t->g, y)->op.out, DRIFT_F32);
    assert_int_equal(count_origin(a, DRIFT_ORIGIN_AUTOCAST) + count_origin(a, DRIFT_ORIGIN_PARAM_CAST), 0);
    drift_graph_free(a);
    drift_plan_free(&p);
    /* fp32 forward with a bf16 input handed over: promotion widens it */
    drift_dtype handed[3] = {DRIFT_F32, DRIFT_BF16, DRIFT_F32};
    plan_make(&p, "fp32", NULL);
    a = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, handed);
    assert_int_equal(A(a, t->g, y)->op.out, DRIFT_F32);
    assert_int_equal(drift_graph_value(a, A(a, t->g, y)->in[0])->origin, DRIFT_ORIGIN_PROMOTE);
    drift_graph_free(a);
    drift_plan_free(&p);
    tg_free(t);
}

/* Consequence: under bf16 autocast an fp32 override on a LINEAR weight
 * changes nothing: the operand is rounded to bf16 either way (by FSDP's cast
 * or by autocast's, both RNE of the same master). */
static void test_fp32_linear_override_is_noop(void **state) {
    (void)state;
    tg *t = tg_new();
    int x = tg_leaf(t, DRIFT_VAL_INPUT, "cond", 2, 3, 8);
    int w = tg_leaf(t, DRIFT_VAL_PARAM, "lin.weight", 2, 4, 8);
    int b = tg_leaf(t, DRIFT_VAL_PARAM, "lin.bias", 1, 4, 0);
    int y = tg_node(t, DRIFT_OP_LINEAR, DRIFT_RULE_AUTOCAST_LOWER, 3, x, w, b);
    int z = tg_node(t, DRIFT_OP_GELU_TANH, DRIFT_RULE_PROMOTE, 1, y, 0, 0);
    drift_plan p0, p1;
    plan_make(&p0, "bf16", NULL);
    const char *f[] = {"--param-dtype", "lin.*=fp32", NULL};
    plan_make(&p1, "bf16", f);
    drift_graph *a0 = assign_with(t->g, &p0, DRIFT_SIDE_TRAINER, NULL);
    drift_graph *a1 = assign_with(t->g, &p1, DRIFT_SIDE_TRAINER, NULL);
    /* the parameter differs (bf16 copy vs fp32) ... */
    assert_int_equal(A(a0, t->g, w)->dtype, DRIFT_BF16);
    assert_int_equal(A(a1, t->g, w)->dtype, DRIFT_F32);
    /* ... but every model node computes with the same dtypes on the same
     * effective operand dtypes (the fp32 weight is autocast to bf16) */
    for (int s = 0; s < drift_graph_count(t->g); s++) {
        if (drift_graph_value(t->g, s)->kind != DRIFT_VAL_NODE) continue;
        const drift_value *v0 = A(a0, t->g, s), *v1 = A(a1, t->g, s);
        assert_int_equal(v0->op.compute, v1->op.compute);
        assert_int_equal(v0->op.out, v1->op.out);
        for (int k = 0; k < v0->op.n_in; k++) assert_int_equal(in_dtype(a0, t->g, s, k), in_dtype(a1, t->g, s, k));
    }
    assert_int_equal(in_dtype(a1, t->g, y, 1), DRIFT_BF16);
    assert_int_equal(A(a1, t->g, z)->dtype, DRIFT_BF16);
    /* in the override case the weight's cast is autocast's, not FSDP's */
    assert_int_equal(drift_graph_value(a1, A(a1, t->g, y)->in[1])->origin, DRIFT_ORIGIN_AUTOCAST);
    drift_graph_free(a0);
    drift_graph_free(a1);
    drift_plan_free(&p0);
    drift_plan_free(&p1);
    tg_free(t);
}

/* Rule: fp32 list (layer_norm, group_norm, softmax, exp, pow, rsqrt, sum):
 * lower-precision operands cast to fp32, output fp32; without autocast:
 * promotion. */
static void test_rule_autocast_fp32(void **state) {
    (void)state;
    tg *t = tg_new();
    int x = tg_leaf(t, DRIFT_VAL_INPUT, "cond", 2, 3, 4);
    int w = tg_leaf(t, DRIFT_VAL_PARAM, "n.weight", 1, 4, 0);
    int y = tg_node(t, DRIFT_OP_LAYER_NORM, DRIFT_RULE_AUTOCAST_FP32, 2, x, w, 0);
    drift_dtype handed[3] = {DRIFT_F32, DRIFT_BF16, DRIFT_F32};
    drift_plan p;
    plan_make(&p, "bf16", NULL);
    drift_graph *a = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, handed);
    assert_int_equal(A(a, t->g, y)->op.out, DRIFT_F32);
    assert_int_equal(A(a, t->g, y)->op.compute, DRIFT_F32);
    assert_int_equal(in_dtype(a, t->g, y, 0), DRIFT_F32);
    assert_int_equal(in_dtype(a, t->g, y, 1), DRIFT_F32); /* the bf16 weight copy, widened */
    assert_int_equal(drift_graph_value(a, A(a, t->g, y)->in[0])->origin, DRIFT_ORIGIN_AUTOCAST);
    drift_graph_free(a);
    drift_plan_free(&p);
    /* no autocast: bf16 input, fp32 weight -> promotion to fp32 */
    plan_make(&p, "fp32", NULL);
    a = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, handed);
    assert_int_equal(A(a, t->g, y)->op.out, DRIFT_F32);
    assert_int_equal(drift_graph_value(a, A(a, t->g, y)->in[0])->origin, DRIFT_ORIGIN_PROMOTE);
    drift_graph_free(a);
    drift_plan_free(&p);
    tg_free(t);
}

/* Rule: type promotion for everything else (bf16 + fp32 -> fp32, bf16 + bf16
 * -> bf16, bf16 + fp16 -> fp32); operands widened exactly. */
static void test_rule_promote(void **state) {
    (void)state;
    tg *t = tg_new();
    int a16 = tg_leaf(t, DRIFT_VAL_INPUT, "latents", 2, 3, 4);
    int b16 = tg_leaf(t, DRIFT_VAL_INPUT, "cond", 2, 3, 4);
    int f32 = tg_leaf(t, DRIFT_VAL_INPUT, "timestep", 2, 1, 4);
    int s1 = tg_node(t, DRIFT_OP_ADD, DRIFT_RULE_PROMOTE, 2, a16, f32, 0);
    int s2 = tg_node(t, DRIFT_OP_MUL, DRIFT_RULE_PROMOTE, 2, a16, b16, 0);
    int s3 = tg_node(t, DRIFT_OP_SILU, DRIFT_RULE_PROMOTE, 1, a16, 0, 0);
    drift_plan p;
    plan_make(&p, "bf16", NULL);
    drift_dtype handed[3] = {DRIFT_BF16, DRIFT_BF16, DRIFT_F32};
    drift_graph *g = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, handed);
    assert_int_equal(A(g, t->g, s1)->dtype, DRIFT_F32);
    assert_int_equal(A(g, t->g, s1)->op.compute, DRIFT_F32);
    assert_int_equal(in_dtype(g, t->g, s1, 0), DRIFT_F32);
    assert_int_equal(drift_graph_value(g, A(g, t->g, s1)->in[0])->origin, DRIFT_ORIGIN_PROMOTE);
    assert_int_equal(A(g, t->g, s2)->dtype, DRIFT_BF16);
    assert_int_equal(A(g, t->g, s2)->op.compute, DRIFT_F32); /* opmath */
    assert_int_equal(A(g, t->g, s3)->dtype, DRIFT_BF16);
    drift_graph_free(g);
    handed[1] = DRIFT_F16;
    g = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, handed);
    assert_int_equal(A(g, t->g, s2)->dtype, DRIFT_F32);
    assert_int_equal(in_dtype(g, t->g, s2, 0), DRIFT_F32);
    assert_int_equal(in_dtype(g, t->g, s2, 1), DRIFT_F32);
    drift_graph_free(g);
    drift_plan_free(&p);
    assert_int_equal(drift_assign_promote(DRIFT_BF16, DRIFT_F16), DRIFT_F32);
    assert_int_equal(drift_assign_promote(DRIFT_F64, DRIFT_F16), DRIFT_F64);
    assert_int_equal(drift_assign_promote(DRIFT_DTYPE_INVALID, DRIFT_BF16), DRIFT_BF16);
    tg_free(t);
}

/* Rules: like_input0 (views, rope's empty_like: tables stay fp32) and the
 * composite rms_norm (out = promote(x, weight), no casts). */
static void test_rule_like_input0_and_rms(void **state) {
    (void)state;
    tg *t = tg_new();
    int64_t s4[4] = {1, 2, 2, 4};
    int x = -1;
    OK(drift_graph_add_leaf(t->g, DRIFT_VAL_INPUT, "latents", DRIFT_DTYPE_INVALID, 4, s4, &x, &t->err), &t->err);
    int cs = tg_leaf(t, DRIFT_VAL_BUFFER, "cos", 2, 2, 4);
    int sn = tg_leaf(t, DRIFT_VAL_BUFFER, "sin", 2, 2, 4);
    int r = tg_node(t, DRIFT_OP_ROPE, DRIFT_RULE_LIKE_INPUT0, 3, x, cs, sn);
    int w = tg_leaf(t, DRIFT_VAL_PARAM, "nq.weight", 1, 4, 0);
    int n = tg_node(t, DRIFT_OP_RMS_NORM, DRIFT_RULE_RMS_NORM, 2, r, w, 0);
    drift_plan p;
    plan_make(&p, "bf16", NULL);
    drift_dtype handed[3] = {DRIFT_BF16, DRIFT_F32, DRIFT_F32};
    drift_graph *g = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, handed);
    assert_int_equal(A(g, t->g, r)->dtype, DRIFT_BF16);
    assert_int_equal(in_dtype(g, t->g, r, 1), DRIFT_F32);
    assert_int_equal(in_dtype(g, t->g, r, 2), DRIFT_F32);
    assert_int_equal(A(g, t->g, n)->dtype, DRIFT_BF16);
    assert_int_equal(in_dtype(g, t->g, n, 1), DRIFT_BF16);
    drift_graph_free(g);
    drift_plan_free(&p);
    /* an fp32 norm weight leaves the rms_norm output in x's dtype (torch 2.11's
       composite ends in .type_as(input); tests/gpu/rms_norm_probe.py), no cast of x */
    const char *f[] = {"--param-dtype", "nq.weight=fp32", NULL};
    plan_make(&p, "bf16", f);
    g = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, handed);
    assert_int_equal(A(g, t->g, n)->dtype, DRIFT_BF16);
    assert_int_equal(in_dtype(g, t->g, n, 0), DRIFT_BF16);
    assert_int_equal(in_dtype(g, t->g, n, 1), DRIFT_F32);
    drift_graph_free(g);
    drift_plan_free(&p);
    tg_free(t);
}

/* Rules: explicit casts as written (.float(), .type_as(x), .to(param dtype)),
 * fixed-dtype ops. */
static void test_rule_explicit_casts(void **state) {
    (void)state;
    tg *t = tg_new();
    int x = tg_leaf(t, DRIFT_VAL_INPUT, "latents", 2, 3, 4);
    int c = tg_leaf(t, DRIFT_VAL_INPUT, "cond", 2, 3, 4);
    int w = tg_leaf(t, DRIFT_VAL_PARAM, "te.weight", 2, 4, 4);
    int f = tg_cast(t, DRIFT_RULE_CAST_TO, x, DRIFT_F32, -1);
    int ta = tg_cast(t, DRIFT_RULE_TYPE_AS, f, DRIFT_DTYPE_INVALID, c);
    int tp = tg_cast(t, DRIFT_RULE_TYPE_AS, f, DRIFT_DTYPE_INVALID, w);
    int l = tg_node(t, DRIFT_OP_LINEAR, DRIFT_RULE_AUTOCAST_LOWER, 2, tp, w, 0);
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_TIMESTEP_SINUSOID);
    int64_t s1[1] = {3};
    int ts = -1;
    OK(drift_graph_add_leaf(t->g, DRIFT_VAL_INPUT, "timestep", DRIFT_DTYPE_INVALID, 1, s1, &ts, &t->err), &t->err);
    s.op.n_in = 1;
    s.in[0] = ts;
    s.op.dim = 8;
    s.op.max_period = 10000.0f;
    s.op.flip_sin_to_cos = 1;
    s.rule = DRIFT_RULE_FIXED;
    s.rule_dtype = DRIFT_F32;
    int sin_id = -1;
    OK(drift_graph_add_node(t->g, &s, &sin_id, &t->err), &t->err);

    drift_plan p;
    plan_make(&p, "bf16", NULL);
    drift_dtype handed[3] = {DRIFT_BF16, DRIFT_BF16, DRIFT_BF16};
    drift_graph *g = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, handed);
    assert_int_equal(A(g, t->g, f)->dtype, DRIFT_F32);
    assert_int_equal(A(g, t->g, ta)->dtype, DRIFT_BF16);  /* follows cond's dtype */
    assert_int_equal(A(g, t->g, tp)->dtype, DRIFT_BF16);  /* follows te.weight's forward dtype */
    assert_int_equal(A(g, t->g, sin_id)->dtype, DRIFT_F32);
    assert_int_equal(A(g, t->g, l)->dtype, DRIFT_BF16);
    drift_graph_free(g);
    drift_plan_free(&p);
    /* the time embedder's input cast follows its parameter dtype */
    const char *o[] = {"--param-dtype", "te.*=fp32", NULL};
    plan_make(&p, "bf16", o);
    handed[1] = DRIFT_F32;
    g = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, handed);
    assert_int_equal(A(g, t->g, tp)->dtype, DRIFT_F32);
    assert_int_equal(A(g, t->g, ta)->dtype, DRIFT_F32);
    assert_int_equal(A(g, t->g, l)->dtype, DRIFT_BF16); /* autocast still rounds the linear */
    drift_graph_free(g);
    drift_plan_free(&p);
    tg_free(t);
}

/* Rule: the boundary: input_dtype_policy default / explicit / null. */
static void test_rule_input_policy(void **state) {
    (void)state;
    tg *t = tg_new();
    int x = tg_leaf(t, DRIFT_VAL_INPUT, "latents", 2, 3, 4);
    int y = tg_cast(t, DRIFT_RULE_INPUT_POLICY, x, DRIFT_DTYPE_INVALID, DRIFT_INPUT_LATENTS);
    int c = tg_leaf(t, DRIFT_VAL_INPUT, "cond", 2, 3, 4);
    int d = tg_cast(t, DRIFT_RULE_INPUT_POLICY, c, DRIFT_DTYPE_INVALID, DRIFT_INPUT_COND);
    struct {
        const char *lat, *cond;
        const char *fwd;
        drift_dtype want_lat, want_cond;
    } cases[] = {
        {"default", "null", "bf16", DRIFT_BF16, DRIFT_F16}, /* cond handed over as fp16, passed through */
        {"fp32", "default", "bf16", DRIFT_F32, DRIFT_BF16},
        {"default", "bf16", "fp32", DRIFT_F32, DRIFT_BF16},
        {"null", "fp16", "bf16", DRIFT_F32, DRIFT_F16},
    };
    drift_dtype handed[3] = {DRIFT_F32, DRIFT_F16, DRIFT_F32};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        drift_plan p;
        char a[64], b[64];
        snprintf(a, sizeof a, "latents=%s", cases[i].lat);
        snprintf(b, sizeof b, "cond=%s", cases[i].cond);
        const char *f[] = {"--input-dtype", a, "--input-dtype", b, NULL};
        plan_make(&p, cases[i].fwd, f);
        drift_graph *g = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, handed);
        assert_int_equal(A(g, t->g, x)->dtype, DRIFT_F32);
        assert_int_equal(A(g, t->g, y)->dtype, cases[i].want_lat);
        assert_int_equal(A(g, t->g, d)->dtype, cases[i].want_cond);
        drift_graph_free(g);
        drift_plan_free(&p);
    }
    tg_free(t);
}

/* Sides and the oracle. */
static void test_sides_and_oracle(void **state) {
    (void)state;
    tg *t = tg_new();
    int x = tg_leaf(t, DRIFT_VAL_INPUT, "cond", 2, 3, 8);
    int w = tg_leaf(t, DRIFT_VAL_PARAM, "lin.weight", 2, 4, 8);
    int y = tg_node(t, DRIFT_OP_LINEAR, DRIFT_RULE_AUTOCAST_LOWER, 2, x, w, 0);
    int z = tg_cast(t, DRIFT_RULE_CAST_TO, y, DRIFT_F32, -1);
    drift_plan p;
    plan_make(&p, "bf16", NULL);
    drift_err err;
    drift_err_clear(&err);
    OK(drift_plan_apply_flag(&p, "--sglang-dit-precision", "fp16", &err), &err);
    drift_graph *tr = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, NULL);
    drift_graph *ro = assign_with(t->g, &p, DRIFT_SIDE_ROLLOUT, NULL);
    drift_graph *orc = assign_with(t->g, &p, DRIFT_SIDE_ORACLE, NULL);
    assert_int_equal(A(tr, t->g, y)->dtype, DRIFT_BF16);
    assert_int_equal(A(ro, t->g, y)->dtype, DRIFT_F16);
    assert_int_equal(A(ro, t->g, w)->dtype, DRIFT_F16); /* no override: the rollout precision */
    for (int i = 0; i < drift_graph_count(orc); i++) {
        const drift_value *v = drift_graph_value(orc, i);
        assert_int_equal(v->dtype, DRIFT_F64);
        if (v->kind == DRIFT_VAL_NODE) {
            assert_int_equal(v->op.compute, DRIFT_F64);
            assert_int_equal(v->origin, DRIFT_ORIGIN_MODEL); /* nothing inserted */
        }
    }
    assert_int_equal(A(orc, t->g, z)->dtype, DRIFT_F64); /* .float() is an identity in the oracle */
    assert_int_equal(drift_graph_count(orc), drift_graph_count(t->g));
    assert_string_equal(drift_assign_side_name(DRIFT_SIDE_ORACLE), "oracle");
    assert_int_equal(drift_assign_forward_dtype(&p, DRIFT_SIDE_ROLLOUT), DRIFT_F16);
    drift_graph_free(tr);
    drift_graph_free(ro);
    drift_graph_free(orc);
    drift_plan_free(&p);
    tg_free(t);
}

/* ATTENTION's additive bias (in3) is fp32 whatever autocast does to q, k, v, and does not
 * promote them (an fp32 mask beside bf16 operands: a bf16 SDPA); fp64 in the oracle. */
static void test_attention_bias_stays_fp32(void **state) {
    (void)state;
    tg *t = tg_new();
    const int64_t qs[4] = {1, 2, 3, 4}, bs[4] = {1, 1, 1, 3};
    int x = -1, bias = -1;
    OK(drift_graph_add_leaf(t->g, DRIFT_VAL_INPUT, "cond", DRIFT_DTYPE_INVALID, 4, qs, &x, &t->err), &t->err);
    OK(drift_graph_add_leaf(t->g, DRIFT_VAL_BUFFER, "mask", DRIFT_F32, 4, bs, &bias, &t->err), &t->err);
    drift_node_spec sp;
    drift_node_spec_init(&sp, DRIFT_OP_ATTENTION);
    sp.op.n_in = 4;
    sp.op.scale = 0.5f;
    sp.in[0] = sp.in[1] = sp.in[2] = x;
    sp.in[3] = bias;
    sp.rule = DRIFT_RULE_AUTOCAST_LOWER;
    int y = -1;
    OK(drift_graph_add_node(t->g, &sp, &y, &t->err), &t->err);
    drift_plan p;
    plan_make(&p, "bf16", NULL);
    drift_graph *a = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, NULL);
    assert_int_equal(A(a, t->g, y)->op.compute, DRIFT_BF16);
    for (int k = 0; k < 3; k++) assert_int_equal(in_dtype(a, t->g, y, k), DRIFT_BF16);
    assert_int_equal(in_dtype(a, t->g, y, 3), DRIFT_F32);
    drift_graph_free(a);
    drift_plan_free(&p);
    /* fp32 forward, bf16 operands handed over: a bf16 SDPA, the fp32 bias promotes nothing */
    drift_dtype handed[3] = {DRIFT_F32, DRIFT_BF16, DRIFT_F32};
    plan_make(&p, "fp32", NULL);
    a = assign_with(t->g, &p, DRIFT_SIDE_TRAINER, handed);
    assert_int_equal(A(a, t->g, y)->op.compute, DRIFT_BF16);
    assert_int_equal(in_dtype(a, t->g, y, 0), DRIFT_BF16);
    assert_int_equal(in_dtype(a, t->g, y, 3), DRIFT_F32);
    drift_graph_free(a);
    a = assign_with(t->g, &p, DRIFT_SIDE_ORACLE, NULL);
    assert_int_equal(A(a, t->g, y)->op.compute, DRIFT_F64);
    assert_int_equal(in_dtype(a, t->g, y, 3), DRIFT_F64);
    drift_graph_free(a);
    drift_plan_free(&p);
    tg_free(t);
}

static void test_errors(void **state) {
    (void)state;
    tg *t = tg_new();
    int x = tg_leaf(t, DRIFT_VAL_INPUT, "cond", 2, 3, 8);
    tg_leaf(t, DRIFT_VAL_PARAM, "lin.weight", 2, 4, 8);
    (void)x;
    drift_plan p;
    plan_make(&p, "bf16", NULL);
    drift_err err;
    drift_err_clear(&err);
    drift_graph *out = NULL;
    /* no plan for the trainer */
    assert_int_equal(drift_assign_dtypes(t->g, NULL, NULL, NULL, NULL, &out, &err), DRIFT_E_INPUT);
    /* a parameter missing from the table the plan was compiled against */
    drift_param_table table;
    drift_param_table_init(&table);
    int64_t s[1] = {4};
    OK(drift_param_table_add(&table, "other.weight", 1, s, -1, &err), &err);
    drift_compiled_plan cp;
    memset(&cp, 0, sizeof cp);
    OK(drift_plan_compile(&p, &table, &cp, &err), &err);
    assert_int_equal(drift_assign_dtypes(t->g, &p, &cp, &table, NULL, &out, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "lin.weight"));
    assert_null(out);
    /* a bad forward dtype */
    p.diffusion_forward_dtype = DRIFT_F64;
    assert_int_equal(drift_assign_dtypes(t->g, &p, NULL, NULL, NULL, &out, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "diffusion_forward_dtype"));
    /* an assigned graph cannot be assigned again */
    p.diffusion_forward_dtype = DRIFT_BF16;
    OK(drift_assign_dtypes(t->g, &p, NULL, NULL, NULL, &out, &err), &err);
    drift_graph *again = NULL;
    assert_int_equal(drift_assign_dtypes(out, &p, NULL, NULL, NULL, &again, &err), DRIFT_E_INPUT);
    drift_graph_free(out);
    drift_compiled_plan_free(&cp);
    drift_param_table_free(&table);
    drift_plan_free(&p);
    tg_free(t);
}

/* ---- the Wan graph under real plans ------------------------------------------------- */

typedef struct wan {
    drift_family_config cfg;
    drift_param_table table;
    drift_graph *sem;
} wan;

static void wan_init(wan *w, const char *spec) {
    drift_err err;
    drift_err_clear(&err);
    OK(drift_family_parse(spec, &w->cfg, &err), &err);
    drift_param_table_init(&w->table);
    OK(drift_family_param_table(&w->cfg, &w->table, &err), &err);
    OK(drift_wan_graph_build(&w->cfg, &w->sem, &err), &err);
}

static void wan_free(wan *w) {
    drift_graph_free(w->sem);
    drift_param_table_free(&w->table);
}

static drift_graph *wan_assign(wan *w, const char *plan_file, const char *const *flags, drift_side side,
                               const drift_dtype *handed) {
    drift_err err;
    drift_err_clear(&err);
    drift_plan p;
    drift_plan_init(&p);
    if (plan_file) {
        char path[1024];
        const char *dir = getenv("DRIFT_TESTDATA");
        snprintf(path, sizeof path, "%s/plans/%s", dir ? dir : "tests/data", plan_file);
        OK(drift_plan_load_file(&p, path, &err), &err);
    }
    for (int i = 0; flags && flags[i]; i += 2) OK(drift_plan_apply_flag(&p, flags[i], flags[i + 1], &err), &err);
    drift_compiled_plan cp;
    memset(&cp, 0, sizeof cp);
    OK(drift_plan_compile(&p, &w->table, &cp, &err), &err);
    drift_assign_opts o;
    drift_assign_opts_init(&o);
    o.side = side;
    if (handed)
        for (int i = 0; i < 3; i++) o.handed_over[i] = handed[i];
    drift_graph *g = NULL;
    OK(drift_assign_dtypes(w->sem, &p, &cp, &w->table, &o, &g, &err), &err);
    drift_compiled_plan_free(&cp);
    drift_plan_free(&p);
    return g;
}

static const drift_value *site_of(const drift_graph *g, const char *site) {
    int id = drift_graph_find_site(g, site);
    if (id < 0) fail_msg("no site %s", site);
    return drift_graph_value(g, id);
}

static int sem_param(const wan *w, const char *fqn) {
    int id = drift_graph_find_leaf(w->sem, DRIFT_VAL_PARAM, fqn);
    assert_true(id >= 0);
    return id;
}

/* The dtype landscape of the default bf16 plan, as diffusers + autocast + FSDP give it. */
static void test_wan_bf16_landscape(void **state) {
    (void)state;
    wan w;
    wan_init(&w, "tiny-dit");
    drift_graph *g = wan_assign(&w, "wan2_2.json", NULL, DRIFT_SIDE_TRAINER, NULL);
    /* inputs passed through (fp32), module outputs as hooks would see them */
    assert_int_equal(site_of(g, "input:latents:post_cast")->dtype, DRIFT_F32);
    assert_int_equal(site_of(g, "patch_embedding:out")->dtype, DRIFT_BF16);
    assert_int_equal(site_of(g, "condition_embedder.time_embedder:out")->dtype, DRIFT_BF16);
    assert_int_equal(site_of(g, "condition_embedder.time_proj:out")->dtype, DRIFT_BF16);
    assert_int_equal(site_of(g, "condition_embedder.text_embedder:out")->dtype, DRIFT_BF16);
    const char *fp32_sites[] = {"blocks.0.norm1:out", "blocks.0.norm2:out", "blocks.0.norm3:out", "norm_out:out"};
    for (int i = 0; i < 4; i++) assert_int_equal(site_of(g, fp32_sites[i])->dtype, DRIFT_F32);
    const char *bf16_sites[] = {"blocks.0.attn1:out", "blocks.0.attn2:out", "blocks.0.ffn:out", "blocks.0:out",
                                "blocks.1:out", "proj_out:out", "output:noise_pred"};
    for (int i = 0; i < 7; i++) assert_int_equal(site_of(g, bf16_sites[i])->dtype, DRIFT_BF16);
    /* every GEMM and attention runs in bf16 */
    for (int i = 0; i < drift_graph_count(g); i++) {
        const drift_value *v = drift_graph_value(g, i);
        if (v->kind != DRIFT_VAL_NODE) continue;
        if (v->op.kind == DRIFT_OP_LINEAR || v->op.kind == DRIFT_OP_ATTENTION) {
            assert_int_equal(v->op.compute, DRIFT_BF16);
            for (int k = 0; k < v->op.n_in; k++) assert_int_equal(drift_graph_value(g, v->in[k])->dtype, DRIFT_BF16);
        }
        if (v->op.kind == DRIFT_OP_LAYER_NORM) assert_int_equal(v->op.out, DRIFT_F32);
    }
    /* temb.type_as(cond): cond passed through in fp32, so temb is fp32, and the
     * time embedder's input was cast to its (bf16) parameter dtype */
    int te_in = -1;
    for (int i = 0; i < drift_graph_count(w.sem) && te_in < 0; i++) {
        const drift_value *v = drift_graph_value(w.sem, i);
        if (v->kind == DRIFT_VAL_NODE && v->rule == DRIFT_RULE_TYPE_AS &&
            v->rule_ref == sem_param(&w, "condition_embedder.time_embedder.linear_1.weight"))
            te_in = i;
    }
    assert_true(te_in >= 0);
    assert_int_equal(A(g, w.sem, te_in)->dtype, DRIFT_BF16);
    drift_graph_free(g);
    wan_free(&w);
}

/* norm2 fp32 changes norm2's weight dtype (and only what reads it). */
static void test_wan_norm2_island(void **state) {
    (void)state;
    wan w;
    wan_init(&w, "tiny-dit");
    drift_graph *gt = wan_assign(&w, "wan2_2.json", NULL, DRIFT_SIDE_TRAINER, NULL);
    drift_graph *gr = wan_assign(&w, "wan2_2_no_norm2.json", NULL, DRIFT_SIDE_ROLLOUT, NULL);
    for (int b = 0; b < w.cfg.layers; b++) {
        char n[64];
        snprintf(n, sizeof n, "blocks.%d.norm2.weight", b);
        assert_int_equal(A(gt, w.sem, sem_param(&w, n))->dtype, DRIFT_F32);
        assert_int_equal(A(gr, w.sem, sem_param(&w, n))->dtype, DRIFT_BF16);
        snprintf(n, sizeof n, "blocks.%d.norm2.bias", b);
        assert_int_equal(A(gt, w.sem, sem_param(&w, n))->dtype, DRIFT_F32);
        assert_int_equal(A(gr, w.sem, sem_param(&w, n))->dtype, DRIFT_BF16);
    }
    /* all other parameters and every model node's dtypes agree */
    for (int i = 0; i < drift_graph_count(w.sem); i++) {
        const drift_value *v = drift_graph_value(w.sem, i);
        if (v->kind == DRIFT_VAL_PARAM && !strstr(v->name, ".norm2."))
            assert_int_equal(A(gt, w.sem, i)->dtype, A(gr, w.sem, i)->dtype);
        if (v->kind == DRIFT_VAL_NODE) {
            assert_int_equal(A(gt, w.sem, i)->op.out, A(gr, w.sem, i)->op.out);
            assert_int_equal(A(gt, w.sem, i)->op.compute, A(gr, w.sem, i)->op.compute);
        }
    }
    drift_graph_free(gt);
    drift_graph_free(gr);
    wan_free(&w);
}

/* time_embedder's input cast follows its parameter dtype; temb follows cond. */
static void test_wan_time_embedder_and_cond(void **state) {
    (void)state;
    wan w;
    wan_init(&w, "tiny-dit:layers=1");
    int te_in = -1, temb = -1;
    int w1 = sem_param(&w, "condition_embedder.time_embedder.linear_1.weight");
    int cond_post = drift_graph_find_site(w.sem, "input:cond:post_cast");
    for (int i = 0; i < drift_graph_count(w.sem); i++) {
        const drift_value *v = drift_graph_value(w.sem, i);
        if (v->kind != DRIFT_VAL_NODE || v->rule != DRIFT_RULE_TYPE_AS) continue;
        if (v->rule_ref == w1) te_in = i;
        if (v->rule_ref == cond_post && temb < 0) temb = i;
    }
    assert_true(te_in >= 0 && temb >= 0);
    const char *f1[] = {"--param-dtype", "condition_embedder.time_embedder.*=fp32", NULL};
    drift_graph *g = wan_assign(&w, NULL, f1, DRIFT_SIDE_TRAINER, NULL);
    assert_int_equal(A(g, w.sem, te_in)->dtype, DRIFT_F32);
    assert_int_equal(A(g, w.sem, temb)->dtype, DRIFT_F32);
    drift_graph_free(g);
    /* cond cast to bf16 by policy: temb follows it, and so does the final modulation */
    const char *f2[] = {"--input-dtype", "cond=bf16", NULL};
    g = wan_assign(&w, NULL, f2, DRIFT_SIDE_TRAINER, NULL);
    assert_int_equal(A(g, w.sem, te_in)->dtype, DRIFT_BF16);
    assert_int_equal(A(g, w.sem, temb)->dtype, DRIFT_BF16);
    drift_graph_free(g);
    /* passthrough of an fp16 cond handed over */
    drift_dtype handed[3] = {DRIFT_F32, DRIFT_F16, DRIFT_F32};
    g = wan_assign(&w, "wan2_2.json", NULL, DRIFT_SIDE_TRAINER, handed);
    assert_int_equal(site_of(g, "input:cond:post_cast")->dtype, DRIFT_F16);
    assert_int_equal(A(g, w.sem, temb)->dtype, DRIFT_F16);
    drift_graph_free(g);
    /* an fp32 forward: no autocast, all fp32 */
    const char *f3[] = {"--diffusion-forward-dtype", "fp32", NULL};
    g = wan_assign(&w, NULL, f3, DRIFT_SIDE_TRAINER, NULL);
    for (int i = 0; i < drift_graph_count(g); i++) assert_int_equal(drift_graph_value(g, i)->dtype, DRIFT_F32);
    assert_int_equal(count_origin(g, DRIFT_ORIGIN_AUTOCAST), 0);
    drift_graph_free(g);
    wan_free(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule_param_cast),
        cmocka_unit_test(test_rule_autocast_lower),
        cmocka_unit_test(test_attention_bias_stays_fp32),
        cmocka_unit_test(test_fp32_linear_override_is_noop),
        cmocka_unit_test(test_rule_autocast_fp32),
        cmocka_unit_test(test_rule_promote),
        cmocka_unit_test(test_rule_like_input0_and_rms),
        cmocka_unit_test(test_rule_explicit_casts),
        cmocka_unit_test(test_rule_input_policy),
        cmocka_unit_test(test_sides_and_oracle),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_wan_bf16_landscape),
        cmocka_unit_test(test_wan_norm2_island),
        cmocka_unit_test(test_wan_time_embedder_and_cond),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
