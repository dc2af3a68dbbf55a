/* A tiny check/report harness for the GPU tests (plain C, no cmocka: the GPU
 * machine may not have it). Each test program:
 *   - calls gc_require_gpu() first: no CUDA device -> prints
 *     "SKIP: no CUDA device" and exits 77 (ctest's SKIP_RETURN_CODE);
 *   - counts checks with GC_CHECK(cond, fmt, ...), printing each failure
 *     (the first 200) with the current case label (gc_case_set);
 *   - ends with `return gc_finish("name");`, which prints
 *     "name: N passed, M failed" and returns 0 (pass) or 1 (fail).
 *
 * It also holds the op-comparison machinery shared by the tests: host
 * tensors with deterministic random values (already rounded to their dtype,
 * so every backend receives identical values), the three backends (cuda
 * variants, cpu, ref), and gc_run_case(), which runs one op on the CUDA
 * backend twice (output poisoned with NaN, then with a finite sentinel; the
 * two results must be bit-identical: this proves every element was written
 * and the op is deterministic), inside guard zones (elements before and after
 * every CUDA tensor must be untouched, inputs must be unchanged), then
 * compares with the cpu backend (bit-exact or within ULPs + atol, NaN/inf
 * parity) and with the fp64 ref backend (NMSE bound). The random numbers,
 * ULPs, bit equality, NMSE and its default bounds are the parity harness's
 * (tests/parity/parity_util.h); the op parity table itself is
 * tests/gpu/test_parity.c. */
#ifndef DRIFT_TESTS_GPU_CHECK_H
#define DRIFT_TESTS_GPU_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "tests/parity/parity_util.h"

#define GC_UNUSED __attribute__((unused))

static int gc_fail GC_UNUSED = 0;
static int gc_pass GC_UNUSED = 0;
static char gc_case[512] GC_UNUSED = "";

#define GC_CHECK(cond, ...)                                                                                            \
    do {                                                                                                               \
        if (cond) {                                                                                                    \
            gc_pass++;                                                                                                 \
        } else {                                                                                                       \
            gc_fail++;                                                                                                 \
            if (gc_fail <= 200) {                                                                                      \
                fprintf(stderr, "FAIL %s:%d [%s]: ", __FILE__, __LINE__, gc_case);                                     \
                fprintf(stderr, __VA_ARGS__);                                                                          \
                fputc('\n', stderr);                                                                                   \
            }                                                                                                          \
        }                                                                                                              \
    } while (0)

static inline void gc_case_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void gc_case_set(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(gc_case, sizeof gc_case, fmt, ap);
    va_end(ap);
}

static inline void gc_require_gpu(const char *prog) {
    int n = drift_cuda_device_count();
    if (n <= 0) {
        printf("SKIP: no CUDA device (%s)\n", prog);
        fflush(stdout);
        exit(77);
    }
}

static inline int gc_finish(const char *prog) {
    printf("%s: %d passed, %d failed\n", prog, gc_pass, gc_fail);
    fflush(stdout);
    return gc_fail ? 1 : 0;
}

static inline const char *gc_errstr(const drift_err *e) {
    static char buf[2048];
    return drift_err_format(e, buf, sizeof buf);
}

/* ------------------------------------------------------------------------ */
/* Deterministic random numbers                                              */

/* one PRNG for the parity harness and these tests (tests/parity/parity_util.h) */
static inline void gc_seed(uint64_t s) { parity_rng_seed(s); }
static inline uint64_t gc_u64(void) { return parity_rng_u64(); }
/* uniform in [0, 1) */
static inline double gc_unif(void) { return parity_rng_unif(); }
static inline double gc_normal(void) { return parity_rng_normal(); }

/* ------------------------------------------------------------------------ */
/* Host tensors                                                              */

typedef struct gc_host {
    drift_dtype dt;
    int ndim;
    int64_t shape[DRIFT_MAX_DIMS];
    int64_t n;
    float *v; /* n values, each exactly representable in dt */
} gc_host;

