/* A checkpoint folder written whole or not at all (docs/RELIABILITY.md
 * "Outputs"): the writer holds "DIR.lock" (flock; a second writer fails at
 * once), writes every shard and the index into "DIR.drift-tmp.PID.RANDOM",
 * and only then swaps it into place (renameat2 RENAME_EXCHANGE, so DIR is
 * at every instant the old checkpoint or the new one, never a mix) and
 * removes the old one. A folder holding anything but a drift checkpoint's
 * files is never replaced. A kill leaves DIR as it was plus the temporary. */
#define _GNU_SOURCE /* renameat2, realpath */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "formats/alloc.h"
#include "formats/checkpoint_internal.h"
#include "formats/trace_internal.h"

int drift_ckpt_is_own_file(const char *name) {
    size_t bl = strlen(DRIFT_CKPT_BASENAME), n = strlen(name);
    if (strncmp(name, DRIFT_CKPT_BASENAME, bl) != 0) return 0;
    const char *sfx = ".safetensors", *isfx = DRIFT_CKPT_INDEX_SUFFIX;
    size_t sl = strlen(sfx), il = strlen(isfx);
    return (n >= sl && strcmp(name + n - sl, sfx) == 0) || (n >= il && strcmp(name + n - il, isfx) == 0);
}

/* Removes the regular files of a folder we made (or the old checkpoint we
 * swapped out) and the folder. */
static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[PATH_MAX];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
                (size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < sizeof p)
                unlink(p);
        closedir(d);
    }
    rmdir(dir);
}

int drift_ckpt_dir_begin(drift_ckpt_dir *d, const char *dir, drift_err *err) {
    memset(d, 0, sizeof *d);
    d->lock = -1;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--; /* "ckpt/" names ckpt */
    if (n + 64 >= sizeof d->final)
        return drift_err_set(err, DRIFT_E_USAGE, dir, "path too long");
    memcpy(d->final, dir, n);
    d->final[n] = '\0';
    int rc = tr_lock_take(d->final, &d->lock, err);
    if (rc) {
        if (err) snprintf(err->msg, sizeof err->msg, "another drift is writing this checkpoint (lock %.900s.lock); nothing was touched",
                          d->final);
        return rc;
    }
    struct stat st;
    if (lstat(d->final, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            rc = drift_err_set(err, DRIFT_E_USAGE, d->final, "exists and is not a folder (a checkpoint is a folder)");
            goto fail;
        }
        DIR *dd = opendir(d->final);
        if (!dd) {
            rc = drift_err_set(err, DRIFT_E_IO, d->final, "cannot read the folder: %s", strerror(errno));
            goto fail;
        }
        struct dirent *e;
        while ((e = readdir(dd))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            d->existed = 1;
            if (!drift_ckpt_is_own_file(e->d_name)) {
                rc = drift_err_set(err, DRIFT_E_USAGE, d->final,
                                   "holds '%.200s', which is not part of a drift checkpoint: the folder is not replaced "
                                   "(give an empty or new folder)", e->d_name);
                break;
            }
        }
        closedir(dd);
        if (rc) goto fail;
        d->existed = 1;
    }
    /* the absolute final name: its folder resolved, its own name kept */
    char parent[PATH_MAX], *slash = strrchr(d->final, '/');
    const char *base = slash ? slash + 1 : d->final;
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == d->final) snprintf(parent, sizeof parent, "/");
    else snprintf(parent, sizeof parent, "%.*s", (int)(slash - d->final), d->final);
    char *abs = realpath(parent, NULL);
    if (!abs) {
        rc = drift_err_set(err, DRIFT_E_IO, d->final, "cannot resolve its folder %s: %s", parent, strerror(errno));
        goto fail;
    }
    int w = snprintf(d->abs, sizeof d->abs, "%s%s%s", abs, strcmp(abs, "/") ? "/" : "", base);
    free(abs);
    if (w < 0 || (size_t)w >= sizeof d->abs) {
        rc = drift_err_set(err, DRIFT_E_USAGE, d->final, "path too long");
        goto fail;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    for (int t = 0; t < 16; t++) {
        snprintf(d->tmp, sizeof d->tmp, "%s.drift-tmp.%ld.%08lx", d->final, (long)getpid(),
                 (unsigned long)((uint64_t)ts.tv_nsec * 2654435761u + (uint64_t)t * 40503u) & 0xffffffffu);
        if (mkdir(d->tmp, 0777) == 0) return DRIFT_OK;
        if (errno != EEXIST) break;
    }
    rc = drift_err_set(err, DRIFT_E_IO, d->final, "cannot create a temporary folder beside it: %s", strerror(errno));
    d->tmp[0] = '\0';
fail:
    tr_lock_release(d->final, d->lock);
    d->lock = -1;
    return rc;
}

int drift_ckpt_dir_commit(drift_ckpt_dir *d, drift_err *err) {
    int rc = DRIFT_OK;
    struct stat st;
    if (lstat(d->final, &st) == 0 && S_ISDIR(st.st_mode)) {
        /* atomic: DIR is the old checkpoint or the new one at every instant */
        if (renameat2(AT_FDCWD, d->tmp, AT_FDCWD, d->final, RENAME_EXCHANGE) == 0) {
            remove_tree(d->tmp); /* the old checkpoint, now under the temporary name */
        } else if (errno == EINVAL || errno == ENOSYS) { /* a file system without exchange: two renames */
            char old[PATH_MAX + 32];
            snprintf(old, sizeof old, "%s.drift-old.%ld", d->final, (long)getpid());
            if (rename(d->final, old) != 0 || rename(d->tmp, d->final) != 0) {
                rc = drift_err_set(err, DRIFT_E_IO, d->final, "cannot move the new checkpoint into place: %s", strerror(errno));
                rename(old, d->final);
            } else {
                remove_tree(old);
            }
        } else {
            rc = drift_err_set(err, DRIFT_E_IO, d->final, "cannot move the new checkpoint into place: %s", strerror(errno));
        }
    } else if (rename(d->tmp, d->final) != 0) {
        rc = drift_err_set(err, DRIFT_E_IO, d->final, "cannot move the new checkpoint into place: %s", strerror(errno));
    }
    if (rc) remove_tree(d->tmp);
    d->tmp[0] = '\0';
    tr_lock_release(d->final, d->lock);
    d->lock = -1;
    return rc;
}

void drift_ckpt_dir_abort(drift_ckpt_dir *d) {
    if (d->tmp[0]) remove_tree(d->tmp);
    d->tmp[0] = '\0';
    if (d->lock >= 0) tr_lock_release(d->final, d->lock);
    d->lock = -1;
}
