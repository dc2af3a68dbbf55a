/* Input files: see infile.h. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/infile.h"

static const char *kind_of(mode_t m) {
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISDIR(m)) return "a directory";
    return "not a regular file";
}

static int refuse(const char *path, mode_t m, drift_err *err) {
    return drift_err_set(err, DRIFT_E_INPUT, path,
                         "is %s (expected a regular file; drift does not read a FIFO, socket or device, which could "
                         "block it forever)",
                         kind_of(m));
}

int drift_in_check(const char *path, drift_err *err) {
    struct stat st;
    if (!path || stat(path, &st) != 0) return DRIFT_OK;
    return S_ISREG(st.st_mode) ? DRIFT_OK : refuse(path, st.st_mode, err);
}

int drift_in_open(const char *path, drift_err *err) {
    int rc = drift_in_check(path, err); /* before the open: a FIFO is never opened */
    if (rc) return -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        drift_err_set(err, DRIFT_E_IO, path, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) { /* swapped in after the check */
        refuse(path, st.st_mode, err);
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

FILE *drift_in_fopen(const char *path, drift_err *err) {
    int fd = drift_in_open(path, err);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        drift_err_set(err, DRIFT_E_IO, path, "cannot open: %s", strerror(errno));
        close(fd);
    }
    return f;
}
