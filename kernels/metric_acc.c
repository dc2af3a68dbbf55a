/* The mergeable metric partial sums of DESIGN.md s7 (kernels/backend.h). */
#include <math.h>
#include <string.h>

#include "kernels/backend.h"

void drift_metric_acc_init(drift_metric_acc *acc) {
    if (!acc) return;
    memset(acc, 0, sizeof *acc);
    acc->argmax = -1;
}

void drift_metric_acc_merge(drift_metric_acc *a, const drift_metric_acc *b) {
    if (!a || !b) return;
    /* b's elements come after a's: b's argmax shifts by a->numel; a keeps ties. */
    if (b->argmax >= 0 && (a->argmax < 0 || b->max_abs_diff > a->max_abs_diff)) {
        a->max_abs_diff = b->max_abs_diff;
        a->argmax = b->argmax + a->numel;
    }
    if (b->max_abs_ref > a->max_abs_ref) a->max_abs_ref = b->max_abs_ref;
    a->sum_abs_diff += b->sum_abs_diff;
    a->sum_sq_diff += b->sum_sq_diff;
    a->sum_tr += b->sum_tr;
    a->sum_tt += b->sum_tt;
    a->sum_rr += b->sum_rr;
    a->numel += b->numel;
    a->nan_t += b->nan_t;
    a->inf_t += b->inf_t;
    a->nan_r += b->nan_r;
    a->inf_r += b->inf_r;
    a->n_diff += b->n_diff;
}

/* The one host pass (kernels/backend.h): the cpu backend's metrics and
 * replay/analysis/metrics.c's flat and batched accumulators all call it. */
void drift_metric_acc_add_f32(drift_metric_acc *acc, const float *t, const float *r, size_t n, double *chunk_max_d,
                              double *chunk_max_r) {
    double sad = acc->sum_abs_diff, ssd = acc->sum_sq_diff;
    double str = acc->sum_tr, stt = acc->sum_tt, srr = acc->sum_rr;
    double maxd = acc->max_abs_diff, maxr = acc->max_abs_ref;
    double cmaxd = 0.0, cmaxr = 0.0;
    int64_t argmax = acc->argmax, base = acc->numel;
    int64_t nan_t = 0, inf_t = 0, nan_r = 0, inf_r = 0, n_diff = 0;

    for (size_t i = 0; i < n; i++) {
        float a = t[i], b = r[i];
        int a_nan = isnan(a), b_nan = isnan(b);
        if (drift_f32_bits(a) != drift_f32_bits(b) && !(a_nan && b_nan)) n_diff++;
        if (a_nan) nan_t++;
        else if (isinf(a)) inf_t++;
        if (b_nan) nan_r++;
        else if (isinf(b)) inf_r++;
        if (!isfinite(a) || !isfinite(b)) continue;
        double da = (double)a, db = (double)b;
        double d = da - db, ad = fabs(d), ar = fabs(db);
        sad += ad;
        ssd += d * d;
        str += da * db;
        stt += da * da;
        srr += db * db;
        if (argmax < 0 || ad > maxd) {
            maxd = ad;
            argmax = base + (int64_t)i;
        }
        if (ar > maxr) maxr = ar;
        if (ad > cmaxd) cmaxd = ad;
        if (ar > cmaxr) cmaxr = ar;
    }
    acc->sum_abs_diff = sad;
    acc->sum_sq_diff = ssd;
    acc->sum_tr = str;
    acc->sum_tt = stt;
    acc->sum_rr = srr;
    acc->max_abs_diff = maxd;
    acc->max_abs_ref = maxr;
    acc->argmax = argmax;
    acc->numel = base + (int64_t)n;
    acc->nan_t += nan_t;
    acc->inf_t += inf_t;
    acc->nan_r += nan_r;
    acc->inf_r += inf_r;
    acc->n_diff += n_diff;
    if (chunk_max_d) *chunk_max_d = cmaxd;
    if (chunk_max_r) *chunk_max_r = cmaxr;
}

