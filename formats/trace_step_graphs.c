/* Per-step graphs (docs/format.md 9.1): which graph each committed step
 * uses, from its "step-graph v1" note, and the documents in /graph_steps. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "formats/trace_internal.h"

#define SG_PREFIX "step-graph v1 "

/* Index of step in the committed steps (sorted, strictly increasing), or -1. */
static long step_index(const drift_trace_step *st, size_t n, int64_t step) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (st[mid].step < step) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && st[lo].step == step ? (long)lo : -1;
}

/* Parses one note's text after the prefix into g; 0, or -1 with what was expected in why. */
static int parse_note(const char *t, drift_trace_step_graph *g, const char **why) {
    if (!strncmp(t, "graph=none reason=", 18)) {
        g->graph = -1;
        snprintf(g->reason, sizeof g->reason, "%s", t + 18);
        return 0;
    }
    long long k = 0, off = 0, len = 0;
    int used = 0;
    if (sscanf(t, "graph=%lld offset=%lld length=%lld%n", &k, &off, &len, &used) != 3 || t[used] != '\0') {
        *why = "\"graph=K offset=O length=L\" or \"graph=none reason=TEXT\"";
        return -1;
    }
    if (k < 1 || off < 0 || len < 1 || (unsigned long long)len > DRIFT_TRACE_GRAPH_MAX || off > INT64_MAX - len) {
        *why = "graph >= 1, offset >= 0 and length in 1..64 MiB";
        return -1;
    }
    g->graph = k;
    g->offset = off;
    g->length = len;
    return 0;
}

int drift_trace_read_step_graphs(drift_trace_reader *r, drift_trace_step_graph **out, size_t *n, drift_err *err) {
    *out = NULL;
    *n = 0;
    if (!r) return drift_err_set(err, DRIFT_E_INTERNAL, NULL, "read_step_graphs: NULL reader");
    size_t ns = 0;
    const drift_trace_step *st = drift_trace_reader_steps(r, &ns);
    drift_trace_step_graph *g = drift_calloc(ns ? ns : 1, sizeof *g);
    if (!g) return drift_err_set(err, DRIFT_E_NOMEM, r->path, "out of memory");
    for (size_t i = 0; i < ns; i++) g[i].step = st[i].step;
    drift_trace_note *notes = NULL;
    size_t nn = 0;
    int rc = ns ? drift_trace_read_notes(r, INT64_MIN, &notes, &nn, err) : DRIFT_OK;
    for (size_t i = 0; !rc && i < nn; i++) {
        if (strncmp(notes[i].text, SG_PREFIX, strlen(SG_PREFIX)) != 0) continue;
        long k = step_index(st, ns, notes[i].step);
        if (k < 0) continue; /* not committed */
        const char *why = NULL;
        drift_trace_step_graph one = {.step = notes[i].step};
        if (parse_note(notes[i].text + strlen(SG_PREFIX), &one, &why)) {
            char w[600];
            snprintf(w, sizeof w, "%s:%s", r->path, TR_NOTES);
            rc = drift_err_set(err, DRIFT_E_INPUT, w, "step %lld: note \"%.80s\": expected %s", (long long)notes[i].step,
                               notes[i].text, why);
            break;
        }
        g[k] = one; /* the step's last such note counts */
    }
    free(notes);
    if (rc) {
        free(g);
        return rc;
    }
    *out = g;
    *n = ns;
    return DRIFT_OK;
}

int drift_trace_step_graph_of(drift_trace_reader *r, int64_t step, drift_trace_step_graph *out, drift_err *err) {
    memset(out, 0, sizeof *out);
    out->step = step;
    drift_trace_step_graph *all = NULL;
    size_t n = 0;
    int rc = drift_trace_read_step_graphs(r, &all, &n, err);
    if (rc) return rc;
    for (size_t i = 0; i < n; i++)
        if (all[i].step == step) *out = all[i];
    free(all);
    return DRIFT_OK;
}

int drift_trace_read_step_graph(drift_trace_reader *r, const drift_trace_step_graph *g, char **json, size_t *len,
                                drift_err *err) {
    tr_h5_quiet();
    *json = NULL;
    *len = 0;
    if (!r || !g || g->graph < 1) return drift_err_set(err, DRIFT_E_INTERNAL, NULL, "read_step_graph: no per-step graph");
    char w[600];
    snprintf(w, sizeof w, "%s:%s", r->path, TR_GRAPH_STEPS);
    int ok = tr_guard_path(r->file, TR_GRAPH_STEPS, r->path, TR_GRAPH_STEPS, err);
    if (ok == DRIFT_E_INPUT) return ok;
    if (ok != 1)
        return drift_err_set(err, DRIFT_E_INPUT, w, "missing, but step %lld's note names graph %lld in it",
                             (long long)g->step, (long long)g->graph);
    hid_t ds = H5I_INVALID_HID;
    int rc = tr_open_dataset(r->file, TR_GRAPH_STEPS, r->view, r->path, TR_GRAPH_STEPS, &ds, err);
    if (rc) return rc;
    if (r->swmr) H5Drefresh(ds);
    hid_t t = H5Dget_type(ds), fs = H5Dget_space(ds), ms = H5I_INVALID_HID;
    hsize_t ext = 0;
    char *buf = NULL;
    if (t < 0 || fs < 0 || H5Tget_class(t) != H5T_INTEGER || H5Tget_size(t) != 1 || H5Sget_simple_extent_ndims(fs) != 1 ||
        H5Sget_simple_extent_dims(fs, &ext, NULL) < 0) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "expected a 1-D dataset of bytes");
    } else if ((uint64_t)g->offset > ext || (uint64_t)g->length > ext - (uint64_t)g->offset) {
        rc = drift_err_set(err, DRIFT_E_INPUT, w,
                           "step %lld's graph %lld lies at bytes %lld..%lld, but the dataset holds %llu bytes",
                           (long long)g->step, (long long)g->graph, (long long)g->offset,
                           (long long)(g->offset + g->length), (unsigned long long)ext);
    } else if (!(buf = drift_malloc((size_t)g->length + 1))) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, w, "out of memory");
    } else {
        hsize_t start = (hsize_t)g->offset, cnt = (hsize_t)g->length;
        ms = H5Screate_simple(1, &cnt, NULL);
        if (ms < 0 || H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &cnt, NULL) < 0 ||
            H5Dread(ds, H5T_NATIVE_UCHAR, ms, fs, H5P_DEFAULT, buf) < 0) {
            rc = tr_h5_fail(err, DRIFT_E_INPUT, r->path, TR_GRAPH_STEPS, "cannot read a step's graph");
        } else {
            buf[g->length] = '\0';
            *len = strlen(buf); /* a NUL inside ends the document, as /graph's padding does */
            *json = buf;
            buf = NULL;
        }
    }
    free(buf);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (t >= 0) H5Tclose(t);
    H5Dclose(ds);
    return rc;
}
