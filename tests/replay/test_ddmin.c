/* ddmin on pure predicates: probe bounds, pairs, none, parallel == serial. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <pthread.h>

#include "replay/search/ddmin.h"

/* The failing condition: all members of `need` applied (an AND of culprits),
 * or any of the groups in `any` (independent causes). */
typedef struct pred {
    size_t need[4];
    size_t n_need;
    pthread_mutex_t lock;
    int calls;
} pred;

static int probe_and(const unsigned char *mask, size_t n, int slot, void *user, int *fails, drift_err *err) {
    (void)n; (void)slot; (void)err;
    pred *p = user;
    pthread_mutex_lock(&p->lock);
    p->calls++;
    pthread_mutex_unlock(&p->lock);
    int all = 1;
    for (size_t i = 0; i < p->n_need; i++) all &= mask[p->need[i]] != 0;
    *fails = all;
    return DRIFT_OK;
}

static void run(size_t n, pred *p, int parallel, drift_ddmin_result *res) {
    drift_ddmin_opts o = {.parallel = parallel, .probe = probe_and, .user = p};
    drift_err err;
    assert_int_equal(drift_ddmin_run(n, NULL, &o, res, &err), DRIFT_OK);
}

static void test_single_culprit_among_16(void **state) {
    (void)state;
    for (size_t c = 0; c < 16; c++) {
        pred p = {.need = {c}, .n_need = 1, .lock = PTHREAD_MUTEX_INITIALIZER};
        drift_ddmin_result r;
        run(16, &p, 1, &r);
        assert_true(r.found);
        assert_int_equal(r.culprit_size, 1);
        assert_int_equal(r.culprit[c], 1);
        /* 2*log2(16)+2 = 10 probes at most (the initial full-set probe included) */
        assert_true(r.probes <= drift_ddmin_single_bound(16));
        assert_int_equal(drift_ddmin_single_bound(16), 10);
        assert_int_equal((size_t)p.calls, r.probes);
        drift_ddmin_result_free(&r);
    }
}

static void test_pair_found_together(void **state) {
    (void)state;
    for (size_t a = 0; a < 16; a += 3) {
        for (size_t b = a + 1; b < 16; b += 5) {
            pred p = {.need = {a, b}, .n_need = 2, .lock = PTHREAD_MUTEX_INITIALIZER};
            drift_ddmin_result r;
            run(16, &p, 1, &r);
            assert_true(r.found);
            assert_int_equal(r.culprit_size, 2);
            assert_int_equal(r.culprit[a], 1);
            assert_int_equal(r.culprit[b], 1);
            drift_ddmin_result_free(&r);
        }
    }
}

static void test_no_culprit(void **state) {
    (void)state;
    pred p = {.need = {99}, .n_need = 0, .lock = PTHREAD_MUTEX_INITIALIZER};
    /* n_need == 0 means "everything fails"; use an impossible AND instead */
    p.n_need = 1;
    p.need[0] = 7;
    drift_ddmin_result r;
    unsigned char uni[8] = {1, 1, 1, 1, 1, 1, 1, 0}; /* culprit 7 not in the universe */
    drift_ddmin_opts o = {.parallel = 1, .probe = probe_and, .user = &p};
    assert_int_equal(drift_ddmin_run(8, uni, &o, &r, NULL), DRIFT_OK);
    assert_false(r.found);
    assert_int_equal(r.culprit_size, 0);
    assert_int_equal(r.probes, 1);
    drift_ddmin_result_free(&r);
}

static void test_parallel_same_answer(void **state) {
    (void)state;
    pred p1 = {.need = {3, 11, 12}, .n_need = 3, .lock = PTHREAD_MUTEX_INITIALIZER};
    pred p4 = p1;
    drift_ddmin_result r1, r4;
    run(16, &p1, 1, &r1);
    run(16, &p4, 4, &r4);
    assert_int_equal(r1.culprit_size, 3);
    assert_memory_equal(r1.culprit, r4.culprit, 16);
    assert_true(r4.max_concurrent > 1);
    drift_ddmin_result_free(&r1);
    drift_ddmin_result_free(&r4);
}

static int probe_error(const unsigned char *mask, size_t n, int slot, void *user, int *fails, drift_err *err) {
    (void)mask; (void)n; (void)slot; (void)user; (void)fails;
    return drift_err_set(err, DRIFT_E_IO, "probe", "replay failed");
}

static void test_probe_error_propagates(void **state) {
    (void)state;
    drift_ddmin_opts o = {.parallel = 2, .probe = probe_error};
    drift_ddmin_result r;
    drift_err err;
    assert_int_equal(drift_ddmin_run(4, NULL, &o, &r, &err), DRIFT_E_IO);
    assert_string_equal(err.msg, "replay failed");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_culprit_among_16),
        cmocka_unit_test(test_pair_found_together),
        cmocka_unit_test(test_no_culprit),
        cmocka_unit_test(test_parallel_same_answer),
        cmocka_unit_test(test_probe_error_propagates),
    };
    return cmocka_run_group_tests_name("replay_ddmin", tests, NULL, NULL);
}
