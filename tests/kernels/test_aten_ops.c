/* The ATen-level ops of backend.h (UNARY, SCALAR, DIV, REDUCE, STRIDED,
 * SCATTER, FILL): cpu against the fp64 ref backend with NMSE bounds per
 * dtype (ggml test-backend-ops style), hand-computed exact cases, and the
 * shape checks that reject hostile attributes. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "formats/dtype.h"
#include "kernels/backend.h"

static drift_backend *g_ref, *g_cpu;
static uint64_t g_rng = 88172645463325252ull;

static float rnd(float lo, float hi, drift_dtype dt) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    float u = (float)((g_rng >> 11) * (1.0 / 9007199254740992.0));
    return drift_round_to(lo + (hi - lo) * u, dt);
}

static drift_tensor mk(drift_backend *be, drift_dtype dt, int nd, const int64_t *sh, const float *v) {
    drift_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = nd;
    for (int i = 0; i < nd; i++) t.shape[i] = sh[i];
    drift_err e;
    assert_int_equal(drift_backend_alloc(be, &t, &e), DRIFT_OK);
    if (v) assert_int_equal(drift_backend_upload_f32(be, &t, v, &e), DRIFT_OK);
    return t;
}

/* Runs op on both backends with inputs (n_in of them, values in v[i]);
 * returns the cpu result as floats (caller frees) and checks NMSE vs ref. */
static float *both(const drift_op *op, const drift_dtype *dts, const int *nds, const int64_t (*shs)[DRIFT_MAX_DIMS],
                   float *const *v, int out_nd, const int64_t *out_sh, double bound, int64_t *n_out) {
    drift_backend *bes[2] = {g_ref, g_cpu};
    double *res[2] = {NULL, NULL};
    float *cpu = NULL;
    int64_t n = 0;
    for (int b = 0; b < 2; b++) {
        drift_tensor in[3];
        const drift_tensor *ip[3] = {NULL, NULL, NULL};
        for (int i = 0; i < op->n_in; i++) {
            in[i] = mk(bes[b], dts[i], nds[i], shs[i], v[i]);
            ip[i] = &in[i];
        }
        int nd = out_nd;
        int64_t sh[DRIFT_MAX_DIMS] = {0};
        if (out_sh) memcpy(sh, out_sh, sizeof(int64_t) * (size_t)out_nd);
        drift_err e;
        drift_err_clear(&e);
        if (drift_op_infer_shape(op, ip, &nd, sh, &e)) fail_msg("infer_shape: %s", e.msg);
        drift_tensor out = mk(bes[b], op->out, nd, sh, NULL);
        if (drift_backend_run(bes[b], op, ip, &out, &e)) fail_msg("%s run %s: %s", drift_backend_name(bes[b]), drift_op_name(op->kind), e.msg);
        n = out.numel;
        res[b] = malloc((size_t)(n ? n : 1) * sizeof(double));
        assert_int_equal(drift_backend_download_f64(bes[b], &out, res[b], &e), DRIFT_OK);
        if (b == 1) {
            cpu = malloc((size_t)(n ? n : 1) * sizeof(float));
            assert_int_equal(drift_backend_download_f32(bes[b], &out, cpu, &e), DRIFT_OK);
        }
        for (int i = 0; i < op->n_in; i++) drift_backend_release(bes[b], &in[i]);
        drift_backend_release(bes[b], &out);
    }
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(res[0][i]) != isnan(res[1][i])) fail_msg("%s: NaN parity at %lld", drift_op_name(op->kind), (long long)i);
        if (!isfinite(res[0][i])) continue;
        num += (res[1][i] - res[0][i]) * (res[1][i] - res[0][i]);
        den += res[0][i] * res[0][i];
    }
    double nmse = den > 0 ? num / den : num;
    if (!(nmse <= bound))
        fail_msg("%s/%s out %s: NMSE %.3e > %.1e", drift_op_name(op->kind), drift_op_sub_name(op->kind, op->sub),
                 drift_dtype_name(op->out), nmse, bound);
    free(res[0]);
    free(res[1]);
    if (n_out) *n_out = n;
    return cpu;
}

