/* drift report: one self-contained HTML page (replay/analysis/report_html.c) from a
 * trace pair (through the comparison engine, as drift compare), a replay
 * result (its /metrics), and/or a bisect --json document. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/cli_util.h"
#include "cli/trace_args.h"
#include "formats/outpath.h"
#include "formats/infile.h"
#include "cli/commands.h"
#include "replay/analysis/report_html.h"
#include "formats/alloc.h"
#include "formats/json.h"
#include "replay/analysis/compare_traces.h"

static const drift_cli_opt_spec OPTS[] = {
    {"--against", NULL, "TRACE2", "compare TRACE with TRACE2 as drift compare does", NULL, 0},
    {"--sitemap", NULL, "FILE", "with --against: pair differently named sites", NULL, 0},
    {"--allow-mismatch", NULL, NULL, "with --against: compare different families or steps", NULL, 0},
    {"--steps", NULL, "A:B", "only steps A..B (inclusive)", NULL, 0},
    {"--bisect", NULL, "FILE", "add the JSON document of a bisect run", NULL, 0},
    {"--out", "-o", "FILE", "the HTML file (required; an existing file is kept\n"
                            "unless --force)", NULL, 0},
    {"--force", NULL, NULL, "replace an existing -o file", NULL, 0},
    {0}};

static const drift_cli_cmd_spec SPEC = {
    "report",
    "TRACE --against TRACE2 [--bisect BISECT.json] -o report.html\n"
    "       drift report REPLAY_RESULT [--bisect BISECT.json] -o report.html\n"
    "       drift report BISECT.json -o report.html",
    "Writes one self-contained HTML file (inline SVG and CSS, no script, no\n"
    "network) to paste into an issue or a chat: drift's version, the command\n"
    "line, the date and both run ids; the first divergent site of every step,\n"
    "a heatmap of sites (rows, execution order) x steps (columns) as wide as\n"
    "the page, on a log colour scale with the first divergent site of each\n"
    "step framed, the log-prob, |ratio - 1| and approx KL curves per step,\n"
    "the per-site table (worst element, max ULP, oracle RMSE where known),\n"
    "the two sides' plans side by side with their differences, and from a\n"
    "bisect --json document the culprits with their effect alone and the\n"
    "suggested fix (bisect --fix-out) as a diff against the bad plan.\n",
    OPTS,
    "inputs (a trace or replay result, and a bisect JSON)",
    0,
    2,
    "A REPLAY_RESULT is the -o trace of drift replay (its /metrics rows).\n",
    "0 written, 2 bad usage, unreadable or mismatched inputs, existing -o",
    "report run.h5 --against run.rollout.h5 -o report.html"};

typedef struct grid {
    char **sites;
    size_t n_sites, cap_sites;
    int64_t *steps;
    size_t n_steps;
    double *v;
    uint8_t *present, *equal;
    long *first;
    double *lp, *ratio, *kl;
    int has_lp;
} grid;

static void grid_free(grid *g) {
    for (size_t i = 0; i < g->n_sites; i++) free(g->sites[i]);
    free(g->sites);
    free(g->steps);
    free(g->v);
    free(g->present);
    free(g->equal);
    free(g->first);
    free(g->lp);
    free(g->ratio);
    free(g->kl);
}

/* Sizes the cells for n_sites x n_steps once both are known. */
static int grid_alloc(grid *g, drift_err *err) {
    size_t nc = g->n_sites * g->n_steps + 1;
    g->v = drift_malloc(nc * DRIFT_HTML_NV * sizeof *g->v);
    g->present = drift_calloc(nc, 1);
    g->equal = drift_calloc(nc, 1);
    g->first = drift_malloc((g->n_steps + 1) * sizeof *g->first);
    g->lp = drift_malloc((g->n_steps + 1) * sizeof *g->lp);
    g->ratio = drift_malloc((g->n_steps + 1) * sizeof *g->ratio);
    g->kl = drift_malloc((g->n_steps + 1) * sizeof *g->kl);
    if (!g->v || !g->present || !g->equal || !g->first || !g->lp || !g->ratio || !g->kl)
        return drift_err_set(err, DRIFT_E_NOMEM, "report", "out of memory (%zu cells)", nc);
    for (size_t i = 0; i < nc * DRIFT_HTML_NV; i++) g->v[i] = NAN;
    for (size_t t = 0; t <= g->n_steps; t++) {
        g->first[t] = -1;
        g->lp[t] = g->ratio[t] = g->kl[t] = NAN;
    }
    return DRIFT_OK;
}

