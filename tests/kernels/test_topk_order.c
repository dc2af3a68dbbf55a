/* kernels/topk_order.c: torch's CUDA topk order. The expected orders were
 * derived by hand from torch's gather rule and its 32-slot bitonic network
 * (tests/gpu/topk_order_probe.py checks the same rule against torch.topk on
 * the GPU machine): each case fails under a plain stable order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <math.h>

#include <cmocka.h>

#include "kernels/topk_order.h"

/* the stable argsort (descending if largest) of x[0..n) into perm: insertion sort, NaN largest */
static void stable_order(const double *x, int64_t n, int largest, int64_t *perm) {
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    for (int64_t i = 1; i < n; i++)
        for (int64_t j = i; j > 0; j--) {
            const double a = x[perm[j - 1]], b = x[perm[j]];
            const int an = isnan(a), bn = isnan(b);
            int before = largest ? (bn && !an) || b > a : (an && !bn) || b < a; /* b strictly first */
            if (!before) break;
            const int64_t t = perm[j];
            perm[j] = perm[j - 1], perm[j - 1] = t;
        }
}

static void check(const double *x, int64_t n, int64_t k, int largest, int sorted, const int64_t *want) {
    int64_t perm[64], idx[64];
    stable_order(x, n, largest, perm);
    assert_int_equal(drift_topk_torch_order(x, 1, n, k, largest, sorted, perm, idx), 0);
    for (int64_t i = 0; i < k; i++) assert_int_equal(idx[i], want[i]);
}

static void test_two_way_tie_reversed(void **st) {
    (void)st;
    check((const double[]){0.5, 0.5, 0.1, 0.2}, 4, 2, 1, 1, (const int64_t[]){1, 0});
    check((const double[]){0.1, 0.5, 0.5, 0.2}, 4, 2, 1, 1, (const int64_t[]){2, 1});
    check((const double[]){1, 3, 3, -2, 0.5}, 5, 3, 1, 1, (const int64_t[]){2, 1, 0});
}

static void test_wider_ties_and_unsorted(void **st) {
    (void)st;
    check((const double[]){5, 5, 5, 5, 1}, 5, 4, 1, 1, (const int64_t[]){1, 0, 2, 3});
    check((const double[]){2, 2, 2, 2, 2, 2}, 6, 3, 1, 1, (const int64_t[]){2, 1, 0});
    check((const double[]){0.9, 0.3, 0.3, 0.3}, 4, 3, 1, 1, (const int64_t[]){0, 2, 1});
    /* sorted=False: the gather order (beyond the k-th in index order, then equal ones) */
    check((const double[]){1, 9, 3, 9, 7}, 5, 3, 1, 0, (const int64_t[]){1, 3, 4});
    /* smallest, no ties: plain ascending; k = 1 */
    check((const double[]){4, -1, 2, -3}, 4, 2, 0, 1, (const int64_t[]){3, 1});
    check((const double[]){4, -1, 2, -3}, 4, 1, 1, 1, (const int64_t[]){0});
}

static void test_nan_largest_and_wide_k(void **st) {
    (void)st;
    check((const double[]){1, NAN, 2}, 3, 2, 1, 1, (const int64_t[]){1, 2});
    /* k > 32: torch's stable sorts, ties in index order */
    double x[40];
    int64_t want[33];
    for (int i = 0; i < 40; i++) x[i] = i < 33 ? 1.0 : 0.0;
    for (int i = 0; i < 33; i++) want[i] = i;
    check(x, 40, 33, 1, 1, want);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_way_tie_reversed),
        cmocka_unit_test(test_wider_ties_and_unsorted),
        cmocka_unit_test(test_nan_largest_and_wide_k),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
