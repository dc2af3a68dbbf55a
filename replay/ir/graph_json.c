/* Graph IR <-> JSON (graph.h). The parser treats its input as untrusted: the
 * JSON reader bounds sizes and depth, every field is type- and range-checked
 * with its source position, unknown keys are rejected, and the graph is
 * rebuilt through the validating drift_graph_add_* functions. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "formats/json.h"
#include "formats/plan.h"
#include "replay/ir/graph.h"

/* ---- writer ---------------------------------------------------------------- */

static void put_attrs(drift_json_buf *b, const drift_op *op, int in0_ndim, int view_ndim) {
    switch (op->kind) {
    case DRIFT_OP_LINEAR:
        if (!op->layout) break; /* attrs only for a convolution's GEMM (DRIFT_LINEAR_CONV) */
        drift_json_buf_add_key(b, "attrs");
        drift_json_buf_begin_object(b);
        drift_json_buf_field_int(b, "layout", op->layout);
        drift_json_buf_end_object(b);
        break;
    case DRIFT_OP_LAYER_NORM:
    case DRIFT_OP_RMS_NORM:
        drift_json_buf_add_key(b, "attrs");
        drift_json_buf_begin_object(b);
        drift_json_buf_field_number(b, "eps", op->eps);
        drift_json_buf_end_object(b);
        break;
    case DRIFT_OP_AFFINE:
        drift_json_buf_add_key(b, "attrs");
        drift_json_buf_begin_object(b);
        drift_json_buf_field_number(b, "alpha", op->alpha);
        drift_json_buf_field_number(b, "beta", op->beta);
        drift_json_buf_end_object(b);
        break;
    case DRIFT_OP_ATTENTION:
        drift_json_buf_add_key(b, "attrs");
        drift_json_buf_begin_object(b);
        drift_json_buf_field_number(b, "scale", op->scale);
        if (op->layout) drift_json_buf_field_int(b, "layout", op->layout); /* omitted when 0 */
        if (op->sub) drift_json_buf_field_int(b, "order", op->sub);       /* drift_attn_order; omitted when 0 */
        drift_json_buf_end_object(b);
        break;
    case DRIFT_OP_TIMESTEP_SINUSOID:
        drift_json_buf_add_key(b, "attrs");
        drift_json_buf_begin_object(b);
        drift_json_buf_field_int(b, "dim", op->dim);
        drift_json_buf_field_number(b, "max_period", op->max_period);
        drift_json_buf_field_bool(b, "flip_sin_to_cos", op->flip_sin_to_cos);
        drift_json_buf_end_object(b);
        break;
    case DRIFT_OP_NARROW:
        drift_json_buf_add_key(b, "attrs");
        drift_json_buf_begin_object(b);
        drift_json_buf_field_int(b, "dim", op->dim);
        drift_json_buf_field_int(b, "start", op->start);
        drift_json_buf_field_int(b, "length", op->length);
        drift_json_buf_end_object(b);
        break;
    case DRIFT_OP_CONCAT:
        drift_json_buf_add_key(b, "attrs");
        drift_json_buf_begin_object(b);
        drift_json_buf_field_int(b, "dim", op->dim);
        drift_json_buf_end_object(b);
        break;
    case DRIFT_OP_PERMUTE:
    case DRIFT_OP_PATCHIFY:
    case DRIFT_OP_UNPATCHIFY: {
        int perm = op->kind == DRIFT_OP_PERMUTE;
        drift_json_buf_add_key(b, "attrs");
        drift_json_buf_begin_object(b);
        drift_json_buf_add_key(b, perm ? "perm" : "patch");
        drift_json_buf_begin_array(b);
        for (int i = 0; i < (perm ? in0_ndim : 3); i++) drift_json_buf_add_int(b, perm ? op->perm[i] : op->patch[i]);
        drift_json_buf_end_array(b);
        /* PATCHIFY's feature order; omitted when 0 (c, pf, ph, pw) */
        if (op->kind == DRIFT_OP_PATCHIFY && op->layout) drift_json_buf_field_int(b, "layout", op->layout);
        drift_json_buf_end_object(b);
        break;
    }
    case DRIFT_OP_UNARY:
    case DRIFT_OP_SCALAR:
    case DRIFT_OP_REDUCE:
    case DRIFT_OP_FILL:
    case DRIFT_OP_BINARY:
    case DRIFT_OP_PUT:
    case DRIFT_OP_ARGSORT:
    case DRIFT_OP_CUMSUM:
    case DRIFT_OP_SOFTMAX:
        drift_json_buf_add_key(b, "attrs");
        drift_json_buf_begin_object(b);
        drift_json_buf_field_string(b, "sub", drift_op_sub_name(op->kind, op->sub));
        if (op->kind == DRIFT_OP_SCALAR || op->kind == DRIFT_OP_FILL) drift_json_buf_field_number(b, "scalar", op->scalar);
        if (op->kind == DRIFT_OP_FILL) drift_json_buf_field_number(b, "step", op->step);
        if (op->kind == DRIFT_OP_UNARY && op->scalar != 0.0) drift_json_buf_field_number(b, "scalar", op->scalar);
        if (op->kind == DRIFT_OP_UNARY && op->step != 0.0) drift_json_buf_field_number(b, "step", op->step);
        if (op->kind == DRIFT_OP_REDUCE || op->kind == DRIFT_OP_ARGSORT || op->kind == DRIFT_OP_CUMSUM ||
            op->kind == DRIFT_OP_SOFTMAX)
            drift_json_buf_field_int(b, "dim", op->dim);
        if (op->kind == DRIFT_OP_REDUCE && op->length > 1) drift_json_buf_field_int(b, "length", op->length);
        if (op->kind == DRIFT_OP_ARGSORT && op->length > 0) {
            drift_json_buf_field_int(b, "length", op->length);
            drift_json_buf_field_int(b, "start", op->start);
        }
        if (op->kind == DRIFT_OP_REDUCE && op->scalar != 0.0) drift_json_buf_field_number(b, "scalar", op->scalar);
        drift_json_buf_end_object(b);
        break;
    case DRIFT_OP_BMM:
        drift_json_buf_add_key(b, "attrs");
        drift_json_buf_begin_object(b);
        drift_json_buf_field_number(b, "alpha", op->alpha);
        drift_json_buf_field_number(b, "beta", op->beta);
        if (op->layout) drift_json_buf_field_int(b, "layout", op->layout); /* torch's operand layout; omitted when 0 */
        drift_json_buf_end_object(b);
        break;
    case DRIFT_OP_GROUP_NORM:
        drift_json_buf_add_key(b, "attrs");
        drift_json_buf_begin_object(b);
        drift_json_buf_field_number(b, "eps", op->eps);
        drift_json_buf_field_int(b, "length", op->length);
        drift_json_buf_end_object(b);
        break;
    case DRIFT_OP_STRIDED:
    case DRIFT_OP_SCATTER: {
        /* strides cover the view's dims: the output's (STRIDED) or the source's (SCATTER) */
        drift_json_buf_add_key(b, "attrs");
        drift_json_buf_begin_object(b);
        drift_json_buf_field_int(b, "start", op->start);
        drift_json_buf_add_key(b, "stride");
        drift_json_buf_begin_array(b);
        for (int i = 0; i < view_ndim; i++) drift_json_buf_add_int(b, op->stride[i]);
        drift_json_buf_end_array(b);
        drift_json_buf_end_object(b);
        break;
    }
    default: break;
    }
}

