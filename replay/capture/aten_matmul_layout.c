/* How PyTorch held a matmul operand, as BMM's op->layout bits (kernels/backend.h DRIFT_BMM_*):
 * the cuBLAS call torch makes depends on it (kernels/torch_blas_args.h), and drift always hands
 * BMM materialised operands. Read from torch's strides (al_torch_strides: the FX node's val
 * "stride", absent: contiguous, at the recorded batch; re-derived at another), with
 * torch.matmul's (LinearAlgebra.cpp _matmul_impl) reshaping:
 *
 *  - an operand whose batch dims (all but the last two) broadcast to the output's as a whole
 *    (each missing or of size 1 while the output has a batch) is expand()ed with stride 0 and
 *    reshape()d without a copy: bmm gets batch stride 0 (DRIFT_BMM_*_BCAST); one broadcast only
 *    in part cannot be merged by reshape: torch copies it contiguous (no bits);
 *  - its own batch dims must merge into one (stride[i] == stride[i+1] * size[i+1], size-1 dims
 *    skipped) for reshape to keep the view; else torch copies it contiguous (no bits);
 *  - its last two dims with strides (1, rows) are a transposed view (DRIFT_BMM_*_T); cuBLAS gets
 *    it as 't'. A larger leading stride (a slice of a wider tensor) is still 't' in torch with
 *    that ld; drift passes the dense ld (not carried). bmm's test (Blas.cpp
 *    prepare_batch_matrix_for_cublas) reads the raw strides: a bmm operand of one row is 't'
 *    only with stride 1 in that row's dim, and one that is neither 'n' nor 't' is cloned
 *    contiguous (no bits, not broadcast: the clone has its own batch).
 *
 * torch.matmul folds [..., M, K] @ [K, N] into mm only when the first n-1 dims of the larger
 * operand merge (should_fold: stride[i] == stride[i+1] * size[i+1] for i < n - 2, no grad);
 * al_matmul_folds says whether it does. */
#include <string.h>

#include "replay/capture/aten_lower_internal.h"

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
    if (j < 0 || !al_torch_strides(c, j, &nd, size, stride) || nd < 3) return 1;
    for (int i = 0; i < nd - 2; i++) /* should_fold compares every neighbour pair, size 1 included */
        if (stride[i] != stride[i + 1] * size[i + 1]) return 0;
    return 1;
}

int al_matmul_layout(const lctx *c, int j, int second, int nbat, const int64_t *bs, int *exact) {
    int nd;
    int64_t size[DRIFT_MAX_DIMS], stride[DRIFT_MAX_DIMS];
    if (exact) *exact = 0;
    if (j < 0 || c->fx[j].cplx || !al_torch_strides(c, j, &nd, size, stride) || nd < 2) return 0;
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
    /* bmm (nbat > 0): prepare_batch_matrix_for_cublas tests the raw strides, a size-1 dim's
       too: 't' needs sr == 1 even for one row (the mm path keeps its own rule) */
    const int tr = !contig && (sr == 1 || (R == 1 && nbat == 0)) && (C == 1 || sc >= R);
    /* one row that is neither 'n' (sc == 1) nor 't' (sr == 1): torch clones it contiguous
       (TransformerTemporalModel's [B*H*W, 1, C] view, strides (1, C*H*W, C), at batch 1): a
       dense 'n' operand with its own batch, as drift hands BMM */
    const int cloned = nbat > 0 && R == 1 && !contig && !tr;
    if (tr) bits |= second ? DRIFT_BMM_B_T : DRIFT_BMM_A_T;
    if (cloned) bits &= ~(DRIFT_BMM_A_BCAST | DRIFT_BMM_B_BCAST);
    if (exact && cloned) {
        *exact = 1;
    } else if (exact) { /* the strides are those drift's dense operand with these bits stands for */
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
