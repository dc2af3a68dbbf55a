/* Fused ATTENTION (kernels/backend.h semantics) for bf16/fp16 compute,
 * Dh == Dv in {64, 128}: S and P never leave the SM.
 *
 * Exact two-pass scheme, one CTA per (batch*head, 128-query tile), 8 warps,
 * each warp owns 16 query rows; both passes run in the same CTA, so the row
 * statistics (m, l) stay in registers:
 *   pass 1: for every key tile of 64 keys: s = fp32(q.k) * scale (mma.sync
 *           m16n8k16, fp32 accumulation, then one __fmul_rn, as cuBLASLt's
 *           alpha), masked to -inf past Lk; the running row max m only
 *           (no exponentials: pass 1 is the mma and a max);
 *   pass 2: the same key tiles again, s recomputed by the same code (bitwise
 *           identical to pass 1), p = expf(s - m) with the FINAL (global) row
 *           max; l += p in fp32 (the unrounded p, as the unfused path sums
 *           it), p rounded once to the compute dtype (RNE, dev_common.cuh),
 *           o += p.v (mma.sync, fp32 accumulation);
 *   out = round_out(__fdiv_rn(o, l)).
 * So p follows the contract exactly (global max, one rounding); what differs
 * from the unfused path is the fp32 summation order of q.k (inside the mma
 * vs cuBLASLt) and of l (per-thread partial sums over its columns, then a
 * quad reduction, instead of the unfused kernel's order), both at fp32 ULP
 * level (kernels/cuda/README.md).
 *
 * Non-finite values follow the unfused path: the max ignores NaN (fmaxf);
 * a row whose final max is not finite gets l = NaN (the unfused path's
 * expf(s - m) is NaN there for every s that attains it, or for every s when
 * m = -inf), hence a NaN output row; a NaN s makes l NaN through the sum.
 *
 * Data movement: K (pass 1) and K+V (pass 2) tiles of 64 rows x D are
 * staged in shared memory with cp.async (16-byte chunks, zero-filled past
 * Lk), double-buffered across the whole two-pass sequence (the first pass-2
 * tile is fetched while the last pass-1 tile is computed). Rows are XOR
 * swizzled in 16-byte chunks (chunk c of row r at c ^ (r & 7)) so ldmatrix
 * is conflict-free. Q is staged once through the (not yet used) V buffers and
 * kept in registers as mma A fragments. P goes from the S accumulators to
 * the P.V A fragments in registers (the m16n8 C layout of two adjacent key
 * tiles is the m16k16 A layout).
 *
 * Layouts: element (b, h, l, d) of q, k, v and out sits at
 * b*sB + h*sH + l*sL + d (dcu_attn_strides), so ATTENTION's layout 0
 * ([B, H, L, D]: sH = L*D, sL = D) and layout 1 ([B, L, H, D]: sH = D,
 * sL = H*D) run the same code on the same values: a CTA computes exactly the
 * same arithmetic whatever the strides, only its addresses change, so the
 * two layouts give bitwise equal results.
 *
 * Requirements (checked by the host side, attention_lt.c): q, k, v in the
 * compute dtype, 16-byte aligned base pointers and q/k/v strides that are
 * multiples of 8 elements (every row start 16-byte aligned for cp.async);
 * sm_80 or newer. The output is written element by element (any strides). */
#include "kernels/cuda/attention_launch.cuh"
#include "kernels/cuda/ptx_async.cuh"

#include <math.h>

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kBM = kWarps * 16; /* query rows per CTA */
constexpr int kBN = 64;          /* keys per tile */

/* d += a(16x16, row) * b(16x8, col), fp32 accumulators. */
template <bool BF16>
DCU_DEV void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if (BF16)
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Element offset of 16-byte chunk c of row r in a swizzled [rows][D] tile. */
template <int D>
DCU_DEV int swz(int r, int c) {
    return r * D + ((c ^ (r & 7)) << 3);
}

/* Copies rows [row0, row0 + nrows) of an [L, D] matrix whose rows are ld
 * elements apart into a swizzled smem tile of nrows rows; rows >= L are
 * zero-filled. */
