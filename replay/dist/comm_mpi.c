/* MPI: launch detection, init, world, and the CPU comm (comm.h). Compiled
 * into every build; the MPI parts only with DRIFT_HAVE_MPI. */
#include "replay/dist/comm.h"
#include "formats/alloc.h"

#include <stdlib.h>
#include <string.h>

#if defined(DRIFT_HAVE_MPI)
#include <mpi.h>
#endif

int drift_mpi_available(void) {
#if defined(DRIFT_HAVE_MPI)
    return 1;
#else
    return 0;
#endif
}

int drift_mpi_launched(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return 1;
    }
    return 0;
}

#if defined(DRIFT_HAVE_MPI)

static int g_inited_here;
static int g_rank, g_size = 1, g_local;

static int mpi_fail(int code, drift_err *err, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(code, msg, &len);
    return drift_err_set(err, DRIFT_E_IO, "mpi", "%s failed: %.*s", what, len, msg);
}

int drift_mpi_init(drift_err *err) {
    int flag = 0;
    MPI_Initialized(&flag);
    if (!flag) {
        int rc = MPI_Init(NULL, NULL);
        if (rc != MPI_SUCCESS) return drift_err_set(err, DRIFT_E_IO, "mpi", "MPI_Init failed (code %d)", rc);
        g_inited_here = 1;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    MPI_Comm node;
    int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, err, "MPI_Comm_split_type");
    MPI_Comm_rank(node, &g_local);
    MPI_Comm_free(&node);
    return DRIFT_OK;
}

void drift_mpi_world(int *rank, int *size, int *local_rank) {
    *rank = g_rank;
    *size = g_size;
    *local_rank = g_local;
}

void drift_mpi_finalize(void) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (g_inited_here && !fin) MPI_Finalize();
    g_inited_here = 0;
}

int drift_comm_mpi_bcast_bytes(void *buf, size_t n, drift_err *err);
int drift_comm_mpi_bcast_bytes(void *buf, size_t n, drift_err *err) {
    int rc = MPI_Bcast(buf, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? DRIFT_OK : mpi_fail(rc, err, "MPI_Bcast");
}

/* Large buffers go in pieces: MPI counts are int. */
#define CHUNK ((size_t)1 << 26)

static int mpi_f64(drift_comm *c, double *buf, size_t n, drift_comm_op op, drift_err *err) {
    (void)c;
    for (size_t off = 0; off < n; off += CHUNK) {
        int k = (int)(n - off < CHUNK ? n - off : CHUNK);
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf + off, k, MPI_DOUBLE, op == DRIFT_COMM_MAX ? MPI_MAX : MPI_SUM,
                               MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, err, "MPI_Allreduce");
    }
    return DRIFT_OK;
}

static int mpi_i64(drift_comm *c, int64_t *buf, size_t n, drift_comm_op op, drift_err *err) {
    (void)c;
    for (size_t off = 0; off < n; off += CHUNK) {
        int k = (int)(n - off < CHUNK ? n - off : CHUNK);
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf + off, k, MPI_INT64_T, op == DRIFT_COMM_MAX ? MPI_MAX : MPI_SUM,
                               MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, err, "MPI_Allreduce");
    }
    return DRIFT_OK;
}

static int mpi_gather(drift_comm *c, const drift_tensor *send, drift_tensor *recv, drift_err *err) {
    size_t n = (size_t)send->numel;
    if (n > (size_t)1 << 30) return drift_err_set(err, DRIFT_E_UNSUPPORTED, "mpi", "allgather of more than 2^30 values");
    float *mine = drift_malloc((n ? n : 1) * sizeof *mine), *all = drift_malloc((n ? n : 1) * (size_t)c->size * sizeof *all);
    int rc = mine && all ? drift_backend_download_f32(send->be, send, mine, err)
                         : drift_err_set(err, DRIFT_E_NOMEM, "mpi", "out of memory in an allgather");
    if (!rc) {
        int m = MPI_Allgather(mine, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, MPI_COMM_WORLD);
        if (m != MPI_SUCCESS) rc = mpi_fail(m, err, "MPI_Allgather");
    }
    if (!rc) rc = drift_backend_upload_f32(recv->be, recv, all, err);
    free(mine);
    free(all);
    return rc;
}

static void mpi_destroy(drift_comm *c) { free(c); }

static const drift_comm MPI_OPS = {.kind = "mpi",
                                   .allreduce_f64 = mpi_f64,
                                   .allreduce_i64 = mpi_i64,
                                   .allgather = mpi_gather,
                                   .destroy = mpi_destroy};

int drift_comm_mpi(drift_comm **out, drift_err *err) {
    drift_comm *c = drift_comm_new(&MPI_OPS, g_rank, g_size, NULL);
    if (!c) return drift_err_set(err, DRIFT_E_NOMEM, "mpi", "out of memory");
    *out = c;
    return DRIFT_OK;
}

#else

int drift_mpi_init(drift_err *err) {
    return drift_err_set(err, DRIFT_E_UNSUPPORTED, "--mpi",
                         "this build of drift has no MPI (install an MPI, e.g. libopenmpi-dev, and reconfigure)");
}

void drift_mpi_world(int *rank, int *size, int *local_rank) {
    *rank = 0;
    *size = 1;
    *local_rank = 0;
}

void drift_mpi_finalize(void) {}

int drift_comm_mpi(drift_comm **out, drift_err *err) {
    *out = NULL;
    return drift_mpi_init(err);
}

#endif
