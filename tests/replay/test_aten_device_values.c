/* Device values of a captured graph (docs/aten-graph.md "Device values"): a
 * node listed in "device_values" is read from its recorded buffer instead of
 * being computed from constants (the recording GPU's pow/exp round
 * differently from the host's libm), unless the caller asks for the ops
 * (DRIFT_DEVICE_VALUES=0); bad entries are DRIFT_E_INPUT naming the node. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "formats/plan.h"
#include "kernels/backend.h"
#include "replay/capture/aten_graph.h"
#include "replay/exec/exec.h"
#include "replay/ir/assign.h"

#include "tests/fp32_run.h"

/* y = x * exp(arange(4)): the exp of a constant is a device value. */
#define NODE(name, target, args, shape) \
    "{\"name\":\"" name "\",\"op\":\"call_function\",\"target\":\"" target "\",\"args\":" args \
    ",\"kwargs\":{},\"val\":{\"shape\":" shape ",\"dtype\":\"float32\"},\"module\":\"emb\"}"
static const char *DOC_HEAD =
    "{\"format\":\"drift-aten-graph\",\"version\":1,\"model_class\":\"Mini\",\"nodes\":["
    "{\"name\":\"x\",\"op\":\"placeholder\",\"target\":\"x\",\"args\":[],\"kwargs\":{},"
    "\"val\":{\"shape\":[4],\"dtype\":\"float32\"},\"module\":\"\"},"
    "{\"name\":\"arange\",\"op\":\"call_function\",\"target\":\"aten.arange.start\",\"args\":[0,4],"
    "\"kwargs\":{\"dtype\":{\"dtype\":\"float32\"},\"device\":{\"device\":\"cuda:0\"}},"
    "\"val\":{\"shape\":[4],\"dtype\":\"float32\"},\"module\":\"emb\"}," NODE("exp", "aten.exp.default", "[{\"node\":\"arange\"}]",
                                                                             "[4]") ","
    NODE("mul", "aten.mul.Tensor", "[{\"node\":\"x\"},{\"node\":\"exp\"}]", "[4]") ","
    "{\"name\":\"output\",\"op\":\"output\",\"target\":\"output\",\"args\":[[{\"node\":\"mul\"}]],\"kwargs\":{},"
    "\"val\":null,\"module\":\"\"}],"
    "\"inputs\":[{\"node\":\"x\",\"kind\":\"user_input\",\"target\":\"hidden_states\",\"role\":\"latents\"}],"
    "\"outputs\":[{\"node\":\"mul\",\"name\":\"output:noise_pred\"}]";

static char *doc_with(const char *device_values) {
    size_t n = strlen(DOC_HEAD) + strlen(device_values) + 32;
    char *d = malloc(n);
    snprintf(d, n, "%s%s%s}", DOC_HEAD, *device_values ? "," : "", device_values);
    return d;
}

static int count_kind(const drift_graph *g, drift_value_kind k, const char *name) {
    int c = 0;
    for (int i = 0; i < drift_graph_count(g); i++) {
        const drift_value *v = drift_graph_value(g, i);
        if (v->kind == k && (!name || (v->name && !strcmp(v->name, name)))) c++;
    }
    return c;
}

static int count_op(const drift_graph *g, drift_op_kind k) {
    int c = 0;
    for (int i = 0; i < drift_graph_count(g); i++) {
        const drift_value *v = drift_graph_value(g, i);
        if (v->kind == DRIFT_VAL_NODE && v->op.kind == k) c++;
    }
    return c;
}

/* Lowers doc (compute: the opts flag), runs it on the cpu backend with x = 1
 * and buffer device:exp = dev (when the graph reads it) into y[4]. */
