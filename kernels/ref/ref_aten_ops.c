/* The ref backend's ATen-level ops (backend.h, aten_internal.h): fp64
 * storage, fp64 math, never rounds. Division by a scalar is a true
 * division here (the oracle is the mathematical value). */
#include <math.h>
#include <string.h>

#include "kernels/aten_internal.h"
#include "kernels/aten_math64.h"
#include "kernels/backend_impl.h"
#include "kernels/cpu/host_internal.h"

static inline double *dd(const drift_tensor *t) { return (double *)t->data; }


int drift_ref_run_aten(int nthreads, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                       drift_err *err) {
    (void)nthreads;
    double *y = dd(out);
    switch (op->kind) {
    case DRIFT_OP_UNARY:
        for (int64_t i = 0; i < out->numel; i++) y[i] = drift_aten_unary64(op->sub, dd(in[0])[i]);
        return DRIFT_OK;
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
    case DRIFT_OP_REDUCE: {
        const drift_tensor *x = in[0];
        const int d = drift_op_norm_dim(op->dim, x->ndim);
        int64_t outer = 1, inner = 1, n = x->shape[d];
        for (int i = 0; i < d; i++) outer *= x->shape[i];
        for (int i = d + 1; i < x->ndim; i++) inner *= x->shape[i];
        for (int64_t o = 0; o < outer; o++)
            for (int64_t k = 0; k < inner; k++) {
                double s = 0.0;
                for (int64_t i = 0; i < n; i++) s += dd(x)[(o * n + i) * inner + k];
                y[o * inner + k] = op->sub == DRIFT_REDUCE_MEAN ? s / (double)n : s;
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
            y[i] = op->sub == 2 ? (out->numel > 1 ? op->scalar + (op->step - op->scalar) * (double)i / (double)(out->numel - 1)
                                                  : op->scalar)
                   : op->sub ? op->scalar + (double)i * op->step
                             : op->scalar;
        return DRIFT_OK;
    default: break;
    }
    return drift_err_set(err, DRIFT_E_UNSUPPORTED, "op", "ref backend: op %s not implemented", drift_op_name(op->kind));
}
