/* The two-trace comparison engine (see compare_traces.h) and drift compare's
 * driver over it (drift_compare_traces*). */

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/alloc.h"
#include "formats/trace.h"
#include "replay/analysis/compare_traces.h"

/* Record indexes of one site of one side, read incrementally (records are
 * appended in step order; the cursor moves forward with the steps). */
typedef struct side_site {
    drift_trace_index *idx;
    int64_t n, cap;
    int64_t cursor;              /* first record whose step >= the step being compared */
    drift_trace_site_info info;
} side_site;

typedef struct pair {
    char *name;
    int n_parts[2];              /* 1, or the parts of a concatenation */
    size_t site[2][DRIFT_SITEMAP_MAX_PARTS];
    int axis;                    /* concat axis (normalised), for the side with several parts */
    drift_dtype dtype;
    int64_t numel;
    int64_t batch;               /* rows for rel_max (A's leading dimension) */
    int has_data;                /* both sides store tensors */
} pair;

struct drift_tcmp {
    drift_trace_reader *r[2];
    side_site *ss[2];
    size_t n_sites[2];
    pair *pairs;
    size_t n_pairs;
    size_t unpaired[2];
    drift_sitecmp cmp;
    int64_t first, last;
    int64_t done_after;          /* last step compared (INT64_MIN: none) */
    int follow;
    long lp_a, lp_b;             /* log-prob sites, -1 if none */
    drift_logprob_acc lp_total;  /* over every compared step */
    char **warn;
    size_t n_warn;
    drift_trace_metric *rows;
    float *va, *vb, *tmp;
    size_t cap;
    drift_tcmp_step cur;
};

void drift_tcmp_opts_init(drift_tcmp_opts *o) {
    memset(o, 0, sizeof *o);
    o->step_first = -1;
    o->step_last = -1;
}

static int warnf(drift_tcmp *c, drift_err *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int warnf(drift_tcmp *c, drift_err *err, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **w = drift_realloc(c->warn, (c->n_warn + 1) * sizeof *w);
    if (!w) return drift_err_set(err, DRIFT_E_NOMEM, "compare", "out of memory");
    c->warn = w;
    if (!(w[c->n_warn] = drift_strdup(buf))) return drift_err_set(err, DRIFT_E_NOMEM, "compare", "out of memory");
    c->n_warn++;
    return DRIFT_OK;
}

/* Reads new index rows of every site of one side. */
static int load_index(drift_tcmp *c, int side, drift_err *err) {
    drift_trace_reader *r = c->r[side];
    for (size_t s = 0; s < c->n_sites[side]; s++) {
        side_site *x = &c->ss[side][s];
        int rc = drift_trace_reader_site(r, s, &x->info, err);
        if (rc) return rc;
        if (x->info.damaged || x->info.n_records <= x->n) continue;
        int64_t need = x->info.n_records;
        if (need > x->cap) {
            int64_t cap = x->cap ? x->cap : 64;
            while (cap < need) cap *= 2;
            drift_trace_index *p = drift_realloc(x->idx, (size_t)cap * sizeof *p);
            if (!p) return drift_err_set(err, DRIFT_E_NOMEM, drift_trace_reader_path(r), "out of memory");
            x->idx = p;
            x->cap = cap;
        }
        if ((rc = drift_trace_read_index(r, s, x->n, need - x->n, x->idx + x->n, err))) return rc;
        x->n = need;
    }
    return DRIFT_OK;
}

static int add_pair(drift_tcmp *c, const char *name, const size_t *sa, int na, const size_t *sb, int nb, int axis,
                    drift_err *err) {
    pair *p = drift_realloc(c->pairs, (c->n_pairs + 1) * sizeof *p);
    if (!p) return drift_err_set(err, DRIFT_E_NOMEM, "compare", "out of memory");
    c->pairs = p;
    p = &c->pairs[c->n_pairs];
    memset(p, 0, sizeof *p);
    if (!(p->name = drift_strdup(name))) return drift_err_set(err, DRIFT_E_NOMEM, "compare", "out of memory");
    c->n_pairs++;
    p->n_parts[0] = na;
    p->n_parts[1] = nb;
    memcpy(p->site[0], sa, (size_t)na * sizeof *sa);
    memcpy(p->site[1], sb, (size_t)nb * sizeof *sb);
    const drift_trace_site_info *a0 = &c->ss[0][sa[0]].info;
    p->dtype = a0->dtype;
    p->batch = a0->ndim > 0 ? a0->shape[0] : 1;
    p->axis = axis;
    int64_t numel[2] = {0, 0};
    p->has_data = 1;
    for (int side = 0; side < 2; side++)
        for (int k = 0; k < p->n_parts[side]; k++) {
            const drift_trace_site_info *in = &c->ss[side][p->site[side][k]].info;
            numel[side] += in->numel;
            p->has_data &= in->has_data;
        }
    p->numel = numel[0];
    return numel[0] == numel[1] ? DRIFT_OK : DRIFT_E_INPUT;
}

static long find_b(drift_tcmp *c, const drift_sitemap *map, const char *name) {
    char buf[DRIFT_SITEMAP_NAME_MAX];
    for (size_t s = 0; s < c->n_sites[1]; s++) {
        if (drift_sitemap_rename(map, c->ss[1][s].info.name, buf, sizeof buf) < 0) continue;
        if (strcmp(buf, name) == 0) return (long)s;
    }
    return -1;
}

static int shape_str(const drift_trace_site_info *in, char *buf, size_t n) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int d = 0; d < in->ndim && o < n; d++) o += (size_t)snprintf(buf + o, n - o, "%s%lld", d ? "," : "", (long long)in->shape[d]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return 0;
}

