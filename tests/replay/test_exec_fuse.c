/* Tests of the executor's aliases (VIEW / contiguous NARROW share storage)
 * and cast folding (replay/ir/fuse.h) on the cpu and ref backends.
 *
 * The contract is bitwise: with aliasing and folding on, the output and every
 * recorded site are bit-for-bit those of a run with both off, for tiny-dit and
 * a small wan2.2, under the wan2_2 (bf16 + norm2 fp32), all-fp32 and fp16
 * plans. Counters prove the rewrites really happen (a silently disabled pass
 * fails), a tracking backend proves that no alias is ever released, that no
 * base is released while an alias lives (released memory is poisoned with
 * NaN first), and that nothing leaks, with and without a device cache. */
#include <math.h>
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
#include "kernels/backend_impl.h" /* white-box: wraps a backend's function table */
#include "kernels/backend.h"
#include "replay/exec/exec.h"
#include "replay/exec/forward.h"
#include "replay/ir/fuse.h"
#include "replay/ir/graph.h"
#include "replay/exec/params_init.h"
#include "site_recording.h"

#define OK(call, errp)                                                                                   \
    do {                                                                                                 \
        int rc_ = (call);                                                                                \
        if (rc_ != DRIFT_OK) fail_msg("%s failed (%d): %s: %s", #call, rc_, (errp)->where, (errp)->msg); \
    } while (0)

/* not tiny-dit's shape: 3 blocks, a wider head, 2 latent frames */
#define WAN_SMALL                                                                                                 \
    "wan2.2:layers=3,dim=96,heads=4,ffn_dim=160,frames=2,height=8,width=8,text_len=12,text_dim=48,in_channels=4," \
    "out_channels=4,freq_dim=32"

/* ---- a tracking backend: every allocation known, releases checked and poisoned ---- */

typedef struct tracked {
    drift_backend be; /* first: callbacks receive &tracked.be */
    const drift_backend *inner;
    size_t elem;      /* storage element size (cpu 4, ref 8) */
    void **ptrs;
    int np, cap;
    long allocs, peak, bad_release;
} tracked;

static int tr_alloc(const drift_backend *be, drift_tensor *t, drift_err *err) {
    tracked *tr = (tracked *)be;
    int rc = tr->inner->alloc(be, t, err);
    if (rc) return rc;
    if (tr->np == tr->cap) {
        tr->cap = tr->cap ? tr->cap * 2 : 256;
        tr->ptrs = realloc(tr->ptrs, (size_t)tr->cap * sizeof *tr->ptrs);
        assert_non_null(tr->ptrs);
    }
    tr->ptrs[tr->np++] = t->data;
    tr->allocs++;
    if (tr->np > tr->peak) tr->peak = tr->np;
    return DRIFT_OK;
}

static void tr_release(const drift_backend *be, drift_tensor *t) {
    tracked *tr = (tracked *)be;
    if (!t || !t->data) return;
    for (int i = 0; i < tr->np; i++) {
        if (tr->ptrs[i] != t->data) continue;
        /* poison: a use after release shows up as NaN in the results */
        if (tr->elem == sizeof(double))
            for (int64_t k = 0; k < t->numel; k++) ((double *)t->data)[k] = NAN;
        else
            for (int64_t k = 0; k < t->numel; k++) ((float *)t->data)[k] = NAN;
        tr->ptrs[i] = tr->ptrs[--tr->np];
        tr->inner->release(be, t);
        return;
    }
    tr->bad_release++; /* an alias, or a double release: never free it */
    t->data = NULL;
}

static void tr_init(tracked *tr, const drift_backend *inner) {
    memset(tr, 0, sizeof *tr);
    tr->be = *inner;
    tr->inner = inner;
    tr->elem = strcmp(inner->name, "ref") == 0 ? sizeof(double) : sizeof(float);
    tr->be.alloc = tr_alloc;
    tr->be.release = tr_release;
}

static void tr_free(tracked *tr) {
    free(tr->ptrs);
    tr->ptrs = NULL;
}

/* ---- recorded sites ---------------------------------------------------------- */

/* rec_site, recording, record_cb, recording_free, find_rec: tests/site_recording.h */

static void assert_same_recording(const recording *a, const recording *b, const char *what) {
    if (a->n != b->n) fail_msg("%s: %d vs %d sites", what, a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        const rec_site *x = &a->s[i], *y = &b->s[i];
        if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->numel != y->numel)
            fail_msg("%s: site %d: %s %s %lld vs %s %s %lld", what, i, x->name, drift_dtype_name(x->dtype),
                     (long long)x->numel, y->name, drift_dtype_name(y->dtype), (long long)y->numel);
        if (memcmp(x->v, y->v, (size_t)x->numel * sizeof(float)) || memcmp(x->v64, y->v64, (size_t)x->numel * sizeof(double)))
            fail_msg("%s: site %s differs bitwise", what, x->name);
    }
}

