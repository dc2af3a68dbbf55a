/* The fused metric reduction (backend `metrics` entry): one pass over t and r
 * computing every field of drift_metric_acc, with the semantics of
 * replay/analysis/metrics.h (its drift_metrics_accumulate_f32 is the host reference):
 *   - values widened to fp32; a pair enters the sums and maxima only when t
 *     and r are both finite; NaN/inf counted per side; n_diff compares fp32
 *     bit patterns with NaN == NaN (for same-dtype 16-bit inputs this is the
 *     raw 16-bit compare, since widening is injective);
 *   - max|d| and its argmax are exact: d = (double)t - (double)r as on the
 *     host, first (lowest) index on ties;
 *   - sums accumulate in fp64 per thread, fp64 across threads/blocks in a
 *     fixed tree order (deterministic for a given n, grid and device).
 *
 * Paths:
 *   VEC16 (bf16/bf16 or fp16/fp16, 16-byte aligned): 16-byte loads of 8
 *     elements of each tensor (cache-streaming), 4 vectors in flight per
 *     thread. Per 8-element chunk the five sums are formed in fp32 (for 16-bit
 *     inputs t*r, t*t, r*r are exact in fp32 barring over/underflow;
 *     |d| and d^2 are rounded once) and added to the thread's fp64 sums: a
 *     chunk's relative error is <= 7 * 2^-24 of its (non-negative) terms. A
 *     chunk whose fp32 partials are not finite (a NaN/inf input, or a
 *     square overflowing fp32) is recomputed element by element in fp64 with
 *     the exact non-finite rules. max|d| is screened in fp32 (rounding is
 *     monotone: a chunk whose fp32 max is below the fp32 rounding of the
 *     running fp64 max cannot beat it) and updated exactly in fp64 otherwise.
 *     n_diff is __vcmpne2 + popc on the raw words, max|r| an integer max on
 *     the magnitude bits.
 *   VEC32 (fp32/fp32, aligned): 16-byte loads of 4 elements, every element
 *     in fp64 (as the host).
 *   GENERIC (mixed dtypes or unaligned): one element per iteration, fp64.
 * The last n % 8 (or % 4) elements of the vector paths are done by the first
 * threads after their vectors (keeping each thread's indices increasing).
 * A second kernel (one block) reduces the per-block partials in block order;
 * the result is copied to pinned host memory and the stream synchronised. */
#include <cuda_fp16.h>

#include "kernels/cuda/dev_common.cuh"

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

struct Acc {
    double s_abs, s_sq, s_tr, s_tt, s_rr;
    double maxd;           /* -1: none */
    long long arg;         /* -1: none */
    unsigned long long nan_t, inf_t, nan_r, inf_r, ndiff;
    float maxr;
    float maxd32;          /* (float)maxd, the fp32 screen */
};

DCU_DEV void acc_init(Acc &A) {
    A.s_abs = A.s_sq = A.s_tr = A.s_tt = A.s_rr = 0.0;
    A.maxd = -1.0;
    A.arg = -1;
    A.nan_t = A.inf_t = A.nan_r = A.inf_r = A.ndiff = 0;
    A.maxr = 0.0f;
    A.maxd32 = -1.0f;
}

/* B's elements are disjoint from A's; ties go to the lower index. */
DCU_DEV void acc_merge(Acc &A, const Acc &B) {
    A.s_abs += B.s_abs;
    A.s_sq += B.s_sq;
    A.s_tr += B.s_tr;
    A.s_tt += B.s_tt;
    A.s_rr += B.s_rr;
    A.nan_t += B.nan_t;
    A.inf_t += B.inf_t;
    A.nan_r += B.nan_r;
    A.inf_r += B.inf_r;
    A.ndiff += B.ndiff;
    A.maxr = fmaxf(A.maxr, B.maxr);
    if (B.arg >= 0 && (A.arg < 0 || B.maxd > A.maxd || (B.maxd == A.maxd && B.arg < A.arg))) {
        A.maxd = B.maxd;
        A.arg = B.arg;
    }
}

