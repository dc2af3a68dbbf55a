/* Seeded test values shared by the kernel tests: splitmix64 uniforms and
 * random tensors rounded to a dtype. Include after <cmocka.h>; each test
 * file owns its state (g_rng) so its values do not depend on other files. */
#ifndef DRIFT_TESTS_TEST_RAND_H
#define DRIFT_TESTS_TEST_RAND_H

#include <stdint.h>
#include <stdlib.h>

#include "kernels/backend.h"

/* A uniform in [0, 1) from *state (splitmix64). */
static inline double test_unif(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* n values in [-a, a) rounded to dt. Caller frees. */
static inline float *test_rand_vals(uint64_t *state, int64_t n, double a, drift_dtype dt) {
    float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    assert_non_null(v);
    for (int64_t i = 0; i < n; i++) v[i] = drift_round_to((float)(a * (2.0 * test_unif(state) - 1.0)), dt);
    return v;
}

#endif
