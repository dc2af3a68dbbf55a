/* Census tables (/census/gemm, /census/collective) in a drift trace: HDF5
 * compound types, writer and checked reader. Spec: docs/format.md "Census". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "formats/census.h"
#include "formats/json.h"
#include "formats/trace_internal.h"

#define CENSUS_GROUP "/census"
#define CENSUS_GEMM "/census/gemm"
#define CENSUS_COLL "/census/collective"

/* ---- compound types ------------------------------------------------------ */
static int add_str(hid_t ct, const char *name, size_t off, size_t sz) {
    hid_t s = H5Tcopy(H5T_C_S1);
    int rc = -1;
    if (s >= 0 && H5Tset_size(s, sz) >= 0 && H5Tset_strpad(s, H5T_STR_NULLTERM) >= 0 &&
        H5Tinsert(ct, name, off, s) >= 0)
        rc = 0;
    if (s >= 0) H5Tclose(s);
    return rc;
}

#define STR(ct, T, f) add_str(ct, #f, offsetof(T, f), sizeof(((T *)0)->f))
#define I64(ct, T, f) H5Tinsert(ct, #f, offsetof(T, f), H5T_NATIVE_INT64)
#define I32(ct, T, f) H5Tinsert(ct, #f, offsetof(T, f), H5T_NATIVE_INT32)

/* Memory type of a gemm row (native; also used as the file type: the file is
 * written by this machine's layout, and HDF5 converts by member name on read). */
static hid_t gemm_type(void) {
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(drift_census_gemm));
    if (t < 0) return t;
    typedef drift_census_gemm G;
    if (STR(t, G, range) || STR(t, G, api) || STR(t, G, a_type) || STR(t, G, b_type) || STR(t, G, c_type) ||
        STR(t, G, d_type) || STR(t, G, compute_type) || STR(t, G, scale_type) || STR(t, G, epilogue) ||
        STR(t, G, transa) || STR(t, G, transb) || I64(t, G, m) < 0 || I64(t, G, n) < 0 || I64(t, G, k) < 0 ||
        I64(t, G, batch) < 0 || I64(t, G, calls) < 0 || I64(t, G, failed) < 0 || I64(t, G, bytes) < 0 ||
        I64(t, G, first_seq) < 0 || I64(t, G, last_seq) < 0) {
        H5Tclose(t);
        return H5I_INVALID_HID;
    }
    return t;
}

static hid_t coll_type(void) {
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(drift_census_coll));
    if (t < 0) return t;
    typedef drift_census_coll C;
    if (STR(t, C, range) || STR(t, C, op) || STR(t, C, dtype) || STR(t, C, redop) || I64(t, C, count) < 0 ||
        I32(t, C, root) < 0 || I32(t, C, comm) < 0 || I32(t, C, comm_rank) < 0 || I32(t, C, comm_nranks) < 0 ||
        I64(t, C, calls) < 0 || I64(t, C, failed) < 0 || I64(t, C, bytes) < 0 || I64(t, C, first_seq) < 0 ||
        I64(t, C, last_seq) < 0) {
        H5Tclose(t);
        return H5I_INVALID_HID;
    }
    return t;
}

/* A packed file type (no padding bytes in the file). */
static hid_t packed(hid_t mt) {
    hid_t f = mt >= 0 ? H5Tcopy(mt) : H5I_INVALID_HID;
    if (f >= 0 && H5Tpack(f) < 0) {
        H5Tclose(f);
        f = H5I_INVALID_HID;
    }
    return f;
}

