/* ATTENTION's layout 1 (q, k, v, out [B, L, H, D], kernels/backend.h) on the
 * CUDA backend, both paths (the attention=fused variant: strided loads and
 * stores in attention_fused.cu; =unfused: permute into [B, H, L, D] scratch,
 * cuBLASLt, permute back, attention_lt.c).
 *
 * For every case the inputs are drawn once in layout 0 ([B, H, L, D]) and
 * permuted on the host into layout 1. Then, in each mode:
 *   layout 1 on cuda (gc_run_case: run twice with the output poisoned with
 *   NaN then a finite sentinel, bitwise equal, guard zones and inputs
 *   untouched) within the bounds test_cuda_attention_fused.c uses of the cpu
 *   backend (2 ULPs of out + c * max|v|, c = 8e-3 bf16 P, 1e-3 fp16 P) and
 *   the ref backend (NMSE), both run in layout 1 too;
 *   layout 0 on cuda on the original data, permuted on the host into layout
 *   1: bitwise equal to the layout-1 result (NaN == NaN). This is the
 *   property the graph relies on: dropping the PERMUTE nodes changes no bit.
 *
 * Shapes: Dh = Dv in {64, 128}; Lq != Lk; Lk % 64 != 0 (a partial last key
 * tile); Lq % 128 != 0 (a partial query tile); B = 2, H = 3; an odd-offset
 * view (guard 1: the fused host side copies it to aligned memory, keeping
 * the layout); bf16 and fp16 compute, bf16 / fp16 / fp32 out; one larger
 * 1x1024x3x128 case; NaN in q and +inf in v; a small scratch budget
 * (attn_scratch=) so the unfused path chunks by rows; cases the
 * fused kernel does not take (Dh 80, Dv != Dh, fp32 compute): automatic
 * runs them unfused, and =fused fails with DRIFT_E_UNSUPPORTED. */
#include "gpu_check.h"

static gc_env E;
static drift_backend *small_scratch; /* attn_scratch=65536: 64 KiB (cached, gc_env_close frees it) */

static double max_abs(const gc_host *h) {
    double m = 0.0;
    for (int64_t i = 0; i < h->n; i++)
        if (isfinite(h->v[i]) && fabs(h->v[i]) > m) m = fabs(h->v[i]);
    return m;
}

static double dmax(double a, double b) { return a > b ? a : b; }
static double p_atol(drift_dtype c) { return c == DRIFT_BF16 ? 8e-3 : c == DRIFT_F16 ? 1e-3 : 1e-5; }
static double p_nmse(drift_dtype c) { return c == DRIFT_BF16 ? 3e-5 : c == DRIFT_F16 ? 3e-6 : 1e-9; }

/* [B, n1, n2, D] -> [B, n2, n1, D] on the host (dims 1 and 2 swapped). */
static void swap12(const float *src, float *dst, int64_t B, int64_t n1, int64_t n2, int64_t D) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < n1; i++)
            for (int64_t j = 0; j < n2; j++)
                memcpy(dst + ((b * n2 + j) * n1 + i) * D, src + ((b * n1 + i) * n2 + j) * D, (size_t)D * sizeof(float));
}

/* A layout-1 copy of a layout-0 host tensor [B, H, L, D]. */
static gc_host to_layout1(const gc_host *h) {
    int64_t s[4] = {h->shape[0], h->shape[2], h->shape[1], h->shape[3]};
    gc_host o = gc_host_make(h->dt, 4, s, 0.0);
    swap12(h->v, o.v, h->shape[0], h->shape[1], h->shape[2], h->shape[3]);
    return o;
}

static gc_case_spec mkspec(gc_host **in, drift_dtype c_dt, drift_dtype o_dt, float scale, int layout, int64_t guard) {
    gc_case_spec c;
    memset(&c, 0, sizeof c);
    c.op = gc_op(DRIFT_OP_ATTENTION, o_dt);
    c.op.compute = c_dt;
    c.op.scale = scale;
    c.op.layout = layout;
    c.n_in = 3;
    for (int i = 0; i < 3; i++) c.in[i] = in[i];
    c.out_ndim = -1;
    c.guard = guard;
    c.ulps = 2.0;
    c.atol = p_atol(c_dt) * max_abs(in[2]);
    c.nmse_ref = dmax(p_nmse(c_dt), 2.0 * gc_nmse_bound(o_dt));
    return c;
}

