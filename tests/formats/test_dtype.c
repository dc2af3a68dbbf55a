/* Exhaustive checks of the fp32 <-> bf16/fp16 conversions (DESIGN.md s4):
 * every one of the 65,536 bit patterns of each 16-bit type, the tie cases,
 * NaN/inf/subnormals, against independent reference implementations that
 * work on exact rationals via double arithmetic. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "formats/dtype.h"

/* Exact value of a bf16 pattern, computed independently from the fields. */
static double bf16_value(uint16_t h) {
    int s = h >> 15, e = (h >> 7) & 0xff, m = h & 0x7f;
    double v = e == 0 ? ldexp(m, -126 - 7) : ldexp(128 + m, e - 127 - 7);
    return s ? -v : v;
}

static double f16_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -14 - 10) : ldexp(1024 + m, e - 15 - 10);
    return s ? -v : v;
}

static void test_bf16_widen_all(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = drift_bf16_to_f32((uint16_t)h);
        int e = (h >> 7) & 0xff, m = h & 0x7f;
        if (e == 0xff && m) {
            assert_true(isnan(f));
        } else if (e == 0xff) {
            assert_true(isinf(f));
            assert_int_equal(signbit(f) != 0, (h >> 15) != 0);
        } else {
            assert_true((double)f == bf16_value((uint16_t)h));
            assert_int_equal(signbit(f) != 0, (h >> 15) != 0);
        }
    }
}

static void test_f16_widen_all(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = drift_f16_to_f32((uint16_t)h);
        int e = (h >> 10) & 0x1f, m = h & 0x3ff;
        if (e == 0x1f && m) {
            assert_true(isnan(f));
        } else if (e == 0x1f) {
            assert_true(isinf(f));
            assert_int_equal(signbit(f) != 0, (h >> 15) != 0);
        } else {
            assert_true((double)f == f16_value((uint16_t)h));
            assert_int_equal(signbit(f) != 0, (h >> 15) != 0);
        }
    }
}

/* Every pattern survives widen-then-narrow unchanged (NaN canonicalised). */
static void test_roundtrip_all(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t b = drift_f32_to_bf16(drift_bf16_to_f32((uint16_t)h));
        if (((h >> 7) & 0xff) == 0xff && (h & 0x7f)) assert_int_equal(b, 0x7fc0);
        else assert_int_equal(b, h);
        uint16_t x = drift_f32_to_f16(drift_f16_to_f32((uint16_t)h));
        if (((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff)) assert_int_equal(x & 0x7fff, 0x7e00);
        else assert_int_equal(x, h);
    }
}

/* Reference RNE: among the two neighbours (by exact value) pick the nearer,
 * ties to the even mantissa. Works for any finite float, by scanning the
 * monotone positive patterns with bisection. */
static uint16_t ref_round(double v, double (*value)(uint16_t), uint16_t max_finite, uint16_t inf_bits) {
    int neg = signbit(v) != 0;
    double a = fabs(v);
    uint16_t lo = 0, hi = max_finite;
    if (a >= value(max_finite)) {
        /* beyond max finite: the halfway point to the next power decides */
        double next = value(max_finite) + (value(max_finite) - value((uint16_t)(max_finite - 1)));
        double mid = (value(max_finite) + next) / 2;
        uint16_t r = a < mid ? max_finite : (a == mid ? ((max_finite & 1) ? inf_bits : max_finite) : inf_bits);
        return (uint16_t)(r | (neg ? 0x8000 : 0));
    }
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        if (value(mid) <= a) lo = mid; else hi = mid;
    }
    double dl = a - value(lo), dh = value(hi) - a;
    uint16_t r = dl < dh ? lo : (dh < dl ? hi : ((lo & 1) ? hi : lo));
    return (uint16_t)(r | (neg ? 0x8000 : 0));
}

/* Sweeps fp32 patterns with a stride that hits every exponent and many
 * mantissas, plus the exact midpoints between all adjacent 16-bit values. */
static void test_narrow_against_reference(void **state) {
    (void)state;
    for (uint64_t u = 0; u < 0x100000000ull; u += 0x1003) {
        float f = drift_bits_f32((uint32_t)u);
        if (isnan(f)) {
            assert_int_equal(drift_f32_to_bf16(f), 0x7fc0);
            assert_true(isnan(drift_f16_to_f32(drift_f32_to_f16(f))));
            continue;
        }
        if (isinf(f)) {
            assert_int_equal(drift_f32_to_bf16(f), f < 0 ? 0xff80 : 0x7f80);
            assert_int_equal(drift_f32_to_f16(f), f < 0 ? 0xfc00 : 0x7c00);
            continue;
        }
        assert_int_equal(drift_f32_to_bf16(f), ref_round(f, bf16_value, 0x7f7f, 0x7f80));
        assert_int_equal(drift_f32_to_f16(f), ref_round(f, f16_value, 0x7bff, 0x7c00));
    }
}

