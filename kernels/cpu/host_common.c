/* Shared by the host backends (ref, cpu): thread policy, a deterministic
 * parallel-for, run() validation and broadcast plans. See host_internal.h. */
#include "kernels/cpu/host_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int drift_host_threads(void) {
    const char *env = getenv("DRIFT_CPU_THREADS");
    if (env && *env) {
        char *end = NULL;
        long v = strtol(env, &end, 10);
        if (end && *end == '\0' && v >= 1 && v <= 256) return (int)v;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > DRIFT_HOST_MAX_THREADS) n = DRIFT_HOST_MAX_THREADS;
    return (int)n;
}

typedef struct range_job {
    drift_host_range_fn fn;
    void *ctx;
    int64_t begin, end;
} range_job;

static void *range_main(void *p) {
    range_job *j = p;
    j->fn(j->ctx, j->begin, j->end);
    return NULL;
}

void drift_host_parallel_for(int nthreads, int64_t n, int64_t grain, drift_host_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t nt = n / grain;
    if (nt > nthreads) nt = nthreads;
    if (nt > DRIFT_HOST_MAX_THREADS * 32) nt = DRIFT_HOST_MAX_THREADS * 32;
    if (nt <= 1) {
        fn(ctx, 0, n);
        return;
    }
    range_job jobs[DRIFT_HOST_MAX_THREADS * 32];
    pthread_t tids[DRIFT_HOST_MAX_THREADS * 32];
    int started[DRIFT_HOST_MAX_THREADS * 32];
    int64_t chunk = (n + nt - 1) / nt;
    int64_t njobs = 0;
    for (int64_t b = 0; b < n; b += chunk) {
        jobs[njobs].fn = fn;
        jobs[njobs].ctx = ctx;
        jobs[njobs].begin = b;
        jobs[njobs].end = b + chunk < n ? b + chunk : n;
        njobs++;
    }
    for (int64_t i = 1; i < njobs; i++) started[i] = pthread_create(&tids[i], NULL, range_main, &jobs[i]) == 0;
    fn(ctx, jobs[0].begin, jobs[0].end);
    for (int64_t i = 1; i < njobs; i++) {
        if (started[i])
            pthread_join(tids[i], NULL);
        else
            fn(ctx, jobs[i].begin, jobs[i].end);
    }
}

/* ------------------------------------------------------------------------ */

static int shapes_equal(int na, const int64_t *a, int nb, const int64_t *b) {
    if (na != nb) return 0;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

static int check_tensor(const drift_backend *be, const drift_op *op, const drift_tensor *t, const char *what,
                        int idx, drift_err *err) {
    char where[64];
    snprintf(where, sizeof where, "op %s", drift_op_name(op->kind));
    int64_t n = drift_shape_numel(t->ndim, t->shape);
    if (n < 0) return drift_err_set(err, DRIFT_E_INPUT, where, "%s %d has an invalid shape", what, idx);
    if (t->numel != n)
        return drift_err_set(err, DRIFT_E_INPUT, where, "%s %d: numel %lld does not match its shape (%lld)", what, idx,
                             (long long)t->numel, (long long)n);
    if (!t->data) return drift_err_set(err, DRIFT_E_INPUT, where, "%s %d is not allocated", what, idx);
    if (t->be != be)
        return drift_err_set(err, DRIFT_E_INPUT, where, "%s %d belongs to backend '%s', not '%s'", what, idx,
                             t->be ? t->be->name : "(none)", be->name);
    return DRIFT_OK;
}

int drift_host_check_run(const drift_backend *be, const drift_op *op, const drift_tensor *const *in,
                         const drift_tensor *out, size_t elem_size, drift_err *err) {
    if (!be || !op || !out) return drift_err_set(err, DRIFT_E_INTERNAL, "op", "run: NULL backend, op or out");
    if ((int)op->kind < 0 || op->kind >= DRIFT_OP_COUNT)
        return drift_err_set(err, DRIFT_E_INPUT, "op", "invalid op kind %d", (int)op->kind);
    char where[64];
    snprintf(where, sizeof where, "op %s", drift_op_name(op->kind));
    if (!be->supports_op(be, op))
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, where, "backend '%s' does not support %s with compute %s, out %s",
                             be->name, drift_op_name(op->kind), drift_dtype_name(op->compute),
                             drift_dtype_name(op->out));
    int nd = out->ndim;
    int64_t shape[DRIFT_MAX_DIMS];
    if (nd < 0 || nd > DRIFT_MAX_DIMS) return drift_err_set(err, DRIFT_E_INPUT, where, "out has an invalid ndim %d", nd);
    memcpy(shape, out->shape, sizeof shape);
    int rc = drift_op_infer_shape(op, in, &nd, shape, err);
    if (rc) return rc;
    for (int i = 0; i < op->n_in; i++)
        if ((rc = check_tensor(be, op, in[i], "input", i, err))) return rc;
    if ((rc = check_tensor(be, op, out, "out", 0, err))) return rc;
    if (out->dtype != op->out)
        return drift_err_set(err, DRIFT_E_INPUT, where, "out dtype %s differs from op->out %s",
                             drift_dtype_name(out->dtype), drift_dtype_name(op->out));
    if (!shapes_equal(nd, shape, out->ndim, out->shape))
        return drift_err_set(err, DRIFT_E_INPUT, where, "out shape does not match the op's output shape");
    /* out must not overlap an input: ops write out while still reading inputs. */
    uintptr_t o0 = (uintptr_t)out->data, o1 = o0 + (uintptr_t)out->numel * elem_size;
    for (int i = 0; i < op->n_in; i++) {
        uintptr_t i0 = (uintptr_t)in[i]->data, i1 = i0 + (uintptr_t)in[i]->numel * elem_size;
        if (out->numel > 0 && in[i]->numel > 0 && o0 < i1 && i0 < o1)
            return drift_err_set(err, DRIFT_E_INPUT, where, "out overlaps input %d (in-place ops are not supported)", i);
    }
    return DRIFT_OK;
}

/* ------------------------------------------------------------------------ */

void drift_host_bcast_plan(const drift_tensor *a, const drift_tensor *b, drift_bcast *bc) {
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    int64_t shp[DRIFT_MAX_DIMS], sa[DRIFT_MAX_DIMS], sb[DRIFT_MAX_DIMS];
    int64_t ca = 1, cb = 1;
    /* full (uncollapsed) strides, right-aligned, innermost first */
    for (int i = nd - 1; i >= 0; i--) {
        int ia = a->ndim - nd + i, ib = b->ndim - nd + i;
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        shp[i] = da == 1 ? db : da;
        sa[i] = da == 1 ? 0 : ca;
        sb[i] = db == 1 ? 0 : cb;
        ca *= da;
        cb *= db;
    }
    /* drop size-1 dims, then merge neighbours whose strides chain */
    int m = 0;
    int64_t numel = 1;
    for (int i = 0; i < nd; i++) {
        numel *= shp[i];
        if (shp[i] == 1) continue;
        if (m > 0 && bc->sa[m - 1] == sa[i] * shp[i] && bc->sb[m - 1] == sb[i] * shp[i]) {
            bc->shape[m - 1] *= shp[i];
            bc->sa[m - 1] = sa[i];
            bc->sb[m - 1] = sb[i];
            continue;
        }
        bc->shape[m] = shp[i];
        bc->sa[m] = sa[i];
        bc->sb[m] = sb[i];
        m++;
    }
    if (m == 0) {
        bc->shape[0] = 1;
        bc->sa[0] = 0;
        bc->sb[0] = 0;
        m = 1;
    }
    bc->nd = m;
    bc->numel = numel;
}