/* One case in one mode (NULL: automatic) on backend be. q, k, v in layout 0.
 * host_cmp = 0 skips the cpu/ref comparisons (non-finite data, where a p
 * rounded to 0 on one side turns inf into NaN). */
static void run_case(drift_backend *be, const char *mode, gc_host *q, gc_host *k, gc_host *v, drift_dtype c_dt,
                     drift_dtype o_dt, float scale, int64_t guard, int host_cmp) {
    char base[sizeof gc_case];
    memcpy(base, gc_case, sizeof base);
    gc_host q1 = to_layout1(q), k1 = to_layout1(k), v1 = to_layout1(v);
    gc_host *in0[3] = {q, k, v}, *in1[3] = {&q1, &k1, &v1};

    /* layout 1: vs cpu, ref, determinism, guards */
    gc_case_set("%s mode=%s layout 1", base, mode ? mode : "auto");
    gc_case_spec c1 = mkspec(in1, c_dt, o_dt, scale, 1, guard);
    if (!host_cmp) c1.ulps = -1.0, c1.nmse_ref = -1.0;
    int rc = gc_run_case(&E, gc_with_attention(be, mode), &c1);
    GC_CHECK(rc == 0 && c1.out_cuda, "layout 1 did not run");

    /* layout 0 on the original data, same mode */
    gc_case_set("%s mode=%s layout 0 vs 1", base, mode ? mode : "auto");
    gc_case_spec c0 = mkspec(in0, c_dt, o_dt, scale, 0, guard);
    int nd;
    int64_t shape[DRIFT_MAX_DIMS];
    if (!rc && c1.out_cuda && gc_out_shape(&c0, &nd, shape) == 0) {
        int64_t n = gc_numel(nd, shape);
        GC_CHECK(n == c1.out_numel, "output sizes differ: %lld vs %lld", (long long)n, (long long)c1.out_numel);
        float *o0 = malloc((size_t)(n > 0 ? n : 1) * sizeof(float)), *o0p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
        if (!o0 || !o0p) exit(2);
        int r0 = gc_run_cuda(gc_with_attention(be, mode), &c0, nd, shape, o0);
        GC_CHECK(r0 == 0, "layout 0 did not run");
        if (!r0 && n == c1.out_numel) {
            swap12(o0, o0p, shape[0], shape[1], shape[2], shape[3]); /* [B, H, Lq, Dv] -> [B, Lq, H, Dv] */
            gc_cmp_exact(c1.out_cuda, o0p, n, "cuda layout 1 vs cuda layout 0 permuted (bitwise)");
        }
        free(o0);
        free(o0p);
    }
    free(c1.out_cuda);
    gc_host_free(&q1);
    gc_host_free(&k1);
    gc_host_free(&v1);
    gc_case_set("%s", base);
}

typedef struct lcase {
    int64_t B, H, Lq, Lk, D, Dv;
    drift_dtype c_dt, o_dt;
    float scale;
    int64_t guard;
} lcase;

