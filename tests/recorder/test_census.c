/* formats/census: write/read round trip of the intercept census tables,
 * bounds, replacement, JSON, and hostile files (wrong object kinds, wrong
 * member types, oversized tables, unterminated strings). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hdf5.h>

#include "formats/census.h"
#include "formats/json.h"
#include "formats/test_trace_util.h"

static drift_trace_meta meta(void) {
    drift_trace_meta m;
    memset(&m, 0, sizeof m);
    m.side = DRIFT_TRACE_SIDE_TRAINER;
    m.run_id = "census-test";
    m.rank = 1;
    m.world_size = 2;
    m.guidance_scale = 1.0;
    m.producer = "drift-intercept test";
    return m;
}

static void fill(drift_census *c, drift_census_gemm *g, size_t ng, drift_census_coll *x, size_t nx) {
    memset(c, 0, sizeof *c);
    c->info.rank = 1;
    c->info.world_size = 2;
    c->info.local_rank = 1;
    c->info.pid = 4242;
    c->info.gemm_calls = 17;
    c->info.coll_calls = 9;
    c->info.gemm_dropped = 2;
    c->info.coll_dropped = 0;
    c->info.nested_skipped = 5;
    c->info.nvtx_ranges = 33;
    c->info.nvtx_injected = 1;
    c->info.time_start = 1.5;
    c->info.time_end = 2.5;
    snprintf(c->info.notes, sizeof c->info.notes, "first note\nsecond note\n");
    for (size_t i = 0; i < ng; i++) {
        memset(&g[i], 0, sizeof g[i]);
        snprintf(g[i].range, sizeof g[i].range, "forward/blocks.%zu/attn1", i);
        snprintf(g[i].api, sizeof g[i].api, i % 2 ? "cublasLtMatmul" : "cublasGemmEx");
        snprintf(g[i].a_type, sizeof g[i].a_type, "bf16");
        snprintf(g[i].b_type, sizeof g[i].b_type, "bf16");
        snprintf(g[i].c_type, sizeof g[i].c_type, "bf16");
        snprintf(g[i].d_type, sizeof g[i].d_type, "fp32");
        snprintf(g[i].compute_type, sizeof g[i].compute_type, "fp32");
        snprintf(g[i].scale_type, sizeof g[i].scale_type, "fp32");
        snprintf(g[i].epilogue, sizeof g[i].epilogue, i % 2 ? "bias" : "");
        snprintf(g[i].transa, sizeof g[i].transa, "T");
        snprintf(g[i].transb, sizeof g[i].transb, "N");
        g[i].m = 64 + (int64_t)i;
        g[i].n = INT64_MAX;
        g[i].k = -1;
        g[i].batch = 3;
        g[i].calls = 10 + (int64_t)i;
        g[i].failed = 1;
        g[i].bytes = (int64_t)1 << 50;
        g[i].first_seq = (int64_t)i;
        g[i].last_seq = 100 + (int64_t)i;
    }
    for (size_t i = 0; i < nx; i++) {
        memset(&x[i], 0, sizeof x[i]);
        snprintf(x[i].range, sizeof x[i].range, "fsdp/blocks.%zu", i);
        snprintf(x[i].op, sizeof x[i].op, "allgather");
        snprintf(x[i].dtype, sizeof x[i].dtype, i ? "fp32" : "bf16");
        x[i].count = 1000 + (int64_t)i;
        x[i].root = -1;
        x[i].comm = (int32_t)i;
        x[i].comm_rank = 1;
        x[i].comm_nranks = 2;
        x[i].calls = 4;
        x[i].bytes = 8000;
        x[i].first_seq = 0;
        x[i].last_seq = 7;
    }
    c->gemm = g;
    c->n_gemm = ng;
    c->coll = x;
    c->n_coll = nx;
}

static drift_census *read_back(const char *path, int expect_rc) {
    drift_trace_reader *r = NULL;
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &err), DRIFT_OK);
    drift_census *c = NULL;
    int rc = drift_census_read(r, &c, &err);
    if (rc != expect_rc) fprintf(stderr, "census_read: %d %s: %s\n", rc, err.where, err.msg);
    assert_int_equal(rc, expect_rc);
    if (rc) {
        assert_null(c);
        assert_true(strlen(err.msg) > 0);
    }
    drift_trace_reader_close(r);
    return c;
}

static void test_roundtrip(void **state) {
    (void)state;
    drift_census_gemm g[3];
    drift_census_coll x[2];
    drift_census c;
    fill(&c, g, 3, x, 2);
    drift_trace_meta m = meta();
    drift_err err;
    drift_err_clear(&err);
    const char *path = tt_path("roundtrip.h5");
    assert_int_equal(drift_census_write_trace(path, &m, &c, &err), DRIFT_OK);
    drift_census *rd = read_back(path, DRIFT_OK);
    assert_non_null(rd);
    assert_int_equal(rd->n_gemm, 3);
    assert_int_equal(rd->n_coll, 2);
    assert_memory_equal(rd->gemm, g, sizeof g);
    assert_memory_equal(rd->coll, x, sizeof x);
    assert_int_equal(rd->info.rank, 1);
    assert_int_equal(rd->info.world_size, 2);
    assert_int_equal(rd->info.pid, 4242);
    assert_int_equal(rd->info.gemm_dropped, 2);
    assert_int_equal(rd->info.nested_skipped, 5);
    assert_int_equal(rd->info.nvtx_injected, 1);
    assert_true(rd->info.time_end == 2.5);
    assert_string_equal(rd->info.notes, "first note\nsecond note\n");

    /* JSON: parses and carries the rows */
    drift_json_buf b;
    drift_json_buf_init_pretty(&b, 0);
    drift_census_json(&b, rd);
    char *doc = drift_json_buf_take(&b);
    drift_json_buf_free(&b);
    assert_non_null(doc);
    drift_json_value *v = NULL;
    assert_int_equal(drift_json_parse(doc, strlen(doc), "census", &v, &err), DRIFT_OK);
    assert_non_null(strstr(doc, "\"forward/blocks.2/attn1\""));
    assert_non_null(strstr(doc, "\"second note\""));
    assert_non_null(strstr(doc, "9223372036854775807"));
    drift_json_free(v);
    free(doc);
    drift_census_free(rd);
}