/* Pairs the sites of A and B (A's order). */
static int build_pairs(drift_tcmp *c, const drift_sitemap *map, int allow, drift_err *err) {
    char (*parts)[DRIFT_SITEMAP_NAME_MAX] = drift_malloc(DRIFT_SITEMAP_MAX_PARTS * sizeof *parts);
    char *site = drift_malloc(DRIFT_SITEMAP_NAME_MAX);
    char *used_b = drift_calloc(c->n_sites[1] ? c->n_sites[1] : 1, 1);
    char *used_a = drift_calloc(c->n_sites[0] ? c->n_sites[0] : 1, 1);
    int rc = DRIFT_OK;
    if (!parts || !site || !used_a || !used_b) { rc = drift_err_set(err, DRIFT_E_NOMEM, "compare", "out of memory"); goto done; }
    for (size_t s = 0; s < c->n_sites[0] && !rc; s++) {
        const drift_trace_site_info *ia = &c->ss[0][s].info;
        if (ia->damaged || used_a[s]) continue;
        size_t sa[DRIFT_SITEMAP_MAX_PARTS], sb[DRIFT_SITEMAP_MAX_PARTS];
        int axis = -1, na = 1, nb = 1;
        const char *name = ia->name;
        long b = find_b(c, map, ia->name);
        sa[0] = s;
        if (b >= 0) {
            sb[0] = (size_t)b;
        } else {
            /* A's site is a concatenation of B's sites, or the first part of a
             * concatenation that B holds as one site */
            size_t np = drift_sitemap_concat_of(map, ia->name, parts, &axis);
            int ok = np > 0;
            for (size_t k = 0; ok && k < np; k++) {
                long x = find_b(c, map, parts[k]);
                if (x < 0) ok = 0;
                else sb[k] = (size_t)x;
            }
            if (ok) {
                nb = (int)np;
            } else if ((np = drift_sitemap_concat_by_first_part(map, ia->name, site, parts, &axis)) > 0 &&
                       (b = find_b(c, map, site)) >= 0) {
                ok = 1;
                for (size_t k = 0; ok && k < np; k++) {
                    long x = drift_trace_reader_find_site(c->r[0], parts[k]);
                    if (x < 0) ok = 0;
                    else sa[k] = (size_t)x;
                }
                if (ok) {
                    na = (int)np;
                    sb[0] = (size_t)b;
                    name = site;
                }
            }
            if (!ok) {
                c->unpaired[0]++;
                continue;
            }
        }
        const drift_trace_site_info *ib = &c->ss[1][sb[0]].info;
        int r = add_pair(c, name, sa, na, sb, nb, axis, err);
        if (r == DRIFT_E_INPUT || (r == DRIFT_OK && na == 1 && nb == 1 &&
                                   (ib->ndim != ia->ndim ||
                                    memcmp(ib->shape, ia->shape, (size_t)ia->ndim * sizeof ia->shape[0])))) {
            char sh_a[128], sh_b[128];
            shape_str(ia, sh_a, sizeof sh_a);
            shape_str(ib, sh_b, sizeof sh_b);
            c->n_pairs--;
            free(c->pairs[c->n_pairs].name);
            if (!allow) {
                rc = drift_err_set(err, DRIFT_E_INPUT, ia->name,
                                   "shapes differ: %s %s in %s, %s %s in %s (--allow-mismatch skips such sites)",
                                   ia->name, sh_a, drift_trace_reader_path(c->r[0]), ib->name, sh_b,
                                   drift_trace_reader_path(c->r[1]));
                break;
            }
            rc = warnf(c, err, "skipped %s: shapes differ (%s vs %s)", ia->name, sh_a, sh_b);
            continue;
        }
        if (r) { rc = r; break; }
        for (int k = 0; k < na; k++) used_a[sa[k]] = 1;
        for (int k = 0; k < nb; k++) used_b[sb[k]] = 1;
    }
    for (size_t s = 0; s < c->n_sites[1]; s++) c->unpaired[1] += !used_b[s];
done:
    free(parts);
    free(site);
    free(used_a);
    free(used_b);
    return rc;
}

