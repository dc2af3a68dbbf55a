/* Comparison metrics between a candidate t and a reference r (DESIGN.md s7,
 * s7b): host-side accumulation, finishing into per-site values, ULP
 * distances, per-step log-prob metrics and noise-floor helpers.
 *
 * Semantics every producer of a drift_metric_acc shares (the backends'
 * `metrics` entry in kernels/backend.h computes the same thing on device;
 * drift_metrics_accumulate_f32 is the host reference):
 *
 *  - Inputs are fp32 values (bf16/fp16 tensors widened exactly). The
 *    difference d = t - r of a pair is computed in fp64 (exact for two fp32
 *    values except in extreme exponent gaps), so |d|, d^2 and the cosine
 *    products are exact or correctly rounded before summing.
 *  - Sums (sum|d|, sum d^2, sum t*r, sum t*t, sum r*r) accumulate in fp64 in
 *    element order; maxima (max|d|, max|r|) reduce with MAX.
 *  - Non-finite pairs: a pair enters the sums and the maxima only when t and
 *    r are both finite. Pairs with a NaN or an inf on either side are counted
 *    (nan_t, inf_t, nan_r, inf_r) and still count in numel, so that
 *    mean = sum / numel is the mean over all elements with non-finite pairs
 *    contributing 0. Show the counts next to the metrics.
 *  - argmax is the flat index of the first element (lowest index) whose |d|
 *    attains max|d|; -1 while no finite pair has been seen. Indices are
 *    global over everything accumulated into one acc: a call that adds n
 *    elements to an acc already holding acc->numel elements numbers them
 *    acc->numel .. acc->numel + n - 1, as if the chunks were concatenated in
 *    call order. drift_metric_acc_merge(a, b) (kernels/backend.c) follows
 *    the same convention (b's elements come after a's: b->argmax + a->numel
 *    when b wins, a's index on a tie), so merging equals one pass.
 *  - n_diff counts elements whose fp32 bit patterns differ, treating every
 *    NaN as equal to every NaN (any payload or sign); +0 and -0 differ.
 *
 * None of these functions allocate. Thread-safety: an acc is plain data;
 * use one per thread and merge. */
#ifndef DRIFT_REPLAY_METRICS_H
#define DRIFT_REPLAY_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "formats/dtype.h"
#include "formats/err.h"
#include "kernels/backend.h" /* drift_metric_acc */

/* The guard of rel_max's denominator: max|d| / (max|r| + DRIFT_METRICS_REL_EPS). */
#define DRIFT_METRICS_REL_EPS 1e-30

/* ------------------------------------------------------------------------ */
/* Output-tensor metrics                                                     */

/* Per-site finished values. All fields are plain data (no ownership). */
typedef struct drift_site_metrics {
    int64_t numel;
    double mean_abs_diff;   /* model_output_mean_abs_diff: sum|d| / numel (0 when numel = 0) */
    double max_abs_diff;    /* model_output_max_abs_diff: max|d| */
    double rel_max;         /* model_output_rel_max: max|d| / (max|r| + 1e-30) */
    double cosine;          /* sum_tr / sqrt(sum_tt * sum_rr); 1 when both vectors are
                               zero, 0 when exactly one is; clamped to [-1, 1] */
    double rmse;            /* sqrt(sum d^2 / numel) */
    /* CFG-normalised values (DESIGN.md s7: noise_pred = neg + s (pos - neg)
     * scales every abs-diff metric by s): the raw value divided by
     * cfg_divisor. cfg_divisor = s when s > 0 and s != 1 (finite), else 1 and
     * the *_cfg fields equal the raw ones. rel_max and cosine are ratios and
     * are not divided. */
    double cfg_divisor;
    double mean_abs_diff_cfg;
    double max_abs_diff_cfg;
    double rmse_cfg;
    int64_t argmax;         /* flat index of the worst element, -1 if none */
    int64_t nan_t, inf_t, nan_r, inf_r;
    int64_t n_diff;         /* elements whose bits differ (NaN == NaN) */
    int bitwise_equal;      /* n_diff == 0 */
    /* ULP distance in the site's dtype (filled by drift_metrics_finish_ulp or
     * drift_metrics_site_finish; 0 otherwise). */
    int has_ulp;
    drift_dtype ulp_dtype;
    uint64_t ulp_max;       /* UINT64_MAX when some element is NaN on one side only */
    double ulp_mean;        /* over elements not NaN on exactly one side */
    int64_t ulp_nan_mismatch;
    int64_t ulp_zero_ref;   /* differing elements of a zero reference (not in ulp_max) */
} drift_site_metrics;

