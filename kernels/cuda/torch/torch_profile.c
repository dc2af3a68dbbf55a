/* The torch kernel profile's state and dispatch (torch_profile.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "kernels/cuda/torch/torch_profile.h"

/* torch's getChosenWorkspaceSize (CublasHandlePool.cpp) without
 * CUBLAS_WORKSPACE_CONFIG: 32 MiB on sm_90, 4096*2 + 16*8 KiB elsewhere; the
 * spec's cublas_ws=BYTES stands for a CUBLAS_WORKSPACE_CONFIG the run set. */
static size_t cublas_workspace_size(long configured, int cc_major, int cc_minor) {
    if (configured > 0) return (size_t)configured;
    return (cc_major == 9 && cc_minor == 0) ? (size_t)4096 * 8 * 1024 : (size_t)(4096 * 2 + 16 * 8) * 1024;
}

int dct_torch_create(dcu_ctx *ctx, drift_err *err) {
    struct dct_state *st = drift_calloc(1, sizeof *st);
    if (!st) return drift_err_set(err, DRIFT_E_NOMEM, ctx->name, "cannot allocate the torch profile's state");
    ctx->torch = st;
    int major = 0, minor = 0;
    (void)cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ctx->device);
    (void)cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ctx->device);
    st->gemm_mode = ctx->torch_opts.gemm_mode;
    st->ln_threads = ctx->torch_opts.ln_threads;
    st->ln_combine = ctx->torch_opts.ln_combine;
    st->rms_variant = ctx->torch_opts.rms_variant;
    st->sdpa_off = ctx->torch_opts.sdpa_off;
    st->sdpa_stats = ctx->torch_opts.sdpa_stats;
    st->sdpa_graph = ctx->torch_opts.sdpa_graph;
    st->conv_heur = ctx->torch_opts.conv_heur;
    st->conv_skip = ctx->torch_opts.conv_skip;
    st->flash_fast = ctx->torch_opts.flash_fast;
    st->cublas_ws_size = cublas_workspace_size(ctx->torch_opts.cublas_ws, major, minor);
    st->cublas_ws_conv = cublas_workspace_size(0, major, minor);
    /* torch's getCUDABlasLtWorkspaceSize: CUBLASLT_WORKSPACE_SIZE KiB (default
       1024, the spec's lt_ws_kib), capped at the cuBLAS workspace */
    st->lt_ws_size = (size_t)ctx->torch_opts.lt_ws_kib * 1024;
    if (st->lt_ws_size > st->cublas_ws_size) st->lt_ws_size = st->cublas_ws_size;
    cublasStatus_t s = cublasCreate(&st->cublas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        st->cublas = NULL;
        return drift_err_set(err, DRIFT_E_IO, ctx->name, "cublasCreate failed: %s", cublasGetStatusString(s));
    }
    const size_t ws_bytes = st->cublas_ws_size > st->cublas_ws_conv ? st->cublas_ws_size : st->cublas_ws_conv;
    int rc = dcu_check(cudaMalloc(&st->cublas_ws, ws_bytes), err, ctx->name,
                       "allocating the torch profile's cuBLAS workspace");
    if (!rc && st->lt_ws_size)
        rc = dcu_check(cudaMalloc(&st->lt_ws, st->lt_ws_size), err, ctx->name,
                       "allocating the torch profile's cuBLASLt workspace");
    return rc;
}

void dct_torch_destroy(dcu_ctx *ctx) {
    struct dct_state *st = ctx ? ctx->torch : NULL;
    if (!st) return;
    dct_sdpa_cache_destroy(ctx);
    dct_conv_cache_destroy(ctx);
    dct_cudnn_destroy(ctx);
    if (st->cublas) cublasDestroy(st->cublas);
    if (st->cublas_ws) (void)cudaFree(st->cublas_ws);
    if (st->lt_ws) (void)cudaFree(st->lt_ws);
    drift_free(st);
    ctx->torch = NULL;
}

