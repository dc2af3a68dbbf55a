/* ATTENTION in FlashAttention-2's order on the cpu (kernels/cpu/cpu_attn_fa2.c):
 *  - with the H200's table (cpu:gpu_as=h200-...) LTX-2's audio attention shape
 *    (B 2, H 2, 9 queries, 512 keys, head dim 4) runs split-KV with 2 splits of
 *    256 keys, combined through their log-sum-exp: bitwise equal to a naive loop
 *    of that documented form, and not to the one-split form;
 *  - without a GPU table there is no split: the one-split form (key blocks of
 *    128 from the last, partial one down);
 *  - Helios' shape (212 queries and keys, head dim 12): one split with the table too;
 *  - the naive loop here is written from the header's description, not from
 *    the kernel's code;
 *  - recorded on the H200: LTX-2's transformer_blocks.0.video_to_audio_attn
 *    (tests/data/attention/ltx2_video_to_audio.f32: per step q, k, v as SDPA got
 *    them, to_out.0's weight and bias, and the recorded to_out.0 output; from
 *    the rec5 trace by bench/zoo/emulate: the recorded to_q/to_k/to_v/norm_q/norm_k
 *    through the rope): ATTENTION then LINEAR on the cpu with the H200's table
 *    equal the recording bit for bit in both steps; without the table (no
 *    split) 9 and 17 of the 144 elements differ. */
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
#include "test_rand.h"

#define H200 "cpu:gpu_as=h200-sm90-cublaslt-13.1.0"

typedef struct shape {
    int64_t B, H, Lq, Lk, D;
} shape;

/* One row's FA2 forward over keys [lo, hi) in blocks of BN from lo (as the kernel's n_block
 * indices): returns o (unnormalised by the split, normalised by its own l) and lse. */
static void split_row(const float *s_raw, const float *v, int64_t D, int64_t lo_b, int64_t hi_b, int64_t BN, int64_t Lk,
                      float scale, float c, float *o, float *lse) {
    float m = -INFINITY, l4[4] = {0, 0, 0, 0}, acc[64] = {0};
    float *p = malloc((size_t)Lk * sizeof(float));
    for (int64_t bi = hi_b - 1; bi >= lo_b; bi--) {
        const int64_t c0 = bi * BN, c1 = c0 + BN < Lk ? c0 + BN : Lk;
        float mt = m;
        for (int64_t j = c0; j < c1; j++) mt = s_raw[j] > mt ? s_raw[j] : mt;
        if (bi != hi_b - 1) {
            const float a = exp2f((m - mt) * c);
            for (int t = 0; t < 4; t++) l4[t] = l4[t] * a;
            for (int64_t d = 0; d < D; d++) acc[d] = acc[d] * a;
        }
        m = mt;
        for (int64_t j = c0; j < c1; j++) p[j] = exp2f(fmaf(s_raw[j], c, -(m * c)));
        for (int64_t j = c0; j < c1; j++) l4[((j - c0) % 8) / 2] += p[j]; /* lane t: columns 8i + 2t, 8i + 2t + 1 */
        for (int64_t k0 = c0; k0 < c1; k0 += 16)
            for (int64_t d = 0; d < D; d++) {
                double e = 0;
                for (int64_t j = k0; j < c1 && j < k0 + 16; j++) e += (double)drift_round_to(p[j], DRIFT_BF16) * v[j * D + d];
                acc[d] = (float)((double)acc[d] + e);
            }
    }
    const float l = (l4[0] + l4[2]) + (l4[1] + l4[3]), inv = 1.0f / l;
    for (int64_t d = 0; d < D; d++) o[d] = acc[d] * inv;
    *lse = fmaf(m, scale, logf(l));
    free(p);
}

