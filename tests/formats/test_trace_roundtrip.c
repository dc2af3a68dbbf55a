/* formats/trace: a trace with bf16, fp16 and fp32 sites (negatives,
 * subnormals, extremes, infinities, NaN, rounding ties) written and read back
 * through the API, through h5dump (text with %.9g and raw binary) and through
 * h5py: the same numbers everywhere. Also params/buffers/graph/metrics/notes
 * round trips, the stats rows, and writer misuse errors. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <hdf5.h>

#include "test_trace_util.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
/* The blosc filter plugin keeps two global buffers it never frees (and HDF5
 * unloads it before exit): not drift's memory. */
#define LSAN_OFF() __lsan_disable()
#define LSAN_ON() __lsan_enable()
#else
#define LSAN_OFF() ((void)0)
#define LSAN_ON() ((void)0)
#endif

#define N_STEPS 3

static int setup(void **state) {
    (void)state;
    if (tt_setup_tmp("trace_rt")) return -1;
    drift_err e;
    drift_err_clear(&e);
    int rc = tt_write_trace(tt_path("rt.h5"), N_STEPS, &e);
    if (rc) fprintf(stderr, "write failed: %s: %s\n", e.where, e.msg);
    return rc;
}

static void test_meta_and_sites(void **state) {
    (void)state;
    drift_trace_reader *r = NULL;
    drift_err e;
    drift_err_clear(&e);
    int rc = drift_trace_reader_open(&r, tt_path("rt.h5"), DRIFT_TRACE_OPEN_NORMAL, &e);
    if (rc) fprintf(stderr, "%s: %s\n", e.where, e.msg);
    assert_int_equal(rc, DRIFT_OK);
    const drift_trace_meta *m = drift_trace_reader_meta(r);
    assert_int_equal(m->format_version, 1);
    assert_int_equal(m->side, DRIFT_TRACE_SIDE_TRAINER);
    assert_string_equal(m->run_id, "run-42");
    assert_int_equal(m->rank, 1);
    assert_int_equal(m->world_size, 4);
    assert_string_equal(m->family, "tiny-dit:layers=2");
    assert_true(m->guidance_scale == 4.5);
    assert_string_equal(m->plan_json, tt_meta().plan_json);
    assert_true(strncmp(m->producer, "drift ", 6) == 0);
    assert_int_equal(strlen(m->created), 20);
    assert_int_equal(drift_trace_reader_unclean(r), 0);

    size_t ns = 0;
    const drift_trace_step *st = drift_trace_reader_steps(r, &ns);
    assert_int_equal(ns, N_STEPS);
    for (size_t i = 0; i < ns; i++) {
        assert_int_equal(st[i].step, (int64_t)i);
        assert_int_equal(st[i].n_records, TT_N_SITES * TT_RECS_PER_STEP);
        assert_int_equal(st[i].metrics_rows, (int64_t)(i + 1) * (TT_N_SITES + 1));
    }
    assert_int_equal(drift_trace_reader_n_sites(r), TT_N_SITES);
    for (int i = 0; i < TT_N_SITES; i++) {
        drift_trace_site_info si;
        assert_int_equal(drift_trace_reader_site(r, (size_t)i, &si, &e), DRIFT_OK);
        assert_string_equal(si.name, tt_sites[i].name);
        assert_int_equal(si.id, i);
        assert_int_equal(si.dtype, tt_sites[i].dtype);
        assert_int_equal(si.ndim, tt_sites[i].ndim);
        for (int d = 0; d < si.ndim; d++) assert_int_equal(si.shape[d], tt_sites[i].shape[d]);
        assert_int_equal(si.has_data, tt_sites[i].store);
        assert_int_equal(si.compress, tt_sites[i].compress);
        assert_int_equal(si.n_records, N_STEPS * TT_RECS_PER_STEP);
        assert_int_equal(drift_trace_reader_find_site(r, tt_sites[i].name), i);
    }
    assert_int_equal(drift_trace_reader_find_site(r, "nope"), -1);
    drift_trace_reader_close(r);
}

