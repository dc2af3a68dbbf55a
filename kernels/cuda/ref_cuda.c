/* The fp64 oracle on a GPU ("ref-cuda:N"): kernels/ref/ref_backend.c's
 * semantics (every value a double, no rounding anywhere, op->compute and
 * op->out only validated) with device storage, bit for bit the CPU
 * oracle's results: every sum runs in the CPU's order (GEMMs are drift's own
 * order-preserving fp64 kernel, ref_cuda_gemm.cu, not cuBLAS), without FMA
 * contraction, and the transcendentals are the CPU's own (kernels/math64.h).
 * Attention materialises its scores per (batch, head) in query chunks within
 * the spec option attn_scratch=BYTES ("ref-cuda:0:attn_scratch=4096";
 * default 1 GiB); the chunking changes no sum. All work is on the
 * backend's own stream; transfers and metrics wait for it. The door
 * (kernels/door.c) has checked every argument before a table entry runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "formats/alloc.h"
#include "kernels/backend_impl.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/ref_cuda_internal.h"

typedef struct rc_ctx {
    int device;
    cudaStream_t stream;
    rcu_metric_part *part;       /* device, part_cap entries */
    size_t part_cap;
    size_t attn_budget;          /* bytes of score scratch */
    char name[32];
} rc_ctx;

static rc_ctx *ctx_of(const drift_backend *be) { return (rc_ctx *)be->ctx; }

static int cu(cudaError_t e, drift_err *err, const rc_ctx *c, const char *what) {
    if (e == cudaSuccess) return DRIFT_OK;
    (void)cudaGetLastError();
    return drift_err_set(err, e == cudaErrorMemoryAllocation ? DRIFT_E_NOMEM : DRIFT_E_IO, c->name, "%s: %s", what,
                         cudaGetErrorString(e));
}

static int sel(const rc_ctx *c, drift_err *err) { return cu(cudaSetDevice(c->device), err, c, "cudaSetDevice"); }

static int dtype_ok(drift_dtype dt) { return drift_dtype_is_float(dt) || drift_dtype_is_int(dt); }

static size_t rc_elem_bytes(drift_dtype dt) {
    (void)dt;
    return sizeof(double);
}

static int rc_supports_op(const drift_backend *be, const drift_op *op) {
    (void)be;
    return dtype_ok(op->out);
}

static int rc_alloc(const drift_backend *be, drift_tensor *t, drift_err *err) {
    rc_ctx *c = ctx_of(be);
    int rc = sel(c, err);
    if (rc) return rc;
    void *p = NULL;
    if ((rc = cu(cudaMallocAsync(&p, (size_t)(t->numel > 0 ? t->numel : 1) * sizeof(double), c->stream), err, c,
                 "alloc")))
        return rc;
    t->data = p;
    return DRIFT_OK;
}

static void rc_release(const drift_backend *be, drift_tensor *t) {
    rc_ctx *c = ctx_of(be);
    if (cudaSetDevice(c->device) != cudaSuccess || cudaFreeAsync(t->data, c->stream) != cudaSuccess)
        (void)cudaGetLastError();
    t->data = NULL;
}

/* A view elem_offset doubles into base (the door checked that it fits). */
static int rc_alias(const drift_backend *be, const drift_tensor *base, int64_t off, drift_tensor *out, drift_err *err) {
    (void)be;
    (void)err;
    out->data = (double *)base->data + off;
    return DRIFT_OK;
}

#define STAGE ((size_t)1 << 22) /* elements per fp32 transfer chunk */

/* fp32 crosses the bus as fp32 (half the bytes) and is widened / rounded on
 * the device, one chunk of STAGE elements through a device buffer at a time. */
