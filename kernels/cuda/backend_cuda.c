/* The CUDA backend's vtable (kernels/backend.h, kernels/cuda/cuda_backend.h):
 * creation, storage, transfers, dispatch, metrics (arguments checked by the
 * door, kernels/door.c).
 * Kernels live in the .cu files; GEMMs in gemm_lt.c; attention in
 * attention_lt.c. Every CUDA/cuBLASLt status is checked and turned into a
 * drift_err (DRIFT_E_NOMEM for allocation failures, DRIFT_E_IO otherwise);
 * nothing here exits or aborts. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/torch/torch_profile.h"

#define DCU_WORKSPACE_BYTES ((size_t)32 << 20)
#define DCU_PINNED_BYTES ((size_t)16 << 20)
#define DCU_ATTN_BUDGET_DEFAULT ((size_t)1 << 30)

static void cuda_destroy(drift_backend *be);

/* ------------------------------------------------------------------------ */
/* Errors and memory                                                          */

int dcu_check(cudaError_t e, drift_err *err, const char *where, const char *what) {
    if (e == cudaSuccess) return DRIFT_OK;
    int code = e == cudaErrorMemoryAllocation ? DRIFT_E_NOMEM : DRIFT_E_IO;
    drift_err_set(err, code, where, "%s: CUDA error %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
    /* clear a non-sticky error so that the next call starts clean */
    (void)cudaGetLastError();
    return code;
}

cudaError_t dcu_malloc(dcu_ctx *ctx, void **p, size_t bytes) {
    *p = NULL;
    if (bytes == 0) return cudaSuccess;
    if (ctx->have_pool) return cudaMallocFromPoolAsync(p, bytes, ctx->pool, ctx->stream);
    return cudaMalloc(p, bytes);
}

void dcu_free(dcu_ctx *ctx, void *p) {
    if (!p) return;
    if (ctx->have_pool)
        (void)cudaFreeAsync(p, ctx->stream);
    else
        (void)cudaFree(p);
}

static dcu_ctx *ctx_of(const drift_backend *be) { return (dcu_ctx *)be->ctx; }

static int select_device(dcu_ctx *ctx, drift_err *err) {
    return dcu_check(cudaSetDevice(ctx->device), err, ctx->name, "cudaSetDevice");
}

/* fp64 and the integer dtypes too: stored as doubles (dcu_storage_dtype), ops
 * that touch them run the GPU oracle's bodies (f64_cuda.c). */
static int dtype_ok(drift_dtype dt) { return drift_dtype_is_float(dt) || drift_dtype_is_int(dt); }

/* ------------------------------------------------------------------------ */
/* Capabilities, storage                                                      */

static size_t cuda_elem_bytes(drift_dtype dt) { return drift_dtype_size(dcu_storage_dtype(dt)); }

static int cuda_supports_op(const drift_backend *be, const drift_op *op) {
    (void)be;
    if (!op || (int)op->kind < 0 || op->kind >= DRIFT_OP_COUNT) return 0;
    if (!dtype_ok(op->out)) return 0;
    if ((op->kind == DRIFT_OP_LINEAR || op->kind == DRIFT_OP_ATTENTION) && !dtype_ok(op->compute)) return 0;
    return 1;
}

static int cuda_alloc(const drift_backend *be, drift_tensor *t, drift_err *err) {
    dcu_ctx *ctx = ctx_of(be);
    int rc = select_device(ctx, err);
    if (rc) return rc;
    const int64_t n = t->numel;
    size_t bytes = (size_t)(n > 0 ? n : 1) * cuda_elem_bytes(t->dtype);
    void *p = NULL;
    cudaError_t e = dcu_malloc(ctx, &p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return drift_err_set(err, e == cudaErrorMemoryAllocation ? DRIFT_E_NOMEM : DRIFT_E_IO, ctx->name,
                             "alloc: cannot allocate %lld elements of %s (%zu bytes): %s", (long long)n,
                             drift_dtype_name(t->dtype), bytes, cudaGetErrorString(e));
    }
    t->data = p;
    return DRIFT_OK;
}

static void cuda_release(const drift_backend *be, drift_tensor *t) {
    dcu_ctx *ctx = ctx_of(be);
    if (cudaSetDevice(ctx->device) != cudaSuccess) (void)cudaGetLastError();
    dcu_free(ctx, t->data);
}

/* A view of base's device storage elem_offset elements in (the door checked
 * that it fits). Offsets that are not a multiple of 16 bytes are declined
 * (DRIFT_E_UNSUPPORTED: the caller copies), so every tensor the kernels and
 * cuBLASLt see keeps the alignment of a fresh allocation's 16-byte grid. */
static int cuda_alias(const drift_backend *be, const drift_tensor *base, int64_t elem_offset, drift_tensor *out,
                      drift_err *err) {
    const char *nm = ctx_of(be)->name;
    size_t bytes = (size_t)elem_offset * cuda_elem_bytes(base->dtype);
    if (((uintptr_t)base->data + bytes) % 16 != 0)
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, nm, "alias: offset of %zu bytes is not 16-byte aligned", bytes);
    out->data = (char *)base->data + bytes;
    return DRIFT_OK;
}

/* ------------------------------------------------------------------------ */
/* Transfers: host conversion (formats/dtype.h) through two pinned staging
 * buffers, copies on the backend stream, double-buffered.                   */

static size_t chunk_elems(const dcu_ctx *ctx, drift_dtype dt) { return ctx->pinned_size / drift_dtype_size(dt); }

static void f64_to_dtype(const double *src, void *dst, drift_dtype dt, size_t n) {
    if (dt == DRIFT_F64) {
        memcpy(dst, src, n * sizeof(double));
    } else if (dt == DRIFT_F32) {
        float *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = (float)src[i];
    } else if (dt == DRIFT_BF16) {
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = drift_f32_to_bf16((float)src[i]);
    } else {
        uint16_t *d = dst;
        for (size_t i = 0; i < n; i++) d[i] = drift_f32_to_f16((float)src[i]);
    }
}

