/* replay/fsdp: the FSDP2 shard + all-gather reassembly on the host, bit for
 * bit against the unsharded parameters, for world sizes 1, 2, 3, 4 and 8
 * over a local comm group (one thread and one cpu backend per worker).
 *
 * Shapes cover torch.chunk's uneven cases: d0 not a multiple of W (a short
 * last chunk), d0 < W (ranks holding only padding), 1-D, 3-D and 0-dim
 * parameters, several parameters and forward dtypes per wrap (packed
 * offsets inside one gather), parameters the forward does not read, and a
 * cast-free parameter (the gathered value is the leaf itself).
 *
 * Each world size runs on three backends: the cpu backend (every alias
 * granted: the one-copy path), a cpu backend whose alias declines offsets
 * that are not a multiple of 16 bytes (as cuda's does: the copying
 * fallback for unaligned tails) and one without any alias.
 *
 * The gathered values are read back through the executor: each parameter's
 * forward value is a recorded site, and the workers run with their fsdp
 * cache and masters overwritten by a constant, so any value not taken from
 * the cache would show. A tiny-dit forward from FSDP-gathered parameters
 * equals the unsharded forward bit for bit. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/backend.h"
#include "kernels/backend_impl.h" /* white-box: wraps a backend's function table */
#include "replay/dist/comm.h"
#include "replay/exec/exec.h"
#include "replay/exec/forward.h"
#include "replay/dist/fsdp.h"
#include "replay/ir/graph.h"
#include "replay/exec/params_init.h"

#define OK(call, errp)                                                                                   \
    do {                                                                                                 \
        int rc_ = (call);                                                                                \
        if (rc_ != DRIFT_OK) fail_msg("%s failed (%d): %s: %s", #call, rc_, (errp)->where, (errp)->msg); \
    } while (0)

#define MAXW 8
#define MAXP 16

/* ---- backends: cpu, cpu with cuda's alias alignment, cpu without alias ------ */

enum { BE_CPU = 0, BE_ALIGNED16 = 1, BE_NOALIAS = 2, BE_COUNT };
static const char *BE_NAME[BE_COUNT] = {"cpu", "cpu (alias 16-byte aligned only)", "cpu (no alias)"};

typedef int (*alias_fn)(const drift_backend *, const drift_tensor *, int64_t, drift_tensor *, drift_err *);
static alias_fn real_alias;

/* Declines as cuda_alias does, counting the logical dtype's bytes. */
static int aligned16_alias(const drift_backend *be, const drift_tensor *base, int64_t off, drift_tensor *out,
                           drift_err *err) {
    if ((off * (int64_t)drift_dtype_size(base->dtype)) % 16 != 0)
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, "test", "alias: offset %lld not 16-byte aligned", (long long)off);
    return real_alias(be, base, off, out, err);
}

typedef struct wbe {
    drift_backend *real; /* owned */
    drift_backend view;  /* the real one's functions (tensors name &view as their backend) */
} wbe;

static void wbe_create(wbe *w, int kind) {
    drift_err e;
    OK(drift_backend_create("cpu", &w->real, &e), &e);
    assert_non_null(w->real->alias);
    real_alias = w->real->alias;
    w->view = *w->real;
    if (kind == BE_ALIGNED16) w->view.alias = aligned16_alias;
    if (kind == BE_NOALIAS) w->view.alias = NULL;
}

/* ---- a hand-made model: parameter table, masters, assigned graph ----------- */

typedef struct pspec {
    const char *fqn;
    int ndim;
    int64_t shape[3];
    drift_dtype fwd;   /* forward dtype (master fp32 unless the case says otherwise) */
    int in_graph;      /* 0: in the table only (the forward does not read it) */
} pspec;

