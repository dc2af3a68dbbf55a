/* The fp64 parity table (parity.h, parity_run_f64): every op kind with an
 * fp64 output (and the casts into and out of fp64) on every backend given,
 * bit for bit against the ref backend. A backend's fp64 path reuses the
 * oracle's bodies (kernels/cpu/cpu_f64.c, kernels/cuda/f64_cuda.c), so the
 * bits must be equal; an fp32/bf16/fp16 output must be the oracle's fp64
 * value rounded to fp32 and then to its dtype. Inputs carry full 53-bit
 * mantissas (not representable in fp32), so a backend that stored or
 * computed fp64 tensors in fp32 fails. */
#include "tests/parity/parity.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "tests/parity/parity_util.h"

#define F64 DRIFT_F64

typedef struct f64_in {
    drift_dtype dt;
    int nd;
    int64_t sh[DRIFT_MAX_DIMS];
} f64_in;

typedef struct f64_case {
    const char *name;
    drift_op op;
    f64_in in[3];
    int out_nd; /* requested output shape (VIEW, STRIDED, FILL, UNPATCHIFY) */
    int64_t out_sh[DRIFT_MAX_DIMS];
    double lo, hi;
} f64_case;

static parity_stats g_st;

static void *xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz);
    if (!p) {
        fprintf(stderr, "parity f64: out of memory\n");
        exit(2);
    }
    return p;
}

static int64_t numel(int nd, const int64_t *sh) {
    int64_t n = drift_shape_numel(nd, sh);
    return n < 0 ? 0 : n;
}

static double rounded(double v, drift_dtype dt) {
    if (dt == F64) return v;
    float f = (float)v;
    drift_dtype_round_n(&f, 1, dt);
    return f;
}

static int same64(double a, double b) {
    if (isnan(a) && isnan(b)) return 1;
    uint64_t ua, ub;
    memcpy(&ua, &a, 8);
    memcpy(&ub, &b, 8);
    return ua == ub;
}

