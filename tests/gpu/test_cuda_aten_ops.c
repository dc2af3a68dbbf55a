/* CUDA backend vs cpu vs ref for the ATen-level ops of captured graphs
 * (backend.h DRIFT_OP_UNARY .. DRIFT_OP_FILL; gpu_check.h says how each case
 * runs). Expectations (cuda vs cpu):
 *   STRIDED, SCATTER, FILL, DIV, REDUCE (sequential fp32 sums in index
 *   order on both), SCALAR add/sub/rsub/mul/div and pow by 2, 3, 0.5, -0.5,
 *   -1, -2, max, min, UNARY neg/rsqrt/sqrt/reciprocal/abs/relu  bit-exact
 *   UNARY exp/sin/cos/tanh/sigmoid/gelu_erf, SCALAR pow 1.7, rpow
 *                                  4 ULPs of the output dtype + atol 1e-6
 *                                  (CUDA's precise functions vs glibc's)
 * and every case within gc_nmse_bound of the fp64 ref backend. */
#include "gpu_check.h"

static gc_env E;

static void spec(gc_case_spec *c, drift_op op, int n_in) {
    memset(c, 0, sizeof *c);
    c->op = op;
    c->n_in = n_in;
    c->out_ndim = -1;
    c->guard = 64;
    c->ulps = -1;
}

static const drift_dtype DT3[3] = {DRIFT_F32, DRIFT_BF16, DRIFT_F16};

static void test_unary_scalar(void) {
    int64_t n = 4097;
    for (int d = 0; d < 3; d++)
        for (int sub = 0; sub < DRIFT_UNARY_COUNT; sub++) {
            int pos = sub == DRIFT_UNARY_RSQRT || sub == DRIFT_UNARY_SQRT || sub == DRIFT_UNARY_RECIP;
            gc_host x = gc_host_unif(DT3[d], 1, &n, pos ? 0.25 : -3.0, 3.0);
            gc_case_spec c;
            drift_op op = gc_op(DRIFT_OP_UNARY, DT3[d]);
            op.sub = sub;
            spec(&c, op, 1);
            c.in[0] = &x;
            int exact = sub == DRIFT_UNARY_NEG || pos || sub == DRIFT_UNARY_ABS || sub == DRIFT_UNARY_RELU ||
                        sub == DRIFT_UNARY_MASK_BIAS;
            if (sub == DRIFT_UNARY_MASK_BIAS) c.nmse_ref = -1; /* -inf outputs: exactness vs cpu is the check */
            c.exact = exact;
            if (!exact) c.ulps = 4, c.atol = 1e-6;
            c.nmse_ref = gc_nmse_bound(DT3[d]);
            gc_case_set("unary %s %s", drift_op_sub_name(DRIFT_OP_UNARY, sub), gc_dt(DT3[d]));
            gc_run_case(&E, E.cuda, &c);
            gc_host_free(&x);
        }
    const double ss[] = {2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.7, -0.3};
    for (int d = 0; d < 3; d++)
        for (int sub = 0; sub < DRIFT_SCALAR_COUNT; sub++)
            for (size_t k = 0; k < sizeof ss / sizeof *ss; k++) {
                gc_host x = gc_host_unif(DT3[d], 1, &n, 0.25, 3.0);
                gc_case_spec c;
                drift_op op = gc_op(DRIFT_OP_SCALAR, DT3[d]);
                op.sub = sub;
                op.scalar = ss[k];
                spec(&c, op, 1);
                c.in[0] = &x;
                int exact = sub == DRIFT_SCALAR_POW ? k < 6 : sub != DRIFT_SCALAR_RPOW;
                c.exact = exact;
                if (!exact) c.ulps = 4, c.atol = 1e-6;
                c.nmse_ref = 4 * gc_nmse_bound(DT3[d]);
                gc_case_set("scalar %s %g %s", drift_op_sub_name(DRIFT_OP_SCALAR, sub), ss[k], gc_dt(DT3[d]));
                gc_run_case(&E, E.cuda, &c);
                gc_host_free(&x);
            }
}

