/* Checked HDF5 helpers of the trace format: error-stack conversion, string
 * and numeric attributes, dimension checks and extendible 1-D tables. Every
 * size read from a file is bounded here before anything is allocated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "formats/trace_internal.h"

void tr_h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

typedef struct walk_ctx {
    char *buf;
    size_t sz;
    int got;
} walk_ctx;

static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *data) {
    walk_ctx *c = data;
    (void)n;
    if (!c->got && e && e->desc && e->desc[0]) {
        snprintf(c->buf, c->sz, "%s", e->desc);
        c->got = 1;
    }
    return 0;
}

/* The text between "error message = '" and the next "'" of an HDF5
 * file-driver message, copied into out; 0 when there is none. */
static int errno_text(const char *m, char *out, size_t sz) {
    const char *k = strstr(m, "error message = '");
    if (!k) return 0;
    k += strlen("error message = '");
    const char *e = strchr(k, '\'');
    if (!e || e == k) return 0;
    snprintf(out, sz, "%.*s", (int)(e - k) < 300 ? (int)(e - k) : 300, k);
    return 1;
}

/* HDF5's file-driver messages carry its internals (open flags in hex, the
 * errno number: "unable to open file: name = 'x', errno = 2, error message =
 * 'No such file or directory', flags = 13, o_flags = 242"): a user gets the
 * system's words and, for a lock, who holds it. */
static void plain_words(char *buf, size_t sz) {
    char why[320];
    if (strncmp(buf, "unable to lock file", 19) == 0) {
        int busy = strstr(buf, "errno = 11") != NULL || strstr(buf, "temporarily unavailable") != NULL;
        if (busy) snprintf(buf, sz, "another process has the file open (HDF5's file lock is held: a writer, or a reader "
                                    "that opened it for writing)");
        else if (errno_text(buf, why, sizeof why)) snprintf(buf, sz, "cannot lock the file: %s", why);
    } else if (errno_text(buf, why, sizeof why)) {
        /* "file write failed: time = ..., buf = 0x..., bytes actually written = ...": the system's reason only */
        snprintf(buf, sz, "%s", why);
    }
}

const char *tr_h5_msg(char *buf, size_t bufsz) {
    if (!buf || !bufsz) return "";
    buf[0] = '\0';
    walk_ctx c = {buf, bufsz, 0};
    /* Upward: the innermost (most specific) entry comes first. */
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, &c);
    plain_words(buf, bufsz);
    return buf;
}

int tr_h5_fail(drift_err *err, int code, const char *file, const char *obj, const char *what) {
    char h5[400], where[512];
    tr_h5_msg(h5, sizeof h5);
    snprintf(where, sizeof where, "%s:%s", file ? file : "?", obj ? obj : "/");
    if (h5[0]) return drift_err_set(err, code, where, "%s (HDF5: %s)", what, h5);
    return drift_err_set(err, code, where, "%s", what);
}

static const char *wh(char *buf, size_t sz, const char *file, const char *obj) {
    snprintf(buf, sz, "%s:%s", file ? file : "?", obj ? obj : "/");
    return buf;
}

int tr_attr_exists(hid_t loc, const char *name) { return H5Aexists(loc, name) > 0; }

herr_t tr_iterate_links(hid_t g, H5L_iterate_t cb, void *data) {
    hsize_t pos = 0;
    /* Native order walks a dense group's name B-tree directly. Any other
     * order makes HDF5 1.10 build a link table first, and when a corrupt
     * link message stops the build it frees the table's unfilled entries
     * (a crash in H5G__link_release_table: fuzz_trace, regress input
     * crash-h5literate-frees-half-built-link-table.h5). */
    return H5Literate(g, H5_INDEX_NAME, H5_ITER_NATIVE, &pos, cb, data);
}

/* Opens attribute name of loc and checks it holds exactly one element. */
static int open_attr(hid_t loc, const char *name, const char *expect, hid_t *a_out, hid_t *t_out, const char *file,
                     const char *obj, drift_err *err) {
    char w[512];
    htri_t ex = H5Aexists(loc, name);
    if (ex <= 0)
        return drift_err_set(err, DRIFT_E_INPUT, wh(w, sizeof w, file, obj), "missing attribute \"%s\" (expected %s)",
                             name, expect);
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return tr_h5_fail(err, DRIFT_E_INPUT, file, obj, "unreadable attribute");
    hid_t t = H5Aget_type(a), s = H5Aget_space(a);
    hssize_t np = s >= 0 ? H5Sget_simple_extent_npoints(s) : -1;
    if (s >= 0) H5Sclose(s);
    if (t < 0 || np != 1) {
        if (t >= 0) H5Tclose(t);
        H5Aclose(a);
        return drift_err_set(err, DRIFT_E_INPUT, wh(w, sizeof w, file, obj),
                             "attribute \"%s\": expected a single %s, found %lld elements", name, expect,
                             (long long)np);
    }
    *a_out = a;
    *t_out = t;
    return DRIFT_OK;
}

