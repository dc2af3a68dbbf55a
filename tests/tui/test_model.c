/* The data model of `drift top` (tui/model.c): ingest of metrics rows,
 * denoise combination, aggregation over steps, sorting, filtering, CFG
 * normalisation, threshold classification, presentation helpers, and a
 * round trip through a real trace written with the trace writer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "formats/trace.h"
#include "tui/model.h"

static drift_trace_metric mrow(int64_t step, int site, int denoise, double mean, double max, double rel, double cos) {
    drift_trace_metric r;
    memset(&r, 0, sizeof r);
    r.step = step;
    r.site = site;
    r.variant = 0;
    r.denoise_index = denoise;
    r.numel = 100;
    r.mean_abs_diff = mean;
    r.max_abs_diff = max;
    r.rel_max = rel;
    r.cosine = cos;
    r.rmse = NAN;
    r.rmse_oracle = NAN;
    r.worst_index = -1;
    return r;
}

/* 3 layers x steps 10, 11, 12 */
static drift_top_data *make_data(int64_t lo, int64_t hi) {
    drift_top_data *d = NULL;
    drift_err e;
    assert_int_equal(drift_top_data_create(&d, lo, hi, 0, &e), DRIFT_OK);
    assert_int_equal(drift_top_data_add_layer(d, "input:latents:post_cast", &e), DRIFT_OK);
    assert_int_equal(drift_top_data_add_layer(d, "blocks.0.attn1:out", &e), DRIFT_OK);
    assert_int_equal(drift_top_data_add_layer(d, "blocks.0.ffn:out", &e), DRIFT_OK);
    for (int64_t s = 10; s <= 12; s++) assert_int_equal(drift_top_data_add_step(d, s, 1000.0 + (double)s, &e), DRIFT_OK);
    drift_trace_metric rows[] = {
        mrow(10, 0, -1, 0.0, 0.0, 0.0, 1.0),
        mrow(10, 1, -1, 1e-4, 2e-3, 1e-3, 0.99999),
        mrow(10, 2, -1, 3e-3, 5e-2, 2e-2, 0.9999),
        mrow(11, 0, -1, 0.0, 0.0, 0.0, 1.0),
        mrow(11, 1, -1, 3e-4, 1e-3, 2e-3, 0.99998),
        mrow(11, 2, -1, 2e-3, 7e-2, 3e-2, 0.9995),
        mrow(12, 0, -1, 0.0, 0.0, 0.0, 1.0),
        mrow(12, 1, -1, 2e-4, 4e-3, 5e-4, 0.99997),
        /* layer 2 has no row at step 12 */
    };
    rows[1].flags = DRIFT_TRACE_METRIC_FIRST_DIVERGENT;
    rows[4].flags = DRIFT_TRACE_METRIC_FIRST_DIVERGENT;
    rows[7].flags = DRIFT_TRACE_METRIC_FIRST_DIVERGENT;
    rows[0].flags = rows[3].flags = rows[6].flags = DRIFT_TRACE_METRIC_BITWISE_EQUAL;
    rows[7].max_ulp_diff = 12;
    assert_int_equal(drift_top_data_add_metrics(d, rows, sizeof rows / sizeof rows[0], &e), DRIFT_OK);
    return d;
}

static void test_ingest_cells(void **state) {
    (void)state;
    drift_top_data *d = make_data(INT64_MIN, INT64_MAX);
    assert_int_equal(drift_top_data_n_layers(d), 3);
    assert_int_equal(drift_top_data_n_steps(d), 3);
    assert_int_equal(drift_top_data_step(d, 2), 12);
    assert_int_equal(drift_top_data_find_step(d, 11), 1);
    assert_int_equal(drift_top_data_find_step(d, 13), -1);
    assert_int_equal(drift_top_data_find_layer(d, "blocks.0.ffn:out"), 2);
    assert_int_equal(drift_top_data_find_layer(d, "nope"), -1);
    assert_int_equal(drift_top_data_max_name(d), strlen("input:latents:post_cast"));
    const drift_top_cell *c = drift_top_data_cell(d, 1, 2);
    assert_true(c->present);
    assert_true(c->v[DRIFT_TOP_M_MEAN] == 2e-4);
    assert_true(c->v[DRIFT_TOP_M_MAX] == 4e-3);
    assert_true(c->v[DRIFT_TOP_M_COS] == 0.99997);
    assert_int_equal(c->max_ulp_diff, 12);
    assert_true(c->flags & DRIFT_TRACE_METRIC_FIRST_DIVERGENT);
    assert_false(drift_top_data_cell(d, 2, 2)->present);
    /* a site index outside the name table is an input error */
    drift_trace_metric bad = mrow(10, 7, -1, 1, 1, 1, 1);
    drift_err e;
    drift_err_clear(&e);
    assert_int_equal(drift_top_data_add_metrics(d, &bad, 1, &e), DRIFT_E_INPUT);
    assert_non_null(strstr(e.msg, "site index 7"));
    /* steps must increase */
    assert_int_equal(drift_top_data_add_step(d, 12, 0, &e), DRIFT_E_INPUT);
    drift_top_data_free(d);
    drift_top_data_free(NULL);
}

static void test_range_and_variant(void **state) {
    (void)state;
    drift_top_data *d = make_data(11, 12); /* only step 11 */
    assert_int_equal(drift_top_data_n_steps(d), 1);
    assert_int_equal(drift_top_data_step(d, 0), 11);
    assert_true(drift_top_data_cell(d, 2, 0)->v[DRIFT_TOP_M_MEAN] == 2e-3);
    /* rows of another variant are skipped */
    drift_trace_metric v1 = mrow(11, 2, -1, 9.0, 9.0, 9.0, 0.0);
    v1.variant = 1;
    drift_err e;
    assert_int_equal(drift_top_data_add_metrics(d, &v1, 1, &e), DRIFT_OK);
    assert_true(drift_top_data_cell(d, 2, 0)->v[DRIFT_TOP_M_MEAN] == 2e-3);
    drift_top_data_free(d);
}

