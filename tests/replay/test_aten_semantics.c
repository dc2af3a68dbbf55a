/* Argument semantics of captured-graph lowerings that the zoo replays showed wrong
 * (issue 31, "replays but gives wrong answers"): each case is a one-node graph
 * written here, run on ref and cpu under an fp32 plan, against the op's torch
 * definition computed here in fp64 (never against a trace):
 *  - rms_norm with eps=None (Chroma's distilled_guidance_layer norms): ATen uses
 *    the epsilon of the accumulate type, FLT_EPSILON for a bf16 input, not
 *    finfo(bf16).eps = 2^-7;
 *  - an op inside the model code's own autocast region (the recorder's "autocast"
 *    of the node; Mochi's RoPE einsum under `torch.autocast(device, torch.float32)`):
 *    a bf16 forward still runs it in fp32; a region the importer cannot express is
 *    refused, naming it, not replayed under the ambient rule;
 *  - SDPA with a key mask expanded over the queries (stride 0: Lumina-Next's
 *    `mask.view(B, 1, 1, -1).expand(-1, H, Lq, -1)`): a key mask, for which torch's
 *    fused kernels keep the scores in fp32, not the math path that rounds q k^T to
 *    bf16 first; and a mask that varies over the queries (HunyuanVideo's
 *    `mask.view(B, 1, 1, L).repeat(1, 1, L, 1)`): explicit ops, still with fp32
 *    scores as torch's fused kernels (memory-efficient, cuDNN) compute them; with a
 *    head dim that is no multiple of 8 (HunyuanVideo's token refiner: 10) no fused
 *    kernel takes a mask and torch runs its math backend: p and p v in fp32;
 *  - linear with a bias over a non-contiguous input of 3+ dims (Sana's attention output,
 *    transposed) is torch's matmul + add_: two roundings, not the epilogue's one;
 *  - a lower-precision-list op (linear, matmul, ...) whose operands are all fp64 runs
 *    in fp64 under autocast: autocast casts only eligible operands, and fp64 is not;
 *  - new_ones(x, size) fills ones (Krea2's key mask cat([mask, mask.new_ones(...)])
 *    filled zeros: every image token was masked out of attention);
 *  - a matmul in a model-code region that disables autocast (Ideogram4's RoPE
 *    `with torch.autocast(enabled=False)`) stays fp32 under a bf16 plan (position
 *    65537 stays 65537, not bf16's 65536);
 *  - an argument no lowering reads (a positional past the schema the importer knows,
 *    an unknown keyword) is refused naming it, not ignored; the keywords that only
 *    place the result (device, layout, pin_memory, memory_format, ...) are not;
 *  - the dispatch-captured zoo models (issue 31, closed opset), whole documents through
 *    drift_capture_model_create so that inline constants load as a replay loads them:
 *    Lumina2's complex128 RoPE chain (fp64 pairs, bitwise), a float64 constant, fill_
 *    into views (live although nothing reads the fill's node), topk / sort (ties in
 *    index order; bad k and dim refused), scatter_reduce in every mode both ways,
 *    nonzero_numpy, and a top-2 MoE as a dispatch trace records it (topk,
 *    nonzero_numpy, index, index_add_). */
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
#include "replay/capture/aten_model.h"
#include "replay/exec/exec.h"
#include "replay/ir/assign.h"
#include "tests/fp32_run.h"

static void fmt_shape(char *b, size_t n, int nd, const int64_t *sh) {
    size_t k = (size_t)snprintf(b, n, "[");
    for (int i = 0; i < nd; i++) k += (size_t)snprintf(b + k, n - k, "%s%lld", i ? ", " : "", (long long)sh[i]);
    snprintf(b + k, n - k, "]");
}

/* The document of y = target(args) over the latents x (captured dtype xdt) and the
 * parameter placeholders in params_json (JSON nodes, each ending in ",\n"; inputs_json
 * their "inputs" entries, each ending in ",\n"). */
static char *doc_ext(const char *xdt, int xnd, const int64_t *xs, const char *params_json, const char *inputs_json,
                     const char *target, const char *args, const char *kwargs, const char *ydt, int ynd, const int64_t *ys,
                     const char *node_extra, const char *doc_extra) {
    char xsh[96], ysh[96];
    fmt_shape(xsh, sizeof xsh, xnd, xs);
    fmt_shape(ysh, sizeof ysh, ynd, ys);
    char *doc = malloc(16384);
    snprintf(doc, 16384,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"Op\",\n"
             " \"nodes\": [\n%s"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": %s, \"dtype\": \"%s\"}, \"module\": \"\"},\n"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"%s\", \"args\": %s, \"kwargs\": %s,\n"
             "   \"val\": {\"shape\": %s, \"dtype\": \"%s\"}, \"module\": \"m\", \"module_stack\": [\"m\"]%s},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [%s{\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}], \"constants\": {}, \"non_tensor_inputs\": {}%s}\n",
             params_json, xsh, xdt, target, args, kwargs, ysh, ydt, node_extra, inputs_json, doc_extra);
    return doc;
}

static char *doc_of(const char *xdt, int xnd, const int64_t *xs, const char *params_json, const char *inputs_json,
                    const char *target, const char *args, const char *kwargs, const char *ydt, int ynd, const int64_t *ys) {
    return doc_ext(xdt, xnd, xs, params_json, inputs_json, target, args, kwargs, ydt, ynd, ys, "", "");
}

/* test_run_fp32 under a bf16 forward (autocast bf16; inputs passed through). */
static void run_bf16(const drift_graph *sem, const char *be_name, drift_hostset *ps, drift_hostset *bs, drift_hostset *is,
                     drift_exec_result *r) {
    drift_err e;
    drift_err_clear(&e);
    drift_plan plan;
    drift_plan_init(&plan);
    plan.diffusion_forward_dtype = DRIFT_BF16;
    drift_assign_opts o;
    drift_assign_opts_init(&o);
    drift_graph *as = NULL;
    if (drift_assign_dtypes(sem, &plan, NULL, NULL, &o, &as, &e)) fail_msg("assign: %s", e.msg);
    drift_backend *be = NULL;
    if (drift_backend_create(be_name, &be, &e)) fail_msg("backend %s: %s", be_name, e.msg);
    drift_exec_inputs in = {.params = ps, .buffers = bs, .inputs = is};
    memset(r, 0, sizeof *r);
    if (drift_exec_run(as, be, &in, r, &e)) fail_msg("%s: %s", e.where, e.msg);
    drift_backend_free(be);
    drift_graph_free(as);
    drift_plan_free(&plan);
}

/* Lowers doc and runs it on ref then cpu with parameters ps (owned, may be NULL) and the
 * latents x; the n outputs of each backend go to got[0..n) and got[n..2n). */
static void run_plan(const char *name, const char *doc, drift_hostset *ps, drift_hostset *bs, int xnd, const int64_t *xs,
                     const float *x, int64_t n, float *got, int bf16) {
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *gr = NULL;
    drift_graph *sem = NULL;
    if (drift_aten_graph_parse(doc, strlen(doc), name, &gr, &e) || drift_aten_graph_lower(gr, &sem, &e))
        fail_msg("%s: %s: %s", name, e.where, e.msg);
    drift_hostset *is;
    if (!bs) drift_hostset_create(&bs, &e);
    drift_hostset_create(&is, &e);
    if (!ps) drift_hostset_create(&ps, &e);
    assert_int_equal(drift_hostset_add(is, "latents", DRIFT_F32, xnd, xs, x, NULL, NULL, &e), 0);
    const char *bes[2] = {"ref", "cpu"};
    for (int k = 0; k < 2; k++) {
        drift_exec_result r;
        if (bf16) run_bf16(sem, bes[k], ps, bs, is, &r);
        else test_run_fp32(sem, DRIFT_SIDE_TRAINER, bes[k], ps, bs, is, NULL, NULL, &r);
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

static void run_both(const char *name, const char *doc, drift_hostset *ps, int xnd, const int64_t *xs, const float *x,
                     int64_t n, float *got) {
    run_plan(name, doc, ps, NULL, xnd, xs, x, n, got, 0);
}

/* Lowering doc must fail with a message holding want. */
static void refused(const char *name, const char *doc, const char *want) {
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *gr = NULL;
    drift_graph *sem = NULL;
    assert_int_equal(drift_aten_graph_parse(doc, strlen(doc), name, &gr, &e), DRIFT_OK);
    if (drift_aten_graph_lower(gr, &sem, &e) == DRIFT_OK) fail_msg("%s: lowered, want refused (%s)", name, want);
    if (!strstr(e.msg, want)) fail_msg("%s: message '%s' lacks '%s'", name, e.msg, want);
    drift_aten_graph_free(gr);
}

/* got (ref's n values, then cpu's) equal to want bit for bit, fp64 results compared as fp64. */
static void exact_both(const char *what, const double *got, const double *want, int n) {
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < n; i++)
            if (got[k * n + i] != want[i])
                fail_msg("%s on %s: y[%d] = %.17g, want %.17g", what, k ? "cpu" : "ref", i, got[k * n + i], want[i]);
}

static void near(const char *what, const float *got, const double *want, int64_t n, double rtol) {
    for (int k = 0; k < 2; k++)
        for (int64_t i = 0; i < n; i++)
            if (fabs(got[k * n + i] - want[i]) > rtol * (1e-3 + fabs(want[i])))
                fail_msg("%s on %s: [%lld] = %.9g, want %.9g", what, k ? "cpu" : "ref", (long long)i, got[k * n + i], want[i]);
}

/* torch.rms_norm(x, [D], eps=None) with x captured in bf16: y = x * rsqrt(mean(x^2) + FLT_EPSILON).
 * x ~ 1e-3 so that mean(x^2) ~ 1e-6: an eps of 2^-7 would shrink y about 90-fold. */
static void test_rms_norm_eps_none(void **st) {
    (void)st;
    enum { R = 3, D = 8 };
    float x[R * D], got[2 * R * D];
    double want[R * D];
    for (int i = 0; i < R * D; i++) x[i] = (float)((i % 7) - 3) * 1e-3f + 1e-4f;
    for (int r = 0; r < R; r++) {
        double ms = 0;
        for (int d = 0; d < D; d++) ms += (double)x[r * D + d] * x[r * D + d];
        ms /= D;
        for (int d = 0; d < D; d++) want[r * D + d] = x[r * D + d] / sqrt(ms + 1.1920928955078125e-07);
    }
    const int64_t xs[2] = {R, D};
    const char *dts[2] = {"bfloat16", "float32"};
    for (int k = 0; k < 2; k++) {
        char *doc = doc_of(dts[k], 2, xs, "", "", "aten.rms_norm.default", "[{\"node\": \"x\"}, [8]]", "{}", dts[k], 2, xs);
        run_both("rms_norm eps=None", doc, NULL, 2, xs, x, R * D, got);
        near(dts[k], got, want, R * D, 1e-5);
        free(doc);
    }
    print_message("  rms_norm(eps=None) of a bf16 / fp32 capture uses FLT_EPSILON on ref and cpu\n");
}

/* 1 if v is not a bf16 value (more than 8 significant bits). */
static int not_bf16(double v) {
    const float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (double)f != v || (u & 0xffffu) != 0;
}

/* m * 2^-3, m in -8..8 (exact in bf16; products and short sums exact in fp32). */
static float small(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int)((*s >> 33) % 17) - 8) * 0.125f;
}

