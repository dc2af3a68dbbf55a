/* LINEAR and ATTENTION on the CUDA backend vs the cpu and ref backends.
 *
 * LINEAR y = x W^T (+ b): shapes from (1,1,1) to (2,3072,3072) incl. odd M,
 * N, K; dtype configurations (operands/compute/out): bf16/bf16/bf16,
 * bf16/bf16/fp32, fp16/fp16/fp16, fp16/fp16/fp32, fp32/fp32/fp32,
 * fp32 operands with bf16 compute (operands rounded first), bf16 x with fp32
 * W and fp32 compute (widened); bias none / in the output dtype (cuBLASLt
 * BIAS epilogue) / in another dtype (unfused: fp32 cuBLASLt output + bias
 * kernel). Backends: default (cuBLASLt, fallbacks automatic),
 * gemm=unfused, gemm=naive; views at odd element
 * offsets (guard = 1) force cuBLASLt's alignment handling.
 *   vs cpu: 1 ULP of a 16-bit output (4 for fp32) + atol K*2^-21*max|x|*max|W|
 *           (fp32 accumulation in another order)
 *   vs ref: NMSE <= 2 * max(bound(out), bound(compute)), fp32: 1e-9
 *
 * ATTENTION: (B,H,Lq,Lk,Dh,Dv) from (1,1,1,1,1,1) to (1,2,129,77,80,80),
 * odd head dims, Dv != Dh, compute bf16/fp16/fp32, scale 0 (= 1/sqrt(Dh))
 * and explicit, large logits (max subtraction). Backends: default,
 * attn_scratch=4096 (one head at a time, blocks of query rows),
 * attn_scratch=<4.5 heads> (several heads per chunk, ragged last
 * chunk), gemm=naive.
 *   vs cpu: 2 ULPs of out + atol c * max|v| (c = 8e-3 bf16, 1e-3 fp16,
 *           1e-5 fp32: P may round differently where p differs in the last bit)
 *   vs ref: NMSE <= 3e-5 (bf16 P), 3e-6 (fp16), 1e-9 (fp32), or the output
 *           bound when larger. */
#include "gpu_check.h"

static gc_env E;

typedef struct variant {
    drift_backend *be;
    const char *name;
} variant;

static variant lin_v[3];
static int n_lin_v;
static variant att_v[4];
static int n_att_v;

static double max_abs(const gc_host *h) {
    double m = 0;
    for (int64_t i = 0; i < h->n; i++)
        if (isfinite(h->v[i]) && fabs(h->v[i]) > m) m = fabs(h->v[i]);
    return m;
}

static double dmax(double a, double b) { return a > b ? a : b; }

static void run_variants(gc_case_spec *c, const variant *v, int nv) {
    char base[sizeof gc_case];
    snprintf(base, sizeof base, "%s", gc_case);
    for (int i = 0; i < nv; i++) {
        gc_case_set("%s | %s", base, v[i].name);
        gc_run_case(&E, v[i].be, c);
        free(c->out_cuda);
        c->out_cuda = NULL;
    }
    gc_case_set("%s", base);
}

typedef struct lin_cfg {
    drift_dtype x, w, compute, out;
} lin_cfg;

