/* drift replay: re-run a recorded forward under a plan, per-site metrics. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/report.h"
#include "replay/dist/comm.h"
#include "replay/drive/replay_trace.h"

static const char *const HELP =
    "usage: drift replay TRACE (--plan P | flags) [--side trainer|rollout]\n"
    "                    [--ref trainer|rollout|oracle|TRACE2] [--device cpu|cuda[:N]]\n"
    "                    [--devices D1,D2,... [--fsdp]] [--mpi]\n"
    "                    [--steps A:B] [--output-only] [-o RESULT] [--json]\n"
    "\n"
    "TRACE may be a drift merge index: INDEX reads its lowest rank, INDEX#rank=N rank N.\n"
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
    "  -o RESULT        write the metrics, log-prob metrics and the replayed output\n"
    "                   (output:noise_pred, per step) to a replay trace\n"
    "\n"
    "Several devices and ranks (the report is bit for bit the one-device one):\n"
    "  --devices LIST   e.g. cuda:0,cuda:1: the steps are dealt round-robin, one\n"
    "                   thread per device (own backend, parameters resident);\n"
    "                   metric partial sums reduced through NCCL (host memory for\n"
    "                   cpu,cpu,...), merged in step order\n"
    "  --fsdp           with --devices (or MPI): fp32 masters sharded over the\n"
    "                   devices as FSDP2 shards them, cast per the plan and\n"
    "                   all-gathered per wrap; the forward uses the gathered ones\n"
    "  --mpi            this process is one rank of an MPI job (implied when\n"
    "                   launched by mpirun/srun with more than one rank): each rank\n"
    "                   replays its share on --device (cuda: cuda:LOCAL_RANK,\n"
    "                   reduced through NCCL; cpu: through MPI); rank 0 prints\n"
    "                   and writes -o\n"
    "  With --devices or MPI a line on stderr gives the workers, the reduction and\n"
    "  the setup / steps / total seconds.\n"
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
    int json = 0, device_given = 0, mpi_flag = 0;
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
        } else if (strcmp(argv[i], "--fsdp") == 0) {
            o.fsdp = 1;
        } else if (strcmp(argv[i], "--mpi") == 0) {
            mpi_flag = 1;
        } else if ((m = drift_cli_opt(argc, argv, &i, "--devices", &v)) != 0) {
            if (m < 0) return drift_cli_usage_error("replay", "--devices needs a value (e.g. cuda:0,cuda:1)");
            o.devices = v;
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
            device_given = 1;
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
    if (o.devices && device_given) return drift_cli_usage_error("replay", "give --device or --devices, not both");
    if (o.devices && mpi_flag) return drift_cli_usage_error("replay", "--devices and --mpi do not combine (one device per rank)");
    drift_err err;
    drift_err_clear(&err);
    if (drift_replay_parse_steps(steps, &o.step_first, &o.step_last, &err)) return drift_cli_report("replay", &err);
    /* MPI: asked for, or launched by mpirun with more than one rank */
    int rank = 0, size = 1, local = 0, mpi_inited = 0;
    if (mpi_flag || drift_mpi_launched()) {
        if (!drift_mpi_available()) {
            if (mpi_flag) return drift_cli_usage_error("replay", "--mpi: this build of drift has no MPI (install libopenmpi-dev and reconfigure)");
            return drift_cli_usage_error("replay", "launched by an MPI launcher but this build of drift has no MPI: every rank would replay every step (reconfigure with MPI, or run without mpirun)");
        }
        if (drift_mpi_init(&err)) return drift_cli_report("replay", &err);
        mpi_inited = 1;
        drift_mpi_world(&rank, &size, &local);
        o.mpi = mpi_flag || size > 1;
        if (o.mpi && o.devices) {
            drift_mpi_finalize();
            return drift_cli_usage_error("replay", "--devices does not combine with MPI ranks (one device per rank)");
        }
    }
    if (o.fsdp && !o.devices && !o.mpi) {
        if (mpi_inited) drift_mpi_finalize();
        return drift_cli_usage_error("replay", "--fsdp shards over several devices: give --devices (or run under MPI)");
    }
    drift_plan plan;
    if (drift_cli_build_plan(&pa, &plan, &err)) {
        int prc = drift_cli_report("replay", &err);
        if (mpi_inited) drift_mpi_finalize(); /* every return after drift_mpi_init finalises */
        return prc;
    }
    o.plan = &plan;
    if (drift_cli_progress_enabled() && !json && rank == 0) o.progress = progress;
    drift_replay_report rep;
    int rc = drift_replay_trace(&o, &rep, &err);
    int code = 0;
    /* what the report shows as the backend */
    char shown[512];
    drift_replay_opts po = o;
    if (o.devices) po.backend = o.devices;
    if (o.mpi) {
        snprintf(shown, sizeof shown, "%s x %d MPI ranks", o.backend ? o.backend : "cpu", size);
        po.backend = shown;
    }
    if (rc) {
        code = drift_cli_report("replay", &err);
    } else if (rank != 0) {
        code = 0;
    } else {
        if (o.devices || o.mpi) {
            fprintf(stderr, "drift replay: %lld step%s on %d %s (%s), partial sums reduced through %s; setup %.3f s, steps %.3f s, total %.3f s\n",
                    (long long)rep.n_steps, rep.n_steps == 1 ? "" : "s", rep.workers, o.mpi ? "ranks" : "devices",
                    po.backend, rep.comm[0] ? rep.comm : "-", rep.setup_seconds, rep.steps_seconds, rep.seconds);
            if (o.fsdp)
                fprintf(stderr, "drift replay: fsdp: %lld parameters gathered in %lld all-gathers (%lld shard bytes per worker, %lld gathered)\n",
                        (long long)rep.fsdp_params, (long long)rep.fsdp_collectives, (long long)rep.fsdp_shard_bytes,
                        (long long)rep.fsdp_gathered_bytes);
        }
        if (json) code = drift_report_replay_json(&po, &rep, stdout);
        else drift_report_replay_text(&po, &rep, stdout);
    }
    if (mpi_inited) drift_mpi_finalize();
    drift_replay_report_free(&rep);
    drift_plan_free(&plan);
    return code;
}