/* Runs c on be with the host inputs; the result widened to doubles in y. */
static int run_on(const drift_backend *be, const f64_case *c, double *const *host, int out_nd, const int64_t *out_sh,
                  double *y, drift_err *err) {
    drift_tensor in[3], out;
    memset(in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    int rc = 0;
    for (int i = 0; i < c->op.n_in && !rc; i++) {
        in[i].dtype = c->in[i].dt;
        in[i].ndim = c->in[i].nd;
        memcpy(in[i].shape, c->in[i].sh, sizeof in[i].shape);
        rc = drift_backend_alloc(be, &in[i], err);
        if (!rc) rc = drift_backend_upload_f64(be, &in[i], host[i], err);
    }
    out.dtype = c->op.out;
    out.ndim = out_nd;
    memcpy(out.shape, out_sh, sizeof out.shape);
    if (!rc) rc = drift_backend_alloc(be, &out, err);
    const int64_t n = numel(out_nd, out_sh);
    double *poison = xcalloc((size_t)n, sizeof *poison);
    for (int64_t i = 0; i < n; i++) poison[i] = NAN; /* every element must be written */
    if (!rc) rc = drift_backend_upload_f64(be, &out, poison, err);
    const drift_tensor *pin[3] = {&in[0], &in[1], &in[2]};
    if (!rc) rc = drift_backend_run(be, &c->op, pin, &out, err);
    if (!rc) rc = drift_backend_download_f64(be, &out, y, err);
    free(poison);
    for (int i = 0; i < 3; i++) drift_backend_release(be, &in[i]);
    drift_backend_release(be, &out);
    return rc;
}

static void run_case(const f64_case *c, const parity_backend *bes, int nb, const drift_backend *ref, uint64_t seed) {
    g_st.cases++;
    parity_rng_seed(seed);
    double *host[3] = {NULL, NULL, NULL};
    drift_tensor shp[3];
    const drift_tensor *pshp[3] = {&shp[0], &shp[1], &shp[2]};
    memset(shp, 0, sizeof shp);
    for (int i = 0; i < c->op.n_in; i++) {
        const int64_t n = numel(c->in[i].nd, c->in[i].sh);
        host[i] = xcalloc((size_t)n, sizeof(double));
        for (int64_t k = 0; k < n; k++) {
            double v = c->lo + (c->hi - c->lo) * parity_rng_unif();
            host[i][k] = rounded(v, c->in[i].dt);
        }
        shp[i].dtype = c->in[i].dt;
        shp[i].ndim = c->in[i].nd;
        memcpy(shp[i].shape, c->in[i].sh, sizeof shp[i].shape);
        shp[i].numel = n;
    }
    drift_err err;
    drift_err_clear(&err);
    int out_nd = c->out_nd;
    int64_t out_sh[DRIFT_MAX_DIMS];
    memcpy(out_sh, c->out_sh, sizeof out_sh);
    if (drift_op_infer_shape(&c->op, pshp, &out_nd, out_sh, &err)) {
        fprintf(stderr, "FAIL f64 %s: infer_shape: %s\n", c->name, err.msg);
        g_st.failed++;
        goto done;
    }
    const int64_t n = numel(out_nd, out_sh);
    double *r = xcalloc((size_t)n, sizeof *r), *y = xcalloc((size_t)n, sizeof *y);
    if (run_on(ref, c, host, out_nd, out_sh, r, &err)) {
        fprintf(stderr, "FAIL f64 %s on ref: %s: %s\n", c->name, err.where, err.msg);
        g_st.failed++;
    } else {
        for (int64_t i = 0; i < n; i++) r[i] = rounded(r[i], c->op.out); /* what a non-ref backend stores */
        for (int b = 0; b < nb; b++) {
            if (bes[b].be == ref) continue;
            /* an oracle backend (ref-cuda) keeps every dtype in fp64 by design: only fp64 outputs compare */
            if (strncmp(bes[b].spec, "ref", 3) == 0 && c->op.out != F64) continue;
            g_st.checks++;
            drift_err_clear(&err);
            if (run_on(bes[b].be, c, host, out_nd, out_sh, y, &err)) {
                fprintf(stderr, "FAIL f64 %s on %s: %s: %s\n", c->name, bes[b].spec, err.where, err.msg);
                g_st.failed++;
                continue;
            }
            int64_t bad = 0, first = -1;
            for (int64_t i = 0; i < n; i++)
                if (!same64(y[i], r[i]) && bad++ == 0) first = i;
            if (bad) {
                fprintf(stderr, "FAIL f64 %s on %s: %lld of %lld elements differ from ref (first [%lld]: %.17g vs %.17g)\n",
                        c->name, bes[b].spec, (long long)bad, (long long)n, (long long)first, y[first], r[first]);
                g_st.failed++;
            }
        }
    }
    free(r);
    free(y);
done:
    for (int i = 0; i < 3; i++) free(host[i]);
}

#define IN1(dt_, nd_, ...) {.dt = dt_, .nd = nd_, .sh = {__VA_ARGS__}}

parity_stats parity_run_f64(const parity_backend *bes, int nb) {
    memset(&g_st, 0, sizeof g_st);
    const drift_backend *ref = NULL;
    for (int b = 0; b < nb; b++)
        if (strcmp(bes[b].spec, "ref") == 0) ref = bes[b].be;
    if (!ref) {
        fprintf(stderr, "parity f64: the ref backend is required\n");
        g_st.failed++;
        return g_st;
    }
    enum { MAXC = 96 };
    f64_case cs[MAXC];
    int nc = 0;
    memset(cs, 0, sizeof cs);
#define ADD_CASE(nm, k, out_, nin, lo_, hi_) \
    (cs[nc].name = (nm), cs[nc].op.kind = (k), cs[nc].op.out = (out_), cs[nc].op.compute = F64, \
     cs[nc].op.n_in = (nin), cs[nc].lo = (lo_), cs[nc].hi = (hi_), &cs[nc++])
    f64_case *c;
    /* casts into, within and out of fp64 */
    static const drift_dtype cast_to[4] = {F64, DRIFT_F32, DRIFT_BF16, DRIFT_F16};
    static const char *const cast_nm[4] = {"cast f64->f64", "cast f64->f32", "cast f64->bf16", "cast f64->f16"};
    for (int i = 0; i < 4; i++) {
        c = ADD_CASE(cast_nm[i], DRIFT_OP_CAST, cast_to[i], 1, -3.0, 3.0);
        c->in[0] = (f64_in)IN1(F64, 2, 5, 13);
    }
    c = ADD_CASE("cast f32->f64", DRIFT_OP_CAST, F64, 1, -3.0, 3.0);
    c->in[0] = (f64_in)IN1(DRIFT_F32, 1, 65);
    c = ADD_CASE("cast bf16->f64", DRIFT_OP_CAST, F64, 1, -3.0, 3.0);
    c->in[0] = (f64_in)IN1(DRIFT_BF16, 1, 65);
    /* binary with broadcasting */
    static const drift_op_kind bin[4] = {DRIFT_OP_ADD, DRIFT_OP_SUB, DRIFT_OP_MUL, DRIFT_OP_DIV};
    static const char *const bin_nm[4] = {"add", "sub", "mul", "div"};
    for (int i = 0; i < 4; i++) {
        c = ADD_CASE(bin_nm[i], bin[i], F64, 2, 0.25, 2.0);
        c->in[0] = (f64_in)IN1(F64, 3, 2, 4, 6);
        c->in[1] = (f64_in)IN1(F64, 2, 4, 1);
    }
    c = ADD_CASE("mul f64 -> f32 out", DRIFT_OP_MUL, DRIFT_F32, 2, -2.0, 2.0);
    c->in[0] = (f64_in)IN1(F64, 2, 4, 6);
    c->in[1] = (f64_in)IN1(F64, 1, 6);
    c = ADD_CASE("affine", DRIFT_OP_AFFINE, F64, 1, -2.0, 2.0);
    c->op.alpha = 0.3f, c->op.beta = -1.7f;
    c->in[0] = (f64_in)IN1(F64, 1, 37);
    c = ADD_CASE("silu", DRIFT_OP_SILU, F64, 1, -4.0, 4.0);
    c->in[0] = (f64_in)IN1(F64, 1, 37);
    c = ADD_CASE("gelu_tanh", DRIFT_OP_GELU_TANH, F64, 1, -4.0, 4.0);
    c->in[0] = (f64_in)IN1(F64, 1, 37);
    c = ADD_CASE("linear", DRIFT_OP_LINEAR, F64, 3, -1.0, 1.0);
    c->in[0] = (f64_in)IN1(F64, 2, 3, 8);
    c->in[1] = (f64_in)IN1(F64, 2, 5, 8);
    c->in[2] = (f64_in)IN1(F64, 1, 5);
    c = ADD_CASE("layer_norm", DRIFT_OP_LAYER_NORM, F64, 3, -2.0, 2.0);
    c->op.eps = 1e-6f;
    c->in[0] = (f64_in)IN1(F64, 2, 4, 16);
    c->in[1] = (f64_in)IN1(F64, 1, 16);
    c->in[2] = (f64_in)IN1(F64, 1, 16);
    c = ADD_CASE("rms_norm", DRIFT_OP_RMS_NORM, F64, 2, -2.0, 2.0);
    c->op.eps = 1e-6f;
    c->in[0] = (f64_in)IN1(F64, 2, 4, 16);
    c->in[1] = (f64_in)IN1(F64, 1, 16);
    c = ADD_CASE("rope", DRIFT_OP_ROPE, F64, 3, -1.0, 1.0);
    c->in[0] = (f64_in)IN1(F64, 4, 1, 4, 2, 8);
    c->in[1] = (f64_in)IN1(F64, 2, 4, 8);
    c->in[2] = (f64_in)IN1(F64, 2, 4, 8);
    c = ADD_CASE("attention", DRIFT_OP_ATTENTION, F64, 3, -1.0, 1.0);
    c->in[0] = (f64_in)IN1(F64, 4, 1, 2, 5, 8);
    c->in[1] = (f64_in)IN1(F64, 4, 1, 2, 7, 8);
    c->in[2] = (f64_in)IN1(F64, 4, 1, 2, 7, 8);
    c = ADD_CASE("permute", DRIFT_OP_PERMUTE, F64, 1, -1.0, 1.0);
    c->op.perm[0] = 2, c->op.perm[1] = 0, c->op.perm[2] = 1;
    c->in[0] = (f64_in)IN1(F64, 3, 2, 3, 4);
    c = ADD_CASE("narrow", DRIFT_OP_NARROW, F64, 1, -1.0, 1.0);
    c->op.dim = 1, c->op.start = 1, c->op.length = 2;
    c->in[0] = (f64_in)IN1(F64, 3, 2, 4, 3);
    c = ADD_CASE("concat", DRIFT_OP_CONCAT, F64, 2, -1.0, 1.0);
    c->in[0] = (f64_in)IN1(F64, 2, 2, 3);
    c->in[1] = (f64_in)IN1(F64, 2, 1, 3);
    c = ADD_CASE("view", DRIFT_OP_VIEW, F64, 1, -1.0, 1.0);
    c->in[0] = (f64_in)IN1(F64, 2, 2, 6);
    c->out_nd = 2, c->out_sh[0] = 3, c->out_sh[1] = 4;
    c = ADD_CASE("patchify", DRIFT_OP_PATCHIFY, F64, 1, -1.0, 1.0);
    c->op.patch[0] = 1, c->op.patch[1] = 2, c->op.patch[2] = 2;
    c->in[0] = (f64_in)IN1(F64, 5, 1, 2, 1, 4, 4);
    c = ADD_CASE("patchify", DRIFT_OP_PATCHIFY, F64, 1, -1.0, 1.0);
    c->op.patch[0] = 1, c->op.patch[1] = 2, c->op.patch[2] = 2, c->op.layout = 1; /* channels-last */
    c->in[0] = (f64_in)IN1(F64, 5, 1, 3, 2, 4, 4);
    c = ADD_CASE("unpatchify", DRIFT_OP_UNPATCHIFY, F64, 1, -1.0, 1.0);
    c->op.patch[0] = 1, c->op.patch[1] = 2, c->op.patch[2] = 2;
    c->in[0] = (f64_in)IN1(F64, 3, 1, 4, 8);
    c->out_nd = 5, c->out_sh[0] = 1, c->out_sh[1] = 2, c->out_sh[2] = 1, c->out_sh[3] = 4, c->out_sh[4] = 4;
    c = ADD_CASE("timestep_sinusoid", DRIFT_OP_TIMESTEP_SINUSOID, F64, 1, 0.0, 1000.0);
    c->op.dim = 8, c->op.max_period = 10000.0f;
    c->in[0] = (f64_in)IN1(F64, 1, 3);
    static char un_nm[DRIFT_UNARY_COUNT][40];
    for (int s = 0; s < DRIFT_UNARY_COUNT; s++) {
        /* bool results and integer-only ops have no fp64 output to compare */
        if (drift_unary_is_bool(s) || s == DRIFT_UNARY_BITWISE_NOT) continue;
        const int pos = s == DRIFT_UNARY_RSQRT || s == DRIFT_UNARY_SQRT || s == DRIFT_UNARY_LOG ||
                        s == DRIFT_UNARY_LOG2 || s == DRIFT_UNARY_LOG10;
        const int unit = s == DRIFT_UNARY_ASIN || s == DRIFT_UNARY_ACOS || s == DRIFT_UNARY_LOG1P;
        snprintf(un_nm[s], sizeof un_nm[s], "unary %s", drift_op_sub_name(DRIFT_OP_UNARY, s));
        c = ADD_CASE(un_nm[s], DRIFT_OP_UNARY, F64, 1, pos ? 0.01 : unit ? -0.9 : -6.0, unit ? 0.9 : 6.0);
        c->op.sub = s;
        if (s == DRIFT_UNARY_SOFTPLUS) c->op.scalar = 1.0, c->op.step = 20.0;
        if (s == DRIFT_UNARY_ELU) c->op.scalar = 1.0;
        if (s == DRIFT_UNARY_LEAKY_RELU) c->op.scalar = 0.01;
        c->in[0] = (f64_in)IN1(F64, 1, 33);
    }
    static const char *const sc_nm[DRIFT_SCALAR_COUNT] = {"scalar add", "scalar sub", "scalar rsub", "scalar mul",
                                                          "scalar div", "scalar pow", "scalar rpow", "scalar max",
                                                          "scalar min"};
    for (int s = 0; s < DRIFT_SCALAR_COUNT; s++) {
        c = ADD_CASE(sc_nm[s], DRIFT_OP_SCALAR, F64, 1, 0.05, 3.0);
        c->op.sub = s, c->op.scalar = 1.7;
        c->in[0] = (f64_in)IN1(F64, 1, 33);
    }
    static const double pows[5] = {2.0, 3.0, 0.5, -1.0, 10000.0 / 64.0};
    static const char *const pow_nm[5] = {"scalar pow 2", "scalar pow 3", "scalar pow 0.5", "scalar pow -1",
                                          "scalar pow 156.25"};
    for (int k = 0; k < 5; k++) {
        c = ADD_CASE(pow_nm[k], DRIFT_OP_SCALAR, F64, 1, 0.05, 1.5);
        c->op.sub = DRIFT_SCALAR_POW, c->op.scalar = pows[k];
        c->in[0] = (f64_in)IN1(F64, 1, 33);
    }
    c = ADD_CASE("reduce sum", DRIFT_OP_REDUCE, F64, 1, -1.0, 1.0);
    c->op.sub = DRIFT_REDUCE_SUM, c->op.dim = 1;
    c->in[0] = (f64_in)IN1(F64, 3, 3, 5, 2);
    c = ADD_CASE("reduce mean", DRIFT_OP_REDUCE, F64, 1, -1.0, 1.0);
    c->op.sub = DRIFT_REDUCE_MEAN, c->op.dim = -1;
    c->in[0] = (f64_in)IN1(F64, 3, 3, 5, 7);
    c = ADD_CASE("strided", DRIFT_OP_STRIDED, F64, 1, -1.0, 1.0);
    c->op.start = 1, c->op.stride[0] = 6, c->op.stride[1] = 2;
    c->in[0] = (f64_in)IN1(F64, 2, 4, 6);
    c->out_nd = 2, c->out_sh[0] = 3, c->out_sh[1] = 2;
    c = ADD_CASE("strided expand", DRIFT_OP_STRIDED, F64, 1, -1.0, 1.0);
    c->op.start = 0, c->op.stride[0] = 0, c->op.stride[1] = 1;
    c->in[0] = (f64_in)IN1(F64, 1, 5);
    c->out_nd = 2, c->out_sh[0] = 3, c->out_sh[1] = 5;
    c = ADD_CASE("scatter", DRIFT_OP_SCATTER, F64, 2, -1.0, 1.0);
    c->op.start = 1, c->op.stride[0] = 6, c->op.stride[1] = 2;
    c->in[0] = (f64_in)IN1(F64, 2, 4, 6);
    c->in[1] = (f64_in)IN1(F64, 2, 3, 2);
    static const char *const fill_nm[3] = {"fill constant", "fill iota", "fill linspace"};
    for (int s = 0; s < 3; s++) {
        c = ADD_CASE(fill_nm[s], DRIFT_OP_FILL, F64, 0, 0.0, 1.0);
        c->op.sub = s, c->op.scalar = s == 1 ? 0.0 : 0.1, c->op.step = s == 1 ? 2.0 : 7.3;
        c->out_nd = 1, c->out_sh[0] = 17;
    }
#undef ADD_CASE
    for (int i = 0; i < nc; i++) run_case(&cs[i], bes, nb, ref, 1000 + (uint64_t)i);
    printf("  %-20s %5ld cases  %s\n", "fp64 (vs ref, bitwise)", g_st.cases, g_st.failed ? "FAILED" : "ok");
    return g_st;
}
