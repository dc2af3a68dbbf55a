/* Trace writer: creates the schema v1 file, declares everything a live
 * reader must see, enters SWMR and appends records, metrics and commit rows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <unistd.h>
#include <sys/stat.h>

#include "formats/alloc.h"
#include "formats/outpath.h"
#include "formats/trace_internal.h"

typedef struct w_site {
    char *name;
    drift_dtype dtype;
    int ndim;
    int64_t shape[DRIFT_MAX_DIMS];
    int64_t numel;
    int store;
    hid_t grp, data, index, stats, ftype;
    int64_t rows;
} w_site;

struct drift_trace_writer {
    char *path;                 /* the name asked for (messages, the final name) */
    char *tmp;                  /* the name written while path exists (renamed on success), or NULL */
    drift_outpath out;          /* owns tmp (formats/outpath.h) */
    int lock_fd;                /* the writer lock (trace_lock.c), -1 */
    int fresh;                  /* path did not exist and was created under its own name */
    hid_t file, g_sites, g_params, g_buffers, g_metrics;
    int started, broken, failed; /* failed: the failed state is in /status */
    int64_t first_step;         /* the first committed step, when last_step >= 0 */
    w_site *sites;
    size_t n_sites, cap_sites;
    hid_t steps, mrows, msteps, mnames, notes;
    int64_t n_steps, n_mrows, n_msteps, n_mnames, n_notes;
    char **names; /* metrics site names, in row order */
    size_t cap_names;
    tr_param_dtype_row *pdt;
    size_t n_pdt, cap_pdt;
    int64_t last_step; /* last committed, -1 */
    int pending;
    int64_t pending_step, pending_records;
    tr_io io;                   /* memory types and transfer list, built once */
    size_t name_hint;           /* next metrics name row expected */
    hid_t status;               /* /status: a string overwritten in place (see set_status) */
    int status_custom;          /* set_status was called: close leaves the text alone */
    hid_t gsteps;               /* /graph_steps (reserve_step_graphs), or invalid */
    int64_t gsteps_bytes;       /* its extent */
    int64_t (*gk)[2];           /* per-step graph k (1-based): {offset, length} in /graph_steps */
    int64_t n_gk;
};

static const char *wpath(const drift_trace_writer *w) { return w && w->path ? w->path : "?"; }

static int write_status(hid_t d, const char *text);

/* "failed at step S: REASON; steps A..L are committed" (or "no step was
 * committed"): the failed state, one sentence, in out. */
static void failed_text(const drift_trace_writer *w, const char *reason, char *out, size_t sz) {
    long long at = w->pending ? (long long)w->pending_step : (long long)w->last_step + 1;
    if (at < 0) at = 0;
    long long first = w->first_step;
    char tail[96];
    if (w->last_step < 0) snprintf(tail, sizeof tail, "no step was committed");
    else if (first == w->last_step) snprintf(tail, sizeof tail, "step %lld is committed", first);
    else snprintf(tail, sizeof tail, "steps %lld..%lld are committed", first, (long long)w->last_step);
    snprintf(out, sz, "failed at step %lld: %s; %s", at, reason, tail);
}

/* Records the failed state in /status (overwritten in place: it needs no new
 * space, so it is written on a full disk too) and stops the writer. */
static void mark_failed(drift_trace_writer *w, const char *reason) {
    if (!w || !w->started || w->failed) return;
    char text[DRIFT_TRACE_STATUS_MAX];
    failed_text(w, reason, text, sizeof text);
    w->broken = w->failed = 1;
    if (w->status >= 0 && !w->status_custom && write_status(w->status, text) == 0) H5Dflush(w->status);
}

static int wfail(drift_trace_writer *w, drift_err *err, const char *obj, const char *what) {
    if (!w || !w->started) return tr_h5_fail(err, DRIFT_E_IO, wpath(w), obj, what);
    /* a write error of a started writer: the system's words, never HDF5's internals */
    char h5[400], reason[600], text[DRIFT_TRACE_STATUS_MAX];
    tr_h5_msg(h5, sizeof h5);
    if (h5[0]) snprintf(reason, sizeof reason, "%s: %s", what, h5);
    else snprintf(reason, sizeof reason, "%s", what);
    failed_text(w, reason, text, sizeof text);
    mark_failed(w, reason); /* the file may be half-updated: stop appending */
    return drift_err_set(err, DRIFT_E_IO, wpath(w), "recording %s and stay readable", text);
}

int drift_trace_writer_fail(drift_trace_writer *w, const char *reason) {
    if (!w) return DRIFT_OK;
    mark_failed(w, reason && *reason ? reason : "the producer stopped");
    w->broken = 1; /* not started: nothing to record, and close keeps nothing */
    return DRIFT_OK;
}

static void hclose(hid_t *h, herr_t (*fn)(hid_t)) {
    if (*h >= 0) fn(*h);
    *h = H5I_INVALID_HID;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int check_phase(drift_trace_writer *w, int want_started, const char *fn, drift_err *err) {
    if (!w) return drift_err_set(err, DRIFT_E_INTERNAL, NULL, "%s: NULL writer", fn);
    if (w->broken)
        return drift_err_set(err, DRIFT_E_IO, w->path, "%s: the writer failed earlier; only close is allowed", fn);
    if (want_started && !w->started)
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "%s: call drift_trace_writer_start first", fn);
    if (!want_started && w->started)
        return drift_err_set(err, DRIFT_E_USAGE, w->path,
                             "%s: only allowed before drift_trace_writer_start (SWMR needs every dataset "
                             "declared before it starts)",
                             fn);
    return DRIFT_OK;
}

static int check_shape(drift_trace_writer *w, const char *what, int ndim, const int64_t *shape, int64_t *numel,
                       drift_err *err) {
    if (ndim < 0 || ndim > DRIFT_MAX_DIMS || (ndim > 0 && !shape))
        return drift_err_set(err, DRIFT_E_USAGE, wpath(w), "%s: ndim %d, expected 0..%d", what, ndim,
                             DRIFT_MAX_DIMS);
    if (tr_numel(ndim, shape, numel) != 0)
        return drift_err_set(err, DRIFT_E_USAGE, wpath(w),
                             "%s: expected dimensions in 1..2^40 and at most 2^48 elements", what);
    return DRIFT_OK;
}

