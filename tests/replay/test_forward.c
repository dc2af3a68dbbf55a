/* replay/forward: model + side forward, the device-residency cache, the
 * site cache. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "replay/exec/forward.h"
#include "replay/exec/params_init.h"

static drift_model *model(void) {
    drift_model *m = NULL;
    drift_err err;
    assert_int_equal(drift_model_create("tiny-dit", &m, &err), DRIFT_OK);
    assert_int_equal(drift_model_seed_params(m, 7, &err), DRIFT_OK);
    return m;
}

static void run(drift_forward *f, drift_model *m, drift_backend *be, drift_hostset *in, drift_exec_cache *c,
                drift_exec_result *out) {
    drift_err err;
    memset(out, 0, sizeof *out);
    int rc = drift_forward_run_cached(f, m, be, in, c, NULL, NULL, out, &err);
    if (rc) fail_msg("%s: %s", err.where, err.msg);
}

/* tiny-dit on the cpu backend, trainer side with the norm2 fp32 island, and
 * seeded inputs: what the cache tests share. */
typedef struct fixture {
    drift_model *m;
    drift_backend *be;
    drift_forward *f;
    drift_hostset *in;
    drift_plan plan;
} fixture;

static void fixture_open(fixture *x) {
    drift_err err;
    memset(x, 0, sizeof *x);
    x->m = model();
    drift_plan_init(&x->plan);
    assert_int_equal(drift_plan_apply_flag(&x->plan, "--param-dtype", "*.norm2.*=fp32", &err), DRIFT_OK);
    assert_int_equal(drift_backend_create("cpu", &x->be, &err), DRIFT_OK);
    assert_int_equal(drift_forward_prepare(x->m, &x->plan, DRIFT_SIDE_TRAINER, NULL, &x->f, &err), DRIFT_OK);
    assert_int_equal(drift_params_init_inputs(&x->m->cfg, 3, &x->in, &err), DRIFT_OK);
}

static void fixture_close(fixture *x) {
    drift_hostset_free(x->in);
    drift_forward_free(x->f);
    drift_backend_free(x->be);
    drift_model_free(x->m);
    drift_plan_free(&x->plan);
}

/* A copy of m's masters with `only` (or, when NULL, every one) doubled. */
static drift_hostset *doubled_masters(const drift_model *m, const char *only) {
    drift_err err;
    drift_hostset *p2 = NULL;
    assert_int_equal(drift_hostset_create(&p2, &err), DRIFT_OK);
    for (size_t i = 0; i < drift_hostset_count(m->params); i++) {
        const drift_host_tensor *t = drift_hostset_at(m->params, i);
        drift_host_tensor *added = NULL;
        assert_int_equal(drift_hostset_add(p2, t->name, t->dtype, t->ndim, t->shape, t->f32, NULL, &added, &err), DRIFT_OK);
        if (!only || strcmp(t->name, only) == 0)
            for (int64_t k = 0; k < added->numel; k++) added->f32[k] *= 2.0f;
    }
    return p2;
}

/* The cache keeps parameters (and their casts) resident: after the first
 * cached run, changing the host masters changes nothing for cached runs
 * and everything for uncached ones. */
static void test_cache_keeps_params_resident(void **state) {
    (void)state;
    drift_err err;
    fixture x;
    fixture_open(&x);
    drift_model *m = x.m;
    drift_backend *be = x.be;
    drift_forward *f = x.f;
    drift_hostset *in = x.in;
    drift_exec_cache *cache = NULL;
    assert_int_equal(drift_exec_cache_create(be, &cache, &err), DRIFT_OK);

    drift_exec_result a, b, c, d;
    run(f, m, be, in, NULL, &a);
    run(f, m, be, in, cache, &b);
    size_t held = drift_exec_cache_count(cache);
    assert_true(held > 69); /* at least every parameter master */
    run(f, m, be, in, cache, &c);
    assert_int_equal(drift_exec_cache_count(cache), held);
    assert_memory_equal(a.f32, b.f32, (size_t)a.numel * sizeof(float));
    assert_memory_equal(a.f32, c.f32, (size_t)a.numel * sizeof(float));

    /* change a master on the host: proj_out.weight doubled */
    drift_hostset *p2 = doubled_masters(m, "proj_out.weight");
    drift_hostset *orig = m->params;
    m->params = p2;
    drift_exec_result_free(&c);
    run(f, m, be, in, cache, &c); /* cached: still the old weights */
    assert_memory_equal(a.f32, c.f32, (size_t)a.numel * sizeof(float));
    run(f, m, be, in, NULL, &d);  /* uncached: the new weights show */
    assert_memory_not_equal(a.f32, d.f32, (size_t)a.numel * sizeof(float));
    /* another graph empties the cache first */
    drift_forward *g = NULL;
    assert_int_equal(drift_forward_prepare(m, &x.plan, DRIFT_SIDE_ROLLOUT, NULL, &g, &err), DRIFT_OK);
    drift_exec_result e;
    run(g, m, be, in, cache, &e);
    assert_memory_equal(d.f32, e.f32, (size_t)d.numel * sizeof(float)); /* same plan, both bf16 sides */
    m->params = orig;
    drift_hostset_free(p2);
    drift_exec_result_free(&a); drift_exec_result_free(&b); drift_exec_result_free(&c);
    drift_exec_result_free(&d); drift_exec_result_free(&e);
    drift_exec_cache_free(cache);
    drift_forward_free(g);
    fixture_close(&x);
}