static void test_denoise_combination(void **state) {
    (void)state;
    drift_top_data *d = NULL;
    drift_err e;
    assert_int_equal(drift_top_data_create(&d, INT64_MIN, INT64_MAX, 0, &e), DRIFT_OK);
    assert_int_equal(drift_top_data_add_layer(d, "a", &e), DRIFT_OK);
    assert_int_equal(drift_top_data_add_step(d, 0, 0, &e), DRIFT_OK);
    assert_int_equal(drift_top_data_add_step(d, 1, 0, &e), DRIFT_OK);
    drift_trace_metric r[3] = {mrow(0, 0, 0, 1.0, 2.0, 0.1, 0.9), mrow(0, 0, 1, 4.0, 1.0, 0.3, 0.8),
                               mrow(0, 0, 2, NAN, 5.0, NAN, 0.95)};
    r[0].numel = 100;
    r[1].numel = 300;
    r[2].numel = 50;
    r[1].max_ulp_diff = 7;
    r[0].flags = DRIFT_TRACE_METRIC_BITWISE_EQUAL;
    assert_int_equal(drift_top_data_add_metrics(d, r, 3, &e), DRIFT_OK);
    const drift_top_cell *c = drift_top_data_cell(d, 0, 0);
    /* mean weighted by numel over the rows that have one: (1*100 + 4*300) / 400 */
    assert_true(c->v[DRIFT_TOP_M_MEAN] == (1.0 * 100 + 4.0 * 300) / 400.0);
    assert_true(c->v[DRIFT_TOP_M_MAX] == 5.0);
    assert_true(c->v[DRIFT_TOP_M_REL] == 0.3);
    assert_true(c->v[DRIFT_TOP_M_COS] == 0.8);
    assert_int_equal(c->max_ulp_diff, 7);
    assert_int_equal(c->numel, 450);
    assert_false(c->flags & DRIFT_TRACE_METRIC_BITWISE_EQUAL); /* only if all rows were */
    /* the producer's aggregate (denoise -1) wins, also over later per-denoise rows */
    drift_trace_metric agg = mrow(0, 0, -1, 0.5, 0.6, 0.7, 0.75);
    drift_trace_metric late = mrow(0, 0, 3, 100.0, 100.0, 100.0, 0.0);
    assert_int_equal(drift_top_data_add_metrics(d, &agg, 1, &e), DRIFT_OK);
    assert_int_equal(drift_top_data_add_metrics(d, &late, 1, &e), DRIFT_OK);
    c = drift_top_data_cell(d, 0, 0);
    assert_true(c->v[DRIFT_TOP_M_MEAN] == 0.5);
    assert_true(c->v[DRIFT_TOP_M_COS] == 0.75);
    /* a second aggregate row for the same key: the last one appended wins */
    drift_trace_metric agg2 = mrow(0, 0, -1, 0.25, 0.6, 0.7, 0.75);
    assert_int_equal(drift_top_data_add_metrics(d, &agg2, 1, &e), DRIFT_OK);
    assert_true(drift_top_data_cell(d, 0, 0)->v[DRIFT_TOP_M_MEAN] == 0.25);
    /* non-finite: candidate has NaN the reference lacks */
    drift_trace_metric nf = mrow(1, 0, -1, 1.0, 1.0, 1.0, 1.0);
    nf.nan_count = 3;
    nf.ref_nan_count = 1;
    assert_int_equal(drift_top_data_add_metrics(d, &nf, 1, &e), DRIFT_OK);
    assert_true(drift_top_data_cell(d, 0, 1)->flags & DRIFT_TOP_FLAG_NONFINITE);

    /* per-step scalars: weighted by n_pairs, the -1 row wins */
    drift_trace_step_metrics s[2];
    memset(s, 0, sizeof s);
    s[0].step = 0;
    s[0].denoise_index = 0;
    s[0].n_pairs = 1;
    s[0].log_prob_mean_abs_diff = 1.0;
    s[0].ratio_abs_minus_1 = 2.0;
    s[0].approx_kl = 3.0;
    s[1] = s[0];
    s[1].denoise_index = 1;
    s[1].n_pairs = 3;
    s[1].log_prob_mean_abs_diff = 5.0;
    assert_int_equal(drift_top_data_add_step_metrics(d, s, 2, &e), DRIFT_OK);
    assert_true(drift_top_data_series(d, DRIFT_TOP_S_LOGPROB, 0) == (1.0 + 15.0) / 4.0);
    assert_true(drift_top_data_series(d, DRIFT_TOP_S_RATIO, 0) == 2.0);
    assert_true(isnan(drift_top_data_series(d, DRIFT_TOP_S_LOGPROB, 1)));
    drift_trace_step_metrics sa = s[0];
    sa.denoise_index = -1;
    sa.log_prob_mean_abs_diff = 0.125;
    assert_int_equal(drift_top_data_add_step_metrics(d, &sa, 1, &e), DRIFT_OK);
    assert_true(drift_top_data_series(d, DRIFT_TOP_S_LOGPROB, 0) == 0.125);
    assert_true(isnan(drift_top_data_series(d, DRIFT_TOP_S_KL, 9)));
    drift_top_data_free(d);
}