int tr_read_attr_str(hid_t loc, const char *name, size_t max, char **out, const char *file, const char *obj,
                     drift_err *err) {
    char w[512];
    hid_t a, t;
    *out = NULL;
    int rc = open_attr(loc, name, "a string", &a, &t, file, obj, err);
    if (rc) return rc;
    char *buf = NULL;
    size_t sz = H5Tget_size(t);
    if (H5Tget_class(t) != H5T_STRING || H5Tis_variable_str(t) != 0) {
        rc = drift_err_set(err, DRIFT_E_INPUT, wh(w, sizeof w, file, obj),
                           "attribute \"%s\": expected a fixed-length string, found another type", name);
        goto done;
    }
    if (sz == 0 || sz > max) {
        rc = drift_err_set(err, DRIFT_E_INPUT, wh(w, sizeof w, file, obj),
                           "attribute \"%s\": expected a string of at most %zu bytes, found %zu", name, max, sz);
        goto done;
    }
    buf = drift_malloc(sz + 1);
    if (!buf) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, wh(w, sizeof w, file, obj), "out of memory");
        goto done;
    }
    if (H5Aread(a, t, buf) < 0) {
        rc = tr_h5_fail(err, DRIFT_E_INPUT, file, obj, "cannot read string attribute");
        goto done;
    }
    buf[sz] = '\0';
    *out = buf;
    buf = NULL;
done:
    free(buf);
    H5Tclose(t);
    H5Aclose(a);
    return rc;
}

int tr_read_attr_i64(hid_t loc, const char *name, int64_t *out, const char *file, const char *obj,
                     drift_err *err) {
    char w[512];
    hid_t a, t;
    int rc = open_attr(loc, name, "an integer", &a, &t, file, obj, err);
    if (rc) return rc;
    if (H5Tget_class(t) != H5T_INTEGER || H5Tget_size(t) > 8) {
        rc = drift_err_set(err, DRIFT_E_INPUT, wh(w, sizeof w, file, obj),
                           "attribute \"%s\": expected an integer, found another type", name);
    } else if (H5Aread(a, H5T_NATIVE_INT64, out) < 0) {
        rc = tr_h5_fail(err, DRIFT_E_INPUT, file, obj, "cannot read integer attribute");
    }
    H5Tclose(t);
    H5Aclose(a);
    return rc;
}

int tr_read_attr_f64(hid_t loc, const char *name, double *out, const char *file, const char *obj,
                     drift_err *err) {
    char w[512];
    hid_t a, t;
    int rc = open_attr(loc, name, "a float", &a, &t, file, obj, err);
    if (rc) return rc;
    H5T_class_t c = H5Tget_class(t);
    if ((c != H5T_FLOAT && c != H5T_INTEGER) || H5Tget_size(t) > 8) {
        rc = drift_err_set(err, DRIFT_E_INPUT, wh(w, sizeof w, file, obj),
                           "attribute \"%s\": expected a float, found another type", name);
    } else if (H5Aread(a, H5T_NATIVE_DOUBLE, out) < 0) {
        rc = tr_h5_fail(err, DRIFT_E_INPUT, file, obj, "cannot read float attribute");
    }
    H5Tclose(t);
    H5Aclose(a);
    return rc;
}

int tr_read_attr_i64v(hid_t loc, const char *name, int64_t *out, int maxn, int *n, const char *file,
                      const char *obj, drift_err *err) {
    char w[512];
    wh(w, sizeof w, file, obj);
    if (H5Aexists(loc, name) <= 0)
        return drift_err_set(err, DRIFT_E_INPUT, w, "missing attribute \"%s\" (expected an int64 array)", name);
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return tr_h5_fail(err, DRIFT_E_INPUT, file, obj, "unreadable attribute");
    int rc = DRIFT_OK;
    hid_t t = H5Aget_type(a), s = H5Aget_space(a);
    int rank = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
    hsize_t dim = 0;
    if (t < 0 || H5Tget_class(t) != H5T_INTEGER || H5Tget_size(t) > 8) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"%s\": expected an integer array", name);
    } else if (rank != 1 || H5Sget_simple_extent_dims(s, &dim, NULL) != 1 || dim > (hsize_t)maxn) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"%s\": expected a 1-D array of at most %d integers",
                           name, maxn);
    } else if (dim > 0 && H5Aread(a, H5T_NATIVE_INT64, out) < 0) {
        rc = tr_h5_fail(err, DRIFT_E_INPUT, file, obj, "cannot read integer array attribute");
    } else {
        *n = (int)dim;
    }
    if (t >= 0) H5Tclose(t);
    if (s >= 0) H5Sclose(s);
    H5Aclose(a);
    return rc;
}

