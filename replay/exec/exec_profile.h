/* DRIFT_EXEC_PROFILE=1 (replay/exec/exec.c): per op kind, the count and the
 * time spent in the executor's nodes, synchronising the backend around every
 * node, printed at the end of each run. A diagnostic for benchmarks: it
 * serialises the device. */
#ifndef DRIFT_REPLAY_EXEC_PROFILE_H
#define DRIFT_REPLAY_EXEC_PROFILE_H

#include <stdio.h>

#include "kernels/backend.h"
#include "replay/exec/exec.h"

typedef struct drift_exec_profile {
    int on;                          /* 0: every call below is a no-op */
    double t0;                       /* the current node's start */
    double t[DRIFT_OP_COUNT + 1];    /* seconds per op kind; [DRIFT_OP_COUNT]: leaves */
    long n[DRIFT_OP_COUNT + 1];
} drift_exec_profile;

/* Zeroes p; on != 0 switches it on. */
void drift_exec_profile_init(drift_exec_profile *p, int on);
/* Waits for be (borrowed) and starts timing a node. */
void drift_exec_profile_begin(drift_exec_profile *p, const drift_backend *be);
/* Waits for be and books the time since _begin to kind (a drift_op_kind,
 * or DRIFT_OP_COUNT for a leaf). */
void drift_exec_profile_end(drift_exec_profile *p, const drift_backend *be, int kind);
/* Prints the table and the run's counters st (borrowed) to f. */
void drift_exec_profile_print(const drift_exec_profile *p, const drift_backend *be, const drift_exec_stats *st, FILE *f);

#endif
