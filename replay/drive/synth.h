/* Synthetic frozen-weight two-sided runs (drift record --synthetic): one
 * denoising trajectory of a family model with seeded weights; at each
 * denoising step the rollout side's forward (its plan) picks the SDE sample
 * and log_prob_old, and the trainer side's forward (its plan) recomputes
 * log_prob_new on the same sample, as a PPO trainer does. Both sides are
 * recorded site by site into their own trace; the trainer trace also holds
 * what the rollout handed over (rollout:model_output, logprob:old, the SDE
 * sample), the fp32 masters, the dtype table, the RoPE buffers, the graph,
 * and per-site trainer-vs-rollout metrics in /metrics, as a live recorder in
 * a frozen-weight debug run would append them.
 *
 * Trace layout (see docs/format.md for the file format itself):
 *   step s = denoising index s (microbatch 0, call 0);
 *   sites: every recorded site of the graph (input:*:pre_cast/post_cast,
 *   module outputs, output:noise_pred), plus "rollout:model_output",
 *   "logprob:old", "logprob:new" [B] fp32, "sde:x_next" (latents shape,
 *   fp32) and "sde:params" [4] fp32 = (sigma, sigma_next, sigma_max, eta). */
#ifndef DRIFT_REPLAY_SYNTH_H
#define DRIFT_REPLAY_SYNTH_H

#include <stdint.h>

#include "formats/err.h"
#include "formats/plan.h"
#include "replay/analysis/report.h" /* drift_progress_fn, site names */

typedef struct drift_synth_opts {
    const char *model;           /* family spec, e.g. "tiny-dit" */
    uint64_t seed;               /* weights, inputs and SDE noise */
    const char *weights;         /* NULL: seeded weights; else a .safetensors file with diffusers names */
    const char *params_ref;      /* NULL, or a checkpoint (directory with a sharded index, or a .safetensors):
                                    the weights come from it and both traces store /params_ref, a reference
                                    with every tensor's hash, instead of the values */
    int steps;                   /* denoising steps recorded */
    double shift;                /* schedule time shift (3.0) */
    float eta;                   /* SDE noise level (0.7) */
    const drift_plan *trainer_plan;
    const drift_plan *rollout_plan;
    const char *trainer_path;    /* trainer-side trace */
    const char *rollout_path;    /* rollout-side trace (NULL: drift_synth_rollout_path) */
    const char *backend;         /* "cpu" (default) or "cuda[:N]" */
    int32_t rank, world_size;    /* root attributes of both traces (0, 1: a single-process run) */
    const char *sites;           /* NULL: record every graph site; else comma-separated globs of the graph
                                    sites to record (input:* and output:noise_pred always are); a glob
                                    that matches no site of the graph is an error (DRIFT_E_USAGE) */
    /* Called once, before the weights are made and anything is written, with
     * the estimated bytes of tensor data each trace will hold (the fp32
     * masters plus site tensors x steps). May be NULL. */
    void (*on_size)(int64_t trainer_bytes, int64_t rollout_bytes, void *user);
    void *on_size_user;
    drift_progress_fn progress;
    void *progress_user;
    int step_delay_ms;           /* sleep after each committed step (tests of live readers); 0 = none */
} drift_synth_opts;

/* Defaults: tiny-dit, seed 0, 4 steps, shift 3, eta 0.7, cpu. */
void drift_synth_opts_init(drift_synth_opts *o);
/* The sibling path of the rollout trace for a trainer trace path:
 * "run.h5" -> "run.rollout.h5". */
void drift_synth_rollout_path(const char *trainer_path, char *buf, unsigned long bufsz);
/* Records the run. */
int drift_synth_record(const drift_synth_opts *o, drift_err *err);

#endif