/* With adoption on, a second graph (another plan: norm2 in bf16 too) takes
 * the first graph's entries it computes the same way (every master, the casts
 * it shares) and computes the rest: its output is the same as with a fresh
 * cache, and a master changed on the host in between stays the cached one for
 * what was adopted (adoption's premise: the masters do not change). Off, the
 * second graph empties the cache. */
static void test_cache_adopts_across_graphs(void **state) {
    (void)state;
    drift_err err;
    fixture x;
    fixture_open(&x);
    drift_plan p2;
    drift_plan_init(&p2);
    drift_forward *g = NULL;
    assert_int_equal(drift_forward_prepare(x.m, &p2, DRIFT_SIDE_TRAINER, NULL, &g, &err), DRIFT_OK);
    drift_exec_result fresh, a, b, c;
    run(g, x.m, x.be, x.in, NULL, &fresh);
    for (int adopt = 0; adopt <= 1; adopt++) {
        drift_exec_cache *cache = NULL;
        assert_int_equal(drift_exec_cache_create(x.be, &cache, &err), DRIFT_OK);
        drift_exec_cache_set_adopt(cache, adopt);
        run(x.f, x.m, x.be, x.in, cache, &a);
        size_t held = drift_exec_cache_count(cache);
        drift_exec_cache_detach(cache);
        run(g, x.m, x.be, x.in, cache, &b);
        assert_memory_equal(fresh.f32, b.f32, (size_t)fresh.numel * sizeof(float));
        if (adopt) {
            /* every master and most casts came over; the norm2 ones (fp32 -> bf16 now) did not */
            assert_true(drift_exec_cache_adopted(cache) > 69);
            assert_true(drift_exec_cache_adopted(cache) < held);
        } else {
            assert_int_equal(drift_exec_cache_adopted(cache), 0);
        }
        /* the island's plan again, after doubling every master on the host */
        drift_hostset *dbl = doubled_masters(x.m, NULL), *orig = x.m->params;
        x.m->params = dbl;
        drift_exec_cache_detach(cache);
        run(x.f, x.m, x.be, x.in, cache, &c);
        if (adopt) /* the masters came from the cache: the old weights */
            assert_memory_equal(a.f32, c.f32, (size_t)a.numel * sizeof(float));
        else
            assert_memory_not_equal(a.f32, c.f32, (size_t)a.numel * sizeof(float));
        x.m->params = orig;
        drift_hostset_free(dbl);
        drift_exec_result_free(&a); drift_exec_result_free(&b); drift_exec_result_free(&c);
        drift_exec_cache_free(cache);
    }
    drift_exec_result_free(&fresh);
    drift_forward_free(g);
    drift_plan_free(&p2);
    fixture_close(&x);
}

static void test_cache_other_backend_refused(void **state) {
    (void)state;
    drift_err err;
    drift_model *m = model();
    drift_backend *be = NULL, *be2 = NULL;
    drift_forward *f = NULL;
    drift_hostset *in = NULL;
    drift_exec_cache *cache = NULL;
    drift_plan plan;
    drift_plan_init(&plan);
    assert_int_equal(drift_backend_create("cpu", &be, &err), DRIFT_OK);
    assert_int_equal(drift_backend_create("cpu", &be2, &err), DRIFT_OK);
    assert_int_equal(drift_forward_prepare(m, &plan, DRIFT_SIDE_TRAINER, NULL, &f, &err), DRIFT_OK);
    assert_int_equal(drift_params_init_inputs(&m->cfg, 3, &in, &err), DRIFT_OK);
    assert_int_equal(drift_exec_cache_create(be, &cache, &err), DRIFT_OK);
    drift_exec_result r;
    memset(&r, 0, sizeof r);
    assert_int_equal(drift_forward_run_cached(f, m, be2, in, cache, NULL, NULL, &r, &err), DRIFT_E_INTERNAL);
    drift_exec_cache_free(cache);
    drift_forward_free(f);
    drift_hostset_free(in);
    drift_backend_free(be);
    drift_backend_free(be2);
    drift_model_free(m);
    drift_plan_free(&plan);
}

