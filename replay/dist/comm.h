/* Collectives between the workers of a multi-device or multi-rank replay
 * (DESIGN.md s2: "1..N GPUs"). One drift_comm per worker (a thread of this
 * process, or an MPI rank); every worker of a group calls the same
 * collectives in the same order. Implementations:
 *
 *   local  threads of this process, any backend: host memory and a barrier
 *          (the CPU stand-in, and what tests run without a GPU);
 *   nccl   one CUDA device per worker: NCCL on the backend's stream, for
 *          threads of one process (ncclCommInitAll) or for MPI ranks
 *          (ncclGetUniqueId on rank 0, broadcast through MPI);
 *   mpi    MPI ranks on CPU backends: MPI_Allreduce / MPI_Allgather.
 *
 * Reductions work on host buffers in place (fp64 SUM / MAX, int64 SUM /
 * MAX). allgather works on backend tensors. A failing worker never leaves
 * the others waiting in a collective the drivers control: they exchange
 * an error flag at each phase (see multi.c). */
#ifndef DRIFT_REPLAY_COMM_H
#define DRIFT_REPLAY_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "formats/err.h"
#include "kernels/backend.h"

typedef enum drift_comm_op { DRIFT_COMM_SUM = 0, DRIFT_COMM_MAX = 1 } drift_comm_op;

typedef struct drift_comm drift_comm;
struct drift_comm {
    int rank, size;
    const char *kind;            /* "local", "nccl", "mpi" (static string) */
    int (*allreduce_f64)(drift_comm *c, double *buf, size_t n, drift_comm_op op, drift_err *err);
    int (*allreduce_i64)(drift_comm *c, int64_t *buf, size_t n, drift_comm_op op, drift_err *err);
    /* recv (allocated by the caller on send's backend, same dtype, numel =
     * size * send->numel) receives rank r's send at offset r * send->numel. */
    int (*allgather)(drift_comm *c, const drift_tensor *send, drift_tensor *recv, drift_err *err);
    /* Frees this worker's comm (not the group's shared state while others use it). */
    void (*destroy)(drift_comm *c);
    void *ctx;
};

/* Frees c (NULL allowed). */
void drift_comm_free(drift_comm *c);
/* For the implementations (comm.c, comm_mpi.c): a new communicator with
 * ops's kind and operations, this rank/size and ctx (borrowed until its
 * destroy). NULL when out of memory; the caller frees it via drift_comm_free. */
drift_comm *drift_comm_new(const drift_comm *ops, int rank, int size, void *ctx);

/* n comms over threads of this process (comm i is rank i); *out[i] owned
 * by the caller (drift_comm_free each; the shared state goes with the last). */
int drift_comm_local_group(int n, drift_comm **out, drift_err *err);

/* 1 when this build has NCCL. */
int drift_comm_have_nccl(void);
/* n comms over the CUDA backends be[0..n-1] of this process (ncclCommInitAll). */
int drift_comm_nccl_group(int n, const drift_backend *const *be, drift_comm **out, drift_err *err);
/* One rank's comm over MPI_COMM_WORLD on CUDA backend be: the NCCL id is made
 * on rank 0 and broadcast through MPI. Needs MPI and NCCL. */
int drift_comm_nccl_mpi(const drift_backend *be, drift_comm **out, drift_err *err);

/* ---- MPI ----------------------------------------------------------------------- */
/* 1 when this build has MPI. */
int drift_mpi_available(void);
/* 1 when the environment says this process was launched by mpirun/srun
 * (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK set). */
int drift_mpi_launched(void);
/* MPI_Init (once; DRIFT_E_UNSUPPORTED without MPI). */
int drift_mpi_init(drift_err *err);
/* World rank, size and the rank among the processes of this host. */
void drift_mpi_world(int *rank, int *size, int *local_rank);
/* One rank's comm over MPI_COMM_WORLD (CPU backends: host staging). */
int drift_comm_mpi(drift_comm **out, drift_err *err);
/* MPI_Finalize when drift_mpi_init initialised it. */
void drift_mpi_finalize(void);

#endif
