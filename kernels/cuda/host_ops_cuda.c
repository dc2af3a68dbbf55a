/* Ops the GPU has no kernel of its own for yet: the closed opset's newer kinds
 * and variants (integer/bool masks, indices, sorting, their casts). They run on
 * the host through the cpu backend's bodies, so --device cuda gives the bits
 * --device cpu gives for them; the data goes down and back up (small tensors in
 * the models seen: masks, ids, routing). */
#include <string.h>

#include "formats/alloc.h"
#include "formats/dtype.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/ref_cuda_internal.h"
#include "kernels/cuda/torch/torch_profile.h"

enum { HOST_MAX_IN = 4 };

int dcu_op_needs_host(const drift_op *op, const drift_tensor *const *in) { return drift_rcu_op_needs_host(op, in); }

static int host_backend(dcu_ctx *ctx, drift_err *err) {
    if (ctx->host) return DRIFT_OK;
    return drift_backend_create("cpu", &ctx->host, err);
}

/* A host copy of device tensor t (values exact: every dtype widens into double). */
static int to_host(dcu_ctx *ctx, const drift_backend *dev, const drift_tensor *t, drift_tensor *h, double *scratch,
                   drift_err *err) {
    memset(h, 0, sizeof *h);
    h->dtype = t->dtype;
    h->ndim = t->ndim;
    memcpy(h->shape, t->shape, sizeof t->shape);
    int rc = drift_backend_alloc(ctx->host, h, err);
    if (!rc && t->numel > 0) rc = drift_backend_download_f64(dev, t, scratch, err);
    if (!rc && t->numel > 0) rc = drift_backend_upload_f64(ctx->host, h, scratch, err);
    return rc;
}

int dcu_run_on_host(dcu_ctx *ctx, const drift_backend *dev, const drift_op *op, const drift_tensor *const *in,
                    drift_tensor *out, drift_err *err) {
    if (ctx->kernel_profile == DRIFT_CUDA_KERNELS_TORCH)
        dct_torch_note_fallback(ctx, op->kind, "no GPU kernel yet: the cpu backend's bodies on the host");
    if (op->n_in > HOST_MAX_IN)
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, ctx->name, "op %s on the host: %d inputs", drift_op_name(op->kind), op->n_in);
    int rc = host_backend(ctx, err);
    if (rc) return rc;
    int64_t most = out->numel;
    for (int i = 0; i < op->n_in; i++)
        if (in[i]->numel > most) most = in[i]->numel;
    double *scratch = drift_malloc((size_t)(most > 0 ? most : 1) * sizeof(double));
    if (!scratch)
        return drift_err_set(err, DRIFT_E_NOMEM, ctx->name, "op %s on the host: cannot allocate %lld doubles",
                             drift_op_name(op->kind), (long long)most);
    drift_tensor hin[HOST_MAX_IN], hout;
    const drift_tensor *hp[HOST_MAX_IN];
    memset(hin, 0, sizeof hin);
    memset(&hout, 0, sizeof hout);
    int made = 0;
    for (; made < op->n_in && !rc; made++) {
        rc = to_host(ctx, dev, in[made], &hin[made], scratch, err);
        hp[made] = &hin[made];
    }
    if (!rc) {
        hout.dtype = out->dtype;
        hout.ndim = out->ndim;
        memcpy(hout.shape, out->shape, sizeof out->shape);
        rc = drift_backend_alloc(ctx->host, &hout, err);
    }
    if (!rc) rc = drift_backend_run(ctx->host, op, hp, &hout, err);
    if (!rc) rc = drift_backend_download_f64(ctx->host, &hout, scratch, err);
    if (!rc) rc = drift_backend_upload_f64(dev, out, scratch, err);
    for (int i = 0; i < made; i++) drift_backend_release(ctx->host, &hin[i]);
    drift_backend_release(ctx->host, &hout);
    drift_free(scratch);
    return rc;
}
