/* NCCL collectives: exported with the real names, forwarding to the real
 * library (the strong pnccl* symbols when available). Each call is recorded
 * with op, dtype, count, root/peer, reduction, the communicator's rank and
 * size (asked of the real library) and a per-communicator sequence number.
 * Calls are recorded even when the real function fails (a NULL
 * communicator, no GPU): the census shows what the job asked for. */
#include <nccl.h>
#include <string.h>

#include "recorder/intercept/intercept.h"

#define LIBNCCL "libnccl.so.2"

typedef ncclResult_t (*fn_rank_t)(const ncclComm_t, int *);
static icpt_sym s_rank = ICPT_SYM_REAL(LIBNCCL, "ncclCommUserRank", "pncclCommUserRank");
static icpt_sym s_count = ICPT_SYM_REAL(LIBNCCL, "ncclCommCount", "pncclCommCount");

/* Fills the key of a collective row. Outside any lock: asks NCCL for the
 * communicator's rank and size (cheap reads on a valid communicator; an
 * error on NULL, then -1). */
static void coll_row(drift_census_coll *r, const char *op, ncclDataType_t dt, size_t count, int redop, int root,
                     ncclComm_t comm) {
    char buf[DRIFT_CENSUS_TYPE_MAX];
    memset(r, 0, sizeof *r);
    icpt_range_path(r->range);
    icpt_copy(r->op, sizeof r->op, op);
    icpt_copy(r->dtype, sizeof r->dtype, icpt_nccl_type_name((int)dt, buf, sizeof buf));
    icpt_copy(r->redop, sizeof r->redop, redop >= 0 ? icpt_nccl_redop_name(redop) : "");
    r->count = count > (size_t)INT64_MAX ? INT64_MAX : (int64_t)count;
    r->root = root;
    r->comm_rank = r->comm_nranks = -1;
    if (comm) {
        int v = -1;
        fn_rank_t fr = (fn_rank_t)icpt_resolve(&s_rank), fc = (fn_rank_t)icpt_resolve(&s_count);
        if (fr && fr(comm, &v) == ncclSuccess) r->comm_rank = v;
        v = -1;
        if (fc && fc(comm, &v) == ncclSuccess) r->comm_nranks = v;
    }
    int es = icpt_nccl_type_size((int)dt);
    r->bytes = (count > (size_t)(INT64_MAX / 16)) ? INT64_MAX : r->count * es;
}

#define RECORD(op, dt, count, redop, root, comm, rc)                                     \
    do {                                                                                 \
        drift_census_coll row_;                                                          \
        coll_row(&row_, op, dt, count, redop, root, comm);                               \
        icpt_record_coll(&row_, (const void *)(comm), (rc) != ncclSuccess);              \
    } while (0)

/* Resolve, call, record; the outermost wrapper records, nested ones pass through. */
#define FORWARD(sym, type, call, ...)                                                    \
    type real_ = (type)icpt_resolve(&sym);                                               \
    if (!real_) return ncclInternalError;                                                \
    if (!icpt_enabled()) return real_ call;                                              \
    int outer_ = icpt_enter();                                                           \
    ncclResult_t rc_ = real_ call;                                                       \
    icpt_leave();                                                                        \
    if (outer_) { __VA_ARGS__; }                                                         \
    return rc_

typedef ncclResult_t (*fn_ag_t)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
static icpt_sym s_ag = ICPT_SYM(LIBNCCL, "ncclAllGather", "pncclAllGather", ncclAllGather);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
    FORWARD(s_ag, fn_ag_t, (sendbuff, recvbuff, sendcount, datatype, comm, stream),
            RECORD("allgather", datatype, sendcount, -1, -1, comm, rc_));
}

typedef ncclResult_t (*fn_rs_t)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
static icpt_sym s_rs = ICPT_SYM(LIBNCCL, "ncclReduceScatter", "pncclReduceScatter", ncclReduceScatter);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    FORWARD(s_rs, fn_rs_t, (sendbuff, recvbuff, recvcount, datatype, op, comm, stream),
            RECORD("reducescatter", datatype, recvcount, (int)op, -1, comm, rc_));
}

static icpt_sym s_ar = ICPT_SYM(LIBNCCL, "ncclAllReduce", "pncclAllReduce", ncclAllReduce);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    FORWARD(s_ar, fn_rs_t, (sendbuff, recvbuff, count, datatype, op, comm, stream),
            RECORD("allreduce", datatype, count, (int)op, -1, comm, rc_));
}

typedef ncclResult_t (*fn_bc_t)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
static icpt_sym s_bc = ICPT_SYM(LIBNCCL, "ncclBroadcast", "pncclBroadcast", ncclBroadcast);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    FORWARD(s_bc, fn_bc_t, (sendbuff, recvbuff, count, datatype, root, comm, stream),
            RECORD("broadcast", datatype, count, -1, root, comm, rc_));
}

typedef ncclResult_t (*fn_rd_t)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                                cudaStream_t);
static icpt_sym s_rd = ICPT_SYM(LIBNCCL, "ncclReduce", "pncclReduce", ncclReduce);
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
    FORWARD(s_rd, fn_rd_t, (sendbuff, recvbuff, count, datatype, op, root, comm, stream),
            RECORD("reduce", datatype, count, (int)op, root, comm, rc_));
}

typedef ncclResult_t (*fn_sd_t)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
static icpt_sym s_sd = ICPT_SYM(LIBNCCL, "ncclSend", "pncclSend", ncclSend);
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    FORWARD(s_sd, fn_sd_t, (sendbuff, count, datatype, peer, comm, stream),
            RECORD("send", datatype, count, -1, peer, comm, rc_));
}

typedef ncclResult_t (*fn_rv_t)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
static icpt_sym s_rv = ICPT_SYM(LIBNCCL, "ncclRecv", "pncclRecv", ncclRecv);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    FORWARD(s_rv, fn_rv_t, (recvbuff, count, datatype, peer, comm, stream),
            RECORD("recv", datatype, count, -1, peer, comm, rc_));
}
