/* Lowerings of the zoo's linear-algebra and inverse-patch ops as compositions of
 * existing IR ops (so they run wherever those run: ref, cpu, cuda):
 *  - linalg_qr (WanAnimate's motion encoder): Householder QR as LAPACK's geqrf +
 *    orgqr define it (beta = -sign(alpha) * norm, tau = (beta - alpha) / beta,
 *    v = [1, x / (alpha - beta)], tau = 0 when the column below the diagonal is
 *    zero), unrolled over the columns: the shapes are static, each reflector a
 *    few elementwise ops and one column sum;
 *  - diag_embed: a zero fill with the input scattered onto a strided diagonal;
 *  - a transposed convolution with stride == kernel (AceStep's proj_out, the
 *    inverse of a patch embedding): one LINEAR per position, the patches put
 *    back in place by one gather, the bias added after (two roundings, as cuDNN). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "formats/alloc.h"
#include "replay/capture/aten_lower_internal.h"

static const drift_value *vo(lctx *c, int id) { return drift_graph_value(c->out, id); }

/* aten_lower_internal.h */
int al_iota_along(lctx *c, int64_t n, int nd, int d, int *id) {
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_FILL);
    s.op.sub = 1;
    s.op.step = 1.0;
    s.rule = DRIFT_RULE_FIXED;
    s.rule_dtype = DRIFT_I64;
    s.ndim = 1, s.shape[0] = n;
    int rc = al_add_node(c, &s, id);
    if (rc) return rc;
    int64_t sh[DRIFT_MAX_DIMS];
    for (int i = 0; i < nd; i++) sh[i] = i == d ? n : 1;
    return al_emit_view_to(c, *id, nd, sh, id);
}

/* aten_lower_internal.h */
int al_cmp(lctx *c, int sub, int a, int b, int *id) {
    drift_node_spec s;
    drift_node_spec_init(&s, DRIFT_OP_BINARY);
    s.op.n_in = 2;
    s.op.sub = sub;
    s.in[0] = a, s.in[1] = b;
    s.rule = DRIFT_RULE_FIXED;
    s.rule_dtype = DRIFT_BOOL;
    return al_add_node(c, &s, id);
}

static int bin(lctx *c, drift_op_kind k, int a, int b, int *id) {
    int in[2] = {a, b};
    return al_emit(c, k, NULL, 2, in, DRIFT_RULE_PROMOTE, id);
}

static int where3(lctx *c, int cond, int a, int b, int *id) {
    int in[3] = {cond, a, b};
    return al_emit(c, DRIFT_OP_WHERE, NULL, 3, in, DRIFT_RULE_PROMOTE, id);
}

/* sum over dim 0, kept (size 1) */
static int sum0(lctx *c, int x, int *id) {
    drift_op op;
    memset(&op, 0, sizeof op);
    op.sub = DRIFT_REDUCE_SUM;
    op.dim = 0;
    return al_emit(c, DRIFT_OP_REDUCE, &op, 1, &x, DRIFT_RULE_PROMOTE, id);
}

/* The rows [k, rows) of the contiguous [rows, cols] value x with the reflector (v [rows - k],
 * tau [1]) applied: x - v (tau (v^T x)), the rows above k unchanged. */
static int reflect_rows(lctx *c, int x, int64_t rows, int64_t cols, int64_t k, int v, int tau, int *out) {
    int rc, blk, ve, w, tw, upd, nb;
    const int64_t r = rows - k;
    if ((rc = al_emit_gather(c, x, 2, (int64_t[]){r, cols}, (int64_t[]){cols, 1}, k * cols, &blk)) ||
        (rc = al_emit_gather(c, v, 2, (int64_t[]){r, cols}, (int64_t[]){1, 0}, 0, &ve)) || (rc = bin(c, DRIFT_OP_MUL, ve, blk, &w)) ||
        (rc = sum0(c, w, &w)) || (rc = bin(c, DRIFT_OP_MUL, w, tau, &tw)) || (rc = bin(c, DRIFT_OP_MUL, ve, tw, &upd)) ||
        (rc = bin(c, DRIFT_OP_SUB, blk, upd, &nb)))
        return rc;
    if (k == 0) { *out = nb; return DRIFT_OK; }
    int top;
    if ((rc = al_emit_gather(c, x, 2, (int64_t[]){k, cols}, (int64_t[]){cols, 1}, 0, &top))) return rc;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.dim = 0;
    int in[2] = {top, nb};
    return al_emit(c, DRIFT_OP_CONCAT, &op, 2, in, DRIFT_RULE_PROMOTE, out);
}