static void put_row(grid *g, size_t s, size_t t, const drift_trace_metric *r) {
    size_t i = s * g->n_steps + t;
    g->present[i] = 1;
    g->equal[i] = (r->flags & DRIFT_TRACE_METRIC_BITWISE_EQUAL) != 0;
    double *v = &g->v[i * DRIFT_HTML_NV];
    v[DRIFT_HTML_MEAN] = r->mean_abs_diff;
    v[DRIFT_HTML_MAX] = r->max_abs_diff;
    v[DRIFT_HTML_REL] = r->rel_max;
    v[DRIFT_HTML_COS] = r->cosine;
    v[DRIFT_HTML_ULP] = r->max_ulp_diff == UINT64_MAX ? INFINITY : (double)r->max_ulp_diff;
    v[DRIFT_HTML_ORACLE] = r->rmse_oracle;
    v[DRIFT_HTML_WORST] = (double)r->worst_index;
}

/* A trace's run id, copied (an empty string when it recorded none). */
static void run_id(char *dst, size_t n, const drift_trace_meta *m) {
    snprintf(dst, n, "%s", m && m->run_id ? m->run_id : "");
}

static int from_pair(grid *g, const drift_tcmp_opts *o, char **plan_a, char **plan_b, char *model, size_t msz,
                     char ***warn, size_t *n_warn, char run[2][256], drift_err *err) {
    drift_tcmp *c = NULL;
    int rc = drift_tcmp_open(&c, o, err);
    if (rc) return rc;
    const drift_trace_meta *ma = drift_trace_reader_meta(drift_tcmp_reader(c, 0));
    const drift_trace_meta *mb = drift_trace_reader_meta(drift_tcmp_reader(c, 1));
    snprintf(model, msz, "%s", ma->family ? ma->family : "");
    run_id(run[0], 256, ma);
    run_id(run[1], 256, mb);
    *plan_a = drift_strdup(ma->plan_json ? ma->plan_json : "");
    *plan_b = drift_strdup(mb->plan_json ? mb->plan_json : "");
    g->n_sites = drift_tcmp_n_pairs(c);
    g->n_steps = (size_t)drift_tcmp_steps_available(c);
    g->sites = drift_calloc(g->n_sites + 1, sizeof *g->sites);
    g->steps = drift_calloc(g->n_steps + 1, sizeof *g->steps);
    if (!*plan_a || !*plan_b || !g->sites || !g->steps) rc = drift_err_set(err, DRIFT_E_NOMEM, "report", "out of memory");
    for (size_t i = 0; !rc && i < g->n_sites; i++)
        if (!(g->sites[i] = drift_strdup(drift_tcmp_pair_name(c, i)))) rc = drift_err_set(err, DRIFT_E_NOMEM, "report", "out of memory");
    if (!rc) rc = grid_alloc(g, err);
    for (size_t t = 0; !rc && t < g->n_steps; t++) {
        int got = 0;
        const drift_tcmp_step *st = NULL;
        if ((rc = drift_tcmp_next(c, &got, &st, err)) || !got) break;
        g->steps[t] = st->step;
        for (size_t k = 0; k < st->n_rows; k++) put_row(g, (size_t)st->rows[k].site, t, &st->rows[k]);
        g->first[t] = st->first_divergent;
        if (st->has_logprob) {
            g->has_lp = 1;
            g->lp[t] = st->lp.log_prob_mean_abs_diff;
            g->ratio[t] = st->lp.ratio_abs_minus_1;
            g->kl[t] = st->lp.approx_kl;
        }
    }
    size_t nw = drift_tcmp_n_warnings(c);
    *warn = drift_calloc(nw + 1, sizeof **warn);
    for (size_t i = 0; !rc && *warn && i < nw; i++)
        if (((*warn)[i] = drift_strdup(drift_tcmp_warning(c, i)))) *n_warn = i + 1;
    drift_tcmp_close(c);
    return rc;
}

