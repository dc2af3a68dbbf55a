/* Safetensors checkpoints: write, describe, load (checkpoint.h). */
#define _GNU_SOURCE /* realpath, posix_fadvise */
#include "formats/checkpoint.h"
#include "formats/checkpoint_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/alloc.h"
#include "formats/outpath.h"
#include "formats/hash64.h"
#include "formats/json.h"
#include "formats/safetensors.h"

int drift_ckpt_default_threads(void) {
    const char *e = getenv("DRIFT_LOAD_THREADS");
    if (e && *e) {
        char *end = NULL;
        long v = strtol(e, &end, 10);
        if (end && !*end && v >= 1 && v <= CKPT_MAX_THREADS) return (int)v;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 32 ? 32 : (int)n;
}

static int cmp_job_size(const void *a, const void *b) {
    const drift_ckpt_job *x = a, *y = b;
    return x->nbytes < y->nbytes ? 1 : x->nbytes > y->nbytes ? -1 : 0;
}

/* Runs the jobs (largest first, for balance) on up to threads threads. */
static int pool_run(drift_ckpt_job *jobs, size_t n, int threads, drift_ckpt_stats *st, drift_err *err) {
    qsort(jobs, n, sizeof *jobs, cmp_job_size);
    drift_ckpt_pool p;
    int rc = drift_ckpt_pool_start(&p, jobs, n, threads, 0, err);
    return rc ? rc : drift_ckpt_pool_join(&p, 0, st, err);
}

/* ---- load ------------------------------------------------------------------ */
static int same_shape(const drift_params_ref_tensor *t, const drift_safetensors_info *info) {
    if (t->ndim != info->ndim) return 0;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] != info->shape[d]) return 0;
    return 1;
}

/* Opens the shards of tensors which[0..n) under root, checks each header
 * against the reference and fills jobs[k] (verify, dst[k]). ft's slots are
 * all made before any job points into it (a slot may move the array). */
static int prepare_load(const drift_params_ref *ref, const char *root, const size_t *which, float *const *dst, size_t n,
                        drift_ckpt_files *ft, drift_ckpt_job *jobs, drift_err *err) {
    for (size_t k = 0; k < n; k++) {
        if (which[k] >= ref->n)
            return drift_err_set(err, DRIFT_E_INTERNAL, "checkpoint", "drift_ckpt_load: index %zu out of range", which[k]);
        if (drift_ckpt_files_slot(ft, ref->t[which[k]].file) < 0)
            return drift_err_set(err, DRIFT_E_NOMEM, "checkpoint", "out of memory");
    }
    for (size_t k = 0; k < n; k++) {
        const drift_params_ref_tensor *t = &ref->t[which[k]];
        drift_ckpt_file *f = &ft->f[drift_ckpt_files_slot(ft, t->file)];
        int rc = drift_ckpt_file_open(f, root, t->name, err);
        if (rc) return rc;
        long i = drift_safetensors_find(f->st, t->name);
        drift_safetensors_info info;
        if (i < 0)
            return drift_err_set(err, DRIFT_E_INPUT, f->path, "tensor '%s': not in its checkpoint file %s", t->name, f->path);
        if ((rc = drift_safetensors_tensor(f->st, (size_t)i, &info, err))) return rc;
        if (info.dtype != t->dtype || !same_shape(t, &info))
            return drift_err_set(err, DRIFT_E_INPUT, f->path,
                                 "tensor '%s' in %s: dtype %s, %d dims, %lld elements; the trace recorded %s, %d dims, %lld elements",
                                 t->name, f->path, info.dtype_name, info.ndim, (long long)info.numel,
                                 drift_params_ref_dtype_name(t->dtype), t->ndim, (long long)t->numel);
        if (info.offset + info.nbytes > f->size) /* the header was validated against the size: a race */
            return drift_err_set(err, DRIFT_E_INPUT, f->path, "tensor '%s': %s changed size while opening", t->name, f->path);
        jobs[k] = (drift_ckpt_job){.name = t->name, .file = f, .offset = info.offset, .nbytes = info.nbytes,
                                   .dtype = info.dtype, .numel = info.numel, .verify = 1, .expect = t->hash, .dst = dst[k]};
    }
    return DRIFT_OK;
}

