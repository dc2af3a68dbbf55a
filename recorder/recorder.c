/* The recorder's public API: open/close, sites, steps, host captures, the
 * staging policy and the turn-off path. The writer thread lives in
 * writer_thread.c, device captures in recorder_cuda.c. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "recorder/recorder_internal.h"
#include "formats/alloc.h"
#include "formats/params_ref.h"
#include "formats/batch_note.h"

/* ----------------------------------------------------------------------- */
/* Errors                                                                    */
/* ----------------------------------------------------------------------- */
static _Thread_local char tls_last_error[1600];

void drift_rec_set_last_error(const drift_err *err) {
    if (!err || err->code == DRIFT_OK) {
        tls_last_error[0] = '\0';
        return;
    }
    drift_err_format(err, tls_last_error, sizeof tls_last_error);
}

const char *drift_recorder_last_error(void) { return tls_last_error; }

/* Copies the local error out and into the thread's last error. */
static int finish(int rc, const drift_err *local, drift_err *err) {
    if (rc != DRIFT_OK) {
        drift_rec_set_last_error(local);
        if (err) *err = *local;
    }
    return rc;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static struct timespec deadline_in(int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* 1 if calls must do nothing: turned off, or a forked child. */
static int inactive(drift_recorder *r) { return atomic_load(&r->off) || r->pid != getpid(); }

/* Under mu: sets the off state; returns 1 if the caller must report (first time). */
static int turn_off_locked(drift_recorder *r, int code, const char *cause) {
    if (atomic_load(&r->off)) return 0;
    atomic_store(&r->off, 1);
    r->c[DRIFT_RECORDER_OFF] = 1;
    r->off_code = code ? code : DRIFT_E_IO;
    char at[64] = "";
    if (r->step_open) snprintf(at, sizeof at, " at step %lld", (long long)r->step);
    snprintf(r->off_msg, sizeof r->off_msg,
             "%s: recording turned off%s (last committed step %lld; the job goes on without recording): %s", r->path,
             at, (long long)r->c[DRIFT_RECORDER_LAST_COMMITTED], cause);
    for (char *p = r->off_msg; *p; p++)
        if ((unsigned char)*p < 0x20) *p = ' '; /* one line (HDF5 messages carry newlines) */
    pthread_cond_broadcast(&r->space);
    pthread_cond_broadcast(&r->progress);
    pthread_cond_broadcast(&r->work);
    if (r->reported) return 0;
    r->reported = 1;
    return 1;
}

static void report(drift_recorder *r) {
    /* off_msg is immutable once off is set. */
    if (r->cb) r->cb(r->cb_user, r->off_code, r->off_msg);
    else if (!r->opt.quiet) fprintf(stderr, "drift recorder: %s\n", r->off_msg);
}

void drift_rec_turn_off(drift_recorder *r, int code, const char *msg) {
    pthread_mutex_lock(&r->mu);
    int first = turn_off_locked(r, code, msg);
    pthread_mutex_unlock(&r->mu);
    if (first) report(r);
}

/* An I/O-class failure of the trace writer turns the recorder off; anything
 * else is the caller's mistake and is returned. */
static int io_class(int code) { return code == DRIFT_E_IO || code == DRIFT_E_NOMEM || code == DRIFT_E_INTERNAL; }

/* ----------------------------------------------------------------------- */
/* Sites                                                                     */
/* ----------------------------------------------------------------------- */
static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static long find_site_locked(drift_recorder *r, const char *name) {
    if (!r->hash_cap) return -1;
    size_t m = r->hash_cap - 1, i = (size_t)hash_str(name) & m;
    for (;;) {
        int32_t v = r->hash[i];
        if (v < 0) return -1;
        if (strcmp(r->sites[v].name, name) == 0) return v;
        i = (i + 1) & m;
    }
}

static int hash_insert(drift_recorder *r, int32_t idx) {
    if ((r->n_sites + 1) * 2 > r->hash_cap) {
        size_t nc = r->hash_cap ? r->hash_cap * 2 : 64;
        int32_t *nh = drift_malloc(nc * sizeof *nh);
        if (!nh) return -1;
        for (size_t i = 0; i < nc; i++) nh[i] = -1;
        for (size_t k = 0; k < r->n_sites; k++) {
            size_t i = (size_t)hash_str(r->sites[k].name) & (nc - 1);
            while (nh[i] >= 0) i = (i + 1) & (nc - 1);
            nh[i] = (int32_t)k;
        }
        free(r->hash);
        r->hash = nh;
        r->hash_cap = nc;
    }
    size_t i = (size_t)hash_str(r->sites[idx].name) & (r->hash_cap - 1);
    while (r->hash[i] >= 0) i = (i + 1) & (r->hash_cap - 1);
    r->hash[i] = idx;
    return 0;
}

static const char *name_problem(const char *name) {
    if (!name || !name[0]) return "a non-empty name";
    size_t n = strlen(name);
    if (n >= DRIFT_TRACE_NAME_MAX) return "a name shorter than 512 bytes";
    if (strcmp(name, ".") == 0) return "a name other than \".\"";
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f) return "a name without control characters";
    return NULL;
}

static void shape_str(int ndim, const int64_t *shape, char *buf, size_t bufsz) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, bufsz - k, "[");
    for (int d = 0; d < ndim && k < bufsz; d++)
        k += (size_t)snprintf(buf + k, bufsz - k, "%s%lld", d ? "," : "", (long long)shape[d]);
    if (k < bufsz) snprintf(buf + k, bufsz - k, "]");
}