static int rc_upload(const drift_backend *be, drift_tensor *t, const float *s32, const double *s64, drift_err *err) {
    rc_ctx *c = ctx_of(be);
    int rc = sel(c, err);
    if (!rc) rc = cu(cudaStreamSynchronize(c->stream), err, c, "upload: queued work failed");
    if (rc) return rc;
    size_t n = (size_t)t->numel;
    if (s64) return cu(cudaMemcpy(t->data, s64, n * sizeof(double), cudaMemcpyHostToDevice), err, c, "upload");
    if (n == 0) return DRIFT_OK;
    float *st = NULL;
    rc = cu(cudaMallocAsync((void **)&st, (n < STAGE ? n : STAGE) * sizeof *st, c->stream), err, c, "upload: staging");
    for (size_t i = 0; !rc && i < n; i += STAGE) {
        size_t m = n - i < STAGE ? n - i : STAGE;
        rc = cu(cudaMemcpyAsync(st, s32 + i, m * sizeof *st, cudaMemcpyHostToDevice, c->stream), err, c, "upload");
        if (!rc) rc = cu(rcu_from_f32(c->stream, st, (double *)t->data + i, (int64_t)m), err, c, "upload: widen");
        if (!rc) rc = cu(cudaStreamSynchronize(c->stream), err, c, "upload");
    }
    if (st && cudaFreeAsync(st, c->stream) != cudaSuccess) (void)cudaGetLastError();
    return rc;
}

static int rc_upload_f32(const drift_backend *be, drift_tensor *t, const float *src, drift_err *err) {
    return rc_upload(be, t, src, NULL, err);
}
static int rc_upload_f64(const drift_backend *be, drift_tensor *t, const double *src, drift_err *err) {
    return rc_upload(be, t, NULL, src, err);
}

static int rc_download(const drift_backend *be, const drift_tensor *t, float *d32, double *d64, drift_err *err) {
    rc_ctx *c = ctx_of(be);
    int rc = sel(c, err);
    if (!rc) rc = cu(cudaStreamSynchronize(c->stream), err, c, "download: queued work failed");
    if (rc) return rc;
    size_t n = (size_t)t->numel;
    if (d64) return cu(cudaMemcpy(d64, t->data, n * sizeof(double), cudaMemcpyDeviceToHost), err, c, "download");
    if (n == 0) return DRIFT_OK;
    float *st = NULL;
    rc = cu(cudaMallocAsync((void **)&st, (n < STAGE ? n : STAGE) * sizeof *st, c->stream), err, c, "download: staging");
    for (size_t i = 0; !rc && i < n; i += STAGE) {
        size_t m = n - i < STAGE ? n - i : STAGE;
        rc = cu(rcu_to_f32(c->stream, (const double *)t->data + i, st, (int64_t)m), err, c, "download: round");
        if (!rc) rc = cu(cudaMemcpyAsync(d32 + i, st, m * sizeof *st, cudaMemcpyDeviceToHost, c->stream), err, c, "download");
        if (!rc) rc = cu(cudaStreamSynchronize(c->stream), err, c, "download");
    }
    if (st && cudaFreeAsync(st, c->stream) != cudaSuccess) (void)cudaGetLastError();
    return rc;
}

static int rc_download_f32(const drift_backend *be, const drift_tensor *t, float *dst, drift_err *err) {
    return rc_download(be, t, dst, NULL, err);
}
static int rc_download_f64(const drift_backend *be, const drift_tensor *t, double *dst, drift_err *err) {
    return rc_download(be, t, NULL, dst, err);
}

/* ---- ops (drift_rcu_run_op: this backend's run and the cuda backend's fp64 path) */

static int cue(cudaError_t e, drift_err *err, const rcu_exec *c, const char *what) {
    if (e == cudaSuccess) return DRIFT_OK;
    (void)cudaGetLastError();
    return drift_err_set(err, e == cudaErrorMemoryAllocation ? DRIFT_E_NOMEM : DRIFT_E_IO, c->name, "%s: %s", what,
                         cudaGetErrorString(e));
}
static const double *D(const drift_tensor *t) { return (const double *)t->data; }

/* y[m, n] = sum_k x[m, k] w[n, k] (+ b[n]), the CPU's linear_rows. */
static int run_linear(const rcu_exec *c, const drift_op *op, const drift_tensor *const *in, drift_tensor *out, drift_err *err) {
    const drift_tensor *x = in[0], *w = in[1];
    const int64_t K = x->shape[x->ndim - 1], N = w->shape[0], M = K ? x->numel / K : out->numel / (N ? N : 1);
    return cue(rcu_gemm(c->stream, 1, D(x), K, D(w), K, out->data, N, M, N, K, RCU_EPI_BIAS,
                       op->n_in > 2 ? D(in[2]) : NULL, 1.0, NULL),
              err, c, "linear");
}

