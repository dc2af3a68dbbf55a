/* Lowerings of the closed opset's newer ops (aten_registry.c names them):
 * comparisons and logic, where/masked fills, the wider unary and binary
 * families, reductions beyond sum/mean, softmax, cumsum, argsort, matmuls,
 * group norm, topk/sort, and indexing (embedding, index_select, index, gather,
 * index_put, index_copy/index_add, scatter/scatter_add/scatter_reduce, nonzero,
 * nonzero_numpy, fill, constant padding).
 *
 * Integer results keep an integer dtype whatever the plan (DRIFT_RULE_FIXED
 * with int64 or bool: replay/ir/assign.c); indexing lowers to TAKE/PUT over
 * flat int64 indices built here from iotas, so a gather is exact on every
 * backend. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "formats/alloc.h"
#include "replay/capture/aten_lower_internal.h"

/* ---- small builders ------------------------------------------------------------ */

static int emit_fixed(lctx *c, drift_op_kind k, const drift_op *attrs, int n_in, const int *in, drift_dtype dt,
                      int *id) {
    drift_node_spec s;
    drift_node_spec_init(&s, k);
    if (attrs) s.op = *attrs;
    s.op.kind = k;
    s.op.n_in = n_in;
    s.op.compute = s.op.out = DRIFT_DTYPE_INVALID;
    for (int i = 0; i < n_in; i++) s.in[i] = in[i];
    s.rule = DRIFT_RULE_FIXED;
    s.rule_dtype = dt;
    return al_add_node(c, &s, id);
}

/* x as int64 (indices): a cast, exact for the integer-valued floats buffers carry. */
static int as_index(lctx *c, int x, int *id) { return al_emit_cast(c, x, DRIFT_RULE_CAST_TO, DRIFT_I64, -1, id); }

static int as_bool(lctx *c, int x, int *id) { return al_emit_cast(c, x, DRIFT_RULE_CAST_TO, DRIFT_BOOL, -1, id); }

/* aten_lower_internal.h */
int al_fill_like(lctx *c, int x, double value, int *id) {
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_FILL);
    s.op.n_in = 1;
    s.op.scalar = value;
    s.in[0] = x;
    s.rule = DRIFT_RULE_LIKE_INPUT0;
    return al_add_node(c, &s, id);
}

/* A tensor of shape (nd, shape), dtype dt: value, or an iota value + i * step. */
static int fill_shape(lctx *c, int nd, const int64_t *shape, drift_dtype dt, int iota, double value, double step,
                      int *id) {
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_FILL);
    s.op.n_in = 0;
    s.op.sub = iota;
    s.op.scalar = value;
    s.op.step = step;
    s.rule = DRIFT_RULE_FIXED;
    s.rule_dtype = dt;
    s.ndim = nd ? nd : 1;
    if (nd) memcpy(s.shape, shape, sizeof(int64_t) * (size_t)nd);
    else s.shape[0] = 1;
    int rc = al_add_node(c, &s, id);
    if (!rc && nd == 0) rc = al_emit_view_to(c, *id, 0, shape, id);
    return rc;
}

static const drift_value *val_of(lctx *c, int id) { return drift_graph_value(c->out, id); }

/* 1 if FX node j was captured with an integer or bool dtype. */
static int captured_int(const lctx *c, int j) {
    const char *d = al_val_dtype_str(&c->g->nodes[j]);
    return d && (!strncmp(d, "int", 3) || !strncmp(d, "uint", 4) || !strcmp(d, "bool"));
}

/* A 0-d operand next to a dimensioned one takes the other's dtype (TensorIterator). */
static int match_0d(lctx *c, int *a, int *b) {
    const drift_value va_c = *val_of(c, *a), *va = &va_c, vb_c = *val_of(c, *b), *vb = &vb_c; /* copies: emitting a node may move the graph's values */
    if (va->ndim == 0 && vb->ndim > 0) return al_emit_cast(c, *a, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, *b, a);
    if (vb->ndim == 0 && va->ndim > 0) return al_emit_cast(c, *b, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, *a, b);
    return DRIFT_OK;
}

/* Two operands, tensors or numbers (a number becomes a fill like the other operand). */
static int two_operands(lctx *c, const char *ka, const char *kb, int *a, int *b) {
    operand x, y;
    int rc;
    if ((rc = al_get_operand(c, al_arg(c, 0, ka), ka, &x)) || (rc = al_get_operand(c, al_arg(c, 1, kb), kb, &y))) return rc;
    if (x.is_num && y.is_num) return FAIL(c, "both operands are numbers");
    if (x.is_num && (rc = al_fill_like(c, y.id, x.num, &x.id))) return rc;
    if (y.is_num && (rc = al_fill_like(c, x.id, y.num, &y.id))) return rc;
    *a = x.id;
    *b = y.id;
    return match_0d(c, a, b);
}

static void contig_strides(int nd, const int64_t *shape, int64_t *st) {
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        st[i] = s;
        s *= shape[i];
    }
}

/* Flat int64 indices of shape (nd, shape) into a contiguous tensor of strides st:
 * idx * st[d] + sum_{k != d} i_k * st[k]. idx (int64) has shape or broadcasts to it. */
static int flat_index(lctx *c, int nd, const int64_t *shape, const int64_t *st, int d, int idx, int *out) {
    int rc, f;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.sub = DRIFT_SCALAR_MUL;
    op.scalar = (double)st[d];
    if ((rc = al_emit(c, DRIFT_OP_SCALAR, &op, 1, &idx, DRIFT_RULE_PROMOTE, &f))) return rc;
    const drift_value fv_c = *val_of(c, f), *fv = &fv_c; /* copies: emitting a node may move the graph's values */
    int full = fv->ndim == nd;
    for (int k = 0; full && k < nd; k++) full = fv->shape[k] == shape[k];
    if (!full) { /* zeros of the full shape + the broadcast index */
        int z, in[2];
        if ((rc = fill_shape(c, nd, shape, DRIFT_I64, 0, 0.0, 0.0, &z))) return rc;
        in[0] = z, in[1] = f;
        if ((rc = al_emit(c, DRIFT_OP_ADD, NULL, 2, in, DRIFT_RULE_PROMOTE, &f))) return rc;
    }
    for (int k = 0; k < nd; k++) {
        if (k == d || shape[k] == 1) continue;
        int io, in[2];
        int64_t vs[DRIFT_MAX_DIMS];
        for (int i = 0; i < nd; i++) vs[i] = i == k ? shape[k] : 1;
        if ((rc = fill_shape(c, 1, &shape[k], DRIFT_I64, 1, 0.0, (double)st[k], &io))) return rc;
        if ((rc = al_emit_view_to(c, io, nd, vs, &io))) return rc;
        in[0] = f, in[1] = io;
        if ((rc = al_emit(c, DRIFT_OP_ADD, NULL, 2, in, DRIFT_RULE_PROMOTE, &f))) return rc;
    }
    *out = f;
    return DRIFT_OK;
}

/* ---- structure ------------------------------------------------------------------ */

int al_lower_tuple(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    const drift_json_value *list = al_arg(c, 0, NULL);
    if (!list || list->type != DRIFT_JSON_ARRAY || list->n_items > 4096) return FAIL(c, "drift.tuple: expected [outputs]");
    fxv *f = &c->fx[c->cur];
    f->multi = drift_calloc(list->n_items ? list->n_items : 1, sizeof *f->multi);
    if (!f->multi) return drift_err_set(c->err, DRIFT_E_NOMEM, "aten", "out of memory");
    f->n_multi = (int)list->n_items;
    f->kind = FX_MULTI;
    for (size_t i = 0; i < list->n_items; i++) {
        int j = al_ref_of(c, &list->items[i]);
        if (j >= 0 && c->fx[j].kind == FX_TENSOR) f->multi[i] = c->fx[j].t;
        else f->multi[i].root = -1; /* not a tensor: getitem gives a non-tensor */
    }
    return DRIFT_OK;
}

int al_lower_constant(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    const drift_json_value *data = al_arg(c, -1, "data");
    int64_t shape[DRIFT_MAX_DIMS];
    int nd = 0, rc, given, is_int, id;
    drift_dtype dt;
    if ((rc = al_get_ints(c, al_arg(c, -1, "shape"), "shape", shape, &nd))) return rc;
    if ((rc = al_get_dtype(c, al_arg(c, -1, "dtype"), "dtype", &given, &dt, &is_int))) return rc;
    if (!given) return FAIL(c, "drift.constant: a dtype is needed");
    if (!data || data->type != DRIFT_JSON_ARRAY || data->n_items == 0) return FAIL(c, "drift.constant: expected data");
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    if ((int64_t)data->n_items != n) return FAIL(c, "drift.constant: %zu values for %lld elements", data->n_items, (long long)n);
    double v0, v1 = 0, step = 0;
    if ((rc = al_get_num(c, &data->items[0], "data[0]", 0, &v0))) return rc;
    if (n > 1 && (rc = al_get_num(c, &data->items[1], "data[1]", 0, &v1))) return rc;
    int constant = 1, ramp = n > 1;
    if (n > 1) step = v1 - v0;
    for (size_t i = 1; i < data->n_items; i++) {
        double v;
        if ((rc = al_get_num(c, &data->items[i], "data", 0, &v))) return rc;
        constant &= v == v0 || (v != v && v0 != v0);
        ramp &= v == v0 + step * (double)i;
    }
    if (!constant && !ramp)
        return FAIL(c, "drift.constant of %lld values that are neither one value nor a ramp is not supported yet", (long long)n);
    if ((rc = fill_shape(c, nd, shape, dt, !constant, v0, step, &id))) return rc;
    return al_set_result(c, id);
}

/* aten.copy(self, src): src cast to self's dtype and broadcast to its shape. */
int al_lower_copy_out(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int x, s, rc;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x)) || (rc = al_mat_arg(c, al_arg(c, 1, "src"), "src", &s))) return rc;
    if ((rc = al_emit_cast(c, s, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, x, &s))) return rc;
    int in[2] = {s, -1}, z;
    /* broadcast: zeros like self + src (ADD broadcasts in1 against in0), exact */
    if ((rc = al_fill_like(c, x, 0.0, &z))) return rc;
    in[0] = z, in[1] = s;
    if ((rc = al_emit(c, DRIFT_OP_ADD, NULL, 2, in, DRIFT_RULE_LIKE_INPUT0, &s))) return rc;
    return al_set_result(c, s);
}

/* ---- elementwise ------------------------------------------------------------------ */

int al_lower_unary_ext(lctx *c, const char *base, const char *target) {
    static const struct {
        const char *op;
        int sub;
    } map[] = {{"log", DRIFT_UNARY_LOG},         {"log1p", DRIFT_UNARY_LOG1P},       {"expm1", DRIFT_UNARY_EXPM1},
               {"log2", DRIFT_UNARY_LOG2},       {"log10", DRIFT_UNARY_LOG10},       {"erf", DRIFT_UNARY_ERF},
               {"floor", DRIFT_UNARY_FLOOR},     {"ceil", DRIFT_UNARY_CEIL},         {"round", DRIFT_UNARY_ROUND},
               {"trunc", DRIFT_UNARY_TRUNC},     {"sign", DRIFT_UNARY_SIGN},         {"tan", DRIFT_UNARY_TAN},
               {"asin", DRIFT_UNARY_ASIN},       {"acos", DRIFT_UNARY_ACOS},         {"atan", DRIFT_UNARY_ATAN},
               {"sinh", DRIFT_UNARY_SINH},       {"cosh", DRIFT_UNARY_COSH},         {"exp2", DRIFT_UNARY_EXP2},
               {"isnan", DRIFT_UNARY_ISNAN},     {"isinf", DRIFT_UNARY_ISINF},       {"isfinite", DRIFT_UNARY_ISFINITE},
               {"logical_not", DRIFT_UNARY_LOGICAL_NOT}, {"bitwise_not", DRIFT_UNARY_BITWISE_NOT},
               {"softplus", DRIFT_UNARY_SOFTPLUS}, {"hardsigmoid", DRIFT_UNARY_HARDSIGMOID},
               {"hardswish", DRIFT_UNARY_HARDSWISH}, {"mish", DRIFT_UNARY_MISH}, {"elu", DRIFT_UNARY_ELU},
               {"leaky_relu", DRIFT_UNARY_LEAKY_RELU}, {"square", DRIFT_UNARY_SQUARE}, {"frac", DRIFT_UNARY_FRAC}};
    int x, id, rc;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x))) return rc;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.sub = -1;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(base, map[i].op)) op.sub = map[i].sub;
    if (op.sub < 0) return FAIL(c, "internal: unary %s", base);
    if (op.sub == DRIFT_UNARY_SOFTPLUS) {
        if ((rc = al_get_num(c, al_arg(c, 1, "beta"), "beta", 1.0, &op.scalar)) ||
            (rc = al_get_num(c, al_arg(c, 2, "threshold"), "threshold", 20.0, &op.step)))
            return rc;
    } else if (op.sub == DRIFT_UNARY_ELU) {
        double scale, iscale;
        if ((rc = al_get_num(c, al_arg(c, 1, "alpha"), "alpha", 1.0, &op.scalar)) ||
            (rc = al_get_num(c, al_arg(c, 2, "scale"), "scale", 1.0, &scale)) ||
            (rc = al_get_num(c, al_arg(c, 3, "input_scale"), "input_scale", 1.0, &iscale)))
            return rc;
        if (scale != 1.0 || iscale != 1.0) return FAIL(c, "elu with scale or input_scale other than 1 is not supported");
    } else if (op.sub == DRIFT_UNARY_LEAKY_RELU) {
        if ((rc = al_get_num(c, al_arg(c, 1, "negative_slope"), "negative_slope", 0.01, &op.scalar))) return rc;
    } else if (op.sub == DRIFT_UNARY_ROUND) {
        int64_t dec;
        if ((rc = al_get_int(c, al_arg(c, -1, "decimals"), "decimals", 0, &dec))) return rc;
        if (dec) return FAIL(c, "round with decimals = %lld is not supported", (long long)dec);
    }
    if (op.sub == DRIFT_UNARY_BITWISE_NOT) { /* of a bool tensor: logical not (~True is False, not -2) */
        const int j = al_ref_of(c, al_arg(c, 0, "self"));
        const char *d = j >= 0 ? al_val_dtype_str(&c->g->nodes[j]) : NULL;
        if (d && !strcmp(d, "bool")) op.sub = DRIFT_UNARY_LOGICAL_NOT;
    }
    if (drift_unary_is_bool(op.sub)) rc = emit_fixed(c, DRIFT_OP_UNARY, &op, 1, &x, DRIFT_BOOL, &id);
    else if (op.sub == DRIFT_UNARY_BITWISE_NOT) rc = al_emit(c, DRIFT_OP_UNARY, &op, 1, &x, DRIFT_RULE_LIKE_INPUT0, &id);
    else rc = al_emit(c, DRIFT_OP_UNARY, &op, 1, &x, al_rule_of(target), &id);
    return rc ? rc : al_set_result(c, id);
}

