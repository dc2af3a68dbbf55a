/* The data model of `drift top` (DESIGN.md s10): reading a trace through
 * formats/trace.h, aggregating per-layer comparison metrics over steps,
 * sorting, filtering, CFG normalisation and threshold classification. No
 * curses here: the view (tui/view.c) and batch output (tui/batch.c) only
 * consume what this module computes, and tests drive it without a terminal.
 *
 * Two levels:
 *
 *  - drift_top_data: per-layer x per-step cells built from plain rows
 *    (drift_trace_metric / drift_trace_step_metrics as the trace reader
 *    returns them). Knows nothing about files; unit-tested on arrays.
 *  - drift_top_model: a trace (and optionally a known-good reference trace)
 *    opened through the reader, loaded into drift_top_data, refreshed
 *    incrementally while the file is written (SWMR follow).
 *
 * Semantics (documented in `drift top --help` too):
 *
 *  - Layers are the names of the /metrics site-name table in table order,
 *    which is the order in which the producer first computed them: execution
 *    order.
 *  - Steps are the committed steps of the trace (inside --steps A:B, a
 *    half-open range like a Python slice), in commit order.
 *  - One cell per (layer, step) from the rows of the chosen variant (0 by
 *    default): the row with denoise_index = -1 (aggregated by the producer)
 *    wins; without one, rows of individual denoising steps combine as the
 *    trace's own aggregation would: mean |diff| weighted by numel, max and
 *    rel max by MAX, cosine by MIN (the worst), ULPs by MAX, counts summed.
 *    When a step holds several rows for the same key, the last one appended
 *    wins.
 *  - Per-step scalars likewise: the denoise_index = -1 row of the variant
 *    wins, otherwise the n_pairs-weighted mean of the rows.
 *  - Aggregation over steps: "step" = the value at one step (the latest by
 *    default), "mean" = arithmetic mean over the steps that have a value
 *    (summed in order, fp64), "max" = maximum; for the cosine column "max"
 *    takes the minimum (the worst step), since a larger cosine is better.
 *  - CFG normalisation divides the absolute-difference columns (mean |diff|,
 *    max |diff|) by the trace's guidance scale s; rel max and cosine are
 *    scale-free and stay as they are (DESIGN.md s7).
 *  - Classification: without a reference, absolute thresholds on the shown
 *    value (mean |diff| 1e-3 / 1e-2, the bf16 chaos floor of DESIGN.md s7b
 *    being ~8e-4; max |diff| 2e-2 / 1e-1; rel max 1e-2 / 1e-1; 1 - cosine
 *    1e-4 / 1e-2). With a reference run, the ratio of the shown value to the
 *    reference's value for the same layer name (the reference summarised
 *    over all its steps: mean for the "step" and "mean" modes, max for
 *    "max"; 1 - cosine for the cosine column): <= 2x ok, <= 10x warn, more
 *    is bad. A value of exactly 0, or a bitwise-equal row, is "equal". A
 *    layer whose candidate has NaN/inf where the reference has none is bad. */
#ifndef DRIFT_TUI_MODEL_H
#define DRIFT_TUI_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "formats/err.h"
#include "formats/trace.h"

/* ---- enums ----------------------------------------------------------- */

typedef enum drift_top_agg {
    DRIFT_TOP_AGG_STEP = 0,      /* value at one step */
    DRIFT_TOP_AGG_MEAN = 1,      /* mean over steps */
    DRIFT_TOP_AGG_MAX = 2,       /* max over steps (min for cosine) */
    DRIFT_TOP_AGG_COUNT = 3
} drift_top_agg;

/* "step", "mean", "max"; parse returns -1 if unknown. */
const char *drift_top_agg_name(drift_top_agg a);
int drift_top_agg_parse(const char *s);

/* The per-layer metrics shown as columns. */
typedef enum drift_top_metric {
    DRIFT_TOP_M_MEAN = 0,        /* mean |diff| */
    DRIFT_TOP_M_MAX = 1,         /* max |diff| */
    DRIFT_TOP_M_REL = 2,         /* rel max */
    DRIFT_TOP_M_COS = 3,         /* cosine similarity */
    DRIFT_TOP_M_COUNT = 4
} drift_top_metric;

