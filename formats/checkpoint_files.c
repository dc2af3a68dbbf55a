/* Mapped shard files of a checkpoint (checkpoint_internal.h). */
#define _GNU_SOURCE /* realpath */
#include "formats/checkpoint_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdint.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "formats/alloc.h"

double drift_ckpt_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int drift_ckpt_join_path(char *out, size_t outsz, const char *root, const char *rel) {
    int k = snprintf(out, outsz, "%s/%s", root && *root ? root : ".", rel);
    return k < 0 || (size_t)k >= outsz ? -1 : 0;
}

void drift_ckpt_files_free(drift_ckpt_files *t) {
    for (size_t i = 0; i < t->n; i++) {
        if (t->f[i].map) munmap((void *)t->f[i].map, t->f[i].size);
        if (t->f[i].fd >= 0) close(t->f[i].fd);
        drift_safetensors_close(t->f[i].st);
    }
    drift_free(t->f);
    drift_free(t->slot);
    memset(t, 0, sizeof *t);
}

static size_t rel_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

/* A hashed index of the files by name: an index naming 80k shards took 42 s
 * before its first error with a linear scan per tensor (issue 34 item 13). */
static int files_rehash(drift_ckpt_files *t, size_t want) {
    size_t cap = 64;
    while (cap < 2 * want) cap *= 2;
    size_t *slot = drift_calloc(cap, sizeof *slot);
    if (!slot) return -1;
    drift_free(t->slot);
    t->slot = slot;
    t->hcap = cap;
    for (size_t i = 0; i < t->n; i++) {
        size_t j = rel_hash(t->f[i].rel) & (cap - 1);
        while (slot[j]) j = (j + 1) & (cap - 1);
        slot[j] = i + 1;
    }
    return 0;
}

long drift_ckpt_files_slot(drift_ckpt_files *t, const char *rel) {
    if (2 * (t->n + 1) > t->hcap && files_rehash(t, t->n + 1) != 0) return -1;
    size_t j = rel_hash(rel) & (t->hcap - 1);
    for (; t->slot[j]; j = (j + 1) & (t->hcap - 1))
        if (strcmp(t->f[t->slot[j] - 1].rel, rel) == 0) return (long)(t->slot[j] - 1);
    t->slot[j] = t->n + 1; /* the entry about to be added */
    if (t->n == t->cap) {
        size_t nc = t->cap ? t->cap * 2 : 16;
        drift_ckpt_file *nf = drift_reallocarray(t->f, nc, sizeof *nf);
        if (!nf) {
            t->slot[j] = 0;
            return -1;
        }
        t->f = nf;
        t->cap = nc;
    }
    memset(&t->f[t->n], 0, sizeof t->f[t->n]);
    t->f[t->n].rel = rel;
    t->f[t->n].fd = -1;
    return (long)t->n++;
}

int drift_ckpt_file_open(drift_ckpt_file *f, const char *root, const char *tensor, drift_err *err) {
    if (f->st) return DRIFT_OK;
    if (drift_ckpt_join_path(f->path, sizeof f->path, root, f->rel))
        return drift_err_set(err, DRIFT_E_INPUT, f->rel, "tensor '%s': path of file '%s' under '%s' is too long", tensor,
                             f->rel, root ? root : ".");
    int irc = drift_ckpt_path_inside(root, f->path, err);
    if (irc) return irc;
    drift_err e;
    drift_err_clear(&e);
    if (drift_safetensors_open(&f->st, f->path, 0, &e)) /* out of memory stays that, the rest is the file's fault */
        return drift_err_set(err, e.code == DRIFT_E_NOMEM ? DRIFT_E_NOMEM : DRIFT_E_INPUT, f->path, "tensor '%s': its checkpoint file %s: %s", tensor, f->path, e.msg);
    struct stat sb;
    f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0 || fstat(f->fd, &sb) != 0)
        return drift_err_set(err, DRIFT_E_INPUT, f->path, "tensor '%s': cannot open its checkpoint file %s: %s", tensor,
                             f->path, strerror(errno));
    f->size = (size_t)sb.st_size;
    if (f->size) {
        void *m = mmap(NULL, f->size, PROT_READ, MAP_SHARED, f->fd, 0);
        if (m == MAP_FAILED)
            return drift_err_set(err, DRIFT_E_IO, f->path, "tensor '%s': cannot map %s: %s", tensor, f->path,
                                 strerror(errno));
        f->map = m;
    }
    return DRIFT_OK;
}

/* 1 if the real path p lies in the real folder d (or is d). */
static int under(const char *p, const char *d) {
    size_t n = strlen(d);
    if (n == 1 && d[0] == '/') return 1;
    return strncmp(p, d, n) == 0 && (p[n] == '/' || p[n] == '\0');
}

int drift_ckpt_path_inside(const char *root, const char *path, drift_err *err) {
    char *rr = realpath(root ? root : ".", NULL), *rp = realpath(path, NULL);
    int ok = !rr || !rp || under(rp, rr); /* missing: the open that follows says so, reading nothing */
    free(rr);
    free(rp);
    if (ok) return DRIFT_OK;
    return drift_err_set(err, DRIFT_E_INPUT, path,
                         "resolves outside the checkpoint folder %s (a symbolic link or '..' in the index): refused, "
                         "nothing was read from it [refused: docs/RELIABILITY.md, weights]",
                         root ? root : ".");
}

int drift_ckpt_root_allowed(const char *root, const char *trace, drift_err *err) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", trace ? trace : ".");
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    if (!root || !*root)
        return drift_err_set(err, DRIFT_E_INPUT, trace, "/params_ref records no weights_root: give --weights-root DIR");
    char *rd = realpath(dir, NULL), *rr = realpath(root, NULL);
    int ok = rd && (!rr || under(rr, rd)); /* a root that does not exist: its open fails, reading nothing */
    free(rd);
    free(rr);
    if (ok) return DRIFT_OK;
    return drift_err_set(err, DRIFT_E_INPUT, trace,
                         "/params_ref names the checkpoint folder %s, outside the trace's folder %s: a trace does not "
                         "choose where drift reads; give --weights-root %s to read it [refused: docs/RELIABILITY.md, weights]",
                         root, dir, root);
}
