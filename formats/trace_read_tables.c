/* Trace reader, second half: /params, /param_dtypes, /buffers, /graph and the
 * committed rows of /metrics and /notes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "formats/trace_internal.h"

/* Loads one /params or /buffers dataset's description. */
static int load_array(drift_trace_reader *r, hid_t g, const char *gname, const char *link, int is_param, tr_param *p,
                      drift_err *err) {
    const char *f = r->path;
    char obj[3 * DRIFT_TRACE_NAME_MAX + 32], w[sizeof obj + 600];
    snprintf(obj, sizeof obj, "%s/%s", gname, link);
    snprintf(w, sizeof w, "%s:%s", f, obj);
    hid_t ds = H5I_INVALID_HID;
    int rc = tr_open_dataset(g, link, r->view, f, obj, &ds, err);
    if (rc) return rc;
    p->link = drift_strdup(link);
    if (!p->link) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, w, "out of memory");
        goto done;
    }
    if ((rc = tr_read_attr_str(ds, "name", DRIFT_TRACE_NAME_MAX, &p->fqn, f, obj, err))) goto done;
    char esc[3 * DRIFT_TRACE_NAME_MAX];
    if (tr_name_problem(p->fqn) || tr_escape_name(p->fqn, esc, sizeof esc) != 0 || strcmp(esc, link) != 0) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"name\" is \"%s\", expected the dataset name unescaped",
                           p->fqn);
        goto done;
    }
    hid_t t = H5Dget_type(ds);
    char desc[256] = "an unreadable type";
    p->dtype = t >= 0 ? tr_dtype_of_type(t, desc, sizeof desc) : DRIFT_DTYPE_INVALID;
    if (t >= 0) H5Tclose(t);
    if (p->dtype == DRIFT_DTYPE_INVALID || (is_param && p->dtype != DRIFT_F32)) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "expected %s, found %s",
                           is_param ? "fp32 values" : "fp32, fp64, bf16 or fp16 values",
                           p->dtype != DRIFT_DTYPE_INVALID ? drift_dtype_name(p->dtype) : desc);
        goto done;
    }
    int rank = 0, n = 0;
    int64_t dims[DRIFT_MAX_DIMS];
    if ((rc = tr_dataset_dims(ds, DRIFT_MAX_DIMS, &rank, dims, f, obj, err))) goto done;
    if ((rc = tr_read_attr_i64v(ds, "shape", p->shape, DRIFT_MAX_DIMS, &n, f, obj, err))) goto done;
    int same = n == rank;
    for (int d = 0; same && d < rank; d++) same = dims[d] == p->shape[d];
    int64_t bytes = 0;
    if (!same || tr_numel(rank, p->shape, &p->numel) != 0 ||
        tr_mul_checked(p->numel, (int64_t)drift_dtype_size(p->dtype), (int64_t)DRIFT_TRACE_READ_MAX, &bytes) != 0) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w,
                           "attribute \"shape\": expected the dataset's dimensions (each 1..2^40, at most %llu bytes)",
                           (unsigned long long)DRIFT_TRACE_READ_MAX);
        goto done;
    }
    p->ndim = rank;
    if (is_param) {
        int n1 = 0, n2 = 0;
        if ((rc = tr_read_attr_i64v(ds, "offset", p->offset, DRIFT_MAX_DIMS, &n1, f, obj, err))) goto done;
        if ((rc = tr_read_attr_i64v(ds, "full_shape", p->full_shape, DRIFT_MAX_DIMS, &n2, f, obj, err))) goto done;
        if (n1 != rank || n2 != rank) {
            rc = drift_err_set(err, DRIFT_E_INPUT, w, "attributes \"offset\"/\"full_shape\": expected %d values each", rank);
            goto done;
        }
        for (int d = 0; d < rank; d++)
            if (p->offset[d] < 0 || p->full_shape[d] < 1 || p->full_shape[d] > TR_DIM_MAX ||
                p->offset[d] > p->full_shape[d] - p->shape[d]) {
                rc = drift_err_set(err, DRIFT_E_INPUT, w,
                                   "dim %d: shard [%lld, %lld) does not fit full_shape %lld", d, (long long)p->offset[d],
                                   (long long)(p->offset[d] + p->shape[d]), (long long)p->full_shape[d]);
                goto done;
            }
    }
