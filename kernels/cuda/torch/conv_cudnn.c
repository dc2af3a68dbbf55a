/* The Conv3d patch embedding under the torch profile: torch's
 * cudnn_convolution (aten/src/ATen/native/cudnn/Conv_v8.cpp; drift's own
 * code) through cuDNN's backend API: one CONVOLUTION_FORWARD operation,
 * x, w, y at their contiguous strides in the operand dtype, compute fp32,
 * cross-correlation, stride = kernel, no padding, dilation 1, alpha 1,
 * beta 0, heuristics mode INSTANT (torch's default), the first engine config
 * that finalizes. torch adds the bias afterwards as a separate bf16 add
 * (`output.add_(bias)`), which drift's ADD reproduces. Plans are cached per
 * shape and dtype. Test knobs (spec options): conv_heur=a|b (heuristics mode A
 * or B instead of INSTANT), conv_skip=N (skip the first N
 * finalizable configs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "kernels/cuda/torch/torch_profile.h"

#ifndef DRIFT_HAVE_CUDNN

int dct_conv3d_patch(dcu_ctx *ctx, const void *x, const int64_t *xshape, const void *w, const int64_t *wshape,
                     void *y, drift_dtype dt, char *why, size_t why_size, drift_err *err) {
    (void)ctx, (void)x, (void)xshape, (void)w, (void)wshape, (void)y, (void)dt, (void)err;
    snprintf(why, why_size, "built without cuDNN");
    return DRIFT_E_UNSUPPORTED;
}
void dct_conv_cache_destroy(dcu_ctx *ctx) { (void)ctx; }

#else

#include "kernels/cuda/torch/cudnn_graph.h"

#define CONV_CACHE 8
enum { UID_W = 119, UID_X = 120, UID_Y = 121 };

typedef struct conv_plan {
    int used;
    int64_t key[11]; /* xshape[5], wshape[5], dtype */
    dct_cg g;
} conv_plan;

struct dct_conv_cache {
    conv_plan plans[CONV_CACHE];
    int next;
};

static void contiguous(const int64_t *d, int64_t *s) {
    s[4] = 1;
    for (int i = 3; i >= 0; i--) s[i] = s[i + 1] * d[i + 1];
}

static int conv_build(const struct dct_state *st, cudnnHandle_t h, const int64_t *xs, const int64_t *ws, drift_dtype dt, conv_plan *p,
                      char *why, size_t why_size) {
    dct_cg *g = &p->g;
    dct_cg_init(g);
    g->skip = st->conv_skip;
    const cudnnDataType_t io = dt == DRIFT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    int64_t ys[5] = {xs[0], ws[0], xs[2] / ws[2], xs[3] / ws[3], xs[4] / ws[4]};
    int64_t xst[5], wst[5], yst[5];
    contiguous(xs, xst);
    contiguous(ws, wst);
    contiguous(ys, yst);
    cudnnBackendDescriptor_t X = dct_cg_tensor(g, UID_X, io, 5, xs, xst, 0, 0);
    cudnnBackendDescriptor_t W = dct_cg_tensor(g, UID_W, io, 5, ws, wst, 0, 0);
    cudnnBackendDescriptor_t Y = dct_cg_tensor(g, UID_Y, io, 5, ys, yst, 0, 0);
    cudnnBackendDescriptor_t c = dct_cg_create(g, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "convolution descriptor");
    cudnnDataType_t ct = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t nsp = 3, dil[3] = {1, 1, 1}, str[3] = {ws[2], ws[3], ws[4]}, pad[3] = {0, 0, 0};
    dct_cg_set(g, c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct, "conv compute type");
    dct_cg_set(g, c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "conv mode");
    dct_cg_set(g, c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nsp, "conv spatial dims");
    dct_cg_set(g, c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 3, dil, "conv dilations");
    dct_cg_set(g, c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 3, str, "conv strides");
    dct_cg_set(g, c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 3, pad, "conv pre-paddings");
    dct_cg_set(g, c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 3, pad, "conv post-paddings");
    dct_cg_fin(g, c, "finalizing the convolution descriptor");
    cudnnBackendDescriptor_t op =
        dct_cg_create(g, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, "convolution operation");
    float alpha = 1.0f, beta = 0.0f;
    dct_cg_set(g, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &X, "conv X");
    dct_cg_set(g, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &W, "conv W");
    dct_cg_set(g, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &Y, "conv Y");
    dct_cg_set(g, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c,
               "conv desc");
    dct_cg_set(g, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha, "conv alpha");
    dct_cg_set(g, op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta, "conv beta");
    dct_cg_fin(g, op, "finalizing the convolution operation");
    cudnnBackendHeurMode_t heur = st->conv_heur == 1   ? CUDNN_HEUR_MODE_A
                                  : st->conv_heur == 2 ? CUDNN_HEUR_MODE_B
                                                       : CUDNN_HEUR_MODE_INSTANT;
    int rc = g->st ? -1 : dct_cg_plan(g, h, &op, 1, heur);
    if (rc) snprintf(why, why_size, "conv graph: %s", g->why);
    else p->used = 1;
    return rc;
}

