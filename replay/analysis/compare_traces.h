/* The one two-trace comparison engine (DESIGN.md s7; docs/compare.md): it
 * serves `drift compare` (all steps, then a report: drift_compare_traces*) and `drift top
 * --against` (step by step while both files are written, SWMR).
 *
 * A = the candidate (e.g. the trainer's trace, or one rank of a merged
 * index, INDEX#rank=N), B = the reference (e.g. the rollout's trace). Sites
 * pair by name, after the site map's renames of B's names, or as a
 * concatenation of several sites of one side (drift_sitemap); pairs are in
 * A's site order (execution order). Records pair by (step, micro-batch,
 * denoising index, call index); all paired records of a step make one
 * comparison of that site at that step. A record stored as statistics only
 * on either side is compared by its statistics row: mean_abs_diff is then
 * |mean_A - mean_B| (a lower bound of the mean |diff|), max_abs_diff the
 * largest difference of min, max, mean, mean |x| and l2, the other metrics
 * NaN, and the row flag DRIFT_TCMP_FLAG_STATS; it is bitwise equal when the
 * two rows are.
 * Per step: the first divergent site (the first pair, in order, whose
 * values differ), and from A's logprob:new (else logprob:old) against B's
 * logprob:old (else logprob:new) the log-prob diff, |ratio - 1| and approx
 * KL.
 * Steps compared: those committed in both, in order, inside the range.
 * Refusals (DRIFT_E_INPUT unless allow_mismatch, then warnings): different
 * model families, a paired site whose shapes differ, and (when not
 * following) different committed step sets. */
#ifndef DRIFT_REPLAY_ANALYSIS_COMPARE_TRACES_H
#define DRIFT_REPLAY_ANALYSIS_COMPARE_TRACES_H

#include <stddef.h>
#include <stdint.h>

#include "formats/err.h"
#include "formats/trace.h"
#include "replay/analysis/metrics.h"
#include "replay/analysis/report.h"
#include "replay/analysis/sitecmp.h"
#include "replay/analysis/sitemap.h"

#define DRIFT_TCMP_FLAG_STATS 0x40u /* row compares statistics rows only */

typedef struct drift_tcmp_opts {
    const char *path_a, *path_b;
    int follow;                  /* open both for SWMR following (drift_tcmp_refresh) */
    const drift_sitemap *sitemap;/* NULL: names must match; borrowed, must outlive the engine */
    int allow_mismatch;          /* warn instead of refusing */
    int64_t step_first, step_last; /* inclusive; -1 unbounded */
} drift_tcmp_opts;

void drift_tcmp_opts_init(drift_tcmp_opts *o);

typedef struct drift_tcmp drift_tcmp;

/* The result of one compared step; owned by the engine, valid until the
 * next drift_tcmp_next or close. rows[i].site = pair index. */
typedef struct drift_tcmp_step {
    int64_t step;
    const drift_trace_metric *rows;
    size_t n_rows;
    long first_divergent;        /* pair index, -1 if every compared site is bitwise equal */
    int has_logprob;
    drift_trace_step_metrics lp; /* denoise_index -1, n_pairs = log-prob pairs */
} drift_tcmp_step;

/* Opens both traces. *out owned by the caller: drift_tcmp_close. Errors
 * name the file. */
int drift_tcmp_open(drift_tcmp **out, const drift_tcmp_opts *o, drift_err *err);
/* NULL allowed. */
void drift_tcmp_close(drift_tcmp *c);
/* Follow mode: re-reads both files' committed steps and record indexes. */
int drift_tcmp_refresh(drift_tcmp *c, drift_err *err);
/* Compares the next step committed in both (and not compared yet); *got = 1
 * and *out filled (NULL allowed) when there was one, *got = 0 when none is
 * ready. */
int drift_tcmp_next(drift_tcmp *c, int *got, const drift_tcmp_step **out, drift_err *err);

size_t drift_tcmp_n_pairs(const drift_tcmp *c);
/* Name of pair i (A's name; the concatenated site's name for a concat). */
const char *drift_tcmp_pair_name(const drift_tcmp *c, size_t i);
/* Per-site aggregates over the compared steps (value-compared pairs only). */
const drift_sitecmp *drift_tcmp_aggregate(const drift_tcmp *c);
/* Moves the aggregates to *out (the caller frees it: drift_sitecmp_free);
 * the engine's start empty. */
void drift_tcmp_take_aggregate(drift_tcmp *c, drift_sitecmp *out);
/* Borrowed readers: side 0 = A, 1 = B. */
drift_trace_reader *drift_tcmp_reader(const drift_tcmp *c, int side);
/* Steps committed in both files that lie in the range (compared or not). */
int64_t drift_tcmp_steps_available(const drift_tcmp *c);
/* Warnings collected at open (mismatches allowed, sites only on one side). */
size_t drift_tcmp_n_warnings(const drift_tcmp *c);
const char *drift_tcmp_warning(const drift_tcmp *c, size_t i);
/* Sites of A and B left unpaired. */
size_t drift_tcmp_unpaired(const drift_tcmp *c, int side);
/* Log-prob metrics over every compared step; returns the pairs counted. */
int64_t drift_tcmp_logprob_total(const drift_tcmp *c, drift_logprob_metrics *out);

/* drift compare over the engine: every pair of sites, step by step over the
 * steps both committed, A as candidate and B as reference. Fills rep (the
 * caller frees it with drift_replay_report_free, also after an error; model
 * from A; lp_vs_old = A's logprob:new against B's logprob:old over all steps;
 * no oracle). progress (NULL allowed) gets ("compare", steps done, steps in
 * total). */
int drift_compare_traces_opts(const drift_tcmp_opts *o, drift_replay_report *rep, drift_progress_fn progress,
                              void *user, drift_err *err);
/* The same with default options (names must match, mismatches refused). */
int drift_compare_traces(const char *path_a, const char *path_b, drift_replay_report *rep, drift_err *err);

#endif
