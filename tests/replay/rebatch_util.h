/* Shared by the re-batching tests (test_aten_rebatch.c, test_aten_torch_strides.c): a captured
 * graph fixture of tests/data/graphs/rebatch loaded as a model, and one fp32 cpu run of a model
 * with deterministic values. Include after cmocka.h. */
#ifndef DRIFT_TESTS_REBATCH_UTIL_H
#define DRIFT_TESTS_REBATCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>

#include "replay/capture/aten_model.h"
#include "tests/fp32_run.h"
#include "tests/slurp.h"

/* The text of tests/data/graphs/rebatch/NAME (caller frees), its length in *len; fails the test
 * when it cannot be read. */
static inline char *rb_read(const char *name, size_t *len) {
    char path[1024];
    const char *td = getenv("DRIFT_TESTDATA");
    snprintf(path, sizeof path, "%s/graphs/rebatch/%s", td ? td : "tests/data", name);
    char *json = test_slurp(path, len);
    if (!json) fail_msg("cannot read %s", path);
    return json;
}

/* tests/data/graphs/rebatch/NAME as a captured-graph model (caller frees); fails the test when it
 * cannot be read or built. */
static inline drift_model *rb_load(const char *name) {
    size_t len = 0;
    char *json = rb_read(name, &len);
    drift_model *m = NULL;
    drift_err e;
    drift_err_clear(&e);
    if (drift_capture_model_create(json, len, name, &m, &e)) fail_msg("%s: %s", e.where, e.msg);
    free(json);
    return m;
}

/* The value of every user input at flat index i, and of every parameter and buffer at k. */
static inline float rb_xval(int64_t i) { return (float)((i * 37 % 23) - 11) * 0.125f; }
static inline float rb_pval(int64_t k) { return (float)k * 0.25f + 1.0f; }

/* Runs m on cpu (fp32 plan) with those values into *r (caller frees with drift_exec_result_free):
 * the run's error code, e filled. */
static inline int rb_try_run(const drift_model *m, drift_exec_result *r, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    drift_hostset *ps = NULL, *bs = NULL, *is = NULL;
    drift_hostset_create(&ps, &e);
    drift_hostset_create(&bs, &e);
    drift_hostset_create(&is, &e);
    for (int i = 0; i < drift_graph_count(m->sem); i++) {
        const drift_value *v = drift_graph_value(m->sem, i);
        if (v->kind != DRIFT_VAL_PARAM && v->kind != DRIFT_VAL_INPUT && v->kind != DRIFT_VAL_BUFFER) continue;
        float *d = malloc((size_t)v->numel * sizeof *d);
        assert_non_null(d);
        for (int64_t k = 0; k < v->numel; k++) d[k] = v->kind == DRIFT_VAL_INPUT ? rb_xval(k) : rb_pval(k);
        drift_hostset *to = v->kind == DRIFT_VAL_PARAM ? ps : v->kind == DRIFT_VAL_BUFFER ? bs : is;
        assert_int_equal(drift_hostset_add(to, v->name, DRIFT_F32, v->ndim, v->shape, d, NULL, NULL, &e), 0);
        free(d);
    }
    const int rc = test_try_run_fp32(m->sem, DRIFT_SIDE_TRAINER, "cpu", ps, bs, is, NULL, NULL, r, err);
    drift_hostset_free(ps);
    drift_hostset_free(bs);
    drift_hostset_free(is);
    return rc;
}

/* rb_try_run, any failure failing the test. */
static inline void rb_run(const drift_model *m, drift_exec_result *r) {
    drift_err e;
    if (rb_try_run(m, r, &e)) fail_msg("%s: %s", e.where, e.msg);
}

#endif
