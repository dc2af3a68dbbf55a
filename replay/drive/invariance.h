/* drift invariance (issue 20, docs/invariance.md): does one recorded
 * sample's forward change with the batch it is computed in, and which op
 * makes it change.
 *
 * The sample (row `sample` of the recorded batch at step `step`) is replayed
 * alone (batch 1: the reference) and inside each batch configuration: batch
 * sizes B with the sample at position 0 and at position B-1, the other rows
 * padded with the other recorded samples of the step (cycled) or, when the
 * step recorded one sample, with seeded copies (latents N(0,1) from a seed,
 * the sample's cond and timestep); and, with cfg_joined, the CFG pair as one
 * batch of 2 (conditional row 0, unconditional row 1 with zero text
 * embeddings) against each branch alone. Every node of the forward is
 * compared: the sample's rows of each value (the block of dim 0 that is the
 * sample's; values without a batch dim whole) against the batch-1 replay,
 * bit for bit (a 64-bit hash per node; the recorded sites' values in full).
 * Per configuration: bitwise or not, the first divergent node (label, op
 * kind, shapes here and at batch 1), the first divergent recorded site with
 * its element count and ULPs, the output's metrics raw and in units of the
 * noise floor (the batch-1 replay with one latent moved by one ULP of the
 * forward dtype), and which configurations give the identical output (a
 * micro-batch split of a batch of N into micro-batches of k is the pair
 * (k, N)). Captured graphs are built for one batch size: family models only. */
#ifndef DRIFT_REPLAY_DRIVE_INVARIANCE_H
#define DRIFT_REPLAY_DRIVE_INVARIANCE_H

#include <stdint.h>

#include "formats/batch_note.h"
#include "formats/err.h"
#include "formats/params.h"
#include "formats/plan.h"
#include "kernels/backend.h"
#include "replay/analysis/report.h" /* drift_progress_fn */
#include "replay/ir/assign.h"

#define DRIFT_INV_MAX_BATCHES 16
#define DRIFT_INV_MAX_BATCH 1024

typedef struct drift_invariance_opts {
    const char *trace;
    const drift_plan *plan;      /* borrowed; NULL: the trace's own plan (root attribute 'plan') */
    drift_side side;             /* trainer or rollout */
    int side_from_trace;         /* 1: the trace's own side (root attribute 'side': rollout -> rollout), not side */
    int64_t step;                /* -1: the first committed step */
    int sample;                  /* row of the recorded batch (default 0) */
    int batches[DRIFT_INV_MAX_BATCHES]; /* batch sizes, 1..DRIFT_INV_MAX_BATCH; 1 is the reference */
    int n_batches;
    int cfg_joined;              /* 1: add the CFG pair as one batch of 2 */
    uint64_t seed;               /* seeded pad rows */
    const char *batch_input;     /* a captured graph without latents: the input that holds the sample
                                    (seeded pad rows, the noise floor's nudge); NULL: the first per-sample
                                    input with fractional values */
    drift_progress_fn progress;  /* NULL: none; "the reference (batch 1)", then "configurations" i of n */
    void *progress_user;
} drift_invariance_opts;

/* Defaults: step -1, sample 0, batches 1,2,4,8, cfg split, seed 1, the trace's side. */
void drift_invariance_opts_init(drift_invariance_opts *o);

/* One node of the forward as a configuration ran it. */
typedef struct drift_inv_op {
    int node;                    /* value id in the assigned graph, -1 if none */
    char label[DRIFT_MAX_FQN];   /* the node's label, else its site, else "" */
    char kind[24];               /* op name ("linear", ...) */
    char dtype[8];               /* its output dtype */
    int n_in;
    int in_ndim[3];
    int64_t in_shape[3][DRIFT_MAX_DIMS];
    int out_ndim;
    int64_t out_shape[DRIFT_MAX_DIMS];
    char kernel[128];            /* LINEAR, BMM, ATTENTION: what the backend chose for it (drift_backend_last_choice:
                                    the GEMM algorithm; the attention kernel and its splits), "" none */
    char input_from[24];         /* the op that computed its first input, through views and casts ("" a leaf) */
} drift_inv_op;

typedef enum drift_inv_kind {
    DRIFT_INV_BATCH = 0,         /* the sample inside a batch of B */
    DRIFT_INV_CFG_COND = 1,      /* the conditional branch of the CFG pair run joined */
    DRIFT_INV_CFG_UNCOND = 2     /* the unconditional branch of the CFG pair run joined */
} drift_inv_kind;

typedef struct drift_inv_config {
    drift_inv_kind kind;
    int batch, position;
    char pad[16];                /* "recorded", "seeded", "uncond", "cond" */
    char name[64];               /* "batch 4, position 3" */
    int bitwise;                 /* every compared node equal */
    int64_t nodes_compared, nodes_diff;
    drift_inv_op op, op_ref;     /* the first divergent node here and at batch 1 (op.node -1: none) */
    char first_site[DRIFT_MAX_FQN]; /* the first divergent recorded site ("" none) */
    int64_t site_n_diff, site_numel;
    uint64_t site_max_ulp;
    char site_dtype[8];
    int64_t out_n_diff, out_numel;
    double out_mean_abs, out_max_abs;
    double out_floor_units;      /* out_mean_abs / floor_mean_abs */
    int same_as;                 /* index of the first earlier configuration with a bitwise-equal output, -1 */
    double seconds;              /* this configuration's forward with its comparisons */
} drift_inv_config;

typedef struct drift_invariance_report {
    char model[1024];            /* the reference's spec (batch 1) */
    char backend[64];
    char kernels[8];             /* the CUDA kernel profile ("exact", "torch"); "" off CUDA */
    char kernels_why[192];       /* why: filled by the caller that chose it (the cli), "" otherwise */
    char side[16];
    int64_t step;
    int sample;
    int recorded_batch;
    char batch_input[DRIFT_MAX_FQN]; /* the input that holds the sample: "latents", or a captured graph's own
                                        (without latents: --batch-input's, else the first per-sample float one) */
    int has_composition;         /* the step recorded its batch composition */
    drift_batch_composition composition;
    double floor_mean_abs, floor_max_abs;
    double ref_seconds;          /* the batch-1 forward with its comparisons */
    int64_t nodes;               /* values of the forward observed (every node and the recorded input sites) */
    drift_inv_config *cfg;       /* owned */
    int n_cfg;
    int invariant;               /* every configuration bitwise */
    char summary[2048];          /* the line a user acts on */
} drift_invariance_report;

/* Runs the check on be (borrowed; a cpu, cuda or test backend). rep is
 * filled (free it with drift_invariance_report_free, also after an error).
 * Bad input (trace, options) is DRIFT_E_INPUT/DRIFT_E_USAGE naming the file
 * and field; a captured-graph trace is DRIFT_E_UNSUPPORTED. */
int drift_invariance_run(const drift_invariance_opts *o, const drift_backend *be, drift_invariance_report *rep,
                         drift_err *err);
void drift_invariance_report_free(drift_invariance_report *rep);

#endif
