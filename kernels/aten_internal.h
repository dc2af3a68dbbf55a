/* Internal to drift_kernels: shapes and host bodies of the ATen-level ops
 * (DRIFT_OP_UNARY .. DRIFT_OP_FILL of backend.h) that captured graphs need.
 * Kept apart from the original op set so that each file has one job. */
#ifndef DRIFT_KERNELS_ATEN_INTERNAL_H
#define DRIFT_KERNELS_ATEN_INTERNAL_H

#include <stdint.h>

#include "kernels/backend.h"

/* 1 if k is one of the ATen-level kinds. */
int drift_aten_is_kind(drift_op_kind k);
/* Input count range of an ATen-level kind. */
void drift_aten_n_in_range(drift_op_kind k, int *lo, int *hi);
/* Output shape of an ATen-level op (contract of drift_op_infer_shape; STRIDED,
 * and FILL with no input, take the requested shape in (*ndim, shape)). */
int drift_aten_infer_shape(const drift_op *op, const drift_tensor *const *in, int *ndim, int64_t *shape,
                           drift_err *err);
/* Flat source index of element e (row-major over shape[nd]) of STRIDED's
 * region (SCATTER's destination): op->start + sum of index * op->stride. */
static inline int64_t drift_aten_strided_index(const drift_op *op, int nd, const int64_t *shape, int64_t e) {
    int64_t off = op->start;
    for (int d = nd - 1; d >= 0; d--) {
        off += (e % shape[d]) * op->stride[d];
        e /= shape[d];
    }
    return off;
}

/* Bodies (arguments validated by drift_host_check_run). ref: fp64 storage;
 * cpu: fp32 storage holding values of out's dtype. */
int drift_ref_run_aten(int nthreads, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                       drift_err *err);
int drift_cpu_run_aten(int nthreads, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                       drift_err *err);

#endif
