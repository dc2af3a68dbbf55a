/* formats/plan: parsing, flag overlays, serialisation and
 * compile_param_dtype_maps (DESIGN.md s5). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>

#include <cmocka.h>

#include "formats/plan.h"

/* ---- helpers ------------------------------------------------------------ */

static const char *testdata(void) {
    const char *d = getenv("DRIFT_TESTDATA");
    return d ? d : "tests/data";
}

static void plan_path(char *buf, size_t n, const char *file) {
    snprintf(buf, n, "%s/plans/%s", testdata(), file);
}

static void load_fixture(drift_plan *p, const char *file) {
    char path[1024];
    plan_path(path, sizeof path, file);
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_plan_load_file(p, path, &err);
    if (rc != DRIFT_OK) print_error("%s: %s: %s\n", file, err.where, err.msg);
    assert_int_equal(rc, DRIFT_OK);
}

static void parse_ok(drift_plan *p, const char *text) {
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_plan_parse_json(p, text, strlen(text), "t.json", &err);
    if (rc != DRIFT_OK) print_error("%s: %s\n", err.where, err.msg);
    assert_int_equal(rc, DRIFT_OK);
}

/* Expects the plan text to fail with code at where; msg must equal exact_msg
 * if given, else contain sub. */
static void parse_fail(const char *text, int code, const char *where, const char *exact_msg, const char *sub) {
    drift_plan p;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_plan_parse_json(&p, text, strlen(text), "t.json", &err);
    if (rc != code || strcmp(err.where, where) != 0 || (exact_msg && strcmp(err.msg, exact_msg) != 0) ||
        (sub && !strstr(err.msg, sub)))
        print_error("text %s\n  got rc %d where '%s' msg '%s'\n", text, rc, err.where, err.msg);
    assert_int_equal(rc, code);
    assert_string_equal(err.where, where);
    if (exact_msg) assert_string_equal(err.msg, exact_msg);
    if (sub) assert_non_null(strstr(err.msg, sub));
    /* left initialised with defaults */
    assert_int_equal(p.n_patterns, 0);
    assert_null(p.patterns);
    assert_int_equal(p.diffusion_forward_dtype, DRIFT_BF16);
    drift_plan_free(&p);
}

static void tbl_add(drift_param_table *t, const char *fqn, int64_t d0, int64_t d1) {
    int64_t shape[2] = {d0, d1};
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_param_table_add(t, fqn, d1 ? 2 : 1, shape, DRIFT_PARAM_WRAP_AUTO, &err);
    if (rc != DRIFT_OK) print_error("%s: %s\n", fqn, err.msg);
    assert_int_equal(rc, DRIFT_OK);
}

/* A 2-block Wan-like table with bare diffusers root FQNs (dim 8). */
static void wan_table(drift_param_table *t) {
    drift_param_table_init(t);
    drift_err err;
    int w;
    assert_int_equal(drift_param_table_add_wrap(t, "blocks.0", &w, &err), DRIFT_OK);
    assert_int_equal(drift_param_table_add_wrap(t, "blocks.1", &w, &err), DRIFT_OK);
    tbl_add(t, "patch_embedding.weight", 8, 64);                           /* 0 */
    tbl_add(t, "patch_embedding.bias", 8, 0);                              /* 1 */
    tbl_add(t, "condition_embedder.time_embedder.linear_1.weight", 8, 16); /* 2 */
    tbl_add(t, "condition_embedder.time_embedder.linear_1.bias", 8, 0);    /* 3 */
    tbl_add(t, "condition_embedder.time_embedder.linear_2.weight", 8, 8);  /* 4 */
    tbl_add(t, "condition_embedder.time_embedder.linear_2.bias", 8, 0);    /* 5 */
    tbl_add(t, "condition_embedder.time_proj.weight", 48, 8);              /* 6 */
    for (int b = 0; b < 2; b++) {
        char n[128];
        snprintf(n, sizeof n, "blocks.%d.scale_shift_table", b);           /* 7, 12 */
        int64_t s3[3] = {1, 6, 8};
        assert_int_equal(drift_param_table_add(t, n, 3, s3, DRIFT_PARAM_WRAP_AUTO, &err), DRIFT_OK);
        snprintf(n, sizeof n, "blocks.%d.attn1.to_q.weight", b);           /* 8, 13 */
        tbl_add(t, n, 8, 8);
        snprintf(n, sizeof n, "blocks.%d.norm2.weight", b);                /* 9, 14 */
        tbl_add(t, n, 8, 0);
        snprintf(n, sizeof n, "blocks.%d.norm2.bias", b);                  /* 10, 15 */
        tbl_add(t, n, 8, 0);
        snprintf(n, sizeof n, "blocks.%d.ffn.net.0.proj.weight", b);       /* 11, 16 */
        tbl_add(t, n, 32, 8);
    }
    int64_t s3[3] = {1, 2, 8};
    assert_int_equal(drift_param_table_add(t, "scale_shift_table", 3, s3, DRIFT_PARAM_WRAP_AUTO, &err), DRIFT_OK); /* 17 */
    tbl_add(t, "proj_out.weight", 64, 8);                                  /* 18 */
    assert_int_equal(t->n, 19);
}

static void flag_ok(drift_plan *p, const char *name, const char *value) {
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_plan_apply_flag(p, name, value, &err);
    if (rc != DRIFT_OK) print_error("%s %s: %s\n", name, value, err.msg);
    assert_int_equal(rc, DRIFT_OK);
}

static void flag_fail(const char *name, const char *value, const char *sub) {
    drift_plan p;
    drift_plan_init(&p);
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_plan_apply_flag(&p, name, value, &err);
    if (rc != DRIFT_E_USAGE || !strstr(err.msg, sub))
        print_error("%s %s: rc %d where '%s' msg '%s'\n", name, value ? value : "(null)", rc, err.where, err.msg);
    assert_int_equal(rc, DRIFT_E_USAGE);
    assert_string_equal(err.where, name);
    assert_non_null(strstr(err.msg, sub));
    assert_int_equal(p.n_patterns, 0);
    drift_plan_free(&p);
}