static int from_metrics(grid *g, const char *path, int64_t first, int64_t last, char **plan_a, char *model, size_t msz,
                        char run[2][256], drift_err *err) {
    drift_trace_reader *r = NULL;
    drift_trace_metric *rows = NULL;
    drift_trace_step_metrics *srows = NULL;
    size_t n = 0, ns_m = 0;
    int rc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, err);
    if (rc) return rc;
    const drift_trace_meta *m = drift_trace_reader_meta(r);
    snprintf(model, msz, "%s", m->family ? m->family : "");
    run_id(run[0], 256, m);
    *plan_a = drift_strdup(m->plan_json ? m->plan_json : "");
    if ((rc = drift_trace_read_metrics(r, INT64_MIN, &rows, &n, err))) goto done;
    if ((rc = drift_trace_read_step_metrics(r, INT64_MIN, &srows, &ns_m, err))) goto done;
    if (n == 0) {
        rc = drift_err_set(err, DRIFT_E_INPUT, path, "no /metrics rows: not a replay result (for two traces use "
                                                   "TRACE --against TRACE2)");
        goto done;
    }
    size_t nst = 0;
    const drift_trace_step *st = drift_trace_reader_steps(r, &nst);
    g->n_sites = drift_trace_reader_n_metric_sites(r);
    g->sites = drift_calloc(g->n_sites + 1, sizeof *g->sites);
    g->steps = drift_calloc(nst + 1, sizeof *g->steps);
    if (!*plan_a || !g->sites || !g->steps) { rc = drift_err_set(err, DRIFT_E_NOMEM, "report", "out of memory"); goto done; }
    for (size_t i = 0; i < nst; i++)
        if ((first < 0 || st[i].step >= first) && (last < 0 || st[i].step <= last)) g->steps[g->n_steps++] = st[i].step;
    for (size_t i = 0; i < g->n_sites; i++)
        if (!(g->sites[i] = drift_strdup(drift_trace_reader_metric_site(r, i)))) {
            rc = drift_err_set(err, DRIFT_E_NOMEM, "report", "out of memory");
            goto done;
        }
    if ((rc = grid_alloc(g, err))) goto done;
    for (size_t k = 0; k < n; k++) {
        const drift_trace_metric *x = &rows[k];
        if (x->variant != 0 || x->site < 0 || (size_t)x->site >= g->n_sites) continue;
        for (size_t t = 0; t < g->n_steps; t++) {
            if (g->steps[t] != x->step) continue;
            size_t i = (size_t)x->site * g->n_steps + t;
            if (x->denoise_index >= 0 && g->present[i]) break; /* the producer's aggregate (-1) or the first row */
            put_row(g, (size_t)x->site, t, x);
            if ((x->flags & DRIFT_TRACE_METRIC_FIRST_DIVERGENT) && g->first[t] < 0) g->first[t] = x->site;
            break;
        }
    }
    for (size_t t = 0; t < g->n_steps; t++) /* no flag: the first site whose values differ */
        for (size_t s = 0; g->first[t] < 0 && s < g->n_sites; s++) {
            size_t i = s * g->n_steps + t;
            if (g->present[i] && !g->equal[i] && g->v[i * DRIFT_HTML_NV + DRIFT_HTML_MAX] > 0) g->first[t] = (long)s;
        }
    for (size_t k = 0; k < ns_m; k++)
        for (size_t t = 0; t < g->n_steps; t++)
            if (g->steps[t] == srows[k].step && srows[k].variant == 0 && (srows[k].denoise_index < 0 || isnan(g->lp[t]))) {
                g->lp[t] = srows[k].log_prob_mean_abs_diff;
                g->ratio[t] = srows[k].ratio_abs_minus_1;
                g->kl[t] = srows[k].approx_kl;
                g->has_lp = 1;
            }
done:
    free(rows);
    free(srows);
    drift_trace_reader_close(r);
    return rc;
}

static int is_json(const char *path) {
    size_t n = strlen(path);
    if (n >= 5 && strcmp(path + n - 5, ".json") == 0) return 1;
    FILE *f = drift_in_fopen(path, NULL); /* never blocks on a FIFO (refused later, by its reader) */
    if (!f) return 0;
    int c;
    while ((c = fgetc(f)) == ' ' || c == '\n' || c == '\t' || c == '\r') {}
    fclose(f);
    return c == '{';
}

