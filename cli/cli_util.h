/* Small helpers shared by the subcommands: option matching, plan assembly
 * from --plan FILE plus flag overlays, error printing. */
#ifndef DRIFT_CLI_UTIL_H
#define DRIFT_CLI_UTIL_H

#include <stdio.h>

#include "formats/err.h"
#include "formats/plan.h"

/* Matches argv[*i] against "--name VALUE" or "--name=VALUE". On a match sets
 * *value (borrowed from argv), advances *i past the value and returns 1; on
 * "--name" without a value returns -1 (caller reports usage); else 0. */
int drift_cli_opt(int argc, char **argv, int *i, const char *name, const char **value);

/* A plan given as --plan FILE and/or plan flags, in command-line order. */
#define DRIFT_CLI_MAX_PLAN_FLAGS 256
typedef struct drift_cli_plan_args {
    const char *file;
    int n_flags;
    const char *flag_name[DRIFT_CLI_MAX_PLAN_FLAGS];
    const char *flag_value[DRIFT_CLI_MAX_PLAN_FLAGS];
} drift_cli_plan_args;

/* If argv[*i] is --plan or a plan flag (drift_plan_is_flag), records it,
 * advances *i and returns 1; -1 on a missing value or too many flags; else 0.
 * plan_opt names the file option ("--plan", "--good", ...). */
int drift_cli_take_plan_arg(drift_cli_plan_args *a, const char *plan_opt, int argc, char **argv, int *i);
/* Builds the plan: the file (if any) then the flags over it. out must be
 * uninitialised or freed; on success the caller owns it (drift_plan_free). */
int drift_cli_build_plan(const drift_cli_plan_args *a, drift_plan *out, drift_err *err);
/* Loads a plan given as a file path (no flags). */
int drift_cli_load_plan(const char *path, drift_plan *out, drift_err *err);

/* Prints "drift <cmd>: <where>: <msg>" to stderr and returns the exit code
 * for err->code. */
int drift_cli_report(const char *cmd, const drift_err *err);
/* s made safe for a terminal (text read from a file): control characters,
 * DEL, C1 controls and invalid UTF-8 become \xNN; written into buf (owned by
 * the caller), truncated with "..." when it does not fit; returns buf. */
const char *drift_cli_printable(const char *s, char *buf, size_t sz);
/* Prints "drift <cmd>: <msg>" and the hint to try --help; returns 2. */
int drift_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 1 if stderr is a terminal (progress output is shown only then). */
int drift_cli_progress_enabled(void);

#endif
