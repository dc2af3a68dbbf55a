/* The fp64 oracle on the GPU ("ref-cuda:0") against the CPU oracle ("ref"),
 * BITWISE: every op of kernels/backend.h on fp64 inputs (broadcasts, bias /
 * no bias, both attention layouts, attention forced into query chunks, sizes
 * that are not multiples of the GEMM's 64 x 64 x 16 tiles or the row sums'
 * 32-row tiles, NaN/inf in elementwise inputs) with 0 elements whose bits
 * differ (two NaNs count as equal: their payloads are not IEEE-defined), two
 * GPU runs bit for bit equal; the metric reduction (every sum, count and
 * argmax equal, over two accumulations into one acc); and a whole wan2.2
 * oracle forward, every site and the output bitwise equal. Prints the GPU
 * oracle GEMM's throughput. Skips without a GPU. */
#include <time.h>

#include "gpu_check.h"

#include "replay/exec/forward.h"
#include "replay/exec/params_init.h"

static drift_backend *CPU, *GPU, *GPU_CHUNKED;

typedef struct hbuf {
    int ndim;
    int64_t shape[DRIFT_MAX_DIMS], n;
    double *v;
} hbuf;

static hbuf hb(int ndim, const int64_t *shape, double scale, double special_frac) {
    hbuf h;
    memset(&h, 0, sizeof h);
    h.ndim = ndim;
    h.n = 1;
    for (int i = 0; i < ndim; i++) {
        h.shape[i] = shape[i];
        h.n *= shape[i];
    }
    h.v = malloc((size_t)(h.n ? h.n : 1) * sizeof *h.v);
    for (int64_t i = 0; i < h.n; i++) {
        h.v[i] = scale * gc_normal();
        if (special_frac > 0 && gc_unif() < special_frac) {
            double u = gc_unif();
            h.v[i] = u < 0.3 ? NAN : u < 0.6 ? INFINITY : u < 0.8 ? -INFINITY : -0.0;
        }
    }
    return h;
}

static int upload(const drift_backend *be, const hbuf *h, drift_tensor *t) {
    drift_err e;
    memset(t, 0, sizeof *t);
    t->dtype = DRIFT_F64;
    t->ndim = h->ndim;
    memcpy(t->shape, h->shape, sizeof t->shape);
    if (drift_backend_alloc(be, t, &e) || drift_backend_upload_f64(be, t, h->v, &e)) {
        GC_CHECK(0, "upload on %s: %s", drift_backend_name(be), gc_errstr(&e));
        return -1;
    }
    return 0;
}

/* Runs op on be with inputs in; out shape requested (VIEW/UNPATCHIFY) or inferred. Returns host values. */
static double *run_on(const drift_backend *be, const drift_op *op, hbuf *const *in, int n_in, int out_nd,
                      const int64_t *out_shape, int64_t *out_n) {
    drift_tensor ti[3], to;
    const drift_tensor *tp[3];
    drift_err e;
    for (int i = 0; i < n_in; i++) {
        if (upload(be, in[i], &ti[i])) return NULL;
        tp[i] = &ti[i];
    }
    memset(&to, 0, sizeof to);
    to.dtype = drift_dtype_is_int(op->out) ? op->out : DRIFT_F64; /* bool/int64 results keep their dtype */
    int nd = out_nd;
    int64_t shape[DRIFT_MAX_DIMS] = {0};
    if (out_shape) memcpy(shape, out_shape, (size_t)out_nd * sizeof *shape);
    if (drift_op_infer_shape(op, tp, &nd, shape, &e)) {
        GC_CHECK(0, "infer shape: %s", gc_errstr(&e));
        return NULL;
    }
    to.ndim = nd;
    memcpy(to.shape, shape, sizeof to.shape);
    double *out = NULL;
    if (drift_backend_alloc(be, &to, &e) == 0) {
        out = malloc((size_t)(to.numel ? to.numel : 1) * sizeof *out);
        if (drift_backend_run(be, op, tp, &to, &e) || drift_backend_download_f64(be, &to, out, &e)) {
            GC_CHECK(0, "run on %s: %s", drift_backend_name(be), gc_errstr(&e));
            free(out);
            out = NULL;
        }
        *out_n = to.numel;
        drift_backend_release(be, &to);
    } else {
        GC_CHECK(0, "alloc out on %s: %s", drift_backend_name(be), gc_errstr(&e));
    }
    for (int i = 0; i < n_in; i++) drift_backend_release(be, &ti[i]);
    return out;
}

/* Bit for bit equal; two NaNs count as equal (payloads are not IEEE-defined). */
static int same64(double a, double b) { return memcmp(&a, &b, 8) == 0 || (isnan(a) && isnan(b)); }

static int64_t n_compared; /* elements compared bitwise, over all ops */