static inline int64_t gc_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

/* dims: ndim values. Values: scale * N(0,1), rounded to dt. */
static inline gc_host gc_host_make(drift_dtype dt, int ndim, const int64_t *dims, double scale) {
    gc_host h;
    memset(&h, 0, sizeof h);
    h.dt = dt;
    h.ndim = ndim;
    for (int i = 0; i < ndim; i++) h.shape[i] = dims[i];
    h.n = gc_numel(ndim, dims);
    h.v = malloc((size_t)(h.n > 0 ? h.n : 1) * sizeof(float));
    if (!h.v) {
        fprintf(stderr, "out of host memory\n");
        exit(2);
    }
    for (int64_t i = 0; i < h.n; i++) h.v[i] = drift_round_to((float)(scale * gc_normal()), dt);
    return h;
}

/* Same, uniform in [lo, hi). */
static inline gc_host gc_host_unif(drift_dtype dt, int ndim, const int64_t *dims, double lo, double hi) {
    gc_host h = gc_host_make(dt, ndim, dims, 0.0);
    for (int64_t i = 0; i < h.n; i++) h.v[i] = drift_round_to((float)(lo + (hi - lo) * gc_unif()), dt);
    return h;
}

static inline void gc_host_free(gc_host *h) {
    if (!h) return;
    free(h->v);
    h->v = NULL;
}

/* Replaces about frac of the values by NaN, +inf, -inf, +-0, huge or tiny
 * values (rounded to dt). */
static inline void gc_host_specials(gc_host *h, double frac) {
    for (int64_t i = 0; i < h->n; i++) {
        if (gc_unif() >= frac) continue;
        float v;
        switch (gc_u64() % 7) {
        case 0: v = NAN; break;
        case 1: v = INFINITY; break;
        case 2: v = -INFINITY; break;
        case 3: v = 0.0f; break;
        case 4: v = -0.0f; break;
        case 5: v = (gc_u64() & 1) ? 1e30f : -1e30f; break;
        default: v = (gc_u64() & 1) ? 1e-30f : -1e-30f; break;
        }
        h->v[i] = drift_round_to(v, h->dt);
    }
}

static inline int gc_same_bits(float a, float b) { return parity_same_bits(a, b); }

/* One unit in the last place of dt at magnitude |x| (subnormal floor). */
static inline double gc_ulp(double x, drift_dtype dt) { return parity_ulp(x, dt); }

/* ------------------------------------------------------------------------ */
/* Backends                                                                  */

typedef struct gc_env {
    drift_backend *cuda; /* default cuda backend */
    drift_backend *cpu;
    drift_backend *ref;
} gc_env;

/* A cuda backend with one kernel-variant option (kernels/cuda/cuda_backend.h:
 * "gemm", "naive" -> spec "cuda:gemm=naive"; key NULL: the default). Caller
 * frees it (drift_backend_free); NULL (and a message) on failure. */
static inline drift_backend *gc_cuda_with_opt(const char *key, const char *value) {
    drift_backend *be = NULL;
    drift_err err;
    drift_err_clear(&err);
    char spec[128];
    if (key) snprintf(spec, sizeof spec, "cuda:%s=%s", key, value);
    else snprintf(spec, sizeof spec, "cuda");
    if (drift_backend_create(spec, &be, &err)) {
        fprintf(stderr, "cannot create the cuda backend '%s': %s\n", spec, gc_errstr(&err));
        return NULL;
    }
    return be;
}

/* Variants are fixed at creation, so a test that compares attention paths
 * keeps one backend per (options, attention mode), made on first use and
 * freed by gc_env_close. gc_cached_spec: the backend of spec (borrowed). */
#define GC_MAX_CACHED 16
static struct {
    char spec[128];
    drift_backend *be;
} gc_cache[GC_MAX_CACHED];
static int gc_n_cached;

