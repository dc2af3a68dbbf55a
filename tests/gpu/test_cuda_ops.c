/* CUDA backend vs cpu backend vs ref backend: elementwise ops, casts, norms,
 * RoPE, the timestep sinusoid and the layout ops (gpu_check.h says how each
 * case runs: poisoned outputs, guards, determinism, cpu and ref comparison).
 *
 * Expectations per op (cuda vs cpu; cuda vs ref NMSE bound by output dtype,
 * gc_nmse_bound: bf16 2e-5, fp16 1e-6, fp32 1e-10, unless noted):
 *   CAST, ADD, SUB, MUL, AFFINE, ROPE,
 *   PERMUTE, NARROW, CONCAT, VIEW, PATCHIFY, UNPATCHIFY   bit-exact
 *   SILU                       1 ULP of the output dtype (fp32: 8 ULPs)
 *   GELU_TANH                  same + atol 2.4e-7 * max|x| (1 + tanh cancels)
 *   LAYER_NORM, RMS_NORM       1 ULP (16-bit out) / 4 ULPs (fp32) + atol
 *                              2e-4 * max|y| (the cpu sums sequentially);
 *                              ref NMSE 1e-9 for fp32 outputs; RMS_NORM's
 *                              ULPs and NMSE are those of the coarser of x's
 *                              and out's dtype (it rounds x*rstd to x's dtype)
 *   TIMESTEP_SINUSOID          4 ULPs + atol 1e-4 (|t| <= 1000: a 1-ULP
 *                              difference of freq moves arg by ~6e-5);
 *                              ref NMSE 1e-7
 * Every case runs on the default cuda backend and on one with
 * i64=1 (the 64-bit index kernels); norms also with
 * norm_smem=0 (rows re-read from global memory). Inputs include
 * NaN/inf/+-0/huge/tiny values where the op is elementwise (NaN/inf parity
 * with cpu and ref), odd sizes (1, 3, 17, 33, 4097, 70001) and views at odd
 * element offsets (guard = 1). */
#include "gpu_check.h"

static gc_env E;

static drift_backend *variants[4];
static const char *variant_names[4];
static int n_variants;

static const drift_dtype DT3[3] = {DRIFT_F32, DRIFT_BF16, DRIFT_F16};

static void spec_init(gc_case_spec *c, drift_op op, int n_in) {
    memset(c, 0, sizeof *c);
    c->op = op;
    c->n_in = n_in;
    c->out_ndim = -1;
    c->guard = 64;
    c->ulps = -1;
}

static double max_abs(const gc_host *h) {
    double m = 0;
    for (int64_t i = 0; i < h->n; i++)
        if (isfinite(h->v[i]) && fabs(h->v[i]) > m) m = fabs(h->v[i]);
    return m;
}

static void run_all_variants(gc_case_spec *c) {
    char base[sizeof gc_case];
    snprintf(base, sizeof base, "%s", gc_case);
    for (int v = 0; v < n_variants; v++) {
        gc_case_set("%s | %s", base, variant_names[v]);
        gc_run_case(&E, variants[v], c);
        free(c->out_cuda);
        c->out_cuda = NULL;
    }
    gc_case_set("%s", base);
}

/* ------------------------------------------------------------------------ */