static void assert_same_result(const drift_exec_result *a, const drift_exec_result *b, const char *what) {
    if (a->dtype != b->dtype || a->numel != b->numel || a->ndim != b->ndim)
        fail_msg("%s: output %s[%lld] vs %s[%lld]", what, drift_dtype_name(a->dtype), (long long)a->numel,
                 drift_dtype_name(b->dtype), (long long)b->numel);
    if (memcmp(a->f32, b->f32, (size_t)a->numel * sizeof(float)) || memcmp(a->f64, b->f64, (size_t)a->numel * sizeof(double)))
        fail_msg("%s: outputs differ bitwise", what);
    for (int64_t i = 0; i < a->numel; i++)
        if (isnan(a->f32[i])) fail_msg("%s: NaN in the output at %lld (poisoned memory read?)", what, (long long)i);
}

/* ---- a model under a plan ------------------------------------------------------ */

typedef enum plan_kind { PLAN_WAN22 = 0, PLAN_FP32, PLAN_FP16, PLAN_COUNT } plan_kind;
static const char *const plan_names[PLAN_COUNT] = {"wan2_2", "fp32", "fp16"};

typedef struct mctx {
    drift_model *m;
    drift_forward *f;
    drift_hostset *inputs;
    const drift_hostset *bufs;
} mctx;

static void make_plan(drift_plan *p, plan_kind k) {
    drift_err err;
    drift_err_clear(&err);
    drift_plan_init(p);
    if (k == PLAN_WAN22) {
        char path[1024];
        const char *dir = getenv("DRIFT_TESTDATA");
        snprintf(path, sizeof path, "%s/plans/wan2_2.json", dir ? dir : "tests/data");
        OK(drift_plan_load_file(p, path, &err), &err);
    } else {
        const char *dt = k == PLAN_FP32 ? "fp32" : "fp16";
        OK(drift_plan_apply_flag(p, "--diffusion-forward-dtype", dt, &err), &err);
        OK(drift_plan_apply_flag(p, "--sglang-dit-precision", dt, &err), &err);
    }
}

static void mctx_open(mctx *c, const char *spec, plan_kind k) {
    drift_err err;
    drift_err_clear(&err);
    memset(c, 0, sizeof *c);
    OK(drift_model_create(spec, &c->m, &err), &err);
    OK(drift_model_seed_params(c->m, 7, &err), &err);
    OK(drift_params_init_inputs(&c->m->cfg, 3, &c->inputs, &err), &err);
    drift_plan plan;
    make_plan(&plan, k);
    OK(drift_forward_prepare(c->m, &plan, DRIFT_SIDE_TRAINER, NULL, &c->f, &err), &err);
    drift_plan_free(&plan);
    OK(drift_model_buffers(c->m, c->f->rope, &c->bufs, &err), &err);
}

static void mctx_close(mctx *c) {
    drift_forward_free(c->f);
    drift_hostset_free(c->inputs);
    drift_model_free(c->m);
    memset(c, 0, sizeof *c);
}

/* One run: alias/fuse switches explicit; rec NULL = no site callback. */
static void run_model(const mctx *c, const drift_backend *be, int alias, int fuse, drift_exec_cache *cache,
                      recording *rec, drift_exec_result *res, drift_exec_stats *st) {
    drift_err err;
    drift_err_clear(&err);
    drift_exec_inputs in = {.params = c->m->params, .buffers = c->bufs, .inputs = c->inputs,
                            .on_site = rec ? record_cb : NULL, .user = rec, .cache = cache};
    drift_exec_options o = {.alias = alias, .fuse_casts = fuse, .stats = st};
    OK(drift_exec_run_ex(c->f->assigned, be, &in, &o, res, &err), &err);
}

static void check_accounting(const drift_exec_stats *off, const drift_exec_stats *on) {
    /* every live node is a kernel or one kind of alias, in both runs */
    int64_t a = off->kernels + off->identity_casts + off->views_aliased + off->narrows_aliased + off->casts_skipped +
                off->casts_folded;
    int64_t b = on->kernels + on->identity_casts + on->views_aliased + on->narrows_aliased + on->casts_skipped +
                on->casts_folded;
    assert_int_equal(a, b);
    assert_int_equal(off->views_aliased + off->narrows_aliased + off->casts_skipped + off->casts_folded, 0);
}

