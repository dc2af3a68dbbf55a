/* The fused ATTENTION kernels (kernels/cuda/attention_wgmma.cu on sm_90,
 * kernels/cuda/attention_fused.cu everywhere) against the unfused CUDA path,
 * the cpu backend and the fp64 ref backend.
 *
 * The path is the backend spec's attention= option (fused_wgmma | fused_mma
 * | fused | unfused | auto), fixed at creation, so the test keeps one
 * backend per path (gc_with_attention); every case below runs once per fused kernel the device runs,
 * and the two kernels are compared with each other (>= 99% bitwise equal on
 * bf16 output; "fused" is the wgmma kernel on sm_90).
 *
 * Shapes: Lq x Lk over {1, 7, 64, 65, 127, 128, 129, 1000}^2 (64 pairs),
 * Dh = Dv in {64, 128}, B*H in {1, 2, 6}, compute bf16/fp16, out
 * bf16/fp16/fp32, scale 0 (1/sqrt(Dh)) or explicit, some views at odd element
 * offsets (guard 1: the host side copies them to 16-byte aligned memory);
 * one 1x1x4096x4096x128 bf16 case; large logits (scores ~ +-50, random);
 * scores ramping up / down across 16 key tiles (the running max changes on
 * every tile / never after the first).
 *
 * Every fused run: twice, output poisoned with NaN then a finite sentinel,
 * bitwise identical (every element written, deterministic), guard zones and
 * inputs untouched (gc_run_cuda). Then:
 *   vs cpu:     2 ULPs of out + c * max|v| (c = 8e-3 bf16 P, 1e-3 fp16 P), as
 *               tests/gpu/test_cuda_gemm.c bounds the unfused path;
 *   vs ref:     NMSE <= max(3e-5 bf16 / 3e-6 fp16, 2 * output bound), same;
 *   vs unfused: same NaN/inf positions; |f - u| <= the cpu bound; mean
 *               relative difference sum|f-u| / sum|u| <= 1e-3 (16-bit out),
 *               1e-4 (fp32 out); for 16-bit outputs >= 99% of the elements
 *               bitwise equal (+ one row of slack for tiny cases). Reason: s
 *               differs from cuBLASLt's only in the fp32 summation order
 *               (ULP level, ~1e-7 relative), so a p's bf16/fp16 rounding
 *               flips with probability ~1e-7 / 2^-8 per element, and l / the
 *               P.V sums differ at fp32 ULP level, which flips a 16-bit
 *               output rounding with probability ~1e-4..1e-3.
 * NaN propagation: NaN in one q element, one k element, one v element and
 * +inf in one v element give the same non-finite positions as the unfused
 * path (and some exist).
 * Variant switch (the spec's attention= option, one backend per variant):
 * fused on an unsupported op (Dh 80, fp32 compute) fails with
 * DRIFT_E_UNSUPPORTED; automatic there equals unfused bitwise; on a
 * supported op automatic and attention=auto equal fused bitwise, and
 * unfused differs from fused (fp32 out: fp32 summation orders differ); an
 * unknown attention= value is refused at creation (DRIFT_E_INPUT). */
#include "gpu_check.h"

static gc_env E;

/* The fused kernel under test: "fused_wgmma" (sm_90) or "fused_mma" (main
 * runs every case for each kernel the device supports). */
static const char *g_fused = "fused";

static double max_abs(const gc_host *h) {
    double m = 0.0;
    for (int64_t i = 0; i < h->n; i++)
        if (isfinite(h->v[i]) && fabs(h->v[i]) > m) m = fabs(h->v[i]);
    return m;
}

static double dmax(double a, double b) { return a > b ? a : b; }

static double p_atol(drift_dtype c) { return c == DRIFT_BF16 ? 8e-3 : c == DRIFT_F16 ? 1e-3 : 1e-5; }
static double p_nmse(drift_dtype c) { return c == DRIFT_BF16 ? 3e-5 : c == DRIFT_F16 ? 3e-6 : 1e-9; }

/* One run on E.cuda in `mode` (gc_run_cuda: poison, rerun, guards). Caller frees. */
static float *run_mode(gc_case_spec *c, const char *mode, int64_t *n_out) {
    int nd;
    int64_t shape[DRIFT_MAX_DIMS];
    if (gc_out_shape(c, &nd, shape)) return NULL;
    int64_t n = gc_numel(nd, shape);
    float *o = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!o) exit(2);
    int rc = gc_run_cuda(gc_with_attention(E.cuda, mode), c, nd, shape, o);
    if (rc) {
        free(o);
        return NULL;
    }
    *n_out = n;
    return o;
}

