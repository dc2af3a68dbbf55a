/* The fused metric reduction (backend `metrics` entry) against the host
 * reference drift_metrics_accumulate_f32 (replay/analysis/metrics.h), which defines
 * the semantics. Checked exactly: numel, NaN/inf counts per side, n_diff,
 * max|d|, its argmax (first occurrence, global index continuing after the
 * elements already in acc), max|r|. Checked to 2e-6 of the sum of |terms|
 * (the device forms 8-element fp32 partials, relative error <= 7*2^-24):
 * sum|d|, sum d^2, sum t*r, sum t*t, sum r*r. Plus determinism (two runs,
 * identical bits).
 *
 * Data: random pairs with 30% exactly equal elements (n_diff), NaN/inf/+-0/
 * huge/tiny values on either side, ties of max|d| (several positions, two in
 * one 8-element vector, a negative difference), squares overflowing fp32
 * (the exact fallback of a chunk), an fp32-vs-fp64 exponent gap where the
 * fp32 screen of max|d| ties but the fp64 values do not, all-equal tensors,
 * -0 vs +0. dtype pairs bf16/bf16 and fp16/fp16 (16-byte vector path),
 * fp32/fp32 (vector fp64 path), bf16/fp32 and fp32/fp16 (generic path),
 * views at odd offsets (generic path); sizes 0..3000001 with every tail
 * length. Grids: default, metrics_grid=1, 3, 7 (many grid-stride
 * iterations per thread). */
#include "gpu_check.h"
#include "replay/analysis/metrics.h"

static gc_env E;
static drift_backend *grids[4];
static const char *grid_names[4] = {"grid-default", "grid-1", "grid-3", "grid-7"};
static int n_grids;

enum { FILL_RANDOM = 0, FILL_TIES, FILL_OVERFLOW, FILL_GAP, FILL_EQUAL, FILL_ZEROS };

typedef struct scales {
    double abs, sq, tr, tt, rr;
} scales;

static void host_scales(const float *t, const float *r, int64_t n, scales *s) {
    memset(s, 0, sizeof *s);
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(t[i]) || !isfinite(r[i])) continue;
        double a = t[i], b = r[i], d = a - b;
        s->abs += fabs(d);
        s->sq += d * d;
        s->tr += fabs(a * b);
        s->tt += a * a;
        s->rr += b * b;
    }
}

static void check_sum(double got, double want, double scale, const char *name) {
    double tol = 2e-6 * scale + 1e-300;
    int ok = (isnan(got) && isnan(want)) || (got == want) || fabs(got - want) <= tol;
    GC_CHECK(ok, "%s: cuda %.17g vs host %.17g (tol %.3g)", name, got, want, tol);
}

static void compare_acc(const drift_metric_acc *g, const drift_metric_acc *h, const scales *s) {
    GC_CHECK(g->numel == h->numel, "numel %lld vs %lld", (long long)g->numel, (long long)h->numel);
    GC_CHECK(g->nan_t == h->nan_t, "nan_t %lld vs %lld", (long long)g->nan_t, (long long)h->nan_t);
    GC_CHECK(g->inf_t == h->inf_t, "inf_t %lld vs %lld", (long long)g->inf_t, (long long)h->inf_t);
    GC_CHECK(g->nan_r == h->nan_r, "nan_r %lld vs %lld", (long long)g->nan_r, (long long)h->nan_r);
    GC_CHECK(g->inf_r == h->inf_r, "inf_r %lld vs %lld", (long long)g->inf_r, (long long)h->inf_r);
    GC_CHECK(g->n_diff == h->n_diff, "n_diff %lld vs %lld", (long long)g->n_diff, (long long)h->n_diff);
    GC_CHECK(g->max_abs_diff == h->max_abs_diff, "max_abs_diff %.17g vs %.17g", g->max_abs_diff, h->max_abs_diff);
    GC_CHECK(g->argmax == h->argmax, "argmax %lld vs %lld", (long long)g->argmax, (long long)h->argmax);
    GC_CHECK(g->max_abs_ref == h->max_abs_ref, "max_abs_ref %.17g vs %.17g", g->max_abs_ref, h->max_abs_ref);
    check_sum(g->sum_abs_diff, h->sum_abs_diff, s->abs, "sum_abs_diff");
    check_sum(g->sum_sq_diff, h->sum_sq_diff, s->sq, "sum_sq_diff");
    check_sum(g->sum_tr, h->sum_tr, s->tr, "sum_tr");
    check_sum(g->sum_tt, h->sum_tt, s->tt, "sum_tt");
    check_sum(g->sum_rr, h->sum_rr, s->rr, "sum_rr");
}

