/* Graph executor and host tensor sets (exec.h). */
#include "replay/exec/exec.h"

#include "formats/alloc.h"
#include "replay/ir/fuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- host tensor sets ------------------------------------------------------ */

struct drift_hostset {
    drift_host_tensor **items;
    size_t n, cap;
    size_t *slots;      /* index + 1, 0 empty; open addressing */
    size_t n_slots;     /* power of two */
};

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

int drift_hostset_create(drift_hostset **out, drift_err *err) {
    if (!out) return drift_err_set(err, DRIFT_E_INTERNAL, "hostset", "drift_hostset_create: out is NULL");
    *out = drift_calloc(1, sizeof **out);
    if (!*out) return drift_err_set(err, DRIFT_E_NOMEM, "hostset", "out of memory");
    return DRIFT_OK;
}

static void host_tensor_free(drift_host_tensor *t) {
    if (!t) return;
    drift_free((char *)t->name);
    drift_free(t->f32);
    drift_free(t->f64);
    drift_free(t);
}

void drift_hostset_free(drift_hostset *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) host_tensor_free(s->items[i]);
    drift_free(s->items);
    drift_free(s->slots);
    drift_free(s);
}

static size_t *find_slot(const drift_hostset *s, const char *name) {
    if (!s->n_slots) return NULL;
    size_t mask = s->n_slots - 1, i = (size_t)hash_str(name) & mask;
    for (;;) {
        size_t *sl = &s->slots[i];
        if (*sl == 0 || strcmp(s->items[*sl - 1]->name, name) == 0) return sl;
        i = (i + 1) & mask;
    }
}

const drift_host_tensor *drift_hostset_find(const drift_hostset *s, const char *name) {
    if (!s || !name) return NULL;
    size_t *sl = find_slot(s, name);
    return (sl && *sl) ? s->items[*sl - 1] : NULL;
}

size_t drift_hostset_count(const drift_hostset *s) { return s ? s->n : 0; }
const drift_host_tensor *drift_hostset_at(const drift_hostset *s, size_t i) {
    return (s && i < s->n) ? s->items[i] : NULL;
}

static int rehash(drift_hostset *s, size_t want) {
    size_t ns = s->n_slots ? s->n_slots : 64;
    while (ns < want * 2) ns *= 2;
    if (ns == s->n_slots) return 0;
    size_t *old = s->slots, old_n = s->n_slots;
    s->slots = drift_calloc(ns, sizeof *s->slots);
    if (!s->slots) {
        s->slots = old;
        return -1;
    }
    s->n_slots = ns;
    for (size_t i = 0; i < old_n; i++)
        if (old[i]) *find_slot(s, s->items[old[i] - 1]->name) = old[i];
    drift_free(old);
    return 0;
}

/* The shared part of the two adds: checks, allocates and inserts. */
static int hostset_insert(drift_hostset *s, const char *name, drift_dtype dtype, int ndim, const int64_t *shape,
                          int with_f64, drift_host_tensor **added, drift_err *err) {
    if (!s || !name || !*name)
        return drift_err_set(err, DRIFT_E_INPUT, "hostset", "drift_hostset_add: a set and a name are required");
    if (dtype != DRIFT_F32 && dtype != DRIFT_BF16 && dtype != DRIFT_F16 && dtype != DRIFT_F64)
        return drift_err_set(err, DRIFT_E_INPUT, name, "host tensor '%s': expected a float dtype", name);
    if (ndim < 0 || ndim > DRIFT_MAX_DIMS || (ndim && !shape))
        return drift_err_set(err, DRIFT_E_INPUT, name, "host tensor '%s': ndim must be in 0..%d", name, DRIFT_MAX_DIMS);
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1 || shape[i] > DRIFT_GRAPH_MAX_DIM || numel > DRIFT_GRAPH_MAX_NUMEL / shape[i])
            return drift_err_set(err, DRIFT_E_INPUT, name,
                                 "host tensor '%s': dims must be in 1..2^40 with at most 2^48 elements", name);
        numel *= shape[i];
    }
    if (drift_hostset_find(s, name))
        return drift_err_set(err, DRIFT_E_INPUT, name, "host tensor '%s' given twice", name);
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        drift_host_tensor **ni = drift_realloc(s->items, nc * sizeof *ni);
        if (!ni) return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory");
        s->items = ni;
        s->cap = nc;
    }
    if (rehash(s, s->n + 1)) return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory");
    drift_host_tensor *t = drift_calloc(1, sizeof *t);
    if (!t) return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory");
    t->name = drift_strdup(name);
    t->f32 = drift_malloc((size_t)numel * sizeof *t->f32);
    t->f64 = with_f64 ? drift_malloc((size_t)numel * sizeof *t->f64) : NULL;
    if (!t->name || !t->f32 || (with_f64 && !t->f64)) {
        host_tensor_free(t);
        return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory for host tensor '%s'", name);
    }
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = numel;
    s->items[s->n] = t;
    *find_slot(s, name) = s->n + 1;
    s->n++;
    *added = t;
    return DRIFT_OK;
}

