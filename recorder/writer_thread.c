/* The writer thread: owns the HDF5 trace writer once the trace starts,
 * consumes the queue in order (waiting for device copies), writes records,
 * metrics and notes, and commits steps. On any I/O error it turns the
 * recorder off (reported once) and from then on only frees what callers
 * queued, so that no caller ever waits on it for long. */
#include <stdio.h>
#include <string.h>

#include "recorder/recorder_internal.h"

static int is_io(int code) { return code == DRIFT_E_IO || code == DRIFT_E_NOMEM || code == DRIFT_E_INTERNAL; }

int drift_rec_writer_start_trace(drift_recorder *r, drift_err *err) {
    pthread_mutex_lock(&r->mu);
    size_t n = r->n_sites; /* frozen: start_requested is set */
    pthread_mutex_unlock(&r->mu);
    int rc = DRIFT_OK;
    pthread_mutex_lock(&r->h5mu);
    for (size_t i = 0; i < n && rc == DRIFT_OK; i++) {
        const rec_site *s = &r->sites[i];
        drift_trace_site_decl d;
        memset(&d, 0, sizeof d);
        d.name = s->name;
        d.dtype = s->dtype;
        d.ndim = s->ndim;
        for (int k = 0; k < s->ndim; k++) d.shape[k] = s->shape[k];
        d.store_tensors = s->store;
        d.compress = r->opt.compress;
        int id = -1;
        rc = drift_trace_writer_declare_site(r->w, &d, &id, err);
        if (rc == DRIFT_OK && id != (int)i)
            rc = drift_err_set(err, DRIFT_E_INTERNAL, s->name, "trace site id %d, expected %zu", id, i);
    }
    /* no identity from the caller: what this process runs on, when it made device captures */
    drift_libraries libs;
    if (rc == DRIFT_OK && !r->libs_set) {
        int known = drift_rec_identity(r, &libs);
        if (!known) drift_libraries_init(&libs);
        drift_rec_merge_compiled(r, &libs); /* a compiled CPU run still says so */
        if (known || r->compiled || r->cublas_ws || r->cublaslt_ws) rc = drift_trace_writer_set_libraries(r->w, &libs, err);
    }
    if (rc == DRIFT_OK) rc = drift_trace_writer_start(r->w, err);
    pthread_mutex_unlock(&r->h5mu);
    return rc;
}

/* Writes one entry. *lost is set when only this record is lost (the
 * recorder stays on); an I/O-class status turns the recorder off. */
static int write_entry(drift_recorder *r, rec_entry *e, int64_t *bytes, int *lost, drift_err *err) {
    const void *p = drift_rec_staging_ptr(&r->st, e);
    int rc = DRIFT_OK;
    *bytes = 0;
    *lost = 0;
    if (e->kind == REC_E_DEVICE) {
        /* Always wait for the copy: its staging is freed right after. */
        rc = drift_rec_cuda_wait(r, e, err);
        if (rc) {
            *lost = 1;
            return rc;
        }
    }
    if (atomic_load(&r->off)) return DRIFT_OK;
    pthread_mutex_lock(&r->h5mu);
    switch (e->kind) {
    case REC_E_HOST:
        rc = drift_trace_writer_append(r->w, e->site, &e->idx, p, e->store, err);
        if (!rc && e->store) *bytes = (int64_t)e->len;
        break;
    case REC_E_DEVICE:
        if (e->dev_stats) {
            drift_trace_stats st;
            memcpy(&st, p, sizeof st);
            rc = drift_trace_writer_append_stats(r->w, e->site, &e->idx, &st, err);
        } else {
            rc = drift_trace_writer_append(r->w, e->site, &e->idx, p, e->store, err);
            if (!rc && e->store) *bytes = (int64_t)e->len;
        }
        break;
    case REC_E_STATS: rc = drift_trace_writer_append_stats(r->w, e->site, &e->idx, &e->stats, err); break;
    case REC_E_NOTE: rc = drift_trace_writer_note(r->w, e->step, e->level, (const char *)e->aux, err); break;
    case REC_E_METRIC: {
        const rec_metric_aux *a = e->aux;
        rc = drift_trace_writer_add_metric(r->w, a->site, &a->row, err);
        break;
    }
    case REC_E_STEP_METRICS: rc = drift_trace_writer_add_step_metrics(r->w, e->aux, err); break;
    case REC_E_STEP_GRAPH: {
        const rec_graph_aux *a = e->aux;
        const char *json = (const char *)(a + 1);
        rc = drift_trace_writer_step_graph(r->w, e->step, a->graph, a->len ? json : NULL, a->len, json + a->len + 1, err);
        break;
    }
    case REC_E_COMMIT: {
        uint32_t flags = e->flags | r->w_step_flags;
        if (r->w_step_flags) {
            /* Records this thread could not write: say so before the commit. */
            char t[DRIFT_TRACE_NOTE_MAX];
            snprintf(t, sizeof t, "step %lld: records lost in the writer (device copy failed or rejected by the "
                     "trace writer); see the recorder's counters", (long long)e->step);
            drift_err ne;
            drift_err_clear(&ne);
            rc = drift_trace_writer_note(r->w, e->step, 1, t, &ne);
            if (rc) *err = ne;
        }
        if (!rc) rc = drift_trace_writer_commit_step(r->w, e->step, flags, err);
        if (!rc) {
            r->w_step_flags = 0;
            e->flags = flags; /* for the counters */
        }
        break;
    }
    default: break;
    }
    pthread_mutex_unlock(&r->h5mu);
    if (rc && !is_io(rc)) *lost = 1;
    return rc;
}

