/* Graph executor (exec.h): the run loop over a plan (exec_plan.h) and the device cache. */
#include "replay/exec/exec.h"

#include "formats/alloc.h"
#include "replay/exec/exec_keys.h"
#include "replay/exec/exec_plan.h"
#include "replay/exec/exec_snapshot.h"
#include "replay/exec/exec_profile.h"
#include "replay/ir/fuse.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    uint64_t *key;        /* per value id: its structural key (exec_keys.h), for the next graph */
    size_t adopted;       /* entries handed from one graph to the next (drift_exec_cache_adopted) */
    int adopt;            /* drift_exec_cache_set_adopt: 0 (default) empties the cache for another graph */
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
    drift_free(c->key);
    c->t = NULL;
    c->have = NULL;
    c->alias = NULL;
    c->key = NULL;
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

typedef struct keyed {
    uint64_t key;
    int id;
} keyed;

static int keyed_cmp(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    return x->key < y->key ? -1 : x->key > y->key ? 1 : (x->id > y->id) - (x->id < y->id);
}

/* Moves the old graph's entries (storage owners only) whose structural key,
 * dtype and shape a value of the new graph has into that value's slot: a
 * probe's graph differs from the last one in a few parameters' casts, and
 * everything else it would upload and cast again is already on the device. */
static void cache_adopt(drift_exec_cache *c, const drift_graph *g, drift_tensor *t, unsigned char *have,
                        const uint64_t *key, int n) {
    keyed *old = drift_malloc((size_t)c->n * sizeof *old);
    if (!old) return; /* nothing adopted: the new graph computes its values again */
    int m = 0;
    for (int i = 0; i < c->n; i++)
        if (c->have[i] && !c->alias[i]) old[m].key = c->key[i], old[m].id = i, m++;
    qsort(old, (size_t)m, sizeof *old, keyed_cmp);
    for (int j = 0; j < n; j++) {
        const drift_value *v = drift_graph_value(g, j);
        int lo = 0, hi = m;
        while (lo < hi) { /* the first old entry with key >= key[j] */
            int mid = lo + (hi - lo) / 2;
            if (old[mid].key < key[j]) lo = mid + 1;
            else hi = mid;
        }
        for (; lo < m && old[lo].key == key[j]; lo++) {
            int i = old[lo].id;
            if (!c->have[i]) continue; /* already moved */
            const drift_tensor *o = &c->t[i];
            int ok = o->dtype == v->dtype && o->ndim == v->ndim;
            for (int d = 0; ok && d < v->ndim; d++) ok = o->shape[d] == v->shape[d];
            if (!ok) continue;
            t[j] = *o;
            have[j] = 1;
            c->have[i] = 0; /* moved: not released by cache_clear */
            c->adopted++;
            break;
        }
    }
    drift_free(old);
}

static int cache_bind(drift_exec_cache *c, const drift_graph *g, drift_err *err) {
    if (c->g && c->g == g && c->n == drift_graph_count(g)) return DRIFT_OK;
    int n = drift_graph_count(g);
    size_t nn = (size_t)(n ? n : 1);
    const char *off = getenv("DRIFT_EXEC_ADOPT"); /* "0": every graph computes its values afresh (A/B) */
    const int adopt = c->adopt && !(off && !strcmp(off, "0"));
    drift_tensor *t = drift_calloc(nn, sizeof *t);
    unsigned char *have = drift_calloc(nn, 1), *alias = drift_calloc(nn, 1);
    uint64_t *key = adopt ? drift_calloc(nn, sizeof *key) : NULL; /* keys only where a next graph may adopt */
    if (!t || !have || !alias || (adopt && !key)) {
        drift_free(t), drift_free(have), drift_free(alias), drift_free(key);
        cache_clear(c);
        return drift_err_set(err, DRIFT_E_NOMEM, "exec", "out of memory (cache)");
    }
    if (adopt) {
        drift_exec_value_keys(g, key);
        if (c->n > 0 && c->key && drift_exec_cache_count(c) > 0) cache_adopt(c, g, t, have, key, n);
    }
    cache_clear(c);
    c->t = t, c->have = have, c->alias = alias, c->key = key;
    c->n = n;
    c->g = g;
    return DRIFT_OK;
}

size_t drift_exec_cache_adopted(const drift_exec_cache *c) { return c ? c->adopted : 0; }

