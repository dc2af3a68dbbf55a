/* Benchmark of the CUDA backend's LINEAR (cuBLASLt path) on the wan2.2
 * shapes (d = 3072, L = 4096 tokens, ffn 14336), against plain cuBLASLt
 * (default heuristics, no reduction-scheme restriction, same 32 MiB
 * workspace, same operands) and against the plain-cuBLASLt rate of a square
 * 8192^3 bf16 GEMM measured in the same run (the "peak").
 *
 *   bench_cuda_gemm [reps=20]
 *
 * y[M, N] = x[M, K] W[N, K]^T, bf16 operands, fp32 accumulation, bf16 output;
 * with and without a fused bf16 bias. Each call is timed with CUDA events
 * around its enqueue (run() is asynchronous, so host overhead that delays
 * the kernel counts); the three variants (plain, drift, drift + bias) are
 * interleaved rep by rep; medians after 3 warm-ups.
 * TFLOP/s = 2 M N K / time. The whole wan2.2 forward needs the replay
 * executor and is not benchmarked here. Prints "SKIP" and exits 0 in a
 * build without CUDA or without a device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DRIFT_HAVE_CUDA
#include <math.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "formats/dtype.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"

#define CK(call)                                                                                                       \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));                     \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)
#define LK(call)                                                                                                       \
    do {                                                                                                               \
        cublasStatus_t s_ = (call);                                                                                    \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                             \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cublasLtGetStatusString(s_));                \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float unif_pm(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what, const drift_err *err) {
    char buf[2048];
    fprintf(stderr, "%s: %s\n", what, drift_err_format(err, buf, sizeof buf));
    exit(1);
}

static drift_tensor make(drift_backend *be, int64_t rows, int64_t cols, float scale) {
    drift_err err;
    drift_tensor t = {.dtype = DRIFT_BF16, .ndim = cols > 0 ? 2 : 1, .shape = {rows, cols}};
    if (cols <= 0) t.shape[1] = 0;
    if (drift_backend_alloc(be, &t, &err)) die("alloc", &err);
    int64_t n = t.numel;
    float *h = malloc((size_t)n * sizeof(float));
    if (!h) exit(1);
    for (int64_t i = 0; i < n; i++) h[i] = scale * unif_pm();
    if (drift_backend_upload_f32(be, &t, h, &err)) die("upload", &err);
    free(h);
    return t;
}

typedef struct shape {
    const char *name;
    int64_t M, N, K;
} shape;

/* plain cuBLASLt: row-major y = x W^T as column-major y^T = W x^T (TN),
 * default heuristics and preferences except the workspace */
typedef struct raw_plan {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} raw_plan;

static void raw_make(cublasLtHandle_t lt, size_t wss, int64_t M, int64_t N, int64_t K, raw_plan *p) {
    LK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t T = CUBLAS_OP_T, Nn = CUBLAS_OP_N;
    LK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &T, sizeof T));
    LK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &Nn, sizeof Nn));
    LK(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, (uint64_t)K, (uint64_t)N, K));
    LK(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, (uint64_t)K, (uint64_t)M, K));
    LK(cublasLtMatrixLayoutCreate(&p->ld, CUDA_R_16BF, (uint64_t)N, (uint64_t)M, N));
    cublasLtMatmulPreference_t pref;
    LK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t wsb = wss;
    LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
    cublasLtMatmulHeuristicResult_t hr;
    int got = 0;
    LK(cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->la, p->lb, p->ld, p->ld, pref, 1, &hr, &got));
    if (got < 1) {
        fprintf(stderr, "no cuBLASLt algorithm\n");
        exit(1);
    }
    p->algo = hr.algo;
    cublasLtMatmulPreferenceDestroy(pref);
}

static void raw_free(raw_plan *p) {
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->ld);
    cublasLtMatmulDescDestroy(p->op);
}

typedef struct bench_ctx {
    drift_backend *be;
    cublasLtHandle_t lt;
    cudaStream_t s;
    void *ws;
    size_t wss;
    raw_plan raw;
    const drift_tensor *x, *w, *b;
    drift_tensor *y;
    cudaEvent_t e0, e1;
} bench_ctx;