/* Validates a record/site description; fills numel and bytes. */
static int check_desc(const char *name, int dtype, int ndim, const int64_t *shape, int64_t *numel, size_t *bytes,
                      drift_err *err) {
    const char *prob = name_problem(name);
    if (prob) return drift_err_set(err, DRIFT_E_USAGE, "site", "site name \"%.64s\": expected %s", name ? name : "", prob);
    if (dtype != DRIFT_F32 && dtype != DRIFT_BF16 && dtype != DRIFT_F16)
        return drift_err_set(err, DRIFT_E_USAGE, name, "dtype %d (%s): expected fp32 (1), bf16 (2) or fp16 (3)", dtype,
                             drift_dtype_name((drift_dtype)dtype));
    if (ndim < 0 || ndim > DRIFT_MAX_DIMS || (ndim > 0 && !shape))
        return drift_err_set(err, DRIFT_E_USAGE, name, "ndim %d: expected 0..%d with a shape", ndim, DRIFT_MAX_DIMS);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1 || shape[d] > ((int64_t)1 << 40) || n > ((int64_t)1 << 48) / shape[d])
            return drift_err_set(err, DRIFT_E_USAGE, name, "shape dim %d = %lld: expected 1..2^40 and at most 2^48 elements",
                                 d, (long long)shape[d]);
        n *= shape[d];
    }
    size_t esz = drift_dtype_size((drift_dtype)dtype);
    if ((uint64_t)n * esz > DRIFT_TRACE_READ_MAX)
        return drift_err_set(err, DRIFT_E_USAGE, name, "a record of %lld elements exceeds %llu bytes", (long long)n,
                             (unsigned long long)DRIFT_TRACE_READ_MAX);
    *numel = n;
    *bytes = (size_t)n * esz;
    return DRIFT_OK;
}

static int add_site_locked(drift_recorder *r, const char *name, int dtype, int ndim, const int64_t *shape,
                           int64_t numel, size_t bytes, int *idx, drift_err *err) {
    if (r->n_sites >= DRIFT_TRACE_MAX_SITES)
        return drift_err_set(err, DRIFT_E_USAGE, name, "more than %d sites", DRIFT_TRACE_MAX_SITES);
    if (r->n_sites == r->cap_sites) {
        size_t nc = r->cap_sites ? r->cap_sites * 2 : 32;
        rec_site *ns = drift_realloc(r->sites, nc * sizeof *ns);
        if (!ns) return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory");
        r->sites = ns;
        r->cap_sites = nc;
    }
    rec_site *s = &r->sites[r->n_sites];
    memset(s, 0, sizeof *s);
    s->name = drift_strdup(name);
    if (!s->name) return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory");
    s->dtype = (drift_dtype)dtype;
    s->ndim = ndim;
    for (int d = 0; d < ndim; d++) s->shape[d] = shape[d];
    s->numel = numel;
    s->bytes = bytes;
    s->store = drift_recorder_sites_match(r->opt.sites, name);
    if (hash_insert(r, (int32_t)r->n_sites) != 0) {
        free(s->name);
        return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory");
    }
    *idx = (int)r->n_sites++;
    r->c[DRIFT_RECORDER_N_SITES] = (int64_t)r->n_sites;
    return DRIFT_OK;
}

static int same_desc(const rec_site *s, int dtype, int ndim, const int64_t *shape) {
    if ((int)s->dtype != dtype || s->ndim != ndim) return 0;
    for (int d = 0; d < ndim; d++)
        if (s->shape[d] != shape[d]) return 0;
    return 1;
}

static int mismatch(const rec_site *s, int dtype, int ndim, const int64_t *shape, drift_err *err) {
    char a[200], b[200];
    shape_str(ndim, shape, a, sizeof a);
    shape_str(s->ndim, s->shape, b, sizeof b);
    return drift_err_set(err, DRIFT_E_USAGE, s->name, "record is %s %s, but the site was declared %s %s",
                         drift_dtype_name((drift_dtype)dtype), a, drift_dtype_name(s->dtype), b);
}

static void reject_locked(drift_recorder *r, const char *site, const drift_err *e) {
    r->c[DRIFT_RECORDER_REJECTED]++;
    if (r->step_open) {
        if (r->step_rejected++ == 0)
            snprintf(r->step_reject_site, sizeof r->step_reject_site, "%.100s: %.50s", site ? site : "?",
                     e ? e->msg : "");
    }
}

int drift_rec_lookup_locked(drift_recorder *r, const char *site, int dtype, int ndim, const int64_t *shape,
                            int *site_index, drift_err *err) {
    int rc = DRIFT_OK;
    int64_t numel = 0;
    size_t bytes = 0;
    if (!r->step_open) {
        rc = drift_err_set(err, DRIFT_E_USAGE, site, "no open step: call drift_recorder_begin_step first");
        goto bad;
    }
    rc = check_desc(site, dtype, ndim, shape, &numel, &bytes, err);
    if (rc) goto bad;
    long i = find_site_locked(r, site);
    if (i >= 0) {
        if (!same_desc(&r->sites[i], dtype, ndim, shape)) {
            rc = mismatch(&r->sites[i], dtype, ndim, shape, err);
            goto bad;
        }
        *site_index = (int)i;
        return DRIFT_OK;
    }
    if (r->start_requested) {
        rc = drift_err_set(err, DRIFT_E_USAGE, site,
                           "site first recorded after the trace started: not recorded (SWMR fixes the sites at the "
                           "start; declare it with drift_recorder_declare_site or record it in the first step)");
        goto bad;
    }
    rc = add_site_locked(r, site, dtype, ndim, shape, numel, bytes, site_index, err);
    if (rc) goto bad;
    return DRIFT_OK;
bad:
    reject_locked(r, site, err);
    return rc;
}

/* ----------------------------------------------------------------------- */
/* Staging policy                                                            */
/* ----------------------------------------------------------------------- */
rec_entry *drift_rec_reserve_locked(drift_recorder *r, size_t len, int want_wait, void **dst) {
    rec_entry *e = drift_rec_staging_reserve(&r->st, len, 0, dst);
    if (e || !want_wait || !r->opt.policy_block || !r->start_requested || r->step_waited || r->closing ||
        drift_rec_staging_too_big(&r->st, len) || atomic_load(&r->off))
        return e;
    int64_t t0 = now_ns();
    struct timespec dl = deadline_in(r->opt.block_timeout_ms);
    while (!(e = drift_rec_staging_reserve(&r->st, len, 0, dst))) {
        if (atomic_load(&r->off) || r->exited) break;
        int rc = pthread_cond_timedwait(&r->space, &r->mu, &dl);
        if (rc == ETIMEDOUT) {
            e = drift_rec_staging_reserve(&r->st, len, 0, dst);
            if (!e) {
                r->step_waited = 1;
                r->c[DRIFT_RECORDER_BLOCK_TIMEOUTS]++;
            }
            break;
        }
    }
    r->c[DRIFT_RECORDER_BLOCKED_NS] += now_ns() - t0;
    return e;
}

void drift_rec_note_drop_locked(drift_recorder *r, size_t bytes) {
    r->step_dropping = 1;
    r->step_dropped++;
    r->step_dropped_bytes += (int64_t)bytes;
    r->c[DRIFT_RECORDER_DROPPED]++;
}