static double bound_of(drift_dtype dt) { return dt == DRIFT_BF16 ? 1e-4 : dt == DRIFT_F16 ? 1e-6 : 1e-11; }
static const drift_dtype k_dts[3] = {DRIFT_BF16, DRIFT_F16, DRIFT_F32};

static drift_op mkop(drift_op_kind k, int sub, drift_dtype out, int n_in) {
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = k;
    op.sub = sub;
    op.out = out;
    op.compute = DRIFT_F32;
    op.n_in = n_in;
    return op;
}

static int setup(void **s) {
    (void)s;
    drift_err e;
    return (drift_backend_create("ref", &g_ref, &e) || drift_backend_create("cpu", &g_cpu, &e)) ? -1 : 0;
}
static int teardown(void **s) {
    (void)s;
    drift_backend_free(g_ref);
    drift_backend_free(g_cpu);
    return 0;
}

static void test_unary_scalar_vs_ref(void **s) {
    (void)s;
    const int64_t sh[1][DRIFT_MAX_DIMS] = {{3, 37}};
    const int nd[1] = {2};
    float *x = malloc(111 * sizeof(float));
    for (int sub = 0; sub < DRIFT_UNARY_COUNT; sub++)
        for (int d = 0; d < 3; d++) {
            if (sub == DRIFT_UNARY_BITWISE_NOT) continue; /* integers and bool only: test_int_bool_ops */
            /* positive inputs where the function needs them (rsqrt, sqrt, reciprocal, logs) */
            int pos = sub == DRIFT_UNARY_RSQRT || sub == DRIFT_UNARY_SQRT || sub == DRIFT_UNARY_RECIP ||
                      sub == DRIFT_UNARY_LOG || sub == DRIFT_UNARY_LOG2 || sub == DRIFT_UNARY_LOG10;
            int unit = sub == DRIFT_UNARY_ASIN || sub == DRIFT_UNARY_ACOS;
            for (int i = 0; i < 111; i++) x[i] = rnd(pos ? 0.25f : unit ? -0.9f : -3.0f, unit ? 0.9f : 3.0f, k_dts[d]);
            drift_op op = mkop(DRIFT_OP_UNARY, sub, drift_unary_is_bool(sub) ? DRIFT_BOOL : k_dts[d], 1);
            op.scalar = sub == DRIFT_UNARY_SOFTPLUS ? 1.0 : sub == DRIFT_UNARY_LEAKY_RELU ? 0.01 : 1.0;
            op.step = sub == DRIFT_UNARY_SOFTPLUS ? 20.0 : 0.0;
            drift_dtype dts[1] = {k_dts[d]};
            free(both(&op, dts, nd, sh, &x, 0, NULL, bound_of(k_dts[d]), NULL));
        }
    const double scalars[] = {2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.7, -0.3};
    for (int sub = 0; sub < DRIFT_SCALAR_COUNT; sub++)
        for (size_t k = 0; k < sizeof scalars / sizeof scalars[0]; k++)
            for (int d = 0; d < 3; d++) {
                for (int i = 0; i < 111; i++) x[i] = rnd(0.25f, 3.0f, k_dts[d]);
                drift_op op = mkop(DRIFT_OP_SCALAR, sub, k_dts[d], 1);
                op.scalar = scalars[k];
                drift_dtype dts[1] = {k_dts[d]};
                free(both(&op, dts, nd, sh, &x, 0, NULL, bound_of(k_dts[d]) * 4, NULL));
            }
    free(x);
}

