/* drift's fp32 GEMM, the one matmul of the cpu backend (LINEAR, ATTENTION's
 * q k^T and P V, BMM/baddbmm, convolutions lowered to PATCHIFY + LINEAR).
 *
 * C[m, n] = sum_k A[m, k] B[k, n] in one order per output element that
 * depends on K alone (not on M, N, the position of the row or column, the
 * thread count, the processor or the instruction set):
 *
 *   K is cut into blocks of DRIFT_GEMM_KC (256) from k = 0; the last block
 *   holds the rest. Within block b, p_b = 0.0f, then for k in increasing
 *   order p_b = fmaf(A[m, k], B[k, n], p_b) (fp32 fused multiply-add: one
 *   rounding per k). Then C = p_0, C = C + p_1, ..., C = C + p_last (fp32
 *   additions in block order). K = 0 gives C = 0.
 *
 * The AVX2+FMA path (chosen at run time on x86-64 CPUs that have both) runs
 * eight output columns per instruction and the same operations per element;
 * the portable scalar path runs the same order through fmaf(). Both give the
 * same bits (tests/kernels/test_cpu_gemm.c); DRIFT_CPU_GEMM=scalar forces
 * the scalar path. That path is for CPUs without AVX2+FMA (x86-64 ones from
 * before 2013) and for checking: on x86-64 fmaf is a libm call per product,
 * about 100x slower than the AVX2+FMA path (0.6 GFLOP/s on a Zen 3).
 * Threads split the output into tiles (never K). */
#ifndef DRIFT_KERNELS_CPU_GEMM_H
#define DRIFT_KERNELS_CPU_GEMM_H

#include <stdint.h>

#define DRIFT_GEMM_KC 256

/* Operands by strides, so that every layout (x W^T, P V, batched) is one
 * call without copies: A(m, k) = a[m * a_m + k * a_k], B(k, n) = b[k * b_k +
 * n * b_n], C(m, n) = c[m * c_m + n]. C is written, never read first. */
typedef struct drift_gemm {
    int64_t M, N, K;
    const float *a;
    int64_t a_m, a_k;
    const float *b;
    int64_t b_k, b_n;
    float *c;
    int64_t c_m;
} drift_gemm;

/* C = A B on up to nthreads threads. 0, or -1 when the packing buffers
 * cannot be allocated (C then unspecified). */
int drift_cpu_gemm(int nthreads, const drift_gemm *g);

/* The path drift_cpu_gemm takes now: "avx2+fma" or "scalar". */
const char *drift_cpu_gemm_path(void);

/* Tests: 1 forces the scalar path (as DRIFT_CPU_GEMM=scalar), 0 restores
 * the automatic choice. Process-wide; not to be flipped while a GEMM runs. */
void drift_cpu_gemm_force_scalar(int on);

#endif
