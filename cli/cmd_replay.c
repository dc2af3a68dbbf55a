/* drift replay: re-run a recorded forward under a plan, per-site metrics. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/report.h"
#include "replay/replay_trace.h"

static const char *const HELP =
    "usage: drift replay TRACE (--plan P | flags) [--side trainer|rollout]\n"
    "                    [--ref trainer|rollout|oracle|TRACE2] [--device cpu|cuda[:N]]\n"
    "                    [--steps A:B] [--output-only] [-o RESULT] [--json]\n"
    "\n"
    "Re-runs the forward recorded in TRACE under a dtype plan, from the trace's\n"
    "fp32 masters and the boundary inputs as they were handed over, and compares\n"
    "every recorded site with a reference, step by step, in execution order:\n"
    "  --ref trainer   the trace's own sites (default): with the plan it was\n"
    "                  recorded with, a same-backend replay is bitwise equal\n"
    "  --ref rollout   the rollout side (NAME.rollout.h5 beside TRACE)\n"
    "  --ref oracle    the same graph in fp64; also each side's RMSE to it\n"
    "  --ref PATH      any other trace\n"
    "The first divergent site of each step (the first one not bitwise equal) is\n"
    "where a plan difference first touches the numbers.\n"
    "\n"
    "  --plan P / plan flags   the dtype plan (see drift plan compile --help)\n"
    "  --side S         which forward dtype of the plan applies (default trainer)\n"
    "  --steps A:B      trace steps to replay (inclusive; A:, :B, A)\n"
    "  --output-only    compare only output:noise_pred (faster)\n"
    "  -o RESULT        write the metrics (and log-prob metrics) to a replay trace\n"
    "  --json           one JSON document on stdout\n";

static void progress(const char *what, long done, long total, void *user) {
    (void)user;
    fprintf(stderr, "\r%s: step %ld/%ld", what, done, total);
    if (done == total) fputc('\n', stderr);
}

int drift_cmd_replay(int argc, char **argv) {
    drift_replay_opts o;
    drift_replay_opts_init(&o);
    drift_cli_plan_args pa;
    memset(&pa, 0, sizeof pa);
    const char *ref = NULL, *steps = NULL, *side = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(HELP, stdout);
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--output-only") == 0) {
            o.sites = 0;
        } else if ((m = drift_cli_opt(argc, argv, &i, "--ref", &v)) != 0) {
            if (m < 0) return drift_cli_usage_error("replay", "--ref needs a value");
            ref = v;
        } else if ((m = drift_cli_opt(argc, argv, &i, "--steps", &v)) != 0) {
            if (m < 0) return drift_cli_usage_error("replay", "--steps needs a value");
            steps = v;
        } else if ((m = drift_cli_opt(argc, argv, &i, "--side", &v)) != 0) {
            if (m < 0) return drift_cli_usage_error("replay", "--side needs a value");
            side = v;
        } else if ((m = drift_cli_opt(argc, argv, &i, "--device", &v)) != 0) {
            if (m < 0) return drift_cli_usage_error("replay", "--device needs a value");
            o.backend = v;
        } else if ((m = drift_cli_opt(argc, argv, &i, "-o", &v)) != 0 || (m = drift_cli_opt(argc, argv, &i, "--out", &v)) != 0) {
            if (m < 0) return drift_cli_usage_error("replay", "-o needs a value");
            o.out_path = v;
        } else if ((m = drift_cli_take_plan_arg(&pa, "--plan", argc, argv, &i)) != 0) {
            if (m < 0) return drift_cli_usage_error("replay", "%s needs a value", argv[i]);
        } else if (argv[i][0] == '-') {
            return drift_cli_usage_error("replay", "unknown option '%s'", argv[i]);
        } else if (!o.trace) {
            o.trace = argv[i];
        } else {
            return drift_cli_usage_error("replay", "unexpected argument '%s'", argv[i]);
        }
    }
    if (!o.trace) return drift_cli_usage_error("replay", "missing TRACE");
    if (!pa.file && pa.n_flags == 0) return drift_cli_usage_error("replay", "missing --plan (or plan flags)");
    if (side) {
        if (strcmp(side, "trainer") == 0) o.side = DRIFT_SIDE_TRAINER;
        else if (strcmp(side, "rollout") == 0) o.side = DRIFT_SIDE_ROLLOUT;
        else return drift_cli_usage_error("replay", "--side: expected trainer or rollout, got '%s'", side);
    }
    if (ref) {
        if (strcmp(ref, "trainer") == 0) o.ref = DRIFT_REF_TRAINER;
        else if (strcmp(ref, "rollout") == 0) o.ref = DRIFT_REF_ROLLOUT;
        else if (strcmp(ref, "oracle") == 0) o.ref = DRIFT_REF_ORACLE;
        else { o.ref = DRIFT_REF_TRACE; o.ref_path = ref; }
    }
    drift_err err;
    drift_err_clear(&err);
    if (drift_replay_parse_steps(steps, &o.step_first, &o.step_last, &err)) return drift_cli_report("replay", &err);
    drift_plan plan;
    if (drift_cli_build_plan(&pa, &plan, &err)) return drift_cli_report("replay", &err);
    o.plan = &plan;
    if (drift_cli_progress_enabled() && !json) o.progress = progress;
    drift_replay_report rep;
    int rc = drift_replay_trace(&o, &rep, &err);
    int code = 0;
    if (rc) {
        code = drift_cli_report("replay", &err);
    } else if (json) {
        code = drift_report_replay_json(&o, &rep, stdout);
    } else {
        drift_report_replay_text(&o, &rep, stdout);
    }
    drift_replay_report_free(&rep);
    drift_plan_free(&plan);
    return code;
}