static int steps_in_both(const drift_tcmp *c, int64_t after, int64_t *next, int64_t *count) {
    size_t na = 0, nb = 0;
    const drift_trace_step *a = drift_trace_reader_steps(c->r[0], &na);
    const drift_trace_step *b = drift_trace_reader_steps(c->r[1], &nb);
    size_t i = 0, j = 0;
    int found = 0;
    if (count) *count = 0;
    while (i < na && j < nb) {
        if (a[i].step < b[j].step) i++;
        else if (b[j].step < a[i].step) j++;
        else {
            int64_t s = a[i].step;
            int in = (c->first < 0 || s >= c->first) && (c->last < 0 || s <= c->last);
            if (in && count) (*count)++;
            if (in && s > after && !found) {
                *next = s;
                found = 1;
                if (!count) return 1;
            }
            i++;
            j++;
        }
    }
    return found;
}

int drift_tcmp_open(drift_tcmp **out, const drift_tcmp_opts *o, drift_err *err) {
    *out = NULL;
    drift_tcmp *c = drift_calloc(1, sizeof *c);
    if (!c) return drift_err_set(err, DRIFT_E_NOMEM, "compare", "out of memory");
    c->first = o->step_first;
    c->last = o->step_last;
    c->follow = o->follow;
    c->done_after = INT64_MIN;
    c->lp_a = c->lp_b = -1;
    drift_metrics_logprob_init(&c->lp_total);
    drift_sitecmp_init(&c->cmp, 1.0);
    const char *paths[2] = {o->path_a, o->path_b};
    int rc = DRIFT_OK;
    for (int side = 0; side < 2 && !rc; side++) {
        rc = drift_trace_reader_open(&c->r[side], paths[side],
                                     o->follow ? DRIFT_TRACE_OPEN_FOLLOW : DRIFT_TRACE_OPEN_NORMAL, err);
        if (rc) break;
        c->n_sites[side] = drift_trace_reader_n_sites(c->r[side]);
        c->ss[side] = drift_calloc(c->n_sites[side] ? c->n_sites[side] : 1, sizeof *c->ss[side]);
        if (!c->ss[side]) rc = drift_err_set(err, DRIFT_E_NOMEM, paths[side], "out of memory");
        else rc = load_index(c, side, err);
    }
    if (rc) goto fail;
    const drift_trace_meta *ma = drift_trace_reader_meta(c->r[0]), *mb = drift_trace_reader_meta(c->r[1]);
    c->cmp.guidance_scale = ma->guidance_scale;
    const char *fa = ma->family ? ma->family : "", *fb = mb->family ? mb->family : "";
    if (strcmp(fa, fb) != 0) {
        if (!o->allow_mismatch) {
            rc = drift_err_set(err, DRIFT_E_INPUT, o->path_b,
                               "model family differs: \"%s\" in %s, \"%s\" in %s (--allow-mismatch compares anyway)",
                               fb, o->path_b, fa, o->path_a);
            goto fail;
        }
        if ((rc = warnf(c, err, "model family differs: \"%s\" vs \"%s\"", fa, fb))) goto fail;
    }
    if ((rc = build_pairs(c, o->sitemap, o->allow_mismatch, err))) goto fail;
    /* step sets can be compared only once both writers are done */
    if (!o->follow && !drift_trace_reader_unclean(c->r[0]) && !drift_trace_reader_unclean(c->r[1])) {
        size_t na = 0, nb = 0;
        const drift_trace_step *a = drift_trace_reader_steps(c->r[0], &na);
        const drift_trace_step *b = drift_trace_reader_steps(c->r[1], &nb);
        int same = na == nb;
        for (size_t i = 0; same && i < na; i++) same = a[i].step == b[i].step;
        if (!same) {
            char da[64], db[64];
            snprintf(da, sizeof da, na ? "%zu (%lld..%lld)" : "%zu", na, na ? (long long)a[0].step : 0LL,
                     na ? (long long)a[na - 1].step : 0LL);
            snprintf(db, sizeof db, nb ? "%zu (%lld..%lld)" : "%zu", nb, nb ? (long long)b[0].step : 0LL,
                     nb ? (long long)b[nb - 1].step : 0LL);
            if (!o->allow_mismatch) {
                rc = drift_err_set(err, DRIFT_E_INPUT, o->path_b,
                                   "committed steps differ: %s in %s, %s in %s (--allow-mismatch compares the "
                                   "steps both hold)", da, o->path_a, db, o->path_b);
                goto fail;
            }
            if ((rc = warnf(c, err, "committed steps differ: %s vs %s; comparing the steps both hold", da, db)))
                goto fail;
        }
    }
    /* two different runs have nothing to diverge from: their inputs differ from the start */
    const char *ra = ma->run_id ? ma->run_id : "", *rb = mb->run_id ? mb->run_id : "";
    if (strcmp(ra, rb) != 0) {
        if (!o->allow_mismatch) {
            rc = drift_err_set(err, DRIFT_E_INPUT, o->path_b,
                               "run id differs: \"%s\" in %s, \"%s\" in %s: two different runs, whose inputs differ "
                               "from the start (--allow-mismatch compares anyway)",
                               rb, o->path_b, ra, o->path_a);
            goto fail;
        }
        if ((rc = warnf(c, err, "run id differs: \"%s\" vs \"%s\" (two different runs)", ra, rb))) goto fail;
    }
    c->lp_a = drift_trace_reader_find_site(c->r[0], "logprob:new");
    if (c->lp_a < 0) c->lp_a = drift_trace_reader_find_site(c->r[0], "logprob:old");
    c->lp_b = drift_trace_reader_find_site(c->r[1], "logprob:old");
    if (c->lp_b < 0) c->lp_b = drift_trace_reader_find_site(c->r[1], "logprob:new");
    if (c->lp_a >= 0 && c->lp_b >= 0 &&
        (c->ss[0][c->lp_a].info.numel != c->ss[1][c->lp_b].info.numel || !c->ss[0][c->lp_a].info.has_data ||
         !c->ss[1][c->lp_b].info.has_data))
        c->lp_a = c->lp_b = -1;
    *out = c;
    return DRIFT_OK;
fail:
    drift_tcmp_close(c);
    return rc;
}