static void put_value(drift_json_buf *b, const drift_graph *g, int id) {
    const drift_value *v = drift_graph_value(g, id);
    drift_json_buf_begin_object(b);
    drift_json_buf_field_int(b, "id", id);
    drift_json_buf_field_string(b, "kind", drift_graph_kind_name(v->kind));
    if (v->name) drift_json_buf_field_string(b, "name", v->name);
    if (v->site) drift_json_buf_field_string(b, "site", v->site);
    drift_json_buf_add_key(b, "shape");
    drift_json_buf_begin_array(b);
    for (int i = 0; i < v->ndim; i++) drift_json_buf_add_int(b, v->shape[i]);
    drift_json_buf_end_array(b);
    if (v->dtype != DRIFT_DTYPE_INVALID) drift_json_buf_field_string(b, "dtype", drift_dtype_name(v->dtype));
    if (v->kind == DRIFT_VAL_NODE) {
        drift_json_buf_field_string(b, "op", drift_graph_op_name(v->op.kind));
        drift_json_buf_add_key(b, "in");
        drift_json_buf_begin_array(b);
        for (int i = 0; i < v->op.n_in; i++) drift_json_buf_add_int(b, v->in[i]);
        drift_json_buf_end_array(b);
        const drift_value *in0 = v->op.n_in > 0 ? drift_graph_value(g, v->in[0]) : NULL;
        const drift_value *in1 = v->op.n_in > 1 ? drift_graph_value(g, v->in[1]) : NULL;
        put_attrs(b, &v->op, in0 ? in0->ndim : 0, v->op.kind == DRIFT_OP_SCATTER && in1 ? in1->ndim : v->ndim);
        drift_json_buf_field_string(b, "rule", drift_graph_rule_name(v->rule));
        if (v->rule == DRIFT_RULE_CAST_TO || v->rule == DRIFT_RULE_FIXED)
            drift_json_buf_field_string(b, "to", drift_dtype_name(v->rule_dtype));
        if (v->rule == DRIFT_RULE_TYPE_AS || v->rule == DRIFT_RULE_HALF_AS) drift_json_buf_field_int(b, "ref", v->rule_ref);
        if (v->rule == DRIFT_RULE_INPUT_POLICY)
            drift_json_buf_field_string(b, "input", drift_graph_input_name(v->rule_ref));
        if (drift_graph_is_assigned(g)) {
            drift_json_buf_field_string(b, "compute", drift_dtype_name(v->op.compute));
            drift_json_buf_field_string(b, "origin", drift_graph_origin_name(v->origin));
            drift_json_buf_field_int(b, "sem_id", v->sem_id);
        }
    }
    drift_json_buf_end_object(b);
}

