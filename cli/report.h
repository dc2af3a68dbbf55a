/* Printing replay results: the per-site table (text) and the JSON document
 * of drift replay / drift demo. */
#ifndef DRIFT_CLI_REPORT_H
#define DRIFT_CLI_REPORT_H

#include <stdio.h>

#include "replay/drive/replay_trace.h"

/* The per-site table in execution order, first divergent sites marked. */
void drift_report_replay_text(const drift_replay_opts *o, const drift_replay_report *rep, FILE *f);
/* One JSON document; returns the exit code (2 on allocation failure). */
int drift_report_replay_json(const drift_replay_opts *o, const drift_replay_report *rep, FILE *f);
/* What a replay was asked to check (docs/cli.md "Checks for CI") and the
 * noise floor it measured: plain data, borrowed. */
typedef struct drift_report_checks {
    double atol, rtol, max_floor; /* -1: not asked */
    int has_floor;                /* floor was measured (--max-floor) */
    double floor;                 /* output:noise_pred's mean_abs_diff under a one-ULP latent nudge */
} drift_report_checks;
/* drift_report_replay_json plus, when c is not NULL, "checks" (each asked
 * bound: option, site, metric, value, limit, exceeded), "noise_floor" and
 * output:noise_pred's "x_floor" when the floor is known. */
int drift_report_replay_json_checks(const drift_replay_opts *o, const drift_replay_report *rep,
                                    const drift_report_checks *c, FILE *f);
/* The noise floor and output:noise_pred's mean |d| in floor units, one
 * line on f; nothing when c has no floor. */
void drift_report_floor_text(const drift_replay_report *rep, const drift_report_checks *c, FILE *f);
/* output:noise_pred's mean_abs_diff in units of floor (inf when the floor is
 * 0 and the output differs). */
double drift_report_floor_units(double mean_abs_diff, double floor);
/* drift compare: the identity (NULL: none) of the one of its two traces
 * that ran torch.compile'd code, and that trace's path (its compile floor),
 * so that the report states it (cli/compiled_out.h). Replay reports its own
 * trace's. */
void drift_report_compiled_source(const drift_libraries *l, const char *trace);
/* Formats a metric value compactly ("0", "1.23e-03", "nan"). */
const char *drift_report_num(double v, char *buf, size_t bufsz);

#endif
