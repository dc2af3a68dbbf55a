/* Replaying a recorded trace under a dtype plan (drift replay): rebuilds the
 * model from the trace (family, fp32 masters, buffers), feeds each committed
 * step's recorded boundary inputs (as handed over, before their cast) to the
 * forward of the plan, and compares every recorded site with a reference:
 *   trainer  the trace's own recorded sites (replay fidelity: same plan and
 *            backend reproduces them bit for bit);
 *   rollout  the rollout side's trace (NAME.rollout.h5 beside it, or a path);
 *   trace    any other trace given by path;
 *   oracle   the same graph in fp64 on the ref backend ("how far from the
 *            truth"); also reports each recorded side's output RMSE to it.
 * Per step it also finds the first divergent site (execution order), and
 * when the trace holds the SDE sample it recomputes the log-prob from the
 * replayed output against the recorded log_prob_old / log_prob_new. */
#ifndef DRIFT_REPLAY_REPLAY_TRACE_H
#define DRIFT_REPLAY_REPLAY_TRACE_H

#include <stdint.h>

#include "formats/err.h"
#include "replay/analysis/report.h"

/* Runs the replay (one device, or replay/drive/multi.h for o->devices and
 * o->mpi). rep is filled (caller frees it with drift_replay_report_free,
 * also after an error). */
int drift_replay_trace(const drift_replay_opts *o, drift_replay_report *rep, drift_err *err);


#endif