int dct_torch_exact_is_torch(drift_op_kind k) {
    switch (k) {
    case DRIFT_OP_CAST:
    case DRIFT_OP_ADD:
    case DRIFT_OP_SUB:
    case DRIFT_OP_MUL:
    case DRIFT_OP_AFFINE:
    case DRIFT_OP_ROPE:
    case DRIFT_OP_PERMUTE:
    case DRIFT_OP_NARROW:
    case DRIFT_OP_CONCAT:
    case DRIFT_OP_VIEW:
    case DRIFT_OP_PATCHIFY:
    case DRIFT_OP_UNPATCHIFY: return 1;
    default: return 0;
    }
}

void dct_torch_note_fallback(dcu_ctx *ctx, drift_op_kind k, const char *why) {
    if ((int)k >= 0 && (int)k < 64) {
        if (!(ctx->torch_fallback_mask & (1ull << (unsigned)k)))
            snprintf(ctx->torch_fallback_kind_why[k], sizeof ctx->torch_fallback_kind_why[k], "%s",
                     why ? why : "no torch-profile kernel");
        ctx->torch_fallback_mask |= 1ull << (unsigned)k;
    }
    ctx->torch_fallbacks++;
    snprintf(ctx->torch_fallback_why, sizeof ctx->torch_fallback_why, "%s: %s", drift_op_name(k),
             why ? why : "no torch-profile kernel");
}

/* t's data as dtype c: t itself or a rounded device copy in *tmp (caller frees). */
static int as_dtype(dcu_ctx *ctx, const void *p, drift_dtype t, int64_t n, drift_dtype c, const void **outp,
                    void **tmp, const char *where, drift_err *err) {
    *tmp = NULL;
    *outp = p;
    if (t == c || !p) return DRIFT_OK;
    cudaError_t e = dcu_malloc(ctx, tmp, (size_t)(n > 0 ? n : 1) * drift_dtype_size(c));
    if (e != cudaSuccess) return dcu_check(e, err, where, "allocating an operand copy");
    e = dcu_launch_unary(ctx, DCU_UN_CAST, p, t, *tmp, c, n, 0.0f, 0.0f);
    if (e != cudaSuccess) return dcu_check(e, err, where, "rounding an operand to the compute dtype");
    *outp = *tmp;
    return DRIFT_OK;
}

static int run_linear(dcu_ctx *ctx, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                      const char *where, drift_err *err) {
    const drift_tensor *x = in[0], *w = in[1], *bias = op->n_in > 2 ? in[2] : NULL;
    const drift_dtype c = op->compute;
    int64_t K = x->shape[x->ndim - 1], N = w->shape[0], M = 1;
    for (int i = 0; i < x->ndim - 1; i++) M *= x->shape[i];
    if (M == 0 || N == 0) return DRIFT_OK;
    const void *xp, *wp, *bp = NULL;
    void *tx = NULL, *tw = NULL, *tb = NULL, *ty = NULL;
    void *yp = out->data;
    /* autocast hands addmm operands, bias included, in the autocast dtype */
    int rc = as_dtype(ctx, x->data, x->dtype, x->numel, c, &xp, &tx, where, err);
    if (!rc) rc = as_dtype(ctx, w->data, w->dtype, w->numel, c, &wp, &tw, where, err);
    if (!rc && bias) rc = as_dtype(ctx, bias->data, bias->dtype, bias->numel, c, &bp, &tb, where, err);
    if (!rc && out->dtype != c) { /* torch's result is in c; a later cast rounds it */
        rc = dcu_check(dcu_malloc(ctx, &ty, (size_t)(M * N) * drift_dtype_size(c)), err, where,
                       "allocating the GEMM result");
        yp = ty;
    }
    if (!rc) rc = dct_gemm_linear(ctx, xp, wp, bp, yp, c, M, N, K, op->layout == DRIFT_LINEAR_CONV, where, err);
    if (!rc && ty)
        rc = dcu_check(dcu_launch_unary(ctx, DCU_UN_CAST, ty, c, out->data, out->dtype, M * N, 0.0f, 0.0f), err,
                       where, "casting the GEMM result");
    if (rc) drift_err_prefix(err, "%s [torch profile, M=%lld N=%lld K=%lld]", where, (long long)M, (long long)N,
                             (long long)K);
    dcu_free(ctx, tx);
    dcu_free(ctx, tw);
    dcu_free(ctx, tb);
    dcu_free(ctx, ty);
    return rc;
}