static const pspec PARAMS[] = {
    {"blocks.0.w", 2, {5, 3}, DRIFT_BF16, 1},       /* short last chunk for W = 2, 3, 4 */
    {"blocks.0.b", 1, {5}, DRIFT_BF16, 1},
    {"blocks.0.n", 2, {7, 2}, DRIFT_F32, 1},        /* second gather of the wrap */
    {"blocks.0.unused", 2, {4, 4}, DRIFT_BF16, 0},
    {"blocks.1.t", 3, {1, 6, 4}, DRIFT_F16, 1},     /* d0 = 1 < W: the other ranks hold padding */
    {"blocks.1.e", 2, {16, 4}, DRIFT_BF16, 1},      /* even for W = 1, 2, 4, 8 */
    {"blocks.1.o", 2, {3, 5}, DRIFT_BF16, 1},       /* d0 = 3 < W for W = 4, 8 */
    {"blocks.1.q", 2, {11, 1}, DRIFT_BF16, 1},      /* inner 1: unaligned tails */
    {"proj.w", 3, {9, 3, 2}, DRIFT_BF16, 1},
    {"proj.b", 1, {2}, DRIFT_F32, 1},
    {"gain", 0, {0}, DRIFT_BF16, 1},                /* 0-dim */
    {"scale", 1, {1}, DRIFT_F16, 1},
};
#define NPARAMS ((int)(sizeof PARAMS / sizeof PARAMS[0]))

typedef struct tmodel {
    drift_model m;        /* table + params only */
    drift_forward f;      /* assigned only */
    drift_hostset *poison;/* the same tensors, every value 3.0 */
    int site_of[MAXP];    /* param index -> site index, -1 if not in the graph */
    int nsites;
} tmodel;

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void tmodel_build(tmodel *t, drift_dtype master) {
    drift_err e;
    memset(t, 0, sizeof *t);
    drift_param_table_init(&t->m.table);
    int wi;
    OK(drift_param_table_add_wrap(&t->m.table, "blocks.0", &wi, &e), &e);
    OK(drift_param_table_add_wrap(&t->m.table, "blocks.1", &wi, &e), &e);
    OK(drift_hostset_create(&t->m.params, &e), &e);
    OK(drift_hostset_create(&t->poison, &e), &e);
    OK(drift_graph_create(1, &t->f.assigned, &e), &e);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < NPARAMS; i++) {
        const pspec *p = &PARAMS[i];
        OK(drift_param_table_add(&t->m.table, p->fqn, p->ndim, p->shape, DRIFT_PARAM_WRAP_AUTO, &e), &e);
        int64_t n = drift_shape_numel(p->ndim, p->shape);
        float *v = malloc((size_t)n * sizeof *v), *z = malloc((size_t)n * sizeof *z);
        assert_non_null(v);
        assert_non_null(z);
        for (int64_t k = 0; k < n; k++) {
            /* distinct values with random low mantissa bits (so rounding matters), signed zeros, a subnormal */
            uint64_t r = rng_next(&s);
            v[k] = (float)((int64_t)(r % 20001) - 10000) / 997.0f + (float)(r >> 40) * 1e-9f;
            if (k % 7 == 3) v[k] = -0.0f;
            if (k % 11 == 5) v[k] = 1e-39f;
            z[k] = 3.0f;
        }
        OK(drift_hostset_add(t->m.params, p->fqn, DRIFT_F32, p->ndim, p->shape, v, NULL, NULL, &e), &e);
        OK(drift_hostset_add(t->poison, p->fqn, DRIFT_F32, p->ndim, p->shape, z, NULL, NULL, &e), &e);
        free(v);
        free(z);
    }
    /* the graph reads the parameters in reverse table order: leaf, then its FSDP cast */
    for (int i = 0; i < MAXP; i++) t->site_of[i] = -1;
    for (int i = NPARAMS - 1; i >= 0; i--) {
        const pspec *p = &PARAMS[i];
        if (!p->in_graph) continue;
        int leaf, id;
        OK(drift_graph_add_leaf(t->f.assigned, DRIFT_VAL_PARAM, p->fqn, master, p->ndim, p->shape, &leaf, &e), &e);
        id = leaf;
        if (p->fwd != master) {
            drift_node_spec ns;
            drift_node_spec_init(&ns, DRIFT_OP_CAST);
            ns.op.n_in = 1;
            ns.op.compute = p->fwd;
            ns.op.out = p->fwd;
            ns.in[0] = leaf;
            ns.rule = DRIFT_RULE_CAST_TO;
            ns.rule_dtype = p->fwd;
            ns.origin = DRIFT_ORIGIN_PARAM_CAST;
            ns.sem_id = -1;
            OK(drift_graph_add_node(t->f.assigned, &ns, &id, &e), &e);
        }
        char site[64];
        snprintf(site, sizeof site, "p%d:param", i);
        OK(drift_graph_set_site(t->f.assigned, id, site, &e), &e);
        t->site_of[i] = t->nsites++;
    }
}

