/* The cpu backend's fp32 bodies of the closed opset's kernels
 * (cpu_opset.c). Internal to kernels/cpu. */
#ifndef DRIFT_KERNELS_CPU_OPSET_H
#define DRIFT_KERNELS_CPU_OPSET_H

#include "kernels/backend.h"

/* REDUCE, BINARY (arithmetic variants), CUMSUM, SOFTMAX, BMM and GROUP_NORM
 * on floating tensors (fp32 storage). */
int drift_cpu_run_opset(int nthreads, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                        drift_err *err);
/* A UNARY variant from DRIFT_UNARY_LOG on, in fp32 (p = op->scalar, q = op->step). */
float drift_cpu_unary_ext(int sub, float x, float p, float q);

#endif
