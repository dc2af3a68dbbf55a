/* Layout of `drift top` (DESIGN.md s10): a pure function from the terminal
 * size and the display options to rectangles. No curses, no I/O, no
 * allocation: the view asks for a layout after every resize or mode change
 * and only draws into the rectangles it gets back. Unit-tested for every
 * size from 40x12 to 300x100 (tests/tui/test_layout.c).
 *
 * Screen, top to bottom (normal mode):
 *
 *   header   1..3 lines: run, side, family, plan + warnings, steps, status
 *   table    column-header line + one line per layer
 *   chart    title line + two per-step charts (the PPO signal: log_prob |diff|
 *            with |ratio - 1|; the selected layer's mean |diff|); side by
 *            side when wide, stacked otherwise; hidden when short
 *   footer   1 line: key hints, or the filter prompt
 *
 * In drill-down mode `drill` replaces table + chart (title line, the layer's
 * history chart, then its per-step table). `help` is a centred box drawn
 * over everything. Rectangles that are not shown have w = h = 0. */
#ifndef DRIFT_TUI_LAYOUT_H
#define DRIFT_TUI_LAYOUT_H

/* Below this the view draws only a "terminal too small" line. */
#define DRIFT_TOP_MIN_COLS 20
#define DRIFT_TOP_MIN_ROWS 6

/* Lines the help overlay wants (its text, without the border). */
#define DRIFT_TOP_HELP_LINES 26
#define DRIFT_TOP_HELP_WIDTH 66

typedef struct drift_top_rect {
    int x, y, w, h;
} drift_top_rect;

/* ---- columns --------------------------------------------------------- */

/* One column a table may show. min_w..max_w is the width range; columns are
 * admitted by ascending priority (0 first) while their minimum widths (plus
 * one separating space each) fit; spare width then grows admitted columns in
 * priority order up to max_w. A column with priority < 0 is never shown. */
typedef struct drift_top_colspec {
    int min_w, max_w;
    int priority;
} drift_top_colspec;

#define DRIFT_TOP_MAX_COLS 16

typedef struct drift_top_colfit {
    int n;                           /* columns in the spec */
    int shown[DRIFT_TOP_MAX_COLS];   /* 1 if admitted */
    int x[DRIFT_TOP_MAX_COLS];       /* offset from the table's left edge */
    int w[DRIFT_TOP_MAX_COLS];       /* width (0 when not shown) */
    int used;                        /* rightmost column end (<= width) */
} drift_top_colfit;

/* Fits n (<= DRIFT_TOP_MAX_COLS) columns into width; shown columns keep
 * the spec's order left to right, one space apart. Returns the number of
 * columns shown. */
int drift_top_layout_fit_columns(int width, const drift_top_colspec *spec, int n, drift_top_colfit *out);

/* The layer table's columns, in screen order. */
enum drift_top_tcol {
    DRIFT_TOP_TCOL_MARK = 0,  /* 1: first-divergent / non-finite marker */
    DRIFT_TOP_TCOL_NAME,      /* site name (flexible) */
    DRIFT_TOP_TCOL_MEAN,      /* mean |diff|   "%.3e" */
    DRIFT_TOP_TCOL_MAX,       /* max |diff|    "%.3e" */
    DRIFT_TOP_TCOL_REL,       /* rel max       "%.3e" */
    DRIFT_TOP_TCOL_COS,       /* cosine        "%.8f" */
    DRIFT_TOP_TCOL_SPARK,     /* history of mean |diff| over steps (flexible) */
    DRIFT_TOP_TCOL_REF,       /* with --ref: the reference's mean |diff|  "%.3e" */
    DRIFT_TOP_TCOL_RATIO,     /* with --ref: mean |diff| / the reference's  "123.4x" */
    DRIFT_TOP_TCOL_COUNT
};

/* The drill-down table's columns (one line per step of the chosen layer). */
enum drift_top_dcol {
    DRIFT_TOP_DCOL_STEP = 0,
    DRIFT_TOP_DCOL_MEAN,
    DRIFT_TOP_DCOL_MAX,
    DRIFT_TOP_DCOL_REL,
    DRIFT_TOP_DCOL_COS,
    DRIFT_TOP_DCOL_ULP,       /* max ULP difference */
    DRIFT_TOP_DCOL_FLAGS,     /* "first" / "equal" / "nonfinite" */
    DRIFT_TOP_DCOL_COUNT
};

/* Width of a formatted value column ("1.234e-03" is 9; "0.99999997" is 10). */
#define DRIFT_TOP_VALUE_W 9
#define DRIFT_TOP_COS_W 10

/* ---- screen ---------------------------------------------------------- */

typedef struct drift_top_layout_opts {
    int help;          /* help overlay shown */
    int drill;         /* drill-down replaces table and chart */
    int hide_chart;    /* the user switched the step chart off */
    int show_chart;    /* the user switched it on where the size leaves it out (below 30 rows and 90 columns):
                          it takes half the body, stacked */
    int name_w;        /* longest layer name (bytes, display width); 0 = unknown */
    int has_ref;       /* --ref: the reference value and ratio columns */
    int two_plans;     /* the other side's plan known: a header line more from 20 rows */
} drift_top_layout_opts;

typedef struct drift_top_layout {
    int cols, rows;
    int too_small;               /* only a message fits: everything else is empty */
    drift_top_rect header;
    drift_top_rect table;        /* first line = column headers */
    drift_top_colfit tcols;      /* columns of table (x relative to table.x) */
    drift_top_rect chart;        /* first line = title */
    drift_top_rect chart_a;      /* log_prob_mean_abs_diff bars, ratio_abs_minus_1 markers: label line + bars */
    drift_top_rect chart_b;      /* the selected layer's mean |diff|: label line + bars */
    drift_top_rect drill;        /* whole drill-down area */
    drift_top_rect drill_title;  /* 1 line */
    drift_top_rect drill_chart;  /* label line + bars; may be empty when short */
    drift_top_rect drill_table;  /* first line = column headers */
    drift_top_colfit dcols;      /* columns of drill_table */
    drift_top_rect footer;       /* 1 line */
    drift_top_rect help;         /* overlay box incl. its border */
} drift_top_layout;

/* Computes the layout of a cols x rows terminal. Never fails: sizes below
 * the minimum (or negative) give too_small = 1 and empty rectangles. */
void drift_top_layout_compute(int cols, int rows, const drift_top_layout_opts *opts, drift_top_layout *out);

/* Rows of the table (or drill table) available for data lines. */
int drift_top_layout_table_rows(const drift_top_rect *table);

/* 1 if r lies inside a cols x rows screen (an empty rect always does). */
int drift_top_rect_inside(const drift_top_rect *r, int cols, int rows);
/* 1 if a and b share a cell (empty rects share nothing). */
int drift_top_rect_overlap(const drift_top_rect *a, const drift_top_rect *b);

#endif
