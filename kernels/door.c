/* The door into the kernels (kernels/backend.h): every drift_backend_*
 * call is checked here once, then dispatched to the backend's table
 * (kernels/backend_impl.h), so that no backend repeats these checks. */
#include <stdio.h>
#include <string.h>

#include "kernels/backend_impl.h"

const char *drift_backend_name(const drift_backend *be) { return be && be->name ? be->name : "(none)"; }

/* One tensor handed to be: allocated there, a valid shape whose numel is
 * t->numel, a dtype be stores. what/idx name it ("input 1", "out 0"). */
static int check_tensor(const drift_backend *be, const char *where, const drift_tensor *t, const char *what, int idx,
                        drift_err *err) {
    if (!t) return drift_err_set(err, DRIFT_E_INPUT, where, "%s %d is NULL", what, idx);
    int64_t n = drift_shape_numel(t->ndim, t->shape);
    if (n < 0) return drift_err_set(err, DRIFT_E_INPUT, where, "%s %d has an invalid shape (ndim %d)", what, idx, t->ndim);
    if (t->numel != n)
        return drift_err_set(err, DRIFT_E_INPUT, where, "%s %d: numel %lld does not match its shape (%lld)", what, idx,
                             (long long)t->numel, (long long)n);
    if (!t->data) return drift_err_set(err, DRIFT_E_INPUT, where, "%s %d is not allocated", what, idx);
    if (t->be != be)
        return drift_err_set(err, DRIFT_E_INPUT, where, "%s %d belongs to backend '%s', not '%s'", what, idx,
                             drift_backend_name(t->be), drift_backend_name(be));
    if (!be->stores(t->dtype))
        return drift_err_set(err, DRIFT_E_INPUT, where, "%s %d has dtype %s, which backend '%s' does not store", what,
                             idx, drift_dtype_name(t->dtype), be->name);
    return DRIFT_OK;
}

static int check_be(const drift_backend *be, const char *what, drift_err *err) {
    if (!be) return drift_err_set(err, DRIFT_E_INTERNAL, "backend", "%s: NULL backend", what);
    return DRIFT_OK;
}

int drift_backend_supports(const drift_backend *be, const drift_op *op) {
    if (!be || !op || (int)op->kind < 0 || op->kind >= DRIFT_OP_COUNT) return 0;
    return be->supports_op(be, op) != 0;
}

int drift_backend_alloc(const drift_backend *be, drift_tensor *t, drift_err *err) {
    int rc = check_be(be, "alloc", err);
    if (rc) return rc;
    if (!t) return drift_err_set(err, DRIFT_E_INTERNAL, be->name, "alloc: NULL tensor");
    if (!be->stores(t->dtype))
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, be->name, "alloc: backend '%s' does not store %s tensors",
                             be->name, drift_dtype_name(t->dtype));
    int64_t n = drift_shape_numel(t->ndim, t->shape);
    if (n < 0) return drift_err_set(err, DRIFT_E_INPUT, be->name, "alloc: invalid shape (ndim %d)", t->ndim);
    t->numel = n;
    t->data = NULL;
    rc = be->alloc(be, t, err);
    if (rc) return rc;
    t->numel = n;
    t->be = be;
    return DRIFT_OK;
}

void drift_backend_release(const drift_backend *be, drift_tensor *t) {
    if (!be || !t || !t->data) return;
    be->release(be, t);
    t->data = NULL;
}

static int check_io(const drift_backend *be, const char *what, const drift_tensor *t, const void *buf, drift_err *err) {
    int rc = check_be(be, what, err);
    if (rc) return rc;
    char where[64];
    snprintf(where, sizeof where, "%s %s", be->name, what);
    if ((rc = check_tensor(be, where, t, "tensor", 0, err))) return rc;
    if (!buf && t->numel > 0) return drift_err_set(err, DRIFT_E_INPUT, where, "NULL host buffer");
    return DRIFT_OK;
}

int drift_backend_upload_f32(const drift_backend *be, drift_tensor *t, const float *src, drift_err *err) {
    int rc = check_io(be, "upload", t, src, err);
    return rc ? rc : be->upload_f32(be, t, src, err);
}

int drift_backend_upload_f64(const drift_backend *be, drift_tensor *t, const double *src, drift_err *err) {
    int rc = check_io(be, "upload", t, src, err);
    return rc ? rc : be->upload_f64(be, t, src, err);
}

int drift_backend_download_f32(const drift_backend *be, const drift_tensor *t, float *dst, drift_err *err) {
    int rc = check_io(be, "download", t, dst, err);
    return rc ? rc : be->download_f32(be, t, dst, err);
}

int drift_backend_download_f64(const drift_backend *be, const drift_tensor *t, double *dst, drift_err *err) {
    int rc = check_io(be, "download", t, dst, err);
    return rc ? rc : be->download_f64(be, t, dst, err);
}