int drift_hostset_add(drift_hostset *s, const char *name, drift_dtype dtype, int ndim, const int64_t *shape,
                      const float *f32, const double *f64, drift_host_tensor **added, drift_err *err) {
    if (!f32)
        return drift_err_set(err, DRIFT_E_INPUT, "hostset", "drift_hostset_add: a set, a name and fp32 values are required");
    drift_host_tensor *t = NULL;
    int rc = hostset_insert(s, name, dtype, ndim, shape, f64 != NULL, &t, err);
    if (rc) return rc;
    memcpy(t->f32, f32, (size_t)t->numel * sizeof *t->f32);
    drift_dtype_round_n(t->f32, (size_t)t->numel, dtype);
    if (f64) memcpy(t->f64, f64, (size_t)t->numel * sizeof *t->f64);
    if (added) *added = t;
    return DRIFT_OK;
}

int drift_hostset_add_alloc(drift_hostset *s, const char *name, drift_dtype dtype, int ndim, const int64_t *shape,
                            drift_host_tensor **added, drift_err *err) {
    drift_host_tensor *t = NULL;
    int rc = hostset_insert(s, name, dtype, ndim, shape, 0, &t, err);
    if (!rc && added) *added = t;
    return rc;
}

/* ---- execution ---------------------------------------------------------------- */


/* A value's storage during a run. A buffer either owns its storage (base
 * NULL) or is an alias (VIEW, contiguous NARROW) of the buffer `base` that
 * owns it, at element offset `off`; an alias holds one reference on base.
 * Values that alias without a new shape or offset (identity casts, skipped
 * and folded casts) share their input's ebuf. */
typedef struct ebuf {
    drift_tensor t;
    int refs;          /* remaining uses by later nodes (and the output), plus live aliases */
    int live;          /* t.data valid (allocated, or aliased) and not yet released */
    int pinned;        /* owned by a drift_exec_cache: never released by the run */
    struct ebuf *base; /* alias: the owning buffer (never itself an alias) */
    int64_t off;       /* alias: element offset into base */
} ebuf;

struct drift_exec_cache {
    const drift_backend *be;
    const drift_graph *g; /* the graph the entries belong to */
    int n;
    drift_tensor *t;      /* per value id */
    unsigned char *have;
    unsigned char *alias; /* per value id: the entry borrows another entry's storage (never released) */
};

int drift_exec_cache_create(const drift_backend *be, drift_exec_cache **out, drift_err *err) {
    *out = drift_calloc(1, sizeof **out);
    if (!*out) return drift_err_set(err, DRIFT_E_NOMEM, "exec", "out of memory");
    (*out)->be = be;
    return DRIFT_OK;
}

static void cache_clear(drift_exec_cache *c) {
    for (int i = 0; i < c->n; i++)
        if (c->have[i] && !c->alias[i]) drift_backend_release(c->be, &c->t[i]);
    drift_free(c->t);
    drift_free(c->have);
    drift_free(c->alias);
    c->t = NULL;
    c->have = NULL;
    c->alias = NULL;
    c->n = 0;
    c->g = NULL;
}

void drift_exec_cache_free(drift_exec_cache *c) {
    if (!c) return;
    cache_clear(c);
    drift_free(c);
}

