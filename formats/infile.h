/* Input files named by the user (docs/RELIABILITY.md "Inputs"): a FIFO,
 * socket or device is refused before anything blocks on it (opened with
 * O_NONBLOCK, checked with fstat, then read normally). */
#ifndef DRIFT_INFILE_H
#define DRIFT_INFILE_H

#include <stdio.h>

#include "formats/err.h"

/* DRIFT_E_INPUT "is a FIFO (expected a regular file ...)" for a path that
 * exists and is not a regular file (following links); DRIFT_OK otherwise
 * (a missing file is left to the open that follows). Opens nothing. */
int drift_in_check(const char *path, drift_err *err);
/* Opens path for reading: a regular file only, never blocking on a FIFO.
 * -1 with err set (DRIFT_E_IO: cannot open, naming the system's reason;
 * DRIFT_E_INPUT: not a regular file). */
int drift_in_open(const char *path, drift_err *err);
/* The same as a stdio stream ("rb"); NULL with err set. */
FILE *drift_in_fopen(const char *path, drift_err *err);

#endif