/* Elements per staging chunk for a transfer of n elements of es bytes: about
 * a quarter of the transfer (at least DCU_STAGE_MIN_BYTES, at most one
 * pinned buffer), so that filling the next chunk on the host overlaps the
 * DMA of the previous one instead of waiting for a single large copy. */
#define DCU_STAGE_MIN_BYTES ((size_t)1 << 20)
static size_t stage_chunk(const dcu_ctx *ctx, size_t n, size_t es) {
    size_t bytes = n * es / 4;
    if (bytes < DCU_STAGE_MIN_BYTES) bytes = DCU_STAGE_MIN_BYTES;
    if (bytes > ctx->pinned_size) bytes = ctx->pinned_size;
    size_t c = bytes / es;
    return c ? c : 1;
}

/* Host values (fp32 or fp64) -> n elements of dt at device dst, rounded RNE
 * on the host chunk by chunk into the two pinned buffers (double-buffered:
 * a buffer is refilled once the DMA queued from it two chunks ago is done). */
static int staged_upload(dcu_ctx *ctx, void *dst, drift_dtype dt, size_t n, const float *src32, const double *src64,
                         drift_err *err) {
    size_t es = drift_dtype_size(dt), chunk = stage_chunk(ctx, n, es);
    int c = 0, rc = DRIFT_OK;
    for (size_t off = 0; off < n; off += chunk, c ^= 1) {
        size_t cnt = n - off < chunk ? n - off : chunk;
        if ((rc = dcu_check(cudaEventSynchronize(ctx->pin_ev[c]), err, ctx->name, "upload: waiting for staging")))
            return rc;
        if (src32)
            drift_dtype_from_f32_n(src32 + off, ctx->pinned[c], dt, cnt);
        else
            f64_to_dtype(src64 + off, ctx->pinned[c], dt, cnt);
        rc = dcu_check(cudaMemcpyAsync((char *)dst + off * es, ctx->pinned[c], cnt * es, cudaMemcpyHostToDevice,
                                       ctx->stream),
                       err, ctx->name, "upload: cudaMemcpyAsync");
        if (!rc) rc = dcu_check(cudaEventRecord(ctx->pin_ev[c], ctx->stream), err, ctx->name, "upload: event");
        if (rc) return rc;
    }
    return DRIFT_OK;
}

/* fp32 host values into a bf16/fp16 tensor of at least this many elements
 * are staged raw (a memcpy per chunk instead of a per-element conversion on
 * the host) into a device fp32 scratch and rounded there by the CAST kernel:
 * the same RNE bits as drift_f32_to_bf16 / drift_f32_to_f16 (dev_common.cuh
 * mirrors formats/dtype.h, NaN and overflow included). */
#define DCU_DEVCAST_MIN ((size_t)1 << 16)

static int upload_any(const drift_backend *be, drift_tensor *t, const float *src32, const double *src64,
                      drift_err *err) {
    dcu_ctx *ctx = ctx_of(be);
    int rc = select_device(ctx, err);
    if (rc) return rc;
    size_t n = (size_t)t->numel;
    const drift_dtype sdt = dcu_storage_dtype(t->dtype);
    if (src32 && sdt != DRIFT_F32 && sdt != DRIFT_F64 && n >= DCU_DEVCAST_MIN) {
        void *tmp = NULL;
        if (dcu_malloc(ctx, &tmp, n * sizeof(float)) == cudaSuccess && tmp) {
            rc = staged_upload(ctx, tmp, DRIFT_F32, n, src32, NULL, err);
            if (!rc)
                rc = dcu_check(dcu_launch_unary(ctx, DCU_UN_CAST, tmp, DRIFT_F32, t->data, t->dtype, (int64_t)n, 0.0f,
                                                0.0f),
                               err, ctx->name, "upload: rounding on the device");
            dcu_free(ctx, tmp);
            return rc;
        }
        (void)cudaGetLastError(); /* no scratch: round on the host instead */
    }
    return staged_upload(ctx, t->data, sdt, n, src32, src64, err);
}

static int cuda_upload_f32(const drift_backend *be, drift_tensor *t, const float *src, drift_err *err) {
    return upload_any(be, t, src, NULL, err);
}

static int cuda_upload_f64(const drift_backend *be, drift_tensor *t, const double *src, drift_err *err) {
    return upload_any(be, t, NULL, src, err);
}

static int download_any(const drift_backend *be, const drift_tensor *t, float *dst32, double *dst64, drift_err *err) {
    dcu_ctx *ctx = ctx_of(be);
    int rc = select_device(ctx, err);
    if (rc) return rc;
    const drift_dtype sdt = dcu_storage_dtype(t->dtype);
    size_t n = (size_t)t->numel, es = drift_dtype_size(sdt), chunk = chunk_elems(ctx, sdt);
    size_t nchunks = (n + chunk - 1) / chunk;
    if (nchunks == 0) /* still surface errors of queued work */
        return dcu_check(cudaStreamSynchronize(ctx->stream), err, ctx->name, "download: queued work failed");
    for (size_t i = 0; i <= nchunks; i++) {
        if (i < nchunks) { /* issue chunk i into buffer i&1 (chunk i-2 converted already) */
            size_t off = i * chunk, cnt = n - off < chunk ? n - off : chunk;
            int b = (int)(i & 1);
            rc = dcu_check(cudaMemcpyAsync(ctx->pinned[b], (const char *)t->data + off * es, cnt * es,
                                           cudaMemcpyDeviceToHost, ctx->stream),
                           err, ctx->name, "download: cudaMemcpyAsync");
            if (!rc) rc = dcu_check(cudaEventRecord(ctx->pin_ev[b], ctx->stream), err, ctx->name, "download: event");
            if (rc) return rc;
        }
        if (i >= 1) { /* convert chunk i-1 */
            size_t j = i - 1, off = j * chunk, cnt = n - off < chunk ? n - off : chunk;
            int b = (int)(j & 1);
            rc = dcu_check(cudaEventSynchronize(ctx->pin_ev[b]), err, ctx->name,
                           "download: copy or earlier queued work failed");
            if (rc) return rc;
            if (dst32) {
                drift_dtype_to_f32_n(ctx->pinned[b], sdt, dst32 + off, cnt);
            } else {
                double *d = dst64 + off;
                if (sdt == DRIFT_F64) {
                    memcpy(d, ctx->pinned[b], cnt * sizeof(double));
                } else if (sdt == DRIFT_F32) {
                    const float *s = ctx->pinned[b];
                    for (size_t k = 0; k < cnt; k++) d[k] = s[k];
                } else {
                    const uint16_t *s = ctx->pinned[b];
                    for (size_t k = 0; k < cnt; k++)
                        d[k] = sdt == DRIFT_BF16 ? drift_bf16_to_f32(s[k]) : drift_f16_to_f32(s[k]);
                }
            }
        }
    }
    return DRIFT_OK;
}