done:
    H5Dclose(ds);
    return rc;
}

typedef struct arrays_it {
    drift_trace_reader *r;
    const char *gname;
    int is_param;
    tr_param *arr;
    size_t *n, cap;
    drift_err *err;
    int rc;
} arrays_it;

/* One entry of /params or /buffers, listed by iteration (linear). */
static herr_t array_cb(hid_t g, const char *link, const H5L_info_t *li, void *data) {
    arrays_it *it = data;
    char w[600], obj[3 * DRIFT_TRACE_NAME_MAX + 32];
    snprintf(w, sizeof w, "%s:%s", it->r->path, it->gname);
    size_t len = strlen(link);
    if (*it->n >= it->cap || len < 1 || len >= 3 * DRIFT_TRACE_NAME_MAX) {
        it->rc = drift_err_set(it->err, DRIFT_E_INPUT, w, "entry %zu: expected at most %zu entries named 1..%d bytes",
                               *it->n, it->cap, 3 * DRIFT_TRACE_NAME_MAX - 1);
        return -1;
    }
    snprintf(obj, sizeof obj, "%s/%s", it->gname, link);
    if ((it->rc = tr_guard_link_info(g, link, li, it->r->path, obj, it->err))) return -1;
    size_t i = (*it->n)++; /* counted first, so that close frees a half-loaded entry */
    if ((it->rc = load_array(it->r, g, it->gname, link, it->is_param, &it->arr[i], it->err))) return -1;
    return 0;
}

/* Link-name (escaped FQN) byte order, the order H5_ITER_INC listed. */
static int by_link_name(const void *a, const void *b) {
    char ea[3 * DRIFT_TRACE_NAME_MAX], eb[3 * DRIFT_TRACE_NAME_MAX];
    tr_escape_name(((const tr_param *)a)->fqn, ea, sizeof ea);
    tr_escape_name(((const tr_param *)b)->fqn, eb, sizeof eb);
    return strcmp(ea, eb);
}

static int load_group(drift_trace_reader *r, const char *gname, int is_param, tr_param **out, size_t *nout,
                      drift_err *err) {
    char w[600];
    snprintf(w, sizeof w, "%s:%s", r->path, gname);
    int ok = tr_guard_path(r->file, gname, r->path, gname, err);
    if (ok == DRIFT_E_INPUT) return ok;
    if (ok != 1)
        return drift_err_set(err, DRIFT_E_INPUT, w, "missing group (expected the %s group, possibly empty)", gname + 1);
    hid_t g = H5I_INVALID_HID;
    int rc = tr_open_group(r->file, gname, r->path, gname, &g, err);
    if (rc) return rc;
    H5G_info_t info;
    if (H5Gget_info(g, &info) < 0) {
        rc = tr_h5_fail(err, DRIFT_E_INPUT, r->path, gname, "unreadable group");
        goto done;
    }
    if (info.nlinks > DRIFT_TRACE_MAX_PARAMS) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "%llu entries, expected at most %d", (unsigned long long)info.nlinks,
                           DRIFT_TRACE_MAX_PARAMS);
        goto done;
    }
    if (info.nlinks == 0) goto done;
    *out = drift_calloc((size_t)info.nlinks, sizeof **out);
    if (!*out) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, w, "out of memory");
        goto done;
    }
    arrays_it it = {r, gname, is_param, *out, nout, (size_t)info.nlinks, err, DRIFT_OK};
    if (tr_iterate_links(g, array_cb, &it) < 0 && !it.rc)
        it.rc = tr_h5_fail(err, DRIFT_E_INPUT, r->path, gname, "unreadable link table");
    rc = it.rc;
    if (!rc) qsort(*out, *nout, sizeof **out, by_link_name); /* listed in native order: readers see link-name order */
done:
    H5Gclose(g);
    return rc;
}