static void test_linear(void) {
    static const int64_t mnk[][3] = {{1, 1, 1},     {1, 17, 3},     {3, 17, 33},   {17, 33, 3},
                                     {64, 64, 64},  {127, 255, 129}, {4097, 5, 7},  {33, 4097, 17},
                                     {256, 1024, 1536}, {2, 3072, 3072}, {6, 8, 0}};
    static const lin_cfg cfgs[] = {
        {DRIFT_BF16, DRIFT_BF16, DRIFT_BF16, DRIFT_BF16}, {DRIFT_BF16, DRIFT_BF16, DRIFT_BF16, DRIFT_F32},
        {DRIFT_F16, DRIFT_F16, DRIFT_F16, DRIFT_F16},     {DRIFT_F16, DRIFT_F16, DRIFT_F16, DRIFT_F32},
        {DRIFT_F32, DRIFT_F32, DRIFT_F32, DRIFT_F32},     {DRIFT_F32, DRIFT_F32, DRIFT_BF16, DRIFT_BF16},
        {DRIFT_BF16, DRIFT_F32, DRIFT_F32, DRIFT_F32},
    };
    const int ncfg = (int)(sizeof cfgs / sizeof *cfgs);
    for (size_t s = 0; s < sizeof mnk / sizeof *mnk; s++)
        for (int ci = 0; ci < ncfg; ci++) {
            int64_t M = mnk[s][0], N = mnk[s][1], K = mnk[s][2];
            /* the big shapes with a subset of configurations */
            if (M * N * K > 50000000 && ci % 3 != 0) continue;
            const lin_cfg *cf = &cfgs[ci];
            int bias_mode = (int)((s + (size_t)ci) % 3); /* 0 none, 1 out dtype, 2 other dtype */
            int64_t xs[3] = {M % 2 == 0 ? 2 : M, M % 2 == 0 ? M / 2 : K, K};
            int xnd = M % 2 == 0 ? 3 : 2;
            gc_host x = gc_host_make(cf->x, xnd, xs, 1.0);
            int64_t ws[2] = {N, K};
            gc_host w = gc_host_make(cf->w, 2, ws, 1.0 / sqrt((double)(K > 0 ? K : 1)));
            drift_dtype bdt = bias_mode == 1 ? cf->out : (cf->out == DRIFT_F32 ? DRIFT_BF16 : DRIFT_F32);
            int64_t bs[1] = {N};
            gc_host b = gc_host_make(bdt, 1, bs, 1.0);
            drift_op op = gc_op(DRIFT_OP_LINEAR, cf->out);
            op.compute = cf->compute;
            gc_case_spec c;
            memset(&c, 0, sizeof c);
            c.op = op;
            c.n_in = bias_mode ? 3 : 2;
            c.in[0] = &x;
            c.in[1] = &w;
            c.in[2] = &b;
            c.out_ndim = -1;
            c.guard = (s + (size_t)ci) % 4 == 3 ? 1 : 64;
            c.ulps = cf->out == DRIFT_F32 ? 4.0 : 1.0;
            c.atol = (double)(K > 0 ? K : 1) * ldexp(1.0, -21) * dmax(max_abs(&x), 1e-30) * dmax(max_abs(&w), 1e-30);
            double bound = 2.0 * dmax(gc_nmse_bound(cf->out), cf->compute == DRIFT_F32 ? 0.0 : gc_nmse_bound(cf->compute));
            if (cf->out == DRIFT_F32 && cf->compute == DRIFT_F32) bound = 1e-9;
            c.nmse_ref = bound;
            gc_case_set("linear M=%lld N=%lld K=%lld x=%s W=%s compute=%s out=%s bias=%s guard=%lld", (long long)M,
                        (long long)N, (long long)K, gc_dt(cf->x), gc_dt(cf->w), gc_dt(cf->compute), gc_dt(cf->out),
                        bias_mode ? gc_dt(bdt) : "none", (long long)c.guard);
            run_variants(&c, lin_v, n_lin_v);
            gc_host_free(&x);
            gc_host_free(&w);
            gc_host_free(&b);
        }
}

/* A fused bias (one rounding) differs from LINEAR + ADD (two roundings).
 * The bias is large (N(0,3)) against the product (N(0,1)) so that rounding
 * before the bias is visible: the cuda LINEAR with a bf16 bias must equal
 * the cpu's within 1 ULP, on shapes where cuBLASLt would pick split-K
 * (small M*N, whose reduction kernel rounds before adding the bias) and on
 * a large one; and on the first shape it must differ from the two-rounding
 * result somewhere (the epilogue really rounds once). */