void drift_tcmp_close(drift_tcmp *c) {
    if (!c) return;
    for (int side = 0; side < 2; side++) {
        for (size_t s = 0; c->ss[side] && s < c->n_sites[side]; s++) free(c->ss[side][s].idx);
        free(c->ss[side]);
        drift_trace_reader_close(c->r[side]);
    }
    for (size_t i = 0; i < c->n_pairs; i++) free(c->pairs[i].name);
    free(c->pairs);
    for (size_t i = 0; i < c->n_warn; i++) free(c->warn[i]);
    free(c->warn);
    drift_sitecmp_free(&c->cmp);
    free(c->rows);
    free(c->va);
    free(c->vb);
    free(c->tmp);
    free(c);
}

int drift_tcmp_refresh(drift_tcmp *c, drift_err *err) {
    if (!c->follow) return DRIFT_OK;
    for (int side = 0; side < 2; side++) {
        int rc = drift_trace_reader_refresh(c->r[side], NULL, err);
        if (!rc) rc = load_index(c, side, err);
        if (rc) return rc;
    }
    return DRIFT_OK;
}

/* Records of site s (side) at step: [*lo, *hi). Moves the cursor. */
static void records_at(side_site *x, int64_t step, int64_t *lo, int64_t *hi) {
    while (x->cursor < x->n && x->idx[x->cursor].step < step) x->cursor++;
    int64_t e = x->cursor;
    while (e < x->n && x->idx[e].step == step) e++;
    *lo = x->cursor;
    *hi = e;
}

