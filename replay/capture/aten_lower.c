/* Lowering a drift-aten-graph to drift's semantic graph (aten_graph.h).
 *
 * Every FX tensor is a strided view (aten_views.h) of a root: a drift value
 * holding contiguous contents. Compute ops read their inputs materialised
 * (the root itself, a VIEW of it, or a STRIDED gather) and make a new root.
 * View ops only change the view. copy_ into a view writes its root: the root's
 * contents become a SCATTER of the old contents and the (cast) source, and
 * every later read of any view of that root sees the new contents, as
 * aliasing does in PyTorch. Values are SSA in drift; the root's version
 * invalidates cached materialisations. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "formats/plan.h" /* DRIFT_INPUT_* */
#include "replay/capture/aten_lower_internal.h"

/* ---- errors and argument access ------------------------------------------------ */


const aten_node *al_cur_node(const lctx *c) { return &c->g->nodes[c->cur]; }

/* Positional argument i, else keyword kw, else NULL (absent). */
const drift_json_value *al_arg(const lctx *c, int i, const char *kw) {
    const aten_node *n = al_cur_node(c);
    lctx *mc = (lctx *)c; /* the read marks only: what the lowering looked at, for unread_args */
    if (i >= 0 && (size_t)i < n->args->n_items) {
        if (i < 64) mc->args_read |= (uint64_t)1 << i;
        return &n->args->items[i];
    }
    for (size_t k = 0; kw && n->kwargs && k < n->kwargs->n_members; k++)
        if (!strcmp(n->kwargs->members[k].key, kw)) {
            if (k < 64) mc->kwargs_read |= (uint64_t)1 << k;
            return &n->kwargs->members[k].value;
        }
    return NULL;
}

/* After a node's lowering: an argument it never looked at is refused rather than
 * ignored (an eps, scale, approximate, alpha or autocast setting replayed with its
 * default gives wrong numbers silently), except the keywords that only place or lay
 * out the result (device, layout, pin_memory, memory_format, non_blocking, copy) or
 * restate a size the lowering computes (output_size). */
static int unread_args(lctx *c) {
    static const char *const harmless[] = {"device", "layout", "pin_memory", "memory_format", "non_blocking", "copy",
                                           "output_size", NULL};
    const aten_node *n = al_cur_node(c);
    for (size_t i = 0; i < n->args->n_items && i < 64; i++)
        if (!(c->args_read >> i & 1))
            return FAIL(c, "argument %zu is not supported by the importer's lowering (it would be ignored)", i);
    for (size_t k = 0; n->kwargs && k < n->kwargs->n_members && k < 64; k++) {
        const char *key = n->kwargs->members[k].key;
        int ok = 0;
        for (int h = 0; harmless[h]; h++) ok |= !strcmp(key, harmless[h]);
        if (!ok && !(c->kwargs_read >> k & 1))
            return FAIL(c, "keyword argument '%s' is not supported by the importer's lowering (it would be ignored)", key);
    }
    return DRIFT_OK;
}

int al_is_none(const drift_json_value *v) { return !v || v->type == DRIFT_JSON_NULL; }

int al_node_ref(const drift_json_value *v) {
    return v && v->type == DRIFT_JSON_OBJECT && v->n_members == 1 && !strcmp(v->members[0].key, "node");
}

int al_get_int(lctx *c, const drift_json_value *v, const char *what, int64_t dflt, int64_t *out) {
    if (al_is_none(v)) {
        *out = dflt;
        return DRIFT_OK;
    }
    if (v->type == DRIFT_JSON_BOOL) {
        *out = v->boolean;
        return DRIFT_OK;
    }
    if (v->type != DRIFT_JSON_NUMBER || !v->is_int) return FAIL(c, "%s: expected an integer", what);
    *out = v->integer;
    return DRIFT_OK;
}

int al_get_num(lctx *c, const drift_json_value *v, const char *what, double dflt, double *out) {
    if (al_is_none(v)) {
        *out = dflt;
        return DRIFT_OK;
    }
    if (v->type == DRIFT_JSON_NUMBER) {
        *out = v->number;
        return DRIFT_OK;
    }
    if (v->type == DRIFT_JSON_BOOL) {
        *out = v->boolean;
        return DRIFT_OK;
    }
    if (v->type == DRIFT_JSON_OBJECT && v->n_members == 1 && !strcmp(v->members[0].key, "float") &&
        v->members[0].value.type == DRIFT_JSON_STRING) {
        const char *s = v->members[0].value.str;
        if (!strcmp(s, "inf")) *out = INFINITY;
        else if (!strcmp(s, "-inf")) *out = -INFINITY;
        else if (!strcmp(s, "nan")) *out = NAN;
        else return FAIL(c, "%s: {\"float\": \"%s\"}: expected inf, -inf or nan", what, s);
        return DRIFT_OK;
    }
    return FAIL(c, "%s: expected a number", what);
}

int al_get_ints(lctx *c, const drift_json_value *v, const char *what, int64_t *out, int *n) {
    if (v && v->type == DRIFT_JSON_NUMBER && v->is_int) { /* a single int where a list is allowed */
        out[0] = v->integer;
        *n = 1;
        return DRIFT_OK;
    }
    if (!v || v->type != DRIFT_JSON_ARRAY) return FAIL(c, "%s: expected a list of integers", what);
    if (v->n_items > DRIFT_MAX_DIMS) return FAIL(c, "%s: more than %d entries", what, DRIFT_MAX_DIMS);
    for (size_t i = 0; i < v->n_items; i++) {
        if (v->items[i].type != DRIFT_JSON_NUMBER || !v->items[i].is_int)
            return FAIL(c, "%s[%zu]: expected an integer", what, i);
        out[i] = v->items[i].integer;
    }
    *n = (int)v->n_items;
    return DRIFT_OK;
}

int al_get_str(lctx *c, const drift_json_value *v, const char *what, const char *dflt, const char **out) {
    if (al_is_none(v)) {
        *out = dflt;
        return DRIFT_OK;
    }
    if (v->type != DRIFT_JSON_STRING) return FAIL(c, "%s: expected a string", what);
    *out = v->str;
    return DRIFT_OK;
}

/* torch dtype name -> drift dtype; *is_int for integer and bool dtypes (int64,
 * int32 (narrower integers carried as int32), bool); -1 for what drift cannot represent. */
int al_parse_dtype(const char *s, drift_dtype *dt, int *is_int) {
    *is_int = 0;
    if (!strcmp(s, "float32")) *dt = DRIFT_F32;
    else if (!strcmp(s, "bfloat16")) *dt = DRIFT_BF16;
    else if (!strcmp(s, "float16")) *dt = DRIFT_F16;
    else if (!strcmp(s, "float64")) *dt = DRIFT_F64;
    else if (!strcmp(s, "int64")) *dt = DRIFT_I64, *is_int = 1;
    else if (!strcmp(s, "int32") || !strcmp(s, "int16") || !strcmp(s, "int8") || !strcmp(s, "uint8"))
        *dt = DRIFT_I32, *is_int = 1;
    else if (!strcmp(s, "bool")) *dt = DRIFT_BOOL, *is_int = 1;
    else
        return -1;
    return 0;
}

int al_get_dtype(lctx *c, const drift_json_value *v, const char *what, int *given, drift_dtype *dt, int *is_int) {
    *given = 0;
    *is_int = 0;
    if (al_is_none(v)) return DRIFT_OK;
    if (v->type != DRIFT_JSON_OBJECT || v->n_members != 1 || strcmp(v->members[0].key, "dtype") ||
        v->members[0].value.type != DRIFT_JSON_STRING)
        return FAIL(c, "%s: expected {\"dtype\": NAME}", what);
    if (al_parse_dtype(v->members[0].value.str, dt, is_int))
        return FAIL(c, "%s: dtype %s is not supported (drift replays float32, bfloat16, float16, float64, int64, int32, bool)", what,
                    v->members[0].value.str);
    *given = 1;
    return DRIFT_OK;
}

int al_val_dtype(lctx *c, drift_dtype *dt);

/* The real dtype of a complex dtype's (re, im) pairs: fp32 for complex64, fp64 for
 * complex128; DRIFT_DTYPE_INVALID for any other name (or NULL). */
drift_dtype al_complex_part(const char *s) {
    if (s && !strcmp(s, "complex64")) return DRIFT_F32;
    if (s && !strcmp(s, "complex128")) return DRIFT_F64;
    return DRIFT_DTYPE_INVALID;
}

/* ---- values ------------------------------------------------------------------- */

int al_new_root(lctx *c, int id, aten_view *v) {
    if (c->n_roots == c->cap_roots) {
        int nc = c->cap_roots ? c->cap_roots * 2 : 256;
        root *nr = drift_realloc(c->roots, (size_t)nc * sizeof *nr);
        if (!nr) return drift_err_set(c->err, DRIFT_E_NOMEM, "aten", "out of memory");
        c->roots = nr;
        c->cap_roots = nc;
    }
    c->roots[c->n_roots].cur = id;
    c->roots[c->n_roots].version = 0;
    const drift_value *dv = drift_graph_value(c->out, id);
    aten_view_contig(v, c->n_roots, dv->ndim, dv->shape);
    c->n_roots++;
    return DRIFT_OK;
}

/* The autocast rule of an op inside the model code's own autocast region (the node's
 * "autocast" of a wrap_with_autocast / _enter_autocast region, docs/aten-graph.md): disabled,
 * the op follows type promotion; enabled in fp32 (Mochi's RoPE: `torch.autocast(device,
 * torch.float32)`), the lower-precision list casts bf16/fp16 operands to fp32 as the fp32
 * list does; enabled in the capture's own autocast dtype, the plan's forward decides as
 * outside. Anything else is refused rather than replayed under the wrong rule. */
static int region_rule(lctx *c, drift_dtype_rule *rule) {
    const aten_node *n = al_cur_node(c);
    if (!n->autocast || (*rule != DRIFT_RULE_AUTOCAST_LOWER && *rule != DRIFT_RULE_AUTOCAST_FP32)) return DRIFT_OK;
    const drift_json_value *en = n->autocast->type == DRIFT_JSON_OBJECT ? drift_json_object_get(n->autocast, "enabled") : NULL;
    const drift_json_value *dt = n->autocast->type == DRIFT_JSON_OBJECT ? drift_json_object_get(n->autocast, "dtype") : NULL;
    if (!en || en->type != DRIFT_JSON_BOOL)
        return FAIL(c, "'autocast': expected {\"enabled\": true|false, \"dtype\": DTYPE}");
    if (!en->boolean) {
        *rule = DRIFT_RULE_PROMOTE;
        return DRIFT_OK;
    }
    if (!dt || dt->type != DRIFT_JSON_STRING)
        return FAIL(c, "'autocast': an enabled region needs \"dtype\": \"float32\", \"bfloat16\" or \"float16\"");
    if (!strcmp(dt->str, "float32")) {
        *rule = DRIFT_RULE_AUTOCAST_FP32;
        return DRIFT_OK;
    }
    const drift_json_value *cap = drift_json_object_get(c->g->doc, "capture");
    const drift_json_value *amb = cap && cap->type == DRIFT_JSON_OBJECT ? drift_json_object_get(cap, "autocast") : NULL;
    if (amb && amb->type == DRIFT_JSON_STRING && !strcmp(amb->str, dt->str)) return DRIFT_OK;
    return FAIL(c, "an autocast region in %s inside a capture whose autocast is %s is not supported yet (the region "
                   "would fix the dtype whatever the plan)",
                dt->str, amb && amb->type == DRIFT_JSON_STRING ? amb->str : "off");
}

int al_add_node(lctx *c, drift_node_spec *s, int *id) {
    if (!s->name) s->name = al_cur_node(c)->name;
    int rrc = region_rule(c, &s->rule); /* the model code's own autocast region (Ideogram4's RoPE: disabled) */
    if (rrc) return rrc;
    drift_err inner;
    drift_err_clear(&inner);
    int rc = drift_graph_add_node(c->out, s, id, &inner);
    if (rc) return FAIL(c, "%s", inner.msg);
    return DRIFT_OK;
}

/* The drift id holding view v's values, contiguous. */
int al_mat_view(lctx *c, const aten_view *v, int *id) {
    const root *r = &c->roots[v->root];
    const drift_value *rv = drift_graph_value(c->out, r->cur);
    int same = v->nd == rv->ndim;
    for (int i = 0; same && i < v->nd; i++) same = v->size[i] == rv->shape[i];
    if (v->off == 0 && aten_view_is_contig(v) && aten_view_numel(v) == rv->numel) {
        if (same) {
            *id = r->cur;
            return DRIFT_OK;
        }
        drift_node_spec s;
        drift_node_spec_init(&s, DRIFT_OP_VIEW);
        s.op.n_in = 1;
        s.in[0] = r->cur;
        s.rule = DRIFT_RULE_LIKE_INPUT0;
        s.ndim = v->nd;
        memcpy(s.shape, v->size, sizeof(int64_t) * (size_t)v->nd);
        if (v->nd == 0) { /* a 0-d view: VIEW needs a shape, so a one-element strided gather */
            s.op.kind = DRIFT_OP_STRIDED;
        }
        return al_add_node(c, &s, id);
    }
    return al_emit_gather(c, r->cur, v->nd, v->size, v->stride, v->off, id);
}

/* FX node j's tensor value materialised (cached per root version). */
int al_mat_fx(lctx *c, int j, int *id) {
    fxv *f = &c->fx[j];
    if (f->kind != FX_TENSOR) return FAIL(c, "input '%s' is not a tensor", c->g->nodes[j].name);
    const root *r = &c->roots[f->t.root];
    if (f->mat_id >= 0 && f->mat_version == r->version) {
        *id = f->mat_id;
        return DRIFT_OK;
    }
    aten_view full = f->t;
    if (f->cplx) {
        full.size[full.nd] = 2;
        full.stride[full.nd] = 1;
        full.nd++;
    }
    int rc = al_mat_view(c, &full, id);
    if (rc) return rc;
    f->mat_id = *id;
    f->mat_version = r->version;
    if (f->first_id < 0) f->first_id = *id;
    return DRIFT_OK;
}

/* The FX node a {"node": X} argument names, or -1 (not a node). */
int al_ref_of(const lctx *c, const drift_json_value *v) {
    return al_node_ref(v) ? aten_find(c->g, v->members[0].value.str) : -1;
}

static int stack_has(const drift_json_value *stack, const char *m) {
    if (!*m) return 1; /* the root contains everything */
    for (size_t k = 0; stack && k < stack->n_items; k++)
        if (!strcmp(stack->items[k].str, m)) return 1;
    return 0;
}

const char *al_val_dtype_str(const aten_node *n) {
    const drift_json_value *v = n->val && n->val->type == DRIFT_JSON_OBJECT ? drift_json_object_get(n->val, "dtype") : NULL;
    return v && v->type == DRIFT_JSON_STRING ? v->str : NULL;
}

/* Source of FX node j when j is a cast that was a no-op at capture (to the
 * dtype its source had), else -1. */
static int noop_cast_source(const lctx *c, int j) {
    const aten_node *n = &c->g->nodes[j];
    if (n->op != ATEN_CALL || (strcmp(n->target, "aten.to.dtype") && strcmp(n->target, "aten.to.dtype_layout") &&
                               strcmp(n->target, "aten._to_copy.default")))
        return -1;
    int k = al_ref_of(c, n->args->n_items > 0 ? &n->args->items[0] : NULL);
    if (k < 0 || c->fx[k].kind != FX_TENSOR) return -1;
    const char *a = al_val_dtype_str(n), *b = al_val_dtype_str(&c->g->nodes[k]);
    return a && b && !strcmp(a, b) ? k : -1;
}

/* What a use of FX node j by the current node means. A cast to the dtype a
 * tensor already has returns the tensor itself, so in an fp32 export
 * `x.float()` *is* x and the tracer names every later use of x after the
 * cast node (the latest alias). Such a use is resolved back to the tensor the
 * cast aliases when the cast cannot be what the code meant
 * (docs/aten-graph.md, "No-op casts"):
 *  (a) the use is outside the module that computed the cast (diffusers'
 *      FP32LayerNorm casts its input inside the norm: the block's later
 *      `h + attn` means h), or
 *  (b) the cast was handed to a child module call (`self.norm2(h.float())`)
 *      and the use comes after, outside that child, or
 *  (c) the use is a type_as reference (nobody writes `.type_as(x.float())`). */
int al_resolve_alias(const lctx *c, int j, int for_type_as) {
    const aten_node *u = &c->g->nodes[c->cur];
    for (int guard = 0; guard < 64; guard++) {
        int k = noop_cast_source(c, j);
        if (k < 0) break;
        const aten_node *n = &c->g->nodes[j];
        int outside = !stack_has(u->stack, n->module) && strcmp(u->module, n->module);
        int after_child = c->child[j] && c->cur > c->child_at[j] && !stack_has(u->stack, c->child[j]);
        if (!(for_type_as || outside || after_child)) break;
        j = k;
    }
    return j;
}

/* For each node, the first consumer that runs inside a child module call (rule (b) above). */
static void find_children(lctx *c) {
    const drift_aten_graph *g = c->g;
    for (int j = 0; j < g->n; j++) {
        const aten_node *u = &g->nodes[j];
        if (u->op != ATEN_CALL || !u->stack) continue;
        for (size_t a = 0; a < u->args->n_items; a++) {
            int i = al_ref_of(c, &u->args->items[a]);
            if (i < 0 || c->child[i]) continue;
            const aten_node *n = &g->nodes[i];
            size_t depth = n->stack ? n->stack->n_items : 0;
            if (*n->module && !stack_has(u->stack, n->module)) continue; /* not below the cast's module */
            if (u->stack->n_items <= depth) continue;
            c->child[i] = u->stack->items[depth].str; /* the module one level below */
            c->child_at[i] = j;
        }
    }
}

/* Tensor argument: its FX index and view. */
int al_tensor_arg(lctx *c, const drift_json_value *v, const char *what, int *fxi) {
    int j = al_ref_of(c, v);
    if (j < 0) return FAIL(c, "%s: expected a tensor (a node reference)", what);
    if (c->fx[j].kind == FX_TENSOR) j = al_resolve_alias(c, j, 0);
    if (c->fx[j].kind == FX_EMPTY)
        return FAIL(c, "%s: node '%s' is an empty tensor (a 0-size dim); drift replays an empty tensor only where it "
                       "needs no values (a cat operand, or an op whose result is empty too)", what, c->g->nodes[j].name);
    if (c->fx[j].kind != FX_TENSOR) return FAIL(c, "%s: node '%s' is not a tensor", what, c->g->nodes[j].name);
    *fxi = j;
    c->last_cplx = c->fx[j].cplx;
    return DRIFT_OK;
}

int al_mat_arg(lctx *c, const drift_json_value *v, const char *what, int *id) {
    int j, rc = al_tensor_arg(c, v, what, &j);
    return rc ? rc : al_mat_fx(c, j, id);
}

/* Result: a new root from drift value id. */
int al_set_result(lctx *c, int id) {
    fxv *f = &c->fx[c->cur];
    f->kind = FX_TENSOR;
    int rc = al_new_root(c, id, &f->t);
    if (rc) return rc;
    f->mat_id = id;
    f->mat_version = 0;
    f->first_id = id;
    f->cplx = 0;
    return DRIFT_OK;
}

/* Result: a new root from drift value id holding complex pairs [..., 2]. */
int al_set_result_cplx(lctx *c, int id) {
    int rc = al_set_result(c, id);
    if (rc) return rc;
    fxv *f = &c->fx[c->cur];
    f->t.nd--;
    f->cplx = 1;
    return DRIFT_OK;
}

