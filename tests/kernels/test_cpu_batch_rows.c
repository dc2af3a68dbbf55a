/* Every reduction of the cpu backend gives a sample the same bits alone as
 * inside a batch, whatever the thread count (issue 32): for the GEMM ops
 * (LINEAR, BMM, ATTENTION in both layouts) and the other reductions (LAYER_NORM,
 * RMS_NORM, SOFTMAX, log_softmax, GROUP_NORM, REDUCE mean and sum, CUMSUM),
 * each sample of a batch of 5 run on cpu:threads=3 is bitwise equal to that
 * sample run alone (batch 1) on cpu:threads=1. The shapes cross the
 * threading thresholds and the GEMM's K block (K = 300). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"

#define B 5
#define F32 DRIFT_F32
#define BF DRIFT_BF16

typedef struct bin {
    drift_dtype dt;
    int nd, batched; /* batched: dim 0 is the batch (size B in the batch run, 1 alone) */
    int64_t sh[DRIFT_MAX_DIMS];
} bin;

typedef struct bcase {
    const char *name;
    drift_op op;
    bin in[3];
} bcase;

static uint64_t g_rng = 77;

static float rnd(drift_dtype dt) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return drift_round_to((float)((double)(z >> 11) * (1.0 / 9007199254740992.0) * 4.0 - 2.0), dt);
}

static int64_t numel(const bin *b, int64_t batch) {
    int64_t n = 1;
    for (int d = 0; d < b->nd; d++) n *= d == 0 && b->batched ? batch : b->sh[d];
    return n;
}

/* Runs op on be with inputs host[j] at batch `batch`; returns the output (caller frees). */
static float *run(const char *spec, const bcase *c, float *const *host, int64_t batch, int64_t *n_out) {
    drift_backend *be = NULL;
    drift_err e;
    drift_err_clear(&e);
    assert_int_equal(drift_backend_create(spec, &be, &e), DRIFT_OK);
    drift_tensor in[3], out;
    const drift_tensor *ip[3];
    for (int j = 0; j < c->op.n_in; j++) {
        memset(&in[j], 0, sizeof in[j]);
        in[j].dtype = c->in[j].dt;
        in[j].ndim = c->in[j].nd;
        memcpy(in[j].shape, c->in[j].sh, sizeof in[j].shape);
        if (c->in[j].batched) in[j].shape[0] = batch;
        assert_int_equal(drift_backend_alloc(be, &in[j], &e), DRIFT_OK);
        assert_int_equal(drift_backend_upload_f32(be, &in[j], host[j], &e), DRIFT_OK);
        ip[j] = &in[j];
    }
    memset(&out, 0, sizeof out);
    out.dtype = c->op.out;
    if (drift_op_infer_shape(&c->op, ip, &out.ndim, out.shape, &e)) fail_msg("%s: %s", c->name, e.msg);
    assert_int_equal(drift_backend_alloc(be, &out, &e), DRIFT_OK);
    if (drift_backend_run(be, &c->op, ip, &out, &e)) fail_msg("%s on %s: %s", c->name, spec, e.msg);
    float *v = malloc((size_t)out.numel * sizeof(float));
    assert_non_null(v);
    assert_int_equal(drift_backend_download_f32(be, &out, v, &e), DRIFT_OK);
    *n_out = out.numel;
    for (int j = 0; j < c->op.n_in; j++) drift_backend_release(be, &in[j]);
    drift_backend_release(be, &out);
    drift_backend_free(be);
    return v;
}

static void check(const bcase *c) {
    float *full[3] = {0}, *one[3] = {0};
    for (int j = 0; j < c->op.n_in; j++) {
        const int64_t n = numel(&c->in[j], B);
        full[j] = malloc((size_t)n * sizeof(float));
        assert_non_null(full[j]);
        for (int64_t i = 0; i < n; i++) full[j][i] = rnd(c->in[j].dt);
    }
    int64_t nf;
    float *yf = run("cpu:threads=3", c, full, B, &nf);
    for (int64_t s = 0; s < B; s++) {
        for (int j = 0; j < c->op.n_in; j++) {
            const int64_t n1 = numel(&c->in[j], 1);
            one[j] = c->in[j].batched ? full[j] + s * n1 : full[j];
        }
        int64_t n1;
        float *y1 = run("cpu:threads=1", c, one, 1, &n1);
        assert_int_equal(n1 * B, nf);
        if (memcmp(y1, yf + s * n1, (size_t)n1 * sizeof(float)) != 0) {
            int64_t i = 0;
            while (memcmp(&y1[i], &yf[s * n1 + i], sizeof(float)) == 0) i++;
            fail_msg("%s: sample %lld alone (1 thread) differs from the batch of %d (3 threads) at %lld: %a vs %a",
                     c->name, (long long)s, B, (long long)i, (double)y1[i], (double)yf[s * n1 + i]);
        }
        free(y1);
    }
    free(yf);
    for (int j = 0; j < c->op.n_in; j++) free(full[j]);
}

