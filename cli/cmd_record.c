/* drift record --synthetic: a frozen-weight two-sided run into traces. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "replay/drive/synth.h"

static const drift_cli_opt_spec OPTS[] = {
    {"--synthetic", NULL, "SPEC", "model: tiny-dit, wan2.2:layers=2,dim=256,heads=4, ...", NULL, 0},
    {"--steps", NULL, "N", "denoising steps (each is one committed trace step), 1..100000", NULL, 0},
    {"--trainer-plan", NULL, "P", "JSON dtype plan of the trainer (diffusion_forward_dtype applies)", NULL, 0},
    {"--rollout-plan", NULL, "P", "JSON dtype plan of the rollout (sglang_dit_precision applies)", NULL, 0},
    {"--seed", NULL, "S", "weights, inputs and SDE noise (default 0)", NULL, 0},
    {"--weights", NULL, "FILE", "real weights from a .safetensors file (diffusers names) instead of seeded ones", NULL, 0},
    {"--params-ref", NULL, "DIR", "weights from the safetensors checkpoint DIR (a sharded diffusers index,\n"
                                  "or one .safetensors; `drift weights` writes one from a seed), stored\n"
                                  "in both traces by reference (file, dtype, shape, content hash per\n"
                                  "tensor) instead of as values", NULL, 0},
    {"--eta", NULL, "E", "SDE noise level (default 0.7)", NULL, 0},
    {"--shift", NULL, "S", "schedule time shift (default 3)", NULL, 0},
    {"--device", NULL, "D", "cpu (default), cuda or cuda:N", NULL, 0},
    {"--rank", NULL, "R", "rank written into the traces (default 0): per-rank files of one run", NULL, 0},
    {"--world-size", NULL, "W", "world size written into the traces (default 1)", NULL, 0},
    {"--sites", NULL, "GLOBS", "record only the graph sites matching these comma-separated globs\n"
                               "(input:* and output:noise_pred always); a glob matching nothing: exit 2", NULL, 0},
    {"--out", "-o", "TRACE", "output path of the trainer trace (the rollout goes to NAME.rollout.h5)", NULL, 0},
    {"--force", NULL, NULL, "replace TRACE and NAME.rollout.h5 if they exist", NULL, 0},
    /* hidden (tests): wait after each committed step, so that a live reader
     * sees the steps arrive over time */
    {"--step-delay-ms", NULL, "MS", "wait MS after each committed step", NULL, DRIFT_OPT_HIDDEN},
    {0}};

static const drift_cli_cmd_spec SPEC = {
    "record",
    "--synthetic FAMILY[:K=V,...] --steps N --trainer-plan P --rollout-plan P\n"
    "                    [--seed S] [--weights FILE.safetensors] [--eta E] [--shift S]\n"
    "                    [--device cpu|cuda[:N]] [--rank R --world-size W] [--sites GLOBS]\n"
    "                    [--params-ref DIR] -o TRACE [--force]",
    "Records a synthetic frozen-weight debug run: one denoising trajectory of the\n"
    "model with seeded weights. At each of N denoising steps the rollout side's\n"
    "forward (its plan) picks the SDE sample and log_prob_old; the trainer side's\n"
    "forward (its plan) recomputes log_prob_new on the same sample. Every recorded\n"
    "site of both forwards is written: TRACE holds the trainer side (with what the\n"
    "rollout handed over, the fp32 masters, buffers, graph, and per-site\n"
    "trainer-vs-rollout metrics), TRACE's sibling NAME.rollout.h5 the rollout side.\n",
    OPTS,
    NULL,
    0,
    0,
    "Before writing, stderr warns when the two traces will hold more than 4 GB\n"
    "(fp32 masters and site tensors; DRIFT_RECORD_WARN_BYTES=N sets the limit);\n"
    "--sites and fewer --steps record less.\n",
    "0 recorded, 2 bad usage or bad input (nothing is written)",
    "record --synthetic tiny-dit --steps 8 --trainer-plan plans/wan2_2.json --rollout-plan plans/wan2_2_no_norm2.json -o run.h5"};

/* The size above which record warns (DRIFT_RECORD_WARN_BYTES overrides it). */
static int64_t warn_bytes(void) {
    const char *e = getenv("DRIFT_RECORD_WARN_BYTES");
    char *end = NULL;
    long long v = e && *e ? strtoll(e, &end, 10) : -1;
    return v >= 0 && end && !*end ? (int64_t)v : (int64_t)4000000000LL;
}

static void on_size(int64_t trainer_bytes, int64_t rollout_bytes, void *user) {
    drift_cli_progress *p = user;
    int64_t total = trainer_bytes + rollout_bytes;
    if (trainer_bytes < 0 || rollout_bytes < 0 || total <= warn_bytes()) return;
    char line[512];
    snprintf(line, sizeof line,
             "drift record: warning: about %.2f GB will be written (%.2f GB trainer, %.2f GB rollout); "
             "--sites GLOBS or fewer --steps record less",
             (double)total / 1e9, (double)trainer_bytes / 1e9, (double)rollout_bytes / 1e9);
    drift_cli_progress_line(p, line);
}