/* Strides (b, h, l) of a contiguous 4-d tensor in `layout` (ref_backend.c). */
static void attn_strides(const drift_tensor *t, int layout, int64_t *s) {
    const int64_t Dd = t->shape[3], n1 = t->shape[1], n2 = t->shape[2];
    s[0] = n1 * n2 * Dd;
    s[1] = layout ? Dd : n2 * Dd;
    s[2] = layout ? n2 * Dd : Dd;
}

/* The CPU's attn_rows, per group of (b, h) pairs (one batched launch each)
 * and query chunk: S = (Q K^T) * scale, rows of S -> exp(s - max) and their
 * sums l (in key order), O = (P V) / l. The groups and chunks fill at most
 * attn_budget bytes of scores; they change no sum. */
static int run_attention(const rcu_exec *c, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                         drift_err *err) {
    const drift_tensor *q = in[0], *k = in[1], *v = in[2];
    const int ly = op->layout != 0, hd = ly ? 2 : 1, ld = ly ? 1 : 2;
    const int64_t B = q->shape[0], H = q->shape[hd], Lq = q->shape[ld], Lk = k->shape[ld], Dh = q->shape[3],
                  Dv = v->shape[3];
    int64_t qs[3], ks[3], vs[3], os[3];
    attn_strides(q, ly, qs);
    attn_strides(k, ly, ks);
    attn_strides(v, ly, vs);
    attn_strides(out, ly, os);
    const double scale = op->scale != 0.0f ? (double)op->scale : 1.0 / sqrt((double)Dh);
    if (B * H * Lq == 0 || Dv == 0) return DRIFT_OK;
    const int64_t lk1 = Lk ? Lk : 1;
    int64_t qc = (int64_t)(c->attn_budget / ((size_t)lk1 * sizeof(double)));
    if (qc < 1) qc = 1;
    if (qc > Lq) qc = Lq;
    /* pairs per launch: whole batches of H heads when they fit, else heads of one batch */
    int64_t G = (int64_t)(c->attn_budget / ((size_t)(qc * lk1) * sizeof(double)));
    if (G > 65535) G = 65535;
    if (G < 1) G = 1;
    const int whole = G >= H;
    if (whole) G = (G / H < B ? G / H : B) * H;
    double *S = NULL, *l = NULL;
    int rc = cue(cudaMallocAsync((void **)&S, (size_t)(G * qc * lk1) * sizeof(double), c->stream), err, c,
                "attention: scratch");
    if (!rc) rc = cue(cudaMallocAsync((void **)&l, (size_t)(G * qc) * sizeof(double), c->stream), err, c, "attention: scratch");
    for (int64_t b0 = 0; !rc && b0 < B; b0 += whole ? G / H : 1)
        for (int64_t h0 = 0; !rc && h0 < H; h0 += whole ? H : G)
            for (int64_t q0 = 0; !rc && q0 < Lq; q0 += qc) {
                const int64_t nq = Lq - q0 < qc ? Lq - q0 : qc;
                rcu_batch bt;
                bt.inner = whole ? H : (H - h0 < G ? H - h0 : G);
                bt.count = whole ? (B - b0 < G / H ? B - b0 : G / H) * H : bt.inner;
                const double *Qp = D(q) + b0 * qs[0] + h0 * qs[1] + q0 * qs[2];
                const double *Kp = D(k) + b0 * ks[0] + h0 * ks[1], *Vp = D(v) + b0 * vs[0] + h0 * vs[1];
                double *Op = (double *)out->data + b0 * os[0] + h0 * os[1] + q0 * os[2];
                bt.c[0] = bt.inner * nq * Lk, bt.c[1] = nq * Lk; /* S: per pair nq x Lk, contiguous */
                bt.v[0] = bt.inner * nq, bt.v[1] = nq;          /* l */
                bt.a[0] = qs[0], bt.a[1] = qs[1], bt.b[0] = ks[0], bt.b[1] = ks[1];
                /* Lk == 0: l = 0 and every output 0 / 0, as the CPU's */
                rc = cue(rcu_gemm(c->stream, 1, Qp, qs[2], Kp, ks[2], S, Lk, nq, Lk, Dh, RCU_EPI_SCALE, NULL, scale, &bt),
                        err, c, "attention: scores");
                if (!rc) rc = cue(rcu_softmax_rows(c->stream, S, bt.count * nq, Lk, l), err, c, "attention: softmax");
                bt.a[0] = bt.c[0], bt.a[1] = bt.c[1], bt.b[0] = vs[0], bt.b[1] = vs[1], bt.c[0] = os[0], bt.c[1] = os[1];
                if (!rc)
                    rc = cue(rcu_gemm(c->stream, 0, S, Lk, Vp, vs[2], Op, os[2], nq, Dv, Lk, RCU_EPI_DIV_ROW, l, 1.0, &bt),
                            err, c, "attention: values");
            }
    if (S) cudaFreeAsync(S, c->stream);
    if (l) cudaFreeAsync(l, c->stream);
    return rc;
}