/* Sort keys: execution order, name, or one metric column. */
typedef enum drift_top_sort {
    DRIFT_TOP_SORT_ORDER = 0,
    DRIFT_TOP_SORT_NAME = 1,
    DRIFT_TOP_SORT_MEAN = 2,
    DRIFT_TOP_SORT_MAX = 3,
    DRIFT_TOP_SORT_REL = 4,
    DRIFT_TOP_SORT_COS = 5,
    DRIFT_TOP_SORT_COUNT = 6
} drift_top_sort;

/* "order", "name", "mean", "max", "rel", "cos"; parse returns -1 if unknown. */
const char *drift_top_sort_name(drift_top_sort s);
int drift_top_sort_parse(const char *s);

/* Per-step scalar series. */
typedef enum drift_top_series {
    DRIFT_TOP_S_LOGPROB = 0,     /* log_prob_mean_abs_diff */
    DRIFT_TOP_S_RATIO = 1,       /* ratio_abs_minus_1 */
    DRIFT_TOP_S_KL = 2,          /* approx_kl */
    DRIFT_TOP_S_COUNT = 3
} drift_top_series;

typedef enum drift_top_class {
    DRIFT_TOP_CLASS_NONE = 0,    /* no value (or no reference value to compare with) */
    DRIFT_TOP_CLASS_EQUAL = 1,   /* exactly zero difference / bitwise equal */
    DRIFT_TOP_CLASS_OK = 2,
    DRIFT_TOP_CLASS_WARN = 3,
    DRIFT_TOP_CLASS_BAD = 4
} drift_top_class;

/* "-", "equal", "ok", "warn", "bad". */
const char *drift_top_class_name(drift_top_class c);

/* Flags of a cell / row: the trace's DRIFT_TRACE_METRIC_* bits plus: */
#define DRIFT_TOP_FLAG_NONFINITE 0x100u /* candidate has NaN/inf counts the reference side lacks */

/* ---- per-layer cells (drift_top_data) ---------------------------------- */

typedef struct drift_top_cell {
    int present;                 /* 0: no row for this (layer, step) */
    double v[DRIFT_TOP_M_COUNT]; /* raw values as in the trace (NaN where not computed) */
    int64_t numel;
    uint64_t max_ulp_diff;
    int64_t nan_count, inf_count, ref_nan_count, ref_inf_count;
    uint32_t flags;              /* DRIFT_TRACE_METRIC_* | DRIFT_TOP_FLAG_* */
} drift_top_cell;

typedef struct drift_top_data drift_top_data;

/* An empty data set keeping steps in [step_lo, step_hi) (INT64_MIN/INT64_MAX
 * for all) and rows of variant. *out owned by the caller: drift_top_data_free. */
int drift_top_data_create(drift_top_data **out, int64_t step_lo, int64_t step_hi, int32_t variant, drift_err *err);
/* NULL allowed. */
void drift_top_data_free(drift_top_data *d);

/* Adds a committed step (strictly greater than the previous one; steps
 * outside the range are skipped). time = commit time (epoch seconds). */
int drift_top_data_add_step(drift_top_data *d, int64_t step, double time, drift_err *err);
/* Appends entry i (= current layer count) of the metrics site-name table;
 * name copied. */
int drift_top_data_add_layer(drift_top_data *d, const char *name, drift_err *err);
/* Ingests metrics rows (borrowed): row->site must index a layer added
 * before (DRIFT_E_INPUT otherwise); rows of other variants or of steps
 * outside the range or not added are skipped. */
int drift_top_data_add_metrics(drift_top_data *d, const drift_trace_metric *rows, size_t n, drift_err *err);
int drift_top_data_add_step_metrics(drift_top_data *d, const drift_trace_step_metrics *rows, size_t n,
                                    drift_err *err);

