/* replay/capture/aten_matmul_layout.c through the importer: BMM's op->layout (kernels/backend.h
 * DRIFT_BMM_*) says how torch held each matmul operand, read from the captured strides of the
 * parity documents (tests/data/parity/aten_cases.jsonl, written by tests/parity/aten_cases.py):
 * a transposed view is 't', an operand matmul expands over the batch has batch stride 0, and a
 * linear on a transposed 3-d input is torch's bmm of x^T and W^T (both 't', W's batch stride 0)
 * followed by the bias added on its own (the torch profile then makes torch's cuBLAS call). The
 * JSON round trip keeps the bits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/backend.h"
#include "replay/capture/aten_graph.h"
#include "replay/ir/graph.h"

#include "tests/slurp.h"

static const char *testdata(void) {
    const char *d = getenv("DRIFT_TESTDATA");
    return d ? d : "tests/data";
}

/* The lowered semantic graph of the parity case named name (caller frees). */
static drift_graph *lower_case(const char *name) {
    char path[1024], key[160];
    size_t len;
    snprintf(path, sizeof path, "%s/parity/aten_cases.jsonl", testdata());
    char *text = test_slurp(path, &len);
    assert_non_null(text);
    snprintf(key, sizeof key, "\"parity\":{\"name\":\"%s\",", name);
    char *hit = strstr(text, key);
    if (!hit) fail_msg("no parity case %s in %s", name, path);
    char *start = hit, *end = strchr(hit, '\n');
    while (start > text && start[-1] != '\n') start--;
    if (!end) end = text + len;
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *doc = NULL;
    drift_graph *g = NULL;
    if (drift_aten_graph_parse(start, (size_t)(end - start), name, &doc, &e)) fail_msg("%s: %s: %s", name, e.where, e.msg);
    if (drift_aten_graph_lower(doc, &g, &e)) fail_msg("%s: lower: %s: %s", name, e.where, e.msg);
    drift_aten_graph_free(doc);
    free(text);
    return g;
}

/* The layout of the graph's only BMM (fails when there is none or more than one); *adds: ADD nodes. */
static int bmm_layout(const drift_graph *g, int *adds, int *linears) {
    int found = -1, n = 0;
    *adds = *linears = 0;
    for (int id = 0; id < drift_graph_count(g); id++) {
        const drift_value *v = drift_graph_value(g, id);
        if (v->kind != DRIFT_VAL_NODE) continue;
        if (v->op.kind == DRIFT_OP_BMM) found = v->op.layout, n++;
        if (v->op.kind == DRIFT_OP_ADD) (*adds)++;
        if (v->op.kind == DRIFT_OP_LINEAR) (*linears)++;
    }
    assert_int_equal(n, found >= 0 ? 1 : 0);
    return found;
}

static void test_contiguous_operands(void **state) {
    (void)state;
    const char *names[] = {"bmm", "mm", "matmul", "matmul.batched", "baddbmm"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        drift_graph *g = lower_case(names[i]);
        int adds, lin;
        assert_int_equal(bmm_layout(g, &adds, &lin), 0);
        drift_graph_free(g);
    }
}

static void test_transposed_operands(void **state) {
    (void)state;
    int adds, lin;
    drift_graph *g = lower_case("bmm.transposed_b");
    assert_int_equal(bmm_layout(g, &adds, &lin), DRIFT_BMM_B_T);
    drift_graph_free(g);
    /* [2, 3, 16] (strides 48, 1, 3) @ [16, 5]: not folded (48 != 1 * 3): bmm, w expanded */
    g = lower_case("matmul.transposed_in");
    assert_int_equal(bmm_layout(g, &adds, &lin), DRIFT_BMM_A_T | DRIFT_BMM_B_BCAST);
    drift_graph_free(g);
}

static void test_linear_transposed_in(void **state) {
    (void)state;
    int adds, lin;
    drift_graph *g = lower_case("linear.transposed_in");
    assert_int_equal(bmm_layout(g, &adds, &lin), DRIFT_BMM_A_T | DRIFT_BMM_B_T | DRIFT_BMM_B_BCAST);
    assert_int_equal(adds, 1); /* the bias, rounded on its own */
    assert_int_equal(lin, 0);
    /* the IR document keeps the bits */
    drift_err e;
    drift_err_clear(&e);
    char *json = drift_graph_to_json(g, 0, &e);
    if (!json) fail_msg("to_json: %s", e.msg);
    assert_non_null(strstr(json, "\"layout\":11"));
    drift_graph *back = NULL;
    if (drift_graph_from_json(json, strlen(json), "round trip", &back, &e)) fail_msg("from_json: %s: %s", e.where, e.msg);
    char why[256] = "";
    assert_true(drift_graph_equal(g, back, why, sizeof why));
    drift_graph_free(back);
    /* a layout outside the DRIFT_BMM_* bits is refused, naming the attribute */
    char *at = strstr(json, "\"layout\":11");
    memcpy(at, "\"layout\":99", strlen("\"layout\":99"));
    back = NULL;
    assert_int_not_equal(drift_graph_from_json(json, strlen(json), "bad layout", &back, &e), DRIFT_OK);
    assert_null(back);
    assert_non_null(strstr(e.msg, "layout"));
    free(json);
    drift_graph_free(g);
    g = lower_case("linear.transposed_in.nobias");
    assert_int_equal(bmm_layout(g, &adds, &lin), DRIFT_BMM_A_T | DRIFT_BMM_B_T | DRIFT_BMM_B_BCAST);
    assert_int_equal(adds + lin, 0);
    drift_graph_free(g);
    /* a contiguous input keeps the fused LINEAR */
    g = lower_case("linear");
    assert_int_equal(bmm_layout(g, &adds, &lin), -1);
    assert_int_equal(lin, 1);
    drift_graph_free(g);
}

/* a convolution's im2col GEMM is a BMM that stands for cuDNN's convolution in torch */
static void test_conv_stand_in(void **state) {
    (void)state;
    int adds, lin;
    drift_graph *g = lower_case("conv1d.pad");
    assert_int_equal(bmm_layout(g, &adds, &lin), DRIFT_BMM_STAND_IN);
    drift_graph_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contiguous_operands),
        cmocka_unit_test(test_transposed_operands),
        cmocka_unit_test(test_linear_transposed_in),
        cmocka_unit_test(test_conv_stand_in),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
