/* Ops of issue 31 lowered as compositions, each a one-node graph written here
 * and run on ref and cpu against torch's definition computed in fp64 here:
 *  - convolutions that are not patch embeddings (Sana's depthwise 3x3, padded,
 *    strided, dilated, grouped; aten.conv1d / conv2d / convolution) as im2col +
 *    BMM (aten_lower_opset.c al_lower_conv_im2col): small dyadic values, every
 *    sum exact, so both backends must give the definition's bits;
 *  - avg_pool3d with stride == kernel (Helios) and linalg_vector_norm over two
 *    dims that are not adjacent (Cosmos): within 1e-6 relative (a mean and a
 *    square root round);
 *  - einsum of two operands (Ernie-Image) as permutes + one BMM: exact;
 *  - empty tensors (Bria): skipped by a cat, refused where their values are needed;
 *  - the zoo's first stops (below "zoo ops"): SDPA is_causal / enable_gqa, vector_norm
 *    dtype=, add/rsub alpha, einsum '...', 0-d unbind, pad modes, complex copy_ and casts,
 *    boolean-mask index / index_put, linalg_qr, diag_embed, transposed conv, einsum's
 *    autocast dtype. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "formats/plan.h"
#include "kernels/backend.h"
#include "replay/capture/aten_graph.h"
#include "replay/exec/exec.h"
#include "replay/ir/assign.h"
#include "tests/fp32_run.h"

typedef struct conv_case {
    const char *name;
    int sp;                    /* 1 or 2 spatial dims */
    int64_t B, C, H, W, O, kH, kW, s, p, d, g;
    int bias, generic;         /* generic: aten.convolution.default */
} conv_case;

static int64_t out_len(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d) { return (n + 2 * p - d * (k - 1) - 1) / s + 1; }

static void fmt_shape(char *b, size_t n, int nd, const int64_t *sh) {
    size_t k = (size_t)snprintf(b, n, "[");
    for (int i = 0; i < nd; i++) k += (size_t)snprintf(b + k, n - k, "%s%lld", i ? ", " : "", (long long)sh[i]);
    snprintf(b + k, n - k, "]");
}

/* The drift-aten-graph document of y = conv(x, w, b). */
static char *doc_of(const conv_case *t, int nd, const int64_t *xs, const int64_t *ws, const int64_t *ys) {
    char x[96], w[96], y[96], bs[96], args[512];
    fmt_shape(x, sizeof x, nd, xs);
    fmt_shape(w, sizeof w, nd, ws);
    fmt_shape(y, sizeof y, nd, ys);
    fmt_shape(bs, sizeof bs, 1, &t->O);
    const char *bias = t->bias ? "{\"node\": \"b\"}" : "null";
    if (t->generic)
        snprintf(args, sizeof args, "[{\"node\": \"x\"}, {\"node\": \"w\"}, %s, [%lld], [%lld], [%lld], false, [0], %lld]", bias,
                 (long long)t->s, (long long)t->p, (long long)t->d, (long long)t->g);
    else
        snprintf(args, sizeof args, "[{\"node\": \"x\"}, {\"node\": \"w\"}, %s, [%lld], [%lld], [%lld], %lld]", bias,
                 (long long)t->s, (long long)t->p, (long long)t->d, (long long)t->g);
    char *doc = malloc(8192);
    snprintf(doc, 8192,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"Conv\",\n"
             " \"nodes\": [\n"
             "  {\"name\": \"w\", \"op\": \"placeholder\", \"target\": \"w\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": %s, \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"b\", \"op\": \"placeholder\", \"target\": \"b\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": %s, \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": %s, \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"conv\", \"op\": \"call_function\", \"target\": \"%s\", \"args\": %s, \"kwargs\": {},\n"
             "   \"val\": {\"shape\": %s, \"dtype\": \"float32\"}, \"module\": \"conv\", \"module_stack\": [\"conv\"]},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"conv\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [{\"node\": \"w\", \"kind\": \"parameter\", \"target\": \"conv.weight\"},\n"
             "            {\"node\": \"b\", \"kind\": \"parameter\", \"target\": \"conv.bias\"},\n"
             "            {\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],\n"
             " \"outputs\": [{\"node\": \"conv\", \"name\": \"output:noise_pred\"}], \"constants\": {}, \"non_tensor_inputs\": {}}\n",
             w, bs, x, t->generic ? "aten.convolution.default" : t->sp == 2 ? "aten.conv2d.default" : "aten.conv1d.default", args, y);
    return doc;
}

/* m * 2^-3, m in -8..8: products and sums of a few hundred are exact in fp32. */
static float small(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int)((*s >> 33) % 17) - 8) * 0.125f;
}

/* Parses and lowers doc, runs it on ref then cpu with parameters ps (may be empty) and the
 * latents (xnd, xs, x); the n outputs of each backend go to got[0..n) and got[n..2n). Owns
 * and frees ps. */
static void run_both(const char *name, const char *doc, drift_hostset *ps, int xnd, const int64_t *xs, const float *x,
                     int64_t n, float *got) {
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *gr = NULL;
    drift_graph *sem = NULL;
    if (drift_aten_graph_parse(doc, strlen(doc), name, &gr, &e) || drift_aten_graph_lower(gr, &sem, &e))
        fail_msg("%s: %s: %s", name, e.where, e.msg);
    drift_hostset *bs, *is;
    drift_hostset_create(&bs, &e);
    drift_hostset_create(&is, &e);
    assert_int_equal(drift_hostset_add(is, "latents", DRIFT_F32, xnd, xs, x, NULL, NULL, &e), 0);
    const char *bes[2] = {"ref", "cpu"};
    for (int k = 0; k < 2; k++) {
        drift_exec_result r;
        test_run_fp32(sem, DRIFT_SIDE_TRAINER, bes[k], ps, bs, is, NULL, NULL, &r);
        assert_int_equal(r.numel, n);
        memcpy(got + k * n, r.f32, (size_t)n * sizeof(float));
        drift_exec_result_free(&r);
    }
    drift_graph_free(sem);
    drift_aten_graph_free(gr);
    drift_hostset_free(ps);
    drift_hostset_free(bs);
    drift_hostset_free(is);
}

static drift_hostset *params_with(const char *name, int nd, const int64_t *sh, const float *v) {
    drift_err e;
    drift_hostset *ps = NULL;
    assert_int_equal(drift_hostset_create(&ps, &e), 0);
    if (name) assert_int_equal(drift_hostset_add(ps, name, DRIFT_F32, nd, sh, v, NULL, NULL, &e), 0);
    return ps;
}

static void run_case(const conv_case *t) {
    const int nd = t->sp + 2;
    const int64_t H = t->sp == 2 ? t->H : 1, kH = t->sp == 2 ? t->kH : 1;
    const int64_t Ho = t->sp == 2 ? out_len(H, kH, t->s, t->p, t->d) : 1, Wo = out_len(t->W, t->kW, t->s, t->p, t->d);
    const int64_t Cg = t->C / t->g, Og = t->O / t->g;
    int64_t xs[4] = {t->B, t->C, H, t->W}, ws[4] = {t->O, Cg, kH, t->kW}, ys[4] = {t->B, t->O, Ho, Wo};
    if (t->sp == 1) xs[2] = t->W, ws[2] = t->kW, ys[2] = Wo;
    const int64_t nx = t->B * t->C * H * t->W, nw = t->O * Cg * kH * t->kW, ny = t->B * t->O * Ho * Wo;
    float *x = malloc((size_t)nx * 4), *w = malloc((size_t)nw * 4), *b = malloc((size_t)t->O * 4), *want = malloc((size_t)ny * 4);
    uint64_t s = 42;
    for (int64_t i = 0; i < nx; i++) x[i] = small(&s);
    for (int64_t i = 0; i < nw; i++) w[i] = small(&s);
    for (int64_t i = 0; i < t->O; i++) b[i] = t->bias ? small(&s) : 0.0f;
    /* torch's definition */
    for (int64_t bb = 0; bb < t->B; bb++)
        for (int64_t o = 0; o < t->O; o++)
            for (int64_t ho = 0; ho < Ho; ho++)
                for (int64_t wo = 0; wo < Wo; wo++) {
                    double acc = b[o];
                    const int64_t g = o / Og;
                    for (int64_t cg = 0; cg < Cg; cg++)
                        for (int64_t i = 0; i < kH; i++)
                            for (int64_t j = 0; j < t->kW; j++) {
                                const int64_t hi = ho * t->s + i * t->d - t->p, wi = wo * t->s + j * t->d - t->p;
                                if ((t->sp == 2 && (hi < 0 || hi >= H)) || wi < 0 || wi >= t->W) continue;
                                const int64_t hh = t->sp == 2 ? hi : 0, c = g * Cg + cg;
                                acc += (double)x[((bb * t->C + c) * H + hh) * t->W + wi] * w[((o * Cg + cg) * kH + i) * t->kW + j];
                            }
                    want[((bb * t->O + o) * Ho + ho) * Wo + wo] = (float)acc;
                }
    char *doc = doc_of(t, nd, xs, ws, ys);
    drift_hostset *ps = params_with("conv.weight", nd, ws, w);
    drift_err e;
    assert_int_equal(drift_hostset_add(ps, "conv.bias", DRIFT_F32, 1, &t->O, b, NULL, NULL, &e), 0);
    float *got = malloc((size_t)(2 * ny) * sizeof(float));
    run_both(t->name, doc, ps, nd, xs, x, ny, got);
    for (int k = 0; k < 2; k++)
        for (int64_t i = 0; i < ny; i++)
            if (got[k * ny + i] != want[i])
                fail_msg("%s on %s: y[%lld] = %g, want %g", t->name, k ? "cpu" : "ref", (long long)i, got[k * ny + i], want[i]);
    free(got);
    print_message("  %-28s [%lld, %lld, %lld, %lld] -> %lld outputs equal torch's definition on ref and cpu\n", t->name,
                  (long long)xs[0], (long long)xs[1], (long long)xs[2], (long long)(nd > 3 ? xs[3] : 1), (long long)ny);
    free(doc);
    free(x);
    free(w);
    free(b);
    free(want);
}