/* which: 0 plain cuBLASLt, 1 drift LINEAR, 2 drift LINEAR + fused bias. ms. */
static float once(bench_ctx *c, int which) {
    drift_err err;
    float alpha = 1.0f, beta = 0.0f, ms = 0.0f;
    CK(cudaEventRecord(c->e0, c->s));
    if (which == 0) {
        LK(cublasLtMatmul(c->lt, c->raw.op, &alpha, c->w->data, c->raw.la, c->x->data, c->raw.lb, &beta, c->y->data,
                          c->raw.ld, c->y->data, c->raw.ld, &c->raw.algo, c->ws, c->wss, c->s));
    } else {
        drift_op op;
        memset(&op, 0, sizeof op);
        op.kind = DRIFT_OP_LINEAR;
        op.compute = DRIFT_BF16;
        op.out = DRIFT_BF16;
        op.n_in = which == 2 ? 3 : 2;
        const drift_tensor *in[3] = {c->x, c->w, c->b};
        if (drift_backend_run(c->be, &op, in, c->y, &err)) die("linear", &err);
    }
    CK(cudaEventRecord(c->e1, c->s));
    CK(cudaEventSynchronize(c->e1));
    CK(cudaEventElapsedTime(&ms, c->e0, c->e1));
    return ms;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 20;
    if (reps < 1 || reps > 10000) {
        fprintf(stderr, "usage: bench_cuda_gemm [reps]\n");
        return 2;
    }
    if (drift_cuda_device_count() <= 0) {
        printf("SKIP: no CUDA device\n");
        return 0;
    }
    drift_backend *be = NULL;
    drift_err err;
    drift_err_clear(&err);
    if (drift_backend_create("cuda", &be, &err)) die("create", &err);
    cudaStream_t s = (cudaStream_t)drift_cuda_backend_stream(be);
    cublasLtHandle_t lt;
    LK(cublasLtCreate(&lt));
    size_t wss = (size_t)32 << 20;
    void *ws = NULL;
    CK(cudaMalloc(&ws, wss));

    static const shape shapes[] = {
        {"square 8192^3 (peak ref)", 8192, 8192, 8192},
        {"wan2.2 qkv/o 4096x3072x3072", 4096, 3072, 3072},
        {"wan2.2 ffn up 4096x14336x3072", 4096, 14336, 3072},
        {"wan2.2 ffn down 4096x3072x14336", 4096, 3072, 14336},
    };
    double peak = 0.0;
    printf("%-34s %10s %9s %9s %9s %9s %8s %8s\n", "shape (MxNxK), bf16 -> bf16", "raw ms", "raw TF/s", "drift ms",
           "drift TF/s", "+bias TF/s", "vs raw", "vs peak");
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const shape *sh = &shapes[i];
        drift_tensor x = make(be, sh->M, sh->K, 1.0f), w = make(be, sh->N, sh->K, 0.02f), b = make(be, sh->N, 0, 0.5f);
        drift_tensor y = {.dtype = DRIFT_BF16, .ndim = 2, .shape = {sh->M, sh->N}};
        if (drift_backend_alloc(be, &y, &err)) die("alloc", &err);
        if (drift_backend_sync(be, &err)) die("sync", &err);
        double flop = 2.0 * (double)sh->M * (double)sh->N * (double)sh->K;
        bench_ctx bc = {be, lt, s, ws, wss, {0}, &x, &w, &b, &y, NULL, NULL};
        raw_make(lt, wss, sh->M, sh->N, sh->K, &bc.raw);
        CK(cudaEventCreate(&bc.e0));
        CK(cudaEventCreate(&bc.e1));
        /* warm-up, then the three variants interleaved rep by rep so that
           clocks and temperature treat them alike */
        for (int r = 0; r < 3; r++)
            for (int v = 0; v < 3; v++) (void)once(&bc, v);
        float *tt[3];
        for (int v = 0; v < 3; v++) {
            tt[v] = malloc((size_t)reps * sizeof(float));
            if (!tt[v]) exit(1);
        }
        for (int r = 0; r < reps; r++)
            for (int v = 0; v < 3; v++) tt[v][r] = once(&bc, v);
        float med[3];
        for (int v = 0; v < 3; v++) {
            qsort(tt[v], (size_t)reps, sizeof(float), cmp_f);
            med[v] = tt[v][reps / 2];
            free(tt[v]);
        }
        if (drift_backend_sync(be, &err)) die("sync", &err);
        cudaEventDestroy(bc.e0);
        cudaEventDestroy(bc.e1);
        raw_free(&bc.raw);
        float t_raw = med[0], t_d = med[1], t_b = med[2];
        double tf_raw = flop / (t_raw * 1e-3) / 1e12, tf_d = flop / (t_d * 1e-3) / 1e12,
               tf_b = flop / (t_b * 1e-3) / 1e12;
        if (i == 0) peak = tf_raw;
        printf("%-34s %10.3f %9.1f %9.3f %9.1f %9.1f %7.1f%% %7.1f%%\n", sh->name, (double)t_raw, tf_raw, (double)t_d,
               tf_d, tf_b, 100.0 * tf_d / tf_raw, 100.0 * tf_d / peak);
        printf("BENCH gemm %s M=%lld N=%lld K=%lld drift_TFLOPs=%.1f drift_bias_TFLOPs=%.1f raw_TFLOPs=%.1f "
               "peak_TFLOPs=%.1f\n",
               i == 0 ? "square" : "wan", (long long)sh->M, (long long)sh->N, (long long)sh->K, tf_d, tf_b, tf_raw,
               peak);
        fflush(stdout);
        drift_backend_release(be, &x);
        drift_backend_release(be, &w);
        drift_backend_release(be, &b);
        drift_backend_release(be, &y);
    }
    cudaFree(ws);
    cublasLtDestroy(lt);
    drift_backend_free(be);
    return 0;
}

#else
int main(void) {
    printf("SKIP: bench_cuda_gemm needs the CUDA build (-DDRIFT_CUDA=ON)\n");
    return 0;
}
#endif
