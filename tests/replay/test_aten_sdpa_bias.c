/* The form scaled_dot_product_attention takes in the semantic graph: one
 * ATTENTION in every case torch 2.11 runs as cuDNN's fused flash SDPA on an
 * H200 (tests/gpu/sdpa_backend_probe.py): no mask (3 inputs), a bool key mask,
 * an additive fp32 or bf16 key mask, a full bool mask [B, 1, Lq, Lk], a key
 * mask expanded over heads and queries (stride 0: kept [B, 1, 1, Lk]),
 * is_causal ([1, 1, Lq, Lk] 0 / -inf, top-left), enable_gqa with and without a
 * mask (kv heads repeated). The mask is ATTENTION's 4th input with the
 * broadcast shape named here; no BMM, SOFTMAX or CONCAT is emitted (the old
 * explicit forms). The values of these lowerings against torch's definition
 * are tests/replay/test_aten_semantics.c and test_aten_compose.c; here also
 * the causal bias's values on ref. Head dim 8 takes cuDNN's key-tile order;
 * head dim 12 without a mask FlashAttention-2's (the last tile first: cuDNN
 * refuses the head dim and torch runs flash); with a mask the math backend. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "replay/capture/aten_graph.h"
#include "replay/ir/graph.h"

typedef struct scase {
    const char *name;
    int B, H, Hk, L, S;
    const char *mask_shape; /* JSON shape of the mask placeholder, NULL: no mask */
    const char *mask_dtype;
    const char *expand; /* an aten.expand.default size list applied to the mask, or NULL */
    int causal, gqa;
    int64_t want_bias[4]; /* the bias's shape; [0] = 0: no bias */
} scase;

static int g_dim = 8; /* the head dim of make_doc's q, k, v */
static const char *g_io = "float32"; /* the dtype of make_doc's q, k, v and output */

static char *make_doc(const scase *c) {
    const int D = g_dim;
    static char doc[8192];
    char mask_node[1024] = "", expand_node[1024] = "", mask_arg[128] = "", mask_input[256] = "";
    const char *mref = c->expand ? "e" : "m";
    if (c->mask_shape) {
        snprintf(mask_node, sizeof mask_node,
                 "  {\"name\": \"m\", \"op\": \"placeholder\", \"target\": \"m\", \"args\": [], \"kwargs\": {}, \"val\": "
                 "{\"shape\": %s, \"dtype\": \"%s\"}, \"module\": \"\"},\n",
                 c->mask_shape, c->mask_dtype);
        snprintf(mask_input, sizeof mask_input, "{\"node\": \"m\", \"kind\": \"constant\", \"target\": \"mask\"},\n");
        snprintf(mask_arg, sizeof mask_arg, ", {\"node\": \"%s\"}", mref);
    }
    if (c->expand)
        snprintf(expand_node, sizeof expand_node,
                 "  {\"name\": \"e\", \"op\": \"call_function\", \"target\": \"aten.expand.default\", \"args\": "
                 "[{\"node\": \"m\"}, %s], \"kwargs\": {},\n"
                 "   \"val\": {\"shape\": %s, \"dtype\": \"%s\"}, \"module\": \"m\", \"module_stack\": [\"m\"]},\n",
                 c->expand, c->expand, c->mask_dtype);
    snprintf(doc, sizeof doc,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"A\",\n"
             " \"nodes\": [\n"
             "  {\"name\": \"k\", \"op\": \"placeholder\", \"target\": \"k\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [%d, %d, %d, %d], \"dtype\": \"%s\"}, \"module\": \"\"},\n"
             "  {\"name\": \"v\", \"op\": \"placeholder\", \"target\": \"v\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [%d, %d, %d, %d], \"dtype\": \"%s\"}, \"module\": \"\"},\n"
             "%s"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [%d, %d, %d, %d], \"dtype\": \"%s\"}, \"module\": \"\"},\n"
             "%s"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"aten.scaled_dot_product_attention.default\",\n"
             "   \"args\": [{\"node\": \"x\"}, {\"node\": \"k\"}, {\"node\": \"v\"}%s], \"kwargs\": {%s%s%s},\n"
             "   \"val\": {\"shape\": [%d, %d, %d, %d], \"dtype\": \"%s\"}, \"module\": \"m\", \"module_stack\": [\"m\"]},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [{\"node\": \"k\", \"kind\": \"parameter\", \"target\": \"m.k\"}, {\"node\": \"v\", \"kind\": \"parameter\", \"target\": \"m.v\"},\n"
             "            %s"
             "            {\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}],\n"
             " \"constants\": {}, \"non_tensor_inputs\": {}}\n",
             c->B, c->Hk, c->S, D, g_io, c->B, c->Hk, c->S, D, g_io, mask_node, c->B, c->H, c->L, D, g_io, expand_node,
             mask_arg, c->causal ? "\"is_causal\": true" : "", c->causal && c->gqa ? ", " : "",
             c->gqa ? "\"enable_gqa\": true" : "", c->B, c->H, c->L, D, g_io, mask_input);
    return doc;
}

