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
#include "formats/fnmatch.h"
#include "recorder/recorder.h"
#include "formats/json.h"
#include "formats/params.h"
#include "formats/plan.h"
#include "formats/safetensors.h"
#include "formats/trace.h"
#include "formats/trace_index.h"
#include "replay/search/ddmin.h"
#include "replay/ir/graph.h"
#include "replay/models/family.h"
#include "replay/analysis/compare_traces.h"
#include "replay/drive/replay_trace.h"
#include "replay/analysis/sitecmp.h"

#define MAX_POINTS 200000L

/* libhdf5 (1.10) leaks a few metadata-cache entries each time it fails to
 * open a damaged object (test_trace_damaged opens a trace with a torn object
 * header dozens of times); not drift's. Leaks with a drift frame on top are
 * still reported (drift allocates through formats/alloc.c). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libhdf5\n"; }

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

/* ---- formats/trace: check, repair, a damaged trace, the writer ------------------ */
static const char *tmp_dir(void) {
    const char *t = getenv("DRIFT_TMP");
    return t && t[0] ? t : "/tmp";
}

static int copy_file(const char *from, const char *to) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
    return system(cmd) == 0 ? 0 : -1;
}

typedef struct check_ctx {
    char path[4096];
    drift_trace_check_report rep;
} check_ctx;

static int check_run(void *ctx, drift_err *err) {
    check_ctx *c = ctx;
    return drift_trace_check(c->path, &c->rep, err);
}
static void check_undo(void *ctx) { drift_trace_check_report_free(&((check_ctx *)ctx)->rep); }

typedef struct repair_ctx {
    char src[4096], path[4200];
} repair_ctx;

static int repair_run(void *ctx, drift_err *err) {
    repair_ctx *c = ctx;
    if (copy_file(c->src, c->path) != 0) return drift_err_set(err, DRIFT_E_IO, c->path, "cannot copy the seed");
    int64_t trimmed = 0;
    return drift_trace_repair(c->path, &trimmed, err);
}

static void test_trace_check_repair(void **state) {
    (void)state;
    const char *src = getenv("DRIFT_SRC");
    static const char *const seeds[] = {"clean_small.h5", "killed_small.h5"};
    for (size_t i = 0; i < 2; i++) {
        check_ctx c;
        memset(&c, 0, sizeof c);
        snprintf(c.path, sizeof c.path, "%s/fuzz/corpus/fuzz_trace/%s", src && src[0] ? src : ".", seeds[i]);
        if (access(c.path, R_OK) != 0) skip();
        op o = {i ? "drift_trace_check (killed)" : "drift_trace_check (clean)", check_run, check_undo, &c};
        check_op(&o);
    }
    repair_ctx r;
    memset(&r, 0, sizeof r);
    snprintf(r.src, sizeof r.src, "%s/fuzz/corpus/fuzz_trace/killed_small.h5", src && src[0] ? src : ".");
    snprintf(r.path, sizeof r.path, "%s/fault-repair.%ld.h5", tmp_dir(), (long)getpid());
    op o = {"drift_trace_repair (killed)", repair_run, nothing, &r};
    check_op(&o);
    unlink(r.path);
}

/* A trace with one damaged site (tests/data/regress/repair/): open, read,
 * check. The damaged site's record is built in the reader's open. */
static void test_trace_damaged(void **state) {
    (void)state;
    const char *data = getenv("DRIFT_TESTDATA");
    if (!data || !data[0]) skip();
    trace_ctx t = {0};
    snprintf(t.path, sizeof t.path, "%s/fault-damaged.%ld.h5", tmp_dir(), (long)getpid());
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "gzip -dc '%s/regress/repair/torn-ohdr-after-sigkill.damaged-1.commits-753.h5.gz' > '%s'",
             data, t.path);
    if (system(cmd) != 0) skip();
    op o = {"reader open (damaged site)", trace_run, trace_undo, &t};
    check_op(&o);
    check_ctx c;
    memset(&c, 0, sizeof c);
    snprintf(c.path, sizeof c.path, "%s", t.path);
    op oc = {"drift_trace_check (damaged)", check_run, check_undo, &c};
    check_op(&oc);
    unlink(t.path);
}