static int same_key(const drift_trace_index *a, const drift_trace_index *b) {
    return a->microbatch == b->microbatch && a->denoise_index == b->denoise_index && a->call_index == b->call_index;
}

/* The record of site with the key of ref inside [lo, hi), -1 if none. */
static int64_t match(const side_site *x, int64_t lo, int64_t hi, const drift_trace_index *ref) {
    for (int64_t i = lo; i < hi; i++)
        if (same_key(&x->idx[i], ref)) return i;
    return -1;
}

static int reserve(drift_tcmp *c, size_t n, drift_err *err) {
    if (n <= c->cap) return DRIFT_OK;
    float *a = drift_realloc(c->va, n * sizeof *a);
    if (a) c->va = a;
    float *b = a ? drift_realloc(c->vb, n * sizeof *b) : NULL;
    if (b) c->vb = b;
    float *t = b ? drift_realloc(c->tmp, n * sizeof *t) : NULL;
    if (!t) return drift_err_set(err, DRIFT_E_NOMEM, "compare", "out of memory (%zu values)", n);
    c->tmp = t;
    c->cap = n;
    return DRIFT_OK;
}

/* Values of one side of pair p for the record key into dst (concatenated
 * along p->axis when the side has several parts); *found 0 if a part lacks
 * the record or it is not stored. */
static int read_side(drift_tcmp *c, const pair *p, int side, int64_t step, const drift_trace_index *key, float *dst,
                     int *found, drift_err *err) {
    *found = 0;
    int np = p->n_parts[side];
    int64_t recs[DRIFT_SITEMAP_MAX_PARTS];
    for (int k = 0; k < np; k++) {
        side_site *x = &c->ss[side][p->site[side][k]];
        int64_t lo, hi;
        records_at(x, step, &lo, &hi);
        recs[k] = match(x, lo, hi, key);
        if (recs[k] < 0 || !x->idx[recs[k]].stored) return DRIFT_OK;
    }
    if (np == 1) {
        int rc = drift_trace_read_record_f32(c->r[side], p->site[side][0], recs[0], dst, c->cap, err);
        if (!rc) *found = 1;
        return rc;
    }
    /* concatenation: part k contributes blocks of inner_k = prod(shape[axis:]) */
    const drift_trace_site_info *i0 = &c->ss[side][p->site[side][0]].info;
    int ax = p->axis < 0 ? i0->ndim + p->axis : p->axis;
    if (ax < 0 || ax >= i0->ndim)
        return drift_err_set(err, DRIFT_E_INPUT, p->name, "concat axis %d outside the %d dimensions of %s", p->axis,
                             i0->ndim, i0->name);
    int64_t outer = 1;
    for (int d = 0; d < ax; d++) outer *= i0->shape[d];
    int64_t off = 0;
    for (int k = 0; k < np; k++) {
        const drift_trace_site_info *in = &c->ss[side][p->site[side][k]].info;
        if (in->ndim != i0->ndim)
            return drift_err_set(err, DRIFT_E_INPUT, p->name, "concat parts %s and %s differ in rank", i0->name,
                                 in->name);
        int64_t inner = 1;
        for (int d = ax; d < in->ndim; d++) inner *= in->shape[d];
        int rc = drift_trace_read_record_f32(c->r[side], p->site[side][k], recs[k], c->tmp, c->cap, err);
        if (rc) return rc;
        int64_t row = (int64_t)p->numel / (outer ? outer : 1);
        for (int64_t o = 0; o < outer; o++) memcpy(dst + o * row + off, c->tmp + o * inner, (size_t)inner * sizeof *dst);
        off += inner;
    }
    *found = 1;
    return DRIFT_OK;
}

static double sdiff(double a, double b) {
    if (isnan(a) && isnan(b)) return 0;
    return fabs(a - b);
}

