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

/* Errors under --json (docs/cli.md): once on, every error that ends the
 * command with exit 2 is also printed on stdout as one JSON document
 * {"error": {"command", "code", "exit", "field", "message"}}; an exit 1 (a
 * check failed) keeps the command's own document. main() turns it on when
 * argv holds --json, before the command parses anything. */
void drift_cli_set_json_errors(int on);
int drift_cli_json_errors(void);

/* Prints "drift <cmd>: <where>: <msg>" to stderr (and the JSON error, see
 * above) and returns the exit code for err->code. */
int drift_cli_report(const char *cmd, const drift_err *err);
/* s made safe for a terminal (text read from a file): control characters,
 * DEL, C1 controls and invalid UTF-8 become \xNN; written into buf (owned by
 * the caller), truncated with "..." when it does not fit; returns buf. */
const char *drift_cli_printable(const char *s, char *buf, size_t sz);
/* Prints "drift <cmd>: <msg>" and the hint to try --help; returns 2. */
int drift_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same with the field (an option name) the error is about, for --json. */
int drift_cli_usage_error_field(const char *cmd, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* 1 if stderr is a terminal and --json is off (progress is shown only then). */
int drift_cli_progress_enabled(void);

/* Output files (docs/cli.md "Outputs"): 0 when path may be written; else
 * reports for cmd that path exists ("give --force to replace it") and
 * returns 2. A directory is refused even with force. */
int drift_cli_check_output(const char *cmd, const char *field, const char *path, int force);
/* Input files: 0 when path (a "#rank=N" suffix allowed) names an existing
 * regular file; else reports "no such file" / "is a directory" and returns 2. */
int drift_cli_check_input(const char *cmd, const char *field, const char *path);
/* A --device value: a backend spec whose kind is cpu, ref, cuda or ref-cuda
 * (cuda:N, cuda:0:kernels=torch, cpu:threads=4: the backend checks the rest),
 * the CUDA kinds only in a CUDA build. Returns 0, or reports and returns 2. */
int drift_cli_check_device(const char *cmd, const char *field, const char *value);
/* A --devices list: comma-separated cpu, cuda or cuda:N, none empty (the
 * spelling only; the replay judges mixes and CUDA availability). */
int drift_cli_check_devices(const char *cmd, const char *field, const char *list);

#endif
