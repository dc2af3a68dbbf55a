/* Device-pointer captures (DESIGN.md s7d). Compiled for real only with
 * DRIFT_HAVE_CUDA; the CPU build gets stubs and never needs CUDA headers.
 *
 * A capture never synchronises the job:
 *   cudaEventRecord(prod, producer stream)      where the tensor is ready
 *   cudaStreamWaitEvent(copy stream, prod)      private copy stream waits
 *   cudaMemcpyAsync(pinned staging <- device)   a stored tensor, or
 *   stats kernel -> 56 bytes of pinned staging  a sampled-out one
 *   cudaEventRecord(done, copy stream)          the writer thread polls it
 *   cudaStreamWaitEvent(producer stream, done)  (device_wait=1, the default)
 *                                               later work on the producer's
 *                                               stream cannot overwrite the
 *                                               tensor before it is copied
 * The staging arena is pinned (cudaHostRegister) by
 * drift_recorder_prepare_device, or lazily at the first device capture,
 * when the job has chosen its device. Every CUDA error raised here
 * is cleared (cudaGetLastError) so that the job's own error checks never see
 * it. The stats kernel lives in recorder_stats.cu. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "recorder/recorder_internal.h"
#include "formats/alloc.h"

#ifdef DRIFT_HAVE_CUDA
#include <cuda_runtime.h>

/* recorder_stats.cu */
size_t drift_rec_stats_scratch_bytes(void);
int drift_rec_stats_preload(void);
int drift_rec_stats_launch(const void *data, int dtype, int64_t n, void *scratch, void *host_out, void *stream);

struct rec_cuda {
    pthread_mutex_t mu;          /* the producer event, the scratch, the pool */
    int ready, failed;
    char why[512];
    int device;
    int registered;              /* staging arena pinned */
    int writer_bound;            /* the writer thread called cudaSetDevice */
    int scratch_async;           /* scratch from cudaMallocAsync on the copy stream */
    cudaStream_t copy;
    cudaEvent_t prod;
    void *scratch;
    cudaEvent_t *pool;
    size_t n_pool, cap_pool;
};

static const char *cuerr(cudaError_t e) {
    (void)cudaGetLastError(); /* clear it: the job must not see our errors */
    return cudaGetErrorString(e);
}

/* First device capture: pins staging, creates the copy stream, the producer
 * event and the scratch on the current device. */
static int cuda_setup(drift_recorder *r, drift_err *err) {
    pthread_mutex_lock(&r->mu);
    if (!r->cuda) {
        r->cuda = drift_calloc(1, sizeof *r->cuda);
        if (r->cuda) pthread_mutex_init(&r->cuda->mu, NULL);
    }
    struct rec_cuda *c = r->cuda;
    pthread_mutex_unlock(&r->mu);
    if (!c) return drift_err_set(err, DRIFT_E_NOMEM, r->path, "out of memory");
    pthread_mutex_lock(&c->mu);
    if (!c->ready && !c->failed) {
        cudaError_t e = cudaGetDevice(&c->device);
        if (e == cudaSuccess) {
            e = cudaHostRegister(r->st.base, r->st.cap, cudaHostRegisterPortable);
            if (e == cudaSuccess) c->registered = 1;
        }
        if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->prod, cudaEventDisableTiming);
        if (e == cudaSuccess) e = (cudaError_t)drift_rec_stats_preload();
        if (e == cudaSuccess) {
            /* stream-ordered: neither this nor the free at close waits for the device */
            e = cudaMallocAsync(&c->scratch, drift_rec_stats_scratch_bytes(), c->copy);
            if (e == cudaSuccess) {
                c->scratch_async = 1;
            } else {
                (void)cudaGetLastError();
                e = cudaMalloc(&c->scratch, drift_rec_stats_scratch_bytes());
            }
        }
        if (e == cudaSuccess) {
            c->ready = 1;
        } else {
            c->failed = 1;
            snprintf(c->why, sizeof c->why, "device captures unavailable: CUDA setup failed (%s)", cuerr(e));
        }
    }
    int rc = c->ready ? DRIFT_OK : drift_err_set(err, DRIFT_E_UNSUPPORTED, r->path, "%s", c->why);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int drift_rec_cuda_device(drift_recorder *r) {
    pthread_mutex_lock(&r->mu);
    struct rec_cuda *c = r->cuda;
    pthread_mutex_unlock(&r->mu);
    if (!c) return -1;
    pthread_mutex_lock(&c->mu);
    int dev = c->ready ? c->device : -1;
    pthread_mutex_unlock(&c->mu);
    return dev;
}