void drift_rec_publish(drift_recorder *r, rec_entry *e) {
    pthread_mutex_lock(&r->mu);
    e->ready = 1;
    pthread_cond_signal(&r->work);
    pthread_mutex_unlock(&r->mu);
}

/* A control entry (note, metric, commit): waits while the writer makes
 * progress; a writer stalled for max(block_timeout, 1 s) turns r off. */
static rec_entry *control_locked(drift_recorder *r, int *report_now) {
    rec_entry *e = drift_rec_staging_reserve(&r->st, 0, 1, NULL);
    if (e || atomic_load(&r->off)) return e;
    if (!r->start_requested) {
        *report_now |= turn_off_locked(r, DRIFT_E_USAGE,
                                       "the queue is full and the trace was never started (auto_start=0: call "
                                       "drift_recorder_start)");
        return NULL;
    }
    int ms = r->opt.block_timeout_ms > 1000 ? r->opt.block_timeout_ms : 1000;
    uint64_t seq = r->progress_seq;
    int64_t t0 = now_ns();
    struct timespec dl = deadline_in(ms);
    while (!(e = drift_rec_staging_reserve(&r->st, 0, 1, NULL))) {
        if (atomic_load(&r->off) || r->exited) break;
        int rc = pthread_cond_timedwait(&r->space, &r->mu, &dl);
        if (rc == ETIMEDOUT) {
            if (r->progress_seq != seq) {
                seq = r->progress_seq;
                dl = deadline_in(ms);
                continue;
            }
            char cause[256];
            snprintf(cause, sizeof cause,
                     "the writer thread made no progress for %d ms with %zu entries queued (is the file system "
                     "hung?)",
                     ms, r->st.qcount);
            *report_now |= turn_off_locked(r, DRIFT_E_IO, cause);
            break;
        }
    }
    r->c[DRIFT_RECORDER_BLOCKED_NS] += now_ns() - t0;
    return e;
}

/* ----------------------------------------------------------------------- */
/* Open / close                                                              */
/* ----------------------------------------------------------------------- */
static int init_sync(drift_recorder *r) {
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) return -1;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int bad = pthread_mutex_init(&r->mu, NULL) != 0;
    bad |= pthread_mutex_init(&r->h5mu, NULL) != 0;
    bad |= pthread_cond_init(&r->work, &ca) != 0;
    bad |= pthread_cond_init(&r->space, &ca) != 0;
    bad |= pthread_cond_init(&r->progress, &ca) != 0;
    pthread_condattr_destroy(&ca);
    return bad ? -1 : 0;
}

void drift_rec_free(drift_recorder *r) {
    if (!r) return;
    drift_rec_cuda_free(r);
    if (r->w) drift_trace_writer_close(r->w, NULL);
    drift_rec_staging_free(&r->st);
    for (size_t i = 0; i < r->n_sites; i++) free(r->sites[i].name);
    free(r->sites);
    free(r->hash);
    drift_rec_options_free(&r->opt);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->h5mu);
    pthread_cond_destroy(&r->work);
    pthread_cond_destroy(&r->space);
    pthread_cond_destroy(&r->progress);
    free(r->path);
    free(r);
}

static int open_impl(drift_recorder **out, const char *path, int side, int32_t rank, int32_t world_size,
                     const char *run_id, const char *family, double guidance_scale, const char *plan_json,
                     const char *options, drift_err *err) {
    if (!out) return drift_err_set(err, DRIFT_E_USAGE, "drift_recorder_open", "NULL out");
    *out = NULL;
    if (!path || !path[0]) return drift_err_set(err, DRIFT_E_USAGE, "drift_recorder_open", "empty trace path");
    if (side < 0 || side > 2)
        return drift_err_set(err, DRIFT_E_USAGE, path, "side %d: expected 0 (trainer), 1 (rollout) or 2 (replay)", side);
    if (rank < 0 || world_size < 1 || rank >= world_size)
        return drift_err_set(err, DRIFT_E_USAGE, path, "rank %d of world size %d: expected 0 <= rank < world_size",
                             (int)rank, (int)world_size);
    drift_recorder *r = drift_calloc(1, sizeof *r);
    if (!r) return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
    if (init_sync(r) != 0) {
        free(r);
        return drift_err_set(err, DRIFT_E_NOMEM, path, "cannot initialise the recorder's locks");
    }
    atomic_init(&r->off, 0);
    r->pid = getpid();
    r->last_step = -1;
    r->c[DRIFT_RECORDER_LAST_COMMITTED] = -1;
    int rc = DRIFT_OK;
    r->path = drift_strdup(path);
    if (!r->path) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
        goto fail;
    }
    rc = drift_rec_options_parse(&r->opt, options, err);
    if (rc) {
        drift_err_prefix(err, "%s: recorder options", path);
        goto fail;
    }
    if (r->opt.compress == DRIFT_TRACE_COMPRESS_BLOSC && !drift_trace_blosc_available()) {
        rc = drift_err_set(err, DRIFT_E_UNSUPPORTED, path,
                           "compress=blosc: the HDF5 blosc filter plugin (32001) is not available (install "
                           "hdf5-filter-plugin-blosc-serial or set HDF5_PLUGIN_PATH)");
        goto fail;
    }
    rc = drift_rec_staging_init(&r->st, r->opt.staging_bytes, r->opt.max_pending, err);
    if (rc) goto fail;
    r->c[DRIFT_RECORDER_STAGING_BYTES] = (int64_t)r->st.cap;
    drift_trace_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.side = (drift_trace_side)side;
    meta.run_id = run_id;
    meta.rank = rank;
    meta.world_size = world_size;
    meta.family = family;
    meta.guidance_scale = guidance_scale;
    meta.plan_json = plan_json;
    meta.producer = r->opt.producer[0] ? r->opt.producer : NULL;
    rc = drift_trace_writer_create(&r->w, path, &meta, err);
    if (rc) goto fail;
    rc = drift_rec_writer_spawn(r, err);
    if (rc) goto fail;
    *out = r;
    return DRIFT_OK;
fail:
    drift_rec_free(r);
    return rc;
}

int drift_recorder_open(drift_recorder **out, const char *path, int side, int32_t rank, int32_t world_size,
                        const char *run_id, const char *family, double guidance_scale, const char *plan_json,
                        const char *options, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    int rc = open_impl(out, path, side, rank, world_size, run_id, family, guidance_scale, plan_json, options, &e);
    return finish(rc, &e, err);
}

