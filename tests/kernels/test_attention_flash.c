/* The cpu backend's attention order (kernels/cpu/cpu_ops.c, flash_rows):
 * with a 16-bit compute and more keys than cpu:attn_tile= (default 128) it
 * is a flash kernel's online softmax over key tiles (p rounded relative to
 * the running maximum, O rescaled per tile), the order of torch's cuDNN
 * fused SDPA; attn_tile=0 is one softmax over all keys. Operands are chosen
 * so that every GEMM is exact (q, k multiples of 1/4, v small integers):
 * then only the softmax order decides the bits, and the test computes both
 * orders itself and compares bit for bit. Also: the two orders differ
 * (the comparison can fail), a tile larger than Lk is the one-softmax
 * order, fp32 compute ignores the tile, a first tile of -inf scores gives
 * no NaN, and bad attn_tile values are refused (the ref backend has none). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "kernels/backend.h"

enum { H = 2, LQ = 5, LK = 300, D = 8 };
static const float SCALE = 0.125f;

static float Q[H * LQ * D], K[H * LK * D], V[H * LK * D];

static void fill(int neg_inf_first_tile) {
    uint32_t x = 7;
    for (int i = 0; i < H * LQ * D; i++) {
        x = x * 1664525u + 1013904223u;
        Q[i] = neg_inf_first_tile ? 0.25f * (float)(1 + (x >> 30)) : 0.25f * (float)((int)(x >> 29) - 4);
    }
    for (int i = 0; i < H * LK * D; i++) {
        x = x * 1664525u + 1013904223u;
        K[i] = 0.25f * (float)((int)(x >> 29) - 4);
        x = x * 1664525u + 1013904223u;
        V[i] = (float)((int)(x >> 30) - 1);
    }
    if (neg_inf_first_tile) /* keys 0..127 score -inf for every (positive) query */
        for (int h = 0; h < H; h++)
            for (int j = 0; j < 128; j++)
                for (int d = 0; d < D; d++) K[(h * LK + j) * D + d] = d == 0 ? -INFINITY : 0.0f;
}

/* The expected output of one head row in either order (tile 0: one softmax). */
static void expect_row(const float *q, const float *k, const float *v, int tile, float *o) {
    float s[LK];
    for (int j = 0; j < LK; j++) {
        float a = 0.0f;
        for (int d = 0; d < D; d++) a += q[d] * k[j * D + d]; /* exact: multiples of 1/16, few terms */
        s[j] = a * SCALE;
    }
    const int N = tile > 0 && tile < LK ? tile : LK;
    float m = -INFINITY, l = 0.0f, acc[D] = {0};
    for (int c0 = 0; c0 < LK; c0 += N) {
        const int c1 = c0 + N < LK ? c0 + N : LK;
        float mt = m;
        for (int j = c0; j < c1; j++)
            if (s[j] > mt) mt = s[j];
        const float ms = mt == -INFINITY ? 0.0f : mt;
        const float al = m == -INFINITY ? 0.0f : expf(m - ms);
        float sum = 0.0f, pv[D] = {0};
        for (int j = c0; j < c1; j++) {
            const float e = expf(s[j] - ms);
            sum += e;
            const float p = drift_round_to(e, DRIFT_BF16);
            for (int d = 0; d < D; d++) pv[d] += p * v[j * D + d]; /* exact: bf16 times small integers */
        }
        l = l * al + sum;
        for (int d = 0; d < D; d++) acc[d] = c0 == 0 ? pv[d] : acc[d] * al + pv[d];
        m = mt;
    }
    for (int d = 0; d < D; d++) o[d] = acc[d] / l;
}

static drift_tensor mk(const drift_backend *be, drift_dtype dt, int64_t L, const float *vals) {
    drift_tensor t;
    drift_err err;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = 4;
    t.shape[0] = 1, t.shape[1] = H, t.shape[2] = L, t.shape[3] = D;
    t.be = be;
    if (drift_backend_alloc(be, &t, &err)) fail_msg("alloc: %s", err.msg);
    if (vals && drift_backend_upload_f32(be, &t, vals, &err)) fail_msg("upload: %s", err.msg);
    return t;
}