static void test_absent_and_empty(void **state) {
    (void)state;
    drift_err err;
    drift_err_clear(&err);
    const char *path = tt_path("plain.h5");
    drift_trace_meta m = meta();
    drift_trace_writer *w = NULL;
    assert_int_equal(drift_trace_writer_create(&w, path, &m, &err), DRIFT_OK);
    assert_int_equal(drift_trace_writer_start(w, &err), DRIFT_OK);
    assert_int_equal(drift_trace_writer_close(w, &err), DRIFT_OK);
    assert_null(read_back(path, DRIFT_OK)); /* no census: NULL, not an error */

    drift_census c;
    fill(&c, NULL, 0, NULL, 0);
    assert_int_equal(drift_census_append(path, &c, &err), DRIFT_OK);
    drift_census *rd = read_back(path, DRIFT_OK);
    assert_non_null(rd);
    assert_int_equal(rd->n_gemm, 0);
    assert_int_equal(rd->n_coll, 0);
    assert_null(rd->gemm);
    drift_census_free(rd);

    /* append replaces: a second census with rows */
    drift_census_gemm g[2];
    drift_census_coll x[1];
    fill(&c, g, 2, x, 1);
    assert_int_equal(drift_census_append(path, &c, &err), DRIFT_OK);
    rd = read_back(path, DRIFT_OK);
    assert_int_equal(rd->n_gemm, 2);
    assert_int_equal(rd->n_coll, 1);
    drift_census_free(rd);
    drift_census_free(NULL);
}

static void test_bad_arguments(void **state) {
    (void)state;
    drift_err err;
    drift_err_clear(&err);
    drift_census c;
    fill(&c, NULL, 0, NULL, 0);
    c.n_gemm = 3; /* rows claimed, none given */
    assert_int_equal(drift_census_append(tt_path("plain.h5"), &c, &err), DRIFT_E_USAGE);
    c.n_gemm = (size_t)DRIFT_CENSUS_MAX_ROWS + 1;
    drift_census_gemm g;
    c.gemm = &g;
    assert_int_equal(drift_census_append(tt_path("plain.h5"), &c, &err), DRIFT_E_USAGE);
    fill(&c, NULL, 0, NULL, 0);
    assert_int_equal(drift_census_append(tt_path("does-not-exist.h5"), &c, &err), DRIFT_E_IO);
    drift_trace_reader *r = NULL;
    assert_int_not_equal(drift_census_read(r, NULL, &err), DRIFT_OK);
}

/* Unterminated strings in memory are stored truncated and read back
 * NUL-terminated. */
static void test_unterminated_strings(void **state) {
    (void)state;
    drift_census_gemm g[1];
    drift_census_coll x[1];
    drift_census c;
    fill(&c, g, 1, x, 1);
    memset(g[0].range, 'r', sizeof g[0].range);
    memset(g[0].api, 'a', sizeof g[0].api);
    memset(x[0].dtype, 'd', sizeof x[0].dtype);
    memset(c.info.notes, 'n', sizeof c.info.notes);
    drift_trace_meta m = meta();
    drift_err err;
    drift_err_clear(&err);
    const char *path = tt_path("unterminated.h5");
    assert_int_equal(drift_census_write_trace(path, &m, &c, &err), DRIFT_OK);
    drift_census *rd = read_back(path, DRIFT_OK);
    assert_int_equal(strlen(rd->gemm[0].range), sizeof rd->gemm[0].range - 1);
    assert_int_equal(strlen(rd->gemm[0].api), sizeof rd->gemm[0].api - 1);
    assert_int_equal(strlen(rd->coll[0].dtype), sizeof rd->coll[0].dtype - 1);
    assert_true(strlen(rd->info.notes) < sizeof rd->info.notes);
    char buf[16];
    drift_census_gemm_dtypes(&rd->gemm[0], buf, sizeof buf); /* truncates, terminates */
    assert_true(strlen(buf) == sizeof buf - 1);
    drift_census_free(rd);
}