static void test_records(void **state) {
    (void)state;
    drift_trace_reader *r = NULL;
    drift_err e;
    drift_err_clear(&e);
    assert_int_equal(drift_trace_reader_open(&r, tt_path("rt.h5"), DRIFT_TRACE_OPEN_NORMAL, &e), DRIFT_OK);
    char why[600];
    for (int i = 0; i < TT_N_SITES; i++) {
        int64_t nrec = N_STEPS * TT_RECS_PER_STEP;
        drift_trace_index ix[16];
        drift_trace_stats st[16];
        assert_int_equal(drift_trace_read_index(r, (size_t)i, 0, nrec, ix, &e), DRIFT_OK);
        assert_int_equal(drift_trace_read_stats(r, (size_t)i, 0, nrec, st, &e), DRIFT_OK);
        for (int64_t k = 0; k < nrec; k++) {
            assert_int_equal(ix[k].step, k / TT_RECS_PER_STEP);
            assert_int_equal(ix[k].microbatch, k % TT_RECS_PER_STEP);
            assert_int_equal(ix[k].denoise_index, (k / TT_RECS_PER_STEP) % 4);
            int stored = tt_sites[i].store && !tt_sampled_out(i, k);
            assert_int_equal(ix[k].stored, stored);
            /* stats computed by the writer from the values, even when sampled out */
            unsigned char raw[256];
            drift_trace_stats want;
            tt_fill(i, k, tt_sites[i].dtype, raw, (size_t)tt_numel(&tt_sites[i]));
            drift_trace_stats_compute(raw, tt_sites[i].dtype, (size_t)tt_numel(&tt_sites[i]), &want);
            assert_memory_equal(&want, &st[k], sizeof want);
            if (stored) {
                int ok = tt_record_matches(r, i, k, why, sizeof why);
                if (!ok) fprintf(stderr, "%s\n", why);
                assert_true(ok);
            } else {
                float f[64];
                drift_err_clear(&e);
                assert_int_equal(drift_trace_read_record_f32(r, (size_t)i, k, f, 64, &e), DRIFT_E_INPUT);
                assert_true(strstr(e.msg, tt_sites[i].store ? "sampled out" : "statistics only") != NULL);
            }
        }
        /* find_record */
        drift_trace_index key = {2, 1, 2, 0, 0};
        int64_t rec = -2;
        assert_int_equal(drift_trace_find_record(r, (size_t)i, &key, &rec, &e), DRIFT_OK);
        assert_int_equal(rec, 5);
        key.step = 9;
        assert_int_equal(drift_trace_find_record(r, (size_t)i, &key, &rec, &e), DRIFT_OK);
        assert_int_equal(rec, -1);
    }
    /* buffer too small, record out of range */
    float small[2];
    assert_int_equal(drift_trace_read_record_f32(r, 0, 0, small, 2, &e), DRIFT_E_USAGE);
    float big[64];
    assert_int_equal(drift_trace_read_record_f32(r, 0, 6, big, 64, &e), DRIFT_E_USAGE);
    assert_int_equal(drift_trace_read_record_f32(r, 99, 0, big, 64, &e), DRIFT_E_USAGE);
    drift_trace_reader_close(r);
}

static void test_stats_compute(void **state) {
    (void)state;
    float v[6] = {1.0f, -3.0f, NAN, INFINITY, 2.0f, -INFINITY};
    drift_trace_stats s;
    drift_trace_stats_compute(v, DRIFT_F32, 6, &s);
    assert_true(s.min == -INFINITY && s.max == INFINITY);
    assert_true(s.mean == 0.0);
    assert_true(s.mean_abs == 2.0);
    assert_true(fabs(s.l2 - sqrt(14.0)) < 1e-15);
    assert_int_equal(s.nan_count, 1);
    assert_int_equal(s.inf_count, 2);
    float nanv[2] = {NAN, NAN};
    drift_trace_stats_compute(nanv, DRIFT_F32, 2, &s);
    assert_true(isnan(s.min) && isnan(s.max) && isnan(s.mean));
    uint16_t b[3] = {0x3f80, 0xc000, 0x0001};
    drift_trace_stats_compute(b, DRIFT_BF16, 3, &s);
    assert_true(s.max == 1.0 && s.min == -2.0);
}