/* linear(x, w) in a region `with torch.autocast("cuda", torch.float32)` of a bf16 forward:
 * torch casts the operands to fp32 (w's bf16 forward copy widened) and returns fp32, so
 * y = x w^T exactly (dyadic values: the fp32 sums are exact; bf16 would round them). */
static void test_autocast_region_fp32(void **st) {
    (void)st;
    enum { R = 6, K = 16, O = 5 };
    float x[R * K], w[O * K], got[2 * R * O];
    double want[R * O];
    uint64_t s = 3;
    for (int i = 0; i < R * K; i++) x[i] = small(&s) + 0.0078125f * (float)(i % 3); /* bf16-exact, finer grid */
    for (int i = 0; i < O * K; i++) w[i] = small(&s);
    int inexact = 0;
    for (int r = 0; r < R; r++)
        for (int o = 0; o < O; o++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += (double)x[r * K + k] * w[o * K + k];
            want[r * O + o] = acc;
            inexact += not_bf16(acc); /* needs more than bf16's 8 bits */
        }
    assert_true(inexact > 0);
    const int64_t xs[2] = {R, K}, ws[2] = {O, K}, ys[2] = {R, O};
    const char *pj = "  {\"name\": \"w\", \"op\": \"placeholder\", \"target\": \"w\", \"args\": [], \"kwargs\": {}, "
                     "\"val\": {\"shape\": [5, 16], \"dtype\": \"bfloat16\"}, \"module\": \"\"},\n";
    const char *ij = "{\"node\": \"w\", \"kind\": \"parameter\", \"target\": \"m.w\"}, ";
    const char *cap = ", \"capture\": {\"mode\": \"dispatch\", \"autocast\": \"bfloat16\"}";
    char *doc = doc_ext("float32", 2, xs, pj, ij, "aten.linear.default", "[{\"node\": \"x\"}, {\"node\": \"w\"}]", "{}",
                        "float32", 2, ys, ", \"autocast\": {\"enabled\": true, \"dtype\": \"float32\"}", cap);
    drift_err e;
    drift_hostset *ps = NULL;
    assert_int_equal(drift_hostset_create(&ps, &e), 0);
    assert_int_equal(drift_hostset_add(ps, "m.w", DRIFT_F32, 2, ws, w, NULL, NULL, &e), 0);
    run_plan("autocast fp32 region", doc, ps, NULL, 2, xs, x, R * O, got, 1);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < R * O; i++)
            if (got[k * R * O + i] != (float)want[i])
                fail_msg("fp32 region on %s: y[%d] = %.9g, want %.9g (fp32, not bf16)", k ? "cpu" : "ref", i,
                         got[k * R * O + i], want[i]);
    free(doc);
    /* a half-precision region other than the capture's autocast: refused, not replayed under the plan */
    doc = doc_ext("float32", 2, xs, pj, ij, "aten.linear.default", "[{\"node\": \"x\"}, {\"node\": \"w\"}]", "{}",
                  "float16", 2, ys, ", \"autocast\": {\"enabled\": true, \"dtype\": \"float16\"}", cap);
    refused("fp16 region", doc, "autocast region in float16");
    free(doc);
    doc = doc_ext("float32", 2, xs, pj, ij, "aten.linear.default", "[{\"node\": \"x\"}, {\"node\": \"w\"}]", "{}",
                  "float32", 2, ys, ", \"autocast\": {\"dtype\": \"float32\"}", cap);
    refused("region without enabled", doc, "'autocast': expected");
    free(doc);
    print_message("  linear in an fp32 autocast region of a bf16 forward is fp32 on ref and cpu; fp16 region refused\n");
}

/* sdpa(q, k, v, mask.expand(B, H, Lq, Lk)) in a bf16 forward, mask a bool [1, 1, 1, Lk]
 * constant: torch's definition with fp32 scores, softmax, P v (here in fp64; the bf16
 * rounding of P and of the output stays within 1 %, the bf16 rounding of the scores that
 * the math path did moves logits of about 40 by up to 0.25). */
static void sdpa_case(int full) {
    enum { L = 4, S = 5, D = 4 };
    float q[L * D], k[S * D], v[S * D], got[2 * L * D];
    double want[L * D];
    /* q.k = 80 + x_j / 2 (x_j = 0.25, 0.75, 1.25, 1.75, 0.5 scaled by the row): logits 40.06..40.5
     * apart by less than 1 (mixed probabilities) and not on bf16's 0.25 grid */
    const float xk[S] = {0.25f, 0.75f, 1.25f, 1.75f, 0.5f};
    for (int i = 0; i < L; i++) {
        const float r[D] = {8, 8, 0.5f, 0.25f * (float)i};
        memcpy(q + i * D, r, sizeof r);
    }
    for (int j = 0; j < S; j++) {
        const float r[D] = {5, 5, xk[j], 0.5f}, w[D] = {(float)j, (float)-j, 1, 0.5f * (float)j};
        memcpy(k + j * D, r, sizeof r);
        memcpy(v + j * D, w, sizeof w);
    }
    /* full: a mask that varies over the queries (row i drops key (i + 1) % S); else key 2 */
    int keep[L][S];
    for (int i = 0; i < L; i++)
        for (int j = 0; j < S; j++) keep[i][j] = full ? j != (i + 1) % S : j != 2;
    for (int i = 0; i < L; i++) {
        double sc[S], mx = -1e300, z = 0;
        for (int j = 0; j < S; j++) {
            double a = 0;
            for (int d = 0; d < D; d++) a += (double)q[i * D + d] * k[j * D + d];
            sc[j] = keep[i][j] ? (double)(float)a * 0.5 : -INFINITY;
            if (sc[j] > mx) mx = sc[j];
        }
        for (int j = 0; j < S; j++) z += sc[j] == -INFINITY ? 0 : exp(sc[j] - mx);
        for (int d = 0; d < D; d++) {
            double o = 0;
            for (int j = 0; j < S; j++) o += sc[j] == -INFINITY ? 0 : exp(sc[j] - mx) / z * v[j * D + d];
            want[i * D + d] = o;
        }
    }
    char doc[8192];
    snprintf(doc, sizeof doc,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"A\",\n"
             " \"nodes\": [\n"
             "  {\"name\": \"k\", \"op\": \"placeholder\", \"target\": \"k\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [1, 1, 5, 4], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"v\", \"op\": \"placeholder\", \"target\": \"v\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [1, 1, 5, 4], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"m\", \"op\": \"placeholder\", \"target\": \"m\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [1, 1, %d, 5], \"dtype\": \"bool\"}, \"module\": \"\"},\n"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [1, 1, 4, 4], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"e\", \"op\": \"call_function\", \"target\": \"%s\", \"args\": [{\"node\": \"m\"}%s], \"kwargs\": {},\n"
             "   \"val\": {\"shape\": [1, 1, 4, 5], \"dtype\": \"bool\"}, \"module\": \"m\", \"module_stack\": [\"m\"]},\n"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"aten.scaled_dot_product_attention.default\",\n"
             "   \"args\": [{\"node\": \"x\"}, {\"node\": \"k\"}, {\"node\": \"v\"}, {\"node\": \"e\"}], \"kwargs\": {},\n"
             "   \"val\": {\"shape\": [1, 1, 4, 4], \"dtype\": \"bfloat16\"}, \"module\": \"m\", \"module_stack\": [\"m\"]},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [{\"node\": \"k\", \"kind\": \"parameter\", \"target\": \"m.k\"}, {\"node\": \"v\", \"kind\": \"parameter\", \"target\": \"m.v\"},\n"
             "            {\"node\": \"m\", \"kind\": \"constant\", \"target\": \"mask\"},\n"
             "            {\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}],\n"
             " \"constants\": {}, \"non_tensor_inputs\": {}}\n",
             full ? L : 1, full ? "aten.alias.default" : "aten.expand.default", full ? "" : ", [-1, 1, 4, -1]");
    const int64_t qs[4] = {1, 1, L, D}, ks[4] = {1, 1, S, D};
    drift_err e;
    drift_hostset *ps = NULL;
    assert_int_equal(drift_hostset_create(&ps, &e), 0);
    assert_int_equal(drift_hostset_add(ps, "m.k", DRIFT_F32, 4, ks, k, NULL, NULL, &e), 0);
    assert_int_equal(drift_hostset_add(ps, "m.v", DRIFT_F32, 4, ks, v, NULL, NULL, &e), 0);
    drift_hostset *bs = NULL;
    assert_int_equal(drift_hostset_create(&bs, &e), 0);
    float mv[L * S];
    for (int i = 0; i < L * S; i++) mv[i] = (float)keep[full ? i / S : 0][i % S];
    assert_int_equal(drift_hostset_add(bs, "constant:mask", DRIFT_F32, 4, (int64_t[]){1, 1, full ? L : 1, S}, mv, NULL, NULL, &e), 0);
    run_plan("sdpa expanded key mask", doc, ps, bs, 4, qs, q, L * D, got, 1);
    double mx = 0;
    for (int i = 0; i < L * D; i++) mx = fmax(mx, fabs(want[i]));
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < L * D; i++)
            if (fabs(got[b * L * D + i] - want[i]) > 1e-2 * mx)
                fail_msg("sdpa on %s: y[%d] = %.6g, want %.6g (scores in fp32)", b ? "cpu" : "ref", i, got[b * L * D + i], want[i]);
    print_message("  sdpa with %s keeps fp32 scores on ref and cpu\n",
                  full ? "a mask that varies over the queries" : "a key mask expanded over the queries");
}