static int report(const char *const *in, int n_in, const char *against, const char *bisect_path, const char *out,
                  const char *map_path, const char *steps, int force, int allow, const char *cmdline);

/* "drift report ARG ..." with arguments holding a space or quote single-quoted. */
static char *command_line(int argc, char **argv) {
    size_t n = 16;
    for (int i = 0; i < argc; i++) n += strlen(argv[i]) * 4 + 3;
    char *s = drift_malloc(n), *p = s;
    if (!s) return NULL;
    p += snprintf(p, n, "drift report");
    for (int i = 1; i < argc; i++) {
        int q = argv[i][0] == 0 || strpbrk(argv[i], " \t'\"\\$") != NULL;
        *p++ = ' ';
        if (q) *p++ = '\'';
        for (const char *c = argv[i]; *c; c++) {
            if (*c == '\'' && q) { memcpy(p, "'\\''", 4); p += 4; }
            else *p++ = *c;
        }
        if (q) *p++ = '\'';
    }
    *p = 0;
    return s;
}

int drift_cmd_report(int argc, char **argv) {
    drift_cli_args a;
    int code = 0;
    if (drift_cli_args_parse(&SPEC, argc, argv, &a, &code)) return code;
    char *cl = command_line(argc, argv);
    code = report(a.pos, (int)a.n_pos, drift_cli_args_get(&a, "--against"), drift_cli_args_get(&a, "--bisect"),
                  drift_cli_args_get(&a, "--out"), drift_cli_args_get(&a, "--sitemap"), drift_cli_args_get(&a, "--steps"),
                  drift_cli_args_count(&a, "--force") > 0, drift_cli_args_count(&a, "--allow-mismatch") > 0, cl);
    drift_free(cl);
    drift_cli_args_free(&a); /* the strings above are argv's */
    return code;
}

/* Appends msg to the page's warnings (and says it on stderr). */
static int add_warning(char ***warn, size_t *n_warn, const char *msg, drift_err *err) {
    char **nw = realloc(*warn, (*n_warn + 1) * sizeof *nw);
    char *m = strdup(msg);
    if (!nw || !m) {
        free(m);
        if (nw) *warn = nw;
        return drift_err_set(err, DRIFT_E_NOMEM, "report", "out of memory");
    }
    *warn = nw;
    nw[(*n_warn)++] = m;
    char safe[8192]; /* names and families read from the inputs */
    fprintf(stderr, "drift report: warning: %s\n", drift_cli_printable(msg, safe, sizeof safe));
    return DRIFT_OK;
}

/* A page built from a trace whose writer did not finish shows part of a run:
 * it says so (killed, still being written, failed, repaired after a kill). */
static int partial_warning(const char *path, char ***warn, size_t *n_warn, drift_err *err) {
    drift_trace_reader *r = NULL;
    int rc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, err);
    if (rc) return rc;
    const char *ended = drift_trace_reader_ended(r), *st = drift_trace_reader_status(r);
    size_t ns = 0;
    const drift_trace_step *steps = drift_trace_reader_steps(r, &ns);
    char last[64] = "no step";
    if (ns) snprintf(last, sizeof last, "step %lld", (long long)steps[ns - 1].step);
    char msg[1200] = "", stbuf[600];
    if (!strcmp(ended, "killed"))
        snprintf(msg, sizeof msg, "PARTIAL: %s: its writer was killed after %s; this page shows its %zu committed steps only",
                 path, last, ns);
    else if (!strcmp(ended, "writing"))
        snprintf(msg, sizeof msg, "PARTIAL: %s is still being written (committed up to %s when this page was made)", path, last);
    else if (!strcmp(ended, "failed") || !strcmp(ended, "repaired"))
        snprintf(msg, sizeof msg, "PARTIAL: %s: %s", path, drift_cli_printable(st ? st : ended, stbuf, sizeof stbuf));
    drift_trace_reader_close(r);
    return msg[0] ? add_warning(warn, n_warn, msg, err) : DRIFT_OK;
}

/* A bisect result embedded beside TRACE must be of TRACE's run: its
 * "run_id" (drift >= issue 34) must equal the trace's, else the page would
 * show another model's culprits under this trace. A result without one is
 * named as such in a warning. */
