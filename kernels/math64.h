/* drift's own fp64 transcendentals for the fp64 oracle: one definition,
 * compiled for the host oracle (kernels/ref, gcc with -ffp-contract=off)
 * and for the GPU oracle (kernels/cuda/ref_cuda_kernels.cu, nvcc with
 * --fmad=false), so that both give the same bits. glibc's libm and CUDA's
 * libdevice each round their exp/sin/tanh/erf/pow differently in the last
 * bit; these use only IEEE +, -, *, / and sqrt, rint, floor, fmod (each
 * exact or correctly rounded on both sides) in one fixed order.
 *
 * Accuracy (tests/kernels/test_math64.c measures it against libm): exp,
 * expm1, log within 2 ulp; sin, cos within 2 ulp for |x| < 2^20 (beyond,
 * the argument is reduced modulo the double nearest 2 pi: bounded but not
 * accurate); tanh within 3 ulp; erf within 4 ulp; pow: special values as
 * C99 Annex F, integer exponents up to 64 by repeated squaring (about |y|
 * ulp), 0.5 and -0.5 through sqrt, otherwise exp(y log x) (about |y log x| ulp). The
 * oracle measures bf16/fp32 differences; a few fp64 ulp are far below them.
 * Constants: scripts/gen_math64_consts.py. Internal to kernels/. */
#ifndef DRIFT_KERNELS_MATH64_H
#define DRIFT_KERNELS_MATH64_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define DRIFT_M64 __host__ __device__ static inline
#else
#define DRIFT_M64 static inline
#endif

#define DRIFT_M64_INV_LN2 0x1.71547652b82fep+0
#define DRIFT_M64_LN2_HI 0x1.62e42fee00000p-1 /* 32 significant bits: k * LN2_HI is exact for |k| < 2^21 */
#define DRIFT_M64_LN2_LO 0x1.a39ef35793c76p-33
#define DRIFT_M64_TWO_OVER_PI 0x1.45f306dc9c883p-1
#define DRIFT_M64_PIO2_1 0x1.921fb54400000p+0 /* pi/2 in three parts of 33, 33 and 53 bits */
#define DRIFT_M64_PIO2_2 0x1.0b4611a600000p-34
#define DRIFT_M64_PIO2_3 0x1.3198a2e037073p-69
#define DRIFT_M64_TWO_PI 0x1.921fb54442d18p+2
#define DRIFT_M64_SQRT2 0x1.6a09e667f3bcdp+0
#define DRIFT_M64_TWO_OVER_SQRTPI 0x1.20dd750429b6dp+0
#define DRIFT_M64_INV_SQRTPI 0x1.20dd750429b6dp-1

DRIFT_M64 uint64_t drift_m64_bits(double x) {
#ifdef __CUDA_ARCH__
    return (uint64_t)__double_as_longlong(x);
#else
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
#endif
}

DRIFT_M64 double drift_m64_from_bits(uint64_t u) {
#ifdef __CUDA_ARCH__
    return __longlong_as_double((long long)u);
#else
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
#endif
}

/* y * 2^k, k in [-2200, 2200]: at most one rounding (into the subnormals). */
DRIFT_M64 double drift_m64_scale(double y, int k) {
    if (k > 1023) {
        y *= 0x1p1023;
        k -= 1023;
        if (k > 1023) k = 1023;
    } else if (k < -1022) {
        y *= 0x1p-1022;
        k += 1022;
        if (k < -1022) k = -1022;
    }
    return y * drift_m64_from_bits((uint64_t)(k + 1023) << 52);
}

/* e^r - 1 for |r| <= ln2/2 + a little: Taylor to r^13 (truncation < 2^-57 relative). */
DRIFT_M64 double drift_m64_expm1_small(double r) {
    double q = 0x1.6124613a86d09p-33;
    q = 0x1.1eed8eff8d898p-29 + r * q;
    q = 0x1.ae64567f544e4p-26 + r * q;
    q = 0x1.27e4fb7789f5cp-22 + r * q;
    q = 0x1.71de3a556c734p-19 + r * q;
    q = 0x1.a01a01a01a01ap-16 + r * q;
    q = 0x1.a01a01a01a01ap-13 + r * q;
    q = 0x1.6c16c16c16c17p-10 + r * q;
    q = 0x1.1111111111111p-7 + r * q;
    q = 0x1.5555555555555p-5 + r * q;
    q = 0x1.5555555555555p-3 + r * q;
    q = 0.5 + r * q;
    return r + (r * r) * q;
}

/* x = k ln2 + r (Cody-Waite: x - k LN2_HI is exact), |r| <= ln2/2. */
DRIFT_M64 double drift_m64_reduce_ln2(double x, double *k) {
    *k = rint(x * DRIFT_M64_INV_LN2);
    return (x - *k * DRIFT_M64_LN2_HI) - *k * DRIFT_M64_LN2_LO;
}

DRIFT_M64 double drift_m64_exp(double x) {
    if (x != x) return x + x;
    if (x > 710.0) return INFINITY;
    if (x < -746.0) return 0.0;
    double k;
    const double r = drift_m64_reduce_ln2(x, &k);
    return drift_m64_scale(1.0 + drift_m64_expm1_small(r), (int)k);
}