static int shapes_equal(int na, const int64_t *a, int nb, const int64_t *b) {
    if (na != nb) return 0;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

int drift_backend_run(const drift_backend *be, const drift_op *op, const drift_tensor *const *in,
                      drift_tensor *out, drift_err *err) {
    int rc = check_be(be, "run", err);
    if (rc) return rc;
    if (!op || !out) return drift_err_set(err, DRIFT_E_INTERNAL, "op", "run: NULL op or out");
    if ((int)op->kind < 0 || op->kind >= DRIFT_OP_COUNT)
        return drift_err_set(err, DRIFT_E_INPUT, "op", "invalid op kind %d", (int)op->kind);
    char where[64];
    snprintf(where, sizeof where, "op %s", drift_op_name(op->kind));
    if (!be->supports_op(be, op))
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, where, "backend '%s' does not support %s with compute %s, out %s",
                             be->name, drift_op_name(op->kind), drift_dtype_name(op->compute),
                             drift_dtype_name(op->out));
    /* 0..DRIFT_OP_MAX_IN here (FILL takes none); each kind's own range is checked by drift_op_infer_shape */
    if (op->n_in < 0 || op->n_in > DRIFT_OP_MAX_IN || (op->n_in > 0 && !in))
        return drift_err_set(err, DRIFT_E_INPUT, where, "n_in = %d (expected 0..%d inputs)", op->n_in, DRIFT_OP_MAX_IN);
    for (int i = 0; i < op->n_in; i++)
        if (!in[i]) return drift_err_set(err, DRIFT_E_INPUT, where, "input %d is NULL", i);
    int nd = out->ndim;
    int64_t shape[DRIFT_MAX_DIMS];
    if (nd < 0 || nd > DRIFT_MAX_DIMS) return drift_err_set(err, DRIFT_E_INPUT, where, "out has an invalid ndim %d", nd);
    memcpy(shape, out->shape, sizeof shape);
    if ((rc = drift_op_infer_shape(op, in, &nd, shape, err))) return rc;
    for (int i = 0; i < op->n_in; i++)
        if ((rc = check_tensor(be, where, in[i], "input", i, err))) return rc;
    if ((rc = check_tensor(be, where, out, "out", 0, err))) return rc;
    if (out->dtype != op->out)
        return drift_err_set(err, DRIFT_E_INPUT, where, "out dtype %s differs from op->out %s",
                             drift_dtype_name(out->dtype), drift_dtype_name(op->out));
    if (!shapes_equal(nd, shape, out->ndim, out->shape))
        return drift_err_set(err, DRIFT_E_INPUT, where, "out shape does not match the op's output shape");
    /* out must not overlap an input: ops write out while still reading inputs. */
    uintptr_t o0 = (uintptr_t)out->data, o1 = o0 + (uintptr_t)out->numel * be->elem_bytes(out->dtype);
    for (int i = 0; i < op->n_in; i++) {
        uintptr_t i0 = (uintptr_t)in[i]->data, i1 = i0 + (uintptr_t)in[i]->numel * be->elem_bytes(in[i]->dtype);
        if (out->numel > 0 && in[i]->numel > 0 && o0 < i1 && i0 < o1)
            return drift_err_set(err, DRIFT_E_INPUT, where, "out overlaps input %d (in-place ops are not supported)", i);
    }
    if (out->numel == 0) return DRIFT_OK;
    return be->run(be, op, in, out, err);
}

int drift_backend_metrics(const drift_backend *be, const drift_tensor *t, const drift_tensor *r,
                          drift_metric_acc *acc, drift_err *err) {
    int rc = check_be(be, "metrics", err);
    if (rc) return rc;
    if (!acc) return drift_err_set(err, DRIFT_E_INTERNAL, be->name, "metrics: NULL acc");
    char where[64];
    snprintf(where, sizeof where, "%s metrics", be->name);
    if ((rc = check_tensor(be, where, t, "candidate", 0, err))) return rc;
    if ((rc = check_tensor(be, where, r, "reference", 0, err))) return rc;
    if (!shapes_equal(t->ndim, t->shape, r->ndim, r->shape))
        return drift_err_set(err, DRIFT_E_INPUT, where, "candidate and reference shapes differ");
    return be->metrics(be, t, r, acc, err);
}

int drift_backend_sync(const drift_backend *be, drift_err *err) {
    int rc = check_be(be, "sync", err);
    return rc ? rc : be->sync(be, err);
}

int drift_backend_alias(const drift_backend *be, const drift_tensor *base, int64_t elem_offset, drift_tensor *out,
                        drift_err *err) {
    int rc = check_be(be, "alias", err);
    if (rc) return rc;
    if (!be->alias) return drift_err_set(err, DRIFT_E_UNSUPPORTED, be->name, "alias: backend '%s' never aliases", be->name);
    char where[64];
    snprintf(where, sizeof where, "%s alias", be->name);
    if ((rc = check_tensor(be, where, base, "base", 0, err))) return rc;
    if (!out) return drift_err_set(err, DRIFT_E_INTERNAL, where, "NULL out");
    int64_t n = drift_shape_numel(out->ndim, out->shape);
    if (n < 0 || out->dtype != base->dtype || elem_offset < 0 || elem_offset > base->numel ||
        n > base->numel - elem_offset)
        return drift_err_set(err, DRIFT_E_INPUT, where, "%lld elements at offset %lld do not fit a %lld-element %s base",
                             (long long)n, (long long)elem_offset, (long long)base->numel, drift_dtype_name(base->dtype));
    rc = be->alias(be, base, elem_offset, out, err);
    if (rc) return rc;
    out->numel = n;
    out->be = be;
    return DRIFT_OK;
}

int drift_backend_can_alias(const drift_backend *be) { return be && be->alias != NULL; }

void drift_backend_last_choice(const drift_backend *be, char *buf, size_t bufsz) {
    if (!buf || bufsz == 0) return;
    buf[0] = '\0';
    if (be && be->last_choice) be->last_choice(be, buf, bufsz);
}
