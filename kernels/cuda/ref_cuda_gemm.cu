// The GPU oracle's fp64 GEMM (ref_cuda_internal.h rcu_gemm): every output
// C[m, n] = sum over k of A[m, k] B(k, n) accumulated from +0.0 in k order,
// one separate multiply and add per term (no FMA, no split over k), then the
// epilogue: exactly the loops of kernels/ref/ref_backend.c (linear_rows,
// attn_score, the value accumulation of attn_rows), so the CPU and GPU
// oracles agree bit for bit. Tiled over M and N (64 x 64 per block, 4 x 4 per
// thread) with the K tiles staged through shared memory; the order within a
// sum is never changed. Compiled with --fmad=false (CMakeLists.txt).
#include "kernels/cuda/ref_cuda_internal.h"

#define GT_M 64
#define GT_N 64
#define GT_K 16
#define GT_THREADS 256 // 16 x 16, each 4 x 4 outputs strided by 16

template <bool B_NK>
__global__ void __launch_bounds__(GT_THREADS) k_gemm64(const double *__restrict__ a, int64_t lda,
                                                       const double *__restrict__ b, int64_t ldb, double *c, int64_t ldc,
                                                       int64_t M, int64_t N, int64_t K, int epi,
                                                       const double *__restrict__ vec, double scale) {
    __shared__ double As[GT_K][GT_M + 1];
    __shared__ double Bs[GT_K][GT_N + 1];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t m0 = (int64_t)blockIdx.y * GT_M, n0 = (int64_t)blockIdx.x * GT_N;
    double acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0;
    for (int64_t k0 = 0; k0 < K; k0 += GT_K) {
        const int kn = K - k0 < GT_K ? (int)(K - k0) : GT_K;
        for (int l = 0; l < GT_M * GT_K / GT_THREADS; l++) { // A[m, k]: 16 consecutive k per row
            const int idx = tid + l * GT_THREADS, mm = idx / GT_K, kk = idx % GT_K;
            const int64_t m = m0 + mm;
            As[kk][mm] = (m < M && kk < kn) ? a[m * lda + k0 + kk] : 0.0;
        }
        for (int l = 0; l < GT_N * GT_K / GT_THREADS; l++) {
            const int idx = tid + l * GT_THREADS;
            if (B_NK) { // B(k, n) = b[n * ldb + k]
                const int nn = idx / GT_K, kk = idx % GT_K;
                const int64_t n = n0 + nn;
                Bs[kk][nn] = (n < N && kk < kn) ? b[n * ldb + k0 + kk] : 0.0;
            } else { // B(k, n) = b[k * ldb + n]
                const int kk = idx / GT_N, nn = idx % GT_N;
                const int64_t n = n0 + nn;
                Bs[kk][nn] = (n < N && kk < kn) ? b[(k0 + kk) * ldb + n] : 0.0;
            }
        }
        __syncthreads();
        for (int kk = 0; kk < kn; kk++) { // only the real k: no padded terms enter a sum
            double av[4], bv[4];
            for (int i = 0; i < 4; i++) av[i] = As[kk][ty + 16 * i];
            for (int j = 0; j < 4; j++) bv[j] = Bs[kk][tx + 16 * j];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) acc[i][j] = __dadd_rn(acc[i][j], __dmul_rn(av[i], bv[j]));
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; i++) {
        const int64_t m = m0 + ty + 16 * i;
        if (m >= M) continue;
        for (int j = 0; j < 4; j++) {
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
                                double scale) {
    if (M <= 0 || N <= 0) return cudaSuccess;
    const int64_t rows_per_launch = (int64_t)65535 * GT_M; // gridDim.y's limit
    for (int64_t r = 0; r < M; r += rows_per_launch) {
        const int64_t mr = M - r < rows_per_launch ? M - r : rows_per_launch;
        const double *vr = vec && epi == RCU_EPI_DIV_ROW ? vec + r : vec;
        const dim3 grid((unsigned)((N + GT_N - 1) / GT_N), (unsigned)((mr + GT_M - 1) / GT_M));
        if (b_nk)
            k_gemm64<true><<<grid, GT_THREADS, 0, s>>>(a + r * lda, lda, b, ldb, c + r * ldc, ldc, mr, N, K, epi, vr, scale);
        else
            k_gemm64<false><<<grid, GT_THREADS, 0, s>>>(a + r * lda, lda, b, ldb, c + r * ldc, ldc, mr, N, K, epi, vr, scale);
        const cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}
