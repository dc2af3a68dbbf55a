/* The pure layout of `drift top` (tui/layout.c): exact geometry at known
 * sizes, and invariants over every size from 40x12 to 300x100 in every mode. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tui/layout.h"

static int empty(const drift_top_rect *r) { return r->w == 0 && r->h == 0; }

static int inside_of(const drift_top_rect *in, const drift_top_rect *out) {
    if (empty(in)) return 1;
    return in->x >= out->x && in->y >= out->y && in->x + in->w <= out->x + out->w &&
           in->y + in->h <= out->y + out->h;
}

static void test_fit_columns_exact(void **state) {
    (void)state;
    drift_top_colspec spec[3] = {{5, 5, 0}, {4, 10, 1}, {6, 6, 2}};
    drift_top_colfit f;
    /* everything at minimum: 5 + 1 + 4 + 1 + 6 = 17 */
    assert_int_equal(drift_top_layout_fit_columns(17, spec, 3, &f), 3);
    assert_int_equal(f.x[0], 0);
    assert_int_equal(f.w[0], 5);
    assert_int_equal(f.x[1], 6);
    assert_int_equal(f.w[1], 4);
    assert_int_equal(f.x[2], 11);
    assert_int_equal(f.w[2], 6);
    assert_int_equal(f.used, 17);
    /* 16: the third column no longer fits; the second grows by the spare 6 */
    assert_int_equal(drift_top_layout_fit_columns(16, spec, 3, &f), 2);
    assert_int_equal(f.shown[2], 0);
    assert_int_equal(f.w[2], 0);
    assert_int_equal(f.w[1], 10);
    assert_int_equal(f.used, 16);
    /* 30: all shown, column 1 at its max, 7 columns left unused */
    assert_int_equal(drift_top_layout_fit_columns(30, spec, 3, &f), 3);
    assert_int_equal(f.w[1], 10);
    assert_int_equal(f.x[2], 17);
    assert_int_equal(f.used, 23);
    /* too narrow for the first: nothing */
    assert_int_equal(drift_top_layout_fit_columns(4, spec, 3, &f), 0);
    assert_int_equal(drift_top_layout_fit_columns(0, spec, 3, &f), 0);
    assert_int_equal(drift_top_layout_fit_columns(-3, spec, 3, &f), 0);
    /* strict priority: a cheap low-priority column is not admitted past an expensive one */
    drift_top_colspec spec2[3] = {{5, 5, 0}, {20, 20, 1}, {2, 2, 2}};
    assert_int_equal(drift_top_layout_fit_columns(10, spec2, 3, &f), 1);
    assert_int_equal(f.shown[2], 0);
    /* a negative priority is never shown */
    drift_top_colspec spec3[2] = {{5, 5, 0}, {2, 2, -1}};
    assert_int_equal(drift_top_layout_fit_columns(100, spec3, 2, &f), 1);
    assert_int_equal(f.shown[1], 0);
}

