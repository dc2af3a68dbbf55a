/* A MoE's routed slices at another batch (docs/invariance.md "Captured graphs").
 *
 * DeepSeek-style expert dispatch (HiDream's moe_infer) sorts the flattened top-k expert ids,
 * counts the tokens per expert on the host and slices the sorted order by those counts:
 *
 *     idxs = flat_expert_indices.argsort()
 *     tokens_per_expert = flat_expert_indices.bincount().cpu().numpy().cumsum(0)
 *     for i, end in enumerate(tokens_per_expert): ... idxs[start:end] ...
 *
 * The capture burns the counts of the recorded data into the slices' bounds; no node of the
 * graph computes them. At another batch (or other data) the counts differ, so the recorded
 * bounds would hand each expert another expert's tokens. Here those slices are recognised (the
 * slices of one argsort, or of an elementwise function of it such as `idxs // top_k`, whose
 * intervals tile it, one per expert in order) and, while re-batching, each takes the interval of
 * its expert at this batch's counts. The counts are those the forward found (re-counted:
 * drift_capture_model_set_count names the interval's first slice), else the recorded ones scaled
 * by the batch; a check node per interval (NONZERO of ids == k, the count as its shape) stops
 * the forward naming the count the data gives, which invariance's recount takes. */
#include <string.h>

#include "formats/alloc.h"

#include "replay/capture/aten_lower_internal.h"

enum { MAX_EXPERTS = 1024 };

/* args[i] of node k, or NULL. */
static const drift_json_value *arg_at(const drift_aten_graph *g, int k, size_t i) {
    const drift_json_value *a = g->nodes[k].args;
    return a && a->type == DRIFT_JSON_ARRAY && i < a->n_items ? &a->items[i] : NULL;
}

/* The node arg i of node k refers to, or -1. */
static int ref_at(const drift_aten_graph *g, int k, size_t i) {
    const drift_json_value *v = arg_at(g, k, i);
    return v && al_node_ref(v) ? aten_find(g, v->members[0].value.str) : -1;
}

static int int_at(const drift_aten_graph *g, int k, size_t i, int64_t dflt, int64_t *out) {
    const drift_json_value *v = arg_at(g, k, i);
    if (!v || v->type == DRIFT_JSON_NULL) return *out = dflt, 1;
    if (v->type != DRIFT_JSON_NUMBER || !v->is_int) return 0;
    return *out = v->integer, 1;
}

static int target_is(const drift_aten_graph *g, int k, const char *base) {
    const char *t = g->nodes[k].target;
    const size_t n = strlen(base);
    return g->nodes[k].op == ATEN_CALL && t && !strncmp(t, "aten.", 5) && !strncmp(t + 5, base, n) && t[5 + n] == '.';
}

/* The argsort node that FX node k is, or is an elementwise function of through its first
 * operand (`idxs // top_k`), or -1. */
static int argsort_source(const drift_aten_graph *g, int k) {
    static const char *const elementwise[] = {"floor_divide", "div", "remainder", "to", "_to_copy", "clone", "alias"};
    for (int depth = 0; k >= 0 && depth < 4; depth++) {
        if (target_is(g, k, "argsort")) return k;
        int ok = 0;
        for (size_t i = 0; i < sizeof elementwise / sizeof *elementwise && !ok; i++) ok = target_is(g, k, elementwise[i]);
        if (!ok) return -1;
        k = ref_at(g, k, 0);
    }
    return -1;
}

/* The number of experts E of the router whose flattened top-k ids argsort a sorts: its input
 * reached through views from getitem(topk(scores, k, dim), 1), E = scores' size at dim; 0 when
 * the ids come from elsewhere. */
