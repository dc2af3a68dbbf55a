/* ATTENTION under the torch profile where torch runs FlashAttention-2 (drift's
 * own code; the order of operations is a fact about torch's flash_fwd_kernel,
 * aten/src/ATen/native/transformers/cuda/flash_attn): a head dim that is no
 * multiple of 8 (cuDNN declines it; torch pads q, k, v to a multiple of 8 and
 * runs flash), no mask, bf16/fp16, head dims up to 64.
 *
 * Splits: torch's set_params_splitkv picks num_splits with flash's
 * num_splits_heuristic (batch * heads * ceil(Sq / 64) blocks against 2 x the
 * SM count, ceil(Sk / 256) key blocks). One split: flash_fwd_kernel, keys in
 * blocks of kBlockN = 128. More: flash_fwd_splitkv_kernel over blocks of 256
 * keys, split s taking blocks [s n, (s + 1) n) (n = ceil(blocks / splits)),
 * each normalised on its own with lse = m * scale + __logf(l) (an FMA), then
 * the combine kernel: lse_max over the splits, lse_sum = sum of
 * expf(lse_s - lse_max) in its thread order (per thread the splits t, t + R,
 * ... in turn, then an xor butterfly over R = min(128 / rows, max_splits)
 * threads), lse_logsum = logf(lse_sum) + lse_max, O = sum over s in order of
 * fma(expf(lse_s - lse_logsum), O_s, O), rounded once.
 *
 * Per row, keys in blocks taken from the last block to the first:
 *   S   = Q K^T with mma.sync m16n8k16 (fp32 accumulate) over the head dim in
 *         steps of 16 (the padded dims are zeros; a step of zeros adds
 *         nothing); keys past Sk are -inf;
 *   first block:  m = max_j S; p = exp2(fma(S, scale_log2, -m * scale_log2));
 *   later blocks: m' = max(m, max_j S); c = exp2((m - m') * scale_log2);
 *                 l *= c; O *= c; p as above with m';
 *   l   = per thread, its columns (2t, 2t+1) of each 8-column tile in order,
 *         added to l (the first block starts from its first value);
 *   O  += round_bf16(p) V with mma.sync over the block's keys in steps of 16;
 *   end: l = (l + l^2) + (l^1 + l^3) over the quad (xor shuffles 2 then 1);
 *        O *= 1 / l (0 or NaN: 1), rounded once to the output dtype.
 * Thread t = lane % 4 of quad g = lane / 4 holds rows g and g + 8 of its
 * warp's 16 and columns 2t, 2t + 1 of every 8-wide tile, the MMA's layout
 * (also flash's). fast != 0 (the spec's flash_fast=1): exp2 and 1 / l as the
 * approximate ex2 / rcp instructions --use_fast_math would emit. */
#include <cstdio>

#include "kernels/cuda/dev_common.cuh"
#include "kernels/cuda/torch/torch_profile.h"

