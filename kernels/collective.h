/* Collectives of the kernels (DESIGN.md s2): NCCL for the multi-GPU replay,
 * one communicator per CUDA backend, collectives queued on the backend's own
 * stream (kernels/cuda/nccl_comm.c). Plain C: no NCCL or CUDA header is
 * needed to include this file, and every build links these functions: in a
 * build without NCCL (CMake option DRIFT_NCCL) drift_nccl_available() is 0
 * and the others fail with DRIFT_E_UNSUPPORTED (kernels/collective_stub.c).
 *
 * Thread-safety: a communicator is used by one host thread at a time (the
 * one that uses its backend). The communicators of one process made by
 * drift_nccl_comm_init_all may be driven from one thread each, concurrently;
 * every member must issue the same collectives in the same order. */
#ifndef DRIFT_KERNELS_COLLECTIVE_H
#define DRIFT_KERNELS_COLLECTIVE_H

#include <stddef.h>

#include "formats/err.h"
#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DRIFT_NCCL_ID_BYTES 128  /* NCCL_UNIQUE_ID_BYTES */

typedef struct drift_nccl_comm drift_nccl_comm;

enum { DRIFT_NCCL_F64 = 0, DRIFT_NCCL_I64 = 1 };

/* 1 if this build has NCCL (the functions below work), else 0. */
int drift_nccl_available(void);
/* ncclGetUniqueId (rank 0 of a multi-process group; broadcast it). */
int drift_nccl_unique_id(unsigned char id[DRIFT_NCCL_ID_BYTES], drift_err *err);
/* Communicators over the devices of n CUDA backends of this process
 * (ncclCommInitAll; backend i is rank i). out[0..n-1] owned by the caller
 * (drift_nccl_comm_free each). Backends borrowed: they must outlive them. */
int drift_nccl_comm_init_all(int n, const drift_backend *const *be, drift_nccl_comm **out, drift_err *err);
/* This process's rank of an nranks group (ncclCommInitRank) on be's device. */
int drift_nccl_comm_init_rank(const drift_backend *be, int nranks, int rank, const unsigned char id[DRIFT_NCCL_ID_BYTES],
                              drift_nccl_comm **out, drift_err *err);
/* In-place allreduce of n host values (DRIFT_NCCL_F64: double, _I64:
 * int64_t), SUM or (is_max) MAX, staged through device memory on the
 * backend's stream; returns when the result is on the host. */
int drift_nccl_allreduce_host(drift_nccl_comm *c, void *host, size_t n, int type, int is_max, drift_err *err);
/* ncclAllGather of send's bytes into recv (both on the comm's backend, same
 * dtype, recv->numel = nranks * send->numel), queued on the backend's stream. */
int drift_nccl_allgather_tensor(drift_nccl_comm *c, const drift_tensor *send, drift_tensor *recv, drift_err *err);
/* Destroys the communicator and its staging memory (NULL allowed). */
void drift_nccl_comm_free(drift_nccl_comm *c);

#ifdef __cplusplus
}
#endif

#endif
