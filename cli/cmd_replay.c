/* drift replay: re-run a recorded forward under a plan, per-site metrics. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli_util.h"
#include "cli/kernels_opt.h"
#include "cli/libraries_pick.h"
#include "cli/commands.h"
#include "cli/load_report.h"
#include "cli/progress.h"
#include "cli/replay_csv.h"
#include "cli/report.h"
#include "cli/trace_args.h"
#include "replay/dist/comm.h"
#include "replay/drive/replay_trace.h"
#include "replay/drive/synth.h" /* drift_synth_rollout_path */

static const char *const REF_CHOICES[] = {"trainer", "rollout", "oracle", NULL};
static const char *const SIDE_CHOICES[] = {"trainer", "rollout", NULL};
static const char *const FORMAT_CHOICES[] = {"text", "csv", NULL};

static const drift_cli_opt_spec OPTS[] = {
    {"--plan", NULL, "P", "the dtype plan (JSON); default: the plan TRACE was recorded with", NULL, 0},
    DRIFT_CLI_PLAN_FLAG_SPECS,
    {"--side", NULL, "S", "which forward dtype of the plan applies (default trainer)", SIDE_CHOICES, 0},
    {"--ref", NULL, "REF", "trainer (default) | rollout | oracle | PATH of another trace", NULL, 0},
    {"--device", NULL, "D", "cpu (default), cuda or cuda:N", NULL, 0},
    {"--devices", NULL, "LIST", "e.g. cuda:0,cuda:1: steps dealt round-robin, one thread per device", NULL, 0},
    DRIFT_CLI_KERNELS_SPEC,
    DRIFT_CLI_LIBRARIES_SPEC,
    {"--fsdp", NULL, NULL, "with --devices (or MPI): shard the fp32 masters as FSDP2 does", NULL, 0},
    {"--mpi", NULL, NULL, "this process is one rank of an MPI job", NULL, 0},
    {"--steps", NULL, "A:B", "trace steps to replay, inclusive (A:B, A, A:, :B); out of range: exit 2", NULL, 0},
    {"--output-only", NULL, NULL, "compare only output:noise_pred (faster)", NULL, 0},
    {"--weights-root", NULL, "DIR", "where the checkpoint of a trace recorded with parameters by reference\n"
                                    "lives now (default: the root recorded in the trace); every tensor's\n"
                                    "content hash is checked (exit 2 naming tensor and file)", NULL, 0},
    {"--dump-nodes", NULL, "DIR", "write every node's value of the captured graph under DIR (stepN/NAME.f32,\n"
                                  "index.tsv), for drift_recorder.node_parity: which node torch computes\n"
                                  "otherwise (docs/aten-graph.md)", NULL, 0},
    {"--allow-mismatch", NULL, NULL, "compare with a --ref trace of another family, step set or site shapes\n"
                                     "(a warning instead of exit 2)", NULL, 0},
    {"--out", "-o", "RESULT", "write metrics, log-prob metrics and the replayed output to a replay trace", NULL, 0},
    {"--force", NULL, NULL, "let -o replace an existing file", NULL, 0},
    {"--atol", NULL, "X", "exit 1 when output:noise_pred's max_abs_diff exceeds X", NULL, 0},
    {"--rtol", NULL, "X", "exit 1 when output:noise_pred's rel_max exceeds X", NULL, 0},
    {"--max-floor", NULL, "K", "exit 1 when output:noise_pred's mean_abs_diff exceeds K x the noise\n"
                               "floor (measured: two more output-only replays, one with the latents\n"
                               "moved by one ULP)", NULL, 0},
    {"--format", NULL, "F", "the per-site table as text (default) or csv", FORMAT_CHOICES, 0},
    {"--json", NULL, NULL, "one JSON document on stdout (errors too)", NULL, 0},
    {0}};

