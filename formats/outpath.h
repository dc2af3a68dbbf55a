/* Output files (docs/RELIABILITY.md "Outputs"): one helper for every -o.
 *
 * A target is written only if it is absent or a regular file (never a
 * device, FIFO, socket, directory or symbolic link, --force or not). The
 * bytes go to a temporary beside it, created with O_CREAT|O_EXCL|O_NOFOLLOW
 * under an unpredictable name, and are renamed over the target only after
 * the whole write succeeded; on failure the temporary is removed and the
 * target is left as it was. */
#ifndef DRIFT_OUTPATH_H
#define DRIFT_OUTPATH_H

#include "formats/err.h"

typedef struct drift_outpath {
    char *path; /* the target */
    char *tmp;  /* the temporary beside it (NULL once renamed or removed) */
    int fd;     /* open on tmp for writing, -1 once closed */
} drift_outpath;

/* DRIFT_OK when path may be written: absent with an existing directory, or
 * a regular file and replace != 0. Else DRIFT_E_USAGE ("exists; give --force",
 * a directory), DRIFT_E_INPUT (not a regular file) or DRIFT_E_IO (no such
 * directory), err naming path. */
int drift_outpath_check(const char *path, int replace, drift_err *err);
/* Creates o->tmp beside path ("PATH.drift-tmp.PID.RANDOM", O_CREAT|O_EXCL|
 * O_NOFOLLOW, mode 0666 & ~umask) and leaves it open as o->fd. */
int drift_outpath_open(drift_outpath *o, const char *path, drift_err *err);
/* Closes o->fd if open (reporting a failed close), checks the target again
 * (absent, or regular and replace != 0) and renames the temporary over it.
 * On any failure the temporary is removed and the target untouched. Frees o. */
int drift_outpath_commit(drift_outpath *o, int replace, drift_err *err);
/* Removes the temporary (if any) and frees o; the target is untouched. */
void drift_outpath_abort(drift_outpath *o);
/* Writes len bytes of buf to o->fd (retrying short writes); DRIFT_E_IO naming
 * the target and the system's reason on failure. */
int drift_outpath_write(drift_outpath *o, const void *buf, size_t len, drift_err *err);
/* Writes text to path through the helper (check, open, write, commit). */
int drift_outpath_write_file(const char *path, const void *buf, size_t len, int replace, drift_err *err);

#endif
