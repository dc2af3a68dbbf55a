/* ATTENTION under the torch profile: cuDNN's fused flash SDPA forward, the
 * kernel torch 2.11 runs for scaled_dot_product_attention on an H200
 * (cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_*), built through
 * cuDNN's C backend API (drift's own code). Two graphs, the spec's
 * sdpa_graph=auto|unified|composite:
 *
 * unified (cuDNN >= 9.13; what cudnn-frontend 1.x builds for torch's sdpa
 * node there: cuDNN's API log names torch's graph UNIFIED_SDPA_FWD): one
 * OPERATION_SDPA_FWD descriptor with Q, K, V, O at their real strides, the
 * attention scale as a by-value fp32 scalar and, in training mode, the
 * softmax statistics [B, H, Sq, 1] fp32. cuDNN picks its fastest engine.
 *
 * composite (older cuDNN, sdpa_graph=composite, or an additive bias: the
 * unified operation has no bias attribute): the graph torch 2.11's
 * cudnn-frontend 1.18 builds for torch's masked sdpa (COMPOSITE, read from its
 * graph log and cuDNN's API log on the H200, tests/gpu/sdpa_mask_probe.sh):
 *
 *   S  = Q K^T              matmul, fp32 (K^T: K's descriptor with the last
 *                           two dims and strides swapped)
 *   S  = S * attn_scale     pointwise MUL with a by-value fp32 scalar
 *   S  = S + bias           pointwise ADD, with ATTENTION's bias only (SDPA's
 *                           attn_mask / is_causal): a tensor of the operands'
 *                           dtype (drift's fp32 bias is rounded to it: 0 and
 *                           -inf, torch's -65504 and a bf16 mask exactly),
 *                           dims [B, Hb, Sq, Sk] (Hb = 1 or H) at torch's
 *                           strides: 0 on a broadcast dim, a size-1 dim its
 *                           natural one ([1, 1, 1, Sk] over Sq: [Sk, Sk, 0, 1]);
 *                           if cuDNN declines that, [B, H, Sq, Sk] with stride 0
 *                           on every broadcast dim, then a contiguous copy
 *   M  = max_j S            reduction MAX to [B, H, Sq, 1]
 *   E  = exp(S - M)         pointwise SUB, EXP
 *   Z  = sum_j E            reduction ADD
 *   Stats = M + log Z       pointwise LOG, ADD: always (a virtual tensor
 *                           outside training mode; without it cuDNN's
 *                           attention pattern matcher declines a graph with a
 *                           bias: "no engine config of the heuristics finalizes")
 *   P  = E / Z              pointwise DIV into a virtual tensor of the
 *                           operands' dtype (bmm2's A)
 *   O  = P V                matmul into the bf16/fp16 output
 * The virtual tensors after S + bias carry the bias's strides where the bias
 * has S's dims (cudnn-frontend infers a pointwise output's strides from an
 * input of the output's dims, its last input first), else S's contiguous ones.
 * On the H200 (cuDNN 9.19, torch's wheel) this graph runs the engine torch's
 * masked SDPA runs and is bitwise with it (torch_parity.py: sdpa_mask_*,
 * sdpa_maskzoo_*; the zoo's Ernie-Image, Lumina-Next, plain_mmdit and
 * HunyuanVideo-1.5). Without a bias the composite graph runs a slower engine
 * than the unified one (4-5x torch's time at B 1, H 24, L 4096, D 128).
 *
 * Both: I/O tensors at the operands' real strides (layout 0 [B, H, L, D] or
 * layout 1 [B, L, H, D], which is what diffusers hands torch after its
 * transpose), heuristics mode A, the first engine config that finalizes
 * (frontend's HEURISTICS_CHOICE). auto builds unified and falls back to
 * composite when cuDNN declines it. Plans are cached per shape, strides,
 * dtype, scale, graph and the bias's broadcast dims and form. */
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

#include "kernels/cuda/torch/cudnn_graph.h"

#define SDPA_CACHE 16

