/* The curses view of `drift top` (see view.h). Draws only: every number
 * comes from tui/model, every rectangle from tui/layout. Frames are built
 * with erase() + drawing + wnoutrefresh() + doupdate(), so curses sends only
 * the cells that changed (no flicker); input waits with timeout() for the
 * refresh interval; KEY_RESIZE recomputes the layout. */
#include "tui/view.h"
#include "formats/alloc.h"

#include <curses.h>
#include <langinfo.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/census.h" /* intercept census */
#include "tui/header.h"
#include "tui/layout.h"

enum { C_OK = 1, C_WARN, C_BAD, C_EQUAL, C_TITLE, C_BAR_A, C_BAR_B, C_DIM };

#define KEY_ESC 27
#define CTRL_L 12

typedef struct vs {
    drift_top_model *m;
    drift_top_query q;
    char filter[256];
    drift_top_table t;
    int dirty;
    int to_top;                  /* the order changed: select the first row */
    uint64_t gen;
    size_t sel_layer;
    int have_sel;
    long sel_row, top;
    int drill;
    size_t drill_layer;
    long dsel, dtop;
    int help, help_top;          /* help 2: the census overlay (key C) */
    int prompt;
    char pbuf[256];
    size_t plen;
    char saved_filter[256];
    int hide_chart;
    int show_chart;              /* p where the size left the chart out */
    int heat;                    /* the heatmap (key H) replaces table and chart */
    int heat_metric;             /* drift_top_metric shown in the heatmap */
    int jumped;                  /* the first divergent layer was selected once */
    int context;                 /* next draw: scroll so the selection has rows below it (the layers after
                                    the first divergence tell whether it grows or heals) */
    int utf8, color, mouse;
    int follow, interval_ms;
    char msg[256];
    int msg_bad;
    double msg_until;
    drift_top_layout L;
} vs;

/* ======================================================================= */
/* small drawing helpers                                                    */
/* ======================================================================= */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}


/* Writes s at (y, x), clipped to w cells. Returns the cells written. */
static int put(int y, int x, int w, attr_t a, const char *s) {
    if (w <= 0 || !s) return 0;
    int used = 0;
    size_t n = drift_top_prefix_bytes(s, w, &used);
    attrset(a);
    mvaddnstr(y, x, s, (int)n);
    attrset(A_NORMAL);
    return used;
}

/* A name cut to w cells in the middle ("blocks.7.a…2:out"): its start (the
 * block) and its end (the module and the output) both tell. */
static void put_name(const vs *v, int y, int x, int w, attr_t a, const char *s) {
    if (w <= 0 || !s) return;
    int n = drift_top_cells(s);
    if (n <= w || w < 2) {
        put(y, x, w, a, s);
        return;
    }
    int tail = (w - 1) / 2, head = w - 1 - tail;
    int used = put(y, x, head, a, s);
    put(y, x + used, 1, a, v->utf8 ? "\xe2\x80\xa6" : "~");
    size_t len = strlen(s), k = len;
    int cells = 0; /* the last `tail` cells, at a character's start */
    while (k > 0) {
        size_t j = k - 1;
        while (j > 0 && ((unsigned char)s[j] & 0xC0) == 0x80) j--;
        char one[8] = {0};
        memcpy(one, s + j, k - j < 7 ? k - j : 7);
        int c = drift_top_cells(one);
        if (cells + c > tail) break;
        cells += c;
        k = j;
    }
    put(y, x + used + 1, cells, a, s + k);
}

static void putr(int y, int x, int w, attr_t a, const char *s) {
    int c = drift_top_cells(s);
    if (c >= w)
        put(y, x, w, a, s);
    else
        put(y, x + (w - c), c, a, s);
}

static void fill(int y, int x, int w, attr_t a) {
    if (w <= 0) return;
    attrset(a);
    mvhline(y, x, ' ', w);
    attrset(A_NORMAL);
}

/* A cursor that writes segments left to right on one line, clipped at xend. */
typedef struct line {
    int y, x, xend;
} line;

