/* The open policy of traces from strangers (docs/RELIABILITY.md, "Traces
 * from strangers"): drift reads only the file it was given. Every object is
 * reached through hard links only (external, soft and user-defined links are
 * refused, never followed), a dataset must keep its bytes in the file
 * (external raw storage and virtual datasets refused, except the virtual
 * datasets of a merge index view), carry only the filters drift writes, have
 * chunks of bounded size, and not be a second name of another dataset. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/trace_internal.h"

/* The filters drift writes (trace_writer.c): shuffle + deflate, blosc. lz4
 * (32004) is accepted too: the recorder documents it as the fast choice. */
static int filter_allowed(H5Z_filter_t id) {
    return id == H5Z_FILTER_SHUFFLE || id == H5Z_FILTER_DEFLATE || id == H5Z_FILTER_FLETCHER32 || id == 32001 ||
           id == 32004;
}

static int guard_ready;

int tr_guard_refused(const drift_err *e) { return e && strstr(e->msg, TR_POLICY) != NULL; }

void tr_guard_init(void) {
    if (guard_ready) return;
    guard_ready = 1;
    tr_h5_quiet();
    /* Backstop for any path that escapes the checks below: with the external
     * link class unregistered, HDF5 cannot traverse an external link at all. */
    H5Lunregister(H5L_TYPE_EXTERNAL);
    /* No plugin directory is searched until a dataset has passed the filter
     * check (tr_guard_dataset turns filter plugins on for blosc/lz4 only). */
    H5PLset_loading_state(0);
}

static const char *link_desc(hid_t loc, const char *name, const H5L_info_t *li, char *buf, size_t sz) {
    if (li->type == H5L_TYPE_SOFT) {
        char val[256] = "";
        if (li->u.val_size <= sizeof val && H5Lget_val(loc, name, val, sizeof val, H5P_DEFAULT) >= 0) {
            val[sizeof val - 1] = '\0';
            snprintf(buf, sz, "a soft link to \"%s\"", val);
        } else {
            snprintf(buf, sz, "a soft link");
        }
    } else if (li->type == H5L_TYPE_EXTERNAL) {
        char val[1024];
        const char *fn = NULL, *on = NULL;
        unsigned fl = 0;
        if (li->u.val_size <= sizeof val && H5Lget_val(loc, name, val, sizeof val, H5P_DEFAULT) >= 0 &&
            H5Lunpack_elink_val(val, li->u.val_size, &fl, &fn, &on) >= 0 && fn && on)
            snprintf(buf, sz, "an external link to %s:%s", fn, on);
        else
            snprintf(buf, sz, "an external link");
    } else {
        snprintf(buf, sz, "a user-defined link (type %d)", (int)li->type);
    }
    return buf;
}

int tr_guard_path(hid_t loc, const char *path, const char *file, const char *obj, drift_err *err) {
    char prefix[1024], w[1500], d[1200];
    size_t n = strlen(path);
    if (n >= sizeof prefix) return drift_err_set(err, DRIFT_E_INPUT, file, "object path of %zu bytes", n);
    for (size_t i = 0; i <= n; i++) {
        if (i < n && path[i] != '/') continue;
        if (i == 0) continue; /* leading '/' of an absolute path */
        memcpy(prefix, path, i);
        prefix[i] = '\0';
        H5L_info_t li;
        htri_t ex = H5Lexists(loc, prefix, H5P_DEFAULT);
        if (ex <= 0) return 0; /* absent: the caller says what was expected */
        if (H5Lget_info(loc, prefix, &li, H5P_DEFAULT) < 0) return 0;
        if (li.type != H5L_TYPE_HARD) {
            snprintf(w, sizeof w, "%s:%s", file ? file : "?", obj && i == n ? obj : prefix);
            return drift_err_set(err, DRIFT_E_INPUT, w,
                                 "%s: drift reads only the file it is given (expected a hard link to an object of this "
                                 "file; the link is not followed) " TR_POLICY,
                                 link_desc(loc, prefix, &li, d, sizeof d));
        }
    }
    return 1;
}