/* The expected [B, H, Lq, D] output for ns splits of blocks of BN keys. */
static void expect(const shape *sh, const float *q, const float *k, const float *v, int64_t ns, int64_t BN, float *y) {
    const float scale = (float)(1.0 / sqrt((double)sh->D)), c = (float)((double)scale * 1.4426950408889634);
    const int64_t nnb = (sh->Lk + BN - 1) / BN, per = (nnb + ns - 1) / ns;
    float *s = malloc((size_t)sh->Lk * sizeof(float)), os[8][64], lse[8];
    for (int64_t bh = 0; bh < sh->B * sh->H; bh++)
        for (int64_t r = 0; r < sh->Lq; r++) {
            const float *qr = q + (bh * sh->Lq + r) * sh->D, *kh = k + bh * sh->Lk * sh->D, *vh = v + bh * sh->Lk * sh->D;
            for (int64_t j = 0; j < sh->Lk; j++) {
                double e = 0; /* head dim <= 16: one exact chunk */
                for (int64_t d = 0; d < sh->D; d++) e += (double)qr[d] * kh[j * sh->D + d];
                s[j] = (float)e;
            }
            for (int64_t sp = 0; sp < ns; sp++)
                split_row(s, vh, sh->D, sp * per, (sp + 1) * per < nnb ? (sp + 1) * per : nnb, BN, sh->Lk, scale, c, os[sp], &lse[sp]);
            float *o = y + (bh * sh->Lq + r) * sh->D;
            if (ns == 1) {
                memcpy(o, os[0], (size_t)sh->D * sizeof(float));
            } else {
                float M = -INFINITY, S = 0;
                for (int64_t sp = 0; sp < ns; sp++) M = lse[sp] > M ? lse[sp] : M;
                for (int64_t sp = 0; sp < ns; sp++) S += expf(lse[sp] - M);
                const float L = logf(S) + M;
                for (int64_t d = 0; d < sh->D; d++) o[d] = 0;
                for (int64_t sp = 0; sp < ns; sp++)
                    for (int64_t d = 0; d < sh->D; d++) o[d] = fmaf(expf(lse[sp] - L), os[sp][d], o[d]);
            }
            for (int64_t d = 0; d < sh->D; d++) o[d] = drift_round_to(o[d], DRIFT_BF16);
        }
    free(s);
}

static drift_tensor mk(drift_backend *be, const shape *sh, int64_t L, const float *v) {
    drift_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = DRIFT_BF16, t.ndim = 4;
    t.shape[0] = sh->B, t.shape[1] = sh->H, t.shape[2] = L, t.shape[3] = sh->D;
    drift_err e;
    assert_int_equal(drift_backend_alloc(be, &t, &e), DRIFT_OK);
    if (v) assert_int_equal(drift_backend_upload_f32(be, &t, v, &e), DRIFT_OK);
    return t;
}

static void run(const char *spec, const shape *sh, const float *q, const float *k, const float *v, float *y) {
    drift_backend *be = NULL;
    drift_err e;
    drift_err_clear(&e);
    if (drift_backend_create(spec, &be, &e)) fail_msg("%s: %s", spec, e.msg);
    drift_tensor tq = mk(be, sh, sh->Lq, q), tk = mk(be, sh, sh->Lk, k), tv = mk(be, sh, sh->Lk, v), to = mk(be, sh, sh->Lq, NULL);
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = DRIFT_OP_ATTENTION, op.compute = DRIFT_BF16, op.out = DRIFT_BF16, op.n_in = 3;
    op.sub = DRIFT_ATTN_ORDER_LAST_FIRST;
    const drift_tensor *in[3] = {&tq, &tk, &tv};
    if (drift_backend_run(be, &op, in, &to, &e)) fail_msg("%s: %s", spec, e.msg);
    assert_int_equal(drift_backend_download_f32(be, &to, y, &e), DRIFT_OK);
    drift_tensor *all[] = {&tq, &tk, &tv, &to};
    for (int i = 0; i < 4; i++) drift_backend_release(be, all[i]);
    drift_backend_free(be);
}

static int64_t ndiff(const float *a, const float *b, int64_t n) {
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) c += memcmp(&a[i], &b[i], sizeof a[i]) != 0;
    return c;
}

static void check(const shape *sh, int64_t ns_h200, int64_t bn_h200) {
    uint64_t rng = 5;
    const int64_t nq = sh->B * sh->H * sh->Lq * sh->D, nk = sh->B * sh->H * sh->Lk * sh->D;
    float *q = test_rand_vals(&rng, nq, 3.0, DRIFT_BF16), *k = test_rand_vals(&rng, nk, 3.0, DRIFT_BF16);
    float *v = test_rand_vals(&rng, nk, 2.0, DRIFT_BF16);
    float *got = malloc((size_t)nq * sizeof(float)), *want = malloc((size_t)nq * sizeof(float));
    float *one = malloc((size_t)nq * sizeof(float));
    expect(sh, q, k, v, ns_h200, bn_h200, want);
    expect(sh, q, k, v, 1, 128, one);
    run(H200, sh, q, k, v, got);
    assert_int_equal(ndiff(got, want, nq), 0);
    if (ns_h200 > 1) assert_true(ndiff(want, one, nq) > 0); /* the split form really differs here */
    run("cpu", sh, q, k, v, got); /* no GPU table: no split */
    assert_int_equal(ndiff(got, one, nq), 0);
    free(q), free(k), free(v), free(got), free(want), free(one);
}

