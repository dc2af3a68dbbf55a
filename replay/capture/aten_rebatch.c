/* Re-batching a static captured graph (docs/invariance.md "Captured graphs"):
 * torch.export records one batch size, and `drift invariance` needs the same
 * program at others. The lowering re-binds the batch while it lowers: user
 * inputs whose dim 0 is the recorded batch get the new one, every op computes
 * its shape from its (re-batched) operands as it always does, and only the
 * ops whose arguments spell a shape (view, reshape, unflatten, expand, repeat,
 * factories) have that argument rewritten. The batch dim of each value is not
 * guessed: it is the one dim where the lowered shape differs from the shape the
 * capture recorded ('val'), by the factor rb_to / rb_from. An op whose result
 * differs otherwise cannot be re-batched and is named (aten_node_fail). A shape
 * argument whose leading entry is the recorded batch (ones(B, L), a repeat of a
 * batch-free tensor by B) may be a coincidence (2 heads at batch 2): the probe
 * (drift_aten_rebatch_probe) takes it as the batch only where the program
 * fails without it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"

#include "replay/capture/aten_listin.h"
#include "replay/capture/aten_lower_internal.h"
#include "replay/capture/aten_unroll.h"

void al_rb_input(lctx *c, int nd, int64_t *shape) {
    if (!c->rb_from || nd < 1 || shape[0] != c->rb_from) return;
    int d = 0;
    if (c->rb_lead && c->rb_lead[c->cur]) {
        /* the probe found its dim 0 is not the batch (2 heads at batch 2): the batch is the next dim
           of the recorded batch's size (HiDream's text-encoder states [layers, B, L, D] with 2
           layers at batch 2), or there is none (kept whole) */
        d = -1;
        for (int k = 1; k < nd && d < 0; k++)
            if (shape[k] == c->rb_from) d = k;
        if (d < 0) return;
    }
    shape[d] = c->rb_to;
    c->fx[c->cur].bax1 = d + 1;
    if (c->rb_dims_out) c->rb_dims_out[c->cur] = d + 1;
}

static void fmt(char *b, size_t n, int nd, const int64_t *s) {
    snprintf(b, n, "[");
    for (int i = 0; i < nd; i++) snprintf(b + strlen(b), n - strlen(b), "%s%lld", i ? ", " : "", (long long)s[i]);
    snprintf(b + strlen(b), n - strlen(b), "]");
}

int al_rb_check(lctx *c, int nd_val, const int64_t *val, int nd, const int64_t *got, int *bax1) {
    int diff = -1, ok = nd == nd_val;
    if (ok && c->rb_from && c->rb_dims_in && bax1) { /* the batch dim imposed: the rest must not move */
        diff = c->rb_dims_in[c->cur] - 1;
        if (diff >= nd) ok = 0;
        for (int i = 0; ok && i < nd; i++)
            ok = got[i] == (i == diff ? val[i] / c->rb_from * c->rb_to : val[i]) && (i != diff || val[i] % c->rb_from == 0);
    } else {
        for (int i = 0; ok && i < nd; i++) {
            if (val[i] == got[i]) continue;
            int scaled = c->rb_from && val[i] % c->rb_from == 0 && val[i] / c->rb_from * c->rb_to == got[i];
            if (diff >= 0 || !scaled) ok = 0;
            else diff = i;
        }
    }
    if (ok) {
        if (bax1) *bax1 = diff + 1;
        if (bax1 && c->rb_dims_out) c->rb_dims_out[c->cur] = diff + 1;
        return DRIFT_OK;
    }
    char a[200], b[200];
    fmt(a, sizeof a, nd_val, val);
    fmt(b, sizeof b, nd, got);
    if (!c->rb_from) return FAIL(c, "shape mismatch: 'val' says %s, the lowering computes %s", a, b);
    return FAIL(c, "cannot be re-batched from batch %lld to %lld: captured %s, at the new batch it computes %s "
                   "(more than the batch dim changed)", (long long)c->rb_from, (long long)c->rb_to, a, b);
}

