/* Captured graphs (replay/capture): the real torch.export graphs of
 * tests/data/graphs (made on the GPU machine by the recorder's capture with
 * seeded weights) replay on the cpu and ref backends against the torch fp32
 * output stored beside them; hostile documents fail with DRIFT_E_INPUT naming
 * the node; the autocast table matches docs/autocast.md; copy_ into strided
 * views (diffusers' RoPE) has PyTorch's aliasing semantics. */
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
#include "formats/safetensors.h"
#include "kernels/backend.h"
#include "replay/ir/assign.h"
#include "replay/capture/aten_graph.h"
#include "replay/exec/exec.h"

#include "tests/fp32_run.h"
#include "tests/slurp.h"
#include "tests/site_recording.h"


static const char *testdata(void) {
    const char *d = getenv("DRIFT_TESTDATA");
    return d ? d : "tests/data";
}

/* ---- fixtures ------------------------------------------------------------------ */

typedef struct fixture {
    drift_aten_graph *doc;
    drift_graph *sem;
    drift_hostset *params, *buffers, *inputs;
    float *torch_out;
    int64_t out_numel;
} fixture;

/* Loads tests/data/graphs/MODEL.{json,safetensors}; 0 when absent (skips). */
static int load_fixture(const char *model, fixture *fx) {
    memset(fx, 0, sizeof *fx);
    char path[1024];
    size_t len;
    snprintf(path, sizeof path, "%s/graphs/%s.json", testdata(), model);
    char *text = test_slurp(path, &len);
    if (!text) return 0;
    drift_err e;
    drift_err_clear(&e);
    if (drift_aten_graph_parse(text, len, path, &fx->doc, &e)) fail_msg("%s: %s: %s", model, e.where, e.msg);
    free(text);
    if (drift_aten_graph_lower(fx->doc, &fx->sem, &e)) fail_msg("%s: lower: %s: %s", model, e.where, e.msg);
    snprintf(path, sizeof path, "%s/graphs/%s.safetensors", testdata(), model);
    drift_safetensors *st = NULL;
    if (drift_safetensors_open(&st, path, 0, &e)) fail_msg("%s: %s", path, e.msg);
    assert_int_equal(drift_hostset_create(&fx->params, &e), DRIFT_OK);
    assert_int_equal(drift_hostset_create(&fx->buffers, &e), DRIFT_OK);
    assert_int_equal(drift_hostset_create(&fx->inputs, &e), DRIFT_OK);
    for (size_t i = 0; i < drift_safetensors_n_tensors(st); i++) {
        drift_safetensors_info inf;
        assert_int_equal(drift_safetensors_tensor(st, i, &inf, &e), DRIFT_OK);
        float *v = malloc((size_t)inf.numel * sizeof(float));
        assert_int_equal(drift_safetensors_read_f32(st, i, v, (size_t)inf.numel, &e), DRIFT_OK);
        const char *nm = inf.name;
        int64_t sh[DRIFT_MAX_DIMS];
        int nd = inf.ndim;
        memcpy(sh, inf.shape, sizeof sh);
        if (nd == 0) { /* a scalar: graph leaves of 0 dims are given one element */
            nd = 0;
        }
        int rc = DRIFT_OK;
        if (!strcmp(nm, "output:noise_pred")) {
            fx->torch_out = v;
            fx->out_numel = inf.numel;
            continue;
        } else if (!strncmp(nm, "buffer:", 7)) {
            rc = drift_hostset_add(fx->buffers, nm + 7, DRIFT_F32, nd, sh, v, NULL, NULL, &e);
        } else if (!strncmp(nm, "constant:", 9)) {
            rc = drift_hostset_add(fx->buffers, nm, DRIFT_F32, nd, sh, v, NULL, NULL, &e);
        } else if (!strncmp(nm, "input:", 6)) {
            const char *role = NULL;
            for (int k = 0; k < drift_aten_graph_input_count(fx->doc); k++) {
                const drift_aten_input *in = drift_aten_graph_input(fx->doc, k);
                if (in->kind == DRIFT_ATEN_IN_USER && !strcmp(in->target, nm + 6)) role = in->role;
            }
            if (role && strcmp(role, "other"))
                rc = drift_hostset_add(fx->inputs, role, DRIFT_F32, nd, sh, v, NULL, NULL, &e);
            else
                rc = drift_hostset_add(fx->buffers, nm, DRIFT_F32, nd, sh, v, NULL, NULL, &e);
        } else {
            rc = drift_hostset_add(fx->params, nm, DRIFT_F32, nd, sh, v, NULL, NULL, &e);
        }
        if (rc) fail_msg("%s: tensor %s: %s", model, nm, e.msg);
        free(v);
    }
    drift_safetensors_close(st);
    assert_non_null(fx->torch_out);
    return 1;
}

static void free_fixture(fixture *fx) {
    drift_aten_graph_free(fx->doc);
    drift_graph_free(fx->sem);
    drift_hostset_free(fx->params);
    drift_hostset_free(fx->buffers);
    drift_hostset_free(fx->inputs);
    free(fx->torch_out);
}