/* element strides {b, h, l, d} of a [B, H, L, D] (layout 0) or [B, L, H, D]
 * (layout 1) tensor */
static void attn_strides(int layout, int64_t H, int64_t L, int64_t D, int64_t *s) {
    s[3] = 1;
    if (layout) {
        s[0] = L * H * D;
        s[1] = D;
        s[2] = H * D;
    } else {
        s[0] = H * L * D;
        s[1] = L * D;
        s[2] = D;
    }
}

static int run_attention(dcu_ctx *ctx, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                         int *handled, drift_err *err) {
    struct dct_state *st = ctx->torch;
    const drift_tensor *q = in[0], *k = in[1], *v = in[2];
    char why[256];
    if (st->sdpa_off) {
        dct_torch_note_fallback(ctx, op->kind, "the spec's sdpa=exact");
        return DRIFT_OK;
    }
    const int lay = op->layout ? 1 : 0;
    dct_sdpa_args a;
    memset(&a, 0, sizeof a);
    a.B = q->shape[0];
    a.H = q->shape[lay ? 2 : 1];
    a.Sq = q->shape[lay ? 1 : 2];
    a.Sk = k->shape[lay ? 1 : 2];
    a.D = q->shape[3];
    const int flash = a.D % 8 != 0; /* cuDNN declines it; torch pads to a multiple of 8 and runs FlashAttention-2 */
    /* the importer marks flash's order on an ATTENTION with a bias only for square is_causal */
    a.causal = flash && op->n_in > 3 && op->sub == DRIFT_ATTN_ORDER_LAST_FIRST;
    if (q->dtype != op->compute || k->dtype != op->compute || v->dtype != op->compute || out->dtype != op->compute ||
        v->shape[3] != a.D || (!flash && a.D % 8 != 0) || a.D > 256) {
        snprintf(why, sizeof why, "cuDNN SDPA needs q, k, v, out in the compute dtype and Dh == Dv, a multiple of 8 <= 256");
        dct_torch_note_fallback(ctx, op->kind, why);
        return DRIFT_OK;
    }
    a.q = q->data;
    a.k = k->data;
    a.v = v->data;
    a.o = out->data;
    attn_strides(lay, a.H, a.Sq, a.D, a.qs);
    attn_strides(lay, a.H, a.Sk, a.D, a.ks);
    attn_strides(lay, a.H, a.Sk, a.D, a.vs);
    attn_strides(lay, a.H, a.Sq, a.D, a.os);
    a.dtype = op->compute;
    /* torch: scale = 1/sqrt(Dh) in double, handed to cuDNN as a float */
    a.scale = op->scale != 0.0f ? op->scale : (float)(1.0 / sqrt((double)a.D));
    if (op->n_in > 3) { /* the additive bias (SDPA's attn_mask / is_causal) */
        const drift_tensor *b = in[3];
        if (b->dtype != DRIFT_F32) {
            dct_torch_note_fallback(ctx, op->kind, "cuDNN SDPA bias: an fp32 bias only");
            return DRIFT_OK;
        }
        a.bias = b->data;
        for (int i = 0; i < 3; i++) a.bias_dims[i] = b->shape[i];
    }
    why[0] = '\0';
    if (flash) {
        if (!dct_flash_supported(&a, why, sizeof why)) {
            dct_torch_note_fallback(ctx, op->kind, why);
            return DRIFT_OK;
        }
        *handled = 1;
        return dcu_check(dct_launch_flash(ctx, &a, st->flash_fast), err, "op attention", "torch-profile flash attention");
    }
    int rc = dct_sdpa_cudnn(ctx, &a, why, sizeof why, err); /* it copies the bias into an aligned io-dtype buffer */
    if (rc == DRIFT_E_UNSUPPORTED) {
        dct_torch_note_fallback(ctx, op->kind, why);
        return DRIFT_OK;
    }
    *handled = 1;
    return rc;
}

