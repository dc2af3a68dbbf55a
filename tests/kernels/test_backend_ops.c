/* Backend tests other than op parity (which is tests/parity, run by
 * tests/kernels/test_parity.c over every backend): the door's checks
 * (kernels/door.c: shape errors, numel against shape, ownership, dtypes,
 * aliases), backend specs, shape helpers, upload/download, metric
 * accumulation, and exactness tests of the cpu backend's rounding against
 * hand-rounded values (bit for bit: NMSE cannot see a rounding mode or a
 * missing second rounding). */
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

static drift_backend *g_ref, *g_cpu;

/* ------------------------------------------------------------------------ */
/* PRNG (splitmix64), never-zero values                                      */

static uint64_t g_rng;

static uint64_t rng_next(void) {
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rng_seed(uint64_t s) { g_rng = s * 0x2545f4914f6cdd1dull + 1; }

/* Uniform in [lo, hi), rounded to dt, never exactly zero. */
static float rng_val(float lo, float hi, drift_dtype dt) {
    for (;;) {
        double u = (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0);
        float v = drift_round_to((float)(lo + (hi - lo) * u), dt);
        if (v != 0.0f) return v;
    }
}

/* ------------------------------------------------------------------------ */
/* Tensors                                                                    */

static drift_tensor mk(drift_backend *be, drift_dtype dt, int nd, const int64_t *sh, const float *vals) {
    drift_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = nd;
    for (int i = 0; i < nd; i++) t.shape[i] = sh[i];
    drift_err e;
    drift_err_clear(&e);
    int rc = drift_backend_alloc(be, &t, &e);
    if (rc) fail_msg("alloc on %s: %s", drift_backend_name(be), e.msg);
    if (vals) {
        rc = drift_backend_upload_f32(be, &t, vals, &e);
        if (rc) fail_msg("upload on %s: %s", drift_backend_name(be), e.msg);
    }
    return t;
}

static void rel(drift_backend *be, drift_tensor *t) { drift_backend_release(be, t); }

static float *dl32(drift_backend *be, const drift_tensor *t) {
    float *v = malloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof(float));
    drift_err e;
    assert_non_null(v);
    assert_int_equal(drift_backend_download_f32(be, t, v, &e), 0);
    return v;
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}


/* ------------------------------------------------------------------------ */
/* Guard sentinels                                                            */

#define GUARD 16
#define F_SENT 0x7fa5a5a5u              /* a signalling-NaN payload no op produces */
#define D_SENT 0x7ff5a5a5a5a5a5a5ull

typedef struct guarded {
    void *orig, *buf;
    size_t esz;
    int64_t n;
} guarded;

static void fill_sent(void *p, size_t esz, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (esz == 4) {
            uint32_t s = F_SENT;
            memcpy((char *)p + i * 4, &s, 4);
        } else {
            uint64_t s = D_SENT;
            memcpy((char *)p + i * 8, &s, 8);
        }
    }
}

static int is_sent(const void *p, size_t esz, int64_t i) {
    if (esz == 4) {
        uint32_t s;
        memcpy(&s, (const char *)p + i * 4, 4);
        return s == F_SENT;
    }
    uint64_t s;
    memcpy(&s, (const char *)p + i * 8, 8);
    return s == D_SENT;
}

/* download_f64 into a guarded host buffer; returns a malloc'd copy. */
static double *dl64_guarded(drift_backend *be, const drift_tensor *t, const char *what) {
    int64_t n = t->numel;
    double *buf = malloc((size_t)(n + 2 * GUARD) * sizeof(double));
    assert_non_null(buf);
    fill_sent(buf, 8, n + 2 * GUARD);
    drift_err e;
    assert_int_equal(drift_backend_download_f64(be, t, buf + GUARD, &e), 0);
    for (int64_t i = 0; i < GUARD; i++)
        if (!is_sent(buf, 8, i) || !is_sent(buf, 8, GUARD + n + i))
            fail_msg("%s: download_f64 wrote outside [0, numel)", what);
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    memcpy(v, buf + GUARD, (size_t)n * sizeof(double));
    free(buf);
    return v;
}

#define SH(...) ((const int64_t[]){__VA_ARGS__})

/* ------------------------------------------------------------------------ */
/* Setup                                                                      */

