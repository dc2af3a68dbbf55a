/* Comparison metrics (DESIGN.md s7, s7b). Semantics: replay/analysis/metrics.h. */
#include "replay/analysis/metrics.h"

#include <math.h>
#include <string.h>

void drift_metrics_accumulate_f32(const float *t, const float *r, size_t n, drift_metric_acc *acc) {
    if (!acc || n == 0) return;
    drift_metric_acc_add_f32(acc, t, r, n, NULL, NULL);
}

double drift_metrics_rel_max(double max_abs_diff, double max_abs_ref) {
    return max_abs_diff / (max_abs_ref + DRIFT_METRICS_REL_EPS);
}

static double cfg_divisor(double s) {
    return (isfinite(s) && s > 0.0 && s != 1.0) ? s : 1.0;
}

void drift_metrics_finish(const drift_metric_acc *acc, double guidance_scale, drift_site_metrics *out) {
    memset(out, 0, sizeof(*out));
    out->argmax = -1;
    out->cfg_divisor = 1.0;
    out->cosine = 1.0;
    out->bitwise_equal = 1;
    out->ulp_dtype = DRIFT_DTYPE_INVALID;
    if (!acc) return;

    int64_t n = acc->numel;
    out->numel = n;
    if (n > 0) {
        out->mean_abs_diff = acc->sum_abs_diff / (double)n;
        out->rmse = sqrt(acc->sum_sq_diff / (double)n);
    }
    out->max_abs_diff = acc->max_abs_diff;
    out->rel_max = drift_metrics_rel_max(acc->max_abs_diff, acc->max_abs_ref);

    if (acc->sum_tt == 0.0 && acc->sum_rr == 0.0) {
        out->cosine = 1.0; /* two zero vectors point the same way */
    } else if (acc->sum_tt == 0.0 || acc->sum_rr == 0.0) {
        out->cosine = 0.0;
    } else {
        double c = acc->sum_tr / sqrt(acc->sum_tt * acc->sum_rr);
        out->cosine = c > 1.0 ? 1.0 : (c < -1.0 ? -1.0 : c);
    }

    double s = cfg_divisor(guidance_scale);
    out->cfg_divisor = s;
    out->mean_abs_diff_cfg = s == 1.0 ? out->mean_abs_diff : out->mean_abs_diff / s;
    out->max_abs_diff_cfg = s == 1.0 ? out->max_abs_diff : out->max_abs_diff / s;
    out->rmse_cfg = s == 1.0 ? out->rmse : out->rmse / s;

    out->argmax = acc->argmax;
    out->nan_t = acc->nan_t;
    out->inf_t = acc->inf_t;
    out->nan_r = acc->nan_r;
    out->inf_r = acc->inf_r;
    out->n_diff = acc->n_diff;
    out->bitwise_equal = acc->n_diff == 0;
}

int drift_metrics_accumulate_batched_f32(const float *t, const float *r, size_t batch, size_t n,
                                         drift_metric_acc *acc, double *rel_max, drift_err *err) {
    if (!acc || !rel_max)
        return drift_err_set(err, DRIFT_E_INTERNAL, "metrics", "accumulate_batched: NULL acc or rel_max");
    if (batch == 0)
        return drift_err_set(err, DRIFT_E_INPUT, "metrics", "batched metrics: batch size is 0, expected >= 1");
    if (n % batch != 0)
        return drift_err_set(err, DRIFT_E_INPUT, "metrics",
                             "batched metrics: %zu elements do not split into %zu equal rows", n, batch);
    size_t row = n / batch;
    double rm = *rel_max;
    for (size_t b = 0; b < batch; b++) {
        double md = 0.0, mr = 0.0;
        if (row > 0) drift_metric_acc_add_f32(acc, t + b * row, r + b * row, row, &md, &mr);
        double v = drift_metrics_rel_max(md, mr);
        if (v > rm || isnan(rm)) rm = v;
    }
    *rel_max = rm;
    return DRIFT_OK;
}

/* ------------------------------------------------------------------------ */

void drift_metrics_ulp_init(drift_ulp_acc *acc) {
    memset(acc, 0, sizeof(*acc));
    acc->argmax = -1;
}

uint64_t drift_metrics_ulp_of_ref(float t, float r, drift_dtype dt) {
    if (isnan(t) || isnan(r)) return (isnan(t) && isnan(r)) ? 0 : UINT64_MAX;
    if (t == r) return 0; /* also +0 vs -0, inf vs the same inf */
    /* an infinity on one side: the representable values between them */
    if (isinf(t) || isinf(r)) return drift_dtype_ulp_distance(t, r, dt);
    int mant = dt == DRIFT_BF16 ? 7 : (dt == DRIFT_F16 ? 10 : 23);
    int emin = dt == DRIFT_F16 ? -14 : -126;
    int e = 0;
    double m = fabs((double)r);
    if (m > 0) {
        (void)frexp(m, &e);
        e -= 1; /* m = 1.f * 2^e */
    }
    if (m == 0 || e < emin) e = emin; /* subnormal or zero reference: the subnormal spacing */
    double q = fabs((double)t - (double)r) / ldexp(1.0, e - mant);
    if (!(q < 9.2e18)) return (uint64_t)INT64_MAX;
    return (uint64_t)ceil(q);
}

