/* ATTENTION's additive bias (in3, kernels/backend.h: SDPA's attn_mask and
 * is_causal as an fp32 bias [Bb, Hb, Lqb, Lk]) on every CUDA path:
 *   - the GPU fp64 oracle (ref-cuda): bitwise the ref backend's doubles;
 *   - cpu (attn_tile=0: one softmax over all keys, as the CUDA kernels):
 *     the bounds below;
 *   - the exact profile (cuda; attention=unfused too): within the bounds of
 *     test_cuda_attention_layout.c of the ref result (2 bf16 ULPs of the
 *     output + 8e-3 max|v|), NaN exactly where ref has NaN (a row whose keys
 *     are all masked);
 *   - the torch profile (cuda:kernels=torch: cuDNN's composite SDPA graph
 *     with the bias ADD): the same bounds, and no fallback to the exact
 *     kernels (cuDNN took the graph; its reason is printed if not), except
 *     for the row that is wholly masked, whose value is whatever cuDNN gives
 *     (printed);
 *   - attention=fused: refused with DRIFT_E_UNSUPPORTED naming the bias.
 * Masks: a key mask [B, 1, 1, Lk] (0 / -inf), a full bool mask [B, 1, Lq,
 * Lk], causal [1, 1, Lq, Lk], an additive per-head mask [1, H, Lq, Lk],
 * a mask with wholly masked rows. Shapes: bf16, B 2, H 4, D 64, L 256; D 8,
 * L 16; Lq 130 != Lk 70. The torch comparison itself (bitwise against
 * F.scaled_dot_product_attention) is tests/gpu/torch_parity.sh. */
#include "gpu_check.h"

enum { K_KEY, K_FULL, K_CAUSAL, K_HEAD_ADD, K_ROWS_MASKED, K_COUNT };
static const char *const k_names[K_COUNT] = {"key mask", "full bool mask", "causal", "additive per-head", "rows masked"};

static uint64_t g_state = 99;
static double unif(void) {
    uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static void bias_shape(int kind, int64_t B, int64_t H, int64_t Lq, int64_t Lk, int64_t *s) {
    s[0] = B, s[1] = 1, s[2] = Lq, s[3] = Lk;
    if (kind == K_KEY) s[2] = 1;
    if (kind == K_CAUSAL) s[0] = 1;
    if (kind == K_HEAD_ADD) s[0] = 1, s[1] = H;
}

static float bias_value(int kind, int64_t b, int64_t i, int64_t j, int64_t Lk) {
    switch (kind) {
    case K_KEY: return j > 0 && (j % 3 == 1 || j >= Lk - 5 * b) ? -INFINITY : 0.0f;
    case K_FULL: return j != i % Lk && (i + j) % 4 == 0 ? -INFINITY : 0.0f;
    case K_CAUSAL: return j <= i ? 0.0f : -INFINITY;
    case K_HEAD_ADD: return drift_round_to((float)(4.0 * unif() - 2.0), DRIFT_BF16);
    default: return i % 7 == 3 ? -INFINITY : (j % 2 ? 0.0f : -INFINITY);
    }
}

typedef struct bufs {
    float *q, *k, *v, *bias;
    int64_t qs[4], ks[4], bs[4], nq, nk, nb;
} bufs;

static drift_tensor up(const drift_backend *be, drift_dtype dt, const int64_t *s, const float *v, int *ok) {
    drift_tensor t;
    drift_err err;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = 4;
    memcpy(t.shape, s, 4 * sizeof(int64_t));
    *ok = !drift_backend_alloc(be, &t, &err) && (!v || !drift_backend_upload_f32(be, &t, v, &err));
    if (!*ok) fprintf(stderr, "NOTE: tensor on %s: %s\n", drift_backend_name(be), err.msg);
    return t;
}

/* Runs ATTENTION (+ bias) on be; 0 and out[] filled, or the error code with err. */
static int run_on(const drift_backend *be, const bufs *x, double *out, drift_err *err) {
    int ok = 1, o2 = 1, o3 = 1, o4 = 1, o5 = 1;
    const drift_dtype dt = DRIFT_BF16;
    drift_tensor q = up(be, dt, x->qs, x->q, &ok), k = up(be, dt, x->ks, x->k, &o2), v = up(be, dt, x->ks, x->v, &o3),
                 b = up(be, DRIFT_F32, x->bs, x->bias, &o4), o = up(be, dt, x->qs, NULL, &o5);
    int rc = DRIFT_E_NOMEM;
    if (ok && o2 && o3 && o4 && o5) {
        drift_op op;
        memset(&op, 0, sizeof op);
        op.kind = DRIFT_OP_ATTENTION;
        op.compute = op.out = dt;
        op.n_in = 4;
        const drift_tensor *in[4] = {&q, &k, &v, &b};
        rc = drift_backend_run(be, &op, in, &o, err);
        if (!rc) rc = drift_backend_sync(be, err);
        if (!rc) rc = drift_backend_download_f64(be, &o, out, err);
    }
    drift_tensor *ts[5] = {&q, &k, &v, &b, &o};
    for (int i = 0; i < 5; i++)
        if (ts[i]->data) drift_backend_release(be, ts[i]);
    return rc;
}

static double max_abs(const float *v, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (fabs(v[i]) > m) m = fabs(v[i]);
    return m;
}

/* got within 2 bf16 ULPs + 8e-3 max|v| of want; NaN where want is NaN (if nan_exact). */
static void check_close(const char *what, const double *got, const double *want, int64_t n, double maxv, int nan_exact) {
    int64_t bad = 0, nan_bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(want[i])) {
            nan_bad += nan_exact && !isnan(got[i]);
            continue;
        }
        const double tol = 2.0 * ldexp(fabs(want[i]), -8) + 8e-3 * maxv;
        if (!(fabs(got[i] - want[i]) <= tol)) {
            if (first < 0) first = i;
            bad++;
        }
    }
    GC_CHECK(bad == 0, "%s: %lld of %lld elements outside 2 ULPs + 8e-3 max|v| of ref (first [%lld]: %.6g vs %.6g)", what,
             (long long)bad, (long long)n, (long long)first, first >= 0 ? got[first] : 0.0, first >= 0 ? want[first] : 0.0);
    GC_CHECK(nan_bad == 0, "%s: %lld elements are not NaN where ref's row is wholly masked", what, (long long)nan_bad);
}