/* Runs the fixture on backend be_name under a plan with forward dtype fwd
 * (fp32: no autocast, as the torch reference was made) or the oracle. */
static float *run(const fixture *fx, const char *be_name, drift_side side, drift_dtype fwd, int64_t *n) {
    drift_err e;
    drift_err_clear(&e);
    drift_plan plan;
    drift_plan_init(&plan);
    plan.diffusion_forward_dtype = plan.sglang_dit_precision = fwd;
    for (int k = 0; k < DRIFT_INPUT_COUNT; k++) plan.inputs[k].kind = DRIFT_INPUT_DEFAULT;
    drift_assign_opts o;
    drift_assign_opts_init(&o);
    o.side = side;
    drift_graph *as = NULL;
    if (drift_assign_dtypes(fx->sem, &plan, NULL, NULL, &o, &as, &e)) fail_msg("assign: %s: %s", e.where, e.msg);
    drift_backend *be = NULL;
    assert_int_equal(drift_backend_create(be_name, &be, &e), DRIFT_OK);
    drift_exec_inputs in;
    memset(&in, 0, sizeof in);
    in.params = fx->params;
    in.buffers = fx->buffers;
    in.inputs = fx->inputs;
    drift_exec_result r;
    memset(&r, 0, sizeof r);
    if (drift_exec_run(as, be, &in, &r, &e)) fail_msg("exec on %s: %s: %s", be_name, e.where, e.msg);
    float *y = malloc((size_t)r.numel * sizeof(float));
    memcpy(y, r.f32, (size_t)r.numel * sizeof(float));
    *n = r.numel;
    drift_exec_result_free(&r);
    drift_backend_free(be);
    drift_graph_free(as);
    drift_plan_free(&plan);
    return y;
}

/* Relative L2 error and max |diff| of y against the torch output. */
static void compare(const char *what, const float *y, const float *t, int64_t n, double tol_rel) {
    double num = 0, den = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)y[i] - t[i];
        if (!isfinite(y[i])) fail_msg("%s: non-finite output at %lld", what, (long long)i);
        num += d * d;
        den += (double)t[i] * t[i];
        if (fabs(d) > mx) mx = fabs(d);
    }
    double rel = sqrt(num / (den > 0 ? den : 1));
    print_message("  %-28s rel L2 %.3e  max |diff| %.3e  (%lld elements)\n", what, rel, mx, (long long)n);
    if (!(rel <= tol_rel)) fail_msg("%s: relative L2 error %.3e > %.1e", what, rel, tol_rel);
}

/* tol_oracle: how far torch's fp32 output may be from the fp64 truth (the
 * oracle); drift's own fp32 replay must agree with torch within 1e-5. */
static void replay_model_tol(const char *model, double tol_oracle) {
    fixture fx;
    if (!load_fixture(model, &fx)) {
        print_message("  %s: fixture absent, skipped\n", model);
        return;
    }
    int64_t n1 = 0, n2 = 0, n3 = 0;
    float *a = run(&fx, "cpu", DRIFT_SIDE_TRAINER, DRIFT_F32, &n1);
    float *b = run(&fx, "cpu", DRIFT_SIDE_TRAINER, DRIFT_F32, &n2);
    assert_int_equal(n1, fx.out_numel);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, (size_t)n1 * sizeof(float)); /* self-replay is bitwise */
    char what[96];
    snprintf(what, sizeof what, "%s cpu fp32 vs torch", model);
    compare(what, a, fx.torch_out, n1, 1e-5); /* fp32 tolerance: summation order only */
    float *o = run(&fx, "ref", DRIFT_SIDE_ORACLE, DRIFT_F32, &n3);
    snprintf(what, sizeof what, "%s ref fp64 vs torch", model);
    compare(what, o, fx.torch_out, n3, tol_oracle);
    /* bf16 autocast replay: runs, finite, and differs from fp32 (the plan is applied) */
    float *h = run(&fx, "cpu", DRIFT_SIDE_TRAINER, DRIFT_BF16, &n2);
    snprintf(what, sizeof what, "%s cpu bf16 vs torch fp32", model);
    compare(what, h, fx.torch_out, n2, 5e-2);
    assert_true(memcmp(h, a, (size_t)n1 * sizeof(float)) != 0);
    free(a);
    free(b);
    free(o);
    free(h);
    free_fixture(&fx);
}


/* ---- hostile documents ------------------------------------------------------------- */

static char *mini_doc(size_t *len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/graphs/mini_rope.json", testdata());
    char *t = test_slurp(path, len);
    if (!t) fail_msg("%s missing", path);
    return t;
}

/* Replaces the first occurrence of a by b in text (a new string). */
static char *edit(const char *text, const char *a, const char *b) {
    const char *p = strstr(text, a);
    if (!p) fail_msg("edit: '%s' not in the document", a);
    size_t n = strlen(text) - strlen(a) + strlen(b);
    char *o = malloc(n + 1);
    size_t k = (size_t)(p - text);
    memcpy(o, text, k);
    memcpy(o + k, b, strlen(b));
    strcpy(o + k + strlen(b), p + strlen(a));
    return o;
}

