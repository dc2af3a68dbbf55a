/* Tests of replay/graph (IR, JSON) and replay/models/wan_graph (structure,
 * names, sites). */
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
#include "replay/ir/assign.h"
#include "replay/ir/graph.h"
#include "replay/models/family.h"
#include "replay/models/wan_graph.h"

#define OK(call, errp)                                                                                   \
    do {                                                                                                 \
        int rc_ = (call);                                                                                \
        if (rc_ != DRIFT_OK) fail_msg("%s failed (%d): %s: %s", #call, rc_, (errp)->where, (errp)->msg); \
    } while (0)

static drift_graph *build(const char *spec, drift_family_config *cfg_out) {
    drift_err err;
    drift_err_clear(&err);
    drift_family_config cfg;
    OK(drift_family_parse(spec, &cfg, &err), &err);
    drift_graph *g = NULL;
    OK(drift_wan_graph_build(&cfg, &g, &err), &err);
    if (cfg_out) *cfg_out = cfg;
    return g;
}

/* ---- the Wan graph ---------------------------------------------------------------- */

/* wan2.2:dim=N scales the widths it does not give (issue 35: dim=128 kept
 * ffn_dim 14336 and text_dim 4096, 340 MB a side for 20 layers); given
 * ones stay; dim 3072 is Wan's own; heads follow a dim no multiple of 24. */
static void test_wan_dim_scales_defaults(void **state) {
    (void)state;
    drift_err err;
    drift_err_clear(&err);
    drift_family_config c;
    OK(drift_family_parse("wan2.2:dim=128", &c, &err), &err);
    assert_int_equal(c.ffn_dim, 597);
    assert_int_equal(c.text_dim, 171);
    assert_int_equal(c.heads, 1);
    OK(drift_family_parse("wan2.2:dim=768", &c, &err), &err);
    assert_int_equal(c.ffn_dim, 3584);
    assert_int_equal(c.text_dim, 1024);
    assert_int_equal(c.heads, 24);
    OK(drift_family_parse("wan2.2:dim=512,heads=8,ffn_dim=2048", &c, &err), &err);
    assert_int_equal(c.ffn_dim, 2048);
    assert_int_equal(c.text_dim, 683);
    assert_int_equal(c.heads, 8);
    OK(drift_family_parse("wan2.2:dim=3072", &c, &err), &err);
    assert_int_equal(c.ffn_dim, 14336);
    assert_int_equal(c.text_dim, 4096);
    OK(drift_family_parse("wan2.2:layers=2", &c, &err), &err);
    assert_int_equal(c.ffn_dim, 14336);
    assert_int_equal(c.text_dim, 4096);
}

static void test_wan_params_match_family_table(void **state) {
    (void)state;
    const char *specs[] = {"tiny-dit", "tiny-dit:layers=3,batch=2,patch=2x2x2,frames=4",
                           "wan2.2:layers=1,dim=96,heads=4,ffn_dim=128,text_dim=40,in_channels=8,out_channels=8"};
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        drift_family_config cfg;
        drift_graph *g = build(specs[k], &cfg);
        drift_param_table t;
        drift_param_table_init(&t);
        drift_err err;
        drift_err_clear(&err);
        OK(drift_family_param_table(&cfg, &t, &err), &err);
        size_t n_params = 0;
        for (int i = 0; i < drift_graph_count(g); i++) {
            const drift_value *v = drift_graph_value(g, i);
            if (v->kind != DRIFT_VAL_PARAM) continue;
            n_params++;
            long row = drift_param_table_find(&t, v->name);
            if (row < 0) fail_msg("graph parameter '%s' is not in the family table", v->name);
            assert_int_equal(v->ndim, t.params[row].ndim);
            for (int d = 0; d < v->ndim; d++) assert_int_equal(v->shape[d], t.params[row].shape[d]);
            assert_int_equal(v->dtype, DRIFT_F32);
            /* each parameter is placed right before a use: its next value reads it */
            const drift_value *next = drift_graph_value(g, i + 1);
            int used_soon = 0;
            for (int j = i + 1; j < drift_graph_count(g) && j <= i + 4; j++) {
                const drift_value *u = drift_graph_value(g, j);
                for (int q = 0; u->kind == DRIFT_VAL_NODE && q < u->op.n_in; q++) used_soon |= u->in[q] == i;
                used_soon |= u->kind == DRIFT_VAL_NODE && u->rule == DRIFT_RULE_TYPE_AS && u->rule_ref == i;
            }
            (void)next;
            if (!used_soon) fail_msg("parameter '%s' is not used right after it is placed", v->name);
        }
        assert_int_equal(n_params, t.n);
        drift_param_table_free(&t);
        drift_graph_free(g);
    }
}

