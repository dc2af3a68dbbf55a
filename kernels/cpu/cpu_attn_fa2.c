/* ATTENTION in FlashAttention-2's order (op->sub DRIFT_ATTN_ORDER_LAST_FIRST,
 * 16-bit compute): what torch 2.11 runs for SDPA without a mask, or with
 * is_causal (square), at a head dim that is no multiple of 8 (cuDNN refuses
 * it; flash pads the head dim to 8). A bias (in3: is_causal's 0 / -inf) is
 * added to the raw scores, as the kernel masks them; key blocks masked whole
 * before the first score are skipped (the kernel stops at the causal limit). Written from FlashAttention-2's forward as torch builds it (flash_api
 * set_params_splitkv, flash_fwd_kernel.h, softmax.h), per query row:
 *
 *   scores s = q k^T unscaled, fp32, the head dim in chunks of 16 (one MMA
 *   k-step each: the exact chunk sum added to the running value, one rounding);
 *   split-KV (flash-decoding) when the heuristic below asks for more than one
 *   split: key blocks of BN = 256 (head dim <= 64; 128 up to 128, else 64), else
 *   the plain kernel's blocks of 128 (head dim <= 64; else 64);
 *   per split, its key blocks from the last to the first: m = running raw max,
 *   a = exp2f((m_old - m) * c) rescales the 4 lane sums and the accumulator
 *   (c = scale * log2(e) in fp32), p = exp2f(fmaf(s, c, -(m * c))), lane t of
 *   the quad sums the block's columns 8j + 2t, 8j + 2t + 1 in j order, p is
 *   rounded to bf16 and P V is added to the accumulator 16 keys at a time (the
 *   exact 16-term sum, one rounding);
 *   l = (l0 + l2) + (l1 + l3) (the quad's butterfly), o = acc * (1 / l),
 *   lse = fmaf(m, scale, logf(l));
 *   splits combined as the combine kernel does: M = max lse, S = sum_s
 *   expf(lse_s - M) in split order, L = logf(S) + M, o = sum_s fmaf(expf(lse_s -
 *   L), o_s, .) in split order; then one rounding to op->out.
 *
 * The number of splits: flash_api's num_splits_heuristic over B * H *
 * ceil(Lq / 64) row blocks, 2 x the recording GPU's SM count
 * (drift_gemm_table_sms; unknown: no split) and ceil(Lk / BN) key blocks.
 * Measured on the H200 traces (bench/RESULTS.md "Issue 31: cpu noise floor"):
 * Helios' 212-key attention (one split, head dim 12) and LTX-2's 9-query,
 * 512-key audio attention (two splits, head dim 4) bitwise at the recorded
 * to_out.0 output fed the recorded q, k, v. CUDA's exp2f, expf and the
 * kernel's __logf are approximations these host functions need not equal
 * bit for bit; p is rounded to bf16 and o to the output dtype after them, so
 * a flip is rare. fmaf here is deliberate (nvcc contracts these expressions). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "kernels/cpu/host_internal.h"

typedef struct fa2_job {
    const float *q, *k, *v;
    const float *bias; /* NULL, or in3 (fp32 [Bb, Hb, Lqb, Lk]; strides bs) */
    int64_t bs[3];
    float *o;
    int64_t B, H, Lq, Lk, Dh, Dv;
    int layout;
    int64_t BN, ns, nbps;
    float scale, c; /* c = scale * log2(e), as the kernel's scale_softmax_log2 */
    drift_dtype compute, out;
    volatile int nomem; /* a worker's scratch allocation failed */
} fa2_job;

static inline int64_t idx(const fa2_job *j, int64_t b, int64_t h, int64_t l, int64_t L, int64_t D) {
    return j->layout ? ((b * L + l) * j->H + h) * D : ((b * j->H + h) * L + l) * D;
}

/* x rounded to the compute dtype (a no-op when the executor already cast it). */
static inline double op16(const fa2_job *j, float x) { return (double)drift_round_to(x, j->compute); }