static int64_t experts_of(lctx *c, int a) {
    const drift_aten_graph *g = c->g;
    int k = ref_at(g, a, 0);
    for (int depth = 0; k >= 0 && depth < 6; depth++) {
        if (target_is(g, k, "view") || target_is(g, k, "reshape") || target_is(g, k, "_unsafe_view") ||
            target_is(g, k, "flatten") || target_is(g, k, "contiguous") || target_is(g, k, "clone")) {
            k = ref_at(g, k, 0);
            continue;
        }
        int64_t item;
        if (g->nodes[k].op != ATEN_CALL || strcmp(g->nodes[k].target, "getitem") || !int_at(g, k, 1, -1, &item) || item != 1)
            return 0;
        const int t = ref_at(g, k, 0);
        if (t < 0 || !target_is(g, t, "topk")) return 0;
        const int s = ref_at(g, t, 0);
        int64_t dim, sh[DRIFT_MAX_DIMS];
        int nd;
        if (s < 0 || !int_at(g, t, 2, -1, &dim)) return 0;
        drift_err keep = *c->err;
        const int bad = al_val_shape(c, g->nodes[s].val, &nd, sh);
        *c->err = keep;
        if (bad || nd < 1) return 0;
        if (dim < 0) dim += nd;
        return dim >= 0 && dim < nd ? sh[dim] : 0;
    }
    return 0;
}

/* The routed partition of argsort a: the distinct intervals [lo, hi) of the dim-0, step-1
 * slices of a (or of an elementwise function of it), sorted; 1 when they tile [0, n_rec) with
 * at most cap of them. first[i]: the first slice node of interval i. */
static int partition(const drift_aten_graph *g, int a, int64_t n_rec, int cap, int64_t *lo, int64_t *hi, int *first,
                     int *m) {
    *m = 0;
    for (int k = 0; k < g->n; k++) {
        if (!target_is(g, k, "slice") || argsort_source(g, ref_at(g, k, 0)) != a) continue;
        int64_t dim, s, e, step;
        if (!int_at(g, k, 1, 0, &dim) || !int_at(g, k, 2, 0, &s) || !int_at(g, k, 3, INT64_MAX, &e) ||
            !int_at(g, k, 4, 1, &step) || (dim != 0 && dim != -1) || step != 1)
            return 0;
        if (s < 0) s += n_rec;
        if (e < 0) e += n_rec;
        if (e > n_rec) e = n_rec;
        if (s < 0 || e <= s) return 0;
        int i = 0;
        while (i < *m && lo[i] < s) i++;
        if (i < *m && lo[i] == s) {
            if (hi[i] != e) return 0; /* two intervals from one start: not one expert each */
            continue;
        }
        if (*m == cap) return 0;
        memmove(lo + i + 1, lo + i, sizeof *lo * (size_t)(*m - i));
        memmove(hi + i + 1, hi + i, sizeof *hi * (size_t)(*m - i));
        memmove(first + i + 1, first + i, sizeof *first * (size_t)(*m - i));
        lo[i] = s, hi[i] = e, first[i] = k, (*m)++;
    }
    if (*m < 1 || lo[0] != 0 || hi[*m - 1] != n_rec) return 0;
    for (int i = 1; i < *m; i++)
        if (lo[i] != hi[i - 1]) return 0;
    return 1;
}

/* The runtime check of interval k: NONZERO(ids == k) with `count` rows, named after the
 * interval's first slice (the current node), so a forward whose data gives another count stops
 * with "(nonzero NAME): N non-zero elements where the recording had count" for the recount.
 * *id: its [count] column. */
static int emit_check(lctx *c, int ids, int64_t k, int64_t count, int *id) {
    int kk, eq, rc;
    if ((rc = al_fill_like(c, ids, (double)k, &kk)) || (rc = al_cmp(c, DRIFT_BINARY_EQ, ids, kk, &eq))) return rc;
    return al_mask_indices(c, eq, count, id);
}

int al_routed_slice_bind(lctx *c, const aten_view *o, int check) {
    /* the slice's values through a WHERE whose condition reads the check: an exact copy that makes
       the check live (the executor runs what the output needs) */
    int sl, cond, w, rc;
    if ((rc = al_mat_view(c, o, &sl)) || (rc = al_cmp(c, DRIFT_BINARY_EQ, check, check, &cond))) return rc;
    const int in[3] = {cond, sl, sl};
    if ((rc = al_emit(c, DRIFT_OP_WHERE, NULL, 3, in, DRIFT_RULE_PROMOTE, &w))) return rc;
    return al_set_result(c, w);
}

/* The partition of one argsort, kept in the lowering context: the slices of a MoE layer are
 * lowered one after another, and each would otherwise scan the whole graph again. */