int al_lower_binary_ext(lctx *c, const char *base, const char *target) {
    static const struct {
        const char *op;
        int sub;
    } map[] = {{"maximum", DRIFT_BINARY_MAX},     {"minimum", DRIFT_BINARY_MIN},     {"fmax", DRIFT_BINARY_MAX},
               {"fmin", DRIFT_BINARY_MIN},        {"atan2", DRIFT_BINARY_ATAN2},     {"remainder", DRIFT_BINARY_REM},
               {"fmod", DRIFT_BINARY_FMOD},       {"floor_divide", DRIFT_BINARY_FLOORDIV},
               {"bitwise_and", DRIFT_BINARY_BITAND}, {"bitwise_or", DRIFT_BINARY_BITOR},
               {"bitwise_xor", DRIFT_BINARY_BITXOR}, {"logical_and", DRIFT_BINARY_LOGAND},
               {"logical_or", DRIFT_BINARY_LOGOR}, {"logical_xor", DRIFT_BINARY_LOGXOR}, {"eq", DRIFT_BINARY_EQ},
               {"ne", DRIFT_BINARY_NE},           {"lt", DRIFT_BINARY_LT},           {"le", DRIFT_BINARY_LE},
               {"gt", DRIFT_BINARY_GT},           {"ge", DRIFT_BINARY_GE},           {"div", -1},
               {"pow", DRIFT_BINARY_POW}};
    drift_op op;
    memset(&op, 0, sizeof op);
    op.sub = -2;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(base, map[i].op)) op.sub = map[i].sub;
    int rc, in[2], id;
    if (op.sub == -1) { /* div with a rounding mode */
        const char *mode = NULL;
        if ((rc = al_get_str(c, al_arg(c, -1, "rounding_mode"), "rounding_mode", NULL, &mode))) return rc;
        if (!mode || (strcmp(mode, "floor") && strcmp(mode, "trunc")))
            return FAIL(c, "rounding_mode='%s': expected 'floor' or 'trunc'", mode ? mode : "None");
        op.sub = !strcmp(mode, "floor") ? DRIFT_BINARY_FLOORDIV : DRIFT_BINARY_TRUNCDIV;
    }
    if (op.sub < 0) return FAIL(c, "internal: binary %s", base);
    if ((rc = two_operands(c, "self", "other", &in[0], &in[1]))) {
        /* pow.Tensor_Tensor names its operands self/exponent; remainder.Scalar_Tensor self/other */
        if (op.sub != DRIFT_BINARY_POW) return rc;
        if ((rc = two_operands(c, "self", "exponent", &in[0], &in[1]))) return rc;
    }
    (void)target;
    if (drift_binary_is_bool(op.sub)) rc = emit_fixed(c, DRIFT_OP_BINARY, &op, 2, in, DRIFT_BOOL, &id);
    else rc = al_emit(c, DRIFT_OP_BINARY, &op, 2, in, op.sub == DRIFT_BINARY_POW ? DRIFT_RULE_AUTOCAST_FP32 : DRIFT_RULE_PROMOTE, &id);
    if (!rc && base[0] == 'f' && (!strcmp(base, "fmax") || !strcmp(base, "fmin"))) {
        /* fmax/fmin ignore a NaN operand: where(isnan(a), b, where(isnan(b), a, max(a, b))) */
        drift_op isnan;
        memset(&isnan, 0, sizeof isnan);
        isnan.sub = DRIFT_UNARY_ISNAN;
        int na, nb, w[3];
        if ((rc = emit_fixed(c, DRIFT_OP_UNARY, &isnan, 1, &in[0], DRIFT_BOOL, &na)) ||
            (rc = emit_fixed(c, DRIFT_OP_UNARY, &isnan, 1, &in[1], DRIFT_BOOL, &nb)))
            return rc;
        w[0] = nb, w[1] = in[0], w[2] = id;
        if ((rc = al_emit(c, DRIFT_OP_WHERE, NULL, 3, w, DRIFT_RULE_PROMOTE, &id))) return rc;
        w[0] = na, w[1] = in[1], w[2] = id;
        rc = al_emit(c, DRIFT_OP_WHERE, NULL, 3, w, DRIFT_RULE_PROMOTE, &id);
    }
    return rc ? rc : al_set_result(c, id);
}

int al_lower_where(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int cond, in[3], rc, id;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "condition"), "condition", &cond))) return rc;
    if ((rc = as_bool(c, cond, &in[0]))) return rc;
    operand a, b;
    if ((rc = al_get_operand(c, al_arg(c, 1, "self"), "self", &a)) || (rc = al_get_operand(c, al_arg(c, 2, "other"), "other", &b)))
        return rc;
    if (a.is_num && b.is_num) {
        double av = a.num, bv = b.num;
        drift_dtype dt;
        if ((rc = al_val_dtype(c, &dt))) return rc;
        if ((rc = fill_shape(c, 0, NULL, dt, 0, av, 0, &a.id)) || (rc = fill_shape(c, 0, NULL, dt, 0, bv, 0, &b.id))) return rc;
    } else {
        if (a.is_num && (rc = al_fill_like(c, b.id, a.num, &a.id))) return rc;
        if (b.is_num && (rc = al_fill_like(c, a.id, b.num, &b.id))) return rc;
        if ((rc = match_0d(c, &a.id, &b.id))) return rc;
    }
    in[1] = a.id, in[2] = b.id;
    if ((rc = al_emit(c, DRIFT_OP_WHERE, NULL, 3, in, DRIFT_RULE_PROMOTE, &id))) return rc;
    return al_set_result(c, id);
}

int al_lower_masked_fill(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int x, m, in[3], rc, id;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x)) || (rc = al_mat_arg(c, al_arg(c, 1, "mask"), "mask", &m)))
        return rc;
    if ((rc = as_bool(c, m, &in[0]))) return rc;
    operand v;
    if ((rc = al_get_operand(c, al_arg(c, 2, "value"), "value", &v))) return rc;
    if (v.is_num) rc = al_fill_like(c, x, v.num, &in[1]);
    else rc = al_emit_cast(c, v.id, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, x, &in[1]);
    if (rc) return rc;
    in[2] = x;
    if ((rc = al_emit(c, DRIFT_OP_WHERE, NULL, 3, in, DRIFT_RULE_LIKE_INPUT0, &id))) return rc;
    /* WHERE's rule: in1's dtype is x's; LIKE_INPUT0 would take the mask's, so cast back */
    if ((rc = al_emit_cast(c, id, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, x, &id))) return rc;
    return al_set_result(c, id);
}

/* ---- reductions, scans, softmax, sorting ----------------------------------------- */

/* Reduces FX tensor j over dims (all when n == 0) with op (sub set), rule/dt;
 * the dims must be adjacent once size-1 dims are ignored. keep: keepdim.
 * fixed 2: the input cast to dt first (sum(..., dtype=dt)), the result dt. */
static int reduce_dims(lctx *c, int j, const int64_t *dims, int n, int keep, drift_op *op, int fixed, drift_dtype dt,
                       drift_dtype_rule rule) {
    const aten_view *v = &c->fx[j].t;
    int sel[DRIFT_MAX_DIMS] = {0}, rc, x, id;
    if (n == 0)
        for (int i = 0; i < v->nd; i++) sel[i] = 1;
    for (int i = 0; i < n; i++) {
        int k = aten_view_dim(dims[i], v->nd);
        if (k < 0) return FAIL(c, "dim %lld out of range", (long long)dims[i]);
        sel[k] = 1;
    }
    int lo = -1, hi = -1;
    for (int i = 0; i < v->nd; i++)
        if (sel[i] && v->size[i] > 1) {
            if (lo < 0) lo = i;
            hi = i;
        }
    int apart = 0;
    for (int i = lo; lo >= 0 && i <= hi; i++) apart |= !sel[i] && v->size[i] > 1;
    if ((rc = al_mat_fx(c, j, &x))) return rc;
    if (fixed == 2 && (rc = al_emit_cast(c, x, DRIFT_RULE_CAST_TO, dt, -1, &x))) return rc;
    if (apart) { /* dims not adjacent: the kept dims first, the reduced ones last (a gather), then one reduction */
        int64_t st[DRIFT_MAX_DIMS], psh[DRIFT_MAX_DIMS], pst[DRIFT_MAX_DIMS];
        contig_strides(v->nd, v->size, st);
        int m = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < v->nd; i++)
                if ((pass == 0) == !sel[i]) psh[m] = v->size[i], pst[m++] = st[i];
        if ((rc = al_emit_gather(c, x, m, psh, pst, 0, &x))) return rc;
        int kept = 0;
        for (int i = 0; i < v->nd; i++) kept += !sel[i];
        lo = kept;
        hi = v->nd - 1;
    }
    if (v->nd == 0) { /* a 0-d input: one element */
        if ((rc = al_emit_view_to(c, x, 1, (int64_t[]){1}, &x))) return rc;
        lo = hi = 0;
    }
    if (lo < 0) lo = hi = (n ? aten_view_dim(dims[0], v->nd) : 0);
    op->dim = lo;
    op->length = hi - lo + 1;
    rc = fixed ? emit_fixed(c, DRIFT_OP_REDUCE, op, 1, &x, dt, &id) : al_emit(c, DRIFT_OP_REDUCE, op, 1, &x, rule, &id);
    if (rc) return rc;
    int64_t sh[DRIFT_MAX_DIMS];
    int m = 0;
    for (int i = 0; i < v->nd; i++) {
        if (!sel[i]) sh[m++] = v->size[i];
        else if (keep) sh[m++] = 1;
    }
    if ((rc = al_emit_view_to(c, id, m, sh, &id))) return rc;
    return al_set_result(c, id);
}

int al_lower_reduce_ext(lctx *c, const char *base, const char *target) {
    int j, rc;
    if ((rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &j))) return rc;
    int64_t dims[DRIFT_MAX_DIMS], keep = 0;
    int n = 0;
    drift_op op;
    memset(&op, 0, sizeof op);
    const int full = !strcmp(target, "aten.sum.default") || !strcmp(target, "aten.mean.default") ||
                     !strcmp(target, "aten.prod.default") || !strcmp(target, "aten.any.default") ||
                     !strcmp(target, "aten.all.default"); /* amax/amin.default(self, dim=[], keepdim): [] is all */
    if (!full) {
        const drift_json_value *dv = al_arg(c, 1, "dim");
        if (!al_is_none(dv) && (rc = al_get_ints(c, dv, "dim", dims, &n))) return rc;
        if ((rc = al_get_int(c, al_arg(c, 2, "keepdim"), "keepdim", 0, &keep))) return rc;
        if (!strcmp(base, "var")) { /* var.correction(self, dim, *, correction, keepdim) */
            if ((rc = al_get_int(c, al_arg(c, -1, "keepdim"), "keepdim", keep, &keep))) return rc;
            double corr = 1.0;
            int64_t unb = 1;
            if (!strcmp(target, "aten.var.correction")) rc = al_get_num(c, al_arg(c, -1, "correction"), "correction", 1.0, &corr);
            else if ((rc = al_get_int(c, al_arg(c, 2, "unbiased"), "unbiased", 1, &unb)) == 0) {
                corr = (double)unb;
                rc = al_get_int(c, al_arg(c, 3, "keepdim"), "keepdim", 0, &keep);
            }
            if (rc) return rc;
            op.scalar = corr;
        }
    }
    if (!strcmp(base, "sum") || !strcmp(base, "mean")) {
        int given, is_int;
        drift_dtype dt;
        if ((rc = al_get_dtype(c, al_arg(c, -1, "dtype"), "dtype", &given, &dt, &is_int))) return rc;
        if (given) {
            op.sub = !strcmp(base, "mean") ? DRIFT_REDUCE_MEAN : DRIFT_REDUCE_SUM;
            return reduce_dims(c, j, dims, n, (int)keep, &op, 2, dt, DRIFT_RULE_NONE);
        }
    }
    static const struct {
        const char *op;
        int sub;
    } map[] = {{"sum", DRIFT_REDUCE_SUM},   {"mean", DRIFT_REDUCE_MEAN},     {"prod", DRIFT_REDUCE_PROD},
               {"amax", DRIFT_REDUCE_AMAX}, {"amin", DRIFT_REDUCE_AMIN},     {"any", DRIFT_REDUCE_ANY},
               {"all", DRIFT_REDUCE_ALL},   {"argmax", DRIFT_REDUCE_ARGMAX}, {"argmin", DRIFT_REDUCE_ARGMIN},
               {"var", DRIFT_REDUCE_VAR}};
    op.sub = -1;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(base, map[i].op)) op.sub = map[i].sub;
    if (op.sub < 0) return FAIL(c, "internal: reduction %s", base);
    if (op.sub == DRIFT_REDUCE_ARGMAX || op.sub == DRIFT_REDUCE_ARGMIN) {
        if (n == 0) { /* over the flattened input: a 1-d view first */
            int x, id;
            if ((rc = al_mat_fx(c, j, &x))) return rc;
            int64_t numel = val_of(c, x)->numel;
            if ((rc = al_emit_view_to(c, x, 1, &numel, &x))) return rc;
            op.dim = 0;
            if ((rc = emit_fixed(c, DRIFT_OP_REDUCE, &op, 1, &x, DRIFT_I64, &id))) return rc;
            if ((rc = al_emit_view_to(c, id, keep ? c->fx[j].t.nd : 0, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1}, &id))) return rc;
            return al_set_result(c, id);
        }
        return reduce_dims(c, j, dims, 1, (int)keep, &op, 1, DRIFT_I64, DRIFT_RULE_NONE);
    }
    if (op.sub == DRIFT_REDUCE_ANY || op.sub == DRIFT_REDUCE_ALL)
        return reduce_dims(c, j, dims, n, (int)keep, &op, 1, DRIFT_BOOL, DRIFT_RULE_NONE);
    if (op.sub == DRIFT_REDUCE_AMAX || op.sub == DRIFT_REDUCE_AMIN)
        return reduce_dims(c, j, dims, n, (int)keep, &op, 0, DRIFT_DTYPE_INVALID, DRIFT_RULE_LIKE_INPUT0);
    if (captured_int(c, j) && op.sub == DRIFT_REDUCE_SUM) /* a sum of integers is int64 */
        return reduce_dims(c, j, dims, n, (int)keep, &op, 1, DRIFT_I64, DRIFT_RULE_NONE);
    return reduce_dims(c, j, dims, n, (int)keep, &op, 0, DRIFT_DTYPE_INVALID, al_rule_of(target));
}