int drift_cmd_record(int argc, char **argv) {
    drift_cli_args a;
    int code = 0;
    if (drift_cli_args_parse(&SPEC, argc, argv, &a, &code)) return code;
    drift_synth_opts o;
    drift_synth_opts_init(&o);
    const char *synthetic = drift_cli_args_get(&a, "--synthetic"), *tplan = drift_cli_args_get(&a, "--trainer-plan");
    const char *rplan = drift_cli_args_get(&a, "--rollout-plan"), *out = drift_cli_args_get(&a, "--out");
    const char *steps = drift_cli_args_get(&a, "--steps"), *seed = drift_cli_args_get(&a, "--seed");
    const char *eta = drift_cli_args_get(&a, "--eta"), *shift = drift_cli_args_get(&a, "--shift");
    const char *rank = drift_cli_args_get(&a, "--rank"), *ws = drift_cli_args_get(&a, "--world-size");
    int force = drift_cli_args_count(&a, "--force") > 0;
    const char *delay = drift_cli_args_get(&a, "--step-delay-ms");
    if (drift_cli_args_get(&a, "--device")) o.backend = drift_cli_args_get(&a, "--device");
    if (drift_cli_args_get(&a, "--weights")) o.weights = drift_cli_args_get(&a, "--weights");
    if (drift_cli_args_get(&a, "--params-ref")) o.params_ref = drift_cli_args_get(&a, "--params-ref");
    if (drift_cli_args_get(&a, "--sites")) o.sites = drift_cli_args_get(&a, "--sites");
    drift_cli_args_free(&a);

    if (!synthetic)
        return drift_cli_usage_error_field("record", "--synthetic", "--synthetic SPEC is required: only synthetic runs are recorded "
                                           "by this command (the recorder library captures real runs)");
    char missing[256] = "";
    const char *req[][2] = {{"--steps", steps}, {"--trainer-plan", tplan}, {"--rollout-plan", rplan}, {"-o", out}};
    int n_missing = 0;
    for (size_t k = 0; k < sizeof req / sizeof req[0]; k++)
        if (!req[k][1]) {
            size_t len = strlen(missing);
            snprintf(missing + len, sizeof missing - len, "%s%s", n_missing ? ", " : "", req[k][0]);
            n_missing++;
        }
    if (n_missing)
        return drift_cli_usage_error_field("record", missing, "missing %s (required)", missing);
    char *end = NULL;
    long n = strtol(steps, &end, 10);
    if (!end || *end || n < 1 || n > 100000) return drift_cli_usage_error("record", "--steps: expected 1..100000, got '%s'", steps);
    errno = 0;
    if (seed) {
        o.seed = strtoull(seed, &end, 0);
        if (errno || !end || *end || seed[0] == '-') return drift_cli_usage_error("record", "--seed: expected a non-negative integer, got '%s'", seed);
    }
    if (eta) {
        o.eta = strtof(eta, &end);
        if (errno || !end || *end || !(o.eta > 0)) return drift_cli_usage_error("record", "--eta: expected a number > 0, got '%s'", eta);
    }
    if (shift) {
        o.shift = strtod(shift, &end);
        if (errno || !end || *end || !(o.shift > 0)) return drift_cli_usage_error("record", "--shift: expected a number > 0, got '%s'", shift);
    }
    if (delay) {
        long ms = strtol(delay, &end, 10);
        if (!end || *end || ms < 0 || ms > 600000)
            return drift_cli_usage_error_field("record", "--step-delay-ms", "--step-delay-ms: expected 0..600000, got '%s'", delay);
        o.step_delay_ms = (int)ms;
    }
    const char *rk[2] = {rank, ws};
    for (int k = 0; k < 2; k++) {
        if (!rk[k]) continue;
        const char *name = k ? "--world-size" : "--rank";
        long rv = strtol(rk[k], &end, 10);
        if (!end || *end || rv < k || rv > 1000000)
            return drift_cli_usage_error("record", "%s: expected an integer in %d..1000000, got '%s'", name, k, rk[k]);
        if (k) o.world_size = (int32_t)rv;
        else o.rank = (int32_t)rv;
    }
    if (o.rank >= (o.world_size > 0 ? o.world_size : 1))
        return drift_cli_usage_error("record", "--rank %d: expected 0 <= rank < --world-size (%d)", (int)o.rank,
                                     (int)(o.world_size > 0 ? o.world_size : 1));
    if (o.backend && drift_cli_check_device("record", "--device", o.backend)) return 2;
    char rpath[4096];
    drift_synth_rollout_path(out, rpath, sizeof rpath);
    if (drift_cli_check_output("record", "-o", out, force) || drift_cli_check_output("record", "-o (rollout side)", rpath, force))
        return 2;
    o.steps = (int)n;
    o.model = synthetic;
    o.trainer_path = out;

    drift_err err;
    drift_err_clear(&err);
    drift_plan tp, rp;
    drift_plan_init(&tp);
    drift_plan_init(&rp);
    int rc = drift_cli_load_plan(tplan, &tp, &err);
    if (!rc) rc = drift_cli_load_plan(rplan, &rp, &err);
    if (!rc) {
        o.trainer_plan = &tp;
        o.rollout_plan = &rp;
        drift_cli_progress *prog = drift_cli_progress_start("record", "building the model");
        o.progress = drift_cli_progress_cb;
        o.progress_user = prog;
        o.on_size = on_size;
        o.on_size_user = prog;
        rc = drift_synth_record(&o, &err);
        drift_cli_progress_finish(prog);
    }
    drift_plan_free(&tp);
    drift_plan_free(&rp);
    if (rc) {
        /* the model spec error names --synthetic, the option the user wrote */
        if (strcmp(err.where, "--model") == 0) snprintf(err.where, sizeof err.where, "--synthetic");
        return drift_cli_report("record", &err);
    }
    fprintf(stderr, "drift record: wrote %s (trainer) and %s (rollout), %d steps\n", out, rpath, o.steps);
    return 0;
}