static void compare_op(const char *label, const drift_op *op, hbuf *const *in, int n_in, int out_nd,
                       const int64_t *out_shape) {
    const drift_backend *gpus[2] = {GPU, GPU_CHUNKED};
    int64_t nc = 0, ng = 0, ng2 = 0;
    double *c = run_on(CPU, op, in, n_in, out_nd, out_shape, &nc);
    for (int k = 0; k < (op->kind == DRIFT_OP_ATTENTION ? 2 : 1); k++) {
        gc_case_set("%s%s", label, k ? " (query chunks)" : "");
        double *g = run_on(gpus[k], op, in, n_in, out_nd, out_shape, &ng);
        double *g2 = run_on(gpus[k], op, in, n_in, out_nd, out_shape, &ng2);
        if (!c || !g || !g2) {
            GC_CHECK(0, "a run failed");
        } else {
            GC_CHECK(nc == ng && ng == ng2, "sizes %lld / %lld", (long long)nc, (long long)ng);
            int64_t bad = 0, nondet = 0;
            for (int64_t i = 0; i < nc && nc == ng; i++) {
                if (!same64(g[i], g2[i])) nondet++;
                if (!same64(g[i], c[i])) {
                    if (bad < 3) printf("  %s: [%lld] gpu %a cpu %a\n", gc_case, (long long)i, g[i], c[i]);
                    bad++;
                }
            }
            GC_CHECK(bad == 0, "%lld of %lld elements not bitwise equal to the CPU oracle's", (long long)bad,
                     (long long)nc);
            GC_CHECK(nondet == 0, "%lld elements differ between two GPU runs", (long long)nondet);
            n_compared += nc;
        }
        free(g);
        free(g2);
    }
    free(c);
}

static drift_op mk(drift_op_kind k, int n_in) {
    drift_op op = gc_op(k, DRIFT_F64);
    op.compute = DRIFT_F64;
    op.n_in = n_in;
    return op;
}