static void test_aggregate(void **state) {
    (void)state;
    drift_top_data *d = make_data(INT64_MIN, INT64_MAX);
    /* layer 1: mean over 3 steps summed in order */
    double want = ((1e-4 + 3e-4) + 2e-4) / 3.0;
    assert_true(drift_top_data_aggregate(d, 1, DRIFT_TOP_M_MEAN, DRIFT_TOP_AGG_MEAN) == want);
    assert_true(drift_top_data_aggregate(d, 1, DRIFT_TOP_M_MAX, DRIFT_TOP_AGG_MAX) == 4e-3);
    /* cosine "max" is the worst step: the minimum */
    assert_true(drift_top_data_aggregate(d, 1, DRIFT_TOP_M_COS, DRIFT_TOP_AGG_MAX) == 0.99997);
    assert_true(drift_top_data_aggregate(d, 1, DRIFT_TOP_M_MEAN, DRIFT_TOP_AGG_STEP) == 2e-4);
    /* layer 2 is missing at the latest step: no value there, 2 values otherwise */
    assert_true(isnan(drift_top_data_aggregate(d, 2, DRIFT_TOP_M_MEAN, DRIFT_TOP_AGG_STEP)));
    assert_true(drift_top_data_aggregate(d, 2, DRIFT_TOP_M_MEAN, DRIFT_TOP_AGG_MEAN) == (3e-3 + 2e-3) / 2.0);
    drift_top_data_free(d);
}

/* Aggregates are folded incrementally as steps arrive; a change to an
 * already-folded step refolds the layer. Either way the mean is the
 * sequential fp64 sum over steps in order. */
static void test_incremental_aggregate(void **state) {
    (void)state;
    drift_top_data *d = NULL;
    drift_err e;
    assert_int_equal(drift_top_data_create(&d, INT64_MIN, INT64_MAX, 0, &e), DRIFT_OK);
    assert_int_equal(drift_top_data_add_layer(d, "x", &e), DRIFT_OK);
    const double a = 0.1, b = 0.7, c = 1e-17, dd = 0.3;
    assert_int_equal(drift_top_data_add_step(d, 0, 0, &e), DRIFT_OK);
    assert_int_equal(drift_top_data_add_step(d, 1, 0, &e), DRIFT_OK);
    drift_trace_metric r01[2] = {mrow(0, 0, -1, a, a, a, 0.5), mrow(1, 0, -1, b, b, b, 0.25)};
    assert_int_equal(drift_top_data_add_metrics(d, r01, 2, &e), DRIFT_OK);
    assert_true(drift_top_data_aggregate(d, 0, DRIFT_TOP_M_MEAN, DRIFT_TOP_AGG_MEAN) == (a + b) / 2.0);
    assert_int_equal(drift_top_data_add_step(d, 2, 0, &e), DRIFT_OK);
    /* a step without rows yet changes nothing */
    assert_true(drift_top_data_aggregate(d, 0, DRIFT_TOP_M_MEAN, DRIFT_TOP_AGG_MEAN) == (a + b) / 2.0);
    drift_trace_metric r2 = mrow(2, 0, -1, c, c, c, 0.75);
    assert_int_equal(drift_top_data_add_metrics(d, &r2, 1, &e), DRIFT_OK);
    assert_true(drift_top_data_aggregate(d, 0, DRIFT_TOP_M_MEAN, DRIFT_TOP_AGG_MEAN) == ((a + b) + c) / 3.0);
    assert_true(drift_top_data_aggregate(d, 0, DRIFT_TOP_M_MAX, DRIFT_TOP_AGG_MAX) == b);
    assert_true(drift_top_data_aggregate(d, 0, DRIFT_TOP_M_COS, DRIFT_TOP_AGG_MAX) == 0.25);
    /* an already-folded step is replaced: the layer is refolded */
    drift_trace_metric r1 = mrow(1, 0, -1, dd, dd, dd, 0.9);
    assert_int_equal(drift_top_data_add_metrics(d, &r1, 1, &e), DRIFT_OK);
    assert_true(drift_top_data_aggregate(d, 0, DRIFT_TOP_M_MEAN, DRIFT_TOP_AGG_MEAN) == ((a + dd) + c) / 3.0);
    assert_true(drift_top_data_aggregate(d, 0, DRIFT_TOP_M_MAX, DRIFT_TOP_AGG_MAX) == dd);
    assert_true(drift_top_data_aggregate(d, 0, DRIFT_TOP_M_COS, DRIFT_TOP_AGG_MAX) == 0.5);
    /* a layer that appears late aggregates over its own steps only */
    assert_int_equal(drift_top_data_add_layer(d, "late", &e), DRIFT_OK);
    drift_trace_metric rl = mrow(2, 1, -1, 4.0, 4.0, 4.0, 1.0);
    assert_int_equal(drift_top_data_add_metrics(d, &rl, 1, &e), DRIFT_OK);
    assert_true(drift_top_data_aggregate(d, 1, DRIFT_TOP_M_MEAN, DRIFT_TOP_AGG_MEAN) == 4.0);
    drift_top_query q;
    drift_top_query_default(&q);
    q.agg = DRIFT_TOP_AGG_MEAN;
    drift_top_table t;
    assert_int_equal(drift_top_table_build(d, NULL, &q, &t, &e), DRIFT_OK);
    assert_int_equal(t.rows[0].n_values, 3);
    assert_int_equal(t.rows[1].n_values, 1);
    drift_top_table_free(&t);
    drift_top_data_free(d);
}

