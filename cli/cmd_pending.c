/* Subcommands whose implementation has not landed yet say so plainly and
 * exit 2 rather than pretending. Each is a weak symbol: the real
 * cmd_<name>.c overrides it at link time, and this file shrinks to nothing. */
#include <stdio.h>

#include "cli/commands.h"

#define PENDING(fn, name)                                                    \
    __attribute__((weak)) int fn(int argc, char **argv) {                    \
        (void)argc;                                                          \
        (void)argv;                                                          \
        fprintf(stderr, "drift %s: not available in this build yet\n", name); \
        return 2;                                                            \
    }

PENDING(drift_cmd_demo, "demo")
PENDING(drift_cmd_record, "record")
PENDING(drift_cmd_ls, "ls")
PENDING(drift_cmd_check, "check")
PENDING(drift_cmd_plan, "plan")
PENDING(drift_cmd_replay, "replay")
PENDING(drift_cmd_compare, "compare")
PENDING(drift_cmd_bisect, "bisect")
PENDING(drift_cmd_top, "top")
PENDING(drift_cmd_merge, "merge")
