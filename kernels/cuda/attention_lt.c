/* ATTENTION on the CUDA backend (kernels/backend.h semantics), unfused:
 *   S = scale * Q K^T      cuBLASLt strided-batched, bf16/fp16/fp32 operands,
 *                          fp32 accumulate, fp32 output (alpha = scale: one
 *                          fp32 rounding of acc*scale, as the cpu backend's
 *                          separate multiply)
 *   S = S + bias           with ATTENTION's optional additive bias (in3):
 *                          attention.cu, fp32, one rounding; the fused
 *                          kernels take no bias, so a bias always runs here
 *   P, l = softmax rows    attention.cu: p = expf(s - max) fp32, l = sum p
 *                          fp32, P rounded to op->compute
 *   O = P V                cuBLASLt strided-batched, fp32 output
 *   out = round_out(O / l) attention.cu
 * q, k, v not already in op->compute are first rounded to it (as the cpu
 * backend does). scale == 0 means the SDPA default 1/sqrt(Dh), as in the cpu
 * and ref backends.
 *
 * Memory: S (fp32), P (compute), l and O (fp32) for a chunk of nb
 * (batch*head) slices times nr query rows; the chunk is sized to the budget
 * (the spec's attn_scratch= option, default 1 GiB): whole heads when one head fits
 * (nb >= 1, nr = Lq), else one head at a time in blocks of nr query rows.
 * Chunking changes no value: rows are independent and each row's softmax and
 * GEMM columns are computed the same way in any chunk.
 *
 * Fused path (attention_fused.cu): compute bf16/fp16, Dh == Dv in {64, 128},
 * Lk >= 1, sm_80+: one kernel, exact two passes over the keys (global row
 * max, p rounded once), S and P never in global memory. It is the default
 * where supported; the spec's attention= option (fixed at backend creation,
 * like every variant: a test or benchmark makes one backend per variant)
 * = "unfused" forces the path below, "fused" forces the fused kernel and
 * fails with DRIFT_E_UNSUPPORTED where it does not apply; "auto" (or no
 * option) means automatic. Two fused kernels implement the
 * same contract: attention_wgmma.cu (Hopper warpgroup MMAs, compute
 * capability 9.0 only) and attention_fused.cu (mma.sync, sm_80+); "fused"
 * and automatic take the wgmma kernel where the device runs it, else the
 * mma.sync one; "fused_wgmma" / "fused_mma" force one of them.
 *
 * Layouts (op->layout, kernels/backend.h): the fused kernel reads and writes
 * both through strides (dcu_attn_strides), so layout 1 ([B, L, H, D]) costs
 * no copy there. The unfused path runs layout 1 by permuting q, k, v (after
 * their rounding to the compute dtype) into [B, H, L, D] scratch, running as
 * layout 0, and permuting the rounded output back: raw copies, so both paths
 * give bitwise the results of layout 0 on permuted data. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* t's data as a `c` operand: t itself, or a rounded copy in *tmp. */
static int as_compute(dcu_ctx *ctx, const drift_tensor *t, drift_dtype c, const void **p, void **tmp,
                      drift_err *err) {
    *tmp = NULL;
    *p = t->data;
    if (t->dtype == c) return DRIFT_OK;
    cudaError_t e = dcu_malloc(ctx, tmp, (size_t)t->numel * drift_dtype_size(c));
    if (e != cudaSuccess) return dcu_check(e, err, "op attention", "allocating an operand copy");
    e = dcu_launch_unary(ctx, DCU_UN_CAST, t->data, t->dtype, *tmp, c, t->numel, 0.0f, 0.0f);
    if (e != cudaSuccess) return dcu_check(e, err, "op attention", "rounding an operand to the compute dtype");
    *p = *tmp;
    return DRIFT_OK;
}

/* The dims of an ATTENTION call: H and L sit at dims (1, 2) in layout 0 and
 * (2, 1) in layout 1. */
typedef struct attn_dims {
    int layout;
    int64_t B, H, Lq, Lk, Dh, Dv;
} attn_dims;

