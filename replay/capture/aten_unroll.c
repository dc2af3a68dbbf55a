/* Loops over the samples that torch.export unrolled at the recorded batch (docs/invariance.md
 * "Captured graphs"): HunyuanVideo-1.5 and HunyuanImage zip over the batch (an `unbind` of each
 * per-sample tensor, a body per sample, a `stack` of the results); Mochi's attention picks each
 * sample with `select`/`slice` and joins the bodies with a `cat`. The program at another batch
 * runs the body once per sample of that batch: this pass rewrites the graph's JSON so that it
 * does, before it is lowered (aten_unroll.h).
 *
 * Iteration i of a loop starts at a source: getitem(unbind(x, 0), i), select(x, 0, i) or
 * slice(x, 0, i, i + 1) of a tensor x whose dim 0 is the recorded batch. Every node computed
 * from iteration i's sources belongs to iteration i; a join (cat/stack whose list holds
 * iterations 0..N-1 in order, N the recorded batch) ends the loop. At a batch N' iteration 0
 * stays and iterations 1..N'-1 are copies of it (its nodes renamed NAME__bJ, their sources
 * indexing sample J; the recorded iterations 1..N-1 go); the joins list the N' iterations. A
 * source whose iteration reaches a node that is no join (another iteration's node, the output,
 * an op that writes in place) is no loop (a lone x[0:1]) and is left alone.
 *
 * A loop may also end in writes instead of a join (Lumina2's rope tables in dispatch mode: a
 * zeros(B, L, 3) buffer filled one sample at a time through select(buf, 0, i), then read whole):
 * an op that writes in place into its own iteration's rows belongs to the iteration. Such a
 * loop is unrolled only where every recorded iteration is iteration 0 but for the sample index
 * (the same ops, the same numbers, helpers and constants of equal values: the samples' lengths
 * are equal), since the copies at another batch are iteration 0's. */
#include "replay/capture/aten_unroll.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "formats/json.h"
#include "replay/capture/aten_internal.h"

typedef struct un_node {
    const drift_json_value *obj; /* the node object */
    const char *name, *target;
    const drift_json_value *args;
    int src;     /* a source: its iteration (0.. N-1), else -1 */
    int x;       /* a source: the tensor it indexes (node index), else -1 */
    int on;      /* a source still taken as one */
    int tag;     /* the iteration it belongs to, -1 none */
    int from;    /* the source its tag came from */
    int join;    /* 1: a join */
    int unbind;  /* 1: an unbind or split whose getitems are sources */
    /* a source: its loop's recorded and new counts; a split's chunk (0: one sample per iteration),
     * its first piece's rows and the rows at the new batch */
    int64_t n1, n2, chunk, rows0, rows2;
    int loop;    /* an unbind or split: one of its sources */
    int write;   /* an op of an iteration that writes that iteration's rows in place */
    int cjoin;   /* a join of a per-sample constant (const_joins): its one item repeated per sample */
    int wbuf;    /* a factory whose leading dim is the recorded batch, written one sample at a time */
} un_node;

typedef struct un_ctx {
    un_node *nd;
    int n;
    int *slot; /* open addressing over names */
    size_t cap;
    int64_t from, to;
    const int *batched; /* per node: 1 the batch in dim 0 (NULL: not known) */
    const drift_json_value *inputs, *constants; /* the document's, to compare constants */
    int no_writes;      /* 1: an op that writes in place ends no iteration (the loops that do were unlike) */
    unsigned char *fed; /* per node: computed from a buffer a loop writes (its batch is that buffer's), or NULL */
    int lists;          /* the graph's lists of samples were stacked (aten_listin.c): an output that lists the
                           iterations is a join too, and the recorded iterations must be alike */
} un_ctx;

