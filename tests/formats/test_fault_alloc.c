/* Fault injection through formats/alloc.h: every operation below runs once
 * for each N = 0, 1, 2, ... with the N-th allocation failing, until a run
 * completes without reaching an injected failure. Each failing run must
 * return DRIFT_E_NOMEM cleanly (no crash; no leak: the ASan build checks at
 * exit) and leave its output safe to free; the final run must succeed.
 *
 * Only allocations made through drift_malloc & co. can be failed: modules
 * still calling malloc directly pass trivially at the call sites they have
 * not converted (the count of exercised failure points is printed per
 * operation; docs/RELIABILITY.md lists the call sites left to convert). */
#include <pthread.h>
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
#include "formats/json.h"
#include "formats/params.h"
#include "formats/plan.h"
#include "formats/safetensors.h"
#include "formats/trace.h"
#include "replay/graph.h"
#include "replay/models/family.h"

#define MAX_POINTS 200000L

typedef struct op {
    const char *name;
    int (*run)(void *ctx, drift_err *err); /* the operation under test */
    void (*undo)(void *ctx);               /* frees whatever run produced (success or failure) */
    void *ctx;
} op;

/* Runs o over every failure point; returns the number of points. */
static long sweep(const op *o) {
    long n = 0;
    for (;; n++) {
        assert_true(n < MAX_POINTS);
        drift_err err;
        drift_err_clear(&err);
        drift_alloc_fail_after(n);
        int rc = o->run(o->ctx, &err);
        long hit = drift_alloc_injected();
        drift_alloc_fail_after(-1);
        o->undo(o->ctx);
        if (hit == 0) {
            if (rc != DRIFT_OK) fprintf(stderr, "%s: clean run failed: rc %d: %s: %s\n", o->name, rc, err.where, err.msg);
            assert_int_equal(rc, DRIFT_OK);
            break;
        }
        if (rc != DRIFT_E_NOMEM) {
            fprintf(stderr, "%s: allocation %ld failed, but rc = %d (want DRIFT_E_NOMEM = %d): %s: %s\n", o->name, n,
                    rc, DRIFT_E_NOMEM, err.where, err.msg);
            fail();
        }
        assert_true(err.msg[0] != '\0');
    }
    fprintf(stderr, "%-28s %6ld allocation failure point(s), each DRIFT_E_NOMEM, then success\n", o->name, n);
    return n;
}

/* Sticky mode: every allocation from the n-th on fails (a persistent OOM). */
static void sweep_sticky(const op *o, long points) {
    for (long n = 0; n < points; n += 1 + points / 64) {
        drift_err err;
        drift_err_clear(&err);
        drift_alloc_fail_after_ex(n, 1);
        int rc = o->run(o->ctx, &err);
        drift_alloc_fail_after(-1);
        o->undo(o->ctx);
        assert_int_equal(rc, DRIFT_E_NOMEM);
    }
}

static void check_op(const op *o) {
    long points = sweep(o);
    sweep_sticky(o, points);
}

/* ---- the allocator itself ------------------------------------------------- */

static void test_allocator(void **state) {
    (void)state;
    drift_alloc_fail_after(-1);
    void *p = drift_malloc(0);
    assert_non_null(p); /* 0 bytes still gives a block */
    p = drift_realloc(p, 0);
    assert_non_null(p);
    drift_free(p);
    drift_free(NULL);
    assert_null(drift_calloc(SIZE_MAX / 2, 4)); /* overflow */
    assert_null(drift_reallocarray(NULL, SIZE_MAX / 2, 4));
    assert_null(drift_strdup(NULL));
    char *s = drift_strndup("abcdef", 3);
    assert_string_equal(s, "abc");
    drift_free(s);

    long before = drift_alloc_count();
    drift_alloc_fail_after(2);
    void *a = drift_malloc(8), *b = drift_malloc(8), *c = drift_malloc(8), *d = drift_malloc(8);
    assert_non_null(a);
    assert_non_null(b);
    assert_null(c); /* the third allocation from arming */
    assert_non_null(d); /* one-shot */
    assert_int_equal(drift_alloc_injected(), 1);
    assert_int_equal(drift_alloc_count() - before, 4);
    /* realloc failure leaves the block valid */
    drift_alloc_fail_after(0);
    void *e = drift_realloc(a, 1 << 20);
    assert_null(e);
    memset(a, 1, 8);
    drift_free(a);
    drift_free(b);
    drift_free(d);
    /* sticky */
    drift_alloc_fail_after_ex(1, 1);
    a = drift_malloc(1);
    assert_non_null(a);
    assert_null(drift_malloc(1));
    assert_null(drift_calloc(1, 1));
    assert_null(drift_strdup("x"));
    assert_int_equal(drift_alloc_injected(), 3);
    drift_alloc_fail_after(-1);
    b = drift_malloc(1);
    assert_non_null(b);
    assert_int_equal(drift_alloc_injected(), 0);
    drift_free(a);
    drift_free(b);
}

