/* The drift-sum64 partial sum (formats/hash64.h) on a GPU, for
 * recorder/recorder_hash.cu (CUDA C++ only): the recorder hashes parameters
 * where they live, replay checks them on the host while reading
 * (formats/checkpoint.c); tests/gpu/test_cuda_hash.c checks both agree.
 * Each thread sums fmix64(w_i + (i + 1) * golden) over a grid stride of
 * words; warps reduce with shuffles and one atomicAdd per warp adds into
 * *sum. Addition modulo 2^64 commutes, so the result does not depend on the
 * launch configuration or the atomics' order. */
#ifndef DRIFT_RECORDER_HASH64_KERNEL_CUH
#define DRIFT_RECORDER_HASH64_KERNEL_CUH

#include <stdint.h>

#include <cuda_runtime.h>

__device__ __forceinline__ unsigned long long dh_fmix(unsigned long long k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

/* Bytes p[0..n): aligned = p is 8-byte aligned (words loaded whole). */
__global__ void dh_sum64_kernel(const unsigned char *p, unsigned long long n, int aligned, unsigned long long *sum) {
    const unsigned long long words = (n + 7) / 8, full = n / 8;
    unsigned long long s = 0;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < words;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long w = 0;
        if (i < full && aligned) {
            w = reinterpret_cast<const unsigned long long *>(p)[i];
        } else {
            const unsigned long long nb = i < full ? 8 : n - 8 * full;
            for (unsigned long long b = 0; b < nb; b++) w |= (unsigned long long)p[8 * i + b] << (8 * b);
        }
        s += dh_fmix(w + (i + 1) * 0x9E3779B97F4A7C15ull);
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(sum, s);
}

/* Queues the sum of p[0..n) into the device word *dsum (zeroed here). */
static inline cudaError_t dh_sum64_launch(const void *p, size_t n, unsigned long long *dsum, cudaStream_t st) {
    cudaError_t e = cudaMemsetAsync(dsum, 0, sizeof *dsum, st);
    if (e != cudaSuccess || n == 0) return e;
    unsigned long long words = (n + 7) / 8;
    unsigned blocks = (unsigned)((words + 255) / 256);
    if (blocks > 4096) blocks = 4096;
    dh_sum64_kernel<<<blocks, 256, 0, st>>>((const unsigned char *)p, (unsigned long long)n,
                                            ((uintptr_t)p & 7) == 0, dsum);
    return cudaGetLastError();
}

#endif