static void compile_ok(const drift_plan *p, const drift_param_table *t, drift_compiled_plan *c) {
    drift_err err;
    drift_err_clear(&err);
    memset(c, 0, sizeof *c);
    int rc = drift_plan_compile(p, t, c, &err);
    if (rc != DRIFT_OK) print_error("compile: %s: %s\n", err.where, err.msg);
    assert_int_equal(rc, DRIFT_OK);
}

static void expect_entry(const drift_wrap_map *m, size_t i, const char *local, size_t param_index,
                         drift_dtype dt, size_t pattern_index) {
    assert_true(i < m->n);
    assert_string_equal(m->entries[i].local_fqn, local);
    assert_int_equal(m->entries[i].param_index, param_index);
    assert_int_equal(m->entries[i].dtype, dt);
    assert_int_equal(m->entries[i].pattern_index, pattern_index);
}

/* ---- parsing ------------------------------------------------------------ */

static void test_defaults(void **state) {
    (void)state;
    drift_plan p;
    drift_plan_init(&p);
    assert_string_equal(p.name, "");
    assert_string_equal(p.source, "flags");
    assert_int_equal(p.fsdp_master_dtype, DRIFT_F32);
    assert_int_equal(p.fsdp_reduce_dtype, DRIFT_F32);
    assert_int_equal(p.diffusion_forward_dtype, DRIFT_BF16);
    assert_int_equal(p.sglang_dit_precision, DRIFT_BF16);
    for (int i = 0; i < DRIFT_INPUT_COUNT; i++) assert_int_equal(p.inputs[i].kind, DRIFT_INPUT_PASSTHROUGH);
    assert_int_equal(p.n_patterns, 0);
    assert_int_equal(p.rope_provenance, DRIFT_BUF_CPU_FP64);
    drift_plan_free(&p);
    drift_plan_free(NULL);

    /* an empty object is the defaults */
    parse_ok(&p, "{}");
    assert_string_equal(p.source, "t.json");
    assert_int_equal(p.diffusion_forward_dtype, DRIFT_BF16);
    drift_plan_free(&p);
}

static void test_every_fixture_parses(void **state) {
    (void)state;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/plans", testdata());
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json") != 0) continue;
        drift_plan p;
        load_fixture(&p, e->d_name);
        char path[1100];
        plan_path(path, sizeof path, e->d_name);
        assert_string_equal(p.source, path);
        /* the name inside is the file's stem */
        assert_int_equal(strlen(p.name), l - 5);
        assert_memory_equal(p.name, e->d_name, l - 5);
        /* all fixtures use the default global flags */
        assert_int_equal(p.fsdp_master_dtype, DRIFT_F32);
        assert_int_equal(p.fsdp_reduce_dtype, DRIFT_F32);
        assert_int_equal(p.diffusion_forward_dtype, DRIFT_BF16);
        assert_int_equal(p.sglang_dit_precision, DRIFT_BF16);
        /* serialise and parse back: same plan */
        char *js = drift_plan_to_json(&p);
        assert_non_null(js);
        drift_plan q;
        parse_ok(&q, js);
        assert_string_equal(q.name, p.name);
        assert_int_equal(q.n_patterns, p.n_patterns);
        for (size_t k = 0; k < p.n_patterns; k++) {
            assert_string_equal(q.patterns[k].glob, p.patterns[k].glob);
            assert_int_equal(q.patterns[k].dtype, p.patterns[k].dtype);
        }
        for (int k = 0; k < DRIFT_INPUT_COUNT; k++) {
            assert_int_equal(q.inputs[k].kind, p.inputs[k].kind);
            assert_int_equal(q.inputs[k].dtype, p.inputs[k].dtype);
        }
        drift_plan_free(&q);
        free(js);
        drift_plan_free(&p);
        n++;
    }
    closedir(d);
    assert_true(n >= 8);
}

static void test_fixture_contents(void **state) {
    (void)state;
    drift_plan p;
    char path[1024], origin[1100];
    load_fixture(&p, "wan_controlnet.json");
    plan_path(path, sizeof path, "wan_controlnet.json");
    assert_string_equal(p.name, "wan_controlnet");
    assert_int_equal(p.n_patterns, 3);
    assert_string_equal(p.patterns[0].glob, "*.norm2.*");
    assert_string_equal(p.patterns[1].glob, "*scale_shift_table");
    assert_string_equal(p.patterns[2].glob, "*.condition_embedder.time_embedder.*");
    for (int k = 0; k < 3; k++) assert_int_equal(p.patterns[k].dtype, DRIFT_F32);
    snprintf(origin, sizeof origin, "%s:9:6", path);
    assert_string_equal(p.patterns[0].origin, origin);
    snprintf(origin, sizeof origin, "%s:11:6", path);
    assert_string_equal(p.patterns[2].origin, origin);
    assert_int_equal(p.inputs[DRIFT_INPUT_LATENTS].kind, DRIFT_INPUT_DEFAULT);
    assert_int_equal(p.inputs[DRIFT_INPUT_COND].kind, DRIFT_INPUT_DEFAULT);
    assert_int_equal(p.inputs[DRIFT_INPUT_TIMESTEP].kind, DRIFT_INPUT_EXPLICIT);
    assert_int_equal(p.inputs[DRIFT_INPUT_TIMESTEP].dtype, DRIFT_F32);
    drift_plan_free(&p);

    load_fixture(&p, "cosmos3.json");
    assert_int_equal(p.n_patterns, 1);
    assert_string_equal(p.patterns[0].glob, "*time_embedder*");
    assert_int_equal(p.inputs[DRIFT_INPUT_LATENTS].kind, DRIFT_INPUT_DEFAULT);
    assert_int_equal(p.inputs[DRIFT_INPUT_COND].kind, DRIFT_INPUT_PASSTHROUGH);
    assert_int_equal(p.inputs[DRIFT_INPUT_TIMESTEP].kind, DRIFT_INPUT_EXPLICIT);
    drift_plan_free(&p);

    load_fixture(&p, "qwen_image.json");
    assert_int_equal(p.n_patterns, 0);
    for (int k = 0; k < DRIFT_INPUT_COUNT; k++) assert_int_equal(p.inputs[k].kind, DRIFT_INPUT_PASSTHROUGH);
    drift_plan_free(&p);

    drift_err err;
    assert_int_equal(drift_plan_load_file(&p, "/nonexistent/plan.json", &err), DRIFT_E_IO);
    assert_string_equal(err.where, "/nonexistent/plan.json");
    drift_plan_free(&p);
}

