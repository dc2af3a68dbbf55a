/* The parity harness's engine (parity.h): expands the table, runs each case
 * on every backend instance, checks. */
#include "tests/parity/parity.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "tests/parity/parity_util.h"

static const drift_dtype DT3[3] = {DRIFT_BF16, DRIFT_F16, DRIFT_F32};

static float round_to(float v, drift_dtype dt) {
    drift_dtype_round_n(&v, 1, dt);
    return v;
}

/* Uniform in [lo, hi), rounded to dt, never exactly zero. */
static float rng_val(float lo, float hi, drift_dtype dt) {
    for (;;) {
        float v = round_to((float)(lo + (hi - lo) * parity_rng_unif()), dt);
        if (v != 0.0f) return v;
    }
}

/* ---- small helpers ------------------------------------------------------- */

static int rank_of(drift_dtype d) { return d == DRIFT_BF16 ? 0 : d == DRIFT_F16 ? 1 : 2; }
static drift_dtype coarser(drift_dtype a, drift_dtype b) { return rank_of(a) <= rank_of(b) ? a : b; }

static int64_t numel_of(int nd, const int64_t *sh) {
    int64_t n = drift_shape_numel(nd, sh);
    return n < 0 ? 0 : n;
}

static double max_abs(const float *v, int64_t n) {
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(v[i]) && fabs(v[i]) > m) m = fabs(v[i]);
    return m;
}

/* Storage bytes per element (kernels/backend.h: ref double, cpu float (fp64: double), cuda native). */
static size_t elem_bytes(const drift_backend *be, drift_dtype dt) {
    const char *nm = drift_backend_name(be);
    if (strcmp(nm, "ref") == 0) return sizeof(double);
    if (strncmp(nm, "cpu", 3) == 0) return dt == DRIFT_F64 ? sizeof(double) : sizeof(float);
    return drift_dtype_size(dt);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "parity: out of memory\n");
        exit(2);
    }
    return p;
}

/* ---- reporting ----------------------------------------------------------- */

static parity_stats g_st;
static char g_where[512]; /* "family desc on backend" */

static void failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void failf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL %s: ", g_where);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    g_st.failed++;
}

static void check(int ok, const char *what) {
    g_st.checks++;
    if (!ok) failf("%s", what);
}

/* ---- tensors inside guards ----------------------------------------------- */

#define GUARD_VAL (-1232.0f) /* exact in bf16, fp16 and fp32 */

typedef struct dev {
    const drift_backend *be;
    drift_tensor big, t;         /* t: a view guard elements into big */
    int64_t guard;
} dev;

static int dev_alloc(dev *d, const drift_backend *be, drift_dtype dt, int nd, const int64_t *sh, int64_t guard) {
    drift_err err;
    drift_err_clear(&err);
    memset(d, 0, sizeof *d);
    d->be = be;
    d->guard = guard;
    int64_t n = numel_of(nd, sh);
    d->big.dtype = dt;
    d->big.ndim = 1;
    d->big.shape[0] = n + 2 * guard;
    if (drift_backend_alloc(be, &d->big, &err)) {
        failf("alloc: %s", err.msg);
        return 1;
    }
    d->t.dtype = dt;
    d->t.ndim = nd;
    for (int i = 0; i < nd; i++) d->t.shape[i] = sh[i];
    if (drift_backend_alias(be, &d->big, guard, &d->t, &err)) {
        /* declined (e.g. a cuda offset off the 16-byte grid): the same view by
           hand, which reaches the kernels' unaligned paths */
        d->t.data = (char *)d->big.data + (size_t)guard * elem_bytes(be, dt);
        d->t.numel = n;
        d->t.be = be;
    }
    float *g = xmalloc((size_t)d->big.numel * sizeof(float));
    for (int64_t i = 0; i < d->big.numel; i++) g[i] = GUARD_VAL;
    int rc = drift_backend_upload_f32(be, &d->big, g, &err);
    free(g);
    if (rc) failf("guard upload: %s", err.msg);
    return rc;
}

static void dev_free(dev *d) {
    if (d->be && d->big.data) drift_backend_release(d->be, &d->big);
    memset(d, 0, sizeof *d);
}

static int guards_ok(dev *d) {
    drift_err err;
    float *g = xmalloc((size_t)d->big.numel * sizeof(float));
    int ok = drift_backend_download_f32(d->be, &d->big, g, &err) == 0;
    for (int64_t i = 0; ok && i < d->guard; i++)
        ok = g[i] == GUARD_VAL && g[d->guard + d->t.numel + i] == GUARD_VAL;
    free(g);
    return ok;
}

