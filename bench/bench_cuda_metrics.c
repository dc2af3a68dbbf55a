/* Benchmark of the fused metric reduction (CUDA backend `metrics` entry)
 * against a device-to-device copy measured in the same run.
 *
 *   bench_cuda_metrics [log2_n=28] [reps=50]
 *
 * Two bf16 tensors of 2^log2_n elements (default 2^28: 512 MiB each), random
 * finite values (r ~ N(0,1), t = r + 0.01 N(0,1), 30% equal), so the fast
 * vector path is what is measured. Each repetition is one full `metrics`
 * call (both reductions, the 128-byte result copy and the stream sync),
 * timed with CUDA events on the backend's stream; the copy is one
 * cudaMemcpyAsync of one tensor (512 MiB) on the same stream. Reported:
 * median (and min) over reps after 5 warm-ups;
 *   metrics GB/s = bytes read (2 tensors) / time
 *   copy GB/s    = (bytes read + bytes written) / time
 * and their ratio (target >= 70%). Then an fp16 pair of the same size and an
 * fp32 pair of half the elements (same bytes), for information. The working sets are
 * far larger than L2 (60 MB), so no flush is needed. Prints "SKIP" and exits
 * 0 in a build without CUDA or without a device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DRIFT_HAVE_CUDA
#include <math.h>

#include <cuda_runtime_api.h>

#include "formats/dtype.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"

static uint64_t rng = 88172645463325252ull;
static double unif(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}
static double normal(void) {
    double u1 = unif(), u2 = unif();
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

#define CK(call)                                                                                                       \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));                     \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static void die(const char *what, const drift_err *err) {
    char buf[2048];
    fprintf(stderr, "%s: %s\n", what, drift_err_format(err, buf, sizeof buf));
    exit(1);
}

/* Fills t and r (n elements of dt) by uploading a 2^22-element random chunk
 * and replicating it on the device. */
static void fill(drift_backend *be, drift_tensor *t, drift_tensor *r, drift_dtype dt, int64_t n) {
    drift_err err;
    int64_t chunk = n < ((int64_t)1 << 22) ? n : ((int64_t)1 << 22);
    float *ht = malloc((size_t)chunk * sizeof(float)), *hr = malloc((size_t)chunk * sizeof(float));
    if (!ht || !hr) exit(1);
    for (int64_t i = 0; i < chunk; i++) {
        float b = (float)normal();
        hr[i] = b;
        ht[i] = unif() < 0.3 ? b : b + 0.01f * (float)normal();
    }
    drift_tensor st = {.dtype = dt, .ndim = 1, .shape = {chunk}}, sr = st;
    if (drift_backend_alloc(be, &st, &err) || drift_backend_alloc(be, &sr, &err)) die("alloc", &err);
    if (drift_backend_upload_f32(be, &st, ht, &err) || drift_backend_upload_f32(be, &sr, hr, &err)) die("upload", &err);
    cudaStream_t s = (cudaStream_t)drift_cuda_backend_stream(be);
    size_t es = drift_dtype_size(dt);
    for (int64_t off = 0; off < n; off += chunk) {
        int64_t cnt = n - off < chunk ? n - off : chunk;
        CK(cudaMemcpyAsync((char *)t->data + (size_t)off * es, st.data, (size_t)cnt * es, cudaMemcpyDeviceToDevice, s));
        CK(cudaMemcpyAsync((char *)r->data + (size_t)off * es, sr.data, (size_t)cnt * es, cudaMemcpyDeviceToDevice, s));
    }
    if (drift_backend_sync(be, &err)) die("sync", &err);
    drift_backend_release(be, &st);
    drift_backend_release(be, &sr);
    free(ht);
    free(hr);
}