static int cuda_download_f32(const drift_backend *be, const drift_tensor *t, float *dst, drift_err *err) {
    return download_any(be, t, dst, NULL, err);
}

static int cuda_download_f64(const drift_backend *be, const drift_tensor *t, double *dst, drift_err *err) {
    return download_any(be, t, NULL, dst, err);
}

/* ------------------------------------------------------------------------ */
/* run(): ops                                                                 */

static void contiguous_strides(int nd, const int64_t *shape, int64_t *st) {
    int64_t c = 1;
    for (int d = nd - 1; d >= 0; d--) {
        st[d] = c;
        c *= shape[d];
    }
}

static int launch_copy(dcu_ctx *ctx, dcu_copy *c, const char *where, drift_err *err) {
    dcu_copy_simplify(c);
    return dcu_check(dcu_launch_copy(ctx, c), err, where, "strided copy kernel");
}

static void copy_init(dcu_copy *c, const drift_tensor *src, drift_tensor *dst) {
    memset(c, 0, sizeof *c);
    c->src = src->data;
    c->ts = src->dtype;
    c->dst = dst->data;
    c->td = dst->dtype;
}

static int run_layout(dcu_ctx *ctx, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                      const char *where, drift_err *err) {
    const drift_tensor *x = in[0];
    dcu_copy c;
    copy_init(&c, x, out);
    int64_t xs[DRIFT_MAX_DIMS], os[DRIFT_MAX_DIMS];
    contiguous_strides(x->ndim, x->shape, xs);
    contiguous_strides(out->ndim, out->shape, os);
    switch (op->kind) {
    case DRIFT_OP_PERMUTE:
        c.nd = out->ndim;
        for (int i = 0; i < out->ndim; i++) {
            c.shape[i] = out->shape[i];
            c.ss[i] = xs[op->perm[i]];
            c.ds[i] = os[i];
        }
        if (c.nd == 0) { /* a 0-dim tensor: one element */
            c.nd = 1;
            c.shape[0] = 1;
            c.ss[0] = c.ds[0] = 1;
        }
        return launch_copy(ctx, &c, where, err);
    case DRIFT_OP_NARROW: {
        int d = drift_op_norm_dim(op->dim, x->ndim);
        c.nd = out->ndim;
        for (int i = 0; i < out->ndim; i++) {
            c.shape[i] = out->shape[i];
            c.ss[i] = xs[i];
            c.ds[i] = os[i];
        }
        c.soff = op->start * xs[d];
        return launch_copy(ctx, &c, where, err);
    }
    case DRIFT_OP_CONCAT: {
        const drift_tensor *y = in[1];
        int d = drift_op_norm_dim(op->dim, x->ndim);
        int64_t ys[DRIFT_MAX_DIMS];
        contiguous_strides(y->ndim, y->shape, ys);
        c.nd = x->ndim;
        for (int i = 0; i < x->ndim; i++) {
            c.shape[i] = x->shape[i];
            c.ss[i] = xs[i];
            c.ds[i] = os[i];
        }
        int rc = x->numel > 0 ? launch_copy(ctx, &c, where, err) : DRIFT_OK;
        if (rc || y->numel == 0) return rc;
        copy_init(&c, y, out);
        c.nd = y->ndim;
        for (int i = 0; i < y->ndim; i++) {
            c.shape[i] = y->shape[i];
            c.ss[i] = ys[i];
            c.ds[i] = os[i];
        }
        c.doff = x->shape[d] * os[d];
        return launch_copy(ctx, &c, where, err);
    }
    case DRIFT_OP_VIEW:
        c.nd = 1;
        c.shape[0] = x->numel;
        c.ss[0] = c.ds[0] = 1;
        return launch_copy(ctx, &c, where, err);
    case DRIFT_OP_PATCHIFY:
    case DRIFT_OP_UNPATCHIFY: {
        const drift_tensor *img = op->kind == DRIFT_OP_PATCHIFY ? x : out;
        const int64_t B = img->shape[0], C = img->shape[1], F = img->shape[2], H = img->shape[3], W = img->shape[4];
        const int64_t pf = op->patch[0], ph = op->patch[1], pw = op->patch[2];
        const int64_t Fp = F / pf, Hp = H / ph, Wp = W / pw;
        /* image strides of the index dims (b, f', h', w', c, i, j, k) */
        const int64_t im_b = C * F * H * W, im_f = pf * H * W, im_h = ph * W, im_w = pw, im_c = F * H * W,
                      im_i = H * W, im_j = W, im_k = 1;
        c.nd = 8;
        if (op->kind == DRIFT_OP_PATCHIFY) {
            /* index space (b, f', h', w', features): tokens row-major, features
               (c, pf, ph, pw), or with layout 1 channels-last (pf, ph, pw, c),
               cuDNN's NHWC implicit-GEMM K order */
            const int cl = op->layout == 1;
            const int64_t shp[8] = {B, Fp, Hp, Wp, cl ? pf : C, cl ? ph : pf, cl ? pw : ph, cl ? C : pw};
            const int64_t ss[8] = {im_b, im_f, im_h, im_w, cl ? im_i : im_c, cl ? im_j : im_i, cl ? im_k : im_j,
                                   cl ? im_c : im_k};
            int64_t ds[8];
            contiguous_strides(8, shp, ds);
            for (int i = 0; i < 8; i++) {
                c.shape[i] = shp[i];
                c.ss[i] = ss[i];
                c.ds[i] = ds[i];
            }
        } else {
            /* index space (b, f', h', w', i, j, k, c): the token tensor
               row-major, features (pf, ph, pw, c) */
            const int64_t shp[8] = {B, Fp, Hp, Wp, pf, ph, pw, C};
            const int64_t ds[8] = {im_b, im_f, im_h, im_w, im_i, im_j, im_k, im_c};
            int64_t ss[8];
            contiguous_strides(8, shp, ss);
            for (int i = 0; i < 8; i++) {
                c.shape[i] = shp[i];
                c.ss[i] = ss[i];
                c.ds[i] = ds[i];
            }
        }
        return launch_copy(ctx, &c, where, err);
    }
    default: break;
    }
    return drift_err_set(err, DRIFT_E_INTERNAL, where, "not a layout op");
}