static void test_div_reduce_vs_ref(void **s) {
    (void)s;
    const int64_t sh[2][DRIFT_MAX_DIMS] = {{4, 5, 33}, {5, 1}};
    const int nd[2] = {3, 2};
    float *v[2] = {malloc(660 * sizeof(float)), malloc(5 * sizeof(float))};
    for (int d = 0; d < 3; d++) {
        for (int i = 0; i < 660; i++) v[0][i] = rnd(-4.0f, 4.0f, k_dts[d]);
        for (int i = 0; i < 5; i++) v[1][i] = rnd(0.5f, 4.0f, k_dts[d]);
        drift_op op = mkop(DRIFT_OP_DIV, 0, k_dts[d], 2);
        drift_dtype dts[2] = {k_dts[d], k_dts[d]};
        free(both(&op, dts, nd, sh, v, 0, NULL, bound_of(k_dts[d]), NULL));
        for (int dim = -3; dim < 3; dim++)
            for (int sub = 0; sub < DRIFT_REDUCE_COUNT; sub++) {
                /* a product of 33 values in [-4, 4] lands at fp16's edge: fp32 and fp64 round it
                 * to 65504 and inf, both right */
                if (sub == DRIFT_REDUCE_PROD && k_dts[d] == DRIFT_F16) continue;
                drift_dtype rout = sub == DRIFT_REDUCE_ANY || sub == DRIFT_REDUCE_ALL       ? DRIFT_BOOL
                                   : sub == DRIFT_REDUCE_ARGMAX || sub == DRIFT_REDUCE_ARGMIN ? DRIFT_I64
                                                                                              : k_dts[d];
                drift_op r = mkop(DRIFT_OP_REDUCE, sub, rout, 1);
                r.dim = dim;
                int64_t n = 0;
                float *y = both(&r, dts, nd, sh, v, 0, NULL, bound_of(k_dts[d]) * 10, &n);
                int dd = dim < 0 ? dim + 3 : dim;
                assert_int_equal(n, 660 / sh[0][dd]);
                free(y);
            }
    }
    free(v[0]);
    free(v[1]);
}

/* Movement ops are exact: cpu equals ref bit for bit, and both equal the
 * hand-computed index maps. */
static void test_strided_scatter_exact(void **s) {
    (void)s;
    float base[24], src[6];
    for (int i = 0; i < 24; i++) base[i] = (float)i;
    for (int i = 0; i < 6; i++) src[i] = 100.0f + (float)i;
    const int64_t shb[2][DRIFT_MAX_DIMS] = {{2, 3, 4}, {2, 3}};
    const int ndb[2] = {3, 2};
    float *v[2] = {base, src};
    drift_dtype dts[2] = {DRIFT_F32, DRIFT_F32};
    /* x[..., 1::2] of [2, 3, 4]: start 1, strides (12, 4, 2), shape [2, 3, 2] */
    drift_op g = mkop(DRIFT_OP_STRIDED, 0, DRIFT_F32, 1);
    g.start = 1;
    g.stride[0] = 12, g.stride[1] = 4, g.stride[2] = 2;
    int64_t n = 0;
    float *y = both(&g, dts, ndb, shb, v, 3, (const int64_t[]){2, 3, 2}, 0.0, &n);
    assert_int_equal(n, 12);
    for (int i = 0; i < 12; i++) assert_true(y[i] == (float)(1 + 2 * i));
    free(y);
    /* expand: [3] -> [2, 3] with stride 0 */
    g.start = 4;
    g.stride[0] = 0, g.stride[1] = 1, g.stride[2] = 0;
    y = both(&g, dts, ndb, shb, v, 2, (const int64_t[]){2, 3}, 0.0, &n);
    for (int i = 0; i < 6; i++) assert_true(y[i] == (float)(4 + i % 3));
    free(y);
    /* copy_ into x[:, 1, 0::2] (start 4, strides (12, 2), view shape [2, 2])... use a [2, 3] source into
     * x[:, :, 3] (start 3, strides (12, 4)) */
    drift_op sc = mkop(DRIFT_OP_SCATTER, 0, DRIFT_F32, 2);
    sc.start = 3;
    sc.stride[0] = 12, sc.stride[1] = 4;
    y = both(&sc, dts, ndb, shb, v, 0, NULL, 0.0, &n);
    assert_int_equal(n, 24);
    for (int i = 0; i < 24; i++) {
        float want = (i % 4 == 3) ? 100.0f + (float)((i / 12) * 3 + (i % 12) / 4) : (float)i;
        if (y[i] != want) fail_msg("scatter element %d: got %g want %g", i, y[i], want);
    }
    free(y);
}

