/* torch's CUDA topk order (aten/src/ATen/native/cuda/TensorTopK.cu and Sort.cu,
 * torch 2.11; facts, drift's own code): which k of a slice and in which order
 * torch.topk returns them on a GPU, ties included. MoE routers meet ties
 * (equal gate scores), and an index order other than torch's routes a token
 * to another expert. */
#ifndef DRIFT_KERNELS_TOPK_ORDER_H
#define DRIFT_KERNELS_TOPK_ORDER_H

#include <stdint.h>

/* Order of the k largest (largest != 0; else smallest) of x[0], x[step], ...,
 * x[(n - 1) step] into idx[0..k): the radix select's gather writes the values
 * strictly beyond the k-th in index order, then values equal to it in index
 * order until k are taken; sorted != 0 and 1 < k <= 32: then torch's
 * SmallBitonicSort network over 32 slots (invalid slots last; equal keys are
 * exchanged wherever the network compares them); sorted and k > 32: torch's
 * stable sorts (ties keep that gather order). NaN counts as the largest value.
 * sort_perm: n scratch indices holding x's stable descending/ascending order
 * (the caller's argsort). Returns 0. Owned by the caller: every pointer. */
int drift_topk_torch_order(const double *x, int64_t step, int64_t n, int64_t k, int largest, int sorted,
                           const int64_t *sort_perm, int64_t *idx);

#endif