static void *writer_main(void *arg) {
    drift_recorder *r = arg;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        if (r->start_requested && !r->started) {
            r->started = 1; /* attempted: from here the queue is consumed */
            if (!atomic_load(&r->off)) {
                pthread_mutex_unlock(&r->mu);
                drift_err err;
                drift_err_clear(&err);
                int rc = drift_rec_writer_start_trace(r, &err);
                pthread_mutex_lock(&r->mu);
                if (rc) {
                    char cause[1100];
                    snprintf(cause, sizeof cause, "cannot start the trace: %s", err.msg);
                    pthread_mutex_unlock(&r->mu);
                    drift_rec_turn_off(r, rc, cause);
                    pthread_mutex_lock(&r->mu);
                } else {
                    r->c[DRIFT_RECORDER_STARTED] = 1;
                }
            }
            continue;
        }
        rec_entry *e = drift_rec_staging_head(&r->st);
        if (!r->started || !e || !e->ready) {
            if (!e && r->closing && (r->started || atomic_load(&r->off))) break;
            pthread_cond_wait(&r->work, &r->mu);
            continue;
        }
        pthread_mutex_unlock(&r->mu);
        drift_err err;
        drift_err_clear(&err);
        int64_t bytes = 0;
        int lost = 0;
        int rc = write_entry(r, e, &bytes, &lost, &err);
        if (e->kind == REC_E_DEVICE) drift_rec_cuda_release_event(r, e);
        if (rc && !lost) {
            char cause[1600];
            drift_err_format(&err, cause, sizeof cause);
            /* Say so in the trace if the writer still accepts anything (an
             * HDF5 failure leaves it refusing all but close). */
            char t[DRIFT_TRACE_NOTE_MAX];
            snprintf(t, sizeof t, "recording turned off: %.200s", cause);
            pthread_mutex_lock(&r->h5mu);
            if (drift_trace_writer_note(r->w, e->step, 2, t, NULL) == DRIFT_OK)
                drift_trace_writer_commit_step(r->w, e->step, DRIFT_TRACE_STEP_DROPPED, NULL);
            /* the one record that fits on a full disk: /status is overwritten in place */
            char st[DRIFT_TRACE_STATUS_MAX];
            snprintf(st, sizeof st, "failed at step %lld: recording turned off: %.400s", (long long)e->step, cause);
            (void)drift_trace_writer_set_status(r->w, st, NULL);
            pthread_mutex_unlock(&r->h5mu);
            drift_rec_turn_off(r, rc, cause);
        }
        pthread_mutex_lock(&r->mu);
        if (lost) {
            r->w_step_flags |= DRIFT_TRACE_STEP_DROPPED;
            r->c[DRIFT_RECORDER_LOST]++;
        } else if (!rc && !atomic_load(&r->off)) {
            switch (e->kind) {
            case REC_E_HOST:
            case REC_E_STATS:
            case REC_E_DEVICE:
                r->c[DRIFT_RECORDER_WRITTEN_RECORDS]++;
                r->c[DRIFT_RECORDER_WRITTEN_BYTES] += bytes;
                break;
            case REC_E_COMMIT:
                r->c[DRIFT_RECORDER_COMMITTED_STEPS]++;
                r->c[DRIFT_RECORDER_LAST_COMMITTED] = e->step;
                if (e->flags & DRIFT_TRACE_STEP_DROPPED) r->c[DRIFT_RECORDER_DROPPED_STEPS]++;
                break;
            default: break;
            }
        }
        drift_rec_staging_pop(&r->st);
        r->progress_seq++;
        pthread_cond_broadcast(&r->space);
        pthread_cond_broadcast(&r->progress);
    }
    pthread_mutex_unlock(&r->mu);

    /* Close the file on this thread (the HDF5 writer's owner). */
    pthread_mutex_lock(&r->h5mu);
    drift_err err;
    drift_err_clear(&err);
    int was_off = atomic_load(&r->off);
    int rc = drift_trace_writer_close(r->w, &err);
    r->w = NULL;
    pthread_mutex_unlock(&r->h5mu);
    if (rc && !was_off) {
        char cause[1100];
        snprintf(cause, sizeof cause, "cannot close the trace: %s", err.msg);
        drift_rec_turn_off(r, rc, cause);
    }
    pthread_mutex_lock(&r->mu);
    r->close_rc = rc;
    r->exited = 1;
    int abandoned = r->abandoned;
    pthread_cond_broadcast(&r->progress);
    pthread_cond_broadcast(&r->space);
    pthread_mutex_unlock(&r->mu);
    if (abandoned) drift_rec_free(r);
    return NULL;
}

int drift_rec_writer_spawn(drift_recorder *r, drift_err *err) {
    pthread_attr_t a;
    if (pthread_attr_init(&a) != 0) return drift_err_set(err, DRIFT_E_NOMEM, r->path, "cannot create the writer thread");
    int rc = pthread_create(&r->thread, &a, writer_main, r);
    pthread_attr_destroy(&a);
    if (rc != 0) return drift_err_set(err, DRIFT_E_NOMEM, r->path, "cannot create the writer thread: %s", strerror(rc));
    r->thread_running = 1;
    return DRIFT_OK;
}