static inline drift_backend *gc_cached_spec(const char *spec) {
    for (int i = 0; i < gc_n_cached; i++)
        if (strcmp(gc_cache[i].spec, spec) == 0) return gc_cache[i].be;
    if (gc_n_cached == GC_MAX_CACHED) {
        fprintf(stderr, "gpu_check.h: more than %d cached cuda variants\n", GC_MAX_CACHED);
        exit(2);
    }
    drift_err err;
    drift_err_clear(&err);
    drift_backend *be = NULL;
    if (drift_backend_create(spec, &be, &err)) {
        fprintf(stderr, "cannot create the cuda backend '%s': %s\n", spec, gc_errstr(&err));
        return NULL;
    }
    snprintf(gc_cache[gc_n_cached].spec, sizeof gc_cache[0].spec, "%s", spec);
    gc_cache[gc_n_cached++].be = be;
    return be;
}

/* The spec be was made from ("cuda" for an uncached backend). */
static inline const char *gc_spec_of(const drift_backend *be) {
    for (int i = 0; i < gc_n_cached; i++)
        if (gc_cache[i].be == be) return gc_cache[i].spec;
    return "cuda";
}

/* be's variant with attention=mode added (mode NULL: be itself). */
static inline drift_backend *gc_with_attention(drift_backend *be, const char *mode) {
    if (!mode) return be;
    char spec[128];
    snprintf(spec, sizeof spec, "%s:attention=%s", gc_spec_of(be), mode);
    return gc_cached_spec(spec);
}

static inline void gc_env_open(gc_env *E) {
    drift_err err;
    memset(E, 0, sizeof *E);
    E->cuda = gc_cached_spec("cuda");
    GC_CHECK(E->cuda != NULL, "the cuda backend must be creatable on a machine with a GPU");
    if (!E->cuda) return;
    drift_err_clear(&err);
    /* attn_tile=0: the exact CUDA attention is one softmax over all keys, not the
       cpu default (a flash order of 128-key tiles, what torch's cuDNN SDPA runs) */
    if (drift_backend_create("cpu:attn_tile=0", &E->cpu, &err)) {
        fprintf(stderr, "NOTE: no cpu backend (%s): cpu comparisons fail\n", gc_errstr(&err));
        E->cpu = NULL;
    }
    drift_err_clear(&err);
    if (drift_backend_create("ref", &E->ref, &err)) {
        fprintf(stderr, "NOTE: no ref backend (%s): ref comparisons fail\n", gc_errstr(&err));
        E->ref = NULL;
    }
}

static inline void gc_env_close(gc_env *E) {
    for (int i = 0; i < gc_n_cached; i++) drift_backend_free(gc_cache[i].be); /* E->cuda among them */
    gc_n_cached = 0;
    drift_backend_free(E->cpu);
    drift_backend_free(E->ref);
    memset(E, 0, sizeof *E);
}

/* ------------------------------------------------------------------------ */
/* Tensors on a backend, with guard zones on cuda                            */

#define GC_GUARD_VAL (-7.75f) /* exact in bf16, fp16, fp32 */

typedef struct gc_dev {
    drift_tensor big; /* what was allocated */
    drift_tensor t;   /* the view the op sees */
    int64_t guard;
    const drift_backend *be;
} gc_dev;

/* Allocates a tensor of dt/shape on be; with guard > 0, inside a larger
 * allocation with `guard` guard elements on each side (filled with
 * GC_GUARD_VAL). 0 on success. */
