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