static size_t hash_s(const char *s) {
    size_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int find(const un_ctx *c, const char *name) {
    for (size_t i = hash_s(name) & (c->cap - 1);; i = (i + 1) & (c->cap - 1)) {
        if (c->slot[i] < 0) return -1;
        if (!strcmp(c->nd[c->slot[i]].name, name)) return c->slot[i];
    }
}

static const char *str_of(const drift_json_value *o, const char *k) {
    const drift_json_value *v = o && o->type == DRIFT_JSON_OBJECT ? drift_json_object_get(o, k) : NULL;
    return v && v->type == DRIFT_JSON_STRING ? v->str : NULL;
}

static int ref_of(const un_ctx *c, const drift_json_value *v) {
    if (!v || v->type != DRIFT_JSON_OBJECT || v->n_members != 1 || strcmp(v->members[0].key, "node") ||
        v->members[0].value.type != DRIFT_JSON_STRING)
        return -1;
    return find(c, v->members[0].value.str);
}

static int int_at(const drift_json_value *a, size_t i, int64_t *out) {
    if (!a || a->type != DRIFT_JSON_ARRAY || i >= a->n_items || a->items[i].type != DRIFT_JSON_NUMBER || !a->items[i].is_int)
        return 0;
    *out = a->items[i].integer;
    return 1;
}

/* dim 0 of node k's value (-1: not a tensor) */
static int64_t dim0(const un_ctx *c, int k) {
    const drift_json_value *v = k >= 0 ? drift_json_object_get(c->nd[k].obj, "val") : NULL;
    const drift_json_value *s = v && v->type == DRIFT_JSON_OBJECT ? drift_json_object_get(v, "shape") : NULL;
    int64_t d;
    return s && int_at(s, 0, &d) ? d : -1;
}

/* 1 for a factory (zeros, empty, full, ones and their new_* forms): a buffer a loop may fill. */
static int is_factory(const char *target) {
    static const char *const f[] = {"aten.zeros.", "aten.empty.", "aten.full.", "aten.ones.", "aten.new_zeros.",
                                    "aten.new_empty.", "aten.new_full.", "aten.new_ones."};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        if (!strncmp(target, f[i], strlen(f[i]))) return 1;
    return 0;
}

/* Node k as a source: its iteration and the tensor it indexes. */
static void classify(un_ctx *c, int k) {
    un_node *u = &c->nd[k];
    u->src = u->x = -1;
    const drift_json_value *a = u->args;
    if (!a || a->type != DRIFT_JSON_ARRAY || a->n_items < 2) return;
    int x = ref_of(c, &a->items[0]);
    int64_t d = -1, i = -1, e = -1, st = 1;
    if (!strcmp(u->target, "getitem") && x >= 0 && int_at(a, 1, &i)) {
        const un_node *ub = &c->nd[x];
        const drift_json_value *ua = ub->args;
        int xx = ua && ua->type == DRIFT_JSON_ARRAY && ua->n_items >= 1 ? ref_of(c, &ua->items[0]) : -1;
        if (xx < 0 || (c->batched && c->batched[xx] != 1 && c->batched[xx] != -1)) return;
        const int64_t rows = dim0(c, xx);
        if (!strcmp(ub->target, "aten.unbind.int")) {
            if ((ua->n_items >= 2 && (!int_at(ua, 1, &d) || d != 0)) || rows != c->from || i < 0 || i >= c->from) return;
            u->n1 = c->from, u->n2 = c->to, u->chunk = 0;
        } else if (!strcmp(ub->target, "aten.split_with_sizes.default")) {
            /* the batch-joined rows split back into one piece per sample (ZImage's
               feats_cat.split(item_seqlens)): pieces of one size, one per recorded sample */
            const drift_json_value *sz = ua->n_items >= 2 ? &ua->items[1] : NULL;
            int64_t s0 = 0, si = 0;
            if (!sz || sz->type != DRIFT_JSON_ARRAY || (int64_t)sz->n_items != c->from || !int_at(sz, 0, &s0) || s0 < 1 ||
                (ua->n_items >= 3 && (!int_at(ua, 2, &d) || d != 0)) || rows != s0 * c->from || i < 0 || i >= c->from)
                return;
            for (size_t p = 1; p < sz->n_items; p++)
                if (!int_at(sz, p, &si) || si != s0) return;
            u->n1 = c->from, u->n2 = c->to, u->chunk = 0;
        } else if (!strcmp(ub->target, "aten.split.Tensor")) { /* chunks of the rows (WanAnimate's B*T frames) */
            int64_t ch = 0;
            if (!int_at(ua, 1, &ch) || ch < 1 || (ua->n_items >= 3 && (!int_at(ua, 2, &d) || d != 0))) return;
            if (rows < 1 || rows % c->from) return;
            const int64_t n1 = (rows + ch - 1) / ch, r2 = rows / c->from * c->to;
            if (i < 0 || i >= n1) return;
            u->n1 = n1, u->n2 = (r2 + ch - 1) / ch, u->chunk = ch, u->rows0 = rows < ch ? rows : ch, u->rows2 = r2;
        } else {
            return;
        }
        u->src = (int)i;
        u->x = xx;
        return;
    }
    if (x < 0 || dim0(c, x) != c->from || !int_at(a, 1, &d) || d != 0 ||
        (c->batched && c->batched[x] != 1 && c->batched[x] != -1 && !is_factory(c->nd[x].target) &&
         !(c->fed && c->fed[x])))
        return;
    u->n1 = c->from, u->n2 = c->to, u->chunk = 0;
    if (!strcmp(u->target, "aten.select.int") && a->n_items == 3 && int_at(a, 2, &i) && i >= 0 && i < c->from) {
        u->src = (int)i;
        u->x = x;
    } else if (!strcmp(u->target, "aten.slice.Tensor") && a->n_items >= 4 && int_at(a, 2, &i) && int_at(a, 3, &e) &&
               (a->n_items < 5 || int_at(a, 4, &st)) && st == 1 && i >= 0 && i < c->from && e == i + 1) {
        u->src = (int)i;
        u->x = x;
    }
}

/* Collects in refs (up to cap) the nodes v refers to. */
static int collect(const un_ctx *c, const drift_json_value *v, int *refs, int n, int cap) {
    if (!v) return n;
    int r = ref_of(c, v);
    if (r >= 0) {
        if (n < cap) refs[n] = r;
        return n + 1;
    }
    if (v->type == DRIFT_JSON_ARRAY)
        for (size_t i = 0; i < v->n_items; i++) n = collect(c, &v->items[i], refs, n, cap);
    else if (v->type == DRIFT_JSON_OBJECT)
        for (size_t i = 0; i < v->n_members; i++) n = collect(c, &v->members[i].value, refs, n, cap);
    return n;
}

/* 1 if node k is a join: cat/stack whose list holds iterations 0..N-1 in order, nothing else tagged. */
static int is_join(const un_ctx *c, int k) {
    const un_node *u = &c->nd[k];
    const int list_out = c->lists && !strcmp(str_of(u->obj, "op") ? str_of(u->obj, "op") : "", "output");
    if (strcmp(u->target, "aten.cat.default") && strcmp(u->target, "aten.stack.default") && !list_out) return 0;
    const drift_json_value *a = u->args;
    if (!a || a->type != DRIFT_JSON_ARRAY || a->n_items < 1 || a->items[0].type != DRIFT_JSON_ARRAY ||
        !a->items[0].n_items)
        return 0;
    const int r0 = ref_of(c, &a->items[0].items[0]);
    if (r0 < 0 || c->nd[r0].tag != 0 || a->items[0].n_items != (size_t)c->nd[c->nd[r0].from].n1) return 0;
    if (list_out && c->nd[c->nd[r0].from].chunk) return 0; /* a list of per-sample outputs, not of chunks */
    for (size_t i = 0; i < a->items[0].n_items; i++) {
        int r = ref_of(c, &a->items[0].items[i]);
        if (r < 0 || c->nd[r].tag != (int)i) return 0;
    }
    for (size_t i = 1; i < a->n_items; i++) {
        int refs[8], m = collect(c, &a->items[i], refs, 0, 8);
        for (int j = 0; j < m && j < 8; j++)
            if (c->nd[refs[j]].tag >= 0) return 0;
    }
    return 1;
}

/* 1 for an op that writes its operand in place (aten.copy_, fill_, index_put_): a loop that
 * writes each sample's rows into a buffer (Lumina2's position ids) has no join to extend. */
static int in_place(const char *target) {
    if (strncmp(target, "aten.", 5)) return 0;
    const char *dot = strchr(target + 5, '.');
    const size_t n = dot ? (size_t)(dot - target) : strlen(target);
    return n > 5 && target[n - 1] == '_';
}

/* The operands of node u that carry an iteration into it, into refs (up to cap); their count. The
 * operand whose dtype alone type_as takes (diffusers' `t_embedder(t).type_as(x[0])`: the first
 * sample's dtype, at every batch) carries none. */
static int operands(const un_ctx *c, const un_node *u, int *refs, int cap) {
    if (!strcmp(u->target, "aten.type_as.default") && u->args && u->args->type == DRIFT_JSON_ARRAY && u->args->n_items == 2)
        return collect(c, &u->args->items[0], refs, 0, cap);
    const int m = collect(c, u->args, refs, 0, cap);
    return collect(c, drift_json_object_get(u->obj, "kwargs"), refs, m, cap);
}

/* One pass of the iterations; 0 when consistent, 1 with the offending sources switched off, -1 when
 * a node has more operands than refs holds (cap). */
static int propagate(un_ctx *c, int *refs, int cap) {
    int bad = 0;
    for (int k = 0; k < c->n; k++) {
        un_node *u = &c->nd[k];
        u->tag = -1;
        u->join = u->cjoin;
        u->write = 0;
        if (u->cjoin) continue; /* a join of per-sample constants takes no iteration */
        if (u->src >= 0 && u->on && c->nd[u->x].tag < 0) {
            u->tag = u->src;
            u->from = k;
            continue;
        }
        const int m = operands(c, u, refs, cap);
        if (m > cap) return -1; /* more operands than refs holds: not unrolled */
        int t = -1, conflict = 0;
        for (int j = 0; j < m; j++) {
            const un_node *r = &c->nd[refs[j]];
            if (r->tag < 0) continue;
            if (t >= 0 && r->tag != t) conflict = 1;
            if (t < 0) t = r->tag, u->from = r->from;
        }
        if (t < 0) continue;
        const int is_out = !strcmp(str_of(u->obj, "op") ? str_of(u->obj, "op") : "", "output");
        if ((!is_out || c->lists) && is_join(c, k)) { /* the output of a list model may list its samples */
            u->join = 1;
            continue;
        }
        if (!conflict && !is_out && !in_place(u->target)) {
            u->tag = t;
            continue;
        }
        const int dst = !conflict && !is_out && u->args && u->args->type == DRIFT_JSON_ARRAY && u->args->n_items
                            ? ref_of(c, &u->args->items[0]) : -1;
        if (dst >= 0 && c->nd[dst].tag == t && !c->no_writes) { /* writes its own iteration's rows: part of it */
            u->tag = t;
            u->write = 1;
            continue;
        }
        for (int j = 0; j < m; j++) /* not a loop: the sources that reached here are switched off */
            if (c->nd[refs[j]].tag >= 0) c->nd[c->nd[refs[j]].from].on = 0;
        bad = 1;
    }
    return bad;
}

/* Classifies every node, switches on each source (chunks_only: the splits' alone), propagates
 * the iterations until they settle and counts the joins and iteration 0's writes. The number of
 * sources on; 0 when there is none, -1 when the iterations do not settle (nothing unrolled). */
static int tag_loops(un_ctx *c, int chunks_only, int *refs, int cap, int *joins, int *writes) {
    int on = 0;
    *joins = *writes = 0;
    for (int k = 0; k < c->n; k++) {
        classify(c, k);
        c->nd[k].on = c->nd[k].src >= 0 && (!chunks_only || c->nd[k].chunk);
        on += c->nd[k].on;
    }
    if (!on) return 0;
    int bad = 1;
    for (int round = 0; round <= c->n && bad > 0; round++) bad = propagate(c, refs, cap);
    if (bad) return -1;
    for (int k = 0; k < c->n; k++) *joins += c->nd[k].join, *writes += c->nd[k].write && c->nd[k].tag == 0;
    return on;
}

/* ---- iterations alike (loops that end in writes) ----------------------------------------- */

static int json_equal(const drift_json_value *a, const drift_json_value *b) {
    if (a->type != b->type) return 0;
    switch (a->type) {
    case DRIFT_JSON_NULL: return 1;
    case DRIFT_JSON_BOOL: return a->boolean == b->boolean;
    case DRIFT_JSON_NUMBER: return a->is_int == b->is_int && (a->is_int ? a->integer == b->integer : a->number == b->number);
    case DRIFT_JSON_STRING: return a->str_len == b->str_len && !memcmp(a->str, b->str, a->str_len);
    case DRIFT_JSON_ARRAY:
        if (a->n_items != b->n_items) return 0;
        for (size_t i = 0; i < a->n_items; i++)
            if (!json_equal(&a->items[i], &b->items[i])) return 0;
        return 1;
    case DRIFT_JSON_OBJECT:
        if (a->n_members != b->n_members) return 0;
        for (size_t i = 0; i < a->n_members; i++)
            if (strcmp(a->members[i].key, b->members[i].key) || !json_equal(&a->members[i].value, &b->members[i].value))
                return 0;
        return 1;
    }
    return 0;
}

/* The value of placeholder k when it is a constant the document holds inline, else NULL. */
static const drift_json_value *constant_of(const un_ctx *c, int k) {
    if (!c->inputs || c->inputs->type != DRIFT_JSON_ARRAY || !c->constants || c->constants->type != DRIFT_JSON_OBJECT)
        return NULL;
    for (size_t i = 0; i < c->inputs->n_items; i++) {
        const drift_json_value *in = &c->inputs->items[i];
        const char *node = str_of(in, "node"), *kind = str_of(in, "kind"), *target = str_of(in, "target");
        if (!node || !kind || !target || strcmp(node, c->nd[k].name) || strcmp(kind, "constant")) continue;
        const drift_json_value *v = drift_json_object_get(c->constants, target);
        return v && v->type == DRIFT_JSON_OBJECT && drift_json_object_get(v, "data") ? v : NULL;
    }
    return NULL;
}

typedef struct alike_ctx {
    const un_ctx *c;
    const int *pos; /* per node: its place in its iteration's list, -1 untagged */
    int t;          /* the iteration compared with iteration 0 */
} alike_ctx;

static int alike(const alike_ctx *a, const drift_json_value *va, const drift_json_value *vb, int depth);

/* Untagged nodes ra and rb compute the same values: one node, or the same op on alike arguments
 * (depth more levels), or constants of equal values. */
static int equivalent(const alike_ctx *a, int ra, int rb, int depth) {
    const un_ctx *c = a->c;
    if (ra == rb) return 1;
    if (depth <= 0) return 0;
    const char *op = str_of(c->nd[ra].obj, "op"), *opb = str_of(c->nd[rb].obj, "op");
    if (op && opb && !strcmp(op, "placeholder") && !strcmp(opb, "placeholder")) { /* constants of equal values */
        const drift_json_value *x = constant_of(c, ra), *y = constant_of(c, rb);
        return x && y && json_equal(x, y);
    }
    if (strcmp(c->nd[ra].target, c->nd[rb].target)) return 0;
    if (!c->nd[ra].args || !c->nd[rb].args || !alike(a, c->nd[ra].args, c->nd[rb].args, depth - 1)) return 0;
    const drift_json_value *ka = drift_json_object_get(c->nd[ra].obj, "kwargs"), *kb = drift_json_object_get(c->nd[rb].obj, "kwargs");
    return (!ka && !kb) || (ka && kb && alike(a, ka, kb, depth - 1));
}

/* Argument trees va (of an iteration-0 node) and vb (iteration t's) alike: the same literals,
 * references to the same place of their iterations, or untagged equivalents. */
static int alike(const alike_ctx *a, const drift_json_value *va, const drift_json_value *vb, int depth) {
    const un_ctx *c = a->c;
    const int ra = ref_of(c, va), rb = ref_of(c, vb);
    if (ra >= 0 || rb >= 0) {
        if (ra < 0 || rb < 0) return 0;
        if (c->nd[ra].tag == 0 && c->nd[rb].tag == a->t) return a->pos[ra] == a->pos[rb];
        if (c->nd[ra].tag < 0 && c->nd[rb].tag < 0) return equivalent(a, ra, rb, depth);
        return 0;
    }
    if (va->type != vb->type) return 0;
    if (va->type == DRIFT_JSON_ARRAY) {
        if (va->n_items != vb->n_items) return 0;
        for (size_t i = 0; i < va->n_items; i++)
            if (!alike(a, &va->items[i], &vb->items[i], depth)) return 0;
        return 1;
    }
    if (va->type == DRIFT_JSON_OBJECT) {
        if (va->n_members != vb->n_members) return 0;
        for (size_t i = 0; i < va->n_members; i++)
            if (strcmp(va->members[i].key, vb->members[i].key) || !alike(a, &va->members[i].value, &vb->members[i].value, depth))
                return 0;
        return 1;
    }
    return json_equal(va, vb);
}

/* 1 if a source's argument i is its sample index (select's and slice's 2 and 3, getitem's 1). */
static int index_arg(const un_node *u, size_t i) {
    if (!strcmp(u->target, "getitem")) return i == 1;
    return i == 2 || (i == 3 && !strcmp(u->target, "aten.slice.Tensor"));
}

/* 1 if every iteration 1.. of the loops is iteration 0 but for the sample index; else 0 with the
 * first pair that differs in *x0 (iteration 0's node) and *xt (iteration *t's), both -1 where the
 * iterations have different node counts (*n0, *nt). */
static int iterations_alike(const un_ctx *c, int *pos, int *x0, int *xt, int *t_bad, int *n0, int *nt) {
    int64_t n1 = 0;
    int len0 = 0;
    for (int k = 0; k < c->n; k++) {
        pos[k] = -1;
        if (c->nd[k].tag < 0) continue;
        if (c->nd[c->nd[k].from].n1 > n1) n1 = c->nd[c->nd[k].from].n1;
    }
    for (int k = 0; k < c->n; k++)
        if (c->nd[k].tag == 0) pos[k] = len0++;
    for (int t = 1; t < n1; t++) {
        int lt = 0;
        for (int k = 0; k < c->n; k++)
            if (c->nd[k].tag == t) pos[k] = lt++;
        *x0 = *xt = -1, *t_bad = t, *n0 = len0, *nt = lt;
        if (lt != len0) return 0;
        const alike_ctx a = {c, pos, t};
        int i0 = 0, it = 0;
        for (int p = 0; p < len0; p++) {
            while (c->nd[i0].tag != 0) i0++;
            while (c->nd[it].tag != t) it++;
            const un_node *x = &c->nd[i0], *y = &c->nd[it];
            *x0 = i0, *xt = it;
            if (strcmp(x->target, y->target) || x->write != y->write || (x->src >= 0) != (y->src >= 0)) return 0;
            const drift_json_value *xa = x->args, *ya = y->args;
            if (!xa || !ya || xa->type != DRIFT_JSON_ARRAY || ya->type != DRIFT_JSON_ARRAY || xa->n_items != ya->n_items)
                return 0;
            for (size_t i = 0; i < xa->n_items; i++)
                if (!(x->src >= 0 && x->on && index_arg(x, i)) && !alike(&a, &xa->items[i], &ya->items[i], 4)) return 0;
            const drift_json_value *xk = drift_json_object_get(x->obj, "kwargs"), *yk = drift_json_object_get(y->obj, "kwargs");
            if ((xk != NULL) != (yk != NULL) || (xk && !alike(&a, xk, yk, 4))) return 0;
            i0++, it++;
        }
    }
    return 1;
}

/* 1 if node k is the placeholder of a user input. */
static int user_input(const un_ctx *c, int k) {
    if (!c->inputs || c->inputs->type != DRIFT_JSON_ARRAY) return 0;
    for (size_t i = 0; i < c->inputs->n_items; i++) {
        const char *node = str_of(&c->inputs->items[i], "node"), *kind = str_of(&c->inputs->items[i], "kind");
        if (node && kind && !strcmp(kind, "user_input") && !strcmp(node, c->nd[k].name)) return 1;
    }
    return 0;
}

/* 1 if node k is a cat along dim 0 of one tensor per recorded sample (c->from), each computed as the
 * first (the same op on the same arguments, constants of equal values: one constant per sample, the
 * samples' lengths equal); the first into *item. 2 where one is not computed as the first (into
 * *bad), 0 when k is no such cat. */
static int cat_of_samples(const un_ctx *c, int k, int *item, int *bad) {
    const un_node *u = &c->nd[k];
    const drift_json_value *a = u->args;
    int64_t d = 0;
    if (strcmp(u->target, "aten.cat.default") || !a || a->type != DRIFT_JSON_ARRAY || !a->n_items ||
        a->items[0].type != DRIFT_JSON_ARRAY || (int64_t)a->items[0].n_items != c->from ||
        (a->n_items >= 2 && (!int_at(a, 1, &d) || d != 0)))
        return 0;
    *item = ref_of(c, &a->items[0].items[0]);
    const alike_ctx ac = {c, NULL, -1};
    for (size_t i = 1; *item >= 0 && i < a->items[0].n_items; i++) {
        const int r = ref_of(c, &a->items[0].items[i]);
        if (r < 0) return 0;
        if (!equivalent(&ac, *item, r, 16)) {
            *bad = r;
            return 2;
        }
    }
    return *item >= 0;
}

/* 1 if node k splits its operand (args[0], a node in cl) along dim 0 into one piece per recorded
 * sample, of one size: split_with_sizes(x, [L] * N), the per-sample split of the joined rows. */
static int split_per_sample(const un_ctx *c, int k, const unsigned char *cl) {
    const un_node *u = &c->nd[k];
    const drift_json_value *a = u->args;
    int64_t d = 0, s0 = 0, si = 0;
    if (strcmp(u->target, "aten.split_with_sizes.default") || !a || a->type != DRIFT_JSON_ARRAY || a->n_items < 2 ||
        a->items[1].type != DRIFT_JSON_ARRAY || (int64_t)a->items[1].n_items != c->from || !int_at(&a->items[1], 0, &s0) ||
        (a->n_items >= 3 && (!int_at(a, 2, &d) || d != 0)))
        return 0;
    for (size_t p = 1; p < a->items[1].n_items; p++)
        if (!int_at(&a->items[1], p, &si) || si != s0) return 0;
    const int x = ref_of(c, &a->items[0]);
    return x >= 0 && cl[x] && dim0(c, x) == s0 * c->from;
}

/* Joins of per-sample constants, in a graph whose lists of samples were stacked (aten_listin.c): a
 * `torch.cat(per_sample)` over a Python list that holds one tensor per sample, each built from the
 * sample's sizes alone (ZImage's pad masks `torch.cat(inner_pad_mask)` and rope positions
 * `torch.cat(pos_ids)`), is a cat of N tensors computed from no input at the recorded batch N, and
 * of B at batch B (the samples run sample 0's code: B copies of the first). Taken as such (cjoin)
 * only where the N tensors are alike (cat_of_samples) and the cat's rows meet the samples' rows:
 * its value, or one computed from it and no input, is split back into one piece per sample
 * (split_with_sizes into N pieces of one size), or meets a value computed from an input with as
 * many rows in dim 0, more than 1 (`where(mask, pad_token, feats)` over the joined samples' rows;
 * one row would be the batch dim of a [1, L, D] sample, which broadcasts as it is). Runs before the
 * iterations are tagged (every tag -1). dep and cl are scratch, one byte per node. */
static void const_joins(un_ctx *c, unsigned char *dep, unsigned char *cl, int *refs, int cap, int *unlike, int *u0,
                        int *ui) {
    *unlike = *u0 = *ui = -1;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int k = 0; k < c->n; k++) { /* computed from an input (or a join of constants found) */
            dep[k] = c->nd[k].cjoin || user_input(c, k);
            const int m = collect(c, c->nd[k].args, refs, 0, cap);
            for (int j = 0; j < m && j < cap && !dep[k]; j++) dep[k] = dep[refs[j]];
        }
        for (int k = 0; k < c->n; k++) {
            int item = -1, bad = -1, meets = 0, kind = c->nd[k].cjoin ? 0 : cat_of_samples(c, k, &item, &bad);
            if (!kind || dep[item] || (kind == 2 && dep[bad])) continue;
            memset(cl, 0, (size_t)c->n);
            cl[k] = 1;
            for (int j = k + 1; j < c->n && !meets; j++) {
                const int m = collect(c, c->nd[j].args, refs, 0, cap);
                int mine = -1, other = -1;
                for (int r = 0; r < m && r < cap; r++) {
                    if (cl[refs[r]]) mine = refs[r];
                    else if (dep[refs[r]]) other = refs[r];
                }
                if (mine < 0) continue;
                if (!dep[j]) cl[j] = 1;
                meets = split_per_sample(c, j, cl) || (other >= 0 && dim0(c, mine) > 1 && dim0(c, mine) == dim0(c, other));
            }
            if (meets && kind == 1) c->nd[k].cjoin = 1, changed = 1;
            if (meets && kind == 2 && *unlike < 0) *unlike = k, *u0 = item, *ui = bad;
        }
    }
}

