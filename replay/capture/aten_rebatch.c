/* Re-batching a static captured graph (docs/invariance.md "Captured graphs"):
 * torch.export records one batch size, and `drift invariance` needs the same
 * program at others. The lowering re-binds the batch while it lowers: user
 * inputs whose dim 0 is the recorded batch get the new one, every op computes
 * its shape from its (re-batched) operands as it always does, and only the
 * ops whose arguments spell a shape (view, reshape, unflatten, expand, repeat) have
 * that argument rewritten. The batch dim of each value is not guessed: it is
 * the one dim where the lowered shape differs from the shape the capture
 * recorded ('val'), by the factor rb_to / rb_from. An op whose result differs
 * otherwise cannot be re-batched and is named (aten_node_fail). */
#include <stdio.h>
#include <string.h>

#include "replay/capture/aten_lower_internal.h"

void al_rb_input(lctx *c, int nd, int64_t *shape) {
    if (!c->rb_from || nd < 1 || shape[0] != c->rb_from) return;
    shape[0] = c->rb_to;
    c->fx[c->cur].bax1 = 1;
    if (c->rb_dims_out) c->rb_dims_out[c->cur] = 1;
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

/* x (value j) is batch-free and the shape argument (n entries, aligned right with x's dims)
 * spreads its size-1 leading dim by the recorded batch (LTX-Video's rope grid
 * grid.unsqueeze(0).repeat(batch_size, ...), StableAudio3's memory tokens
 * p.unsqueeze(0).expand(batch_size, -1, -1)): that entry becomes the new batch. A recorded
 * batch of 1 cannot tell that factor from any other 1. */
static void batch_free_lead(const lctx *c, const fxv *f, int n, int64_t *arg) {
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