static void test_table_sort_filter(void **state) {
    (void)state;
    drift_top_data *d = make_data(INT64_MIN, INT64_MAX);
    drift_top_query q;
    drift_top_query_default(&q);
    drift_top_table t;
    drift_err e;
    /* default: execution order at the latest step */
    assert_int_equal(drift_top_table_build(d, NULL, &q, &t, &e), DRIFT_OK);
    assert_int_equal(t.n, 3);
    assert_int_equal(t.step, 12);
    assert_int_equal(t.rows[0].layer, 0);
    assert_int_equal(t.rows[2].layer, 2);
    assert_true(isnan(t.rows[2].v[DRIFT_TOP_M_MEAN]));
    assert_int_equal(t.first_divergent, 1);
    assert_int_equal(t.rows[1].max_ulp_diff, 12);
    assert_int_equal(t.rows[2].max_ulp_diff, -1);
    drift_top_table_free(&t);
    /* sort by mean descending: NaN last even when descending */
    q.sort = DRIFT_TOP_SORT_MEAN;
    q.descending = 1;
    assert_int_equal(drift_top_table_build(d, NULL, &q, &t, &e), DRIFT_OK);
    assert_int_equal(t.rows[0].layer, 1);
    assert_int_equal(t.rows[1].layer, 0);
    assert_int_equal(t.rows[2].layer, 2);
    drift_top_table_free(&t);
    q.descending = 0;
    assert_int_equal(drift_top_table_build(d, NULL, &q, &t, &e), DRIFT_OK);
    assert_int_equal(t.rows[0].layer, 0);
    assert_int_equal(t.rows[1].layer, 1);
    assert_int_equal(t.rows[2].layer, 2);
    drift_top_table_free(&t);
    /* mean mode, sorted by max desc: layer 2 (7e-2) > layer 1 (4e-3) > layer 0 (0) */
    q.agg = DRIFT_TOP_AGG_MAX;
    q.sort = DRIFT_TOP_SORT_MAX;
    q.descending = 1;
    assert_int_equal(drift_top_table_build(d, NULL, &q, &t, &e), DRIFT_OK);
    assert_int_equal(t.rows[0].layer, 2);
    assert_true(t.rows[0].v[DRIFT_TOP_M_MAX] == 7e-2);
    assert_int_equal(t.rows[2].layer, 0);
    drift_top_table_free(&t);
    /* by name, both directions; by order reversed */
    q.agg = DRIFT_TOP_AGG_STEP;
    q.sort = DRIFT_TOP_SORT_NAME;
    q.descending = 0;
    assert_int_equal(drift_top_table_build(d, NULL, &q, &t, &e), DRIFT_OK);
    assert_string_equal(t.rows[0].name, "blocks.0.attn1:out");
    assert_string_equal(t.rows[2].name, "input:latents:post_cast");
    drift_top_table_free(&t);
    q.sort = DRIFT_TOP_SORT_ORDER;
    q.descending = 1;
    assert_int_equal(drift_top_table_build(d, NULL, &q, &t, &e), DRIFT_OK);
    assert_int_equal(t.rows[0].layer, 2);
    drift_top_table_free(&t);
    /* filter: glob, substring, no match */
    q.descending = 0;
    q.filter = "blocks.*";
    assert_int_equal(drift_top_table_build(d, NULL, &q, &t, &e), DRIFT_OK);
    assert_int_equal(t.n, 2);
    assert_int_equal(t.n_total, 3);
    assert_int_equal(drift_top_table_find(&t, 2), 1);
    assert_int_equal(drift_top_table_find(&t, 0), -1);
    drift_top_table_free(&t);
    q.filter = "ffn";
    assert_int_equal(drift_top_table_build(d, NULL, &q, &t, &e), DRIFT_OK);
    assert_int_equal(t.n, 1);
    assert_string_equal(t.rows[0].name, "blocks.0.ffn:out");
    /* first divergent is computed over all layers, filter or not */
    assert_int_equal(t.first_divergent, 1);
    drift_top_table_free(&t);
    q.filter = "*:pre_cast";
    assert_int_equal(drift_top_table_build(d, NULL, &q, &t, &e), DRIFT_OK);
    assert_int_equal(t.n, 0);
    drift_top_table_free(&t);
    /* a chosen step */
    q.filter = NULL;
    q.step = 10;
    assert_int_equal(drift_top_table_build(d, NULL, &q, &t, &e), DRIFT_OK);
    assert_int_equal(t.step, 10);
    assert_true(t.rows[2].v[DRIFT_TOP_M_MEAN] == 3e-3);
    drift_top_table_free(&t);
    assert_true(drift_top_filter_match(NULL, "x"));
    assert_true(drift_top_filter_match("", "x"));
    assert_true(drift_top_filter_match("blocks.[0-9].ffn*", "blocks.3.ffn:out"));
    assert_false(drift_top_filter_match("blocks.[!0-9]*", "blocks.3.ffn:out"));
    drift_top_data_free(d);
}