/* Exactly one of many concurrent allocations fails. */
static void *alloc_many(void *arg) {
    long *fails = arg;
    for (int i = 0; i < 20000; i++) {
        void *p = drift_malloc(16);
        if (!p)
            (*fails)++;
        else
            drift_free(p);
    }
    return NULL;
}

static void test_allocator_threads(void **state) {
    (void)state;
    enum { T = 4 };
    pthread_t th[T];
    long fails[T] = {0};
    drift_alloc_fail_after(31337);
    for (int i = 0; i < T; i++) assert_int_equal(pthread_create(&th[i], NULL, alloc_many, &fails[i]), 0);
    for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
    long total = 0;
    for (int i = 0; i < T; i++) total += fails[i];
    assert_int_equal(total, 1);
    assert_int_equal(drift_alloc_injected(), 1);
    drift_alloc_fail_after(-1);
}

/* ---- formats/json ---------------------------------------------------------- */
static const char *k_json =
    "{\"a\": [1, 2.5, -3e2, true, false, null, \"s\\u00e9\\n\"], \"b\": {\"c\": {\"d\": []}, \"e\": \"f\"}, "
    "\"long\": \"" "0123456789012345678901234567890123456789012345678901234567890123456789" "\"}";

static int json_run(void *ctx, drift_err *err) {
    return drift_json_parse(k_json, strlen(k_json), "fault.json", (drift_json_value **)ctx, err);
}
static void json_undo(void *ctx) {
    drift_json_free(*(drift_json_value **)ctx);
    *(drift_json_value **)ctx = NULL;
}

static void test_json(void **state) {
    (void)state;
    drift_json_value *root = NULL;
    op o = {"drift_json_parse", json_run, json_undo, &root};
    check_op(&o);
}

/* ---- formats/plan: parse and compile ---------------------------------------------- */
static const char *k_plan =
    "{\"name\": \"wan2_2\", \"fsdp_master_dtype\": \"fp32\", \"fsdp_reduce_dtype\": \"fp32\",\n"
    " \"diffusion_forward_dtype\": \"bf16\", \"sglang_dit_precision\": \"bf16\",\n"
    " \"input_dtype_policy\": {\"latents\": \"default\", \"cond\": null, \"timestep\": \"fp32\"},\n"
    " \"param_dtype_patterns\": [[\"*.norm2.*\", \"fp32\"], [\"*scale_shift_table\", \"fp32\"],\n"
    "                            [\"blocks.1.*\", \"fp16\"], [\"*.norm_q.*\", \"bf16\"]]}";

static int plan_parse_run(void *ctx, drift_err *err) {
    return drift_plan_parse_json(ctx, k_plan, strlen(k_plan), "fault_plan.json", err);
}
static void plan_undo(void *ctx) { drift_plan_free(ctx); }

typedef struct compile_ctx {
    drift_plan plan;
    drift_param_table table;
    drift_compiled_plan out;
} compile_ctx;

static int compile_run(void *ctx, drift_err *err) {
    compile_ctx *c = ctx;
    memset(&c->out, 0, sizeof c->out);
    return drift_plan_compile(&c->plan, &c->table, &c->out, err);
}
static void compile_undo(void *ctx) {
    compile_ctx *c = ctx;
    drift_compiled_plan_free(&c->out);
    memset(&c->out, 0, sizeof c->out);
}

