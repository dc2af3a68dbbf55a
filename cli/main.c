/* The `drift` command: subcommand dispatch (DESIGN.md s9). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
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
    {"top", drift_cmd_top, "live dashboard (ncurses) or --batch table of a trace"},
    {"merge", drift_cmd_merge, "one index file over per-rank traces"},
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
            "exit codes: 0 success, 1 a requested check failed, 2 bad usage or bad input\n"
            "options: --help, --version\n");
}

int main(int argc, char **argv) {
    /* the library reads no environment: the host backends' thread count is set here */
    const char *threads = getenv("DRIFT_CPU_THREADS");
    if (threads && *threads) drift_backend_set_host_threads(atoi(threads));
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("drift %s\n", DRIFT_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "drift: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
