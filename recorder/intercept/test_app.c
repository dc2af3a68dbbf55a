/* Test program for tests/integration/intercept_local.sh: calls the real
 * cuBLAS, cuBLASLt and NCCL (linked normally) with NULL handles and
 * communicators, which fail without a GPU but must be recorded anyway, inside
 * NVTX ranges (header-only nvtx3: injected when NVTX_INJECTION64_PATH is set).
 * Prints the status of every call; exit 0 unless a setup call fails.
 *
 * Expected census (run under LD_PRELOAD=libdrift_intercept.so):
 *   forward/blocks.0/attn1  cublasGemmEx bf16,bf16->bf16 fp32  64x32x16 (N T)  3 calls
 *   forward/blocks.0/ffn    cublasLtMatmul bf16,bf16->bf16 fp32 bias  m=8 n=4 k=16 (T N)  1 call
 *   fsdp/blocks.0           allgather bf16 count 1000  2 calls; allgather fp32 count 500  1 call
 *   fsdp/blocks.0           reducescatter fp32 sum count 250  1 call
 *   ""                      cublasSgemm_v2 fp32  1 call
 *   wide                    cublasGemmStridedBatchedEx fp16 batch 4  1 call
 *   startend                cublasGemmEx fp32 (a start/end range, empty push stack)  1 call */
#include <stdio.h>
#include <wchar.h>

#include <cublasLt.h>
#include <cublas_api.h>
#include <nccl.h>
#include <nvtx3/nvToolsExt.h>

static int gemm_bf16(void) {
    float one = 1.0f, zero = 0.0f;
    return (int)cublasGemmEx(NULL, CUBLAS_OP_N, CUBLAS_OP_T, 64, 32, 16, &one, NULL, CUDA_R_16BF, 64, NULL,
                             CUDA_R_16BF, 32, &zero, NULL, CUDA_R_16BF, 64, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

int main(void) {
    int rc = 0;
    nvtxRangePushA("forward");
    nvtxRangePushA("blocks.0");
    nvtxRangePushA("attn1");
    for (int i = 0; i < 3; i++) printf("cublasGemmEx -> %d\n", gemm_bf16());
    nvtxRangePop();

    /* D (8 x 4) = op(A) B, A stored 16 x 8 and transposed, B 16 x 4, bias epilogue */
    nvtxRangePushA("ffn");
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    if (cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, 16, 8, 16) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, 16, 4, 16) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, 8, 4, 8) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "test_app: cuBLASLt descriptor setup failed\n");
        return 2;
    }
    int32_t opt = CUBLAS_OP_T;
    uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opt, sizeof opt);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    float one = 1.0f, zero = 0.0f;
    printf("cublasLtMatmul -> %d\n", (int)cublasLtMatmul(NULL, desc, &one, NULL, la, NULL, lb, &zero, NULL, lc, NULL,
                                                         lc, NULL, NULL, 0, NULL));
    nvtxRangePop();
    nvtxRangePop();
    nvtxRangePop();

    nvtxRangePushA("fsdp");
    nvtxRangePushA("blocks.0");
    printf("ncclAllGather -> %d\n", (int)ncclAllGather(NULL, NULL, 1000, ncclBfloat16, NULL, NULL));
    printf("ncclAllGather -> %d\n", (int)ncclAllGather(NULL, NULL, 1000, ncclBfloat16, NULL, NULL));
    printf("ncclAllGather -> %d\n", (int)ncclAllGather(NULL, NULL, 500, ncclFloat32, NULL, NULL));
    printf("ncclReduceScatter -> %d\n", (int)ncclReduceScatter(NULL, NULL, 250, ncclFloat32, ncclSum, NULL, NULL));
    nvtxRangePop();
    nvtxRangePop();

    printf("cublasSgemm_v2 -> %d\n", (int)cublasSgemm_v2(NULL, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, NULL, 4, NULL,
                                                         4, &zero, NULL, 4));

    nvtxRangePushW(L"wide");
    printf("cublasGemmStridedBatchedEx -> %d\n",
           (int)cublasGemmStridedBatchedEx(NULL, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, NULL, CUDA_R_16F, 8, 64,
                                           NULL, CUDA_R_16F, 8, 64, &zero, NULL, CUDA_R_16F, 8, 64, 4,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    nvtxRangePop();

    nvtxRangeId_t id = nvtxRangeStartA("startend");
    printf("cublasGemmEx -> %d\n", (int)cublasGemmEx(NULL, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, NULL, CUDA_R_32F, 2,
                                                     NULL, CUDA_R_32F, 2, &zero, NULL, CUDA_R_32F, 2,
                                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    nvtxRangeEnd(id);
    nvtxMarkA("done");

    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    return rc;
}