DCU_DEV double shfl_d(double v, int o) { return __shfl_down_sync(0xffffffffu, v, o); }
DCU_DEV unsigned long long shfl_u(unsigned long long v, int o) { return __shfl_down_sync(0xffffffffu, v, o); }

DCU_DEV Acc acc_shfl_down(const Acc &A, int o) {
    Acc B;
    B.s_abs = shfl_d(A.s_abs, o);
    B.s_sq = shfl_d(A.s_sq, o);
    B.s_tr = shfl_d(A.s_tr, o);
    B.s_tt = shfl_d(A.s_tt, o);
    B.s_rr = shfl_d(A.s_rr, o);
    B.maxd = shfl_d(A.maxd, o);
    B.arg = (long long)shfl_u((unsigned long long)A.arg, o);
    B.nan_t = shfl_u(A.nan_t, o);
    B.inf_t = shfl_u(A.inf_t, o);
    B.nan_r = shfl_u(A.nan_r, o);
    B.inf_r = shfl_u(A.inf_r, o);
    B.ndiff = shfl_u(A.ndiff, o);
    B.maxr = __shfl_down_sync(0xffffffffu, A.maxr, o);
    B.maxd32 = -1.0f;
    return B;
}

/* Block reduction in a fixed order; the block's result in thread 0. */
DCU_DEV void block_reduce(Acc &A) {
    __shared__ Acc warp_acc[kThreads / 32];
    for (int o = 16; o > 0; o >>= 1) {
        Acc B = acc_shfl_down(A, o);
        if ((threadIdx.x & 31) + o < 32) acc_merge(A, B);
    }
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) warp_acc[w] = A;
    __syncthreads();
    if (threadIdx.x == 0) {
        int nw = (blockDim.x + 31) >> 5;
        for (int i = 1; i < nw; i++) acc_merge(A, warp_acc[i]);
    }
}

DCU_DEV void acc_store(const Acc &A, dcu_metric_res *out) {
    out->sum_abs = A.s_abs;
    out->sum_sq = A.s_sq;
    out->sum_tr = A.s_tr;
    out->sum_tt = A.s_tt;
    out->sum_rr = A.s_rr;
    out->max_d = A.maxd;
    out->arg = A.arg;
    out->max_r = A.maxr;
    out->pad_ = 0.0f;
    out->nan_t = (int64_t)A.nan_t;
    out->inf_t = (int64_t)A.inf_t;
    out->nan_r = (int64_t)A.nan_r;
    out->inf_r = (int64_t)A.inf_r;
    out->n_diff = (int64_t)A.ndiff;
}

DCU_DEV void acc_load(Acc &A, const dcu_metric_res *in) {
    A.s_abs = in->sum_abs;
    A.s_sq = in->sum_sq;
    A.s_tr = in->sum_tr;
    A.s_tt = in->sum_tt;
    A.s_rr = in->sum_rr;
    A.maxd = in->max_d;
    A.arg = in->arg;
    A.maxr = in->max_r;
    A.maxd32 = -1.0f;
    A.nan_t = (unsigned long long)in->nan_t;
    A.inf_t = (unsigned long long)in->inf_t;
    A.nan_r = (unsigned long long)in->nan_r;
    A.inf_r = (unsigned long long)in->inf_r;
    A.ndiff = (unsigned long long)in->n_diff;
}

/* One pair with the exact host rules (replay/analysis/metrics.c accumulate_chunk). */
DCU_DEV void elem_exact(Acc &A, float a, float b, long long idx) {
    bool an = isnan(a), bn = isnan(b);
    if (__float_as_uint(a) != __float_as_uint(b) && !(an && bn)) A.ndiff++;
    if (an) A.nan_t++;
    else if (isinf(a)) A.inf_t++;
    if (bn) A.nan_r++;
    else if (isinf(b)) A.inf_r++;
    if (!isfinite(a) || !isfinite(b)) return;
    double da = (double)a, db = (double)b;
    double d = da - db, ad = fabs(d);
    A.s_abs += ad;
    A.s_sq += d * d;
    A.s_tr += da * db;
    A.s_tt += da * da;
    A.s_rr += db * db;
    if (ad > A.maxd) { /* maxd starts at -1: the first finite pair always wins */
        A.maxd = ad;
        A.arg = idx;
        A.maxd32 = (float)ad;
    }
    float ar = fabsf(b);
    if (ar > A.maxr) A.maxr = ar;
}