/* linalg_qr(A, mode='reduced' | 'complete') of a 2-d A [m, n] -> (Q, R). */
int al_lower_linalg_qr(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int a, rc;
    const char *mode = NULL;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "A"), "A", &a)) || (rc = al_get_str(c, al_arg(c, 1, "mode"), "mode", "reduced", &mode)))
        return rc;
    const int complete = !strcmp(mode, "complete");
    if (!complete && strcmp(mode, "reduced")) return FAIL(c, "linalg_qr mode '%s': expected 'reduced' or 'complete'", mode);
    const drift_value av = *vo(c, a);
    if (av.ndim != 2) return FAIL(c, "linalg_qr of a %d-d tensor: only a 2-d matrix is supported yet", av.ndim);
    const int64_t m = av.shape[0], n = av.shape[1], kn = m < n ? m : n, q = complete ? m : kn;
    if (n > 256) return FAIL(c, "linalg_qr of %lld columns: at most 256 (the importer unrolls the columns)", (long long)n);
    int vs[256], taus[256], nk = 0;
    for (int64_t k = 0; k < kn && k < m - 1; k++, nk++) {
        int alpha, sub, sq, ss, a2, nrm, zero, ge, neg, beta, tau, den, vsub, z, one, v, t0, v0;
        if ((rc = al_emit_gather(c, a, 1, (int64_t[]){1}, (int64_t[]){1}, k * n + k, &alpha)) ||
            (rc = al_emit_gather(c, a, 1, (int64_t[]){m - k - 1}, (int64_t[]){n}, (k + 1) * n + k, &sub)) ||
            (rc = bin(c, DRIFT_OP_MUL, sub, sub, &sq)) || (rc = sum0(c, sq, &ss)) || (rc = bin(c, DRIFT_OP_MUL, alpha, alpha, &a2)) ||
            (rc = bin(c, DRIFT_OP_ADD, a2, ss, &nrm)))
            return rc;
        drift_op op;
        memset(&op, 0, sizeof op);
        op.sub = DRIFT_UNARY_SQRT;
        if ((rc = al_emit(c, DRIFT_OP_UNARY, &op, 1, &nrm, DRIFT_RULE_PROMOTE, &nrm))) return rc;
        memset(&op, 0, sizeof op);
        op.sub = DRIFT_SCALAR_MUL;
        op.scalar = -1.0;
        if ((rc = al_fill_like(c, alpha, 0.0, &zero)) || (rc = al_cmp(c, DRIFT_BINARY_GE, alpha, zero, &ge)) ||
            (rc = al_emit(c, DRIFT_OP_SCALAR, &op, 1, &nrm, DRIFT_RULE_PROMOTE, &neg)) || (rc = where3(c, ge, neg, nrm, &beta)) ||
            (rc = bin(c, DRIFT_OP_SUB, beta, alpha, &tau)) || (rc = bin(c, DRIFT_OP_DIV, tau, beta, &tau)) ||
            (rc = bin(c, DRIFT_OP_SUB, alpha, beta, &den)) || (rc = bin(c, DRIFT_OP_DIV, sub, den, &vsub)))
            return rc;
        /* a zero column below the diagonal: H = I (tau 0, v finite) */
        if ((rc = al_cmp(c, DRIFT_BINARY_EQ, ss, zero, &z)) || (rc = where3(c, z, zero, tau, &tau)) || (rc = al_fill_like(c, vsub, 0.0, &v0)) ||
            (rc = where3(c, z, v0, vsub, &vsub)) || (rc = al_fill_like(c, alpha, 1.0, &one)))
            return rc;
        memset(&op, 0, sizeof op);
        op.dim = 0;
        int in[2] = {one, vsub};
        if ((rc = al_emit(c, DRIFT_OP_CONCAT, &op, 2, in, DRIFT_RULE_PROMOTE, &v))) return rc;
        if ((rc = reflect_rows(c, a, m, n, k, v, tau, &t0))) return rc;
        a = t0;
        vs[nk] = v, taus[nk] = tau;
    }
    /* R = triu of A's first rows (q rows for complete, else kn) */
    const int64_t rr = complete ? m : kn;
    int r, ri, ci, le, zr, qm, ii, jj, eq;
    if ((rc = al_emit_gather(c, a, 2, (int64_t[]){rr, n}, (int64_t[]){n, 1}, 0, &r)) || (rc = al_iota_along(c, rr, 2, 0, &ri)) ||
        (rc = al_iota_along(c, n, 2, 1, &ci)) || (rc = al_cmp(c, DRIFT_BINARY_LE, ri, ci, &le)) || (rc = al_fill_like(c, r, 0.0, &zr)) ||
        (rc = where3(c, le, r, zr, &r)))
        return rc;
    /* Q = H_0 ... H_{nk-1} I[:, :q], the reflectors applied last first */
    if ((rc = al_iota_along(c, m, 2, 0, &ii)) || (rc = al_iota_along(c, q, 2, 1, &jj)) || (rc = al_cmp(c, DRIFT_BINARY_EQ, ii, jj, &eq)) ||
        (rc = al_emit_cast(c, eq, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, a, &qm)))
        return rc;
    for (int k = nk - 1; k >= 0; k--)
        if ((rc = reflect_rows(c, qm, m, q, k, vs[k], taus[k], &qm))) return rc;
    fxv *f = &c->fx[c->cur];
    f->multi = drift_calloc(2, sizeof *f->multi);
    if (!f->multi) return drift_err_set(c->err, DRIFT_E_NOMEM, "aten", "out of memory");
    f->kind = FX_MULTI;
    f->n_multi = 2;
    f->cplx = 0;
    if ((rc = al_new_root(c, qm, &f->multi[0])) || (rc = al_new_root(c, r, &f->multi[1]))) return rc;
    return DRIFT_OK;
}

