#include "replay/analysis/sitecmp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"

void drift_sitecmp_init(drift_sitecmp *c, double guidance_scale) {
    memset(c, 0, sizeof *c);
    c->guidance_scale = guidance_scale;
}

void drift_sitecmp_free(drift_sitecmp *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) free(c->e[i].site);
    free(c->e);
    memset(c, 0, sizeof *c);
}

void drift_sitecmp_begin_step(drift_sitecmp *c) { c->step_diverged = 0; }

drift_sitecmp_entry *drift_sitecmp_find(drift_sitecmp *c, const char *site) {
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->e[i].site, site) == 0) return &c->e[i];
    return NULL;
}

static drift_sitecmp_entry *entry_for(drift_sitecmp *c, const char *site, drift_dtype dt, drift_err *err) {
    drift_sitecmp_entry *e = drift_sitecmp_find(c, site);
    if (e) return e;
    void *arr = c->e;
    if (drift_grow(&arr, &c->cap, c->n, sizeof *c->e, 64)) { drift_err_set(err, DRIFT_E_NOMEM, site, "out of memory"); return NULL; }
    c->e = arr;
    e = &c->e[c->n];
    memset(e, 0, sizeof *e);
    e->site = drift_strdup(site);
    if (!e->site) { drift_err_set(err, DRIFT_E_NOMEM, site, "out of memory"); return NULL; }
    e->dtype = dt;
    e->rmse_oracle = NAN;
    e->worst_step = e->worst_offset = -1;
    drift_metrics_site_init(&e->acc, dt);
    c->n++;
    return e;
}

int drift_sitecmp_step_acc(drift_dtype dt, const float *t, const float *r, int64_t n, int64_t batch,
                           drift_site_acc *one, drift_err *err) {
    drift_metrics_site_init(one, dt);
    if (batch < 1 || n % batch != 0) batch = 1;
    return drift_metrics_site_add_f32(one, t, r, (size_t)batch, (size_t)n, err);
}

int drift_sitecmp_add(drift_sitecmp *c, const char *site, drift_dtype dt, const float *t, const float *r, int64_t n,
                      int64_t batch, int64_t step, drift_trace_metric *row, drift_err *err) {
    drift_site_acc one;
    int rc = drift_sitecmp_step_acc(dt, t, r, n, batch, &one, err);
    if (rc) return rc;
    return drift_sitecmp_add_acc(c, site, dt, &one, step, row, err);
}

int drift_sitecmp_add_acc(drift_sitecmp *c, const char *site, drift_dtype dt, const drift_site_acc *one, int64_t step,
                          drift_trace_metric *row, drift_err *err) {
    drift_sitecmp_entry *e = entry_for(c, site, dt, err);
    if (!e) return err ? err->code : DRIFT_E_NOMEM;
    drift_site_metrics m;
    drift_metrics_site_finish(one, c->guidance_scale, &m);
    int64_t base = e->acc.m.numel;
    drift_metrics_site_merge(&e->acc, one);
    if (one->m.argmax >= 0 && one->m.max_abs_diff > 0 && e->acc.m.argmax == one->m.argmax + base) {
        /* this step holds the worst element (a site that never differed has none) */
        e->worst_step = step;
        e->worst_offset = one->m.argmax;
    }
    e->steps++;
    int first = 0;
    if (m.bitwise_equal) {
        e->steps_equal++;
    } else if (!c->step_diverged) {
        c->step_diverged = 1;
        e->first_divergent++;
        first = 1;
    }
    if (row) {
        memset(row, 0, sizeof *row);
        row->step = step;
        row->denoise_index = -1;
        row->flags = (m.bitwise_equal ? DRIFT_TRACE_METRIC_BITWISE_EQUAL : 0u) |
                     (first ? DRIFT_TRACE_METRIC_FIRST_DIVERGENT : 0u);
        row->numel = m.numel;
        row->mean_abs_diff = m.mean_abs_diff;
        row->max_abs_diff = m.max_abs_diff;
        row->rel_max = m.rel_max;
        row->cosine = m.cosine;
        row->rmse = m.rmse;
        row->rmse_oracle = NAN;
        row->nan_count = m.nan_t;
        row->inf_count = m.inf_t;
        row->ref_nan_count = m.nan_r;
        row->ref_inf_count = m.inf_r;
        row->worst_index = m.argmax;
        row->max_ulp_diff = m.ulp_max;
    }
    return DRIFT_OK;
}

void drift_sitecmp_finish(const drift_sitecmp *c, const drift_sitecmp_entry *e, drift_site_metrics *out) {
    drift_metrics_site_finish(&e->acc, c->guidance_scale, out);
}