int al_lower_cumsum(lctx *c, const char *base, const char *target) {
    int j, x, id, rc;
    int64_t dim;
    if ((rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &j)) || (rc = al_get_int(c, al_arg(c, 1, "dim"), "dim", 0, &dim)))
        return rc;
    int given, is_int;
    drift_dtype dt;
    if ((rc = al_get_dtype(c, al_arg(c, -1, "dtype"), "dtype", &given, &dt, &is_int))) return rc;
    if ((rc = al_mat_fx(c, j, &x))) return rc;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.sub = !strcmp(base, "cumprod");
    op.dim = (int)dim;
    if (given) rc = emit_fixed(c, DRIFT_OP_CUMSUM, &op, 1, &x, dt, &id);
    else if (captured_int(c, j)) rc = emit_fixed(c, DRIFT_OP_CUMSUM, &op, 1, &x, DRIFT_I64, &id);
    else rc = al_emit(c, DRIFT_OP_CUMSUM, &op, 1, &x, al_rule_of(target), &id);
    return rc ? rc : al_set_result(c, id);
}

int al_lower_softmax(lctx *c, const char *base, const char *target) {
    int x, id, rc;
    int64_t dim;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x)) || (rc = al_get_int(c, al_arg(c, 1, "dim"), "dim", -1, &dim)))
        return rc;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.sub = strstr(base, "log_softmax") != NULL;
    op.dim = (int)dim;
    int given = 0, is_int;
    drift_dtype dt;
    if (base[0] != '_' && (rc = al_get_dtype(c, al_arg(c, 2, "dtype"), "dtype", &given, &dt, &is_int))) return rc;
    if (base[0] == '_') { /* _softmax(self, dim, half_to_float) */
        int64_t h2f;
        if ((rc = al_get_int(c, al_arg(c, 2, "half_to_float"), "half_to_float", 0, &h2f))) return rc;
        if (h2f) given = 1, dt = DRIFT_F32;
    }
    if (given && (rc = al_emit_cast(c, x, DRIFT_RULE_CAST_TO, dt, -1, &x))) return rc;
    if ((rc = al_emit(c, DRIFT_OP_SOFTMAX, &op, 1, &x, given ? DRIFT_RULE_LIKE_INPUT0 : al_rule_of(target), &id))) return rc;
    return al_set_result(c, id);
}

int al_lower_argsort(lctx *c, const char *base, const char *target) {
    (void)base;
    int x, id, rc;
    int64_t dim = -1, desc = 0;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x))) return rc;
    if (!strcmp(target, "aten.argsort.stable")) { /* argsort(self, *, stable, dim, descending) */
        int64_t stable; /* drift's ARGSORT is stable either way */
        rc = al_get_int(c, al_arg(c, -1, "stable"), "stable", 0, &stable);
        if (!rc) rc = al_get_int(c, al_arg(c, -1, "dim"), "dim", -1, &dim);
        if (!rc) rc = al_get_int(c, al_arg(c, -1, "descending"), "descending", 0, &desc);
    } else {
        rc = al_get_int(c, al_arg(c, 1, "dim"), "dim", -1, &dim);
        if (!rc) rc = al_get_int(c, al_arg(c, 2, "descending"), "descending", 0, &desc);
    }
    if (rc) return rc;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.sub = desc != 0;
    op.dim = (int)dim;
    if ((rc = emit_fixed(c, DRIFT_OP_ARGSORT, &op, 1, &x, DRIFT_I64, &id))) return rc;
    return al_set_result(c, id);
}

/* topk(self, k, dim=-1, largest=True, sorted=True), sort(self, dim=-1, descending=False)
 * and sort.stable(self, *, stable, dim, descending): (values, indices). ARGSORT along dim
 * (stable: equal values in index order; NaN above every number, as torch's sort), its
 * first k indices (a STRIDED slice; sort: all), the values TAKEn there (exact). topk's
 * ARGSORT carries k and sorted: its first k in torch's CUDA topk order, ties included
 * (kernels/topk_order.h: an MoE router's equal gate scores go to the experts torch sends
 * them to); sort keeps the stable order. */
int al_lower_topk(lctx *c, const char *base, const char *target) {
    int j, x, rc, ord, idx, flat, vals;
    int64_t dim = -1, k = INT64_MIN, desc = 1, sorted = 1, stable = 0;
    const int topk = !strcmp(base, "topk");
    if ((rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &j)) || (rc = al_mat_fx(c, j, &x))) return rc;
    if (topk) {
        if ((rc = al_get_int(c, al_arg(c, 1, "k"), "k", INT64_MIN, &k)) || (rc = al_get_int(c, al_arg(c, 2, "dim"), "dim", -1, &dim)) ||
            (rc = al_get_int(c, al_arg(c, 3, "largest"), "largest", 1, &desc)) ||
            (rc = al_get_int(c, al_arg(c, 4, "sorted"), "sorted", 1, &sorted)))
            return rc;
        if (k == INT64_MIN) return FAIL(c, "topk: k is missing");
    } else if (!strcmp(target, "aten.sort.stable")) {
        if ((rc = al_get_int(c, al_arg(c, -1, "stable"), "stable", 0, &stable)) ||
            (rc = al_get_int(c, al_arg(c, -1, "dim"), "dim", -1, &dim)) ||
            (rc = al_get_int(c, al_arg(c, -1, "descending"), "descending", 0, &desc)))
            return rc;
    } else if ((rc = al_get_int(c, al_arg(c, 1, "dim"), "dim", -1, &dim)) ||
               (rc = al_get_int(c, al_arg(c, 2, "descending"), "descending", 0, &desc))) {
        return rc;
    }
    (void)stable; /* drift's sort order is stable either way */
    const drift_value xv_c = *val_of(c, x), *xv = &xv_c; /* copies: emitting a node may move the graph's values */
    const int nd = xv->ndim;
    if (nd == 0) return FAIL(c, "%s of a 0-d tensor is not supported", base);
    const int d = aten_view_dim(dim, nd);
    if (d < 0) return FAIL(c, "dim %lld is out of range for a %d-d tensor", (long long)dim, nd);
    const int64_t n = xv->shape[d];
    if (!topk) k = n;
    if (k < 1 || k > n)
        return FAIL(c, "k = %lld is out of range for dim %d of size %lld (expected 1..%lld)", (long long)k, d, (long long)n,
                    (long long)n);
    drift_op op;
    memset(&op, 0, sizeof op);
    op.sub = desc != 0;
    op.dim = d;
    if (topk) { /* which k and their order, ties included, as torch's CUDA topk (kernels/topk_order.h) */
        op.length = k;
        op.start = sorted != 0;
    }
    if ((rc = emit_fixed(c, DRIFT_OP_ARGSORT, &op, 1, &x, DRIFT_I64, &ord))) return rc;
    int64_t st[DRIFT_MAX_DIMS], sh[DRIFT_MAX_DIMS];
    contig_strides(nd, xv->shape, st);
    memcpy(sh, xv->shape, sizeof(int64_t) * (size_t)nd);
    sh[d] = k;
    idx = ord;
    if (k < n && (rc = al_emit_gather(c, ord, nd, sh, st, 0, &idx))) return rc;
    if ((rc = flat_index(c, nd, sh, st, d, idx, &flat))) return rc;
    int in[2] = {x, flat};
    if ((rc = al_emit(c, DRIFT_OP_TAKE, NULL, 2, in, DRIFT_RULE_LIKE_INPUT0, &vals))) return rc;
    aten_view v[2];
    if ((rc = al_set_result(c, vals))) return rc;
    v[0] = c->fx[c->cur].t;
    if ((rc = al_set_result(c, idx))) return rc;
    v[1] = c->fx[c->cur].t;
    fxv *f = &c->fx[c->cur];
    if (!(f->multi = drift_calloc(2, sizeof *f->multi))) return drift_err_set(c->err, DRIFT_E_NOMEM, "aten", "out of memory");
    f->multi[0] = v[0];
    f->multi[1] = v[1];
    f->n_multi = 2;
    f->kind = FX_MULTI;
    return DRIFT_OK;
}

/* ---- matmuls, group norm ---------------------------------------------------------- */

/* Operand *x of a matmul (nx dims, shape sh, contiguous) gathered to the batch dims bs (nbat of
 * them, its own aligned right; a missing or size-1 dim repeated by stride 0), unless it has them. */
static int matmul_broadcast(lctx *c, int *x, int nx, const int64_t *sh, int nbat, const int64_t *bs) {
    int same = nx - 2 == nbat;
    for (int i = 0; same && i < nbat; i++) same = sh[i] == bs[i];
    if (same) return DRIFT_OK;
    int64_t st[DRIFT_MAX_DIMS], size[DRIFT_MAX_DIMS], stride[DRIFT_MAX_DIMS];
    st[nx - 1] = 1;
    for (int k = nx - 2; k >= 0; k--) st[k] = st[k + 1] * sh[k + 1];
    for (int i = 0; i < nbat; i++) {
        const int k = i - (nbat - (nx - 2));
        size[i] = bs[i];
        stride[i] = k >= 0 && sh[k] != 1 ? st[k] : 0;
    }
    size[nbat] = sh[nx - 2], stride[nbat] = st[nx - 2];
    size[nbat + 1] = sh[nx - 1], stride[nbat + 1] = 1;
    return al_emit_gather(c, *x, nbat + 2, size, stride, 0, x);
}

/* al_mat_arg, also giving the FX node (*j, for its captured strides). */
static int mat_arg_j(lctx *c, const drift_json_value *v, const char *what, int *id, int *j) {
    int rc = al_tensor_arg(c, v, what, j);
    return rc ? rc : al_mat_fx(c, *j, id);
}

