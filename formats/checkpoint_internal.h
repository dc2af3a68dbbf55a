/* Internal to formats/checkpoint*.c: the mapped shard files and the job pool
 * that reads tensors out of them (checkpoint.h describes the behaviour). */
#ifndef DRIFT_FORMATS_CHECKPOINT_INTERNAL_H
#define DRIFT_FORMATS_CHECKPOINT_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "formats/checkpoint.h"
#include "formats/safetensors.h"

#define CKPT_MAX_THREADS 256

/* Monotonic seconds. */
double drift_ckpt_now_s(void);
/* out = root/rel (root NULL or empty: "."); -1 when it does not fit. */
int drift_ckpt_join_path(char *out, size_t outsz, const char *root, const char *rel);

/* ---- mapped shard files (checkpoint_files.c) ------------------------------ */
typedef struct drift_ckpt_file {
    const char *rel;             /* borrowed */
    char path[PATH_MAX];
    drift_safetensors *st;       /* validated header */
    int fd;
    const unsigned char *map;
    size_t size;
} drift_ckpt_file;

typedef struct drift_ckpt_files {
    drift_ckpt_file *f;
    size_t n, cap;
    size_t *slot;                /* hashed index of f by rel (index + 1; 0 empty), hcap a power of two */
    size_t hcap;
} drift_ckpt_files;

/* Unmaps, closes and frees every file of t (zeroed t allowed); t is zeroed. */
void drift_ckpt_files_free(drift_ckpt_files *t);
/* Index of rel (borrowed: must outlive t) in t, added unopened if new; -1 on out of memory. */
long drift_ckpt_files_slot(drift_ckpt_files *t, const char *rel);
/* Opens and maps f under root (once); `tensor` names the tensor that needs it in errors. */
int drift_ckpt_file_open(drift_ckpt_file *f, const char *root, const char *tensor, drift_err *err);

/* ---- the job pool (checkpoint_pool.c) -------------------------------------- */
/* One tensor: hash its bytes (checked against expect when verify), then
 * widen them into dst (when given). */
typedef struct drift_ckpt_job {
    const char *name;            /* borrowed */
    drift_ckpt_file *file;       /* borrowed */
    uint64_t offset, nbytes;
    drift_dtype dtype;
    int64_t numel;
    int verify;                  /* compare with expect */
    uint64_t expect;
    uint64_t *hash_out;          /* may be NULL */
    float *dst;                  /* may be NULL */
} drift_ckpt_job;

/* Jobs taken in index order by a set of threads. In the background mode the
 * caller waits for single jobs (drift_ckpt_pool_wait) while the rest run. */
typedef struct drift_ckpt_pool {
    drift_ckpt_job *jobs;        /* borrowed */
    size_t n;
    atomic_size_t next;
    atomic_int failed;           /* a job failed: err holds the lowest failing job's error */
    atomic_int cancel;           /* the caller gave up: stop taking jobs */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned char *done;         /* per job, under mu: read, checked and widened */
    int running;                 /* background threads not yet finished, under mu */
    size_t err_job;
    drift_err err;
    pthread_t tid[CKPT_MAX_THREADS];
    int started;                 /* background threads created */
    int threads;                 /* threads that ran jobs (the caller's included in the foreground mode) */
    double t0, t_end;            /* start; when the last thread ran out of jobs */
} drift_ckpt_pool;

/* Runs jobs[0..n) on up to `threads` threads. background 0: the caller's
 * thread takes part and this returns when every job ran (or one failed).
 * background 1: threads are started and this returns at once; the pool must
 * then be joined (drift_ckpt_pool_join) exactly once. A pool that cannot
 * start a thread runs with fewer (in the background mode, with none it runs
 * every job before returning): the same results. jobs borrowed until the
 * pool is joined. */
int drift_ckpt_pool_start(drift_ckpt_pool *p, drift_ckpt_job *jobs, size_t n, int threads, int background,
                          drift_err *err);
/* Blocks until job k is done (DRIFT_OK) or the pool has failed (its error
 * code; err then says only that the read failed: the join reports the load's
 * own error). */
int drift_ckpt_pool_wait(drift_ckpt_pool *p, size_t k, drift_err *err);
/* cancel != 0 stops the remaining jobs. Waits for the threads, fills st
 * (may be NULL; bytes of every job, files left 0), frees what the pool holds.
 * Returns the lowest failing job's error, else DRIFT_OK. */
int drift_ckpt_pool_join(drift_ckpt_pool *p, int cancel, drift_ckpt_stats *st, drift_err *err);

/* A checkpoint folder written whole or not at all (checkpoint_dir.c). */
typedef struct drift_ckpt_dir {
    char final[PATH_MAX];       /* the folder asked for */
    char abs[PATH_MAX];         /* its absolute name (weights_root) */
    char tmp[PATH_MAX + 64];    /* the folder written, swapped into place on success */
    int lock;                   /* flock on "final.lock", -1 */
    int existed;                /* final held a checkpoint (replaced on success) */
} drift_ckpt_dir;
/* Takes the lock, checks final (absent, or a folder of checkpoint files only)
 * and creates tmp. On failure nothing is left. */
int drift_ckpt_dir_begin(drift_ckpt_dir *d, const char *dir, drift_err *err);
/* Swaps tmp into place (the old checkpoint removed) and releases the lock. */
int drift_ckpt_dir_commit(drift_ckpt_dir *d, drift_err *err);
/* Removes tmp and releases the lock; final untouched. */
void drift_ckpt_dir_abort(drift_ckpt_dir *d);
/* DRIFT_E_INPUT when path (a file of the checkpoint under root) resolves
 * outside root's real path (a symbolic link, '..'); nothing is opened. */
int drift_ckpt_path_inside(const char *root, const char *path, drift_err *err);
/* 1 if name is one a drift checkpoint writes (shards, index). */
int drift_ckpt_is_own_file(const char *name);

#endif
