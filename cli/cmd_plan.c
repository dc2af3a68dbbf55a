/* drift plan compile: compile_param_dtype_maps for a plan and a model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "formats/json.h"
#include "formats/params.h"
#include "formats/plan.h"
#include "replay/models/family.h"

static const char *const FORMAT_CHOICES[] = {"text", "csv", NULL};

static const drift_cli_opt_spec OPTS[] = {
    {"--plan", NULL, "FILE", "JSON plan (the plan flags below override it)", NULL, 0},
    DRIFT_CLI_PLAN_FLAG_SPECS,
    {"--model", NULL, "SPEC", "tiny-dit or wan2.2, e.g. wan2.2:layers=2", NULL, 0},
    {"--params", NULL, "FILE", "a named_parameters() dump: 'FQN SHAPE [WRAP]' per line", NULL, 0},
    {"--format", NULL, "F", "text (default), or csv: one row per override (wrap, parameter, dtype)", FORMAT_CHOICES, 0},
    {"--json", NULL, NULL, "one JSON document on stdout (errors too)", NULL, 0},
    {0}};

static const drift_cli_cmd_spec SPEC = {
    "plan compile",
    "(--plan FILE | flags) (--model FAMILY[:K=V,...] | --params FILE) [--format text|csv] [--json]",
    "Compiles a dtype plan's param_dtype_patterns against a model's parameters\n"
    "(docs/cli.md \"Plans\"): pass 1 expands the patterns in order (a later pattern\n"
    "overrides an earlier one; a pattern matching nothing is an error), pass 2\n"
    "gives each parameter to the first FSDP wrap that reaches it under its\n"
    "wrap-local name. Prints the per-wrap maps, the root map and warnings.\n",
    OPTS,
    NULL,
    0,
    0,
    "plan is a command group; compile is its one subcommand (drift plan --help\n"
    "prints this).\n",
    "0 compiled, 2 bad usage, bad plan, or a pattern that matches nothing",
    "plan compile --plan plans/wan2_2.json --model wan2.2:layers=2"};

static void print_map_text(const drift_wrap_map *m, const drift_compiled_plan *c, const drift_plan *p,
                           const drift_param_table *t) {
    printf("%s %s: %zu override%s\n", m->wrap[0] ? "wrap" : "root", m->wrap[0] ? m->wrap : "(unclaimed parameters)",
           m->n, m->n == 1 ? "" : "s");
    (void)c;
    for (size_t k = 0; k < m->n; k++) {
        const drift_param_override *o = &m->entries[k];
        const drift_param_info *pi = &t->params[o->param_index];
        char shape[128] = "";
        size_t len = 0;
        for (int d = 0; d < pi->ndim && len < sizeof shape - 24; d++)
            len += (size_t)snprintf(shape + len, sizeof shape - len, "%s%lld", d ? "," : "", (long long)pi->shape[d]);
        printf("  %-40s %-5s [%s]  (pattern %zu: %s)\n", o->local_fqn, drift_dtype_name(o->dtype), shape,
               o->pattern_index + 1, p->patterns[o->pattern_index].glob);
    }
}

/* --format csv: one row per override of map m. FQNs and globs are quoted
 * (a glob may hold ','). */
static void print_map_csv(const drift_wrap_map *m, const drift_plan *p, const drift_param_table *t) {
    for (size_t k = 0; k < m->n; k++) {
        const drift_param_override *o = &m->entries[k];
        const drift_param_info *pi = &t->params[o->param_index];
        const char *fields[4] = {m->wrap, o->local_fqn, pi->fqn, p->patterns[o->pattern_index].glob};
        for (int i = 0; i < 4; i++) {
            if (i) putchar(',');
            putchar('"');
            for (const char *c = fields[i] ? fields[i] : ""; *c; c++) {
                if (*c == '"') putchar('"');
                putchar(*c);
            }
            putchar('"');
        }
        printf(",%s,\"[", drift_dtype_name(o->dtype));
        for (int d = 0; d < pi->ndim; d++) printf("%s%lld", d ? "," : "", (long long)pi->shape[d]);
        printf("]\",%zu\n", o->pattern_index + 1);
    }
}

static void add_map_json(drift_json_buf *b, const drift_wrap_map *m) {
    drift_json_buf_add_key(b, "overrides");
    drift_json_buf_begin_object(b);
    for (size_t k = 0; k < m->n; k++) {
        /* Two parameters of one wrap may share a local FQN with the same dtype
         * (compile accepts that): one key in the map. */
        int seen = 0;
        for (size_t j = 0; j < k && !seen; j++) seen = strcmp(m->entries[j].local_fqn, m->entries[k].local_fqn) == 0;
        if (!seen) drift_json_buf_field_string(b, m->entries[k].local_fqn, drift_dtype_name(m->entries[k].dtype));
    }
    drift_json_buf_end_object(b);
}