int64_t al_rb_nonzero_count(const lctx *c, int64_t recorded) {
    return c->rb_from && c->rb_nz && c->rb_nz[c->cur] >= 0 ? c->rb_nz[c->cur] : recorded;
}

static int refs_ragged(const lctx *c, const drift_json_value *v) {
    if (!v) return 0;
    if (al_node_ref(v)) {
        const int k = aten_find(c->g, v->members[0].value.str);
        return k >= 0 && k < c->cur && c->fx[k].ragged;
    }
    if (v->type == DRIFT_JSON_ARRAY)
        for (size_t i = 0; i < v->n_items; i++)
            if (refs_ragged(c, &v->items[i])) return 1;
    if (v->type == DRIFT_JSON_OBJECT)
        for (size_t i = 0; i < v->n_members; i++)
            if (refs_ragged(c, &v->members[i].value)) return 1;
    return 0;
}

int al_rb_ragged(lctx *c) {
    if (!c->rb_from || !c->rb_nz) return 0;
    const aten_node *n = &c->g->nodes[c->cur];
    return c->fx[c->cur].ragged || refs_ragged(c, n->args) || refs_ragged(c, n->kwargs);
}

/* The dim of size list (nd, size) whose prefix product equals the prefix
 * product P before the batch dim of the source: the batch is the outermost
 * factor of its dim in every layout a DiT uses ([B*H, L, D] <-> [B, H, L, D]). */
static int batch_dim_of(const lctx *c, int64_t P, int nd, const int64_t *size) {
    int64_t q = 1;
    for (int b = 0; b < nd; b++) {
        if (size[b] < 0) return -1; /* -1 absorbs the change */
        if (q == P && size[b] % c->rb_from == 0) return b;
        q *= size[b];
        if (q > P) return -1;
    }
    return -1;
}

void al_rb_reshape(const lctx *c, int j, int nd, int64_t *size) {
    const fxv *f = &c->fx[j];
    if (!c->rb_from || !f->bax1) return;
    int64_t P = 1;
    for (int i = 0; i < f->bax1 - 1; i++) P *= f->t.size[i];
    int b = batch_dim_of(c, P, nd, size);
    if (b >= 0) size[b] = size[b] / c->rb_from * c->rb_to;
}

void al_rb_unflatten(const lctx *c, int j, int d, int np, int64_t *parts) {
    const fxv *f = &c->fx[j];
    if (!c->rb_from || f->bax1 != d + 1) return;
    int b = batch_dim_of(c, 1, np, parts);
    if (b >= 0) parts[b] = parts[b] / c->rb_from * c->rb_to;
}

void al_rb_factory(const lctx *c, int nd, int64_t *sh) {
    if (c->rb_from && c->rb_lead && c->rb_lead[c->cur] && nd >= 1 && sh[0] == c->rb_from) sh[0] = c->rb_to;
}

int al_rb_multi_count(lctx *c, int n_val, int n_got) {
    return FAIL(c, "cannot be re-batched from batch %lld to %lld: it gives %d tensors at the recorded batch and %d "
                   "at batch %lld (it splits or unbinds the dim that holds the batch: a loop over the samples, or over "
                   "chunks of the batch, unrolled at the recorded batch)",
                (long long)c->rb_from, (long long)c->rb_to, n_val, n_got, (long long)c->rb_to);
}

/* x (value j) is batch-free and the shape argument (n entries, aligned right with x's dims)
 * spreads its size-1 leading dim by the recorded batch (LTX-Video's rope grid
 * grid.unsqueeze(0).repeat(batch_size, ...), StableAudio3's memory tokens
 * p.unsqueeze(0).expand(batch_size, -1, -1)): that entry becomes the new batch. A recorded
 * batch of 1 cannot tell that factor from any other 1. */
static void batch_free_lead(const lctx *c, const fxv *f, int n, int64_t *arg) {
    if (!c->rb_lead || !c->rb_lead[c->cur]) return; /* the probe decides (drift_aten_rebatch_probe) */
    if (c->rb_from < 2 || f->bax1 || n < 1 || arg[0] != c->rb_from) return;
    const int k = f->t.nd - n; /* the input dim aligned with arg[0] (< 0: a new leading dim) */
    if (k < 0 || f->t.size[k] == 1) arg[0] = c->rb_to;
}