int al_set_view(lctx *c, const aten_view *v) {
    fxv *f = &c->fx[c->cur];
    f->kind = FX_TENSOR;
    f->t = *v;
    f->cplx = c->last_cplx;
    return DRIFT_OK;
}

drift_dtype_rule al_rule_of(const char *target) {
    char base[96];
    switch (drift_aten_autocast_class(drift_aten_op_base(target, base, sizeof base))) {
    case DRIFT_ATEN_CAST_LOWER: return DRIFT_RULE_AUTOCAST_LOWER;
    case DRIFT_ATEN_CAST_FP32: return DRIFT_RULE_AUTOCAST_FP32;
    default: return DRIFT_RULE_PROMOTE;
    }
}

int al_emit(lctx *c, drift_op_kind k, const drift_op *attrs, int n_in, const int *in, drift_dtype_rule rule,
                int *id) {
    drift_node_spec s;
    drift_node_spec_init(&s, k);
    if (attrs) s.op = *attrs;
    s.op.kind = k;
    s.op.n_in = n_in;
    s.op.compute = s.op.out = DRIFT_DTYPE_INVALID;
    for (int i = 0; i < n_in; i++) s.in[i] = in[i];
    s.rule = rule;
    return al_add_node(c, &s, id);
}

int al_emit_cast(lctx *c, int x, drift_dtype_rule rule, drift_dtype to, int ref, int *id) {
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_CAST);
    s.op.n_in = 1;
    s.in[0] = x;
    s.rule = rule;
    s.rule_dtype = to;
    s.rule_ref = ref;
    return al_add_node(c, &s, id);
}

int al_emit_gather(lctx *c, int x, int nd, const int64_t *shape, const int64_t *stride, int64_t start, int *id) {
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_STRIDED);
    s.op.n_in = 1;
    s.in[0] = x;
    s.op.start = start;
    memcpy(s.op.stride, stride, sizeof(int64_t) * (size_t)nd);
    s.rule = DRIFT_RULE_LIKE_INPUT0;
    s.ndim = nd;
    memcpy(s.shape, shape, sizeof(int64_t) * (size_t)nd);
    return al_add_node(c, &s, id);
}

int al_emit_view_to(lctx *c, int x, int nd, const int64_t *shape, int *id) {
    const drift_value *v = drift_graph_value(c->out, x);
    int same = v->ndim == nd;
    for (int i = 0; same && i < nd; i++) same = v->shape[i] == shape[i];
    if (same) {
        *id = x;
        return DRIFT_OK;
    }
    aten_view tmp;
    aten_view_contig(&tmp, 0, nd, shape);
    drift_node_spec s;
    drift_node_spec_init(&s, nd == 0 ? DRIFT_OP_STRIDED : DRIFT_OP_VIEW);
    s.op.n_in = 1;
    s.in[0] = x;
    s.rule = DRIFT_RULE_LIKE_INPUT0;
    s.ndim = nd;
    memcpy(s.shape, shape, sizeof(int64_t) * (size_t)nd);
    return al_add_node(c, &s, id);
}

/* ---- leaves ------------------------------------------------------------------- */

int al_val_shape(lctx *c, const drift_json_value *val, int *nd, int64_t *shape) {
    const drift_json_value *sh = val && val->type == DRIFT_JSON_OBJECT ? drift_json_object_get(val, "shape") : NULL;
    if (!sh) return FAIL(c, "'val' has no tensor shape");
    int rc = al_get_ints(c, sh, "val.shape", shape, nd);
    if (rc) return rc;
    for (int i = 0; i < *nd; i++)
        if (shape[i] < 1 || shape[i] > DRIFT_GRAPH_MAX_DIM)
            return FAIL(c, "val.shape[%d] = %lld: drift replays tensors with dims in 1..2^40", i, (long long)shape[i]);
    return DRIFT_OK;
}

static int lower_placeholder(lctx *c) {
    const aten_node *n = al_cur_node(c);
    const drift_aten_input *in = &c->g->inputs[n->input];
    fxv *f = &c->fx[c->cur];
    if (!in->is_tensor) {
        if (in->kind != DRIFT_ATEN_IN_USER) return FAIL(c, "a %s input must be a tensor", in->kind == 0 ? "parameter" : "buffer");
        f->kind = FX_OTHER;
        return DRIFT_OK;
    }
    int nd = 0, rc, id = -1;
    int64_t shape[DRIFT_MAX_DIMS];
    if ((rc = al_val_shape(c, n->val, &nd, shape))) return rc;
    const drift_json_value *vdt = drift_json_object_get(n->val, "dtype");
    const drift_dtype part = al_complex_part(vdt && vdt->type == DRIFT_JSON_STRING ? vdt->str : NULL);
    const int cplx = part != DRIFT_DTYPE_INVALID;
    /* a complex128 buffer or constant (Lumina2's RoPE table, built in fp64) keeps its fp64 pairs */
    const int f64 = part == DRIFT_F64 || (vdt && vdt->type == DRIFT_JSON_STRING && !strcmp(vdt->str, "float64"));
    const drift_dtype leaf_dt = f64 ? DRIFT_F64 : DRIFT_F32;
    if (cplx) { /* stored as (real, imag) pairs: a trailing dim of 2 */
        if (nd >= DRIFT_MAX_DIMS) return FAIL(c, "a complex input of %d dims", nd);
        shape[nd++] = 2;
    }
    drift_err inner;
    drift_err_clear(&inner);
    char name[DRIFT_MAX_FQN + 16];
    switch (in->kind) {
    case DRIFT_ATEN_IN_PARAMETER:
        rc = drift_graph_add_leaf(c->out, DRIFT_VAL_PARAM, in->target, DRIFT_F32, nd, shape, &id, &inner);
        break;
    case DRIFT_ATEN_IN_BUFFER:
        rc = drift_graph_add_leaf(c->out, DRIFT_VAL_BUFFER, in->target, leaf_dt, nd, shape, &id, &inner);
        break;
    case DRIFT_ATEN_IN_CONSTANT:
        snprintf(name, sizeof name, "constant:%s", in->target);
        rc = drift_graph_add_leaf(c->out, DRIFT_VAL_BUFFER, name, leaf_dt, nd, shape, &id, &inner);
        break;
    default: {
        al_rb_input(c, nd - cplx, shape);
        int k = drift_graph_input_parse(in->role);
        if (k < 0) { /* masks, pooled projections, audio...: a buffer "input:TARGET" (held fixed over the steps) */
            snprintf(name, sizeof name, "input:%s", in->target);
            rc = drift_graph_add_leaf(c->out, DRIFT_VAL_BUFFER, name, DRIFT_F32, nd, shape, &id, &inner);
            break;
        }
        if (c->seen_input[k]) return FAIL(c, "a second user input with role %s", in->role);
        c->seen_input[k] = 1;
        rc = drift_graph_add_leaf(c->out, DRIFT_VAL_INPUT, in->role, DRIFT_DTYPE_INVALID, nd, shape, &id, &inner);
        if (rc) break;
        snprintf(name, sizeof name, "input:%s:pre_cast", in->role);
        if ((rc = drift_graph_set_site(c->out, id, name, &inner))) break;
        int cast;
        if ((rc = al_emit_cast(c, id, DRIFT_RULE_INPUT_POLICY, DRIFT_DTYPE_INVALID, k, &cast))) return rc;
        snprintf(name, sizeof name, "input:%s:post_cast", in->role);
        if ((rc = drift_graph_set_site(c->out, cast, name, &inner))) break;
        id = cast;
        break;
    }
    }
    if (rc) return FAIL(c, "%s", inner.msg);
    /* an integer or bool input is stored as fp32 values (exact up to 2^24): its dtype back, so
     * that the ops reading it compute on integers (bitwise_and of two int64 masks, int64 sums) */
    drift_dtype idt;
    int is_int = 0;
    if (!cplx && vdt && vdt->type == DRIFT_JSON_STRING && !al_parse_dtype(vdt->str, &idt, &is_int) && is_int &&
        (rc = al_emit_cast(c, id, DRIFT_RULE_CAST_TO, idt, -1, &id)))
        return rc;
    return cplx ? al_set_result_cplx(c, id) : al_set_result(c, id);
}

/* A node whose value the recording's device computed from constants alone
 * (docs/aten-graph.md "Device values"): an fp32 buffer leaf `buffer` of the
 * node's shape, read from /buffers like a recorded RoPE table. */
static int lower_device_value(lctx *c, const char *buffer) {
    const aten_node *n = al_cur_node(c);
    const drift_json_value *vdt = n->val && n->val->type == DRIFT_JSON_OBJECT ? drift_json_object_get(n->val, "dtype") : NULL;
    if (!vdt || vdt->type != DRIFT_JSON_STRING || strcmp(vdt->str, "float32"))
        return FAIL(c, "a device value must be a float32 tensor (val.dtype %s)",
                    vdt && vdt->type == DRIFT_JSON_STRING ? vdt->str : "missing");
    int nd = 0, rc, id = -1;
    int64_t shape[DRIFT_MAX_DIMS];
    if ((rc = al_val_shape(c, n->val, &nd, shape))) return rc;
    drift_err inner;
    drift_err_clear(&inner);
    if (drift_graph_add_leaf(c->out, DRIFT_VAL_BUFFER, buffer, DRIFT_F32, nd, shape, &id, &inner))
        return FAIL(c, "%s", inner.msg);
    return al_set_result(c, id);
}

/* ---- view ops ------------------------------------------------------------------- */

/* Reshape of view v (complex flag cplx) to (nd, size): a view when strides
 * allow, else a copy. */
static int do_reshape_view(lctx *c, const aten_view *v, int cplx, int nd, int64_t *size) {
    if (!aten_view_infer_size(aten_view_numel(v), nd, size))
        return FAIL(c, "cannot reshape %lld elements to the requested size", (long long)aten_view_numel(v));
    aten_view o;
    c->last_cplx = cplx;
    if (aten_view_reshape(v, nd, size, &o)) return al_set_view(c, &o);
    /* not expressible as a view of this root: torch's reshape copies (and our view of a
     * conv output may be strided where torch's is not: the values are the same) */
    aten_view full = *v;
    if (cplx) {
        full.size[full.nd] = 2;
        full.stride[full.nd] = 1;
        full.nd++;
    }
    int id, rc = al_mat_view(c, &full, &id);
    if (rc) return rc;
    int vid;
    if (cplx) size[nd++] = 2;
    if ((rc = al_emit_view_to(c, id, nd, size, &vid))) return rc;
    return cplx ? al_set_result_cplx(c, vid) : al_set_result(c, vid);
}

static int do_reshape(lctx *c, int j, int nd, int64_t *size, int allow_copy) {
    (void)allow_copy;
    return do_reshape_view(c, &c->fx[j].t, c->fx[j].cplx, nd, size);
}

/* repeat_interleave(x, r, dim): x with a stride-0 dim of r after dim, merged (a copy). */
int al_lower_repeat_interleave(lctx *c, const char *base, const char *target) {
    (void)base;
    if (strcmp(target, "aten.repeat_interleave.self_int"))
        return FAIL(c, "%s: only repeat_interleave by an integer count (self_int) is supported", target);
    int j, rc;
    int64_t r, dim;
    if ((rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &j))) return rc;
    const drift_json_value *rv = al_arg(c, 1, "repeats");
    if (al_node_ref(rv)) return FAIL(c, "repeat_interleave with a tensor of repeats is not supported");
    if ((rc = al_get_int(c, rv, "repeats", 1, &r)) || (rc = al_get_int(c, al_arg(c, 2, "dim"), "dim", INT64_MIN, &dim))) return rc;
    aten_view v = c->fx[j].t;
    if (dim == INT64_MIN) { /* flattened first */
        int64_t n = aten_view_numel(&v);
        aten_view f;
        if (!aten_view_reshape(&v, 1, &n, &f)) return FAIL(c, "repeat_interleave without dim of a strided tensor");
        v = f;
        dim = 0;
    }
    int d = aten_view_dim(dim, v.nd);
    if (d < 0 || v.nd >= DRIFT_MAX_DIMS || r < 1 || r > DRIFT_GRAPH_MAX_DIM) return FAIL(c, "repeat_interleave arguments out of range");
    aten_view o = v;
    for (int i = v.nd; i > d + 1; i--) o.size[i] = v.size[i - 1], o.stride[i] = v.stride[i - 1];
    o.size[d + 1] = r, o.stride[d + 1] = 0, o.nd = v.nd + 1;
    int64_t size[DRIFT_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < v.nd; i++) size[nd++] = i == d ? v.size[i] * r : v.size[i];
    return do_reshape_view(c, &o, c->fx[j].cplx, nd, size);
}

/* repeat(x, reps): per dim a stride-0 outer copy, merged (a copy). */
int al_lower_repeat(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int j, rc, nr;
    int64_t reps[DRIFT_MAX_DIMS];
    if ((rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &j)) || (rc = al_get_ints(c, al_arg(c, 1, "repeats"), "repeats", reps, &nr)))
        return rc;
    al_rb_repeat(c, j, nr, reps);
    const aten_view v = c->fx[j].t;
    int extra = 0; /* a stride-0 dim before each dim repeated more than once */
    for (int i = 0; i < nr; i++) extra += reps[i] > 1;
    if (nr < v.nd || nr + extra + c->fx[j].cplx > DRIFT_MAX_DIMS) /* a complex tensor's pair dim counts */
        return FAIL(c, "repeat of a %d-d tensor by %d factors (%d of them > 1) is not supported", v.nd, nr, extra);
    aten_view o;
    memset(&o, 0, sizeof o);
    o.root = v.root, o.off = v.off, o.nd = 0;
    int64_t size[DRIFT_MAX_DIMS];
    for (int i = 0; i < nr; i++) {
        int k = i - (nr - v.nd);
        if (reps[i] < 1) return FAIL(c, "repeat factor %lld", (long long)reps[i]);
        if (reps[i] > 1) o.size[o.nd] = reps[i], o.stride[o.nd] = 0, o.nd++;
        o.size[o.nd] = k >= 0 ? v.size[k] : 1, o.stride[o.nd] = k >= 0 ? v.stride[k] : 0;
        size[i] = reps[i] * o.size[o.nd];
        o.nd++;
    }
    return do_reshape_view(c, &o, c->fx[j].cplx, nr, size);
}

/* meshgrid(tensors, indexing): each output a stride-0 view of one 1-d input. */
int al_lower_meshgrid(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    const drift_json_value *list = al_arg(c, 0, "tensors");
    const char *ix = NULL;
    int rc = al_get_str(c, al_arg(c, 1, "indexing"), "indexing", "ij", &ix);
    if (rc) return rc;
    if (!list || list->type != DRIFT_JSON_ARRAY || list->n_items == 0 || list->n_items > DRIFT_MAX_DIMS)
        return FAIL(c, "tensors: expected 1..%d tensors", DRIFT_MAX_DIMS);
    if (strcmp(ix, "ij") && strcmp(ix, "xy")) return FAIL(c, "indexing '%s': expected ij or xy", ix);
    const int n = (int)list->n_items, xy = !strcmp(ix, "xy") && n >= 2;
    int js[DRIFT_MAX_DIMS];
    int64_t sz[DRIFT_MAX_DIMS];
    for (int k = 0; k < n; k++) {
        if ((rc = al_tensor_arg(c, &list->items[k], "tensors[]", &js[k]))) return rc;
        const aten_view *v = &c->fx[js[k]].t;
        if (v->nd > 1) return FAIL(c, "meshgrid inputs must be 0-d or 1-d");
        sz[k] = v->nd ? v->size[0] : 1;
    }
    fxv *f = &c->fx[c->cur];
    f->multi = drift_calloc((size_t)n, sizeof *f->multi);
    if (!f->multi) return drift_err_set(c->err, DRIFT_E_NOMEM, "aten", "out of memory");
    f->kind = FX_MULTI;
    f->n_multi = n;
    for (int k = 0; k < n; k++) {
        const aten_view *v = &c->fx[js[k]].t;
        aten_view o;
        memset(&o, 0, sizeof o);
        o.root = v->root, o.off = v->off, o.nd = n;
        for (int i = 0; i < n; i++) {
            int src = xy && i < 2 ? 1 - i : i; /* xy: the first two output dims swap */
            o.size[i] = sz[src];
            o.stride[i] = src == k && v->nd ? v->stride[0] : 0;
        }
        f->multi[k] = o;
    }
    return DRIFT_OK;
}

/* outer(a, b) = a[:, None] * b[None, :] */
int al_lower_outer(lctx *c, const char *base, const char *target) {
    (void)base;
    int ja, jb, rc;
    if ((rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &ja)) || (rc = al_tensor_arg(c, al_arg(c, 1, "vec2"), "vec2", &jb))) return rc;
    aten_view a = c->fx[ja].t, b = c->fx[jb].t;
    if (a.nd != 1 || b.nd != 1) return FAIL(c, "outer needs two 1-d tensors");
    a.nd = 2, a.size[1] = 1, a.stride[1] = 1;
    b.nd = 2, b.size[1] = b.size[0], b.stride[1] = b.stride[0], b.size[0] = 1, b.stride[0] = 1;
    int x, y, id;
    if ((rc = al_mat_view(c, &a, &x)) || (rc = al_mat_view(c, &b, &y))) return rc;
    int in[2] = {x, y};
    if ((rc = al_emit(c, DRIFT_OP_MUL, NULL, 2, in, al_rule_of(target), &id))) return rc;
    return al_set_result(c, id);
}

int al_lower_clamp(lctx *c, const char *base, const char *target) {
    int x, rc;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x))) return rc;
    const drift_json_value *lo = al_arg(c, 1, "min"), *hi = al_arg(c, 2, "max");
    if (!strcmp(base, "clamp_max")) hi = lo, lo = NULL;
    if (al_is_none(lo) && al_is_none(hi)) return FAIL(c, "clamp needs a bound");
    double a, b;
    int id = x;
    drift_op op;
    memset(&op, 0, sizeof op);
    if (al_node_ref(lo) || al_node_ref(hi)) { /* clamp.Tensor: maximum(x, min), then minimum(.., max); NaN propagates */
        for (int k = 0; k < 2; k++) {
            const drift_json_value *bound = k ? hi : lo;
            if (al_is_none(bound)) continue;
            int in[2] = {id, -1};
            if ((rc = al_mat_arg(c, bound, k ? "max" : "min", &in[1]))) return rc;
            op.sub = k ? DRIFT_BINARY_MIN : DRIFT_BINARY_MAX;
            if ((rc = al_emit(c, DRIFT_OP_BINARY, &op, 2, in, DRIFT_RULE_PROMOTE, &id))) return rc;
        }
        return al_set_result(c, id);
    }
    if (!al_is_none(lo)) {
        if ((rc = al_get_num(c, lo, "min", 0, &a))) return rc;
        op.sub = DRIFT_SCALAR_MAX, op.scalar = a;
        if ((rc = al_emit(c, DRIFT_OP_SCALAR, &op, 1, &id, al_rule_of(target), &id))) return rc;
    }
    if (!al_is_none(hi)) {
        if ((rc = al_get_num(c, hi, "max", 0, &b))) return rc;
        op.sub = DRIFT_SCALAR_MIN, op.scalar = b;
        if ((rc = al_emit(c, DRIFT_OP_SCALAR, &op, 1, &id, al_rule_of(target), &id))) return rc;
    }
    return al_set_result(c, id);
}