static int load_param_dtypes(drift_trace_reader *r, drift_err *err) {
    char w[600];
    snprintf(w, sizeof w, "%s:%s", r->path, TR_PARAM_DTYPES);
    int ok = tr_guard_path(r->file, TR_PARAM_DTYPES, r->path, TR_PARAM_DTYPES, err);
    if (ok == DRIFT_E_INPUT) return ok;
    if (ok != 1)
        return drift_err_set(err, DRIFT_E_INPUT, w, "missing dataset (expected the param dtype table, possibly empty)");
    hid_t ds = H5I_INVALID_HID;
    int rc = tr_open_dataset(r->file, TR_PARAM_DTYPES, r->view, r->path, TR_PARAM_DTYPES, &ds, err);
    if (rc) return rc;
    int64_t rows = 0;
    rc = tr_check_table(ds, TR_T_PARAM_DTYPES, &rows, r->path, TR_PARAM_DTYPES, err);
    if (!rc) rc = tr_guard_rows(rows, sizeof(tr_param_dtype_row), r->file_bytes, r->path, TR_PARAM_DTYPES, err);
    if (!rc && rows > DRIFT_TRACE_MAX_PARAMS)
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "%lld rows, expected at most %d", (long long)rows, DRIFT_TRACE_MAX_PARAMS);
    if (!rc && rows > 0) {
        r->pdt = drift_malloc((size_t)rows * sizeof *r->pdt);
        if (!r->pdt) rc = drift_err_set(err, DRIFT_E_NOMEM, w, "out of memory");
        else rc = tr_read_rows(ds, TR_T_PARAM_DTYPES, 0, rows, r->pdt, r->path, TR_PARAM_DTYPES, err);
        for (int64_t i = 0; !rc && i < rows; i++) {
            tr_param_dtype_row *p = &r->pdt[i];
            p->fqn[sizeof p->fqn - 1] = p->dtype[sizeof p->dtype - 1] = '\0';
            drift_dtype dt = drift_dtype_parse(p->dtype);
            if (!p->fqn[0] || (dt != DRIFT_F32 && dt != DRIFT_BF16 && dt != DRIFT_F16 && dt != DRIFT_F64))
                rc = drift_err_set(err, DRIFT_E_INPUT, w, "row %lld (\"%s\", \"%s\"): expected an FQN and fp32, bf16, fp16 or fp64",
                                   (long long)i, p->fqn, p->dtype);
        }
        if (!rc) r->n_pdt = (size_t)rows;
    }
    H5Dclose(ds);
    return rc;
}

int tr_reader_load_extra(drift_trace_reader *r, drift_err *err) {
    int rc = load_group(r, TR_PARAMS, 1, &r->params, &r->n_params, err);
    if (!rc) rc = load_group(r, TR_BUFFERS, 0, &r->buffers, &r->n_buffers, err);
    if (!rc) rc = load_param_dtypes(r, err);
    return rc;
}

static void free_arrays(tr_param *a, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(a[i].fqn);
        free(a[i].link);
    }
    free(a);
}

void tr_reader_free_extra(drift_trace_reader *r) {
    free_arrays(r->params, r->n_params);
    free_arrays(r->buffers, r->n_buffers);
    free(r->pdt);
    r->params = r->buffers = NULL;
    r->pdt = NULL;
    r->n_params = r->n_buffers = r->n_pdt = 0;
}

/* --- params / buffers -------------------------------------------------------- */
size_t drift_trace_reader_n_params(const drift_trace_reader *r) { return r ? r->n_params : 0; }

int drift_trace_reader_param(const drift_trace_reader *r, size_t i, drift_trace_param_info *out) {
    if (!r || i >= r->n_params || !out) return DRIFT_E_USAGE;
    const tr_param *p = &r->params[i];
    memset(out, 0, sizeof *out);
    out->fqn = p->fqn;
    out->ndim = p->ndim;
    out->numel = p->numel;
    for (int d = 0; d < p->ndim; d++) {
        out->shape[d] = p->shape[d];
        out->offset[d] = p->offset[d];
        out->full_shape[d] = p->full_shape[d];
        if (p->offset[d] != 0 || p->full_shape[d] != p->shape[d]) out->is_shard = 1;
    }
    return DRIFT_OK;
}

