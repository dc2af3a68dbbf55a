#include "cli/bisect_cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli_util.h"
#include "cli/progress.h"
#include "cli/report.h"
#include "formats/json.h"

void drift_bisect_cli_opts_init(drift_bisect_cli_opts *o) {
    memset(o, 0, sizeof *o);
    drift_bisect_opts_init(&o->lib);
    o->backend = "cpu";
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

/* Writes the suggested fix to o->fix_out: a temporary beside it, renamed
 * when complete; an existing file is kept unless --force. */
static int write_fix(const drift_bisect_cli_opts *o, const drift_bisect_result *r, drift_err *err) {
    if (!o->force && access(o->fix_out, F_OK) == 0)
        return drift_err_set(err, DRIFT_E_USAGE, o->fix_out, "exists (--force replaces it)");
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", o->fix_out, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return drift_err_set(err, DRIFT_E_IO, o->fix_out, "cannot write: %s", strerror(errno));
    int bad = fputs(r->fix_json, f) < 0 || fputc('\n', f) == EOF;
    if (fclose(f) != 0 || bad) {
        remove(tmp);
        return drift_err_set(err, DRIFT_E_IO, o->fix_out, "cannot write: %s", strerror(errno));
    }
    if (rename(tmp, o->fix_out) != 0) {
        remove(tmp);
        return drift_err_set(err, DRIFT_E_IO, o->fix_out, "cannot rename into place: %s", strerror(errno));
    }
    return DRIFT_OK;
}

static int print_json(const drift_bisect_cli_opts *o, const drift_bisect_result *r, FILE *out) {
    drift_json_buf b;
    drift_json_buf_init_pretty(&b, 2);
    drift_json_buf_begin_object(&b);
    drift_json_buf_field_string(&b, "trace", o->trace);
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
    drift_json_buf_add_key(&b, "differences");
    drift_json_buf_begin_array(&b);
    for (size_t i = 0; i < r->n_diffs; i++) {
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_string(&b, "kind", diff_kind_name(r->diffs[i].kind));
        drift_json_buf_field_string(&b, "name", r->diffs[i].name);
        drift_json_buf_field_string(&b, "good", r->diffs[i].good_value);
        drift_json_buf_field_string(&b, "bad", r->diffs[i].bad_value);
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
            drift_json_buf_end_object(&b);
        }
        drift_json_buf_end_array(&b);
    }
    drift_json_buf_end_array(&b);
    if (r->fix_json) { /* the suggested fix (--fix-out): its plan and the replay that checked it */
        drift_json_buf_add_key(&b, "fix");
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_string(&b, "path", o->fix_out);
        drift_json_buf_add_key(&b, "plan");
        drift_json_buf_add_raw(&b, r->fix_json);
        drift_json_buf_field_number(&b, "output_metric", r->fix_metric);
        drift_json_buf_field_number(&b, "good_output_metric", r->good_metric);
        drift_json_buf_field_bool(&b, "verified", r->fix_verified);
        drift_json_buf_end_object(&b);
    }
    drift_json_buf_field_int(&b, "probes", (int64_t)r->probes);
    drift_json_buf_field_int(&b, "memo_hits", (int64_t)r->memo_hits);
    drift_json_buf_field_int(&b, "max_concurrent_probes", (int64_t)r->max_concurrent);
    drift_json_buf_field_int(&b, "steps", r->n_steps);
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
    drift_cli_progress prog;
    drift_cli_progress_init(&prog);
    if (drift_cli_progress_enabled() && !o->json && !lo.devices) { /* --devices logs each probe instead */
        lo.progress = drift_cli_progress_bound;
        lo.progress_user = &prog;
    }
    if (lo.devices) lo.log = probe_log;
    lo.want_fix = o->fix_out != NULL;
    if (o->fix_out && !o->force && access(o->fix_out, F_OK) == 0) /* before the work, not after it */
        return drift_err_set(err, DRIFT_E_USAGE, o->fix_out, "exists (--force replaces it)");
    drift_bisect_result r;
    int rc = drift_bisect_run(&lo, &r, err);
    drift_cli_progress_end(lo.progress ? &prog : NULL);
    if (!rc && r.fix_json) rc = write_fix(o, &r, err);
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
    char a[32], b[32], c[32], d[32];
    const char *mname = drift_bisect_metric_name(lo.metric);
    fprintf(out, "bisect %s: good plan '%s', bad plan '%s', %s granularity, %lld step%s\n", o->trace, o->good->name,
            o->bad->name, o->granularity_param ? "parameter" : "pattern", (long long)r.n_steps, r.n_steps == 1 ? "" : "s");
    fprintf(out, "  reference: %s; %s: good %s, bad %s; noise floor %s; threshold %s\n",
            lo.ref == DRIFT_BISECT_REF_GOOD ? "the good plan's replay (bitwise question)" : "the recorded rollout output",
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
    if (r.n_sets == 0) {
        fprintf(out, "no culprit: applying every difference to the good plan stays within the threshold\n");
    }
    for (size_t k = 0; k < r.n_sets; k++) {
        fprintf(out, "culprit set %zu (1-minimal, %zu member%s):\n", k + 1, r.set_len[k], r.set_len[k] == 1 ? "" : "s");
        for (size_t cc = r.set_start[k]; cc < r.set_start[k] + r.set_len[k]; cc++) {
            const drift_culprit_effect *e = &r.culprits[cc];
            fprintf(out, "  %s (%s -> %s)\n    alone: %s = %s (%s x noise floor), first divergent site %s\n"
                         "    every other difference without it: %s\n",
                    r.diffs[e->diff].name, r.diffs[e->diff].good_value, r.diffs[e->diff].bad_value, mname,
                    drift_report_num(e->metric, a, sizeof a),
                    isinf(e->floor_units) ? "inf" : drift_report_num(e->floor_units, b, sizeof b),
                    e->first_divergent[0] ? e->first_divergent : "(none)", drift_report_num(e->metric_without, c, sizeof c));
        }
    }
    if (r.fix_json)
        fprintf(out, "suggested fix: %s (the bad plan with the culprits taken from the good plan); a replay gives %s = %s "
                     "(good plan %s): %s\n",
                o->fix_out, mname, drift_report_num(r.fix_metric, a, sizeof a), drift_report_num(r.good_metric, b, sizeof b),
                r.fix_verified ? "verified, back at the good plan's output" : "NOT verified, over the threshold");
    else if (o->fix_out)
        fprintf(out, "no fix written to %s: no culprit\n", o->fix_out);
    fprintf(out, "%zu probes (%zu memoised, up to %zu concurrent%s%s) in %.2f s\n", r.probes, r.memo_hits, r.max_concurrent,
            lo.devices ? " on " : "", lo.devices ? lo.devices : "", r.seconds);
    drift_bisect_result_free(&r);
    return DRIFT_OK;
}
