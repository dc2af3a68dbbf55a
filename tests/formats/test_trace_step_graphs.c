/* formats/trace: per-step graphs (docs/format.md 9.1): /graph_steps and the
 * step-graph notes written through the writer API and read back, the
 * writer's misuse errors, and a reader that sees only committed steps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "test_trace_util.h"

static const char *const G1 = "{\"format\":\"drift-aten-graph\",\"model_class\":\"One\"}";
static const char *const G2 = "{\"format\":\"drift-aten-graph\",\"model_class\":\"Two\"}";

static drift_trace_writer *open_writer(const char *path, int reserve) {
    drift_err e;
    drift_err_clear(&e);
    drift_trace_meta m = tt_meta();
    drift_trace_writer *w = NULL;
    assert_int_equal(drift_trace_writer_create(&w, path, &m, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_set_graph(w, "{\"g\":0}", 7, &e), DRIFT_OK);
    if (reserve) assert_int_equal(drift_trace_writer_reserve_step_graphs(w, &e), DRIFT_OK);
    if (reserve) assert_int_equal(drift_trace_writer_reserve_step_graphs(w, &e), DRIFT_OK); /* twice: no-op */
    assert_int_equal(drift_trace_writer_start(w, &e), DRIFT_OK);
    return w;
}

static void test_round_trip(void **state) {
    (void)state;
    drift_err e;
    drift_err_clear(&e);
    const char *path = tt_path("sg.h5");
    drift_trace_writer *w = open_writer(path, 1);
    /* step 0: /graph; 1: graph 1; 2: graph 2; 3: graph 1 again; 4: none; 5 written but never committed */
    assert_int_equal(drift_trace_writer_commit_step(w, 0, 0, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_step_graph(w, 1, 1, G1, strlen(G1), NULL, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_commit_step(w, 1, 0, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_step_graph(w, 2, 2, G2, strlen(G2), NULL, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_commit_step(w, 2, 0, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_step_graph(w, 3, 1, NULL, 0, NULL, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_commit_step(w, 3, 0, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_step_graph(w, 4, 0, NULL, 0, "trace failed: boom", &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_commit_step(w, 4, 0, &e), DRIFT_OK);
    /* misuse: a number skipped, a new number without its JSON, a graph before /graph_steps is reserved */
    assert_int_equal(drift_trace_writer_step_graph(w, 5, 4, G1, strlen(G1), NULL, &e), DRIFT_E_USAGE);
    assert_non_null(strstr(e.msg, "expected 1..2"));
    drift_err_clear(&e);
    assert_int_equal(drift_trace_writer_step_graph(w, 5, 3, NULL, 0, NULL, &e), DRIFT_E_USAGE);
    drift_err_clear(&e);
    assert_int_equal(drift_trace_writer_step_graph(w, 5, 3, G2, strlen(G2), NULL, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_reserve_step_graphs(w, &e), DRIFT_E_USAGE); /* after start */
    drift_err_clear(&e);
    assert_int_equal(drift_trace_writer_close(w, &e), DRIFT_OK);

    drift_trace_reader *r = NULL;
    assert_int_equal(drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &e), DRIFT_OK);
    drift_trace_step_graph *sg = NULL;
    size_t n = 0;
    assert_int_equal(drift_trace_read_step_graphs(r, &sg, &n, &e), DRIFT_OK);
    assert_int_equal(n, 5); /* step 5 never committed: its note does not count */
    const int64_t want[5] = {0, 1, 2, 1, -1};
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(sg[i].step, (int64_t)i);
        assert_int_equal(sg[i].graph, want[i]);
    }
    assert_int_equal(sg[1].offset, 0);
    assert_int_equal(sg[1].length, (int64_t)strlen(G1));
    assert_int_equal(sg[2].offset, (int64_t)strlen(G1));
    assert_int_equal(sg[3].offset, sg[1].offset);
    assert_string_equal(sg[4].reason, "trace failed: boom");
    char *json = NULL;
    size_t len = 0;
    assert_int_equal(drift_trace_read_step_graph(r, &sg[2], &json, &len, &e), DRIFT_OK);
    assert_int_equal(len, strlen(G2));
    assert_string_equal(json, G2);
    free(json);
    /* bytes outside the dataset: named */
    drift_trace_step_graph bad = sg[2];
    bad.offset = 1000;
    assert_int_equal(drift_trace_read_step_graph(r, &bad, &json, &len, &e), DRIFT_E_INPUT);
    assert_non_null(strstr(e.where, "/graph_steps"));
    assert_non_null(strstr(e.msg, "the dataset holds"));
    drift_err_clear(&e);
    drift_trace_step_graph one;
    assert_int_equal(drift_trace_step_graph_of(r, 3, &one, &e), DRIFT_OK);
    assert_int_equal(one.graph, 1);
    assert_int_equal(drift_trace_step_graph_of(r, 99, &one, &e), DRIFT_OK); /* not committed: /graph */
    assert_int_equal(one.graph, 0);
    free(sg);
    drift_trace_reader_close(r);
}

/* A trace without /graph_steps: every step uses /graph; a writer refuses a graph it has nowhere to put. */
static void test_old_trace(void **state) {
    (void)state;
    drift_err e;
    drift_err_clear(&e);
    const char *path = tt_path("old.h5");
    drift_trace_writer *w = open_writer(path, 0);
    assert_int_equal(drift_trace_writer_step_graph(w, 0, 1, G1, strlen(G1), NULL, &e), DRIFT_E_USAGE);
    assert_non_null(strstr(e.msg, "reserve_step_graphs"));
    drift_err_clear(&e);
    assert_int_equal(drift_trace_writer_commit_step(w, 0, 0, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_close(w, &e), DRIFT_OK);
    drift_trace_reader *r = NULL;
    assert_int_equal(drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &e), DRIFT_OK);
    drift_trace_step_graph *sg = NULL;
    size_t n = 0;
    assert_int_equal(drift_trace_read_step_graphs(r, &sg, &n, &e), DRIFT_OK);
    assert_int_equal(n, 1);
    assert_int_equal(sg[0].graph, 0);
    drift_trace_step_graph g = {.step = 0, .graph = 1, .offset = 0, .length = 4};
    char *json = NULL;
    size_t len = 0;
    assert_int_equal(drift_trace_read_step_graph(r, &g, &json, &len, &e), DRIFT_E_INPUT); /* no /graph_steps */
    assert_non_null(strstr(e.msg, "missing"));
    free(sg);
    drift_trace_reader_close(r);
}

int main(void) {
    if (tt_setup_tmp("trace_sg")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_old_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