int drift_ckpt_load(const drift_params_ref *ref, const char *root, const size_t *which, float *const *dst, size_t n,
                    int threads, drift_ckpt_stats *st, drift_err *err) {
    if (!ref || (n && (!which || !dst)))
        return drift_err_set(err, DRIFT_E_INTERNAL, "checkpoint", "drift_ckpt_load: NULL argument");
    if (!root) root = ref->weights_root;
    if (st) memset(st, 0, sizeof *st);
    drift_ckpt_files ft;
    memset(&ft, 0, sizeof ft);
    drift_ckpt_job *jobs = drift_calloc(n ? n : 1, sizeof *jobs);
    int rc = jobs ? DRIFT_OK : drift_err_set(err, DRIFT_E_NOMEM, "checkpoint", "out of memory");
    if (!rc) rc = prepare_load(ref, root, which, dst, n, &ft, jobs, err);
    if (!rc) rc = pool_run(jobs, n, threads, st, err);
    if (st) st->files = ft.n;
    drift_free(jobs);
    drift_ckpt_files_free(&ft);
    return rc;
}

/* ---- the same load in the background ---------------------------------------- */
struct drift_ckpt_stream {
    drift_ckpt_files ft;
    drift_ckpt_job *jobs;
    drift_ckpt_pool pool;
};

static void stream_free(drift_ckpt_stream *s) {
    drift_free(s->jobs);
    drift_ckpt_files_free(&s->ft);
    drift_free(s);
}

int drift_ckpt_stream_start(const drift_params_ref *ref, const char *root, const size_t *which, float *const *dst,
                            size_t n, int threads, drift_ckpt_stream **out, drift_err *err) {
    *out = NULL;
    if (!ref || (n && (!which || !dst)))
        return drift_err_set(err, DRIFT_E_INTERNAL, "checkpoint", "drift_ckpt_stream_start: NULL argument");
    if (!root) root = ref->weights_root;
    drift_ckpt_stream *s = drift_calloc(1, sizeof *s);
    if (!s) return drift_err_set(err, DRIFT_E_NOMEM, "checkpoint", "out of memory");
    s->jobs = drift_calloc(n ? n : 1, sizeof *s->jobs);
    int rc = s->jobs ? DRIFT_OK : drift_err_set(err, DRIFT_E_NOMEM, "checkpoint", "out of memory");
    if (!rc) rc = prepare_load(ref, root, which, dst, n, &s->ft, s->jobs, err);
    /* in the caller's order, not largest first: the consumer waits for them in this order */
    if (!rc) rc = drift_ckpt_pool_start(&s->pool, s->jobs, n, threads, 1, err);
    if (rc) {
        stream_free(s);
        return rc;
    }
    *out = s;
    return DRIFT_OK;
}

int drift_ckpt_stream_wait(drift_ckpt_stream *s, size_t k, drift_err *err) {
    return drift_ckpt_pool_wait(&s->pool, k, err);
}

int drift_ckpt_stream_finish(drift_ckpt_stream *s, int cancel, drift_ckpt_stats *st, drift_err *err) {
    if (st) memset(st, 0, sizeof *st);
    if (!s) return DRIFT_OK;
    int rc = drift_ckpt_pool_join(&s->pool, cancel, st, err);
    if (st) st->files = s->ft.n;
    stream_free(s);
    return rc;
}

/* ---- sequential baseline ----------------------------------------------------- */
static int unique_files(const drift_params_ref *ref, const size_t *which, size_t n, drift_ckpt_files *ft) {
    for (size_t k = 0; k < n; k++)
        if (which[k] < ref->n && drift_ckpt_files_slot(ft, ref->t[which[k]].file) < 0) return -1;
    return 0;
}

void drift_ckpt_drop_cache(const drift_params_ref *ref, const char *root, const size_t *which, size_t n) {
    drift_ckpt_files ft;
    memset(&ft, 0, sizeof ft);
    if (!root) root = ref->weights_root;
    if (unique_files(ref, which, n, &ft) == 0)
        for (size_t i = 0; i < ft.n; i++) {
            char path[PATH_MAX];
            if (drift_ckpt_join_path(path, sizeof path, root, ft.f[i].rel) || drift_ckpt_path_inside(root, path, NULL)) continue;
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0) continue;
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
            close(fd);
        }
    drift_ckpt_files_free(&ft);
}