/* A statistics-only comparison of a single-part pair at one record key. */
static int stats_row(drift_tcmp *c, const pair *p, int64_t ra, int64_t rb, drift_trace_metric *row, int *equal,
                     drift_err *err) {
    drift_trace_stats sa, sb;
    *equal = 0;
    int rc = drift_trace_read_stats(c->r[0], p->site[0][0], ra, 1, &sa, err);
    if (!rc) rc = drift_trace_read_stats(c->r[1], p->site[1][0], rb, 1, &sb, err);
    if (rc) return rc;
    double d[5] = {sdiff(sa.min, sb.min), sdiff(sa.max, sb.max), sdiff(sa.mean, sb.mean),
                   sdiff(sa.mean_abs, sb.mean_abs), sdiff(sa.l2, sb.l2)};
    double mx = 0;
    for (int k = 0; k < 5; k++) mx = (isnan(d[k]) || d[k] > mx) ? d[k] : mx;
    row->mean_abs_diff = d[2];
    row->max_abs_diff = mx;
    row->rel_max = row->cosine = row->rmse = row->rmse_oracle = NAN;
    row->nan_count = sa.nan_count;
    row->inf_count = sa.inf_count;
    row->ref_nan_count = sb.nan_count;
    row->ref_inf_count = sb.inf_count;
    row->worst_index = -1;
    row->max_ulp_diff = 0;
    row->numel = p->numel;
    *equal = mx == 0 && sa.nan_count == sb.nan_count && sa.inf_count == sb.inf_count;
    return DRIFT_OK;
}