int al_lower_linspace(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    double a, b;
    int64_t n;
    int rc;
    if ((rc = al_get_num(c, al_arg(c, 0, "start"), "start", 0, &a)) || (rc = al_get_num(c, al_arg(c, 1, "end"), "end", 0, &b)) ||
        (rc = al_get_int(c, al_arg(c, 2, "steps"), "steps", 0, &n)))
        return rc;
    (void)al_arg(c, -1, "dtype"); /* the captured 'val' dtype is used */
    if (n < 1 || n > DRIFT_GRAPH_MAX_DIM || !isfinite(a) || !isfinite(b)) return FAIL(c, "linspace arguments out of range");
    drift_dtype dt;
    if ((rc = al_val_dtype(c, &dt))) return rc;
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_FILL);
    s.op.sub = 2;
    s.op.scalar = a;
    s.op.step = b;
    s.rule = DRIFT_RULE_FIXED;
    s.rule_dtype = dt;
    s.ndim = 1;
    s.shape[0] = n;
    int id;
    if ((rc = al_add_node(c, &s, &id))) return rc;
    return al_set_result(c, id);
}

int al_lower_view_like(lctx *c, const char *base, const char *target) {
    (void)target;
    int j, rc;
    if ((rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &j))) return rc;
    const aten_view *v = &c->fx[j].t;
    int64_t size[DRIFT_MAX_DIMS];
    int nd = 0;
    int64_t a = 0, b = 0;
    if (!strcmp(base, "view") || !strcmp(base, "reshape") || !strcmp(base, "_unsafe_view")) {
        if ((rc = al_get_ints(c, al_arg(c, 1, "size"), "size", size, &nd))) return rc;
        al_rb_reshape(c, j, nd, size);
        return do_reshape(c, j, nd, size, 1);
    }
    if (!strcmp(base, "flatten")) {
        if ((rc = al_get_int(c, al_arg(c, 1, "start_dim"), "start_dim", 0, &a)) ||
            (rc = al_get_int(c, al_arg(c, 2, "end_dim"), "end_dim", -1, &b)))
            return rc;
        if (v->nd == 0) return do_reshape(c, j, 1, (int64_t[]){1}, 1);
        int s = aten_view_dim(a, v->nd), e = aten_view_dim(b, v->nd);
        if (s < 0 || e < 0 || s > e) return FAIL(c, "flatten dims %lld..%lld out of range", (long long)a, (long long)b);
        for (int i = 0; i < s; i++) size[nd++] = v->size[i];
        int64_t p = 1;
        for (int i = s; i <= e; i++) p *= v->size[i];
        size[nd++] = p;
        for (int i = e + 1; i < v->nd; i++) size[nd++] = v->size[i];
        return do_reshape(c, j, nd, size, 1);
    }
    if (!strcmp(base, "unflatten")) {
        int64_t parts[DRIFT_MAX_DIMS];
        int np = 0;
        if ((rc = al_get_int(c, al_arg(c, 1, "dim"), "dim", 0, &a)) || (rc = al_get_ints(c, al_arg(c, 2, "sizes"), "sizes", parts, &np)))
            return rc;
        int d = aten_view_dim(a, v->nd);
        if (d < 0 || v->nd - 1 + np > DRIFT_MAX_DIMS) return FAIL(c, "unflatten dim %lld out of range", (long long)a);
        al_rb_unflatten(c, j, d, np, parts);
        if (!aten_view_infer_size(v->size[d], np, parts)) return FAIL(c, "unflatten sizes do not multiply to %lld", (long long)v->size[d]);
        for (int i = 0; i < d; i++) size[nd++] = v->size[i];
        for (int i = 0; i < np; i++) size[nd++] = parts[i];
        for (int i = d + 1; i < v->nd; i++) size[nd++] = v->size[i];
        return do_reshape(c, j, nd, size, 1);
    }
    aten_view o = *v;
    if (!strcmp(base, "unsqueeze")) {
        if ((rc = al_get_int(c, al_arg(c, 1, "dim"), "dim", 0, &a))) return rc;
        int d = aten_view_dim(a, v->nd + 1);
        if (d < 0 || v->nd >= DRIFT_MAX_DIMS) return FAIL(c, "unsqueeze dim %lld out of range", (long long)a);
        for (int i = v->nd; i > d; i--) {
            o.size[i] = v->size[i - 1];
            o.stride[i] = v->stride[i - 1];
        }
        o.size[d] = 1;
        o.stride[d] = d < v->nd ? v->size[d] * v->stride[d] : 1;
        o.nd = v->nd + 1;
        return al_set_view(c, &o);
    }
    if (!strcmp(base, "squeeze")) {
        int64_t dims[DRIFT_MAX_DIMS];
        int ndims = 0;
        const drift_json_value *dv = al_arg(c, 1, "dim");
        if (al_is_none(dv)) {
            for (int i = 0; i < v->nd; i++) dims[ndims++] = i;
        } else if ((rc = al_get_ints(c, dv, "dim", dims, &ndims))) {
            return rc;
        }
        int drop[DRIFT_MAX_DIMS] = {0};
        for (int k = 0; k < ndims; k++) {
            int d = aten_view_dim(dims[k], v->nd);
            if (d < 0) return FAIL(c, "squeeze dim %lld out of range", (long long)dims[k]);
            if (v->size[d] == 1) drop[d] = 1;
        }
        o.nd = 0;
        for (int i = 0; i < v->nd; i++)
            if (!drop[i]) {
                o.size[o.nd] = v->size[i];
                o.stride[o.nd] = v->stride[i];
                o.nd++;
            }
        return al_set_view(c, &o);
    }
    if (!strcmp(base, "permute")) {
        int64_t p[DRIFT_MAX_DIMS];
        int np = 0;
        if ((rc = al_get_ints(c, al_arg(c, 1, "dims"), "dims", p, &np))) return rc;
        if (np != v->nd) return FAIL(c, "permute of a %d-d tensor needs %d dims, got %d", v->nd, v->nd, np);
        int seen[DRIFT_MAX_DIMS] = {0};
        for (int i = 0; i < np; i++) {
            int d = aten_view_dim(p[i], v->nd);
            if (d < 0 || seen[d]) return FAIL(c, "dims is not a permutation");
            seen[d] = 1;
            o.size[i] = v->size[d];
            o.stride[i] = v->stride[d];
        }
        return al_set_view(c, &o);
    }
    if (!strcmp(base, "transpose") || !strcmp(base, "swapaxes")) {
        if ((rc = al_get_int(c, al_arg(c, 1, "dim0"), "dim0", 0, &a)) || (rc = al_get_int(c, al_arg(c, 2, "dim1"), "dim1", 0, &b)))
            return rc;
        int d0 = aten_view_dim(a, v->nd), d1 = aten_view_dim(b, v->nd);
        if (d0 < 0 || d1 < 0) return FAIL(c, "transpose dims out of range");
        if (v->nd == 0) return al_set_view(c, &o);
        o.size[d0] = v->size[d1], o.size[d1] = v->size[d0];
        o.stride[d0] = v->stride[d1], o.stride[d1] = v->stride[d0];
        return al_set_view(c, &o);
    }
    if (!strcmp(base, "expand")) {
        if ((rc = al_get_ints(c, al_arg(c, 1, "size"), "size", size, &nd))) return rc;
        if (nd < v->nd) return FAIL(c, "expand to %d dims from %d", nd, v->nd);
        al_rb_expand(c, j, nd, size);
        o.nd = nd;
        for (int i = nd - 1; i >= 0; i--) {
            int k = i - (nd - v->nd);
            int64_t s = size[i];
            if (k < 0) {
                if (s < 1) return FAIL(c, "expand: new leading dim %d must be >= 1", i);
                o.size[i] = s;
                o.stride[i] = 0;
            } else if (s == -1 || s == v->size[k]) {
                o.size[i] = v->size[k];
                o.stride[i] = v->stride[k];
            } else if (v->size[k] == 1 && s >= 1) {
                o.size[i] = s;
                o.stride[i] = 0;
            } else {
                return FAIL(c, "expand: dim %d of size %lld cannot become %lld", k, (long long)v->size[k], (long long)s);
            }
        }
        return al_set_view(c, &o);
    }
    if (!strcmp(base, "slice")) {
        int64_t dim, start, end, step;
        if ((rc = al_get_int(c, al_arg(c, 1, "dim"), "dim", 0, &dim)) ||
            (rc = al_get_int(c, al_arg(c, 2, "start"), "start", 0, &start)) ||
            (rc = al_get_int(c, al_arg(c, 3, "end"), "end", INT64_MAX, &end)) ||
            (rc = al_get_int(c, al_arg(c, 4, "step"), "step", 1, &step)))
            return rc;
        int d = aten_view_dim(dim, v->nd);
        if (d < 0 || v->nd == 0) return FAIL(c, "slice dim %lld out of range", (long long)dim);
        if (step < 1) return FAIL(c, "slice step must be >= 1, got %lld", (long long)step);
        int routed = 0, check = -1; /* a MoE's slice of its sorted expert ids, bounds at this batch's counts */
        if (d == 0 && step == 1 && (rc = al_routed_slice(c, j, v->size[0], &start, &end, &routed, &check))) return rc;
        const int64_t n = v->size[d];
        if (start < 0) start += n;
        if (end < 0) end += n;
        start = start < 0 ? 0 : start > n ? n : start;
        end = end < start ? start : end > n ? n : end;
        if (end == start) return FAIL(c, "an empty slice (drift replays no zero-size tensors)");
        o.off += start * v->stride[d];
        o.size[d] = (end - start + step - 1) / step;
        o.stride[d] *= step;
        if ((rc = check >= 0 ? al_routed_slice_bind(c, &o, check) : al_set_view(c, &o))) return rc;
        if (routed == 2) c->fx[c->cur].ragged = 1; /* its size follows the data's counts, not the batch */
        return DRIFT_OK;
    }
    if (!strcmp(base, "select")) {
        int64_t dim, idx;
        if ((rc = al_get_int(c, al_arg(c, 1, "dim"), "dim", 0, &dim)) || (rc = al_get_int(c, al_arg(c, 2, "index"), "index", 0, &idx)))
            return rc;
        int d = aten_view_dim(dim, v->nd);
        if (d < 0 || v->nd == 0) return FAIL(c, "select dim %lld out of range", (long long)dim);
        if (idx < 0) idx += v->size[d];
        if (idx < 0 || idx >= v->size[d]) return FAIL(c, "select index %lld out of range", (long long)idx);
        o.off += idx * v->stride[d];
        for (int i = d; i < v->nd - 1; i++) {
            o.size[i] = v->size[i + 1];
            o.stride[i] = v->stride[i + 1];
        }
        o.nd = v->nd - 1;
        return al_set_view(c, &o);
    }
    return FAIL(c, "internal: view op %s", base);
}

/* split_with_sizes, split, chunk, unbind: a tuple of views. */
int al_lower_multi(lctx *c, const char *base, const char *target) {
    (void)target;
    int j, rc;
    if ((rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &j))) return rc;
    const aten_view *v = &c->fx[j].t;
    int64_t dim = 0;
    int unbind = !strcmp(base, "unbind");
    if ((rc = al_get_int(c, al_arg(c, unbind ? 1 : 2, "dim"), "dim", 0, &dim))) return rc;
    int d = aten_view_dim(dim, v->nd);
    if (d < 0 || v->nd == 0) return FAIL(c, "dim %lld out of range", (long long)dim);
    const int64_t n = v->size[d];
    /* piece lengths */
    int64_t *len = drift_malloc((size_t)(n > 0 ? n : 1) * sizeof *len);
    if (!len) return drift_err_set(c->err, DRIFT_E_NOMEM, "aten", "out of memory");
    int np = 0;
    if (unbind) {
        for (int64_t i = 0; i < n; i++) len[np++] = 1;
    } else if (!strcmp(base, "split_with_sizes")) {
        const drift_json_value *sv = al_arg(c, 1, "split_sizes");
        if (!sv || sv->type != DRIFT_JSON_ARRAY || sv->n_items == 0 || (int64_t)sv->n_items > n) {
            drift_free(len);
            return FAIL(c, "split_sizes: expected 1..%lld integers", (long long)n);
        }
        int64_t tot = 0;
        for (size_t i = 0; i < sv->n_items; i++) {
            if (sv->items[i].type != DRIFT_JSON_NUMBER || !sv->items[i].is_int || sv->items[i].integer < 1 ||
                sv->items[i].integer > n) {
                drift_free(len);
                return FAIL(c, "split_sizes[%zu]: expected an integer in 1..%lld", i, (long long)n);
            }
            len[np++] = sv->items[i].integer;
            tot += sv->items[i].integer;
        }
        if (tot != n) {
            drift_free(len);
            return FAIL(c, "split_sizes sum to %lld, dim %d has %lld", (long long)tot, d, (long long)n);
        }
    } else {
        int64_t k = 0;
        if ((rc = al_get_int(c, al_arg(c, 1, !strcmp(base, "chunk") ? "chunks" : "split_size"), "size", 1, &k))) {
            drift_free(len);
            return rc;
        }
        if (k < 1) {
            drift_free(len);
            return FAIL(c, "chunks/split_size must be >= 1");
        }
        int64_t piece = !strcmp(base, "chunk") ? (n + k - 1) / k : k;
        for (int64_t s = 0; s < n; s += piece) len[np++] = s + piece <= n ? piece : n - s;
    }
    fxv *f = &c->fx[c->cur];
    f->multi = drift_calloc((size_t)np, sizeof *f->multi);
    if (!f->multi) {
        drift_free(len);
        return drift_err_set(c->err, DRIFT_E_NOMEM, "aten", "out of memory");
    }
    f->kind = FX_MULTI;
    f->n_multi = np;
    f->cplx = c->fx[j].cplx;
    int64_t at = 0;
    for (int i = 0; i < np; i++) {
        aten_view o = *v;
        o.off += at * v->stride[d];
        if (unbind) {
            for (int k = d; k < v->nd - 1; k++) {
                o.size[k] = v->size[k + 1];
                o.stride[k] = v->stride[k + 1];
            }
            o.nd = v->nd - 1;
        } else {
            o.size[d] = len[i];
        }
        f->multi[i] = o;
        at += len[i];
    }
    drift_free(len);
    return DRIFT_OK;
}

int al_lower_getitem(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int j = al_ref_of(c, al_arg(c, 0, NULL));
    if (j < 0 || c->fx[j].kind != FX_MULTI) return FAIL(c, "getitem of something that is not a tuple of tensors");
    int64_t i;
    int rc = al_get_int(c, al_arg(c, 1, NULL), "index", 0, &i);
    if (rc) return rc;
    if (i < 0) i += c->fx[j].n_multi;
    if (i < 0 || i >= c->fx[j].n_multi) return FAIL(c, "getitem index %lld out of range", (long long)i);
    c->last_cplx = c->fx[j].cplx;
    if (c->fx[j].multi[i].root < 0) { /* a drift.tuple entry that is not a tensor */
        c->fx[c->cur].kind = FX_OTHER;
        return DRIFT_OK;
    }
    return al_set_view(c, &c->fx[j].multi[i]);
}

/* alias-like: the same view */
int al_lower_alias(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int j, rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &j);
    if (rc) return rc;
    return al_set_view(c, &c->fx[j].t);
}

/* clone/contiguous: a copy (later writes to it must not reach the source) */
int al_lower_copy_of(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int id, rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &id);
    if (rc) return rc;
    return c->last_cplx ? al_set_result_cplx(c, id) : al_set_result(c, id);
}

/* view_as_complex / view_as_real: the same storage, the pair dim hidden or shown. */
static int lower_complex_view(lctx *c, int to_complex) {
    int j, rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &j);
    if (rc) return rc;
    aten_view v = c->fx[j].t;
    if (to_complex) {
        if (c->fx[j].cplx) return FAIL(c, "view_as_complex of a complex tensor");
        if (v.nd < 1 || v.size[v.nd - 1] != 2 || v.stride[v.nd - 1] != 1)
            return FAIL(c, "view_as_complex needs a last dim of size 2 and stride 1");
        v.nd--;
        c->last_cplx = 1;
    } else {
        if (!c->fx[j].cplx) return FAIL(c, "view_as_real of a real tensor");
        v.size[v.nd] = 2;
        v.stride[v.nd] = 1;
        v.nd++;
        c->last_cplx = 0;
    }
    return al_set_view(c, &v);
}

/* einsum with one operand whose output is a permutation of its input: a PERMUTE under
 * einsum's autocast rule (on autocast's lower-precision list: under bf16 autocast torch
 * rounds an fp32 operand to bf16 first; PRX's patchify meets that), a view otherwise. */
int al_lower_einsum(lctx *c, const char *base, const char *target) {
    (void)base;
    const char *eq = NULL;
    int rc = al_get_str(c, al_arg(c, 0, "equation"), "equation", NULL, &eq);
    if (rc) return rc;
    const drift_json_value *ops = al_arg(c, 1, "tensors");
    if (eq && ops && ops->type == DRIFT_JSON_ARRAY && ops->n_items == 2) return al_lower_einsum2(c, eq);
    if (!eq || !ops || ops->type != DRIFT_JSON_ARRAY || ops->n_items != 1)
        return FAIL(c, "einsum with %zu operands is not supported yet (one or two)",
                    ops && ops->type == DRIFT_JSON_ARRAY ? ops->n_items : 0);
    int j, x, y;
    if ((rc = al_tensor_arg(c, &ops->items[0], "tensors[0]", &j))) return rc;
    const int nd = c->fx[j].t.nd;
    const char *arrow = strstr(eq, "->");
    if (!arrow) return FAIL(c, "einsum '%s': an explicit output (->) is needed", eq);
    size_t ni = (size_t)(arrow - eq), no = strlen(arrow + 2);
    if ((int)ni != nd || no != ni) return FAIL(c, "einsum '%s' is not a permutation of the %d-d operand", eq, nd);
    drift_op op;
    memset(&op, 0, sizeof op);
    for (size_t k = 0; k < no; k++) {
        const char *p = memchr(eq, arrow[2 + k], ni);
        if (!p || memchr(arrow + 2, arrow[2 + k], k)) return FAIL(c, "einsum '%s' is not a permutation", eq);
        op.perm[k] = (int)(p - eq);
    }
    if ((rc = al_mat_fx(c, j, &x)) || (rc = al_emit(c, DRIFT_OP_PERMUTE, &op, 1, &x, al_rule_of(target), &y))) return rc;
    return al_set_result(c, y);
}