static void test_cast(void) {
    static const int64_t sizes[] = {1, 3, 17, 33, 4097, 70001};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
                int64_t n = sizes[s];
                double scale = s % 3 == 0 ? 1.0 : s % 3 == 1 ? 3e4 : 3e-6; /* fp16 overflow and subnormals */
                gc_host x = gc_host_make(DT3[a], 1, &n, scale);
                gc_host_specials(&x, 0.05);
                gc_case_spec c;
                spec_init(&c, gc_op(DRIFT_OP_CAST, DT3[b]), 1);
                c.in[0] = &x;
                c.exact = 1;
                /* fp16 subnormals carry large relative rounding errors: exactness vs cpu is the check */
                c.nmse_ref = (scale < 1e-4 && DT3[b] == DRIFT_F16) ? -1 : gc_nmse_bound(DT3[b]);
                c.guard = s == 2 ? 1 : 64;
                gc_case_set("cast %s->%s n=%lld scale=%g", gc_dt(DT3[a]), gc_dt(DT3[b]), (long long)n, scale);
                run_all_variants(&c);
                gc_host_free(&x);
            }
    /* every bf16 and fp16 bit pattern, and fp32 values at rounding ties */
    for (int src = 0; src < 3; src++) {
        int64_t n = 65536;
        gc_host x = gc_host_make(DT3[src], 1, &n, 0.0);
        for (int64_t i = 0; i < n; i++) {
            if (DT3[src] == DRIFT_BF16) x.v[i] = drift_bf16_to_f32((uint16_t)i);
            else if (DT3[src] == DRIFT_F16) x.v[i] = drift_f16_to_f32((uint16_t)i);
            else {
                /* halfway cases for bf16 (low 16 bits 0x8000) and fp16 (0x1000 past the kept bits) */
                uint32_t hi = (uint32_t)gc_u64() & 0xffff0000u;
                x.v[i] = drift_bits_f32(i & 1 ? (hi | 0x8000u) : ((hi & 0xffffe000u) | 0x1000u));
            }
        }
        for (int dst = 0; dst < 3; dst++) {
            gc_case_spec c;
            spec_init(&c, gc_op(DRIFT_OP_CAST, DT3[dst]), 1);
            c.in[0] = &x;
            c.exact = 1;
            c.nmse_ref = -1; /* all patterns include huge values: exactness is the check */
            gc_case_set("cast all-patterns/ties %s->%s", gc_dt(DT3[src]), gc_dt(DT3[dst]));
            run_all_variants(&c);
        }
        gc_host_free(&x);
    }
}

typedef struct bshape {
    int na, nb;
    int64_t a[8], b[8];
} bshape;

static void test_binary(void) {
    static const bshape shapes[] = {
        {1, 1, {1000}, {1000}},
        {2, 1, {7, 33}, {33}},
        {3, 3, {3, 17, 33}, {3, 1, 33}},
        {3, 3, {5, 1, 7}, {1, 6, 1}},
        {1, 1, {4097}, {1}},
        {8, 8, {2, 3, 4, 5, 3, 7, 2, 3}, {1, 3, 1, 5, 1, 7, 1, 3}},
        {1, 2, {1}, {2, 3}},
        {2, 3, {17, 1}, {2, 1, 33}},
        {3, 2, {64, 3, 128}, {3, 128}},
    };
    static const drift_dtype combos[][3] = {
        {DRIFT_F32, DRIFT_F32, DRIFT_F32},  {DRIFT_BF16, DRIFT_BF16, DRIFT_BF16}, {DRIFT_BF16, DRIFT_F32, DRIFT_F32},
        {DRIFT_F16, DRIFT_F16, DRIFT_F16},  {DRIFT_F32, DRIFT_BF16, DRIFT_BF16},  {DRIFT_F16, DRIFT_BF16, DRIFT_F32},
    };
    static const drift_op_kind kinds[3] = {DRIFT_OP_ADD, DRIFT_OP_SUB, DRIFT_OP_MUL};
    for (int k = 0; k < 3; k++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (size_t d = 0; d < sizeof combos / sizeof *combos; d++) {
                if ((s + d + (size_t)k) % 2) continue; /* half the product keeps the run short */
                const bshape *sh = &shapes[s];
                gc_host a = gc_host_make(combos[d][0], sh->na, sh->a, 2.0);
                gc_host b = gc_host_make(combos[d][1], sh->nb, sh->b, 2.0);
                gc_host_specials(&a, 0.03);
                gc_host_specials(&b, 0.03);
                gc_case_spec c;
                spec_init(&c, gc_op(kinds[k], combos[d][2]), 2);
                c.in[0] = &a;
                c.in[1] = &b;
                c.exact = 1;
                c.nmse_ref = gc_nmse_bound(combos[d][2]);
                c.guard = s == 3 ? 1 : 64;
                gc_case_set("%s shape#%zu %s,%s->%s", drift_op_name(kinds[k]), s, gc_dt(combos[d][0]),
                            gc_dt(combos[d][1]), gc_dt(combos[d][2]));
                run_all_variants(&c);
                gc_host_free(&a);
                gc_host_free(&b);
            }
}

static void test_affine(void) {
    static const float ab[][2] = {{1.0f, 0.0f}, {0.5f, -3.0f}, {-1e-3f, 7.25f}, {3.1f, 1e-7f}, {0.0f, 2.0f}};
    static const int64_t sizes[] = {1, 17, 4097, 70001};
    for (size_t p = 0; p < sizeof ab / sizeof *ab; p++)
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) {
                int64_t n = sizes[(p + (size_t)a + (size_t)b) % 4];
                gc_host x = gc_host_make(DT3[a], 1, &n, 10.0);
                gc_host_specials(&x, 0.03);
                drift_op op = gc_op(DRIFT_OP_AFFINE, DT3[b]);
                op.alpha = ab[p][0];
                op.beta = ab[p][1];
                gc_case_spec c;
                spec_init(&c, op, 1);
                c.in[0] = &x;
                c.exact = 1;
                c.nmse_ref = gc_nmse_bound(DT3[b]);
                gc_case_set("affine a=%g b=%g %s->%s n=%lld", (double)ab[p][0], (double)ab[p][1], gc_dt(DT3[a]),
                            gc_dt(DT3[b]), (long long)n);
                run_all_variants(&c);
                gc_host_free(&x);
            }
}