static void test_full_plan_and_object_form(void **state) {
    (void)state;
    drift_plan p;
    parse_ok(&p,
             "{\"name\": \"x\", \"fsdp_master_dtype\": \"bf16\", \"fsdp_reduce_dtype\": \"fp16\",\n"
             " \"diffusion_forward_dtype\": \"fp16\", \"sglang_dit_precision\": \"fp32\",\n"
             " \"input_dtype_policy\": {\"timestep\": \"bf16\", \"latents\": \"fp16\"},\n"
             " \"param_dtype_patterns\": {\"*b*\": \"fp32\", \"*a*\": \"bf16\", \"*.c\": \"fp16\"},\n"
             " \"buffer_provenance\": {\"rope\": \"device\"}}");
    assert_string_equal(p.name, "x");
    assert_int_equal(p.fsdp_master_dtype, DRIFT_BF16);
    assert_int_equal(p.fsdp_reduce_dtype, DRIFT_F16);
    assert_int_equal(p.diffusion_forward_dtype, DRIFT_F16);
    assert_int_equal(p.sglang_dit_precision, DRIFT_F32);
    assert_int_equal(p.inputs[DRIFT_INPUT_LATENTS].kind, DRIFT_INPUT_EXPLICIT);
    assert_int_equal(p.inputs[DRIFT_INPUT_LATENTS].dtype, DRIFT_F16);
    assert_int_equal(p.inputs[DRIFT_INPUT_COND].kind, DRIFT_INPUT_PASSTHROUGH); /* absent: default */
    assert_int_equal(p.inputs[DRIFT_INPUT_TIMESTEP].dtype, DRIFT_BF16);
    /* object form keeps written order (not sorted) */
    assert_int_equal(p.n_patterns, 3);
    assert_string_equal(p.patterns[0].glob, "*b*");
    assert_string_equal(p.patterns[1].glob, "*a*");
    assert_string_equal(p.patterns[2].glob, "*.c");
    assert_int_equal(p.patterns[0].dtype, DRIFT_F32);
    assert_int_equal(p.patterns[1].dtype, DRIFT_BF16);
    assert_int_equal(p.patterns[2].dtype, DRIFT_F16);
    assert_string_equal(p.patterns[1].origin, "t.json:4:42");
    assert_int_equal(p.rope_provenance, DRIFT_BUF_DEVICE_FP32);

    char *js = drift_plan_to_json(&p);
    assert_non_null(js);
    assert_string_equal(js,
                        "{\"name\":\"x\",\"fsdp_master_dtype\":\"bf16\",\"fsdp_reduce_dtype\":\"fp16\","
                        "\"diffusion_forward_dtype\":\"fp16\",\"sglang_dit_precision\":\"fp32\","
                        "\"input_dtype_policy\":{\"latents\":\"fp16\",\"cond\":null,\"timestep\":\"bf16\"},"
                        "\"param_dtype_patterns\":[[\"*b*\",\"fp32\"],[\"*a*\",\"bf16\"],[\"*.c\",\"fp16\"]],"
                        "\"buffer_provenance\":{\"rope\":\"device\"}}");
    free(js);

    /* deep copy */
    drift_plan q;
    drift_err err;
    assert_int_equal(drift_plan_copy(&q, &p, &err), DRIFT_OK);
    assert_ptr_not_equal(q.patterns, p.patterns);
    assert_ptr_not_equal(q.patterns[0].glob, p.patterns[0].glob);
    p.patterns[0].glob[0] = 'Z';
    drift_plan_free(&p);
    assert_string_equal(q.patterns[0].glob, "*b*");
    assert_string_equal(q.patterns[1].origin, "t.json:4:42");
    assert_string_equal(q.name, "x");
    drift_plan_free(&q);

    parse_ok(&p, "{\"input_dtype_policy\": {\"latents\": \"default\", \"cond\": null}, "
                 "\"buffer_provenance\": {\"rope\": \"recorded\"}, \"param_dtype_patterns\": []}");
    assert_int_equal(p.inputs[DRIFT_INPUT_LATENTS].kind, DRIFT_INPUT_DEFAULT);
    assert_int_equal(p.rope_provenance, DRIFT_BUF_RECORDED);
    js = drift_plan_to_json(&p);
    assert_string_equal(js,
                        "{\"name\":\"\",\"fsdp_master_dtype\":\"fp32\",\"fsdp_reduce_dtype\":\"fp32\","
                        "\"diffusion_forward_dtype\":\"bf16\",\"sglang_dit_precision\":\"bf16\","
                        "\"input_dtype_policy\":{\"latents\":\"default\",\"cond\":null,\"timestep\":null},"
                        "\"param_dtype_patterns\":[],\"buffer_provenance\":{\"rope\":\"recorded\"}}");
    free(js);
    drift_plan_free(&p);
}