/* (a + bi)(c + di) = (ac - bd) + (ad + bc)i in opmath, as c10::complex's operator*. */
static int lower_complex_mul(lctx *c) {
    int ja, jb, rc;
    if ((rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &ja)) || (rc = al_tensor_arg(c, al_arg(c, 1, "other"), "other", &jb)))
        return rc;
    if (!c->fx[ja].cplx || !c->fx[jb].cplx) { /* complex times real: (re * r, im * r), the pair dim broadcast */
        const int jc = c->fx[ja].cplx ? ja : jb, jr = c->fx[ja].cplx ? jb : ja;
        int C, R, out;
        if ((rc = al_mat_fx(c, jc, &C)) || (rc = al_mat_fx(c, jr, &R))) return rc;
        const drift_value *rv = drift_graph_value(c->out, R);
        if (rv->ndim >= DRIFT_MAX_DIMS) return FAIL(c, "complex times real of %d dims", rv->ndim);
        int64_t sh[DRIFT_MAX_DIMS];
        memcpy(sh, rv->shape, sizeof(int64_t) * (size_t)rv->ndim);
        sh[rv->ndim] = 1;
        if ((rc = al_emit_view_to(c, R, rv->ndim + 1, sh, &R))) return rc;
        int in2[2] = {C, R};
        if ((rc = al_emit(c, DRIFT_OP_MUL, NULL, 2, in2, DRIFT_RULE_PROMOTE, &out))) return rc;
        return al_set_result_cplx(c, out);
    }
    int A, B;
    if ((rc = al_mat_fx(c, ja, &A)) || (rc = al_mat_fx(c, jb, &B))) return rc;
    int part[2][2]; /* [operand][re, im] */
    for (int o = 0; o < 2; o++) {
        const drift_value x_c = *drift_graph_value(c->out, o ? B : A), *x = &x_c; /* a copy: add_node moves values */
        aten_view v;
        aten_view_contig(&v, 0, x->ndim, x->shape);
        for (int k = 0; k < 2; k++) {
            drift_node_spec s;
            drift_node_spec_init(&s, DRIFT_OP_STRIDED);
            s.op.n_in = 1;
            s.in[0] = o ? B : A;
            s.op.start = k;
            memcpy(s.op.stride, v.stride, sizeof(int64_t) * (size_t)(x->ndim - 1));
            s.rule = DRIFT_RULE_LIKE_INPUT0;
            s.ndim = x->ndim - 1;
            memcpy(s.shape, x->shape, sizeof(int64_t) * (size_t)s.ndim);
            if (s.ndim == 0) return FAIL(c, "a 0-d complex product");
            if ((rc = al_add_node(c, &s, &part[o][k]))) return rc;
        }
    }
    int ac, bd, ad, bc, re, im;
    int in[2];
    in[0] = part[0][0], in[1] = part[1][0];
    if ((rc = al_emit(c, DRIFT_OP_MUL, NULL, 2, in, DRIFT_RULE_PROMOTE, &ac))) return rc;
    in[0] = part[0][1], in[1] = part[1][1];
    if ((rc = al_emit(c, DRIFT_OP_MUL, NULL, 2, in, DRIFT_RULE_PROMOTE, &bd))) return rc;
    in[0] = part[0][0], in[1] = part[1][1];
    if ((rc = al_emit(c, DRIFT_OP_MUL, NULL, 2, in, DRIFT_RULE_PROMOTE, &ad))) return rc;
    in[0] = part[0][1], in[1] = part[1][0];
    if ((rc = al_emit(c, DRIFT_OP_MUL, NULL, 2, in, DRIFT_RULE_PROMOTE, &bc))) return rc;
    in[0] = ac, in[1] = bd;
    if ((rc = al_emit(c, DRIFT_OP_SUB, NULL, 2, in, DRIFT_RULE_PROMOTE, &re))) return rc;
    in[0] = ad, in[1] = bc;
    if ((rc = al_emit(c, DRIFT_OP_ADD, NULL, 2, in, DRIFT_RULE_PROMOTE, &im))) return rc;
    const drift_value *rv = drift_graph_value(c->out, re);
    int64_t sh[DRIFT_MAX_DIMS];
    memcpy(sh, rv->shape, sizeof sh);
    int nd = rv->ndim;
    if (nd >= DRIFT_MAX_DIMS) return FAIL(c, "complex product of %d dims", nd);
    sh[nd] = 1;
    int r1, i1, out;
    if ((rc = al_emit_view_to(c, re, nd + 1, sh, &r1)) || (rc = al_emit_view_to(c, im, nd + 1, sh, &i1))) return rc;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.dim = nd;
    in[0] = r1, in[1] = i1;
    if ((rc = al_emit(c, DRIFT_OP_CONCAT, &op, 2, in, DRIFT_RULE_PROMOTE, &out))) return rc;
    return al_set_result_cplx(c, out);
}

/* ---- dtype branches of known modules ----------------------------------------------
 * Model code that branches on a dtype is exported with the branch the capture
 * took (fp32). For the modules below the importer writes the branch as a dtype
 * rule, so that it follows the plan as the model code would (docs/aten-graph.md,
 * "Dtype branches"). diffusers' RMSNorm:
 *   with a weight:    if weight.dtype in (fp16, bf16): h = h.to(weight.dtype)   -> half_as weight
 *                     h = h * weight
 *   without a weight: h = h.to(input_dtype)                                     -> type_as its input */

static int is_rmsnorm(const aten_node *n) { return n->op == ATEN_CALL && !strcmp(n->module_class, "RMSNorm"); }

/* 1 if FX node j is the placeholder of the parameter "<module>.weight". */
static int is_module_weight(const lctx *c, int j, const char *module) {
    if (j < 0) return 0;
    const aten_node *p = &c->g->nodes[j];
    if (p->op != ATEN_PLACEHOLDER || p->input < 0) return 0;
    const drift_aten_input *in = &c->g->inputs[p->input];
    size_t m = strlen(module);
    if (in->kind != DRIFT_ATEN_IN_PARAMETER || !in->target) return 0;
    if (!m) return !strcmp(in->target, "weight");
    return !strncmp(in->target, module, m) && in->target[m] == '.' && !strcmp(in->target + m + 1, "weight");
}

/* The FX node the current call of module m (the contiguous run of its nodes
 * around c->cur) read its input from, when that call is a diffusers RMSNorm
 * without a weight: the source of the run's first cast, computed outside m.
 * -1 otherwise (a weight is used, or no such cast). */
static int rmsnorm_noweight_input(const lctx *c, const char *m) {
    const drift_aten_graph *g = c->g;
    int lo = c->cur, hi = c->cur;
    while (lo > 0 && g->nodes[lo - 1].op == ATEN_CALL && !strcmp(g->nodes[lo - 1].module, m)) lo--;
    while (hi + 1 < g->n && g->nodes[hi + 1].op == ATEN_CALL && !strcmp(g->nodes[hi + 1].module, m)) hi++;
    int src = -1;
    for (int j = lo; j <= hi; j++) {
        const aten_node *n = &g->nodes[j];
        for (size_t k = 0; k < n->args->n_items; k++)
            if (is_module_weight(c, al_ref_of(c, &n->args->items[k]), m)) return -1;
        if (src < 0 && j < c->cur && !strcmp(n->target, "aten.to.dtype") && n->args->n_items > 0) {
            int s = al_ref_of(c, &n->args->items[0]);
            if (s >= 0 && strcmp(g->nodes[s].module, m)) src = s;
        }
    }
    return src;
}

/* ---- casts ---------------------------------------------------------------------- */

int al_lower_to(lctx *c, const char *base, const char *target) {
    (void)base;
    int j, rc;
    if ((rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &j))) return rc;
    const drift_json_value *dv = NULL;
    if (!strcmp(target, "aten.to.dtype")) dv = al_arg(c, 1, "dtype");
    else if (!strcmp(target, "aten.to.device")) dv = al_arg(c, 2, "dtype"), (void)al_arg(c, 1, "device");
    else dv = al_arg(c, -1, "dtype"); /* to.dtype_layout, _to_copy: keyword-only */
    int given, is_int;
    drift_dtype dt;
    if (c->fx[j].cplx) { /* complex -> complex64 / complex128: the (re, im) pairs cast to fp32 / fp64 */
        const drift_json_value *nm = dv && dv->type == DRIFT_JSON_OBJECT ? drift_json_object_get(dv, "dtype") : NULL;
        if (al_is_none(dv)) return al_set_view(c, &c->fx[j].t); /* a device move */
        const int c64 = nm && nm->type == DRIFT_JSON_STRING && !strcmp(nm->str, "complex64");
        const int c128 = nm && nm->type == DRIFT_JSON_STRING && !strcmp(nm->str, "complex128");
        if (!c64 && !c128)
            return FAIL(c, "casting a complex tensor to %s is not supported (complex64 or complex128 only)",
                        nm && nm->type == DRIFT_JSON_STRING ? nm->str : "?");
        const char *had = al_val_dtype_str(&c->g->nodes[j]);
        if (had && !strcmp(had, nm->str)) return al_set_view(c, &c->fx[j].t); /* no dtype change: torch returns self */
        int x, out;
        if ((rc = al_mat_fx(c, j, &x)) || (rc = al_emit_cast(c, x, DRIFT_RULE_CAST_TO, c64 ? DRIFT_F32 : DRIFT_F64, -1, &out)))
            return rc;
        return al_set_result_cplx(c, out);
    }
    if ((rc = al_get_dtype(c, dv, "dtype", &given, &dt, &is_int))) return rc;
    if (!given) return al_set_view(c, &c->fx[j].t); /* no dtype change: a device move */
    if (is_int) { /* to an integer or bool dtype: exact (truncation toward zero, as torch) */
        int x, out;
        if ((rc = al_mat_fx(c, j, &x)) || (rc = al_emit_cast(c, x, DRIFT_RULE_CAST_TO, dt, -1, &out))) return rc;
        return al_set_result(c, out);
    }
    int id, out;
    if ((rc = al_mat_fx(c, j, &id))) return rc;
    const aten_node *n = al_cur_node(c);
    int src = is_rmsnorm(n) && !strcmp(target, "aten.to.dtype") ? rmsnorm_noweight_input(c, n->module) : -1;
    const char *sd = src >= 0 ? al_val_dtype_str(&c->g->nodes[src]) : NULL, *td = al_val_dtype_str(n);
    if (src >= 0 && src != j && sd && td && !strcmp(sd, td) && !strcmp(c->g->nodes[j].module, n->module)) {
        /* `h.to(input_dtype)`: the dtype the norm's input has under the plan */
        int ref;
        if ((rc = al_mat_fx(c, src, &ref))) return rc;
        if ((rc = al_emit_cast(c, id, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, ref, &out))) return rc;
        return al_set_result(c, out);
    }
    if ((rc = al_emit_cast(c, id, DRIFT_RULE_CAST_TO, dt, -1, &out))) return rc;
    return al_set_result(c, out);
}

int al_lower_type_as(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int x, ref, out, rc, rj;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x)) || (rc = al_tensor_arg(c, al_arg(c, 1, "other"), "other", &rj)))
        return rc;
    if ((rc = al_mat_fx(c, al_resolve_alias(c, rj, 1), &ref))) return rc;
    if ((rc = al_emit_cast(c, x, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, ref, &out))) return rc;
    return al_set_result(c, out);
}

/* ---- elementwise ------------------------------------------------------------------ */

int al_lower_unary(lctx *c, const char *base, const char *target) {
    static const struct {
        const char *op;
        int sub;
    } map[] = {{"neg", DRIFT_UNARY_NEG}, {"exp", DRIFT_UNARY_EXP}, {"sin", DRIFT_UNARY_SIN}, {"cos", DRIFT_UNARY_COS},
               {"rsqrt", DRIFT_UNARY_RSQRT}, {"sqrt", DRIFT_UNARY_SQRT}, {"tanh", DRIFT_UNARY_TANH},
               {"sigmoid", DRIFT_UNARY_SIGMOID}, {"reciprocal", DRIFT_UNARY_RECIP}, {"abs", DRIFT_UNARY_ABS},
               {"relu", DRIFT_UNARY_RELU}};
    int x, id, rc;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x))) return rc;
    drift_op op;
    memset(&op, 0, sizeof op);
    if (!strcmp(base, "silu")) return (rc = al_emit(c, DRIFT_OP_SILU, NULL, 1, &x, DRIFT_RULE_PROMOTE, &id)) ? rc : al_set_result(c, id);
    if (!strcmp(base, "gelu")) {
        const char *approx = NULL;
        if ((rc = al_get_str(c, al_arg(c, 1, "approximate"), "approximate", "none", &approx))) return rc;
        if (!strcmp(approx, "tanh")) rc = al_emit(c, DRIFT_OP_GELU_TANH, NULL, 1, &x, DRIFT_RULE_PROMOTE, &id);
        else if (!strcmp(approx, "none")) {
            op.sub = DRIFT_UNARY_GELU_ERF;
            rc = al_emit(c, DRIFT_OP_UNARY, &op, 1, &x, DRIFT_RULE_PROMOTE, &id);
        } else
            return FAIL(c, "approximate='%s': expected 'none' or 'tanh'", approx);
        return rc ? rc : al_set_result(c, id);
    }
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(base, map[i].op)) {
            op.sub = map[i].sub;
            if ((rc = al_emit(c, DRIFT_OP_UNARY, &op, 1, &x, al_rule_of(target), &id))) return rc;
            return al_set_result(c, id);
        }
    return FAIL(c, "internal: unary %s", base);
}


int al_get_operand(lctx *c, const drift_json_value *v, const char *what, operand *o) {
    memset(o, 0, sizeof *o);
    o->fx = -1;
    if (al_node_ref(v)) {
        int rc = al_tensor_arg(c, v, what, &o->fx);
        return rc ? rc : al_mat_fx(c, o->fx, &o->id);
    }
    o->is_num = 1;
    return al_get_num(c, v, what, 0.0, &o->num);
}

int al_emit_scalar(lctx *c, int x, int sub, double s, drift_dtype_rule rule) {
    drift_op op;
    memset(&op, 0, sizeof op);
    op.sub = sub;
    op.scalar = s;
    int id, rc = al_emit(c, DRIFT_OP_SCALAR, &op, 1, &x, rule, &id);
    return rc ? rc : al_set_result(c, id);
}

int al_lower_binary(lctx *c, const char *base, const char *target) {
    operand a, b;
    int rc;
    if ((rc = al_get_operand(c, al_arg(c, 0, "self"), "self", &a)) || (rc = al_get_operand(c, al_arg(c, 1, "other"), "other", &b)))
        return rc;
    double alpha = 1.0;
    if ((rc = al_get_num(c, al_arg(c, 2, "alpha"), "alpha", 1.0, &alpha))) return rc;
    if (alpha != 1.0) { /* add/sub(self, other, alpha): other * alpha first (torch fuses it: an fma, one
                           rounding; here two, within an ULP of it) */
        if (strcmp(base, "add") && strcmp(base, "sub")) return FAIL(c, "alpha = %g on %s", alpha, base);
        if (b.is_num) b.num *= alpha;
        else {
            drift_op op;
            memset(&op, 0, sizeof op);
            op.sub = DRIFT_SCALAR_MUL;
            op.scalar = alpha;
            if ((rc = al_emit(c, DRIFT_OP_SCALAR, &op, 1, &b.id, DRIFT_RULE_PROMOTE, &b.id))) return rc;
        }
    }
    if (!strcmp(base, "div") && !a.is_num && !b.is_num) { /* true division of integers gives float32 */
        const char *ad = al_val_dtype_str(&c->g->nodes[a.fx]), *bd = al_val_dtype_str(&c->g->nodes[b.fx]);
        if (ad && (!strncmp(ad, "int", 3) || !strcmp(ad, "bool")) &&
            (rc = al_emit_cast(c, a.id, DRIFT_RULE_CAST_TO, DRIFT_F32, -1, &a.id)))
            return rc;
        if (bd && (!strncmp(bd, "int", 3) || !strcmp(bd, "bool")) &&
            (rc = al_emit_cast(c, b.id, DRIFT_RULE_CAST_TO, DRIFT_F32, -1, &b.id)))
            return rc;
    }
    if (!strcmp(base, "div")) {
        const char *mode = NULL;
        if ((rc = al_get_str(c, al_arg(c, -1, "rounding_mode"), "rounding_mode", NULL, &mode))) return rc;
        if (mode) return al_lower_binary_ext(c, base, target);
    }
    drift_dtype_rule rule = al_rule_of(target);
    if (a.is_num && b.is_num) return FAIL(c, "both operands are numbers");
    if (b.is_num) {
        int sub = !strcmp(base, "add") ? DRIFT_SCALAR_ADD : !strcmp(base, "sub") ? DRIFT_SCALAR_SUB
                  : !strcmp(base, "mul") ? DRIFT_SCALAR_MUL : DRIFT_SCALAR_DIV;
        return al_emit_scalar(c, a.id, sub, b.num, rule);
    }
    if (a.is_num) {
        if (!strcmp(base, "add")) return al_emit_scalar(c, b.id, DRIFT_SCALAR_ADD, a.num, rule);
        if (!strcmp(base, "mul")) return al_emit_scalar(c, b.id, DRIFT_SCALAR_MUL, a.num, rule);
        if (!strcmp(base, "sub")) return al_emit_scalar(c, b.id, DRIFT_SCALAR_RSUB, a.num, rule);
        return FAIL(c, "a number divided by a tensor is not supported");
    }
    /* A 0-d tensor next to a dimensioned one does not take part in type promotion:
     * it is cast to the other operand's dtype (TensorIterator's common dtype). */
    const drift_value va_c = *drift_graph_value(c->out, a.id), *va = &va_c, vb_c = *drift_graph_value(c->out, b.id), *vb = &vb_c;
    if (va->ndim == 0 && vb->ndim > 0 && (rc = al_emit_cast(c, a.id, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, b.id, &a.id)))
        return rc;
    if (vb->ndim == 0 && va->ndim > 0 && (rc = al_emit_cast(c, b.id, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, a.id, &b.id)))
        return rc;
    const aten_node *n = al_cur_node(c);
    if (!strcmp(base, "mul") && is_rmsnorm(n)) { /* diffusers' RMSNorm: h.to(weight.dtype) if half, then h * weight */
        if (is_module_weight(c, b.fx, n->module) &&
            (rc = al_emit_cast(c, a.id, DRIFT_RULE_HALF_AS, DRIFT_DTYPE_INVALID, b.id, &a.id)))
            return rc;
        if (is_module_weight(c, a.fx, n->module) &&
            (rc = al_emit_cast(c, b.id, DRIFT_RULE_HALF_AS, DRIFT_DTYPE_INVALID, a.id, &b.id)))
            return rc;
    }
    drift_op_kind k = !strcmp(base, "add") ? DRIFT_OP_ADD : !strcmp(base, "sub") ? DRIFT_OP_SUB
                      : !strcmp(base, "mul") ? DRIFT_OP_MUL : DRIFT_OP_DIV;
    int in[2] = {a.id, b.id}, id;
    if ((rc = al_emit(c, k, NULL, 2, in, rule, &id))) return rc;
    return al_set_result(c, id);
}

int al_lower_rsub(lctx *c, const char *base, const char *target) {
    (void)base;
    int x, rc;
    double s = 0, alpha;
    operand o;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x)) || (rc = al_get_operand(c, al_arg(c, 1, "other"), "other", &o)) ||
        (rc = al_get_num(c, al_arg(c, 2, "alpha"), "alpha", 1.0, &alpha)))
        return rc;
    if (o.is_num) s = o.num;
    if (alpha != 1.0) { /* rsub(self, other, alpha) = other - alpha * self */
        drift_op op;
        memset(&op, 0, sizeof op);
        op.sub = DRIFT_SCALAR_MUL;
        op.scalar = alpha;
        if ((rc = al_emit(c, DRIFT_OP_SCALAR, &op, 1, &x, DRIFT_RULE_PROMOTE, &x))) return rc;
    }
    if (!o.is_num) { /* rsub.Tensor with a tensor other: other - alpha * self (a 0-d one takes self's dtype) */
        const drift_value vo = *drift_graph_value(c->out, o.id), vx = *drift_graph_value(c->out, x);
        if (vo.ndim == 0 && vx.ndim > 0 && (rc = al_emit_cast(c, o.id, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, x, &o.id)))
            return rc;
        if (vx.ndim == 0 && vo.ndim > 0 && (rc = al_emit_cast(c, x, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, o.id, &x)))
            return rc;
        int in[2] = {o.id, x}, id;
        if ((rc = al_emit(c, DRIFT_OP_SUB, NULL, 2, in, al_rule_of(target), &id))) return rc;
        return al_set_result(c, id);
    }
    return al_emit_scalar(c, x, DRIFT_SCALAR_RSUB, s, al_rule_of(target));
}

