/* formats/trace_index: "a merged index over two rank files reads the same as
 * the two files". Two rank traces written with the formats writer (bf16,
 * fp16 and fp32 sites incl. a name with '/' and '%', a stats-only site,
 * sampled-out records, metrics, step metrics, notes, params with shard
 * offsets, param dtypes, a buffer, the graph, several steps, an uncommitted
 * tail) are merged through drift_trace_merge; then every site record, stats
 * row, metric, note and param is read through the normal reader API via the
 * index (each rank, from another working directory) and compared with the
 * rank file value for value. Hostile cases: missing rank, mismatched run id,
 * duplicate rank, a non-HDF5 input, a rank file deleted after the merge (the
 * reader fails naming it, never reads fill values), a rank file replaced
 * (refused by its content digest, even within the same second), rank files
 * outside the index's folder (refused at merge and at read unless allowed). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "test_trace_util.h"
#include "formats/trace_index.h"

/* scratch paths are short; a truncated one would fail the test loudly */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#define WS 2
#define STEPS 3
#define ROWS 6 /* param rows per rank shard; full tensor has WS * ROWS */

static const char *SITES[] = {"blocks.0.attn:out", "blocks/1%ffn:out", "input:latents:post_cast", "logprob:old"};
static const drift_dtype SITE_DT[] = {DRIFT_BF16, DRIFT_F16, DRIFT_F32, DRIFT_F32};
static const int SITE_STORE[] = {1, 1, 1, 0};

static float val(int rank, int site, int64_t rec, size_t i) {
    return (float)(rank * 1000 + site * 100) + (float)rec * 0.37f - (float)i * 0.011f + (i % 7 == 3 ? 1e-3f : 0.0f);
}

static int write_rank(const char *path, int rank, int ws, const char *run_id, drift_err *e) {
    drift_trace_meta meta = {.side = DRIFT_TRACE_SIDE_TRAINER, .run_id = run_id, .rank = rank, .world_size = ws,
                             .family = "tiny-dit", .guidance_scale = 4.5, .plan_json = "{\"name\":\"t\"}"};
    drift_trace_writer *w = NULL;
    int rc = drift_trace_writer_create(&w, path, &meta, e);
    int ids[4];
    for (int s = 0; !rc && s < 4; s++) {
        drift_trace_site_decl d = {.name = SITES[s], .dtype = SITE_DT[s], .ndim = 2, .shape = {3, 5},
                                   .store_tensors = SITE_STORE[s]};
        rc = drift_trace_writer_declare_site(w, &d, &ids[s], e);
    }
    float pv[ROWS * 4];
    for (int i = 0; i < ROWS * 4; i++) pv[i] = (float)rank + (float)i * 0.5f;
    int64_t shape[2] = {ROWS, 4}, off[2] = {(int64_t)rank * ROWS, 0}, full[2] = {(int64_t)ws * ROWS, 4};
    if (!rc) rc = drift_trace_writer_add_param(w, "blocks.0.norm2.weight", 2, shape, off, full, pv, e);
    if (!rc) rc = drift_trace_writer_add_param(w, "proj_out.bias", 1, shape + 1, NULL, NULL, pv, e);
    if (!rc) rc = drift_trace_writer_set_param_dtype(w, "blocks.0.norm2.weight", DRIFT_F32, e);
    if (!rc) rc = drift_trace_writer_set_param_dtype(w, "proj_out.bias", DRIFT_BF16, e);
    double buf[8];
    for (int i = 0; i < 8; i++) buf[i] = 1.0 / (i + 1 + rank);
    int64_t bshape[2] = {4, 2};
    if (!rc) rc = drift_trace_writer_add_buffer(w, "rope/freqs", DRIFT_F64, 2, bshape, buf, e);
    const char *graph = "{\"nodes\":[]}";
    if (!rc) rc = drift_trace_writer_set_graph(w, graph, strlen(graph), e);
    if (!rc) rc = drift_trace_writer_start(w, e);
    for (int64_t st = 0; !rc && st < STEPS; st++) {
        for (int s = 0; !rc && s < 4; s++)
            for (int call = 0; !rc && call < 2; call++) {
                int64_t rec = st * 2 + call;
                float f[15];
                uint16_t h[15];
                for (size_t i = 0; i < 15; i++) {
                    f[i] = val(rank, s, rec, i);
                    h[i] = SITE_DT[s] == DRIFT_BF16 ? drift_f32_to_bf16(f[i]) : drift_f32_to_f16(f[i]);
                }
                drift_trace_index ix = {.step = st, .microbatch = 0, .denoise_index = (int32_t)st, .call_index = call};
                int store = !(s == 1 && rec % 3 == 2); /* some sampled out */
                rc = drift_trace_writer_append(w, ids[s], &ix, SITE_DT[s] == DRIFT_F32 ? (void *)f : (void *)h, store, e);
            }
        drift_trace_metric m = {.step = st, .variant = 0, .denoise_index = -1, .flags = st == 1 ? 1u : 2u,
                                .numel = 15, .mean_abs_diff = 0.1 * (double)(st + rank), .max_abs_diff = 0.5,
                                .rel_max = 0.01, .cosine = 0.999, .rmse = 0.2, .rmse_oracle = NAN,
                                .worst_index = st, .max_ulp_diff = (uint64_t)(st + 3)};
        if (!rc) rc = drift_trace_writer_add_metric(w, SITES[st % 4], &m, e);
        drift_trace_step_metrics sm = {.step = st, .variant = 0, .denoise_index = -1, .n_pairs = 4,
                                       .log_prob_mean_abs_diff = 1e-3 * (double)st, .ratio_abs_minus_1 = 2e-3,
                                       .approx_kl = 1e-7 * (double)rank};
        if (!rc) rc = drift_trace_writer_add_step_metrics(w, &sm, e);
        char note[64];
        snprintf(note, sizeof note, "rank %d step %lld", rank, (long long)st);
        if (!rc) rc = drift_trace_writer_note(w, st, (int)(st % 3), note, e);
        if (!rc) rc = drift_trace_writer_commit_step(w, st, st == 2 ? DRIFT_TRACE_STEP_DROPPED : 0, e);
    }
    /* an uncommitted tail: appended, never committed (not in the snapshot) */
    if (!rc) {
        float f[15] = {0};
        drift_trace_index ix = {.step = STEPS, .call_index = 0};
        rc = drift_trace_writer_append(w, ids[2], &ix, f, 1, e);
    }
    int rc2 = drift_trace_writer_close(w, e);
    return rc ? rc : rc2;
}