template <int DT>
DCU_DEV void widen8(const uint4 &w, float *f) {
    const unsigned int v[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int k = 0; k < 4; k++) {
        if (DT == DRIFT_BF16) {
            f[2 * k] = __uint_as_float(v[k] << 16);
            f[2 * k + 1] = __uint_as_float(v[k] & 0xffff0000u);
        } else {
            __half2 h = *reinterpret_cast<const __half2 *>(&v[k]);
            float2 g = __half22float2(h);
            f[2 * k] = g.x;
            f[2 * k + 1] = g.y;
        }
    }
}

/* Widening for the exact path: bit-exact (NaN payloads as formats/dtype.h). */
template <int DT>
DCU_DEV float widen_one(unsigned int h) {
    return DT == DRIFT_BF16 ? dcu_bf16_to_f32(h) : dcu_f16_to_f32(h);
}

template <int DT>
DCU_DEV void chunk16(Acc &A, const uint4 &tw, const uint4 &rw, long long base) {
    float a[8], b[8];
    widen8<DT>(tw, a);
    widen8<DT>(rw, b);
    float cabs = 0.0f, csq = 0.0f, ctr = 0.0f, ctt = 0.0f, crr = 0.0f, cmax = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        float d = __fsub_rn(a[j], b[j]);
        float ad = fabsf(d);
        cabs = __fadd_rn(cabs, ad);
        csq = __fmaf_rn(d, d, csq);
        ctr = __fmaf_rn(a[j], b[j], ctr);
        ctt = __fmaf_rn(a[j], a[j], ctt);
        crr = __fmaf_rn(b[j], b[j], crr);
        cmax = fmaxf(cmax, ad);
    }
    float chk = __fadd_rn(__fadd_rn(ctt, crr), csq);
    if (!(chk <= 3.402823466e38f)) {
        /* a NaN/inf input or an fp32 overflow: exact per-element path */
        const unsigned int tv[4] = {tw.x, tw.y, tw.z, tw.w}, rv[4] = {rw.x, rw.y, rw.z, rw.w};
#pragma unroll
        for (int j = 0; j < 8; j++) {
            unsigned int th = (j & 1) ? (tv[j >> 1] >> 16) : (tv[j >> 1] & 0xffffu);
            unsigned int rh = (j & 1) ? (rv[j >> 1] >> 16) : (rv[j >> 1] & 0xffffu);
            elem_exact(A, widen_one<DT>(th), widen_one<DT>(rh), base + j);
        }
        return;
    }
    A.s_abs += (double)cabs;
    A.s_sq += (double)csq;
    A.s_tr += (double)ctr;
    A.s_tt += (double)ctt;
    A.s_rr += (double)crr;
    unsigned int nd = __popc(__vcmpne2(tw.x, rw.x)) + __popc(__vcmpne2(tw.y, rw.y)) +
                      __popc(__vcmpne2(tw.z, rw.z)) + __popc(__vcmpne2(tw.w, rw.w));
    A.ndiff += nd >> 4;
    unsigned int mr = __vmaxu2(__vmaxu2(rw.x & 0x7fff7fffu, rw.y & 0x7fff7fffu),
                               __vmaxu2(rw.z & 0x7fff7fffu, rw.w & 0x7fff7fffu));
    mr = max(mr & 0xffffu, mr >> 16);
    A.maxr = fmaxf(A.maxr, widen_one<DT>(mr));
    if (cmax >= A.maxd32) {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            double ad = fabs((double)a[j] - (double)b[j]);
            if (ad > A.maxd) {
                A.maxd = ad;
                A.arg = base + j;
            }
        }
        A.maxd32 = (float)A.maxd;
    }
}