static void test_semantic_errors(void **state) {
    (void)state;
    /* the brief's example: field path, expectation, what was found */
    parse_fail("{\"param_dtype_patterns\": [\n"
               "  [\"*.norm2.*\", \"fp32\"],\n"
               "  [\"*scale_shift_table\", \"fp32\"],\n"
               "  [\"*time_embedder*\", \"int8\"]\n"
               "]}",
               DRIFT_E_INPUT, "t.json:4:23",
               "param_dtype_patterns[2][1]: expected one of bf16, fp16, fp32, got \"int8\"", NULL);
    parse_fail("{\"param_dtype_patterns\": [[\"*\", \"float32\"]]}", DRIFT_E_INPUT, "t.json:1:33",
               "param_dtype_patterns[0][1]: expected one of bf16, fp16, fp32, got \"float32\" (write \"fp32\")", NULL);
    parse_fail("{\"param_dtype_patterns\": [[\"*\", \"fp64\"]]}", DRIFT_E_INPUT, "t.json:1:33", NULL,
               "fp64 is the replay oracle");
    parse_fail("{\"param_dtype_patterns\": [[\"*\", null]]}", DRIFT_E_INPUT, "t.json:1:33",
               "param_dtype_patterns[0][1]: expected a dtype string (one of bf16, fp16, fp32), got null", NULL);
    parse_fail("{\"param_dtype_patterns\": [[3, \"fp32\"]]}", DRIFT_E_INPUT, "t.json:1:28",
               "param_dtype_patterns[0][0]: expected a glob string, got number 3", NULL);
    parse_fail("{\"param_dtype_patterns\": [[\"\", \"fp32\"]]}", DRIFT_E_INPUT, "t.json:1:28",
               "param_dtype_patterns[0][0]: expected a non-empty glob, got \"\"", NULL);
    parse_fail("{\"param_dtype_patterns\": [[\"*\", \"fp32\", \"x\"]]}", DRIFT_E_INPUT, "t.json:1:27",
               "param_dtype_patterns[0]: expected a [glob, dtype] pair (2 elements), got 3 elements", NULL);
    parse_fail("{\"param_dtype_patterns\": [\"*=fp32\"]}", DRIFT_E_INPUT, "t.json:1:27",
               "param_dtype_patterns[0]: expected a [glob, dtype] pair, got \"*=fp32\"", NULL);
    parse_fail("{\"param_dtype_patterns\": \"*.norm2.*\"}", DRIFT_E_INPUT, "t.json:1:26", NULL,
               "param_dtype_patterns: expected an array of [glob, dtype] pairs");
    parse_fail("{\"param_dtype_patterns\": {\"*a\": \"fp32\", \"*b\": \"int4\"}}", DRIFT_E_INPUT, "t.json:1:47",
               "param_dtype_patterns[\"*b\"]: expected one of bf16, fp16, fp32, got \"int4\"", NULL);
    parse_fail("{\"param_dtype_patterns\": {\"\": \"fp32\"}}", DRIFT_E_INPUT, "t.json:1:27", NULL,
               "expected a non-empty glob");

    parse_fail("[1]", DRIFT_E_INPUT, "t.json:1:1", NULL, "plan: expected a JSON object");
    parse_fail("{\"name\": \"a\",\n \"nmae\": \"b\"}", DRIFT_E_INPUT, "t.json:2:2", NULL,
               "unknown key \"nmae\"; expected one of name, fsdp_master_dtype");
    parse_fail("{\"name\": 3}", DRIFT_E_INPUT, "t.json:1:10", "name: expected a string, got number 3", NULL);
    parse_fail("{\"diffusion_forward_dtype\": \"bfloat16\"}", DRIFT_E_INPUT, "t.json:1:29",
               "diffusion_forward_dtype: expected one of bf16, fp16, fp32, got \"bfloat16\" (write \"bf16\")", NULL);
    parse_fail("{\"fsdp_master_dtype\": true}", DRIFT_E_INPUT, "t.json:1:23", NULL,
               "fsdp_master_dtype: expected a dtype string");
    parse_fail("{\"sglang_dit_precision\": \"BF16\"}", DRIFT_E_INPUT, "t.json:1:26", NULL, "(write \"bf16\")");
    parse_fail("{\"input_dtype_policy\": [\"fp32\"]}", DRIFT_E_INPUT, "t.json:1:24", NULL,
               "input_dtype_policy: expected an object with keys latents, cond, timestep, got an array");
    parse_fail("{\"input_dtype_policy\": {\"latents\": null, \"noise\": null}}", DRIFT_E_INPUT, "t.json:1:42",
               NULL, "input_dtype_policy: unknown key \"noise\"");
    parse_fail("{\"input_dtype_policy\": {\"timestep\": \"int8\"}}", DRIFT_E_INPUT, "t.json:1:37",
               "input_dtype_policy.timestep: expected null, \"default\", \"fp32\", \"bf16\" or \"fp16\", got \"int8\"",
               NULL);
    parse_fail("{\"input_dtype_policy\": {\"cond\": \"null\"}}", DRIFT_E_INPUT, "t.json:1:33", NULL,
               "pass-through is JSON null, without quotes");
    parse_fail("{\"input_dtype_policy\": {\"cond\": 32}}", DRIFT_E_INPUT, "t.json:1:33", NULL, "got number 32");
    parse_fail("{\"buffer_provenance\": {\"rope\": \"gpu\"}}", DRIFT_E_INPUT, "t.json:1:32",
               "buffer_provenance.rope: expected one of \"cpu\", \"device\", \"recorded\", got \"gpu\"", NULL);
    parse_fail("{\"buffer_provenance\": {\"freqs\": \"cpu\"}}", DRIFT_E_INPUT, "t.json:1:24", NULL,
               "buffer_provenance: unknown key \"freqs\"; expected rope");
    parse_fail("{\"buffer_provenance\": \"cpu\"}", DRIFT_E_INPUT, "t.json:1:23", NULL,
               "buffer_provenance: expected an object");
    char longname[300];
    snprintf(longname, sizeof longname, "{\"name\": \"%0200d\"}", 0);
    parse_fail(longname, DRIFT_E_INPUT, "t.json:1:10", "name: expected at most 127 bytes, got 200", NULL);
    parse_fail("{\"name\": \"a\\u0000b\"}", DRIFT_E_INPUT, "t.json:1:10", NULL, "\\u0000");
}