static void test_ops(void) {
    int64_t s1[1] = {70001}, s3[3] = {2, 3, 50}, b1[1] = {50}, b2[3] = {2, 3, 1}, b3[1] = {1};
    hbuf x = hb(1, s1, 2.0, 0.02), y = hb(3, s3, 1.0, 0.01);
    hbuf *in1[1] = {&x};
    drift_op op = mk(DRIFT_OP_CAST, 1);
    compare_op("cast", &op, in1, 1, 0, NULL);
    op = mk(DRIFT_OP_AFFINE, 1);
    op.alpha = 1.5f;
    op.beta = -0.25f;
    compare_op("affine", &op, in1, 1, 0, NULL);
    op = mk(DRIFT_OP_SILU, 1);
    compare_op("silu", &op, in1, 1, 0, NULL);
    op = mk(DRIFT_OP_GELU_TANH, 1);
    compare_op("gelu_tanh", &op, in1, 1, 0, NULL);
    hbuf bb[4] = {hb(1, b1, 1.0, 0), hb(3, b2, 1.0, 0), hb(1, b3, 1.0, 0), hb(3, s3, 1.0, 0.01)};
    const drift_op_kind bin[3] = {DRIFT_OP_ADD, DRIFT_OP_SUB, DRIFT_OP_MUL};
    for (int k = 0; k < 3; k++)
        for (int b = 0; b < 4; b++) {
            hbuf *in2[2] = {&y, &bb[b]};
            op = mk(bin[k], 2);
            char l[64];
            snprintf(l, sizeof l, "%s bcast %d", drift_op_name(bin[k]), b);
            compare_op(l, &op, in2, 2, 0, NULL);
        }
    /* linear */
    int64_t xs[3] = {3, 7, 64}, ws[2] = {33, 64}, bs[1] = {33};
    hbuf lx = hb(3, xs, 1.0, 0), lw = hb(2, ws, 0.125, 0), lb = hb(1, bs, 0.1, 0);
    hbuf *lin3[3] = {&lx, &lw, &lb};
    op = mk(DRIFT_OP_LINEAR, 3);
    compare_op("linear+bias", &op, lin3, 3, 0, NULL);
    op = mk(DRIFT_OP_LINEAR, 2);
    compare_op("linear", &op, lin3, 2, 0, NULL);
    /* M, N, K not multiples of the GEMM tiles (64 x 64 x 16), several tiles each way */
    const int64_t gm[][3] = {{130, 70, 129}, {300, 200, 777}, {1, 1, 1}, {65, 1, 17}, {64, 64, 16}};
    for (size_t t = 0; t < sizeof gm / sizeof *gm; t++) {
        int64_t gx[2] = {gm[t][0], gm[t][2]}, gw[2] = {gm[t][1], gm[t][2]}, gb[1] = {gm[t][1]};
        hbuf a = hb(2, gx, 1.0, 0), w = hb(2, gw, 0.1, 0), bias = hb(1, gb, 0.1, 0);
        hbuf *g3[3] = {&a, &w, &bias};
        char l[80];
        for (int n_in = 2; n_in <= 3; n_in++) {
            snprintf(l, sizeof l, "linear M %lld N %lld K %lld%s", (long long)gm[t][0], (long long)gm[t][1],
                     (long long)gm[t][2], n_in == 3 ? " +bias" : "");
            op = mk(DRIFT_OP_LINEAR, n_in);
            compare_op(l, &op, g3, n_in, 0, NULL);
        }
        free(a.v);
        free(w.v);
        free(bias.v);
    }
    /* norms */
    int64_t ns[2] = {5, 300}, nw[1] = {300};
    hbuf nx = hb(2, ns, 3.0, 0), nwt = hb(1, nw, 1.0, 0), nbs = hb(1, nw, 0.5, 0);
    hbuf *nin[3] = {&nx, &nwt, &nbs};
    for (int n_in = 1; n_in <= 3; n_in++) {
        op = mk(DRIFT_OP_LAYER_NORM, n_in);
        op.eps = 1e-6f;
        compare_op("layer_norm", &op, nin, n_in, 0, NULL);
    }
    for (int n_in = 1; n_in <= 2; n_in++) {
        op = mk(DRIFT_OP_RMS_NORM, n_in);
        op.eps = 1e-6f;
        compare_op("rms_norm", &op, nin, n_in, 0, NULL);
    }
    /* rows and D not multiples of the row sums' 32 x 32 tiles, D below one tile */
    const int64_t nr[][2] = {{70, 1000}, {33, 7}, {1, 1}, {129, 1537}};
    for (size_t t = 0; t < sizeof nr / sizeof *nr; t++) {
        int64_t xs2[2] = {nr[t][0], nr[t][1]}, ws2[1] = {nr[t][1]};
        hbuf a = hb(2, xs2, 2.0, 0), w = hb(1, ws2, 1.0, 0), bias = hb(1, ws2, 0.5, 0);
        for (int64_t i = 0; i < a.n; i++) a.v[i] += 0.5; /* a mean away from 0 */
        hbuf *g3[3] = {&a, &w, &bias};
        char l[80];
        for (int k = 0; k < 2; k++) {
            op = mk(k ? DRIFT_OP_RMS_NORM : DRIFT_OP_LAYER_NORM, k ? 2 : 3);
            op.eps = 1e-5f;
            snprintf(l, sizeof l, "%s rows %lld D %lld", k ? "rms_norm" : "layer_norm", (long long)nr[t][0],
                     (long long)nr[t][1]);
            compare_op(l, &op, g3, k ? 2 : 3, 0, NULL);
        }
        free(a.v);
        free(w.v);
        free(bias.v);
    }
    /* rope */
    int64_t rs[4] = {2, 10, 3, 8}, rt[2] = {10, 8};
    hbuf rx = hb(4, rs, 1.0, 0), rc = hb(2, rt, 1.0, 0), rsn = hb(2, rt, 1.0, 0);
    hbuf *rin[3] = {&rx, &rc, &rsn};
    op = mk(DRIFT_OP_ROPE, 3);
    compare_op("rope", &op, rin, 3, 0, NULL);
    /* attention, both layouts */
    for (int ly = 0; ly < 2; ly++) {
        int64_t qs[4] = {2, 3, 17, 16}, ks[4] = {2, 3, 29, 16}, vs[4] = {2, 3, 29, 8};
        if (ly) {
            qs[1] = 17, qs[2] = 3;
            ks[1] = 29, ks[2] = 3;
            vs[1] = 29, vs[2] = 3;
        }
        hbuf q = hb(4, qs, 1.0, 0), k = hb(4, ks, 1.0, 0), v = hb(4, vs, 1.0, 0);
        hbuf *ain[3] = {&q, &k, &v};
        op = mk(DRIFT_OP_ATTENTION, 3);
        op.layout = ly;
        op.scale = 0.3f;
        compare_op(ly ? "attention layout 1" : "attention layout 0", &op, ain, 3, 0, NULL);
        free(q.v);
        free(k.v);
        free(v.v);
    }
    /* attention with Lq, Lk, Dh, Dv off the tiles (several GEMM tiles and 32-row sum tiles) */
    for (int ly = 0; ly < 2; ly++) {
        const int64_t B = 1, H = 2, Lq = 100, Lk = 130, Dh = 72, Dv = 40;
        int64_t qs[4] = {B, H, Lq, Dh}, ks[4] = {B, H, Lk, Dh}, vs[4] = {B, H, Lk, Dv};
        if (ly) {
            qs[1] = Lq, qs[2] = H;
            ks[1] = Lk, ks[2] = H;
            vs[1] = Lk, vs[2] = H;
        }
        hbuf q = hb(4, qs, 1.0, 0), k = hb(4, ks, 1.0, 0), v = hb(4, vs, 1.0, 0);
        hbuf *ain[3] = {&q, &k, &v};
        op = mk(DRIFT_OP_ATTENTION, 3);
        op.layout = ly;
        op.scale = 0.0f; /* 1 / sqrt(Dh) */
        compare_op(ly ? "attention 100x130 d72/40 layout 1" : "attention 100x130 d72/40 layout 0", &op, ain, 3, 0, NULL);
        free(q.v);
        free(k.v);
        free(v.v);
    }
    /* movement */
    int64_t ps[4] = {2, 3, 5, 4};
    hbuf px = hb(4, ps, 1.0, 0);
    hbuf *pin[1] = {&px};
    op = mk(DRIFT_OP_PERMUTE, 1);
    int perm[4] = {0, 2, 1, 3};
    memcpy(op.perm, perm, sizeof perm);
    compare_op("permute", &op, pin, 1, 0, NULL);
    int64_t as[3] = {4, 7, 5}, cs2[3] = {4, 2, 5};
    hbuf ax = hb(3, as, 1.0, 0), cx = hb(3, cs2, 1.0, 0);
    hbuf *ain1[1] = {&ax}, *cin[2] = {&ax, &cx};
    op = mk(DRIFT_OP_NARROW, 1);
    op.dim = 1;
    op.start = 2;
    op.length = 3;
    compare_op("narrow", &op, ain1, 1, 0, NULL);
    op = mk(DRIFT_OP_CONCAT, 2);
    op.dim = 1;
    compare_op("concat", &op, cin, 2, 0, NULL);
    int64_t vshape[1] = {140};
    op = mk(DRIFT_OP_VIEW, 1);
    compare_op("view", &op, ain1, 1, 1, vshape);
    int64_t img[5] = {1, 4, 2, 8, 8}, tok[3] = {1, 32, 16};
    hbuf ix = hb(5, img, 1.0, 0), tx = hb(3, tok, 1.0, 0);
    hbuf *iin[1] = {&ix}, *tin[1] = {&tx};
    op = mk(DRIFT_OP_PATCHIFY, 1);
    op.patch[0] = 1, op.patch[1] = 2, op.patch[2] = 2;
    compare_op("patchify", &op, iin, 1, 0, NULL);
    op.layout = 1; /* channels-last features (pf, ph, pw, c) */
    compare_op("patchify layout 1", &op, iin, 1, 0, NULL);
    op.layout = 0;
    op.kind = DRIFT_OP_UNPATCHIFY;
    compare_op("unpatchify", &op, tin, 1, 5, img);
    int64_t ts[1] = {3};
    hbuf tt = hb(1, ts, 0, 0);
    for (int i = 0; i < 3; i++) tt.v[i] = 1000.0 * gc_unif();
    hbuf *ttin[1] = {&tt};
    for (int flip = 0; flip < 2; flip++) {
        op = mk(DRIFT_OP_TIMESTEP_SINUSOID, 1);
        op.dim = 32;
        op.max_period = 10000.0f;
        op.flip_sin_to_cos = flip;
        compare_op("timestep_sinusoid", &op, ttin, 1, 0, NULL);
    }
    hbuf *all[] = {&x, &y, &bb[0], &bb[1], &bb[2], &bb[3], &lx, &lw, &lb, &nx, &nwt, &nbs, &rx, &rc, &rsn,
                   &px, &ax, &cx, &ix, &tx, &tt};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->v);
}

