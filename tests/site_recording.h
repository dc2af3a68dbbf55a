/* Test helper (header only): a site callback for drift_exec_inputs that
 * records every observed site's values (fp32 and fp64 downloads) in call
 * order, so that tests can compare two runs site by site. Out of memory
 * exits 2 (the test fails). Include after the drift headers. */
#ifndef DRIFT_TESTS_SITE_RECORDING_H
#define DRIFT_TESTS_SITE_RECORDING_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/exec/exec.h"

typedef struct rec_site {
    char name[128];
    drift_dtype dtype;
    int64_t numel;
    float *v;    /* owned */
    double *v64; /* owned */
} rec_site;

/* Zero-initialise ({0}); free with recording_free. */
typedef struct recording {
    rec_site *s;
    int n, cap;
    int stop;    /* 1: the callback stops the run when site index stop_at comes */
    int stop_at;
} recording;

/* drift_exec_site_fn: user is a recording. */
static inline int record_cb(const char *site, const drift_tensor *t, void *user, drift_err *err) {
    recording *r = user;
    if (r->stop && r->n == r->stop_at)
        return drift_err_set(err, DRIFT_E_CHECK, site, "stopped by the test at '%s'", site);
    if (r->n == r->cap) {
        int cap = r->cap ? r->cap * 2 : 64;
        rec_site *s = realloc(r->s, (size_t)cap * sizeof *s);
        if (!s) exit(2);
        r->s = s;
        r->cap = cap;
    }
    rec_site *s = &r->s[r->n++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", site);
    s->dtype = t->dtype;
    s->numel = t->numel;
    s->v = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *s->v);
    s->v64 = malloc((size_t)(t->numel ? t->numel : 1) * sizeof *s->v64);
    if (!s->v || !s->v64) exit(2);
    int rc = drift_backend_download_f32(t->be, t, s->v, err);
    if (!rc) rc = drift_backend_download_f64(t->be, t, s->v64, err);
    return rc;
}

static inline void recording_free(recording *r) {
    for (int i = 0; i < r->n; i++) {
        free(r->s[i].v);
        free(r->s[i].v64);
    }
    free(r->s);
    memset(r, 0, sizeof *r);
}

/* The first recorded site named `name`, or NULL. */
static inline const rec_site *find_rec(const recording *r, const char *name) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->s[i].name, name) == 0) return &r->s[i];
    return NULL;
}

/* One site's values: a site callback for drift_exec_inputs (user: a grab
 * with .site set) that downloads the site named g->site into g->v (fp32,
 * g->n elements; the caller frees g->v). */
typedef struct grab {
    const char *site;
    float *v;
    int64_t n;
} grab;

static inline int grab_site(const char *site, const drift_tensor *t, void *user, drift_err *err) {
    grab *g = user;
    if (strcmp(site, g->site)) return 0;
    g->n = t->numel;
    g->v = malloc((size_t)t->numel * sizeof(float));
    return drift_backend_download_f32(t->be, t, g->v, err);
}

#endif