static void test_sdpa_expanded_key_mask(void **st) {
    (void)st;
    sdpa_case(0);
}

static void test_sdpa_query_mask(void **st) {
    (void)st;
    sdpa_case(1);
}

static float bf16_round(double v) {
    float f = (float)v;
    uint32_t b;
    memcpy(&b, &f, 4);
    b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &b, 4);
    return f;
}

/* sdpa(q, k, v, mask) in a bf16 forward with a head dim of 4 (HunyuanVideo's token refiner:
 * 10): no fused kernel takes a mask with a head dim that is no multiple of 8 (flash takes no
 * mask; memory-efficient and cuDNN attention need 8 16-bit values per row), so torch runs
 * its math backend: q, k, v widened to fp32, p = softmax(q k^T scale) in fp32, o = p v in
 * fp32, rounded once to bf16. The fused form rounds p to bf16 before p v: with these
 * probabilities (thirds, sixths) and v on a fine grid, that moves most outputs by a bf16 ULP. */
static void test_sdpa_mask_head_dim_not_8(void **st) {
    (void)st;
    enum { L = 8, S = 6, D = 4 };
    float q[L * D], k[S * D], v[S * D], got[2 * L * D];
    double want[L * D];
    for (int i = 0; i < L * D; i++) q[i] = (float)((i * 7) % 5) * 0.25f;
    for (int i = 0; i < S * D; i++) k[i] = (float)((i * 3) % 4) * 0.5f;
    for (int i = 0; i < S * D; i++) v[i] = bf16_round(1.0 + (double)((i * 5) % 11) / 13.0);
    int keep[L][S];
    for (int i = 0; i < L; i++)
        for (int j = 0; j < S; j++) keep[i][j] = j != i % S; /* a mask that varies over the queries */
    for (int i = 0; i < L; i++) {
        double sc[S], mx = -1e300, z = 0;
        for (int j = 0; j < S; j++) {
            double a = 0;
            for (int d = 0; d < D; d++) a += (double)q[i * D + d] * k[j * D + d];
            sc[j] = keep[i][j] ? a * 0.5 : -INFINITY;
            if (sc[j] > mx) mx = sc[j];
        }
        for (int j = 0; j < S; j++) z += keep[i][j] ? exp(sc[j] - mx) : 0;
        for (int d = 0; d < D; d++) {
            double o = 0;
            for (int j = 0; j < S; j++) o += keep[i][j] ? exp(sc[j] - mx) / z * v[j * D + d] : 0;
            want[i * D + d] = o;
        }
    }
    char doc[8192];
    snprintf(doc, sizeof doc,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"A\",\n"
             " \"nodes\": [\n"
             "  {\"name\": \"k\", \"op\": \"placeholder\", \"target\": \"k\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [1, 1, %d, %d], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"v\", \"op\": \"placeholder\", \"target\": \"v\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [1, 1, %d, %d], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"m\", \"op\": \"placeholder\", \"target\": \"m\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [1, 1, %d, %d], \"dtype\": \"bool\"}, \"module\": \"\"},\n"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [1, 1, %d, %d], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"aten.scaled_dot_product_attention.default\",\n"
             "   \"args\": [{\"node\": \"x\"}, {\"node\": \"k\"}, {\"node\": \"v\"}, {\"node\": \"m\"}], \"kwargs\": {},\n"
             "   \"val\": {\"shape\": [1, 1, %d, %d], \"dtype\": \"bfloat16\"}, \"module\": \"m\", \"module_stack\": [\"m\"]},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [{\"node\": \"k\", \"kind\": \"parameter\", \"target\": \"m.k\"}, {\"node\": \"v\", \"kind\": \"parameter\", \"target\": \"m.v\"},\n"
             "            {\"node\": \"m\", \"kind\": \"constant\", \"target\": \"mask\"},\n"
             "            {\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}],\n"
             " \"constants\": {}, \"non_tensor_inputs\": {}}\n",
             S, D, S, D, L, S, L, D, L, D);
    const int64_t qs[4] = {1, 1, L, D}, ks[4] = {1, 1, S, D};
    drift_err e;
    drift_hostset *ps = NULL, *bs = NULL;
    assert_int_equal(drift_hostset_create(&ps, &e), 0);
    assert_int_equal(drift_hostset_add(ps, "m.k", DRIFT_F32, 4, ks, k, NULL, NULL, &e), 0);
    assert_int_equal(drift_hostset_add(ps, "m.v", DRIFT_F32, 4, ks, v, NULL, NULL, &e), 0);
    assert_int_equal(drift_hostset_create(&bs, &e), 0);
    float mv[L * S];
    for (int i = 0; i < L * S; i++) mv[i] = (float)keep[i / S][i % S];
    assert_int_equal(drift_hostset_add(bs, "constant:mask", DRIFT_F32, 4, (int64_t[]){1, 1, L, S}, mv, NULL, NULL, &e), 0);
    run_plan("sdpa mask head dim 4", doc, ps, bs, 4, qs, q, L * D, got, 1);
    int off = 0; /* cpu: bf16 */
    for (int i = 0; i < L * D; i++) {
        if (fabs(got[i] - want[i]) > 1e-6 * fabs(want[i])) /* ref: the fp64 oracle, every dtype fp64 */
            fail_msg("sdpa with a mask and head dim 4 on ref: y[%d] = %.9g, want %.9g", i, got[i], want[i]);
        off += got[L * D + i] != bf16_round(want[i]);
    }
    if (off > 1) /* one output near a rounding tie may land on either side */
        fail_msg("sdpa with a mask and head dim 4 on cpu: %d of %d outputs are not p v in fp32 rounded once to bf16 "
                 "(the fused form's bf16 p?)", off, L * D);
    print_message("  sdpa with a mask and a head dim that is no multiple of 8 is torch's math backend on ref and cpu\n");
}

/* linear(x, w, b) in a bf16 forward, x [1, 2, 3] (rows (1, 2^-9, 2^-11) and (1, 0, 0)), w = [[1, 1, 1]],
 * b = 2^-9: a contiguous x is flattened into addmm, the bias added in the GEMM's epilogue and
 * rounded once (1 + 2^-9 + 2^-11 + 2^-9 -> 1 + 2^-7); x as a transposed view (strides [6, 1, 2],
 * Sana's attention output) goes through matmul and then `out.add_(b)`: 1 + 2^-9 + 2^-11 rounds
 * to 1 first, and 1 + 2^-9 rounds to 1 again. The fp64 oracle (ref) keeps every bit. */