/* diag_embed(input, offset=0, dim1=-2, dim2=-1): [..., n] -> [..., n + |k|, n + |k|], input on
 * the k-th diagonal, zeros elsewhere (torch's definition; exact). */
int al_lower_diag_embed(lctx *c, const char *base, const char *target) {
    (void)base;
    (void)target;
    int x, rc, z, id;
    int64_t off, d1, d2;
    if ((rc = al_mat_arg(c, al_arg(c, 0, "input"), "input", &x)) || (rc = al_get_int(c, al_arg(c, 1, "offset"), "offset", 0, &off)) ||
        (rc = al_get_int(c, al_arg(c, 2, "dim1"), "dim1", -2, &d1)) || (rc = al_get_int(c, al_arg(c, 3, "dim2"), "dim2", -1, &d2)))
        return rc;
    const drift_value xv = *vo(c, x);
    const int nd = xv.ndim + 1;
    if (nd > DRIFT_MAX_DIMS) return FAIL(c, "diag_embed of a %d-d tensor", xv.ndim);
    if ((d1 != -2 && d1 != nd - 2) || (d2 != -1 && d2 != nd - 1))
        return FAIL(c, "diag_embed with dim1=%lld, dim2=%lld: only the last two dims are supported yet", (long long)d1, (long long)d2);
    const int64_t n = xv.shape[xv.ndim - 1], ak = off < 0 ? -off : off, s = n + ak;
    int64_t sh[DRIFT_MAX_DIMS], st[DRIFT_MAX_DIMS];
    for (int i = 0; i < xv.ndim - 1; i++) sh[i] = xv.shape[i];
    sh[nd - 2] = sh[nd - 1] = s;
    drift_node_spec f;
    drift_node_spec_init(&f, DRIFT_OP_FILL);
    f.rule = DRIFT_RULE_FIXED;
    f.rule_dtype = DRIFT_F32;
    f.ndim = nd;
    memcpy(f.shape, sh, sizeof(int64_t) * (size_t)nd);
    if ((rc = al_add_node(c, &f, &z)) || (rc = al_emit_cast(c, z, DRIFT_RULE_TYPE_AS, DRIFT_DTYPE_INVALID, x, &z))) return rc;
    /* x's element (..., i) goes to (..., i, i + k) (k >= 0) or (..., i - k, i) */
    int64_t acc = s * s;
    for (int i = xv.ndim - 2; i >= 0; i--) st[i] = acc, acc *= xv.shape[i];
    st[xv.ndim - 1] = s + 1;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.start = off >= 0 ? off : ak * s;
    memcpy(op.stride, st, sizeof(int64_t) * (size_t)xv.ndim);
    int in[2] = {z, x};
    if ((rc = al_emit(c, DRIFT_OP_SCATTER, &op, 2, in, DRIFT_RULE_LIKE_INPUT0, &id))) return rc;
    return al_set_result(c, id);
}

/* A transposed convolution with stride == kernel, no padding, no output padding, dilation 1,
 * one group: x [B, C, s...] and w [C, O, k...] give y [B, O, s0 k0, ...] with
 * y[b, o, t k + j] = sum_c x[b, c, t] w[c, o, j] + bias[o]: x as [B, L, C] rows, one LINEAR
 * against w as [O k..., C], the [B, s..., O, k...] result gathered to [B, O, s0, k0, ...]. */