static void test_wan_sites(void **state) {
    (void)state;
    drift_family_config cfg;
    drift_graph *g = build("tiny-dit", &cfg);
    char want[64][64];
    int n = 0;
    const char *head[] = {"input:latents:pre_cast", "input:latents:post_cast", "input:cond:pre_cast",
                          "input:cond:post_cast", "input:timestep:pre_cast", "input:timestep:post_cast",
                          "patch_embedding:out", "condition_embedder.time_embedder:out",
                          "condition_embedder.time_proj:out", "condition_embedder.text_embedder:out"};
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++) snprintf(want[n++], 64, "%s", head[i]);
    const char *blk[] = {"norm1", "attn1", "norm2", "attn2", "norm3", "ffn"};
    for (int b = 0; b < cfg.layers; b++) {
        for (int k = 0; k < 6; k++) snprintf(want[n++], 64, "blocks.%d.%s:out", b, blk[k]);
        snprintf(want[n++], 64, "blocks.%d:out", b);
    }
    snprintf(want[n++], 64, "norm_out:out");
    snprintf(want[n++], 64, "proj_out:out");
    snprintf(want[n++], 64, "output:noise_pred");
    int ids[64];
    assert_int_equal(drift_graph_sites(g, ids, 64), n);
    for (int i = 0; i < n; i++) {
        assert_string_equal(drift_graph_value(g, ids[i])->site, want[i]);
        assert_int_equal(drift_graph_find_site(g, want[i]), ids[i]);
    }
    assert_int_equal(drift_graph_find_site(g, "nope:out"), -1);
    /* output is noise_pred, [B, C_out, F, H, W] */
    const drift_value *o = drift_graph_value(g, drift_graph_output(g));
    assert_string_equal(o->site, "output:noise_pred");
    assert_int_equal(o->ndim, 5);
    assert_int_equal(o->shape[1], cfg.out_channels);
    assert_int_equal(o->shape[4], cfg.width);
    /* patch_embedding:out has the Conv3d output layout */
    const drift_value *pe = drift_graph_value(g, drift_graph_find_site(g, "patch_embedding:out"));
    assert_int_equal(pe->ndim, 5);
    assert_int_equal(pe->shape[1], cfg.dim);
    assert_int_equal(pe->shape[3], cfg.height / cfg.patch[1]);
    /* the RoPE buffers and the three inputs are leaves */
    int cs = drift_graph_find_leaf(g, DRIFT_VAL_BUFFER, DRIFT_WAN_ROPE_COS);
    assert_true(cs >= 0);
    assert_int_equal(drift_graph_value(g, cs)->shape[0], drift_family_tokens(&cfg));
    assert_int_equal(drift_graph_value(g, cs)->shape[1], cfg.dim / cfg.heads);
    assert_true(drift_graph_find_leaf(g, DRIFT_VAL_INPUT, "timestep") >= 0);
    assert_int_equal(drift_graph_find_leaf(g, DRIFT_VAL_PARAM, "timestep"), -1);
    drift_graph_free(g);
}

/* Semantics spot checks: the rules the family uses where diffusers casts. */
static void test_wan_rules(void **state) {
    (void)state;
    drift_graph *g = build("tiny-dit:layers=1", NULL);
    int n_linear = 0, n_ln = 0, n_rope = 0, n_attn = 0;
    for (int i = 0; i < drift_graph_count(g); i++) {
        const drift_value *v = drift_graph_value(g, i);
        if (v->kind != DRIFT_VAL_NODE) continue;
        assert_int_equal(v->dtype, DRIFT_DTYPE_INVALID); /* semantic: no dtypes */
        switch (v->op.kind) {
        case DRIFT_OP_LINEAR: n_linear++; assert_int_equal(v->rule, DRIFT_RULE_AUTOCAST_LOWER); break;
        case DRIFT_OP_ATTENTION: n_attn++; assert_int_equal(v->rule, DRIFT_RULE_AUTOCAST_LOWER); break;
        case DRIFT_OP_LAYER_NORM: {
            n_ln++;
            assert_int_equal(v->rule, DRIFT_RULE_AUTOCAST_FP32);
            /* FP32LayerNorm: every input is an explicit .float() */
            for (int k = 0; k < v->op.n_in; k++) {
                const drift_value *u = drift_graph_value(g, v->in[k]);
                assert_int_equal(u->op.kind, DRIFT_OP_CAST);
                assert_int_equal(u->rule, DRIFT_RULE_CAST_TO);
                assert_int_equal(u->rule_dtype, DRIFT_F32);
            }
            break;
        }
        case DRIFT_OP_ROPE: n_rope++; assert_int_equal(v->rule, DRIFT_RULE_LIKE_INPUT0); break;
        case DRIFT_OP_RMS_NORM: assert_int_equal(v->rule, DRIFT_RULE_RMS_NORM); break;
        default: break;
        }
    }
    /* patch, 2 time embedder, time_proj, 2 text, 4+4 attention, 2 ffn, proj_out */
    assert_int_equal(n_linear, 1 + 2 + 1 + 2 + 8 + 2 + 1);
    assert_int_equal(n_ln, 4);
    assert_int_equal(n_rope, 2);
    assert_int_equal(n_attn, 2);
    drift_graph_free(g);
}