/* on vs off, with and without sites, for one model/plan/backend */
static void compare_one(const char *spec, plan_kind k, const drift_backend *inner) {
    mctx c;
    mctx_open(&c, spec, k);
    tracked tr;
    tr_init(&tr, inner);
    const drift_backend *be = &tr.be;
    int layers = c.m->cfg.layers;

    recording r_off = {0}, r_on = {0}, r_al = {0}, r_fu = {0};
    drift_exec_result o_off, o_on, o_al, o_fu, o_nosite_off, o_nosite_on;
    drift_exec_stats s_off, s_on, s_al, s_fu, s_ns_off, s_ns_on;
    run_model(&c, be, 0, 0, NULL, &r_off, &o_off, &s_off);
    run_model(&c, be, 1, 1, NULL, &r_on, &o_on, &s_on);
    run_model(&c, be, 1, 0, NULL, &r_al, &o_al, &s_al);
    run_model(&c, be, 0, 1, NULL, &r_fu, &o_fu, &s_fu);
    run_model(&c, be, 0, 0, NULL, NULL, &o_nosite_off, &s_ns_off);
    run_model(&c, be, 1, 1, NULL, NULL, &o_nosite_on, &s_ns_on);
    char what[256];
    snprintf(what, sizeof what, "%s / %s / %s", spec, plan_names[k], inner->name);
    print_message("%s: kernels %lld -> %lld (sites) / %lld -> %lld (output only); views %lld narrows %lld skipped %lld "
                  "folded %lld (sites) / skipped %lld folded %lld (output only)\n",
                  what, (long long)s_off.kernels, (long long)s_on.kernels, (long long)s_ns_off.kernels,
                  (long long)s_ns_on.kernels, (long long)s_on.views_aliased, (long long)s_on.narrows_aliased,
                  (long long)s_on.casts_skipped, (long long)s_on.casts_folded, (long long)s_ns_on.casts_skipped,
                  (long long)s_ns_on.casts_folded);
    assert_true(r_off.n > 5);
    assert_same_recording(&r_off, &r_on, what);
    assert_same_recording(&r_off, &r_al, what);
    assert_same_recording(&r_off, &r_fu, what);
    assert_same_result(&o_off, &o_on, what);
    assert_same_result(&o_off, &o_al, what);
    assert_same_result(&o_off, &o_fu, what);
    assert_same_result(&o_off, &o_nosite_off, what);
    assert_same_result(&o_off, &o_nosite_on, what);
    check_accounting(&s_off, &s_on);
    check_accounting(&s_ns_off, &s_ns_on);

    /* the rewrites happen: every block has views (q/k/v per head) and six contiguous narrows (batch 1) */
    assert_true(s_on.views_aliased >= 3 * layers);
    assert_true(s_on.narrows_aliased >= 6 * layers);
    assert_int_equal(s_al.casts_skipped + s_al.casts_folded, 0);
    assert_int_equal(s_fu.views_aliased + s_fu.narrows_aliased, 0);
    if (k == PLAN_FP32) {
        /* nothing narrow to fold in an fp32 forward */
        assert_int_equal(s_on.casts_skipped + s_on.casts_folded, 0);
        assert_int_equal(s_ns_on.casts_skipped + s_ns_on.casts_folded, 0);
    } else {
        /* per block at least: norm1/norm2/norm3 input widenings (x2 each), the two residual
           widenings of the attention and ffn updates and their promoted branch outputs;
           folds: the modulations of norm1/norm3 and the two residual updates */
        assert_true(s_on.casts_skipped >= 10 * layers);
        assert_true(s_on.casts_folded >= 4 * layers);
        assert_true(s_ns_on.casts_skipped >= s_on.casts_skipped);
        assert_true(s_ns_on.casts_folded >= s_on.casts_folded);
        assert_true(s_on.kernels < s_off.kernels - 14 * layers);
    }
    assert_int_equal(tr.np, 0);          /* nothing leaked */
    assert_int_equal(tr.bad_release, 0); /* no alias was ever released */

    /* the environment switches */
    setenv("DRIFT_EXEC_ALIAS", "0", 1);
    setenv("DRIFT_EXEC_FUSE_CASTS", "0", 1);
    drift_exec_result o_env;
    drift_exec_stats s_env;
    run_model(&c, be, -1, -1, NULL, NULL, &o_env, &s_env);
    assert_int_equal(s_env.views_aliased + s_env.narrows_aliased + s_env.casts_skipped + s_env.casts_folded, 0);
    assert_same_result(&o_off, &o_env, what);
    drift_exec_result_free(&o_env);
    unsetenv("DRIFT_EXEC_ALIAS");
    unsetenv("DRIFT_EXEC_FUSE_CASTS");
    run_model(&c, be, -1, -1, NULL, NULL, &o_env, &s_env); /* default: on */
    assert_int_equal(s_env.views_aliased, s_ns_on.views_aliased);
    assert_int_equal(s_env.casts_skipped, s_ns_on.casts_skipped);
    assert_same_result(&o_off, &o_env, what);
    drift_exec_result_free(&o_env);
    /* drift_exec_run (no options) follows the environment too */
    drift_err err;
    drift_err_clear(&err);
    drift_exec_inputs in = {.params = c.m->params, .buffers = c.bufs, .inputs = c.inputs};
    OK(drift_exec_run(c.f->assigned, be, &in, &o_env, &err), &err);
    assert_same_result(&o_off, &o_env, what);
    drift_exec_result_free(&o_env);

    recording_free(&r_off);
    recording_free(&r_on);
    recording_free(&r_al);
    recording_free(&r_fu);
    drift_exec_result_free(&o_off);
    drift_exec_result_free(&o_on);
    drift_exec_result_free(&o_al);
    drift_exec_result_free(&o_fu);
    drift_exec_result_free(&o_nosite_off);
    drift_exec_result_free(&o_nosite_on);
    assert_int_equal(tr.np, 0);
    tr_free(&tr);
    mctx_close(&c);
}