static inline int gc_dev_alloc(const drift_backend *be, drift_dtype dt, int ndim, const int64_t *shape, int64_t guard,
                               gc_dev *d) {
    drift_err err;
    drift_err_clear(&err);
    memset(d, 0, sizeof *d);
    d->be = be;
    d->guard = guard;
    int64_t n = gc_numel(ndim, shape);
    d->big.dtype = dt;
    if (guard > 0) {
        d->big.ndim = 1;
        d->big.shape[0] = n + 2 * guard;
    } else {
        d->big.ndim = ndim;
        for (int i = 0; i < ndim; i++) d->big.shape[i] = shape[i];
    }
    if (drift_backend_alloc(be, &d->big, &err)) {
        GC_CHECK(0, "alloc on %s failed: %s", drift_backend_name(be), gc_errstr(&err));
        return 1;
    }
    d->t = d->big;
    d->t.ndim = ndim;
    for (int i = 0; i < DRIFT_MAX_DIMS; i++) d->t.shape[i] = i < ndim ? shape[i] : 0;
    d->t.numel = n;
    if (guard > 0) {
        d->t.data = (char *)d->big.data + (size_t)guard * drift_dtype_size(dt);
        float *g = malloc((size_t)d->big.numel * sizeof(float));
        if (!g) exit(2);
        for (int64_t i = 0; i < d->big.numel; i++) g[i] = GC_GUARD_VAL;
        int rc = drift_backend_upload_f32(be, &d->big, g, &err);
        free(g);
        if (rc) {
            GC_CHECK(0, "guard upload failed: %s", gc_errstr(&err));
            return 1;
        }
    }
    return 0;
}

static inline void gc_dev_free(gc_dev *d) {
    if (d->be && d->big.data) drift_backend_release(d->be, &d->big);
    memset(d, 0, sizeof *d);
}

/* 1 if the guard zones still hold GC_GUARD_VAL. */
static inline int gc_dev_guards_ok(gc_dev *d, const char *what) {
    if (d->guard <= 0) return 1;
    drift_err err;
    drift_err_clear(&err);
    float *g = malloc((size_t)d->big.numel * sizeof(float));
    if (!g) exit(2);
    int ok = 1;
    if (drift_backend_download_f32(d->be, &d->big, g, &err)) {
        GC_CHECK(0, "guard download failed: %s", gc_errstr(&err));
        ok = 0;
    } else {
        int64_t n = d->t.numel;
        for (int64_t i = 0; i < d->guard && ok; i++) {
            if (g[i] != GC_GUARD_VAL || g[d->guard + n + i] != GC_GUARD_VAL) {
                GC_CHECK(0, "%s: guard element %lld overwritten (before: %g, after: %g)", what, (long long)i,
                         (double)g[i], (double)g[d->guard + n + i]);
                ok = 0;
            }
        }
    }
    free(g);
    return ok;
}

/* ------------------------------------------------------------------------ */
/* Comparisons                                                               */

/* Bit-exact (NaN == NaN). Returns mismatches; reports the first few. */
static inline int64_t gc_cmp_exact(const float *a, const float *b, int64_t n, const char *what) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (gc_same_bits(a[i], b[i])) continue;
        if (bad < 5)
            fprintf(stderr, "  %s [%s] mismatch at %lld: %.9g (0x%08x) vs %.9g (0x%08x)\n", what, gc_case, (long long)i,
                    (double)a[i], drift_f32_bits(a[i]), (double)b[i], drift_f32_bits(b[i]));
        bad++;
    }
    GC_CHECK(bad == 0, "%s: %lld of %lld elements differ bitwise", what, (long long)bad, (long long)n);
    return bad;
}

/* |a - b| <= ulps * ulp_dt(max(|a|,|b|)) + atol elementwise, with NaN and inf
 * parity (same NaN positions, same signed infinities). */
static inline int64_t gc_cmp_close(const float *a, const float *b, int64_t n, drift_dtype dt, double ulps, double atol,
                                   const char *what) {
    int64_t bad = 0;
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double x = a[i], y = b[i];
        int ok;
        if (isnan(x) || isnan(y)) ok = isnan(x) && isnan(y);
        else if (isinf(x) || isinf(y)) ok = x == y;
        else {
            double m = fabs(x) > fabs(y) ? fabs(x) : fabs(y);
            double tol = ulps * gc_ulp(m, dt) + atol;
            double d = fabs(x - y);
            ok = d <= tol;
            if (tol > 0 && d / tol > worst) worst = d / tol;
        }
        if (!ok) {
            if (bad < 5)
                fprintf(stderr, "  %s [%s] at %lld: cuda %.9g vs cpu %.9g (ulps %g, atol %g)\n", what, gc_case,
                        (long long)i, x, y, ulps, atol);
            bad++;
        }
    }
    GC_CHECK(bad == 0, "%s: %lld of %lld elements outside tolerance", what, (long long)bad, (long long)n);
    return bad;
}