/* fused vs unfused (see the header). dv: row length (slack of one row). */
static void cmp_fused_unfused(const float *f, const float *u, int64_t n, drift_dtype out_dt, double atol, int64_t dv) {
    int64_t parity = 0, outside = 0, differ = 0;
    double sad = 0.0, sau = 0.0, worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (!gc_same_bits(f[i], u[i])) differ++;
        if (!isfinite(f[i]) || !isfinite(u[i])) {
            int ok = isnan(f[i]) ? isnan(u[i]) : (f[i] == u[i]);
            if (!ok) {
                if (parity < 5)
                    fprintf(stderr, "  [%s] non-finite mismatch at %lld: fused %g unfused %g\n", gc_case, (long long)i,
                            (double)f[i], (double)u[i]);
                parity++;
            }
            continue;
        }
        double d = fabs((double)f[i] - (double)u[i]);
        double m = dmax(fabs(f[i]), fabs(u[i]));
        double tol = 2.0 * gc_ulp(m, out_dt) + atol;
        if (d > tol) {
            if (outside < 5)
                fprintf(stderr, "  [%s] at %lld: fused %.9g unfused %.9g (tol %g)\n", gc_case, (long long)i,
                        (double)f[i], (double)u[i], tol);
            outside++;
        }
        if (d > worst) worst = d;
        sad += d;
        sau += fabs(u[i]);
    }
    double mrel = sau > 0 ? sad / sau : sad;
    double mrel_bound = out_dt == DRIFT_F32 ? 1e-4 : 1e-3;
    GC_CHECK(parity == 0, "fused vs unfused: %lld non-finite positions differ", (long long)parity);
    GC_CHECK(outside == 0, "fused vs unfused: %lld of %lld elements outside 2 ULPs + %g (worst |d| %g)",
             (long long)outside, (long long)n, atol, worst);
    GC_CHECK(mrel <= mrel_bound, "fused vs unfused: mean relative difference %.3e > %.1e", mrel, mrel_bound);
    if (out_dt != DRIFT_F32) {
        int64_t allow = (int64_t)(0.01 * (double)n) + dv;
        GC_CHECK(differ <= allow, "fused vs unfused: %lld of %lld elements differ bitwise (> %lld: < 99%% equal)",
                 (long long)differ, (long long)n, (long long)allow);
    }
    if (getenv("DRIFT_TEST_VERBOSE"))
        printf("  %-90s differ %6.3f%% mrel %.2e worst %.2e\n", gc_case, n ? 100.0 * (double)differ / (double)n : 0.0,
               mrel, worst);
}

/* One full case: fused (vs cpu, ref, determinism), unfused, fused vs unfused. */
static void run_full(gc_host *q, gc_host *k, gc_host *v, drift_dtype c_dt, drift_dtype o_dt, float scale,
                     int64_t guard) {
    drift_op op = gc_op(DRIFT_OP_ATTENTION, o_dt);
    op.compute = c_dt;
    op.scale = scale;
    gc_case_spec c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.n_in = 3;
    c.in[0] = q;
    c.in[1] = k;
    c.in[2] = v;
    c.out_ndim = -1;
    c.guard = guard;
    c.ulps = 2.0;
    c.atol = p_atol(c_dt) * max_abs(v);
    c.nmse_ref = dmax(p_nmse(c_dt), 2.0 * gc_nmse_bound(o_dt));
    int rc = gc_run_case(&E, gc_with_attention(E.cuda, g_fused), &c);
    if (rc || !c.out_cuda) return;
    int64_t n = 0;
    float *u = run_mode(&c, "unfused", &n);
    if (u) {
        GC_CHECK(n == c.out_numel, "output sizes differ");
        if (n == c.out_numel) cmp_fused_unfused(c.out_cuda, u, n, o_dt, c.atol, v->shape[3]);
        free(u);
    }
    free(c.out_cuda);
}