int al_lower_pow(lctx *c, const char *base, const char *target) {
    (void)base;
    int x, rc;
    double e;
    if (!strcmp(target, "aten.pow.Tensor_Scalar")) {
        if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x)) || (rc = al_get_num(c, al_arg(c, 1, "exponent"), "exponent", 1, &e)))
            return rc;
        return al_emit_scalar(c, x, DRIFT_SCALAR_POW, e, DRIFT_RULE_AUTOCAST_FP32);
    }
    if (!strcmp(target, "aten.pow.Scalar")) { /* s ** x */
        double b;
        if ((rc = al_get_num(c, al_arg(c, 0, "self"), "self", 1, &b)) || (rc = al_mat_arg(c, al_arg(c, 1, "exponent"), "exponent", &x)))
            return rc;
        return al_emit_scalar(c, x, DRIFT_SCALAR_RPOW, b, DRIFT_RULE_AUTOCAST_FP32);
    }
    return al_lower_binary_ext(c, "pow", target); /* two tensors */
}

/* ---- reductions, norms, matmuls --------------------------------------------------- */

int al_lower_reduce(lctx *c, const char *base, const char *target) {
    if (strcmp(target, "aten.mean.dim") && strcmp(target, "aten.sum.dim_IntList")) return al_lower_reduce_ext(c, base, target);
    int j, rc;
    if ((rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &j))) return rc;
    int64_t dims[DRIFT_MAX_DIMS], keep;
    int nd = 0;
    if ((rc = al_get_ints(c, al_arg(c, 1, "dim"), "dim", dims, &nd)) || (rc = al_get_int(c, al_arg(c, 2, "keepdim"), "keepdim", 0, &keep)))
        return rc;
    int given, is_int;
    drift_dtype dt;
    if ((rc = al_get_dtype(c, al_arg(c, -1, "dtype"), "dtype", &given, &dt, &is_int))) return rc;
    if (given) return al_lower_reduce_ext(c, base, target); /* cast first, then reduce */
    const char *jd = al_val_dtype_str(&c->g->nodes[j]);
    if (jd && (!strncmp(jd, "int", 3) || !strncmp(jd, "uint", 4) || !strcmp(jd, "bool")))
        return al_lower_reduce_ext(c, base, target); /* a sum of integers or bools is int64 */
    const aten_view *v = &c->fx[j].t;
    int d = -1, real = 0;
    for (int i = 0; i < nd; i++) {
        int k = aten_view_dim(dims[i], v->nd);
        if (k < 0) return FAIL(c, "dim %lld out of range", (long long)dims[i]);
        if (v->size[k] > 1) real++, d = k;
    }
    if (nd == 0 || real > 1) return al_lower_reduce_ext(c, base, target); /* several dims: one reduction over them */
    if (d < 0) d = aten_view_dim(dims[0], v->nd);
    int x, id;
    if ((rc = al_mat_fx(c, j, &x))) return rc;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.sub = !strcmp(base, "mean") ? DRIFT_REDUCE_MEAN : DRIFT_REDUCE_SUM;
    op.dim = d;
    if ((rc = al_emit(c, DRIFT_OP_REDUCE, &op, 1, &x, al_rule_of(target), &id))) return rc;
    if (!keep) {
        int64_t sh[DRIFT_MAX_DIMS];
        int m = 0;
        for (int i = 0; i < v->nd; i++) {
            int drop = 0;
            for (int k = 0; k < nd; k++) drop |= aten_view_dim(dims[k], v->nd) == i;
            if (!drop) sh[m++] = v->size[i];
        }
        if ((rc = al_emit_view_to(c, id, m, sh, &id))) return rc;
    }
    return al_set_result(c, id);
}

static int last_dim_only(lctx *c, int x, const drift_json_value *ns) {
    int64_t s[DRIFT_MAX_DIMS];
    int n = 0, rc = al_get_ints(c, ns, "normalized_shape", s, &n);
    if (rc) return rc;
    const drift_value *v = drift_graph_value(c->out, x);
    if (n != 1 || v->ndim < 1 || s[0] != v->shape[v->ndim - 1])
        return FAIL(c, "normalized_shape must be the last dim only");
    return DRIFT_OK;
}

int al_lower_norm(lctx *c, const char *base, const char *target) {
    (void)target;
    int in[3], n = 1, rc;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "input"), "input", &in[0]))) return rc;
    if ((rc = last_dim_only(c, in[0], al_arg(c, 1, "normalized_shape")))) return rc;
    const drift_json_value *w = al_arg(c, 2, "weight");
    int layer = !strcmp(base, "layer_norm");
    const drift_json_value *bias = layer ? al_arg(c, 3, "bias") : NULL;
    double eps;
    const drift_json_value *ev = al_arg(c, layer ? 4 : 3, "eps");
    if (layer) (void)al_arg(c, 5, "cudnn_enable"); /* a kernel choice, not a value */
    if (!layer && al_is_none(ev)) {
        /* eps=None: the epsilon of the *accumulate* type of the dtype the capture saw
         * (ATen's rms_norm_composite and _fused_rms_norm: FLT_EPSILON for fp32, bf16 and
         * fp16, DBL_EPSILON for fp64), not finfo(input.dtype).eps as the Python docs say */
        int jx = al_ref_of(c, al_arg(c, 0, "input"));
        const char *d = jx >= 0 ? al_val_dtype_str(&c->g->nodes[jx]) : NULL;
        if (!d) return FAIL(c, "rms_norm with eps=None: the input's captured dtype is unknown");
        eps = !strcmp(d, "float64") ? 2.220446049250313e-16 : 1.1920928955078125e-07;
    } else if ((rc = al_get_num(c, ev, "eps", 1e-5, &eps))) {
        return rc;
    }
    if (!al_is_none(w) && (rc = al_mat_arg(c, w, "weight", &in[n++]))) return rc;
    if (!al_is_none(bias)) {
        if (n == 1) return FAIL(c, "layer_norm with a bias but no weight is not supported");
        if ((rc = al_mat_arg(c, bias, "bias", &in[n++]))) return rc;
    }
    drift_op op;
    memset(&op, 0, sizeof op);
    op.eps = (float)eps;
    int id;
    if ((rc = al_emit(c, layer ? DRIFT_OP_LAYER_NORM : DRIFT_OP_RMS_NORM, &op, n, in,
                   layer ? DRIFT_RULE_AUTOCAST_FP32 : DRIFT_RULE_RMS_NORM, &id)))
        return rc;
    return al_set_result(c, id);
}

static int autocast_operand(lctx *c, int x, int *id);

/* Whether torch holds FX node j as a tensor of 3+ dims that is not contiguous: 0 no, 1 yes,
 * 2 yes and dense (a permutation of contiguous strides, which a cast with preserve_format
 * keeps). The sizes and strides are torch's at the batch lowered now (al_torch_strides: the
 * captured ones at the recorded batch; re-batching scales one dim: a slice along the
 * sequence recorded at batch 1 is contiguous there, a dim of size 1 having no stride to keep,
 * and not at batch 2; a reshape that copied at the recorded batch may be a strided view at
 * another). */
static int noncontig_nd(lctx *c, int j) {
    int64_t size[DRIFT_MAX_DIMS], stride[DRIFT_MAX_DIMS], expect = 1;
    int nd, contiguous = 1;
    if (!al_torch_strides(c, j, &nd, size, stride) || nd < 3) return 0;
    for (int d = nd - 1; d >= 0; d--) { /* torch's is_contiguous: size-1 dims do not count */
        if (size[d] == 1) continue;
        if (stride[d] != expect) contiguous = 0;
        expect *= size[d];
    }
    if (contiguous) return 0;
    expect = 1;
    for (int k = 0; k < nd; k++) { /* dense: the strides of the non-1 dims, smallest first, are 1, s0, s0 s1, ... */
        int best = -1;
        for (int d = 0; d < nd; d++)
            if (size[d] != 1 && (best < 0 || stride[d] < stride[best])) best = d;
        if (best < 0) break;
        if (stride[best] != expect) return 1;
        expect *= size[best];
        size[best] = 1; /* taken */
    }
    return 2;
}

/* matmul(x, W^T) of a linear whose input x (FX node jx, materialised as in[0], 3+ dims) torch
 * holds non-contiguous (Linear.cpp: no flatten then), as torch.matmul runs it: when x's dims do
 * not merge (should_fold false) a bmm of x and W^T expanded over x's batch dims (stride 0), both
 * as torch's strides have them (BMM's op->layout, the torch profile's cuBLAS call: for a
 * transposed x, cublasGemmStridedBatchedEx 't', 't' with W's batch stride 0). Where x folds into
 * one mm, or its strides are not those of a dense (transposed) operand drift can name, one
 * LINEAR without bias (the same values; drift's mm of the materialised input). */
static int linear_matmul(lctx *c, int jx, const int *in, int *y) {
    const drift_value vx = *drift_graph_value(c->out, in[0]), vw = *drift_graph_value(c->out, in[1]);
    const int nd = vx.ndim;
    int exact = 0, bits = 0;
    int64_t bs[DRIFT_MAX_DIMS];
    for (int i = 0; i < nd - 2; i++) bs[i] = vx.shape[i];
    if (nd >= 3 && vw.ndim == 2 && !al_matmul_folds(c, jx)) bits = al_matmul_layout(c, jx, 0, nd - 2, bs, &exact);
    if (!exact) return al_emit(c, DRIFT_OP_LINEAR, NULL, 2, in, DRIFT_RULE_AUTOCAST_LOWER, y);
    const int64_t N = vw.shape[0], K = vw.shape[1];
    int64_t size[DRIFT_MAX_DIMS], stride[DRIFT_MAX_DIMS];
    for (int i = 0; i < nd - 2; i++) size[i] = bs[i], stride[i] = 0;
    size[nd - 2] = K, stride[nd - 2] = 1;
    size[nd - 1] = N, stride[nd - 1] = K;
    int wt, rc, ab[2];
    if ((rc = al_emit_gather(c, in[1], nd, size, stride, 0, &wt))) return rc;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.alpha = 1.0f;
    op.beta = 1.0f;
    op.layout = bits | DRIFT_BMM_B_T | DRIFT_BMM_B_BCAST;
    ab[0] = in[0], ab[1] = wt;
    return al_emit(c, DRIFT_OP_BMM, &op, 2, ab, DRIFT_RULE_AUTOCAST_LOWER, y);
}

/* linear(x, W, b): torch's aten::linear flattens a contiguous input and runs addmm with the
 * bias in the GEMM's epilogue (rounded once); an input of 3 or more dims that is not
 * contiguous takes matmul(x, W^T) and then `out.add_(b)`: the GEMM's output rounded to
 * its dtype, then the bias added and rounded again (measured on the H200,
 * tests/gpu/invariance_kernels.py: Bria's to_out.0 at batch 2 runs a GEMM without bias and
 * an elementwise add; Sana's attn1.to_out, whose input is the linear attention's transposed
 * output: 1008x the cpu noise floor before). Under autocast the input reaches linear cast
 * with preserve_format, which keeps the strides of a dense input and makes another one
 * contiguous (EasyAnimate's fp32 slice); an input already in the compute dtype is not cast.
 * A 2-d input always goes to addmm. The GEMM without bias is torch's matmul (linear_matmul). */
int al_lower_linear(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int in[3], n = 2, rc, id;
    const drift_json_value *xa = al_arg(c, 0, "input");
    int jx = al_ref_of(c, xa);
    if ((rc = al_mat_arg(c, xa, "input", &in[0])) || (rc = al_mat_arg(c, al_arg(c, 1, "weight"), "weight", &in[1])))
        return rc;
    const drift_json_value *b = al_arg(c, 2, "bias");
    if (!al_is_none(b) && (rc = al_mat_arg(c, b, "bias", &in[n++]))) return rc;
    int nc = jx >= 0 ? noncontig_nd(c, jx) : 0; /* with or without a bias: matmul */
    if (nc == 1) { /* not dense: contiguous after autocast's cast unless it is already in the compute dtype */
        const char *xd = al_val_dtype_str(&c->g->nodes[jx]), *yd = al_val_dtype_str(&c->g->nodes[c->cur]);
        if (!xd || !yd || strcmp(xd, yd)) nc = 0;
    }
    if (nc && n == 2) {
        if ((rc = linear_matmul(c, jx, in, &id))) return rc;
        return al_set_result(c, id);
    }
    if (nc) {
        int y, bc, ab[2];
        if ((rc = linear_matmul(c, jx, in, &y)) || (rc = autocast_operand(c, in[2], &bc))) return rc;
        ab[0] = y, ab[1] = bc;
        if ((rc = al_emit(c, DRIFT_OP_ADD, NULL, 2, ab, DRIFT_RULE_PROMOTE, &id))) return rc;
        return al_set_result(c, id);
    }
    if ((rc = al_emit(c, DRIFT_OP_LINEAR, NULL, n, in, DRIFT_RULE_AUTOCAST_LOWER, &id))) return rc;
    return al_set_result(c, id);
}

/* A boolean mask as an additive fp32 bias: 0 where true, -inf where false. */
static int mask_bias(lctx *c, int m, int *id) {
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_UNARY);
    s.op.n_in = 1;
    s.op.sub = DRIFT_UNARY_MASK_BIAS;
    s.in[0] = m;
    s.rule = DRIFT_RULE_FIXED; /* fp32 whatever the mask's dtype (bool is an integer dtype) */
    s.rule_dtype = DRIFT_F32;
    return al_add_node(c, &s, id);
}

/* x rounded as autocast rounds an operand of the lower-precision list (x * 1, exact,
 * in the autocast dtype; the promoted dtype without autocast). */
static int autocast_operand(lctx *c, int x, int *id) {
    drift_op op;
    memset(&op, 0, sizeof op);
    op.sub = DRIFT_SCALAR_MUL;
    op.scalar = 1.0;
    return al_emit(c, DRIFT_OP_SCALAR, &op, 1, &x, DRIFT_RULE_AUTOCAST_LOWER, id);
}

/* attn_mask as ATTENTION's additive bias [Bb, Hb, Lqb, Lk] (kernels/backend.h): the mask
 * broadcast to [B, H, Lq, Lk] (H: the query heads), each of B, H, Lq kept at 1 where the
 * mask has size 1 or stride 0 there (an expand: Lumina's key mask expanded over the
 * queries stays [B, 1, 1, Lk]). A bool mask is 0 / -inf in fp32, as torch converts it; a
 * float mask is first rounded as autocast rounds SDPA's operands (fp32 -> bf16 under bf16
 * autocast: the mask is a floating argument of a lower-precision op), then widened to
 * fp32 exactly by ATTENTION's dtype rule. */
static int sdpa_mask_bias(lctx *c, const drift_json_value *mask, const int64_t *want, int *out) {
    int jm, rc;
    if ((rc = al_tensor_arg(c, mask, "attn_mask", &jm))) return rc;
    const aten_view *mv = &c->fx[jm].t;
    if (mv->nd > 4) return FAIL(c, "attn_mask of %d dims does not broadcast to [B, H, Lq, Lk]", mv->nd);
    aten_view ex;
    memset(&ex, 0, sizeof ex);
    ex.root = mv->root, ex.off = mv->off, ex.nd = 4;
    for (int i = 0; i < 4; i++) {
        const int kk = i - (4 - mv->nd);
        const int64_t sz = kk >= 0 ? mv->size[kk] : 1, st = kk >= 0 ? mv->stride[kk] : 0;
        if (sz != 1 && sz != want[i])
            return FAIL(c, "attn_mask does not broadcast to [B, H, Lq, Lk] = [%lld, %lld, %lld, %lld]",
                        (long long)want[0], (long long)want[1], (long long)want[2], (long long)want[3]);
        const int bcast = sz == 1 || st == 0;
        ex.size[i] = bcast && i < 3 ? 1 : want[i];
        ex.stride[i] = bcast ? 0 : st;
    }
    if ((rc = al_mat_view(c, &ex, out))) return rc;
    const char *mdt = al_val_dtype_str(&c->g->nodes[jm]);
    if (mdt && !strcmp(mdt, "bool")) {
        if ((rc = mask_bias(c, *out, out))) return rc;
        /* torch hands cuDNN (its SDPA backend for masked 16-bit attention) a bool mask as
           where(!mask, -65504.0, 0) in the query's dtype (convert_boolean_attn_mask_cudnn,
           torch 2.11): a finite bias, so a query row with no key allowed attends as if
           unmasked instead of giving NaN (HunyuanVideo-1.5's padded text rows). Elsewhere
           the bias underflows exp to 0 exactly, as -inf does. */
        const char *qd = al_val_dtype_str(&c->g->nodes[c->cur]);
        const double fin = qd && !strcmp(qd, "bfloat16") ? -65536.0 : qd && !strcmp(qd, "float16") ? -65504.0 : 0.0;
        if (fin == 0.0) return DRIFT_OK; /* fp32: torch's other backends get -inf */
        drift_node_spec s;
        drift_node_spec_init(&s, DRIFT_OP_SCALAR);
        s.op.n_in = 1;
        s.op.sub = DRIFT_SCALAR_MAX;
        s.op.scalar = fin; /* -65504 rounded to bf16 is -65536 */
        s.in[0] = *out;
        s.rule = DRIFT_RULE_FIXED;
        s.rule_dtype = DRIFT_F32;
        return al_add_node(c, &s, out);
    }
    if (mdt && (!strcmp(mdt, "int64") || !strcmp(mdt, "int32") || !strcmp(mdt, "uint8")))
        return FAIL(c, "attn_mask of dtype %s: SDPA takes a bool or floating mask", mdt);
    return autocast_operand(c, *out, out);
}

/* is_causal: torch's mask ones(Lq, Lk).tril(0) (top-left aligned: query i sees keys
 * j <= i) as a bias [1, 1, Lq, Lk]: 0 where j <= i, -inf elsewhere. */
static int sdpa_causal_bias(lctx *c, int64_t Lq, int64_t Lk, int *out) {
    int rc, qi, ki, m;
    if ((rc = al_iota_along(c, Lq, 2, 0, &qi)) || (rc = al_iota_along(c, Lk, 2, 1, &ki)) ||
        (rc = al_cmp(c, DRIFT_BINARY_GE, qi, ki, &m)) || (rc = mask_bias(c, m, &m))) /* key j <= query i */
        return rc;
    return al_emit_view_to(c, m, 4, (int64_t[]){1, 1, Lq, Lk}, out);
}

/* enable_gqa: key/value [B, Hkv, L, D] with Hkv dividing the query's H heads are
 * repeated as torch does (repeat_interleave(H / Hkv, dim=-3): query head h reads kv
 * head h / (H / Hkv)), one gather each. */
static int gqa_repeat(lctx *c, int64_t H, int *x) {
    const drift_value v = *drift_graph_value(c->out, *x);
    if (v.ndim != 4) return FAIL(c, "enable_gqa: key and value must be 4-d [B, Hkv, L, D]");
    const int64_t B = v.shape[0], Hk = v.shape[1], L = v.shape[2], D = v.shape[3];
    if (Hk == H) return DRIFT_OK;
    if (Hk < 1 || H % Hk) return FAIL(c, "enable_gqa: %lld key/value heads do not divide %lld query heads", (long long)Hk, (long long)H);
    const int64_t sh[5] = {B, Hk, H / Hk, L, D}, st[5] = {Hk * L * D, L * D, 0, D, 1};
    int rc;
    if ((rc = al_emit_gather(c, *x, 5, sh, st, 0, x))) return rc;
    return al_emit_view_to(c, *x, 4, (int64_t[]){B, H, L, D}, x);
}