static void seg(line *l, attr_t a, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void seg(line *l, attr_t a, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    l->x += put(l->y, l->x, l->xend - l->x, a, buf);
}

static attr_t cls_attr(const vs *v, drift_top_class c) {
    if (!v->color) {
        if (c == DRIFT_TOP_CLASS_BAD) return A_BOLD | A_UNDERLINE;
        if (c == DRIFT_TOP_CLASS_WARN) return A_BOLD;
        return A_NORMAL;
    }
    switch (c) {
    case DRIFT_TOP_CLASS_EQUAL: return COLOR_PAIR(C_EQUAL);
    case DRIFT_TOP_CLASS_OK: return COLOR_PAIR(C_OK);
    case DRIFT_TOP_CLASS_WARN: return COLOR_PAIR(C_WARN) | A_BOLD;
    case DRIFT_TOP_CLASS_BAD: return COLOR_PAIR(C_BAD) | A_BOLD;
    default: return A_NORMAL;
    }
}

static attr_t pair(const vs *v, int p) { return v->color ? COLOR_PAIR(p) : A_NORMAL; }

static const char *spark_glyph(const vs *v, int level) {
    static const char *const u[8] = {"\xe2\x96\x81", "\xe2\x96\x82", "\xe2\x96\x83", "\xe2\x96\x84",
                                     "\xe2\x96\x85", "\xe2\x96\x86", "\xe2\x96\x87", "\xe2\x96\x88"};
    static const char *const a[8] = {"_", ".", "-", ":", "=", "+", "*", "#"};
    if (level < 0) return " ";
    if (level > 7) level = 7;
    return v->utf8 ? u[level] : a[level];
}

/* The glyph of a bar cell filled k/8 (0..8) from the bottom. */
static const char *bar_glyph(const vs *v, int k) {
    if (k <= 0) return " ";
    if (k >= 8) return v->utf8 ? "\xe2\x96\x88" : "#";
    if (v->utf8) return spark_glyph(v, k - 1);
    return k <= 2 ? "." : (k <= 5 ? ":" : "|");
}

static void set_msg(vs *v, int bad, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_msg(vs *v, int bad, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->msg, sizeof v->msg, fmt, ap);
    va_end(ap);
    v->msg_bad = bad;
    v->msg_until = now_s() + 4.0;
}

/* ======================================================================= */
/* state                                                                    */
/* ======================================================================= */

static const drift_top_data *D(const vs *v) { return drift_top_model_data(v->m); }

static void rebuild(vs *v) {
    drift_err e;
    drift_err_clear(&e);
    drift_top_table_free(&v->t);
    v->q.filter = v->filter;
    /* a chosen step that is no longer kept falls back to the latest */
    if (v->q.step != INT64_MAX && drift_top_data_find_step(D(v), v->q.step) < 0) v->q.step = INT64_MAX;
    if (drift_top_table_build(D(v), drift_top_model_ref(v->m), &v->q, &v->t, &e) != DRIFT_OK)
        set_msg(v, 1, "%s", e.msg);
    v->gen = drift_top_data_generation(D(v));
    v->dirty = 0;
    if (v->t.n == 0) {
        v->sel_row = 0;
        return;
    }
    long r = v->have_sel && !v->to_top ? drift_top_table_find(&v->t, v->sel_layer) : -1;
    if (v->to_top) v->top = 0;
    v->to_top = 0;
    /* keep the selected layer; if it was filtered out, start from the top */
    v->sel_row = r >= 0 ? r : 0;
    if (v->sel_row < 0) v->sel_row = 0;
    /* the first divergent layer is the news: select it once it is known, so
     * that it is on screen whatever the terminal's height */
    if (!v->jumped && v->t.first_divergent >= 0) {
        long fr = drift_top_table_find(&v->t, (size_t)v->t.first_divergent);
        if (fr >= 0) v->sel_row = fr;
        v->jumped = 1;
        v->context = 1;
    }
    v->sel_layer = v->t.rows[v->sel_row].layer;
    v->have_sel = 1;
}

static void select_row(vs *v, long r) {
    if (v->t.n == 0) return;
    if (r < 0) r = 0;
    if (r >= (long)v->t.n) r = (long)v->t.n - 1;
    v->sel_row = r;
    v->sel_layer = v->t.rows[r].layer;
    v->have_sel = 1;
}

static void clamp_scroll(long *top, long sel, long n, long visible) {
    if (visible < 1) visible = 1;
    if (sel < *top) *top = sel;
    if (sel >= *top + visible) *top = sel - visible + 1;
    if (*top > n - visible) *top = n - visible;
    if (*top < 0) *top = 0;
}

/* Column of the step shown (the latest unless a step was chosen); -1 if none. */
static long shown_col(const vs *v) {
    size_t n = drift_top_data_n_steps(D(v));
    if (n == 0) return -1;
    if (v->q.step == INT64_MAX) return (long)n - 1;
    long c = drift_top_data_find_step(D(v), v->q.step);
    return c >= 0 ? c : (long)n - 1;
}

static double norm_scale(const vs *v) {
    double s = v->q.guidance_scale;
    return (v->q.cfg_normalise && isfinite(s) && s > 0.0) ? s : 1.0;
}

/* ======================================================================= */
/* header                                                                   */
/* ======================================================================= */

static void draw_status(vs *v, int y, int *xend) {
    const drift_top_header *h = drift_top_model_header(v->m);
    double idle_after = v->interval_ms * 5e-3 > 10.0 ? v->interval_ms * 5e-3 : 10.0;
    double age = 0;
    drift_top_liveness lv = drift_top_model_liveness(v->m, now_s(), idle_after, &age);
    char buf[64];
    attr_t a;
    if (lv == DRIFT_TOP_LIVE) {
        snprintf(buf, sizeof buf, " LIVE ");
        a = pair(v, C_OK) | A_BOLD | A_REVERSE;
    } else if (lv == DRIFT_TOP_IDLE) {
        if (age >= 0 && age < 120)
            snprintf(buf, sizeof buf, " IDLE %.0fs ", age);
        else if (age >= 0 && age < 7200)
            snprintf(buf, sizeof buf, " IDLE %.0fm ", age / 60);
        else if (age >= 0)
            snprintf(buf, sizeof buf, " IDLE %.1fh ", age / 3600);
        else
            snprintf(buf, sizeof buf, " IDLE ");
        a = pair(v, C_WARN) | A_BOLD | A_REVERSE;
    } else if (lv == DRIFT_TOP_STOPPED) { /* no writer at work, and one did not finish */
        int failed = strncmp(h->writer, "failed", 6) == 0 ||
                     (h->against_writer && strncmp(h->against_writer, "failed", 6) == 0);
        snprintf(buf, sizeof buf, failed ? " FAILED " : " STOPPED ");
        a = pair(v, C_BAD) | A_BOLD | A_REVERSE;
    } else {
        snprintf(buf, sizeof buf, " CLOSED ");
        a = A_REVERSE;
    }
    int w = drift_top_cells(buf);
    if (w >= v->L.header.w) return;
    put(y, v->L.header.w - w, w, a, buf);
    *xend = v->L.header.w - w - 1;
}

static void draw_run_line(vs *v, int y, int compact) {
    const drift_top_header *h = drift_top_model_header(v->m);
    int xend = v->L.header.w;
    draw_status(v, y, &xend);
    line l = {y, 0, xend};
    /* the writers' state and the rate at any width: paths, range and title give way (tui/header.c) */
    drift_top_segs sg;
    drift_top_header_run_segs(h, xend, v->utf8, &sg);
    for (int i = 0; i < sg.n; i++)
        seg(&l, sg.s[i].kind == DRIFT_TOP_SEG_BOLD  ? A_BOLD
                : sg.s[i].kind == DRIFT_TOP_SEG_BAD ? pair(v, C_BAD) | A_BOLD
                                                    : A_NORMAL,
            "%s", sg.s[i].text);
    if (compact) {
        if (!h->plan_ok) seg(&l, pair(v, C_BAD) | A_BOLD, "  !plan");
        if (h->warn_fwd_rollout) seg(&l, pair(v, C_BAD) | A_BOLD, "  !fwd %s!=rollout %s", h->fwd, h->rollout);
        if (h->warn_reduce_bf16) seg(&l, pair(v, C_WARN) | A_BOLD, "  !reduce bf16");
    }
}

/* One plan: its dtypes ("sglang" is the plan's sglang_dit_precision, the
 * rollout precision it states) and its patterns, which differ most often. */
static void plan_segs(vs *v, line *l, const char *who, int ok, const char *err, const char *name, const char *fwd,
                      const char *sgl, const char *reduce, const char *master, int n_pat, const char *pats) {
    if (!ok) {
        seg(l, pair(v, C_BAD) | A_BOLD, "%splan: %s", who, err);
        return;
    }
    seg(l, A_NORMAL, "%splan %s: fwd %s  sglang %s  reduce %s  master %s", who, name, fwd, sgl, reduce, master);
    if (!strcmp(fwd, sgl) || !*who) { /* A's warnings come from its own line's caller */
    } else {
        seg(l, pair(v, C_BAD) | A_BOLD, "  ! forward %s != sglang %s", fwd, sgl);
    }
    seg(l, A_NORMAL, "  %d pattern%s%s%s", n_pat, n_pat == 1 ? "" : "s", n_pat ? ": " : "", pats);
}

static void draw_plan_line(vs *v, int y) {
    const drift_top_header *h = drift_top_model_header(v->m);
    line l = {y, 0, v->L.header.w};
    if (!h->plan_ok) {
        plan_segs(v, &l, h->has_plan_b ? "A " : "", 0, h->plan_error, "", "", "", "", "", 0, "");
        return;
    }
    seg(&l, A_NORMAL, "%splan %s: fwd %s  sglang %s  reduce %s  master %s", h->has_plan_b ? "A " : "", h->plan_name,
        h->fwd, h->rollout, h->reduce, h->master);
    if (h->warn_fwd_rollout) seg(&l, pair(v, C_BAD) | A_BOLD, "  ! forward %s != sglang %s", h->fwd, h->rollout);
    if (h->warn_reduce_bf16) seg(&l, pair(v, C_WARN) | A_BOLD, "  ! reduce dtype bf16");
    seg(&l, A_NORMAL, "  %d pattern%s%s%s", h->n_patterns, h->n_patterns == 1 ? "" : "s", h->n_patterns ? ": " : "",
        h->patterns);
}

/* The other side's plan (--against B or --ref), under A's. */
static void draw_plan_b_line(vs *v, int y) {
    const drift_top_header *h = drift_top_model_header(v->m);
    line l = {y, 0, v->L.header.w};
    plan_segs(v, &l, "B ", h->plan_b_ok, h->plan_b_error, h->plan_b_name, h->fwd_b, h->rollout_b, h->reduce_b,
              h->master_b, h->n_patterns_b, h->patterns_b);
}

static void draw_view_line(vs *v, int y) {
    line l = {y, 0, v->L.header.w};
    const char *up = v->utf8 ? "\xe2\x96\xb2" : "^", *down = v->utf8 ? "\xe2\x96\xbc" : "v";
    if (v->q.agg == DRIFT_TOP_AGG_STEP) {
        if (v->t.step >= 0)
            seg(&l, A_BOLD, "step %lld%s", (long long)v->t.step, v->q.step == INT64_MAX ? " (latest)" : "");
        else
            seg(&l, A_BOLD, "step -");
    } else {
        seg(&l, A_BOLD, "%s over %zu steps", v->q.agg == DRIFT_TOP_AGG_MEAN ? "mean" : "max",
            drift_top_data_n_steps(D(v)));
    }
    if (v->q.cfg_normalise)
        seg(&l, pair(v, C_EQUAL) | A_BOLD, "  |diff|/s (s=%g)", norm_scale(v));
    else
        seg(&l, A_NORMAL, "  raw");
    seg(&l, A_NORMAL, "  sort %s%s", drift_top_sort_name(v->q.sort), v->q.descending ? down : up);
    if (v->filter[0])
        seg(&l, A_BOLD, "  filter \"%s\" %zu/%zu", v->filter, v->t.n, v->t.n_total);
    else
        seg(&l, A_NORMAL, "  %zu layers", v->t.n_total);
    if (v->t.first_divergent >= 0)
        seg(&l, pair(v, C_BAD), "  first divergent %s",
            drift_top_data_layer_name(D(v), (size_t)v->t.first_divergent));
    const drift_top_header *h = drift_top_model_header(v->m);
    if (h->has_ref) seg(&l, A_NORMAL, "  ref %s", h->ref_run_id[0] ? h->ref_run_id : h->ref_path);
}

static void draw_header(vs *v) {
    const drift_top_rect *r = &v->L.header;
    if (r->h >= 4) {
        draw_run_line(v, r->y, 0);
        draw_plan_line(v, r->y + 1);
        draw_plan_b_line(v, r->y + 2);
        draw_view_line(v, r->y + 3);
    } else if (r->h >= 3) {
        draw_run_line(v, r->y, 0);
        draw_plan_line(v, r->y + 1);
        draw_view_line(v, r->y + 2);
    } else if (r->h == 2) {
        draw_run_line(v, r->y, 1);
        draw_view_line(v, r->y + 1);
    } else if (r->h == 1) {
        draw_run_line(v, r->y, 1);
    }
}

/* ======================================================================= */
/* layer table                                                              */
/* ======================================================================= */

static void col_title(vs *v, int y, const drift_top_colfit *f, int c, int right, const char *title, int sort_key) {
    if (!f->shown[c]) return;
    char buf[64];
    const char *arrow = "";
    if (sort_key >= 0 && (int)v->q.sort == sort_key)
        arrow = v->q.descending ? (v->utf8 ? "\xe2\x96\xbc" : "v") : (v->utf8 ? "\xe2\x96\xb2" : "^");
    snprintf(buf, sizeof buf, "%s%s", title, arrow);
    attr_t a = A_REVERSE | A_BOLD;
    if (right)
        putr(y, v->L.table.x + f->x[c], f->w[c], a, buf);
    else
        put(y, v->L.table.x + f->x[c], f->w[c], a, buf);
}

static void draw_table(vs *v) {
    const drift_top_rect *R = &v->L.table;
    const drift_top_colfit *f = &v->L.tcols;
    if (R->h <= 0) return;
    int cfg = v->q.cfg_normalise;
    fill(R->y, R->x, R->w, A_REVERSE);
    col_title(v, R->y, f, DRIFT_TOP_TCOL_NAME, 0, "layer", DRIFT_TOP_SORT_NAME);
    if (v->q.sort == DRIFT_TOP_SORT_ORDER)
        col_title(v, R->y, f, DRIFT_TOP_TCOL_MARK, 0, "", DRIFT_TOP_SORT_ORDER);
    col_title(v, R->y, f, DRIFT_TOP_TCOL_MEAN, 1, cfg ? "mean/s" : "mean|d|", DRIFT_TOP_SORT_MEAN);
    col_title(v, R->y, f, DRIFT_TOP_TCOL_MAX, 1, cfg ? "max/s" : "max|d|", DRIFT_TOP_SORT_MAX);
    col_title(v, R->y, f, DRIFT_TOP_TCOL_REL, 1, "relmax", DRIFT_TOP_SORT_REL);
    col_title(v, R->y, f, DRIFT_TOP_TCOL_COS, 1, v->q.agg == DRIFT_TOP_AGG_MAX ? "cos(min)" : "cosine",
              DRIFT_TOP_SORT_COS);
    {
        /* the longest title that fits whole: at 80 columns the column holds 8 of 20 steps, and says so */
        size_t ns_all = drift_top_data_n_steps(D(v));
        int sw = f->w[DRIFT_TOP_TCOL_SPARK], part = f->shown[DRIFT_TOP_TCOL_SPARK] && ns_all > (size_t)sw;
        static const char *const part_t[] = {"mean|d| last %d steps, log", "last %d steps, log", "last %d, log", "last %d"};
        static const char *const all_t[] = {"mean|d| history, log", "history, log", "history"};
        char st[64] = "";
        for (int k = 0; k < (part ? 4 : 3); k++) {
            if (part) snprintf(st, sizeof st, part_t[k], sw);
            else snprintf(st, sizeof st, "%s", all_t[k]);
            if ((int)strlen(st) <= sw) break;
        }
        col_title(v, R->y, f, DRIFT_TOP_TCOL_SPARK, 0, st, -1);
    }
    col_title(v, R->y, f, DRIFT_TOP_TCOL_REF, 1, "ref mean", -1);
    col_title(v, R->y, f, DRIFT_TOP_TCOL_RATIO, 1, "x ref", -1);

    int visible = drift_top_layout_table_rows(R);
    if (v->context) { /* a quarter of the rows above it, the rest below */
        v->top = v->sel_row - visible / 4;
        v->context = 0;
    }
    clamp_scroll(&v->top, v->sel_row, (long)v->t.n, visible);
    if (v->t.n == 0) {
        const char *msg = drift_top_data_n_layers(D(v)) == 0 ? "no metrics yet" : "no layer matches the filter";
        put(R->y + 1, R->x + 2, R->w - 2, A_BOLD, msg);
        return;
    }
    const drift_top_data *d = D(v);
    size_t n_steps = drift_top_data_n_steps(d);
    long scol = shown_col(v);
    /* one log scale for the whole column: a bar reads the same on every row */
    double slo = INFINITY, shi = 0;
    if (f->shown[DRIFT_TOP_TCOL_SPARK] && n_steps > 0) {
        int w = f->w[DRIFT_TOP_TCOL_SPARK] > 256 ? 256 : f->w[DRIFT_TOP_TCOL_SPARK];
        size_t c0 = n_steps - (n_steps < (size_t)w ? n_steps : (size_t)w);
        for (size_t ri = 0; ri < v->t.n; ri++)
            for (size_t c = c0; c < n_steps; c++) {
                const drift_top_cell *cell = drift_top_data_cell(d, v->t.rows[ri].layer, c);
                double x = cell->present ? cell->v[DRIFT_TOP_M_MEAN] : NAN;
                if (isfinite(x) && x > 0) {
                    if (x < slo) slo = x;
                    if (x > shi) shi = x;
                }
            }
    }
    for (int i = 0; i < visible; i++) {
        long ri = v->top + i;
        if (ri >= (long)v->t.n) break;
        const drift_top_row *row = &v->t.rows[ri];
        int y = R->y + 1 + i;
        attr_t base = ri == v->sel_row ? A_REVERSE : A_NORMAL;
        if (base) fill(y, R->x, R->w, base);
        char buf[64];
        if (f->shown[DRIFT_TOP_TCOL_MARK]) {
            const char *mark = " ";
            attr_t ma = base;
            if (row->flags & DRIFT_TOP_FLAG_NONFINITE) {
                mark = "!";
                ma |= pair(v, C_BAD) | A_BOLD;
            } else if ((long)row->layer == v->t.first_divergent) {
                mark = v->utf8 ? "\xe2\x96\xb6" : ">";
                ma |= pair(v, C_BAD) | A_BOLD;
            }
            put(y, R->x + f->x[DRIFT_TOP_TCOL_MARK], 1, ma, mark);
        }
        if (row->n_group > 1) { /* a collapsed block: the row that stands for it, and how many */
            char nb[600];
            size_t pl = drift_top_block_prefix(row->name);
            snprintf(nb, sizeof nb, "%.*s [%zu] %s", (int)pl, row->name, row->n_group, row->name + pl + 1);
            put_name(v, y, R->x + f->x[DRIFT_TOP_TCOL_NAME], f->w[DRIFT_TOP_TCOL_NAME], base | cls_attr(v, row->row_cls), nb);
        } else {
            put_name(v, y, R->x + f->x[DRIFT_TOP_TCOL_NAME], f->w[DRIFT_TOP_TCOL_NAME], base | cls_attr(v, row->row_cls),
                     row->name);
        }
        static const int tc[DRIFT_TOP_M_COUNT] = {DRIFT_TOP_TCOL_MEAN, DRIFT_TOP_TCOL_MAX, DRIFT_TOP_TCOL_REL,
                                                  DRIFT_TOP_TCOL_COS};
        for (int m = 0; m < DRIFT_TOP_M_COUNT; m++) {
            int c = tc[m];
            if (!f->shown[c]) continue;
            if (m == DRIFT_TOP_M_COS)
                drift_top_fmt_cos(row->v[m], buf, sizeof buf);
            else
                drift_top_fmt_value(row->v[m], buf, sizeof buf);
            putr(y, R->x + f->x[c], f->w[c], base | cls_attr(v, row->cls[m]), buf);
        }
        if (f->shown[DRIFT_TOP_TCOL_REF]) {
            drift_top_fmt_value(row->ref[DRIFT_TOP_M_MEAN], buf, sizeof buf);
            putr(y, R->x + f->x[DRIFT_TOP_TCOL_REF], f->w[DRIFT_TOP_TCOL_REF], base, buf);
        }
        if (f->shown[DRIFT_TOP_TCOL_RATIO]) {
            double rv = row->v[DRIFT_TOP_M_MEAN], rr = row->ref[DRIFT_TOP_M_MEAN];
            if (isnan(rv) || isnan(rr)) snprintf(buf, sizeof buf, "-");
            else if (rr == 0) snprintf(buf, sizeof buf, rv == 0 ? "1x" : "inf");
            else snprintf(buf, sizeof buf, rv / rr >= 1000 ? "%.0fx" : "%.1fx", rv / rr);
            putr(y, R->x + f->x[DRIFT_TOP_TCOL_RATIO], f->w[DRIFT_TOP_TCOL_RATIO],
                 base | cls_attr(v, row->cls[DRIFT_TOP_M_MEAN]), buf);
        }
        if (f->shown[DRIFT_TOP_TCOL_SPARK] && n_steps > 0) {
            int w = f->w[DRIFT_TOP_TCOL_SPARK];
            double vals[256];
            int lv[256];
            if (w > 256) w = 256;
            size_t n = n_steps < (size_t)w ? n_steps : (size_t)w;
            size_t c0 = n_steps - n;
            for (size_t k = 0; k < n; k++) {
                const drift_top_cell *cell = drift_top_data_cell(d, row->layer, c0 + k);
                vals[k] = cell->present ? cell->v[DRIFT_TOP_M_MEAN] : NAN;
            }
            drift_top_spark_levels_log(vals, n, slo, shi, lv);
            int x = R->x + f->x[DRIFT_TOP_TCOL_SPARK];
            for (size_t k = 0; k < n; k++) {
                attr_t a = base | pair(v, C_BAR_A);
                if (v->q.agg == DRIFT_TOP_AGG_STEP && (long)(c0 + k) == scol && v->q.step != INT64_MAX)
                    a = base | pair(v, C_WARN) | A_BOLD;
                put(y, x + (int)k, 1, a, spark_glyph(v, lv[k]));
            }
        }
    }
}

/* ======================================================================= */
/* charts                                                                   */
/* ======================================================================= */

/* The x axis under a chart's bars: the first and the last shown step under
 * their columns, then "step" (the y axis is 0..max, stated in the label). */
static void draw_step_axis(const drift_top_rect *R, int y, const drift_top_data *d, size_t c0, size_t shown) {
    if (!d || shown == 0 || c0 + shown > drift_top_data_n_steps(d)) return;
    char lo[24], hi[24];
    int nlo = snprintf(lo, sizeof lo, "%lld", (long long)drift_top_data_step(d, c0));
    int nhi = snprintf(hi, sizeof hi, "%lld", (long long)drift_top_data_step(d, c0 + shown - 1));
    int xr = R->x + (int)shown - nhi; /* the last label ends under the last bar */
    if (xr < R->x) xr = R->x;
    if (shown > 1 && xr > R->x + nlo) put(y, R->x, nlo, A_NORMAL, lo);
    put(y, xr, nhi, A_NORMAL, hi);
    if (xr + nhi + 5 <= R->x + R->w) put(y, xr + nhi, 5, A_DIM, " step");
}

/* A bar chart of vals[0..n) (one column per value, the newest at the right
 * edge) in R: label line on top, bars below, and with 4 rows or more a step
 * axis as the last line (d gives the step numbers; NULL: none). vals2 (NULL:
 * none) is a second series on the same y scale, a marker in each column at
 * its height. hl = column to highlight (-1). now_val2 is vals2's value at
 * now_step, shown after now_val. */
static void draw_bars(vs *v, const drift_top_rect *R, const double *vals, const double *vals2, size_t n, long hl,
                      int color, const char *label, double now_val, double now_val2, int64_t now_step,
                      const drift_top_data *d) {
    if (R->h <= 0 || R->w <= 0) return;
    int axis = d && R->h >= 4;
    int H = R->h - 1 - axis;
    size_t W = (size_t)R->w;
    size_t shown = n < W ? n : W;
    size_t c0 = n - shown;
    double vmax = 0.0;
    for (size_t k = c0; k < n; k++) {
        if (isfinite(vals[k]) && vals[k] > vmax) vmax = vals[k];
        if (vals2 && isfinite(vals2[k]) && vals2[k] > vmax) vmax = vals2[k];
    }
    char a[32], b[32], c[32], now[96], yr[48];
    snprintf(now, sizeof now, "  now %s", drift_top_fmt_value(now_val, a, sizeof a));
    if (vals2) snprintf(now + strlen(now), sizeof now - strlen(now), " / %s", drift_top_fmt_value(now_val2, c, sizeof c));
    if (now_step >= 0) snprintf(now + strlen(now), sizeof now - strlen(now), " @%lld", (long long)now_step);
    snprintf(yr, sizeof yr, "  y 0..%s", drift_top_fmt_value(shown ? vmax : NAN, b, sizeof b));
    /* a part that does not fit whole is left out (a cut number would misread): the y range first */
    int room = R->w - drift_top_cells(label);
    int show_y = room >= (int)strlen(yr), show_now = room >= (int)(strlen(yr) + strlen(now)) || (!show_y && room >= (int)strlen(now));
    line l = {R->y, R->x, R->x + R->w};
    seg(&l, A_BOLD, "%s", label);
    if (show_now) seg(&l, A_NORMAL, "%s", now);
    if (show_y) seg(&l, A_NORMAL, "%s", yr);
    if (H <= 0) return;
    if (axis) draw_step_axis(R, R->y + R->h - 1, d, c0, shown);
    for (size_t k = 0; k < shown; k++) {
        double x = vals[c0 + k];
        int e = drift_top_bar_eighths(x, vmax, H);
        attr_t at = pair(v, color);
        if ((long)(c0 + k) == hl) at = pair(v, C_WARN) | A_BOLD;
        for (int r = 0; r < H; r++) {
            int k8 = e < 0 ? 0 : e - 8 * r;
            if (k8 > 8) k8 = 8;
            int y = R->y + R->h - 1 - axis - r;
            if (k8 > 0) put(y, R->x + (int)k, 1, at, bar_glyph(v, k8));
        }
        int e2 = vals2 ? drift_top_bar_eighths(vals2[c0 + k], vmax, H) : 0;
        if (e2 > 0) { /* the cell that holds the second value's height */
            int r2 = (e2 - 1) / 8;
            put(R->y + R->h - 1 - axis - r2, R->x + (int)k, 1, pair(v, C_BAR_B) | A_BOLD,
                v->utf8 ? "\xe2\x80\xa2" : "o");
        }
    }
}

/* The two charts carry different signals: left (or top) the PPO update
 * signal, log_prob |diff| as bars with |ratio - 1| as markers on the same
 * scale (for small differences the two nearly coincide, which is why they
 * share one chart); right (or below) the selected layer's mean |diff| per
 * step, which follows the selection (the first divergent layer at first). */
static void draw_chart(vs *v) {
    const drift_top_rect *R = &v->L.chart;
    if (R->h <= 0) return;
    const drift_top_data *d = D(v);
    size_t n = drift_top_data_n_steps(d);
    fill(R->y, R->x, R->w, A_REVERSE);
    line l = {R->y, R->x, R->x + R->w};
    if (n > 0)
        seg(&l, A_REVERSE | A_BOLD, " per step %lld..%lld: the PPO signal, and the selected layer ",
            (long long)drift_top_data_step(d, 0), (long long)drift_top_data_step(d, n - 1));
    else
        seg(&l, A_REVERSE | A_BOLD, " per step: no steps yet ");
    double *a = n ? drift_malloc(n * sizeof *a) : NULL;
    double *b = n ? drift_malloc(n * sizeof *b) : NULL;
    double *c = n ? drift_malloc(n * sizeof *c) : NULL;
    if (n && (!a || !b || !c)) {
        drift_free(a);
        drift_free(b);
        drift_free(c);
        return;
    }
    int have_layer = v->have_sel && v->sel_layer < drift_top_data_n_layers(d);
    double s = norm_scale(v);
    for (size_t k = 0; k < n; k++) {
        a[k] = drift_top_data_series(d, DRIFT_TOP_S_LOGPROB, k);
        b[k] = drift_top_data_series(d, DRIFT_TOP_S_RATIO, k);
        const drift_top_cell *cell = have_layer ? drift_top_data_cell(d, v->sel_layer, k) : NULL;
        c[k] = cell && cell->present ? cell->v[DRIFT_TOP_M_MEAN] / s : NAN;
    }
    long sc = shown_col(v);
    long hl = (v->q.agg == DRIFT_TOP_AGG_STEP && v->q.step != INT64_MAX) ? sc : -1;
    int64_t st = sc >= 0 ? drift_top_data_step(d, (size_t)sc) : -1;
    char la[96];
    snprintf(la, sizeof la, "log_prob |diff| %s, |ratio-1| %s", v->utf8 ? "\xe2\x96\x88" : "#",
             v->utf8 ? "\xe2\x80\xa2" : "o");
    draw_bars(v, &v->L.chart_a, a ? a : (double[1]){0}, b ? b : (double[1]){0}, n, hl, C_BAR_A, la,
              sc >= 0 ? a[sc] : NAN, sc >= 0 ? b[sc] : NAN, st, d);
    /* the layer's name cut (with an ellipsis) so that the y range still fits beside it */
    char lb[320], nm[256];
    const char *name = have_layer ? drift_top_data_layer_name(d, v->sel_layer) : "-";
    int name_room = v->L.chart_b.w - 8 - 17 - (v->q.cfg_normalise ? 2 : 0);
    if (name_room < 8) name_room = 8;
    if (drift_top_cells(name) > name_room) /* as in the table: the head, then an ellipsis */
        snprintf(nm, sizeof nm, "%.*s%s", (int)drift_top_prefix_bytes(name, name_room - 1, NULL), name, v->utf8 ? "\xe2\x80\xa6" : "~");
    else
        snprintf(nm, sizeof nm, "%.250s", name);
    snprintf(lb, sizeof lb, "mean|d|%s %s", v->q.cfg_normalise ? "/s" : "", nm);
    draw_bars(v, &v->L.chart_b, c ? c : (double[1]){0}, NULL, n, hl, C_BAR_A, lb, sc >= 0 ? c[sc] : NAN, NAN, st, d);
    drift_free(a);
    drift_free(b);
    drift_free(c);
}

/* ======================================================================= */
/* drill-down                                                               */
/* ======================================================================= */

static void draw_drill(vs *v) {
    const drift_top_data *d = D(v);
    const drift_top_data *ref = drift_top_model_ref(v->m);
    size_t li = v->drill_layer;
    if (li >= drift_top_data_n_layers(d)) {
        v->drill = 0;
        return;
    }
    const char *name = drift_top_data_layer_name(d, li);
    size_t n = drift_top_data_n_steps(d);
    double s = norm_scale(v);
    size_t n_values = 0;
    for (size_t k = 0; k < n; k++) n_values += drift_top_data_cell(d, li, k)->present ? 1u : 0u;

    const drift_top_rect *T = &v->L.drill_title;
    fill(T->y, T->x, T->w, A_REVERSE);
    line l = {T->y, T->x, T->x + T->w};
    seg(&l, A_REVERSE | A_BOLD, " layer %s ", name);
    seg(&l, A_REVERSE, " #%zu of %zu in execution order, %zu/%zu steps with values%s   Esc: back ", li + 1,
        drift_top_data_n_layers(d), n_values, n, v->q.cfg_normalise ? ", |diff|/s" : "");

    /* reference values for colours */
    double refv[DRIFT_TOP_M_COUNT];
    for (int m = 0; m < DRIFT_TOP_M_COUNT; m++) refv[m] = NAN;
    if (ref) {
        long rl = drift_top_data_find_layer(ref, name);
        if (rl >= 0) {
            double rs = v->q.cfg_normalise ? v->q.ref_guidance_scale : 1.0;
            if (!(isfinite(rs) && rs > 0)) rs = 1.0;
            for (int m = 0; m < DRIFT_TOP_M_COUNT; m++) {
                refv[m] = drift_top_data_aggregate(ref, (size_t)rl, (drift_top_metric)m, DRIFT_TOP_AGG_MEAN);
                if (m == DRIFT_TOP_M_MEAN || m == DRIFT_TOP_M_MAX) refv[m] /= rs;
            }
        }
    }

    if (v->L.drill_chart.h > 0) {
        double *vals = n ? drift_malloc(n * sizeof *vals) : NULL;
        if (!n || vals) {
            for (size_t k = 0; k < n; k++) {
                const drift_top_cell *c = drift_top_data_cell(d, li, k);
                vals[k] = c->present ? c->v[DRIFT_TOP_M_MEAN] / s : NAN;
            }
            long sel_col = v->dsel >= 0 && (size_t)v->dsel < n ? (long)(n - 1 - (size_t)v->dsel) : -1;
            draw_bars(v, &v->L.drill_chart, vals ? vals : (double[1]){0}, NULL, n, sel_col, C_BAR_A,
                      "mean |diff| per step", sel_col >= 0 ? vals[sel_col] : NAN, NAN,
                      sel_col >= 0 ? drift_top_data_step(d, (size_t)sel_col) : -1, d);
            free(vals);
        }
    }

    const drift_top_rect *R = &v->L.drill_table;
    const drift_top_colfit *f = &v->L.dcols;
    if (R->h <= 0) return;
    fill(R->y, R->x, R->w, A_REVERSE);
    static const char *const titles[DRIFT_TOP_DCOL_COUNT] = {"step", "mean|d|", "max|d|", "relmax",
                                                              "cosine", "max ulp", "flags"};
    for (int c = 0; c < DRIFT_TOP_DCOL_COUNT; c++) {
        if (!f->shown[c]) continue;
        const char *t = titles[c];
        if (v->q.cfg_normalise && c == DRIFT_TOP_DCOL_MEAN) t = "mean/s";
        if (v->q.cfg_normalise && c == DRIFT_TOP_DCOL_MAX) t = "max/s";
        if (c == DRIFT_TOP_DCOL_FLAGS)
            put(R->y, R->x + f->x[c], f->w[c], A_REVERSE | A_BOLD, t);
        else
            putr(R->y, R->x + f->x[c], f->w[c], A_REVERSE | A_BOLD, t);
    }
    int visible = drift_top_layout_table_rows(R);
    if (v->dsel >= (long)n) v->dsel = (long)n - 1;
    if (v->dsel < 0) v->dsel = 0;
    clamp_scroll(&v->dtop, v->dsel, (long)n, visible);
    for (int i = 0; i < visible; i++) {
        long ri = v->dtop + i;
        if (ri >= (long)n) break;
        size_t col = n - 1 - (size_t)ri; /* newest first */
        const drift_top_cell *c = drift_top_data_cell(d, li, col);
        int y = R->y + 1 + i;
        attr_t base = ri == v->dsel ? A_REVERSE : A_NORMAL;
        if (base) fill(y, R->x, R->w, base);
        char buf[64];
        snprintf(buf, sizeof buf, "%lld", (long long)drift_top_data_step(d, col));
        putr(y, R->x + f->x[DRIFT_TOP_DCOL_STEP], f->w[DRIFT_TOP_DCOL_STEP], base, buf);
        static const int dc[DRIFT_TOP_M_COUNT] = {DRIFT_TOP_DCOL_MEAN, DRIFT_TOP_DCOL_MAX, DRIFT_TOP_DCOL_REL,
                                                  DRIFT_TOP_DCOL_COS};
        for (int m = 0; m < DRIFT_TOP_M_COUNT; m++) {
            int cc = dc[m];
            if (!f->shown[cc]) continue;
            double x = c->present ? c->v[m] : NAN;
            if (m == DRIFT_TOP_M_MEAN || m == DRIFT_TOP_M_MAX) x /= s;
            if (m == DRIFT_TOP_M_COS)
                drift_top_fmt_cos(x, buf, sizeof buf);
            else
                drift_top_fmt_value(x, buf, sizeof buf);
            drift_top_class cl = drift_top_classify((drift_top_metric)m, x, refv[m], &v->q.th);
            putr(y, R->x + f->x[cc], f->w[cc], base | cls_attr(v, cl), buf);
        }
        if (f->shown[DRIFT_TOP_DCOL_ULP]) {
            if (!c->present)
                snprintf(buf, sizeof buf, "-");
            else
                drift_ulp_text(c->max_ulp_diff, buf, sizeof buf);
            putr(y, R->x + f->x[DRIFT_TOP_DCOL_ULP], f->w[DRIFT_TOP_DCOL_ULP], base, buf);
        }
        if (f->shown[DRIFT_TOP_DCOL_FLAGS]) {
            buf[0] = 0;
            if (!c->present) snprintf(buf, sizeof buf, "no row");
            if (c->flags & DRIFT_TRACE_METRIC_FIRST_DIVERGENT) strcat(buf, "first ");
            if (c->flags & DRIFT_TRACE_METRIC_BITWISE_EQUAL) strcat(buf, "equal ");
            if (c->flags & DRIFT_TOP_FLAG_NONFINITE) strcat(buf, "nonfinite");
            attr_t fa = base | ((c->flags & (DRIFT_TRACE_METRIC_FIRST_DIVERGENT | DRIFT_TOP_FLAG_NONFINITE))
                                    ? pair(v, C_BAD) | A_BOLD
                                    : A_NORMAL);
            put(y, R->x + f->x[DRIFT_TOP_DCOL_FLAGS], f->w[DRIFT_TOP_DCOL_FLAGS], fa, buf);
        }
    }
}

/* ======================================================================= */
/* footer, help                                                             */
/* ======================================================================= */

static void draw_footer(vs *v) {
    const drift_top_rect *R = &v->L.footer;
    if (R->h <= 0) return;
    line l = {R->y, R->x, R->x + R->w};
    if (v->prompt) {
        seg(&l, A_BOLD, "filter (glob or substring, Enter apply, Esc cancel): ");
        seg(&l, A_NORMAL, "%s", v->pbuf);
        seg(&l, A_REVERSE, " ");
        return;
    }
    if (v->msg[0] && now_s() < v->msg_until) {
        seg(&l, v->msg_bad ? pair(v, C_BAD) | A_BOLD : A_BOLD, "%s", v->msg);
        return;
    }
    static const char *const keys[][2] = {{"q", "quit"},    {"?", "help"},  {"Enter", "drill"}, {"/", "filter"},
                                          {"s", "sort"},    {"r", "rev"},   {"a", "agg"},       {"c", "cfg"},
                                          {"[]", "step"},   {"H", "heat"},  {"d", "1st div"},   {"b", "blocks"}, {"p", "chart"}};
    size_t nk = sizeof keys / sizeof keys[0];
    if (v->drill) {
        seg(&l, A_REVERSE | A_BOLD, "Esc");
        seg(&l, A_NORMAL, " back ");
    }
    for (size_t i = 0; i < nk; i++) {
        seg(&l, A_REVERSE | A_BOLD, "%s", keys[i][0]);
        seg(&l, A_NORMAL, " %s ", keys[i][1]);
    }
}

static const char *const help_text[] = {
    "drift top: do trainer and rollout agree, layer by layer?",
    "",
    " Up/Down k/j   move             PgUp/PgDn   page",
    " Home/End g/G  first/last row   Enter       per-step history",
    " Esc/Left      back / clear the filter",
    " s / S         sort by the next / previous column",
    " 1 .. 6        sort by order, name, mean, max, rel, cos",
    "               (the same key again reverses)      r  reverse",
    " /             filter layers: glob (* ? [..]) or substring",
    " a             aggregate: this step -> mean -> max over steps",
    " [ / ]         previous / next step (] on the last: follow)",
    " c             CFG: divide the |diff| columns by the scale s",
    " p / C         per-step chart / dtype census (intercept)",
    " H / m         heatmap layers x steps / its metric (log scale)",
    " d / b         first divergent layer / one row per block",
    " n             next divergent layer   Ctrl-L  redraw",
    "",
    "Colours: cyan equal (0), green ok, yellow warn, red bad.",
    "No --ref: absolute thresholds: mean|d| 1e-3/1e-2, max|d|",
    "  2e-2/1e-1, relmax 1e-2/1e-1, 1-cosine 1e-4/1e-2.",
    "--ref: ratio to the reference run's value of the same",
    "  layer: <= 2x ok, <= 10x warn, above: bad.",
    "Marks: @ first divergent layer at the step shown,",
    "  ! NaN/inf where the reference side has none.",
    "Max mode takes the minimum (worst) cosine.",
    "Any other key closes this help.",
};

/* --- intercept census overlay (key C) -------------------------------------- */
/* Line i of the census text (0 = title); 0 past the end. */
static int census_line(const drift_census *c, int i, char *buf, size_t sz) {
    if (!c) return i == 0 ? (snprintf(buf, sz, "no census in this trace (see docs/intercept.md)"), 1) : 0;
    if (i == 0) {
        snprintf(buf, sz, "rank %d/%d  %lld GEMM calls, %lld collective calls, NVTX %s", (int)c->info.rank,
                 (int)c->info.world_size, (long long)c->info.gemm_calls, (long long)c->info.coll_calls,
                 c->info.nvtx_injected ? "on" : "off");
        return 1;
    }
    i--;
    if (i == 0) return snprintf(buf, sz, "GEMMs: A,B->D | compute | calls | range [api m,n,k epilogue]"), 1;
    i--;
    if ((size_t)i < c->n_gemm) {
        const drift_census_gemm *g = &c->gemm[i];
        char dt[96];
        snprintf(buf, sz, "%-15s %-12s %6lld  %s [%s %lld,%lld,%lld %s]", drift_census_gemm_dtypes(g, dt, sizeof dt),
                 g->compute_type, (long long)g->calls, g->range[0] ? g->range : "-", g->api, (long long)g->m,
                 (long long)g->n, (long long)g->k, g->epilogue[0] ? g->epilogue : "-");
        return 1;
    }
    i -= (int)c->n_gemm;
    if (i == 0) return snprintf(buf, sz, "collectives: op | dtype | count | calls | range [rank/n]"), 1;
    i--;
    if ((size_t)i < c->n_coll) {
        const drift_census_coll *x = &c->coll[i];
        snprintf(buf, sz, "%-13s %-7s %10lld %6lld  %s [%d/%d]", x->op, x->dtype, (long long)x->count,
                 (long long)x->calls, x->range[0] ? x->range : "-", (int)x->comm_rank, (int)x->comm_nranks);
        return 1;
    }
    return 0;
}

static void draw_census(vs *v, const drift_top_rect *R) {
    const drift_census *c = drift_top_model_census(v->m);
    put(R->y, R->x + 2, R->w - 4, A_BOLD, " census (j/k scroll, any other key closes) ");
    int n = c ? (int)(3 + c->n_gemm + c->n_coll) : 1;
    int inner = R->h - 2;
    if (v->help_top > n - inner) v->help_top = n - inner;
    if (v->help_top < 0) v->help_top = 0;
    char buf[512];
    for (int i = 0; i < inner && census_line(c, v->help_top + i, buf, sizeof buf); i++)
        put(R->y + 1 + i, R->x + 1, R->w - 2, v->help_top + i == 0 ? A_BOLD : A_NORMAL, buf);
}

static void draw_help(vs *v) {
    const drift_top_rect *R = &v->L.help;
    if (R->h <= 0 || R->w <= 0) return;
    for (int y = 0; y < R->h; y++) fill(R->y + y, R->x, R->w, A_NORMAL);
    attrset(A_BOLD);
    mvaddch(R->y, R->x, ACS_ULCORNER);
    mvaddch(R->y, R->x + R->w - 1, ACS_URCORNER);
    mvaddch(R->y + R->h - 1, R->x, ACS_LLCORNER);
    mvaddch(R->y + R->h - 1, R->x + R->w - 1, ACS_LRCORNER);
    if (R->w > 2) {
        mvhline(R->y, R->x + 1, ACS_HLINE, R->w - 2);
        mvhline(R->y + R->h - 1, R->x + 1, ACS_HLINE, R->w - 2);
    }
    if (R->h > 2) {
        mvvline(R->y + 1, R->x, ACS_VLINE, R->h - 2);
        mvvline(R->y + 1, R->x + R->w - 1, ACS_VLINE, R->h - 2);
    }
    attrset(A_NORMAL);
    if (v->help == 2) { /* intercept census */
        draw_census(v, R);
        return;
    }
    int n = (int)(sizeof help_text / sizeof help_text[0]);
    int inner = R->h - 2;
    put(R->y, R->x + 2, R->w - 4, A_BOLD, inner < n ? " help (j/k scroll) " : " help ");
    if (v->help_top > n - inner) v->help_top = n - inner;
    if (v->help_top < 0) v->help_top = 0;
    for (int i = 0; i < inner && v->help_top + i < n; i++) {
        char buf[128];
        const char *t = help_text[v->help_top + i];
        const char *at = strchr(t, '@'); /* the mark as the table draws it */
        if (at) {
            snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - t), t, v->utf8 ? "\xe2\x96\xb6" : ">", at + 1);
            t = buf;
        }
        put(R->y + 1 + i, R->x + 1, R->w - 2, i == 0 && v->help_top == 0 ? A_BOLD : A_NORMAL, t);
    }
}