/* ---- JSON --------------------------------------------------------------------------- */

static void roundtrip(const drift_graph *g, int indent) {
    drift_err err;
    drift_err_clear(&err);
    char *js = drift_graph_to_json(g, indent, &err);
    assert_non_null(js);
    drift_graph *back = NULL;
    OK(drift_graph_from_json(js, strlen(js), "roundtrip.json", &back, &err), &err);
    char why[256] = "";
    if (!drift_graph_equal(g, back, why, sizeof why)) fail_msg("round trip differs: %s", why);
    /* and serialising again gives the same text */
    char *js2 = drift_graph_to_json(back, indent, &err);
    assert_string_equal(js, js2);
    free(js);
    free(js2);
    drift_graph_free(back);
}

static void test_json_roundtrip(void **state) {
    (void)state;
    drift_family_config cfg;
    drift_graph *g = build("tiny-dit:batch=2", &cfg);
    roundtrip(g, 0);
    roundtrip(g, 2);
    /* an assigned graph (explicit dtypes, origins, sem ids) too */
    drift_plan plan;
    drift_plan_init(&plan);
    drift_err err;
    drift_err_clear(&err);
    OK(drift_plan_apply_flag(&plan, "--param-dtype", "*.norm2.*=fp32", &err), &err);
    OK(drift_plan_apply_flag(&plan, "--input-dtype", "cond=bf16", &err), &err);
    drift_graph *a = NULL;
    OK(drift_assign_dtypes(g, &plan, NULL, NULL, NULL, &a, &err), &err);
    roundtrip(a, 0);
    drift_graph *o = NULL;
    drift_assign_opts opts;
    drift_assign_opts_init(&opts);
    opts.side = DRIFT_SIDE_ORACLE;
    OK(drift_assign_dtypes(g, NULL, NULL, NULL, &opts, &o, &err), &err);
    roundtrip(o, 1);
    /* equality notices a difference */
    char why[256];
    assert_false(drift_graph_equal(g, a, why, sizeof why));
    assert_non_null(strstr(why, "assigned"));
    drift_graph_free(g);
    drift_graph_free(a);
    drift_graph_free(o);
    drift_plan_free(&plan);
}

/* A small valid semantic document; hostile variants are made by replacing
 * one substring. */
static const char *const base_doc =
    "{\"format\": \"drift-graph\", \"version\": 1, \"assigned\": false, \"model\": \"test\", \"output\": 4,\n"
    " \"values\": [\n"
    "  {\"id\": 0, \"kind\": \"input\", \"name\": \"cond\", \"shape\": [2, 3, 8], \"site\": \"input:cond:pre_cast\"},\n"
    "  {\"id\": 1, \"kind\": \"param\", \"name\": \"lin.weight\", \"shape\": [4, 8], \"dtype\": \"fp32\"},\n"
    "  {\"id\": 2, \"kind\": \"param\", \"name\": \"lin.bias\", \"shape\": [4], \"dtype\": \"fp32\"},\n"
    "  {\"id\": 3, \"kind\": \"node\", \"op\": \"linear\", \"in\": [0, 1, 2], \"shape\": [2, 3, 4], \"rule\": \"autocast_lower\", \"name\": \"lin\"},\n"
    "  {\"id\": 4, \"kind\": \"node\", \"op\": \"layer_norm\", \"in\": [3], \"shape\": [2, 3, 4], \"rule\": \"autocast_fp32\", \"attrs\": {\"eps\": 1e-6}, \"site\": \"ln:out\"},\n"
    "  {\"id\": 5, \"kind\": \"node\", \"op\": \"cast\", \"in\": [4], \"shape\": [2, 3, 4], \"rule\": \"type_as\", \"ref\": 0},\n"
    "  {\"id\": 6, \"kind\": \"node\", \"op\": \"permute\", \"in\": [5], \"shape\": [4, 3, 2], \"rule\": \"like_input0\", \"attrs\": {\"perm\": [2, 1, 0]}}\n"
    " ]}";

