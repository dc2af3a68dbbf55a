// The GPU oracle's fp64 GEMM (ref_cuda_internal.h rcu_gemm): every output
// C[m, n] = sum over k of A[m, k] B(k, n) accumulated from +0.0 in k order,
// one separate multiply and add per term (no FMA, no split over k), then the
// epilogue: exactly the loops of kernels/ref/ref_backend.c (linear_rows,
// attn_score, the value accumulation of attn_rows), so the CPU and GPU
// oracles agree bit for bit. Tiled over M and N (128 x 128 per block, 8 x 8
// per thread, strided by 16 so that shared-memory reads are conflict-free)
// with K tiles of 8 staged through shared memory (two buffers: cp.async
// fetches the next tile while this one is summed); the order within a sum is
// never changed. blockIdx.z walks a batch of (batch, head) pairs.
// Compiled with --fmad=false (CMakeLists.txt).
#include "kernels/cuda/ref_cuda_internal.h"

#define GT 128     // block tile, M and N
#define GT_K 8     // K tile
#define GT_R 8     // outputs per thread, each way
#define GT_THREADS 256 // 16 x 16

// 8-byte global -> shared copy (sm_80+); src_bytes 0 zero-fills.
__device__ __forceinline__ void cp_async8(double *dst, const double *src, int src_bytes) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait1() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

// Tile k0 of A (As[k][m]) and B (Bs[k][n]) into shared memory, zeros outside.
template <bool B_NK>
__device__ __forceinline__ void load_tile(double (*As)[GT + 1], double (*Bs)[GT + 1], const double *a, int64_t lda,
                                          const double *b, int64_t ldb, int64_t m0, int64_t n0, int64_t M, int64_t N,
                                          int64_t K, int64_t k0) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int l = 0; l < GT * GT_K / GT_THREADS; l++) { // A[m, k]: 8 consecutive k per row
        const int idx = tid + l * GT_THREADS, mm = idx / GT_K, kk = idx % GT_K;
        const int64_t m = m0 + mm, k = k0 + kk;
        const int in = m < M && k < K;
        cp_async8(&As[kk][mm], in ? a + m * lda + k : a, in ? 8 : 0);
    }
#pragma unroll
    for (int l = 0; l < GT * GT_K / GT_THREADS; l++) {
        const int idx = tid + l * GT_THREADS;
        const int nn = B_NK ? idx / GT_K : idx % GT, kk = B_NK ? idx % GT_K : idx / GT;
        const int64_t n = n0 + nn, k = k0 + kk;
        const int in = n < N && k < K;
        // B(k, n) = b[n * ldb + k] (B_NK) or b[k * ldb + n]
        cp_async8(&Bs[kk][nn], in ? b + (B_NK ? n * ldb + k : k * ldb + n) : b, in ? 8 : 0);
    }
}