int drift_recorder_close(drift_recorder *r, drift_err *err) {
    if (!r) return DRIFT_OK;
    if (r->pid != getpid()) return DRIFT_OK; /* a forked child's copy: the parent owns the file */
    drift_err e;
    drift_err_clear(&e);
    pthread_mutex_lock(&r->mu);
    r->closing = 1;
    r->start_requested = 1; /* a trace never started still gets its schema */
    pthread_cond_broadcast(&r->work);
    /* Waits while the writer makes progress (the backlog is bounded by the
     * staging ring); gives up after close_timeout_ms without any. */
    struct timespec dl = deadline_in(r->opt.close_timeout_ms);
    uint64_t seq = r->progress_seq;
    while (!r->exited) {
        if (pthread_cond_timedwait(&r->progress, &r->mu, &dl) == ETIMEDOUT && !r->exited) {
            if (r->progress_seq == seq) break;
            seq = r->progress_seq;
            dl = deadline_in(r->opt.close_timeout_ms);
        }
    }
    if (!r->exited) {
        /* The writer is stuck (a hung file system): hand r over to it. */
        r->abandoned = 1;
        int ms = r->opt.close_timeout_ms;
        char path[512];
        snprintf(path, sizeof path, "%.500s", r->path);
        size_t q = r->st.qcount;
        pthread_mutex_unlock(&r->mu);
        pthread_detach(r->thread);
        drift_err_set(&e, DRIFT_E_IO, path,
                      "the recorder's writer thread made no progress for %d ms with %zu entries queued; left to "
                      "finish in the background (the trace may be incomplete)",
                      ms, q);
        return finish(DRIFT_E_IO, &e, err);
    }
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL);
    /* A failure that turned r off was reported when it happened (callback or
     * stderr): the job goes on, close succeeds. */
    drift_rec_free(r);
    return DRIFT_OK;
}

/* ----------------------------------------------------------------------- */
/* Before the start                                                          */
/* ----------------------------------------------------------------------- */
int drift_recorder_declare_site(drift_recorder *r, const char *name, int dtype, int ndim, const int64_t *shape,
                                int *site_id, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    if (!r) return finish(drift_err_set(&e, DRIFT_E_USAGE, "declare_site", "NULL recorder"), &e, err);
    if (inactive(r)) return DRIFT_OK;
    int64_t numel = 0;
    size_t bytes = 0;
    int rc = check_desc(name, dtype, ndim, shape, &numel, &bytes, &e);
    if (rc) return finish(rc, &e, err);
    pthread_mutex_lock(&r->mu);
    long i = find_site_locked(r, name);
    int idx = -1;
    if (i >= 0) {
        if (!same_desc(&r->sites[i], dtype, ndim, shape)) rc = mismatch(&r->sites[i], dtype, ndim, shape, &e);
        idx = (int)i;
    } else if (r->start_requested) {
        rc = drift_err_set(&e, DRIFT_E_USAGE, name,
                           "declare_site after the trace started (SWMR fixes the sites at the start)");
    } else {
        rc = add_site_locked(r, name, dtype, ndim, shape, numel, bytes, &idx, &e);
    }
    if (rc) r->c[DRIFT_RECORDER_REJECTED]++;
    pthread_mutex_unlock(&r->mu);
    if (!rc && site_id) *site_id = idx;
    return finish(rc, &e, err);
}

/* Runs fn on the trace writer from the calling thread, before the start. */
typedef int (*pre_fn)(drift_trace_writer *w, const void *a, drift_err *err);

static int pre_start(drift_recorder *r, const char *what, pre_fn fn, const void *a, drift_err *err) {
    if (!r) return drift_err_set(err, DRIFT_E_USAGE, what, "NULL recorder");
    if (inactive(r)) return DRIFT_OK;
    pthread_mutex_lock(&r->mu);
    if (r->start_requested) {
        r->c[DRIFT_RECORDER_REJECTED]++;
        pthread_mutex_unlock(&r->mu);
        return drift_err_set(err, DRIFT_E_USAGE, what,
                             "only allowed before the trace starts (SWMR: call it before drift_recorder_start and "
                             "before the first step ends)");
    }
    pthread_mutex_lock(&r->h5mu);
    pthread_mutex_unlock(&r->mu);
    int rc = fn(r->w, a, err);
    pthread_mutex_unlock(&r->h5mu);
    if (rc && io_class(rc)) {
        char cause[1100];
        snprintf(cause, sizeof cause, "%s: %s", what, err->msg);
        drift_rec_turn_off(r, rc, cause);
        drift_err_clear(err);
        return DRIFT_OK;
    }
    return rc;
}

typedef struct param_args {
    const char *fqn, *name;
    int ndim, dtype;
    const int64_t *shape, *offset, *full_shape;
    const void *data;
    size_t len;
} param_args;

static int do_add_param(drift_trace_writer *w, const void *a, drift_err *err) {
    const param_args *p = a;
    return drift_trace_writer_add_param(w, p->fqn, p->ndim, p->shape, p->offset, p->full_shape, p->data, err);
}
static int do_set_param_dtype(drift_trace_writer *w, const void *a, drift_err *err) {
    const param_args *p = a;
    return drift_trace_writer_set_param_dtype(w, p->fqn, (drift_dtype)p->dtype, err);
}
static int do_add_buffer(drift_trace_writer *w, const void *a, drift_err *err) {
    const param_args *p = a;
    return drift_trace_writer_add_buffer(w, p->name, (drift_dtype)p->dtype, p->ndim, p->shape, p->data, err);
}
static int do_set_graph(drift_trace_writer *w, const void *a, drift_err *err) {
    const param_args *p = a;
    return drift_trace_writer_set_graph(w, p->data, p->len, err);
}

int drift_recorder_add_param(drift_recorder *r, const char *fqn, int ndim, const int64_t *shape,
                             const int64_t *offset, const int64_t *full_shape, const float *values, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    param_args a = {.fqn = fqn, .ndim = ndim, .shape = shape, .offset = offset, .full_shape = full_shape, .data = values};
    return finish(pre_start(r, "add_param", do_add_param, &a, &e), &e, err);
}

