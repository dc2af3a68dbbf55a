#include "cli/bisect_cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/bisect_fix.h"
#include "cli/cli_util.h"
#include "formats/outpath.h"
#include "formats/trace.h"
#include "cli/progress.h"
#include "cli/report.h"
#include "formats/json.h"

void drift_bisect_cli_opts_init(drift_bisect_cli_opts *o) {
    memset(o, 0, sizeof *o);
    drift_bisect_opts_init(&o->lib);
    o->backend = "cpu";
}

typedef struct stream_ctx {
    drift_cli_progress *prog;
    const char *metric;
} stream_ctx;

/* git-bisect-like: one line per finished probe, numbered over the whole run. */
static void on_probe(const drift_bisect_probe *p, void *user) {
    stream_ctx *c = user;
    char line[512], m[32];
    char reuse[48] = "";
    if (p->prefix_skipped > 0) snprintf(reuse, sizeof reuse, ", %.0f%% of the forward reused", 100.0 * p->prefix_skipped);
    snprintf(line, sizeof line, "probe %ld (round %d): %zu of %zu difference%s applied -> %s (%s %s, %.2f s%s)", p->seq,
             p->round, p->n_applied, p->n_diffs, p->n_diffs == 1 ? "" : "s",
             p->fails < 0 ? "error" : p->fails ? "drifts" : "as good", c->metric, drift_report_num(p->metric, m, sizeof m),
             p->seconds, reuse);
    drift_cli_progress_line(c->prog, line);
}

static void on_set(const drift_bisect_result *r, size_t k, void *user) {
    stream_ctx *c = user;
    char line[2048];
    size_t len = (size_t)snprintf(line, sizeof line, "culprit set %zu found:", k + 1);
    for (size_t i = r->set_start[k]; i < r->set_start[k] + r->set_len[k] && len < sizeof line - 8; i++)
        len += (size_t)snprintf(line + len, sizeof line - len, "%s %s", i > r->set_start[k] ? "," : "",
                                r->diffs[r->culprits[i].diff].name);
    drift_cli_progress_line(c->prog, line);
}

/* Writes the fix plan to o->fix_out: a temporary beside it, renamed when
 * complete (an interrupted write leaves no half plan). The caller checked
 * --force before the work. */
static int write_fix(const drift_bisect_cli_opts *o, const drift_bisect_result *r, drift_err *err) {
    char *json = drift_bisect_plan_pretty(&r->fix_plan);
    if (!json) return drift_err_set(err, DRIFT_E_NOMEM, o->fix_out, "out of memory");
    size_t len = strlen(json);
    json[len] = '\n'; /* the plan and a final newline, through formats/outpath.h */
    int rc = drift_outpath_write_file(o->fix_out, json, len + 1, o->force, err);
    json[len] = '\0';
    free(json);
    return rc;
}

static void probe_log(const char *line, void *user) {
    (void)user;
    fprintf(stderr, "%s\n", line);
}

static const char *diff_kind_name(drift_diff_kind k) {
    switch (k) {
    case DRIFT_DIFF_FLAG: return "flag";
    case DRIFT_DIFF_INPUT: return "input";
    case DRIFT_DIFF_ROPE: return "buffer";
    case DRIFT_DIFF_PATTERN_ADD: return "pattern";
    case DRIFT_DIFF_PATTERN_DROP: return "pattern";
    case DRIFT_DIFF_PARAM: return "param";
    }
    return "?";
}

/* One CSV field, quoted (names hold ',' or '"' only in hostile plans). */
static void csv_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const char *p = s ? s : ""; *p; p++) {
        if (*p == '"') fputc('"', f);
        fputc(*p, f);
    }
    fputc('"', f);
}

static void csv_num(FILE *f, double v) {
    if (isnan(v)) fputs(",", f);
    else if (isinf(v)) fputs(v > 0 ? ",inf" : ",-inf", f);
    else fprintf(f, ",%.9g", v);
}

/* The culprits as CSV: one header row, one row per culprit (set numbered
 * from 1, as the text); no rows when there is no culprit. */