static void linear_input_case(int transposed, float want_cpu0) {
    char doc[4096];
    snprintf(doc, sizeof doc,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"L\",\n"
             " \"nodes\": [\n"
             "  {\"name\": \"w\", \"op\": \"placeholder\", \"target\": \"w\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [1, 3], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"b\", \"op\": \"placeholder\", \"target\": \"b\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [1], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": %s, \"dtype\": \"float32\", \"stride\": %s}, \"module\": \"\"},\n"
             "  {\"name\": \"t\", \"op\": \"call_function\", \"target\": \"%s\", \"args\": %s, \"kwargs\": {},\n"
             "   \"val\": {\"shape\": [1, 2, 3], \"dtype\": \"float32\", \"stride\": %s}, \"module\": \"m\", \"module_stack\": [\"m\"]},\n"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"aten.linear.default\",\n"
             "   \"args\": [{\"node\": \"t\"}, {\"node\": \"w\"}, {\"node\": \"b\"}], \"kwargs\": {},\n"
             "   \"val\": {\"shape\": [1, 2, 1], \"dtype\": \"bfloat16\", \"stride\": [2, 1, 1]}, \"module\": \"m\", \"module_stack\": [\"m\"]},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [{\"node\": \"w\", \"kind\": \"parameter\", \"target\": \"m.w\"}, {\"node\": \"b\", \"kind\": \"parameter\", \"target\": \"m.b\"},\n"
             "            {\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}], \"constants\": {}, \"non_tensor_inputs\": {}}\n",
             transposed ? "[1, 3, 2]" : "[1, 2, 3]", transposed ? "[6, 2, 1]" : "[6, 3, 1]",
             transposed ? "aten.transpose.int" : "aten.alias.default",
             transposed ? "[{\"node\": \"x\"}, 1, 2]" : "[{\"node\": \"x\"}]", transposed ? "[6, 1, 2]" : "[6, 3, 1]");
    const float r0[3] = {1.0f, 0.001953125f, 0.00048828125f}, r1[3] = {1.0f, 0.0f, 0.0f};
    float x[6];
    for (int k = 0; k < 3; k++) { /* the logical [1, 2, 3] rows r0, r1 in the placeholder's layout */
        x[transposed ? k * 2 + 0 : k] = r0[k];
        x[transposed ? k * 2 + 1 : 3 + k] = r1[k];
    }
    const float w[3] = {1, 1, 1}, b = 0.001953125f;
    drift_err e;
    drift_hostset *ps = NULL;
    assert_int_equal(drift_hostset_create(&ps, &e), 0);
    assert_int_equal(drift_hostset_add(ps, "m.w", DRIFT_F32, 2, (int64_t[]){1, 3}, w, NULL, NULL, &e), 0);
    assert_int_equal(drift_hostset_add(ps, "m.b", DRIFT_F32, 1, (int64_t[]){1}, &b, NULL, NULL, &e), 0);
    const int64_t xs[3] = {1, transposed ? 3 : 2, transposed ? 2 : 3};
    float got[4];
    run_plan("linear input layout", doc, ps, NULL, 3, xs, x, 2, got, 1);
    if (got[0] != 1.00439453125f || got[1] != 1.001953125f)
        fail_msg("linear (%s input) on ref: %.9g %.9g, want 1.00439453 1.00195313", transposed ? "transposed" : "contiguous",
                 got[0], got[1]);
    if (got[2] != want_cpu0 || got[3] != 1.0f)
        fail_msg("linear (%s input) in bf16 on cpu: %.9g %.9g, want %.9g 1 (%s)", transposed ? "transposed" : "contiguous",
                 got[2], got[3], want_cpu0, transposed ? "matmul, then the bias added: two roundings" : "the bias in the epilogue: one rounding");
}

static void test_linear_noncontiguous_input(void **st) {
    (void)st;
    linear_input_case(0, 1.0078125f);
    linear_input_case(1, 1.0f);
    print_message("  linear of a non-contiguous 3-d input rounds the GEMM, then adds the bias (torch's matmul + add_) on cpu\n");
}

/* linear(x.double(), w.double()) in a bf16 forward: fp64 throughout (exact here), not bf16. */
static void test_autocast_fp64_operands(void **st) {
    (void)st;
    enum { R = 6, K = 16, O = 5 };
    float x[R * K], w[O * K], got[2 * R * O];
    uint64_t s = 5;
    for (int i = 0; i < R * K; i++) x[i] = small(&s) + 0.0078125f * (float)(i % 3); /* bf16-exact, finer grid */
    for (int i = 0; i < O * K; i++) w[i] = small(&s);
    const int64_t xs[2] = {R, K}, ws[2] = {O, K};
    char doc[8192];
    snprintf(doc, sizeof doc,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"L\",\n"
             " \"nodes\": [\n"
             "  {\"name\": \"w\", \"op\": \"placeholder\", \"target\": \"w\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [5, 16], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [6, 16], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"xd\", \"op\": \"call_function\", \"target\": \"aten.to.dtype\", \"args\": [{\"node\": \"x\"}, {\"dtype\": \"float64\"}], \"kwargs\": {},\n"
             "   \"val\": {\"shape\": [6, 16], \"dtype\": \"float64\"}, \"module\": \"m\", \"module_stack\": [\"m\"]},\n"
             "  {\"name\": \"wd\", \"op\": \"call_function\", \"target\": \"aten.to.dtype\", \"args\": [{\"node\": \"w\"}, {\"dtype\": \"float64\"}], \"kwargs\": {},\n"
             "   \"val\": {\"shape\": [5, 16], \"dtype\": \"float64\"}, \"module\": \"m\", \"module_stack\": [\"m\"]},\n"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"aten.linear.default\", \"args\": [{\"node\": \"xd\"}, {\"node\": \"wd\"}], \"kwargs\": {},\n"
             "   \"val\": {\"shape\": [6, 5], \"dtype\": \"float64\"}, \"module\": \"m\", \"module_stack\": [\"m\"]},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [{\"node\": \"w\", \"kind\": \"parameter\", \"target\": \"m.w\"},\n"
             "            {\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}], \"constants\": {}, \"non_tensor_inputs\": {}}\n");
    drift_err e;
    drift_hostset *ps = NULL;
    assert_int_equal(drift_hostset_create(&ps, &e), 0);
    assert_int_equal(drift_hostset_add(ps, "m.w", DRIFT_F32, 2, ws, w, NULL, NULL, &e), 0);
    run_plan("fp64 linear under autocast", doc, ps, NULL, 2, xs, x, R * O, got, 1);
    int inexact = 0;
    for (int r = 0; r < R; r++)
        for (int o = 0; o < O; o++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += (double)x[r * K + k] * w[o * K + k];
            inexact += not_bf16(acc);
            for (int b = 0; b < 2; b++)
                if (got[b * R * O + r * O + o] != (float)acc)
                    fail_msg("fp64 linear on %s: y[%d] = %.9g, want %.9g (fp64, not bf16)", b ? "cpu" : "ref", r * O + o,
                             got[b * R * O + r * O + o], acc);
        }
    assert_true(inexact > 0);
    print_message("  linear of fp64 operands under bf16 autocast stays fp64 on ref and cpu\n");
}

static void test_unread_arguments(void **st) {
    (void)st;
    const int64_t xs[2] = {3, 4}, ys1[2] = {3, 1};
    char *doc = doc_of("float32", 2, xs, "", "", "aten.relu.default", "[{\"node\": \"x\"}, 3]", "{}", "float32", 2, xs);
    refused("relu with an extra argument", doc, "argument 1 is not supported");
    free(doc);
    doc = doc_of("float32", 2, xs, "", "", "aten.mean.dim", "[{\"node\": \"x\"}, [1], true]", "{\"scale\": 2.0}", "float32", 2,
                 ys1);
    refused("mean with an unknown keyword", doc, "keyword argument 'scale' is not supported");
    free(doc);
    /* placement keywords and the fill's size are not values: lowered */
    doc = doc_of("float32", 2, xs, "", "", "aten.clone.default", "[{\"node\": \"x\"}]",
                 "{\"memory_format\": {\"memory_format\": \"contiguous_format\"}}", "float32", 2, xs);
    float x[12], got[24];
    for (int i = 0; i < 12; i++) x[i] = (float)i;
    run_both("clone with memory_format", doc, NULL, 2, xs, x, 12, got);
    for (int i = 0; i < 24; i++) assert_true(got[i] == x[i % 12]);
    free(doc);
    /* embedding's padding_idx / scale_grad_by_freq / sparse shape the gradient, not the rows: lowered
     * (OmniGen's token embedding, refused by name on the H200 zoo run) */
    const int64_t ws[2] = {5, 4}, es[2] = {3, 4};
    doc = doc_of("float32", 2, ws,
                 "  {\"name\": \"ids\", \"op\": \"placeholder\", \"target\": \"ids\", \"args\": [], \"kwargs\": {}, "
                 "\"val\": {\"shape\": [3], \"dtype\": \"int64\"}, \"module\": \"\"},\n",
                 "{\"node\": \"ids\", \"kind\": \"user_input\", \"target\": \"ids\", \"role\": \"other\"},\n",
                 "aten.embedding.default", "[{\"node\": \"x\"}, {\"node\": \"ids\"}, 0, false, false]", "{}", "float32", 2, es);
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *gr = NULL;
    drift_graph *sem = NULL;
    assert_int_equal(drift_aten_graph_parse(doc, strlen(doc), "embedding", &gr, &e), DRIFT_OK);
    if (drift_aten_graph_lower(gr, &sem, &e)) fail_msg("embedding with padding_idx: %s", e.msg);
    drift_graph_free(sem);
    drift_aten_graph_free(gr);
    free(doc);
    print_message("  unread arguments refused by name; placement keywords and embedding's gradient options accepted\n");
}