static char *replace(const char *src, const char *from, const char *to) {
    const char *at = strstr(src, from);
    if (!at) fail_msg("test bug: '%s' not in the base document", from);
    size_t n = strlen(src) - strlen(from) + strlen(to) + 1;
    char *out = malloc(n);
    assert_non_null(out);
    size_t pre = (size_t)(at - src);
    memcpy(out, src, pre);
    strcpy(out + pre, to);
    strcat(out, at + strlen(from));
    return out;
}

static void test_json_base_valid(void **state) {
    (void)state;
    drift_err err;
    drift_err_clear(&err);
    drift_graph *g = NULL;
    OK(drift_graph_from_json(base_doc, strlen(base_doc), "base.json", &g, &err), &err);
    assert_int_equal(drift_graph_count(g), 7);
    assert_int_equal(drift_graph_output(g), 4);
    const drift_value *ln = drift_graph_value(g, 4);
    assert_true(ln->op.eps == 1e-6f);
    assert_int_equal(drift_graph_value(g, 6)->op.perm[0], 2);
    assert_string_equal(drift_graph_model(g), "test");
    roundtrip(g, 0);
    drift_graph_free(g);
}

/* doc with `from` replaced by `to` (the attribute dropped): value id reads layout 0 and the writer
 * does not write "layout" (older readers still read it). */
static void layout_absent_not_written(const char *doc, const char *from, const char *to, const char *file, int id) {
    drift_err err;
    drift_err_clear(&err);
    drift_graph *g = NULL;
    char *old = replace(doc, from, to);
    OK(drift_graph_from_json(old, strlen(old), file, &g, &err), &err);
    assert_int_equal(drift_graph_value(g, id)->op.layout, 0);
    char *js = drift_graph_to_json(g, 0, &err);
    assert_non_null(js);
    assert_null(strstr(js, "layout"));
    free(js);
    drift_graph_free(g);
    free(old);
}

/* doc with `from` replaced by `to` is refused (DRIFT_E_INPUT) naming "layout". */
static void layout_refused(const char *doc, const char *from, const char *to, const char *file) {
    drift_err err;
    drift_err_clear(&err);
    drift_graph *g = NULL;
    char *bad = replace(doc, from, to);
    assert_int_equal(drift_graph_from_json(bad, strlen(bad), file, &g, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "layout"));
    free(bad);
}

/* PATCHIFY's optional "layout" (feature order): 1 reads back as 1 and survives the writer;
 * absent means 0 (documents written before it); 2, or a layout on UNPATCHIFY, is rejected. */
static void test_json_patchify_layout(void **state) {
    (void)state;
    static const char *const doc =
        "{\"format\": \"drift-graph\", \"version\": 1, \"assigned\": false, \"model\": \"test\", \"output\": 1,\n"
        " \"values\": [\n"
        "  {\"id\": 0, \"kind\": \"input\", \"name\": \"latents\", \"shape\": [1, 4, 2, 4, 4]},\n"
        "  {\"id\": 1, \"kind\": \"node\", \"op\": \"patchify\", \"in\": [0], \"shape\": [1, 8, 16], \"rule\": \"like_input0\", "
        "\"attrs\": {\"patch\": [1, 2, 2], \"layout\": 1}}\n"
        " ]}";
    drift_err err;
    drift_err_clear(&err);
    drift_graph *g = NULL;
    OK(drift_graph_from_json(doc, strlen(doc), "patchify.json", &g, &err), &err);
    assert_int_equal(drift_graph_value(g, 1)->op.layout, 1);
    char *js = drift_graph_to_json(g, 0, &err);
    assert_non_null(js);
    assert_non_null(strstr(js, "\"layout\""));
    free(js);
    roundtrip(g, 0);
    drift_graph_free(g);
    layout_absent_not_written(doc, ", \"layout\": 1", "", "patchify.json", 1);
    layout_refused(doc, "\"layout\": 1", "\"layout\": 2", "patchify.json");
    layout_refused(doc, "\"op\": \"patchify\", \"in\": [0], \"shape\": [1, 8, 16]",
                   "\"op\": \"unpatchify\", \"in\": [0], \"shape\": [1, 4, 2, 4, 4]", "patchify.json");
}

/* LINEAR's optional "layout": DRIFT_LINEAR_CONV (a convolution's GEMM, which the torch profile
 * runs with the default cuBLAS workspace) reads back and survives the writer; absent is 0 and is
 * not written; any other value is refused naming it. */
