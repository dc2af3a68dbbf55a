/* The fp64 oracle's bodies of the closed opset's kernels (ref_opset.c).
 * Internal to kernels/: the ref backend runs them, and so do the cpu and
 * cuda backends for every op that touches an integer or fp64 tensor. */
#ifndef DRIFT_KERNELS_REF_OPSET_H
#define DRIFT_KERNELS_REF_OPSET_H

#include "kernels/backend.h"

/* Runs BINARY, WHERE, TAKE, PUT, ARGSORT, CUMSUM, SOFTMAX, BMM, GROUP_NORM,
 * NONZERO, REDUCE and UNARY on double storage (arguments checked by the
 * door). DRIFT_E_INPUT for data errors (an index out of range, an integer
 * division by zero, a non-zero count other than the recorded one). */
int drift_ref_run_opset(const drift_op *op, const drift_tensor *const *in, drift_tensor *out, drift_err *err);
/* REDUCE over op->dim (op->length dims) in double. */
int drift_ref_reduce(const drift_op *op, const drift_tensor *x, drift_tensor *out);
/* UNARY variant sub of x in double (p = op->scalar, q = op->step: softplus's beta and
 * threshold, elu's alpha, leaky_relu's slope). */
double drift_ref_unary_ext(int sub, double x, double p, double q);
/* torch's div(rounding_mode="floor") and remainder on floats, in double. */
double drift_ref_floordiv(double a, double b);
double drift_ref_remainder(double a, double b);

#endif