/* ---- inputs ---------------------------------------------------------------- */

static void fill(const parity_in *in, float *v, int64_t n) {
    if (in->fill == PARITY_INDEX) {
        for (int64_t k = 0; k < n; k++) v[k] = floorf((float)(in->lo + (in->hi - in->lo) * parity_rng_unif()));
        return;
    }
    for (int64_t k = 0; k < n; k++) v[k] = rng_val(in->lo, in->hi, in->dt);
    switch (in->fill) {
    case PARITY_INDEX: break;
    case PARITY_UNIF: break;
    case PARITY_NONFINITE:
        v[0] = NAN;
        if (n >= 3) {
            v[n / 2] = INFINITY;
            v[n - 1] = -INFINITY;
        }
        break;
    case PARITY_SPECIALS: {
        static const float sp[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e30f, -1e30f, 1e-30f, 6e4f, -7e4f};
        for (int64_t k = 0; k < n; k++)
            if (parity_rng_unif() < 0.05) v[k] = round_to(sp[parity_rng_u64() % (sizeof sp / sizeof sp[0])], in->dt);
        break;
    }
    case PARITY_PATTERNS:
        for (int64_t k = 0; k < n; k++)
            v[k] = in->dt == DRIFT_BF16 ? drift_bf16_to_f32((uint16_t)k) : drift_f16_to_f32((uint16_t)k);
        break;
    case PARITY_TIES:
        for (int64_t k = 0; k < n; k++) {
            uint32_t hi = (uint32_t)parity_rng_u64() & 0xffff0000u; /* halfway for bf16, then for fp16 */
            v[k] = drift_bits_f32(k & 1 ? (hi | 0x8000u) : ((hi & 0xffffe000u) | 0x1000u));
        }
        break;
    }
}

/* ---- one backend run ------------------------------------------------------- */

typedef struct run_io {
    const parity_case *c;
    float *host[3];
    int64_t n_in[3];
    int out_nd;
    int64_t out_sh[DRIFT_MAX_DIMS];
    int64_t n_out;
} run_io;

