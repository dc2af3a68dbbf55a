/* replay/exec/memplan: the estimate follows the model, the plan, the backend
 * and the sites (resident parameter bytes exactly what the assigned graph's
 * parameter-only values weigh on a GPU; activations shrink when only the
 * output is observed; the oracle adds host memory; more layers need more),
 * and the check refuses with DRIFT_E_NOMEM naming the estimate and the limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "replay/exec/memplan.h"
#include "replay/exec/forward.h"

static void estimate(const char *spec, const char *backend, int sites, int oracle, drift_mem_estimate *e,
                     int64_t *param_fixed_gpu) {
    drift_err err;
    drift_model *m = NULL;
    assert_int_equal(drift_model_create(spec, &m, &err), 0);
    drift_plan plan;
    drift_plan_init(&plan);
    assert_int_equal(drift_plan_apply_flag(&plan, "--param-dtype", "*.norm2.*=fp32", &err), DRIFT_OK);
    drift_forward *f = NULL, *fo = NULL;
    assert_int_equal(drift_forward_prepare(m, &plan, DRIFT_SIDE_TRAINER, NULL, &f, &err), DRIFT_OK);
    if (oracle) assert_int_equal(drift_forward_prepare(m, NULL, DRIFT_SIDE_ORACLE, NULL, &fo, &err), DRIFT_OK);
    int on_gpu = strncmp(backend, "cuda", 4) == 0;
    assert_int_equal(drift_memplan_estimate(m, f, fo, 0, backend, on_gpu, sites, e, &err), DRIFT_OK);
    if (param_fixed_gpu) {
        /* an independent count: every parameter leaf in its stored dtype plus every cast of one */
        int64_t b = 0;
        const drift_graph *g = f->assigned;
        for (int i = 0; i < drift_graph_count(g); i++) {
            const drift_value *v = drift_graph_value(g, i);
            if (v->kind == DRIFT_VAL_PARAM) b += v->numel * (int64_t)drift_dtype_size(v->dtype);
            else if (v->kind == DRIFT_VAL_NODE && v->op.kind == DRIFT_OP_CAST &&
                     drift_graph_value(g, v->in[0])->kind == DRIFT_VAL_PARAM &&
                     drift_graph_value(g, v->in[0])->dtype != v->dtype)
                b += v->numel * (int64_t)drift_dtype_size(v->dtype);
        }
        *param_fixed_gpu = b;
    }
    drift_forward_free(f);
    drift_forward_free(fo);
    drift_plan_free(&plan);
    drift_model_free(m);
}

#define SPEC2 "wan2.2:layers=2,dim=64,heads=4,ffn_dim=128,text_dim=32,text_len=8,frames=2,height=8,width=8"
#define SPEC4 "wan2.2:layers=4,dim=64,heads=4,ffn_dim=128,text_dim=32,text_len=8,frames=2,height=8,width=8"

