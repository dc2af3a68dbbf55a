/* What the parity harness (parity.c) and the GPU tests' helpers
 * (tests/gpu/gpu_check.h) share: one seeded PRNG, the ULP and bit-equality
 * rules, the NMSE against the fp64 ref backend and its default bounds.
 * Plain C, no cmocka. */
#ifndef DRIFT_TESTS_PARITY_UTIL_H
#define DRIFT_TESTS_PARITY_UTIL_H

#include <stdint.h>

#include "formats/dtype.h"

/* splitmix64: one process-wide state (tests are single-threaded where they draw) */
void parity_rng_seed(uint64_t s);
uint64_t parity_rng_u64(void);
double parity_rng_unif(void);   /* uniform in [0, 1) */
double parity_rng_normal(void); /* N(0, 1), Box-Muller */

/* One unit in the last place of dt at magnitude |x| (subnormal floor). */
double parity_ulp(double x, drift_dtype dt);
/* 1 if a and b have the same bits, or are both NaN. */
int parity_same_bits(float a, float b);

/* NMSE = sum (x - r)^2 / sum r^2 over elements finite on both sides (num
 * alone when the denominator is 0). *n_parity receives the elements whose
 * non-finite state differs: r NaN and x not, r inf and x another value, or x
 * non-finite where r is finite, except (may_overflow) x = +-inf where
 * |r| >= 6e4 (a 16-bit rounding that overflows). */
double parity_nmse(const float *x, const double *r, int64_t n, int may_overflow, int64_t *n_parity);

/* The default NMSE bound of a result whose effective dtype is dt (cases.c
 * explains them): host {bf16 1e-4, fp16 1e-6, fp32 1e-11}, device {2e-5,
 * 1e-6, 1e-10}. */
double parity_nmse_default(drift_dtype dt, int device);

#endif
