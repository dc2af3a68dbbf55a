/* The data model of `drift top` (see model.h). Reads traces through
 * formats/trace.h only; never includes curses. */
#include "tui/model.h"
#include "formats/alloc.h"
#include "formats/fnmatch.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/census.h" /* intercept census */
#include "formats/plan.h"

/* ======================================================================= */
/* names                                                                    */
/* ======================================================================= */

static const char *const agg_names[DRIFT_TOP_AGG_COUNT] = {"step", "mean", "max"};
static const char *const sort_names[DRIFT_TOP_SORT_COUNT] = {"order", "name", "mean", "max", "rel", "cos"};

const char *drift_top_agg_name(drift_top_agg a) {
    return (unsigned)a < DRIFT_TOP_AGG_COUNT ? agg_names[a] : "?";
}

int drift_top_agg_parse(const char *s) {
    if (!s) return -1;
    for (int i = 0; i < DRIFT_TOP_AGG_COUNT; i++)
        if (strcmp(s, agg_names[i]) == 0) return i;
    if (strcmp(s, "current") == 0) return DRIFT_TOP_AGG_STEP;
    return -1;
}

const char *drift_top_sort_name(drift_top_sort s) {
    return (unsigned)s < DRIFT_TOP_SORT_COUNT ? sort_names[s] : "?";
}

int drift_top_sort_parse(const char *s) {
    if (!s) return -1;
    for (int i = 0; i < DRIFT_TOP_SORT_COUNT; i++)
        if (strcmp(s, sort_names[i]) == 0) return i;
    return -1;
}

const char *drift_top_class_name(drift_top_class c) {
    switch (c) {
    case DRIFT_TOP_CLASS_EQUAL: return "equal";
    case DRIFT_TOP_CLASS_OK: return "ok";
    case DRIFT_TOP_CLASS_WARN: return "warn";
    case DRIFT_TOP_CLASS_BAD: return "bad";
    default: return "-";
    }
}

/* ======================================================================= */
/* drift_top_data                                                           */
/* ======================================================================= */

enum { SRC_NONE = 0, SRC_DENOISE = 1, SRC_AGG = 2 };

typedef struct icell {
    drift_top_cell c;            /* first: drift_top_data_cell returns &c */
    double wsum;                 /* denoise combination: sum of mean |diff| * weight */
    double wn;                   /* sum of weights */
    int src;
} icell;

/* Running aggregate of one layer over the columns [0, folded), folded in
 * column (= step) order so that the mean is the same sequential fp64 sum a
 * reader of the trace would compute. */
typedef struct layer_agg {
    double sum[DRIFT_TOP_M_COUNT];
    size_t cnt[DRIFT_TOP_M_COUNT];
    double max[DRIFT_TOP_M_COUNT]; /* min for the cosine */
    uint32_t flags;
    uint64_t ulp;
    size_t n_values;
} layer_agg;

typedef struct tlayer {
    char *name;
    icell *cells;                /* n_steps used, cap allocated */
    size_t cap;
    layer_agg agg;
    size_t folded;               /* columns folded into agg */
    int dirty;                   /* a folded cell changed: refold from 0 */
} tlayer;

typedef struct stepvals {
    double v[DRIFT_TOP_S_COUNT];
    double wsum[DRIFT_TOP_S_COUNT];
    double wn;
    int src;
} stepvals;

struct drift_top_data {
    int64_t lo, hi;
    int32_t variant;
    tlayer *layers;
    size_t n_layers, cap_layers;
    int64_t *steps;
    double *times;
    stepvals *sv;
    size_t n_steps, cap_steps;
    size_t max_name;
    uint64_t gen;
};

static double nanmax2(double a, double b) {
    if (isnan(a)) return b;
    if (isnan(b)) return a;
    return a > b ? a : b;
}

static double nanmin2(double a, double b) {
    if (isnan(a)) return b;
    if (isnan(b)) return a;
    return a < b ? a : b;
}

static void agg_reset(layer_agg *a) {
    memset(a, 0, sizeof *a);
    for (int m = 0; m < DRIFT_TOP_M_COUNT; m++) a->max[m] = NAN;
}

static void agg_fold(layer_agg *a, const drift_top_cell *x) {
    if (!x->present) return;
    a->n_values++;
    a->flags |= x->flags;
    if (x->max_ulp_diff > a->ulp) a->ulp = x->max_ulp_diff;
    for (int m = 0; m < DRIFT_TOP_M_COUNT; m++) {
        double v = x->v[m];
        if (isnan(v)) continue;
        a->sum[m] += v;
        a->cnt[m]++;
        a->max[m] = m == DRIFT_TOP_M_COS ? nanmin2(a->max[m], v) : nanmax2(a->max[m], v);
    }
}

static double agg_mean(const layer_agg *a, int m) { return a->cnt[m] ? a->sum[m] / (double)a->cnt[m] : NAN; }

/* Brings every layer's aggregate up to date: a layer whose folded cells
 * changed is refolded from the start; otherwise only the new columns. */
static void fold_all(drift_top_data *d) {
    for (size_t li = 0; li < d->n_layers; li++) {
        tlayer *L = &d->layers[li];
        if (L->dirty || L->folded > d->n_steps) {
            agg_reset(&L->agg);
            L->folded = 0;
            L->dirty = 0;
        }
        for (size_t c = L->folded; c < d->n_steps; c++) agg_fold(&L->agg, &L->cells[c].c);
        L->folded = d->n_steps;
    }
}

int drift_top_data_create(drift_top_data **out, int64_t step_lo, int64_t step_hi, int32_t variant, drift_err *err) {
    *out = NULL;
    drift_top_data *d = drift_calloc(1, sizeof *d);
    if (!d) return drift_err_set(err, DRIFT_E_NOMEM, "drift top", "out of memory");
    d->lo = step_lo;
    d->hi = step_hi;
    d->variant = variant;
    *out = d;
    return DRIFT_OK;
}

void drift_top_data_free(drift_top_data *d) {
    if (!d) return;
    for (size_t i = 0; i < d->n_layers; i++) {
        free(d->layers[i].name);
        free(d->layers[i].cells);
    }
    free(d->layers);
    free(d->steps);
    free(d->times);
    free(d->sv);
    free(d);
}

