/* A trace's /params read in the background (params_trace_stream.h). */
#include "replay/exec/params_trace_stream.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "formats/alloc.h"
#include "formats/trace.h"

struct drift_params_trace_stream {
    drift_trace_reader *r;       /* owned; only the reader thread uses it until the join */
    const drift_param_table *t;
    const size_t *order;
    float *const *dst;
    long *k;                     /* per table index: the trace's param index */
    unsigned char *done;         /* per table index, under mu */
    atomic_int cancel;
    int failed, running, started;
    drift_err err;
    uint64_t bytes;
    double t0, t_end;
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static double ts_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Trace param index of every table parameter, each whole with the table's shape; else DRIFT_E_INPUT. */
static int match(drift_trace_reader *r, const drift_param_table *t, long *k, drift_err *err) {
    for (size_t i = 0; i < t->n; i++) {
        const drift_param_info *pi = &t->params[i];
        drift_trace_param_info info;
        long j = drift_trace_reader_find_param(r, pi->fqn);
        if (j < 0 || drift_trace_reader_param(r, (size_t)j, &info) != DRIFT_OK)
            return drift_err_set(err, DRIFT_E_INPUT, drift_trace_reader_path(r), "/params has no parameter '%s'", pi->fqn);
        int same = !info.is_shard && info.ndim == pi->ndim;
        for (int d = 0; same && d < pi->ndim; d++) same = info.shape[d] == pi->shape[d];
        if (!same)
            return drift_err_set(err, DRIFT_E_INPUT, drift_trace_reader_path(r),
                                 "/params/%s: expected the whole tensor with the model's shape (%d dims, numel %lld)",
                                 pi->fqn, pi->ndim, (long long)pi->numel);
        k[i] = j;
    }
    return DRIFT_OK;
}

int drift_params_trace_streamable(const char *path, const drift_param_table *t) {
    drift_trace_reader *r = NULL;
    long *k = drift_calloc(t->n ? t->n : 1, sizeof *k);
    int ok = k && drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, NULL) == DRIFT_OK &&
             match(r, t, k, NULL) == DRIFT_OK;
    drift_trace_reader_close(r);
    drift_free(k);
    return ok;
}

static void *reader(void *arg) {
    drift_params_trace_stream *s = arg;
    for (size_t n = 0; n < s->t->n && !atomic_load(&s->cancel); n++) {
        size_t i = s->order[n];
        const drift_param_info *pi = &s->t->params[i];
        drift_err e;
        drift_err_clear(&e);
        int rc = drift_trace_read_param(s->r, (size_t)s->k[i], s->dst[i], (size_t)pi->numel, &e);
        pthread_mutex_lock(&s->mu);
        if (rc) {
            s->failed = 1;
            s->err = e;
        } else {
            s->done[i] = 1;
            s->bytes += (uint64_t)pi->numel * sizeof(float);
        }
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        if (rc) break;
    }
    pthread_mutex_lock(&s->mu);
    s->t_end = ts_now();
    s->running = 0;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void stream_free(drift_params_trace_stream *s) {
    drift_trace_reader_close(s->r);
    drift_free(s->k);
    drift_free(s->done);
    drift_free(s);
}

int drift_params_trace_stream_start(const char *path, const drift_param_table *t, const size_t *order, float *const *dst,
                                    int background, drift_params_trace_stream **out, drift_err *err) {
    *out = NULL;
    drift_params_trace_stream *s = drift_calloc(1, sizeof *s);
    if (!s) return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
    s->t = t;
    s->order = order;
    s->dst = dst;
    s->k = drift_calloc(t->n ? t->n : 1, sizeof *s->k);
    s->done = drift_calloc(t->n ? t->n : 1, 1);
    int rc = s->k && s->done ? DRIFT_OK : drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
    if (!rc) rc = drift_trace_reader_open(&s->r, path, DRIFT_TRACE_OPEN_NORMAL, err);
    if (!rc) rc = match(s->r, t, s->k, err);
    if (rc) {
        stream_free(s);
        return rc;
    }
    atomic_init(&s->cancel, 0);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->t0 = s->t_end = ts_now();
    s->running = 1;
    if (background && pthread_create(&s->tid, NULL, reader, s) == 0) s->started = 1;
    else reader(s); /* no thread: read everything now, the same values */
    *out = s;
    return DRIFT_OK;
}

int drift_params_trace_stream_wait(drift_params_trace_stream *s, size_t i, drift_err *err) {
    if (i >= s->t->n) return drift_err_set(err, DRIFT_E_INTERNAL, "params", "trace stream: parameter %zu of %zu", i, s->t->n);
    pthread_mutex_lock(&s->mu);
    while (!s->done[i] && !s->failed && s->running) pthread_cond_wait(&s->cv, &s->mu);
    const int ok = s->done[i], code = s->failed ? s->err.code : 0;
    pthread_mutex_unlock(&s->mu);
    if (ok) return DRIFT_OK;
    return drift_err_set(err, code ? code : DRIFT_E_INTERNAL, "params", "reading the trace's /params failed");
}

int drift_params_trace_stream_finish(drift_params_trace_stream *s, int cancel, uint64_t *bytes, double *seconds,
                                     drift_err *err) {
    if (bytes) *bytes = 0;
    if (seconds) *seconds = 0;
    if (!s) return DRIFT_OK;
    if (cancel) atomic_store(&s->cancel, 1);
    if (s->started) pthread_join(s->tid, NULL);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    if (bytes) *bytes = s->bytes;
    if (seconds) *seconds = s->t_end - s->t0;
    int rc = DRIFT_OK;
    if (s->failed) {
        rc = s->err.code ? s->err.code : DRIFT_E_INTERNAL;
        if (err) *err = s->err;
    }
    stream_free(s);
    return rc;
}