static int plan_json_run(void *ctx, drift_err *err) {
    compile_ctx *c = ctx;
    char *j = drift_plan_to_json(&c->plan);
    if (!j) return drift_err_set(err, DRIFT_E_NOMEM, "plan", "drift_plan_to_json returned NULL");
    free(j);
    return DRIFT_OK;
}
static void nothing(void *ctx) { (void)ctx; }

static void test_plan(void **state) {
    (void)state;
    drift_plan p;
    drift_plan_init(&p);
    op o = {"drift_plan_parse_json", plan_parse_run, plan_undo, &p};
    check_op(&o);

    compile_ctx c;
    memset(&c, 0, sizeof c);
    drift_err err;
    drift_plan_init(&c.plan);
    assert_int_equal(drift_plan_parse_json(&c.plan, k_plan, strlen(k_plan), "p.json", &err), DRIFT_OK);
    drift_param_table_init(&c.table);
    drift_family_config cfg;
    assert_int_equal(drift_family_parse("tiny-dit:layers=3", &cfg, &err), DRIFT_OK);
    assert_int_equal(drift_family_param_table(&cfg, &c.table, &err), DRIFT_OK);
    op oc = {"drift_plan_compile", compile_run, compile_undo, &c};
    check_op(&oc);
    op oj = {"drift_plan_to_json", plan_json_run, nothing, &c};
    check_op(&oj);
    drift_plan_free(&c.plan);
    drift_param_table_free(&c.table);
}

/* ---- formats/params, replay/models/family ---------------------------------------- */
static const char *k_params = "# wraps: blocks.0 blocks.1\n"
                              "patch_embedding.weight (64, 4, 1, 2, 2)\n"
                              "blocks.0.norm2.weight [64]\n"
                              "blocks.1.scale_shift_table torch.Size([1, 6, 64])\n"
                              "proj_out.bias 16 root\n";

static int params_run(void *ctx, drift_err *err) {
    return drift_param_table_parse_text(ctx, k_params, strlen(k_params), "fault.txt", err);
}
static void params_undo(void *ctx) { drift_param_table_free(ctx); }

static int family_run(void *ctx, drift_err *err) {
    drift_family_config cfg;
    int rc = drift_family_parse("wan2.2:layers=2,dim=64,heads=4,ffn_dim=128", &cfg, err);
    if (rc != DRIFT_OK) return rc;
    return drift_family_param_table(&cfg, ctx, err);
}

static void test_params_family(void **state) {
    (void)state;
    drift_param_table t;
    drift_param_table_init(&t);
    op o = {"drift_param_table_parse_text", params_run, params_undo, &t};
    check_op(&o);
    op of = {"drift_family_param_table", family_run, params_undo, &t};
    check_op(&of);
}

/* ---- formats/safetensors ----------------------------------------------------------- */
typedef struct st_ctx {
    unsigned char *img;
    size_t len;
    drift_safetensors *f;
    char path[1024];
} st_ctx;

static int st_open_run(void *ctx, drift_err *err) {
    st_ctx *c = ctx;
    int rc = drift_safetensors_open_mem(&c->f, c->img, c->len, "fault.safetensors", 0, err);
    for (size_t i = 0; rc == DRIFT_OK && i < drift_safetensors_n_tensors(c->f); i++) {
        float buf[64];
        rc = drift_safetensors_read_f32(c->f, i, buf, 64, err);
    }
    return rc;
}
static void st_open_undo(void *ctx) {
    st_ctx *c = ctx;
    drift_safetensors_close(c->f);
    c->f = NULL;
}

