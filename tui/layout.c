/* Pure layout of `drift top` (see layout.h). */
#include "tui/layout.h"

#include <string.h>

static int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

static drift_top_rect rect(int x, int y, int w, int h) {
    drift_top_rect r;
    if (w <= 0 || h <= 0) {
        w = 0;
        h = 0;
    }
    r.x = x;
    r.y = y;
    r.w = w;
    r.h = h;
    return r;
}

int drift_top_layout_fit_columns(int width, const drift_top_colspec *spec, int n, drift_top_colfit *out) {
    int order[DRIFT_TOP_MAX_COLS];
    int n_order = 0;
    memset(out, 0, sizeof *out);
    if (n < 0) n = 0;
    if (n > DRIFT_TOP_MAX_COLS) n = DRIFT_TOP_MAX_COLS;
    out->n = n;
    if (width <= 0) return 0;
    /* admission order: priority ascending, then spec order (stable insertion sort) */
    for (int i = 0; i < n; i++) {
        if (spec[i].priority < 0 || spec[i].min_w <= 0) continue;
        int j = n_order;
        while (j > 0 && spec[order[j - 1]].priority > spec[i].priority) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
        n_order++;
    }
    int used = 0, shown = 0;
    for (int k = 0; k < n_order; k++) {
        int i = order[k];
        int need = spec[i].min_w + (shown > 0 ? 1 : 0);
        if (used + need > width) break; /* strict priority: keeps the shown set monotonic in width */
        out->shown[i] = 1;
        out->w[i] = spec[i].min_w;
        used += need;
        shown++;
    }
    int spare = width - used;
    for (int k = 0; k < n_order && spare > 0; k++) {
        int i = order[k];
        if (!out->shown[i]) continue;
        int maxw = spec[i].max_w > spec[i].min_w ? spec[i].max_w : spec[i].min_w;
        int grow = maxw - out->w[i];
        if (grow > spare) grow = spare;
        out->w[i] += grow;
        spare -= grow;
    }
    int pos = 0;
    out->used = 0;
    for (int i = 0; i < n; i++) {
        if (!out->shown[i]) continue;
        out->x[i] = pos;
        pos += out->w[i];
        out->used = pos;
        pos += 1;
    }
    return shown;
}

static void table_columns(int width, int name_w, int has_ref, drift_top_colfit *out) {
    drift_top_colspec spec[DRIFT_TOP_TCOL_COUNT];
    int name_max = name_w > 0 ? clampi(name_w, 10, 64) : 40;
    spec[DRIFT_TOP_TCOL_MARK] = (drift_top_colspec){1, 1, 0};
    spec[DRIFT_TOP_TCOL_NAME] = (drift_top_colspec){10, name_max, 0};
    spec[DRIFT_TOP_TCOL_MEAN] = (drift_top_colspec){DRIFT_TOP_VALUE_W, DRIFT_TOP_VALUE_W, 1};
    spec[DRIFT_TOP_TCOL_MAX] = (drift_top_colspec){DRIFT_TOP_VALUE_W, DRIFT_TOP_VALUE_W, 2};
    spec[DRIFT_TOP_TCOL_SPARK] = (drift_top_colspec){8, 240, 3};
    spec[DRIFT_TOP_TCOL_REL] = (drift_top_colspec){DRIFT_TOP_VALUE_W, DRIFT_TOP_VALUE_W, 4};
    spec[DRIFT_TOP_TCOL_COS] = (drift_top_colspec){DRIFT_TOP_COS_W, DRIFT_TOP_COS_W, 5};
    /* without --ref these two take no room (min_w 0 is never admitted) */
    spec[DRIFT_TOP_TCOL_REF] = (drift_top_colspec){has_ref ? DRIFT_TOP_VALUE_W : 0, DRIFT_TOP_VALUE_W, 2};
    spec[DRIFT_TOP_TCOL_RATIO] = (drift_top_colspec){has_ref ? 8 : 0, 8, 2};
    drift_top_layout_fit_columns(width, spec, DRIFT_TOP_TCOL_COUNT, out);
}

