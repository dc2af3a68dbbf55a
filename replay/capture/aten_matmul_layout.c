/* How PyTorch held a matmul operand, as BMM's op->layout bits (kernels/backend.h DRIFT_BMM_*):
 * the cuBLAS call torch makes depends on it (kernels/torch_blas_args.h), and drift always hands
 * BMM materialised operands. Read from the captured strides (the FX node's val "stride"; absent:
 * contiguous), with torch.matmul's (LinearAlgebra.cpp _matmul_impl) reshaping:
 *
 *  - an operand whose batch dims (all but the last two) broadcast to the output's as a whole
 *    (each missing or of size 1 while the output has a batch) is expand()ed with stride 0 and
 *    reshape()d without a copy: bmm gets batch stride 0 (DRIFT_BMM_*_BCAST); one broadcast only
 *    in part cannot be merged by reshape: torch copies it contiguous (no bits);
 *  - its own batch dims must merge into one (stride[i] == stride[i+1] * size[i+1], size-1 dims
 *    skipped) for reshape to keep the view; else torch copies it contiguous (no bits);
 *  - its last two dims with strides (1, rows) are a transposed view (DRIFT_BMM_*_T); cuBLAS gets
 *    it as 't'. A larger leading stride (a slice of a wider tensor) is still 't' in torch with
 *    that ld; drift passes the dense ld (not carried).
 *
 * torch.matmul folds [..., M, K] @ [K, N] into mm only when the first n-1 dims of the larger
 * operand merge (should_fold: stride[i] == stride[i+1] * size[i+1] for i < n - 2, no grad);
 * al_matmul_folds says whether it does. */
#include <string.h>

#include "replay/capture/aten_lower_internal.h"

/* FX node j's captured sizes (the lowered batch's, as noncontig_nd reads them) and strides (a
 * val without "stride": contiguous): 1 when val has a shape, else 0. */
static int captured(const lctx *c, int j, int *nd, int64_t *size, int64_t *stride) {
    const aten_node *n = &c->g->nodes[j];
    const drift_json_value *v = n->val && n->val->type == DRIFT_JSON_OBJECT ? n->val : NULL;
    const drift_json_value *sh = v ? drift_json_object_get(v, "shape") : NULL, *st = v ? drift_json_object_get(v, "stride") : NULL;
    if (!sh || sh->type != DRIFT_JSON_ARRAY || sh->n_items < 1 || sh->n_items > DRIFT_MAX_DIMS) return 0;
    if (st && (st->type != DRIFT_JSON_ARRAY || st->n_items != sh->n_items)) return 0;
    *nd = (int)sh->n_items;
    const aten_view *lv = c->fx[j].kind == FX_TENSOR ? &c->fx[j].t : NULL;
    for (int d = 0; d < *nd; d++) {
        if (sh->items[d].type != DRIFT_JSON_NUMBER || (st && st->items[d].type != DRIFT_JSON_NUMBER)) return 0;
        size[d] = lv && lv->nd == *nd ? lv->size[d] : sh->items[d].integer;
        if (st) stride[d] = st->items[d].integer;
    }
    int64_t run = 1;
    for (int d = *nd - 1; !st && d >= 0; d--) {
        stride[d] = run;
        run *= size[d];
    }
    return 1;
}

/* 1 if dims [lo, hi) merge into one without a copy (size-1 dims do not count). */
static int mergeable(const int64_t *size, const int64_t *stride, int lo, int hi) {
    int prev = -1;
    for (int d = lo; d < hi; d++) {
        if (size[d] == 1) continue;
        if (prev >= 0 && stride[prev] != stride[d] * size[d]) return 0;
        prev = d;
    }
    return 1;
}

int al_matmul_folds(const lctx *c, int j) {
    int nd;
    int64_t size[DRIFT_MAX_DIMS], stride[DRIFT_MAX_DIMS];
    if (j < 0 || !captured(c, j, &nd, size, stride) || nd < 3) return 1;
    for (int i = 0; i < nd - 2; i++) /* should_fold compares every neighbour pair, size 1 included */
        if (stride[i] != stride[i + 1] * size[i + 1]) return 0;
    return 1;
}

int al_matmul_layout(const lctx *c, int j, int second, int nbat, const int64_t *bs, int *exact) {
    int nd;
    int64_t size[DRIFT_MAX_DIMS], stride[DRIFT_MAX_DIMS];
    if (exact) *exact = 0;
    if (j < 0 || c->fx[j].cplx || !captured(c, j, &nd, size, stride) || nd < 2) return 0;
    const int own = nd - 2; /* its batch dims, right-aligned to the output's nbat */
    int64_t out_batch = 1;
    int all_bcast = 1, some_bcast = 0;
    for (int i = 0; i < nbat; i++) {
        out_batch *= bs[i];
        const int k = i - (nbat - own);
        const int64_t sz = k >= 0 ? size[k] : 1;
        const int zero = k >= 0 && sz != 1 && stride[k] == 0; /* an expand captured already */
        if (sz == bs[i] && sz != 1 && !zero) all_bcast = 0;
        if (sz != bs[i] || zero) some_bcast = 1;
    }
    int bits = 0;
    if (nbat > 0 && out_batch > 1 && all_bcast) {
        bits |= second ? DRIFT_BMM_B_BCAST : DRIFT_BMM_A_BCAST;
    } else if (some_bcast || !mergeable(size, stride, 0, own)) {
        return 0; /* torch copies it contiguous */
    }
    const int64_t R = size[nd - 2], C = size[nd - 1], sr = stride[nd - 2], sc = stride[nd - 1];
    const int contig = (R == 1 || sr == C) && (C == 1 || sc == 1);
    const int tr = !contig && (R == 1 || sr == 1) && (C == 1 || sc >= R);
    if (tr) bits |= second ? DRIFT_BMM_B_T : DRIFT_BMM_A_T;
    if (exact) { /* the strides are those drift's dense operand with these bits stands for */
        int ok = tr ? (C == 1 || sc == R) : contig;
        for (int d = own - 1; ok && d >= 0; d--) {
            if (size[d] == 1) continue;
            ok = (bits & (DRIFT_BMM_A_BCAST | DRIFT_BMM_B_BCAST)) ? stride[d] == 0 : stride[d] == R * C;
            break; /* the innermost batch dim; the others merge into it (checked above) */
        }
        *exact = ok;
    }
    return bits;
}