size_t drift_top_data_n_layers(const drift_top_data *d);
size_t drift_top_data_n_steps(const drift_top_data *d);
/* Owned by d. */
const char *drift_top_data_layer_name(const drift_top_data *d, size_t layer);
/* Layer index by name, -1 if absent. */
long drift_top_data_find_layer(const drift_top_data *d, const char *name);
int64_t drift_top_data_step(const drift_top_data *d, size_t col);
double drift_top_data_step_time(const drift_top_data *d, size_t col);
/* Column of step, -1 if not a kept step. */
long drift_top_data_find_step(const drift_top_data *d, int64_t step);
/* The cell of (layer, col); never NULL for valid indices (present may be 0). */
const drift_top_cell *drift_top_data_cell(const drift_top_data *d, size_t layer, size_t col);
/* Per-step scalar of col; NaN when the step has none. */
double drift_top_data_series(const drift_top_data *d, drift_top_series s, size_t col);
/* Longest layer name in bytes. */
size_t drift_top_data_max_name(const drift_top_data *d);
/* Incremented by every change; lets callers cache. */
uint64_t drift_top_data_generation(const drift_top_data *d);

/* Aggregate of one metric of layer over all kept steps (agg MEAN or MAX;
 * STEP gives the latest step's value). NaN when no step has a value. */
double drift_top_data_aggregate(const drift_top_data *d, size_t layer, drift_top_metric m, drift_top_agg agg);

/* ---- queries: the table the user sees ---------------------------------- */

typedef struct drift_top_thresholds {
    double warn[DRIFT_TOP_M_COUNT];  /* absolute; for COS on 1 - cosine */
    double bad[DRIFT_TOP_M_COUNT];
    double ratio_warn, ratio_bad;    /* with a reference */
} drift_top_thresholds;

/* The defaults documented above. */
void drift_top_thresholds_default(drift_top_thresholds *t);

typedef struct drift_top_query {
    drift_top_agg agg;
    int64_t step;                /* AGG_STEP: the step shown; INT64_MAX = the latest */
    int cfg_normalise;           /* divide mean/max |diff| by the guidance scale */
    double guidance_scale;       /* of the trace (<= 0 or NaN: treated as 1) */
    double ref_guidance_scale;   /* of the reference */
    drift_top_sort sort;
    int descending;
    const char *filter;          /* glob (drift_fnmatch) if it has * ? [, else a substring; NULL/"" = all */
    int collapse_blocks;         /* one row per block (blocks.N.*): its first divergent layer, else its
                                    largest mean |diff|; row.n_group says how many it stands for */
    drift_top_thresholds th;
} drift_top_query;

/* Defaults: agg step at the latest step, raw values, execution order,
 * no filter, default thresholds, guidance 1. */
void drift_top_query_default(drift_top_query *q);

typedef struct drift_top_row {
    size_t layer;                /* index in execution order */
    const char *name;            /* owned by the data set */
    double v[DRIFT_TOP_M_COUNT]; /* shown values (aggregated, normalised); NaN = none */
    double ref[DRIFT_TOP_M_COUNT]; /* reference values (normalised likewise); NaN = none */
    drift_top_class cls[DRIFT_TOP_M_COUNT];
    drift_top_class row_cls;     /* the worst of cls */
    uint32_t flags;              /* at the step (AGG_STEP), OR over steps otherwise */
    int64_t max_ulp_diff;        /* at the step / max over steps; -1 if unknown */
    size_t n_values;             /* steps that have a value for this layer */
    size_t n_group;              /* collapse_blocks: rows of its block (1 otherwise) */
} drift_top_row;

/* Length of the block prefix of a layer name ("blocks.12" of
 * "blocks.12.attn1:out"), 0 when it is not inside a numbered block. */
size_t drift_top_block_prefix(const char *name);

typedef struct drift_top_table {
    drift_top_row *rows;         /* owned; filtered and sorted */
    size_t n;
    size_t n_total;              /* layers before filtering */
    int64_t step;                /* AGG_STEP: the step shown (-1 if none) */
    long first_divergent;        /* at the step shown (the latest in mean/max modes), over all layers
                                    (filtered or not): the first layer flagged FIRST_DIVERGENT, else the
                                    first in execution order with max |diff| > 0; -1 if none */
} drift_top_table;