static void test_shapes(void) {
    static const int64_t L[8] = {1, 7, 64, 65, 127, 128, 129, 1000};
    static const int64_t BHs[3][2] = {{1, 1}, {1, 2}, {2, 3}};
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) {
            const int h = i * 7 + j * 3;
            const int64_t Lq = L[i], Lk = L[j];
            const int64_t D = (h & 1) ? 128 : 64;
            const drift_dtype c_dt = ((h >> 1) & 1) ? DRIFT_F16 : DRIFT_BF16;
            const int oi = (i + 2 * j) % 3;
            const drift_dtype o_dt = oi == 0 ? c_dt : oi == 1 ? DRIFT_F32 : (c_dt == DRIFT_BF16 ? DRIFT_F16 : DRIFT_BF16);
            const float scale = (i + j) % 3 == 0 ? 0.125f : 0.0f;
            int bi = (i + j) % 3;
            if (Lq * Lk > 200000 && bi == 2) bi = 1; /* keep the fp64 ref cheap */
            const int64_t B = BHs[bi][0], H = BHs[bi][1];
            const int64_t guard = (i + j) % 4 == 3 ? 1 : 64;
            int64_t qs[4] = {B, H, Lq, D}, ks[4] = {B, H, Lk, D};
            gc_host q = gc_host_make(c_dt, 4, qs, 1.0), k = gc_host_make(c_dt, 4, ks, 1.0),
                    v = gc_host_make(c_dt, 4, ks, 1.0);
            gc_case_set("%s B=%lld H=%lld Lq=%lld Lk=%lld D=%lld compute=%s out=%s scale=%g guard=%lld", g_fused,
                        (long long)B, (long long)H, (long long)Lq, (long long)Lk, (long long)D, gc_dt(c_dt),
                        gc_dt(o_dt), (double)scale, (long long)guard);
            run_full(&q, &k, &v, c_dt, o_dt, scale, guard);
            gc_host_free(&q);
            gc_host_free(&k);
            gc_host_free(&v);
        }
}

static void test_big(void) {
    int64_t s[4] = {1, 1, 4096, 128};
    gc_host q = gc_host_make(DRIFT_BF16, 4, s, 1.0), k = gc_host_make(DRIFT_BF16, 4, s, 1.0),
            v = gc_host_make(DRIFT_BF16, 4, s, 1.0);
    gc_case_set("%s 1x1x4096x4096 D=128 bf16 out=bf16", g_fused);
    run_full(&q, &k, &v, DRIFT_BF16, DRIFT_BF16, 0.0f, 64);
    gc_host_free(&q);
    gc_host_free(&k);
    gc_host_free(&v);
}

/* Scores ~ +-50: q ~ N(0, 20^2), k ~ N(0, 1), scale 1/sqrt(D): s ~ N(0, 20^2). */
static void test_large_logits(void) {
    for (int ci = 0; ci < 2; ci++) {
        drift_dtype c_dt = ci ? DRIFT_F16 : DRIFT_BF16;
        int64_t qs[4] = {1, 2, 129, 128}, ks[4] = {1, 2, 1000, 128};
        gc_host q = gc_host_make(c_dt, 4, qs, 20.0), k = gc_host_make(c_dt, 4, ks, 1.0),
                v = gc_host_make(c_dt, 4, ks, 1.0);
        gc_case_set("%s large logits (s ~ +-50) Lq=129 Lk=1000 D=128 compute=%s out=%s", g_fused, gc_dt(c_dt),
                    gc_dt(ci ? DRIFT_F32 : c_dt));
        run_full(&q, &k, &v, c_dt, ci ? DRIFT_F32 : c_dt, 0.0f, 64);
        gc_host_free(&q);
        gc_host_free(&k);
        gc_host_free(&v);
    }
}

/* s_j ramps monotonically from about -50 to +50 over the keys (up) or back
 * (down): with 16 key tiles the running max is replaced on every tile (up)
 * or set by the first tile only (down). q = 1 + small noise, k[j] = r_j +
 * small noise, scale 1/sqrt(D): s_j ~ sqrt(D) * r_j. */
