/* Determinism of the host backends: the same op on the same inputs gives
 * the same bits, run after run, on a fresh backend instance, and (for every
 * loop drift itself threads) whatever the thread count. Shapes are large
 * enough to cross the threading thresholds of kernels/cpu.
 *
 * The GEMMs (LINEAR, ATTENTION's two products, BMM) run drift's own GEMM
 * (kernels/cpu/cpu_gemm.h), whose order per output element depends on K
 * alone: they are held to the same bits across thread counts as every other
 * op (with OpenBLAS, as before issue 32, they were not). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"

static uint64_t g_rng;

static float rng_val(float lo, float hi, drift_dtype dt) {
    for (;;) {
        uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        double u = (double)(z >> 11) * (1.0 / 9007199254740992.0);
        float v = drift_round_to((float)(lo + (hi - lo) * u), dt);
        if (v != 0.0f) return v;
    }
}

typedef struct din {
    drift_dtype dt;
    int nd;
    int64_t sh[DRIFT_MAX_DIMS];
    float lo, hi;
} din;

typedef struct dcase {
    drift_op op;
    din in[3];
    int out_nd;
    int64_t out_sh[DRIFT_MAX_DIMS];
    float *host[3];
} dcase;

#define NCASES 16
static dcase g_cases[NCASES];
static int g_ncases;

static void add_in(dcase *c, int i, drift_dtype dt, int nd, const int64_t *sh, float lo, float hi) {
    c->in[i].dt = dt;
    c->in[i].nd = nd;
    memcpy(c->in[i].sh, sh, (size_t)nd * sizeof(int64_t));
    c->in[i].lo = lo;
    c->in[i].hi = hi;
}

static dcase *new_case(drift_op_kind k, drift_dtype out, drift_dtype compute, int n_in) {
    dcase *c = &g_cases[g_ncases++];
    memset(c, 0, sizeof *c);
    c->op.kind = k;
    c->op.out = out;
    c->op.compute = compute;
    c->op.n_in = n_in;
    return c;
}

#define SH(...) ((const int64_t[]){__VA_ARGS__})

static int setup(void **state) {
    (void)state;
    const drift_dtype BF = DRIFT_BF16, F32 = DRIFT_F32;
    dcase *c;
    c = new_case(DRIFT_OP_CAST, BF, F32, 1);
    add_in(c, 0, F32, 2, SH(513, 517), -8, 8);
    c = new_case(DRIFT_OP_GELU_TANH, BF, F32, 1);
    add_in(c, 0, BF, 2, SH(511, 515), -6, 6);
    c = new_case(DRIFT_OP_SILU, DRIFT_F16, F32, 1);
    add_in(c, 0, F32, 1, SH(300001), -6, 6);
    c = new_case(DRIFT_OP_ADD, BF, F32, 2);
    add_in(c, 0, BF, 3, SH(3, 257, 511), -4, 4);
    add_in(c, 1, F32, 2, SH(257, 1), -4, 4);
    c = new_case(DRIFT_OP_MUL, F32, F32, 2);
    add_in(c, 0, F32, 2, SH(1, 600), -4, 4);
    add_in(c, 1, BF, 2, SH(700, 1), -4, 4);
    c = new_case(DRIFT_OP_LAYER_NORM, BF, F32, 3);
    c->op.eps = 1e-6f;
    add_in(c, 0, BF, 2, SH(1031, 257), -3, 5);
    add_in(c, 1, F32, 1, SH(257), 0.5f, 1.5f);
    add_in(c, 2, F32, 1, SH(257), -1, 1);
    c = new_case(DRIFT_OP_RMS_NORM, BF, F32, 2);
    c->op.eps = 1e-6f;
    add_in(c, 0, BF, 2, SH(1031, 257), -3, 3);
    add_in(c, 1, BF, 1, SH(257), 0.5f, 1.5f);
    c = new_case(DRIFT_OP_ROPE, BF, F32, 3);
    add_in(c, 0, BF, 4, SH(2, 257, 6, 64), -4, 4);
    add_in(c, 1, F32, 2, SH(257, 64), -1, 1);
    add_in(c, 2, F32, 2, SH(257, 64), -1, 1);
    c = new_case(DRIFT_OP_PERMUTE, BF, F32, 1);
    c->op.perm[0] = 2, c->op.perm[1] = 0, c->op.perm[2] = 3, c->op.perm[3] = 1;
    add_in(c, 0, F32, 4, SH(5, 33, 65, 31), -4, 4);
    c = new_case(DRIFT_OP_PATCHIFY, BF, F32, 1);
    c->op.patch[0] = 1, c->op.patch[1] = 2, c->op.patch[2] = 2;
    add_in(c, 0, BF, 5, SH(2, 16, 3, 30, 52), -4, 4);
    c = new_case(DRIFT_OP_TIMESTEP_SINUSOID, F32, F32, 1);
    c->op.dim = 256, c->op.max_period = 10000.0f, c->op.flip_sin_to_cos = 1;
    add_in(c, 0, F32, 1, SH(129), 0, 1000);
    c = new_case(DRIFT_OP_LINEAR, BF, BF, 3);
    add_in(c, 0, BF, 3, SH(2, 257, 129), -1, 1);
    add_in(c, 1, BF, 2, SH(193, 129), -1, 1);
    add_in(c, 2, F32, 1, SH(193), -1, 1);
    c = new_case(DRIFT_OP_LINEAR, F32, F32, 2); /* K over several of the GEMM's K blocks */
    add_in(c, 0, F32, 2, SH(65, 2049), -1, 1);
    add_in(c, 1, F32, 2, SH(67, 2049), -1, 1);
    c = new_case(DRIFT_OP_ATTENTION, BF, BF, 3);
    c->op.scale = 0.125f;
    add_in(c, 0, BF, 4, SH(2, 3, 257, 64), -1, 1);
    add_in(c, 1, BF, 4, SH(2, 3, 311, 64), -1, 1);
    add_in(c, 2, BF, 4, SH(2, 3, 311, 64), -1, 1);
    c = new_case(DRIFT_OP_BMM, F32, F32, 2);
    c->op.alpha = 1.0f;
    add_in(c, 0, F32, 3, SH(3, 131, 300), -1, 1);
    add_in(c, 1, F32, 3, SH(3, 300, 77), -1, 1);
    for (int i = 0; i < g_ncases; i++) {
        c = &g_cases[i];
        g_rng = 0x5eed0000ull + (uint64_t)i;
        for (int j = 0; j < c->op.n_in; j++) {
            int64_t n = drift_shape_numel(c->in[j].nd, c->in[j].sh);
            c->host[j] = malloc((size_t)n * sizeof(float));
            if (!c->host[j]) return -1;
            for (int64_t k = 0; k < n; k++) c->host[j][k] = rng_val(c->in[j].lo, c->in[j].hi, c->in[j].dt);
        }
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < g_ncases; i++)
        for (int j = 0; j < 3; j++) free(g_cases[i].host[j]);
    return 0;
}

