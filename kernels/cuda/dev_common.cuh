/* Device helpers shared by the kernels of kernels/cuda (CUDA C++ only).
 *
 * Conversions are bit-for-bit the ones of formats/dtype.h (RNE, canonical
 * NaN 0x7fc0 for bf16, sign|0x7e00 for fp16, overflow to inf), written with
 * integer operations and _rn intrinsics so that no FMA contraction or fast
 * math can change them. Every value-producing float operation in these
 * kernels goes through __fadd_rn/__fsub_rn/__fmul_rn/__fdiv_rn/__fsqrt_rn:
 * nvcc contracts a*b+c into an FMA by default (--fmad=true), which would
 * break bit-identity with the cpu backend. */
#ifndef DRIFT_KERNELS_CUDA_DEV_COMMON_CUH
#define DRIFT_KERNELS_CUDA_DEV_COMMON_CUH

#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_internal.h"

#define DCU_DEV __device__ __forceinline__

DCU_DEV float dcu_bf16_to_f32(uint32_t h) { return __uint_as_float(h << 16); }

DCU_DEV uint32_t dcu_f32_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
    u += 0x7fffu + ((u >> 16) & 1u);
    return u >> 16;
}

DCU_DEV uint32_t dcu_f32_to_f16(float f) {
    uint32_t u = __float_as_uint(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;
    if (a >= 0x477ff000u) return sign | 0x7c00u;
    if (a < 0x38800000u) {
        float v = __fmul_rn(__uint_as_float(a), 16777216.0f);
        float r = __fsub_rn(__fadd_rn(v, 8388608.0f), 8388608.0f);
        return sign | (uint32_t)r;
    }
    uint32_t m = a - 0x38000000u;
    m += 0x0fffu + ((m >> 13) & 1u);
    return sign | (m >> 13);
}

DCU_DEV float dcu_f16_to_f32(uint32_t h) {
    uint32_t sign = (h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = __fmul_rn((float)m, 5.9604644775390625e-8f);
        return __uint_as_float(__float_as_uint(v) | sign);
    }
    if (e == 31) return __uint_as_float(sign | 0x7f800000u | (m << 13));
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

/* Rounds x to the nearest value of dt (as drift_round_to). */
DCU_DEV float dcu_round(float x, int dt) {
    if (dt == DRIFT_BF16) return dcu_bf16_to_f32(dcu_f32_to_bf16(x));
    if (dt == DRIFT_F16) return dcu_f16_to_f32(dcu_f32_to_f16(x));
    return x;
}

/* Element i of a buffer of dtype dt, widened to fp32 (exact). */
template <typename I>
DCU_DEV float dcu_ld(const void *p, int dt, I i) {
    if (dt == DRIFT_BF16) return dcu_bf16_to_f32(((const uint16_t *)p)[i]);
    if (dt == DRIFT_F16) return dcu_f16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* Stores x rounded once to dt. */
template <typename I>
DCU_DEV void dcu_st(void *p, int dt, I i, float x) {
    if (dt == DRIFT_BF16)
        ((uint16_t *)p)[i] = (uint16_t)dcu_f32_to_bf16(x);
    else if (dt == DRIFT_F16)
        ((uint16_t *)p)[i] = (uint16_t)dcu_f32_to_f16(x);
    else
        ((float *)p)[i] = x;
}

/* 4 consecutive elements [i, i+4) of a buffer of dtype DT (a template
 * constant; -1: the runtime dt, element by element), widened exactly; the
 * vector forms need i*size 8- (16-bit) or 16-byte (fp32) aligned. */
template <int DT>
DCU_DEV void dcu_ld4(const void *p, int dt, int64_t i, float *o) {
    if (DT == DRIFT_BF16 || DT == DRIFT_F16) {
        const uint2 v = *(const uint2 *)((const uint16_t *)p + i);
        const uint32_t h[4] = {v.x & 0xffffu, v.x >> 16, v.y & 0xffffu, v.y >> 16};
#pragma unroll
        for (int k = 0; k < 4; k++) o[k] = DT == DRIFT_BF16 ? dcu_bf16_to_f32(h[k]) : dcu_f16_to_f32(h[k]);
    } else if (DT == DRIFT_F32) {
        const float4 v = *(const float4 *)((const float *)p + i);
        o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) o[k] = dcu_ld<int64_t>(p, dt, i + k);
    }
}

/* Stores 4 values rounded once to DT (as dcu_st) at [i, i+4). */
template <int DT>
DCU_DEV void dcu_st4(void *p, int dt, int64_t i, const float *v) {
    if (DT == DRIFT_BF16 || DT == DRIFT_F16) {
        uint32_t h[4];
#pragma unroll
        for (int k = 0; k < 4; k++) h[k] = DT == DRIFT_BF16 ? dcu_f32_to_bf16(v[k]) : dcu_f32_to_f16(v[k]);
        *(uint2 *)((uint16_t *)p + i) = make_uint2(h[0] | (h[1] << 16), h[2] | (h[3] << 16));
    } else if (DT == DRIFT_F32) {
        *(float4 *)((float *)p + i) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) dcu_st<int64_t>(p, dt, i + k, v[k]);
    }
}

/* Launch geometry: grid-stride kernels use at most this many blocks. */
#define DCU_THREADS 256
static inline unsigned dcu_blocks_for(int64_t n, int threads, const dcu_ctx *ctx) {
    int64_t b = (n + threads - 1) / threads;
    int64_t cap = (int64_t)(ctx->sm_count > 0 ? ctx->sm_count : 132) * 32;
    if (b > cap) b = cap;
    if (b < 1) b = 1;
    return (unsigned)b;
}

/* 32-bit indexing when every index of the launch fits in int32 and 64-bit
 * indexing was not forced. */
static inline int dcu_use_i32(const dcu_ctx *ctx, int64_t max_index) {
    return !ctx->force_i64 && max_index < (int64_t)INT32_MAX - 65536 * 256;
}

#endif
