#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include <time.h>

#include "formats/trace.h"
#include "replay/analysis/compare_traces.h"

/* Records of one site by step: the first stored record of each step. */
static int step_records(drift_trace_reader *r, size_t site, int64_t n, int64_t **steps, int64_t **recs, int64_t *m,
                        drift_err *err) {
    *steps = *recs = NULL;
    *m = 0;
    if (n == 0) return DRIFT_OK;
    drift_trace_index *rows = drift_malloc((size_t)n * sizeof *rows);
    *steps = drift_malloc((size_t)n * sizeof **steps);
    *recs = drift_malloc((size_t)n * sizeof **recs);
    if (!rows || !*steps || !*recs) {
        free(rows);
        return drift_err_set(err, DRIFT_E_NOMEM, drift_trace_reader_path(r), "out of memory");
    }
    int rc = drift_trace_read_index(r, site, 0, n, rows, err);
    for (int64_t i = 0; !rc && i < n; i++) {
        if (!rows[i].stored) continue;
        if (*m > 0 && (*steps)[*m - 1] == rows[i].step) continue;
        (*steps)[*m] = rows[i].step;
        (*recs)[*m] = i;
        (*m)++;
    }
    free(rows);
    return rc;
}

int drift_compare_traces(const char *path_a, const char *path_b, drift_replay_report *rep, drift_err *err) {
    memset(rep, 0, sizeof *rep);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    drift_trace_reader *a = NULL, *b = NULL;
    float *va = NULL, *vb = NULL;
    size_t cap = 0;
    int rc = drift_trace_reader_open(&a, path_a, DRIFT_TRACE_OPEN_NORMAL, err);
    if (!rc) rc = drift_trace_reader_open(&b, path_b, DRIFT_TRACE_OPEN_NORMAL, err);
    if (rc) goto done;
    drift_sitecmp_init(&rep->cmp, drift_trace_reader_meta(a)->guidance_scale);
    snprintf(rep->model, sizeof rep->model, "%s", drift_trace_reader_meta(a)->family);
    snprintf(rep->ref_desc, sizeof rep->ref_desc, "%s", path_b);
    size_t n_steps = 0;
    const drift_trace_step *st = drift_trace_reader_steps(a, &n_steps);
    rep->steps = drift_calloc(n_steps ? n_steps : 1, sizeof *rep->steps);
    rep->first_divergent = drift_calloc(n_steps ? n_steps : 1, sizeof *rep->first_divergent);
    if (!rep->steps || !rep->first_divergent) { rc = drift_err_set(err, DRIFT_E_NOMEM, path_a, "out of memory"); goto done; }
    for (size_t i = 0; i < n_steps; i++) rep->steps[i] = st[i].step;
    rep->n_steps = (int64_t)n_steps;
    /* Site by site (execution order of A), step by step; the first divergent
     * site of a step is the first site in A's order whose bits differ. */
    size_t ns = drift_trace_reader_n_sites(a);
    for (size_t s = 0; s < ns && !rc; s++) {
        drift_trace_site_info ia, ib;
        if ((rc = drift_trace_reader_site(a, s, &ia, err))) break;
        long sb = drift_trace_reader_find_site(b, ia.name);
        if (sb < 0 || !ia.has_data) continue;
        if ((rc = drift_trace_reader_site(b, (size_t)sb, &ib, err))) break;
        if (!ib.has_data || ib.numel != ia.numel) continue;
        if ((size_t)ia.numel > cap) {
            float *x = drift_realloc(va, (size_t)ia.numel * sizeof *x);
            if (x) va = x;
            float *y = x ? drift_realloc(vb, (size_t)ia.numel * sizeof *y) : NULL;
            if (!x || !y) { rc = drift_err_set(err, DRIFT_E_NOMEM, path_a, "out of memory"); break; }
            vb = y;
            cap = (size_t)ia.numel;
        }
        int64_t *sa = NULL, *ra = NULL, *sbv = NULL, *rb = NULL, ma = 0, mb = 0;
        rc = step_records(a, s, ia.n_records, &sa, &ra, &ma, err);
        if (!rc) rc = step_records(b, (size_t)sb, ib.n_records, &sbv, &rb, &mb, err);
        for (int64_t i = 0, j = 0; !rc && i < ma; i++) {
            while (j < mb && sbv[j] < sa[i]) j++;
            if (j >= mb || sbv[j] != sa[i]) continue;
            if ((rc = drift_trace_read_record_f32(a, s, ra[i], va, cap, err))) break;
            if ((rc = drift_trace_read_record_f32(b, (size_t)sb, rb[j], vb, cap, err))) break;
            drift_sitecmp_entry *e = drift_sitecmp_find(&rep->cmp, ia.name);
            int64_t before = e ? e->steps - e->steps_equal : 0;
            if ((rc = drift_sitecmp_add(&rep->cmp, ia.name, ia.dtype, va, vb, ia.numel, 1, sa[i], NULL, err))) break;
            e = drift_sitecmp_find(&rep->cmp, ia.name);
            int differs = e->steps - e->steps_equal > before;
            for (size_t k = 0; differs && k < n_steps; k++) {
                if (rep->steps[k] != sa[i] || rep->first_divergent[k]) continue;
                rep->first_divergent[k] = drift_strdup(ia.name);
                if (!rep->first_divergent[k]) {
                    rc = drift_err_set(err, DRIFT_E_NOMEM, path_a, "out of memory");
                    break;
                }
            }
        }
        free(sa); free(ra); free(sbv); free(rb);
    }
    /* first_divergent counts: recompute from the per-step names */
    for (size_t i = 0; i < rep->cmp.n; i++) rep->cmp.e[i].first_divergent = 0;
    for (int64_t k = 0; k < rep->n_steps; k++) {
        if (!rep->first_divergent[k]) continue;
        drift_sitecmp_entry *e = drift_sitecmp_find(&rep->cmp, rep->first_divergent[k]);
        if (e) e->first_divergent++;
    }
done:
    clock_gettime(CLOCK_MONOTONIC, &t1);
    rep->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    free(va);
    free(vb);
    drift_trace_reader_close(a);
    drift_trace_reader_close(b);
    return rc;
}
