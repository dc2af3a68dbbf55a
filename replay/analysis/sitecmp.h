/* One site of one step compared: candidate values against reference values,
 * turned into a /metrics row (DESIGN.md s7), and per-site aggregation over
 * steps, shared by record, replay and compare. */
#ifndef DRIFT_REPLAY_SITECMP_H
#define DRIFT_REPLAY_SITECMP_H

#include <stdint.h>

#include "formats/dtype.h"
#include "formats/err.h"
#include "formats/trace.h"
#include "replay/analysis/metrics.h"

/* Per-site aggregate over steps, in execution order of first appearance. */
typedef struct drift_sitecmp_entry {
    char *site;                  /* owned */
    drift_dtype dtype;
    drift_site_acc acc;          /* merged over steps */
    int64_t steps, steps_equal;  /* steps compared, steps bitwise equal */
    int64_t first_divergent;     /* steps in which this was the first divergent site */
    double rmse_oracle;          /* NaN unless an oracle comparison filled it */
    int64_t worst_step;          /* the step of the worst element (acc's argmax; values in acc), -1 while
                                    the site has not differed */
    int64_t worst_offset;        /* its flat index within that step's tensor, -1 if none */
} drift_sitecmp_entry;

typedef struct drift_sitecmp {
    drift_sitecmp_entry *e;      /* owned */
    size_t n, cap;
    double guidance_scale;       /* for CFG-normalised values */
    int step_diverged;           /* the current step has seen a divergent site */
} drift_sitecmp;

void drift_sitecmp_init(drift_sitecmp *c, double guidance_scale);
void drift_sitecmp_free(drift_sitecmp *c);
/* Starts a new step (resets the first-divergence tracking). */
void drift_sitecmp_begin_step(drift_sitecmp *c);
/* Compares n values of site (t candidate, r reference, dtype dt for ULPs),
 * batch rows for rel_max, merges into the site's aggregate, and fills row
 * (may be NULL) for step with the first-divergent flag when this is the
 * first site of the step whose bits differ. */
int drift_sitecmp_add(drift_sitecmp *c, const char *site, drift_dtype dt, const float *t, const float *r, int64_t n,
                      int64_t batch, int64_t step, drift_trace_metric *row, drift_err *err);
/* The two halves of drift_sitecmp_add, for producers that compute a step's
 * accumulators elsewhere (another thread, device or rank) and merge them in
 * step order: the step's accumulator of one site (batch rows as above), and
 * its merge into the aggregate with the same bookkeeping (first divergence,
 * row). drift_sitecmp_add(c, ...) == step_acc + add_acc, bit for bit. */
int drift_sitecmp_step_acc(drift_dtype dt, const float *t, const float *r, int64_t n, int64_t batch,
                           drift_site_acc *one, drift_err *err);
int drift_sitecmp_add_acc(drift_sitecmp *c, const char *site, drift_dtype dt, const drift_site_acc *one, int64_t step,
                          drift_trace_metric *row, drift_err *err);
/* The entry of site, or NULL. */
drift_sitecmp_entry *drift_sitecmp_find(drift_sitecmp *c, const char *site);
/* Finishes an entry's aggregate. */
void drift_sitecmp_finish(const drift_sitecmp *c, const drift_sitecmp_entry *e, drift_site_metrics *out);

#endif