/* Parses and lowers text; expects DRIFT_E_INPUT with every needle in the message. */
static void expect_bad(const char *text, size_t len, const char *n1, const char *n2) {
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *g = NULL;
    drift_graph *sem = NULL;
    int rc = drift_aten_graph_parse(text, len, "hostile.json", &g, &e);
    if (rc == DRIFT_OK) {
        rc = drift_aten_graph_lower(g, &sem, &e);
        drift_aten_graph_free(g);
        drift_graph_free(sem);
    } else {
        assert_null(g);
    }
    if (rc != DRIFT_E_INPUT) fail_msg("expected DRIFT_E_INPUT, got %d (%s)", rc, e.msg);
    if ((n1 && !strstr(e.msg, n1)) || (n2 && !strstr(e.msg, n2)))
        fail_msg("message '%s: %s' lacks '%s' / '%s'", e.where, e.msg, n1 ? n1 : "", n2 ? n2 : "");
    print_message("  rejected: %s\n", e.msg);
}

static void test_hostile_graphs(void **s) {
    (void)s;
    size_t len;
    char *doc = mini_doc(&len);
    char *t;
    t = edit(doc, "aten.linear.default", "aten.frobnicate.default");
    expect_bad(t, strlen(t), "1 op drift cannot run", "aten.frobnicate.default x1 (first in 'proj', node linear)");
    free(t);
    t = edit(doc, "\"args\": [\n    {\n     \"node\": \"x\"", "\"args\": [\n    {\n     \"node\": \"layer_norm\"");
    expect_bad(t, strlen(t), "forward reference", "'linear'");
    free(t);
    t = edit(doc, "\"args\": [\n    {\n     \"node\": \"x\"", "\"args\": [\n    {\n     \"node\": \"linear\"");
    expect_bad(t, strlen(t), "a cycle or forward reference", "'linear'"); /* a node reading itself */
    free(t);
    t = edit(doc, "\"args\": [\n    {\n     \"node\": \"x\"", "\"args\": [\n    {\n     \"node\": \"nowhere\"");
    expect_bad(t, strlen(t), "dangling", "'nowhere'");
    free(t);
    {
        /* the linear's declared shape [1, 4, 8] becomes [1, 4, 9] */
        const char *p = strstr(doc, "\"name\": \"linear\"");
        assert_non_null(p);
        const char *q = strstr(p, "8\n    ],");
        assert_non_null(q);
        size_t k = (size_t)(q - doc);
        char *u = strdup(doc);
        u[k] = '9';
        expect_bad(u, strlen(u), "shape mismatch", "'linear'");
        free(u);
    }
    t = edit(doc, "\"op\": \"call_function\"", "\"op\": \"get_attr\"");
    expect_bad(t, strlen(t), "get_attr", NULL);
    free(t);
    {
        /* a higher-order op the capture could not inline (AnyFlowFAR's flex attention): its
           get_attr part and the call itself, both listed, with module and node */
        char path[1024];
        size_t fl;
        snprintf(path, sizeof path, "%s/graphs/flex_hop.json", testdata());
        char *f = test_slurp(path, &fl);
        if (!f) fail_msg("%s missing", path);
        expect_bad(f, fl, "2 ops drift cannot run", "get_attr 'sdpa_mask0' (a higher-order op's part) x1 (first in 'proj', node sdpa_mask0)");
        expect_bad(f, fl, "flex_attention x1 (first in 'proj', node linear)", NULL);
        free(f);
    }
    t = edit(doc, "\"drift-aten-graph\"", "\"drift-graph\"");
    expect_bad(t, strlen(t), "'format'", NULL);
    free(t);
    t = edit(doc, "\"name\": \"unflatten\"", "\"name\": \"linear\"");
    expect_bad(t, strlen(t), "duplicate node name", NULL);
    free(t);
    t = edit(doc, "-1,\n     2\n    ]", "-1,\n     3\n    ]");
    expect_bad(t, strlen(t), "unflatten", "'unflatten'");
    free(t);
    t = edit(doc, "\"kind\": \"parameter\"", "\"kind\": \"weights\"");
    expect_bad(t, strlen(t), "'kind'", NULL);
    free(t);
    expect_bad("{\"format\": \"drift-aten-graph\", \"version\": 1, \"nodes\": [", 52, NULL, NULL);
    expect_bad("[1, 2]", 6, "expected a JSON object", NULL);
    free(doc);
    /* too many nodes: 200001 small placeholders (within the JSON reader's limits) */
    {
        const int n = DRIFT_ATEN_MAX_NODES + 1;
        size_t cap = (size_t)n * 80 + 256, o = 0;
        char *big = malloc(cap);
        o += (size_t)snprintf(big + o, cap - o, "{\"format\": \"drift-aten-graph\", \"version\": 1, \"nodes\": [");
        for (int i = 0; i < n; i++)
            o += (size_t)snprintf(big + o, cap - o, "%s{\"name\":\"n%d\",\"op\":\"placeholder\",\"target\":\"t\",\"args\":[]}",
                                  i ? "," : "", i);
        o += (size_t)snprintf(big + o, cap - o, "], \"inputs\": []}");
        expect_bad(big, o, "more than 200000 nodes", "'n200000'");
        free(big);
    }
    /* 10^6 nodes: past the JSON reader's input limit, a clear error before any allocation per node */
    {
        const int n = 1000000;
        size_t cap = (size_t)n * 80 + 256, o = 0;
        char *big = malloc(cap);
        o += (size_t)snprintf(big + o, cap - o, "{\"format\": \"drift-aten-graph\", \"version\": 1, \"nodes\": [");
        for (int i = 0; i < n; i++)
            o += (size_t)snprintf(big + o, cap - o, "%s{\"name\":\"n%d\",\"op\":\"placeholder\",\"target\":\"t\",\"args\":[]}",
                                  i ? "," : "", i);
        o += (size_t)snprintf(big + o, cap - o, "], \"inputs\": []}");
        expect_bad(big, o, "limit", NULL);
        free(big);
    }
}