static int bisect_fits(const drift_json_value *bj, const char *bisect_path, const char *trace, int allow, char ***warn,
                       size_t *n_warn, drift_err *err) {
    const drift_json_value *v = drift_json_object_get(bj, "run_id");
    const char *brun = v && v->type == DRIFT_JSON_STRING ? v->str : NULL;
    drift_trace_reader *r = NULL;
    int rc = drift_trace_reader_open(&r, trace, DRIFT_TRACE_OPEN_NORMAL, err);
    if (rc) return rc;
    const char *trun = drift_trace_reader_meta(r)->run_id ? drift_trace_reader_meta(r)->run_id : "";
    char msg[1400] = "";
    if (!brun)
        snprintf(msg, sizeof msg, "%s does not name the run it bisected (an older drift): it may be of another trace than %s",
                 bisect_path, trace);
    else if (strcmp(brun, trun) != 0) {
        if (!allow) {
            rc = drift_err_set(err, DRIFT_E_INPUT, bisect_path,
                               "a bisect of run \"%.200s\", not of %s (run \"%.200s\"); --allow-mismatch embeds it anyway",
                               brun, trace, trun);
            drift_trace_reader_close(r);
            return rc;
        }
        snprintf(msg, sizeof msg, "%s is a bisect of run \"%.200s\", not of %s (run \"%.200s\")", bisect_path, brun, trace,
                 trun);
    }
    drift_trace_reader_close(r);
    return msg[0] ? add_warning(warn, n_warn, msg, err) : DRIFT_OK;
}

/* The command once its options are parsed: in[0..n_in) the positional inputs
 * (a trace or replay result, and/or a bisect JSON); strings borrowed. */