/* ---- writing ------------------------------------------------------------- */
static int write_table(hid_t file, const char *name, hid_t mt, const void *rows, size_t n) {
    hid_t ft = packed(mt);
    hsize_t dims[1] = {(hsize_t)n}, maxd[1] = {H5S_UNLIMITED}, chunk[1] = {64};
    hid_t sp = H5Screate_simple(1, dims, maxd), dcpl = H5Pcreate(H5P_DATASET_CREATE), ds = H5I_INVALID_HID;
    int rc = -1;
    if (ft < 0 || sp < 0 || dcpl < 0 || H5Pset_chunk(dcpl, 1, chunk) < 0) goto done;
    ds = H5Dcreate2(file, name, ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (ds < 0) goto done;
    if (n && H5Dwrite(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) < 0) goto done;
    rc = 0;
done:
    if (ds >= 0) H5Dclose(ds);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (sp >= 0) H5Sclose(sp);
    if (ft >= 0) H5Tclose(ft);
    return rc;
}

static int write_info(hid_t g, const drift_census_info *in) {
    char notes[DRIFT_CENSUS_NOTES_MAX];
    memcpy(notes, in->notes, sizeof notes);
    notes[sizeof notes - 1] = '\0';
    return tr_write_attr_i64(g, "rank", in->rank) || tr_write_attr_i64(g, "world_size", in->world_size) ||
           tr_write_attr_i64(g, "local_rank", in->local_rank) || tr_write_attr_i64(g, "pid", in->pid) ||
           tr_write_attr_i64(g, "gemm_calls", in->gemm_calls) || tr_write_attr_i64(g, "coll_calls", in->coll_calls) ||
           tr_write_attr_i64(g, "gemm_dropped", in->gemm_dropped) ||
           tr_write_attr_i64(g, "coll_dropped", in->coll_dropped) ||
           tr_write_attr_i64(g, "nested_skipped", in->nested_skipped) ||
           tr_write_attr_i64(g, "nvtx_ranges", in->nvtx_ranges) ||
           tr_write_attr_i64(g, "nvtx_injected", in->nvtx_injected) ||
           tr_write_attr_f64(g, "time_start", in->time_start) || tr_write_attr_f64(g, "time_end", in->time_end) ||
           tr_write_attr_str(g, "notes", notes);
}

int drift_census_append(const char *path, const drift_census *c, drift_err *err) {
    tr_h5_quiet();
    if (!path || !c) return drift_err_set(err, DRIFT_E_INTERNAL, NULL, "census_append: NULL argument");
    if ((c->n_gemm && !c->gemm) || (c->n_coll && !c->coll) || c->n_gemm > DRIFT_CENSUS_MAX_ROWS ||
        c->n_coll > DRIFT_CENSUS_MAX_ROWS)
        return drift_err_set(err, DRIFT_E_USAGE, path, "census_append: %zu gemm / %zu collective rows, expected <= %d",
                             c->n_gemm, c->n_coll, DRIFT_CENSUS_MAX_ROWS);
    int rc = DRIFT_OK;
    hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), g = H5I_INVALID_HID;
    hid_t gt = gemm_type(), ct = coll_type();
    if (file < 0) {
        rc = tr_h5_fail(err, DRIFT_E_IO, path, "/", "cannot open the trace for writing the census");
        goto done;
    }
    if (gt < 0 || ct < 0) {
        rc = tr_h5_fail(err, DRIFT_E_IO, path, CENSUS_GROUP, "cannot build the census row types");
        goto done;
    }
    if (H5Lexists(file, CENSUS_GROUP, H5P_DEFAULT) > 0 && H5Ldelete(file, CENSUS_GROUP, H5P_DEFAULT) < 0) {
        rc = tr_h5_fail(err, DRIFT_E_IO, path, CENSUS_GROUP, "cannot replace the existing census");
        goto done;
    }
    g = H5Gcreate2(file, CENSUS_GROUP, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0 || write_info(g, &c->info)) {
        rc = tr_h5_fail(err, DRIFT_E_IO, path, CENSUS_GROUP, "cannot write the census group");
        goto done;
    }
    if (write_table(file, CENSUS_GEMM, gt, c->gemm, c->n_gemm)) {
        rc = tr_h5_fail(err, DRIFT_E_IO, path, CENSUS_GEMM, "cannot write the table");
        goto done;
    }
    if (write_table(file, CENSUS_COLL, ct, c->coll, c->n_coll)) {
        rc = tr_h5_fail(err, DRIFT_E_IO, path, CENSUS_COLL, "cannot write the table");
        goto done;
    }
done:
    if (g >= 0) H5Gclose(g);
    if (gt >= 0) H5Tclose(gt);
    if (ct >= 0) H5Tclose(ct);
    if (file >= 0 && tr_h5_close_file(file) < 0 && rc == DRIFT_OK)
        rc = tr_h5_fail(err, DRIFT_E_IO, path, "/", "cannot close the file");
    return rc;
}