typedef struct sdpa_key {
    int64_t B, H, Sq, Sk, D;
    int64_t qs[4], ks[4], vs[4], os[4];
    int dtype, stats;
    int unified; /* 1: the unified SDPA_FWD operation, 0: the composite graph */
    float scale;
    int64_t bias[3]; /* Bb, Hb, Lqb of the additive bias; all 0: none */
    int bias_form;   /* 0: dims [B, Hb, Sq, Sk] (torch's), 1: [B, H, Sq, Sk], stride 0 where broadcast;
                        2: [B, Hb, Sq, Sk] contiguous (the bias expanded into a scratch copy) */
} sdpa_key;

typedef struct sdpa_plan {
    int used;
    sdpa_key key;
    dct_cg g; /* the graph's descriptors and its plan */
} sdpa_plan;

struct dct_sdpa_cache {
    sdpa_plan plans[SDPA_CACHE];
    int next;
};

static cudnnBackendDescriptor_t op_matmul(dct_cg *b, cudnnBackendDescriptor_t A, cudnnBackendDescriptor_t B,
                                          cudnnBackendDescriptor_t C) {
    cudnnBackendDescriptor_t m = dct_cg_create(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul descriptor");
    cudnnDataType_t ct = CUDNN_DATA_FLOAT;
    dct_cg_set(b, m, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct, "matmul compute type");
    dct_cg_fin(b, m, "finalizing a matmul descriptor");
    cudnnBackendDescriptor_t o = dct_cg_create(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation");
    dct_cg_set(b, o, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &A, "matmul A");
    dct_cg_set(b, o, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &B, "matmul B");
    dct_cg_set(b, o, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &C, "matmul C");
    dct_cg_set(b, o, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m, "matmul desc");
    dct_cg_fin(b, o, "finalizing a matmul operation");
    return o;
}

static cudnnBackendDescriptor_t op_pointwise(dct_cg *b, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t X,
                                             cudnnBackendDescriptor_t B, cudnnBackendDescriptor_t Y) {
    cudnnBackendDescriptor_t p = dct_cg_create(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise descriptor");
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    dct_cg_set(b, p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    dct_cg_set(b, p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
    dct_cg_fin(b, p, "finalizing a pointwise descriptor");
    cudnnBackendDescriptor_t o =
        dct_cg_create(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
    dct_cg_set(b, o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p,
               "pointwise desc");
    dct_cg_set(b, o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &X, "pointwise X");
    if (B) dct_cg_set(b, o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &B, "pointwise B");
    dct_cg_set(b, o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &Y, "pointwise Y");
    dct_cg_fin(b, o, "finalizing a pointwise operation");
    return o;
}

static cudnnBackendDescriptor_t op_reduce(dct_cg *b, cudnnReduceTensorOp_t r, cudnnBackendDescriptor_t X,
                                          cudnnBackendDescriptor_t Y) {
    cudnnBackendDescriptor_t d = dct_cg_create(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction descriptor");
    cudnnDataType_t ct = CUDNN_DATA_FLOAT;
    dct_cg_set(b, d, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &r, "reduction operator");
    dct_cg_set(b, d, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct, "reduction compute type");
    dct_cg_fin(b, d, "finalizing a reduction descriptor");
    cudnnBackendDescriptor_t o =
        dct_cg_create(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction operation");
    dct_cg_set(b, o, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &X, "reduction X");
    dct_cg_set(b, o, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &Y, "reduction Y");
    dct_cg_set(b, o, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d, "reduction desc");
    dct_cg_fin(b, o, "finalizing a reduction operation");
    return o;
}

enum { UID_Q = 1, UID_K = 2, UID_V = 3, UID_O = 4, UID_SCALE = 5, UID_STATS = 6, UID_BIAS = 7 };

/* The bias's descriptor (k->bias_form) over the contiguous [Bb, Hb, Lqb, Sk] buffer. */
static void bias_desc(const sdpa_key *k, int64_t *d, int64_t *s) {
    const int64_t Bb = k->bias[0], Hb = k->bias[1], Lqb = k->bias[2];
    d[0] = k->B, d[1] = k->bias_form == 1 ? k->H : Hb, d[2] = k->Sq, d[3] = k->Sk;
    if (k->bias_form == 2) { /* the expanded copy */
        s[3] = 1, s[2] = k->Sk, s[1] = k->Sq * k->Sk, s[0] = Hb * k->Sq * k->Sk;
        return;
    }
    /* the buffer's natural strides; a broadcast dim (size 1 in the buffer, larger in d) gets
     * stride 0 and a dim that stays 1 keeps its natural stride: torch's expand of the
     * contiguous mask ([1, 1, 1, Sk] over [1, 1, Sq, Sk]: strides [Sk, Sk, 0, 1]) */
    const int64_t bd[4] = {Bb, Hb, Lqb, k->Sk};
    int64_t nat = 1;
    for (int i = 3; i >= 0; i--) {
        s[i] = bd[i] == 1 && d[i] != 1 ? 0 : nat;
        nat *= bd[i];
    }
}

/* The bias operand in the io dtype (k->dtype): forms 0 and 1 the [Bb, Hb, Lqb, Sk]
 * fp32 bias rounded, form 2 expanded into a contiguous [B, Hb, Sq, Sk] copy. */
static int bias_prepare(dcu_ctx *ctx, const sdpa_key *k, const void *bias, void **out, drift_err *err) {
    const int64_t Bb = k->bias[0], Hb = k->bias[1], Lqb = k->bias[2];
    const int expand = k->bias_form == 2;
    const int64_t n = expand ? k->B * Hb * k->Sq * k->Sk : Bb * Hb * Lqb * k->Sk;
    int rc = dcu_check(dcu_malloc(ctx, out, (size_t)n * drift_dtype_size((drift_dtype)k->dtype)), err, ctx->name,
                       "allocating the SDPA bias in the operands' dtype");
    if (rc) return rc;
    dcu_copy c;
    memset(&c, 0, sizeof c);
    c.nd = 4;
    c.shape[0] = expand ? k->B : Bb, c.shape[1] = Hb, c.shape[2] = expand ? k->Sq : Lqb, c.shape[3] = k->Sk;
    c.ss[0] = Bb > 1 ? Hb * Lqb * k->Sk : 0, c.ss[1] = Lqb * k->Sk, c.ss[2] = Lqb > 1 ? k->Sk : 0, c.ss[3] = 1;
    c.ds[3] = 1, c.ds[2] = k->Sk, c.ds[1] = c.shape[2] * k->Sk, c.ds[0] = Hb * c.shape[2] * k->Sk;
    c.src = bias;
    c.ts = DRIFT_F32;
    c.td = (drift_dtype)k->dtype;
    c.dst = *out;
    dcu_copy_simplify(&c);
    return dcu_check(dcu_launch_copy(ctx, &c), err, ctx->name, "rounding the SDPA bias to the operands' dtype");
}

#if CUDNN_VERSION >= 91300
/* The unified graph: one SDPA_FWD operation (cuDNN >= 9.13). */
static int plan_build_unified(cudnnHandle_t h, const sdpa_key *k, sdpa_plan *p, char *why, size_t why_size) {
    dct_cg *b = &p->g;
    const cudnnDataType_t io = k->dtype == DRIFT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    int64_t qd[4] = {k->B, k->H, k->Sq, k->D}, kd[4] = {k->B, k->H, k->Sk, k->D};
    int64_t rd[4] = {k->B, k->H, k->Sq, 1}, rs[4] = {k->H * k->Sq, k->Sq, 1, 1}, one[4] = {1, 1, 1, 1};
    cudnnBackendDescriptor_t Q = dct_cg_tensor(b, UID_Q, io, 4, qd, k->qs, 0, 0);
    cudnnBackendDescriptor_t K = dct_cg_tensor(b, UID_K, io, 4, kd, k->ks, 0, 0);
    cudnnBackendDescriptor_t V = dct_cg_tensor(b, UID_V, io, 4, kd, k->vs, 0, 0);
    cudnnBackendDescriptor_t O = dct_cg_tensor(b, UID_O, io, 4, qd, k->os, 0, 0);
    cudnnBackendDescriptor_t SC = dct_cg_tensor(b, UID_SCALE, CUDNN_DATA_FLOAT, 4, one, one, 0, 1);
    cudnnBackendDescriptor_t op = dct_cg_create(b, CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, "SDPA operation");
    dct_cg_set(b, op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &Q, "SDPA Q");
    dct_cg_set(b, op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &K, "SDPA K");
    dct_cg_set(b, op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &V, "SDPA V");
    dct_cg_set(b, op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &O, "SDPA O");
    dct_cg_set(b, op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &SC, "SDPA scale");
    if (k->stats) {
        cudnnBackendDescriptor_t ST = dct_cg_tensor(b, UID_STATS, CUDNN_DATA_FLOAT, 4, rd, rs, 0, 0);
        dct_cg_set(b, op, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ST,
                   "SDPA statistics");
    }
    dct_cg_fin(b, op, "finalizing the SDPA operation");
    int rc = b->st ? -1 : dct_cg_plan(b, h, &op, 1, CUDNN_HEUR_MODE_A);
    if (rc) snprintf(why, why_size, "unified SDPA graph: %s", b->why);
    return rc;
}
#endif

/* Builds the graph and plan for key into p; 0 on success, else the reason in why. */
static int plan_build_composite(cudnnHandle_t h, const sdpa_key *k, sdpa_plan *p, char *why, size_t why_size) {
    dct_cg *b = &p->g;
    const cudnnDataType_t io = k->dtype == DRIFT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    int64_t qd[4] = {k->B, k->H, k->Sq, k->D}, kd[4] = {k->B, k->H, k->D, k->Sk}, vd[4] = {k->B, k->H, k->Sk, k->D};
    int64_t kts[4] = {k->ks[0], k->ks[1], k->ks[3], k->ks[2]};
    int64_t sd[4] = {k->B, k->H, k->Sq, k->Sk}, ss[4] = {k->H * k->Sq * k->Sk, k->Sq * k->Sk, k->Sk, 1};
    int64_t rd[4] = {k->B, k->H, k->Sq, 1}, rs[4] = {k->H * k->Sq, k->Sq, 1, 1};
    int64_t one[4] = {1, 1, 1, 1};
    cudnnBackendDescriptor_t Q = dct_cg_tensor(b, UID_Q, io, 4, qd, k->qs, 0, 0);
    cudnnBackendDescriptor_t KT = dct_cg_tensor(b, UID_K, io, 4, kd, kts, 0, 0);
    cudnnBackendDescriptor_t V = dct_cg_tensor(b, UID_V, io, 4, vd, k->vs, 0, 0);
    cudnnBackendDescriptor_t O = dct_cg_tensor(b, UID_O, io, 4, qd, k->os, 0, 0);
    cudnnBackendDescriptor_t SC = dct_cg_tensor(b, UID_SCALE, f32, 4, one, one, 0, 1);
    /* cudnn-frontend gives a pointwise output the strides of an input of the output's dims,
     * its last input first: after S + bias, the bias's (stride 0 on its broadcast dims) where
     * the bias has S's dims, so the max, exp and P tensors carry them too (torch's graph) */
    int64_t bd[4] = {0}, bs[4] = {0}, ps[4];
    memcpy(ps, ss, sizeof ps);
    if (k->bias[0]) {
        bias_desc(k, bd, bs);
        if (memcmp(bd, sd, sizeof bd) == 0) memcpy(ps, bs, sizeof ps);
    }
    cudnnBackendDescriptor_t S1 = dct_cg_tensor(b, 100, f32, 4, sd, ss, 1, 0);
    cudnnBackendDescriptor_t S2 = dct_cg_tensor(b, 101, f32, 4, sd, ss, 1, 0);
    cudnnBackendDescriptor_t M = dct_cg_tensor(b, 102, f32, 4, rd, rs, 1, 0);
    cudnnBackendDescriptor_t S3 = dct_cg_tensor(b, 103, f32, 4, sd, ps, 1, 0);
    cudnnBackendDescriptor_t E = dct_cg_tensor(b, 104, f32, 4, sd, ps, 1, 0);
    cudnnBackendDescriptor_t Z = dct_cg_tensor(b, 105, f32, 4, rd, rs, 1, 0);
    cudnnBackendDescriptor_t P = dct_cg_tensor(b, 106, io, 4, sd, ps, 1, 0); /* bmm2's A: the io type */
    cudnnBackendDescriptor_t ops[12];
    int nops = 0;
    ops[nops++] = op_matmul(b, Q, KT, S1);
    ops[nops++] = op_pointwise(b, CUDNN_POINTWISE_MUL, S1, SC, S2);
    if (k->bias[0]) { /* S = S + bias */
        cudnnBackendDescriptor_t BI = dct_cg_tensor(b, UID_BIAS, io, 4, bd, bs, 0, 0);
        cudnnBackendDescriptor_t SB = dct_cg_tensor(b, 108, f32, 4, sd, ps, 1, 0);
        ops[nops++] = op_pointwise(b, CUDNN_POINTWISE_ADD, S2, BI, SB);
        S2 = SB;
    }
    ops[nops++] = op_reduce(b, CUDNN_REDUCE_TENSOR_MAX, S2, M);
    ops[nops++] = op_pointwise(b, CUDNN_POINTWISE_SUB, S2, M, S3);
    ops[nops++] = op_pointwise(b, CUDNN_POINTWISE_EXP, S3, NULL, E);
    ops[nops++] = op_reduce(b, CUDNN_REDUCE_TENSOR_ADD, E, Z);
    /* Stats = M + log Z, always (torch's graph has it; cuDNN's fused attention pattern
     * wants it with a bias): a virtual tensor outside training mode */
    cudnnBackendDescriptor_t LZ = dct_cg_tensor(b, 107, f32, 4, rd, rs, 1, 0);
    cudnnBackendDescriptor_t ST = k->stats ? dct_cg_tensor(b, UID_STATS, f32, 4, rd, rs, 0, 0)
                                           : dct_cg_tensor(b, 109, f32, 4, rd, rs, 1, 0);
    ops[nops++] = op_pointwise(b, CUDNN_POINTWISE_LOG, Z, NULL, LZ);
    ops[nops++] = op_pointwise(b, CUDNN_POINTWISE_ADD, M, LZ, ST);
    ops[nops++] = op_pointwise(b, CUDNN_POINTWISE_DIV, E, Z, P);
    ops[nops++] = op_matmul(b, P, V, O);
    int rc = b->st ? -1 : dct_cg_plan(b, h, ops, nops, CUDNN_HEUR_MODE_A);
    if (rc) snprintf(why, why_size, "composite SDPA graph: %s", b->why);
    return rc;
}

/* The plan for key (graph per k->unified) into p: 0, or -1 with the reason in why. */
static int plan_build(cudnnHandle_t h, const sdpa_key *k, sdpa_plan *p, char *why, size_t why_size) {
    memset(p, 0, sizeof *p);
    dct_cg_init(&p->g);
    p->key = *k;
    int rc = -1;
#if CUDNN_VERSION >= 91300
    if (k->unified) rc = plan_build_unified(h, k, p, why, why_size);
#else
    if (k->unified) snprintf(why, why_size, "unified SDPA graph: drift was built against cuDNN %d (< 9.13)", CUDNN_VERSION);
#endif
    if (!k->unified) rc = plan_build_composite(h, k, p, why, why_size);
    if (!rc) p->used = 1;
    return rc;
}

void dct_sdpa_cache_destroy(dcu_ctx *ctx) {
    struct dct_state *st = ctx ? ctx->torch : NULL;
    if (!st || !st->sdpa) return;
    for (int i = 0; i < SDPA_CACHE; i++) dct_cg_release(&st->sdpa->plans[i].g);
    drift_free(st->sdpa);
    st->sdpa = NULL;
}

int dct_sdpa_cudnn(dcu_ctx *ctx, const dct_sdpa_args *a, char *why, size_t why_size, drift_err *err) {
    struct dct_state *st = ctx->torch;
    if (a->dtype != DRIFT_BF16 && a->dtype != DRIFT_F16) {
        snprintf(why, why_size, "cuDNN SDPA needs bf16/fp16 operands");
        return DRIFT_E_UNSUPPORTED;
    }
    cudnnHandle_t h = NULL;
    if (dct_cudnn_handle(ctx, &h, why, why_size)) return DRIFT_E_UNSUPPORTED;
    if (!st->sdpa) {
        st->sdpa = drift_calloc(1, sizeof *st->sdpa);
        if (!st->sdpa) return drift_err_set(err, DRIFT_E_NOMEM, ctx->name, "no memory for the SDPA plan cache");
    }
    struct dct_sdpa_cache *c = st->sdpa;
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
    if (a->bias)
        for (int i = 0; i < 3; i++) key.bias[i] = a->bias_dims[i];
    /* graph: 0 auto (unified, composite where cuDNN declines it), 1 unified, 2 composite */
    const int graph = st->sdpa_graph;
    if (a->bias && graph == 1) {
        snprintf(why, why_size, "sdpa_graph=unified, but cuDNN's unified SDPA operation takes no bias (attn_mask)");
        return DRIFT_E_UNSUPPORTED;
    }
    /* candidates in order: (unified, bias form); a bias: the composite graph, torch's
     * descriptor first */
    int cand[3][2], nc = 0;
    if (a->bias) {
        for (int f = 0; f < 3; f++) cand[nc][0] = 0, cand[nc++][1] = f;
    } else {
        for (int u = 1; u >= 0; u--)
            if (!((graph == 1 && !u) || (graph == 2 && u))) cand[nc][0] = u, cand[nc++][1] = 0;
    }
    sdpa_plan *p = NULL;
    for (int ci = 0; ci < nc && !p; ci++) {
        key.unified = cand[ci][0];
        key.bias_form = cand[ci][1];
        for (int i = 0; i < SDPA_CACHE; i++)
            if (c->plans[i].used && memcmp(&c->plans[i].key, &key, sizeof key) == 0) p = &c->plans[i];
    }
    char first[256] = "", other[256] = ""; /* the first candidate's reason; a middle one's */
    for (int ci = 0; ci < nc && !p; ci++) {
        key.unified = cand[ci][0];
        key.bias_form = cand[ci][1];
        const int last = ci == nc - 1;
        p = &c->plans[c->next];
        dct_cg_release(&p->g);
        char *dst = last ? why : ci == 0 ? first : other;
        if (plan_build(h, &key, p, dst, last ? why_size : sizeof first)) {
            dct_cg_release(&p->g);
            memset(p, 0, sizeof *p);
            p = NULL;
            continue;
        }
        c->next = (c->next + 1) % SDPA_CACHE;
    }
    if (!p) {
        if (nc > 1) { /* the first candidate's reason, then the last's (in why) */
            char both[256];
            snprintf(both, sizeof both, "%.120s; %.120s", first, why);
            snprintf(why, why_size, "%s", both);
        }
        return DRIFT_E_UNSUPPORTED;
    }
    void *ws = NULL, *stats = NULL;
    int rc = dcu_check(dcu_malloc(ctx, &ws, (size_t)p->g.workspace), err, ctx->name, "allocating the SDPA workspace");
    if (!rc && key.stats)
        rc = dcu_check(dcu_malloc(ctx, &stats, (size_t)(a->B * a->H * a->Sq) * sizeof(float)), err, ctx->name,
                       "allocating the SDPA statistics");
    void *bias_x = NULL; /* the bias in the operands' dtype (form 2: expanded) */
    if (!rc && a->bias) rc = bias_prepare(ctx, &p->key, a->bias, &bias_x, err);
    if (rc) {
        dcu_free(ctx, ws);
        dcu_free(ctx, stats);
        dcu_free(ctx, bias_x);
        return rc;
    }
    float scale = a->scale;
    int64_t uids[7] = {UID_Q, UID_K, UID_V, UID_O, UID_SCALE};
    void *ptrs[7] = {(void *)a->q, (void *)a->k, (void *)a->v, a->o, &scale};
    int n = 5;
    if (key.stats) uids[n] = UID_STATS, ptrs[n++] = stats;
    if (a->bias) uids[n] = UID_BIAS, ptrs[n++] = bias_x;
    cudnnStatus_t s = dct_cg_execute(h, &p->g, n, uids, ptrs, ws);
    snprintf(ctx->last_choice, sizeof ctx->last_choice, "cuDNN SDPA %s graph%s, heuristics config %d, workspace %lld",
             key.unified ? "unified" : "composite", a->bias ? " with a bias" : "", p->g.rank, (long long)p->g.workspace);
    dcu_free(ctx, ws);
    dcu_free(ctx, stats);
    dcu_free(ctx, bias_x);
    if (s) {
        char last[256] = "";
        cudnnGetLastErrorString(last, sizeof last);
        if (a->bias) { /* a graph drift adds to torch's: its refusal at run time is a fallback too */
            snprintf(why, why_size, "cuDNN SDPA execute with a bias: %s %.160s", cudnnGetErrorString(s), last);
            return DRIFT_E_UNSUPPORTED;
        }
        return drift_err_set(err, DRIFT_E_IO, ctx->name, "cuDNN SDPA execute: %s %s", cudnnGetErrorString(s), last);
    }
    return DRIFT_OK;
}

#endif
