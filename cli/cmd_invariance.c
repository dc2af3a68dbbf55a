/* drift invariance: does a recorded sample's forward change with the batch
 * it is computed in (replay/drive/invariance.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli_util.h"
#include "cli/progress.h"
#include "cli/kernels_opt.h"
#include "cli/libraries_pick.h"
#include "cli/commands.h"
#include "cli/invariance_out.h"
#include "kernels/backend.h"
#include "replay/drive/invariance.h"

static const char *const CFG_CHOICES[] = {"split", "joined", NULL};
static const char *const SIDE_CHOICES[] = {"trainer", "rollout", NULL};

static const drift_cli_opt_spec OPTS[] = {
    {"--batch", NULL, "LIST", "batch sizes, comma-separated (default 1,2,4,8; 1 is the reference)", NULL, 0},
    {"--cfg-batch", NULL, "C", "joined: also run the CFG pair (conditional + unconditional with zero\n"
                               "text embeddings) as one batch of 2 and compare each branch with the\n"
                               "branch alone; split (default): not run", CFG_CHOICES, 0},
    {"--step", NULL, "S", "trace step (default: the first committed)", NULL, 0},
    {"--sample", NULL, "I", "row of the recorded batch (default 0)", NULL, 0},
    {"--device", NULL, "D", "cpu (default), cuda or cuda:N; ref: the fp64 oracle (checks the model, not kernels)", NULL, 0},
    DRIFT_CLI_KERNELS_SPEC,
    DRIFT_CLI_LIBRARIES_SPEC,
    {"--plan", NULL, "P", "the dtype plan (JSON); default: the trace's own", NULL, 0},
    DRIFT_CLI_PLAN_FLAG_SPECS,
    {"--side", NULL, "S", "which forward dtype of the plan applies (default: the trace's side,\n"
                          "trainer for a trainer or replay trace)", SIDE_CHOICES, 0},
    {"--seed", NULL, "N", "seed of the seeded pad rows (default 1)", NULL, 0},
    {"--batch-input", NULL, "NAME", "a captured graph without a latents input: the per-sample input that\n"
                                    "holds the sample (seeded in pad rows, nudged for the noise floor);\n"
                                    "default: the first with fractional values", NULL, 0},
    {"--json", NULL, NULL, "one JSON document on stdout (errors too)", NULL, 0},
    {0}};

static const drift_cli_cmd_spec SPEC = {
    "invariance",
    "TRACE [--batch 1,2,4,8] [--cfg-batch split|joined]\n"
    "                        [--step S] [--sample I] [--device cpu|ref|cuda[:N]]\n"
    "                        [--kernels exact|torch] [--libraries recorded|system|DIR] [--plan P | flags]\n"
    "                        [--side trainer|rollout] [--seed N] [--batch-input NAME] [--json]",
    "Replays one recorded sample (row I of step S's batch) alone and inside\n"
    "batches of each size (the sample at position 0 and at the last position,\n"
    "the other rows the step's other recorded samples, or seeded copies when it\n"
    "recorded one), compares every node of the forward with the batch-1 replay\n"
    "bit for bit, and reports per configuration: bitwise or not, the first node\n"
    "whose value for the sample depends on its batch (label, op, shapes here and\n"
    "at batch 1), the first divergent recorded site, the output's metrics raw\n"
    "and in noise-floor units, and which configurations give the same output\n"
    "(a micro-batch split of N into k is the pair k, N). The last line is the\n"
    "summary to act on.\n",
    OPTS,
    "TRACE",
    1,
    1,
    NULL,
    "0 invariant, 1 the sample's forward depends on its batch, 2 bad usage or input",
    "invariance run.h5 --batch 1,2,4,8 --cfg-batch joined --json"};

static int parse_batches(const char *v, drift_invariance_opts *o) {
    o->n_batches = 0;
    const char *p = v;
    while (*p) {
        char *end;
        errno = 0;
        long n = strtol(p, &end, 10);
        if (errno || end == p || n < 1 || n > DRIFT_INV_MAX_BATCH || (*end && *end != ',') ||
            o->n_batches == DRIFT_INV_MAX_BATCHES)
            return drift_cli_usage_error_field("invariance", "--batch", "--batch: expected up to %d comma-separated sizes in 1..%d, got '%s'",
                                         DRIFT_INV_MAX_BATCHES, DRIFT_INV_MAX_BATCH, v);
        o->batches[o->n_batches++] = (int)n;
        p = *end ? end + 1 : end;
    }
    return o->n_batches ? 0 : drift_cli_usage_error_field("invariance", "--batch", "--batch: empty list");
}

static int parse_num(const char *opt, const char *v, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n < lo || n > hi)
        return drift_cli_usage_error_field("invariance", opt, "%s: expected an integer in %lld..%lld, got '%s'", opt, lo, hi, v);
    *out = n;
    return 0;
}

int drift_cmd_invariance(int argc, char **argv) {
    drift_cli_args a;
    int code = 0;
    if (drift_cli_args_parse(&SPEC, argc, argv, &a, &code)) return code;
    drift_cli_plan_args pa;
    if (drift_cli_args_plan(&a, "--plan", &pa)) {
        drift_cli_args_free(&a);
        return 2;
    }
    drift_invariance_opts o;
    drift_invariance_opts_init(&o);
    o.trace = a.pos[0];
    int json = drift_cli_args_count(&a, "--json") > 0;
    const char *device = drift_cli_args_get(&a, "--device"), *kernels = drift_cli_args_get(&a, "--kernels");
    const char *batch = drift_cli_args_get(&a, "--batch"), *cfg = drift_cli_args_get(&a, "--cfg-batch");
    const char *step = drift_cli_args_get(&a, "--step"), *sample = drift_cli_args_get(&a, "--sample");
    const char *seed = drift_cli_args_get(&a, "--seed"), *side = drift_cli_args_get(&a, "--side");
    const char *libraries = drift_cli_args_get(&a, "--libraries");
    o.batch_input = drift_cli_args_get(&a, "--batch-input");
    drift_cli_args_free(&a); /* the values stay: they are argv's strings */
    if (!device) device = "cpu";
    long long n;
    if (batch && parse_batches(batch, &o)) return 2;
    if (cfg) o.cfg_joined = strcmp(cfg, "joined") == 0;
    if (step) {
        if (parse_num("--step", step, 0, INT64_MAX, &n)) return 2;
        o.step = n;
    }
    if (sample) {
        if (parse_num("--sample", sample, 0, DRIFT_INV_MAX_BATCH, &n)) return 2;
        o.sample = (int)n;
    }
    if (seed) {
        if (parse_num("--seed", seed, 0, INT64_MAX, &n)) return 2;
        o.seed = (uint64_t)n;
    }
    if (side) {
        o.side_from_trace = 0;
        o.side = strcmp(side, "rollout") == 0 ? DRIFT_SIDE_ROLLOUT : DRIFT_SIDE_TRAINER;
    }
    if (drift_cli_check_device("invariance", "--device", device)) return 2;
    if (drift_cli_check_input("invariance", "TRACE", o.trace)) return 2;
    /* only cpu, cuda and cuda:N: the kernel profile is --kernels' */
    int is_cpu = strcmp(device, "cpu") == 0, is_cuda = strncmp(device, "cuda", 4) == 0 && (!device[4] || device[4] == ':');
    int is_ref = strcmp(device, "ref") == 0; /* the fp64 oracle: every op in one order, a check of the model alone */
    if (is_cuda && device[4] && strspn(device + 5, "0123456789") != strlen(device + 5)) is_cuda = 0;
    if (!is_cpu && !is_cuda && !is_ref)
        return drift_cli_usage_error_field("invariance", "--device", "--device: expected cpu, ref or cuda[:N], got '%s'",
                                           device);
    if (is_ref && kernels)
        return drift_cli_usage_error_field("invariance", "--kernels", "--kernels: the ref device has one profile");
    /* may re-execute drift with the recording's cuBLASLt/cuDNN (cli/libraries_pick.h) */
    if (drift_cli_libraries_apply("invariance", o.trace, libraries, device)) return 2;
    drift_cli_kernels kp;
    memset(&kp, 0, sizeof kp);
    if (!is_ref && drift_cli_kernels_pick_trace("invariance", device, kernels, o.trace, &kp)) return 2;
    char spec[192] = "ref";
    drift_err err;
    drift_err_clear(&err);
    if (!is_ref && drift_backend_spec_with_kernels(device, kp.profile, spec, sizeof spec, &err))
        return drift_cli_report("invariance", &err);

    drift_plan plan;
    drift_plan_init(&plan);
    int have_plan = pa.file || pa.n_flags;
    int rc = have_plan ? drift_cli_build_plan(&pa, &plan, &err) : DRIFT_OK;
    drift_backend *be = NULL;
    if (!rc) rc = drift_backend_create(spec, &be, &err);
    drift_invariance_report rep;
    memset(&rep, 0, sizeof rep);
    if (!rc) {
        o.plan = have_plan ? &plan : NULL;
        drift_cli_progress *prog = json ? NULL : drift_cli_progress_start("invariance", "loading the trace");
        o.progress = prog ? drift_cli_progress_cb : NULL;
        o.progress_user = prog;
        rc = drift_invariance_run(&o, be, &rep, &err);
        drift_cli_progress_finish(prog);
        snprintf(rep.kernels_why, sizeof rep.kernels_why, "%s", kp.why);
    }
    if (rc) {
        code = drift_cli_report("invariance", &err);
    } else {
        if (json) {
            if (drift_invariance_print_json(&rep, stdout)) {
                drift_err_set(&err, DRIFT_E_NOMEM, "invariance", "out of memory writing JSON");
                rc = 1;
            }
        } else {
            drift_invariance_print_text(&rep, stdout);
        }
        code = rc ? drift_cli_report("invariance", &err) : rep.invariant ? 0 : 1;
    }
    drift_invariance_report_free(&rep);
    drift_backend_free(be);
    drift_plan_free(&plan);
    return code;
}
