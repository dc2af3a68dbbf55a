/* What the two fused attention kernels (attention_fused.cu, attention_wgmma.cu)
 * share outside their main loops: the quad reduction of the row sums, the
 * launch of one instantiation (dynamic shared memory opted in once per
 * device, one CTA per query tile and bh) and the (compute dtype, head dim)
 * dispatch. Nothing here allocates or owns memory. */
#ifndef DRIFT_KERNELS_CUDA_ATTENTION_LAUNCH_CUH
#define DRIFT_KERNELS_CUDA_ATTENTION_LAUNCH_CUH

#include "kernels/cuda/dev_common.cuh"

/* Full row sum of the 4 lanes of a quad (every lane gets the same value);
 * a final row max m of +-inf gives NaN, as the unfused path's expf(inf - inf)
 * or expf(-inf - -inf) in its sum does. */
DCU_DEV float dcu_attn_quad_row_sum(float l, float m) {
    float t = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, 1));
    t = __fadd_rn(t, __shfl_xor_sync(0xffffffffu, t, 2));
    return (m == INFINITY || m == -INFINITY) ? __int_as_float(0x7fc00000) : t;
}

/* The kernels' signature: q, k, v, strides, Lq, Lk, query tiles, scale, out, out dtype. */
typedef void (*dcu_attn_kernel)(const uint16_t *, const uint16_t *, const uint16_t *, dcu_attn_strides, int64_t,
                                int64_t, int64_t, float, void *, int);

/* Launches kern with smem bytes of dynamic shared memory (opted in once per
 * device through smem_set, the instantiation's DCU_MAX_DEVICES flags) on
 * ceil(Lq / bm) * BH CTAs of `threads` threads, on ctx's stream. */
static inline cudaError_t dcu_attn_launch(dcu_attn_kernel kern, size_t smem, int *smem_set, int bm, int threads,
                                          const dcu_ctx *ctx, const void *q, const void *k, const void *v,
                                          const dcu_attn_strides &st, int64_t BH, int64_t Lq, int64_t Lk, float scale,
                                          void *out, drift_dtype to) {
    cudaError_t e = dcu_func_smem_once((const void *)kern, (int)smem, ctx->device, smem_set);
    if (e != cudaSuccess) return e;
    const int64_t n_qt = (Lq + bm - 1) / bm;
    kern<<<(unsigned)(n_qt * BH), threads, smem, ctx->stream>>>((const uint16_t *)q, (const uint16_t *)k,
                                                               (const uint16_t *)v, st, Lq, Lk, n_qt, scale, out,
                                                               (int)to);
    return cudaGetLastError();
}

/* The body of dcu_launch_attn_fused / _wgmma: checks, then LAUNCH<bf16, D>
 * (a template of the kernel's file) for compute dtype c and D in {64, 128}. */
#define DCU_ATTN_DISPATCH(LAUNCH, ctx, q, k, v, st, c, BH, Lq, Lk, D, scale, out, to)                             \
    do {                                                                                                          \
        if ((BH) <= 0 || (Lq) <= 0) return cudaSuccess;                                                           \
        if (!dcu_attn_fused_strides_ok(st) || (BH) % (st)->H) return cudaErrorInvalidValue;                       \
        const bool bf16_ = (c) == DRIFT_BF16;                                                                     \
        if ((D) == 64)                                                                                            \
            return bf16_ ? LAUNCH<true, 64>(ctx, q, k, v, *(st), BH, Lq, Lk, scale, out, to)                      \
                         : LAUNCH<false, 64>(ctx, q, k, v, *(st), BH, Lq, Lk, scale, out, to);                    \
        return bf16_ ? LAUNCH<true, 128>(ctx, q, k, v, *(st), BH, Lq, Lk, scale, out, to)                         \
                     : LAUNCH<false, 128>(ctx, q, k, v, *(st), BH, Lq, Lk, scale, out, to);                       \
    } while (0)

#endif