/* ======================================================================= */
/* heatmap (key H): layers (rows, execution order) x steps (columns)        */
/* ======================================================================= */

static const char *const heat_names[DRIFT_TOP_M_COUNT] = {"mean|d|", "max|d|", "relmax", "1-cos"};

/* The value of a cell in the heatmap's metric (1 - cosine for the cosine,
 * |diff| columns divided by s with CFG normalisation); NaN if none. */
static double heat_value(const vs *v, const drift_top_cell *c) {
    if (!c->present) return NAN;
    double x = c->v[v->heat_metric];
    if (v->heat_metric == DRIFT_TOP_M_COS) x = 1.0 - x;
    else if (v->heat_metric != DRIFT_TOP_M_REL) x /= norm_scale(v);
    return x;
}

static void draw_heat(vs *v) {
    const drift_top_data *d = D(v);
    drift_top_rect R = v->L.table;
    if (v->L.chart.h > 0) R.h = v->L.chart.y + v->L.chart.h - R.y; /* the chart's rows too */
    if (R.h < 4 || R.w < 20) return;
    size_t ns = drift_top_data_n_steps(d);
    int name_w = (int)drift_top_data_max_name(d);
    if (name_w > R.w / 3) name_w = R.w / 3;
    if (name_w < 8) name_w = 8;
    int gx = R.x + name_w + 2;
    int gw = R.w - name_w - 2;
    size_t nshow = ns < (size_t)gw ? ns : (size_t)gw;
    size_t c0 = ns - nshow; /* the newest steps fit; older ones scroll off the left */
    /* rows: the table's layers (filter applied) in execution order */
    size_t n = v->t.n;
    size_t *rows = n ? drift_malloc(n * sizeof *rows) : NULL;
    if (n && !rows) return;
    size_t k = 0;
    for (size_t li = 0; li < drift_top_data_n_layers(d); li++)
        if (drift_top_table_find(&v->t, li) >= 0) rows[k++] = li;
    n = k;
    /* one log10 scale over every shown cell */
    double lo = INFINITY, hi = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t c = c0; c < ns; c++) {
            double x = heat_value(v, drift_top_data_cell(d, rows[i], c));
            if (isfinite(x) && x > 0) {
                if (x < lo) lo = x;
                if (x > hi) hi = x;
            }
        }
    char a[32], b[32];
    line l = {R.y, R.x, R.x + R.w};
    seg(&l, A_BOLD, "heatmap %s%s", heat_names[v->heat_metric],
        v->q.cfg_normalise && v->heat_metric < DRIFT_TOP_M_REL ? "/s" : "");
    if (hi > 0)
        seg(&l, A_NORMAL, "  log10 scale %s..%s", drift_top_fmt_value(lo, a, sizeof a), drift_top_fmt_value(hi, b, sizeof b));
    seg(&l, A_NORMAL, "  %s 0  %s first divergent  m metric", v->utf8 ? "\xc2\xb7" : ".", v->utf8 ? "\xe2\x97\x86" : "X");
    /* step axis: a label every 10 columns */
    int ay = R.y + 1;
    put(ay, R.x, name_w, A_DIM, "layer \\ step");
    for (size_t c = c0; c < ns; c++) {
        int x = gx + (int)(c - c0);
        if ((c - c0) % 10 == 0 && x + 1 < R.x + R.w) {
            char t[24];
            snprintf(t, sizeof t, "|%lld", (long long)drift_top_data_step(d, c));
            put(ay, x, R.x + R.w - x, A_DIM, t);
        }
    }
    int visible = R.h - 2;
    long sel = -1;
    for (size_t i = 0; i < n; i++)
        if (rows[i] == v->sel_layer) sel = (long)i;
    long top = v->top;
    clamp_scroll(&top, sel < 0 ? 0 : sel, (long)n, visible);
    v->top = top;
    static const char *const u8g[8] = {"\xe2\x96\x81", "\xe2\x96\x82", "\xe2\x96\x83", "\xe2\x96\x84",
                                       "\xe2\x96\x85", "\xe2\x96\x86", "\xe2\x96\x87", "\xe2\x96\x88"};
    static const char *const asg[8] = {"1", "2", "3", "4", "5", "6", "7", "8"};
    for (int i = 0; i < visible && top + i < (long)n; i++) {
        size_t li = rows[top + i];
        int y = R.y + 2 + i;
        attr_t base = (long)(top + i) == sel ? A_REVERSE : A_NORMAL;
        put_name(v, y, R.x, name_w, base, drift_top_data_layer_name(d, li));
        for (size_t c = c0; c < ns; c++) {
            const drift_top_cell *cell = drift_top_data_cell(d, li, c);
            double x = heat_value(v, cell);
            int xx = gx + (int)(c - c0);
            if (isnan(x)) {
                put(y, xx, 1, A_NORMAL, " ");
                continue;
            }
            if (cell->flags & DRIFT_TRACE_METRIC_FIRST_DIVERGENT) {
                put(y, xx, 1, pair(v, C_BAD) | A_BOLD | A_REVERSE, v->utf8 ? "\xe2\x97\x86" : "X");
                continue;
            }
            if (x <= 0) {
                put(y, xx, 1, pair(v, C_EQUAL), v->utf8 ? "\xc2\xb7" : ".");
                continue;
            }
            int lv = 7;
            if (isfinite(x) && hi > lo) lv = (int)floor((log10(x) - log10(lo)) / (log10(hi) - log10(lo)) * 7.999);
            if (lv < 0) lv = 0;
            if (lv > 7) lv = 7;
            attr_t ca = lv >= 6 ? pair(v, C_BAD) : (lv >= 3 ? pair(v, C_WARN) : pair(v, C_OK));
            put(y, xx, 1, ca, v->utf8 ? u8g[lv] : asg[lv]);
        }
    }
    drift_free(rows);
}