/* torch's math backend as explicit ops: q, k, v as autocast hands them to SDPA, widened to
 * fp32 (bf16/fp16 reductions off by default since torch 2.5), q and k each scaled by
 * sqrt(scale), s = q k^T + bias, p = softmax(s), o = p v, all in fp32, cast back once
 * (tests/gpu/sdpa_backend_probe.py: this form differs from the fused kernels exactly as
 * torch's math backend does, in all 216 configurations). */
static int sdpa_math32(lctx *c, const int *in_, double scale, int bias, int *out) {
    int rc, kt, sc, p, in2[2], in[3], q_r;
    drift_op op;
    for (int i = 0; i < 3; i++)
        if ((rc = autocast_operand(c, in_[i], &in[i]))) return rc;
    q_r = in[0];
    for (int i = 0; i < 3; i++)
        if ((rc = al_emit_cast(c, in[i], DRIFT_RULE_CAST_TO, DRIFT_F32, -1, &in[i]))) return rc;
    memset(&op, 0, sizeof op);
    op.sub = DRIFT_SCALAR_MUL;
    op.scalar = sqrt(scale);
    if ((rc = al_emit(c, DRIFT_OP_SCALAR, &op, 1, &in[0], DRIFT_RULE_PROMOTE, &in[0])) ||
        (rc = al_emit(c, DRIFT_OP_SCALAR, &op, 1, &in[1], DRIFT_RULE_PROMOTE, &in[1])))
        return rc;
    memset(&op, 0, sizeof op);
    op.perm[0] = 0, op.perm[1] = 1, op.perm[2] = 3, op.perm[3] = 2;
    if ((rc = al_emit(c, DRIFT_OP_PERMUTE, &op, 1, &in[1], DRIFT_RULE_LIKE_INPUT0, &kt))) return rc;
    in2[0] = in[0], in2[1] = kt;
    memset(&op, 0, sizeof op);
    op.alpha = op.beta = 1.0f;
    if ((rc = al_emit(c, DRIFT_OP_BMM, &op, 2, in2, DRIFT_RULE_PROMOTE, &sc))) return rc;
    in2[0] = sc, in2[1] = bias;
    if ((rc = al_emit(c, DRIFT_OP_ADD, NULL, 2, in2, DRIFT_RULE_PROMOTE, &sc))) return rc;
    memset(&op, 0, sizeof op);
    op.dim = -1;
    if ((rc = al_emit(c, DRIFT_OP_SOFTMAX, &op, 1, &sc, DRIFT_RULE_AUTOCAST_FP32, &p))) return rc;
    memset(&op, 0, sizeof op);
    op.alpha = op.beta = 1.0f;
    in2[0] = p, in2[1] = in[2];
    if ((rc = al_emit(c, DRIFT_OP_BMM, &op, 2, in2, DRIFT_RULE_PROMOTE, &p))) return rc;
    return al_emit_cast(c, p, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, q_r, out);
}

/* scaled_dot_product_attention: one ATTENTION (torch 2.11 runs cuDNN's fused flash SDPA at
 * head dims that are multiples of 8 on an H200, tests/gpu/sdpa_backend_probe.py, and
 * FlashAttention-2 at the others: order 1); attn_mask or is_causal as its additive bias (in3),
 * enable_gqa as the kv heads repeated; torch's math backend where no fused kernel applies. */
int al_lower_sdpa(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int in[4], rc, id;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "query"), "query", &in[0])) || (rc = al_mat_arg(c, al_arg(c, 1, "key"), "key", &in[1])) ||
        (rc = al_mat_arg(c, al_arg(c, 2, "value"), "value", &in[2])))
        return rc;
    const drift_json_value *mask = al_arg(c, 3, "attn_mask");
    double p, scale;
    int64_t causal, gqa;
    if ((rc = al_get_num(c, al_arg(c, 4, "dropout_p"), "dropout_p", 0, &p)) ||
        (rc = al_get_int(c, al_arg(c, 5, "is_causal"), "is_causal", 0, &causal)) ||
        (rc = al_get_num(c, al_arg(c, 6, "scale"), "scale", 0, &scale)) ||
        (rc = al_get_int(c, al_arg(c, 7, "enable_gqa"), "enable_gqa", 0, &gqa)))
        return rc;
    if (p != 0.0) return FAIL(c, "dropout_p %g: SDPA replays in eval (dropout_p must be 0)", p);
    if (causal && !al_is_none(mask)) return FAIL(c, "is_causal with an attn_mask (torch refuses both)");
    const drift_value qv = *drift_graph_value(c->out, in[0]);
    if (qv.ndim != 4) return FAIL(c, "query must be 4-d [B, H, L, D]");
    if (gqa && ((rc = gqa_repeat(c, qv.shape[1], &in[1])) || (rc = gqa_repeat(c, qv.shape[1], &in[2])))) return rc;
    const drift_value *kv = drift_graph_value(c->out, in[1]);
    if (kv->ndim != 4) return FAIL(c, "key must be 4-d [B, H, L, D]");
    const int64_t want[4] = {qv.shape[0], qv.shape[1], qv.shape[2], kv->shape[2]};
    drift_op op;
    memset(&op, 0, sizeof op);
    op.scale = scale > 0 ? (float)scale : (float)(1.0 / sqrt((double)qv.shape[3]));
    int n = 3;
    if (causal && (rc = sdpa_causal_bias(c, want[2], want[3], &in[n++]))) return rc;
    if (!causal && !al_is_none(mask) && (rc = sdpa_mask_bias(c, mask, want, &in[n++]))) return rc;
    const int64_t dv = drift_graph_value(c->out, in[2])->shape[3];
    /* a head dim that is no multiple of 8: cuDNN and memory-efficient attention need 16-byte
     * rows of 16-bit values. Flash pads the head dim to 8 (the recorded output's stride says
     * so) and takes no mask but is_causal with as many queries as keys: then torch runs
     * FlashAttention-2 (Helios, Motif, WanAnimate, LTX-2's audio heads, Sana; Cosmos3-Omni's
     * causal GQA); with a mask, torch's math backend (HunyuanVideo's token refiner, head dim
     * 10; Mochi, head dim 2) */
    const int odd = qv.shape[3] % 8 || dv % 8, flash = !(n == 4 && !causal) && (!causal || want[2] == want[3]);
    if (odd && !flash) {
        if ((rc = sdpa_math32(c, in, op.scale, in[3], &id))) return rc;
        return al_set_result(c, id);
    }
    if (odd) op.sub = DRIFT_ATTN_ORDER_LAST_FIRST;
    if ((rc = al_emit(c, DRIFT_OP_ATTENTION, &op, n, in, DRIFT_RULE_AUTOCAST_LOWER, &id))) return rc;
    return al_set_result(c, id);
}

/* conv with stride == kernel, no padding: patchify + linear; the result is the
 * [B, O, spatial...] view of the [B, L, O] linear output (no copy). The patch
 * vectors are channels-last (kd, kh, kw, C) and the weight is permuted to
 * match: cuDNN runs torch's bf16 patch conv as an NHWC implicit GEMM whose
 * K order is that one (measured on an H200, issue 16), so the GEMM's fp32
 * sum runs in the same order. */
int al_lower_conv(lctx *c, const char *base, const char *target) {
    (void)target;
    int sp = !strcmp(base, "conv3d") ? 3 : !strcmp(base, "conv1d") ? 1 : 2;
    const int generic = !strcmp(base, "convolution"); /* convolution(input, weight, bias, stride, padding, dilation,
                                                         transposed, output_padding, groups) */
    int x, w, b = -1, rc;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "input"), "input", &x)) || (rc = al_mat_arg(c, al_arg(c, 1, "weight"), "weight", &w)))
        return rc;
    if (generic) {
        int64_t tr;
        if ((rc = al_get_int(c, al_arg(c, 6, "transposed"), "transposed", 0, &tr))) return rc;
        sp = drift_graph_value(c->out, w)->ndim - 2;
        if (sp < 1 || sp > 3) return FAIL(c, "a convolution over %d spatial dims", sp);
        if (tr) { /* aten_lower_linalg.c: stride == kernel only */
            if (!al_is_none(al_arg(c, 2, "bias")) && (rc = al_mat_arg(c, al_arg(c, 2, "bias"), "bias", &b))) return rc;
            return al_lower_conv_transposed(c, x, w, b, sp);
        }
        (void)al_arg(c, 7, "output_padding"); /* only a transposed convolution reads it */
    }
    if (!al_is_none(al_arg(c, 2, "bias")) && (rc = al_mat_arg(c, al_arg(c, 2, "bias"), "bias", &b))) return rc;
    /* copies: emitting a node may move the graph's values */
    const drift_value xv_c = *drift_graph_value(c->out, x), *xv = &xv_c, wv_c = *drift_graph_value(c->out, w), *wv = &wv_c;
    if (xv->ndim != sp + 2 || wv->ndim != sp + 2) return FAIL(c, "input and weight must be %d-d", sp + 2);
    int64_t st[3], pad[3], dil[3], groups;
    int ns = 0, np = 0, nd = 0;
    if (al_is_none(al_arg(c, 3, "stride"))) st[0] = 1, ns = 1;
    else if ((rc = al_get_ints(c, al_arg(c, 3, "stride"), "stride", st, &ns))) return rc;
    if (al_is_none(al_arg(c, 4, "padding"))) pad[0] = 0, np = 1;
    else if ((rc = al_get_ints(c, al_arg(c, 4, "padding"), "padding", pad, &np))) return rc;
    if (al_is_none(al_arg(c, 5, "dilation"))) dil[0] = 1, nd = 1;
    else if ((rc = al_get_ints(c, al_arg(c, 5, "dilation"), "dilation", dil, &nd))) return rc;
    if ((rc = al_get_int(c, al_arg(c, generic ? 8 : 6, "groups"), "groups", 1, &groups))) return rc;
    int p[3] = {1, 1, 1}, patch = 1;
    int64_t S[3], P[3], D[3];
    for (int i = 0; i < sp; i++) {
        int64_t k = wv->shape[2 + i], s = ns == 1 ? st[0] : ns == sp ? st[i] : -1;
        int64_t pd = np == 1 ? pad[0] : np == sp ? pad[i] : -1, dl = nd == 1 ? dil[0] : nd == sp ? dil[i] : -1;
        if (s < 0 || pd < 0 || dl < 0) return FAIL(c, "stride, padding and dilation need 1 or %d entries", sp);
        S[i] = s, P[i] = pd, D[i] = dl;
        if (s != k || pd != 0 || dl != 1 || groups != 1 || xv->shape[2 + i] % k || k > 4096) patch = 0;
        p[3 - sp + i] = (int)k;
    }
    if (!patch) { /* not a patch embedding: the general convolution (1-d and 2-d) */
        if (sp == 3) return FAIL(c, "3-d convolutions other than stride == kernel, no padding, one group are not supported yet");
        return al_lower_conv_im2col(c, x, w, b, sp, S, P, D, groups);
    }
    const int64_t B = xv->shape[0], C = xv->shape[1], O = wv->shape[0];
    if (wv->shape[1] != C) return FAIL(c, "weight in-channels %lld differ from the input's %lld", (long long)wv->shape[1], (long long)C);
    int x5 = x, id, wk, lin;
    if (sp == 2 && (rc = al_emit_view_to(c, x, 5, (int64_t[]){B, C, 1, xv->shape[2], xv->shape[3]}, &x5))) return rc;
    if (sp == 1 && (rc = al_emit_view_to(c, x, 5, (int64_t[]){B, C, 1, 1, xv->shape[2]}, &x5))) return rc;
    drift_op op;
    memset(&op, 0, sizeof op);
    memcpy(op.patch, p, sizeof p);
    op.layout = 1;
    if ((rc = al_emit(c, DRIFT_OP_PATCHIFY, &op, 1, &x5, DRIFT_RULE_LIKE_INPUT0, &id))) return rc;
    const int64_t K = wv->numel / O;
    /* [O, C, k...] -> [O, k..., C] -> [O, K] */
    drift_op pm;
    memset(&pm, 0, sizeof pm);
    pm.perm[0] = 0;
    for (int i = 0; i < sp; i++) pm.perm[1 + i] = 2 + i;
    pm.perm[1 + sp] = 1;
    if ((rc = al_emit(c, DRIFT_OP_PERMUTE, &pm, 1, &w, DRIFT_RULE_LIKE_INPUT0, &wk))) return rc;
    if ((rc = al_emit_view_to(c, wk, 2, (int64_t[]){O, K}, &wk))) return rc;
    int in[2] = {id, wk};
    drift_op lop; /* torch runs it in cuDNN: not under the recording's cuBLAS workspace */
    memset(&lop, 0, sizeof lop);
    lop.layout = DRIFT_LINEAR_CONV;
    if ((rc = al_emit(c, DRIFT_OP_LINEAR, &lop, 2, in, DRIFT_RULE_AUTOCAST_LOWER, &lin))) return rc;
    if (b >= 0) { /* cuDNN adds a convolution's bias in a separate op: two roundings */
        in[0] = lin, in[1] = b;
        if ((rc = al_emit(c, DRIFT_OP_ADD, NULL, 2, in, DRIFT_RULE_AUTOCAST_LOWER, &lin))) return rc;
    }
    aten_view lv;
    if ((rc = al_new_root(c, lin, &lv))) return rc;
    /* [B, L, O] -> [B, O, s0, s1(, s2)] */
    int64_t L = 1, sz[3];
    for (int i = 0; i < sp; i++) sz[i] = xv->shape[2 + i] / wv->shape[2 + i], L *= sz[i];
    aten_view o;
    memset(&o, 0, sizeof o);
    o.root = lv.root;
    o.nd = 2 + sp;
    o.size[0] = B, o.stride[0] = L * O;
    o.size[1] = O, o.stride[1] = 1;
    int64_t s = O;
    for (int i = sp - 1; i >= 0; i--) {
        o.size[2 + i] = sz[i];
        o.stride[2 + i] = s;
        s *= sz[i];
    }
    fxv *f = &c->fx[c->cur];
    f->kind = FX_TENSOR;
    f->t = o;
    return DRIFT_OK;
}

/* ---- creation, concatenation, in-place copy ---------------------------------------- */

int al_val_dtype(lctx *c, drift_dtype *dt) {
    const drift_json_value *v = al_cur_node(c)->val;
    const drift_json_value *d = v && v->type == DRIFT_JSON_OBJECT ? drift_json_object_get(v, "dtype") : NULL;
    int is_int;
    if (!d || d->type != DRIFT_JSON_STRING || al_parse_dtype(d->str, dt, &is_int))
        return FAIL(c, "'val' needs a supported dtype");
    return DRIFT_OK;
}

/* A complex fill of the logical shape (nd, sh): (value, 0) pairs of dtype part (fp32 for
 * complex64, fp64 for complex128), the pair a trailing dim of 2. */
static int lower_fill_complex(lctx *c, double value, drift_dtype pdt, int nd, const int64_t *sh) {
    if (nd >= DRIFT_MAX_DIMS) return FAIL(c, "a complex fill of %d dims", nd);
    int part[2], id, rc;
    for (int k = 0; k < 2; k++) {
        drift_node_spec s;
        drift_node_spec_init(&s, DRIFT_OP_FILL);
        s.op.scalar = k == 0 ? value : 0.0;
        s.rule = DRIFT_RULE_FIXED;
        s.rule_dtype = pdt;
        s.ndim = nd + 1;
        memcpy(s.shape, sh, sizeof(int64_t) * (size_t)nd);
        s.shape[nd] = 1;
        if ((rc = al_add_node(c, &s, &part[k]))) return rc;
    }
    drift_op op;
    memset(&op, 0, sizeof op);
    op.dim = nd;
    if ((rc = al_emit(c, DRIFT_OP_CONCAT, &op, 2, part, DRIFT_RULE_PROMOTE, &id))) return rc;
    return al_set_result_cplx(c, id);
}

int al_lower_fill(lctx *c, const char *base, const char *target) {
    (void)target;
    int rc, id;
    /* the size and the dtype (of the self of new_*) are the captured 'val', which the
     * lowered shape is checked against: taken, not ignored */
    (void)al_arg(c, -1, "dtype");
    if (!strncmp(base, "new_", 4)) (void)al_arg(c, 0, "self"), (void)al_arg(c, 1, "size");
    else if (!strcmp(base, "zeros") || !strcmp(base, "ones") || !strcmp(base, "full") || !strcmp(base, "empty"))
        (void)al_arg(c, 0, "size");
    drift_op op;
    memset(&op, 0, sizeof op);
    drift_dtype dt = DRIFT_F32;
    const char *vds = al_val_dtype_str(al_cur_node(c));
    const drift_dtype part = al_complex_part(vds);
    const int cplx = part != DRIFT_DTYPE_INVALID;
    if (!cplx && (rc = al_val_dtype(c, &dt))) return rc;
    if (cplx && !strcmp(base, "arange")) return FAIL(c, "a complex arange is not supported");
    if (!strcmp(base, "arange")) {
        double a = 0, b = 0, st = 1;
        const char *t = al_cur_node(c)->target;
        if (!strcmp(t, "aten.arange.default")) rc = al_get_num(c, al_arg(c, 0, "end"), "end", 0, &b);
        else {
            rc = al_get_num(c, al_arg(c, 0, "start"), "start", 0, &a);
            if (!rc) rc = al_get_num(c, al_arg(c, 1, "end"), "end", 0, &b);
            if (!rc && !strcmp(t, "aten.arange.start_step")) rc = al_get_num(c, al_arg(c, 2, "step"), "step", 1, &st);
        }
        if (rc) return rc;
        if (!(st != 0) || !isfinite(a) || !isfinite(b)) return FAIL(c, "arange needs finite bounds and a non-zero step");
        double n = ceil((b - a) / st);
        if (!(n >= 1) || n > (double)DRIFT_GRAPH_MAX_DIM) return FAIL(c, "arange of %g elements", n);
        op.sub = 1;
        op.scalar = a;
        op.step = st;
        drift_node_spec s;
        drift_node_spec_init(&s, DRIFT_OP_FILL);
        s.op = op;
        s.op.kind = DRIFT_OP_FILL;
        s.rule = DRIFT_RULE_FIXED;
        s.rule_dtype = dt;
        s.ndim = 1;
        s.shape[0] = (int64_t)n;
        if ((rc = al_add_node(c, &s, &id))) return rc;
        return al_set_result(c, id);
    }
    /* ones, ones_like and new_ones (whose name does not start with "ones": it filled zeros) */
    double value = !strncmp(base, "ones", 4) || !strcmp(base, "new_ones") ? 1.0 : 0.0;
    int like = !strcmp(base, "empty_like") || !strcmp(base, "zeros_like") || !strcmp(base, "ones_like") ||
               !strcmp(base, "full_like");
    if (!strcmp(base, "full") || !strcmp(base, "full_like") || !strcmp(base, "new_full") || !strcmp(base, "scalar_tensor")) {
        const int at = !strcmp(base, "new_full") ? 2 : !strcmp(base, "scalar_tensor") ? 0 : 1;
        if ((rc = al_get_num(c, al_arg(c, at, at ? "fill_value" : "s"), "fill_value", 0, &value))) return rc;
        if (value != value) return FAIL(c, "fill_value NaN is not supported");
    }
    if (cplx) { /* the shape: the input's for *_like (at the batch being lowered), else 'val' */
        int nd = 0, j = like ? al_ref_of(c, al_arg(c, 0, "self")) : -1;
        int64_t sh[DRIFT_MAX_DIMS];
        if (j >= 0 && c->fx[j].kind == FX_TENSOR) {
            nd = c->fx[j].t.nd;
            memcpy(sh, c->fx[j].t.size, sizeof(int64_t) * (size_t)nd);
        } else if ((rc = al_val_shape(c, al_cur_node(c)->val, &nd, sh))) {
            return rc;
        }
        al_rb_factory(c, nd, sh);
        if (cplx) return lower_fill_complex(c, value, part, nd, sh);
    }
    int given, is_int;
    drift_dtype kdt;
    if ((rc = al_get_dtype(c, al_arg(c, -1, "dtype"), "dtype", &given, &kdt, &is_int))) return rc;
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_FILL);
    s.op.scalar = value;
    if (like && !given) {
        int x;
        if ((rc = al_mat_arg(c, al_arg(c, 0, "self"), "self", &x))) return rc;
        s.op.n_in = 1;
        s.in[0] = x;
        s.rule = DRIFT_RULE_LIKE_INPUT0;
    } else {
        /* the value's shape from 'val' (a *_like's from its input); its dtype as captured */
        int nd, j = like ? al_ref_of(c, al_arg(c, 0, "self")) : -1;
        int64_t sh[DRIFT_MAX_DIMS];
        if (j >= 0 && c->fx[j].kind == FX_TENSOR && !c->fx[j].cplx) {
            nd = c->fx[j].t.nd;
            memcpy(sh, c->fx[j].t.size, sizeof(int64_t) * (size_t)nd);
        } else if ((rc = al_val_shape(c, al_cur_node(c)->val, &nd, sh))) {
            return rc;
        } else {
            al_rb_factory(c, nd, sh);
        }
        s.op.n_in = 0;
        s.rule = DRIFT_RULE_FIXED;
        s.rule_dtype = dt;
        s.ndim = nd ? nd : 1; /* a 0-d fill: one element, viewed as 0-d */
        memcpy(s.shape, sh, sizeof(int64_t) * (size_t)nd);
        if (nd == 0) s.shape[0] = 1;
        if ((rc = al_add_node(c, &s, &id))) return rc;
        if (nd == 0 && (rc = al_emit_view_to(c, id, 0, sh, &id))) return rc;
        return al_set_result(c, id);
    }
    if ((rc = al_add_node(c, &s, &id))) return rc;
    return al_set_result(c, id);
}