static void test_tables(void **state) {
    (void)state;
    drift_trace_reader *r = NULL;
    drift_err e;
    drift_err_clear(&e);
    assert_int_equal(drift_trace_reader_open(&r, tt_path("rt.h5"), DRIFT_TRACE_OPEN_NORMAL, &e), DRIFT_OK);
    drift_trace_metric *m = NULL;
    size_t n = 0;
    assert_int_equal(drift_trace_read_metrics(r, INT64_MIN, &m, &n, &e), DRIFT_OK);
    assert_int_equal(n, N_STEPS * (TT_N_SITES + 1));
    assert_int_equal(drift_trace_reader_n_metric_sites(r), TT_N_SITES + 1);
    for (size_t k = 0; k < n; k++) {
        int64_t step = (int64_t)(k / (TT_N_SITES + 1));
        int i = (int)(k % (TT_N_SITES + 1));
        assert_int_equal(m[k].step, step);
        assert_int_equal(m[k].site, i);
        const char *nm = drift_trace_reader_metric_site(r, (size_t)m[k].site);
        if (i < TT_N_SITES) {
            assert_string_equal(nm, tt_sites[i].name);
            assert_true(m[k].mean_abs_diff == 1e-3 * (double)(step + 1) * (i + 1));
            assert_true(isnan(m[k].rmse_oracle));
            assert_int_equal(m[k].max_ulp_diff, 3 + i);
            assert_int_equal(m[k].flags, i == 2 ? DRIFT_TRACE_METRIC_FIRST_DIVERGENT : 0u);
        } else {
            assert_string_equal(nm, "replay:only_node");
            assert_int_equal(m[k].denoise_index, 1);
        }
    }
    free(m);
    /* incremental: rows after step 1 */
    assert_int_equal(drift_trace_read_metrics(r, 1, &m, &n, &e), DRIFT_OK);
    assert_int_equal(n, TT_N_SITES + 1);
    assert_int_equal(m[0].step, 2);
    free(m);
    assert_int_equal(drift_trace_read_metrics(r, 2, &m, &n, &e), DRIFT_OK);
    assert_int_equal(n, 0);
    assert_null(m);
    drift_trace_step_metrics *sm = NULL;
    assert_int_equal(drift_trace_read_step_metrics(r, 0, &sm, &n, &e), DRIFT_OK);
    assert_int_equal(n, 2);
    assert_int_equal(sm[0].step, 1);
    assert_true(sm[1].log_prob_mean_abs_diff == 1e-4 * 3.0);
    assert_true(sm[1].approx_kl == 3e-9);
    free(sm);
    drift_trace_note *nt = NULL;
    assert_int_equal(drift_trace_read_notes(r, INT64_MIN, &nt, &n, &e), DRIFT_OK);
    assert_int_equal(n, N_STEPS);
    assert_string_equal(nt[2].text, "step 2 done");
    free(nt);

    /* params */
    assert_int_equal(drift_trace_reader_n_params(r), 2);
    long pi = drift_trace_reader_find_param(r, "blocks.0.norm2.weight");
    assert_true(pi >= 0);
    drift_trace_param_info p;
    assert_int_equal(drift_trace_reader_param(r, (size_t)pi, &p), DRIFT_OK);
    assert_int_equal(p.ndim, 2);
    assert_int_equal(p.shape[0], 3);
    assert_int_equal(p.offset[0], 3);
    assert_int_equal(p.full_shape[0], 12);
    assert_int_equal(p.is_shard, 1);
    float pv[12];
    assert_int_equal(drift_trace_read_param(r, (size_t)pi, pv, 12, &e), DRIFT_OK);
    for (int i = 0; i < 12; i++) assert_true(pv[i] == (float)i * 0.25f - 1.0f);
    assert_int_equal(drift_trace_read_param(r, (size_t)pi, pv, 11, &e), DRIFT_E_USAGE);
    pi = drift_trace_reader_find_param(r, "proj_out.bias");
    assert_int_equal(drift_trace_reader_param(r, (size_t)pi, &p), DRIFT_OK);
    assert_int_equal(p.is_shard, 0);
    assert_int_equal(drift_trace_reader_n_param_dtypes(r), 2);
    assert_int_equal(drift_trace_reader_find_param_dtype(r, "proj_out.bias"), DRIFT_BF16);
    assert_int_equal(drift_trace_reader_find_param_dtype(r, "blocks.0.norm2.weight"), DRIFT_F32);
    assert_int_equal(drift_trace_reader_find_param_dtype(r, "x"), DRIFT_DTYPE_INVALID);
    /* buffers */
    assert_int_equal(drift_trace_reader_n_buffers(r), 1);
    drift_trace_buffer_info b;
    assert_int_equal(drift_trace_reader_buffer(r, 0, &b), DRIFT_OK);
    assert_string_equal(b.name, "rope.freqs");
    assert_int_equal(b.dtype, DRIFT_F64);
    double rope[8];
    assert_int_equal(drift_trace_read_buffer(r, 0, rope, sizeof rope, &e), DRIFT_OK);
    for (int i = 0; i < 8; i++) assert_true(rope[i] == cos((double)i / 3.0));
    /* graph */
    char *g = NULL;
    size_t glen = 0;
    assert_int_equal(drift_trace_read_graph(r, &g, &glen, &e), DRIFT_OK);
    assert_string_equal(g, "{\"nodes\":[{\"op\":\"linear\",\"name\":\"proj_out\"}]}");
    assert_int_equal(glen, strlen(g));
    free(g);
    drift_trace_reader_close(r);
    assert_int_equal(H5Fget_obj_count((hid_t)H5F_OBJ_ALL, H5F_OBJ_ALL), 0);
}

