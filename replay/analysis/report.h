/* What every replay driver shares and reports, below the drivers
 * (replay/drive) so that analysis (drift compare), search (bisect) and the
 * drivers all read one definition: the options of drift replay, the report
 * it fills, the names of the sites a two-sided recording holds beside the
 * graph's own, and the progress callback. */
#ifndef DRIFT_REPLAY_ANALYSIS_REPORT_H
#define DRIFT_REPLAY_ANALYSIS_REPORT_H

#include <stdint.h>

#include "formats/err.h"
#include "formats/plan.h"
#include "formats/checkpoint.h" /* drift_load_report */
#include "formats/libraries.h"
#include "replay/analysis/metrics.h"
#include "replay/analysis/sitecmp.h"
#include "replay/ir/assign.h" /* drift_side */

#define DRIFT_SITE_ROLLOUT_OUTPUT "rollout:model_output"
#define DRIFT_SITE_LOGPROB_OLD "logprob:old"
#define DRIFT_SITE_LOGPROB_NEW "logprob:new"
#define DRIFT_SITE_SDE_XNEXT "sde:x_next"
#define DRIFT_SITE_SDE_PARAMS "sde:params"
#define DRIFT_SITE_NOISE_PRED "output:noise_pred"

/* Long work reports progress through this (may be NULL where accepted). */
typedef void (*drift_progress_fn)(const char *what, long done, long total, void *user);

typedef enum drift_ref_kind {
    DRIFT_REF_TRAINER = 0,
    DRIFT_REF_ROLLOUT = 1,
    DRIFT_REF_ORACLE = 2,
    DRIFT_REF_TRACE = 3
} drift_ref_kind;

typedef struct drift_replay_opts {
    const char *trace;           /* the trace to replay */
    const drift_plan *plan;
    drift_side side;             /* trainer (default) or rollout: which forward dtype the plan gives */
    drift_ref_kind ref;
    const char *ref_path;        /* ROLLOUT (NULL: sibling) or TRACE */
    int64_t step_first, step_last; /* inclusive range of trace steps; -1: unbounded */
    const char *backend;         /* "cpu" (default), "cuda[:N]" */
    const char *out_path;        /* NULL, or a result trace (side replay: metrics + output) */
    int sites;                   /* 1: compare every site (default); 0: only the output */
    int nudge_latents;           /* 1: one latent element moved by one ULP of the forward dtype before the
                                    forward (the noise floor's replay, DESIGN.md s7b); 0 (default): as recorded */
    /* Several devices or ranks (replay/drive/multi.h): the report is the same bit
     * for bit as the one-device replay's. */
    const char *devices;         /* "cuda:0,cuda:1": one worker thread per device; NULL: backend */
    int fsdp;                    /* shard the fp32 masters over the workers, cast, all-gather (replay/dist/fsdp.h) */
    int mpi;                     /* this process is one rank of MPI_COMM_WORLD (MPI initialised); backend
                                    "cuda" picks cuda:LOCAL_RANK */
    int oracle_on_host;          /* --ref oracle with a cuda backend: run the fp64 oracle on the host
                                    ("ref") instead of the replay's GPU ("ref-cuda:N"); the cli sets it
                                    from DRIFT_ORACLE_DEVICE=cpu */
    const char *kernels;         /* "exact" or "torch": the CUDA kernel profile, appended to a cuda backend
                                    spec that names none (drift_backend_spec_with_kernels); NULL: the
                                    spec's own (default exact). The cli picks it (--kernels). */
    const char *weights_root;    /* NULL, or where the checkpoint of a trace's /params_ref lives now
                                    (overrides the root recorded in the trace) */
    drift_progress_fn progress;
    void *progress_user;
} drift_replay_opts;

void drift_replay_opts_init(drift_replay_opts *o);

typedef struct drift_replay_report {
    char model[1024];
    char ref_desc[4200];         /* "rollout trace PATH", "fp64 oracle", ... */
    drift_sitecmp cmp;           /* per-site aggregates, execution order */
    int64_t n_steps;
    int64_t *steps;              /* owned: the trace steps replayed */
    char **first_divergent;      /* owned: per replayed step, the first divergent site or NULL */
    int has_logprob;
    drift_logprob_metrics lp_vs_old;   /* replayed log-prob vs recorded logprob:old */
    drift_logprob_metrics lp_vs_new;   /* replayed log-prob vs recorded logprob:new */
    int has_oracle;
    double oracle_rmse_replay, oracle_rmse_trainer, oracle_rmse_rollout; /* output vs oracle; NaN if n/a */
    double seconds;
    /* how it ran */
    int workers;                 /* devices or ranks (1: one-device replay) */
    char comm[16];               /* "nccl", "mpi", "local" (host memory), "" for one device */
    int rank;                    /* MPI: this process's rank (only rank 0 prints) */
    double setup_seconds, steps_seconds; /* loading and preparing / replaying the steps */
    drift_load_report load;      /* how the parameters were read (part of setup) */
    double warm_seconds;         /* casting per the plan and uploading the parameters (part of setup) */
    int mem_planned;             /* 1: the memory plan ran (one-device replays; replay/exec/memplan.h) */
    int mem_on_gpu;              /* its backend is a CUDA device */
    int64_t mem_gpu_planned, mem_host_planned; /* its estimated peaks, bytes */
    int64_t gpu_peak_used;       /* device memory in use at its highest sample (after setup, after each
                                    step; cudaMemGetInfo: every process on the device), -1 if not measured */
    int64_t fsdp_params, fsdp_collectives, fsdp_shard_bytes, fsdp_gathered_bytes; /* --fsdp, worker 0 */
    char kernels[8];             /* the kernel profile the replay's backend ran ("exact", "torch"); "" off CUDA */
    char kernels_why[192];       /* why that profile: filled by the caller that chose it (the cli), "" otherwise */
    int64_t kernel_fallbacks;    /* ops the torch profile ran on drift's exact kernels (not expected bitwise with torch) */
    char kernel_fallback_ops[1024]; /* their op kinds, each with its first reason ("attention (why); reduce (why)") */
    char kernel_fallback_why[256]; /* the last reason given, "" when none */
    int has_libs_rec;            /* the trace has /libraries */
    drift_libraries libs_rec;    /* the recording's GPU and library identity (has_libs_rec) */
    int has_libs_here;           /* the replay ran on a CUDA backend */
    drift_libraries libs_here;   /* its GPU and library identity, loaded library paths included */
    char *warnings;              /* owned, NULL or lines ending in '\n' (compare: mismatches allowed, unpaired sites) */
} drift_replay_report;

/* Frees what rep owns and zeroes it (rep may be NULL). */
void drift_replay_report_free(drift_replay_report *rep);
/* Parses "A:B", "A:", ":B", "A" into an inclusive range (-1 unbounded). */
int drift_replay_parse_steps(const char *s, int64_t *first, int64_t *last, drift_err *err);

#endif
