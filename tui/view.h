/* The curses view of `drift top`: draws what tui/model computes into the
 * rectangles of tui/layout, and maps keys to model queries. The only file
 * of the dashboard that includes curses (ncursesw). */
#ifndef DRIFT_TUI_VIEW_H
#define DRIFT_TUI_VIEW_H

#include "formats/err.h"
#include "tui/model.h"

typedef struct drift_top_view_opts {
    int interval_ms;             /* refresh period in follow mode (>= 50) */
    int follow;                  /* poll the model for new steps */
    int mouse;                   /* enable mouse clicks / wheel */
    int ascii;                   /* force ASCII glyphs even in a UTF-8 locale */
    drift_top_query query;       /* initial aggregation, sort, filter, cfg (filter is copied) */
} drift_top_view_opts;

/* Runs the dashboard on the terminal until the user quits. The model (owned
 * by the caller) is refreshed in place. Returns DRIFT_OK, or an error (the
 * terminal could not be initialised) with the terminal restored. */
int drift_top_view_run(drift_top_model *m, const drift_top_view_opts *o, drift_err *err);

#endif
