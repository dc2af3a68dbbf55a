/* formats/trace on hostile files: truncated at many offsets, bit-flipped at
 * random offsets (fixed seed), and hand-crafted through the HDF5 API (wrong
 * element types, odd 16-bit floats, missing/ill-typed attributes, record
 * count mismatches, overflowing and huge shapes, broken tables). Every one
 * yields DRIFT_E_INPUT (or DRIFT_E_IO) with a message, or reads back
 * consistently: never a crash, never a huge allocation (run under ASan). */
#include <hdf5.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "test_trace_util.h"

#if defined(__SANITIZE_ADDRESS__)
/* HDF5 1.10.8 itself leaks a few free-list blocks when it gives up on a
 * corrupt object header (the bit-flip test): not drift's memory. drift's own
 * allocations never have a libhdf5 frame on top, so they stay checked. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libhdf5_serial.so\n"; }
#endif

static unsigned char *g_orig;
static size_t g_orig_len;
static char g_orig_path[1400];

static int setup(void **state) {
    (void)state;
    if (tt_setup_tmp("trace_hostile")) return -1;
    snprintf(g_orig_path, sizeof g_orig_path, "%s", tt_path("orig.h5"));
    drift_err e;
    drift_err_clear(&e);
    if (tt_write_trace(g_orig_path, 3, &e)) {
        fprintf(stderr, "%s: %s\n", e.where, e.msg);
        return -1;
    }
    FILE *f = fopen(g_orig_path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    g_orig_len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    g_orig = malloc(g_orig_len);
    size_t k = g_orig && fread(g_orig, 1, g_orig_len, f) == g_orig_len;
    fclose(f);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    return k ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    free(g_orig);
    return 0;
}

static void write_bytes(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* Reads everything the API offers; returns the first failure (err filled). */
static int exercise(const char *path, drift_err *e) {
    drift_trace_reader *r = NULL;
    drift_err_clear(e);
    int rc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, e);
    if (rc) return rc;
    const drift_trace_meta *m = drift_trace_reader_meta(r);
    if (!m->run_id || !m->family || !m->plan_json || !m->producer || !m->created) rc = DRIFT_E_INTERNAL;
    float *buf = malloc(64 * sizeof(float));
    drift_trace_index *ix = malloc(64 * sizeof *ix);
    drift_trace_stats *st = malloc(64 * sizeof *st);
    for (size_t i = 0; !rc && i < drift_trace_reader_n_sites(r); i++) {
        drift_trace_site_info si;
        if ((rc = drift_trace_reader_site(r, i, &si, e))) break;
        int64_t n = si.n_records < 64 ? si.n_records : 64;
        if ((rc = drift_trace_read_index(r, i, 0, n, ix, e))) break;
        if ((rc = drift_trace_read_stats(r, i, 0, n, st, e))) break;
        for (int64_t k = 0; k < n && !rc; k++)
            if (ix[k].stored && si.numel <= 64) rc = drift_trace_read_record_f32(r, i, k, buf, 64, e);
    }
    if (!rc) {
        drift_trace_metric *mr = NULL;
        size_t n = 0;
        rc = drift_trace_read_metrics(r, INT64_MIN, &mr, &n, e);
        for (size_t i = 0; !rc && i < n; i++)
            if (!drift_trace_reader_metric_site(r, (size_t)mr[i].site)) rc = DRIFT_E_INTERNAL;
        free(mr);
    }
    if (!rc) {
        drift_trace_step_metrics *sm = NULL;
        size_t n = 0;
        rc = drift_trace_read_step_metrics(r, INT64_MIN, &sm, &n, e);
        free(sm);
    }
    if (!rc) {
        drift_trace_note *nt = NULL;
        size_t n = 0;
        rc = drift_trace_read_notes(r, INT64_MIN, &nt, &n, e);
        free(nt);
    }
    for (size_t i = 0; !rc && i < drift_trace_reader_n_params(r); i++) {
        drift_trace_param_info p;
        drift_trace_reader_param(r, i, &p);
        float *v = malloc((size_t)p.numel * sizeof(float));
        rc = v ? drift_trace_read_param(r, i, v, (size_t)p.numel, e) : DRIFT_E_NOMEM;
        free(v);
    }
    for (size_t i = 0; !rc && i < drift_trace_reader_n_buffers(r); i++) {
        drift_trace_buffer_info b;
        drift_trace_reader_buffer(r, i, &b);
        size_t bytes = (size_t)b.numel * drift_dtype_size(b.dtype);
        void *v = malloc(bytes);
        rc = v ? drift_trace_read_buffer(r, i, v, bytes, e) : DRIFT_E_NOMEM;
        free(v);
    }
    if (!rc) {
        char *g = NULL;
        size_t glen = 0;
        rc = drift_trace_read_graph(r, &g, &glen, e);
        free(g);
    }
    free(buf);
    free(ix);
    free(st);
    drift_trace_reader_close(r);
    return rc;
}

