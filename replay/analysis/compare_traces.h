/* drift compare (replay/analysis/compare_traces.c). */
#ifndef DRIFT_REPLAY_ANALYSIS_COMPARE_TRACES_H
#define DRIFT_REPLAY_ANALYSIS_COMPARE_TRACES_H

#include "formats/err.h"
#include "replay/analysis/report.h"

/* drift compare: every site the two traces share (same name and size),
 * step by step over the steps both committed, A as candidate and B as
 * reference. Fills rep (model from A; no log-prob, no oracle). */
int drift_compare_traces(const char *path_a, const char *path_b, drift_replay_report *rep, drift_err *err);

#endif