/* t's data as an operand of dtype c: t itself, or a rounded copy in *tmp. */
static int operand_as(dcu_ctx *ctx, const drift_tensor *t, drift_dtype c, const void **p, void **tmp,
                      const char *where, drift_err *err) {
    *tmp = NULL;
    *p = t->data;
    if (t->dtype == c) return DRIFT_OK;
    cudaError_t e = dcu_malloc(ctx, tmp, (size_t)(t->numel > 0 ? t->numel : 1) * drift_dtype_size(c));
    if (e != cudaSuccess) return dcu_check(e, err, where, "allocating an operand copy");
    e = dcu_launch_unary(ctx, DCU_UN_CAST, t->data, t->dtype, *tmp, c, t->numel, 0.0f, 0.0f);
    if (e != cudaSuccess) return dcu_check(e, err, where, "rounding an operand to the compute dtype");
    *p = *tmp;
    return DRIFT_OK;
}

static int run_linear(dcu_ctx *ctx, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                      const char *where, drift_err *err) {
    const drift_tensor *x = in[0], *w = in[1], *bias = op->n_in > 2 ? in[2] : NULL;
    int64_t K = x->shape[x->ndim - 1], N = w->shape[0], M = 1;
    for (int i = 0; i < x->ndim - 1; i++) M *= x->shape[i];
    if (M == 0 || N == 0) return DRIFT_OK;
    const void *xa = NULL, *wa = NULL;
    void *tx = NULL, *tw = NULL;
    int rc = operand_as(ctx, x, op->compute, &xa, &tx, where, err);
    if (!rc) rc = operand_as(ctx, w, op->compute, &wa, &tw, where, err);
    if (!rc) {
        /* y[M, N] row-major = column-major N x M: y^T = W (N x K) . x^T (K x M) */
        dcu_gemm g;
        g.transa = 1;
        g.transb = 0;
        g.m = N;
        g.n = M;
        g.k = K;
        g.a = wa;
        g.ta = op->compute;
        g.lda = K > 0 ? K : 1;
        g.stride_a = 0;
        g.b = xa;
        g.tb = op->compute;
        g.ldb = K > 0 ? K : 1;
        g.stride_b = 0;
        g.d = out->data;
        g.td = out->dtype;
        g.ldd = N;
        g.stride_d = 0;
        g.batch = 1;
        g.alpha = 1.0f;
        g.bias = bias ? bias->data : NULL;
        g.tbias = bias ? bias->dtype : DRIFT_F32;
        rc = dcu_gemm_run(ctx, &g, err);
        if (rc) drift_err_prefix(err, "%s [M=%lld N=%lld K=%lld]", where, (long long)M, (long long)N, (long long)K);
    }
    dcu_free(ctx, tx);
    dcu_free(ctx, tw);
    return rc;
}