/* Adds n pairs (t[i], r[i]) to acc (initialised with drift_metric_acc_init,
 * or holding earlier chunks; see the index convention above). t, r may be
 * NULL only when n == 0. */
void drift_metrics_accumulate_f32(const float *t, const float *r, size_t n, drift_metric_acc *acc);

/* rel_max of one group: max_abs_diff / (max_abs_ref + 1e-30), in fp64. */
double drift_metrics_rel_max(double max_abs_diff, double max_abs_ref);

/* Finishes acc into *out (every field written; the ULP fields zeroed).
 * rel_max is taken from acc's global maxima, i.e. acc is one group (one
 * micro-batch). guidance_scale: the CFG scale s of the run (pass 1 or 0 when
 * there is no CFG). */
void drift_metrics_finish(const drift_metric_acc *acc, double guidance_scale, drift_site_metrics *out);

/* Batched view: t and r are n elements viewed as (batch, n / batch). Adds
 * every element to acc (the mean and the other sums are over all of them)
 * and MAX-reduces into *rel_max the rel_max of each row (row max|d| / (row
 * max|r| + 1e-30)). *rel_max is in/out: start it at 0 (or at a previous
 * value to take the MAX across micro-batches and ranks). batch = 1 gives
 * DESIGN.md's per-micro-batch rel_max for a whole micro-batch; batch = B
 * takes it per sample. Errors (DRIFT_E_INPUT, nothing added): batch == 0,
 * n not a multiple of batch. */
int drift_metrics_accumulate_batched_f32(const float *t, const float *r, size_t batch, size_t n,
                                         drift_metric_acc *acc, double *rel_max, drift_err *err);

/* ------------------------------------------------------------------------ */
/* ULP distance in a site's dtype                                            */

typedef struct drift_ulp_acc {
    uint64_t max_ulp;       /* max over counted elements; UINT64_MAX once nan_mismatch > 0 */
    double sum_ulp;         /* fp64 sum over counted elements */
    int64_t count;          /* counted elements: not NaN on exactly one side (NaN vs NaN counts as 0) */
    int64_t nan_mismatch;   /* elements NaN on exactly one side (excluded from sum/count) */
    int64_t zero_ref;       /* differing elements whose reference is zero: a ULP of zero's magnitude
                               is the subnormal spacing (bf16: 3 vs 0 is 2^134 ULPs), so they are
                               counted here, not in max_ulp/sum/count */
    int64_t argmax;         /* first flat index attaining max_ulp (the first NaN mismatch when
                               there is one), -1 if no element seen */
    int64_t numel;          /* all elements seen (index base for the next chunk) */
} drift_ulp_acc;

void drift_metrics_ulp_init(drift_ulp_acc *acc);
/* |t - r| in ULPs of the reference's magnitude: |t - r| / ulp_dt(|r|),
 * rounded up, where ulp_dt(x) is the spacing of dt's values in x's binade
 * (the subnormal spacing for a zero or subnormal r). Not the count of
 * representable values between them, which explodes across zero (-1e-30 vs
 * 1e-30 would be ~2e9 fp32 steps). fp32 and fp64 sites measure fp32 ULPs
 * since values arrive widened to fp32. Equal values (+0 and -0 too) are 0;
 * an infinity on one side counts the representable values between them (inf
 * one step beyond the largest finite); NaN on one side is UINT64_MAX. */
uint64_t drift_metrics_ulp_of_ref(float t, float r, drift_dtype dt);
/* Adds n pairs, each distance drift_metrics_ulp_of_ref(t[i], r[i], dt),
 * except a finite t against a zero r, which counts in zero_ref instead.
 * Index convention as for drift_metric_acc. */
void drift_metrics_accumulate_ulp_f32(const float *t, const float *r, size_t n, drift_dtype dt,
                                      drift_ulp_acc *acc);
/* Merges b into a (b's elements after a's). */
void drift_metrics_merge_ulp(drift_ulp_acc *a, const drift_ulp_acc *b);
/* Writes the ULP fields of *out (has_ulp = 1, ulp_dtype = dt). ulp_mean is
 * sum_ulp / count (0 when count == 0). */
void drift_metrics_finish_ulp(const drift_ulp_acc *acc, drift_dtype dt, drift_site_metrics *out);

/* ------------------------------------------------------------------------ */
/* Site accumulator: everything above for one site, mergeable              */

typedef struct drift_site_acc {
    drift_metric_acc m;     /* sums over every element */
    double rel_max;         /* MAX over added rows of the row's rel_max */
    int64_t rows;           /* rows added (0: finish falls back to m's global rel_max) */
    drift_ulp_acc ulp;
    drift_dtype dtype;      /* the site's dtype, for ULPs */
    float worst_t, worst_r; /* candidate and reference at m.argmax (the worst element); NaN while m.argmax < 0 */
} drift_site_acc;