static int layer_reserve(tlayer *L, size_t need) {
    if (need <= L->cap) return DRIFT_OK;
    size_t cap = L->cap ? L->cap : 16;
    while (cap < need) cap *= 2;
    icell *c = drift_realloc(L->cells, cap * sizeof *c);
    if (!c) return DRIFT_E_NOMEM;
    memset(c + L->cap, 0, (cap - L->cap) * sizeof *c);
    L->cells = c;
    L->cap = cap;
    return DRIFT_OK;
}

int drift_top_data_add_step(drift_top_data *d, int64_t step, double time, drift_err *err) {
    if (d->n_steps > 0 && step <= d->steps[d->n_steps - 1])
        return drift_err_set(err, DRIFT_E_INPUT, "/steps", "step %" PRId64 " after step %" PRId64
                             ": steps must increase", step, d->steps[d->n_steps - 1]);
    if (step < d->lo || step >= d->hi) return DRIFT_OK;
    if (d->n_steps == d->cap_steps) {
        size_t cap = d->cap_steps ? d->cap_steps * 2 : 64;
        int64_t *s = drift_realloc(d->steps, cap * sizeof *s);
        if (!s) return drift_err_set(err, DRIFT_E_NOMEM, "drift top", "out of memory");
        d->steps = s;
        double *t = drift_realloc(d->times, cap * sizeof *t);
        if (!t) return drift_err_set(err, DRIFT_E_NOMEM, "drift top", "out of memory");
        d->times = t;
        stepvals *v = drift_realloc(d->sv, cap * sizeof *v);
        if (!v) return drift_err_set(err, DRIFT_E_NOMEM, "drift top", "out of memory");
        d->sv = v;
        d->cap_steps = cap;
    }
    for (size_t i = 0; i < d->n_layers; i++)
        if (layer_reserve(&d->layers[i], d->n_steps + 1) != DRIFT_OK)
            return drift_err_set(err, DRIFT_E_NOMEM, "drift top", "out of memory");
    d->steps[d->n_steps] = step;
    d->times[d->n_steps] = time;
    memset(&d->sv[d->n_steps], 0, sizeof d->sv[0]);
    for (int s = 0; s < DRIFT_TOP_S_COUNT; s++) d->sv[d->n_steps].v[s] = NAN;
    d->n_steps++;
    d->gen++;
    return DRIFT_OK;
}

int drift_top_data_add_layer(drift_top_data *d, const char *name, drift_err *err) {
    if (!name) name = "";
    if (d->n_layers == d->cap_layers) {
        size_t cap = d->cap_layers ? d->cap_layers * 2 : 32;
        tlayer *l = drift_realloc(d->layers, cap * sizeof *l);
        if (!l) return drift_err_set(err, DRIFT_E_NOMEM, "drift top", "out of memory");
        d->layers = l;
        d->cap_layers = cap;
    }
    tlayer *L = &d->layers[d->n_layers];
    memset(L, 0, sizeof *L);
    agg_reset(&L->agg);
    size_t len = strlen(name);
    L->name = drift_malloc(len + 1);
    if (!L->name) return drift_err_set(err, DRIFT_E_NOMEM, "drift top", "out of memory");
    memcpy(L->name, name, len + 1);
    if (layer_reserve(L, d->cap_steps > 0 ? d->cap_steps : 1) != DRIFT_OK) {
        free(L->name);
        return drift_err_set(err, DRIFT_E_NOMEM, "drift top", "out of memory");
    }
    if (len > d->max_name) d->max_name = len;
    d->n_layers++;
    d->gen++;
    return DRIFT_OK;
}

long drift_top_data_find_step(const drift_top_data *d, int64_t step) {
    size_t lo = 0, hi = d->n_steps;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->steps[mid] < step)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (lo < d->n_steps && d->steps[lo] == step) ? (long)lo : -1;
}

static void cell_set(icell *ic, const drift_trace_metric *r) {
    drift_top_cell *c = &ic->c;
    c->present = 1;
    c->v[DRIFT_TOP_M_MEAN] = r->mean_abs_diff;
    c->v[DRIFT_TOP_M_MAX] = r->max_abs_diff;
    c->v[DRIFT_TOP_M_REL] = r->rel_max;
    c->v[DRIFT_TOP_M_COS] = r->cosine;
    c->numel = r->numel;
    c->max_ulp_diff = r->max_ulp_diff;
    c->nan_count = r->nan_count;
    c->inf_count = r->inf_count;
    c->ref_nan_count = r->ref_nan_count;
    c->ref_inf_count = r->ref_inf_count;
    c->flags = r->flags & (DRIFT_TRACE_METRIC_FIRST_DIVERGENT | DRIFT_TRACE_METRIC_BITWISE_EQUAL);
}

static void cell_nonfinite(drift_top_cell *c) {
    if (c->nan_count + c->inf_count > c->ref_nan_count + c->ref_inf_count)
        c->flags |= DRIFT_TOP_FLAG_NONFINITE;
    else
        c->flags &= ~DRIFT_TOP_FLAG_NONFINITE;
}

int drift_top_data_add_metrics(drift_top_data *d, const drift_trace_metric *rows, size_t n, drift_err *err) {
    long col = -1;
    int64_t col_step = INT64_MIN;
    for (size_t i = 0; i < n; i++) {
        const drift_trace_metric *r = &rows[i];
        if (r->site < 0 || (size_t)r->site >= d->n_layers)
            return drift_err_set(err, DRIFT_E_INPUT, "/metrics/rows",
                                 "row %zu: site index %" PRId32 " outside the site-name table (%zu names)", i,
                                 r->site, d->n_layers);
        if (r->variant != d->variant) continue;
        if (r->step != col_step) { /* rows come grouped by step: one search per step */
            col = drift_top_data_find_step(d, r->step);
            col_step = r->step;
        }
        if (col < 0) continue;
        tlayer *L = &d->layers[r->site];
        icell *ic = &L->cells[col];
        if ((size_t)col < L->folded) L->dirty = 1;
        if (r->denoise_index < 0) {
            cell_set(ic, r);
            ic->src = SRC_AGG;
        } else if (ic->src == SRC_AGG) {
            continue; /* the producer's aggregate wins */
        } else if (ic->src == SRC_NONE) {
            cell_set(ic, r);
            double w = r->numel > 0 ? (double)r->numel : 1.0;
            ic->wsum = isnan(r->mean_abs_diff) ? 0.0 : r->mean_abs_diff * w;
            ic->wn = isnan(r->mean_abs_diff) ? 0.0 : w;
            ic->src = SRC_DENOISE;
        } else {
            drift_top_cell *c = &ic->c;
            double w = r->numel > 0 ? (double)r->numel : 1.0;
            if (!isnan(r->mean_abs_diff)) {
                ic->wsum += r->mean_abs_diff * w;
                ic->wn += w;
            }
            c->v[DRIFT_TOP_M_MEAN] = ic->wn > 0 ? ic->wsum / ic->wn : NAN;
            c->v[DRIFT_TOP_M_MAX] = nanmax2(c->v[DRIFT_TOP_M_MAX], r->max_abs_diff);
            c->v[DRIFT_TOP_M_REL] = nanmax2(c->v[DRIFT_TOP_M_REL], r->rel_max);
            c->v[DRIFT_TOP_M_COS] = nanmin2(c->v[DRIFT_TOP_M_COS], r->cosine);
            c->numel += r->numel;
            if (r->max_ulp_diff > c->max_ulp_diff) c->max_ulp_diff = r->max_ulp_diff;
            c->nan_count += r->nan_count;
            c->inf_count += r->inf_count;
            c->ref_nan_count += r->ref_nan_count;
            c->ref_inf_count += r->ref_inf_count;
            uint32_t eq = c->flags & r->flags & DRIFT_TRACE_METRIC_BITWISE_EQUAL;
            c->flags = (c->flags | (r->flags & DRIFT_TRACE_METRIC_FIRST_DIVERGENT)) &
                       ~(uint32_t)DRIFT_TRACE_METRIC_BITWISE_EQUAL;
            c->flags |= eq;
        }
        cell_nonfinite(&ic->c);
    }
    fold_all(d);
    d->gen++;
    return DRIFT_OK;
}

