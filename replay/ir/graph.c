/* Graph IR: construction, validation, accessors, equality (graph.h).
 * JSON lives in graph_json.c and builds graphs through the same validated
 * adding functions. */
#include "replay/ir/graph.h"

#include "formats/alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/plan.h" /* DRIFT_INPUT_* */

/* ---- a small string-keyed hash index (open addressing, FNV-1a) ---------- */

typedef struct strindex {
    int *slots;        /* value ids, -1 empty */
    size_t cap;        /* power of two */
    size_t n;
} strindex;

static uint64_t fnv1a(const char *s, unsigned salt) {
    uint64_t h = 1469598103934665603ull ^ salt;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

struct drift_graph {
    int assigned;
    drift_value *vals;
    int n, cap;
    int output;
    char *model;
    strindex leaves;   /* key: kind + name */
    strindex sites;    /* key: site */
};

static const char *index_key(const drift_graph *g, int id, int sites) {
    return sites ? g->vals[id].site : g->vals[id].name;
}

/* Finds the slot for (kind, key): returns the id stored there or -1 (and
 * *slot receives the free slot). For sites, kind is ignored. */
static int index_lookup(const drift_graph *g, const strindex *ix, int sites, drift_value_kind kind, const char *key,
                        size_t *slot) {
    if (!ix->cap) return -1;
    size_t mask = ix->cap - 1, i = (size_t)fnv1a(key, sites ? 0u : (unsigned)kind + 1u) & mask;
    for (;;) {
        int id = ix->slots[i];
        if (id < 0) {
            if (slot) *slot = i;
            return -1;
        }
        if ((sites || g->vals[id].kind == kind) && strcmp(index_key(g, id, sites), key) == 0) {
            if (slot) *slot = i;
            return id;
        }
        i = (i + 1) & mask;
    }
}

static int index_insert(drift_graph *g, strindex *ix, int sites, int id) {
    if ((ix->n + 1) * 2 > ix->cap) {
        size_t ncap = ix->cap ? ix->cap * 2 : 64;
        int *ns = drift_malloc(ncap * sizeof *ns);
        if (!ns) return -1;
        for (size_t i = 0; i < ncap; i++) ns[i] = -1;
        strindex nx = {ns, ncap, 0};
        for (size_t i = 0; i < ix->cap; i++) {
            int old = ix->slots[i];
            if (old < 0) continue;
            size_t s = 0;
            index_lookup(g, &nx, sites, g->vals[old].kind, index_key(g, old, sites), &s);
            nx.slots[s] = old;
            nx.n++;
        }
        drift_free(ix->slots);
        *ix = nx;
    }
    size_t s = 0;
    index_lookup(g, ix, sites, g->vals[id].kind, index_key(g, id, sites), &s);
    ix->slots[s] = id;
    ix->n++;
    return 0;
}

/* ---- names ---------------------------------------------------------------- */

static const char *const op_names[DRIFT_OP_COUNT] = {
    [DRIFT_OP_CAST] = "cast",           [DRIFT_OP_LINEAR] = "linear",
    [DRIFT_OP_ADD] = "add",             [DRIFT_OP_SUB] = "sub",
    [DRIFT_OP_MUL] = "mul",             [DRIFT_OP_AFFINE] = "affine",
    [DRIFT_OP_SILU] = "silu",           [DRIFT_OP_GELU_TANH] = "gelu_tanh",
    [DRIFT_OP_LAYER_NORM] = "layer_norm", [DRIFT_OP_RMS_NORM] = "rms_norm",
    [DRIFT_OP_ROPE] = "rope",           [DRIFT_OP_ATTENTION] = "attention",
    [DRIFT_OP_PERMUTE] = "permute",     [DRIFT_OP_NARROW] = "narrow",
    [DRIFT_OP_CONCAT] = "concat",       [DRIFT_OP_VIEW] = "view",
    [DRIFT_OP_PATCHIFY] = "patchify",   [DRIFT_OP_UNPATCHIFY] = "unpatchify",
    [DRIFT_OP_TIMESTEP_SINUSOID] = "timestep_sinusoid",
    [DRIFT_OP_UNARY] = "unary",         [DRIFT_OP_SCALAR] = "scalar",
    [DRIFT_OP_DIV] = "div",             [DRIFT_OP_REDUCE] = "reduce",
    [DRIFT_OP_STRIDED] = "strided",     [DRIFT_OP_SCATTER] = "scatter",
    [DRIFT_OP_FILL] = "fill",
    [DRIFT_OP_BINARY] = "binary",       [DRIFT_OP_WHERE] = "where",
    [DRIFT_OP_TAKE] = "take",           [DRIFT_OP_PUT] = "put",
    [DRIFT_OP_ARGSORT] = "argsort",     [DRIFT_OP_CUMSUM] = "cumsum",
    [DRIFT_OP_SOFTMAX] = "softmax",     [DRIFT_OP_BMM] = "bmm",
    [DRIFT_OP_GROUP_NORM] = "group_norm", [DRIFT_OP_NONZERO] = "nonzero",
};

static const char *const rule_names[DRIFT_RULE_COUNT] = {
    [DRIFT_RULE_NONE] = "none",
    [DRIFT_RULE_AUTOCAST_LOWER] = "autocast_lower",
    [DRIFT_RULE_AUTOCAST_FP32] = "autocast_fp32",
    [DRIFT_RULE_PROMOTE] = "promote",
    [DRIFT_RULE_LIKE_INPUT0] = "like_input0",
    [DRIFT_RULE_RMS_NORM] = "rms_norm",
    [DRIFT_RULE_CAST_TO] = "cast_to",
    [DRIFT_RULE_TYPE_AS] = "type_as",
    [DRIFT_RULE_INPUT_POLICY] = "input_policy",
    [DRIFT_RULE_FIXED] = "fixed",
    [DRIFT_RULE_HALF_AS] = "half_as",
};

static const char *const kind_names[] = {"param", "buffer", "input", "node"};
static const char *const origin_names[DRIFT_ORIGIN_COUNT] = {"model", "param_cast", "autocast", "promote"};
static const char *const input_names[DRIFT_INPUT_COUNT] = {"latents", "cond", "timestep"};

const char *drift_graph_op_name(drift_op_kind k) {
    return ((int)k >= 0 && k < DRIFT_OP_COUNT) ? op_names[k] : "?";
}
drift_op_kind drift_graph_op_parse(const char *s) {
    for (int k = 0; s && k < DRIFT_OP_COUNT; k++)
        if (strcmp(s, op_names[k]) == 0) return (drift_op_kind)k;
    return DRIFT_OP_COUNT;
}
const char *drift_graph_rule_name(drift_dtype_rule r) {
    return ((int)r >= 0 && r < DRIFT_RULE_COUNT) ? rule_names[r] : "?";
}
drift_dtype_rule drift_graph_rule_parse(const char *s) {
    if (s && strcmp(s, "rms_norm_promote") == 0) return DRIFT_RULE_RMS_NORM; /* its name before torch 2.11's rule */
    for (int r = 0; s && r < DRIFT_RULE_COUNT; r++)
        if (strcmp(s, rule_names[r]) == 0) return (drift_dtype_rule)r;
    return DRIFT_RULE_COUNT;
}
const char *drift_graph_kind_name(drift_value_kind k) {
    return ((int)k >= 0 && k <= DRIFT_VAL_NODE) ? kind_names[k] : "?";
}
const char *drift_graph_origin_name(drift_node_origin o) {
    return ((int)o >= 0 && o < DRIFT_ORIGIN_COUNT) ? origin_names[o] : "?";
}
const char *drift_graph_input_name(int input) {
    return (input >= 0 && input < DRIFT_INPUT_COUNT) ? input_names[input] : "?";
}
int drift_graph_input_parse(const char *s) {
    for (int i = 0; s && i < DRIFT_INPUT_COUNT; i++)
        if (strcmp(s, input_names[i]) == 0) return i;
    return -1;
}

/* ---- lifecycle -------------------------------------------------------------- */

void drift_node_spec_init(drift_node_spec *s, drift_op_kind kind) {
    memset(s, 0, sizeof *s);
    s->op.kind = kind;
    for (int i = 0; i < DRIFT_OP_MAX_IN; i++) s->in[i] = -1;
    s->rule_ref = -1;
    s->sem_id = -1;
}

int drift_graph_create(int assigned, drift_graph **out, drift_err *err) {
    if (!out) return drift_err_set(err, DRIFT_E_INTERNAL, "graph", "drift_graph_create: out is NULL");
    *out = drift_calloc(1, sizeof **out);
    if (!*out) return drift_err_set(err, DRIFT_E_NOMEM, "graph", "out of memory creating a graph");
    (*out)->assigned = assigned ? 1 : 0;
    (*out)->output = -1;
    return DRIFT_OK;
}

void drift_graph_free(drift_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n; i++) {
        drift_free((char *)g->vals[i].name);
        drift_free((char *)g->vals[i].site);
    }
    drift_free(g->vals);
    drift_free(g->model);
    drift_free(g->leaves.slots);
    drift_free(g->sites.slots);
    drift_free(g);
}