static void draw(vs *v) {
    erase();
    int rows, cols;
    getmaxyx(stdscr, rows, cols);
    drift_top_layout_opts lo;
    memset(&lo, 0, sizeof lo);
    lo.help = v->help;
    lo.drill = v->drill;
    lo.hide_chart = v->hide_chart;
    lo.show_chart = v->show_chart;
    lo.two_plans = drift_top_model_header(v->m)->has_plan_b;
    lo.name_w = (int)drift_top_data_max_name(D(v));
    lo.has_ref = drift_top_model_header(v->m)->has_ref;
    drift_top_layout_compute(cols, rows, &lo, &v->L);
    if (v->L.too_small) {
        put(0, 0, cols, A_BOLD, "terminal too small");
    } else {
        draw_header(v);
        if (v->drill)
            draw_drill(v);
        else if (v->heat)
            draw_heat(v);
        else {
            draw_table(v);
            draw_chart(v);
        }
        draw_footer(v);
        if (v->help) draw_help(v);
    }
    wnoutrefresh(stdscr);
    doupdate();
}

/* ======================================================================= */
/* keys                                                                     */
/* ======================================================================= */

static void set_sort(vs *v, drift_top_sort s) {
    if (v->q.sort == s) {
        v->q.descending = !v->q.descending;
    } else {
        v->q.sort = s;
        /* metric columns worst first, order and name ascending */
        v->q.descending = s >= DRIFT_TOP_SORT_MEAN && s != DRIFT_TOP_SORT_COS;
    }
    v->dirty = 1;
    v->to_top = 1;
}