static void test_estimate_follows_inputs(void **state) {
    (void)state;
    unsetenv("DRIFT_MEM_LIMIT_GPU");
    unsetenv("DRIFT_MEM_LIMIT_HOST");
    drift_mem_estimate g_all, g_out, g4, c_all, c_or;
    int64_t params_gpu = 0;
    estimate(SPEC2, "cuda:0", 1, 0, &g_all, &params_gpu);
    estimate(SPEC2, "cuda:0", 0, 0, &g_out, NULL);
    estimate(SPEC4, "cuda:0", 1, 0, &g4, NULL);
    estimate(SPEC2, "cpu", 1, 0, &c_all, NULL);
    estimate(SPEC2, "cpu", 1, 1, &c_or, NULL);
    assert_true(g_all.on_gpu && !c_all.on_gpu);
    /* resident on the GPU: the parameters (fp32 masters) and their casts, nothing else fixed is larger */
    assert_true(g_all.gpu_resident >= params_gpu);
    assert_true(g_all.gpu_resident < params_gpu + params_gpu / 4);
    assert_true(g_all.gpu_activations > 0);
    assert_true(g_all.gpu_total == g_all.gpu_resident + g_all.gpu_activations + g_all.gpu_workspace);
    /* observing only the output keeps fewer values */
    assert_true(g_out.host_sites < g_all.host_sites);
    assert_true(g_out.gpu_activations <= g_all.gpu_activations);
    /* more layers, more memory; masters are 4 bytes per parameter */
    assert_true(g4.gpu_resident > g_all.gpu_resident);
    assert_true(g4.host_masters > g_all.host_masters);
    assert_int_equal(g_all.host_masters % 4, 0);
    /* on the CPU the values live on the host; the oracle adds its fp64 run */
    assert_int_equal(c_all.gpu_total, 0);
    assert_true(c_all.host_backend > 0);
    assert_int_equal(c_all.host_oracle, 0);
    assert_true(c_or.host_oracle > c_all.host_backend); /* fp64: twice the bytes of the cpu's fp32 */
    assert_true(c_or.host_total > c_all.host_total);
}

static void test_check_refuses(void **state) {
    (void)state;
    drift_mem_estimate e;
    drift_err err;
    setenv("DRIFT_MEM_LIMIT_GPU", "1M", 1);
    setenv("DRIFT_MEM_LIMIT_HOST", "64G", 1);
    estimate(SPEC2, "cuda:0", 1, 0, &e, NULL);
    assert_int_equal(e.gpu_limit, 1 << 20);
    assert_int_equal(drift_memplan_check(&e, "t.h5", &err), DRIFT_E_NOMEM);
    assert_non_null(strstr(err.msg, "GPU memory"));
    assert_non_null(strstr(err.msg, "1 MiB free"));
    setenv("DRIFT_MEM_PLAN", "0", 1);
    assert_int_equal(drift_memplan_check(&e, "t.h5", &err), DRIFT_OK);
    unsetenv("DRIFT_MEM_PLAN");
    setenv("DRIFT_MEM_LIMIT_GPU", "64G", 1);
    estimate(SPEC2, "cuda:0", 1, 0, &e, NULL);
    assert_int_equal(drift_memplan_check(&e, "t.h5", &err), DRIFT_OK);
    setenv("DRIFT_MEM_LIMIT_HOST", "2K", 1);
    estimate(SPEC2, "cpu", 1, 0, &e, NULL);
    assert_int_equal(drift_memplan_check(&e, "t.h5", &err), DRIFT_E_NOMEM);
    assert_non_null(strstr(err.msg, "host memory"));
    assert_non_null(strstr(err.msg, "2 KiB is available"));
    unsetenv("DRIFT_MEM_LIMIT_GPU");
    unsetenv("DRIFT_MEM_LIMIT_HOST");
}

/* Where --ref oracle runs: the replay's GPU by number only, or the host. */
static void test_oracle_backend(void **state) {
    (void)state;
    char b[64];
    assert_string_equal(drift_oracle_backend("cuda", 0, b, sizeof b), "ref-cuda:0");
    assert_string_equal(drift_oracle_backend("cuda:3", 0, b, sizeof b), "ref-cuda:3");
    assert_string_equal(drift_oracle_backend("cuda:2:gemm=naive", 0, b, sizeof b), "ref-cuda:2");
    assert_string_equal(drift_oracle_backend("cuda:i64=1", 0, b, sizeof b), "ref-cuda:0");
    assert_string_equal(drift_oracle_backend("cuda:1", 1, b, sizeof b), "ref");
    assert_string_equal(drift_oracle_backend("cpu", 0, b, sizeof b), "ref");
    assert_string_equal(drift_oracle_backend(NULL, 0, b, sizeof b), "ref");
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_estimate_follows_inputs),
                                       cmocka_unit_test(test_check_refuses), cmocka_unit_test(test_oracle_backend)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
