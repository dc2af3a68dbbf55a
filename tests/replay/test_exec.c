/* Tests of replay/exec (with replay/assign, replay/models/wan_graph and
 * replay/params_init) on the cpu and ref backends, at tiny-dit sizes.
 *
 * The key test is the acceptance shape of DESIGN.md s7b: the trainer plan
 * (wan2_2: *.norm2.* fp32) and the rollout plan (wan2_2_no_norm2) replayed on
 * one backend from the same parameters and inputs agree bit for bit at
 * every site before blocks.0.norm2 and differ there. Assertions are on exact
 * zeros and first divergence, never on a random model's output magnitudes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "formats/alloc.h"
#include "formats/dtype.h"
#include "formats/plan.h"
#include "kernels/backend_impl.h" /* white-box: wraps a backend's function table */
#include "kernels/backend.h"
#include "replay/ir/assign.h"
#include "replay/exec/exec.h"
#include "replay/ir/graph.h"
#include "replay/models/family.h"
#include "replay/models/wan_graph.h"
#include "replay/exec/params_init.h"
#include "site_recording.h"

#define OK(call, errp)                                                                               \
    do {                                                                                             \
        int rc_ = (call);                                                                            \
        if (rc_ != DRIFT_OK) fail_msg("%s failed (%d): %s: %s", #call, rc_, (errp)->where, (errp)->msg); \
    } while (0)

/* ---- recorded sites ---------------------------------------------------------- */

/* rec_site, recording, record_cb, recording_free, find_rec: tests/site_recording.h */


static double mean_abs_diff(const rec_site *a, const rec_site *b) {
    assert_int_equal(a->numel, b->numel);
    double s = 0;
    for (int64_t i = 0; i < a->numel; i++) s += fabs((double)a->v[i] - (double)b->v[i]);
    return s / (double)a->numel;
}

static int bitwise_equal(const rec_site *a, const rec_site *b) {
    return a->numel == b->numel && memcmp(a->v, b->v, (size_t)a->numel * sizeof(float)) == 0;
}

/* Index (in a's order) of the first site whose values differ from b's, or -1. */
static int first_divergence(const recording *a, const recording *b) {
    assert_int_equal(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        assert_string_equal(a->s[i].name, b->s[i].name);
        if (!bitwise_equal(&a->s[i], &b->s[i])) return i;
    }
    return -1;
}

/* ---- a tiny-dit replay fixture --------------------------------------------------- */

typedef struct fixture {
    drift_family_config cfg;
    drift_param_table table;
    drift_graph *sem;
    drift_hostset *params, *inputs, *buf_cpu, *buf_dev;
    drift_backend *cpu, *ref;
} fixture;

static fixture *fx_new(const char *spec) {
    fixture *f = calloc(1, sizeof *f);
    drift_err err;
    drift_err_clear(&err);
    assert_non_null(f);
    OK(drift_family_parse(spec, &f->cfg, &err), &err);
    drift_param_table_init(&f->table);
    OK(drift_family_param_table(&f->cfg, &f->table, &err), &err);
    OK(drift_wan_graph_build(&f->cfg, &f->sem, &err), &err);
    OK(drift_params_init_seeded(&f->table, 1234, &f->params, &err), &err);
    OK(drift_params_init_inputs(&f->cfg, 99, &f->inputs, &err), &err);
    OK(drift_params_init_buffers(&f->cfg, DRIFT_BUF_CPU_FP64, &f->buf_cpu, &err), &err);
    OK(drift_params_init_buffers(&f->cfg, DRIFT_BUF_DEVICE_FP32, &f->buf_dev, &err), &err);
    OK(drift_backend_create("cpu", &f->cpu, &err), &err);
    OK(drift_backend_create("ref", &f->ref, &err), &err);
    return f;
}

static void fx_free(fixture *f) {
    if (!f) return;
    drift_graph_free(f->sem);
    drift_param_table_free(&f->table);
    drift_hostset_free(f->params);
    drift_hostset_free(f->inputs);
    drift_hostset_free(f->buf_cpu);
    drift_hostset_free(f->buf_dev);
    drift_backend_free(f->cpu);
    drift_backend_free(f->ref);
    free(f);
}

static void load_plan(drift_plan *p, const char *file) {
    char path[1024];
    const char *dir = getenv("DRIFT_TESTDATA");
    snprintf(path, sizeof path, "%s/plans/%s", dir ? dir : "tests/data", file);
    drift_err err;
    drift_err_clear(&err);
    OK(drift_plan_load_file(p, path, &err), &err);
}

/* Assigns sem under plan (NULL: oracle) for side. */
static drift_graph *assign(fixture *f, const drift_plan *plan, drift_side side) {
    drift_err err;
    drift_err_clear(&err);
    drift_compiled_plan cp;
    memset(&cp, 0, sizeof cp);
    drift_assign_opts o;
    drift_assign_opts_init(&o);
    o.side = side;
    drift_graph *g = NULL;
    if (plan) {
        OK(drift_plan_compile(plan, &f->table, &cp, &err), &err);
        OK(drift_assign_dtypes(f->sem, plan, &cp, &f->table, &o, &g, &err), &err);
        drift_compiled_plan_free(&cp);
    } else {
        OK(drift_assign_dtypes(f->sem, NULL, NULL, NULL, &o, &g, &err), &err);
    }
    return g;
}

static void run(fixture *f, const drift_graph *g, const drift_backend *be, const drift_hostset *bufs, recording *rec,
                drift_exec_result *res) {
    drift_err err;
    drift_err_clear(&err);
    drift_exec_inputs in = {f->params, bufs, f->inputs, rec ? record_cb : NULL, rec, NULL, NULL, NULL};
    OK(drift_exec_run(g, be, &in, res, &err), &err);
}

/* ---- tests --------------------------------------------------------------------------- */

static void test_determinism(void **state) {
    (void)state;
    fixture *f = fx_new("tiny-dit");
    drift_plan plan;
    drift_plan_init(&plan);
    load_plan(&plan, "wan2_2.json");
    drift_graph *g = assign(f, &plan, DRIFT_SIDE_TRAINER);
    recording a = {0}, b = {0};
    drift_exec_result ra, rb;
    run(f, g, f->cpu, f->buf_cpu, &a, &ra);
    run(f, g, f->cpu, f->buf_cpu, &b, &rb);
    assert_int_equal(first_divergence(&a, &b), -1);
    assert_int_equal(ra.numel, rb.numel);
    assert_memory_equal(ra.f32, rb.f32, (size_t)ra.numel * sizeof(float));
    assert_memory_equal(ra.f64, rb.f64, (size_t)ra.numel * sizeof(double));
    /* the output: [B, C_out, F, H, W] in the forward dtype, finite, not all zero */
    assert_int_equal(ra.ndim, 5);
    assert_int_equal(ra.shape[1], f->cfg.out_channels);
    assert_int_equal(ra.dtype, DRIFT_BF16);
    double l1 = 0;
    for (int64_t i = 0; i < ra.numel; i++) {
        assert_true(isfinite(ra.f32[i]));
        l1 += fabs(ra.f32[i]);
    }
    assert_true(l1 > 0);
    /* the output site equals the returned output */
    const rec_site *np = find_rec(&a, "output:noise_pred");
    assert_non_null(np);
    assert_memory_equal(np->v, ra.f32, (size_t)ra.numel * sizeof(float));
    /* a run without a site callback gives the same output */
    drift_exec_result rc;
    run(f, g, f->cpu, f->buf_cpu, NULL, &rc);
    assert_memory_equal(rc.f32, ra.f32, (size_t)ra.numel * sizeof(float));
    /* the graph as stored in a trace's /graph replays to the same bits */
    drift_err err;
    drift_err_clear(&err);
    char *js = drift_graph_to_json(g, 0, &err);
    assert_non_null(js);
    drift_graph *back = NULL;
    OK(drift_graph_from_json(js, strlen(js), "graph.json", &back, &err), &err);
    drift_exec_result rj;
    run(f, back, f->cpu, f->buf_cpu, NULL, &rj);
    assert_memory_equal(rj.f32, ra.f32, (size_t)ra.numel * sizeof(float));
    drift_exec_result_free(&rj);
    drift_graph_free(back);
    free(js);
    /* every site of the graph was reported, in execution order */
    int ids[256];
    int ns = drift_graph_sites(g, ids, 256);
    assert_int_equal(ns, a.n);
    for (int i = 0; i < ns; i++) assert_string_equal(drift_graph_value(g, ids[i])->site, a.s[i].name);
    drift_exec_result_free(&ra);
    drift_exec_result_free(&rb);
    drift_exec_result_free(&rc);
    recording_free(&a);
    recording_free(&b);
    drift_graph_free(g);
    drift_plan_free(&plan);
    fx_free(f);
}

static double rmse(const double *a, const double *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (a[i] - b[i]) * (a[i] - b[i]);
    return sqrt(s / (double)n);
}

/* THE acceptance shape: norm2 fp32 island on one side only. */
static void test_acceptance_norm2(void **state) {
    (void)state;
    fixture *f = fx_new("tiny-dit");
    drift_plan trainer, rollout;
    drift_plan_init(&trainer);
    drift_plan_init(&rollout);
    load_plan(&trainer, "wan2_2.json");
    load_plan(&rollout, "wan2_2_no_norm2.json");
    drift_graph *gt = assign(f, &trainer, DRIFT_SIDE_TRAINER);
    drift_graph *gr = assign(f, &rollout, DRIFT_SIDE_ROLLOUT);
    drift_graph *go = assign(f, NULL, DRIFT_SIDE_ORACLE);
    recording rt = {0}, rr = {0}, ro = {0};
    drift_exec_result xt, xr, xo;
    run(f, gt, f->cpu, f->buf_cpu, &rt, &xt);
    run(f, gr, f->cpu, f->buf_cpu, &rr, &xr);
    run(f, go, f->ref, f->buf_cpu, &ro, &xo);

    int first = first_divergence(&rt, &rr);
    assert_true(first >= 0);
    assert_string_equal(rt.s[first].name, "blocks.0.norm2:out");
    int upstream = 0;
    for (int i = 0; i < first; i++, upstream++) assert_true(mean_abs_diff(&rt.s[i], &rr.s[i]) == 0.0);
    assert_true(upstream >= 10); /* 6 input sites, patch embedding, 3 embedders, norm1, attn1 */
    assert_true(mean_abs_diff(&rt.s[first], &rr.s[first]) > 0.0);
    /* the output differs too (the bf16 forward is chaotic downstream) */
    assert_true(memcmp(xt.f32, xr.f32, (size_t)xt.numel * sizeof(float)) != 0);

    /* the oracle ran every site; each side is near it but not on it */
    assert_int_equal(ro.n, rt.n);
    assert_int_equal(xo.dtype, DRIFT_F64);
    double et = rmse(xt.f64, xo.f64, xt.numel), er = rmse(xr.f64, xo.f64, xr.numel);
    assert_true(isfinite(et) && et > 0);
    assert_true(isfinite(er) && er > 0);
    print_message("noise_pred RMSE vs oracle: trainer %.3e, rollout %.3e (ratio %.3f)\n", et, er, er / et);
    /* the oracle's inputs are the same values: the input sites agree exactly */
    const rec_site *a = find_rec(&rt, "input:latents:pre_cast"), *b = find_rec(&ro, "input:latents:pre_cast");
    assert_memory_equal(a->v, b->v, (size_t)a->numel * sizeof(float));

    drift_exec_result_free(&xt);
    drift_exec_result_free(&xr);
    drift_exec_result_free(&xo);
    recording_free(&rt);
    recording_free(&rr);
    recording_free(&ro);
    drift_graph_free(gt);
    drift_graph_free(gr);
    drift_graph_free(go);
    drift_plan_free(&trainer);
    drift_plan_free(&rollout);
    fx_free(f);
}

/* Under bf16 autocast an fp32 LINEAR weight is rounded to bf16 by autocast
 * exactly as FSDP's bf16 cast would: the replay is bit-identical. */
static void test_fp32_linear_override_no_change(void **state) {
    (void)state;
    fixture *f = fx_new("tiny-dit");
    drift_plan base, over;
    drift_plan_init(&base);
    drift_plan_init(&over);
    drift_err err;
    drift_err_clear(&err);
    OK(drift_plan_apply_flag(&over, "--param-dtype", "*.to_q.weight=fp32", &err), &err);
    OK(drift_plan_apply_flag(&over, "--param-dtype", "proj_out.*=fp32", &err), &err);
    OK(drift_plan_apply_flag(&over, "--param-dtype", "*ffn.net.0.proj.*=fp32", &err), &err);
    drift_graph *gb = assign(f, &base, DRIFT_SIDE_TRAINER), *go = assign(f, &over, DRIFT_SIDE_TRAINER);
    recording rb = {0}, ro = {0};
    drift_exec_result xb, xo;
    run(f, gb, f->cpu, f->buf_cpu, &rb, &xb);
    run(f, go, f->cpu, f->buf_cpu, &ro, &xo);
    assert_int_equal(first_divergence(&rb, &ro), -1);
    assert_memory_equal(xb.f32, xo.f32, (size_t)xb.numel * sizeof(float));
    /* ...whereas an fp32 forward (no autocast) does change with the same plan otherwise */
    drift_exec_result_free(&xb);
    drift_exec_result_free(&xo);
    recording_free(&rb);
    recording_free(&ro);
    drift_graph_free(gb);
    drift_graph_free(go);
    drift_plan_free(&base);
    drift_plan_free(&over);
    fx_free(f);
}

/* RoPE provenance: the fp32-evaluated ("device") table differs from the
 * fp64-evaluated one ("cpu") by a few fp32 ULPs, and replays diverge first
 * at the first site that uses RoPE. */
static void test_rope_provenance(void **state) {
    (void)state;
    fixture *f = fx_new("tiny-dit");
    const char *names[2] = {DRIFT_WAN_ROPE_COS, DRIFT_WAN_ROPE_SIN};
    uint64_t max_ulp = 0;
    int64_t n_diff = 0, total = 0;
    for (int k = 0; k < 2; k++) {
        const drift_host_tensor *c = drift_hostset_find(f->buf_cpu, names[k]);
        const drift_host_tensor *d = drift_hostset_find(f->buf_dev, names[k]);
        assert_non_null(c);
        assert_non_null(d);
        assert_int_equal(c->numel, d->numel);
        assert_non_null(c->f64);
        assert_null(d->f64);
        for (int64_t i = 0; i < c->numel; i++) {
            uint64_t u = drift_dtype_ulp_distance(c->f32[i], d->f32[i], DRIFT_F32);
            if (u > max_ulp) max_ulp = u;
            n_diff += u > 0;
            /* the cpu table is the fp64 value rounded once */
            assert_true(c->f32[i] == (float)c->f64[i]);
        }
        total += c->numel;
    }
    print_message("rope tables: %lld of %lld entries differ, max %llu fp32 ULPs\n", (long long)n_diff,
                  (long long)total, (unsigned long long)max_ulp);
    assert_true(n_diff > 0);
    assert_true(max_ulp <= 64);
    /* row 0 (position 0 on every axis) is exactly cos 0 = 1, sin 0 = 0 on both */
    const drift_host_tensor *c0 = drift_hostset_find(f->buf_dev, DRIFT_WAN_ROPE_COS);
    for (int64_t j = 0; j < c0->shape[1]; j++) assert_true(c0->f32[j] == 1.0f);

    /* fp32 forward: the table difference reaches attn1 unrounded */
    drift_plan p32;
    drift_plan_init(&p32);
    drift_err err;
    drift_err_clear(&err);
    OK(drift_plan_apply_flag(&p32, "--diffusion-forward-dtype", "fp32", &err), &err);
    OK(drift_plan_apply_flag(&p32, "--sglang-dit-precision", "fp32", &err), &err);
    drift_graph *g = assign(f, &p32, DRIFT_SIDE_TRAINER);
    recording a = {0}, b = {0};
    drift_exec_result xa, xb;
    run(f, g, f->cpu, f->buf_cpu, &a, &xa);
    run(f, g, f->cpu, f->buf_dev, &b, &xb);
    int first = first_divergence(&a, &b);
    assert_true(first >= 0);
    assert_string_equal(a.s[first].name, "blocks.0.attn1:out");
    assert_int_equal(a.s[first].dtype, DRIFT_F32);
    drift_exec_result_free(&xa);
    drift_exec_result_free(&xb);
    recording_free(&a);
    recording_free(&b);
    drift_graph_free(g);

    /* bf16 forward: nothing before attn1 can differ (whether a bf16 rounding
     * flips at these sizes is chance, so only the upstream part is asserted) */
    drift_plan pb;
    drift_plan_init(&pb);
    g = assign(f, &pb, DRIFT_SIDE_TRAINER);
    run(f, g, f->cpu, f->buf_cpu, &a, &xa);
    run(f, g, f->cpu, f->buf_dev, &b, &xb);
    first = first_divergence(&a, &b);
    int attn1 = -1;
    for (int i = 0; i < a.n; i++)
        if (!strcmp(a.s[i].name, "blocks.0.attn1:out")) attn1 = i;
    assert_true(attn1 > 0);
    assert_true(first == -1 || first >= attn1);
    drift_exec_result_free(&xa);
    drift_exec_result_free(&xb);
    recording_free(&a);
    recording_free(&b);
    drift_graph_free(g);
    drift_plan_free(&p32);
    drift_plan_free(&pb);
    fx_free(f);
}

/* Table layout against an independent evaluation of diffusers' formula. */
static double rope_ref(double theta, int d, int64_t p, int c, int want_sin) {
    double freq = 1.0 / pow(theta, (double)(2 * (c / 2)) / (double)d);
    return want_sin ? sin((double)p * freq) : cos((double)p * freq);
}

static void test_rope_table_layout(void **state) {
    (void)state;
    /* Dh = 12: splits agree ([4, 4, 4] both ways); Dh = 16: __init__ [8, 4, 4], forward [6, 5, 5] */
    const char *specs[2] = {"tiny-dit:dim=48,heads=4,frames=3,height=6,width=8",
                            "tiny-dit:frames=3,height=6,width=8"};
    for (int k = 0; k < 2; k++) {
        drift_family_config cfg;
        drift_err err;
        drift_err_clear(&err);
        OK(drift_family_parse(specs[k], &cfg, &err), &err);
        drift_hostset *b = NULL;
        OK(drift_params_init_buffers(&cfg, DRIFT_BUF_CPU_FP64, &b, &err), &err);
        const drift_host_tensor *cs = drift_hostset_find(b, DRIFT_WAN_ROPE_COS), *sn = drift_hostset_find(b, DRIFT_WAN_ROPE_SIN);
        int Dh = cfg.dim / cfg.heads;
        int64_t Hp = cfg.height / 2, Wp = cfg.width / 2;
        assert_int_equal(cs->shape[0], 3 * Hp * Wp);
        assert_int_equal(cs->shape[1], Dh);
        /* token (f=2, h=1, w=3) */
        int64_t tok = (2 * Hp + 1) * Wp + 3;
        const double th = cfg.rope_theta;
        for (int col = 0; col < Dh; col++) {
            double wc, ws;
            if (Dh == 12) { /* t: cols 0-3 row f; h: 4-7 row h; w: 8-11 row w; width 4 each */
                int64_t p = col < 4 ? 2 : col < 8 ? 1 : 3;
                wc = rope_ref(th, 4, p, col % 4, 0);
                ws = rope_ref(th, 4, p, col % 4, 1);
            } else { /* axis by __init__ [8, 4, 4], row by forward [6, 5, 5] */
                int64_t p = col < 6 ? 2 : col < 11 ? 1 : 3;
                int d = col < 8 ? 8 : 4, c = col < 8 ? col : (col - 8) % 4;
                wc = rope_ref(th, d, p, c, 0);
                ws = rope_ref(th, d, p, c, 1);
            }
            assert_true(cs->f64[tok * Dh + col] == wc);
            assert_true(sn->f64[tok * Dh + col] == ws);
            assert_true(cs->f32[tok * Dh + col] == (float)wc);
        }
        drift_hostset_free(b);
    }
}

/* The oracle (fp64 on ref) uses the exact fp64 RoPE values; with the fp32
 * tables instead its output moves (slightly), so the shadow values are used. */
static void test_oracle_uses_fp64_buffers(void **state) {
    (void)state;
    fixture *f = fx_new("tiny-dit:layers=1");
    drift_graph *go = assign(f, NULL, DRIFT_SIDE_ORACLE);
    for (int i = 0; i < drift_graph_count(go); i++) {
        const drift_value *v = drift_graph_value(go, i);
        assert_int_equal(v->dtype, DRIFT_F64);
        if (v->kind == DRIFT_VAL_NODE) assert_int_equal(v->origin, DRIFT_ORIGIN_MODEL);
    }
    drift_exec_result a, b;
    run(f, go, f->ref, f->buf_cpu, NULL, &a);
    run(f, go, f->ref, f->buf_dev, NULL, &b);
    assert_true(memcmp(a.f64, b.f64, (size_t)a.numel * sizeof(double)) != 0);
    drift_exec_result_free(&a);
    drift_exec_result_free(&b);
    drift_graph_free(go);
    fx_free(f);
}

/* ---- memory: a counting backend wrapper ------------------------------------------- */

typedef struct counting {
    drift_backend be;     /* first: the wrapper passed to the executor */
    const drift_backend *inner;
    long live, peak, allocs;
} counting;

static int cnt_alloc(const drift_backend *be, drift_tensor *t, drift_err *err) {
    counting *c = (counting *)be;
    int rc = c->inner->alloc(be, t, err);
    if (!rc) {
        c->allocs++;
        if (++c->live > c->peak) c->peak = c->live;
    }
    return rc;
}

static void cnt_release(const drift_backend *be, drift_tensor *t) {
    counting *c = (counting *)be;
    if (t && t->data) c->live--;
    c->inner->release(be, t);
}

static void test_refcount_release(void **state) {
    (void)state;
    fixture *f = fx_new("tiny-dit");
    drift_plan plan;
    drift_plan_init(&plan);
    load_plan(&plan, "wan2_2.json");
    drift_graph *g = assign(f, &plan, DRIFT_SIDE_TRAINER);
    counting c;
    c.be = *f->cpu;
    c.inner = f->cpu;
    c.be.alloc = cnt_alloc;
    c.be.release = cnt_release;
    c.live = c.peak = c.allocs = 0;
    drift_exec_result r0, r1;
    drift_err err;
    drift_err_clear(&err);
    drift_exec_inputs in = {f->params, f->buf_cpu, f->inputs, NULL, NULL, NULL, NULL, NULL};
    OK(drift_exec_run(g, &c.be, &in, &r1, &err), &err);
    assert_int_equal(c.live, 0);
    print_message("allocations %ld, peak live %ld, graph values %d\n", c.allocs, c.peak, drift_graph_count(g));
    assert_true(c.peak < c.allocs / 4); /* intermediates are freed after their last use */
    /* and the values are those of the plain backend */
    run(f, g, f->cpu, f->buf_cpu, NULL, &r0);
    assert_memory_equal(r0.f32, r1.f32, (size_t)r0.numel * sizeof(float));

    /* a failing site callback stops the run; nothing leaks */
    recording rec = {0};
    in.on_site = record_cb;
    in.user = &rec;
    rec.stop = 1;
    rec.stop_at = 9;
    drift_err_clear(&err);
    drift_exec_result r2;
    assert_int_equal(drift_exec_run(g, &c.be, &in, &r2, &err), DRIFT_E_CHECK);
    assert_non_null(strstr(err.msg, "stopped by the test"));
    assert_int_equal(c.live, 0);
    assert_null(r2.f32);
    assert_int_equal(rec.n, 9);
    recording_free(&rec);
    drift_exec_result_free(&r0);
    drift_exec_result_free(&r1);
    drift_graph_free(g);
    drift_plan_free(&plan);
    fx_free(f);
}

/* ---- errors --------------------------------------------------------------------------- */

static void test_exec_errors(void **state) {
    (void)state;
    fixture *f = fx_new("tiny-dit:layers=1");
    drift_err err;
    drift_exec_result r;
    drift_exec_inputs in = {f->params, f->buf_cpu, f->inputs, NULL, NULL, NULL, NULL, NULL};

    /* a semantic graph is refused */
    drift_err_clear(&err);
    assert_int_equal(drift_exec_run(f->sem, f->cpu, &in, &r, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "drift_assign_dtypes"));

    drift_plan plan;
    drift_plan_init(&plan);
    drift_graph *g = assign(f, &plan, DRIFT_SIDE_TRAINER);

    /* a missing parameter is named */
    drift_hostset *few = NULL;
    OK(drift_hostset_create(&few, &err), &err);
    in.params = few;
    drift_err_clear(&err);
    assert_int_equal(drift_exec_run(g, f->cpu, &in, &r, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "patch_embedding.weight"));
    in.params = f->params;

    /* an input in another dtype than the assignment was told */
    drift_hostset *bfin = NULL;
    OK(drift_hostset_create(&bfin, &err), &err);
    for (size_t i = 0; i < drift_hostset_count(f->inputs); i++) {
        const drift_host_tensor *t = drift_hostset_at(f->inputs, i);
        OK(drift_hostset_add(bfin, t->name, strcmp(t->name, "cond") ? DRIFT_F32 : DRIFT_BF16, t->ndim, t->shape, t->f32,
                             NULL, NULL, &err),
           &err);
    }
    in.inputs = bfin;
    drift_err_clear(&err);
    assert_int_equal(drift_exec_run(g, f->cpu, &in, &r, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "cond"));
    assert_non_null(strstr(err.msg, "bf16"));
    /* ...and accepted once assigned for bf16 cond */
    drift_assign_opts o;
    drift_assign_opts_init(&o);
    o.handed_over[DRIFT_INPUT_COND] = DRIFT_BF16;
    drift_graph *g2 = NULL;
    OK(drift_assign_dtypes(f->sem, &plan, NULL, NULL, &o, &g2, &err), &err);
    OK(drift_exec_run(g2, f->cpu, &in, &r, &err), &err);
    drift_exec_result_free(&r);
    in.inputs = f->inputs;

    /* a buffer of the wrong shape */
    drift_hostset *bad = NULL;
    OK(drift_hostset_create(&bad, &err), &err);
    float z[4] = {0};
    int64_t s2[2] = {2, 2};
    OK(drift_hostset_add(bad, DRIFT_WAN_ROPE_COS, DRIFT_F32, 2, s2, z, NULL, NULL, &err), &err);
    OK(drift_hostset_add(bad, DRIFT_WAN_ROPE_SIN, DRIFT_F32, 2, s2, z, NULL, NULL, &err), &err);
    in.buffers = bad;
    drift_err_clear(&err);
    assert_int_equal(drift_exec_run(g, f->cpu, &in, &r, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, DRIFT_WAN_ROPE_COS));

    /* hostset: duplicates and bad shapes are refused */
    drift_err_clear(&err);
    assert_int_equal(drift_hostset_add(bad, DRIFT_WAN_ROPE_COS, DRIFT_F32, 2, s2, z, NULL, NULL, &err), DRIFT_E_INPUT);
    int64_t s0[1] = {0};
    assert_int_equal(drift_hostset_add(bad, "zero", DRIFT_F32, 1, s0, z, NULL, NULL, &err), DRIFT_E_INPUT);
    /* recorded provenance builds nothing */
    drift_err_clear(&err);
    assert_int_equal(drift_params_build_rope(&f->cfg, DRIFT_BUF_RECORDED, bad, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "recorded"));

    drift_hostset_free(few);
    drift_hostset_free(bfin);
    drift_hostset_free(bad);
    drift_graph_free(g);
    drift_graph_free(g2);
    drift_plan_free(&plan);
    fx_free(f);
}

/* Seeded init: deterministic, per-name streams, scaled by kind. */
static void test_params_init(void **state) {
    (void)state;
    fixture *f = fx_new("tiny-dit");
    drift_err err;
    drift_err_clear(&err);
    drift_hostset *again = NULL, *other = NULL;
    OK(drift_params_init_seeded(&f->table, 1234, &again, &err), &err);
    OK(drift_params_init_seeded(&f->table, 1235, &other, &err), &err);
    assert_int_equal(drift_hostset_count(again), f->table.n);
    for (size_t i = 0; i < f->table.n; i++) {
        const drift_host_tensor *a = drift_hostset_find(f->params, f->table.params[i].fqn);
        const drift_host_tensor *b = drift_hostset_find(again, f->table.params[i].fqn);
        const drift_host_tensor *c = drift_hostset_find(other, f->table.params[i].fqn);
        assert_non_null(a);
        assert_memory_equal(a->f32, b->f32, (size_t)a->numel * sizeof(float));
        assert_true(memcmp(a->f32, c->f32, (size_t)a->numel * sizeof(float)) != 0);
        double m = 0, m2 = 0;
        for (int64_t k = 0; k < a->numel; k++) {
            m += a->f32[k];
            m2 += (double)a->f32[k] * a->f32[k];
        }
        m /= (double)a->numel;
        double sd = sqrt(m2 / (double)a->numel - m * m);
        const char *fqn = a->name;
        if (strstr(fqn, "norm2.weight") || strstr(fqn, "norm_q.weight")) {
            assert_true(fabs(m - 1.0) < 0.05 && sd > 0.05 && sd < 0.15);
            /* non-trivial: rounding to bf16 changes most of them */
            int changed = 0;
            for (int64_t k = 0; k < a->numel; k++) changed += drift_round_to(a->f32[k], DRIFT_BF16) != a->f32[k];
            assert_true(changed > a->numel / 2);
        } else if (strstr(fqn, ".bias")) {
            assert_true(sd < 0.04);
        } else if (a->ndim == 2) {
            double want = 1.0 / sqrt((double)a->shape[1]);
            assert_true(sd > 0.7 * want && sd < 1.3 * want);
        }
    }
    /* a parameter's values do not depend on the other parameters */
    drift_param_table small;
    drift_param_table_init(&small);
    int64_t shp[2] = {64, 64};
    OK(drift_param_table_add(&small, "blocks.0.attn1.to_q.weight", 2, shp, -1, &err), &err);
    drift_hostset *one = NULL;
    OK(drift_params_init_seeded(&small, 1234, &one, &err), &err);
    const drift_host_tensor *x = drift_hostset_find(one, "blocks.0.attn1.to_q.weight");
    const drift_host_tensor *y = drift_hostset_find(f->params, "blocks.0.attn1.to_q.weight");
    assert_memory_equal(x->f32, y->f32, (size_t)x->numel * sizeof(float));
    drift_param_table_free(&small);
    drift_hostset_free(one);
    drift_hostset_free(again);
    drift_hostset_free(other);
    fx_free(f);
}

/* Allocation failures in assignment, host sets and execution are reported
 * as DRIFT_E_NOMEM, release every backend tensor and leak nothing. */
static void test_oom(void **state) {
    (void)state;
    fixture *f = fx_new("tiny-dit:layers=1,dim=24,heads=2,ffn_dim=32,height=4,width=4,text_len=4,text_dim=8");
    drift_plan plan;
    drift_plan_init(&plan);
    load_plan(&plan, "wan2_2.json");
    drift_err err;
    drift_err_clear(&err);
    drift_compiled_plan cp;
    memset(&cp, 0, sizeof cp);
    OK(drift_plan_compile(&plan, &f->table, &cp, &err), &err);
    drift_exec_result want;
    drift_graph *g0 = assign(f, &plan, DRIFT_SIDE_TRAINER);
    run(f, g0, f->cpu, f->buf_cpu, NULL, &want);
    counting c;
    c.be = *f->cpu;
    c.inner = f->cpu;
    c.be.alloc = cnt_alloc;
    c.be.release = cnt_release;
    c.live = c.peak = c.allocs = 0;
    long n;
    for (n = 0;; n++) {
        drift_graph *g = NULL;
        drift_hostset *bufs = NULL;
        drift_exec_result r;
        memset(&r, 0, sizeof r);
        drift_assign_opts o;
        drift_assign_opts_init(&o);
        drift_err_clear(&err);
        drift_alloc_fail_after(n);
        int rc = drift_assign_dtypes(f->sem, &plan, &cp, &f->table, &o, &g, &err);
        if (!rc) rc = drift_params_init_buffers(&f->cfg, DRIFT_BUF_CPU_FP64, &bufs, &err);
        if (!rc) {
            drift_exec_inputs in = {f->params, bufs, f->inputs, NULL, NULL, NULL, NULL, NULL};
            rc = drift_exec_run(g, &c.be, &in, &r, &err);
        }
        long hit = drift_alloc_injected();
        drift_alloc_fail_after(-1);
        assert_int_equal(c.live, 0);
        if (hit == 0) {
            assert_int_equal(rc, DRIFT_OK);
            assert_memory_equal(r.f32, want.f32, (size_t)want.numel * sizeof(float));
        } else if (rc != DRIFT_E_NOMEM) {
            fail_msg("allocation %ld failed: got code %d (%s: %s), expected DRIFT_E_NOMEM", n, rc, err.where, err.msg);
        } else {
            assert_null(r.f32);
        }
        drift_exec_result_free(&r);
        drift_graph_free(g);
        drift_hostset_free(bufs);
        if (hit == 0) break;
    }
    assert_true(n > 100);
    drift_exec_result_free(&want);
    drift_graph_free(g0);
    drift_compiled_plan_free(&cp);
    drift_plan_free(&plan);
    fx_free(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_acceptance_norm2),
        cmocka_unit_test(test_fp32_linear_override_no_change),
        cmocka_unit_test(test_rope_provenance),
        cmocka_unit_test(test_rope_table_layout),
        cmocka_unit_test(test_oracle_uses_fp64_buffers),
        cmocka_unit_test(test_refcount_release),
        cmocka_unit_test(test_exec_errors),
        cmocka_unit_test(test_params_init),
        cmocka_unit_test(test_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