static int run_movement(const rcu_exec *c, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                        drift_err *err) {
    const drift_tensor *x = in[0];
    rcu_copy cp;
    memset(&cp, 0, sizeof cp);
    if (op->kind == DRIFT_OP_PERMUTE) {
        int64_t is[DRIFT_MAX_DIMS], acc = 1, os = 1;
        for (int d = x->ndim - 1; d >= 0; d--) {
            is[d] = acc;
            acc *= x->shape[d];
        }
        cp.nd = out->ndim;
        for (int d = out->ndim - 1; d >= 0; d--) {
            cp.shape[d] = out->shape[d];
            cp.ss[d] = is[op->perm[d]];
            cp.ds[d] = os;
            os *= out->shape[d];
        }
        cp.n = out->numel;
        return cue(rcu_copy_run(c->stream, D(x), out->data, &cp), err, c, "permute");
    }
    const int d = drift_op_norm_dim(op->dim, x->ndim);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < d; i++) outer *= x->shape[i];
    for (int i = d + 1; i < x->ndim; i++) inner *= x->shape[i];
    cp.nd = 2;
    if (op->kind == DRIFT_OP_NARROW) {
        cp.shape[0] = outer;
        cp.shape[1] = op->length * inner;
        cp.ss[0] = x->shape[d] * inner;
        cp.ss[1] = 1;
        cp.ds[0] = op->length * inner;
        cp.ds[1] = 1;
        cp.soff = op->start * inner;
        cp.n = outer * op->length * inner;
        return cue(rcu_copy_run(c->stream, D(x), out->data, &cp), err, c, "narrow");
    }
    /* CONCAT: two copies */
    const drift_tensor *bt = in[1];
    const int64_t na = x->shape[d] * inner, nb = bt->shape[d] * inner;
    cp.shape[0] = outer;
    cp.shape[1] = na;
    cp.ss[0] = na;
    cp.ss[1] = 1;
    cp.ds[0] = na + nb;
    cp.ds[1] = 1;
    cp.n = outer * na;
    int rc = cue(rcu_copy_run(c->stream, D(x), out->data, &cp), err, c, "concat");
    cp.shape[1] = nb;
    cp.ss[0] = nb;
    cp.doff = na;
    cp.n = outer * nb;
    if (!rc) rc = cue(rcu_copy_run(c->stream, D(bt), out->data, &cp), err, c, "concat");
    return rc;
}

/* Contiguous row-major strides of shape. */
static void contig(int nd, const int64_t *shape, int64_t *st) {
    int64_t acc = 1;
    for (int d = nd - 1; d >= 0; d--) {
        st[d] = acc;
        acc *= shape[d];
    }
}

/* STRIDED: out[i..] = flat(in0)[start + sum i_k stride_k]; SCATTER: out = in0,
 * then flat(out)[start + sum i_k stride_k] = in1[i..]. A 0-d region is one element. */