/* ---------------------------------------------------------------------- */
int drift_trace_writer_create(drift_trace_writer **out, const char *path, const drift_trace_meta *meta,
                              drift_err *err) {
    tr_h5_quiet();
    if (!out || !path || !meta) return drift_err_set(err, DRIFT_E_INTERNAL, NULL, "writer_create: NULL argument");
    *out = NULL;
    if (drift_trace_side_name(meta->side)[0] == 'i')
        return drift_err_set(err, DRIFT_E_USAGE, path, "side %d: expected trainer, rollout or replay",
                             (int)meta->side);
    if (meta->plan_json && strlen(meta->plan_json) >= DRIFT_TRACE_ATTR_MAX)
        return drift_err_set(err, DRIFT_E_USAGE, path, "plan JSON longer than %u bytes", DRIFT_TRACE_ATTR_MAX);
    drift_trace_writer *w = drift_calloc(1, sizeof *w);
    if (!w) return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
    w->file = w->g_sites = w->g_params = w->g_buffers = w->g_metrics = H5I_INVALID_HID;
    w->steps = w->mrows = w->msteps = w->mnames = w->notes = H5I_INVALID_HID;
    w->status = w->gsteps = H5I_INVALID_HID;
    w->last_step = -1;
    w->lock_fd = -1;
    w->path = drift_strdup(path);
    if (tr_io_init(&w->io) != 0) {
        free(w->path);
        free(w);
        return tr_h5_fail(err, DRIFT_E_IO, path, "/", "cannot build the row types");
    }
    int rc = DRIFT_OK;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), fcpl = H5I_INVALID_HID;
    if (!w->path || fapl < 0) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
        goto fail;
    }
    if (H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST) < 0) {
        rc = wfail(w, err, "/", "cannot set libver bounds");
        goto fail;
    }
    /* Paged file-space aggregation: no metadata block crosses a 4 KiB page,
     * so a write(2) that a SIGKILL cuts short at a page boundary cannot tear
     * an object header half new, half old (which made a killed trace
     * unreadable as a whole in about 1 of 200-600 kill trials). */
    fcpl = H5Pcreate(H5P_FILE_CREATE);
    if (fcpl < 0 || H5Pset_file_space_strategy(fcpl, H5F_FSPACE_STRATEGY_PAGE, 0, 1) < 0 ||
        H5Pset_file_space_page_size(fcpl, 4096) < 0) {
        rc = wfail(w, err, "/", "cannot set paged file-space aggregation");
        goto fail;
    }
    /* Exclusive: the lock first, so that nothing is created or truncated
     * while another writer has the trace. An existing file is never
     * truncated: the trace is written under a temporary name and renamed
     * over it on a clean close; a new one is created under its own name
     * (a live reader can follow it) and removed if nothing was committed. */
    if ((rc = tr_lock_take(path, &w->lock_fd, err))) goto fail;
    struct stat st;
    w->out.fd = -1;
    if (lstat(path, &st) == 0) {
        /* only a regular file is replaced (never a device, FIFO or link) */
        if ((rc = drift_outpath_check(path, 1, err)) || (rc = drift_outpath_open(&w->out, path, err))) goto fail;
        close(w->out.fd); /* created O_EXCL|O_NOFOLLOW by us; HDF5 opens it by name */
        w->out.fd = -1;
        w->tmp = w->out.tmp;
        w->file = H5Fcreate(w->tmp, H5F_ACC_TRUNC, fcpl, fapl);
    } else {
        w->fresh = 1;
        w->file = H5Fcreate(path, H5F_ACC_EXCL, fcpl, fapl);
    }
    if (w->file < 0) {
        rc = wfail(w, err, "/", "cannot create the trace file");
        if (w->fresh) w->fresh = access(path, F_OK) == 0 ? 1 : 0;
        goto fail;
    }
    char created[64];
    time_t t = time(NULL);
    struct tm tmv;
    gmtime_r(&t, &tmv);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tmv);
    char producer[64];
    snprintf(producer, sizeof producer, "drift %s", DRIFT_VERSION);
    if (tr_write_attr_str(w->file, "format", DRIFT_TRACE_FORMAT_NAME) || tr_write_attr_i64(w->file, "format_version", DRIFT_TRACE_FORMAT_VERSION) ||
        tr_write_attr_str(w->file, "side", drift_trace_side_name(meta->side)) ||
        tr_write_attr_str(w->file, "run_id", meta->run_id) || tr_write_attr_i64(w->file, "rank", meta->rank) ||
        tr_write_attr_i64(w->file, "world_size", meta->world_size) ||
        tr_write_attr_str(w->file, "family", meta->family) ||
        tr_write_attr_f64(w->file, "guidance_scale", meta->guidance_scale) ||
        tr_write_attr_str(w->file, "plan", meta->plan_json) ||
        tr_write_attr_str(w->file, "producer", meta->producer ? meta->producer : producer) ||
        tr_write_attr_str(w->file, "created", created)) {
        rc = wfail(w, err, "/", "cannot write root attributes");
        goto fail;
    }
    w->g_sites = H5Gcreate2(w->file, TR_SITES, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    w->g_params = H5Gcreate2(w->file, TR_PARAMS, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    w->g_buffers = H5Gcreate2(w->file, TR_BUFFERS, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    w->g_metrics = H5Gcreate2(w->file, TR_METRICS, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (w->g_sites < 0 || w->g_params < 0 || w->g_buffers < 0 || w->g_metrics < 0) {
        rc = wfail(w, err, "/", "cannot create groups");
        goto fail;
    }
    H5Pclose(fapl);
    H5Pclose(fcpl);
    *out = w;
    return DRIFT_OK;
fail:
    if (fapl >= 0) H5Pclose(fapl);
    if (fcpl >= 0) H5Pclose(fcpl);
    drift_trace_writer_close(w, NULL);
    return rc;
}

/* ---------------------------------------------------------------------- */
static hid_t create_data(drift_trace_writer *w, w_site *s, drift_trace_compress compress, const char *obj,
                         drift_err *err, int *rc) {
    hsize_t dims[DRIFT_MAX_DIMS + 1], maxd[DRIFT_MAX_DIMS + 1], chunk[DRIFT_MAX_DIMS + 1];
    size_t esz = drift_dtype_size(s->dtype);
    int64_t rec_bytes = s->numel * (int64_t)esz;
    int64_t k = TR_DATA_CHUNK_BYTES / (rec_bytes > 0 ? rec_bytes : 1);
    if (k < 1) k = 1;
    if (k > 1024) k = 1024;
    dims[0] = 0;
    maxd[0] = H5S_UNLIMITED;
    chunk[0] = (hsize_t)k;
    for (int d = 0; d < s->ndim; d++) dims[d + 1] = maxd[d + 1] = chunk[d + 1] = (hsize_t)s->shape[d];
    /* A record above TR_CHUNK_WRITE_MAX is split into chunks along its
     * leading dimensions: readers refuse chunks above TR_CHUNK_MAX (a chunk
     * is decompressed whole). */
    int64_t cbytes = rec_bytes;
    for (int d = 1; d <= s->ndim && cbytes > TR_CHUNK_WRITE_MAX; d++) {
        int64_t inner = cbytes / (int64_t)chunk[d]; /* bytes of one slice along d */
        int64_t keep = inner > 0 ? TR_CHUNK_WRITE_MAX / inner : 1;
        if (keep < 1) keep = 1;
        if (keep < (int64_t)chunk[d]) chunk[d] = (hsize_t)keep;
        cbytes = inner * (int64_t)chunk[d];
    }
    hid_t sp = H5Screate_simple(s->ndim + 1, dims, maxd), dcpl = H5Pcreate(H5P_DATASET_CREATE), ds = -1;
    if (sp < 0 || dcpl < 0 || H5Pset_chunk(dcpl, s->ndim + 1, chunk) < 0) {
        *rc = wfail(w, err, obj, "cannot set up the data dataset");
        goto done;
    }
    if (compress == DRIFT_TRACE_COMPRESS_DEFLATE) {
        if (H5Pset_shuffle(dcpl) < 0 || H5Pset_deflate(dcpl, 1) < 0) {
            *rc = wfail(w, err, obj, "cannot set deflate");
            goto done;
        }
    } else if (compress == DRIFT_TRACE_COMPRESS_BLOSC) {
        /* blosc cd_values: 4 reserved, level 5, shuffle 1, compressor 1 (lz4). */
        unsigned cd[7] = {0, 0, 0, 0, 5, 1, 1};
        if (H5Pset_filter(dcpl, 32001, H5Z_FLAG_OPTIONAL, 7, cd) < 0) {
            *rc = wfail(w, err, obj, "cannot set the blosc filter");
            goto done;
        }
    }
    ds = H5Dcreate2(s->grp, "data", s->ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (ds < 0) *rc = wfail(w, err, obj, "cannot create the data dataset");
done:
    if (sp >= 0) H5Sclose(sp);
    if (dcpl >= 0) H5Pclose(dcpl);
    return ds;
}

int drift_trace_writer_declare_site(drift_trace_writer *w, const drift_trace_site_decl *decl, int *site_id,
                                    drift_err *err) {
    tr_h5_quiet();
    int rc = check_phase(w, 0, "declare_site", err);
    if (rc) return rc;
    if (!decl) return drift_err_set(err, DRIFT_E_INTERNAL, w->path, "declare_site: NULL declaration");
    const char *prob = tr_name_problem(decl->name);
    if (prob) return drift_err_set(err, DRIFT_E_USAGE, w->path, "site name \"%s\": expected %s", decl->name ? decl->name : "", prob);
    if (decl->dtype != DRIFT_F32 && decl->dtype != DRIFT_BF16 && decl->dtype != DRIFT_F16)
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "site \"%s\": dtype %s, expected fp32, bf16 or fp16",
                             decl->name, drift_dtype_name(decl->dtype));
    if ((int)decl->compress < 0 || decl->compress > DRIFT_TRACE_COMPRESS_BLOSC)
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "site \"%s\": unknown compression %d", decl->name,
                             (int)decl->compress);
    if (decl->store_tensors && decl->compress == DRIFT_TRACE_COMPRESS_BLOSC && !drift_trace_blosc_available())
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, w->path,
                             "site \"%s\": blosc compression requested but the HDF5 blosc filter plugin (32001) "
                             "is not available (install hdf5-filter-plugin-blosc-serial or set HDF5_PLUGIN_PATH)",
                             decl->name);
    int64_t numel = 0, bytes = 0;
    rc = check_shape(w, decl->name, decl->ndim, decl->shape, &numel, err);
    if (rc) return rc;
    if (tr_mul_checked(numel, (int64_t)drift_dtype_size(decl->dtype), (int64_t)DRIFT_TRACE_READ_MAX, &bytes) != 0)
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "site \"%s\": a record of %lld elements exceeds %llu bytes",
                             decl->name, (long long)numel, (unsigned long long)DRIFT_TRACE_READ_MAX);
    for (size_t i = 0; i < w->n_sites; i++)
        if (strcmp(w->sites[i].name, decl->name) == 0)
            return drift_err_set(err, DRIFT_E_USAGE, w->path, "site \"%s\" declared twice", decl->name);
    if (w->n_sites >= DRIFT_TRACE_MAX_SITES)
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "more than %d sites", DRIFT_TRACE_MAX_SITES);
    if (w->n_sites == w->cap_sites) {
        size_t nc = w->cap_sites ? w->cap_sites * 2 : 16;
        w_site *ns = drift_realloc(w->sites, nc * sizeof *ns);
        if (!ns) return drift_err_set(err, DRIFT_E_NOMEM, w->path, "out of memory");
        w->sites = ns;
        w->cap_sites = nc;
    }
    w_site *s = &w->sites[w->n_sites];
    memset(s, 0, sizeof *s);
    s->grp = s->data = s->index = s->stats = s->ftype = H5I_INVALID_HID;
    s->name = drift_strdup(decl->name);
    if (!s->name) return drift_err_set(err, DRIFT_E_NOMEM, w->path, "out of memory");
    s->dtype = decl->dtype;
    s->ndim = decl->ndim;
    for (int d = 0; d < decl->ndim; d++) s->shape[d] = decl->shape[d];
    s->numel = numel;
    s->store = decl->store_tensors ? 1 : 0;
    char esc[3 * DRIFT_TRACE_NAME_MAX], obj[3 * DRIFT_TRACE_NAME_MAX + 16];
    tr_escape_name(decl->name, esc, sizeof esc);
    snprintf(obj, sizeof obj, "/sites/%s", esc);
    s->ftype = tr_float_type(s->dtype);
    s->grp = H5Gcreate2(w->g_sites, esc, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (s->ftype < 0 || s->grp < 0) {
        rc = wfail(w, err, obj, "cannot create the site group");
        goto fail;
    }
    if (tr_write_attr_str(s->grp, "name", decl->name) || tr_write_attr_i64(s->grp, "site_id", (int64_t)w->n_sites) ||
        tr_write_attr_str(s->grp, "dtype", drift_dtype_name(s->dtype)) ||
        tr_write_attr_i64v(s->grp, "shape", s->shape, s->ndim)) {
        rc = wfail(w, err, obj, "cannot write site attributes");
        goto fail;
    }
    s->index = tr_create_table(s->grp, "index", TR_T_INDEX, TR_CHUNK_INDEX);
    s->stats = tr_create_table(s->grp, "stats", TR_T_STATS, TR_CHUNK_INDEX);
    if (s->index < 0 || s->stats < 0) {
        rc = wfail(w, err, obj, "cannot create the index/stats tables");
        goto fail;
    }
    if (s->store) {
        s->data = create_data(w, s, decl->compress, obj, err, &rc);
        if (s->data < 0) goto fail;
    }
    if (site_id) *site_id = (int)w->n_sites;
    w->n_sites++;
    return DRIFT_OK;
fail:
    hclose(&s->data, H5Dclose);
    hclose(&s->index, H5Dclose);
    hclose(&s->stats, H5Dclose);
    hclose(&s->grp, H5Gclose);
    hclose(&s->ftype, H5Tclose);
    free(s->name);
    s->name = NULL;
    w->broken = 1; /* a half-created group stays in the file */
    return rc;
}