/* Runs ATTENTION (bf16 operands, compute c, fp32 out) on backend spec; out[H*LQ*D]. */
static void run(const char *spec, drift_dtype c, float *out) {
    drift_backend *be = NULL;
    drift_err err;
    drift_err_clear(&err);
    if (drift_backend_create(spec, &be, &err)) fail_msg("%s: %s", spec, err.msg);
    drift_tensor q = mk(be, DRIFT_BF16, LQ, Q), k = mk(be, DRIFT_BF16, LK, K), v = mk(be, DRIFT_BF16, LK, V),
                 o = mk(be, DRIFT_F32, LQ, NULL);
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = DRIFT_OP_ATTENTION;
    op.compute = c;
    op.out = DRIFT_F32;
    op.n_in = 3;
    op.scale = SCALE;
    const drift_tensor *in[3] = {&q, &k, &v};
    if (drift_backend_run(be, &op, in, &o, &err)) fail_msg("%s: %s", spec, err.msg);
    assert_int_equal(drift_backend_download_f32(be, &o, out, &err), DRIFT_OK);
    drift_tensor *ts[4] = {&q, &k, &v, &o};
    for (int i = 0; i < 4; i++) drift_backend_release(be, ts[i]);
    drift_backend_free(be);
}

static void expect_all(int tile, float *e) {
    for (int h = 0; h < H; h++)
        for (int i = 0; i < LQ; i++)
            expect_row(Q + (h * LQ + i) * D, K + h * LK * D, V + h * LK * D, tile, e + (h * LQ + i) * D);
}

static int ndiff(const float *a, const float *b) {
    int n = 0;
    for (int i = 0; i < H * LQ * D; i++) n += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return n;
}

static void test_orders(void **st) {
    (void)st;
    fill(0);
    static float got[H * LQ * D], e128[H * LQ * D], e0[H * LQ * D], e64[H * LQ * D];
    expect_all(128, e128);
    expect_all(0, e0);
    expect_all(64, e64);
    assert_true(ndiff(e128, e0) > 0); /* the two orders really differ on these operands */
    run("cpu", DRIFT_BF16, got);
    assert_int_equal(ndiff(got, e128), 0);
    run("cpu:attn_tile=128", DRIFT_BF16, got);
    assert_int_equal(ndiff(got, e128), 0);
    run("cpu:attn_tile=64", DRIFT_BF16, got);
    assert_int_equal(ndiff(got, e64), 0);
    run("cpu:attn_tile=0", DRIFT_BF16, got);
    assert_int_equal(ndiff(got, e0), 0);
    run("cpu:attn_tile=512", DRIFT_BF16, got); /* more than Lk: one tile */
    assert_int_equal(ndiff(got, e0), 0);
    static float f0[H * LQ * D], f128[H * LQ * D];
    run("cpu:attn_tile=0", DRIFT_F32, f0); /* fp32 compute: p is not rounded, no tiling */
    run("cpu", DRIFT_F32, f128);
    assert_int_equal(ndiff(f0, f128), 0);
}

static void test_neg_inf_first_tile(void **st) {
    (void)st;
    fill(1);
    static float got[H * LQ * D], e[H * LQ * D];
    run("cpu", DRIFT_BF16, got);
    expect_all(128, e);
    for (int i = 0; i < H * LQ * D; i++) assert_true(isfinite(got[i]));
    assert_int_equal(ndiff(got, e), 0);
}

static void test_bad_options(void **st) {
    (void)st;
    const char *bad[] = {"cpu:attn_tile=-1", "cpu:attn_tile=abc", "cpu:attn_tile=", "ref:attn_tile=128"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        drift_backend *be = NULL;
        drift_err err;
        drift_err_clear(&err);
        assert_int_equal(drift_backend_create(bad[i], &be, &err), DRIFT_E_INPUT);
        assert_null(be);
        assert_non_null(strstr(err.msg, "attn_tile"));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_orders),
        cmocka_unit_test(test_neg_inf_first_tile),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
