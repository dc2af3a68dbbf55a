/* drift invariance: does a recorded sample's forward change with the batch
 * it is computed in (replay/drive/invariance.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/invariance_out.h"
#include "kernels/backend.h"
#include "replay/drive/invariance.h"

static const char *const HELP =
    "usage: drift invariance TRACE [--batch 1,2,4,8] [--cfg-batch split|joined]\n"
    "                        [--step S] [--sample I] [--device cpu|cuda[:N]]\n"
    "                        [--kernels exact|torch] [--plan P | flags]\n"
    "                        [--side trainer|rollout] [--seed N] [--json]\n"
    "\n"
    "Replays one recorded sample (row I of step S's batch) alone and inside\n"
    "batches of each size (the sample at position 0 and at the last position,\n"
    "the other rows the step's other recorded samples, or seeded copies when it\n"
    "recorded one), compares every node of the forward with the batch-1 replay\n"
    "bit for bit, and reports per configuration: bitwise or not, the first node\n"
    "whose value for the sample depends on its batch (label, op, shapes here and\n"
    "at batch 1), the first divergent recorded site, the output's metrics raw\n"
    "and in noise-floor units, and which configurations give the same output\n"
    "(a micro-batch split of N into k is the pair k, N). The last line is the\n"
    "summary to act on.\n"
    "\n"
    "  --batch LIST     batch sizes (default 1,2,4,8; 1 is the reference)\n"
    "  --cfg-batch joined   also run the CFG pair (conditional + unconditional\n"
    "                   with zero text embeddings) as one batch of 2 and compare\n"
    "                   each branch with the branch alone (default split: not run)\n"
    "  --step S         trace step (default: the first committed)\n"
    "  --sample I       row of the recorded batch (default 0)\n"
    "  --device D       cpu (default) or cuda[:N]\n"
    "  --kernels K      exact (default: drift's order-defined kernels) or torch\n"
    "                   (CUDA: the kernels PyTorch runs, cuda:N:kernels=torch)\n"
    "  --plan P / plan flags   the dtype plan (default: the trace's own)\n"
    "  --side S         which forward dtype of the plan applies (default: the\n"
    "                   trace's side, trainer for a trainer or replay trace)\n"
    "  --seed N         seed of the seeded pad rows (default 1)\n"
    "  --json           one JSON document on stdout\n"
    "\n"
    "exit: 0 invariant, 1 the sample's forward depends on its batch, 2 bad usage or input\n";

static int parse_batches(const char *v, drift_invariance_opts *o) {
    o->n_batches = 0;
    const char *p = v;
    while (*p) {
        char *end;
        errno = 0;
        long n = strtol(p, &end, 10);
        if (errno || end == p || n < 1 || n > DRIFT_INV_MAX_BATCH || (*end && *end != ',') ||
            o->n_batches == DRIFT_INV_MAX_BATCHES)
            return drift_cli_usage_error("invariance", "--batch: expected up to %d comma-separated sizes in 1..%d, got '%s'",
                                         DRIFT_INV_MAX_BATCHES, DRIFT_INV_MAX_BATCH, v);
        o->batches[o->n_batches++] = (int)n;
        p = *end ? end + 1 : end;
    }
    return o->n_batches ? 0 : drift_cli_usage_error("invariance", "--batch: empty list");
}

static int parse_num(const char *opt, const char *v, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n < lo || n > hi)
        return drift_cli_usage_error("invariance", "%s: expected an integer in %lld..%lld, got '%s'", opt, lo, hi, v);
    *out = n;
    return 0;
}

int drift_cmd_invariance(int argc, char **argv) {
    drift_invariance_opts o;
    drift_invariance_opts_init(&o);
    drift_cli_plan_args pa;
    memset(&pa, 0, sizeof pa);
    const char *device = "cpu", *kernels = "exact";
    int json = 0;
    long long n;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(HELP, stdout);
            return 0;
        }
        if (strcmp(argv[i], "--json") == 0) { json = 1; continue; }
        if ((m = drift_cli_take_plan_arg(&pa, "--plan", argc, argv, &i)) != 0) {
            if (m < 0) return drift_cli_usage_error("invariance", "%s needs a value", argv[i]);
            continue;
        }
#define VAL(name)                                                                                  \
    ((m = drift_cli_opt(argc, argv, &i, name, &v)) != 0 &&                                         \
     (m > 0 || (drift_cli_usage_error("invariance", "%s needs a value", name), 0)))
        if (VAL("--batch")) { if (parse_batches(v, &o)) return 2; continue; }
        if (m < 0) return 2;
        if (VAL("--cfg-batch")) {
            if (strcmp(v, "joined") == 0) o.cfg_joined = 1;
            else if (strcmp(v, "split") == 0) o.cfg_joined = 0;
            else return drift_cli_usage_error("invariance", "--cfg-batch: expected split or joined, got '%s'", v);
            continue;
        }
        if (m < 0) return 2;
        if (VAL("--step")) { if (parse_num("--step", v, 0, INT64_MAX, &n)) return 2; o.step = n; continue; }
        if (m < 0) return 2;
        if (VAL("--sample")) { if (parse_num("--sample", v, 0, DRIFT_INV_MAX_BATCH, &n)) return 2; o.sample = (int)n; continue; }
        if (m < 0) return 2;
        if (VAL("--seed")) { if (parse_num("--seed", v, 0, INT64_MAX, &n)) return 2; o.seed = (uint64_t)n; continue; }
        if (m < 0) return 2;
        if (VAL("--device")) { device = v; continue; }
        if (m < 0) return 2;
        if (VAL("--kernels")) {
            if (strcmp(v, "exact") && strcmp(v, "torch"))
                return drift_cli_usage_error("invariance", "--kernels: expected exact or torch, got '%s'", v);
            kernels = v;
            continue;
        }
        if (m < 0) return 2;
        if (VAL("--side")) {
            o.side_from_trace = 0;
            if (strcmp(v, "trainer") == 0) o.side = DRIFT_SIDE_TRAINER;
            else if (strcmp(v, "rollout") == 0) o.side = DRIFT_SIDE_ROLLOUT;
            else return drift_cli_usage_error("invariance", "--side: expected trainer or rollout, got '%s'", v);
            continue;
        }
        if (m < 0) return 2;
#undef VAL
        if (argv[i][0] == '-') return drift_cli_usage_error("invariance", "unknown option '%s'", argv[i]);
        if (o.trace) return drift_cli_usage_error("invariance", "unexpected argument '%s'", argv[i]);
        o.trace = argv[i];
    }
    if (!o.trace) return drift_cli_usage_error("invariance", "TRACE is required");
    int is_cpu = strcmp(device, "cpu") == 0, is_cuda = strncmp(device, "cuda", 4) == 0 && (!device[4] || device[4] == ':');
    if (!is_cpu && !is_cuda) return drift_cli_usage_error("invariance", "--device: expected cpu or cuda[:N], got '%s'", device);
    if (is_cpu && strcmp(kernels, "torch") == 0)
        return drift_cli_usage_error("invariance", "--kernels torch is a CUDA kernel profile: give --device cuda[:N]");
    char spec[96];
    /* cuda: the profile always explicit (kernels/cuda/cuda_backend.h: kernels=exact|torch) */
    snprintf(spec, sizeof spec, "%s%s%s", device, is_cuda ? ":kernels=" : "", is_cuda ? kernels : "");

    drift_err err;
    drift_err_clear(&err);
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
        rc = drift_invariance_run(&o, be, &rep, &err);
    }
    int code;
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