static void run_both(const lcase *t, drift_backend *be, int fused_ok) {
    int64_t qs[4] = {t->B, t->H, t->Lq, t->D}, ks[4] = {t->B, t->H, t->Lk, t->D}, vs[4] = {t->B, t->H, t->Lk, t->Dv};
    gc_host q = gc_host_make(t->c_dt, 4, qs, 1.0), k = gc_host_make(t->c_dt, 4, ks, 1.0),
            v = gc_host_make(t->c_dt, 4, vs, 1.0);
    gc_case_set("B=%lld H=%lld Lq=%lld Lk=%lld D=%lld Dv=%lld compute=%s out=%s scale=%g guard=%lld%s",
                (long long)t->B, (long long)t->H, (long long)t->Lq, (long long)t->Lk, (long long)t->D,
                (long long)t->Dv, gc_dt(t->c_dt), gc_dt(t->o_dt), (double)t->scale, (long long)t->guard,
                be == small_scratch ? " (64 KiB scratch)" : "");
    if (fused_ok) run_case(be, "fused", &q, &k, &v, t->c_dt, t->o_dt, t->scale, t->guard, 1);
    run_case(be, "unfused", &q, &k, &v, t->c_dt, t->o_dt, t->scale, t->guard, 1);
    if (!fused_ok) run_case(be, NULL, &q, &k, &v, t->c_dt, t->o_dt, t->scale, t->guard, 1);
    gc_host_free(&q);
    gc_host_free(&k);
    gc_host_free(&v);
}

