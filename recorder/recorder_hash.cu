// The recorder's device content hash (drift_recorder_hash64 with
// on_device = 1): the kernel of hash64_kernel.cuh, here so that
// libdrift_recorder.so (CUDA runtime linked statically) carries it.
#include "recorder/hash64_kernel.cuh"

extern "C" int drift_rec_hash64_device(const void *p, size_t n, void *stream, unsigned long long *sum) {
    cudaStream_t st = (cudaStream_t)stream;
    unsigned long long *d = NULL;
    cudaError_t e = cudaMallocAsync((void **)&d, sizeof *d, st);
    if (e == cudaSuccess) e = dh_sum64_launch(p, n, d, st);
    if (e == cudaSuccess) e = cudaMemcpyAsync(sum, d, sizeof *sum, cudaMemcpyDeviceToHost, st);
    if (d) cudaFreeAsync(d, st);
    if (e == cudaSuccess) e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return (int)e;
}