/* ---- hostile files ---------------------------------------------------------- */
static const char *base_trace(const char *name) {
    const char *path = tt_path(name);
    drift_census_gemm g[1];
    drift_census_coll x[1];
    drift_census c;
    fill(&c, g, 1, x, 1);
    drift_trace_meta m = meta();
    drift_err err;
    drift_err_clear(&err);
    assert_int_equal(drift_census_write_trace(path, &m, &c, &err), DRIFT_OK);
    return path;
}

static void replace_table(const char *path, const char *name, hid_t type, hsize_t rows, hsize_t maxrows) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(f >= 0);
    if (H5Lexists(f, name, H5P_DEFAULT) > 0) assert_true(H5Ldelete(f, name, H5P_DEFAULT) >= 0);
    hsize_t dims[1] = {rows}, maxd[1] = {maxrows}, chunk[1] = {maxrows != H5S_UNLIMITED && maxrows < 1024 ? maxrows : 1024};
    hid_t sp = H5Screate_simple(1, dims, maxd), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, chunk);
    hid_t ds = H5Dcreate2(f, name, type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    assert_true(ds >= 0);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Fclose(f);
}

static void test_hostile_census_is_dataset(void **state) {
    (void)state;
    const char *path = base_trace("hostile_kind.h5");
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    assert_true(H5Ldelete(f, "/census", H5P_DEFAULT) >= 0);
    H5Fclose(f);
    replace_table(path, "/census", H5T_NATIVE_INT, 4, 4);
    assert_null(read_back(path, DRIFT_E_INPUT));
}

static void test_hostile_table_not_compound(void **state) {
    (void)state;
    const char *path = base_trace("hostile_type.h5");
    replace_table(path, "/census/gemm", H5T_NATIVE_DOUBLE, 8, 8);
    assert_null(read_back(path, DRIFT_E_INPUT));
}

static void test_hostile_missing_members(void **state) {
    (void)state;
    const char *path = base_trace("hostile_members.h5");
    hid_t t = H5Tcreate(H5T_COMPOUND, 16);
    H5Tinsert(t, "calls", 0, H5T_NATIVE_INT64);
    H5Tinsert(t, "bytes", 8, H5T_NATIVE_INT64);
    replace_table(path, "/census/collective", t, 3, 3);
    H5Tclose(t);
    assert_null(read_back(path, DRIFT_E_INPUT));
}

static void test_hostile_too_many_rows(void **state) {
    (void)state;
    const char *path = base_trace("hostile_rows.h5");
    hid_t t = H5Tcreate(H5T_COMPOUND, 8);
    H5Tinsert(t, "calls", 0, H5T_NATIVE_INT64);
    /* chunks never written take no space: the extent alone is hostile */
    replace_table(path, "/census/gemm", t, (hsize_t)DRIFT_CENSUS_MAX_ROWS + 1, H5S_UNLIMITED);
    H5Tclose(t);
    assert_null(read_back(path, DRIFT_E_INPUT));
}

static void test_hostile_attr(void **state) {
    (void)state;
    const char *path = base_trace("hostile_attr.h5");
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = H5Gopen2(f, "/census", H5P_DEFAULT);
    H5Adelete(g, "rank");
    hsize_t d[1] = {3};
    hid_t sp = H5Screate_simple(1, d, NULL);
    hid_t a = H5Acreate2(g, "rank", H5T_NATIVE_INT64, sp, H5P_DEFAULT, H5P_DEFAULT);
    int64_t v[3] = {1, 2, 3};
    H5Awrite(a, H5T_NATIVE_INT64, v);
    H5Aclose(a);
    H5Sclose(sp);
    H5Gclose(g);
    H5Fclose(f);
    assert_null(read_back(path, DRIFT_E_INPUT));
}

int main(void) {
    if (tt_setup_tmp("census") != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_absent_and_empty),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_unterminated_strings),
        cmocka_unit_test(test_hostile_census_is_dataset),
        cmocka_unit_test(test_hostile_table_not_compound),
        cmocka_unit_test(test_hostile_missing_members),
        cmocka_unit_test(test_hostile_too_many_rows),
        cmocka_unit_test(test_hostile_attr),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
