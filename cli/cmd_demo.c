/* drift demo: the embedded default. A synthetic tiny-dit frozen-weight run
 * with a planted cause of drift, replayed and bisected. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/args.h"
#include "cli/bisect_cli.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/report.h"
#include "replay/drive/replay_trace.h"
#include "replay/drive/synth.h"

static const char *const CAUSE_CHOICES[] = {"norm2", "rope", NULL};

static const drift_cli_opt_spec OPTS[] = {
    {"--out", NULL, "DIR", "where the traces and plans go (default ./drift-demo)", NULL, 0},
    {"--device", NULL, "D", "cpu (default), cuda or cuda:N", NULL, 0},
    {"--cause", NULL, "C", "norm2 (default): the trainer keeps *.norm2.* in fp32 (Wan's fp32\n"
                           "island), the rollout rounds it to bf16; rope: same plan, but the rollout\n"
                           "builds the RoPE table in fp32 on the device, the trainer in fp64 on the host",
     CAUSE_CHOICES, 0},
    {"--steps", NULL, "N", "denoising steps (1..1000, default 4)", NULL, 0},
    {0}};

static const drift_cli_cmd_spec SPEC = {
    "demo",
    "[--out DIR] [--device cpu|cuda[:N]] [--cause norm2|rope] [--steps N]",
    "Records a synthetic frozen-weight debug run of tiny-dit with a planted cause\n"
    "of drift, replays it against the rollout, prints the per-layer table in\n"
    "execution order with the first divergent site marked, then bisects the\n"
    "difference between the two plans down to its name.\n",
    OPTS,
    NULL,
    0,
    0,
    "DIR belongs to the demo: it replaces the four files it writes there\n"
    "(demo.h5, demo.rollout.h5, trainer_plan.json, rollout_plan.json) and nothing else.\n",
    "0 done, 2 bad usage or a step failed",
    "demo --cause rope --out /tmp/drift-demo"};

static const char *const TRAINER_PLAN =
    "{\"name\": \"wan2_2\", \"fsdp_master_dtype\": \"fp32\", \"fsdp_reduce_dtype\": \"fp32\","
    " \"diffusion_forward_dtype\": \"bf16\", \"sglang_dit_precision\": \"bf16\","
    " \"input_dtype_policy\": {\"latents\": null, \"cond\": null, \"timestep\": null},"
    " \"param_dtype_patterns\": [[\"*.norm2.*\", \"fp32\"]]}";
static const char *const ROLLOUT_PLAN_NORM2 =
    "{\"name\": \"wan2_2_no_norm2\", \"fsdp_master_dtype\": \"fp32\", \"fsdp_reduce_dtype\": \"fp32\","
    " \"diffusion_forward_dtype\": \"bf16\", \"sglang_dit_precision\": \"bf16\","
    " \"input_dtype_policy\": {\"latents\": null, \"cond\": null, \"timestep\": null},"
    " \"param_dtype_patterns\": []}";
static const char *const ROLLOUT_PLAN_ROPE =
    "{\"name\": \"wan2_2_rope_device\", \"fsdp_master_dtype\": \"fp32\", \"fsdp_reduce_dtype\": \"fp32\","
    " \"diffusion_forward_dtype\": \"bf16\", \"sglang_dit_precision\": \"bf16\","
    " \"input_dtype_policy\": {\"latents\": null, \"cond\": null, \"timestep\": null},"
    " \"param_dtype_patterns\": [[\"*.norm2.*\", \"fp32\"]], \"buffer_provenance\": {\"rope\": \"device\"}}";

static int write_file(const char *path, const char *text, drift_err *err) {
    FILE *f = fopen(path, "w");
    if (!f) return drift_err_set(err, DRIFT_E_IO, path, "cannot write: %s", strerror(errno));
    fputs(text, f);
    fputc('\n', f);
    if (fclose(f) != 0) return drift_err_set(err, DRIFT_E_IO, path, "cannot write: %s", strerror(errno));
    return DRIFT_OK;
}

int drift_cmd_demo(int argc, char **argv) {
    drift_cli_args a;
    int code = 0;
    if (drift_cli_args_parse(&SPEC, argc, argv, &a, &code)) return code;
    const char *dir = drift_cli_args_get(&a, "--out"), *device = drift_cli_args_get(&a, "--device");
    const char *cause = drift_cli_args_get(&a, "--cause"), *steps_s = drift_cli_args_get(&a, "--steps");
    drift_cli_args_free(&a);
    if (!dir) dir = "drift-demo";
    if (!device) device = "cpu";
    if (!cause) cause = "norm2";
    if (!steps_s) steps_s = "4";
    /* a device this build cannot use fails before anything is printed or written */
    if (drift_cli_check_device("demo", "--device", device)) return 2;
    int rope = 0;
    if (strcmp(cause, "rope") == 0) rope = 1;
    char *end = NULL;
    long steps = strtol(steps_s, &end, 10);
    if (!end || *end || steps < 1 || steps > 1000) return drift_cli_usage_error("demo", "--steps: expected 1..1000, got '%s'", steps_s);

    drift_err err;
    drift_err_clear(&err);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        drift_err_set(&err, DRIFT_E_IO, dir, "cannot create the output directory: %s", strerror(errno));
        return drift_cli_report("demo", &err);
    }
    char tplan[4096], rplan[4096], trace[4096], rtrace[4096];
    snprintf(tplan, sizeof tplan, "%s/trainer_plan.json", dir);
    snprintf(rplan, sizeof rplan, "%s/rollout_plan.json", dir);
    snprintf(trace, sizeof trace, "%s/demo.h5", dir);
    drift_synth_rollout_path(trace, rtrace, sizeof rtrace);
    drift_plan tp, rp;
    drift_plan_init(&tp);
    drift_plan_init(&rp);
    int rc = write_file(tplan, TRAINER_PLAN, &err);
    if (!rc) rc = write_file(rplan, rope ? ROLLOUT_PLAN_ROPE : ROLLOUT_PLAN_NORM2, &err);
    if (!rc) rc = drift_cli_load_plan(tplan, &tp, &err);
    if (!rc) rc = drift_cli_load_plan(rplan, &rp, &err);
    if (rc) goto fail;

    printf("drift demo: a frozen-weight debug run of tiny-dit with a planted cause of drift\n");
    if (rope)
        printf("  planted: the rollout builds the RoPE table in fp32 on the device, the trainer in fp64 on the host\n\n");
    else
        printf("  planted: the trainer keeps *.norm2.* in fp32 (plan %s), the rollout rounds it to bf16 (plan %s)\n\n",
               tp.name, rp.name);

    printf("[1/3] record: %ld denoising steps, both sides, every site -> %s, %s\n", steps, trace, rtrace);
    drift_synth_opts so;
    drift_synth_opts_init(&so);
    /* RoPE tables built in fp32 differ from the fp64-built ones by fp32 ULPs
     * that grow with the position: 32 frames give positions up to 31 on the
     * time axis, enough for the rounding of q and k to flip. */
    so.model = rope ? "tiny-dit:frames=32" : "tiny-dit";
    so.steps = (int)steps;
    so.trainer_plan = &tp;
    so.rollout_plan = &rp;
    so.trainer_path = trace;
    so.rollout_path = rtrace;
    so.backend = device;
    if ((rc = drift_synth_record(&so, &err))) goto fail;

    printf("[2/3] replay: the trainer's plan on %s, compared site by site with the recorded rollout\n\n", device);
    drift_replay_opts ro;
    drift_replay_opts_init(&ro);
    ro.trace = trace;
    ro.plan = &tp;
    ro.ref = DRIFT_REF_ROLLOUT;
    ro.ref_path = rtrace;
    ro.backend = device;
    drift_replay_report rep;
    if ((rc = drift_replay_trace(&ro, &rep, &err))) {
        drift_replay_report_free(&rep);
        goto fail;
    }
    drift_report_replay_text(&ro, &rep, stdout);
    const char *first = NULL;
    for (size_t i = 0; i < rep.cmp.n && !first; i++)
        if (rep.cmp.e[i].first_divergent) first = rep.cmp.e[i].site;
    if (first)
        printf("\n=> the two sides agree bit for bit up to %s, where they first diverge.\n", first);
    else
        printf("\n=> the two sides agree bit for bit at every site of every step.\n");
    drift_replay_report_free(&rep);

    printf("\n[3/3] bisect: which difference between the rollout plan (good) and the trainer plan (bad) causes it?\n\n");
    drift_bisect_cli_opts bo;
    drift_bisect_cli_opts_init(&bo);
    bo.trace = trace;
    bo.good = &rp;
    bo.bad = &tp;
    bo.backend = device;
    bo.lib.all = 1;
    if ((rc = drift_bisect_cli_run(&bo, stdout, &err))) goto fail;
    if (!rope) {
        printf("\n... and per parameter: which of the tensors the pattern covers change the output?\n\n");
        bo.granularity_param = 1;
        if ((rc = drift_bisect_cli_run(&bo, stdout, &err))) goto fail;
    }
    printf("\nnext: drift top %s --against %s   (dashboard), drift replay %s --plan %s --ref oracle\n", trace, rtrace,
           trace, tplan);
    drift_plan_free(&tp);
    drift_plan_free(&rp);
    return 0;
fail:
    drift_plan_free(&tp);
    drift_plan_free(&rp);
    return drift_cli_report("demo", &err);
}
