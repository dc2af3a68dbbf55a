/* Whole-model parity between the CUDA and the CPU backend (CUDA issue):
 * tiny-dit and a small wan2.2 config, replayed under an fp32 forward and
 * under the bf16 plan with the norm2 fp32 island, with and without the
 * device-residency cache.
 *
 * Bounds, and why:
 *  - fp32 forward: the two backends differ only in GEMM/reduction order and
 *    the last ULP of transcendental functions, so the output agrees to
 *    relative RMSE < 1e-4.
 *  - bf16 forward: a bf16 forward is chaotic (DESIGN.md s7b): one flipped
 *    rounding anywhere upstream moves the output by about the noise floor,
 *    so the bound is on closeness to the truth instead: each backend's
 *    RMSE against the fp64 oracle, and CUDA's within 1.5x of the CPU's; and
 *    the CPU-vs-CUDA difference within 5% relative RMSE.
 *  - The cache changes nothing: cached and uncached CUDA runs are bitwise
 *    equal, and so are two cached runs. */
#include "tests/gpu/gpu_check.h"

#include "replay/exec/forward.h"
#include "replay/exec/params_init.h"

static double rel_rmse(const float *a, const float *b, int64_t n) {
    double s = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        s += d * d;
        r += (double)b[i] * (double)b[i];
    }
    return r > 0 ? sqrt(s / r) : sqrt(s);
}

static double rmse_vs(const float *a, const double *o, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - o[i];
        s += d * d;
    }
    return sqrt(s / (double)n);
}

static void one_model(const char *spec, drift_backend *cpu, drift_backend *cuda, drift_backend *ref) {
    drift_err err;
    drift_model *m = NULL;
    drift_hostset *in = NULL;
    if (drift_model_create(spec, &m, &err) || drift_model_seed_params(m, 11, &err) ||
        drift_params_init_inputs(&m->cfg, 5, &in, &err)) {
        GC_CHECK(0, "%s: setup: %s: %s", spec, err.where, err.msg);
        return;
    }
    drift_forward *fo = NULL;
    drift_exec_result o;
    memset(&o, 0, sizeof o);
    GC_CHECK(!drift_forward_prepare(m, NULL, DRIFT_SIDE_ORACLE, NULL, &fo, &err) &&
                 !drift_forward_run(fo, m, ref, in, NULL, NULL, &o, &err),
             "%s: oracle: %s", spec, err.msg);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        gc_case_set("%s %s forward", spec, bf16 ? "bf16" : "fp32");
        drift_plan plan;
        drift_plan_init(&plan);
        if (!bf16) drift_plan_apply_flag(&plan, "--diffusion-forward-dtype", "fp32", &err);
        drift_plan_apply_flag(&plan, "--param-dtype", "*.norm2.*=fp32", &err);
        drift_forward *f = NULL;
        drift_exec_result a, b, c, d;
        memset(&a, 0, sizeof a); memset(&b, 0, sizeof b); memset(&c, 0, sizeof c); memset(&d, 0, sizeof d);
        drift_exec_cache *cache = NULL;
        int ok = !drift_forward_prepare(m, &plan, DRIFT_SIDE_TRAINER, NULL, &f, &err) &&
                 !drift_forward_run(f, m, cpu, in, NULL, NULL, &a, &err) &&
                 !drift_forward_run(f, m, cuda, in, NULL, NULL, &b, &err) &&
                 !drift_exec_cache_create(cuda, &cache, &err) &&
                 !drift_forward_run_cached(f, m, cuda, in, cache, NULL, NULL, &c, &err) &&
                 !drift_forward_run_cached(f, m, cuda, in, cache, NULL, NULL, &d, &err);
        GC_CHECK(ok, "run: %s: %s", err.where, err.msg);
        if (ok) {
            double rr = rel_rmse(b.f32, a.f32, a.numel);
            double ecpu = rmse_vs(a.f32, o.f64, a.numel), ecuda = rmse_vs(b.f32, o.f64, a.numel);
            printf("%-70s rel RMSE cuda vs cpu %.3e; RMSE vs fp64 oracle: cpu %.3e cuda %.3e\n", gc_case, rr, ecpu, ecuda);
            GC_CHECK(rr < (bf16 ? 5e-2 : 1e-4), "relative RMSE cuda vs cpu %.3e over the bound", rr);
            GC_CHECK(ecuda <= 1.5 * ecpu + 1e-12, "cuda further from the oracle (%.3e) than 1.5x cpu (%.3e)", ecuda, ecpu);
            GC_CHECK(memcmp(b.f32, c.f32, (size_t)b.numel * 4) == 0, "cached run differs from uncached");
            GC_CHECK(memcmp(c.f32, d.f32, (size_t)c.numel * 4) == 0, "two cached runs differ");
        }
        drift_exec_result_free(&a); drift_exec_result_free(&b); drift_exec_result_free(&c); drift_exec_result_free(&d);
        drift_exec_cache_free(cache);
        drift_forward_free(f);
        drift_plan_free(&plan);
    }
    drift_exec_result_free(&o);
    drift_forward_free(fo);
    drift_hostset_free(in);
    drift_model_free(m);
}

int main(void) {
    gc_require_gpu("test_cuda_model");
    drift_err err;
    drift_backend *cpu = NULL, *cuda = NULL, *ref = NULL;
    if (drift_backend_create("cpu", &cpu, &err) || drift_backend_create("cuda", &cuda, &err) ||
        drift_backend_create("ref", &ref, &err)) {
        fprintf(stderr, "backend: %s\n", err.msg);
        return 1;
    }
    one_model("tiny-dit", cpu, cuda, ref);
    one_model("wan2.2:layers=2,dim=256,heads=4,ffn_dim=512,in_channels=8,out_channels=8,text_dim=64,text_len=16,"
              "freq_dim=64,frames=1,height=16,width=16",
              cpu, cuda, ref);
    drift_backend_free(cpu);
    drift_backend_free(cuda);
    drift_backend_free(ref);
    return gc_finish("test_cuda_model");
}