int drift_ckpt_read_sequential(const drift_params_ref *ref, const char *root, const size_t *which, size_t n,
                               int drop_cache, uint64_t *bytes, double *seconds, drift_err *err) {
    *bytes = 0;
    *seconds = 0;
    if (!root) root = ref->weights_root;
    drift_ckpt_files ft;
    memset(&ft, 0, sizeof ft);
    const size_t chunk = (size_t)16 << 20;
    unsigned char *buf = drift_malloc(chunk);
    int rc = buf && unique_files(ref, which, n, &ft) == 0 ? DRIFT_OK
                                                           : drift_err_set(err, DRIFT_E_NOMEM, "checkpoint", "out of memory");
    if (!rc && drop_cache) drift_ckpt_drop_cache(ref, root, which, n);
    double t0 = drift_ckpt_now_s();
    for (size_t i = 0; !rc && i < ft.n; i++) {
        char path[PATH_MAX];
        if (drift_ckpt_join_path(path, sizeof path, root, ft.f[i].rel)) {
            rc = drift_err_set(err, DRIFT_E_INPUT, ft.f[i].rel, "path too long");
            break;
        }
        if ((rc = drift_ckpt_path_inside(root, path, err))) break;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            const char *tensor = "?"; /* name one tensor of the file, as the load's errors do */
            for (size_t k = 0; k < n && tensor[0] == '?'; k++)
                if (which[k] < ref->n && strcmp(ref->t[which[k]].file, ft.f[i].rel) == 0) tensor = ref->t[which[k]].name;
            rc = drift_err_set(err, DRIFT_E_INPUT, path, "tensor '%s': cannot open its checkpoint file %s: %s", tensor, path,
                               strerror(e));
            break;
        }
        for (off_t off = 0;;) {
            ssize_t got = pread(fd, buf, chunk, off);
            if (got < 0 && errno == EINTR) continue;
            if (got < 0) rc = drift_err_set(err, DRIFT_E_IO, path, "cannot read %s: %s", path, strerror(errno));
            if (got <= 0) break;
            off += got;
            *bytes += (uint64_t)got;
        }
        close(fd);
    }
    *seconds = drift_ckpt_now_s() - t0;
    drift_free(buf);
    drift_ckpt_files_free(&ft);
    return rc;
}

/* ---- describe ------------------------------------------------------------------ */
static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* Finds the index (or single file) of a checkpoint path: *root and *name. */
static int locate(const char *path, char *root, size_t rootsz, char *name, size_t namesz, int *is_index, drift_err *err) {
    struct stat sb;
    if (stat(path, &sb) != 0)
        return drift_err_set(err, DRIFT_E_INPUT, path, "checkpoint %s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) {
        const char *slash = strrchr(path, '/');
        size_t rl = slash ? (size_t)(slash - path) : 1;
        if (rl >= rootsz || strlen(slash ? slash + 1 : path) >= namesz)
            return drift_err_set(err, DRIFT_E_INPUT, path, "path too long");
        if (slash) { memcpy(root, path, rl); root[rl] = '\0'; if (!rl) snprintf(root, rootsz, "/"); }
        else snprintf(root, rootsz, ".");
        snprintf(name, namesz, "%s", slash ? slash + 1 : path);
        *is_index = ends_with(name, DRIFT_CKPT_INDEX_SUFFIX);
        if (!*is_index && !ends_with(name, ".safetensors"))
            return drift_err_set(err, DRIFT_E_INPUT, path, "checkpoint %s: expected a *%s or *.safetensors file", path,
                                 DRIFT_CKPT_INDEX_SUFFIX);
        return DRIFT_OK;
    }
    if (strlen(path) >= rootsz) return drift_err_set(err, DRIFT_E_INPUT, path, "path too long");
    snprintf(root, rootsz, "%s", path);
    DIR *d = opendir(path);
    if (!d) return drift_err_set(err, DRIFT_E_INPUT, path, "checkpoint directory %s: %s", path, strerror(errno));
    int n_index = 0, n_single = 0;
    char single[NAME_MAX + 1] = "";
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (ends_with(de->d_name, DRIFT_CKPT_INDEX_SUFFIX)) {
            if (n_index++ == 0) snprintf(name, namesz, "%s", de->d_name);
        } else if (ends_with(de->d_name, ".safetensors")) {
            if (n_single++ == 0) snprintf(single, sizeof single, "%s", de->d_name);
        }
    }
    closedir(d);
    if (n_index == 1) { *is_index = 1; return DRIFT_OK; }
    if (n_index > 1)
        return drift_err_set(err, DRIFT_E_INPUT, path, "checkpoint directory %s: %d *%s files, expected one (name the file)",
                             path, n_index, DRIFT_CKPT_INDEX_SUFFIX);
    if (n_single != 1)
        return drift_err_set(err, DRIFT_E_INPUT, path,
                             "checkpoint directory %s: no *%s index and %d *.safetensors files, expected one", path,
                             DRIFT_CKPT_INDEX_SUFFIX, n_single);
    snprintf(name, namesz, "%s", single);
    *is_index = 0;
    return DRIFT_OK;
}