static void tmodel_free(tmodel *t) {
    drift_param_table_free(&t->m.table);
    drift_hostset_free(t->m.params);
    drift_hostset_free(t->poison);
    drift_graph_free(t->f.assigned);
}

/* ---- reading the forward values back ---------------------------------------- */

typedef struct got {
    int n;
    char name[MAXP][64];
    drift_dtype dt[MAXP];
    int ndim[MAXP];
    int64_t shape[MAXP][DRIFT_MAX_DIMS];
    int64_t numel[MAXP];
    float *v[MAXP];
} got;

static int collect(const char *site, const drift_tensor *t, void *user, drift_err *err) {
    got *g = user;
    if (g->n == MAXP) return drift_err_set(err, DRIFT_E_INTERNAL, "test", "too many sites");
    int k = g->n++;
    snprintf(g->name[k], sizeof g->name[k], "%s", site);
    g->dt[k] = t->dtype;
    g->ndim[k] = t->ndim;
    memcpy(g->shape[k], t->shape, sizeof g->shape[k]);
    g->numel[k] = t->numel;
    g->v[k] = malloc((size_t)(t->numel ? t->numel : 1) * sizeof(float));
    if (!g->v[k]) return drift_err_set(err, DRIFT_E_NOMEM, "test", "out of memory");
    return drift_backend_download_f32(t->be, t, g->v[k], err);
}

static void got_free(got *g) {
    for (int k = 0; k < g->n; k++) free(g->v[k]);
    memset(g, 0, sizeof *g);
}

/* Widened to fp32 (exact for fp32, bf16, fp16): equal floats are equal bits. */
static void same_bits(const got *want, const got *have, const char *what) {
    assert_int_equal(have->n, want->n);
    for (int k = 0; k < want->n; k++) {
        if (strcmp(want->name[k], have->name[k]) != 0) fail_msg("%s: site %d is %s, not %s", what, k, have->name[k], want->name[k]);
        assert_int_equal(have->dt[k], want->dt[k]);
        assert_int_equal(have->ndim[k], want->ndim[k]);
        assert_memory_equal(have->shape[k], want->shape[k], sizeof want->shape[k]);
        assert_int_equal(have->numel[k], want->numel[k]);
        if (memcmp(have->v[k], want->v[k], (size_t)want->numel[k] * sizeof(float)) != 0) {
            int64_t i = 0;
            while (memcmp(&have->v[k][i], &want->v[k][i], sizeof(float)) == 0) i++;
            fail_msg("%s: %s differs at element %lld: %a, unsharded %a", what, want->name[k], (long long)i,
                     (double)have->v[k][i], (double)want->v[k][i]);
        }
    }
}

/* ---- workers -------------------------------------------------------------------- */

typedef struct worker {
    tmodel *t;
    drift_comm *comm;
    const drift_backend *be;
    drift_fsdp_stats st;
    got out;
    int rc;
    drift_err err;
} worker;

static void *worker_main(void *arg) {
    worker *w = arg;
    drift_exec_cache *cache = NULL;
    w->rc = drift_exec_cache_create(w->be, &cache, &w->err);
    if (!w->rc) w->rc = drift_fsdp_gather(&w->t->m, &w->t->f, w->be, cache, w->comm, &w->st, &w->err);
    if (!w->rc) {
        /* poisoned masters: only the cached gathered values can give the right bits */
        drift_exec_inputs in = {.params = w->t->poison, .on_site = collect, .user = &w->out, .cache = cache};
        w->rc = drift_exec_run(w->t->f.assigned, w->be, &in, NULL, &w->err);
    }
    drift_exec_cache_free(cache);
    return NULL;
}