static const drift_cli_cmd_spec SPEC = {
    "replay",
    "TRACE [--plan P | flags] [--side trainer|rollout]\n"
    "                    [--ref trainer|rollout|oracle|TRACE2 [--allow-mismatch]] [--device cpu|cuda[:N]]\n"
    "                    [--devices D1,D2,... [--fsdp]] [--kernels exact|torch] [--libraries recorded|system|DIR]\n"
    "                    [--mpi] [--steps A:B]\n"
    "                    [--output-only] [--weights-root DIR] [--dump-nodes DIR]\n"
    "                    [-o RESULT [--force]] [--atol X] [--rtol X] [--max-floor K]\n"
    "                    [--format text|csv] [--json]\n",
    "Re-runs the forward recorded in TRACE under a dtype plan, from the trace's\n"
    "fp32 masters and the boundary inputs as they were handed over, and compares\n"
    "every recorded site with a reference, step by step, in execution order:\n"
    "  --ref trainer   the trace's own sites (default): with the plan it was\n"
    "                  recorded with, a same-backend replay is bitwise equal\n"
    "  --ref rollout   the rollout side (NAME.rollout.h5 beside TRACE)\n"
    "  --ref oracle    the same graph in fp64; also each side's RMSE to it (with\n"
    "                  --device cuda[:N] on that GPU, ref-cuda:N; on the host\n"
    "                  when DRIFT_ORACLE_DEVICE=cpu)\n"
    "  --ref PATH      any other trace\n"
    "The first divergent site of each step (the first one not bitwise equal) is\n"
    "where a plan difference first touches the numbers. Without --plan (and\n"
    "without plan flags) the plan recorded in TRACE is used, and stderr says so.\n"
    "TRACE may be a drift merge index: INDEX reads its lowest rank, INDEX#rank=N rank N.\n"
    "On a GPU the report names the kernel profile (--kernels) and compares the\n"
    "GPU and library builds (cuBLASLt, cuBLAS, cuDNN) with those the trace\n"
    "recorded: when they differ, bitwise equality with the recording is not\n"
    "expected, and the report says so. On CUDA it first loads the cuBLASLt and\n"
    "cuDNN the recording used when they are on this machine (--libraries; one\n"
    "stderr line says which files were loaded).\n",
    OPTS,
    "TRACE",
    1,
    1,
    "Several devices and ranks (the report is bit for bit the one-device one):\n"
    "--devices deals the steps round-robin, one thread per device (own backend,\n"
    "parameters resident); metric partial sums are reduced through NCCL (host\n"
    "memory for cpu,cpu,...) and merged in step order. --fsdp shards the fp32\n"
    "masters over the devices, casts them per the plan and all-gathers per wrap.\n"
    "--mpi (implied under mpirun/srun with more than one rank): each rank replays\n"
    "its share on --device (cuda: cuda:LOCAL_RANK); rank 0 prints and writes -o.\n"
    "With --devices or MPI a line on stderr gives the workers, the reduction and\n"
    "the setup / steps / total seconds. -o never replaces TRACE or the reference.\n",
    "0 replayed (and within --atol/--rtol/--max-floor), 1 one of them exceeded, 2 bad usage or bad input",
    "replay run.h5 --plan plans/wan2_2.json --ref rollout --steps 0:3"};

static double parse_tol(const char *name, const char *v, int *bad) {
    if (!v) return -1;
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || !end || *end || !(x >= 0) || isinf(x)) {
        *bad = drift_cli_usage_error_field("replay", name, "%s: expected a number >= 0, got '%s'", name, v);
        return -1;
    }
    return x;
}

/* The noise floor of o's replay (DESIGN.md s7b): output:noise_pred's
 * mean |diff| between the replay and the same replay with one latent element
 * moved by one ULP, through a temporary replay trace. */