size_t drift_exec_cache_count(const drift_exec_cache *c) {
    size_t k = 0;
    for (int i = 0; c && i < c->n; i++) k += c->have[i];
    return k;
}

static int cache_bind(drift_exec_cache *c, const drift_graph *g, drift_err *err) {
    if (c->g == g && c->n == drift_graph_count(g)) return DRIFT_OK;
    cache_clear(c);
    int n = drift_graph_count(g);
    c->t = drift_calloc((size_t)(n ? n : 1), sizeof *c->t);
    c->have = drift_calloc((size_t)(n ? n : 1), 1);
    c->alias = drift_calloc((size_t)(n ? n : 1), 1);
    if (!c->t || !c->have || !c->alias) {
        cache_clear(c);
        return drift_err_set(err, DRIFT_E_NOMEM, "exec", "out of memory (cache)");
    }
    c->n = n;
    c->g = g;
    return DRIFT_OK;
}

/* drift_exec_cache_put (exec.h): a value computed elsewhere (e.g. an FSDP
 * all-gather) adopted as if an earlier run had cached it. */
int drift_exec_cache_put(drift_exec_cache *c, const drift_graph *g, int id, drift_tensor *t, drift_err *err) {
    const drift_value *v = drift_graph_value(g, id);
    int ok = v && t && t->be == c->be && t->dtype == v->dtype && t->ndim == v->ndim;
    for (int d = 0; ok && d < v->ndim; d++) ok = t->shape[d] == v->shape[d];
    if (!ok) return drift_err_set(err, DRIFT_E_INTERNAL, "exec", "cache_put: value %d: tensor does not match", id);
    int rc = cache_bind(c, g, err);
    if (rc) return rc;
    if (c->have[id] && !c->alias[id]) drift_backend_release(c->be, &c->t[id]);
    c->t[id] = *t;
    c->have[id] = 1;
    c->alias[id] = 0;
    t->data = NULL;
    return DRIFT_OK;
}

typedef struct ectx {
    const drift_graph *g;
    const drift_backend *be;
    const drift_exec_inputs *in;
    ebuf **slot;       /* value id -> buffer holding its data (shared by aliases) */
    ebuf **owned;      /* value id -> buffer it created */
    int *uses;
    unsigned char *live;
    drift_err *err;
    unsigned char *fixed; /* with a cache: value depends on parameters/buffers only */
    int alias;            /* VIEW/NARROW aliasing on (and the backend can) */
    const drift_fuse_plan *fuse; /* NULL: no cast folding */
    drift_exec_stats st;
} ectx;

static void buf_unref(const ectx *c, ebuf *b);

static void buf_release(const ectx *c, ebuf *b) {
    if (!b || !b->live || b->pinned) return;
    b->live = 0;
    if (b->base) {
        ebuf *base = b->base;
        b->base = NULL; /* drop the reference once */
        buf_unref(c, base);
    } else {
        drift_backend_release(c->be, &b->t);
    }
}

static void buf_unref(const ectx *c, ebuf *b) {
    if (--b->refs <= 0) buf_release(c, b);
}

static int new_buf(ectx *c, int id, drift_dtype dt, const drift_value *v, ebuf **out) {
    ebuf *b = drift_calloc(1, sizeof *b);
    if (!b) return drift_err_set(c->err, DRIFT_E_NOMEM, "exec", "out of memory");
    c->owned[id] = b;
    b->t.dtype = dt;
    b->t.ndim = v->ndim;
    memcpy(b->t.shape, v->shape, sizeof b->t.shape);
    b->t.numel = v->numel;
    b->t.be = c->be;
    int rc = drift_backend_alloc(c->be, &b->t, c->err);
    if (rc) {
        drift_err_prefix(c->err, "value %d (%s)", id, v->name ? v->name : drift_graph_op_name(v->op.kind));
        return rc;
    }
    b->live = 1;
    *out = b;
    return DRIFT_OK;
}

/* Makes value id (shape v's) an alias of src's storage at element offset
 * off (relative to src). *out stays NULL when the backend declines (the
 * caller copies instead). */