int drift_top_data_add_step_metrics(drift_top_data *d, const drift_trace_step_metrics *rows, size_t n,
                                    drift_err *err) {
    (void)err;
    for (size_t i = 0; i < n; i++) {
        const drift_trace_step_metrics *r = &rows[i];
        if (r->variant != d->variant) continue;
        long col = drift_top_data_find_step(d, r->step);
        if (col < 0) continue;
        stepvals *sv = &d->sv[col];
        double in[DRIFT_TOP_S_COUNT] = {r->log_prob_mean_abs_diff, r->ratio_abs_minus_1, r->approx_kl};
        if (r->denoise_index < 0) {
            for (int s = 0; s < DRIFT_TOP_S_COUNT; s++) sv->v[s] = in[s];
            sv->src = SRC_AGG;
        } else if (sv->src != SRC_AGG) {
            double w = r->n_pairs > 0 ? (double)r->n_pairs : 1.0;
            if (sv->src == SRC_NONE) {
                memset(sv->wsum, 0, sizeof sv->wsum);
                sv->wn = 0;
            }
            sv->wn += w;
            for (int s = 0; s < DRIFT_TOP_S_COUNT; s++) {
                sv->wsum[s] += in[s] * w;
                sv->v[s] = sv->wsum[s] / sv->wn;
            }
            sv->src = SRC_DENOISE;
        }
    }
    d->gen++;
    return DRIFT_OK;
}

size_t drift_top_data_n_layers(const drift_top_data *d) { return d->n_layers; }
size_t drift_top_data_n_steps(const drift_top_data *d) { return d->n_steps; }
const char *drift_top_data_layer_name(const drift_top_data *d, size_t layer) { return d->layers[layer].name; }
int64_t drift_top_data_step(const drift_top_data *d, size_t col) { return d->steps[col]; }
double drift_top_data_step_time(const drift_top_data *d, size_t col) { return d->times[col]; }
size_t drift_top_data_max_name(const drift_top_data *d) { return d->max_name; }
uint64_t drift_top_data_generation(const drift_top_data *d) { return d->gen; }

long drift_top_data_find_layer(const drift_top_data *d, const char *name) {
    for (size_t i = 0; i < d->n_layers; i++)
        if (strcmp(d->layers[i].name, name) == 0) return (long)i;
    return -1;
}

const drift_top_cell *drift_top_data_cell(const drift_top_data *d, size_t layer, size_t col) {
    return &d->layers[layer].cells[col].c;
}

double drift_top_data_series(const drift_top_data *d, drift_top_series s, size_t col) {
    if ((unsigned)s >= DRIFT_TOP_S_COUNT || col >= d->n_steps) return NAN;
    return d->sv[col].v[s];
}

double drift_top_data_aggregate(const drift_top_data *d, size_t layer_i, drift_top_metric m, drift_top_agg agg) {
    if (layer_i >= d->n_layers || (unsigned)m >= DRIFT_TOP_M_COUNT || d->n_steps == 0) return NAN;
    if (agg == DRIFT_TOP_AGG_STEP) {
        const drift_top_cell *x = &d->layers[layer_i].cells[d->n_steps - 1].c;
        return x->present ? x->v[m] : NAN;
    }
    const layer_agg *a = &d->layers[layer_i].agg;
    return agg == DRIFT_TOP_AGG_MEAN ? agg_mean(a, m) : a->max[m];
}

/* ======================================================================= */
/* classification, filter                                                   */
/* ======================================================================= */

void drift_top_thresholds_default(drift_top_thresholds *t) {
    t->warn[DRIFT_TOP_M_MEAN] = 1e-3;
    t->bad[DRIFT_TOP_M_MEAN] = 1e-2;
    t->warn[DRIFT_TOP_M_MAX] = 2e-2;
    t->bad[DRIFT_TOP_M_MAX] = 1e-1;
    t->warn[DRIFT_TOP_M_REL] = 1e-2;
    t->bad[DRIFT_TOP_M_REL] = 1e-1;
    t->warn[DRIFT_TOP_M_COS] = 1e-4;
    t->bad[DRIFT_TOP_M_COS] = 1e-2;
    t->ratio_warn = 2.0;
    t->ratio_bad = 10.0;
}

drift_top_class drift_top_classify(drift_top_metric m, double v, double ref, const drift_top_thresholds *th) {
    if (isnan(v) || (unsigned)m >= DRIFT_TOP_M_COUNT) return DRIFT_TOP_CLASS_NONE;
    double x = m == DRIFT_TOP_M_COS ? 1.0 - v : v;
    if (x == 0.0) return DRIFT_TOP_CLASS_EQUAL;
    if (isinf(x)) return DRIFT_TOP_CLASS_BAD;
    if (x < 0.0) return DRIFT_TOP_CLASS_OK; /* cosine rounded above 1 */
    if (isnan(ref)) {
        if (x < th->warn[m]) return DRIFT_TOP_CLASS_OK;
        if (x < th->bad[m]) return DRIFT_TOP_CLASS_WARN;
        return DRIFT_TOP_CLASS_BAD;
    }
    double xr = m == DRIFT_TOP_M_COS ? 1.0 - ref : ref;
    if (xr <= 0.0) return DRIFT_TOP_CLASS_BAD; /* the good run was exact here, this one is not */
    double ratio = x / xr;
    if (ratio <= th->ratio_warn) return DRIFT_TOP_CLASS_OK;
    if (ratio <= th->ratio_bad) return DRIFT_TOP_CLASS_WARN;
    return DRIFT_TOP_CLASS_BAD;
}