static void test_ramps(void) {
    for (int dir = 0; dir < 2; dir++)
        for (int di = 0; di < 2; di++) {
            const int64_t D = di ? 128 : 64, Lq = 65, Lk = 1000;
            const drift_dtype c_dt = di ? DRIFT_BF16 : DRIFT_F16;
            int64_t qs[4] = {1, 1, Lq, D}, ks[4] = {1, 1, Lk, D};
            gc_host q = gc_host_make(c_dt, 4, qs, 0.05), k = gc_host_make(c_dt, 4, ks, 0.05),
                    v = gc_host_make(c_dt, 4, ks, 1.0);
            const double amp = 50.0 / sqrt((double)D);
            for (int64_t a = 0; a < q.n; a++) q.v[a] = drift_round_to(1.0f + q.v[a], c_dt);
            for (int64_t j = 0; j < Lk; j++) {
                double r = amp * (2.0 * (double)j / (double)(Lk - 1) - 1.0);
                if (dir) r = -r;
                for (int64_t d = 0; d < D; d++) k.v[j * D + d] = drift_round_to((float)(r + k.v[j * D + d]), c_dt);
            }
            gc_case_set("%s ramp %s Lq=%lld Lk=%lld D=%lld compute=%s", g_fused, dir ? "down" : "up", (long long)Lq,
                        (long long)Lk, (long long)D, gc_dt(c_dt));
            run_full(&q, &k, &v, c_dt, c_dt, 0.0f, 64);
            gc_host_free(&q);
            gc_host_free(&k);
            gc_host_free(&v);
        }
}

/* NaN / inf inputs: the fused path's non-finite outputs sit where the
 * unfused path's do. */
static void test_nan(void) {
    const int64_t B = 1, H = 3, Lq = 65, Lk = 129, D = 64;
    int64_t qs[4] = {B, H, Lq, D}, ks[4] = {B, H, Lk, D};
    for (int which = 0; which < 4; which++) {
        gc_host q = gc_host_make(DRIFT_BF16, 4, qs, 1.0), k = gc_host_make(DRIFT_BF16, 4, ks, 1.0),
                v = gc_host_make(DRIFT_BF16, 4, ks, 1.0);
        const char *what = "";
        switch (which) {
        case 0: q.v[(0 * Lq + 3) * D + 5] = NAN, what = "NaN in q (head 0, row 3)"; break;
        case 1: k.v[(1 * Lk + 100) * D + 9] = NAN, what = "NaN in k (head 1, key 100)"; break;
        case 2: v.v[(2 * Lk + 5) * D + 7] = NAN, what = "NaN in v (head 2, key 5, col 7)"; break;
        default: v.v[(0 * Lk + 128) * D + 3] = INFINITY, what = "+inf in v (head 0, key 128, col 3)"; break;
        }
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
        gc_case_set("%s %s", g_fused, what);
        int64_t nf = 0, nu = 0;
        float *f = run_mode(&c, g_fused, &nf), *u = run_mode(&c, "unfused", &nu);
        if (f && u && nf == nu) {
            int64_t nonfin = 0;
            for (int64_t i = 0; i < nf; i++) nonfin += !isfinite(u[i]);
            GC_CHECK(nonfin > 0, "the unfused path produced no non-finite output (test data wrong)");
            cmp_fused_unfused(f, u, nf, DRIFT_BF16, p_atol(DRIFT_BF16) * max_abs(&v), D);
        } else {
            GC_CHECK(0, "runs failed");
        }
        free(f);
        free(u);
        gc_host_free(&q);
        gc_host_free(&k);
        gc_host_free(&v);
    }
}

/* One run on the attention=mode variant without the harness; returns the
 * drift status, result in out (n floats). */
static int run_raw(gc_host *q, gc_host *k, gc_host *v, drift_dtype c_dt, drift_dtype o_dt, const char *mode,
                   float *out, drift_err *err) {
    drift_backend *be = gc_with_attention(E.cuda, mode);
    if (!be) return drift_err_set(err, DRIFT_E_INPUT, "test", "no backend for attention=%s", mode ? mode : "auto");
    gc_dev d[4];
    memset(d, 0, sizeof d);
    gc_host *in[3] = {q, k, v};
    int rc = 0;
    drift_err_clear(err);
    for (int i = 0; i < 3 && !rc; i++) {
        rc = gc_dev_alloc(be, in[i]->dt, 4, in[i]->shape, 0, &d[i]);
        if (!rc) rc = drift_backend_upload_f32(be, &d[i].t, in[i]->v, err);
    }
    int64_t os[4] = {q->shape[0], q->shape[1], q->shape[2], v->shape[3]};
    if (!rc) rc = gc_dev_alloc(be, o_dt, 4, os, 0, &d[3]);
    if (!rc) {
        drift_op op = gc_op(DRIFT_OP_ATTENTION, o_dt);
        op.compute = c_dt;
        op.n_in = 3;
        const drift_tensor *pin[3] = {&d[0].t, &d[1].t, &d[2].t};
        rc = drift_backend_run(be, &op, pin, &d[3].t, err);
        if (!rc) rc = drift_backend_download_f32(be, &d[3].t, out, err);
    }
    for (int i = 0; i < 4; i++) gc_dev_free(&d[i]);
    return rc;
}

