/* replay/exec prefix snapshots (exec.h: capture_at / resume): a run resumed
 * from a snapshot of the same graph and inputs gives the output bit for bit
 * at every boundary, also when the snapshot came from a run that observed
 * sites (less cast folding); without a cache it runs from the start; a
 * budget too small takes nothing; drift_exec_first_difference finds the
 * first value a plan change touches. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "replay/exec/forward.h"
#include "replay/exec/params_init.h"

typedef struct fixture {
    drift_model *m;
    drift_backend *be;
    drift_forward *f;
    drift_hostset *in;
    drift_plan plan;
} fixture;

static void fixture_open(fixture *x, const char *pattern) {
    drift_err err;
    memset(x, 0, sizeof *x);
    assert_int_equal(drift_model_create("tiny-dit", &x->m, &err), DRIFT_OK);
    assert_int_equal(drift_model_seed_params(x->m, 7, &err), DRIFT_OK);
    drift_plan_init(&x->plan);
    if (pattern) assert_int_equal(drift_plan_apply_flag(&x->plan, "--param-dtype", pattern, &err), DRIFT_OK);
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

static int count_site(const char *site, const drift_tensor *t, void *user, drift_err *err) {
    (void)site, (void)t, (void)err;
    ++*(int *)user;
    return DRIFT_OK;
}

static void run(fixture *x, drift_exec_cache *c, const drift_exec_options *o, int sites, drift_exec_result *out) {
    drift_err err;
    int n = 0;
    memset(out, 0, sizeof *out);
    int rc = drift_forward_run_ex(x->f, x->m, x->be, x->in, c, o, sites ? count_site : NULL, &n, out, &err);
    if (rc) fail_msg("%s: %s", err.where, err.msg);
}

static void same_output(const drift_exec_result *a, const drift_exec_result *b) {
    assert_int_equal(a->numel, b->numel);
    assert_int_equal(a->dtype, b->dtype);
    assert_memory_equal(a->f32, b->f32, (size_t)a->numel * sizeof *a->f32);
}

/* Capture at every 7th value (with and without sites observed), resume at each. */
static void check_every_boundary(int capture_with_sites) {
    fixture x;
    fixture_open(&x, "*.norm2.*=fp32");
    drift_err err;
    drift_exec_cache *c = NULL;
    assert_int_equal(drift_exec_cache_create(x.be, &c, &err), DRIFT_OK);
    drift_exec_result full, r;
    run(&x, c, NULL, 0, &full);
    const int n = drift_graph_count(x.f->assigned);
    int nb = 0, at[256];
    for (int k = 1; k < n && nb < 256; k += 7) at[nb++] = k;
    drift_exec_snapshot *snap[256] = {0};
    drift_exec_stats st;
    drift_exec_options o = {.alias = -1, .fuse_casts = -1, .stats = &st, .capture_at = at, .n_capture = nb, .captured = snap};
    run(&x, c, &o, capture_with_sites, &r);
    same_output(&full, &r); /* capturing changes nothing */
    drift_exec_result_free(&r);
    int resumed = 0;
    for (int b = 0; b < nb; b++) {
        assert_non_null(snap[b]);
        assert_int_equal(drift_exec_snapshot_boundary(snap[b]), at[b]);
        drift_exec_options ro = {.alias = -1, .fuse_casts = -1, .stats = &st, .resume = snap[b]};
        run(&x, c, &ro, 0, &r);
        same_output(&full, &r);
        drift_exec_result_free(&r);
        if (st.resumed_at == at[b]) {
            resumed++;
            assert_true(st.prefix_skipped > 0 && st.prefix_skipped <= st.live_nodes);
        } else {
            assert_int_equal(st.resumed_at, -1);
        }
        drift_exec_snapshot_free(snap[b]);
    }
    assert_true(resumed > nb / 2); /* most boundaries resumed (a fallback is allowed, never wrong bits) */
    drift_exec_result_free(&full);
    drift_exec_cache_free(c);
    fixture_close(&x);
}

static void test_resume_every_boundary(void **state) {
    (void)state;
    check_every_boundary(0);
}