int drift_top_filter_match(const char *filter, const char *name) {
    if (!filter || !*filter) return 1;
    if (strpbrk(filter, "*?[")) return drift_fnmatch(filter, name);
    return strstr(name, filter) != NULL;
}

/* ======================================================================= */
/* table                                                                    */
/* ======================================================================= */

void drift_top_query_default(drift_top_query *q) {
    memset(q, 0, sizeof *q);
    q->agg = DRIFT_TOP_AGG_STEP;
    q->step = INT64_MAX;
    q->guidance_scale = 1.0;
    q->ref_guidance_scale = 1.0;
    q->sort = DRIFT_TOP_SORT_ORDER;
    drift_top_thresholds_default(&q->th);
}

static double scale_of(double s) { return (isfinite(s) && s > 0.0) ? s : 1.0; }

size_t drift_top_block_prefix(const char *name) {
    if (strncmp(name, "blocks.", 7) != 0 || !(name[7] >= '0' && name[7] <= '9')) return 0;
    size_t n = 7;
    while (name[n] >= '0' && name[n] <= '9') n++;
    return (name[n] == '.' || name[n] == ':') ? n : 0;
}

int drift_top_natural_cmp(const char *a, const char *b) {
    while (*a && *b) {
        if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
            const char *x = a, *y = b;
            while (*x == '0') x++; /* leading zeros do not count */
            while (*y == '0') y++;
            size_t lx = 0, ly = 0;
            while (x[lx] >= '0' && x[lx] <= '9') lx++;
            while (y[ly] >= '0' && y[ly] <= '9') ly++;
            if (lx != ly) return lx < ly ? -1 : 1;
            int c = memcmp(x, y, lx);
            if (c) return c < 0 ? -1 : 1;
            a = x + lx;
            b = y + ly;
            continue;
        }
        if (*a != *b) return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
        a++;
        b++;
    }
    return (*a != 0) - (*b != 0);
}

static int row_cmp(const drift_top_row *a, const drift_top_row *b, drift_top_sort key, int desc) {
    int c = 0;
    if (key == DRIFT_TOP_SORT_NAME) {
        c = drift_top_natural_cmp(a->name, b->name);
        if (desc) c = -c;
    } else if (key >= DRIFT_TOP_SORT_MEAN && key <= DRIFT_TOP_SORT_COS) {
        int m = (int)key - DRIFT_TOP_SORT_MEAN;
        double x = a->v[m], y = b->v[m];
        int nx = isnan(x), ny = isnan(y);
        if (nx || ny) {
            c = nx - ny; /* missing values last in either direction */
        } else {
            c = (x > y) - (x < y);
            if (desc) c = -c;
        }
    } else if (desc) {
        c = (a->layer < b->layer) - (a->layer > b->layer);
    }
    if (c == 0) c = (a->layer > b->layer) - (a->layer < b->layer);
    return c;
}

/* Stable merge sort with a key (qsort has no context argument). */
static void sort_rows(drift_top_row *rows, drift_top_row *tmp, size_t n, drift_top_sort key, int desc) {
    if (n < 2) return;
    size_t h = n / 2;
    sort_rows(rows, tmp, h, key, desc);
    sort_rows(rows + h, tmp, n - h, key, desc);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = row_cmp(&rows[j], &rows[i], key, desc) < 0 ? rows[j++] : rows[i++];
    while (i < h) tmp[k++] = rows[i++];
    while (j < n) tmp[k++] = rows[j++];
    memcpy(rows, tmp, n * sizeof *rows);
}