/* --- writing attributes -------------------------------------------------- */
static int write_attr(hid_t loc, const char *name, hid_t type, hid_t space, const void *v) {
    if (H5Aexists(loc, name) > 0 && H5Adelete(loc, name) < 0) return -1;
    hid_t a = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) return -1;
    herr_t e = H5Awrite(a, type, v);
    H5Aclose(a);
    return e < 0 ? -1 : 0;
}

int tr_write_attr_str(hid_t loc, const char *name, const char *value) {
    if (!value) value = "";
    size_t n = strlen(value) + 1;
    hid_t t = H5Tcopy(H5T_C_S1), s = H5Screate(H5S_SCALAR);
    int rc = -1;
    if (t >= 0 && s >= 0 && H5Tset_size(t, n) >= 0 && H5Tset_strpad(t, H5T_STR_NULLTERM) >= 0 &&
        H5Tset_cset(t, H5T_CSET_UTF8) >= 0)
        rc = write_attr(loc, name, t, s, value);
    if (t >= 0) H5Tclose(t);
    if (s >= 0) H5Sclose(s);
    return rc;
}

int tr_write_attr_i64(hid_t loc, const char *name, int64_t v) {
    hid_t s = H5Screate(H5S_SCALAR);
    if (s < 0) return -1;
    int rc = -1;
    hid_t t = H5Tcopy(H5T_STD_I64LE);
    if (t >= 0) {
        /* write with the native memory type: HDF5 converts to LE */
        hid_t a;
        if (H5Aexists(loc, name) > 0) H5Adelete(loc, name);
        a = H5Acreate2(loc, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
        if (a >= 0) {
            rc = H5Awrite(a, H5T_NATIVE_INT64, &v) < 0 ? -1 : 0;
            H5Aclose(a);
        }
        H5Tclose(t);
    }
    H5Sclose(s);
    return rc;
}

int tr_write_attr_f64(hid_t loc, const char *name, double v) {
    hid_t s = H5Screate(H5S_SCALAR);
    if (s < 0) return -1;
    int rc = -1;
    if (H5Aexists(loc, name) > 0) H5Adelete(loc, name);
    hid_t a = H5Acreate2(loc, name, H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) {
        rc = H5Awrite(a, H5T_NATIVE_DOUBLE, &v) < 0 ? -1 : 0;
        H5Aclose(a);
    }
    H5Sclose(s);
    return rc;
}

int tr_write_attr_i64v(hid_t loc, const char *name, const int64_t *v, int n) {
    hsize_t dim = (hsize_t)n;
    hid_t s = H5Screate_simple(1, &dim, NULL);
    if (s < 0) return -1;
    int rc = -1;
    if (H5Aexists(loc, name) > 0) H5Adelete(loc, name);
    hid_t a = H5Acreate2(loc, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) {
        int64_t dummy = 0;
        rc = H5Awrite(a, H5T_NATIVE_INT64, n > 0 ? (const void *)v : (const void *)&dummy) < 0 ? -1 : 0;
        H5Aclose(a);
    }
    H5Sclose(s);
    return rc;
}

/* --- datasets -------------------------------------------------------------- */
int tr_dataset_dims(hid_t ds, int maxrank, int *rank, int64_t *dims, const char *file, const char *obj,
                    drift_err *err) {
    char w[512];
    hid_t s = H5Dget_space(ds);
    if (s < 0) return tr_h5_fail(err, DRIFT_E_INPUT, file, obj, "unreadable dataspace");
    int rc = DRIFT_OK;
    hsize_t d[H5S_MAX_RANK];
    int r = H5Sget_simple_extent_type(s) == H5S_SIMPLE ? H5Sget_simple_extent_ndims(s) : -1;
    if (r < 1 || r > maxrank) {
        rc = drift_err_set(err, DRIFT_E_INPUT, wh(w, sizeof w, file, obj),
                           "expected a simple dataspace of rank 1..%d, found rank %d", maxrank, r);
        goto done;
    }
    if (H5Sget_simple_extent_dims(s, d, NULL) != r) {
        rc = tr_h5_fail(err, DRIFT_E_INPUT, file, obj, "unreadable dimensions");
        goto done;
    }
    for (int i = 0; i < r; i++) {
        if (d[i] > (hsize_t)TR_DIM_MAX) {
            rc = drift_err_set(err, DRIFT_E_INPUT, wh(w, sizeof w, file, obj),
                               "dimension %d is %llu, expected at most 2^40", i, (unsigned long long)d[i]);
            goto done;
        }
        dims[i] = (int64_t)d[i];
    }
    *rank = r;
done:
    H5Sclose(s);
    return rc;
}

int tr_check_table(hid_t ds, enum tr_table t, int64_t *rows, const char *file, const char *obj, drift_err *err) {
    char w[512], why[300];
    hid_t ft = H5Dget_type(ds);
    if (ft < 0) return tr_h5_fail(err, DRIFT_E_INPUT, file, obj, "unreadable datatype");
    int bad = tr_check_members(ft, t, why, sizeof why);
    H5Tclose(ft);
    if (bad)
        return drift_err_set(err, DRIFT_E_INPUT, wh(w, sizeof w, file, obj), "%s table: expected %s",
                             tr_table_label(t), why);
    int rank = 0;
    int64_t dims[H5S_MAX_RANK];
    int rc = tr_dataset_dims(ds, 1, &rank, dims, file, obj, err);
    if (rc) return rc;
    *rows = dims[0];
    return DRIFT_OK;
}

/* A transfer property list whose type-conversion buffer fits the request:
 * HDF5's default (1 MiB) is allocated and freed on every converting read or
 * write, which dominates small appends and index probes. */
static hid_t small_dxpl(size_t rows, size_t row_bytes) {
    size_t b = rows * row_bytes;
    if (b < 4096) b = 4096;
    if (b > ((size_t)1 << 20)) b = (size_t)1 << 20;
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    if (dxpl >= 0 && H5Pset_buffer(dxpl, b, NULL, NULL) < 0) {
        H5Pclose(dxpl);
        return H5P_DEFAULT;
    }
    return dxpl < 0 ? H5P_DEFAULT : dxpl;
}

static void close_dxpl(hid_t dxpl) {
    if (dxpl != H5P_DEFAULT) H5Pclose(dxpl);
}

int tr_read_rows(hid_t ds, enum tr_table t, int64_t first, int64_t count, void *dst, const char *file,
                 const char *obj, drift_err *err) {
    char w[512];
    int rc = DRIFT_OK;
    if (count == 0) return DRIFT_OK;
    int64_t ext = 0, bytes = 0;
    int rank = 0;
    rc = tr_dataset_dims(ds, 1, &rank, &ext, file, obj, err);
    if (rc) return rc;
    if (first < 0 || count < 0 || first > ext || count > ext - first)
        return drift_err_set(err, DRIFT_E_INPUT, wh(w, sizeof w, file, obj),
                             "rows %lld..%lld requested, table has %lld", (long long)first,
                             (long long)(first + count), (long long)ext);
    hid_t ft = H5Dget_type(ds);
    size_t fsz = ft >= 0 ? H5Tget_size(ft) : 0;
    if (ft >= 0) H5Tclose(ft);
    size_t msz = tr_type_mem_size(t);
    if (tr_mul_checked(count, (int64_t)(fsz > msz ? fsz : msz), (int64_t)DRIFT_TRACE_READ_MAX, &bytes) != 0)
        return drift_err_set(err, DRIFT_E_INPUT, wh(w, sizeof w, file, obj),
                             "%lld rows exceed the %llu-byte read limit", (long long)count,
                             (unsigned long long)DRIFT_TRACE_READ_MAX);
    hid_t mt = tr_type_mem(t), fs = H5Dget_space(ds), ms = H5I_INVALID_HID;
    hid_t dxpl = small_dxpl((size_t)count, fsz > msz ? fsz : msz);
    hsize_t st = (hsize_t)first, cn = (hsize_t)count;
    if (mt < 0 || fs < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, &st, NULL, &cn, NULL) < 0 ||
        (ms = H5Screate_simple(1, &cn, NULL)) < 0 || H5Dread(ds, mt, ms, fs, dxpl, dst) < 0)
        rc = tr_h5_fail(err, DRIFT_E_INPUT, file, obj, "cannot read table rows");
    close_dxpl(dxpl);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (mt >= 0) H5Tclose(mt);
    return rc;
}

