/* Internal to kernels/cuda/torch: a small builder over cuDNN's C backend API
 * (descriptors, tensors, operations, operation graph, heuristics, plan), the
 * way the torch profile's cuDNN ops (sdpa_cudnn.c, conv_cudnn.c) build the
 * graphs torch builds through cudnn-frontend. Only with DRIFT_HAVE_CUDNN.
 *
 * A dct_cg owns every descriptor it created (dct_cg_release destroys them);
 * the first failing call records its reason in why[] and makes every later
 * call a no-op, so a graph is built without checking each step. */
#ifndef DRIFT_KERNELS_CUDA_TORCH_CUDNN_GRAPH_H
#define DRIFT_KERNELS_CUDA_TORCH_CUDNN_GRAPH_H

#ifdef DRIFT_HAVE_CUDNN

#include <stddef.h>
#include <stdint.h>

#include <cudnn.h>

#include "kernels/cuda/torch/torch_profile.h"

#define DCT_CG_MAX 48

/* The backend's cuDNN handle (made on first use, bound to ctx->stream): 0,
 * or -1 with the reason in why. */
int dct_cudnn_handle(dcu_ctx *ctx, cudnnHandle_t *h, char *why, size_t why_size);

typedef struct dct_cg {
    cudnnBackendDescriptor_t desc[DCT_CG_MAX];
    int ndesc;
    cudnnStatus_t st;        /* first failure (CUDNN_STATUS_SUCCESS: none) */
    char why[256];
    cudnnBackendDescriptor_t plan; /* after dct_cg_plan */
    int64_t workspace;       /* bytes the plan needs */
    int skip;                /* test variant: skip this many finalizable configs first */
    int rank;                /* after dct_cg_plan: the plan's position among the heuristics' configs */
} dct_cg;

void dct_cg_init(dct_cg *g);
void dct_cg_release(dct_cg *g);
/* Records a failure (the first one wins); returns -1. */
int dct_cg_fail(dct_cg *g, const char *what, cudnnStatus_t s);
cudnnBackendDescriptor_t dct_cg_create(dct_cg *g, cudnnBackendDescriptorType_t t, const char *what);
void dct_cg_set(dct_cg *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                int64_t n, const void *v, const char *what);
void dct_cg_fin(dct_cg *g, cudnnBackendDescriptor_t d, const char *what);
/* An nd-dim tensor (16-byte alignment), optionally virtual or by value. */
cudnnBackendDescriptor_t dct_cg_tensor(dct_cg *g, int64_t uid, cudnnDataType_t dt, int nd, const int64_t *dims,
                                       const int64_t *strides, int is_virtual, int by_value);
/* The operation graph of ops, heuristics in `mode`, and the plan of the
 * first engine config that finalizes (cudnn-frontend's HEURISTICS_CHOICE).
 * 0 on success (g->plan, g->workspace set). */
int dct_cg_plan(dct_cg *g, cudnnHandle_t h, cudnnBackendDescriptor_t *ops, int nops, cudnnBackendHeurMode_t mode);
/* Runs g->plan with the variant pack (n uids/pointers, workspace ws). */
cudnnStatus_t dct_cg_execute(cudnnHandle_t h, const dct_cg *g, int n, const int64_t *uids, void *const *ptrs, void *ws);

#endif
#endif