static drift_backend *make_backend(const char *name) {
    drift_backend *be = NULL;
    drift_err err;
    drift_err_clear(&err);
    OK(drift_backend_create(name, &be, &err), &err);
    return be;
}

static void test_on_off_bitwise(void **state) {
    (void)state;
    const char *specs[2] = {"tiny-dit", WAN_SMALL};
    const char *bes[2] = {"cpu", "ref"};
    for (int b = 0; b < 2; b++) {
        drift_backend *be = make_backend(bes[b]);
        for (int s = 0; s < 2; s++)
            for (int k = 0; k < PLAN_COUNT; k++) compare_one(specs[s], (plan_kind)k, be);
        drift_backend_free(be);
    }
}

/* With a device cache: cached runs (which reuse cached aliases of cached
 * values) equal uncached ones, whatever the switches of each run, and the
 * cache keeps alias entries without ever releasing them. */
static void test_cache(void **state) {
    (void)state;
    const char *bes[2] = {"cpu", "ref"};
    for (int b = 0; b < 2; b++) {
        drift_backend *inner = make_backend(bes[b]);
        for (int k = 0; k < PLAN_COUNT; k++) {
            mctx c;
            mctx_open(&c, WAN_SMALL, (plan_kind)k);
            tracked tr;
            tr_init(&tr, inner);
            drift_err err;
            drift_err_clear(&err);
            drift_exec_cache *cache = NULL;
            OK(drift_exec_cache_create(&tr.be, &cache, &err), &err);
            recording r0 = {0};
            drift_exec_result want;
            drift_exec_stats st;
            run_model(&c, &tr.be, 0, 0, NULL, &r0, &want, &st);
            /* switch pattern per run: (alias, fuse, sites) */
            static const int pat[6][3] = {{1, 1, 0}, {1, 1, 1}, {0, 0, 1}, {1, 1, 0}, {0, 1, 0}, {1, 0, 1}};
            for (int r = 0; r < 6; r++) {
                recording rr = {0};
                drift_exec_result got;
                run_model(&c, &tr.be, pat[r][0], pat[r][1], cache, pat[r][2] ? &rr : NULL, &got, &st);
                char what[128];
                snprintf(what, sizeof what, "cache run %d (%s, %s)", r, plan_names[k], bes[b]);
                assert_same_result(&want, &got, what);
                if (pat[r][2]) assert_same_recording(&r0, &rr, what);
                recording_free(&rr);
                drift_exec_result_free(&got);
            }
            /* the first cached run kept the fixed views as alias entries (patch_embedding.weight's view) */
            assert_true(drift_exec_cache_count(cache) > 0);
            long held = tr.np;
            assert_true(held > 0);
            drift_exec_cache_free(cache);
            assert_int_equal(tr.np, 0);
            assert_int_equal(tr.bad_release, 0);
            recording_free(&r0);
            drift_exec_result_free(&want);
            tr_free(&tr);
            mctx_close(&c);
        }
        drift_backend_free(inner);
    }
}

