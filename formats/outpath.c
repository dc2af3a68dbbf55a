/* Output files: see outpath.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "formats/alloc.h"
#include "formats/outpath.h"

static const char *kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISLNK(m)) return "a symbolic link";
    return "not a regular file";
}

static int check_target(const char *path, int replace, drift_err *err) {
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno != ENOENT) return drift_err_set(err, DRIFT_E_IO, path, "cannot write: %s", strerror(errno));
        /* a new file: its directory must exist */
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (!slash) return DRIFT_OK;
        if (slash == dir) slash[1] = '\0';
        else *slash = '\0';
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
            return drift_err_set(err, DRIFT_E_IO, path, "cannot write %s: no such directory %s", path, dir);
        return DRIFT_OK;
    }
    if (!S_ISREG(st.st_mode))
        return drift_err_set(err, S_ISDIR(st.st_mode) ? DRIFT_E_USAGE : DRIFT_E_INPUT, path,
                             "%s is %s (expected a regular file path to write; drift never replaces a directory, "
                             "device, FIFO, socket or symbolic link, --force or not)",
                             path, kind_of(st.st_mode));
    if (!replace) return drift_err_set(err, DRIFT_E_USAGE, path, "%s exists; give --force to replace it", path);
    return DRIFT_OK;
}

int drift_outpath_check(const char *path, int replace, drift_err *err) {
    if (!path || !*path) return drift_err_set(err, DRIFT_E_USAGE, NULL, "an empty output path");
    return check_target(path, replace, err);
}

static uint64_t rnd64(void) {
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        if (read(fd, &v, sizeof v) != (ssize_t)sizeof v) v = 0;
        close(fd);
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return v ^ ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
}

int drift_outpath_open(drift_outpath *o, const char *path, drift_err *err) {
    o->path = o->tmp = NULL;
    o->fd = -1;
    size_t n = strlen(path) + 64;
    o->path = drift_strdup(path);
    o->tmp = drift_malloc(n);
    if (!o->path || !o->tmp) {
        drift_outpath_abort(o);
        return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
    }
    for (int tries = 0; tries < 16; tries++) {
        snprintf(o->tmp, n, "%s.drift-tmp.%ld.%016llx", path, (long)getpid(), (unsigned long long)rnd64());
        /* O_EXCL|O_NOFOLLOW: never through a link or over a file someone planted */
        o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (o->fd >= 0) return DRIFT_OK;
        if (errno != EEXIST) break;
    }
    int e = errno;
    free(o->tmp);
    o->tmp = NULL;
    drift_outpath_abort(o);
    return drift_err_set(err, DRIFT_E_IO, path, "cannot create a temporary file beside it: %s", strerror(e));
}

int drift_outpath_write(drift_outpath *o, const void *buf, size_t len, drift_err *err) {
    const char *p = buf;
    while (len) {
        ssize_t k = write(o->fd, p, len);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return drift_err_set(err, DRIFT_E_IO, o->path, "cannot write: %s", k < 0 ? strerror(errno) : "no progress");
        p += k;
        len -= (size_t)k;
    }
    return DRIFT_OK;
}

int drift_outpath_commit(drift_outpath *o, int replace, drift_err *err) {
    int rc = DRIFT_OK;
    if (o->fd >= 0) {
        if (close(o->fd) != 0) rc = drift_err_set(err, DRIFT_E_IO, o->path, "cannot write: %s", strerror(errno));
        o->fd = -1;
    }
    if (!rc) rc = check_target(o->path, replace, err); /* what appeared meanwhile is kept */
    if (!rc && rename(o->tmp, o->path) != 0)
        rc = drift_err_set(err, DRIFT_E_IO, o->path, "cannot rename the temporary into place: %s (the old file is kept)",
                           strerror(errno));
    if (!rc) {
        free(o->tmp);
        o->tmp = NULL;
    }
    drift_outpath_abort(o);
    return rc;
}

void drift_outpath_abort(drift_outpath *o) {
    if (!o) return;
    if (o->fd >= 0) close(o->fd);
    o->fd = -1;
    if (o->tmp) unlink(o->tmp);
    free(o->tmp);
    free(o->path);
    o->tmp = o->path = NULL;
}

int drift_outpath_write_file(const char *path, const void *buf, size_t len, int replace, drift_err *err) {
    drift_outpath o;
    int rc = drift_outpath_check(path, replace, err);
    if (!rc) rc = drift_outpath_open(&o, path, err);
    if (rc) return rc;
    if ((rc = drift_outpath_write(&o, buf, len, err))) {
        drift_outpath_abort(&o);
        return rc;
    }
    return drift_outpath_commit(&o, replace, err);
}