/* The writer: create, declare, params, start, steps with records, metrics and
 * notes, close; then the file must read back. */
static int write_rank(const char *path, int32_t rank, int32_t world_size, drift_err *err) {
    drift_trace_meta m;
    memset(&m, 0, sizeof m);
    m.side = DRIFT_TRACE_SIDE_TRAINER;
    m.run_id = "fault";
    m.rank = rank;
    m.world_size = world_size;
    m.family = "tiny-dit:layers=1";
    m.guidance_scale = 1.0;
    m.plan_json = "{}";
    drift_trace_writer *w = NULL;
    int rc = drift_trace_writer_create(&w, path, &m, err);
    if (rc) return rc;
    drift_trace_site_decl a = {"blocks.0.ffn:out", DRIFT_F32, 1, {4}, 1, DRIFT_TRACE_COMPRESS_NONE};
    drift_trace_site_decl b = {"output:noise_pred", DRIFT_BF16, 2, {2, 3}, 0, DRIFT_TRACE_COMPRESS_NONE};
    int ia = -1, ib = -1;
    float pw[6] = {1, 2, 3, 4, 5, 6};
    int64_t shp[1] = {6};
    if (!rc) rc = drift_trace_writer_declare_site(w, &a, &ia, err);
    if (!rc) rc = drift_trace_writer_declare_site(w, &b, &ib, err);
    if (!rc) rc = drift_trace_writer_add_param(w, "blocks.0.norm2.weight", 1, shp, NULL, NULL, pw, err);
    if (!rc) rc = drift_trace_writer_set_param_dtype(w, "blocks.0.norm2.weight", DRIFT_F32, err);
    if (!rc) rc = drift_trace_writer_start(w, err);
    for (int64_t s = 0; !rc && s < 3; s++) {
        drift_trace_index ix;
        memset(&ix, 0, sizeof ix);
        ix.step = s;
        float v[6] = {(float)s, 1, 2, 3, 4, 5};
        uint16_t h[6] = {0x3f80, 0x4000, 0, 0, 0, 0};
        drift_trace_metric mr;
        memset(&mr, 0, sizeof mr);
        mr.step = s;
        rc = drift_trace_writer_append(w, ia, &ix, v, 1, err);
        if (!rc) rc = drift_trace_writer_append(w, ib, &ix, h, 0, err);
        if (!rc) rc = drift_trace_writer_add_metric(w, s ? "output:noise_pred" : "blocks.0.ffn:out", &mr, err);
        if (!rc) rc = drift_trace_writer_commit_step(w, s, 0, err);
    }
    drift_err cerr;
    drift_err_clear(&cerr);
    int crc = drift_trace_writer_close(w, &cerr);
    if (!rc && crc) {
        rc = crc;
        if (err) *err = cerr;
    }
    return rc;
}

static int writer_run(void *ctx, drift_err *err) { return write_rank(ctx, 0, 1, err); }

static void test_trace_writer(void **state) {
    (void)state;
    static char path[4096];
    snprintf(path, sizeof path, "%s/fault-writer.%ld.h5", tmp_dir(), (long)getpid());
    op o = {"drift_trace_writer (3 steps)", writer_run, nothing, path};
    check_op(&o);
    drift_err err;
    assert_int_equal(writer_run(path, &err), DRIFT_OK); /* the sticky sweep left a failed file */
    drift_trace_reader *r = NULL;
    assert_int_equal(drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &err), DRIFT_OK);
    size_t n = 0;
    drift_trace_reader_steps(r, &n);
    assert_int_equal(n, 3);
    drift_trace_reader_close(r);
    unlink(path);
}

/* ---- drift merge: an index over two rank traces ----------------------------------- */

typedef struct merge_ctx {
    char rank[2][4096];
    char out[4096];
} merge_ctx;