void drift_metrics_accumulate_ulp_f32(const float *t, const float *r, size_t n, drift_dtype dt,
                                      drift_ulp_acc *acc) {
    if (!acc || n == 0) return;
    int64_t base = acc->numel;
    for (size_t i = 0; i < n; i++) {
        uint64_t u = drift_metrics_ulp_of_ref(t[i], r[i], dt);
        int mismatch = isnan(t[i]) != isnan(r[i]);
        if (!mismatch && r[i] == 0 && t[i] != 0 && isfinite(t[i])) {
            acc->zero_ref++;
            continue;
        }
        if (mismatch) {
            u = UINT64_MAX;
            acc->nan_mismatch++;
        } else {
            acc->sum_ulp += (double)u;
            acc->count++;
        }
        if (acc->argmax < 0 || u > acc->max_ulp) {
            acc->max_ulp = u;
            acc->argmax = base + (int64_t)i;
        }
    }
    acc->numel = base + (int64_t)n;
}

void drift_metrics_merge_ulp(drift_ulp_acc *a, const drift_ulp_acc *b) {
    if (!a || !b) return;
    if (b->argmax >= 0 && (a->argmax < 0 || b->max_ulp > a->max_ulp)) {
        a->max_ulp = b->max_ulp;
        a->argmax = a->numel + b->argmax;
    }
    a->sum_ulp += b->sum_ulp;
    a->count += b->count;
    a->nan_mismatch += b->nan_mismatch;
    a->zero_ref += b->zero_ref;
    a->numel += b->numel;
}

void drift_metrics_finish_ulp(const drift_ulp_acc *acc, drift_dtype dt, drift_site_metrics *out) {
    out->has_ulp = 1;
    out->ulp_dtype = dt;
    out->ulp_max = acc ? acc->max_ulp : 0;
    out->ulp_mean = (acc && acc->count > 0) ? acc->sum_ulp / (double)acc->count : 0.0;
    out->ulp_nan_mismatch = acc ? acc->nan_mismatch : 0;
    out->ulp_zero_ref = acc ? acc->zero_ref : 0;
}

/* ------------------------------------------------------------------------ */

void drift_metrics_site_init(drift_site_acc *a, drift_dtype dt) {
    memset(a, 0, sizeof(*a));
    drift_metric_acc_init(&a->m);
    drift_metrics_ulp_init(&a->ulp);
    a->rel_max = 0.0;
    a->rows = 0;
    a->dtype = dt == DRIFT_DTYPE_INVALID ? DRIFT_F32 : dt;
    a->worst_t = a->worst_r = NAN;
}

int drift_metrics_site_add_f32(drift_site_acc *a, const float *t, const float *r, size_t batch, size_t n,
                               drift_err *err) {
    if (!a) return drift_err_set(err, DRIFT_E_INTERNAL, "metrics", "site_add: NULL accumulator");
    int64_t base = a->m.numel;
    int rc = drift_metrics_accumulate_batched_f32(t, r, batch, n, &a->m, &a->rel_max, err);
    if (rc != DRIFT_OK) return rc;
    if (a->m.argmax >= base && a->m.argmax < base + (int64_t)n) { /* the worst element is in this chunk */
        a->worst_t = t[a->m.argmax - base];
        a->worst_r = r[a->m.argmax - base];
    }
    a->rows += (int64_t)batch;
    drift_metrics_accumulate_ulp_f32(t, r, n, a->dtype, &a->ulp);
    return DRIFT_OK;
}

void drift_metrics_site_merge(drift_site_acc *a, const drift_site_acc *b) {
    if (!a || !b) return;
    int64_t base = a->m.numel;
    drift_metric_acc_merge(&a->m, &b->m);
    if (b->m.argmax >= 0 && a->m.argmax == b->m.argmax + base) { /* b's worst element won */
        a->worst_t = b->worst_t;
        a->worst_r = b->worst_r;
    }
    drift_metrics_merge_ulp(&a->ulp, &b->ulp);
    if (b->rows > 0 && (a->rows == 0 || b->rel_max > a->rel_max)) a->rel_max = b->rel_max;
    a->rows += b->rows;
}

void drift_metrics_site_finish(const drift_site_acc *a, double guidance_scale, drift_site_metrics *out) {
    drift_metrics_finish(a ? &a->m : NULL, guidance_scale, out);
    if (!a) return;
    if (a->rows > 0) out->rel_max = a->rel_max;
    drift_metrics_finish_ulp(&a->ulp, a->dtype, out);
}