namespace {

DCU_DEV uint32_t ld16(const void *p, int64_t i) { return ((const uint16_t *)p)[i]; }

template <int DT>
DCU_DEV uint32_t pack2(float lo, float hi) {
    const uint32_t a = DT == DRIFT_BF16 ? dcu_f32_to_bf16(lo) : dcu_f32_to_f16(lo);
    const uint32_t b = DT == DRIFT_BF16 ? dcu_f32_to_bf16(hi) : dcu_f32_to_f16(hi);
    return (a & 0xffffu) | (b << 16);
}

/* d += a b: one m16n8k16 MMA, fp32 accumulate */
template <int DT>
DCU_DEV void mma16816(float *d, const uint32_t *a, const uint32_t *b) {
    if (DT == DRIFT_BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

DCU_DEV float ex2(float x, int fast) {
    if (!fast) return exp2f(x);
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

DCU_DEV float recip(float x, int fast) {
    if (!fast) return 1.f / x;
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* The 16-bit element (row, col) of a [rows, cols] slice at strides (rs, 1) or 0 outside. */
DCU_DEV uint32_t elem(const void *p, int64_t base, int64_t row, int64_t rows, int64_t rs, int col, int cols) {
    return row < rows && col < cols ? ld16(p, base + row * rs + col) : 0u;
}

/* One warp per 16 query rows of one (batch, head), 4 warps per block, blockIdx.z the split.
 * DP: the head dim padded to a multiple of 16 (the MMA's k); D: the real one. splits > 1:
 * the split's normalised fp32 O into oacc [split][b][h][row][DP] and its lse into lse. */
template <int DT, int DP, int kBlockN>
__global__ void k_flash_fwd(dct_sdpa_args a, float scale_log2, int fast, int splits, float *oacc, float *lse) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int64_t bh = blockIdx.y, b = bh / a.H, h = bh % a.H;
    const int64_t row0 = ((int64_t)blockIdx.x * 4 + warp) * 16;
    if (row0 >= a.Sq) return;
    const int D = (int)a.D;
    const int64_t qb = b * a.qs[0] + h * a.qs[1], kb = b * a.ks[0] + h * a.ks[1], vb = b * a.vs[0] + h * a.vs[1];
    /* Q as A fragments, one per 16 head dims */
    uint32_t qa[DP / 16][4];
#pragma unroll
    for (int kk = 0; kk < DP / 16; kk++) {
        const int c = kk * 16 + 2 * t;
        const int64_t r0 = row0 + g, r1 = row0 + g + 8;
        qa[kk][0] = elem(a.q, qb, r0, a.Sq, a.qs[2], c, D) | elem(a.q, qb, r0, a.Sq, a.qs[2], c + 1, D) << 16;
        qa[kk][1] = elem(a.q, qb, r1, a.Sq, a.qs[2], c, D) | elem(a.q, qb, r1, a.Sq, a.qs[2], c + 1, D) << 16;
        qa[kk][2] = elem(a.q, qb, r0, a.Sq, a.qs[2], c + 8, D) | elem(a.q, qb, r0, a.Sq, a.qs[2], c + 9, D) << 16;
        qa[kk][3] = elem(a.q, qb, r1, a.Sq, a.qs[2], c + 8, D) | elem(a.q, qb, r1, a.Sq, a.qs[2], c + 9, D) << 16;
    }
    float o[DP / 8][4];
#pragma unroll
    for (int n = 0; n < DP / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    const int nblocks = (int)((a.Sk + kBlockN - 1) / kBlockN), per = (nblocks + splits - 1) / splits;
    const int nb_min = (int)blockIdx.z * per;
    int nb_max = min(nblocks, ((int)blockIdx.z + 1) * per);
    if (a.causal) { /* flash's n_block_max for its row block (kBlockM 128, split kernel 64) */
        const int64_t bm = splits > 1 ? 64 : 128, mb = row0 / bm;
        const int64_t lim = ((mb + 1) * bm + a.Sk - a.Sq + kBlockN - 1) / kBlockN;
        if (lim < nb_max) nb_max = (int)lim;
    }
    for (int nb = nb_max - 1; nb >= nb_min; nb--) {
        const int64_t key0 = (int64_t)nb * kBlockN;
        float s[kBlockN / 8][4];
#pragma unroll
        for (int j = 0; j < kBlockN / 8; j++) {
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
            const int64_t key = key0 + 8 * j + g; /* B's column n = g */
#pragma unroll
            for (int kk = 0; kk < DP / 16; kk++) {
                const int c = kk * 16 + 2 * t;
                uint32_t kf[2];
                kf[0] = elem(a.k, kb, key, a.Sk, a.ks[2], c, D) | elem(a.k, kb, key, a.Sk, a.ks[2], c + 1, D) << 16;
                kf[1] = elem(a.k, kb, key, a.Sk, a.ks[2], c + 8, D) | elem(a.k, kb, key, a.Sk, a.ks[2], c + 9, D) << 16;
                mma16816<DT>(s[j], qa[kk], kf);
            }
#pragma unroll
            for (int e = 0; e < 4; e++) { /* keys past Sk, and for causal past row + Sk - Sq: -inf (apply_mask) */
                const int64_t col = key0 + 8 * j + 2 * t + (e & 1), row = row0 + g + 8 * (e >> 1);
                if (col >= a.Sk || (a.causal && col > row + a.Sk - a.Sq)) s[j][e] = -INFINITY;
            }
        }
        const bool first = nb == nb_max - 1;
#pragma unroll
        for (int r = 0; r < 2; r++) { /* r: row g (elements 0, 1) or g + 8 (elements 2, 3) */
            float mx = first ? s[0][2 * r] : fmaxf(m[r], s[0][2 * r]);
            for (int j = 0; j < kBlockN / 8; j++)
                for (int e = 0; e < 2; e++)
                    if (j || e) mx = fmaxf(mx, s[j][2 * r + e]);
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            if (!first) {
                const float cur = a.causal && mx == -INFINITY ? 0.f : mx; /* Check_inf: causal only */
                const float c = ex2((m[r] - cur) * scale_log2, fast);
                l[r] *= c;
#pragma unroll
                for (int n = 0; n < DP / 8; n++) o[n][2 * r] *= c, o[n][2 * r + 1] *= c;
            }
            m[r] = mx;
            const float ms = mx == -INFINITY ? 0.f : mx * scale_log2;
            float sum = l[r];
#pragma unroll
            for (int j = 0; j < kBlockN / 8; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const float p = ex2(fmaf(s[j][2 * r + e], scale_log2, -ms), fast);
                    s[j][2 * r + e] = p;
                    sum = (first && j == 0 && e == 0) ? p : sum + p;
                }
            l[r] = sum;
        }
        /* O += P V: P's C fragments of tiles 2i, 2i + 1 are the A fragment of keys 16i .. 16i + 15 */
#pragma unroll
        for (int i = 0; i < kBlockN / 16; i++) {
            uint32_t pa[4];
            pa[0] = pack2<DT>(s[2 * i][0], s[2 * i][1]);
            pa[1] = pack2<DT>(s[2 * i][2], s[2 * i][3]);
            pa[2] = pack2<DT>(s[2 * i + 1][0], s[2 * i + 1][1]);
            pa[3] = pack2<DT>(s[2 * i + 1][2], s[2 * i + 1][3]);
            const int64_t k0 = key0 + 16 * i + 2 * t;
#pragma unroll
            for (int n = 0; n < DP / 8; n++) {
                const int col = 8 * n + g; /* B's column: a head dim */
                uint32_t vf[2];
                vf[0] = elem(a.v, vb, k0, a.Sk, a.vs[2], col, D) | elem(a.v, vb, k0 + 1, a.Sk, a.vs[2], col, D) << 16;
                vf[1] = elem(a.v, vb, k0 + 8, a.Sk, a.vs[2], col, D) | elem(a.v, vb, k0 + 9, a.Sk, a.vs[2], col, D) << 16;
                mma16816<DT>(o[n], pa, vf);
            }
        }
    }
    const int64_t ob = b * a.os[0] + h * a.os[1];
    const float scale = a.scale;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float sum = l[r];
        sum = sum + __shfl_xor_sync(0xffffffffu, sum, 2);
        sum = sum + __shfl_xor_sync(0xffffffffu, sum, 1);
        const bool none = sum == 0.f || sum != sum; /* also an empty split: l stays 0 */
        const float inv = none ? 1.f : recip(sum, fast);
        const int64_t row = row0 + g + 8 * r;
        if (row >= a.Sq) continue;
        if (splits > 1) {
            const int64_t srow = (((int64_t)blockIdx.z * a.B + b) * a.H + h) * a.Sq + row;
            if (t == 0) lse[srow] = none ? -INFINITY : m[r] * scale + __logf(sum);
#pragma unroll
            for (int n = 0; n < DP / 8; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) oacc[srow * DP + 8 * n + 2 * t + e] = o[n][2 * r + e] * inv;
            continue;
        }
#pragma unroll
        for (int n = 0; n < DP / 8; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int col = 8 * n + 2 * t + e;
                if (col < D) dcu_st<int64_t>(a.o, DT, ob + row * a.os[2] + col, o[n][2 * r + e] * inv);
            }
    }
}

/* flash's combine kernel per (b, h, row), one thread each (see the file comment); KD: the
 * kernel's head dim (32 or 64), which sets its thread layout and so the order of lse_sum. */
template <int DT, int DP>
__global__ void k_flash_combine(dct_sdpa_args a, int splits, int kd, int fast, const float *oacc, const float *lse) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, rows = a.B * a.H * a.Sq;
    if (idx >= rows) return;
    const int64_t row = idx % a.Sq, h = (idx / a.Sq) % a.H, b = idx / (a.Sq * a.H);
    int maxs = 2;
    while (maxs < splits) maxs *= 2;
    const int bm = kd % 128 == 0 ? 4 : (kd % 64 == 0 ? 8 : 16), rl = 128 / bm, R = rl < maxs ? rl : maxs;
    const int nl = (maxs * bm + 127) / 128;
    float e[128];
    for (int i = 0; i < maxs; i++) e[i] = i < splits ? lse[(int64_t)i * rows + idx] : -INFINITY;
    float mx = -INFINITY;
    for (int i = 0; i < maxs; i++) mx = fmaxf(mx, e[i]);
    if (mx == -INFINITY) mx = 0.f;
    float part[128];
    for (int t = 0; t < R; t++) {
        float acc = fast ? __expf(e[t] - mx) : expf(e[t] - mx);
        for (int l = 1; l < nl; l++) {
            const int i = l * R + t;
            acc += i < maxs ? (fast ? __expf(e[i] - mx) : expf(e[i] - mx)) : 0.f;
        }
        part[t] = acc;
    }
    for (int off = R / 2; off >= 1; off /= 2) { /* the xor butterfly; every lane ends with lane 0's value */
        float nxt[128];
        for (int t = 0; t < R; t++) nxt[t] = part[t] + part[t ^ off];
        for (int t = 0; t < R; t++) part[t] = nxt[t];
    }
    const float sum = part[0];
    const float logsum = (sum == 0.f || sum != sum) ? INFINITY : (fast ? __logf(sum) : logf(sum)) + mx;
    float o[DP];
    for (int d = 0; d < DP; d++) o[d] = 0.f;
    for (int sp = 0; sp < splits; sp++) {
        const float sc = fast ? __expf(e[sp] - logsum) : expf(e[sp] - logsum);
        const float *src = oacc + ((int64_t)sp * rows + idx) * DP;
        for (int d = 0; d < DP; d++) o[d] = fmaf(sc, src[d], o[d]);
    }
    const int64_t ob = b * a.os[0] + h * a.os[1] + row * a.os[2];
    for (int d = 0; d < a.D; d++) dcu_st<int64_t>(a.o, DT, ob + d, o[d]);
}

/* flash's num_splits_heuristic(batch * heads * m_blocks, 2 * SMs, n_blocks, 128) */
int num_splits(int64_t bhm, int sms2, int nblocks) {
    if ((float)bhm >= 0.8f * (float)sms2) return 1;
    int maxs = 128;
    if (sms2 < maxs) maxs = sms2;
    if (nblocks < maxs) maxs = nblocks;
    float eff[129], best = 0.f;
    auto cdiv = [](int x, int y) { return (x + y - 1) / y; };
    auto eligible = [&](int ns) { return ns == 1 || cdiv(nblocks, ns) != cdiv(nblocks, ns - 1); };
    for (int ns = 1; ns <= maxs; ns++) {
        eff[ns] = 0.f;
        if (!eligible(ns)) continue;
        const float waves = (float)(bhm * ns) / (float)sms2;
        eff[ns] = waves / ceilf(waves);
        if (eff[ns] > best) best = eff[ns];
    }
    for (int ns = 1; ns <= maxs; ns++)
        if (eligible(ns) && eff[ns] >= 0.85f * best) return ns;
    return 1;
}

template <int DT, int DP>
cudaError_t launch_dp(dcu_ctx *ctx, const dct_sdpa_args *a, float scale_log2, int fast) {
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ctx->device) != cudaSuccess || sms < 1) sms = 132;
    const int64_t mblocks = (a->Sq + 63) / 64;
    const int splits = num_splits(a->B * a->H * mblocks, 2 * sms, (int)((a->Sk + 255) / 256));
    /* for drift invariance: the split count follows batch * heads (another batch, another order) */
    snprintf(ctx->last_choice, sizeof ctx->last_choice,
             "FlashAttention-2 %d split%s of %lld key blocks (%lld row blocks of 64 vs 2 x %d SMs)", splits,
             splits == 1 ? "" : "s", (long long)((a->Sk + (splits > 1 ? 255 : 127)) / (splits > 1 ? 256 : 128)),
             (long long)(a->B * a->H * mblocks), sms);
    dim3 block(128);
    if (splits <= 1) {
        dim3 grid((unsigned)((a->Sq + 63) / 64), (unsigned)(a->B * a->H), 1);
        k_flash_fwd<DT, DP, 128><<<grid, block, 0, ctx->stream>>>(*a, scale_log2, fast, 1, nullptr, nullptr);
        return cudaGetLastError();
    }
    const int64_t rows = a->B * a->H * a->Sq;
    void *oacc = nullptr, *lse = nullptr;
    cudaError_t e = dcu_malloc(ctx, &oacc, (size_t)(splits * rows * DP) * sizeof(float));
    if (e == cudaSuccess) e = dcu_malloc(ctx, &lse, (size_t)(splits * rows) * sizeof(float));
    if (e == cudaSuccess) {
        dim3 grid((unsigned)((a->Sq + 63) / 64), (unsigned)(a->B * a->H), (unsigned)splits);
        k_flash_fwd<DT, DP, 256><<<grid, block, 0, ctx->stream>>>(*a, scale_log2, fast, splits, (float *)oacc, (float *)lse);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) {
        const int kd = DP <= 32 ? 32 : 64; /* flash's kHeadDim for these head dims */
        k_flash_combine<DT, DP><<<(unsigned)((rows + 127) / 128), 128, 0, ctx->stream>>>(*a, splits, kd, fast,
                                                                                         (const float *)oacc,
                                                                                         (const float *)lse);
        e = cudaGetLastError();
    }
    dcu_free(ctx, oacc); /* stream-ordered: after the kernels that use them */
    dcu_free(ctx, lse);
    return e;
}

template <int DT>
cudaError_t launch(dcu_ctx *ctx, const dct_sdpa_args *a, float scale_log2, int fast) {
    switch ((int)((a->D + 15) / 16) * 16) {
    case 16: return launch_dp<DT, 16>(ctx, a, scale_log2, fast);
    case 32: return launch_dp<DT, 32>(ctx, a, scale_log2, fast);
    case 48: return launch_dp<DT, 48>(ctx, a, scale_log2, fast);
    case 64: return launch_dp<DT, 64>(ctx, a, scale_log2, fast);
    default: return cudaErrorInvalidValue;
    }
}

} // namespace

