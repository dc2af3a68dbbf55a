/* The recorded captured-graph traces (tests/data/graphs/recorded/MODEL.h5, the
 * fixtures of tests/replay/test_recorded.c: seeded weights, a torch.export
 * graph, fp32 forward, torch's output, 2 steps) replayed on the GPU under
 * both kernel profiles (cuda, cuda:kernels=torch), Flux included: its RoPE
 * table is computed in fp64, which the cuda backend runs through the GPU
 * oracle's bodies (kernels/cuda/f64_cuda.c). Per model and backend: the
 * output within 1e-4 x mean|output| of torch's (mean |diff|) with cosine
 * >= 0.99999 (test_recorded's bound), and self-replay bitwise; on cuda a
 * parameter of Flux scaled by 1.001 breaks the match (the check can fail).
 * A fixture not committed is reported and skipped. Skips (77) without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/plan.h"
#include "formats/trace.h"
#include "replay/capture/aten_model.h"
#include "replay/exec/forward.h"
#include "tests/gpu/gpu_check.h"
#include "tests/trace_records.h"

static const char *const IN_SITE[3] = {"input:latents:pre_cast", "input:cond:pre_cast", "input:timestep:pre_cast"};
static const char *const IN_NAME[3] = {"latents", "cond", "timestep"};

typedef struct result {
    int ok;           /* the replay ran */
    double rel, cosine;
    float *out[8];
    int64_t numel, steps;
} result;

static void result_free(result *r) {
    for (int k = 0; k < 8; k++) free(r->out[k]);
    memset(r, 0, sizeof *r);
}

/* Replays path on spec under its recorded plan; scale != 1 multiplies the
 * parameter `param` first. Failures are counted (GC_CHECK) and leave ok 0. */
static void replay(const char *path, const char *spec, const char *param, float scale, result *res) {
    memset(res, 0, sizeof *res);
    drift_err e;
    drift_err_clear(&e);
    drift_trace_reader *r = NULL;
    drift_model *m = NULL;
    drift_forward *f = NULL;
    drift_backend *be = NULL;
    drift_plan plan;
    drift_plan_init(&plan);
    int rc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &e);
    const drift_trace_meta *meta = rc ? NULL : drift_trace_reader_meta(r);
    if (!rc) rc = drift_capture_model_for_trace(r, meta->family, &m, &e);
    if (!rc) rc = drift_model_load_trace(m, r, &e);
    if (!rc) rc = drift_plan_parse_json(&plan, meta->plan_json, strlen(meta->plan_json), path, &e);
    if (!rc && scale != 1.0f) {
        const drift_host_tensor *t = drift_hostset_find(m->params, param);
        GC_CHECK(t != NULL, "no parameter %s", param);
        for (int64_t i = 0; t && i < t->numel; i++) t->f32[i] *= scale;
    }
    const drift_dtype handed[3] = {DRIFT_F32, DRIFT_F32, DRIFT_F32};
    if (!rc) rc = drift_forward_prepare(m, &plan, DRIFT_SIDE_TRAINER, handed, &f, &e);
    if (!rc) rc = drift_backend_create(spec, &be, &e);
    size_t n_steps = 0;
    const drift_trace_step *st = rc ? NULL : drift_trace_reader_steps(r, &n_steps);
    if (n_steps > 8) n_steps = 8;
    double sd = 0, sr = 0, dot = 0, nx = 0, ny = 0;
    for (size_t k = 0; !rc && k < n_steps; k++) {
        drift_hostset *in = NULL;
        rc = drift_hostset_create(&in, &e);
        for (int i = 0; i < 3 && !rc; i++) {
            drift_trace_site_info info;
            float *v = test_read_at(r, IN_SITE[i], st[k].step, &info);
            if (!v) {
                GC_CHECK(0, "step %lld has no %s", (long long)st[k].step, IN_SITE[i]);
                rc = 1;
                break;
            }
            rc = drift_hostset_add(in, IN_NAME[i], info.dtype, info.ndim, info.shape, v, NULL, NULL, &e);
            free(v);
        }
        if (!rc) rc = drift_capture_step_inputs(m, r, st[k].step, in, &e);
        drift_exec_result out;
        memset(&out, 0, sizeof out);
        if (!rc) rc = drift_forward_run(f, m, be, in, NULL, NULL, &out, &e);
        drift_trace_site_info oi;
        float *torch = rc ? NULL : test_read_at(r, "output:noise_pred", st[k].step, &oi);
        if (!rc && (!torch || oi.numel != out.numel)) {
            GC_CHECK(0, "no output:noise_pred of %lld elements at step %lld", (long long)out.numel, (long long)st[k].step);
            rc = 1;
        }
        for (int64_t i = 0; !rc && i < out.numel; i++) {
            const double y = out.f32[i], t = torch[i];
            sd += fabs(y - t);
            sr += fabs(t);
            dot += y * t;
            nx += y * y;
            ny += t * t;
        }
        if (!rc) {
            res->out[k] = malloc((size_t)out.numel * sizeof(float));
            if (res->out[k]) memcpy(res->out[k], out.f32, (size_t)out.numel * sizeof(float));
            res->numel = out.numel;
        }
        free(torch);
        drift_exec_result_free(&out);
        drift_hostset_free(in);
    }
    if (rc && e.msg[0]) GC_CHECK(0, "%s", gc_errstr(&e));
    res->ok = rc == 0 && n_steps > 0;
    res->steps = (int64_t)n_steps;
    res->rel = sd / (sr > 0 ? sr : 1);
    res->cosine = nx > 0 && ny > 0 ? dot / sqrt(nx * ny) : 0.0;
    drift_backend_free(be);
    drift_forward_free(f);
    drift_plan_free(&plan);
    drift_model_free(m);
    if (r) drift_trace_reader_close(r);
}

