/* Shapes, input counts and variant names of the ATen-level ops (backend.h). */
#include <stdio.h>
#include <string.h>

#include "kernels/aten_internal.h"
#include "kernels/backend_impl.h"
#include "kernels/cpu/host_internal.h"

static const char *const unary_names[DRIFT_UNARY_COUNT] = {
    "neg", "exp", "sin", "cos", "rsqrt", "sqrt", "tanh", "sigmoid", "gelu_erf", "reciprocal", "abs", "relu", "mask_bias",
    "log", "log1p", "expm1", "log2", "log10", "erf", "floor", "ceil", "round", "trunc", "sign", "tan", "asin", "acos",
    "atan", "sinh", "cosh", "exp2", "isnan", "isinf", "isfinite", "logical_not", "bitwise_not", "softplus",
    "hardsigmoid", "hardswish", "mish", "elu", "leaky_relu", "square", "frac"};
static const char *const scalar_names[DRIFT_SCALAR_COUNT] = {"add", "sub", "rsub", "mul", "div", "pow", "rpow", "max", "min"};
static const char *const reduce_names[DRIFT_REDUCE_COUNT] = {"sum", "mean", "prod", "amax", "amin", "any", "all",
                                                             "argmax", "argmin", "var"};
static const char *const fill_names[3] = {"const", "iota", "linspace"};
static const char *const binary_names[DRIFT_BINARY_COUNT] = {
    "max", "min", "pow", "atan2", "remainder", "fmod", "floordiv", "truncdiv", "bitwise_and", "bitwise_or",
    "bitwise_xor", "logical_and", "logical_or", "logical_xor", "eq", "ne", "lt", "le", "gt", "ge"};
static const char *const two_names[2] = {"0", "1"};
static const char *const put_names[5] = {"set", "accumulate", "amax", "amin", "prod"};
static const char *const sort_names[2] = {"ascending", "descending"};
static const char *const cum_names[2] = {"sum", "prod"};
static const char *const softmax_names[2] = {"softmax", "log_softmax"};

static const char *const *sub_table(drift_op_kind k, int *n) {
    switch (k) {
    case DRIFT_OP_UNARY: *n = DRIFT_UNARY_COUNT; return unary_names;
    case DRIFT_OP_SCALAR: *n = DRIFT_SCALAR_COUNT; return scalar_names;
    case DRIFT_OP_REDUCE: *n = DRIFT_REDUCE_COUNT; return reduce_names;
    case DRIFT_OP_FILL: *n = 3; return fill_names;
    case DRIFT_OP_BINARY: *n = DRIFT_BINARY_COUNT; return binary_names;
    case DRIFT_OP_PUT: *n = 5; return put_names;
    case DRIFT_OP_ARGSORT: *n = 2; return sort_names;
    case DRIFT_OP_CUMSUM: *n = 2; return cum_names;
    case DRIFT_OP_SOFTMAX: *n = 2; return softmax_names;
    case DRIFT_OP_WHERE: case DRIFT_OP_TAKE: case DRIFT_OP_BMM: case DRIFT_OP_GROUP_NORM: case DRIFT_OP_NONZERO:
        *n = 1; return two_names;
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
    case DRIFT_OP_DIV: case DRIFT_OP_SCATTER: case DRIFT_OP_BINARY: case DRIFT_OP_TAKE: *lo = *hi = 2; return;
    case DRIFT_OP_FILL: *lo = 0; *hi = 1; return;
    case DRIFT_OP_WHERE: case DRIFT_OP_PUT: *lo = *hi = 3; return;
    case DRIFT_OP_BMM: *lo = 2; *hi = 3; return;
    case DRIFT_OP_GROUP_NORM: *lo = 1; *hi = 3; return;
    default: *lo = *hi = 1; return;
    }
}

/* Broadcast shape of n tensors (numpy rules, right-aligned) into (*nd, shape); -1 if incompatible. */
static int bcast_shape(const drift_tensor *const *t, int n, int *nd, int64_t *shape) {
    int m = 0;
    for (int i = 0; i < n; i++)
        if (t[i]->ndim > m) m = t[i]->ndim;
    for (int d = 0; d < m; d++) {
        int64_t v = 1;
        for (int i = 0; i < n; i++) {
            int k = d - (m - t[i]->ndim);
            if (k < 0) continue;
            int64_t s = t[i]->shape[k];
            if (s == 1) continue;
            if (v != 1 && v != s) return -1;
            v = s;
        }
        shape[d] = v;
    }
    *nd = m;
    return 0;
}