/* ---- hand-built graphs for the alias edge cases ------------------------------------ */

static int leaf(drift_graph *g, drift_value_kind kind, const char *name, drift_dtype dt, int ndim, const int64_t *shape) {
    drift_err err;
    drift_err_clear(&err);
    int id = -1;
    OK(drift_graph_add_leaf(g, kind, name, dt, ndim, shape, &id, &err), &err);
    return id;
}

static int node(drift_graph *g, drift_op op, int a, int b, int ndim, const int64_t *shape, const char *site) {
    drift_err err;
    drift_err_clear(&err);
    drift_node_spec s;
    drift_node_spec_init(&s, op.kind);
    s.op = op;
    s.op.n_in = b >= 0 ? 2 : 1;
    if (s.op.compute == DRIFT_DTYPE_INVALID) s.op.compute = DRIFT_F32;
    s.in[0] = a;
    s.in[1] = b;
    s.sem_id = -1;
    s.site = site;
    if (ndim > 0) {
        s.ndim = ndim;
        memcpy(s.shape, shape, (size_t)ndim * sizeof *shape);
    }
    int id = -1;
    OK(drift_graph_add_node(g, &s, &id, &err), &err);
    return id;
}

static drift_op mkop(drift_op_kind k, drift_dtype out) {
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = k;
    op.out = out;
    op.compute = DRIFT_F32;
    return op;
}

static drift_op mknarrow(drift_dtype out, int dim, int64_t start, int64_t len) {
    drift_op op = mkop(DRIFT_OP_NARROW, out);
    op.dim = dim;
    op.start = start;
    op.length = len;
    return op;
}

/* latents x [1, 4, 8] (fp32), param p [4, 8]:
 *   y  = silu(x)                          base
 *   v1 = view(y) [4, 8]                   alias
 *   v2 = narrow(v1, 0, 1, 2) [2, 8]       alias of an alias (offset 8)
 *   v3 = view(v2) [16]                    alias of an alias of an alias
 *   z  = add(y, y)                        last direct use of y: y must live on for v1..v3
 *   n0 = narrow(z, 1, 1, 2) [1, 2, 8]     contiguous (dim 0 has size 1)
 *   nb = narrow(v1, 1, 2, 4) [4, 4]       not contiguous: a copy
 *   pc = cast(p -> bf16) ; pv = view(pc) [32] ; pn = narrow(pv, 0, 8, 16)   fixed aliases (cache)
 *   w  = mul(v3, view(n0)[16]) ; u = add(w, pn) ; q = add(u, view(nb)[16])  output, site "w" */
static drift_graph *edge_graph(int batch) {
    drift_err err;
    drift_err_clear(&err);
    drift_graph *g = NULL;
    OK(drift_graph_create(1, &g, &err), &err);
    int64_t sx[3] = {batch, 4, 8}, sp[2] = {4, 8};
    int x = leaf(g, DRIFT_VAL_INPUT, "latents", DRIFT_F32, 3, sx);
    int p = leaf(g, DRIFT_VAL_PARAM, "p", DRIFT_F32, 2, sp);
    int y = node(g, mkop(DRIFT_OP_SILU, DRIFT_F32), x, -1, 0, NULL, NULL);
    int64_t s48[2] = {4 * batch, 8}, s16[1] = {16}, s32[1] = {32};
    int v1 = node(g, mkop(DRIFT_OP_VIEW, DRIFT_F32), y, -1, 2, s48, "v1");
    int v2 = node(g, mknarrow(DRIFT_F32, 0, 1, 2), v1, -1, 0, NULL, NULL);
    int v3 = node(g, mkop(DRIFT_OP_VIEW, DRIFT_F32), v2, -1, 1, s16, NULL);
    int z = node(g, mkop(DRIFT_OP_ADD, DRIFT_F32), y, y, 0, NULL, NULL);
    int n0 = node(g, mknarrow(DRIFT_F32, 1, 1, 2), z, -1, 0, NULL, NULL);
    int nb = node(g, mknarrow(DRIFT_F32, 1, 2, 4), v1, -1, 0, NULL, NULL);
    int pc = node(g, mkop(DRIFT_OP_CAST, DRIFT_BF16), p, -1, 0, NULL, NULL);
    int pv = node(g, mkop(DRIFT_OP_VIEW, DRIFT_BF16), pc, -1, 1, s32, NULL);
    int pn = node(g, mknarrow(DRIFT_BF16, 0, 8, 16), pv, -1, 0, NULL, "pn");
    int64_t s16b[1] = {16 * batch};
    int n0v = node(g, mkop(DRIFT_OP_VIEW, DRIFT_F32), n0, -1, 1, s16b, NULL);
    int w = node(g, mkop(DRIFT_OP_MUL, DRIFT_F32), v3, batch == 1 ? n0v : v3, 0, NULL, "w");
    int u = node(g, mkop(DRIFT_OP_ADD, DRIFT_F32), w, pn, 0, NULL, NULL);
    int64_t s16c[1] = {16 * batch};
    int nbv = node(g, mkop(DRIFT_OP_VIEW, DRIFT_F32), nb, -1, 1, s16c, NULL);
    int q = node(g, mkop(DRIFT_OP_ADD, DRIFT_F32), u, batch == 1 ? nbv : u, 0, NULL, "q");
    OK(drift_graph_set_output(g, q, &err), &err);
    (void)n0v;
    (void)nbv;
    return g;
}