/* ---- writing the rewritten document -------------------------------------------------- */

typedef struct un_write {
    const un_ctx *c;
    int clone;      /* the copy's iteration (refs to iteration-0 nodes renamed), -1: none */
} un_write;

/* Copy j of node k: NAME__bJ in a loop over the samples, NAME__cJ over chunks of rows (a split). */
static void clone_name(const un_ctx *c, char *buf, size_t n, int k, int j) {
    snprintf(buf, n, "%s__%c%d", c->nd[k].name, c->nd[c->nd[k].from].chunk ? 'c' : 'b', j);
}

static void put(drift_json_buf *b, const drift_json_value *v, const un_write *w) {
    char nm[1024];
    int r = w && w->clone >= 0 ? ref_of(w->c, v) : -1;
    if (r >= 0 && w->c->nd[r].tag == 0) {
        clone_name(w->c, nm, sizeof nm, r, w->clone);
        drift_json_buf_begin_object(b);
        drift_json_buf_field_string(b, "node", nm);
        drift_json_buf_end_object(b);
        return;
    }
    switch (v->type) {
    case DRIFT_JSON_NULL: drift_json_buf_add_null(b); break;
    case DRIFT_JSON_BOOL: drift_json_buf_add_bool(b, v->boolean); break;
    case DRIFT_JSON_NUMBER:
        if (v->is_int) drift_json_buf_add_int(b, v->integer);
        else drift_json_buf_add_number(b, v->number);
        break;
    case DRIFT_JSON_STRING: drift_json_buf_add_string_n(b, v->str, v->str_len); break;
    case DRIFT_JSON_ARRAY:
        drift_json_buf_begin_array(b);
        for (size_t i = 0; i < v->n_items; i++) put(b, &v->items[i], w);
        drift_json_buf_end_array(b);
        break;
    case DRIFT_JSON_OBJECT:
        drift_json_buf_begin_object(b);
        for (size_t i = 0; i < v->n_members; i++) {
            drift_json_buf_add_key(b, v->members[i].key);
            put(b, &v->members[i].value, w);
        }
        drift_json_buf_end_object(b);
        break;
    }
}