static void test_site_cache(void **state) {
    (void)state;
    drift_err err;
    drift_site_cache *c = NULL;
    assert_int_equal(drift_site_cache_create(&c, &err), DRIFT_OK);
    float v[3] = {1, 2, 3}, w[5] = {4, 5, 6, 7, 8};
    assert_int_equal(drift_site_cache_put_f32(c, "a:out", DRIFT_BF16, v, 3, &err), DRIFT_OK);
    assert_int_equal(drift_site_cache_put_f32(c, "b:out", DRIFT_F32, w, 5, &err), DRIFT_OK);
    int64_t n;
    drift_dtype dt;
    const float *g = drift_site_cache_get(c, "a:out", &n, &dt);
    assert_non_null(g);
    assert_int_equal(n, 3);
    assert_int_equal(dt, DRIFT_BF16);
    assert_true(g[2] == 3.0f);
    assert_null(drift_site_cache_get(c, "zz", NULL, NULL));
    drift_site_cache_clear(c);
    assert_null(drift_site_cache_get(c, "a:out", NULL, NULL));
    assert_int_equal(drift_site_cache_put_f32(c, "a:out", DRIFT_F32, w, 5, &err), DRIFT_OK);
    g = drift_site_cache_get(c, "a:out", &n, &dt);
    assert_int_equal(n, 5);
    assert_true(g[4] == 8.0f);
    drift_site_cache_free(c);
}

static void test_model_errors(void **state) {
    (void)state;
    drift_err err;
    drift_model *m = NULL;
    assert_int_equal(drift_model_create("tiny-dit:heads=5", &m, &err), DRIFT_E_USAGE);
    assert_null(m);
    assert_int_equal(drift_model_create("nosuch", &m, &err), DRIFT_E_USAGE);
    m = model();
    const drift_hostset *b = NULL;
    assert_int_equal(drift_model_buffers(m, DRIFT_BUF_RECORDED, &b, &err), DRIFT_E_INPUT);
    assert_int_equal(drift_model_buffers(m, DRIFT_BUF_DEVICE_FP32, &b, &err), DRIFT_OK);
    assert_non_null(b);
    drift_model_free(m);
}

static int count_sites(const char *site, const drift_tensor *t, void *user, drift_err *err) {
    (void)site, (void)t, (void)err;
    (*(int *)user)++;
    return DRIFT_OK;
}

/* drift_forward_warm fills the cache with exactly what a first cached run
 * keeps (same count), calls no site callback, and a run after it gives the
 * uncached output bit for bit; after the warm-up, changed host masters
 * change nothing (the warm-up really uploaded them). */
static void test_warm_fills_cache(void **state) {
    (void)state;
    drift_err err;
    fixture x;
    fixture_open(&x);
    drift_model *m = x.m;
    drift_backend *be = x.be;
    drift_forward *f = x.f;
    drift_hostset *in = x.in;
    drift_exec_cache *warm = NULL, *first = NULL;
    assert_int_equal(drift_exec_cache_create(be, &warm, &err), DRIFT_OK);
    assert_int_equal(drift_exec_cache_create(be, &first, &err), DRIFT_OK);
    assert_int_equal(drift_forward_warm(f, m, be, NULL, count_sites, &err), DRIFT_E_INTERNAL); /* no cache */

    int calls = 0, calls_first = 0;
    drift_exec_result a, b, c;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&c, 0, sizeof c);
    assert_int_equal(drift_forward_run_cached(f, m, be, in, NULL, count_sites, &calls_first, &a, &err), DRIFT_OK);
    assert_true(calls_first > 0);
    int rc = drift_forward_warm(f, m, be, warm, count_sites, &err);
    if (rc) fail_msg("warm: %s: %s", err.where, err.msg);
    assert_true(drift_exec_cache_count(warm) > 69);
    assert_int_equal(drift_forward_run_cached(f, m, be, in, first, count_sites, &calls, &c, &err), DRIFT_OK);
    assert_int_equal(drift_exec_cache_count(warm), drift_exec_cache_count(first));

    /* masters changed after the warm-up: a warm cached run still uses the uploaded ones */
    drift_hostset *p2 = doubled_masters(m, NULL);
    drift_hostset *orig = m->params;
    m->params = p2;
    calls = 0;
    assert_int_equal(drift_forward_run_cached(f, m, be, in, warm, count_sites, &calls, &b, &err), DRIFT_OK);
    assert_int_equal(calls, calls_first);
    assert_int_equal(a.numel, b.numel);
    assert_memory_equal(a.f32, b.f32, (size_t)a.numel * sizeof(float));
    m->params = orig;
    drift_hostset_free(p2);

    drift_exec_result_free(&a);
    drift_exec_result_free(&b);
    drift_exec_result_free(&c);
    drift_exec_cache_free(warm);
    drift_exec_cache_free(first);
    fixture_close(&x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_keeps_params_resident),
        cmocka_unit_test(test_warm_fills_cache),
        cmocka_unit_test(test_cache_adopts_across_graphs),
        cmocka_unit_test(test_cache_other_backend_refused),
        cmocka_unit_test(test_site_cache),
        cmocka_unit_test(test_model_errors),
    };
    return cmocka_run_group_tests_name("replay_forward", tests, NULL, NULL);
}