/* ---------------------------------------------------------------------- */
static int write_array(drift_trace_writer *w, hid_t grp, const char *grpname, const char *name, hid_t ftype,
                       int ndim, const int64_t *shape, const void *data, hid_t *out, drift_err *err) {
    char esc[3 * DRIFT_TRACE_NAME_MAX], obj[3 * DRIFT_TRACE_NAME_MAX + 16];
    tr_escape_name(name, esc, sizeof esc);
    snprintf(obj, sizeof obj, "%s/%s", grpname, esc);
    if (H5Lexists(grp, esc, H5P_DEFAULT) > 0)
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "%s \"%s\" added twice", grpname + 1, name);
    hsize_t dims[DRIFT_MAX_DIMS];
    for (int d = 0; d < ndim; d++) dims[d] = (hsize_t)shape[d];
    hid_t sp = ndim > 0 ? H5Screate_simple(ndim, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t ds = sp >= 0 ? H5Dcreate2(grp, esc, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
    int rc = DRIFT_OK;
    if (ds < 0 || H5Dwrite(ds, ftype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0 ||
        tr_write_attr_str(ds, "name", name) || tr_write_attr_i64v(ds, "shape", shape, ndim)) {
        rc = wfail(w, err, obj, "cannot write the dataset");
        w->broken = 1;
        if (ds >= 0) H5Dclose(ds);
        ds = -1;
    }
    if (sp >= 0) H5Sclose(sp);
    *out = ds;
    return rc;
}

int drift_trace_writer_add_param(drift_trace_writer *w, const char *fqn, int ndim, const int64_t *shape,
                                 const int64_t *offset, const int64_t *full_shape, const float *values,
                                 drift_err *err) {
    tr_h5_quiet();
    int rc = check_phase(w, 0, "add_param", err);
    if (rc) return rc;
    const char *prob = tr_name_problem(fqn);
    if (prob) return drift_err_set(err, DRIFT_E_USAGE, w->path, "param FQN \"%s\": expected %s", fqn ? fqn : "", prob);
    int64_t numel = 0, bytes = 0;
    if (ndim < 1) return drift_err_set(err, DRIFT_E_USAGE, w->path, "param \"%s\": expected ndim >= 1", fqn);
    rc = check_shape(w, fqn, ndim, shape, &numel, err);
    if (rc) return rc;
    if (!values) return drift_err_set(err, DRIFT_E_USAGE, w->path, "param \"%s\": NULL values", fqn);
    if (tr_mul_checked(numel, 4, (int64_t)DRIFT_TRACE_READ_MAX, &bytes) != 0)
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "param \"%s\": larger than %llu bytes", fqn,
                             (unsigned long long)DRIFT_TRACE_READ_MAX);
    int64_t off[DRIFT_MAX_DIMS], full[DRIFT_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        off[d] = offset ? offset[d] : 0;
        full[d] = full_shape ? full_shape[d] : shape[d];
        if (off[d] < 0 || full[d] < 1 || full[d] > TR_DIM_MAX || off[d] > full[d] - shape[d])
            return drift_err_set(err, DRIFT_E_USAGE, w->path,
                                 "param \"%s\": dim %d: shard [%lld, %lld) does not fit the full shape %lld", fqn, d,
                                 (long long)off[d], (long long)(off[d] + shape[d]), (long long)full[d]);
    }
    hid_t ds = -1;
    rc = write_array(w, w->g_params, TR_PARAMS, fqn, H5T_IEEE_F32LE, ndim, shape, values, &ds, err);
    if (rc) return rc;
    if (tr_write_attr_i64v(ds, "offset", off, ndim) || tr_write_attr_i64v(ds, "full_shape", full, ndim))
        rc = wfail(w, err, TR_PARAMS, "cannot write param attributes");
    H5Dclose(ds);
    return rc;
}

int drift_trace_writer_set_param_dtype(drift_trace_writer *w, const char *fqn, drift_dtype dtype, drift_err *err) {
    int rc = check_phase(w, 0, "set_param_dtype", err);
    if (rc) return rc;
    const char *prob = tr_name_problem(fqn);
    if (prob) return drift_err_set(err, DRIFT_E_USAGE, w->path, "param FQN \"%s\": expected %s", fqn ? fqn : "", prob);
    if (dtype != DRIFT_F32 && dtype != DRIFT_BF16 && dtype != DRIFT_F16 && dtype != DRIFT_F64)
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "param \"%s\": forward dtype must be fp32, bf16, fp16 or fp64", fqn);
    for (size_t i = 0; i < w->n_pdt; i++)
        if (strcmp(w->pdt[i].fqn, fqn) == 0) {
            snprintf(w->pdt[i].dtype, sizeof w->pdt[i].dtype, "%s", drift_dtype_name(dtype));
            return DRIFT_OK;
        }
    if (w->n_pdt == w->cap_pdt) {
        size_t nc = w->cap_pdt ? w->cap_pdt * 2 : 64;
        tr_param_dtype_row *np = drift_realloc(w->pdt, nc * sizeof *np);
        if (!np) return drift_err_set(err, DRIFT_E_NOMEM, w->path, "out of memory");
        w->pdt = np;
        w->cap_pdt = nc;
    }
    tr_param_dtype_row *r = &w->pdt[w->n_pdt++];
    memset(r, 0, sizeof *r);
    snprintf(r->fqn, sizeof r->fqn, "%s", fqn);
    snprintf(r->dtype, sizeof r->dtype, "%s", drift_dtype_name(dtype));
    return DRIFT_OK;
}