/* Runs case c on be from its host inputs; returns the output as fp64 (exact
 * widening, so equal doubles mean equal stored bits). */
static double *run_on(drift_backend *be, const dcase *c, int64_t *n_out) {
    drift_tensor in[3], out;
    const drift_tensor *ip[3];
    drift_err e;
    drift_err_clear(&e);
    for (int j = 0; j < c->op.n_in; j++) {
        memset(&in[j], 0, sizeof in[j]);
        in[j].dtype = c->in[j].dt;
        in[j].ndim = c->in[j].nd;
        memcpy(in[j].shape, c->in[j].sh, sizeof in[j].shape);
        assert_int_equal(drift_backend_alloc(be, &in[j], &e), DRIFT_OK);
        assert_int_equal(drift_backend_upload_f32(be, &in[j], c->host[j], &e), DRIFT_OK);
        ip[j] = &in[j];
    }
    memset(&out, 0, sizeof out);
    out.dtype = c->op.out;
    out.ndim = c->out_nd;
    memcpy(out.shape, c->out_sh, sizeof out.shape);
    assert_int_equal(drift_op_infer_shape(&c->op, ip, &out.ndim, out.shape, &e), DRIFT_OK);
    assert_int_equal(drift_backend_alloc(be, &out, &e), DRIFT_OK);
    if (drift_backend_run(be, &c->op, ip, &out, &e)) fail_msg("%s on %s: %s", drift_op_name(c->op.kind), drift_backend_name(be), e.msg);
    double *v = malloc((size_t)out.numel * sizeof(double));
    assert_non_null(v);
    assert_int_equal(drift_backend_download_f64(be, &out, v, &e), DRIFT_OK);
    *n_out = out.numel;
    for (int j = 0; j < c->op.n_in; j++) drift_backend_release(be, &in[j]);
    drift_backend_release(be, &out);
    return v;
}

/* Number of elements whose bits differ. */
static int64_t n_bit_diff(const double *a, const double *b, int64_t n) {
    int64_t d = 0;
    for (int64_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof(double)) != 0;
    return d;
}

