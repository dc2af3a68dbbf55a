/* Running drift bisect and printing its answer: shared by `drift bisect`
 * and the demo's bisect step. */
#ifndef DRIFT_CLI_BISECT_CLI_H
#define DRIFT_CLI_BISECT_CLI_H

#include <stdio.h>

#include "formats/err.h"
#include "formats/plan.h"
#include "replay/search/bisect.h"

typedef struct drift_bisect_cli_opts {
    const char *trace;
    const drift_plan *good, *bad;
    const char *backend;
    int granularity_param;
    int json;
    int csv;                     /* the culprits as CSV (--format csv), one row per culprit */
    int stream;                  /* stderr: each probe's verdict and each culprit set as found (not with json) */
    const char *fix_out;         /* NULL, or where the fix plan (JSON) goes (--fix-out) */
    int force;                   /* --fix-out may replace an existing file */
    const char *kernels_why;     /* why lib.kernels (cli/kernels_opt.h), shown beside the profile; NULL allowed */
    drift_bisect_opts lib;       /* the rest (metric, threshold, ref, steps, --all) */
} drift_bisect_cli_opts;

void drift_bisect_cli_opts_init(drift_bisect_cli_opts *o);
/* Runs the bisection and prints the answer on out (text or JSON). With
 * fix_out, writes the fix plan there (and the JSON's "fix" object). Returns
 * a drift_status; DRIFT_E_CHECK (exit 1) when the good plan itself is over
 * the threshold. */
int drift_bisect_cli_run(const drift_bisect_cli_opts *o, FILE *out, drift_err *err);

#endif
