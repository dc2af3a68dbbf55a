/* drift merge index files (formats/trace_index.h, docs/format.md "Index
 * files"): writing an index of HDF5 virtual datasets over per-rank traces,
 * and opening one rank of it as a trace.
 *
 * Reading a rank through the trace reader needs that rank's tree at the
 * root of an HDF5 file (the reader addresses "/steps", "/sites", ...). The
 * index holds every rank under /ranks/<N>, so opening INDEX#rank=N builds a
 * small "view" file whose root is a copy of /ranks/<N>: groups and
 * attributes copied, every virtual dataset re-created with the index's own
 * mappings (source names made absolute against the index's directory). The
 * view holds metadata only; every element read through it comes from the
 * rank file. The view is a private temporary file (created, reopened
 * read-only and unlinked at once), not an in-memory (core driver) file:
 * HDF5 opens VDS source files with the access properties of the file
 * holding the VDS, and a core-driver fapl would load each whole rank file
 * into memory. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include "formats/alloc.h"
#include "formats/outpath.h"
#include "formats/trace_index.h"
#include "formats/trace_internal.h"

_Static_assert(sizeof(hid_t) == sizeof(int64_t), "hid_t is 64-bit from HDF5 1.10 on");

#define IX_RANKS "ranks"
#define IX_SOURCE_ATTR "index_source"   /* per rank group: source path as recorded (unescaped) */
#define IX_DIGEST_ATTR "index_source_digest" /* per rank group: source_digest of the rank file at merge time */
#define IX_DEPTH_MAX 8                  /* the schema nests 3 deep */
#define IX_PATH_MAX 4096
#define IX_LINK_MAX (3 * DRIFT_TRACE_NAME_MAX + 16)
#define IX_ATTR_BYTES_MAX ((size_t)DRIFT_TRACE_ATTR_MAX + 4096)
#define IX_SCALAR_BYTES_MAX ((hsize_t)DRIFT_TRACE_GRAPH_MAX + 4096)

/* "a:b" into buf, truncated if need be. */
static const char *where2(char *buf, size_t sz, const char *a, const char *b) {
    size_t o = 0;
    for (const char *p = a; *p && o + 1 < sz; p++) buf[o++] = *p;
    if (o + 1 < sz) buf[o++] = ':';
    for (const char *p = b; *p && o + 1 < sz; p++) buf[o++] = *p;
    buf[o] = '\0';
    return buf;
}

static void hclose_any(hid_t *h) {
    if (*h >= 0) {
        H5I_type_t t = H5Iget_type(*h);
        if (t == H5I_FILE) tr_h5_close_file(*h);
        else if (t == H5I_GROUP) H5Gclose(*h);
        else if (t == H5I_DATASET) H5Dclose(*h);
        else if (t == H5I_DATASPACE) H5Sclose(*h);
        else if (t == H5I_DATATYPE) H5Tclose(*h);
        else if (t == H5I_ATTR) H5Aclose(*h);
        else if (t == H5I_GENPROP_LST) H5Pclose(*h);
    }
    *h = H5I_INVALID_HID;
}

/* --- strings and paths ---------------------------------------------------- */

/* VDS source file and dataset names are printf-like templates: '%' must be
 * written "%%" (docs: H5Pset_virtual). Returns 0 or -1 if out is too small. */
static int pct_escape(const char *s, char *out, size_t outsz) {
    size_t o = 0;
    for (; *s; s++) {
        size_t need = *s == '%' ? 2 : 1;
        if (o + need >= outsz) return -1;
        out[o++] = *s;
        if (*s == '%') out[o++] = '%';
    }
    out[o] = '\0';
    return 0;
}

/* Inverse of pct_escape; -1 on a lone '%' (a template we never write). */
static int pct_unescape(const char *s, char *out, size_t outsz) {
    size_t o = 0;
    for (; *s; s++) {
        if (o + 1 >= outsz) return -1;
        if (*s == '%') {
            if (s[1] != '%') return -1;
            s++;
        }
        out[o++] = *s;
    }
    out[o] = '\0';
    return 0;
}

/* Absolute directory of path as given (not following symlinks: HDF5
 * resolves relative VDS source names against the directory of the name the
 * index was opened by). Returns 0, or -1. */
static int abs_dir_of(const char *path, char *out, size_t outsz) {
    char buf[IX_PATH_MAX];
    if (path[0] == '/') {
        if (strlen(path) >= sizeof buf) return -1;
        memcpy(buf, path, strlen(path) + 1);
    } else {
        char cwd[IX_PATH_MAX];
        if (!getcwd(cwd, sizeof cwd)) return -1;
        if ((size_t)snprintf(buf, sizeof buf, "%s/%s", cwd, path) >= sizeof buf) return -1;
    }
    char *slash = strrchr(buf, '/');
    if (!slash) return -1;
    if (slash == buf) slash[1] = '\0';
    else *slash = '\0';
    if (strlen(buf) >= outsz) return -1;
    memcpy(out, buf, strlen(buf) + 1);
    return 0;
}

/* Relative path from directory `from` to file `to` (both absolute and
 * canonical). Returns 0, or -1 if out is too small. */
static int rel_path(const char *from, const char *to, char *out, size_t outsz) {
    size_t i = 0, common = 0;
    /* longest common prefix ending at a directory boundary */
    while (from[i] && to[i] && from[i] == to[i]) {
        i++;
        if (from[i] == '\0' && to[i] == '/') common = i;
        else if (from[i] == '/' && to[i] == '/') common = i;
    }
    if (strcmp(from, "/") == 0) common = 0;
    size_t o = 0;
    out[0] = '\0';
    for (const char *p = from + common; *p; p++)
        if (*p == '/') {
            /* each remaining component of `from` is one "../" */
            if (o + 3 >= outsz) return -1;
            memcpy(out + o, "../", 4);
            o += 3;
        }
    const char *rest = to + common + (to[common] == '/' ? 1 : 0);
    if (o + strlen(rest) + 1 > outsz) return -1;
    memcpy(out + o, rest, strlen(rest) + 1);
    return 0;
}

/* --- attributes ------------------------------------------------------------ */

/* Copies every attribute of src to dst (fixed-size types only: the schema
 * has no variable-length data). */
static int copy_attrs(hid_t src, hid_t dst, const char *file, const char *obj, drift_err *err) {
    H5O_info_t oi;
    if (H5Oget_info2(src, &oi, H5O_INFO_NUM_ATTRS) < 0)
        return tr_h5_fail(err, DRIFT_E_INPUT, file, obj, "cannot read the attribute count");
    int rc = DRIFT_OK;
    for (hsize_t i = 0; i < oi.num_attrs && !rc; i++) {
        /* native order, as everywhere by index (tr_iterate_links: HDF5 1.10 frees a half-built table) */
        hid_t a = H5Aopen_by_idx(src, ".", H5_INDEX_NAME, H5_ITER_NATIVE, i, H5P_DEFAULT, H5P_DEFAULT);
        hid_t t = H5I_INVALID_HID, s = H5I_INVALID_HID, na = H5I_INVALID_HID;
        void *buf = NULL;
        char name[256] = "?";
        if (a < 0) {
            rc = tr_h5_fail(err, DRIFT_E_INPUT, file, obj, "unreadable attribute");
            goto next;
        }
        ssize_t nl = H5Aget_name(a, sizeof name, name);
        t = H5Aget_type(a);
        s = H5Aget_space(a);
        hssize_t np = s >= 0 ? H5Sget_simple_extent_npoints(s) : -1;
        size_t ts = t >= 0 ? H5Tget_size(t) : 0;
        if (nl <= 0 || (size_t)nl >= sizeof name || t < 0 || s < 0 || np < 0 || ts == 0 ||
            H5Tdetect_class(t, H5T_VLEN) != 0 || H5Tis_variable_str(t) != 0 ||
            H5Tdetect_class(t, H5T_REFERENCE) != 0 || (np > 0 && ts > IX_ATTR_BYTES_MAX / (size_t)np)) {
            char w[IX_PATH_MAX];
            snprintf(w, sizeof w, "%s:%s", file, obj);
            rc = drift_err_set(err, DRIFT_E_INPUT, w,
                               "attribute \"%s\": expected a fixed-size value of at most %zu bytes", name,
                               IX_ATTR_BYTES_MAX);
            goto next;
        }
        buf = drift_calloc(1, np > 0 ? (size_t)np * ts : 1);
        if (!buf) {
            rc = drift_err_set(err, DRIFT_E_NOMEM, file, "out of memory");
            goto next;
        }
        if ((np > 0 && H5Aread(a, t, buf) < 0) ||
            (na = H5Acreate2(dst, name, t, s, H5P_DEFAULT, H5P_DEFAULT)) < 0 || (np > 0 && H5Awrite(na, t, buf) < 0))
            rc = tr_h5_fail(err, DRIFT_E_IO, file, obj, "cannot copy an attribute");
    next:
        free(buf);
        hclose_any(&na);
        hclose_any(&s);
        hclose_any(&t);
        hclose_any(&a);
    }
    return rc;
}