/* NMSE of a against the ref values over positions where ref is finite;
 * non-finite positions must agree (NaN with NaN, same infinities). */
static inline double gc_nmse_ref(const float *a, const double *r, int64_t n, double bound, const char *what) {
    int64_t parity = 0;
    /* the rounded result may overflow where the fp64 value does not (|r| >= 6e4) */
    double nmse = parity_nmse(a, r, n, 1, &parity);
    GC_CHECK(parity == 0, "%s: %lld non-finite positions differ from the ref backend", what, (long long)parity);
    GC_CHECK(nmse <= bound, "%s: NMSE vs ref %.3e > bound %.3e", what, nmse, bound);
    return nmse;
}

/* ------------------------------------------------------------------------ */
/* One op on the three backends                                              */

typedef struct gc_case_spec {
    drift_op op;
    int n_in;
    gc_host *in[3];
    int out_ndim;                     /* -1: infer with drift_op_infer_shape */
    int64_t out_shape[DRIFT_MAX_DIMS]; /* required for VIEW/UNPATCHIFY */
    int exact;                        /* bit-exact vs cpu */
    double ulps, atol;                /* else elementwise tolerance vs cpu (ulps < 0: no elementwise check) */
    drift_dtype ulp_dt;               /* dtype of those ULPs (0: op.out) */
    double nmse_ref;                  /* bound vs ref (< 0: no ref comparison) */
    int64_t guard;                    /* guard elements around cuda tensors (0: none) */
    float *out_cuda;                  /* optional: receives the cuda result (caller frees) */
    int64_t out_numel;
} gc_case_spec;

static inline int gc_out_shape(gc_case_spec *c, int *nd, int64_t *shape) {
    drift_tensor tin[3];
    const drift_tensor *pin[3];
    memset(tin, 0, sizeof tin);
    for (int i = 0; i < c->n_in; i++) {
        tin[i].dtype = c->in[i]->dt;
        tin[i].ndim = c->in[i]->ndim;
        memcpy(tin[i].shape, c->in[i]->shape, sizeof tin[i].shape);
        tin[i].numel = c->in[i]->n;
        pin[i] = &tin[i];
    }
    drift_err err;
    drift_err_clear(&err);
    if (c->out_ndim >= 0) {
        *nd = c->out_ndim;
        memcpy(shape, c->out_shape, sizeof c->out_shape);
    } else {
        *nd = 0;
        memset(shape, 0, sizeof(int64_t) * DRIFT_MAX_DIMS);
    }
    c->op.n_in = c->n_in;
    if (drift_op_infer_shape(&c->op, pin, nd, shape, &err)) {
        GC_CHECK(0, "shape inference failed: %s", gc_errstr(&err));
        return 1;
    }
    return 0;
}

/* Runs c's op on be (no guards); result widened into out (n floats) or
 * outd (doubles, for ref). 0 on success. */
