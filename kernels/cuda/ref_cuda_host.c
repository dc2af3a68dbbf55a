/* The GPU oracle's ops without a device body yet (the closed opset's newer
 * kinds and variants, roundings to an integer dtype): the doubles are copied
 * to the host, the ref backend's bodies run there, the result goes back. The
 * same bits as --device ref, by construction. */
#include <string.h>

#include "formats/dtype.h"
#include "kernels/cuda/ref_cuda_internal.h"

enum { HOST_MAX_IN = 4 };

int drift_rcu_op_needs_host(const drift_op *op, const drift_tensor *const *in) {
    switch (op->kind) {
    case DRIFT_OP_BINARY:
    case DRIFT_OP_WHERE:
    case DRIFT_OP_TAKE:
    case DRIFT_OP_PUT:
    case DRIFT_OP_ARGSORT:
    case DRIFT_OP_CUMSUM:
    case DRIFT_OP_SOFTMAX:
    case DRIFT_OP_BMM:
    case DRIFT_OP_GROUP_NORM:
    case DRIFT_OP_NONZERO: return 1;
    case DRIFT_OP_UNARY: return op->sub >= DRIFT_UNARY_LOG;
    case DRIFT_OP_REDUCE: return op->sub >= DRIFT_REDUCE_PROD || op->length > 1;
    default: break;
    }
    /* the device bodies keep doubles as they are; an integer dtype rounds */
    if (drift_dtype_is_int(op->out)) return 1;
    for (int i = 0; i < op->n_in; i++)
        if (op->kind == DRIFT_OP_CAST && in[i] && drift_dtype_is_int(in[i]->dtype)) return 1;
    return 0;
}

static int cu(cudaError_t e, drift_err *err, const rcu_exec *x, const char *what) {
    if (e == cudaSuccess) return DRIFT_OK;
    (void)cudaGetLastError();
    return drift_err_set(err, DRIFT_E_IO, x->name, "%s on the host: %s", what, cudaGetErrorString(e));
}

/* A ref-backend tensor holding device tensor t's doubles. */
static int down(const rcu_exec *x, drift_backend *ref, const drift_tensor *t, drift_tensor *h, drift_err *err) {
    memset(h, 0, sizeof *h);
    h->dtype = t->dtype;
    h->ndim = t->ndim;
    memcpy(h->shape, t->shape, sizeof t->shape);
    int rc = drift_backend_alloc(ref, h, err);
    if (!rc && t->numel > 0)
        rc = cu(cudaMemcpyAsync(h->data, t->data, (size_t)t->numel * sizeof(double), cudaMemcpyDeviceToHost, x->stream),
                err, x, "copy down");
    return rc;
}

int drift_rcu_run_on_host(const rcu_exec *x, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                          drift_err *err) {
    if (op->n_in > HOST_MAX_IN)
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, x->name, "op %s on the host: %d inputs", drift_op_name(op->kind), op->n_in);
    drift_backend *ref = NULL;
    int rc = drift_backend_create("ref", &ref, err);
    if (rc) return rc;
    drift_tensor hin[HOST_MAX_IN], hout;
    const drift_tensor *hp[HOST_MAX_IN];
    memset(&hout, 0, sizeof hout);
    int made = 0;
    for (; made < op->n_in && !rc; made++) {
        rc = down(x, ref, in[made], &hin[made], err);
        hp[made] = &hin[made];
    }
    if (!rc) rc = cu(cudaStreamSynchronize(x->stream), err, x, "copy down");
    if (!rc) {
        hout.dtype = out->dtype;
        hout.ndim = out->ndim;
        memcpy(hout.shape, out->shape, sizeof out->shape);
        rc = drift_backend_alloc(ref, &hout, err);
    }
    if (!rc) rc = drift_backend_run(ref, op, hp, &hout, err);
    if (!rc && out->numel > 0) {
        rc = cu(cudaMemcpyAsync(out->data, hout.data, (size_t)out->numel * sizeof(double), cudaMemcpyHostToDevice, x->stream),
                err, x, "copy up");
        if (!rc) rc = cu(cudaStreamSynchronize(x->stream), err, x, "copy up"); /* hout is freed next */
    }
    for (int i = 0; i < made; i++) drift_backend_release(ref, &hin[i]);
    drift_backend_release(ref, &hout);
    drift_backend_free(ref);
    return rc;
}