int al_lower_matmul(lctx *c, const char *base, const char *target) {
    (void)target;
    int rc, a, b, cc = -1, id, ja = -1, jb = -1;
    const int with_c = !strcmp(base, "addmm") || !strcmp(base, "baddbmm");
    const int o = with_c ? 1 : 0;
    if ((rc = mat_arg_j(c, al_arg(c, o, with_c ? "batch1" : "self"), "a", &a, &ja))) {
        if (!with_c) return rc;
        if ((rc = mat_arg_j(c, al_arg(c, 1, "mat1"), "mat1", &a, &ja))) return rc;
    }
    if ((rc = mat_arg_j(c, al_arg(c, o + 1, with_c ? "batch2" : "mat2"), "b", &b, &jb)) &&
        (rc = mat_arg_j(c, al_arg(c, o + 1, "other"), "other", &b, &jb)) &&
        (rc = mat_arg_j(c, al_arg(c, o + 1, "mat2"), "mat2", &b, &jb)))
        return rc;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.alpha = 1.0f;
    op.beta = 1.0f;
    if (with_c) {
        double be, al;
        if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &cc)) || (rc = al_get_num(c, al_arg(c, -1, "beta"), "beta", 1.0, &be)) ||
            (rc = al_get_num(c, al_arg(c, -1, "alpha"), "alpha", 1.0, &al)))
            return rc;
        op.beta = (float)be;
        op.alpha = (float)al;
    }
    drift_value va_c = *val_of(c, a), vb_c = *val_of(c, b); /* copies: emitting a node may move the graph's values */
    const drift_value *va = &va_c, *vb = &vb_c;
    int na = va->ndim, nb = vb->ndim;
    int64_t out[DRIFT_MAX_DIMS];
    int no = 0;
    if (na < 1 || nb < 1) return FAIL(c, "matmul of a 0-d tensor");
    /* 1-d operands: unsqueeze (and squeeze the result) as torch.matmul does */
    int sq_a = na == 1, sq_b = nb == 1;
    if (sq_a && (rc = al_emit_view_to(c, a, 2, (int64_t[]){1, va->shape[0]}, &a))) return rc;
    if (sq_b && (rc = al_emit_view_to(c, b, 2, (int64_t[]){vb->shape[0], 1}, &b))) return rc;
    va_c = *val_of(c, a), vb_c = *val_of(c, b);
    na = va->ndim, nb = vb->ndim;
    const int64_t M = va->shape[na - 2], K = va->shape[na - 1], N = vb->shape[nb - 1];
    if (vb->shape[nb - 2] != K) return FAIL(c, "matmul: inner dims %lld and %lld differ", (long long)K, (long long)vb->shape[nb - 2]);
    /* how torch holds the operands (BMM's op->layout: which cuBLAS call it makes; 1-d operands
       and complex ones keep the default) */
    if (sq_a || sq_b) ja = jb = -1;
    if (nb == 2 && na > 2 && (with_c || al_matmul_folds(c, ja))) {
        /* [..., M, K] @ [K, N]: the batch folded into M, as torch does when the view allows */
        int64_t rows = va->numel / K;
        if ((rc = al_emit_view_to(c, a, 2, (int64_t[]){rows, K}, &a))) return rc;
        for (int i = 0; i < na - 1; i++) out[no++] = va->shape[i];
        out[no++] = N;
        op.layout = al_matmul_layout(c, ja, 0, 0, NULL, NULL) | al_matmul_layout(c, jb, 1, 0, NULL, NULL);
    } else { /* the batch dims broadcast, as torch.matmul's do (expand, reshape, bmm) */
        const int nbat = (na > nb ? na : nb) - 2;
        int64_t bs[DRIFT_MAX_DIMS];
        for (int i = 0; i < nbat; i++) {
            const int ia = i - (nbat - (na - 2)), ib = i - (nbat - (nb - 2));
            const int64_t sa = ia >= 0 ? va->shape[ia] : 1, sb = ib >= 0 ? vb->shape[ib] : 1;
            if (sa != sb && sa != 1 && sb != 1)
                return FAIL(c, "matmul: batch dims %lld and %lld do not broadcast", (long long)sa, (long long)sb);
            bs[i] = sa == 1 ? sb : sa;
        }
        if ((rc = matmul_broadcast(c, &a, na, va->shape, nbat, bs)) || (rc = matmul_broadcast(c, &b, nb, vb->shape, nbat, bs)))
            return rc;
        for (int i = 0; i < nbat; i++) out[no++] = bs[i];
        out[no++] = M;
        out[no++] = N;
        op.layout = al_matmul_layout(c, ja, 0, nbat, bs, NULL) | al_matmul_layout(c, jb, 1, nbat, bs, NULL);
    }
    (void)M;
    int in[3] = {a, b, cc};
    /* beta 0: torch ignores C (diffusers' get_attention_scores passes an empty [B*H, L, S]
     * sized at the recorded batch, which a re-batched product no longer matches) */
    const int use_c = with_c && !(c->rb_from && op.beta == 0.0f);
    if ((rc = al_emit(c, DRIFT_OP_BMM, &op, use_c ? 3 : 2, in, DRIFT_RULE_AUTOCAST_LOWER, &id))) return rc;
    if (sq_a) { /* drop the unsqueezed M */
        for (int i = no - 2; i < no - 1; i++) out[i] = out[i + 1];
        no--;
    }
    if (sq_b) no--;
    if ((rc = al_emit_view_to(c, id, no, out, &id))) return rc;
    return al_set_result(c, id);
}

int al_lower_group_norm(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int in[3], n = 1, rc, id;
    int64_t groups;
    double eps;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "input"), "input", &in[0])) ||
        (rc = al_get_int(c, al_arg(c, 1, "num_groups"), "num_groups", 1, &groups)) ||
        (rc = al_get_num(c, al_arg(c, 4, "eps"), "eps", 1e-5, &eps)))
        return rc;
    (void)al_arg(c, 5, "cudnn_enabled"); /* a kernel choice, not a value */
    const drift_json_value *w = al_arg(c, 2, "weight"), *b = al_arg(c, 3, "bias");
    if (!al_is_none(w) && (rc = al_mat_arg(c, w, "weight", &in[n++]))) return rc;
    if (!al_is_none(b)) {
        if (n == 1) return FAIL(c, "group_norm with a bias but no weight is not supported");
        if ((rc = al_mat_arg(c, b, "bias", &in[n++]))) return rc;
    }
    const drift_value xv_c = *val_of(c, in[0]), *xv = &xv_c; /* copies: emitting a node may move the graph's values */
    if (xv->ndim < 2 || groups < 1 || xv->shape[1] % groups)
        return FAIL(c, "group_norm: %lld groups do not divide the channels", (long long)groups);
    drift_op op;
    memset(&op, 0, sizeof op);
    op.length = groups;
    op.eps = (float)eps;
    if ((rc = al_emit(c, DRIFT_OP_GROUP_NORM, &op, n, in, DRIFT_RULE_AUTOCAST_FP32, &id))) return rc;
    return al_set_result(c, id);
}

/* ---- indexing ---------------------------------------------------------------------- */

/* x (drift id, contiguous) gathered along dim d at the int64 indices idx (1-d, L). */
static int select_along(lctx *c, int x, int d, int idx, int *out) {
    const drift_value xv_c = *val_of(c, x), *xv = &xv_c; /* copies: emitting a node may move the graph's values */
    int nd = xv->ndim, rc, flat;
    int64_t st[DRIFT_MAX_DIMS], sh[DRIFT_MAX_DIMS], vs[DRIFT_MAX_DIMS];
    contig_strides(nd, xv->shape, st);
    const int64_t L = val_of(c, idx)->numel;
    for (int i = 0; i < nd; i++) sh[i] = i == d ? L : xv->shape[i], vs[i] = i == d ? L : 1;
    if ((rc = al_emit_view_to(c, idx, nd, vs, &idx))) return rc;
    if ((rc = flat_index(c, nd, sh, st, d, idx, &flat))) return rc;
    int in[2] = {x, flat};
    return al_emit(c, DRIFT_OP_TAKE, NULL, 2, in, DRIFT_RULE_LIKE_INPUT0, out);
}

/* index_select(self, dim, index) and embedding(weight, indices). */
int al_lower_index_select(lctx *c, const char *base, const char *target) {
    (void)target;
    int emb = !strcmp(base, "embedding"), x, ij, idx, rc, id;
    int64_t dim = 0;
    if ((rc = al_mat_arg(c, al_arg(c, 0, emb ? "weight" : "self"), emb ? "weight" : "self", &x))) return rc;
    if (!emb && (rc = al_get_int(c, al_arg(c, 1, "dim"), "dim", 0, &dim))) return rc;
    if ((rc = al_tensor_arg(c, al_arg(c, emb ? 1 : 2, emb ? "indices" : "index"), "index", &ij))) return rc;
    if (emb) { /* padding_idx, scale_grad_by_freq, sparse: the gradient's, not the forward's (OmniGen) */
        (void)al_arg(c, 2, "padding_idx");
        (void)al_arg(c, 3, "scale_grad_by_freq");
        (void)al_arg(c, 4, "sparse");
    }
    if ((rc = al_mat_fx(c, ij, &idx)) || (rc = as_index(c, idx, &idx))) return rc;
    const drift_value xv_c = *val_of(c, x), *xv = &xv_c; /* copies: emitting a node may move the graph's values */
    int d = aten_view_dim(dim, xv->ndim);
    if (d < 0) return FAIL(c, "dim %lld out of range", (long long)dim);
    int xj = -1;
    if (!emb && (rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &xj))) return rc;
    if (!emb && (rc = al_rb_index_rows(c, xj, d, ij))) return rc;
    const aten_view iv = c->fx[ij].t;
    int64_t n = val_of(c, idx)->numel;
    if ((rc = al_emit_view_to(c, idx, 1, &n, &idx))) return rc;
    if ((rc = select_along(c, x, d, idx, &id))) return rc;
    /* result: x's dims with dim d replaced by the index's dims */
    int64_t sh[DRIFT_MAX_DIMS];
    int m = 0;
    for (int i = 0; i < xv->ndim; i++) {
        if (i != d) {
            if (m >= DRIFT_MAX_DIMS) return FAIL(c, "too many dims");
            sh[m++] = xv->shape[i];
            continue;
        }
        if (m + iv.nd > DRIFT_MAX_DIMS) return FAIL(c, "too many dims");
        if (emb || iv.nd != 1)
            for (int k = 0; k < iv.nd; k++) sh[m++] = iv.size[k];
        else
            sh[m++] = iv.size[0];
    }
    if ((rc = al_emit_view_to(c, id, m, sh, &id))) return rc;
    return al_set_result(c, id);
}

int al_mask_indices(lctx *c, int mask, int64_t n, int *idx) {
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_NONZERO);
    s.op.n_in = 1;
    s.in[0] = mask;
    s.rule = DRIFT_RULE_FIXED;
    s.rule_dtype = DRIFT_I64;
    s.ndim = 2, s.shape[0] = n, s.shape[1] = 1;
    int rc = al_add_node(c, &s, idx);
    return rc ? rc : al_emit_view_to(c, *idx, 1, &n, idx);
}

/* The one index tensor of an index/index_put list, its position p; *is_mask: a boolean mask. */
static int one_index_m(lctx *c, const drift_json_value *list, int *p, int *ij, int *is_mask) {
    if (is_mask) *is_mask = 0;
    if (!list || list->type != DRIFT_JSON_ARRAY) return FAIL(c, "indices: expected a list");
    *p = -1;
    for (size_t i = 0; i < list->n_items; i++) {
        if (al_is_none(&list->items[i])) continue;
        if (*p >= 0) return FAIL(c, "indexing with several index tensors is not supported yet");
        *p = (int)i;
        int rc = al_tensor_arg(c, &list->items[i], "indices", ij);
        if (rc) return rc;
        const char *d = al_val_dtype_str(&c->g->nodes[*ij]);
        if (d && !strcmp(d, "bool")) {
            if (!is_mask) return FAIL(c, "indexing with a boolean mask (a data-dependent shape) is not supported here");
            *is_mask = 1;
        }
    }
    if (*p < 0) return FAIL(c, "indices: no index tensor");
    return DRIFT_OK;
}

/* Negative indices count from the end (x[-1], x[idx] = v): idx + size where idx < 0. */
static int wrap_negative(lctx *c, int idx, int64_t size, int *out) {
    int zero, neg, wrapped, in[3], rc;
    if ((rc = al_fill_like(c, idx, 0.0, &zero))) return rc;
    drift_op lt;
    memset(&lt, 0, sizeof lt);
    lt.sub = DRIFT_BINARY_LT;
    in[0] = idx, in[1] = zero;
    if ((rc = emit_fixed(c, DRIFT_OP_BINARY, &lt, 2, in, DRIFT_BOOL, &neg))) return rc;
    drift_op add;
    memset(&add, 0, sizeof add);
    add.sub = DRIFT_SCALAR_ADD;
    add.scalar = (double)size;
    if ((rc = al_emit(c, DRIFT_OP_SCALAR, &add, 1, &idx, DRIFT_RULE_PROMOTE, &wrapped))) return rc;
    in[0] = neg, in[1] = wrapped, in[2] = idx;
    return al_emit(c, DRIFT_OP_WHERE, NULL, 3, in, DRIFT_RULE_PROMOTE, out);
}

/* 1 if a boolean mask of shape mv covers dims p .. p+k-1 of a tensor of shape xs (lnd dims). */
static int mask_fits(const aten_view *mv, const int64_t *xs, int p, int lnd) {
    int ok = mv->nd >= 1 && p + mv->nd <= lnd;
    for (int i = 0; ok && i < mv->nd; i++) ok = mv->size[i] == xs[p + i];
    return ok;
}

/* A mask over k > 1 dims: x viewed with dims p .. p+k-1 merged into one and the mask flat, so
 * the 1-d case applies (positions in row-major order). */
static int merge_mask_dims(lctx *c, const aten_view *mv, int p, int *x, int *mask) {
    const drift_value xv = *val_of(c, *x);
    int64_t sh[DRIFT_MAX_DIMS], m = 1;
    int n = 0, rc;
    for (int i = 0; i < p; i++) sh[n++] = xv.shape[i];
    for (int i = 0; i < mv->nd; i++) m *= mv->size[i];
    sh[n++] = m;
    for (int i = p + mv->nd; i < xv.ndim; i++) sh[n++] = xv.shape[i];
    if ((rc = al_emit_view_to(c, *x, n, sh, x))) return rc;
    return al_emit_view_to(c, *mask, 1, &m, mask);
}

int al_lower_index(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int x, p, ij, idx, rc, id;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x))) return rc;
    const int cplx = c->last_cplx; /* x holds (re, im) pairs in a trailing dim: select over the logical dims */
    int is_mask;
    if ((rc = one_index_m(c, al_arg(c, 1, "indices"), &p, &ij, &is_mask))) return rc;
    drift_value xv_c = *val_of(c, x), *xv = &xv_c; /* copies: emitting a node may move the graph's values */
    int lnd = xv->ndim - cplx;
    if (p >= lnd) return FAIL(c, "index position %d of a %d-d tensor", p, lnd);
    if (is_mask) { /* x[mask], a mask over dims p .. p+k-1: the recorded count is the result's dim p */
        int nd;
        int64_t vs[DRIFT_MAX_DIMS];
        const aten_view mv = c->fx[ij].t;
        if (!mask_fits(&mv, xv->shape, p, lnd) || (cplx && mv.nd > 1)) /* complex: a 1-d mask only */
            return FAIL(c, "index with a boolean mask: its %d dims must be dims %d.. of self (%d dims)", mv.nd, p, lnd);
        if ((rc = al_val_shape(c, al_cur_node(c)->val, &nd, vs))) return rc;
        if (nd != lnd - mv.nd + 1) return FAIL(c, "index with a boolean mask: 'val' of %d dims", nd);
        if ((rc = al_mat_fx(c, ij, &idx))) return rc;
        if (mv.nd > 1) {
            if ((rc = merge_mask_dims(c, &mv, p, &x, &idx))) return rc;
            xv_c = *val_of(c, x);
            lnd = xv->ndim;
        }
        if ((rc = al_mask_indices(c, idx, vs[p], &idx))) return rc;
    } else if ((rc = al_mat_fx(c, ij, &idx)) || (rc = as_index(c, idx, &idx))) {
        return rc;
    }
    if (!is_mask && (rc = wrap_negative(c, idx, xv->shape[p], &idx))) return rc;
    aten_view iv = c->fx[ij].t;
    int64_t n = val_of(c, idx)->numel;
    if (is_mask) iv.nd = 1, iv.size[0] = n; /* the selected count, not the mask's (possibly k-d) shape */
    if ((rc = al_emit_view_to(c, idx, 1, &n, &idx))) return rc;
    if ((rc = select_along(c, x, p, idx, &id))) return rc;
    int64_t sh[DRIFT_MAX_DIMS];
    int m = 0;
    for (int i = 0; i < xv->ndim; i++) {
        if (m + (i == p ? iv.nd : 1) > DRIFT_MAX_DIMS) return FAIL(c, "too many dims");
        if (i != p) sh[m++] = xv->shape[i];
        else
            for (int k = 0; k < iv.nd; k++) sh[m++] = iv.size[k];
    }
    if ((rc = al_emit_view_to(c, id, m, sh, &id))) return rc;
    return cplx ? al_set_result_cplx(c, id) : al_set_result(c, id);
}