int drift_top_table_build(const drift_top_data *d, const drift_top_data *ref, const drift_top_query *q,
                          drift_top_table *out, drift_err *err) {
    memset(out, 0, sizeof *out);
    out->step = -1;
    out->first_divergent = -1;
    out->n_total = d->n_layers;
    long col = -1;
    if (d->n_steps > 0) {
        if (q->step == INT64_MAX || q->agg != DRIFT_TOP_AGG_STEP)
            col = (long)d->n_steps - 1;
        else
            col = drift_top_data_find_step(d, q->step);
        if (col >= 0) out->step = d->steps[col];
    }
    if (d->n_layers == 0) return DRIFT_OK;
    out->rows = drift_calloc(d->n_layers, sizeof *out->rows);
    drift_top_row *tmp = drift_malloc(d->n_layers * sizeof *tmp);
    if (!out->rows || !tmp) {
        free(tmp);
        drift_top_table_free(out);
        return drift_err_set(err, DRIFT_E_NOMEM, "drift top", "out of memory");
    }
    double s = scale_of(q->guidance_scale), rs = scale_of(q->ref_guidance_scale);
    long first_flag = -1, first_nonzero = -1;
    for (size_t li = 0; li < d->n_layers; li++) {
        const tlayer *L = &d->layers[li];
        if (col >= 0) { /* first divergent at the table's step, over all layers (filter or not) */
            const drift_top_cell *x = &L->cells[col].c;
            if (x->present) {
                if (first_flag < 0 && (x->flags & DRIFT_TRACE_METRIC_FIRST_DIVERGENT)) first_flag = (long)li;
                if (first_nonzero < 0 && x->v[DRIFT_TOP_M_MAX] > 0.0) first_nonzero = (long)li;
            }
        }
        if (!drift_top_filter_match(q->filter, L->name)) continue;
        drift_top_row *r = &out->rows[out->n++];
        r->layer = li;
        r->name = L->name;
        r->max_ulp_diff = -1;
        const layer_agg *a = &L->agg;
        r->n_values = a->n_values;
        if (q->agg == DRIFT_TOP_AGG_STEP) {
            const drift_top_cell *x = col >= 0 ? &L->cells[col].c : NULL;
            for (int m = 0; m < DRIFT_TOP_M_COUNT; m++) r->v[m] = (x && x->present) ? x->v[m] : NAN;
            if (x && x->present) {
                r->flags = x->flags;
                r->max_ulp_diff = x->max_ulp_diff > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)x->max_ulp_diff;
            }
        } else {
            for (int m = 0; m < DRIFT_TOP_M_COUNT; m++)
                r->v[m] = q->agg == DRIFT_TOP_AGG_MEAN ? agg_mean(a, m) : a->max[m];
            if (a->n_values) {
                r->flags = a->flags;
                r->max_ulp_diff = a->ulp > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)a->ulp;
            }
        }
        for (int m = 0; m < DRIFT_TOP_M_COUNT; m++) r->ref[m] = NAN;
        if (ref) {
            long rl = drift_top_data_find_layer(ref, L->name);
            if (rl >= 0) {
                const layer_agg *ra = &ref->layers[rl].agg;
                for (int m = 0; m < DRIFT_TOP_M_COUNT; m++)
                    r->ref[m] = q->agg == DRIFT_TOP_AGG_MAX ? ra->max[m] : agg_mean(ra, m);
            }
        }
        if (q->cfg_normalise) {
            r->v[DRIFT_TOP_M_MEAN] /= s;
            r->v[DRIFT_TOP_M_MAX] /= s;
            r->ref[DRIFT_TOP_M_MEAN] /= rs;
            r->ref[DRIFT_TOP_M_MAX] /= rs;
        }
        r->row_cls = DRIFT_TOP_CLASS_NONE;
        for (int m = 0; m < DRIFT_TOP_M_COUNT; m++) {
            r->cls[m] = drift_top_classify((drift_top_metric)m, r->v[m], ref ? r->ref[m] : NAN, &q->th);
            if (r->cls[m] > r->row_cls) r->row_cls = r->cls[m];
        }
        if (r->flags & DRIFT_TOP_FLAG_NONFINITE) r->row_cls = DRIFT_TOP_CLASS_BAD;
    }
    out->first_divergent = first_flag >= 0 ? first_flag : first_nonzero;
    for (size_t i = 0; i < out->n; i++) out->rows[i].n_group = 1;
    if (q->collapse_blocks) { /* rows are still in execution order: blocks are runs */
        size_t w = 0;
        for (size_t i = 0; i < out->n;) {
            size_t pl = drift_top_block_prefix(out->rows[i].name), j = i + 1;
            while (pl && j < out->n && drift_top_block_prefix(out->rows[j].name) == pl &&
                   strncmp(out->rows[j].name, out->rows[i].name, pl) == 0)
                j++;
            size_t best = i;
            for (size_t k = i; k < j; k++) {
                const drift_top_row *b = &out->rows[best], *c = &out->rows[k];
                if ((long)c->layer == out->first_divergent) { best = k; break; }
                if (!isnan(c->v[DRIFT_TOP_M_MEAN]) && (isnan(b->v[DRIFT_TOP_M_MEAN]) || c->v[DRIFT_TOP_M_MEAN] > b->v[DRIFT_TOP_M_MEAN]))
                    best = k;
            }
            drift_top_row r = out->rows[best];
            r.n_group = j - i;
            for (size_t k = i; k < j; k++) /* the block's worst class */
                if (out->rows[k].row_cls > r.row_cls) r.row_cls = out->rows[k].row_cls;
            out->rows[w++] = r;
            i = j;
        }
        out->n = w;
    }
    sort_rows(out->rows, tmp, out->n, q->sort, q->descending);
    free(tmp);
    return DRIFT_OK;
}

void drift_top_table_free(drift_top_table *t) {
    if (!t) return;
    free(t->rows);
    memset(t, 0, sizeof *t);
    t->step = -1;
    t->first_divergent = -1;
}

long drift_top_table_find(const drift_top_table *t, size_t layer_i) {
    for (size_t i = 0; i < t->n; i++)
        if (t->rows[i].layer == layer_i) return (long)i;
    return -1;
}

/* ======================================================================= */
/* presentation helpers                                                     */
/* ======================================================================= */

const char *drift_top_fmt_value(double v, char *buf, size_t bufsz) {
    if (isnan(v))
        snprintf(buf, bufsz, "-");
    else if (v == 0.0)
        snprintf(buf, bufsz, "0");
    else if (isinf(v))
        snprintf(buf, bufsz, v > 0 ? "inf" : "-inf");
    else
        snprintf(buf, bufsz, "%.3e", v);
    return buf;
}

const char *drift_top_fmt_cos(double v, char *buf, size_t bufsz) {
    if (isnan(v))
        snprintf(buf, bufsz, "-");
    else
        snprintf(buf, bufsz, "%.8f", v);
    return buf;
}

void drift_top_spark_levels(const double *v, size_t len, size_t n, int *levels) {
    if (n > len) n = len;
    const double *w = v + (len - n);
    double vmax = 0.0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(w[i]) && w[i] > vmax) vmax = w[i];
    for (size_t i = 0; i < n; i++) {
        double x = w[i];
        if (isnan(x))
            levels[i] = -1;
        else if (isinf(x))
            levels[i] = x > 0 ? 7 : 0;
        else if (vmax <= 0.0 || x <= 0.0)
            levels[i] = 0;
        else {
            long l = lround(x / vmax * 7.0);
            levels[i] = (int)(l < 0 ? 0 : (l > 7 ? 7 : l));
        }
    }
}

void drift_top_spark_levels_log(const double *v, size_t n, double lo, double hi, int *levels) {
    double llo = lo > 0 && isfinite(lo) ? log10(lo) : 0, lhi = hi > 0 && isfinite(hi) ? log10(hi) : 0;
    for (size_t i = 0; i < n; i++) {
        double x = v[i];
        if (isnan(x)) levels[i] = -1;
        else if (x <= 0) levels[i] = 0;
        else if (isinf(x) || !(hi > lo) || !(lo > 0)) levels[i] = 7;
        else {
            double t = (log10(x) - llo) / (lhi - llo);
            int l = 1 + (int)floor(t * 6.999);
            levels[i] = l < 1 ? 1 : (l > 7 ? 7 : l);
        }
    }
}

int drift_top_bar_eighths(double v, double vmax, int height) {
    if (isnan(v)) return -1;
    if (height <= 0) return 0;
    if (vmax <= 0.0 || !(v > 0.0)) return 0;
    if (isinf(v) || v >= vmax) return 8 * height;
    long e = lround(v / vmax * 8.0 * height);
    if (e < 1) e = 1;
    if (e > 8L * height) e = 8L * height;
    return (int)e;
}

/* ======================================================================= */
/* steps range                                                              */
/* ======================================================================= */