int drift_census_write_trace(const char *path, const drift_trace_meta *meta, const drift_census *c,
                             drift_err *err) {
    if (!path || !meta || !c) return drift_err_set(err, DRIFT_E_INTERNAL, NULL, "census_write_trace: NULL argument");
    drift_trace_writer *w = NULL;
    int rc = drift_trace_writer_create(&w, path, meta, err);
    if (!rc) rc = drift_trace_writer_start(w, err);
    int rc2 = drift_trace_writer_close(w, rc ? NULL : err);
    if (!rc) rc = rc2;
    if (!rc) rc = drift_census_append(path, c, err);
    return rc;
}

/* ---- reading ------------------------------------------------------------- */
void drift_census_free(drift_census *c) {
    if (!c) return;
    drift_free(c->gemm);
    drift_free(c->coll);
    drift_free(c);
}

static int read_i64(hid_t g, const char *name, int64_t *v, const char *file, drift_err *err) {
    *v = -1;
    if (!tr_attr_exists(g, name)) return DRIFT_OK; /* optional: older producers */
    return tr_read_attr_i64(g, name, v, file, CENSUS_GROUP, err);
}

static int read_info(hid_t g, drift_census_info *in, const char *file, drift_err *err) {
    int64_t v[11];
    static const char *const names[11] = {"rank",         "world_size",   "local_rank",     "pid",
                                          "gemm_calls",   "coll_calls",   "gemm_dropped",   "coll_dropped",
                                          "nested_skipped", "nvtx_ranges", "nvtx_injected"};
    for (int i = 0; i < 11; i++) {
        int rc = read_i64(g, names[i], &v[i], file, err);
        if (rc) return rc;
    }
    in->rank = (int32_t)(v[0] >= -1 && v[0] <= INT32_MAX ? v[0] : -1);
    in->world_size = (int32_t)(v[1] >= -1 && v[1] <= INT32_MAX ? v[1] : -1);
    in->local_rank = (int32_t)(v[2] >= -1 && v[2] <= INT32_MAX ? v[2] : -1);
    in->pid = v[3];
    in->gemm_calls = v[4];
    in->coll_calls = v[5];
    in->gemm_dropped = v[6];
    in->coll_dropped = v[7];
    in->nested_skipped = v[8];
    in->nvtx_ranges = v[9];
    in->nvtx_injected = v[10] == 1;
    in->time_start = in->time_end = 0;
    if (tr_attr_exists(g, "time_start") && tr_read_attr_f64(g, "time_start", &in->time_start, file, CENSUS_GROUP, err))
        return err ? err->code : DRIFT_E_INPUT;
    if (tr_attr_exists(g, "time_end") && tr_read_attr_f64(g, "time_end", &in->time_end, file, CENSUS_GROUP, err))
        return err ? err->code : DRIFT_E_INPUT;
    in->notes[0] = '\0';
    if (tr_attr_exists(g, "notes")) {
        char *s = NULL;
        int rc = tr_read_attr_str(g, "notes", DRIFT_CENSUS_NOTES_MAX, &s, file, CENSUS_GROUP, err);
        if (rc) return rc;
        snprintf(in->notes, sizeof in->notes, "%s", s);
        free(s);
    }
    return DRIFT_OK;
}

/* Reads a whole 1-D compound table of rows of size rsz with memory type mt
 * into a new array (*out owned by the caller; NULL when empty). */
