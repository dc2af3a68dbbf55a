/* Fused ATTENTION on Hopper (sm_90a): the same exact two-pass contract as
 * attention_fused.cu (read its header first), with warpgroup MMAs (wgmma)
 * instead of mma.sync, so that K and V are read by the tensor cores straight
 * from shared memory once per 64 query rows instead of once per 16.
 *
 * One CTA per (batch*head, 128-query tile): two warpgroups of 128 threads,
 * each owning 64 query rows. Per key tile of 64 keys:
 *   S = Q K^T     wgmma m64n64k16, A = Q and B = K both from shared memory
 *                 (K-major), fp32 accumulation, D/16 k-steps;
 *   pass 1        the row max of the raw accumulators (see below);
 *   pass 2        s = fp32(q.k) * scale (one __fmul_rn, as cuBLASLt's alpha),
 *                 p = expf(s - m) with the final row max m, l += p (fp32,
 *                 unrounded p), p rounded once to the compute dtype (RNE),
 *                 O += P V: wgmma m64nDk16 with A = P from registers (the
 *                 accumulator layout of S is the A-fragment layout) and
 *                 B = V from shared memory (MN-major, "transposed");
 *   out = round_out(__fdiv_rn(o, l)).
 * Pass 1 takes the max of the unscaled accumulators and scales it once at
 * the end: for scale > 0 (finite), x -> fl(x * scale) is monotone, so
 * fl(max(x) * scale) == max(fl(x * scale)) bit for bit (NaN is ignored by
 * fmaxf either way); any other scale runs the per-element path. Keys past Lk
 * (zero-filled rows) are masked to -inf in the last tile only.
 *
 * Shared memory: Q [128][D], K and V [2 stages][64][D], each stored as
 * panels of 64 columns (128 bytes per row), rows 128-byte swizzled (16-byte
 * chunk c of row r at chunk c ^ (r & 7), every panel 1024-byte aligned): the
 * canonical SWIZZLE_128B layout the wgmma descriptors name. Tiles arrive by
 * cp.async (zero-filled past L), double-buffered across both passes; a
 * proxy fence orders those generic-proxy writes before the async-proxy
 * (wgmma) reads.
 *
 * Compiled for sm_90a only (CMakeLists.txt builds this file for that
 * target alone): elsewhere the kernel is a trap that the host never
 * launches (dcu_attn_wgmma_available). */
#include "kernels/cuda/attention_launch.cuh"
#include "kernels/cuda/ptx_async.cuh"

#include <math.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DCU_HAVE_WGMMA 1
#else
#define DCU_HAVE_WGMMA 0
#endif

namespace {

constexpr int kWarpGroups = 2;
constexpr int kThreads = kWarpGroups * 128;
constexpr int kBM = kWarpGroups * 64; /* query rows per CTA */
constexpr int kBN = 64;               /* keys per tile */
constexpr int kPanelBytesPerRow = 128; /* 64 16-bit columns */

/* ---- wgmma wrappers ---------------------------------------------------- */

DCU_DEV void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
DCU_DEV void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
DCU_DEV void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
/* Makes this thread's generic-proxy shared-memory writes (cp.async landed
 * data) visible to the async proxy that wgmma reads through. */
DCU_DEV void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* Pins accumulator registers around a wgmma batch so that the compiler
 * neither copies nor reorders them while the asynchronous MMAs own them (a
 * copy in between makes ptxas serialize the batch). */
template <int N>
DCU_DEV void fence_regs(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}

/* Shared-memory matrix descriptor, 128-byte swizzle: start address, leading
 * and stride byte offsets (16-byte units, 14 bits each), layout type 1. */
DCU_DEV uint64_t sw128_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFFu) << 32) | (1ull << 62);
}

#define WG_ACC32                                                                                                      \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),       \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),        \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),       \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define WG_ACC64                                                                                                      \
    WG_ACC32, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]),             \
        "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]),       \
        "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),       \
        "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),       \
        "+f"(d[63])
#define WG_R32                                                                                                        \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                          \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WG_R64                                                                                                        \
    WG_R32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                       \
           "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

/* d(64x64) (+)= A(64x16, smem, K-major) * B(16x64, smem, K-major). */
#define WG_SS_N64(TY)                                                                                                 \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                         \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {" WG_R32 "}, %32, %33, p, 1, 1, 0, 0;\n}\n" \
                 : WG_ACC32                                                                                           \
                 : "l"(da), "l"(db), "r"(accumulate))
/* d(64xN) (+)= A(64x16, registers) * B(16xN, smem, MN-major). */
#define WG_RS_N64(TY)                                                                                                 \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                         \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {" WG_R32                                  \
                 "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"                                                     \
                 : WG_ACC32                                                                                           \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate))