static void step_move(vs *v, int delta) {
    const drift_top_data *d = D(v);
    size_t n = drift_top_data_n_steps(d);
    if (n == 0) return;
    if (v->q.agg != DRIFT_TOP_AGG_STEP) {
        v->q.agg = DRIFT_TOP_AGG_STEP;
        v->dirty = 1;
    }
    long c = shown_col(v) + delta;
    if (c < 0) c = 0;
    if (c >= (long)n - 1)
        v->q.step = INT64_MAX; /* the latest, and keep following it */
    else
        v->q.step = drift_top_data_step(d, (size_t)c);
    v->dirty = 1;
}

static void prompt_key(vs *v, int ch) {
    if (ch == KEY_ESC) {
        snprintf(v->filter, sizeof v->filter, "%s", v->saved_filter);
        v->prompt = 0;
    } else if (ch == '\n' || ch == '\r' || ch == KEY_ENTER) {
        v->prompt = 0;
    } else if (ch == KEY_BACKSPACE || ch == 127 || ch == 8) {
        while (v->plen > 0) {
            unsigned char b = (unsigned char)v->pbuf[--v->plen];
            if ((b & 0xc0) != 0x80) break; /* drop a whole UTF-8 sequence */
        }
        v->pbuf[v->plen] = 0;
        snprintf(v->filter, sizeof v->filter, "%s", v->pbuf);
    } else if (ch == 21) { /* Ctrl-U */
        v->plen = 0;
        v->pbuf[0] = 0;
        v->filter[0] = 0;
    } else if (ch >= 32 && ch < 256 && ch != 127 && v->plen + 1 < sizeof v->pbuf) {
        v->pbuf[v->plen++] = (char)ch;
        v->pbuf[v->plen] = 0;
        snprintf(v->filter, sizeof v->filter, "%s", v->pbuf);
    }
    v->dirty = 1; /* filter as you type */
}

