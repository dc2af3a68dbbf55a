/* drift compare: per-site metrics between two traces, through the one
 * comparison engine (replay/analysis/compare_traces.h) that drift top --against uses. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/args.h"
#include "cli/cli_util.h"
#include "cli/trace_args.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/report.h"
#include "replay/analysis/compare_traces.h"

static const char *const FORMAT_CHOICES[] = {"text", "json", "csv", NULL};

static const drift_cli_opt_spec OPTS[] = {
    {"--sitemap", NULL, "FILE", "pair differently named sites: renames by glob and\n"
                                "concatenations (docs/compare.md)", NULL, 0},
    {"--steps", NULL, "A:B", "compare steps A..B (inclusive; A:, :B, or N)", NULL, 0},
    {"--allow-mismatch", NULL, NULL, "compare even when the model families, the committed\n"
                                     "steps or a paired site's shape differ (warned on stderr)", NULL, 0},
    {"--atol", NULL, "X", "exit 1 when a site's max |diff| exceeds X", NULL, 0},
    {"--rtol", NULL, "X", "exit 1 when a site's rel max exceeds X (with --atol: a\n"
                          "site fails only when it exceeds both)", NULL, 0},
    {"--format", NULL, "F", "output (default text)", FORMAT_CHOICES, 0},
    {"--json", NULL, NULL, "= --format json: one JSON document on stdout (errors too)", NULL, 0},
    {0}};

static const drift_cli_cmd_spec SPEC = {
    "compare",
    "TRACE_A TRACE_B [--sitemap FILE] [--steps A:B] [--allow-mismatch]\n"
    "                     [--atol X] [--rtol X] [--format text|json|csv] [--json]",
    "Compares every site the two traces share, step by step over the steps both\n"
    "committed, TRACE_A as candidate and TRACE_B as reference: mean/max |diff|,\n"
    "rel max, cosine, max ULP (|diff| in ULPs of the reference value, in the\n"
    "site's dtype), bitwise-equal steps, the first divergent site of each step\n"
    "(in TRACE_A's site order), and the log-prob drift of A's logprob:new against\n"
    "B's logprob:old. Records pair by (step, micro-batch, denoising index, call\n"
    "index). For example the trainer and rollout traces of one run, or two\n"
    "replays. A TRACE may be INDEX#rank=N of a merged index. The same engine\n"
    "serves drift top TRACE_A --against TRACE_B (live, while both are written).\n",
    OPTS,
    "TRACE_A TRACE_B",
    2,
    2,
    "CSV: kind,site,step,dtype,steps,steps_bitwise_equal,first_divergent_steps,\n"
    "mean_abs_diff,max_abs_diff,rel_max,cosine,max_ulp: kind \"site\" (one row per\n"
    "site, over the steps) or \"step\" (site = the step's first divergent site).\n",
    "0 ok, 1 a tolerance exceeded, 2 bad usage, unreadable or mismatched traces",
    "compare run.h5 run.rollout.h5 --atol 0"};

static int parse_tol(const char *s, double *out) {
    char *e = NULL;
    errno = 0;
    double v = strtod(s, &e);
    if (errno || !e || *e || e == s || !(v >= 0) || isinf(v)) return -1;
    *out = v;
    return 0;
}

static void csv_num(FILE *f, double v) {
    if (!isnan(v)) fprintf(f, "%.17g", v);
}

static void csv_site(FILE *f, const char *s) {
    if (!strpbrk(s, ",\"\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* 1 with *l when the trace at path has /libraries. */
static int read_libs(const char *path, drift_libraries *l) {
    drift_trace_reader *r = NULL;
    int present = 0;
    if (drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, NULL) != DRIFT_OK) return 0;
    if (drift_trace_read_libraries(r, l, &present, NULL) != DRIFT_OK) present = 0;
    drift_trace_reader_close(r);
    return present;
}

static void write_csv(const drift_replay_report *rep, FILE *f) {
    fprintf(f, "kind,site,step,dtype,steps,steps_bitwise_equal,first_divergent_steps,mean_abs_diff,max_abs_diff,"
               "rel_max,cosine,max_ulp\n");
    for (size_t i = 0; i < rep->cmp.n; i++) {
        const drift_sitecmp_entry *e = &rep->cmp.e[i];
        drift_site_metrics m;
        drift_sitecmp_finish(&rep->cmp, e, &m);
        fputs("site,", f);
        csv_site(f, e->site);
        fprintf(f, ",,%s,%lld,%lld,%lld,", drift_dtype_name(e->dtype), (long long)e->steps,
                (long long)e->steps_equal, (long long)e->first_divergent);
        csv_num(f, m.mean_abs_diff);
        fputc(',', f);
        csv_num(f, m.max_abs_diff);
        fputc(',', f);
        csv_num(f, m.rel_max);
        fputc(',', f);
        csv_num(f, m.cosine);
        fputc(',', f);
        if (m.ulp_max != UINT64_MAX) fprintf(f, "%llu", (unsigned long long)m.ulp_max);
        fputc('\n', f);
    }
    for (int64_t s = 0; s < rep->n_steps; s++) {
        fputs("step,", f);
        if (rep->first_divergent[s]) csv_site(f, rep->first_divergent[s]);
        fprintf(f, ",%lld,,,,,,,,,\n", (long long)rep->steps[s]);
    }
}

static int compare(const char *a, const char *b, const char *fmt, const char *map_path, const char *steps,
                   const char *atol_s, const char *rtol_s, int allow);