/* Rows of piece j of source s's loop at the new batch (a split's last chunk may be shorter). */
static int64_t piece_rows(const un_node *s, int64_t j) {
    if (!s->chunk) return 1;
    return j < s->n2 - 1 ? s->chunk : s->rows2 - s->chunk * (s->n2 - 1);
}

/* A 'val' written with its shapes' dim 0 of `from` rows made `to` (a split's piece of another size). */
static void put_val(drift_json_buf *b, const drift_json_value *v, int64_t from, int64_t to) {
    if (v->type == DRIFT_JSON_ARRAY) {
        drift_json_buf_begin_array(b);
        for (size_t i = 0; i < v->n_items; i++) put_val(b, &v->items[i], from, to);
        drift_json_buf_end_array(b);
        return;
    }
    if (v->type != DRIFT_JSON_OBJECT) {
        put(b, v, NULL);
        return;
    }
    drift_json_buf_begin_object(b);
    for (size_t i = 0; i < v->n_members; i++) {
        const drift_json_value *x = &v->members[i].value;
        drift_json_buf_add_key(b, v->members[i].key);
        if (strcmp(v->members[i].key, "shape") || x->type != DRIFT_JSON_ARRAY || !x->n_items ||
            x->items[0].type != DRIFT_JSON_NUMBER || x->items[0].integer != from) {
            put(b, x, NULL);
            continue;
        }
        drift_json_buf_begin_array(b);
        drift_json_buf_add_int(b, to);
        for (size_t a = 1; a < x->n_items; a++) put(b, &x->items[a], NULL);
        drift_json_buf_end_array(b);
    }
    drift_json_buf_end_object(b);
}

