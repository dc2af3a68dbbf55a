/* Private to the recorder/ sources: the recorder's state, the staging rings and the
 * writer thread. Not a public header (tests include it to test the rings). */
#ifndef DRIFT_RECORDER_INTERNAL_H
#define DRIFT_RECORDER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "formats/trace.h"
#include "recorder/recorder.h"

/* ======================================================================= */
/* Staging (staging.c): a byte ring and a ring of queue entries, freed in  */
/* FIFO order by the writer thread. Callers hold the recorder's mutex.      */
/* ======================================================================= */

enum rec_kind {
    REC_E_HOST = 0,     /* staged host copy: append (store flag) */
    REC_E_STATS,        /* stats computed by the caller: append_stats */
    REC_E_DEVICE,       /* device copy / device stats: wait event, then append */
    REC_E_NOTE,         /* aux: text */
    REC_E_METRIC,       /* aux: rec_metric_aux */
    REC_E_STEP_METRICS, /* aux: drift_trace_step_metrics */
    REC_E_COMMIT,
    REC_E_STEP_GRAPH,   /* aux: rec_graph_aux */
    REC_E_SKIP          /* a staged slot whose fill failed: only frees */
};

typedef struct rec_entry {
    int kind;
    int ready;                  /* filled (the writer waits for it at the head) */
    int site;                   /* recorder site index (= trace site id) */
    int store;                  /* REC_E_HOST / DEVICE: store the tensor */
    int dev_stats;              /* REC_E_DEVICE: staging holds a drift_trace_stats from the device */
    int level;                  /* REC_E_NOTE */
    uint32_t flags;             /* REC_E_COMMIT */
    int64_t step;
    drift_trace_index idx;
    drift_trace_stats stats;    /* REC_E_STATS */
    size_t off, len, charge;    /* staging bytes: [off, off+len), charge freed on pop */
    void *event;                /* REC_E_DEVICE: cudaEvent_t completing the copy */
    void *aux;                  /* malloc'd payload, freed on pop */
} rec_entry;

typedef struct rec_metric_aux {
    drift_trace_metric row;
    char site[DRIFT_TRACE_NAME_MAX];
} rec_metric_aux;

/* The graph a step uses: followed by len bytes of JSON (none: reuse graph), a NUL, the reason and a NUL. */
typedef struct rec_graph_aux {
    int64_t graph;
    size_t len;
} rec_graph_aux;

typedef struct rec_staging {
    unsigned char *base;        /* page-aligned arena */
    size_t cap, head, tail, used, high;
    rec_entry *q;               /* ring of qcap entries */
    size_t qcap, qhead, qcount;
    size_t max_records;         /* record entries allowed; the rest is reserve for control entries */
} rec_staging;

#define REC_CONTROL_RESERVE 256
#define REC_ALIGN 64

int drift_rec_staging_init(rec_staging *s, size_t bytes, size_t max_records, drift_err *err);
void drift_rec_staging_free(rec_staging *s);
/* Reserves an entry and len bytes (0: none) at the tail; control entries may
 * use the reserve. Returns NULL if either ring is full. The entry is zeroed,
 * not ready; *dst (may be NULL) gets the staging address. */
rec_entry *drift_rec_staging_reserve(rec_staging *s, size_t len, int control, void **dst);
/* 1 if len bytes could never fit (larger than the ring). */
int drift_rec_staging_too_big(const rec_staging *s, size_t len);
/* Oldest entry or NULL. */
rec_entry *drift_rec_staging_head(rec_staging *s);
/* Pops the oldest entry, freeing its bytes and aux. */
void drift_rec_staging_pop(rec_staging *s);
static inline void *drift_rec_staging_ptr(const rec_staging *s, const rec_entry *e) {
    return e->len ? s->base + e->off : NULL;
}

/* ======================================================================= */
/* Sampling (sampling.c)                                                     */
/* ======================================================================= */
/* Options parsed from the open string. */
typedef struct rec_options {
    size_t staging_bytes;
    size_t max_pending;
    int policy_block;
    int block_timeout_ms;
    int close_timeout_ms;
    int auto_start;
    int quiet;
    int device_wait;
    drift_trace_compress compress;
    drift_recorder_steps *steps;  /* owned */
    drift_recorder_sites *sites;  /* owned */
    char producer[128];
} rec_options;

int drift_rec_options_parse(rec_options *o, const char *text, drift_err *err);
void drift_rec_options_free(rec_options *o);

/* ======================================================================= */
/* The recorder                                                              */
/* ======================================================================= */
typedef struct rec_site {
    char *name;
    drift_dtype dtype;
    int ndim;
    int64_t shape[DRIFT_MAX_DIMS];
    int64_t numel;
    size_t bytes;
    int store;                  /* matches store_sites: the trace site has a data dataset */
} rec_site;

struct rec_cuda; /* recorder_cuda.c */

struct drift_recorder {
    char *path;
    pid_t pid;                  /* a forked child is a no-op */
    rec_options opt;