int al_lower_conv_transposed(lctx *c, int x, int w, int b, int sp) {
    const drift_value xv = *vo(c, x), wv = *vo(c, w);
    int64_t st[3], pad[3], dil[3], opad[3], groups;
    int ns = 0, np = 0, nd = 0, no = 0, rc;
    if ((rc = al_get_ints(c, al_arg(c, 3, "stride"), "stride", st, &ns)) || (rc = al_get_ints(c, al_arg(c, 4, "padding"), "padding", pad, &np)) ||
        (rc = al_get_ints(c, al_arg(c, 5, "dilation"), "dilation", dil, &nd)) ||
        (rc = al_get_ints(c, al_arg(c, 7, "output_padding"), "output_padding", opad, &no)) ||
        (rc = al_get_int(c, al_arg(c, 8, "groups"), "groups", 1, &groups)))
        return rc;
    if (xv.ndim != sp + 2 || wv.ndim != sp + 2 || xv.shape[1] != wv.shape[0]) return FAIL(c, "transposed convolution: input and weight do not match");
    const int64_t B = xv.shape[0], C = xv.shape[1], O = wv.shape[1];
    int64_t K = 1, L = 1;
    for (int i = 0; i < sp; i++) {
        const int64_t k = wv.shape[2 + i], s = ns == 1 ? st[0] : ns == sp ? st[i] : -1, p = np == 1 ? pad[0] : np == sp ? pad[i] : -1,
                      d = nd == 1 ? dil[0] : nd == sp ? dil[i] : -1, o = no == 1 ? opad[0] : no == sp ? opad[i] : -1;
        if (s != k || p != 0 || d != 1 || o != 0 || groups != 1)
            return FAIL(c, "transposed convolutions are supported with stride == kernel, no padding, no output padding, dilation 1 "
                           "and one group (the inverse of a patch embedding) only yet");
        K *= k, L *= xv.shape[2 + i];
    }
    /* x [B, C, L] -> [B, L, C]; w [C, O, k...] -> [O K, C] */
    int xt, wt, lin, y;
    if ((rc = al_emit_gather(c, x, 3, (int64_t[]){B, L, C}, (int64_t[]){C * L, 1, L}, 0, &xt)) ||
        (rc = al_emit_gather(c, w, 2, (int64_t[]){O * K, C}, (int64_t[]){1, O * K}, 0, &wt)))
        return rc;
    int in[2] = {xt, wt};
    if ((rc = al_emit(c, DRIFT_OP_LINEAR, NULL, 2, in, DRIFT_RULE_AUTOCAST_LOWER, &lin))) return rc;
    /* lin [B, s0.., O, k0..] -> [B, O, s0, k0, s1, k1, ...] */
    int64_t lsh[2 + 2 * 3] = {0}, lst[2 + 2 * 3] = {0}, gsh[2 + 2 * 3] = {0}, gst[2 + 2 * 3] = {0}, ysh[2 + 3] = {0};
    const int ln = 2 + 2 * sp;
    lsh[0] = B;
    for (int i = 0; i < sp; i++) lsh[1 + i] = xv.shape[2 + i], lsh[2 + sp + i] = wv.shape[2 + i];
    lsh[1 + sp] = O;
    int64_t a = 1;
    for (int i = ln - 1; i >= 0; i--) lst[i] = a, a *= lsh[i];
    gsh[0] = B, gst[0] = lst[0], gsh[1] = O, gst[1] = lst[1 + sp];
    ysh[0] = B, ysh[1] = O;
    for (int i = 0; i < sp; i++) {
        gsh[2 + 2 * i] = lsh[1 + i], gst[2 + 2 * i] = lst[1 + i];
        gsh[3 + 2 * i] = lsh[2 + sp + i], gst[3 + 2 * i] = lst[2 + sp + i];
        ysh[2 + i] = lsh[1 + i] * lsh[2 + sp + i];
    }
    if ((rc = al_emit_gather(c, lin, ln, gsh, gst, 0, &y)) || (rc = al_emit_view_to(c, y, 2 + sp, ysh, &y))) return rc;
    if (b >= 0) { /* the bias [O] as [O, 1...], added after the GEMM's rounding */
        int64_t bsh[4] = {O, 1, 1, 1};
        int bb;
        if ((rc = al_emit_view_to(c, b, 1 + sp, bsh, &bb))) return rc;
        in[0] = y, in[1] = bb;
        if ((rc = al_emit(c, DRIFT_OP_ADD, NULL, 2, in, DRIFT_RULE_AUTOCAST_LOWER, &y))) return rc;
    }
    return al_set_result(c, y);
}