static void test_activations(void) {
    static const drift_op_kind kinds[2] = {DRIFT_OP_SILU, DRIFT_OP_GELU_TANH};
    for (int k = 0; k < 2; k++)
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) {
                int64_t n = (a + b) % 2 ? 4097 : 33;
                gc_host x = gc_host_make(DT3[a], 1, &n, 3.0);
                for (int64_t i = 0; i < n; i += 17) x.v[i] = drift_round_to((float)(gc_unif() * 200.0 - 100.0), DT3[a]);
                gc_host_specials(&x, 0.02);
                gc_case_spec c;
                spec_init(&c, gc_op(kinds[k], DT3[b]), 1);
                c.in[0] = &x;
                c.ulps = DT3[b] == DRIFT_F32 ? 8.0 : 1.0;
                c.atol = kinds[k] == DRIFT_OP_GELU_TANH ? 2.4e-7 * max_abs(&x) : 0.0;
                c.nmse_ref = DT3[b] == DRIFT_F32 ? 1e-9 : gc_nmse_bound(DT3[b]);
                gc_case_set("%s %s->%s n=%lld", drift_op_name(kinds[k]), gc_dt(DT3[a]), gc_dt(DT3[b]), (long long)n);
                run_all_variants(&c);
                gc_host_free(&x);
            }
}