static void test_conv_cases(void **st) {
    (void)st;
    static const conv_case cases[] = {
        /* name                      sp  B  C  H  W  O kH kW s  p  d  g  bias generic */
        {"depthwise 3x3 pad 1 (Sana)", 2, 2, 4, 5, 6, 4, 3, 3, 1, 1, 1, 4, 1, 0},
        {"3x3 stride 2 pad 1", 2, 1, 3, 7, 6, 5, 3, 3, 2, 1, 1, 1, 1, 0},
        {"grouped 3x3 dilation 2", 2, 1, 4, 7, 7, 6, 3, 3, 1, 2, 2, 2, 0, 0},
        {"1x1", 2, 2, 3, 4, 4, 2, 1, 1, 1, 0, 1, 1, 1, 0},
        {"conv1d k5 pad 2", 1, 2, 3, 1, 9, 4, 1, 5, 1, 2, 1, 1, 1, 0},
        {"convolution 2-d stride 3", 2, 1, 2, 8, 8, 3, 2, 2, 3, 0, 1, 1, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}

/* Groups that do not divide the channels: exit 2 naming the node. */
static void test_conv_bad_groups(void **st) {
    (void)st;
    conv_case t = {"bad groups", 2, 1, 4, 4, 4, 4, 3, 3, 1, 1, 1, 3, 0, 0};
    int64_t xs[4] = {1, 4, 4, 4}, ws[4] = {4, 1, 3, 3}, ys[4] = {1, 4, 4, 4};
    char *doc = doc_of(&t, 4, xs, ws, ys);
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *gr = NULL;
    drift_graph *sem = NULL;
    assert_int_equal(drift_aten_graph_parse(doc, strlen(doc), "bad.json", &gr, &e), DRIFT_OK);
    assert_int_equal(drift_aten_graph_lower(gr, &sem, &e), DRIFT_E_INPUT);
    if (!strstr(e.msg, "groups 3 do not divide")) fail_msg("message: %s", e.msg);
    drift_aten_graph_free(gr);
    free(doc);
}

/* One op of (x [2, 3, 4, 4, 6] latents) -> out, the doc's node given as text. */
/* pre: extra nodes (JSON, each ending in ",\n") between x and y. */
static void run_unary_doc(const char *name, const char *pre, const char *target, const char *args, int ond,
                          const int64_t *os, const float *x, float *got) {
    char oshape[96], doc[4096];
    fmt_shape(oshape, sizeof oshape, ond, os);
    snprintf(doc, sizeof doc,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"Op\",\n"
             " \"nodes\": [\n"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [2, 3, 4, 4, 6], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "%s"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"%s\", \"args\": %s, \"kwargs\": {},\n"
             "   \"val\": {\"shape\": %s, \"dtype\": \"float32\"}, \"module\": \"m\", \"module_stack\": [\"m\"]},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [{\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}], \"constants\": {}, \"non_tensor_inputs\": {}}\n",
             pre, target, args, oshape);
    int64_t n = 1;
    for (int i = 0; i < ond; i++) n *= os[i];
    run_both(name, doc, params_with(NULL, 0, NULL, NULL), 5, (int64_t[]){2, 3, 4, 4, 6}, x, n, got);
}

static void near(const char *what, const float *got, const double *want, int64_t n) {
    for (int k = 0; k < 2; k++)
        for (int64_t i = 0; i < n; i++)
            if (fabs(got[k * n + i] - want[i]) > 1e-6 * (1 + fabs(want[i])))
                fail_msg("%s on %s: [%lld] = %.9g, want %.9g", what, k ? "cpu" : "ref", (long long)i, got[k * n + i], want[i]);
}

/* avg_pool3d with stride == kernel (Helios) and linalg_vector_norm over two dims that are
 * not adjacent (Cosmos' learnable_pos_embed; the reduction gathers them last). */
static void test_pool_and_norm(void **st) {
    (void)st;
    enum { N = 2 * 3 * 4 * 4 * 6 };
    float x[N], got[2 * N];
    double want[N];
    uint64_t s = 7;
    for (int i = 0; i < N; i++) x[i] = small(&s);
    /* avg_pool3d(x, [2, 2, 3]) -> [2, 3, 2, 2, 2] */
    run_unary_doc("avg_pool3d", "", "aten.avg_pool3d.default", "[{\"node\": \"x\"}, [2, 2, 3], [2, 2, 3]]", 5,
                  (int64_t[]){2, 3, 2, 2, 2}, x, got);
    for (int bc = 0; bc < 6; bc++)
        for (int d = 0; d < 2; d++)
            for (int h = 0; h < 2; h++)
                for (int w = 0; w < 2; w++) {
                    double acc = 0;
                    for (int i = 0; i < 2; i++)
                        for (int j = 0; j < 2; j++)
                            for (int k = 0; k < 3; k++) acc += x[((bc * 4 + d * 2 + i) * 4 + h * 2 + j) * 6 + w * 3 + k];
                    want[((bc * 2 + d) * 2 + h) * 2 + w] = acc / 12.0;
                }
    near("avg_pool3d", got, want, 48);
    /* linalg_vector_norm(x, 2, [1, 3], keepdim=True) -> [2, 1, 4, 1, 6] */
    run_unary_doc("vector_norm", "", "aten.linalg_vector_norm.default", "[{\"node\": \"x\"}, 2, [1, 3], true]", 5,
                  (int64_t[]){2, 1, 4, 1, 6}, x, got);
    for (int b = 0; b < 2; b++)
        for (int d = 0; d < 4; d++)
            for (int w = 0; w < 6; w++) {
                double acc = 0;
                for (int c = 0; c < 3; c++)
                    for (int h = 0; h < 4; h++) {
                        const double v = x[(((b * 3 + c) * 4 + d) * 4 + h) * 6 + w];
                        acc += v * v;
                    }
                want[(b * 4 + d) * 6 + w] = sqrt(acc);
            }
    near("linalg_vector_norm", got, want, 48);
}

/* einsum(eq, x, w) with x the latents and w a parameter, run on ref and cpu into got (2 x n). */
static void run_einsum(const char *eq, int xnd, const int64_t *xs, const float *x, int wnd, const int64_t *ws, const float *w,
                       int ond, const int64_t *os, float *got) {
    char xsh[96], wsh[96], osh[96], doc[4096];
    fmt_shape(xsh, sizeof xsh, xnd, xs);
    fmt_shape(wsh, sizeof wsh, wnd, ws);
    fmt_shape(osh, sizeof osh, ond, os);
    snprintf(doc, sizeof doc,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"E\",\n"
             " \"nodes\": [\n"
             "  {\"name\": \"w\", \"op\": \"placeholder\", \"target\": \"w\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": %s, \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": %s, \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"aten.einsum.default\", \"args\": [\"%s\", [{\"node\": \"x\"}, {\"node\": \"w\"}]], \"kwargs\": {},\n"
             "   \"val\": {\"shape\": %s, \"dtype\": \"float32\"}, \"module\": \"m\", \"module_stack\": [\"m\"]},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [{\"node\": \"w\", \"kind\": \"parameter\", \"target\": \"m.w\"},\n"
             "            {\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}], \"constants\": {}, \"non_tensor_inputs\": {}}\n",
             wsh, xsh, eq, osh);
    int64_t n = 1;
    for (int i = 0; i < ond; i++) n *= os[i];
    run_both(eq, doc, params_with("m.w", wnd, ws, w), xnd, xs, x, n, got);
}

/* Two-operand einsum (Ernie-Image's pos_embed; attention written as einsum): batch,
 * contracted and free letters, a permuted output, an outer product; exact (small dyadic
 * values), so ref and cpu must equal the definition. */
static void test_einsum_two(void **st) {
    (void)st;
    enum { B = 2, H = 3, L = 4, M = 5, D = 6 };
    float x[B * H * L * D], w[B * H * M * D], got[2 * B * H * L * M];
    double want[B * H * L * M];
    uint64_t s = 3;
    for (int i = 0; i < B * H * L * D; i++) x[i] = small(&s);
    for (int i = 0; i < B * H * M * D; i++) w[i] = small(&s);
    /* "bhld,bhmd->bhlm": q k^T per head */
    run_einsum("bhld,bhmd->bhlm", 4, (int64_t[]){B, H, L, D}, x, 4, (int64_t[]){B, H, M, D}, w, 4, (int64_t[]){B, H, L, M}, got);
    for (int bh = 0; bh < B * H; bh++)
        for (int l = 0; l < L; l++)
            for (int m = 0; m < M; m++) {
                double acc = 0;
                for (int d = 0; d < D; d++) acc += (double)x[(bh * L + l) * D + d] * w[(bh * M + m) * D + d];
                want[(bh * L + l) * M + m] = acc;
            }
    near("bhld,bhmd->bhlm", got, want, B * H * L * M);
    /* "bhld,bhmd->mlhb": the same sums, the output permuted */
    run_einsum("bhld,bhmd->mlhb", 4, (int64_t[]){B, H, L, D}, x, 4, (int64_t[]){B, H, M, D}, w, 4, (int64_t[]){M, L, H, B}, got);
    double want2[B * H * L * M];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int l = 0; l < L; l++)
                for (int m = 0; m < M; m++) want2[((m * L + l) * H + h) * B + b] = want[((b * H + h) * L + l) * M + m];
    near("bhld,bhmd->mlhb", got, want2, B * H * L * M);
    /* "i,j->ij": an outer product (rope's positions x frequencies) */
    run_einsum("i,j->ij", 1, (int64_t[]){L}, x, 1, (int64_t[]){D}, w, 2, (int64_t[]){L, D}, got);
    for (int i = 0; i < L; i++)
        for (int j = 0; j < D; j++) want[i * D + j] = (double)x[i] * w[j];
    near("i,j->ij", got, want, L * D);
}

/* Empty tensors (Bria's arange(0) ids): a node whose value has a 0-size dim computes
 * nothing and a cat skips it; an op that needs its values is refused naming it. */
static void test_empty_operands(void **st) {
    (void)st;
    float x[2 * 3 * 4 * 4 * 6], got[2 * 2 * 3 * 4 * 4 * 6];
    double want[2 * 3 * 4 * 4 * 6];
    uint64_t s = 11;
    const int n = 2 * 3 * 4 * 4 * 6;
    for (int i = 0; i < n; i++) x[i] = small(&s), want[i] = x[i];
    /* cat([new_zeros(x, [2, 0, 4, 4, 6]), x], 1) is x */
    static const char E[] =
        "  {\"name\": \"e\", \"op\": \"call_function\", \"target\": \"aten.new_zeros.default\", \"args\": [{\"node\": \"x\"}, [2, 0, 4, 4, 6]],"
        " \"kwargs\": {}, \"val\": {\"shape\": [2, 0, 4, 4, 6], \"dtype\": \"float32\"}, \"module\": \"m\"},\n";
    run_unary_doc("empty cat", E, "aten.cat.default", "[[{\"node\": \"e\"}, {\"node\": \"x\"}], 1]", 5,
                  (int64_t[]){2, 3, 4, 4, 6}, x, got);
    near("cat with an empty operand", got, want, n);
    /* sum(e, 1) has values (zeros): refused, naming the empty operand */
    char doc[4096];
    snprintf(doc, sizeof doc,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"Op\",\n"
             " \"nodes\": [\n"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [2, 3, 4, 4, 6], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "%s"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"aten.sum.dim_IntList\", \"args\": [{\"node\": \"e\"}, [1]], \"kwargs\": {},\n"
             "   \"val\": {\"shape\": [2, 4, 4, 6], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [{\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}], \"constants\": {}, \"non_tensor_inputs\": {}}\n",
             E);
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *gr = NULL;
    drift_graph *sem = NULL;
    assert_int_equal(drift_aten_graph_parse(doc, strlen(doc), "empty_sum.json", &gr, &e), DRIFT_OK);
    assert_int_equal(drift_aten_graph_lower(gr, &sem, &e), DRIFT_E_INPUT);
    if (!strstr(e.msg, "node 'e' is an empty tensor")) fail_msg("message: %s", e.msg);
    drift_aten_graph_free(gr);
    /* cat([e], 1) whose 'val' has values: refused (it read a value that was never made: found by
     * fuzz_aten_graph) */
    char doc2[4096];
    const char *sum = "\"aten.sum.dim_IntList\", \"args\": [{\"node\": \"e\"}, [1]]", *at = strstr(doc, sum);
    assert_non_null(at);
    snprintf(doc2, sizeof doc2, "%.*s\"aten.cat.default\", \"args\": [[{\"node\": \"e\"}], 1]%s", (int)(at - doc), doc,
             at + strlen(sum));
    drift_err_clear(&e);
    gr = NULL;
    assert_int_equal(drift_aten_graph_parse(doc2, strlen(doc2), "empty_cat.json", &gr, &e), DRIFT_OK);
    assert_int_equal(drift_aten_graph_lower(gr, &sem, &e), DRIFT_E_INPUT);
    if (!strstr(e.msg, "every operand is an empty tensor")) fail_msg("message: %s", e.msg);
    drift_aten_graph_free(gr);
    /* an empty buffer placeholder (Kandinsky5's rope table of an axis of width 0): no values read,
       a cat skips it */
    snprintf(doc, sizeof doc,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"Op\",\n"
             " \"nodes\": [\n"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [2, 3, 4, 4, 6], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"b\", \"op\": \"placeholder\", \"target\": \"b\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [2, 0, 4, 4, 6], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"aten.cat.default\", \"args\": [[{\"node\": \"b\"}, {\"node\": \"x\"}], 1], \"kwargs\": {},\n"
             "   \"val\": {\"shape\": [2, 3, 4, 4, 6], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [{\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"},\n"
             "            {\"node\": \"b\", \"kind\": \"buffer\", \"target\": \"rope.table\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}], \"constants\": {}, \"non_tensor_inputs\": {}}\n");
    run_both("empty buffer", doc, params_with(NULL, 0, NULL, NULL), 5, (int64_t[]){2, 3, 4, 4, 6}, x, n, got);
    near("cat with an empty buffer", got, want, n);
}