/* Node k written as iteration j (j < 0: as it is; for a source, its index becomes j). */
static void put_node(drift_json_buf *b, const un_ctx *c, int k, int j) {
    const un_node *u = &c->nd[k];
    const un_write w = {c, j >= 0 && u->tag == 0 ? j : -1};
    /* the loop's source: its counts and pieces */
    int ls = u->tag >= 0 ? u->from : u->unbind ? u->loop : -1;
    if (u->join && !u->cjoin) {
        const int r0 = ref_of(c, &u->args->items[0].items[0]);
        ls = r0 >= 0 ? c->nd[r0].from : -1;
    } else if (u->cjoin) {
        ls = -1; /* its one constant item once per sample of the new batch */
    }
    const un_node *src = ls >= 0 ? &c->nd[ls] : NULL;
    const int64_t n2 = src ? src->n2 : c->to;
    char nm[1024];
    drift_json_buf_begin_object(b);
    for (size_t i = 0; i < u->obj->n_members; i++) {
        const char *key = u->obj->members[i].key;
        const drift_json_value *v = &u->obj->members[i].value;
        drift_json_buf_add_key(b, key);
        if (!strcmp(key, "name") && w.clone >= 0) {
            clone_name(c, nm, sizeof nm, k, j);
            drift_json_buf_add_string(b, nm);
        } else if (!strcmp(key, "args") && w.clone >= 0 && u->src >= 0 && u->on) { /* the source's sample index */
            drift_json_buf_begin_array(b);
            for (size_t a = 0; a < v->n_items; a++) {
                if (a == (strcmp(u->target, "aten.select.int") && strcmp(u->target, "aten.slice.Tensor") ? 1u : 2u))
                    drift_json_buf_add_int(b, j);
                else if (a == 3 && !strcmp(u->target, "aten.slice.Tensor"))
                    drift_json_buf_add_int(b, j + 1);
                else
                    put(b, &v->items[a], &w);
            }
            drift_json_buf_end_array(b);
        } else if (!strcmp(key, "args") && u->join) { /* the N' iterations */
            drift_json_buf_begin_array(b);
            for (size_t a = 0; a < v->n_items; a++) {
                if (a) {
                    put(b, &v->items[a], NULL);
                    continue;
                }
                drift_json_buf_begin_array(b);
                for (int64_t it = 0; it < n2; it++) {
                    const un_write we = {c, it ? (int)it : -1};
                    put(b, &v->items[0].items[0], &we);
                }
                drift_json_buf_end_array(b);
            }
            drift_json_buf_end_array(b);
        } else if (!strcmp(key, "args") && u->unbind && src && !strcmp(u->target, "aten.split_with_sizes.default")) {
            drift_json_buf_begin_array(b); /* one piece of sample 0's size per sample */
            for (size_t a = 0; a < v->n_items; a++) {
                if (a != 1) {
                    put(b, &v->items[a], NULL);
                    continue;
                }
                drift_json_buf_begin_array(b);
                for (int64_t it = 0; it < n2; it++) put(b, &v->items[1].items[0], NULL);
                drift_json_buf_end_array(b);
            }
            drift_json_buf_end_array(b);
        } else if (!strcmp(key, "args") && u->wbuf) { /* the buffer of the new batch's samples */
            const size_t sa = strncmp(u->target, "aten.new_", 9) ? 0 : 1; /* the size list */
            drift_json_buf_begin_array(b);
            for (size_t a = 0; a < v->n_items; a++) {
                const drift_json_value *x = &v->items[a];
                if (a != sa || x->type != DRIFT_JSON_ARRAY || !x->n_items || x->items[0].type != DRIFT_JSON_NUMBER ||
                    x->items[0].integer != c->from) {
                    put(b, x, NULL);
                    continue;
                }
                drift_json_buf_begin_array(b);
                drift_json_buf_add_int(b, c->to);
                for (size_t e = 1; e < x->n_items; e++) put(b, &x->items[e], NULL);
                drift_json_buf_end_array(b);
            }
            drift_json_buf_end_array(b);
        } else if (!strcmp(key, "val") && u->wbuf) { /* a factory's shape is its 'val' (aten_lower.c) */
            put_val(b, v, c->from, c->to);
        } else if (!strcmp(key, "val") && u->unbind && v->type == DRIFT_JSON_ARRAY && v->n_items) { /* N' pieces */
            drift_json_buf_begin_array(b);
            for (int64_t it = 0; it < n2; it++)
                if (src && src->chunk && (src->n1 > 1 || src->n2 > 1)) put_val(b, &v->items[0], src->rows0, piece_rows(src, it));
                else put(b, &v->items[it < (int64_t)v->n_items ? it : 0], NULL);
            drift_json_buf_end_array(b);
        } else if (!strcmp(key, "val") && u->tag == 0 && src && src->chunk && (src->n1 > 1 || src->n2 > 1)) {
            /* a piece of its own size (one piece at both batches is the whole batch, as recorded) */
            put_val(b, v, src->rows0, piece_rows(src, j < 0 ? 0 : j));
        } else {
            put(b, v, &w);
        }
    }
    drift_json_buf_end_object(b);
}