static void test_ltx2_audio_split(void **st) {
    (void)st;
    const shape sh = {2, 2, 9, 512, 4};
    check(&sh, 2, 256);
}

static void test_helios_one_split(void **st) {
    (void)st;
    const shape sh = {1, 2, 212, 212, 12};
    check(&sh, 1, 128);
}

/* Reads n floats at *off of the fixture. */
static const float *take(const float *blob, size_t *off, size_t n) {
    const float *p = blob + *off;
    *off += n;
    return p;
}

/* ATTENTION [2, 2, 9, 4] -> [2, 9, 8] -> LINEAR (8 -> 8, bias) on spec; differing elements. */
static int64_t recorded_step(const char *spec, const float *q, const float *k, const float *v, const float *w,
                             const float *bias, const float *want) {
    const shape sh = {2, 2, 9, 512, 4};
    float att[2 * 2 * 9 * 4], x[2 * 9 * 8];
    run(spec, &sh, q, k, v, att);
    for (int b = 0; b < 2; b++) /* [B, H, L, D] -> [B, L, H * D] */
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 9; l++)
                for (int d = 0; d < 4; d++) x[(b * 9 + l) * 8 + h * 4 + d] = att[((b * 2 + h) * 9 + l) * 4 + d];
    drift_backend *be = NULL;
    drift_err e;
    assert_int_equal(drift_backend_create(spec, &be, &e), DRIFT_OK);
    drift_tensor tx, tw, tb, ty;
    const int64_t xs[2] = {18, 8}, ws[2] = {8, 8}, bs[1] = {8};
    drift_tensor *all[] = {&tx, &tw, &tb, &ty};
    const int64_t *shp[] = {xs, ws, bs, xs};
    const float *vals[] = {x, w, bias, NULL};
    for (int i = 0; i < 4; i++) {
        memset(all[i], 0, sizeof *all[i]);
        all[i]->dtype = DRIFT_BF16, all[i]->ndim = i == 2 ? 1 : 2;
        for (int d = 0; d < all[i]->ndim; d++) all[i]->shape[d] = shp[i][d];
        assert_int_equal(drift_backend_alloc(be, all[i], &e), DRIFT_OK);
        if (vals[i]) assert_int_equal(drift_backend_upload_f32(be, all[i], vals[i], &e), DRIFT_OK);
    }
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = DRIFT_OP_LINEAR, op.compute = DRIFT_BF16, op.out = DRIFT_BF16, op.n_in = 3;
    const drift_tensor *in[3] = {&tx, &tw, &tb};
    assert_int_equal(drift_backend_run(be, &op, in, &ty, &e), DRIFT_OK);
    float y[18 * 8];
    assert_int_equal(drift_backend_download_f32(be, &ty, y, &e), DRIFT_OK);
    for (int i = 0; i < 4; i++) drift_backend_release(be, all[i]);
    drift_backend_free(be);
    return ndiff(y, want, 18 * 8);
}

static void test_ltx2_recorded(void **st) {
    (void)st;
    const char *dir = getenv("DRIFT_TESTDATA");
    char path[4096];
    snprintf(path, sizeof path, "%s/attention/ltx2_video_to_audio.f32", dir ? dir : "tests/data");
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    enum { PER_STEP = 144 + 8192 + 8192 + 64 + 8 + 144 };
    static float blob[2 * PER_STEP];
    assert_int_equal(fread(blob, sizeof(float), 2 * PER_STEP, f), 2 * PER_STEP);
    fclose(f);
    const int64_t want_unsplit[2] = {9, 17};
    size_t off = 0;
    for (int step = 0; step < 2; step++) {
        const float *q = take(blob, &off, 144), *k = take(blob, &off, 8192), *v = take(blob, &off, 8192);
        const float *w = take(blob, &off, 64), *b = take(blob, &off, 8), *want = take(blob, &off, 144);
        const int64_t got = recorded_step(H200, q, k, v, w, b, want), plain = recorded_step("cpu", q, k, v, w, b, want);
        if (got != 0) fail_msg("step %d: %lld of 144 differ from the H200 with its table", step, (long long)got);
        if (plain != want_unsplit[step])
            fail_msg("step %d: without the table %lld differ, want %lld", step, (long long)plain, (long long)want_unsplit[step]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ltx2_audio_split),
        cmocka_unit_test(test_helios_one_split),
        cmocka_unit_test(test_ltx2_recorded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
