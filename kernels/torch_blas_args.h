/* torch's cuBLAS arguments for a batched matmul (no CUDA: the derivation only,
 * so that it is unit-tested on any machine; kernels/cuda/torch/bmm_torch.c
 * makes the call). Facts from PyTorch 2.11's aten/src/ATen/native/cuda/Blas.cpp
 * (baddbmm_out_cuda_impl, prepare_batch_matrix_for_cublas; bmm_out_cuda calls
 * it with beta 0, alpha 1) and ATen/native/cuda/cuBlasCommonArgs.h
 * (cublasCommonArgs: mm / addmm on 2-D operands), and
 * ATen/cuda/CUDABlas.cpp's cublasAdjustLdLevel3:
 *
 *  - torch computes the row-major result C = A B as the column-major
 *    C^T = B^T A^T: with a contiguous result, cuBLAS's "A" is torch's batch2
 *    (mat2) and its "B" is batch1 (mat1), m = N, n = M, k = K;
 *  - an operand whose last dim has stride 1 (and whose row stride is >= its
 *    row length) goes as 'n' with ld = that row stride; one whose next-to-last
 *    dim has stride 1 (a transposed view: x.transpose(-1, -2) of a contiguous
 *    x) goes as 't' with ld = its other stride; anything else is first copied
 *    contiguous;
 *  - num_batches == 1 calls gemm (cublasGemmEx / cublasSgemm), otherwise bgemm
 *    (cublasGemmStridedBatchedEx / cublasSgemmStridedBatched) with the batch
 *    strides of the two operands and the result (0 for a batch dim torch
 *    broadcast by expand);
 *  - cublasAdjustLdLevel3 then raises a leading dimension that cuBLAS would
 *    reject for a size-1 dimension. */
#ifndef DRIFT_KERNELS_TORCH_BLAS_ARGS_H
#define DRIFT_KERNELS_TORCH_BLAS_ARGS_H

#include <stdint.h>

/* One operand as torch holds it: [batch, rows, cols] with element strides. */
typedef struct drift_tba_operand {
    int64_t rows, cols;
    int64_t s_batch, s_row, s_col;
} drift_tba_operand;

/* The call torch makes (column-major), operands already swapped: a is cuBLAS's
 * A (which_a: 0 = torch's batch1 / mat1, 1 = batch2 / mat2). */
typedef struct drift_tba_call {
    int which_a;          /* 1 for a contiguous result (torch's batch2 first) */
    int transa, transb;   /* 1 = CUBLAS_OP_T */
    int64_t m, n, k;
    int64_t lda, ldb, ldc;
    int64_t stride_a, stride_b, stride_c;
    int64_t batch;        /* num_batches; 1: gemm, else bgemm */
    int copy_a, copy_b;   /* 1 when torch first copies that operand contiguous
                             (the call then sees the copy's strides, set here) */
} drift_tba_call;

/* The call torch's bmm / baddbmm makes for batch1 a [B, M, K] @ batch2 b
 * [B, K, N] into a contiguous result [B, M, N] (strides M N, N, 1; torch's
 * strides for a size-1 dim are the contiguous formula's). Returns 0, or -1
 * when a dimension is negative or the shapes do not chain. */
int drift_tba_bmm(const drift_tba_operand *a, const drift_tba_operand *b, int64_t batch, drift_tba_call *c);

/* The call torch's mm (addmm_out_cuda_impl's cuBLAS path, cublasCommonArgs)
 * makes for mat1 a [M, K] @ mat2 b [K, N] into a contiguous result [M, N]
 * (s_batch ignored). Returns 0, or -1 as above. */
int drift_tba_mm(const drift_tba_operand *a, const drift_tba_operand *b, drift_tba_call *c);

/* Element strides torch gives a dense [B, R, C] operand: transposed = 0: the
 * contiguous (R C, C, 1); 1: the transpose of a contiguous [B, C, R], i.e.
 * (R C, 1, R). A batch broadcast (expand) has s_batch 0. */
void drift_tba_dense(int64_t R, int64_t C, int transposed, int broadcast, drift_tba_operand *o);

#endif