hid_t tr_create_table(hid_t loc, const char *name, enum tr_table t, hsize_t chunk_rows) {
    hsize_t zero = 0, unl = H5S_UNLIMITED;
    hid_t ft = tr_type_file(t), mt = tr_type_mem(t), sp = H5Screate_simple(1, &zero, &unl),
          dcpl = H5Pcreate(H5P_DATASET_CREATE), ds = H5I_INVALID_HID;
    if (ft < 0 || mt < 0 || sp < 0 || dcpl < 0 || H5Pset_chunk(dcpl, 1, &chunk_rows) < 0) goto done;
    if (t == TR_T_INDEX) {
        /* Unwritten rows read as step -1: never mistaken for a committed record. */
        drift_trace_index fill = {-1, -1, -1, -1, 0};
        if (H5Pset_fill_value(dcpl, mt, &fill) < 0) goto done;
    } else if (t == TR_T_STEPS) {
        drift_trace_step fill;
        memset(&fill, 0, sizeof fill);
        fill.step = -1;
        if (H5Pset_fill_value(dcpl, mt, &fill) < 0) goto done;
    }
    ds = H5Dcreate2(loc, name, ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
done:
    if (ft >= 0) H5Tclose(ft);
    if (mt >= 0) H5Tclose(mt);
    if (sp >= 0) H5Sclose(sp);
    if (dcpl >= 0) H5Pclose(dcpl);
    return ds;
}

int tr_io_init(tr_io *io) {
    memset(io, 0, sizeof *io);
    for (int t = 0; t < TR_T_COUNT; t++) io->mt[t] = H5I_INVALID_HID;
    io->dxpl = small_dxpl(1, 65536);
    for (int t = 0; t < TR_T_COUNT; t++)
        if ((io->mt[t] = tr_type_mem((enum tr_table)t)) < 0) {
            tr_io_free(io);
            return -1;
        }
    io->ready = 1;
    return 0;
}

void tr_io_free(tr_io *io) {
    if (!io) return;
    for (int t = 0; t < TR_T_COUNT; t++)
        if (io->mt[t] > 0) H5Tclose(io->mt[t]);
    close_dxpl(io->dxpl);
    memset(io, 0, sizeof *io);
    for (int t = 0; t < TR_T_COUNT; t++) io->mt[t] = H5I_INVALID_HID;
    io->dxpl = H5P_DEFAULT;
}

int tr_append_rows(hid_t ds, enum tr_table t, int64_t *rows, const void *src, int64_t count, const tr_io *io) {
    if (count <= 0) return 0;
    hsize_t st = (hsize_t)*rows, cn = (hsize_t)count, nd = st + cn;
    int rc = -1, own = !(io && io->ready);
    hid_t mt = own ? tr_type_mem(t) : io->mt[t], fs = H5I_INVALID_HID, ms = H5I_INVALID_HID;
    hid_t dxpl = (own || count > 64) ? small_dxpl((size_t)count, tr_type_mem_size(t)) : io->dxpl;
    int own_dxpl = own || count > 64;
    if (mt < 0 || H5Dset_extent(ds, &nd) < 0) goto done;
    fs = H5Dget_space(ds);
    if (fs < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, &st, NULL, &cn, NULL) < 0) goto done;
    ms = H5Screate_simple(1, &cn, NULL);
    if (ms < 0 || H5Dwrite(ds, mt, ms, fs, dxpl, src) < 0) goto done;
    *rows = (int64_t)nd;
    rc = 0;
done:
    if (own_dxpl) close_dxpl(dxpl);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (own && mt >= 0) H5Tclose(mt);
    return rc;
}