static int print_json(const drift_plan *p, const char *model, const drift_param_table *t, const drift_compiled_plan *c) {
    drift_json_buf b;
    drift_json_buf_init_pretty(&b, 2);
    char *plan_json = drift_plan_to_json(p);
    drift_json_buf_begin_object(&b);
    drift_json_buf_add_key(&b, "plan");
    if (plan_json) drift_json_buf_add_raw(&b, plan_json);
    else drift_json_buf_add_null(&b);
    drift_json_buf_field_string(&b, "model", model);
    drift_json_buf_field_int(&b, "n_params", (int64_t)t->n);
    drift_json_buf_add_key(&b, "wraps");
    drift_json_buf_begin_array(&b);
    for (size_t w = 0; w < c->n_wraps; w++) {
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_string(&b, "wrap", c->wraps[w].wrap);
        add_map_json(&b, &c->wraps[w]);
        drift_json_buf_end_object(&b);
    }
    drift_json_buf_end_array(&b);
    drift_json_buf_add_key(&b, "root");
    drift_json_buf_begin_object(&b);
    add_map_json(&b, &c->root);
    drift_json_buf_end_object(&b);
    drift_json_buf_field_int(&b, "override_count", (int64_t)c->override_count);
    drift_json_buf_field_int(&b, "override_numel", c->override_numel);
    drift_json_buf_add_key(&b, "warnings");
    drift_json_buf_begin_array(&b);
    for (size_t k = 0; k < c->n_warnings; k++) drift_json_buf_add_string(&b, c->warnings[k]);
    drift_json_buf_end_array(&b);
    drift_json_buf_end_object(&b);
    free(plan_json);
    char *s = drift_json_buf_take(&b);
    if (!s) {
        fprintf(stderr, "drift plan: out of memory writing JSON\n");
        return 2;
    }
    printf("%s\n", s);
    free(s);
    return 0;
}

static int plan_compile(int argc, char **argv) {
    drift_cli_args a;
    int code = 0;
    if (drift_cli_args_parse(&SPEC, argc, argv, &a, &code)) return code;
    drift_cli_plan_args pa;
    if (drift_cli_args_plan(&a, "--plan", &pa)) {
        drift_cli_args_free(&a);
        return 2;
    }
    const char *model = drift_cli_args_get(&a, "--model"), *params_file = drift_cli_args_get(&a, "--params");
    int json = drift_cli_args_count(&a, "--json") > 0;
    const char *format = drift_cli_args_get(&a, "--format");
    int csv = format && strcmp(format, "csv") == 0;
    drift_cli_args_free(&a);
    if (json && csv) return drift_cli_usage_error_field("plan", "--format", "--format csv and --json: give one");
    if (!pa.file && pa.n_flags == 0) return drift_cli_usage_error_field("plan", "--plan", "missing --plan FILE (or plan flags)");
    if (!model == !params_file) return drift_cli_usage_error("plan", "give exactly one of --model or --params");

    drift_err err;
    drift_err_clear(&err);
    drift_plan plan;
    drift_param_table table;
    drift_compiled_plan compiled;
    drift_family_config cfg;
    char model_name[1024];
    int rc, exit_code = 2;
    drift_param_table_init(&table);
    memset(&compiled, 0, sizeof compiled);
    if ((rc = drift_cli_build_plan(&pa, &plan, &err))) return drift_cli_report("plan", &err);
    if (model) {
        if ((rc = drift_family_parse(model, &cfg, &err))) goto fail;
        if ((rc = drift_family_param_table(&cfg, &table, &err))) goto fail;
        drift_family_format(&cfg, model_name, sizeof model_name);
    } else {
        if ((rc = drift_param_table_parse_file(&table, params_file, &err))) goto fail;
        snprintf(model_name, sizeof model_name, "params:%s", params_file);
    }
    if ((rc = drift_plan_compile(&plan, &table, &compiled, &err))) goto fail;

    if (json) {
        exit_code = print_json(&plan, model_name, &table, &compiled);
    } else if (csv) { /* warnings still go to stderr */
        for (size_t k = 0; k < compiled.n_warnings; k++) fprintf(stderr, "drift plan: warning: %s\n", compiled.warnings[k]);
        printf("wrap,local_fqn,fqn,pattern,dtype,shape,pattern_index\n");
        for (size_t w = 0; w < compiled.n_wraps; w++) print_map_csv(&compiled.wraps[w], &plan, &table);
        print_map_csv(&compiled.root, &plan, &table);
        exit_code = 0;
    } else {
        printf("plan %s (%s)\n", plan.name[0] ? plan.name : "(unnamed)", plan.source);
        printf("model %s: %zu parameters, %zu wraps + root\n", model_name, table.n, table.n_wraps);
        for (size_t k = 0; k < compiled.n_warnings; k++) printf("warning: %s\n", compiled.warnings[k]);
        for (size_t w = 0; w < compiled.n_wraps; w++) print_map_text(&compiled.wraps[w], &compiled, &plan, &table);
        print_map_text(&compiled.root, &compiled, &plan, &table);
        printf("overrides: %zu parameters, %lld elements\n", compiled.override_count,
               (long long)compiled.override_numel);
        exit_code = 0;
    }
    drift_compiled_plan_free(&compiled);
    drift_param_table_free(&table);
    drift_plan_free(&plan);
    return exit_code;
fail:
    exit_code = drift_cli_report("plan", &err);
    drift_compiled_plan_free(&compiled);
    drift_param_table_free(&table);
    drift_plan_free(&plan);
    return exit_code;
}

int drift_cmd_plan(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        drift_cli_print_help(&SPEC, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "compile") == 0) return plan_compile(argc - 1, argv + 1);
    static const char *const subs[] = {"compile"};
    const char *s = drift_cli_suggest(argv[1], subs, 1);
    return drift_cli_usage_error("plan", "unknown subcommand '%s' (expected 'compile'%s)", argv[1], s ? "; did you mean it?" : "");
}
