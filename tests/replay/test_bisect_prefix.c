/* drift bisect's prefix reuse (replay/search/bisect.h, replay/exec/exec.h
 * snapshots): a bisection with the prefix cache gives the same culprits,
 * the same per-probe metrics and the same effects, bit for bit, as one
 * that replays every probe from the inputs; and it does reuse prefixes.
 * Differences are planted in block 0 and in the last block, so that a
 * probe (or an effect) applying the block-0 one would come out different
 * if it started from a boundary past block 0. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "formats/plan.h"
#include "replay/drive/synth.h"
#include "replay/exec/forward.h"
#include "replay/search/bisect.h"

#define SPEC "wan2.2:layers=3,dim=64,heads=4,ffn_dim=128,text_dim=32,text_len=8,frames=2,height=8,width=8"

#define OK(expr, e)                                                                  \
    do {                                                                             \
        if ((expr) != DRIFT_OK) {                                                    \
            print_error("%s: %s: %s\n", #expr, (e)->where, (e)->msg);                \
            fail();                                                                  \
        }                                                                            \
    } while (0)

static char g_trace[1200];
static drift_plan g_good, g_bad;

typedef struct probes {
    double metric[256];
    int fails[256];
    size_t n_applied[256];
    size_t n;
} probes;

static void on_probe(const drift_bisect_probe *p, void *user) {
    probes *ps = user;
    if (ps->n >= 256) return;
    ps->metric[ps->n] = p->metric;
    ps->fails[ps->n] = p->fails;
    ps->n_applied[ps->n] = p->n_applied;
    ps->n++;
}

static int setup(void **state) {
    (void)state;
    const char *t = getenv("DRIFT_TMP");
    snprintf(g_trace, sizeof g_trace, "%s/bisect_prefix.%ld.h5", t && t[0] ? t : "/tmp", (long)getpid());
    drift_err e;
    drift_err_clear(&e);
    drift_plan_init(&g_good);
    drift_plan_init(&g_bad);
    /* good: everything bf16; bad: block 0's and the last block's norm2 in fp16 (the same graph
     * structure as bf16: a wrong reuse is not caught by value ids no longer matching) */
    if (drift_plan_apply_flag(&g_bad, "--param-dtype", "blocks.0.norm2.*=fp16", &e) ||
        drift_plan_apply_flag(&g_bad, "--param-dtype", "blocks.2.norm2.*=fp16", &e))
        return -1;
    drift_synth_opts so;
    drift_synth_opts_init(&so);
    so.model = SPEC;
    so.seed = 3;
    so.steps = 2;
    so.trainer_plan = &g_bad;
    so.rollout_plan = &g_good;
    so.trainer_path = g_trace;
    so.sites = "output:*";
    if (drift_synth_record(&so, &e)) {
        fprintf(stderr, "record: %s: %s\n", e.where, e.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char r[1300];
    drift_synth_rollout_path(g_trace, r, sizeof r);
    unlink(g_trace);
    unlink(r);
    drift_plan_free(&g_good);
    drift_plan_free(&g_bad);
    return 0;
}

static void run_plans(const drift_plan *good, const drift_plan *bad, int granularity_param, int prefix_off, size_t cap,
                      probes *ps, drift_bisect_result *res) {
    drift_err e;
    drift_err_clear(&e);
    drift_bisect_opts o;
    drift_bisect_opts_init(&o);
    o.trace = g_trace;
    o.good = good;
    o.bad = bad;
    o.granularity_param = granularity_param;
    o.all = 1;
    o.has_threshold = 1;
    o.threshold = 0; /* the bitwise question: every difference is a culprit, many probes */
    o.parallel = 1;  /* probes in a fixed order */
    o.fix = 1;
    o.no_prefix_cache = prefix_off;
    o.prefix_cache_bytes = cap;
    o.on_probe = on_probe;
    o.event_user = ps;
    memset(ps, 0, sizeof *ps);
    OK(drift_bisect_run(&o, res, &e), &e);
}

static void run(int prefix_off, size_t cap, probes *ps, drift_bisect_result *res) {
    run_plans(&g_good, &g_bad, 1, prefix_off, cap, ps, res);
}

static void same_answer(const probes *pa, const drift_bisect_result *a, const probes *pb, const drift_bisect_result *b) {
    assert_int_equal(pa->n, pb->n);
    assert_true(pa->n >= 3);
    for (size_t i = 0; i < pa->n; i++) {
        assert_int_equal(pa->n_applied[i], pb->n_applied[i]);
        assert_int_equal(pa->fails[i], pb->fails[i]);
        assert_memory_equal(&pa->metric[i], &pb->metric[i], sizeof(double)); /* bitwise */
    }
    assert_int_equal(a->n_diffs, 4);
    assert_int_equal(a->n_sets, b->n_sets);
    assert_int_equal(a->n_culprits, b->n_culprits);
    assert_int_equal(a->n_culprits, 4);
    for (size_t c = 0; c < a->n_culprits; c++) {
        assert_int_equal(a->culprits[c].diff, b->culprits[c].diff);
        assert_memory_equal(&a->culprits[c].metric, &b->culprits[c].metric, sizeof(double));
        assert_memory_equal(&a->culprits[c].metric_without, &b->culprits[c].metric_without, sizeof(double));
        assert_string_equal(a->culprits[c].first_divergent, b->culprits[c].first_divergent);
    }
    for (size_t s = 0; s < a->n_sets; s++) {
        assert_int_equal(a->set_start[s], b->set_start[s]);
        assert_int_equal(a->set_len[s], b->set_len[s]);
    }
    assert_int_equal(a->has_fix, b->has_fix);
    assert_memory_equal(&a->fix_metric, &b->fix_metric, sizeof(double));
    assert_memory_equal(&a->bad_metric, &b->bad_metric, sizeof(double));
}

/* With and without the cache: the same answer bit for bit, and the cache is used. */
static void test_same_bits(void **state) {
    (void)state;
    static probes on, off;
    drift_bisect_result ron, roff;
    run(0, 0, &on, &ron);
    run(1, 0, &off, &roff);
    same_answer(&on, &ron, &off, &roff);
    assert_true(ron.prefix_on);
    assert_int_equal(ron.prefix_boundaries, 8); /* per parameter (blocks.0 and blocks.2, weight and bias), in the good and the bad replay */
    assert_true(ron.prefix_bytes > 0);
    assert_true(ron.prefix_reused > 0 && ron.prefix_reused <= ron.prefix_candidates);
    assert_true(ron.prefix_skipped_fraction > 0 && ron.prefix_skipped_fraction < 1);
    assert_false(roff.prefix_on);
    assert_int_equal(roff.prefix_reused, 0);
    drift_bisect_result_free(&ron);
    drift_bisect_result_free(&roff);
}

/* A cap too small for any boundary: nothing kept, nothing reused, the same answer. */
static void test_cap(void **state) {
    (void)state;
    static probes on, off;
    drift_bisect_result ron, roff;
    run(0, 16, &on, &ron);
    run(1, 0, &off, &roff);
    same_answer(&on, &ron, &off, &roff);
    assert_int_equal(ron.prefix_bytes, 0);
    assert_int_equal(ron.prefix_reused, 0);
    drift_bisect_result_free(&ron);
    drift_bisect_result_free(&roff);
}

/* Pattern granularity with a RoPE provenance difference (it changes no
 * node, only the values the first buffer leaf reads: bisect starts such a
 * probe no later than that leaf), a timestep input policy and the last
 * block's norm2: the same answer bit for bit. (On the cpu backend the cpu
 * and device RoPE tables give the same output for these shapes, so this
 * checks the combination, not the RoPE guard alone.) */
static void test_rope_and_input(void **state) {
    (void)state;
    drift_err e;
    drift_plan bad;
    drift_plan_init(&bad);
    OK(drift_plan_apply_flag(&bad, "--rope-provenance", "device", &e), &e);
    OK(drift_plan_apply_flag(&bad, "--param-dtype", "blocks.2.norm2.*=fp16", &e), &e);
    OK(drift_plan_apply_flag(&bad, "--input-dtype", "timestep=bf16", &e), &e);
    static probes on, off;
    drift_bisect_result ron, roff;
    run_plans(&g_good, &bad, 0, 0, 0, &on, &ron);
    run_plans(&g_good, &bad, 0, 1, 0, &off, &roff);
    assert_int_equal(ron.n_diffs, 3);
    assert_int_equal(on.n, off.n);
    for (size_t i = 0; i < on.n; i++) assert_memory_equal(&on.metric[i], &off.metric[i], sizeof(double));
    assert_int_equal(ron.n_culprits, roff.n_culprits);
    for (size_t c = 0; c < ron.n_culprits; c++) {
        assert_int_equal(ron.culprits[c].diff, roff.culprits[c].diff);
        assert_memory_equal(&ron.culprits[c].metric, &roff.culprits[c].metric, sizeof(double));
        assert_memory_equal(&ron.culprits[c].metric_without, &roff.culprits[c].metric_without, sizeof(double));
    }
    assert_true(ron.prefix_on && ron.prefix_reused > 0);
    drift_bisect_result_free(&ron);
    drift_bisect_result_free(&roff);
    drift_plan_free(&bad);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_bits),
        cmocka_unit_test(test_cap),
        cmocka_unit_test(test_rope_and_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