/* The oracle: ref, no guards. 0 on success, result in r (n_out doubles). */
static int run_ref(const drift_backend *ref, const run_io *io, double *r) {
    const parity_case *c = io->c;
    drift_err err;
    drift_tensor in[3], out;
    memset(in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    int rc = 0;
    for (int i = 0; i < c->op.n_in && !rc; i++) {
        in[i].dtype = c->in[i].dt;
        in[i].ndim = c->in[i].nd;
        memcpy(in[i].shape, c->in[i].sh, sizeof in[i].shape);
        rc = drift_backend_alloc(ref, &in[i], &err) || drift_backend_upload_f32(ref, &in[i], io->host[i], &err);
    }
    out.dtype = c->op.out;
    out.ndim = io->out_nd;
    memcpy(out.shape, io->out_sh, sizeof out.shape);
    if (!rc) rc = drift_backend_alloc(ref, &out, &err);
    const drift_tensor *pin[3] = {&in[0], &in[1], &in[2]};
    if (!rc) rc = drift_backend_run(ref, &c->op, pin, &out, &err);
    if (!rc) rc = drift_backend_download_f64(ref, &out, r, &err);
    if (rc) failf("ref: %s: %s", err.where, err.msg);
    for (int i = 0; i < 3; i++) drift_backend_release(ref, &in[i]);
    drift_backend_release(ref, &out);
    return rc;
}

/* A checked run on be (guards, poison, determinism, inputs unchanged).
 * 0 on success, result in x (n_out floats). */
static int run_checked(const drift_backend *be, const run_io *io, float *x) {
    const parity_case *c = io->c;
    const int64_t guard = c->guard > 0 ? c->guard : 64;
    drift_err err;
    dev in[3], out;
    memset(in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    int rc = 0;
    for (int i = 0; i < c->op.n_in && !rc; i++) {
        rc = dev_alloc(&in[i], be, c->in[i].dt, c->in[i].nd, c->in[i].sh, guard);
        if (!rc && drift_backend_upload_f32(be, &in[i].t, io->host[i], &err)) {
            failf("upload: %s", err.msg);
            rc = 1;
        }
    }
    if (!rc) rc = dev_alloc(&out, be, c->op.out, io->out_nd, io->out_sh, guard);
    const int64_t n = io->n_out;
    float *res[2] = {xmalloc((size_t)n * sizeof(float)), xmalloc((size_t)n * sizeof(float))};
    float *poison = xmalloc((size_t)n * sizeof(float));
    const drift_tensor *pin[3] = {&in[0].t, &in[1].t, &in[2].t};
    for (int pass = 0; pass < 2 && !rc; pass++) {
        for (int64_t i = 0; i < n; i++) poison[i] = pass == 0 ? NAN : -24576.0f;
        if ((rc = drift_backend_upload_f32(be, &out.t, poison, &err)) || (rc = drift_backend_run(be, &c->op, pin, &out.t, &err)) ||
            (rc = drift_backend_sync(be, &err)) || (rc = drift_backend_download_f32(be, &out.t, res[pass], &err)))
            failf("run: %s: %s", err.where, err.msg);
    }
    if (!rc) {
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) bad += !parity_same_bits(res[0][i], res[1][i]);
        if (bad) failf("%lld of %lld elements differ between the NaN- and the sentinel-poisoned run (unwritten or "
                       "nondeterministic)", (long long)bad, (long long)n);
        g_st.checks++;
        check(guards_ok(&out), "an output guard element was overwritten");
        for (int i = 0; i < c->op.n_in; i++) {
            check(guards_ok(&in[i]), "an input guard element was overwritten");
            float *back = xmalloc((size_t)io->n_in[i] * sizeof(float));
            int64_t changed = 0;
            if (drift_backend_download_f32(be, &in[i].t, back, &err) == 0)
                for (int64_t k = 0; k < io->n_in[i]; k++) changed += !parity_same_bits(back[k], io->host[i][k]);
            else
                changed = -1;
            if (changed) failf("input %d modified by the op (%lld elements)", i, (long long)changed);
            g_st.checks++;
            free(back);
        }
        memcpy(x, res[0], (size_t)n * sizeof(float));
    }
    free(res[0]);
    free(res[1]);
    free(poison);
    for (int i = 0; i < 3; i++) dev_free(&in[i]);
    dev_free(&out);
    return rc;
}

/* ---- comparisons ------------------------------------------------------------ */

static drift_dtype effective_dtype(const parity_case *c) {
    drift_dtype e = c->op.out;
    if (c->op.kind == DRIFT_OP_LINEAR || c->op.kind == DRIFT_OP_ATTENTION) e = coarser(e, c->op.compute);
    if (c->op.kind == DRIFT_OP_RMS_NORM) e = coarser(e, c->in[0].dt);
    return e;
}

/* Defaults (cases.c explains them): host {1e-4, 1e-6, 1e-11}, device {2e-5, 1e-6, 1e-10}. */
static double nmse_bound(const parity_case *c, int device) {
    const drift_dtype e = effective_dtype(c);
    const int k = rank_of(e);
    const double b = device ? c->tol.nmse_dev[k] : c->tol.nmse_host[k];
    return b != 0.0 ? b : parity_nmse_default(e, device);
}

static void cmp_ref(const parity_case *c, const float *x, const double *r, int64_t n, int device) {
    const double bound = nmse_bound(c, device);
    int64_t parity = 0;
    const double nmse = parity_nmse(x, r, n, c->tol.may_overflow, &parity);
    if (parity) failf("%lld non-finite positions differ from the ref backend", (long long)parity);
    g_st.checks++;
    if (bound < 0) return;
    if (!(nmse <= bound)) failf("NMSE vs ref %.3e > bound %.1e", nmse, bound);
    g_st.checks++;
}

static double atol_of(const parity_case *c, const run_io *io) {
    const parity_tol *t = &c->tol;
    switch (t->atol_kind) {
    case PARITY_ATOL_NONE: return t->atol;
    case PARITY_ATOL_MAX_IN0: return t->atol * max_abs(io->host[0], io->n_in[0]);
    case PARITY_ATOL_MAX_IN2: return t->atol * max_abs(io->host[2], io->n_in[2]);
    case PARITY_ATOL_IN0_PLUS1: return t->atol * (max_abs(io->host[0], io->n_in[0]) + 1.0);
    case PARITY_ATOL_GEMM: {
        const int64_t K = c->in[0].sh[c->in[0].nd - 1];
        return t->atol * (double)(K > 0 ? K : 1) * fmax(max_abs(io->host[0], io->n_in[0]), 1e-30) *
               fmax(max_abs(io->host[1], io->n_in[1]), 1e-30);
    }
    }
    return t->atol;
}

static void cmp_cpu(const parity_case *c, const run_io *io, const float *x, const float *cpu, int exact) {
    const int64_t n = io->n_out;
    int64_t bad = 0;
    if (c->tol.exact || exact) {
        for (int64_t i = 0; i < n; i++)
            if (!parity_same_bits(x[i], cpu[i]) && bad++ < 3)
                fprintf(stderr, "  at %lld: %.9g (0x%08x) vs cpu %.9g (0x%08x)\n", (long long)i, (double)x[i],
                        drift_f32_bits(x[i]), (double)cpu[i], drift_f32_bits(cpu[i]));
        if (bad) failf("%lld of %lld elements differ bitwise from cpu", (long long)bad, (long long)n);
        g_st.checks++;
        return;
    }
    drift_dtype udt = c->tol.ulp_of_coarser_in0 ? coarser(c->op.out, c->in[0].dt) : c->op.out;
    const double ulps = udt == DRIFT_F32 ? c->tol.ulps32 : c->tol.ulps16;
    if (ulps < 0) return;
    const double atol = atol_of(c, io);
    for (int64_t i = 0; i < n; i++) {
        const double a = x[i], b = cpu[i];
        int ok;
        if (isnan(a) || isnan(b)) ok = isnan(a) && isnan(b);
        else if (isinf(a) || isinf(b)) ok = a == b;
        else {
            ok = fabs(a - b) <= ulps * parity_ulp(fmax(fabs(a), fabs(b)), udt) + atol;
        }
        if (!ok && bad++ < 3)
            fprintf(stderr, "  at %lld: %.9g vs cpu %.9g (ulps %g, atol %g)\n", (long long)i, a, b, ulps, atol);
    }
    if (bad) failf("%lld of %lld elements outside %g ULPs + %g of cpu", (long long)bad, (long long)n, ulps, atol);
    g_st.checks++;
}

/* ---- one case over every backend ------------------------------------------ */

static void describe(const parity_case *c, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "%s: %s(", c->family, drift_op_name(c->op.kind));
    for (int i = 0; i < c->op.n_in && o < n; i++) {
        o += (size_t)snprintf(buf + o, n - o, "%s[", i ? ", " : "");
        for (int d = 0; d < c->in[i].nd && o < n; d++)
            o += (size_t)snprintf(buf + o, n - o, "%s%lld", d ? "," : "", (long long)c->in[i].sh[d]);
        if (o < n) o += (size_t)snprintf(buf + o, n - o, "]:%s", drift_dtype_name(c->in[i].dt));
    }
    if (o < n) snprintf(buf + o, n - o, ") compute=%s out=%s", drift_dtype_name(c->op.compute), drift_dtype_name(c->op.out));
}