/* ---- zoo ops (issue 31's zoo: the first op each model stopped at) ---- */

/* One op of latents x (xnd, xs) -> y (ond, os), the node given as text with its kwargs;
 * pre: extra nodes (JSON, each ending in ",\n") between x and y. */
static void run_doc_x(const char *name, const char *pre, const char *target, const char *args, const char *kwargs,
                      int xnd, const int64_t *xs, const float *x, int ond, const int64_t *os, float *got) {
    char xshape[96], oshape[96], doc[8192];
    fmt_shape(xshape, sizeof xshape, xnd, xs);
    fmt_shape(oshape, sizeof oshape, ond, os);
    snprintf(doc, sizeof doc,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"Op\",\n"
             " \"nodes\": [\n"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": %s, \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "%s"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"%s\", \"args\": %s, \"kwargs\": %s,\n"
             "   \"val\": {\"shape\": %s, \"dtype\": \"float32\"}, \"module\": \"m\", \"module_stack\": [\"m\"]},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [{\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}], \"constants\": {}, \"non_tensor_inputs\": {}}\n",
             xshape, pre, target, args, kwargs, oshape);
    int64_t n = 1;
    for (int i = 0; i < ond; i++) n *= os[i];
    run_both(name, doc, params_with(NULL, 0, NULL, NULL), xnd, xs, x, n, got);
}

/* A write through a detached alias reaches its root (CogVideoX's patch embedding builds its
 * joint positional table as z = new_zeros(..); z.data[:, 2:].copy_(pe); the recorder's dispatch
 * trace records `.data` as detach): z read after the copy_ holds the copied rows. */
static void test_copy_through_detach(void **st) {
    (void)st;
    float x[1 * 4], got[2 * 6];
    double want[6] = {1, 1, 0, 0, 0, 0};
    uint64_t s = 5;
    for (int i = 0; i < 4; i++) x[i] = small(&s), want[2 + i] = x[i] + 1.0;
    static const char PRE[] =
        "  {\"name\": \"z\", \"op\": \"call_function\", \"target\": \"aten.new_zeros.default\", \"args\": [{\"node\": \"x\"}, [1, 6]],"
        " \"kwargs\": {}, \"val\": {\"shape\": [1, 6], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
        "  {\"name\": \"d\", \"op\": \"call_function\", \"target\": \"aten.detach.default\", \"args\": [{\"node\": \"z\"}],"
        " \"kwargs\": {}, \"val\": {\"shape\": [1, 6], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
        "  {\"name\": \"s\", \"op\": \"call_function\", \"target\": \"aten.slice.Tensor\", \"args\": [{\"node\": \"d\"}, 1, 2, 9223372036854775807],"
        " \"kwargs\": {}, \"val\": {\"shape\": [1, 4], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
        "  {\"name\": \"c\", \"op\": \"call_function\", \"target\": \"aten.copy_.default\", \"args\": [{\"node\": \"s\"}, {\"node\": \"x\"}],"
        " \"kwargs\": {}, \"val\": {\"shape\": [1, 4], \"dtype\": \"float32\"}, \"module\": \"m\"},\n";
    run_doc_x("copy_ through detach", PRE, "aten.add.Tensor", "[{\"node\": \"z\"}, 1.0]", "{}", 2, (int64_t[]){1, 4}, x,
              2, (int64_t[]){1, 6}, got);
    near("z after z.detach()[:, 2:].copy_(x), plus 1", got, want, 6);
}

