/* replay/exec/params_pipeline: parameters by reference read, cast and
 * uploaded overlapped (issue 18, "loading at disk speed"), on the CPU
 * backend with a residency cache (what a GPU replay does). The masters are
 * bitwise those of the plain load and the checkpoint's values on 1 and
 * several reader threads, the warmed cache gives the forward the plain
 * load gives, and a changed byte, a missing shard or a consumer that fails
 * stop the pipeline with the right error, nothing adopted (ASan: nothing
 * leaked). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "formats/alloc.h"
#include "formats/checkpoint.h"
#include "formats/dtype.h"
#include "formats/params_ref.h"
#include "formats/plan.h"
#include "replay/exec/forward.h"
#include "replay/exec/params_init.h"
#include "replay/exec/params_load.h"
#include "replay/exec/params_pipeline.h"
#include "replay/drive/synth.h"
#include "formats/trace.h"

#define SPEC "wan2.2:layers=2,dim=64,heads=4,ffn_dim=128,text_dim=32,text_len=8,frames=2,height=8,width=8"

#define OK(expr, e)                                                                  \
    do {                                                                             \
        if ((expr) != DRIFT_OK) {                                                    \
            print_error("%s: %s: %s\n", #expr, (e)->where, (e)->msg);                \
            fail();                                                                  \
        }                                                                            \
    } while (0)

static char g_dir[1024];
static drift_params_ref g_ref;     /* the checkpoint written in setup */
static drift_hostset *g_want;      /* its values, widened (what a by-value trace holds) */

static drift_dtype stored_dtype(const char *fqn) { return strstr(fqn, "norm2") ? DRIFT_F32 : DRIFT_BF16; }

static int fill(size_t i, float *dst, void *user, drift_err *err) {
    (void)err;
    const drift_host_tensor *t = drift_hostset_at(user, i);
    memcpy(dst, t->f32, (size_t)t->numel * sizeof *dst);
    return DRIFT_OK;
}

/* A sharded checkpoint of the seeded model (bf16, norm2 in fp32, 16 KiB
 * shards: many files), and the values it holds. */
static int setup_ck(void **state) {
    (void)state;
    const char *t = getenv("DRIFT_TMP");
    snprintf(g_dir, sizeof g_dir, "%s/pipeline.%ld", t && t[0] ? t : "/tmp", (long)getpid());
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", g_dir, g_dir);
    if (system(cmd) != 0) return -1;
    drift_err e;
    drift_err_clear(&e);
    drift_model *m = NULL;
    drift_hostset *seeded = NULL;
    if (drift_model_create(SPEC, &m, &e) || drift_params_init_seeded(&m->table, 5, &seeded, &e)) return -1;
    drift_ckpt_spec *specs = calloc(m->table.n, sizeof *specs);
    int rc = specs && drift_hostset_create(&g_want, &e) == DRIFT_OK ? 0 : -1;
    for (size_t i = 0; !rc && i < m->table.n; i++) {
        const drift_param_info *pi = &m->table.params[i];
        specs[i] = (drift_ckpt_spec){pi->fqn, stored_dtype(pi->fqn), pi->ndim, pi->shape};
        const drift_host_tensor *s = drift_hostset_at(seeded, i);
        drift_host_tensor *w = NULL;
        rc = drift_hostset_add(g_want, pi->fqn, DRIFT_F32, pi->ndim, pi->shape, s->f32, NULL, &w, &e);
        if (!rc) drift_dtype_round_n(w->f32, (size_t)w->numel, stored_dtype(pi->fqn));
    }
    drift_params_ref_init(&g_ref);
    if (!rc) rc = drift_ckpt_write(g_dir, specs, m->table.n, 16384, fill, seeded, 2, &g_ref, &e);
    if (rc) print_error("setup: %s: %s\n", e.where, e.msg);
    free(specs);
    drift_hostset_free(seeded);
    drift_model_free(m);
    return rc ? -1 : 0;
}