/* 16-bit same-dtype path. t, r: nvec 16-byte vectors, then `tail` elements. */
template <int DT>
__global__ void __launch_bounds__(kThreads) k_metrics_vec16(const uint4 *__restrict__ t, const uint4 *__restrict__ r,
                                                           long long nvec, int tail, dcu_metric_res *part) {
    Acc A;
    acc_init(A);
    long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long T = (long long)gridDim.x * blockDim.x;
    for (long long v0 = g; v0 < nvec; v0 += kUnroll * T) {
        uint4 tv[kUnroll], rv[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; k++) {
            long long v = v0 + k * T;
            if (v < nvec) {
                tv[k] = __ldcs(t + v);
                rv[k] = __ldcs(r + v);
            }
        }
#pragma unroll
        for (int k = 0; k < kUnroll; k++) {
            long long v = v0 + k * T;
            if (v < nvec) chunk16<DT>(A, tv[k], rv[k], v * 8);
        }
    }
    if (g < tail) {
        const uint16_t *t16 = (const uint16_t *)(t + nvec), *r16 = (const uint16_t *)(r + nvec);
        elem_exact(A, widen_one<DT>(t16[g]), widen_one<DT>(r16[g]), nvec * 8 + g);
    }
    block_reduce(A);
    if (threadIdx.x == 0) acc_store(A, part + blockIdx.x);
}

__global__ void __launch_bounds__(kThreads) k_metrics_vec32(const float4 *__restrict__ t, const float4 *__restrict__ r,
                                                           long long nvec, int tail, dcu_metric_res *part) {
    Acc A;
    acc_init(A);
    long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long T = (long long)gridDim.x * blockDim.x;
    for (long long v0 = g; v0 < nvec; v0 += kUnroll * T) {
        float4 tv[kUnroll], rv[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; k++) {
            long long v = v0 + k * T;
            if (v < nvec) {
                tv[k] = __ldcs(t + v);
                rv[k] = __ldcs(r + v);
            }
        }
#pragma unroll
        for (int k = 0; k < kUnroll; k++) {
            long long v = v0 + k * T;
            if (v < nvec) {
                elem_exact(A, tv[k].x, rv[k].x, v * 4);
                elem_exact(A, tv[k].y, rv[k].y, v * 4 + 1);
                elem_exact(A, tv[k].z, rv[k].z, v * 4 + 2);
                elem_exact(A, tv[k].w, rv[k].w, v * 4 + 3);
            }
        }
    }
    if (g < tail) {
        const float *t1 = (const float *)(t + nvec), *r1 = (const float *)(r + nvec);
        elem_exact(A, t1[g], r1[g], nvec * 4 + g);
    }
    block_reduce(A);
    if (threadIdx.x == 0) acc_store(A, part + blockIdx.x);
}

__global__ void __launch_bounds__(kThreads) k_metrics_generic(const void *__restrict__ t, int tt,
                                                             const void *__restrict__ r, int tr, long long n,
                                                             dcu_metric_res *part) {
    Acc A;
    acc_init(A);
    long long T = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += T)
        elem_exact(A, dcu_ld<long long>(t, tt, i), dcu_ld<long long>(r, tr, i), i);
    block_reduce(A);
    if (threadIdx.x == 0) acc_store(A, part + blockIdx.x);
}

__global__ void __launch_bounds__(kThreads) k_metrics_final(const dcu_metric_res *part, int nparts,
                                                           dcu_metric_res *out) {
    Acc A;
    acc_init(A);
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) {
        Acc B;
        acc_load(B, part + i);
        acc_merge(A, B);
    }
    block_reduce(A);
    if (threadIdx.x == 0) acc_store(A, out);
}

/* Enough blocks to cover the work once, at most one full wave (resident
 * blocks per SM from the occupancy calculator times the SM count). */
int metrics_blocks(const dcu_ctx *ctx, const void *kernel, long long work_items) {
    if (ctx->metrics_grid > 0) return ctx->metrics_grid;
    long long per_block = (long long)kThreads * kUnroll;
    long long b = (work_items + per_block - 1) / per_block;
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0) != cudaSuccess || per_sm < 1) {
        (void)cudaGetLastError();
        per_sm = ctx->max_threads_per_sm > 0 ? ctx->max_threads_per_sm / kThreads : 4;
    }
    long long cap = (long long)(ctx->sm_count > 0 ? ctx->sm_count : 132) * per_sm;
    if (b > cap) b = cap;
    if (b < 1) b = 1;
    return (int)b;
}

} // namespace