static void print_csv(const drift_bisect_result *r, FILE *out) {
    fputs("set,name,kind,good,bad,metric_alone,metric_without,floor_units,first_divergent,pattern,pattern_plan\n", out);
    for (size_t k = 0; k < r->n_sets; k++)
        for (size_t c = r->set_start[k]; c < r->set_start[k] + r->set_len[k]; c++) {
            const drift_culprit_effect *e = &r->culprits[c];
            fprintf(out, "%zu,", k + 1);
            csv_str(out, r->diffs[e->diff].name);
            fprintf(out, ",%s,", diff_kind_name(r->diffs[e->diff].kind));
            csv_str(out, r->diffs[e->diff].good_value);
            fputc(',', out);
            csv_str(out, r->diffs[e->diff].bad_value);
            csv_num(out, e->metric);
            csv_num(out, e->metric_without);
            csv_num(out, e->floor_units);
            fputc(',', out);
            if (e->first_divergent[0]) csv_str(out, e->first_divergent);
            fputc(',', out);
            if (r->diffs[e->diff].pattern[0]) csv_str(out, r->diffs[e->diff].pattern);
            fprintf(out, ",%s\n", r->diffs[e->diff].pattern_plan);
        }
}

/* The plan pattern groups: one per distinct (pattern, plan) of the
 * differences, in order of first appearance; grp[i] = group of diff i. */
typedef struct pattern_groups {
    size_t *grp, *first, n;      /* first[g]: a difference of group g */
} pattern_groups;

static int groups_build(const drift_bisect_result *r, pattern_groups *g) {
    memset(g, 0, sizeof *g);
    g->grp = calloc(r->n_diffs + 1, sizeof *g->grp);
    g->first = calloc(r->n_diffs + 1, sizeof *g->first);
    if (!g->grp || !g->first) return DRIFT_E_NOMEM;
    for (size_t i = 0; i < r->n_diffs; i++) {
        size_t k = 0;
        for (; k < g->n; k++) {
            const drift_plan_diff *a = &r->diffs[g->first[k]], *b = &r->diffs[i];
            if (!strcmp(a->pattern, b->pattern) && !strcmp(a->pattern_plan, b->pattern_plan)) break;
        }
        if (k == g->n) g->first[g->n++] = i;
        g->grp[i] = k;
    }
    return DRIFT_OK;
}

static void groups_free(pattern_groups *g) {
    free(g->grp);
    free(g->first);
}

static int is_culprit(const drift_bisect_result *r, size_t diff) {
    for (size_t c = 0; c < r->n_culprits; c++)
        if (r->culprits[c].diff == diff) return 1;
    return 0;
}

/* "'glob' (bad plan)", or the difference's own name for flags and inputs. */
static const char *group_label(const drift_plan_diff *d, char *buf, size_t n) {
    if (d->pattern[0]) snprintf(buf, n, "'%.500s' (%s plan)", d->pattern, d->pattern_plan);
    else snprintf(buf, n, "%.500s", d->name);
    return buf;
}

/* The fix as a diff of the bad plan (pretty JSON, line by line). */
static char *fix_diff(const drift_bisect_cli_opts *o, const drift_bisect_result *r) {
    char *a = drift_bisect_plan_pretty(o->bad), *b = drift_bisect_plan_pretty(&r->fix_plan);
    char *d = a && b ? drift_bisect_line_diff(a, b, o->bad->source[0] ? o->bad->source : "bad plan", o->fix_out, 1) : NULL;
    free(a);
    free(b);
    return d;
}