static void test_norms(void) {
    static const int64_t dims[] = {1, 3, 17, 33, 63, 64, 65, 255, 256, 257, 1000, 2048, 2049, 3072, 4097, 13000};
    for (int kind = 0; kind < 2; kind++)
        for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
            int64_t D = dims[di];
            int64_t rows = D >= 4097 ? 3 : D >= 1000 ? 9 : 37;
            int xdi = (int)(di % 3), odi = (int)((di / 3) % 3);
            drift_dtype xdt = DT3[xdi], odt = di % 2 ? xdt : DT3[odi];
            int max_in = kind == 0 ? 3 : 2;
            int n_in = 1 + (int)(di % (size_t)max_in);
            drift_dtype wdt = di % 4 < 2 ? DRIFT_F32 : DRIFT_BF16;
            int64_t xs[3] = {rows / 3 > 0 ? 3 : 1, rows / 3 > 0 ? rows / 3 : rows, D};
            gc_host x = gc_host_make(xdt, 3, xs, 1.0);
            for (int64_t i = 0; i < x.n; i++) x.v[i] = drift_round_to(x.v[i] + 3.0f, xdt); /* non-zero mean */
            int64_t ws[1] = {D};
            gc_host w = gc_host_make(wdt, 1, ws, 0.5), b = gc_host_make(wdt, 1, ws, 0.5);
            for (int64_t i = 0; i < D; i++) w.v[i] = drift_round_to(1.0f + w.v[i], wdt);
            drift_op op = gc_op(kind == 0 ? DRIFT_OP_LAYER_NORM : DRIFT_OP_RMS_NORM, odt);
            op.eps = 1e-6f;
            gc_case_spec c;
            spec_init(&c, op, n_in);
            c.in[0] = &x;
            c.in[1] = &w;
            c.in[2] = &b;
            c.ulps = odt == DRIFT_F32 ? 4.0 : 1.0;
            c.atol = 2e-4 * (max_abs(&x) + 1.0) * 2.0;
            c.nmse_ref = odt == DRIFT_F32 ? 1e-9 : gc_nmse_bound(odt);
            if (kind == 1) {
                /* rms_norm rounds x*rstd to x's dtype before the weight: a
                   different rstd (sum order) moves it by one ULP of that dtype */
                c.ulp_dt = gc_coarser(xdt, odt);
                c.ulps = c.ulp_dt == DRIFT_F32 ? 4.0 : 1.0;
                if (c.ulp_dt != DRIFT_F32) c.nmse_ref = 2.0 * gc_nmse_bound(c.ulp_dt);
            }
            gc_case_set("%s D=%lld rows=%lld n_in=%d x=%s w=%s out=%s", drift_op_name(op.kind), (long long)D,
                        (long long)(xs[0] * xs[1]), n_in, gc_dt(xdt), gc_dt(wdt), gc_dt(odt));
            run_all_variants(&c);
            /* a row with a NaN and a row with an inf: whole rows NaN, same as cpu */
            if (di % 5 == 0) {
                x.v[0] = NAN;
                x.v[x.n - 1] = INFINITY;
                c.nmse_ref = -1;
                gc_case_set("%s D=%lld with NaN/inf rows", drift_op_name(op.kind), (long long)D);
                run_all_variants(&c);
            }
            gc_host_free(&x);
            gc_host_free(&w);
            gc_host_free(&b);
        }
}

static void test_rope(void) {
    static const int64_t shapes[][4] = {{1, 1, 1, 2}, {2, 3, 1, 8}, {1, 17, 3, 64}, {2, 5, 2, 128}, {1, 33, 4, 6}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int a = 0; a < 3; a++) {
            const int64_t *sh = shapes[s];
            drift_dtype odt = s % 2 ? DT3[a] : DRIFT_F32;
            gc_host x = gc_host_make(DT3[a], 4, sh, 1.5);
            if (s == 3) gc_host_specials(&x, 0.02);
            int64_t ts[2] = {sh[1], sh[3]};
            gc_host cs = gc_host_make(DRIFT_F32, 2, ts, 0.0), sn = gc_host_make(DRIFT_F32, 2, ts, 0.0);
            for (int64_t i = 0; i < cs.n; i++) {
                double ang = gc_unif() * 100.0;
                cs.v[i] = (float)cos(ang);
                sn.v[i] = (float)sin(ang);
            }
            gc_case_spec c;
            spec_init(&c, gc_op(DRIFT_OP_ROPE, odt), 3);
            c.in[0] = &x;
            c.in[1] = &cs;
            c.in[2] = &sn;
            c.exact = 1;
            c.nmse_ref = gc_nmse_bound(odt);
            c.guard = s == 4 ? 1 : 64;
            gc_case_set("rope [%lld,%lld,%lld,%lld] %s->%s", (long long)sh[0], (long long)sh[1], (long long)sh[2],
                        (long long)sh[3], gc_dt(DT3[a]), gc_dt(odt));
            run_all_variants(&c);
            gc_host_free(&x);
            gc_host_free(&cs);
            gc_host_free(&sn);
        }
}

