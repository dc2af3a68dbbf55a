/* The cpu backend's fp64 ops (host_internal.h): an op that touches F64
 * runs the fp64 oracle's body (kernels/ref/ref_backend.c, no new math), so
 * a cpu replay of a graph's fp64 part (Flux's RoPE table) gives the ref
 * backend's values bit for bit. F64 tensors are stored as doubles, the
 * others as floats holding values of their dtype; non-F64 inputs are
 * widened (exactly) into temporaries first. */
#include <string.h>

#include "formats/alloc.h"
#include "kernels/cpu/host_internal.h"

int drift_cpu_op_is_f64(const drift_op *op, const drift_tensor *const *in) {
    if (drift_dtype_wide(op->out) || drift_dtype_wide(op->compute)) return 1;
    for (int i = 0; i < op->n_in; i++)
        if (drift_dtype_wide(in[i]->dtype)) return 1;
    return 0;
}

/* A fp64 copy of t (a float-stored tensor) in *tmp (caller frees *tmp). */
static int widen(const drift_tensor *t, drift_tensor *w, double **tmp, drift_err *err) {
    *w = *t;
    double *d = drift_malloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof(double));
    if (!d) return drift_err_set(err, DRIFT_E_NOMEM, "cpu", "fp64 op: cannot allocate %lld elements", (long long)t->numel);
    const float *s = t->data;
    for (int64_t i = 0; i < t->numel; i++) d[i] = s[i];
    w->data = d;
    *tmp = d;
    return DRIFT_OK;
}

int drift_cpu_run_f64(int nthreads, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                      drift_err *err) {
    enum { OUT = DRIFT_OP_MAX_IN }; /* tmp[OUT]: the fp64 output */
    drift_tensor wide[DRIFT_OP_MAX_IN], wout = *out;
    const drift_tensor *win[DRIFT_OP_MAX_IN] = {NULL};
    double *tmp[DRIFT_OP_MAX_IN + 1] = {NULL};
    int rc = DRIFT_OK;
    for (int i = 0; i < op->n_in && !rc; i++) {
        win[i] = in[i];
        if (!drift_dtype_wide(in[i]->dtype) && !(rc = widen(in[i], &wide[i], &tmp[i], err))) win[i] = &wide[i];
    }
    if (!rc && !drift_dtype_wide(out->dtype)) {
        tmp[OUT] = drift_malloc((size_t)(out->numel > 0 ? out->numel : 1) * sizeof(double));
        if (!tmp[OUT])
            rc = drift_err_set(err, DRIFT_E_NOMEM, "cpu", "fp64 op: cannot allocate %lld elements", (long long)out->numel);
        wout.data = tmp[OUT];
    }
    if (!rc) rc = drift_ref_run_op(nthreads, op, win, &wout, err);
    if (!rc && !drift_dtype_wide(out->dtype)) {
        float *y = out->data;
        for (int64_t i = 0; i < out->numel; i++) y[i] = drift_round_to((float)tmp[OUT][i], out->dtype);
    }
    for (int i = 0; i <= OUT; i++) drift_free(tmp[i]);
    return rc;
}