static int print_json(const drift_bisect_cli_opts *o, const drift_bisect_result *r, FILE *out) {
    drift_json_buf b;
    drift_json_buf_init_pretty(&b, 2);
    drift_json_buf_begin_object(&b);
    drift_json_buf_field_string(&b, "trace", o->trace);
    { /* the run and model bisected, so that `drift report` can tell a bisect of another trace */
        drift_trace_reader *tr = NULL;
        drift_err te;
        drift_err_clear(&te);
        const drift_trace_meta *tm = drift_trace_reader_open(&tr, o->trace, DRIFT_TRACE_OPEN_NORMAL, &te) ? NULL
                                                                                                        : drift_trace_reader_meta(tr);
        drift_json_buf_field_string(&b, "run_id", tm ? tm->run_id : NULL);
        drift_json_buf_field_string(&b, "family", tm ? tm->family : NULL);
        drift_trace_reader_close(tr);
    }
    drift_json_buf_field_string(&b, "good", o->good->name);
    drift_json_buf_field_string(&b, "bad", o->bad->name);
    drift_json_buf_field_string(&b, "metric", drift_bisect_metric_name(o->lib.metric));
    drift_json_buf_field_string(&b, "granularity", o->granularity_param ? "param" : "pattern");
    drift_json_buf_field_string(&b, "reference", o->lib.ref == DRIFT_BISECT_REF_GOOD ? "good" : "rollout");
    drift_json_buf_field_number(&b, "good_metric", r->good_metric);
    drift_json_buf_field_number(&b, "bad_metric", r->bad_metric);
    drift_json_buf_field_number(&b, "noise_floor", r->noise_floor);
    drift_json_buf_field_number(&b, "threshold", r->threshold);
    drift_json_buf_field_bool(&b, "good_over_threshold", r->good_fails);
    drift_json_buf_field_string(&b, "threshold_source", r->threshold_from_floor ? "noise_floor" : "explicit");
    drift_json_buf_add_key(&b, "differences");
    drift_json_buf_begin_array(&b);
    for (size_t i = 0; i < r->n_diffs; i++) {
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_string(&b, "kind", diff_kind_name(r->diffs[i].kind));
        drift_json_buf_field_string(&b, "name", r->diffs[i].name);
        drift_json_buf_field_string(&b, "good", r->diffs[i].good_value);
        drift_json_buf_field_string(&b, "bad", r->diffs[i].bad_value);
        drift_json_buf_field_string(&b, "pattern", r->diffs[i].pattern[0] ? r->diffs[i].pattern : NULL);
        drift_json_buf_field_string(&b, "pattern_plan", r->diffs[i].pattern_plan[0] ? r->diffs[i].pattern_plan : NULL);
        if (r->harmless_known) drift_json_buf_field_bool(&b, "harmless", r->harmless[i]);
        else drift_json_buf_field_null(&b, "harmless");
        drift_json_buf_end_object(&b);
    }
    drift_json_buf_end_array(&b);
    drift_json_buf_add_key(&b, "culprit_sets");
    drift_json_buf_begin_array(&b);
    for (size_t k = 0; k < r->n_sets; k++) {
        drift_json_buf_begin_array(&b);
        for (size_t c = r->set_start[k]; c < r->set_start[k] + r->set_len[k]; c++) {
            const drift_culprit_effect *e = &r->culprits[c];
            drift_json_buf_begin_object(&b);
            drift_json_buf_field_string(&b, "name", r->diffs[e->diff].name);
            drift_json_buf_field_string(&b, "kind", diff_kind_name(r->diffs[e->diff].kind));
            drift_json_buf_field_string(&b, "good", r->diffs[e->diff].good_value);
            drift_json_buf_field_string(&b, "bad", r->diffs[e->diff].bad_value);
            drift_json_buf_field_number(&b, "metric_alone", e->metric);
            drift_json_buf_field_number(&b, "metric_without", e->metric_without);
            drift_json_buf_field_number(&b, "floor_units", e->floor_units);
            drift_json_buf_field_string(&b, "first_divergent", e->first_divergent[0] ? e->first_divergent : NULL);
            const drift_plan_diff *d = &r->diffs[e->diff];
            drift_json_buf_field_string(&b, "pattern", d->pattern[0] ? d->pattern : NULL);
            drift_json_buf_field_string(&b, "pattern_plan", d->pattern_plan[0] ? d->pattern_plan : NULL);
            /* alone within the noise floor: a culprit only together with the rest of its set */
            drift_json_buf_field_bool(&b, "alone_below_floor", !(e->metric > r->noise_floor));
            drift_json_buf_end_object(&b);
        }
        drift_json_buf_end_array(&b);
    }
    drift_json_buf_end_array(&b);
    /* the differences shown harmless (null: not established, e.g. without --all) */
    drift_json_buf_add_key(&b, "harmless");
    if (!r->harmless_known) drift_json_buf_add_null(&b);
    else {
        drift_json_buf_begin_array(&b);
        for (size_t i = 0; i < r->n_diffs; i++)
            if (r->harmless[i]) drift_json_buf_add_string(&b, r->diffs[i].name);
        drift_json_buf_end_array(&b);
    }
    /* the same, grouped under the plan pattern each difference came from */
    pattern_groups g;
    if (groups_build(r, &g)) {
        groups_free(&g);
        drift_json_buf_free(&b);
        return DRIFT_E_NOMEM;
    }
    drift_json_buf_add_key(&b, "patterns");
    drift_json_buf_begin_array(&b);
    for (size_t k = 0; k < g.n; k++) {
        const drift_plan_diff *f = &r->diffs[g.first[k]];
        size_t n = 0, nh = 0;
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_string(&b, "pattern", f->pattern[0] ? f->pattern : NULL);
        drift_json_buf_field_string(&b, "plan", f->pattern_plan[0] ? f->pattern_plan : NULL);
        drift_json_buf_field_string(&b, "name", f->pattern[0] ? NULL : f->name);
        drift_json_buf_add_key(&b, "culprits");
        drift_json_buf_begin_array(&b);
        for (size_t i = 0; i < r->n_diffs; i++) {
            if (g.grp[i] != k) continue;
            n++;
            nh += r->harmless_known && r->harmless[i];
            if (is_culprit(r, i)) drift_json_buf_add_string(&b, r->diffs[i].name);
        }
        drift_json_buf_end_array(&b);
        drift_json_buf_field_int(&b, "differences", (int64_t)n);
        if (r->harmless_known) drift_json_buf_field_int(&b, "harmless", (int64_t)nh);
        else drift_json_buf_field_null(&b, "harmless");
        drift_json_buf_end_object(&b);
    }
    drift_json_buf_end_array(&b);
    groups_free(&g);
    if (o->fix_out) {
        drift_json_buf_add_key(&b, "fix");
        if (!r->has_fix) {
            drift_json_buf_add_null(&b);
        } else {
            char *plan = drift_plan_to_json(&r->fix_plan);
            drift_json_buf_begin_object(&b);
            drift_json_buf_field_string(&b, "path", o->fix_out);
            drift_json_buf_add_key(&b, "plan");
            if (plan) drift_json_buf_add_raw(&b, plan);
            else drift_json_buf_add_null(&b);
            free(plan);
            drift_json_buf_field_bool(&b, "verified", r->fix_verified);
            drift_json_buf_field_number(&b, "output_mean_abs_diff", r->fix_output_mean_abs_diff);
            drift_json_buf_field_number(&b, "good_output_mean_abs_diff", r->good_output_mean_abs_diff);
            /* the same check in the bisect's own metric (what "metric" names) */
            drift_json_buf_field_number(&b, "output_metric", r->fix_metric);
            drift_json_buf_field_number(&b, "good_output_metric", r->good_metric);
            /* the edit of the bad plan, as a line diff of the pretty plans */
            char *d = fix_diff(o, r);
            drift_json_buf_field_string(&b, "diff", d);
            free(d);
            drift_json_buf_end_object(&b);
        }
    }
    drift_json_buf_field_int(&b, "probes", (int64_t)r->probes);
    drift_json_buf_field_int(&b, "memo_hits", (int64_t)r->memo_hits);
    drift_json_buf_field_int(&b, "max_concurrent_probes", (int64_t)r->max_concurrent);
    drift_json_buf_field_int(&b, "replays", (int64_t)r->replays);
    /* prefix reuse: the good replay's activations at the first node a difference touches */
    drift_json_buf_add_key(&b, "prefix_cache");
    drift_json_buf_begin_object(&b);
    drift_json_buf_field_bool(&b, "on", r->prefix_on);
    drift_json_buf_field_int(&b, "boundaries", (int64_t)r->prefix_boundaries);
    drift_json_buf_field_int(&b, "bytes", (int64_t)r->prefix_bytes);
    drift_json_buf_field_int(&b, "replays", (int64_t)r->prefix_candidates);
    drift_json_buf_field_int(&b, "reused", (int64_t)r->prefix_reused);
    drift_json_buf_field_number(&b, "skipped_fraction", r->prefix_skipped_fraction);
    drift_json_buf_end_object(&b);
    drift_json_buf_field_int(&b, "values_adopted", (int64_t)r->values_adopted);
    drift_json_buf_field_int(&b, "steps", r->n_steps);
    drift_json_buf_field_string(&b, "kernels", r->kernels[0] ? r->kernels : NULL);
    drift_json_buf_field_string(&b, "kernels_why", r->kernels[0] && o->kernels_why && o->kernels_why[0] ? o->kernels_why : NULL);
    drift_json_buf_field_number(&b, "seconds", r->seconds);
    drift_json_buf_end_object(&b);
    char *s = drift_json_buf_take(&b);
    if (!s) return DRIFT_E_NOMEM;
    fprintf(out, "%s\n", s);
    free(s);
    return DRIFT_OK;
}