int drift_trace_writer_add_buffer(drift_trace_writer *w, const char *name, drift_dtype dtype, int ndim,
                                  const int64_t *shape, const void *data, drift_err *err) {
    tr_h5_quiet();
    int rc = check_phase(w, 0, "add_buffer", err);
    if (rc) return rc;
    const char *prob = tr_name_problem(name);
    if (prob) return drift_err_set(err, DRIFT_E_USAGE, w->path, "buffer name \"%s\": expected %s", name ? name : "", prob);
    int64_t numel = 0, bytes = 0;
    if (ndim < 1) return drift_err_set(err, DRIFT_E_USAGE, w->path, "buffer \"%s\": expected ndim >= 1", name);
    rc = check_shape(w, name, ndim, shape, &numel, err);
    if (rc) return rc;
    hid_t ft = tr_float_type(dtype);
    if (ft < 0)
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "buffer \"%s\": dtype %s, expected fp32, fp64, bf16 or fp16",
                             name, drift_dtype_name(dtype));
    if (!data || tr_mul_checked(numel, (int64_t)drift_dtype_size(dtype), (int64_t)DRIFT_TRACE_READ_MAX, &bytes) != 0) {
        H5Tclose(ft);
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "buffer \"%s\": NULL data or larger than %llu bytes", name,
                             (unsigned long long)DRIFT_TRACE_READ_MAX);
    }
    hid_t ds = -1;
    rc = write_array(w, w->g_buffers, TR_BUFFERS, name, ft, ndim, shape, data, &ds, err);
    H5Tclose(ft);
    if (ds >= 0) H5Dclose(ds);
    return rc;
}