/* Spec options: attn_scratch only, in range; the device number must exist. */
static void test_specs(void) {
    static const char *bad[] = {"ref-cuda:0:gemm=naive", "ref-cuda:0:attn_scratch=0", "ref-cuda:0:attn_scratch=x",
                                "ref-cuda:0:threads=2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        gc_case_set("spec %s", bad[i]);
        drift_backend *be = NULL;
        drift_err e;
        drift_err_clear(&e);
        GC_CHECK(drift_backend_create(bad[i], &be, &e) == DRIFT_E_INPUT && !be, "expected DRIFT_E_INPUT, got %d (%s)",
                 e.code, gc_errstr(&e));
        drift_backend_free(be);
    }
    gc_case_set("spec ref-cuda:%d", drift_cuda_device_count());
    char spec[32];
    snprintf(spec, sizeof spec, "ref-cuda:%d", drift_cuda_device_count());
    drift_backend *be = NULL;
    drift_err e;
    GC_CHECK(drift_backend_create(spec, &be, &e) == DRIFT_E_UNSUPPORTED && !be, "a missing device: got %d", e.code);
    drift_backend_free(be);
    gc_case_set("spec name");
    GC_CHECK(strcmp(drift_backend_name(GPU), "ref-cuda:0") == 0, "name %s", drift_backend_name(GPU));
}