/* The expected output of edge_graph(1), computed on the host. */
static void edge_expect(const float *x, const float *p, float *q) {
    float y[32], z[32];
    for (int i = 0; i < 32; i++) {
        y[i] = x[i] / (1.0f + expf(-x[i]));
        z[i] = y[i] + y[i];
    }
    for (int i = 0; i < 16; i++) {
        float v3 = y[8 + i];                             /* rows 1..2 of y viewed [4, 8] */
        float n0 = z[8 + i];                             /* rows 1..2 of z [1, 4, 8] along dim 1 */
        float pn = drift_round_to(p[8 + i], DRIFT_BF16); /* elements 8..23 of bf16(p) */
        float nb = y[(i / 4) * 8 + 2 + i % 4];           /* columns 2..5 of y [4, 8] */
        float w = v3 * n0;
        float u = w + pn;
        q[i] = u + nb;
    }
}

static void edge_run(const drift_graph *g, const drift_backend *be, drift_hostset *params, drift_hostset *inputs,
                     int alias, drift_exec_cache *cache, recording *rec, drift_exec_result *res, drift_exec_stats *st) {
    drift_err err;
    drift_err_clear(&err);
    drift_exec_inputs in = {.params = params, .inputs = inputs, .on_site = rec ? record_cb : NULL, .user = rec,
                            .cache = cache};
    drift_exec_options o = {.alias = alias, .fuse_casts = 1, .stats = st};
    OK(drift_exec_run_ex(g, be, &in, &o, res, &err), &err);
}