static void test_json_linear_conv_layout(void **state) {
    (void)state;
    static const char *const doc =
        "{\"format\": \"drift-graph\", \"version\": 1, \"assigned\": false, \"model\": \"test\", \"output\": 2,\n"
        " \"values\": [\n"
        "  {\"id\": 0, \"kind\": \"input\", \"name\": \"latents\", \"shape\": [2, 8]},\n"
        "  {\"id\": 1, \"kind\": \"param\", \"name\": \"w\", \"dtype\": \"fp32\", \"shape\": [3, 8]},\n"
        "  {\"id\": 2, \"kind\": \"node\", \"op\": \"linear\", \"in\": [0, 1], \"shape\": [2, 3], \"rule\": \"autocast_lower\", "
        "\"attrs\": {\"layout\": 16}}\n"
        " ]}";
    drift_err err;
    drift_err_clear(&err);
    drift_graph *g = NULL;
    OK(drift_graph_from_json(doc, strlen(doc), "linear.json", &g, &err), &err);
    assert_int_equal(drift_graph_value(g, 2)->op.layout, DRIFT_LINEAR_CONV);
    roundtrip(g, 0);
    drift_graph_free(g);
    layout_absent_not_written(doc, ", \"attrs\": {\"layout\": 16}", "", "linear.json", 2);
    layout_refused(doc, "\"layout\": 16", "\"layout\": 3", "linear.json");
}

/* ATTENTION with its additive bias (4 inputs) survives the JSON round trip; a bias that does
 * not broadcast, or a 5th input, is refused naming it. */
static void test_json_attention_bias(void **state) {
    (void)state;
    static const char *const doc =
        "{\"format\": \"drift-graph\", \"version\": 1, \"assigned\": false, \"model\": \"test\", \"output\": 2,\n"
        " \"values\": [\n"
        "  {\"id\": 0, \"kind\": \"input\", \"name\": \"latents\", \"shape\": [2, 3, 5, 8]},\n"
        "  {\"id\": 1, \"kind\": \"buffer\", \"name\": \"mask\", \"shape\": [2, 1, 1, 5], \"dtype\": \"fp32\"},\n"
        "  {\"id\": 2, \"kind\": \"node\", \"op\": \"attention\", \"in\": [0, 0, 0, 1], \"shape\": [2, 3, 5, 8], "
        "\"rule\": \"autocast_lower\", \"attrs\": {\"scale\": 0.25}}\n"
        " ]}";
    drift_err err;
    drift_err_clear(&err);
    drift_graph *g = NULL;
    OK(drift_graph_from_json(doc, strlen(doc), "attn.json", &g, &err), &err);
    assert_int_equal(drift_graph_value(g, 2)->op.n_in, 4);
    assert_int_equal(drift_graph_value(g, 2)->in[3], 1);
    roundtrip(g, 0);
    drift_graph_free(g);
    char *bad = replace(doc, "\"shape\": [2, 1, 1, 5]", "\"shape\": [2, 2, 1, 5]");
    assert_int_equal(drift_graph_from_json(bad, strlen(bad), "attn.json", &g, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "bias [2, 2, 1, 5]"));
    free(bad);
    bad = replace(doc, "[0, 0, 0, 1]", "[0, 0, 0, 1, 1]");
    assert_int_equal(drift_graph_from_json(bad, strlen(bad), "attn.json", &g, &err), DRIFT_E_INPUT);
    free(bad);
    /* the key-tile order (drift_attn_order): 1 reads back, is written, and makes another graph */
    char *ord = replace(doc, "{\"scale\": 0.25}", "{\"scale\": 0.25, \"order\": 1}");
    OK(drift_graph_from_json(ord, strlen(ord), "attn.json", &g, &err), &err);
    assert_int_equal(drift_graph_value(g, 2)->op.sub, DRIFT_ATTN_ORDER_LAST_FIRST);
    char *js = drift_graph_to_json(g, 0, &err);
    assert_non_null(js);
    assert_non_null(strstr(js, "\"order\""));
    free(js);
    roundtrip(g, 0);
    drift_graph *g0 = NULL;
    OK(drift_graph_from_json(doc, strlen(doc), "attn.json", &g0, &err), &err);
    char why[256];
    assert_false(drift_graph_equal(g, g0, why, sizeof why));
    drift_graph_free(g0);
    drift_graph_free(g);
    bad = replace(ord, "\"order\": 1", "\"order\": 2");
    assert_int_equal(drift_graph_from_json(bad, strlen(bad), "attn.json", &g, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "order"));
    free(bad);
    free(ord);
}

typedef struct hostile {
    const char *from, *to; /* replacement in base_doc; from NULL: to is the whole document */
    const char *expect;    /* substring of the error message */
} hostile;