static int merge_run(void *ctx, drift_err *err) {
    merge_ctx *c = ctx;
    const char *inputs[2] = {c->rank[0], c->rank[1]};
    drift_trace_merge_opts o = {inputs, 2, c->out, 0, 0};
    int rc = drift_trace_merge(&o, err);
    if (rc) return rc;
    drift_trace_reader *r = NULL; /* the index must read back as rank 0's view */
    rc = drift_trace_reader_open(&r, c->out, DRIFT_TRACE_OPEN_NORMAL, err);
    drift_trace_reader_close(r);
    return rc;
}

static void merge_undo(void *ctx) { unlink(((merge_ctx *)ctx)->out); }

static void test_trace_merge(void **state) {
    (void)state;
    static merge_ctx c;
    drift_err err;
    for (int r = 0; r < 2; r++) {
        snprintf(c.rank[r], sizeof c.rank[r], "%s/fault-merge.rank%d.%ld.h5", tmp_dir(), r, (long)getpid());
        assert_int_equal(write_rank(c.rank[r], r, 2, &err), DRIFT_OK);
    }
    snprintf(c.out, sizeof c.out, "%s/fault-merge.index.%ld.h5", tmp_dir(), (long)getpid());
    op o = {"drift_trace_merge", merge_run, merge_undo, &c};
    check_op(&o);
    for (int r = 0; r < 2; r++) unlink(c.rank[r]);
}

/* ---- replay: ddmin, sitecmp, compare_traces --------------------------------------- */
/* fails iff both difference 3 and 11 are applied */
static int ddmin_probe(const unsigned char *mask, size_t n, int slot, void *user, int *fails, drift_err *err) {
    (void)n;
    (void)slot;
    (void)user;
    (void)err;
    *fails = mask[3] && mask[11];
    return DRIFT_OK;
}

static int ddmin_run(void *ctx, drift_err *err) {
    drift_ddmin_result *res = ctx;
    drift_ddmin_opts o = {1, ddmin_probe, NULL, NULL, 0};
    int rc = drift_ddmin_run(16, NULL, &o, res, err);
    if (!rc && (!res->found || res->culprit_size != 2 || !res->culprit[3] || !res->culprit[11]))
        return drift_err_set(err, DRIFT_E_INTERNAL, "ddmin", "wrong culprit");
    return rc;
}
static void ddmin_undo(void *ctx) {
    drift_ddmin_result_free(ctx);
    memset(ctx, 0, sizeof(drift_ddmin_result));
}

static int sitecmp_run(void *ctx, drift_err *err) {
    drift_sitecmp *c = ctx;
    drift_sitecmp_init(c, 2.0);
    float t[8] = {1, 2, 3, 4, 5, 6, 7, 8}, r[8] = {1, 2, 3, 4, 5, 6, 7, 8.5f};
    static const char *const sites[] = {"input:latents", "blocks.0.attn1:out", "blocks.0.ffn:out", "output:noise_pred"};
    int rc = DRIFT_OK;
    for (int64_t step = 0; !rc && step < 2; step++) {
        drift_sitecmp_begin_step(c);
        for (size_t i = 0; !rc && i < 4; i++) rc = drift_sitecmp_add(c, sites[i], DRIFT_F32, t, r, 8, 2, step, NULL, err);
    }
    return rc;
}
static void sitecmp_undo(void *ctx) { drift_sitecmp_free(ctx); }

typedef struct cmp_ctx {
    char a[4096];
    drift_replay_report rep;
} cmp_ctx;

static int compare_run(void *ctx, drift_err *err) {
    cmp_ctx *c = ctx;
    return drift_compare_traces(c->a, c->a, &c->rep, err);
}
static void compare_undo(void *ctx) { drift_replay_report_free(&((cmp_ctx *)ctx)->rep); }

static void test_replay_ops(void **state) {
    (void)state;
    drift_ddmin_result res;
    memset(&res, 0, sizeof res);
    op o = {"drift_ddmin_run", ddmin_run, ddmin_undo, &res};
    check_op(&o);
    drift_sitecmp c;
    memset(&c, 0, sizeof c);
    op os = {"drift_sitecmp_add", sitecmp_run, sitecmp_undo, &c};
    check_op(&os);
    cmp_ctx cc;
    memset(&cc, 0, sizeof cc);
    const char *src = getenv("DRIFT_SRC");
    snprintf(cc.a, sizeof cc.a, "%s/fuzz/corpus/fuzz_trace/clean_small.h5", src && src[0] ? src : ".");
    if (access(cc.a, R_OK) != 0) skip();
    op oc = {"drift_compare_traces", compare_run, compare_undo, &cc};
    check_op(&oc);
}

