/* NCCL communicators and collectives for the multi-GPU replay (kernels/collective.h). */
#include "kernels/collective.h"
#include "formats/alloc.h"

#if defined(DRIFT_HAVE_NCCL)

#include <stdlib.h>
#include <string.h>

#include <nccl.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_internal.h"

int drift_nccl_available(void) { return 1; }

struct drift_nccl_comm {
    ncclComm_t comm;
    const drift_backend *be;     /* borrowed */
    int device;
    cudaStream_t stream;         /* the backend's */
    void *scratch;               /* device staging for host allreduces */
    size_t scratch_bytes;
};

static int nccl_check(ncclResult_t r, drift_err *err, const char *what) {
    if (r == ncclSuccess) return DRIFT_OK;
    return drift_err_set(err, DRIFT_E_IO, "nccl", "%s failed: %s", what, ncclGetErrorString(r));
}

static int backend_device(const drift_backend *be, int *device, drift_err *err) {
    if (!be || !drift_cuda_backend_is_cuda(be))
        return drift_err_set(err, DRIFT_E_USAGE, "nccl", "NCCL needs CUDA backends (got %s)", be ? be->name : "none");
    *device = ((const dcu_ctx *)be->ctx)->device;
    return DRIFT_OK;
}

int drift_nccl_unique_id(unsigned char id[DRIFT_NCCL_ID_BYTES], drift_err *err) {
    ncclUniqueId u;
    int rc = nccl_check(ncclGetUniqueId(&u), err, "ncclGetUniqueId");
    if (!rc) memcpy(id, u.internal, DRIFT_NCCL_ID_BYTES);
    return rc;
}

static drift_nccl_comm *wrap(const drift_backend *be, int device, ncclComm_t comm) {
    drift_nccl_comm *c = drift_calloc(1, sizeof *c);
    if (!c) return NULL;
    c->comm = comm;
    c->be = be;
    c->device = device;
    c->stream = (cudaStream_t)drift_cuda_backend_stream(be);
    return c;
}

int drift_nccl_comm_init_all(int n, const drift_backend *const *be, drift_nccl_comm **out, drift_err *err) {
    if (n < 1 || n > 4096) return drift_err_set(err, DRIFT_E_USAGE, "nccl", "bad device count %d", n);
    for (int i = 0; i < n; i++) out[i] = NULL;
    size_t nn = (size_t)n;
    int *dev = drift_calloc(nn, sizeof *dev);
    ncclComm_t *comms = drift_calloc(nn, sizeof *comms);
    int rc = dev && comms ? DRIFT_OK : drift_err_set(err, DRIFT_E_NOMEM, "nccl", "out of memory");
    for (int i = 0; !rc && i < n; i++) rc = backend_device(be[i], &dev[i], err);
    for (int i = 0; !rc && i < n; i++)
        for (int k = 0; k < i; k++)
            if (dev[k] == dev[i])
                rc = drift_err_set(err, DRIFT_E_USAGE, "--devices", "cuda:%d is given twice: NCCL needs one rank per GPU", dev[i]);
    if (!rc) rc = nccl_check(ncclCommInitAll(comms, n, dev), err, "ncclCommInitAll");
    for (int i = 0; !rc && i < n; i++) {
        out[i] = wrap(be[i], dev[i], comms[i]);
        if (!out[i]) rc = drift_err_set(err, DRIFT_E_NOMEM, "nccl", "out of memory");
        else comms[i] = NULL;
    }
    if (rc) {
        for (int i = 0; i < n; i++) {
            if (comms && comms[i]) ncclCommDestroy(comms[i]);
            drift_nccl_comm_free(out[i]);
            out[i] = NULL;
        }
    }
    free(dev);
    free(comms);
    return rc;
}

int drift_nccl_comm_init_rank(const drift_backend *be, int nranks, int rank, const unsigned char id[DRIFT_NCCL_ID_BYTES],
                              drift_nccl_comm **out, drift_err *err) {
    *out = NULL;
    int device = -1; /* set by backend_device on success */
    int rc = backend_device(be, &device, err);
    if (rc) return rc;
    if ((rc = dcu_check(cudaSetDevice(device), err, "nccl", "cudaSetDevice"))) return rc;
    ncclUniqueId u;
    memcpy(u.internal, id, DRIFT_NCCL_ID_BYTES);
    ncclComm_t comm;
    if ((rc = nccl_check(ncclCommInitRank(&comm, nranks, u, rank), err, "ncclCommInitRank"))) return rc;
    *out = wrap(be, device, comm);
    if (!*out) {
        ncclCommDestroy(comm);
        return drift_err_set(err, DRIFT_E_NOMEM, "nccl", "out of memory");
    }
    return DRIFT_OK;
}

int drift_nccl_allreduce_host(drift_nccl_comm *c, void *host, size_t n, int type, int is_max, drift_err *err) {
    size_t bytes = n * 8;
    int rc = dcu_check(cudaSetDevice(c->device), err, "nccl", "cudaSetDevice");
    if (rc || n == 0) return rc;
    if (bytes > c->scratch_bytes) {
        if (c->scratch) cudaFree(c->scratch);
        c->scratch = NULL;
        c->scratch_bytes = 0;
        if ((rc = dcu_check(cudaMalloc(&c->scratch, bytes), err, "nccl", "cudaMalloc (allreduce staging)"))) return rc;
        c->scratch_bytes = bytes;
    }
    if ((rc = dcu_check(cudaMemcpyAsync(c->scratch, host, bytes, cudaMemcpyHostToDevice, c->stream), err, "nccl",
                        "allreduce upload")))
        return rc;
    if ((rc = nccl_check(ncclAllReduce(c->scratch, c->scratch, n, type == DRIFT_NCCL_I64 ? ncclInt64 : ncclFloat64,
                                       is_max ? ncclMax : ncclSum, c->comm, c->stream),
                         err, "ncclAllReduce")))
        return rc;
    if ((rc = dcu_check(cudaMemcpyAsync(host, c->scratch, bytes, cudaMemcpyDeviceToHost, c->stream), err, "nccl",
                        "allreduce download")))
        return rc;
    return dcu_check(cudaStreamSynchronize(c->stream), err, "nccl", "allreduce");
}

int drift_nccl_allgather_tensor(drift_nccl_comm *c, const drift_tensor *send, drift_tensor *recv, drift_err *err) {
    int nranks = 0;
    int rc = nccl_check(ncclCommCount(c->comm, &nranks), err, "ncclCommCount");
    if (rc) return rc;
    if (send->be != c->be || recv->be != c->be || send->dtype != recv->dtype || recv->numel != (int64_t)nranks * send->numel)
        return drift_err_set(err, DRIFT_E_INTERNAL, "nccl", "allgather: tensors do not match the communicator");
    if ((rc = dcu_check(cudaSetDevice(c->device), err, "nccl", "cudaSetDevice"))) return rc;
    size_t bytes = (size_t)send->numel * drift_dtype_size(send->dtype);
    if (bytes == 0) return DRIFT_OK;
    return nccl_check(ncclAllGather(send->data, recv->data, bytes, ncclUint8, c->comm, c->stream), err, "ncclAllGather");
}

void drift_nccl_comm_free(drift_nccl_comm *c) {
    if (!c) return;
    cudaSetDevice(c->device);
    if (c->stream) cudaStreamSynchronize(c->stream);
    if (c->scratch) cudaFree(c->scratch);
    if (c->comm) ncclCommDestroy(c->comm);
    free(c);
}

#else

/* Built without NCCL: kernels/collective_stub.c. */
typedef int drift_nccl_comm_unused;

#endif