int al_lower_gather(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int x, ij, idx, rc, id, flat;
    int64_t dim;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x))) return rc;
    const int cplx = c->last_cplx; /* x holds (re, im) pairs in a trailing dim: both taken at each index */
    if ((rc = al_get_int(c, al_arg(c, 1, "dim"), "dim", 0, &dim)) || (rc = al_tensor_arg(c, al_arg(c, 2, "index"), "index", &ij)))
        return rc;
    if (c->fx[ij].cplx) return FAIL(c, "gather: a complex index");
    if ((rc = al_mat_fx(c, ij, &idx)) || (rc = as_index(c, idx, &idx))) return rc;
    const drift_value xv_c = *val_of(c, x), *xv = &xv_c, iv_c = *val_of(c, idx), *iv = &iv_c; /* copies: emitting a node may move the graph's values */
    const int lnd = xv->ndim - cplx;
    int d = aten_view_dim(dim, lnd);
    if (d < 0 || iv->ndim != lnd) return FAIL(c, "gather: index and input must have the same number of dims");
    for (int i = 0; i < lnd; i++)
        if (i != d && iv->shape[i] > xv->shape[i])
            return FAIL(c, "gather: index dim %d (%lld) is larger than the input's (%lld)", i, (long long)iv->shape[i],
                        (long long)xv->shape[i]);
    int64_t st[DRIFT_MAX_DIMS], sh[DRIFT_MAX_DIMS];
    contig_strides(xv->ndim, xv->shape, st);
    memcpy(sh, iv->shape, sizeof sh);
    if (cplx) { /* the index broadcast over the pair dim */
        if (lnd + 1 > DRIFT_MAX_DIMS) return FAIL(c, "gather of a complex tensor of %d dims", lnd);
        sh[lnd] = 2;
        int64_t vs[DRIFT_MAX_DIMS];
        memcpy(vs, iv->shape, sizeof(int64_t) * (size_t)lnd);
        vs[lnd] = 1;
        if ((rc = al_emit_view_to(c, idx, lnd + 1, vs, &idx))) return rc;
    }
    if ((rc = flat_index(c, lnd + cplx, sh, st, d, idx, &flat))) return rc;
    int in[2] = {x, flat};
    if ((rc = al_emit(c, DRIFT_OP_TAKE, NULL, 2, in, DRIFT_RULE_LIKE_INPUT0, &id))) return rc;
    return cplx ? al_set_result_cplx(c, id) : al_set_result(c, id);
}

/* x with values (cast to x's dtype, broadcast to the flat index's shape) put at flat into *out;
 * mode: PUT's sub (0 set, 1 accumulate, 2 amax, 3 amin, 4 prod). */
static int put_values_id(lctx *c, int x, int flat, int vals, int mode, int *out) {
    int rc, z, in[3];
    if ((rc = al_emit_cast(c, vals, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, x, &vals))) return rc;
    const drift_value fv_c = *val_of(c, flat), *fv = &fv_c, vv_c = *val_of(c, vals), *vv = &vv_c; /* copies: emitting a node may move the graph's values */
    if (fv->numel != vv->numel) { /* broadcast: zeros of the index's shape + values (ADD broadcasts in1) */
        if ((rc = fill_shape(c, fv->ndim, fv->shape, DRIFT_F32, 0, 0.0, 0.0, &z)) ||
            (rc = al_emit_cast(c, z, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, x, &z)))
            return rc;
        in[0] = z, in[1] = vals;
        if ((rc = al_emit(c, DRIFT_OP_ADD, NULL, 2, in, DRIFT_RULE_LIKE_INPUT0, &vals))) return rc;
    }
    drift_op op;
    memset(&op, 0, sizeof op);
    op.sub = mode;
    in[0] = x, in[1] = flat, in[2] = vals;
    return al_emit(c, DRIFT_OP_PUT, &op, 3, in, DRIFT_RULE_LIKE_INPUT0, out);
}

static int put_values(lctx *c, int x, int flat, int vals, int mode) {
    int id, rc = put_values_id(c, x, flat, vals, mode, &id);
    return rc ? rc : al_set_result(c, id);
}

/* x[mask] = values where the recorded count is 0 (values empty): nothing is written, and the
 * replay checks that the mask is still all false (NONZERO of [mask..., true] must find exactly
 * the one appended element; its index, numel(mask), scaled to the factor 1 that x is
 * multiplied by, exact for every value). */
static int mask_put_none(lctx *c, int x, int mask) {
    int rc, one, cat, nz, g, id, in[2];
    const int64_t mn = val_of(c, mask)->numel;
    if ((rc = as_bool(c, mask, &mask)) || (rc = al_emit_view_to(c, mask, 1, &mn, &mask)) || (rc = fill_shape(c, 1, (int64_t[]){1}, DRIFT_BOOL, 0, 1.0, 0, &one)))
        return rc;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.dim = 0;
    in[0] = mask, in[1] = one;
    if ((rc = emit_fixed(c, DRIFT_OP_CONCAT, &op, 2, in, DRIFT_BOOL, &cat))) return rc;
    if ((rc = al_mask_indices(c, cat, 1, &nz))) return rc;
    memset(&op, 0, sizeof op);
    op.sub = DRIFT_SCALAR_ADD;
    op.scalar = (double)(1 - mn);
    if ((rc = al_emit(c, DRIFT_OP_SCALAR, &op, 1, &nz, DRIFT_RULE_PROMOTE, &g))) return rc;
    if ((rc = al_emit_cast(c, g, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, x, &g))) return rc;
    in[0] = x, in[1] = g;
    if ((rc = al_emit(c, DRIFT_OP_MUL, NULL, 2, in, DRIFT_RULE_LIKE_INPUT0, &id))) return rc;
    return al_set_result(c, id);
}

int al_lower_index_put(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int x, p, ij, idx, vals, rc, flat, is_mask, vj;
    int64_t acc;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x)) || (rc = one_index_m(c, al_arg(c, 1, "indices"), &p, &ij, &is_mask)) ||
        (rc = al_get_int(c, al_arg(c, 3, "accumulate"), "accumulate", 0, &acc)))
        return rc;
    drift_value xv_c = *val_of(c, x), *xv = &xv_c; /* copies: emitting a node may move the graph's values */
    if (p >= xv->ndim) return FAIL(c, "index position %d of a %d-d tensor", p, xv->ndim);
    int merged = 0; /* a k-d mask: x's k masked dims merged into one, the result viewed back to x's shape */
    int64_t xshape[DRIFT_MAX_DIMS];
    const int xnd = xv->ndim;
    memcpy(xshape, xv->shape, sizeof xshape);
    if (is_mask) { /* x[mask] = values, a mask over dims p .. p+k-1: the count is the values' (recorded) */
        const aten_view mv = c->fx[ij].t;
        int mask;
        if ((rc = al_mat_fx(c, ij, &mask))) return rc;
        vj = al_ref_of(c, al_arg(c, 2, "values"));
        if (vj >= 0 && c->fx[vj].kind == FX_EMPTY) return mask_put_none(c, x, mask);
        if (!mask_fits(&mv, xv->shape, p, xv->ndim))
            return FAIL(c, "index_put with a boolean mask: its %d dims must be dims %d.. of self (%d dims)", mv.nd, p,
                        xv->ndim);
        if (mv.nd > 1) {
            merged = 1;
            if ((rc = merge_mask_dims(c, &mv, p, &x, &mask))) return rc;
            xv_c = *val_of(c, x);
        }
        if ((rc = al_tensor_arg(c, al_arg(c, 2, "values"), "values", &vj))) return rc;
        const aten_view *vv = &c->fx[vj].t;
        if (vv->nd != xv->ndim - p)
            return FAIL(c, "index_put with a boolean mask: values of %d dims (expected %d: [count, dims after the mask])", vv->nd,
                        xv->ndim - p);
        if ((rc = al_mask_indices(c, mask, vv->size[0], &idx))) return rc;
    } else if ((rc = al_mat_fx(c, ij, &idx)) || (rc = as_index(c, idx, &idx)) || (rc = wrap_negative(c, idx, xv->shape[p], &idx))) {
        return rc;
    }
    if ((rc = al_mat_arg(c, al_arg(c, 2, "values"), "values", &vals))) return rc;
    int64_t n = val_of(c, idx)->numel, st[DRIFT_MAX_DIMS], sh[DRIFT_MAX_DIMS], vs[DRIFT_MAX_DIMS];
    contig_strides(xv->ndim, xv->shape, st);
    for (int i = 0; i < xv->ndim; i++) sh[i] = i == p ? n : xv->shape[i], vs[i] = i == p ? n : 1;
    if ((rc = al_emit_view_to(c, idx, xv->ndim, vs, &idx))) return rc;
    if ((rc = flat_index(c, xv->ndim, sh, st, p, idx, &flat))) return rc;
    if (!merged) return put_values(c, x, flat, vals, acc != 0);
    int id;
    if ((rc = put_values_id(c, x, flat, vals, acc != 0, &id)) || (rc = al_emit_view_to(c, id, xnd, xshape, &id))) return rc;
    return al_set_result(c, id);
}

/* index_copy(self, dim, index, source) and index_add(self, dim, index, source, *, alpha=1)
 * (the MoE combine `out.index_add_(0, rows, expert_out)`): PUT along dim, accumulating for
 * index_add (source scaled by alpha first when alpha != 1). */
int al_lower_index_copy(lctx *c, const char *base, const char *target) {
    (void)target;
    int x, idx, src, rc, flat;
    int64_t dim;
    const int add = !strcmp(base, "index_add");
    if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x)) || (rc = al_get_int(c, al_arg(c, 1, "dim"), "dim", 0, &dim)) ||
        (rc = al_mat_arg(c, al_arg(c, 2, "index"), "index", &idx)) || (rc = al_mat_arg(c, al_arg(c, 3, "source"), "source", &src)))
        return rc;
    if (add) {
        double alpha;
        if ((rc = al_get_num(c, al_arg(c, -1, "alpha"), "alpha", 1.0, &alpha))) return rc;
        if (alpha != 1.0) {
            drift_op op;
            memset(&op, 0, sizeof op);
            op.sub = DRIFT_SCALAR_MUL;
            op.scalar = alpha;
            if ((rc = al_emit(c, DRIFT_OP_SCALAR, &op, 1, &src, DRIFT_RULE_PROMOTE, &src))) return rc;
        }
    }
    if (val_of(c, idx)->ndim > 1) return FAIL(c, "%s: the index must be 0-d or 1-d", base);
    if ((rc = as_index(c, idx, &idx))) return rc;
    const drift_value xv_c = *val_of(c, x), *xv = &xv_c; /* copies: emitting a node may move the graph's values */
    int d = aten_view_dim(dim, xv->ndim);
    if (d < 0) return FAIL(c, "dim %lld out of range", (long long)dim);
    int64_t n = val_of(c, idx)->numel, st[DRIFT_MAX_DIMS], sh[DRIFT_MAX_DIMS], vs[DRIFT_MAX_DIMS];
    contig_strides(xv->ndim, xv->shape, st);
    for (int i = 0; i < xv->ndim; i++) sh[i] = i == d ? n : xv->shape[i], vs[i] = i == d ? n : 1;
    if ((rc = al_emit_view_to(c, idx, xv->ndim, vs, &idx))) return rc;
    const drift_value sv_c = *val_of(c, src), *sv = &sv_c;
    if (sv->ndim != xv->ndim && !(sv->ndim == 0 && xv->ndim == 0))
        return FAIL(c, "%s: source has %d dims, self %d", base, sv->ndim, xv->ndim);
    for (int i = 0; i < xv->ndim && sv->ndim == xv->ndim; i++)
        if (sv->shape[i] != sh[i])
            return FAIL(c, "%s: source dim %d is %lld, expected %lld", base, i, (long long)sv->shape[i], (long long)sh[i]);
    if ((rc = flat_index(c, xv->ndim, sh, st, d, idx, &flat))) return rc;
    return put_values(c, x, flat, src, add);
}