/* Wraps x forward dtypes read by the graph: blocks.0 {bf16, fp32}, blocks.1
 * {fp16, bf16}, root {bf16, fp32, fp16}. */
#define GROUPS 7

static void check_world(tmodel *t, const got *want, int W, int kind) {
    drift_err e;
    drift_comm *c[MAXW];
    wbe be[MAXW];
    worker w[MAXW];
    pthread_t th[MAXW];
    OK(drift_comm_local_group(W, c, &e), &e);
    for (int r = 0; r < W; r++) {
        wbe_create(&be[r], kind);
        memset(&w[r], 0, sizeof w[r]);
        w[r].t = t;
        w[r].comm = c[r];
        w[r].be = &be[r].view;
        assert_int_equal(pthread_create(&th[r], NULL, worker_main, &w[r]), 0);
    }
    for (int r = 0; r < W; r++) pthread_join(th[r], NULL);
    char what[128];
    for (int r = 0; r < W; r++) {
        snprintf(what, sizeof what, "W=%d rank %d on %s", W, r, BE_NAME[kind]);
        if (w[r].rc) fail_msg("%s: %s: %s", what, w[r].err.where, w[r].err.msg);
        same_bits(want, &w[r].out, what);
        assert_int_equal(w[r].st.params, t->nsites);
        assert_int_equal(w[r].st.collectives, GROUPS);
        assert_true(w[r].st.gathered_bytes == w[r].st.shard_bytes * W);
        got_free(&w[r].out);
    }
    for (int r = 0; r < W; r++) {
        drift_comm_free(c[r]);
        drift_backend_free(be[r].real);
    }
}

static void run_worlds(drift_dtype master) {
    tmodel t;
    tmodel_build(&t, master);
    assert_true(NPARAMS <= MAXP);
    /* the unsharded forward values: masters uploaded and cast, no fsdp */
    drift_err e;
    drift_backend *be = NULL;
    OK(drift_backend_create("cpu", &be, &e), &e);
    got want;
    memset(&want, 0, sizeof want);
    drift_exec_inputs in = {.params = t.m.params, .on_site = collect, .user = &want};
    OK(drift_exec_run(t.f.assigned, be, &in, NULL, &e), &e);
    assert_int_equal(want.n, t.nsites);
    static const int WS[] = {1, 2, 3, 4, 8};
    for (size_t i = 0; i < sizeof WS / sizeof WS[0]; i++)
        for (int kind = 0; kind < BE_COUNT; kind++) check_world(&t, &want, WS[i], kind);
    got_free(&want);
    drift_backend_free(be);
    tmodel_free(&t);
}

static void test_reassembly_fp32_masters(void **state) {
    (void)state;
    run_worlds(DRIFT_F32);
}

/* bf16 masters: the fp32 parameters' leaves are bf16 now (their "cast" to
 * fp32 widens); every parameter still gathers to the unsharded bits. */
static void test_reassembly_bf16_masters(void **state) {
    (void)state;
    run_worlds(DRIFT_BF16);
}

/* ---- a real model ------------------------------------------------------------------ */

typedef struct dit_worker {
    drift_model *m;
    const drift_forward *f;
    const drift_hostset *poison, *bufs, *inputs;
    drift_comm *comm;
    const drift_backend *be;
    drift_exec_result out;
    int rc;
    drift_err err;
} dit_worker;

static void *dit_main(void *arg) {
    dit_worker *w = arg;
    drift_exec_cache *cache = NULL;
    w->rc = drift_exec_cache_create(w->be, &cache, &w->err);
    if (!w->rc) w->rc = drift_fsdp_gather(w->m, w->f, w->be, cache, w->comm, NULL, &w->err);
    if (!w->rc) {
        drift_exec_inputs in = {.params = w->poison, .buffers = w->bufs, .inputs = w->inputs, .cache = cache};
        w->rc = drift_exec_run(w->f->assigned, w->be, &in, &w->out, &w->err);
    }
    drift_exec_cache_free(cache);
    return NULL;
}