static int setup(void **state) {
    (void)state;
    drift_err e;
    if (drift_backend_create("ref", &g_ref, &e) || drift_backend_create("cpu", &g_cpu, &e)) return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    drift_backend_free(g_ref);
    drift_backend_free(g_cpu);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Shape and usage errors return an error, never crash                        */

static void expect_run_error(drift_backend *be, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                             int code, const char *what) {
    drift_err e;
    drift_err_clear(&e);
    int rc = drift_backend_run(be, op, in, out, &e);
    if (rc != code) fail_msg("%s on %s: expected error %d, got %d (%s)", what, drift_backend_name(be), code, rc, e.msg);
    assert_int_equal(e.code, code);
    assert_true(e.msg[0] != '\0');
}

static void test_shape_errors(void **state) {
    (void)state;
    for (int b = 0; b < 2; b++) {
        drift_backend *be = b ? g_cpu : g_ref, *other = b ? g_ref : g_cpu;
        drift_err e;
        drift_tensor x = mk(be, DRIFT_F32, 2, SH(3, 4), NULL), w = mk(be, DRIFT_F32, 2, SH(5, 6), NULL);
        drift_tensor w1 = mk(be, DRIFT_F32, 1, SH(4), NULL), bias = mk(be, DRIFT_F32, 1, SH(7), NULL);
        drift_tensor y = mk(be, DRIFT_F32, 2, SH(3, 5), NULL), v5 = mk(be, DRIFT_F32, 1, SH(5), NULL);
        drift_tensor y34 = mk(be, DRIFT_F32, 2, SH(3, 4), NULL), ybf = mk(be, DRIFT_BF16, 2, SH(3, 4), NULL);
        drift_tensor xo = mk(other, DRIFT_F32, 2, SH(3, 4), NULL);
        drift_tensor q = mk(be, DRIFT_F32, 4, SH(1, 2, 3, 4), NULL), k5 = mk(be, DRIFT_F32, 4, SH(1, 2, 3, 5), NULL);
        drift_tensor x4 = mk(be, DRIFT_F32, 4, SH(1, 2, 3, 5), NULL), tab = mk(be, DRIFT_F32, 2, SH(2, 5), NULL);
        drift_tensor img = mk(be, DRIFT_F32, 5, SH(1, 2, 3, 4, 5), NULL), t2 = mk(be, DRIFT_F32, 2, SH(2, 1), NULL);
        drift_tensor xb = mk(be, DRIFT_BF16, 2, SH(3, 4), NULL);
        drift_op op;
        const drift_tensor *in[3];

        memset(&op, 0, sizeof op); /* LINEAR: K mismatch */
        op.kind = DRIFT_OP_LINEAR, op.compute = DRIFT_F32, op.out = DRIFT_F32, op.n_in = 2;
        in[0] = &x, in[1] = &w;
        expect_run_error(be, &op, in, &y, DRIFT_E_INPUT, "linear K mismatch");
        in[1] = &w1; /* weight 1-D */
        expect_run_error(be, &op, in, &y, DRIFT_E_INPUT, "linear 1-D weight");
        op.n_in = 1;
        expect_run_error(be, &op, in, &y, DRIFT_E_INPUT, "linear n_in 1");
        drift_tensor w54 = mk(be, DRIFT_F32, 2, SH(5, 4), NULL);
        op.n_in = 3, in[1] = &w54, in[2] = &bias; /* bias [7] for N = 5 */
        expect_run_error(be, &op, in, &y, DRIFT_E_INPUT, "linear bias size");
        op.n_in = 2;
        expect_run_error(be, &op, in, &y34, DRIFT_E_INPUT, "linear wrong out shape");
        op.out = DRIFT_BF16;
        expect_run_error(be, &op, in, &y, DRIFT_E_INPUT, "linear out dtype != op->out");
        op.out = DRIFT_F32;
        in[0] = &xo;
        expect_run_error(be, &op, in, &y, DRIFT_E_INPUT, "tensor of another backend");
        in[0] = NULL;
        expect_run_error(be, &op, in, &y, DRIFT_E_INPUT, "NULL input");
        drift_tensor unalloc = x;
        unalloc.data = NULL;
        in[0] = &unalloc;
        expect_run_error(be, &op, in, &y, DRIFT_E_INPUT, "unallocated input");
        in[0] = &x;
        assert_int_equal(drift_backend_run(be, &op, in, &y, &e), DRIFT_OK); /* the valid call works */
        rel(be, &w54);

        memset(&op, 0, sizeof op); /* ADD: not broadcastable */
        op.kind = DRIFT_OP_ADD, op.out = DRIFT_F32, op.n_in = 2;
        in[0] = &x, in[1] = &v5;
        expect_run_error(be, &op, in, &y34, DRIFT_E_INPUT, "add [3,4]+[5]");
        in[1] = &x; /* out aliasing an input */
        expect_run_error(be, &op, in, &x, DRIFT_E_INPUT, "add in place");

        memset(&op, 0, sizeof op);
        op.kind = (drift_op_kind)99, op.out = DRIFT_F32, op.n_in = 1;
        in[0] = &x;
        drift_err_clear(&e);
        assert_int_not_equal(drift_backend_run(be, &op, in, &y34, &e), DRIFT_OK);
        assert_int_equal(drift_backend_supports(be, &op), 0);

        memset(&op, 0, sizeof op); /* ROPE: odd Dh, then wrong table */
        op.kind = DRIFT_OP_ROPE, op.out = DRIFT_F32, op.n_in = 3;
        in[0] = &x4, in[1] = &tab, in[2] = &tab;
        drift_tensor yr = mk(be, DRIFT_F32, 4, SH(1, 2, 3, 5), NULL);
        expect_run_error(be, &op, in, &yr, DRIFT_E_INPUT, "rope odd Dh");
        rel(be, &yr);

        memset(&op, 0, sizeof op); /* ATTENTION: Dh mismatch */
        op.kind = DRIFT_OP_ATTENTION, op.compute = DRIFT_F32, op.out = DRIFT_F32, op.n_in = 3;
        in[0] = &q, in[1] = &k5, in[2] = &k5;
        drift_tensor ya = mk(be, DRIFT_F32, 4, SH(1, 2, 3, 5), NULL);
        expect_run_error(be, &op, in, &ya, DRIFT_E_INPUT, "attention Dh mismatch");
        rel(be, &ya);

        memset(&op, 0, sizeof op); /* PERMUTE: not a permutation */
        op.kind = DRIFT_OP_PERMUTE, op.out = DRIFT_F32, op.n_in = 1;
        op.perm[0] = 0, op.perm[1] = 0;
        in[0] = &x;
        expect_run_error(be, &op, in, &y34, DRIFT_E_INPUT, "permute dup");

        memset(&op, 0, sizeof op); /* NARROW: out of range, bad dim */
        op.kind = DRIFT_OP_NARROW, op.out = DRIFT_F32, op.n_in = 1, op.dim = 1, op.start = 2, op.length = 3;
        expect_run_error(be, &op, in, &y34, DRIFT_E_INPUT, "narrow past end");
        op.dim = 2, op.start = 0, op.length = 1;
        expect_run_error(be, &op, in, &y34, DRIFT_E_INPUT, "narrow bad dim");

        memset(&op, 0, sizeof op); /* CONCAT: dtype and shape mismatch */
        op.kind = DRIFT_OP_CONCAT, op.out = DRIFT_F32, op.n_in = 2, op.dim = 0;
        drift_tensor yc = mk(be, DRIFT_F32, 2, SH(6, 4), NULL);
        in[0] = &x, in[1] = &xb;
        expect_run_error(be, &op, in, &yc, DRIFT_E_INPUT, "concat dtype mismatch");
        in[1] = &w;
        expect_run_error(be, &op, in, &yc, DRIFT_E_INPUT, "concat shape mismatch");
        rel(be, &yc);

        memset(&op, 0, sizeof op); /* VIEW: numel differs */
        op.kind = DRIFT_OP_VIEW, op.out = DRIFT_F32, op.n_in = 1;
        in[0] = &x;
        expect_run_error(be, &op, in, &v5, DRIFT_E_INPUT, "view numel");

        memset(&op, 0, sizeof op); /* PATCHIFY: patch does not tile */
        op.kind = DRIFT_OP_PATCHIFY, op.out = DRIFT_F32, op.n_in = 1;
        op.patch[0] = 1, op.patch[1] = 2, op.patch[2] = 2;
        in[0] = &img;
        expect_run_error(be, &op, in, &y34, DRIFT_E_INPUT, "patchify W=5 by 2");
        op.patch[0] = 0;
        expect_run_error(be, &op, in, &y34, DRIFT_E_INPUT, "patchify zero patch");

        memset(&op, 0, sizeof op); /* UNPATCHIFY: wrong requested image */
        op.kind = DRIFT_OP_UNPATCHIFY, op.out = DRIFT_F32, op.n_in = 1;
        op.patch[0] = 1, op.patch[1] = 1, op.patch[2] = 1;
        in[0] = &q; /* 4-D tokens */
        expect_run_error(be, &op, in, &img, DRIFT_E_INPUT, "unpatchify 4-D tokens");

        memset(&op, 0, sizeof op); /* TIMESTEP: 2-D t, dim 0 */
        op.kind = DRIFT_OP_TIMESTEP_SINUSOID, op.out = DRIFT_F32, op.n_in = 1, op.dim = 4;
        in[0] = &t2;
        expect_run_error(be, &op, in, &y34, DRIFT_E_INPUT, "timestep 2-D t");
        in[0] = &v5;
        op.dim = 0;
        expect_run_error(be, &op, in, &y34, DRIFT_E_INPUT, "timestep dim 0");

        /* infer_shape on its own */
        int nd = 0;
        int64_t sh[DRIFT_MAX_DIMS] = {0};
        memset(&op, 0, sizeof op);
        op.kind = DRIFT_OP_MUL, op.out = DRIFT_F32, op.n_in = 2;
        in[0] = &x, in[1] = &v5;
        assert_int_equal(drift_op_infer_shape(&op, in, &nd, sh, &e), DRIFT_E_INPUT);
        assert_int_equal(drift_op_infer_shape(NULL, in, &nd, sh, &e), DRIFT_E_INTERNAL);

        /* dtype support */
        drift_tensor t64 = {.dtype = DRIFT_F64, .ndim = 1, .shape = {3}};
        drift_err_clear(&e);
        int rc = drift_backend_alloc(be, &t64, &e);
        assert_int_equal(rc, DRIFT_OK); /* both store fp64 (cpu: its fp64 path, cpu_f64.c) */
        rel(be, &t64);
        drift_tensor tbad = {.dtype = DRIFT_DTYPE_INVALID, .ndim = 1, .shape = {3}};
        assert_int_equal(drift_backend_alloc(be, &tbad, &e), DRIFT_E_UNSUPPORTED);
        memset(&op, 0, sizeof op);
        op.kind = DRIFT_OP_CAST, op.out = DRIFT_F64, op.n_in = 1;
        assert_int_equal(drift_backend_supports(be, &op), 1);
        op.out = DRIFT_DTYPE_INVALID;
        assert_int_equal(drift_backend_supports(be, &op), 0);
        if (b) {
            op.kind = DRIFT_OP_LINEAR, op.out = DRIFT_F32, op.compute = DRIFT_DTYPE_INVALID, op.n_in = 2;
            assert_int_equal(drift_backend_supports(be, &op), 0);
        }
        drift_tensor bad = {.dtype = DRIFT_F32, .ndim = 2, .shape = {-1, 3}};
        assert_int_equal(drift_backend_alloc(be, &bad, &e), DRIFT_E_INPUT);
        drift_tensor* all[] = {&x, &w, &w1, &bias, &y, &v5, &y34, &ybf, &q, &k5, &x4, &tab, &img, &t2, &xb};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) rel(be, all[i]);
        rel(other, &xo);
    }
}

static void test_shape_numel_and_names(void **state) {
    (void)state;
    assert_int_equal(drift_shape_numel(0, NULL), 1);
    assert_int_equal(drift_shape_numel(3, SH(2, 3, 7)), 42);
    assert_int_equal(drift_shape_numel(2, SH(0, 5)), 0);
    assert_int_equal(drift_shape_numel(2, SH(-1, 5)), -1);
    assert_int_equal(drift_shape_numel(9, SH(1, 1, 1, 1, 1, 1, 1, 1, 1)), -1);
    assert_int_equal(drift_shape_numel(2, SH((int64_t)1 << 30, (int64_t)1 << 18)), (int64_t)1 << 48); /* limit */
    assert_int_equal(drift_shape_numel(2, SH((int64_t)1 << 31, (int64_t)1 << 18)), -1);
    assert_int_equal(drift_shape_numel(3, SH((int64_t)1 << 40, (int64_t)1 << 40, 0)), -1); /* overflow checked first */
    assert_int_equal(drift_shape_numel(1, NULL), -1);
    for (int k = 0; k < DRIFT_OP_COUNT; k++) {
        const char *n = drift_op_name((drift_op_kind)k);
        assert_non_null(n);
        assert_string_not_equal(n, "invalid");
    }
    assert_string_equal(drift_op_name(DRIFT_OP_COUNT), "invalid");
    assert_string_equal(drift_op_name(DRIFT_OP_GELU_TANH), "gelu_tanh");
}