/* The ATen-level ops of captured graphs (backend.h DRIFT_OP_UNARY ..
 * DRIFT_OP_FILL), as kernels/ref/ref_aten_ops.c computes them. */
static void test_aten_ops(void) {
    int64_t s1[1] = {20011}, s3[3] = {4, 7, 5};
    hbuf x = hb(1, s1, 2.0, 0.02), pos = hb(1, s1, 1.0, 0), small = hb(1, s1, 0.5, 0), ax = hb(3, s3, 1.0, 0.01);
    for (int64_t i = 0; i < pos.n; i++) pos.v[i] = fabs(pos.v[i]) + 1e-3;
    for (int64_t i = 0; i < x.n; i += 97) x.v[i] = 0.0; /* MASK_BIAS sees zeros */
    hbuf *in_x[1] = {&x}, *in_pos[1] = {&pos}, *in_small[1] = {&small}, *in_ax[1] = {&ax};
    char l[96];
    for (int sub = 0; sub < DRIFT_UNARY_COUNT; sub++) {
        drift_op op = mk(DRIFT_OP_UNARY, 1);
        op.sub = sub;
        if (sub == DRIFT_UNARY_BITWISE_NOT) continue; /* integers only */
        if (drift_unary_is_bool(sub)) op.out = DRIFT_BOOL;
        if (sub == DRIFT_UNARY_SOFTPLUS) op.scalar = 1.0, op.step = 20.0;
        snprintf(l, sizeof l, "unary %s", drift_op_sub_name(DRIFT_OP_UNARY, sub));
        const int log_like = sub == DRIFT_UNARY_LOG || sub == DRIFT_UNARY_LOG2 || sub == DRIFT_UNARY_LOG10;
        compare_op(l, &op, log_like ? in_pos : (sub == DRIFT_UNARY_ASIN || sub == DRIFT_UNARY_ACOS) ? in_small : in_x,
                   1, 0, NULL);
        if (sub == DRIFT_UNARY_RSQRT || sub == DRIFT_UNARY_SQRT) {
            snprintf(l, sizeof l, "unary %s (positive)", drift_op_sub_name(DRIFT_OP_UNARY, sub));
            compare_op(l, &op, in_pos, 1, 0, NULL);
        }
    }
    const double pows[] = {2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.7};
    for (int sub = 0; sub < DRIFT_SCALAR_COUNT; sub++) {
        const int is_pow = sub == DRIFT_SCALAR_POW;
        for (size_t k = 0; k < (is_pow ? sizeof pows / sizeof *pows : 1); k++) {
            drift_op op = mk(DRIFT_OP_SCALAR, 1);
            op.sub = sub;
            op.scalar = is_pow ? pows[k] : sub == DRIFT_SCALAR_RPOW ? 2.0 : sub == DRIFT_SCALAR_DIV ? 3.0 : 0.1;
            snprintf(l, sizeof l, "scalar %s %g", drift_op_sub_name(DRIFT_OP_SCALAR, sub), op.scalar);
            compare_op(l, &op, is_pow ? in_pos : sub == DRIFT_SCALAR_RPOW ? in_small : in_x, 1, 0, NULL);
        }
    }
    /* DIV (and ADD) broadcasting both operands: [2, 1, 50] with [3, 1] -> [2, 3, 50] */
    int64_t da[3] = {2, 1, 50}, db[2] = {3, 1}, dc[3] = {2, 3, 50};
    hbuf a = hb(3, da, 1.0, 0.01), b = hb(2, db, 1.0, 0), c = hb(3, dc, 1.0, 0.01);
    for (int64_t i = 0; i < b.n; i++) b.v[i] += b.v[i] >= 0 ? 0.5 : -0.5;
    hbuf *in_ab[2] = {&a, &b}, *in_cb[2] = {&c, &b};
    const drift_op_kind kinds[2] = {DRIFT_OP_DIV, DRIFT_OP_ADD};
    for (int k = 0; k < 2; k++) {
        drift_op op = mk(kinds[k], 2);
        snprintf(l, sizeof l, "%s both broadcast", drift_op_name(kinds[k]));
        compare_op(l, &op, in_ab, 2, 0, NULL);
        snprintf(l, sizeof l, "%s in1 broadcast", drift_op_name(kinds[k]));
        compare_op(l, &op, in_cb, 2, 0, NULL);
    }
    const int dims[4] = {0, 1, 2, -1};
    for (int sub = 0; sub < DRIFT_REDUCE_COUNT; sub++)
        for (int k = 0; k < 4; k++) {
            drift_op op = mk(DRIFT_OP_REDUCE, 1);
            op.sub = sub;
            op.dim = dims[k];
            if (sub == DRIFT_REDUCE_ANY || sub == DRIFT_REDUCE_ALL) op.out = DRIFT_BOOL;
            if (sub == DRIFT_REDUCE_ARGMAX || sub == DRIFT_REDUCE_ARGMIN) op.out = DRIFT_I64;
            snprintf(l, sizeof l, "reduce %s dim %d", drift_op_sub_name(DRIFT_OP_REDUCE, sub), dims[k]);
            compare_op(l, &op, in_ax, 1, 0, NULL);
        }
    /* as_strided gathers (one with an expanded dim) and a scatter into the same region */
    drift_op op = mk(DRIFT_OP_STRIDED, 1);
    int64_t rs[2] = {3, 4}, es[3] = {2, 3, 5};
    op.start = 5;
    op.stride[0] = 10, op.stride[1] = 2;
    compare_op("strided", &op, in_ax, 1, 2, rs);
    op.start = 3;
    op.stride[0] = 0, op.stride[1] = 5, op.stride[2] = 1;
    compare_op("strided expand", &op, in_ax, 1, 3, es);
    hbuf src = hb(2, rs, 1.0, 0);
    hbuf *in_sc[2] = {&ax, &src};
    op = mk(DRIFT_OP_SCATTER, 2);
    op.start = 5;
    op.stride[0] = 10, op.stride[1] = 2;
    compare_op("scatter", &op, in_sc, 2, 0, NULL);
    /* fills: requested shape (no input) and an input's shape */
    int64_t fs[2] = {37, 29};
    for (int sub = 0; sub < 3; sub++) {
        op = mk(DRIFT_OP_FILL, 0);
        op.sub = sub;
        op.scalar = sub == 2 ? -1.0 : 0.5;
        op.step = sub == 2 ? 3.0 : 0.25;
        snprintf(l, sizeof l, "fill %d", sub);
        compare_op(l, &op, NULL, 0, 2, fs);
        op.n_in = 1;
        snprintf(l, sizeof l, "fill %d like an input", sub);
        compare_op(l, &op, in_ax, 1, 0, NULL);
    }
    hbuf *all[] = {&x, &pos, &small, &ax, &a, &b, &c, &src};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]->v);
}

