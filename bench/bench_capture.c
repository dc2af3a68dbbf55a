/* Captured torch.export graphs (replay/capture): time to import (parse +
 * lower to drift IR), to assign dtypes under a plan, and to replay one
 * forward step on a backend, per model.
 *
 *   bench_capture [--backend cpu|ref|cuda] [--reps N] [--plan P.json] GRAPH.json[=WEIGHTS.safetensors] ...
 *
 * A graph without weights is imported and assigned only. Times are medians
 * over the repetitions (the first forward, which uploads and casts the
 * parameters, is reported apart). Numbers go to bench/RESULTS.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/plan.h"
#include "replay/capture/aten_graph.h"
#include "replay/capture/aten_model.h"
#include "replay/exec/forward.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n ? v[n / 2] : 0.0;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
    fclose(f);
    *len = (size_t)n;
    return b;
}

int main(int argc, char **argv) {
    const char *backend = "cpu", *plan_path = NULL;
    int reps = 5;
    drift_err e;
    drift_err_clear(&e);
    printf("%-34s %6s %9s %9s %9s %11s %11s\n", "graph", "nodes", "import_s", "assign_s", "values", "step1_s", "step_s");
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--backend") && a + 1 < argc) { backend = argv[++a]; continue; }
        if (!strcmp(argv[a], "--reps") && a + 1 < argc) { reps = atoi(argv[++a]); continue; }
        if (!strcmp(argv[a], "--plan") && a + 1 < argc) { plan_path = argv[++a]; continue; }
        char path[4096], *weights = NULL;
        snprintf(path, sizeof path, "%s", argv[a]);
        if ((weights = strchr(path, '='))) *weights++ = 0;
        size_t len = 0;
        char *json = slurp(path, &len);
        if (!json) { fprintf(stderr, "%s: cannot read\n", path); return 2; }
        double ti[16];
        int nr = reps < 16 ? (reps > 0 ? reps : 1) : 16, nodes = 0;
        drift_model *m = NULL;
        for (int r = 0; r < nr; r++) {
            drift_model_free(m);
            m = NULL;
            double t0 = now();
            if (drift_capture_model_create(json, len, path, &m, &e)) { fprintf(stderr, "%s: %s\n", path, e.msg); return 2; }
            ti[r] = now() - t0;
        }
        drift_aten_graph *g = NULL;
        if (!drift_aten_graph_parse(json, len, path, &g, &e)) nodes = drift_aten_graph_node_count(g);
        drift_aten_graph_free(g);
        drift_plan plan;
        drift_plan_init(&plan);
        if (plan_path && drift_plan_load_file(&plan, plan_path, &e)) { fprintf(stderr, "%s: %s\n", plan_path, e.msg); return 2; }
        double ta[16];
        drift_forward *f = NULL;
        for (int r = 0; r < nr; r++) {
            drift_forward_free(f);
            f = NULL;
            double t0 = now();
            if (drift_forward_prepare(m, &plan, DRIFT_SIDE_TRAINER, NULL, &f, &e)) { fprintf(stderr, "%s: %s\n", path, e.msg); return 2; }
            ta[r] = now() - t0;
        }
        double step1 = -1, step = -1;
        if (weights) {
            drift_backend *be = NULL;
            drift_hostset *in = NULL;
            drift_exec_cache *cache = NULL;
            if (drift_model_load_safetensors(m, weights, NULL, &e) || drift_capture_seed_inputs(m, 1, &in, &e) ||
                drift_backend_create(backend, &be, &e) || drift_exec_cache_create(be, &cache, &e)) {
                fprintf(stderr, "%s: %s\n", weights, e.msg);
                return 2;
            }
            double ts[16];
            for (int r = 0; r <= nr; r++) {
                drift_exec_result res;
                memset(&res, 0, sizeof res);
                double t0 = now();
                if (drift_forward_run_cached(f, m, be, in, cache, NULL, NULL, &res, &e)) {
                    fprintf(stderr, "%s: %s\n", path, e.msg);
                    return 2;
                }
                if (r == 0) step1 = now() - t0;
                else ts[r - 1] = now() - t0;
                drift_exec_result_free(&res);
            }
            step = median(ts, nr);
            drift_exec_cache_free(cache);
            drift_backend_free(be);
            drift_hostset_free(in);
        }
        const char *base = strrchr(path, '/');
        printf("%-34s %6d %9.4f %9.4f %9d %11.4f %11.4f\n", base ? base + 1 : path, nodes, median(ti, nr), median(ta, nr),
               drift_graph_count(f->assigned), step1, step);
        drift_forward_free(f);
        drift_plan_free(&plan);
        drift_model_free(m);
        free(json);
    }
    printf("backend %s, %d repetitions, DRIFT_CPU_THREADS=%s\n", backend, reps, getenv("DRIFT_CPU_THREADS") ? getenv("DRIFT_CPU_THREADS") : "(default)");
    return 0;
}