/* Reads a string attribute if present into a fixed buffer; 0 if read. */
static int attr_str_opt(hid_t loc, const char *name, char *out, size_t outsz) {
    char *s = NULL;
    out[0] = '\0';
    if (H5Aexists(loc, name) <= 0) return -1;
    const int rc = tr_read_attr_str(loc, name, outsz, &s, "", "", NULL);
    if (rc == DRIFT_E_NOMEM) return -2; /* the callers report memory, not a bad file */
    if (rc != DRIFT_OK) return -1;
    snprintf(out, outsz, "%s", s);
    free(s);
    return 0;
}

/* --- walking a tree ---------------------------------------------------------- */

typedef struct ix_site_rows {
    char *link;        /* escaped site name = link under /sites */
    int64_t rows;      /* committed records */
} ix_site_rows;

typedef struct ix_walk {
    int merge;                 /* 1: rank file -> index; 0: index rank group -> view */
    const char *src_label;     /* file named in messages */
    /* merge */
    const char *vds_file;      /* source file name as written into mappings (%-escaped) */
    drift_trace_reader *r;     /* committed bounds of the rank file */
    ix_site_rows *sites;       /* sorted by link */
    size_t n_sites;
    /* view */
    hid_t src_file;            /* the rank file, for extent checks */
    const char *src_path;      /* resolved rank file path (messages) */
    const char *vds_expect;    /* the %-escaped recorded source name every mapping must use */
    const char *vds_abs;       /* the %-escaped absolute name the view's mappings get */
} ix_walk;

static int cmp_site_rows(const void *a, const void *b) {
    return strcmp(((const ix_site_rows *)a)->link, ((const ix_site_rows *)b)->link);
}

/* Committed rows of the dataset at path (merge): -1 = its whole extent. */
static int64_t snapshot_rows(const ix_walk *w, const char *path) {
    size_t ns = 0;
    const drift_trace_step *st = drift_trace_reader_steps(w->r, &ns);
    const drift_trace_step *last = ns ? &st[ns - 1] : NULL;
    if (strcmp(path, TR_STEPS) == 0) return (int64_t)ns;
    if (strcmp(path, TR_METRIC_ROWS) == 0) return last ? last->metrics_rows : 0;
    if (strcmp(path, TR_METRIC_STEPS) == 0) return last ? last->step_metrics_rows : 0;
    if (strcmp(path, TR_NOTES) == 0) return last ? last->notes_rows : 0;
    if (strcmp(path, TR_METRIC_NAMES) == 0) return (int64_t)drift_trace_reader_n_metric_sites(w->r);
    if (strncmp(path, "/sites/", 7) == 0) {
        const char *link = path + 7, *sl = strrchr(link, '/');
        if (!sl || strchr(link, '/') != sl) return -1;
        const char *leaf = sl + 1;
        if (strcmp(leaf, "index") && strcmp(leaf, "stats") && strcmp(leaf, "data")) return -1;
        char key[IX_LINK_MAX];
        size_t n = (size_t)(sl - link);
        if (n >= sizeof key) return -1;
        memcpy(key, link, n);
        key[n] = '\0';
        ix_site_rows k = {.link = key, .rows = 0};
        const ix_site_rows *hit = bsearch(&k, w->sites, w->n_sites, sizeof *w->sites, cmp_site_rows);
        return hit ? hit->rows : -1;
    }
    return -1;
}

/* Copies the fill value of src_dcpl (if user-defined) to dcpl; -1 on an
 * HDF5 failure, -2 when memory ran out. */
static int copy_fill(hid_t src_dcpl, hid_t dcpl, hid_t type) {
    H5D_fill_value_t st;
    if (H5Pfill_value_defined(src_dcpl, &st) < 0) return -1;
    if (st != H5D_FILL_VALUE_USER_DEFINED) return 0;
    size_t ts = H5Tget_size(type);
    if (ts == 0 || ts > 65536) return -1;
    void *buf = drift_calloc(1, ts);
    if (!buf) return -2;
    int rc = H5Pget_fill_value(src_dcpl, type, buf) < 0 || H5Pset_fill_value(dcpl, type, buf) < 0 ? -1 : 0;
    free(buf);
    return rc;
}

/* Copies scalar dataset ds (type t, at most IX_SCALAR_BYTES_MAX bytes) into
 * dst as name, by reading and writing: H5Ocopy crashes inside HDF5 1.10
 * (H5T_close_real) when the destination's write fails on a full disk.
 * 0, -1 (HDF5 refused), -2 (out of memory). */