static int new_alias(ectx *c, int id, const drift_value *v, ebuf *src, int64_t off, ebuf **out) {
    *out = NULL;
    ebuf *root = src->base ? src->base : src;
    int64_t total = (src->base ? src->off : 0) + off;
    ebuf *b = drift_calloc(1, sizeof *b);
    if (!b) return drift_err_set(c->err, DRIFT_E_NOMEM, "exec", "out of memory");
    b->t.dtype = src->t.dtype;
    b->t.ndim = v->ndim;
    memcpy(b->t.shape, v->shape, sizeof b->t.shape);
    b->t.numel = v->numel;
    b->t.be = c->be;
    drift_err local;
    drift_err_clear(&local);
    int rc = drift_backend_alias(c->be, &root->t, total, &b->t, &local);
    if (rc) {
        drift_free(b);
        if (rc == DRIFT_E_UNSUPPORTED) return DRIFT_OK;
        *c->err = local;
        drift_err_prefix(c->err, "value %d (%s)", id, v->name ? v->name : drift_graph_op_name(v->op.kind));
        return rc;
    }
    c->owned[id] = b;
    b->live = 1;
    b->base = root;
    b->off = total;
    root->refs++;
    *out = b;
    return DRIFT_OK;
}

static int shapes_equal(const drift_value *v, const drift_host_tensor *h) {
    if (v->ndim != h->ndim) return 0;
    for (int i = 0; i < v->ndim; i++)
        if (v->shape[i] != h->shape[i]) return 0;
    return 1;
}

static int run_leaf(ectx *c, int id, const drift_value *v, ebuf **out) {
    const drift_hostset *set = v->kind == DRIFT_VAL_PARAM ? c->in->params
                               : v->kind == DRIFT_VAL_BUFFER ? c->in->buffers : c->in->inputs;
    const char *what = drift_graph_kind_name(v->kind);
    const drift_host_tensor *h = drift_hostset_find(set, v->name);
    if (!h) return drift_err_set(c->err, DRIFT_E_INPUT, v->name, "no host values given for %s '%s'", what, v->name);
    if (!shapes_equal(v, h))
        return drift_err_set(c->err, DRIFT_E_INPUT, v->name, "%s '%s': host tensor has %d dims / %lld elements, the graph expects %d dims / %lld elements of another shape",
                             what, v->name, h->ndim, (long long)h->numel, v->ndim, (long long)v->numel);
    if (v->kind != DRIFT_VAL_PARAM && v->dtype != DRIFT_F64 && h->dtype != v->dtype)
        return drift_err_set(c->err, DRIFT_E_INPUT, v->name,
                             "%s '%s': host values are %s, the graph was assigned for %s (assign with the dtype it is handed over in)",
                             what, v->name, drift_dtype_name(h->dtype), drift_dtype_name(v->dtype));
    int rc = new_buf(c, id, v->dtype, v, out);
    if (rc) return rc;
    if (v->dtype == DRIFT_F64 && h->f64) rc = drift_backend_upload_f64(c->be, &(*out)->t, h->f64, c->err);
    else rc = drift_backend_upload_f32(c->be, &(*out)->t, h->f32, c->err);
    if (rc) drift_err_prefix(c->err, "uploading %s '%s'", what, v->name);
    return rc;
}

/* Element offset of a NARROW's slice when it is contiguous in x's storage
 * (every dim before `dim` has size 1), else -1. */
static int64_t narrow_offset(const drift_op *op, const drift_tensor *x) {
    int d = op->dim < 0 ? op->dim + x->ndim : op->dim;
    if (d < 0 || d >= x->ndim || op->start < 0 || op->length < 0 || op->start + op->length > x->shape[d]) return -1;
    for (int k = 0; k < d; k++)
        if (x->shape[k] != 1) return -1;
    int64_t inner = 1;
    for (int k = d + 1; k < x->ndim; k++) inner *= x->shape[k];
    return op->start * inner;
}