/* y = x.new_ones([2, 3]) + x: torch.Tensor.new_ones fills 1 in x's dtype. */
static void test_new_ones(void **st) {
    (void)st;
    enum { N = 6 };
    float x[N], got[2 * N];
    double want[N];
    for (int i = 0; i < N; i++) x[i] = 0.25f * (float)i - 0.5f, want[i] = 1.0 + x[i];
    const int64_t xs[2] = {2, 3};
    const char *ones = "  {\"name\": \"o\", \"op\": \"call_function\", \"target\": \"aten.new_ones.default\", "
                       "\"args\": [{\"node\": \"x\"}, [2, 3]], \"kwargs\": {\"pin_memory\": false}, "
                       "\"val\": {\"shape\": [2, 3], \"dtype\": \"float32\"}, \"module\": \"\"},\n";
    char *doc = doc_of("float32", 2, xs, "", "", "aten.add.Tensor", "[{\"node\": \"o\"}, {\"node\": \"x\"}]", "{}", "float32", 2, xs);
    /* o reads x: inserted after x's placeholder, before y */
    char *py = strstr(doc, "  {\"name\": \"y\"");
    const size_t nn = strlen(ones), head = (size_t)(py - doc);
    char *d2 = malloc(strlen(doc) + nn + 1);
    memcpy(d2, doc, head);
    memcpy(d2 + head, ones, nn);
    strcpy(d2 + head + nn, py);
    run_both("new_ones", d2, NULL, 2, xs, x, N, got);
    near("new_ones + x", got, want, N, 1e-6);
    free(doc);
    free(d2);
    print_message("  new_ones(x, size) fills ones on ref and cpu\n");
}

/* y = x @ w, x = 65530..65537 as [8, 1], w = [[1]], under a bf16 plan: in a region that disables
 * autocast the matmul is fp32 (exact), without one it rounds x to bf16 (65537 -> 65536). */
static void test_autocast_disabled_region(void **st) {
    (void)st;
    const int64_t xs[2] = {8, 1}, ws[2] = {1, 1};
    float x[8], w[1] = {1.0f}, got[16];
    for (int i = 0; i < 8; i++) x[i] = 65530.0f + (float)i;
    const char *pj = "  {\"name\": \"w\", \"op\": \"placeholder\", \"target\": \"w\", \"args\": [], \"kwargs\": {}, "
                     "\"val\": {\"shape\": [1, 1], \"dtype\": \"float32\"}, \"module\": \"\"},\n";
    const char *ij = "{\"node\": \"w\", \"kind\": \"parameter\", \"target\": \"m.w\"}, ";
    const char *cap = ", \"capture\": {\"mode\": \"fake\", \"autocast\": \"bfloat16\"}";
    for (int off = 1; off >= 0; off--) {
        char *doc = doc_ext("float32", 2, xs, pj, ij, "aten.matmul.default", "[{\"node\": \"x\"}, {\"node\": \"w\"}]", "{}",
                            "float32", 2, xs, off ? ", \"autocast\": {\"enabled\": false, \"dtype\": \"bfloat16\"}" : "",
                            cap);
        drift_err e;
        drift_hostset *ps = NULL;
        assert_int_equal(drift_hostset_create(&ps, &e), 0);
        assert_int_equal(drift_hostset_add(ps, "m.w", DRIFT_F32, 2, ws, w, NULL, NULL, &e), 0);
        run_plan(off ? "autocast off" : "autocast on", doc, ps, NULL, 2, xs, x, 8, got, 1);
        for (int k = off ? 0 : 1; k < 2; k++) { /* ref, the fp64 oracle, is exact either way */
            const float want7 = off ? 65537.0f : 65536.0f; /* fp32 exact, or x rounded to bf16 */
            if (got[k * 8 + 7] != want7)
                fail_msg("autocast %s on %s: y[7] = %.9g, want %.9g", off ? "off" : "on", k ? "cpu" : "ref", got[k * 8 + 7],
                         want7);
        }
        free(doc);
    }
    print_message("  a matmul in an autocast-disabled region is fp32 under a bf16 plan, bf16 without the region\n");
}

/* einsum("ij->ji", x) of x = 65530..65537 as [8, 1] under a bf16 capture: einsum is on
 * autocast's lower-precision list, so torch rounds x to bf16 even for a pure permutation
 * (y[7] = 65536; PRX's patchify); in an autocast-disabled region it is exact. */
static void test_einsum_permute_autocast(void **st) {
    (void)st;
    const int64_t xs[2] = {8, 1}, ys[2] = {1, 8};
    float x[8], got[16];
    for (int i = 0; i < 8; i++) x[i] = 65530.0f + (float)i;
    const char *cap = ", \"capture\": {\"mode\": \"fake\", \"autocast\": \"bfloat16\"}";
    for (int off = 1; off >= 0; off--) {
        char *doc = doc_ext("float32", 2, xs, "", "", "aten.einsum.default", "[\"ij->ji\", [{\"node\": \"x\"}]]", "{}",
                            "float32", 2, ys, off ? ", \"autocast\": {\"enabled\": false, \"dtype\": \"bfloat16\"}" : "",
                            cap);
        drift_err e;
        drift_hostset *ps = NULL;
        assert_int_equal(drift_hostset_create(&ps, &e), 0);
        run_plan(off ? "einsum autocast off" : "einsum autocast on", doc, ps, NULL, 2, xs, x, 8, got, 1);
        const float want7 = off ? 65537.0f : 65536.0f;
        if (got[8 + 7] != want7) fail_msg("einsum autocast %s on cpu: y[7] = %.9g, want %.9g", off ? "off" : "on", got[15], want7);
        free(doc);
    }
    print_message("  a one-operand einsum (a permutation) rounds its operand under bf16 autocast, not in a disabled region\n");
}

/* A whole hand-written document (nodes after the latents placeholder x [xs]) lowered
 * through drift_capture_model_create, so that its inline constants load as a replay loads
 * them; runs on ref then cpu under an fp32 plan, the n outputs of each into got (fp64). */
static char *model_doc(const char *nodes, const char *constants, int xnd, const int64_t *xs) {
    char xsh[96];
    fmt_shape(xsh, sizeof xsh, xnd, xs);
    char *doc = malloc(32768);
    snprintf(doc, 32768,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"Op\",\n"
             " \"nodes\": [\n"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": %s, \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "%s"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [%s{\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}], \"constants\": {%s}, \"non_tensor_inputs\": {}}\n",
             xsh, nodes, constants[0] ? "{\"node\": \"c\", \"kind\": \"constant\", \"target\": \"tab\"}, " : "", constants);
    return doc;
}

static void run_model(const char *name, const char *nodes, const char *constants, int xnd, const int64_t *xs,
                      const float *x, int64_t n, double *got) {
    char *doc = model_doc(nodes, constants, xnd, xs);
    drift_err e;
    drift_err_clear(&e);
    drift_model *m = NULL;
    if (drift_capture_model_create(doc, strlen(doc), name, &m, &e)) fail_msg("%s: %s: %s", name, e.where, e.msg);
    drift_hostset *is, *ps;
    drift_hostset_create(&is, &e);
    drift_hostset_create(&ps, &e);
    assert_int_equal(drift_hostset_add(is, "latents", DRIFT_F32, xnd, xs, x, NULL, NULL, &e), 0);
    const char *bes[2] = {"ref", "cpu"};
    for (int k = 0; k < 2; k++) {
        drift_exec_result r;
        test_run_fp32(m->sem, DRIFT_SIDE_TRAINER, bes[k], ps, m->buffers[DRIFT_BUF_RECORDED], is, NULL, NULL, &r);
        assert_int_equal(r.numel, n);
        for (int64_t i = 0; i < n; i++) got[k * n + i] = r.f64 ? r.f64[i] : r.f32[i];
        drift_exec_result_free(&r);
    }
    drift_hostset_free(is);
    drift_hostset_free(ps);
    drift_model_free(m);
    free(doc);
}

#define CALL(name, target, args, kwargs, shape, dtype)                                                                 \
    "  {\"name\": \"" name "\", \"op\": \"call_function\", \"target\": \"" target "\", \"args\": " args            \
    ", \"kwargs\": " kwargs ", \"val\": {\"shape\": " shape ", \"dtype\": \"" dtype "\"}, \"module\": \"m\", "         \
    "\"module_stack\": [\"m\"]},\n"

/* Lumina2's RoPE (diffusers Lumina2RotaryPosEmbed + apply_rotary_emb(use_real=False)): a
 * complex128 table built in fp64 (a lifted constant), unsqueezed, repeated over the batch and
 * gathered at int64 positions, copied into a complex128 zeros, multiplied with the complex64
 * view of x (complex128 product), view_as_real (fp64). The table's fp64 values are kept
 * (an fp32 copy changes the products' low bits), the product is (ac - bd, ad + bc) in fp64. */