int tr_guard_link_info(hid_t loc, const char *name, const H5L_info_t *li, const char *file, const char *obj,
                       drift_err *err) {
    if (li->type == H5L_TYPE_HARD) return DRIFT_OK;
    char w[1500], d[1200];
    snprintf(w, sizeof w, "%s:%s", file ? file : "?", obj ? obj : name);
    return drift_err_set(err, DRIFT_E_INPUT, w,
                         "%s: drift reads only the file it is given (expected a hard link to an object of this file; "
                         "the link is not followed) " TR_POLICY,
                         link_desc(loc, name, li, d, sizeof d));
}

int tr_guard_dataset(hid_t ds, int allow_virtual, const char *file, const char *obj, drift_err *err) {
    char w[1500];
    snprintf(w, sizeof w, "%s:%s", file ? file : "?", obj ? obj : "?");
    H5O_info_t oi;
    if (H5Oget_info2(ds, &oi, H5O_INFO_BASIC) < 0) return tr_h5_fail(err, DRIFT_E_INPUT, file, obj, "unreadable object");
    if (oi.type != H5O_TYPE_DATASET) return drift_err_set(err, DRIFT_E_INPUT, w, "expected a dataset");
    if (oi.rc != 1)
        return drift_err_set(err, DRIFT_E_INPUT, w,
                             "the dataset has %u hard links, expected 1 (a second name of another object) " TR_POLICY,
                             oi.rc);
    hid_t dcpl = H5Dget_create_plist(ds);
    if (dcpl < 0) return tr_h5_fail(err, DRIFT_E_INPUT, file, obj, "unreadable creation properties");
    int rc = DRIFT_OK, plugin = 0;
    H5D_layout_t lay = H5Pget_layout(dcpl);
    int next = H5Pget_external_count(dcpl);
    int nf = lay == H5D_CHUNKED ? H5Pget_nfilters(dcpl) : 0;
    if (next != 0) {
        char name[256] = "?";
        off_t off = 0;
        hsize_t size = 0;
        if (next > 0) H5Pget_external(dcpl, 0, sizeof name, name, &off, &size);
        name[sizeof name - 1] = '\0';
        rc = drift_err_set(err, DRIFT_E_INPUT, w,
                           "the dataset keeps its bytes in external file \"%s\": drift reads only the file it is given "
                           "(expected the data inside this file) " TR_POLICY,
                           name);
    } else if (lay == H5D_VIRTUAL && !allow_virtual) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w,
                           "a virtual dataset (its elements come from other files): drift reads only the file it is "
                           "given; virtual datasets are accepted only inside a `drift merge` index " TR_POLICY);
    } else if (lay < 0 || nf < 0 || nf > 8) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "unreadable layout or filter pipeline");
    }
    for (int i = 0; !rc && i < nf; i++) {
        unsigned flags = 0, cd[16];
        size_t ncd = 16;
        char nm[64] = "";
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cd, sizeof nm, nm, NULL);
        if (!filter_allowed(id))
            rc = drift_err_set(err, DRIFT_E_INPUT, w,
                               "filter %d (\"%s\") is not one drift writes (expected shuffle, deflate, fletcher32, blosc "
                               "32001 or lz4 32004); no filter plugin is loaded for it " TR_POLICY,
                               (int)id, nm);
        else if (id == 32001 || id == 32004)
            plugin = 1;
    }
    if (!rc && lay == H5D_CHUNKED) {
        hsize_t ch[H5S_MAX_RANK];
        int cr = H5Pget_chunk(dcpl, H5S_MAX_RANK, ch);
        hid_t t = H5Dget_type(ds);
        size_t esz = t >= 0 ? H5Tget_size(t) : 0;
        if (t >= 0) H5Tclose(t);
        int64_t bytes = (int64_t)esz;
        for (int d = 0; d < cr && bytes >= 0; d++)
            if (tr_mul_checked(bytes, (int64_t)ch[d], (int64_t)TR_CHUNK_MAX, &bytes) != 0) bytes = -1;
        if (cr < 1 || esz == 0 || bytes < 0)
            rc = drift_err_set(err, DRIFT_E_INPUT, w, "chunks larger than %lld bytes (expected at most %lld: drift "
                               "writes chunks of at most %lld) " TR_POLICY, (long long)TR_CHUNK_MAX, (long long)TR_CHUNK_MAX,
                               (long long)TR_CHUNK_WRITE_MAX);
    }
    H5Pclose(dcpl);
    if (!rc && plugin) H5PLset_loading_state(H5PL_FILTER_PLUGIN);
    return rc;
}