static int run_node(ectx *c, int id, const drift_value *v, ebuf **out) {
    const drift_tensor *ins[3] = {NULL, NULL, NULL};
    for (int k = 0; k < v->op.n_in; k++) {
        ebuf *b = c->slot[v->in[k]];
        if (!b || !b->live)
            return drift_err_set(c->err, DRIFT_E_INTERNAL, "exec", "value %d: input %d (value %d) is not available", id,
                                 k, v->in[k]);
        ins[k] = &b->t;
    }
    const int act = c->fuse ? c->fuse->action[id] : DRIFT_FUSE_NONE;
    if (v->op.kind == DRIFT_OP_CAST) {
        if (ins[0]->dtype == v->op.out) { /* identity cast, or one folded into its producer: alias */
            if (act == DRIFT_FUSE_FOLD_CAST) c->st.casts_folded++;
            else c->st.identity_casts++;
            *out = c->slot[v->in[0]];
            return DRIFT_OK;
        }
        if (act == DRIFT_FUSE_SKIP_CAST && drift_fuse_exact_widening(ins[0]->dtype, v->op.out)) {
            c->st.casts_skipped++; /* consumers read the narrow input (fuse.h) */
            *out = c->slot[v->in[0]];
            return DRIFT_OK;
        }
    }
    if (c->alias && v->op.n_in > 0 && ins[0]->dtype == v->op.out && (v->op.kind == DRIFT_OP_VIEW || v->op.kind == DRIFT_OP_NARROW)) {
        int64_t off = v->op.kind == DRIFT_OP_VIEW ? 0 : narrow_offset(&v->op, ins[0]);
        if (off >= 0 && (v->op.kind == DRIFT_OP_NARROW || ins[0]->numel == v->numel)) {
            int rc = new_alias(c, id, v, c->slot[v->in[0]], off, out);
            if (rc) return rc;
            if (*out) {
                if (v->op.kind == DRIFT_OP_VIEW) c->st.views_aliased++;
                else c->st.narrows_aliased++;
                return DRIFT_OK;
            }
        }
    }
    drift_op op = v->op;
    if (c->fuse && v->op.kind != DRIFT_OP_CAST)
        op.out = c->fuse->out[id]; /* a producer of a folded cast rounds to the cast's dtype */
    int rc = new_buf(c, id, op.out, v, out);
    if (rc) return rc;
    c->st.kernels++;
    rc = drift_backend_run(c->be, &op, ins, &(*out)->t, c->err);
    if (rc)
        drift_err_prefix(c->err, "value %d (%s%s%s)", id, drift_graph_op_name(v->op.kind), v->name ? " " : "",
                         v->name ? v->name : "");
    return rc;
}

static int download(ectx *c, const ebuf *b, drift_exec_result *out) {
    memset(out, 0, sizeof *out);
    out->dtype = b->t.dtype;
    out->ndim = b->t.ndim;
    memcpy(out->shape, b->t.shape, sizeof out->shape);
    out->numel = b->t.numel;
    size_t n = (size_t)b->t.numel;
    out->f32 = drift_malloc((n ? n : 1) * sizeof *out->f32);
    out->f64 = drift_malloc((n ? n : 1) * sizeof *out->f64);
    if (!out->f32 || !out->f64) return drift_err_set(c->err, DRIFT_E_NOMEM, "exec", "out of memory for the output");
    int rc = drift_backend_download_f64(c->be, &b->t, out->f64, c->err);
    if (!rc) rc = drift_backend_download_f32(c->be, &b->t, out->f32, c->err);
    return rc;
}

void drift_exec_result_free(drift_exec_result *r) {
    if (!r) return;
    drift_free(r->f32);
    drift_free(r->f64);
    memset(r, 0, sizeof *r);
}

/* DRIFT_EXEC_PROFILE=1: synchronise around every node and print, per op
 * kind, the count and the time spent (stderr, at the end of each run). A
 * diagnostic for benchmarks; it serialises the device. */
static double prof_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A -1/0/1 switch: -1 reads env ("0" = off; unset or anything else = on). */
static int switch_on(int v, const char *env) {
    if (v >= 0) return v != 0;
    const char *s = getenv(env);
    return !(s && s[0] == '0' && s[1] == '\0');
}

int drift_exec_run(const drift_graph *g, const drift_backend *be, const drift_exec_inputs *in, drift_exec_result *out,
                   drift_err *err) {
    return drift_exec_run_ex(g, be, in, NULL, out, err);
}