static uint64_t g_seed = 1;

static void run_case(const parity_case *c, const parity_backend *bes, int nb, const drift_backend *ref,
                     const drift_backend *cpu) {
    char desc[400];
    describe(c, desc, sizeof desc);
    snprintf(g_where, sizeof g_where, "%s", desc);
    g_st.cases++;
    run_io io;
    memset(&io, 0, sizeof io);
    io.c = c;
    parity_rng_seed(g_seed++);
    drift_tensor shp[3];
    const drift_tensor *pshp[3];
    memset(shp, 0, sizeof shp);
    for (int i = 0; i < c->op.n_in; i++) {
        io.n_in[i] = numel_of(c->in[i].nd, c->in[i].sh);
        io.host[i] = xmalloc((size_t)io.n_in[i] * sizeof(float));
        fill(&c->in[i], io.host[i], io.n_in[i]);
        shp[i].dtype = c->in[i].dt;
        shp[i].ndim = c->in[i].nd;
        memcpy(shp[i].shape, c->in[i].sh, sizeof shp[i].shape);
        shp[i].numel = io.n_in[i];
        pshp[i] = &shp[i];
    }
    drift_err err;
    io.out_nd = c->out_nd;
    memcpy(io.out_sh, c->out_sh, sizeof io.out_sh);
    if (drift_op_infer_shape(&c->op, pshp, &io.out_nd, io.out_sh, &err)) {
        failf("infer_shape: %s", err.msg);
        goto done;
    }
    io.n_out = numel_of(io.out_nd, io.out_sh);
    double *r = xmalloc((size_t)io.n_out * sizeof(double));
    float *x = xmalloc((size_t)io.n_out * sizeof(float)), *xc = xmalloc((size_t)io.n_out * sizeof(float));
    snprintf(g_where, sizeof g_where, "%s on ref", desc);
    int have_ref = run_ref(ref, &io, r) == 0, have_cpu = 0;
    for (int b = -1; b < nb && have_ref; b++) {
        const drift_backend *be = b < 0 ? cpu : bes[b].be;
        const int device = b >= 0 && bes[b].device;
        if (b >= 0 && be == cpu) continue;
        snprintf(g_where, sizeof g_where, "%s on %s", desc, b < 0 ? "cpu" : bes[b].spec);
        if (!drift_backend_supports(be, &c->op)) {
            g_st.skipped++;
            continue;
        }
        float *out = b < 0 ? xc : x;
        if (run_checked(be, &io, out)) continue;
        cmp_ref(c, out, r, io.n_out, device);
        if (b < 0) have_cpu = 1;
        /* a cpu with other options (threads=): the same bits on every op, GEMMs included (issue 32) */
        else if (device && have_cpu) cmp_cpu(c, &io, out, xc, strncmp(bes[b].spec, "cpu:", 4) == 0);
    }
    free(r);
    free(x);
    free(xc);
done:
    for (int i = 0; i < 3; i++) free(io.host[i]);
}

