#include "cli/trace_args.h"

#include <stdio.h>
#include <string.h>

#include "cli/cli_util.h"
#include "formats/trace.h"
#include "replay/drive/replay_trace.h"

int drift_cli_resolve_steps(const char *cmd, const char *spec, const char *trace, int64_t *first, int64_t *last) {
    drift_err err;
    drift_err_clear(&err);
    if (drift_replay_parse_steps(spec, first, last, &err)) return drift_cli_report(cmd, &err);
    if (!spec) return 0;
    drift_trace_reader *r = NULL;
    if (drift_trace_reader_open(&r, trace, DRIFT_TRACE_OPEN_NORMAL, &err)) return drift_cli_report(cmd, &err);
    size_t n = 0;
    const drift_trace_step *st = drift_trace_reader_steps(r, &n);
    int64_t lo = -1, hi = -1;
    for (size_t i = 0; i < n; i++) {
        if (lo < 0 || st[i].step < lo) lo = st[i].step;
        if (st[i].step > hi) hi = st[i].step;
    }
    size_t in = 0;
    for (size_t i = 0; i < n; i++)
        in += (*first < 0 || st[i].step >= *first) && (*last < 0 || st[i].step <= *last);
    drift_trace_reader_close(r);
    int rc = 0;
    if (n == 0)
        rc = drift_cli_usage_error_field(cmd, "--steps", "--steps %s: %s has no committed step", spec, trace);
    else if ((*first >= 0 && (*first < lo || *first > hi)) || (*last >= 0 && (*last < lo || *last > hi)))
        rc = drift_cli_usage_error_field(cmd, "--steps", "--steps %s: out of range; %s has steps %lld..%lld (%zu committed)",
                                         spec, trace, (long long)lo, (long long)hi, n);
    else if (in == 0)
        rc = drift_cli_usage_error_field(cmd, "--steps", "--steps %s: no committed step of %s is in the range (it has %zu, %lld..%lld)",
                                         spec, trace, n, (long long)lo, (long long)hi);
    return rc;
}

int drift_cli_trace_plan(const char *cmd, const char *trace, drift_plan *out) {
    drift_err err;
    drift_err_clear(&err);
    drift_plan_init(out);
    drift_trace_reader *r = NULL;
    if (drift_trace_reader_open(&r, trace, DRIFT_TRACE_OPEN_NORMAL, &err)) return drift_cli_report(cmd, &err);
    const drift_trace_meta *m = drift_trace_reader_meta(r);
    int rc = 0;
    char where[4200];
    snprintf(where, sizeof where, "%s:/ attribute plan", trace);
    if (!m->plan_json || !m->plan_json[0] || strcmp(m->plan_json, "{}") == 0) {
        drift_err_set(&err, DRIFT_E_INPUT, where, "the trace records no plan; give --plan P (or plan flags)");
        rc = drift_cli_report(cmd, &err);
    } else if (drift_plan_parse_json(out, m->plan_json, strlen(m->plan_json), where, &err)) {
        drift_err_prefix(&err, "the recorded plan does not parse (give --plan P)");
        rc = drift_cli_report(cmd, &err);
    }
    drift_trace_reader_close(r);
    if (rc) drift_plan_free(out);
    return rc;
}

static void shape_str(const drift_trace_site_info *si, char *buf, size_t sz) {
    size_t o = (size_t)snprintf(buf, sz, "[");
    for (int d = 0; d < si->ndim && o < sz; d++)
        o += (size_t)snprintf(buf + o, sz - o, "%s%lld", d ? "," : "", (long long)si->shape[d]);
    if (o < sz) snprintf(buf + o, sz - o, "]");
}

/* 1 if two traces' families name the same model: equal, or a captured graph
 * named with and without its class ("graph" as the Python recorder writes
 * it, "graph:CLASS" as a replay's output does). */