template <bool B_NK>
__global__ void __launch_bounds__(GT_THREADS, 1)
    k_gemm64(const double *__restrict__ a, int64_t lda, const double *__restrict__ b, int64_t ldb, double *c,
             int64_t ldc, int64_t M, int64_t N, int64_t K, int epi, const double *__restrict__ vec, double scale,
             rcu_batch bt) {
    __shared__ double As[2][GT_K][GT + 1];
    __shared__ double Bs[2][GT_K][GT + 1];
    const int64_t z0 = blockIdx.z / bt.inner, z1 = blockIdx.z % bt.inner;
    a += z0 * bt.a[0] + z1 * bt.a[1];
    b += z0 * bt.b[0] + z1 * bt.b[1];
    c += z0 * bt.c[0] + z1 * bt.c[1];
    if (vec) vec += z0 * bt.v[0] + z1 * bt.v[1];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t m0 = (int64_t)blockIdx.y * GT, n0 = (int64_t)blockIdx.x * GT;
    double acc[GT_R][GT_R];
#pragma unroll
    for (int i = 0; i < GT_R; i++)
#pragma unroll
        for (int j = 0; j < GT_R; j++) acc[i][j] = 0.0;
    if (K > 0) load_tile<B_NK>(As[0], Bs[0], a, lda, b, ldb, m0, n0, M, N, K, 0);
    cp_async_commit();
    int buf = 0;
    for (int64_t k0 = 0; k0 < K; k0 += GT_K, buf ^= 1) {
        if (k0 + GT_K < K) load_tile<B_NK>(As[buf ^ 1], Bs[buf ^ 1], a, lda, b, ldb, m0, n0, M, N, K, k0 + GT_K);
        cp_async_commit(); // possibly empty: the wait below counts groups
        cp_async_wait1();  // this tile's group has landed
        __syncthreads();
        const int kn = K - k0 < GT_K ? (int)(K - k0) : GT_K;
        if (kn == GT_K) {
#pragma unroll
            for (int kk = 0; kk < GT_K; kk++) {
                double av[GT_R], bv[GT_R];
#pragma unroll
                for (int i = 0; i < GT_R; i++) av[i] = As[buf][kk][ty + 16 * i];
#pragma unroll
                for (int j = 0; j < GT_R; j++) bv[j] = Bs[buf][kk][tx + 16 * j];
#pragma unroll
                for (int i = 0; i < GT_R; i++)
#pragma unroll
                    for (int j = 0; j < GT_R; j++) acc[i][j] = __dadd_rn(acc[i][j], __dmul_rn(av[i], bv[j]));
            }
        } else {
            for (int kk = 0; kk < kn; kk++) { // the last, partial K tile: only the real k enter a sum
                double av[GT_R], bv[GT_R];
#pragma unroll
                for (int i = 0; i < GT_R; i++) av[i] = As[buf][kk][ty + 16 * i];
#pragma unroll
                for (int j = 0; j < GT_R; j++) bv[j] = Bs[buf][kk][tx + 16 * j];
#pragma unroll
                for (int i = 0; i < GT_R; i++)
#pragma unroll
                    for (int j = 0; j < GT_R; j++) acc[i][j] = __dadd_rn(acc[i][j], __dmul_rn(av[i], bv[j]));
            }
        }
        __syncthreads(); // the next iteration's prefetch overwrites this buffer
    }
#pragma unroll
    for (int i = 0; i < GT_R; i++) {
        const int64_t m = m0 + ty + 16 * i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < GT_R; j++) {
            const int64_t n = n0 + tx + 16 * j;
            if (n >= N) continue;
            double v = acc[i][j];
            if (epi == RCU_EPI_BIAS && vec) v = __dadd_rn(v, vec[n]);
            else if (epi == RCU_EPI_SCALE) v = __dmul_rn(v, scale);
            else if (epi == RCU_EPI_DIV_ROW) v = __ddiv_rn(v, vec[m]);
            c[m * ldc + n] = v;
        }
    }
}

extern "C" cudaError_t rcu_gemm(cudaStream_t s, int b_nk, const double *a, int64_t lda, const double *b, int64_t ldb,
                                double *c, int64_t ldc, int64_t M, int64_t N, int64_t K, int epi, const double *vec,
                                double scale, const rcu_batch *batch) {
    rcu_batch bt;
    if (batch) {
        bt = *batch;
    } else {
        bt.count = bt.inner = 1;
        bt.a[0] = bt.a[1] = bt.b[0] = bt.b[1] = bt.c[0] = bt.c[1] = bt.v[0] = bt.v[1] = 0;
    }
    if (M <= 0 || N <= 0 || bt.count <= 0) return cudaSuccess;
    if (bt.count > 65535 || bt.inner < 1) return cudaErrorInvalidValue;
    const int64_t rows_per_launch = (int64_t)65535 * GT; // gridDim.y's limit
    for (int64_t r = 0; r < M; r += rows_per_launch) {
        const int64_t mr = M - r < rows_per_launch ? M - r : rows_per_launch;
        const double *vr = vec && epi == RCU_EPI_DIV_ROW ? vec + r : vec;
        const dim3 grid((unsigned)((N + GT - 1) / GT), (unsigned)((mr + GT - 1) / GT), (unsigned)bt.count);
        if (b_nk)
            k_gemm64<true><<<grid, GT_THREADS, 0, s>>>(a + r * lda, lda, b, ldb, c + r * ldc, ldc, mr, N, K, epi, vr,
                                                       scale, bt);
        else
            k_gemm64<false><<<grid, GT_THREADS, 0, s>>>(a + r * lda, lda, b, ldb, c + r * ldc, ldc, mr, N, K, epi, vr,
                                                        scale, bt);
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
