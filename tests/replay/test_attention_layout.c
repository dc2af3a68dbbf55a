/* The Wan graph's attention without PERMUTE nodes (ATTENTION layout 1,
 * replay/models/wan_graph.c) against the same graph lowered back to the old
 * form: PERMUTE q, k, v to [B, H, L, Dh], ATTENTION layout 0, PERMUTE the
 * output back (exactly what the builder emitted before layout 1 existed).
 *
 * On tiny-dit (batch 1 and 2) and a small wan2.2 config (Dh 128, Lq != Lk in
 * the cross-attention, batch 2), under a bf16 plan (norm2 fp32), an fp32
 * plan and, on the ref backend, the fp64 oracle: every recorded site and the
 * output are bitwise equal, and the two graphs record the same sites. The
 * new graph has one PERMUTE left (patch_embedding:out's Conv3d layout) and
 * every ATTENTION in layout 1. Graph JSON: layout is written only when
 * non-zero, read back, optional on input (old documents stay valid) and
 * checked (0 or 1, attention only). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>

#include "replay/exec/forward.h"
#include "replay/exec/params_init.h"

/* call's status must be DRIFT_OK (a drift_err named err in scope holds the message) */
#define OK(call)                                                                      \
    do {                                                                              \
        int rc_ = (call);                                                             \
        if (rc_) fail_msg("%s failed: %d: %s: %s", #call, rc_, err.where, err.msg);   \
    } while (0)

/* Copies sem into a new semantic graph where every layout-1 ATTENTION
 * becomes permute(q), permute(k), permute(v), ATTENTION layout 0,
 * permute(out). Caller owns *out. */
static int lower_layout1(const drift_graph *sem, drift_graph **out, drift_err *err) {
    static const int bhld[4] = {0, 2, 1, 3};
    const int n = drift_graph_count(sem);
    int *map = calloc((size_t)n, sizeof *map);
    drift_graph *g = NULL;
    int rc = map ? drift_graph_create(drift_graph_is_assigned(sem), &g, err) : DRIFT_E_NOMEM;
    for (int i = 0; i < n && !rc; i++) {
        const drift_value *v = drift_graph_value(sem, i);
        if (v->kind != DRIFT_VAL_NODE) {
            rc = drift_graph_add_leaf(g, v->kind, v->name, v->dtype, v->ndim, v->shape, &map[i], err);
            if (!rc && v->site) rc = drift_graph_set_site(g, map[i], v->site, err);
            continue;
        }
        drift_node_spec s;
        drift_node_spec_init(&s, v->op.kind);
        s.op = v->op;
        for (int k = 0; k < v->op.n_in; k++) s.in[k] = map[v->in[k]];
        s.rule = v->rule;
        s.rule_dtype = v->rule_dtype;
        s.rule_ref = v->rule == DRIFT_RULE_TYPE_AS ? map[v->rule_ref] : v->rule_ref;
        s.origin = v->origin;
        s.sem_id = v->sem_id;
        s.name = v->name;
        s.site = v->site;
        s.ndim = v->ndim;
        memcpy(s.shape, v->shape, sizeof s.shape);
        if (v->op.kind == DRIFT_OP_ATTENTION && v->op.layout == 1) {
            for (int k = 0; k < 3 && !rc; k++) {
                drift_node_spec p;
                drift_node_spec_init(&p, DRIFT_OP_PERMUTE);
                p.op.n_in = 1;
                p.in[0] = s.in[k];
                memcpy(p.op.perm, bhld, sizeof bhld);
                p.rule = DRIFT_RULE_LIKE_INPUT0;
                rc = drift_graph_add_node(g, &p, &s.in[k], err);
            }
            s.op.layout = 0;
            s.site = NULL;
            s.ndim = 0; /* inferred: [B, H, Lq, Dv] */
            memset(s.shape, 0, sizeof s.shape);
            int a = -1;
            if (!rc) rc = drift_graph_add_node(g, &s, &a, err);
            drift_node_spec p;
            drift_node_spec_init(&p, DRIFT_OP_PERMUTE);
            p.op.n_in = 1;
            p.in[0] = a;
            memcpy(p.op.perm, bhld, sizeof bhld);
            p.rule = DRIFT_RULE_LIKE_INPUT0;
            p.site = v->site;
            if (!rc) rc = drift_graph_add_node(g, &p, &map[i], err);
            continue;
        }
        rc = drift_graph_add_node(g, &s, &map[i], err);
    }
    if (!rc && drift_graph_output(sem) >= 0) rc = drift_graph_set_output(g, map[drift_graph_output(sem)], err);
    if (!rc) rc = drift_graph_set_model(g, drift_graph_model(sem), err);
    free(map);
    if (rc) {
        drift_graph_free(g);
        return rc;
    }
    *out = g;
    return DRIFT_OK;
}

static int count_op(const drift_graph *g, drift_op_kind k, int layout) {
    int c = 0;
    for (int i = 0; i < drift_graph_count(g); i++) {
        const drift_value *v = drift_graph_value(g, i);
        if (v->kind == DRIFT_VAL_NODE && v->op.kind == k && (layout < 0 || v->op.layout == layout)) c++;
    }
    return c;
}

static int keep_site(const char *site, const drift_tensor *t, void *user, drift_err *err) {
    return drift_site_cache_put((drift_site_cache *)user, site, t, err);
}

/* Runs f on be, every site into c (cleared first); output into r. */
static void run_sites(const drift_forward *f, drift_model *m, const drift_backend *be, const drift_hostset *in,
                      drift_site_cache *c, drift_exec_result *r) {
    drift_err err;
    drift_site_cache_clear(c);
    memset(r, 0, sizeof *r);
    if (drift_forward_run(f, m, be, in, keep_site, c, r, &err)) fail_msg("forward: %s: %s", err.where, err.msg);
}

/* Sites of g whose values in a and b differ (count, dtype or any bit; a
 * site missing from either counts). *n_sites: sites of g. */
static int diff_sites(const drift_graph *g, const drift_site_cache *a, const drift_site_cache *b, int *n_sites) {
    int ids[4096];
    int n = drift_graph_sites(g, ids, 4096), bad = 0;
    assert_true(n > 0 && n <= 4096);
    for (int i = 0; i < n; i++) {
        const char *site = drift_graph_value(g, ids[i])->site;
        int64_t na = -1, nb = -2;
        drift_dtype da = DRIFT_DTYPE_INVALID, db = DRIFT_DTYPE_INVALID;
        const float *va = drift_site_cache_get(a, site, &na, &da), *vb = drift_site_cache_get(b, site, &nb, &db);
        int64_t k = 0;
        if (va && vb && na == nb && da == db)
            while (k < na && memcmp(&va[k], &vb[k], sizeof(float)) == 0) k++;
        if (va && vb && na == nb && da == db && k == na) continue;
        if (bad++ < 5) {
            if (va && vb && na == nb && da == db)
                fprintf(stderr, "  site %s differs first at element %lld: %.9g vs %.9g\n", site, (long long)k,
                        (double)va[k], (double)vb[k]);
            else
                fprintf(stderr, "  site %s: missing or count/dtype differ\n", site);
        }
    }
    *n_sites = n;
    return bad;
}

static void check_model(const char *spec, int with_oracle) {
    drift_err err;
    drift_model *m1 = NULL, *m0 = NULL;
    OK(drift_model_create(spec, &m1, &err));
    OK(drift_model_create(spec, &m0, &err));
    OK(drift_model_seed_params(m1, 11, &err));
    OK(drift_model_seed_params(m0, 11, &err));
    drift_graph *lowered = NULL;
    if (lower_layout1(m1->sem, &lowered, &err)) fail_msg("lowering: %s", err.msg);
    drift_graph_free(m0->sem);
    m0->sem = lowered;

    /* structure: no attention permutes left in the new graph */
    const int layers = m1->cfg.layers;
    assert_int_equal(count_op(m1->sem, DRIFT_OP_ATTENTION, 1), 2 * layers);
    assert_int_equal(count_op(m1->sem, DRIFT_OP_ATTENTION, 0), 0);
    /* patch_embedding:out, and the patch weight to [dim, pf, ph, pw, C] (channels-last K) */
    assert_int_equal(count_op(m1->sem, DRIFT_OP_PERMUTE, -1), 2);
    assert_int_equal(count_op(m0->sem, DRIFT_OP_ATTENTION, 0), 2 * layers);
    assert_int_equal(count_op(m0->sem, DRIFT_OP_PERMUTE, -1), 2 + 8 * layers);
    /* the same recorded sites, in the same order */
    int ids1[4096], ids0[4096];
    int n1 = drift_graph_sites(m1->sem, ids1, 4096), n0 = drift_graph_sites(m0->sem, ids0, 4096);
    assert_int_equal(n1, n0);
    assert_int_equal(n1, 6 + 4 + 7 * layers + 3);
    for (int i = 0; i < n1; i++)
        assert_string_equal(drift_graph_value(m1->sem, ids1[i])->site, drift_graph_value(m0->sem, ids0[i])->site);

    drift_hostset *in = NULL;
    OK(drift_params_init_inputs(&m1->cfg, 5, &in, &err));
    drift_backend *cpu = NULL, *ref = NULL;
    OK(drift_backend_create("cpu", &cpu, &err));
    OK(drift_backend_create("ref", &ref, &err));
    drift_site_cache *c1 = NULL, *c0 = NULL;
    OK(drift_site_cache_create(&c1, &err));
    OK(drift_site_cache_create(&c0, &err));

    for (int pi = 0; pi < 3; pi++) {
        if (pi == 2 && !with_oracle) break;
        drift_plan plan;
        drift_plan_init(&plan);
        if (pi == 0) OK(drift_plan_apply_flag(&plan, "--param-dtype", "*.norm2.*=fp32", &err));
        if (pi == 1) {
            OK(drift_plan_apply_flag(&plan, "--diffusion-forward-dtype", "fp32", &err));
            OK(drift_plan_apply_flag(&plan, "--sglang-dit-precision", "fp32", &err));
        }
        const drift_side side = pi == 2 ? DRIFT_SIDE_ORACLE : DRIFT_SIDE_TRAINER;
        const drift_backend *be = pi == 2 ? ref : cpu;
        drift_forward *f1 = NULL, *f0 = NULL;
        if (drift_forward_prepare(m1, pi == 2 ? NULL : &plan, side, NULL, &f1, &err) ||
            drift_forward_prepare(m0, pi == 2 ? NULL : &plan, side, NULL, &f0, &err))
            fail_msg("prepare: %s: %s", err.where, err.msg);
        drift_exec_result r1, r0;
        run_sites(f1, m1, be, in, c1, &r1);
        run_sites(f0, m0, be, in, c0, &r0);
        int ns = 0;
        assert_int_equal(diff_sites(m1->sem, c1, c0, &ns), 0);
        assert_int_equal(ns, n1);
        assert_int_equal(r1.numel, r0.numel);
        assert_int_equal(r1.dtype, r0.dtype);
        if (r1.f64) {
            assert_non_null(r0.f64);
            assert_memory_equal(r1.f64, r0.f64, (size_t)r1.numel * sizeof(double));
        } else {
            assert_memory_equal(r1.f32, r0.f32, (size_t)r1.numel * sizeof(float));
        }
        drift_exec_result_free(&r1);
        drift_exec_result_free(&r0);
        drift_forward_free(f1);
        drift_forward_free(f0);
        drift_plan_free(&plan);
    }
    drift_site_cache_free(c1);
    drift_site_cache_free(c0);
    drift_backend_free(cpu);
    drift_backend_free(ref);
    drift_hostset_free(in);
    drift_model_free(m1);
    drift_model_free(m0);
}

static void test_tiny_dit(void **state) {
    (void)state;
    check_model("tiny-dit", 1);
}

static void test_tiny_dit_batch2(void **state) {
    (void)state;
    check_model("tiny-dit:batch=2,layers=1", 1);
}

/* Dh 128, 2 heads, 48 tokens vs 32 text tokens, batch 2. */
static void test_wan22_small(void **state) {
    (void)state;
    check_model("wan2.2:layers=2,dim=256,heads=2,ffn_dim=512,text_dim=64,freq_dim=64,in_channels=16,out_channels=16,"
                "frames=2,height=8,width=12,batch=2",
                0);
}

/* The lowering is a real change: the permuted graph is not the new one,
 * and a site compare catches a one-bit difference. */
static void test_compare_can_fail(void **state) {
    (void)state;
    drift_err err;
    drift_model *m = NULL;
    OK(drift_model_create("tiny-dit:layers=1", &m, &err));
    drift_graph *lowered = NULL;
    OK(lower_layout1(m->sem, &lowered, &err));
    char why[256] = "";
    assert_false(drift_graph_equal(m->sem, lowered, why, sizeof why));
    drift_graph_free(lowered);
    drift_site_cache *a = NULL, *b = NULL;
    OK(drift_site_cache_create(&a, &err));
    OK(drift_site_cache_create(&b, &err));
    int ids[4096];
    int n = drift_graph_sites(m->sem, ids, 4096);
    float v[3] = {1.0f, 2.0f, 3.0f};
    for (int i = 0; i < n; i++) {
        const char *s = drift_graph_value(m->sem, ids[i])->site;
        OK(drift_site_cache_put_f32(a, s, DRIFT_F32, v, 3, &err));
        if (i == n / 2) v[1] = nextafterf(2.0f, 3.0f);
        OK(drift_site_cache_put_f32(b, s, DRIFT_F32, v, 3, &err));
        v[1] = 2.0f;
    }
    int ns = 0;
    assert_int_equal(diff_sites(m->sem, a, b, &ns), 1);
    assert_int_equal(diff_sites(m->sem, a, a, &ns), 0);
    drift_site_cache_free(a);
    drift_site_cache_free(b);
    drift_model_free(m);
}

/* JSON: layout written only when non-zero; optional on input; checked. */
static void test_json(void **state) {
    (void)state;
    drift_err err;
    drift_model *m = NULL;
    OK(drift_model_create("tiny-dit:layers=1", &m, &err));
    char *js = drift_graph_to_json(m->sem, 0, &err);
    assert_non_null(js);
    assert_non_null(strstr(js, "\"layout\""));
    drift_graph *back = NULL;
    OK(drift_graph_from_json(js, strlen(js), "t.json", &back, &err));
    char why[256] = "";
    if (!drift_graph_equal(m->sem, back, why, sizeof why)) fail_msg("round trip: %s", why);
    drift_graph_free(back);
    free(js);

    drift_graph *low = NULL;
    OK(lower_layout1(m->sem, &low, &err));
    js = drift_graph_to_json(low, 0, &err);
    assert_non_null(js);
    /* layout 0 is not written: the one "layout" left is the patch embedding's PATCHIFY (1) */
    const char *lay = strstr(js, "\"layout\"");
    assert_non_null(lay);
    assert_null(strstr(lay + 1, "\"layout\""));
    assert_int_equal(count_op(low, DRIFT_OP_PATCHIFY, 1), 1);
    OK(drift_graph_from_json(js, strlen(js), "t.json", &back, &err));
    assert_true(drift_graph_equal(low, back, why, sizeof why));
    drift_graph_free(back);
    free(js);
    drift_graph_free(low);
    drift_model_free(m);

    static const char head[] =
        "{\"format\": \"drift-graph\", \"version\": 1, \"assigned\": false, \"values\": ["
        "{\"id\": 0, \"kind\": \"input\", \"name\": \"latents\", \"shape\": [1, 4, 2, 8]},"
        "{\"id\": 1, \"kind\": \"node\", \"op\": \"attention\", \"in\": [0, 0, 0], \"shape\": [1, 4, 2, 8], "
        "\"rule\": \"autocast_lower\", \"attrs\": {\"scale\": 0.5%s}}]}";
    char doc[1024];
    const char *good[2] = {"", ", \"layout\": 1"};
    for (int i = 0; i < 2; i++) {
        snprintf(doc, sizeof doc, head, good[i]);
        drift_graph *g = NULL;
        if (drift_graph_from_json(doc, strlen(doc), "doc.json", &g, &err)) fail_msg("%s: %s", doc, err.msg);
        assert_int_equal(drift_graph_value(g, 1)->op.layout, i);
        drift_graph_free(g);
    }
    const char *bad[3] = {", \"layout\": 2", ", \"layout\": -1", ", \"layout\": true"};
    for (int i = 0; i < 3; i++) {
        snprintf(doc, sizeof doc, head, bad[i]);
        drift_graph *g = NULL;
        assert_int_not_equal(drift_graph_from_json(doc, strlen(doc), "doc.json", &g, &err), DRIFT_OK);
        assert_non_null(strstr(err.msg, "layout"));
        assert_null(g);
    }
    /* layout on another op is refused by name */
    static const char other[] =
        "{\"format\": \"drift-graph\", \"version\": 1, \"assigned\": false, \"values\": ["
        "{\"id\": 0, \"kind\": \"input\", \"name\": \"latents\", \"shape\": [4, 8]},"
        "{\"id\": 1, \"kind\": \"node\", \"op\": \"layer_norm\", \"in\": [0], \"shape\": [4, 8], "
        "\"rule\": \"autocast_fp32\", \"attrs\": {\"eps\": 0.001, \"layout\": 1}}]}";
    drift_graph *g = NULL;
    assert_int_not_equal(drift_graph_from_json(other, strlen(other), "doc.json", &g, &err), DRIFT_OK);
    assert_non_null(strstr(err.msg, "layout"));
    /* and the graph API refuses layout 2 */
    OK(drift_graph_create(0, &g, &err));
    int x = -1;
    int64_t sh[4] = {1, 4, 2, 8};
    OK(drift_graph_add_leaf(g, DRIFT_VAL_INPUT, "latents", DRIFT_DTYPE_INVALID, 4, sh, &x, &err));
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_ATTENTION);
    s.op.n_in = 3;
    s.in[0] = s.in[1] = s.in[2] = x;
    s.op.scale = 0.5f;
    s.op.layout = 2;
    s.rule = DRIFT_RULE_AUTOCAST_LOWER;
    assert_int_equal(drift_graph_add_node(g, &s, NULL, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "layout"));
    s.op.layout = 1;
    OK(drift_graph_add_node(g, &s, NULL, &err));
    drift_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_compare_can_fail),
        cmocka_unit_test(test_tiny_dit),
        cmocka_unit_test(test_tiny_dit_batch2),
        cmocka_unit_test(test_wan22_small),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