void al_rb_expand(const lctx *c, int j, int nd, int64_t *size) {
    const fxv *f = &c->fx[j];
    if (!c->rb_from) return;
    if (!f->bax1) {
        batch_free_lead(c, f, nd, size);
        return;
    }
    int i = f->bax1 - 1 + nd - f->t.nd;
    if (i >= 0 && i < nd) size[i] = -1;
}

void al_rb_repeat(const lctx *c, int j, int nr, int64_t *reps) { batch_free_lead(c, &c->fx[j], nr, reps); }

int al_rb_align(lctx *c, int *x, int untagged, int bdim, int cat_dim) {
    if (!c->rb_from || !untagged || bdim < 0 || bdim == cat_dim) return DRIFT_OK;
    const drift_value *v = drift_graph_value(c->out, *x);
    if (bdim >= v->ndim) return DRIFT_OK;
    if (v->shape[bdim] != 1)
        return FAIL(c, "cannot be re-batched: an operand of the cat holds %lld rows in dim %d where the others "
                       "hold the batch (%lld)", (long long)v->shape[bdim], bdim, (long long)c->rb_to);
    /* a tensor made at the recorded batch 1 without the batch (a factory, an expand of
     * a parameter): the same row for every sample */
    aten_view ex;
    aten_view_contig(&ex, 0, v->ndim, v->shape);
    ex.size[bdim] = c->rb_to;
    ex.stride[bdim] = 0;
    return al_emit_gather(c, *x, ex.nd, ex.size, ex.stride, 0, x);
}

int al_rb_index_rows(lctx *c, int x, int d, int ij) {
    if (c->rb_from < 2 || c->fx[x].bax1 != d + 1 || c->fx[ij].bax1) return DRIFT_OK;
    return FAIL(c, "cannot be re-batched from batch %lld to %lld: it picks rows of dim %d, which holds the batch, by "
                   "an index that does not (rows addressed by their position in the recorded batch)",
                (long long)c->rb_from, (long long)c->rb_to, d);
}

/* ---- the probe (drift_aten_rebatch_probe) ------------------------------------------ */

/* Marks in mark[] the nodes that v (a node's args or kwargs) refers to. */
static void mark_refs(const drift_aten_graph *g, const drift_json_value *v, unsigned char *mark) {
    if (!v) return;
    if (al_node_ref(v)) {
        int k = aten_find(g, v->members[0].value.str);
        if (k >= 0) mark[k] = 1;
    } else if (v->type == DRIFT_JSON_ARRAY) {
        for (size_t i = 0; i < v->n_items; i++) mark_refs(g, &v->items[i], mark);
    } else if (v->type == DRIFT_JSON_OBJECT) {
        for (size_t i = 0; i < v->n_members; i++) mark_refs(g, &v->members[i].value, mark);
    }
}

void aten_ancestors(const drift_aten_graph *g, int i, unsigned char *mark) {
    memset(mark, 0, (size_t)g->n);
    mark[i] = 1;
    for (int k = i; k >= 0; k--)
        if (mark[k]) {
            mark_refs(g, g->nodes[k].args, mark);
            mark_refs(g, g->nodes[k].kwargs, mark);
        }
}

/* 1 for an op that writes its operand in place (aten.copy_, fill_, index_put_). */
static int writes_in_place(const char *target) {
    if (strncmp(target, "aten.", 5)) return 0;
    const char *dot = strchr(target + 5, '.');
    const size_t n = dot ? (size_t)(dot - target) : strlen(target);
    return n > 5 && target[n - 1] == '_';
}

/* 1 for an op whose result is a view of its first operand (a write into it lands in the operand). */
static int is_view_op(const char *target) {
    static const char *const v[] = {"select", "slice", "view", "unsqueeze", "squeeze", "transpose", "permute",
                                    "expand", "narrow", "as_strided", "diagonal", "alias", "t", "unflatten"};
    char base[96];
    drift_aten_op_base(target, base, sizeof base);
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        if (!strcmp(base, v[i])) return 1;
    return 0;
}

