/* Internal to drift_kernels: what the host backends (ref in kernels/ref,
 * cpu in kernels/cpu) and kernels/backend.c share. Not a public header: only
 * files of the kernels module include it.
 *
 * Threading policy (one place, used by both host backends):
 *  - drift_backend_host_threads() (kernels/backend_impl.h) is the number of
 *    worker threads: the spec's threads= option, else the process default
 *    (drift_backend_set_host_threads; the CLI sets it from DRIFT_CPU_THREADS),
 *    else the number of online cores capped at DRIFT_HOST_MAX_THREADS. Fixed
 *    at backend creation.
 *  - The host backends' own loops (elementwise, norms, softmax rows, the ref
 *    backend's naive GEMMs, movement ops) split work by output element / row
 *    in contiguous ranges; every output element is computed by exactly one
 *    thread with one fixed operation order, so their results do not depend on
 *    the thread count.
 *  - GEMMs of the cpu backend are drift's own (kernels/cpu/cpu_gemm.h): they
 *    split the output into tiles, never K, and compute every element in one
 *    order that depends on K alone, on every processor (AVX2+FMA or the
 *    scalar path, the same bits). Bit-for-bit replays therefore hold across
 *    thread counts and machines. OpenBLAS stays linked (benchmarks); the
 *    backend still sets its thread count and checks its buffer space. */
#ifndef DRIFT_KERNELS_HOST_INTERNAL_H
#define DRIFT_KERNELS_HOST_INTERNAL_H

#include <stdint.h>

#include "kernels/backend_impl.h"

#define DRIFT_HOST_MAX_THREADS 8

/* DRIFT_OK if the address space left under RLIMIT_AS (ulimit -v) holds the
 * GEMM buffers OpenBLAS maps for nthreads threads (always, without a limit);
 * else DRIFT_E_NOMEM saying so (kernels/cpu/cpu_blas_space.c: OpenBLAS
 * retries a failed buffer mmap forever). Allocates nothing it keeps. */
int drift_cpu_blas_space_check(int nthreads, drift_err *err);

/* Calls fn(ctx, begin, end) over [0, n) split into at most nthreads
 * contiguous ranges of at least grain indices each (the last may be shorter),
 * the first range on the calling thread. If a thread cannot be started its
 * range runs on the calling thread: the call never fails and every index is
 * visited exactly once. */
typedef void (*drift_host_range_fn)(void *ctx, int64_t begin, int64_t end);
void drift_host_parallel_for(int nthreads, int64_t n, int64_t grain, drift_host_range_fn fn, void *ctx);

/* A host backend (cpu, ref): a copy of iface's entries (borrowed), threads=
 * (and for the cpu backend, cpu_options = 1, attn_tile= and gpu_as=) checked into a
 * context, name set, sync a no-op, destroy freeing the table and the
 * context. Caller owns *out (drift_backend_free). */
int drift_host_backend_new(const drift_backend_opts *o, const char *name, const drift_backend *iface, int cpu_options,
                           drift_backend **out, drift_err *err);
/* The thread count of a backend made by drift_host_backend_new. */
int drift_host_backend_threads(const drift_backend *be);
/* The cpu backend's attention key tile (attn_tile=, default
 * DRIFT_CPU_ATTN_TILE; 0: one softmax over all keys). */
enum { DRIFT_CPU_ATTN_TILE = 128 };
int drift_host_backend_attn_tile(const drift_backend *be);
/* The cpu backend's GEMM-form table (gpu_as=, kernels/gemm_forms.h), -1 none. */
int drift_host_backend_gemm_table(const drift_backend *be);

/* The cpu backend's op bodies (kernels/cpu/cpu_ops.c); the arguments are
 * already validated by the door (kernels/door.c). */
int drift_cpu_run_op(int nthreads, int attn_tile, int gemm_table, const drift_op *op, const drift_tensor *const *in,
                     drift_tensor *out, drift_err *err);

/* ATTENTION in FlashAttention-2's order (kernels/cpu/cpu_attn_fa2.c): op->sub
 * DRIFT_ATTN_ORDER_LAST_FIRST, 16-bit compute (a bias in3: is_causal's); sms: the recording
 * GPU's SM count for the split-KV heuristic (0: unknown, no split). */
int drift_cpu_attention_fa2(int nthreads, int sms, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                            drift_err *err);

/* The ref backend's op bodies (kernels/ref/ref_backend.c): every tensor's
 * data is doubles (whatever its logical dtype), computed in fp64, never
 * rounded. The cpu backend runs its fp64 ops through them
 * (kernels/cpu/cpu_f64.c). Arguments validated by the door; nthreads >= 1. */
int drift_ref_run_op(int nthreads, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                     drift_err *err);

/* 1 if op touches fp64 (op->out, op->compute or an input is F64): the cpu
 * backend then runs it on its fp64 path. in: op->n_in tensors. */
int drift_cpu_op_is_f64(const drift_op *op, const drift_tensor *const *in);
/* The cpu backend's fp64 path (kernels/cpu/cpu_f64.c): inputs widened to
 * fp64 (F64 ones used as they are), the ref backend's body
 * (drift_ref_run_op), the result kept (out F64) or rounded once to fp32 and
 * then to out's dtype (as torch's double -> bf16 conversion goes through
 * float). Temporaries are its own; in and out borrowed. */
int drift_cpu_run_f64(int nthreads, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                      drift_err *err);

#endif
