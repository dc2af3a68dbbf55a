// drift-sum64 of device memory (cuda_backend.h: drift_cuda_hash64).
extern "C" { /* C declarations first: the headers below include them again (guarded) */
#include "formats/err.h"
#include "formats/hash64.h"
#include "kernels/backend.h"
}
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/hash64_kernel.cuh"

extern "C" int drift_cuda_hash64(const void *dev_ptr, size_t nbytes, void *stream, uint64_t *out, drift_err *err) {
    cudaStream_t st = (cudaStream_t)stream;
    unsigned long long *dsum = NULL, hsum = 0;
    cudaError_t e = cudaMallocAsync((void **)&dsum, sizeof *dsum, st);
    if (e == cudaSuccess) e = dh_sum64_launch(dev_ptr, nbytes, dsum, st);
    if (e == cudaSuccess) e = cudaMemcpyAsync(&hsum, dsum, sizeof hsum, cudaMemcpyDeviceToHost, st);
    if (dsum) cudaFreeAsync(dsum, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return drift_err_set(err, DRIFT_E_IO, "hash64", "drift-sum64 on the device: %s", cudaGetErrorString(e));
    }
    *out = drift_hash64_finish((uint64_t)hsum, (uint64_t)nbytes);
    return DRIFT_OK;
}
