/* The fp64 oracle's elementwise ATen math (UNARY and SCALAR variants), one
 * definition for the host oracle (kernels/ref/ref_aten_ops.c) and the GPU
 * oracle (kernels/cuda/ref_cuda_kernels.cu): the mathematical value in
 * double, never rounded to a storage dtype. Internal to kernels/. */
#ifndef DRIFT_KERNELS_ATEN_MATH64_H
#define DRIFT_KERNELS_ATEN_MATH64_H

#include <math.h>

#include "kernels/backend.h"

#ifdef __CUDACC__
#define DRIFT_AT_HD __host__ __device__
#else
#define DRIFT_AT_HD
#endif

DRIFT_AT_HD static inline double drift_aten_unary64(int sub, double x) {
    switch (sub) {
    case DRIFT_UNARY_NEG: return -x;
    case DRIFT_UNARY_EXP: return exp(x);
    case DRIFT_UNARY_SIN: return sin(x);
    case DRIFT_UNARY_COS: return cos(x);
    case DRIFT_UNARY_RSQRT: return 1.0 / sqrt(x);
    case DRIFT_UNARY_SQRT: return sqrt(x);
    case DRIFT_UNARY_TANH: return tanh(x);
    case DRIFT_UNARY_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case DRIFT_UNARY_GELU_ERF: return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440));
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
    case DRIFT_SCALAR_POW: return pow(x, s);
    case DRIFT_SCALAR_RPOW: return pow(s, x);
    case DRIFT_SCALAR_MAX: return x != x ? x : (x < s ? s : x);
    case DRIFT_SCALAR_MIN: return x != x ? x : (x > s ? s : x);
    default: return x;
    }
}

#endif