static void test_backend_create(void **state) {
    (void)state;
    drift_backend *be = NULL;
    drift_err e;
    assert_int_equal(drift_backend_create("ref", &be, &e), DRIFT_OK);
    assert_string_equal(drift_backend_name(be), "ref");
    drift_backend_free(be);
    assert_int_equal(drift_backend_create("cpu", &be, &e), DRIFT_OK);
    assert_string_equal(drift_backend_name(be), "cpu");
    drift_backend_free(be);
    drift_backend_free(NULL);
#ifndef DRIFT_HAVE_CUDA
    assert_int_equal(drift_backend_create("cuda", &be, &e), DRIFT_E_UNSUPPORTED);
    assert_null(be);
    assert_int_equal(drift_backend_create("cuda:1", &be, &e), DRIFT_E_UNSUPPORTED);
    assert_int_equal(drift_backend_create("ref-cuda:0", &be, &e), DRIFT_E_UNSUPPORTED); /* the fp64 oracle on a GPU */
    assert_non_null(strstr(e.msg, "without CUDA"));
    assert_null(be);
#endif
    assert_int_equal(drift_backend_create("ref-cuda:x", &be, &e), DRIFT_E_INPUT);
    assert_int_equal(drift_backend_create("cpu:1", &be, &e), DRIFT_E_INPUT);
    assert_non_null(strstr(e.msg, "only cuda and ref-cuda take a device number"));
    assert_int_equal(drift_backend_create("cuda:x", &be, &e), DRIFT_E_INPUT);
    assert_int_equal(drift_backend_create("gpu", &be, &e), DRIFT_E_INPUT);
    assert_int_equal(drift_backend_create("", &be, &e), DRIFT_E_INPUT);
    assert_int_equal(drift_backend_create(NULL, &be, &e), DRIFT_E_INPUT);
    assert_null(be);
    /* specs: options are checked at creation, each error names the option */
    assert_int_equal(drift_backend_create("cpu:threads=3", &be, &e), DRIFT_OK);
    assert_string_equal(drift_backend_name(be), "cpu");
    drift_backend_free(be);
    be = NULL;
    static const char *const bad[] = {"cpu:threads=0", "cpu:threads=x", "cpu:gemm=naive", "cpu:threads",
                                      "cpu:threads=2:threads=3", "ref:1", "cpu:=3", "ref:bogus=1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        drift_err_clear(&e);
        if (drift_backend_create(bad[i], &be, &e) != DRIFT_E_INPUT) fail_msg("spec '%s' accepted", bad[i]);
        assert_null(be);
        assert_non_null(strstr(e.msg, bad[i]));
    }
#ifndef DRIFT_HAVE_CUDA
    assert_int_equal(drift_backend_create("cuda:0:gemm=naive", &be, &e), DRIFT_E_UNSUPPORTED);
#endif
}

/* The door checks every call once, the same for every backend: a tensor
 * whose numel disagrees with its shape, one of another backend, a dtype the
 * backend does not store, a NULL host buffer, shapes that differ in
 * metrics, an alias that does not fit. */
static void test_door_checks(void **state) {
    (void)state;
    static const char *const specs[] = {"ref", "cpu"};
    drift_backend *be[2];
    drift_err e;
    for (int b = 0; b < 2; b++) assert_int_equal(drift_backend_create(specs[b], &be[b], &e), DRIFT_OK);
    for (int b = 0; b < 2; b++) {
        const int64_t sh[2] = {3, 4};
        drift_tensor x = mk(be[b], DRIFT_F32, 2, sh, NULL), y = mk(be[b], DRIFT_F32, 2, sh, NULL);
        drift_tensor other = mk(be[1 - b], DRIFT_F32, 2, sh, NULL);
        float host[12] = {0};
        const drift_tensor *in1[1] = {&x};
        drift_op op;
        memset(&op, 0, sizeof op);
        op.kind = DRIFT_OP_CAST;
        op.out = DRIFT_F32;
        op.compute = DRIFT_F32;
        op.n_in = 1;
        assert_int_equal(drift_backend_run(be[b], &op, in1, &y, &e), DRIFT_OK);
        x.numel = 11; /* disagrees with [3, 4] */
        expect_run_error(be[b], &op, in1, &y, DRIFT_E_INPUT, "input numel vs shape");
        drift_err_clear(&e);
        assert_int_equal(drift_backend_upload_f32(be[b], &x, host, &e), DRIFT_E_INPUT);
        assert_non_null(strstr(e.msg, "does not match its shape"));
        assert_int_equal(drift_backend_download_f32(be[b], &x, host, &e), DRIFT_E_INPUT);
        x.numel = 12;
        y.numel = 13;
        expect_run_error(be[b], &op, in1, &y, DRIFT_E_INPUT, "out numel vs shape");
        drift_metric_acc acc;
        drift_metric_acc_init(&acc);
        assert_int_equal(drift_backend_metrics(be[b], &x, &y, &acc, &e), DRIFT_E_INPUT);
        y.numel = 12;
        const drift_tensor *in_other[1] = {&other};
        expect_run_error(be[b], &op, in_other, &y, DRIFT_E_INPUT, "an input of another backend");
        assert_int_equal(drift_backend_upload_f32(be[b], &other, host, &e), DRIFT_E_INPUT);
        assert_int_equal(drift_backend_upload_f32(be[b], &x, NULL, &e), DRIFT_E_INPUT);
        op.n_in = 0;
        expect_run_error(be[b], &op, in1, &y, DRIFT_E_INPUT, "n_in 0");
        op.n_in = 1;
        drift_tensor v;
        memset(&v, 0, sizeof v);
        v.dtype = DRIFT_F32;
        v.ndim = 1;
        v.shape[0] = 5;
        assert_int_equal(drift_backend_alias(be[b], &x, 8, &v, &e), DRIFT_E_INPUT); /* 8 + 5 > 12 */
        assert_int_equal(drift_backend_alias(be[b], &x, 7, &v, &e), DRIFT_OK);
        assert_true(drift_backend_can_alias(be[b]));
        drift_tensor f64;
        memset(&f64, 0, sizeof f64);
        f64.dtype = DRIFT_F64;
        f64.ndim = 1;
        f64.shape[0] = 2;
        int rc = drift_backend_alloc(be[b], &f64, &e);
        assert_int_equal(rc, DRIFT_OK); /* ref and cpu store fp64 */
        drift_backend_release(be[b], &f64);
        f64.dtype = DRIFT_DTYPE_INVALID;
        assert_int_equal(drift_backend_alloc(be[b], &f64, &e), DRIFT_E_UNSUPPORTED);
        rel(be[b], &x);
        rel(be[b], &y);
        rel(be[1 - b], &other);
    }
    assert_int_equal(drift_backend_run(NULL, NULL, NULL, NULL, &e), DRIFT_E_INTERNAL);
    assert_int_equal(drift_backend_supports(NULL, NULL), 0);
    for (int b = 0; b < 2; b++) drift_backend_free(be[b]);
}

/* ------------------------------------------------------------------------ */
/* Exactness of the cpu backend against hand-rounded values                   */

/* Runs a 1- or 2-input op on cpu with explicit values; returns the output values. */
static float *cpu_op(const drift_op *op, drift_dtype d0, int nd0, const int64_t *s0, const float *v0, drift_dtype d1,
                     int nd1, const int64_t *s1, const float *v1, int *n_out) {
    drift_tensor a = mk(g_cpu, d0, nd0, s0, v0), b;
    const drift_tensor *in[2] = {&a, NULL};
    if (op->n_in > 1) {
        b = mk(g_cpu, d1, nd1, s1, v1);
        in[1] = &b;
    }
    int nd = 0;
    int64_t sh[DRIFT_MAX_DIMS];
    drift_err e;
    assert_int_equal(drift_op_infer_shape(op, in, &nd, sh, &e), DRIFT_OK);
    drift_tensor y = mk(g_cpu, op->out, nd, sh, NULL);
    if (drift_backend_run(g_cpu, op, in, &y, &e)) fail_msg("run: %s", e.msg);
    float *r = dl32(g_cpu, &y);
    *n_out = (int)y.numel;
    rel(g_cpu, &a);
    if (op->n_in > 1) rel(g_cpu, &b);
    rel(g_cpu, &y);
    return r;
}

static void expect_bits(const float *got, const float *want, int n, const char *what) {
    for (int i = 0; i < n; i++)
        if (fbits(got[i]) != fbits(want[i]) && !(isnan(got[i]) && isnan(want[i])))
            fail_msg("%s[%d]: got %.9g (0x%08x), want %.9g (0x%08x)", what, i, got[i], fbits(got[i]), want[i],
                     fbits(want[i]));
}