int drift_recorder_prepare_device(drift_recorder *r, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    int rc = DRIFT_OK;
    if (!r) rc = drift_err_set(&e, DRIFT_E_USAGE, "prepare_device", "NULL recorder");
    else if (!atomic_load(&r->off) && r->pid == getpid()) rc = cuda_setup(r, &e);
    if (rc) {
        drift_rec_set_last_error(&e);
        if (err) *err = e;
    }
    return rc;
}

static cudaEvent_t pool_get(struct rec_cuda *c) {
    cudaEvent_t ev = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->n_pool) ev = c->pool[--c->n_pool];
    pthread_mutex_unlock(&c->mu);
    if (!ev && cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
        (void)cudaGetLastError();
        ev = NULL;
    }
    return ev;
}

void drift_rec_cuda_release_event(drift_recorder *r, rec_entry *e) {
    struct rec_cuda *c = r->cuda;
    if (!c || !e->event) return;
    cudaEvent_t ev = (cudaEvent_t)e->event;
    e->event = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->n_pool == c->cap_pool) {
        size_t nc = c->cap_pool ? c->cap_pool * 2 : 64;
        cudaEvent_t *np = drift_realloc(c->pool, nc * sizeof *np);
        if (np) {
            c->pool = np;
            c->cap_pool = nc;
        }
    }
    if (c->n_pool < c->cap_pool) {
        c->pool[c->n_pool++] = ev;
        ev = NULL;
    }
    pthread_mutex_unlock(&c->mu);
    if (ev) cudaEventDestroy(ev);
}

int drift_rec_cuda_wait(drift_recorder *r, rec_entry *e, drift_err *err) {
    struct rec_cuda *c = r->cuda;
    if (!c || !e->event) return drift_err_set(err, DRIFT_E_INTERNAL, r->path, "device record without an event");
    if (!c->writer_bound) {
        /* Without this the first CUDA call of this thread would make device
         * 0 current and create a context there. */
        cudaSetDevice(c->device);
        c->writer_bound = 1;
    }
    long ns = 20000;
    for (;;) {
        cudaError_t q = cudaEventQuery((cudaEvent_t)e->event);
        if (q == cudaSuccess) return DRIFT_OK;
        if (q != cudaErrorNotReady)
            return drift_err_set(err, DRIFT_E_IO, r->path, "device copy failed: %s", cuerr(q));
        (void)cudaGetLastError();
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        if (ns < 1000000) ns *= 2;
    }
}

void drift_rec_cuda_free(drift_recorder *r) {
    struct rec_cuda *c = r->cuda;
    if (!c) return;
    int prev = -1;
    int have_prev = cudaGetDevice(&prev) == cudaSuccess;
    if (c->ready || c->registered) cudaSetDevice(c->device);
    for (size_t i = 0; i < c->n_pool; i++) cudaEventDestroy(c->pool[i]);
    free(c->pool);
    if (c->prod) cudaEventDestroy(c->prod);
    if (c->scratch && c->scratch_async) cudaFreeAsync(c->scratch, c->copy);
    else if (c->scratch) cudaFree(c->scratch); /* synchronises the device */
    if (c->copy) cudaStreamDestroy(c->copy);
    /* Unpinning waits for the device to be idle (measured on an H200); it
     * happens once, at close. */
    if (c->registered) cudaHostUnregister(r->st.base);
    if (have_prev && prev != c->device) cudaSetDevice(prev);
    (void)cudaGetLastError();
    pthread_mutex_destroy(&c->mu);
    free(c);
    r->cuda = NULL;
}