static void test_metrics(void) {
    gc_case_set("metrics");
    int64_t s[1] = {300007};
    hbuf t = hb(1, s, 1.0, 0.001), r = hb(1, s, 1.0, 0.001);
    for (int64_t i = 0; i < t.n; i += 7) r.v[i] = t.v[i]; /* some equal pairs */
    drift_tensor tc, rcpu, tg, rg;
    drift_metric_acc a, b;
    drift_metric_acc_init(&a);
    drift_metric_acc_init(&b);
    drift_err e;
    if (upload(CPU, &t, &tc) || upload(CPU, &r, &rcpu) || upload(GPU, &t, &tg) || upload(GPU, &r, &rg)) return;
    /* twice into the same acc: the second call's chunks add onto the first's sums */
    for (int k = 0; k < 2; k++) {
        GC_CHECK(drift_backend_metrics(CPU, &tc, &rcpu, &a, &e) == 0, "cpu metrics: %s", gc_errstr(&e));
        GC_CHECK(drift_backend_metrics(GPU, &tg, &rg, &b, &e) == 0, "gpu metrics: %s", gc_errstr(&e));
    }
    GC_CHECK(a.numel == b.numel && a.n_diff == b.n_diff && a.nan_t == b.nan_t && a.inf_t == b.inf_t &&
                 a.nan_r == b.nan_r && a.inf_r == b.inf_r,
             "counts differ");
    GC_CHECK(a.argmax == b.argmax && a.max_abs_diff == b.max_abs_diff && a.max_abs_ref == b.max_abs_ref,
             "argmax %lld vs %lld", (long long)a.argmax, (long long)b.argmax);
    double pa[5] = {a.sum_abs_diff, a.sum_sq_diff, a.sum_tr, a.sum_tt, a.sum_rr},
           pb[5] = {b.sum_abs_diff, b.sum_sq_diff, b.sum_tr, b.sum_tt, b.sum_rr};
    for (int i = 0; i < 5; i++) GC_CHECK(same64(pa[i], pb[i]), "sum %d: cpu %a gpu %a (not bitwise equal)", i, pa[i], pb[i]);
    drift_backend_release(CPU, &tc);
    drift_backend_release(CPU, &rcpu);
    drift_backend_release(GPU, &tg);
    drift_backend_release(GPU, &rg);
    free(t.v);
    free(r.v);
}

/* fp32 transfers (rounded / widened on the device): the CPU oracle's casts bit
 * for bit, ties, float subnormals, overflow to inf, NaN and inf included. */