static int measure_floor(const drift_replay_opts *base, double *floor, drift_err *err) {
    const char *tmp = getenv("TMPDIR");
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/drift-floor-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) return drift_err_set(err, DRIFT_E_IO, dir, "--max-floor: cannot create a temporary directory: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/replay.h5", dir);
    drift_replay_opts a = *base;
    a.ref = DRIFT_REF_TRAINER;
    a.ref_path = NULL;
    a.sites = 0;
    a.out_path = path;
    drift_replay_report rep;
    int rc = drift_replay_trace(&a, &rep, err);
    drift_replay_report_free(&rep);
    if (!rc) {
        drift_replay_opts b = *base;
        b.ref = DRIFT_REF_TRACE;
        b.ref_path = path;
        b.sites = 0;
        b.out_path = NULL;
        b.nudge_latents = 1;
        rc = drift_replay_trace(&b, &rep, err);
        const drift_sitecmp_entry *e = NULL;
        for (size_t i = 0; !rc && i < rep.cmp.n && !e; i++)
            if (strcmp(rep.cmp.e[i].site, DRIFT_SITE_NOISE_PRED) == 0) e = &rep.cmp.e[i];
        if (!rc && !e) rc = drift_err_set(err, DRIFT_E_INPUT, base->trace, "--max-floor: no output:noise_pred to measure the floor on");
        if (!rc) {
            drift_site_metrics m;
            drift_sitecmp_finish(&rep.cmp, e, &m);
            *floor = m.mean_abs_diff;
        }
        drift_replay_report_free(&rep);
    }
    remove(path);
    rmdir(dir);
    return rc;
}

static int check_floor(const drift_replay_report *rep, double k, double floor) {
    for (size_t i = 0; i < rep->cmp.n; i++) {
        if (strcmp(rep->cmp.e[i].site, DRIFT_SITE_NOISE_PRED) != 0) continue;
        drift_site_metrics m;
        drift_sitecmp_finish(&rep->cmp, &rep->cmp.e[i], &m);
        double units = drift_report_floor_units(m.mean_abs_diff, floor);
        fprintf(stderr, "drift replay: output:noise_pred: mean_abs_diff %.6g = %.4g x the noise floor (%.6g)%s\n", m.mean_abs_diff,
                units, floor, units > k ? "" : ", within --max-floor");
        if (units > k) {
            fprintf(stderr, "drift replay: output:noise_pred: %.4g x the noise floor exceeds --max-floor %g\n", units, k);
            return 1;
        }
        return 0;
    }
    drift_err err;
    drift_err_set(&err, DRIFT_E_INPUT, DRIFT_SITE_NOISE_PRED, "--max-floor: the site was not compared (nothing to check)");
    return drift_cli_report("replay", &err);
}