/* Builds the table of d (and of the reference ref, NULL allowed) under q.
 * out must be zeroed or freed before; free with drift_top_table_free. */
int drift_top_table_build(const drift_top_data *d, const drift_top_data *ref, const drift_top_query *q,
                          drift_top_table *out, drift_err *err);
/* NULL allowed; out is left zeroed. */
void drift_top_table_free(drift_top_table *t);
/* Row index of layer in t, -1 if filtered out. */
long drift_top_table_find(const drift_top_table *t, size_t layer);

/* Natural order of layer names: digit runs compare as numbers (blocks.2 <
 * blocks.10), the rest bytewise; <0, 0, >0 like strcmp. */
int drift_top_natural_cmp(const char *a, const char *b);
/* 1 if name passes filter (NULL/"" passes everything). */
int drift_top_filter_match(const char *filter, const char *name);
/* Class of a shown value v of metric m against the reference value ref (NaN:
 * no reference, absolute thresholds). */
drift_top_class drift_top_classify(drift_top_metric m, double v, double ref, const drift_top_thresholds *th);

/* ---- presentation helpers (pure, no curses) ---------------------------- */

/* "%.3e" for differences ("1.234e-03"), "0" for an exact zero, "-" for NaN;
 * "%.8f" for cosines. Fits DRIFT_TOP_VALUE_W / DRIFT_TOP_COS_W. Returns buf. */
const char *drift_top_fmt_value(double v, char *buf, size_t bufsz);
const char *drift_top_fmt_cos(double v, char *buf, size_t bufsz);

/* Sparkline levels for the last n values of v (of len values): level 0..7
 * scaled linearly from 0 to the largest finite value shown (all 0 when that
 * is 0), -1 for NaN/missing. levels holds n entries (n <= len). */
void drift_top_spark_levels(const double *v, size_t len, size_t n, int *levels);
/* Sparkline levels on one log10 scale shared by every row: 0 for an exact
 * 0, 1..7 from lo (the smallest positive value shown anywhere) to hi (the
 * largest), 7 for inf or when hi <= lo, -1 for NaN. */
void drift_top_spark_levels_log(const double *v, size_t n, double lo, double hi, int *levels);
/* Bar heights in eighths of a cell for a chart of `height` rows: value v in
 * [0, vmax] -> 0..8*height (rounded to nearest; at least 1 for v > 0);
 * -1 for NaN. */
int drift_top_bar_eighths(double v, double vmax, int height);

/* ---- the model: a trace (and a reference) ------------------------------ */

/* A producer of the cells from outside tui (drift top --against: cli wires
 * replay's two-trace comparison engine in, so that tui depends on formats
 * only). */
typedef struct drift_top_source {
    void *ctx;
    /* The candidate trace's reader (borrowed from ctx, valid until ctx is
     * gone): the header, steps and liveness come from it. */
    drift_trace_reader *(*reader)(void *ctx);
    /* Ingests into d everything new since the last call (layers, steps,
     * metrics rows, step metrics); refresh = 1 in follow mode (re-read the
     * files first); *n_new = steps added. */
    int (*poll)(void *ctx, drift_top_data *d, int refresh, int64_t *n_new, drift_err *err);
    const char *against;         /* the other trace's path, for the header */
    /* The other trace's reader (borrowed like reader's; NULL allowed): the
     * header shows its writer's state too. */
    drift_trace_reader *(*against_reader)(void *ctx);
} drift_top_source;

typedef struct drift_top_open_opts {
    const char *path;
    const char *ref_path;        /* NULL: no reference */
    const drift_top_source *source; /* NULL: cells from the trace's /metrics */
    int follow;                  /* open for SWMR following */
    int64_t step_lo, step_hi;    /* kept steps [lo, hi) */
    int32_t variant;
} drift_top_open_opts;