static char dir_a[1100], dir_idx[1100];

static const char *rank_path(int r) {
    static char b[2][1300];
    snprintf(b[r & 1], sizeof b[0], "%s/trace-trainer.rank%d.h5", dir_a, r);
    return b[r & 1];
}

static int setup(void **state) {
    (void)state;
    if (tt_setup_tmp("trace_index")) return -1;
    snprintf(dir_a, sizeof dir_a, "%s/run", tt_tmpdir);
    snprintf(dir_idx, sizeof dir_idx, "%s/idx", tt_tmpdir);
    mkdir(dir_a, 0755);
    mkdir(dir_idx, 0755);
    drift_err e;
    drift_err_clear(&e);
    for (int r = 0; r < WS; r++)
        if (write_rank(rank_path(r), r, WS, "run-42", &e)) {
            fprintf(stderr, "write failed: %s: %s\n", e.where, e.msg);
            return -1;
        }
    return 0;
}

static int merge2(const char *out, const char *a, const char *b, int allow_missing, drift_err *e) {
    const char *in[2] = {a, b};
    drift_trace_merge_opts o = {.inputs = in, .n_inputs = b ? 2 : 1, .out = out, .allow_missing = allow_missing};
    drift_err_clear(e);
    return drift_trace_merge(&o, e);
}

static drift_trace_reader *open_ok(const char *path) {
    drift_err e;
    drift_err_clear(&e);
    drift_trace_reader *r = NULL;
    int rc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &e);
    if (rc) fail_msg("open %s: %s: %s", path, e.where, e.msg);
    return r;
}

