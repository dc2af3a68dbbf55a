/* The fp64 oracle's elementwise math (the ATen UNARY and SCALAR variants,
 * SILU, GELU_TANH and the timestep sinusoid's argument), one definition for
 * the host oracle (kernels/ref) and the GPU oracle
 * (kernels/cuda/ref_cuda_kernels.cu): the mathematical value in double,
 * never rounded to a storage dtype. Transcendentals are drift's own
 * (kernels/math64.h), not libm's or libdevice's, so the two oracles agree bit
 * for bit. Internal to kernels/. */
#ifndef DRIFT_KERNELS_ATEN_MATH64_H
#define DRIFT_KERNELS_ATEN_MATH64_H

#include <math.h>

#include "kernels/backend.h"
#include "kernels/math64.h"

#ifdef __CUDACC__
#define DRIFT_AT_HD __host__ __device__
#else
#define DRIFT_AT_HD
#endif

DRIFT_AT_HD static inline double drift_aten_unary64(int sub, double x) {
    switch (sub) {
    case DRIFT_UNARY_NEG: return -x;
    case DRIFT_UNARY_EXP: return drift_m64_exp(x);
    case DRIFT_UNARY_SIN: return drift_m64_sin(x);
    case DRIFT_UNARY_COS: return drift_m64_cos(x);
    case DRIFT_UNARY_RSQRT: return 1.0 / sqrt(x);
    case DRIFT_UNARY_SQRT: return sqrt(x);
    case DRIFT_UNARY_TANH: return drift_m64_tanh(x);
    case DRIFT_UNARY_SIGMOID: return 1.0 / (1.0 + drift_m64_exp(-x));
    case DRIFT_UNARY_GELU_ERF: return 0.5 * x * (1.0 + drift_m64_erf(x * 0.70710678118654752440));
    case DRIFT_UNARY_RECIP: return 1.0 / x;
    case DRIFT_UNARY_ABS: return fabs(x);
    case DRIFT_UNARY_RELU: return x != x ? x : (x > 0.0 ? x : 0.0);
    case DRIFT_UNARY_MASK_BIAS: return x != 0.0 ? 0.0 : -INFINITY;
    default: return x;
    }
}

DRIFT_AT_HD static inline double drift_aten_scalar64(int sub, double x, double s) {
    switch (sub) {
    case DRIFT_SCALAR_ADD: return x + s;
    case DRIFT_SCALAR_SUB: return x - s;
    case DRIFT_SCALAR_RSUB: return s - x;
    case DRIFT_SCALAR_MUL: return x * s;
    case DRIFT_SCALAR_DIV: return x / s;
    case DRIFT_SCALAR_POW: return drift_m64_pow(x, s);
    case DRIFT_SCALAR_RPOW: return drift_m64_pow(s, x);
    case DRIFT_SCALAR_MAX: return x != x ? x : (x < s ? s : x);
    case DRIFT_SCALAR_MIN: return x != x ? x : (x > s ? s : x);
    default: return x;
    }
}

/* SILU and GELU_TANH (backend.h) in fp64. */
DRIFT_AT_HD static inline double drift_aten_silu64(double v) { return v / (1.0 + drift_m64_exp(-v)); }

DRIFT_AT_HD static inline double drift_aten_gelu_tanh64(double v) {
    const double k_beta = 0x1.9884533d43651p-1, k_kappa = 0.044715; /* sqrt(2/pi) */
    return 0.5 * v * (1.0 + drift_m64_tanh(k_beta * (v + k_kappa * v * v * v)));
}

/* TIMESTEP_SINUSOID's argument t * exp(-ln(max_period) j / half). */
DRIFT_AT_HD static inline double drift_aten_timestep_arg64(double t, int64_t j, int64_t half, double max_period) {
    return t * drift_m64_exp(-drift_m64_log(max_period) * (double)j / (double)half);
}

/* The oracles' metric partial sums (ref_metrics, rc_metrics) run over
 * chunks of this many elements, each summed from 0 in index order, the
 * chunks then added in order: one order for the host and the GPU. */
#define DRIFT_ORACLE_METRIC_CHUNK 4096

#endif