static int64_t n_differ(const float *a, const float *b, int64_t n) {
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) c += !gc_same_bits(a[i], b[i]);
    return c;
}

static void test_variant_switch(void) {
    drift_err err;
    {
        gc_case_set("variant switch: unknown attention= value");
        drift_backend *bogus = NULL;
        int rc = drift_backend_create("cuda:attention=bogus", &bogus, &err);
        GC_CHECK(rc == DRIFT_E_INPUT && !bogus, "cuda:attention=bogus: status %d (want DRIFT_E_INPUT)", rc);
        drift_backend_free(bogus);
    }
    /* unsupported: Dh = 80 (bf16), and fp32 compute (Dh 64) */
    for (int u = 0; u < 2; u++) {
        const int64_t D = u ? 64 : 80;
        const drift_dtype c_dt = u ? DRIFT_F32 : DRIFT_BF16;
        int64_t qs[4] = {1, 2, 33, D};
        gc_host q = gc_host_make(c_dt, 4, qs, 1.0), k = gc_host_make(c_dt, 4, qs, 1.0),
                v = gc_host_make(c_dt, 4, qs, 1.0);
        int64_t n = q.n;
        float *a = malloc((size_t)n * sizeof(float)), *b = malloc((size_t)n * sizeof(float));
        if (!a || !b) exit(2);
        gc_case_set("variant switch: unsupported op (D=%lld compute=%s)", (long long)D, gc_dt(c_dt));
        int rc = run_raw(&q, &k, &v, c_dt, DRIFT_F32, "fused", a, &err);
        GC_CHECK(rc == DRIFT_E_UNSUPPORTED, "attention=fused on an unsupported op: status %d (want DRIFT_E_UNSUPPORTED): %s",
                 rc, gc_errstr(&err));
        int r1 = run_raw(&q, &k, &v, c_dt, DRIFT_F32, NULL, a, &err);
        GC_CHECK(r1 == 0, "automatic on an unsupported op failed: %s", gc_errstr(&err));
        int r2 = run_raw(&q, &k, &v, c_dt, DRIFT_F32, "unfused", b, &err);
        GC_CHECK(r2 == 0, "unfused failed: %s", gc_errstr(&err));
        if (!r1 && !r2)
            GC_CHECK(n_differ(a, b, n) == 0, "automatic on an unsupported op is not the unfused path");
        free(a);
        free(b);
        gc_host_free(&q);
        gc_host_free(&k);
        gc_host_free(&v);
    }
    /* supported, fp32 out: auto == fused == attention=auto, unfused differs */
    {
        int64_t qs[4] = {1, 2, 65, 128}, ks[4] = {1, 2, 129, 128};
        gc_host q = gc_host_make(DRIFT_BF16, 4, qs, 1.0), k = gc_host_make(DRIFT_BF16, 4, ks, 1.0),
                v = gc_host_make(DRIFT_BF16, 4, ks, 1.0);
        int64_t n = q.n;
        float *o[4];
        const char *modes[4] = {"fused", NULL, "auto", "unfused"};
        int ok = 1;
        gc_case_set("variant switch: supported op");
        for (int m = 0; m < 4; m++) {
            o[m] = malloc((size_t)n * sizeof(float));
            if (!o[m]) exit(2);
            int rc = run_raw(&q, &k, &v, DRIFT_BF16, DRIFT_F32, modes[m], o[m], &err);
            GC_CHECK(rc == 0, "mode %s failed: %s", modes[m] ? modes[m] : "(unset)", gc_errstr(&err));
            if (rc) ok = 0;
        }
        if (ok) {
            GC_CHECK(n_differ(o[0], o[1], n) == 0, "automatic is not the fused path on a supported op");
            GC_CHECK(n_differ(o[0], o[2], n) == 0, "attention=auto is not automatic");
            GC_CHECK(n_differ(o[0], o[3], n) > 0,
                     "attention=unfused gives the fused result bit for bit on fp32 output (switch ineffective?)");
        }
        for (int m = 0; m < 4; m++) free(o[m]);
        gc_host_free(&q);
        gc_host_free(&k);
        gc_host_free(&v);
    }
}

