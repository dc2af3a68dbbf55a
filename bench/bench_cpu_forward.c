/* Times a tiny-dit forward on the CPU backend against OpenBLAS sgemm on the
 * same GEMM shapes, in one run (issue: CPU replay). The ratio says how much
 * of the forward is GEMM work at the BLAS's speed and how much is drift's
 * own elementwise/norm/attention code and exact dtype emulation.
 *
 *   bench_cpu_forward [MODEL] [REPS]     (default tiny-dit, 20)
 */
#include <cblas.h>
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

typedef struct gemm { int64_t m, n, k, batch; } gemm;

int main(int argc, char **argv) {
    const char *spec = argc > 1 ? argv[1] : "tiny-dit";
    int reps = argc > 2 ? atoi(argv[2]) : 20;
    if (reps < 3) reps = 3;
    drift_err err;
    drift_model *m = NULL;
    drift_backend *be = NULL;
    drift_forward *f = NULL;
    drift_hostset *in = NULL;
    drift_plan plan;
    drift_plan_init(&plan);
    drift_plan_apply_flag(&plan, "--param-dtype", "*.norm2.*=fp32", &err);
    if (drift_model_create(spec, &m, &err) || drift_model_seed_params(m, 1, &err) ||
        drift_backend_create("cpu", &be, &err) || drift_forward_prepare(m, &plan, DRIFT_SIDE_TRAINER, NULL, &f, &err) ||
        drift_params_init_inputs(&m->cfg, 2, &in, &err)) {
        fprintf(stderr, "bench_cpu_forward: %s: %s\n", err.where, err.msg);
        return 2;
    }
    /* GEMM shapes of the forward: every LINEAR (M x N x K) and attention's two
     * batched products per (batch, head). */
    gemm *g = calloc((size_t)drift_graph_count(f->assigned), 2 * sizeof *g);
    size_t ng = 0;
    double flops = 0;
    for (int id = 0; id < drift_graph_count(f->assigned); id++) {
        const drift_value *v = drift_graph_value(f->assigned, id);
        if (v->kind != DRIFT_VAL_NODE) continue;
        if (v->op.kind == DRIFT_OP_LINEAR) {
            const drift_value *x = drift_graph_value(f->assigned, v->in[0]), *w = drift_graph_value(f->assigned, v->in[1]);
            int64_t k = w->shape[1];
            g[ng] = (gemm){x->numel / k, w->shape[0], k, 1};
            flops += 2.0 * (double)g[ng].m * (double)g[ng].n * (double)k;
            ng++;
        } else if (v->op.kind == DRIFT_OP_ATTENTION) {
            const drift_value *q = drift_graph_value(f->assigned, v->in[0]), *k = drift_graph_value(f->assigned, v->in[1]);
            const int hd = v->op.layout ? 2 : 1, ld = v->op.layout ? 1 : 2; /* [B, L, H, D] in layout 1 */
            int64_t bh = q->shape[0] * q->shape[hd], lq = q->shape[ld], d = q->shape[3], lk = k->shape[ld];
            g[ng++] = (gemm){lq, lk, d, bh};
            g[ng++] = (gemm){lq, d, lk, bh};
            flops += 4.0 * (double)bh * (double)lq * (double)lk * (double)d;
        }
    }
    /* Forward: warm-up, then the median of reps. */
    double *tf = malloc((size_t)reps * sizeof *tf), *ts = malloc((size_t)reps * sizeof *ts);
    for (int r = -2; r < reps; r++) {
        drift_exec_result res;
        memset(&res, 0, sizeof res);
        double t0 = now();
        if (drift_forward_run(f, m, be, in, NULL, NULL, &res, &err)) {
            fprintf(stderr, "bench_cpu_forward: %s: %s\n", err.where, err.msg);
            return 2;
        }
        double t1 = now();
        drift_exec_result_free(&res);
        if (r >= 0) tf[r] = t1 - t0;
    }
    /* The same GEMMs through cblas_sgemm on random fp32 data. */
    size_t maxa = 1, maxb = 1, maxc = 1;
    for (size_t i = 0; i < ng; i++) {
        size_t a = (size_t)(g[i].m * g[i].k), b = (size_t)(g[i].n * g[i].k), c = (size_t)(g[i].m * g[i].n);
        if (a > maxa) maxa = a;
        if (b > maxb) maxb = b;
        if (c > maxc) maxc = c;
    }
    float *A = malloc(maxa * 4), *B = malloc(maxb * 4), *C = malloc(maxc * 4);
    for (size_t i = 0; i < maxa; i++) A[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (size_t i = 0; i < maxb; i++) B[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f;
    for (int r = -2; r < reps; r++) {
        double t0 = now();
        for (size_t i = 0; i < ng; i++)
            for (int64_t b = 0; b < g[i].batch; b++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)g[i].m, (int)g[i].n, (int)g[i].k, 1.0f, A,
                            (int)g[i].k, B, (int)g[i].k, 0.0f, C, (int)g[i].n);
        double t1 = now();
        if (r >= 0) ts[r] = t1 - t0;
    }
    qsort(tf, (size_t)reps, sizeof *tf, cmp_double);
    qsort(ts, (size_t)reps, sizeof *ts, cmp_double);
    double mf = tf[reps / 2], ms = ts[reps / 2];
    printf("model %s\n", m->spec);
    printf("gemms per forward: %zu, %.3f GFLOP\n", ng, flops * 1e-9);
    printf("cpu backend forward (median of %d): %.3f ms  (%.2f GFLOP/s)\n", reps, mf * 1e3, flops / mf * 1e-9);
    printf("openblas sgemm, same shapes:        %.3f ms  (%.2f GFLOP/s)\n", ms * 1e3, flops / ms * 1e-9);
    printf("ratio forward / sgemm-only: %.2fx\n", mf / ms);
    free(A); free(B); free(C); free(tf); free(ts); free(g);
    drift_hostset_free(in);
    drift_forward_free(f);
    drift_backend_free(be);
    drift_model_free(m);
    drift_plan_free(&plan);
    return 0;
}