static drift_graph *lower(const scase *c) {
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *gr = NULL;
    drift_graph *sem = NULL;
    const char *doc = make_doc(c);
    if (drift_aten_graph_parse(doc, strlen(doc), c->name, &gr, &e) || drift_aten_graph_lower(gr, &sem, &e))
        fail_msg("%s: %s: %s", c->name, e.where, e.msg);
    drift_aten_graph_free(gr);
    return sem;
}

static const scase k_cases[] = {
    {"no mask", 2, 4, 4, 6, 5, NULL, NULL, NULL, 0, 0, {0}},
    {"bool key mask", 2, 4, 4, 6, 5, "[2, 1, 1, 5]", "bool", NULL, 0, 0, {2, 1, 1, 5}},
    {"fp32 additive key mask", 2, 4, 4, 6, 5, "[2, 1, 1, 5]", "float32", NULL, 0, 0, {2, 1, 1, 5}},
    {"bf16 additive key mask", 2, 4, 4, 6, 5, "[2, 1, 1, 5]", "bfloat16", NULL, 0, 0, {2, 1, 1, 5}},
    {"2-d mask [1, Lk]", 2, 4, 4, 6, 5, "[1, 5]", "bool", NULL, 0, 0, {1, 1, 1, 5}},
    {"full bool mask", 2, 4, 4, 6, 5, "[2, 1, 6, 5]", "bool", NULL, 0, 0, {2, 1, 6, 5}},
    {"per-head full mask", 2, 4, 4, 6, 5, "[1, 4, 6, 5]", "float32", NULL, 0, 0, {1, 4, 6, 5}},
    {"key mask expanded over heads and queries", 2, 4, 4, 6, 5, "[2, 1, 1, 5]", "bool", "[2, 4, 6, 5]", 0, 0, {2, 1, 1, 5}},
    {"is_causal", 2, 4, 4, 6, 5, NULL, NULL, NULL, 1, 0, {1, 1, 6, 5}},
    {"is_causal square", 1, 2, 2, 5, 5, NULL, NULL, NULL, 1, 0, {1, 1, 5, 5}},
    {"gqa", 2, 4, 2, 6, 5, NULL, NULL, NULL, 0, 1, {0}},
    {"gqa with a bool key mask", 2, 4, 2, 6, 5, "[2, 1, 1, 5]", "bool", NULL, 0, 1, {2, 1, 1, 5}},
    {"gqa with a full mask", 2, 4, 2, 6, 5, "[2, 1, 6, 5]", "float32", NULL, 0, 1, {2, 1, 6, 5}},
    {"gqa causal", 2, 4, 1, 6, 6, NULL, NULL, NULL, 1, 1, {1, 1, 6, 6}},
};