/* No HDF5 identifier (file, group, dataset, type, space, attribute) may
 * outlive the call that opened it, error paths included. */
static void assert_no_open_ids(const char *what) {
    ssize_t n = H5Fget_obj_count((hid_t)H5F_OBJ_ALL, H5F_OBJ_ALL);
    if (n != 0) fprintf(stderr, "%s: %zd HDF5 objects left open\n", what, n);
    assert_int_equal(n, 0);
}

static void assert_clean_failure(int rc, const drift_err *e, const char *what) {
    if (rc != DRIFT_E_INPUT && rc != DRIFT_E_IO)
        fprintf(stderr, "%s: rc %d (%s: %s)\n", what, rc, e->where, e->msg);
    assert_true(rc == DRIFT_E_INPUT || rc == DRIFT_E_IO);
    assert_true(e->msg[0] != '\0');
    assert_true(e->where[0] != '\0' || strstr(e->msg, ".h5") != NULL);
}

static void test_valid_baseline(void **state) {
    (void)state;
    drift_err e;
    assert_int_equal(exercise(g_orig_path, &e), DRIFT_OK);
    assert_no_open_ids("valid file");
}

static void test_truncated(void **state) {
    (void)state;
    const char *p = tt_path("trunc.h5");
    size_t offs[64], n = 0;
    size_t fixed[] = {0, 1, 8, 16, 47, 48, 100, 511, 512, 1024, 2048, 4096};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (fixed[i] < g_orig_len) offs[n++] = fixed[i];
    for (size_t k = 1; k < 40 && n < 64; k++) offs[n++] = g_orig_len * k / 40;
    offs[n++] = g_orig_len - 1;
    for (size_t i = 0; i < n; i++) {
        write_bytes(p, g_orig, offs[i]);
        drift_err e;
        int rc = exercise(p, &e);
        char what[64];
        snprintf(what, sizeof what, "truncated at %zu", offs[i]);
        assert_clean_failure(rc, &e, what);
        assert_no_open_ids(what);
        drift_trace_check_report rep;
        rc = drift_trace_check(p, &rep, &e);
        if (rc == DRIFT_OK) drift_trace_check_report_free(&rep);
        else assert_clean_failure(rc, &e, what);
        assert_no_open_ids(what);
        int64_t trimmed = 0;
        rc = drift_trace_repair(p, &trimmed, &e); /* must not crash either */
        assert_no_open_ids(what);
        assert_true(rc == DRIFT_OK || rc == DRIFT_E_INPUT || rc == DRIFT_E_IO || rc == DRIFT_E_UNSUPPORTED);
    }
}

static void test_bit_flips(void **state) {
    (void)state;
    const char *p = tt_path("flip.h5");
    unsigned char *b = malloc(g_orig_len);
    assert_non_null(b);
    uint64_t seed = 0x5eed1234abcdULL;
    int fails = 0, oks = 0;
    for (int it = 0; it < 250; it++) {
        memcpy(b, g_orig, g_orig_len);
        int nflips = 1 + it % 3;
        for (int f = 0; f < nflips; f++) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t off = (size_t)(seed >> 33) % g_orig_len;
            b[off] ^= (unsigned char)(1u << ((seed >> 20) & 7));
        }
        write_bytes(p, b, g_orig_len);
        drift_err e;
        int rc = exercise(p, &e);
        char what[64];
        snprintf(what, sizeof what, "bit flip iteration %d", it);
        if (rc == DRIFT_OK) {
            oks++; /* a flip in raw data or unused space: values differ, structure holds */
        } else {
            fails++;
            assert_clean_failure(rc, &e, what);
        }
        assert_no_open_ids(what);
        drift_trace_check_report rep;
        rc = drift_trace_check(p, &rep, &e);
        if (rc == DRIFT_OK) drift_trace_check_report_free(&rep);
        else assert_clean_failure(rc, &e, what);
        assert_no_open_ids(what);
    }
    free(b);
    fprintf(stderr, "bit flips: %d read back, %d rejected\n", oks, fails);
    assert_true(fails > 0);
}

