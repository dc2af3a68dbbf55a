/* ATTENTION under the torch profile: cuDNN's fused flash SDPA forward, the
 * kernel torch 2.11 runs for scaled_dot_product_attention on an H200
 * (cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_*), built through
 * cuDNN's C backend API (drift's own code; the graph is the one torch's
 * aten/src/ATen/native/cudnn/MHA.cpp asks cudnn-frontend's sdpa node for):
 *
 *   S  = Q K^T              matmul, fp32 (K^T: K's descriptor with the last
 *                           two dims and strides swapped)
 *   S  = S * attn_scale     pointwise MUL with a by-value fp32 scalar
 *   M  = max_j S            reduction MAX to [B, H, Sq, 1]
 *   E  = exp(S - M)         pointwise SUB, EXP
 *   Z  = sum_j E            reduction ADD
 *   P  = E / Z              pointwise DIV
 *   (Stats = M + log Z      training mode only: DRIFT_TORCH_SDPA_STATS=1)
 *   O  = P V                matmul into the bf16/fp16 output
 * I/O tensors at the operands' real strides (layout 0 [B, H, L, D] or layout
 * 1 [B, L, H, D], which is what diffusers hands torch after its transpose),
 * intermediates virtual fp32; heuristics mode A, the first engine config
 * that finalizes (frontend's HEURISTICS_CHOICE). Plans are cached per shape,
 * strides, dtype and scale. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "formats/alloc.h"
#include "kernels/cuda/torch/torch_profile.h"

#ifndef DRIFT_HAVE_CUDNN

int dct_sdpa_cudnn(dcu_ctx *ctx, const dct_sdpa_args *a, char *why, size_t why_size, drift_err *err) {
    (void)ctx;
    (void)a;
    (void)err;
    snprintf(why, why_size, "built without cuDNN");
    return DRIFT_E_UNSUPPORTED;
}
void dct_sdpa_cache_destroy(dcu_ctx *ctx) { (void)ctx; }

#else

#include <cudnn.h>

#define SDPA_CACHE 16
#define MAX_DESC 40

typedef struct sdpa_key {
    int64_t B, H, Sq, Sk, D;
    int64_t qs[4], ks[4], vs[4], os[4];
    int dtype, stats;
    float scale;
} sdpa_key;

typedef struct sdpa_plan {
    int used;
    sdpa_key key;
    cudnnBackendDescriptor_t desc[MAX_DESC]; /* everything the plan keeps alive */
    int ndesc;
    cudnnBackendDescriptor_t plan;
    int64_t workspace;
} sdpa_plan;

struct dct_sdpa_cache {
    cudnnHandle_t handle;
    sdpa_plan plans[SDPA_CACHE];
    int next;
};

typedef struct builder {
    sdpa_plan *p;
    cudnnStatus_t st;
    char *why;
    size_t why_size;
} builder;

static int bfail(builder *b, const char *what, cudnnStatus_t s) {
    if (b->st == CUDNN_STATUS_SUCCESS) {
        char last[256] = "";
        cudnnGetLastErrorString(last, sizeof last);
        snprintf(b->why, b->why_size, "cuDNN %s: %s%s%s", what, cudnnGetErrorString(s), last[0] ? ": " : "", last);
        b->st = s;
    }
    return -1;
}

static cudnnBackendDescriptor_t bcreate(builder *b, cudnnBackendDescriptorType_t t, const char *what) {
    if (b->st) return NULL;
    if (b->p->ndesc >= MAX_DESC) {
        bfail(b, "too many descriptors", CUDNN_STATUS_INTERNAL_ERROR);
        return NULL;
    }
    cudnnBackendDescriptor_t d = NULL;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(t, &d);
    if (s) {
        bfail(b, what, s);
        return NULL;
    }
    b->p->desc[b->p->ndesc++] = d;
    return d;
}

static void bset(builder *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                 int64_t n, const void *v, const char *what) {
    if (b->st || !d) return;
    cudnnStatus_t s = cudnnBackendSetAttribute(d, a, t, n, v);
    if (s) bfail(b, what, s);
}

static void bfin(builder *b, cudnnBackendDescriptor_t d, const char *what) {
    if (b->st || !d) return;
    cudnnStatus_t s = cudnnBackendFinalize(d);
    if (s) bfail(b, what, s);
}

