/* The checkpoint job pool: hash (and check) a tensor's bytes, widen them;
 * in the foreground or in the background (checkpoint_internal.h). */
#define _GNU_SOURCE /* madvise */
#include "formats/checkpoint_internal.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "formats/alloc.h"
#include "formats/hash64.h"

/* Records job k's failure; the lowest failing job's error is kept (deterministic
 * whatever the thread count when one tensor is bad). */
static void pool_fail(drift_ckpt_pool *p, size_t k, int code, const char *where, const char *fmt, const char *a,
                      const char *b, const char *c) {
    pthread_mutex_lock(&p->mu);
    if (!atomic_load(&p->failed) || k < p->err_job) {
        p->err_job = k;
        drift_err_set(&p->err, code, where, fmt, a, b, c);
    }
    atomic_store(&p->failed, 1);
    pthread_mutex_unlock(&p->mu);
}

#define BOUNCE 65536

/* 1 when job k succeeded. */
static int run_job(drift_ckpt_pool *p, size_t k) {
    drift_ckpt_job *j = &p->jobs[k];
    const unsigned char *src = j->file->map + j->offset;
    madvise((void *)((uintptr_t)src & ~(uintptr_t)4095), (size_t)j->nbytes + ((uintptr_t)src & 4095), MADV_WILLNEED);
    uint64_t h = drift_hash64_finish(drift_hash64_partial(src, (size_t)j->nbytes, 0), j->nbytes);
    if (j->hash_out) *j->hash_out = h;
    if (j->verify && h != j->expect) {
        char got[17], want[17], msg[64];
        drift_hash64_hex(h, got);
        drift_hash64_hex(j->expect, want);
        snprintf(msg, sizeof msg, "%s, the trace recorded %s", got, want);
        pool_fail(p, k, DRIFT_E_INPUT, j->file->path,
                  "tensor '%s' in %s: content hash (drift-sum64) %s: the checkpoint changed since the recording",
                  j->name, j->file->path, msg);
        return 0;
    }
    if (!j->dst) return 1;
    size_t es = drift_dtype_size(j->dtype);
    if (((uintptr_t)src % es) == 0) {
        drift_dtype_to_f32_n(src, j->dtype, j->dst, (size_t)j->numel);
        return 1;
    }
    /* a misaligned tensor (legal in a file whose header length is odd) goes through a bounce buffer */
    _Alignas(8) unsigned char bounce[BOUNCE];
    size_t per = BOUNCE / es;
    for (size_t i = 0; i < (size_t)j->numel; i += per) {
        size_t m = (size_t)j->numel - i < per ? (size_t)j->numel - i : per;
        memcpy(bounce, src + i * es, m * es);
        drift_dtype_to_f32_n(bounce, j->dtype, j->dst + i, m);
    }
    return 1;
}

static void *pool_thread(void *arg) {
    drift_ckpt_pool *p = arg;
    for (;;) {
        if (atomic_load(&p->failed) || atomic_load(&p->cancel)) break;
        size_t k = atomic_fetch_add(&p->next, 1);
        if (k >= p->n) break;
        int ok = run_job(p, k);
        pthread_mutex_lock(&p->mu);
        p->done[k] = (unsigned char)ok;
        pthread_cond_broadcast(&p->cv); /* a waiter for k, or one to tell of the failure */
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_lock(&p->mu);
    double t = drift_ckpt_now_s();
    if (t > p->t_end) p->t_end = t;
    p->running--;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int drift_ckpt_pool_start(drift_ckpt_pool *p, drift_ckpt_job *jobs, size_t n, int threads, int background,
                          drift_err *err) {
    memset(p, 0, sizeof *p);
    p->jobs = jobs;
    p->n = n;
    atomic_init(&p->next, 0);
    atomic_init(&p->failed, 0);
    atomic_init(&p->cancel, 0);
    p->done = drift_calloc(n ? n : 1, 1);
    if (!p->done) return drift_err_set(err, DRIFT_E_NOMEM, "checkpoint", "out of memory");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->t0 = p->t_end = drift_ckpt_now_s();
    if (threads < 1) threads = 1;
    if (threads > CKPT_MAX_THREADS) threads = CKPT_MAX_THREADS;
    if ((size_t)threads > n) threads = n ? (int)n : 1;
    const int spawn = background ? threads : threads - 1; /* the foreground caller is one of them */
    for (int t = 0; t < spawn; t++) {
        pthread_mutex_lock(&p->mu);
        p->running++;
        pthread_mutex_unlock(&p->mu);
        if (pthread_create(&p->tid[p->started], NULL, pool_thread, p) != 0) { /* fewer threads, same result */
            pthread_mutex_lock(&p->mu);
            p->running--;
            pthread_mutex_unlock(&p->mu);
            break;
        }
        p->started++;
    }
    if (!background || p->started == 0) {
        pthread_mutex_lock(&p->mu);
        p->running++;
        pthread_mutex_unlock(&p->mu);
        pool_thread(p);
    }
    p->threads = p->started + (!background || p->started == 0);
    return DRIFT_OK;
}

int drift_ckpt_pool_wait(drift_ckpt_pool *p, size_t k, drift_err *err) {
    if (k >= p->n) return drift_err_set(err, DRIFT_E_INTERNAL, "checkpoint", "pool_wait: job %zu of %zu", k, p->n);
    pthread_mutex_lock(&p->mu);
    while (!p->done[k] && !atomic_load(&p->failed) && !atomic_load(&p->cancel) && p->running > 0)
        pthread_cond_wait(&p->cv, &p->mu);
    const int ok = p->done[k], code = atomic_load(&p->failed) ? p->err.code : 0;
    pthread_mutex_unlock(&p->mu);
    if (ok) return DRIFT_OK;
    if (code) return drift_err_set(err, code, "checkpoint", "reading the checkpoint failed");
    return drift_err_set(err, DRIFT_E_INTERNAL, "checkpoint", "pool_wait: job %zu was never run", k);
}

int drift_ckpt_pool_join(drift_ckpt_pool *p, int cancel, drift_ckpt_stats *st, drift_err *err) {
    if (cancel) atomic_store(&p->cancel, 1);
    for (int t = 0; t < p->started; t++) pthread_join(p->tid[t], NULL);
    p->started = 0;
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    drift_free(p->done);
    p->done = NULL;
    uint64_t bytes = 0;
    for (size_t k = 0; k < p->n; k++) bytes += p->jobs[k].nbytes;
    if (st) {
        st->bytes = bytes;
        st->tensors = p->n;
        st->threads = p->threads;
        st->seconds = p->t_end - p->t0;
    }
    if (atomic_load(&p->failed)) {
        if (err) *err = p->err;
        return p->err.code ? p->err.code : DRIFT_E_INTERNAL;
    }
    return DRIFT_OK;
}