static inline int gc_run_host(const drift_backend *be, gc_case_spec *c, int nd, const int64_t *shape, float *out,
                              double *outd) {
    gc_dev din[3], dout;
    memset(din, 0, sizeof din);
    memset(&dout, 0, sizeof dout);
    drift_err err;
    drift_err_clear(&err);
    int rc = 0;
    for (int i = 0; i < c->n_in && !rc; i++) {
        rc = gc_dev_alloc(be, c->in[i]->dt, c->in[i]->ndim, c->in[i]->shape, 0, &din[i]);
        if (!rc && drift_backend_upload_f32(be, &din[i].t, c->in[i]->v, &err)) {
            GC_CHECK(0, "%s upload: %s", drift_backend_name(be), gc_errstr(&err));
            rc = 1;
        }
    }
    if (!rc) rc = gc_dev_alloc(be, c->op.out, nd, shape, 0, &dout);
    if (!rc) {
        const drift_tensor *pin[3] = {&din[0].t, &din[1].t, &din[2].t};
        if (drift_backend_run(be, &c->op, pin, &dout.t, &err)) {
            GC_CHECK(0, "%s run failed: %s", drift_backend_name(be), gc_errstr(&err));
            rc = 1;
        }
    }
    if (!rc) {
        int e = outd ? drift_backend_download_f64(be, &dout.t, outd, &err) : drift_backend_download_f32(be, &dout.t, out, &err);
        if (e) {
            GC_CHECK(0, "%s download: %s", drift_backend_name(be), gc_errstr(&err));
            rc = 1;
        }
    }
    for (int i = 0; i < 3; i++) gc_dev_free(&din[i]);
    gc_dev_free(&dout);
    return rc;
}

/* The cuda run: inputs and output inside guards, output poisoned with NaN
 * then with a finite sentinel, two runs that must agree bitwise, inputs
 * unchanged. Result in out. 0 on success. */
static inline int gc_run_cuda(const drift_backend *be, gc_case_spec *c, int nd, const int64_t *shape, float *out) {
    gc_dev din[3], dout;
    memset(din, 0, sizeof din);
    memset(&dout, 0, sizeof dout);
    drift_err err;
    drift_err_clear(&err);
    int rc = 0;
    int64_t n = gc_numel(nd, shape);
    for (int i = 0; i < c->n_in && !rc; i++) {
        rc = gc_dev_alloc(be, c->in[i]->dt, c->in[i]->ndim, c->in[i]->shape, c->guard, &din[i]);
        if (!rc && drift_backend_upload_f32(be, &din[i].t, c->in[i]->v, &err)) {
            GC_CHECK(0, "cuda upload: %s", gc_errstr(&err));
            rc = 1;
        }
    }
    if (!rc) rc = gc_dev_alloc(be, c->op.out, nd, shape, c->guard, &dout);
    float *res[2] = {malloc((size_t)(n > 0 ? n : 1) * sizeof(float)), malloc((size_t)(n > 0 ? n : 1) * sizeof(float))};
    float *poison = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!res[0] || !res[1] || !poison) exit(2);
    for (int pass = 0; pass < 2 && !rc; pass++) {
        for (int64_t i = 0; i < n; i++) poison[i] = pass == 0 ? NAN : -24576.0f;
        if (drift_backend_upload_f32(be, &dout.t, poison, &err)) {
            GC_CHECK(0, "poison upload: %s", gc_errstr(&err));
            rc = 1;
            break;
        }
        const drift_tensor *pin[3] = {&din[0].t, &din[1].t, &din[2].t};
        if (drift_backend_run(be, &c->op, pin, &dout.t, &err)) {
            GC_CHECK(0, "%s run failed: %s", drift_backend_name(be), gc_errstr(&err));
            rc = 1;
            break;
        }
        if (drift_backend_sync(be, &err)) {
            GC_CHECK(0, "%s sync after run failed: %s", drift_backend_name(be), gc_errstr(&err));
            rc = 1;
            break;
        }
        if (drift_backend_download_f32(be, &dout.t, res[pass], &err)) {
            GC_CHECK(0, "cuda download: %s", gc_errstr(&err));
            rc = 1;
        }
    }
    if (!rc) {
        /* both runs must give the same bits: every element written, deterministic */
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++)
            if (drift_f32_bits(res[0][i]) != drift_f32_bits(res[1][i]) && !(isnan(res[0][i]) && isnan(res[1][i])))
                bad++;
            else if (isnan(res[0][i]) != isnan(res[1][i]))
                bad++;
        GC_CHECK(bad == 0, "%s: %lld elements differ between the NaN-poisoned and the sentinel-poisoned run "
                 "(unwritten or nondeterministic)", drift_backend_name(be), (long long)bad);
        gc_dev_guards_ok(&dout, "output");
        for (int i = 0; i < c->n_in; i++) {
            gc_dev_guards_ok(&din[i], "input");
            float *back = malloc((size_t)(c->in[i]->n > 0 ? c->in[i]->n : 1) * sizeof(float));
            if (!back) exit(2);
            if (drift_backend_download_f32(be, &din[i].t, back, &err) == 0) {
                int64_t changed = 0;
                for (int64_t k = 0; k < c->in[i]->n; k++) changed += !gc_same_bits(back[k], c->in[i]->v[k]);
                GC_CHECK(changed == 0, "input %d modified by the op (%lld elements)", i, (long long)changed);
            }
            free(back);
        }
        memcpy(out, res[0], (size_t)n * sizeof(float));
    }
    free(res[0]);
    free(res[1]);
    free(poison);
    for (int i = 0; i < 3; i++) gc_dev_free(&din[i]);
    gc_dev_free(&dout);
    return rc;
}

