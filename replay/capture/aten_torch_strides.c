/* The strides torch holds an FX node's tensor with at the batch being lowered
 * (aten_lower_internal.h al_torch_strides): the one source of the strides that decide a
 * linear's path (noncontig_nd in aten_lower.c: addmm with the bias in the epilogue, or
 * matmul + add_) and a matmul's cuBLAS layout and fold (aten_matmul_layout.c).
 *
 * The capture records each node's strides ('val' "stride") at the recorded batch only. At
 * that batch they are used as recorded. Re-batching, torch's layout may change with the
 * batch: diffusers' TransformerTemporalModel permutes a contiguous [B, C, F, H, W] to
 * [B, H, W, F, C] and reshapes it to [B*H*W, F, C]; at batch 2 the reshape cannot be a view
 * (B and H, W do not merge) and torch copies it contiguous (addmm), at batch 1 it is a view
 * with strides [1, C*H*W, C] (no fold: a bmm and the bias added on its own). So:
 *
 *  - a reshape-family node (view, reshape, _unsafe_view, flatten, unflatten) gets torch's
 *    computeStride (aten_view_reshape) of its input's strides at the new batch (found the
 *    same way, recursively) and its new sizes; where that fails torch copies: contiguous;
 *  - any other node keeps its recorded strides, unless its sizes changed and the recorded
 *    strides are dense (contiguous or a permutation of contiguous strides, counting the dims
 *    whose size changes even where they recorded size 1): then they are the dense strides of
 *    the new sizes in the same memory order (dims by recorded stride, outermost first; among
 *    equal strides a dim of recorded size 1 inside the other, as its stride says, else by
 *    index). A permute, transpose or unsqueeze of a contiguous tensor is such a node.
 *    Non-dense recorded strides (a slice, an expand) are kept as recorded: a slice along
 *    the sequence recorded at batch 1 is not contiguous at batch 2.
 *
 * Not modelled: a view op other than the reshape family (permute, transpose, slice, expand,
 * select, unsqueeze, ...) whose input's layout changed with the batch (its strides are
 * derived from its own recording, not from its input's new strides); elementwise ops and
 * casts that follow a changed input layout (TensorIterator's stride order, preserve_format);
 * ops whose output layout depends on the batch in another way. */
#include <string.h>

#include "replay/capture/aten_lower_internal.h"

#define TS_MAX_DEPTH 64 /* reshape-family chains followed back this far */

/* FX node j's 'val': recorded shape (vsize) and strides (*has_st 0: no "stride"), and the
 * sizes at the batch lowered now (size: the lowered view's when its nd matches). 1 when the
 * val has a shape (and well-formed strides), else 0. */
static int val_layout(const lctx *c, int j, int *nd, int64_t *vsize, int64_t *size, int64_t *stride, int *has_st) {
    if (j < 0 || j >= c->g->n) return 0;
    const aten_node *n = &c->g->nodes[j];
    const drift_json_value *v = n->val && n->val->type == DRIFT_JSON_OBJECT ? n->val : NULL;
    const drift_json_value *sh = v ? drift_json_object_get(v, "shape") : NULL, *st = v ? drift_json_object_get(v, "stride") : NULL;
    if (!sh || sh->type != DRIFT_JSON_ARRAY || sh->n_items < 1 || sh->n_items > DRIFT_MAX_DIMS) return 0;
    if (st && (st->type != DRIFT_JSON_ARRAY || st->n_items != sh->n_items)) return 0;
    *nd = (int)sh->n_items;
    *has_st = st != NULL;
    const aten_view *lv = c->fx && c->fx[j].kind == FX_TENSOR ? &c->fx[j].t : NULL;
    for (int d = 0; d < *nd; d++) {
        if (sh->items[d].type != DRIFT_JSON_NUMBER || (st && st->items[d].type != DRIFT_JSON_NUMBER)) return 0;
        vsize[d] = sh->items[d].integer;
        size[d] = lv && lv->nd == *nd ? lv->size[d] : vsize[d];
        stride[d] = st ? st->items[d].integer : 0;
    }
    return 1;
}

static void contiguous(int nd, const int64_t *size, int64_t *stride) {
    int64_t run = 1;
    for (int d = nd - 1; d >= 0; d--) {
        stride[d] = run;
        run *= size[d];
    }
}