static int run_op(dcu_ctx *ctx, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                  const char *where, drift_err *err) {
    if (op->kind >= DRIFT_OP_UNARY) return dcu_run_aten(ctx, op, in, out, where, err); /* captured graphs' ops */
    const drift_tensor *x = in[0];
    switch (op->kind) {
    case DRIFT_OP_CAST:
    case DRIFT_OP_AFFINE:
    case DRIFT_OP_SILU:
    case DRIFT_OP_GELU_TANH: {
        int u = op->kind == DRIFT_OP_CAST     ? DCU_UN_CAST
                : op->kind == DRIFT_OP_AFFINE ? DCU_UN_AFFINE
                : op->kind == DRIFT_OP_SILU   ? DCU_UN_SILU
                                              : DCU_UN_GELU_TANH;
        return dcu_check(dcu_launch_unary(ctx, u, x->data, x->dtype, out->data, out->dtype, out->numel, op->alpha,
                                          op->beta),
                         err, where, "elementwise kernel");
    }
    case DRIFT_OP_ADD:
    case DRIFT_OP_SUB:
    case DRIFT_OP_MUL: {
        drift_bcast bc;
        drift_bcast_plan(in[0], in[1], &bc);
        int b = op->kind == DRIFT_OP_ADD ? DCU_BIN_ADD : op->kind == DRIFT_OP_SUB ? DCU_BIN_SUB : DCU_BIN_MUL;
        return dcu_check(dcu_launch_binary(ctx, b, in[0]->data, in[0]->dtype, in[1]->data, in[1]->dtype, out->data,
                                           out->dtype, &bc),
                         err, where, "binary kernel");
    }
    case DRIFT_OP_LINEAR: return run_linear(ctx, op, in, out, where, err);
    case DRIFT_OP_LAYER_NORM:
    case DRIFT_OP_RMS_NORM: {
        int64_t D = x->shape[x->ndim - 1];
        if (D == 0) return DRIFT_OK;
        int64_t rows = x->numel / D;
        const drift_tensor *w = op->n_in > 1 ? in[1] : NULL, *b = op->n_in > 2 ? in[2] : NULL;
        cudaError_t e;
        if (op->kind == DRIFT_OP_LAYER_NORM)
            e = dcu_launch_layer_norm(ctx, x->data, x->dtype, rows, D, w ? w->data : NULL, w ? w->dtype : DRIFT_F32,
                                      b ? b->data : NULL, b ? b->dtype : DRIFT_F32, out->data, out->dtype, op->eps);
        else
            e = dcu_launch_rms_norm(ctx, x->data, x->dtype, rows, D, w ? w->data : NULL, w ? w->dtype : DRIFT_F32,
                                    out->data, out->dtype, op->eps);
        return dcu_check(e, err, where, "norm kernel");
    }
    case DRIFT_OP_ROPE:
        return dcu_check(dcu_launch_rope(ctx, x->data, x->dtype, x->shape[0], x->shape[1], x->shape[2], x->shape[3],
                                         in[1]->data, in[1]->dtype, in[2]->data, in[2]->dtype, out->data, out->dtype),
                         err, where, "rope kernel");
    case DRIFT_OP_ATTENTION: {
        int rc = dcu_attention_run(ctx, op, in[0], in[1], in[2], op->n_in > 3 ? in[3] : NULL, out, err);
        if (rc)
            drift_err_prefix(err, "%s [q %lldx%lldx%lldx%lld, Lk %lld, layout %d]", where, (long long)x->shape[0],
                             (long long)x->shape[1], (long long)x->shape[2], (long long)x->shape[3],
                             (long long)in[1]->shape[op->layout ? 1 : 2], op->layout);
        return rc;
    }
    case DRIFT_OP_PERMUTE:
    case DRIFT_OP_NARROW:
    case DRIFT_OP_CONCAT:
    case DRIFT_OP_VIEW:
    case DRIFT_OP_PATCHIFY:
    case DRIFT_OP_UNPATCHIFY: return run_layout(ctx, op, in, out, where, err);
    case DRIFT_OP_TIMESTEP_SINUSOID: {
        const double mp = op->max_period != 0.0f ? (double)op->max_period : 10000.0;
        const float c = (float)(-log(mp));
        return dcu_check(dcu_launch_sinusoid(ctx, x->data, x->dtype, out->data, out->dtype, x->shape[0], op->dim, c,
                                             op->flip_sin_to_cos),
                         err, where, "sinusoid kernel");
    }
    default: break;
    }
    return drift_err_set(err, DRIFT_E_UNSUPPORTED, where, "cuda backend: op %s not implemented",
                         drift_op_name(op->kind));
}

/* Ops whose fp64 results are the same bits whoever computes them (casts and
 * data movement): not a torch-profile fallback. */
static int f64_moves_only(drift_op_kind k) {
    switch (k) {
    case DRIFT_OP_CAST:
    case DRIFT_OP_PERMUTE:
    case DRIFT_OP_NARROW:
    case DRIFT_OP_CONCAT:
    case DRIFT_OP_VIEW:
    case DRIFT_OP_PATCHIFY:
    case DRIFT_OP_UNPATCHIFY:
    case DRIFT_OP_STRIDED:
    case DRIFT_OP_SCATTER: return 1;
    default: return 0;
    }
}

static int cuda_run(const drift_backend *be, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                    drift_err *err) {
    char where[64];
    snprintf(where, sizeof where, "op %s", drift_op_name(op->kind));
    dcu_ctx *ctx = ctx_of(be);
    int rc = select_device(ctx, err);
    if (rc) return rc;
    if (out->numel == 0) return DRIFT_OK;
    if (op->kind == DRIFT_OP_LINEAR || op->kind == DRIFT_OP_BMM || op->kind == DRIFT_OP_ATTENTION)
        ctx->last_choice[0] = '\0'; /* the torch profile's GEMM and attention paths fill it */
    if (dcu_op_needs_host(op, in)) {
        /* the torch profile's own kernels first (softmax, group norm, reductions over several last
           dims, bmm's cuBLAS call): the host runs drift's cpu order, not torch's */
        const int torch_has = op->kind == DRIFT_OP_SOFTMAX || op->kind == DRIFT_OP_GROUP_NORM ||
                              op->kind == DRIFT_OP_BMM ||
                              (op->kind == DRIFT_OP_REDUCE && (op->sub == DRIFT_REDUCE_SUM || op->sub == DRIFT_REDUCE_MEAN));
        if (ctx->kernel_profile == DRIFT_CUDA_KERNELS_TORCH && torch_has && !dcu_op_is_f64(op, in) &&
            !drift_dtype_is_int(op->out)) {
            int handled = 0;
            rc = dct_torch_run(ctx, op, in, out, where, &handled, err);
            if (handled || rc) return rc;
        }
        return dcu_run_on_host(ctx, be, op, in, out, err);
    }
    if (dcu_op_is_f64(op, in)) { /* both profiles: the GPU oracle's bodies */
        if (ctx->kernel_profile == DRIFT_CUDA_KERNELS_TORCH && !f64_moves_only(op->kind))
            dct_torch_note_fallback(ctx, op->kind, "fp64: the GPU oracle's kernels (drift's own math), not torch's");
        return dcu_run_f64(ctx, op, in, out, where, err);
    }
    if (ctx->kernel_profile == DRIFT_CUDA_KERNELS_TORCH) {
        int handled = 0;
        rc = dct_torch_run(ctx, op, in, out, where, &handled, err);
        if (handled) return rc; /* else the fallback is recorded: run the exact kernel */
    }
    return run_op(ctx, op, in, out, where, err);
}

