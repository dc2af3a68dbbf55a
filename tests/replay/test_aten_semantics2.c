/* More argument semantics of captured-graph lowerings that the zoo replays showed
 * wrong (issue 31, second batch: Krea2, Ideogram4, HunyuanVideo, LTX-2): each case
 * is a small graph written here, run on ref and cpu under an fp32 plan, against
 * the op's torch definition computed here in fp64 (never against a trace):
 *  - new_ones(x, size) is ones (Krea2's key mask: cat([mask, mask.new_ones(...)])
 *    filled zeros, so the image tokens were masked out of every attention);
 *  - a node in a model-code region that disables autocast ("autocast":
 *    {"enabled": false}: Ideogram4's RoPE `with torch.autocast(enabled=False)`)
 *    computes its matmul in fp32 under a bf16 autocast plan, not in bf16
 *    (position 65537 times inv_freq 1 is 65537, not bf16's 65536). */
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

static void fmt_shape(char *b, size_t n, int nd, const int64_t *sh) {
    size_t k = (size_t)snprintf(b, n, "[");
    for (int i = 0; i < nd; i++) k += (size_t)snprintf(b + k, n - k, "%s%lld", i ? ", " : "", (long long)sh[i]);
    snprintf(b + k, n - k, "]");
}

/* The document of y = target(args) over the latents x (captured dtype xdt) and the
 * parameter placeholders in params_json (JSON nodes, each ending in ",\n"; inputs_json
 * their "inputs" entries, each ending in ",\n"). */
static char *doc_of(const char *xdt, int xnd, const int64_t *xs, const char *params_json, const char *inputs_json,
                    const char *target, const char *args, const char *kwargs, const char *ydt, int ynd, const int64_t *ys) {
    char xsh[96], ysh[96];
    fmt_shape(xsh, sizeof xsh, xnd, xs);
    fmt_shape(ysh, sizeof ysh, ynd, ys);
    char *doc = malloc(16384);
    snprintf(doc, 16384,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"Op\",\n"
             " \"nodes\": [\n%s"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": %s, \"dtype\": \"%s\"}, \"module\": \"\"},\n"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"%s\", \"args\": %s, \"kwargs\": %s,\n"
             "   \"val\": {\"shape\": %s, \"dtype\": \"%s\"}, \"module\": \"m\", \"module_stack\": [\"m\"]},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [%s{\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}], \"constants\": {}, \"non_tensor_inputs\": {}}\n",
             params_json, xsh, xdt, target, args, kwargs, ysh, ydt, inputs_json);
    return doc;
}

/* Lowers doc and runs it on ref then cpu with parameters ps (owned, may be NULL) and the
 * latents x; the n outputs of each backend go to got[0..n) and got[n..2n). */
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
    if (!ps) drift_hostset_create(&ps, &e);
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

static void near(const char *what, const float *got, const double *want, int64_t n, double rtol) {
    for (int k = 0; k < 2; k++)
        for (int64_t i = 0; i < n; i++)
            if (fabs(got[k * n + i] - want[i]) > rtol * (1e-3 + fabs(want[i])))
                fail_msg("%s on %s: [%lld] = %.9g, want %.9g", what, k ? "cpu" : "ref", (long long)i, got[k * n + i], want[i]);
}

/* y = x.new_ones([2, 3]) + x: torch.Tensor.new_ones fills 1 in x's dtype. */
static void test_new_ones(void **st) {
    (void)st;
    enum { N = 6 };
    float x[N], got[2 * N];
    double want[N];
    for (int i = 0; i < N; i++) x[i] = 0.25f * (float)i - 0.5f, want[i] = 1.0 + x[i];
    const int64_t xs[2] = {2, 3};
    const char *nodes =
        "  {\"name\": \"o\", \"op\": \"call_function\", \"target\": \"aten.new_ones.default\", \"args\": [{\"node\": \"x\"}, [2, 3]],"
        " \"kwargs\": {\"pin_memory\": false}, \"val\": {\"shape\": [2, 3], \"dtype\": \"float32\"}, \"module\": \"\"},\n";
    char *doc = doc_of("float32", 2, xs, "", "", "aten.add.Tensor", "[{\"node\": \"o\"}, {\"node\": \"x\"}]", "{}", "float32", 2, xs);
    /* o reads x: insert it after x's placeholder, before y */
    char *py = strstr(doc, "  {\"name\": \"y\"");
    size_t nn = strlen(nodes);
    char *d2 = malloc(strlen(doc) + nn + 1);
    memcpy(d2, doc, (size_t)(py - doc));
    memcpy(d2 + (py - doc), nodes, nn);
    strcpy(d2 + (py - doc) + nn, py);
    run_both("new_ones", d2, NULL, 2, xs, x, N, got);
    near("new_ones + x", got, want, N, 1e-6);
    free(doc);
    free(d2);
    print_message("  new_ones(x, size) fills ones on ref and cpu\n");
}

/* The document of y = a @ b, a = arange(65530, 65538) viewed [8, 1], b = full([1, 1], 1.0), all fp32,
 * the matmul inside a region whose "autocast" is region (JSON), or in none when region is "". */