static void test_fill_and_scalar_exact(void **s) {
    (void)s;
    drift_op f = mkop(DRIFT_OP_FILL, 1, DRIFT_F32, 0);
    f.scalar = 0.0;
    f.step = 1.0;
    int64_t n = 0;
    float *y = both(&f, NULL, NULL, NULL, NULL, 1, (const int64_t[]){8}, 0.0, &n);
    for (int i = 0; i < 8; i++) assert_true(y[i] == (float)i);
    free(y);
    /* bf16 constant: 1/3 rounds once to bf16 */
    f = mkop(DRIFT_OP_FILL, 0, DRIFT_BF16, 0);
    f.scalar = 1.0 / 3.0;
    y = both(&f, NULL, NULL, NULL, NULL, 2, (const int64_t[]){2, 2}, 1e-4, &n);
    for (int i = 0; i < 4; i++) assert_true(y[i] == drift_round_to((float)(1.0 / 3.0), DRIFT_BF16));
    free(y);
    /* x / 3 is x * (1/3 rounded to fp32), as CUDA divides by a host scalar */
    float x[4] = {1.0f, 3.0f, 10.0f, 7.0f};
    float *v[1] = {x};
    const int64_t sh[1][DRIFT_MAX_DIMS] = {{4}};
    const int nd[1] = {1};
    drift_dtype dts[1] = {DRIFT_F32};
    drift_op d = mkop(DRIFT_OP_SCALAR, DRIFT_SCALAR_DIV, DRIFT_F32, 1);
    d.scalar = 3.0;
    y = both(&d, dts, nd, sh, v, 0, NULL, 1e-12, &n);
    const float inv = 1.0f / 3.0f;
    for (int i = 0; i < 4; i++) assert_true(y[i] == x[i] * inv);
    free(y);
    /* pow 2 is x*x; rsub is s - x */
    d = mkop(DRIFT_OP_SCALAR, DRIFT_SCALAR_POW, DRIFT_F32, 1);
    d.scalar = 2.0;
    y = both(&d, dts, nd, sh, v, 0, NULL, 1e-12, &n);
    for (int i = 0; i < 4; i++) assert_true(y[i] == x[i] * x[i]);
    free(y);
    d = mkop(DRIFT_OP_SCALAR, DRIFT_SCALAR_RSUB, DRIFT_F32, 1);
    d.scalar = 1.0;
    y = both(&d, dts, nd, sh, v, 0, NULL, 1e-12, &n);
    for (int i = 0; i < 4; i++) assert_true(y[i] == 1.0f - x[i]);
    free(y);
}

/* The closed opset's kernels: cpu against ref over every variant and float dtype, then
 * hand-computed integer/bool cases that must be exact. */