static void test_malformed_json(void **state) {
    (void)state;
    parse_fail("{\"name\": \"a\",\n  \"param_dtype_patterns\": [[\"*\", \"fp32\"],]\n}", DRIFT_E_INPUT,
               "t.json:2:41", NULL, "trailing comma");
    parse_fail("{\"name\": \"a\",\n\"name\": \"b\"}", DRIFT_E_INPUT, "t.json:2:1", NULL,
               "duplicate key \"name\" in object (first at 1:2, again at 2:1)");
    parse_fail("{\"name\": \"a\" // wan\n}", DRIFT_E_INPUT, "t.json:1:14", NULL, "no comments");
    parse_fail("{\"name\": \"a\"", DRIFT_E_INPUT, "t.json:1:13", NULL, "unterminated object");
    parse_fail("", DRIFT_E_INPUT, "t.json:1:1", NULL, "expected a value, got end of input");
    /* duplicate globs in the object form are duplicate keys */
    parse_fail("{\"param_dtype_patterns\": {\"*a\": \"fp32\", \"*a\": \"bf16\"}}", DRIFT_E_INPUT, "t.json:1:41",
               NULL, "duplicate key \"*a\"");
}

/* ---- flags -------------------------------------------------------------- */

static void test_flags(void **state) {
    (void)state;
    const char *flags[] = {"--fsdp-master-dtype", "--fsdp-reduce-dtype", "--diffusion-forward-dtype",
                           "--sglang-dit-precision", "--param-dtype", "--input-dtype", "--rope-provenance",
                           "--plan-name"};
    for (size_t i = 0; i < 8; i++) assert_int_equal(drift_plan_is_flag(flags[i]), 1);
    assert_int_equal(drift_plan_is_flag("--plan"), 0);
    assert_int_equal(drift_plan_is_flag("fsdp-master-dtype"), 0);
    assert_int_equal(drift_plan_is_flag("--param-dtype="), 0);
    assert_int_equal(drift_plan_is_flag(NULL), 0);

    drift_plan p;
    load_fixture(&p, "wan2_2.json");
    flag_ok(&p, "--param-dtype", "*scale_shift_table=fp32");
    flag_ok(&p, "--param-dtype", "a=b=fp16"); /* the last '=' separates */
    flag_ok(&p, "--input-dtype", "timestep=fp32");
    flag_ok(&p, "--input-dtype", "latents=default");
    flag_ok(&p, "--input-dtype", "cond=bf16");
    flag_ok(&p, "--input-dtype", "cond=null");
    flag_ok(&p, "--diffusion-forward-dtype", "fp16");
    flag_ok(&p, "--sglang-dit-precision", "fp32");
    flag_ok(&p, "--fsdp-master-dtype", "bf16");
    flag_ok(&p, "--fsdp-reduce-dtype", "bf16");
    flag_ok(&p, "--rope-provenance", "device");
    flag_ok(&p, "--plan-name", "wan2_2+flags");
    assert_int_equal(p.n_patterns, 3);
    assert_string_equal(p.patterns[0].glob, "*.norm2.*");
    assert_string_equal(p.patterns[1].glob, "*scale_shift_table");
    assert_int_equal(p.patterns[1].dtype, DRIFT_F32);
    assert_string_equal(p.patterns[1].origin, "--param-dtype");
    assert_string_equal(p.patterns[2].glob, "a=b");
    assert_int_equal(p.patterns[2].dtype, DRIFT_F16);
    assert_int_equal(p.inputs[DRIFT_INPUT_TIMESTEP].kind, DRIFT_INPUT_EXPLICIT);
    assert_int_equal(p.inputs[DRIFT_INPUT_TIMESTEP].dtype, DRIFT_F32);
    assert_int_equal(p.inputs[DRIFT_INPUT_LATENTS].kind, DRIFT_INPUT_DEFAULT);
    assert_int_equal(p.inputs[DRIFT_INPUT_COND].kind, DRIFT_INPUT_PASSTHROUGH);
    assert_int_equal(p.diffusion_forward_dtype, DRIFT_F16);
    assert_int_equal(p.sglang_dit_precision, DRIFT_F32);
    assert_int_equal(p.fsdp_master_dtype, DRIFT_BF16);
    assert_int_equal(p.fsdp_reduce_dtype, DRIFT_BF16);
    assert_int_equal(p.rope_provenance, DRIFT_BUF_DEVICE_FP32);
    assert_string_equal(p.name, "wan2_2+flags");
    flag_ok(&p, "--input-dtype", "timestep=null");
    assert_int_equal(p.inputs[DRIFT_INPUT_TIMESTEP].kind, DRIFT_INPUT_PASSTHROUGH);
    flag_ok(&p, "--input-dtype", "timestep=passthrough");
    assert_int_equal(p.inputs[DRIFT_INPUT_TIMESTEP].kind, DRIFT_INPUT_PASSTHROUGH);
    drift_plan_free(&p);

    /* a plan from flags alone */
    drift_plan_init(&p);
    flag_ok(&p, "--param-dtype", "*.norm2.*=fp32");
    assert_int_equal(p.n_patterns, 1);
    assert_string_equal(p.patterns[0].glob, "*.norm2.*");
    char *js = drift_plan_to_json(&p);
    assert_non_null(strstr(js, "\"param_dtype_patterns\":[[\"*.norm2.*\",\"fp32\"]]"));
    free(js);
    drift_plan_free(&p);

    flag_fail("--param-dtype", "*.norm2.*=int8", "expected DTYPE one of bf16, fp16, fp32, got \"int8\"");
    flag_fail("--param-dtype", "*.norm2.*", "expected PATTERN=DTYPE");
    flag_fail("--param-dtype", "=fp32", "non-empty PATTERN");
    flag_fail("--param-dtype", "x=", "got \"\"");
    flag_fail("--input-dtype", "timestep", "expected KEY=VALUE with KEY one of latents, cond, timestep");
    flag_fail("--input-dtype", "noise=fp32", "KEY one of latents, cond, timestep, got \"noise=fp32\"");
    flag_fail("--input-dtype", "timestep=int8",
              "timestep: expected default, null (pass-through) or one of bf16, fp16, fp32, got \"int8\"");
    flag_fail("--input-dtype", "timestep=float32", "(write \"fp32\")");
    flag_fail("--diffusion-forward-dtype", "fp64", "expected one of bf16, fp16, fp32, got \"fp64\"");
    flag_fail("--diffusion-forward-dtype", "bfloat16", "(write \"bf16\")");
    flag_fail("--fsdp-reduce-dtype", "", "got \"\"");
    flag_fail("--rope-provenance", "gpu", "expected one of cpu, device, recorded, got \"gpu\"");
    flag_fail("--plan-name", "", "non-empty");
    flag_fail("--sglang-dit-precision", NULL, "needs a value");
    flag_fail("--frobnicate", "x", "not a plan flag");
}