static void fa2_row(const fa2_job *j, int64_t b, int64_t h, int64_t r, float *s, float *os, float *lse, float *acc) {
    const int64_t Lk = j->Lk, Dh = j->Dh, Dv = j->Dv, BN = j->BN;
    const float *q = j->q + idx(j, b, h, r, j->Lq, Dh);
    for (int64_t c = 0; c < Lk; c++) {
        const float *k = j->k + idx(j, b, h, c, Lk, Dh);
        float a = 0.0f;
        for (int64_t d0 = 0; d0 < Dh; d0 += 16) {
            double e = 0.0;
            for (int64_t d = d0; d < Dh && d < d0 + 16; d++) e += op16(j, q[d]) * op16(j, k[d]);
            a = (float)((double)a + e);
        }
        s[c] = a;
    }
    if (j->bias) { /* is_causal's 0 / -inf: the kernel's masking of the raw scores */
        const float *bi = j->bias + b * j->bs[0] + h * j->bs[1] + r * j->bs[2];
        for (int64_t c = 0; c < Lk; c++) s[c] = s[c] + bi[c];
    }
    const int64_t nnb = (Lk + BN - 1) / BN;
    for (int64_t sp = 0; sp < j->ns; sp++) {
        const int64_t lo = sp * j->nbps, hi = (sp + 1) * j->nbps < nnb ? (sp + 1) * j->nbps : nnb;
        float *o = os + sp * Dv;
        if (lo >= hi) { /* an empty split: nothing to add */
            memset(o, 0, (size_t)Dv * sizeof(float));
            lse[sp] = -INFINITY;
            continue;
        }
        float m = -INFINITY, l4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        memset(acc, 0, (size_t)Dv * sizeof(float));
        int first = 1;
        for (int64_t bi = hi - 1; bi >= lo; bi--) {
            const int64_t c0 = bi * BN, c1 = c0 + BN < Lk ? c0 + BN : Lk;
            float mt = m;
            for (int64_t c = c0; c < c1; c++)
                if (s[c] > mt) mt = s[c];
            /* a block masked whole before any score: beyond the causal limit, which the
               kernel does not visit */
            if (first && mt == -INFINITY) continue;
            if (!first) {
                const float a = exp2f((m - mt) * j->c);
                for (int t = 0; t < 4; t++) l4[t] *= a;
                for (int64_t d = 0; d < Dv; d++) acc[d] *= a;
            }
            first = 0;
            m = mt;
            const float ms = m * j->c;
            for (int64_t c = c0; c < c1; c++) s[c] = exp2f(fmaf(s[c], j->c, -ms));
            for (int t = 0; t < 4; t++)
                for (int64_t c = c0 + 2 * t; c < c1; c += 8) {
                    l4[t] += s[c];
                    if (c + 1 < c1) l4[t] += s[c + 1];
                }
            drift_dtype_round_n(s + c0, (size_t)(c1 - c0), j->compute); /* P in the operand dtype */
            for (int64_t k0 = c0; k0 < c1; k0 += 16)
                for (int64_t d = 0; d < Dv; d++) {
                    double e = 0.0;
                    for (int64_t c = k0; c < c1 && c < k0 + 16; c++) e += (double)s[c] * op16(j, j->v[idx(j, b, h, c, Lk, Dv) + d]);
                    acc[d] = (float)((double)acc[d] + e);
                }
        }
        if (first) { /* every block masked: an empty split */
            memset(o, 0, (size_t)Dv * sizeof(float));
            lse[sp] = -INFINITY;
            continue;
        }
        const float l = (l4[0] + l4[2]) + (l4[1] + l4[3]);
        const float inv = (l == 0.0f || l != l) ? 1.0f : 1.0f / l;
        for (int64_t d = 0; d < Dv; d++) o[d] = acc[d] * inv;
        lse[sp] = (l == 0.0f || l != l) ? -INFINITY : fmaf(m, j->scale, logf(l));
    }
    float *y = j->o + idx(j, b, h, r, j->Lq, Dv);
    if (j->ns == 1) {
        memcpy(y, os, (size_t)Dv * sizeof(float));
    } else {
        float M = -INFINITY;
        for (int64_t sp = 0; sp < j->ns; sp++)
            if (lse[sp] > M) M = lse[sp];
        if (M == -INFINITY) M = 0.0f;
        float S = 0.0f;
        for (int64_t sp = 0; sp < j->ns; sp++) S += expf(lse[sp] - M);
        const float L = (S == 0.0f || S != S) ? INFINITY : logf(S) + M;
        for (int64_t d = 0; d < Dv; d++) y[d] = 0.0f;
        for (int64_t sp = 0; sp < j->ns; sp++) {
            const float w = expf(lse[sp] - L);
            for (int64_t d = 0; d < Dv; d++) y[d] = fmaf(w, os[sp * Dv + d], y[d]);
        }
    }
    drift_dtype_round_n(y, (size_t)Dv, j->out);
}

