/* drift bisect (DESIGN.md s7c): the differences between a good and a bad
 * dtype plan (each pattern entry, or each parameter it covers; each
 * input-policy key; each global flag; the RoPE buffer provenance) form the
 * search space. A probe replays the chosen trace steps with the good plan
 * plus a subset of the differences applied and asks whether the output
 * drifts; ddmin (replay/search/ddmin.h) finds a 1-minimal culprit set.
 *
 * Reference and predicate:
 *  - ref good (default): the replay of the good plan on the same backend.
 *    A probe fails when metric(probe output, reference) > threshold; the
 *    default threshold 0 makes it the bitwise question "does this change
 *    the output at all?".
 *  - ref rollout: the recorded rollout output (rollout:model_output). A
 *    probe fails when its metric exceeds the good plan's own value plus the
 *    threshold (absolute, or K times the measured noise floor).
 * The noise floor is the same metric between the good replay and the good
 * replay with one latent element moved by one ULP of the forward dtype
 * (DESIGN.md s7b): the size of difference a single flipped rounding
 * upstream produces in a chaotic bf16 forward. */
#ifndef DRIFT_REPLAY_BISECT_H
#define DRIFT_REPLAY_BISECT_H

#include <stddef.h>
#include <stdint.h>

#include "formats/err.h"
#include "formats/plan.h"
#include "replay/analysis/report.h" /* drift_progress_fn */

typedef enum drift_diff_kind {
    DRIFT_DIFF_FLAG = 0,         /* a global dtype flag */
    DRIFT_DIFF_INPUT = 1,        /* an input_dtype_policy key */
    DRIFT_DIFF_ROPE = 2,         /* buffer provenance of the RoPE table */
    DRIFT_DIFF_PATTERN_ADD = 3,  /* a bad-plan pattern entry the good plan lacks */
    DRIFT_DIFF_PATTERN_DROP = 4, /* a good-plan pattern entry the bad plan lacks */
    DRIFT_DIFF_PARAM = 5         /* one parameter whose forward dtype differs (granularity param) */
} drift_diff_kind;

typedef struct drift_plan_diff {
    drift_diff_kind kind;
    int which;                   /* FLAG: 0 master, 1 reduce, 2 forward, 3 rollout precision;
                                    INPUT: DRIFT_INPUT_*; PATTERN_*: entry index in its plan; PARAM: table row */
    char name[600];              /* display name: "param_dtype_patterns['*.norm2.*'] (fp32)", "blocks.0.norm2.weight" */
    char good_value[64], bad_value[64];
    /* The plan entry the difference came from: the glob of a pattern entry
     * (PATTERN_*), or for PARAM the last pattern of the bad plan matching it
     * (else of the good plan); "" for flags, inputs and RoPE. pattern_plan:
     * "good", "bad" or "" (none). */
    char pattern[520];
    char pattern_plan[8];
} drift_plan_diff;

typedef enum drift_bisect_ref { DRIFT_BISECT_REF_GOOD = 0, DRIFT_BISECT_REF_ROLLOUT = 1 } drift_bisect_ref;

typedef enum drift_bisect_metric {
    DRIFT_BISECT_MEAN_ABS = 0,   /* model_output_mean_abs_diff */
    DRIFT_BISECT_MAX_ABS = 1,    /* model_output_max_abs_diff */
    DRIFT_BISECT_REL_MAX = 2,    /* model_output_rel_max */
    DRIFT_BISECT_RMSE = 3
} drift_bisect_metric;

/* One finished probe, for streaming its verdict (drift_bisect_opts.on_probe). */
typedef struct drift_bisect_probe {
    long seq;                    /* 1, 2, ...: counts probes over the whole run (every --all round) */
    int round;                   /* 1-based search round (one per culprit set with --all) */
    size_t n_applied;            /* differences applied to the good plan in this probe */
    size_t n_diffs;              /* differences still searched this round (fewer after each --all round) */
    int fails;                   /* 1: the output drifts (over the threshold); -1: the probe failed */
    double metric;               /* the probe's metric vs the reference */
    double seconds;
    const char *device;          /* the slot's backend */
    double prefix_skipped;       /* fraction of the probe's forward (graph values, all steps) not run: prefix reuse */
} drift_bisect_probe;