static void fill(float *t, float *r, int64_t n, drift_dtype tdt, drift_dtype rdt, int kind) {
    for (int64_t i = 0; i < n; i++) {
        float b = drift_round_to((float)gc_normal(), rdt);
        float a = drift_round_to(b + (float)(0.01 * gc_normal()), tdt);
        if (gc_unif() < 0.3) a = drift_round_to(b, tdt);
        if (kind == FILL_OVERFLOW) {
            b = drift_round_to(b * 3e30f, rdt);
            a = drift_round_to(a * 3e30f, tdt);
        }
        if (kind == FILL_EQUAL) a = drift_round_to(b, tdt), b = drift_round_to(a, rdt);
        if (kind == FILL_ZEROS) {
            b = 0.0f;
            a = gc_unif() < 0.5 ? -0.0f : 0.0f;
        }
        t[i] = a;
        r[i] = b;
    }
    if (kind == FILL_TIES && n >= 16) {
        /* |d| = 4 exactly (1 vs 5, or 5 vs 1) at several places; all else < 0.2 */
        int64_t late = n - 1 - (int64_t)(gc_u64() % (uint64_t)(n / 2));
        int64_t pos[5] = {late, n / 3 + 3, n / 3 + 5, (n / 3) | 1, n - 1};
        for (int k = 0; k < 5; k++) {
            int64_t p = pos[k];
            t[p] = k % 2 ? 1.0f : 5.0f;
            r[p] = k % 2 ? 5.0f : 1.0f;
        }
    }
    if (kind == FILL_GAP && n >= 8) {
        /* fp32 |d| ties at 1.0, fp64 |d| = 1 - 2^-30 at i and 1.0 at j > i */
        int64_t i = n / 4, j = n / 2 + 1;
        t[i] = 1.0f;
        r[i] = ldexpf(1.0f, -30);
        t[j] = 1.0f;
        r[j] = 0.0f;
        if (tdt == DRIFT_F16 || rdt == DRIFT_F16) r[i] = drift_round_to(r[i], DRIFT_F16); /* 2^-30 underflows fp16 */
    }
}

static int upload_pair(drift_backend *be, drift_dtype tdt, drift_dtype rdt, int64_t n, int64_t guard, const float *t,
                       const float *r, gc_dev *dt, gc_dev *dr) {
    drift_err err;
    drift_err_clear(&err);
    int64_t shape[2] = {n % 2 == 0 && n > 0 ? 2 : 1, n % 2 == 0 && n > 0 ? n / 2 : n};
    if (gc_dev_alloc(be, tdt, 2, shape, guard, dt)) return 1;
    if (gc_dev_alloc(be, rdt, 2, shape, guard, dr)) return 1;
    if (drift_backend_upload_f32(be, &dt->t, t, &err) || drift_backend_upload_f32(be, &dr->t, r, &err)) {
        GC_CHECK(0, "upload: %s", gc_errstr(&err));
        return 1;
    }
    return 0;
}

