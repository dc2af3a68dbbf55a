/* Storage dtypes and exact conversions (DESIGN.md s4).
 * fp32 -> bf16/fp16 round to nearest, ties to even, as PyTorch does; NaN stays
 * NaN (canonical quiet NaN as c10 produces it), overflow goes to inf, subnormals are exact.
 * The scalar conversions are inline: the CPU backend calls them per element. */
#ifndef DRIFT_FORMATS_DTYPE_H
#define DRIFT_FORMATS_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef enum drift_dtype {
    DRIFT_DTYPE_INVALID = 0,
    DRIFT_F32 = 1,
    DRIFT_BF16 = 2,
    DRIFT_F16 = 3,
    DRIFT_F64 = 4,
    /* Integer and boolean tensors of captured graphs (ids, indices, masks,
     * lengths, routing). Their values are exact integers (bool: 0 or 1) of
     * magnitude at most 2^53; every backend stores them as doubles, like
     * fp64 (drift_dtype_wide), and runs the ops that touch them through the
     * fp64 oracle's bodies, where integer arithmetic is exact. int32
     * overflow is not emulated (a value outside int32 is an error where an
     * op produces one). */
    DRIFT_I64 = 5,
    DRIFT_I32 = 6,
    DRIFT_BOOL = 7,
    DRIFT_DTYPE_COUNT = 8
} drift_dtype;

/* fp32, bf16, fp16 or fp64. */
static inline int drift_dtype_is_float(drift_dtype dt) { return dt >= DRIFT_F32 && dt <= DRIFT_F64; }
/* int64, int32 or bool. */
static inline int drift_dtype_is_int(drift_dtype dt) { return dt >= DRIFT_I64 && dt <= DRIFT_BOOL; }
/* Stored as doubles by every backend (fp64 and the integer dtypes); the
 * others are stored as floats (host) or natively (cuda). */
static inline int drift_dtype_wide(drift_dtype dt) { return dt == DRIFT_F64 || drift_dtype_is_int(dt); }
/* Rounds an exact double to the integer dtype dt the way a cast does in
 * PyTorch: toward zero for int64/int32, != 0 for bool. Identity otherwise. */
static inline double drift_dtype_round_int(double v, drift_dtype dt) {
    if (dt == DRIFT_BOOL) return v != 0.0 ? 1.0 : 0.0;
    if (dt == DRIFT_I64 || dt == DRIFT_I32) {
        if (v != v) return 0.0; /* NaN: undefined in torch; drift gives 0 */
        double t = v < 0.0 ? -(double)(int64_t)(-v < 9.2e18 ? -v : 9.2e18) : (double)(int64_t)(v < 9.2e18 ? v : 9.2e18);
        return t;
    }
    return v;
}

/* "fp32", "bf16", "fp16", "fp64"; "invalid" otherwise. Static string. */
const char *drift_dtype_name(drift_dtype dt);
/* Parses fp32/float32/f32, bf16/bfloat16, fp16/float16/f16/half, fp64/float64/f64
 * (also the torch.* spellings). Returns DRIFT_DTYPE_INVALID if unknown. */
drift_dtype drift_dtype_parse(const char *s);
/* drift_dtype_parse, plus the integer dtypes of captured graphs: int64/long,
 * int32, bool (also as torch.*). Only the graph IR and the ATen importer
 * accept them; plans, traces and checkpoints hold floating dtypes. */
drift_dtype drift_dtype_parse_any(const char *s);
/* Bytes per element (0 for invalid). */
size_t drift_dtype_size(drift_dtype dt);

static inline uint32_t drift_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float drift_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline uint16_t drift_f32_to_bf16(float f) {
    uint32_t u = drift_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u; /* canonical NaN, as c10::BFloat16 */
    u += 0x7fffu + ((u >> 16) & 1u); /* RNE; carries into the exponent, overflow -> inf */
    return (uint16_t)(u >> 16);
}

static inline float drift_bf16_to_f32(uint16_t h) { return drift_bits_f32((uint32_t)h << 16); }

static inline uint16_t drift_f32_to_f16(float f) {
    uint32_t u = drift_f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* quiet NaN, sign kept, as c10::Half */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (a < 0x38800000u) {
        /* Result is subnormal or zero: scale so the fp16 subnormal unit (2^-24) is 1,
         * then RNE on the integer through the fp32 adder (exact for these ranges). */
        float v = drift_bits_f32(a) * 16777216.0f; /* exact: power of two */
        /* v < 1024; rounding to integer with ties-to-even via the 2^23 trick */
        float r = (v + 8388608.0f) - 8388608.0f;
        return (uint16_t)(sign | (uint32_t)r);
    }
    /* normal: rebias exponent (127 -> 15) and round the 13 dropped bits RNE */
    uint32_t m = a - 0x38000000u; /* exponent -112 */
    m += 0x0fffu + ((m >> 13) & 1u);
    return (uint16_t)(sign | (m >> 13));
}

static inline float drift_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
        return drift_bits_f32(drift_f32_bits(v) | sign);
    }
    if (e == 31) return drift_bits_f32(sign | 0x7f800000u | (m << 13));
    return drift_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* Rounds x to the nearest value representable in dt (identity for fp32/fp64). */
static inline float drift_round_to(float x, drift_dtype dt) {
    if (dt == DRIFT_BF16) return drift_bf16_to_f32(drift_f32_to_bf16(x));
    if (dt == DRIFT_F16) return drift_f16_to_f32(drift_f32_to_f16(x));
    return x;
}

/* Bulk conversions; n elements; src and dst must not overlap. */
void drift_dtype_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n);
void drift_dtype_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n);
void drift_dtype_f32_to_f16_n(const float *src, uint16_t *dst, size_t n);
void drift_dtype_f16_to_f32_n(const uint16_t *src, float *dst, size_t n);
/* In place: x[i] = drift_round_to(x[i], dt). */
void drift_dtype_round_n(float *x, size_t n, drift_dtype dt);
/* Generic: raw elements of src_dt -> fp32 (widening is exact; fp64 rounds RNE). */
void drift_dtype_to_f32_n(const void *src, drift_dtype src_dt, float *dst, size_t n);
/* Generic: fp32 -> raw elements of dst_dt (RNE). */
void drift_dtype_from_f32_n(const float *src, void *dst, drift_dtype dst_dt, size_t n);

/* Distance in units in the last place of dt between two values (both taken
 * as values of dt after rounding): the number of representable values of dt
 * between them. NaN vs non-NaN gives UINT64_MAX. */
uint64_t drift_dtype_ulp_distance(float a, float b, drift_dtype dt);

/* A ULP distance for people: exact below a million, then "3.4e+09" (past a
 * million the count says "far", its last digits nothing); "nan" for
 * UINT64_MAX (NaN against a number). Returns buf. */
const char *drift_ulp_text(uint64_t u, char *buf, size_t n);

#endif