static int run_strided(const rcu_exec *c, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                       drift_err *err) {
    rcu_copy cp;
    memset(&cp, 0, sizeof cp);
    const drift_tensor *region = op->kind == DRIFT_OP_STRIDED ? out : in[1];
    int rc = DRIFT_OK;
    if (op->kind == DRIFT_OP_SCATTER) {
        rc = cue(cudaMemcpyAsync(out->data, in[0]->data, (size_t)out->numel * sizeof(double), cudaMemcpyDeviceToDevice,
                                c->stream),
                err, c, "scatter: base");
        if (rc || region->numel == 0) return rc;
    }
    cp.nd = region->ndim > 0 ? region->ndim : 1;
    for (int d = 0; d < cp.nd; d++) cp.shape[d] = region->ndim > 0 ? region->shape[d] : 1;
    cp.n = region->numel;
    if (op->kind == DRIFT_OP_STRIDED) {
        for (int d = 0; d < cp.nd; d++) cp.ss[d] = region->ndim > 0 ? op->stride[d] : 0;
        contig(cp.nd, cp.shape, cp.ds);
        cp.soff = op->start;
        return cue(rcu_copy_run(c->stream, D(in[0]), out->data, &cp), err, c, "strided");
    }
    contig(cp.nd, cp.shape, cp.ss);
    for (int d = 0; d < cp.nd; d++) cp.ds[d] = region->ndim > 0 ? op->stride[d] : 0;
    cp.doff = op->start;
    return cue(rcu_copy_run(c->stream, D(in[1]), out->data, &cp), err, c, "scatter");
}

int drift_rcu_run_op(const rcu_exec *c, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                     drift_err *err) {
    /* ATTENTION with its additive bias: the ref body on the host (the same bits as --device ref) */
    if (drift_rcu_op_needs_host(op, in) || (op->kind == DRIFT_OP_ATTENTION && op->n_in > 3))
        return drift_rcu_run_on_host(c, op, in, out, err);
    int rc = DRIFT_OK;
    const drift_tensor *x = op->n_in > 0 ? in[0] : NULL;
    switch (op->kind) {
    case DRIFT_OP_CAST: return cue(rcu_unary(c->stream, RCU_UN_COPY, D(x), out->data, out->numel, 1, 0), err, c, "cast");
    case DRIFT_OP_AFFINE:
        return cue(rcu_unary(c->stream, RCU_UN_AFFINE, D(x), out->data, out->numel, op->alpha, op->beta), err, c, "affine");
    case DRIFT_OP_SILU: return cue(rcu_unary(c->stream, RCU_UN_SILU, D(x), out->data, out->numel, 0, 0), err, c, "silu");
    case DRIFT_OP_GELU_TANH:
        return cue(rcu_unary(c->stream, RCU_UN_GELU_TANH, D(x), out->data, out->numel, 0, 0), err, c, "gelu");
    case DRIFT_OP_ADD:
    case DRIFT_OP_SUB:
    case DRIFT_OP_MUL:
    case DRIFT_OP_DIV: {
        drift_bcast bc;
        drift_bcast_plan(x, in[1], &bc);
        int bop = op->kind == DRIFT_OP_ADD   ? RCU_BIN_ADD
                  : op->kind == DRIFT_OP_SUB ? RCU_BIN_SUB
                  : op->kind == DRIFT_OP_MUL ? RCU_BIN_MUL
                                             : RCU_BIN_DIV;
        return cue(rcu_binary(c->stream, bop, D(x), D(in[1]), out->data, bc.nd, bc.shape, bc.sa, bc.sb, bc.numel), err,
                  c, "binary");
    }
    case DRIFT_OP_LINEAR: return run_linear(c, op, in, out, err);
    case DRIFT_OP_LAYER_NORM:
    case DRIFT_OP_RMS_NORM: {
        const int64_t Dd = x->shape[x->ndim - 1], rows = Dd > 0 ? x->numel / Dd : 0;
        if (rows <= 0) return DRIFT_OK;
        double *scratch = NULL; /* per-row mean and rstd */
        rc = cue(cudaMallocAsync((void **)&scratch, (size_t)(2 * rows) * sizeof(double), c->stream), err, c,
                "norm: scratch");
        if (!rc)
            rc = cue(rcu_norm(c->stream, op->kind == DRIFT_OP_LAYER_NORM ? RCU_LAYER_NORM : RCU_RMS_NORM, D(x),
                             op->n_in > 1 ? D(in[1]) : NULL, op->n_in > 2 ? D(in[2]) : NULL, out->data, rows, Dd,
                             op->eps, scratch),
                    err, c, "norm");
        if (scratch) cudaFreeAsync(scratch, c->stream);
        return rc;
    }
    case DRIFT_OP_ROPE:
        return cue(rcu_rope(c->stream, D(x), D(in[1]), D(in[2]), out->data, x->shape[0], x->shape[1], x->shape[2],
                           x->shape[3]),
                  err, c, "rope");
    case DRIFT_OP_ATTENTION: return run_attention(c, op, in, out, err);
    case DRIFT_OP_PERMUTE:
    case DRIFT_OP_NARROW:
    case DRIFT_OP_CONCAT: return run_movement(c, op, in, out, err);
    case DRIFT_OP_VIEW:
        return cue(cudaMemcpyAsync(out->data, x->data, (size_t)x->numel * sizeof(double), cudaMemcpyDeviceToDevice,
                                  c->stream),
                  err, c, "view");
    case DRIFT_OP_PATCHIFY:
    case DRIFT_OP_UNPATCHIFY: {
        const drift_tensor *img = op->kind == DRIFT_OP_UNPATCHIFY ? out : x;
        return cue(rcu_patch(c->stream, op->kind == DRIFT_OP_UNPATCHIFY, op->layout == 1, D(x), out->data,
                            img->shape[0], img->shape[1], img->shape[2], img->shape[3], img->shape[4], op->patch[0],
                            op->patch[1], op->patch[2]),
                  err, c, "patchify");
    }
    case DRIFT_OP_TIMESTEP_SINUSOID:
        return cue(rcu_timestep(c->stream, D(x), out->data, x->shape[0], op->dim,
                               op->max_period != 0.0f ? (double)op->max_period : 10000.0, op->flip_sin_to_cos),
                  err, c, "timestep");
    case DRIFT_OP_UNARY:
    case DRIFT_OP_SCALAR:
        return cue(rcu_aten_ew(c->stream, op->kind == DRIFT_OP_SCALAR, op->sub, D(x), out->data, out->numel, op->scalar),
                  err, c, drift_op_name(op->kind));
    case DRIFT_OP_REDUCE: {
        const int d = drift_op_norm_dim(op->dim, x->ndim);
        int64_t outer = 1, inner = 1;
        for (int i = 0; i < d; i++) outer *= x->shape[i];
        for (int i = d + 1; i < x->ndim; i++) inner *= x->shape[i];
        return cue(rcu_reduce(c->stream, D(x), out->data, outer, x->shape[d], inner, op->sub == DRIFT_REDUCE_MEAN), err,
                  c, "reduce");
    }
    case DRIFT_OP_STRIDED:
    case DRIFT_OP_SCATTER: return run_strided(c, op, in, out, err);
    case DRIFT_OP_FILL:
        return cue(rcu_fill(c->stream, out->data, out->numel, op->sub, op->scalar, op->step), err, c, "fill");
    default: break;
    }
    return drift_err_set(err, DRIFT_E_UNSUPPORTED, c->name, "op %s not implemented", drift_op_name(op->kind));
}