static void test_resume_from_a_run_with_sites(void **state) {
    (void)state;
    check_every_boundary(1);
}

/* Without a device cache (nothing to recompute the fixed values from) or
 * with a site callback, a resume runs from the start; a budget too small
 * takes no snapshot. */
static void test_fallbacks(void **state) {
    (void)state;
    fixture x;
    fixture_open(&x, NULL);
    drift_err err;
    drift_exec_cache *c = NULL;
    assert_int_equal(drift_exec_cache_create(x.be, &c, &err), DRIFT_OK);
    const int n = drift_graph_count(x.f->assigned);
    int at[2] = {n / 2, n - 1};
    drift_exec_snapshot *snap[2] = {0};
    size_t budget = 8;
    drift_exec_stats st;
    drift_exec_options o = {.alias = -1, .fuse_casts = -1, .stats = &st, .capture_at = at, .n_capture = 2, .captured = snap,
                            .capture_budget = &budget};
    drift_exec_result full, r;
    run(&x, c, &o, 0, &full);
    assert_null(snap[0]);
    assert_null(snap[1]);
    assert_int_equal(budget, 8);
    budget = (size_t)1 << 30;
    run(&x, c, &o, 0, &r);
    drift_exec_result_free(&r);
    assert_non_null(snap[0]);
    assert_true(budget == ((size_t)1 << 30) - drift_exec_snapshot_bytes(snap[0]) - drift_exec_snapshot_bytes(snap[1]));
    drift_exec_options ro = {.alias = -1, .fuse_casts = -1, .stats = &st, .resume = snap[0]};
    run(&x, NULL, &ro, 0, &r); /* no cache */
    assert_int_equal(st.resumed_at, -1);
    same_output(&full, &r);
    drift_exec_result_free(&r);
    run(&x, c, &ro, 1, &r); /* sites observed */
    assert_int_equal(st.resumed_at, -1);
    same_output(&full, &r);
    drift_exec_result_free(&r);
    run(&x, c, &ro, 0, &r);
    assert_int_equal(st.resumed_at, at[0]);
    same_output(&full, &r);
    drift_exec_result_free(&r);
    drift_exec_snapshot_free(snap[0]);
    drift_exec_snapshot_free(snap[1]);
    drift_exec_result_free(&full);
    drift_exec_cache_free(c);
    fixture_close(&x);
}

/* The first value a plan change touches: the changed parameter's leaf or its cast. */
static void test_first_difference(void **state) {
    (void)state;
    fixture a, b;
    fixture_open(&a, NULL);
    fixture_open(&b, "blocks.1.norm2.weight=fp32");
    const drift_graph *ga = a.f->assigned, *gb = b.f->assigned;
    assert_int_equal(drift_exec_first_difference(ga, ga), drift_graph_count(ga));
    int k = drift_exec_first_difference(ga, gb);
    int leaf = -1;
    for (int i = 0; i < drift_graph_count(gb) && leaf < 0; i++) {
        const drift_value *v = drift_graph_value(gb, i);
        if (v->kind == DRIFT_VAL_PARAM && strcmp(v->name, "blocks.1.norm2.weight") == 0) leaf = i;
    }
    assert_true(leaf > 0);
    /* the leaf itself (its stored dtype) or its first reader (the FSDP cast to the forward dtype) */
    const drift_value *vk = drift_graph_value(ga, k);
    assert_true(k == leaf || (k > leaf && vk->kind == DRIFT_VAL_NODE && vk->in[0] == leaf));
    /* everything of block 0 comes before it */
    for (int i = 0; i < drift_graph_count(ga); i++) {
        const drift_value *v = drift_graph_value(ga, i);
        if (v->kind == DRIFT_VAL_PARAM && strncmp(v->name, "blocks.0.", 9) == 0) assert_true(i < k);
    }
    fixture_close(&a);
    fixture_close(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_every_boundary),
        cmocka_unit_test(test_resume_from_a_run_with_sites),
        cmocka_unit_test(test_fallbacks),
        cmocka_unit_test(test_first_difference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