/* Summary of the root attributes and the plan, for the header. */
typedef struct drift_top_header {
    const char *path;            /* owned by the model */
    const char *run_id, *side, *family, *producer, *created; /* owned; never NULL */
    int32_t rank, world_size;
    double guidance_scale;
    int plan_ok;                 /* the plan JSON parsed */
    char plan_name[128];
    char fwd[8], rollout[8], reduce[8], master[8]; /* dtype names, "?" if unknown */
    int n_patterns;
    char patterns[320];          /* "glob=dtype, ..." (cut with "..." when long) */
    int warn_fwd_rollout;        /* forward dtype != rollout precision */
    int warn_reduce_bf16;        /* reduce dtype bf16 */
    char plan_error[160];        /* why the plan did not parse */
    int64_t steps_committed;     /* in the file (all, not only the kept range) */
    int64_t first_step, last_step; /* -1 if none */
    double last_commit_time;     /* epoch seconds, 0 if none */
    int unclean;                 /* file still open by a writer (or killed) */
    int follow;
    int has_ref;
    const char *ref_path, *ref_run_id; /* owned; "" without a reference */
    int ref_has_metrics;         /* the reference holds /metrics rows (else --ref colours nothing) */
    const char *against;         /* owned; "" unless the cells come from a live comparison */
    const char *writer;          /* owned: the writer's state: "recording" (not closed, its writer holds
                                    the trace's lock), "finished", "failed: REASON" (its /status) or
                                    "stopped without closing" (not closed, the lock free: killed); a
                                    follower re-reads /status and the lock at every refresh */
    const char *against_writer;  /* owned; the --against file's writer state, as writer; "" without */
    double against_last_commit_time; /* epoch seconds of its last commit, 0 if none */
    double steps_per_s;          /* over the last commits (up to 10); 0 if unknown */
    /* the other side's plan (--against B, or --ref): the same fields; has_plan_b 0 without one */
    int has_plan_b, plan_b_ok;
    char plan_b_name[128], fwd_b[8], rollout_b[8], reduce_b[8], master_b[8];
    int n_patterns_b;
    char patterns_b[320], plan_b_error[160];
    const char *plan_b_path;     /* owned by the model: B's file */
} drift_top_header;

typedef enum drift_top_liveness {
    DRIFT_TOP_CLOSED = 0,        /* the writer finished (with --against: both writers) */
    DRIFT_TOP_LIVE = 1,          /* being written (followed), last commit recent */
    DRIFT_TOP_IDLE = 2,          /* being written, no commit for a while, or not followed */
    DRIFT_TOP_STOPPED = 3        /* no writer at work, and one failed or stopped without closing */
} drift_top_liveness;

typedef struct drift_top_model drift_top_model;

/* Opens o->path (and o->ref_path) and loads every committed step. *out owned
 * by the caller: drift_top_model_close. Errors name the file. */
int drift_top_model_open(drift_top_model **out, const drift_top_open_opts *o, drift_err *err);
/* NULL allowed. */
void drift_top_model_close(drift_top_model *m);
/* Follow mode: picks up steps committed since the last load (metrics rows of
 * new steps only). *new_steps (NULL allowed) gets how many arrived. */
int drift_top_model_refresh(drift_top_model *m, int64_t *new_steps, drift_err *err);

const drift_top_header *drift_top_model_header(const drift_top_model *m);
const drift_top_data *drift_top_model_data(const drift_top_model *m);
/* NULL without a reference. */
const drift_top_data *drift_top_model_ref(const drift_top_model *m);
/* LIVE if the file is being written and the last commit is at most
 * idle_after seconds before now; STOPPED / CLOSED once no writer works;
 * *age (NULL allowed) = now - last commit. */
drift_top_liveness drift_top_model_liveness(const drift_top_model *m, double now, double idle_after, double *age);
/* Fills q's guidance scales from the traces. */
void drift_top_model_query_init(const drift_top_model *m, drift_top_query *q);
/* The intercept census of the trace (formats/census.h), read once at open;
 * NULL when the trace has none or it is unreadable. Owned by m. */
struct drift_census;
const struct drift_census *drift_top_model_census(const drift_top_model *m);

/* Parses "A:B" (both included), "A:", ":B", "A" (= A:A) into the half-open
 * [lo, hi) (lo = A, hi = B + 1; unbounded ends INT64_MIN / INT64_MAX). */
int drift_top_parse_steps(const char *s, int64_t *lo, int64_t *hi, drift_err *err);

#endif