/* scatter(self, dim, index, src | value) and scatter_add(self, dim, index, src). */
int al_lower_scatter(lctx *c, const char *base, const char *target) {
    int x, ij, idx, rc, flat, vals;
    int64_t dim;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x)) || (rc = al_get_int(c, al_arg(c, 1, "dim"), "dim", 0, &dim)) ||
        (rc = al_tensor_arg(c, al_arg(c, 2, "index"), "index", &ij)))
        return rc;
    const int sr = !strcmp(base, "scatter_reduce");
    int64_t include_self = 1;
    int mode = !strcmp(base, "scatter_add"), mean = 0; /* PUT's sub; mean: a sum and a count */
    if (sr) { /* scatter_reduce.two(self, dim, index, src, reduce, *, include_self=True) */
        const char *m = NULL;
        if ((rc = al_get_str(c, al_arg(c, 4, "reduce"), "reduce", NULL, &m)) ||
            (rc = al_get_int(c, al_arg(c, 5, "include_self"), "include_self", 1, &include_self)))
            return rc;
        static const char *const modes[] = {"sum", "amax", "amin", "prod", "mean"};
        static const int subs[] = {1, 2, 3, 4, 1};
        mode = -1;
        for (int i = 0; i < 5; i++)
            if (m && !strcmp(m, modes[i])) mode = subs[i], mean = i == 4;
        if (mode < 0)
            return FAIL(c, "reduce: '%s' is not a scatter_reduce mode (sum, prod, mean, amax, amin)", m ? m : "(none)");
        const int sj = al_ref_of(c, al_arg(c, 0, "self"));
        if (sj >= 0 && captured_int(c, sj) && (mean || (!include_self && (mode == 2 || mode == 3))))
            return FAIL(c, "scatter_reduce '%s'%s of an integer tensor is not supported yet", m,
                        mean ? "" : " with include_self=False");
    } else if (!al_is_none(al_arg(c, -1, "reduce"))) { /* scatter.reduce / value_reduce(..., *, reduce) */
        const char *m = NULL;
        if ((rc = al_get_str(c, al_arg(c, -1, "reduce"), "reduce", NULL, &m))) return rc;
        mode = m && !strcmp(m, "add") ? 1 : m && !strcmp(m, "multiply") ? 4 : -1;
        if (mode < 0) return FAIL(c, "reduce: '%s' is not a scatter reduce mode (add, multiply)", m ? m : "(none)");
    }
    if ((rc = al_mat_fx(c, ij, &idx)) || (rc = as_index(c, idx, &idx))) return rc;
    const drift_value xv_c = *val_of(c, x), *xv = &xv_c, iv_c = *val_of(c, idx), *iv = &iv_c; /* copies: emitting a node may move the graph's values */
    int d = aten_view_dim(dim, xv->ndim);
    if (d < 0 || iv->ndim != xv->ndim) return FAIL(c, "scatter: index and input must have the same number of dims");
    int64_t st[DRIFT_MAX_DIMS], sh[DRIFT_MAX_DIMS];
    contig_strides(xv->ndim, xv->shape, st);
    memcpy(sh, iv->shape, sizeof sh);
    if ((rc = flat_index(c, iv->ndim, sh, st, d, idx, &flat))) return rc;
    if (!strcmp(target, "aten.scatter.value") || !strcmp(target, "aten.scatter.value_reduce")) {
        double v;
        if ((rc = al_get_num(c, al_arg(c, 3, "value"), "value", 0, &v))) return rc;
        if ((rc = fill_shape(c, iv->ndim, sh, DRIFT_F32, 0, v, 0, &vals))) return rc;
    } else {
        int sj;
        if ((rc = al_tensor_arg(c, al_arg(c, 3, "src"), "src", &sj))) return rc;
        aten_view sv = c->fx[sj].t; /* src[i] for i in the index's shape */
        if (sv.nd != iv->ndim) return FAIL(c, "scatter: src and index dims differ");
        for (int i = 0; i < sv.nd; i++) {
            if (sv.size[i] < sh[i]) return FAIL(c, "scatter: src smaller than the index");
            sv.size[i] = sh[i];
        }
        if ((rc = al_mat_view(c, &sv, &vals))) return rc;
    }
    if (sr && !include_self) { /* the indexed positions start from the reduction's identity, not from self */
        const double id = mode == 2 ? -INFINITY : mode == 3 ? INFINITY : mode == 4 ? 1.0 : 0.0;
        int z, res;
        if ((rc = al_fill_like(c, vals, id, &z)) || (rc = put_values(c, x, flat, z, 0)) || (rc = al_mat_fx(c, c->cur, &res)))
            return rc;
        x = res;
    }
    if (!mean) return put_values(c, x, flat, vals, mode);
    /* mean: the sum over the indexed values (and self when included) over their count; an
     * element nothing indexes keeps self (its count is 1) */
    int sum, cnt0, ones, cnt, id, in[2];
    if ((rc = put_values(c, x, flat, vals, 1)) || (rc = al_mat_fx(c, c->cur, &sum))) return rc;
    if ((rc = al_fill_like(c, x, 0.0, &cnt0)) || (rc = al_fill_like(c, vals, 1.0, &ones)) || (rc = put_values(c, cnt0, flat, ones, 1)) ||
        (rc = al_mat_fx(c, c->cur, &cnt)))
        return rc;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.sub = include_self ? DRIFT_SCALAR_ADD : DRIFT_SCALAR_MAX;
    op.scalar = 1.0;
    if ((rc = al_emit(c, DRIFT_OP_SCALAR, &op, 1, &cnt, DRIFT_RULE_LIKE_INPUT0, &cnt))) return rc;
    in[0] = sum, in[1] = cnt;
    if ((rc = al_emit(c, DRIFT_OP_DIV, NULL, 2, in, DRIFT_RULE_LIKE_INPUT0, &id))) return rc;
    return al_set_result(c, id);
}

/* nonzero_numpy(self): one int64 index tensor per dim of self ([count] each), the columns
 * of NONZERO with the count of the graph's shapes (a replay whose count differs stops,
 * naming both counts). */
int al_lower_nonzero_numpy(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int x, rc, nz;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x))) return rc;
    const drift_json_value *val = al_cur_node(c)->val;
    const int nd = val_of(c, x)->ndim;
    if (nd < 1) return FAIL(c, "nonzero_numpy of a 0-d tensor is not supported");
    if (!val || val->type != DRIFT_JSON_ARRAY || (int)val->n_items != nd)
        return FAIL(c, "nonzero_numpy: 'val' must list %d tensors (one per dim of self)", nd);
    int vnd;
    int64_t vs[DRIFT_MAX_DIMS];
    if ((rc = al_val_shape(c, &val->items[0], &vnd, vs))) return rc;
    if (vnd != 1) return FAIL(c, "nonzero_numpy: 'val' tensors must be 1-d ([count])");
    const int64_t n = al_rb_nonzero_count(c, vs[0]);
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_NONZERO);
    s.op.n_in = 1;
    s.in[0] = x;
    s.rule = DRIFT_RULE_FIXED;
    s.rule_dtype = DRIFT_I64;
    s.ndim = 2, s.shape[0] = n, s.shape[1] = nd;
    if ((rc = al_add_node(c, &s, &nz))) return rc;
    aten_view cols[DRIFT_MAX_DIMS];
    for (int k = 0; k < nd; k++) {
        int col;
        const int64_t one = (int64_t)nd;
        if ((rc = al_emit_gather(c, nz, 1, &n, &one, k, &col)) || (rc = al_set_result(c, col))) return rc;
        cols[k] = c->fx[c->cur].t;
    }
    fxv *f = &c->fx[c->cur];
    if (!(f->multi = drift_calloc((size_t)nd, sizeof *f->multi))) return drift_err_set(c->err, DRIFT_E_NOMEM, "aten", "out of memory");
    memcpy(f->multi, cols, sizeof(aten_view) * (size_t)nd);
    f->n_multi = nd;
    f->kind = FX_MULTI;
    f->ragged = n != vs[0];
    return DRIFT_OK;
}

/* fill(self, value): self's shape and dtype holding a number (fill.Scalar) or a 0-d
 * tensor's value (fill.Tensor: broadcast with stride 0, cast to self's dtype); fill_ writes
 * it into self (al_lower_inplace). */
int al_lower_fill_value(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int j, self, rc, out;
    if ((rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &j)) || (rc = al_mat_fx(c, j, &self))) return rc;
    const drift_json_value *v = al_arg(c, 1, "value");
    if (al_node_ref(v)) {
        int vj, x;
        if ((rc = al_tensor_arg(c, v, "value", &vj))) return rc;
        aten_view e = c->fx[vj].t;
        if (e.nd != 0) return FAIL(c, "value: a tensor of %d dims (fill takes a 0-d tensor)", e.nd);
        const aten_view *sv = &c->fx[j].t;
        e.nd = sv->nd;
        for (int i = 0; i < sv->nd; i++) e.size[i] = sv->size[i], e.stride[i] = 0;
        if ((rc = al_mat_view(c, &e, &x)) || (rc = al_emit_cast(c, x, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, self, &out)))
            return rc;
    } else {
        double value;
        if ((rc = al_get_num(c, v, "value", 0, &value))) return rc;
        if ((rc = al_fill_like(c, self, value, &out))) return rc;
    }
    return al_set_result(c, out);
}

int al_lower_nonzero(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int x, rc, nd;
    int64_t sh[DRIFT_MAX_DIMS];
    if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x))) return rc;
    if ((rc = al_val_shape(c, al_cur_node(c)->val, &nd, sh))) return rc; /* [count, ndim]: the recorded count */
    const int64_t rec = nd >= 1 ? sh[0] : 0;
    if (nd >= 1) sh[0] = al_rb_nonzero_count(c, sh[0]);
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_NONZERO);
    s.op.n_in = 1;
    s.in[0] = x;
    s.rule = DRIFT_RULE_FIXED;
    s.rule_dtype = DRIFT_I64;
    s.ndim = nd;
    memcpy(s.shape, sh, sizeof(int64_t) * (size_t)nd);
    int id;
    if ((rc = al_add_node(c, &s, &id)) || (rc = al_set_result(c, id))) return rc;
    c->fx[c->cur].ragged = nd >= 1 && sh[0] != rec;
    return DRIFT_OK;
}

/* x (nd dims) inside a fill of value of the padded shape sh, offset by lo per dim: the fill
 * in x's dtype, x scattered into its interior. */
static int emit_padded(lctx *c, int x, int nd, const int64_t *sh, const int64_t *lo, double value, int *id) {
    int rc, base_id;
    int64_t st[DRIFT_MAX_DIMS];
    if ((rc = fill_shape(c, nd, sh, DRIFT_F32, 0, value, 0, &base_id)) ||
        (rc = al_emit_cast(c, base_id, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, x, &base_id)))
        return rc;
    contig_strides(nd, sh, st);
    drift_op op;
    memset(&op, 0, sizeof op);
    for (int i = 0; i < nd; i++) op.start += lo[i] * st[i], op.stride[i] = st[i];
    int in[2] = {base_id, x};
    return al_emit(c, DRIFT_OP_SCATTER, &op, 2, in, DRIFT_RULE_LIKE_INPUT0, id);
}

/* The source index of padded position i (i < 0: before, >= n: after) along a dim of n:
 * replicate clamps, reflect mirrors without repeating the edge, circular wraps. */
static int64_t pad_source(int mode, int64_t i, int64_t n) {
    if (mode == 1) return i < 0 ? 0 : i >= n ? n - 1 : i;
    if (mode == 2) return i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i;
    return ((i % n) + n) % n;
}

/* pad modes replicate (1), reflect (2), circular (3): dim by dim (last first, as torch's
 * pad list runs), each padded position one gathered slice of the current tensor, joined
 * to it by CONCATs; exact (values are moved, not computed). */
static int pad_by_copies(lctx *c, int x, int mode, int np, const int64_t *pad, int *id) {
    int rc;
    for (int k = 0; k < np / 2; k++) {
        const drift_value v = *val_of(c, x);
        const int d = v.ndim - 1 - k;
        const int64_t n = v.shape[d], lo = pad[2 * k], hi = pad[2 * k + 1];
        if (lo == 0 && hi == 0) continue;
        if ((mode == 2 && (lo >= n || hi >= n)) || (mode == 3 && (lo > n || hi > n)))
            return FAIL(c, "pad: padding %lld, %lld of a dim of %lld is more than the mode allows", (long long)lo, (long long)hi, (long long)n);
        if (n < 1) return FAIL(c, "pad: a dim of size 0 cannot be padded in this mode");
        int64_t st[DRIFT_MAX_DIMS], sh[DRIFT_MAX_DIMS];
        contig_strides(v.ndim, v.shape, st);
        memcpy(sh, v.shape, sizeof(int64_t) * (size_t)v.ndim);
        sh[d] = 1;
        int cur = -1;
        for (int64_t i = -lo; i < n + hi; i++) {
            int piece;
            if (i == 0) piece = x, i = n - 1; /* the tensor itself */
            else if ((rc = al_emit_gather(c, x, v.ndim, sh, st, pad_source(mode, i, n) * st[d], &piece))) return rc;
            if (cur < 0) { cur = piece; continue; }
            drift_op op;
            memset(&op, 0, sizeof op);
            op.dim = d;
            int in[2] = {cur, piece};
            if ((rc = al_emit(c, DRIFT_OP_CONCAT, &op, 2, in, DRIFT_RULE_PROMOTE, &cur))) return rc;
        }
        x = cur;
    }
    *id = x;
    return DRIFT_OK;
}

/* constant_pad_nd(self, pad, value) / pad(self, pad, mode, value): a fill of the padded
 * shape with x scattered into its interior; other modes: pad_by_copies. */