static void test_exact_80x24(void **state) {
    (void)state;
    drift_top_layout_opts o;
    memset(&o, 0, sizeof o);
    o.name_w = 24;
    drift_top_layout L;
    drift_top_layout_compute(80, 24, &o, &L);
    assert_false(L.too_small);
    assert_int_equal(L.header.y, 0);
    assert_int_equal(L.header.h, 3);
    assert_int_equal(L.table.y, 3);
    /* charts shrink first (defect 22.12): at 24 rows the table keeps every
     * line, 19 layer rows */
    assert_int_equal(L.table.h, 20);
    assert_true(empty(&L.chart));
    assert_int_equal(drift_top_layout_table_rows(&L.table), 19);
    drift_top_layout_compute(100, 24, &o, &L); /* wide enough: a 5-line chart, side by side */
    assert_int_equal(L.chart.h, 5);
    assert_int_equal(L.chart_a.h, 4);
    assert_int_equal(L.chart_b.h, 4);
    assert_int_equal(L.chart_a.y, L.chart_b.y);
    drift_top_layout_compute(80, 24, &o, &L);
    assert_int_equal(L.footer.y, 23);
    assert_int_equal(L.footer.h, 1);
    /* columns: mark 1, name 24, mean, max, spark, rel, cos at 80: 1+1+24+1+9+1+9+1+S+1+9+1+10 = 80 -> S = 12 */
    assert_true(L.tcols.shown[DRIFT_TOP_TCOL_COS]);
    assert_int_equal(L.tcols.w[DRIFT_TOP_TCOL_NAME], 24);
    assert_int_equal(L.tcols.x[DRIFT_TOP_TCOL_NAME], 2);
    assert_int_equal(L.tcols.x[DRIFT_TOP_TCOL_MEAN], 27);
    assert_int_equal(L.tcols.x[DRIFT_TOP_TCOL_MAX], 37);
    assert_int_equal(L.tcols.x[DRIFT_TOP_TCOL_REL], 47);
    assert_int_equal(L.tcols.x[DRIFT_TOP_TCOL_COS], 57);
    assert_int_equal(L.tcols.x[DRIFT_TOP_TCOL_SPARK], 68);
    assert_int_equal(L.tcols.w[DRIFT_TOP_TCOL_SPARK], 12);
    assert_int_equal(L.tcols.used, 80);
    assert_true(empty(&L.help));
    assert_true(empty(&L.drill));
}

static void test_exact_40x12(void **state) {
    (void)state;
    drift_top_layout L;
    drift_top_layout_compute(40, 12, NULL, &L);
    assert_false(L.too_small);
    assert_int_equal(L.header.h, 2);
    assert_int_equal(L.table.y, 2);
    assert_int_equal(L.table.h, 9);
    assert_true(empty(&L.chart)); /* too short for the chart */
    assert_int_equal(L.footer.y, 11);
    /* mark, name, mean, max: 1+1+N+1+9+1+9 = 40 -> N = 18 (spark needs 9 more) */
    assert_true(L.tcols.shown[DRIFT_TOP_TCOL_NAME]);
    assert_true(L.tcols.shown[DRIFT_TOP_TCOL_MEAN]);
    assert_true(L.tcols.shown[DRIFT_TOP_TCOL_MAX]);
    assert_false(L.tcols.shown[DRIFT_TOP_TCOL_SPARK]);
    assert_false(L.tcols.shown[DRIFT_TOP_TCOL_REL]);
    assert_int_equal(L.tcols.w[DRIFT_TOP_TCOL_NAME], 18);
}

static void test_wide_chart_side_by_side(void **state) {
    (void)state;
    drift_top_layout L;
    drift_top_layout_compute(120, 40, NULL, &L);
    assert_int_equal(L.chart_a.y, L.chart_b.y);
    assert_int_equal(L.chart_a.h, L.chart_b.h);
    assert_int_equal(L.chart_a.w + 1 + L.chart_b.w, 120);
    assert_int_equal(L.chart_a.h, L.chart.h - 1);
    drift_top_layout_opts o;
    memset(&o, 0, sizeof o);
    o.hide_chart = 1;
    drift_top_layout_compute(120, 40, &o, &L);
    assert_true(empty(&L.chart));
    assert_int_equal(L.table.h, 40 - 3 - 1);
}

static void test_too_small(void **state) {
    (void)state;
    int sizes[][2] = {{19, 12}, {40, 5}, {0, 0}, {-1, 30}, {80, -5}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        drift_top_layout L;
        drift_top_layout_opts o;
        memset(&o, 0, sizeof o);
        o.help = 1;
        o.drill = (int)(i & 1);
        drift_top_layout_compute(sizes[i][0], sizes[i][1], &o, &L);
        assert_true(L.too_small);
        assert_true(empty(&L.header));
        assert_true(empty(&L.table));
        assert_true(empty(&L.footer));
        assert_true(empty(&L.help));
        assert_true(empty(&L.drill_table));
    }
    drift_top_layout L;
    drift_top_layout_compute(DRIFT_TOP_MIN_COLS, DRIFT_TOP_MIN_ROWS, NULL, &L);
    assert_false(L.too_small);
    assert_true(L.table.h >= 2);
}