/* Every value readable through the API, a against b. */
static void compare_readers(drift_trace_reader *a, drift_trace_reader *b) {
    drift_err e;
    drift_err_clear(&e);
    const drift_trace_meta *ma = drift_trace_reader_meta(a), *mb = drift_trace_reader_meta(b);
    assert_int_equal(ma->rank, mb->rank);
    assert_int_equal(ma->world_size, mb->world_size);
    assert_int_equal(ma->side, mb->side);
    assert_string_equal(ma->run_id, mb->run_id);
    assert_string_equal(ma->family, mb->family);
    assert_string_equal(ma->plan_json, mb->plan_json);
    assert_string_equal(ma->created, mb->created);
    assert_true(ma->guidance_scale == mb->guidance_scale);
    size_t na = 0, nb = 0;
    const drift_trace_step *sa = drift_trace_reader_steps(a, &na), *sb = drift_trace_reader_steps(b, &nb);
    assert_int_equal(na, nb);
    assert_int_equal(na, STEPS);
    for (size_t i = 0; i < na; i++) { /* field by field: the structs have padding */
        assert_int_equal(sa[i].step, sb[i].step);
        assert_int_equal(sa[i].n_records, sb[i].n_records);
        assert_int_equal(sa[i].metrics_rows, sb[i].metrics_rows);
        assert_int_equal(sa[i].step_metrics_rows, sb[i].step_metrics_rows);
        assert_int_equal(sa[i].notes_rows, sb[i].notes_rows);
        assert_true(sa[i].time == sb[i].time);
        assert_int_equal(sa[i].flags, sb[i].flags);
    }
    assert_int_equal(sa[2].flags, DRIFT_TRACE_STEP_DROPPED);
    assert_int_equal(drift_trace_reader_n_sites(a), drift_trace_reader_n_sites(b));
    size_t checked_records = 0;
    for (size_t s = 0; s < drift_trace_reader_n_sites(a); s++) {
        drift_trace_site_info ia, ib;
        assert_int_equal(drift_trace_reader_site(a, s, &ia, &e), DRIFT_OK);
        assert_int_equal(drift_trace_reader_site(b, s, &ib, &e), DRIFT_OK);
        assert_string_equal(ia.name, ib.name);
        assert_int_equal(ia.dtype, ib.dtype);
        assert_int_equal(ia.ndim, ib.ndim);
        assert_memory_equal(ia.shape, ib.shape, sizeof ia.shape);
        assert_int_equal(ia.has_data, ib.has_data);
        assert_int_equal(ia.n_records, ib.n_records);
        assert_int_equal(ia.n_records, STEPS * 2); /* the uncommitted tail is not there */
        int64_t n = ia.n_records;
        drift_trace_index xa[16], xb[16];
        drift_trace_stats ta[16], tb[16];
        assert_int_equal(drift_trace_read_index(a, s, 0, n, xa, &e), DRIFT_OK);
        assert_int_equal(drift_trace_read_index(b, s, 0, n, xb, &e), DRIFT_OK);
        for (int64_t i = 0; i < n; i++) {
            assert_int_equal(xa[i].step, xb[i].step);
            assert_int_equal(xa[i].microbatch, xb[i].microbatch);
            assert_int_equal(xa[i].denoise_index, xb[i].denoise_index);
            assert_int_equal(xa[i].call_index, xb[i].call_index);
            assert_int_equal(xa[i].stored, xb[i].stored);
        }
        assert_int_equal(drift_trace_read_stats(a, s, 0, n, ta, &e), DRIFT_OK);
        assert_int_equal(drift_trace_read_stats(b, s, 0, n, tb, &e), DRIFT_OK);
        assert_memory_equal(ta, tb, (size_t)n * sizeof *ta);
        for (int64_t rec = 0; rec < n; rec++) {
            float fa[15], fb[15];
            uint16_t ra[15], rb[15];
            int rca = drift_trace_read_record_f32(a, s, rec, fa, 15, &e);
            int rcb = drift_trace_read_record_f32(b, s, rec, fb, 15, &e);
            assert_int_equal(rca, rcb);
            if (rca) continue; /* sampled out / stats only: both refuse */
            assert_memory_equal(fa, fb, sizeof fa);
            /* and the values are the written ones, not fill values */
            for (size_t i = 0; i < 15; i++) {
                float want = val(ma->rank, (int)s, rec, i);
                if (ia.dtype == DRIFT_BF16) want = drift_bf16_to_f32(drift_f32_to_bf16(want));
                if (ia.dtype == DRIFT_F16) want = drift_f16_to_f32(drift_f32_to_f16(want));
                assert_true(fa[i] == want);
            }
            if (ia.dtype != DRIFT_F32) {
                assert_int_equal(drift_trace_read_record_raw(a, s, rec, ra, sizeof ra, &e), DRIFT_OK);
                assert_int_equal(drift_trace_read_record_raw(b, s, rec, rb, sizeof rb, &e), DRIFT_OK);
                assert_memory_equal(ra, rb, sizeof ra);
            }
            checked_records++;
        }
    }
    assert_true(checked_records > 10);
    drift_trace_metric *m1 = NULL, *m2 = NULL;
    size_t k1 = 0, k2 = 0;
    assert_int_equal(drift_trace_read_metrics(a, INT64_MIN, &m1, &k1, &e), DRIFT_OK);
    assert_int_equal(drift_trace_read_metrics(b, INT64_MIN, &m2, &k2, &e), DRIFT_OK);
    assert_int_equal(k1, k2);
    assert_int_equal(k1, STEPS);
    assert_memory_equal(m1, m2, k1 * sizeof *m1);
    free(m1);
    free(m2);
    assert_int_equal(drift_trace_reader_n_metric_sites(a), drift_trace_reader_n_metric_sites(b));
    for (size_t i = 0; i < drift_trace_reader_n_metric_sites(a); i++)
        assert_string_equal(drift_trace_reader_metric_site(a, i), drift_trace_reader_metric_site(b, i));
    drift_trace_step_metrics *s1 = NULL, *s2 = NULL;
    assert_int_equal(drift_trace_read_step_metrics(a, 0, &s1, &k1, &e), DRIFT_OK);
    assert_int_equal(drift_trace_read_step_metrics(b, 0, &s2, &k2, &e), DRIFT_OK);
    assert_int_equal(k1, k2);
    assert_int_equal(k1, STEPS - 1);
    assert_memory_equal(s1, s2, k1 * sizeof *s1);
    free(s1);
    free(s2);
    drift_trace_note *n1 = NULL, *n2 = NULL;
    assert_int_equal(drift_trace_read_notes(a, INT64_MIN, &n1, &k1, &e), DRIFT_OK);
    assert_int_equal(drift_trace_read_notes(b, INT64_MIN, &n2, &k2, &e), DRIFT_OK);
    assert_int_equal(k1, k2);
    assert_int_equal(k1, STEPS);
    for (size_t i = 0; i < k1; i++) {
        assert_int_equal(n1[i].step, n2[i].step);
        assert_int_equal(n1[i].level, n2[i].level);
        assert_true(n1[i].time == n2[i].time);
        assert_string_equal(n1[i].text, n2[i].text);
    }
    free(n1);
    free(n2);
    assert_int_equal(drift_trace_reader_n_params(a), drift_trace_reader_n_params(b));
    assert_int_equal(drift_trace_reader_n_params(a), 2);
    for (size_t i = 0; i < drift_trace_reader_n_params(a); i++) {
        drift_trace_param_info pa, pb;
        assert_int_equal(drift_trace_reader_param(a, i, &pa), DRIFT_OK);
        assert_int_equal(drift_trace_reader_param(b, i, &pb), DRIFT_OK);
        assert_string_equal(pa.fqn, pb.fqn);
        assert_int_equal(pa.ndim, pb.ndim);
        assert_memory_equal(pa.shape, pb.shape, sizeof pa.shape);
        assert_memory_equal(pa.offset, pb.offset, sizeof pa.offset);
        assert_memory_equal(pa.full_shape, pb.full_shape, sizeof pa.full_shape);
        assert_int_equal(pa.is_shard, pb.is_shard);
        float va[ROWS * 4], vb[ROWS * 4];
        assert_int_equal(drift_trace_read_param(a, i, va, ROWS * 4, &e), DRIFT_OK);
        assert_int_equal(drift_trace_read_param(b, i, vb, ROWS * 4, &e), DRIFT_OK);
        assert_memory_equal(va, vb, (size_t)pa.numel * sizeof(float));
        if (pa.is_shard) assert_int_equal(pa.offset[0], (int64_t)ma->rank * ROWS);
    }
    assert_int_equal(drift_trace_reader_n_param_dtypes(a), drift_trace_reader_n_param_dtypes(b));
    for (size_t i = 0; i < drift_trace_reader_n_param_dtypes(a); i++) {
        const char *fa = NULL, *fb = NULL;
        drift_dtype da, db;
        drift_trace_reader_param_dtype(a, i, &fa, &da);
        drift_trace_reader_param_dtype(b, i, &fb, &db);
        assert_string_equal(fa, fb);
        assert_int_equal(da, db);
    }
    assert_int_equal(drift_trace_reader_n_buffers(a), 1);
    double ba[8], bb[8];
    assert_int_equal(drift_trace_read_buffer(a, 0, ba, sizeof ba, &e), DRIFT_OK);
    assert_int_equal(drift_trace_read_buffer(b, 0, bb, sizeof bb, &e), DRIFT_OK);
    assert_memory_equal(ba, bb, sizeof ba);
    char *ga = NULL, *gb = NULL;
    size_t la = 0, lb = 0;
    assert_int_equal(drift_trace_read_graph(a, &ga, &la, &e), DRIFT_OK);
    assert_int_equal(drift_trace_read_graph(b, &gb, &lb, &e), DRIFT_OK);
    assert_non_null(ga);
    assert_string_equal(ga, gb);
    free(ga);
    free(gb);
}