int al_lower_pad(lctx *c, const char *base, const char *target) {
    (void)target;
    int x, rc, np = 0, id;
    int64_t pad[2 * DRIFT_MAX_DIMS];
    double value = 0.0;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x))) return rc;
    const drift_json_value *pv = al_arg(c, 1, "pad");
    if (!pv || pv->type != DRIFT_JSON_ARRAY || pv->n_items > 2 * DRIFT_MAX_DIMS || pv->n_items % 2)
        return FAIL(c, "pad: expected an even-length list of integers");
    for (size_t i = 0; i < pv->n_items; i++)
        if ((rc = al_get_int(c, &pv->items[i], "pad", 0, &pad[np++]))) return rc;
    if (!strcmp(base, "pad")) {
        const char *mode = NULL;
        if ((rc = al_get_str(c, al_arg(c, 2, "mode"), "mode", "constant", &mode))) return rc;
        const int m = !strcmp(mode, "replicate") ? 1 : !strcmp(mode, "reflect") ? 2 : !strcmp(mode, "circular") ? 3 : 0;
        if (!m && strcmp(mode, "constant"))
            return FAIL(c, "pad mode '%s': expected constant, replicate, reflect or circular", mode);
        if (m) {
            if (np / 2 > val_of(c, x)->ndim) return FAIL(c, "pad of %d dims on a %d-d tensor", np / 2, val_of(c, x)->ndim);
            for (int k = 0; k < np; k++)
                if (pad[k] < 0) return FAIL(c, "negative padding (cropping) is not supported yet");
            if ((rc = pad_by_copies(c, x, m, np, pad, &id))) return rc;
            if (id == x) { /* nothing padded: still a new tensor (a later in-place write must not reach self) */
                const drift_value v = *val_of(c, x);
                int64_t st[DRIFT_MAX_DIMS];
                contig_strides(v.ndim, v.shape, st);
                if ((rc = al_emit_gather(c, x, v.ndim, v.shape, st, 0, &id))) return rc;
            }
            return al_set_result(c, id);
        }
        if ((rc = al_get_num(c, al_arg(c, 3, "value"), "value", 0.0, &value))) return rc;
    } else if ((rc = al_get_num(c, al_arg(c, 2, "value"), "value", 0.0, &value))) {
        return rc;
    }
    const drift_value xv_c = *val_of(c, x), *xv = &xv_c; /* copies: emitting a node may move the graph's values */
    if (np / 2 > xv->ndim) return FAIL(c, "pad of %d dims on a %d-d tensor", np / 2, xv->ndim);
    int64_t sh[DRIFT_MAX_DIMS], lo[DRIFT_MAX_DIMS] = {0};
    memcpy(sh, xv->shape, sizeof sh);
    for (int k = 0; k < np / 2; k++) {
        int d = xv->ndim - 1 - k;
        if (pad[2 * k] < 0 || pad[2 * k + 1] < 0) return FAIL(c, "negative padding (cropping) is not supported yet");
        lo[d] = pad[2 * k];
        sh[d] += pad[2 * k] + pad[2 * k + 1];
    }
    if ((rc = emit_padded(c, x, xv->ndim, sh, lo, value, &id))) return rc;
    return al_set_result(c, id);
}

/* native_group_norm(input, weight, bias, N, C, HxW, group, eps) -> (out, mean, rstd):
 * out as group_norm; mean and rstd are not tensors drift gives (getitem of them fails). */
int al_lower_native_group_norm(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int in[3], n = 1, rc, id;
    int64_t groups;
    double eps;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "input"), "input", &in[0])) ||
        (rc = al_get_int(c, al_arg(c, 6, "group"), "group", 1, &groups)) || (rc = al_get_num(c, al_arg(c, 7, "eps"), "eps", 1e-5, &eps)))
        return rc;
    int64_t nchw[3]; /* N, C, HxW: restate the input's shape */
    if ((rc = al_get_int(c, al_arg(c, 3, "N"), "N", -1, &nchw[0])) || (rc = al_get_int(c, al_arg(c, 4, "C"), "C", -1, &nchw[1])) ||
        (rc = al_get_int(c, al_arg(c, 5, "HxW"), "HxW", -1, &nchw[2])))
        return rc;
    const drift_json_value *w = al_arg(c, 1, "weight"), *b = al_arg(c, 2, "bias");
    if (!al_is_none(w) && (rc = al_mat_arg(c, w, "weight", &in[n++]))) return rc;
    if (!al_is_none(b)) {
        if (n == 1) return FAIL(c, "group_norm with a bias but no weight is not supported");
        if ((rc = al_mat_arg(c, b, "bias", &in[n++]))) return rc;
    }
    const drift_value xv_c = *val_of(c, in[0]), *xv = &xv_c; /* copies: emitting a node may move the graph's values */
    if (xv->ndim < 2 || groups < 1 || xv->shape[1] % groups)
        return FAIL(c, "group_norm: %lld groups do not divide the channels", (long long)groups);
    int64_t hw = 1;
    for (int i = 2; i < xv->ndim; i++) hw *= xv->shape[i];
    if ((nchw[0] >= 0 && nchw[0] != xv->shape[0]) || (nchw[1] >= 0 && nchw[1] != xv->shape[1]) || (nchw[2] >= 0 && nchw[2] != hw))
        return FAIL(c, "native_group_norm: N, C, HxW = %lld, %lld, %lld for an input of %lld x %lld x %lld", (long long)nchw[0],
                    (long long)nchw[1], (long long)nchw[2], (long long)xv->shape[0], (long long)xv->shape[1], (long long)hw);
    drift_op op;
    memset(&op, 0, sizeof op);
    op.length = groups;
    op.eps = (float)eps;
    if ((rc = al_emit(c, DRIFT_OP_GROUP_NORM, &op, n, in, DRIFT_RULE_AUTOCAST_FP32, &id))) return rc;
    if ((rc = al_set_result(c, id))) return rc;
    fxv *f = &c->fx[c->cur];
    aten_view out = f->t;
    f->multi = drift_calloc(3, sizeof *f->multi);
    if (!f->multi) return drift_err_set(c->err, DRIFT_E_NOMEM, "aten", "out of memory");
    f->multi[0] = out;
    f->multi[1].root = f->multi[2].root = -1;
    f->n_multi = 3;
    f->kind = FX_MULTI;
    return DRIFT_OK;
}

/* polar(abs, angle): the complex abs * (cos angle, sin angle), stored as (re, im) pairs. */
int al_lower_polar(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int r, t, rc, co, si, in[2], re, im, id;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "abs"), "abs", &r)) || (rc = al_mat_arg(c, al_arg(c, 1, "angle"), "angle", &t))) return rc;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.sub = DRIFT_UNARY_COS;
    if ((rc = al_emit(c, DRIFT_OP_UNARY, &op, 1, &t, DRIFT_RULE_PROMOTE, &co))) return rc;
    op.sub = DRIFT_UNARY_SIN;
    if ((rc = al_emit(c, DRIFT_OP_UNARY, &op, 1, &t, DRIFT_RULE_PROMOTE, &si))) return rc;
    in[0] = r, in[1] = co;
    if ((rc = al_emit(c, DRIFT_OP_MUL, NULL, 2, in, DRIFT_RULE_PROMOTE, &re))) return rc;
    in[1] = si;
    if ((rc = al_emit(c, DRIFT_OP_MUL, NULL, 2, in, DRIFT_RULE_PROMOTE, &im))) return rc;
    const drift_value v_c = *val_of(c, re), *v = &v_c; /* copies: emitting a node may move the graph's values */
    if (v->ndim >= DRIFT_MAX_DIMS) return FAIL(c, "polar of a %d-d tensor", v->ndim);
    int64_t sh[DRIFT_MAX_DIMS];
    memcpy(sh, v->shape, sizeof(int64_t) * (size_t)v->ndim);
    sh[v->ndim] = 1;
    if ((rc = al_emit_view_to(c, re, v->ndim + 1, sh, &re)) || (rc = al_emit_view_to(c, im, v->ndim + 1, sh, &im))) return rc;
    memset(&op, 0, sizeof op);
    op.dim = v->ndim;
    in[0] = re, in[1] = im;
    if ((rc = al_emit(c, DRIFT_OP_CONCAT, &op, 2, in, DRIFT_RULE_PROMOTE, &id))) return rc;
    return al_set_result_cplx(c, id);
}

/* ---- convolutions other than the patch embedding ----------------------------------- */

/* conv1d/conv2d with any stride, padding, dilation and groups as torch defines it, as one
 * im2col gather and one batched GEMM per group: x zero-padded to [B, C, Hp, Wp] (a 1-d
 * input is H = 1); cols[g, (b, ho, wo), (cg, i, j)] = xp[b, g Cg + cg, ho sH + i dH,
 * wo sW + j dW]; y = cols @ w[g]^T (BMM, the autocast list's conv: lower precision, K in
 * (cg, i, j) order); bias added after (cuDNN's separate op); y laid out as [B, O, Ho, Wo].
 * The values are torch's; the K order inside the GEMM is drift's, so a cuDNN convolution is
 * matched to its GEMM's rounding, not bit for bit. x, w, b: drift ids; b -1 for none. */
int al_lower_conv_im2col(lctx *c, int x, int w, int b, int sp, const int64_t *st, const int64_t *pad,
                         const int64_t *dil, int64_t G) {
    const drift_value xv_c = *val_of(c, x), *xv = &xv_c, wv_c = *val_of(c, w), *wv = &wv_c;
    const int64_t B = xv->shape[0], C = xv->shape[1], O = wv->shape[0];
    const int64_t H = sp == 2 ? xv->shape[2] : 1, W = xv->shape[sp + 1];
    const int64_t kH = sp == 2 ? wv->shape[2] : 1, kW = wv->shape[sp + 1];
    const int64_t sH = sp == 2 ? st[0] : 1, sW = st[sp - 1], pH = sp == 2 ? pad[0] : 0, pW = pad[sp - 1];
    const int64_t dH = sp == 2 ? dil[0] : 1, dW = dil[sp - 1];
    if (G < 1 || C % G || O % G || wv->shape[1] * G != C)
        return FAIL(c, "groups %lld do not divide %lld in-channels and %lld out-channels", (long long)G, (long long)C,
                    (long long)O);
    if (sH < 1 || sW < 1 || pH < 0 || pW < 0 || dH < 1 || dW < 1)
        return FAIL(c, "stride and dilation must be >= 1, padding >= 0");
    const int64_t Hp = H + 2 * pH, Wp = W + 2 * pW;
    const int64_t Ho = (Hp - dH * (kH - 1) - 1) / sH + 1, Wo = (Wp - dW * (kW - 1) - 1) / sW + 1;
    if (Hp - dH * (kH - 1) - 1 < 0 || Wp - dW * (kW - 1) - 1 < 0) return FAIL(c, "the kernel is larger than the padded input");
    const int64_t Cg = C / G, Og = O / G, T = kH * kW, L = Ho * Wo;
    int rc, xp = x, cols, wk, y, id;
    if (pH || pW) { /* zero padding */
        int x4;
        if ((rc = al_emit_view_to(c, x, 4, (int64_t[]){B, C, H, W}, &x4)) ||
            (rc = emit_padded(c, x4, 4, (int64_t[]){B, C, Hp, Wp}, (int64_t[]){0, 0, pH, pW}, 0.0, &xp)))
            return rc;
    }
    /* cols [G, B, Ho, Wo, Cg, kH, kW] with its size-1 dims dropped (at most 8 dims) */
    int64_t sh[8], sd[8];
    int n = 0;
    const int64_t all_sh[7] = {G, B, Ho, Wo, Cg, kH, kW};
    const int64_t all_st[7] = {Cg * Hp * Wp, C * Hp * Wp, sH * Wp, sW, Hp * Wp, dH * Wp, dW};
    for (int i = 0; i < 7; i++)
        if (all_sh[i] != 1) sh[n] = all_sh[i], sd[n++] = all_st[i];
    if (n == 0) sh[n] = 1, sd[n++] = 1;
    if ((rc = al_emit_gather(c, xp, n, sh, sd, 0, &cols))) return rc;
    if ((rc = al_emit_view_to(c, cols, 3, (int64_t[]){G, B * L, Cg * T}, &cols))) return rc;
    /* w [O, Cg, kH, kW] = [G, Og, Cg T] -> [G, Cg T, Og] */
    if ((rc = al_emit_gather(c, w, 3, (int64_t[]){G, Cg * T, Og}, (int64_t[]){Og * Cg * T, 1, Cg * T}, 0, &wk))) return rc;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.alpha = op.beta = 1.0f;
    op.layout = DRIFT_BMM_STAND_IN; /* torch runs cuDNN's convolution, no bmm */
    int in[2] = {cols, wk};
    if ((rc = al_emit(c, DRIFT_OP_BMM, &op, 2, in, DRIFT_RULE_AUTOCAST_LOWER, &y))) return rc;
    /* y [G, B, Ho, Wo, Og] -> [B, G, Og, Ho, Wo] = [B, O, Ho, Wo] */
    if ((rc = al_emit_gather(c, y, 5, (int64_t[]){B, G, Og, Ho, Wo}, (int64_t[]){L * Og, B * L * Og, 1, Wo * Og, Og}, 0, &id)))
        return rc;
    if (b >= 0) {
        int bv;
        if ((rc = al_emit_view_to(c, b, 4, (int64_t[]){1, O, 1, 1}, &bv)) ||
            (rc = al_emit_view_to(c, id, 4, (int64_t[]){B, O, Ho, Wo}, &id)))
            return rc;
        int ab[2] = {id, bv};
        if ((rc = al_emit(c, DRIFT_OP_ADD, NULL, 2, ab, DRIFT_RULE_AUTOCAST_LOWER, &id))) return rc;
    }
    if (sp == 2) rc = al_emit_view_to(c, id, 4, (int64_t[]){B, O, Ho, Wo}, &id);
    else rc = al_emit_view_to(c, id, 3, (int64_t[]){B, O, Wo}, &id);
    if (rc) return rc;
    return al_set_result(c, id);
}

/* ---- norms and pooling as compositions ---------------------------------------------- */

/* linalg_vector_norm(self, ord=2, dim=None, keepdim=False, dtype=None): sqrt(sum(x * x))
 * over dim (all when None), ord 2 only; each step under the op's autocast rule (norm
 * is on the fp32 list). */
