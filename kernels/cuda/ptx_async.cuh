/* PTX wrappers shared by the fused attention kernels (sm_80+): shared-memory
 * addresses, cp.async 16-byte copies and their groups, ldmatrix. Device-only
 * helpers; nothing here allocates or owns memory. */
#ifndef DRIFT_KERNELS_CUDA_PTX_ASYNC_CUH
#define DRIFT_KERNELS_CUDA_PTX_ASYNC_CUH

#include "kernels/cuda/dev_common.cuh"

/* Shared-state-space address of a generic pointer into shared memory. */
DCU_DEV uint32_t dcu_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16-byte global -> shared copy; src_bytes == 0 zero-fills the destination. */
DCU_DEV void dcu_cp_async16(uint32_t dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
DCU_DEV void dcu_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* Waits until at most N committed groups of this thread are still in flight. */
template <int N>
DCU_DEV void dcu_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

DCU_DEV void dcu_ldsm_x4(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr)
                 : "memory");
}
DCU_DEV void dcu_ldsm_x4_trans(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2, uint32_t &r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr)
                 : "memory");
}

#endif