int drift_recorder_set_param_dtype(drift_recorder *r, const char *fqn, int dtype, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    param_args a = {.fqn = fqn, .dtype = dtype};
    return finish(pre_start(r, "set_param_dtype", do_set_param_dtype, &a, &e), &e, err);
}

int drift_recorder_add_buffer(drift_recorder *r, const char *name, int dtype, int ndim, const int64_t *shape,
                              const void *data, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    param_args a = {.name = name, .dtype = dtype, .ndim = ndim, .shape = shape, .data = data};
    return finish(pre_start(r, "add_buffer", do_add_buffer, &a, &e), &e, err);
}

int drift_recorder_set_graph(drift_recorder *r, const char *json, size_t len, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    param_args a = {.data = json, .len = len};
    return finish(pre_start(r, "set_graph", do_set_graph, &a, &e), &e, err);
}

static int do_reserve_step_graphs(drift_trace_writer *w, const void *a, drift_err *err) {
    (void)a;
    return drift_trace_writer_reserve_step_graphs(w, err);
}

int drift_recorder_reserve_step_graphs(drift_recorder *r, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    return finish(pre_start(r, "reserve_step_graphs", do_reserve_step_graphs, NULL, &e), &e, err);
}

static int do_set_params_ref(drift_trace_writer *w, const void *a, drift_err *err) {
    const param_args *p = a;
    return drift_trace_writer_set_params_ref(w, p->data, p->len, err);
}

int drift_recorder_set_params_ref(drift_recorder *r, const char *json, size_t len, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    /* validated here, so that a bad reference fails the call, not the replay */
    drift_params_ref ref;
    drift_params_ref_init(&ref);
    int rc = json ? drift_params_ref_parse(&ref, json, len, "params_ref", &e)
                  : drift_err_set(&e, DRIFT_E_USAGE, "set_params_ref", "NULL json");
    drift_params_ref_free(&ref);
    if (rc) return finish(rc, &e, err);
    param_args a = {.data = json, .len = len};
    return finish(pre_start(r, "set_params_ref", do_set_params_ref, &a, &e), &e, err);
}

typedef struct libs_args {
    drift_recorder *r;
    drift_libraries l;
} libs_args;

/* Under h5mu, as the writer thread's start reads libs_set. */
static int do_set_libraries(drift_trace_writer *w, const void *a, drift_err *err) {
    const libs_args *la = a;
    drift_libraries l = la->l;
    drift_rec_merge_compiled(la->r, &l);
    int rc = drift_trace_writer_set_libraries(w, &l, err);
    if (rc == DRIFT_OK) la->r->libs_set = 1; /* the start does not fill its own */
    return rc;
}

/* s into dst (dsz bytes) or DRIFT_E_USAGE naming the field when it does not fit. */
static int lib_str(char *dst, size_t dsz, const char *s, const char *field, drift_err *err) {
    if (!s) s = "";
    if (strlen(s) >= dsz)
        return drift_err_set(err, DRIFT_E_USAGE, "set_libraries", "%s: longer than %zu bytes", field, dsz - 1);
    snprintf(dst, dsz, "%s", s);
    return DRIFT_OK;
}

int drift_recorder_set_libraries(drift_recorder *r, const char *gpu_name, int cc_major, int cc_minor,
                                 int64_t driver_version, int64_t runtime_version, int64_t cublaslt_version,
                                 int64_t cublas_version, int64_t cudnn_version, const char *torch_version,
                                 const char *cublaslt_path, const char *cudnn_path, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    drift_libraries l;
    drift_libraries_init(&l);
    const int64_t v[5] = {driver_version, runtime_version, cublaslt_version, cublas_version, cudnn_version};
    int rc = DRIFT_OK;
    for (int k = 0; k < 5 && !rc; k++)
        if (v[k] < 0 || v[k] > INT32_MAX)
            rc = drift_err_set(&e, DRIFT_E_USAGE, "set_libraries", "version %d: expected 0..%d (0: unknown), got %lld", k,
                               INT32_MAX, (long long)v[k]);
    if (!rc && (cc_major < 0 || cc_major > 1000 || cc_minor < 0 || cc_minor > 1000))
        rc = drift_err_set(&e, DRIFT_E_USAGE, "set_libraries", "compute capability %d.%d: expected 0..1000 each", cc_major,
                           cc_minor);
    if (!rc) rc = lib_str(l.gpu_name, sizeof l.gpu_name, gpu_name, "gpu_name", &e);
    if (!rc) rc = lib_str(l.torch_version, sizeof l.torch_version, torch_version, "torch_version", &e);
    if (!rc) rc = lib_str(l.cublaslt_path, sizeof l.cublaslt_path, cublaslt_path, "cublaslt_path", &e);
    if (!rc) rc = lib_str(l.cudnn_path, sizeof l.cudnn_path, cudnn_path, "cudnn_path", &e);
    if (rc) return finish(rc, &e, err);
    l.cc_major = cc_major;
    l.cc_minor = cc_minor;
    l.driver_version = driver_version;
    l.runtime_version = runtime_version;
    l.cublaslt_version = cublaslt_version;
    l.cublas_version = cublas_version;
    l.cudnn_version = cudnn_version;
    libs_args la = {.r = r, .l = l};
    return finish(pre_start(r, "set_libraries", do_set_libraries, &la, &e), &e, err);
}

void drift_rec_merge_compiled(const drift_recorder *r, drift_libraries *l) {
    l->cublas_workspace = r->cublas_ws;
    l->cublaslt_workspace = r->cublaslt_ws;
    if (!r->compiled) return;
    l->compiled = 1;
    snprintf(l->inductor_mode, sizeof l->inductor_mode, "%s", r->inductor_mode);
    snprintf(l->compiled_modules, sizeof l->compiled_modules, "%s", r->compiled_modules);
}

typedef struct compiled_args {
    drift_recorder *r;
    char mode[DRIFT_LIBRARIES_MODE_MAX];
    char modules[DRIFT_LIBRARIES_PATH_MAX];
} compiled_args;

/* Under h5mu, before /libraries is written. */
static int do_set_compiled(drift_trace_writer *w, const void *a, drift_err *err) {
    (void)w;
    const compiled_args *ca = a;
    if (ca->r->libs_set)
        return drift_err_set(err, DRIFT_E_USAGE, "set_compiled", "call it before set_libraries (/libraries is written)");
    ca->r->compiled = 1;
    snprintf(ca->r->inductor_mode, sizeof ca->r->inductor_mode, "%s", ca->mode);
    snprintf(ca->r->compiled_modules, sizeof ca->r->compiled_modules, "%s", ca->modules);
    return DRIFT_OK;
}