static void test_transfers(void) {
    gc_case_set("fp32 transfers");
    int64_t sh[1] = {100003};
    hbuf x = hb(1, sh, 1.0, 0.01);
    for (int64_t i = 0; i < x.n; i += 11) x.v[i] = (double)(float)x.v[i] * (1.0 + 0x1p-24); /* ties of the fp32 rounding */
    for (int64_t i = 5; i < x.n; i += 13) x.v[i] *= 1e-40;                                    /* fp32 subnormals */
    for (int64_t i = 7; i < x.n; i += 17) x.v[i] *= 1e39;                                     /* beyond FLT_MAX */
    drift_tensor tc, tg;
    drift_err e;
    float *fc = malloc((size_t)x.n * sizeof *fc), *fg = malloc((size_t)x.n * sizeof *fg);
    double *dc = malloc((size_t)x.n * sizeof *dc), *dg = malloc((size_t)x.n * sizeof *dg);
    if (!upload(CPU, &x, &tc) && !upload(GPU, &x, &tg)) {
        int ok = !drift_backend_download_f32(CPU, &tc, fc, &e) && !drift_backend_download_f32(GPU, &tg, fg, &e) &&
                 !drift_backend_upload_f32(CPU, &tc, fc, &e) && !drift_backend_upload_f32(GPU, &tg, fc, &e) &&
                 !drift_backend_download_f64(CPU, &tc, dc, &e) && !drift_backend_download_f64(GPU, &tg, dg, &e);
        GC_CHECK(ok, "transfers: %s", gc_errstr(&e));
        int64_t bad32 = 0, bad64 = 0;
        for (int64_t i = 0; ok && i < x.n; i++) {
            bad32 += !(memcmp(&fc[i], &fg[i], 4) == 0 || (isnan(fc[i]) && isnan(fg[i])));
            bad64 += !same64(dc[i], dg[i]);
        }
        GC_CHECK(bad32 == 0, "download_f32: %lld of %lld elements differ from the host's rounding", (long long)bad32,
                 (long long)x.n);
        GC_CHECK(bad64 == 0, "upload_f32: %lld of %lld elements differ from the host's widening", (long long)bad64,
                 (long long)x.n);
        drift_backend_release(CPU, &tc);
        drift_backend_release(GPU, &tg);
    }
    free(fc);
    free(fg);
    free(dc);
    free(dg);
    free(x.v);
}

/* Every site of one oracle forward, downloaded as fp64. */
typedef struct site_vals {
    int n;
    char name[512][96];
    int64_t numel[512];
    double *v[512];
} site_vals;

static int collect_site(const char *site, const drift_tensor *t, void *user, drift_err *err) {
    site_vals *sv = user;
    if (sv->n >= 512) return drift_err_set(err, DRIFT_E_INTERNAL, site, "more than 512 sites");
    double *v = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *v);
    if (!v) return drift_err_set(err, DRIFT_E_NOMEM, site, "out of memory");
    int rc = drift_backend_download_f64(t->be, t, v, err);
    if (rc) {
        free(v);
        return rc;
    }
    snprintf(sv->name[sv->n], sizeof sv->name[0], "%s", site);
    sv->numel[sv->n] = t->numel;
    sv->v[sv->n++] = v;
    return DRIFT_OK;
}

