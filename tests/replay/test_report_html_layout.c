/* replay/analysis/report_html: the heatmap's layout (issue 35). Few steps
 * share the page's width (cells wider than the old fixed 16 px); a site name
 * longer than the label column wraps onto more lines (tspans) and its row
 * grows to hold them; a short name stays on one line. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "replay/analysis/report_html.h"

/* The page for sites x 3 steps, every cell present and differing. */
static char *page(const char *const *sites, size_t n_sites) {
    enum { NS = 3 };
    static double v[8 * NS * DRIFT_HTML_NV];
    static uint8_t present[8 * NS], equal[8 * NS];
    static const int64_t steps[NS] = {0, 1, 2};
    static const long first[NS] = {0, 0, 0};
    for (size_t i = 0; i < n_sites * NS * DRIFT_HTML_NV; i++) v[i] = 1e-3 * (double)(i % 7 + 1);
    memset(present, 1, sizeof present);
    drift_html_report r;
    memset(&r, 0, sizeof r);
    r.title = "t";
    r.source = "s";
    r.model = "m";
    r.n_sites = n_sites;
    r.n_steps = NS;
    r.sites = sites;
    r.steps = steps;
    r.v = v;
    r.present = present;
    r.equal = equal;
    r.first = first;
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(drift_report_html_write(&r, f), 0);
    long len = ftell(f);
    rewind(f);
    char *buf = calloc((size_t)len + 1, 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    return buf;
}

/* The first number after key in s (after start). */
static long after(const char *s, const char *key) {
    const char *p = strstr(s, key);
    assert_non_null(p);
    return strtol(p + strlen(key), NULL, 10);
}

static void test_width_and_wrap(void **state) {
    (void)state;
    const char *sites[2] = {"blocks.7.attn2:out",
                            "transformer_blocks.17.attention.to_out.0:out_of_a_long_module_path_name"};
    char *html = page(sites, 2);
    assert_non_null(strstr(html, "<svg id=\"heatmap\" xmlns=\"http://www.w3.org/2000/svg\" width=\"100%\""));
    assert_true(after(html, "viewBox=\"0 0 ") >= 1000);
    /* cells: the short site's row, then the long one's */
    const char *c0 = strstr(html, "data-site=\"blocks.7.attn2:out\" data-step=\"0\"");
    const char *c1 = strstr(html, "data-site=\"transformer_blocks.17");
    assert_non_null(c0);
    assert_non_null(c1);
    assert_true(after(c0, "width=\"") > 16);
    long h0 = after(c0, "height=\""), h1 = after(c1, "height=\"");
    assert_true(h1 > h0);
    /* the long label in several tspans, the short one in one */
    const char *l0 = strstr(html, "<text class=\"site\"");
    assert_non_null(l0);
    const char *l1 = strstr(l0 + 1, "<text class=\"site\"");
    assert_non_null(l1);
    const char *e0 = strstr(l0, "</text>"), *e1 = strstr(l1, "</text>");
    int n0 = 0, n1 = 0;
    for (const char *p = l0; (p = strstr(p, "<tspan")) && p < e0; p++) n0++;
    for (const char *p = l1; (p = strstr(p, "<tspan")) && p < e1; p++) n1++;
    assert_int_equal(n0, 1);
    assert_true(n1 >= 2);
    free(html);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_width_and_wrap)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