static void test_complex128_rope(void **st) {
    (void)st;
    const double tab[6] = {1.0, 0.0, 0.5403023058681398, 0.8414709848078965, -0.4161468365471424, 0.9092974268256817};
    const char *consts = "\"tab\": {\"shape\": [3], \"dtype\": \"complex128\", \"data\": [1.0, 0.0, 0.5403023058681398, "
                         "0.8414709848078965, -0.4161468365471424, 0.9092974268256817]}";
    const char *nodes =
        "  {\"name\": \"c\", \"op\": \"placeholder\", \"target\": \"c\", \"args\": [], \"kwargs\": {}, "
        "\"val\": {\"shape\": [3], \"dtype\": \"complex128\"}, \"module\": \"\"},\n"
        CALL("t", "aten.to.dtype_layout", "[{\"node\": \"c\"}]", "{\"dtype\": {\"dtype\": \"complex128\"}, \"layout\": {\"layout\": \"strided\"}}", "[3]", "complex128")
        CALL("u", "aten.unsqueeze.default", "[{\"node\": \"t\"}, 0]", "{}", "[1, 3]", "complex128")
        CALL("r", "aten.repeat.default", "[{\"node\": \"u\"}, [2, 1]]", "{}", "[2, 3]", "complex128")
        CALL("a", "aten.arange.default", "[2]", "{\"dtype\": {\"dtype\": \"int64\"}}", "[2]", "int64")
        CALL("v", "aten.view.default", "[{\"node\": \"a\"}, [2, 1]]", "{}", "[2, 1]", "int64")
        CALL("i", "aten.add.Tensor", "[{\"node\": \"v\"}, 1]", "{}", "[2, 1]", "int64")
        CALL("g", "aten.gather.default", "[{\"node\": \"r\"}, 1, {\"node\": \"i\"}]", "{}", "[2, 1]", "complex128")
        CALL("gv", "aten.view.default", "[{\"node\": \"g\"}, [2]]", "{}", "[2]", "complex128")
        CALL("z", "aten.zeros.default", "[[2]]", "{\"dtype\": {\"dtype\": \"complex128\"}}", "[2]", "complex128")
        CALL("cz", "aten.copy_.default", "[{\"node\": \"z\"}, {\"node\": \"gv\"}]", "{}", "[2]", "complex128")
        CALL("xc", "aten.view_as_complex.default", "[{\"node\": \"x\"}]", "{}", "[2]", "complex64")
        CALL("m", "aten.mul.Tensor", "[{\"node\": \"xc\"}, {\"node\": \"z\"}]", "{}", "[2]", "complex128")
        CALL("y", "aten.view_as_real.default", "[{\"node\": \"m\"}]", "{}", "[2, 2]", "float64");
    const int64_t xs[2] = {2, 2};
    const float x[4] = {0.3f, -1.7f, 2.1f, 0.9f};
    double got[8], want[4];
    for (int i = 0; i < 2; i++) { /* row i takes the table's entry i + 1 */
        const double a = x[2 * i], b = x[2 * i + 1], cr = tab[2 * (i + 1)], ci = tab[2 * (i + 1) + 1];
        want[2 * i] = a * cr - b * ci;
        want[2 * i + 1] = a * ci + b * cr;
    }
    run_model("complex128 rope", nodes, consts, 2, xs, x, 4, got);
    exact_both("complex128 rope", got, want, 4);
    print_message("  a complex128 table: fp64 pairs kept through repeat, gather, copy_ and the product, bitwise\n");
}

/* A float64 lifted constant (a table the model code builds in fp64) times fp32 x: torch promotes
 * to fp64, and the constant's fp64 values are used (0.1 and 0.3 are not fp32 numbers). */
static void test_float64_constant(void **st) {
    (void)st;
    const char *consts = "\"tab\": {\"shape\": [2], \"dtype\": \"float64\", \"data\": [0.1, 0.3]}";
    const char *nodes =
        "  {\"name\": \"c\", \"op\": \"placeholder\", \"target\": \"c\", \"args\": [], \"kwargs\": {}, "
        "\"val\": {\"shape\": [2], \"dtype\": \"float64\"}, \"module\": \"\"},\n"
        CALL("y", "aten.mul.Tensor", "[{\"node\": \"x\"}, {\"node\": \"c\"}]", "{}", "[2]", "float64");
    const int64_t xs[1] = {2};
    const float x[2] = {1.7f, -2.9f};
    double got[4];
    run_model("float64 constant", nodes, consts, 1, xs, x, 2, got);
    const double want[2] = {(double)x[0] * 0.1, (double)x[1] * 0.3};
    exact_both("float64 constant", got, want, 2);
    print_message("  a float64 constant keeps its fp64 values and promotes the product to fp64\n");
}

/* In-place fills into views of a clone (Lumina2's position ids: `ids[i, L:, 0] = L` is
 * fill_.Tensor with a 0-d tensor): c = x.clone(); c[1].fill_(7); c[0].fill_(x[0, 2]); y = 2c.
 * Both writes reach y: an in-place op of an overload other than .default is live. */
static void test_fill_into_views(void **st) {
    (void)st;
    const char *nodes =
        CALL("c", "aten.clone.default", "[{\"node\": \"x\"}]", "{}", "[2, 3]", "float32")
        CALL("s1", "aten.select.int", "[{\"node\": \"c\"}, 0, 1]", "{}", "[3]", "float32")
        CALL("f1", "aten.fill_.Scalar", "[{\"node\": \"s1\"}, 7.0]", "{}", "[3]", "float32")
        CALL("e", "aten.select.int", "[{\"node\": \"x\"}, 0, 0]", "{}", "[3]", "float32")
        CALL("e0", "aten.select.int", "[{\"node\": \"e\"}, 0, 2]", "{}", "[]", "float32")
        CALL("s0", "aten.select.int", "[{\"node\": \"c\"}, 0, 0]", "{}", "[3]", "float32")
        CALL("f0", "aten.fill_.Tensor", "[{\"node\": \"s0\"}, {\"node\": \"e0\"}]", "{}", "[3]", "float32")
        CALL("y", "aten.mul.Tensor", "[{\"node\": \"c\"}, 2.0]", "{}", "[2, 3]", "float32");
    const int64_t xs[2] = {2, 3};
    const float x[6] = {0.5f, -1.25f, 3.0f, 4.0f, 5.0f, 6.0f};
    const double want[6] = {6.0, 6.0, 6.0, 14.0, 14.0, 14.0};
    double got[12];
    run_model("fill_ into views", nodes, "", 2, xs, x, 6, got);
    exact_both("fill_", got, want, 6);
    print_message("  fill_.Scalar and fill_.Tensor into views of a clone reach the output\n");
}

/* topk / sort as an MoE gate uses them: y = values + 1000 * indices of topk(x, 3) (largest,
 * ties in torch's CUDA topk order: row 0's two 3s come out index 2 first, kernels/topk_order.h),
 * of sort(x) ascending (stable) and of the smallest along dim 0;
 * k or dim out of range is refused naming it. */
static void topk_doc(char *doc, size_t cap, const char *op, const char *args, const char *ks) {
    char nodes[4096];
    snprintf(nodes, sizeof nodes,
             "  {\"name\": \"t\", \"op\": \"call_function\", \"target\": \"%s\", \"args\": %s, \"kwargs\": {}, "
             "\"val\": [{\"shape\": %s, \"dtype\": \"float32\"}, {\"shape\": %s, \"dtype\": \"int64\"}], \"module\": \"m\"},\n"
             CALL("v", "getitem", "[{\"node\": \"t\"}, 0]", "{}", "%s", "float32")
             CALL("i", "getitem", "[{\"node\": \"t\"}, 1]", "{}", "%s", "int64")
             CALL("fi", "aten.to.dtype", "[{\"node\": \"i\"}, {\"dtype\": \"float32\"}]", "{}", "%s", "float32")
             CALL("s", "aten.mul.Tensor", "[{\"node\": \"fi\"}, 1000.0]", "{}", "%s", "float32")
             CALL("y", "aten.add.Tensor", "[{\"node\": \"v\"}, {\"node\": \"s\"}]", "{}", "%s", "float32"),
             op, args, ks, ks, ks, ks, ks, ks, ks);
    snprintf(doc, cap, "%s", nodes);
}