static cudnnBackendDescriptor_t tensor(builder *b, int64_t uid, cudnnDataType_t dt, const int64_t *dims,
                                       const int64_t *strides, int is_virtual, int by_value) {
    cudnnBackendDescriptor_t t = bcreate(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor descriptor");
    int64_t align = 16;
    bool virt = is_virtual != 0, byv = by_value != 0;
    bset(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor dtype");
    bset(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims");
    bset(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
    bset(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
    bset(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    if (virt) bset(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "tensor virtual");
    if (byv) bset(b, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byv, "tensor by value");
    bfin(b, t, "finalizing a tensor descriptor");
    return t;
}

static cudnnBackendDescriptor_t op_matmul(builder *b, cudnnBackendDescriptor_t A, cudnnBackendDescriptor_t B,
                                          cudnnBackendDescriptor_t C) {
    cudnnBackendDescriptor_t m = bcreate(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul descriptor");
    cudnnDataType_t ct = CUDNN_DATA_FLOAT;
    bset(b, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct, "matmul compute type");
    bfin(b, m, "finalizing a matmul descriptor");
    cudnnBackendDescriptor_t o = bcreate(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation");
    bset(b, o, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &A, "matmul A");
    bset(b, o, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &B, "matmul B");
    bset(b, o, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &C, "matmul C");
    bset(b, o, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m, "matmul desc");
    bfin(b, o, "finalizing a matmul operation");
    return o;
}

static cudnnBackendDescriptor_t op_pointwise(builder *b, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t X,
                                             cudnnBackendDescriptor_t B, cudnnBackendDescriptor_t Y) {
    cudnnBackendDescriptor_t p = bcreate(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise descriptor");
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    bset(b, p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    bset(b, p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
    bfin(b, p, "finalizing a pointwise descriptor");
    cudnnBackendDescriptor_t o = bcreate(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
    bset(b, o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p, "pointwise desc");
    bset(b, o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &X, "pointwise X");
    if (B) bset(b, o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &B, "pointwise B");
    bset(b, o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &Y, "pointwise Y");
    bfin(b, o, "finalizing a pointwise operation");
    return o;
}

static cudnnBackendDescriptor_t op_reduce(builder *b, cudnnReduceTensorOp_t r, cudnnBackendDescriptor_t X,
                                          cudnnBackendDescriptor_t Y) {
    cudnnBackendDescriptor_t d = bcreate(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction descriptor");
    cudnnDataType_t ct = CUDNN_DATA_FLOAT;
    bset(b, d, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &r, "reduction operator");
    bset(b, d, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct, "reduction compute type");
    bfin(b, d, "finalizing a reduction descriptor");
    cudnnBackendDescriptor_t o = bcreate(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction operation");
    bset(b, o, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &X, "reduction X");
    bset(b, o, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &Y, "reduction Y");
    bset(b, o, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d, "reduction desc");
    bfin(b, o, "finalizing a reduction operation");
    return o;
}

enum { UID_Q = 1, UID_K = 2, UID_V = 3, UID_O = 4, UID_SCALE = 5, UID_STATS = 6 };

static void plan_release(sdpa_plan *p) {
    for (int i = p->ndesc - 1; i >= 0; i--)
        if (p->desc[i]) cudnnBackendDestroyDescriptor(p->desc[i]);
    memset(p, 0, sizeof *p);
}

/* Builds the graph and plan for key into p; 0 on success. */
static int plan_build(cudnnHandle_t h, const sdpa_key *k, sdpa_plan *p, char *why, size_t why_size) {
    builder b = {p, CUDNN_STATUS_SUCCESS, why, why_size};
    memset(p, 0, sizeof *p);
    p->key = *k;
    const cudnnDataType_t io = k->dtype == DRIFT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    int64_t qd[4] = {k->B, k->H, k->Sq, k->D}, kd[4] = {k->B, k->H, k->D, k->Sk}, vd[4] = {k->B, k->H, k->Sk, k->D};
    int64_t kts[4] = {k->ks[0], k->ks[1], k->ks[3], k->ks[2]};
    int64_t sd[4] = {k->B, k->H, k->Sq, k->Sk}, ss[4] = {k->H * k->Sq * k->Sk, k->Sq * k->Sk, k->Sk, 1};
    int64_t rd[4] = {k->B, k->H, k->Sq, 1}, rs[4] = {k->H * k->Sq, k->Sq, 1, 1};
    int64_t one[4] = {1, 1, 1, 1};
    cudnnBackendDescriptor_t Q = tensor(&b, UID_Q, io, qd, k->qs, 0, 0);
    cudnnBackendDescriptor_t KT = tensor(&b, UID_K, io, kd, kts, 0, 0);
    cudnnBackendDescriptor_t V = tensor(&b, UID_V, io, vd, k->vs, 0, 0);
    cudnnBackendDescriptor_t O = tensor(&b, UID_O, io, qd, k->os, 0, 0);
    cudnnBackendDescriptor_t SC = tensor(&b, UID_SCALE, f32, one, one, 0, 1);
    cudnnBackendDescriptor_t S1 = tensor(&b, 100, f32, sd, ss, 1, 0), S2 = tensor(&b, 101, f32, sd, ss, 1, 0);
    cudnnBackendDescriptor_t M = tensor(&b, 102, f32, rd, rs, 1, 0), S3 = tensor(&b, 103, f32, sd, ss, 1, 0);
    cudnnBackendDescriptor_t E = tensor(&b, 104, f32, sd, ss, 1, 0), Z = tensor(&b, 105, f32, rd, rs, 1, 0);
    cudnnBackendDescriptor_t P = tensor(&b, 106, f32, sd, ss, 1, 0);
    cudnnBackendDescriptor_t ops[10];
    int nops = 0;
    ops[nops++] = op_matmul(&b, Q, KT, S1);
    ops[nops++] = op_pointwise(&b, CUDNN_POINTWISE_MUL, S1, SC, S2);
    ops[nops++] = op_reduce(&b, CUDNN_REDUCE_TENSOR_MAX, S2, M);
    ops[nops++] = op_pointwise(&b, CUDNN_POINTWISE_SUB, S2, M, S3);
    ops[nops++] = op_pointwise(&b, CUDNN_POINTWISE_EXP, S3, NULL, E);
    ops[nops++] = op_reduce(&b, CUDNN_REDUCE_TENSOR_ADD, E, Z);
    if (k->stats) {
        cudnnBackendDescriptor_t LZ = tensor(&b, 107, f32, rd, rs, 1, 0), ST = tensor(&b, UID_STATS, f32, rd, rs, 0, 0);
        ops[nops++] = op_pointwise(&b, CUDNN_POINTWISE_LOG, Z, NULL, LZ);
        ops[nops++] = op_pointwise(&b, CUDNN_POINTWISE_ADD, M, LZ, ST);
    }
    ops[nops++] = op_pointwise(&b, CUDNN_POINTWISE_DIV, E, Z, P);
    ops[nops++] = op_matmul(&b, P, V, O);
    cudnnBackendDescriptor_t g = bcreate(&b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    bset(&b, g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle");
    bset(&b, g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops, "graph ops");
    bfin(&b, g, "finalizing the operation graph");
    cudnnBackendDescriptor_t heur = bcreate(&b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    bset(&b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g, "heuristics graph");
    bset(&b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
    bfin(&b, heur, "finalizing the heuristics");
    if (b.st) return -1;
    int64_t count = 0;
    cudnnStatus_t s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                               &count, NULL);
    if (s) return bfail(&b, "counting heuristic results", s);
    if (count <= 0) return bfail(&b, "heuristics: no engine for this graph", CUDNN_STATUS_NOT_SUPPORTED);
    if (count > 8) count = 8;
    cudnnBackendDescriptor_t cfg[8];
    for (int64_t i = 0; i < count; i++) cfg[i] = bcreate(&b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
    if (b.st) return -1;
    int64_t got = 0;
    s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg);
    if (s) return bfail(&b, "reading heuristic results", s);
    for (int64_t i = 0; i < got; i++) {
        cudnnBackendDescriptor_t plan = NULL;
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan)) continue;
        if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h) ||
            cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &cfg[i]) ||
            (s = cudnnBackendFinalize(plan)) != CUDNN_STATUS_SUCCESS) {
            cudnnBackendDestroyDescriptor(plan);
            continue;
        }
        int64_t ws = 0, n = 0;
        if (cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws)) {
            cudnnBackendDestroyDescriptor(plan);
            continue;
        }
        if (p->ndesc >= MAX_DESC) {
            cudnnBackendDestroyDescriptor(plan);
            return bfail(&b, "too many descriptors", CUDNN_STATUS_INTERNAL_ERROR);
        }
        p->desc[p->ndesc++] = plan;
        p->plan = plan;
        p->workspace = ws;
        p->used = 1;
        return 0;
    }
    return bfail(&b, "no engine config of the heuristics finalizes", s ? s : CUDNN_STATUS_NOT_SUPPORTED);
}

void dct_sdpa_cache_destroy(dcu_ctx *ctx) {
    struct dct_state *st = ctx ? ctx->torch : NULL;
    if (!st || !st->sdpa) return;
    for (int i = 0; i < SDPA_CACHE; i++)
        if (st->sdpa->plans[i].used) plan_release(&st->sdpa->plans[i]);
    if (st->sdpa->handle) cudnnDestroy(st->sdpa->handle);
    drift_free(st->sdpa);
    st->sdpa = NULL;
}

int dct_sdpa_cudnn(dcu_ctx *ctx, const dct_sdpa_args *a, char *why, size_t why_size, drift_err *err) {
    struct dct_state *st = ctx->torch;
    if (a->dtype != DRIFT_BF16 && a->dtype != DRIFT_F16) {
        snprintf(why, why_size, "cuDNN SDPA needs bf16/fp16 operands");
        return DRIFT_E_UNSUPPORTED;
    }
    if (!st->sdpa) {
        st->sdpa = drift_calloc(1, sizeof *st->sdpa);
        if (!st->sdpa) return drift_err_set(err, DRIFT_E_NOMEM, ctx->name, "no memory for the SDPA plan cache");
        cudnnStatus_t s = cudnnCreate(&st->sdpa->handle);
        if (s) {
            st->sdpa->handle = NULL;
            snprintf(why, why_size, "cudnnCreate: %s", cudnnGetErrorString(s));
            return DRIFT_E_UNSUPPORTED;
        }
    }
    struct dct_sdpa_cache *c = st->sdpa;
    cudnnStatus_t s = cudnnSetStream(c->handle, ctx->stream);
    if (s) {
        snprintf(why, why_size, "cudnnSetStream: %s", cudnnGetErrorString(s));
        return DRIFT_E_UNSUPPORTED;
    }
    sdpa_key key;
    memset(&key, 0, sizeof key);
    key.B = a->B;
    key.H = a->H;
    key.Sq = a->Sq;
    key.Sk = a->Sk;
    key.D = a->D;
    memcpy(key.qs, a->qs, sizeof key.qs);
    memcpy(key.ks, a->ks, sizeof key.ks);
    memcpy(key.vs, a->vs, sizeof key.vs);
    memcpy(key.os, a->os, sizeof key.os);
    key.dtype = (int)a->dtype;
    key.stats = st->sdpa_stats;
    key.scale = a->scale;
    sdpa_plan *p = NULL;
    for (int i = 0; i < SDPA_CACHE; i++)
        if (c->plans[i].used && memcmp(&c->plans[i].key, &key, sizeof key) == 0) p = &c->plans[i];
    if (!p) {
        p = &c->plans[c->next];
        c->next = (c->next + 1) % SDPA_CACHE;
        if (p->used) plan_release(p);
        if (plan_build(c->handle, &key, p, why, why_size)) {
            plan_release(p);
            return DRIFT_E_UNSUPPORTED;
        }
    }
    void *ws = NULL, *stats = NULL;
    int rc = dcu_check(dcu_malloc(ctx, &ws, (size_t)p->workspace), err, ctx->name, "allocating the SDPA workspace");
    if (!rc && key.stats)
        rc = dcu_check(dcu_malloc(ctx, &stats, (size_t)(a->B * a->H * a->Sq) * sizeof(float)), err, ctx->name,
                       "allocating the SDPA statistics");
    if (rc) {
        dcu_free(ctx, ws);
        return rc;
    }
    float scale = a->scale;
    int64_t uids[6] = {UID_Q, UID_K, UID_V, UID_O, UID_SCALE, UID_STATS};
    void *ptrs[6] = {(void *)a->q, (void *)a->k, (void *)a->v, a->o, &scale, stats};
    int64_t n = key.stats ? 6 : 5;
    cudnnBackendDescriptor_t vp = NULL;
    s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    if (!s) s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
    if (!s) s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
    if (!s) s = cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    if (!s) s = cudnnBackendFinalize(vp);
    if (!s) s = cudnnBackendExecute(c->handle, p->plan, vp);
    if (vp) cudnnBackendDestroyDescriptor(vp);
    dcu_free(ctx, ws);
    dcu_free(ctx, stats);
    if (s) {
        char last[256] = "";
        cudnnGetLastErrorString(last, sizeof last);
        return drift_err_set(err, DRIFT_E_IO, ctx->name, "cuDNN SDPA execute: %s %s", cudnnGetErrorString(s), last);
    }
    return DRIFT_OK;
}

#endif
