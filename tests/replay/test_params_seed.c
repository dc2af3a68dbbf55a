/* replay/params_init: seeding on several threads (tensors cut into chunks of
 * their stream, each started by a GF(2) jump-ahead) gives exactly the values
 * of one thread and of the sequential per-tensor stream
 * drift_params_init_one; and the seed matters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "replay/exec/forward.h"
#include "replay/exec/params_init.h"

static void same_sets(const drift_hostset *a, const drift_hostset *b) {
    assert_int_equal(drift_hostset_count(a), drift_hostset_count(b));
    for (size_t i = 0; i < drift_hostset_count(a); i++) {
        const drift_host_tensor *x = drift_hostset_at(a, i), *y = drift_hostset_find(b, x->name);
        assert_non_null(y);
        assert_int_equal(x->numel, y->numel);
        assert_memory_equal(x->f32, y->f32, (size_t)x->numel * sizeof(float));
    }
}

static void test_threads_do_not_change_values(void **state) {
    (void)state;
    drift_err e;
    drift_model *m = NULL;
    /* tensors of 1 to 4+ chunks of 65536 draws, odd sizes (the jump-ahead over chunk boundaries) */
    assert_int_equal(drift_model_create("wan2.2:layers=2,dim=64,heads=4,ffn_dim=1031,text_dim=4099", &m, &e), 0);
    int64_t biggest = 0;
    for (size_t i = 0; i < m->table.n; i++) biggest = m->table.params[i].numel > biggest ? m->table.params[i].numel : biggest;
    assert_true(biggest > 4 * 65536);
    drift_hostset *s1 = NULL, *s2 = NULL, *s7 = NULL, *other = NULL;
    assert_int_equal(drift_params_init_seeded_threads(&m->table, 99, 1, &s1, &e), 0);
    assert_int_equal(drift_params_init_seeded_threads(&m->table, 99, 2, &s2, &e), 0);
    assert_int_equal(drift_params_init_seeded_threads(&m->table, 99, 7, &s7, &e), 0);
    assert_int_equal(drift_params_init_seeded_threads(&m->table, 100, 3, &other, &e), 0);
    same_sets(s1, s2);
    same_sets(s1, s7);
    /* table order, and each tensor equal to its own stream drawn alone */
    assert_int_equal(drift_hostset_count(s1), m->table.n);
    for (size_t i = 0; i < m->table.n; i++) {
        const drift_param_info *p = &m->table.params[i];
        const drift_host_tensor *t = drift_hostset_at(s1, i);
        assert_string_equal(t->name, p->fqn);
        float *v = malloc((size_t)p->numel * sizeof *v);
        drift_params_init_one(p, 99, v);
        assert_memory_equal(v, t->f32, (size_t)p->numel * sizeof *v);
        free(v);
    }
    /* another seed gives other values */
    const drift_host_tensor *a = drift_hostset_at(s1, 0), *b = drift_hostset_at(other, 0);
    assert_true(memcmp(a->f32, b->f32, (size_t)a->numel * sizeof(float)) != 0);
    drift_hostset_free(s1);
    drift_hostset_free(s2);
    drift_hostset_free(s7);
    drift_hostset_free(other);
    drift_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_threads_do_not_change_values)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