/* The dim-0 extent node k's value records, -1 if none. */
static int64_t val_dim0(const aten_node *n) {
    const drift_json_value *sh = n->val && n->val->type == DRIFT_JSON_OBJECT ? drift_json_object_get(n->val, "shape") : NULL;
    return sh && sh->type == DRIFT_JSON_ARRAY && sh->n_items >= 1 && sh->items[0].type == DRIFT_JSON_NUMBER &&
                   sh->items[0].is_int
               ? sh->items[0].integer
               : -1;
}

/* Node w writes in place into the rows of one sample of a buffer (Lumina2's rope tables:
 * `freqs[i, :len] = ...` unrolled at the recorded batch as copy_(select(buf, 0, i), ...)): the
 * buffer (a value whose dim 0 is the recorded batch rb_from, picked by select/slice along dim 0
 * on the way to the write) and that sample into *sample; else -1. */
static int sample_write_root(const drift_aten_graph *g, int w, int64_t rb_from, int64_t *sample) {
    const aten_node *n = &g->nodes[w];
    if (n->op != ATEN_CALL || !writes_in_place(n->target)) return -1;
    int picked = 0;
    const drift_json_value *a = n->args && n->args->type == DRIFT_JSON_ARRAY && n->args->n_items ? &n->args->items[0] : NULL;
    for (int hops = 0; hops < 64 && a && al_node_ref(a); hops++) {
        const int d = aten_find(g, a->members[0].value.str);
        if (d < 0) return -1;
        const aten_node *x = &g->nodes[d];
        if (x->op != ATEN_CALL || !is_view_op(x->target)) return picked && val_dim0(x) == rb_from ? d : -1;
        const drift_json_value *xa = x->args && x->args->type == DRIFT_JSON_ARRAY ? x->args : NULL;
        const drift_json_value *src = xa && xa->n_items ? &xa->items[0] : NULL;
        const int s = src && al_node_ref(src) ? aten_find(g, src->members[0].value.str) : -1;
        char base[96];
        drift_aten_op_base(x->target, base, sizeof base);
        if (s >= 0 && xa->n_items >= 3 && xa->items[1].type == DRIFT_JSON_NUMBER && xa->items[1].integer == 0 &&
            xa->items[2].type == DRIFT_JSON_NUMBER && (!strcmp(base, "select") || !strcmp(base, "slice")) &&
            val_dim0(&g->nodes[s]) == rb_from) {
            picked = 1;
            *sample = xa->items[2].integer;
        }
        a = src;
    }
    return -1;
}

/* 1 if write node w is iteration 0 of a loop aten_unroll.c unrolled, or one of its copies: the
 * graph writes every sample of the batch it was unrolled for. */
static int unrolled_write(const drift_aten_graph *g, int w) {
    char t[DRIFT_MAX_FQN + 16];
    const char *name = g->nodes[w].name;
    if (drift_aten_unroll_template(name, t, sizeof t) == 'b') return 1;
    snprintf(t, sizeof t, "%s__b1", name);
    return aten_find(g, t) >= 0;
}

/* mark[k] = 1 for each buffer that a node writes into one sample at a time (sample_write_root),
 * unless those writes were unrolled to the batch. */
static void mark_sample_writes(const drift_aten_graph *g, int64_t rb_from, unsigned char *mark) {
    memset(mark, 0, (size_t)g->n + 1);
    int64_t s;
    for (int w = 0; w < g->n; w++) {
        const int r = sample_write_root(g, w, rb_from, &s);
        if (r >= 0 && !unrolled_write(g, w)) mark[r] = 1;
    }
}

/* Replaces err with the refusal of a loop over the samples that writes each sample's rows into a
 * buffer in place, where node `fail` depends on such a buffer: the graph holds the writes of the
 * recorded samples only, so the rows of another batch would never be computed. 1 if so. */