static void test_cfg_and_classes(void **state) {
    (void)state;
    drift_top_data *d = make_data(INT64_MIN, INT64_MAX);
    drift_top_query q;
    drift_top_query_default(&q);
    q.guidance_scale = 4.0;
    q.cfg_normalise = 1;
    q.step = 11;
    drift_top_table t;
    drift_err e;
    assert_int_equal(drift_top_table_build(d, NULL, &q, &t, &e), DRIFT_OK);
    /* layer 2 at step 11: mean 2e-3 / 4, max 7e-2 / 4; rel and cos unchanged */
    assert_true(t.rows[2].v[DRIFT_TOP_M_MEAN] == 2e-3 / 4.0);
    assert_true(t.rows[2].v[DRIFT_TOP_M_MAX] == 7e-2 / 4.0);
    assert_true(t.rows[2].v[DRIFT_TOP_M_REL] == 3e-2);
    assert_true(t.rows[2].v[DRIFT_TOP_M_COS] == 0.9995);
    /* absolute classes: 5e-4 < 1e-3 ok; 1.75e-2 < 2e-2 ok; rel 3e-2 warn; 1-cos 5e-4 warn */
    assert_int_equal(t.rows[2].cls[DRIFT_TOP_M_MEAN], DRIFT_TOP_CLASS_OK);
    assert_int_equal(t.rows[2].cls[DRIFT_TOP_M_MAX], DRIFT_TOP_CLASS_OK);
    assert_int_equal(t.rows[2].cls[DRIFT_TOP_M_REL], DRIFT_TOP_CLASS_WARN);
    assert_int_equal(t.rows[2].cls[DRIFT_TOP_M_COS], DRIFT_TOP_CLASS_WARN);
    assert_int_equal(t.rows[2].row_cls, DRIFT_TOP_CLASS_WARN);
    assert_int_equal(t.rows[0].row_cls, DRIFT_TOP_CLASS_EQUAL);
    drift_top_table_free(&t);
    /* raw: mean 2e-3 is a warning */
    q.cfg_normalise = 0;
    assert_int_equal(drift_top_table_build(d, NULL, &q, &t, &e), DRIFT_OK);
    assert_true(t.rows[2].v[DRIFT_TOP_M_MEAN] == 2e-3);
    assert_int_equal(t.rows[2].cls[DRIFT_TOP_M_MEAN], DRIFT_TOP_CLASS_WARN);
    drift_top_table_free(&t);
    /* a scale of 0 / NaN counts as 1 */
    q.cfg_normalise = 1;
    q.guidance_scale = NAN;
    assert_int_equal(drift_top_table_build(d, NULL, &q, &t, &e), DRIFT_OK);
    assert_true(t.rows[2].v[DRIFT_TOP_M_MEAN] == 2e-3);
    drift_top_table_free(&t);

    /* against a reference run: ratios to the reference's mean over its steps */
    drift_top_data *ref = NULL;
    assert_int_equal(drift_top_data_create(&ref, INT64_MIN, INT64_MAX, 0, &e), DRIFT_OK);
    assert_int_equal(drift_top_data_add_layer(ref, "blocks.0.ffn:out", &e), DRIFT_OK);
    assert_int_equal(drift_top_data_add_layer(ref, "blocks.0.attn1:out", &e), DRIFT_OK);
    assert_int_equal(drift_top_data_add_step(ref, 0, 0, &e), DRIFT_OK);
    assert_int_equal(drift_top_data_add_step(ref, 1, 0, &e), DRIFT_OK);
    drift_trace_metric rr[] = {mrow(0, 0, -1, 2e-4, 1e-2, 1e-2, 0.9999), mrow(1, 0, -1, 4e-4, 1e-2, 1e-2, 0.9999),
                               mrow(0, 1, -1, 0.0, 0.0, 0.0, 1.0), mrow(1, 1, -1, 0.0, 0.0, 0.0, 1.0)};
    assert_int_equal(drift_top_data_add_metrics(ref, rr, 4, &e), DRIFT_OK);
    q.guidance_scale = 1.0;
    q.ref_guidance_scale = 1.0;
    q.cfg_normalise = 0;
    assert_int_equal(drift_top_table_build(d, ref, &q, &t, &e), DRIFT_OK);
    /* layer 2 (ffn) at step 11: mean 2e-3 vs ref mean 3e-4 -> 6.7x warn; max 7e-2 vs 1e-2 -> 7x warn;
       rel 3e-2 vs 1e-2 -> 3x warn; 1-cos 5e-4 vs 1e-4 -> 5x warn */
    assert_true(t.rows[2].ref[DRIFT_TOP_M_MEAN] == (2e-4 + 4e-4) / 2.0);
    assert_int_equal(t.rows[2].cls[DRIFT_TOP_M_MEAN], DRIFT_TOP_CLASS_WARN);
    assert_int_equal(t.rows[2].cls[DRIFT_TOP_M_MAX], DRIFT_TOP_CLASS_WARN);
    assert_int_equal(t.rows[2].cls[DRIFT_TOP_M_REL], DRIFT_TOP_CLASS_WARN);
    assert_int_equal(t.rows[2].cls[DRIFT_TOP_M_COS], DRIFT_TOP_CLASS_WARN);
    /* layer 1 (attn1): the reference was exact there, this run is not -> bad */
    assert_int_equal(t.rows[1].cls[DRIFT_TOP_M_MEAN], DRIFT_TOP_CLASS_BAD);
    /* layer 0 is absent from the reference: no class except exact zeros */
    assert_true(isnan(t.rows[0].ref[DRIFT_TOP_M_MEAN]));
    drift_top_table_free(&t);
    q.th.ratio_bad = 5.0; /* 6.7x is now bad; rel 3x stays a warning */
    assert_int_equal(drift_top_table_build(d, ref, &q, &t, &e), DRIFT_OK);
    assert_int_equal(t.rows[2].cls[DRIFT_TOP_M_REL], DRIFT_TOP_CLASS_WARN);
    assert_int_equal(t.rows[2].cls[DRIFT_TOP_M_MEAN], DRIFT_TOP_CLASS_BAD);
    drift_top_table_free(&t);
    drift_top_data_free(ref);

    drift_top_thresholds th;
    drift_top_thresholds_default(&th);
    assert_int_equal(drift_top_classify(DRIFT_TOP_M_MEAN, NAN, NAN, &th), DRIFT_TOP_CLASS_NONE);
    assert_int_equal(drift_top_classify(DRIFT_TOP_M_MEAN, 0.0, NAN, &th), DRIFT_TOP_CLASS_EQUAL);
    assert_int_equal(drift_top_classify(DRIFT_TOP_M_MEAN, 9.99e-4, NAN, &th), DRIFT_TOP_CLASS_OK);
    assert_int_equal(drift_top_classify(DRIFT_TOP_M_MEAN, 1e-3, NAN, &th), DRIFT_TOP_CLASS_WARN);
    assert_int_equal(drift_top_classify(DRIFT_TOP_M_MEAN, 1e-2, NAN, &th), DRIFT_TOP_CLASS_BAD);
    assert_int_equal(drift_top_classify(DRIFT_TOP_M_MEAN, INFINITY, NAN, &th), DRIFT_TOP_CLASS_BAD);
    assert_int_equal(drift_top_classify(DRIFT_TOP_M_COS, 1.0, NAN, &th), DRIFT_TOP_CLASS_EQUAL);
    assert_int_equal(drift_top_classify(DRIFT_TOP_M_COS, 0.995, NAN, &th), DRIFT_TOP_CLASS_WARN);
    assert_int_equal(drift_top_classify(DRIFT_TOP_M_MEAN, 2e-3, 1e-3, &th), DRIFT_TOP_CLASS_OK);
    assert_int_equal(drift_top_classify(DRIFT_TOP_M_MEAN, 2.1e-3, 1e-3, &th), DRIFT_TOP_CLASS_WARN);
    assert_int_equal(drift_top_classify(DRIFT_TOP_M_MEAN, 1.1e-2, 1e-3, &th), DRIFT_TOP_CLASS_BAD);
    assert_int_equal(drift_top_classify(DRIFT_TOP_M_MEAN, 0.0, 1e-3, &th), DRIFT_TOP_CLASS_EQUAL);
    assert_string_equal(drift_top_class_name(DRIFT_TOP_CLASS_WARN), "warn");
    drift_top_data_free(d);
}

