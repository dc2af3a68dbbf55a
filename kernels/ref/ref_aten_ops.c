/* The ref backend's ATen-level ops (backend.h, aten_internal.h): fp64
 * storage, fp64 math, never rounds. Division by a scalar is a true
 * division here (the oracle is the mathematical value). */
#include <math.h>
#include <string.h>

#include "kernels/aten_internal.h"
#include "kernels/aten_math64.h"
#include "kernels/backend_impl.h"
#include "kernels/cpu/host_internal.h"
#include "kernels/ref/ref_opset.h"

static inline double *dd(const drift_tensor *t) { return (double *)t->data; }


int drift_ref_run_aten(int nthreads, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                       drift_err *err) {
    (void)nthreads;
    double *y = dd(out);
    switch (op->kind) {
    case DRIFT_OP_UNARY:
    case DRIFT_OP_REDUCE:
    case DRIFT_OP_BINARY:
    case DRIFT_OP_WHERE:
    case DRIFT_OP_TAKE:
    case DRIFT_OP_PUT:
    case DRIFT_OP_ARGSORT:
    case DRIFT_OP_CUMSUM:
    case DRIFT_OP_SOFTMAX:
    case DRIFT_OP_BMM:
    case DRIFT_OP_GROUP_NORM:
    case DRIFT_OP_NONZERO: return drift_ref_run_opset(op, in, out, err);
    case DRIFT_OP_SCALAR:
        for (int64_t i = 0; i < out->numel; i++) y[i] = drift_aten_scalar64(op->sub, dd(in[0])[i], op->scalar);
        return DRIFT_OK;
    case DRIFT_OP_DIV: {
        drift_bcast bc;
        drift_bcast_plan(in[0], in[1], &bc);
        for (int64_t e = 0; e < bc.numel; e++) {
            int64_t oa, ob;
            drift_bcast_offsets(&bc, e, &oa, &ob);
            y[e] = dd(in[0])[oa] / dd(in[1])[ob];
        }
        return DRIFT_OK;
    }
    case DRIFT_OP_STRIDED:
        for (int64_t e = 0; e < out->numel; e++) y[e] = dd(in[0])[drift_aten_strided_index(op, out->ndim, out->shape, e)];
        return DRIFT_OK;
    case DRIFT_OP_SCATTER:
        memcpy(y, dd(in[0]), (size_t)out->numel * sizeof(double));
        for (int64_t e = 0; e < in[1]->numel; e++) y[drift_aten_strided_index(op, in[1]->ndim, in[1]->shape, e)] = dd(in[1])[e];
        return DRIFT_OK;
    case DRIFT_OP_FILL:
        for (int64_t i = 0; i < out->numel; i++)
            y[i] = drift_dtype_round_int(op->sub == 2 ? (out->numel > 1 ? op->scalar + (op->step - op->scalar) * (double)i /
                                                                              (double)(out->numel - 1)
                                                                        : op->scalar)
                                         : op->sub ? op->scalar + (double)i * op->step
                                                   : op->scalar,
                                         op->out); /* an integer fill truncates, as torch's does */
        return DRIFT_OK;
    default: break;
    }
    return drift_err_set(err, DRIFT_E_UNSUPPORTED, "op", "ref backend: op %s not implemented", drift_op_name(op->kind));
}