static int explain_sample_writes(const drift_aten_graph *g, int fail, int64_t rb_from, drift_err *err) {
    if (fail < 0 || fail >= g->n) return 0;
    unsigned char *anc = drift_malloc((size_t)g->n + 1);
    int said = 0;
    if (!anc) return 0;
    aten_ancestors(g, fail, anc);
    int64_t s = 0;
    for (int w = 0; w < g->n && !said; w++) {
        const int r = sample_write_root(g, w, rb_from, &s);
        if (r < 0 || !anc[r]) continue;
        const aten_node *wn = &g->nodes[w], *rn = &g->nodes[r];
        drift_err_prefix(err, "cannot be re-batched: node %d '%s' (%s) in module '%s' writes the rows of sample %lld of "
                              "node %d '%s' (%s, dim 0 the recorded batch of %lld) in place: a loop over the samples "
                              "that fills a buffer one sample at a time instead of joining its results (Lumina2's rope "
                              "position ids and frequency tables), and the recorded samples' writes differ (another "
                              "length or value per sample), so no one of them stands for the rows of another batch; "
                              "where it breaks",
                         w, wn->name, wn->target, wn->module, (long long)s, r, rn->name, rn->target, (long long)rb_from);
        said = 1;
    }
    drift_free(anc);
    return said;
}

/* Replaces err with the refusal of a model that takes its samples as lists (WanAnimate2's
 * `hidden_states: list[Tensor]`, each [C, F, H, W]) that were not stacked (aten_listin.c: the
 * lowering is asked for directly): user inputs NAME.0 .. NAME.(rb_from - 1), one tensor per
 * recorded sample, joined into a batch by a cat/stack inside the graph. 1 if so. */
static int explain_list_inputs(const drift_aten_graph *g, int fail, int64_t rb_from, drift_err *err) {
    drift_aten_list l[16];
    const int n = drift_aten_list_find(g, rb_from, l, 16);
    char names[400] = "";
    size_t used = 0;
    int join = -1;
    for (int f = 0; f < n; f++) {
        if (l[f].join < 0) continue; /* a list of something else (T5FilmDecoder's encodings and masks) */
        if (join < 0 || l[f].join < join) join = l[f].join;
        if (used < sizeof names) used += (size_t)snprintf(names + used, sizeof names - used, "%s%s.0", used ? ", " : "", l[f].name);
    }
    if (join < 0) return 0;
    const aten_node *j = &g->nodes[join];
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg,
             "cannot be re-batched: the model takes its samples as lists (user inputs %s: one tensor per sample, %lld "
             "recorded) and node %d '%s' (%s) in module '%s' joins them into a batch; a batch of %lld is a list of "
             "%lld, whose elements the captured program has no inputs for (it holds one copy of the per-element code "
             "per recorded sample, and no batch dim before that join)",
             names, (long long)rb_from, join, j->name, j->target, j->module, (long long)rb_from + 1,
             (long long)rb_from + 1);
    if (fail >= 0 && err->code) drift_err_prefix(err, "%s; where it breaks", msg);
    else drift_err_set(err, DRIFT_E_INPUT, g->source, "%s", msg);
    return 1;
}

/* 1 if the probe may flip node i's default (batch_lead): a shape argument that may spell the
 * recorded batch rb_from in its leading entry (a factory whose captured shape starts with it, a
 * repeat/expand by it: batch-free unless flipped), or a user input other than the latents and
 * text embeddings whose dim 0 is rb_from (the batch unless flipped; a timestep may be a table of
 * noise levels addressed per token, MiniMax-H3's). */