static void test_opset_vs_ref(void **s) {
    (void)s;
    const int64_t sh[3][DRIFT_MAX_DIMS] = {{4, 6}, {1, 6}, {4, 1}};
    const int nd[3] = {2, 2, 2};
    float *v[3] = {malloc(24 * sizeof(float)), malloc(6 * sizeof(float)), malloc(4 * sizeof(float))};
    for (int d = 0; d < 3; d++) {
        for (int i = 0; i < 24; i++) v[0][i] = rnd(-3.0f, 3.0f, k_dts[d]);
        for (int i = 0; i < 6; i++) v[1][i] = rnd(0.5f, 2.0f, k_dts[d]);
        for (int sub = 0; sub < DRIFT_BINARY_COUNT; sub++) {
            if (sub >= DRIFT_BINARY_BITAND && sub <= DRIFT_BINARY_BITXOR) continue; /* integers only */
            drift_op op = mkop(DRIFT_OP_BINARY, sub, drift_binary_is_bool(sub) ? DRIFT_BOOL : k_dts[d], 2);
            drift_dtype dts[2] = {k_dts[d], k_dts[d]};
            float *y = both(&op, dts, nd, sh, v, 0, NULL, bound_of(k_dts[d]) * 4, NULL);
            if (sub == DRIFT_BINARY_LT)
                for (int i = 0; i < 24; i++) assert_true(y[i] == (v[0][i] < v[1][i % 6] ? 1.0f : 0.0f));
            free(y);
        }
        for (int sub = 0; sub < 2; sub++) {
            drift_op op = mkop(DRIFT_OP_SOFTMAX, sub, k_dts[d], 1);
            op.dim = -1;
            drift_dtype dts[1] = {k_dts[d]};
            free(both(&op, dts, nd, sh, v, 0, NULL, bound_of(k_dts[d]), NULL));
            op = mkop(DRIFT_OP_CUMSUM, sub, k_dts[d], 1);
            op.dim = 1;
            free(both(&op, dts, nd, sh, v, 0, NULL, bound_of(k_dts[d]) * 10, NULL));
        }
        /* bmm [4, 6] @ [6, 1] as 2-d batches of one */
        drift_op mm = mkop(DRIFT_OP_BMM, 0, k_dts[d], 2);
        const int64_t msh[2][DRIFT_MAX_DIMS] = {{4, 6}, {6, 1}};
        drift_dtype mdt[2] = {k_dts[d], k_dts[d]};
        free(both(&mm, mdt, nd, msh, v, 0, NULL, bound_of(k_dts[d]), NULL));
        /* group norm: x [2, 4, 3] in 2 groups, no affine */
        drift_op gn = mkop(DRIFT_OP_GROUP_NORM, 0, k_dts[d], 1);
        gn.length = 2;
        gn.eps = 1e-5;
        const int64_t gsh[1][DRIFT_MAX_DIMS] = {{2, 4, 3}};
        const int gnd[1] = {3};
        free(both(&gn, mdt, gnd, gsh, v, 0, NULL, bound_of(k_dts[d]), NULL));
    }
    free(v[0]);
    free(v[1]);
    free(v[2]);
}