static int lower_cat(lctx *c, int stack) {
    const drift_json_value *list = al_arg(c, 0, "tensors");
    if (!list || list->type != DRIFT_JSON_ARRAY || list->n_items == 0) return FAIL(c, "tensors: expected a non-empty list");
    int64_t dim;
    int rc = al_get_int(c, al_arg(c, 1, "dim"), "dim", 0, &dim);
    if (rc) return rc;
    int acc = -1, cplx = -1, bdim = -1; /* re-batching: the batch dim of the operands that hold it */
    for (size_t i = 0; i < list->n_items && bdim < 0; i++) {
        int j = al_ref_of(c, &list->items[i]);
        if (j >= 0 && c->fx[j].kind == FX_TENSOR && c->fx[j].bax1) bdim = c->fx[j].bax1 - 1;
    }
    for (size_t i = 0; i < list->n_items; i++) {
        int x, xj = al_ref_of(c, &list->items[i]);
        if (xj >= 0 && c->fx[xj].kind == FX_EMPTY) continue; /* contributes nothing */
        int untagged = xj >= 0 && c->fx[xj].kind == FX_TENSOR && !c->fx[xj].bax1;
        if ((rc = al_mat_arg(c, &list->items[i], "tensors[]", &x))) return rc;
        if (cplx >= 0 && cplx != c->last_cplx) return FAIL(c, "cat of complex and real tensors");
        cplx = c->last_cplx;
        if (cplx && stack) return FAIL(c, "stack of complex tensors is not supported yet");
        const drift_value *v = drift_graph_value(c->out, x);
        if (stack) {
            int d = aten_view_dim(dim, v->ndim + 1);
            if (d < 0 || v->ndim >= DRIFT_MAX_DIMS) return FAIL(c, "stack dim %lld out of range", (long long)dim);
            int64_t sh[DRIFT_MAX_DIMS];
            int m = 0;
            for (int k = 0; k < v->ndim + 1; k++) sh[k] = k < d ? v->shape[k] : k == d ? 1 : v->shape[k - 1];
            m = v->ndim + 1;
            if ((rc = al_emit_view_to(c, x, m, sh, &x))) return rc;
            if ((rc = al_rb_align(c, &x, untagged, bdim >= 0 && d <= bdim ? bdim + 1 : bdim, d))) return rc;
        } else {
            const drift_value *xv = drift_graph_value(c->out, x);
            int cd = aten_view_dim(dim, xv->ndim - (c->last_cplx ? 1 : 0));
            if ((rc = al_rb_align(c, &x, untagged, bdim, cd))) return rc;
        }
        if (acc < 0) {
            acc = x;
            continue;
        }
        const drift_value *av = drift_graph_value(c->out, acc);
        drift_op op;
        memset(&op, 0, sizeof op);
        int d = aten_view_dim(dim, av->ndim - (cplx ? 1 : 0));
        if (d < 0) return FAIL(c, "cat dim %lld out of range", (long long)dim);
        op.dim = d;
        int in[2] = {acc, x};
        if ((rc = al_emit(c, DRIFT_OP_CONCAT, &op, 2, in, DRIFT_RULE_PROMOTE, &acc))) return rc;
    }
    if (acc < 0) /* its 'val' has values (an empty result is never lowered): not the program torch ran */
        return FAIL(c, "tensors: every operand is an empty tensor (a 0-size dim), and the result is not");
    return cplx ? al_set_result_cplx(c, acc) : al_set_result(c, acc);
}

/* Writes drift value src into FX tensor dj's view (its root gets a new version), as copy_
 * does: src broadcast to the view's shape and cast to the root's dtype. */
static int write_into_view(lctx *c, const aten_view *dstv, int src);

static int write_into(lctx *c, int dj, int src) { return write_into_view(c, &c->fx[dj].t, src); }

/* dst's view, src a drift value broadcasting to it; the result is dst's view. */
static int write_into_view(lctx *c, const aten_view *dstv, int src) {
    int rc;
    const aten_view dst = *dstv;
    root *r = &c->roots[dst.root];
    const drift_value *sv = drift_graph_value(c->out, src);
    /* src broadcasts to dst's shape */
    int same = sv->ndim == dst.nd;
    for (int i = 0; same && i < dst.nd; i++) same = sv->shape[i] == dst.size[i];
    if (!same) {
        aten_view sview, ex;
        if ((rc = al_new_root(c, src, &sview))) return rc;
        if (sview.nd > dst.nd) return FAIL(c, "src has more dims than the destination");
        ex = sview;
        ex.nd = dst.nd;
        for (int i = dst.nd - 1; i >= 0; i--) {
            int k = i - (dst.nd - sview.nd);
            if (k < 0) ex.size[i] = dst.size[i], ex.stride[i] = 0;
            else if (sview.size[k] == dst.size[i]) ex.size[i] = sview.size[k], ex.stride[i] = sview.stride[k];
            else if (sview.size[k] == 1) ex.size[i] = dst.size[i], ex.stride[i] = 0;
            else return FAIL(c, "src does not broadcast to the destination's shape");
        }
        if ((rc = al_mat_view(c, &ex, &src))) return rc;
    }
    int cast;
    if ((rc = al_emit_cast(c, src, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, r->cur, &cast))) return rc;
    int id;
    const drift_value *rv = drift_graph_value(c->out, r->cur);
    if (dst.off == 0 && aten_view_is_contig(&dst) && aten_view_numel(&dst) == rv->numel) {
        if ((rc = al_emit_view_to(c, cast, rv->ndim, rv->shape, &id))) return rc; /* the whole root is overwritten */
    } else {
        drift_node_spec s;
        drift_node_spec_init(&s, DRIFT_OP_SCATTER);
        s.op.n_in = 2;
        s.in[0] = r->cur;
        s.in[1] = cast;
        s.op.start = dst.off;
        memcpy(s.op.stride, dst.stride, sizeof(int64_t) * (size_t)dst.nd);
        s.rule = DRIFT_RULE_LIKE_INPUT0;
        if ((rc = al_add_node(c, &s, &id))) return rc;
    }
    r->cur = id;
    r->version++;
    return al_set_view(c, &dst); /* an in-place op returns its destination */
}

int al_lower_copy_(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int dj, rc, src;
    if ((rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &dj)) || (rc = al_mat_arg(c, al_arg(c, 1, "src"), "src", &src))) return rc;
    if (c->fx[dj].cplx || c->last_cplx) { /* complex into complex (ZImage's pad_sequence): the (re, im) pairs */
        if (!c->fx[dj].cplx || !c->last_cplx) return FAIL(c, "copy_ between a complex and a real tensor is not supported");
        aten_view d = c->fx[dj].t;
        if (d.nd >= DRIFT_MAX_DIMS) return FAIL(c, "copy_ of a complex tensor of %d dims", d.nd);
        d.size[d.nd] = 2, d.stride[d.nd] = 1, d.nd++;
        if ((rc = write_into_view(c, &d, src))) return rc;
        c->fx[c->cur].t = c->fx[dj].t; /* the result: self, complex */
        c->fx[c->cur].cplx = 1;
        return DRIFT_OK;
    }
    return write_into(c, dj, src);
}

/* X_ (in-place arithmetic, masked_fill_, ...): the functional X, then its result written
 * into self's storage (functionalization, done here). */
int al_lower_inplace(lctx *c, const char *base, const char *target) {
    char fbase[96], ftarget[160];
    size_t n = strlen(base);
    if (n < 2 || n >= sizeof fbase || base[n - 1] != '_') return FAIL(c, "internal: in-place %s", target);
    memcpy(fbase, base, n - 1);
    fbase[n - 1] = 0;
    const char *ov = strchr(target + 5, '.');
    snprintf(ftarget, sizeof ftarget, "aten.%s%s", fbase, ov ? ov : "");
    const aten_op_row *row = aten_registry_find(ftarget);
    if (!row) return FAIL(c, "unknown op '%s': the importer has no lowering for %s", target, ftarget);
    int dj, rc = al_tensor_arg(c, al_arg(c, 0, "self"), "self", &dj);
    if (rc || (rc = row->lower(c, fbase, ftarget))) return rc;
    int res;
    if ((rc = al_mat_fx(c, c->cur, &res))) return rc;
    return write_into(c, dj, res);
}

/* ---- dispatch -------------------------------------------------------------------- */

/* ---- small lowerings named by the registry --------------------------------------- */

int al_lower_nothing(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    c->fx[c->cur].kind = FX_NONE;
    return DRIFT_OK;
}

int al_lower_view_as_complex(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    return lower_complex_view(c, 1);
}

int al_lower_view_as_real(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    return lower_complex_view(c, 0);
}

int al_lower_cat(lctx *c, const char *base, const char *target) {
    (void)target;
    return lower_cat(c, !strcmp(base, "stack"));
}

/* mul of a complex tensor is the complex product; else the real one */
int al_lower_mul(lctx *c, const char *base, const char *target) {
    int ja = al_ref_of(c, al_arg(c, 0, "self"));
    if (!strcmp(target, "aten.mul.Tensor") && ja >= 0 && c->fx[ja].kind == FX_TENSOR && c->fx[ja].cplx)
        return lower_complex_mul(c);
    return al_lower_binary(c, base, target);
}

int al_lower_dropout(lctx *c, const char *base, const char *target) {
    double p;
    int64_t train;
    int rc;
    if ((rc = al_get_num(c, al_arg(c, 1, "p"), "p", 0.5, &p)) || (rc = al_get_int(c, al_arg(c, 2, "train"), "train", 1, &train)))
        return rc;
    if (train && p != 0.0) return FAIL(c, "dropout in training mode with p = %g cannot be replayed", p);
    return al_lower_alias(c, base, target);
}

/* Ops that move or reinterpret a complex tensor (every other op refuses complex operands). */
static int takes_complex(const char *base) {
    static const char *const ok[] = {"getitem", "index", "index_select", "view", "reshape", "_unsafe_view", "flatten", "unflatten", "unsqueeze", "squeeze",
                                     "permute", "transpose", "swapaxes", "expand", "slice", "select", "split_with_sizes",
                                     "split", "chunk", "unbind", "alias", "detach", "detach_", "lift_fresh_copy", "clone",
                                     "contiguous", "to", "_to_copy", "cat", "mul", "view_as_real", "view_as_complex", "polar",
                                     "copy_", "repeat", "gather", NULL};
    for (int i = 0; ok[i]; i++)
        if (!strcmp(base, ok[i])) return 1;
    return 0;
}

static int lower_call(lctx *c) {
    const char *t = al_cur_node(c)->target;
    char base[96];
    drift_aten_op_base(t, base, sizeof base);
    const aten_op_row *row = aten_registry_find(t);
    if (!row) return FAIL(c, "unknown op '%s': the importer has no lowering for it", t); /* listed up front */
    if (!takes_complex(base)) {
        const aten_node *n = al_cur_node(c);
        for (size_t k = 0; k < n->args->n_items; k++) {
            int a = al_ref_of(c, &n->args->items[k]);
            if (a >= 0 && c->fx[a].cplx) return FAIL(c, "complex operands are not supported by %s", t);
        }
    }
    c->args_read = c->kwargs_read = 0;
    int rc = row->lower(c, base, t);
    if (rc) return rc;
    return unread_args(c);
}

/* 1 if val is one tensor with a 0-size dim (and no negative one). */
static int val_is_empty(const drift_json_value *val) {
    const drift_json_value *sh = val && val->type == DRIFT_JSON_OBJECT ? drift_json_object_get(val, "shape") : NULL;
    if (!sh || sh->type != DRIFT_JSON_ARRAY) return 0;
    int zero = 0;
    for (size_t k = 0; k < sh->n_items; k++) {
        const drift_json_value *d = &sh->items[k];
        if (d->type != DRIFT_JSON_NUMBER || !d->is_int || d->integer < 0) return 0;
        zero |= d->integer == 0;
    }
    return zero;
}

/* The lowered shape must be the captured one (a hostile or inconsistent 'val'). */
static int check_val(lctx *c) {
    const fxv *f = &c->fx[c->cur];
    const drift_json_value *val = al_cur_node(c)->val;
    if (f->kind == FX_TENSOR) {
        int nd;
        int64_t sh[DRIFT_MAX_DIMS];
        int rc = al_val_shape(c, val, &nd, sh);
        if (rc) return rc;
        int bax1 = 0;
        if ((rc = al_rb_check(c, nd, sh, f->t.nd, f->t.size, &bax1))) {
            if (!al_rb_ragged(c)) return rc;
            drift_err_clear(c->err); /* a size that follows the data (a re-counted nonzero): not the batch */
            c->fx[c->cur].ragged = 1;
            bax1 = 0;
            if (c->rb_dims_out) c->rb_dims_out[c->cur] = 0;
        }
        c->fx[c->cur].bax1 = bax1;
    }
    if (f->kind == FX_MULTI) {
        if (c->rb_from && val && val->type == DRIFT_JSON_ARRAY && (int)val->n_items != f->n_multi)
            return al_rb_multi_count(c, (int)val->n_items, f->n_multi);
        if (!val || val->type != DRIFT_JSON_ARRAY || (int)val->n_items != f->n_multi)
            return FAIL(c, "shape mismatch: 'val' must list %d tensors", f->n_multi);
        for (int k = 0; k < f->n_multi; k++) {
            if (f->multi[k].root < 0) continue; /* not a tensor drift gives (native_group_norm's mean) */
            int nd;
            int64_t sh[DRIFT_MAX_DIMS];
            int rc = al_val_shape(c, &val->items[k], &nd, sh);
            if (rc) return rc;
            if ((rc = al_rb_check(c, nd, sh, f->multi[k].nd, f->multi[k].size, NULL))) {
                if (al_rb_ragged(c)) {
                    drift_err_clear(c->err);
                    c->fx[c->cur].ragged = 1;
                    continue;
                }
                drift_err_prefix(c->err, "output %d: ", k);
                return rc;
            }
        }
    }
    return DRIFT_OK;
}

/* ---- sites ---------------------------------------------------------------------- */

static int in_stack(const drift_json_value *stack, const char *m) {
    for (size_t k = 0; stack && k < stack->n_items; k++)
        if (!strcmp(stack->items[k].str, m)) return 1;
    return 0;
}

/* Per module: the last node (in graph order) whose value is used outside it,
 * and the distinct values that escape it once a use of a no-op cast is
 * resolved as the lowering resolves it: several of them mean a module that
 * returns several tensors, rather than one output plus the aliases of its
 * input that FP32LayerNorm's `x.float()` leaves behind. */
#define MODLAST_VALUES 8 /* SD3's AdaLayerNormZero returns 5 */
typedef struct modlast {
    const char *module;
    int node;
    int values[MODLAST_VALUES]; /* resolved escaping values, in first-use order */
    int n_values;               /* > MODLAST_VALUES: more than were kept */
    int run_s, run_e;           /* the module's first call: its first run of consecutive call nodes */
    int run_closed;             /* a call node outside the module came after that run */
} modlast;

static modlast *modlast_get(modlast *ml, int *nml, int cap, const char *m) {
    for (int q = 0; q < *nml; q++)
        if (!strcmp(ml[q].module, m)) return &ml[q];
    if (*nml >= cap) return NULL;
    modlast *e = &ml[(*nml)++];
    e->module = m;
    e->node = -1;
    e->n_values = 0;
    e->run_s = e->run_e = -1;
    e->run_closed = 0;
    return e;
}

/* Node i, used by node u (c->cur), escapes each module of its stack that is not
 * in u's stack (user_stack: NULL for the output node), or whose first call
 * ended before u. Only the first call counts: a module called several times
 * in a step (Helios' timesteps_proj on zeros, then on the timestep;
 * CogVideoX's norm on the video, then on the text stream) has its site
 * recorded with call_index 0 first, and that record is the one a replay
 * compares with. */
static void mark_escape(lctx *c, int i, const drift_json_value *user_stack, modlast *ml, int *nml, int cap) {
    const drift_aten_graph *g = c->g;
    int r = c->fx[i].kind == FX_TENSOR ? al_resolve_alias(c, i, 0) : i;
    const drift_json_value *s = g->nodes[i].stack, *rs = g->nodes[r].stack;
    for (size_t k = 0; s && k < s->n_items; k++) {
        const char *m = s->items[k].str;
        if (!*m) continue;
        modlast *e = modlast_get(ml, nml, cap, m);
        if (!e) continue;
        if (e->run_s >= 0 && (i < e->run_s || i > e->run_e)) continue; /* a later call's value */
        if (in_stack(user_stack, m) && (e->run_s < 0 || c->cur <= e->run_e)) continue;
        if (i > e->node) e->node = i;
        if (!c->live[r] || c->fx[r].kind != FX_TENSOR || !in_stack(rs, m)) continue; /* an alias of a value from outside */
        int seen = 0;
        for (int q = 0; q < e->n_values && q < MODLAST_VALUES; q++) seen |= e->values[q] == r;
        if (seen) continue;
        if (e->n_values < MODLAST_VALUES) e->values[e->n_values] = r;
        e->n_values++;
    }
}

