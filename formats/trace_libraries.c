/* /libraries: the recording's GPU and library identity (docs/format.md
 * section 2.1, formats/libraries.h): read back from a trace. Every attribute
 * is optional (a missing one is unknown); a present one of the wrong type,
 * or a string longer than its field, is refused naming the attribute. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/trace_internal.h"

/* A string attribute into dst (dsz bytes with the NUL), if present. */
static int read_str(hid_t g, const char *name, char *dst, size_t dsz, const char *file, drift_err *err) {
    if (!tr_attr_exists(g, name)) return DRIFT_OK;
    char *s = NULL;
    int rc = tr_read_attr_str(g, name, dsz - 1, &s, file, TR_LIBRARIES, err);
    if (rc) return rc;
    /* the attribute may hold a NUL before its end: strlen, not its size */
    snprintf(dst, dsz, "%s", s);
    free(s);
    return DRIFT_OK;
}

static int read_i64(hid_t g, const char *name, int64_t *dst, const char *file, drift_err *err) {
    if (!tr_attr_exists(g, name)) return DRIFT_OK;
    int64_t v = 0;
    int rc = tr_read_attr_i64(g, name, &v, file, TR_LIBRARIES, err);
    if (rc) return rc;
    if (v < 0 || v > INT32_MAX) {
        char w[600];
        snprintf(w, sizeof w, "%s:%s", file, TR_LIBRARIES);
        return drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"%s\": expected a version 0..%d, found %lld", name,
                             INT32_MAX, (long long)v);
    }
    *dst = v;
    return DRIFT_OK;
}

/* A workspace size in bytes (0: unknown) into dst, if present: 0..16 GiB. */
static int read_ws(hid_t g, const char *name, int64_t *dst, const char *file, drift_err *err) {
    if (!tr_attr_exists(g, name)) return DRIFT_OK;
    int64_t v = 0;
    int rc = tr_read_attr_i64(g, name, &v, file, TR_LIBRARIES, err);
    if (rc) return rc;
    if (v < 0 || v > ((int64_t)1 << 34)) {
        char w[600];
        snprintf(w, sizeof w, "%s:%s", file, TR_LIBRARIES);
        return drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"%s\": expected a size in bytes 0..16 GiB, found %lld",
                             name, (long long)v);
    }
    *dst = v;
    return DRIFT_OK;
}

int drift_trace_read_libraries(drift_trace_reader *r, drift_libraries *out, int *present, drift_err *err) {
    tr_h5_quiet();
    if (!r || !out || !present) return drift_err_set(err, DRIFT_E_INTERNAL, NULL, "read_libraries: NULL argument");
    memset(out, 0, sizeof *out); /* all unknown (no link to libraries.c: trace_*.c stand alone) */
    *present = 0;
    int ok = tr_guard_path(r->file, TR_LIBRARIES, r->path, TR_LIBRARIES, err);
    if (ok == DRIFT_E_INPUT) return ok;
    if (ok != 1) return DRIFT_OK; /* recorded before it existed, or without a GPU */
    hid_t g = H5I_INVALID_HID;
    int rc = tr_open_group(r->file, TR_LIBRARIES, r->path, TR_LIBRARIES, &g, err);
    if (rc) return rc;
    int64_t cc[2] = {0, 0}, v[5] = {0, 0, 0, 0, 0};
    int ncc = 0;
    static const char *const vnames[5] = {"cuda_driver", "cuda_runtime", "cublaslt", "cublas", "cudnn"};
    rc = read_str(g, "gpu_name", out->gpu_name, sizeof out->gpu_name, r->path, err);
    if (!rc) rc = read_str(g, "torch", out->torch_version, sizeof out->torch_version, r->path, err);
    if (!rc) rc = read_str(g, "cublaslt_path", out->cublaslt_path, sizeof out->cublaslt_path, r->path, err);
    if (!rc) rc = read_str(g, "cudnn_path", out->cudnn_path, sizeof out->cudnn_path, r->path, err);
    if (!rc) rc = read_str(g, "inductor_mode", out->inductor_mode, sizeof out->inductor_mode, r->path, err);
    if (!rc) rc = read_str(g, "compiled_modules", out->compiled_modules, sizeof out->compiled_modules, r->path, err);
    int64_t compiled = 0;
    if (!rc) rc = read_i64(g, "compiled", &compiled, r->path, err);
    if (!rc && compiled > 1) {
        char w[600];
        snprintf(w, sizeof w, "%s:%s", r->path, TR_LIBRARIES);
        rc = drift_err_set(err, DRIFT_E_INPUT, w, "attribute \"compiled\": expected 0 or 1, found %lld", (long long)compiled);
    }
    out->compiled = (int)compiled;
    if (!rc) rc = read_ws(g, "cublas_workspace_bytes", &out->cublas_workspace, r->path, err);
    if (!rc) rc = read_ws(g, "cublaslt_workspace_bytes", &out->cublaslt_workspace, r->path, err);
    for (int k = 0; k < 5 && !rc; k++) rc = read_i64(g, vnames[k], &v[k], r->path, err);
    if (!rc && tr_attr_exists(g, "compute_capability")) {
        rc = tr_read_attr_i64v(g, "compute_capability", cc, 2, &ncc, r->path, TR_LIBRARIES, err);
        if (!rc && (ncc != 2 || cc[0] < 0 || cc[0] > 1000 || cc[1] < 0 || cc[1] > 1000)) {
            char w[600];
            snprintf(w, sizeof w, "%s:%s", r->path, TR_LIBRARIES);
            rc = drift_err_set(err, DRIFT_E_INPUT, w,
                               "attribute \"compute_capability\": expected [major, minor], each 0..1000");
        }
    }
    H5Gclose(g);
    if (rc) {
        memset(out, 0, sizeof *out);
        return rc;
    }
    out->cc_major = (int)cc[0];
    out->cc_minor = (int)cc[1];
    out->driver_version = v[0];
    out->runtime_version = v[1];
    out->cublaslt_version = v[2];
    out->cublas_version = v[3];
    out->cudnn_version = v[4];
    *present = 1;
    return DRIFT_OK;
}