static void mouse_key(vs *v) {
    MEVENT ev;
    if (getmouse(&ev) != OK) return;
    if (ev.bstate & BUTTON4_PRESSED) {
        if (v->drill) v->dsel -= 3;
        else select_row(v, v->sel_row - 3);
        return;
    }
    if (ev.bstate & BUTTON5_PRESSED) {
        if (v->drill) v->dsel += 3;
        else select_row(v, v->sel_row + 3);
        return;
    }
    if (!(ev.bstate & (BUTTON1_CLICKED | BUTTON1_PRESSED | BUTTON1_DOUBLE_CLICKED))) return;
    if (v->drill || v->help) return;
    const drift_top_rect *R = &v->L.table;
    if (ev.y == R->y) { /* click on a column title sorts by it */
        static const int map[DRIFT_TOP_TCOL_COUNT] = {DRIFT_TOP_SORT_ORDER, DRIFT_TOP_SORT_NAME, DRIFT_TOP_SORT_MEAN,
                                                      DRIFT_TOP_SORT_MAX,   DRIFT_TOP_SORT_REL,  DRIFT_TOP_SORT_COS,
                                                      -1};
        for (int c = 0; c < DRIFT_TOP_TCOL_COUNT; c++)
            if (v->L.tcols.shown[c] && ev.x >= v->L.tcols.x[c] && ev.x < v->L.tcols.x[c] + v->L.tcols.w[c] &&
                map[c] >= 0)
                set_sort(v, (drift_top_sort)map[c]);
        return;
    }
    if (ev.y > R->y && ev.y < R->y + R->h) {
        long r = v->top + (ev.y - R->y - 1);
        if (r < (long)v->t.n) {
            select_row(v, r);
            if (ev.bstate & BUTTON1_DOUBLE_CLICKED) {
                v->drill = 1;
                v->drill_layer = v->sel_layer;
                v->dsel = 0;
                v->dtop = 0;
            }
        }
    }
}