int drift_trace_writer_set_graph(drift_trace_writer *w, const char *json, size_t len, drift_err *err) {
    tr_h5_quiet();
    int rc = check_phase(w, 0, "set_graph", err);
    if (rc) return rc;
    if (!json || len == 0 || len > DRIFT_TRACE_GRAPH_MAX)
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "graph JSON: expected 1..%llu bytes",
                             (unsigned long long)DRIFT_TRACE_GRAPH_MAX);
    if (H5Lexists(w->file, "graph", H5P_DEFAULT) > 0)
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "graph set twice");
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR), ds = -1;
    if (t < 0 || sp < 0 || H5Tset_size(t, len) < 0 || H5Tset_strpad(t, H5T_STR_NULLPAD) < 0 ||
        H5Tset_cset(t, H5T_CSET_UTF8) < 0 ||
        (ds = H5Dcreate2(w->file, TR_GRAPH, t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) < 0 ||
        H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, json) < 0)
        rc = wfail(w, err, TR_GRAPH, "cannot write the graph");
    if (ds >= 0) H5Dclose(ds);
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    return rc;
}

/* /graph_steps (docs/format.md 9.1): a 1-D chunked byte dataset, extent 0, created before SWMR so
 * that the graphs of later steps can be appended to it. */
int drift_trace_writer_reserve_step_graphs(drift_trace_writer *w, drift_err *err) {
    tr_h5_quiet();
    int rc = check_phase(w, 0, "reserve_step_graphs", err);
    if (rc) return rc;
    if (w->gsteps >= 0) return DRIFT_OK;
    hsize_t dim = 0, maxd = H5S_UNLIMITED, chunk = 1 << 16;
    hid_t sp = H5Screate_simple(1, &dim, &maxd), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (sp < 0 || dcpl < 0 || H5Pset_chunk(dcpl, 1, &chunk) < 0 ||
        (w->gsteps = H5Dcreate2(w->file, TR_GRAPH_STEPS, H5T_STD_U8LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT)) < 0)
        rc = wfail(w, err, TR_GRAPH_STEPS, "cannot create the per-step graphs dataset");
    if (dcpl >= 0) H5Pclose(dcpl);
    if (sp >= 0) H5Sclose(sp);
    return rc;
}

static int check_step(drift_trace_writer *w, int64_t step, const char *what, drift_err *err);

/* Appends len bytes to /graph_steps at *off. */
static int gsteps_append(drift_trace_writer *w, const char *json, size_t len, int64_t *off, drift_err *err) {
    hsize_t start = (hsize_t)w->gsteps_bytes, n = (hsize_t)len, ext = start + n;
    hid_t fs = H5I_INVALID_HID, ms = H5Screate_simple(1, &n, NULL);
    int ok = ms >= 0 && H5Dset_extent(w->gsteps, &ext) >= 0 && (fs = H5Dget_space(w->gsteps)) >= 0 &&
             H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &n, NULL) >= 0 &&
             H5Dwrite(w->gsteps, H5T_NATIVE_UCHAR, ms, fs, H5P_DEFAULT, json) >= 0;
    if (fs >= 0) H5Sclose(fs);
    if (ms >= 0) H5Sclose(ms);
    if (!ok) return wfail(w, err, TR_GRAPH_STEPS, "cannot append a step's graph");
    *off = (int64_t)start;
    w->gsteps_bytes = (int64_t)ext;
    return DRIFT_OK;
}

int drift_trace_writer_step_graph(drift_trace_writer *w, int64_t step, int64_t graph, const char *json, size_t len,
                                  const char *reason, drift_err *err) {
    tr_h5_quiet();
    int rc = check_phase(w, 1, "step_graph", err);
    if (rc) return rc;
    if ((rc = check_step(w, step, "step_graph", err))) return rc;
    char text[DRIFT_TRACE_NOTE_MAX];
    if (graph == 0) { /* no graph fits this step */
        snprintf(text, sizeof text, "step-graph v1 graph=none reason=%s", reason && *reason ? reason : "not captured");
        return drift_trace_writer_note(w, step, 1, text, err);
    }
    if (w->gsteps < 0)
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "step_graph: call drift_trace_writer_reserve_step_graphs before start");
    if (graph < 0 || graph > w->n_gk + 1 || (graph == w->n_gk + 1 && !json))
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "step_graph: graph %lld, expected 1..%lld (%lld with its JSON)",
                             (long long)graph, (long long)w->n_gk, (long long)w->n_gk + 1);
    if (graph == w->n_gk + 1) {
        if (len == 0 || len > DRIFT_TRACE_GRAPH_MAX)
            return drift_err_set(err, DRIFT_E_USAGE, w->path, "step_graph: JSON of %zu bytes, expected 1..%llu", len,
                                 (unsigned long long)DRIFT_TRACE_GRAPH_MAX);
        int64_t(*g)[2] = drift_realloc(w->gk, (size_t)(w->n_gk + 1) * sizeof *g);
        if (!g) return drift_err_set(err, DRIFT_E_NOMEM, w->path, "out of memory");
        w->gk = g;
        int64_t off = 0;
        if ((rc = gsteps_append(w, json, len, &off, err))) return rc;
        w->gk[w->n_gk][0] = off;
        w->gk[w->n_gk][1] = (int64_t)len;
        w->n_gk++;
    }
    snprintf(text, sizeof text, "step-graph v1 graph=%lld offset=%lld length=%lld", (long long)graph,
             (long long)w->gk[graph - 1][0], (long long)w->gk[graph - 1][1]);
    return drift_trace_writer_note(w, step, 0, text, err);
}

/* ---------------------------------------------------------------------- */
/* /status: one fixed-length string of DRIFT_TRACE_STATUS_MAX bytes, its
 * storage allocated at creation (contiguous, early), so that later writes
 * overwrite bytes already in the file and need no new space: the one thing
 * a writer can still record on a full disk. */