static void test_int_bool_exact(void **s) {
    (void)s;
    /* where(cond, a, b), take, put, argsort, nonzero on small hand cases */
    float cond[4] = {1, 0, 0, 1}, a[4] = {1, 2, 3, 4}, b[4] = {-1, -2, -3, -4};
    const int64_t sh3[3][DRIFT_MAX_DIMS] = {{4}, {4}, {4}};
    const int nd3[3] = {1, 1, 1};
    float *v[3] = {cond, a, b};
    drift_dtype wdt[3] = {DRIFT_BOOL, DRIFT_F32, DRIFT_F32};
    drift_op w = mkop(DRIFT_OP_WHERE, 0, DRIFT_F32, 3);
    float *y = both(&w, wdt, nd3, sh3, v, 0, NULL, 0.0, NULL);
    const float wexp[4] = {1, -2, -3, 4};
    for (int i = 0; i < 4; i++) assert_true(y[i] == wexp[i]);
    free(y);
    float idx[3] = {3, 0, 3};
    const int64_t tsh[2][DRIFT_MAX_DIMS] = {{4}, {3}};
    const int tnd[2] = {1, 1};
    float *tv[2] = {a, idx};
    drift_dtype tdt[2] = {DRIFT_F32, DRIFT_I64};
    drift_op t = mkop(DRIFT_OP_TAKE, 0, DRIFT_F32, 2);
    y = both(&t, tdt, tnd, tsh, tv, 0, NULL, 0.0, NULL);
    assert_true(y[0] == 4 && y[1] == 1 && y[2] == 4);
    free(y);
    float vals[3] = {10, 20, 30};
    const int64_t psh[3][DRIFT_MAX_DIMS] = {{4}, {3}, {3}};
    float *pv[3] = {a, idx, vals};
    drift_dtype pdt[3] = {DRIFT_F32, DRIFT_I64, DRIFT_F32};
    drift_op put = mkop(DRIFT_OP_PUT, 1, DRIFT_F32, 3); /* index_put accumulate */
    y = both(&put, pdt, nd3, psh, pv, 0, NULL, 0.0, NULL);
    assert_true(y[0] == 21 && y[1] == 2 && y[2] == 3 && y[3] == 44);
    free(y);
    float keys[5] = {3, 1, 2, 1, 0};
    const int64_t ash[1][DRIFT_MAX_DIMS] = {{5}};
    float *av[1] = {keys};
    drift_dtype adt[1] = {DRIFT_F32};
    drift_op as = mkop(DRIFT_OP_ARGSORT, 0, DRIFT_I64, 1);
    y = both(&as, adt, tnd, ash, av, 0, NULL, 0.0, NULL);
    const float aexp[5] = {4, 1, 3, 2, 0}; /* stable: the two 1s keep their order */
    for (int i = 0; i < 5; i++) assert_true(y[i] == aexp[i]);
    free(y);
    drift_op nz = mkop(DRIFT_OP_NONZERO, 0, DRIFT_I64, 1);
    y = both(&nz, adt, tnd, ash, av, 2, (const int64_t[]){4, 1}, 0.0, NULL);
    const float nexp[4] = {0, 1, 2, 3};
    for (int i = 0; i < 4; i++) assert_true(y[i] == nexp[i]);
    free(y);
    /* integer arithmetic: floor division and bitwise ops on int64 are exact */
    float ia[4] = {7, -7, 12, 5}, ib[4] = {2, 2, 10, 3};
    float *iv[2] = {ia, ib};
    drift_dtype idt[2] = {DRIFT_I64, DRIFT_I64};
    drift_op fd = mkop(DRIFT_OP_BINARY, DRIFT_BINARY_FLOORDIV, DRIFT_I64, 2);
    y = both(&fd, idt, tnd, sh3, iv, 0, NULL, 0.0, NULL);
    assert_true(y[0] == 3 && y[1] == -4 && y[2] == 1 && y[3] == 1);
    free(y);
    drift_op bx = mkop(DRIFT_OP_BINARY, DRIFT_BINARY_BITXOR, DRIFT_I64, 2);
    y = both(&bx, idt, tnd, sh3, iv, 0, NULL, 0.0, NULL);
    assert_true(y[0] == 5 && y[2] == 6 && y[3] == 6);
    free(y);
    drift_op bn = mkop(DRIFT_OP_UNARY, DRIFT_UNARY_BITWISE_NOT, DRIFT_I64, 1);
    y = both(&bn, idt, tnd, sh3, iv, 0, NULL, 0.0, NULL);
    assert_true(y[0] == -8 && y[1] == 6);
    free(y);
    /* an index outside the input is an error, not a read */
    idx[1] = 9;
    drift_err e;
    drift_tensor ta = mk(g_cpu, DRIFT_F32, 1, sh3[0], a), ti = mk(g_cpu, DRIFT_I64, 1, tsh[1], idx);
    drift_tensor to = mk(g_cpu, DRIFT_F32, 1, tsh[1], NULL);
    const drift_tensor *tin[2] = {&ta, &ti};
    assert_int_not_equal(drift_backend_run(g_cpu, &t, tin, &to, &e), DRIFT_OK);
    drift_backend_release(g_cpu, &ta);
    drift_backend_release(g_cpu, &ti);
    drift_backend_release(g_cpu, &to);
}