struct drift_bisect_result;

typedef struct drift_bisect_opts {
    const char *trace;
    const drift_plan *good, *bad;
    drift_bisect_ref ref;
    drift_bisect_metric metric;
    int has_threshold;           /* --threshold X given */
    double threshold;
    int has_threshold_floor;     /* --threshold-floor K given */
    double threshold_floor;
    int granularity_param;       /* 1: patterns expanded to parameters */
    int all;                     /* repeat without the culprits found until nothing fails */
    int64_t step_first, step_last; /* -1: unbounded */
    const char *backend;
    const char *kernels;         /* "exact"/"torch": the CUDA kernel profile of every slot's backend
                                    (drift_backend_spec_with_kernels); NULL: the spec's own */
    int parallel;                /* concurrent probes (threads; default 2) */
    const char *devices;         /* "cuda:0,cuda:1": probe slot i runs on device i % n (its own
                                    backend); NULL: every slot on backend */
    /* Called (from probe threads, serialised) with one line per probe start
     * and finish: "probe 3 on cuda:1 started (2 running)". May be NULL. */
    void (*log)(const char *line, void *user);
    void *log_user;
    /* Every phase with a count: "reference replays" (steps of the good plan,
     * the noise floor and the bad plan), "probe" (probes, total estimated per
     * round), "culprit effects", "fix". May be NULL. */
    drift_progress_fn progress;
    void *progress_user;
    /* Streaming (may be NULL; called serialised, from probe threads for
     * on_probe): each probe's verdict as it finishes, and each culprit set
     * as soon as a round finds it (before its members' effects are measured;
     * res holds the sets found so far). */
    void (*on_probe)(const drift_bisect_probe *p, void *user);
    void (*on_set)(const struct drift_bisect_result *res, size_t set, void *user);
    void *event_user;
    /* 1: also build the fix, the bad plan with exactly the culprit
     * differences taken from the good plan, and verify it with one more replay. */
    int fix;
    /* Prefix reuse: the good and the bad replay keep, per step, the
     * activations at the first node each difference touches when applied to
     * the good plan, or taken back from the bad one (replay/exec/exec.h
     * snapshots, on the host, at most prefix_cache_bytes in all; 0: the
     * default 1 GiB); a probe (and a culprit's effect or the fix) starts each
     * step from the deepest one at or before the first node where its
     * forward departs from that replay's. Exact: the same
     * bits as a replay from the inputs. no_prefix_cache 1 (--no-prefix-cache,
     * or DRIFT_BISECT_PREFIX=0): every replay from the inputs. */
    int no_prefix_cache;
    size_t prefix_cache_bytes;
} drift_bisect_opts;

void drift_bisect_opts_init(drift_bisect_opts *o);
const char *drift_bisect_metric_name(drift_bisect_metric m);
/* Parses a metric name (model_output_mean_abs_diff, ..._max_abs_diff, ..._rel_max, rmse). -1 if unknown. */
int drift_bisect_metric_parse(const char *s);

/* The effect of one culprit applied alone to the good plan. */
typedef struct drift_culprit_effect {
    size_t diff;                 /* index into diffs */
    double metric;               /* output metric vs the reference, this difference alone applied */
    double metric_without;       /* every difference but this one applied (the bad plan without it) */
    double floor_units;          /* metric / noise floor (inf if the floor is 0 and metric > 0) */
    char first_divergent[256];   /* first site (vs the good replay) that differs, "" if none */
} drift_culprit_effect;

