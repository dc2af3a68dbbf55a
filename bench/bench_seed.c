/* Fast seeding (issue 18): a Wan2.1-1.3B-wide model's 1.3 B synthetic
 * parameters seeded on all cores, then again on half of them; the two sets
 * must be bit for bit equal (each tensor is its own stream). Prints one BENCH
 * line with the parameters per second.
 *
 *   bench_seed [MODEL] [THREADS]
 *   default MODEL: wan2.2:layers=30,dim=1536,heads=12,ffn_dim=8960,text_dim=4096 (Wan2.1 1.3B widths)
 *   THREADS: default drift_params_seed_threads() (DRIFT_SEED_THREADS or the online CPUs) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "replay/exec/forward.h"
#include "replay/exec/params_init.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv) {
    const char *spec = argc > 1 ? argv[1] : "wan2.2:layers=30,dim=1536,heads=12,ffn_dim=8960,text_dim=4096";
    int threads = argc > 2 ? atoi(argv[2]) : drift_params_seed_threads();
    if (threads < 1) threads = 1;
    drift_err err;
    drift_err_clear(&err);
    drift_model *m = NULL;
    drift_hostset *a = NULL, *b = NULL;
    if (drift_model_create(spec, &m, &err)) {
        fprintf(stderr, "bench_seed: %s: %s\n", err.where, err.msg);
        return 1;
    }
    long long n = 0;
    for (size_t i = 0; i < m->table.n; i++) n += m->table.params[i].numel;
    double t0 = now();
    int rc = drift_params_init_seeded_threads(&m->table, 1, threads, &a, &err);
    double t1 = now();
    int half = threads / 2 > 0 ? threads / 2 : 1;
    if (!rc) rc = drift_params_init_seeded_threads(&m->table, 1, half, &b, &err);
    double t2 = now();
    if (rc) {
        fprintf(stderr, "bench_seed: %s: %s\n", err.where, err.msg);
        return 1;
    }
    int same = 1;
    for (size_t i = 0; i < drift_hostset_count(a) && same; i++) {
        const drift_host_tensor *x = drift_hostset_at(a, i), *y = drift_hostset_at(b, i);
        same = x->numel == y->numel && memcmp(x->f32, y->f32, (size_t)x->numel * sizeof(float)) == 0;
    }
    printf("seeded %lld parameters (%zu tensors) of %s: %d threads %.2f s, %d threads %.2f s; values %s\n", n,
           m->table.n, m->spec, threads, t1 - t0, half, t2 - t1, same ? "bit for bit equal" : "DIFFER");
    printf("BENCH seed_params: %.2f s for %.2f B parameters on %d threads (%.0f M/s)%s\n", t1 - t0, (double)n / 1e9,
           threads, (double)n / 1e6 / (t1 - t0), same ? "" : " VALUES DIFFER BETWEEN THREAD COUNTS");
    drift_hostset_free(a);
    drift_hostset_free(b);
    drift_model_free(m);
    return same ? 0 : 1;
}