static void expect_shape_error(const drift_op *op, const drift_tensor *const *in, int nd, const int64_t *sh,
                               const char *needle) {
    drift_err e;
    drift_err_clear(&e);
    int64_t s[DRIFT_MAX_DIMS] = {0};
    if (sh) memcpy(s, sh, sizeof(int64_t) * (size_t)nd);
    int rc = drift_op_infer_shape(op, in, &nd, s, &e);
    assert_int_equal(rc, DRIFT_E_INPUT);
    if (!strstr(e.msg, needle)) fail_msg("error '%s' lacks '%s'", e.msg, needle);
}

static void test_shape_errors(void **s) {
    (void)s;
    drift_tensor a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.dtype = b.dtype = DRIFT_F32;
    a.ndim = 2, a.shape[0] = 3, a.shape[1] = 4, a.numel = 12;
    b.ndim = 2, b.shape[0] = 2, b.shape[1] = 2, b.numel = 4;
    const drift_tensor *in[2] = {&a, &b};
    drift_op g = mkop(DRIFT_OP_STRIDED, 0, DRIFT_F32, 1);
    g.start = 5;
    g.stride[0] = 4, g.stride[1] = 1;
    expect_shape_error(&g, in, 2, (const int64_t[]){2, 4}, "reaches element 12");
    g.start = 1;
    g.stride[0] = -4, g.stride[1] = 1; /* a flip walking below element 0 */
    expect_shape_error(&g, in, 2, (const int64_t[]){2, 2}, "below element 0");
    g.start = 4;
    g.stride[0] = -4, g.stride[1] = -1; /* x[1::-1, 0::-1]... a legal flip of rows 1,0 */
    int fnd = 2;
    int64_t fsh[DRIFT_MAX_DIMS] = {2, 1};
    drift_err fe;
    assert_int_equal(drift_op_infer_shape(&g, in, &fnd, fsh, &fe), DRIFT_OK);
    drift_op sc = mkop(DRIFT_OP_SCATTER, 0, DRIFT_F32, 2);
    sc.stride[0] = 1, sc.stride[1] = 1; /* overlapping view */
    expect_shape_error(&sc, in, 0, NULL, "not injective");
    sc.stride[0] = 4, sc.stride[1] = 1;
    sc.start = 9;
    expect_shape_error(&sc, in, 0, NULL, "reaches element");
    b.dtype = DRIFT_BF16;
    sc.start = 0;
    expect_shape_error(&sc, in, 0, NULL, "share a dtype");
    drift_op u = mkop(DRIFT_OP_UNARY, 99, DRIFT_F32, 1);
    expect_shape_error(&u, in, 0, NULL, "unknown unary");
    drift_op r = mkop(DRIFT_OP_REDUCE, 0, DRIFT_F32, 1);
    r.dim = 2;
    expect_shape_error(&r, in, 0, NULL, "out of range");
    assert_string_equal(drift_op_sub_name(DRIFT_OP_UNARY, DRIFT_UNARY_GELU_ERF), "gelu_erf");
    assert_int_equal(drift_op_sub_parse(DRIFT_OP_SCALAR, "pow"), DRIFT_SCALAR_POW);
    assert_int_equal(drift_op_sub_parse(DRIFT_OP_SCALAR, "nope"), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unary_scalar_vs_ref),
        cmocka_unit_test(test_div_reduce_vs_ref),
        cmocka_unit_test(test_strided_scatter_exact),
        cmocka_unit_test(test_fill_and_scalar_exact),
        cmocka_unit_test(test_shape_errors),
        cmocka_unit_test(test_opset_vs_ref),
        cmocka_unit_test(test_int_bool_exact),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