/* ------------------------------------------------------------------------ */

void drift_metrics_logprob_init(drift_logprob_acc *acc) { memset(acc, 0, sizeof(*acc)); }

void drift_metrics_add_logprob_pair(drift_logprob_acc *acc, double lp_new, double lp_old) {
    acc->count++;
    if (!isfinite(lp_new) || !isfinite(lp_old)) {
        acc->n_nonfinite++;
        return;
    }
    double d = lp_new - lp_old, ad = fabs(d);
    acc->sum_abs_diff += ad;
    acc->sum_abs_ratio_m1 += fabs(expm1(d)); /* exp(d) - 1 without cancellation */
    acc->sum_sq_diff += d * d;
    if (ad > acc->max_abs_diff) acc->max_abs_diff = ad;
}

void drift_metrics_accumulate_logprob_f32(const float *lp_new, const float *lp_old, size_t n,
                                          drift_logprob_acc *acc) {
    if (!acc) return;
    for (size_t i = 0; i < n; i++) drift_metrics_add_logprob_pair(acc, (double)lp_new[i], (double)lp_old[i]);
}

void drift_metrics_merge_logprob(drift_logprob_acc *a, const drift_logprob_acc *b) {
    if (!a || !b) return;
    a->sum_abs_diff += b->sum_abs_diff;
    a->sum_abs_ratio_m1 += b->sum_abs_ratio_m1;
    a->sum_sq_diff += b->sum_sq_diff;
    if (b->max_abs_diff > a->max_abs_diff) a->max_abs_diff = b->max_abs_diff;
    a->count += b->count;
    a->n_nonfinite += b->n_nonfinite;
}

void drift_metrics_finish_logprob(const drift_logprob_acc *acc, drift_logprob_metrics *out) {
    memset(out, 0, sizeof(*out));
    if (!acc) return;
    out->count = acc->count;
    out->n_nonfinite = acc->n_nonfinite;
    out->max_abs_diff = acc->max_abs_diff;
    if (acc->count > 0) {
        double n = (double)acc->count;
        out->log_prob_mean_abs_diff = acc->sum_abs_diff / n;
        out->ratio_abs_minus_1 = acc->sum_abs_ratio_m1 / n;
        out->approx_kl = 0.5 * (acc->sum_sq_diff / n);
    }
}

/* ------------------------------------------------------------------------ */

double drift_metrics_floor_ratio(double value, double floor) {
    if (isnan(value) || isnan(floor)) return NAN;
    if (floor == 0.0) {
        if (value == 0.0) return 0.0;
        return value > 0.0 ? INFINITY : -INFINITY;
    }
    return value / floor;
}

static uint64_t splitmix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Next value of a 16-bit float format towards +inf (max finite steps down).
 * inf_bits: the positive infinity pattern; NaN and +inf unchanged. */
static uint16_t next_up16(uint16_t h, uint16_t inf_bits) {
    uint16_t mag = h & 0x7fffu;
    if (mag > inf_bits) return h;                      /* NaN */
    if (h == inf_bits) return h;                       /* +inf */
    if (h & 0x8000u) return mag == 0 ? 0x0001u : (uint16_t)(h - 1u); /* negative: towards zero */
    if (h == (uint16_t)(inf_bits - 1u)) return (uint16_t)(h - 1u);    /* max finite steps down */
    return (uint16_t)(h + 1u);
}

static float nudge_one(float v, drift_dtype dt) {
    if (isnan(v) || (isinf(v) && v > 0)) return v; /* keep the payload: no canonicalisation */
    if (dt == DRIFT_BF16) return drift_bf16_to_f32(next_up16(drift_f32_to_bf16(v), 0x7f80u));
    if (dt == DRIFT_F16) return drift_f16_to_f32(next_up16(drift_f32_to_f16(v), 0x7c00u));
    float u = nextafterf(v, INFINITY);
    if (isinf(u)) u = nextafterf(v, -INFINITY); /* FLT_MAX steps down */
    return u;
}

size_t drift_metrics_nudge_ulp_f32(float *x, size_t n, drift_dtype dt, double fraction, uint64_t seed) {
    if (!x || n == 0 || !(fraction > 0.0)) return 0;
    int all = fraction >= 1.0;
    /* u < fraction  <=>  (bits >> 11) < fraction * 2^53 (both exact in fp64) */
    double limit = fraction * 9007199254740992.0;
    size_t changed = 0;
    for (size_t i = 0; i < n; i++) {
        if (!all) {
            uint64_t h = splitmix64(seed + ((uint64_t)i + 1u) * 0x9e3779b97f4a7c15ull);
            if (!((double)(h >> 11) < limit)) continue;
        }
        float before = x[i];
        float after = nudge_one(before, dt);
        if (drift_f32_bits(after) != drift_f32_bits(before)) {
            x[i] = after;
            changed++;
        }
    }
    return changed;
}