static void test_presentation(void **state) {
    (void)state;
    char b[32];
    assert_string_equal(drift_top_fmt_value(1.23456e-3, b, sizeof b), "1.235e-03");
    assert_string_equal(drift_top_fmt_value(0.0, b, sizeof b), "0");
    assert_string_equal(drift_top_fmt_value(NAN, b, sizeof b), "-");
    assert_string_equal(drift_top_fmt_value(INFINITY, b, sizeof b), "inf");
    assert_string_equal(drift_top_fmt_cos(0.999999971, b, sizeof b), "0.99999997");
    assert_string_equal(drift_top_fmt_cos(NAN, b, sizeof b), "-");
    double v[] = {0.0, 1.0, 2.0, NAN, 7.0, 3.5};
    int lv[6];
    drift_top_spark_levels(v, 6, 6, lv);
    int want[] = {0, 1, 2, -1, 7, 4};
    for (int i = 0; i < 6; i++) assert_int_equal(lv[i], want[i]);
    /* the last 2 values only, scaled to their own max */
    drift_top_spark_levels(v, 6, 2, lv);
    assert_int_equal(lv[0], 7);
    assert_int_equal(lv[1], 4);
    /* n > len is clamped */
    drift_top_spark_levels(v, 2, 5, lv);
    assert_int_equal(lv[0], 0);
    assert_int_equal(lv[1], 7);
    /* one log scale shared by rows (defect 22.12: per-row scaling made every
     * diverging layer read full): 1e-6..1e-2 over 4 decades */
    double g[] = {1e-6, 1e-4, 1e-2, 0.0, NAN, INFINITY};
    drift_top_spark_levels_log(g, 6, 1e-6, 1e-2, lv);
    int wantg[] = {1, 4, 7, 0, -1, 7};
    for (int i = 0; i < 6; i++) assert_int_equal(lv[i], wantg[i]);
    /* a row of small values stays small on the shared scale */
    double small[] = {2e-6, 2e-6};
    drift_top_spark_levels_log(small, 2, 1e-6, 1e-2, lv);
    assert_int_equal(lv[0], 1);
    double z[] = {0.0, 0.0};
    drift_top_spark_levels(z, 2, 2, lv);
    assert_int_equal(lv[0], 0);
    assert_int_equal(lv[1], 0);
    assert_int_equal(drift_top_bar_eighths(1.0, 2.0, 3), 12);
    assert_int_equal(drift_top_bar_eighths(2.0, 2.0, 3), 24);
    assert_int_equal(drift_top_bar_eighths(1e-9, 2.0, 3), 1); /* visible */
    assert_int_equal(drift_top_bar_eighths(0.0, 2.0, 3), 0);
    assert_int_equal(drift_top_bar_eighths(NAN, 2.0, 3), -1);
    assert_int_equal(drift_top_bar_eighths(5.0, 0.0, 3), 0);
    assert_string_equal(drift_top_agg_name(DRIFT_TOP_AGG_MEAN), "mean");
    assert_int_equal(drift_top_agg_parse("max"), DRIFT_TOP_AGG_MAX);
    assert_int_equal(drift_top_agg_parse("nope"), -1);
    assert_int_equal(drift_top_sort_parse("cos"), DRIFT_TOP_SORT_COS);
    assert_string_equal(drift_top_sort_name(DRIFT_TOP_SORT_REL), "rel");
}

static void test_parse_steps(void **state) {
    (void)state;
    int64_t lo, hi;
    drift_err e;
    assert_int_equal(drift_top_parse_steps("3:7", &lo, &hi, &e), DRIFT_OK); /* both ends included */
    assert_true(lo == 3 && hi == 8);
    assert_int_equal(drift_top_parse_steps("7:7", &lo, &hi, &e), DRIFT_OK);
    assert_true(lo == 7 && hi == 8);
    assert_int_equal(drift_top_parse_steps("3:", &lo, &hi, &e), DRIFT_OK);
    assert_true(lo == 3 && hi == INT64_MAX);
    assert_int_equal(drift_top_parse_steps(":7", &lo, &hi, &e), DRIFT_OK);
    assert_true(lo == INT64_MIN && hi == 8);
    assert_int_equal(drift_top_parse_steps("5", &lo, &hi, &e), DRIFT_OK);
    assert_true(lo == 5 && hi == 6);
    assert_int_equal(drift_top_parse_steps(":", &lo, &hi, &e), DRIFT_OK);
    assert_int_equal(drift_top_parse_steps("7:3", &lo, &hi, &e), DRIFT_E_USAGE);
    assert_int_equal(drift_top_parse_steps("a:3", &lo, &hi, &e), DRIFT_E_USAGE);
    assert_non_null(strstr(e.where, "--steps"));
    assert_int_equal(drift_top_parse_steps("", &lo, &hi, &e), DRIFT_E_USAGE);
    assert_int_equal(drift_top_parse_steps("1:2:3", &lo, &hi, &e), DRIFT_E_USAGE);
}

