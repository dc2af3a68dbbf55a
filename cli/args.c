#include "cli/args.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---- did-you-mean ------------------------------------------------------------ */

/* Edit distance (insert, delete, substitute, swap of neighbours),
 * case-insensitive, capped: words longer than 63 characters compare as far. */
static size_t edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63) return 64;
    size_t d[64][64];
    for (size_t i = 0; i <= n; i++) d[i][0] = i;
    for (size_t j = 0; j <= m; j++) d[0][j] = j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            size_t v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[n][m];
}

const char *drift_cli_suggest(const char *word, const char *const *cand, size_t n) {
    if (!word || !*word) return NULL;
    const char *best = NULL;
    size_t best_d = (size_t)-1, wl = strlen(word);
    for (size_t i = 0; i < n; i++) {
        if (!cand[i]) continue;
        size_t d = edit_distance(word, cand[i]);
        /* a prefix of a long name ("--thresh") is as good as one typo */
        if (wl >= 4 && strncmp(cand[i], word, wl) == 0 && d > 1) d = 1;
        if (d < best_d) {
            best_d = d;
            best = cand[i];
        }
    }
    size_t limit = wl <= 4 ? 1 : (wl <= 8 ? 2 : 3);
    return best && best_d <= limit ? best : NULL;
}

int drift_cli_check_choice(const char *cmd, const char *field, const char *value, const char *const *choices) {
    size_t n = 0;
    for (; choices[n]; n++)
        if (strcmp(choices[n], value) == 0) return 0;
    char list[1024];
    size_t len = 0;
    list[0] = '\0';
    for (size_t i = 0; i < n && len < sizeof list - 64; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", choices[i]);
    const char *s = drift_cli_suggest(value, choices, n);
    if (s) return drift_cli_usage_error_field(cmd, field, "%s: expected one of %s, got '%s' (did you mean '%s'?)", field, list, value, s);
    return drift_cli_usage_error_field(cmd, field, "%s: expected one of %s, got '%s'", field, list, value);
}

int drift_cli_unknown_option_in_help(const char *cmd, const char *arg, const char *help) {
    enum { MAX_NAMES = 128 };
    char store[MAX_NAMES][48];
    const char *names[MAX_NAMES];
    size_t n = 0;
    for (const char *p = help ? help : ""; *p && n < MAX_NAMES; p++) {
        if (p[0] != '-' || p[1] != '-' || !((p[2] >= 'a' && p[2] <= 'z')) || (p > help && (p[-1] == '-' || isalnum((unsigned char)p[-1]))))
            continue;
        size_t len = 2;
        while ((isalnum((unsigned char)p[len]) || p[len] == '-') && len < sizeof store[0] - 1) len++;
        memcpy(store[n], p, len);
        store[n][len] = '\0';
        names[n] = store[n];
        n++;
        p += len - 1;
    }
    char word[128];
    snprintf(word, sizeof word, "%s", arg);
    char *eq = strchr(word, '=');
    if (eq) *eq = '\0';
    const char *s = drift_cli_suggest(word, names, n);
    if (s) return drift_cli_usage_error_field(cmd, word, "unknown option '%s' (did you mean '%s'?)", word, s);
    return drift_cli_usage_error_field(cmd, word, "unknown option '%s'", word);
}

int drift_cli_bad_choice(const char *cmd, const char *field, const char *what, const char *value,
                         const char *const *choices) {
    size_t n = 0;
    while (choices[n]) n++;
    const char *s = drift_cli_suggest(value, choices, n);
    if (s) return drift_cli_usage_error_field(cmd, field, "%s: expected %s, got '%s' (did you mean '%s'?)", field, what, value, s);
    return drift_cli_usage_error_field(cmd, field, "%s: expected %s, got '%s'", field, what, value);
}

/* ---- parsing --------------------------------------------------------------- */

static const drift_cli_opt_spec *find_opt(const drift_cli_cmd_spec *spec, const char *name, size_t len) {
    for (const drift_cli_opt_spec *o = spec->opts; o && o->name; o++) {
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0) return o;
        if (o->alias && strlen(o->alias) == len && strncmp(o->alias, name, len) == 0) return o;
    }
    return NULL;
}

