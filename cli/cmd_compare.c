/* drift compare: per-site metrics between two traces. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/report.h"
#include "replay/analysis/compare_traces.h"

static const char *const HELP =
    "usage: drift compare TRACE_A TRACE_B [--json]\n"
    "\n"
    "Compares every site the two traces share (same name and size), step by step\n"
    "over the steps both committed, TRACE_A as candidate and TRACE_B as reference:\n"
    "mean/max |diff|, rel max, cosine, ULPs, bitwise-equal steps, and the first\n"
    "divergent site of each step (in TRACE_A's site order). For example the\n"
    "trainer and rollout traces of one run, or two replays.\n"
    "\n"
    "options:\n"
    "  --json   one JSON document on stdout\n"
    "\n"
    "example: drift compare run.h5 run.rollout.h5 --json\n"
    "exit: 0 compared, 2 bad usage or unreadable traces\n";

int drift_cmd_compare(int argc, char **argv) {
    const char *a = NULL, *b = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(HELP, stdout);
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (argv[i][0] == '-') {
            return drift_cli_unknown_option_in_help("compare", argv[i], HELP);
        } else if (!a) {
            a = argv[i];
        } else if (!b) {
            b = argv[i];
        } else {
            return drift_cli_usage_error("compare", "unexpected argument '%s'", argv[i]);
        }
    }
    if (!a || !b) return drift_cli_usage_error("compare", "two traces are required");
    drift_err err;
    drift_err_clear(&err);
    drift_replay_report rep;
    int rc = drift_compare_traces(a, b, &rep, &err);
    int code = 0;
    if (rc) {
        code = drift_cli_report("compare", &err);
    } else {
        drift_replay_opts o;
        drift_replay_opts_init(&o);
        o.trace = a;
        o.backend = "none";
        if (json) code = drift_report_replay_json(&o, &rep, stdout);
        else drift_report_replay_text(&o, &rep, stdout);
    }
    drift_replay_report_free(&rep);
    return code;
}