/* --- hand-crafted ---------------------------------------------------------- */
typedef void (*mutator)(hid_t f);

static hid_t site_group(hid_t f, const char *esc) {
    char p[600];
    snprintf(p, sizeof p, "/sites/%s", esc);
    hid_t g = H5Gopen2(f, p, H5P_DEFAULT);
    assert_true(g >= 0);
    return g;
}

static void replace_data(hid_t f, hid_t type) {
    hid_t g = site_group(f, "blocks.0.ffn:out");
    assert_true(H5Ldelete(g, "data", H5P_DEFAULT) >= 0);
    hsize_t dims[3] = {6, 3, 5};
    hid_t sp = H5Screate_simple(3, dims, NULL);
    hid_t ds = H5Dcreate2(g, "data", type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(ds >= 0);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Gclose(g);
}

static void m_data_int32(hid_t f) { replace_data(f, H5T_STD_I32LE); }

static void m_data_odd_float(hid_t f) {
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 9, 6, 0, 9);
    H5Tset_offset(t, 0);
    H5Tset_precision(t, 16);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 31);
    replace_data(f, t);
    H5Tclose(t);
}

static void m_data_fp16_for_bf16(hid_t f) {
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 10, 5, 0, 10);
    H5Tset_offset(t, 0);
    H5Tset_precision(t, 16);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 15);
    replace_data(f, t);
    H5Tclose(t);
}

static void m_data_big_endian(hid_t f) { replace_data(f, H5T_IEEE_F32BE); }

static void set_str(hid_t loc, const char *name, const char *v) {
    if (H5Aexists(loc, name) > 0) H5Adelete(loc, name);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(v) + 1);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(loc, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(a >= 0);
    assert_true(H5Awrite(a, t, v) >= 0);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
}

