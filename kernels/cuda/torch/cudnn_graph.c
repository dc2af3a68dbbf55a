/* The cuDNN backend-API builder of cudnn_graph.h. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/torch/cudnn_graph.h"

#ifdef DRIFT_HAVE_CUDNN

int dct_cudnn_handle(dcu_ctx *ctx, cudnnHandle_t *h, char *why, size_t why_size) {
    struct dct_state *st = ctx->torch;
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    if (!st->cudnn) {
        cudnnHandle_t nh = NULL;
        s = cudnnCreate(&nh);
        if (s) {
            snprintf(why, why_size, "cudnnCreate: %s", cudnnGetErrorString(s));
            return -1;
        }
        st->cudnn = nh;
    }
    *h = (cudnnHandle_t)st->cudnn;
    s = cudnnSetStream(*h, ctx->stream);
    if (s) {
        snprintf(why, why_size, "cudnnSetStream: %s", cudnnGetErrorString(s));
        return -1;
    }
    return 0;
}

void dct_cudnn_destroy(dcu_ctx *ctx) {
    struct dct_state *st = ctx ? ctx->torch : NULL;
    if (st && st->cudnn) cudnnDestroy((cudnnHandle_t)st->cudnn);
    if (st) st->cudnn = NULL;
}

void dct_cg_init(dct_cg *g) { memset(g, 0, sizeof *g); }

void dct_cg_release(dct_cg *g) {
    for (int i = g->ndesc - 1; i >= 0; i--)
        if (g->desc[i]) cudnnBackendDestroyDescriptor(g->desc[i]);
    memset(g, 0, sizeof *g);
}

int dct_cg_fail(dct_cg *g, const char *what, cudnnStatus_t s) {
    if (g->st == CUDNN_STATUS_SUCCESS) {
        char last[160] = "";
        cudnnGetLastErrorString(last, sizeof last);
        snprintf(g->why, sizeof g->why, "cuDNN %s: %s%s%s", what, cudnnGetErrorString(s), last[0] ? ": " : "", last);
        g->st = s != CUDNN_STATUS_SUCCESS ? s : CUDNN_STATUS_INTERNAL_ERROR;
    }
    return -1;
}

static int keep(dct_cg *g, cudnnBackendDescriptor_t d) {
    if (g->ndesc >= DCT_CG_MAX) {
        cudnnBackendDestroyDescriptor(d);
        return dct_cg_fail(g, "too many descriptors", CUDNN_STATUS_INTERNAL_ERROR);
    }
    g->desc[g->ndesc++] = d;
    return 0;
}

cudnnBackendDescriptor_t dct_cg_create(dct_cg *g, cudnnBackendDescriptorType_t t, const char *what) {
    if (g->st) return NULL;
    cudnnBackendDescriptor_t d = NULL;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(t, &d);
    if (s) {
        dct_cg_fail(g, what, s);
        return NULL;
    }
    return keep(g, d) ? NULL : d;
}

void dct_cg_set(dct_cg *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                int64_t n, const void *v, const char *what) {
    if (g->st || !d) return;
    cudnnStatus_t s = cudnnBackendSetAttribute(d, a, t, n, v);
    if (s) dct_cg_fail(g, what, s);
}

void dct_cg_fin(dct_cg *g, cudnnBackendDescriptor_t d, const char *what) {
    if (g->st || !d) return;
    cudnnStatus_t s = cudnnBackendFinalize(d);
    if (s) dct_cg_fail(g, what, s);
}

cudnnBackendDescriptor_t dct_cg_tensor(dct_cg *g, int64_t uid, cudnnDataType_t dt, int nd, const int64_t *dims,
                                       const int64_t *strides, int is_virtual, int by_value) {
    cudnnBackendDescriptor_t t = dct_cg_create(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor descriptor");
    int64_t align = 16;
    bool virt = is_virtual != 0, byv = by_value != 0;
    dct_cg_set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor dtype");
    dct_cg_set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, nd, dims, "tensor dims");
    dct_cg_set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, nd, strides, "tensor strides");
    dct_cg_set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
    dct_cg_set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    if (virt) dct_cg_set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "tensor virtual");
    if (byv) dct_cg_set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byv, "tensor by value");
    dct_cg_fin(g, t, "finalizing a tensor descriptor");
    return t;
}

int dct_cg_plan(dct_cg *g, cudnnHandle_t h, cudnnBackendDescriptor_t *ops, int nops, cudnnBackendHeurMode_t mode) {
    cudnnBackendDescriptor_t og = dct_cg_create(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    dct_cg_set(g, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle");
    dct_cg_set(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops, "graph ops");
    dct_cg_fin(g, og, "finalizing the operation graph");
    cudnnBackendDescriptor_t heur = dct_cg_create(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    dct_cg_set(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og,
               "heuristics graph");
    dct_cg_set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
    dct_cg_fin(g, heur, "finalizing the heuristics");
    if (g->st) return -1;
    int64_t count = 0;
    cudnnStatus_t s =
        cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
    if (s) return dct_cg_fail(g, "counting heuristic results", s);
    if (count <= 0) return dct_cg_fail(g, "heuristics: no engine for this graph", CUDNN_STATUS_NOT_SUPPORTED);
    if (count > 8) count = 8;
    cudnnBackendDescriptor_t cfg[8];
    for (int64_t i = 0; i < count; i++) cfg[i] = dct_cg_create(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
    if (g->st) return -1;
    int64_t got = 0;
    s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg);
    if (s) return dct_cg_fail(g, "reading heuristic results", s);
    cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
    for (int64_t i = 0; i < got; i++) {
        cudnnBackendDescriptor_t plan = NULL;
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan)) continue;
        int64_t ws = 0, n = 0;
        if ((last = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h)) ||
            (last = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i])) ||
            (last = cudnnBackendFinalize(plan)) ||
            (last = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                             &ws))) {
            cudnnBackendDestroyDescriptor(plan);
            continue;
        }
        if (g->skip > 0) {
            g->skip--;
            cudnnBackendDestroyDescriptor(plan);
            continue;
        }
        if (keep(g, plan)) return -1;
        g->plan = plan;
        g->workspace = ws;
        g->rank = (int)i;
        return 0;
    }
    return dct_cg_fail(g, "no engine config of the heuristics finalizes", last);
}

cudnnStatus_t dct_cg_execute(cudnnHandle_t h, const dct_cg *g, int n, const int64_t *uids, void *const *ptrs,
                             void *ws) {
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (!s) s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (!s) s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (!s) s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (!s) s = cudnnBackendFinalize(vp);
    if (!s) s = cudnnBackendExecute(h, g->plan, vp);
    if (vp) cudnnBackendDestroyDescriptor(vp);
    return s;
}

#else
#include "kernels/cuda/torch/torch_profile.h"
void dct_cudnn_destroy(dcu_ctx *ctx) { (void)ctx; }
#endif