/* Returns 1 to quit. */
static int handle_key(vs *v, int ch) {
    if (ch == KEY_RESIZE) { /* a new height: the selection keeps rows below it */
        v->context = 1;
        return 0;
    }
    if (ch == CTRL_L) {
        clearok(curscr, TRUE);
        return 0;
    }
    if (v->prompt) {
        prompt_key(v, ch);
        return 0;
    }
    if (v->help) {
        int inner = v->L.help.h - 2;
        if (ch == KEY_DOWN || ch == 'j')
            v->help_top++;
        else if (ch == KEY_UP || ch == 'k')
            v->help_top--;
        else if (ch == KEY_NPAGE || ch == ' ')
            v->help_top += inner > 1 ? inner - 1 : 1;
        else if (ch == KEY_PPAGE)
            v->help_top -= inner > 1 ? inner - 1 : 1;
        else
            v->help = 0;
        return 0;
    }
    if (ch == KEY_MOUSE) {
        mouse_key(v);
        return 0;
    }
    int page = v->drill ? drift_top_layout_table_rows(&v->L.drill_table) : drift_top_layout_table_rows(&v->L.table);
    if (page < 1) page = 1;
    switch (ch) {
    case 'q':
    case 'Q': return 1;
    case '?':
    case 'h':
    case KEY_F(1):
        v->help = 1;
        v->help_top = 0;
        return 0;
    case 'C': /* intercept census */
        v->help = 2;
        v->help_top = 0;
        return 0;
    case 'a':
        v->q.agg = (drift_top_agg)(((int)v->q.agg + 1) % DRIFT_TOP_AGG_COUNT);
        v->dirty = 1;
        return 0;
    case 'c':
        v->q.cfg_normalise = !v->q.cfg_normalise;
        v->dirty = 1;
        set_msg(v, 0, v->q.cfg_normalise ? "CFG normalisation on: mean|d| and max|d| divided by s = %g"
                                         : "CFG normalisation off: raw values (s = %g)",
                v->q.guidance_scale);
        return 0;
    case 'p': /* the chart on or off; on a small terminal, on means half the body */
        if (v->L.chart.h > 0) {
            v->hide_chart = 1;
            v->show_chart = 0;
        } else {
            v->hide_chart = 0;
            v->show_chart = 1;
        }
        set_msg(v, 0, v->hide_chart ? "step chart off (p: on)" : "step chart on (p: off)");
        return 0;
    case 'b':
        v->q.collapse_blocks = !v->q.collapse_blocks;
        v->dirty = 1;
        set_msg(v, 0, v->q.collapse_blocks ? "one row per block: its first divergent or largest layer, [n] = layers"
                                           : "every layer");
        return 0;
    case 'H':
        v->heat = !v->heat;
        v->drill = 0;
        return 0;
    case 'm':
        v->heat_metric = (v->heat_metric + 1) % DRIFT_TOP_M_COUNT;
        set_msg(v, 0, "heatmap metric: %s", heat_names[v->heat_metric]);
        return 0;
    case 'd':
        if (v->t.first_divergent >= 0 && drift_top_table_find(&v->t, (size_t)v->t.first_divergent) >= 0) {
            select_row(v, drift_top_table_find(&v->t, (size_t)v->t.first_divergent));
            v->context = 1;
            set_msg(v, 0, "first divergent layer: %s", drift_top_data_layer_name(D(v), (size_t)v->t.first_divergent));
        } else {
            set_msg(v, 0, "no divergent layer at this step");
        }
        return 0;
    case 'n': { /* the next row after the selection (wrapping) whose values are not bitwise equal */
        long found = -1, k = 0, total = 0;
        for (size_t i = 0; i < v->t.n; i++) {
            const drift_top_row *row = &v->t.rows[i];
            if (!(row->v[DRIFT_TOP_M_MAX] > 0)) continue; /* equal, or no value (NaN) */
            total++;
            if (found < 0 && (long)i > v->sel_row) { found = (long)i; k = total; }
        }
        if (total > 0 && found < 0) /* wrap to the first */
            for (size_t i = 0; i < v->t.n && found < 0; i++)
                if (v->t.rows[i].v[DRIFT_TOP_M_MAX] > 0) { found = (long)i; k = 1; }
        if (found < 0) {
            set_msg(v, 0, "no divergent layer among the rows shown");
        } else {
            select_row(v, found);
            set_msg(v, 0, "divergent layer %ld of %ld: %s", k, total, v->t.rows[found].name);
        }
        return 0;
    }
    case '[': step_move(v, -1); return 0;
    case ']': step_move(v, +1); return 0;
    case '{': step_move(v, -(1 << 30)); return 0;
    case '}': step_move(v, +(1 << 30)); return 0;
    default: break;
    }
    if (v->drill) {
        switch (ch) {
        case KEY_ESC:
        case KEY_LEFT:
        case KEY_BACKSPACE:
        case 127:
        case '\n':
        case '\r':
        case KEY_ENTER: v->drill = 0; break;
        case KEY_UP:
        case 'k': v->dsel--; break;
        case KEY_DOWN:
        case 'j': v->dsel++; break;
        case KEY_PPAGE: v->dsel -= page; break;
        case KEY_NPAGE:
        case ' ': v->dsel += page; break;
        case KEY_HOME:
        case 'g': v->dsel = 0; break;
        case KEY_END:
        case 'G': v->dsel = (long)drift_top_data_n_steps(D(v)) - 1; break;
        default: break;
        }
        return 0;
    }
    switch (ch) {
    case KEY_UP:
    case 'k': select_row(v, v->sel_row - 1); break;
    case KEY_DOWN:
    case 'j': select_row(v, v->sel_row + 1); break;
    case KEY_PPAGE: select_row(v, v->sel_row - page); break;
    case KEY_NPAGE:
    case ' ': select_row(v, v->sel_row + page); break;
    case KEY_HOME:
    case 'g': select_row(v, 0); break;
    case KEY_END:
    case 'G': select_row(v, (long)v->t.n - 1); break;
    case '\n':
    case '\r':
    case KEY_ENTER:
    case KEY_RIGHT:
        if (v->t.n > 0) {
            v->drill = 1;
            v->drill_layer = v->sel_layer;
            v->dsel = 0;
            v->dtop = 0;
        }
        break;
    case '/': /* a fresh filter; Esc restores the previous one */
        v->prompt = 1;
        snprintf(v->saved_filter, sizeof v->saved_filter, "%s", v->filter);
        v->pbuf[0] = 0;
        v->plen = 0;
        v->filter[0] = 0;
        v->dirty = 1;
        break;
    case KEY_ESC:
    case KEY_LEFT:
        if (v->filter[0]) {
            v->filter[0] = 0;
            v->dirty = 1;
        }
        break;
    case 's':
        set_sort(v, (drift_top_sort)(((int)v->q.sort + 1) % DRIFT_TOP_SORT_COUNT));
        break;
    case 'S':
        set_sort(v, (drift_top_sort)(((int)v->q.sort + DRIFT_TOP_SORT_COUNT - 1) % DRIFT_TOP_SORT_COUNT));
        break;
    case 'r':
        v->q.descending = !v->q.descending;
        v->dirty = 1;
        v->to_top = 1;
        break;
    case '1':
    case '2':
    case '3':
    case '4':
    case '5':
    case '6': set_sort(v, (drift_top_sort)(ch - '1')); break;
    default: break;
    }
    return 0;
}

