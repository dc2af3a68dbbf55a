/* Address space for OpenBLAS's GEMM buffers (docs/RELIABILITY.md, attack 13).
 *
 * OpenBLAS (0.3.21, Debian 12's x86_64 build; strace shows the mmap) maps a
 * 128 MiB buffer for every thread that runs a GEMM and, when the mmap fails,
 * retries it forever: under an address-space limit (ulimit -v) too low for
 * the threads asked for, a replay hangs instead of failing. The cpu backend
 * therefore checks, before it sets OpenBLAS's thread count, that the space
 * those buffers need can be mapped, and fails with a clear error if not. It
 * is a probe, not a reservation: what drift maps after it (parameters,
 * activations) can still use the space up, and OpenBLAS then still hangs. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE */
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "kernels/cpu/host_internal.h"

#define BLAS_BUFFER_BYTES ((uint64_t)128 << 20) /* OpenBLAS's BUFFER_SIZE on x86_64 */
#define THREAD_STACK_BYTES ((uint64_t)8 << 20)  /* glibc's default pthread stack (RLIMIT_STACK) */
/* Headroom for what drift maps between the probe and the first GEMM (HDF5
 * file buffers, a cached seed-thread stack, the first activations): without
 * it a probe that fits to the MiB passes and the GEMM's buffer then hangs
 * (measured: a CPU-only record under ulimit -v BASE+128 MiB, one thread). */
#define AFTER_PROBE_BYTES ((uint64_t)32 << 20)

int drift_cpu_blas_space_check(int nthreads, drift_err *err) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return DRIFT_OK;
    uint64_t n = nthreads > 0 ? (uint64_t)nthreads : 1;
    /* OpenBLAS's n threads each hold a buffer; the cpu backend's other n - 1
     * threads call GEMMs too (attention, cpu_ops.c) and take one each; every
     * extra thread has a stack. */
    uint64_t need = (2 * n - 1) * BLAS_BUFFER_BYTES + 2 * (n - 1) * THREAD_STACK_BYTES + AFTER_PROBE_BYTES;
    if (need > SIZE_MAX) need = SIZE_MAX;
    void *p = mmap(NULL, (size_t)need, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
        munmap(p, (size_t)need);
        return DRIFT_OK;
    }
    return drift_err_set(err, DRIFT_E_NOMEM, "cpu",
                         "the address-space limit (ulimit -v: %llu MiB) leaves less than the %llu MiB that OpenBLAS's "
                         "GEMM buffers need with %d thread(s) (128 MiB per GEMM thread, 32 MiB headroom; OpenBLAS would retry its "
                         "allocation forever): raise the limit, or use fewer threads (DRIFT_CPU_THREADS=1, or the "
                         "backend spec cpu:threads=1)",
                         (unsigned long long)(rl.rlim_cur >> 20), (unsigned long long)(need >> 20), (int)n);
}
