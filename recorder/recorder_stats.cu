// Stats row of a sampled-out device tensor, computed on the device so that
// only 56 bytes cross PCIe (recorder_cuda.c). Same definition as
// drift_trace_stats_compute (formats/trace.h): values widened to fp32, then
// fp64 accumulation; min/max over the non-NaN values; mean, mean_abs and l2
// over the finite values, NaN when there are none. The summation order
// differs from the host's (per-thread, then tree), so sums can differ from
// a host computation in the last bits; min, max and the counts are exact.
//
// Two passes, no atomics, deterministic for a given n: pass 1 writes one
// partial per block into scratch, pass 2 (one block) reduces them and writes
// the drift_trace_stats layout, which is then copied to pinned host memory
// on the same stream.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;

struct Partial {
    double mn, mx, sum, sabs, ssq;
    long long nan, inf, nonnan;
};

// Layout of drift_trace_stats (formats/trace.h): 5 doubles, 2 int64.
struct Stats {
    double min, max, mean, mean_abs, l2;
    long long nan_count, inf_count;
};
static_assert(sizeof(Stats) == 56, "drift_trace_stats layout");

__device__ __forceinline__ float load_widen(const void *p, int dtype, long long i) {
    if (dtype == 2) {  // DRIFT_BF16
        unsigned short h = static_cast<const unsigned short *>(p)[i];
        return __uint_as_float(static_cast<unsigned int>(h) << 16);
    }
    if (dtype == 3) {  // DRIFT_F16
        unsigned short h = static_cast<const unsigned short *>(p)[i];
        return __half2float(__ushort_as_half(h));
    }
    return static_cast<const float *>(p)[i];
}

__device__ __forceinline__ void merge(Partial &a, const Partial &b) {
    a.mn = fmin(a.mn, b.mn);
    a.mx = fmax(a.mx, b.mx);
    a.sum += b.sum;
    a.sabs += b.sabs;
    a.ssq += b.ssq;
    a.nan += b.nan;
    a.inf += b.inf;
    a.nonnan += b.nonnan;
}

__device__ __forceinline__ Partial empty_partial() {
    Partial p;
    p.mn = INFINITY;
    p.mx = -INFINITY;
    p.sum = p.sabs = p.ssq = 0.0;
    p.nan = p.inf = p.nonnan = 0;
    return p;
}

__device__ void block_reduce(Partial &p, Partial *sh) {
    sh[threadIdx.x] = p;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) merge(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    p = sh[0];
}

__global__ void stats_pass1(const void *data, int dtype, long long n, Partial *parts) {
    __shared__ Partial sh[kThreads];
    Partial p = empty_partial();
    long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = load_widen(data, dtype, i);
        if (isnan(v)) {
            p.nan++;
            continue;
        }
        double x = v;
        p.nonnan++;
        p.mn = fmin(p.mn, x);
        p.mx = fmax(p.mx, x);
        if (isinf(v)) {
            p.inf++;
            continue;
        }
        p.sum += x;
        p.sabs += fabs(x);
        p.ssq += x * x;
    }
    block_reduce(p, sh);
    if (threadIdx.x == 0) parts[blockIdx.x] = p;
}

__global__ void stats_pass2(const Partial *parts, int nparts, Stats *out) {
    __shared__ Partial sh[kThreads];
    Partial p = empty_partial();
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) merge(p, parts[i]);
    block_reduce(p, sh);
    if (threadIdx.x == 0) {
        long long fin = p.nonnan - p.inf;
        Stats s;
        s.min = p.nonnan ? p.mn : NAN;
        s.max = p.nonnan ? p.mx : NAN;
        s.mean = fin ? p.sum / static_cast<double>(fin) : NAN;
        s.mean_abs = fin ? p.sabs / static_cast<double>(fin) : NAN;
        s.l2 = fin ? sqrt(p.ssq) : NAN;
        s.nan_count = p.nan;
        s.inf_count = p.inf;
        *out = s;
    }
}

}  // namespace

// Loads both kernels now. With CUDA's lazy module loading (the default
// since 12.2) the first launch would load them, and loading waits for the
// device to go idle: measured on an H200, a first capture waited for the
// job's stream. Called at setup (drift_recorder_prepare_device).
extern "C" int drift_rec_stats_preload(void) {
    cudaFuncAttributes a;
    cudaError_t e = cudaFuncGetAttributes(&a, stats_pass1);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, stats_pass2);
    return static_cast<int>(e);
}

extern "C" size_t drift_rec_stats_scratch_bytes(void) {
    return sizeof(Partial) * kMaxBlocks + sizeof(Stats) + 256;
}

// Queues both passes and the 56-byte copy to host_out (pinned) on stream.
// Returns a cudaError_t (0 = queued).
extern "C" int drift_rec_stats_launch(const void *data, int dtype, int64_t n, void *scratch, void *host_out,
                                      void *stream) {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    Partial *parts = static_cast<Partial *>(scratch);
    Stats *res = reinterpret_cast<Stats *>(static_cast<char *>(scratch) + sizeof(Partial) * kMaxBlocks);
    long long per = static_cast<long long>(kThreads) * 8;
    long long nb = (n + per - 1) / per;
    int blocks = nb < 1 ? 1 : (nb > kMaxBlocks ? kMaxBlocks : static_cast<int>(nb));
    stats_pass1<<<blocks, kThreads, 0, s>>>(data, dtype, static_cast<long long>(n), parts);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return static_cast<int>(e);
    stats_pass2<<<1, kThreads, 0, s>>>(parts, blocks, res);
    e = cudaGetLastError();
    if (e != cudaSuccess) return static_cast<int>(e);
    return static_cast<int>(cudaMemcpyAsync(host_out, res, sizeof(Stats), cudaMemcpyDeviceToHost, s));
}
