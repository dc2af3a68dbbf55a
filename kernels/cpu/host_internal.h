/* Internal to drift_kernels: what the host backends (ref in kernels/ref,
 * cpu in kernels/cpu) and kernels/backend.c share. Not a public header: only
 * files of the kernels module include it.
 *
 * Threading policy (one place, used by both host backends):
 *  - drift_host_threads() is the number of worker threads: the environment
 *    variable DRIFT_CPU_THREADS (1..256) when set, else the number of online
 *    cores capped at DRIFT_HOST_MAX_THREADS. Read once per backend creation.
 *  - The host backends' own loops (elementwise, norms, softmax rows, the ref
 *    backend's naive GEMMs, movement ops) split work by output element / row
 *    in contiguous ranges; every output element is computed by exactly one
 *    thread with one fixed operation order, so their results do not depend on
 *    the thread count.
 *  - GEMMs of the cpu backend go through OpenBLAS (cblas_sgemm), whose thread
 *    count is process-global: the cpu backend sets it (openblas_set_num_threads)
 *    to drift_host_threads() at every creation. OpenBLAS is deterministic for
 *    a fixed thread count, shape and CPU kernel, but a different
 *    OPENBLAS_NUM_THREADS / DRIFT_CPU_THREADS or a different CPU (another
 *    dispatch kernel) may change GEMM bits. Bit-for-bit replays therefore
 *    hold run to run on one machine with the same setting. */
#ifndef DRIFT_KERNELS_HOST_INTERNAL_H
#define DRIFT_KERNELS_HOST_INTERNAL_H

#include <stdint.h>

#include "kernels/backend.h"

#define DRIFT_HOST_MAX_THREADS 8

/* Backend constructors (dispatched by drift_backend_create). Caller owns *out. */
int drift_ref_backend_create(drift_backend **out, drift_err *err);
int drift_cpu_backend_create(drift_backend **out, drift_err *err);

/* The thread count of the policy above (>= 1). */
int drift_host_threads(void);

/* Calls fn(ctx, begin, end) over [0, n) split into at most nthreads
 * contiguous ranges of at least grain indices each (the last may be shorter),
 * the first range on the calling thread. If a thread cannot be started its
 * range runs on the calling thread: the call never fails and every index is
 * visited exactly once. */
typedef void (*drift_host_range_fn)(void *ctx, int64_t begin, int64_t end);
void drift_host_parallel_for(int nthreads, int64_t n, int64_t grain, drift_host_range_fn fn, void *ctx);

/* Validates a run() call: op and its n_in, every input allocated on be,
 * out allocated on be with out->dtype == op->out and the shape
 * drift_op_infer_shape gives (for VIEW and UNPATCHIFY, out's shape is the
 * requested one and is validated instead), numel consistent, and out not
 * overlapping any input. DRIFT_E_INPUT (or DRIFT_E_UNSUPPORTED when
 * be->supports_op says no) with a message naming the op. */
int drift_host_check_run(const drift_backend *be, const drift_op *op, const drift_tensor *const *in,
                         const drift_tensor *out, size_t elem_size, drift_err *err);

/* Broadcast plan of a binary op (numpy rules) for a contiguous output:
 * dims of size 1 removed and mergeable neighbours collapsed, so that the
 * innermost dim is as long as possible. Strides are in elements (0 where an
 * operand is broadcast). */
typedef struct drift_bcast {
    int nd;                         /* >= 1 */
    int64_t shape[DRIFT_MAX_DIMS];  /* collapsed output shape */
    int64_t sa[DRIFT_MAX_DIMS];     /* strides of in0 */
    int64_t sb[DRIFT_MAX_DIMS];     /* strides of in1 */
    int64_t numel;
} drift_bcast;
void drift_host_bcast_plan(const drift_tensor *a, const drift_tensor *b, drift_bcast *bc);

/* The cpu backend's op bodies (kernels/cpu/cpu_ops.c); the arguments are
 * already validated by drift_host_check_run. */
int drift_cpu_run_op(int nthreads, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                     drift_err *err);

/* Normalises a possibly negative dim against ndim; -1 if out of range. */
int drift_host_norm_dim(int dim, int ndim);

#endif