/* Runs the case on `cuda` (and on E's cpu and ref), compares. Returns 0
 * when everything ran (comparison failures are counted, not returned). */
static inline int gc_run_case(gc_env *E, const drift_backend *cuda, gc_case_spec *c) {
    int nd;
    int64_t shape[DRIFT_MAX_DIMS];
    if (gc_out_shape(c, &nd, shape)) return 1;
    int64_t n = gc_numel(nd, shape);
    c->out_numel = n;
    float *oc = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    float *ocpu = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    double *oref = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    if (!oc || !ocpu || !oref) exit(2);
    int rc = gc_run_cuda(cuda, c, nd, shape, oc);
    if (!rc) {
        if (!E->cpu) {
            GC_CHECK(0, "no cpu backend to compare with");
        } else if (gc_run_host(E->cpu, c, nd, shape, ocpu, NULL) == 0) {
            if (c->exact)
                gc_cmp_exact(oc, ocpu, n, "cuda vs cpu (bit-exact)");
            else if (c->ulps >= 0)
                gc_cmp_close(oc, ocpu, n, c->ulp_dt ? c->ulp_dt : c->op.out, c->ulps, c->atol, "cuda vs cpu");
        }
        if (c->nmse_ref >= 0) {
            if (!E->ref) {
                GC_CHECK(0, "no ref backend to compare with");
            } else if (gc_run_host(E->ref, c, nd, shape, NULL, oref) == 0) {
                gc_nmse_ref(oc, oref, n, c->nmse_ref, "cuda vs ref");
            }
        }
    }
    if (c->out_cuda) free(c->out_cuda);
    c->out_cuda = rc ? NULL : oc;
    if (rc) free(oc);
    free(ocpu);
    free(oref);
    return rc;
}

static inline drift_op gc_op(drift_op_kind k, drift_dtype out) {
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = k;
    op.out = out;
    op.compute = DRIFT_F32;
    return op;
}

static inline const char *gc_dt(drift_dtype dt) { return drift_dtype_name(dt); }

/* NMSE bound of a result rounded once to dt: at most u^2 (u = 2^-8 bf16,
 * 2^-11 fp16, 2^-24 fp32: 1.5e-5, 2.4e-7, 3.6e-15) whatever the data, one
 * element included; random data give ~u^2/3. */
static inline double gc_nmse_bound(drift_dtype dt) { return parity_nmse_default(dt, 1); }

/* The coarser of two dtypes (bf16 > fp16 > fp32 in ULP size). */
static inline drift_dtype gc_coarser(drift_dtype a, drift_dtype b) {
    if (a == DRIFT_BF16 || b == DRIFT_BF16) return DRIFT_BF16;
    if (a == DRIFT_F16 || b == DRIFT_F16) return DRIFT_F16;
    return DRIFT_F32;
}

#endif
