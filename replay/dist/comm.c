/* Collectives (comm.h): the in-process "local" group and the NCCL adapter. */
#include "replay/dist/comm.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "kernels/collective.h"

void drift_comm_free(drift_comm *c) {
    if (c && c->destroy) c->destroy(c);
}

/* ---- local: threads of one process --------------------------------------------- */

typedef struct local_group {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, arrived, generation, refs;
    void **slot;                 /* per rank: what it contributes to the current collective */
    size_t *bytes;
} local_group;

static void barrier(local_group *g) {
    pthread_mutex_lock(&g->mu);
    int gen = g->generation;
    if (++g->arrived == g->n) {
        g->arrived = 0;
        g->generation++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (gen == g->generation) pthread_cond_wait(&g->cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
}

static int local_reduce(drift_comm *c, void *buf, size_t n, size_t elem, int is_i64, drift_comm_op op) {
    local_group *g = c->ctx;
    g->slot[c->rank] = buf;
    barrier(g);
    /* every rank reduces over ranks 0..n-1 in order into a private copy */
    void *acc = drift_malloc((n ? n : 1) * elem);
    int ok = acc != NULL;
    if (ok) {
        memcpy(acc, g->slot[0], n * elem);
        for (int r = 1; r < g->n; r++) {
            if (is_i64) {
                int64_t *a = acc;
                const int64_t *b = g->slot[r];
                for (size_t i = 0; i < n; i++) a[i] = op == DRIFT_COMM_SUM ? a[i] + b[i] : (b[i] > a[i] ? b[i] : a[i]);
            } else {
                double *a = acc;
                const double *b = g->slot[r];
                for (size_t i = 0; i < n; i++) a[i] = op == DRIFT_COMM_SUM ? a[i] + b[i] : (b[i] > a[i] ? b[i] : a[i]);
            }
        }
    }
    barrier(g); /* everyone has read every slot */
    if (ok) memcpy(buf, acc, n * elem);
    free(acc);
    barrier(g); /* a fast rank's next collective must not overwrite a slot being read */
    return ok ? DRIFT_OK : DRIFT_E_NOMEM;
}

static int local_allreduce_f64(drift_comm *c, double *buf, size_t n, drift_comm_op op, drift_err *err) {
    int rc = local_reduce(c, buf, n, sizeof *buf, 0, op);
    return rc ? drift_err_set(err, rc, "comm", "out of memory in an allreduce") : DRIFT_OK;
}

static int local_allreduce_i64(drift_comm *c, int64_t *buf, size_t n, drift_comm_op op, drift_err *err) {
    int rc = local_reduce(c, buf, n, sizeof *buf, 1, op);
    return rc ? drift_err_set(err, rc, "comm", "out of memory in an allreduce") : DRIFT_OK;
}

/* Host staging: values widened to fp32 are exact for fp32/bf16/fp16 tensors,
 * and uploading them to the same dtype rounds nothing. */
static int local_allgather(drift_comm *c, const drift_tensor *send, drift_tensor *recv, drift_err *err) {
    local_group *g = c->ctx;
    size_t n = (size_t)send->numel;
    float *mine = drift_malloc((n ? n : 1) * sizeof *mine);
    int rc = mine ? drift_backend_download_f32(send->be, send, mine, err)
                  : drift_err_set(err, DRIFT_E_NOMEM, "comm", "out of memory in an allgather");
    g->slot[c->rank] = rc ? NULL : mine;
    barrier(g);
    float *all = NULL;
    int bad = 0;
    for (int r = 0; r < g->n; r++) bad |= g->slot[r] == NULL;
    if (!bad) {
        size_t tot = n * (size_t)g->n;
        all = drift_malloc((tot ? tot : 1) * sizeof *all);
        if (all)
            for (int r = 0; r < g->n; r++) memcpy(all + (size_t)r * n, g->slot[r], n * sizeof *all);
    }
    barrier(g);
    free(mine);
    if (!rc && bad) rc = drift_err_set(err, DRIFT_E_IO, "comm", "another worker failed in the allgather");
    if (!rc && !all) rc = drift_err_set(err, DRIFT_E_NOMEM, "comm", "out of memory in an allgather");
    if (!rc) rc = drift_backend_upload_f32(recv->be, recv, all, err);
    free(all);
    return rc;
}

static void local_destroy(drift_comm *c) {
    local_group *g = c->ctx;
    pthread_mutex_lock(&g->mu);
    int last = --g->refs == 0;
    pthread_mutex_unlock(&g->mu);
    if (last) {
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
        free(g->slot);
        free(g->bytes);
        free(g);
    }
    free(c);
}

drift_comm *drift_comm_new(const drift_comm *ops, int rank, int size, void *ctx) {
    drift_comm *c = drift_malloc(sizeof *c);
    if (!c) return NULL;
    *c = *ops;
    c->rank = rank;
    c->size = size;
    c->ctx = ctx;
    return c;
}

static const drift_comm LOCAL_OPS = {.kind = "local",
                                     .allreduce_f64 = local_allreduce_f64,
                                     .allreduce_i64 = local_allreduce_i64,
                                     .allgather = local_allgather,
                                     .destroy = local_destroy};

int drift_comm_local_group(int n, drift_comm **out, drift_err *err) {
    for (int i = 0; i < n; i++) out[i] = NULL;
    local_group *g = drift_calloc(1, sizeof *g);
    if (!g) return drift_err_set(err, DRIFT_E_NOMEM, "comm", "out of memory");
    g->slot = drift_calloc((size_t)n, sizeof *g->slot);
    g->bytes = drift_calloc((size_t)n, sizeof *g->bytes);
    if (!g->slot || !g->bytes) {
        free(g->slot);
        free(g->bytes);
        free(g);
        return drift_err_set(err, DRIFT_E_NOMEM, "comm", "out of memory");
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->n = n;
    for (int i = 0; i < n; i++) {
        drift_comm *c = drift_comm_new(&LOCAL_OPS, i, n, g);
        if (!c) {
            for (int k = 0; k < i; k++) drift_comm_free(out[k]);
            if (i == 0) {
                pthread_mutex_destroy(&g->mu);
                pthread_cond_destroy(&g->cv);
                free(g->slot);
                free(g->bytes);
                free(g);
            }
            for (int k = 0; k < n; k++) out[k] = NULL;
            return drift_err_set(err, DRIFT_E_NOMEM, "comm", "out of memory");
        }
        g->refs++;
        out[i] = c;
    }
    return DRIFT_OK;
}

/* ---- NCCL adapter --------------------------------------------------------------- */

int drift_comm_have_nccl(void) { return drift_nccl_available(); }

static int nccl_f64(drift_comm *c, double *buf, size_t n, drift_comm_op op, drift_err *err) {
    return drift_nccl_allreduce_host(c->ctx, buf, n, DRIFT_NCCL_F64, op == DRIFT_COMM_MAX, err);
}
static int nccl_i64(drift_comm *c, int64_t *buf, size_t n, drift_comm_op op, drift_err *err) {
    return drift_nccl_allreduce_host(c->ctx, buf, n, DRIFT_NCCL_I64, op == DRIFT_COMM_MAX, err);
}
static int nccl_gather(drift_comm *c, const drift_tensor *send, drift_tensor *recv, drift_err *err) {
    return drift_nccl_allgather_tensor(c->ctx, send, recv, err);
}
static void nccl_destroy(drift_comm *c) {
    drift_nccl_comm_free(c->ctx);
    free(c);
}

static const drift_comm NCCL_OPS = {.kind = "nccl",
                                    .allreduce_f64 = nccl_f64,
                                    .allreduce_i64 = nccl_i64,
                                    .allgather = nccl_gather,
                                    .destroy = nccl_destroy};

static int wrap_nccl(drift_nccl_comm *nc, int rank, int size, drift_comm **out, drift_err *err) {
    drift_comm *c = drift_comm_new(&NCCL_OPS, rank, size, nc);
    if (!c) {
        drift_nccl_comm_free(nc);
        return drift_err_set(err, DRIFT_E_NOMEM, "comm", "out of memory");
    }
    *out = c;
    return DRIFT_OK;
}

int drift_comm_nccl_group(int n, const drift_backend *const *be, drift_comm **out, drift_err *err) {
    for (int i = 0; i < n; i++) out[i] = NULL;
    if (!drift_nccl_available())
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, "nccl", "this build of drift has no NCCL (configure with -DDRIFT_NCCL=ON)");
    drift_nccl_comm **nc = drift_calloc((size_t)n, sizeof *nc);
    if (!nc) return drift_err_set(err, DRIFT_E_NOMEM, "comm", "out of memory");
    int rc = drift_nccl_comm_init_all(n, be, nc, err);
    for (int i = 0; !rc && i < n; i++) {
        rc = wrap_nccl(nc[i], i, n, &out[i], err);
        nc[i] = NULL;
    }
    if (rc) {
        for (int i = 0; i < n; i++) {
            drift_nccl_comm_free(nc[i]);
            drift_comm_free(out[i]);
            out[i] = NULL;
        }
    }
    free(nc);
    return rc;
}

#if defined(DRIFT_HAVE_MPI)
int drift_comm_mpi_bcast_bytes(void *buf, size_t n, drift_err *err); /* comm_mpi.c */
#endif

int drift_comm_nccl_mpi(const drift_backend *be, drift_comm **out, drift_err *err) {
    *out = NULL;
#if defined(DRIFT_HAVE_MPI)
    if (!drift_nccl_available())
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, "nccl", "NCCL over MPI needs a build with both NCCL and MPI");
    int rank, size, local;
    drift_mpi_world(&rank, &size, &local);
    unsigned char id[DRIFT_NCCL_ID_BYTES];
    memset(id, 0, sizeof id);
    int rc = DRIFT_OK;
    if (rank == 0) rc = drift_nccl_unique_id(id, err);
    /* rank 0 broadcasts its status with the id, so no rank waits alone */
    unsigned char msg[DRIFT_NCCL_ID_BYTES + 1];
    msg[0] = (unsigned char)(rc != DRIFT_OK);
    memcpy(msg + 1, id, sizeof id);
    int brc = drift_comm_mpi_bcast_bytes(msg, sizeof msg, err);
    if (brc) return brc;
    if (msg[0]) return rc ? rc : drift_err_set(err, DRIFT_E_IO, "nccl", "rank 0 could not make the NCCL id");
    drift_nccl_comm *nc = NULL;
    if ((rc = drift_nccl_comm_init_rank(be, size, rank, msg + 1, &nc, err))) return rc;
    return wrap_nccl(nc, rank, size, out, err);
#else
    (void)be;
    return drift_err_set(err, DRIFT_E_UNSUPPORTED, "nccl", "NCCL over MPI needs a build with both NCCL and MPI");
#endif
}