static void test_json_hostile(void **state) {
    (void)state;
    static const hostile cases[] = {
        {NULL, "", "expected"},
        {NULL, "{\"format\": \"drift-graph\",", "expected"},
        {NULL, "[1, 2]", "expected an object"},
        {NULL, "{\"format\": \"drift-graph\", \"version\": 1, \"assigned\": false}", "missing key 'values'"},
        {"\"drift-graph\"", "\"drift-grape\"", "'format': expected \"drift-graph\""},
        {"\"version\": 1", "\"version\": 2", "'version'"},
        {"\"model\": \"test\"", "\"model\": \"test\", \"extra\": 1", "unknown key 'extra'"},
        {"\"assigned\": false", "\"assigned\": 0", "'assigned': expected a boolean"},
        {"\"output\": 4", "\"output\": 7", "'output'"},
        {"\"output\": 4", "\"output\": -2", "'output'"},
        {"{\"id\": 2,", "{\"id\": 5,", "values[2]: 'id': expected an integer in [2, 2]"},
        {"\"kind\": \"param\", \"name\": \"lin.bias\"", "\"kind\": \"parameter\", \"name\": \"lin.bias\"", "'kind'"},
        /* references only to earlier ids: forward references and self loops are impossible */
        {"\"in\": [0, 1, 2]", "\"in\": [0, 1, 4]", "values[3]: 'in': expected an integer in [0, 2]"},
        {"\"in\": [3]", "\"in\": [4]", "values[4]: 'in'"},
        {"\"in\": [3]", "\"in\": [-1]", "'in'"},
        {"\"in\": [3]", "\"in\": []", "value 4 (layer_norm): wrong number of inputs (0)"}, /* 0 entries parse (FILL) */
        {"\"in\": [5]", "\"in\": [5, 5]", "wrong number of inputs"},
        {"\"in\": [3]", "\"in\": [3, 3, 3, 3, 3]", "'in': expected 0..4 entries, got 5"},
        {"\"ref\": 0", "\"ref\": 5", "'ref'"},
        {"\"op\": \"linear\"", "\"op\": \"conv7d\"", "unknown op \"conv7d\""},
        {"\"rule\": \"autocast_lower\"", "\"rule\": \"autocast_maybe\"", "unknown dtype rule"},
        {"\"rule\": \"autocast_lower\", ", "", "missing key 'rule'"},
        {"\"rule\": \"autocast_lower\"", "\"rule\": \"cast_to\", \"to\": \"fp32\"", "applies to cast nodes only"},
        {"\"rule\": \"type_as\", \"ref\": 0", "\"rule\": \"promote\"", "is not a cast rule"},
        {"\"rule\": \"type_as\", \"ref\": 0", "\"rule\": \"cast_to\"", "missing key 'to'"},
        {"\"rule\": \"type_as\", \"ref\": 0", "\"rule\": \"cast_to\", \"to\": \"fp8\"", "'to': expected fp32, bf16"},
        {"\"rule\": \"type_as\", \"ref\": 0", "\"rule\": \"input_policy\", \"input\": \"noise\"", "'input'"},
        {"\"rule\": \"type_as\", \"ref\": 0", "\"rule\": \"type_as\", \"ref\": 0, \"to\": \"fp32\"", "'to' applies to"},
        /* shapes: bad dims, overflow, too many dims, disagreement with the op */
        {"\"shape\": [4, 8]", "\"shape\": [4, -8]", "'shape'"},
        {"\"shape\": [4, 8]", "\"shape\": [4, 0]", "'shape'"},
        {"\"shape\": [4, 8]", "\"shape\": [1099511627776, 1099511627776]", "element count"},
        {"\"shape\": [4, 8]", "\"shape\": [4, 8.5]", "'shape'"},
        {"\"shape\": [4, 8]", "\"shape\": [1, 1, 1, 1, 1, 1, 1, 1, 1]", "'shape': expected 0..8 entries"},
        {"\"shape\": [4, 8]", "\"shape\": [4, 9]", "disagree on K"},
        {"\"shape\": [2, 3, 4], \"rule\": \"autocast_lower\"", "\"shape\": [2, 3, 5], \"rule\": \"autocast_lower\"",
         "differs from the inferred"},
        {"\"shape\": [4, 3, 2]", "\"shape\": [2, 3, 4]", "differs from the inferred"},
        /* attributes */
        {"{\"eps\": 1e-6}", "{\"eps\": -1}", "eps must be finite"},
        {"{\"eps\": 1e-6}", "{\"eps\": 1e300}", "'eps': expected a finite number within the fp32 range"},
        {"{\"eps\": 1e-6}", "{\"eps\": \"small\"}", "'eps'"},
        {"{\"eps\": 1e-6}", "{}", "missing key 'eps'"},
        {"{\"eps\": 1e-6}", "{\"eps\": 1e-6, \"scale\": 2}", "'scale' does not apply to op layer_norm"},
        {"{\"perm\": [2, 1, 0]}", "{\"perm\": [2, 2, 0]}", "not a permutation"},
        {"{\"perm\": [2, 1, 0]}", "{\"perm\": [1, 0]}", "'perm': expected 3..3 entries"},
        /* names */
        {"\"name\": \"lin.bias\"", "\"name\": \"lin.weight\"", "duplicate param name 'lin.weight'"},
        {"\"name\": \"lin.bias\"", "\"name\": \"\"", "non-empty name"},
        {"\"name\": \"lin.bias\"", "\"name\": \"lin\\u0001bias\"", "control character"},
        {"\"name\": \"cond\"", "\"name\": \"noise\"", "input 'noise' unknown"},
        {"\"site\": \"ln:out\"", "\"site\": \"input:cond:pre_cast\"", "duplicate site"},
        /* dtypes belong where they belong */
        {"\"dtype\": \"fp32\"}", "\"dtype\": \"float8\"}", "'dtype': expected fp32"},
        {"\"name\": \"lin.bias\", \"shape\": [4], \"dtype\": \"fp32\"", "\"name\": \"lin.bias\", \"shape\": [4]",
         "expected a dtype"},
        {"\"rule\": \"autocast_fp32\",", "\"rule\": \"autocast_fp32\", \"dtype\": \"fp32\",", "belongs to assigned graphs"},
        {"\"rule\": \"autocast_fp32\",", "\"rule\": \"autocast_fp32\", \"compute\": \"fp32\",",
         "belongs to assigned graphs"},
        /* a leaf with node keys; a node first */
        {"\"shape\": [4], \"dtype\": \"fp32\"}", "\"shape\": [4], \"dtype\": \"fp32\", \"op\": \"cast\"}",
         "unknown key 'op'"},
        {NULL,
         "{\"format\": \"drift-graph\", \"version\": 1, \"assigned\": false, \"values\": [{\"id\": 0, \"kind\": "
         "\"node\", \"op\": \"silu\", \"in\": [0], \"shape\": [1], \"rule\": \"promote\"}]}",
         "first value cannot be a node"},
        {"\"id\": 0,", "\"id\": 99999999999999999999,", "'id'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const hostile *h = &cases[i];
        char *doc = h->from ? replace(base_doc, h->from, h->to) : strdup(h->to);
        drift_err err;
        drift_err_clear(&err);
        drift_graph *g = (drift_graph *)1;
        int rc = drift_graph_from_json(doc, strlen(doc), "hostile.json", &g, &err);
        if (rc == DRIFT_OK) fail_msg("case %zu accepted: %s -> %s", i, h->from ? h->from : "(doc)", h->to);
        assert_null(g);
        if (rc != DRIFT_E_INPUT) fail_msg("case %zu: code %d (%s)", i, rc, err.msg);
        if (!strstr(err.msg, h->expect))
            fail_msg("case %zu: message '%s' lacks '%s'", i, err.msg, h->expect);
        if (strncmp(err.where, "hostile.json:", 13) != 0) fail_msg("case %zu: where '%s' has no position", i, err.where);
        free(doc);
    }
    /* assigned documents need their dtypes */
    char *doc = replace(base_doc, "\"assigned\": false", "\"assigned\": true");
    drift_err err;
    drift_err_clear(&err);
    drift_graph *g = NULL;
    assert_int_equal(drift_graph_from_json(doc, strlen(doc), "a.json", &g, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "dtype"));
    free(doc);
}

/* ---- the construction API ------------------------------------------------------------ */

static void test_api_validation(void **state) {
    (void)state;
    drift_err err;
    drift_err_clear(&err);
    drift_graph *g = NULL;
    OK(drift_graph_create(0, &g, &err), &err);
    int64_t s[2] = {2, 3};
    int x = -1;
    OK(drift_graph_add_leaf(g, DRIFT_VAL_INPUT, "latents", DRIFT_DTYPE_INVALID, 2, s, &x, &err), &err);
    assert_int_equal(x, 0);
    drift_node_spec n;
    drift_node_spec_init(&n, DRIFT_OP_SILU);
    n.op.n_in = 1;
    n.in[0] = 1; /* itself: not earlier */
    n.rule = DRIFT_RULE_PROMOTE;
    assert_int_equal(drift_graph_add_node(g, &n, NULL, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "earlier id"));
    n.in[0] = 0;
    n.rule = DRIFT_RULE_NONE;
    assert_int_equal(drift_graph_add_node(g, &n, NULL, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "needs a dtype rule"));
    n.rule = DRIFT_RULE_PROMOTE;
    n.op.out = DRIFT_BF16;
    assert_int_equal(drift_graph_add_node(g, &n, NULL, &err), DRIFT_E_INPUT);
    n.op.out = DRIFT_DTYPE_INVALID;
    int y = -1;
    OK(drift_graph_add_node(g, &n, &y, &err), &err);
    assert_int_equal(y, 1);
    /* VIEW needs its shape; numel must match */
    drift_node_spec v;
    drift_node_spec_init(&v, DRIFT_OP_VIEW);
    v.op.n_in = 1;
    v.in[0] = y;
    v.rule = DRIFT_RULE_LIKE_INPUT0;
    assert_int_equal(drift_graph_add_node(g, &v, NULL, &err), DRIFT_E_INPUT);
    v.ndim = 1;
    v.shape[0] = 7;
    assert_int_equal(drift_graph_add_node(g, &v, NULL, &err), DRIFT_E_INPUT);
    v.shape[0] = 6;
    OK(drift_graph_add_node(g, &v, NULL, &err), &err);
    /* sites are unique; an input leaf name must be a boundary input */
    OK(drift_graph_set_site(g, y, "a:out", &err), &err);
    assert_int_equal(drift_graph_set_site(g, 0, "a:out", &err), DRIFT_E_INPUT);
    assert_int_equal(drift_graph_add_leaf(g, DRIFT_VAL_INPUT, "x", DRIFT_F32, 2, s, NULL, &err), DRIFT_E_INPUT);
    /* a parameter and a buffer may share a name (different kinds), two params may not */
    OK(drift_graph_add_leaf(g, DRIFT_VAL_PARAM, "w", DRIFT_F32, 2, s, NULL, &err), &err);
    OK(drift_graph_add_leaf(g, DRIFT_VAL_BUFFER, "w", DRIFT_F32, 2, s, NULL, &err), &err);
    assert_int_equal(drift_graph_add_leaf(g, DRIFT_VAL_PARAM, "w", DRIFT_F32, 2, s, NULL, &err), DRIFT_E_INPUT);
    assert_int_equal(drift_graph_find_leaf(g, DRIFT_VAL_BUFFER, "w"), 4);
    assert_int_equal(drift_graph_find_leaf(g, DRIFT_VAL_PARAM, "w"), 3);
    /* many leaves: the name index grows */
    for (int i = 0; i < 500; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "p%d", i);
        OK(drift_graph_add_leaf(g, DRIFT_VAL_PARAM, nm, DRIFT_F32, 2, s, NULL, &err), &err);
    }
    assert_int_equal(drift_graph_find_leaf(g, DRIFT_VAL_PARAM, "p321"), 5 + 321);
    drift_graph_free(g);
    drift_graph_free(NULL);
}