static void cuda_last_choice(const drift_backend *be, char *buf, size_t bufsz) {
    snprintf(buf, bufsz, "%s", ctx_of(be)->last_choice);
}

/* ------------------------------------------------------------------------ */
/* metrics, sync                                                              */

static int cuda_metrics(const drift_backend *be, const drift_tensor *t, const drift_tensor *r, drift_metric_acc *acc,
                        drift_err *err) {
    dcu_ctx *ctx = ctx_of(be);
    int rc = select_device(ctx, err);
    if (rc) return rc;
    dcu_metric_res res;
    void *n64[2] = {NULL, NULL}; /* an fp64 side narrowed to fp32 (metrics compare fp32 values, DESIGN.md s7) */
    const void *tv = t->data, *rv = r->data;
    drift_dtype tt = t->dtype, tr = r->dtype;
    if (drift_dtype_wide(tt) && !(rc = dcu_f64_narrow(ctx, t, &n64[0], err))) tv = n64[0], tt = DRIFT_F32;
    if (!rc && drift_dtype_wide(tr) && !(rc = dcu_f64_narrow(ctx, r, &n64[1], err))) rv = n64[1], tr = DRIFT_F32;
    if (!rc) rc = dcu_metrics_run(ctx, tv, tt, rv, tr, t->numel, &res, err);
    dcu_free(ctx, n64[0]);
    dcu_free(ctx, n64[1]);
    if (rc) return rc;
    /* merge as one pass over acc's elements followed by these (replay/analysis/metrics.h) */
    const int64_t base = acc->numel;
    if (res.arg >= 0 && (acc->argmax < 0 || res.max_d > acc->max_abs_diff)) {
        acc->max_abs_diff = res.max_d;
        acc->argmax = base + res.arg;
    }
    if ((double)res.max_r > acc->max_abs_ref) acc->max_abs_ref = (double)res.max_r;
    acc->sum_abs_diff += res.sum_abs;
    acc->sum_sq_diff += res.sum_sq;
    acc->sum_tr += res.sum_tr;
    acc->sum_tt += res.sum_tt;
    acc->sum_rr += res.sum_rr;
    acc->numel = base + t->numel;
    acc->nan_t += res.nan_t;
    acc->inf_t += res.inf_t;
    acc->nan_r += res.nan_r;
    acc->inf_r += res.inf_r;
    acc->n_diff += res.n_diff;
    return DRIFT_OK;
}

static int cuda_sync(const drift_backend *be, drift_err *err) {
    dcu_ctx *ctx = ctx_of(be);
    int rc = select_device(ctx, err);
    if (rc) return rc;
    return dcu_check(cudaStreamSynchronize(ctx->stream), err, ctx->name, "queued work failed");
}

/* ------------------------------------------------------------------------ */
/* creation                                                                   */

/* kernels= and the torch profile's options (cuda_backend.h). */
static int pick(const drift_backend_opts *o, const char *key, const char *const *names, int n, int dflt, int *v,
                drift_err *err) {
    const char *s = drift_backend_opt_str(o, key);
    *v = dflt;
    if (!s) return DRIFT_OK;
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) {
            *v = i;
            return DRIFT_OK;
        }
    char allowed[128] = "";
    for (int i = 0; i < n; i++)
        snprintf(allowed + strlen(allowed), sizeof allowed - strlen(allowed), "%s%s", i ? "|" : "", names[i]);
    return drift_err_set(err, DRIFT_E_INPUT, "backend", "backend '%s': %s=%s: expected one of %s", o->spec, key, s,
                         allowed);
}

static int read_torch_options(dcu_ctx *ctx, const drift_backend_opts *o, drift_err *err) {
    static const char *const profiles[] = {"exact", "torch"}, *const gemms[] = {"auto", "lt", "cublas"},
                             *const sdpas[] = {"auto", "exact"}, *const heurs[] = {"instant", "a", "b"},
                             *const sgraphs[] = {"auto", "unified", "composite"};
    int rc;
    if ((rc = pick(o, "kernels", profiles, 2, DRIFT_CUDA_KERNELS_EXACT, &ctx->kernel_profile, err)) ||
        (rc = pick(o, "torch_gemm", gemms, 3, 0, &ctx->torch_opts.gemm_mode, err)) ||
        (rc = pick(o, "sdpa", sdpas, 2, 0, &ctx->torch_opts.sdpa_off, err)) ||
        (rc = pick(o, "sdpa_graph", sgraphs, 3, 0, &ctx->torch_opts.sdpa_graph, err)) ||
        (rc = pick(o, "conv_heur", heurs, 3, 0, &ctx->torch_opts.conv_heur, err)))
        return rc;
    long cws = 0, lt = 1024, th = 128, comb = 0, rms = 0, stats = 0, skip = 0, ffast = 0;
    if ((rc = drift_backend_opt_int(o, "cublas_ws", 0, 1L << 32, &cws, err)) ||
        (rc = drift_backend_opt_int(o, "lt_ws_kib", 0, 1L << 22, &lt, err)) ||
        (rc = drift_backend_opt_int(o, "ln_threads", 32, 1024, &th, err)) ||
        (rc = drift_backend_opt_int(o, "ln_combine", 0, 2, &comb, err)) ||
        (rc = drift_backend_opt_int(o, "rms_variant", 0, 15, &rms, err)) ||
        (rc = drift_backend_opt_int(o, "sdpa_stats", 0, 1, &stats, err)) ||
        (rc = drift_backend_opt_int(o, "conv_skip", 0, 1000, &skip, err)) ||
        (rc = drift_backend_opt_int(o, "flash_fast", 0, 1, &ffast, err)))
        return rc;
    if (th % 32)
        return drift_err_set(err, DRIFT_E_INPUT, "backend", "backend '%s': ln_threads=%ld: expected a multiple of 32",
                             o->spec, th);
    ctx->torch_opts.cublas_ws = cws;
    ctx->torch_opts.lt_ws_kib = lt;
    ctx->torch_opts.ln_threads = (int)th;
    ctx->torch_opts.ln_combine = (int)comb;
    ctx->torch_opts.rms_variant = (int)rms;
    ctx->torch_opts.sdpa_stats = (int)stats;
    ctx->torch_opts.conv_skip = (int)skip;
    ctx->torch_opts.flash_fast = (int)ffast;
    return DRIFT_OK;
}