static void drill_columns(int width, drift_top_colfit *out) {
    drift_top_colspec spec[DRIFT_TOP_DCOL_COUNT];
    spec[DRIFT_TOP_DCOL_STEP] = (drift_top_colspec){8, 10, 0};
    spec[DRIFT_TOP_DCOL_MEAN] = (drift_top_colspec){DRIFT_TOP_VALUE_W, DRIFT_TOP_VALUE_W, 1};
    spec[DRIFT_TOP_DCOL_MAX] = (drift_top_colspec){DRIFT_TOP_VALUE_W, DRIFT_TOP_VALUE_W, 2};
    spec[DRIFT_TOP_DCOL_REL] = (drift_top_colspec){DRIFT_TOP_VALUE_W, DRIFT_TOP_VALUE_W, 3};
    spec[DRIFT_TOP_DCOL_COS] = (drift_top_colspec){DRIFT_TOP_COS_W, DRIFT_TOP_COS_W, 4};
    spec[DRIFT_TOP_DCOL_ULP] = (drift_top_colspec){8, 12, 5};
    spec[DRIFT_TOP_DCOL_FLAGS] = (drift_top_colspec){5, 32, 6};
    drift_top_layout_fit_columns(width, spec, DRIFT_TOP_DCOL_COUNT, out);
}

void drift_top_layout_compute(int cols, int rows, const drift_top_layout_opts *opts, drift_top_layout *out) {
    drift_top_layout_opts none;
    memset(&none, 0, sizeof none);
    if (!opts) opts = &none;
    memset(out, 0, sizeof *out);
    out->cols = cols;
    out->rows = rows;
    if (cols < DRIFT_TOP_MIN_COLS || rows < DRIFT_TOP_MIN_ROWS) {
        out->too_small = 1;
        return;
    }

    int header_h = rows >= 16 ? 3 : (rows >= 10 ? 2 : 1);
    if (opts->two_plans && rows >= 20) header_h = 4;
    int footer_h = 1;
    int body_y = header_h;
    int body_h = rows - header_h - footer_h; /* >= 4 */
    out->header = rect(0, 0, cols, header_h);
    out->footer = rect(0, rows - footer_h, cols, footer_h);

    if (opts->drill) {
        out->drill = rect(0, body_y, cols, body_h);
        out->drill_title = rect(0, body_y, cols, 1);
        int chart_h = 0;
        if (body_h >= 12) chart_h = clampi((body_h - 1) / 3, 4, 14);
        out->drill_chart = rect(0, body_y + 1, cols, chart_h);
        out->drill_table = rect(0, body_y + 1 + chart_h, cols, body_h - 1 - chart_h);
        drill_columns(cols, &out->dcols);
    } else {
        int chart_h = 0;
        /* charts shrink first: below 30 rows the table keeps the lines */
        if (!opts->hide_chart && rows >= 30 && cols >= 40) chart_h = clampi(body_h / 3, 7, 14);
        else if (!opts->hide_chart && rows >= 20 && cols >= 90) chart_h = 5; /* side by side, 4 lines each */
        if (!opts->hide_chart && opts->show_chart && chart_h == 0 && body_h >= 9) chart_h = clampi(body_h / 2, 5, 14);
        out->table = rect(0, body_y, cols, body_h - chart_h);
        table_columns(cols, opts->name_w, opts->has_ref, &out->tcols);
        if (chart_h > 0) {
            int cy = body_y + body_h - chart_h;
            out->chart = rect(0, cy, cols, chart_h);
            int inner_h = chart_h - 1;
            if (cols >= 90) {
                int wa = (cols - 1) / 2;
                out->chart_a = rect(0, cy + 1, wa, inner_h);
                out->chart_b = rect(wa + 1, cy + 1, cols - wa - 1, inner_h);
            } else {
                int ha = inner_h / 2;
                out->chart_a = rect(0, cy + 1, cols, ha);
                out->chart_b = rect(0, cy + 1 + ha, cols, inner_h - ha);
            }
        }
    }

    if (opts->help) {
        int w = cols < DRIFT_TOP_HELP_WIDTH + 2 ? cols : DRIFT_TOP_HELP_WIDTH + 2;
        int h = rows < DRIFT_TOP_HELP_LINES + 2 ? rows : DRIFT_TOP_HELP_LINES + 2;
        out->help = rect((cols - w) / 2, (rows - h) / 2, w, h);
    }
}

int drift_top_layout_table_rows(const drift_top_rect *table) {
    return table->h > 1 ? table->h - 1 : 0;
}

int drift_top_rect_inside(const drift_top_rect *r, int cols, int rows) {
    if (r->w == 0 && r->h == 0) return 1;
    if (r->w < 0 || r->h < 0 || r->x < 0 || r->y < 0) return 0;
    return r->x + r->w <= cols && r->y + r->h <= rows;
}

int drift_top_rect_overlap(const drift_top_rect *a, const drift_top_rect *b) {
    if (a->w <= 0 || a->h <= 0 || b->w <= 0 || b->h <= 0) return 0;
    return a->x < b->x + b->w && b->x < a->x + a->w && a->y < b->y + b->h && b->y < a->y + a->h;
}
