/* What the commands check about a trace given on the command line before
 * the work starts (docs/cli.md): --steps ranges against its committed steps,
 * and the plan it was recorded with (replay's default plan). */
#ifndef DRIFT_CLI_TRACE_ARGS_H
#define DRIFT_CLI_TRACE_ARGS_H

#include <stdint.h>

#include "formats/plan.h"

/* --steps SPEC for trace (docs/cli.md "Step ranges"): A:B is inclusive; A, A:
 * and :B are A:A, A:last and first:B. Every bound given must lie within the
 * trace's committed steps (first..last) and the range must hold at least one
 * committed step; else reports for cmd (naming the trace's steps) and returns
 * 2. spec NULL: every step (*first = *last = -1). */
int drift_cli_resolve_steps(const char *cmd, const char *spec, const char *trace, int64_t *first, int64_t *last);

/* The plan recorded in trace's root attributes (the plan the side was
 * recorded with). out is initialised by the call; on success the caller owns
 * it (drift_plan_free). Returns 0, or reports and returns 2. */
int drift_cli_trace_plan(const char *cmd, const char *trace, drift_plan *out);

/* replay --ref TRACE2 (docs/cli.md "Comparisons"): ref must hold the same
 * model family as trace, every committed step of trace within [first, last]
 * (-1: unbounded), and the same shape for every site both record. Returns 0
 * when they agree; otherwise reports the first disagreement for cmd (field
 * --ref) and returns 2, or, when allow (--allow-mismatch), prints it on stderr
 * as a warning and returns 0. */
int drift_cli_check_ref_match(const char *cmd, const char *trace, const char *ref, int64_t first, int64_t last,
                              int allow);

#endif