/* The kernel variants of the spec's options (kernels/backend.h), fixed here. */
static int read_variants(dcu_ctx *ctx, const drift_backend_opts *o, drift_err *err) {
    static const char *const keys[] = {"gemm",       "attention",  "i64",        "norm_smem",   "attn_scratch",
                                       "metrics_grid", "kernels",  "torch_gemm", "cublas_ws",   "lt_ws_kib",
                                       "ln_threads", "ln_combine", "rms_variant", "sdpa",       "sdpa_stats",
                                       "sdpa_graph", "conv_heur",  "conv_skip",  "flash_fast", NULL};
    int rc = drift_backend_opts_check(o, keys, err);
    if (rc) return rc;
    if ((rc = read_torch_options(ctx, o, err))) return rc;
    const char *g = drift_backend_opt_str(o, "gemm");
    ctx->gemm_mode = DCU_GEMM_AUTO;
    if (g && strcmp(g, "unfused") == 0) ctx->gemm_mode = DCU_GEMM_UNFUSED;
    else if (g && strcmp(g, "naive") == 0) ctx->gemm_mode = DCU_GEMM_NAIVE;
    else if (g && strcmp(g, "auto") != 0 && strcmp(g, "lt") != 0)
        return drift_err_set(err, DRIFT_E_INPUT, "backend", "backend '%s': gemm=%s: expected auto, unfused or naive",
                             o->spec, g);
    const char *a = drift_backend_opt_str(o, "attention");
    static const char *const attn[] = {"auto", "unfused", "fused", "fused_mma", "fused_wgmma"};
    ctx->attn_mode = DCU_ATTN_AUTO;
    if (a) {
        int found = -1;
        for (int i = 0; i < 5; i++)
            if (strcmp(a, attn[i]) == 0) found = i;
        if (found < 0)
            return drift_err_set(err, DRIFT_E_INPUT, "backend",
                                 "backend '%s': attention=%s: expected auto, unfused, fused, fused_mma or fused_wgmma",
                                 o->spec, a);
        ctx->attn_mode = found;
    }
    snprintf(ctx->attn_mode_name, sizeof ctx->attn_mode_name, "%s", attn[ctx->attn_mode]);
    long i64 = 0, smem = 1, scratch = 0, grid = 0;
    if ((rc = drift_backend_opt_int(o, "i64", 0, 1, &i64, err)) ||
        (rc = drift_backend_opt_int(o, "norm_smem", 0, 1, &smem, err)) ||
        (rc = drift_backend_opt_int(o, "attn_scratch", 1, LONG_MAX, &scratch, err)) ||
        (rc = drift_backend_opt_int(o, "metrics_grid", 1, 65535, &grid, err)))
        return rc;
    ctx->force_i64 = (int)i64;
    ctx->norm_smem = (int)smem;
    ctx->attn_budget = scratch > 0 ? (size_t)scratch : DCU_ATTN_BUDGET_DEFAULT;
    ctx->metrics_grid = (int)grid;
    return DRIFT_OK;
}

int drift_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n > 0 ? n : 0;
}

int drift_cuda_backend_is_cuda(const drift_backend *be) { return be && be->destroy == cuda_destroy; }

void *drift_cuda_backend_stream(const drift_backend *be) {
    if (!drift_cuda_backend_is_cuda(be)) return NULL;
    return (void *)ctx_of(be)->stream;
}

static void cuda_destroy(drift_backend *be) {
    if (!be) return;
    dcu_ctx *ctx = ctx_of(be);
    if (ctx) {
        if (cudaSetDevice(ctx->device) == cudaSuccess && ctx->stream) (void)cudaStreamSynchronize(ctx->stream);
        if (ctx->metrics_part) dcu_free(ctx, ctx->metrics_part);
        if (ctx->stream) (void)cudaStreamSynchronize(ctx->stream);
        dcu_gemm_cache_destroy(ctx);
        dct_torch_destroy(ctx);
        drift_backend_free(ctx->host);
        if (ctx->lt) cublasLtDestroy(ctx->lt);
        if (ctx->lt_ws) (void)cudaFree(ctx->lt_ws);
        for (int i = 0; i < 2; i++) {
            if (ctx->pin_ev[i]) (void)cudaEventDestroy(ctx->pin_ev[i]);
            if (ctx->pinned[i]) (void)cudaFreeHost(ctx->pinned[i]);
        }
        if (ctx->metrics_host) (void)cudaFreeHost(ctx->metrics_host);
        if (ctx->have_pool) (void)cudaMemPoolDestroy(ctx->pool);
        if (ctx->stream) (void)cudaStreamDestroy(ctx->stream);
        (void)cudaGetLastError();
        drift_free(ctx);
    }
    drift_free(be);
}

int drift_cuda_kernel_profile_parse(const char *s) {
    if (!s) return -1;
    if (strcmp(s, "exact") == 0) return DRIFT_CUDA_KERNELS_EXACT;
    if (strcmp(s, "torch") == 0) return DRIFT_CUDA_KERNELS_TORCH;
    return -1;
}

const char *drift_cuda_kernel_profile_name(int profile) {
    return profile == DRIFT_CUDA_KERNELS_EXACT ? "exact" : profile == DRIFT_CUDA_KERNELS_TORCH ? "torch" : "?";
}

int drift_cuda_backend_kernel_profile(const drift_backend *be) {
    return drift_cuda_backend_is_cuda(be) ? ctx_of(be)->kernel_profile : -1;
}

