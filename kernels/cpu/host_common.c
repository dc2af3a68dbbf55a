/* Shared by the host backends (ref, cpu): thread policy, a deterministic
 * parallel-for. See host_internal.h. */
#include "kernels/cpu/host_internal.h"

#include "formats/alloc.h"
#include "kernels/backend_impl.h"
#include "kernels/gemm_forms.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* ---- the backend table shared by the host backends ---- */

typedef struct host_ctx {
    int nthreads;
    int attn_tile;
    int gemm_table; /* cpu: gpu_as= (kernels/gemm_forms.h), -1 none */
} host_ctx;

int drift_host_backend_threads(const drift_backend *be) { return ((const host_ctx *)be->ctx)->nthreads; }
int drift_host_backend_attn_tile(const drift_backend *be) { return ((const host_ctx *)be->ctx)->attn_tile; }
int drift_host_backend_gemm_table(const drift_backend *be) { return ((const host_ctx *)be->ctx)->gemm_table; }

static int host_sync(const drift_backend *be, drift_err *err) {
    (void)be;
    (void)err;
    return DRIFT_OK;
}

static void host_destroy(drift_backend *be) {
    if (!be) return;
    drift_free(be->ctx);
    drift_free(be);
}

int drift_host_backend_new(const drift_backend_opts *o, const char *name, const drift_backend *iface, int cpu_options,
                           drift_backend **out, drift_err *err) {
    static const char *const keys[] = {"threads", NULL}, *const cpu_keys[] = {"threads", "attn_tile", "gpu_as", NULL};
    int nthreads = 1;
    long tile = DRIFT_CPU_ATTN_TILE;
    int rc = drift_backend_opts_check(o, cpu_options ? cpu_keys : keys, err);
    if (!rc) rc = drift_backend_host_threads(o, &nthreads, err);
    if (!rc && cpu_options) rc = drift_backend_opt_int(o, "attn_tile", 0, 1 << 20, &tile, err);
    const char *gas = cpu_options ? drift_backend_opt_str(o, "gpu_as") : NULL;
    const int gemm_table = drift_gemm_table_find(gas);
    if (!rc && gas && gemm_table < 0 && strcmp(gas, "none"))
        rc = drift_err_set(err, DRIFT_E_INPUT, "backend",
                           "backend '%s': option gpu_as=%s: expected none or a GPU drift has GEMM forms for "
                           "(kernels/gemm_forms.c; docs/gemm-forms.md)", o->spec, gas);
    if (rc) return rc;
    drift_backend *be = drift_calloc(1, sizeof *be);
    host_ctx *ctx = drift_calloc(1, sizeof *ctx);
    if (!be || !ctx) {
        drift_free(be);
        drift_free(ctx);
        return drift_err_set(err, DRIFT_E_NOMEM, name, "cannot allocate the %s backend", name);
    }
    *be = *iface;
    ctx->nthreads = nthreads;
    ctx->attn_tile = (int)tile;
    ctx->gemm_table = gemm_table;
    be->name = name;
    be->ctx = ctx;
    be->sync = host_sync;
    be->destroy = host_destroy;
    *out = be;
    return DRIFT_OK;
}