static void test_bias_rounding(void) {
    static const int64_t mnk[][3] = {{64, 128, 256}, {127, 255, 129}, {17, 33, 3}, {2, 3072, 3072}, {33, 4097, 17}};
    for (size_t s = 0; s < sizeof mnk / sizeof *mnk; s++) {
        int64_t M = mnk[s][0], N = mnk[s][1], K = mnk[s][2];
        int64_t xs[2] = {M, K}, ws[2] = {N, K}, bs[1] = {N};
        gc_host x = gc_host_make(DRIFT_BF16, 2, xs, 1.0), w = gc_host_make(DRIFT_BF16, 2, ws, 1.0 / sqrt((double)K)),
                b = gc_host_make(DRIFT_BF16, 1, bs, 3.0);
        drift_op op = gc_op(DRIFT_OP_LINEAR, DRIFT_BF16);
        op.compute = DRIFT_BF16;
        gc_case_spec c;
        memset(&c, 0, sizeof c);
        c.op = op;
        c.n_in = 3;
        c.in[0] = &x;
        c.in[1] = &w;
        c.in[2] = &b;
        c.out_ndim = -1;
        c.guard = 64;
        c.ulps = 1.0;
        c.atol = (double)K * ldexp(1.0, -21) * max_abs(&x) * max_abs(&w);
        c.nmse_ref = 4e-5;
        gc_case_set("linear fused bias bf16 M=%lld N=%lld K=%lld", (long long)M, (long long)N, (long long)K);
        gc_run_case(&E, E.cuda, &c);
        float *fused = c.out_cuda;
        c.out_cuda = NULL;
        c.n_in = 2;
        gc_case_set("linear no bias bf16 M=%lld N=%lld K=%lld", (long long)M, (long long)N, (long long)K);
        gc_run_case(&E, E.cuda, &c);
        float *nobias = c.out_cuda;
        c.out_cuda = NULL;
        if (fused && nobias && s == 0) {
            int64_t n = M * N, differ = 0;
            for (int64_t i = 0; i < n; i++) {
                float two = drift_round_to(nobias[i] + b.v[i % N], DRIFT_BF16);
                differ += !gc_same_bits(two, fused[i]);
            }
            GC_CHECK(differ > 0, "fused bias equals bias added after rounding everywhere (rounded twice?)");
        }
        free(fused);
        free(nobias);
        gc_host_free(&x);
        gc_host_free(&w);
        gc_host_free(&b);
    }
}

static void test_attention(void) {
    static const int64_t shp[][6] = {
        {1, 1, 1, 1, 1, 1},    {1, 1, 1, 7, 16, 16},  {2, 3, 17, 33, 64, 64}, {1, 2, 129, 77, 80, 80},
        {1, 1, 300, 5, 8, 8},  {1, 2, 5, 300, 3, 3},  {1, 1, 64, 64, 128, 64}, {2, 2, 40, 40, 32, 48},
    };
    static const drift_dtype cdt[3] = {DRIFT_BF16, DRIFT_F16, DRIFT_F32};
    for (size_t s = 0; s < sizeof shp / sizeof *shp; s++)
        for (int ci = 0; ci < 3; ci++) {
            const int64_t *p = shp[s];
            drift_dtype c_dt = cdt[ci];
            drift_dtype o_dt = (s + (size_t)ci) % 2 ? DRIFT_F32 : c_dt;
            int64_t qs[4] = {p[0], p[1], p[2], p[4]}, ks[4] = {p[0], p[1], p[3], p[4]}, vs[4] = {p[0], p[1], p[3], p[5]};
            double qscale = s == 7 ? 8.0 : 1.0; /* large logits */
            gc_host q = gc_host_make(c_dt, 4, qs, qscale), k = gc_host_make(c_dt, 4, ks, 1.0),
                    v = gc_host_make(c_dt, 4, vs, 1.0);
            drift_op op = gc_op(DRIFT_OP_ATTENTION, o_dt);
            op.compute = c_dt;
            op.scale = s % 3 == 1 ? 0.3f : 0.0f;
            gc_case_spec c;
            memset(&c, 0, sizeof c);
            c.op = op;
            c.n_in = 3;
            c.in[0] = &q;
            c.in[1] = &k;
            c.in[2] = &v;
            c.out_ndim = -1;
            c.guard = s == 5 ? 1 : 64;
            c.ulps = 2.0;
            double ca = c_dt == DRIFT_BF16 ? 8e-3 : c_dt == DRIFT_F16 ? 1e-3 : 1e-5;
            c.atol = ca * max_abs(&v);
            double pb = c_dt == DRIFT_BF16 ? 3e-5 : c_dt == DRIFT_F16 ? 3e-6 : 1e-9;
            c.nmse_ref = dmax(pb, 2.0 * gc_nmse_bound(o_dt));
            gc_case_set("attention B=%lld H=%lld Lq=%lld Lk=%lld Dh=%lld Dv=%lld compute=%s out=%s scale=%g",
                        (long long)p[0], (long long)p[1], (long long)p[2], (long long)p[3], (long long)p[4],
                        (long long)p[5], gc_dt(c_dt), gc_dt(o_dt), (double)op.scale);
            run_variants(&c, att_v, n_att_v);
            gc_host_free(&q);
            gc_host_free(&k);
            gc_host_free(&v);
        }
    /* q, k, v in fp32 with bf16 compute: rounded to bf16 first, as on the cpu */
    {
        int64_t qs[4] = {1, 2, 33, 64};
        gc_host q = gc_host_make(DRIFT_F32, 4, qs, 1.0), k = gc_host_make(DRIFT_F32, 4, qs, 1.0),
                v = gc_host_make(DRIFT_F32, 4, qs, 1.0);
        drift_op op = gc_op(DRIFT_OP_ATTENTION, DRIFT_BF16);
        op.compute = DRIFT_BF16;
        gc_case_spec c;
        memset(&c, 0, sizeof c);
        c.op = op;
        c.n_in = 3;
        c.in[0] = &q;
        c.in[1] = &k;
        c.in[2] = &v;
        c.out_ndim = -1;
        c.guard = 64;
        c.ulps = 2.0;
        c.atol = 8e-3 * max_abs(&v);
        c.nmse_ref = 1e-4; /* the ref uses the unrounded fp32 operands */
        gc_case_set("attention fp32 operands, bf16 compute");
        run_variants(&c, att_v, n_att_v);
        gc_host_free(&q);
        gc_host_free(&k);
        gc_host_free(&v);
    }
}