static int rc_run(const drift_backend *be, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                  drift_err *err) {
    rc_ctx *c = ctx_of(be);
    int rc = sel(c, err);
    if (rc) return rc;
    const rcu_exec x = {c->device, c->stream, c->attn_budget, c->name};
    return drift_rcu_run_op(&x, op, in, out, err);
}

/* Metrics with ref_backend.c's rules and order: per chunk of
 * DRIFT_ORACLE_METRIC_CHUNK elements on the device, the chunks added here in
 * order into acc, as ref_metrics does. */
static int rc_metrics(const drift_backend *be, const drift_tensor *t, const drift_tensor *r, drift_metric_acc *acc,
                      drift_err *err) {
    rc_ctx *c = ctx_of(be);
    int rc = sel(c, err);
    if (rc) return rc;
    const size_t nch = (size_t)((t->numel + DRIFT_ORACLE_METRIC_CHUNK - 1) / DRIFT_ORACLE_METRIC_CHUNK);
    if (nch == 0) return DRIFT_OK;
    if (nch > c->part_cap) {
        if ((rc = cu(cudaStreamSynchronize(c->stream), err, c, "metrics"))) return rc;
        if (c->part) cudaFree(c->part);
        c->part = NULL;
        c->part_cap = 0;
        if ((rc = cu(cudaMalloc((void **)&c->part, nch * sizeof *c->part), err, c, "metrics: partials"))) return rc;
        c->part_cap = nch;
    }
    rcu_metric_part *host = drift_malloc(nch * sizeof *host);
    if (!host) return drift_err_set(err, DRIFT_E_NOMEM, c->name, "metrics: out of host memory");
    rc = cu(rcu_metrics(c->stream, D(t), D(r), t->numel, c->part), err, c, "metrics");
    if (!rc) rc = cu(cudaMemcpyAsync(host, c->part, nch * sizeof *host, cudaMemcpyDeviceToHost, c->stream), err, c, "metrics");
    if (!rc) rc = cu(cudaStreamSynchronize(c->stream), err, c, "metrics");
    if (rc) {
        drift_free(host);
        return rc;
    }
    const int64_t base = acc->numel;
    for (size_t i = 0; i < nch; i++) {
        const rcu_metric_part *p = &host[i];
        acc->sum_abs_diff += p->sum_abs;
        acc->sum_sq_diff += p->sum_sq;
        acc->sum_tr += p->sum_tr;
        acc->sum_tt += p->sum_tt;
        acc->sum_rr += p->sum_rr;
        if (p->arg >= 0 && (acc->argmax < 0 || p->max_d > acc->max_abs_diff)) {
            acc->max_abs_diff = p->max_d;
            acc->argmax = base + p->arg;
        }
        if (p->max_ref > acc->max_abs_ref) acc->max_abs_ref = p->max_ref;
        acc->nan_t += p->nan_t;
        acc->inf_t += p->inf_t;
        acc->nan_r += p->nan_r;
        acc->inf_r += p->inf_r;
        acc->n_diff += p->n_diff;
    }
    acc->numel = base + t->numel;
    drift_free(host);
    return DRIFT_OK;
}