int al_lower_vector_norm(lctx *c, const char *base, const char *target) {
    (void)base;
    int j, x, sq, id, rc;
    double ord;
    int64_t dims[DRIFT_MAX_DIMS], keep = 0;
    int n = 0;
    if ((rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &j)) || (rc = al_get_num(c, al_arg(c, 1, "ord"), "ord", 2.0, &ord)))
        return rc;
    if (ord != 2.0) return FAIL(c, "linalg_vector_norm with ord %g is not supported yet (2 only)", ord);
    const drift_json_value *dv = al_arg(c, 2, "dim");
    if (!al_is_none(dv) && (rc = al_get_ints(c, dv, "dim", dims, &n))) return rc;
    if ((rc = al_get_int(c, al_arg(c, 3, "keepdim"), "keepdim", 0, &keep))) return rc;
    int given = 0, is_int = 0;
    drift_dtype dt = DRIFT_DTYPE_INVALID;
    const drift_json_value *dtv = al_arg(c, -1, "dtype");
    if (!al_is_none(dtv) && (rc = al_get_dtype(c, dtv, "dtype", &given, &dt, &is_int))) return rc;
    if (given && is_int) return FAIL(c, "linalg_vector_norm: 'dtype' must be a floating dtype");
    if ((rc = al_mat_fx(c, j, &x))) return rc;
    /* dtype=: torch casts the input to it first, then computes in it (Cosmos' learnable_pos_embed) */
    if (given && (rc = al_emit_cast(c, x, DRIFT_RULE_CAST_TO, dt, -1, &x))) return rc;
    const drift_dtype_rule rule = al_rule_of(target);
    int in[2] = {x, x};
    if ((rc = al_emit(c, DRIFT_OP_MUL, NULL, 2, in, rule, &sq)) || (rc = al_set_result(c, sq))) return rc;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.sub = DRIFT_REDUCE_SUM;
    if ((rc = reduce_dims(c, c->cur, dims, n, (int)keep, &op, 0, DRIFT_DTYPE_INVALID, rule))) return rc;
    if ((rc = al_mat_fx(c, c->cur, &x))) return rc;
    memset(&op, 0, sizeof op);
    op.sub = DRIFT_UNARY_SQRT;
    if ((rc = al_emit(c, DRIFT_OP_UNARY, &op, 1, &x, rule, &id))) return rc;
    return al_set_result(c, id);
}

/* avg_pool{1,2,3}d(self, kernel_size, stride=kernel, padding=0, ceil_mode, count_include_pad,
 * divisor_override) with stride == kernel and no padding: the input viewed as
 * [B, C, n0, k0, n1, k1, ...] and one mean over the k dims. */
int al_lower_avg_pool(lctx *c, const char *base, const char *target) {
    const int sp = base[8] - '0'; /* "avg_poolNd" */
    int j, rc, x, id;
    int64_t k[3], s[3], p[3];
    int nk = 0, ns = 0, np = 0;
    if ((rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &j)) ||
        (rc = al_get_ints(c, al_arg(c, 1, "kernel_size"), "kernel_size", k, &nk)))
        return rc;
    const drift_json_value *sv = al_arg(c, 2, "stride"), *pv = al_arg(c, 3, "padding");
    if (!al_is_none(sv) && (rc = al_get_ints(c, sv, "stride", s, &ns))) return rc;
    if (!al_is_none(pv) && (rc = al_get_ints(c, pv, "padding", p, &np))) return rc;
    if (!al_is_none(al_arg(c, 6, "divisor_override"))) return FAIL(c, "avg_pool with divisor_override is not supported yet");
    const aten_view *v = &c->fx[j].t;
    if (sp < 1 || sp > 3 || v->nd != sp + 2 || (nk != 1 && nk != sp)) return FAIL(c, "avg_pool%dd of a %d-d input", sp, v->nd);
    int64_t sh[DRIFT_MAX_DIMS], dims[3];
    int m = 0;
    sh[m++] = v->size[0], sh[m++] = v->size[1];
    for (int i = 0; i < sp; i++) {
        const int64_t ki = k[nk == 1 ? 0 : i], si = ns == 0 ? ki : s[ns == 1 ? 0 : i], pi = np == 0 ? 0 : p[np == 1 ? 0 : i];
        if (si != ki || pi != 0 || ki < 1 || v->size[2 + i] % ki)
            return FAIL(c, "only avg_pool with stride == kernel, no padding and a divisible input is supported yet");
        sh[m++] = v->size[2 + i] / ki;
        dims[i] = m;
        sh[m++] = ki;
    }
    if ((rc = al_mat_fx(c, j, &x)) || (rc = al_emit_view_to(c, x, m, sh, &x)) || (rc = al_set_result(c, x))) return rc;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.sub = DRIFT_REDUCE_MEAN;
    (void)id;
    return reduce_dims(c, c->cur, dims, sp, 0, &op, 0, DRIFT_DTYPE_INVALID, al_rule_of(target));
}

/* ---- einsum of two operands -------------------------------------------------------- */

/* A view of drift value x permuted to the letter order `want` (of the operand's letters
 * `have`), materialised by one gather; sh receives the sizes. */
static int permute_letters(lctx *c, int x, const char *have, const char *want, int64_t *sh, int *id) {
    const drift_value v = *val_of(c, x);
    int64_t st[DRIFT_MAX_DIMS], pst[DRIFT_MAX_DIMS];
    contig_strides(v.ndim, v.shape, st);
    const int n = (int)strlen(want);
    for (int k = 0; k < n; k++) {
        const char *p = strchr(have, want[k]);
        sh[k] = v.shape[p - have];
        pst[k] = st[p - have];
    }
    if (n == 0) { *id = x; return DRIFT_OK; }
    return al_emit_gather(c, x, n, sh, pst, 0, id);
}

/* einsum("A,B->O", a, b) without repeated letters in one operand ('...' becomes letters): letters in
 * both and the output are batch dims, in both and not the output contracted, in one
 * operand and the output free; each operand permuted to [batch, free, contracted], one
 * BMM (the autocast list's: einsum reaches bmm), the result permuted to O. */
/* An equation with '...' rewritten with letters of its own (capitals the equation does not
 * use), right-aligned as torch broadcasts them: an operand with fewer ellipsis dims lacks
 * the leading ones (a letter of the other operand only, which the output keeps). */
static int einsum_expand_ellipsis(lctx *c, const char *eq, const drift_json_value *ops, char *buf, size_t nbuf) {
    char fresh[DRIFT_MAX_DIMS];
    int nf = 0, rc, ne = 0, nd[2];
    for (char l = 'A'; l <= 'Z' && nf < DRIFT_MAX_DIMS; l++)
        if (!strchr(eq, l)) fresh[nf++] = l;
    for (int k = 0; k < 2; k++) {
        int j;
        if ((rc = al_tensor_arg(c, &ops->items[k], k ? "tensors[1]" : "tensors[0]", &j))) return rc;
        nd[k] = c->fx[j].t.nd;
    }
    /* pass 1: the ellipsis dims of each operand; the output has the most */
    const char *arrow = strstr(eq, "->");
    int ell[2] = {0, 0};
    for (int k = 0, pos = 0; k < 2; k++) {
        const char *start = eq + pos, *end = k == 0 ? strchr(eq, ',') : arrow;
        if (!end) return FAIL(c, "einsum '%s': expected 'A,B->O'", eq);
        int letters = 0, has = 0;
        for (const char *q = start; q < end; q++) {
            if (!strncmp(q, "...", 3)) { has = 1; q += 2; }
            else letters++;
        }
        ell[k] = has ? nd[k] - letters : 0;
        if (ell[k] < 0) return FAIL(c, "einsum '%s': operand %d has %d dims", eq, k, nd[k]);
        if (ell[k] > ne) ne = ell[k];
        pos = (int)(end - eq) + 1;
    }
    if (ne > nf) return FAIL(c, "einsum '%s': too many dims", eq);
    size_t o = 0;
    int part = 0;
    for (const char *q = eq; *q; q++) {
        if (*q == ',') part = 1;
        else if (*q == '-' && q[1] == '>') part = 2;
        if (!strncmp(q, "...", 3)) {
            const int n = part == 2 ? ne : ell[part];
            for (int i = ne - n; i < ne && o + 1 < nbuf; i++) buf[o++] = fresh[i];
            q += 2;
            continue;
        }
        if (o + 1 < nbuf) buf[o++] = *q;
    }
    buf[o] = 0;
    return DRIFT_OK;
}

int al_lower_einsum2(lctx *c, const char *eq) {
    const drift_json_value *ops = al_arg(c, 1, "tensors");
    char expanded[128];
    if (strstr(eq, "...")) {
        int rc;
        if (strlen(eq) >= sizeof expanded - DRIFT_MAX_DIMS * 3) return FAIL(c, "einsum '%s': too long", eq);
        if ((rc = einsum_expand_ellipsis(c, eq, ops, expanded, sizeof expanded))) return rc;
        eq = expanded;
    }
    char la[DRIFT_MAX_DIMS + 1] = "", lb[DRIFT_MAX_DIMS + 1] = "", lo[DRIFT_MAX_DIMS + 1] = "";
    const char *comma = strchr(eq, ','), *arrow = strstr(eq, "->");
    if (!comma || !arrow || comma > arrow || strchr(eq, '.'))
        return FAIL(c, "einsum '%s': expected 'A,B->O' without ellipsis", eq);
    size_t na = (size_t)(comma - eq), nb = (size_t)(arrow - comma - 1), no = strlen(arrow + 2);
    if (na > DRIFT_MAX_DIMS || nb > DRIFT_MAX_DIMS || no > DRIFT_MAX_DIMS) return FAIL(c, "einsum '%s': too many dims", eq);
    memcpy(la, eq, na), memcpy(lb, comma + 1, nb), memcpy(lo, arrow + 2, no);
    for (const char *s = la; *s; s++)
        if (strchr(s + 1, *s)) return FAIL(c, "einsum '%s': a repeated letter in one operand is not supported yet", eq);
    for (const char *s = lb; *s; s++)
        if (strchr(s + 1, *s)) return FAIL(c, "einsum '%s': a repeated letter in one operand is not supported yet", eq);
    for (const char *s = lo; *s; s++)
        if (!strchr(la, *s) && !strchr(lb, *s)) return FAIL(c, "einsum '%s': output letter '%c' in no operand", eq, *s);
    for (const char *s = la; *s; s++)
        if (!strchr(lb, *s) && !strchr(lo, *s)) return FAIL(c, "einsum '%s': summing '%c' of one operand is not supported yet", eq, *s);
    for (const char *s = lb; *s; s++)
        if (!strchr(la, *s) && !strchr(lo, *s)) return FAIL(c, "einsum '%s': summing '%c' of one operand is not supported yet", eq, *s);
    char bat[9] = "", fa[9] = "", fb[9] = "", con[9] = "";
    for (const char *s = lo; *s; s++) {
        char *dst = strchr(la, *s) && strchr(lb, *s) ? bat : strchr(la, *s) ? fa : fb;
        size_t k = strlen(dst);
        dst[k] = *s, dst[k + 1] = 0;
    }
    for (const char *s = la; *s; s++)
        if (strchr(lb, *s) && !strchr(lo, *s)) { size_t k = strlen(con); con[k] = *s, con[k + 1] = 0; }
    int a, b, rc;
    if ((rc = al_mat_arg(c, &ops->items[0], "tensors[0]", &a)) || (rc = al_mat_arg(c, &ops->items[1], "tensors[1]", &b)))
        return rc;
    if (val_of(c, a)->ndim != (int)na || val_of(c, b)->ndim != (int)nb)
        return FAIL(c, "einsum '%s': the operands have %d and %d dims", eq, val_of(c, a)->ndim, val_of(c, b)->ndim);
    char wa[DRIFT_MAX_DIMS * 2 + 1], wb[DRIFT_MAX_DIMS * 2 + 1];
    snprintf(wa, sizeof wa, "%s%s%s", bat, fa, con);
    snprintf(wb, sizeof wb, "%s%s%s", bat, con, fb);
    int64_t sa[DRIFT_MAX_DIMS], sb[DRIFT_MAX_DIMS];
    if ((rc = permute_letters(c, a, la, wa, sa, &a)) || (rc = permute_letters(c, b, lb, wb, sb, &b))) return rc;
    const int nbat = (int)strlen(bat), nfa = (int)strlen(fa), nfb = (int)strlen(fb), ncon = (int)strlen(con);
    int64_t B = 1, M = 1, N = 1, K = 1, Kb = 1;
    for (int i = 0; i < nbat; i++) {
        if (sa[i] != sb[i]) return FAIL(c, "einsum '%s': '%c' has sizes %lld and %lld", eq, bat[i], (long long)sa[i], (long long)sb[i]);
        B *= sa[i];
    }
    for (int i = 0; i < nfa; i++) M *= sa[nbat + i];
    for (int i = 0; i < ncon; i++) K *= sa[nbat + nfa + i], Kb *= sb[nbat + i];
    for (int i = 0; i < nfb; i++) N *= sb[nbat + ncon + i];
    if (K != Kb) return FAIL(c, "einsum '%s': the contracted sizes differ", eq);
    int y;
    if ((rc = al_emit_view_to(c, a, 3, (int64_t[]){B, M, K}, &a)) || (rc = al_emit_view_to(c, b, 3, (int64_t[]){B, K, N}, &b)))
        return rc;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.alpha = op.beta = 1.0f;
    int in[2] = {a, b};
    /* no contracted letter: torch's einsum multiplies (sumproduct_pair without sum dims), no bmm,
     * so autocast leaves it in the operands' dtype (Helios' rope 'd,bthw->dbthw' stays fp32);
     * a BMM over K = 1 gives the product's one rounding */
    if ((rc = al_emit(c, DRIFT_OP_BMM, &op, 2, in, ncon ? DRIFT_RULE_AUTOCAST_LOWER : DRIFT_RULE_PROMOTE, &y))) return rc;
    /* [batch, fa, fb] -> the output's letter order */
    char have[DRIFT_MAX_DIMS * 3 + 1];
    int64_t hs[DRIFT_MAX_DIMS], os[DRIFT_MAX_DIMS];
    snprintf(have, sizeof have, "%s%s%s", bat, fa, fb);
    for (int i = 0; i < nbat + nfa; i++) hs[i] = sa[i];
    for (int i = 0; i < nfb; i++) hs[nbat + nfa + i] = sb[nbat + ncon + i];
    const int nh = nbat + nfa + nfb;
    if (nh == 0) return al_set_result(c, y);
    if ((rc = al_emit_view_to(c, y, nh, hs, &y))) return rc;
    if (strcmp(have, lo) && (rc = permute_letters(c, y, have, lo, os, &y))) return rc;
    return al_set_result(c, y);
}