#define SH(...) {__VA_ARGS__}

static void test_batch_rows(void **st) {
    (void)st;
    bcase cs[16];
    int n = 0;
    memset(cs, 0, sizeof cs);
    cs[n] = (bcase){"linear", {.kind = DRIFT_OP_LINEAR, .out = BF, .compute = BF, .n_in = 3},
                    {{BF, 3, 1, SH(B, 37, 300)}, {BF, 2, 0, SH(70, 300)}, {F32, 1, 0, SH(70)}}};
    n++;
    cs[n] = (bcase){"bmm", {.kind = DRIFT_OP_BMM, .out = F32, .compute = F32, .n_in = 2, .alpha = 1.0f},
                    {{F32, 3, 1, SH(B, 40, 300)}, {F32, 3, 1, SH(B, 300, 33)}}};
    n++;
    cs[n] = (bcase){"attention", {.kind = DRIFT_OP_ATTENTION, .out = BF, .compute = BF, .n_in = 3, .scale = 0.125f},
                    {{BF, 4, 1, SH(B, 2, 150, 64)}, {BF, 4, 1, SH(B, 2, 300, 64)}, {BF, 4, 1, SH(B, 2, 300, 64)}}};
    n++;
    cs[n] = (bcase){"attention layout 1",
                    {.kind = DRIFT_OP_ATTENTION, .out = F32, .compute = F32, .n_in = 3, .layout = 1},
                    {{F32, 4, 1, SH(B, 90, 3, 32)}, {F32, 4, 1, SH(B, 70, 3, 32)}, {F32, 4, 1, SH(B, 70, 3, 32)}}};
    n++;
    cs[n] = (bcase){"layer_norm", {.kind = DRIFT_OP_LAYER_NORM, .out = BF, .compute = F32, .n_in = 3, .eps = 1e-6f},
                    {{BF, 3, 1, SH(B, 130, 257)}, {F32, 1, 0, SH(257)}, {F32, 1, 0, SH(257)}}};
    n++;
    cs[n] = (bcase){"rms_norm", {.kind = DRIFT_OP_RMS_NORM, .out = BF, .compute = F32, .n_in = 2, .eps = 1e-6f},
                    {{BF, 3, 1, SH(B, 130, 257)}, {F32, 1, 0, SH(257)}}};
    n++;
    cs[n] = (bcase){"softmax", {.kind = DRIFT_OP_SOFTMAX, .out = F32, .compute = F32, .n_in = 1, .dim = -1},
                    {{F32, 3, 1, SH(B, 70, 301)}}};
    n++;
    cs[n] = (bcase){"log_softmax over dim 1",
                    {.kind = DRIFT_OP_SOFTMAX, .out = F32, .compute = F32, .n_in = 1, .dim = 1, .sub = 1},
                    {{F32, 3, 1, SH(B, 301, 7)}}};
    n++;
    cs[n] = (bcase){"group_norm", {.kind = DRIFT_OP_GROUP_NORM, .out = F32, .compute = F32, .n_in = 3, .length = 4,
                                   .eps = 1e-5f},
                    {{F32, 4, 1, SH(B, 8, 9, 11)}, {F32, 1, 0, SH(8)}, {F32, 1, 0, SH(8)}}};
    n++;
    cs[n] = (bcase){"mean over tokens",
                    {.kind = DRIFT_OP_REDUCE, .out = F32, .compute = F32, .n_in = 1, .dim = 1, .sub = DRIFT_REDUCE_MEAN},
                    {{F32, 3, 1, SH(B, 301, 9)}}};
    n++;
    cs[n] = (bcase){"sum over the last dim",
                    {.kind = DRIFT_OP_REDUCE, .out = F32, .compute = F32, .n_in = 1, .dim = -1, .sub = DRIFT_REDUCE_SUM},
                    {{F32, 3, 1, SH(B, 9, 301)}}};
    n++;
    cs[n] = (bcase){"cumsum", {.kind = DRIFT_OP_CUMSUM, .out = F32, .compute = F32, .n_in = 1, .dim = 1},
                    {{F32, 3, 1, SH(B, 301, 9)}}};
    n++;
    for (int i = 0; i < n; i++) {
        check(&cs[i]);
        print_message("  %-24s each of %d samples alone = inside the batch\n", cs[i].name, B);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_batch_rows)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