static long find_in(const tr_param *a, size_t n, const char *name) {
    if (!name) return -1;
    for (size_t i = 0; i < n; i++)
        if (strcmp(a[i].fqn, name) == 0) return (long)i;
    return -1;
}

long drift_trace_reader_find_param(const drift_trace_reader *r, const char *fqn) {
    return r ? find_in(r->params, r->n_params, fqn) : -1;
}

static int read_array(drift_trace_reader *r, const char *gname, const tr_param *p, void *dst, size_t dst_bytes,
                      drift_err *err) {
    char obj[3 * DRIFT_TRACE_NAME_MAX + 32];
    snprintf(obj, sizeof obj, "%s/%s", gname, p->link);
    size_t need = (size_t)p->numel * drift_dtype_size(p->dtype);
    if (!dst || dst_bytes < need)
        return drift_err_set(err, DRIFT_E_USAGE, r->path, "%s: buffer of %zu bytes, %zu needed", p->fqn, dst_bytes, need);
    hid_t g = H5I_INVALID_HID, ds = H5I_INVALID_HID;
    int rc = tr_open_group(r->file, gname, r->path, gname, &g, err);
    if (!rc) rc = tr_open_dataset(g, p->link, r->view, r->path, obj, &ds, err);
    if (rc) {
        if (g >= 0) H5Gclose(g);
        return rc;
    }
    hid_t t = H5Dget_type(ds);
    /* memory type = the (validated) file type: raw bytes, no conversion */
    if (t < 0 || H5Dread(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, dst) < 0)
        rc = tr_h5_fail(err, DRIFT_E_INPUT, r->path, obj, "cannot read the values");
    if (t >= 0) H5Tclose(t);
    if (ds >= 0) H5Dclose(ds);
    if (g >= 0) H5Gclose(g);
    return rc;
}

int drift_trace_read_param(drift_trace_reader *r, size_t i, float *dst, size_t dst_len, drift_err *err) {
    tr_h5_quiet();
    if (!r || i >= r->n_params) return drift_err_set(err, DRIFT_E_USAGE, r ? r->path : NULL, "param %zu out of range", i);
    return read_array(r, TR_PARAMS, &r->params[i], dst, dst_len * sizeof(float), err);
}

size_t drift_trace_reader_n_buffers(const drift_trace_reader *r) { return r ? r->n_buffers : 0; }

int drift_trace_reader_buffer(const drift_trace_reader *r, size_t i, drift_trace_buffer_info *out) {
    if (!r || i >= r->n_buffers || !out) return DRIFT_E_USAGE;
    const tr_param *p = &r->buffers[i];
    memset(out, 0, sizeof *out);
    out->name = p->fqn;
    out->dtype = p->dtype;
    out->ndim = p->ndim;
    out->numel = p->numel;
    for (int d = 0; d < p->ndim; d++) out->shape[d] = p->shape[d];
    return DRIFT_OK;
}

long drift_trace_reader_find_buffer(const drift_trace_reader *r, const char *name) {
    return r ? find_in(r->buffers, r->n_buffers, name) : -1;
}

int drift_trace_read_buffer(drift_trace_reader *r, size_t i, void *dst, size_t dst_bytes, drift_err *err) {
    tr_h5_quiet();
    if (!r || i >= r->n_buffers) return drift_err_set(err, DRIFT_E_USAGE, r ? r->path : NULL, "buffer %zu out of range", i);
    return read_array(r, TR_BUFFERS, &r->buffers[i], dst, dst_bytes, err);
}

size_t drift_trace_reader_n_param_dtypes(const drift_trace_reader *r) { return r ? r->n_pdt : 0; }

int drift_trace_reader_param_dtype(const drift_trace_reader *r, size_t i, const char **fqn, drift_dtype *dtype) {
    if (!r || i >= r->n_pdt) return DRIFT_E_USAGE;
    if (fqn) *fqn = r->pdt[i].fqn;
    if (dtype) *dtype = drift_dtype_parse(r->pdt[i].dtype);
    return DRIFT_OK;
}