static void test_shapes(void) {
    static const lcase cases[] = {
        {2, 3, 65, 129, 64, 64, DRIFT_BF16, DRIFT_BF16, 0.0f, 64},
        {2, 3, 129, 77, 128, 128, DRIFT_BF16, DRIFT_F32, 0.0f, 64},
        {2, 3, 200, 1000, 64, 64, DRIFT_F16, DRIFT_F16, 0.125f, 64},
        {2, 3, 7, 300, 128, 128, DRIFT_F16, DRIFT_BF16, 0.0f, 1},
        {1, 2, 1, 65, 128, 128, DRIFT_BF16, DRIFT_BF16, 0.0f, 1},
        {2, 3, 300, 1, 64, 64, DRIFT_BF16, DRIFT_F16, 0.0f, 64},
        {1, 3, 1024, 1024, 128, 128, DRIFT_BF16, DRIFT_BF16, 0.0f, 64},
        {1, 24, 256, 512, 128, 128, DRIFT_BF16, DRIFT_BF16, 0.0f, 64}, /* wan2.2 heads */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_both(&cases[i], E.cuda, 1);
}

/* The unfused path in row blocks (a 64 KiB budget holds a few query rows). */
static void test_small_scratch(void) {
    if (!small_scratch) {
        GC_CHECK(0, "no small-scratch backend");
        return;
    }
    static const lcase cases[] = {
        {2, 3, 129, 300, 64, 64, DRIFT_BF16, DRIFT_BF16, 0.0f, 64},
        {1, 2, 65, 1000, 128, 128, DRIFT_F16, DRIFT_F32, 0.0f, 64},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_both(&cases[i], small_scratch, 1);
}

/* Ops the fused kernel does not take: automatic runs them unfused. */
static void test_unfused_only(void) {
    static const lcase cases[] = {
        {2, 3, 33, 70, 80, 80, DRIFT_BF16, DRIFT_BF16, 0.0f, 64}, /* Dh 80 */
        {2, 3, 65, 129, 64, 32, DRIFT_BF16, DRIFT_F32, 0.0f, 64}, /* Dv != Dh */
        {1, 3, 40, 50, 64, 64, DRIFT_F32, DRIFT_F32, 0.0f, 64},   /* fp32 compute */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_both(&cases[i], E.cuda, 0);
        /* =fused must refuse in layout 1 as in layout 0 */
        const lcase *t = &cases[i];
        int64_t qs[4] = {t->B, t->Lq, t->H, t->D}, ks[4] = {t->B, t->Lk, t->H, t->D},
                vs[4] = {t->B, t->Lk, t->H, t->Dv}, os[4] = {t->B, t->Lq, t->H, t->Dv};
        gc_dev d[4];
        memset(d, 0, sizeof d);
        drift_err err;
        drift_err_clear(&err);
        drift_backend *fused = gc_with_attention(E.cuda, "fused");
        int ok = fused && !gc_dev_alloc(fused, t->c_dt, 4, qs, 0, &d[0]) && !gc_dev_alloc(fused, t->c_dt, 4, ks, 0, &d[1]) &&
                 !gc_dev_alloc(fused, t->c_dt, 4, vs, 0, &d[2]) && !gc_dev_alloc(fused, t->o_dt, 4, os, 0, &d[3]);
        if (ok) {
            drift_op op = gc_op(DRIFT_OP_ATTENTION, t->o_dt);
            op.compute = t->c_dt;
            op.n_in = 3;
            op.layout = 1;
            const drift_tensor *pin[3] = {&d[0].t, &d[1].t, &d[2].t};
            int rc = drift_backend_run(fused, &op, pin, &d[3].t, &err);
            GC_CHECK(rc == DRIFT_E_UNSUPPORTED, "attention=fused on an unsupported layout-1 op: status %d (want %d): %s",
                     rc, DRIFT_E_UNSUPPORTED, gc_errstr(&err));
        }
        for (int j = 0; j < 4; j++) gc_dev_free(&d[j]);
    }
}

/* NaN in q, +inf in v: same non-finite positions in both layouts (bitwise
 * compare treats NaN == NaN), and some exist. */
static void test_nonfinite(void) {
    const int64_t B = 2, H = 3, Lq = 65, Lk = 129, D = 64;
    int64_t qs[4] = {B, H, Lq, D}, ks[4] = {B, H, Lk, D};
    gc_host q = gc_host_make(DRIFT_BF16, 4, qs, 1.0), k = gc_host_make(DRIFT_BF16, 4, ks, 1.0),
            v = gc_host_make(DRIFT_BF16, 4, ks, 1.0);
    q.v[((1 * H + 2) * Lq + 3) * D + 5] = NAN;       /* b 1, h 2, row 3 */
    v.v[((0 * H + 1) * Lk + 100) * D + 7] = INFINITY; /* b 0, h 1, key 100, col 7 */
    gc_case_set("non-finite B=2 H=3 Lq=65 Lk=129 D=64 bf16");
    for (int m = 0; m < 2; m++) {
        run_case(E.cuda, m ? "unfused" : "fused", &q, &k, &v, DRIFT_BF16, DRIFT_BF16, 0.0f, 64, 0);
        /* the non-finite outputs exist: the NaN row of q (b 1, h 2, row 3) */
        gc_host q1 = to_layout1(&q), k1 = to_layout1(&k), v1 = to_layout1(&v);
        gc_host *in1[3] = {&q1, &k1, &v1};
        gc_case_spec c = mkspec(in1, DRIFT_BF16, DRIFT_BF16, 0.0f, 1, 64);
        int nd;
        int64_t shape[DRIFT_MAX_DIMS];
        if (gc_out_shape(&c, &nd, shape) == 0) {
            int64_t n = gc_numel(nd, shape);
            float *o = malloc((size_t)n * sizeof(float));
            if (!o) exit(2);
            int rc = gc_run_cuda(gc_with_attention(E.cuda, m ? "unfused" : "fused"), &c, nd, shape, o);
            if (!rc) {
                int64_t nan_row = 0;
                for (int64_t d = 0; d < D; d++) nan_row += isnan(o[((1 * Lq + 3) * H + 2) * D + d]) != 0;
                GC_CHECK(nan_row == D, "the NaN in q gave %lld NaN outputs in its row, want %lld", (long long)nan_row,
                         (long long)D);
                GC_CHECK(isnan(o[((0 * Lq + 0) * H + 2) * D + 0]) == 0, "NaN leaked into another head");
            }
            free(o);
        }
        gc_host_free(&q1);
        gc_host_free(&k1);
        gc_host_free(&v1);
    }
    gc_host_free(&q);
    gc_host_free(&k);
    gc_host_free(&v);
}

int main(void) {
    gc_require_gpu("test_cuda_attention_layout");
    gc_seed(777);
    gc_env_open(&E);
    if (!E.cuda) return gc_finish("test_cuda_attention_layout");
    small_scratch = gc_cached_spec("cuda:attn_scratch=65536");
    test_unfused_only();
    test_nonfinite();
    test_shapes();
    test_small_scratch();
    gc_env_close(&E);
    return gc_finish("test_cuda_attention_layout");
}