/* Runs cmd and returns its stdout (malloc'd) or NULL. */
static char *run_capture(const char *cmd) {
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    size_t k;
    while (buf && (k = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += k;
        if (cap - len < 1024) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    int st = pclose(p);
    if (!buf) return NULL;
    buf[len] = '\0';
    if (st != 0) {
        fprintf(stderr, "command failed (%d): %s\n%s\n", st, cmd, buf);
        free(buf);
        return NULL;
    }
    return buf;
}

/* The widened fp32 value of element i of record rec, site s (as written). */
static float written_f32(int s, int64_t rec, size_t i) {
    unsigned char raw[256];
    float f[64];
    size_t n = (size_t)tt_numel(&tt_sites[s]);
    tt_fill(s, rec, tt_sites[s].dtype, raw, n);
    drift_dtype_to_f32_n(raw, tt_sites[s].dtype, f, n);
    return f[i];
}

static int same_float(float a, float b) {
    return (isnan(a) && isnan(b)) || drift_f32_bits(a) == drift_f32_bits(b);
}

static void test_h5dump_text_and_binary(void **state) {
    (void)state;
    for (int s = 0; s < TT_N_SITES; s++) {
        if (!tt_sites[s].store) continue;
        char esc[64], cmd[2048];
        /* '/' in site names is escaped as %2F (docs/format.md) */
        const char *nm = tt_sites[s].name;
        size_t o = 0;
        for (const char *p = nm; *p; p++) {
            if (*p == '/' || *p == '%') o += (size_t)snprintf(esc + o, sizeof esc - o, "%%%s", *p == '/' ? "2F" : "25");
            else esc[o++] = *p;
        }
        esc[o] = '\0';
        snprintf(cmd, sizeof cmd, "h5dump -m %%.9g -d '/sites/%s/data' '%s' 2>&1", esc, tt_path("rt.h5"));
        char *out = run_capture(cmd);
        assert_non_null(out);
        char *data = strstr(out, "DATA {");
        assert_non_null(data);
        /* values, comma separated, after "(i,j,...): " index prefixes */
        size_t numel = (size_t)tt_numel(&tt_sites[s]);
        size_t total = numel * N_STEPS * TT_RECS_PER_STEP, got = 0;
        char *p = data + 6;
        for (;;) {
            while (*p == ' ' || *p == '\n' || *p == ',') p++;
            if (*p == '(') {
                p = strchr(p, ':');
                assert_non_null(p);
                p++;
                continue;
            }
            if (*p == '}' || !*p) break;
            char *end = NULL;
            double v = strtod(p, &end);
            assert_true(end != p);
            assert_true(got < total);
            int64_t rec = (int64_t)(got / numel);
            size_t i = got % numel;
            if (!tt_sampled_out(s, rec)) {
                float want = written_f32(s, rec, i);
                if (!same_float((float)v, want))
                    fprintf(stderr, "site %s rec %lld el %zu: h5dump %.9g, want %.9g\n", nm, (long long)rec, i, v,
                            (double)want);
                assert_true(same_float((float)v, want));
            }
            got++;
            p = end;
        }
        assert_int_equal(got, total);
        free(out);
        /* binary: raw element bits in file order */
        char bin[1400];
        snprintf(bin, sizeof bin, "%s", tt_path("dump.bin"));
        snprintf(cmd, sizeof cmd, "h5dump -d '/sites/%s/data' -b FILE -o '%s' '%s' >/dev/null 2>&1", esc, bin,
                 tt_path("rt.h5"));
        assert_int_equal(system(cmd), 0);
        FILE *f = fopen(bin, "rb");
        assert_non_null(f);
        size_t esz = drift_dtype_size(tt_sites[s].dtype);
        unsigned char *all = malloc(total * esz);
        assert_int_equal(fread(all, esz, total, f), total);
        fclose(f);
        for (int64_t rec = 0; rec < N_STEPS * TT_RECS_PER_STEP; rec++) {
            if (tt_sampled_out(s, rec)) continue;
            unsigned char want[256];
            tt_fill(s, rec, tt_sites[s].dtype, want, numel);
            assert_memory_equal(all + (size_t)rec * numel * esz, want, numel * esz);
        }
        free(all);
    }
}

static const char *k_py =
    "import sys, struct, h5py, numpy as np\n"
    "f = h5py.File(sys.argv[1], 'r')\n"
    "assert f.attrs['format'] == b'drift-trace' or f.attrs['format'] == 'drift-trace', f.attrs['format']\n"
    "for key in f['sites']:\n"
    "    g = f['sites'][key]\n"
    "    if 'data' not in g: continue\n"
    "    d = g['data']\n"
    "    vals = d.astype('f4')[...].reshape(-1)\n"
    "    raw = np.empty(d.shape, dtype='<u%d' % d.id.get_type().get_size())\n"
    "    d.id.read(h5py.h5s.ALL, h5py.h5s.ALL, raw, mtype=d.id.get_type())\n"
    "    name = g.attrs['name']\n"
    "    name = name.decode() if isinstance(name, bytes) else name\n"
    "    print(name)\n"
    "    print(str(d.dtype) + ' ' + ' '.join('%08x' % x for x in vals.view('<u4')))\n"
    "    print(' '.join('%x' % x for x in raw.reshape(-1)))\n";

static void test_h5py(void **state) {
    (void)state;
    const char *py = getenv("PYTHON3");
    if (!py || !py[0]) py = "/usr/bin/python3";
    FILE *f = fopen(tt_path("read.py"), "w");
    assert_non_null(f);
    fputs(k_py, f);
    fclose(f);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' 2>&1", py, tt_path("read.py"), tt_path("rt.h5"));
    char *out = run_capture(cmd);
    if (!out) skip(); /* no h5py: the integration test covers it where installed */
    int seen = 0;
    char *save = NULL;
    for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        int s = -1;
        for (int i = 0; i < TT_N_SITES; i++)
            if (strcmp(line, tt_sites[i].name) == 0) s = i;
        assert_true(s >= 0);
        char *vals = strtok_r(NULL, "\n", &save), *raws = strtok_r(NULL, "\n", &save);
        assert_non_null(vals);
        assert_non_null(raws);
        /* h5py maps bf16 to float32 (same 8-bit exponent) and fp16 to float16 */
        const char *want_np = tt_sites[s].dtype == DRIFT_F16 ? "float16" : "float32";
        assert_true(strncmp(vals, want_np, strlen(want_np)) == 0);
        char *p = strchr(vals, ' '), *q = raws;
        size_t numel = (size_t)tt_numel(&tt_sites[s]);
        for (int64_t rec = 0; rec < N_STEPS * TT_RECS_PER_STEP; rec++) {
            unsigned char want[256] = {0};
            tt_fill(s, rec, tt_sites[s].dtype, want, numel);
            for (size_t i = 0; i < numel; i++) {
                char *e1, *e2;
                uint32_t fb = (uint32_t)strtoul(p, &e1, 16);
                uint32_t rb = (uint32_t)strtoul(q, &e2, 16);
                assert_true(e1 != p && e2 != q);
                p = e1;
                q = e2;
                if (tt_sampled_out(s, rec)) continue;
                float wf = written_f32(s, rec, i);
                assert_true(same_float(drift_bits_f32(fb), wf));
                uint32_t wr = drift_dtype_size(tt_sites[s].dtype) == 2 ? ((uint16_t *)want)[i] : ((uint32_t *)want)[i];
                assert_int_equal(rb, wr);
            }
        }
        seen++;
    }
    assert_int_equal(seen, 5); /* sites that store tensors */
    free(out);
}

static void test_writer_misuse(void **state) {
    (void)state;
    drift_trace_writer *w = NULL;
    drift_err e;
    drift_err_clear(&e);
    drift_trace_meta m = tt_meta();
    assert_int_equal(drift_trace_writer_create(&w, tt_path("misuse.h5"), &m, &e), DRIFT_OK);
    drift_trace_site_decl d;
    memset(&d, 0, sizeof d);
    d.name = "a:out";
    d.dtype = DRIFT_F64;
    d.ndim = 1;
    d.shape[0] = 4;
    assert_int_equal(drift_trace_writer_declare_site(w, &d, NULL, &e), DRIFT_E_USAGE);
    assert_non_null(strstr(e.msg, "expected fp32, bf16 or fp16"));
    d.dtype = DRIFT_BF16;
    d.shape[0] = 0;
    assert_int_equal(drift_trace_writer_declare_site(w, &d, NULL, &e), DRIFT_E_USAGE);
    d.shape[0] = (int64_t)1 << 31;
    d.ndim = 1;
    assert_int_equal(drift_trace_writer_declare_site(w, &d, NULL, &e), DRIFT_E_USAGE); /* 4 GiB record */
    d.shape[0] = 4;
    d.name = ".";
    assert_int_equal(drift_trace_writer_declare_site(w, &d, NULL, &e), DRIFT_E_USAGE);
    d.name = "bad\nname";
    assert_int_equal(drift_trace_writer_declare_site(w, &d, NULL, &e), DRIFT_E_USAGE);
    d.name = "a:out";
    int id = -1;
    assert_int_equal(drift_trace_writer_declare_site(w, &d, &id, &e), DRIFT_OK);
    assert_int_equal(id, 0);
    assert_int_equal(drift_trace_writer_declare_site(w, &d, &id, &e), DRIFT_E_USAGE); /* duplicate */
    drift_trace_index ix = {0, 0, 0, 0, 0};
    uint16_t v[4] = {0x3f80, 0, 0, 0};
    assert_int_equal(drift_trace_writer_append(w, 0, &ix, v, 1, &e), DRIFT_E_USAGE); /* before start */
    assert_int_equal(drift_trace_writer_commit_step(w, 0, 0, &e), DRIFT_E_USAGE);
    int64_t shp = 2, off = 1, full = 2;
    float pv[2] = {1, 2};
    assert_int_equal(drift_trace_writer_add_param(w, "p", 1, &shp, &off, &full, pv, &e), DRIFT_E_USAGE); /* shard past end */
    assert_int_equal(drift_trace_writer_start(w, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_declare_site(w, &d, &id, &e), DRIFT_E_USAGE); /* after start */
    assert_non_null(strstr(e.msg, "before drift_trace_writer_start"));
    assert_int_equal(drift_trace_writer_add_param(w, "p", 1, &shp, NULL, NULL, pv, &e), DRIFT_E_USAGE);
    assert_int_equal(drift_trace_writer_append(w, 1, &ix, v, 1, &e), DRIFT_E_USAGE); /* no site 1 */
    assert_int_equal(drift_trace_writer_append(w, 0, &ix, v, 1, &e), DRIFT_OK);
    ix.step = 1;
    assert_int_equal(drift_trace_writer_append(w, 0, &ix, v, 1, &e), DRIFT_E_USAGE); /* step 0 still open */
    assert_int_equal(drift_trace_writer_commit_step(w, 1, 0, &e), DRIFT_E_USAGE);
    assert_int_equal(drift_trace_writer_commit_step(w, 0, 0, &e), DRIFT_OK);
    ix.step = 0;
    assert_int_equal(drift_trace_writer_append(w, 0, &ix, v, 1, &e), DRIFT_E_USAGE); /* step 0 committed */
    assert_int_equal(drift_trace_writer_commit_step(w, 0, 0, &e), DRIFT_E_USAGE);
    assert_int_equal(drift_trace_writer_commit_step(w, 5, 0, &e), DRIFT_OK); /* empty step */
    assert_int_equal(drift_trace_writer_close(w, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_close(NULL, &e), DRIFT_OK);
    drift_trace_reader_close(NULL);

    /* the file is a valid trace with steps 0 and 5 */
    drift_trace_reader *r = NULL;
    assert_int_equal(drift_trace_reader_open(&r, tt_path("misuse.h5"), DRIFT_TRACE_OPEN_NORMAL, &e), DRIFT_OK);
    size_t n = 0;
    const drift_trace_step *st = drift_trace_reader_steps(r, &n);
    assert_int_equal(n, 2);
    assert_int_equal(st[1].step, 5);
    assert_int_equal(st[1].n_records, 0);
    drift_trace_reader_close(r);

    /* missing / not a trace */
    assert_int_equal(drift_trace_reader_open(&r, tt_path("absent.h5"), DRIFT_TRACE_OPEN_NORMAL, &e), DRIFT_E_IO);
    assert_null(r);
    FILE *f = fopen(tt_path("text.h5"), "w");
    fputs("hello", f);
    fclose(f);
    assert_int_equal(drift_trace_reader_open(&r, tt_path("text.h5"), DRIFT_TRACE_OPEN_NORMAL, &e), DRIFT_E_INPUT);
    assert_non_null(strstr(e.msg, "not an HDF5 file"));
    /* every writer/reader path above, failures included, closed what it opened */
    assert_int_equal(H5Fget_obj_count((hid_t)H5F_OBJ_ALL, H5F_OBJ_ALL), 0);
}

static void test_check_clean(void **state) {
    (void)state;
    drift_trace_check_report rep;
    drift_err e;
    drift_err_clear(&e);
    assert_int_equal(drift_trace_check(tt_path("rt.h5"), &rep, &e), DRIFT_OK);
    for (size_t i = 0; i < rep.n_problems; i++) fprintf(stderr, "problem: %s\n", rep.problems[i]);
    assert_int_equal(rep.n_problems, 0);
    assert_int_equal(rep.unclean, 0);
    assert_int_equal(rep.committed_steps, N_STEPS);
    assert_int_equal(rep.last_step, N_STEPS - 1);
    assert_int_equal(rep.committed_records, N_STEPS * TT_RECS_PER_STEP * TT_N_SITES);
    assert_int_equal(rep.uncommitted_records, 0);
    assert_int_equal(rep.n_metric_rows, N_STEPS * (TT_N_SITES + 1));
    drift_trace_check_report_free(&rep);
    drift_trace_check_report_free(NULL);
    int64_t trimmed = -1;
    assert_int_equal(drift_trace_repair(tt_path("rt.h5"), &trimmed, &e), DRIFT_OK); /* clean: untouched */
    assert_int_equal(trimmed, 0);
}

static void blosc_body(void);
static void test_blosc(void **state) {
    (void)state;
    if (!drift_trace_blosc_available()) skip();
    LSAN_OFF();
    blosc_body();
    LSAN_ON();
}

static void blosc_body(void) {
    drift_trace_writer *w = NULL;
    drift_err e;
    drift_err_clear(&e);
    drift_trace_meta m = tt_meta();
    assert_int_equal(drift_trace_writer_create(&w, tt_path("blosc.h5"), &m, &e), DRIFT_OK);
    drift_trace_site_decl d;
    memset(&d, 0, sizeof d);
    d.name = "blocks.0:out";
    d.dtype = DRIFT_BF16;
    d.ndim = 2;
    d.shape[0] = 64;
    d.shape[1] = 64;
    d.store_tensors = 1;
    d.compress = DRIFT_TRACE_COMPRESS_BLOSC;
    assert_int_equal(drift_trace_writer_declare_site(w, &d, NULL, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_start(w, &e), DRIFT_OK);
    uint16_t *v = malloc(64 * 64 * 2);
    for (int s = 0; s < 3; s++) {
        for (int i = 0; i < 64 * 64; i++) v[i] = drift_f32_to_bf16(tt_value(0, s, (size_t)i));
        drift_trace_index ix = {s, 0, 0, 0, 0};
        assert_int_equal(drift_trace_writer_append(w, 0, &ix, v, 1, &e), DRIFT_OK);
        assert_int_equal(drift_trace_writer_commit_step(w, s, 0, &e), DRIFT_OK);
    }
    assert_int_equal(drift_trace_writer_close(w, &e), DRIFT_OK);
    drift_trace_reader *r = NULL;
    assert_int_equal(drift_trace_reader_open(&r, tt_path("blosc.h5"), DRIFT_TRACE_OPEN_NORMAL, &e), DRIFT_OK);
    drift_trace_site_info si;
    assert_int_equal(drift_trace_reader_site(r, 0, &si, &e), DRIFT_OK);
    assert_int_equal(si.compress, DRIFT_TRACE_COMPRESS_BLOSC);
    uint16_t *got = malloc(64 * 64 * 2);
    assert_int_equal(drift_trace_read_record_raw(r, 0, 2, got, 64 * 64 * 2, &e), DRIFT_OK);
    assert_memory_equal(got, v, 64 * 64 * 2);
    free(got);
    free(v);
    drift_trace_reader_close(r);
}

/* A 300 KB plan (dense attribute storage), a 511-byte site name full of
 * '/' and '%' (escaped to 1.5 KB), a scalar site, an empty step. */
static void test_long_strings(void **state) {
    (void)state;
    size_t plen = 300000;
    char *plan = malloc(plen + 1);
    assert_non_null(plan);
    memset(plan, ' ', plen);
    memcpy(plan, "{\"name\":\"x\"", 11); /* without its NUL: the plan is all 300 KB */
    plan[plen - 1] = '}';
    plan[plen] = '\0';
    char name[DRIFT_TRACE_NAME_MAX];
    for (size_t i = 0; i < sizeof name - 1; i++) name[i] = "a/%."[i % 4];
    name[sizeof name - 1] = '\0';
    drift_trace_meta m = tt_meta();
    m.plan_json = plan;
    drift_trace_writer *w = NULL;
    drift_err e;
    drift_err_clear(&e);
    int rc = drift_trace_writer_create(&w, tt_path("long.h5"), &m, &e);
    if (rc) fprintf(stderr, "%s: %s\n", e.where, e.msg);
    assert_int_equal(rc, DRIFT_OK);
    drift_trace_site_decl d;
    memset(&d, 0, sizeof d);
    d.name = name;
    d.dtype = DRIFT_F32;
    d.ndim = 0;
    d.store_tensors = 1;
    assert_int_equal(drift_trace_writer_declare_site(w, &d, NULL, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_start(w, &e), DRIFT_OK);
    float v = -0.0f;
    drift_trace_index ix = {7, 0, -1, 0, 0};
    assert_int_equal(drift_trace_writer_append(w, 0, &ix, &v, 1, &e), DRIFT_OK);
    drift_trace_metric mr;
    memset(&mr, 0, sizeof mr);
    mr.step = 7;
    assert_int_equal(drift_trace_writer_add_metric(w, name, &mr, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_commit_step(w, 7, DRIFT_TRACE_STEP_DROPPED, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_close(w, &e), DRIFT_OK);
    drift_trace_reader *r = NULL;
    rc = drift_trace_reader_open(&r, tt_path("long.h5"), DRIFT_TRACE_OPEN_NORMAL, &e);
    if (rc) fprintf(stderr, "%s: %s\n", e.where, e.msg);
    assert_int_equal(rc, DRIFT_OK);
    assert_int_equal(strlen(drift_trace_reader_meta(r)->plan_json), plen);
    assert_string_equal(drift_trace_reader_meta(r)->plan_json, plan);
    drift_trace_site_info si;
    assert_int_equal(drift_trace_reader_site(r, 0, &si, &e), DRIFT_OK);
    assert_string_equal(si.name, name);
    assert_int_equal(si.ndim, 0);
    assert_int_equal(si.numel, 1);
    assert_int_equal(si.n_records, 1);
    float got = 1.0f;
    assert_int_equal(drift_trace_read_record_f32(r, 0, 0, &got, 1, &e), DRIFT_OK);
    assert_true(got == 0.0f && signbit(got));
    size_t n = 0;
    const drift_trace_step *st = drift_trace_reader_steps(r, &n);
    assert_int_equal(n, 1);
    assert_int_equal(st[0].flags, DRIFT_TRACE_STEP_DROPPED);
    assert_string_equal(drift_trace_reader_metric_site(r, 0), name);
    drift_trace_reader_close(r);
    free(plan);
    drift_trace_check_report rep;
    assert_int_equal(drift_trace_check(tt_path("long.h5"), &rep, &e), DRIFT_OK);
    for (size_t i = 0; i < rep.n_problems; i++) fprintf(stderr, "check: %s\n", rep.problems[i]);
    assert_int_equal(rep.n_problems, 0);
    drift_trace_check_report_free(&rep);
}

/* Parameters are listed in link-name order (escaped FQN bytes) whatever
 * order they were written in: the reader iterates a dense group in HDF5's
 * native (hash) order and sorts (formats/trace_read_tables.c). 40 names, so
 * that /params is a dense group; '/' escapes to "%2F", which sorts before
 * '.', unlike '/' itself. */
static void test_param_order(void **state) {
    (void)state;
    drift_trace_meta m = tt_meta();
    drift_trace_writer *w = NULL;
    drift_err e;
    drift_err_clear(&e);
    assert_int_equal(drift_trace_writer_create(&w, tt_path("order.h5"), &m, &e), DRIFT_OK);
    enum { NP = 40 };
    char names[NP][32];
    float v[2] = {1.0f, 2.0f};
    int64_t shp = 2;
    for (int i = 0; i < NP; i++) {
        int k = (i * 17) % NP; /* a scrambled write order */
        snprintf(names[i], sizeof names[i], k % 3 ? "blocks.%d.w" : "blocks/%d.w", k);
        assert_int_equal(drift_trace_writer_add_param(w, names[i], 1, &shp, NULL, NULL, v, &e), DRIFT_OK);
    }
    assert_int_equal(drift_trace_writer_start(w, &e), DRIFT_OK);
    assert_int_equal(drift_trace_writer_close(w, &e), DRIFT_OK);
    drift_trace_reader *r = NULL;
    assert_int_equal(drift_trace_reader_open(&r, tt_path("order.h5"), DRIFT_TRACE_OPEN_NORMAL, &e), DRIFT_OK);
    assert_int_equal(drift_trace_reader_n_params(r), NP);
    char prev[128] = "";
    for (size_t i = 0; i < NP; i++) {
        drift_trace_param_info pi;
        assert_int_equal(drift_trace_reader_param(r, i, &pi), DRIFT_OK);
        char esc[128] = "";
        for (const char *c = pi.fqn; *c; c++) { /* docs/format.md 1.1 */
            size_t l = strlen(esc);
            snprintf(esc + l, sizeof esc - l, "%s", *c == '%' ? "%25" : *c == '/' ? "%2F" : (char[2]){*c, 0});
        }
        if (i) assert_true(strcmp(prev, esc) < 0);
        snprintf(prev, sizeof prev, "%s", esc);
    }
    drift_trace_reader_close(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_meta_and_sites),
        cmocka_unit_test(test_records),
        cmocka_unit_test(test_stats_compute),
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_h5dump_text_and_binary),
        cmocka_unit_test(test_h5py),
        cmocka_unit_test(test_writer_misuse),
        cmocka_unit_test(test_check_clean),
        cmocka_unit_test(test_blosc),
        cmocka_unit_test(test_long_strings),
        cmocka_unit_test(test_param_order),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