/* ---- compile ------------------------------------------------------------ */

/* DESIGN.md s5 acceptance example. */
static void test_compile_acceptance(void **state) {
    (void)state;
    drift_param_table t;
    wan_table(&t);
    drift_plan p;
    drift_plan_init(&p);
    flag_ok(&p, "--param-dtype", "*.norm2.*=fp32");
    flag_ok(&p, "--param-dtype", "*scale_shift_table=fp32");
    flag_ok(&p, "--param-dtype", "condition_embedder.time_embedder.*=fp32");
    drift_compiled_plan c;
    compile_ok(&p, &t, &c);

    assert_int_equal(c.n_wraps, 2);
    for (int b = 0; b < 2; b++) {
        const drift_wrap_map *m = &c.wraps[b];
        assert_string_equal(m->wrap, b == 0 ? "blocks.0" : "blocks.1");
        assert_int_equal(m->n, 3);
        size_t base = b == 0 ? 7 : 12;
        expect_entry(m, 0, "scale_shift_table", base + 0, DRIFT_F32, 1);
        expect_entry(m, 1, "norm2.weight", base + 2, DRIFT_F32, 0);
        expect_entry(m, 2, "norm2.bias", base + 3, DRIFT_F32, 0);
    }
    assert_string_equal(c.root.wrap, "");
    assert_int_equal(c.root.n, 5);
    expect_entry(&c.root, 0, "condition_embedder.time_embedder.linear_1.weight", 2, DRIFT_F32, 2);
    expect_entry(&c.root, 1, "condition_embedder.time_embedder.linear_1.bias", 3, DRIFT_F32, 2);
    expect_entry(&c.root, 2, "condition_embedder.time_embedder.linear_2.weight", 4, DRIFT_F32, 2);
    expect_entry(&c.root, 3, "condition_embedder.time_embedder.linear_2.bias", 5, DRIFT_F32, 2);
    expect_entry(&c.root, 4, "scale_shift_table", 17, DRIFT_F32, 1);

    assert_int_equal(c.override_count, 11);
    /* 8*16+8+8*8+8 (time embedder) + 2*(48+8+8) (blocks) + 16 (root table) */
    assert_int_equal(c.override_numel, 128 + 8 + 64 + 8 + 2 * (48 + 8 + 8) + 16);
    assert_int_equal(c.n_params, 19);
    const drift_dtype exp[19] = {DRIFT_BF16, DRIFT_BF16, DRIFT_F32,  DRIFT_F32,  DRIFT_F32,
                                 DRIFT_F32,  DRIFT_BF16, DRIFT_F32,  DRIFT_BF16, DRIFT_F32,
                                 DRIFT_F32,  DRIFT_BF16, DRIFT_F32,  DRIFT_BF16, DRIFT_F32,
                                 DRIFT_F32,  DRIFT_BF16, DRIFT_F32,  DRIFT_BF16};
    for (size_t i = 0; i < 19; i++) assert_int_equal(c.param_dtype[i], exp[i]);
    assert_int_equal(c.n_warnings, 0);
    drift_compiled_plan_free(&c);
    assert_null(c.wraps);
    drift_compiled_plan_free(&c);
    drift_compiled_plan_free(NULL);
    drift_plan_free(&p);
    drift_param_table_free(&t);
}