static void test_topk_sort(void **st) {
    (void)st;
    const int64_t xs[2] = {2, 5};
    const float x[10] = {1.0f, 3.0f, 3.0f, -2.0f, 0.5f, -1.0f, -5.0f, 2.0f, 7.0f, 0.0f};
    const double want_topk[6] = {3 + 2000, 3 + 1000, 1 + 0, 7 + 3000, 2 + 2000, 0 + 4000};
    const double want_sort[10] = {-2 + 3000, 0.5 + 4000, 1, 3 + 1000, 3 + 2000, -5 + 1000, -1, 0 + 4000, 2 + 2000, 7 + 3000};
    char nodes[4096];
    double got[20];
    topk_doc(nodes, sizeof nodes, "aten.topk.default", "[{\"node\": \"x\"}, 3]", "[2, 3]");
    run_model("topk", nodes, "", 2, xs, x, 6, got);
    exact_both("topk", got, want_topk, 6);
    topk_doc(nodes, sizeof nodes, "aten.sort.default", "[{\"node\": \"x\"}]", "[2, 5]");
    run_model("sort", nodes, "", 2, xs, x, 10, got);
    exact_both("sort", got, want_sort, 10);
    /* the smallest along dim 0 (largest=False, sorted=False) */
    topk_doc(nodes, sizeof nodes, "aten.topk.default", "[{\"node\": \"x\"}, 1, 0, false, false]", "[1, 5]");
    run_model("topk dim 0", nodes, "", 2, xs, x, 5, got);
    const double want_min[5] = {-1 + 1000, -5 + 1000, 2 + 1000, -2, 0 + 1000};
    exact_both("topk dim 0 smallest", got, want_min, 5);
    /* hostile: k past the dim, a dim past the rank */
    const struct { const char *args; const char *want; } bad[] = {
        {"[{\"node\": \"x\"}, 6]", "k = 6 is out of range for dim 1 of size 5"},
        {"[{\"node\": \"x\"}, 0]", "k = 0 is out of range"},
        {"[{\"node\": \"x\"}, 3, 2]", "dim 2 is out of range for a 2-d tensor"},
        {"[{\"node\": \"x\"}, 3.5]", "k: expected an integer"},
    };
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        topk_doc(nodes, sizeof nodes, "aten.topk.default", bad[b].args, "[2, 3]");
        char *doc = model_doc(nodes, "", 2, xs);
        refused("topk hostile", doc, bad[b].want);
        free(doc);
    }
    print_message("  topk (largest, ties in torch's CUDA order) and sort on ref and cpu; bad k and dim refused\n");
}

/* Lowers nodes (model_doc) and runs them on cpu under an fp32 plan: the run must fail
 * with a message holding want (a replayed step the specialised graph does not fit). */
static void run_fails(const char *name, const char *nodes, int xnd, const int64_t *xs, const float *x, const char *want) {
    char *doc = model_doc(nodes, "", xnd, xs);
    drift_err e;
    drift_err_clear(&e);
    drift_model *m = NULL;
    if (drift_capture_model_create(doc, strlen(doc), name, &m, &e)) fail_msg("%s: %s: %s", name, e.where, e.msg);
    drift_hostset *is, *ps;
    drift_hostset_create(&is, &e);
    drift_hostset_create(&ps, &e);
    assert_int_equal(drift_hostset_add(is, "latents", DRIFT_F32, xnd, xs, x, NULL, NULL, &e), 0);
    drift_plan plan;
    drift_plan_init(&plan);
    plan.diffusion_forward_dtype = DRIFT_F32;
    drift_assign_opts o;
    drift_assign_opts_init(&o);
    drift_graph *as = NULL;
    if (drift_assign_dtypes(m->sem, &plan, NULL, NULL, &o, &as, &e)) fail_msg("assign: %s", e.msg);
    drift_backend *be = NULL;
    if (drift_backend_create("cpu", &be, &e)) fail_msg("backend: %s", e.msg);
    drift_exec_inputs in = {.params = ps, .buffers = m->buffers[DRIFT_BUF_RECORDED], .inputs = is};
    drift_exec_result r;
    memset(&r, 0, sizeof r);
    drift_err_clear(&e);
    if (drift_exec_run(as, be, &in, &r, &e) == DRIFT_OK) fail_msg("%s: ran, want refused (%s)", name, want);
    if (!strstr(e.msg, want)) fail_msg("%s: message '%s' lacks '%s'", name, e.msg, want);
    drift_exec_result_free(&r);
    drift_backend_free(be);
    drift_graph_free(as);
    drift_plan_free(&plan);
    drift_hostset_free(is);
    drift_hostset_free(ps);
    drift_model_free(m);
    free(doc);
}

/* HiDream's MoE combine, `cache.scatter_reduce_(0, idx.repeat(1, D), out, reduce="sum")`, and
 * the other modes: y = scatter_reduce(x, 0, idx, src=2x[:2], mode, include_self) with
 * idx = [[1, 1, 1], [1, 1, 1]] (both source rows into row 1); the nonzero_numpy columns of
 * (x > 0) at the recorded count; an unknown mode is refused naming it. */
static void test_scatter_reduce_nonzero(void **st) {
    (void)st;
    const int64_t xs[2] = {3, 3};
    const float x[9] = {1, -2, 3, 4, 5, -6, 0.5f, 0, 8};
    char nodes[4096];
    double got[18];
    static const char *const modes[5] = {"sum", "prod", "mean", "amax", "amin"};
    /* src shifted so that self and the identity matter: below self for amax, above it for amin */
    static const double off[5] = {0.0, 0.0, 0.0, -20.0, 20.0};
    for (int md = 0; md < 5; md++)
        for (int self = 1; self >= 0; self--) {
            snprintf(nodes, sizeof nodes,
                     CALL("o", "aten.ones.default", "[[2, 3]]", "{\"dtype\": {\"dtype\": \"int64\"}}", "[2, 3]", "int64")
                     CALL("s2", "aten.slice.Tensor", "[{\"node\": \"x\"}, 0, 0, 2]", "{}", "[2, 3]", "float32")
                     CALL("m2", "aten.mul.Tensor", "[{\"node\": \"s2\"}, 2.0]", "{}", "[2, 3]", "float32")
                     CALL("src", "aten.add.Tensor", "[{\"node\": \"m2\"}, %g]", "{}", "[2, 3]", "float32")
                     CALL("y", "aten.scatter_reduce.two", "[{\"node\": \"x\"}, 0, {\"node\": \"o\"}, {\"node\": \"src\"}, \"%s\"]",
                          "{\"include_self\": %s}", "[3, 3]", "float32"),
                     off[md], modes[md], self ? "true" : "false");
            run_model("scatter_reduce", nodes, "", 2, xs, x, 9, got);
            for (int k = 0; k < 2; k++)
                for (int i = 0; i < 9; i++) {
                    const int r = i / 3, col = i % 3;
                    const double a = 2.0 * x[col] + off[md], b = 2.0 * x[3 + col] + off[md], sv = x[i];
                    double want = x[i];
                    if (r == 1) {
                        switch (md) {
                        case 0: want = (self ? sv : 0.0) + a + b; break;
                        case 1: want = (self ? sv : 1.0) * a * b; break;
                        case 2: want = self ? (sv + a + b) / 3.0 : (a + b) / 2.0; break;
                        case 3: want = fmax(self ? sv : -INFINITY, fmax(a, b)); break;
                        default: want = fmin(self ? sv : INFINITY, fmin(a, b)); break;
                        }
                    }
                    if (fabs(got[k * 9 + i] - want) > 1e-6 * fabs(want))
                        fail_msg("scatter_reduce %s include_self=%d on %s: y[%d] = %g, want %g", modes[md], self,
                                 k ? "cpu" : "ref", i, got[k * 9 + i], want);
                }
        }
    /* nonzero_numpy(x > 0): 6 positives; y = 10 * rows + cols */
    snprintf(nodes, sizeof nodes,
             CALL("p", "aten.gt.Scalar", "[{\"node\": \"x\"}, 0.0]", "{}", "[3, 3]", "bool")
             "  {\"name\": \"nz\", \"op\": \"call_function\", \"target\": \"aten.nonzero_numpy.default\", \"args\": [{\"node\": \"p\"}], \"kwargs\": {}, "
             "\"val\": [{\"shape\": [6], \"dtype\": \"int64\"}, {\"shape\": [6], \"dtype\": \"int64\"}], \"module\": \"m\"},\n"
             CALL("r", "getitem", "[{\"node\": \"nz\"}, 0]", "{}", "[6]", "int64")
             CALL("cc", "getitem", "[{\"node\": \"nz\"}, 1]", "{}", "[6]", "int64")
             CALL("r10", "aten.mul.Tensor", "[{\"node\": \"r\"}, 10]", "{}", "[6]", "int64")
             CALL("s", "aten.add.Tensor", "[{\"node\": \"r10\"}, {\"node\": \"cc\"}]", "{}", "[6]", "int64")
             CALL("y", "aten.to.dtype", "[{\"node\": \"s\"}, {\"dtype\": \"float32\"}]", "{}", "[6]", "float32"));
    run_model("nonzero_numpy", nodes, "", 2, xs, x, 6, got);
    const double want_nz[6] = {0, 2, 10, 11, 20, 22};
    exact_both("nonzero_numpy", got, want_nz, 6);
    /* a step whose mask selects another count than the recorded 6 stops, naming both */
    const float x5[9] = {1, -2, 3, 4, 5, -6, 0.5f, 0, -8};
    run_fails("nonzero_numpy count", nodes, 2, xs, x5, "5 non-zero elements where the recording had 6");
    snprintf(nodes, sizeof nodes,
             CALL("o", "aten.ones.default", "[[2, 3]]", "{\"dtype\": {\"dtype\": \"int64\"}}", "[2, 3]", "int64")
             CALL("y", "aten.scatter_reduce.two", "[{\"node\": \"x\"}, 0, {\"node\": \"o\"}, {\"node\": \"x\"}, \"median\"]", "{}", "[3, 3]", "float32"));
    char *doc = model_doc(nodes, "", 2, xs);
    refused("scatter_reduce median", doc, "reduce: 'median' is not a scatter_reduce mode");
    free(doc);
    print_message("  scatter_reduce sum, prod, mean, amax, amin (include_self both ways), nonzero_numpy columns; an unknown mode refused\n");
}