static void test_ties(void **state) {
    (void)state;
    /* Exact midpoints between every pair of adjacent finite positive values
     * (representable in fp32 for both types): ties go to the even pattern. */
    for (uint32_t h = 0; h < 0x7f7f; h++) {
        float mid = (float)((bf16_value((uint16_t)h) + bf16_value((uint16_t)(h + 1))) / 2);
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        assert_int_equal(drift_f32_to_bf16(mid), even);
        assert_int_equal(drift_f32_to_bf16(-mid), even | 0x8000);
    }
    for (uint32_t h = 0; h < 0x7bff; h++) {
        float mid = (float)((f16_value((uint16_t)h) + f16_value((uint16_t)(h + 1))) / 2);
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        assert_int_equal(drift_f32_to_f16(mid), even);
        assert_int_equal(drift_f32_to_f16(-mid), even | 0x8000);
    }
    /* Hand cases. 1 + 2^-8 is halfway between bf16 1 and 1+2^-7: even is 1. */
    assert_int_equal(drift_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    /* 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6 (even). */
    assert_int_equal(drift_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    /* fp16: 65520 rounds to inf, just below stays at 65504. */
    assert_int_equal(drift_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(drift_f32_to_f16(nextafterf(65520.0f, 0)), 0x7bff);
    /* bf16 overflow: the largest finite fp32 rounds to inf. */
    assert_int_equal(drift_f32_to_bf16(3.4028234663852886e38f), 0x7f80);
    /* fp16 subnormals: 2^-24 is the smallest; half of it ties to 0; 1.5x ties to 2. */
    assert_int_equal(drift_f32_to_f16(0x1p-24f), 0x0001);
    assert_int_equal(drift_f32_to_f16(0x1p-25f), 0x0000);
    assert_int_equal(drift_f32_to_f16(0x1.8p-24f), 0x0002);
    assert_int_equal(drift_f32_to_f16(-0.0f), 0x8000);
    /* bf16 keeps fp32 subnormals' top bits. */
    assert_int_equal(drift_f32_to_bf16(drift_bits_f32(0x00010000u)), 0x0001);
    assert_int_equal(drift_f32_to_bf16(drift_bits_f32(0x00008000u)), 0x0000); /* tie to even 0 */
    assert_int_equal(drift_f32_to_bf16(drift_bits_f32(0x00018000u)), 0x0002); /* tie to even 2 */
}

static void test_bulk_and_names(void **state) {
    (void)state;
    float src[5] = {1.0f, -2.5f, 1.0f + 0x1p-8f, INFINITY, 65520.0f};
    uint16_t b[5], h[5];
    float back[5];
    drift_dtype_f32_to_bf16_n(src, b, 5);
    drift_dtype_f32_to_f16_n(src, h, 5);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(b[i], drift_f32_to_bf16(src[i]));
        assert_int_equal(h[i], drift_f32_to_f16(src[i]));
    }
    drift_dtype_to_f32_n(b, DRIFT_BF16, back, 5);
    assert_true(back[2] == 1.0f);
    float r[5];
    memcpy(r, src, sizeof r);
    drift_dtype_round_n(r, 5, DRIFT_F16);
    assert_true(isinf(r[4]));
    assert_true(r[2] == 1.0f + 0x1p-8f); /* exactly representable in fp16 */
    assert_int_equal(drift_dtype_parse("bfloat16"), DRIFT_BF16);
    assert_int_equal(drift_dtype_parse("torch.float16"), DRIFT_F16);
    assert_int_equal(drift_dtype_parse("fp32"), DRIFT_F32);
    assert_int_equal(drift_dtype_parse("int8"), DRIFT_DTYPE_INVALID);
    assert_string_equal(drift_dtype_name(DRIFT_BF16), "bf16");
    assert_int_equal(drift_dtype_size(DRIFT_F64), 8);
}

static void test_ulp_distance(void **state) {
    (void)state;
    assert_int_equal(drift_dtype_ulp_distance(1.0f, 1.0f, DRIFT_BF16), 0);
    assert_int_equal(drift_dtype_ulp_distance(1.0f, 1.0f + 0x1p-7f, DRIFT_BF16), 1);
    assert_int_equal(drift_dtype_ulp_distance(1.0f, 1.0f + 0x1p-7f, DRIFT_F32), 1u << 16);
    /* across zero: smallest positive and smallest negative subnormal are 2 apart */
    assert_int_equal(drift_dtype_ulp_distance(0x1p-24f, -0x1p-24f, DRIFT_F16), 2);
    assert_true(drift_dtype_ulp_distance(NAN, 1.0f, DRIFT_F32) == UINT64_MAX);
    assert_int_equal(drift_dtype_ulp_distance(NAN, NAN, DRIFT_F32), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_widen_all),
        cmocka_unit_test(test_f16_widen_all),
        cmocka_unit_test(test_roundtrip_all),
        cmocka_unit_test(test_narrow_against_reference),
        cmocka_unit_test(test_ties),
        cmocka_unit_test(test_bulk_and_names),
        cmocka_unit_test(test_ulp_distance),
    };
    return cmocka_run_group_tests_name("formats_dtype", tests, NULL, NULL);
}
