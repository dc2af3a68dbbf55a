/* Device memory queries for the replay's memory plan and its report. */
#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime.h>

int drift_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
    if (cudaSetDevice(device) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    cudaError_t e = cudaMemGetInfo(free_bytes, total_bytes);
    if (prev >= 0 && prev != device) cudaSetDevice(prev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return 0;
}