/* 1 when `mode` runs on this device (a small supported op does not fail
 * with DRIFT_E_UNSUPPORTED). */
static int kernel_supported(const char *mode) {
    int64_t qs[4] = {1, 1, 16, 64};
    gc_host q = gc_host_make(DRIFT_BF16, 4, qs, 1.0), k = gc_host_make(DRIFT_BF16, 4, qs, 1.0),
            v = gc_host_make(DRIFT_BF16, 4, qs, 1.0);
    float *o = malloc((size_t)q.n * sizeof(float));
    if (!o) exit(2);
    drift_err err;
    int rc = run_raw(&q, &k, &v, DRIFT_BF16, DRIFT_F32, mode, o, &err);
    if (rc && rc != DRIFT_E_UNSUPPORTED) GC_CHECK(0, "%s on a small op failed: %s", mode, gc_errstr(&err));
    free(o);
    gc_host_free(&q);
    gc_host_free(&k);
    gc_host_free(&v);
    return rc == 0;
}

/* Both fused kernels implement one contract: on bf16 output they agree on
 * >= 99% of the elements (the rest: fp32 summation order inside the MMAs),
 * and "fused" is the wgmma kernel wherever that one runs. */
static void test_kernels_agree(void) {
    if (!kernel_supported("fused_wgmma") || !kernel_supported("fused_mma")) {
        printf("SKIP: fused kernels agree: needs both kernels on this device\n");
        return;
    }
    int64_t qs[4] = {1, 3, 300, 128}, ks[4] = {1, 3, 513, 128};
    gc_host q = gc_host_make(DRIFT_BF16, 4, qs, 1.0), k = gc_host_make(DRIFT_BF16, 4, ks, 1.0),
            v = gc_host_make(DRIFT_BF16, 4, ks, 1.0);
    int64_t n = q.n;
    float *w = malloc((size_t)n * sizeof(float)), *m = malloc((size_t)n * sizeof(float)),
          *f = malloc((size_t)n * sizeof(float));
    if (!w || !m || !f) exit(2);
    drift_err err;
    gc_case_set("fused kernels agree (wgmma vs mma.sync) Lq=300 Lk=513 D=128 bf16");
    int rc = run_raw(&q, &k, &v, DRIFT_BF16, DRIFT_BF16, "fused_wgmma", w, &err);
    if (!rc) rc = run_raw(&q, &k, &v, DRIFT_BF16, DRIFT_BF16, "fused_mma", m, &err);
    if (!rc) rc = run_raw(&q, &k, &v, DRIFT_BF16, DRIFT_BF16, "fused", f, &err);
    GC_CHECK(rc == 0, "runs failed: %s", gc_errstr(&err));
    if (!rc) {
        cmp_fused_unfused(w, m, n, DRIFT_BF16, p_atol(DRIFT_BF16) * max_abs(&v), 128);
        GC_CHECK(n_differ(w, f, n) == 0, "fused is not the wgmma kernel on an sm_90 device");
    }
    free(w);
    free(m);
    free(f);
    gc_host_free(&q);
    gc_host_free(&k);
    gc_host_free(&v);
}

int main(void) {
    gc_require_gpu("test_cuda_attention_fused");
    gc_seed(4242);
    gc_env_open(&E);
    if (!E.cuda) return gc_finish("test_cuda_attention_fused");
    test_variant_switch();
    static const char *kernels[2] = {"fused_wgmma", "fused_mma"};
    for (int i = 0; i < 2; i++) {
        g_fused = kernels[i];
        if (!kernel_supported(g_fused)) {
            printf("SKIP: attention=%s: this device does not run that kernel\n", g_fused);
            continue;
        }
        printf("-- cases with attention=%s\n", g_fused);
        test_nan();
        test_shapes();
        test_large_logits();
        test_ramps();
        test_big();
    }
    test_kernels_agree();
    gc_env_close(&E);
    return gc_finish("test_cuda_attention_fused");
}