static int unknown_option(const drift_cli_cmd_spec *spec, const char *arg) {
    const char *names[256];
    size_t n = 0;
    for (const drift_cli_opt_spec *o = spec->opts; o && o->name && n < 254; o++) {
        names[n++] = o->name;
        if (o->alias) names[n++] = o->alias;
    }
    char word[128];
    size_t len = strcspn(arg, "=");
    if (len >= sizeof word) len = sizeof word - 1;
    memcpy(word, arg, len);
    word[len] = '\0';
    const char *s = drift_cli_suggest(word, names, n);
    if (s) return drift_cli_usage_error_field(spec->name, word, "unknown option '%s' (did you mean '%s'?)", word, s);
    return drift_cli_usage_error_field(spec->name, word, "unknown option '%s'", word);
}

static int add_occ(drift_cli_args *a, const drift_cli_opt_spec *o, const char *v) {
    drift_cli_occurrence *n = realloc(a->occ, (a->n_occ + 1) * sizeof *n);
    if (!n) return -1;
    a->occ = n;
    a->occ[a->n_occ].opt = o;
    a->occ[a->n_occ].value = v;
    a->n_occ++;
    return 0;
}

void drift_cli_args_free(drift_cli_args *a) {
    if (!a) return;
    free(a->occ);
    free(a->pos);
    memset(a, 0, sizeof *a);
}

int drift_cli_args_parse(const drift_cli_cmd_spec *spec, int argc, char **argv, drift_cli_args *a, int *exit_code) {
    memset(a, 0, sizeof *a);
    a->spec = spec;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--json") == 0) drift_cli_set_json_errors(1);
    a->pos = calloc((size_t)(argc > 0 ? argc : 1), sizeof *a->pos);
    if (!a->pos) {
        fprintf(stderr, "drift %s: out of memory\n", spec->name);
        *exit_code = 2;
        return 1;
    }
    int only_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!only_pos && (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)) {
            drift_cli_print_help(spec, stdout);
            drift_cli_args_free(a);
            *exit_code = 0;
            return 1;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (only_pos || arg[0] != '-' || arg[1] == '\0') {
            a->pos[a->n_pos++] = arg;
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            only_pos = 1;
            continue;
        }
        size_t len = strcspn(arg, "=");
        const drift_cli_opt_spec *o = find_opt(spec, arg, len);
        if (!o) {
            drift_cli_args_free(a);
            *exit_code = unknown_option(spec, arg);
            return 1;
        }
        const char *v = NULL;
        if (o->metavar) {
            if (arg[len] == '=') v = arg + len + 1;
            else if (i + 1 < argc) v = argv[++i];
            else {
                drift_cli_args_free(a);
                *exit_code = drift_cli_usage_error_field(spec->name, o->name, "%s needs a value (%s %s)", o->name, o->name, o->metavar);
                return 1;
            }
            if (o->choices && drift_cli_check_choice(spec->name, o->name, v, o->choices)) {
                drift_cli_args_free(a);
                *exit_code = 2;
                return 1;
            }
        } else if (arg[len] == '=') {
            drift_cli_args_free(a);
            *exit_code = drift_cli_usage_error_field(spec->name, o->name, "%s takes no value (got '%s')", o->name, arg);
            return 1;
        }
        if (!(o->flags & (DRIFT_OPT_REPEAT | DRIFT_OPT_PLAN)) && o->metavar) {
            for (size_t k = 0; k < a->n_occ; k++)
                if (a->occ[k].opt == o && strcmp(a->occ[k].value, v) != 0) {
                    const char *prev = a->occ[k].value;
                    drift_cli_args_free(a);
                    *exit_code = drift_cli_usage_error_field(spec->name, o->name, "%s given twice ('%.100s' and '%.100s'); give it once",
                                                             o->name, prev, v);
                    return 1;
                }
        }
        if (add_occ(a, o, v)) {
            drift_cli_args_free(a);
            fprintf(stderr, "drift %s: out of memory\n", spec->name);
            *exit_code = 2;
            return 1;
        }
    }
    if ((int)a->n_pos < spec->min_pos) {
        drift_cli_args_free(a);
        *exit_code = drift_cli_usage_error_field(spec->name, spec->positional, "missing %s", spec->positional ? spec->positional : "argument");
        return 1;
    }
    if (spec->max_pos >= 0 && (int)a->n_pos > spec->max_pos) {
        const char *extra = a->pos[spec->max_pos];
        drift_cli_args_free(a);
        if (spec->max_pos == 0)
            *exit_code = drift_cli_usage_error_field(spec->name, NULL, "unexpected argument '%s' (this command takes options only)", extra);
        else
            *exit_code = drift_cli_usage_error_field(spec->name, NULL, "unexpected argument '%s' (expected %d %s)", extra,
                                                     spec->max_pos, spec->positional ? spec->positional : "argument");
        return 1;
    }
    return 0;
}