#define WG_RS_N128(TY)                                                                                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                         \
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {" WG_R64                                 \
                 "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"                                                     \
                 : WG_ACC64                                                                                           \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate))

template <bool BF16>
DCU_DEV void wgmma_ss_n64(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
#if DCU_HAVE_WGMMA
    if (BF16)
        WG_SS_N64("bf16");
    else
        WG_SS_N64("f16");
#else
    (void)d, (void)da, (void)db, (void)accumulate;
#endif
}

template <bool BF16, int N>
DCU_DEV void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int accumulate) {
#if DCU_HAVE_WGMMA
    if constexpr (N == 64) {
        if (BF16)
            WG_RS_N64("bf16");
        else
            WG_RS_N64("f16");
    } else {
        static_assert(N == 128, "N is the head dim: 64 or 128");
        if (BF16)
            WG_RS_N128("bf16");
        else
            WG_RS_N128("f16");
    }
#else
    (void)d, (void)a, (void)db, (void)accumulate;
#endif
}

/* Two floats rounded RNE to the 16-bit compute type, lo in the low half
 * (the same bits as dcu_f32_to_bf16 / dcu_f32_to_f16 for every non-NaN
 * value; p is never NaN-sensitive: a NaN p gives a NaN row either way). */
template <bool BF16>
DCU_DEV uint32_t pack2(float lo, float hi) {
    uint32_t r;
    if (BF16)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* Rows [row0, row0 + NROWS) of an [L, D] matrix (rows ld elements apart)
 * into a tile of D/64 panels of NROWS x 64, 128-byte swizzled; rows >= L
 * are zero-filled. */
template <int D, int NROWS>
DCU_DEV void load_tile_sw128(uint16_t *sm, const uint16_t *g, int64_t row0, int64_t L, int64_t ld) {
    constexpr int kChunks = D / 8; /* 16-byte chunks per row */
    constexpr int kTotal = NROWS * kChunks;
    constexpr int kRowStep = kThreads / kChunks;
    static_assert(kTotal % kThreads == 0 && kThreads % kChunks == 0, "tile chunks must divide evenly over the threads");
    const int r0 = (int)threadIdx.x / kChunks, c16 = (int)threadIdx.x % kChunks;
    uint16_t *panel = sm + (c16 >> 3) * NROWS * 64;
    const int c = c16 & 7;
    const uint16_t *p = g + (row0 + r0) * ld + c16 * 8;
    const int64_t step = (int64_t)kRowStep * ld;
#pragma unroll
    for (int i = 0; i < kTotal / kThreads; i++) {
        const int r = r0 + i * kRowStep;
        const bool ok = row0 + r < L;
        dcu_cp_async16(dcu_smem_addr(panel + r * 64 + ((c ^ (r & 7)) << 3)), ok ? p : g, ok ? 16 : 0);
        p += step;
    }
}

template <bool BF16, int D>
__global__ void __launch_bounds__(kThreads, 1)
    k_attn_wgmma(const uint16_t *__restrict__ q, const uint16_t *__restrict__ k, const uint16_t *__restrict__ v,
                 const dcu_attn_strides st_, int64_t Lq, int64_t Lk, int64_t n_qtiles, float scale,
                 void *__restrict__ out, int to) {
#if DCU_HAVE_WGMMA
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024u - (dcu_smem_addr(smem_raw) & 1023u)) & 1023u); /* 1024-byte aligned */
    constexpr int kTile = kBN * D;
    uint16_t *Qs = (uint16_t *)smem;  /* [D/64 panels][kBM][64] */
    uint16_t *Ks = Qs + kBM * D;      /* [2][D/64][kBN][64] */
    uint16_t *Vs = Ks + 2 * kTile;    /* [2][D/64][kBN][64] */

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wg = warp >> 2, wq = warp & 3;
    const int g = lane >> 2, t2 = (lane & 3) * 2;
    const int64_t bh = (int64_t)blockIdx.x / n_qtiles;
    const int64_t q0 = ((int64_t)blockIdx.x - bh * n_qtiles) * kBM;
    const uint16_t *qh, *kh, *vh;
    {
        const int64_t bb = bh / st_.H, hh = bh - bb * st_.H;
        qh = q + bb * st_.q[0] + hh * st_.q[1];
        kh = k + bb * st_.k[0] + hh * st_.k[1];
        vh = v + bb * st_.v[0] + hh * st_.v[1];
    }
    const int n_kt = (int)((Lk + kBN - 1) / kBN);
    const bool fast_max = scale > 0.0f && scale < INFINITY;

    load_tile_sw128<D, kBM>(Qs, qh, q0, Lq, st_.q[2]);
    load_tile_sw128<D, kBN>(Ks, kh, 0, Lk, st_.k[2]);
    dcu_cp_async_commit();

    /* this warpgroup's 64 Q rows; panels kBM rows apart, K/V panels kBN rows */
    const uint32_t q_s = dcu_smem_addr(Qs) + (uint32_t)(wg * 64 * kPanelBytesPerRow);
    constexpr uint32_t kQPanel = kBM * kPanelBytesPerRow, kKPanel = kBN * kPanelBytesPerRow;

    float m[2] = {-INFINITY, -INFINITY}; /* rows g, g+8 of this warp: running (then final) max */
    float l[2] = {0.0f, 0.0f};           /* pass 2: this thread's partial sums of p */
    float s[kBN / 2];                    /* S accumulators: [4j + e], keys 8j + t2 + (e & 1), row g + 8 (e >> 1) */
    float o[D / 2];                      /* O accumulators, same layout over the D columns */