static int lead_candidate(const drift_aten_graph *g, int i, int64_t rb_from) {
    const aten_node *n = &g->nodes[i];
    if (rb_from < 2) return 0; /* at a recorded batch of 1 every 1 would be one */
    if (n->op == ATEN_PLACEHOLDER) {
        const drift_aten_input *in = n->input >= 0 && n->input < g->n_inputs ? &g->inputs[n->input] : NULL;
        const drift_json_value *sh = n->val && n->val->type == DRIFT_JSON_OBJECT ? drift_json_object_get(n->val, "shape") : NULL;
        const int role = in ? drift_graph_input_parse(in->role) : -1;
        return in && in->kind == DRIFT_ATEN_IN_USER && in->is_tensor && (role < 0 || role == DRIFT_INPUT_TIMESTEP) && sh &&
               sh->type == DRIFT_JSON_ARRAY && sh->n_items >= 1 && sh->items[0].type == DRIFT_JSON_NUMBER &&
               sh->items[0].is_int && sh->items[0].integer == rb_from;
    }
    if (n->op != ATEN_CALL) return 0;
    char base[96];
    drift_aten_op_base(n->target, base, sizeof base);
    static const char *const factory[] = {"zeros", "ones", "full", "empty", "new_zeros", "new_ones", "new_full",
                                          "new_empty"};
    for (size_t k = 0; k < sizeof factory / sizeof *factory; k++) {
        if (strcmp(base, factory[k])) continue;
        const drift_json_value *sh = n->val && n->val->type == DRIFT_JSON_OBJECT ? drift_json_object_get(n->val, "shape") : NULL;
        return sh && sh->type == DRIFT_JSON_ARRAY && sh->n_items >= 1 && sh->items[0].type == DRIFT_JSON_NUMBER &&
               sh->items[0].is_int && sh->items[0].integer == rb_from;
    }
    if (strcmp(base, "repeat") && strcmp(base, "expand")) return 0;
    const drift_json_value *a = n->args && n->args->type == DRIFT_JSON_ARRAY && n->args->n_items >= 2 ? &n->args->items[1] : NULL;
    return a && a->type == DRIFT_JSON_ARRAY && a->n_items >= 1 && a->items[0].type == DRIFT_JSON_NUMBER &&
           a->items[0].is_int && a->items[0].integer == rb_from;
}

static int is_tensor_val(const aten_node *n) {
    return n->val && n->val->type == DRIFT_JSON_OBJECT && drift_json_object_get(n->val, "shape");
}

/* 1 if node n's value is a tensor with values (no 0-size dim). */
static int has_values(const aten_node *n) {
    const drift_json_value *sh = is_tensor_val(n) ? drift_json_object_get(n->val, "shape") : NULL;
    if (!sh || sh->type != DRIFT_JSON_ARRAY) return 0;
    for (size_t i = 0; i < sh->n_items; i++)
        if (sh->items[i].type == DRIFT_JSON_NUMBER && sh->items[i].integer == 0) return 0;
    return 1;
}

/* 1 if a node whose values node k reads holds the batch (dims[] > 0); type_as reads only
 * the dtype of its second operand, x.new_zeros(...) only the dtype of x. */
static int refs_batch(const drift_aten_graph *g, int k, const int *dims, unsigned char *scratch) {
    const aten_node *n = &g->nodes[k];
    char base[96];
    drift_aten_op_base(n->target, base, sizeof base);
    if (!strncmp(base, "new_", 4)) return 0;
    memset(scratch, 0, (size_t)g->n);
    if (!strcmp(base, "type_as") && n->args && n->args->type == DRIFT_JSON_ARRAY && n->args->n_items)
        mark_refs(g, &n->args->items[0], scratch);
    else
        mark_refs(g, n->args, scratch), mark_refs(g, n->kwargs, scratch);
    for (int j = 0; j < k; j++)
        if (scratch[j] && dims[j] > 0) return 1;
    return 0;
}

/* Appends to err where, among the nodes that node `fail` depends on (and `fail` itself when
 * self: it was lowered), the batch dim was first lost: a tensor without it computed from one
 * with it (a sample picked by a slice, select or index: a loop over the samples unrolled at the
 * recorded batch). A getitem answers for its split (which records no dim of its own). */
static void explain_lost(const drift_aten_graph *g, int fail, int self, const int *dims, drift_err *err) {
    unsigned char *anc = drift_malloc((size_t)g->n), *scr = drift_malloc((size_t)g->n);
    if (anc && scr && fail >= 0 && fail < g->n) {
        aten_ancestors(g, fail, anc);
        for (int k = 0; k < fail + (self != 0); k++) {
            const aten_node *n = &g->nodes[k];
            if (!anc[k] || n->op != ATEN_CALL || dims[k] > 0 || !has_values(n)) continue;
            int at = k;
            if (!strcmp(n->target, "getitem")) { /* the split it reads */
                memset(scr, 0, (size_t)g->n);
                mark_refs(g, n->args, scr);
                at = -1;
                for (int j = 0; j < k && at < 0; j++)
                    if (scr[j] && !is_tensor_val(&g->nodes[j])) at = j;
                if (at < 0) continue;
            }
            if (!refs_batch(g, at, dims, scr)) continue;
            const aten_node *l = &g->nodes[at];
            size_t len = strlen(err->msg);
            snprintf(err->msg + len, sizeof err->msg - len,
                     "; the batch dim is lost at node %d '%s' (%s) in module '%s': its operand holds the batch, its "
                     "result does not (it picks samples, e.g. a loop over the batch unrolled at the recorded batch)",
                     at, l->name, l->target, l->module);
            break;
        }
    }
    drift_free(anc);
    drift_free(scr);
}