static int copy_scalar(hid_t ds, hid_t t, hid_t dst, const char *name) {
    size_t sz = H5Tget_size(t);
    if (sz == 0 || sz > IX_SCALAR_BYTES_MAX || H5Tget_class(t) != H5T_STRING) return -1;
    char *buf = drift_malloc(sz);
    if (!buf) return -2;
    hid_t sp = H5Screate(H5S_SCALAR), out = H5I_INVALID_HID;
    int rc = -1;
    if (sp >= 0 && H5Dread(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0 &&
        (out = H5Dcreate2(dst, name, t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) >= 0 &&
        H5Dwrite(out, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0)
        rc = 0;
    if (out >= 0 && H5Dclose(out) < 0) rc = -1;
    if (sp >= 0) H5Sclose(sp);
    drift_free(buf);
    return rc;
}

/* Merge: a virtual dataset in dst over the first rows of src dataset at path. */
static int merge_dataset(ix_walk *w, hid_t src_grp, const char *name, const char *path, hid_t dst, drift_err *err) {
    int rc = DRIFT_OK;
    hid_t ds = H5I_INVALID_HID, t = H5I_INVALID_HID, s = H5I_INVALID_HID, sdcpl = H5I_INVALID_HID;
    hid_t dcpl = H5I_INVALID_HID, vs = H5I_INVALID_HID, ss = H5I_INVALID_HID, out = H5I_INVALID_HID;
    char where[IX_PATH_MAX];
    where2(where, sizeof where, w->src_label, path);
    /* a rank file's datasets keep their bytes in it (tr_guard_header: never a virtual one) */
    if ((rc = tr_guard_header(src_grp, name, 0, w->src_label, path, err))) return rc;
    if ((ds = H5Dopen2(src_grp, name, H5P_DEFAULT)) < 0 || (t = H5Dget_type(ds)) < 0 || (s = H5Dget_space(ds)) < 0 ||
        (sdcpl = H5Dget_create_plist(ds)) < 0) {
        rc = tr_h5_fail(err, DRIFT_E_INPUT, w->src_label, path, "unreadable dataset");
        goto done;
    }
    H5S_class_t cls = H5Sget_simple_extent_type(s);
    if (cls == H5S_SCALAR) {
        /* the /graph string: metadata, copied (a VDS needs a simple dataspace) */
        if (H5Dget_storage_size(ds) > IX_SCALAR_BYTES_MAX) {
            rc = drift_err_set(err, DRIFT_E_INPUT, where, "scalar dataset larger than %llu bytes",
                               (unsigned long long)IX_SCALAR_BYTES_MAX);
            goto done;
        }
        int crc = copy_scalar(ds, t, dst, name);
        if (crc == -2) rc = drift_err_set(err, DRIFT_E_NOMEM, where, "out of memory");
        else if (crc < 0) rc = tr_h5_fail(err, DRIFT_E_IO, w->src_label, path, "cannot copy into the index");
        goto done;
    }
    int rank = H5Sget_simple_extent_ndims(s);
    hsize_t dims[H5S_MAX_RANK], vdims[H5S_MAX_RANK], start[H5S_MAX_RANK] = {0};
    if (cls != H5S_SIMPLE || rank < 1 || rank > DRIFT_MAX_DIMS + 1 || H5Sget_simple_extent_dims(s, dims, NULL) < 0) {
        rc = drift_err_set(err, DRIFT_E_INPUT, where, "expected a dataset of rank 1..%d", DRIFT_MAX_DIMS + 1);
        goto done;
    }
    memcpy(vdims, dims, sizeof(hsize_t) * (size_t)rank);
    int64_t rows = snapshot_rows(w, path);
    if (rows >= 0) {
        if ((hsize_t)rows > dims[0]) {
            rc = drift_err_set(err, DRIFT_E_INPUT, where, "%lld committed rows but the dataset holds %llu",
                               (long long)rows, (unsigned long long)dims[0]);
            goto done;
        }
        vdims[0] = (hsize_t)rows;
    }
    int empty = 0, fill = 0;
    for (int d = 0; d < rank; d++) empty |= vdims[d] == 0;
    if ((dcpl = H5Pcreate(H5P_DATASET_CREATE)) < 0 || H5Pset_layout(dcpl, H5D_VIRTUAL) < 0 ||
        (fill = copy_fill(sdcpl, dcpl, t)) < 0 || (vs = H5Screate_simple(rank, vdims, vdims)) < 0) {
        rc = fill == -2 ? drift_err_set(err, DRIFT_E_NOMEM, where, "out of memory")
                        : tr_h5_fail(err, DRIFT_E_IO, w->src_label, path, "cannot build the virtual dataset");
        goto done;
    }
    if (!empty) {
        char dsname[IX_PATH_MAX];
        if (pct_escape(path, dsname, sizeof dsname) != 0) {
            rc = drift_err_set(err, DRIFT_E_INPUT, where, "dataset path too long");
            goto done;
        }
        if ((ss = H5Screate_simple(rank, dims, NULL)) < 0 ||
            H5Sselect_hyperslab(ss, H5S_SELECT_SET, start, NULL, vdims, NULL) < 0 || H5Sselect_all(vs) < 0 ||
            H5Pset_virtual(dcpl, vs, w->vds_file, dsname, ss) < 0) {
            rc = tr_h5_fail(err, DRIFT_E_IO, w->src_label, path, "cannot map the virtual dataset");
            goto done;
        }
    }
    if ((out = H5Dcreate2(dst, name, t, vs, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0) {
        rc = tr_h5_fail(err, DRIFT_E_IO, w->src_label, path, "cannot create the virtual dataset");
        goto done;
    }
    rc = copy_attrs(ds, out, w->src_label, path, err);
done:
    hclose_any(&out);
    hclose_any(&ss);
    hclose_any(&vs);
    hclose_any(&dcpl);
    hclose_any(&sdcpl);
    hclose_any(&s);
    hclose_any(&t);
    hclose_any(&ds);
    return rc;
}

/* View: re-creates the index's virtual dataset name of src_grp in dst with
 * absolute source names, after checking that every mapped source dataset
 * exists in the rank file with at least the mapped extent. */
static int view_dataset(ix_walk *w, hid_t src_grp, const char *name, const char *path, hid_t dst, drift_err *err) {
    int rc = DRIFT_OK;
    hid_t ds = H5I_INVALID_HID, t = H5I_INVALID_HID, s = H5I_INVALID_HID, sdcpl = H5I_INVALID_HID;
    hid_t dcpl = H5I_INVALID_HID, out = H5I_INVALID_HID;
    char where[IX_PATH_MAX];
    where2(where, sizeof where, w->src_label, path);
    /* the index's own virtual datasets: their mappings checked before HDF5 decodes them */
    if ((rc = tr_guard_header(src_grp, name, 1, w->src_label, path, err))) return rc;
    if ((ds = H5Dopen2(src_grp, name, H5P_DEFAULT)) < 0 || (t = H5Dget_type(ds)) < 0 || (s = H5Dget_space(ds)) < 0 ||
        (sdcpl = H5Dget_create_plist(ds)) < 0) {
        rc = tr_h5_fail(err, DRIFT_E_INPUT, w->src_label, path, "unreadable dataset");
        goto done;
    }
    if (H5Pget_layout(sdcpl) != H5D_VIRTUAL) {
        if (H5Sget_simple_extent_type(s) != H5S_SCALAR || H5Dget_storage_size(ds) > IX_SCALAR_BYTES_MAX) {
            rc = drift_err_set(err, DRIFT_E_INPUT, where, "expected a virtual dataset (or the scalar graph string)");
            goto done;
        }
        int crc = copy_scalar(ds, t, dst, name);
        if (crc == -2) rc = drift_err_set(err, DRIFT_E_NOMEM, where, "out of memory");
        else if (crc < 0) rc = tr_h5_fail(err, DRIFT_E_IO, w->src_label, path, "cannot copy into the view");
        goto done;
    }
    size_t nmap = 0;
    int fill = 0;
    if (H5Pget_virtual_count(sdcpl, &nmap) < 0 || nmap > 1024 || (dcpl = H5Pcreate(H5P_DATASET_CREATE)) < 0 ||
        H5Pset_layout(dcpl, H5D_VIRTUAL) < 0 || (fill = copy_fill(sdcpl, dcpl, t)) < 0) {
        rc = fill == -2 ? drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory")
                        : tr_h5_fail(err, DRIFT_E_INPUT, w->src_label, path, "unreadable virtual dataset mappings");
        goto done;
    }
    for (size_t m = 0; m < nmap && !rc; m++) {
        char fname[IX_PATH_MAX], dname[IX_PATH_MAX], plain[IX_PATH_MAX];
        hid_t vsp = H5Pget_virtual_vspace(sdcpl, m), ssp = H5Pget_virtual_srcspace(sdcpl, m), src = H5I_INVALID_HID;
        ssize_t fl = H5Pget_virtual_filename(sdcpl, m, fname, sizeof fname);
        ssize_t dl = H5Pget_virtual_dsetname(sdcpl, m, dname, sizeof dname);
        hsize_t lo[H5S_MAX_RANK], hi[H5S_MAX_RANK], sd[H5S_MAX_RANK];
        if (vsp < 0 || ssp < 0 || fl <= 0 || (size_t)fl >= sizeof fname || dl <= 0 || (size_t)dl >= sizeof dname) {
            rc = tr_h5_fail(err, DRIFT_E_INPUT, w->src_label, path, "unreadable virtual dataset mapping");
        } else if (strcmp(fname, w->vds_expect) != 0) {
            rc = drift_err_set(err, DRIFT_E_INPUT, where, "maps file \"%s\", expected this rank's source \"%s\"", fname,
                               w->vds_expect);
        } else if (pct_unescape(dname, plain, sizeof plain) == 0 && H5Lexists(w->src_file, plain, H5P_DEFAULT) > 0 &&
                   (rc = tr_guard_header(w->src_file, plain, 0, w->src_path, plain, err))) {
            /* a source that is itself virtual or has a malformed header: refused, never opened */
        } else if (pct_unescape(dname, plain, sizeof plain) != 0 ||
                   (src = H5Dopen2(w->src_file, plain, H5P_DEFAULT)) < 0) {
            rc = drift_err_set(err, DRIFT_E_INPUT, where,
                               "source dataset %s is missing in %s: the rank file changed since the merge "
                               "(re-run drift merge)",
                               dname, w->src_path);
        } else {
            hid_t cur = H5Dget_space(src);
            int rk = cur >= 0 ? H5Sget_simple_extent_ndims(cur) : -1;
            int ok = rk >= 0 && rk == H5Sget_simple_extent_ndims(ssp) && H5Sget_simple_extent_dims(cur, sd, NULL) >= 0;
            if (ok && H5Sget_select_npoints(ssp) > 0 && rk > 0) {
                ok = H5Sget_select_bounds(ssp, lo, hi) >= 0;
                for (int d = 0; ok && d < rk; d++) ok = hi[d] < sd[d];
            }
            if (cur >= 0) H5Sclose(cur);
            if (!ok)
                rc = drift_err_set(err, DRIFT_E_INPUT, where,
                                   "source dataset %s of %s is smaller than what the index maps: the rank file "
                                   "changed since the merge (re-run drift merge)",
                                   plain, w->src_path);
            else if (H5Pset_virtual(dcpl, vsp, w->vds_abs, dname, ssp) < 0)
                rc = tr_h5_fail(err, DRIFT_E_IO, w->src_label, path, "cannot map the view's virtual dataset");
        }
        hclose_any(&src);
        hclose_any(&vsp);
        hclose_any(&ssp);
    }
    if (rc) goto done;
    if ((out = H5Dcreate2(dst, name, t, s, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0) {
        rc = tr_h5_fail(err, DRIFT_E_IO, w->src_label, path, "cannot create the view's virtual dataset");
        goto done;
    }
    rc = copy_attrs(ds, out, w->src_label, path, err);
done:
    hclose_any(&out);
    hclose_any(&dcpl);
    hclose_any(&sdcpl);
    hclose_any(&s);
    hclose_any(&t);
    hclose_any(&ds);
    return rc;
}

/* Copies the children of src_grp (at path, "" for a root) into dst:
 * groups with their attributes, datasets as virtual datasets. */
static int walk(ix_walk *w, hid_t src_grp, const char *path, hid_t dst, int depth, drift_err *err) {
    if (depth > IX_DEPTH_MAX)
        return drift_err_set(err, DRIFT_E_INPUT, w->src_label, "%s: groups nested deeper than %d", path, IX_DEPTH_MAX);
    H5G_info_t gi;
    if (H5Gget_info(src_grp, &gi) < 0) return tr_h5_fail(err, DRIFT_E_INPUT, w->src_label, path[0] ? path : "/", "unreadable group");
    if (gi.nlinks > (hsize_t)DRIFT_TRACE_MAX_SITES * 10)
        return drift_err_set(err, DRIFT_E_INPUT, w->src_label, "%s: %llu links, expected at most %d", path[0] ? path : "/",
                             (unsigned long long)gi.nlinks, DRIFT_TRACE_MAX_SITES * 10);
    int rc = DRIFT_OK;
    for (hsize_t i = 0; i < gi.nlinks && !rc; i++) {
        char name[IX_LINK_MAX], sub[IX_PATH_MAX];
        ssize_t nl = H5Lget_name_by_idx(src_grp, ".", H5_INDEX_NAME, H5_ITER_NATIVE, i, name, sizeof name, H5P_DEFAULT);
        if (nl <= 0 || (size_t)nl >= sizeof name)
            return drift_err_set(err, DRIFT_E_INPUT, w->src_label, "%s: unreadable or too long link name", path[0] ? path : "/");
        if ((size_t)snprintf(sub, sizeof sub, "%s/%s", path, name) >= sizeof sub)
            return drift_err_set(err, DRIFT_E_INPUT, w->src_label, "%s/%s: path too long", path, name);
        H5L_info_t li;
        H5O_info_t oi;
        if (H5Lget_info(src_grp, name, &li, H5P_DEFAULT) < 0 || li.type != H5L_TYPE_HARD ||
            H5Oget_info_by_name2(src_grp, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0)
            return drift_err_set(err, DRIFT_E_INPUT, w->src_label, "%s: expected a group or dataset (hard link)", sub);
        if (oi.type == H5O_TYPE_GROUP) {
            hid_t sg = H5Gopen2(src_grp, name, H5P_DEFAULT);
            hid_t dg = sg >= 0 ? H5Gcreate2(dst, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : H5I_INVALID_HID;
            if (sg < 0 || dg < 0) rc = tr_h5_fail(err, DRIFT_E_IO, w->src_label, sub, "cannot copy the group");
            if (!rc) rc = copy_attrs(sg, dg, w->src_label, sub, err);
            if (!rc) rc = walk(w, sg, sub, dg, depth + 1, err);
            hclose_any(&dg);
            hclose_any(&sg);
        } else if (oi.type == H5O_TYPE_DATASET) {
            rc = w->merge ? merge_dataset(w, src_grp, name, sub, dst, err) : view_dataset(w, src_grp, name, sub, dst, err);
        } else {
            rc = drift_err_set(err, DRIFT_E_INPUT, w->src_label, "%s: expected a group or dataset", sub);
        }
    }
    return rc;
}

static hid_t fapl_latest(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0 && H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST) < 0) {
        H5Pclose(fapl);
        return H5I_INVALID_HID;
    }
    return fapl;
}

/* ======================================================================= */
/* Merge                                                                     */
/* ======================================================================= */

typedef struct ix_input {
    const char *path;
    char real[PATH_MAX];
    drift_trace_reader *r;
    int32_t rank;
} ix_input;

static int cmp_input_rank(const void *a, const void *b) {
    int32_t x = ((const ix_input *)a)->rank, y = ((const ix_input *)b)->rank;
    return (x > y) - (x < y);
}

/* Sorted (link, committed records) of every site of r; *out owned by the caller. */
static int site_rows(drift_trace_reader *r, ix_site_rows **out, size_t *n, drift_err *err) {
    size_t ns = drift_trace_reader_n_sites(r);
    *out = NULL;
    *n = 0;
    ix_site_rows *v = drift_calloc(ns ? ns : 1, sizeof *v);
    if (!v) return drift_err_set(err, DRIFT_E_NOMEM, drift_trace_reader_path(r), "out of memory");
    int rc = DRIFT_OK;
    size_t k = 0;
    for (; k < ns && !rc; k++) {
        drift_trace_site_info si;
        char esc[3 * DRIFT_TRACE_NAME_MAX];
        if ((rc = drift_trace_reader_site(r, k, &si, err))) break;
        if (tr_escape_name(si.name, esc, sizeof esc) != 0 || !(v[k].link = drift_strdup(esc))) {
            rc = drift_err_set(err, DRIFT_E_NOMEM, drift_trace_reader_path(r), "out of memory");
            break;
        }
        v[k].rows = si.n_records;
    }
    if (rc) {
        for (size_t i = 0; i < ns; i++) free(v[i].link);
        free(v);
        return rc;
    }
    qsort(v, ns, sizeof *v, cmp_site_rows);
    *out = v;
    *n = ns;
    return DRIFT_OK;
}

static void now_iso(char *buf, size_t sz) {
    time_t t = time(NULL);
    struct tm tm;
    if (gmtime_r(&t, &tm)) strftime(buf, sz, "%Y-%m-%dT%H:%M:%SZ", &tm);
    else snprintf(buf, sz, "1970-01-01T00:00:00Z");
}

/* The identity of a rank file by content (docs/format.md "Index files"):
 * FNV-1a 64 over its "plan" and "run_id" attributes and the raw rows of
 * /steps (each commit row carries its commit time in microseconds): a file
 * rewritten within the same second, or re-recorded under another plan,
 * changes it. Hex into out (17 bytes). */
static int source_digest(hid_t src, const char *label, char *out, drift_err *err) {
    uint64_t h = 1469598103934665603ull;
    static const char *const attrs[] = {"plan", "run_id"};
    for (size_t a = 0; a < 2; a++) {
        char *v = NULL;
        int rc = tr_read_attr_str(src, attrs[a], DRIFT_TRACE_ATTR_MAX, &v, label, "/", err);
        if (rc) return rc; /* DRIFT_E_NOMEM stays one: the file may be fine */
        for (const unsigned char *p = (const unsigned char *)v; *p; p++) h = (h ^ *p) * 1099511628211ull;
        h = (h ^ 0xff) * 1099511628211ull;
        drift_free(v);
    }
    hid_t ds = H5I_INVALID_HID, t = H5I_INVALID_HID;
    int rc = tr_open_dataset(src, TR_STEPS, 0, label, TR_STEPS, &ds, err);
    if (rc) return rc;
    int rank = 0;
    int64_t rows = 0;
    unsigned char *buf = NULL;
    size_t rs = 0;
    if ((rc = tr_dataset_dims(ds, 1, &rank, &rows, label, TR_STEPS, err))) goto done;
    t = H5Dget_type(ds);
    rs = t >= 0 ? H5Tget_size(t) : 0;
    int64_t bytes = 0;
    if (rs == 0 || tr_mul_checked(rows, (int64_t)rs, (int64_t)DRIFT_TRACE_READ_MAX, &bytes) != 0) {
        rc = drift_err_set(err, DRIFT_E_INPUT, label, "/steps: unreadable or too large to identify the file");
        goto done;
    }
    if (rows > 0) {
        if (!(buf = drift_malloc((size_t)bytes))) {
            rc = drift_err_set(err, DRIFT_E_NOMEM, label, "out of memory");
            goto done;
        }
        if (H5Dread(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
            rc = tr_h5_fail(err, DRIFT_E_INPUT, label, TR_STEPS, "cannot read the commit rows");
            goto done;
        }
        for (int64_t i = 0; i < bytes; i++) h = (h ^ buf[i]) * 1099511628211ull;
    }
    snprintf(out, 17, "%016llx", (unsigned long long)h);
done:
    drift_free(buf);
    if (t >= 0) H5Tclose(t);
    H5Dclose(ds);
    return rc;
}

static int allow_outside; /* process-wide: drift_trace_index_allow_outside */

void drift_trace_index_allow_outside(int allow) { allow_outside = allow ? 1 : 0; }

static int outside_allowed(void) { return allow_outside; }

/* 1 if resolved (an existing file) lies inside the index's folder (or a
 * folder below it), both after resolving symbolic links. */
static int inside_index_dir(const char *index_path, const char *resolved) {
    char dir[IX_PATH_MAX], rd[PATH_MAX], rf[PATH_MAX];
    if (abs_dir_of(index_path, dir, sizeof dir) != 0 || !realpath(dir, rd) || !realpath(resolved, rf)) return 0;
    size_t n = strlen(rd);
    if (n == 1) return 1; /* the index is in "/" */
    return strncmp(rf, rd, n) == 0 && rf[n] == '/';
}

/* Writes rank in's tree under /ranks/<rank> of the index f. */
static int merge_rank(hid_t f, const char *out_dir, ix_input *in, drift_err *err) {
    int rc = DRIFT_OK;
    hid_t src = H5I_INVALID_HID, g = H5I_INVALID_HID, rg = H5I_INVALID_HID;
    ix_site_rows *sites = NULL;
    size_t n_sites = 0;
    char rel[IX_PATH_MAX], relesc[2 * IX_PATH_MAX + 2], gname[32];
    if (rel_path(out_dir, in->real, rel, sizeof rel) != 0 || pct_escape(rel, relesc, sizeof relesc) != 0) {
        rc = drift_err_set(err, DRIFT_E_INPUT, in->path, "path too long");
        goto done;
    }
    if ((rc = tr_guard_superblock(in->path, err))) goto done;
    if ((src = H5Fopen(in->path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0) {
        rc = tr_h5_fail(err, DRIFT_E_INPUT, in->path, "/", "cannot open");
        goto done;
    }
    if ((rc = site_rows(in->r, &sites, &n_sites, err))) goto done;
    snprintf(gname, sizeof gname, "%s/%d", IX_RANKS, (int)in->rank);
    if ((rg = H5Gcreate2(f, gname, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) < 0) {
        rc = tr_h5_fail(err, DRIFT_E_IO, in->path, gname, "cannot create the rank group in the index");
        goto done;
    }
    if ((rc = copy_attrs(src, rg, in->path, "/", err))) goto done;
    char dig[17];
    if ((rc = source_digest(src, in->path, dig, err))) goto done;
    if (tr_write_attr_str(rg, IX_SOURCE_ATTR, rel) != 0 || tr_write_attr_str(rg, IX_DIGEST_ATTR, dig) != 0) {
        rc = tr_h5_fail(err, DRIFT_E_IO, in->path, gname, "cannot write the source attributes");
        goto done;
    }
    ix_walk w = {.merge = 1, .src_label = in->path, .vds_file = relesc, .r = in->r, .sites = sites,
                 .n_sites = n_sites, .src_file = H5I_INVALID_HID};
    rc = walk(&w, src, "", rg, 0, err);
done:
    for (size_t i = 0; i < n_sites; i++) free(sites[i].link);
    free(sites);
    hclose_any(&rg);
    hclose_any(&g);
    hclose_any(&src);
    return rc;
}

static int index_probe(const char *path); /* below */

/* The ranks of one run ran one model under one plan over the same steps: a
 * file from another run that happens to share its run id (or a rank cut
 * short) would otherwise be merged into a view of nothing consistent. */
static int ranks_agree(const ix_input *a, const ix_input *b, const char *w, drift_err *err) {
    const drift_trace_meta *m = drift_trace_reader_meta(a->r), *m0 = drift_trace_reader_meta(b->r);
    const char *fa = m->family ? m->family : "", *fb = m0->family ? m0->family : "";
    if (strcmp(fa, fb) != 0)
        return drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"family\" is \"%.300s\", %s has \"%.300s\": ranks of one run "
                             "share the model (--allow-mismatch merges them anyway)", fa, b->path, fb);
    const char *pa = m->plan_json ? m->plan_json : "", *pb = m0->plan_json ? m0->plan_json : "";
    if (strcmp(pa, pb) != 0)
        return drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"plan\" differs from %s's (\"%.200s\" vs \"%.200s\"): ranks of "
                             "one run share the plan (--allow-mismatch merges them anyway)", b->path, pa, pb);
    size_t na = 0, nb = 0;
    const drift_trace_step *sa = drift_trace_reader_steps(a->r, &na), *sb = drift_trace_reader_steps(b->r, &nb);
    size_t k = 0;
    while (k < na && k < nb && sa[k].step == sb[k].step) k++;
    if (k < na || k < nb) {
        char ga[48] = "none", gb[48] = "none";
        if (na) snprintf(ga, sizeof ga, "%lld..%lld", (long long)sa[0].step, (long long)sa[na - 1].step);
        if (nb) snprintf(gb, sizeof gb, "%lld..%lld", (long long)sb[0].step, (long long)sb[nb - 1].step);
        char wh[600];
        snprintf(wh, sizeof wh, "%.560s:/steps", a->path);
        return drift_err_set(err, DRIFT_E_INPUT, wh, "committed steps %s (%zu) differ from %s's %s (%zu) at the %zu%s step: "
                             "ranks of one run commit the same steps (--allow-mismatch merges them anyway)",
                             ga, na, b->path, gb, nb, k + 1, k == 0 ? "st" : k == 1 ? "nd" : k == 2 ? "rd" : "th");
    }
    return DRIFT_OK;
}

int drift_trace_merge(const drift_trace_merge_opts *o, drift_err *err) {
    tr_guard_init();
    tr_h5_quiet();
    if (!o || !o->out || !o->inputs || o->n_inputs == 0)
        return drift_err_set(err, DRIFT_E_USAGE, NULL, "merge: at least one TRACE and an output path are required");
    if (o->n_inputs > DRIFT_TRACE_INDEX_MAX_INPUTS)
        return drift_err_set(err, DRIFT_E_USAGE, NULL, "merge: %zu inputs, at most %d", o->n_inputs,
                             DRIFT_TRACE_INDEX_MAX_INPUTS);
    int rc = DRIFT_OK;
    ix_input *in = drift_calloc(o->n_inputs, sizeof *in);
    unsigned char *seen = NULL;
    char *tmp = NULL; /* op.tmp while the index is written */
    drift_outpath op = {NULL, NULL, -1};
    hid_t f = H5I_INVALID_HID, fapl = H5I_INVALID_HID;
    if (!in) return drift_err_set(err, DRIFT_E_NOMEM, o->out, "out of memory");
    char out_dir[IX_PATH_MAX], out_real[PATH_MAX];
    {
        char d[IX_PATH_MAX];
        if (abs_dir_of(o->out, d, sizeof d) != 0 || !realpath(d, out_dir)) {
            rc = drift_err_set(err, DRIFT_E_IO, o->out, "the output's directory does not exist or is not accessible");
            goto done;
        }
        const char *base = strrchr(o->out, '/') ? strrchr(o->out, '/') + 1 : o->out;
        if (!base[0] || (size_t)snprintf(out_real, sizeof out_real, "%s/%s", strcmp(out_dir, "/") ? out_dir : "", base) >=
                             sizeof out_real) {
            rc = drift_err_set(err, DRIFT_E_USAGE, o->out, "expected a file name for the index");
            goto done;
        }
    }
    for (size_t i = 0; i < o->n_inputs; i++) {
        in[i].path = o->inputs[i];
        const int is_index = index_probe(in[i].path);
        if (is_index != 0) {
            rc = is_index < 0 ? drift_err_set(err, DRIFT_E_NOMEM, in[i].path, "out of memory")
                              : drift_err_set(err, DRIFT_E_INPUT, in[i].path, "is a drift index, expected a rank trace");
            goto done;
        }
        if ((rc = drift_trace_reader_open(&in[i].r, in[i].path, DRIFT_TRACE_OPEN_NORMAL, err))) goto done;
        if (drift_trace_reader_unclean(in[i].r)) {
            rc = drift_err_set(err, DRIFT_E_INPUT, in[i].path,
                               "not closed cleanly (its writer is still running or was killed): merge it once the "
                               "writer has finished, or after drift check --repair");
            goto done;
        }
        if (!realpath(in[i].path, in[i].real)) {
            rc = drift_err_set(err, DRIFT_E_IO, in[i].path, "cannot resolve the path: %s", strerror(errno));
            goto done;
        }
        if (strcmp(in[i].real, out_real) == 0) {
            rc = drift_err_set(err, DRIFT_E_USAGE, in[i].path, "is also the output (-o)");
            goto done;
        }
        if (!outside_allowed() && !inside_index_dir(o->out, in[i].real)) {
            rc = drift_err_set(err, DRIFT_E_USAGE, in[i].path,
                               "lies outside the index's folder: an index reads only rank files in its own folder "
                               "(or below); write the index beside its rank files, or pass --allow-outside");
            goto done;
        }
        const drift_trace_meta *m = drift_trace_reader_meta(in[i].r), *m0 = drift_trace_reader_meta(in[0].r);
        in[i].rank = m->rank;
        char w[700];
        snprintf(w, sizeof w, "%s:/", in[i].path);
        if (m->format_version != m0->format_version) {
            rc = drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"format_version\" is %d, %s has %d", m->format_version,
                               in[0].path, m0->format_version);
            goto done;
        }
        if (strcmp(m->run_id, m0->run_id) != 0) {
            rc = drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"run_id\" is \"%s\", %s has \"%s\": not the same run",
                               m->run_id, in[0].path, m0->run_id);
            goto done;
        }
        if (m->world_size != m0->world_size) {
            rc = drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"world_size\" is %d, %s has %d", (int)m->world_size,
                               in[0].path, (int)m0->world_size);
            goto done;
        }
        if (m->side != m0->side) {
            rc = drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"side\" is \"%s\", %s has \"%s\": merge one side at a time",
                               drift_trace_side_name(m->side), in[0].path, drift_trace_side_name(m0->side));
            goto done;
        }
        if (!o->allow_mismatch && (rc = ranks_agree(&in[i], &in[0], w, err))) goto done;
    }
    int32_t ws = drift_trace_reader_meta(in[0].r)->world_size;
    seen = drift_calloc((size_t)ws, 1);
    if (!seen) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, o->out, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < o->n_inputs; i++) {
        if (seen[in[i].rank]) {
            size_t j = 0;
            while (j < i && in[j].rank != in[i].rank) j++;
            rc = drift_err_set(err, DRIFT_E_INPUT, in[i].path, "rank %d is also the rank of %s: expected distinct ranks",
                               (int)in[i].rank, in[j].path);
            goto done;
        }
        seen[in[i].rank] = 1;
    }
    size_t n_missing = 0;
    char missing[400] = "";
    for (int32_t k = 0; k < ws; k++)
        if (!seen[k]) {
            size_t l = strlen(missing);
            if (n_missing < 16) snprintf(missing + l, sizeof missing - l, "%s%d", n_missing ? ", " : "", (int)k);
            else if (n_missing == 16) snprintf(missing + l, sizeof missing - l, ", ...");
            n_missing++;
        }
    if (n_missing && !o->allow_missing) {
        rc = drift_err_set(err, DRIFT_E_INPUT, in[0].path,
                           "run \"%s\" has world size %d but %zu rank(s) have no input: %s (pass every rank file, or "
                           "--allow-missing)",
                           drift_trace_reader_meta(in[0].r)->run_id, (int)ws, n_missing, missing);
        goto done;
    }
    qsort(in, o->n_inputs, sizeof *in, cmp_input_rank);

    /* write a temporary sibling, then rename over the output */
    if ((rc = drift_outpath_check(out_real, 1, err)) || (rc = drift_outpath_open(&op, out_real, err))) goto done;
    close(op.fd); /* created O_EXCL|O_NOFOLLOW by us; HDF5 opens it by name */
    op.fd = -1;
    tmp = op.tmp;
    if ((fapl = fapl_latest()) < 0 || (f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl)) < 0) {
        rc = tr_h5_fail(err, DRIFT_E_IO, tmp, "/", "cannot create the index");
        goto done;
    }
    const drift_trace_meta *m0 = drift_trace_reader_meta(in[0].r);
    char created[32];
    now_iso(created, sizeof created);
    char producer[64];
    snprintf(producer, sizeof producer, "drift %s", DRIFT_VERSION);
    hid_t rg = H5Gcreate2(f, IX_RANKS, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (rg < 0 || tr_write_attr_str(f, "format", DRIFT_TRACE_INDEX_FORMAT_NAME) != 0 ||
        tr_write_attr_i64(f, "index_version", DRIFT_TRACE_INDEX_VERSION) != 0 ||
        tr_write_attr_i64(f, "format_version", m0->format_version) != 0 ||
        tr_write_attr_str(f, "run_id", m0->run_id) != 0 ||
        tr_write_attr_str(f, "side", drift_trace_side_name(m0->side)) != 0 ||
        tr_write_attr_i64(f, "world_size", ws) != 0 || tr_write_attr_i64(f, "n_ranks", (int64_t)o->n_inputs) != 0 ||
        tr_write_attr_str(f, "producer", producer) != 0 || tr_write_attr_str(f, "created", created) != 0) {
        if (rg >= 0) H5Gclose(rg);
        rc = tr_h5_fail(err, DRIFT_E_IO, tmp, "/", "cannot write the index's root attributes");
        goto done;
    }
    H5Gclose(rg);
    for (size_t i = 0; i < o->n_inputs && !rc; i++) rc = merge_rank(f, out_dir, &in[i], err);
    if (rc) goto done;
    if (tr_h5_close_file(f) < 0) {
        f = H5I_INVALID_HID;
        rc = tr_h5_fail(err, DRIFT_E_IO, tmp, "/", "cannot close the index");
        goto done;
    }
    f = H5I_INVALID_HID;
    tmp = NULL;
    rc = drift_outpath_commit(&op, 1, err);
done:
    hclose_any(&f);
    hclose_any(&fapl);
    if (tmp) drift_outpath_abort(&op);
    free(seen);
    for (size_t i = 0; i < o->n_inputs; i++) drift_trace_reader_close(in[i].r);
    free(in);
    return rc;
}

/* ======================================================================= */
/* Reading                                                                   */
/* ======================================================================= */

/* 1 if f is a drift merge index, 0 if not, -1 if out of memory (an
 * allocation failure must not read as "not an index"). */
static int is_index_file(hid_t f) {
    char *s = NULL;
    if (H5Aexists(f, "format") <= 0) return 0;
    int rc = tr_read_attr_str(f, "format", 64, &s, "", "", NULL);
    if (rc == DRIFT_E_NOMEM) return -1;
    if (rc != DRIFT_OK) return 0;
    int is = strcmp(s, DRIFT_TRACE_INDEX_FORMAT_NAME) == 0;
    drift_free(s);
    return is;
}

/* 1 if path is an index, 0 if not, -1 when memory ran out deciding. */
static int index_probe(const char *path) {
    tr_h5_quiet();
    if (!path || access(path, R_OK) != 0 || tr_guard_superblock(path, NULL) || H5Fis_hdf5(path) <= 0) return 0;
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return 0;
    int is = is_index_file(f);
    H5Fclose(f);
    return is;
}

int drift_trace_index_is(const char *path) { return index_probe(path) > 0; }

/* Splits "INDEX#rank=N" when no file of that literal name exists; *rank = -1
 * (and base = path) otherwise. Returns 0, or -1 when the suffix is malformed. */
static int split_rank(const char *path, char *base, size_t basesz, long *rank) {
    *rank = -1;
    snprintf(base, basesz, "%s", path);
    const char *h = strstr(path, DRIFT_TRACE_INDEX_RANK_SUFFIX);
    if (!h || access(path, F_OK) == 0) return 0;
    const char *num = h + strlen(DRIFT_TRACE_INDEX_RANK_SUFFIX);
    char *end = NULL;
    errno = 0;
    long v = strtol(num, &end, 10);
    if (errno || end == num || *end || v < 0 || v >= 1000000) return -1;
    size_t n = (size_t)(h - path);
    if (n >= basesz) return -1;
    memcpy(base, path, n);
    base[n] = '\0';
    *rank = v;
    return 0;
}

/* The lowest rank present under /ranks; -1 if none. */
static long lowest_rank(hid_t f) {
    hid_t g = H5Gopen2(f, IX_RANKS, H5P_DEFAULT);
    if (g < 0) return -1;
    H5G_info_t gi;
    long best = -1;
    if (H5Gget_info(g, &gi) >= 0)
        for (hsize_t i = 0; i < gi.nlinks && i < 1000000; i++) {
            char name[32];
            ssize_t nl = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_NATIVE, i, name, sizeof name, H5P_DEFAULT);
            char *end = NULL;
            long v = nl > 0 && (size_t)nl < sizeof name ? strtol(name, &end, 10) : -1;
            if (end && !*end && v >= 0 && (best < 0 || v < best)) best = v;
        }
    H5Gclose(g);
    return best;
}

/* Resolves the recorded source of a rank group against the index's dir. */
static int resolve_source(const char *index_path, const char *recorded, char *out, size_t outsz) {
    if (recorded[0] == '/') return (size_t)snprintf(out, outsz, "%s", recorded) < outsz ? 0 : -1;
    char dir[IX_PATH_MAX];
    if (abs_dir_of(index_path, dir, sizeof dir) != 0) return -1;
    return (size_t)snprintf(out, outsz, "%s/%s", strcmp(dir, "/") ? dir : "", recorded) < outsz ? 0 : -1;
}

/* Compares a root attribute of the rank file with the index's copy: 1 same,
 * 0 different, -1 out of memory. */
static int same_attr(hid_t a, hid_t b, const char *name, char *va, char *vb, size_t sz) {
    const int ra = attr_str_opt(a, name, va, sz), rb = ra == -2 ? -2 : attr_str_opt(b, name, vb, sz);
    if (ra == -2 || rb == -2) return -1;
    if (ra == 0 && rb == 0) return strcmp(va, vb) == 0;
    int64_t x = 0, y = 0;
    if (tr_read_attr_i64(a, name, &x, "", "", NULL) == 0 && tr_read_attr_i64(b, name, &y, "", "", NULL) == 0) {
        snprintf(va, sz, "%lld", (long long)x);
        snprintf(vb, sz, "%lld", (long long)y);
        return x == y;
    }
    snprintf(va, sz, "?");
    snprintf(vb, sz, "?");
    return 0;
}

/* Builds the view of rank `rank` (-1: the lowest) of the index at base;
 * *view gets a read-only file id. label names the view in messages. */
static int open_view(const char *base, long rank, const char *label, hid_t *view, drift_err *err) {
    int rc = DRIFT_OK;
    hid_t idx = H5I_INVALID_HID, g = H5I_INVALID_HID, src = H5I_INVALID_HID, vf = H5I_INVALID_HID;
    hid_t fapl = H5I_INVALID_HID;
    char tmpl[IX_PATH_MAX] = "";
    int fd = -1;
    *view = H5I_INVALID_HID;
    char w[IX_PATH_MAX];
    where2(w, sizeof w, base, "/");
    if ((rc = tr_guard_superblock(base, err))) goto done;
    if ((idx = H5Fopen(base, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0) {
        rc = tr_h5_fail(err, access(base, R_OK) ? DRIFT_E_IO : DRIFT_E_INPUT, base, "/", "cannot open the index");
        goto done;
    }
    const int is_idx = is_index_file(idx);
    if (is_idx < 0) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, w, "out of memory");
        goto done;
    }
    if (is_idx == 0) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "not a drift index (root attribute \"format\" is not \"%s\"): '%s' "
                           "selects a rank of an index written by drift merge", DRIFT_TRACE_INDEX_FORMAT_NAME,
                           DRIFT_TRACE_INDEX_RANK_SUFFIX "N");
        goto done;
    }
    int64_t ver = 0, ws = 0;
    if ((rc = tr_read_attr_i64(idx, "index_version", &ver, base, "/", err))) goto done;
    if (ver != DRIFT_TRACE_INDEX_VERSION) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"index_version\" is %lld, this build reads version %d",
                           (long long)ver, DRIFT_TRACE_INDEX_VERSION);
        goto done;
    }
    if ((rc = tr_read_attr_i64(idx, "world_size", &ws, base, "/", err))) goto done;
    if (rank < 0 && (rank = lowest_rank(idx)) < 0) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "the index holds no rank");
        goto done;
    }
    char gname[48];
    snprintf(gname, sizeof gname, "%s/%ld", IX_RANKS, rank);
    if (H5Lexists(idx, IX_RANKS, H5P_DEFAULT) <= 0 || H5Lexists(idx, gname, H5P_DEFAULT) <= 0 ||
        (g = H5Gopen2(idx, gname, H5P_DEFAULT)) < 0) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "rank %ld is not in the index (world size %lld%s; drift ls %s lists "
                           "the ranks it holds)", rank, (long long)ws, rank < ws ? ", missing at merge time" : "", base);
        goto done;
    }
    char recorded[IX_PATH_MAX], resolved[IX_PATH_MAX], recesc[2 * IX_PATH_MAX + 2], absesc[2 * IX_PATH_MAX + 2];
    const int src_rc = attr_str_opt(g, IX_SOURCE_ATTR, recorded, sizeof recorded);
    if (src_rc == -2) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, w, "out of memory");
        goto done;
    }
    if (src_rc != 0 || !recorded[0] ||
        resolve_source(base, recorded, resolved, sizeof resolved) != 0 ||
        pct_escape(recorded, recesc, sizeof recesc) != 0 || pct_escape(resolved, absesc, sizeof absesc) != 0) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "%s: attribute \"%s\": expected the rank file's path", gname,
                           IX_SOURCE_ATTR);
        goto done;
    }
    if (access(resolved, R_OK) != 0) {
        rc = drift_err_set(err, DRIFT_E_IO, label,
                           "rank %ld's source file %s (recorded as \"%s\") is missing or unreadable: the index reads "
                           "rank %ld from it (restore the file, or re-run drift merge)",
                           rank, resolved, recorded, rank);
        goto done;
    }
    if (!outside_allowed() && !inside_index_dir(base, resolved)) {
        rc = drift_err_set(err, DRIFT_E_INPUT, label,
                           "%s: attribute \"%s\" names %s (recorded as \"%s\"), outside the index's folder: drift "
                           "opens only the index's own rank files " TR_POLICY " (--allow-outside, or "
                           "DRIFT_INDEX_ALLOW_OUTSIDE=1, accepts it)",
                           gname, IX_SOURCE_ATTR, resolved, recorded);
        goto done;
    }
    if ((rc = tr_guard_superblock(resolved, err))) goto done;
    if ((src = H5Fopen(resolved, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0) {
        char h5[400];
        tr_h5_msg(h5, sizeof h5);
        rc = drift_err_set(err, DRIFT_E_INPUT, label,
                           "rank %ld's source file %s cannot be opened (%s): not an HDF5 file any more, or being "
                           "written (merge reads closed files only)",
                           rank, resolved, h5[0] ? h5 : "unknown HDF5 error");
        goto done;
    }
    {
        char want[64] = "", got[17] = "";
        const int arc = attr_str_opt(g, IX_DIGEST_ATTR, want, sizeof want);
        if (arc == -2) {
            rc = drift_err_set(err, DRIFT_E_NOMEM, label, "out of memory");
            goto done;
        }
        if (arc != 0 || !want[0]) {
            rc = drift_err_set(err, DRIFT_E_INPUT, label,
                               "%s: no attribute \"%s\" (an index written before drift identified rank files by "
                               "content): re-run drift merge",
                               gname, IX_DIGEST_ATTR);
            goto done;
        }
        if ((rc = source_digest(src, resolved, got, err))) goto done;
        if (strcmp(want, got) != 0) {
            rc = drift_err_set(err, DRIFT_E_INPUT, label,
                               "rank %ld's source file %s changed since the merge: its content digest is %s, the index "
                               "recorded %s (re-run drift merge)",
                               rank, resolved, got, want);
            goto done;
        }
    }
    static const char *const same[] = {"format", "run_id", "rank", "side", "created"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        char va[256], vb[256];
        const int same_rc = same_attr(src, g, same[i], va, vb, sizeof va);
        if (same_rc < 0) {
            rc = drift_err_set(err, DRIFT_E_NOMEM, label, "out of memory");
            goto done;
        }
        if (!same_rc) {
            rc = drift_err_set(err, DRIFT_E_INPUT, label,
                               "rank %ld's source file %s changed since the merge: root attribute \"%s\" is \"%s\", "
                               "the index recorded \"%s\" (re-run drift merge)",
                               rank, resolved, same[i], va, vb);
            goto done;
        }
    }

    /* the view: a private temporary file */
    const char *td = getenv("TMPDIR");
    if (!td || !td[0]) td = "/tmp";
    if ((size_t)snprintf(tmpl, sizeof tmpl, "%s/drift-index-view-XXXXXX", td) >= sizeof tmpl ||
        (fd = mkstemp(tmpl)) < 0) {
        rc = drift_err_set(err, DRIFT_E_IO, td, "cannot create a temporary file for the index view: %s", strerror(errno));
        tmpl[0] = '\0';
        goto done;
    }
    close(fd);
    if ((fapl = fapl_latest()) < 0 || (vf = H5Fcreate(tmpl, H5F_ACC_TRUNC, H5P_DEFAULT, fapl)) < 0) {
        rc = tr_h5_fail(err, DRIFT_E_IO, tmpl, "/", "cannot create the index view");
        goto done;
    }
    if ((rc = copy_attrs(g, vf, base, gname, err))) goto done;
    ix_walk wk = {.merge = 0, .src_label = base, .src_file = src, .src_path = resolved, .vds_expect = recesc,
                  .vds_abs = absesc};
    if ((rc = walk(&wk, g, "", vf, 0, err))) goto done;
    if (tr_h5_close_file(vf) < 0) {
        vf = H5I_INVALID_HID;
        rc = tr_h5_fail(err, DRIFT_E_IO, tmpl, "/", "cannot write the index view");
        goto done;
    }
    vf = H5I_INVALID_HID;
    if ((*view = H5Fopen(tmpl, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0)
        rc = tr_h5_fail(err, DRIFT_E_IO, tmpl, "/", "cannot reopen the index view");
done:
    if (tmpl[0]) unlink(tmpl); /* an open view stays readable through its descriptor */
    hclose_any(&vf);
    hclose_any(&fapl);
    hclose_any(&src);
    hclose_any(&g);
    hclose_any(&idx);
    return rc;
}

int tr_index_reader_open_file(drift_trace_reader *r, drift_err *err) {
    char base[IX_PATH_MAX];
    long rank = -1;
    if (split_rank(r->path, base, sizeof base, &rank) != 0)
        return drift_err_set(err, DRIFT_E_USAGE, r->path, "expected INDEX%sN with 0 <= N < 1000000",
                             DRIFT_TRACE_INDEX_RANK_SUFFIX);
    if (rank >= 0) {
        if (access(base, F_OK) != 0)
            return drift_err_set(err, DRIFT_E_IO, r->path, "cannot open the index %s: no such file", base);
    } else {
        int rc = tr_reader_open_file(r, err);
        if (rc) return rc;
        int is = is_index_file(r->file);
        if (is < 0) return drift_err_set(err, DRIFT_E_NOMEM, r->path, "out of memory");
        if (!is) return DRIFT_OK;
        H5Fclose(r->file);
        r->file = H5I_INVALID_HID;
        r->swmr = r->unclean = 0;
    }
    hid_t v = H5I_INVALID_HID;
    int rc = open_view(base, rank, r->path, &v, err);
    if (rc) return rc;
    r->file = v;
    r->swmr = r->unclean = 0; /* a snapshot: follow mode sees no new steps */
    r->view = 1;              /* its datasets are virtual, over the rank file */
    return DRIFT_OK;
}

/* --- info ------------------------------------------------------------------- */

void drift_trace_index_info_free(drift_trace_index_info *info) {
    if (!info) return;
    free(info->path);
    free(info->run_id);
    free(info->side);
    free(info->created);
    free(info->producer);
    for (size_t i = 0; i < info->n_ranks; i++) {
        if (info->sources) free(info->sources[i]);
        if (info->resolved) free(info->resolved[i]);
    }
    free(info->sources);
    free(info->resolved);
    free(info->ranks);
    free(info->missing);
    memset(info, 0, sizeof *info);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int drift_trace_index_info_read(const char *path, drift_trace_index_info *out, drift_err *err) {
    tr_h5_quiet();
    memset(out, 0, sizeof *out);
    int rc = DRIFT_OK;
    hid_t f = H5I_INVALID_HID, g = H5I_INVALID_HID;
    unsigned char *seen = NULL;
    char w[IX_PATH_MAX];
    where2(w, sizeof w, path, "/");
    int is_idx = 0;
    if ((rc = tr_guard_superblock(path, err))) goto done;
    if ((f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT)) < 0 || (is_idx = is_index_file(f)) <= 0) {
        rc = is_idx < 0 ? drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory")
                        : drift_err_set(err, DRIFT_E_INPUT, path, "not a drift index");
        goto done;
    }
    int64_t ws = 0, fv = 0;
    if ((rc = tr_read_attr_i64(f, "world_size", &ws, path, "/", err)) ||
        (rc = tr_read_attr_i64(f, "format_version", &fv, path, "/", err)))
        goto done;
    if (ws < 1 || ws > 1000000) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"world_size\" is %lld, expected 1..1000000", (long long)ws);
        goto done;
    }
    out->world_size = (int32_t)ws;
    out->format_version = (int)fv;
    if (!(out->path = drift_strdup(path))) goto nomem;
    if ((rc = tr_read_attr_str(f, "run_id", 4096, &out->run_id, path, "/", err)) ||
        (rc = tr_read_attr_str(f, "side", 64, &out->side, path, "/", err)) ||
        (rc = tr_read_attr_str(f, "created", 4096, &out->created, path, "/", err)) ||
        (rc = tr_read_attr_str(f, "producer", 4096, &out->producer, path, "/", err)))
        goto done;
    if ((g = H5Gopen2(f, IX_RANKS, H5P_DEFAULT)) < 0) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "missing group \"%s\"", IX_RANKS);
        goto done;
    }
    H5G_info_t gi;
    if (H5Gget_info(g, &gi) < 0 || gi.nlinks > (hsize_t)ws) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "group \"%s\": expected at most world_size (%lld) ranks", IX_RANKS,
                           (long long)ws);
        goto done;
    }
    size_t n = (size_t)gi.nlinks;
    out->ranks = drift_calloc(n ? n : 1, sizeof *out->ranks);
    out->sources = drift_calloc(n ? n : 1, sizeof *out->sources);
    out->resolved = drift_calloc(n ? n : 1, sizeof *out->resolved);
    seen = drift_calloc((size_t)ws, 1);
    if (!out->ranks || !out->sources || !out->resolved || !seen) goto nomem;
    for (size_t i = 0; i < n; i++) {
        char name[32], *end = NULL;
        ssize_t nl = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_NATIVE, i, name, sizeof name, H5P_DEFAULT);
        long v = nl > 0 && (size_t)nl < sizeof name ? strtol(name, &end, 10) : -1;
        if (!end || *end || v < 0 || v >= ws || seen[v]) {
            rc = drift_err_set(err, DRIFT_E_INPUT, w, "group \"%s\": expected members named 0..%lld", IX_RANKS,
                               (long long)ws - 1);
            goto done;
        }
        seen[v] = 1;
        out->ranks[out->n_ranks++] = (int32_t)v;
    }
    qsort(out->ranks, out->n_ranks, sizeof *out->ranks, cmp_i32);
    for (size_t i = 0; i < out->n_ranks; i++) {
        char gname[32], rec[IX_PATH_MAX], res[IX_PATH_MAX];
        snprintf(gname, sizeof gname, "%d", (int)out->ranks[i]);
        hid_t rg = H5Gopen2(g, gname, H5P_DEFAULT);
        const int src_rc = rg >= 0 ? attr_str_opt(rg, IX_SOURCE_ATTR, rec, sizeof rec) : -1;
        int ok = src_rc == 0 && resolve_source(path, rec, res, sizeof res) == 0;
        if (rg >= 0) H5Gclose(rg);
        if (src_rc == -2) {
            rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
            goto done;
        }
        if (!ok) {
            rc = drift_err_set(err, DRIFT_E_INPUT, w, "%s/%s: attribute \"%s\": expected the rank file's path", IX_RANKS,
                               gname, IX_SOURCE_ATTR);
            goto done;
        }
        if (!(out->sources[i] = drift_strdup(rec)) || !(out->resolved[i] = drift_strdup(res))) goto nomem;
    }
    out->missing = drift_calloc((size_t)ws - out->n_ranks + 1, sizeof *out->missing);
    if (!out->missing) goto nomem;
    for (int64_t k = 0; k < ws; k++)
        if (!seen[k]) out->missing[out->n_missing++] = (int32_t)k;
    goto done;
nomem:
    rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
done:
    free(seen);
    hclose_any(&g);
    hclose_any(&f);
    if (rc) drift_trace_index_info_free(out);
    return rc;
}