int tr_row_end(hid_t ds, int64_t row, int64_t *end) {
    *end = -1;
    hid_t dcpl = H5Dget_create_plist(ds), sp = H5Dget_space(ds);
    int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1, rc = -1;
    if (sp >= 0) H5Sclose(sp);
    if (dcpl < 0 || rank < 1 || rank > 32) goto done;
    if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
        hsize_t cd[32], off[32];
        if (H5Pget_chunk(dcpl, rank, cd) != rank || cd[0] == 0) goto done;
        memset(off, 0, sizeof off);
        off[0] = (hsize_t)row - (hsize_t)row % cd[0];
        unsigned mask = 0;
        haddr_t addr = HADDR_UNDEF;
        hsize_t size = 0;
        if (H5Dget_chunk_info_by_coord(ds, off, &mask, &addr, &size) < 0) goto done;
        rc = 0;
        if (addr != HADDR_UNDEF) *end = (int64_t)(addr + size);
        else rc = 1; /* never written: its rows read as fill values */
    } else {
        haddr_t a = H5Dget_offset(ds);
        rc = 0;
        if (a != HADDR_UNDEF) *end = (int64_t)(a + H5Dget_storage_size(ds));
    }
done:
    if (dcpl >= 0) H5Pclose(dcpl);
    return rc;
}