template <int D, int NROWS>
DCU_DEV void load_tile(uint16_t *sm, const uint16_t *g, int64_t row0, int64_t L, int64_t ld) {
    constexpr int kChunks = D / 8; /* 16-byte chunks per row */
    constexpr int kTotal = NROWS * kChunks;
    constexpr int kRowStep = kThreads / kChunks; /* rows between a thread's chunks */
    static_assert(kTotal % kThreads == 0 && kThreads % kChunks == 0, "tile chunks must divide evenly over the threads");
    const int r0 = (int)threadIdx.x / kChunks, c = (int)threadIdx.x % kChunks; /* c is the same for every i */
    const uint16_t *p = g + (row0 + r0) * ld + c * 8;
    const int64_t step = (int64_t)kRowStep * ld;
#pragma unroll
    for (int i = 0; i < kTotal / kThreads; i++) {
        const int r = r0 + i * kRowStep;
        const bool ok = row0 + r < L;
        dcu_cp_async16(dcu_smem_addr(sm + swz<D>(r, c)), ok ? p : g, ok ? 16 : 0); /* any valid address when zero-filling */
        p += step;
    }
}

/* The scaled, masked score tile of this warp: s[j][.] for keys j*8.. of the
 * tile (m16n8 C layout: [0],[1] row g, keys 2t, 2t+1; [2],[3] row g+8).
 * Pass 1 and pass 2 both call this, so s is bitwise the same in both. */
template <bool BF16, int D>
DCU_DEV void score_tile(float (&s)[kBN / 8][4], const uint32_t (&qf)[D / 16][4], const uint16_t *ks, int lane,
                        float scale, int valid) {
#pragma unroll
    for (int j = 0; j < kBN / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int j = 0; j < kBN / 8; j++) {
        /* K rows j*8 .. j*8+7 (keys = n), d chunks 4kk .. 4kk+3: b0/b1 of k-steps 2kk and 2kk+1 */
#pragma unroll
        for (int kk = 0; kk < D / 32; kk++) {
            uint32_t b0, b1, b2, b3;
            dcu_ldsm_x4(dcu_smem_addr(ks + swz<D>(j * 8 + (lane & 7), kk * 4 + (lane >> 3))), b0, b1, b2, b3);
            mma16816<BF16>(s[j], qf[2 * kk], b0, b1);
            mma16816<BF16>(s[j], qf[2 * kk + 1], b2, b3);
        }
    }
    const int t2 = (lane & 3) * 2;
#pragma unroll
    for (int j = 0; j < kBN / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int key = j * 8 + t2 + (e & 1);
            s[j][e] = key < valid ? __fmul_rn(s[j][e], scale) : -INFINITY;
        }
}

DCU_DEV uint32_t round_bits(float x, bool bf16) { return bf16 ? dcu_f32_to_bf16(x) : dcu_f32_to_f16(x); }