static int parse_i64(const char *s, const char *end, int64_t *out) {
    char buf[32];
    size_t n = (size_t)(end - s);
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, s, n);
    buf[n] = 0;
    char *e = NULL;
    errno = 0;
    long long v = strtoll(buf, &e, 10);
    if (errno || *e || e == buf) return -1;
    *out = (int64_t)v;
    return 0;
}

int drift_top_parse_steps(const char *s, int64_t *lo, int64_t *hi, drift_err *err) {
    *lo = INT64_MIN;
    *hi = INT64_MAX;
    if (!s || !*s) return drift_err_set(err, DRIFT_E_USAGE, "--steps", "expected A:B, A:, :B or A, got an empty value");
    const char *colon = strchr(s, ':');
    const char *end = s + strlen(s);
    if (!colon) {
        if (parse_i64(s, end, lo) || *lo == INT64_MAX)
            return drift_err_set(err, DRIFT_E_USAGE, "--steps", "expected A:B, A:, :B or A (integers), got \"%s\"", s);
        *hi = *lo + 1;
        return DRIFT_OK;
    }
    if ((colon > s && parse_i64(s, colon, lo)) || (colon + 1 < end && parse_i64(colon + 1, end, hi)))
        return drift_err_set(err, DRIFT_E_USAGE, "--steps", "expected A:B, A:, :B or A (integers), got \"%s\"", s);
    if (colon + 1 < end) { /* B is included (docs/cli.md "Step ranges"), hi is exclusive */
        if (*hi == INT64_MAX)
            return drift_err_set(err, DRIFT_E_USAGE, "--steps", "expected A:B, A:, :B or A (integers), got \"%s\"", s);
        *hi += 1;
    }
    if (*lo >= *hi)
        return drift_err_set(err, DRIFT_E_USAGE, "--steps", "empty range \"%s\" (A:B keeps A..B, both included; A <= B)", s);
    return DRIFT_OK;
}

/* ======================================================================= */
/* the model                                                                */
/* ======================================================================= */

struct drift_top_model {
    drift_trace_reader *r, *rr;
    drift_top_data *d, *rd;
    drift_top_header h;
    char *path, *ref_path;
    int64_t loaded_after;        /* last step ingested (INT64_MIN: none) */
    int follow;
    drift_top_source src;        /* src.poll NULL: /metrics */
    char *against;
    char writer[600];
    char against_writer[600];    /* "" without --against */
    int stop_seen_a, stop_seen_b; /* refreshes in a row that found the writer gone (writer_state) */
    drift_census *census;        /* intercept census, NULL if none (owned) */
};

const struct drift_census *drift_top_model_census(const drift_top_model *m) { return m ? m->census : NULL; }

static char *dupstr(const char *s) {
    if (!s) s = "";
    size_t n = strlen(s) + 1;
    char *p = drift_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

/* Ingests steps > *after from reader r into d. */
static int load_new(drift_trace_reader *r, drift_top_data *d, int64_t *after, int64_t *n_new, drift_err *err) {
    size_t ns = 0;
    const drift_trace_step *steps = drift_trace_reader_steps(r, &ns);
    int64_t prev = *after, added = 0;
    int rc;
    for (size_t i = 0; i < ns; i++) {
        if (steps[i].step <= prev) continue;
        if ((rc = drift_top_data_add_step(d, steps[i].step, steps[i].time, err)) != DRIFT_OK) return rc;
        added++;
    }
    size_t nm = drift_trace_reader_n_metric_sites(r);
    for (size_t i = drift_top_data_n_layers(d); i < nm; i++)
        if ((rc = drift_top_data_add_layer(d, drift_trace_reader_metric_site(r, i), err)) != DRIFT_OK) return rc;
    if (added > 0 || prev == INT64_MIN) {
        drift_trace_metric *rows = NULL;
        size_t n = 0;
        if ((rc = drift_trace_read_metrics(r, prev, &rows, &n, err)) != DRIFT_OK) return rc;
        rc = drift_top_data_add_metrics(d, rows, n, err);
        free(rows);
        if (rc != DRIFT_OK) return rc;
        drift_trace_step_metrics *srows = NULL;
        if ((rc = drift_trace_read_step_metrics(r, prev, &srows, &n, err)) != DRIFT_OK) return rc;
        rc = drift_top_data_add_step_metrics(d, srows, n, err);
        free(srows);
        if (rc != DRIFT_OK) return rc;
    }
    if (ns > 0) *after = steps[ns - 1].step;
    if (n_new) *n_new = added;
    return DRIFT_OK;
}

/* The writer's state of r into out: "recording", "finished", "failed: ..."
 * (its own /status) or "stopped without closing". /status says what the
 * writer last wrote; whether a writer that has not closed is still alive is
 * its lock (formats/trace_lock.c: an flock dies with its process, so a
 * killed writer leaves the lock free). A follower reads /status before it
 * tests the lock, and a writer writes "closed" before it frees the lock:
 * a lock seen free next to "recording" may be a clean close not yet read,
 * so a follower needs to see it at two refreshes in a row (*stop_seen
 * counts them) before it calls the writer stopped. Traces without /status
 * (not drift's writer, no lock) fall back to the age of the last commit. */
static void writer_state(drift_trace_reader *r, int follow, int *stop_seen, char *out, size_t n) {
    size_t ns = 0;
    const drift_trace_step *steps = drift_trace_reader_steps(r, &ns);
    int unclean = drift_trace_reader_unclean(r) || follow; /* a follower's file is open until /status says not */
    const char *st = drift_trace_reader_status(r);
    const char *ended = drift_trace_reader_ended(r); /* closed, failed, killed, writing, unknown */
    double age = ns ? (double)time(NULL) - steps[ns - 1].time : 1e9;
    int stopped = 0;
    if (st && strncmp(st, "failed", 6) == 0) {
        snprintf(out, n, "%.590s", st);
    } else if (st && strcmp(st, "closed") == 0) {
        snprintf(out, n, "finished");
    } else if (!unclean) {
        snprintf(out, n, "%.590s", !st || strcmp(st, "recording") == 0 ? "finished" : st);
    } else if (!st) { /* no /status, no lock: only the time since the last commit tells */
        stopped = age > 60.0;
        snprintf(out, n, stopped ? "stopped without closing" : "recording");
    } else if (strcmp(ended, "writing") == 0) {
        snprintf(out, n, "%.590s", st);
    } else if (strcmp(st, "recording") != 0) { /* a custom last word, writer gone */
        snprintf(out, n, "%.590s", st);
    } else {
        stopped = 1;
        if (follow && stop_seen && *stop_seen < 1) snprintf(out, n, "recording"); /* see above: once more */
        else snprintf(out, n, "stopped without closing");
    }
    if (stop_seen) *stop_seen = stopped ? *stop_seen + 1 : 0;
}

static void header_steps(drift_top_model *m) {
    size_t ns = 0;
    const drift_trace_step *steps = drift_trace_reader_steps(m->r, &ns);
    m->h.steps_committed = (int64_t)ns;
    m->h.first_step = ns ? steps[0].step : -1;
    m->h.last_step = ns ? steps[ns - 1].step : -1;
    m->h.last_commit_time = ns ? steps[ns - 1].time : 0.0;
    m->h.unclean = drift_trace_reader_unclean(m->r);
    m->h.steps_per_s = 0;
    if (ns >= 2) {
        size_t k = ns > 10 ? ns - 10 : 0;
        double dt = steps[ns - 1].time - steps[k].time;
        if (dt > 0) m->h.steps_per_s = (double)(ns - 1 - k) / dt;
    }
    writer_state(m->r, m->follow, &m->stop_seen_a, m->writer, sizeof m->writer);
    m->h.writer = m->writer;
    /* the --against file has its own writer (the rollout engine): its state and last commit */
    drift_trace_reader *b = m->src.against_reader ? m->src.against_reader(m->src.ctx) : NULL;
    m->against_writer[0] = 0;
    m->h.against_last_commit_time = 0.0;
    if (b) {
        writer_state(b, m->follow, &m->stop_seen_b, m->against_writer, sizeof m->against_writer);
        const drift_trace_step *bs = drift_trace_reader_steps(b, &ns);
        m->h.against_last_commit_time = ns ? bs[ns - 1].time : 0.0;
    }
    m->h.against_writer = m->against_writer;
}

/* "glob=dtype, ..." of a plan's patterns into buf, "..." when cut. */
static void pattern_list(const drift_plan *p, char *buf, size_t sz) {
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < p->n_patterns; i++) {
        int n = snprintf(buf + o, sz - o, "%s%s=%s", i ? ", " : "", p->patterns[i].glob,
                         drift_dtype_name(p->patterns[i].dtype));
        if (n < 0 || (size_t)n >= sz - o) {
            if (sz > 4) snprintf(buf + (o + 4 < sz ? o : sz - 4), 4, "...");
            return;
        }
        o += (size_t)n;
    }
}

