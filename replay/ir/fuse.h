/* Cast folding for the executor (replay/exec/exec.c): a per-run plan over an
 * assigned graph (the graph itself stays const) that removes CAST kernels
 * without changing a single bit of any materialised value.
 *
 * Two rewrites, both exact because every backend's elementwise kernels
 * (ADD, SUB, MUL, AFFINE, SILU, GELU_TANH; verified in kernels/cpu/cpu_ops.c,
 * kernels/ref/ref_backend.c, kernels/cuda/elementwise.cu) read inputs of any
 * float dtype widened exactly to fp32 and round once to op->out:
 *
 *  (a) SKIP: an exact widening CAST (bf16 -> fp32, fp16 -> fp32) whose live
 *      consumers all read any float dtype exactly and compute in fp32 is not
 *      run: the executor aliases the cast to its (narrow) input and the
 *      consumers read that. Consumers allowed: the elementwise ops above,
 *      CAST (rounding a widened value = rounding the narrow one), LAYER_NORM
 *      (all three backends widen x, weight and bias to fp32 and compute in
 *      fp32: cpu layer_norm_rows, ref norm_rows, cuda k_layer_norm via
 *      dcu_ld), ROPE (cpu rope_rows, ref rope_rows, cuda k_rope via dcu_ld).
 *      Not allowed: RMS_NORM (rounds an intermediate to x's dtype: the input
 *      dtype is part of its semantics), LINEAR and ATTENTION (operand dtypes
 *      are GEMM types), movement ops (they keep their input's dtype).
 *  (b) FOLD: an elementwise op with op->out fp32 whose only live consumer is
 *      a CAST to bf16/fp16 runs with out = that dtype (it computes the same
 *      fp32 value and rounds it once, as the cast would); the cast becomes
 *      an alias of the op's output.
 *
 * Never: a rewrite whose skipped/retyped value is a recorded site while
 * sites are observed (a site is materialised in its own dtype), or the
 * graph output; a value kept by a device cache (fixed), except a SKIP whose
 * cast and consumers are all fixed (the cache then keeps the consumers, and
 * the skipped cast is never materialised); FOLD never retypes a fixed value
 * (its cached dtype must not depend on whether this run observes sites). */
#ifndef DRIFT_REPLAY_FUSE_H
#define DRIFT_REPLAY_FUSE_H

#include <stdint.h>

#include "formats/dtype.h"
#include "formats/err.h"
#include "replay/ir/graph.h"

enum {
    DRIFT_FUSE_NONE = 0,
    DRIFT_FUSE_SKIP_CAST = 1, /* (a): this CAST aliases its narrower input */
    DRIFT_FUSE_FOLD_CAST = 2  /* (b): this CAST aliases its input, which already has the cast's dtype */
};

typedef struct drift_fuse_opts {
    const unsigned char *live;  /* per value id: runs in this run (NULL: every value) */
    const unsigned char *fixed; /* per value id: kept by a device cache (NULL: no cache) */
    int observe_sites;          /* sites are reported: their values must be materialised as assigned */
} drift_fuse_opts;

typedef struct drift_fuse_plan {
    int n;                 /* values in the graph */
    unsigned char *action; /* owned: per value id, DRIFT_FUSE_* */
    drift_dtype *out;      /* owned: per value id, the dtype the value is stored in (nodes: the
                              dtype the node runs with; a FOLD's producer gets the cast's dtype;
                              a SKIP cast has its input's) */
    int skipped;           /* casts marked SKIP */
    int folded;            /* casts marked FOLD (= producers retyped) */
} drift_fuse_plan;

/* 1 if widening a value of dtype from to dtype to is exact and changes the
 * storage dtype (bf16/fp16 -> fp32). */
int drift_fuse_exact_widening(drift_dtype from, drift_dtype to);

/* Plans the rewrites for one run of the assigned graph g. o may be NULL
 * (all values live, no cache, sites not observed). p is zeroed first; free
 * it with drift_fuse_plan_free (also after a failure). */
int drift_fuse_plan_build(const drift_graph *g, const drift_fuse_opts *o, drift_fuse_plan *p, drift_err *err);
/* Frees what p owns (NULL allowed) and zeroes it. */
void drift_fuse_plan_free(drift_fuse_plan *p);

#endif