void drift_exec_cache_set_adopt(drift_exec_cache *c, int on) {
    if (c) c->adopt = on != 0;
}

void drift_exec_cache_detach(drift_exec_cache *c) {
    if (c) c->g = NULL; /* the entries and their keys stay for the next graph's cache_bind */
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
    drift_err *err;
    const unsigned char *fixed; /* the plan's: with a cache, value depends on parameters/buffers only */
    int alias;            /* VIEW/NARROW aliasing on (and the backend can) */
    const drift_fuse_plan *fuse; /* NULL: no cast folding */
    drift_exec_stats st;
    /* prefix reuse (exec.h): capture at boundaries, or restore from one */
    const drift_exec_options *opts;
    const int *last_use;        /* capture: per value, the last live reader (INT_MAX: the output) */
    int next_capture;
    const drift_exec_snapshot *resume;
    const int *restore;         /* resume: per value, its index in the snapshot, or -1 */
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

/* A buffer whose values this run's inputs hold (a captured graph's per-step
 * user input other than the three boundary ones): it is not fixed. */
static int step_buffer(const drift_exec_inputs *in, const drift_value *v) {
    return v->kind == DRIFT_VAL_BUFFER && in->inputs && drift_hostset_find(in->inputs, v->name) != NULL;
}

static int run_leaf(ectx *c, int id, const drift_value *v, ebuf **out) {
    const drift_hostset *set = v->kind == DRIFT_VAL_PARAM ? c->in->params
                               : v->kind == DRIFT_VAL_BUFFER ? c->in->buffers : c->in->inputs;
    if (step_buffer(c->in, v)) set = c->in->inputs;
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
    if (v->kind == DRIFT_VAL_PARAM && c->in->await_param) {
        int rc = c->in->await_param(v->name, c->in->await_user, c->err);
        if (rc) return rc;
    }
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
    const drift_tensor *ins[DRIFT_OP_MAX_IN] = {NULL};
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

/* Materialises live value i into *out: from the cache when it holds it,
 * else by running it (and keeping it in the cache when it is fixed). */
static int make_value(ectx *c, drift_exec_cache *cache, int i, const drift_value *v, ebuf **out) {
    const int fixed = cache && c->fixed[i];
    if (fixed && cache->have[i]) {
        ebuf *b = drift_calloc(1, sizeof *b);
        if (!b) return drift_err_set(c->err, DRIFT_E_NOMEM, "exec", "out of memory");
        c->owned[i] = b;
        b->t = cache->t[i];
        b->live = b->pinned = 1;
        *out = b;
        return DRIFT_OK;
    }
    int rc = v->kind == DRIFT_VAL_NODE ? run_node(c, i, v, out) : run_leaf(c, i, v, out);
    if (rc) return rc;
    ebuf *b = *out;
    if (fixed && !b->pinned && c->owned[i] == b) {
        /* keep it for later runs (an aliasing identity cast shares its input's entry; a VIEW or
           NARROW alias is kept as an entry borrowing its base's, which is fixed and kept too) */
        cache->t[i] = b->t;
        cache->have[i] = 1;
        cache->alias[i] = b->base != NULL;
        b->pinned = 1;
    }
    return DRIFT_OK;
}

/* Value id from the snapshot being resumed, in the dtype this run stores it
 * in (exact: the resume check allowed only the same dtype or a rounding that
 * cast folding makes anyway). */
static int restore_value(ectx *c, int id, const drift_value *v, drift_dtype dt, ebuf **out) {
    const drift_exec_snapshot *s = c->resume;
    int j = c->restore[id];
    int rc = new_buf(c, id, dt, v, out);
    if (rc) return rc;
    if (s->f64[j]) rc = drift_backend_upload_f64(c->be, &(*out)->t, s->f64[j], c->err);
    else rc = drift_backend_upload_f32(c->be, &(*out)->t, s->f32[j], c->err);
    if (rc) drift_err_prefix(c->err, "restoring value %d of the prefix", id);
    return rc;
}

/* The snapshot at boundary k: host copies of the live values < k that a
 * value >= k reads, but the cached (fixed) ones. *out NULL when it would
 * exceed the budget. */
static int take_snapshot(ectx *c, const drift_exec_plan *p, int k, size_t *budget, drift_exec_snapshot **out) {
    *out = NULL;
    int count = 0;
    size_t bytes = 0;
    for (int j = 0; j < k; j++) {
        if (!p->live[j] || c->last_use[j] < k || (p->fixed && p->fixed[j])) continue;
        if (!c->slot[j] || !c->slot[j]->live) return DRIFT_OK; /* not held: no snapshot here */
        count++;
        bytes += (size_t)c->slot[j]->t.numel * (drift_dtype_wide(c->slot[j]->t.dtype) ? sizeof(double) : sizeof(float));
    }
    if (budget && bytes > *budget) return DRIFT_OK;
    drift_exec_snapshot *s = drift_exec_snapshot_alloc(k, count);
    if (!s) return drift_err_set(c->err, DRIFT_E_NOMEM, "exec", "out of memory (prefix snapshot)");
    int q = 0, rc = DRIFT_OK;
    for (int j = 0; j < k && !rc; j++) {
        if (!p->live[j] || c->last_use[j] < k || (p->fixed && p->fixed[j])) continue;
        const drift_tensor *t = &c->slot[j]->t;
        s->ids[q] = j;
        s->dtype[q] = t->dtype;
        s->numel[q] = t->numel;
        size_t n = (size_t)(t->numel ? t->numel : 1);
        if (drift_dtype_wide(t->dtype)) {
            if (!(s->f64[q] = drift_malloc(n * sizeof(double)))) rc = DRIFT_E_NOMEM;
            else rc = drift_backend_download_f64(c->be, t, s->f64[q], c->err);
        } else {
            if (!(s->f32[q] = drift_malloc(n * sizeof(float)))) rc = DRIFT_E_NOMEM;
            else rc = drift_backend_download_f32(c->be, t, s->f32[q], c->err);
        }
        if (rc == DRIFT_E_NOMEM) drift_err_set(c->err, rc, "exec", "out of memory (prefix snapshot)");
        q++;
    }
    if (rc) {
        drift_exec_snapshot_free(s);
        return rc;
    }
    s->bytes = bytes;
    if (budget) *budget -= bytes;
    *out = s;
    return DRIFT_OK;
}

/* Snapshots whose boundary is i (before value i runs). */
static int capture_at(ectx *c, const drift_exec_plan *p, int i) {
    const drift_exec_options *o = c->opts;
    while (o && c->next_capture < o->n_capture && o->capture_at[c->next_capture] <= i) {
        int q = c->next_capture++;
        if (o->capture_at[q] != i || i <= 0) continue; /* out of order or empty: not taken */
        int rc = take_snapshot(c, p, i, o->capture_budget, &o->captured[q]);
        if (rc) return rc;
    }
    return DRIFT_OK;
}

/* The run loop over a plan: every live value in id order, the site callback,
 * releases after the last use, the output's download. */
static int run_plan(ectx *c, const drift_exec_plan *p, drift_exec_cache *cache, int fixed_only, drift_exec_profile *prof,
                    drift_exec_result *out) {
    const drift_exec_inputs *in = c->in;
    for (int i = 0; i < p->n; i++) {
        if (c->last_use) {
            int rc = capture_at(c, p, i);
            if (rc) return rc;
        }
        if (!p->live[i]) continue;
        if (fixed_only && !p->fixed[i]) continue; /* fixed values never read non-fixed ones */
        const drift_value *v = drift_graph_value(c->g, i);
        ebuf *b = NULL;
        drift_exec_profile_begin(prof, c->be);
        const int restored = c->restore && c->restore[i] >= 0;
        int rc = restored
                     ? restore_value(c, i, v, v->kind == DRIFT_VAL_NODE && c->fuse ? c->fuse->out[i] : v->dtype, &b)
                     : make_value(c, cache, i, v, &b);
        if (rc) return rc;
        drift_exec_profile_end(prof, c->be, v->kind == DRIFT_VAL_NODE ? (int)v->op.kind : DRIFT_OP_COUNT);
        c->slot[i] = b;
        b->refs += p->uses[i];
        if (v->site && in->on_site && !fixed_only) {
            rc = in->on_site(v->site, &b->t, in->user, c->err);
            if (rc) {
                if (c->err->code == DRIFT_OK)
                    drift_err_set(c->err, rc, v->site, "the site callback stopped the run at '%s'", v->site);
                return rc;
            }
        }
        if (v->kind == DRIFT_VAL_NODE && !restored) /* a restored value read nothing */
            for (int k = 0; k < v->op.n_in; k++) buf_unref(c, c->slot[v->in[k]]);
        if (b->refs <= 0) buf_release(c, b);
    }
    int rc = out && p->output >= 0 ? download(c, c->slot[p->output], out) : DRIFT_OK;
    drift_exec_profile_print(prof, c->be, &c->st, stderr);
    return rc;
}

/* Per live value, the id of its last live reader (INT_MAX for the output, -1 for none). */
static int plan_last_use(const drift_graph *g, const drift_exec_plan *p, int **out, drift_err *err) {
    int *lu = drift_malloc((size_t)(p->n ? p->n : 1) * sizeof *lu);
    if (!lu) return drift_err_set(err, DRIFT_E_NOMEM, "exec", "out of memory");
    for (int i = 0; i < p->n; i++) lu[i] = -1;
    for (int i = 0; i < p->n; i++) {
        const drift_value *v = drift_graph_value(g, i);
        if (!p->live[i] || v->kind != DRIFT_VAL_NODE) continue;
        for (int k = 0; k < v->op.n_in; k++) lu[v->in[k]] = i;
    }
    if (p->output >= 0) lu[p->output] = INT_MAX;
    *out = lu;
    return DRIFT_OK;
}

/* Resume from snapshot s: which values below its boundary this run needs
 * (read at or after it, or by a needed cached value), each cached one run
 * again (from the device cache) and each other restored from s. When s lacks
 * one, or holds it in a dtype this run cannot get from it exactly, the run
 * starts from the beginning (plan untouched, *restore NULL). Otherwise the
 * plan's live and uses are cut to what runs. */
static int plan_resume(const drift_graph *g, drift_exec_plan *p, const drift_exec_snapshot *s, ectx *c, int **restore) {
    *restore = NULL;
    const int k = s->k;
    if (k <= 0 || k > p->n) return DRIFT_OK;
    size_t nn = (size_t)p->n;
    unsigned char *need = drift_calloc(nn, 1);
    int *rs = drift_malloc(nn * sizeof *rs);
    if (!need || !rs) {
        drift_free(need);
        drift_free(rs);
        return drift_err_set(c->err, DRIFT_E_NOMEM, "exec", "out of memory");
    }
    int ok = 1;
    if (p->output >= 0 && p->output < k) need[p->output] = 1;
    for (int i = p->n - 1; i >= 0 && ok; i--) {
        rs[i] = -1;
        const drift_value *v = drift_graph_value(g, i);
        if (!p->live[i] || (i < k && !need[i])) continue;
        if (i < k && !p->fixed[i]) {
            int j = drift_exec_snapshot_find(s, i);
            drift_dtype want = v->kind == DRIFT_VAL_NODE && p->fused ? p->fuse.out[i] : v->dtype;
            /* the same dtype, or the assigned fp32 value of a producer this
             * run folds or a cast it skips: rounding it is what folding does */
            ok = j >= 0 && s->numel[j] == v->numel &&
                 (s->dtype[j] == want || (s->dtype[j] == DRIFT_F32 && v->dtype == DRIFT_F32 &&
                                          (want == DRIFT_BF16 || want == DRIFT_F16)));
            rs[i] = j;
            continue;
        }
        if (v->kind == DRIFT_VAL_NODE)
            for (int q = 0; q < v->op.n_in; q++)
                if (v->in[q] < k) need[v->in[q]] = 1;
    }
    if (ok) {
        int64_t skipped = 0;
        for (int i = 0; i < k; i++) {
            if (p->live[i] && !(need[i] && rs[i] < 0)) skipped++;
            if (!need[i]) p->live[i] = 0;
        }
        memset(p->uses, 0, nn * sizeof *p->uses);
        for (int i = 0; i < p->n; i++) {
            const drift_value *v = drift_graph_value(g, i);
            if (!p->live[i] || v->kind != DRIFT_VAL_NODE || rs[i] >= 0) continue;
            for (int q = 0; q < v->op.n_in; q++) p->uses[v->in[q]]++;
        }
        if (p->output >= 0) p->uses[p->output]++;
        c->st.resumed_at = k;
        c->st.prefix_skipped = skipped;
        c->resume = s;
        c->restore = rs;
        *restore = rs;
    } else {
        drift_free(rs);
    }
    drift_free(need);
    return DRIFT_OK;
}

int drift_exec_run_ex(const drift_graph *g, const drift_backend *be, const drift_exec_inputs *in,
                      const drift_exec_options *opts, drift_exec_result *out, drift_err *err) {
    if (out) memset(out, 0, sizeof *out);
    if (opts && opts->stats) memset(opts->stats, 0, sizeof *opts->stats);
    if (!g || !be || !in) return drift_err_set(err, DRIFT_E_INTERNAL, "exec", "drift_exec_run: NULL argument");
    if (!drift_graph_is_assigned(g))
        return drift_err_set(err, DRIFT_E_INPUT, "exec", "the graph has no explicit dtypes (run drift_assign_dtypes first)");
    if (out && drift_graph_output(g) < 0) return drift_err_set(err, DRIFT_E_INPUT, "exec", "the graph has no output");
    drift_err local;
    drift_err_clear(&local);
    ectx c = {.g = g, .be = be, .in = in, .err = err ? err : &local};
    /* Values that depend on parameters and buffers only: cacheable. */
    drift_exec_cache *cache = in->cache && in->cache->be == be ? in->cache : NULL;
    if (in->cache && !cache) return drift_err_set(c.err, DRIFT_E_INTERNAL, "exec", "the cache belongs to another backend");
    const int fixed_only = opts && opts->fixed_only;
    if (fixed_only && (!cache || out))
        return drift_err_set(c.err, DRIFT_E_INTERNAL, "exec", "fixed_only needs a cache and no output");
    int rc = cache ? cache_bind(cache, g, c.err) : DRIFT_OK;
    if (rc) return rc;
    c.alias = drift_backend_can_alias(be) && switch_on(opts ? opts->alias : -1, "DRIFT_EXEC_ALIAS");
    drift_exec_plan plan;
    memset(&plan, 0, sizeof plan);
    int *last_use = NULL, *restore = NULL;
    const int n = drift_graph_count(g);
    size_t nn = (size_t)(n ? n : 1);
    unsigned char *per_step = NULL; /* buffers this run's inputs replace */
    if (cache && in->inputs) {
        if (!(per_step = drift_calloc(nn, 1))) return drift_err_set(c.err, DRIFT_E_NOMEM, "exec", "out of memory");
        for (int i = 0; i < n; i++) per_step[i] = (unsigned char)step_buffer(in, drift_graph_value(g, i));
    }
    const drift_exec_plan_opts po = {.observe_sites = in->on_site != NULL, .cached = cache != NULL,
                                     .fuse_casts = switch_on(opts ? opts->fuse_casts : -1, "DRIFT_EXEC_FUSE_CASTS"),
                                     .per_step = per_step};
    rc = drift_exec_plan_build(g, &po, &plan, c.err);
    drift_free(per_step); /* the plan keeps only its fixed[] */
    if (rc) goto done;
    c.fixed = plan.fixed;
    c.fuse = plan.fused ? &plan.fuse : NULL;
    c.opts = opts;
    c.st.resumed_at = -1;
    c.st.live_nodes = plan.n_live;
    if (opts && opts->n_capture > 0 && !fixed_only && (rc = plan_last_use(g, &plan, &last_use, c.err))) goto done;
    c.last_use = last_use;
    if (opts && opts->resume && cache && !in->on_site && !fixed_only &&
        (rc = plan_resume(g, &plan, opts->resume, &c, &restore)))
        goto done;
    c.slot = drift_calloc(nn, sizeof *c.slot);
    c.owned = drift_calloc(nn, sizeof *c.owned);
    if (!c.slot || !c.owned) {
        rc = drift_err_set(c.err, DRIFT_E_NOMEM, "exec", "out of memory");
        goto done;
    }
    const char *prof_env = getenv("DRIFT_EXEC_PROFILE");
    drift_exec_profile prof;
    drift_exec_profile_init(&prof, prof_env && prof_env[0] == '1');
    rc = run_plan(&c, &plan, cache, fixed_only, &prof, out);
done:
    if (opts && opts->stats) *opts->stats = c.st;
    if (c.owned) {
        /* release everything first (an alias drops its reference on a base that is still allocated), then free */
        for (int i = 0; i < n; i++) buf_release(&c, c.owned[i]);
        for (int i = 0; i < n; i++) drift_free(c.owned[i]);
    }
    drift_exec_plan_free(&plan);
    drift_free(last_use);
    drift_free(restore);
    drift_free(c.slot);
    drift_free(c.owned);
    if (rc && out) drift_exec_result_free(out);
    return rc;
}
