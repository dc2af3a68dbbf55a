/* A trace's by-value /params read in the background (the by-value twin of
 * formats/checkpoint.h's drift_ckpt_stream, for replay/exec/params_pipeline.h):
 * one thread (HDF5 is not to be entered from two threads at once) reads the
 * model's parameters in a given order into caller-owned fp32 storage while
 * the caller uses each one as soon as it is there. The caller's thread must
 * make no HDF5 call between the start and the finish. */
#ifndef DRIFT_REPLAY_EXEC_PARAMS_TRACE_STREAM_H
#define DRIFT_REPLAY_EXEC_PARAMS_TRACE_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "formats/err.h"
#include "formats/params.h"

typedef struct drift_params_trace_stream drift_params_trace_stream;

/* 1 when the trace at path holds every parameter of t whole (not an FSDP
 * shard) with t's shape: the parameters it can stream. Reads metadata only. */
int drift_params_trace_streamable(const char *path, const drift_param_table *t);

/* Opens the trace at path and starts reading parameter order[k] of t
 * (k = 0..t->n-1, a permutation) into dst[order[k]] (caller-owned,
 * numel floats each, borrowed with t and order until the finish). Every
 * parameter is checked before anything is read (absent or another shape:
 * DRIFT_E_INPUT naming it and the file). background = 0 reads everything
 * in the calling thread before returning (no thread: a thread's stack and
 * malloc arena cost ~72 MiB of address space, which a CPU replay under
 * ulimit -v needs for OpenBLAS's buffers). Caller owns *out: finish it once. */
int drift_params_trace_stream_start(const char *path, const drift_param_table *t, const size_t *order, float *const *dst,
                                    int background, drift_params_trace_stream **out, drift_err *err);
/* Blocks until parameter i (table index) is read (DRIFT_OK) or the read
 * failed (its code; the finish reports the error). */
int drift_params_trace_stream_wait(drift_params_trace_stream *s, size_t i, drift_err *err);
/* cancel != 0 stops the reading; joins, closes the trace, frees s (NULL
 * allowed). *bytes (fp32 bytes read) and *seconds (until the last read
 * ended) may be NULL. Returns the read's error or DRIFT_OK. */
int drift_params_trace_stream_finish(drift_params_trace_stream *s, int cancel, uint64_t *bytes, double *seconds,
                                     drift_err *err);

#endif