static int report(const char *const *in, int n_in, const char *against, const char *bisect_path, const char *out,
                  const char *map_path, const char *steps, int force, int allow, const char *cmdline) {
    const char *trace = NULL;
    for (int k = 0; k < n_in; k++) {
        if (is_json(in[k]) && !bisect_path) bisect_path = in[k];
        else if (!trace) trace = in[k];
        else return drift_cli_usage_error("report", "one trace (or replay result) and one bisect JSON at most, got '%s'", in[k]);
    }
    if (!trace && !bisect_path) return drift_cli_usage_error("report", "an input is required: TRACE --against TRACE2, a replay result or a bisect JSON");
    if (!out) return drift_cli_usage_error("report", "-o FILE is required");
    if (against && !trace) return drift_cli_usage_error("report", "--against needs a TRACE");
    if (map_path && !against) return drift_cli_usage_error("report", "--sitemap needs --against");
    if (allow && !against && !(trace && bisect_path))
        return drift_cli_usage_error("report", "--allow-mismatch needs --against or a bisect JSON beside TRACE");
    if (drift_cli_check_output("report", "-o", out, force)) return 2;

    drift_err err;
    drift_err_clear(&err);
    grid g;
    memset(&g, 0, sizeof g);
    char *plan_a = NULL, *plan_b = NULL, **warn = NULL, model[1024] = "", source[8400] = "";
    size_t n_warn = 0;
    char run[2][256] = {"", ""};
    drift_json_value *bj = NULL;
    drift_sitemap *map = NULL;
    int rc = DRIFT_OK;
    int64_t first = -1, last = -1;
    /* a range past a trace's committed steps is refused, as replay, bisect and top do */
    if (steps && trace && (drift_cli_resolve_steps("report", steps, trace, &first, &last) ||
                           (against && drift_cli_resolve_steps("report", steps, against, &first, &last))))
        return 2;
    if (steps) rc = drift_replay_parse_steps(steps, &first, &last, &err);
    if (!rc && map_path) rc = drift_sitemap_load(&map, map_path, &err);
    if (!rc && bisect_path) {
        rc = drift_json_parse_file(bisect_path, &bj, &err);
        if (!rc && (bj->type != DRIFT_JSON_OBJECT || !drift_json_object_get(bj, "culprit_sets")))
            rc = drift_err_set(&err, DRIFT_E_INPUT, bisect_path, "not a drift bisect --json document (no \"culprit_sets\")");
    }
    if (!rc && trace && against) {
        drift_tcmp_opts o;
        drift_tcmp_opts_init(&o);
        o.path_a = trace;
        o.path_b = against;
        o.sitemap = map;
        o.allow_mismatch = allow;
        o.step_first = first;
        o.step_last = last;
        rc = from_pair(&g, &o, &plan_a, &plan_b, model, sizeof model, &warn, &n_warn, run, &err);
        snprintf(source, sizeof source, "%s (candidate) against %s (reference)", trace, against);
    } else if (!rc && trace) {
        rc = from_metrics(&g, trace, first, last, &plan_a, model, sizeof model, run, &err);
        snprintf(source, sizeof source, "replay result %s", trace);
    } else if (!rc) {
        snprintf(source, sizeof source, "bisect result %s", bisect_path);
    }
    if (!rc && trace) rc = partial_warning(trace, &warn, &n_warn, &err);
    if (!rc && against) rc = partial_warning(against, &warn, &n_warn, &err);
    if (!rc && bj && trace) rc = bisect_fits(bj, bisect_path, trace, allow, &warn, &n_warn, &err);
    if (!rc && steps && trace && g.n_steps == 0)
        rc = drift_err_set(&err, DRIFT_E_USAGE, "--steps", "no step of %s lies in %s", trace, steps);
    if (!rc) {
        drift_html_report h;
        memset(&h, 0, sizeof h);
        h.title = "drift report";
        h.source = source;
        h.model = model[0] ? model : "(from the bisect result's trace)";
        h.n_sites = g.n_sites;
        h.n_steps = g.n_steps;
        h.sites = (const char *const *)g.sites;
        h.steps = g.steps;
        h.v = g.v;
        h.present = g.present;
        h.equal = g.equal;
        h.first = g.first;
        if (g.has_lp) {
            h.lp = g.lp;
            h.ratio = g.ratio;
            h.kl = g.kl;
        }
        h.plan_a = plan_a && *plan_a ? plan_a : NULL;
        h.plan_b = plan_b && *plan_b ? plan_b : NULL;
        h.label_a = against ? trace : "plan";
        h.label_b = against ? against : "";
        h.bisect = bj;
        char date[64] = "";
        time_t now = time(NULL);
        struct tm tmv;
        if (gmtime_r(&now, &tmv)) strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", &tmv);
        h.version = DRIFT_VERSION;
        h.command_line = cmdline;
        h.date = date;
        h.run_a = trace ? run[0] : NULL;
        h.run_b = against ? run[1] : NULL;
        h.warnings = (const char *const *)warn;
        h.n_warnings = n_warn;
        /* a temporary beside the target, renamed when complete */
        drift_outpath op;
        FILE *f = NULL;
        if (!(rc = drift_outpath_open(&op, out, &err)) && !(f = fdopen(op.fd, "w"))) {
            rc = drift_err_set(&err, DRIFT_E_IO, out, "cannot write: %s", strerror(errno));
            drift_outpath_abort(&op);
        } else if (!rc) {
            op.fd = -1; /* f owns it */
            int wr = drift_report_html_write(&h, f);
            if (fclose(f) != 0 || wr != 0) {
                rc = drift_err_set(&err, DRIFT_E_IO, out, "write failed: %s", strerror(errno));
                drift_outpath_abort(&op);
            } else {
                rc = drift_outpath_commit(&op, force, &err);
            }
        }
        const drift_json_value *bt = bj && !trace ? drift_json_object_get(bj, "trace") : NULL;
        if (!rc && bt && bt->type == DRIFT_JSON_STRING)
        {
            char safe[4096]; /* a string from the file, made safe for the terminal */
            fprintf(stderr, "drift report: wrote %s (the bisect of %s)\n", out, drift_cli_printable(bt->str, safe, sizeof safe));
        }
        else if (!rc) fprintf(stderr, "drift report: wrote %s (%zu sites x %zu steps)\n", out, g.n_sites, g.n_steps);
    }
    grid_free(&g);
    free(plan_a);
    free(plan_b);
    for (size_t i = 0; i < n_warn; i++) free(warn[i]);
    free(warn);
    drift_json_free(bj);
    drift_sitemap_free(map);
    return rc ? drift_cli_report("report", &err) : 0;
}