/* The nearest node before `fail` that it depends on, may spell the batch, and was not tried. */
static int next_lead(const drift_aten_graph *g, int fail, int64_t rb_from, const unsigned char *lead,
                     const unsigned char *tried, unsigned char *anc) {
    aten_ancestors(g, fail, anc);
    for (int k = fail; k >= 0; k--)
        if (anc[k] && !lead[k] && !tried[k] && lead_candidate(g, k, rb_from)) return k;
    return -1;
}

/* One lowering of the probe: DRIFT_OK, or the failure in *e with its node in *fail (*outchk: the
 * output's check failed, the output node was lowered). */
static int probe_once(const drift_aten_graph *g, drift_aten_lower_opts *lo, int *dims, int *fail, int *outchk,
                      drift_err *e) {
    drift_graph *probe = NULL;
    drift_err_clear(e);
    *fail = -1;
    *outchk = 0;
    memset(dims, 0, ((size_t)g->n + 1) * sizeof *dims);
    int rc = drift_aten_graph_lower_ex(g, lo, &probe, e);
    drift_graph_free(probe);
    if (!rc) { /* the output must hold the batch in dim 0: the sample's row is read there */
        const aten_node *out = &g->nodes[g->output];
        const drift_json_value *a = out->args && out->args->n_items ? &out->args->items[0] : NULL;
        if (a && a->type == DRIFT_JSON_ARRAY && a->n_items) a = &a->items[0];
        int oj = a && al_node_ref(a) ? aten_find(g, a->members[0].value.str) : -1;
        if (oj < 0 || dims[oj] == 1) return DRIFT_OK;
        if (dims[oj]) rc = aten_node_fail(g, oj, e, "cannot be re-batched: the model's output holds the batch in dim %d, "
                                                     "not in dim 0", dims[oj] - 1);
        else rc = aten_node_fail(g, oj, e, "cannot be re-batched: the model's output holds no batch dim");
        *fail = oj;
        *outchk = 1;
    }
    return rc;
}