int main(void) {
    gc_require_gpu("test_cuda_gemm");
    gc_seed(777);
    gc_env_open(&E);
    if (!E.cuda) return gc_finish("test_cuda_gemm");
    lin_v[0] = (variant){E.cuda, "default"};
    lin_v[1] = (variant){gc_cuda_with_opt("gemm", "unfused"), "gemm-unfused"};
    lin_v[2] = (variant){gc_cuda_with_opt("gemm", "naive"), "gemm-naive"};
    n_lin_v = 1;
    for (int i = 1; i < 3; i++) {
        GC_CHECK(lin_v[i].be != NULL, "variant %s", lin_v[i].name);
        if (lin_v[i].be) lin_v[n_lin_v++] = lin_v[i];
    }
    att_v[0] = (variant){E.cuda, "default"};
    /* 4.5 heads of the (2,3,17,33,64,64) bf16 case (Lq * (Lk*4 + Lk*2 + 4 + Dv*4) bytes per head):
       chunks of 4 heads, then a ragged chunk of 2 */
    char budget[32];
    snprintf(budget, sizeof budget, "%d", (int)(4.5 * 17 * (33 * 4 + 33 * 2 + 4 + 64 * 4)));
    att_v[1] = (variant){gc_cuda_with_opt("attn_scratch", "4096"), "attn-rowchunks"};
    att_v[2] = (variant){gc_cuda_with_opt("attn_scratch", budget), "attn-headchunks"};
    att_v[3] = (variant){gc_cuda_with_opt("gemm", "naive"), "attn-naive-gemm"};
    n_att_v = 1;
    for (int i = 1; i < 4; i++) {
        GC_CHECK(att_v[i].be != NULL, "variant %s", att_v[i].name);
        if (att_v[i].be) att_v[n_att_v++] = att_v[i];
    }

    test_linear();
    test_bias_rounding();
    test_attention();

    for (int i = 1; i < n_lin_v; i++) drift_backend_free(lin_v[i].be);
    for (int i = 1; i < n_att_v; i++) drift_backend_free(att_v[i].be);
    gc_env_close(&E);
    return gc_finish("test_cuda_gemm");
}