/* 1 when a and b name the same existing file. */
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return a && b && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int drift_cmd_replay(int argc, char **argv) {
    drift_replay_opts o;
    drift_replay_opts_init(&o);
    drift_cli_args a;
    int code = 0;
    if (drift_cli_args_parse(&SPEC, argc, argv, &a, &code)) return code;
    drift_cli_plan_args pa;
    if (drift_cli_args_plan(&a, "--plan", &pa)) {
        drift_cli_args_free(&a);
        return 2;
    }
    const char *ref = drift_cli_args_get(&a, "--ref"), *steps = drift_cli_args_get(&a, "--steps");
    const char *side = drift_cli_args_get(&a, "--side"), *format = drift_cli_args_get(&a, "--format");
    int json = drift_cli_args_count(&a, "--json") > 0, mpi_flag = drift_cli_args_count(&a, "--mpi") > 0;
    int force = drift_cli_args_count(&a, "--force") > 0;
    int allow_mismatch = drift_cli_args_count(&a, "--allow-mismatch") > 0;
    if (drift_cli_args_get(&a, "--weights-root")) o.weights_root = drift_cli_args_get(&a, "--weights-root");
    int device_given = drift_cli_args_get(&a, "--device") != NULL;
    const char *kernels = drift_cli_args_get(&a, "--kernels");
    const char *libraries = drift_cli_args_get(&a, "--libraries");
    int bad = 0;
    double atol = parse_tol("--atol", drift_cli_args_get(&a, "--atol"), &bad);
    double rtol = bad ? -1 : parse_tol("--rtol", drift_cli_args_get(&a, "--rtol"), &bad);
    double max_floor = bad ? -1 : parse_tol("--max-floor", drift_cli_args_get(&a, "--max-floor"), &bad);
    o.trace = a.pos[0];
    if (device_given) o.backend = drift_cli_args_get(&a, "--device");
    o.devices = drift_cli_args_get(&a, "--devices");
    o.out_path = drift_cli_args_get(&a, "--out");
    o.fsdp = drift_cli_args_count(&a, "--fsdp") > 0;
    if (drift_cli_args_count(&a, "--output-only")) o.sites = 0;
    const char *dump = drift_cli_args_get(&a, "--dump-nodes");
    if (dump && !bad) { /* the importer and the replay read these (replay/drive/node_dump.h) */
        struct stat ds;
        if (mkdir(dump, 0777) != 0 && (stat(dump, &ds) != 0 || !S_ISDIR(ds.st_mode)))
            bad = drift_cli_usage_error_field("replay", "--dump-nodes", "--dump-nodes %s: cannot create the folder (%s)", dump,
                                              strerror(errno));
        else if (setenv("DRIFT_NODE_SITES", "1", 1) || setenv("DRIFT_NODE_DUMP", dump, 1))
            bad = drift_cli_usage_error_field("replay", "--dump-nodes", "cannot set the environment");
    }
    drift_cli_args_free(&a);
    if (bad) return bad;
    if (json && format && strcmp(format, "text") != 0)
        return drift_cli_usage_error_field("replay", "--format", "--format %s and --json: give one", format);
    if (drift_cli_check_input("replay", "TRACE", o.trace)) return 2;
    drift_cli_kernels kp;
    if (drift_cli_kernels_pick_trace("replay", o.devices ? o.devices : o.backend, kernels, o.trace, &kp)) return 2;
    o.kernels = kp.profile;
    if (o.backend && drift_cli_check_device("replay", "--device", o.backend)) return 2;
    if (o.devices && drift_cli_check_devices("replay", "--devices", o.devices)) return 2;
    /* before anything else is opened: may re-execute drift with the recording's cuBLASLt/cuDNN */
    if (drift_cli_libraries_apply("replay", o.trace, libraries, o.devices ? o.devices : o.backend)) return 2;
    if (side) o.side = strcmp(side, "rollout") == 0 ? DRIFT_SIDE_ROLLOUT : DRIFT_SIDE_TRAINER;
    if (ref) {
        if (strcmp(ref, "trainer") == 0) o.ref = DRIFT_REF_TRAINER;
        else if (strcmp(ref, "rollout") == 0) o.ref = DRIFT_REF_ROLLOUT;
        else if (strcmp(ref, "oracle") == 0) o.ref = DRIFT_REF_ORACLE;
        else {
            struct stat st;
            if (stat(ref, &st) != 0) {
                /* neither a choice nor a file: most likely a misspelt choice */
                const char *s = drift_cli_suggest(ref, REF_CHOICES, 3);
                return drift_cli_usage_error_field("replay", "--ref",
                                                   "--ref: expected trainer, rollout, oracle or the path of a trace, got '%s'%s%s%s",
                                                   ref, s ? " (did you mean '" : " (no such file)", s ? s : "", s ? "'?)" : "");
            }
            if (drift_cli_check_input("replay", "--ref", ref)) return 2;
            o.ref = DRIFT_REF_TRACE;
            o.ref_path = ref;
        }
    }
    if (o.out_path) {
        char sib[4096];
        drift_synth_rollout_path(o.trace, sib, sizeof sib);
        /* TRACE's recorded rollout is refused whether or not this replay compares with it: a result
         * written over the other side's recording destroys what every later comparison needs */
        if (same_file(o.out_path, o.trace) || same_file(o.out_path, o.ref_path) || same_file(o.out_path, sib))
            return drift_cli_usage_error_field("replay", "--out", "-o %s: is an input of this replay (TRACE, its reference "
                                               "or TRACE's recorded rollout); write the result elsewhere", o.out_path);
        if (drift_cli_check_output("replay", "-o", o.out_path, force)) return 2;
    }
    /* --ref oracle on a GPU replay runs on that GPU (ref-cuda:N); DRIFT_ORACLE_DEVICE=cpu keeps it on the host */
    const char *oracle_dev = getenv("DRIFT_ORACLE_DEVICE");
    o.oracle_on_host = oracle_dev && strcmp(oracle_dev, "cpu") == 0;
    if (o.devices && device_given) return drift_cli_usage_error("replay", "give --device or --devices, not both");
    if (o.devices && mpi_flag) return drift_cli_usage_error("replay", "--devices and --mpi do not combine (one device per rank)");
    drift_err err;
    drift_err_clear(&err);
    if (drift_cli_resolve_steps("replay", steps, o.trace, &o.step_first, &o.step_last)) return 2;
    if (o.ref == DRIFT_REF_TRACE &&
        drift_cli_check_ref_match("replay", o.trace, o.ref_path, o.step_first, o.step_last, allow_mismatch))
        return 2;
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
    if (max_floor >= 0 && o.mpi) {
        drift_mpi_finalize();
        return drift_cli_usage_error_field("replay", "--max-floor", "--max-floor does not combine with MPI ranks yet (use --devices)");
    }
    if (o.fsdp && !o.devices && !o.mpi) {
        if (mpi_inited) drift_mpi_finalize();
        return drift_cli_usage_error("replay", "--fsdp shards over several devices: give --devices (or run under MPI)");
    }
    drift_plan plan;
    if (!pa.file && pa.n_flags == 0) {
        if (drift_cli_trace_plan("replay", o.trace, &plan)) {
            if (mpi_inited) drift_mpi_finalize();
            return 2;
        }
        char pn_safe[1024]; /* a name read from the trace */
        if (rank == 0)
            fprintf(stderr, "drift replay: no --plan given: replaying the plan %s was recorded with ('%s')\n", o.trace,
                    plan.name[0] ? drift_cli_printable(plan.name, pn_safe, sizeof pn_safe) : "unnamed");
    } else if (drift_cli_build_plan(&pa, &plan, &err)) {
        int prc = drift_cli_report("replay", &err);
        if (mpi_inited) drift_mpi_finalize(); /* every return after drift_mpi_init finalises */
        return prc;
    }
    o.plan = &plan;
    drift_cli_progress *prog = rank == 0 ? drift_cli_progress_start("replay", "loading the trace") : NULL;
    if (prog) {
        o.progress = drift_cli_progress_cb;
        o.progress_user = prog;
    }
    drift_replay_report rep;
    int rc = drift_replay_trace(&o, &rep, &err);
    snprintf(rep.kernels_why, sizeof rep.kernels_why, "%s", kp.why);
    double floor = NAN;
    if (!rc && max_floor >= 0) {
        drift_cli_progress_phase(prog, "measuring the noise floor");
        drift_replay_opts fo = o;
        fo.progress = NULL; /* two short replays: the phase says what runs */
        rc = measure_floor(&fo, &floor, &err);
    }
    drift_cli_progress_finish(prog);
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
        drift_cli_print_load("replay", &rep);
        drift_report_checks ck = {.atol = atol, .rtol = rtol, .max_floor = max_floor, .has_floor = max_floor >= 0,
                                  .floor = floor};
        if (json) {
            code = drift_report_replay_json_checks(&po, &rep, &ck, stdout);
        } else if (format && strcmp(format, "csv") == 0) {
            drift_replay_csv_write_floor(&rep, ck.has_floor ? floor : NAN, stdout);
        } else {
            drift_report_replay_text(&po, &rep, stdout);
            drift_report_floor_text(&rep, &ck, stdout);
        }
        if (!code && (atol >= 0 || rtol >= 0)) code = drift_replay_check_tolerance("replay", &rep, NULL, atol, rtol);
        if (max_floor >= 0) {
            int c2 = check_floor(&rep, max_floor, floor);
            if (c2 > code) code = c2;
        }
    }
    if (mpi_inited) drift_mpi_finalize();
    drift_replay_report_free(&rep);
    drift_plan_free(&plan);
    return code;
}