/* ---- copy_ into strided views (diffusers' RoPE) ---------------------------------------- */


static void test_copy_into_views(void **s) {
    (void)s;
    size_t len;
    char *doc = mini_doc(&len);
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *g = NULL;
    drift_graph *sem = NULL;
    assert_int_equal(drift_aten_graph_parse(doc, len, "mini_rope.json", &g, &e), DRIFT_OK);
    if (drift_aten_graph_lower(g, &sem, &e)) fail_msg("%s", e.msg);
    assert_true(drift_graph_find_site(sem, "rope:out") >= 0);
    assert_true(drift_graph_find_site(sem, "proj:out") >= 0);
    assert_true(drift_graph_find_site(sem, "output:noise_pred") >= 0);
    assert_true(drift_graph_find_site(sem, "input:latents:pre_cast") >= 0);
    float w[64], cosb[32], x[32];
    for (int i = 0; i < 64; i++) w[i] = (float)((i * 7) % 11 - 5) * 0.125f;
    for (int i = 0; i < 32; i++) cosb[i] = (float)(i % 5) * 0.25f - 0.5f, x[i] = (float)((i * 3) % 7) * 0.5f - 1.0f;
    drift_hostset *ps, *bs, *is;
    drift_hostset_create(&ps, &e);
    drift_hostset_create(&bs, &e);
    drift_hostset_create(&is, &e);
    assert_int_equal(drift_hostset_add(ps, "proj.weight", DRIFT_F32, 2, (int64_t[]){8, 8}, w, NULL, NULL, &e), 0);
    assert_int_equal(drift_hostset_add(bs, "rope.cos", DRIFT_F32, 2, (int64_t[]){4, 8}, cosb, NULL, NULL, &e), 0);
    assert_int_equal(drift_hostset_add(is, "latents", DRIFT_F32, 3, (int64_t[]){1, 4, 8}, x, NULL, NULL, &e), 0);
    grab gr = {"rope:out", NULL, 0};
    drift_exec_result r;
    test_run_fp32(sem, DRIFT_SIDE_TRAINER, "cpu", ps, bs, is, grab_site, &gr, &r);
    assert_int_equal(gr.n, 32);
    /* expected: lin = x W^T; out[..., 0::2] = lin[..., 0::2] * cos[:, 0::2] - lin[..., 1::2] * 0.5;
     * out[..., 1::2] = lin[..., 0::2] (the second copy_ writes the odd slots) */
    for (int l = 0; l < 4; l++) {
        float lin[8];
        for (int n = 0; n < 8; n++) {
            double acc = 0;
            for (int k = 0; k < 8; k++) acc += (double)x[l * 8 + k] * w[n * 8 + k];
            lin[n] = (float)acc; /* exact: small dyadic values */
        }
        for (int i = 0; i < 4; i++) {
            float a = lin[2 * i], b = lin[2 * i + 1];
            float p = a * cosb[l * 8 + 2 * i], q = b * 0.5f;
            float want0 = p - q, want1 = a;
            if (gr.v[l * 8 + 2 * i] != want0 || gr.v[l * 8 + 2 * i + 1] != want1)
                fail_msg("rope:out[%d, %d]: got (%g, %g), want (%g, %g)", l, i, gr.v[l * 8 + 2 * i],
                         gr.v[l * 8 + 2 * i + 1], want0, want1);
        }
    }
    free(gr.v);
    drift_exec_result_free(&r);
    drift_graph_free(sem);
    drift_aten_graph_free(g);
    drift_hostset_free(ps);
    drift_hostset_free(bs);
    drift_hostset_free(is);
    free(doc);
}