static void test_cast_exact(void **state) {
    (void)state;
    const float p8 = 0.00390625f; /* 2^-8 */
    const float src[] = {1.0f + p8, 1.0f + 3 * p8, 1.0f + p8 + 0x1p-20f, -(1.0f + p8), 3.4028235e38f,
                         65520.0f, 65519.0f, 1e-8f, 3e-8f, NAN, INFINITY, -INFINITY, 0x1p-130f};
    const int n = (int)(sizeof src / sizeof src[0]);
    /* bf16: ties to even, overflow of FLT_MAX to inf, subnormals kept */
    const float want_bf16[] = {1.0f, 1.0f + 4 * p8, 1.0f + 2 * p8, -1.0f, INFINITY, 65536.0f, 65536.0f,
                               drift_bf16_to_f32(drift_f32_to_bf16(1e-8f)), drift_bf16_to_f32(drift_f32_to_bf16(3e-8f)),
                               NAN, INFINITY, -INFINITY, 0x1p-130f};
    /* fp16: 65520 -> inf, 65519 -> 65504, 1e-8 underflows to 0, 3e-8 to the smallest subnormal 2^-24 */
    const float want_f16[] = {1.00390625f, 1.01171875f, 1.00390625f, -1.00390625f, INFINITY, INFINITY, 65504.0f,
                              0.0f, 0x1p-24f, NAN, INFINITY, -INFINITY, 0.0f};
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = DRIFT_OP_CAST, op.n_in = 1;
    int m;
    op.out = DRIFT_BF16;
    float *got = cpu_op(&op, DRIFT_F32, 1, SH(n), src, 0, 0, NULL, NULL, &m);
    assert_int_equal(m, n);
    expect_bits(got, want_bf16, n, "cast fp32->bf16");
    free(got);
    op.out = DRIFT_F16;
    got = cpu_op(&op, DRIFT_F32, 1, SH(n), src, 0, 0, NULL, NULL, &m);
    expect_bits(got, want_f16, n, "cast fp32->fp16");
    free(got);
    /* bf16 -> fp32 is exact */
    const float b[] = {1.0078125f, -3.0f, 0x1p-133f};
    op.out = DRIFT_F32;
    got = cpu_op(&op, DRIFT_BF16, 1, SH(3), b, 0, 0, NULL, NULL, &m);
    expect_bits(got, b, 3, "cast bf16->fp32");
    free(got);
}

static void test_add_mul_exact(void **state) {
    (void)state;
    const float p8 = 0.00390625f;
    drift_op op;
    memset(&op, 0, sizeof op);
    op.n_in = 2;
    int m;
    /* bf16 ADD: 1 + 2^-8 is a tie -> even (1); 1 + 3*2^-8 -> 1 + 2^-6; (1+2^-7) + 2^-8 tie -> 1 + 2^-6 */
    const float a[] = {1.0f, 1.0f, 1.0f + 2 * p8, 1.0f};
    const float b[] = {p8, 3 * p8, p8, 0x1p-20f};
    op.kind = DRIFT_OP_ADD, op.out = DRIFT_BF16;
    float *got = cpu_op(&op, DRIFT_BF16, 1, SH(4), a, DRIFT_F32, 1, SH(4), b, &m);
    const float w1[] = {1.0f, 1.015625f, 1.015625f, 1.0f};
    expect_bits(got, w1, 4, "bf16 add");
    free(got);
    /* fp32 out keeps the exact sum */
    op.out = DRIFT_F32;
    got = cpu_op(&op, DRIFT_BF16, 1, SH(4), a, DRIFT_F32, 1, SH(4), b, &m);
    const float w2[] = {1.00390625f, 1.01171875f, 1.01171875f, 1.0f + 0x1p-20f};
    expect_bits(got, w2, 4, "fp32 add");
    free(got);
    /* bf16 SUB: 1 - 2^-9 is a tie between 1 - 2^-8 (odd) and 1 (even) -> 1 */
    op.kind = DRIFT_OP_SUB, op.out = DRIFT_BF16;
    const float s1[] = {1.0f}, s2[] = {0x1p-9f}, w3[] = {1.0f};
    got = cpu_op(&op, DRIFT_BF16, 1, SH(1), s1, DRIFT_F32, 1, SH(1), s2, &m);
    expect_bits(got, w3, 1, "bf16 sub");
    free(got);
    /* MUL: bf16 (1+2^-7)^2 = 1 + 2^-6 + 2^-14 -> 1 + 2^-6; fp16 (1+2^-10)^2 -> 1 + 2^-9 */
    op.kind = DRIFT_OP_MUL, op.out = DRIFT_BF16;
    const float m1[] = {1.0078125f}, w4[] = {1.015625f};
    got = cpu_op(&op, DRIFT_BF16, 1, SH(1), m1, DRIFT_BF16, 1, SH(1), m1, &m);
    expect_bits(got, w4, 1, "bf16 mul");
    free(got);
    op.out = DRIFT_F16;
    const float m2[] = {1.0009765625f}, w5[] = {1.001953125f};
    got = cpu_op(&op, DRIFT_F16, 1, SH(1), m2, DRIFT_F16, 1, SH(1), m2, &m);
    expect_bits(got, w5, 1, "fp16 mul");
    free(got);
    /* broadcasting: [2, 3] * [3] and [2, 1] + [1, 3] */
    op.out = DRIFT_F32;
    const float x6[] = {1, 2, 3, 4, 5, 6}, r3[] = {10, 100, 1000};
    got = cpu_op(&op, DRIFT_F32, 2, SH(2, 3), x6, DRIFT_F32, 1, SH(3), r3, &m);
    const float w6[] = {10, 200, 3000, 40, 500, 6000};
    assert_int_equal(m, 6);
    expect_bits(got, w6, 6, "broadcast mul");
    free(got);
    op.kind = DRIFT_OP_ADD;
    const float c2[] = {1, 2};
    got = cpu_op(&op, DRIFT_F32, 2, SH(2, 1), c2, DRIFT_F32, 2, SH(1, 3), r3, &m);
    const float w7[] = {11, 101, 1001, 12, 102, 1002};
    assert_int_equal(m, 6);
    expect_bits(got, w7, 6, "two-sided broadcast add");
    free(got);
    /* AFFINE: t = x*alpha rounded to fp32, then + beta, then one bf16 rounding */
    memset(&op, 0, sizeof op);
    op.kind = DRIFT_OP_AFFINE, op.n_in = 1, op.out = DRIFT_BF16, op.alpha = 3.0f, op.beta = 0x1p-7f;
    const float ax[] = {1.0f / 3.0f};
    got = cpu_op(&op, DRIFT_F32, 1, SH(1), ax, 0, 0, NULL, NULL, &m);
    float t = ax[0] * 3.0f;
    t = t + 0x1p-7f;
    const float w8[] = {drift_round_to(t, DRIFT_BF16)};
    expect_bits(got, w8, 1, "affine");
    free(got);
    /* No FMA contraction (a build-flag canary): x = alpha = 1 + 2^-12, beta = -1.
     * x*alpha = 1 + 2^-11 + 2^-24 rounds (tie, even) to 1 + 2^-11, so y = 2^-11;
     * a contracted fma(x, alpha, beta) would give 2^-11 + 2^-24. */
    op.out = DRIFT_F32, op.alpha = 1.0f + 0x1p-12f, op.beta = -1.0f;
    const float fx[] = {1.0f + 0x1p-12f}, w9[] = {0x1p-11f};
    got = cpu_op(&op, DRIFT_F32, 1, SH(1), fx, 0, 0, NULL, NULL, &m);
    expect_bits(got, w9, 1, "affine without contraction");
    free(got);
}

/* Fused bias rounds once; linear then ADD rounds twice; they differ here:
 * x = [1, 1], W = [[1, 2^-8]], b = [2^-8] in bf16.
 * fused:   round(1 + 2^-8 + 2^-8) = 1 + 2^-7 = 1.0078125
 * unfused: round(round(1 + 2^-8) + 2^-8) = round(1 + 2^-8) = 1 (ties to even) */