static void test_compile_wan_controlnet_fails(void **state) {
    (void)state;
    drift_param_table t;
    wan_table(&t);
    drift_plan p;
    load_fixture(&p, "wan_controlnet.json");
    drift_compiled_plan c;
    memset(&c, 0, sizeof c);
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_plan_compile(&p, &t, &c, &err), DRIFT_E_INPUT);
    char path[1024], origin[1100];
    plan_path(path, sizeof path, "wan_controlnet.json");
    snprintf(origin, sizeof origin, "%s:11:6", path);
    assert_string_equal(err.where, origin);
    assert_non_null(strstr(err.msg, "pattern \"*.condition_embedder.time_embedder.*\" (-> fp32) matches no parameter"));
    assert_non_null(strstr(err.msg, "19 parameters"));
    assert_non_null(strstr(err.msg, "\"condition_embedder.time_embedder.*\" would match "
                                    "\"condition_embedder.time_embedder.linear_1.weight\""));
    /* out is left zeroed */
    assert_null(c.wraps);
    assert_null(c.param_dtype);
    assert_int_equal(c.override_count, 0);
    drift_plan_free(&p);

    /* wan2_2 compiles: exactly the four norm2 parameters */
    load_fixture(&p, "wan2_2.json");
    compile_ok(&p, &t, &c);
    assert_int_equal(c.override_count, 4);
    assert_int_equal(c.wraps[0].n, 2);
    assert_int_equal(c.wraps[1].n, 2);
    assert_int_equal(c.root.n, 0);
    expect_entry(&c.wraps[1], 0, "norm2.weight", 14, DRIFT_F32, 0);
    drift_compiled_plan_free(&c);
    drift_plan_free(&p);

    /* under a prefix the third pattern does match */
    drift_param_table t2;
    drift_param_table_init(&t2);
    tbl_add(&t2, "transformer.condition_embedder.time_embedder.linear_1.weight", 4, 4);
    tbl_add(&t2, "transformer.blocks.0.norm2.weight", 4, 0);
    tbl_add(&t2, "transformer.blocks.0.scale_shift_table", 4, 0);
    load_fixture(&p, "wan_controlnet.json");
    compile_ok(&p, &t2, &c);
    assert_int_equal(c.override_count, 3);
    assert_int_equal(c.root.n, 3);
    drift_compiled_plan_free(&c);
    drift_plan_free(&p);
    drift_param_table_free(&t2);

    /* a flag pattern matching nothing names the flag */
    drift_plan_init(&p);
    flag_ok(&p, "--param-dtype", "norm2.weight=fp32");
    drift_err_clear(&err);
    assert_int_equal(drift_plan_compile(&p, &t, &c, &err), DRIFT_E_INPUT);
    assert_string_equal(err.where, "--param-dtype");
    assert_non_null(strstr(err.msg, "pattern \"norm2.weight\" (-> fp32) matches no parameter"));
    assert_non_null(strstr(err.msg, "\"*.norm2.weight\" would match \"blocks.0.norm2.weight\""));
    drift_plan_free(&p);

    /* no parameters at all */
    drift_param_table empty;
    drift_param_table_init(&empty);
    load_fixture(&p, "wan2_2.json");
    assert_int_equal(drift_plan_compile(&p, &empty, &c, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "(0 parameters)"));
    drift_plan_free(&p);
    /* ...but no patterns on no parameters is fine */
    load_fixture(&p, "all_bf16.json");
    compile_ok(&p, &empty, &c);
    assert_int_equal(c.n_params, 0);
    assert_int_equal(c.override_count, 0);
    drift_compiled_plan_free(&c);
    drift_plan_free(&p);
    drift_param_table_free(&t);
}

static void test_compile_override_order_and_forward(void **state) {
    (void)state;
    drift_param_table t;
    wan_table(&t);
    drift_plan p;
    drift_compiled_plan c;

    /* later pattern overrides earlier: all blocks fp32, then norm2 fp16 */
    drift_plan_init(&p);
    flag_ok(&p, "--param-dtype", "blocks.*=fp32");
    flag_ok(&p, "--param-dtype", "*.norm2.*=fp16");
    compile_ok(&p, &t, &c);
    assert_int_equal(c.wraps[0].n, 5);
    expect_entry(&c.wraps[0], 0, "scale_shift_table", 7, DRIFT_F32, 0);
    expect_entry(&c.wraps[0], 1, "attn1.to_q.weight", 8, DRIFT_F32, 0);
    expect_entry(&c.wraps[0], 2, "norm2.weight", 9, DRIFT_F16, 1);
    expect_entry(&c.wraps[0], 3, "norm2.bias", 10, DRIFT_F16, 1);
    expect_entry(&c.wraps[0], 4, "ffn.net.0.proj.weight", 11, DRIFT_F32, 0);
    assert_int_equal(c.param_dtype[9], DRIFT_F16);
    assert_int_equal(c.override_count, 10);
    drift_compiled_plan_free(&c);
    drift_plan_free(&p);

    /* the other order: norm2 first, then everything in the blocks wins */
    drift_plan_init(&p);
    flag_ok(&p, "--param-dtype", "*.norm2.*=fp16");
    flag_ok(&p, "--param-dtype", "blocks.*=fp32");
    compile_ok(&p, &t, &c);
    expect_entry(&c.wraps[1], 2, "norm2.weight", 14, DRIFT_F32, 1);
    assert_int_equal(c.override_count, 10);
    drift_compiled_plan_free(&c);
    drift_plan_free(&p);

    /* an assignment equal to the forward dtype compiles to nothing, also when
     * it undoes an earlier pattern (the file's norm2 rule, overridden by a flag) */
    load_fixture(&p, "wan2_2.json");
    flag_ok(&p, "--param-dtype", "*.norm2.*=bf16");
    compile_ok(&p, &t, &c);
    assert_int_equal(c.override_count, 0);
    assert_int_equal(c.override_numel, 0);
    assert_int_equal(c.wraps[0].n, 0);
    assert_int_equal(c.wraps[1].n, 0);
    assert_int_equal(c.root.n, 0);
    assert_string_equal(c.wraps[1].wrap, "blocks.1");
    for (size_t i = 0; i < c.n_params; i++) assert_int_equal(c.param_dtype[i], DRIFT_BF16);
    drift_compiled_plan_free(&c);
    drift_plan_free(&p);

    /* with an fp32 forward, fp32 patterns are nothing and bf16 ones are overrides */
    drift_plan_init(&p);
    flag_ok(&p, "--diffusion-forward-dtype", "fp32");
    flag_ok(&p, "--sglang-dit-precision", "fp32");
    flag_ok(&p, "--param-dtype", "*.norm2.*=fp32");
    flag_ok(&p, "--param-dtype", "proj_out.*=bf16");
    compile_ok(&p, &t, &c);
    assert_int_equal(c.override_count, 1);
    expect_entry(&c.root, 0, "proj_out.weight", 18, DRIFT_BF16, 1);
    assert_int_equal(c.override_numel, 512);
    assert_int_equal(c.param_dtype[9], DRIFT_F32);
    assert_int_equal(c.param_dtype[0], DRIFT_F32);
    assert_int_equal(c.n_warnings, 0);
    drift_compiled_plan_free(&c);
    drift_plan_free(&p);
    drift_param_table_free(&t);
}

