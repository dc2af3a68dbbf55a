/* drift record --synthetic: a frozen-weight two-sided run into traces. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "replay/drive/synth.h"

static const char *const HELP =
    "usage: drift record --synthetic FAMILY[:K=V,...] --steps N --trainer-plan P --rollout-plan P\n"
    "                    [--seed S] [--weights FILE.safetensors] [--eta E] [--shift S]\n"
    "                    [--device cpu|cuda[:N]] [--rank R --world-size W] [--sites GLOBS] -o TRACE\n"
    "\n"
    "Records a synthetic frozen-weight debug run: one denoising trajectory of the\n"
    "model with seeded weights. At each of N denoising steps the rollout side's\n"
    "forward (its plan) picks the SDE sample and log_prob_old; the trainer side's\n"
    "forward (its plan) recomputes log_prob_new on the same sample. Every recorded\n"
    "site of both forwards is written: TRACE holds the trainer side (with what the\n"
    "rollout handed over, the fp32 masters, buffers, graph, and per-site\n"
    "trainer-vs-rollout metrics), TRACE's sibling NAME.rollout.h5 the rollout side.\n"
    "\n"
    "  --synthetic SPEC     model: tiny-dit, wan2.2:layers=2,dim=256,heads=4, ...\n"
    "  --steps N            denoising steps (each is one committed trace step)\n"
    "  --trainer-plan P     JSON dtype plan of the trainer (diffusion_forward_dtype applies)\n"
    "  --rollout-plan P     JSON dtype plan of the rollout (sglang_dit_precision applies)\n"
    "  --seed S             weights, inputs and SDE noise (default 0)\n"
    "  --weights FILE       real weights from a .safetensors file (diffusers names) instead of seeded ones\n"
    "  --eta E              SDE noise level (default 0.7); --shift S schedule shift (default 3)\n"
    "  --device D           cpu (default) or cuda[:N]\n"
    "  --rank R, --world-size W  rank and world size written into the traces (default 0 of 1):\n"
    "                       per-rank files of one run, e.g. for drift merge\n"
    "  --sites GLOBS        record only the graph sites matching these comma-separated globs\n"
    "                       (input:* and output:noise_pred always; default: every site)\n"
    "  -o TRACE             output path of the trainer trace\n";

static void progress(const char *what, long done, long total, void *user) {
    (void)user;
    fprintf(stderr, "\r%s: step %ld/%ld", what, done, total);
    if (done == total) fputc('\n', stderr);
}

int drift_cmd_record(int argc, char **argv) {
    drift_synth_opts o;
    drift_synth_opts_init(&o);
    const char *synthetic = NULL, *tplan = NULL, *rplan = NULL, *out = NULL, *steps = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m = 0;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(HELP, stdout);
            return 0;
        }
#define OPT(name, dst)                                                                             \
    if ((m = drift_cli_opt(argc, argv, &i, name, &v)) != 0) {                                      \
        if (m < 0) return drift_cli_usage_error("record", "%s needs a value", name);               \
        dst = v;                                                                                   \
        continue;                                                                                  \
    }
        const char *seed = NULL, *eta = NULL, *shift = NULL;
        const char *rk = NULL;
        for (int ws = 0; ws < 2; ws++) {
            const char *name = ws ? "--world-size" : "--rank";
            if ((m = drift_cli_opt(argc, argv, &i, name, &rk)) == 0) continue;
            if (m < 0) return drift_cli_usage_error("record", "%s needs a value", name);
            char *end = NULL;
            long rv = strtol(rk, &end, 10);
            if (!end || *end || rv < ws || rv > 1000000)
                return drift_cli_usage_error("record", "%s: expected an integer in %d..1000000, got '%s'", name, ws, rk);
            if (ws) o.world_size = (int32_t)rv;
            else o.rank = (int32_t)rv;
            break;
        }
        if (m > 0) continue;
        OPT("--synthetic", synthetic)
        OPT("--steps", steps)
        OPT("--sites", o.sites)
        OPT("--trainer-plan", tplan)
        OPT("--rollout-plan", rplan)
        OPT("-o", out)
        OPT("--out", out)
        OPT("--device", o.backend)
        OPT("--weights", o.weights)
        if ((m = drift_cli_opt(argc, argv, &i, "--seed", &seed)) != 0 ||
            (m = drift_cli_opt(argc, argv, &i, "--eta", &eta)) != 0 ||
            (m = drift_cli_opt(argc, argv, &i, "--shift", &shift)) != 0) {
            if (m < 0) return drift_cli_usage_error("record", "%s needs a value", argv[i]);
            char *end = NULL;
            errno = 0;
            if (seed) {
                o.seed = strtoull(seed, &end, 0);
                if (errno || !end || *end) return drift_cli_usage_error("record", "--seed: expected an integer, got '%s'", seed);
            } else if (eta) {
                o.eta = strtof(eta, &end);
                if (errno || !end || *end || !(o.eta > 0)) return drift_cli_usage_error("record", "--eta: expected a number > 0, got '%s'", eta);
            } else {
                o.shift = strtod(shift, &end);
                if (errno || !end || *end || !(o.shift > 0)) return drift_cli_usage_error("record", "--shift: expected a number > 0, got '%s'", shift);
            }
            continue;
        }
#undef OPT
        return drift_cli_usage_error("record", "unexpected argument '%s'", argv[i]);
    }
    if (!synthetic) return drift_cli_usage_error("record", "only --synthetic runs are recorded by this command (the recorder library captures real runs)");
    if (!steps || !tplan || !rplan || !out)
        return drift_cli_usage_error("record", "--steps, --trainer-plan, --rollout-plan and -o are required");
    char *end = NULL;
    long n = strtol(steps, &end, 10);
    if (!end || *end || n < 1 || n > 100000) return drift_cli_usage_error("record", "--steps: expected 1..100000, got '%s'", steps);
    if (o.rank >= (o.world_size > 0 ? o.world_size : 1))
        return drift_cli_usage_error("record", "--rank %d: expected 0 <= rank < --world-size (%d)", (int)o.rank,
                                     (int)(o.world_size > 0 ? o.world_size : 1));
    o.steps = (int)n;
    o.model = synthetic;
    o.trainer_path = out;
    if (drift_cli_progress_enabled()) o.progress = progress;

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
        rc = drift_synth_record(&o, &err);
    }
    drift_plan_free(&tp);
    drift_plan_free(&rp);
    if (rc) return drift_cli_report("record", &err);
    char rpath[4096];
    drift_synth_rollout_path(out, rpath, sizeof rpath);
    fprintf(stderr, "drift record: wrote %s (trainer) and %s (rollout), %d steps\n", out, rpath, o.steps);
    return 0;
}