/* A top-level member that names nodes: dropped nodes become null (module_outputs) or go
 * (device_values). */
static void put_names(drift_json_buf *b, const un_ctx *c, const char *key, const drift_json_value *v) {
    if (strcmp(key, "module_outputs") && strcmp(key, "device_values")) {
        put(b, v, NULL);
        return;
    }
    if (v->type != DRIFT_JSON_OBJECT) {
        put(b, v, NULL);
        return;
    }
    drift_json_buf_begin_object(b);
    for (size_t i = 0; i < v->n_members; i++) {
        const drift_json_value *x = &v->members[i].value;
        if (!strcmp(key, "device_values")) {
            int k = find(c, v->members[i].key);
            if (k >= 0 && c->nd[k].tag >= 1) continue;
            drift_json_buf_add_key(b, v->members[i].key);
            put(b, x, NULL);
            continue;
        }
        drift_json_buf_add_key(b, v->members[i].key);
        if (x->type != DRIFT_JSON_ARRAY) {
            put(b, x, NULL);
            continue;
        }
        drift_json_buf_begin_array(b);
        for (size_t a = 0; a < x->n_items; a++) {
            int k = x->items[a].type == DRIFT_JSON_STRING ? find(c, x->items[a].str) : -1;
            if (k >= 0 && c->nd[k].tag >= 1) drift_json_buf_add_null(b);
            else put(b, &x->items[a], NULL);
        }
        drift_json_buf_end_array(b);
    }
    drift_json_buf_end_object(b);
}

