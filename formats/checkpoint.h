/* Safetensors checkpoints as parameter sources (DESIGN.md s8: "a diffusers
 * sharded checkpoint referenced by path and content hash"):
 *
 *   DIR/NAME.safetensors.index.json   {"metadata": {"total_size": BYTES},
 *                                      "weight_map": {"TENSOR": "SHARD", ...}}
 *   DIR/NAME-00001-of-0000K.safetensors ...
 *
 * or a single DIR/NAME.safetensors. Writing (drift weights), describing an
 * existing checkpoint as a params reference (recording: hashes every tensor)
 * and loading the referenced tensors (replay: every hash checked). Shards are
 * memory-mapped and only the requested tensors' bytes are touched; tensors
 * are processed by a pool of threads (hash, then widen to fp32), so reading
 * runs at disk (or page-cache) speed. A shard truncated while it is mapped
 * would fault: checkpoints are expected to be immutable while a replay runs
 * (the hashes catch anything that changed before). */
#ifndef DRIFT_FORMATS_CHECKPOINT_H
#define DRIFT_FORMATS_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "formats/err.h"
#include "formats/params_ref.h"

#define DRIFT_CKPT_BASENAME "diffusion_pytorch_model"
#define DRIFT_CKPT_INDEX_SUFFIX ".safetensors.index.json"

/* Threads for checkpoint work: DRIFT_LOAD_THREADS if set (1..256), else the
 * online CPUs (at most 32). */
int drift_ckpt_default_threads(void);

/* --- writing ------------------------------------------------------------ */
typedef struct drift_ckpt_spec {
    const char *name;            /* borrowed */
    drift_dtype dtype;           /* stored dtype (F32, BF16, F16, F64) */
    int ndim;
    const int64_t *shape;        /* borrowed */
} drift_ckpt_spec;

/* Fills dst (numel fp32 values) with tensor i's values; called from several
 * threads at once (one tensor per call). Non-zero stops the write. */
typedef int (*drift_ckpt_fill_fn)(size_t i, float *dst, void *user, drift_err *err);

/* Writes the n tensors into dir (created if absent) as shards of at most
 * shard_bytes each (a tensor larger than that gets a shard of its own;
 * shard_bytes 0: one shard), named DRIFT_CKPT_BASENAME-0000k-of-0000K and an
 * index, each through a temporary file renamed into place. Values come from
 * fill (rounded RNE to the stored dtype). ref (initialised, empty) gets the
 * reference of what was written (weights_root = dir made absolute). */
int drift_ckpt_write(const char *dir, const drift_ckpt_spec *specs, size_t n, uint64_t shard_bytes,
                     drift_ckpt_fill_fn fill, void *user, int threads, drift_params_ref *ref, drift_err *err);

/* --- reading ------------------------------------------------------------ */
typedef struct drift_ckpt_stats {
    uint64_t bytes;              /* tensor bytes read */
    size_t tensors, files;
    int threads;
    double seconds;              /* wall time of the parallel read + hash + widen */
} drift_ckpt_stats;

/* How a replay read its model's parameters (replay/exec/params_load.c fills
 * it; drift replay's setup line prints it). */
typedef struct drift_load_report {
    int by_reference;            /* 1: from a checkpoint the trace references (/params_ref) */
    uint64_t bytes;              /* tensor bytes read */
    size_t tensors, files;
    int threads;
    double seconds;              /* parallel read + hash check + widen to fp32 (overlapped: until the last
                                    tensor was read) */
    int overlapped;              /* 1: cast and upload ran while the tensors were read (replay/exec/params_pipeline.h) */
    double pipeline_seconds;     /* overlapped: wall time of the whole read + cast + upload, to the device's sync */
    uint64_t baseline_bytes;     /* DRIFT_REPLAY_PROFILE=1: a plain sequential read of the same files, */
    double baseline_seconds;     /* page cache dropped before each measurement (0: not measured) */
} drift_load_report;