static void header_plan(drift_top_header *h, const char *plan_json);

/* The other side's plan into the header's *_b fields. */
static void header_plan_b(drift_top_header *h, const char *path, const char *plan_json) {
    drift_top_header t;
    memset(&t, 0, sizeof t);
    header_plan(&t, plan_json);
    h->has_plan_b = 1;
    h->plan_b_ok = t.plan_ok;
    h->plan_b_path = path;
    memcpy(h->plan_b_name, t.plan_name, sizeof h->plan_b_name);
    memcpy(h->fwd_b, t.fwd, sizeof h->fwd_b);
    memcpy(h->rollout_b, t.rollout, sizeof h->rollout_b);
    memcpy(h->reduce_b, t.reduce, sizeof h->reduce_b);
    memcpy(h->master_b, t.master, sizeof h->master_b);
    h->n_patterns_b = t.n_patterns;
    memcpy(h->patterns_b, t.patterns, sizeof h->patterns_b);
    memcpy(h->plan_b_error, t.plan_error, sizeof h->plan_b_error);
}

static void header_plan(drift_top_header *h, const char *plan_json) {
    snprintf(h->fwd, sizeof h->fwd, "?");
    snprintf(h->rollout, sizeof h->rollout, "?");
    snprintf(h->reduce, sizeof h->reduce, "?");
    snprintf(h->master, sizeof h->master, "?");
    if (!plan_json || !*plan_json) {
        snprintf(h->plan_error, sizeof h->plan_error, "no plan recorded");
        return;
    }
    drift_plan p;
    drift_plan_init(&p);
    drift_err e;
    drift_err_clear(&e);
    if (drift_plan_parse_json(&p, plan_json, strlen(plan_json), "plan attribute", &e) != DRIFT_OK) {
        snprintf(h->plan_error, sizeof h->plan_error, "%.150s", e.msg);
        drift_plan_free(&p);
        return;
    }
    h->plan_ok = 1;
    snprintf(h->plan_name, sizeof h->plan_name, "%s", p.name[0] ? p.name : "(unnamed)");
    snprintf(h->fwd, sizeof h->fwd, "%s", drift_dtype_name(p.diffusion_forward_dtype));
    snprintf(h->rollout, sizeof h->rollout, "%s", drift_dtype_name(p.sglang_dit_precision));
    snprintf(h->reduce, sizeof h->reduce, "%s", drift_dtype_name(p.fsdp_reduce_dtype));
    snprintf(h->master, sizeof h->master, "%s", drift_dtype_name(p.fsdp_master_dtype));
    h->n_patterns = (int)p.n_patterns;
    pattern_list(&p, h->patterns, sizeof h->patterns);
    h->warn_fwd_rollout = p.diffusion_forward_dtype != p.sglang_dit_precision;
    h->warn_reduce_bf16 = p.fsdp_reduce_dtype == DRIFT_BF16;
    drift_plan_free(&p);
}

static int open_one(const char *path, int follow, drift_trace_reader **r, drift_err *err) {
    int rc = drift_trace_reader_open(r, path, follow ? DRIFT_TRACE_OPEN_FOLLOW : DRIFT_TRACE_OPEN_NORMAL, err);
    if (rc != DRIFT_OK && err && !strstr(err->where, path) && !strstr(err->msg, path)) drift_err_prefix(err, "%s", path);
    return rc;
}

