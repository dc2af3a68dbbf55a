/* Shapes, input counts and variant names of the ATen-level ops (backend.h). */
#include <stdio.h>
#include <string.h>

#include "kernels/aten_internal.h"
#include "kernels/backend_impl.h"
#include "kernels/cpu/host_internal.h"

static const char *const unary_names[DRIFT_UNARY_COUNT] = {
    "neg", "exp", "sin", "cos", "rsqrt", "sqrt", "tanh", "sigmoid", "gelu_erf", "reciprocal", "abs", "relu", "mask_bias"};
static const char *const scalar_names[DRIFT_SCALAR_COUNT] = {"add", "sub", "rsub", "mul", "div", "pow", "rpow", "max", "min"};
static const char *const reduce_names[DRIFT_REDUCE_COUNT] = {"sum", "mean"};
static const char *const fill_names[3] = {"const", "iota", "linspace"};

static const char *const *sub_table(drift_op_kind k, int *n) {
    switch (k) {
    case DRIFT_OP_UNARY: *n = DRIFT_UNARY_COUNT; return unary_names;
    case DRIFT_OP_SCALAR: *n = DRIFT_SCALAR_COUNT; return scalar_names;
    case DRIFT_OP_REDUCE: *n = DRIFT_REDUCE_COUNT; return reduce_names;
    case DRIFT_OP_FILL: *n = 3; return fill_names;
    default: *n = 0; return NULL;
    }
}

const char *drift_op_sub_name(drift_op_kind k, int sub) {
    int n = 0;
    const char *const *t = sub_table(k, &n);
    return (t && sub >= 0 && sub < n) ? t[sub] : "?";
}

int drift_op_sub_parse(drift_op_kind k, const char *s) {
    int n = 0;
    const char *const *t = sub_table(k, &n);
    for (int i = 0; t && s && i < n; i++)
        if (strcmp(s, t[i]) == 0) return i;
    return -1;
}

int drift_aten_is_kind(drift_op_kind k) { return k >= DRIFT_OP_UNARY && k < DRIFT_OP_COUNT; }

void drift_aten_n_in_range(drift_op_kind k, int *lo, int *hi) {
    switch (k) {
    case DRIFT_OP_DIV: case DRIFT_OP_SCATTER: *lo = *hi = 2; return;
    case DRIFT_OP_FILL: *lo = 0; *hi = 1; return;
    default: *lo = *hi = 1; return;
    }
}


/* Largest flat index a strided region of shape (nd, shape) reaches, or -1 on
 * a negative stride or overflow. An empty region reaches start - 1. */
static int64_t region_max(const drift_op *op, int nd, const int64_t *shape) {
    if (op->start < 0) return -1;
    int64_t m = op->start;
    for (int i = 0; i < nd; i++) {
        if (shape[i] == 0) return op->start - 1;
        if (op->stride[i] < 0) return -1;
        if (op->stride[i] > 0 && shape[i] - 1 > (INT64_MAX - m) / op->stride[i]) return -1;
        m += (shape[i] - 1) * op->stride[i];
    }
    return m;
}

/* 1 if no two indices of the region map to one element: with the dims of
 * size > 1 sorted by stride, each stride exceeds the span of the smaller ones. */