static int same_family(const char *a, const char *b) {
    a = a ? a : "", b = b ? b : "";
    if (!strcmp(a, b)) return 1;
    return (!strcmp(a, "graph") && !strncmp(b, "graph:", 6)) || (!strcmp(b, "graph") && !strncmp(a, "graph:", 6));
}

/* The first way ref does not fit trace, written into why (empty: it fits). */
static int ref_mismatch(drift_trace_reader *t, drift_trace_reader *r, const char *trace, const char *ref, int64_t first,
                        int64_t last, char *why, size_t sz, drift_err *err) {
    why[0] = '\0';
    const char *ft = drift_trace_reader_meta(t)->family, *fr = drift_trace_reader_meta(r)->family;
    if (!same_family(ft, fr)) {
        snprintf(why, sz, "--ref %s: model family '%.300s' differs from %s's '%.300s'", ref, fr ? fr : "", trace, ft ? ft : "");
        return 0;
    }
    size_t nt = 0, nr = 0;
    const drift_trace_step *st = drift_trace_reader_steps(t, &nt), *sr = drift_trace_reader_steps(r, &nr);
    for (size_t i = 0; i < nt; i++) {
        if ((first >= 0 && st[i].step < first) || (last >= 0 && st[i].step > last)) continue;
        int found = 0;
        for (size_t k = 0; k < nr && !found; k++) found = sr[k].step == st[i].step;
        if (!found) {
            if (nr)
                snprintf(why, sz, "--ref %s: has no committed step %lld (it has %zu, %lld..%lld), which %s replays", ref,
                         (long long)st[i].step, nr, (long long)sr[0].step, (long long)sr[nr - 1].step, trace);
            else
                snprintf(why, sz, "--ref %s: has no committed step, %s replays %lld", ref, trace, (long long)st[i].step);
            return 0;
        }
    }
    size_t ns = drift_trace_reader_n_sites(t);
    for (size_t i = 0; i < ns; i++) {
        drift_trace_site_info a, b;
        if (drift_trace_reader_site(t, i, &a, err)) return 2;
        long k = drift_trace_reader_find_site(r, a.name);
        if (k < 0) continue;
        if (drift_trace_reader_site(r, (size_t)k, &b, err)) return 2;
        int same = a.ndim == b.ndim;
        for (int d = 0; same && d < a.ndim; d++) same = a.shape[d] == b.shape[d];
        if (!same) {
            char sa[160], sb[160];
            shape_str(&a, sa, sizeof sa);
            shape_str(&b, sb, sizeof sb);
            snprintf(why, sz, "--ref %s: site '%.200s' has shape %s there, %s in %s", ref, a.name, sb, sa, trace);
            return 0;
        }
    }
    return 0;
}

int drift_cli_check_ref_match(const char *cmd, const char *trace, const char *ref, int64_t first, int64_t last,
                              int allow) {
    drift_err err;
    drift_err_clear(&err);
    drift_trace_reader *t = NULL, *r = NULL;
    if (drift_trace_reader_open(&t, trace, DRIFT_TRACE_OPEN_NORMAL, &err)) return drift_cli_report(cmd, &err);
    if (drift_trace_reader_open(&r, ref, DRIFT_TRACE_OPEN_NORMAL, &err)) {
        drift_trace_reader_close(t);
        return drift_cli_report(cmd, &err);
    }
    char why[1200];
    int rc = ref_mismatch(t, r, trace, ref, first, last, why, sizeof why, &err);
    drift_trace_reader_close(r);
    drift_trace_reader_close(t);
    if (rc) return drift_cli_report(cmd, &err);
    if (!why[0]) return 0;
    if (allow) {
        fprintf(stderr, "drift %s: warning: %s (compared anyway: --allow-mismatch)\n", cmd, why);
        return 0;
    }
    return drift_cli_usage_error_field(cmd, "--ref", "%s; give --allow-mismatch to compare anyway", why);
}