void dct_conv_cache_destroy(dcu_ctx *ctx) {
    struct dct_state *st = ctx ? ctx->torch : NULL;
    if (!st || !st->conv) return;
    for (int i = 0; i < CONV_CACHE; i++) dct_cg_release(&st->conv->plans[i].g);
    drift_free(st->conv);
    st->conv = NULL;
}

int dct_conv3d_patch(dcu_ctx *ctx, const void *x, const int64_t *xshape, const void *w, const int64_t *wshape,
                     void *y, drift_dtype dt, char *why, size_t why_size, drift_err *err) {
    struct dct_state *st = ctx->torch;
    if (!st) {
        snprintf(why, why_size, "not a torch-profile backend");
        return DRIFT_E_UNSUPPORTED;
    }
    if ((dt != DRIFT_BF16 && dt != DRIFT_F16) || wshape[1] != xshape[1] || wshape[2] < 1 || wshape[3] < 1 ||
        wshape[4] < 1 || xshape[2] % wshape[2] || xshape[3] % wshape[3] || xshape[4] % wshape[4]) {
        snprintf(why, why_size, "conv3d patch embedding: bf16/fp16, channels equal, kernel dividing the input");
        return DRIFT_E_UNSUPPORTED;
    }
    cudnnHandle_t h = NULL;
    if (dct_cudnn_handle(ctx, &h, why, why_size)) return DRIFT_E_UNSUPPORTED;
    if (!st->conv) {
        st->conv = drift_calloc(1, sizeof *st->conv);
        if (!st->conv) return drift_err_set(err, DRIFT_E_NOMEM, ctx->name, "no memory for the conv plan cache");
    }
    int64_t key[11];
    memcpy(key, xshape, 5 * sizeof(int64_t));
    memcpy(key + 5, wshape, 5 * sizeof(int64_t));
    key[10] = dt;
    conv_plan *p = NULL;
    for (int i = 0; i < CONV_CACHE; i++)
        if (st->conv->plans[i].used && !memcmp(st->conv->plans[i].key, key, sizeof key)) p = &st->conv->plans[i];
    if (!p) {
        p = &st->conv->plans[st->conv->next];
        st->conv->next = (st->conv->next + 1) % CONV_CACHE;
        dct_cg_release(&p->g);
        memset(p, 0, sizeof *p);
        memcpy(p->key, key, sizeof key);
        if (conv_build(ctx->torch, h, xshape, wshape, dt, p, why, why_size)) {
            dct_cg_release(&p->g);
            memset(p, 0, sizeof *p);
            return DRIFT_E_UNSUPPORTED;
        }
    }
    void *ws = NULL;
    int rc = dcu_check(dcu_malloc(ctx, &ws, (size_t)p->g.workspace), err, ctx->name, "allocating the conv workspace");
    if (rc) return rc;
    int64_t uids[3] = {UID_X, UID_W, UID_Y};
    void *ptrs[3] = {(void *)x, (void *)w, y};
    cudnnStatus_t s = dct_cg_execute(h, &p->g, 3, uids, ptrs, ws);
    dcu_free(ctx, ws);
    if (s) {
        char last[256] = "";
        cudnnGetLastErrorString(last, sizeof last);
        return drift_err_set(err, DRIFT_E_IO, ctx->name, "cuDNN conv execute: %s %s", cudnnGetErrorString(s), last);
    }
    return DRIFT_OK;
}

#endif