/* A complex64 full (ZImage's rotary table start): (value, 0) pairs, read back through
 * view_as_real (tests/data/graphs/mini_complex_fill.json: x + full(2.5 + 0j) as reals). */
static void test_complex_fill(void **s) {
    (void)s;
    char path[1024];
    size_t len;
    snprintf(path, sizeof path, "%s/graphs/mini_complex_fill.json", testdata());
    char *doc = test_slurp(path, &len);
    if (!doc) fail_msg("%s missing", path);
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *g = NULL;
    drift_graph *sem = NULL;
    if (drift_aten_graph_parse(doc, len, "mini_complex_fill.json", &g, &e) || drift_aten_graph_lower(g, &sem, &e))
        fail_msg("%s: %s", e.where, e.msg);
    float x[32];
    for (int i = 0; i < 32; i++) x[i] = (float)i * 0.25f;
    drift_hostset *ps, *bs, *is;
    drift_hostset_create(&ps, &e);
    drift_hostset_create(&bs, &e);
    drift_hostset_create(&is, &e);
    assert_int_equal(drift_hostset_add(is, "latents", DRIFT_F32, 3, (int64_t[]){1, 4, 8}, x, NULL, NULL, &e), 0);
    const char *bes[2] = {"ref", "cpu"};
    for (int b = 0; b < 2; b++) {
        drift_exec_result r;
        test_run_fp32(sem, DRIFT_SIDE_TRAINER, bes[b], ps, bs, is, NULL, NULL, &r);
        assert_int_equal(r.numel, 32);
        for (int i = 0; i < 32; i++) {
            const float want = x[i] + (i % 2 ? 0.0f : 2.5f);
            if (r.f32[i] != want) fail_msg("%s: out[%d] = %g, want %g", bes[b], i, r.f32[i], want);
        }
        drift_exec_result_free(&r);
    }
    drift_graph_free(sem);
    drift_aten_graph_free(g);
    drift_hostset_free(ps);
    drift_hostset_free(bs);
    drift_hostset_free(is);
    free(doc);
}

/* ---- the patch convolution sums K channels-last (issue 16) ----------------------------- */

enum { CV_C = 4, CV_F = 2, CV_H = 4, CV_W = 4, CV_O = 3, CV_KH = 2, CV_KW = 2, CV_K = CV_C * CV_KH * CV_KW,
       CV_HP = CV_H / CV_KH, CV_WP = CV_W / CV_KW, CV_L = CV_F * CV_HP * CV_WP, CV_NX = CV_C * CV_F * CV_H * CV_W };

/* s * m * 2^(e - mbits), m in 1..2^mbits - 1, e in [-emax, emax]: exact in fp32 for mbits
 * <= 24. Products of two are exact in fp64 (mbits 24) or, for mbits 4 and emax <= 12, in
 * fp32 (FMA or not), so that only the summation order rounds. */
static float wide_val(uint64_t *st, int emax, int mbits) {
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t r = *st >> 33, span = 2 * (uint64_t)emax + 1, mm = ((uint64_t)1 << mbits) - 1;
    const int64_t m = (int64_t)(r % mm) + 1;
    const int ex = (int)((r / mm) % span) - emax;
    return (float)ldexp((double)((r / (mm * span)) % 2 ? -m : m), ex - mbits);
}

/* Patch vector element kk of token t as the lowering must order it (cl: (kh, kw, c), the
 * K order of cuDNN's NHWC implicit GEMM) or as the Conv3d weight flattens (c, kh, kw). */
static int cv_x_index(int t, int kk, int cl) {
    const int f = t / (CV_HP * CV_WP), h0 = (t / CV_WP) % CV_HP * CV_KH, w0 = t % CV_WP * CV_KW;
    const int c = cl ? kk % CV_C : kk / (CV_KH * CV_KW), jk = cl ? kk / CV_C : kk % (CV_KH * CV_KW);
    return ((c * CV_F + f) * CV_H + h0 + jk / CV_KW) * CV_W + w0 + jk % CV_KW;
}
static int cv_w_index(int oc, int kk, int cl) {
    const int c = cl ? kk % CV_C : kk / (CV_KH * CV_KW), jk = cl ? kk / CV_C : kk % (CV_KH * CV_KW);
    return (oc * CV_C + c) * CV_KH * CV_KW + jk;
}

/* tests/data/graphs/mini_conv3d.json (aten.conv3d, x [1, 4, 2, 4, 4], w [3, 4, 1, 2, 2],
 * stride = kernel, no bias) lowered, assigned (fp32 forward) and run on be_name. */
