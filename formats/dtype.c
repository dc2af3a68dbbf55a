#include "formats/dtype.h"

#include <math.h>
#include <stdio.h>
#include <strings.h>

const char *drift_dtype_name(drift_dtype dt) {
    switch (dt) {
    case DRIFT_F32: return "fp32";
    case DRIFT_BF16: return "bf16";
    case DRIFT_F16: return "fp16";
    case DRIFT_F64: return "fp64";
    case DRIFT_I64: return "int64";
    case DRIFT_I32: return "int32";
    case DRIFT_BOOL: return "bool";
    default: return "invalid";
    }
}

drift_dtype drift_dtype_parse(const char *s) {
    static const struct { const char *name; drift_dtype dt; } names[] = {
        {"fp32", DRIFT_F32}, {"float32", DRIFT_F32}, {"f32", DRIFT_F32}, {"float", DRIFT_F32},
        {"torch.float32", DRIFT_F32}, {"torch.float", DRIFT_F32},
        {"bf16", DRIFT_BF16}, {"bfloat16", DRIFT_BF16}, {"torch.bfloat16", DRIFT_BF16},
        {"fp16", DRIFT_F16}, {"float16", DRIFT_F16}, {"f16", DRIFT_F16}, {"half", DRIFT_F16},
        {"torch.float16", DRIFT_F16}, {"torch.half", DRIFT_F16},
        {"fp64", DRIFT_F64}, {"float64", DRIFT_F64}, {"f64", DRIFT_F64}, {"double", DRIFT_F64},
        {"torch.float64", DRIFT_F64},
    };
    if (!s) return DRIFT_DTYPE_INVALID;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(s, names[i].name) == 0) return names[i].dt;
    return DRIFT_DTYPE_INVALID;
}

drift_dtype drift_dtype_parse_any(const char *s) {
    static const struct { const char *name; drift_dtype dt; } names[] = {
        {"int64", DRIFT_I64}, {"long", DRIFT_I64}, {"torch.int64", DRIFT_I64}, {"torch.long", DRIFT_I64},
        {"int32", DRIFT_I32}, {"torch.int32", DRIFT_I32}, {"torch.int", DRIFT_I32},
        {"bool", DRIFT_BOOL}, {"torch.bool", DRIFT_BOOL},
    };
    drift_dtype dt = drift_dtype_parse(s);
    if (dt != DRIFT_DTYPE_INVALID || !s) return dt;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcasecmp(s, names[i].name) == 0) return names[i].dt;
    return DRIFT_DTYPE_INVALID;
}

size_t drift_dtype_size(drift_dtype dt) {
    switch (dt) {
    case DRIFT_F32: return 4;
    case DRIFT_BF16: case DRIFT_F16: return 2;
    case DRIFT_F64: case DRIFT_I64: return 8;
    case DRIFT_I32: return 4;
    case DRIFT_BOOL: return 1;
    default: return 0;
    }
}

void drift_dtype_f32_to_bf16_n(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = drift_f32_to_bf16(src[i]);
}
void drift_dtype_bf16_to_f32_n(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = drift_bf16_to_f32(src[i]);
}
void drift_dtype_f32_to_f16_n(const float *src, uint16_t *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = drift_f32_to_f16(src[i]);
}
void drift_dtype_f16_to_f32_n(const uint16_t *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = drift_f16_to_f32(src[i]);
}

void drift_dtype_round_n(float *x, size_t n, drift_dtype dt) {
    if (dt == DRIFT_BF16) {
        for (size_t i = 0; i < n; i++) x[i] = drift_bf16_to_f32(drift_f32_to_bf16(x[i]));
    } else if (dt == DRIFT_F16) {
        for (size_t i = 0; i < n; i++) x[i] = drift_f16_to_f32(drift_f32_to_f16(x[i]));
    }
}

void drift_dtype_to_f32_n(const void *src, drift_dtype src_dt, float *dst, size_t n) {
    switch (src_dt) {
    case DRIFT_F32: memmove(dst, src, n * 4); break;
    case DRIFT_BF16: drift_dtype_bf16_to_f32_n(src, dst, n); break;
    case DRIFT_F16: drift_dtype_f16_to_f32_n(src, dst, n); break;
    case DRIFT_F64: {
        const double *d = src;
        for (size_t i = 0; i < n; i++) dst[i] = (float)d[i];
        break;
    }
    default: break;
    }
}

void drift_dtype_from_f32_n(const float *src, void *dst, drift_dtype dst_dt, size_t n) {
    switch (dst_dt) {
    case DRIFT_F32: memmove(dst, src, n * 4); break;
    case DRIFT_BF16: drift_dtype_f32_to_bf16_n(src, dst, n); break;
    case DRIFT_F16: drift_dtype_f32_to_f16_n(src, dst, n); break;
    case DRIFT_F64: {
        double *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = src[i];
        break;
    }
    default: break;
    }
}

/* Maps a value's bit pattern onto a monotone integer line (sign-magnitude to
 * offset binary), so the ULP distance is a subtraction. */
static int64_t ordered_bits(float v, drift_dtype dt) {
    int64_t mag, neg;
    if (dt == DRIFT_BF16) {
        uint16_t h = drift_f32_to_bf16(v);
        mag = h & 0x7fff; neg = h >> 15;
    } else if (dt == DRIFT_F16) {
        uint16_t h = drift_f32_to_f16(v);
        mag = h & 0x7fff; neg = h >> 15;
    } else {
        uint32_t u = drift_f32_bits(v);
        mag = u & 0x7fffffff; neg = u >> 31;
    }
    return neg ? -mag : mag;
}

uint64_t drift_dtype_ulp_distance(float a, float b, drift_dtype dt) {
    if (isnan(a) || isnan(b)) return (isnan(a) && isnan(b)) ? 0 : UINT64_MAX;
    int64_t x = ordered_bits(a, dt), y = ordered_bits(b, dt);
    return (uint64_t)(x > y ? x - y : y - x);
}

const char *drift_ulp_text(uint64_t u, char *buf, size_t n) {
    if (u == UINT64_MAX) snprintf(buf, n, "nan");
    else if (u < 1000000u) snprintf(buf, n, "%llu", (unsigned long long)u);
    else snprintf(buf, n, "%.1e", (double)u);
    return buf;
}