drift_dtype drift_trace_reader_find_param_dtype(const drift_trace_reader *r, const char *fqn) {
    if (!r || !fqn) return DRIFT_DTYPE_INVALID;
    for (size_t i = 0; i < r->n_pdt; i++)
        if (strcmp(r->pdt[i].fqn, fqn) == 0) return drift_dtype_parse(r->pdt[i].dtype);
    return DRIFT_DTYPE_INVALID;
}

/* --- graph --------------------------------------------------------------------- */
static int read_json_dataset(drift_trace_reader *r, const char *obj, const char *label, char **json, size_t *len,
                             drift_err *err) {
    tr_h5_quiet();
    *json = NULL;
    *len = 0;
    if (!r) return drift_err_set(err, DRIFT_E_INTERNAL, NULL, "read %s: NULL reader", label);
    int ok = tr_guard_path(r->file, obj, r->path, obj, err);
    if (ok == DRIFT_E_INPUT) return ok;
    if (ok != 1) return DRIFT_OK;
    char w[600];
    snprintf(w, sizeof w, "%s:%s", r->path, obj);
    hid_t ds = H5I_INVALID_HID;
    int orc = tr_open_dataset(r->file, obj, r->view, r->path, obj, &ds, err);
    if (orc) return orc;
    hid_t t = H5Dget_type(ds), sp = H5Dget_space(ds);
    int rc = DRIFT_OK;
    size_t sz = t >= 0 ? H5Tget_size(t) : 0;
    char *buf = NULL;
    if (t < 0 || sp < 0 || H5Tget_class(t) != H5T_STRING || H5Tis_variable_str(t) != 0 ||
        H5Sget_simple_extent_npoints(sp) != 1) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "expected one fixed-length string");
    } else if (sz == 0 || sz > DRIFT_TRACE_GRAPH_MAX) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "a string of %zu bytes, expected 1..%llu", sz,
                           (unsigned long long)DRIFT_TRACE_GRAPH_MAX);
    } else if (!(buf = drift_malloc(sz + 1))) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, w, "out of memory");
    } else if (H5Dread(ds, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
        rc = tr_h5_fail(err, DRIFT_E_INPUT, r->path, obj, "cannot read the string");
    } else {
        buf[sz] = '\0';
        *len = strlen(buf);
        *json = buf;
        buf = NULL;
    }
    free(buf);
    if (t >= 0) H5Tclose(t);
    if (sp >= 0) H5Sclose(sp);
    H5Dclose(ds);
    return rc;
}

int drift_trace_read_graph(drift_trace_reader *r, char **json, size_t *len, drift_err *err) {
    return read_json_dataset(r, TR_GRAPH, "graph", json, len, err);
}

int drift_trace_read_params_ref(drift_trace_reader *r, char **json, size_t *len, drift_err *err) {
    return read_json_dataset(r, TR_PARAMS_REF, "params_ref", json, len, err);
}

/* --- committed table rows --------------------------------------------------------- */
/* Rows [start, end) of a table whose cumulative committed count is stored in
 * each commit row: start = count at the last commit with step <= after_step. */
static void committed_range(const drift_trace_reader *r, int64_t after_step, size_t field, int64_t *start,
                            int64_t *end) {
    *start = 0;
    *end = 0;
    if (!r->n_steps) return;
#define FIELD(s) (field == 0 ? (s).metrics_rows : field == 1 ? (s).step_metrics_rows : (s).notes_rows)
    *end = FIELD(r->stp[r->n_steps - 1]);
    size_t lo = 0, hi = r->n_steps; /* first commit with step > after_step */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->stp[mid].step <= after_step) lo = mid + 1;
        else hi = mid;
    }
    if (lo > 0) *start = FIELD(r->stp[lo - 1]);
#undef FIELD
}

