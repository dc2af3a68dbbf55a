/* `drift top --batch`: the dashboard's table and series without a terminal,
 * as one JSON document or one CSV table (formats documented in
 * `drift top --help` and at drift_top_batch_write). */
#ifndef DRIFT_TUI_BATCH_H
#define DRIFT_TUI_BATCH_H

#include <stdio.h>

#include "formats/err.h"
#include "tui/model.h"

typedef enum drift_top_format { DRIFT_TOP_FORMAT_JSON = 0, DRIFT_TOP_FORMAT_CSV = 1 } drift_top_format;

/* Writes the table of m under q (aggregated, normalised, filtered, sorted
 * rows, one per layer), every layer's raw per-step history as recorded in
 * the trace, and the per-step scalars, to out.
 *
 * JSON: {"trace", "run_id", "side", "family", "guidance_scale", "plan":{...},
 *   "steps_committed", "steps":[kept steps], "reference":null|{...},
 *   "query":{"agg", "step", "cfg_normalise", "sort", "descending", "filter"},
 *   "first_divergent":name|null,
 *   "layers":[{"name", "order", "value":{mean_abs_diff, max_abs_diff,
 *     rel_max, cosine}, "ref":{...}|null, "class":{...}, "row_class",
 *     "flags":[...], "max_ulp_diff", "n_values",
 *     "history":[{"step", mean_abs_diff, max_abs_diff, rel_max, cosine,
 *       "max_ulp_diff", "flags"}]}],
 *   "step_metrics":[{"step", log_prob_mean_abs_diff, ratio_abs_minus_1,
 *     approx_kl}],
 *   "census":null|{...} (the intercept census, drift_census_json)}
 * Numbers print with 17 significant digits (exact round trip); NaN is null.
 *
 * CSV: one table, header
 *   kind,layer,order,step,mean_abs_diff,max_abs_diff,rel_max,cosine,
 *   max_ulp_diff,flags,class,log_prob_mean_abs_diff,ratio_abs_minus_1,approx_kl
 * kind "layer": a table row (step = the step shown in step mode, else empty;
 * class = the row's class); kind "history": one recorded (layer, step) cell,
 * raw; kind "step": the per-step scalars. Empty field = none/NaN; %.17g. */
int drift_top_batch_write(const drift_top_model *m, const drift_top_query *q, drift_top_format fmt, FILE *out,
                          drift_err *err);

#endif