int drift_tcmp_next(drift_tcmp *c, int *got, const drift_tcmp_step **out, drift_err *err) {
    *got = 0;
    if (out) *out = NULL;
    int64_t step;
    if (!steps_in_both(c, c->done_after, &step, NULL)) return DRIFT_OK;
    if (!c->rows && c->n_pairs) {
        c->rows = drift_calloc(c->n_pairs, sizeof *c->rows);
        if (!c->rows) return drift_err_set(err, DRIFT_E_NOMEM, "compare", "out of memory");
    }
    size_t need = 1;
    for (size_t i = 0; i < c->n_pairs; i++)
        if ((size_t)c->pairs[i].numel > need) need = (size_t)c->pairs[i].numel;
    for (int side = 0; side < 2; side++)
        for (size_t s = 0; s < c->n_sites[side]; s++)
            if ((size_t)c->ss[side][s].info.numel > need) need = (size_t)c->ss[side][s].info.numel;
    int rc = reserve(c, need, err);
    if (rc) return rc;
    drift_sitecmp_begin_step(&c->cmp);
    c->cur.step = step;
    c->cur.n_rows = 0;
    c->cur.first_divergent = -1;
    c->cur.has_logprob = 0;
    int diverged = 0;
    for (size_t pi = 0; pi < c->n_pairs && !rc; pi++) {
        pair *p = &c->pairs[pi];
        side_site *xa = &c->ss[0][p->site[0][0]];
        int64_t lo, hi;
        records_at(xa, step, &lo, &hi);
        drift_site_acc acc;
        drift_metrics_site_init(&acc, p->dtype);
        int n_val = 0, n_stats = 0, stats_equal = 1;
        drift_trace_metric srow;
        memset(&srow, 0, sizeof srow);
        for (int64_t i = lo; i < hi && !rc; i++) {
            const drift_trace_index *key = &xa->idx[i];
            int fa = 0, fb = 0;
            if ((rc = read_side(c, p, 0, step, key, c->va, &fa, err))) break;
            if (fa && (rc = read_side(c, p, 1, step, key, c->vb, &fb, err))) break;
            if (fa && fb) {
                int64_t b = p->batch > 0 && p->numel % p->batch == 0 ? p->batch : 1;
                if ((rc = drift_metrics_site_add_f32(&acc, c->va, c->vb, (size_t)b, (size_t)p->numel, err))) break;
                n_val++;
                continue;
            }
            if (p->n_parts[0] != 1 || p->n_parts[1] != 1) continue;
            /* stats only on one side (or both): compare the statistics rows */
            side_site *xb = &c->ss[1][p->site[1][0]];
            int64_t blo, bhi;
            records_at(xb, step, &blo, &bhi);
            int64_t rb = match(xb, blo, bhi, key);
            if (rb < 0) continue;
            drift_trace_metric one;
            memset(&one, 0, sizeof one);
            int eq = 0;
            if ((rc = stats_row(c, p, i, rb, &one, &eq, err))) break;
            if (!n_stats) srow = one;
            else {
                srow.mean_abs_diff = fmax(srow.mean_abs_diff, one.mean_abs_diff);
                srow.max_abs_diff = fmax(srow.max_abs_diff, one.max_abs_diff);
            }
            stats_equal &= eq;
            n_stats++;
        }
        if (rc) break;
        drift_trace_metric *row = &c->rows[c->cur.n_rows];
        if (n_val) {
            if ((rc = drift_sitecmp_add_acc(&c->cmp, p->name, p->dtype, &acc, step, row, err))) break;
        } else if (n_stats) {
            *row = srow;
            row->step = step;
            row->denoise_index = -1;
            row->flags = DRIFT_TCMP_FLAG_STATS | (stats_equal ? DRIFT_TRACE_METRIC_BITWISE_EQUAL : 0u);
            if (!stats_equal && !c->cmp.step_diverged) {
                c->cmp.step_diverged = 1; /* the first divergence may be seen through statistics */
                row->flags |= DRIFT_TRACE_METRIC_FIRST_DIVERGENT;
            }
        } else {
            continue;
        }
        row->site = (int32_t)pi;
        if (!diverged && (row->flags & DRIFT_TRACE_METRIC_FIRST_DIVERGENT)) {
            c->cur.first_divergent = (long)pi;
            diverged = 1;
        }
        c->cur.n_rows++;
    }
    if (!rc && c->lp_a >= 0 && c->lp_b >= 0) {
        side_site *xa = &c->ss[0][c->lp_a], *xb = &c->ss[1][c->lp_b];
        int64_t lo, hi, blo, bhi;
        records_at(xa, step, &lo, &hi);
        records_at(xb, step, &blo, &bhi);
        drift_logprob_acc la;
        drift_metrics_logprob_init(&la);
        size_t n = (size_t)xa->info.numel;
        for (int64_t i = lo; i < hi && !rc; i++) {
            int64_t rb = match(xb, blo, bhi, &xa->idx[i]);
            if (rb < 0 || !xa->idx[i].stored || !xb->idx[rb].stored) continue;
            if ((rc = drift_trace_read_record_f32(c->r[0], (size_t)c->lp_a, i, c->va, c->cap, err))) break;
            if ((rc = drift_trace_read_record_f32(c->r[1], (size_t)c->lp_b, rb, c->vb, c->cap, err))) break;
            drift_metrics_accumulate_logprob_f32(c->va, c->vb, n, &la);
        }
        if (!rc && la.count > 0) {
            drift_logprob_metrics lm;
            drift_metrics_finish_logprob(&la, &lm);
            drift_metrics_merge_logprob(&c->lp_total, &la);
            memset(&c->cur.lp, 0, sizeof c->cur.lp);
            c->cur.lp.step = step;
            c->cur.lp.denoise_index = -1;
            c->cur.lp.n_pairs = la.count;
            c->cur.lp.log_prob_mean_abs_diff = lm.log_prob_mean_abs_diff;
            c->cur.lp.ratio_abs_minus_1 = lm.ratio_abs_minus_1;
            c->cur.lp.approx_kl = lm.approx_kl;
            c->cur.has_logprob = 1;
        }
    }
    if (rc) return rc;
    c->cur.rows = c->rows;
    c->done_after = step;
    *got = 1;
    if (out) *out = &c->cur;
    return DRIFT_OK;
}

size_t drift_tcmp_n_pairs(const drift_tcmp *c) { return c->n_pairs; }
const char *drift_tcmp_pair_name(const drift_tcmp *c, size_t i) { return i < c->n_pairs ? c->pairs[i].name : NULL; }
const drift_sitecmp *drift_tcmp_aggregate(const drift_tcmp *c) { return &c->cmp; }

void drift_tcmp_take_aggregate(drift_tcmp *c, drift_sitecmp *out) {
    *out = c->cmp;
    drift_sitecmp_init(&c->cmp, out->guidance_scale);
}
drift_trace_reader *drift_tcmp_reader(const drift_tcmp *c, int side) { return c->r[side ? 1 : 0]; }
size_t drift_tcmp_n_warnings(const drift_tcmp *c) { return c->n_warn; }
const char *drift_tcmp_warning(const drift_tcmp *c, size_t i) { return i < c->n_warn ? c->warn[i] : NULL; }
size_t drift_tcmp_unpaired(const drift_tcmp *c, int side) { return c->unpaired[side ? 1 : 0]; }