static void test_div_reduce(void) {
    const int64_t a[3] = {4, 5, 33}, b[2] = {5, 1};
    for (int d = 0; d < 3; d++) {
        gc_host x = gc_host_unif(DT3[d], 3, a, -4.0, 4.0);
        gc_host y = gc_host_unif(DT3[d], 2, b, 0.5, 4.0);
        gc_case_spec c;
        spec(&c, gc_op(DRIFT_OP_DIV, DT3[d]), 2);
        c.in[0] = &x, c.in[1] = &y;
        c.exact = 1;
        c.nmse_ref = gc_nmse_bound(DT3[d]);
        gc_case_set("div %s", gc_dt(DT3[d]));
        gc_run_case(&E, E.cuda, &c);
        for (int dim = 0; dim < 3; dim++)
            for (int sub = 0; sub < DRIFT_REDUCE_COUNT; sub++) {
                drift_op op = gc_op(DRIFT_OP_REDUCE, DT3[d]);
                op.sub = sub;
                op.dim = dim;
                spec(&c, op, 1);
                c.in[0] = &x;
                c.exact = 1;
                c.nmse_ref = 10 * gc_nmse_bound(DT3[d]);
                gc_case_set("reduce %s dim %d %s", drift_op_sub_name(DRIFT_OP_REDUCE, sub), dim, gc_dt(DT3[d]));
                gc_run_case(&E, E.cuda, &c);
            }
        gc_host_free(&x);
        gc_host_free(&y);
    }
}

static void test_movement_fill(void) {
    const int64_t s3[3] = {2, 3, 4}, s2[2] = {2, 3};
    for (int d = 0; d < 3; d++) {
        gc_host base = gc_host_make(DT3[d], 3, s3, 1.0), src = gc_host_make(DT3[d], 2, s2, 1.0);
        gc_case_spec c;
        drift_op g = gc_op(DRIFT_OP_STRIDED, DT3[d]); /* x[..., 1::2] */
        g.start = 1, g.stride[0] = 12, g.stride[1] = 4, g.stride[2] = 2;
        spec(&c, g, 1);
        c.in[0] = &base;
        c.out_ndim = 3, c.out_shape[0] = 2, c.out_shape[1] = 3, c.out_shape[2] = 2;
        c.exact = 1;
        c.nmse_ref = 1e-12;
        gc_case_set("strided x[..., 1::2] %s", gc_dt(DT3[d]));
        gc_run_case(&E, E.cuda, &c);
        drift_op e = gc_op(DRIFT_OP_STRIDED, DT3[d]); /* expand [3] -> [5, 3] */
        e.start = 4, e.stride[0] = 0, e.stride[1] = 1;
        spec(&c, e, 1);
        c.in[0] = &base;
        c.out_ndim = 2, c.out_shape[0] = 5, c.out_shape[1] = 3;
        c.exact = 1;
        c.nmse_ref = 1e-12;
        gc_case_set("strided expand %s", gc_dt(DT3[d]));
        gc_run_case(&E, E.cuda, &c);
        drift_op sc = gc_op(DRIFT_OP_SCATTER, DT3[d]); /* copy_ into x[:, :, 3] */
        sc.start = 3, sc.stride[0] = 12, sc.stride[1] = 4;
        spec(&c, sc, 2);
        c.in[0] = &base, c.in[1] = &src;
        c.exact = 1;
        c.nmse_ref = 1e-12;
        gc_case_set("scatter %s", gc_dt(DT3[d]));
        gc_run_case(&E, E.cuda, &c);
        for (int iota = 0; iota < 3; iota++) {
            drift_op f = gc_op(DRIFT_OP_FILL, DT3[d]); /* like input 0 */
            f.sub = iota;
            f.scalar = iota ? -3.0 : 1.0 / 3.0;
            f.step = 0.5;
            spec(&c, f, 1);
            c.in[0] = &base;
            c.exact = 1;
            c.nmse_ref = gc_nmse_bound(DT3[d]);
            gc_case_set("fill %s %s", drift_op_sub_name(DRIFT_OP_FILL, iota), gc_dt(DT3[d]));
            gc_run_case(&E, E.cuda, &c);
        }
        gc_host_free(&base);
        gc_host_free(&src);
    }
}

int main(void) {
    gc_require_gpu("test_cuda_aten_ops");
    gc_seed(4242);
    gc_env_open(&E);
    if (!E.cuda) return gc_finish("test_cuda_aten_ops");
    test_unary_scalar();
    test_div_reduce();
    test_movement_fill();
    gc_env_close(&E);
    return gc_finish("test_cuda_aten_ops");
}