static hid_t status_type(void) {
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t >= 0 && (H5Tset_size(t, DRIFT_TRACE_STATUS_MAX) < 0 || H5Tset_strpad(t, H5T_STR_NULLTERM) < 0)) {
        H5Tclose(t);
        t = H5I_INVALID_HID;
    }
    return t;
}

static int write_status(hid_t d, const char *text) {
    char buf[DRIFT_TRACE_STATUS_MAX];
    memset(buf, 0, sizeof buf);
    snprintf(buf, sizeof buf, "%s", text ? text : "");
    for (char *c = buf; *c; c++)
        if ((unsigned char)*c < 0x20) *c = ' '; /* one line (HDF5's messages hold newlines) */
    hid_t t = status_type();
    int rc = t < 0 || H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0 ? -1 : 0;
    if (t >= 0) H5Tclose(t);
    return rc;
}

static hid_t create_status(hid_t file) {
    hid_t t = status_type(), sp = H5Screate(H5S_SCALAR), dcpl = H5Pcreate(H5P_DATASET_CREATE), d = H5I_INVALID_HID;
    if (t >= 0 && sp >= 0 && dcpl >= 0 && H5Pset_layout(dcpl, H5D_CONTIGUOUS) >= 0 &&
        H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY) >= 0)
        d = H5Dcreate2(file, TR_STATUS, t, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (d >= 0 && write_status(d, "recording") != 0) {
        H5Dclose(d);
        d = H5I_INVALID_HID;
    }
    if (t >= 0) H5Tclose(t);
    if (sp >= 0) H5Sclose(sp);
    if (dcpl >= 0) H5Pclose(dcpl);
    return d;
}

int drift_trace_writer_set_status(drift_trace_writer *w, const char *text, drift_err *err) {
    if (!w) return drift_err_set(err, DRIFT_E_INTERNAL, "trace writer", "NULL writer");
    if (w->status < 0) return drift_err_set(err, DRIFT_E_USAGE, wpath(w), "set_status: the trace is not started");
    tr_h5_quiet();
    /* no phase check: this is meant to work after an I/O error too */
    w->status_custom = 1;
    if (write_status(w->status, text) != 0 || H5Dflush(w->status) < 0)
        return tr_h5_fail(err, DRIFT_E_IO, wpath(w), TR_STATUS, "cannot write the status");
    return DRIFT_OK;
}

int drift_trace_writer_start(drift_trace_writer *w, drift_err *err) {
    tr_h5_quiet();
    int rc = check_phase(w, 0, "start", err);
    if (rc) return rc;
    hid_t pd = tr_create_table(w->file, TR_PARAM_DTYPES, TR_T_PARAM_DTYPES, 256);
    int64_t npd = 0;
    if (pd < 0 || tr_append_rows(pd, TR_T_PARAM_DTYPES, &npd, w->pdt, (int64_t)w->n_pdt, &w->io) != 0) {
        if (pd >= 0) H5Dclose(pd);
        return wfail(w, err, TR_PARAM_DTYPES, "cannot write the param dtype table");
    }
    H5Dclose(pd);
    w->steps = tr_create_table(w->file, TR_STEPS, TR_T_STEPS, TR_CHUNK_STEPS);
    w->mrows = tr_create_table(w->file, TR_METRIC_ROWS, TR_T_METRICS, TR_CHUNK_METRICS);
    w->msteps = tr_create_table(w->file, TR_METRIC_STEPS, TR_T_STEP_METRICS, TR_CHUNK_STEPS);
    w->mnames = tr_create_table(w->file, TR_METRIC_NAMES, TR_T_NAMES, TR_CHUNK_NAMES);
    w->notes = tr_create_table(w->file, TR_NOTES, TR_T_NOTES, TR_CHUNK_NOTES);
    if (w->steps < 0 || w->mrows < 0 || w->msteps < 0 || w->mnames < 0 || w->notes < 0) {
        w->broken = 1;
        return tr_h5_fail(err, DRIFT_E_IO, w->path, "/", "cannot create the tables");
    }
    if ((w->status = create_status(w->file)) < 0) {
        w->broken = 1;
        return tr_h5_fail(err, DRIFT_E_IO, w->path, TR_STATUS, "cannot create the status string");
    }
    if (H5Fflush(w->file, H5F_SCOPE_GLOBAL) < 0 || H5Fstart_swmr_write(w->file) < 0) {
        w->broken = 1;
        return tr_h5_fail(err, DRIFT_E_IO, w->path, "/", "cannot enter SWMR-write mode");
    }
    w->started = 1;
    return DRIFT_OK;
}

/* Every append between two commits belongs to one step. */
static int check_step(drift_trace_writer *w, int64_t step, const char *what, drift_err *err) {
    if (step < 0 || step <= w->last_step)
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "%s: step %lld, expected > %lld (the last committed step)",
                             what, (long long)step, (long long)w->last_step);
    if (w->pending && step != w->pending_step)
        return drift_err_set(err, DRIFT_E_USAGE, w->path,
                             "%s: step %lld, but step %lld is being built: commit it first", what, (long long)step,
                             (long long)w->pending_step);
    return DRIFT_OK;
}

static int append_record(drift_trace_writer *w, int site_id, const drift_trace_index *idx, const void *data,
                         int store, const drift_trace_stats *st, drift_err *err) {
    int rc = check_phase(w, 1, "append", err);
    if (rc) return rc;
    if (site_id < 0 || (size_t)site_id >= w->n_sites || !idx)
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "append: site id %d, expected 0..%zu", site_id,
                             w->n_sites ? w->n_sites - 1 : 0);
    w_site *s = &w->sites[site_id];
    rc = check_step(w, idx->step, s->name, err);
    if (rc) return rc;
    drift_trace_index row = *idx;
    row.stored = (uint8_t)(store && s->store && data ? 1 : 0);
    char obj[3 * DRIFT_TRACE_NAME_MAX + 16], esc[3 * DRIFT_TRACE_NAME_MAX];
    tr_escape_name(s->name, esc, sizeof esc);
    snprintf(obj, sizeof obj, "/sites/%s", esc);
    /* data first, stats, then index: a reader trusts rows up to the commit. */
    if (s->store) {
        hsize_t nd[DRIFT_MAX_DIMS + 1], st0[DRIFT_MAX_DIMS + 1], cnt[DRIFT_MAX_DIMS + 1];
        nd[0] = (hsize_t)s->rows + 1;
        st0[0] = (hsize_t)s->rows;
        cnt[0] = 1;
        for (int d = 0; d < s->ndim; d++) {
            nd[d + 1] = cnt[d + 1] = (hsize_t)s->shape[d];
            st0[d + 1] = 0;
        }
        if (H5Dset_extent(s->data, nd) < 0) return wfail(w, err, obj, "cannot extend the data dataset");
        if (row.stored) {
            hid_t fs = H5Dget_space(s->data), ms = H5Screate_simple(s->ndim + 1, cnt, NULL);
            herr_t e = (fs < 0 || ms < 0) ? -1 : H5Sselect_hyperslab(fs, H5S_SELECT_SET, st0, NULL, cnt, NULL);
            if (e >= 0) e = H5Dwrite(s->data, s->ftype, ms, fs, H5P_DEFAULT, data);
            if (fs >= 0) H5Sclose(fs);
            if (ms >= 0) H5Sclose(ms);
            if (e < 0) return wfail(w, err, obj, "cannot write the record");
        }
    }
    int64_t r1 = s->rows, r2 = s->rows;
    if (tr_append_rows(s->stats, TR_T_STATS, &r1, st, 1, &w->io) != 0) return wfail(w, err, obj, "cannot append stats");
    if (tr_append_rows(s->index, TR_T_INDEX, &r2, &row, 1, &w->io) != 0) return wfail(w, err, obj, "cannot append index");
    s->rows++;
    w->pending = 1;
    w->pending_step = idx->step;
    w->pending_records++;
    return DRIFT_OK;
}

