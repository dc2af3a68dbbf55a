/* drift's cpu GEMM (kernels/cpu/cpu_gemm.h) against OpenBLAS cblas_sgemm on
 * the same shapes, layouts and thread count, in one run (issue 32): the GEMMs
 * of a 1.3B-wide Wan block (dim 1536, ffn 8960, 1560 video tokens, 512 text
 * tokens, 12 heads of 128) and of the tiny models. GFLOP/s of the fastest
 * of REPS timed calls after one warm-up call (REPS x 200 for shapes under
 * 0.1 GFLOP), drift's calls then OpenBLAS's per shape.
 *
 *   bench_cpu_gemm [THREADS] [REPS] [wan|tiny|all]     (default 1, 5, all)
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/cpu_gemm.h"

void openblas_set_num_threads(int num_threads);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct shape {
    const char *set, *name;
    int64_t m, n, k;
    int nn; /* 0: C = A B^T with B [N, K] (linear, q k^T); 1: C = A B with B [K, N] (P V) */
} shape;

static const shape SHAPES[] = {
    {"wan", "self/cross-attn q,k,v,o (x W^T)", 1560, 1536, 1536, 0},
    {"wan", "cross-attn k,v of 512 text tokens", 512, 1536, 1536, 0},
    {"wan", "ffn up", 1560, 8960, 1536, 0},
    {"wan", "ffn down", 1560, 1536, 8960, 0},
    {"wan", "attention q k^T, one head", 1560, 1560, 128, 0},
    {"wan", "attention P V, one head", 1560, 128, 1560, 1},
    {"tiny", "tiny-dit q,k,v,o (dim 64, 32 tokens)", 32, 64, 64, 0},
    {"tiny", "tiny-dit ffn up", 32, 128, 64, 0},
    {"tiny", "tiny-dit ffn down", 32, 64, 128, 0},
    {"tiny", "tiny-dit q k^T, one head", 32, 32, 16, 0},
    {"tiny", "tiny-dit dim 256 q,k,v,o (256 tokens)", 256, 256, 256, 0},
    {"tiny", "tiny-dit dim 256 ffn up", 256, 1024, 256, 0},
    {"tiny", "tiny-dit dim 256 ffn down", 256, 256, 1024, 0},
    {"tiny", "tiny-dit dim 256 q k^T, one head", 256, 256, 64, 0},
    {"tiny", "tiny-dit dim 256 P V, one head", 256, 64, 256, 1},
};

static double best_gflops(const shape *s, int threads, int reps, int use_blas, const float *A, const float *B,
                            float *C) {
    double *t = malloc((size_t)reps * sizeof *t);
    const drift_gemm g = {s->m,     s->n, s->k, A, s->k, 1, B, s->nn ? s->n : 1, s->nn ? 1 : s->k,
                          C,        s->n};
    for (int r = -1; r < reps; r++) {
        const double t0 = now();
        if (use_blas)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, s->nn ? CblasNoTrans : CblasTrans, (int)s->m, (int)s->n,
                        (int)s->k, 1.0f, A, (int)s->k, B, s->nn ? (int)s->n : (int)s->k, 0.0f, C, (int)s->n);
        else if (drift_cpu_gemm(threads, &g)) {
            fprintf(stderr, "bench_cpu_gemm: out of memory\n");
            exit(2);
        }
        if (r >= 0) t[r] = now() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    const double best = t[0];
    free(t);
    return 2.0 * (double)s->m * (double)s->n * (double)s->k / best * 1e-9;
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    const char *set = argc > 3 ? argv[3] : "all";
    if (threads < 1 || reps < 1) {
        fprintf(stderr, "usage: bench_cpu_gemm [THREADS] [REPS] [wan|tiny|all]\n");
        return 2;
    }
    openblas_set_num_threads(threads);
    /* per shape: drift's calls, then OpenBLAS's; the best of REPS (the
     * machine is shared: the fastest call is the one least disturbed) */
    enum { NS = (int)(sizeof SHAPES / sizeof SHAPES[0]) };
    double res[2][NS] = {{0}};
    for (int i = 0; i < NS; i++) {
        const shape *s = &SHAPES[i];
        if (strcmp(set, "all") != 0 && strcmp(set, s->set) != 0) continue;
        float *A = malloc((size_t)(s->m * s->k) * sizeof(float)), *B = malloc((size_t)(s->k * s->n) * sizeof(float));
        float *C = malloc((size_t)(s->m * s->n) * sizeof(float));
        if (!A || !B || !C) return 2;
        for (int64_t j = 0; j < s->m * s->k; j++) A[j] = (float)((j * 2654435761u) % 1000) / 1000.0f - 0.5f;
        for (int64_t j = 0; j < s->k * s->n; j++) B[j] = (float)((j * 40503u) % 1000) / 1000.0f - 0.5f;
        /* tiny shapes take microseconds: more calls */
        const int r = 2.0 * (double)s->m * (double)s->n * (double)s->k < 1e8 ? reps * 200 : reps;
        for (int lib = 0; lib < 2; lib++) res[lib][i] = best_gflops(s, threads, r, lib, A, B, C);
        free(A);
        free(B);
        free(C);
    }
    printf("threads %d, drift gemm path %s, best of %d\n", threads, drift_cpu_gemm_path(), reps);
    printf("| shape | M x N x K | drift GFLOP/s | OpenBLAS GFLOP/s | drift / OpenBLAS |\n|---|---|---|---|---|\n");
    for (int i = 0; i < NS; i++) {
        const shape *s = &SHAPES[i];
        if (res[0][i] == 0) continue;
        printf("| %s | %lld x %lld x %lld | %.1f | %.1f | %.2f |\n", s->name, (long long)s->m, (long long)s->n,
               (long long)s->k, res[0][i], res[1][i], res[0][i] / res[1][i]);
    }
    return 0;
}