static void test_reads_same(void **state) {
    (void)state;
    char idx[1300], view[1400];
    snprintf(idx, sizeof idx, "%s/merged.h5", dir_a);
    drift_err e;
    assert_int_equal(merge2(idx, rank_path(1), rank_path(0), 0, &e), DRIFT_OK);
    assert_int_equal(drift_trace_index_is(idx), 1);
    assert_int_equal(drift_trace_index_is(rank_path(0)), 0);
    drift_trace_index_info info;
    assert_int_equal(drift_trace_index_info_read(idx, &info, &e), DRIFT_OK);
    assert_int_equal(info.n_ranks, 2);
    assert_int_equal(info.n_missing, 0);
    assert_int_equal(info.ranks[0], 0);
    assert_string_equal(info.sources[1], "trace-trainer.rank1.h5"); /* relative to the index */
    drift_trace_index_info_free(&info);
    /* read from another working directory: sources resolve against the index */
    char cwd[2048];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir("/"), 0);
    for (int r = 0; r < WS; r++) {
        snprintf(view, sizeof view, "%s#rank=%d", idx, r);
        drift_trace_reader *a = open_ok(view), *b = open_ok(rank_path(r));
        compare_readers(a, b);
        drift_trace_reader_close(a);
        drift_trace_reader_close(b);
    }
    /* the plain index opens rank 0 */
    drift_trace_reader *a = open_ok(idx);
    assert_int_equal(drift_trace_reader_meta(a)->rank, 0);
    drift_trace_reader_close(a);
    assert_int_equal(chdir(cwd), 0);
    /* a rank the index does not hold */
    snprintf(view, sizeof view, "%s#rank=7", idx);
    drift_trace_reader *r = NULL;
    drift_err_clear(&e);
    assert_int_equal(drift_trace_reader_open(&r, view, DRIFT_TRACE_OPEN_NORMAL, &e), DRIFT_E_INPUT);
    assert_non_null(strstr(e.msg, "rank 7 is not in the index"));
    /* #rank= on a plain trace */
    snprintf(view, sizeof view, "%s#rank=0", rank_path(0));
    drift_err_clear(&e);
    assert_int_equal(drift_trace_reader_open(&r, view, DRIFT_TRACE_OPEN_NORMAL, &e), DRIFT_E_INPUT);
    assert_non_null(strstr(e.msg, "not a drift index"));
}