template <bool BF16, int D>
__global__ void __launch_bounds__(kThreads, D == 64 ? 2 : 1)
    k_attn_fused(const uint16_t *__restrict__ q, const uint16_t *__restrict__ k, const uint16_t *__restrict__ v,
                 const dcu_attn_strides st_, int64_t Lq, int64_t Lk, int64_t n_qtiles, float scale,
                 void *__restrict__ out, int to) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    extern __shared__ __align__(128) uint16_t smem[];
    constexpr int kTile = kBN * D; /* elements of one K or V tile */
    uint16_t *Ks = smem;           /* [2][kBN][D] */
    uint16_t *Vs = smem + 2 * kTile; /* [2][kBN][D]; holds the Q tile before pass 2 */

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t2 = (lane & 3) * 2;
    const int64_t bh = (int64_t)blockIdx.x / n_qtiles;
    const int64_t q0 = ((int64_t)blockIdx.x - bh * n_qtiles) * kBM;
    /* (b, h) of this CTA; the row strides stay in the parameter space until
       load_tile turns them into per-thread pointer steps (ptxas, sm_90: no
       spills, 233 / 128 registers at D = 128 / 64) */
    const uint16_t *qh, *kh, *vh;
    {
        const int64_t bb = bh / st_.H, hh = bh - bb * st_.H;
        qh = q + bb * st_.q[0] + hh * st_.q[1];
        kh = k + bb * st_.k[0] + hh * st_.k[1];
        vh = v + bb * st_.v[0] + hh * st_.v[1];
    }
    const int n_kt = (int)((Lk + kBN - 1) / kBN);

    /* Q tile -> smem (V area: 2 * kBN rows == kBM rows) -> registers */
    static_assert(2 * kBN == kBM, "the Q tile is staged in the two V buffers");
    load_tile<D, kBM>(Vs, qh, q0, Lq, st_.q[2]);
    dcu_cp_async_commit();
    /* first K tile (pass 1) */
    load_tile<D, kBN>(Ks, kh, 0, Lk, st_.k[2]);
    dcu_cp_async_commit();
    dcu_cp_async_wait<1>();
    __syncthreads();
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++) {
        int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        dcu_ldsm_x4(dcu_smem_addr(Vs + swz<D>(r, ks * 2 + (lane >> 4))), qf[ks][0], qf[ks][1], qf[ks][2], qf[ks][3]);
    }
    __syncthreads(); /* the V buffers are free again */

    float m[2] = {-INFINITY, -INFINITY}; /* rows g, g+8: running (then final) max */
    float l[2] = {0.0f, 0.0f};           /* pass 2: this thread's partial sums of p (its 16 columns of each tile) */
    float o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

    const int total = 2 * n_kt; /* iterations 0..n_kt-1: pass 1; n_kt..2n_kt-1: pass 2 */
    for (int it = 0; it < total; it++) {
        const int st = it & 1;
        /* prefetch iteration it+1 into the other stage (free: the previous
           iteration ended with a barrier) */
        if (it + 1 < total) {
            const int nx = it + 1, kt = nx < n_kt ? nx : nx - n_kt;
            load_tile<D, kBN>(Ks + (nx & 1) * kTile, kh, (int64_t)kt * kBN, Lk, st_.k[2]);
            if (nx >= n_kt) load_tile<D, kBN>(Vs + (nx & 1) * kTile, vh, (int64_t)kt * kBN, Lk, st_.v[2]);
            dcu_cp_async_commit();
            dcu_cp_async_wait<1>();
        } else {
            dcu_cp_async_wait<0>();
        }
        __syncthreads();

        const int kt = it < n_kt ? it : it - n_kt;
        const int64_t rem = Lk - (int64_t)kt * kBN;
        const int valid = rem < kBN ? (int)rem : kBN;
        float s[kBN / 8][4];
        score_tile<BF16, D>(s, qf, Ks + st * kTile, lane, scale, valid);

        if (it < n_kt) {
            /* ---- pass 1: the row max only (l is summed in pass 2 from the same
               expf values p is rounded from, as the unfused path sums them) ---- */
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float tm = -INFINITY;
#pragma unroll
                for (int j = 0; j < kBN / 8; j++) tm = fmaxf(tm, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
                tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 1));
                tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 2));
                m[h] = fmaxf(m[h], tm);
            }
        } else {
            /* ---- pass 2: p = expf(s - m) with the global max, rounded once, o += p v ---- */
            const uint16_t *vs = Vs + st * kTile;
#pragma unroll
            for (int kk = 0; kk < kBN / 16; kk++) {
                /* A fragment of P for keys kk*16 .. kk*16+15 from score tiles 2kk, 2kk+1 */
                uint32_t pa[4];
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const float *sj = s[2 * kk + half];
                    const float e0 = expf(__fsub_rn(sj[0], m[0])), e1 = expf(__fsub_rn(sj[1], m[0]));
                    const float e2 = expf(__fsub_rn(sj[2], m[1])), e3 = expf(__fsub_rn(sj[3], m[1]));
                    l[0] = __fadd_rn(__fadd_rn(l[0], e0), e1); /* fp32, unrounded p */
                    l[1] = __fadd_rn(__fadd_rn(l[1], e2), e3);
                    uint32_t lo0 = round_bits(e0, BF16), hi0 = round_bits(e1, BF16);
                    uint32_t lo1 = round_bits(e2, BF16), hi1 = round_bits(e3, BF16);
                    pa[2 * half] = lo0 | (hi0 << 16);     /* row g */
                    pa[2 * half + 1] = lo1 | (hi1 << 16); /* row g+8 */
                }
#pragma unroll
                for (int jj = 0; jj < D / 16; jj++) {
                    /* V rows (keys) kk*16 .. +15, dv chunks 2jj, 2jj+1 (transposed):
                       b0/b1 of dv tile 2jj, b0/b1 of dv tile 2jj+1 */
                    uint32_t b0, b1, b2, b3;
                    int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                    dcu_ldsm_x4_trans(dcu_smem_addr(vs + swz<D>(r, jj * 2 + (lane >> 4))), b0, b1, b2, b3);
                    mma16816<BF16>(o[2 * jj], pa, b0, b1);
                    mma16816<BF16>(o[2 * jj + 1], pa, b2, b3);
                }
            }
        }
        __syncthreads(); /* stage st is overwritten by the next iteration's prefetch */

        if (it == total - 1) {
            /* end of pass 2: full row sums (same value on the 4 lanes of a quad) */
#pragma unroll
            for (int h = 0; h < 2; h++) l[h] = dcu_attn_quad_row_sum(l[h], m[h]);
        }
    }

    /* ---- out = round(o / l) ---- */
    const int64_t ob = (bh / st_.H) * st_.o[0] + (bh - (bh / st_.H) * st_.H) * st_.o[1];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t row = q0 + warp * 16 + g + h * 8;
        if (row >= Lq) continue;
        const int64_t base = ob + row * st_.o[2];
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            dcu_st<int64_t>(out, to, base + j * 8 + t2, __fdiv_rn(o[j][2 * h], l[h]));
            dcu_st<int64_t>(out, to, base + j * 8 + t2 + 1, __fdiv_rn(o[j][2 * h + 1], l[h]));
        }
    }