#pragma unroll
    for (int i = 0; i < kBN / 2; i++) s[i] = 0.0f;
#pragma unroll
    for (int i = 0; i < D / 2; i++) o[i] = 0.0f;

    const int total = 2 * n_kt; /* iterations 0..n_kt-1: pass 1; n_kt..2n_kt-1: pass 2 */
    for (int it = 0; it < total; it++) {
        const int st = it & 1;
        if (it + 1 < total) { /* prefetch into the other stage (freed by the previous iteration's barrier) */
            const int nx = it + 1, kt = nx < n_kt ? nx : nx - n_kt;
            load_tile_sw128<D, kBN>(Ks + (nx & 1) * kTile, kh, (int64_t)kt * kBN, Lk, st_.k[2]);
            if (nx >= n_kt) load_tile_sw128<D, kBN>(Vs + (nx & 1) * kTile, vh, (int64_t)kt * kBN, Lk, st_.v[2]);
            dcu_cp_async_commit();
            dcu_cp_async_wait<1>();
        } else {
            dcu_cp_async_wait<0>();
        }
        fence_proxy_async();
        __syncthreads();

        const int kt = it < n_kt ? it : it - n_kt;
        const int64_t rem = Lk - (int64_t)kt * kBN;
        const int valid = rem < kBN ? (int)rem : kBN;

        /* ---- S = Q K^T (raw fp32 accumulators) ---- */
        const uint32_t k_s = dcu_smem_addr(Ks + st * kTile);
        fence_regs(s);
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++) {
            const uint32_t koff = (uint32_t)((ks & 3) * 32); /* 16 columns = 32 bytes into the panel row */
            const uint64_t da = sw128_desc(q_s + (uint32_t)(ks >> 2) * kQPanel + koff, 16, 1024);
            const uint64_t db = sw128_desc(k_s + (uint32_t)(ks >> 2) * kKPanel + koff, 16, 1024);
            wgmma_ss_n64<BF16>(s, da, db, ks > 0);
        }
        wg_commit();
        wg_wait0();
        fence_regs(s);

        if (it < n_kt) {
            /* ---- pass 1: the row max ---- */
            if (valid < kBN || !fast_max) {
#pragma unroll
                for (int i = 0; i < kBN / 2; i++) {
                    const int key = (i >> 2) * 8 + t2 + (i & 1);
                    s[i] = key < valid ? (fast_max ? s[i] : __fmul_rn(s[i], scale)) : -INFINITY;
                }
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float tm = -INFINITY;
#pragma unroll
                for (int j = 0; j < kBN / 8; j++) tm = fmaxf(tm, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
                tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 1));
                tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 2));
                m[h] = fmaxf(m[h], tm);
            }
            if (it == n_kt - 1 && fast_max) {
                m[0] = __fmul_rn(m[0], scale); /* monotone: == the max of the scaled scores */
                m[1] = __fmul_rn(m[1], scale);
            }
        } else {
            /* ---- pass 2: p = expf(s - m), l += p, P rounded once, O += P V ---- */
            if (valid < kBN) {
#pragma unroll
                for (int i = 0; i < kBN / 2; i++) {
                    const int key = (i >> 2) * 8 + t2 + (i & 1);
                    s[i] = key < valid ? __fmul_rn(s[i], scale) : -INFINITY;
                }
            } else {
#pragma unroll
                for (int i = 0; i < kBN / 2; i++) s[i] = __fmul_rn(s[i], scale);
            }
            uint32_t pa[kBN / 16][4];
#pragma unroll
            for (int kk = 0; kk < kBN / 16; kk++)
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const float *sj = s + 4 * (2 * kk + half);
                    const float e0 = expf(__fsub_rn(sj[0], m[0])), e1 = expf(__fsub_rn(sj[1], m[0]));
                    const float e2 = expf(__fsub_rn(sj[2], m[1])), e3 = expf(__fsub_rn(sj[3], m[1]));
                    l[0] = __fadd_rn(__fadd_rn(l[0], e0), e1); /* fp32, unrounded p */
                    l[1] = __fadd_rn(__fadd_rn(l[1], e2), e3);
                    pa[kk][2 * half] = pack2<BF16>(e0, e1);     /* row g */
                    pa[kk][2 * half + 1] = pack2<BF16>(e2, e3); /* row g + 8 */
                }
            const uint32_t v_s = dcu_smem_addr(Vs + st * kTile);
            fence_regs(o);
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < kBN / 16; kk++) {
                /* keys 16kk..16kk+15: two 8-row groups 1024 bytes apart (SBO), the
                   D columns in 64-column panels kKPanel bytes apart (LBO); with the
                   two offsets swapped the kernel's tests fail (checked on an H200) */
                const uint64_t db = sw128_desc(v_s + (uint32_t)(kk * 16 * kPanelBytesPerRow), kKPanel, 1024);
                wgmma_rs<BF16, D>(o, pa[kk], db, 1);
            }
            wg_commit();
            wg_wait0();
            fence_regs(o);
        }
        __syncthreads(); /* stage st is overwritten by the next iteration's prefetch */
    }

    /* full row sums (same value on the 4 lanes of a quad); a final max of
       +-inf gives NaN, as the unfused path's expf(inf - inf) does */