static drift_backend *mk(const char *spec) {
    drift_backend *be = NULL;
    drift_err err;
    if (drift_backend_create(spec, &be, &err)) {
        fprintf(stderr, "NOTE: backend %s: %s\n", spec, err.msg);
        return NULL;
    }
    return be;
}

int main(void) {
    gc_require_gpu("test_cuda_attention_bias");
    drift_backend *ref = mk("ref"), *cpu = mk("cpu:attn_tile=0"), *rcu = mk("ref-cuda"), *ex = mk("cuda");
    drift_backend *unf = mk("cuda:attention=unfused"), *fus = mk("cuda:attention=fused"), *tp = mk("cuda:kernels=torch");
    GC_CHECK(ref && cpu && rcu && ex && unf && fus && tp, "every backend must be creatable");
    if (!(ref && cpu && rcu && ex && unf && fus && tp)) return gc_finish("test_cuda_attention_bias");
    const int64_t shapes[3][5] = {{2, 4, 256, 256, 64}, {2, 4, 16, 16, 8}, {2, 4, 130, 70, 64}};
    for (int si = 0; si < 3; si++)
        for (int kind = 0; kind < K_COUNT; kind++) {
            const int64_t B = shapes[si][0], H = shapes[si][1], Lq = shapes[si][2], Lk = shapes[si][3], D = shapes[si][4];
            gc_case_set("%s B%lld H%lld Lq%lld Lk%lld D%lld", k_names[kind], (long long)B, (long long)H, (long long)Lq,
                        (long long)Lk, (long long)D);
            bufs x;
            memset(&x, 0, sizeof x);
            x.qs[0] = B, x.qs[1] = H, x.qs[2] = Lq, x.qs[3] = D;
            x.ks[0] = B, x.ks[1] = H, x.ks[2] = Lk, x.ks[3] = D;
            bias_shape(kind, B, H, Lq, Lk, x.bs);
            x.nq = B * H * Lq * D, x.nk = B * H * Lk * D, x.nb = x.bs[0] * x.bs[1] * x.bs[2] * x.bs[3];
            x.q = malloc((size_t)x.nq * 4), x.k = malloc((size_t)x.nk * 4), x.v = malloc((size_t)x.nk * 4);
            x.bias = malloc((size_t)x.nb * 4);
            double *want = malloc((size_t)x.nq * 8), *got = malloc((size_t)x.nq * 8);
            if (!x.q || !x.k || !x.v || !x.bias || !want || !got) return gc_finish("test_cuda_attention_bias");
            for (int64_t i = 0; i < x.nq; i++) x.q[i] = drift_round_to((float)(4.0 * unif() - 2.0), DRIFT_BF16);
            for (int64_t i = 0; i < x.nk; i++) x.k[i] = drift_round_to((float)(4.0 * unif() - 2.0), DRIFT_BF16);
            for (int64_t i = 0; i < x.nk; i++) x.v[i] = drift_round_to((float)(2.0 * unif() - 1.0), DRIFT_BF16);
            for (int64_t e = 0; e < x.nb; e++) {
                const int64_t j = e % Lk, i = (e / Lk) % x.bs[2], b = e / (x.bs[1] * x.bs[2] * Lk);
                x.bias[e] = bias_value(kind, b, i, j, Lk);
            }
            const double maxv = max_abs(x.v, x.nk);
            drift_err err;
            memset(&err, 0, sizeof err);
            int rc = run_on(ref, &x, want, &err);
            GC_CHECK(rc == 0, "ref: %s", err.msg);
            int64_t nans = 0;
            for (int64_t i = 0; i < x.nq; i++) nans += isnan(want[i]) != 0;
            GC_CHECK((kind == K_ROWS_MASKED) == (nans > 0), "ref: %lld NaN outputs", (long long)nans);

            rc = run_on(cpu, &x, got, &err);
            GC_CHECK(rc == 0, "cpu: %s", err.msg);
            if (!rc) check_close("cpu", got, want, x.nq, maxv, 1);

            rc = run_on(rcu, &x, got, &err);
            GC_CHECK(rc == 0, "ref-cuda: %s", err.msg);
            if (!rc) {
                int64_t diff = 0;
                for (int64_t i = 0; i < x.nq; i++) diff += !(memcmp(&got[i], &want[i], 8) == 0 || (isnan(got[i]) && isnan(want[i])));
                GC_CHECK(diff == 0, "ref-cuda: %lld elements differ from ref's doubles", (long long)diff);
            }

            drift_backend *exs[2] = {ex, unf};
            for (int e = 0; e < 2; e++) {
                rc = run_on(exs[e], &x, got, &err);
                GC_CHECK(rc == 0, "%s: %s", e ? "cuda:attention=unfused" : "cuda", err.msg);
                if (!rc) check_close(e ? "cuda:attention=unfused" : "cuda", got, want, x.nq, maxv, 1);
            }

            rc = run_on(fus, &x, got, &err);
            GC_CHECK(rc == DRIFT_E_UNSUPPORTED && strstr(err.msg, "bias"), "attention=fused with a bias: rc %d, '%s'", rc,
                     err.msg);

            int64_t before = 0, after = 0;
            (void)drift_cuda_backend_torch_fallbacks(tp, &before);
            rc = run_on(tp, &x, got, &err);
            (void)drift_cuda_backend_torch_fallbacks(tp, &after);
            GC_CHECK(rc == 0, "cuda:kernels=torch: %s", err.msg);
            GC_CHECK(after == before, "cuda:kernels=torch fell back to the exact kernels: %s",
                     drift_cuda_backend_torch_fallback_reason(tp));
            if (!rc) {
                check_close("cuda:kernels=torch", got, want, x.nq, maxv, 0);
                if (kind == K_ROWS_MASKED) {
                    int64_t tn = 0, tz = 0;
                    for (int64_t i = 0; i < x.nq; i++)
                        if (isnan(want[i])) tn += isnan(got[i]) != 0, tz += got[i] == 0.0;
                    printf("NOTE %s: cuDNN's output on wholly masked rows: %lld NaN, %lld zeros of %lld\n", gc_case,
                           (long long)tn, (long long)tz, (long long)nans);
                }
            }
            free(x.q), free(x.k), free(x.v), free(x.bias), free(want), free(got);
        }
    drift_backend *all[7] = {ref, cpu, rcu, ex, unf, fus, tp};
    for (int i = 0; i < 7; i++) drift_backend_free(all[i]);
    return gc_finish("test_cuda_attention_bias");
}