static void metrics_case(drift_dtype tdt, drift_dtype rdt, int64_t n, int kind, double specials, int64_t guard) {
    float *t = malloc((size_t)(n > 0 ? n : 1) * sizeof(float)), *r = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!t || !r) exit(2);
    fill(t, r, n, tdt, rdt, kind);
    if (specials > 0) {
        gc_host ht = {.dt = tdt, .n = n, .v = t}, hr = {.dt = rdt, .n = n, .v = r};
        gc_host_specials(&ht, specials);
        gc_host_specials(&hr, specials);
    }
    /* acc already holding a first chunk, so indices must continue after it */
    enum { PRE = 1000 };
    float pt[PRE], pr[PRE];
    for (int i = 0; i < PRE; i++) {
        pr[i] = (float)gc_normal();
        pt[i] = pr[i] + 0.5f * (float)gc_normal();
    }
    drift_metric_acc pre, host;
    drift_metric_acc_init(&pre);
    int with_pre = (n % 3) == 0;
    if (with_pre) drift_metrics_accumulate_f32(pt, pr, PRE, &pre);
    host = pre;
    drift_metrics_accumulate_f32(t, r, (size_t)n, &host);
    scales sc, scp;
    host_scales(t, r, n, &sc);
    if (with_pre) {
        host_scales(pt, pr, PRE, &scp);
        sc.abs += scp.abs;
        sc.sq += scp.sq;
        sc.tr += scp.tr;
        sc.tt += scp.tt;
        sc.rr += scp.rr;
    }
    char base[sizeof gc_case];
    snprintf(base, sizeof base, "%s", gc_case);
    for (int g = 0; g < n_grids; g++) {
        drift_backend *be = grids[g];
        gc_case_set("%s | %s", base, grid_names[g]);
        gc_dev dt, dr;
        memset(&dt, 0, sizeof dt);
        memset(&dr, 0, sizeof dr);
        if (upload_pair(be, tdt, rdt, n, guard, t, r, &dt, &dr) == 0) {
            drift_err err;
            drift_err_clear(&err);
            drift_metric_acc a1 = pre, a2 = pre;
            int rc1 = drift_backend_metrics(be, &dt.t, &dr.t, &a1, &err);
            GC_CHECK(rc1 == 0, "metrics failed: %s", gc_errstr(&err));
            int rc2 = drift_backend_metrics(be, &dt.t, &dr.t, &a2, &err);
            GC_CHECK(rc2 == 0, "metrics (second run) failed: %s", gc_errstr(&err));
            if (rc1 == 0) compare_acc(&a1, &host, &sc);
            if (rc1 == 0 && rc2 == 0)
                GC_CHECK(memcmp(&a1, &a2, sizeof a1) == 0, "two identical metric runs differ (nondeterministic)");
            gc_dev_guards_ok(&dt, "t");
            gc_dev_guards_ok(&dr, "r");
        }
        gc_dev_free(&dt);
        gc_dev_free(&dr);
        if (g == 0 && E.cpu && n <= 100000) { /* the cpu backend computes the host reference too */
            memset(&dt, 0, sizeof dt);
            memset(&dr, 0, sizeof dr);
            if (upload_pair(E.cpu, tdt, rdt, n, 0, t, r, &dt, &dr) == 0) {
                drift_err err;
                drift_err_clear(&err);
                drift_metric_acc ac = pre;
                GC_CHECK(drift_backend_metrics(E.cpu, &dt.t, &dr.t, &ac, &err) == 0, "cpu metrics: %s", gc_errstr(&err));
                GC_CHECK(memcmp(&ac, &host, sizeof ac) == 0, "cpu backend metrics differ from the host reference");
            }
            gc_dev_free(&dt);
            gc_dev_free(&dr);
        }
    }
    gc_case_set("%s", base);
    free(t);
    free(r);
}