int drift_recorder_set_compiled(drift_recorder *r, const char *inductor_mode, const char *modules, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    compiled_args ca = {.r = r};
    int rc = lib_str(ca.mode, sizeof ca.mode, inductor_mode, "inductor_mode", &e);
    if (!rc) rc = lib_str(ca.modules, sizeof ca.modules, modules, "compiled_modules", &e);
    if (rc) return finish(rc, &e, err);
    return finish(pre_start(r, "set_compiled", do_set_compiled, &ca, &e), &e, err);
}

typedef struct blas_ws_args {
    drift_recorder *r;
    int64_t cublas, cublaslt;
} blas_ws_args;

/* Under h5mu, before /libraries is written. */
static int do_set_blas_workspace(drift_trace_writer *w, const void *a, drift_err *err) {
    (void)w;
    const blas_ws_args *ba = a;
    if (ba->r->libs_set)
        return drift_err_set(err, DRIFT_E_USAGE, "set_blas_workspace", "call it before set_libraries (/libraries is written)");
    ba->r->cublas_ws = ba->cublas;
    ba->r->cublaslt_ws = ba->cublaslt;
    return DRIFT_OK;
}

int drift_recorder_set_blas_workspace(drift_recorder *r, int64_t cublas_bytes, int64_t cublaslt_bytes, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    const int64_t lim = (int64_t)1 << 34;
    if (cublas_bytes < 0 || cublas_bytes > lim || cublaslt_bytes < 0 || cublaslt_bytes > lim)
        return finish(drift_err_set(&e, DRIFT_E_USAGE, "set_blas_workspace",
                                    "workspace sizes %lld, %lld: expected 0..16 GiB bytes each (0: unknown)",
                                    (long long)cublas_bytes, (long long)cublaslt_bytes),
                      &e, err);
    blas_ws_args ba = {.r = r, .cublas = cublas_bytes, .cublaslt = cublaslt_bytes};
    return finish(pre_start(r, "set_blas_workspace", do_set_blas_workspace, &ba, &e), &e, err);
}

int drift_recorder_start(drift_recorder *r, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    if (!r) return finish(drift_err_set(&e, DRIFT_E_USAGE, "start", "NULL recorder"), &e, err);
    if (inactive(r)) return DRIFT_OK;
    pthread_mutex_lock(&r->mu);
    r->start_requested = 1;
    pthread_cond_broadcast(&r->work);
    pthread_mutex_unlock(&r->mu);
    return DRIFT_OK;
}

/* ----------------------------------------------------------------------- */
/* Steps                                                                     */
/* ----------------------------------------------------------------------- */
int drift_recorder_begin_step(drift_recorder *r, int64_t step, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    if (!r) return finish(drift_err_set(&e, DRIFT_E_USAGE, "begin_step", "NULL recorder"), &e, err);
    if (inactive(r)) return DRIFT_OK;
    int rc = DRIFT_OK;
    pthread_mutex_lock(&r->mu);
    if (r->step_open)
        rc = drift_err_set(&e, DRIFT_E_USAGE, "begin_step", "step %lld: step %lld is still open (call end_step first)",
                           (long long)step, (long long)r->step);
    else if (step < 0 || step <= r->last_step)
        rc = drift_err_set(&e, DRIFT_E_USAGE, "begin_step", "step %lld: expected a step > %lld (steps increase)",
                           (long long)step, (long long)r->last_step);
    if (rc) {
        r->c[DRIFT_RECORDER_REJECTED]++;
    } else {
        r->step_open = 1;
        r->step = r->last_step = step;
        r->step_store = drift_recorder_steps_match(r->opt.steps, step);
        r->step_dropping = r->step_waited = 0;
        r->step_dropped = r->step_lost = r->step_rejected = r->step_dropped_bytes = 0;
        r->step_reject_site[0] = '\0';
    }
    pthread_mutex_unlock(&r->mu);
    return finish(rc, &e, err);
}

static void human_bytes(int64_t b, char *buf, size_t n) {
    if (b >= ((int64_t)1 << 20)) snprintf(buf, n, "%.1f MiB", (double)b / 1048576.0);
    else snprintf(buf, n, "%lld bytes", (long long)b);
}

static rec_entry *note_locked(drift_recorder *r, int level, const char *text, int *report_now) {
    char *t = drift_strdup(text);
    if (!t) return NULL;
    rec_entry *e = control_locked(r, report_now);
    if (!e) {
        free(t);
        return NULL;
    }
    e->kind = REC_E_NOTE;
    e->step = r->step;
    e->level = level;
    e->aux = t;
    e->ready = 1;
    return e;
}

int drift_recorder_end_step(drift_recorder *r, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    if (!r) return finish(drift_err_set(&e, DRIFT_E_USAGE, "end_step", "NULL recorder"), &e, err);
    if (inactive(r)) return DRIFT_OK;
    int report_now = 0;
    pthread_mutex_lock(&r->mu);
    if (!r->step_open) {
        r->c[DRIFT_RECORDER_REJECTED]++;
        pthread_mutex_unlock(&r->mu);
        return finish(drift_err_set(&e, DRIFT_E_USAGE, "end_step", "no open step (call begin_step first)"), &e, err);
    }
    char text[DRIFT_TRACE_NOTE_MAX];
    uint32_t flags = 0;
    if (r->step_dropped || r->step_lost) {
        char used[48], cap[48];
        human_bytes(r->step_dropped_bytes, used, sizeof used);
        human_bytes((int64_t)r->st.cap, cap, sizeof cap);
        snprintf(text, sizeof text,
                 "step %lld: %lld tensors (%s) not stored, staging full (%s, policy %s); stats rows kept; %lld "
                 "records lost entirely",
                 (long long)r->step, (long long)r->step_dropped, used, cap,
                 r->opt.policy_block ? "block" : "drop_step", (long long)r->step_lost);
        note_locked(r, 1, text, &report_now);
        flags |= DRIFT_TRACE_STEP_DROPPED;
    }
    if (r->step_rejected && !atomic_load(&r->off)) {
        snprintf(text, sizeof text, "step %lld: %lld records rejected (first: %s)", (long long)r->step,
                 (long long)r->step_rejected, r->step_reject_site);
        note_locked(r, 1, text, &report_now);
    }
    if (!atomic_load(&r->off)) {
        rec_entry *c = control_locked(r, &report_now);
        if (c) {
            c->kind = REC_E_COMMIT;
            c->step = r->step;
            c->flags = flags;
            c->ready = 1;
        }
    }
    r->step_open = 0;
    r->c[DRIFT_RECORDER_ENDED_STEPS]++;
    if (r->opt.auto_start) r->start_requested = 1;
    pthread_cond_broadcast(&r->work);
    pthread_mutex_unlock(&r->mu);
    if (report_now) report(r);
    return DRIFT_OK;
}