int drift_bisect_cli_run(const drift_bisect_cli_opts *o, FILE *out, drift_err *err) {
    drift_bisect_opts lo = o->lib;
    lo.trace = o->trace;
    lo.good = o->good;
    lo.bad = o->bad;
    lo.backend = o->backend;
    lo.granularity_param = o->granularity_param;
    if (lo.devices) lo.log = probe_log;
    stream_ctx sc = {NULL, drift_bisect_metric_name(lo.metric)};
    if (o->stream && !o->json) {
        sc.prog = drift_cli_progress_start("bisect", "loading the trace");
        if (!lo.devices) lo.on_probe = on_probe;
        lo.on_set = on_set;
        lo.event_user = &sc;
        lo.progress = drift_cli_progress_cb;
        lo.progress_user = sc.prog;
    }
    lo.fix = o->fix_out != NULL;
    drift_bisect_result r;
    int rc = drift_bisect_run(&lo, &r, err);
    drift_cli_progress_finish(sc.prog);
    if (!rc && o->fix_out && r.has_fix) rc = write_fix(o, &r, err);
    if (rc) {
        drift_bisect_result_free(&r);
        return rc;
    }
    if (o->json) {
        rc = print_json(o, &r, out);
        if (!rc && r.good_fails)
            rc = drift_err_set(err, DRIFT_E_CHECK, o->trace, "the good plan is itself over the threshold");
        drift_bisect_result_free(&r);
        return rc;
    }
    if (o->csv) {
        print_csv(&r, out);
        rc = r.good_fails ? drift_err_set(err, DRIFT_E_CHECK, o->trace, "the good plan is itself over the threshold") : DRIFT_OK;
        drift_bisect_result_free(&r);
        return rc;
    }
    char a[32], b[32], c[32], d[32];
    const char *mname = drift_bisect_metric_name(lo.metric);
    fprintf(out, "bisect %s: good plan '%s', bad plan '%s', %s granularity, %lld step%s\n", o->trace, o->good->name,
            o->bad->name, o->granularity_param ? "parameter" : "pattern", (long long)r.n_steps, r.n_steps == 1 ? "" : "s");
    if (r.kernels[0])
        fprintf(out, "  kernels %s%s%s%s\n", r.kernels, o->kernels_why && o->kernels_why[0] ? " (" : "",
                o->kernels_why ? o->kernels_why : "", o->kernels_why && o->kernels_why[0] ? ")" : "");
    fprintf(out, "  reference: %s; %s: good %s, bad %s; noise floor %s; threshold %s\n",
            lo.ref == DRIFT_BISECT_REF_GOOD ? (r.threshold == 0 ? "the good plan's replay (bitwise question)" : "the good plan's replay")
                                            : "the recorded rollout output",
            mname, drift_report_num(r.good_metric, a, sizeof a), drift_report_num(r.bad_metric, b, sizeof b),
            drift_report_num(r.noise_floor, c, sizeof c), drift_report_num(r.threshold, d, sizeof d));
    if (r.good_fails) {
        fprintf(out, "the good plan itself is over the threshold (%s > %s): nothing to bisect\n",
                drift_report_num(r.good_metric, a, sizeof a), drift_report_num(r.threshold, b, sizeof b));
        drift_bisect_result_free(&r);
        return drift_err_set(err, DRIFT_E_CHECK, o->trace, "the good plan is itself over the threshold");
    }
    fprintf(out, "  %zu difference%s between the plans:\n", r.n_diffs, r.n_diffs == 1 ? "" : "s");
    for (size_t i = 0; i < r.n_diffs && i < 40; i++)
        fprintf(out, "    %-8s %-52s %s -> %s\n", diff_kind_name(r.diffs[i].kind), r.diffs[i].name, r.diffs[i].good_value,
                r.diffs[i].bad_value);
    if (r.n_diffs > 40) fprintf(out, "    ... and %zu more\n", r.n_diffs - 40);
    if (r.threshold_from_floor)
        fprintf(out, "  threshold: the good plan's value + %s x the noise floor (below it a difference is harmless;\n"
                     "  --threshold 0 asks the bitwise question)\n",
                lo.has_threshold_floor ? drift_report_num(lo.threshold_floor, a, sizeof a) : "1");
    if (r.n_sets == 0) {
        fprintf(out, "no culprit: applying every difference to the good plan stays within the threshold\n");
    }
    char lab[600];
    for (size_t k = 0; k < r.n_sets; k++) {
        fprintf(out, "culprit set %zu (1-minimal, %zu member%s):\n", k + 1, r.set_len[k], r.set_len[k] == 1 ? "" : "s");
        for (size_t cc = r.set_start[k]; cc < r.set_start[k] + r.set_len[k]; cc++) {
            const drift_culprit_effect *e = &r.culprits[cc];
            const drift_plan_diff *df = &r.diffs[e->diff];
            fprintf(out, "  %s (%s -> %s)", df->name, df->good_value, df->bad_value);
            if (df->kind == DRIFT_DIFF_PARAM && df->pattern[0]) fprintf(out, " from %s", group_label(df, lab, sizeof lab));
            fprintf(out, "\n    alone: %s = %s (%s x noise floor%s), first divergent site %s\n"
                         "    every other difference without it: %s\n",
                    mname, drift_report_num(e->metric, a, sizeof a),
                    isinf(e->floor_units) ? "inf" : drift_report_num(e->floor_units, b, sizeof b),
                    e->metric > r.noise_floor ? "" : "; harmless alone: it drifts only with the rest of its set",
                    e->first_divergent[0] ? e->first_divergent : "(none)", drift_report_num(e->metric_without, c, sizeof c));
        }
    }
    /* Every difference under the plan pattern it came from: culprits named,
     * harmless ones counted. */
    pattern_groups g;
    if (r.n_diffs > 0 && !groups_build(&r, &g)) {
        fprintf(out, "by plan entry:\n");
        for (size_t k = 0; k < g.n; k++) {
            size_t n = 0, nh = 0, ncul = 0;
            for (size_t i = 0; i < r.n_diffs; i++)
                if (g.grp[i] == k) {
                    n++;
                    nh += r.harmless_known && r.harmless[i];
                    ncul += is_culprit(&r, i);
                }
            fprintf(out, "  %s: %zu difference%s, %zu culprit%s", group_label(&r.diffs[g.first[k]], lab, sizeof lab), n,
                    n == 1 ? "" : "s", ncul, ncul == 1 ? "" : "s");
            size_t shown = 0;
            for (size_t i = 0; i < r.n_diffs && ncul > 0; i++)
                if (g.grp[i] == k && is_culprit(&r, i)) {
                    if (shown < 8) fprintf(out, "%s%s", shown ? ", " : " (", r.diffs[i].name);
                    shown++;
                }
            if (ncul > 0) fprintf(out, "%s)", shown > 8 ? ", ..." : "");
            if (r.harmless_known) fprintf(out, ", %zu harmless", nh);
            else if (n > ncul) fprintf(out, ", %zu not examined (--all searches them)", n - ncul);
            fputc('\n', out);
        }
        groups_free(&g);
    }
    if (r.harmless_known) {
        size_t nh = 0;
        for (size_t i = 0; i < r.n_diffs; i++) nh += r.harmless[i];
        if (nh)
            fprintf(out, "harmless: %zu difference%s, applied together, stay%s within the threshold%s\n", nh, nh == 1 ? "" : "s",
                    nh == 1 ? "s" : "", r.threshold_from_floor ? " (below the noise floor)" : "");
    }
    if (o->fix_out) {
        if (r.has_fix) {
            fprintf(out, "fix: %s (plan '%s': the bad plan with the culprits taken from the good plan): %s; output mean |diff| %s (good plan %s)\n",
                    o->fix_out, r.fix_plan.name,
                    !r.fix_verified ? "NOT verified (still over the threshold)"
                    : r.fix_metric == r.good_metric ? "verified, back at the good plan's value"
                                                    : "verified, within the threshold of the good plan's value",
                    drift_report_num(r.fix_output_mean_abs_diff, a, sizeof a), drift_report_num(r.good_output_mean_abs_diff, b, sizeof b));
            char *dt = fix_diff(o, &r);
            if (dt) fputs(dt, out);
            free(dt);
        } else
            fprintf(out, "fix: none written (no culprit)\n");
    }
    fprintf(out, "%zu probes (%zu memoised, up to %zu concurrent%s%s), %zu replays in all, in %.2f s\n", r.probes, r.memo_hits,
            r.max_concurrent, lo.devices ? " on " : "", lo.devices ? lo.devices : "", r.replays, r.seconds);
    if (r.prefix_on)
        fprintf(out, "prefix reuse: %zu of %zu probe replays started past the inputs, %.1f%% of their forward skipped (%zu boundaries, %.1f MiB)\n",
                r.prefix_reused, r.prefix_candidates, 100.0 * r.prefix_skipped_fraction, r.prefix_boundaries,
                (double)r.prefix_bytes / 1048576.0);
    if (r.values_adopted)
        fprintf(out, "device cache: %zu parameter values and casts kept from one replay to the next\n", r.values_adopted);
    drift_bisect_result_free(&r);
    return DRIFT_OK;
}