extern "C" int dct_flash_supported(const dct_sdpa_args *a, char *why, size_t why_size) {
    if (a->bias && !a->causal) return snprintf(why, why_size, "flash: a mask (torch's flash takes none)"), 0;
    if (a->causal && a->Sq != a->Sk) return snprintf(why, why_size, "flash: is_causal with Sq != Sk"), 0;
    if (a->dtype != DRIFT_BF16 && a->dtype != DRIFT_F16) return snprintf(why, why_size, "flash: bf16/fp16 only"), 0;
    if (a->D < 1 || a->D > 64)
        return snprintf(why, why_size, "flash: head dims up to 64 emulated (this one %lld)", (long long)a->D), 0;
    if (a->B * a->H > 65535 || (a->Sq + 63) / 64 > 2147483647LL || a->Sk > 2147483647LL)
        return snprintf(why, why_size, "flash: grid too large"), 0;
    return 1;
}

extern "C" cudaError_t dct_launch_flash(dcu_ctx *ctx, const dct_sdpa_args *a, int fast) {
    if (a->Sq <= 0 || a->B * a->H <= 0) return cudaSuccess;
    /* torch: params.scale_softmax_log2 = softmax_scale (a float) * M_LOG2E, in double, stored as float */
    const float scale_log2 = (float)((double)a->scale * 1.4426950408889634074);
    return a->dtype == DRIFT_BF16 ? launch<DRIFT_BF16>(ctx, a, scale_log2, fast) : launch<DRIFT_F16>(ctx, a, scale_log2, fast);
}