static void fa2_rows(void *p, int64_t r0, int64_t r1) {
    fa2_job *j = p;
    float *s = drift_malloc((size_t)(j->Lk + j->ns * j->Dv + j->ns + j->Dv) * sizeof(float));
    if (!s) {
        j->nomem = 1;
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        const int64_t bh = r / j->Lq, l = r - bh * j->Lq;
        fa2_row(j, bh / j->H, bh % j->H, l, s, s + j->Lk, s + j->Lk + j->ns * j->Dv, s + j->Lk + j->ns * j->Dv + j->ns);
    }
    drift_free(s);
}

/* flash_api's num_splits_heuristic. */
static int64_t num_splits(int64_t bhm, int64_t slots, int64_t nnb, int64_t max_splits) {
    if ((double)bhm >= 0.8 * (double)slots) return 1;
    if (max_splits > slots) max_splits = slots;
    if (max_splits > nnb) max_splits = nnb;
    if (max_splits < 1) return 1;
    float eff[128], best = 0.0f;
#define CEILDIV(a, b) (((a) + (b) - 1) / (b))
#define ELIGIBLE(s) ((s) == 1 || CEILDIV(nnb, (s)) != CEILDIV(nnb, (s) - 1))
    for (int64_t s = 1; s <= max_splits; s++) {
        eff[s - 1] = 0.0f;
        if (!ELIGIBLE(s)) continue;
        const float waves = (float)(bhm * s) / (float)slots;
        eff[s - 1] = waves / ceilf(waves);
        if (eff[s - 1] > best) best = eff[s - 1];
    }
    for (int64_t s = 1; s <= max_splits; s++)
        if (ELIGIBLE(s) && eff[s - 1] >= 0.85 * best) return s;
#undef ELIGIBLE
#undef CEILDIV
    return 1;
}

int drift_cpu_attention_fa2(int nt, int sms, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                            drift_err *err) {
    const drift_tensor *q = in[0], *k = in[1], *v = in[2];
    const int ly = op->layout != 0, hd = ly ? 2 : 1, ld = ly ? 1 : 2;
    fa2_job j;
    memset(&j, 0, sizeof j);
    j.q = (const float *)q->data, j.k = (const float *)k->data, j.v = (const float *)v->data, j.o = (float *)out->data;
    j.B = q->shape[0], j.H = q->shape[hd], j.Lq = q->shape[ld], j.Lk = k->shape[ld], j.Dh = q->shape[3], j.Dv = v->shape[3];
    j.layout = ly;
    j.compute = op->compute, j.out = op->out;
    if (op->n_in > 3) {
        j.bias = (const float *)in[3]->data;
        drift_attn_bias_strides(in[3], j.bs);
    }
    if (j.B * j.H == 0 || j.Lq == 0 || j.Dv == 0) return DRIFT_OK;
    j.scale = op->scale != 0.0f ? op->scale : (float)(1.0 / sqrt((double)j.Dh));
    j.c = (float)((double)j.scale * 1.4426950408889634); /* M_LOG2E, in double as the host computes it */
    const int64_t hpad = (j.Dh + 7) / 8 * 8; /* torch pads the head dim to 8 */
    const int64_t bn_split = hpad <= 64 ? 256 : (hpad <= 128 ? 128 : 64), bn_plain = hpad <= 64 ? 128 : 64;
    j.ns = sms > 0 ? num_splits(j.B * j.H * ((j.Lq + 63) / 64), 2 * (int64_t)sms, (j.Lk + bn_split - 1) / bn_split, 128)
                   : 1;
    j.BN = j.ns > 1 ? bn_split : bn_plain;
    j.nbps = ((j.Lk + j.BN - 1) / j.BN + j.ns - 1) / j.ns;
    drift_host_parallel_for(nt, j.B * j.H * j.Lq, 16, fa2_rows, &j);
    if (j.nomem) return drift_err_set(err, DRIFT_E_NOMEM, "op", "attention: out of memory for a scratch buffer");
    return DRIFT_OK;
}