static int read_table(hid_t file, const char *name, hid_t mt, size_t rsz, void **out, size_t *n, const char *path,
                      drift_err *err) {
    *out = NULL;
    *n = 0;
    if (H5Lexists(file, name, H5P_DEFAULT) <= 0) return DRIFT_OK; /* an absent table is an empty one */
    hid_t ds = H5I_INVALID_HID, ft = H5I_INVALID_HID;
    /* the open policy, as for every other dataset (a virtual or external table reads other files) */
    int rc = tr_open_dataset(file, name, 0, path, name, &ds, err);
    if (rc) return rc;
    ft = H5Dget_type(ds);
    if (ft < 0 || H5Tget_class(ft) != H5T_COMPOUND) {
        rc = drift_err_set(err, DRIFT_E_INPUT, path, "%s: expected a compound table", name);
        goto done;
    }
    /* every member of the row must be in the file with the same class
     * (HDF5 would silently leave missing members unset) */
    int nm = H5Tget_nmembers(mt);
    for (int i = 0; i < nm; i++) {
        char *mn = H5Tget_member_name(mt, (unsigned)i);
        int fi = mn ? H5Tget_member_index(ft, mn) : -1;
        H5T_class_t want = H5Tget_member_class(mt, (unsigned)i);
        int ok = fi >= 0 && H5Tget_member_class(ft, (unsigned)fi) == want;
        if (!ok)
            rc = drift_err_set(err, DRIFT_E_INPUT, path, "%s: member \"%s\" missing or not %s (docs/format.md \"Census\")",
                               name, mn ? mn : "?", want == H5T_STRING ? "a string" : "an integer");
        H5free_memory(mn);
        if (rc) goto done;
    }
    int rank = 0;
    int64_t dims[1] = {0};
    if ((rc = tr_dataset_dims(ds, 1, &rank, dims, path, name, err))) goto done;
    if (dims[0] > DRIFT_CENSUS_MAX_ROWS) {
        rc = drift_err_set(err, DRIFT_E_INPUT, path, "%s: %lld rows, expected at most %d", name, (long long)dims[0],
                           DRIFT_CENSUS_MAX_ROWS);
        goto done;
    }
    if (dims[0] == 0) goto done;
    void *buf = drift_calloc((size_t)dims[0], rsz);
    if (!buf) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, path, "%s: out of memory for %lld rows", name, (long long)dims[0]);
        goto done;
    }
    if (H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
        drift_free(buf);
        rc = tr_h5_fail(err, DRIFT_E_INPUT, path, name,
                        "cannot read the table (expected the members of docs/format.md \"Census\")");
        goto done;
    }
    *out = buf;
    *n = (size_t)dims[0];
done:
    if (ft >= 0) H5Tclose(ft);
    H5Dclose(ds);
    return rc;
}

#define TERM(f) (f)[sizeof(f) - 1] = '\0'

int drift_census_read(drift_trace_reader *r, drift_census **out, drift_err *err) {
    tr_h5_quiet();
    if (!r || !out) return drift_err_set(err, DRIFT_E_INTERNAL, NULL, "census_read: NULL argument");
    *out = NULL;
    const char *path = drift_trace_reader_path(r);
    if (H5Lexists(r->file, CENSUS_GROUP, H5P_DEFAULT) <= 0) return DRIFT_OK;
    hid_t o = H5Oopen(r->file, CENSUS_GROUP, H5P_DEFAULT);
    H5I_type_t ot = o >= 0 ? H5Iget_type(o) : H5I_BADID;
    if (o >= 0) H5Oclose(o);
    if (ot != H5I_GROUP) return drift_err_set(err, DRIFT_E_INPUT, path, "%s: expected a group", CENSUS_GROUP);
    drift_census *c = drift_calloc(1, sizeof *c);
    if (!c) return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
    hid_t g = H5Gopen2(r->file, CENSUS_GROUP, H5P_DEFAULT), gt = gemm_type(), ct = coll_type();
    int rc = DRIFT_OK;
    if (g < 0 || gt < 0 || ct < 0) {
        rc = tr_h5_fail(err, DRIFT_E_INPUT, path, CENSUS_GROUP, "cannot open the census");
        goto done;
    }
    if ((rc = read_info(g, &c->info, path, err))) goto done;
    void *p = NULL;
    if ((rc = read_table(r->file, CENSUS_GEMM, gt, sizeof(drift_census_gemm), &p, &c->n_gemm, path, err))) goto done;
    c->gemm = p;
    p = NULL;
    if ((rc = read_table(r->file, CENSUS_COLL, ct, sizeof(drift_census_coll), &p, &c->n_coll, path, err))) goto done;
    c->coll = p;
    for (size_t i = 0; i < c->n_gemm; i++) {
        drift_census_gemm *x = &c->gemm[i];
        TERM(x->range), TERM(x->api), TERM(x->a_type), TERM(x->b_type), TERM(x->c_type), TERM(x->d_type);
        TERM(x->compute_type), TERM(x->scale_type), TERM(x->epilogue), TERM(x->transa), TERM(x->transb);
    }
    for (size_t i = 0; i < c->n_coll; i++) {
        drift_census_coll *x = &c->coll[i];
        TERM(x->range), TERM(x->op), TERM(x->dtype), TERM(x->redop);
    }
done:
    if (g >= 0) H5Gclose(g);
    if (gt >= 0) H5Tclose(gt);
    if (ct >= 0) H5Tclose(ct);
    if (rc) drift_census_free(c);
    else *out = c;
    return rc;
}