static void bench_pair(drift_backend *be, drift_dtype dt, int64_t n, int reps, int primary) {
    drift_err err;
    drift_err_clear(&err);
    drift_tensor t = {.dtype = dt, .ndim = 1, .shape = {n}}, r = t, c = t;
    if (drift_backend_alloc(be, &t, &err) || drift_backend_alloc(be, &r, &err) || drift_backend_alloc(be, &c, &err)) die("alloc", &err);
    fill(be, &t, &r, dt, n);
    cudaStream_t s = (cudaStream_t)drift_cuda_backend_stream(be);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float *tm = malloc((size_t)reps * sizeof(float)), *tc = malloc((size_t)reps * sizeof(float));
    if (!tm || !tc) exit(1);
    drift_metric_acc acc;
    size_t bytes = (size_t)n * drift_dtype_size(dt);
    for (int i = 0; i < 5; i++) {
        drift_metric_acc_init(&acc);
        if (drift_backend_metrics(be, &t, &r, &acc, &err)) die("metrics", &err);
        CK(cudaMemcpyAsync(c.data, t.data, bytes, cudaMemcpyDeviceToDevice, s));
    }
    CK(cudaStreamSynchronize(s));
    for (int i = 0; i < reps; i++) {
        drift_metric_acc_init(&acc);
        CK(cudaEventRecord(e0, s));
        if (drift_backend_metrics(be, &t, &r, &acc, &err)) die("metrics", &err);
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&tm[i], e0, e1));
        CK(cudaEventRecord(e0, s));
        CK(cudaMemcpyAsync(c.data, t.data, bytes, cudaMemcpyDeviceToDevice, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&tc[i], e0, e1));
    }
    qsort(tm, (size_t)reps, sizeof(float), cmp_f);
    qsort(tc, (size_t)reps, sizeof(float), cmp_f);
    double mm = tm[reps / 2], cm = tc[reps / 2];
    double gb_m = 2.0 * (double)bytes / (mm * 1e-3) / 1e9, gb_c = 2.0 * (double)bytes / (cm * 1e-3) / 1e9;
    printf("%-5s n=2^%-2d  metrics: median %8.3f ms (min %8.3f) %7.1f GB/s read | copy: median %8.3f ms %7.1f GB/s "
           "r+w | ratio %5.1f%%%s\n",
           drift_dtype_name(dt), (int)round(log2((double)n)), mm, (double)tm[0], gb_m, cm, gb_c, 100.0 * gb_m / gb_c,
           primary ? (gb_m >= 0.7 * gb_c ? "  (target 70%: met)" : "  (target 70%: NOT met)") : "");
    printf("      result: mean|d| %.6e  max|d| %.6e at %lld  rel_max %.6e  cos %.12f  n_diff %lld  nan %lld/%lld\n",
           acc.sum_abs_diff / (double)acc.numel, acc.max_abs_diff, (long long)acc.argmax,
           acc.max_abs_diff / (acc.max_abs_ref + 1e-30), acc.sum_tr / sqrt(acc.sum_tt * acc.sum_rr),
           (long long)acc.n_diff, (long long)acc.nan_t, (long long)acc.nan_r);
    if (primary)
        printf("BENCH metrics_bf16_GBps=%.1f copy_GBps=%.1f ratio_pct=%.1f metrics_ms=%.3f\n", gb_m, gb_c,
               100.0 * gb_m / gb_c, mm);
    fflush(stdout);
    free(tm);
    free(tc);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    drift_backend_release(be, &t);
    drift_backend_release(be, &r);
    drift_backend_release(be, &c);
}

int main(int argc, char **argv) {
    int log2n = argc > 1 ? atoi(argv[1]) : 28;
    int reps = argc > 2 ? atoi(argv[2]) : 50;
    if (log2n < 10 || log2n > 33 || reps < 1 || reps > 10000) {
        fprintf(stderr, "usage: bench_cuda_metrics [log2_n (10..33)] [reps]\n");
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
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    int64_t n = (int64_t)1 << log2n;
    bench_pair(be, DRIFT_BF16, n, reps, 1);
    bench_pair(be, DRIFT_F16, n, reps, 0);
    bench_pair(be, DRIFT_F32, n / 2, reps, 0);
    drift_backend_free(be);
    return 0;
}

#else
int main(void) {
    printf("SKIP: bench_cuda_metrics needs the CUDA build (-DDRIFT_CUDA=ON)\n");
    return 0;
}
#endif