/* linear of a slice along the sequence: torch folds a contiguous input into addmm (the bias
 * in the GEMM: LINEAR with 3 inputs) and runs a non-contiguous one as matmul, then add_ (LINEAR
 * with 2 inputs, then ADD). The recorded strides decide: [2, 4, 4] sliced from [2, 6, 4] is not
 * contiguous, [1, 4, 4] sliced from [1, 6, 4] is (a dim of size 1 has no stride to keep); a
 * capture under bf16 autocast of an fp32 slice hands linear autocast's contiguous copy. */
static void linear_form(int b, const char *autocast, int want_split) {
    char doc[4096];
    snprintf(doc, sizeof doc,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"Op\",\n"
             " \"capture\": {\"mode\": \"fake\", \"autocast\": %s},\n"
             " \"nodes\": [\n"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [%d, 6, 4], \"dtype\": \"float32\", \"stride\": [24, 4, 1]}, \"module\": \"\"},\n"
             "  {\"name\": \"w\", \"op\": \"placeholder\", \"target\": \"w\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [3, 4], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"bb\", \"op\": \"placeholder\", \"target\": \"bb\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [3], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"s\", \"op\": \"call_function\", \"target\": \"aten.slice.Tensor\", \"args\": [{\"node\": \"x\"}, 1, 2, 6], \"kwargs\": {},\n"
             "   \"val\": {\"shape\": [%d, 4, 4], \"dtype\": \"float32\", \"stride\": [24, 4, 1]}, \"module\": \"m\"},\n"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"aten.linear.default\", \"args\": [{\"node\": \"s\"}, {\"node\": \"w\"}, {\"node\": \"bb\"}], \"kwargs\": {},\n"
             "   \"val\": {\"shape\": [%d, 4, 3], \"dtype\": \"%s\"}, \"module\": \"m\"},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [{\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"},\n"
             "            {\"node\": \"w\", \"kind\": \"parameter\", \"target\": \"p.weight\"}, {\"node\": \"bb\", \"kind\": \"parameter\", \"target\": \"p.bias\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}], \"constants\": {}, \"non_tensor_inputs\": {}}\n",
             autocast, b, b, b, strcmp(autocast, "null") ? "bfloat16" : "float32");
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *gr = NULL;
    drift_graph *sem = NULL;
    if (drift_aten_graph_parse(doc, strlen(doc), "linear_form.json", &gr, &e) || drift_aten_graph_lower(gr, &sem, &e))
        fail_msg("linear form: %s: %s", e.where, e.msg);
    int lin2 = 0, lin3 = 0, add = 0;
    for (int i = 0; i < drift_graph_count(sem); i++) {
        const drift_value *v = drift_graph_value(sem, i);
        if (v->kind != DRIFT_VAL_NODE) continue;
        lin2 += v->op.kind == DRIFT_OP_LINEAR && v->op.n_in == 2;
        lin3 += v->op.kind == DRIFT_OP_LINEAR && v->op.n_in == 3;
        add += v->op.kind == DRIFT_OP_ADD;
    }
    if (want_split ? !(lin2 == 1 && add == 1 && lin3 == 0) : !(lin3 == 1 && lin2 == 0 && add == 0))
        fail_msg("batch %d, autocast %s: LINEAR(3) %d, LINEAR(2) %d, ADD %d; want %s", b, autocast, lin3, lin2, add,
                 want_split ? "matmul then add_" : "addmm");
    drift_graph_free(sem);
    drift_aten_graph_free(gr);
}

static void test_linear_noncontiguous_input(void **st) {
    (void)st;
    linear_form(2, "null", 1);          /* a strided slice: matmul, then add_ */
    linear_form(1, "null", 0);          /* batch 1: the slice is contiguous */
    linear_form(2, "\"bfloat16\"", 0); /* autocast's bf16 copy of the fp32 slice is contiguous */
}

/* The error drift_aten_graph_lower gives for a one-op doc (must name want). */
static void lower_fails(const char *target, const char *args, const char *kwargs, int xnd, const int64_t *xs, int ond,
                        const int64_t *os, const char *want) {
    char xshape[96], oshape[96], doc[4096];
    fmt_shape(xshape, sizeof xshape, xnd, xs);
    fmt_shape(oshape, sizeof oshape, ond, os);
    snprintf(doc, sizeof doc,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"Op\",\n"
             " \"nodes\": [\n"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": %s, \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"%s\", \"args\": %s, \"kwargs\": %s,\n"
             "   \"val\": {\"shape\": %s, \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [{\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}], \"constants\": {}, \"non_tensor_inputs\": {}}\n",
             xshape, target, args, kwargs, oshape);
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *gr = NULL;
    drift_graph *sem = NULL;
    assert_int_equal(drift_aten_graph_parse(doc, strlen(doc), "fails.json", &gr, &e), DRIFT_OK);
    assert_int_equal(drift_aten_graph_lower(gr, &sem, &e), DRIFT_E_INPUT);
    if (!strstr(e.msg, want)) fail_msg("message: %s (want '%s')", e.msg, want);
    drift_aten_graph_free(gr);
}

/* torch's SDPA math definition for q [H, L, D] (x's heads), k/v heads chosen per query head. */
static void sdpa_want(const float *x, int H, int L, int D, const int *kh, const int *vh, int causal, double *want) {
    const double sc = 1.0 / sqrt((double)D);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < L; i++) {
            double s[16], mx = -INFINITY, den = 0;
            for (int j = 0; j < L; j++) {
                double d = 0;
                for (int t = 0; t < D; t++) d += (double)x[(h * L + i) * D + t] * x[(kh[h] * L + j) * D + t];
                s[j] = causal && j > i ? -INFINITY : d * sc;
                if (s[j] > mx) mx = s[j];
            }
            for (int j = 0; j < L; j++) den += s[j] = exp(s[j] - mx);
            for (int t = 0; t < D; t++) {
                double o = 0;
                for (int j = 0; j < L; j++) o += s[j] / den * x[(vh[h] * L + j) * D + t];
                want[(h * L + i) * D + t] = o;
            }
        }
}

/* SDPA is_causal (Cosmos3-Omni) and enable_gqa (AceStep, Cosmos3-Omni): q = x [1, 4, 5, 2],
 * k = x's heads 0..1, v = its heads 2..3 (Hkv = 2: query head h reads kv head h / 2, as
 * repeat_interleave); causal: key j <= query i (tril, top-left). Against the definition in
 * fp64 within 1e-6 relative; dropout_p > 0 and is_causal with a mask are refused. */