static void run_doc(const char *doc, int compute, const float *dev, float *y, int *reads_buffer) {
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *g = NULL;
    drift_graph *sem = NULL;
    if (drift_aten_graph_parse(doc, strlen(doc), "device_values.json", &g, &e)) fail_msg("%s: %s", e.where, e.msg);
    drift_aten_lower_opts o = {NULL, NULL, NULL, compute, 0, 0, NULL, NULL, NULL, NULL, NULL};
    if (drift_aten_graph_lower_ex(g, &o, &sem, &e)) fail_msg("%s: %s", e.where, e.msg);
    *reads_buffer = count_kind(sem, DRIFT_VAL_BUFFER, "device:exp");
    if (*reads_buffer) assert_int_equal(count_op(sem, DRIFT_OP_UNARY), 0); /* the exp is not run */
    float x[4] = {1, 1, 1, 1};
    drift_hostset *ps, *bs, *is;
    drift_hostset_create(&ps, &e);
    drift_hostset_create(&bs, &e);
    drift_hostset_create(&is, &e);
    assert_int_equal(drift_hostset_add(bs, "device:exp", DRIFT_F32, 1, (int64_t[]){4}, dev, NULL, NULL, &e), 0);
    assert_int_equal(drift_hostset_add(is, "latents", DRIFT_F32, 1, (int64_t[]){4}, x, NULL, NULL, &e), 0);
    drift_exec_result r;
    test_run_fp32(sem, DRIFT_SIDE_TRAINER, "cpu", ps, bs, is, NULL, NULL, &r);
    assert_int_equal(r.numel, 4);
    memcpy(y, r.f32, 4 * sizeof *y);
    drift_exec_result_free(&r);
    drift_graph_free(sem);
    drift_aten_graph_free(g);
    drift_hostset_free(ps);
    drift_hostset_free(bs);
    drift_hostset_free(is);
}

static void test_device_value_is_read(void **s) {
    (void)s;
    /* not exp(0..3): the replay must take these, not compute its own */
    const float dev[4] = {1.0f, 2.5f, 7.25f, 20.0f};
    float y[4];
    int reads;
    char *doc = doc_with("\"device_values\":{\"exp\":\"device:exp\"}");
    run_doc(doc, 0, dev, y, &reads);
    assert_int_equal(reads, 1);
    for (int i = 0; i < 4; i++) assert_true(y[i] == dev[i]);
    /* DRIFT_DEVICE_VALUES=0: the ops run, the buffer is not a leaf */
    run_doc(doc, 1, dev, y, &reads);
    assert_int_equal(reads, 0);
    for (int i = 0; i < 4; i++) assert_true(y[i] == expf((float)i));
    free(doc);
    /* a document without device values computes them */
    doc = doc_with("");
    run_doc(doc, 0, dev, y, &reads);
    assert_int_equal(reads, 0);
    for (int i = 0; i < 4; i++) assert_true(y[i] == expf((float)i));
    free(doc);
}

static void expect_bad(const char *device_values, const char *n1, const char *n2) {
    char *doc = doc_with(device_values);
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *g = NULL;
    drift_graph *sem = NULL;
    int rc = drift_aten_graph_parse(doc, strlen(doc), "hostile.json", &g, &e);
    if (!rc) rc = drift_aten_graph_lower(g, &sem, &e);
    drift_aten_graph_free(g);
    drift_graph_free(sem);
    free(doc);
    if (rc != DRIFT_E_INPUT) fail_msg("expected DRIFT_E_INPUT, got %d (%s)", rc, e.msg);
    if (!strstr(e.msg, n1) || (n2 && !strstr(e.msg, n2))) fail_msg("message '%s' lacks '%s' / '%s'", e.msg, n1, n2 ? n2 : "");
    print_message("  rejected: %s\n", e.msg);
}

static void test_hostile_device_values(void **s) {
    (void)s;
    expect_bad("\"device_values\":[\"exp\"]", "'device_values'", "expected an object");
    expect_bad("\"device_values\":{\"nope\":\"device:nope\"}", "'nope'", "names no call node");
    expect_bad("\"device_values\":{\"x\":\"device:x\"}", "'x'", "names no call node"); /* a placeholder */
    expect_bad("\"device_values\":{\"exp\":\"exp\"}", "'exp'", "device:NAME");
    expect_bad("\"device_values\":{\"exp\":\"device:\"}", "'exp'", "device:NAME");
    expect_bad("\"device_values\":{\"exp\":3}", "'exp'", "device:NAME");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_value_is_read),
        cmocka_unit_test(test_hostile_device_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
