/* drift merge index files: one HDF5 file over the per-rank traces of a run
 * (trace-trainer.rank0.h5, rank1, ...) made of HDF5 virtual datasets (VDS)
 * that map onto the rank files' datasets. No tensor data is copied; the
 * index is a snapshot of what the rank files had committed at merge time
 * (every record axis is sized to it); re-running the merge refreshes it.
 * The layout is specified in docs/format.md, "Index files".
 *
 * Reading: every reader entry point (drift_trace_reader_open, so drift ls,
 * top, replay, bisect, compare) accepts
 *   INDEX           the view of the lowest rank in the index (rank 0 unless it
 *                   was missing at merge time),
 *   INDEX#rank=N    the view of rank N (only when no file of that literal
 *                   name exists),
 * and reads it exactly as it would read rank N's own trace. Opening a view
 * checks that its rank file is still there, opens, and still is the file
 * that was merged (run id, rank, creation time, every mapped dataset's
 * extent): HDF5 itself would silently read fill values for a missing source.
 */
#ifndef DRIFT_FORMATS_TRACE_INDEX_H
#define DRIFT_FORMATS_TRACE_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "formats/err.h"
#include "formats/trace.h"

#define DRIFT_TRACE_INDEX_FORMAT_NAME "drift-index"
#define DRIFT_TRACE_INDEX_VERSION 1
#define DRIFT_TRACE_INDEX_RANK_SUFFIX "#rank="
#define DRIFT_TRACE_INDEX_MAX_INPUTS 65536

typedef struct drift_trace_merge_opts {
    const char *const *inputs;   /* rank trace paths (borrowed), any order */
    size_t n_inputs;             /* 1..DRIFT_TRACE_INDEX_MAX_INPUTS */
    const char *out;             /* index path (borrowed); created or truncated */
    int allow_missing;           /* 1: ranks absent from inputs are allowed (listed in the index) */
    int allow_mismatch;          /* 1: ranks may differ in family, plan and committed steps */
} drift_trace_merge_opts;

/* Writes the index. Validates every input with the trace reader (a non-HDF5,
 * non-trace or damaged file is DRIFT_E_INPUT/DRIFT_E_IO naming it) and
 * requires: the same run id, world size, side and format version on every
 * input, the same family, plan and committed steps unless allow_mismatch
 * (DRIFT_E_INPUT naming the file and attribute), distinct ranks, and every rank 0..world_size-1 present unless
 * allow_missing (the error names the missing ranks). Inputs must be closed
 * cleanly (not being written: the index reads them with ordinary HDF5
 * opens). Source paths are stored relative to the index's directory, so the
 * index and its rank files can move together. The output is written to a
 * temporary sibling and renamed over out, so a failed merge leaves an
 * existing index untouched. */
int drift_trace_merge(const drift_trace_merge_opts *o, drift_err *err);

/* Process-wide: 1 lets an index open rank files outside its own folder (an
 * absolute or "../" source); 0 (the default) refuses them with
 * DRIFT_E_INPUT naming the source (docs/RELIABILITY.md, open policy). The
 * library reads no environment: the CLI sets it from --allow-outside and
 * DRIFT_INDEX_ALLOW_OUTSIDE=1. */
void drift_trace_index_allow_outside(int allow);

/* What an index holds (drift ls). Strings and arrays owned by the struct:
 * drift_trace_index_info_free. */
typedef struct drift_trace_index_info {
    char *path;                  /* the index path as given */
    char *run_id, *side, *created, *producer;
    int32_t world_size;
    int format_version;          /* the rank traces' schema version */
    size_t n_ranks;              /* ranks present, increasing */
    int32_t *ranks;
    char **sources;              /* per present rank: source path as recorded (relative to the index) */
    char **resolved;             /* per present rank: the path it resolves to */
    size_t n_missing;
    int32_t *missing;            /* ranks absent at merge time (--allow-missing) */
} drift_trace_index_info;

/* 1 if path (without a #rank= suffix) is a drift index file, 0 if it is not
 * (any other file, missing or unreadable: the trace reader says why). */
int drift_trace_index_is(const char *path);
int drift_trace_index_info_read(const char *path, drift_trace_index_info *out, drift_err *err);
void drift_trace_index_info_free(drift_trace_index_info *info);

#endif