static void test_sdpa_causal_gqa(void **st) {
    (void)st;
    enum { H = 4, L = 5, D = 2, N = H * L * D };
    float x[N], got[2 * N];
    double want[N];
    uint64_t s = 5;
    for (int i = 0; i < N; i++) x[i] = small(&s);
    static const char KV[] =
        "  {\"name\": \"k\", \"op\": \"call_function\", \"target\": \"aten.slice.Tensor\", \"args\": [{\"node\": \"x\"}, 1, 0, 2], \"kwargs\": {},"
        " \"val\": {\"shape\": [1, 2, 5, 2], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
        "  {\"name\": \"v\", \"op\": \"call_function\", \"target\": \"aten.slice.Tensor\", \"args\": [{\"node\": \"x\"}, 1, 2, 4], \"kwargs\": {},"
        " \"val\": {\"shape\": [1, 2, 5, 2], \"dtype\": \"float32\"}, \"module\": \"m\"},\n";
    const int64_t xs[4] = {1, H, L, D};
    const int kh[H] = {0, 0, 1, 1}, vh[H] = {2, 2, 3, 3}, same[H] = {0, 1, 2, 3};
    run_doc_x("sdpa gqa causal", KV, "aten.scaled_dot_product_attention.default",
              "[{\"node\": \"x\"}, {\"node\": \"k\"}, {\"node\": \"v\"}, null, 0.0, true]", "{\"enable_gqa\": true}", 4, xs, x, 4, xs,
              got);
    sdpa_want(x, H, L, D, kh, vh, 1, want);
    near("sdpa gqa causal", got, want, N);
    run_doc_x("sdpa gqa", KV, "aten.scaled_dot_product_attention.default",
              "[{\"node\": \"x\"}, {\"node\": \"k\"}, {\"node\": \"v\"}]", "{\"enable_gqa\": true}", 4, xs, x, 4, xs, got);
    sdpa_want(x, H, L, D, kh, vh, 0, want);
    near("sdpa gqa", got, want, N);
    run_doc_x("sdpa causal", "", "aten.scaled_dot_product_attention.default",
              "[{\"node\": \"x\"}, {\"node\": \"x\"}, {\"node\": \"x\"}]", "{\"is_causal\": true}", 4, xs, x, 4, xs, got);
    sdpa_want(x, H, L, D, same, same, 1, want);
    near("sdpa causal", got, want, N);
    /* enable_gqa with a boolean mask (AceStep): torch's math backend; the mask tril, so the causal values */
    char kvm[2048];
    snprintf(kvm, sizeof kvm, "%s%s", KV,
             "  {\"name\": \"a\", \"op\": \"call_function\", \"target\": \"aten.arange.default\", \"args\": [5], \"kwargs\": {\"dtype\": {\"dtype\": \"int64\"}},"
             " \"val\": {\"shape\": [5], \"dtype\": \"int64\"}, \"module\": \"m\"},\n"
             "  {\"name\": \"r\", \"op\": \"call_function\", \"target\": \"aten.unsqueeze.default\", \"args\": [{\"node\": \"a\"}, 1], \"kwargs\": {},"
             " \"val\": {\"shape\": [5, 1], \"dtype\": \"int64\"}, \"module\": \"m\"},\n"
             "  {\"name\": \"cc\", \"op\": \"call_function\", \"target\": \"aten.unsqueeze.default\", \"args\": [{\"node\": \"a\"}, 0], \"kwargs\": {},"
             " \"val\": {\"shape\": [1, 5], \"dtype\": \"int64\"}, \"module\": \"m\"},\n"
             "  {\"name\": \"msk\", \"op\": \"call_function\", \"target\": \"aten.ge.Tensor\", \"args\": [{\"node\": \"r\"}, {\"node\": \"cc\"}], \"kwargs\": {},"
             " \"val\": {\"shape\": [5, 5], \"dtype\": \"bool\"}, \"module\": \"m\"},\n");
    run_doc_x("sdpa gqa mask", kvm, "aten.scaled_dot_product_attention.default",
              "[{\"node\": \"x\"}, {\"node\": \"k\"}, {\"node\": \"v\"}, {\"node\": \"msk\"}]", "{\"enable_gqa\": true}", 4, xs, x, 4,
              xs, got);
    sdpa_want(x, H, L, D, kh, vh, 1, want);
    near("sdpa gqa with a mask", got, want, N);
    lower_fails("aten.scaled_dot_product_attention.default", "[{\"node\": \"x\"}, {\"node\": \"x\"}, {\"node\": \"x\"}, null, 0.1]", "{}",
                4, xs, 4, xs, "dropout_p 0.1");
}

/* linalg_vector_norm(dtype=float32) (Cosmos), add/rsub with alpha (Cosmos), einsum with '...'
 * (Ernie-Image's pos_embed), a 0-d element of unbind (WanVACE's per-layer scales). */
static void test_norm_alpha_einsum_unbind(void **st) {
    (void)st;
    enum { N = 2 * 3 * 4 };
    float x[N], got[2 * N * 5];
    double want[N * 5];
    uint64_t s = 9;
    for (int i = 0; i < N; i++) x[i] = small(&s);
    const int64_t xs[3] = {2, 3, 4};
    run_doc_x("vector_norm dtype", "", "aten.linalg_vector_norm.default", "[{\"node\": \"x\"}, 2, [-1], true]",
              "{\"dtype\": {\"dtype\": \"float32\"}}", 3, xs, x, 3, (int64_t[]){2, 3, 1}, got);
    for (int r = 0; r < 6; r++) {
        double a = 0;
        for (int k = 0; k < 4; k++) a += (double)x[r * 4 + k] * x[r * 4 + k];
        want[r] = sqrt(a);
    }
    near("linalg_vector_norm dtype=", got, want, 6);
    run_doc_x("add alpha", "", "aten.add.Tensor", "[{\"node\": \"x\"}, {\"node\": \"x\"}]", "{\"alpha\": 0.25}", 3, xs, x, 3, xs, got);
    for (int i = 0; i < N; i++) want[i] = 1.25 * x[i];
    near("add alpha", got, want, N);
    run_doc_x("add scalar alpha", "", "aten.add.Tensor", "[0.5, {\"node\": \"x\"}]", "{\"alpha\": 2.0}", 3, xs, x, 3, xs, got);
    for (int i = 0; i < N; i++) want[i] = 0.5 + 2.0 * x[i];
    near("add(number, x, alpha)", got, want, N);
    run_doc_x("rsub alpha", "", "aten.rsub.Scalar", "[{\"node\": \"x\"}, 1.0, 2.0]", "{}", 3, xs, x, 3, xs, got);
    for (int i = 0; i < N; i++) want[i] = 1.0 - 2.0 * x[i];
    near("rsub alpha", got, want, N);
    /* einsum('...n,d->...nd', x, x[0, 0]) : an outer product per leading index */
    static const char W[] =
        "  {\"name\": \"w\", \"op\": \"call_function\", \"target\": \"aten.select.int\", \"args\": [{\"node\": \"x\"}, 0, 1], \"kwargs\": {},"
        " \"val\": {\"shape\": [3, 4], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
        "  {\"name\": \"w1\", \"op\": \"call_function\", \"target\": \"aten.select.int\", \"args\": [{\"node\": \"w\"}, 0, 2], \"kwargs\": {},"
        " \"val\": {\"shape\": [4], \"dtype\": \"float32\"}, \"module\": \"m\"},\n";
    run_doc_x("einsum ellipsis", W, "aten.einsum.default", "[\"...n,d->...nd\", [{\"node\": \"x\"}, {\"node\": \"w1\"}]]", "{}", 3, xs, x,
              4, (int64_t[]){2, 3, 4, 4}, got);
    for (int i = 0; i < N; i++)
        for (int d = 0; d < 4; d++) want[i * 4 + d] = (double)x[i] * x[12 + 8 + d];
    near("einsum '...n,d->...nd'", got, want, N * 4);
    /* x * unbind(new_ones(x, [2]))[1] */
    static const char U[] =
        "  {\"name\": \"o\", \"op\": \"call_function\", \"target\": \"aten.new_ones.default\", \"args\": [{\"node\": \"x\"}, [2]], \"kwargs\": {},"
        " \"val\": {\"shape\": [2], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
        "  {\"name\": \"u\", \"op\": \"call_function\", \"target\": \"aten.unbind.int\", \"args\": [{\"node\": \"o\"}], \"kwargs\": {},"
        " \"val\": [{\"shape\": [], \"dtype\": \"float32\"}, {\"shape\": [], \"dtype\": \"float32\", \"storage_offset\": 1}], \"module\": \"m\"},\n"
        "  {\"name\": \"g\", \"op\": \"call_function\", \"target\": \"getitem\", \"args\": [{\"node\": \"u\"}, 1], \"kwargs\": {},"
        " \"val\": {\"shape\": [], \"dtype\": \"float32\"}, \"module\": \"m\"},\n";
    run_doc_x("unbind 0-d", U, "aten.mul.Tensor", "[{\"node\": \"x\"}, {\"node\": \"g\"}]", "{}", 3, xs, x, 3, xs, got);
    for (int i = 0; i < N; i++) want[i] = x[i];
    near("x * unbind(ones)[1]", got, want, N);
}

/* pad modes replicate (Helios), reflect and circular: x [2, 3, 4] padded (1, 2) on the last
 * dim and (2, 1) on the one before; exact (moved values). */
static void test_pad_modes(void **st) {
    (void)st;
    enum { N = 2 * 3 * 4, M = 2 * 6 * 7 };
    float x[N], got[2 * M];
    double want[M];
    uint64_t s = 13;
    for (int i = 0; i < N; i++) x[i] = small(&s);
    const int64_t xs[3] = {2, 3, 4}, os[3] = {2, 6, 7};
    static const char *modes[3] = {"replicate", "reflect", "circular"};
    for (int m = 0; m < 3; m++) {
        char args[160];
        snprintf(args, sizeof args, "[{\"node\": \"x\"}, [1, 2, 2, 1], \"%s\"]", modes[m]);
        run_doc_x(modes[m], "", "aten.pad.default", args, "{}", 3, xs, x, 3, os, got);
        for (int b = 0; b < 2; b++)
            for (int i = 0; i < 6; i++)
                for (int j = 0; j < 7; j++) {
                    int si = i - 2, sj = j - 1; /* torch: F.pad's definition per mode */
                    if (m == 0) si = si < 0 ? 0 : si > 2 ? 2 : si, sj = sj < 0 ? 0 : sj > 3 ? 3 : sj;
                    else if (m == 1) si = si < 0 ? -si : si > 2 ? 4 - si : si, sj = sj < 0 ? -sj : sj > 3 ? 6 - sj : sj;
                    else si = (si + 3) % 3, sj = (sj + 4) % 4;
                    want[(b * 6 + i) * 7 + j] = x[(b * 3 + si) * 4 + sj];
                }
        near(modes[m], got, want, M);
    }
    lower_fails("aten.pad.default", "[{\"node\": \"x\"}, [4, 0], \"reflect\"]", "{}", 3, xs, 3, (int64_t[]){2, 3, 8},
                "more than the mode allows");
    lower_fails("aten.pad.default", "[{\"node\": \"x\"}, [1, 0], \"wrap\"]", "{}", 3, xs, 3, (int64_t[]){2, 3, 5},
                "expected constant, replicate, reflect or circular");
}