static void test_pairs(void) {
    static const drift_dtype pairs[][2] = {{DRIFT_BF16, DRIFT_BF16}, {DRIFT_F16, DRIFT_F16}, {DRIFT_F32, DRIFT_F32},
                                           {DRIFT_BF16, DRIFT_F32},  {DRIFT_F32, DRIFT_F16}};
    static const int64_t sizes[] = {0, 1, 7, 8, 9, 15, 16, 17, 1000, 4099, (1 << 20) + 5, 3000001};
    for (size_t p = 0; p < sizeof pairs / sizeof *pairs; p++)
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            double sp = s % 2 ? 0.02 : 0.0;
            gc_case_set("metrics %s/%s n=%lld random specials=%g", gc_dt(pairs[p][0]), gc_dt(pairs[p][1]),
                        (long long)sizes[s], sp);
            metrics_case(pairs[p][0], pairs[p][1], sizes[s], FILL_RANDOM, sp, 64);
        }
    for (size_t p = 0; p < sizeof pairs / sizeof *pairs; p++) {
        drift_dtype a = pairs[p][0], b = pairs[p][1];
        gc_case_set("metrics %s/%s ties n=4099", gc_dt(a), gc_dt(b));
        metrics_case(a, b, 4099, FILL_TIES, 0.0, 64);
        gc_case_set("metrics %s/%s ties n=3000001", gc_dt(a), gc_dt(b));
        metrics_case(a, b, 3000001, FILL_TIES, 0.0, 64);
        gc_case_set("metrics %s/%s ties+specials n=100003", gc_dt(a), gc_dt(b));
        metrics_case(a, b, 100003, FILL_TIES, 0.01, 64);
        if (a != DRIFT_F16 && b != DRIFT_F16) {
            gc_case_set("metrics %s/%s overflow n=100003", gc_dt(a), gc_dt(b));
            metrics_case(a, b, 100003, FILL_OVERFLOW, 0.0, 64);
        }
        gc_case_set("metrics %s/%s exponent gap n=1000", gc_dt(a), gc_dt(b));
        metrics_case(a, b, 1000, FILL_GAP, 0.0, 64);
        gc_case_set("metrics %s/%s exponent gap n=1048581", gc_dt(a), gc_dt(b));
        metrics_case(a, b, (1 << 20) + 5, FILL_GAP, 0.0, 64);
        gc_case_set("metrics %s/%s all equal n=70001", gc_dt(a), gc_dt(b));
        metrics_case(a, b, 70001, FILL_EQUAL, 0.0, 64);
        gc_case_set("metrics %s/%s +-0 n=4096", gc_dt(a), gc_dt(b));
        metrics_case(a, b, 4096, FILL_ZEROS, 0.0, 64);
        gc_case_set("metrics %s/%s odd-offset views n=33333", gc_dt(a), gc_dt(b));
        metrics_case(a, b, 33333, FILL_RANDOM, 0.02, 1);
    }
}

static void test_errors(void) {
    drift_err err;
    gc_case_set("metrics shape mismatch");
    int64_t s1[1] = {10}, s2[1] = {11};
    gc_dev a, b;
    if (gc_dev_alloc(E.cuda, DRIFT_BF16, 1, s1, 0, &a) == 0 && gc_dev_alloc(E.cuda, DRIFT_BF16, 1, s2, 0, &b) == 0) {
        drift_metric_acc acc;
        drift_metric_acc_init(&acc);
        drift_err_clear(&err);
        int rc = drift_backend_metrics(E.cuda, &a.t, &b.t, &acc, &err);
        GC_CHECK(rc == DRIFT_E_INPUT, "shape mismatch must be DRIFT_E_INPUT, got %d", rc);
        GC_CHECK(acc.numel == 0, "acc must be untouched on error");
        drift_err_clear(&err);
        rc = drift_backend_metrics(E.cuda, &a.t, &a.t, NULL, &err);
        GC_CHECK(rc != 0, "NULL acc must fail");
    }
    gc_dev_free(&a);
    gc_dev_free(&b);
}

int main(void) {
    gc_require_gpu("test_cuda_metrics");
    gc_seed(4242);
    gc_env_open(&E);
    if (!E.cuda) return gc_finish("test_cuda_metrics");
    grids[0] = E.cuda;
    n_grids = 1;
    static const char *gv[3] = {"1", "3", "7"};
    for (int i = 0; i < 3; i++) {
        drift_backend *b = gc_cuda_with_opt("metrics_grid", gv[i]);
        GC_CHECK(b != NULL, "variant %s", grid_names[i + 1]);
        if (b) {
            grid_names[n_grids] = grid_names[i + 1];
            grids[n_grids++] = b;
        }
    }
    test_pairs();
    test_errors();
    for (int i = 1; i < n_grids; i++) drift_backend_free(grids[i]);
    gc_env_close(&E);
    return gc_finish("test_cuda_metrics");
}