#pragma unroll
    for (int h = 0; h < 2; h++) l[h] = dcu_attn_quad_row_sum(l[h], m[h]);

    /* ---- out = round(o / l) ---- */
    const int64_t ob = (bh / st_.H) * st_.o[0] + (bh - (bh / st_.H) * st_.H) * st_.o[1];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t row = q0 + wg * 64 + wq * 16 + g + h * 8;
        if (row >= Lq) continue;
        const int64_t base = ob + row * st_.o[2];
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            dcu_st<int64_t>(out, to, base + j * 8 + t2, __fdiv_rn(o[4 * j + 2 * h], l[h]));
            dcu_st<int64_t>(out, to, base + j * 8 + t2 + 1, __fdiv_rn(o[4 * j + 2 * h + 1], l[h]));
        }
    }
#else
    (void)q, (void)k, (void)v, (void)st_, (void)Lq, (void)Lk, (void)n_qtiles, (void)scale, (void)out, (void)to;
    __trap(); /* never launched: dcu_attn_wgmma_available */
#endif
}

template <bool BF16, int D>
cudaError_t launch(const dcu_ctx *ctx, const void *q, const void *k, const void *v, const dcu_attn_strides &st,
                   int64_t BH, int64_t Lq, int64_t Lk, float scale, void *out, drift_dtype to) {
    /* Q, two K and two V stages, plus slack to align the base to 1024 bytes */
    const size_t smem = (size_t)(kBM + 4 * kBN) * D * sizeof(uint16_t) + 1024;
    static int smem_set[DCU_MAX_DEVICES]; /* per instantiation: one flag per device */
    return dcu_attn_launch(k_attn_wgmma<BF16, D>, smem, smem_set, kBM, kThreads, ctx, q, k, v, st, BH, Lq, Lk, scale, out, to);
}

} // namespace

extern "C" int dcu_attn_wgmma_available(int device) {
    static int cached[DCU_MAX_DEVICES]; /* 0 unknown, 1 yes, 2 no */
    if (device < 0 || device >= DCU_MAX_DEVICES) return 0;
    int c = __atomic_load_n(&cached[device], __ATOMIC_ACQUIRE);
    if (c) return c == 1;
    int major = 0, minor = 0;
    int ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
             cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess;
    if (!ok) (void)cudaGetLastError();
    cudaFuncAttributes fa;
    /* the build carries an sm_90a image of the kernel (no image: an error here) */
    if (ok && major == 9 && minor == 0) ok = cudaFuncGetAttributes(&fa, (const void *)k_attn_wgmma<true, 128>) == cudaSuccess;
    else ok = 0;
    if (!ok) (void)cudaGetLastError();
    __atomic_store_n(&cached[device], ok ? 1 : 2, __ATOMIC_RELEASE);
    return ok;
}

/* q, k, v in `c` (bf16/fp16) at st's strides, 16-byte aligned; out in `to`.
 * BH = B*H, D in {64, 128}, Lk >= 1. */
extern "C" cudaError_t dcu_launch_attn_wgmma(const dcu_ctx *ctx, const void *q, const void *k, const void *v,
                                             const dcu_attn_strides *st, drift_dtype c, int64_t BH, int64_t Lq,
                                             int64_t Lk, int64_t D, float scale, void *out, drift_dtype to) {
    DCU_ATTN_DISPATCH(launch, ctx, q, k, v, st, c, BH, Lq, Lk, D, scale, out, to);
}