/* Complex copy_ into a slice of a complex fill (ZImage's pad_sequence) and complex casts
 * complex64 -> complex128 -> complex64 (AnyFlow's rope): x [2, 3, 4, 2] as (re, im) pairs. */
static void test_complex_copy_and_cast(void **st) {
    (void)st;
    enum { N = 2 * 3 * 4 * 2, M = 2 * 5 * 4 * 2 };
    float x[N], got[2 * M];
    double want[M];
    uint64_t s = 17;
    for (int i = 0; i < N; i++) x[i] = small(&s);
    const int64_t xs[4] = {2, 3, 4, 2};
    static const char CP[] =
        "  {\"name\": \"z\", \"op\": \"call_function\", \"target\": \"aten.view_as_complex.default\", \"args\": [{\"node\": \"x\"}], \"kwargs\": {},"
        " \"val\": {\"shape\": [2, 3, 4], \"dtype\": \"complex64\"}, \"module\": \"m\"},\n"
        "  {\"name\": \"e\", \"op\": \"call_function\", \"target\": \"aten.full.default\", \"args\": [[2, 5, 4], 0.0], \"kwargs\": {\"dtype\": {\"dtype\": \"complex64\"}},"
        " \"val\": {\"shape\": [2, 5, 4], \"dtype\": \"complex64\"}, \"module\": \"m\"},\n"
        "  {\"name\": \"sl\", \"op\": \"call_function\", \"target\": \"aten.slice.Tensor\", \"args\": [{\"node\": \"e\"}, 1, 1, 4], \"kwargs\": {},"
        " \"val\": {\"shape\": [2, 3, 4], \"dtype\": \"complex64\"}, \"module\": \"m\"},\n"
        "  {\"name\": \"cp\", \"op\": \"call_function\", \"target\": \"aten.copy_.default\", \"args\": [{\"node\": \"sl\"}, {\"node\": \"z\"}], \"kwargs\": {},"
        " \"val\": {\"shape\": [2, 3, 4], \"dtype\": \"complex64\"}, \"module\": \"m\"},\n";
    run_doc_x("complex copy_", CP, "aten.view_as_real.default", "[{\"node\": \"e\"}]", "{}", 4, xs, x, 4, (int64_t[]){2, 5, 4, 2}, got);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 5; i++)
            for (int k = 0; k < 8; k++) want[(b * 5 + i) * 8 + k] = i >= 1 && i < 4 ? x[(b * 3 + i - 1) * 8 + k] : 0.0;
    near("complex copy_ into a slice", got, want, M);
    static const char TO[] =
        "  {\"name\": \"z\", \"op\": \"call_function\", \"target\": \"aten.view_as_complex.default\", \"args\": [{\"node\": \"x\"}], \"kwargs\": {},"
        " \"val\": {\"shape\": [2, 3, 4], \"dtype\": \"complex64\"}, \"module\": \"m\"},\n"
        "  {\"name\": \"w\", \"op\": \"call_function\", \"target\": \"aten.to.dtype_layout\", \"args\": [{\"node\": \"z\"}], \"kwargs\": {\"dtype\": {\"dtype\": \"complex128\"}},"
        " \"val\": {\"shape\": [2, 3, 4], \"dtype\": \"complex128\"}, \"module\": \"m\"},\n"
        "  {\"name\": \"w2\", \"op\": \"call_function\", \"target\": \"aten.to.dtype_layout\", \"args\": [{\"node\": \"w\"}], \"kwargs\": {\"dtype\": {\"dtype\": \"complex128\"}},"
        " \"val\": {\"shape\": [2, 3, 4], \"dtype\": \"complex128\"}, \"module\": \"m\"},\n"
        "  {\"name\": \"v\", \"op\": \"call_function\", \"target\": \"aten.to.dtype_layout\", \"args\": [{\"node\": \"w2\"}], \"kwargs\": {\"dtype\": {\"dtype\": \"complex64\"}},"
        " \"val\": {\"shape\": [2, 3, 4], \"dtype\": \"complex64\"}, \"module\": \"m\"},\n";
    run_doc_x("complex to", TO, "aten.view_as_real.default", "[{\"node\": \"v\"}]", "{}", 4, xs, x, 4, xs, got);
    for (int i = 0; i < N; i++) want[i] = x[i];
    near("complex64 -> complex128 -> complex64", got, want, N);
    lower_fails("aten.to.dtype", "[{\"node\": \"x\"}, {\"dtype\": \"complex32\"}]", "{}", 4, xs, 4, xs, "dtype complex32");
}

/* Boolean-mask indexing in a graph whose shapes fix the mask's count (GLM-Image's
 * dispatch-level trace): x [2, 3, 4], mask = x[0, 0] > t over the last dim. index gives the
 * selected columns, index_put writes values there, and with a recorded count 0 (values
 * empty) index_put writes nothing, while a replayed mask with another count is an error. */
static void mask_doc(char *doc, size_t n, double t, const char *y_target, const char *y_args, int ond, const int64_t *os,
                     const char *extra) {
    char oshape[96];
    fmt_shape(oshape, sizeof oshape, ond, os);
    snprintf(doc, n,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"Op\",\n"
             " \"nodes\": [\n"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [2, 3, 4], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"r\", \"op\": \"call_function\", \"target\": \"aten.select.int\", \"args\": [{\"node\": \"x\"}, 0, 0], \"kwargs\": {}, \"val\": {\"shape\": [3, 4], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
             "  {\"name\": \"r0\", \"op\": \"call_function\", \"target\": \"aten.select.int\", \"args\": [{\"node\": \"r\"}, 0, 0], \"kwargs\": {}, \"val\": {\"shape\": [4], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
             "  {\"name\": \"mask\", \"op\": \"call_function\", \"target\": \"aten.gt.Scalar\", \"args\": [{\"node\": \"r0\"}, %g], \"kwargs\": {}, \"val\": {\"shape\": [4], \"dtype\": \"bool\"}, \"module\": \"m\"},\n"
             "%s"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"%s\", \"args\": %s, \"kwargs\": {},\n"
             "   \"val\": {\"shape\": %s, \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [{\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}], \"constants\": {}, \"non_tensor_inputs\": {}}\n",
             t, extra, y_target, y_args, oshape);
}

/* x[:, mask2] = v with a 2-d mask over dims 1 and 2 (GLM-Image's dispatch trace after its
 * weights were real: index_put with a [3, 4] mask): positions taken in row-major order. */
static void mask2d_doc(char *doc, size_t n, const char *target, const char *args, const char *oshape) {
    snprintf(doc, n,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"Op\",\n"
             " \"nodes\": [\n"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [2, 3, 4], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"r\", \"op\": \"call_function\", \"target\": \"aten.select.int\", \"args\": [{\"node\": \"x\"}, 0, 0], \"kwargs\": {}, \"val\": {\"shape\": [3, 4], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
             "  {\"name\": \"mask\", \"op\": \"call_function\", \"target\": \"aten.gt.Scalar\", \"args\": [{\"node\": \"r\"}, 0.0], \"kwargs\": {}, \"val\": {\"shape\": [3, 4], \"dtype\": \"bool\"}, \"module\": \"m\"},\n"
             "  {\"name\": \"v\", \"op\": \"call_function\", \"target\": \"aten.arange.start_step\", \"args\": [0.5, 5.5, 1.0], \"kwargs\": {\"dtype\": {\"dtype\": \"float32\"}},"
             " \"val\": {\"shape\": [5], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"%s\", \"args\": %s, \"kwargs\": {},\n"
             "   \"val\": {\"shape\": %s, \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [{\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}], \"constants\": {}, \"non_tensor_inputs\": {}}\n",
             target, args, oshape);
}

/* x[:, mask2] and x[:, mask2] = v with a 2-d mask over dims 1 and 2 (GLM-Image's dispatch
 * trace once its weights were real: index_put with a [3, 4] mask): positions in row-major order. */
static void test_bool_mask_index_put_2d(void **st) {
    (void)st;
    enum { N = 24 };
    float x[N], got[2 * N];
    double want[N];
    for (int i = 0; i < N; i++) x[i] = (float)((i * 7) % 11) - 5.0f; /* x[0] > 0 at 1, 3, 4, 6, 9 */
    const int64_t xs[3] = {2, 3, 4};
    int sel[12], k = 0;
    for (int j = 0; j < 12; j++)
        if (x[j] > 0.0f) sel[k++] = j;
    assert_int_equal(k, 5);
    char doc[8192];
    mask2d_doc(doc, sizeof doc, "aten.index.Tensor", "[{\"node\": \"x\"}, [null, {\"node\": \"mask\"}]]", "[2, 5]");
    run_both("index mask 2d", doc, params_with(NULL, 0, NULL, NULL), 3, xs, x, 10, got);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 5; i++) want[b * 5 + i] = x[b * 12 + sel[i]];
    near("x[:, mask2]", got, want, 10);
    mask2d_doc(doc, sizeof doc, "aten.index_put.default", "[{\"node\": \"x\"}, [null, {\"node\": \"mask\"}], {\"node\": \"v\"}]",
               "[2, 3, 4]");
    run_both("index_put mask 2d", doc, params_with(NULL, 0, NULL, NULL), 3, xs, x, N, got);
    for (int i = 0; i < N; i++) want[i] = x[i];
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 5; i++) want[b * 12 + sel[i]] = 0.5 + i;
    near("x[:, mask2] = v (row-major positions, both rows of dim 0)", got, want, N);
}