static void set_i64v(hid_t loc, const char *name, const int64_t *v, hsize_t n) {
    if (H5Aexists(loc, name) > 0) H5Adelete(loc, name);
    hid_t sp = H5Screate_simple(1, &n, NULL);
    hid_t a = H5Acreate2(loc, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(a >= 0);
    assert_true(H5Awrite(a, H5T_NATIVE_INT64, v) >= 0);
    H5Aclose(a);
    H5Sclose(sp);
}

static void m_missing_side(hid_t f) { assert_true(H5Adelete(f, "side") >= 0); }
static void m_version_string(hid_t f) {
    H5Adelete(f, "format_version");
    set_str(f, "format_version", "1");
}
static void m_version_2(hid_t f) {
    int64_t v = 2;
    H5Adelete(f, "format_version");
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "format_version", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Sclose(sp);
}
static void m_not_a_trace(hid_t f) { set_str(f, "format", "something-else"); }
static void m_bad_side(hid_t f) { set_str(f, "side", "sideways"); }
static void m_rank_ge_world(hid_t f) {
    int64_t v = 9;
    H5Adelete(f, "rank");
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "rank", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Sclose(sp);
}
static void m_guidance_array(hid_t f) {
    int64_t v[2] = {1, 2};
    H5Adelete(f, "guidance_scale");
    set_i64v(f, "guidance_scale", v, 2);
}
static void m_huge_plan(hid_t f) {
    size_t n = (2u << 20);
    char *s = malloc(n + 1);
    memset(s, 'x', n);
    s[n] = '\0';
    set_str(f, "plan", s);
    free(s);
}
static void m_vlen_family(hid_t f) {
    H5Adelete(f, "family");
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "family", t, sp, H5P_DEFAULT, H5P_DEFAULT);
    const char *v = "tiny-dit";
    H5Awrite(a, t, &v);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(t);
}
static void m_stats_short(hid_t f) {
    hid_t g = site_group(f, "input:latents:post_cast");
    hid_t ds = H5Dopen2(g, "stats", H5P_DEFAULT);
    hsize_t n = 3;
    assert_true(H5Dset_extent(ds, &n) >= 0);
    H5Dclose(ds);
    H5Gclose(g);
}
static void m_huge_shape(hid_t f) {
    hid_t g = site_group(f, "blocks.2.norm2:out"); /* stats-only: no data dataset to contradict */
    int64_t v[2] = {(int64_t)1 << 40, (int64_t)1 << 40};
    set_i64v(g, "shape", v, 2);
    H5Gclose(g);
}
static void m_overflow_shape(hid_t f) {
    hid_t g = site_group(f, "blocks.2.norm2:out");
    int64_t v[4] = {INT64_MAX, 3, -1, 2};
    set_i64v(g, "shape", v, 4);
    H5Gclose(g);
}
static void m_too_many_dims(hid_t f) {
    hid_t g = site_group(f, "blocks.2.norm2:out");
    int64_t v[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    set_i64v(g, "shape", v, 9);
    H5Gclose(g);
}
static void m_shape_mismatch(hid_t f) {
    hid_t g = site_group(f, "blocks.0.ffn:out");
    int64_t v[2] = {5, 3};
    set_i64v(g, "shape", v, 2);
    H5Gclose(g);
}
static void m_site_id_dup(hid_t f) {
    hid_t g = site_group(f, "logprob:old");
    H5Adelete(g, "site_id");
    int64_t v = 0;
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(g, "site_id", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT64, &v);
    H5Aclose(a);
    H5Sclose(sp);
    H5Gclose(g);
}
static void m_site_name_mismatch(hid_t f) {
    hid_t g = site_group(f, "logprob:old");
    set_str(g, "name", "logprob:new");
    H5Gclose(g);
}
static void m_index_missing_member(hid_t f) {
    hid_t g = site_group(f, "logprob:old");
    H5Ldelete(g, "index", H5P_DEFAULT);
    hid_t t = H5Tcreate(H5T_COMPOUND, 16);
    H5Tinsert(t, "step", 0, H5T_STD_I64LE);
    H5Tinsert(t, "microbatch", 8, H5T_STD_I32LE);
    H5Tinsert(t, "denoise_index", 12, H5T_STD_I32LE);
    hsize_t n = 6;
    hid_t sp = H5Screate_simple(1, &n, NULL);
    hid_t ds = H5Dcreate2(g, "index", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(ds >= 0);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Tclose(t);
    H5Gclose(g);
}
static void m_index_2d(hid_t f) {
    hid_t g = site_group(f, "logprob:old");
    hid_t ds = H5Dopen2(g, "index", H5P_DEFAULT);
    hid_t t = H5Dget_type(ds);
    H5Dclose(ds);
    H5Ldelete(g, "index", H5P_DEFAULT);
    hsize_t n[2] = {6, 2};
    hid_t sp = H5Screate_simple(2, n, NULL);
    ds = H5Dcreate2(g, "index", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(ds >= 0);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Tclose(t);
    H5Gclose(g);
}
static void m_sites_is_dataset(hid_t f) {
    H5Ldelete(f, "sites", H5P_DEFAULT);
    hsize_t n = 1;
    hid_t sp = H5Screate_simple(1, &n, NULL);
    hid_t ds = H5Dcreate2(f, "sites", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(ds);
    H5Sclose(sp);
}
static void m_steps_decreasing(hid_t f) {
    hid_t ds = H5Dopen2(f, "/steps", H5P_DEFAULT);
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(int64_t));
    H5Tinsert(t, "step", 0, H5T_NATIVE_INT64);
    int64_t v[3] = {0, 5, 3};
    assert_true(H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    H5Tclose(t);
    H5Dclose(ds);
}
static void m_steps_int(hid_t f) {
    H5Ldelete(f, "steps", H5P_DEFAULT);
    hsize_t n = 3;
    hid_t sp = H5Screate_simple(1, &n, NULL);
    hid_t ds = H5Dcreate2(f, "steps", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(ds);
    H5Sclose(sp);
}
static void m_steps_missing(hid_t f) { H5Ldelete(f, "steps", H5P_DEFAULT); }
static void m_metric_bad_site(hid_t f) {
    hid_t ds = H5Dopen2(f, "/metrics/rows", H5P_DEFAULT);
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(int32_t));
    H5Tinsert(t, "site", 0, H5T_NATIVE_INT32);
    hid_t fs = H5Dget_space(ds);
    hsize_t st = 4, cn = 1;
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, &st, NULL, &cn, NULL);
    hid_t ms = H5Screate_simple(1, &cn, NULL);
    int32_t v = 999;
    assert_true(H5Dwrite(ds, t, ms, fs, H5P_DEFAULT, &v) >= 0);
    H5Sclose(ms);
    H5Sclose(fs);
    H5Tclose(t);
    H5Dclose(ds);
}
static void m_metrics_short(hid_t f) {
    hid_t ds = H5Dopen2(f, "/metrics/rows", H5P_DEFAULT);
    hsize_t n = 2;
    assert_true(H5Dset_extent(ds, &n) >= 0);
    H5Dclose(ds);
}
static void m_param_fp16(hid_t f) {
    hid_t g = H5Gopen2(f, "/params", H5P_DEFAULT);
    H5Ldelete(g, "proj_out.bias", H5P_DEFAULT);
    hsize_t n = 12;
    hid_t sp = H5Screate_simple(1, &n, NULL);
    hid_t ds = H5Dcreate2(g, "proj_out.bias", H5T_NATIVE_SHORT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    set_str(ds, "name", "proj_out.bias");
    int64_t s = 12;
    set_i64v(ds, "shape", &s, 1);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Gclose(g);
}
static void m_param_bad_offset(hid_t f) {
    hid_t ds = H5Dopen2(f, "/params/blocks.0.norm2.weight", H5P_DEFAULT);
    int64_t off[2] = {11, 0};
    set_i64v(ds, "offset", off, 2);
    H5Dclose(ds);
}
static void m_param_dtype_bad(hid_t f) {
    hid_t ds = H5Dopen2(f, "/param_dtypes", H5P_DEFAULT);
    hid_t t = H5Tcreate(H5T_COMPOUND, 8);
    hid_t s8 = H5Tcopy(H5T_C_S1);
    H5Tset_size(s8, 8);
    H5Tinsert(t, "dtype", 0, s8);
    char v[2][8] = {"int8", "fp32"};
    assert_true(H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    H5Tclose(s8);
    H5Tclose(t);
    H5Dclose(ds);
}
static void m_graph_huge(hid_t f) {
    H5Ldelete(f, "graph", H5P_DEFAULT);
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, (size_t)100 << 20);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_LATE);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    hid_t ds = H5Dcreate2(f, "graph", t, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    assert_true(ds >= 0);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Tclose(t);
}
static void m_data_dims_huge(hid_t f) {
    hid_t g = site_group(f, "blocks.0.ffn:out");
    H5Ldelete(g, "data", H5P_DEFAULT);
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 7, 8, 0, 7);
    H5Tset_offset(t, 0);
    H5Tset_precision(t, 16);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 127);
    hsize_t dims[3] = {(hsize_t)1 << 50, 3, 5}, maxd[3] = {H5S_UNLIMITED, 3, 5}, ch[3] = {1, 3, 5};
    hid_t sp = H5Screate_simple(3, dims, maxd);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 3, ch);
    hid_t ds = H5Dcreate2(g, "data", t, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    assert_true(ds >= 0);
    H5Dclose(ds);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Tclose(t);
    H5Gclose(g);
}

typedef struct crafted {
    const char *name;
    mutator fn;
    const char *expect; /* substring of where or msg */
} crafted;

static const crafted k_crafted[] = {
    {"site data int32", m_data_int32, "expected bf16 elements"},
    {"site data odd 16-bit float", m_data_odd_float, "bias 31"},
    {"site data fp16 where bf16 declared", m_data_fp16_for_bf16, "found fp16"},
    {"site data big-endian", m_data_big_endian, "not little-endian"},
    {"missing root attribute side", m_missing_side, "\"side\""},
    {"format_version as string", m_version_string, "format_version"},
    {"format_version 2", m_version_2, "version 1"},
    {"not a drift trace", m_not_a_trace, "not a drift trace"},
    {"side unknown", m_bad_side, "sideways"},
    {"rank >= world_size", m_rank_ge_world, "world_size"},
    {"guidance_scale an array", m_guidance_array, "guidance_scale"},
    {"plan attribute over the limit", m_huge_plan, "plan"},
    {"variable-length string attribute", m_vlen_family, "fixed-length"},
    {"stats shorter than index", m_stats_short, "stats has 3 rows"},
    {"huge record shape", m_huge_shape, "shape"},
    {"overflowing shape", m_overflow_shape, "shape"},
    {"nine dimensions", m_too_many_dims, "shape"},
    {"shape attribute contradicts data", m_shape_mismatch, "data"},
    {"duplicate site_id", m_site_id_dup, "site_id"},
    {"site name contradicts group", m_site_name_mismatch, "logprob:new"},
    {"index missing a member", m_index_missing_member, "call_index"},
    {"index 2-D", m_index_2d, "rank"},
    {"sites is a dataset", m_sites_is_dataset, "sites"},
    {"steps decreasing", m_steps_decreasing, "/steps"},
    {"steps of int64", m_steps_int, "/steps"},
    {"steps missing", m_steps_missing, "/steps"},
    {"metric row names site 999", m_metric_bad_site, "999"},
    {"metrics rows fewer than committed", m_metrics_short, "/metrics/rows"},
    {"param of int16", m_param_fp16, "expected fp32"},
    {"param shard past full shape", m_param_bad_offset, "full_shape"},
    {"param dtype int8", m_param_dtype_bad, "int8"},
    {"graph of 100 MiB declared", m_graph_huge, "/graph"},
    {"data dims 2^50 records", m_data_dims_huge, "2^40"},
};

static void test_crafted(void **state) {
    (void)state;
    const char *p = tt_path("crafted.h5");
    for (size_t i = 0; i < sizeof k_crafted / sizeof k_crafted[0]; i++) {
        write_bytes(p, g_orig, g_orig_len);
        hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
        assert_true(f >= 0);
        k_crafted[i].fn(f);
        assert_true(H5Fclose(f) >= 0);
        drift_err e;
        int rc = exercise(p, &e);
        if (rc != DRIFT_E_INPUT || (!strstr(e.msg, k_crafted[i].expect) && !strstr(e.where, k_crafted[i].expect)))
            fprintf(stderr, "case \"%s\": rc %d, %s: %s\n", k_crafted[i].name, rc, e.where, e.msg);
        assert_int_equal(rc, DRIFT_E_INPUT);
        assert_true(strstr(e.msg, k_crafted[i].expect) || strstr(e.where, k_crafted[i].expect));
        assert_non_null(strstr(e.where, "crafted.h5"));
        assert_no_open_ids(k_crafted[i].name);
        /* drift check: an input error (exit 2) or a problem list (exit 1), never OK-and-silent */
        drift_trace_check_report rep;
        rc = drift_trace_check(p, &rep, &e);
        if (rc == DRIFT_OK) {
            if (rep.n_problems == 0) fprintf(stderr, "case \"%s\": check found nothing\n", k_crafted[i].name);
            assert_true(rep.n_problems > 0);
            drift_trace_check_report_free(&rep);
        } else {
            assert_int_equal(rc, DRIFT_E_INPUT);
        }
        assert_no_open_ids(k_crafted[i].name);
    }
}

/* Problems that open tolerates but drift check reports (exit 1). */
static void test_check_finds(void **state) {
    (void)state;
    const char *p = tt_path("checkme.h5");
    /* per-step record count disagrees with the commit row */
    write_bytes(p, g_orig, g_orig_len);
    hid_t f = H5Fopen(p, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, "/steps", H5P_DEFAULT);
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(int64_t));
    H5Tinsert(t, "n_records", 0, H5T_NATIVE_INT64);
    int64_t v[3] = {12, 99, 12};
    assert_true(H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    H5Tclose(t);
    H5Dclose(ds);
    /* a stored tensor altered after its stats were computed */
    ds = H5Dopen2(f, "/sites/output:noise_pred/data", H5P_DEFAULT);
    float z[6 * 12];
    memset(z, 0, sizeof z);
    assert_true(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, z) >= 0);
    H5Dclose(ds);
    H5Fclose(f);
    drift_trace_check_report rep;
    drift_err e;
    assert_int_equal(drift_trace_check(p, &rep, &e), DRIFT_OK);
    int counts = 0, corrupt = 0;
    for (size_t i = 0; i < rep.n_problems; i++) {
        if (strstr(rep.problems[i], "commit row counts 99")) counts++;
        if (strstr(rep.problems[i], "does not match its stats row")) corrupt++;
    }
    assert_int_equal(counts, 1);
    assert_true(corrupt >= 1);
    drift_trace_check_report_free(&rep);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_baseline), cmocka_unit_test(test_truncated), cmocka_unit_test(test_bit_flips),
        cmocka_unit_test(test_crafted),        cmocka_unit_test(test_check_finds),
    };
    if (getenv("TT_FILTER")) cmocka_set_test_filter(getenv("TT_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