static void test_linear_fused_bias(void **state) {
    (void)state;
    const float x[] = {1.0f, 1.0f}, w[] = {1.0f, 0x1p-8f}, bv[] = {0x1p-8f};
    drift_tensor tx = mk(g_cpu, DRIFT_BF16, 2, SH(1, 2), x), tw = mk(g_cpu, DRIFT_BF16, 2, SH(1, 2), w);
    drift_tensor tb = mk(g_cpu, DRIFT_BF16, 1, SH(1), bv);
    drift_tensor fused = mk(g_cpu, DRIFT_BF16, 2, SH(1, 1), NULL), lin = mk(g_cpu, DRIFT_BF16, 2, SH(1, 1), NULL);
    drift_tensor unfused = mk(g_cpu, DRIFT_BF16, 2, SH(1, 1), NULL);
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = DRIFT_OP_LINEAR, op.compute = DRIFT_BF16, op.out = DRIFT_BF16, op.n_in = 3;
    const drift_tensor *in[3] = {&tx, &tw, &tb};
    drift_err e;
    assert_int_equal(drift_backend_run(g_cpu, &op, in, &fused, &e), DRIFT_OK);
    op.n_in = 2;
    assert_int_equal(drift_backend_run(g_cpu, &op, in, &lin, &e), DRIFT_OK);
    drift_op add;
    memset(&add, 0, sizeof add);
    add.kind = DRIFT_OP_ADD, add.out = DRIFT_BF16, add.n_in = 2;
    const drift_tensor *ain[2] = {&lin, &tb};
    assert_int_equal(drift_backend_run(g_cpu, &add, ain, &unfused, &e), DRIFT_OK);
    float *f = dl32(g_cpu, &fused), *u = dl32(g_cpu, &unfused), *l = dl32(g_cpu, &lin);
    assert_true(f[0] == 1.0078125f);
    assert_true(l[0] == 1.0f);
    assert_true(u[0] == 1.0f);
    assert_true(f[0] != u[0]);
    /* the oracle (fp64, no rounding) sees 1 + 2^-7 either way */
    free(f), free(u), free(l);
    drift_tensor *all[] = {&tx, &tw, &tb, &fused, &lin, &unfused};
    for (int i = 0; i < 6; i++) rel(g_cpu, all[i]);
}

static float *norm_run(drift_op_kind k, float eps, drift_dtype xdt, drift_dtype odt, int rows, int D, const float *x,
                       const float *w, const float *b) {
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = k, op.eps = eps, op.out = odt, op.n_in = 1 + (w != NULL) + (b != NULL);
    drift_tensor tx = mk(g_cpu, xdt, 2, SH(rows, D), x), tw, tb;
    const drift_tensor *in[3] = {&tx, NULL, NULL};
    if (w) tw = mk(g_cpu, DRIFT_F32, 1, SH(D), w), in[1] = &tw;
    if (b) tb = mk(g_cpu, DRIFT_F32, 1, SH(D), b), in[2] = &tb;
    drift_tensor y = mk(g_cpu, odt, 2, SH(rows, D), NULL);
    drift_err e;
    if (drift_backend_run(g_cpu, &op, in, &y, &e)) fail_msg("%s", e.msg);
    float *r = dl32(g_cpu, &y);
    rel(g_cpu, &tx), rel(g_cpu, &y);
    if (w) rel(g_cpu, &tw);
    if (b) rel(g_cpu, &tb);
    return r;
}

static void test_norms_hand(void **state) {
    (void)state;
    /* layer_norm: x = [0, 2, 0, 2]: mean 1, var 1, rstd 1 -> [-1, 1, -1, 1] */
    const float x1[] = {0, 2, 0, 2}, w1[] = {1, 2, 3, 4}, b1[] = {0.5f, 0.5f, 0.5f, 0.5f};
    float *y = norm_run(DRIFT_OP_LAYER_NORM, 0.0f, DRIFT_F32, DRIFT_F32, 1, 4, x1, NULL, NULL);
    const float e1[] = {-1, 1, -1, 1};
    expect_bits(y, e1, 4, "layer_norm plain");
    free(y);
    y = norm_run(DRIFT_OP_LAYER_NORM, 0.0f, DRIFT_F32, DRIFT_F32, 1, 4, x1, w1, b1);
    const float e2[] = {-0.5f, 2.5f, -2.5f, 4.5f};
    expect_bits(y, e2, 4, "layer_norm affine");
    free(y);
    /* x = [1, 3]: mean 2, var 1, eps 3 -> rstd 1/2 -> [-0.5, 0.5]; two rows */
    const float x2[] = {1, 3, 10, 14}, e3[] = {-0.5f, 0.5f, -2.0f / sqrtf(7.0f), 2.0f / sqrtf(7.0f)};
    y = norm_run(DRIFT_OP_LAYER_NORM, 3.0f, DRIFT_F32, DRIFT_F32, 2, 2, x2, NULL, NULL);
    assert_true(y[0] == e3[0] && y[1] == e3[1]);
    assert_true(fabsf(y[2] - e3[2]) < 1e-6f && fabsf(y[3] - e3[3]) < 1e-6f);
    free(y);
    /* rms_norm: x = [2, -2, 2, -2]: ms 4, r 1/2 -> [1, -1, 1, -1] * w */
    const float x3[] = {2, -2, 2, -2}, w3[] = {1, 2, 0.5f, 3}, e4[] = {1, -2, 0.5f, -3};
    y = norm_run(DRIFT_OP_RMS_NORM, 0.0f, DRIFT_F32, DRIFT_F32, 1, 4, x3, w3, NULL);
    expect_bits(y, e4, 4, "rms_norm");
    free(y);
    const float x4[] = {1, 1, 1, 1}, e5[] = {0.5f, 0.5f, 0.5f, 0.5f}; /* ms 1 + eps 3 -> r 1/2 */
    y = norm_run(DRIFT_OP_RMS_NORM, 3.0f, DRIFT_F32, DRIFT_F32, 1, 4, x4, NULL, NULL);
    expect_bits(y, e5, 4, "rms_norm eps");
    free(y);
    /* rms_norm in bf16 as torch 2.11: y = round_bf16((x * r) * w), one rounding.
     * Check against the formula written out, and that rounding x * r first
     * (the order of older torch composites) would give other bits. */
    enum { R = 64, D = 8 };
    float xs[R * D], ws[D];
    rng_seed(777);
    for (int i = 0; i < R * D; i++) xs[i] = rng_val(-3, 3, DRIFT_BF16);
    for (int i = 0; i < D; i++) ws[i] = rng_val(0.5f, 3.0f, DRIFT_F32);
    y = norm_run(DRIFT_OP_RMS_NORM, 1e-5f, DRIFT_BF16, DRIFT_BF16, R, D, xs, ws, NULL);
    int differs = 0;
    for (int r = 0; r < R; r++) {
        float ss = 0.0f;
        for (int i = 0; i < D; i++) ss += xs[r * D + i] * xs[r * D + i];
        float rr = 1.0f / sqrtf(ss / (float)D + 1e-5f);
        for (int i = 0; i < D; i++) {
            float t = xs[r * D + i] * rr;
            float want = drift_round_to(t * ws[i], DRIFT_BF16);
            float twice = drift_round_to(drift_round_to(t, DRIFT_BF16) * ws[i], DRIFT_BF16);
            if (fbits(y[r * D + i]) != fbits(want)) fail_msg("rms_norm bf16 [%d,%d]: %g vs %g", r, i, y[r * D + i], want);
            differs += twice != want;
        }
    }
    print_message("  rms_norm bf16: %d of %d elements differ from a rms_norm that rounds x * r first\n", differs, R * D);
    assert_true(differs > 0);
    free(y);
}

/* Attention on a tiny case: with bf16 operands and Lk = 2 every sum has at
 * most two terms, so the documented formula evaluated here in fp32 must
 * match bit for bit; it also stays within bf16 precision of the exact value. */
static void test_attention_tiny(void **state) {
    (void)state;
    const float q[] = {1.0f, 2.0f, -0.5f}; /* Lq = 3, Dh = 1 */
    const float k[] = {0.5f, -1.0f};       /* Lk = 2 */
    const float v[] = {1.0f, 2.0f, 3.0f, -1.0f}; /* Dv = 2 */
    const float scale = 0.75f;
    drift_tensor tq = mk(g_cpu, DRIFT_BF16, 4, SH(1, 1, 3, 1), q), tk = mk(g_cpu, DRIFT_BF16, 4, SH(1, 1, 2, 1), k);
    drift_tensor tv = mk(g_cpu, DRIFT_BF16, 4, SH(1, 1, 2, 2), v), to = mk(g_cpu, DRIFT_BF16, 4, SH(1, 1, 3, 2), NULL);
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = DRIFT_OP_ATTENTION, op.compute = DRIFT_BF16, op.out = DRIFT_BF16, op.n_in = 3, op.scale = scale;
    const drift_tensor *in[3] = {&tq, &tk, &tv};
    drift_err e;
    assert_int_equal(drift_backend_run(g_cpu, &op, in, &to, &e), DRIFT_OK);
    float *o = dl32(g_cpu, &to);
    for (int i = 0; i < 3; i++) {
        float s0 = q[i] * k[0] * scale, s1 = q[i] * k[1] * scale;
        float m = s0 > s1 ? s0 : s1;
        float p0 = expf(s0 - m), p1 = expf(s1 - m);
        float l = p0 + p1;
        p0 = drift_round_to(p0, DRIFT_BF16), p1 = drift_round_to(p1, DRIFT_BF16);
        double d0 = exp((double)q[i] * k[0] * scale), d1 = exp((double)q[i] * k[1] * scale);
        for (int d = 0; d < 2; d++) {
            float want = drift_round_to((p0 * v[d] + p1 * v[2 + d]) / l, DRIFT_BF16);
            if (fbits(o[i * 2 + d]) != fbits(want)) fail_msg("attention [%d,%d]: %g vs %g", i, d, o[i * 2 + d], want);
            double exact = (d0 * v[d] + d1 * v[2 + d]) / (d0 + d1);
            assert_true(fabs(o[i * 2 + d] - exact) <= 2.0 * 0.0078125 * fabs(exact) + 1e-6);
        }
    }
    free(o);
    rel(g_cpu, &tq), rel(g_cpu, &tk), rel(g_cpu, &tv), rel(g_cpu, &to);
}