/* tiny-dit, norm2 in fp32 and the rest bf16 (two forward dtypes per wrap):
 * the noise prediction from gathered parameters equals the unsharded one. */
static void test_tiny_dit_forward_equal(void **state) {
    (void)state;
    drift_err e;
    drift_model *m = NULL;
    OK(drift_model_create("tiny-dit", &m, &e), &e);
    OK(drift_model_seed_params(m, 7, &e), &e);
    drift_plan plan;
    drift_plan_init(&plan);
    OK(drift_plan_apply_flag(&plan, "--param-dtype", "*.norm2.*=fp32", &e), &e);
    drift_forward *f = NULL;
    OK(drift_forward_prepare(m, &plan, DRIFT_SIDE_TRAINER, NULL, &f, &e), &e);
    drift_hostset *in = NULL, *poison = NULL;
    OK(drift_params_init_inputs(&m->cfg, 3, &in, &e), &e);
    const drift_hostset *bufs = NULL;
    OK(drift_model_buffers(m, f->rope, &bufs, &e), &e);
    OK(drift_hostset_create(&poison, &e), &e);
    for (size_t i = 0; i < drift_hostset_count(m->params); i++) {
        const drift_host_tensor *h = drift_hostset_at(m->params, i);
        float *z = malloc((size_t)h->numel * sizeof *z);
        assert_non_null(z);
        for (int64_t k = 0; k < h->numel; k++) z[k] = 0.25f;
        OK(drift_hostset_add(poison, h->name, h->dtype, h->ndim, h->shape, z, NULL, NULL, &e), &e);
        free(z);
    }
    drift_backend *be = NULL;
    OK(drift_backend_create("cpu", &be, &e), &e);
    drift_exec_result want;
    memset(&want, 0, sizeof want);
    OK(drift_forward_run(f, m, be, in, NULL, NULL, &want, &e), &e);
    static const int WS[] = {3, 8};
    for (size_t i = 0; i < sizeof WS / sizeof WS[0]; i++) {
        int W = WS[i];
        drift_comm *c[MAXW];
        wbe wb[MAXW];
        dit_worker w[MAXW];
        pthread_t th[MAXW];
        OK(drift_comm_local_group(W, c, &e), &e);
        for (int r = 0; r < W; r++) {
            wbe_create(&wb[r], r % 2 ? BE_ALIGNED16 : BE_CPU);
            memset(&w[r], 0, sizeof w[r]);
            w[r].m = m;
            w[r].f = f;
            w[r].poison = poison;
            w[r].bufs = bufs;
            w[r].inputs = in;
            w[r].comm = c[r];
            w[r].be = &wb[r].view;
            assert_int_equal(pthread_create(&th[r], NULL, dit_main, &w[r]), 0);
        }
        for (int r = 0; r < W; r++) pthread_join(th[r], NULL);
        for (int r = 0; r < W; r++) {
            if (w[r].rc) fail_msg("W=%d rank %d: %s: %s", W, r, w[r].err.where, w[r].err.msg);
            assert_int_equal(w[r].out.numel, want.numel);
            assert_memory_equal(w[r].out.f32, want.f32, (size_t)want.numel * sizeof(float));
            drift_exec_result_free(&w[r].out);
            drift_comm_free(c[r]);
            drift_backend_free(wb[r].real);
        }
    }
    drift_exec_result_free(&want);
    drift_backend_free(be);
    drift_hostset_free(poison);
    drift_hostset_free(in);
    drift_forward_free(f);
    drift_model_free(m);
    drift_plan_free(&plan);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reassembly_fp32_masters),
        cmocka_unit_test(test_reassembly_bf16_masters),
        cmocka_unit_test(test_tiny_dit_forward_equal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