const char *drift_census_gemm_dtypes(const drift_census_gemm *g, char *buf, size_t bufsz) {
    if (!buf || !bufsz) return "";
    if (!g) {
        buf[0] = '\0';
        return buf;
    }
    snprintf(buf, bufsz, "%.*s,%.*s->%.*s", DRIFT_CENSUS_TYPE_MAX, g->a_type, DRIFT_CENSUS_TYPE_MAX, g->b_type,
             DRIFT_CENSUS_TYPE_MAX, g->d_type[0] ? g->d_type : g->c_type);
    return buf;
}

/* ---- presentation ------------------------------------------------------------ */
static void json_notes(drift_json_buf *b, const char *notes) {
    drift_json_buf_add_key(b, "notes");
    drift_json_buf_begin_array(b);
    const char *p = notes;
    while (p && *p) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n) drift_json_buf_add_string_n(b, p, n);
        p = e ? e + 1 : p + n;
    }
    drift_json_buf_end_array(b);
}

/* The counters that end every census row. */
static void json_counters(drift_json_buf *b, int64_t calls, int64_t failed, int64_t bytes, int64_t first_seq,
                          int64_t last_seq) {
    drift_json_buf_field_int(b, "calls", calls);
    drift_json_buf_field_int(b, "failed", failed);
    drift_json_buf_field_int(b, "bytes", bytes);
    drift_json_buf_field_int(b, "first_seq", first_seq);
    drift_json_buf_field_int(b, "last_seq", last_seq);
}

void drift_census_json(struct drift_json_buf *b, const drift_census *c) {
    if (!b) return;
    if (!c) {
        drift_json_buf_add_null(b);
        return;
    }
    const drift_census_info *in = &c->info;
    drift_json_buf_begin_object(b);
    drift_json_buf_field_int(b, "rank", in->rank);
    drift_json_buf_field_int(b, "world_size", in->world_size);
    drift_json_buf_field_int(b, "local_rank", in->local_rank);
    drift_json_buf_field_int(b, "pid", in->pid);
    drift_json_buf_field_int(b, "gemm_calls", in->gemm_calls);
    drift_json_buf_field_int(b, "collective_calls", in->coll_calls);
    drift_json_buf_field_int(b, "gemm_dropped", in->gemm_dropped);
    drift_json_buf_field_int(b, "collective_dropped", in->coll_dropped);
    drift_json_buf_field_int(b, "nested_skipped", in->nested_skipped);
    drift_json_buf_field_bool(b, "nvtx_injected", in->nvtx_injected);
    drift_json_buf_field_int(b, "nvtx_ranges", in->nvtx_ranges);
    json_notes(b, in->notes);
    drift_json_buf_add_key(b, "gemm");
    drift_json_buf_begin_array(b);
    for (size_t i = 0; i < c->n_gemm; i++) {
        const drift_census_gemm *g = &c->gemm[i];
        drift_json_buf_begin_object(b);
        drift_json_buf_field_string(b, "range", g->range);
        drift_json_buf_field_string(b, "api", g->api);
        drift_json_buf_field_string(b, "a_type", g->a_type);
        drift_json_buf_field_string(b, "b_type", g->b_type);
        drift_json_buf_field_string(b, "c_type", g->c_type);
        drift_json_buf_field_string(b, "d_type", g->d_type);
        drift_json_buf_field_string(b, "compute_type", g->compute_type);
        drift_json_buf_field_string(b, "scale_type", g->scale_type);
        drift_json_buf_field_string(b, "epilogue", g->epilogue);
        drift_json_buf_field_string(b, "transa", g->transa);
        drift_json_buf_field_string(b, "transb", g->transb);
        drift_json_buf_field_int(b, "m", g->m);
        drift_json_buf_field_int(b, "n", g->n);
        drift_json_buf_field_int(b, "k", g->k);
        drift_json_buf_field_int(b, "batch", g->batch);
        json_counters(b, g->calls, g->failed, g->bytes, g->first_seq, g->last_seq);
        drift_json_buf_end_object(b);
    }
    drift_json_buf_end_array(b);
    drift_json_buf_add_key(b, "collective");
    drift_json_buf_begin_array(b);
    for (size_t i = 0; i < c->n_coll; i++) {
        const drift_census_coll *x = &c->coll[i];
        drift_json_buf_begin_object(b);
        drift_json_buf_field_string(b, "range", x->range);
        drift_json_buf_field_string(b, "op", x->op);
        drift_json_buf_field_string(b, "dtype", x->dtype);
        drift_json_buf_field_string(b, "redop", x->redop);
        drift_json_buf_field_int(b, "count", x->count);
        drift_json_buf_field_int(b, "root", x->root);
        drift_json_buf_field_int(b, "comm", x->comm);
        drift_json_buf_field_int(b, "comm_rank", x->comm_rank);
        drift_json_buf_field_int(b, "comm_nranks", x->comm_nranks);
        json_counters(b, x->calls, x->failed, x->bytes, x->first_seq, x->last_seq);
        drift_json_buf_end_object(b);
    }
    drift_json_buf_end_array(b);
    drift_json_buf_end_object(b);
}

