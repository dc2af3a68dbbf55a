/* Private to recorder/intercept: the entry point of
 * libdrift_intercept_writer.so, which the interposer dlopens (RTLD_LOCAL)
 * at flush time so that HDF5 never enters the job's global symbol scope. */
#ifndef DRIFT_RECORDER_INTERCEPT_WRITER_API_H
#define DRIFT_RECORDER_INTERCEPT_WRITER_API_H

#include <stddef.h>

#include "formats/census.h"

#define DRIFT_ICPT_WRITER_SO "libdrift_intercept_writer.so"
#define DRIFT_ICPT_WRITE_SYM "drift_intercept_write_census"

/* Writes a complete drift trace at path (side trainer, producer
 * "drift-intercept <version>", rank/world size from c->info, run_id
 * borrowed) with the census c (borrowed). Returns 0, or -1 with a message
 * in err (errsz bytes, always NUL-terminated). */
typedef int (*drift_icpt_write_fn)(const char *path, const drift_census *c, const char *run_id, char *err,
                                   size_t errsz);

int drift_intercept_write_census(const char *path, const drift_census *c, const char *run_id, char *err, size_t errsz);

#endif
