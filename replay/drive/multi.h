/* drift replay over several devices or MPI ranks (replay_trace.h's
 * opts->devices / opts->mpi; DESIGN.md s2 "1..N GPUs").
 *
 * Steps are dealt round-robin: in round r worker w replays selected step
 * r*W + w on its own backend (its own thread or rank, its own trace readers,
 * a forward prepared once, parameters resident in its drift_exec_cache).
 * After each round the workers reduce the round's partial results through
 * their comm group (comm.h: NCCL on GPUs, MPI or host memory otherwise):
 * every worker fills only its own step's slot and leaves the identity of
 * the reduction everywhere else (-0.0 for fp64 SUM, which adds exactly; -inf
 * for MAX; 0 for int64 SUM), so the reduced buffers hold each step's exact
 * partial sums. The merge then folds the slots strictly in step order
 * (replay_step.h), which makes the report and the -o trace bit for bit the
 * ones of a one-device replay. Each phase also reduces an error count, so a
 * failing worker stops every worker at the next phase instead of leaving
 * them waiting. */
#ifndef DRIFT_REPLAY_MULTI_H
#define DRIFT_REPLAY_MULTI_H

#include "formats/err.h"
#include "replay/drive/replay_trace.h"

/* Splits "cuda:0,cuda:1" (or "cpu,cpu") into *n owned strings (free each and
 * the array with drift_replay_devices_free). Empty items, more than 64
 * devices: DRIFT_E_USAGE naming --devices. */
int drift_replay_parse_devices(const char *s, char ***out, int *n, drift_err *err);
void drift_replay_devices_free(char **d, int n);

/* One process, one worker thread per device of o->devices. */
int drift_replay_multi(const drift_replay_opts *o, drift_replay_report *rep, drift_err *err);
/* This process is one rank of MPI_COMM_WORLD (MPI initialised by the
 * caller): every rank replays its share and merges the reduced results, so
 * rep is the same on every rank; only rank 0 writes o->out_path. */
int drift_replay_mpi(const drift_replay_opts *o, drift_replay_report *rep, drift_err *err);

#endif