static int region_injective(const drift_op *op, int nd, const int64_t *shape) {
    int idx[DRIFT_MAX_DIMS], m = 0;
    for (int i = 0; i < nd; i++)
        if (shape[i] > 1) idx[m++] = i;
    for (int i = 1; i < m; i++) /* insertion sort by stride */
        for (int j = i; j > 0 && op->stride[idx[j]] < op->stride[idx[j - 1]]; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    int64_t span = 0;
    for (int i = 0; i < m; i++) {
        int64_t s = op->stride[idx[i]];
        if (s <= span) return 0;
        span += s * (shape[idx[i]] - 1);
    }
    return 1;
}

int drift_aten_infer_shape(const drift_op *op, const drift_tensor *const *in, int *ndim, int64_t *shape,
                           drift_err *err) {
    const drift_tensor *a = op->n_in > 0 ? in[0] : NULL, *b = op->n_in > 1 ? in[1] : NULL;
    switch (op->kind) {
    case DRIFT_OP_UNARY:
        if (op->sub < 0 || op->sub >= DRIFT_UNARY_COUNT) return drift_op_shape_err(err, op, "unknown unary variant %d", op->sub);
        break;
    case DRIFT_OP_SCALAR:
        if (op->sub < 0 || op->sub >= DRIFT_SCALAR_COUNT) return drift_op_shape_err(err, op, "unknown scalar variant %d", op->sub);
        if (op->scalar != op->scalar) return drift_op_shape_err(err, op, "the scalar is NaN");
        break;
    case DRIFT_OP_DIV: {
        drift_op add = *op;
        add.kind = DRIFT_OP_ADD;
        return drift_op_infer_shape(&add, in, ndim, shape, err);
    }
    case DRIFT_OP_REDUCE: {
        if (op->sub < 0 || op->sub >= DRIFT_REDUCE_COUNT) return drift_op_shape_err(err, op, "unknown reduction %d", op->sub);
        int d = drift_op_norm_dim(op->dim, a->ndim);
        if (d < 0) return drift_op_shape_err(err, op, "dim %d out of range for a %d-d input", op->dim, a->ndim);
        *ndim = a->ndim;
        memcpy(shape, a->shape, sizeof a->shape[0] * (size_t)a->ndim);
        shape[d] = 1;
        return DRIFT_OK;
    }
    case DRIFT_OP_STRIDED: {
        if (drift_shape_numel(*ndim, shape) < 0) return drift_op_shape_err(err, op, "requested shape is invalid");
        int64_t m = region_max(op, *ndim, shape);
        if (m < 0 && drift_shape_numel(*ndim, shape) > 0) return drift_op_shape_err(err, op, "negative start, stride or overflow");
        if (m >= a->numel && drift_shape_numel(*ndim, shape) > 0)
            return drift_op_shape_err(err, op, "view reaches element %lld of a %lld-element input", (long long)m, (long long)a->numel);
        return DRIFT_OK;
    }
    case DRIFT_OP_SCATTER: {
        int64_t m = region_max(op, b->ndim, b->shape);
        if (m < 0 && b->numel > 0) return drift_op_shape_err(err, op, "negative start, stride or overflow");
        if (m >= a->numel && b->numel > 0)
            return drift_op_shape_err(err, op, "view reaches element %lld of a %lld-element base", (long long)m, (long long)a->numel);
        if (!region_injective(op, b->ndim, b->shape)) return drift_op_shape_err(err, op, "the view overlaps itself (not injective)");
        if (a->dtype != b->dtype && a->dtype != DRIFT_DTYPE_INVALID && b->dtype != DRIFT_DTYPE_INVALID)
            return drift_op_shape_err(err, op, "base %s and source %s must share a dtype", drift_dtype_name(a->dtype),
                        drift_dtype_name(b->dtype));
        break;
    }
    case DRIFT_OP_FILL:
        if (op->sub < 0 || op->sub > 2) return drift_op_shape_err(err, op, "unknown fill variant %d", op->sub);
        if (!(op->scalar == op->scalar) || !(op->step == op->step)) return drift_op_shape_err(err, op, "NaN value or step");
        if (!a) {
            if (drift_shape_numel(*ndim, shape) < 0) return drift_op_shape_err(err, op, "requested shape is invalid");
            return DRIFT_OK;
        }
        break;
    default: return drift_op_shape_err(err, op, "not an ATen-level op");
    }
    *ndim = a->ndim;
    memcpy(shape, a->shape, sizeof a->shape[0] * (size_t)a->ndim);
    return DRIFT_OK;
}