/* The plain-PyTorch MoE of tests/gpu/plain_dits.py (MoEFFN) as a dispatch trace records it:
 * softmax gate, topk(2), per expert `rows = (idx == e).any(-1).nonzero(as_tuple=True)[0]`
 * (nonzero_numpy at the recorded count), `flat[rows]`, `(w * sel).sum(-1)[rows]` and
 * `out.index_add_(0, rows, expert(flat[rows]) * we[:, None])`; expert e is x * (e + 1). */
static void test_moe_dispatch(void **st) {
    (void)st;
    const int64_t xs[2] = {4, 3};
    const float x[12] = {2, 1, 0, 0, 3, 1, 1, 0, 2, 5, 4, -1}; /* top-2 experts: {0,1} {1,2} {2,0} {0,1} */
    static const int cnt[3] = {3, 3, 2};
    char *nodes = malloc(32768);
    size_t k = (size_t)snprintf(nodes, 32768, "%s",
        CALL("p", "aten._softmax.default", "[{\"node\": \"x\"}, -1, false]", "{}", "[4, 3]", "float32")
        "  {\"name\": \"t\", \"op\": \"call_function\", \"target\": \"aten.topk.default\", \"args\": [{\"node\": \"p\"}, 2], \"kwargs\": {}, "
        "\"val\": [{\"shape\": [4, 2], \"dtype\": \"float32\"}, {\"shape\": [4, 2], \"dtype\": \"int64\"}], \"module\": \"m\"},\n"
        CALL("w", "getitem", "[{\"node\": \"t\"}, 0]", "{}", "[4, 2]", "float32")
        CALL("idx", "getitem", "[{\"node\": \"t\"}, 1]", "{}", "[4, 2]", "int64")
        CALL("ws", "aten.sum.dim_IntList", "[{\"node\": \"w\"}, [-1], true]", "{}", "[4, 1]", "float32")
        CALL("wn", "aten.div.Tensor", "[{\"node\": \"w\"}, {\"node\": \"ws\"}]", "{}", "[4, 2]", "float32")
        CALL("out", "aten.zeros_like.default", "[{\"node\": \"x\"}]", "{}", "[4, 3]", "float32"));
    for (int e = 0; e < 3; e++) {
        char prev[16];
        snprintf(prev, sizeof prev, e ? "ia%d" : "out", e - 1);
        k += (size_t)snprintf(nodes + k, 32768 - k,
            "  {\"name\": \"sel%d\", \"op\": \"call_function\", \"target\": \"aten.eq.Scalar\", \"args\": [{\"node\": \"idx\"}, %d], \"kwargs\": {}, \"val\": {\"shape\": [4, 2], \"dtype\": \"bool\"}, \"module\": \"m\"},\n"
            "  {\"name\": \"any%d\", \"op\": \"call_function\", \"target\": \"aten.any.dim\", \"args\": [{\"node\": \"sel%d\"}, -1], \"kwargs\": {}, \"val\": {\"shape\": [4], \"dtype\": \"bool\"}, \"module\": \"m\"},\n"
            "  {\"name\": \"nz%d\", \"op\": \"call_function\", \"target\": \"aten.nonzero_numpy.default\", \"args\": [{\"node\": \"any%d\"}], \"kwargs\": {}, \"val\": [{\"shape\": [%d], \"dtype\": \"int64\"}], \"module\": \"m\"},\n"
            "  {\"name\": \"rows%d\", \"op\": \"call_function\", \"target\": \"getitem\", \"args\": [{\"node\": \"nz%d\"}, 0], \"kwargs\": {}, \"val\": {\"shape\": [%d], \"dtype\": \"int64\"}, \"module\": \"m\"},\n"
            "  {\"name\": \"sf%d\", \"op\": \"call_function\", \"target\": \"aten._to_copy.default\", \"args\": [{\"node\": \"sel%d\"}], \"kwargs\": {\"dtype\": {\"dtype\": \"float32\"}}, \"val\": {\"shape\": [4, 2], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
            "  {\"name\": \"m%d\", \"op\": \"call_function\", \"target\": \"aten.mul.Tensor\", \"args\": [{\"node\": \"wn\"}, {\"node\": \"sf%d\"}], \"kwargs\": {}, \"val\": {\"shape\": [4, 2], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
            "  {\"name\": \"s%d\", \"op\": \"call_function\", \"target\": \"aten.sum.dim_IntList\", \"args\": [{\"node\": \"m%d\"}, [-1]], \"kwargs\": {}, \"val\": {\"shape\": [4], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
            "  {\"name\": \"we%d\", \"op\": \"call_function\", \"target\": \"aten.index.Tensor\", \"args\": [{\"node\": \"s%d\"}, [{\"node\": \"rows%d\"}]], \"kwargs\": {}, \"val\": {\"shape\": [%d], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
            "  {\"name\": \"xr%d\", \"op\": \"call_function\", \"target\": \"aten.index.Tensor\", \"args\": [{\"node\": \"x\"}, [{\"node\": \"rows%d\"}]], \"kwargs\": {}, \"val\": {\"shape\": [%d, 3], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
            "  {\"name\": \"ex%d\", \"op\": \"call_function\", \"target\": \"aten.mul.Tensor\", \"args\": [{\"node\": \"xr%d\"}, %d.0], \"kwargs\": {}, \"val\": {\"shape\": [%d, 3], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
            "  {\"name\": \"wu%d\", \"op\": \"call_function\", \"target\": \"aten.unsqueeze.default\", \"args\": [{\"node\": \"we%d\"}, 1], \"kwargs\": {}, \"val\": {\"shape\": [%d, 1], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
            "  {\"name\": \"o%d\", \"op\": \"call_function\", \"target\": \"aten.mul.Tensor\", \"args\": [{\"node\": \"ex%d\"}, {\"node\": \"wu%d\"}], \"kwargs\": {}, \"val\": {\"shape\": [%d, 3], \"dtype\": \"float32\"}, \"module\": \"m\"},\n"
            "  {\"name\": \"ia%d\", \"op\": \"call_function\", \"target\": \"aten.index_add_.default\", \"args\": [{\"node\": \"%s\"}, 0, {\"node\": \"rows%d\"}, {\"node\": \"o%d\"}], \"kwargs\": {}, \"val\": {\"shape\": [4, 3], \"dtype\": \"float32\"}, \"module\": \"m\"},\n",
            e, e, e, e, e, e, cnt[e], e, e, cnt[e], e, e, e, e, e, e, e, e, e, cnt[e], e, e, cnt[e], e, e, e + 1, cnt[e], e, e,
            cnt[e], e, e, e, cnt[e], e, prev, e, e);
    }
    snprintf(nodes + k, 32768 - k, CALL("y", "aten.mul.Tensor", "[{\"node\": \"ia2\"}, 1.0]", "{}", "[4, 3]", "float32"));
    double want[12] = {0}, got[24];
    for (int r = 0; r < 4; r++) { /* softmax, top 2 normalised, sum of w_e * (e + 1) * x */
        double p[3], z = 0;
        for (int j = 0; j < 3; j++) z += p[j] = exp(x[3 * r + j]);
        int a = 0;
        for (int j = 1; j < 3; j++) a = p[j] > p[a] ? j : a;
        int b = a ? 0 : 1;
        for (int j = 0; j < 3; j++) b = j != a && p[j] > p[b] ? j : b;
        const double wa = p[a] / (p[a] + p[b]), wb = p[b] / (p[a] + p[b]);
        for (int j = 0; j < 3; j++) want[3 * r + j] = (wa * (a + 1) + wb * (b + 1)) * x[3 * r + j];
    }
    run_model("moe", nodes, "", 2, xs, x, 12, got);
    float gf[24];
    for (int i = 0; i < 24; i++) gf[i] = (float)got[i];
    near("moe combine", gf, want, 12, 1e-6);
    free(nodes);
    print_message("  a dispatch-traced top-2 MoE (topk, nonzero_numpy, index, index_add_) on ref and cpu\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rms_norm_eps_none),
        cmocka_unit_test(test_autocast_region_fp32),
        cmocka_unit_test(test_sdpa_expanded_key_mask),
        cmocka_unit_test(test_sdpa_query_mask),
        cmocka_unit_test(test_sdpa_mask_head_dim_not_8),
        cmocka_unit_test(test_linear_noncontiguous_input),
        cmocka_unit_test(test_autocast_fp64_operands),
        cmocka_unit_test(test_unread_arguments),
        cmocka_unit_test(test_new_ones),
        cmocka_unit_test(test_autocast_disabled_region),
        cmocka_unit_test(test_einsum_permute_autocast),
        cmocka_unit_test(test_complex128_rope),
        cmocka_unit_test(test_float64_constant),
        cmocka_unit_test(test_fill_into_views),
        cmocka_unit_test(test_topk_sort),
        cmocka_unit_test(test_scatter_reduce_nonzero),
        cmocka_unit_test(test_moe_dispatch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
