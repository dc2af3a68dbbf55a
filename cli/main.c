/* The `drift` command: subcommand dispatch (DESIGN.md s9). */
#define _DEFAULT_SOURCE /* setenv */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#include "cli/args.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/libraries_pick.h"
#include "formats/trace.h"
#include "formats/trace_index.h"
#include "kernels/backend.h"

typedef struct cmd_entry {
    const char *name;
    drift_cmd_fn fn;
    const char *summary;
} cmd_entry;

static const cmd_entry commands[] = {
    {"demo", drift_cmd_demo, "make a synthetic run with a planted cause of drift, replay it, show where it starts"},
    {"record", drift_cmd_record, "record a synthetic frozen-weight two-sided run into a trace"},
    {"ls", drift_cmd_ls, "list what a trace holds"},
    {"check", drift_cmd_check, "validate a trace; --repair makes a killed writer's file readable"},
    {"plan", drift_cmd_plan, "compile a dtype plan against a model's parameters"},
    {"replay", drift_cmd_replay, "re-run a recorded forward under a dtype plan, per-site metrics"},
    {"compare", drift_cmd_compare, "per-site metrics between two traces"},
    {"bisect", drift_cmd_bisect, "find the minimal set of plan differences that causes the drift"},
    {"invariance", drift_cmd_invariance, "does a sample's forward change with its batch (size, position, CFG), and which op makes it"},
    {"top", drift_cmd_top, "live dashboard (ncurses, --against: two traces live) or --batch table"},
    {"merge", drift_cmd_merge, "one index file over per-rank traces"},
    {"report", drift_cmd_report, "a self-contained HTML report: heatmap, first divergence, curves, plans, culprits"},
    {"weights", drift_cmd_weights, "write a model's seeded parameters as a sharded safetensors checkpoint"},
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: drift <command> [options]   (drift <command> --help for details)\n"
            "\n"
            "drift records, replays and bisects precision divergence between a diffusion\n"
            "trainer's forward and the rollout engine's forward.\n"
            "\n"
            "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f,
            "\n"
            "drift help CMD (or drift CMD --help) shows a command's options; the contract\n"
            "every command keeps (step ranges, outputs, --json, exit codes) is docs/cli.md.\n"
            "exit: 0 success, 1 a requested check failed, 2 bad usage or bad input\n"
            "options: --help, --version\n"
            "example: drift demo\n");
}

static const cmd_entry *find_cmd(const char *name) {
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(name, commands[i].name) == 0) return &commands[i];
    return NULL;
}

static int unknown_command(const char *name) {
    const char *names[sizeof commands / sizeof commands[0] + 1];
    size_t n = 0;
    for (; n < sizeof commands / sizeof commands[0]; n++) names[n] = commands[n].name;
    names[n++] = "help";
    const char *s = drift_cli_suggest(name, names, n);
    if (s) fprintf(stderr, "drift: unknown command '%s' (did you mean '%s'?)\n\n", name, s);
    else fprintf(stderr, "drift: unknown command '%s'\n\n", name);
    usage(stderr);
    return 2;
}

/* OpenBLAS starts one worker thread per core in its library constructor,
 * before main, and each maps a 128 MiB buffer, retrying forever when an
 * address-space limit (ulimit -v) refuses it: drift then hung even for
 * --version. Under such a limit drift re-executes itself once with
 * OPENBLAS_NUM_THREADS=1 (no worker threads at load, and exec ends the
 * spinning ones); the cpu backend sets the count it uses after checking the
 * space (kernels/cpu/cpu_blas_space.c). A count the user set is kept. */
static void blas_threads_reexec(char **argv) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return;
    if (getenv("OPENBLAS_NUM_THREADS") || getenv("DRIFT_BLAS_REEXEC")) return;
    if (setenv("OPENBLAS_NUM_THREADS", "1", 1) != 0 || setenv("DRIFT_BLAS_REEXEC", "1", 1) != 0) return;
    execv("/proc/self/exe", argv); /* returns only on failure: then go on as we are */
}

/* Sanitizer builds: libhdf5 1.10 leaks its metadata-cache entries when a
 * close fails on a full disk (docs/RELIABILITY.md, "Not drift's"); drift's
 * own allocations stay checked. Unused in other builds. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libhdf5\n"; }

int main(int argc, char **argv) {
    blas_threads_reexec(argv);
    drift_cli_libraries_set_argv(argv); /* --libraries re-executes drift (cli/libraries_pick.h) */
    drift_trace_process_init(); /* before any HDF5 call: no crash at exit after a failed close */
    signal(SIGXFSZ, SIG_IGN);   /* `ulimit -f`: a write past it fails (EFBIG) and is reported, not a kill */
    /* the library reads no environment: the host backends' thread count is set here */
    const char *threads = getenv("DRIFT_CPU_THREADS");
    if (threads && *threads) drift_backend_set_host_threads(atoi(threads));
    const char *outside = getenv("DRIFT_INDEX_ALLOW_OUTSIDE"); /* every command, as --allow-outside */
    if (outside && strcmp(outside, "1") == 0) drift_trace_index_allow_outside(1);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    /* under --json even an error found before a command parses is JSON (docs/cli.md) */
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--json") == 0) drift_cli_set_json_errors(1);
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || (strcmp(argv[1], "help") == 0 && argc == 2)) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "help") == 0) {
        /* drift help CMD [SUB]: the command's own --help */
        const cmd_entry *c = find_cmd(argv[2]);
        if (!c) return unknown_command(argv[2]);
        char *hargv[3] = {argv[2], argc > 3 ? argv[3] : "--help", "--help"};
        return c->fn(argc > 3 ? 3 : 2, hargv);
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("drift %s\n", DRIFT_VERSION);
        return 0;
    }
    const cmd_entry *c = find_cmd(argv[1]);
    if (c) return c->fn(argc - 1, argv + 1);
    return unknown_command(argv[1]);
}