/* ---- recorder sampling specs (recorder/sampling.c) -------------------------------- */
typedef struct spec_ctx {
    drift_recorder_steps *steps;
    drift_recorder_sites *sites;
} spec_ctx;

static int specs_run(void *ctx, drift_err *err) {
    spec_ctx *c = ctx;
    int rc = drift_recorder_steps_parse(&c->steps, "0:10, every:50, 7, 100:", err);
    if (!rc) rc = drift_recorder_sites_parse(&c->sites, "blocks.*, output:*, !*norm*, input:latents:*", err);
    if (!rc && (!drift_recorder_steps_match(c->steps, 150) || drift_recorder_steps_match(c->steps, 51) ||
                !drift_recorder_sites_match(c->sites, "blocks.3.ffn:out") ||
                drift_recorder_sites_match(c->sites, "blocks.3.norm2:out")))
        rc = drift_err_set(err, DRIFT_E_INTERNAL, "specs", "parsed specs match the wrong things");
    return rc;
}
static void specs_undo(void *ctx) {
    spec_ctx *c = ctx;
    drift_recorder_steps_free(c->steps);
    drift_recorder_sites_free(c->sites);
    c->steps = NULL;
    c->sites = NULL;
}

static void test_recorder_specs(void **state) {
    (void)state;
    spec_ctx c;
    memset(&c, 0, sizeof c);
    op o = {"drift_recorder_steps_parse + drift_recorder_sites_parse", specs_run, specs_undo, &c};
    check_op(&o);
}

/* ---- drift_fnmatch cannot fail --------------------------------------------------- */
static void test_fnmatch_no_alloc(void **state) {
    (void)state;
    static const struct {
        const char *pat, *name;
        int want;
    } k[] = {{"*.norm2.*", "blocks.0.norm2.weight", 1}, {"*.norm2.*", "norm2.weight", 0},
             {"blocks.[0-3].*", "blocks.2.x", 1},       {"blocks.[!0-3].*", "blocks.2.x", 0},
             {"*scale_shift_table", "blocks.9.scale_shift_table", 1}};
    /* every allocation fails from here on: results must not change */
    drift_alloc_fail_after_ex(0, 1);
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) assert_int_equal(drift_fnmatch(k[i].pat, k[i].name), k[i].want);
    /* a name far longer than any FQN */
    static char longname[70000];
    memset(longname, 'a', sizeof longname - 2);
    longname[sizeof longname - 2] = 'b';
    assert_int_equal(drift_fnmatch("*a*b", longname), 1);
    assert_int_equal(drift_fnmatch("*a*c", longname), 0);
    long injected = drift_alloc_injected();
    drift_alloc_fail_after(-1);
    assert_int_equal(injected, 0); /* it did not even try */
    /* a pattern over the limit matches nothing */
    static char longpat[DRIFT_FNMATCH_MAX + 2];
    memset(longpat, '*', sizeof longpat - 1);
    assert_int_equal(drift_fnmatch(longpat, "x"), 0);
    longpat[DRIFT_FNMATCH_MAX] = '\0';
    assert_int_equal(drift_fnmatch(longpat, "x"), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allocator),  cmocka_unit_test(test_allocator_threads),
        cmocka_unit_test(test_json),       cmocka_unit_test(test_plan),
        cmocka_unit_test(test_params_family), cmocka_unit_test(test_safetensors),
        cmocka_unit_test(test_graph),      cmocka_unit_test(test_trace_reader),
        cmocka_unit_test(test_trace_check_repair), cmocka_unit_test(test_trace_damaged),
        cmocka_unit_test(test_trace_writer), cmocka_unit_test(test_trace_merge), cmocka_unit_test(test_replay_ops),
        cmocka_unit_test(test_fnmatch_no_alloc), cmocka_unit_test(test_recorder_specs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