int drift_ckpt_describe(const char *path, const char *const *want, const int64_t *want_numel, float *const *dst,
                        size_t n_want, int threads, drift_params_ref *ref, drift_ckpt_stats *st, drift_err *err) {
    char root[PATH_MAX], name[NAME_MAX + 1], ipath[PATH_MAX];
    int is_index = 0;
    if (st) memset(st, 0, sizeof *st);
    int rc = locate(path, root, sizeof root, name, sizeof name, &is_index, err);
    if (rc) return rc;
    drift_params_ref out;
    drift_params_ref_init(&out);
    drift_json_value *idx = NULL;
    drift_ckpt_files ft;
    memset(&ft, 0, sizeof ft);
    drift_ckpt_job *jobs = NULL;
    char *absroot = realpath(root, NULL);
    if (!absroot) return drift_err_set(err, DRIFT_E_INPUT, root, "checkpoint root %s: %s", root, strerror(errno));
    out.weights_root = drift_strdup(absroot);
    free(absroot);
    if (!out.weights_root) { rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory"); goto done; }
    if (is_index) {
        if (drift_ckpt_join_path(ipath, sizeof ipath, root, name)) { rc = drift_err_set(err, DRIFT_E_INPUT, name, "path too long"); goto done; }
        if (!(out.index = drift_strdup(name))) { rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory"); goto done; }
        if ((rc = drift_json_parse_file(ipath, &idx, err))) goto done;
        const drift_json_value *wm = idx->type == DRIFT_JSON_OBJECT ? drift_json_object_get(idx, "weight_map") : NULL;
        if (!wm || wm->type != DRIFT_JSON_OBJECT) {
            rc = drift_err_set(err, DRIFT_E_INPUT, ipath, "'weight_map': expected an object of tensor name -> shard file");
            goto done;
        }
        for (size_t i = 0; i < wm->n_members; i++) {
            const drift_json_member *m = &wm->members[i];
            const char *fp = m->value.type != DRIFT_JSON_STRING ? "expected a file name string"
                             : strlen(m->value.str) != m->value.str_len ? "a NUL byte"
                                                                         : drift_params_ref_file_problem(m->value.str);
            if (fp) {
                rc = drift_err_set(err, DRIFT_E_INPUT, ipath, "'weight_map' entry '%s': %s", m->key, fp);
                goto done;
            }
            if (drift_ckpt_files_slot(&ft, m->value.str) < 0) { rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory"); goto done; }
        }
    } else if (drift_ckpt_files_slot(&ft, name) < 0) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
        goto done;
    }
    /* Every tensor: from the index's weight_map in its order, or the single file's header order. */
    size_t n_all = 0;
    for (size_t fi = 0; fi < ft.n; fi++) {
        if ((rc = drift_ckpt_file_open(&ft.f[fi], root, is_index ? "(listed in the index)" : "(any)", err))) goto done;
        n_all += drift_safetensors_n_tensors(ft.f[fi].st);
    }
    jobs = drift_calloc(n_all ? n_all : 1, sizeof *jobs);
    if (!jobs) { rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory"); goto done; }
    size_t n_idx = is_index ? drift_json_object_get(idx, "weight_map")->n_members : drift_safetensors_n_tensors(ft.f[0].st);
    for (size_t i = 0; i < n_idx; i++) {
        const char *tname;
        drift_ckpt_file *f;
        long ti;
        if (is_index) {
            const drift_json_member *m = &drift_json_object_get(idx, "weight_map")->members[i];
            tname = m->key;
            f = &ft.f[drift_ckpt_files_slot(&ft, m->value.str)];
            if ((ti = drift_safetensors_find(f->st, tname)) < 0) {
                rc = drift_err_set(err, DRIFT_E_INPUT, ipath, "'weight_map' maps '%s' to %s, which has no such tensor", tname,
                                   f->path);
                goto done;
            }
        } else {
            f = &ft.f[0];
            ti = (long)i;
        }
        drift_safetensors_info info;
        if ((rc = drift_safetensors_tensor(f->st, (size_t)ti, &info, err))) goto done;
        if (is_index) tname = info.name;
        if ((rc = drift_params_ref_add(&out, info.name, f->rel, info.dtype, info.ndim, info.shape, 0, err))) {
            if (rc == DRIFT_E_USAGE) { rc = DRIFT_E_INPUT; if (err) err->code = rc; }
            goto done;
        }
        jobs[i] = (drift_ckpt_job){.name = out.t[i].name, .file = f, .offset = info.offset, .nbytes = info.nbytes,
                        .dtype = info.dtype, .numel = info.numel};
        (void)tname;
    }
    for (size_t k = 0; k < n_want; k++) {
        long i = drift_params_ref_find(&out, want[k]);
        if (i < 0) {
            rc = drift_err_set(err, DRIFT_E_INPUT, path, "checkpoint %s has no tensor '%s' (the model needs it)", path, want[k]);
            goto done;
        }
        if (out.t[i].numel != want_numel[k]) {
            rc = drift_err_set(err, DRIFT_E_INPUT, path, "checkpoint tensor '%s' (%s): %lld elements, expected %lld", want[k],
                               out.t[i].file, (long long)out.t[i].numel, (long long)want_numel[k]);
            goto done;
        }
        jobs[i].dst = dst[k];
    }
    for (size_t i = 0; i < n_idx; i++) jobs[i].hash_out = &out.t[i].hash; /* out.t no longer moves */
    if ((rc = pool_run(jobs, n_idx, threads, st, err))) goto done;
    if (st) st->files = ft.n;
    *ref = out;
    drift_params_ref_init(&out);
done:
    drift_free(jobs);
    drift_ckpt_files_free(&ft);
    drift_json_free(idx);
    drift_params_ref_free(&out);
    return rc;
}

/* ---- write ---------------------------------------------------------------------- */
typedef struct wjob {
    const drift_ckpt_spec *spec;
    size_t index;                /* into specs */
    int64_t numel;
    void *raw;                   /* stored bytes (owned by the writer) */
    uint64_t hash;
} wjob;

typedef struct wpool {
    wjob *jobs;
    size_t n;
    drift_ckpt_fill_fn fill;
    void *user;
    atomic_size_t next;
    atomic_int failed;
    pthread_mutex_t mu;
    size_t err_job;
    drift_err err;
} wpool;

static void *wpool_thread(void *arg) {
    wpool *p = arg;
    float *scratch = NULL;
    size_t cap = 0;
    for (;;) {
        if (atomic_load(&p->failed)) break;
        size_t k = atomic_fetch_add(&p->next, 1);
        if (k >= p->n) break;
        wjob *j = &p->jobs[k];
        drift_err e;
        drift_err_clear(&e);
        int rc = DRIFT_OK;
        float *dst = j->spec->dtype == DRIFT_F32 ? (float *)j->raw : NULL;
        if (!dst) {
            if ((size_t)j->numel > cap) {
                float *ns = drift_realloc(scratch, (size_t)(j->numel ? j->numel : 1) * sizeof *ns);
                if (!ns) rc = drift_err_set(&e, DRIFT_E_NOMEM, j->spec->name, "out of memory for '%s'", j->spec->name);
                else { scratch = ns; cap = (size_t)j->numel; }
            }
            dst = scratch;
        }
        if (!rc) rc = p->fill(j->index, dst, p->user, &e);
        if (!rc) {
            if (j->spec->dtype != DRIFT_F32) drift_dtype_from_f32_n(dst, j->raw, j->spec->dtype, (size_t)j->numel);
            size_t nb = (size_t)j->numel * drift_dtype_size(j->spec->dtype);
            j->hash = drift_hash64_finish(drift_hash64_partial(j->raw, nb, 0), nb);
        } else {
            pthread_mutex_lock(&p->mu);
            if (!atomic_load(&p->failed) || k < p->err_job) { p->err_job = k; p->err = e; }
            atomic_store(&p->failed, 1);
            pthread_mutex_unlock(&p->mu);
        }
    }
    drift_free(scratch);
    return NULL;
}

static int wpool_run(wjob *jobs, size_t n, drift_ckpt_fill_fn fill, void *user, int threads, drift_err *err) {
    wpool p;
    memset(&p, 0, sizeof p);
    p.jobs = jobs;
    p.n = n;
    p.fill = fill;
    p.user = user;
    atomic_init(&p.next, 0);
    atomic_init(&p.failed, 0);
    pthread_mutex_init(&p.mu, NULL);
    if (threads < 1) threads = 1;
    if (threads > CKPT_MAX_THREADS) threads = CKPT_MAX_THREADS;
    pthread_t tid[CKPT_MAX_THREADS];
    int started = 0;
    for (int t = 1; t < threads && (size_t)t < n; t++) {
        if (pthread_create(&tid[started], NULL, wpool_thread, &p) != 0) break;
        started++;
    }
    wpool_thread(&p);
    for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
    pthread_mutex_destroy(&p.mu);
    if (atomic_load(&p.failed)) {
        if (err) *err = p.err;
        return p.err.code ? p.err.code : DRIFT_E_INTERNAL;
    }
    return DRIFT_OK;
}

/* Writes text to path through a temporary file renamed into place. */
static int write_text(const char *path, const char *text, drift_err *err) {
    return drift_outpath_write_file(path, text, strlen(text), 1, err);
}

int drift_ckpt_write(const char *dir, const drift_ckpt_spec *specs, size_t n, uint64_t shard_bytes,
                     drift_ckpt_fill_fn fill, void *user, int threads, drift_params_ref *ref, drift_err *err) {
    if (!dir || !fill || !ref || (n && !specs))
        return drift_err_set(err, DRIFT_E_INTERNAL, "checkpoint", "drift_ckpt_write: NULL argument");
    drift_ckpt_dir cd; /* written under a temporary folder, swapped in whole (checkpoint_dir.c) */
    int drc = drift_ckpt_dir_begin(&cd, dir, err);
    if (drc) return drc;
    const char *final_dir = dir;
    dir = cd.tmp;
    /* Plan the shards: tensors in order, a new shard when the next would pass shard_bytes. */
    size_t *shard_of = drift_calloc(n ? n : 1, sizeof *shard_of);
    uint64_t *bytes = drift_calloc(n ? n : 1, sizeof *bytes);
    drift_params_ref out;
    drift_params_ref_init(&out);
    wjob *jobs = NULL;
    drift_safetensors_entry *ents = NULL;
    drift_json_buf b;
    drift_json_buf_init(&b);
    int rc = shard_of && bytes ? DRIFT_OK : drift_err_set(err, DRIFT_E_NOMEM, dir, "out of memory");
    size_t n_shards = 0;
    uint64_t in_shard = 0, total = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        int64_t numel = 1;
        for (int d = 0; d < specs[i].ndim; d++) numel *= specs[i].shape[d];
        bytes[i] = (uint64_t)numel * drift_dtype_size(specs[i].dtype);
        if (n_shards == 0 || (shard_bytes && in_shard > 0 && in_shard + bytes[i] > shard_bytes)) {
            n_shards++;
            in_shard = 0;
        }
        shard_of[i] = n_shards - 1;
        in_shard += bytes[i];
        total += bytes[i];
    }
    if (!rc && !(out.weights_root = drift_strdup(cd.abs))) rc = drift_err_set(err, DRIFT_E_NOMEM, final_dir, "out of memory");
    if (!rc && !(out.index = drift_strdup(DRIFT_CKPT_BASENAME DRIFT_CKPT_INDEX_SUFFIX)))
        rc = drift_err_set(err, DRIFT_E_NOMEM, dir, "out of memory");
    if (!rc && (!(jobs = drift_calloc(n ? n : 1, sizeof *jobs)) || !(ents = drift_calloc(n ? n : 1, sizeof *ents))))
        rc = drift_err_set(err, DRIFT_E_NOMEM, dir, "out of memory");
    char fname[128];
    for (size_t s = 0, first = 0; !rc && s < n_shards; s++) {
        size_t last = first;
        while (last < n && shard_of[last] == s) last++;
        size_t m = last - first;
        for (size_t k = 0; k < m && !rc; k++) {
            const drift_ckpt_spec *sp = &specs[first + k];
            jobs[k] = (wjob){.spec = sp, .index = first + k, .numel = (int64_t)(bytes[first + k] / drift_dtype_size(sp->dtype))};
            if (!(jobs[k].raw = drift_malloc(bytes[first + k] ? (size_t)bytes[first + k] : 1)))
                rc = drift_err_set(err, DRIFT_E_NOMEM, sp->name, "out of memory for tensor '%s' (%llu bytes)", sp->name,
                                   (unsigned long long)bytes[first + k]);
        }
        if (!rc) rc = wpool_run(jobs, m, fill, user, threads, err);
        snprintf(fname, sizeof fname, "%s-%05zu-of-%05zu.safetensors", DRIFT_CKPT_BASENAME, s + 1, n_shards);
        char path[PATH_MAX];
        if (!rc && drift_ckpt_join_path(path, sizeof path, dir, fname)) rc = drift_err_set(err, DRIFT_E_USAGE, dir, "path too long");
        for (size_t k = 0; !rc && k < m; k++)
            ents[k] = (drift_safetensors_entry){.name = jobs[k].spec->name, .dtype = jobs[k].spec->dtype,
                                                .ndim = jobs[k].spec->ndim, .shape = jobs[k].spec->shape, .raw = jobs[k].raw};
        const char *mk[1] = {"format"}, *mv[1] = {"pt"};
        if (!rc) rc = drift_safetensors_write(path, ents, m, mk, mv, 1, err);
        for (size_t k = 0; !rc && k < m; k++)
            rc = drift_params_ref_add(&out, jobs[k].spec->name, fname, jobs[k].spec->dtype, jobs[k].spec->ndim,
                                      jobs[k].spec->shape, jobs[k].hash, err);
        for (size_t k = 0; k < m; k++) {
            drift_free(jobs[k].raw);
            jobs[k].raw = NULL;
        }
        first = last;
    }
    /* The index, as diffusers / transformers write it. */
    if (!rc) {
        drift_json_buf_init_pretty(&b, 2);
        drift_json_buf_begin_object(&b);
        drift_json_buf_add_key(&b, "metadata");
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_int(&b, "total_size", (int64_t)total);
        drift_json_buf_end_object(&b);
        drift_json_buf_add_key(&b, "weight_map");
        drift_json_buf_begin_object(&b);
        for (size_t i = 0; i < out.n; i++) drift_json_buf_field_string(&b, out.t[i].name, out.t[i].file);
        drift_json_buf_end_object(&b);
        drift_json_buf_end_object(&b);
        char *text = drift_json_buf_take(&b);
        char ipath[PATH_MAX];
        if (!text) rc = drift_err_set(err, DRIFT_E_NOMEM, dir, "out of memory writing the index");
        else if (drift_ckpt_join_path(ipath, sizeof ipath, dir, out.index)) rc = drift_err_set(err, DRIFT_E_USAGE, dir, "path too long");
        else rc = write_text(ipath, text, err);
        drift_free(text);
    }
    if (!rc) rc = drift_ckpt_dir_commit(&cd, err);
    else drift_ckpt_dir_abort(&cd);
    if (!rc) {
        *ref = out;
        drift_params_ref_init(&out);
    }
    drift_json_buf_free(&b);
    drift_free(ents);
    drift_free(jobs);
    drift_free(shard_of);
    drift_free(bytes);
    drift_params_ref_free(&out);
    return rc;
}