static void test_sinusoid(void) {
    static const int dims[] = {1, 2, 3, 8, 255, 256, 320};
    static const float periods[] = {10000.0f, 0.0f, 100.0f};
    for (size_t d = 0; d < sizeof dims / sizeof *dims; d++)
        for (int flip = 0; flip < 2; flip++) {
            int64_t B = d % 2 ? 17 : 3;
            gc_host t = gc_host_unif(DRIFT_F32, 1, &B, 0.0, 1000.0);
            t.v[0] = 0.0f;
            if (B > 1) t.v[1] = 999.0f;
            drift_dtype odt = d == 4 ? DRIFT_BF16 : DRIFT_F32;
            drift_op op = gc_op(DRIFT_OP_TIMESTEP_SINUSOID, odt);
            op.dim = dims[d];
            op.flip_sin_to_cos = flip;
            op.max_period = periods[d % 3];
            gc_case_spec c;
            spec_init(&c, op, 1);
            c.in[0] = &t;
            c.ulps = 4.0;
            c.atol = 1e-4;
            c.nmse_ref = odt == DRIFT_F32 ? 1e-7 : gc_nmse_bound(odt);
            gc_case_set("sinusoid B=%lld dim=%d flip=%d period=%g out=%s", (long long)B, dims[d], flip,
                        (double)op.max_period, gc_dt(odt));
            run_all_variants(&c);
            gc_host_free(&t);
        }
}

/* ------------------------------------------------------------------------ */
/* layouts                                                                    */

static void layout_case(drift_op op, int n_in, gc_host *a, gc_host *b, int out_ndim, const int64_t *out_shape) {
    gc_case_spec c;
    spec_init(&c, op, n_in);
    c.in[0] = a;
    c.in[1] = b;
    c.exact = 1;
    c.nmse_ref = a->dt == op.out ? 1e-30 : gc_nmse_bound(op.out); /* moves are exact */
    if (out_ndim >= 0) {
        c.out_ndim = out_ndim;
        for (int i = 0; i < out_ndim; i++) c.out_shape[i] = out_shape[i];
    }
    c.guard = (gc_u64() % 3 == 0) ? 1 : 64;
    run_all_variants(&c);
}