static int teardown_ck(void **state) {
    (void)state;
    drift_params_ref_free(&g_ref);
    drift_hostset_free(g_want);
    return 0;
}

/* A deep copy of the reference (through its JSON, as a trace stores it). */
static drift_params_ref *copy_ref(const drift_params_ref *r) {
    drift_err e;
    drift_err_clear(&e);
    char *json = NULL;
    size_t len = 0;
    OK(drift_params_ref_to_json(r, &json, &len, &e), &e);
    drift_params_ref *c = malloc(sizeof *c);
    assert_non_null(c);
    drift_params_ref_init(c);
    OK(drift_params_ref_parse(c, json, len, "test", &e), &e);
    free(json);
    return c;
}

static void load_plan(drift_plan *p) {
    drift_err e;
    drift_err_clear(&e);
    char path[2048];
    const char *td = getenv("DRIFT_TESTDATA");
    snprintf(path, sizeof path, "%s/plans/wan2_2.json", td ? td : "tests/data");
    drift_plan_init(p);
    OK(drift_plan_load_file(p, path, &e), &e);
}

/* A model whose /params_ref was deferred (as drift_model_load_trace leaves it), its forward, a CPU backend. */
typedef struct rig {
    drift_model *m;
    drift_forward *f;
    drift_backend *be;
    drift_exec_cache *cache;
} rig;

static void rig_open(rig *r, const char *root) {
    drift_err e;
    drift_err_clear(&e);
    memset(r, 0, sizeof *r);
    OK(drift_model_create(SPEC, &r->m, &e), &e);
    r->m->pending_ref = copy_ref(&g_ref);
    r->m->weights_root = root; /* NULL: the recorded root */
    drift_plan plan;
    load_plan(&plan);
    OK(drift_forward_prepare(r->m, &plan, DRIFT_SIDE_TRAINER, NULL, &r->f, &e), &e);
    drift_plan_free(&plan);
    OK(drift_backend_create("cpu", &r->be, &e), &e);
    OK(drift_exec_cache_create(r->be, &r->cache, &e), &e);
}

static void rig_close(rig *r) {
    drift_exec_cache_free(r->cache);
    drift_backend_free(r->be);
    drift_forward_free(r->f);
    drift_model_free(r->m);
    memset(r, 0, sizeof *r);
}

static void assert_sets_equal(const drift_hostset *a, const drift_hostset *b) {
    assert_int_equal(drift_hostset_count(a), drift_hostset_count(b));
    for (size_t i = 0; i < drift_hostset_count(a); i++) {
        const drift_host_tensor *x = drift_hostset_at(a, i), *y = drift_hostset_find(b, x->name);
        assert_non_null(y);
        assert_int_equal(x->numel, y->numel);
        if (memcmp(x->f32, y->f32, (size_t)x->numel * sizeof(float)) != 0) fail_msg("'%s' differs", x->name);
    }
}