int64_t drift_tcmp_steps_available(const drift_tcmp *c) {
    int64_t next = 0, n = 0;
    steps_in_both(c, INT64_MIN, &next, &n);
    return n;
}

int64_t drift_tcmp_logprob_total(const drift_tcmp *c, drift_logprob_metrics *out) {
    drift_metrics_finish_logprob(&c->lp_total, out);
    return c->lp_total.count;
}

/* ---- drift compare ---------------------------------------------------- */

int drift_compare_traces_opts(const drift_tcmp_opts *o, drift_replay_report *rep, drift_progress_fn progress,
                              void *user, drift_err *err) {
    memset(rep, 0, sizeof *rep);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    drift_tcmp *c = NULL;
    int rc = drift_tcmp_open(&c, o, err);
    if (rc) goto done;
    const drift_trace_meta *meta = drift_trace_reader_meta(drift_tcmp_reader(c, 0));
    drift_sitecmp_init(&rep->cmp, meta->guidance_scale);
    snprintf(rep->model, sizeof rep->model, "%s", meta->family ? meta->family : "");
    snprintf(rep->ref_desc, sizeof rep->ref_desc, "%s", o->path_b);
    int64_t total = drift_tcmp_steps_available(c);
    rep->steps = drift_calloc(total ? (size_t)total : 1, sizeof *rep->steps);
    rep->first_divergent = drift_calloc(total ? (size_t)total : 1, sizeof *rep->first_divergent);
    if (!rep->steps || !rep->first_divergent) { rc = drift_err_set(err, DRIFT_E_NOMEM, o->path_a, "out of memory"); goto done; }
    for (;;) {
        int got = 0;
        const drift_tcmp_step *st = NULL;
        if ((rc = drift_tcmp_next(c, &got, &st, err)) || !got) break;
        if (rep->n_steps >= total) break; /* cannot happen without follow */
        rep->steps[rep->n_steps] = st->step;
        if (st->first_divergent >= 0 &&
            !(rep->first_divergent[rep->n_steps] = drift_strdup(drift_tcmp_pair_name(c, (size_t)st->first_divergent)))) {
            rc = drift_err_set(err, DRIFT_E_NOMEM, o->path_a, "out of memory");
            break;
        }
        rep->n_steps++;
        if (progress) progress("compare", (long)rep->n_steps, (long)total, user);
    }
    if (rc) goto done;
    /* the engine's aggregates become the report's (moved, not copied) */
    drift_sitecmp_free(&rep->cmp);
    drift_tcmp_take_aggregate(c, &rep->cmp);
    rep->cmp.guidance_scale = meta->guidance_scale;
    if (drift_tcmp_logprob_total(c, &rep->lp_vs_old) > 0) rep->has_logprob = 1;
    size_t len = 0;
    for (size_t i = 0; i < drift_tcmp_n_warnings(c); i++) len += strlen(drift_tcmp_warning(c, i)) + 1;
    char un[8400];
    snprintf(un, sizeof un, "sites without a partner: %zu of %s, %zu of %s (compared: %zu)", drift_tcmp_unpaired(c, 0),
             o->path_a, drift_tcmp_unpaired(c, 1), o->path_b, drift_tcmp_n_pairs(c));
    int any_unpaired = drift_tcmp_unpaired(c, 0) || drift_tcmp_unpaired(c, 1);
    if (any_unpaired) len += strlen(un) + 1;
    if (len) {
        rep->warnings = drift_calloc(len + 1, 1);
        if (!rep->warnings) { rc = drift_err_set(err, DRIFT_E_NOMEM, o->path_a, "out of memory"); goto done; }
        for (size_t i = 0; i < drift_tcmp_n_warnings(c); i++) {
            strcat(rep->warnings, drift_tcmp_warning(c, i));
            strcat(rep->warnings, "\n");
        }
        if (any_unpaired) {
            strcat(rep->warnings, un);
            strcat(rep->warnings, "\n");
        }
    }
done:
    clock_gettime(CLOCK_MONOTONIC, &t1);
    rep->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    drift_tcmp_close(c);
    return rc;
}

int drift_compare_traces(const char *path_a, const char *path_b, drift_replay_report *rep, drift_err *err) {
    drift_tcmp_opts o;
    drift_tcmp_opts_init(&o);
    o.path_a = path_a;
    o.path_b = path_b;
    return drift_compare_traces_opts(&o, rep, NULL, NULL, err);
}
