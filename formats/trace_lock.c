/* Exclusive writers (docs/RELIABILITY.md, "Writers"): an advisory lock on
 * "<trace>.lock", taken before anything is created or truncated, held until
 * the writer is closed, and tested by `drift check --repair` (a file whose
 * lock is held is still being written). flock(2) locks die with their
 * process, so a killed writer never leaves the trace locked. */
#define _GNU_SOURCE /* O_CLOEXEC, flock */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/file.h>
#include <sys/stat.h>

#include "formats/trace_internal.h"

int tr_lock_path(const char *path, char *out, size_t sz) {
    return (size_t)snprintf(out, sz, "%s.lock", path) < sz ? 0 : -1;
}

static int read_pid(int fd) {
    char b[32] = "";
    ssize_t n = pread(fd, b, sizeof b - 1, 0);
    if (n <= 0) return 0;
    b[n] = '\0';
    return atoi(b);
}

int tr_lock_take(const char *path, int *fd_out, drift_err *err) {
    char lp[4200];
    *fd_out = -1;
    if (tr_lock_path(path, lp, sizeof lp) != 0) return drift_err_set(err, DRIFT_E_USAGE, path, "path too long");
    for (int attempt = 0; attempt < 8; attempt++) {
        int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
            return drift_err_set(err, DRIFT_E_IO, lp, "cannot create the writer's lock file: %s", strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno, pid = read_pid(fd);
            close(fd);
            if (e == EWOULDBLOCK) {
                if (pid > 0)
                    return drift_err_set(err, DRIFT_E_IO, path,
                                         "another writer (pid %d) is writing this trace (lock %s); nothing was touched",
                                         pid, lp);
                return drift_err_set(err, DRIFT_E_IO, path,
                                     "another writer is writing this trace (lock %s); nothing was touched", lp);
            }
            return drift_err_set(err, DRIFT_E_IO, lp, "cannot lock: %s", strerror(e));
        }
        /* The holder before us may have unlinked the lock file after we
         * opened it: only a lock on the file that the name still names counts. */
        struct stat a, b;
        if (fstat(fd, &a) == 0 && stat(lp, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev) {
            char pid[32];
            int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
            if (ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)n, 0) != n) { /* informative only */
            }
            *fd_out = fd;
            return DRIFT_OK;
        }
        close(fd);
    }
    return drift_err_set(err, DRIFT_E_IO, lp, "cannot take the writer's lock (its file keeps changing)");
}

void tr_lock_release(const char *path, int fd) {
    if (fd < 0) return;
    char lp[4200];
    if (path && tr_lock_path(path, lp, sizeof lp) == 0) unlink(lp); /* before the unlock: see tr_lock_take */
    close(fd);
}

int tr_lock_busy(const char *path, int *pid) {
    char lp[4200];
    if (pid) *pid = 0;
    if (tr_lock_path(path, lp, sizeof lp) != 0) return 0;
    int fd = open(lp, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return 0;
    int busy = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    if (busy && pid) *pid = read_pid(fd);
    close(fd);
    return busy;
}
