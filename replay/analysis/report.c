/* The shared replay options and report (replay/analysis/report.h). */
#include "replay/analysis/report.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void drift_replay_opts_init(drift_replay_opts *o) {
    memset(o, 0, sizeof *o);
    o->side = DRIFT_SIDE_TRAINER;
    o->ref = DRIFT_REF_TRAINER;
    o->step_first = o->step_last = -1;
    o->backend = "cpu";
    o->sites = 1;
}

void drift_replay_report_free(drift_replay_report *rep) {
    if (!rep) return;
    drift_sitecmp_free(&rep->cmp);
    if (rep->first_divergent)
        for (int64_t i = 0; i < rep->n_steps; i++) free(rep->first_divergent[i]);
    free(rep->first_divergent);
    free(rep->steps);
    free(rep->warnings);
    memset(rep, 0, sizeof *rep);
}

int drift_replay_parse_steps(const char *s, int64_t *first, int64_t *last, drift_err *err) {
    *first = *last = -1;
    if (!s || !*s) return DRIFT_OK;
    const char *colon = strchr(s, ':');
    char *end = NULL;
    errno = 0;
    if (!colon) {
        long long v = strtoll(s, &end, 10);
        if (errno || *end || v < 0) goto bad;
        *first = *last = v;
        return DRIFT_OK;
    }
    if (colon != s) {
        long long v = strtoll(s, &end, 10);
        if (errno || end != colon || v < 0) goto bad;
        *first = v;
    }
    if (colon[1]) {
        long long v = strtoll(colon + 1, &end, 10);
        if (errno || *end || v < 0) goto bad;
        *last = v;
    }
    if (*first >= 0 && *last >= 0 && *last < *first) goto bad;
    return DRIFT_OK;
bad:
    return drift_err_set(err, DRIFT_E_USAGE, "--steps", "expected A:B, A:, :B or A (non-negative, A <= B), got '%s'", s);
}