const char *drift_cli_args_get(const drift_cli_args *a, const char *name) {
    const char *v = NULL;
    for (size_t k = 0; k < a->n_occ; k++)
        if (strcmp(a->occ[k].opt->name, name) == 0) v = a->occ[k].value ? a->occ[k].value : "";
    return v;
}

int drift_cli_args_count(const drift_cli_args *a, const char *name) {
    int n = 0;
    for (size_t k = 0; k < a->n_occ; k++) n += strcmp(a->occ[k].opt->name, name) == 0;
    return n;
}

int drift_cli_args_plan(const drift_cli_args *a, const char *plan_opt, drift_cli_plan_args *pa) {
    memset(pa, 0, sizeof *pa);
    for (size_t k = 0; k < a->n_occ; k++) {
        const drift_cli_opt_spec *o = a->occ[k].opt;
        if (plan_opt && strcmp(o->name, plan_opt) == 0) pa->file = a->occ[k].value;
        if (!(o->flags & DRIFT_OPT_PLAN)) continue;
        if (pa->n_flags >= DRIFT_CLI_MAX_PLAN_FLAGS)
            return drift_cli_usage_error_field(a->spec->name, o->name, "more than %d plan flags", DRIFT_CLI_MAX_PLAN_FLAGS);
        pa->flag_name[pa->n_flags] = o->name;
        pa->flag_value[pa->n_flags] = a->occ[k].value;
        pa->n_flags++;
    }
    return 0;
}

/* ---- help ------------------------------------------------------------------- */

static void print_wrapped_help(FILE *f, const char *help, int col) {
    for (const char *p = help; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        fprintf(f, "%.*s\n", (int)n, p);
        if (!nl) break;
        p = nl + 1;
        fprintf(f, "%*s", col, "");
    }
}

void drift_cli_print_help(const drift_cli_cmd_spec *spec, FILE *f) {
    size_t ul = strlen(spec->usage);
    fprintf(f, "usage: drift %s %s%s", spec->name, spec->usage, ul && spec->usage[ul - 1] == '\n' ? "" : "\n");
    if (spec->description) fprintf(f, "\n%s", spec->description);
    int has_opts = 0;
    for (const drift_cli_opt_spec *o = spec->opts; o && o->name; o++) has_opts |= !(o->flags & DRIFT_OPT_HIDDEN);
    if (has_opts) fprintf(f, "\noptions:\n");
    const int col = 30;
    for (const drift_cli_opt_spec *o = spec->opts; o && o->name; o++) {
        if (o->flags & DRIFT_OPT_HIDDEN) continue;
        char head[128];
        int len;
        if (o->alias) len = snprintf(head, sizeof head, "  %s, %s%s%s", o->alias, o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
        else len = snprintf(head, sizeof head, "  %s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
        if (len < col - 1) fprintf(f, "%-*s", col, head);
        else fprintf(f, "%s\n%*s", head, col, "");
        print_wrapped_help(f, o->help, col);
        if (o->choices) {
            fprintf(f, "%*sone of: ", col, "");
            for (size_t i = 0; o->choices[i]; i++) fprintf(f, "%s%s", i ? "|" : "", o->choices[i]);
            fputc('\n', f);
        }
    }
    if (spec->notes) fprintf(f, "\n%s", spec->notes);
    fprintf(f, "\nexit: %s\n", spec->exit_codes ? spec->exit_codes : "0 success, 2 bad usage or bad input");
    if (spec->example) fprintf(f, "example: drift %s\n", spec->example);
}
