/* Loading at disk speed (issue 18): the parameters a trace references in a
 * checkpoint are read, cast per the plan and uploaded at once. Reader
 * threads read, hash-check and widen the tensors in the order the forward
 * first uses them (formats/checkpoint.h, drift_ckpt_stream_*) while the
 * caller's thread runs the warm-up of the device cache (drift_forward_warm),
 * which waits for each parameter only when it reaches it: tensor i is being
 * uploaded and cast while tensors i+1... are still read. Memory: the fp32
 * host masters (as a plain load keeps) and the mapped shards, nothing more.
 * The values are the plain load's, bit for bit, whatever the thread count. */
#ifndef DRIFT_REPLAY_EXEC_PARAMS_PIPELINE_H
#define DRIFT_REPLAY_EXEC_PARAMS_PIPELINE_H

#include "formats/err.h"
#include "replay/exec/forward.h"

/* Reads m->pending_ref's tensors (under m->weights_root, else the recorded
 * root), or m->pending_trace's /params (one reader thread: HDF5; no
 * baseline), and fills cache (on be, for f; on_site only looked at, as
 * drift_forward_warm) while they arrive, then waits for be. On success
 * m->params holds the fp32 masters, what was pending is freed and m->load
 * reports the overlapped phase (overlapped = 1, pipeline_seconds, and the
 * sequential-read baseline first when m->load_baseline). On error nothing
 * is adopted (m->params and what was pending stay; the cache may hold some
 * values, which its owner frees) and the load's own error comes first: a
 * missing shard or a hash mismatch is DRIFT_E_INPUT naming the tensor and
 * the file, as with drift_model_load_params_ref. m, f, be, cache borrowed. */
int drift_model_warm_load(drift_model *m, const drift_forward *f, const drift_backend *be, drift_exec_cache *cache,
                          drift_exec_site_fn on_site, drift_err *err);

/* Reads m->pending_trace's /params (a by-value trace drift_model_load_trace
 * deferred) with no consumer, then frees it: the values
 * drift_model_load_trace would have read. */
int drift_model_load_pending_values(drift_model *m, drift_err *err);

/* 0 when DRIFT_LOAD_OVERLAP=0 asks a resident replay to read first and cast
 * and upload afterwards (the comparison the overlap is measured against);
 * 1 otherwise. */
int drift_params_overlap_enabled(void);

#endif