static int st_write_run(void *ctx, drift_err *err) {
    st_ctx *c = ctx;
    float v[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    int64_t s2[2] = {3, 4}, s1[1] = {12};
    drift_safetensors_entry e[] = {{"blocks.0.w", DRIFT_F32, 2, s2, v, NULL}, {"b16", DRIFT_BF16, 1, s1, v, NULL},
                                   {"h", DRIFT_F16, 1, s1, v, NULL}};
    const char *k[] = {"format"}, *val[] = {"pt"};
    return drift_safetensors_write(c->path, e, 3, k, val, 1, err);
}

static void test_safetensors(void **state) {
    (void)state;
    st_ctx c;
    memset(&c, 0, sizeof c);
    const char *tmp = getenv("DRIFT_TMP");
    snprintf(c.path, sizeof c.path, "%s/fault.%ld.safetensors", tmp && tmp[0] ? tmp : "/tmp", (long)getpid());
    op ow = {"drift_safetensors_write", st_write_run, nothing, &c};
    check_op(&ow);
    FILE *f = fopen(c.path, "rb");
    assert_non_null(f);
    c.img = malloc(4096);
    c.len = fread(c.img, 1, 4096, f);
    fclose(f);
    op oo = {"drift_safetensors_open_mem", st_open_run, st_open_undo, &c};
    check_op(&oo);
    unlink(c.path);
    free(c.img);
}

/* ---- replay/graph: JSON in and out ------------------------------------------------ */
static char *slurp_src(const char *rel, size_t *len) {
    const char *src = getenv("DRIFT_SRC");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", src && src[0] ? src : ".", rel);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, f);
    b[*len] = '\0';
    fclose(f);
    return b;
}

typedef struct graph_ctx {
    char *text;
    size_t len;
    drift_graph *g;
} graph_ctx;

static int graph_run(void *ctx, drift_err *err) {
    graph_ctx *c = ctx;
    int rc = drift_graph_from_json(c->text, c->len, "fault_graph.json", &c->g, err);
    if (rc != DRIFT_OK) return rc;
    char *j = drift_graph_to_json(c->g, 2, err);
    if (!j) return err && err->code ? err->code : DRIFT_E_NOMEM;
    free(j);
    return DRIFT_OK;
}
static void graph_undo(void *ctx) {
    graph_ctx *c = ctx;
    drift_graph_free(c->g);
    c->g = NULL;
}

static void test_graph(void **state) {
    (void)state;
    graph_ctx c = {0};
    c.text = slurp_src("fuzz/corpus/fuzz_graph/semantic_ops.json", &c.len);
    if (!c.text) skip();
    op o = {"drift_graph_from_json+to_json", graph_run, graph_undo, &c};
    check_op(&o);
    free(c.text);
}

/* ---- formats/trace: open and read a trace ---------------------------------------- */
typedef struct trace_ctx {
    char path[4096];
    drift_trace_reader *r;
} trace_ctx;

static int trace_run(void *ctx, drift_err *err) {
    trace_ctx *c = ctx;
    int rc = drift_trace_reader_open(&c->r, c->path, DRIFT_TRACE_OPEN_NORMAL, err);
    if (rc != DRIFT_OK) return rc;
    for (size_t s = 0; s < drift_trace_reader_n_sites(c->r); s++) {
        drift_trace_site_info si;
        rc = drift_trace_reader_site(c->r, s, &si, err);
        if (rc != DRIFT_OK) return rc;
    }
    drift_trace_metric *m = NULL;
    size_t n = 0;
    rc = drift_trace_read_metrics(c->r, INT64_MIN, &m, &n, err);
    free(m);
    if (rc != DRIFT_OK) return rc;
    char *g = NULL;
    size_t glen = 0;
    rc = drift_trace_read_graph(c->r, &g, &glen, err);
    free(g);
    return rc;
}
static void trace_undo(void *ctx) {
    trace_ctx *c = ctx;
    drift_trace_reader_close(c->r);
    c->r = NULL;
}

static void test_trace_reader(void **state) {
    (void)state;
    trace_ctx c = {0};
    const char *src = getenv("DRIFT_SRC");
    snprintf(c.path, sizeof c.path, "%s/fuzz/corpus/fuzz_trace/clean_small.h5", src && src[0] ? src : ".");
    if (access(c.path, R_OK) != 0) skip();
    op o = {"drift_trace_reader_open+read", trace_run, trace_undo, &c};
    check_op(&o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allocator),  cmocka_unit_test(test_allocator_threads),
        cmocka_unit_test(test_json),       cmocka_unit_test(test_plan),
        cmocka_unit_test(test_params_family), cmocka_unit_test(test_safetensors),
        cmocka_unit_test(test_graph),      cmocka_unit_test(test_trace_reader),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