/* ---- round trip through a real trace ----------------------------------- */

static const char *tmpdir(void) {
    const char *t = getenv("DRIFT_TMP");
    return t && *t ? t : "/tmp";
}

static void write_trace(const char *path, double guidance, const char *plan, int n_steps) {
    drift_err e;
    drift_err_clear(&e);
    drift_trace_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.side = DRIFT_TRACE_SIDE_TRAINER;
    meta.run_id = "run-model-test";
    meta.world_size = 1;
    meta.family = "tiny-dit";
    meta.guidance_scale = guidance;
    meta.plan_json = plan;
    drift_trace_writer *w = NULL;
    int rc = drift_trace_writer_create(&w, path, &meta, &e);
    if (rc != DRIFT_OK) fail_msg("create %s: %s: %s", path, e.where, e.msg);
    assert_int_equal(drift_trace_writer_start(w, &e), DRIFT_OK);
    const char *names[] = {"input:latents:post_cast", "blocks.0.attn1:out", "output:noise_pred"};
    for (int s = 0; s < n_steps; s++) {
        for (int i = 0; i < 3; i++) {
            drift_trace_metric r = mrow(s, 0, -1, i * 1e-3 + s * 1e-5, i * 1e-2, i * 1e-3, 1.0 - i * 1e-5);
            if (i == 1) r.flags = DRIFT_TRACE_METRIC_FIRST_DIVERGENT;
            rc = drift_trace_writer_add_metric(w, names[i], &r, &e);
            if (rc != DRIFT_OK) fail_msg("add_metric: %s: %s", e.where, e.msg);
        }
        drift_trace_step_metrics sm;
        memset(&sm, 0, sizeof sm);
        sm.step = s;
        sm.denoise_index = -1;
        sm.n_pairs = 4;
        sm.log_prob_mean_abs_diff = 0.5 + s;
        sm.ratio_abs_minus_1 = 0.25 * s;
        sm.approx_kl = 1e-6;
        assert_int_equal(drift_trace_writer_add_step_metrics(w, &sm, &e), DRIFT_OK);
        rc = drift_trace_writer_commit_step(w, s, 0, &e);
        if (rc != DRIFT_OK) fail_msg("commit: %s: %s", e.where, e.msg);
    }
    assert_int_equal(drift_trace_writer_close(w, &e), DRIFT_OK);
}

static void test_model_open_trace(void **state) {
    (void)state;
    char path[1024], refp[1024];
    snprintf(path, sizeof path, "%s/model_test.h5", tmpdir());
    snprintf(refp, sizeof refp, "%s/model_test_ref.h5", tmpdir());
    const char *plan = "{\"name\":\"mixed\",\"fsdp_reduce_dtype\":\"bf16\",\"diffusion_forward_dtype\":\"bf16\","
                       "\"sglang_dit_precision\":\"fp32\",\"param_dtype_patterns\":[[\"*.norm2.*\",\"fp32\"]]}";
    write_trace(path, 4.5, plan, 5);
    write_trace(refp, 1.0, "", 2);
    drift_top_open_opts o;
    memset(&o, 0, sizeof o);
    o.path = path;
    o.ref_path = refp;
    o.step_lo = 1;
    o.step_hi = 4;
    drift_top_model *m = NULL;
    drift_err e;
    drift_err_clear(&e);
    int rc = drift_top_model_open(&m, &o, &e);
    if (rc != DRIFT_OK) fail_msg("open: %s: %s", e.where, e.msg);
    const drift_top_header *h = drift_top_model_header(m);
    assert_string_equal(h->run_id, "run-model-test");
    assert_string_equal(h->side, "trainer");
    assert_string_equal(h->family, "tiny-dit");
    assert_true(h->guidance_scale == 4.5);
    assert_int_equal(h->steps_committed, 5);
    assert_int_equal(h->last_step, 4);
    assert_true(h->plan_ok);
    assert_string_equal(h->plan_name, "mixed");
    assert_string_equal(h->fwd, "bf16");
    assert_string_equal(h->rollout, "fp32");
    assert_true(h->warn_fwd_rollout);
    assert_true(h->warn_reduce_bf16);
    assert_int_equal(h->n_patterns, 1);
    assert_true(h->has_ref);
    assert_int_equal(drift_top_model_liveness(m, h->last_commit_time + 1.0, 10.0, NULL), DRIFT_TOP_CLOSED);
    const drift_top_data *d = drift_top_model_data(m);
    assert_int_equal(drift_top_data_n_steps(d), 3); /* steps 1, 2, 3 */
    assert_int_equal(drift_top_data_n_layers(d), 3);
    assert_string_equal(drift_top_data_layer_name(d, 2), "output:noise_pred");
    assert_true(drift_top_data_cell(d, 2, 2)->v[DRIFT_TOP_M_MEAN] == 2 * 1e-3 + 3 * 1e-5);
    assert_true(drift_top_data_series(d, DRIFT_TOP_S_LOGPROB, 0) == 1.5);
    drift_top_query q;
    drift_top_query_default(&q);
    drift_top_model_query_init(m, &q);
    assert_true(q.guidance_scale == 4.5);
    drift_top_table t;
    assert_int_equal(drift_top_table_build(d, drift_top_model_ref(m), &q, &t, &e), DRIFT_OK);
    assert_int_equal(t.step, 3);
    assert_int_equal(t.first_divergent, 1);
    drift_top_table_free(&t);
    /* not following: refresh is a no-op */
    int64_t n = -1;
    assert_int_equal(drift_top_model_refresh(m, &n, &e), DRIFT_OK);
    assert_int_equal(n, 0);
    drift_top_model_close(m);

    /* the plan attribute empty: header says so */
    o.ref_path = NULL;
    o.path = refp;
    o.step_lo = INT64_MIN;
    o.step_hi = INT64_MAX;
    assert_int_equal(drift_top_model_open(&m, &o, &e), DRIFT_OK);
    assert_false(drift_top_model_header(m)->plan_ok);
    assert_string_equal(drift_top_model_header(m)->plan_error, "no plan recorded");
    drift_top_model_close(m);
    drift_top_model_close(NULL);

    /* a missing file: an error naming it */
    char missing[1100];
    snprintf(missing, sizeof missing, "%s/does-not-exist.h5", tmpdir());
    o.path = missing;
    drift_err_clear(&e);
    assert_int_not_equal(drift_top_model_open(&m, &o, &e), DRIFT_OK);
    assert_null(m);
    char buf[2048];
    assert_non_null(strstr(drift_err_format(&e, buf, sizeof buf), "does-not-exist.h5"));
    unlink(path);
    unlink(refp);
}