static void test_alias_edges(void **state) {
    (void)state;
    drift_err err;
    drift_err_clear(&err);
    float x[64], p[32];
    for (int i = 0; i < 64; i++) x[i] = (float)((i * 37) % 23 - 11) / 4.0f;
    for (int i = 0; i < 32; i++) p[i] = 1.0f + (float)i / 3.0f; /* not bf16-exact: the cast rounds */
    drift_hostset *params = NULL, *in1 = NULL, *in2 = NULL;
    int64_t sp[2] = {4, 8}, s1[3] = {1, 4, 8}, s2[3] = {2, 4, 8};
    OK(drift_hostset_create(&params, &err), &err);
    OK(drift_hostset_add(params, "p", DRIFT_F32, 2, sp, p, NULL, NULL, &err), &err);
    OK(drift_hostset_create(&in1, &err), &err);
    OK(drift_hostset_add(in1, "latents", DRIFT_F32, 3, s1, x, NULL, NULL, &err), &err);
    OK(drift_hostset_create(&in2, &err), &err);
    OK(drift_hostset_add(in2, "latents", DRIFT_F32, 3, s2, x, NULL, NULL, &err), &err);
    float want[16];
    edge_expect(x, p, want);
    const char *bes[2] = {"cpu", "ref"};
    for (int b = 0; b < 2; b++) {
        drift_backend *inner = make_backend(bes[b]);
        tracked tr;
        tr_init(&tr, inner);
        drift_graph *g1 = edge_graph(1), *g2 = edge_graph(2);
        drift_exec_result r_on, r_off;
        drift_exec_stats s_on, s_off;
        recording rec_on = {0}, rec_off = {0};
        edge_run(g1, &tr.be, params, in1, 1, NULL, &rec_on, &r_on, &s_on);
        edge_run(g1, &tr.be, params, in1, 0, NULL, &rec_off, &r_off, &s_off);
        assert_same_result(&r_off, &r_on, "edge graph");
        assert_same_recording(&rec_off, &rec_on, "edge graph");
        assert_int_equal(r_on.numel, 16);
        if (b == 0) /* the ref backend computes in fp64 and never rounds */
            for (int i = 0; i < 16; i++) assert_true(r_on.f32[i] == want[i]);
        /* v1, v3, pv, n0v, nbv are views; v2, n0, pn contiguous narrows; nb is not contiguous */
        assert_int_equal(s_on.views_aliased, 5);
        assert_int_equal(s_on.narrows_aliased, 3);
        assert_int_equal(s_off.views_aliased + s_off.narrows_aliased, 0);
        assert_int_equal(s_off.kernels - s_on.kernels, 8);
        /* the site "v1" (an alias) and "pn" (alias of an alias of a cast) were reported with their shapes */
        assert_int_equal(rec_on.n, 4);
        assert_string_equal(rec_on.s[0].name, "v1");
        assert_int_equal(rec_on.s[0].numel, 32);
        assert_string_equal(rec_on.s[1].name, "pn");
        assert_int_equal(rec_on.s[1].dtype, DRIFT_BF16);
        for (int i = 0; i < 16 && b == 0; i++) assert_true(rec_on.s[1].v[i] == drift_round_to(p[8 + i], DRIFT_BF16));
        assert_int_equal(tr.np, 0);
        assert_int_equal(tr.bad_release, 0);

        /* batch 2: the narrows along dim 1 are not contiguous and are copied */
        drift_exec_result r2a, r2b;
        drift_exec_stats s2a, s2b;
        edge_run(g2, &tr.be, params, in2, 1, NULL, NULL, &r2a, &s2a);
        edge_run(g2, &tr.be, params, in2, 0, NULL, NULL, &r2b, &s2b);
        assert_same_result(&r2b, &r2a, "edge graph, batch 2");
        assert_int_equal(s2a.narrows_aliased, 2); /* v2 (dim 0) and pn */
        assert_int_equal(tr.np, 0);

        /* with a cache: the fixed cast and its aliases are kept; runs reuse them */
        drift_exec_cache *cache = NULL;
        OK(drift_exec_cache_create(&tr.be, &cache, &err), &err);
        for (int r = 0; r < 4; r++) {
            drift_exec_result rc_;
            drift_exec_stats sc;
            recording rr = {0};
            edge_run(g1, &tr.be, params, in1, r != 2, cache, (r & 1) ? &rr : NULL, &rc_, &sc);
            assert_same_result(&r_off, &rc_, "edge graph, cached");
            if (r & 1) assert_same_recording(&rec_off, &rr, "edge graph, cached");
            if (r == 0) assert_int_equal(drift_exec_cache_count(cache), 4); /* p, pc, pv, pn */
            recording_free(&rr);
            drift_exec_result_free(&rc_);
        }
        assert_int_equal(tr.np, 2); /* the cache holds p's and pc's storage: pv and pn borrow pc's */
        drift_exec_cache_free(cache);
        assert_int_equal(tr.np, 0);
        assert_int_equal(tr.bad_release, 0);

        drift_exec_result_free(&r_on);
        drift_exec_result_free(&r_off);
        drift_exec_result_free(&r2a);
        drift_exec_result_free(&r2b);
        recording_free(&rec_on);
        recording_free(&rec_off);
        drift_graph_free(g1);
        drift_graph_free(g2);
        tr_free(&tr);
        drift_backend_free(inner);
    }
    drift_hostset_free(params);
    drift_hostset_free(in1);
    drift_hostset_free(in2);
}

/* ---- the fuse plan on its own -------------------------------------------------------- */

/* x (bf16 input) -> c1 = cast fp32 -> a = add(c1, c1) (fp32) -> c2 = cast bf16 -> output.
 * Also: a cast feeding an RMS_NORM is never skipped; a site blocks both rewrites. */