static void scan_refs(lctx *c, const drift_json_value *v, const drift_json_value *user_stack, modlast *ml, int *nml,
                      int cap) {
    if (v->type == DRIFT_JSON_ARRAY) {
        for (size_t k = 0; k < v->n_items; k++) scan_refs(c, &v->items[k], user_stack, ml, nml, cap);
    } else if (al_node_ref(v)) {
        int i = aten_find(c->g, v->members[0].value.str);
        if (i >= 0) mark_escape(c, i, user_stack, ml, nml, cap);
    } else if (v->type == DRIFT_JSON_OBJECT) {
        for (size_t k = 0; k < v->n_members; k++) scan_refs(c, &v->members[k].value, user_stack, ml, nml, cap);
    }
}

/* Appends one line to *notes (NULL: not wanted); an allocation failure drops the note. */
static void add_note(char **notes, const char *line) {
    if (!notes) return;
    size_t a = *notes ? strlen(*notes) : 0, b = strlen(line);
    char *p = drift_realloc(*notes, a + b + 2);
    if (!p) return;
    memcpy(p + a, line, b);
    p[a + b] = '\n';
    p[a + b + 1] = 0;
    *notes = p;
}

/* 1 if FX node j's val has the shape (ndim, shape). */
static int val_has_shape(const aten_node *n, int ndim, const int64_t *shape) {
    const drift_json_value *sh = n->val && n->val->type == DRIFT_JSON_OBJECT ? drift_json_object_get(n->val, "shape") : NULL;
    if (!sh || sh->type != DRIFT_JSON_ARRAY || (int)sh->n_items != ndim) return 0;
    for (int d = 0; d < ndim; d++)
        if (sh->items[d].type != DRIFT_JSON_NUMBER || !sh->items[d].is_int || sh->items[d].integer != shape[d]) return 0;
    return 1;
}

/* 1 if FX nodes a and b have vals of one shape. */
static int same_val_shape(const aten_node *a, const aten_node *b) {
    const drift_json_value *sa = a->val && a->val->type == DRIFT_JSON_OBJECT ? drift_json_object_get(a->val, "shape") : NULL;
    const drift_json_value *sb = b->val && b->val->type == DRIFT_JSON_OBJECT ? drift_json_object_get(b->val, "shape") : NULL;
    if (!sa || !sb || sa->type != DRIFT_JSON_ARRAY || sb->type != DRIFT_JSON_ARRAY || sa->n_items != sb->n_items) return 0;
    for (size_t d = 0; d < sa->n_items; d++)
        if (sa->items[d].type != DRIFT_JSON_NUMBER || sb->items[d].type != DRIFT_JSON_NUMBER ||
            sa->items[d].integer != sb->items[d].integer)
            return 0;
    return 1;
}

/* Node j, which a later call of module e computed (the capture's module_outputs
 * names the last call's tensors), as its twin in the first call: the node at the
 * same call-node offset from the start of its run, when that node has j's target
 * and shape; else -1. */
static int first_call_twin(lctx *c, const modlast *e, int j) {
    const drift_aten_graph *g = c->g;
    int off = 0; /* call nodes of the module before j in j's run */
    for (int p = j - 1; p > e->run_e; p--) {
        if (g->nodes[p].op != ATEN_CALL) continue;
        if (!in_stack(g->nodes[p].stack, e->module)) break;
        off++;
    }
    int q = e->run_s;
    for (int k = 0; k < off && q <= e->run_e; q++)
        if (g->nodes[q].op == ATEN_CALL) k += 1;
    while (q <= e->run_e && g->nodes[q].op != ATEN_CALL) q++;
    if (q > e->run_e || strcmp(g->nodes[q].target, g->nodes[j].target) || !same_val_shape(&g->nodes[q], &g->nodes[j]))
        return -1;
    return c->live[q] && c->fx[q].kind == FX_TENSOR ? q : -1;
}

/* The node whose value M:out is, or -1 (with a note when the site matters):
 * what the Recorder recorded is the first tensor of M's output.
 *  1. The capture's "module_outputs" names it for a module that returned
 *     several tensors.
 *  2. Without an entry, when one value escapes M (or the capture wrote
 *     module_outputs and M is not in it: it returned one tensor), the last
 *     escaping node is M's output.
 *  3. Otherwise (an older capture, or an entry whose first tensor the capture
 *     could not match) the escaping value with the shape the trace recorded
 *     for M:out, when exactly one has it.
 * Else nothing says which value was recorded: the site is left unmapped. */
static int site_node(lctx *c, const modlast *e, const drift_aten_lower_opts *o) {
    const drift_json_value *mo = c->g->module_outputs;
    const drift_json_value *a = mo ? drift_json_object_get(mo, e->module) : NULL;
    char line[DRIFT_MAX_FQN * 2 + 400], why[DRIFT_MAX_FQN + 200];
    if (a) {
        const drift_json_value *f = &a->items[0];
        int j = f->type == DRIFT_JSON_STRING ? aten_find(c->g, f->str) : -1;
        if (j >= 0 && e->run_s >= 0 && j > e->run_e) { /* a later call's tensor: its twin in the first call */
            int q = first_call_twin(c, e, j);
            if (q >= 0) return q;
            snprintf(line, sizeof line, "%s:out not mapped: module '%s' ran more than once and the capture names "
                     "'%s' of a later call, with no twin in the first call (the recorded one)", e->module, e->module,
                     f->str);
            if (o) add_note(o->notes, line);
            return -1;
        }
        if (j >= 0 && c->live[j] && c->fx[j].kind == FX_TENSOR) return j;
        if (j < 0)
            snprintf(why, sizeof why, "returns %zu tensors and the capture did not match the first one to a graph node",
                     a->n_items);
        else
            snprintf(why, sizeof why, "returns %zu tensors and the capture names '%s' as the first, which is not a "
                     "tensor the graph computes", a->n_items, f->str);
    } else {
        if (e->n_values <= 1 || mo) return e->node;
        snprintf(why, sizeof why, "returns %d tensors and the graph does not say which one the recorder recorded "
                 "(captured before module_outputs: recapture to compare it)", e->n_values);
    }
    char site[DRIFT_MAX_FQN + 8];
    snprintf(site, sizeof site, "%s:out", e->module);
    int64_t shape[DRIFT_MAX_DIMS];
    int ndim = 0;
    if (o && o->recorded_shape) {
        if (!o->recorded_shape(o->user, site, &ndim, shape)) return -1; /* not recorded: nothing to compare, no note */
        int hit = -1, hits = 0;
        for (int q = 0; q < e->n_values && e->n_values <= MODLAST_VALUES; q++)
            if (val_has_shape(&c->g->nodes[e->values[q]], ndim, shape)) hit = e->values[q], hits++;
        if (hits == 1) return hit; /* the only one of the recorded shape */
        snprintf(line, sizeof line, "%s not mapped: module '%s' %s; %d of them have the recorded shape", site,
                 e->module, why, hits);
    } else {
        snprintf(line, sizeof line, "%s not mapped: module '%s' %s", site, e->module, why);
    }
    if (o) add_note(o->notes, line);
    return -1;
}

/* *out: a new node aliasing value id (a VIEW; a STRIDED copy for a 0-d value), so that one
 * value can carry a second site or be the output. */
static int alias_node(lctx *c, int id, int *out) {
    const drift_value *v = drift_graph_value(c->out, id);
    drift_node_spec s;
    drift_node_spec_init(&s, v->ndim == 0 ? DRIFT_OP_STRIDED : DRIFT_OP_VIEW);
    s.op.n_in = 1;
    s.in[0] = id;
    s.rule = DRIFT_RULE_LIKE_INPUT0;
    s.ndim = v->ndim;
    memcpy(s.shape, v->shape, sizeof s.shape);
    return al_add_node(c, &s, out);
}

/* Site `site` on drift value id: on the value itself, or on an alias of it when the value
 * already has a site (one value, two modules: a dropout after a linear). */
static int site_on(lctx *c, int id, const char *site) {
    int rc;
    if (drift_graph_value(c->out, id)->site && (rc = alias_node(c, id, &id))) return rc;
    drift_err inner;
    drift_err_clear(&inner);
    if (drift_graph_set_site(c->out, id, site, &inner)) return FAIL(c, "%s", inner.msg);
    return DRIFT_OK;
}

/* DRIFT_NODE_SITES=1 (a debugging aid: drift_recorder.node_parity): every FX tensor node's value,
 * as it is right after the node, becomes site "fx:NAME" (views materialised). Such sites are in
 * no trace: replay compares nothing there, and DRIFT_NODE_DUMP (replay_step.c) writes them out. */
static int node_site(lctx *c) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("DRIFT_NODE_SITES");
        on = e && *e && strcmp(e, "0") != 0;
    }
    if (!on || c->fx[c->cur].kind != FX_TENSOR) return DRIFT_OK;
    int id, rc;
    if ((rc = al_mat_fx(c, c->cur, &id))) return rc;
    char site[DRIFT_MAX_FQN + 8];
    snprintf(site, sizeof site, "fx:%s", c->g->nodes[c->cur].name);
    if (drift_graph_find_site(c->out, site) >= 0) return DRIFT_OK;
    return site_on(c, id, site);
}

static int add_sites(lctx *c, const drift_aten_lower_opts *o) {
    const drift_aten_graph *g = c->g;
    int cap = g->n * 2 + 16, nml = 0, rc = DRIFT_OK;
    modlast *ml = drift_malloc((size_t)cap * sizeof *ml);
    if (!ml) return drift_err_set(c->err, DRIFT_E_NOMEM, "aten", "out of memory");
    /* each module's first call: its first run of consecutive call nodes */
    for (int j = 0, prev = -1; j < g->n; j++) {
        const aten_node *n = &g->nodes[j];
        if (n->op != ATEN_CALL) continue;
        for (size_t k = 0; n->stack && k < n->stack->n_items; k++) {
            const char *m = n->stack->items[k].str;
            modlast *e = *m ? modlast_get(ml, &nml, cap, m) : NULL;
            if (!e || e->run_closed) continue;
            if (e->run_s < 0) e->run_s = e->run_e = j;
            else if (e->run_e == prev) e->run_e = j;
            else e->run_closed = 1;
        }
        prev = j;
    }
    for (int j = 0; j < g->n; j++) {
        const aten_node *n = &g->nodes[j];
        const drift_json_value *us = n->op == ATEN_OUTPUT ? NULL : n->stack;
        c->cur = j; /* the use, for resolve_alias */
        scan_refs(c, n->args, us, ml, &nml, cap);
        if (n->kwargs) scan_refs(c, n->kwargs, us, ml, &nml, cap);
    }
    for (int q = 0; q < nml && !rc; q++) {
        if (ml[q].node < 0 || c->fx[ml[q].node].kind != FX_TENSOR) continue;
        int i = site_node(c, &ml[q], o);
        if (i < 0) continue;
        c->cur = i;
        int id = c->fx[i].first_id;
        if (id < 0 && (rc = al_mat_fx(c, i, &id))) break;
        char site[DRIFT_MAX_FQN + 8];
        snprintf(site, sizeof site, "%s:out", ml[q].module);
        if (drift_graph_find_site(c->out, site) >= 0) continue;
        rc = site_on(c, id, site);
    }
    drift_free(ml);
    return rc;
}

/* ---- liveness ------------------------------------------------------------------- */

static void mark_refs(const drift_aten_graph *g, const drift_json_value *v, unsigned char *live) {
    if (v->type == DRIFT_JSON_ARRAY) {
        for (size_t k = 0; k < v->n_items; k++) mark_refs(g, &v->items[k], live);
    } else if (al_node_ref(v)) {
        int i = aten_find(g, v->members[0].value.str);
        if (i >= 0) live[i] = 1;
    } else if (v->type == DRIFT_JSON_OBJECT) {
        for (size_t k = 0; k < v->n_members; k++) mark_refs(g, &v->members[k].value, live);
    }
}

/* Nodes whose value reaches the output, and in-place ops (their effect is on
 * their destination's storage, which the output may read) with their inputs:
 * dead code (a mask's sequence length computed but unused, a last block's
 * context stream) is not lowered. */
/* Live nodes: those the output or an in-place op needs; a node read from its
 * recorded device value (dv) needs nothing upstream. */
static void compute_live(const drift_aten_graph *g, int dv, unsigned char *live) {
    for (int i = g->n - 1; i >= 0; i--) {
        const aten_node *n = &g->nodes[i];
        /* an in-place op of any overload (fill_.Tensor, add_.Tensor: the op name ends in '_'),
         * not only *_.default: Lumina2's position ids are fill_.Tensor writes into views */
        char b[96];
        size_t bl = strlen(drift_aten_op_base(n->target, b, sizeof b));
        int inplace = n->op == ATEN_CALL && !strncmp(n->target, "aten.", 5) && bl > 1 && b[bl - 1] == '_' &&
                      strcmp(b, "detach_");
        if (n->op == ATEN_OUTPUT || n->op == ATEN_PLACEHOLDER || inplace) live[i] = 1;
        if (!live[i] || (dv && g->device_value && g->device_value[i])) continue;
        mark_refs(g, n->args, live);
        if (n->kwargs) mark_refs(g, n->kwargs, live);
    }
}

/* ---- entry ---------------------------------------------------------------------- */

/* Every op of the live graph that the registry lacks, at once: "N ops drift cannot run:
 * TARGET x COUNT (first in 'MODULE', node NAME), ..." (DRIFT_E_INPUT), or OK. */
static int unknown_ops(const drift_aten_graph *g, const unsigned char *live, int dv, drift_err *err) {
    enum { MAX_LISTED = 64 };
    const char *tg[MAX_LISTED];
    int cnt[MAX_LISTED], first[MAX_LISTED], n = 0, more = 0;
    for (int i = 0; i < g->n; i++) {
        const aten_node *nd = &g->nodes[i];
        if (nd->op != ATEN_CALL || !live[i] || (dv && g->device_value && g->device_value[i])) continue;
        if (!nd->is_attr && aten_registry_find(nd->target)) continue;
        int k = 0;
        while (k < n && (strcmp(tg[k], nd->target) || g->nodes[first[k]].is_attr != nd->is_attr)) k++;
        if (k == n) {
            if (n == MAX_LISTED) {
                more++;
                continue;
            }
            tg[n] = nd->target, cnt[n] = 0, first[n] = i, n++;
        }
        cnt[k]++;
    }
    if (n == 0) return DRIFT_OK;
    char msg[sizeof err->msg - 300]; /* room for the source prefix */
    int len = snprintf(msg, sizeof msg, "%d op%s drift cannot run (docs/aten-graph.md lists the opset): ", n + more,
                       n + more == 1 ? "" : "s");
    for (int k = 0; k < n && len > 0 && (size_t)len < sizeof msg; k++) {
        const aten_node *f = &g->nodes[first[k]];
        len += snprintf(msg + len, sizeof msg - (size_t)len, "%s%s%s%s x%d (first in '%s', node %s)", k ? ", " : "",
                        f->is_attr ? "get_attr '" : "", tg[k], f->is_attr ? "' (a higher-order op's part)" : "", cnt[k],
                        f->module, f->name);
    }
    if (more && len > 0 && (size_t)len < sizeof msg) snprintf(msg + len, sizeof msg - (size_t)len, ", and %d more", more);
    return drift_err_set(err, DRIFT_E_INPUT, g->source, "%s", msg);
}

int drift_aten_graph_lower(const drift_aten_graph *g, drift_graph **out, drift_err *err) {
    return drift_aten_graph_lower_ex(g, NULL, out, err);
}

int drift_aten_graph_lower_ex(const drift_aten_graph *g, const drift_aten_lower_opts *o, drift_graph **out,
                              drift_err *err) {
    if (!g || !out) return drift_err_set(err, DRIFT_E_INTERNAL, "aten", "drift_aten_graph_lower: NULL argument");
    *out = NULL;
    char **notes = o ? o->notes : NULL;
    if (notes) *notes = NULL;
    lctx c;
    memset(&c, 0, sizeof c);
    c.g = g;
    c.err = err;
    if (o && o->rebatch_from > 0 && o->rebatch_to > 0) {
        if (o->rebatch_to > DRIFT_GRAPH_MAX_DIM)
            return drift_err_set(err, DRIFT_E_USAGE, "aten", "batch %lld out of range", (long long)o->rebatch_to);
        c.rb_from = o->rebatch_from;
        c.rb_to = o->rebatch_to;
        c.rb_dims_out = o->batch_dims_out;
        c.rb_dims_in = o->batch_dims_in;
        c.rb_lead = o->batch_lead;
        c.rb_nz = o->nonzero_counts;
    }
    if (o && o->failed_node) *o->failed_node = -1;
    int rc = drift_graph_create(0, &c.out, err);
    if (rc) return rc;
    c.fx = drift_calloc((size_t)g->n, sizeof *c.fx);
    c.live = drift_calloc((size_t)g->n, 1);
    c.child = drift_calloc((size_t)g->n, sizeof *c.child);
    c.child_at = drift_calloc((size_t)g->n, sizeof *c.child_at);
    if (!c.fx || !c.live || !c.child || !c.child_at) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, "aten", "out of memory");
        goto done;
    }
    const int dv = !(o && o->compute_device_values);
    compute_live(g, dv, c.live);
    if ((rc = unknown_ops(g, c.live, dv, err))) goto done;
    find_children(&c);
    char model[256];
    snprintf(model, sizeof model, "captured:%s", drift_aten_graph_model_class(g));
    if ((rc = drift_graph_set_model(c.out, model, err))) goto done;
    for (int i = 0; i < g->n && !rc; i++) {
        c.cur = i;
        c.fx[i].mat_id = c.fx[i].first_id = -1;
        const aten_node *n = &g->nodes[i];
        if (n->op == ATEN_OUTPUT) break;
        if (!c.live[i]) continue; /* FX_NONE */
        if ((n->op == ATEN_CALL || n->op == ATEN_PLACEHOLDER) && val_is_empty(n->val)) { /* no values to compute or read */
            c.fx[i].kind = FX_EMPTY;
            continue;
        }
        if (dv && g->device_value && g->device_value[i]) rc = lower_device_value(&c, g->device_value[i]);
        else rc = n->op == ATEN_PLACEHOLDER ? lower_placeholder(&c) : lower_call(&c);
        if (!rc && n->op == ATEN_CALL) rc = check_val(&c);
        if (!rc) rc = node_site(&c);
    }
    if (rc) goto done;
    /* the first output */
    c.cur = g->output;
    const drift_json_value *first = &g->nodes[g->output].args->items[0].items[0];
    int oj = al_ref_of(&c, first), oid;
    if (oj < 0 || c.fx[oj].kind != FX_TENSOR) {
        rc = FAIL(&c, "the first output is not a tensor");
        goto done;
    }
    if ((rc = al_mat_fx(&c, oj, &oid))) goto done;
    if ((rc = add_sites(&c, o))) goto done;
    c.cur = g->output;
    if ((drift_graph_value(c.out, oid)->site || drift_graph_value(c.out, oid)->kind != DRIFT_VAL_NODE) &&
        (rc = alias_node(&c, oid, &oid)))
        goto done;
    drift_err inner;
    drift_err_clear(&inner);
    if (drift_graph_set_site(c.out, oid, "output:noise_pred", &inner) || drift_graph_set_output(c.out, oid, &inner))
        rc = FAIL(&c, "%s", inner.msg);
done:
    if (rc && o && o->failed_node) *o->failed_node = c.cur;
    for (int i = 0; c.fx && i < g->n; i++) drift_free(c.fx[i].multi);
    drift_free(c.fx);
    drift_free(c.live);
    drift_free((void *)c.child);
    drift_free(c.child_at);
    drift_free(c.roots);
    drift_free(c.routed);
    if (rc) {
        drift_graph_free(c.out);
        if (notes) {
            drift_free(*notes);
            *notes = NULL;
        }
        return rc;
    }
    *out = c.out;
    return DRIFT_OK;
}