static void test_overlapped_equals_plain(void **state) {
    (void)state;
    drift_err e;
    drift_err_clear(&e);
    /* the plain load (no consumer) */
    drift_model *plain = NULL;
    OK(drift_model_create(SPEC, &plain, &e), &e);
    OK(drift_model_load_params_ref(plain, &g_ref, NULL, &e), &e);
    assert_int_equal(plain->load.overlapped, 0);
    assert_sets_equal(plain->params, g_want);
    drift_hostset *inputs = NULL;
    OK(drift_params_init_inputs(&plain->cfg, 3, &inputs, &e), &e);
    drift_plan plan;
    load_plan(&plan);
    drift_forward *pf = NULL;
    OK(drift_forward_prepare(plain, &plan, DRIFT_SIDE_TRAINER, NULL, &pf, &e), &e);
    drift_plan_free(&plan);
    drift_backend *cpu = NULL;
    OK(drift_backend_create("cpu", &cpu, &e), &e);
    drift_exec_result want;
    memset(&want, 0, sizeof want);
    OK(drift_forward_run(pf, plain, cpu, inputs, NULL, NULL, &want, &e), &e);

    const char *threads[] = {"1", "2", "7"};
    for (size_t k = 0; k < sizeof threads / sizeof *threads; k++) {
        setenv("DRIFT_LOAD_THREADS", threads[k], 1);
        rig r;
        rig_open(&r, NULL);
        OK(drift_model_warm_load(r.m, r.f, r.be, r.cache, NULL, &e), &e);
        assert_null(r.m->pending_ref);
        assert_non_null(r.m->params);
        const drift_load_report *l = &r.m->load;
        assert_int_equal(l->overlapped, 1);
        assert_int_equal(l->by_reference, 1);
        assert_int_equal(l->tensors, r.m->table.n);
        assert_int_equal(l->threads, atoi(threads[k]));
        assert_true(l->files > 16); /* more shards than the file table's first allocation */
        assert_true(l->bytes == plain->load.bytes);
        assert_true(l->pipeline_seconds >= l->seconds && l->seconds >= 0);
        assert_true(drift_exec_cache_count(r.cache) > 0);
        /* the masters: the plain load's and the checkpoint's values, bit for bit */
        assert_sets_equal(r.m->params, plain->params);
        assert_sets_equal(r.m->params, g_want);
        /* the warmed cache serves the forward: the plain load's output, bit for bit */
        drift_exec_result got;
        memset(&got, 0, sizeof got);
        OK(drift_forward_run_cached(r.f, r.m, r.be, inputs, r.cache, NULL, NULL, &got, &e), &e);
        assert_int_equal(got.numel, want.numel);
        assert_memory_equal(got.f32, want.f32, (size_t)want.numel * sizeof(float));
        drift_exec_result_free(&got);
        rig_close(&r);
    }
    unsetenv("DRIFT_LOAD_THREADS");
    drift_exec_result_free(&want);
    drift_backend_free(cpu);
    drift_forward_free(pf);
    drift_hostset_free(inputs);
    drift_model_free(plain);
}

static void copy_dir(const char *from, const char *to) {
    char cmd[4000];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", to, from, to);
    assert_int_equal(system(cmd), 0);
}

/* Through the pipeline: a changed byte is the hash mismatch naming tensor and file, on 1 and 4 threads;
 * a missing shard names a tensor of it and the file; nothing is adopted either way. */
static void test_errors_through_the_pipeline(void **state) {
    (void)state;
    char bad[1200], path[1400];
    snprintf(bad, sizeof bad, "%s.bad", g_dir);
    copy_dir(g_dir, bad);
    /* the last tensor of the second shard: one byte near the end of the file */
    const char *file = NULL;
    const char *victim = NULL;
    for (size_t i = 0; i < g_ref.n; i++) {
        if (!file && i > 0 && strcmp(g_ref.t[i].file, g_ref.t[0].file) != 0) file = g_ref.t[i].file;
        if (file && strcmp(g_ref.t[i].file, file) == 0) victim = g_ref.t[i].name;
    }
    assert_non_null(victim);
    snprintf(path, sizeof path, "%s/%s", bad, file);
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    fseek(fp, -3, SEEK_END);
    int c = fgetc(fp);
    fseek(fp, -3, SEEK_END);
    fputc(c ^ 0x20, fp);
    fclose(fp);
    const char *threads[] = {"1", "4"};
    for (size_t k = 0; k < 2; k++) {
        setenv("DRIFT_LOAD_THREADS", threads[k], 1);
        rig r;
        rig_open(&r, bad);
        drift_err e;
        drift_err_clear(&e);
        int rc = drift_model_warm_load(r.m, r.f, r.be, r.cache, NULL, &e);
        assert_int_equal(rc, DRIFT_E_INPUT);
        if (!strstr(e.msg, victim) || !strstr(e.msg, file) || !strstr(e.msg, "content hash"))
            fail_msg("threads %s: '%s' does not name '%s' in %s", threads[k], e.msg, victim, file);
        assert_null(r.m->params);
        assert_non_null(r.m->pending_ref);
        rig_close(&r);
    }
    unsetenv("DRIFT_LOAD_THREADS");
    /* a missing shard: refused before anything is read */
    assert_int_equal(unlink(path), 0);
    rig r;
    rig_open(&r, bad);
    drift_err e;
    drift_err_clear(&e);
    assert_int_equal(drift_model_warm_load(r.m, r.f, r.be, r.cache, NULL, &e), DRIFT_E_INPUT);
    if (!strstr(e.msg, "tensor '") || !strstr(e.msg, file)) fail_msg("missing shard: '%s' does not name %s", e.msg, file);
    assert_null(r.m->params);
    rig_close(&r);
}