/* A list model's samples are copies of sample 0's code: DRIFT_OK when the recorded samples' code
 * is alike (aten_listin.c stacked lists of one shape; the ops may still differ), else the refusal
 * naming the first nodes that differ. */
static int lists_alike(const un_ctx *c, const char *source, drift_err *err) {
    int *pos = drift_malloc((size_t)c->n * sizeof *pos), x0 = -1, xt = -1, t = 0, n0 = 0, nt = 0;
    if (!pos) return drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory");
    const int ok = iterations_alike(c, pos, &x0, &xt, &t, &n0, &nt);
    drift_free(pos);
    if (ok) return DRIFT_OK;
    if (x0 < 0 || xt < 0)
        return drift_err_set(err, DRIFT_E_INPUT, source,
                             "cannot be re-batched: the model takes its samples as lists, and the per-sample code of "
                             "sample %d has %d nodes where sample 0's has %d (up to the joins); the samples of another "
                             "batch run copies of sample 0's code, so only samples whose code is alike are re-batched",
                             t, nt, n0);
    return drift_err_set(err, DRIFT_E_INPUT, source,
                         "cannot be re-batched: the model takes its samples as lists, and the per-sample code of sample "
                         "%d differs from sample 0's at node '%s' (%s), where sample 0 has node '%s' (%s) (another op, "
                         "shape argument or constant); the samples of another batch run copies of sample 0's code, so "
                         "only samples whose code is alike are re-batched",
                         t, c->nd[xt].name, c->nd[xt].target, c->nd[x0].name, c->nd[x0].target);
}

/* The output of a list model that lists its samples' outputs (WanAnimate2's unpatchify: one
 * [C, F, H, W] per sample): a stack of the N' iterations ("list_output", [N', ...]: the batch in
 * dim 0, where invariance reads the sample's row), and the output node returning it. */
static void put_list_output(drift_json_buf *b, const un_ctx *c, int k) {
    const un_node *u = &c->nd[k];
    const drift_json_value *first = &u->args->items[0].items[0];
    const int r0 = ref_of(c, first);
    const un_node *src = &c->nd[c->nd[r0].from];
    const drift_json_value *v0 = drift_json_object_get(c->nd[r0].obj, "val");
    const drift_json_value *s0 = v0 && v0->type == DRIFT_JSON_OBJECT ? drift_json_object_get(v0, "shape") : NULL;
    const char *dt = str_of(v0, "dtype");
    char sn[64] = "list_output";
    while (find(c, sn) >= 0 && strlen(sn) + 1 < sizeof sn) strcat(sn, "_");
    drift_json_buf_begin_object(b);
    drift_json_buf_field_string(b, "name", sn);
    drift_json_buf_field_string(b, "op", "call_function");
    drift_json_buf_field_string(b, "target", "aten.stack.default");
    drift_json_buf_add_key(b, "args");
    drift_json_buf_begin_array(b);
    drift_json_buf_begin_array(b);
    for (int64_t it = 0; it < src->n2; it++) {
        const un_write we = {c, it ? (int)it : -1};
        put(b, first, &we);
    }
    drift_json_buf_end_array(b);
    drift_json_buf_add_int(b, 0);
    drift_json_buf_end_array(b);
    drift_json_buf_add_key(b, "kwargs");
    drift_json_buf_begin_object(b);
    drift_json_buf_end_object(b);
    /* the recorded batch leads: the re-batching finds the batch in dim 0 */
    aten_json_val_lead(b, src->n1, s0, dt ? dt : "float32");
    drift_json_buf_field_string(b, "module", "");
    drift_json_buf_end_object(b);
    drift_json_buf_begin_object(b); /* the output node, returning the stack */
    for (size_t i = 0; i < u->obj->n_members; i++) {
        drift_json_buf_add_key(b, u->obj->members[i].key);
        if (strcmp(u->obj->members[i].key, "args")) {
            put(b, &u->obj->members[i].value, NULL);
            continue;
        }
        drift_json_buf_begin_array(b);
        drift_json_buf_begin_array(b);
        drift_json_buf_begin_object(b);
        drift_json_buf_field_string(b, "node", sn);
        drift_json_buf_end_object(b);
        drift_json_buf_end_array(b);
        drift_json_buf_end_array(b);
    }
    drift_json_buf_end_object(b);
}

int drift_aten_unroll_template(const char *name, char *buf, size_t n) {
    const char *p = NULL; /* the last "__bJ" / "__cJ" that ends the name (an in-place op's "copy___b1" too) */
    for (const char *q = name; (q = strstr(q, "__")); q++)
        if ((q[2] == 'b' || q[2] == 'c') && q[3] && strspn(q + 3, "0123456789") == strlen(q + 3)) p = q;
    if (!p || (size_t)(p - name) >= n) return 0;
    memcpy(buf, name, (size_t)(p - name));
    buf[p - name] = 0;
    return p[2];
}

