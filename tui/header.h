/* The run line of `drift top`'s header (pure: no curses, no I/O, no
 * allocation). It must show, at any width from 80 columns, the writer's
 * state (recording / finished / failed / stopped without closing; with
 * --against both writers') and the steps per second (and the rank when
 * W > 1). What gives way, in order: with --against the paths (each cut to
 * its tail behind an ellipsis, "…/run.rollout.h5"), then the step range,
 * the "drift top" title and the long state words, then the paths. What is
 * left of the width after the chosen form takes the run id, the side (one
 * trace), the CFG scale and the family (its head, behind an ellipsis).
 * Unit-tested in tests/tui/test_header.c. */
#ifndef DRIFT_TUI_HEADER_H
#define DRIFT_TUI_HEADER_H

#include <stddef.h>

#include "tui/model.h"

typedef enum drift_top_seg_kind {
    DRIFT_TOP_SEG_NORMAL = 0,
    DRIFT_TOP_SEG_BOLD = 1,      /* the title, the paths */
    DRIFT_TOP_SEG_BAD = 2        /* a writer that failed or stopped without closing */
} drift_top_seg_kind;

#define DRIFT_TOP_SEG_MAX 16

typedef struct drift_top_seg {
    char text[200];
    drift_top_seg_kind kind;
} drift_top_seg;

typedef struct drift_top_segs {
    int n;
    drift_top_seg s[DRIFT_TOP_SEG_MAX];
    int cells;                   /* display width of all of them */
} drift_top_segs;

/* Cells of the UTF-8 string s (every code point one cell). */
int drift_top_cells(const char *s);
/* Bytes of the first `cells` code points of s; *used (may be NULL) gets how many there were. */
size_t drift_top_prefix_bytes(const char *s, int cells, int *used);

/* path cut to at most cells cells into out: whole when it fits, else its
 * tail behind "…" (utf8) or "..." (ASCII). Returns the cells written; 0 (out
 * = "") when cells is too small for the ellipsis and one character. */
int drift_top_fit_path(const char *path, int cells, int utf8, char *out, size_t sz);

/* The run line of h (with --against: h->against set; else one trace) for
 * width cells, into out. Never more than width cells, except a width below the narrowest form
 * (about 50 cells): then the title and the short form, which the view clips. */
void drift_top_header_run_segs(const drift_top_header *h, int width, int utf8, drift_top_segs *out);

#endif
