/* drift replay --format csv: the per-site table as CSV (one header row,
 * one row per site in execution order; column names as in the JSON). */
#ifndef DRIFT_CLI_REPLAY_CSV_H
#define DRIFT_CLI_REPLAY_CSV_H

#include <stdio.h>

#include "replay/drive/replay_trace.h"

/* Writes the table on f (rep borrowed); x_floor is empty. */
void drift_replay_csv_write(const drift_replay_report *rep, FILE *f);
/* The same with output:noise_pred's x_floor against floor (NaN: unknown). */
void drift_replay_csv_write_floor(const drift_replay_report *rep, double floor, FILE *f);

/* --atol / --rtol (docs/cli.md "Checks"): checks site of rep (NULL:
 * output:noise_pred): max_abs_diff <= atol (when atol >= 0) and rel_max <=
 * rtol (when rtol >= 0). Returns 0 within, 1 exceeded (one line per limit
 * on stderr, prefixed "drift CMD: "), 2 when the site is not in rep. */
int drift_replay_check_tolerance(const char *cmd, const drift_replay_report *rep, const char *site, double atol,
                                 double rtol);

#endif