/* Natural order of names and one row per block (defect 22.12). */
static void test_natural_sort_and_blocks(void **state) {
    (void)state;
    assert_true(drift_top_natural_cmp("blocks.2:out", "blocks.10:out") < 0);
    assert_true(drift_top_natural_cmp("blocks.10.a", "blocks.9.a") > 0);
    assert_true(drift_top_natural_cmp("blocks.02", "blocks.2") == 0);
    assert_true(drift_top_natural_cmp("a", "b") < 0);
    assert_int_equal(drift_top_block_prefix("blocks.12.attn1:out"), 9);
    assert_int_equal(drift_top_block_prefix("blocks.3:out"), 8);
    assert_int_equal(drift_top_block_prefix("blocksx.3:out"), 0);
    assert_int_equal(drift_top_block_prefix("output:noise_pred"), 0);
    drift_err e;
    drift_err_clear(&e);
    drift_top_data *d = NULL;
    assert_int_equal(drift_top_data_create(&d, INT64_MIN, INT64_MAX, 0, &e), DRIFT_OK);
    const char *names[] = {"input:x", "blocks.0.a:out", "blocks.0.b:out", "blocks.1.a:out", "blocks.1.b:out",
                           "blocks.10.a:out", "blocks.2.a:out", "output:y"};
    for (int i = 0; i < 8; i++) assert_int_equal(drift_top_data_add_layer(d, names[i], &e), DRIFT_OK);
    assert_int_equal(drift_top_data_add_step(d, 0, 0, &e), DRIFT_OK);
    drift_trace_metric rows[8];
    double mean[8] = {0, 0, 0, 1e-3, 5e-3, 2e-3, 3e-3, 4e-3};
    for (int i = 0; i < 8; i++) rows[i] = mrow(0, i, -1, mean[i], mean[i], mean[i], 1.0);
    rows[0].flags = rows[1].flags = rows[2].flags = DRIFT_TRACE_METRIC_BITWISE_EQUAL;
    rows[3].flags = DRIFT_TRACE_METRIC_FIRST_DIVERGENT;
    assert_int_equal(drift_top_data_add_metrics(d, rows, 8, &e), DRIFT_OK);
    drift_top_query q;
    drift_top_query_default(&q);
    q.sort = DRIFT_TOP_SORT_NAME;
    drift_top_table t;
    assert_int_equal(drift_top_table_build(d, NULL, &q, &t, &e), DRIFT_OK);
    const char *want[] = {"blocks.0.a:out", "blocks.0.b:out", "blocks.1.a:out", "blocks.1.b:out", "blocks.2.a:out",
                          "blocks.10.a:out", "input:x", "output:y"};
    for (int i = 0; i < 8; i++) assert_string_equal(t.rows[i].name, want[i]);
    drift_top_table_free(&t);
    q.sort = DRIFT_TOP_SORT_ORDER;
    q.collapse_blocks = 1;
    assert_int_equal(drift_top_table_build(d, NULL, &q, &t, &e), DRIFT_OK);
    /* input, block 0 (2), block 1 (2: its first divergent layer a, not the larger b), block 10, block 2, output */
    assert_int_equal(t.n, 6);
    assert_string_equal(t.rows[1].name, "blocks.0.a:out");
    assert_int_equal(t.rows[1].n_group, 2);
    assert_string_equal(t.rows[2].name, "blocks.1.a:out");
    assert_int_equal(t.rows[2].n_group, 2);
    assert_int_equal(t.rows[2].row_cls, DRIFT_TOP_CLASS_WARN); /* b's class (5e-3: warn) */
    assert_int_equal(t.rows[3].n_group, 1);
    assert_int_equal(drift_top_table_find(&t, (size_t)t.first_divergent), 2);
    drift_top_table_free(&t);
    drift_top_data_free(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ingest_cells),
        cmocka_unit_test(test_range_and_variant),
        cmocka_unit_test(test_denoise_combination),
        cmocka_unit_test(test_aggregate),
        cmocka_unit_test(test_incremental_aggregate),
        cmocka_unit_test(test_table_sort_filter),
        cmocka_unit_test(test_cfg_and_classes),
        cmocka_unit_test(test_presentation),
        cmocka_unit_test(test_natural_sort_and_blocks),
        cmocka_unit_test(test_parse_steps),
        cmocka_unit_test(test_model_open_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