int drift_aten_unroll(const char *json, size_t len, const char *source, int64_t rb_from, int64_t rb_to,
                      const int *batched, int chunks_only, char **out, size_t *out_len, int *n_loops, drift_err *err) {
    *out = NULL;
    *out_len = 0;
    if (n_loops) *n_loops = 0;
    if (rb_from < 1 || rb_to < 1) return DRIFT_OK;
    drift_json_value *doc = NULL;
    int rc = drift_json_parse(json, len, source, &doc, err);
    if (rc) return rc;
    const drift_json_value *nodes = doc->type == DRIFT_JSON_OBJECT ? drift_json_object_get(doc, "nodes") : NULL;
    if (!nodes || nodes->type != DRIFT_JSON_ARRAY || !nodes->n_items) { /* the parser's checks will say why */
        drift_json_free(doc);
        return DRIFT_OK;
    }
    un_ctx c;
    memset(&c, 0, sizeof c);
    c.n = (int)nodes->n_items;
    c.from = rb_from;
    c.to = rb_to;
    c.batched = batched;
    c.inputs = drift_json_object_get(doc, "inputs");
    c.constants = drift_json_object_get(doc, "constants");
    c.lists = drift_json_object_get(doc, "list_inputs") != NULL;
    for (c.cap = 16; c.cap < (size_t)c.n * 2; c.cap *= 2) {}
    c.nd = drift_calloc((size_t)c.n, sizeof *c.nd);
    c.slot = drift_malloc(c.cap * sizeof *c.slot);
    const int cap = 4096;
    int *refs = drift_malloc((size_t)cap * sizeof *refs);
    if (!c.nd || !c.slot || !refs) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < c.cap; i++) c.slot[i] = -1;
    for (int k = 0; k < c.n; k++) {
        un_node *u = &c.nd[k];
        u->obj = &nodes->items[k];
        u->name = str_of(u->obj, "name");
        u->target = str_of(u->obj, "target");
        u->args = u->obj->type == DRIFT_JSON_OBJECT ? drift_json_object_get(u->obj, "args") : NULL;
        if (!u->name || !u->target) goto done; /* malformed: the parser names it */
        if (find(&c, u->name) >= 0) goto done;
        size_t h = hash_s(u->name) & (c.cap - 1);
        while (c.slot[h] >= 0) h = (h + 1) & (c.cap - 1);
        c.slot[h] = k;
    }
    int joins = 0, writes = 0;
    if (c.lists && !chunks_only) {
        unsigned char *dep = drift_malloc((size_t)c.n * 2);
        if (!dep) {
            rc = drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory");
            goto done;
        }
        for (int k = 0; k < c.n; k++) c.nd[k].tag = -1; /* equivalent() compares untagged nodes */
        int uk, u0, ui;
        const_joins(&c, dep, dep + c.n, refs, cap, &uk, &u0, &ui);
        drift_free(dep);
        if (uk >= 0) {
            const un_node *a = &c.nd[u0], *x = &c.nd[ui];
            rc = drift_err_set(err, DRIFT_E_INPUT, source,
                               "cannot be re-batched: node %d '%s' (%s) in module '%s' joins one constant per "
                               "recorded sample (a list of samples' masks or positions) whose values differ: node '%s' (%s) "
                               "for sample 0, node '%s' (%s) for another (another length or value per sample); the "
                               "samples of another batch run copies of sample 0's code, so only samples whose "
                               "constants are alike are re-batched",
                               uk, c.nd[uk].name, c.nd[uk].target, str_of(c.nd[uk].obj, "module") ? str_of(c.nd[uk].obj, "module") : "",
                               a->name, a->target, x->name, x->target);
            goto done;
        }
    }
    if (tag_loops(&c, chunks_only, refs, cap, &joins, &writes) <= 0) goto done;
    if (writes) { /* what the written buffers feed holds their batch: its rows are per-sample sources too */
        c.fed = drift_calloc((size_t)c.n, 1);
        if (!c.fed) {
            rc = drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory");
            goto done;
        }
        for (int k = 0; k < c.n; k++)
            if (c.nd[k].write && c.nd[k].tag >= 0 && c.nd[c.nd[k].from].x >= 0) c.fed[c.nd[c.nd[k].from].x] = 1;
        for (int k = 0; k < c.n; k++) {
            if (c.fed[k] || c.nd[k].tag >= 0) continue;
            int m = collect(&c, c.nd[k].args, refs, 0, cap);
            for (int j = 0; j < m && j < cap && !c.fed[k]; j++) c.fed[k] = c.fed[refs[j]];
        }
        if (tag_loops(&c, chunks_only, refs, cap, &joins, &writes) <= 0) goto done;
    }
    int *pos = writes ? drift_malloc((size_t)c.n * sizeof *pos) : NULL;
    if (writes && !pos) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory");
        goto done;
    }
    int x0 = -1, xt = -1, tb = 0, n0 = 0, nt = 0;
    const int unlike = writes && !iterations_alike(&c, pos, &x0, &xt, &tb, &n0, &nt);
    drift_free(pos);
    if (unlike) { /* the writes' iterations differ (another length per sample): no write ends a loop */
        c.no_writes = 1;
        if (tag_loops(&c, chunks_only, refs, cap, &joins, &writes) <= 0) goto done;
    }
    joins += writes;
    if (!joins) {
        if (n_loops) *n_loops = joins;
        goto done;
    }
    if (c.lists && rb_from > 1 && (rc = lists_alike(&c, source, err))) goto done;
    for (int k = 0; k < c.n; k++) { /* a buffer [N, ...] that a loop writes one sample at a time: [N', ...] */
        const int s = c.nd[k].write && c.nd[k].tag == 0 ? c.nd[k].from : -1, x = s >= 0 ? c.nd[s].x : -1;
        if (x >= 0 && c.nd[x].tag < 0 && is_factory(c.nd[x].target) && dim0(&c, x) == rb_from) c.nd[x].wbuf = 1;
    }
    for (int k = 0; k < c.n; k++) /* an unbind whose pieces are the iterations gives N' of them */
        if (c.nd[k].tag >= 0 && c.nd[k].src >= 0 && c.nd[k].on && !strcmp(c.nd[k].target, "getitem")) {
            int ub = ref_of(&c, &c.nd[k].args->items[0]);
            if (ub >= 0) c.nd[ub].unbind = 1, c.nd[ub].loop = k;
        }
    drift_json_buf b;
    drift_json_buf_init(&b);
    drift_json_buf_begin_object(&b);
    for (size_t i = 0; i < doc->n_members; i++) {
        const char *key = doc->members[i].key;
        drift_json_buf_add_key(&b, key);
        if (strcmp(key, "nodes")) {
            put_names(&b, &c, key, &doc->members[i].value);
            continue;
        }
        drift_json_buf_begin_array(&b);
        for (int k = 0; k < c.n; k++) {
            if (c.nd[k].tag >= 1) continue; /* iterations 1.. are copies of iteration 0 */
            if (c.nd[k].join && !strcmp(str_of(c.nd[k].obj, "op") ? str_of(c.nd[k].obj, "op") : "", "output")) {
                put_list_output(&b, &c, k);
                continue;
            }
            put_node(&b, &c, k, -1);
            if (c.nd[k].tag == 0)
                for (int64_t j = 1; j < c.nd[c.nd[k].from].n2; j++) put_node(&b, &c, k, (int)j);
        }
        drift_json_buf_end_array(&b);
    }
    drift_json_buf_end_object(&b);
    if (drift_json_buf_status(&b)) {
        drift_json_buf_free(&b);
        rc = drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory writing the unrolled graph");
        goto done;
    }
    *out = drift_json_buf_take(&b);
    *out_len = strlen(*out);
    if (n_loops) *n_loops = joins;
done:
    drift_free(c.fed);
    drift_free(c.nd);
    drift_free(c.slot);
    drift_free(refs);
    drift_json_free(doc);
    return rc;
}