static void test_timestep_hand(void **state) {
    (void)state;
    const float t[] = {0.0f, 1.0f};
    for (int flip = 0; flip < 2; flip++) {
        drift_op op;
        memset(&op, 0, sizeof op);
        op.kind = DRIFT_OP_TIMESTEP_SINUSOID, op.out = DRIFT_F32, op.n_in = 1, op.dim = 5;
        op.max_period = 10000.0f, op.flip_sin_to_cos = flip;
        int m;
        float *y = cpu_op(&op, DRIFT_F32, 1, SH(2), t, 0, 0, NULL, NULL, &m);
        assert_int_equal(m, 10);
        /* half = 2: freq = [1, exp(-ln(10000)/2) = 0.01]; t = 0 -> sin 0, cos 1; odd dim -> zero pad */
        const double s1 = 0.8414709848078965, s001 = 0.009999833334166664, c1 = 0.5403023058681398,
                     c001 = 0.9999500004166653;
        const double sinp[2][2] = {{0, 0}, {s1, s001}}, cosp[2][2] = {{1, 1}, {c1, c001}};
        for (int b = 0; b < 2; b++) {
            const float *r = y + b * 5;
            const double *first = flip ? cosp[b] : sinp[b], *second = flip ? sinp[b] : cosp[b];
            for (int j = 0; j < 2; j++) {
                assert_true(fabs(r[j] - first[j]) < 1e-6);
                assert_true(fabs(r[2 + j] - second[j]) < 1e-6);
            }
            assert_true(r[4] == 0.0f);
        }
        assert_true(y[flip ? 0 : 2] == 1.0f); /* cos(0) exactly */
        free(y);
    }
}

/* Patchify feature order (c, pf, ph, pw) by hand; C = 1 round trip exact;
 * C = 3 round trip through the documented feature-order change
 * (c, p) -> (p, c) done with VIEW + PERMUTE + VIEW. */
static void test_patchify_roundtrip(void **state) {
    (void)state;
    const int64_t B = 2, C = 3, F = 2, H = 4, W = 6;
    const int pf = 1, ph = 2, pw = 3;
    const int64_t n = B * C * F * H * W, L = (F / pf) * (H / ph) * (W / pw), P = (int64_t)pf * ph * pw;
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = (float)(i + 1);
    for (int b = 0; b < 2; b++) {
        drift_backend *be = b ? g_cpu : g_ref;
        drift_err e;
        drift_tensor tx = mk(be, DRIFT_F32, 5, SH(B, C, F, H, W), x);
        drift_op op;
        memset(&op, 0, sizeof op);
        op.kind = DRIFT_OP_PATCHIFY, op.out = DRIFT_F32, op.n_in = 1, op.patch[0] = pf, op.patch[1] = ph, op.patch[2] = pw;
        const drift_tensor *in[1] = {&tx};
        drift_tensor tok = mk(be, DRIFT_F32, 3, SH(B, L, C * P), NULL);
        assert_int_equal(drift_backend_run(be, &op, in, &tok, &e), DRIFT_OK);
        float *tv = dl32(be, &tok);
        for (int64_t bb = 0; bb < B; bb++)
            for (int64_t t = 0; t < L; t++) {
                int64_t f0 = (t / ((H / ph) * (W / pw))) * pf, h0 = ((t / (W / pw)) % (H / ph)) * ph, w0 = (t % (W / pw)) * pw;
                for (int64_t c = 0; c < C; c++)
                    for (int i = 0; i < pf; i++)
                        for (int j = 0; j < ph; j++)
                            for (int k = 0; k < pw; k++) {
                                float want = x[(((bb * C + c) * F + f0 + i) * H + h0 + j) * W + w0 + k];
                                float got = tv[(bb * L + t) * C * P + ((c * pf + i) * ph + j) * pw + k];
                                if (got != want) fail_msg("patchify order at b%lld t%lld c%lld", (long long)bb, (long long)t, (long long)c);
                            }
            }
        free(tv);
        /* (c, p) -> (p, c): view [B, L, C, P], permute (0, 1, 3, 2), view [B, L, P*C] */
        drift_tensor v4 = mk(be, DRIFT_F32, 4, SH(B, L, C, P), NULL), p4 = mk(be, DRIFT_F32, 4, SH(B, L, P, C), NULL);
        drift_tensor v3 = mk(be, DRIFT_F32, 3, SH(B, L, P * C), NULL), back = mk(be, DRIFT_F32, 5, SH(B, C, F, H, W), NULL);
        drift_op vop;
        memset(&vop, 0, sizeof vop);
        vop.kind = DRIFT_OP_VIEW, vop.out = DRIFT_F32, vop.n_in = 1;
        in[0] = &tok;
        assert_int_equal(drift_backend_run(be, &vop, in, &v4, &e), DRIFT_OK);
        drift_op pop = vop;
        pop.kind = DRIFT_OP_PERMUTE, pop.perm[0] = 0, pop.perm[1] = 1, pop.perm[2] = 3, pop.perm[3] = 2;
        in[0] = &v4;
        assert_int_equal(drift_backend_run(be, &pop, in, &p4, &e), DRIFT_OK);
        in[0] = &p4;
        assert_int_equal(drift_backend_run(be, &vop, in, &v3, &e), DRIFT_OK);
        op.kind = DRIFT_OP_UNPATCHIFY;
        in[0] = &v3;
        if (drift_backend_run(be, &op, in, &back, &e)) fail_msg("unpatchify: %s", e.msg);
        float *bv = dl32(be, &back);
        assert_memory_equal(bv, x, (size_t)n * sizeof(float));
        free(bv);
        /* C = 1: the two feature orders coincide; unpatchify(patchify(x)) == x directly */
        drift_tensor x1 = mk(be, DRIFT_F32, 5, SH(1, 1, 4, 4, 6), x), t1 = mk(be, DRIFT_F32, 3, SH(1, 8, 12), NULL);
        drift_tensor b1 = mk(be, DRIFT_F32, 5, SH(1, 1, 4, 4, 6), NULL);
        op.kind = DRIFT_OP_PATCHIFY, op.patch[0] = 2, op.patch[1] = 2, op.patch[2] = 3;
        in[0] = &x1;
        assert_int_equal(drift_backend_run(be, &op, in, &t1, &e), DRIFT_OK);
        op.kind = DRIFT_OP_UNPATCHIFY;
        in[0] = &t1;
        assert_int_equal(drift_backend_run(be, &op, in, &b1, &e), DRIFT_OK);
        bv = dl32(be, &b1);
        assert_memory_equal(bv, x, 96 * sizeof(float));
        free(bv);
        drift_tensor *all[] = {&tx, &tok, &v4, &p4, &v3, &back, &x1, &t1, &b1};
        for (int i = 0; i < 9; i++) rel(be, all[i]);
    }
    free(x);
}

/* PATCHIFY layout 1 (channels-last features (pf, ph, pw, c)) on ref and cpu, fp32 and fp64
 * (cpu runs fp64 with the oracle's body): x[c, 0, h, w] = 100c + 10h + w over C = 2, F = 1,
 * H = 2, W = 4, patch (1, 2, 2): two tokens, each (h, w) pair's two channels adjacent. */