static int read_committed(drift_trace_reader *r, hid_t ds, const char *obj, enum tr_table t, size_t field,
                          int64_t after_step, void **rows, size_t *n, drift_err *err) {
    *rows = NULL;
    *n = 0;
    int64_t start, end, ext = 0;
    committed_range(r, after_step, field, &start, &end);
    if (end <= start) return DRIFT_OK;
    if (r->swmr && H5Drefresh(ds) < 0) return tr_h5_fail(err, DRIFT_E_IO, r->path, obj, "cannot refresh");
    int rc = tr_check_table(ds, t, &ext, r->path, obj, err);
    if (rc) return rc;
    char w[600];
    snprintf(w, sizeof w, "%s:%s", r->path, obj);
    if (ext < end)
        return drift_err_set(err, DRIFT_E_INPUT, w, "%lld rows, but the commit rows in /steps count %lld", (long long)ext,
                             (long long)end);
    int64_t cnt = end - start, bytes = 0;
    if (tr_mul_checked(cnt, (int64_t)tr_type_mem_size(t), (int64_t)DRIFT_TRACE_READ_MAX, &bytes) != 0)
        return drift_err_set(err, DRIFT_E_INPUT, w, "%lld rows exceed the read limit", (long long)cnt);
    void *buf = drift_malloc((size_t)bytes);
    if (!buf) return drift_err_set(err, DRIFT_E_NOMEM, w, "out of memory for %lld rows", (long long)cnt);
    rc = tr_read_rows(ds, t, start, cnt, buf, r->path, obj, err);
    if (rc) {
        free(buf);
        return rc;
    }
    *rows = buf;
    *n = (size_t)cnt;
    return DRIFT_OK;
}

int drift_trace_read_metrics(drift_trace_reader *r, int64_t after_step, drift_trace_metric **rows, size_t *n,
                             drift_err *err) {
    tr_h5_quiet();
    if (!r || !rows || !n) return drift_err_set(err, DRIFT_E_INTERNAL, NULL, "read_metrics: NULL argument");
    void *buf = NULL;
    int rc = read_committed(r, r->mrows, TR_METRIC_ROWS, TR_T_METRICS, 0, after_step, &buf, n, err);
    if (rc) return rc;
    drift_trace_metric *m = buf;
    for (size_t i = 0; i < *n; i++)
        if (m[i].site < 0 || (size_t)m[i].site >= r->n_mnames) {
            char w[600];
            snprintf(w, sizeof w, "%s:%s", r->path, TR_METRIC_ROWS);
            rc = drift_err_set(err, DRIFT_E_INPUT, w, "row of step %lld names site %d, expected 0..%zu (the site_names rows)",
                               (long long)m[i].step, (int)m[i].site, r->n_mnames ? r->n_mnames - 1 : 0);
            free(buf);
            *n = 0;
            return rc;
        }
    *rows = m;
    return DRIFT_OK;
}

int drift_trace_read_step_metrics(drift_trace_reader *r, int64_t after_step, drift_trace_step_metrics **rows,
                                  size_t *n, drift_err *err) {
    tr_h5_quiet();
    if (!r || !rows || !n) return drift_err_set(err, DRIFT_E_INTERNAL, NULL, "read_step_metrics: NULL argument");
    void *buf = NULL;
    int rc = read_committed(r, r->msteps, TR_METRIC_STEPS, TR_T_STEP_METRICS, 1, after_step, &buf, n, err);
    *rows = buf;
    return rc;
}

int drift_trace_read_notes(drift_trace_reader *r, int64_t after_step, drift_trace_note **rows, size_t *n,
                           drift_err *err) {
    tr_h5_quiet();
    if (!r || !rows || !n) return drift_err_set(err, DRIFT_E_INTERNAL, NULL, "read_notes: NULL argument");
    void *buf = NULL;
    int rc = read_committed(r, r->notes, TR_NOTES, TR_T_NOTES, 2, after_step, &buf, n, err);
    drift_trace_note *nt = buf;
    for (size_t i = 0; !rc && i < *n; i++) nt[i].text[DRIFT_TRACE_NOTE_MAX - 1] = '\0';
    *rows = nt;
    return rc;
}

size_t drift_trace_reader_n_metric_sites(const drift_trace_reader *r) { return r ? r->n_mnames : 0; }

const char *drift_trace_reader_metric_site(const drift_trace_reader *r, size_t i) {
    return r && i < r->n_mnames ? r->mnames_v[i] : NULL;
}
