/* The cuda backend's dispatch of the ATen-level ops (backend.h): the
 * elementwise, division, reduction and fill kernels of aten_ops.cu, and
 * STRIDED / SCATTER as strided copies (layout.cu), which move bits and so
 * are bitwise equal to the host backends. */
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

static void contig(int nd, const int64_t *shape, int64_t *st) {
    int64_t c = 1;
    for (int d = nd - 1; d >= 0; d--) {
        st[d] = c;
        c *= shape[d];
    }
}

static int copy_run(dcu_ctx *ctx, dcu_copy *c, const char *where, drift_err *err) {
    if (c->nd == 0) { /* one element */
        c->nd = 1;
        c->shape[0] = 1;
        c->ss[0] = c->ds[0] = 1;
    }
    dcu_copy_simplify(c);
    return dcu_check(dcu_launch_copy(ctx, c), err, where, "strided copy kernel");
}

int dcu_run_aten(dcu_ctx *ctx, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                 const char *where, drift_err *err) {
    const drift_tensor *x = op->n_in > 0 ? in[0] : NULL;
    switch (op->kind) {
    case DRIFT_OP_UNARY:
    case DRIFT_OP_SCALAR:
        return dcu_check(dcu_launch_aten_ew(ctx, op->kind == DRIFT_OP_SCALAR, op->sub, x->data, x->dtype, out->data,
                                            out->dtype, out->numel, op->scalar),
                         err, where, "elementwise kernel");
    case DRIFT_OP_DIV: {
        drift_bcast bc;
        drift_bcast_plan(in[0], in[1], &bc);
        return dcu_check(dcu_launch_div(ctx, in[0]->data, in[0]->dtype, in[1]->data, in[1]->dtype, out->data,
                                        out->dtype, &bc),
                         err, where, "division kernel");
    }
    case DRIFT_OP_REDUCE: {
        int d = op->dim < 0 ? op->dim + x->ndim : op->dim;
        int64_t outer = 1, inner = 1;
        for (int i = 0; i < d; i++) outer *= x->shape[i];
        for (int i = d + 1; i < x->ndim; i++) inner *= x->shape[i];
        return dcu_check(dcu_launch_reduce(ctx, x->data, x->dtype, out->data, out->dtype, outer, x->shape[d], inner,
                                           op->sub == DRIFT_REDUCE_MEAN),
                         err, where, "reduction kernel");
    }
    case DRIFT_OP_FILL:
        return dcu_check(dcu_launch_fill(ctx, out->data, out->dtype, out->numel, op->sub, op->scalar, op->step), err,
                         where, "fill kernel");
    case DRIFT_OP_STRIDED: {
        dcu_copy c;
        memset(&c, 0, sizeof c);
        c.src = x->data, c.ts = x->dtype, c.dst = out->data, c.td = out->dtype;
        c.nd = out->ndim;
        memcpy(c.shape, out->shape, sizeof c.shape);
        memcpy(c.ss, op->stride, sizeof c.ss);
        contig(out->ndim, out->shape, c.ds);
        c.soff = op->start;
        return copy_run(ctx, &c, where, err);
    }
    case DRIFT_OP_SCATTER: {
        const drift_tensor *src = in[1];
        dcu_copy c;
        memset(&c, 0, sizeof c); /* out = base */
        c.src = x->data, c.ts = x->dtype, c.dst = out->data, c.td = out->dtype;
        c.nd = 1;
        c.shape[0] = out->numel;
        c.ss[0] = c.ds[0] = 1;
        int rc = copy_run(ctx, &c, where, err);
        if (rc || src->numel == 0) return rc;
        memset(&c, 0, sizeof c); /* then the view's elements */
        c.src = src->data, c.ts = src->dtype, c.dst = out->data, c.td = out->dtype;
        c.nd = src->ndim;
        memcpy(c.shape, src->shape, sizeof c.shape);
        contig(src->ndim, src->shape, c.ss);
        memcpy(c.ds, op->stride, sizeof c.ds);
        c.doff = op->start;
        return copy_run(ctx, &c, where, err);
    }
    default: break;
    }
    return drift_err_set(err, DRIFT_E_UNSUPPORTED, where, "cuda backend: op %s not implemented", drift_op_name(op->kind));
}