/* ======================================================================= */
/* main loop                                                                */
/* ======================================================================= */

int drift_top_view_run(drift_top_model *m, const drift_top_view_opts *o, drift_err *err) {
    vs *v = drift_calloc(1, sizeof *v);
    if (!v) return drift_err_set(err, DRIFT_E_NOMEM, "drift top", "out of memory");
    v->m = m;
    v->q = o->query;
    if (o->query.filter) snprintf(v->filter, sizeof v->filter, "%s", o->query.filter);
    v->q.filter = v->filter;
    v->follow = o->follow;
    v->interval_ms = o->interval_ms < 50 ? 50 : o->interval_ms;
    v->mouse = o->mouse;
    v->dirty = 1;

    setlocale(LC_ALL, "");
    const char *cs = nl_langinfo(CODESET);
    v->utf8 = !o->ascii && cs && (strcmp(cs, "UTF-8") == 0 || strcmp(cs, "utf8") == 0);

    SCREEN *scr = newterm(NULL, stdout, stdin);
    if (!scr) {
        const char *term = getenv("TERM");
        free(v);
        return drift_err_set(err, DRIFT_E_IO, "drift top", "cannot initialise the terminal (TERM=%s)",
                             term ? term : "(unset)");
    }
    set_term(scr);
    cbreak();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    set_escdelay(25);
    curs_set(0);
    if (has_colors()) {
        start_color();
        use_default_colors();
        init_pair(C_OK, COLOR_GREEN, -1);
        init_pair(C_WARN, COLOR_YELLOW, -1);
        init_pair(C_BAD, COLOR_RED, -1);
        init_pair(C_EQUAL, COLOR_CYAN, -1);
        init_pair(C_TITLE, COLOR_BLACK, COLOR_CYAN);
        init_pair(C_BAR_A, COLOR_BLUE, -1);
        init_pair(C_BAR_B, COLOR_MAGENTA, -1);
        init_pair(C_DIM, COLOR_WHITE, -1);
        v->color = 1;
    }
    if (v->mouse) {
        mousemask(BUTTON1_CLICKED | BUTTON1_DOUBLE_CLICKED | BUTTON4_PRESSED | BUTTON5_PRESSED, NULL);
        mouseinterval(200);
    }

    double next = now_s() + v->interval_ms / 1000.0;
    for (;;) {
        if (v->dirty || v->gen != drift_top_data_generation(D(v))) rebuild(v);
        if (v->msg[0] && now_s() >= v->msg_until) v->msg[0] = 0;
        draw(v);
        int wait_ms = -1;
        if (v->follow) {
            double left = next - now_s();
            wait_ms = left <= 0 ? 0 : (int)(left * 1000.0) + 1;
        }
        if (v->msg[0]) { /* wake up to let the message expire */
            double left = v->msg_until - now_s();
            int ms = left <= 0 ? 0 : (int)(left * 1000.0) + 1;
            if (wait_ms < 0 || ms < wait_ms) wait_ms = ms;
        }
        timeout(wait_ms);
        int ch = getch();
        if (ch != ERR && handle_key(v, ch)) break;
        if (v->follow && now_s() >= next) {
            drift_err e;
            drift_err_clear(&e);
            int64_t nn = 0;
            if (drift_top_model_refresh(v->m, &nn, &e) != DRIFT_OK) {
                char buf[1600];
                set_msg(v, 1, "refresh failed: %s", drift_err_format(&e, buf, sizeof buf));
            }
            next = now_s() + v->interval_ms / 1000.0;
        }
    }
    endwin();
    delscreen(scr);
    drift_top_table_free(&v->t);
    free(v);
    return DRIFT_OK;
}