static attn_dims get_dims(const drift_op *op, const drift_tensor *q, const drift_tensor *k, const drift_tensor *v) {
    attn_dims d;
    d.layout = op->layout != 0;
    const int hd = d.layout ? 2 : 1, ld = d.layout ? 1 : 2;
    d.B = q->shape[0];
    d.H = q->shape[hd];
    d.Lq = q->shape[ld];
    d.Lk = k->shape[ld];
    d.Dh = q->shape[3];
    d.Dv = v->shape[3];
    return d;
}

/* Strides (b, h, l) of a contiguous tensor of L rows of D per head. */
static void layout_strides(int layout, int64_t H, int64_t L, int64_t D, int64_t *s) {
    s[0] = H * L * D;
    s[1] = layout ? D : L * D;
    s[2] = layout ? H * D : D;
}

static dcu_attn_strides fused_strides(const attn_dims *d) {
    dcu_attn_strides st;
    memset(&st, 0, sizeof st);
    st.H = d->H;
    layout_strides(d->layout, d->H, d->Lq, d->Dh, st.q);
    layout_strides(d->layout, d->H, d->Lk, d->Dh, st.k);
    layout_strides(d->layout, d->H, d->Lk, d->Dv, st.v);
    layout_strides(d->layout, d->H, d->Lq, d->Dv, st.o);
    return st;
}

/* NULL when the fused kernel applies, else why not. */
static const char *fused_unsupported(const dcu_ctx *ctx, const drift_op *op, const attn_dims *d) {
    const int64_t BH = d->B * d->H;
    if (op->compute != DRIFT_BF16 && op->compute != DRIFT_F16) return "compute dtype is not bf16/fp16";
    if (d->Dh != 64 && d->Dh != 128) return "head dim is not 64 or 128";
    if (d->Dv != d->Dh) return "Dv differs from Dh";
    if (d->Lk < 1) return "no keys";
    if (!dcu_attn_fused_grid_ok(BH, d->Lq)) return "too many query tiles for one grid";
    dcu_attn_strides st = fused_strides(d);
    if (!dcu_attn_fused_strides_ok(&st)) return "q/k/v row strides are not multiples of 8 elements";
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ctx->device) != cudaSuccess) {
        (void)cudaGetLastError();
        return "cannot query the compute capability";
    }
    if (major < 8) return "device older than sm_80";
    return NULL;
}

/* *p = an operand already in the compute dtype, or a 16-byte aligned copy of
 * it in *tmp (the fused kernel's cp.async needs 16-byte aligned rows; views
 * at odd element offsets are copied). */
static int aligned16(dcu_ctx *ctx, const void **p, void **tmp, size_t bytes, drift_err *err) {
    if (((uintptr_t)*p & 15u) == 0) return DRIFT_OK;
    void *d = NULL;
    cudaError_t e = dcu_malloc(ctx, &d, bytes);
    if (e != cudaSuccess) return dcu_check(e, err, "op attention", "allocating an aligned operand copy");
    *tmp = d;
    e = cudaMemcpyAsync(d, *p, bytes, cudaMemcpyDeviceToDevice, ctx->stream);
    if (e != cudaSuccess) return dcu_check(e, err, "op attention", "copying an operand to aligned memory");
    *p = d;
    return DRIFT_OK;
}