uint64_t drift_cuda_backend_torch_fallbacks(const drift_backend *be, int64_t *count) {
    if (count) *count = 0;
    if (!drift_cuda_backend_is_cuda(be)) return 0;
    const dcu_ctx *ctx = ctx_of(be);
    if (count) *count = ctx->torch_fallbacks;
    return ctx->torch_fallback_mask;
}

const char *drift_cuda_backend_torch_fallback_reason(const drift_backend *be) {
    return drift_cuda_backend_is_cuda(be) ? ctx_of(be)->torch_fallback_why : "";
}

const char *drift_cuda_backend_torch_fallback_reason_of(const drift_backend *be, int kind) {
    if (!drift_cuda_backend_is_cuda(be) || kind < 0 || kind >= 64) return "";
    return ctx_of(be)->torch_fallback_kind_why[kind];
}

int drift_cuda_backend_create_opts(const drift_backend_opts *o, drift_backend **out, drift_err *err) {
    if (!out) return drift_err_set(err, DRIFT_E_INTERNAL, "cuda", "drift_cuda_backend_create: out is NULL");
    *out = NULL;
    const int device = o->device;
    dcu_ctx variants;
    memset(&variants, 0, sizeof variants);
    int rc = read_variants(&variants, o, err);
    if (rc) return rc;
    const int profile = variants.kernel_profile;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, "cuda", "no usable CUDA device: %s (%s)", cudaGetErrorName(e),
                             cudaGetErrorString(e));
    }
    if (count <= 0) return drift_err_set(err, DRIFT_E_UNSUPPORTED, "cuda", "no CUDA device present");
    if (device < 0 || device >= count)
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, "cuda", "CUDA device %d does not exist (%d present)", device,
                             count);

    drift_backend *be = drift_calloc(1, sizeof *be);
    dcu_ctx *ctx = drift_calloc(1, sizeof *ctx);
    if (!be || !ctx) {
        drift_free(be);
        drift_free(ctx);
        return drift_err_set(err, DRIFT_E_NOMEM, "cuda", "cannot allocate the cuda backend");
    }
    *ctx = variants;
    ctx->device = device;
    ctx->kernel_profile = profile;
    snprintf(ctx->name, sizeof ctx->name, "cuda:%d", device);
    be->name = ctx->name;
    be->ctx = ctx;
    be->destroy = cuda_destroy;

#define CREATE_STEP(call, what)                                                                                        \
    do {                                                                                                               \
        if (!rc) rc = dcu_check((call), err, ctx->name, what);                                                         \
    } while (0)
    CREATE_STEP(cudaSetDevice(device), "cudaSetDevice");
    int pools = 0;
    CREATE_STEP(cudaDeviceGetAttribute(&ctx->sm_count, cudaDevAttrMultiProcessorCount, device), "device attributes");
    CREATE_STEP(cudaDeviceGetAttribute(&ctx->max_threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, device),
                "device attributes");
    CREATE_STEP(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device), "device attributes");
    CREATE_STEP(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamDefault), "cudaStreamCreate");
    if (!rc && pools) {
        struct cudaMemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = cudaMemAllocationTypePinned;
        props.handleTypes = cudaMemHandleTypeNone;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = device;
        CREATE_STEP(cudaMemPoolCreate(&ctx->pool, &props), "cudaMemPoolCreate");
        if (!rc) {
            ctx->have_pool = 1;
            /* keep freed blocks cached across synchronisations */
            uint64_t thr = UINT64_MAX;
            CREATE_STEP(cudaMemPoolSetAttribute(ctx->pool, cudaMemPoolAttrReleaseThreshold, &thr),
                        "cudaMemPoolSetAttribute");
        }
    }
    if (!rc) {
        cublasStatus_t s = cublasLtCreate(&ctx->lt);
        if (s != CUBLAS_STATUS_SUCCESS) {
            ctx->lt = NULL;
            rc = drift_err_set(err, DRIFT_E_IO, ctx->name, "cublasLtCreate failed: %s", cublasLtGetStatusString(s));
        }
    }
    ctx->lt_ws_size = DCU_WORKSPACE_BYTES;
    CREATE_STEP(cudaMalloc(&ctx->lt_ws, ctx->lt_ws_size), "allocating the cuBLASLt workspace");
    ctx->pinned_size = DCU_PINNED_BYTES;
    for (int i = 0; i < 2; i++) {
        CREATE_STEP(cudaHostAlloc(&ctx->pinned[i], ctx->pinned_size, cudaHostAllocDefault), "pinned staging buffer");
        CREATE_STEP(cudaEventCreateWithFlags(&ctx->pin_ev[i], cudaEventDisableTiming), "staging event");
    }
    CREATE_STEP(cudaHostAlloc(&ctx->metrics_host, sizeof(dcu_metric_res), cudaHostAllocDefault),
                "pinned metric result");
#undef CREATE_STEP
    if (!rc) rc = dcu_gemm_cache_create(ctx, err);
    if (!rc && profile == DRIFT_CUDA_KERNELS_TORCH) rc = dct_torch_create(ctx, err);
    if (!rc) dcu_identity_fill(ctx);
    if (rc) {
        cuda_destroy(be);
        return rc;
    }
    be->stores = dtype_ok;
    be->elem_bytes = cuda_elem_bytes;
    be->supports_op = cuda_supports_op;
    be->alloc = cuda_alloc;
    be->release = cuda_release;
    be->upload_f32 = cuda_upload_f32;
    be->upload_f64 = cuda_upload_f64;
    be->download_f32 = cuda_download_f32;
    be->download_f64 = cuda_download_f64;
    be->run = cuda_run;
    be->metrics = cuda_metrics;
    be->sync = cuda_sync;
    be->alias = cuda_alias;
    be->last_choice = cuda_last_choice;
    *out = be;
    return DRIFT_OK;
}