int drift_trace_writer_append(drift_trace_writer *w, int site_id, const drift_trace_index *idx, const void *data,
                              int store, drift_err *err) {
    tr_h5_quiet();
    if (w && site_id >= 0 && (size_t)site_id < w->n_sites && !data)
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "append: NULL data for site \"%s\"", w->sites[site_id].name);
    drift_trace_stats st;
    if (w && site_id >= 0 && (size_t)site_id < w->n_sites)
        drift_trace_stats_compute(data, w->sites[site_id].dtype, (size_t)w->sites[site_id].numel, &st);
    return append_record(w, site_id, idx, data, store, &st, err);
}

int drift_trace_writer_append_stats(drift_trace_writer *w, int site_id, const drift_trace_index *idx,
                                    const drift_trace_stats *stats, drift_err *err) {
    tr_h5_quiet();
    if (!stats) return drift_err_set(err, DRIFT_E_USAGE, w ? w->path : NULL, "append_stats: NULL stats");
    return append_record(w, site_id, idx, NULL, 0, stats, err);
}

static int metric_site_id(drift_trace_writer *w, const char *name, int32_t *id, drift_err *err) {
    const char *prob = tr_name_problem(name);
    if (prob) return drift_err_set(err, DRIFT_E_USAGE, w->path, "metric site \"%s\": expected %s", name ? name : "", prob);
    /* Metrics usually come in the same site order every step: try the row
     * after the previous hit first. */
    if (w->name_hint < (size_t)w->n_mnames && strcmp(w->names[w->name_hint], name) == 0) {
        *id = (int32_t)w->name_hint++;
        return DRIFT_OK;
    }
    for (int64_t i = 0; i < w->n_mnames; i++)
        if (strcmp(w->names[i], name) == 0) {
            *id = (int32_t)i;
            w->name_hint = (size_t)i + 1;
            return DRIFT_OK;
        }
    if (w->n_mnames >= INT32_MAX - 1) return drift_err_set(err, DRIFT_E_USAGE, w->path, "too many metric sites");
    if ((size_t)w->n_mnames == w->cap_names) {
        size_t nc = w->cap_names ? w->cap_names * 2 : 64;
        char **nn = drift_realloc(w->names, nc * sizeof *nn);
        if (!nn) return drift_err_set(err, DRIFT_E_NOMEM, w->path, "out of memory");
        w->names = nn;
        w->cap_names = nc;
    }
    tr_name_row row;
    memset(&row, 0, sizeof row);
    snprintf(row.name, sizeof row.name, "%s", name);
    char *copy = drift_strdup(name);
    if (!copy) return drift_err_set(err, DRIFT_E_NOMEM, w->path, "out of memory");
    int64_t n = w->n_mnames;
    if (tr_append_rows(w->mnames, TR_T_NAMES, &n, &row, 1, &w->io) != 0) {
        free(copy);
        return wfail(w, err, TR_METRIC_NAMES, "cannot append a metric site name");
    }
    w->names[w->n_mnames] = copy;
    *id = (int32_t)w->n_mnames;
    w->n_mnames = n;
    w->name_hint = (size_t)n;
    return DRIFT_OK;
}

int drift_trace_writer_add_metric(drift_trace_writer *w, const char *site_name, const drift_trace_metric *row,
                                  drift_err *err) {
    tr_h5_quiet();
    int rc = check_phase(w, 1, "add_metric", err);
    if (rc) return rc;
    if (!row) return drift_err_set(err, DRIFT_E_USAGE, w->path, "add_metric: NULL row");
    rc = check_step(w, row->step, "add_metric", err);
    if (rc) return rc;
    drift_trace_metric m = *row;
    rc = metric_site_id(w, site_name, &m.site, err);
    if (rc) return rc;
    if (tr_append_rows(w->mrows, TR_T_METRICS, &w->n_mrows, &m, 1, &w->io) != 0)
        return wfail(w, err, TR_METRIC_ROWS, "cannot append a metrics row");
    w->pending = 1;
    w->pending_step = row->step;
    return DRIFT_OK;
}

int drift_trace_writer_add_step_metrics(drift_trace_writer *w, const drift_trace_step_metrics *row, drift_err *err) {
    tr_h5_quiet();
    int rc = check_phase(w, 1, "add_step_metrics", err);
    if (rc) return rc;
    if (!row) return drift_err_set(err, DRIFT_E_USAGE, w->path, "add_step_metrics: NULL row");
    rc = check_step(w, row->step, "add_step_metrics", err);
    if (rc) return rc;
    if (tr_append_rows(w->msteps, TR_T_STEP_METRICS, &w->n_msteps, row, 1, &w->io) != 0)
        return wfail(w, err, TR_METRIC_STEPS, "cannot append a step metrics row");
    w->pending = 1;
    w->pending_step = row->step;
    return DRIFT_OK;
}

int drift_trace_writer_note(drift_trace_writer *w, int64_t step, int level, const char *text, drift_err *err) {
    tr_h5_quiet();
    int rc = check_phase(w, 1, "note", err);
    if (rc) return rc;
    rc = check_step(w, step, "note", err);
    if (rc) return rc;
    drift_trace_note n;
    memset(&n, 0, sizeof n);
    n.step = step;
    n.time = now_s();
    n.level = level;
    snprintf(n.text, sizeof n.text, "%s", text ? text : "");
    if (tr_append_rows(w->notes, TR_T_NOTES, &w->n_notes, &n, 1, &w->io) != 0)
        return wfail(w, err, TR_NOTES, "cannot append a note");
    w->pending = 1;
    w->pending_step = step;
    return DRIFT_OK;
}