static int attention_fused(dcu_ctx *ctx, const drift_op *op, const attn_dims *d, const drift_tensor *q,
                           const drift_tensor *k, const drift_tensor *v, drift_tensor *out, float scale, int wgmma,
                           drift_err *err) {
    const int64_t BH = d->B * d->H, Lq = d->Lq, D = d->Dh, Lk = d->Lk;
    const dcu_attn_strides st = fused_strides(d);
    const drift_dtype c = op->compute;
    const size_t cs = drift_dtype_size(c);
    const void *qa = NULL, *ka = NULL, *va = NULL;
    void *tmp[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    int rc = as_compute(ctx, q, c, &qa, &tmp[0], err);
    if (!rc) rc = as_compute(ctx, k, c, &ka, &tmp[1], err);
    if (!rc) rc = as_compute(ctx, v, c, &va, &tmp[2], err);
    if (!rc) rc = aligned16(ctx, &qa, &tmp[3], (size_t)q->numel * cs, err);
    if (!rc) rc = aligned16(ctx, &ka, &tmp[4], (size_t)k->numel * cs, err);
    if (!rc) rc = aligned16(ctx, &va, &tmp[5], (size_t)v->numel * cs, err);
    if (!rc && wgmma)
        rc = dcu_check(dcu_launch_attn_wgmma(ctx, qa, ka, va, &st, c, BH, Lq, Lk, D, scale, out->data, out->dtype),
                       err, "op attention", "fused attention kernel (wgmma)");
    else if (!rc)
        rc = dcu_check(dcu_launch_attn_fused(ctx, qa, ka, va, &st, c, BH, Lq, Lk, D, scale, out->data, out->dtype),
                       err, "op attention", "fused attention kernel (mma.sync)");
    for (int i = 0; i < 6; i++) dcu_free(ctx, tmp[i]);
    return rc;
}

/* The first address at or after p that equals like modulo 256 bytes. */
static char *same_mod256(char *p, const void *like) {
    return p + (((uintptr_t)like - (uintptr_t)p) & 255u);
}

/* Permutes a contiguous [B, n1, n2, D] tensor into [B, n2, n1, D] (dims 1
 * and 2 swapped): raw copy in dtype dt. */
static int swap12(dcu_ctx *ctx, const void *src, void *dst, drift_dtype dt, int64_t B, int64_t n1, int64_t n2,
                  int64_t D, drift_err *err) {
    dcu_copy c;
    memset(&c, 0, sizeof c);
    c.nd = 4;
    /* index space = the destination's dims (b, j, i, d) */
    c.shape[0] = B, c.shape[1] = n2, c.shape[2] = n1, c.shape[3] = D;
    c.ss[0] = n1 * n2 * D, c.ss[1] = D, c.ss[2] = n2 * D, c.ss[3] = 1;
    c.ds[0] = n1 * n2 * D, c.ds[1] = n1 * D, c.ds[2] = D, c.ds[3] = 1;
    c.src = src;
    c.ts = dt;
    c.dst = dst;
    c.td = dt;
    dcu_copy_simplify(&c);
    return dcu_check(dcu_launch_copy(ctx, &c), err, "op attention", "permuting a layout-1 operand");
}

/* The unfused path on layout-0 operands already in the compute dtype:
 * qa[BH, Lq, Dh], ka[BH, Lk, Dh], va[BH, Lk, Dv] -> o[BH, Lq, Dv] in `to`. */
static int attention_unfused(dcu_ctx *ctx, const drift_op *op, const void *qa, const void *ka, const void *va,
                             int64_t BH, int64_t Lq, int64_t Lk, int64_t Dh, int64_t Dv, void *o_out, drift_dtype to,
                             const float *bias, const int64_t *bs, int64_t H, drift_err *err) {
    const drift_dtype c = op->compute;
    const size_t cs = drift_dtype_size(c), os = drift_dtype_size(to);
    const float scale = op->scale != 0.0f ? op->scale : (float)(1.0 / sqrt((double)Dh));

    /* chunk sizes */
    const size_t row_bytes = (size_t)Lk * 4 + (size_t)Lk * cs + 4 + (size_t)Dv * 4;
    const size_t head_bytes = row_bytes * (size_t)Lq;
    const size_t budget = ctx->attn_budget;
    int64_t nb, nr;
    if (head_bytes <= budget) {
        nr = Lq;
        nb = (int64_t)(budget / head_bytes);
        if (nb > BH) nb = BH;
        if (nb < 1) nb = 1;
    } else {
        nb = 1;
        nr = (int64_t)(budget / row_bytes);
        if (nr < 1) nr = 1;
        if (nr > Lq) nr = Lq;
    }
    const size_t rows = (size_t)nb * (size_t)nr;
    const size_t s_bytes = align256(rows * (size_t)Lk * 4), p_bytes = align256(rows * (size_t)Lk * cs),
                 l_bytes = align256(rows * 4), o_bytes = align256(rows * (size_t)Dv * 4);

    void *scratch = NULL;
    int rc = DRIFT_OK;
    cudaError_t e = dcu_malloc(ctx, &scratch, s_bytes + p_bytes + l_bytes + o_bytes);
    if (e != cudaSuccess) return dcu_check(e, err, "op attention", "allocating the score/probability scratch");
    float *S = (float *)scratch;
    void *P = (char *)scratch + s_bytes;
    float *l = (float *)((char *)scratch + s_bytes + p_bytes);
    float *O = (float *)((char *)scratch + s_bytes + p_bytes + l_bytes);

    for (int64_t bh0 = 0; bh0 < BH && !rc; bh0 += nb) {
        const int64_t cnb = BH - bh0 < nb ? BH - bh0 : nb;
        for (int64_t r0 = 0; r0 < Lq && !rc; r0 += nr) {
            const int64_t cnr = Lq - r0 < nr ? Lq - r0 : nr;
            /* S_z[cnr, Lk] (row-major) = col-major Lk x cnr:
               S^T = K_z (Lk x Dh) . Q_z[r0:r0+cnr]^T */
            dcu_gemm g1;
            g1.transa = 1;
            g1.transb = 0;
            g1.m = Lk;
            g1.n = cnr;
            g1.k = Dh;
            g1.a = (const char *)ka + (size_t)(bh0 * Lk * Dh) * cs;
            g1.ta = c;
            g1.lda = Dh;
            g1.stride_a = Lk * Dh;
            g1.b = (const char *)qa + (size_t)(bh0 * Lq * Dh + r0 * Dh) * cs;
            g1.tb = c;
            g1.ldb = Dh;
            g1.stride_b = Lq * Dh;
            g1.d = S;
            g1.td = DRIFT_F32;
            g1.ldd = Lk;
            g1.stride_d = cnr * Lk;
            g1.batch = cnb;
            g1.alpha = scale;
            g1.bias = NULL;
            g1.tbias = DRIFT_F32;
            rc = dcu_gemm_run(ctx, &g1, err);
            if (rc) break;
            if (bias) { /* S = fl(scale q k^T) + bias */
                rc = dcu_check(dcu_launch_attn_add_bias(ctx, S, bias, cnb, cnr, Lk, bh0, H, r0, bs), err, "op attention",
                               "bias kernel");
                if (rc) break;
            }
            rc = dcu_check(dcu_launch_softmax_rows(ctx, S, cnb * cnr, Lk, P, c, l), err, "op attention",
                           "softmax kernel");
            if (rc) break;
            /* O_z[cnr, Dv] (row-major) = col-major Dv x cnr: O^T = V_z^T (Dv x Lk) . P_z^T (Lk x cnr) */
            dcu_gemm g2;
            g2.transa = 0;
            g2.transb = 0;
            g2.m = Dv;
            g2.n = cnr;
            g2.k = Lk;
            g2.a = (const char *)va + (size_t)(bh0 * Lk * Dv) * cs;
            g2.ta = c;
            g2.lda = Dv;
            g2.stride_a = Lk * Dv;
            g2.b = P;
            g2.tb = c;
            g2.ldb = Lk;
            g2.stride_b = cnr * Lk;
            g2.d = O;
            g2.td = DRIFT_F32;
            g2.ldd = Dv;
            g2.stride_d = cnr * Dv;
            g2.batch = cnb;
            g2.alpha = 1.0f;
            g2.bias = NULL;
            g2.tbias = DRIFT_F32;
            rc = dcu_gemm_run(ctx, &g2, err);
            if (rc) break;
            void *ob = (char *)o_out + (size_t)(bh0 * Lq * Dv) * os;
            rc = dcu_check(dcu_launch_attn_finalize(ctx, O, l, cnb, cnr, Dv, Lq, r0, ob, to), err, "op attention",
                           "finalize kernel");
        }
    }
    dcu_free(ctx, scratch);
    return rc;
}

int dcu_attention_run(dcu_ctx *ctx, const drift_op *op, const drift_tensor *q, const drift_tensor *k,
                      const drift_tensor *v, const drift_tensor *bias, drift_tensor *out, drift_err *err) {
    const attn_dims d = get_dims(op, q, k, v);
    const int64_t BH = d.B * d.H;
    if (BH == 0 || d.Lq == 0 || d.Dv == 0) return DRIFT_OK;
    int64_t bs[3] = {0, 0, 0};
    if (bias) {
        if (bias->dtype != DRIFT_F32)
            return drift_err_set(err, DRIFT_E_INPUT, "op attention", "the bias must be fp32, got %s",
                                 drift_dtype_name(bias->dtype));
        drift_attn_bias_strides(bias, bs);
    }
    const float *bp = bias ? (const float *)bias->data : NULL;
    const int mode = ctx->attn_mode;
    if (mode != DCU_ATTN_UNFUSED) {
        /* the fused kernels take no bias: the unfused path (the same contract) runs it */
        const char *why = bias ? "the fused kernels take no additive bias (attn_mask)" : fused_unsupported(ctx, op, &d);
        const int have_wgmma = !why && dcu_attn_wgmma_available(ctx->device);
        if (!why && mode == DCU_ATTN_FUSED_WGMMA && !have_wgmma)
            why = "the wgmma kernel needs a compute capability 9.0 device";
        if (!why) {
            const float fscale = op->scale != 0.0f ? op->scale : (float)(1.0 / sqrt((double)d.Dh));
            const int wgmma = mode == DCU_ATTN_FUSED_WGMMA || (mode != DCU_ATTN_FUSED_MMA && have_wgmma);
            return attention_fused(ctx, op, &d, q, k, v, out, fscale, wgmma, err);
        }
        if (mode != DCU_ATTN_AUTO)
            return drift_err_set(err, DRIFT_E_UNSUPPORTED, "op attention",
                                 "attention=%s, but the fused kernel does not apply: %s (it needs "
                                 "bf16/fp16 compute, Dh == Dv in {64, 128}, Lk >= 1, sm_80+; wgmma: sm_90)",
                                 ctx->attn_mode_name, why);
    }
    const drift_dtype c = op->compute;
    const size_t cs = drift_dtype_size(c);
    const void *qa = NULL, *ka = NULL, *va = NULL;
    void *tq = NULL, *tk = NULL, *tv = NULL, *perm = NULL;
    int rc = as_compute(ctx, q, c, &qa, &tq, err);
    if (!rc) rc = as_compute(ctx, k, c, &ka, &tk, err);
    if (!rc) rc = as_compute(ctx, v, c, &va, &tv, err);
    if (rc) goto done;
    if (!d.layout) {
        rc = attention_unfused(ctx, op, qa, ka, va, BH, d.Lq, d.Lk, d.Dh, d.Dv, out->data, out->dtype, bp, bs, d.H, err);
        goto done;
    }
    /* layout 1: [B, L, H, D] -> [B, H, L, D] scratch, run as layout 0, output
       back. Each operand's scratch sits at the operand's own offset modulo
       256 bytes: cuBLASLt's algorithm (hence its summation order) depends on
       pointer alignment (gemm_lt.c), so this keeps the result bitwise that of
       layout 0 on tensors aligned like these. */
    {
        const size_t qb = align256((size_t)q->numel * cs) + 256, kb = align256((size_t)k->numel * cs) + 256,
                     vb = align256((size_t)v->numel * cs) + 256,
                     ob = (size_t)out->numel * drift_dtype_size(out->dtype);
        cudaError_t e = dcu_malloc(ctx, &perm, qb + kb + vb + ob);
        if (e != cudaSuccess) {
            rc = dcu_check(e, err, "op attention", "allocating the layout-1 permute scratch");
            goto done;
        }
        char *base = (char *)perm;
        char *qp = same_mod256(base, qa), *kp = same_mod256(base + qb, ka), *vp = same_mod256(base + qb + kb, va),
             *op0 = base + qb + kb + vb;
        rc = swap12(ctx, qa, qp, c, d.B, d.Lq, d.H, d.Dh, err);
        if (!rc) rc = swap12(ctx, ka, kp, c, d.B, d.Lk, d.H, d.Dh, err);
        if (!rc) rc = swap12(ctx, va, vp, c, d.B, d.Lk, d.H, d.Dv, err);
        if (!rc) rc = attention_unfused(ctx, op, qp, kp, vp, BH, d.Lq, d.Lk, d.Dh, d.Dv, op0, out->dtype, bp, bs, d.H, err);
        if (!rc) rc = swap12(ctx, op0, out->data, out->dtype, d.B, d.H, d.Lq, d.Dv, err);
    }
done:
    dcu_free(ctx, perm);
    dcu_free(ctx, tq);
    dcu_free(ctx, tk);
    dcu_free(ctx, tv);
    return rc;
}
