/* drift-sum64 on the GPU (drift_recorder_hash64 with a device pointer, the
 * recorder's kernel) equals the host's (drift_hash64, which replay checks)
 * for lengths 0..64, odd large ones, unaligned device pointers and a buffer
 * with one byte changed; two runs are equal. Skips without a GPU. */
#include "gpu_check.h"

#include <cuda_runtime_api.h>

#include "formats/hash64.h"
#include "recorder/recorder.h"

int main(void) {
    gc_require_gpu("test_cuda_hash");
    gc_seed(64);
    drift_err e;
    drift_backend *be = NULL; /* the device must also take a backend (and the link pulls kernels/backend.c) */
    if (drift_backend_create("cuda:0", &be, &e)) {
        printf("cannot create the cuda backend: %s\n", gc_errstr(&e));
        return 1;
    }
    drift_backend_free(be);
    const size_t big = ((size_t)64 << 20) + 13;
    unsigned char *h = malloc(big + 16), *d = NULL;
    if (!h || cudaMalloc((void **)&d, big + 16) != cudaSuccess) {
        printf("allocation failed\n");
        return 1;
    }
    for (size_t i = 0; i < big + 16; i++) h[i] = (unsigned char)gc_u64();
    cudaMemcpy(d, h, big + 16, cudaMemcpyHostToDevice);
    size_t lens[80];
    int nl = 0;
    for (size_t n = 0; n <= 64; n++) lens[nl++] = n;
    lens[nl++] = 4099;
    lens[nl++] = 1000003;
    lens[nl++] = big;
    for (int k = 0; k < nl; k++)
        for (size_t off = 0; off < 8; off += (lens[k] > 100 ? 3 : 1)) {
            gc_case_set("n %zu offset %zu", lens[k], off);
            uint64_t want = drift_hash64(h + off, lens[k], 4), got = 0, again = 0;
            GC_CHECK(drift_recorder_hash64(d + off, lens[k], 1, NULL, &got, &e) == 0, "%s", gc_errstr(&e));
            GC_CHECK(drift_recorder_hash64(d + off, lens[k], 1, NULL, &again, &e) == 0, "%s", gc_errstr(&e));
            GC_CHECK(got == want, "device %016llx host %016llx", (unsigned long long)got, (unsigned long long)want);
            GC_CHECK(got == again, "two device runs differ");
        }
    /* one byte changed on the device changes the hash */
    gc_case_set("one byte changed");
    uint64_t before = 0, after = 0;
    drift_recorder_hash64(d, big, 1, NULL, &before, &e);
    unsigned char x = (unsigned char)(h[big / 2] ^ 0x20);
    cudaMemcpy(d + big / 2, &x, 1, cudaMemcpyHostToDevice);
    drift_recorder_hash64(d, big, 1, NULL, &after, &e);
    GC_CHECK(before != after, "hash unchanged");
    h[big / 2] = x;
    GC_CHECK(after == drift_hash64(h, big, 4), "host and device disagree after the change");
    /* throughput, informative */
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, NULL);
    for (int i = 0; i < 10; i++) drift_recorder_hash64(d, big, 1, NULL, &after, &e);
    cudaEventRecord(b, NULL);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    printf("  device drift-sum64: %.1f GB/s (64 MiB, incl. the host round trip per call)\n",
           10.0 * (double)big / 1e9 / (ms / 1e3));
    cudaFree(d);
    free(h);
    return gc_finish("test_cuda_hash");
}