static void test_fuse_plan(void **state) {
    (void)state;
    drift_err err;
    drift_err_clear(&err);
    drift_graph *g = NULL;
    OK(drift_graph_create(1, &g, &err), &err);
    int64_t s[2] = {2, 8};
    int x = leaf(g, DRIFT_VAL_INPUT, "latents", DRIFT_BF16, 2, s);
    int c1 = node(g, mkop(DRIFT_OP_CAST, DRIFT_F32), x, -1, 0, NULL, NULL);
    int a = node(g, mkop(DRIFT_OP_ADD, DRIFT_F32), c1, c1, 0, NULL, "a");
    int c2 = node(g, mkop(DRIFT_OP_CAST, DRIFT_BF16), a, -1, 0, NULL, NULL);
    int c3 = node(g, mkop(DRIFT_OP_CAST, DRIFT_F32), c2, -1, 0, NULL, NULL);
    drift_op rms = mkop(DRIFT_OP_RMS_NORM, DRIFT_F32);
    rms.eps = 1e-6f;
    int rn = node(g, rms, c3, -1, 0, NULL, NULL);
    int c4 = node(g, mkop(DRIFT_OP_CAST, DRIFT_F32), x, -1, 0, NULL, "c4");
    int m = node(g, mkop(DRIFT_OP_MUL, DRIFT_F32), rn, c4, 0, NULL, NULL);
    OK(drift_graph_set_output(g, m, &err), &err);

    drift_fuse_plan p;
    OK(drift_fuse_plan_build(g, NULL, &p, &err), &err);
    assert_int_equal(p.action[c1], DRIFT_FUSE_SKIP_CAST);
    assert_int_equal(p.out[c1], DRIFT_BF16);
    assert_int_equal(p.action[c2], DRIFT_FUSE_FOLD_CAST);
    assert_int_equal(p.out[a], DRIFT_BF16);
    assert_int_equal(p.action[c3], DRIFT_FUSE_NONE); /* RMS_NORM reads its input's dtype */
    assert_int_equal(p.action[c4], DRIFT_FUSE_SKIP_CAST);
    assert_int_equal(p.action[m], DRIFT_FUSE_NONE);  /* the output keeps its dtype */
    assert_int_equal(p.skipped, 2);
    assert_int_equal(p.folded, 1);
    drift_fuse_plan_free(&p);
    /* observed sites: "a" keeps fp32, "c4" is materialised */
    drift_fuse_opts o = {.observe_sites = 1};
    OK(drift_fuse_plan_build(g, &o, &p, &err), &err);
    assert_int_equal(p.action[c1], DRIFT_FUSE_SKIP_CAST);
    assert_int_equal(p.action[c2], DRIFT_FUSE_NONE);
    assert_int_equal(p.out[a], DRIFT_F32);
    assert_int_equal(p.action[c4], DRIFT_FUSE_NONE);
    drift_fuse_plan_free(&p);
    /* fixed values (a cache): nothing that mixes fixed and per-run values */
    unsigned char fixed[16] = {0};
    fixed[x] = fixed[c1] = 1; /* pretend x is a parameter: c1 fixed, its consumer a is not */
    drift_fuse_opts of = {.fixed = fixed};
    OK(drift_fuse_plan_build(g, &of, &p, &err), &err);
    assert_int_equal(p.action[c1], DRIFT_FUSE_NONE);
    drift_fuse_plan_free(&p);
    drift_fuse_plan_free(NULL);

    /* the executor agrees with itself on cpu, output bf16 -> via c2 -> ... */
    drift_backend *cpu = make_backend("cpu");
    drift_hostset *in = NULL;
    float xv[16];
    for (int i = 0; i < 16; i++) xv[i] = drift_round_to(0.37f * (float)i - 2.9f, DRIFT_BF16);
    OK(drift_hostset_create(&in, &err), &err);
    OK(drift_hostset_add(in, "latents", DRIFT_BF16, 2, s, xv, NULL, NULL, &err), &err);
    drift_exec_inputs ei = {.inputs = in};
    drift_exec_result r0, r1;
    drift_exec_stats st0, st1;
    drift_exec_options o0 = {.alias = 1, .fuse_casts = 0, .stats = &st0}, o1 = {.alias = 1, .fuse_casts = 1, .stats = &st1};
    OK(drift_exec_run_ex(g, cpu, &ei, &o0, &r0, &err), &err);
    OK(drift_exec_run_ex(g, cpu, &ei, &o1, &r1, &err), &err);
    assert_same_result(&r0, &r1, "fuse plan graph");
    assert_int_equal(st1.casts_skipped, 2);
    assert_int_equal(st1.casts_folded, 1);
    assert_int_equal(st0.kernels - st1.kernels, 3);
    drift_exec_result_free(&r0);
    drift_exec_result_free(&r1);
    drift_hostset_free(in);
    drift_backend_free(cpu);
    drift_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fuse_plan),
        cmocka_unit_test(test_alias_edges),
        cmocka_unit_test(test_on_off_bitwise),
        cmocka_unit_test(test_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