static void run_mini_conv(const char *be_name, drift_side side, const float *x, const float *w, drift_exec_result *r) {
    char path[1024];
    size_t len;
    snprintf(path, sizeof path, "%s/graphs/mini_conv3d.json", testdata());
    char *doc = test_slurp(path, &len);
    if (!doc) fail_msg("%s missing", path);
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *g = NULL;
    drift_graph *sem = NULL;
    if (drift_aten_graph_parse(doc, len, "mini_conv3d.json", &g, &e) || drift_aten_graph_lower(g, &sem, &e))
        fail_msg("%s", e.msg);
    int n_patch = 0;
    for (int i = 0; i < drift_graph_count(sem); i++) {
        const drift_value *v = drift_graph_value(sem, i);
        if (v->kind == DRIFT_VAL_NODE && v->op.kind == DRIFT_OP_PATCHIFY) n_patch++, assert_int_equal(v->op.layout, 1);
        /* the patch GEMM is a convolution's (cuDNN in torch): not under the recording's cuBLAS workspace */
        if (v->kind == DRIFT_VAL_NODE && v->op.kind == DRIFT_OP_LINEAR) assert_int_equal(v->op.layout, DRIFT_LINEAR_CONV);
    }
    assert_int_equal(n_patch, 1);
    drift_hostset *ps, *bs, *is;
    drift_hostset_create(&ps, &e);
    drift_hostset_create(&bs, &e);
    drift_hostset_create(&is, &e);
    assert_int_equal(drift_hostset_add(ps, "proj.weight", DRIFT_F32, 5, (int64_t[]){CV_O, CV_C, 1, CV_KH, CV_KW}, w,
                                       NULL, NULL, &e), 0);
    assert_int_equal(drift_hostset_add(is, "latents", DRIFT_F32, 5, (int64_t[]){1, CV_C, CV_F, CV_H, CV_W}, x, NULL,
                                       NULL, &e), 0);
    test_run_fp32(sem, side, be_name, ps, bs, is, NULL, NULL, r);
    assert_int_equal(r->numel, CV_O * CV_L); /* [1, O, F', H', W'] */
    drift_graph_free(sem);
    drift_aten_graph_free(g);
    drift_hostset_free(ps);
    drift_hostset_free(bs);
    drift_hostset_free(is);
    free(doc);
}

/* y[t, oc] = sum_kk P[t, kk] Wk[oc, kk] as the cpu backend's LINEAR computes it, with the
 * patch matrix and weight gathered here in the channels-last (cl 1) or channels-first order. */
static void cpu_gemm_in_order(const float *x, const float *w, int cl, float *y) {
    float pm[CV_L * CV_K], wk[CV_O * CV_K];
    for (int t = 0; t < CV_L; t++)
        for (int kk = 0; kk < CV_K; kk++) pm[t * CV_K + kk] = x[cv_x_index(t, kk, cl)];
    for (int oc = 0; oc < CV_O; oc++)
        for (int kk = 0; kk < CV_K; kk++) wk[oc * CV_K + kk] = w[cv_w_index(oc, kk, cl)];
    drift_err e;
    drift_backend *be;
    assert_int_equal(drift_backend_create("cpu", &be, &e), 0);
    drift_tensor tp = {.dtype = DRIFT_F32, .ndim = 2, .shape = {CV_L, CV_K}};
    drift_tensor tw = {.dtype = DRIFT_F32, .ndim = 2, .shape = {CV_O, CV_K}};
    drift_tensor ty = {.dtype = DRIFT_F32, .ndim = 2, .shape = {CV_L, CV_O}};
    assert_int_equal(drift_backend_alloc(be, &tp, &e), 0);
    assert_int_equal(drift_backend_alloc(be, &tw, &e), 0);
    assert_int_equal(drift_backend_alloc(be, &ty, &e), 0);
    assert_int_equal(drift_backend_upload_f32(be, &tp, pm, &e), 0);
    assert_int_equal(drift_backend_upload_f32(be, &tw, wk, &e), 0);
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = DRIFT_OP_LINEAR, op.compute = op.out = DRIFT_F32, op.n_in = 2;
    const drift_tensor *in[2] = {&tp, &tw};
    if (drift_backend_run(be, &op, in, &ty, &e)) fail_msg("linear: %s", e.msg);
    assert_int_equal(drift_backend_download_f32(be, &ty, y, &e), 0);
    drift_backend_release(be, &tp);
    drift_backend_release(be, &tw);
    drift_backend_release(be, &ty);
    drift_backend_free(be);
}

/* The lowered conv's GEMM reads K in (kd, kh, kw, c) order. ref (fp64, a sequential sum
 * in K order): bitwise the sequential fp64 sum in that order, with 24-bit mantissas over
 * 2^16 of range so that fp64 rounds. cpu (fp32; its GEMM's internal order is drift's blocked one,
 * kernels/cpu/cpu_gemm.h, not sequential): bitwise its LINEAR of a patch matrix gathered here channels-last. The
 * inputs are asserted to discriminate: the (c, kd, kh, kw) order gives different values. */