static void test_bool_mask_index(void **st) {
    (void)st;
    enum { N = 24 };
    float x[N], got[2 * N];
    double want[N];
    for (int i = 0; i < N; i++) x[i] = (float)((i * 7) % 11) - 5.0f; /* x[0, 0] = -5, 2, -2, 5 */
    const int64_t xs[3] = {2, 3, 4};
    char doc[8192];
    /* x[:, :, mask], mask = x[0, 0] > 0 -> columns 1, 3 */
    mask_doc(doc, sizeof doc, 0.0, "aten.index.Tensor", "[{\"node\": \"x\"}, [null, null, {\"node\": \"mask\"}]]", 3, (int64_t[]){2, 3, 2}, "");
    run_both("index mask", doc, params_with(NULL, 0, NULL, NULL), 3, xs, x, 12, got);
    for (int r = 0; r < 6; r++) want[r * 2] = x[r * 4 + 1], want[r * 2 + 1] = x[r * 4 + 3];
    near("x[:, :, mask]", got, want, 12);
    /* x[:, :, mask] = [0.5, -0.25] */
    static const char V[] =
        "  {\"name\": \"v\", \"op\": \"call_function\", \"target\": \"aten.arange.start_step\", \"args\": [0.5, -1.0, -0.75], \"kwargs\": {\"dtype\": {\"dtype\": \"float32\"}},"
        " \"val\": {\"shape\": [2], \"dtype\": \"float32\"}, \"module\": \"m\"},\n";
    mask_doc(doc, sizeof doc, 0.0, "aten.index_put.default", "[{\"node\": \"x\"}, [null, null, {\"node\": \"mask\"}], {\"node\": \"v\"}]", 3, xs, V);
    run_both("index_put mask", doc, params_with(NULL, 0, NULL, NULL), 3, xs, x, N, got);
    for (int i = 0; i < N; i++) want[i] = i % 4 == 1 ? 0.5 : i % 4 == 3 ? -0.25 : x[i];
    near("x[:, :, mask] = v", got, want, N);
    /* a recorded count of 0 (mask = x[0, 0] > 10, values empty): x unchanged */
    static const char E[] =
        "  {\"name\": \"e\", \"op\": \"call_function\", \"target\": \"aten.new_zeros.default\", \"args\": [{\"node\": \"x\"}, [0]], \"kwargs\": {},"
        " \"val\": {\"shape\": [0], \"dtype\": \"float32\"}, \"module\": \"m\"},\n";
    mask_doc(doc, sizeof doc, 10.0, "aten.index_put.default", "[{\"node\": \"x\"}, [null, null, {\"node\": \"mask\"}], {\"node\": \"e\"}]", 3, xs, E);
    run_both("index_put mask none", doc, params_with(NULL, 0, NULL, NULL), 3, xs, x, N, got);
    for (int i = 0; i < N; i++) want[i] = x[i];
    near("x[:, :, all false] = empty", got, want, N);
    /* the same graph on data whose mask selects (x[0, 0] > 10 after x[0, 0, 3] = 11): refused at run time */
    x[3] = 11.0f;
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *gr = NULL;
    drift_graph *sem = NULL, *as = NULL;
    assert_int_equal(drift_aten_graph_parse(doc, strlen(doc), "mask.json", &gr, &e), DRIFT_OK);
    assert_int_equal(drift_aten_graph_lower(gr, &sem, &e), DRIFT_OK);
    drift_plan plan;
    drift_plan_init(&plan);
    plan.diffusion_forward_dtype = DRIFT_F32;
    drift_assign_opts o;
    drift_assign_opts_init(&o);
    o.side = DRIFT_SIDE_TRAINER;
    assert_int_equal(drift_assign_dtypes(sem, &plan, NULL, NULL, &o, &as, &e), DRIFT_OK);
    drift_hostset *ps = params_with(NULL, 0, NULL, NULL), *bs = params_with(NULL, 0, NULL, NULL), *is = params_with(NULL, 0, NULL, NULL);
    assert_int_equal(drift_hostset_add(is, "latents", DRIFT_F32, 3, xs, x, NULL, NULL, &e), 0);
    drift_backend *be = NULL;
    assert_int_equal(drift_backend_create("cpu", &be, &e), DRIFT_OK);
    drift_exec_inputs in = {.params = ps, .buffers = bs, .inputs = is};
    drift_exec_result r;
    memset(&r, 0, sizeof r);
    assert_int_not_equal(drift_exec_run(as, be, &in, &r, &e), DRIFT_OK);
    if (!strstr(e.msg, "1 non-zero elements where the recording had 0") && !strstr(e.msg, "2 non-zero elements where the recording had 1"))
        fail_msg("message: %s", e.msg);
    drift_exec_result_free(&r);
    drift_backend_free(be);
    drift_graph_free(as);
    drift_graph_free(sem);
    drift_plan_free(&plan);
    drift_aten_graph_free(gr);
    drift_hostset_free(ps);
    drift_hostset_free(bs);
    drift_hostset_free(is);
}

/* linalg_qr (WanAnimate's motion encoder) against LAPACK's (numpy.linalg.qr and torch's
 * CPU give these digits for [[1, 2], [3, 4], [5, 6]]: geqrf + orgqr's signs), within
 * 1e-6; and on a 6 x 3 matrix: Q^T Q = I, Q R = A, R upper triangular (1e-5). */
static void qr_run(const float *a, int64_t m, int64_t n, float *q, float *r) {
    char pre[512];
    snprintf(pre, sizeof pre,
             "  {\"name\": \"qr\", \"op\": \"call_function\", \"target\": \"aten.linalg_qr.default\", \"args\": [{\"node\": \"x\"}], \"kwargs\": {},"
             " \"val\": [{\"shape\": [%lld, %lld], \"dtype\": \"float32\"}, {\"shape\": [%lld, %lld], \"dtype\": \"float32\"}], \"module\": \"m\"},\n",
             (long long)m, (long long)n, (long long)n, (long long)n);
    float *got = malloc((size_t)(2 * m * n) * sizeof(float));
    run_doc_x("qr Q", pre, "getitem", "[{\"node\": \"qr\"}, 0]", "{}", 2, (int64_t[]){m, n}, a, 2, (int64_t[]){m, n}, got);
    memcpy(q, got, (size_t)(2 * m * n) * sizeof(float)); /* ref then cpu */
    run_doc_x("qr R", pre, "getitem", "[{\"node\": \"qr\"}, 1]", "{}", 2, (int64_t[]){m, n}, a, 2, (int64_t[]){n, n}, got);
    memcpy(r, got, (size_t)(2 * n * n) * sizeof(float));
    free(got);
}

static void test_linalg_qr(void **st) {
    (void)st;
    const float a[6] = {1, 2, 3, 4, 5, 6};
    float q[12], r[8];
    qr_run(a, 3, 2, q, r);
    const double wq[6] = {-0.16903085094570325, 0.89708523179051, -0.50709255283711, 0.27602622516631, -0.84515425472852, -0.34503278145789};
    const double wr[4] = {-5.9160797830996, -7.4373574416109, 0.0, 0.82807867121082};
    near("linalg_qr Q (LAPACK)", q, wq, 6);
    near("linalg_qr R (LAPACK)", r, wr, 4);
    enum { M = 6, N = 3 };
    float b[M * N], q2[2 * M * N], r2[2 * N * N];
    uint64_t s = 23;
    for (int i = 0; i < M * N; i++) b[i] = small(&s) + (i % (N + 1) == 0 ? 1.0f : 0.0f);
    qr_run(b, M, N, q2, r2);
    for (int k = 0; k < 2; k++) {
        const float *Q = q2 + k * M * N, *R = r2 + k * N * N;
        for (int i = 0; i < N; i++)
            for (int j = 0; j < N; j++) {
                double d = 0;
                for (int t = 0; t < M; t++) d += (double)Q[t * N + i] * Q[t * N + j];
                if (fabs(d - (i == j)) > 1e-5) fail_msg("Q^T Q [%d, %d] = %g on %s", i, j, d, k ? "cpu" : "ref");
                if (i > j && R[i * N + j] != 0.0f) fail_msg("R [%d, %d] = %g below the diagonal", i, j, R[i * N + j]);
            }
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double d = 0;
                for (int t = 0; t < N; t++) d += (double)Q[i * N + t] * R[t * N + j];
                if (fabs(d - b[i * N + j]) > 1e-5) fail_msg("(Q R)[%d, %d] = %g, A = %g on %s", i, j, d, b[i * N + j], k ? "cpu" : "ref");
            }
    }
}