static int rc_sync(const drift_backend *be, drift_err *err) {
    rc_ctx *c = ctx_of(be);
    int rc = sel(c, err);
    return rc ? rc : cu(cudaStreamSynchronize(c->stream), err, c, "sync");
}

static void rc_destroy(drift_backend *be) {
    if (!be) return;
    rc_ctx *c = ctx_of(be);
    if (c) {
        if (cudaSetDevice(c->device) == cudaSuccess) {
            if (c->stream) cudaStreamSynchronize(c->stream);
            if (c->part) cudaFree(c->part);
            if (c->stream) cudaStreamDestroy(c->stream);
        }
        (void)cudaGetLastError();
        drift_free(c);
    }
    drift_free(be);
}

int drift_cuda_ref_backend_create(const drift_backend_opts *o, drift_backend **out, drift_err *err) {
    static const char *const keys[] = {"attn_scratch", NULL};
    if (!out) return drift_err_set(err, DRIFT_E_INTERNAL, "ref-cuda", "drift_cuda_ref_backend_create: out is NULL");
    *out = NULL;
    long scratch = 1L << 30;
    int rc = drift_backend_opts_check(o, keys, err);
    if (!rc) rc = drift_backend_opt_int(o, "attn_scratch", 1, 1L << 40, &scratch, err);
    if (rc) return rc;
    const int device = o->device, count = drift_cuda_device_count();
    if (device < 0 || device >= count)
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, "ref-cuda", "no CUDA device %d (%d visible)", device, count);
    drift_backend *be = drift_calloc(1, sizeof *be);
    rc_ctx *c = drift_calloc(1, sizeof *c);
    if (!be || !c) {
        drift_free(be);
        drift_free(c);
        return drift_err_set(err, DRIFT_E_NOMEM, "ref-cuda", "cannot allocate the ref-cuda backend");
    }
    c->device = device;
    snprintf(c->name, sizeof c->name, "ref-cuda:%d", device);
    c->attn_budget = (size_t)scratch;
    be->name = c->name;
    be->ctx = c;
    be->destroy = rc_destroy;
    rc = sel(c, err);
    if (!rc) rc = cu(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), err, c, "stream");
    if (rc) {
        rc_destroy(be);
        return rc;
    }
    be->stores = dtype_ok;
    be->elem_bytes = rc_elem_bytes;
    be->supports_op = rc_supports_op;
    be->alloc = rc_alloc;
    be->release = rc_release;
    be->upload_f32 = rc_upload_f32;
    be->upload_f64 = rc_upload_f64;
    be->download_f32 = rc_download_f32;
    be->download_f64 = rc_download_f64;
    be->run = rc_run;
    be->metrics = rc_metrics;
    be->sync = rc_sync;
    be->alias = rc_alias;
    *out = be;
    return DRIFT_OK;
}