int drift_aten_rebatch_probe(const drift_aten_graph *g, const drift_aten_lower_opts *o, int64_t rb_from, int *dims,
                             unsigned char *lead, drift_err *err) {
    const int n = g->n;
    drift_aten_lower_opts lo;
    memset(&lo, 0, sizeof lo);
    if (o) lo = *o;
    int fail = -1, best = -1, last = -1, fail0 = -1, out0 = 0, rc = DRIFT_OK, outchk = 0, n_tent = 0;
    int pair_of = -1; /* a flip tried together with `last`: undone with it when the pair gets no further */
    lo.notes = NULL;
    lo.nonzero_counts = NULL; /* the recorded counts: the probe finds the batch dims, not the data's sizes */
    lo.rebatch_from = rb_from;
    lo.rebatch_to = rb_from + 1;
    lo.batch_dims_out = dims;
    lo.batch_dims_in = NULL;
    lo.batch_lead = lead;
    lo.failed_node = &fail;
    memset(lead, 0, (size_t)n);
    unsigned char *tried = drift_calloc((size_t)n + 1, 1), *anc = drift_malloc((size_t)n + 1);
    int *dims0 = drift_malloc(((size_t)n + 1) * sizeof *dims0), *tent = drift_malloc(((size_t)n + 1) * sizeof *tent);
    drift_err first, e;
    drift_err_clear(&first);
    if (!tried || !anc || !dims0 || !tent) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, "rebatch", "out of memory");
        goto done;
    }
    /* a buffer written one sample at a time is never the batch: flipping its size would leave
     * the rows of the other samples unwritten (explain_sample_writes) */
    mark_sample_writes(g, rb_from, tried);
    /* samples taken as a list and joined inside the graph: no lowering at another batch is the
     * model's (another batch's other inputs may even broadcast against the one sample) */
    if (explain_list_inputs(g, -1, rb_from, err)) {
        rc = DRIFT_E_INPUT;
        memset(dims, 0, ((size_t)n + 1) * sizeof *dims);
        for (int k = 0; k <= n; k++) dims[k] = -1;
        goto done;
    }
    for (int round = 0;; round++) {
        rc = probe_once(g, &lo, dims, &fail, &outchk, &e);
        if (rc && e.code == DRIFT_E_NOMEM) { /* not the program's shape */
            *err = e;
            goto done;
        }
        if (!rc || (last >= 0 && fail > best)) {
            /* progress: each flip tried at the same failing node before this one stays only if the
             * program fails earlier without it (Prior: the cat of a factory ones(B) and an expand of
             * a parameter by B needs both) */
            const int reach = rc ? fail : n + 1;
            for (int t = 0; t < n_tent; t++) {
                int f2 = -1, oc2 = 0;
                drift_err e2;
                lead[tent[t]] = 0;
                int r2 = probe_once(g, &lo, dims, &f2, &oc2, &e2);
                if (r2 && e2.code == DRIFT_E_NOMEM) {
                    *err = e2;
                    rc = r2;
                    goto done;
                }
                if (r2 && f2 < reach) lead[tent[t]] = 1;
            }
            if (n_tent) { /* the lowering of the flips kept */
                rc = probe_once(g, &lo, dims, &fail, &outchk, &e);
                n_tent = 0;
            }
            if (!rc) break;
        }
        if (round == 0) {
            first = e;
            fail0 = fail;
            out0 = outchk;
            memcpy(dims0, dims, ((size_t)n + 1) * sizeof *dims);
        }
        int partner = -1;
        if (last >= 0 && fail < best && pair_of < 0)
            /* it fails earlier, at a node that may need a second flip with it (HiDream's RoPE ids: the cat
               of zeros(B, 24, 3) and a repeat of the image ids by B; each alone breaks the cat) */
            partner = next_lead(g, fail, rb_from, lead, tried, anc);
        if (partner >= 0) {
            pair_of = last;
            last = partner;
            lead[last] = 1;
            continue;
        }
        if (last >= 0 && fail < best) { /* that shape argument was not the batch: undone */
            lead[last] = 0;
            tried[last] = 1;
            if (pair_of >= 0) lead[pair_of] = 0, tried[pair_of] = 1;
        } else if (last >= 0 && fail == best) { /* no further: kept while the next one is tried */
            tried[last] = 1;
            tent[n_tent++] = last;
            if (pair_of >= 0) tent[n_tent++] = pair_of;
        } else {
            best = fail;
        }
        if (pair_of >= 0 && fail >= best) tried[pair_of] = 1; /* the pair stays (or waits as tentative) as one */
        pair_of = -1;
        last = best >= 0 && round < 64 ? next_lead(g, best, rb_from, lead, tried, anc) : -1;
        if (last < 0) { /* nothing left to try: the first failure, and where the batch was lost */
            for (int t = 0; t < n_tent; t++) lead[tent[t]] = 0;
            *err = first;
            if (!explain_sample_writes(g, fail0, rb_from, err) && !explain_list_inputs(g, fail0, rb_from, err))
                explain_lost(g, fail0, out0, dims0, err);
            memcpy(dims, dims0, ((size_t)n + 1) * sizeof *dims); /* the first round's: what aten_unroll reads */
            for (int k = fail0 + 1; fail0 >= 0 && k < n; k++) dims[k] = -1; /* not reached: not known */
            rc = first.code ? first.code : DRIFT_E_INPUT;
            break;
        }
        lead[last] = 1;
    }
done:
    drift_free(tried);
    drift_free(anc);
    drift_free(dims0);
    drift_free(tent);
    return rc;
}
