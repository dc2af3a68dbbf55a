/* Internal to replay/drive: the pieces of drift invariance (invariance.h).
 *   invariance_inputs.c  the recorded step (boundary inputs, batch composition)
 *                        and the batches built from it (layout, pad rows);
 *   invariance_nodes.c   the forward at batch B with every node observed, and
 *                        the node-by-node comparison against batch 1;
 *   invariance.c         the configurations, the noise floor, the summary. */
#ifndef DRIFT_REPLAY_DRIVE_INVARIANCE_INTERNAL_H
#define DRIFT_REPLAY_DRIVE_INVARIANCE_INTERNAL_H

#include <stdint.h>

#include "formats/trace.h"
#include "replay/drive/invariance.h"
#include "replay/exec/forward.h"

/* A row of a batch: a recorded sample (>= 0), a seeded copy, or the
 * sample's unconditional twin (zero text embeddings). */
enum { DRIFT_INV_ROW_SEEDED = -1, DRIFT_INV_ROW_UNCOND = -2 };

/* The recorded inputs of one step: slots 0..DRIFT_INPUT_COUNT-1 the boundary
 * inputs (latents, cond, timestep), then a captured graph's other per-sample
 * inputs (masks, pooled projections, audio: its "input:NAME" buffers whose
 * dim 0 is the batch). */
#define DRIFT_INV_MAX_INPUTS (DRIFT_INPUT_COUNT + 16)
typedef struct drift_inv_recorded {
    int n;                             /* slots in use (>= DRIFT_INPUT_COUNT) */
    int present[DRIFT_INV_MAX_INPUTS]; /* 0: a boundary input the captured graph does not take */
    char name[DRIFT_INV_MAX_INPUTS][DRIFT_MAX_FQN + 8]; /* the forward's input name ("latents", "input:mask") */
    drift_dtype dt[DRIFT_INV_MAX_INPUTS];
    int ndim[DRIFT_INV_MAX_INPUTS];
    int64_t shape[DRIFT_INV_MAX_INPUTS][DRIFT_MAX_DIMS];
    int64_t row[DRIFT_INV_MAX_INPUTS]; /* elements per sample */
    float *v[DRIFT_INV_MAX_INPUTS];    /* owned: the recorded batch */
    int whole[DRIFT_INV_MAX_INPUTS];   /* 1: its dim 0 is not the batch (the re-batching found): passed as recorded */
    int bdim[DRIFT_INV_MAX_INPUTS];    /* the dim that holds the batch (0 but for an input whose dim 0 only has
                                          the batch's size: [layers, B, L, D]) */
    int batch;
} drift_inv_recorded;

/* Marks whole the per-sample inputs of r (past the boundary three) that m1, the captured graph
 * re-batched to 1, keeps at their recorded size: a dim 0 equal to the recorded batch by
 * coincidence (2 heads at batch 2), and the timestep where it is such a table (MiniMax-H3's noise
 * levels); sets bdim where m1 re-batched another dim than 0. An error (path names the trace)
 * when the latents' stand-in is one of them. */
int drift_inv_keep_fixed_inputs(drift_inv_recorded *r, const drift_model *m1, const char *path, drift_err *err);

/* Reads step's stored inputs (input:*:pre_cast) of rd into *out (caller
 * frees with drift_inv_recorded_free, also on error); path names rd in errors.
 * m (loaded from rd) says which inputs a captured graph takes. A captured graph without a
 * latents input gets one of its per-sample inputs in slot 0 instead (its buffer's name):
 * batch_input ("NAME" or "input:NAME"), NULL: the first with fractional values. */
int drift_inv_read_inputs(drift_trace_reader *rd, const char *path, int64_t step, const drift_model *m,
                          const char *batch_input, drift_inv_recorded *out, drift_err *err);
