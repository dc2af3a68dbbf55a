/* kernels/math64.h, the fp64 oracle's own transcendentals (shared by the
 * host and GPU oracles): within their documented ulp bounds of glibc's libm
 * (itself within 1 ulp) over random arguments in each function's ranges,
 * and the IEEE/C99 special values (NaN, +-inf, +-0, overflow, underflow,
 * subnormals, pow's Annex F table) exactly as libm gives them. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/math64.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static double unif(double lo, double hi) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return lo + (hi - lo) * ((double)(g_rng >> 11) * 0x1p-53);
}

/* Distance in ulps between two finite doubles of the same sign region
 * (ordered integer mapping of the bit patterns). */
static double ulps(double a, double b) {
    if (a == b || (isnan(a) && isnan(b))) return 0;
    if (isnan(a) || isnan(b)) return INFINITY;
    int64_t ia, ib;
    memcpy(&ia, &a, 8);
    memcpy(&ib, &b, 8);
    if (ia < 0) ia = INT64_MIN - ia;
    if (ib < 0) ib = INT64_MIN - ib;
    /* the difference in unsigned arithmetic: exact below 2^64 */
    return (double)(ia > ib ? (uint64_t)ia - (uint64_t)ib : (uint64_t)ib - (uint64_t)ia);
}

typedef double (*fn1)(double);

/* Max ulp error of f against ref over n uniform arguments in [lo, hi]. */
static double worst(fn1 f, fn1 ref, double lo, double hi, int n, double *at) {
    double w = 0;
    for (int i = 0; i < n; i++) {
        const double x = unif(lo, hi), u = ulps(f(x), ref(x));
        if (u > w) {
            w = u;
            *at = x;
        }
    }
    return w;
}

static void check_range(const char *name, fn1 f, fn1 ref, double lo, double hi, double bound) {
    double at = 0;
    const double w = worst(f, ref, lo, hi, 200000, &at);
    printf("  %-6s [%g, %g]: max %.0f ulp (at %.17g)\n", name, lo, hi, w, at);
    if (w > bound) fail_msg("%s over [%g, %g]: %.0f ulp at %.17g > %.0f", name, lo, hi, w, at, bound);
}

static void test_accuracy(void **state) {
    (void)state;
    check_range("exp", drift_m64_exp, exp, -745, 709.7, 2);
    check_range("exp", drift_m64_exp, exp, -1, 1, 2);
    check_range("expm1", drift_m64_expm1, expm1, -1, 1, 2);
    check_range("expm1", drift_m64_expm1, expm1, -1e-5, 1e-5, 2);
    check_range("expm1", drift_m64_expm1, expm1, -45, 60, 2);
    check_range("log", drift_m64_log, log, 0.5, 2, 2);
    check_range("log", drift_m64_log, log, 1e-300, 1e300, 2);
    check_range("log", drift_m64_log, log, 0x1p-1074, 0x1p-1023, 2);
    check_range("sin", drift_m64_sin, sin, -7, 7, 2);
    check_range("sin", drift_m64_sin, sin, -1e6, 1e6, 2);
    check_range("cos", drift_m64_cos, cos, -7, 7, 2);
    check_range("cos", drift_m64_cos, cos, -1e6, 1e6, 2);
    check_range("tanh", drift_m64_tanh, tanh, -1, 1, 3);
    check_range("tanh", drift_m64_tanh, tanh, -25, 25, 3);
    check_range("tanh", drift_m64_tanh, tanh, -1e-6, 1e-6, 3);
    check_range("erf", drift_m64_erf, erf, -1, 1, 4);
    check_range("erf", drift_m64_erf, erf, 0.9, 1.6, 4);
    check_range("erf", drift_m64_erf, erf, 1.4, 6.5, 4);
    check_range("erf", drift_m64_erf, erf, -7, 7, 4);
    check_range("erf", drift_m64_erf, erf, -1e-6, 1e-6, 4);
}