/* sum / mean over trailing contiguous dims as torch's reduce_kernel orders it (the shapes
 * dct_reduce_config emulates); anything else stays on the exact kernels. */
static int run_reduce(dcu_ctx *ctx, const drift_op *op, const drift_tensor *x, drift_tensor *out, const char *where,
                      int *handled, drift_err *err) {
    if (op->sub != DRIFT_REDUCE_SUM && op->sub != DRIFT_REDUCE_MEAN) return DRIFT_OK;
    if (x->dtype != DRIFT_F32 && x->dtype != DRIFT_BF16 && x->dtype != DRIFT_F16) return DRIFT_OK;
    const int d = op->dim < 0 ? op->dim + x->ndim : op->dim, len = op->length > 0 ? op->length : 1;
    if (d < 0 || d + len > x->ndim) return DRIFT_OK;
    int64_t inner = 1, outer = 1, N = 1;
    for (int i = 0; i < x->ndim; i++) {
        if (i < d) outer *= x->shape[i];
        else if (i < d + len) N *= x->shape[i];
        else inner *= x->shape[i];
    }
    if (inner > 1) { /* not the innermost dims: block.x over the outputs */
        if (len != 1 || N >= 256) {
            dct_torch_note_fallback(ctx, op->kind, "torch's reduce_kernel order over an inner dim is emulated for one "
                                                   "dim of < 256 elements only");
            return DRIFT_OK;
        }
        *handled = 1;
        return dcu_check(dct_launch_reduce_mid(ctx, x->data, x->dtype, outer, N, inner, out->data, out->dtype,
                                               op->sub == DRIFT_REDUCE_MEAN),
                         err, where, "torch-profile reduction kernel");
    }
    if (N == 0 || x->numel == 0) return DRIFT_OK;
    dct_reduce_cfg cfg;
    if (!dct_reduce_config(x->numel / N, N, &cfg) || (cfg.vectorize && (x->dtype != DRIFT_F32 || ((uintptr_t)x->data & 15)))) {
        dct_torch_note_fallback(ctx, op->kind, "a reduce_kernel layout drift does not emulate (a row split across warps, or 4-wide loads of 16-bit data)");
        return DRIFT_OK;
    }
    *handled = 1;
    return dcu_check(dct_launch_reduce(ctx, x->data, x->dtype, x->numel / N, N, out->data, out->dtype,
                                       op->sub == DRIFT_REDUCE_MEAN, &cfg),
                     err, where, "torch-profile reduction kernel");
}

/* GROUP_NORM as torch's CUDA kernels run it (group_norm_torch.cu): x [N, C, *] with more than
 * one element per channel, float operands; else the host's order (noted). */
static int run_group_norm(dcu_ctx *ctx, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                          const char *where, int *handled, drift_err *err) {
    const drift_tensor *x = in[0], *w = op->n_in > 1 ? in[1] : NULL, *b = op->n_in > 2 ? in[2] : NULL;
    const int64_t G = op->length;
    int64_t HxW = 1;
    for (int i = 2; i < x->ndim; i++) HxW *= x->shape[i];
    const int flt = (x->dtype == DRIFT_F32 || x->dtype == DRIFT_BF16 || x->dtype == DRIFT_F16) &&
                    (out->dtype == DRIFT_F32 || out->dtype == DRIFT_BF16 || out->dtype == DRIFT_F16) &&
                    (!w || w->dtype != DRIFT_F64) && (!b || b->dtype != DRIFT_F64);
    if (x->ndim < 3 || HxW <= 1 || G < 1 || x->shape[1] % G || !flt) {
        dct_torch_note_fallback(ctx, op->kind, "torch's group norm kernels are emulated for float x [N, C, *] with "
                                               "more than one element per channel only");
        return DRIFT_OK;
    }
    const int64_t N = x->shape[0], C = x->shape[1];
    float *scratch = NULL;
    int rc = dcu_check(dcu_malloc(ctx, (void **)&scratch, (size_t)(2 * N * G) * sizeof(float)), err, ctx->name,
                       "allocating the group norm statistics");
    if (rc) return rc;
    *handled = 1;
    rc = dcu_check(dct_launch_group_norm(ctx, x->data, x->dtype, N, C, HxW, G, w ? w->data : NULL,
                                         w ? w->dtype : DRIFT_F32, b ? b->data : NULL, b ? b->dtype : DRIFT_F32, op->eps,
                                         out->data, out->dtype, scratch),
                   err, where, "torch-profile group_norm kernels");
    dcu_free(ctx, scratch);
    return rc;
}