int drift_trace_writer_commit_step(drift_trace_writer *w, int64_t step, uint32_t flags, drift_err *err) {
    tr_h5_quiet();
    int rc = check_phase(w, 1, "commit_step", err);
    if (rc) return rc;
    rc = check_step(w, step, "commit_step", err);
    if (rc) return rc;
    /* Everything of the step reaches the file before its commit row does. */
    if (H5Fflush(w->file, H5F_SCOPE_LOCAL) < 0) return wfail(w, err, "/", "cannot flush before the commit");
    drift_trace_step row = {step, w->pending_records, w->n_mrows, w->n_msteps, w->n_notes, now_s(), flags};
    if (tr_append_rows(w->steps, TR_T_STEPS, &w->n_steps, &row, 1, &w->io) != 0 || H5Dflush(w->steps) < 0)
        return wfail(w, err, TR_STEPS, "cannot write the commit row");
    if (w->last_step < 0) w->first_step = step;
    w->last_step = step;
    w->pending = 0;
    w->pending_records = 0;
    return DRIFT_OK;
}

int drift_trace_writer_close(drift_trace_writer *w, drift_err *err) {
    if (!w) return DRIFT_OK;
    tr_h5_quiet();
    for (size_t i = 0; i < w->n_sites; i++) {
        w_site *s = &w->sites[i];
        hclose(&s->data, H5Dclose);
        hclose(&s->index, H5Dclose);
        hclose(&s->stats, H5Dclose);
        hclose(&s->grp, H5Gclose);
        hclose(&s->ftype, H5Tclose);
        free(s->name);
    }
    free(w->sites);
    hclose(&w->steps, H5Dclose);
    hclose(&w->mrows, H5Dclose);
    hclose(&w->msteps, H5Dclose);
    hclose(&w->mnames, H5Dclose);
    hclose(&w->notes, H5Dclose);
    hclose(&w->gsteps, H5Dclose);
    free(w->gk);
    if (w->status >= 0 && !w->broken && !w->status_custom) write_status(w->status, "closed"); /* a clean end */
    hclose(&w->status, H5Dclose);
    hclose(&w->g_sites, H5Gclose);
    hclose(&w->g_params, H5Gclose);
    hclose(&w->g_buffers, H5Gclose);
    hclose(&w->g_metrics, H5Gclose);
    int rc = DRIFT_OK;
    if (w->file >= 0 && tr_h5_close_file(w->file) < 0) rc = tr_h5_fail(err, DRIFT_E_IO, wpath(w), "/", "cannot close the file");
    w->file = H5I_INVALID_HID;
    int ok = rc == DRIFT_OK && !w->broken && w->started;
    if (w->tmp) {
        if (ok) rc = drift_outpath_commit(&w->out, 1, err);
        else drift_outpath_abort(&w->out); /* the existing file stays as it was */
        w->tmp = NULL;
    } else if (w->fresh && !ok && w->last_step < 0) {
        unlink(w->path); /* nothing committed: no empty file left behind */
    }
    tr_lock_release(w->path, w->lock_fd);
    for (int64_t i = 0; i < w->n_mnames; i++) free(w->names[i]);
    free(w->names);
    free(w->pdt);
    free(w->path);
    tr_io_free(&w->io);
    free(w);
    return rc;
}

/* /libraries: a group of attributes (docs/format.md section 2.1). */
int drift_trace_writer_set_libraries(drift_trace_writer *w, const drift_libraries *lib, drift_err *err) {
    tr_h5_quiet();
    int rc = check_phase(w, 0, "set_libraries", err);
    if (rc) return rc;
    if (!lib) return drift_err_set(err, DRIFT_E_USAGE, w->path, "set_libraries: NULL identity");
    if (H5Lexists(w->file, TR_LIBRARIES, H5P_DEFAULT) > 0)
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "libraries set twice");
    hid_t g = H5Gcreate2(w->file, TR_LIBRARIES, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) return wfail(w, err, TR_LIBRARIES, "cannot create the group");
    const int64_t cc[2] = {lib->cc_major, lib->cc_minor};
    if (tr_write_attr_str(g, "gpu_name", lib->gpu_name) || tr_write_attr_i64v(g, "compute_capability", cc, 2) ||
        tr_write_attr_i64(g, "cuda_driver", lib->driver_version) ||
        tr_write_attr_i64(g, "cuda_runtime", lib->runtime_version) ||
        tr_write_attr_i64(g, "cublaslt", lib->cublaslt_version) || tr_write_attr_i64(g, "cublas", lib->cublas_version) ||
        tr_write_attr_i64(g, "cudnn", lib->cudnn_version) || tr_write_attr_str(g, "torch", lib->torch_version) ||
        tr_write_attr_str(g, "cublaslt_path", lib->cublaslt_path) || tr_write_attr_str(g, "cudnn_path", lib->cudnn_path) ||
        (lib->compiled && (tr_write_attr_i64(g, "compiled", 1) || tr_write_attr_str(g, "inductor_mode", lib->inductor_mode) ||
                           tr_write_attr_str(g, "compiled_modules", lib->compiled_modules))) ||
        (lib->cublas_workspace > 0 && tr_write_attr_i64(g, "cublas_workspace_bytes", lib->cublas_workspace)) ||
        (lib->cublaslt_workspace > 0 && tr_write_attr_i64(g, "cublaslt_workspace_bytes", lib->cublaslt_workspace)))
        rc = wfail(w, err, TR_LIBRARIES, "cannot write the attributes");
    H5Gclose(g);
    return rc;
}

/* /params_ref: one fixed-length string like /graph. */
int drift_trace_writer_set_params_ref(drift_trace_writer *w, const char *json, size_t len, drift_err *err) {
    tr_h5_quiet();
    int rc = check_phase(w, 0, "set_params_ref", err);
    if (rc) return rc;
    if (!json || len == 0 || len > DRIFT_TRACE_GRAPH_MAX)
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "params_ref JSON: expected 1..%llu bytes",
                             (unsigned long long)DRIFT_TRACE_GRAPH_MAX);
    if (H5Lexists(w->file, "params_ref", H5P_DEFAULT) > 0)
        return drift_err_set(err, DRIFT_E_USAGE, w->path, "params_ref set twice");
    hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR), ds = -1;
    if (t < 0 || sp < 0 || H5Tset_size(t, len) < 0 || H5Tset_strpad(t, H5T_STR_NULLPAD) < 0 ||
        H5Tset_cset(t, H5T_CSET_UTF8) < 0 ||
        (ds = H5Dcreate2(w->file, TR_PARAMS_REF, t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) < 0 ||
        H5Dwrite(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, json) < 0)
        rc = wfail(w, err, TR_PARAMS_REF, "cannot write the parameter reference");
    if (ds >= 0) H5Dclose(ds);
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    return rc;
}