/* dt: the site's dtype (DRIFT_F32 when unknown). */
void drift_metrics_site_init(drift_site_acc *a, drift_dtype dt);
/* Adds one micro-batch viewed as (batch, n / batch): metric sums, per-row
 * rel_max and ULPs. Errors as drift_metrics_accumulate_batched_f32. */
int drift_metrics_site_add_f32(drift_site_acc *a, const float *t, const float *r, size_t batch, size_t n,
                               drift_err *err);
/* Merges b into a (uses drift_metric_acc_merge for the sums). Both must
 * have the same dtype (a's is kept). */
void drift_metrics_site_merge(drift_site_acc *a, const drift_site_acc *b);
/* drift_metrics_finish + drift_metrics_finish_ulp; rel_max is the per-row
 * MAX when rows > 0. */
void drift_metrics_site_finish(const drift_site_acc *a, double guidance_scale, drift_site_metrics *out);

/* ------------------------------------------------------------------------ */
/* Per-step log-prob metrics (PPO ratio drift)                              */

/* fp64 sums over pairs (lp_new, lp_old), mergeable across micro-batches and
 * ranks (merge = add the fields, MAX the max). A pair with a non-finite side
 * is counted in count and n_nonfinite and adds 0 to the sums (same policy as
 * drift_metric_acc). */
typedef struct drift_logprob_acc {
    double sum_abs_diff;    /* sum |lp_new - lp_old| */
    double sum_abs_ratio_m1;/* sum |exp(lp_new - lp_old) - 1| (computed as |expm1(d)|) */
    double sum_sq_diff;     /* sum (lp_new - lp_old)^2 */
    double max_abs_diff;    /* max |lp_new - lp_old| */
    int64_t count;          /* pairs */
    int64_t n_nonfinite;    /* pairs with a NaN or inf on either side */
} drift_logprob_acc;

typedef struct drift_logprob_metrics {
    double log_prob_mean_abs_diff; /* mean |lp_new - lp_old| */
    double ratio_abs_minus_1;      /* mean |exp(lp_new - lp_old) - 1| */
    double approx_kl;              /* 0.5 * mean (lp_new - lp_old)^2 */
    double max_abs_diff;
    int64_t count, n_nonfinite;
} drift_logprob_metrics;

void drift_metrics_logprob_init(drift_logprob_acc *acc);
/* One pair, in fp64: d = lp_new - lp_old. */
void drift_metrics_add_logprob_pair(drift_logprob_acc *acc, double lp_new, double lp_old);
/* n pairs of fp32 log-probs (widened exactly, difference in fp64). */
void drift_metrics_accumulate_logprob_f32(const float *lp_new, const float *lp_old, size_t n,
                                          drift_logprob_acc *acc);
void drift_metrics_merge_logprob(drift_logprob_acc *a, const drift_logprob_acc *b);
/* Means over count (all zero when count == 0). */
void drift_metrics_finish_logprob(const drift_logprob_acc *acc, drift_logprob_metrics *out);

/* ------------------------------------------------------------------------ */
/* Noise floor (DESIGN.md s7b)                                              */

/* A metric in units of its noise floor: value / floor; +inf when floor == 0
 * and value > 0; 0 when value == 0 and floor == 0; NaN when either is NaN.
 * (Metrics are >= 0; a negative floor divides as is.) */
double drift_metrics_floor_ratio(double value, double floor);

/* Moves values by one ULP of dt, in place, to measure the noise floor (the
 * same replay with the inputs moved by one ULP).
 *  - x holds values of dt widened to fp32 (a value not representable in dt
 *    is first rounded to it). fp32, fp64 and invalid dt use fp32 ULPs:
 *    nextafterf(x, +inf). bf16/fp16: the next representable value of dt
 *    towards +inf (-0 and +0 both go to the smallest positive subnormal).
 *  - The step is towards +inf, except for the largest finite value, which
 *    steps down by one ULP (so that nothing becomes inf). NaN and +inf are
 *    left alone (and not counted); -inf goes to the most negative finite.
 *  - Subset: fraction >= 1 moves every element; fraction <= 0 (or NaN) none;
 *    otherwise element i moves iff u(seed, i) < fraction, where u is the top
 *    53 bits of splitmix64(seed + (i + 1) * 0x9e3779b97f4a7c15) over 2^53:
 *    deterministic, independent of thread count and of chunking as long as
 *    i is the element's position in x.
 * Returns the number of elements changed. */
size_t drift_metrics_nudge_ulp_f32(float *x, size_t n, drift_dtype dt, double fraction, uint64_t seed);

#endif
