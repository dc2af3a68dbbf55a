/* The executor's plan for one run (replay/exec/exec.c): what runs, how
 * often each value is read, which values a device cache keeps, and the cast
 * folding. A pure function of the assigned graph and the run's switches: no
 * backend, no environment, no allocation on a device, so that it can be
 * tested on hand-built graphs (tests/replay/test_exec_plan.c).
 *
 *  - live: the output, the recorded sites when a site callback observes
 *    them, and every value they depend on; nothing else runs.
 *  - uses: per value, the reads by live nodes, plus one for the output (the
 *    executor releases a value after its last use).
 *  - fixed (with a cache only): the value depends on parameters and buffers
 *    only, so it is the same in every run of the graph and can stay on the
 *    device between runs.
 *  - fuse: cast folding over the live values (replay/ir/fuse.h), when on. */
#ifndef DRIFT_REPLAY_EXEC_PLAN_H
#define DRIFT_REPLAY_EXEC_PLAN_H

#include "formats/err.h"
#include "replay/ir/fuse.h"
#include "replay/ir/graph.h"

typedef struct drift_exec_plan_opts {
    int observe_sites; /* 1: a site callback is given (recorded sites are live and keep their dtype) */
    int cached;        /* 1: a device cache is used (fixed[] is computed) */
    int fuse_casts;    /* 1: plan cast folding */
    const unsigned char *per_step; /* per value id, may be NULL: 1 for a buffer whose values come with
                                      each run (a captured graph's per-step user input): not fixed */
} drift_exec_plan_opts;

typedef struct drift_exec_plan {
    int n;                /* values in the graph */
    int output;           /* the graph's output id, or -1 */
    int n_live;           /* values with live[i] */
    unsigned char *live;  /* owned: per value id */
    int *uses;            /* owned: per value id */
    unsigned char *fixed; /* owned: per value id; NULL without opts->cached */
    int fused;            /* 1: fuse holds a plan (opts->fuse_casts) */
    drift_fuse_plan fuse; /* owned: zeroed when !fused */
} drift_exec_plan;

/* Plans one run of the assigned graph g under o (NULL: no sites, no cache,
 * no folding). p is zeroed first; free it with drift_exec_plan_free (also
 * after a failure). An unassigned graph is DRIFT_E_INPUT; g or p NULL is
 * DRIFT_E_INTERNAL. g is only read. */
int drift_exec_plan_build(const drift_graph *g, const drift_exec_plan_opts *o, drift_exec_plan *p, drift_err *err);
/* Frees what p owns (NULL allowed) and zeroes it. */
void drift_exec_plan_free(drift_exec_plan *p);

#endif