static void test_moved_together(void **state) {
    (void)state;
    /* index next to its rank files; move the directory; still reads */
    char d1[1300], d2[1300], cmd[8000], idx[1400], p0[1400], p1[1400];
    snprintf(d1, sizeof d1, "%s/move1", tt_tmpdir);
    snprintf(d2, sizeof d2, "%s/move2", tt_tmpdir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' && mkdir -p '%s' && cp '%s' '%s' '%s'", d1, d2, d1, rank_path(0),
             rank_path(1), d1);
    assert_int_equal(system(cmd), 0);
    snprintf(p0, sizeof p0, "%s/trace-trainer.rank0.h5", d1);
    snprintf(p1, sizeof p1, "%s/trace-trainer.rank1.h5", d1);
    snprintf(idx, sizeof idx, "%s/idx.h5", d1);
    drift_err e;
    assert_int_equal(merge2(idx, p0, p1, 0, &e), DRIFT_OK);
    assert_int_equal(rename(d1, d2), 0);
    snprintf(idx, sizeof idx, "%s/idx.h5#rank=1", d2);
    snprintf(p1, sizeof p1, "%s/trace-trainer.rank1.h5", d2);
    drift_trace_reader *a = open_ok(idx), *b = open_ok(p1);
    compare_readers(a, b);
    drift_trace_reader_close(a);
    drift_trace_reader_close(b);
}