int drift_exec_run_ex(const drift_graph *g, const drift_backend *be, const drift_exec_inputs *in,
                      const drift_exec_options *opts, drift_exec_result *out, drift_err *err) {
    if (out) memset(out, 0, sizeof *out);
    if (opts && opts->stats) memset(opts->stats, 0, sizeof *opts->stats);
    if (!g || !be || !in) return drift_err_set(err, DRIFT_E_INTERNAL, "exec", "drift_exec_run: NULL argument");
    if (!drift_graph_is_assigned(g))
        return drift_err_set(err, DRIFT_E_INPUT, "exec", "the graph has no explicit dtypes (run drift_assign_dtypes first)");
    int n = drift_graph_count(g), output = drift_graph_output(g), rc = DRIFT_OK;
    if (out && output < 0) return drift_err_set(err, DRIFT_E_INPUT, "exec", "the graph has no output");
    drift_err local;
    drift_err_clear(&local);
    ectx c = {.g = g, .be = be, .in = in, .err = err ? err : &local};
    c.alias = drift_backend_can_alias(be) && switch_on(opts ? opts->alias : -1, "DRIFT_EXEC_ALIAS");
    const int fuse_on = switch_on(opts ? opts->fuse_casts : -1, "DRIFT_EXEC_FUSE_CASTS");
    drift_fuse_plan fplan;
    memset(&fplan, 0, sizeof fplan);
    size_t nn = (size_t)(n ? n : 1);
    c.slot = drift_calloc(nn, sizeof *c.slot);
    c.owned = drift_calloc(nn, sizeof *c.owned);
    c.uses = drift_calloc(nn, sizeof *c.uses);
    c.live = drift_calloc(nn, 1);
    if (!c.slot || !c.owned || !c.uses || !c.live) {
        rc = drift_err_set(c.err, DRIFT_E_NOMEM, "exec", "out of memory");
        goto done;
    }
    /* liveness, backwards: the output, sites (when observed), their inputs */
    if (output >= 0) c.live[output] = 1;
    for (int i = n - 1; i >= 0; i--) {
        const drift_value *v = drift_graph_value(g, i);
        if (v->site && in->on_site) c.live[i] = 1;
        if (!c.live[i] || v->kind != DRIFT_VAL_NODE) continue;
        for (int k = 0; k < v->op.n_in; k++) {
            c.live[v->in[k]] = 1;
            c.uses[v->in[k]]++;
        }
    }
    if (output >= 0) c.uses[output]++;

    /* Values that depend on parameters and buffers only: cacheable. */
    drift_exec_cache *cache = in->cache && in->cache->be == be ? in->cache : NULL;
    if (in->cache && !cache) {
        rc = drift_err_set(c.err, DRIFT_E_INTERNAL, "exec", "the cache belongs to another backend");
        goto done;
    }
    if (cache && (rc = cache_bind(cache, g, c.err))) goto done;
    const int fixed_only = opts && opts->fixed_only;
    if (fixed_only && (!cache || out)) {
        rc = drift_err_set(c.err, DRIFT_E_INTERNAL, "exec", "fixed_only needs a cache and no output");
        goto done;
    }
    if (cache) {
        c.fixed = drift_calloc(nn, 1);
        if (!c.fixed) { rc = drift_err_set(c.err, DRIFT_E_NOMEM, "exec", "out of memory"); goto done; }
        for (int i = 0; i < n; i++) {
            const drift_value *v = drift_graph_value(g, i);
            if (v->kind == DRIFT_VAL_PARAM || v->kind == DRIFT_VAL_BUFFER) {
                c.fixed[i] = 1;
            } else if (v->kind == DRIFT_VAL_NODE) {
                int all = 1;
                for (int k = 0; k < v->op.n_in; k++) all &= c.fixed[v->in[k]];
                c.fixed[i] = (unsigned char)all;
            }
        }
    }
    if (fuse_on) {
        drift_fuse_opts fo = {.live = c.live, .fixed = c.fixed, .observe_sites = in->on_site != NULL};
        if ((rc = drift_fuse_plan_build(g, &fo, &fplan, c.err))) goto done;
        c.fuse = &fplan;
    }

    const char *prof_env = getenv("DRIFT_EXEC_PROFILE");
    int prof = prof_env && prof_env[0] == '1';
    double prof_t[DRIFT_OP_COUNT + 1] = {0};
    long prof_n[DRIFT_OP_COUNT + 1] = {0};
    for (int i = 0; i < n; i++) {
        if (!c.live[i]) continue;
        if (fixed_only && !c.fixed[i]) continue; /* fixed values never read non-fixed ones */
        const drift_value *v = drift_graph_value(g, i);
        ebuf *b = NULL;
        double prof_t0 = 0;
        if (prof) {
            drift_backend_sync(be, NULL);
            prof_t0 = prof_now();
        }
        if (cache && c.fixed[i] && cache->have[i]) {
            b = drift_calloc(1, sizeof *b);
            if (!b) { rc = drift_err_set(c.err, DRIFT_E_NOMEM, "exec", "out of memory"); goto done; }
            c.owned[i] = b;
            b->t = cache->t[i];
            b->live = b->pinned = 1;
        } else {
            rc = v->kind == DRIFT_VAL_NODE ? run_node(&c, i, v, &b) : run_leaf(&c, i, v, &b);
            if (rc) goto done;
            if (cache && c.fixed[i] && !b->pinned && c.owned[i] == b) {
                /* keep it for later runs (an aliasing identity cast shares its input's entry; a VIEW or
                   NARROW alias is kept as an entry borrowing its base's, which is fixed and kept too) */
                cache->t[i] = b->t;
                cache->have[i] = 1;
                cache->alias[i] = b->base != NULL;
                b->pinned = 1;
            }
        }
        if (prof) {
            drift_backend_sync(be, NULL);
            int k = v->kind == DRIFT_VAL_NODE ? (int)v->op.kind : DRIFT_OP_COUNT;
            prof_t[k] += prof_now() - prof_t0;
            prof_n[k]++;
        }
        c.slot[i] = b;
        b->refs += c.uses[i];
        if (v->site && in->on_site && !fixed_only) {
            rc = in->on_site(v->site, &b->t, in->user, c.err);
            if (rc) {
                if (c.err->code == DRIFT_OK)
                    drift_err_set(c.err, rc, v->site, "the site callback stopped the run at '%s'", v->site);
                goto done;
            }
        }
        if (v->kind == DRIFT_VAL_NODE)
            for (int k = 0; k < v->op.n_in; k++) buf_unref(&c, c.slot[v->in[k]]);
        if (b->refs <= 0) buf_release(&c, b);
    }
    if (out && output >= 0) rc = download(&c, c.slot[output], out);
    if (prof) {
        double tot = 0;
        for (int k = 0; k <= DRIFT_OP_COUNT; k++) tot += prof_t[k];
        fprintf(stderr, "exec profile (%s): %.3f ms in nodes\n", drift_backend_name(be), tot * 1e3);
        for (int k = 0; k <= DRIFT_OP_COUNT; k++)
            if (prof_n[k])
                fprintf(stderr, "  %-18s %5ld x %9.3f ms  %5.1f%%\n", k == DRIFT_OP_COUNT ? "(leaves)" : drift_op_name((drift_op_kind)k),
                        prof_n[k], prof_t[k] * 1e3, tot > 0 ? 100 * prof_t[k] / tot : 0);
        fprintf(stderr, "  kernels %lld; aliases: %lld identity casts, %lld views, %lld narrows; casts skipped %lld, folded %lld\n",
                (long long)c.st.kernels, (long long)c.st.identity_casts, (long long)c.st.views_aliased,
                (long long)c.st.narrows_aliased, (long long)c.st.casts_skipped, (long long)c.st.casts_folded);
    }
done:
    if (opts && opts->stats) *opts->stats = c.st;
    if (c.owned) {
        /* release everything first (an alias drops its reference on a base that is still allocated), then free */
        for (int i = 0; i < n; i++) buf_release(&c, c.owned[i]);
        for (int i = 0; i < n; i++) drift_free(c.owned[i]);
    }
    drift_fuse_plan_free(&fplan);
    drift_free(c.slot);
    drift_free(c.fixed);
    drift_free(c.owned);
    drift_free(c.uses);
    drift_free(c.live);
    if (rc && out) drift_exec_result_free(out);
    return rc;
}
