/* Delta debugging (Zeller's ddmin) over a set of n "differences": finds a
 * 1-minimal subset that still fails (applying it to the good configuration
 * reproduces the drift), so that interacting pairs are found, not only
 * single culprits (DESIGN.md s7c).
 *
 * The caller supplies the probe: given a subset (mask[i] = 1 if difference i
 * is applied), it says whether the result fails. Probes are memoised by
 * subset; the candidate subsets of one ddmin stage are independent and run on
 * up to `parallel` threads at once, and the stage's outcome is then taken in
 * the canonical order, so the answer does not depend on the parallelism. */
#ifndef DRIFT_REPLAY_DDMIN_H
#define DRIFT_REPLAY_DDMIN_H

#include <stddef.h>

#include "formats/err.h"

/* Probe: *fails = 1 if applying the differences with mask[i] != 0 fails.
 * Must be thread-safe when parallel > 1. slot (0..parallel-1) names the
 * worker running it (e.g. which GPU or scratch buffers to use). Returns a
 * drift_status; an error aborts the search. */
typedef int (*drift_ddmin_probe_fn)(const unsigned char *mask, size_t n, int slot, void *user, int *fails,
                                    drift_err *err);
/* Progress: called (from the calling thread) after each probe batch with the
 * number of probes run so far and an upper bound of the total. May be NULL. */
typedef void (*drift_ddmin_progress_fn)(size_t probes, size_t bound, void *user);

typedef struct drift_ddmin_opts {
    int parallel;                /* worker threads, >= 1 */
    drift_ddmin_probe_fn probe;
    drift_ddmin_progress_fn progress;
    void *user;
    int assume_full_fails;       /* 1: skip probing the full set (caller already knows it fails) */
} drift_ddmin_opts;

typedef struct drift_ddmin_result {
    int found;                   /* 0: the full set does not fail (no culprit) */
    unsigned char *culprit;      /* owned, n entries: 1 for members of the minimal failing subset */
    size_t culprit_size;
    size_t probes;               /* probes actually run (memoised repeats not counted) */
    size_t memo_hits;
    size_t max_concurrent;       /* most probes that ran at once */
} drift_ddmin_result;

/* Runs ddmin over n differences (n >= 1), restricted to those with
 * universe[i] != 0 (universe NULL: all). The empty subset is assumed to pass
 * (it is the good configuration). Caller owns res (drift_ddmin_result_free). */
int drift_ddmin_run(size_t n, const unsigned char *universe, const drift_ddmin_opts *opts,
                    drift_ddmin_result *res, drift_err *err);
/* Frees what res owns (NULL allowed). */
void drift_ddmin_result_free(drift_ddmin_result *res);
/* Upper bound of probes for a single culprit among n: 2*ceil(log2 n) + 2. */
size_t drift_ddmin_single_bound(size_t n);

#endif