static void test_patchify_channels_last(void **state) {
    (void)state;
    const float x[16] = {0, 1, 2, 3, 10, 11, 12, 13, 100, 101, 102, 103, 110, 111, 112, 113};
    /* token 0 = w 0..1, token 1 = w 2..3; features (j, k, c) */
    const float want[16] = {0, 100, 1, 101, 10, 110, 11, 111, 2, 102, 3, 103, 12, 112, 13, 113};
    for (int b = 0; b < 4; b++) {
        drift_backend *be = b % 2 ? g_cpu : g_ref;
        const drift_dtype dt = b < 2 ? DRIFT_F32 : DRIFT_F64;
        drift_err e;
        drift_tensor tx = mk(be, dt, 5, SH(1, 2, 1, 2, 4), x), tok = mk(be, dt, 3, SH(1, 2, 8), NULL);
        drift_op op;
        memset(&op, 0, sizeof op);
        op.kind = DRIFT_OP_PATCHIFY, op.out = op.compute = dt, op.n_in = 1, op.layout = 1;
        op.patch[0] = 1, op.patch[1] = 2, op.patch[2] = 2;
        const drift_tensor *in[1] = {&tx};
        if (drift_backend_run(be, &op, in, &tok, &e)) fail_msg("%s: %s", drift_backend_name(be), e.msg);
        float *y = dl32(be, &tok);
        for (int i = 0; i < 16; i++)
            if (y[i] != want[i])
                fail_msg("%s %s patchify layout 1 [%d]: %g, want %g", drift_backend_name(be), drift_dtype_name(dt), i,
                         y[i], want[i]);
        /* layout 0 keeps the Conv3d weight order (c, ph, pw) */
        op.layout = 0;
        assert_int_equal(drift_backend_run(be, &op, in, &tok, &e), DRIFT_OK);
        free(y);
        y = dl32(be, &tok);
        const float want0[16] = {0, 1, 10, 11, 100, 101, 110, 111, 2, 3, 12, 13, 102, 103, 112, 113};
        assert_memory_equal(y, want0, sizeof want0);
        free(y);
        op.layout = 2;
        assert_int_equal(drift_backend_run(be, &op, in, &tok, &e), DRIFT_E_INPUT);
        assert_non_null(strstr(e.msg, "layout"));
        rel(be, &tx);
        rel(be, &tok);
    }
    /* a wider case against the definition: out[b, t, ((i*ph + j)*pw + k)*C + c] = x[b, c, f'pf+i, ...] */
    const int64_t B = 2, C = 3, F = 4, H = 4, W = 6;
    const int pf = 2, ph = 2, pw = 3;
    const int64_t n = B * C * F * H * W, Fp = F / pf, Hp = H / ph, Wp = W / pw, L = Fp * Hp * Wp, P = C * pf * ph * pw;
    float *xv = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) xv[i] = (float)(i + 1);
    for (int b = 0; b < 2; b++) {
        drift_backend *be = b ? g_cpu : g_ref;
        drift_err e;
        drift_tensor tx = mk(be, DRIFT_F32, 5, SH(B, C, F, H, W), xv), tok = mk(be, DRIFT_F32, 3, SH(B, L, P), NULL);
        drift_op op;
        memset(&op, 0, sizeof op);
        op.kind = DRIFT_OP_PATCHIFY, op.out = op.compute = DRIFT_F32, op.n_in = 1, op.layout = 1;
        op.patch[0] = pf, op.patch[1] = ph, op.patch[2] = pw;
        const drift_tensor *in[1] = {&tx};
        assert_int_equal(drift_backend_run(be, &op, in, &tok, &e), DRIFT_OK);
        float *y = dl32(be, &tok);
        for (int64_t bb = 0; bb < B; bb++)
            for (int64_t f = 0; f < Fp; f++)
                for (int64_t h = 0; h < Hp; h++)
                    for (int64_t w = 0; w < Wp; w++)
                        for (int64_t c = 0; c < C; c++)
                            for (int i = 0; i < pf; i++)
                                for (int j = 0; j < ph; j++)
                                    for (int k = 0; k < pw; k++) {
                                        const int64_t t = (f * Hp + h) * Wp + w;
                                        const float wv = xv[(((bb * C + c) * F + f * pf + i) * H + h * ph + j) * W + w * pw + k];
                                        const float got = y[(bb * L + t) * P + ((i * ph + j) * pw + k) * C + c];
                                        if (got != wv) fail_msg("%s: b%lld t%lld c%lld", drift_backend_name(be),
                                                                (long long)bb, (long long)t, (long long)c);
                                    }
        free(y);
        rel(be, &tx);
        rel(be, &tok);
    }
    free(xv);
}

static void test_movement_exact(void **state) {
    (void)state;
    float x[2 * 3 * 4];
    for (int i = 0; i < 24; i++) x[i] = (float)i * 1.25f - 7.0f;
    for (int b = 0; b < 2; b++) {
        drift_backend *be = b ? g_cpu : g_ref;
        drift_err e;
        drift_tensor tx = mk(be, DRIFT_F32, 3, SH(2, 3, 4), x);
        const drift_tensor *in[2] = {&tx, NULL};
        drift_op op;
        /* permute (2, 0, 1): out[k, i, j] = x[i, j, k] */
        memset(&op, 0, sizeof op);
        op.kind = DRIFT_OP_PERMUTE, op.out = DRIFT_F32, op.n_in = 1, op.perm[0] = 2, op.perm[1] = 0, op.perm[2] = 1;
        drift_tensor tp = mk(be, DRIFT_F32, 3, SH(4, 2, 3), NULL);
        assert_int_equal(drift_backend_run(be, &op, in, &tp, &e), DRIFT_OK);
        float *y = dl32(be, &tp);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 3; j++)
                for (int k = 0; k < 4; k++) assert_true(y[(k * 2 + i) * 3 + j] == x[(i * 3 + j) * 4 + k]);
        free(y);
        /* narrow dim 1 [1, 3): out[i, j', k] = x[i, 1 + j', k] */
        memset(&op, 0, sizeof op);
        op.kind = DRIFT_OP_NARROW, op.out = DRIFT_F32, op.n_in = 1, op.dim = 1, op.start = 1, op.length = 2;
        drift_tensor tn = mk(be, DRIFT_F32, 3, SH(2, 2, 4), NULL);
        assert_int_equal(drift_backend_run(be, &op, in, &tn, &e), DRIFT_OK);
        y = dl32(be, &tn);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++)
                for (int k = 0; k < 4; k++) assert_true(y[(i * 2 + j) * 4 + k] == x[(i * 3 + 1 + j) * 4 + k]);
        free(y);
        /* concat along dim 2: [2, 3, 4] ++ narrow result viewed... use x ++ x along dim 0 and dim 2 */
        memset(&op, 0, sizeof op);
        op.kind = DRIFT_OP_CONCAT, op.out = DRIFT_F32, op.n_in = 2, op.dim = 2;
        in[1] = &tx;
        drift_tensor tc = mk(be, DRIFT_F32, 3, SH(2, 3, 8), NULL);
        assert_int_equal(drift_backend_run(be, &op, in, &tc, &e), DRIFT_OK);
        y = dl32(be, &tc);
        for (int r = 0; r < 6; r++)
            for (int k = 0; k < 8; k++) assert_true(y[r * 8 + k] == x[r * 4 + (k % 4)]);
        free(y);
        /* view [2, 3, 4] -> [6, 4]: same values in the same order */
        memset(&op, 0, sizeof op);
        op.kind = DRIFT_OP_VIEW, op.out = DRIFT_F32, op.n_in = 1;
        drift_tensor tv = mk(be, DRIFT_F32, 2, SH(6, 4), NULL);
        assert_int_equal(drift_backend_run(be, &op, in, &tv, &e), DRIFT_OK);
        y = dl32(be, &tv);
        assert_memory_equal(y, x, sizeof x);
        free(y);
        /* movement into a narrower dtype rounds once (cpu); the oracle never rounds */
        memset(&op, 0, sizeof op);
        op.kind = DRIFT_OP_VIEW, op.out = DRIFT_BF16, op.n_in = 1;
        const float odd[] = {1.00390625f};
        drift_tensor to = mk(be, DRIFT_F32, 1, SH(1), odd), tob = mk(be, DRIFT_BF16, 1, SH(1), NULL);
        in[0] = &to;
        assert_int_equal(drift_backend_run(be, &op, in, &tob, &e), DRIFT_OK);
        y = dl32(be, &tob);
        assert_true(y[0] == (b ? 1.0f : 1.00390625f));
        free(y);
        drift_tensor *all[] = {&tx, &tp, &tn, &tc, &tv, &to, &tob};
        for (int i = 0; i < 7; i++) rel(be, all[i]);
    }
}

/* Upload rounds on cpu (via fp32 for fp64 input), widens on ref; downloads
 * write exactly numel elements. */
static void test_upload_download(void **state) {
    (void)state;
    drift_err e;
    const float v[] = {1.00390625f, 1.01171875f, -2.0f};
    drift_tensor c = mk(g_cpu, DRIFT_BF16, 1, SH(3), v), r = mk(g_ref, DRIFT_BF16, 1, SH(3), v);
    float *cv = dl32(g_cpu, &c), *rv = dl32(g_ref, &r);
    assert_true(cv[0] == 1.0f && cv[1] == 1.015625f && cv[2] == -2.0f);
    assert_true(rv[0] == 1.00390625f && rv[1] == 1.01171875f);
    free(cv), free(rv);
    /* fp64 1 + 2^-8 + 2^-30: fp32 first (-> 1 + 2^-8), then bf16 tie -> 1 (a direct
     * fp64 -> bf16 rounding would give 1 + 2^-7) */
    const double d[] = {1.0 + 0x1p-8 + 0x1p-30, 0.1, 3.0};
    assert_int_equal(drift_backend_upload_f64(g_cpu, &c, d, &e), DRIFT_OK);
    assert_int_equal(drift_backend_upload_f64(g_ref, &r, d, &e), DRIFT_OK);
    double *cd = dl64_guarded(g_cpu, &c, "cpu download"), *rd = dl64_guarded(g_ref, &r, "ref download");
    assert_true(cd[0] == 1.0);
    assert_true(cd[1] == (double)drift_round_to(0.1f, DRIFT_BF16));
    assert_true(rd[0] == d[0] && rd[1] == 0.1);
    free(cd), free(rd);
    /* download_f32 guard */
    float buf[3 + 2 * GUARD];
    fill_sent(buf, 4, 3 + 2 * GUARD);
    assert_int_equal(drift_backend_download_f32(g_cpu, &c, buf + GUARD, &e), DRIFT_OK);
    for (int i = 0; i < GUARD; i++) assert_true(is_sent(buf, 4, i) && is_sent(buf, 4, GUARD + 3 + i));
    assert_int_equal(drift_backend_sync(g_cpu, &e), DRIFT_OK);
    assert_int_equal(drift_backend_sync(g_ref, &e), DRIFT_OK);
    /* transfers of a tensor of the other backend are refused */
    assert_int_equal(drift_backend_download_f32(g_cpu, &r, buf, &e), DRIFT_E_INPUT);
    rel(g_cpu, &c), rel(g_ref, &r);
    drift_backend_release(g_cpu, NULL);
    drift_backend_release(g_cpu, &c); /* already released: data NULL */
}

