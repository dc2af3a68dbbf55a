/* drift bisect: the minimal set of plan differences that causes the drift. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bisect_cli.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "replay/drive/replay_trace.h"

static const char *const HELP =
    "usage: drift bisect TRACE --good P --bad P [--ref good|rollout] [--metric M]\n"
    "                    [--threshold X | --threshold-floor K] [--granularity pattern|param]\n"
    "                    [--all] [--steps A:B] [--device cpu|cuda[:N] | --devices D1,D2,...]\n"
    "                    [--parallel N] [--json]\n"
    "\n"
    "The differences between the good and the bad plan (each pattern entry, or\n"
    "with --granularity param each parameter whose forward dtype differs; each\n"
    "input_dtype_policy key; each global flag; the RoPE provenance) form the\n"
    "search space. Each probe replays the chosen steps of TRACE with the good\n"
    "plan plus a subset of the differences and asks whether the output drifts;\n"
    "delta debugging (ddmin) finds a 1-minimal culprit set, so interacting pairs\n"
    "are found, not only single culprits. Each culprit is then reported with its\n"
    "own effect: the metric alone, in noise-floor units, and the first divergent site.\n"
    "\n"
    "  --ref good       (default) compare with the good plan's replay on the same\n"
    "                   backend: a probe fails when the metric exceeds the threshold\n"
    "                   (default 0: the output changes at all)\n"
    "  --ref rollout    compare with the recorded rollout output: a probe fails when\n"
    "                   it exceeds the good plan's own value plus the threshold\n"
    "                   (default: one noise floor)\n"
    "  --metric M       model_output_mean_abs_diff (default), model_output_max_abs_diff,\n"
    "                   model_output_rel_max, rmse\n"
    "  --threshold X    absolute threshold on the metric (a good plan over it: exit 1)\n"
    "  --threshold-floor K   threshold = good + K x the measured noise floor (the same\n"
    "                   replay with the latents moved by one ULP)\n"
    "  --all            repeat without the culprits found until nothing fails\n"
    "  --parallel N     probes run at once (threads; default 2, or one per device)\n"
    "  --devices LIST   e.g. cuda:0,cuda:1: independent probes run on different GPUs\n"
    "                   at once (probe slot i on device i %% n, each its own backend);\n"
    "                   stderr logs each probe's start and finish with its device\n"
    "\n"
    "exit: 0 answered (also 'no culprit'), 1 the good plan is itself over the threshold,\n"
    "      2 bad usage or input\n";

int drift_cmd_bisect(int argc, char **argv) {
    drift_bisect_cli_opts o;
    drift_bisect_cli_opts_init(&o);
    const char *good = NULL, *bad = NULL, *steps = NULL;
    int device_given = 0, parallel_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(HELP, stdout);
            return 0;
        }
        if (strcmp(argv[i], "--json") == 0) { o.json = 1; continue; }
        if (strcmp(argv[i], "--all") == 0) { o.lib.all = 1; continue; }
#define VAL(name)                                                                                  \
    ((m = drift_cli_opt(argc, argv, &i, name, &v)) != 0 &&                                         \
     (m > 0 || (drift_cli_usage_error("bisect", "%s needs a value", name), 0)))
        if (VAL("--good")) { good = v; continue; }
        if (m < 0) return 2;
        if (VAL("--bad")) { bad = v; continue; }
        if (m < 0) return 2;
        if (VAL("--steps")) { steps = v; continue; }
        if (m < 0) return 2;
        if (VAL("--devices")) { o.lib.devices = v; continue; }
        if (m < 0) return 2;
        if (VAL("--device")) { o.backend = v; device_given = 1; continue; }
        if (m < 0) return 2;
        if (VAL("--ref")) {
            if (strcmp(v, "good") == 0) o.lib.ref = DRIFT_BISECT_REF_GOOD;
            else if (strcmp(v, "rollout") == 0) o.lib.ref = DRIFT_BISECT_REF_ROLLOUT;
            else return drift_cli_usage_error("bisect", "--ref: expected good or rollout, got '%s'", v);
            continue;
        }
        if (m < 0) return 2;
        if (VAL("--metric")) {
            int k = drift_bisect_metric_parse(v);
            if (k < 0) return drift_cli_usage_error("bisect", "--metric: unknown metric '%s'", v);
            o.lib.metric = (drift_bisect_metric)k;
            continue;
        }
        if (m < 0) return 2;
        if (VAL("--granularity")) {
            if (strcmp(v, "param") == 0) o.granularity_param = 1;
            else if (strcmp(v, "pattern") == 0) o.granularity_param = 0;
            else return drift_cli_usage_error("bisect", "--granularity: expected pattern or param, got '%s'", v);
            continue;
        }
        if (m < 0) return 2;
        int is_floor = 0;
        if (VAL("--threshold") || (m == 0 && (is_floor = 1) && VAL("--threshold-floor"))) {
            char *end = NULL;
            errno = 0;
            double x = strtod(v, &end);
            if (errno || !end || *end || !(x >= 0))
                return drift_cli_usage_error("bisect", "%s: expected a number >= 0, got '%s'",
                                             is_floor ? "--threshold-floor" : "--threshold", v);
            if (is_floor) {
                o.lib.has_threshold_floor = 1;
                o.lib.threshold_floor = x;
            } else {
                o.lib.has_threshold = 1;
                o.lib.threshold = x;
            }
            continue;
        }
        if (m < 0) return 2;
        if (VAL("--parallel")) {
            char *end = NULL;
            long n = strtol(v, &end, 10);
            if (!end || *end || n < 1 || n > 16) return drift_cli_usage_error("bisect", "--parallel: expected 1..16, got '%s'", v);
            o.lib.parallel = (int)n;
            parallel_given = 1;
            continue;
        }
        if (m < 0) return 2;
#undef VAL
        if (argv[i][0] == '-') return drift_cli_usage_error("bisect", "unknown option '%s'", argv[i]);
        if (o.trace) return drift_cli_usage_error("bisect", "unexpected argument '%s'", argv[i]);
        o.trace = argv[i];
    }
    if (!o.trace || !good || !bad) return drift_cli_usage_error("bisect", "TRACE, --good and --bad are required");
    if (o.lib.devices && device_given) return drift_cli_usage_error("bisect", "give --device or --devices, not both");
    if (o.lib.devices && !parallel_given) {
        int n = 1;
        for (const char *p = o.lib.devices; *p; p++) n += *p == ',';
        o.lib.parallel = n > 16 ? 16 : n;
    }
    if (o.lib.has_threshold && o.lib.has_threshold_floor)
        return drift_cli_usage_error("bisect", "give --threshold or --threshold-floor, not both");
    drift_err err;
    drift_err_clear(&err);
    if (drift_replay_parse_steps(steps, &o.lib.step_first, &o.lib.step_last, &err)) return drift_cli_report("bisect", &err);
    drift_plan gp, bp;
    drift_plan_init(&gp);
    drift_plan_init(&bp);
    int rc = drift_cli_load_plan(good, &gp, &err);
    if (!rc) rc = drift_cli_load_plan(bad, &bp, &err);
    if (!rc) {
        o.good = &gp;
        o.bad = &bp;
        rc = drift_bisect_cli_run(&o, stdout, &err);
    }
    drift_plan_free(&gp);
    drift_plan_free(&bp);
    return rc ? drift_cli_report("bisect", &err) : 0;
}