typedef struct drift_bisect_result {
    /* opts.fix: the bad plan without the culprits (owned; has_fix when built),
     * its metric vs the reference, mean |diff| of its output and of the good
     * plan's output vs the reference, and whether it is back within the
     * threshold (verified). */
    int has_fix, fix_verified;
    drift_plan fix_plan;
    double fix_metric, fix_output_mean_abs_diff, good_output_mean_abs_diff;
    drift_plan_diff *diffs;      /* owned: the search space */
    size_t n_diffs;
    int good_fails;              /* the good plan itself is over the threshold (nothing searched) */
    double good_metric;          /* good plan vs the reference */
    double bad_metric;           /* bad plan vs the reference */
    double noise_floor;          /* NaN if not measured */
    double threshold;            /* the effective threshold on the metric */
    size_t n_sets;               /* culprit sets found (more than one with --all) */
    size_t *set_start, *set_len; /* owned: set k = culprits[set_start[k] .. +set_len[k]) */
    drift_culprit_effect *culprits; /* owned */
    size_t n_culprits;
    size_t probes, memo_hits, max_concurrent;
    /* harmless[i] = 1: difference i is shown not to move the output over the
     * threshold (left after the last --all round, or beside a one-member set
     * whose every-other-difference replay stays within it); harmless_known: 0
     * when the search did not establish it (NULL then). */
    unsigned char *harmless;
    int harmless_known;
    int threshold_from_floor;    /* the threshold is the good plan's value + K x floor (default K = 1) */
    size_t replays;              /* full replays over the steps (references, probes, effects, fix) */
    int fix_reverts_globs;       /* 1: whole pattern entries reverted where every difference they make is a culprit;
                                    0: the fallback (the culprits' exact names appended) */
    int64_t n_steps;
    double seconds;
    char kernels[8];             /* the kernel profile the probes ran ("exact", "torch"); "" off CUDA */
    /* Prefix reuse (opts.no_prefix_cache 0): boundaries kept, host bytes they
     * hold, replays that could use them (probes, effects, fix) and those
     * that reused a prefix in at least one step, and the fraction of those
     * replays' forward (live graph values over all their steps) skipped. */
    int prefix_on;
    size_t prefix_boundaries, prefix_bytes, prefix_candidates, prefix_reused;
    double prefix_skipped_fraction;
    /* Device-resident values (parameters, their casts) a replay took over from the slot's
     * previous replay instead of uploading and casting them again (replay/exec/exec_keys.h). */
    size_t values_adopted;
} drift_bisect_result;

/* The differences between good and bad (pattern or parameter granularity);
 * table may be NULL at pattern granularity. *diffs owned by the caller (free). */
int drift_bisect_diff_plans(const drift_plan *good, const drift_plan *bad, const drift_param_table *table,
                            int granularity_param, drift_plan_diff **diffs, size_t *n, drift_err *err);
/* The good plan with the differences mask[i] != 0 applied (out initialised by
 * this call; caller frees with drift_plan_free). */
int drift_bisect_apply(const drift_plan *good, const drift_plan *bad, const drift_param_table *table,
                       const drift_plan_diff *diffs, size_t n, const unsigned char *mask, drift_plan *out,
                       drift_err *err);

/* The fix as an edit of the bad plan: culprits (indices into diffs) taken
 * back from the good plan. globs 1: a PARAM culprit reverts the pattern entry
 * it came from (the user's glob) when every difference that entry makes is a
 * culprit, else (and with globs 0) an exact-name entry is appended.
 * out initialised by this call. */
int drift_bisect_fix_edit(const drift_plan *good, const drift_plan *bad, const drift_plan_diff *diffs, size_t n_diffs,
                          const size_t *culprits, size_t n_culprits, int globs, drift_plan *out, drift_err *err);

/* Runs the bisection. res is filled (free with drift_bisect_result_free,
 * also after an error). */
int drift_bisect_run(const drift_bisect_opts *o, drift_bisect_result *res, drift_err *err);
void drift_bisect_result_free(drift_bisect_result *res);

#endif