static int record_device_impl(drift_recorder *r, const char *site, int dtype, int ndim, const int64_t *shape,
                              const void *dev_data, void *stream, int32_t mb, int32_t dn, int32_t call,
                              drift_err *err) {
    if (!r) return drift_err_set(err, DRIFT_E_USAGE, "record_device", "NULL recorder");
    if (atomic_load(&r->off) || r->pid != getpid()) return DRIFT_OK;
    if (!dev_data) return drift_err_set(err, DRIFT_E_USAGE, site ? site : "record_device", "NULL device pointer");
    int rc = cuda_setup(r, err);
    if (rc) return rc;
    struct rec_cuda *c = r->cuda;
    int dev = -1;
    if (cudaGetDevice(&dev) != cudaSuccess || dev != c->device) {
        (void)cudaGetLastError();
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, site,
                             "device capture on device %d, but this recorder captures from device %d (one device "
                             "per recorder)",
                             dev, c->device);
    }
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing((cudaStream_t)stream, &cap) != cudaSuccess) {
        (void)cudaGetLastError();
        cap = cudaStreamCaptureStatusNone;
    }
    if (cap != cudaStreamCaptureStatusNone) {
        /* Touching a stream being captured into a CUDA graph would break the
         * job's capture: skip, and say why. */
        pthread_mutex_lock(&r->mu);
        r->c[DRIFT_RECORDER_REJECTED]++;
        pthread_mutex_unlock(&r->mu);
        return drift_err_set(err, DRIFT_E_UNSUPPORTED, site,
                             "the producer stream is being captured into a CUDA graph: device captures are skipped "
                             "there (capture outside the graph, or copy to the host)");
    }
    pthread_mutex_lock(&r->mu);
    int si = -1;
    rc = drift_rec_lookup_locked(r, site, dtype, ndim, shape, &si, err);
    if (rc) {
        pthread_mutex_unlock(&r->mu);
        return rc;
    }
    const rec_site *s = &r->sites[si];
    size_t bytes = s->bytes;
    int64_t numel = s->numel, step = r->step;
    drift_trace_index idx = {step, mb, dn, call, 0};
    r->c[DRIFT_RECORDER_RECORDS]++;
    int want = r->step_store && s->store;
    void *dst = NULL;
    rec_entry *e = NULL;
    if (want) {
        if (!r->step_dropping) e = drift_rec_reserve_locked(r, bytes, 1, &dst);
        if (!e) drift_rec_note_drop_locked(r, bytes);
    } else {
        r->c[DRIFT_RECORDER_SAMPLED_OUT]++;
    }
    int stored = e != NULL;
    if (!e) e = drift_rec_reserve_locked(r, sizeof(drift_trace_stats), 1, &dst);
    if (!e) {
        r->c[DRIFT_RECORDER_LOST]++;
        r->step_lost++;
        pthread_mutex_unlock(&r->mu);
        return DRIFT_OK;
    }
    if (!r->step_open || r->step != step) {
        e->kind = REC_E_SKIP;
        e->ready = 1;
        pthread_cond_signal(&r->work);
        pthread_mutex_unlock(&r->mu);
        return drift_err_set(err, DRIFT_E_USAGE, site, "the step ended while the record waited for staging");
    }
    e->kind = REC_E_SKIP; /* until the copy is queued */
    e->site = si;
    e->idx = idx;
    e->step = step;
    e->store = stored;
    e->dev_stats = !stored;
    if (stored) r->c[DRIFT_RECORDER_STORED]++;
    pthread_mutex_unlock(&r->mu);

    cudaEvent_t ev = pool_get(c);
    cudaError_t ce = ev ? cudaSuccess : cudaErrorMemoryAllocation;
    cudaStream_t ps = (cudaStream_t)stream;
    if (ev) {
        pthread_mutex_lock(&c->mu);
        ce = cudaEventRecord(c->prod, ps);
        if (ce == cudaSuccess) ce = cudaStreamWaitEvent(c->copy, c->prod, 0);
        if (ce == cudaSuccess) {
            if (stored) ce = cudaMemcpyAsync(dst, dev_data, bytes, cudaMemcpyDeviceToHost, c->copy);
            else ce = (cudaError_t)drift_rec_stats_launch(dev_data, dtype, numel, c->scratch, dst, c->copy);
        }
        if (ce == cudaSuccess) ce = cudaEventRecord(ev, c->copy);
        /* Later work on the producer's stream (an in-place op, the caching
         * allocator reusing the block) waits for the copy: no host wait. */
        if (ce == cudaSuccess && r->opt.device_wait) ce = cudaStreamWaitEvent(ps, ev, 0);
        pthread_mutex_unlock(&c->mu);
    }
    if (ce != cudaSuccess) {
        const char *msg = cuerr(ce);
        if (ev) {
            e->event = ev;
            drift_rec_cuda_release_event(r, e);
        }
        pthread_mutex_lock(&r->mu);
        r->c[DRIFT_RECORDER_LOST]++;
        r->step_lost++;
        if (stored) r->c[DRIFT_RECORDER_STORED]--;
        pthread_mutex_unlock(&r->mu);
        drift_rec_publish(r, e); /* a SKIP: frees its staging in order */
        return drift_err_set(err, DRIFT_E_INPUT, site, "device capture failed: %s", msg);
    }
    e->event = ev;
    e->kind = REC_E_DEVICE;
    drift_rec_publish(r, e);
    return DRIFT_OK;
}