/* The consumer fails on its own (a cache of another backend): the readers are cancelled, its error is
 * returned, nothing adopted. */
static void test_consumer_failure_cancels(void **state) {
    (void)state;
    rig r;
    rig_open(&r, NULL);
    drift_backend *other = NULL;
    drift_exec_cache *foreign = NULL;
    drift_err e;
    drift_err_clear(&e);
    OK(drift_backend_create("cpu", &other, &e), &e);
    OK(drift_exec_cache_create(other, &foreign, &e), &e);
    int rc = drift_model_warm_load(r.m, r.f, r.be, foreign, NULL, &e);
    assert_int_equal(rc, DRIFT_E_INTERNAL);
    assert_non_null(strstr(e.msg, "another backend"));
    assert_null(r.m->params);
    assert_non_null(r.m->pending_ref);
    /* and the deferred reference still reads plainly afterwards */
    OK(drift_model_load_pending(r.m, &e), &e);
    assert_null(r.m->pending_ref);
    assert_sets_equal(r.m->params, g_want);
    drift_exec_cache_free(foreign);
    drift_backend_free(other);
    rig_close(&r);
}

/* Every allocation of the pipeline failing in turn (one reader thread): DRIFT_E_NOMEM, nothing adopted,
 * nothing leaked (ASan), the readers stopped; past the last one it succeeds. */
static void test_out_of_memory_anywhere(void **state) {
    (void)state;
    setenv("DRIFT_LOAD_THREADS", "1", 1);
    for (long n = 0;; n++) {
        rig r;
        rig_open(&r, NULL);
        drift_err e;
        drift_err_clear(&e);
        drift_alloc_fail_after(n);
        int rc = drift_model_warm_load(r.m, r.f, r.be, r.cache, NULL, &e);
        long hit = drift_alloc_injected();
        drift_alloc_fail_after(-1);
        if (hit == 0) {
            if (rc) fail_msg("after %ld allocations: %s", n, e.msg);
            assert_sets_equal(r.m->params, g_want);
            rig_close(&r);
            break;
        }
        if (rc != DRIFT_E_NOMEM) fail_msg("allocation %ld failed: rc %d: %s", n, rc, e.msg);
        assert_null(r.m->params);
        assert_non_null(r.m->pending_ref);
        rig_close(&r);
    }
    unsetenv("DRIFT_LOAD_THREADS");
}

/* By value: a trace's whole /params, deferred by drift_model_load_trace and streamed on one thread
 * while the warm-up uploads: the plain load's masters and forward, bit for bit; with no consumer
 * too; every allocation failing in turn is DRIFT_E_NOMEM with nothing adopted or leaked. */