static void test_conv_channels_last(void **s) {
    (void)s;
    float x[CV_NX], w[CV_O * CV_K];
    uint64_t st = 16;
    for (int i = 0; i < CV_NX; i++) x[i] = wide_val(&st, 8, 24);
    for (int i = 0; i < CV_O * CV_K; i++) w[i] = wide_val(&st, 8, 24);
    drift_exec_result r;
    run_mini_conv("ref", DRIFT_SIDE_ORACLE, x, w, &r);
    int differs = 0;
    for (int oc = 0; oc < CV_O; oc++)
        for (int t = 0; t < CV_L; t++) {
            double cl = 0.0, cf = 0.0;
            for (int kk = 0; kk < CV_K; kk++) {
                cl += (double)x[cv_x_index(t, kk, 1)] * w[cv_w_index(oc, kk, 1)];
                cf += (double)x[cv_x_index(t, kk, 0)] * w[cv_w_index(oc, kk, 0)];
            }
            differs += memcmp(&cl, &cf, sizeof cl) != 0;
            const double got = r.f64[oc * CV_L + t];
            if (memcmp(&got, &cl, sizeof got))
                fail_msg("ref conv out[%d, %d]: got %a, want the channels-last sum %a (channels-first %a)", oc, t,
                         got, cl, cf);
        }
    print_message("  ref: the two K orders differ at %d of %d outputs\n", differs, CV_O * CV_L);
    assert_true(differs > 0);
    drift_exec_result_free(&r);

    for (int i = 0; i < CV_NX; i++) x[i] = wide_val(&st, 12, 4);
    for (int i = 0; i < CV_O * CV_K; i++) w[i] = wide_val(&st, 12, 4);
    run_mini_conv("cpu", DRIFT_SIDE_TRAINER, x, w, &r);
    float ycl[CV_L * CV_O], ycf[CV_L * CV_O];
    cpu_gemm_in_order(x, w, 1, ycl);
    cpu_gemm_in_order(x, w, 0, ycf);
    differs = 0;
    for (int oc = 0; oc < CV_O; oc++)
        for (int t = 0; t < CV_L; t++) {
            const float got = r.f32[oc * CV_L + t], cl = ycl[t * CV_O + oc], cf = ycf[t * CV_O + oc];
            differs += memcmp(&cl, &cf, sizeof cl) != 0;
            if (memcmp(&got, &cl, sizeof got))
                fail_msg("cpu conv out[%d, %d]: got %a, want the channels-last GEMM's %a (channels-first %a)", oc, t,
                         got, cl, cf);
        }
    print_message("  cpu: the two K orders differ at %d of %d outputs\n", differs, CV_O * CV_L);
    assert_true(differs > 0);
    drift_exec_result_free(&r);
}

/* ---- dtype branches of diffusers' RMSNorm (docs/aten-graph.md) ------------------------------- */

/* Lowers tests/data/graphs/<name> and assigns it under a bf16 forward (the
 * input cast to bf16 by its input policy, parameters bf16); returns the output's dtype and counts the
 * half_as casts; the assigned graph runs on the cpu backend. */
static drift_dtype rmsnorm_out_dtype(const char *name, int *n_half_as) {
    char path[1024];
    size_t len;
    snprintf(path, sizeof path, "%s/graphs/%s", testdata(), name);
    char *doc = test_slurp(path, &len);
    if (!doc) fail_msg("%s missing", path);
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *g = NULL;
    drift_graph *sem = NULL, *as = NULL;
    if (drift_aten_graph_parse(doc, len, name, &g, &e) || drift_aten_graph_lower(g, &sem, &e)) fail_msg("%s", e.msg);
    *n_half_as = 0;
    for (int i = 0; i < drift_graph_count(sem); i++) *n_half_as += drift_graph_value(sem, i)->rule == DRIFT_RULE_HALF_AS;
    drift_plan plan;
    drift_plan_init(&plan);
    plan.diffusion_forward_dtype = DRIFT_BF16;
    drift_assign_opts o;
    drift_assign_opts_init(&o);
    plan.inputs[DRIFT_INPUT_LATENTS].kind = DRIFT_INPUT_DEFAULT; /* cast to bf16: the norm's input is bf16 */
    if (drift_assign_dtypes(sem, &plan, NULL, NULL, &o, &as, &e)) fail_msg("%s", e.msg);
    drift_dtype dt = drift_graph_value(as, drift_graph_output(as))->dtype;
    float w[8], x[32];
    for (int i = 0; i < 8; i++) w[i] = 1.0f + 0.1f * (float)i;
    for (int i = 0; i < 32; i++) x[i] = (float)((i * 5) % 9) * 0.37f - 1.3f;
    drift_hostset *ps, *bs, *is;
    drift_hostset_create(&ps, &e);
    drift_hostset_create(&bs, &e);
    drift_hostset_create(&is, &e);
    assert_int_equal(drift_hostset_add(ps, "norm.weight", DRIFT_F32, 1, (int64_t[]){8}, w, NULL, NULL, &e), 0);
    assert_int_equal(drift_hostset_add(is, "latents", DRIFT_F32, 3, (int64_t[]){1, 4, 8}, x, NULL, NULL, &e), 0);
    drift_backend *be;
    assert_int_equal(drift_backend_create("cpu", &be, &e), 0);
    drift_exec_inputs in = {.params = ps, .buffers = bs, .inputs = is};
    drift_exec_result r;
    memset(&r, 0, sizeof r);
    if (drift_exec_run(as, be, &in, &r, &e)) fail_msg("%s: %s", e.where, e.msg);
    drift_exec_result_free(&r);
    drift_backend_free(be);
    drift_hostset_free(ps);
    drift_hostset_free(bs);
    drift_hostset_free(is);
    drift_graph_free(as);
    drift_graph_free(sem);
    drift_aten_graph_free(g);
    drift_plan_free(&plan);
    free(doc);
    return dt;
}