static void test_layouts(void) {
    /* PERMUTE: random ranks 1..8, random permutations */
    for (int it = 0; it < 24; it++) {
        int nd = 1 + it % 8;
        int64_t sh[8];
        int64_t total = 1;
        for (int i = 0; i < nd; i++) {
            sh[i] = 1 + (int64_t)(gc_u64() % (nd > 4 ? 4 : 9));
            total *= sh[i];
        }
        drift_dtype in = DT3[it % 3], outdt = it % 7 == 0 ? DT3[(it + 1) % 3] : in;
        gc_host x = gc_host_make(in, nd, sh, 1.0);
        gc_host_specials(&x, 0.05);
        drift_op op = gc_op(DRIFT_OP_PERMUTE, outdt);
        for (int i = 0; i < nd; i++) op.perm[i] = i;
        for (int i = nd - 1; i > 0; i--) {
            int j = (int)(gc_u64() % (uint64_t)(i + 1));
            int t = op.perm[i];
            op.perm[i] = op.perm[j];
            op.perm[j] = t;
        }
        gc_case_set("permute nd=%d numel=%lld perm0=%d %s->%s", nd, (long long)total, op.perm[0], gc_dt(in),
                    gc_dt(outdt));
        layout_case(op, 1, &x, NULL, -1, NULL);
        gc_host_free(&x);
    }
    /* NARROW along every dim of a rank-4 tensor, incl. empty and full slices */
    {
        int64_t sh[4] = {3, 17, 5, 33};
        for (int d = -1; d < 4; d++)
            for (int v = 0; v < 3; v++) {
                int dd = d < 0 ? 3 : d;
                gc_host x = gc_host_make(DT3[v], 4, sh, 1.0);
                drift_op op = gc_op(DRIFT_OP_NARROW, DT3[v]);
                op.dim = d;
                op.start = v == 0 ? 0 : v == 1 ? 1 : sh[dd] - 1;
                op.length = v == 0 ? sh[dd] : v == 1 ? (sh[dd] - 2 > 0 ? sh[dd] - 2 : 0) : 1;
                if (d == 2 && v == 1) op.length = 0; /* empty slice */
                gc_case_set("narrow dim=%d start=%lld len=%lld %s", d, (long long)op.start, (long long)op.length,
                            gc_dt(DT3[v]));
                layout_case(op, 1, &x, NULL, -1, NULL);
                gc_host_free(&x);
            }
    }
    /* CONCAT along every dim */
    for (int d = 0; d < 3; d++)
        for (int v = 0; v < 3; v++) {
            int64_t sa[3] = {4, 7, 9}, sb[3] = {4, 7, 9};
            sb[d] = 1 + v * 5;
            gc_host a = gc_host_make(DT3[v], 3, sa, 1.0), b = gc_host_make(DT3[v], 3, sb, 1.0);
            gc_host_specials(&b, 0.05);
            drift_op op = gc_op(DRIFT_OP_CONCAT, DT3[v]);
            op.dim = d == 2 ? -1 : d;
            gc_case_set("concat dim=%d %s", op.dim, gc_dt(DT3[v]));
            layout_case(op, 2, &a, &b, -1, NULL);
            gc_host_free(&a);
            gc_host_free(&b);
        }
    /* VIEW */
    for (int v = 0; v < 3; v++) {
        int64_t sa[2] = {33, 130}, so[3] = {11, 3, 130};
        gc_host a = gc_host_make(DT3[v], 2, sa, 1.0);
        drift_op op = gc_op(DRIFT_OP_VIEW, v == 2 ? DRIFT_F32 : DT3[v]);
        gc_case_set("view %s->%s", gc_dt(DT3[v]), gc_dt(op.out));
        layout_case(op, 1, &a, NULL, 3, so);
        gc_host_free(&a);
    }
    /* PATCHIFY / UNPATCHIFY, and the round trip on cuda */
    static const int64_t lat[][5] = {{1, 16, 3, 8, 6}, {2, 3, 4, 4, 6}, {1, 5, 2, 3, 3}, {1, 2, 6, 5, 4}};
    static const int pat[][3] = {{1, 2, 2}, {2, 2, 2}, {1, 1, 1}, {3, 1, 2}};
    for (int s = 0; s < 4; s++) {
        drift_dtype dt = DT3[s % 3];
        gc_host x = gc_host_make(dt, 5, lat[s], 1.0);
        drift_op op = gc_op(DRIFT_OP_PATCHIFY, dt);
        memcpy(op.patch, pat[s], sizeof op.patch);
        gc_case_set("patchify #%d %s", s, gc_dt(dt));
        layout_case(op, 1, &x, NULL, -1, NULL);
        /* unpatchify tokens [B, L, P] back into the latent shape */
        int64_t L = (lat[s][2] / pat[s][0]) * (lat[s][3] / pat[s][1]) * (lat[s][4] / pat[s][2]);
        int64_t ts[3] = {lat[s][0], L, lat[s][1] * pat[s][0] * pat[s][1] * pat[s][2]};
        gc_host tok = gc_host_make(dt, 3, ts, 1.0);
        drift_op up = gc_op(DRIFT_OP_UNPATCHIFY, dt);
        memcpy(up.patch, pat[s], sizeof up.patch);
        gc_case_set("unpatchify #%d %s", s, gc_dt(dt));
        layout_case(up, 1, &tok, NULL, 5, lat[s]);
        gc_host_free(&tok);
        gc_host_free(&x);
    }
}

int main(void) {
    gc_require_gpu("test_cuda_ops");
    gc_seed(12345);
    gc_env_open(&E);
    if (!E.cuda) return gc_finish("test_cuda_ops");
    variants[0] = E.cuda;
    variant_names[0] = "default";
    variants[1] = gc_cuda_with_opt("i64", "1");
    variant_names[1] = "force-i64";
    variants[2] = gc_cuda_with_opt("norm_smem", "0");
    variant_names[2] = "norm-global";
    GC_CHECK(variants[1] && variants[2], "cuda variants must be creatable");
    n_variants = (variants[1] && variants[2]) ? 2 : 1;

    test_cast();
    test_binary();
    test_affine();
    test_activations();
    if (variants[2]) n_variants = 3;
    test_norms();
    n_variants = (variants[1] && variants[2]) ? 2 : 1;
    test_rope();
    test_sinusoid();
    test_layouts();

    drift_backend_free(variants[1]);
    drift_backend_free(variants[2]);
    gc_env_close(&E);
    return gc_finish("test_cuda_ops");
}