struct al_routed {
    int a;                   /* the argsort node (-1: none yet) */
    int ok;                  /* its slices tile it, one interval per expert */
    int64_t n_rec, experts;  /* its recorded length; the router's expert count */
    int m;                   /* intervals */
    int64_t lo[MAX_EXPERTS], hi[MAX_EXPERTS];
    int first[MAX_EXPERTS];  /* each interval's first slice node */
};

/* c->routed filled for argsort a (recomputed only for another argsort); DRIFT_E_NOMEM or a 'val'
 * error, else DRIFT_OK with ->ok saying whether a's slices are a routed partition. */
static int routed_of(lctx *c, int a) {
    if (c->routed && c->routed->a == a) return DRIFT_OK;
    if (!c->routed && !(c->routed = drift_malloc(sizeof *c->routed)))
        return drift_err_set(c->err, DRIFT_E_NOMEM, "aten", "out of memory");
    struct al_routed *r = c->routed;
    r->a = a, r->ok = 0;
    int nd, rc;
    int64_t sh[DRIFT_MAX_DIMS];
    if ((rc = al_val_shape(c, c->g->nodes[a].val, &nd, sh))) return rc;
    if (nd != 1) return DRIFT_OK;
    r->n_rec = sh[0];
    if (!partition(c->g, a, r->n_rec, MAX_EXPERTS, r->lo, r->hi, r->first, &r->m)) return DRIFT_OK;
    r->experts = experts_of(c, a);
    r->ok = r->experts >= 1;
    return DRIFT_OK;
}

int al_routed_slice(lctx *c, int j, int64_t n_now, int64_t *start, int64_t *end, int *routed, int *check) {
    *routed = 0;
    *check = -1;
    if (!c->rb_from) return DRIFT_OK;
    const drift_aten_graph *g = c->g;
    const int a = argsort_source(g, j);
    if (a < 0) return DRIFT_OK;
    int rc = routed_of(c, a);
    if (rc || !c->routed->ok) return rc;
    const struct al_routed *r = c->routed;
    const int64_t n_rec = r->n_rec, *lo = r->lo, *hi = r->hi;
    const int *first = r->first, m = r->m;
    if (m != r->experts)
        return FAIL(c, "a MoE's routed slices of '%s' (the token counts per expert burnt in at the recorded data): %d "
                       "of its %lld experts got tokens at the recorded batch, and the graph holds the code of those "
                       "only; at another batch the others may get tokens", g->nodes[a].name, m, (long long)r->experts);
    int64_t s0 = *start;
    if (s0 < 0) s0 += n_rec;
    int k = 0;
    while (k < m && lo[k] != s0) k++;
    if (k == m) return DRIFT_OK;
    /* this batch's count of each interval: re-counted, else the recorded one scaled by the batch */
    int64_t s = 0, cnt = 0;
    for (int i = 0; i <= k; i++) {
        const int64_t rec = hi[i] - lo[i];
        const int64_t re = c->rb_nz ? c->rb_nz[first[i]] : -1;
        cnt = re >= 0 ? re : (rec * n_now) % n_rec == 0 ? rec * n_now / n_rec : rec;
        if (i < k) s += cnt;
    }
    if (cnt < 1)
        return FAIL(c, "expert %d of the MoE sorted by '%s' gets no tokens at this batch (drift replays no zero-size "
                       "tensors)", k, g->nodes[a].name);
    if (cnt > n_now) /* a count from the data never exceeds the ids; a scaled one neither */
        return FAIL(c, "expert %d of the MoE sorted by '%s': %lld tokens of %lld", k, g->nodes[a].name, (long long)cnt,
                    (long long)n_now);
    if (c->cur == first[k]) { /* the check, once per interval */
        int ids;
        if ((rc = al_mat_fx(c, ref_at(g, a, 0), &ids)) || (rc = emit_check(c, ids, k, cnt, check))) return rc;
    }
    /* kept inside the tensor (an earlier interval's count not yet the data's) so the program lowers;
       the check stops a forward whose counts differ */
    *start = s + cnt <= n_now ? s : n_now - cnt;
    *end = *start + cnt;
    *routed = 1 + (cnt != hi[k] - lo[k]);
    return DRIFT_OK;
}