static void test_by_value_trace(void **state) {
    (void)state;
    drift_err e;
    drift_err_clear(&e);
    char path[1200];
    snprintf(path, sizeof path, "%s/val.h5", g_dir);
    drift_plan plan;
    load_plan(&plan);
    drift_synth_opts so;
    drift_synth_opts_init(&so);
    so.model = SPEC;
    so.seed = 5;
    so.steps = 1;
    so.trainer_plan = so.rollout_plan = &plan;
    so.trainer_path = path;
    OK(drift_synth_record(&so, &e), &e);
    drift_trace_reader *r = NULL;
    OK(drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &e), &e);
    drift_model *plain = NULL;
    OK(drift_model_create(SPEC, &plain, &e), &e);
    OK(drift_model_load_trace(plain, r, &e), &e);
    drift_hostset *inputs = NULL;
    OK(drift_params_init_inputs(&plain->cfg, 3, &inputs, &e), &e);
    drift_forward *pf = NULL;
    OK(drift_forward_prepare(plain, &plan, DRIFT_SIDE_TRAINER, NULL, &pf, &e), &e);
    drift_backend *cpu = NULL;
    OK(drift_backend_create("cpu", &cpu, &e), &e);
    drift_exec_result want;
    memset(&want, 0, sizeof want);
    OK(drift_forward_run(pf, plain, cpu, inputs, NULL, NULL, &want, &e), &e);
    for (long n = -2;; n++) { /* -2: overlapped; -1: no consumer; 0...: the n-th allocation fails */
        rig g;
        memset(&g, 0, sizeof g);
        OK(drift_model_create(SPEC, &g.m, &e), &e);
        g.m->defer_params = 1;
        OK(drift_model_load_trace(g.m, r, &e), &e);
        assert_null(g.m->params);
        assert_non_null(g.m->pending_trace);
        OK(drift_forward_prepare(g.m, &plan, DRIFT_SIDE_TRAINER, NULL, &g.f, &e), &e);
        OK(drift_backend_create("cpu", &g.be, &e), &e);
        if (n == -1) {
            OK(drift_model_load_pending(g.m, &e), &e);
            assert_null(g.m->pending_trace);
            assert_sets_equal(g.m->params, plain->params);
            rig_close(&g);
            continue;
        }
        int rc;
        for (;; n++) { /* a failed attempt leaves the model as it was: the next one reuses it */
            OK(drift_exec_cache_create(g.be, &g.cache, &e), &e);
            if (n >= 0) drift_alloc_fail_after(n);
            rc = drift_model_warm_load(g.m, g.f, g.be, g.cache, NULL, &e);
            long hit = n >= 0 ? drift_alloc_injected() : 0;
            drift_alloc_fail_after(-1);
            if (!hit) break;
            if (rc != DRIFT_E_NOMEM) fail_msg("allocation %ld failed: rc %d: %s", n, rc, e.msg);
            assert_null(g.m->params);
            assert_non_null(g.m->pending_trace);
            drift_exec_cache_free(g.cache);
            g.cache = NULL;
        }
        if (rc) fail_msg("by value, n %ld: %s", n, e.msg);
        assert_null(g.m->pending_trace);
        assert_int_equal(g.m->load.overlapped, 1);
        assert_int_equal(g.m->load.by_reference, 0);
        assert_int_equal(g.m->load.tensors, g.m->table.n);
        assert_sets_equal(g.m->params, plain->params);
        drift_exec_result got;
        memset(&got, 0, sizeof got);
        OK(drift_forward_run_cached(g.f, g.m, g.be, inputs, g.cache, NULL, NULL, &got, &e), &e);
        assert_memory_equal(got.f32, want.f32, (size_t)want.numel * sizeof(float));
        drift_exec_result_free(&got);
        rig_close(&g);
        if (n >= 0) break; /* ran past every allocation */
    }
    drift_exec_result_free(&want);
    drift_backend_free(cpu);
    drift_forward_free(pf);
    drift_hostset_free(inputs);
    drift_model_free(plain);
    drift_trace_reader_close(r);
    drift_plan_free(&plan);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_overlapped_equals_plain),
        cmocka_unit_test(test_errors_through_the_pipeline),
        cmocka_unit_test(test_consumer_failure_cancels),
        cmocka_unit_test(test_out_of_memory_anywhere),
        cmocka_unit_test(test_by_value_trace),
    };
    return cmocka_run_group_tests(tests, setup_ck, teardown_ck);
}