DRIFT_M64 double drift_m64_expm1(double x) {
    if (x != x) return x + x;
    if (x == 0.0) return x; /* keeps -0 */
    if (x > 710.0) return INFINITY;
    if (x < -40.0) return -1.0; /* e^-40 is below half an ulp of 1 */
    if (fabs(x) <= 0x1.62e42fefa39efp-2) return drift_m64_expm1_small(x);
    double k;
    const double p = drift_m64_expm1_small(drift_m64_reduce_ln2(x, &k));
    const int ki = (int)k;
    if (ki >= 56) return drift_m64_scale(1.0 + p, ki); /* the -1 is below the rounding */
    const double t = drift_m64_from_bits((uint64_t)(ki + 1023) << 52);
    return (t - 1.0) + t * p; /* t - 1 is exact for -54 < ki < 54 */
}

DRIFT_M64 double drift_m64_log(double x) {
    if (x != x) return x + x;
    if (x < 0.0) return NAN;
    if (x == 0.0) return -INFINITY;
    if (x == INFINITY) return x;
    int e = 0;
    if (x < 0x1p-1022) { /* subnormal: scale into the normals (exact) */
        x *= 0x1p54;
        e = -54;
    }
    const uint64_t u = drift_m64_bits(x);
    e += (int)((u >> 52) & 0x7ff) - 1023;
    double m = drift_m64_from_bits((u & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL); /* [1, 2) */
    if (m > DRIFT_M64_SQRT2) {
        m *= 0.5;
        e += 1;
    }
    /* log m = 2 atanh(s), s = f / (2 + f), |s| <= 0.1716: series to s^23 */
    const double f = m - 1.0;
    const double s = f / (2.0 + f), z = s * s;
    double q = 0x1.642c8590b2164p-5;
    q = 0x1.8618618618618p-5 + z * q;
    q = 0x1.af286bca1af28p-5 + z * q;
    q = 0x1.e1e1e1e1e1e1ep-5 + z * q;
    q = 0x1.1111111111111p-4 + z * q;
    q = 0x1.3b13b13b13b14p-4 + z * q;
    q = 0x1.745d1745d1746p-4 + z * q;
    q = 0x1.c71c71c71c71cp-4 + z * q;
    q = 0x1.2492492492492p-3 + z * q;
    q = 0x1.999999999999ap-3 + z * q;
    q = 0x1.5555555555555p-2 + z * q;
    const double lm = 2.0 * s + (2.0 * s * z) * q;
    return (double)e * DRIFT_M64_LN2_HI + ((double)e * DRIFT_M64_LN2_LO + lm);
}

/* sin r, cos r for |r| <= pi/4 (Taylor; truncation < 2^-60 relative). */
DRIFT_M64 double drift_m64_sin_poly(double r) {
    const double z = r * r;
    double q = -0x1.2f49b46814157p-57;
    q = 0x1.952c77030ad4ap-49 + z * q;
    q = -0x1.ae7f3e733b81fp-41 + z * q;
    q = 0x1.6124613a86d09p-33 + z * q;
    q = -0x1.ae64567f544e4p-26 + z * q;
    q = 0x1.71de3a556c734p-19 + z * q;
    q = -0x1.a01a01a01a01ap-13 + z * q;
    q = 0x1.1111111111111p-7 + z * q;
    q = -0x1.5555555555555p-3 + z * q;
    return r + (r * z) * q;
}

DRIFT_M64 double drift_m64_cos_poly(double r) {
    const double z = r * r;
    double q = 0x1.ae7f3e733b81fp-45;
    q = -0x1.93974a8c07c9dp-37 + z * q;
    q = 0x1.1eed8eff8d898p-29 + z * q;
    q = -0x1.27e4fb7789f5cp-22 + z * q;
    q = 0x1.a01a01a01a01ap-16 + z * q;
    q = -0x1.6c16c16c16c17p-10 + z * q;
    q = 0x1.5555555555555p-5 + z * q;
    return (1.0 - 0.5 * z) + (z * z) * q;
}

/* x = k pi/2 + r, |r| <= pi/4 (a little more past 2^20), quadrant k mod 4. */
DRIFT_M64 double drift_m64_reduce_pio2(double x, int *quad) {
    if (fabs(x) >= 0x1p20) x = fmod(x, DRIFT_M64_TWO_PI); /* exact, but modulo the double 2 pi */
    const double k = rint(x * DRIFT_M64_TWO_OVER_PI);
    *quad = (int)(k - 4.0 * floor(k * 0.25));
    return ((x - k * DRIFT_M64_PIO2_1) - k * DRIFT_M64_PIO2_2) - k * DRIFT_M64_PIO2_3;
}

DRIFT_M64 double drift_m64_sin(double x) {
    if (!isfinite(x)) return x - x;
    if (fabs(x) < 0x1p-26) return x;
    int q;
    const double r = drift_m64_reduce_pio2(x, &q);
    switch (q) {
    case 0: return drift_m64_sin_poly(r);
    case 1: return drift_m64_cos_poly(r);
    case 2: return -drift_m64_sin_poly(r);
    default: return -drift_m64_cos_poly(r);
    }
}

DRIFT_M64 double drift_m64_cos(double x) {
    if (!isfinite(x)) return x - x;
    if (fabs(x) < 0x1p-27) return 1.0;
    int q;
    const double r = drift_m64_reduce_pio2(x, &q);
    switch (q) {
    case 0: return drift_m64_cos_poly(r);
    case 1: return -drift_m64_sin_poly(r);
    case 2: return -drift_m64_cos_poly(r);
    default: return drift_m64_sin_poly(r);
    }
}

DRIFT_M64 double drift_m64_tanh(double x) {
    if (x != x) return x + x;
    if (x == 0.0) return x;
    const double ax = fabs(x);
    double t = 1.0; /* |x| > 22: 1 - tanh < 2^-62 */
    if (ax <= 22.0) {
        const double e = drift_m64_expm1(2.0 * ax);
        t = e / (e + 2.0);
    }
    return x < 0.0 ? -t : t;
}

/* erf: |x| < 1 its Taylor series in x^2 (Horner, to x^39); 1 <= |x| < 6
 * one minus erfc by its continued fraction evaluated backwards, 200 terms
 * below 1.25, 140 below 2, 80 above (each converged to 2^-53 there);
 * |x| >= 6: +-1. */
DRIFT_M64 double drift_m64_erf(double x) {
    if (x != x) return x + x;
    if (x == 0.0) return x;
    const double ax = fabs(x);
    double y = 1.0;
    if (ax < 1.0) {
        const double z = ax * ax;
        double q = -0x1.f1b4073b34a68p-63;
        q = 0x1.377c2110f2083p-58 + z * q;
        q = -0x1.7271cbe5863ecp-54 + z * q;
        q = 0x1.a173a167fba4dp-50 + z * q;
        q = -0x1.bc6250fb14231p-46 + z * q;
        q = 0x1.bd577e658d020p-42 + z * q;
        q = -0x1.a289ee7e40f74p-38 + z * q;
        q = 0x1.6f448e13e85e1p-34 + z * q;
        q = -0x1.2b67310aa9f3ap-30 + z * q;
        q = 0x1.c2e3054870b38p-27 + z * q;
        q = -0x1.3777c55568ccdp-23 + z * q;
        q = 0x1.87a00187a0018p-20 + z * q;
        q = -0x1.bbd779334ef0bp-17 + z * q;
        q = 0x1.c01c01c01c01cp-14 + z * q;
        q = -0x1.8d3018d3018d3p-11 + z * q;
        q = 0x1.2f684bda12f68p-8 + z * q;
        q = -0x1.8618618618618p-6 + z * q;
        q = 0x1.999999999999ap-4 + z * q;
        q = -0x1.5555555555555p-2 + z * q;
        q = 0x1.0000000000000p+0 + z * q;
        y = DRIFT_M64_TWO_OVER_SQRTPI * (ax * q);
    } else if (ax < 6.0) {
        double t = ax;
        for (int n = ax < 1.25 ? 200 : ax < 2.0 ? 140 : 80; n >= 1; n--) t = ax + (0.5 * (double)n) / t;
        y = 1.0 - drift_m64_exp(-(ax * ax)) * DRIFT_M64_INV_SQRTPI / t;
    }
    return x < 0.0 ? -y : y;
}

DRIFT_M64 int drift_m64_is_odd_int(double y) {
    if (!(fabs(y) < 0x1p53) || floor(y) != y) return 0;
    return fmod(y, 2.0) != 0.0;
}

DRIFT_M64 double drift_m64_pow(double x, double y) {
    if (y == 0.0 || x == 1.0) return 1.0;
    if (x != x || y != y) return x + y;
    const double ax = fabs(x);
    if (isinf(y)) {
        if (ax == 1.0) return 1.0;
        return (ax < 1.0) == (y < 0.0) ? INFINITY : 0.0;
    }
    const int odd = drift_m64_is_odd_int(y);
    if (x == 0.0) {
        if (y < 0.0) return odd && signbit(x) ? -INFINITY : INFINITY;
        return odd ? x : 0.0;
    }
    if (isinf(x)) {
        if (x > 0.0) return y < 0.0 ? 0.0 : INFINITY;
        if (y < 0.0) return odd ? -0.0 : 0.0;
        return odd ? -INFINITY : INFINITY;
    }
    if (x < 0.0 && floor(y) != y) return NAN;
    double r;
    if (y == 0.5) {
        r = sqrt(ax);
    } else if (y == -0.5) {
        r = 1.0 / sqrt(ax);
    } else if (fabs(y) <= 64.0 && floor(y) == y) {
        int n = (int)fabs(y);
        double b = ax;
        r = 1.0;
        while (n) {
            if (n & 1) r *= b;
            n >>= 1;
            if (n) b *= b;
        }
        if (y < 0.0) r = 1.0 / r;
    } else {
        r = drift_m64_exp(y * drift_m64_log(ax));
    }
    return x < 0.0 && odd ? -r : r;
}

#endif