#else
    (void)q, (void)k, (void)v, (void)st_, (void)Lq, (void)Lk, (void)n_qtiles, (void)scale, (void)out, (void)to;
    __trap(); /* the host side never launches this below sm_80 */
#endif
}

template <bool BF16, int D>
cudaError_t launch(const dcu_ctx *ctx, const void *q, const void *k, const void *v, const dcu_attn_strides &st,
                   int64_t BH, int64_t Lq, int64_t Lk, float scale, void *out, drift_dtype to) {
    /* K and V, two stages each */
    const size_t smem = (size_t)4 * kBN * D * sizeof(uint16_t);
    static int smem_set[DCU_MAX_DEVICES]; /* per instantiation: one flag per device */
    return dcu_attn_launch(k_attn_fused<BF16, D>, smem, smem_set, kBM, kThreads, ctx, q, k, v, st, BH, Lq, Lk, scale, out, to);
}

} // namespace

/* cudaFuncSetAttribute is a driver call (host work, and a lock shared by
 * every thread of the process): once per kernel and device, not per launch. */
extern "C" cudaError_t dcu_func_smem_once(const void *func, int smem, int device, int *done) {
    if (device < 0 || device >= DCU_MAX_DEVICES)
        return cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (__atomic_load_n(&done[device], __ATOMIC_ACQUIRE) == smem) return cudaSuccess;
    cudaError_t e = cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess) __atomic_store_n(&done[device], smem, __ATOMIC_RELEASE); /* a racing twin sets it twice: harmless */
    return e;
}

/* Grid size limit of the fused kernel (blocks = ceil(Lq/128) * BH). */
extern "C" int dcu_attn_fused_grid_ok(int64_t BH, int64_t Lq) {
    const int64_t n_qt = (Lq + kBM - 1) / kBM;
    return BH > 0 && n_qt > 0 && n_qt <= (int64_t)INT32_MAX / BH;
}

/* Strides every cp.async row start needs: multiples of 8 elements (16 bytes). */
extern "C" int dcu_attn_fused_strides_ok(const dcu_attn_strides *st) {
    if (st->H < 1) return 0;
    for (int i = 0; i < 3; i++)
        if (st->q[i] % 8 || st->k[i] % 8 || st->v[i] % 8) return 0;
    return 1;
}

/* q, k, v in `c` (bf16/fp16) at st's strides, 16-byte aligned; out in `to`.
 * BH = B*H, D in {64, 128}, Lk >= 1. */
extern "C" cudaError_t dcu_launch_attn_fused(const dcu_ctx *ctx, const void *q, const void *k, const void *v,
                                             const dcu_attn_strides *st, drift_dtype c, int64_t BH, int64_t Lq,
                                             int64_t Lk, int64_t D, float scale, void *out, drift_dtype to) {
    DCU_ATTN_DISPATCH(launch, ctx, q, k, v, st, c, BH, Lq, Lk, D, scale, out, to);
}