/* Every allocation failure on the way (build, serialise, parse) is reported
 * as DRIFT_E_NOMEM and leaks nothing (ASan's leak check in the sanitizer build). */
static void test_oom(void **state) {
    (void)state;
    drift_family_config cfg;
    drift_err err;
    drift_err_clear(&err);
    OK(drift_family_parse("tiny-dit:layers=1", &cfg, &err), &err);
    long n;
    for (n = 0;; n++) {
        drift_graph *g = NULL, *back = NULL;
        char *js = NULL;
        drift_err_clear(&err);
        drift_alloc_fail_after(n);
        int rc = drift_wan_graph_build(&cfg, &g, &err);
        if (rc == DRIFT_OK) {
            js = drift_graph_to_json(g, 0, &err);
            if (js) rc = drift_graph_from_json(js, strlen(js), "oom.json", &back, &err);
            else rc = err.code ? err.code : DRIFT_E_NOMEM;
        }
        long hit = drift_alloc_injected();
        drift_alloc_fail_after(-1);
        if (hit == 0) {
            assert_int_equal(rc, DRIFT_OK);
            assert_true(drift_graph_equal(g, back, NULL, 0));
        } else if (rc != DRIFT_E_NOMEM) {
            fail_msg("allocation %ld failed: got code %d (%s), expected DRIFT_E_NOMEM", n, rc, err.msg);
        }
        if (rc != DRIFT_OK) assert_null(back);
        drift_graph_free(g);
        drift_graph_free(back);
        free(js);
        if (hit == 0) break;
    }
    assert_true(n > 100);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wan_params_match_family_table),
        cmocka_unit_test(test_wan_dim_scales_defaults),
        cmocka_unit_test(test_wan_sites),
        cmocka_unit_test(test_wan_rules),
        cmocka_unit_test(test_json_roundtrip),
        cmocka_unit_test(test_json_attention_bias),
        cmocka_unit_test(test_json_base_valid),
        cmocka_unit_test(test_json_patchify_layout),
        cmocka_unit_test(test_json_linear_conv_layout),
        cmocka_unit_test(test_json_hostile),
        cmocka_unit_test(test_api_validation),
        cmocka_unit_test(test_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