/* ---- table expansion ---------------------------------------------------------- */

static drift_dtype resolve(drift_dtype dt, drift_dtype in0, drift_dtype compute, drift_dtype out) {
    return dt == PARITY_DT_IN0 ? in0 : dt == PARITY_DT_COMPUTE ? compute : dt == PARITY_DT_OUT ? out : dt;
}

parity_stats parity_run(const parity_backend *bes, int n, const char *only_family) {
    memset(&g_st, 0, sizeof g_st);
    const drift_backend *ref = NULL, *cpu = NULL;
    for (int b = 0; b < n; b++) {
        if (strcmp(bes[b].spec, "ref") == 0) ref = bes[b].be;
        if (strcmp(bes[b].spec, "cpu") == 0) cpu = bes[b].be;
    }
    if (!ref || !cpu) {
        fprintf(stderr, "parity: the ref and cpu backends are required\n");
        g_st.failed++;
        return g_st;
    }
    /* per family, in the order of first appearance */
    enum { MAX_FAM = 64 };
    const char *fam[MAX_FAM];
    long fam_cases[MAX_FAM], fam_failed[MAX_FAM];
    int n_fam = 0;
    for (int r = 0; r < parity_n_rows; r++) {
        const parity_row *row = &parity_rows[r];
        if (only_family && strncmp(row->c.family, only_family, strlen(only_family)) != 0) continue;
        int f = 0;
        while (f < n_fam && strcmp(fam[f], row->c.family) != 0) f++;
        if (f == n_fam) {
            if (n_fam == MAX_FAM) {
                fprintf(stderr, "parity: more than %d families\n", MAX_FAM);
                g_st.failed++;
                return g_st;
            }
            fam[n_fam] = row->c.family;
            fam_cases[n_fam] = fam_failed[n_fam] = 0;
            n_fam++;
        }
        const long failed_before = g_st.failed;
        const int so = row->sweep & PARITY_SW_OUT ? 3 : 1, si = row->sweep & PARITY_SW_IN0 ? 3 : 1,
                  sc = row->sweep & PARITY_SW_COMPUTE ? 3 : 1;
        for (int o = 0; o < so; o++)
            for (int a = 0; a < si; a++)
                for (int k = 0; k < sc; k++) {
                    parity_case c = row->c;
                    if (so > 1) c.op.out = DT3[o];
                    if (sc > 1) c.op.compute = DT3[k];
                    drift_dtype in0 = si > 1 ? DT3[a] : resolve(c.in[0].dt, c.in[0].dt, c.op.compute, c.op.out);
                    for (int i = 0; i < c.op.n_in; i++) c.in[i].dt = resolve(c.in[i].dt, in0, c.op.compute, c.op.out);
                    if (si > 1) c.in[0].dt = in0;
                    if (row->sweep & PARITY_SW_IN1_ROT) c.in[1].dt = DT3[(a + o) % 3];
                    if (row->adjust) row->adjust(&c);
                    run_case(&c, bes, n, ref, cpu);
                    fam_cases[f]++;
                }
        fam_failed[f] += g_st.failed - failed_before;
    }
    for (int f = 0; f < n_fam; f++)
        printf("  %-20s %5ld cases  %s\n", fam[f], fam_cases[f], fam_failed[f] ? "FAILED" : "ok");
    return g_st;
}