static void test_one_attention_with_bias(void **st) {
    (void)st;
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        const scase *c = &k_cases[i];
        drift_graph *g = lower(c);
        int n_attn = 0, explicit_ops = 0, attn = -1;
        for (int id = 0; id < drift_graph_count(g); id++) {
            const drift_value *v = drift_graph_value(g, id);
            if (v->kind != DRIFT_VAL_NODE) continue;
            if (v->op.kind == DRIFT_OP_ATTENTION) n_attn++, attn = id;
            explicit_ops += v->op.kind == DRIFT_OP_BMM || v->op.kind == DRIFT_OP_SOFTMAX || v->op.kind == DRIFT_OP_CONCAT;
        }
        if (n_attn != 1 || explicit_ops) fail_msg("%s: %d ATTENTION, %d BMM/SOFTMAX/CONCAT", c->name, n_attn, explicit_ops);
        const drift_value *a = drift_graph_value(g, attn);
        if (a->op.sub != DRIFT_ATTN_ORDER_FIRST_LAST) fail_msg("%s: head dim 8 is cuDNN's tile order", c->name);
        const int want_n = c->want_bias[0] ? 4 : 3;
        if (a->op.n_in != want_n) fail_msg("%s: ATTENTION with %d inputs, want %d", c->name, a->op.n_in, want_n);
        const drift_value *k = drift_graph_value(g, a->in[1]);
        if (k->shape[1] != c->H) fail_msg("%s: k has %lld heads, want %d", c->name, (long long)k->shape[1], c->H);
        if (want_n == 4) {
            const drift_value *b = drift_graph_value(g, a->in[3]);
            if (b->ndim != 4 || memcmp(b->shape, c->want_bias, sizeof c->want_bias) != 0)
                fail_msg("%s: bias [%lld, %lld, %lld, %lld], want [%lld, %lld, %lld, %lld]", c->name,
                         (long long)b->shape[0], (long long)b->shape[1], (long long)b->shape[2], (long long)b->shape[3],
                         (long long)c->want_bias[0], (long long)c->want_bias[1], (long long)c->want_bias[2],
                         (long long)c->want_bias[3]);
            /* a bool mask or is_causal: 0 / -inf in fp32 (FIXED); a float one: autocast's rounding */
            const int is_bool = c->causal || (c->mask_dtype && !strcmp(c->mask_dtype, "bool"));
            const drift_value *bp = b;
            while (bp->kind == DRIFT_VAL_NODE && bp->op.kind == DRIFT_OP_VIEW) bp = drift_graph_value(g, bp->in[0]);
            if (is_bool && !(bp->op.kind == DRIFT_OP_UNARY && bp->op.sub == DRIFT_UNARY_MASK_BIAS && bp->rule == DRIFT_RULE_FIXED &&
                             bp->rule_dtype == DRIFT_F32))
                fail_msg("%s: a bool mask's bias is not MASK_BIAS fixed to fp32", c->name);
            if (!is_bool && !(bp->op.kind == DRIFT_OP_SCALAR && bp->rule == DRIFT_RULE_AUTOCAST_LOWER))
                fail_msg("%s: a float mask is not rounded as autocast rounds SDPA's operands", c->name);
        }
        print_message("  %-45s ATTENTION, %d inputs\n", c->name, want_n);
        drift_graph_free(g);
    }
}

/* A bool mask under 16-bit attention: torch hands cuDNN where(!mask, -65504, 0) in the query's
 * dtype (convert_boolean_attn_mask_cudnn), so the bias is MASK_BIAS clamped to -65536 (bf16) or
 * -65504 (fp16): a row with no key allowed attends as if unmasked, as the H200 recorded
 * (HunyuanVideo-1.5). fp32 attention and is_causal keep -inf. */