void drift_census_print(FILE *out, const drift_census *c) {
    if (!out || !c) return;
    const drift_census_info *in = &c->info;
    fprintf(out, "census    rank %d of %d (local %d), pid %lld; %lld GEMM calls (%lld dropped, %lld nested "
                 "skipped), %lld collective calls (%lld dropped); NVTX %s, %lld ranges\n",
            (int)in->rank, (int)in->world_size, (int)in->local_rank, (long long)in->pid, (long long)in->gemm_calls,
            (long long)in->gemm_dropped, (long long)in->nested_skipped, (long long)in->coll_calls,
            (long long)in->coll_dropped, in->nvtx_injected ? "injected" : "not injected", (long long)in->nvtx_ranges);
    fprintf(out, "\ncensus GEMMs (%zu)\n", c->n_gemm);
    if (c->n_gemm)
        fprintf(out, "  %-40s %-29s %-20s %-16s %-9s %-26s %8s %6s\n", "RANGE", "API", "DTYPES A,B->D", "COMPUTE",
                "EPILOGUE", "SHAPE M,N,K xBATCH (TA,TB)", "CALLS", "FAILED");
    for (size_t i = 0; i < c->n_gemm; i++) {
        const drift_census_gemm *g = &c->gemm[i];
        char dt[96], shp[128];
        drift_census_gemm_dtypes(g, dt, sizeof dt);
        snprintf(shp, sizeof shp, "%lld,%lld,%lld x%lld (%s,%s)", (long long)g->m, (long long)g->n, (long long)g->k,
                 (long long)g->batch, g->transa, g->transb);
        fprintf(out, "  %-40s %-29s %-20s %-16s %-9s %-26s %8lld %6lld\n", g->range[0] ? g->range : "-", g->api, dt,
                g->compute_type, g->epilogue[0] ? g->epilogue : "-", shp, (long long)g->calls, (long long)g->failed);
    }
    fprintf(out, "\ncensus collectives (%zu)\n", c->n_coll);
    if (c->n_coll)
        fprintf(out, "  %-40s %-14s %-8s %-6s %12s %5s %9s %8s %14s\n", "RANGE", "OP", "DTYPE", "REDOP", "COUNT",
                "ROOT", "RANK/N", "CALLS", "BYTES");
    for (size_t i = 0; i < c->n_coll; i++) {
        const drift_census_coll *x = &c->coll[i];
        char rn[32];
        snprintf(rn, sizeof rn, "%d/%d", (int)x->comm_rank, (int)x->comm_nranks);
        fprintf(out, "  %-40s %-14s %-8s %-6s %12lld %5d %9s %8lld %14lld\n", x->range[0] ? x->range : "-", x->op,
                x->dtype, x->redop[0] ? x->redop : "-", (long long)x->count, (int)x->root, rn, (long long)x->calls,
                (long long)x->bytes);
    }
    if (in->notes[0]) fprintf(out, "\ncensus notes\n%s%s", in->notes, in->notes[strlen(in->notes) - 1] == '\n' ? "" : "\n");
}