static void expect_merge_fail(const char *out, const char *a, const char *b, int code, const char *where_has,
                              const char *msg_has) {
    drift_err e;
    int rc = merge2(out, a, b, 0, &e);
    if (rc != code || (where_has && !strstr(e.where, where_has)) || (msg_has && !strstr(e.msg, msg_has)))
        fail_msg("merge %s %s: rc %d (want %d): %s: %s", a, b ? b : "", rc, code, e.where, e.msg);
    assert_int_equal(access(out, F_OK), -1); /* nothing written */
}

static void test_hostile_inputs(void **state) {
    (void)state;
    char out[1300];
    snprintf(out, sizeof out, "%s/bad.h5", dir_a);
    /* missing rank: error names it; --allow-missing accepts and records it */
    expect_merge_fail(out, rank_path(1), NULL, DRIFT_E_INPUT, NULL, "have no input: 0");
    drift_err e;
    assert_int_equal(merge2(out, rank_path(1), NULL, 1, &e), DRIFT_OK);
    drift_trace_index_info info;
    assert_int_equal(drift_trace_index_info_read(out, &info, &e), DRIFT_OK);
    assert_int_equal(info.n_missing, 1);
    assert_int_equal(info.missing[0], 0);
    drift_trace_index_info_free(&info);
    drift_trace_reader *r = open_ok(out); /* lowest present rank */
    assert_int_equal(drift_trace_reader_meta(r)->rank, 1);
    drift_trace_reader_close(r);
    char view[1400];
    snprintf(view, sizeof view, "%s#rank=0", out);
    drift_err_clear(&e);
    assert_int_equal(drift_trace_reader_open(&r, view, DRIFT_TRACE_OPEN_NORMAL, &e), DRIFT_E_INPUT);
    assert_non_null(strstr(e.msg, "missing at merge time"));
    unlink(out);
    /* duplicate rank */
    expect_merge_fail(out, rank_path(0), rank_path(0), DRIFT_E_INPUT, NULL, "expected distinct ranks");
    /* mismatched run id */
    char other[1300];
    snprintf(other, sizeof other, "%s/other.rank1.h5", dir_a);
    assert_int_equal(write_rank(other, 1, WS, "run-43", &e), DRIFT_OK);
    expect_merge_fail(out, rank_path(0), other, DRIFT_E_INPUT, "other.rank1.h5", "run_id");
    /* mismatched world size */
    assert_int_equal(write_rank(other, 1, 3, "run-42", &e), DRIFT_OK);
    expect_merge_fail(out, rank_path(0), other, DRIFT_E_INPUT, "other.rank1.h5", "world_size");
    /* non-HDF5 input */
    FILE *f = fopen(other, "w");
    assert_non_null(f);
    fputs("not hdf5\n", f);
    fclose(f);
    expect_merge_fail(out, rank_path(0), other, DRIFT_E_INPUT, "other.rank1.h5", "not an HDF5 file");
    /* an absent input */
    expect_merge_fail(out, rank_path(0), "/nonexistent/x.h5", DRIFT_E_IO, "/nonexistent/x.h5", NULL);
    /* an index as input */
    char idx[1300];
    snprintf(idx, sizeof idx, "%s/merged.h5", dir_a);
    expect_merge_fail(out, rank_path(0), idx, DRIFT_E_INPUT, "merged.h5", "is a drift index");
    unlink(other);
}