static int torch_run(dcu_ctx *ctx, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                     const char *where, int *handled, drift_err *err) {
    struct dct_state *st = ctx->torch;
    const drift_tensor *x = in[0];
    *handled = 0;
    if (!st) return DRIFT_OK;
    switch (op->kind) {
    case DRIFT_OP_LINEAR: *handled = 1; return run_linear(ctx, op, in, out, where, err);
    case DRIFT_OP_SILU:
    case DRIFT_OP_GELU_TANH:
        *handled = 1;
        return dcu_check(dct_launch_unary(ctx, op->kind == DRIFT_OP_SILU ? DCT_UN_SILU : DCT_UN_GELU_TANH, x->data,
                                          x->dtype, out->data, out->dtype, out->numel),
                         err, where, "torch-profile elementwise kernel");
    case DRIFT_OP_LAYER_NORM: {
        const int64_t D = x->shape[x->ndim - 1];
        const drift_tensor *w = op->n_in > 1 ? in[1] : NULL, *b = op->n_in > 2 ? in[2] : NULL;
        if (D == 0 || !dct_layer_norm_vectorizable(x->data, out->data, w ? w->data : NULL, b ? b->data : NULL, D))
            return DRIFT_OK;
        *handled = 1;
        return dcu_check(dct_launch_layer_norm(ctx, x->data, x->dtype, x->numel / D, D, w ? w->data : NULL,
                                               w ? w->dtype : DRIFT_F32, b ? b->data : NULL, b ? b->dtype : DRIFT_F32,
                                               out->data, out->dtype, op->eps, st->ln_threads, st->ln_combine),
                         err, where, "torch-profile layer_norm kernel");
    }
    case DRIFT_OP_RMS_NORM: {
        const int64_t D = x->shape[x->ndim - 1];
        const drift_tensor *w = op->n_in > 1 ? in[1] : NULL;
        /* torch 2.11 (layer_norm.cpp): the fused kernel unless x and w are of
           mixed dtypes; vectorized only for N % 4 == 0 and aligned buffers
           (else its two-kernel fallback, not emulated: exact kernels) */
        const int fused = !(st->rms_variant & 8) && (w ? w->dtype == x->dtype : !(st->rms_variant & 4));
        if (fused) {
            if (D == 0 || !dct_layer_norm_vectorizable(x->data, out->data, w ? w->data : NULL, NULL, D))
                return DRIFT_OK;
            *handled = 1;
            return dcu_check(dct_launch_rms_norm_fused(ctx, x->data, x->dtype, x->numel / D, D, w ? w->data : NULL,
                                                       w ? w->dtype : DRIFT_F32, out->data, out->dtype, op->eps,
                                                       st->ln_threads),
                             err, where, "torch-profile fused rms_norm kernel");
        }
        dct_reduce_cfg cfg;
        if (D == 0 || !dct_reduce_config(x->numel / D, D, &cfg)) return DRIFT_OK;
        if (st->rms_variant & 1) cfg.vectorize = !cfg.vectorize;
        if (st->rms_variant & 2) cfg.shfl_asc = 1;
        *handled = 1;
        return dcu_check(dct_launch_rms_norm(ctx, x->data, x->dtype, x->numel / D, D, w ? w->data : NULL,
                                             w ? w->dtype : DRIFT_F32, out->data, out->dtype, op->eps, &cfg),
                         err, where, "torch-profile rms_norm kernel");
    }
    case DRIFT_OP_ATTENTION: return run_attention(ctx, op, in, out, handled, err);
    case DRIFT_OP_UNARY:
        if (op->sub != DRIFT_UNARY_RSQRT || x->numel != out->numel) return DRIFT_OK;
        *handled = 1;
        return dcu_check(dct_launch_unary(ctx, DCT_UN_RSQRT, x->data, x->dtype, out->data, out->dtype, out->numel),
                         err, where, "torch-profile rsqrt kernel");
    case DRIFT_OP_REDUCE: return run_reduce(ctx, op, x, out, where, handled, err);
    case DRIFT_OP_BMM: return dct_run_bmm(ctx, op, in, out, where, handled, err);
    case DRIFT_OP_SOFTMAX: {
        const int d = x->ndim ? (op->dim < 0 ? op->dim + x->ndim : op->dim) : 0;
        const int64_t N = x->ndim ? x->shape[d] : 1;
        if (d != x->ndim - 1 || N == 0 || !dct_softmax_supported(N, x->dtype) || op->sub > 1) {
            dct_torch_note_fallback(ctx, op->kind, "torch's warp softmax is emulated over the last dim of <= 1024 "
                                                   "elements only");
            return DRIFT_OK;
        }
        *handled = 1;
        return dcu_check(dct_launch_softmax(ctx, x->data, x->dtype, out->data, out->dtype, x->numel / N, N, op->sub == 1),
                         err, where, "torch-profile softmax kernel");
    }
    case DRIFT_OP_GROUP_NORM: return run_group_norm(ctx, op, in, out, where, handled, err);
    default: return DRIFT_OK;
    }
}