void drift_inv_recorded_free(drift_inv_recorded *r);
/* Inputs of a batch of B whose position p holds rows[p] (a recorded row,
 * DRIFT_INV_ROW_SEEDED with pad index pad_k[p] and seed, or
 * DRIFT_INV_ROW_UNCOND of `sample`); nudge: one latent of position 0 one ULP
 * of nudge_dt up (the noise floor). Caller owns *out. */
int drift_inv_make_inputs(const drift_inv_recorded *rc_, int sample, const int *rows, const int *pad_k, int B,
                          uint64_t seed, int nudge, drift_dtype nudge_dt, drift_hostset **out, drift_err *err);
/* The committed step want (-1: the first) into *step; DRIFT_E_USAGE naming --step otherwise. */
int drift_inv_pick_step(drift_trace_reader *rd, const char *path, int64_t want, int64_t *step, drift_err *err);
/* rep->composition from step's first batch-composition note (rep->has_composition). */
int drift_inv_read_composition(drift_trace_reader *rd, int64_t step, drift_invariance_report *rep, drift_err *err);
/* rows/pad_k (c->batch entries) of configuration c for sample of a recorded batch of rec_batch. */
void drift_inv_layout(const drift_inv_config *c, int sample, int rec_batch, int *rows, int *pad_k);

/* A forward at batch B whose every node is a site. */
typedef struct drift_inv_fwd {
    drift_model *m;              /* owned; params and buffers borrowed from the trace's model */
    drift_forward *f;            /* owned; every node tagged as a site */
    int *ids;                    /* owned: site value ids in execution order */
    int n_ids;
    int *ref_id;                 /* owned: per value, the reference's same value, or -1 (drift_inv_fwd_match) */
} drift_inv_fwd;

/* Builds base's family at batch B (params and buffers borrowed from base,
 * which must outlive it) under plan/side. Free with drift_inv_fwd_free (also on error). */
int drift_inv_fwd_make(drift_model *base, int B, const drift_plan *plan, drift_side side,
                       const drift_dtype handed[DRIFT_INPUT_COUNT], drift_inv_fwd *out, drift_err *err);
void drift_inv_fwd_free(drift_inv_fwd *b);
/* cur->ref_id from ref (invariance_match.c): the same value of the reference
 * forward, matched by graph node, op and rank (a captured graph's program may
 * differ by a view between batches); -1 where there is none. pos: the sample's position
 * (a loop over the samples unrolled again: its iteration pos is the sample's). */
int drift_inv_fwd_match(drift_inv_fwd *cur, const drift_inv_fwd *ref, int pos, drift_err *err);

/* The reference's value of one node. */
typedef struct drift_inv_ref {
    uint64_t hash;
    int64_t numel, dim0;
    int ndim;
    int64_t shape[DRIFT_MAX_DIMS]; /* the value's shape at batch 1 */
    int seen;
    char kernel[128];            /* LINEAR, BMM, ATTENTION: drift_backend_last_choice right after it ran */
} drift_inv_ref;

/* The state of one observed run (the site callback's user data). */
typedef struct drift_inv_run {
    const drift_inv_fwd *bf, *ref_bf;
    int B, pos, storing;         /* storing: the reference run fills ref[] and sites */
    drift_inv_ref *ref;               /* by value id */
    drift_site_cache *sites;     /* the reference's recorded sites, full */
    int cursor;
    float *buf;
    size_t cap;
    drift_inv_config *c;
} drift_inv_run;

/* The site callback: stores (storing) or compares the sample's block of each value. */
int drift_inv_on_node(const char *site, const drift_tensor *t, void *user, drift_err *err);
/* Runs bf on in (st NULL: nothing observed); the row pos of the output into
 * *row_out (caller frees), its length into *out_row. */
int drift_inv_run_one(const drift_inv_fwd *bf, const drift_backend *be, const drift_hostset *in, drift_inv_run *st,
                      int pos, float **row_out, int64_t *out_row, drift_err *err);

#endif