static char *doc_region(const char *region) {
    char *doc = malloc(8192);
    snprintf(doc, 8192,
             "{\"format\": \"drift-aten-graph\", \"version\": 1, \"producer\": {\"torch\": \"hand-made\"}, \"model_class\": \"Op\",\n"
             " \"capture\": {\"mode\": \"fake\", \"autocast\": \"bfloat16\"},\n"
             " \"nodes\": [\n"
             "  {\"name\": \"x\", \"op\": \"placeholder\", \"target\": \"x\", \"args\": [], \"kwargs\": {}, \"val\": {\"shape\": [8, 1], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"r\", \"op\": \"call_function\", \"target\": \"aten.arange.start\", \"args\": [65530, 65538],"
             " \"kwargs\": {\"dtype\": {\"dtype\": \"float32\"}}, \"val\": {\"shape\": [8], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"a\", \"op\": \"call_function\", \"target\": \"aten.view.default\", \"args\": [{\"node\": \"r\"}, [8, 1]],"
             " \"kwargs\": {}, \"val\": {\"shape\": [8, 1], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"b\", \"op\": \"call_function\", \"target\": \"aten.full.default\", \"args\": [[1, 1], 1.0],"
             " \"kwargs\": {\"dtype\": {\"dtype\": \"float32\"}}, \"val\": {\"shape\": [1, 1], \"dtype\": \"float32\"}, \"module\": \"\"},\n"
             "  {\"name\": \"y\", \"op\": \"call_function\", \"target\": \"aten.matmul.default\", \"args\": [{\"node\": \"a\"}, {\"node\": \"b\"}],"
             " \"kwargs\": {}, \"val\": {\"shape\": [8, 1], \"dtype\": \"float32\"}, \"module\": \"m\", \"module_stack\": [\"m\"]%s%s},\n"
             "  {\"name\": \"output\", \"op\": \"output\", \"target\": \"output\", \"args\": [[{\"node\": \"y\"}]], \"kwargs\": {}, \"val\": null, \"module\": \"\"}],\n"
             " \"inputs\": [{\"node\": \"x\", \"kind\": \"user_input\", \"target\": \"hidden_states\", \"role\": \"latents\"}],\n"
             " \"outputs\": [{\"node\": \"y\", \"name\": \"output:noise_pred\"}], \"constants\": {}, \"non_tensor_inputs\": {}}\n",
             *region ? ", \"autocast\": " : "", region);
    return doc;
}

/* Lowers doc and runs it on backend be under a bf16 autocast plan; the 8 outputs go to got. */
static void run_bf16(const char *doc, const char *be_name, float *got) {
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *gr = NULL;
    drift_graph *sem = NULL, *as = NULL;
    if (drift_aten_graph_parse(doc, strlen(doc), "region", &gr, &e) || drift_aten_graph_lower(gr, &sem, &e))
        fail_msg("%s: %s", e.where, e.msg);
    drift_plan plan;
    drift_plan_init(&plan);
    plan.diffusion_forward_dtype = DRIFT_BF16;
    drift_assign_opts o;
    drift_assign_opts_init(&o);
    o.side = DRIFT_SIDE_TRAINER;
    if (drift_assign_dtypes(sem, &plan, NULL, NULL, &o, &as, &e)) fail_msg("assign: %s", e.msg);
    drift_hostset *ps, *bs, *is;
    drift_hostset_create(&ps, &e);
    drift_hostset_create(&bs, &e);
    drift_hostset_create(&is, &e);
    const int64_t xs[2] = {8, 1};
    const float x[8] = {0};
    assert_int_equal(drift_hostset_add(is, "latents", DRIFT_F32, 2, xs, x, NULL, NULL, &e), 0);
    drift_backend *be = NULL;
    if (drift_backend_create(be_name, &be, &e)) fail_msg("backend %s: %s", be_name, e.msg);
    drift_exec_inputs in = {.params = ps, .buffers = bs, .inputs = is};
    drift_exec_result r;
    memset(&r, 0, sizeof r);
    if (drift_exec_run(as, be, &in, &r, &e)) fail_msg("%s: %s", e.where, e.msg);
    assert_int_equal(r.numel, 8);
    memcpy(got, r.f32, 8 * sizeof(float));
    drift_exec_result_free(&r);
    drift_backend_free(be);
    drift_graph_free(as);
    drift_graph_free(sem);
    drift_aten_graph_free(gr);
    drift_plan_free(&plan);
    drift_hostset_free(ps);
    drift_hostset_free(bs);
    drift_hostset_free(is);
}

static void test_autocast_disabled_region(void **st) {
    (void)st;
    float got[8];
    char *off = doc_region("{\"enabled\": false, \"dtype\": \"bfloat16\"}");
    run_bf16(off, "cpu", got);
    for (int i = 0; i < 8; i++) /* torch: autocast off, fp32 @ fp32 is exact here */
        if (got[i] != 65530.0f + (float)i) fail_msg("autocast-off matmul [%d] = %.9g, want %d", i, got[i], 65530 + i);
    free(off);
    char *on = doc_region(""); /* the ambient autocast: the matmul runs in bf16 (65537 -> 65536) */
    run_bf16(on, "cpu", got);
    if (got[7] != 65536.0f) fail_msg("autocast-on matmul [7] = %.9g, want bf16's 65536", got[7]);
    free(on);
    char *other = doc_region("{\"enabled\": true, \"dtype\": \"float16\"}");
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *gr = NULL;
    drift_graph *sem = NULL;
    assert_int_equal(drift_aten_graph_parse(other, strlen(other), "region", &gr, &e), DRIFT_OK);
    assert_int_not_equal(drift_aten_graph_lower(gr, &sem, &e), DRIFT_OK); /* refused at the node, naming it */
    if (!strstr(e.msg, "autocast region in float16")) fail_msg("float16 region: message '%s'", e.msg);
    drift_aten_graph_free(gr);
    free(other);
    print_message("  a matmul in an autocast-disabled region is fp32 under a bf16 plan; a float16 region is refused\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_ones),
        cmocka_unit_test(test_autocast_disabled_region),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
