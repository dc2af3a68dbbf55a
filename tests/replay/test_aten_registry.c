/* The op registry (replay/capture/aten_registry.c) against its two other
 * statements: docs/aten-graph.md's opset table and the recorder's opset.txt
 * (what capture keeps whole). A row added without its docs line or its
 * opset.txt line, or a line left behind, fails here. Also: lookups by full
 * target, in-place variants, and names outside the registry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "replay/capture/aten_lower_internal.h"

static char *slurp_src(const char *rel) {
    const char *src = getenv("DRIFT_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", rel);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s (DRIFT_SRC)", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = 0;
    fclose(f);
    return b;
}

static void test_docs_table_matches(void **s) {
    (void)s;
    char *doc = slurp_src("docs/aten-graph.md");
    char *sec = strstr(doc, "## The opset");
    assert_non_null(sec);
    int n, lines = 0;
    const aten_op_row *rows = aten_registry_rows(&n);
    char needle[160];
    for (int i = 0; i < n; i++) {
        snprintf(needle, sizeof needle, "\n| `%s` |", rows[i].base);
        if (!strstr(sec, needle)) fail_msg("registry row '%s' has no line in docs/aten-graph.md's opset table", rows[i].base);
    }
    for (const char *p = strstr(sec, "\n| `"); p; p = strstr(p + 1, "\n| `")) lines++;
    /* one line per row, and the in-place line */
    if (lines != n + 1) fail_msg("docs/aten-graph.md's opset table has %d op lines, the registry %d rows (+1 in-place)", lines, n);
    free(doc);
}

static void test_opset_txt_matches(void **s) {
    (void)s;
    char *txt = slurp_src("recorder/python/drift_recorder/opset.txt");
    int n, want = 0, have = 0;
    const aten_op_row *rows = aten_registry_rows(&n);
    char needle[160];
    for (int i = 0; i < n; i++) {
        if (strchr(rows[i].base, '.') || !strcmp(rows[i].base, "getitem")) continue; /* not ATen ops */
        want++;
        snprintf(needle, sizeof needle, "\naten.%s\n", rows[i].base);
        if (!strstr(txt, needle)) fail_msg("registry row '%s' is missing from opset.txt", rows[i].base);
    }
    for (const char *p = txt; (p = strstr(p, "\naten.")); p++) have++;
    if (have != want) fail_msg("opset.txt lists %d ops, the registry %d", have, want);
    free(txt);
}

static void test_lookup(void **s) {
    (void)s;
    assert_non_null(aten_registry_find("aten.add.Tensor"));
    assert_non_null(aten_registry_find("aten.add.Scalar"));
    assert_string_equal(aten_registry_find("aten.index_select.default")->base, "index_select");
    assert_string_equal(aten_registry_find("getitem")->base, "getitem");
    /* in-place variants of a row are functionalized; unknown ones are not */
    assert_string_equal(aten_registry_find("aten.div_.Tensor")->base, "X_");
    assert_null(aten_registry_find("aten.frobnicate_.default"));
    assert_null(aten_registry_find("aten.frobnicate.default"));
    assert_null(aten_registry_find("aten.conv4d.default"));
    assert_null(aten_registry_find("add")); /* not namespaced: only exact non-ATen names */
    /* no duplicate rows */
    int n;
    const aten_op_row *rows = aten_registry_rows(&n);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (!strcmp(rows[i].base, rows[j].base)) fail_msg("duplicate registry row '%s'", rows[i].base);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_docs_table_matches),
        cmocka_unit_test(test_opset_txt_matches),
        cmocka_unit_test(test_lookup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
