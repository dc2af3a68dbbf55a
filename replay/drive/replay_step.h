/* Internal to replay/: drift replay split into the pieces that the
 * one-device driver (replay_trace.c) and the multi-device and multi-rank
 * drivers (multi.c) share, so that every driver produces the same report
 * bit for bit:
 *
 *   drift_replay_shared        what every worker reads: the options, the
 *                              model (fp32 masters, buffers pre-built so it
 *                              is read-only from then on), the selected
 *                              steps, the site list in execution order, the
 *                              output's shape. Built once.
 *   drift_replay_worker        one thread's or rank's state: its own trace
 *                              readers, backend, prepared forward (and
 *                              oracle), optional device cache. Never shared
 *                              between threads.
 *   drift_replay_step_partial  one step's results as mergeable partial sums:
 *                              per site (drift_replay_site_partial) the
 *                              step's drift_site_acc, the oracle RMSEs, the
 *                              replayed log-probs and recorded ones, the
 *                              output.
 *   drift_replay_merger        folds steps into a drift_replay_report (and
 *                              the -o trace) strictly in step order:
 *                              per-site aggregates, first divergent sites and
 *                              log-prob sums come out exactly as one
 *                              sequential pass makes them. */
#ifndef DRIFT_REPLAY_REPLAY_STEP_H
#define DRIFT_REPLAY_REPLAY_STEP_H

#include <stdint.h>

#include "formats/trace.h"
#include "replay/exec/forward.h"
#include "replay/drive/replay_trace.h"

#define DRIFT_REPLAY_MAX_BATCH 64

typedef struct drift_replay_shared {
    const drift_replay_opts *o;  /* borrowed */
    drift_model *m;              /* owned */
    drift_dtype handed[DRIFT_INPUT_COUNT];
    int64_t *sel;                /* owned: the selected trace steps, in order */
    int64_t n_sel;
    char **sites;                /* owned: recorded sites of the forward, execution order */
    int n_sites;
    drift_dtype out_dtype;       /* the forward's output */
    int out_ndim;
    int64_t out_shape[DRIFT_MAX_DIMS];
    int64_t out_numel;
    int64_t batch;
    char ref_path[4096];         /* ROLLOUT / TRACE: the resolved reference trace */
    const char *gpu_as;         /* the cpu's GEMM-form table for the recording GPU (kernels/gemm_forms.h), or NULL */
    int ref_self_rollout;        /* ROLLOUT without a sibling file: the output against the trace's own
                                    rollout:model_output (what the rollout handed over) */
    drift_trace_step_graph *sel_g; /* owned: the graph each selected step uses (docs/format.md 9.1) */
    drift_model **gm;            /* owned: per-step graph k's model at gm[k - 1], loaded when a selected
                                    step uses it (NULL otherwise); m is /graph's */
    int64_t n_gm;
} drift_replay_shared;

/* Opens the trace, builds the model and everything shared; fills rep's
 * model, ref_desc, guidance scale and allocates its per-step arrays (for
 * n_sel steps). Caller frees s with drift_replay_shared_free (also on error). */
int drift_replay_shared_open(const drift_replay_opts *o, drift_replay_shared *s, drift_replay_report *rep, drift_err *err);
void drift_replay_shared_free(drift_replay_shared *s);

typedef struct drift_replay_worker drift_replay_worker;

/* A worker on backend `backend` ("cpu", "cuda:1", ...). use_cache: keep
 * parameters and their casts resident between steps (drift_exec_cache).
 * Caller owns *out (drift_replay_worker_free). */
int drift_replay_worker_open(const drift_replay_shared *s, const char *backend, int use_cache, drift_replay_worker **out,
                         drift_err *err);
void drift_replay_worker_free(drift_replay_worker *w);
/* Borrowed views of the worker's backend, its prepared forward and its
 * cache (NULL without use_cache): the FSDP gather pre-populates the cache. */
const drift_backend *drift_replay_worker_backend(const drift_replay_worker *w);
const drift_forward *drift_replay_worker_forward(const drift_replay_worker *w);
drift_exec_cache *drift_replay_worker_cache(drift_replay_worker *w);
/* rep's kernels and libs_here from w's backend (the profile it was created
 * with, the GPU and library identity; nothing off CUDA). */
void drift_replay_worker_identity(const drift_replay_worker *w, drift_replay_report *rep);
/* rep's kernel_fallback_* from w's backend: what the torch profile handed to the exact kernels so
 * far (kernels/backend.h drift_backend_kernel_fallbacks); call after the steps ran. */
void drift_replay_worker_fallbacks(const drift_replay_worker *w, drift_replay_report *rep);
/* Setup, before the first step: fills the worker's cache (no-op without
 * one) with the parameters and their casts, as the first step would, and
 * waits for the backend. After an FSDP gather, which puts the gathered
 * parameters there first. Parameters by reference that shared_open left
 * unread (one-device replays: s->m->pending_ref) are read here: overlapped
 * with the cast and upload into the cache (replay/exec/params_pipeline.h),
 * or plainly without a cache; s->m->load then says how. */
int drift_replay_worker_warm(const drift_replay_shared *s, drift_replay_worker *w, drift_err *err);

typedef struct drift_replay_site_partial {
    int present;                 /* the reference had this site at this step */
    drift_dtype dtype;
    drift_site_acc acc;          /* this step only */
} drift_replay_site_partial;

typedef struct drift_replay_step_partial {
    int64_t step;
    drift_replay_site_partial *site;         /* owned: n_sites entries */
    int has_orc[3];              /* oracle RMSE of trainer, rollout, replay output */
    double orc[3];
    int has_lp, has_old, has_new;
    int64_t B;
    float lp[DRIFT_REPLAY_MAX_BATCH], lp_old[DRIFT_REPLAY_MAX_BATCH], lp_new[DRIFT_REPLAY_MAX_BATCH];
    float *out;                  /* owned: the replayed output (out_numel) when keep_out, else NULL */
} drift_replay_step_partial;

/* Allocates st's arrays for s (zeroed). Free with drift_replay_step_partial_free. */
int drift_replay_step_partial_init(const drift_replay_shared *s, int keep_out, drift_replay_step_partial *st, drift_err *err);
void drift_replay_step_partial_reset(const drift_replay_shared *s, drift_replay_step_partial *st);
void drift_replay_step_partial_free(drift_replay_step_partial *st);

/* Replays selected step k (0 <= k < n_sel) on w into st (reset first). */
int drift_replay_run_step(const drift_replay_shared *s, drift_replay_worker *w, int64_t k, drift_replay_step_partial *st, drift_err *err);

typedef struct drift_replay_merger {
    const drift_replay_shared *s;
    drift_replay_report *rep;
    drift_trace_writer *out;     /* owned: the -o trace, or NULL */
    int out_site;                /* the output:noise_pred site of out */
    drift_logprob_acc lpo, lpn;
} drift_replay_merger;

/* Creates the -o trace when s->o->out_path is set and write_out != 0 (the
 * other ranks of an MPI replay merge too, without writing). */
int drift_replay_merger_open(drift_replay_merger *mg, const drift_replay_shared *s, drift_replay_report *rep, int write_out,
                         drift_err *err);
/* Folds st (the next step in order) into the report and the -o trace. */
int drift_replay_merger_add(drift_replay_merger *mg, const drift_replay_step_partial *st, drift_err *err);
/* Finishes the log-prob metrics and closes the -o trace. */
int drift_replay_merger_finish(drift_replay_merger *mg, drift_err *err);
/* Closes what is left open (after an error too). */
void drift_replay_merger_free(drift_replay_merger *mg);

#endif
