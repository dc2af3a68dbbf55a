/* Subcommands whose implementation has not landed yet say so plainly and
 * exit 2 rather than pretending (drift merge: the multi-GPU issue). Each is a
 * weak symbol: a real cmd_<name>.c overrides it at link time. */
#include <stdio.h>

#include "cli/commands.h"

#define PENDING(fn, name)                                                    \
    __attribute__((weak)) int fn(int argc, char **argv) {                    \
        (void)argc;                                                          \
        (void)argv;                                                          \
        fprintf(stderr, "drift %s: not available in this build yet\n", name); \
        return 2;                                                            \
    }

PENDING(drift_cmd_merge, "merge")