/* fp64 tensors on the cpu backend: stored as doubles (a value off the fp32
 * grid survives the round trip), aliased at an element offset of 8 bytes,
 * cast to fp32 and to bf16 through fp32 (the fp64 -> bf16 double rounding of
 * test_upload_download, as torch's c10::BFloat16(float)), and metrics of an
 * fp64 pair narrowed to fp32. */
static void test_cpu_f64(void **state) {
    (void)state;
    drift_err e;
    const double d[] = {1.0 + 0x1p-40, 1.0 + 0x1p-8 + 0x1p-30, -3.0 - 0x1p-35, 0.1};
    drift_tensor x = {.dtype = DRIFT_F64, .ndim = 1, .shape = {4}};
    assert_int_equal(drift_backend_alloc(g_cpu, &x, &e), DRIFT_OK);
    assert_int_equal(drift_backend_upload_f64(g_cpu, &x, d, &e), DRIFT_OK);
    double back[4];
    assert_int_equal(drift_backend_download_f64(g_cpu, &x, back, &e), DRIFT_OK);
    assert_memory_equal(back, d, sizeof d);
    drift_tensor v = {.dtype = DRIFT_F64, .ndim = 1, .shape = {2}};
    assert_int_equal(drift_backend_alias(g_cpu, &x, 1, &v, &e), DRIFT_OK);
    assert_int_equal(drift_backend_download_f64(g_cpu, &v, back, &e), DRIFT_OK);
    assert_true(back[0] == d[1] && back[1] == d[2]);
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = DRIFT_OP_CAST, op.n_in = 1, op.compute = DRIFT_F32;
    const drift_tensor *in[1] = {&x};
    const drift_dtype to[2] = {DRIFT_F32, DRIFT_BF16};
    const float want[2][4] = {{1.0f, 1.00390625f, -3.0f, 0.1f}, {1.0f, 1.0f, -3.0f, 0.10009765625f}};
    for (int k = 0; k < 2; k++) {
        drift_tensor y = {.dtype = to[k], .ndim = 1, .shape = {4}};
        op.out = to[k];
        assert_int_equal(drift_backend_alloc(g_cpu, &y, &e), DRIFT_OK);
        assert_int_equal(drift_backend_run(g_cpu, &op, in, &y, &e), DRIFT_OK);
        float *f = dl32(g_cpu, &y);
        for (int i = 0; i < 4; i++) assert_true(f[i] == want[k][i]);
        free(f);
        rel(g_cpu, &y);
    }
    drift_metric_acc acc;
    drift_metric_acc_init(&acc);
    assert_int_equal(drift_backend_metrics(g_cpu, &x, &x, &acc, &e), DRIFT_OK);
    assert_true(acc.numel == 4 && acc.n_diff == 0 && acc.max_abs_diff == 0.0 && acc.max_abs_ref == 3.0);
    rel(g_cpu, &x);
}

/* Metric accumulation (semantics of replay/analysis/metrics.h) on both backends. */
static void test_metrics(void **state) {
    (void)state;
    const float t[] = {1, 2, NAN, 4, INFINITY, 5, -0.0f, 7};
    const float r[] = {1, 3, NAN, 2, 1, 7, 0.0f, 7};
    for (int b = 0; b < 2; b++) {
        drift_backend *be = b ? g_cpu : g_ref;
        drift_err e;
        drift_tensor tt = mk(be, DRIFT_F32, 1, SH(8), t), tr = mk(be, DRIFT_F32, 1, SH(8), r);
        drift_metric_acc acc;
        drift_metric_acc_init(&acc);
        assert_int_equal(acc.argmax, -1);
        assert_int_equal(drift_backend_metrics(be, &tt, &tr, &acc, &e), DRIFT_OK);
        /* finite pairs: d = 0, -1, 2, -2, 0, 0 */
        assert_true(acc.sum_abs_diff == 5.0);
        assert_true(acc.sum_sq_diff == 9.0);
        assert_true(acc.max_abs_diff == 2.0);
        assert_int_equal(acc.argmax, 3); /* first of |d| = 2 */
        assert_true(acc.max_abs_ref == 7.0);
        assert_true(acc.sum_tr == 1 + 6 + 8 + 35 + 0 + 49);
        assert_true(acc.sum_tt == 1 + 4 + 16 + 25 + 0 + 49);
        assert_true(acc.sum_rr == 1 + 9 + 4 + 49 + 0 + 49);
        assert_int_equal(acc.numel, 8);
        assert_int_equal(acc.nan_t, 1);
        assert_int_equal(acc.inf_t, 1);
        assert_int_equal(acc.nan_r, 1);
        assert_int_equal(acc.inf_r, 0);
        assert_int_equal(acc.n_diff, 5); /* 1, 3, 4, 5, 6 (-0 vs +0); NaN == NaN */
        /* a second chunk continues the indices; merge equals one pass */
        drift_metric_acc two = acc, part;
        assert_int_equal(drift_backend_metrics(be, &tt, &tr, &two, &e), DRIFT_OK);
        assert_int_equal(two.argmax, 3);
        assert_int_equal(two.numel, 16);
        drift_metric_acc_init(&part);
        assert_int_equal(drift_backend_metrics(be, &tr, &tt, &part, &e), DRIFT_OK);
        drift_metric_acc m1 = acc;
        drift_metric_acc_merge(&m1, &part);
        assert_true(m1.sum_abs_diff == 10.0 && m1.max_abs_diff == 2.0 && m1.argmax == 3 && m1.numel == 16);
        assert_int_equal(m1.nan_t, 2);
        assert_int_equal(m1.inf_r, 1);
        /* b wins only when strictly larger; its index shifts by a's numel */
        drift_metric_acc a0, b0;
        drift_metric_acc_init(&a0);
        drift_metric_acc_init(&b0);
        const float z[] = {7, 7, 7, 7, 7, 7, 7, 7};
        drift_tensor tz = mk(be, DRIFT_F32, 1, SH(8), z);
        assert_int_equal(drift_backend_metrics(be, &tt, &tz, &a0, &e), DRIFT_OK); /* max |d| = 7 at 6 (-0 vs 7) */
        assert_int_equal(a0.argmax, 6);
        assert_int_equal(drift_backend_metrics(be, &tz, &tr, &b0, &e), DRIFT_OK); /* max |d| = 7 at 6 */
        drift_metric_acc_merge(&a0, &b0);
        assert_int_equal(a0.argmax, 6);
        drift_metric_acc_init(&a0);
        drift_metric_acc_merge(&a0, &b0);
        assert_int_equal(a0.argmax, 6);
        /* shape mismatch is an error */
        drift_tensor t3 = mk(be, DRIFT_F32, 1, SH(3), NULL);
        assert_int_equal(drift_backend_metrics(be, &tt, &t3, &acc, &e), DRIFT_E_INPUT);
        rel(be, &tt), rel(be, &tr), rel(be, &tz), rel(be, &t3);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape_numel_and_names),
        cmocka_unit_test(test_backend_create),
        cmocka_unit_test(test_door_checks),
        cmocka_unit_test(test_shape_errors),
        cmocka_unit_test(test_cast_exact),
        cmocka_unit_test(test_add_mul_exact),
        cmocka_unit_test(test_linear_fused_bias),
        cmocka_unit_test(test_norms_hand),
        cmocka_unit_test(test_attention_tiny),
        cmocka_unit_test(test_timestep_hand),
        cmocka_unit_test(test_patchify_roundtrip),
        cmocka_unit_test(test_patchify_channels_last),
        cmocka_unit_test(test_movement_exact),
        cmocka_unit_test(test_upload_download),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_cpu_f64),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