static void test_rmsnorm_dtype_branches(void **s) {
    (void)s;
    int half_as = 0;
    /* with a bf16 weight the model code rounds h to bf16 before `h * weight`: a bf16 result
     * (an fp32 export alone would promote it to fp32) */
    assert_int_equal(rmsnorm_out_dtype("mini_rmsnorm.json", &half_as), DRIFT_BF16);
    assert_int_equal(half_as, 1);
    /* without a weight, h.to(input_dtype) returns to the input's dtype (bf16), not the fp32 captured */
    assert_int_equal(rmsnorm_out_dtype("mini_rmsnorm_noweight.json", &half_as), DRIFT_BF16);
    assert_int_equal(half_as, 0);
}

/* ---- the autocast table is the one documented --------------------------------------------- */

static void test_autocast_table_documented(void **s) {
    (void)s;
    char path[1024];
    const char *src = getenv("DRIFT_SRC");
    snprintf(path, sizeof path, "%s/docs/autocast.md", src ? src : ".");
    size_t len;
    char *doc = test_slurp(path, &len);
    if (!doc) fail_msg("%s missing", path);
    static const char *const cls_name[] = {"none", "lower", "fp32", "promote"};
    int n = 0;
    drift_aten_cast_class cls;
    for (const char *op; (op = drift_aten_autocast_entry(n, &cls)); n++) {
        char row[160];
        snprintf(row, sizeof row, "| `%s` | %s |", op, cls_name[cls]);
        if (!strstr(doc, row)) fail_msg("docs/autocast.md lacks the row '%s'", row);
        assert_int_equal(drift_aten_autocast_class(op), cls);
    }
    /* and every documented row is in the table */
    int rows = 0;
    for (const char *p = strstr(doc, "\n| `"); p; p = strstr(p + 1, "\n| `")) {
        char op[96], c[16];
        if (sscanf(p, "\n| `%95[^`]` | %15s |", op, c) != 2) continue;
        if (!strcmp(c, "lower") || !strcmp(c, "fp32") || !strcmp(c, "promote")) {
            rows++;
            drift_aten_cast_class want = !strcmp(c, "lower") ? DRIFT_ATEN_CAST_LOWER : !strcmp(c, "fp32") ? DRIFT_ATEN_CAST_FP32 : DRIFT_ATEN_CAST_PROMOTE;
            if (drift_aten_autocast_class(op) != want) fail_msg("docs/autocast.md: %s is %s, the table says otherwise", op, c);
        }
    }
    assert_int_equal(rows, n);
    assert_int_equal(drift_aten_autocast_class("linear"), DRIFT_ATEN_CAST_LOWER);
    assert_int_equal(drift_aten_autocast_class("layer_norm"), DRIFT_ATEN_CAST_FP32);
    assert_int_equal(drift_aten_autocast_class("add"), DRIFT_ATEN_CAST_NONE);
    char b[64];
    assert_string_equal(drift_aten_op_base("aten.scaled_dot_product_attention.default", b, sizeof b),
                        "scaled_dot_product_attention");
    free(doc);
}

static void replay_model(const char *model) { replay_model_tol(model, 1e-5); }

static void test_wan_replays(void **s) {
    (void)s;
    replay_model("wan");
}

static void test_qwen_replays(void **s) {
    (void)s;
    replay_model("qwen");
}

static void test_ltx2_replays(void **s) {
    (void)s;
    /* LTX-2's RoPE phases come from fp32 linspace/pow at large positions: torch's fp32
     * output is ~2e-5 from the fp64 truth (drift's fp32 replay agrees with torch to 5e-6) */
    replay_model_tol("ltx2", 1e-4);
}

static void test_flux_replays(void **s) {
    (void)s;
    replay_model("flux"); /* its fp64 RoPE part runs at fp64 on the cpu backend (kernels/cpu/cpu_f64.c) */
}

static void test_sd3_replays(void **s) {
    (void)s;
    replay_model("sd3");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wan_replays),
        cmocka_unit_test(test_sd3_replays),
        cmocka_unit_test(test_flux_replays),
        cmocka_unit_test(test_qwen_replays),
        cmocka_unit_test(test_ltx2_replays),
        cmocka_unit_test(test_hostile_graphs),
        cmocka_unit_test(test_copy_into_views),
        cmocka_unit_test(test_complex_fill),
        cmocka_unit_test(test_conv_channels_last),
        cmocka_unit_test(test_rmsnorm_dtype_branches),
        cmocka_unit_test(test_autocast_table_documented),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