extern "C" int dcu_metrics_run(dcu_ctx *ctx, const void *t, drift_dtype tt, const void *r, drift_dtype tr, int64_t n,
                               dcu_metric_res *res, drift_err *err) {
    memset(res, 0, sizeof *res);
    res->max_d = -1.0;
    res->arg = -1;
    if (n <= 0) return DRIFT_OK;
    bool aligned = (((uintptr_t)t | (uintptr_t)r) & 15u) == 0;
    int path; /* 0 vec16, 1 vec32, 2 generic */
    if (tt == tr && aligned && (tt == DRIFT_BF16 || tt == DRIFT_F16))
        path = 0;
    else if (tt == tr && aligned && tt == DRIFT_F32)
        path = 1;
    else
        path = 2;
    long long per_vec = path == 0 ? 8 : 4;
    long long nvec = path == 2 ? 0 : n / per_vec;
    int tail = path == 2 ? 0 : (int)(n - nvec * per_vec);
    const void *kernel = path == 0 ? (tt == DRIFT_BF16 ? (const void *)k_metrics_vec16<DRIFT_BF16>
                                                       : (const void *)k_metrics_vec16<DRIFT_F16>)
                         : path == 1 ? (const void *)k_metrics_vec32
                                     : (const void *)k_metrics_generic;
    int blocks = metrics_blocks(ctx, kernel, path == 2 ? (n + kUnroll - 1) / kUnroll : (nvec > tail ? nvec : tail));
    /* partials + 1 slot for the final result */
    if (ctx->metrics_part_cap < blocks + 1) {
        int cap = blocks + 1 < 4096 ? 4096 : blocks + 1;
        void *p = NULL;
        cudaError_t e = dcu_malloc(ctx, &p, (size_t)cap * sizeof(dcu_metric_res));
        if (e != cudaSuccess) return dcu_check(e, err, "metrics", "allocating partials");
        if (ctx->metrics_part) dcu_free(ctx, ctx->metrics_part);
        ctx->metrics_part = p;
        ctx->metrics_part_cap = cap;
    }
    dcu_metric_res *part = (dcu_metric_res *)ctx->metrics_part;
    if (path == 0 && tt == DRIFT_BF16)
        k_metrics_vec16<DRIFT_BF16><<<blocks, kThreads, 0, ctx->stream>>>((const uint4 *)t, (const uint4 *)r, nvec,
                                                                          tail, part);
    else if (path == 0)
        k_metrics_vec16<DRIFT_F16><<<blocks, kThreads, 0, ctx->stream>>>((const uint4 *)t, (const uint4 *)r, nvec,
                                                                         tail, part);
    else if (path == 1)
        k_metrics_vec32<<<blocks, kThreads, 0, ctx->stream>>>((const float4 *)t, (const float4 *)r, nvec, tail, part);
    else
        k_metrics_generic<<<blocks, kThreads, 0, ctx->stream>>>(t, tt, r, tr, n, part);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return dcu_check(e, err, "metrics", "launching the reduction");
    k_metrics_final<<<1, kThreads, 0, ctx->stream>>>(part, blocks, part + blocks);
    e = cudaGetLastError();
    if (e != cudaSuccess) return dcu_check(e, err, "metrics", "launching the final reduction");
    e = cudaMemcpyAsync(ctx->metrics_host, part + blocks, sizeof(dcu_metric_res), cudaMemcpyDeviceToHost,
                        ctx->stream);
    if (e != cudaSuccess) return dcu_check(e, err, "metrics", "copying the result");
    e = cudaStreamSynchronize(ctx->stream);
    if (e != cudaSuccess) return dcu_check(e, err, "metrics", "waiting for the reduction");
    memcpy(res, ctx->metrics_host, sizeof *res);
    return DRIFT_OK;
}