/* ----------------------------------------------------------------------- */
/* Host captures                                                             */
/* ----------------------------------------------------------------------- */
static int record_host_impl(drift_recorder *r, const char *site, int dtype, int ndim, const int64_t *shape,
                            const void *data, int32_t mb, int32_t dn, int32_t call, drift_err *err) {
    if (!r) return drift_err_set(err, DRIFT_E_USAGE, "record_host", "NULL recorder");
    if (inactive(r)) return DRIFT_OK;
    pthread_mutex_lock(&r->mu);
    int si = -1;
    int rc = data ? drift_rec_lookup_locked(r, site, dtype, ndim, shape, &si, err)
                  : drift_err_set(err, DRIFT_E_USAGE, site ? site : "record_host", "NULL data");
    if (rc) {
        if (!data) reject_locked(r, site, err);
        pthread_mutex_unlock(&r->mu);
        return rc;
    }
    const rec_site *s = &r->sites[si];
    size_t bytes = s->bytes;
    drift_dtype sdt = s->dtype;
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
    if (e && (!r->step_open || r->step != step)) {
        /* another thread ended the step while this one waited */
        e->kind = REC_E_SKIP;
        e->ready = 1;
        pthread_cond_signal(&r->work);
        pthread_mutex_unlock(&r->mu);
        return drift_err_set(err, DRIFT_E_USAGE, site, "the step ended while the record waited for staging");
    }
    int stored = e != NULL;
    if (!e) e = drift_rec_staging_reserve(&r->st, bytes, 0, &dst); /* stats on the writer thread, if room */
    if (e) {
        e->kind = REC_E_HOST;
        e->site = si;
        e->idx = idx;
        e->store = stored;
        e->step = step;
        if (stored) r->c[DRIFT_RECORDER_STORED]++;
        pthread_mutex_unlock(&r->mu);
        memcpy(dst, data, bytes);
        drift_rec_publish(r, e);
        return DRIFT_OK;
    }
    /* No room: the stats are computed here, only an entry is queued. */
    e = drift_rec_reserve_locked(r, 0, 1, NULL);
    if (!e) {
        r->c[DRIFT_RECORDER_LOST]++;
        r->step_lost++;
        pthread_mutex_unlock(&r->mu);
        return DRIFT_OK;
    }
    e->kind = REC_E_STATS;
    e->site = si;
    e->idx = idx;
    e->step = step;
    pthread_mutex_unlock(&r->mu);
    drift_trace_stats_compute(data, sdt, (size_t)numel, &e->stats);
    drift_rec_publish(r, e);
    return DRIFT_OK;
}

int drift_recorder_record_host(drift_recorder *r, const char *site, int dtype, int ndim, const int64_t *shape,
                               const void *data, int32_t microbatch, int32_t denoise_index, int32_t call_index,
                               drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    int rc = record_host_impl(r, site, dtype, ndim, shape, data, microbatch, denoise_index, call_index, &e);
    return finish(rc, &e, err);
}

int drift_recorder_wants_tensor(drift_recorder *r, const char *site) {
    if (!r || !site || inactive(r)) return 0;
    pthread_mutex_lock(&r->mu);
    int want = 0;
    if (r->step_open && r->step_store && !r->step_dropping) {
        long i = find_site_locked(r, site);
        want = i >= 0 ? r->sites[i].store : (!r->start_requested && drift_recorder_sites_match(r->opt.sites, site));
    }
    pthread_mutex_unlock(&r->mu);
    return want;
}

/* ----------------------------------------------------------------------- */
/* Metrics and notes                                                         */
/* ----------------------------------------------------------------------- */
static int queue_aux(drift_recorder *r, int kind, int level, void *aux, const char *what, drift_err *err) {
    if (inactive(r)) {
        free(aux);
        return DRIFT_OK;
    }
    int report_now = 0;
    pthread_mutex_lock(&r->mu);
    if (!r->step_open) {
        r->c[DRIFT_RECORDER_REJECTED]++;
        pthread_mutex_unlock(&r->mu);
        free(aux);
        return drift_err_set(err, DRIFT_E_USAGE, what, "no open step: call drift_recorder_begin_step first");
    }
    rec_entry *e = control_locked(r, &report_now);
    if (e) {
        e->kind = kind;
        e->level = level;
        e->step = r->step;
        if (kind == REC_E_METRIC) ((rec_metric_aux *)aux)->row.step = r->step;
        if (kind == REC_E_STEP_METRICS) ((drift_trace_step_metrics *)aux)->step = r->step;
        e->aux = aux;
        e->ready = 1;
        pthread_cond_signal(&r->work);
    } else {
        free(aux);
    }
    pthread_mutex_unlock(&r->mu);
    if (report_now) report(r);
    return DRIFT_OK;
}

int drift_recorder_add_metric(drift_recorder *r, const char *site_name, const drift_trace_metric *row,
                              drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    if (!r || !row) return finish(drift_err_set(&e, DRIFT_E_USAGE, "add_metric", "NULL recorder or row"), &e, err);
    const char *prob = name_problem(site_name);
    if (prob)
        return finish(drift_err_set(&e, DRIFT_E_USAGE, "add_metric", "metric site \"%.64s\": expected %s",
                                    site_name ? site_name : "", prob),
                      &e, err);
    rec_metric_aux *a = drift_malloc(sizeof *a);
    if (!a) return DRIFT_OK; /* out of memory: the row is lost, the job goes on */
    a->row = *row;
    snprintf(a->site, sizeof a->site, "%s", site_name);
    return finish(queue_aux(r, REC_E_METRIC, 0, a, "add_metric", &e), &e, err);
}