static void check_cols(const drift_top_colfit *f, int width) {
    int prev_end = -1;
    for (int i = 0; i < f->n; i++) {
        if (!f->shown[i]) {
            assert_int_equal(f->w[i], 0);
            continue;
        }
        assert_true(f->w[i] >= 1);
        assert_true(f->x[i] > prev_end); /* at least one space apart, in order */
        prev_end = f->x[i] + f->w[i];
        assert_true(prev_end <= width);
    }
    assert_true(f->used <= width);
}

/* Every size from 40x12 to 300x100, every mode combination. */
static void test_invariants_all_sizes(void **state) {
    (void)state;
    const int name_ws[] = {0, 8, 36, 200};
    long checked = 0;
    for (int mode = 0; mode < 8; mode++) {
        for (int nw = 0; nw < 4; nw++) {
            drift_top_layout_opts o;
            memset(&o, 0, sizeof o);
            o.help = mode & 1;
            o.drill = (mode >> 1) & 1;
            o.hide_chart = (mode >> 2) & 1;
            o.name_w = name_ws[nw];
            int prev_shown_by_rows[101];
            for (int r = 0; r <= 100; r++) prev_shown_by_rows[r] = -1;
            for (int cols = 40; cols <= 300; cols++) {
                for (int rows = 12; rows <= 100; rows++) {
                    drift_top_layout L;
                    drift_top_layout_compute(cols, rows, &o, &L);
                    checked++;
                    assert_false(L.too_small);
                    assert_int_equal(L.cols, cols);
                    assert_int_equal(L.rows, rows);
                    const drift_top_rect *all[] = {&L.header, &L.table, &L.chart, &L.chart_a, &L.chart_b,
                                                   &L.drill, &L.drill_title, &L.drill_chart, &L.drill_table,
                                                   &L.footer, &L.help};
                    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
                        assert_true(drift_top_rect_inside(all[k], cols, rows));
                    /* header on top, footer at the bottom, full width */
                    assert_int_equal(L.header.y, 0);
                    assert_int_equal(L.header.w, cols);
                    assert_true(L.header.h >= 2);
                    assert_int_equal(L.footer.h, 1);
                    assert_int_equal(L.footer.y, rows - 1);
                    if (!o.drill) {
                        assert_true(empty(&L.drill));
                        assert_true(empty(&L.drill_table));
                        /* header, table, chart, footer tile the screen */
                        assert_int_equal(L.table.y, L.header.h);
                        assert_int_equal(L.table.w, cols);
                        assert_int_equal(L.header.h + L.table.h + L.chart.h + L.footer.h, rows);
                        if (!empty(&L.chart)) {
                            assert_false(o.hide_chart);
                            assert_int_equal(L.chart.y, L.table.y + L.table.h);
                            assert_true(L.chart.h >= (rows >= 30 ? 7 : 5));
                            assert_true(inside_of(&L.chart_a, &L.chart));
                            assert_true(inside_of(&L.chart_b, &L.chart));
                            assert_false(drift_top_rect_overlap(&L.chart_a, &L.chart_b));
                            assert_true(L.chart_a.y > L.chart.y); /* below the title line */
                            assert_true(L.chart_a.h >= 3);        /* label + at least 2 bar rows */
                            assert_true(L.chart_b.h >= 3);
                            assert_true(L.chart_a.w >= 40 || L.chart_a.w == cols);
                        } else {
                            assert_true(o.hide_chart || rows < 20 || (rows < 30 && cols < 90) || cols < 40);
                        }
                        assert_false(drift_top_rect_overlap(&L.header, &L.table));
                        assert_false(drift_top_rect_overlap(&L.table, &L.chart));
                        assert_false(drift_top_rect_overlap(&L.chart, &L.footer));
                        /* at least 8 data rows from 12 lines up, and the table keeps 2/3 of the body */
                        assert_true(drift_top_layout_table_rows(&L.table) >= 8);
                        check_cols(&L.tcols, cols);
                        assert_true(L.tcols.shown[DRIFT_TOP_TCOL_MARK]);
                        assert_true(L.tcols.shown[DRIFT_TOP_TCOL_NAME]);
                        assert_true(L.tcols.shown[DRIFT_TOP_TCOL_MEAN]);
                        assert_true(L.tcols.shown[DRIFT_TOP_TCOL_MAX]);
                        assert_true(L.tcols.w[DRIFT_TOP_TCOL_NAME] >= 10);
                        if (cols >= 80) {
                            assert_true(L.tcols.shown[DRIFT_TOP_TCOL_SPARK]);
                            assert_true(L.tcols.shown[DRIFT_TOP_TCOL_REL]);
                            assert_true(L.tcols.shown[DRIFT_TOP_TCOL_COS]);
                        }
                        /* the set of columns only grows with the width */
                        int nshown = 0;
                        for (int c = 0; c < DRIFT_TOP_TCOL_COUNT; c++) nshown += L.tcols.shown[c];
                        assert_true(nshown >= prev_shown_by_rows[rows]);
                        prev_shown_by_rows[rows] = nshown;
                    } else {
                        assert_true(empty(&L.table));
                        assert_true(empty(&L.chart));
                        assert_int_equal(L.drill.y, L.header.h);
                        assert_int_equal(L.header.h + L.drill.h + L.footer.h, rows);
                        assert_int_equal(L.drill_title.h, 1);
                        assert_int_equal(L.drill_title.y, L.drill.y);
                        assert_true(inside_of(&L.drill_chart, &L.drill));
                        assert_true(inside_of(&L.drill_table, &L.drill));
                        assert_int_equal(L.drill_title.h + L.drill_chart.h + L.drill_table.h, L.drill.h);
                        assert_false(drift_top_rect_overlap(&L.drill_title, &L.drill_chart));
                        assert_false(drift_top_rect_overlap(&L.drill_chart, &L.drill_table));
                        assert_true(drift_top_layout_table_rows(&L.drill_table) >= 4);
                        if (!empty(&L.drill_chart)) assert_true(L.drill_chart.h >= 4);
                        check_cols(&L.dcols, cols);
                        assert_true(L.dcols.shown[DRIFT_TOP_DCOL_STEP]);
                        assert_true(L.dcols.shown[DRIFT_TOP_DCOL_MEAN]);
                        assert_true(L.dcols.shown[DRIFT_TOP_DCOL_MAX]);
                    }
                    if (o.help) {
                        assert_false(empty(&L.help));
                        /* centred, as large as the text wants or the whole screen */
                        int want_w = DRIFT_TOP_HELP_WIDTH + 2 < cols ? DRIFT_TOP_HELP_WIDTH + 2 : cols;
                        int want_h = DRIFT_TOP_HELP_LINES + 2 < rows ? DRIFT_TOP_HELP_LINES + 2 : rows;
                        assert_int_equal(L.help.w, want_w);
                        assert_int_equal(L.help.h, want_h);
                        assert_int_equal(L.help.x, (cols - want_w) / 2);
                        assert_int_equal(L.help.y, (rows - want_h) / 2);
                    } else {
                        assert_true(empty(&L.help));
                    }
                }
            }
        }
    }
    assert_int_equal(checked, 8L * 4 * 261 * 89);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit_columns_exact),
        cmocka_unit_test(test_exact_80x24),
        cmocka_unit_test(test_exact_40x12),
        cmocka_unit_test(test_wide_chart_side_by_side),
        cmocka_unit_test(test_too_small),
        cmocka_unit_test(test_invariants_all_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