    pthread_mutex_t mu;         /* everything below except what says otherwise */
    pthread_cond_t work;        /* writer: an entry is ready / start / closing */
    pthread_cond_t space;       /* callers: staging freed */
    pthread_cond_t progress;    /* flush/close: the writer popped or exited */

    rec_staging st;
    rec_site *sites;
    size_t n_sites, cap_sites;
    int32_t *hash;              /* open addressing: site index or -1 */
    size_t hash_cap;

    int start_requested, started, closing, exited, abandoned, thread_running;
    int libs_set;               /* under h5mu: drift_recorder_set_libraries wrote /libraries (else the start
                                   fills it) */
    int compiled;               /* under h5mu: drift_recorder_set_compiled; merged into /libraries */
    char inductor_mode[DRIFT_LIBRARIES_MODE_MAX];
    char compiled_modules[DRIFT_LIBRARIES_PATH_MAX];
    int64_t cublas_ws, cublaslt_ws; /* under h5mu: drift_recorder_set_blas_workspace (bytes, 0 unknown) */
    int step_open;
    int64_t step, last_step;    /* open step; last begun (-1) */
    int step_store;             /* open step matches store_steps */
    int step_dropping;          /* the rest of the open step's tensors drop */
    int step_waited;            /* policy block: a wait timed out in this step */
    int64_t step_dropped, step_lost, step_rejected, step_dropped_bytes;
    char step_reject_site[160];
    int64_t c[DRIFT_RECORDER_COUNTER_COUNT];
    uint64_t progress_seq;      /* bumped on every pop */

    atomic_int off;             /* turned off: fast path for every call */
    int reported;
    int off_code;
    char off_msg[1024];
    drift_recorder_error_fn cb;
    void *cb_user;

    /* HDF5 writer: the calling thread before the start, the writer thread
     * after; h5mu serialises the two. */
    pthread_mutex_t h5mu;
    drift_trace_writer *w;
    int close_rc;
    uint32_t w_step_flags;      /* writer-side flags of the step being written */
    pthread_t thread;

    struct rec_cuda *cuda;      /* NULL until the first device capture */
};

/* recorder.c */
/* Turns r off and reports once (lock not held). */
void drift_rec_turn_off(drift_recorder *r, int code, const char *msg);
/* Frees everything r owns (after the writer thread is gone). */
void drift_rec_free(drift_recorder *r);
/* Under r->mu: validates a record call for the open step and finds (or, in
 * the warm-up, declares) its site. On DRIFT_OK *site is the index; on error
 * the call is counted as rejected. */
int drift_rec_lookup_locked(drift_recorder *r, const char *site, int dtype, int ndim, const int64_t *shape,
                            int *site_index, drift_err *err);
/* Under r->mu: reserves a record entry with len staging bytes, applying the
 * policy when want_wait (may release and retake r->mu while waiting).
 * NULL if there is no room. */
rec_entry *drift_rec_reserve_locked(drift_recorder *r, size_t len, int want_wait, void **dst);
/* Under r->mu: marks the open step dropped (a tensor not stored). */
void drift_rec_note_drop_locked(drift_recorder *r, size_t bytes);
/* Marks e ready and wakes the writer (takes r->mu). */
void drift_rec_publish(drift_recorder *r, rec_entry *e);
/* Sets the thread's last error from err (NULL: clears). */
void drift_rec_set_last_error(const drift_err *err);

/* writer_thread.c */
int drift_rec_writer_spawn(drift_recorder *r, drift_err *err);
/* Declares every known site and enters SWMR (writer thread or close). */
int drift_rec_writer_start_trace(drift_recorder *r, drift_err *err);

/* recorder_cuda.c (DRIFT_HAVE_CUDA only; no-ops otherwise) */
/* Waits for e's device copy (writer thread): DRIFT_OK or an error message. */
int drift_rec_cuda_wait(drift_recorder *r, rec_entry *e, drift_err *err);
/* Returns e's event to the pool. */
void drift_rec_cuda_release_event(drift_recorder *r, rec_entry *e);
/* Before the staging arena is freed: unregisters it, destroys the stream
 * and events (after the writer thread is gone). */
void drift_rec_cuda_free(drift_recorder *r);
/* The device of r's device captures, -1 when none was prepared. */
int drift_rec_cuda_device(drift_recorder *r);

/* recorder_identity.c: the GPU and library identity of the process for
 * /libraries when the caller set none: 1 with *out filled when r made device
 * captures (the GPU of those, the driver, and cuBLASLt / cuBLAS / cuDNN when
 * the process has them loaded, by dlsym), 0 otherwise. */
int drift_rec_identity(drift_recorder *r, drift_libraries *out);
/* r's drift_recorder_set_compiled and drift_recorder_set_blas_workspace into l (under h5mu). */
void drift_rec_merge_compiled(const drift_recorder *r, drift_libraries *l);

#endif