/* Largest flat index a strided region of shape (nd, shape) reaches, or -1
 * when the region reaches below 0 (a negative stride walks down from start:
 * flip) or overflows. An empty region reaches start - 1. */
static int64_t region_max(const drift_op *op, int nd, const int64_t *shape) {
    if (op->start < 0) return -1;
    int64_t hi = op->start, lo = op->start;
    const int64_t lim = (int64_t)1 << 60;
    for (int i = 0; i < nd; i++) {
        if (shape[i] == 0) return op->start - 1;
        int64_t st = op->stride[i];
        if (st > lim || st < -lim || shape[i] > lim) return -1;
        if (st > 0) {
            if (shape[i] - 1 > (lim - hi) / st) return -1;
            hi += (shape[i] - 1) * st;
        } else if (st < 0) {
            if (shape[i] - 1 > (lim + lo) / -st) return -1;
            lo += (shape[i] - 1) * st;
        }
    }
    return lo < 0 ? -1 : hi;
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
        if (drift_unary_is_bool(op->sub) && op->out != DRIFT_BOOL && op->out != DRIFT_DTYPE_INVALID)
            return drift_op_shape_err(err, op, "%s gives bool, not %s", drift_op_sub_name(op->kind, op->sub),
                                      drift_dtype_name(op->out));
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
        int64_t span = op->length > 0 ? op->length : 1;
        if (d + span > a->ndim) return drift_op_shape_err(err, op, "%lld dims from dim %d exceed a %d-d input",
                                                          (long long)span, d, a->ndim);
        *ndim = a->ndim;
        memcpy(shape, a->shape, sizeof a->shape[0] * (size_t)a->ndim);
        for (int64_t i = 0; i < span; i++) shape[d + i] = 1;
        if ((op->sub == DRIFT_REDUCE_ANY || op->sub == DRIFT_REDUCE_ALL) && op->out != DRIFT_BOOL &&
            op->out != DRIFT_DTYPE_INVALID)
            return drift_op_shape_err(err, op, "any/all give bool, not %s", drift_dtype_name(op->out));
        if ((op->sub == DRIFT_REDUCE_ARGMAX || op->sub == DRIFT_REDUCE_ARGMIN) && op->out != DRIFT_I64 &&
            op->out != DRIFT_DTYPE_INVALID)
            return drift_op_shape_err(err, op, "argmax/argmin give int64, not %s", drift_dtype_name(op->out));
        return DRIFT_OK;
    }
    case DRIFT_OP_BINARY:
    case DRIFT_OP_WHERE: {
        if (op->kind == DRIFT_OP_BINARY && (op->sub < 0 || op->sub >= DRIFT_BINARY_COUNT))
            return drift_op_shape_err(err, op, "unknown binary variant %d", op->sub);
        if (bcast_shape(in, op->n_in, ndim, shape) < 0) return drift_op_shape_err(err, op, "operand shapes do not broadcast");
        if (op->kind == DRIFT_OP_BINARY && drift_binary_is_bool(op->sub) && op->out != DRIFT_BOOL &&
            op->out != DRIFT_DTYPE_INVALID)
            return drift_op_shape_err(err, op, "%s gives bool, not %s", drift_op_sub_name(op->kind, op->sub),
                                      drift_dtype_name(op->out));
        if (op->kind == DRIFT_OP_WHERE && in[0]->dtype != DRIFT_BOOL && in[0]->dtype != DRIFT_DTYPE_INVALID)
            return drift_op_shape_err(err, op, "the condition is %s, not bool", drift_dtype_name(in[0]->dtype));
        return DRIFT_OK;
    }
    case DRIFT_OP_TAKE:
        if (b->dtype != DRIFT_I64 && b->dtype != DRIFT_DTYPE_INVALID)
            return drift_op_shape_err(err, op, "the index is %s, not int64", drift_dtype_name(b->dtype));
        *ndim = b->ndim;
        memcpy(shape, b->shape, sizeof b->shape[0] * (size_t)b->ndim);
        return DRIFT_OK;
    case DRIFT_OP_PUT:
        if (op->sub < 0 || op->sub > 4) return drift_op_shape_err(err, op, "unknown put variant %d", op->sub);
        if (b->dtype != DRIFT_I64 && b->dtype != DRIFT_DTYPE_INVALID)
            return drift_op_shape_err(err, op, "the index is %s, not int64", drift_dtype_name(b->dtype));
        if (b->numel != in[2]->numel)
            return drift_op_shape_err(err, op, "%lld indices for %lld values", (long long)b->numel, (long long)in[2]->numel);
        break;
    case DRIFT_OP_ARGSORT:
    case DRIFT_OP_CUMSUM:
    case DRIFT_OP_SOFTMAX:
        if (op->sub < 0 || op->sub > 1) return drift_op_shape_err(err, op, "unknown variant %d", op->sub);
        if (a->ndim > 0 && drift_op_norm_dim(op->dim, a->ndim) < 0)
            return drift_op_shape_err(err, op, "dim %d out of range for a %d-d input", op->dim, a->ndim);
        if (op->kind == DRIFT_OP_ARGSORT && op->out != DRIFT_I64 && op->out != DRIFT_DTYPE_INVALID)
            return drift_op_shape_err(err, op, "argsort gives int64, not %s", drift_dtype_name(op->out));
        if (op->kind == DRIFT_OP_ARGSORT && (op->length < 0 || (a->ndim > 0 && op->length > a->shape[drift_op_norm_dim(op->dim, a->ndim)]) ||
                                             op->start < 0 || op->start > 1))
            return drift_op_shape_err(err, op, "topk order: k = %lld (expected 0..the dim's size), sorted = %lld (0 or 1)",
                                      (long long)op->length, (long long)op->start);
        break;
    case DRIFT_OP_BMM: {
        if (a->ndim < 2 || b->ndim != a->ndim) return drift_op_shape_err(err, op, "operands must be [..., M, K] and [..., K, N]");
        for (int i = 0; i < a->ndim - 2; i++)
            if (a->shape[i] != b->shape[i]) return drift_op_shape_err(err, op, "batch dims differ");
        if (a->shape[a->ndim - 1] != b->shape[b->ndim - 2]) return drift_op_shape_err(err, op, "inner dims differ");
        *ndim = a->ndim;
        memcpy(shape, a->shape, sizeof a->shape[0] * (size_t)a->ndim);
        shape[a->ndim - 1] = b->shape[b->ndim - 1];
        if (op->n_in > 2) {
            drift_tensor o;
            memset(&o, 0, sizeof o);
            o.ndim = *ndim;
            memcpy(o.shape, shape, sizeof o.shape);
            const drift_tensor *pair[2] = {&o, in[2]};
            int bn;
            int64_t bs[DRIFT_MAX_DIMS];
            if (bcast_shape(pair, 2, &bn, bs) < 0 || bn != *ndim || memcmp(bs, shape, sizeof bs[0] * (size_t)bn))
                return drift_op_shape_err(err, op, "the added term does not broadcast to the product");
        }
        return DRIFT_OK;
    }
    case DRIFT_OP_GROUP_NORM: {
        if (a->ndim < 2) return drift_op_shape_err(err, op, "group_norm needs [N, C, ...]");
        int64_t C = a->shape[1], G = op->length;
        if (G < 1 || C % G) return drift_op_shape_err(err, op, "%lld groups do not divide %lld channels", (long long)G, (long long)C);
        for (int i = 1; i < op->n_in; i++)
            if (in[i]->ndim != 1 || in[i]->shape[0] != C) return drift_op_shape_err(err, op, "weight/bias must be [C]");
        break;
    }
    case DRIFT_OP_NONZERO:
        if (drift_shape_numel(*ndim, shape) < 0 || *ndim != 2 || shape[1] != a->ndim)
            return drift_op_shape_err(err, op, "nonzero's requested shape must be [n, %d]", a->ndim);
        return DRIFT_OK;
    case DRIFT_OP_STRIDED: {
        if (drift_shape_numel(*ndim, shape) < 0) return drift_op_shape_err(err, op, "requested shape is invalid");
        int64_t m = region_max(op, *ndim, shape);
        if (m < 0 && drift_shape_numel(*ndim, shape) > 0) return drift_op_shape_err(err, op, "the view reaches below element 0 or overflows");
        if (m >= a->numel && drift_shape_numel(*ndim, shape) > 0)
            return drift_op_shape_err(err, op, "view reaches element %lld of a %lld-element input", (long long)m, (long long)a->numel);
        return DRIFT_OK;
    }
    case DRIFT_OP_SCATTER: {
        int64_t m = region_max(op, b->ndim, b->shape);
        if (m < 0 && b->numel > 0) return drift_op_shape_err(err, op, "the view reaches below element 0 or overflows");
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