int dct_torch_run(dcu_ctx *ctx, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                  const char *where, int *handled, drift_err *err) {
    const int64_t before = ctx->torch_fallbacks;
    int rc = torch_run(ctx, op, in, out, where, handled, err);
    if (!*handled && ctx->torch_fallbacks == before && !dct_torch_exact_is_torch(op->kind))
        dct_torch_note_fallback(ctx, op->kind, NULL);
    return rc;
}

int drift_cuda_torch_conv3d_patch(const drift_backend *be, const drift_tensor *x, const drift_tensor *w,
                                  const int kernel[3], drift_tensor *y, drift_err *err) {
    if (!drift_cuda_backend_is_cuda(be) || drift_cuda_backend_kernel_profile(be) != DRIFT_CUDA_KERNELS_TORCH)
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, "conv3d", "needs a CUDA backend with the torch kernel profile");
    dcu_ctx *ctx = be->ctx;
    if (!x || !w || !y || !kernel || !x->data || !w->data || !y->data || x->be != be || w->be != be || y->be != be ||
        x->ndim != 5 || y->ndim != 5 || x->dtype != w->dtype || x->dtype != y->dtype)
        return drift_err_set(err, DRIFT_E_INPUT, "conv3d", "x, w, y must be allocated on this backend, x and y 5-D, one dtype");
    const int64_t K = y->shape[1];
    int64_t ws[5] = {K, x->shape[1], kernel[0], kernel[1], kernel[2]};
    if (kernel[0] < 1 || kernel[1] < 1 || kernel[2] < 1 || w->numel != ws[0] * ws[1] * ws[2] * ws[3] * ws[4] ||
        y->shape[0] != x->shape[0] || x->shape[2] % ws[2] || x->shape[3] % ws[3] || x->shape[4] % ws[4] ||
        y->shape[2] != x->shape[2] / ws[2] || y->shape[3] != x->shape[3] / ws[3] || y->shape[4] != x->shape[4] / ws[4])
        return drift_err_set(err, DRIFT_E_INPUT, "conv3d",
                             "shapes do not form a patch embedding (w: K*C*kd*kh*kw elements, y: [N, K, D/kd, H/kh, W/kw])");
    int rc = dcu_check(cudaSetDevice(ctx->device), err, ctx->name, "cudaSetDevice");
    if (rc) return rc;
    char why[256] = "";
    rc = dct_conv3d_patch(ctx, x->data, x->shape, w->data, ws, y->data, x->dtype, why, sizeof why, err);
    if (rc == DRIFT_E_UNSUPPORTED) return drift_err_set(err, rc, "conv3d", "%s", why);
    return rc;
}
