/* The wan2.2-shaped replay forward on the CUDA backend (CUDA issue):
 * d=3072, 24 heads, L=4096 tokens, 8 blocks, bf16 autocast with the norm2
 * fp32 island, parameters resident on the device (cast once, as FSDP's
 * gathered bf16 parameters are), timed with the host clock around a
 * synchronised forward; median of reps after warm-up. The PyTorch eager
 * baseline on the same shapes is bench/cuda_forward_torch.py.
 *
 *   bench_cuda_forward [MODEL] [REPS]
 *   default MODEL: wan2.2:layers=8,dim=3072,heads=24,ffn_dim=14336,frames=1,height=128,width=128,text_len=512
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"
#include "replay/exec/forward.h"
#include "replay/exec/params_init.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    /* bench_cuda_forward [MODEL_SPEC|""] [REPS] [BACKEND_SPEC], e.g. cuda:0:kernels=torch */
    const char *spec = argc > 1 && argv[1][0] ? argv[1]
                                : "wan2.2:layers=8,dim=3072,heads=24,ffn_dim=14336,frames=1,height=128,width=128,text_len=512";
    int reps = argc > 2 ? atoi(argv[2]) : 10;
    if (reps < 3) reps = 3;
    drift_err err;
    drift_err_clear(&err);
    drift_model *m = NULL;
    drift_backend *be = NULL;
    drift_forward *f = NULL;
    drift_hostset *in = NULL;
    drift_exec_cache *cache = NULL;
    drift_plan plan;
    drift_plan_init(&plan);
    drift_plan_apply_flag(&plan, "--param-dtype", "*.norm2.*=fp32", &err);
    double t0 = now();
    const char *backend = argc > 3 ? argv[3] : "cuda";
    if (drift_backend_create(backend, &be, &err)) {
        printf("SKIP: bench_cuda_forward: %s\n", err.msg);
        return 0;
    }
    if (drift_model_create(spec, &m, &err) || drift_model_seed_params(m, 1, &err) ||
        drift_forward_prepare(m, &plan, DRIFT_SIDE_TRAINER, NULL, &f, &err) ||
        drift_params_init_inputs(&m->cfg, 2, &in, &err) || drift_exec_cache_create(be, &cache, &err)) {
        fprintf(stderr, "bench_cuda_forward: %s: %s\n", err.where, err.msg);
        return 2;
    }
    double t_setup = now() - t0;
    double *t = malloc((size_t)reps * sizeof *t);
    double t_first = 0;
    for (int r = -2; r < reps; r++) {
        drift_exec_result res;
        memset(&res, 0, sizeof res);
        double a = now();
        if (drift_forward_run_cached(f, m, be, in, cache, NULL, NULL, &res, &err) || drift_backend_sync(be, &err)) {
            fprintf(stderr, "bench_cuda_forward: %s: %s\n", err.where, err.msg);
            return 2;
        }
        double b = now();
        drift_exec_result_free(&res);
        if (r == -2) t_first = b - a;
        if (r >= 0) t[r] = b - a;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    printf("model %s\nbackend %s\n", m->spec, drift_backend_name(be));
    printf("setup (seed params on the host, graph, plan): %.1f s; first forward (uploads + casts params): %.1f ms\n",
           t_setup, t_first * 1e3);
    printf("drift cuda replay forward, params resident: median %.3f ms over %d reps (min %.3f, max %.3f)\n",
           t[reps / 2] * 1e3, reps, t[0] * 1e3, t[reps - 1] * 1e3);
    free(t);
    drift_exec_cache_free(cache);
    drift_hostset_free(in);
    drift_forward_free(f);
    drift_backend_free(be);
    drift_model_free(m);
    drift_plan_free(&plan);
    return 0;
}