/* 1 if the recorded strides are dense at the recorded sizes vsize: the strides of the counted
 * dims (size other than 1, or a size that changes: vsize != size), smallest first, are 1, s0,
 * s0 s1, ... (no gap, no overlap). */
static int dense(int nd, const int64_t *vsize, const int64_t *size, const int64_t *stride) {
    int taken[DRIFT_MAX_DIMS] = {0};
    int64_t expect = 1;
    for (int d = 0; d < nd; d++)
        if (vsize[d] < 1 || size[d] < 1) return 0; /* empty: nothing to lay out */
    for (;;) {
        int best = -1;
        for (int d = 0; d < nd; d++) {
            if (taken[d] || (vsize[d] == 1 && size[d] == 1)) continue;
            if (best < 0 || stride[d] < stride[best]) best = d;
        }
        if (best < 0) return 1;
        if (stride[best] != expect) return 0;
        expect *= vsize[best];
        taken[best] = 1;
    }
}

/* 1 if dim a lies outside dim b in the recorded memory order (see the file comment). */
static int outer(int a, int b, const int64_t *vsize, const int64_t *stride) {
    if (stride[a] != stride[b]) return stride[a] > stride[b];
    if ((vsize[a] == 1) != (vsize[b] == 1)) return vsize[b] == 1; /* the size-1 dim inside */
    return a < b;
}

/* Dense strides of sizes size in the memory order of the recorded strides. */
static void dense_like(int nd, const int64_t *vsize, const int64_t *size, int64_t *stride) {
    int order[DRIFT_MAX_DIMS];
    for (int d = 0; d < nd; d++) { /* insertion sort, outermost first */
        int k = d;
        while (k > 0 && outer(d, order[k - 1], vsize, stride)) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = d;
    }
    int64_t run = 1, out[DRIFT_MAX_DIMS];
    for (int k = nd - 1; k >= 0; k--) {
        out[order[k]] = run;
        run *= size[order[k]] > 1 ? size[order[k]] : 1;
    }
    memcpy(stride, out, (size_t)nd * sizeof *stride);
}

static int reshape_family(const aten_node *n) {
    static const char *const ops[] = {"view", "reshape", "_unsafe_view", "flatten", "unflatten", NULL};
    char base[64];
    if (n->op != ATEN_CALL || n->is_attr || !n->target || !strcmp(n->target, "aten.view.dtype")) return 0; /* a bit cast */
    drift_aten_op_base(n->target, base, sizeof base);
    for (int i = 0; ops[i]; i++)
        if (!strcmp(base, ops[i])) return 1;
    return 0;
}

static int torch_strides(const lctx *c, int j, int depth, int *nd, int64_t *size, int64_t *stride) {
    int64_t vsize[DRIFT_MAX_DIMS];
    int has_st;
    if (!val_layout(c, j, nd, vsize, size, stride, &has_st)) return 0;
    const aten_node *n = &c->g->nodes[j];
    const int rebatching = c->rb_from && c->rb_to != c->rb_from;
    if (!has_st) contiguous(*nd, size, stride); /* a val without "stride": contiguous at the sizes lowered */
    if (!rebatching || (!has_st && !reshape_family(n))) return 1; /* as recorded */
    if (reshape_family(n) && depth < TS_MAX_DEPTH && n->args && n->args->n_items >= 1) {
        const int ji = al_ref_of(c, &n->args->items[0]);
        aten_view in, out;
        memset(&in, 0, sizeof in);
        if (ji >= 0 && torch_strides(c, ji, depth + 1, &in.nd, in.size, in.stride)) {
            if (aten_view_reshape(&in, *nd, size, &out)) memcpy(stride, out.stride, (size_t)*nd * sizeof *stride);
            else contiguous(*nd, size, stride); /* not viewable: torch copies */
            return 1;
        }
    }
    if (memcmp(vsize, size, (size_t)*nd * sizeof *size) && dense(*nd, vsize, size, stride))
        dense_like(*nd, vsize, size, stride);
    return 1;
}

int al_torch_strides(const lctx *c, int j, int *nd, int64_t *size, int64_t *stride) {
    return torch_strides(c, j, 0, nd, size, stride);
}
