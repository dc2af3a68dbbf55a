/* One option table per command (docs/cli.md): the table parses argv, prints
 * --help (usage, description, every option, exit codes, an example), offers
 * did-you-mean for unknown options and enum values, and makes every usage
 * error the same shape: "drift CMD: FIELD: WHAT" on stderr, and under --json
 * also {"error": {...}} on stdout.
 *
 * Adopting it in a command:
 *   static const drift_cli_opt_spec OPTS[] = {
 *       {"--steps", NULL, "A:B", "trace steps (inclusive)", NULL, 0},
 *       {"--json", NULL, NULL, "one JSON document on stdout", NULL, 0},
 *       {0}};
 *   static const drift_cli_cmd_spec SPEC = {"replay", "TRACE [options]", "...", OPTS, "TRACE", 1, 1, ...};
 *   drift_cli_args a;
 *   int code;
 *   if (drift_cli_args_parse(&SPEC, argc, argv, &a, &code)) return code;
 *   const char *steps = drift_cli_args_get(&a, "--steps");
 *   ...
 *   drift_cli_args_free(&a); */
#ifndef DRIFT_CLI_ARGS_H
#define DRIFT_CLI_ARGS_H

#include <stddef.h>
#include <stdio.h>

#include "cli/cli_util.h"

enum {
    DRIFT_OPT_REPEAT = 1u,       /* may be given several times (all values kept, in order) */
    DRIFT_OPT_PLAN = 2u,         /* a plan flag (formats/plan.h): kept in command-line order with --plan */
    DRIFT_OPT_HIDDEN = 4u        /* accepted but not listed (aliases kept for old scripts) */
};

typedef struct drift_cli_opt_spec {
    const char *name;            /* "--steps"; NULL ends the table */
    const char *alias;           /* "-o", or NULL */
    const char *metavar;         /* "A:B" for an option with a value, NULL for a switch */
    const char *help;            /* one line; "\n" continues on an indented line */
    const char *const *choices;  /* NULL-terminated allowed values (checked, did-you-mean), or NULL */
    unsigned flags;              /* DRIFT_OPT_* */
} drift_cli_opt_spec;

typedef struct drift_cli_cmd_spec {
    const char *name;            /* "replay" (or "plan compile") */
    const char *usage;           /* after "usage: drift NAME ", may hold "\n" + indentation */
    const char *description;     /* paragraph(s) after the usage line; may be NULL */
    const drift_cli_opt_spec *opts;
    const char *positional;      /* metavar of the positional arguments ("TRACE"), NULL if none */
    int min_pos, max_pos;        /* counts allowed; max_pos < 0: unbounded */
    const char *notes;           /* printed after the options; may be NULL */
    const char *exit_codes;      /* "0 ..., 1 ..., 2 ..." (printed as "exit: ...") */
    const char *example;         /* one command line (printed as "example: drift ...") */
} drift_cli_cmd_spec;

typedef struct drift_cli_occurrence {
    const drift_cli_opt_spec *opt;
    const char *value;           /* borrowed from argv; NULL for a switch */
} drift_cli_occurrence;

typedef struct drift_cli_args {
    const drift_cli_cmd_spec *spec;
    drift_cli_occurrence *occ;   /* owned: every option given, in order */
    size_t n_occ;
    const char **pos;            /* owned array (strings borrowed from argv) */
    size_t n_pos;
} drift_cli_args;

/* The plan flags every plan-taking command accepts (DESIGN.md s5), for
 * drift_cli_opt_spec tables: DRIFT_CLI_PLAN_FLAG_SPECS expands to their
 * entries (with the DRIFT_OPT_PLAN flag). Their values are checked by
 * formats/plan.c, which names the allowed values and spelling hints. */
#define DRIFT_CLI_PLAN_FLAG_SPECS                                                                                   \
    {"--fsdp-master-dtype", NULL, "D", "plan flag: FSDP master dtype", NULL, DRIFT_OPT_PLAN},   \
    {"--fsdp-reduce-dtype", NULL, "D", "plan flag: gradient reduce dtype", NULL, DRIFT_OPT_PLAN}, \
    {"--diffusion-forward-dtype", NULL, "D", "plan flag: the trainer's forward (autocast) dtype",                 \
     NULL, DRIFT_OPT_PLAN},                                                                     \
    {"--sglang-dit-precision", NULL, "D", "plan flag: the rollout's forward dtype", NULL,       \
     DRIFT_OPT_PLAN},                                                                                              \
    {"--param-dtype", NULL, "PATTERN=DTYPE", "plan flag: a param_dtype_patterns entry (repeatable, appended)",    \
     NULL, DRIFT_OPT_PLAN | DRIFT_OPT_REPEAT},                                                                     \
    {"--input-dtype", NULL, "KEY=VALUE", "plan flag: input_dtype_policy entry (latents|cond|timestep =\n"         \
     "default|null|fp32|bf16|fp16; repeatable)", NULL, DRIFT_OPT_PLAN | DRIFT_OPT_REPEAT},                        \
    {"--rope-provenance", NULL, "cpu|device|recorded", "plan flag: where the RoPE table is built", NULL, DRIFT_OPT_PLAN},  \
    {"--plan-name", NULL, "NAME", "plan flag: the plan's name", NULL, DRIFT_OPT_PLAN}

/* Parses argv (argv[0] is the command name). Returns 0 when the command
 * should go on (a filled; free with drift_cli_args_free), 1 when it must
 * stop and return *exit_code: --help printed (0) or a usage error reported
 * (2; a is then empty). Any "--json" in argv switches error reporting to
 * JSON first, so that even a bad option gets its JSON error. */
int drift_cli_args_parse(const drift_cli_cmd_spec *spec, int argc, char **argv, drift_cli_args *a, int *exit_code);
void drift_cli_args_free(drift_cli_args *a);

/* The last value given for option name (its long name), or NULL. */
const char *drift_cli_args_get(const drift_cli_args *a, const char *name);
/* How many times option name was given. */
int drift_cli_args_count(const drift_cli_args *a, const char *name);
/* The plan given as plan_opt FILE plus plan flags, in command-line order. */
int drift_cli_args_plan(const drift_cli_args *a, const char *plan_opt, drift_cli_plan_args *pa);

/* Prints spec's help (usage, description, options, notes, exit, example). */
void drift_cli_print_help(const drift_cli_cmd_spec *spec, FILE *f);

/* value must be one of choices: returns 0, or reports "FIELD: expected one
 * of a, b, c, got 'x' (did you mean 'y'?)" for cmd and returns 2. */
int drift_cli_check_choice(const char *cmd, const char *field, const char *value, const char *const *choices);
/* The candidate closest to word (edit distance, case-insensitive; a prefix
 * counts as close), or NULL when none is close enough to suggest. */
const char *drift_cli_suggest(const char *word, const char *const *candidates, size_t n);

/* For a command still on its own parser: reports "unknown option 'ARG'
 * (did you mean '--x'?)" for cmd, the candidates being every --option that
 * help (the command's --help text, borrowed) names; returns 2. */
int drift_cli_unknown_option_in_help(const char *cmd, const char *arg, const char *help);
/* The same for an enum value: "FIELD: expected WHAT, got 'V' (did you mean
 * 'x'?)" with the candidates in choices (NULL-terminated); returns 2. */
int drift_cli_bad_choice(const char *cmd, const char *field, const char *what, const char *value,
                         const char *const *choices);

#endif