static void test_source_deleted_or_replaced(void **state) {
    (void)state;
    char d[1300], cmd[8000], idx[1400], p0[1400], p1[1400], view[1500];
    snprintf(d, sizeof d, "%s/del", tt_tmpdir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && cp '%s' '%s' '%s'", d, d, rank_path(0), rank_path(1), d);
    assert_int_equal(system(cmd), 0);
    snprintf(p0, sizeof p0, "%s/trace-trainer.rank0.h5", d);
    snprintf(p1, sizeof p1, "%s/trace-trainer.rank1.h5", d);
    snprintf(idx, sizeof idx, "%s/idx.h5", d);
    drift_err e;
    assert_int_equal(merge2(idx, p0, p1, 0, &e), DRIFT_OK);
    assert_int_equal(unlink(p1), 0);
    snprintf(view, sizeof view, "%s#rank=1", idx);
    drift_trace_reader *r = NULL;
    drift_err_clear(&e);
    int rc = drift_trace_reader_open(&r, view, DRIFT_TRACE_OPEN_NORMAL, &e);
    assert_int_equal(rc, DRIFT_E_IO);
    assert_null(r);
    assert_non_null(strstr(e.msg, "trace-trainer.rank1.h5"));
    assert_non_null(strstr(e.msg, "missing"));
    /* rank 0 still reads */
    r = open_ok(idx);
    drift_trace_reader_close(r);
    /* replaced by a different recording of the same rank: refused, not misread */
    assert_int_equal(write_rank(p1, 1, WS, "run-42", &e), DRIFT_OK);
    FILE *f = fopen(p1, "r+b"); /* same run, rank; but a new file: created may match within a second */
    assert_non_null(f);
    fclose(f);
    drift_err_clear(&e);
    rc = drift_trace_reader_open(&r, view, DRIFT_TRACE_OPEN_NORMAL, &e);
    /* same run id, rank and plan, very likely the same "created" second: the
     * content digest (commit rows carry microsecond commit times) tells */
    assert_int_equal(rc, DRIFT_E_INPUT);
    assert_null(r);
    assert_non_null(strstr(e.msg, "changed since the merge"));
    /* replaced by a non-HDF5 file */
    f = fopen(p1, "w");
    assert_non_null(f);
    fputs("garbage", f);
    fclose(f);
    drift_err_clear(&e);
    rc = drift_trace_reader_open(&r, view, DRIFT_TRACE_OPEN_NORMAL, &e);
    assert_int_equal(rc, DRIFT_E_INPUT);
    assert_non_null(strstr(e.msg, "trace-trainer.rank1.h5"));
    /* a trace whose committed data shrank below the snapshot (another run, fewer steps) */
    assert_int_equal(unlink(p1), 0);
    drift_trace_meta meta = {.side = DRIFT_TRACE_SIDE_TRAINER, .run_id = "run-42", .rank = 1, .world_size = WS};
    drift_trace_writer *w = NULL;
    assert_int_equal(drift_trace_writer_create(&w, p1, &meta, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_start(w, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_close(w, &e), DRIFT_OK);
    drift_err_clear(&e);
    rc = drift_trace_reader_open(&r, view, DRIFT_TRACE_OPEN_NORMAL, &e);
    assert_int_not_equal(rc, DRIFT_OK); /* created differs, or datasets missing/smaller */
    assert_non_null(strstr(e.msg, "trace-trainer.rank1.h5"));
}

/* Sources outside the index's folder: merge refuses them (nothing written)
 * unless allowed; an index holding "../" sources is refused at read time,
 * naming the source, unless allowed, and then reads the same. */
static void test_outside_folder(void **state) {
    (void)state;
    char idx[1300], view[1400];
    snprintf(idx, sizeof idx, "%s/outside.h5", dir_idx);
    drift_trace_index_allow_outside(0);
    expect_merge_fail(idx, rank_path(0), rank_path(1), DRIFT_E_USAGE, "trace-trainer.rank0.h5",
                      "outside the index's folder");
    drift_trace_index_allow_outside(1);
    drift_err e;
    assert_int_equal(merge2(idx, rank_path(0), rank_path(1), 0, &e), DRIFT_OK);
    drift_trace_index_info info;
    assert_int_equal(drift_trace_index_info_read(idx, &info, &e), DRIFT_OK);
    assert_string_equal(info.sources[1], "../run/trace-trainer.rank1.h5");
    drift_trace_index_info_free(&info);
    drift_trace_index_allow_outside(0);
    snprintf(view, sizeof view, "%s#rank=1", idx);
    drift_trace_reader *r = NULL;
    drift_err_clear(&e);
    assert_int_equal(drift_trace_reader_open(&r, view, DRIFT_TRACE_OPEN_NORMAL, &e), DRIFT_E_INPUT);
    assert_null(r);
    assert_non_null(strstr(e.msg, "outside the index's folder"));
    assert_non_null(strstr(e.msg, "trace-trainer.rank1.h5"));
    drift_trace_index_allow_outside(1);
    drift_trace_reader *a = open_ok(view), *b = open_ok(rank_path(1));
    compare_readers(a, b);
    drift_trace_reader_close(a);
    drift_trace_reader_close(b);
    drift_trace_index_allow_outside(0);
    unlink(idx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_same),
        cmocka_unit_test(test_moved_together),
        cmocka_unit_test(test_hostile_inputs),
        cmocka_unit_test(test_source_deleted_or_replaced),
        cmocka_unit_test(test_outside_folder),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