int drift_recorder_record_device(drift_recorder *r, const char *site, int dtype, int ndim, const int64_t *shape,
                                 const void *dev_data, void *stream, int32_t microbatch, int32_t denoise_index,
                                 int32_t call_index, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    int rc = record_device_impl(r, site, dtype, ndim, shape, dev_data, stream, microbatch, denoise_index, call_index,
                                &e);
    if (rc) {
        drift_rec_set_last_error(&e);
        if (err) *err = e;
    }
    return rc;
}

#else /* !DRIFT_HAVE_CUDA */

int drift_rec_cuda_wait(drift_recorder *r, rec_entry *e, drift_err *err) {
    (void)e;
    return drift_err_set(err, DRIFT_E_UNSUPPORTED, r ? r->path : NULL, "this build has no CUDA");
}

void drift_rec_cuda_release_event(drift_recorder *r, rec_entry *e) {
    (void)r;
    (void)e;
}

void drift_rec_cuda_free(drift_recorder *r) { (void)r; }

int drift_rec_cuda_device(drift_recorder *r) {
    (void)r;
    return -1;
}

int drift_recorder_prepare_device(drift_recorder *r, drift_err *err) {
    (void)r;
    drift_err e;
    drift_err_clear(&e);
    drift_err_set(&e, DRIFT_E_UNSUPPORTED, "prepare_device", "device captures need a CUDA build of drift");
    drift_rec_set_last_error(&e);
    if (err) *err = e;
    return DRIFT_E_UNSUPPORTED;
}

int drift_recorder_record_device(drift_recorder *r, const char *site, int dtype, int ndim, const int64_t *shape,
                                 const void *dev_data, void *stream, int32_t microbatch, int32_t denoise_index,
                                 int32_t call_index, drift_err *err) {
    (void)dtype;
    (void)ndim;
    (void)shape;
    (void)dev_data;
    (void)stream;
    (void)microbatch;
    (void)denoise_index;
    (void)call_index;
    drift_err e;
    drift_err_clear(&e);
    drift_err_set(&e, DRIFT_E_UNSUPPORTED, site ? site : "record_device",
                  "device captures need a CUDA build of drift (configure with -DDRIFT_CUDA=ON); copy the tensor to "
                  "the host and use drift_recorder_record_host");
    (void)r;
    drift_rec_set_last_error(&e);
    if (err) *err = e;
    return DRIFT_E_UNSUPPORTED;
}

#endif