char *drift_graph_to_json(const drift_graph *g, int indent, drift_err *err) {
    if (!g) {
        drift_err_set(err, DRIFT_E_INTERNAL, "graph", "drift_graph_to_json: graph is NULL");
        return NULL;
    }
    drift_json_buf b;
    drift_json_buf_init_pretty(&b, indent);
    drift_json_buf_begin_object(&b);
    drift_json_buf_field_string(&b, "format", DRIFT_GRAPH_FORMAT);
    drift_json_buf_field_int(&b, "version", DRIFT_GRAPH_VERSION);
    drift_json_buf_field_bool(&b, "assigned", drift_graph_is_assigned(g));
    drift_json_buf_field_string(&b, "model", drift_graph_model(g));
    drift_json_buf_field_int(&b, "output", drift_graph_output(g));
    drift_json_buf_add_key(&b, "values");
    drift_json_buf_begin_array(&b);
    for (int i = 0; i < drift_graph_count(g); i++) put_value(&b, g, i);
    drift_json_buf_end_array(&b);
    drift_json_buf_end_object(&b);
    char *s = drift_json_buf_take(&b);
    if (!s) drift_err_set(err, DRIFT_E_NOMEM, "graph", "out of memory serialising a graph");
    return s;
}

/* ---- reader ---------------------------------------------------------------- */

typedef struct jctx {
    const char *src;
    drift_err *err;
    char path[96]; /* "values[12]" */
} jctx;