int drift_top_model_open(drift_top_model **out, const drift_top_open_opts *o, drift_err *err) {
    *out = NULL;
    int rc;
    drift_top_model *m = drift_calloc(1, sizeof *m);
    if (!m) return drift_err_set(err, DRIFT_E_NOMEM, "drift top", "out of memory");
    m->loaded_after = INT64_MIN;
    m->follow = o->follow;
    m->path = dupstr(o->path);
    m->ref_path = dupstr(o->ref_path);
    if (!m->path || !m->ref_path) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, "drift top", "out of memory");
        goto fail;
    }
    m->against = dupstr(o->source ? o->source->against : "");
    if (!m->against) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, "drift top", "out of memory");
        goto fail;
    }
    if (o->source) {
        m->src = *o->source;
        m->r = m->src.reader(m->src.ctx);
    } else if ((rc = open_one(o->path, o->follow, &m->r, err)) != DRIFT_OK) {
        goto fail;
    }
    if ((rc = drift_top_data_create(&m->d, o->step_lo, o->step_hi, o->variant, err)) != DRIFT_OK) goto fail;
    if (drift_census_read(m->r, &m->census, NULL) != DRIFT_OK) m->census = NULL; /* a bad census hides only itself */
    if (m->src.poll) rc = m->src.poll(m->src.ctx, m->d, 0, NULL, err);
    else rc = load_new(m->r, m->d, &m->loaded_after, NULL, err);
    if (rc != DRIFT_OK) {
        drift_err_prefix(err, "%s", o->path);
        goto fail;
    }
    if (o->ref_path && *o->ref_path) {
        int64_t after = INT64_MIN;
        if ((rc = open_one(o->ref_path, 0, &m->rr, err)) != DRIFT_OK) goto fail;
        if ((rc = drift_top_data_create(&m->rd, INT64_MIN, INT64_MAX, o->variant, err)) != DRIFT_OK) goto fail;
        if ((rc = load_new(m->rr, m->rd, &after, NULL, err)) != DRIFT_OK) {
            drift_err_prefix(err, "%s", o->ref_path);
            goto fail;
        }
    }
    const drift_trace_meta *meta = drift_trace_reader_meta(m->r);
    m->h.path = m->path;
    m->h.run_id = meta->run_id ? meta->run_id : "";
    m->h.side = drift_trace_side_name(meta->side);
    m->h.family = meta->family ? meta->family : "";
    m->h.producer = meta->producer ? meta->producer : "";
    m->h.created = meta->created ? meta->created : "";
    m->h.rank = meta->rank;
    m->h.world_size = meta->world_size;
    m->h.guidance_scale = meta->guidance_scale;
    header_plan(&m->h, meta->plan_json);
    header_steps(m);
    m->h.follow = o->follow;
    m->h.has_ref = m->rr != NULL;
    m->h.ref_path = m->ref_path;
    m->h.ref_run_id = "";
    m->h.against = m->against;
    if (m->rr) {
        const drift_trace_meta *rm = drift_trace_reader_meta(m->rr);
        m->h.ref_run_id = rm->run_id ? rm->run_id : "";
        m->h.ref_has_metrics = drift_trace_reader_n_metric_sites(m->rr) > 0;
        header_plan_b(&m->h, m->ref_path, rm->plan_json);
    } else if (m->src.against_reader && m->src.against_reader(m->src.ctx)) {
        const drift_trace_meta *bm = drift_trace_reader_meta(m->src.against_reader(m->src.ctx));
        header_plan_b(&m->h, m->against, bm->plan_json);
    }
    *out = m;
    return DRIFT_OK;
fail:
    drift_top_model_close(m);
    return rc;
}

void drift_top_model_close(drift_top_model *m) {
    if (!m) return;
    drift_census_free(m->census);
    if (!m->src.poll) drift_trace_reader_close(m->r); /* a source's reader is the source's */
    free(m->against);
    drift_trace_reader_close(m->rr);
    drift_top_data_free(m->d);
    drift_top_data_free(m->rd);
    free(m->path);
    free(m->ref_path);
    free(m);
}

int drift_top_model_refresh(drift_top_model *m, int64_t *new_steps, drift_err *err) {
    if (new_steps) *new_steps = 0;
    if (!m->follow) return DRIFT_OK;
    int64_t n = 0;
    if (m->src.poll) {
        int rc = m->src.poll(m->src.ctx, m->d, 1, &n, err);
        if (rc != DRIFT_OK) return rc;
        header_steps(m);
        if (new_steps) *new_steps = n;
        return DRIFT_OK;
    }
    int rc = drift_trace_reader_refresh(m->r, &n, err);
    if (rc != DRIFT_OK) {
        drift_err_prefix(err, "%s", m->path);
        return rc;
    }
    if (n > 0) {
        int64_t added = 0;
        if ((rc = load_new(m->r, m->d, &m->loaded_after, &added, err)) != DRIFT_OK) {
            drift_err_prefix(err, "%s", m->path);
            return rc;
        }
    }
    header_steps(m);
    if (new_steps) *new_steps = n;
    return DRIFT_OK;
}

const drift_top_header *drift_top_model_header(const drift_top_model *m) { return &m->h; }
const drift_top_data *drift_top_model_data(const drift_top_model *m) { return m->d; }
const drift_top_data *drift_top_model_ref(const drift_top_model *m) { return m->rd; }

/* 1 if state (a writer_state word) is a writer still at work. */
static int writer_working(const char *st) {
    return st && st[0] && strcmp(st, "finished") != 0 && strncmp(st, "failed", 6) != 0 &&
           strcmp(st, "stopped without closing") != 0;
}

drift_top_liveness drift_top_model_liveness(const drift_top_model *m, double now, double idle_after, double *age) {
    /* with --against the pair is live while either writer is (the newer commit of the working ones
     * counts), finished when both are, stopped when neither works and one did not finish */
    const char *wa = m->h.writer, *wb = m->h.against_writer && m->h.against_writer[0] ? m->h.against_writer : NULL;
    int a_work = writer_working(wa), b_work = wb && writer_working(wb);
    double last = m->h.last_commit_time;
    if (b_work && (!a_work || m->h.against_last_commit_time > last)) last = m->h.against_last_commit_time;
    double a = m->h.steps_committed > 0 ? now - last : -1.0;
    if (age) *age = a;
    if (!a_work && !b_work) {
        int done = wa && strcmp(wa, "finished") == 0 && (!wb || strcmp(wb, "finished") == 0);
        return done ? DRIFT_TOP_CLOSED : DRIFT_TOP_STOPPED;
    }
    if (!m->follow) return DRIFT_TOP_IDLE; /* being written, but not followed */
    if (m->h.steps_committed > 0 && a <= idle_after) return DRIFT_TOP_LIVE;
    return DRIFT_TOP_IDLE;
}

void drift_top_model_query_init(const drift_top_model *m, drift_top_query *q) {
    q->guidance_scale = m->h.guidance_scale;
    q->ref_guidance_scale = 1.0;
    if (m->rr) q->ref_guidance_scale = drift_trace_reader_meta(m->rr)->guidance_scale;
}