static void check_repeat(const char *backend) {
    drift_backend *be, *be2;
    drift_err e;
    assert_int_equal(drift_backend_create(backend, &be, &e), DRIFT_OK);
    assert_int_equal(drift_backend_create(backend, &be2, &e), DRIFT_OK);
    for (int i = 0; i < g_ncases; i++) {
        int64_t n1, n2, n3;
        double *a = run_on(be, &g_cases[i], &n1), *b = run_on(be, &g_cases[i], &n2);
        double *c = run_on(be2, &g_cases[i], &n3);
        assert_int_equal(n1, n2);
        assert_int_equal(n1, n3);
        int64_t d12 = n_bit_diff(a, b, n1), d13 = n_bit_diff(a, c, n1);
        if (d12 || d13)
            fail_msg("%s %s: %lld / %lld elements differ between runs", backend, drift_op_name(g_cases[i].op.kind),
                     (long long)d12, (long long)d13);
        free(a), free(b), free(c);
    }
    drift_backend_free(be);
    drift_backend_free(be2);
}

static void test_repeat_cpu(void **state) {
    (void)state;
    check_repeat("cpu");
}

static void test_repeat_ref(void **state) {
    (void)state;
    check_repeat("ref");
}

/* Same bits with 1, 2, 3 and 5 worker threads (the spec's threads= option,
 * fixed at backend creation). */
static void check_threads(const char *backend) {
    const char *counts[] = {"1", "2", "3", "5"};
    double *base[NCASES] = {0};
    int64_t n[NCASES];
    for (int t = 0; t < 4; t++) {
        char spec[32];
        snprintf(spec, sizeof spec, "%s:threads=%s", backend, counts[t]);
        drift_backend *be;
        drift_err e;
        assert_int_equal(drift_backend_create(spec, &be, &e), DRIFT_OK);
        for (int i = 0; i < g_ncases; i++) {
            int64_t m;
            double *v = run_on(be, &g_cases[i], &m);
            if (t == 0) {
                base[i] = v;
                n[i] = m;
                continue;
            }
            assert_int_equal(m, n[i]);
            int64_t d = n_bit_diff(base[i], v, m);
            if (d)
                fail_msg("%s %s: %lld elements differ between 1 and %s threads", backend,
                         drift_op_name(g_cases[i].op.kind), (long long)d, counts[t]);
            free(v);
        }
        drift_backend_free(be);
    }
    for (int i = 0; i < g_ncases; i++) free(base[i]);
}

static void test_threads_cpu(void **state) {
    (void)state;
    check_threads("cpu");
}

static void test_threads_ref(void **state) {
    (void)state;
    check_threads("ref");
}

/* Metric accumulation is a fixed-order fp64 pass: identical structs. */
static void test_metrics_repeat(void **state) {
    (void)state;
    const char *names[] = {"cpu", "ref"};
    for (int b = 0; b < 2; b++) {
        drift_backend *be;
        drift_err e;
        assert_int_equal(drift_backend_create(names[b], &be, &e), DRIFT_OK);
        const int64_t n = 100003;
        float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)n * sizeof(float));
        g_rng = 99;
        for (int64_t i = 0; i < n; i++) {
            x[i] = rng_val(-1, 1, DRIFT_BF16);
            y[i] = x[i] + rng_val(-1e-3f, 1e-3f, DRIFT_F32);
        }
        drift_tensor t = {.dtype = DRIFT_F32, .ndim = 1, .shape = {n}}, r = t;
        assert_int_equal(drift_backend_alloc(be, &t, &e), DRIFT_OK);
        assert_int_equal(drift_backend_alloc(be, &r, &e), DRIFT_OK);
        assert_int_equal(drift_backend_upload_f32(be, &t, x, &e), DRIFT_OK);
        assert_int_equal(drift_backend_upload_f32(be, &r, y, &e), DRIFT_OK);
        drift_metric_acc a, c;
        drift_metric_acc_init(&a);
        drift_metric_acc_init(&c);
        assert_int_equal(drift_backend_metrics(be, &t, &r, &a, &e), DRIFT_OK);
        assert_int_equal(drift_backend_metrics(be, &t, &r, &c, &e), DRIFT_OK);
        assert_memory_equal(&a, &c, sizeof a);
        assert_true(a.n_diff > n - 100); /* y = x + noise differs almost everywhere */
        free(x), free(y);
        drift_backend_release(be, &t);
        drift_backend_release(be, &r);
        drift_backend_free(be);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repeat_cpu),   cmocka_unit_test(test_repeat_ref), cmocka_unit_test(test_threads_cpu),
        cmocka_unit_test(test_threads_ref),  cmocka_unit_test(test_metrics_repeat),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