static int matches(const result *r) { return r->ok && r->rel <= 1e-4 && r->cosine >= 0.99999; }

int main(void) {
    gc_require_gpu("test_cuda_recorded");
    static const char *const models[] = {"flux", "wan", "ltx2", "sd3", "qwen"};
    static const char *const specs[] = {"cuda", "cuda:kernels=torch"};
    const char *dir = getenv("DRIFT_TESTDATA");
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/graphs/recorded/%s.h5", dir ? dir : "tests/data", models[mi]);
        FILE *fp = fopen(path, "rb");
        if (!fp) {
            printf("  %-5s: %s not committed, skipped\n", models[mi], path);
            continue;
        }
        fclose(fp);
        for (size_t si = 0; si < sizeof specs / sizeof specs[0]; si++) {
            gc_case_set("%s on %s", models[mi], specs[si]);
            result a, b;
            replay(path, specs[si], NULL, 1.0f, &a);
            printf("  %-5s %-18s: mean|diff| = %.3e x mean|out|, cosine %.8f (%lld steps)\n", models[mi], specs[si],
                   a.rel, a.cosine, (long long)a.steps);
            GC_CHECK(matches(&a), "%.3e x mean|out| (bound 1e-4), cosine %.8f (bound 0.99999)", a.rel, a.cosine);
            replay(path, specs[si], NULL, 1.0f, &b);
            int same = a.ok && b.ok && a.numel == b.numel;
            for (int64_t k = 0; same && k < a.steps; k++)
                same = a.out[k] && b.out[k] && memcmp(a.out[k], b.out[k], (size_t)a.numel * sizeof(float)) == 0;
            GC_CHECK(same, "self-replay is not bitwise");
            if (si == 0 && strcmp(models[mi], "flux") == 0) {
                result p;
                replay(path, specs[si], "proj_out.weight", 1.001f, &p);
                printf("  %-5s %-18s: proj_out.weight x 1.001: %.3e x mean|out|\n", models[mi], specs[si], p.rel);
                GC_CHECK(p.ok && !matches(&p), "scaling proj_out.weight by 1.001 still matches torch's output");
                result_free(&p);
            }
            result_free(&a);
            result_free(&b);
        }
    }
    return gc_finish("test_cuda_recorded");
}
