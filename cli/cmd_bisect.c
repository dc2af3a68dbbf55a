/* drift bisect: the minimal set of plan differences that causes the drift. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/bisect_cli.h"
#include "cli/cli_util.h"
#include "cli/kernels_opt.h"
#include "cli/libraries_pick.h"
#include "cli/commands.h"
#include "cli/trace_args.h"
#include "replay/drive/replay_trace.h"

static const char *const REF_CHOICES[] = {"good", "rollout", NULL};
static const char *const METRIC_CHOICES[] = {"model_output_mean_abs_diff", "model_output_max_abs_diff",
                                             "model_output_rel_max", "rmse", NULL};
static const char *const GRAN_CHOICES[] = {"pattern", "param", NULL};

static const char *const FORMAT_CHOICES[] = {"text", "csv", NULL};

static const drift_cli_opt_spec OPTS[] = {
    {"--good", NULL, "P", "the good plan (JSON)", NULL, 0},
    {"--bad", NULL, "P", "the bad plan (JSON)", NULL, 0},
    {"--ref", NULL, "REF", "good (default): the good plan's replay;\n"
                           "rollout: the recorded rollout output", REF_CHOICES, 0},
    {"--metric", NULL, "M", "the output metric", METRIC_CHOICES, 0},
    {"--threshold", NULL, "X", "absolute threshold on the metric (a good plan over it: exit 1);\n"
                               "0 asks the bitwise question (does the output change at all?)", NULL, 0},
    {"--threshold-floor", NULL, "K", "threshold = good + K x the measured noise floor (the same replay\n"
                                     "with the latents moved by one ULP); default K = 1", NULL, 0},
    {"--granularity", NULL, "G", "search over pattern entries or over the parameters they cover", GRAN_CHOICES, 0},
    {"--all", NULL, NULL, "repeat without the culprits found until nothing fails", NULL, 0},
    {"--steps", NULL, "A:B", "trace steps each probe replays, inclusive (A:B, A, A:, :B); out of range: exit 2", NULL, 0},
    {"--device", NULL, "D", "cpu (default), cuda or cuda:N", NULL, 0},
    {"--devices", NULL, "LIST", "e.g. cuda:0,cuda:1: probe slot i runs on device i mod n; stderr logs\n"
                                "each probe's start and finish with its device", NULL, 0},
    DRIFT_CLI_KERNELS_SPEC,
    DRIFT_CLI_LIBRARIES_SPEC,
    {"--parallel", NULL, "N", "probes run at once (threads, 1..16; default 2, or one per device)", NULL, 0},
    {"--no-prefix-cache", NULL, NULL, "replay every probe from the inputs (also DRIFT_BISECT_PREFIX=0); by default\n"
                                      "a probe starts each step from the good replay's activations at the first\n"
                                      "node its plan changes (same bits, less work)", NULL, 0},
    {"--prefix-cache-mb", NULL, "MB", "host memory for those activations (default 1024; boundaries past it are\n"
                                      "not kept, and probes start from an earlier one or the inputs)", NULL, 0},
    {"--fix-out", NULL, "PLAN.json", "write the fix: an edit of the bad plan (pretty JSON, its globs kept)\n"
                                     "with exactly the culprit differences taken from the good plan,\n"
                                     "shown as a diff against it and verified by one more replay", NULL, 0},
    {"--force", NULL, NULL, "let --fix-out replace an existing file", NULL, 0},
    {"--format", NULL, "F", "the answer as text (default) or csv (one row per culprit)", FORMAT_CHOICES, 0},
    {"--json", NULL, NULL, "one JSON document on stdout (errors too)", NULL, 0},
    {0}};

static const drift_cli_cmd_spec SPEC = {
    "bisect",
    "TRACE --good P --bad P [--ref good|rollout] [--metric M]\n"
    "                    [--threshold X | --threshold-floor K] [--granularity pattern|param]\n"
    "                    [--all] [--steps A:B] [--device cpu|cuda[:N] | --devices D1,D2,...]\n"
    "                    [--kernels exact|torch] [--libraries recorded|system|DIR] [--parallel N]\n"
    "                    [--no-prefix-cache | --prefix-cache-mb MB]\n"
    "                    [--fix-out PLAN.json [--force]] [--format text|csv] [--json]",
    "The differences between the good and the bad plan (each pattern entry, or\n"
    "with --granularity param each parameter whose forward dtype differs; each\n"
    "input_dtype_policy key; each global flag; the RoPE provenance) form the\n"
    "search space. Each probe replays the chosen steps of TRACE with the good\n"
    "plan plus a subset of the differences and asks whether the output drifts;\n"
    "delta debugging (ddmin) finds a 1-minimal culprit set, so interacting pairs\n"
    "are found, not only single culprits. Each culprit is then reported with its\n"
    "own effect: the metric alone, in noise-floor units, and the first divergent site.\n"
    "The good plan, the noise floor and the bad plan are replayed first; a single\n"
    "difference is answered by them (no probe). The default threshold is the good\n"
    "plan's value plus one noise floor: a difference below it is reported harmless,\n"
    "not as a culprit (--threshold 0 asks the bitwise question). Every difference is\n"
    "grouped under the plan entry it came from (a parameter under the glob that set\n"
    "its dtype) with its culprits and harmless count.\n",
    OPTS,
    "TRACE",
    1,
    1,
    "Unless --json: stderr streams each probe's verdict as it finishes, numbered\n"
    "over the whole run ('probe 7 (round 2): 3 of 11 differences applied -> drifts'),\n"
    "and each culprit set as soon as it is found. On a terminal one status line\n"
    "shows each phase with its count, rate and ETA: loading the trace and the\n"
    "reference replays (steps), the probes (of a total estimated per --all round),\n"
    "the culprit effects and the fix's replay (steps).\n",
    "0 answered (also 'no culprit'), 1 the good plan is itself over the threshold, 2 bad usage or input",
    "bisect run.h5 --good plans/wan2_2_no_norm2.json --bad plans/wan2_2.json --granularity param --all"};

static int parse_num(const char *name, const char *v, double *out) {
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || !end || *end || !(x >= 0))
        return drift_cli_usage_error_field("bisect", name, "%s: expected a number >= 0, got '%s'", name, v);
    *out = x;
    return 0;
}

int drift_cmd_bisect(int argc, char **argv) {
    drift_cli_args a;
    int code = 0;
    if (drift_cli_args_parse(&SPEC, argc, argv, &a, &code)) return code;
    drift_bisect_cli_opts o;
    drift_bisect_cli_opts_init(&o);
    o.trace = a.pos[0];
    o.json = drift_cli_args_count(&a, "--json") > 0;
    const char *format = drift_cli_args_get(&a, "--format");
    o.csv = format && strcmp(format, "csv") == 0;
    o.stream = 1;
    o.lib.all = drift_cli_args_count(&a, "--all") > 0;
    o.force = drift_cli_args_count(&a, "--force") > 0;
    o.fix_out = drift_cli_args_get(&a, "--fix-out");
    const char *env_prefix = getenv("DRIFT_BISECT_PREFIX");
    o.lib.no_prefix_cache = drift_cli_args_count(&a, "--no-prefix-cache") > 0 || (env_prefix && strcmp(env_prefix, "0") == 0);
    const char *pmb = drift_cli_args_get(&a, "--prefix-cache-mb");
    const char *good = drift_cli_args_get(&a, "--good"), *bad = drift_cli_args_get(&a, "--bad");
    const char *steps = drift_cli_args_get(&a, "--steps"), *ref = drift_cli_args_get(&a, "--ref");
    const char *metric = drift_cli_args_get(&a, "--metric"), *gran = drift_cli_args_get(&a, "--granularity");
    const char *thr = drift_cli_args_get(&a, "--threshold"), *thf = drift_cli_args_get(&a, "--threshold-floor");
    const char *par = drift_cli_args_get(&a, "--parallel"), *dev = drift_cli_args_get(&a, "--device");
    o.lib.devices = drift_cli_args_get(&a, "--devices");
    const char *kernels = drift_cli_args_get(&a, "--kernels");
    const char *libraries = drift_cli_args_get(&a, "--libraries");
    drift_cli_args_free(&a);

    if (o.json && format && strcmp(format, "text") != 0)
        return drift_cli_usage_error_field("bisect", "--format", "--format %s and --json: give one", format);
    if (!good || !bad)
        return drift_cli_usage_error_field("bisect", !good ? "--good" : "--bad", "missing %s%s%s (required)", !good ? "--good" : "",
                                           !good && !bad ? ", " : "", !bad ? "--bad" : "");
    if (ref) o.lib.ref = strcmp(ref, "rollout") == 0 ? DRIFT_BISECT_REF_ROLLOUT : DRIFT_BISECT_REF_GOOD;
    if (metric) o.lib.metric = (drift_bisect_metric)drift_bisect_metric_parse(metric);
    if (gran) o.granularity_param = strcmp(gran, "param") == 0;
    if (thr && thf) return drift_cli_usage_error_field("bisect", "--threshold", "give --threshold or --threshold-floor, not both");
    if (thr) {
        if (parse_num("--threshold", thr, &o.lib.threshold)) return 2;
        o.lib.has_threshold = 1;
    }
    if (thf) {
        if (parse_num("--threshold-floor", thf, &o.lib.threshold_floor)) return 2;
        o.lib.has_threshold_floor = 1;
    }
    if (dev && o.lib.devices) return drift_cli_usage_error_field("bisect", "--device", "give --device or --devices, not both");
    if (pmb) {
        char *end = NULL;
        errno = 0;
        long long mb = strtoll(pmb, &end, 10);
        if (errno || !end || *end || mb < 1 || mb > (1LL << 24))
            return drift_cli_usage_error_field("bisect", "--prefix-cache-mb", "--prefix-cache-mb: expected 1..16777216 (MiB), got '%s'", pmb);
        if (o.lib.no_prefix_cache)
            return drift_cli_usage_error_field("bisect", "--prefix-cache-mb", "give --no-prefix-cache or --prefix-cache-mb, not both");
        o.lib.prefix_cache_bytes = (size_t)mb << 20;
    }
    if (drift_cli_check_input("bisect", "TRACE", o.trace)) return 2;
    drift_cli_kernels kp;
    if (drift_cli_kernels_pick_trace("bisect", o.lib.devices ? o.lib.devices : dev, kernels, o.trace, &kp)) return 2;
    o.lib.kernels = kp.profile;
    o.kernels_why = kp.why;
    if (dev) {
        if (drift_cli_check_device("bisect", "--device", dev)) return 2;
        o.backend = dev;
    }
    if (o.lib.devices && drift_cli_check_devices("bisect", "--devices", o.lib.devices)) return 2;
    /* may re-execute drift with the recording's cuBLASLt/cuDNN (cli/libraries_pick.h) */
    if (drift_cli_libraries_apply("bisect", o.trace, libraries, o.lib.devices ? o.lib.devices : dev)) return 2;
    if (par) {
        char *end = NULL;
        long n = strtol(par, &end, 10);
        if (!end || *end || n < 1 || n > 16) return drift_cli_usage_error("bisect", "--parallel: expected 1..16, got '%s'", par);
        o.lib.parallel = (int)n;
    } else if (o.lib.devices) {
        int n = 1;
        for (const char *p = o.lib.devices; *p; p++) n += *p == ',';
        o.lib.parallel = n > 16 ? 16 : n;
    }
    if (o.fix_out && drift_cli_check_output("bisect", "--fix-out", o.fix_out, o.force)) return 2;
    if (drift_cli_resolve_steps("bisect", steps, o.trace, &o.lib.step_first, &o.lib.step_last)) return 2;
    drift_err err;
    drift_err_clear(&err);
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