static int jfail(jctx *c, const drift_json_value *v, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int jfail(jctx *c, const drift_json_value *v, const char *fmt, ...) {
    char where[600], msg[900];
    snprintf(where, sizeof where, "%s:%d:%d", c->src, v ? v->line : 1, v ? v->col : 1);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return drift_err_set(c->err, DRIFT_E_INPUT, where, "%s%s%s", c->path, c->path[0] ? ": " : "", msg);
}

/* Re-reports an error of the graph API at the position of the offending
 * value; codes other than DRIFT_E_INPUT (out of memory) are kept. */
static int rewrap(jctx *c, const drift_json_value *v, int rc) {
    if (rc == DRIFT_E_INPUT) return jfail(c, v, "%s", c->err->msg);
    snprintf(c->err->where, sizeof c->err->where, "%s:%d:%d", c->src, v ? v->line : 1, v ? v->col : 1);
    return rc;
}

static int expect_type(jctx *c, const char *field, const drift_json_value *v, drift_json_type t) {
    if (v->type == t) return DRIFT_OK;
    char got[96];
    return jfail(c, v, "'%s': expected %s %s, got %s", field, t == DRIFT_JSON_ARRAY || t == DRIFT_JSON_OBJECT ? "an" : "a",
                 drift_json_type_name(t), drift_json_describe(v, got, sizeof got));
}

static int get_int(jctx *c, const char *field, const drift_json_value *v, int64_t lo, int64_t hi, int64_t *out) {
    if (v->type != DRIFT_JSON_NUMBER || !v->is_int || v->integer < lo || v->integer > hi) {
        char got[96];
        return jfail(c, v, "'%s': expected an integer in [%lld, %lld], got %s", field, (long long)lo, (long long)hi,
                     drift_json_describe(v, got, sizeof got));
    }
    *out = v->integer;
    return DRIFT_OK;
}

static int get_float(jctx *c, const char *field, const drift_json_value *v, float *out) {
    if (v->type != DRIFT_JSON_NUMBER || !isfinite(v->number) || fabs(v->number) > FLT_MAX) {
        char got[96];
        return jfail(c, v, "'%s': expected a finite number within the fp32 range, got %s", field,
                     drift_json_describe(v, got, sizeof got));
    }
    *out = (float)v->number;
    return DRIFT_OK;
}

static int get_dtype(jctx *c, const char *field, const drift_json_value *v, drift_dtype *out) {
    int rc = expect_type(c, field, v, DRIFT_JSON_STRING);
    if (rc) return rc;
    drift_dtype d = drift_dtype_parse_any(v->str);
    if (d == DRIFT_DTYPE_INVALID || strcmp(v->str, drift_dtype_name(d)) != 0)
        return jfail(c, v, "'%s': expected fp32, bf16, fp16, fp64, int64, int32 or bool, got \"%s\"", field, v->str);
    *out = d;
    return DRIFT_OK;
}

static int get_int_array(jctx *c, const char *field, const drift_json_value *v, size_t min_n, size_t max_n, int64_t lo,
                         int64_t hi, int64_t *out, size_t *n) {
    int rc = expect_type(c, field, v, DRIFT_JSON_ARRAY);
    if (rc) return rc;
    if (v->n_items < min_n || v->n_items > max_n)
        return jfail(c, v, "'%s': expected %zu..%zu entries, got %zu", field, min_n, max_n, v->n_items);
    for (size_t i = 0; i < v->n_items; i++)
        if ((rc = get_int(c, field, &v->items[i], lo, hi, &out[i]))) return rc;
    *n = v->n_items;
    return DRIFT_OK;
}

static int check_keys(jctx *c, const drift_json_value *obj, const char *const *allowed) {
    for (size_t i = 0; i < obj->n_members; i++) {
        const drift_json_member *m = &obj->members[i];
        int ok = 0;
        for (size_t k = 0; allowed[k] && !ok; k++) ok = strcmp(m->key, allowed[k]) == 0;
        if (!ok) {
            drift_json_value at = {0};
            at.line = m->line;
            at.col = m->col;
            return jfail(c, &at, "unknown key '%s'", m->key);
        }
    }
    return DRIFT_OK;
}

static const drift_json_value *need(jctx *c, const drift_json_value *obj, const char *key, int *rc) {
    const drift_json_value *v = drift_json_object_get(obj, key);
    if (!v) *rc = jfail(c, obj, "missing key '%s'", key);
    return v;
}

static int parse_attrs(jctx *c, const drift_json_value *a, drift_op *op, int in0_ndim, int view_ndim) {
    int rc;
    int64_t t;
    static const char *const keys[] = {"eps", "alpha", "beta", "scale", "dim", "max_period", "flip_sin_to_cos",
                                       "start", "length", "perm", "patch", "layout", "sub", "scalar", "step",
                                       "stride", "order", NULL};
    if ((rc = expect_type(c, "attrs", a, DRIFT_JSON_OBJECT))) return rc;
    if ((rc = check_keys(c, a, keys))) return rc;
    /* Required attributes per op, then optional ones (default 0, so that
     * documents written before they existed stay valid); others are
     * rejected by name. */
    const char *req[4] = {NULL, NULL, NULL, NULL};
    const char *opt = NULL, *opt2 = NULL;
    switch (op->kind) {
    case DRIFT_OP_LAYER_NORM: case DRIFT_OP_RMS_NORM: req[0] = "eps"; break;
    case DRIFT_OP_AFFINE: req[0] = "alpha"; req[1] = "beta"; break;
    case DRIFT_OP_ATTENTION: req[0] = "scale"; opt = "layout"; opt2 = "order"; break;
    case DRIFT_OP_TIMESTEP_SINUSOID: req[0] = "dim"; req[1] = "max_period"; req[2] = "flip_sin_to_cos"; break;
    case DRIFT_OP_NARROW: req[0] = "dim"; req[1] = "start"; req[2] = "length"; break;
    case DRIFT_OP_CONCAT: req[0] = "dim"; break;
    case DRIFT_OP_PERMUTE: req[0] = "perm"; break;
    case DRIFT_OP_PATCHIFY: req[0] = "patch"; opt = "layout"; break;
    case DRIFT_OP_UNPATCHIFY: req[0] = "patch"; break;
    case DRIFT_OP_UNARY: req[0] = "sub"; opt = "step"; opt2 = "scalar"; break; /* softplus, elu, leaky_relu */
    case DRIFT_OP_SCALAR: req[0] = "sub"; req[1] = "scalar"; break;
    case DRIFT_OP_REDUCE: req[0] = "sub"; req[1] = "dim"; opt = "length"; opt2 = "scalar"; break;
    case DRIFT_OP_FILL: req[0] = "sub"; req[1] = "scalar"; req[2] = "step"; break;
    case DRIFT_OP_BINARY: case DRIFT_OP_PUT: req[0] = "sub"; break;
    case DRIFT_OP_ARGSORT: req[0] = "sub"; req[1] = "dim"; opt = "length"; opt2 = "start"; break;
    case DRIFT_OP_CUMSUM: case DRIFT_OP_SOFTMAX: req[0] = "sub"; req[1] = "dim"; break;
    case DRIFT_OP_BMM: req[0] = "alpha"; req[1] = "beta"; opt = "layout"; break;
    case DRIFT_OP_LINEAR: opt = "layout"; break;
    case DRIFT_OP_GROUP_NORM: req[0] = "eps"; req[1] = "length"; break;
    case DRIFT_OP_STRIDED: case DRIFT_OP_SCATTER: req[0] = "start"; req[1] = "stride"; break;
    default: break;
    }
    for (size_t i = 0; i < a->n_members; i++) {
        int ok = 0;
        for (int k = 0; k < 4 && req[k]; k++) ok |= strcmp(a->members[i].key, req[k]) == 0;
        if (opt) ok |= strcmp(a->members[i].key, opt) == 0;
        if (opt2) ok |= strcmp(a->members[i].key, opt2) == 0;
        if (!ok) return jfail(c, &a->members[i].value, "attribute '%s' does not apply to op %s", a->members[i].key,
                              drift_graph_op_name(op->kind));
    }
    for (int k = 0; k < 4 && req[k]; k++) {
        const drift_json_value *v = need(c, a, req[k], &rc);
        if (!v) return rc;
        const char *key = req[k];
        if (!strcmp(key, "eps")) rc = get_float(c, key, v, &op->eps);
        else if (!strcmp(key, "alpha")) rc = get_float(c, key, v, &op->alpha);
        else if (!strcmp(key, "beta")) rc = get_float(c, key, v, &op->beta);
        else if (!strcmp(key, "scale")) rc = get_float(c, key, v, &op->scale);
        else if (!strcmp(key, "max_period")) rc = get_float(c, key, v, &op->max_period);
        else if (!strcmp(key, "flip_sin_to_cos")) {
            if ((rc = expect_type(c, key, v, DRIFT_JSON_BOOL)) == DRIFT_OK) op->flip_sin_to_cos = v->boolean;
        } else if (!strcmp(key, "dim")) {
            if ((rc = get_int(c, key, v, -DRIFT_MAX_DIMS, 1 << 20, &t)) == DRIFT_OK) op->dim = (int)t;
        } else if (!strcmp(key, "start")) {
            if ((rc = get_int(c, key, v, 0, DRIFT_GRAPH_MAX_NUMEL, &t)) == DRIFT_OK) op->start = t;
        } else if (!strcmp(key, "length")) {
            if ((rc = get_int(c, key, v, 0, DRIFT_GRAPH_MAX_DIM, &t)) == DRIFT_OK) op->length = t;
        } else if (!strcmp(key, "sub")) {
            if ((rc = expect_type(c, key, v, DRIFT_JSON_STRING)) == DRIFT_OK) {
                op->sub = drift_op_sub_parse(op->kind, v->str);
                if (op->sub < 0) rc = jfail(c, v, "'sub': unknown %s variant \"%s\"", drift_graph_op_name(op->kind), v->str);
            }
        } else if (!strcmp(key, "scalar") || !strcmp(key, "step")) {
            if ((rc = expect_type(c, key, v, DRIFT_JSON_NUMBER)) == DRIFT_OK) *(!strcmp(key, "step") ? &op->step : &op->scalar) = v->number;
        } else if (!strcmp(key, "stride")) {
            size_t n = 0;
            rc = get_int_array(c, key, v, (size_t)view_ndim, (size_t)view_ndim, -DRIFT_GRAPH_MAX_NUMEL,
                               DRIFT_GRAPH_MAX_NUMEL, op->stride, &n);
        } else if (!strcmp(key, "perm") || !strcmp(key, "patch")) {
            int64_t arr[DRIFT_MAX_DIMS];
            size_t n = 0;
            int perm = !strcmp(key, "perm");
            size_t want = perm ? (size_t)in0_ndim : 3;
            rc = get_int_array(c, key, v, want, want, perm ? 0 : 1, perm ? DRIFT_MAX_DIMS - 1 : 4096, arr, &n);
            for (size_t i = 0; rc == DRIFT_OK && i < n; i++) (perm ? op->perm : op->patch)[i] = (int)arr[i];
        }
        if (rc) return rc;
    }
    if (opt) {
        const drift_json_value *v = drift_json_object_get(a, opt);
        if (v && !strcmp(opt, "step")) {
            if ((rc = expect_type(c, opt, v, DRIFT_JSON_NUMBER))) return rc;
            op->step = v->number;
        }
        if (v && !strcmp(opt, "layout")) {
            const int64_t hi = op->kind == DRIFT_OP_BMM ? DRIFT_BMM_LAYOUT_MAX : op->kind == DRIFT_OP_LINEAR ? DRIFT_LINEAR_CONV : 1;
            if ((rc = get_int(c, opt, v, 0, hi, &t))) return rc;
            op->layout = (int)t;
        }
        if (v && !strcmp(opt, "length")) { /* REDUCE: its dims; ARGSORT: topk's k */
            if ((rc = get_int(c, opt, v, 0, op->kind == DRIFT_OP_ARGSORT ? DRIFT_GRAPH_MAX_DIM : DRIFT_MAX_DIMS, &t))) return rc;
            op->length = t;
        }
    }
    if (opt2 && !strcmp(opt2, "order")) { /* ATTENTION's key-tile order (drift_attn_order) */
        const drift_json_value *v = drift_json_object_get(a, opt2);
        if (v && (rc = get_int(c, opt2, v, DRIFT_ATTN_ORDER_FIRST_LAST, DRIFT_ATTN_ORDER_LAST_FIRST, &t))) return rc;
        if (v) op->sub = (int)t;
    } else if (opt2 && !strcmp(opt2, "start")) { /* ARGSORT: topk's sorted flag */
        const drift_json_value *v = drift_json_object_get(a, opt2);
        if (v && (rc = get_int(c, opt2, v, 0, 1, &t))) return rc;
        if (v) op->start = t;
    } else if (opt2) { /* REDUCE's correction, UNARY's parameter */
        const drift_json_value *v = drift_json_object_get(a, opt2);
        if (v && (rc = expect_type(c, opt2, v, DRIFT_JSON_NUMBER))) return rc;
        if (v) op->scalar = v->number;
    }
    return DRIFT_OK;
}

static int parse_value(jctx *c, drift_graph *g, const drift_json_value *o, size_t idx) {
    int rc = DRIFT_OK;
    int64_t t;
    static const char *const leaf_keys[] = {"id", "kind", "name", "site", "shape", "dtype", NULL};
    static const char *const node_keys[] = {"id", "kind", "name", "site", "shape", "dtype", "op", "in", "attrs",
                                            "rule", "to", "ref", "input", "compute", "origin", "sem_id", NULL};
    snprintf(c->path, sizeof c->path, "values[%zu]", idx);
    if ((rc = expect_type(c, "value", o, DRIFT_JSON_OBJECT))) return rc;
    const drift_json_value *v;
    if (!(v = need(c, o, "id", &rc))) return rc;
    if ((rc = get_int(c, "id", v, (int64_t)idx, (int64_t)idx, &t))) return rc;
    if (!(v = need(c, o, "kind", &rc))) return rc;
    if ((rc = expect_type(c, "kind", v, DRIFT_JSON_STRING))) return rc;
    drift_value_kind kind;
    if (!strcmp(v->str, "param")) kind = DRIFT_VAL_PARAM;
    else if (!strcmp(v->str, "buffer")) kind = DRIFT_VAL_BUFFER;
    else if (!strcmp(v->str, "input")) kind = DRIFT_VAL_INPUT;
    else if (!strcmp(v->str, "node")) kind = DRIFT_VAL_NODE;
    else return jfail(c, v, "'kind': expected param, buffer, input or node, got \"%s\"", v->str);
    if ((rc = check_keys(c, o, kind == DRIFT_VAL_NODE ? node_keys : leaf_keys))) return rc;

    const char *name = NULL, *site = NULL;
    if ((v = drift_json_object_get(o, "name"))) {
        if ((rc = expect_type(c, "name", v, DRIFT_JSON_STRING))) return rc;
        if (strlen(v->str) != v->str_len) return jfail(c, v, "'name': contains a NUL character");
        name = v->str;
    }
    if ((v = drift_json_object_get(o, "site"))) {
        if ((rc = expect_type(c, "site", v, DRIFT_JSON_STRING))) return rc;
        if (strlen(v->str) != v->str_len) return jfail(c, v, "'site': contains a NUL character");
        site = v->str;
    }
    int64_t shape[DRIFT_MAX_DIMS];
    size_t ndim = 0;
    if (!(v = need(c, o, "shape", &rc))) return rc;
    if ((rc = get_int_array(c, "shape", v, 0, DRIFT_MAX_DIMS, 1, DRIFT_GRAPH_MAX_DIM, shape, &ndim))) return rc;
    drift_dtype dtype = DRIFT_DTYPE_INVALID;
    if ((v = drift_json_object_get(o, "dtype")) && (rc = get_dtype(c, "dtype", v, &dtype))) return rc;

    if (kind != DRIFT_VAL_NODE) {
        if (!name) return jfail(c, o, "missing key 'name'");
        int id = -1;
        rc = drift_graph_add_leaf(g, kind, name, dtype, (int)ndim, shape, &id, c->err);
        if (rc == DRIFT_OK && site) rc = drift_graph_set_site(g, id, site, c->err);
        return rc ? rewrap(c, o, rc) : DRIFT_OK;
    }

    drift_node_spec s;
    if (!(v = need(c, o, "op", &rc))) return rc;
    if ((rc = expect_type(c, "op", v, DRIFT_JSON_STRING))) return rc;
    drift_op_kind k = drift_graph_op_parse(v->str);
    if (k == DRIFT_OP_COUNT) return jfail(c, v, "'op': unknown op \"%s\"", v->str);
    drift_node_spec_init(&s, k);
    s.name = name;
    s.site = site;
    s.ndim = (int)ndim;
    memcpy(s.shape, shape, sizeof(int64_t) * ndim);
    int64_t ins[DRIFT_OP_MAX_IN];
    size_t n_in = 0;
    if (!(v = need(c, o, "in", &rc))) return rc;
    if ((rc = get_int_array(c, "in", v, 0, DRIFT_OP_MAX_IN, 0, (int64_t)idx - 1 < 0 ? 0 : (int64_t)idx - 1, ins, &n_in))) return rc;
    if (idx == 0) return jfail(c, v, "'in': the first value cannot be a node");
    s.op.n_in = (int)n_in;
    for (size_t i = 0; i < n_in; i++) s.in[i] = (int)ins[i];
    int in0_ndim = drift_graph_value(g, s.in[0]) ? drift_graph_value(g, s.in[0])->ndim : 0;
    int view_ndim = k == DRIFT_OP_SCATTER ? (drift_graph_value(g, s.in[1]) ? drift_graph_value(g, s.in[1])->ndim : 0)
                                          : (int)ndim;
    if ((v = drift_json_object_get(o, "attrs")) && (rc = parse_attrs(c, v, &s.op, in0_ndim, view_ndim))) return rc;
    if (!v) {
        drift_json_value empty = {0};
        empty.type = DRIFT_JSON_OBJECT;
        empty.line = o->line;
        empty.col = o->col;
        if ((rc = parse_attrs(c, &empty, &s.op, in0_ndim, view_ndim))) return rc;
    }
    if (!(v = need(c, o, "rule", &rc))) return rc;
    if ((rc = expect_type(c, "rule", v, DRIFT_JSON_STRING))) return rc;
    s.rule = drift_graph_rule_parse(v->str);
    if (s.rule == DRIFT_RULE_COUNT) return jfail(c, v, "'rule': unknown dtype rule \"%s\"", v->str);
    int wants_to = s.rule == DRIFT_RULE_CAST_TO || s.rule == DRIFT_RULE_FIXED;
    int wants_ref = s.rule == DRIFT_RULE_TYPE_AS || s.rule == DRIFT_RULE_HALF_AS, wants_input = s.rule == DRIFT_RULE_INPUT_POLICY;
    if ((v = drift_json_object_get(o, "to"))) {
        if (!wants_to) return jfail(c, v, "'to' applies to rules cast_to and fixed only");
        if ((rc = get_dtype(c, "to", v, &s.rule_dtype))) return rc;
    } else if (wants_to) {
        return jfail(c, o, "missing key 'to' (rule %s)", drift_graph_rule_name(s.rule));
    }
    if ((v = drift_json_object_get(o, "ref"))) {
        if (!wants_ref) return jfail(c, v, "'ref' applies to rule type_as only");
        if ((rc = get_int(c, "ref", v, 0, (int64_t)idx - 1, &t))) return rc;
        s.rule_ref = (int)t;
    } else if (wants_ref) {
        return jfail(c, o, "missing key 'ref' (rule type_as)");
    }
    if ((v = drift_json_object_get(o, "input"))) {
        if (!wants_input) return jfail(c, v, "'input' applies to rule input_policy only");
        if ((rc = expect_type(c, "input", v, DRIFT_JSON_STRING))) return rc;
        s.rule_ref = drift_graph_input_parse(v->str);
        if (s.rule_ref < 0) return jfail(c, v, "'input': expected latents, cond or timestep, got \"%s\"", v->str);
    } else if (wants_input) {
        return jfail(c, o, "missing key 'input' (rule input_policy)");
    }
    int assigned = drift_graph_is_assigned(g);
    if (assigned) {
        if (!(v = need(c, o, "dtype", &rc))) return rc;
        s.op.out = dtype;
        if (!(v = need(c, o, "compute", &rc))) return rc;
        if ((rc = get_dtype(c, "compute", v, &s.op.compute))) return rc;
        if (!(v = need(c, o, "origin", &rc))) return rc;
        if ((rc = expect_type(c, "origin", v, DRIFT_JSON_STRING))) return rc;
        int found = -1;
        for (int i = 0; i < DRIFT_ORIGIN_COUNT; i++)
            if (!strcmp(v->str, drift_graph_origin_name((drift_node_origin)i))) found = i;
        if (found < 0) return jfail(c, v, "'origin': expected model, param_cast, autocast or promote, got \"%s\"", v->str);
        s.origin = (drift_node_origin)found;
        if (!(v = need(c, o, "sem_id", &rc))) return rc;
        if ((rc = get_int(c, "sem_id", v, -1, DRIFT_GRAPH_MAX_VALUES, &t))) return rc;
        s.sem_id = (int)t;
    } else {
        static const char *const assigned_only[] = {"dtype", "compute", "origin", "sem_id"};
        for (size_t i = 0; i < 4; i++)
            if ((v = drift_json_object_get(o, assigned_only[i])))
                return jfail(c, v, "'%s' belongs to assigned graphs (\"assigned\": true)", assigned_only[i]);
    }
    if ((rc = drift_graph_add_node(g, &s, NULL, c->err))) return rewrap(c, o, rc);
    return DRIFT_OK;
}

int drift_graph_from_json(const char *text, size_t len, const char *source_name, drift_graph **out, drift_err *err) {
    if (!out) return drift_err_set(err, DRIFT_E_INTERNAL, "graph", "drift_graph_from_json: out is NULL");
    *out = NULL;
    drift_err local;
    drift_err_clear(&local);
    if (!err) err = &local;
    jctx c = {source_name ? source_name : "<graph>", err, ""};
    drift_json_value *doc = NULL;
    drift_graph *g = NULL;
    int rc = drift_json_parse(text, len, c.src, &doc, err);
    if (rc) goto done;
    static const char *const top_keys[] = {"format", "version", "assigned", "model", "output", "values", NULL};
    if ((rc = expect_type(&c, "document", doc, DRIFT_JSON_OBJECT))) goto done;
    if ((rc = check_keys(&c, doc, top_keys))) goto done;
    const drift_json_value *v;
    int64_t t;
    if (!(v = need(&c, doc, "format", &rc))) goto done;
    if (v->type != DRIFT_JSON_STRING || strcmp(v->str, DRIFT_GRAPH_FORMAT) != 0) {
        rc = jfail(&c, v, "'format': expected \"%s\"", DRIFT_GRAPH_FORMAT);
        goto done;
    }
    if (!(v = need(&c, doc, "version", &rc))) goto done;
    if ((rc = get_int(&c, "version", v, DRIFT_GRAPH_VERSION, DRIFT_GRAPH_VERSION, &t))) goto done;
    if (!(v = need(&c, doc, "assigned", &rc))) goto done;
    if ((rc = expect_type(&c, "assigned", v, DRIFT_JSON_BOOL))) goto done;
    if ((rc = drift_graph_create(v->boolean, &g, err))) goto done;
    if ((v = drift_json_object_get(doc, "model"))) {
        if ((rc = expect_type(&c, "model", v, DRIFT_JSON_STRING))) goto done;
        if (strlen(v->str) != v->str_len) {
            rc = jfail(&c, v, "'model': contains a NUL character");
            goto done;
        }
        if ((rc = drift_graph_set_model(g, v->str, err))) {
            rc = rewrap(&c, v, rc);
            goto done;
        }
    }
    const drift_json_value *vals = need(&c, doc, "values", &rc);
    if (!vals) goto done;
    if ((rc = expect_type(&c, "values", vals, DRIFT_JSON_ARRAY))) goto done;
    if (vals->n_items > DRIFT_GRAPH_MAX_VALUES) {
        rc = jfail(&c, vals, "'values': more than %d values", DRIFT_GRAPH_MAX_VALUES);
        goto done;
    }
    for (size_t i = 0; i < vals->n_items; i++)
        if ((rc = parse_value(&c, g, &vals->items[i], i))) goto done;
    c.path[0] = '\0';
    if ((v = drift_json_object_get(doc, "output"))) {
        if ((rc = get_int(&c, "output", v, -1, (int64_t)vals->n_items - 1, &t))) goto done;
        if (t >= 0 && (rc = drift_graph_set_output(g, (int)t, err))) goto done;
    }
done:
    drift_json_free(doc);
    if (rc) {
        drift_graph_free(g);
        return rc;
    }
    *out = g;
    return DRIFT_OK;
}