int drift_recorder_add_step_metrics(drift_recorder *r, const drift_trace_step_metrics *row, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    if (!r || !row)
        return finish(drift_err_set(&e, DRIFT_E_USAGE, "add_step_metrics", "NULL recorder or row"), &e, err);
    drift_trace_step_metrics *a = drift_malloc(sizeof *a);
    if (!a) return DRIFT_OK;
    *a = *row;
    return finish(queue_aux(r, REC_E_STEP_METRICS, 0, a, "add_step_metrics", &e), &e, err);
}

int drift_recorder_note(drift_recorder *r, int level, const char *text, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    if (!r || !text) return finish(drift_err_set(&e, DRIFT_E_USAGE, "note", "NULL recorder or text"), &e, err);
    if (level < 0 || level > 2)
        return finish(drift_err_set(&e, DRIFT_E_USAGE, "note", "level %d: expected 0 (info), 1 (warning) or 2 (error)",
                                    level),
                      &e, err);
    char *t = drift_strndup(text, DRIFT_TRACE_NOTE_MAX - 1);
    if (!t) return DRIFT_OK;
    return finish(queue_aux(r, REC_E_NOTE, level, t, "note", &e), &e, err);
}

int drift_recorder_step_graph(drift_recorder *r, int64_t graph, const char *json, size_t len, const char *reason,
                              drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    if (!r || graph < 0 || (json && (len == 0 || len > DRIFT_TRACE_GRAPH_MAX)))
        return finish(drift_err_set(&e, DRIFT_E_USAGE, "step_graph",
                                    "graph %lld with %zu bytes: expected graph >= 0 and 1..%llu bytes of JSON",
                                    (long long)graph, json ? len : 0, (unsigned long long)DRIFT_TRACE_GRAPH_MAX),
                      &e, err);
    /* one allocation: the header, the JSON, the reason (the writer thread frees it) */
    size_t rl = reason ? strnlen(reason, DRIFT_TRACE_NOTE_MAX - 1) : 0, jl = json ? len : 0;
    rec_graph_aux *a = drift_malloc(sizeof *a + jl + rl + 2);
    if (!a) return DRIFT_OK; /* out of memory: the step has no graph note, the job goes on */
    a->graph = graph;
    a->len = jl;
    char *p = (char *)(a + 1);
    if (jl) memcpy(p, json, jl);
    p[jl] = 0;
    memcpy(p + jl + 1, reason ? reason : "", rl);
    p[jl + 1 + rl] = 0;
    return finish(queue_aux(r, REC_E_STEP_GRAPH, 0, a, "step_graph", &e), &e, err);
}

int drift_recorder_batch(drift_recorder *r, int32_t micro_batch, int cfg, int n, const int64_t *samples,
                         drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    if (!r || (!samples && n > 0)) return finish(drift_err_set(&e, DRIFT_E_USAGE, "batch", "NULL recorder or samples"), &e, err);
    drift_batch_composition c;
    memset(&c, 0, sizeof c);
    c.micro_batch = micro_batch;
    c.cfg = (drift_batch_cfg)cfg;
    c.n = n;
    for (int i = 0; i < n && i < DRIFT_BATCH_NOTE_MAX_SAMPLES; i++) c.samples[i] = samples[i];
    char text[DRIFT_TRACE_NOTE_MAX];
    int rc = drift_batch_note_format(&c, text, sizeof text, &e);
    if (rc) return finish(DRIFT_E_USAGE, &e, err);
    return drift_recorder_note(r, 0, text, err);
}

/* ----------------------------------------------------------------------- */
/* Flush and state                                                           */
/* ----------------------------------------------------------------------- */
int drift_recorder_flush(drift_recorder *r, int timeout_ms, drift_err *err) {
    drift_err e;
    drift_err_clear(&e);
    if (!r) return finish(drift_err_set(&e, DRIFT_E_USAGE, "flush", "NULL recorder"), &e, err);
    if (inactive(r)) return DRIFT_OK;
    if (timeout_ms < 0) timeout_ms = r->opt.close_timeout_ms;
    int rc = DRIFT_OK;
    pthread_mutex_lock(&r->mu);
    if (r->start_requested) {
        struct timespec dl = deadline_in(timeout_ms);
        while (r->st.qcount > 0 && !atomic_load(&r->off) && !r->exited) {
            if (pthread_cond_timedwait(&r->progress, &r->mu, &dl) == ETIMEDOUT) {
                if (r->st.qcount > 0 && !atomic_load(&r->off))
                    rc = drift_err_set(&e, DRIFT_E_IO, r->path, "flush: %zu entries still queued after %d ms",
                                       r->st.qcount, timeout_ms);
                break;
            }
        }
    }
    pthread_mutex_unlock(&r->mu);
    return finish(rc, &e, err);
}

int64_t drift_recorder_counter(drift_recorder *r, int which) {
    if (!r || which < 0 || which >= DRIFT_RECORDER_COUNTER_COUNT) return -1;
    pthread_mutex_lock(&r->mu);
    r->c[DRIFT_RECORDER_STAGING_USED] = (int64_t)r->st.used;
    r->c[DRIFT_RECORDER_STAGING_HIGH] = (int64_t)r->st.high;
    int64_t v = r->c[which];
    pthread_mutex_unlock(&r->mu);
    return v;
}

const char *drift_recorder_counter_name(int which) {
    static const char *const names[DRIFT_RECORDER_COUNTER_COUNT] = {
        "records",         "stored",          "sampled_out",     "dropped",         "lost",
        "rejected",        "dropped_steps",   "ended_steps",     "committed_steps", "last_committed",
        "written_records", "written_bytes",   "staging_bytes",   "staging_used",    "staging_high",
        "blocked_ns",      "block_timeouts",  "off",             "started",         "n_sites"};
    if (which < 0 || which >= DRIFT_RECORDER_COUNTER_COUNT) return "?";
    return names[which];
}

int drift_recorder_enabled(drift_recorder *r) { return r && !atomic_load(&r->off) ? 1 : 0; }

const char *drift_recorder_error(drift_recorder *r) {
    if (!r || !atomic_load(&r->off)) return "";
    return r->off_msg;
}

int drift_recorder_set_error_callback(drift_recorder *r, drift_recorder_error_fn cb, void *user) {
    if (!r) return DRIFT_E_USAGE;
    pthread_mutex_lock(&r->mu);
    r->cb = cb;
    r->cb_user = user;
    pthread_mutex_unlock(&r->mu);
    return DRIFT_OK;
}