/* leaky_relu with its default slope 0.01 and with 0.2, elu with alpha 1 and softplus with beta 2
 * (ConsisID's id_embedding_mapping: LeakyReLU() gave 0 for every negative input on the rec5 trace). */
static void test_unary_parameters(void **st) {
    (void)st;
    float x[6] = {-2, -0.5f, 0, 0.25f, 1, 3}, got[12];
    double want[6];
    const int64_t xs[2] = {2, 3};
    run_doc_x("leaky_relu", "", "aten.leaky_relu.default", "[{\"node\": \"x\"}]", "{}", 2, xs, x, 2, xs, got);
    for (int i = 0; i < 6; i++) want[i] = x[i] > 0 ? x[i] : 0.01 * x[i];
    near("leaky_relu default slope", got, want, 6);
    run_doc_x("leaky_relu 0.2", "", "aten.leaky_relu.default", "[{\"node\": \"x\"}, 0.2]", "{}", 2, xs, x, 2, xs, got);
    for (int i = 0; i < 6; i++) want[i] = x[i] > 0 ? x[i] : 0.2 * x[i];
    near("leaky_relu 0.2", got, want, 6);
    run_doc_x("elu", "", "aten.elu.default", "[{\"node\": \"x\"}]", "{}", 2, xs, x, 2, xs, got);
    for (int i = 0; i < 6; i++) want[i] = x[i] > 0 ? x[i] : expm1(x[i]);
    near("elu", got, want, 6);
    run_doc_x("softplus", "", "aten.softplus.default", "[{\"node\": \"x\"}, 2.0]", "{}", 2, xs, x, 2, xs, got);
    for (int i = 0; i < 6; i++) want[i] = log1p(exp(2.0 * x[i])) / 2.0;
    near("softplus beta 2", got, want, 6);
}

/* diag_embed (WanAnimate): [2, 3] onto the diagonal of [2, 3, 3], and offset 1 / -1 ([2, 4, 4]); exact. */
static void test_diag_embed(void **st) {
    (void)st;
    float x[6] = {1, 2, 3, 4, 5, 6}, got[2 * 32];
    double want[32];
    run_doc_x("diag_embed", "", "aten.diag_embed.default", "[{\"node\": \"x\"}]", "{}", 2, (int64_t[]){2, 3}, x, 3, (int64_t[]){2, 3, 3}, got);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) want[(b * 3 + i) * 3 + j] = i == j ? x[b * 3 + i] : 0.0;
    near("diag_embed", got, want, 18);
    for (int off = -1; off <= 1; off += 2) {
        char args[96];
        snprintf(args, sizeof args, "[{\"node\": \"x\"}, %d]", off);
        run_doc_x("diag_embed offset", "", "aten.diag_embed.default", args, "{}", 2, (int64_t[]){2, 3}, x, 3, (int64_t[]){2, 4, 4}, got);
        for (int b = 0; b < 2; b++)
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) {
                    const int k = off > 0 ? i : j; /* element index along the diagonal */
                    want[(b * 4 + i) * 4 + j] = j - i == off ? x[b * 3 + k] : 0.0;
                }
        near(off > 0 ? "diag_embed offset 1" : "diag_embed offset -1", got, want, 32);
    }
}

/* A transposed 1-d convolution with stride == kernel (AceStep's proj_out):
 * y[b, o, t k + j] = sum_c x[b, c, t] w[c, o, j] + bias[o]; exact (small dyadic values). */
static void test_conv_transposed(void **st) {
    (void)st;
    enum { B = 2, C = 4, T = 3, O = 5, K = 2 };
    float x[B * C * T], w[C * O * K], bias[O], got[2 * B * O * T * K];
    double want[B * O * T * K];
    uint64_t s = 31;
    for (int i = 0; i < B * C * T; i++) x[i] = small(&s);
    for (int i = 0; i < C * O * K; i++) w[i] = small(&s);
    for (int i = 0; i < O; i++) bias[i] = small(&s);
    char doc[4096];
    snprintf(doc, sizeof doc,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"CT\",\n"
             " \"nodes\": [\n"
             "  {\"name\": \"w\", \"op\": \"placeholder\", \"target\": \"w\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [4, 5, 2], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"b\", \"op\": \"placeholder\", \"target\": \"b\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [5], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [2, 4, 3], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"aten.convolution.default\", \"args\": [{\"node\": \"x\"}, {\"node\": \"w\"}, {\"node\": \"b\"}, [2], [0], [1], true, [0], 1], \"kwargs\": {},\n"
             "   \"val\": {\"shape\": [2, 5, 6], \"dtype\": \"float32\"}, \"module\": \"conv\", \"module_stack\": [\"conv\"]},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [{\"node\": \"w\", \"kind\": \"parameter\", \"target\": \"conv.weight\"},\n"
             "            {\"node\": \"b\", \"kind\": \"parameter\", \"target\": \"conv.bias\"},\n"
             "            {\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}], \"constants\": {}, \"non_tensor_inputs\": {}}\n");
    drift_hostset *ps = params_with("conv.weight", 3, (int64_t[]){C, O, K}, w);
    drift_err e;
    assert_int_equal(drift_hostset_add(ps, "conv.bias", DRIFT_F32, 1, (int64_t[]){O}, bias, NULL, NULL, &e), 0);
    run_both("conv_transpose1d", doc, ps, 3, (int64_t[]){B, C, T}, x, B * O * T * K, got);
    for (int b = 0; b < B; b++)
        for (int o = 0; o < O; o++)
            for (int t = 0; t < T; t++)
                for (int j = 0; j < K; j++) {
                    double acc = 0;
                    for (int c = 0; c < C; c++) acc += (double)x[(b * C + c) * T + t] * w[(c * O + o) * K + j];
                    want[(b * O + o) * T * K + t * K + j] = acc + bias[o];
                }
    near("conv_transpose1d", got, want, B * O * T * K);
}

/* Under bf16 autocast an einsum with a contracted letter is a bmm (bf16) while one without
 * (an outer product: Helios' rope 'd,bthw->dbthw') is torch's plain multiply and stays in
 * the operands' fp32: the assigned output dtype of each. */
static drift_dtype einsum_out_dtype(const char *eq, const char *ws, const char *os) {
    char doc[4096];
    snprintf(doc, sizeof doc,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"E\",\n"
             " \"nodes\": [\n"
             "  {\"name\": \"w\", \"op\": \"placeholder\", \"target\": \"w\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": %s, \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [3], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"aten.einsum.default\", \"args\": [\"%s\", [{\"node\": \"x\"}, {\"node\": \"w\"}]], \"kwargs\": {},\n"
             "   \"val\": {\"shape\": %s, \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [{\"node\": \"w\", \"kind\": \"parameter\", \"target\": \"m.w\"},\n"
             "            {\"node\": \"x\", \"kind\": \"buffer\", \"target\": \"x\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}], \"constants\": {}, \"non_tensor_inputs\": {}}\n",
             ws, eq, os);
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *gr = NULL;
    drift_graph *sem = NULL, *as = NULL;
    if (drift_aten_graph_parse(doc, strlen(doc), eq, &gr, &e) || drift_aten_graph_lower(gr, &sem, &e)) fail_msg("%s: %s", eq, e.msg);
    drift_plan plan;
    drift_plan_init(&plan);
    plan.diffusion_forward_dtype = DRIFT_BF16;
    drift_assign_opts o;
    drift_assign_opts_init(&o);
    o.side = DRIFT_SIDE_TRAINER;
    if (drift_assign_dtypes(sem, &plan, NULL, NULL, &o, &as, &e)) fail_msg("assign: %s", e.msg);
    /* the output view's input: the einsum's last node */
    const drift_value *out = drift_graph_value(as, drift_graph_output(as));
    const drift_dtype dt = out->dtype;
    drift_graph_free(as);
    drift_graph_free(sem);
    drift_plan_free(&plan);
    drift_aten_graph_free(gr);
    return dt;
}

static void test_einsum_autocast(void **st) {
    (void)st;
    assert_int_equal(einsum_out_dtype("d,j->dj", "[4]", "[3, 4]"), DRIFT_F32);
    assert_int_equal(einsum_out_dtype("d,dj->j", "[3, 4]", "[4]"), DRIFT_BF16);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_cases),
        cmocka_unit_test(test_conv_bad_groups),
        cmocka_unit_test(test_pool_and_norm),
        cmocka_unit_test(test_einsum_two),
        cmocka_unit_test(test_empty_operands),
        cmocka_unit_test(test_copy_through_detach),
        cmocka_unit_test(test_linear_noncontiguous_input),
        cmocka_unit_test(test_sdpa_causal_gqa),
        cmocka_unit_test(test_norm_alpha_einsum_unbind),
        cmocka_unit_test(test_pad_modes),
        cmocka_unit_test(test_complex_copy_and_cast),
        cmocka_unit_test(test_bool_mask_index),
        cmocka_unit_test(test_bool_mask_index_put_2d),
        cmocka_unit_test(test_linalg_qr),
        cmocka_unit_test(test_diag_embed),
        cmocka_unit_test(test_unary_parameters),
        cmocka_unit_test(test_conv_transposed),
        cmocka_unit_test(test_einsum_autocast),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