/* Describes the checkpoint at path (a directory with exactly one
 * *.safetensors.index.json, or else exactly one *.safetensors; or such a file
 * itself) as a reference: every tensor of the index (or file), its dtype and
 * shape from the shard headers and its hash computed from its bytes. When
 * want/dst are given (n_want > 0), tensor want[k] (a name) is also widened
 * into dst[k] (caller-owned, want_numel[k] floats) in the same pass; a wanted
 * name the checkpoint lacks, or one of another element count, is
 * DRIFT_E_INPUT naming it (checked before anything is read). ref (initialised, empty) is
 * filled; st may be NULL. */
int drift_ckpt_describe(const char *path, const char *const *want, const int64_t *want_numel, float *const *dst,
                        size_t n_want, int threads, drift_params_ref *ref, drift_ckpt_stats *st, drift_err *err);

/* Loads tensors which[k] (indices into ref->t) into dst[k] (caller-owned,
 * numel floats each), from root (NULL: ref->weights_root), checking each
 * shard's header against the reference (tensor present, same dtype and shape)
 * and each tensor's hash. A missing or unreadable shard, a header that
 * disagrees and a hash mismatch are DRIFT_E_INPUT naming the tensor and the
 * file. st may be NULL. */
int drift_ckpt_load(const drift_params_ref *ref, const char *root, const size_t *which, float *const *dst, size_t n,
                    int threads, drift_ckpt_stats *st, drift_err *err);

/* The same load in the background, for a consumer that uses each tensor
 * as soon as it is there (casts and uploads it while the rest are read):
 * the shards are opened and every header is checked before this returns
 * (a missing shard or a header that disagrees is returned here, nothing
 * started), then `threads` threads read, check and widen tensors in k order.
 * Tensor k's dst[k] is valid once drift_ckpt_stream_wait(s, k) returned
 * DRIFT_OK. The values are those of drift_ckpt_load, bit for bit. ref, which
 * and dst are borrowed until the finish; caller owns *out and finishes it
 * exactly once. */
typedef struct drift_ckpt_stream drift_ckpt_stream;
int drift_ckpt_stream_start(const drift_params_ref *ref, const char *root, const size_t *which, float *const *dst,
                            size_t n, int threads, drift_ckpt_stream **out, drift_err *err);
/* Blocks until tensor k is read, its hash checked and widened (DRIFT_OK),
 * or the load failed (its code; err then says only that the read failed:
 * drift_ckpt_stream_finish reports the load's error). */
int drift_ckpt_stream_wait(drift_ckpt_stream *s, size_t k, drift_err *err);
/* Ends the load: cancel != 0 stops it (the consumer failed); waits for the
 * threads and frees s (NULL allowed). st (may be NULL) as drift_ckpt_load's,
 * seconds until the last tensor was read. Returns the load's error (a hash
 * mismatch: DRIFT_E_INPUT naming the tensor and the file, the same as
 * drift_ckpt_load's) or DRIFT_OK (also when cancelled without one). */
int drift_ckpt_stream_finish(drift_ckpt_stream *s, int cancel, drift_ckpt_stats *st, drift_err *err);

/* The baseline for the load's GB/s: reads every shard file holding one of
 * tensors which[0..n) start to end, sequentially, on one thread, with
 * pread(2) into a bounce buffer. With drop_cache the files' pages are first
 * dropped from the page cache (posix_fadvise DONTNEED: only clean pages, no
 * privileges needed), so that neither measurement profits from the other.
 * *bytes and *seconds get what was read and how long it took. */
int drift_ckpt_read_sequential(const drift_params_ref *ref, const char *root, const size_t *which, size_t n,
                               int drop_cache, uint64_t *bytes, double *seconds, drift_err *err);
/* Drops the page cache of those files (as above); best effort. */
void drift_ckpt_drop_cache(const drift_params_ref *ref, const char *root, const size_t *which, size_t n);

/* The read policy of a trace's /params_ref (docs/RELIABILITY.md "weights"):
 * without --weights-root, the checkpoint folder the trace names (root) must
 * lie inside the trace's own folder (real paths); else DRIFT_E_INPUT naming
 * both and the remedy. Opens nothing. */
int drift_ckpt_root_allowed(const char *root, const char *trace, drift_err *err);

#endif