int tr_open_dataset(hid_t loc, const char *name, int allow_virtual, const char *file, const char *obj, hid_t *out,
                    drift_err *err) {
    *out = H5I_INVALID_HID;
    int ok = tr_guard_path(loc, name, file, obj, err);
    if (ok < 0 || ok == DRIFT_E_INPUT) return DRIFT_E_INPUT;
    if (ok != 1) {
        char w[1500];
        snprintf(w, sizeof w, "%s:%s", file ? file : "?", obj ? obj : name);
        return drift_err_set(err, DRIFT_E_INPUT, w, "missing dataset");
    }
    if ((ok = tr_guard_header(loc, name, allow_virtual, file, obj ? obj : name, err))) return ok;
    hid_t ds = H5Dopen2(loc, name, H5P_DEFAULT); /* fails on a group: then "expected a dataset" */
    if (ds < 0) return tr_h5_fail(err, DRIFT_E_INPUT, file, obj ? obj : name, "expected a dataset");
    int rc = tr_guard_dataset(ds, allow_virtual, file, obj ? obj : name, err);
    if (rc) {
        H5Dclose(ds);
        return rc;
    }
    *out = ds;
    return DRIFT_OK;
}

int tr_open_group(hid_t loc, const char *name, const char *file, const char *obj, hid_t *out, drift_err *err) {
    *out = H5I_INVALID_HID;
    char w[1500];
    snprintf(w, sizeof w, "%s:%s", file ? file : "?", obj ? obj : name);
    int ok = tr_guard_path(loc, name, file, obj, err);
    if (ok == DRIFT_E_INPUT) return DRIFT_E_INPUT;
    if (ok != 1) return drift_err_set(err, DRIFT_E_INPUT, w, "missing group");
    if ((ok = tr_guard_group_header(loc, name, file, obj ? obj : name, err))) return ok;
    H5O_info_t oi;
    if (H5Oget_info_by_name2(loc, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0 || oi.type != H5O_TYPE_GROUP)
        return drift_err_set(err, DRIFT_E_INPUT, w, "expected a group, found another kind of object");
    if (oi.rc != 1)
        return drift_err_set(err, DRIFT_E_INPUT, w, "the group has %u hard links, expected 1 " TR_POLICY, oi.rc);
    hid_t g = H5Gopen2(loc, name, H5P_DEFAULT);
    if (g < 0) return tr_h5_fail(err, DRIFT_E_INPUT, file, obj ? obj : name, "unreadable group");
    *out = g;
    return DRIFT_OK;
}

int tr_guard_rows(int64_t rows, size_t row_bytes, int64_t file_bytes, const char *file, const char *obj,
                  drift_err *err) {
    int64_t need = 0;
    /* A table's rows lie in the file (drift never compresses tables); one
     * chunk of slack covers a row extended but not yet written by a killed
     * writer. A table extended far past what the file holds is refused
     * before its rows are read. */
    if (file_bytes <= 0) return DRIFT_OK;
    if (tr_mul_checked(rows, (int64_t)row_bytes, (int64_t)1 << 62, &need) != 0 || need > file_bytes + TR_ROWS_SLACK) {
        char w[1500];
        snprintf(w, sizeof w, "%s:%s", file ? file : "?", obj ? obj : "?");
        return drift_err_set(err, DRIFT_E_INPUT, w,
                             "%lld rows of %zu bytes declared, the file holds %lld bytes (expected rows that are "
                             "actually stored: the table was extended without being written) " TR_POLICY,
                             (long long)rows, row_bytes, (long long)file_bytes);
    }
    return DRIFT_OK;
}

/* After a failed H5Fclose, HDF5 keeps a half-closed file in its identifier
 * table, and its exit cleanup (H5_term_library, run by atexit) closes it
 * again and crashes in H5F__close_cb. drift_trace_process_init turns that
 * cleanup into one that is skipped once a close has failed. */
static int close_failed;

herr_t tr_h5_close_file(hid_t f) {
    herr_t e = H5Fclose(f);
    if (e < 0) close_failed = 1;
    return e;
}

static void process_exit(void) {
    if (!close_failed) H5close(); /* orderly: nothing half-closed is left */
}

void drift_trace_process_init(void) {
    static int done;
    if (done) return;
    done = 1;
    if (H5dont_atexit() >= 0) atexit(process_exit); /* fails when HDF5 is already initialised: then nothing changes */
}