/* ---- validation helpers ------------------------------------------------------ */

static int valid_dtype(drift_dtype d) { return drift_dtype_is_float(d) || drift_dtype_is_int(d); }

static int check_name(const char *what, const char *s, drift_err *err) {
    if (!s || !*s) return drift_err_set(err, DRIFT_E_INPUT, "graph", "%s: expected a non-empty name", what);
    size_t n = strlen(s);
    if (n >= DRIFT_MAX_FQN)
        return drift_err_set(err, DRIFT_E_INPUT, "graph", "%s: name longer than %d bytes", what, DRIFT_MAX_FQN - 1);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return drift_err_set(err, DRIFT_E_INPUT, "graph", "%s: name contains a control character", what);
    return DRIFT_OK;
}

static int64_t checked_numel(int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > DRIFT_MAX_DIMS) return -1;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1 || shape[i] > DRIFT_GRAPH_MAX_DIM) return -1;
        if (n > DRIFT_GRAPH_MAX_NUMEL / shape[i]) return -1;
        n *= shape[i];
    }
    return n;
}

static void fmt_shape(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

static int reserve(drift_graph *g, drift_err *err) {
    if (g->n >= DRIFT_GRAPH_MAX_VALUES)
        return drift_err_set(err, DRIFT_E_NOMEM, "graph", "more than %d values", DRIFT_GRAPH_MAX_VALUES);
    if (g->n < g->cap) return DRIFT_OK;
    int ncap = g->cap ? g->cap * 2 : 64;
    if (ncap > DRIFT_GRAPH_MAX_VALUES) ncap = DRIFT_GRAPH_MAX_VALUES;
    drift_value *nv = drift_realloc(g->vals, (size_t)ncap * sizeof *nv);
    if (!nv) return drift_err_set(err, DRIFT_E_NOMEM, "graph", "out of memory growing a graph");
    g->vals = nv;
    g->cap = ncap;
    return DRIFT_OK;
}

/* Copies exactly the attributes op->kind uses into a zeroed op (canonical
 * form: equality and JSON round trips compare whole structs). */
static void canon_op(const drift_op *in, drift_op *o) {
    memset(o, 0, sizeof *o);
    o->kind = in->kind;
    o->compute = in->compute;
    o->out = in->out;
    o->n_in = in->n_in;
    switch (in->kind) {
    case DRIFT_OP_LAYER_NORM:
    case DRIFT_OP_RMS_NORM: o->eps = in->eps; break;
    case DRIFT_OP_AFFINE: o->alpha = in->alpha; o->beta = in->beta; break;
    case DRIFT_OP_ATTENTION: o->scale = in->scale; o->layout = in->layout; o->sub = in->sub; break;
    case DRIFT_OP_TIMESTEP_SINUSOID:
        o->dim = in->dim;
        o->max_period = in->max_period;
        o->flip_sin_to_cos = in->flip_sin_to_cos;
        break;
    case DRIFT_OP_NARROW: o->dim = in->dim; o->start = in->start; o->length = in->length; break;
    case DRIFT_OP_CONCAT: o->dim = in->dim; break;
    case DRIFT_OP_PERMUTE: memcpy(o->perm, in->perm, sizeof o->perm); break;
    case DRIFT_OP_PATCHIFY: memcpy(o->patch, in->patch, sizeof o->patch); o->layout = in->layout; break;
    case DRIFT_OP_UNPATCHIFY: memcpy(o->patch, in->patch, sizeof o->patch); break;
    case DRIFT_OP_UNARY: o->sub = in->sub; o->scalar = in->scalar; o->step = in->step; break; /* softplus, elu, leaky_relu */
    case DRIFT_OP_SCALAR: o->sub = in->sub; o->scalar = in->scalar; break;
    case DRIFT_OP_REDUCE: o->sub = in->sub; o->dim = in->dim; o->length = in->length; o->scalar = in->scalar; break;
    case DRIFT_OP_FILL: o->sub = in->sub; o->scalar = in->scalar; o->step = in->step; break;
    case DRIFT_OP_BINARY: case DRIFT_OP_PUT: o->sub = in->sub; break;
    case DRIFT_OP_ARGSORT: o->sub = in->sub; o->dim = in->dim; o->length = in->length; o->start = in->start; break;
    case DRIFT_OP_CUMSUM: case DRIFT_OP_SOFTMAX: o->sub = in->sub; o->dim = in->dim; break;
    case DRIFT_OP_BMM: o->alpha = in->alpha; o->beta = in->beta; o->layout = in->layout; break;
    case DRIFT_OP_LINEAR: o->layout = in->layout; break;
    case DRIFT_OP_GROUP_NORM: o->eps = in->eps; o->length = in->length; break;
    case DRIFT_OP_STRIDED:
    case DRIFT_OP_SCATTER: o->start = in->start; memcpy(o->stride, in->stride, sizeof o->stride); break;
    default: break;
    }
}

static int fail_node(int id, const drift_op *op, drift_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_node(int id, const drift_op *op, drift_err *err, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return drift_err_set(err, DRIFT_E_INPUT, "graph", "value %d (%s): %s", id, drift_graph_op_name(op->kind), msg);
}

static int check_attrs(int id, const drift_op *op, drift_err *err) {
    switch (op->kind) {
    case DRIFT_OP_LAYER_NORM:
    case DRIFT_OP_RMS_NORM:
        if (!isfinite(op->eps) || op->eps < 0) return fail_node(id, op, err, "eps must be finite and >= 0");
        break;
    case DRIFT_OP_AFFINE:
        if (!isfinite(op->alpha) || !isfinite(op->beta)) return fail_node(id, op, err, "alpha and beta must be finite");
        break;
    case DRIFT_OP_ATTENTION:
        if (!isfinite(op->scale) || op->scale <= 0) return fail_node(id, op, err, "scale must be finite and > 0");
        if (op->layout != 0 && op->layout != 1)
            return fail_node(id, op, err, "layout must be 0 ([B, H, L, D]) or 1 ([B, L, H, D]), got %d", op->layout);
        break;
    case DRIFT_OP_TIMESTEP_SINUSOID:
        if (!isfinite(op->max_period) || op->max_period <= 0)
            return fail_node(id, op, err, "max_period must be finite and > 0");
        if (op->flip_sin_to_cos != 0 && op->flip_sin_to_cos != 1)
            return fail_node(id, op, err, "flip_sin_to_cos must be 0 or 1");
        if (op->dim < 2 || op->dim % 2 || op->dim > (1 << 20))
            return fail_node(id, op, err, "dim (embedding width) must be even and in 2..2^20, got %d", op->dim);
        break;
    case DRIFT_OP_GROUP_NORM:
        if (!isfinite(op->eps) || op->eps < 0) return fail_node(id, op, err, "eps must be finite and >= 0");
        if (op->length < 1 || op->length > (1 << 20)) return fail_node(id, op, err, "groups must be in 1..2^20");
        break;
    case DRIFT_OP_BMM:
        if (!isfinite(op->alpha) || !isfinite(op->beta)) return fail_node(id, op, err, "alpha and beta must be finite");
        if (op->layout < 0 || op->layout > DRIFT_BMM_LAYOUT_MAX)
            return fail_node(id, op, err, "layout must be 0..%d (DRIFT_BMM_* bits), got %d", DRIFT_BMM_LAYOUT_MAX, op->layout);
        break;
    case DRIFT_OP_LINEAR:
        if (op->layout != 0 && op->layout != DRIFT_LINEAR_CONV)
            return fail_node(id, op, err, "layout must be 0 or %d (a convolution's GEMM), got %d", DRIFT_LINEAR_CONV,
                             op->layout);
        break;
    case DRIFT_OP_REDUCE:
        if (op->length < 0 || op->length > DRIFT_MAX_DIMS) return fail_node(id, op, err, "reduced span must be in 0..%d",
                                                                            DRIFT_MAX_DIMS);
        if (!isfinite(op->scalar)) return fail_node(id, op, err, "the correction must be finite");
        break;
    case DRIFT_OP_PATCHIFY:
    case DRIFT_OP_UNPATCHIFY:
        for (int i = 0; i < 3; i++)
            if (op->patch[i] < 1 || op->patch[i] > 4096)
                return fail_node(id, op, err, "patch sizes must be in 1..4096");
        if (op->kind == DRIFT_OP_PATCHIFY && op->layout != 0 && op->layout != 1)
            return fail_node(id, op, err, "layout must be 0 (features c, pf, ph, pw) or 1 (pf, ph, pw, c), got %d",
                             op->layout);
        break;
    default: break;
    }
    return DRIFT_OK;
}

static int n_in_ok(drift_op_kind k, int n) {
    switch (k) {
    case DRIFT_OP_LINEAR: return n == 2 || n == 3;
    case DRIFT_OP_ADD: case DRIFT_OP_SUB: case DRIFT_OP_MUL: case DRIFT_OP_CONCAT: return n == 2;
    case DRIFT_OP_LAYER_NORM: return n >= 1 && n <= 3;
    case DRIFT_OP_RMS_NORM: return n == 1 || n == 2;
    case DRIFT_OP_ROPE: return n == 3;
    case DRIFT_OP_ATTENTION: return n == 3 || n == 4; /* in3: the optional fp32 additive bias */
    case DRIFT_OP_DIV: case DRIFT_OP_SCATTER: case DRIFT_OP_BINARY: case DRIFT_OP_TAKE: return n == 2;
    case DRIFT_OP_FILL: return n == 0 || n == 1;
    case DRIFT_OP_WHERE: case DRIFT_OP_PUT: return n == 3;
    case DRIFT_OP_BMM: return n == 2 || n == 3;
    case DRIFT_OP_GROUP_NORM: return n >= 1 && n <= 3;
    default: return n == 1;
    }
}

static int is_cast_rule(drift_dtype_rule r) {
    return r == DRIFT_RULE_CAST_TO || r == DRIFT_RULE_TYPE_AS || r == DRIFT_RULE_HALF_AS || r == DRIFT_RULE_INPUT_POLICY;
}

static int check_rule(const drift_graph *g, int id, const drift_node_spec *s, drift_err *err) {
    const drift_op *op = &s->op;
    drift_dtype_rule r = s->rule;
    if ((int)r < 0 || r >= DRIFT_RULE_COUNT) return fail_node(id, op, err, "unknown dtype rule %d", (int)r);
    if (!g->assigned && r == DRIFT_RULE_NONE)
        return fail_node(id, op, err, "a node of a semantic graph needs a dtype rule");
    if (r != DRIFT_RULE_NONE && (op->kind == DRIFT_OP_CAST) != is_cast_rule(r))
        return fail_node(id, op, err, "rule %s %s", drift_graph_rule_name(r),
                         op->kind == DRIFT_OP_CAST ? "is not a cast rule (expected cast_to, type_as or input_policy)"
                                                   : "applies to cast nodes only");
    if ((r == DRIFT_RULE_CAST_TO || r == DRIFT_RULE_FIXED) && !valid_dtype(s->rule_dtype))
        return fail_node(id, op, err, "rule %s needs a dtype (fp32, bf16, fp16, fp64, int64, int32 or bool)",
                         drift_graph_rule_name(r));
    if ((r == DRIFT_RULE_TYPE_AS || r == DRIFT_RULE_HALF_AS) && (s->rule_ref < 0 || s->rule_ref >= id))
        return fail_node(id, op, err, "%s reference %d must be an earlier value id (0..%d)", drift_graph_rule_name(r),
                         s->rule_ref, id - 1);
    if (r == DRIFT_RULE_INPUT_POLICY && (s->rule_ref < 0 || s->rule_ref >= DRIFT_INPUT_COUNT))
        return fail_node(id, op, err, "input_policy needs an input (latents, cond or timestep)");
    if ((int)s->origin < 0 || s->origin >= DRIFT_ORIGIN_COUNT)
        return fail_node(id, op, err, "unknown origin %d", (int)s->origin);
    if (g->assigned) {
        if (!valid_dtype(op->out) || !valid_dtype(op->compute))
            return fail_node(id, op, err, "an assigned graph needs explicit compute and out dtypes");
        if (s->sem_id < -1) return fail_node(id, op, err, "sem_id must be -1 or a value id");
    } else {
        if (op->out != DRIFT_DTYPE_INVALID || op->compute != DRIFT_DTYPE_INVALID)
            return fail_node(id, op, err, "a semantic graph carries rules, not dtypes (compute/out must be unset)");
        if (s->origin != DRIFT_ORIGIN_MODEL || s->sem_id != -1)
            return fail_node(id, op, err, "origin and sem_id belong to assigned graphs");
    }
    return DRIFT_OK;
}

/* ---- adding ------------------------------------------------------------------ */

int drift_graph_add_leaf(drift_graph *g, drift_value_kind kind, const char *name, drift_dtype dtype, int ndim,
                         const int64_t *shape, int *id, drift_err *err) {
    if (!g) return drift_err_set(err, DRIFT_E_INTERNAL, "graph", "drift_graph_add_leaf: graph is NULL");
    int rc;
    char what[64];
    snprintf(what, sizeof what, "value %d (%s)", g->n, drift_graph_kind_name(kind));
    if (kind != DRIFT_VAL_PARAM && kind != DRIFT_VAL_BUFFER && kind != DRIFT_VAL_INPUT)
        return drift_err_set(err, DRIFT_E_INPUT, "graph", "%s: a leaf must be a param, buffer or input", what);
    if ((rc = check_name(what, name, err))) return rc;
    if (kind == DRIFT_VAL_INPUT && drift_graph_input_parse(name) < 0)
        return drift_err_set(err, DRIFT_E_INPUT, "graph", "%s: input '%s' unknown (expected latents, cond or timestep)",
                             what, name);
    if (dtype == DRIFT_DTYPE_INVALID ? (g->assigned || kind != DRIFT_VAL_INPUT) : !valid_dtype(dtype))
        return drift_err_set(err, DRIFT_E_INPUT, "graph", "%s '%s': expected a dtype (fp32, bf16, fp16 or fp64)%s",
                             what, name, kind == DRIFT_VAL_INPUT ? " in an assigned graph" : "");
    if (ndim < 0 || ndim > DRIFT_MAX_DIMS || (ndim > 0 && !shape))
        return drift_err_set(err, DRIFT_E_INPUT, "graph", "%s '%s': ndim must be in 0..%d", what, name, DRIFT_MAX_DIMS);
    int64_t numel = checked_numel(ndim, shape);
    if (numel < 0)
        return drift_err_set(err, DRIFT_E_INPUT, "graph",
                             "%s '%s': every dim must be in 1..2^40 and the element count at most 2^48", what, name);
    if (index_lookup(g, &g->leaves, 0, kind, name, NULL) >= 0)
        return drift_err_set(err, DRIFT_E_INPUT, "graph", "%s: duplicate %s name '%s'", what,
                             drift_graph_kind_name(kind), name);
    if ((rc = reserve(g, err))) return rc;
    drift_value *v = &g->vals[g->n];
    memset(v, 0, sizeof *v);
    v->kind = kind;
    v->name = drift_strdup(name);
    if (!v->name) return drift_err_set(err, DRIFT_E_NOMEM, "graph", "out of memory");
    v->ndim = ndim;
    for (int i = 0; i < ndim; i++) v->shape[i] = shape[i];
    v->numel = numel;
    v->dtype = dtype;
    for (int i = 0; i < DRIFT_OP_MAX_IN; i++) v->in[i] = -1;
    v->rule_ref = -1;
    v->sem_id = -1;
    g->n++;
    if (index_insert(g, &g->leaves, 0, g->n - 1)) {
        g->n--;
        drift_free((char *)v->name);
        return drift_err_set(err, DRIFT_E_NOMEM, "graph", "out of memory");
    }
    if (id) *id = g->n - 1;
    return DRIFT_OK;
}

int drift_graph_add_node(drift_graph *g, const drift_node_spec *s, int *id, drift_err *err) {
    if (!g || !s) return drift_err_set(err, DRIFT_E_INTERNAL, "graph", "drift_graph_add_node: NULL argument");
    int rc, me = g->n;
    drift_op op;
    canon_op(&s->op, &op);
    if ((int)op.kind < 0 || op.kind >= DRIFT_OP_COUNT)
        return drift_err_set(err, DRIFT_E_INPUT, "graph", "value %d: unknown op kind %d", me, (int)op.kind);
    if (!n_in_ok(op.kind, op.n_in)) return fail_node(me, &op, err, "wrong number of inputs (%d)", op.n_in);
    drift_tensor fake[DRIFT_OP_MAX_IN];
    const drift_tensor *ins[DRIFT_OP_MAX_IN] = {NULL};
    for (int i = 0; i < op.n_in; i++) {
        int src = s->in[i];
        if (src < 0 || src >= me)
            return fail_node(me, &op, err, "input %d refers to value %d, expected an earlier id (0..%d)", i, src, me - 1);
        const drift_value *sv = &g->vals[src];
        memset(&fake[i], 0, sizeof fake[i]);
        fake[i].dtype = g->assigned ? sv->dtype : DRIFT_DTYPE_INVALID; /* semantic: dtypes are not decided yet */
        fake[i].ndim = sv->ndim;
        memcpy(fake[i].shape, sv->shape, sizeof fake[i].shape);
        fake[i].numel = sv->numel;
        ins[i] = &fake[i];
    }
    for (int i = op.n_in; i < DRIFT_OP_MAX_IN; i++)
        if (s->in[i] != -1) return fail_node(me, &op, err, "input slot %d set beyond n_in = %d", i, op.n_in);
    if (op.kind == DRIFT_OP_PERMUTE)
        for (int i = fake[0].ndim; i < DRIFT_MAX_DIMS; i++) op.perm[i] = 0; /* canonical: unused entries zero */
    if (op.kind == DRIFT_OP_STRIDED || op.kind == DRIFT_OP_SCATTER) {
        int vn = op.kind == DRIFT_OP_SCATTER ? fake[1].ndim : s->ndim;
        for (int i = vn < 0 ? 0 : vn; i < DRIFT_MAX_DIMS; i++) op.stride[i] = 0;
    }
    if ((rc = check_attrs(me, &op, err))) return rc;
    if ((rc = check_rule(g, me, s, err))) return rc;
    if (g->assigned && op.kind == DRIFT_OP_CONCAT && fake[0].dtype != fake[1].dtype)
        return fail_node(me, &op, err, "concat inputs must share a dtype in an assigned graph");

    int ndim = 0;
    int64_t shape[DRIFT_MAX_DIMS] = {0};
    /* STRIDED and VIEW cannot infer a shape, so ndim 0 there is a 0-d result (a captured
     * graph's scalar: unbind of a 1-d tensor), not "not given" */
    int given = s->ndim > 0 || op.kind == DRIFT_OP_STRIDED || op.kind == DRIFT_OP_VIEW;
    if (s->ndim < 0 || s->ndim > DRIFT_MAX_DIMS) return fail_node(me, &op, err, "ndim must be in 0..%d", DRIFT_MAX_DIMS);
    if (op.kind == DRIFT_OP_VIEW || op.kind == DRIFT_OP_UNPATCHIFY || op.kind == DRIFT_OP_STRIDED ||
        op.kind == DRIFT_OP_NONZERO || (op.kind == DRIFT_OP_FILL && op.n_in == 0)) {
        if (!given) return fail_node(me, &op, err, "needs its output shape");
        if (checked_numel(s->ndim, s->shape) < 0)
            return fail_node(me, &op, err, "output dims must be in 1..2^40, element count at most 2^48");
        ndim = s->ndim;
        memcpy(shape, s->shape, sizeof shape);
    }
    drift_err inner;
    drift_err_clear(&inner);
    if (drift_op_infer_shape(&op, ins, &ndim, shape, &inner) != DRIFT_OK)
        return fail_node(me, &op, err, "%s", inner.msg);
    int64_t numel = checked_numel(ndim, shape);
    if (numel < 0) return fail_node(me, &op, err, "output dims must be in 1..2^40, element count at most 2^48");
    if (given) {
        int same = s->ndim == ndim;
        for (int i = 0; same && i < ndim; i++) same = s->shape[i] == shape[i];
        if (!same) {
            char a[160], b[160];
            fmt_shape(a, sizeof a, s->ndim, s->shape);
            fmt_shape(b, sizeof b, ndim, shape);
            return fail_node(me, &op, err, "declared output shape %s differs from the inferred %s", a, b);
        }
    }
    if (s->name && (rc = check_name("node label", s->name, err))) return rc;
    if (s->site) {
        if ((rc = check_name("site", s->site, err))) return rc;
        if (index_lookup(g, &g->sites, 1, DRIFT_VAL_NODE, s->site, NULL) >= 0)
            return fail_node(me, &op, err, "duplicate site '%s'", s->site);
    }
    if ((rc = reserve(g, err))) return rc;
    drift_value *v = &g->vals[me];
    memset(v, 0, sizeof *v);
    v->kind = DRIFT_VAL_NODE;
    v->name = s->name ? drift_strdup(s->name) : NULL;
    v->site = s->site ? drift_strdup(s->site) : NULL;
    if ((s->name && !v->name) || (s->site && !v->site)) {
        drift_free((char *)v->name);
        drift_free((char *)v->site);
        return drift_err_set(err, DRIFT_E_NOMEM, "graph", "out of memory");
    }
    v->ndim = ndim;
    memcpy(v->shape, shape, sizeof v->shape);
    v->numel = numel;
    v->op = op;
    v->dtype = op.out;
    for (int i = 0; i < DRIFT_OP_MAX_IN; i++) v->in[i] = i < op.n_in ? s->in[i] : -1;
    v->rule = s->rule;
    v->rule_dtype = (s->rule == DRIFT_RULE_CAST_TO || s->rule == DRIFT_RULE_FIXED) ? s->rule_dtype : DRIFT_DTYPE_INVALID;
    v->rule_ref = (s->rule == DRIFT_RULE_TYPE_AS || s->rule == DRIFT_RULE_HALF_AS || s->rule == DRIFT_RULE_INPUT_POLICY)
                      ? s->rule_ref : -1;
    v->origin = s->origin;
    v->sem_id = g->assigned ? s->sem_id : -1;
    g->n++;
    if (v->site && index_insert(g, &g->sites, 1, me)) {
        g->n--;
        drift_free((char *)v->name);
        drift_free((char *)v->site);
        return drift_err_set(err, DRIFT_E_NOMEM, "graph", "out of memory");
    }
    if (id) *id = me;
    return DRIFT_OK;
}

int drift_graph_set_site(drift_graph *g, int id, const char *site, drift_err *err) {
    int rc;
    if (!g || id < 0 || id >= g->n)
        return drift_err_set(err, DRIFT_E_INPUT, "graph", "site '%s': value id %d out of range", site ? site : "", id);
    if ((rc = check_name("site", site, err))) return rc;
    if (g->vals[id].site) return drift_err_set(err, DRIFT_E_INPUT, "graph", "value %d already has site '%s'", id, g->vals[id].site);
    if (index_lookup(g, &g->sites, 1, DRIFT_VAL_NODE, site, NULL) >= 0)
        return drift_err_set(err, DRIFT_E_INPUT, "graph", "value %d: duplicate site '%s'", id, site);
    char *c = drift_strdup(site);
    if (!c) return drift_err_set(err, DRIFT_E_NOMEM, "graph", "out of memory");
    g->vals[id].site = c;
    if (index_insert(g, &g->sites, 1, id)) {
        g->vals[id].site = NULL;
        drift_free(c);
        return drift_err_set(err, DRIFT_E_NOMEM, "graph", "out of memory");
    }
    return DRIFT_OK;
}

int drift_graph_set_output(drift_graph *g, int id, drift_err *err) {
    if (!g || id < 0 || id >= g->n)
        return drift_err_set(err, DRIFT_E_INPUT, "graph", "output: value id %d out of range", id);
    g->output = id;
    return DRIFT_OK;
}

int drift_graph_set_model(drift_graph *g, const char *model, drift_err *err) {
    if (!g) return drift_err_set(err, DRIFT_E_INTERNAL, "graph", "drift_graph_set_model: graph is NULL");
    if (model && strlen(model) > 4096)
        return drift_err_set(err, DRIFT_E_INPUT, "graph", "model: longer than 4096 bytes");
    char *c = model ? drift_strdup(model) : NULL;
    if (model && !c) return drift_err_set(err, DRIFT_E_NOMEM, "graph", "out of memory");
    drift_free(g->model);
    g->model = c;
    return DRIFT_OK;
}

/* ---- accessors ---------------------------------------------------------------- */

int drift_graph_count(const drift_graph *g) { return g ? g->n : 0; }
const drift_value *drift_graph_value(const drift_graph *g, int id) {
    return (g && id >= 0 && id < g->n) ? &g->vals[id] : NULL;
}
int drift_graph_output(const drift_graph *g) { return g ? g->output : -1; }
int drift_graph_is_assigned(const drift_graph *g) { return g ? g->assigned : 0; }
const char *drift_graph_model(const drift_graph *g) { return (g && g->model) ? g->model : ""; }

int drift_graph_find_site(const drift_graph *g, const char *site) {
    if (!g || !site) return -1;
    return index_lookup(g, &g->sites, 1, DRIFT_VAL_NODE, site, NULL);
}

int drift_graph_find_leaf(const drift_graph *g, drift_value_kind kind, const char *name) {
    if (!g || !name || kind == DRIFT_VAL_NODE) return -1;
    return index_lookup(g, &g->leaves, 0, kind, name, NULL);
}

int drift_graph_sites(const drift_graph *g, int *ids, int cap) {
    int n = 0;
    for (int i = 0; g && i < g->n; i++)
        if (g->vals[i].site) {
            if (ids && n < cap) ids[n] = i;
            n++;
        }
    return n;
}

/* ---- equality ------------------------------------------------------------------- */

static int str_eq(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

static int f_eq(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static int op_eq(const drift_op *a, const drift_op *b) {
    if (a->kind != b->kind || a->compute != b->compute || a->out != b->out || a->n_in != b->n_in) return 0;
    if (!f_eq(a->eps, b->eps) || !f_eq(a->alpha, b->alpha) || !f_eq(a->beta, b->beta) || !f_eq(a->scale, b->scale) ||
        !f_eq(a->max_period, b->max_period))
        return 0;
    if (a->flip_sin_to_cos != b->flip_sin_to_cos || a->dim != b->dim || a->start != b->start || a->length != b->length ||
        a->layout != b->layout)
        return 0;
    if (a->sub != b->sub || memcmp(&a->scalar, &b->scalar, sizeof a->scalar) || memcmp(&a->step, &b->step, sizeof a->step) ||
        memcmp(a->stride, b->stride, sizeof a->stride))
        return 0;
    return memcmp(a->perm, b->perm, sizeof a->perm) == 0 && memcmp(a->patch, b->patch, sizeof a->patch) == 0;
}

int drift_graph_equal(const drift_graph *a, const drift_graph *b, char *why, size_t whysz) {
#define NE(...)                                            \
    do {                                                   \
        if (why && whysz) snprintf(why, whysz, __VA_ARGS__); \
        return 0;                                          \
    } while (0)
    if (!a || !b) NE("a graph is NULL");
    if (a->assigned != b->assigned) NE("assigned: %d vs %d", a->assigned, b->assigned);
    if (a->n != b->n) NE("value count: %d vs %d", a->n, b->n);
    if (a->output != b->output) NE("output: %d vs %d", a->output, b->output);
    if (!str_eq(drift_graph_model(a), drift_graph_model(b))) NE("model differs");
    for (int i = 0; i < a->n; i++) {
        const drift_value *x = &a->vals[i], *y = &b->vals[i];
        if (x->kind != y->kind) NE("value %d: kind differs", i);
        if (!str_eq(x->name, y->name)) NE("value %d: name differs", i);
        if (!str_eq(x->site, y->site)) NE("value %d: site differs", i);
        if (x->ndim != y->ndim || memcmp(x->shape, y->shape, sizeof x->shape[0] * (size_t)x->ndim) != 0)
            NE("value %d: shape differs", i);
        if (x->dtype != y->dtype) NE("value %d: dtype %s vs %s", i, drift_dtype_name(x->dtype), drift_dtype_name(y->dtype));
        if (x->kind != DRIFT_VAL_NODE) continue;
        if (!op_eq(&x->op, &y->op)) NE("value %d: op or attributes differ", i);
        if (memcmp(x->in, y->in, sizeof x->in) != 0) NE("value %d: inputs differ", i);
        if (x->rule != y->rule || x->rule_dtype != y->rule_dtype || x->rule_ref != y->rule_ref)
            NE("value %d: dtype rule differs", i);
        if (x->origin != y->origin || x->sem_id != y->sem_id) NE("value %d: origin differs", i);
    }
    return 1;
#undef NE
}