static void test_pow_accuracy(void **state) {
    (void)state;
    const double ys[] = {2, 3, -1, -2, 0.5, -0.5, 7, 64, -64};
    double w = 0, wx = 0, wy = 0;
    for (size_t k = 0; k < sizeof ys / sizeof *ys; k++)
        for (int i = 0; i < 20000; i++) {
            const double x = unif(-4, 4);
            /* repeated squaring: about |y| ulp */
            const double u = ulps(drift_m64_pow(x, ys[k]), pow(x, ys[k])) / (1 + fabs(ys[k]));
            if (u > w) w = u, wx = x, wy = ys[k];
        }
    printf("  pow integer / half exponents: max %.2f ulp per unit of 1 + |y| (at %.17g ^ %g)\n", w, wx, wy);
    if (w > 1) fail_msg("pow with small exponents: %.2f ulp / (1 + |y|) at %.17g ^ %g", w, wx, wy);
    /* general exponents: about |y log x| ulp */
    w = 0;
    for (int i = 0; i < 100000; i++) {
        const double x = unif(1e-3, 100), y = unif(-3, 3);
        const double u = ulps(drift_m64_pow(x, y), pow(x, y)) / (2 + fabs(y * log(x)));
        if (u > w) w = u, wx = x, wy = y;
    }
    printf("  pow general: max %.2f ulp per unit of |y log x| (at %.17g ^ %.17g)\n", w, wx, wy);
    if (w > 2) fail_msg("pow general: %.2f ulp / (2 + |y log x|) at %.17g ^ %.17g", w, wx, wy);
}

/* Bitwise equal, NaN == NaN (any payload). */
static int same(double a, double b) { return (isnan(a) && isnan(b)) || (a == b && signbit(a) == signbit(b)); }

static void test_special(void **state) {
    (void)state;
    const double sp[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1.0, -1.0, 0x1p-1074, -0x1p-1074, 0x1p-1022,
                         710.0, -746.0, 709.8, -745.2, 1e-320, 22.5, -22.5, 6.5, -6.5, 1e300, -1e300, 0x1p-30};
    const struct {
        const char *name;
        fn1 f, ref;
    } fs[] = {{"exp", drift_m64_exp, exp},   {"expm1", drift_m64_expm1, expm1}, {"log", drift_m64_log, log},
              {"sin", drift_m64_sin, sin},   {"cos", drift_m64_cos, cos},       {"tanh", drift_m64_tanh, tanh},
              {"erf", drift_m64_erf, erf}};
    for (size_t k = 0; k < sizeof fs / sizeof *fs; k++)
        for (size_t i = 0; i < sizeof sp / sizeof *sp; i++) {
            const double x = sp[i], a = fs[k].f(x), b = fs[k].ref(x);
            if ((fs[k].f == drift_m64_sin || fs[k].f == drift_m64_cos) && fabs(x) >= 0x1p20 && isfinite(x)) {
                if (!(fabs(a) <= 1.0)) fail_msg("%s(%g) = %g is outside [-1, 1]", fs[k].name, x, a);
                continue; /* reduced modulo the double 2 pi: bounded, documented as not accurate */
            }
            if (isnan(b) || isinf(b) || b == 0.0) {
                if (!same(a, b)) fail_msg("%s(%.17g) = %.17g, libm %.17g", fs[k].name, x, a, b);
            } else if (ulps(a, b) > 4) {
                fail_msg("%s(%.17g) = %.17g, libm %.17g (%.0f ulp)", fs[k].name, x, a, b, ulps(a, b));
            }
        }
    const double px[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 1e-310};
    const double py[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 2.5, -2.5,
                         1e300, -1e300, 0x1p53 + 2};
    for (size_t i = 0; i < sizeof px / sizeof *px; i++)
        for (size_t j = 0; j < sizeof py / sizeof *py; j++) {
            const double a = drift_m64_pow(px[i], py[j]), b = pow(px[i], py[j]);
            const int exact = isnan(b) || isinf(b) || b == 0.0 || b == 1.0 || b == -1.0;
            if (exact ? !same(a, b) : ulps(a, b) > 4)
                fail_msg("pow(%.17g, %.17g) = %.17g, libm %.17g", px[i], py[j], a, b);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accuracy),
        cmocka_unit_test(test_pow_accuracy),
        cmocka_unit_test(test_special),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