int drift_cmd_compare(int argc, char **argv) {
    drift_cli_args args;
    int code = 0;
    if (drift_cli_args_parse(&SPEC, argc, argv, &args, &code)) return code;
    const char *a = args.pos[0], *b = args.pos[1], *fmt = "text";
    const char *map_path = drift_cli_args_get(&args, "--sitemap"), *steps = drift_cli_args_get(&args, "--steps");
    const char *atol_s = drift_cli_args_get(&args, "--atol"), *rtol_s = drift_cli_args_get(&args, "--rtol");
    int allow = drift_cli_args_count(&args, "--allow-mismatch") > 0;
    for (size_t k = 0; k < args.n_occ; k++) { /* --json and --format: the last one given wins */
        if (!strcmp(args.occ[k].opt->name, "--json")) fmt = "json";
        else if (!strcmp(args.occ[k].opt->name, "--format")) fmt = args.occ[k].value;
    }
    code = compare(a, b, fmt, map_path, steps, atol_s, rtol_s, allow);
    drift_cli_args_free(&args); /* the strings above are argv's */
    return code;
}

/* The command once its options are parsed (all strings borrowed from argv). */
static int compare(const char *a, const char *b, const char *fmt, const char *map_path, const char *steps,
                   const char *atol_s, const char *rtol_s, int allow) {
    int format = strcmp(fmt, "text") == 0 ? 0 : strcmp(fmt, "json") == 0 ? 1 : strcmp(fmt, "csv") == 0 ? 2 : -1;
    if (format < 0) return drift_cli_usage_error("compare", "--format: expected text, json or csv, got \"%s\"", fmt);
    double atol = NAN, rtol = NAN;
    if (atol_s && parse_tol(atol_s, &atol))
        return drift_cli_usage_error("compare", "--atol: expected a number >= 0, got \"%s\"", atol_s);
    if (rtol_s && parse_tol(rtol_s, &rtol))
        return drift_cli_usage_error("compare", "--rtol: expected a number >= 0, got \"%s\"", rtol_s);
    drift_err err;
    drift_err_clear(&err);
    drift_tcmp_opts o;
    drift_tcmp_opts_init(&o);
    o.path_a = a;
    o.path_b = b;
    o.allow_mismatch = allow;
    /* a range past either trace's committed steps is refused, as replay, bisect and top do */
    if (steps && (drift_cli_resolve_steps("compare", steps, a, &o.step_first, &o.step_last) ||
                  drift_cli_resolve_steps("compare", steps, b, &o.step_first, &o.step_last)))
        return 2;
    drift_sitemap *map = NULL;
    if (map_path && drift_sitemap_load(&map, map_path, &err)) return drift_cli_report("compare", &err);
    o.sitemap = map;
    drift_replay_report rep;
    drift_cli_progress *prog = format == 0 ? drift_cli_progress_start("compare", "opening the traces") : NULL;
    int rc = drift_compare_traces_opts(&o, &rep, prog ? drift_cli_progress_cb : NULL, prog, &err);
    drift_cli_progress_finish(prog);
    int code = 0;
    if (rc) {
        code = drift_cli_report("compare", &err);
    } else if (steps && rep.n_steps == 0) {
        code = drift_cli_usage_error("compare", "--steps %s: no step committed in both traces lies in the range", steps);
    } else {
        if (rep.warnings) {
            for (const char *p = rep.warnings; *p;) {
                const char *nl = strchr(p, '\n');
                int len = nl ? (int)(nl - p) : (int)strlen(p);
                char line[2048], safe[8192]; /* names and families read from the traces */
                snprintf(line, sizeof line, "%.*s", len, p);
                fprintf(stderr, "drift compare: warning: %s\n", drift_cli_printable(line, safe, sizeof safe));
                p += len + (nl ? 1 : 0);
            }
        }
        /* a compiled recording on either side: the report says bitwise equality is not expected */
        drift_libraries la, lb;
        int ha = read_libs(a, &la), hb = read_libs(b, &lb);
        if (ha && la.compiled) drift_report_compiled_source(&la, a);
        else if (hb && lb.compiled) drift_report_compiled_source(&lb, b);
        drift_replay_opts ro;
        drift_replay_opts_init(&ro);
        ro.trace = a;
        ro.backend = "none";
        if (format == 1) code = drift_report_replay_json(&ro, &rep, stdout);
        else if (format == 2) write_csv(&rep, stdout);
        else drift_report_replay_text(&ro, &rep, stdout);
        int failed = 0;
        for (size_t i = 0; code == 0 && i < rep.cmp.n && (atol_s || rtol_s); i++) {
            drift_site_metrics m;
            drift_sitecmp_finish(&rep.cmp, &rep.cmp.e[i], &m);
            int over_a = atol_s && (m.max_abs_diff > atol || isnan(m.max_abs_diff));
            int over_r = rtol_s && (m.rel_max > rtol || isnan(m.rel_max));
            int over = atol_s && rtol_s ? (over_a && over_r) : (over_a || over_r);
            if (over && !failed++)
                fprintf(stderr, "drift compare: %s exceeds the tolerance (max |diff| %.3e, rel max %.3e)\n",
                        rep.cmp.e[i].site, m.max_abs_diff, m.rel_max);
        }
        if (failed) {
            fprintf(stderr, "drift compare: %d site(s) exceed the tolerance\n", failed);
            code = 1;
        }
    }
    drift_replay_report_free(&rep);
    drift_sitemap_free(map);
    return code;
}