static void test_compile_wrap_local_collision(void **state) {
    (void)state;
    /* In a --params dump the wrap is explicit; an explicit wrap that is not a
     * dotted prefix keeps the full FQN as local name (params.h). So "x.w"
     * (wrap x, local "w") and "w" given wrap x (local "w") collide. */
    const char *dump = "# wraps: x\nx.w 4\nw 4 x\nx.v 2\n";
    drift_param_table t;
    drift_param_table_init(&t);
    drift_err err;
    assert_int_equal(drift_param_table_parse_text(&t, dump, strlen(dump), "p.txt", &err), DRIFT_OK);
    assert_string_equal(drift_param_table_local_name(&t, 0), "w");
    assert_string_equal(drift_param_table_local_name(&t, 1), "w");
    assert_int_equal(t.params[1].wrap, 0);

    drift_plan p;
    drift_compiled_plan c;
    parse_ok(&p, "{\"param_dtype_patterns\": [[\"x.*\", \"fp32\"]]}");
    memset(&c, 0, sizeof c);
    drift_err_clear(&err);
    assert_int_equal(drift_plan_compile(&p, &t, &c, &err), DRIFT_E_INPUT);
    assert_string_equal(err.where, "t.json:1:28");
    assert_string_equal(err.msg,
                        "param_dtype_patterns: parameters \"x.w\" (fp32 from pattern \"x.*\" at t.json:1:28) and "
                        "\"w\" (bf16, no override) share the wrap-local FQN \"w\" in wrap \"x\" but need "
                        "different dtypes");
    assert_null(c.wraps);
    drift_plan_free(&p);

    /* two different overrides collide too */
    parse_ok(&p, "{\"param_dtype_patterns\": [[\"x.*\", \"fp32\"], [\"w\", \"fp16\"]]}");
    assert_int_equal(drift_plan_compile(&p, &t, &c, &err), DRIFT_E_INPUT);
    assert_string_equal(err.where, "t.json:1:45");
    assert_non_null(strstr(err.msg, "\"x.w\" (fp32 from pattern \"x.*\""));
    assert_non_null(strstr(err.msg, "\"w\" (fp16 from pattern \"w\""));
    drift_plan_free(&p);

    /* an override equal to the forward dtype counts as "no override" */
    parse_ok(&p, "{\"param_dtype_patterns\": [[\"x.*\", \"fp32\"], [\"w\", \"bf16\"]]}");
    assert_int_equal(drift_plan_compile(&p, &t, &c, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "\"w\" (bf16, no override: pattern \"w\" at t.json:1:45 assigns the forward dtype)"));
    drift_plan_free(&p);

    /* same dtype on both: accepted, both entries kept */
    parse_ok(&p, "{\"param_dtype_patterns\": [[\"*w\", \"fp32\"]]}");
    compile_ok(&p, &t, &c);
    assert_int_equal(c.wraps[0].n, 2);
    expect_entry(&c.wraps[0], 0, "w", 0, DRIFT_F32, 0);
    expect_entry(&c.wraps[0], 1, "w", 1, DRIFT_F32, 0);
    assert_int_equal(c.root.n, 0);
    drift_compiled_plan_free(&c);
    drift_plan_free(&p);

    /* neither overridden: nothing to compile, nothing to reject */
    parse_ok(&p, "{\"param_dtype_patterns\": [[\"x.v\", \"fp32\"]]}");
    compile_ok(&p, &t, &c);
    assert_int_equal(c.override_count, 1);
    expect_entry(&c.wraps[0], 0, "v", 2, DRIFT_F32, 0);
    drift_compiled_plan_free(&c);
    drift_plan_free(&p);
    drift_param_table_free(&t);
}

static void test_compile_warnings_and_validation(void **state) {
    (void)state;
    drift_param_table t;
    wan_table(&t);
    drift_plan p;
    drift_compiled_plan c;

    drift_plan_init(&p);
    flag_ok(&p, "--sglang-dit-precision", "fp16");
    compile_ok(&p, &t, &c);
    assert_int_equal(c.n_warnings, 1);
    assert_non_null(strstr(c.warnings[0], "diffusion_forward_dtype bf16 != sglang_dit_precision fp16"));
    drift_compiled_plan_free(&c);
    flag_ok(&p, "--fsdp-reduce-dtype", "bf16");
    compile_ok(&p, &t, &c);
    assert_int_equal(c.n_warnings, 2);
    assert_non_null(strstr(c.warnings[1], "fsdp_reduce_dtype is bf16"));
    drift_compiled_plan_free(&c);
    flag_ok(&p, "--sglang-dit-precision", "bf16");
    compile_ok(&p, &t, &c);
    assert_int_equal(c.n_warnings, 1);
    assert_non_null(strstr(c.warnings[0], "fsdp_reduce_dtype is bf16"));
    drift_compiled_plan_free(&c);
    drift_plan_free(&p);

    /* programmatic plans are validated too */
    drift_plan_init(&p);
    flag_ok(&p, "--param-dtype", "*.norm2.*=fp32");
    p.patterns[0].dtype = DRIFT_F64;
    drift_err err;
    memset(&c, 0, sizeof c);
    assert_int_equal(drift_plan_compile(&p, &t, &c, &err), DRIFT_E_INPUT);
    assert_string_equal(err.where, "--param-dtype");
    assert_non_null(strstr(err.msg, "expected one of bf16, fp16, fp32, got fp64"));
    p.patterns[0].dtype = DRIFT_F32;
    p.diffusion_forward_dtype = DRIFT_DTYPE_INVALID;
    assert_int_equal(drift_plan_compile(&p, &t, &c, &err), DRIFT_E_INPUT);
    assert_non_null(strstr(err.msg, "diffusion_forward_dtype"));
    drift_plan_free(&p);
    drift_param_table_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_every_fixture_parses),
        cmocka_unit_test(test_fixture_contents),
        cmocka_unit_test(test_full_plan_and_object_form),
        cmocka_unit_test(test_semantic_errors),
        cmocka_unit_test(test_malformed_json),
        cmocka_unit_test(test_flags),
        cmocka_unit_test(test_compile_acceptance),
        cmocka_unit_test(test_compile_wan_controlnet_fails),
        cmocka_unit_test(test_compile_override_order_and_forward),
        cmocka_unit_test(test_compile_wrap_local_collision),
        cmocka_unit_test(test_compile_warnings_and_validation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