static void test_bool_mask_cudnn_bias(void **st) {
    (void)st;
    static const struct {
        const char *io;
        int causal;
        double want; /* 0: plain MASK_BIAS (-inf) */
    } cases[] = {{"bfloat16", 0, -65536.0}, {"float16", 0, -65504.0}, {"float32", 0, 0.0}, {"bfloat16", 1, 0.0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        g_io = cases[i].io;
        const scase c = {"bool key mask", 2, 4, 4, 6, 5, cases[i].causal ? NULL : "[2, 1, 1, 5]",
                         cases[i].causal ? NULL : "bool", NULL, cases[i].causal, 0, {0}};
        drift_graph *g = lower(&c);
        const drift_value *a = NULL;
        for (int id = 0; id < drift_graph_count(g); id++) {
            const drift_value *v = drift_graph_value(g, id);
            if (v->kind == DRIFT_VAL_NODE && v->op.kind == DRIFT_OP_ATTENTION) a = v;
        }
        if (!a || a->op.n_in != 4) fail_msg("%s %s: no ATTENTION with a bias", cases[i].io, c.name);
        const drift_value *b = drift_graph_value(g, a->in[3]);
        while (b->kind == DRIFT_VAL_NODE && b->op.kind == DRIFT_OP_VIEW) b = drift_graph_value(g, b->in[0]);
        if (cases[i].want != 0.0) {
            if (!(b->op.kind == DRIFT_OP_SCALAR && b->op.sub == DRIFT_SCALAR_MAX && b->op.scalar == cases[i].want &&
                  b->rule == DRIFT_RULE_FIXED && b->rule_dtype == DRIFT_F32))
                fail_msg("%s: the bool mask's bias is not clamped to %g in fp32", cases[i].io, cases[i].want);
            b = drift_graph_value(g, b->in[0]);
        }
        while (b->kind == DRIFT_VAL_NODE && b->op.kind == DRIFT_OP_VIEW) b = drift_graph_value(g, b->in[0]);
        if (!(b->op.kind == DRIFT_OP_UNARY && b->op.sub == DRIFT_UNARY_MASK_BIAS))
            fail_msg("%s%s: the bias is not built on MASK_BIAS", cases[i].io, cases[i].causal ? " causal" : "");
        print_message("  %-9s %-8s bias %s\n", cases[i].io, cases[i].causal ? "causal" : "bool", cases[i].want != 0.0 ? "clamped" : "-inf");
        drift_graph_free(g);
    }
    g_io = "float32";
}

/* A mask that does not broadcast, and is_causal with a mask: refused, named. */
static void test_refusals(void **st) {
    (void)st;
    const scase bad[] = {
        {"mask of the wrong length", 2, 4, 4, 6, 5, "[2, 1, 1, 4]", "bool", NULL, 0, 0, {0}},
        {"mask of 3 heads", 2, 4, 4, 6, 5, "[2, 3, 1, 5]", "bool", NULL, 0, 0, {0}},
        {"causal with a mask", 2, 4, 4, 6, 5, "[2, 1, 1, 5]", "bool", NULL, 1, 0, {0}},
    };
    const char *want[] = {"does not broadcast to [B, H, Lq, Lk] = [2, 4, 6, 5]", "does not broadcast",
                          "is_causal with an attn_mask"};
    for (int i = 0; i < 3; i++) {
        drift_err e;
        drift_err_clear(&e);
        drift_aten_graph *gr = NULL;
        drift_graph *sem = NULL;
        const char *doc = make_doc(&bad[i]);
        assert_int_equal(drift_aten_graph_parse(doc, strlen(doc), bad[i].name, &gr, &e), 0);
        assert_int_not_equal(drift_aten_graph_lower(gr, &sem, &e), 0);
        if (!strstr(e.msg, want[i])) fail_msg("%s: '%s' does not say '%s'", bad[i].name, e.msg, want[i]);
        drift_graph_free(sem);
        drift_aten_graph_free(gr);
    }
}

/* Head dim 12: no mask, or is_causal with as many queries as keys -> ATTENTION in
 * FlashAttention-2's order (flash takes those); a mask, or is_causal over another number of
 * keys -> the math backend's explicit ops (no ATTENTION). */
static void test_head_dim_12(void **st) {
    (void)st;
    g_dim = 12;
    static const struct {
        scase c;
        int flash;
    } cases[] = {
        {{"no mask, head dim 12", 2, 4, 4, 6, 5, NULL, NULL, NULL, 0, 0, {0}}, 1},
        {{"is_causal square, head dim 12", 1, 2, 1, 5, 5, NULL, NULL, NULL, 1, 1, {1, 1, 5, 5}}, 1},
        {{"is_causal 6 x 5, head dim 12", 2, 4, 4, 6, 5, NULL, NULL, NULL, 1, 0, {1, 1, 6, 5}}, 0},
        {{"bool key mask, head dim 12", 2, 4, 4, 6, 5, "[2, 1, 1, 5]", "bool", NULL, 0, 0, {2, 1, 1, 5}}, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        drift_graph *g = lower(&cases[i].c);
        int n_attn = 0, order = -1;
        for (int id = 0; id < drift_graph_count(g); id++) {
            const drift_value *v = drift_graph_value(g, id);
            if (v->kind == DRIFT_VAL_NODE && v->op.kind == DRIFT_OP_ATTENTION) n_attn++, order = v->op.sub;
        }
        if (cases[i].flash && (n_attn != 1 || order != DRIFT_ATTN_ORDER_LAST_FIRST))
            fail_msg("%s: %d ATTENTION, order %d (want 1, FlashAttention-2's)", cases[i].c.name, n_attn, order);
        if (!cases[i].flash && n_attn != 0) fail_msg("%s: an ATTENTION (want the math backend)", cases[i].c.name);
        drift_graph_free(g);
    }
    g_dim = 8;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_attention_with_bias),
        cmocka_unit_test(test_head_dim_12),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_bool_mask_cudnn_bias),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