/* A whole wan2.2 oracle forward on both: every site and the output bitwise equal. */
static void test_forward(void) {
    gc_case_set("wan2.2 oracle forward");
    drift_err e;
    drift_model *m = NULL;
    drift_forward *f = NULL;
    drift_hostset *in = NULL;
    drift_exec_result rc_cpu, rc_gpu;
    memset(&rc_cpu, 0, sizeof rc_cpu);
    memset(&rc_gpu, 0, sizeof rc_gpu);
    static site_vals sc, sg;
    memset(&sc, 0, sizeof sc);
    memset(&sg, 0, sizeof sg);
    /* dim 96 / 3 heads / ffn 200 / 45 tokens + 13 text tokens: off every tile size */
    int ok = !drift_model_create("wan2.2:layers=2,dim=96,heads=3,ffn_dim=200,text_dim=40,text_len=13,frames=1,height=10,width=18",
                                 &m, &e) &&
             !drift_model_seed_params(m, 5, &e) && !drift_forward_prepare(m, NULL, DRIFT_SIDE_ORACLE, NULL, &f, &e) &&
             !drift_params_init_inputs(&m->cfg, 5, &in, &e) &&
             !drift_forward_run(f, m, CPU, in, collect_site, &sc, &rc_cpu, &e) &&
             !drift_forward_run(f, m, GPU, in, collect_site, &sg, &rc_gpu, &e);
    GC_CHECK(ok, "%s", gc_errstr(&e));
    if (ok) {
        GC_CHECK(sc.n == sg.n && sc.n > 0, "sites: cpu %d, gpu %d", sc.n, sg.n);
        int bad_sites = 0;
        int64_t elems = 0;
        for (int i = 0; i < sc.n && i < sg.n; i++) {
            int64_t bad = 0;
            if (strcmp(sc.name[i], sg.name[i]) != 0 || sc.numel[i] != sg.numel[i]) {
                GC_CHECK(0, "site %d: cpu %s (%lld), gpu %s (%lld)", i, sc.name[i], (long long)sc.numel[i], sg.name[i],
                         (long long)sg.numel[i]);
                continue;
            }
            for (int64_t k = 0; k < sc.numel[i]; k++) bad += !same64(sc.v[i][k], sg.v[i][k]);
            elems += sc.numel[i];
            if (bad) {
                if (bad_sites < 5) printf("  site %s: %lld of %lld elements differ\n", sc.name[i], (long long)bad, (long long)sc.numel[i]);
                bad_sites++;
            }
        }
        printf("  oracle forward: %d sites, %lld elements, %d sites not bitwise equal\n", sc.n, (long long)elems, bad_sites);
        GC_CHECK(bad_sites == 0, "%d of %d sites not bitwise equal", bad_sites, sc.n);
        int64_t bad = 0;
        GC_CHECK(rc_cpu.numel == rc_gpu.numel && rc_cpu.numel > 0, "output sizes");
        for (int64_t i = 0; i < rc_cpu.numel && rc_cpu.numel == rc_gpu.numel; i++) bad += !same64(rc_cpu.f64[i], rc_gpu.f64[i]);
        GC_CHECK(bad == 0, "output: %lld of %lld elements not bitwise equal", (long long)bad, (long long)rc_cpu.numel);
    }
    for (int i = 0; i < sc.n; i++) free(sc.v[i]);
    for (int i = 0; i < sg.n; i++) free(sg.v[i]);
    drift_exec_result_free(&rc_cpu);
    drift_exec_result_free(&rc_gpu);
    drift_hostset_free(in);
    drift_forward_free(f);
    drift_model_free(m);
}

/* The GPU oracle's GEMM (the linear of a 1.3B-wide FFN): throughput, printed for
 * bench/RESULTS.md; checked only to run. */
static void test_gemm_speed(void) {
    gc_case_set("gemm throughput");
    const int64_t M = 4096, N = 8960, K = 1536;
    int64_t xs[2] = {M, K}, ws[2] = {N, K};
    hbuf x = hb(2, xs, 1.0, 0), w = hb(2, ws, 0.05, 0);
    drift_tensor tx, tw, ty;
    drift_err e;
    memset(&ty, 0, sizeof ty);
    ty.dtype = DRIFT_F64;
    ty.ndim = 2;
    ty.shape[0] = M;
    ty.shape[1] = N;
    if (!upload(GPU, &x, &tx) && !upload(GPU, &w, &tw) && drift_backend_alloc(GPU, &ty, &e) == 0) {
        drift_op op = mk(DRIFT_OP_LINEAR, 2);
        const drift_tensor *in[2] = {&tx, &tw};
        int ok = drift_backend_run(GPU, &op, in, &ty, &e) == 0 && drift_backend_sync(GPU, &e) == 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        const int reps = 5;
        for (int r = 0; ok && r < reps; r++) ok = drift_backend_run(GPU, &op, in, &ty, &e) == 0;
        ok = ok && drift_backend_sync(GPU, &e) == 0;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        GC_CHECK(ok, "gemm: %s", gc_errstr(&e));
        const double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (ok)
            printf("BENCH ref_cuda_gemm M %lld N %lld K %lld: %.3f ms, %.2f TFLOP/s (fp64, sequential k, no FMA)\n",
                   (long long)M, (long long)N, (long long)K, 1e3 * sec / reps, 2.0 * M * N * K * reps / sec / 1e12);
        drift_backend_release(GPU, &ty);
        drift_backend_release(GPU, &tx);
        drift_backend_release(GPU, &tw);
    }
    free(x.v);
    free(w.v);
}

int main(void) {
    gc_require_gpu("test_cuda_ref_oracle");
    gc_seed(18);
    drift_err e;
    if (drift_backend_create("ref", &CPU, &e) || drift_backend_create("ref-cuda:0", &GPU, &e)) {
        printf("cannot create the backends: %s\n", gc_errstr(&e));
        return 1;
    }
    if (drift_backend_create("ref-cuda:0:attn_scratch=2000", &GPU_CHUNKED, &e)) { /* a few query rows per chunk */
        printf("cannot create the chunked backend: %s\n", gc_errstr(&e));
        return 1;
    }
    test_specs();
    test_ops();
    test_aten_ops();
    test_metrics();
    test_transfers();
    test_forward();
    test_gemm_speed();
    printf("  %lld op output elements compared bitwise\n", (long long)n_compared);
    drift_backend_free(CPU);
    drift_backend_free(GPU);
    drift_backend_free(GPU_CHUNKED);
    return gc_finish("test_cuda_ref_oracle");
}
