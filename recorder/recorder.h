/* drift recorder: the C recording API (DESIGN.md s2, s6, s7d).
 *
 * One recorder writes one trace file (one process = one rank of one side).
 * The job calls it from its own threads; a private writer thread owns the
 * HDF5 writer. The recorder never blocks the job for long and never crashes
 * it:
 *
 *  - Captures are copied into a bounded staging ring (host memcpy, or for a
 *    device pointer an asynchronous D2H copy ordered after the producer's
 *    stream) and written by the writer thread.
 *  - When staging is full the policy decides (see "Staging policy" below);
 *    what is not stored is said so in the trace (step flag + note).
 *  - A stats row is written for every accepted record, stored or not.
 *  - Any I/O error (disk full, file gone, HDF5 failure) turns the recorder
 *    off: it is reported once (callback, else one stderr line), later calls
 *    return DRIFT_OK and do nothing, and the trace stays readable up to its
 *    last committed step.
 *
 * Lifecycle and the SWMR constraint
 * ---------------------------------
 * HDF5 SWMR needs every dataset a live reader sees to exist before the
 * writer enters SWMR mode, so the set of sites is fixed when the trace
 * *starts*. Sites are declared either up front (drift_recorder_declare_site)
 * or lazily during a warm-up: every record of a site not yet known, made
 * before the start, declares it with that record's dtype and shape. The
 * trace starts at drift_recorder_start, or by default automatically at the
 * end of the first step (option auto_start=1). Until it starts nothing is
 * written: the warm-up step's tensors wait in staging (so it must fit there;
 * what does not fit is dropped at once, with its stats kept). After the
 * start, a record of an unknown site is rejected (DRIFT_E_USAGE, counted,
 * and a note in the trace names the first such site of the step).
 *
 *   drift_recorder_open                 creates the file, root attributes
 *   drift_recorder_declare_site ...     optional: sites known up front
 *   drift_recorder_add_param ...        optional: /params, /param_dtypes,
 *   drift_recorder_add_buffer ...         /buffers, /graph (before start only)
 *   drift_recorder_set_libraries        optional: GPU and library identity (before start)
 *   drift_recorder_prepare_device       optional, CUDA: pin staging now
 *   drift_recorder_start                optional (else: end of first step)
 *   per step:
 *     drift_recorder_begin_step(step)   step numbers strictly increase
 *     drift_recorder_record_host / drift_recorder_record_device ...
 *     drift_recorder_add_metric / _add_step_metrics / _note ...
 *     drift_recorder_end_step           queues the commit row
 *   drift_recorder_close                drains, commits, closes
 *
 * Staging policy (option policy=)
 * -------------------------------
 * Staging is one ring of `staging_mb` MiB (pinned by
 * drift_recorder_prepare_device or the first device capture) plus a ring of
 * at most `max_pending` records in flight. When a tensor to be stored does not fit:
 *   drop_step (default): it is not stored, nor is any later tensor of the
 *     same step; stats rows are still written for all of them.
 *   block: the caller waits until space frees up, at most block_timeout_ms;
 *     then it drops as drop_step does. At most one such wait per step (after
 *     a timeout the rest of the step drops at once), and none during the
 *     warm-up (nothing is consumed before the start) or when the tensor is
 *     larger than the whole ring. A blocked caller can never deadlock: the
 *     wait is timed and the writer never waits on callers.
 * Either way the step is committed with DRIFT_TRACE_STEP_DROPPED and a note
 * (level 1) giving the counts. A sampled-out host tensor is copied to
 * staging for the writer thread to compute its stats; if there is no room,
 * its stats are computed on the calling thread instead (never dropped, never
 * waits). A record that cannot even get a queue slot is lost (counted,
 * step flagged). The commit of a step waits for a queue slot while the
 * writer makes progress; a writer that makes no progress for
 * max(block_timeout_ms, 1000) ms is treated as failed (recorder turned off).
 *
 * Sampling
 * --------
 * A record's tensor is stored when its step matches `store_steps` and its
 * site matches `store_sites`; otherwise only its index and stats rows are
 * written. Both are fixed at open (options below); sites that can never
 * store are declared stats-only in the trace (no data dataset).
 *
 * Python/ctypes
 * -------------
 * Every function takes plain C types and pointers (no structs by value);
 * handles are opaque pointers; every `err` may be NULL, and
 * drift_recorder_last_error() returns the message of the last failing call
 * on the calling thread. libdrift_recorder.so (recorder + formats, HDF5
 * shared, CUDA runtime static) exports the drift_recorder_* symbols only.
 * tests/integration/recorder_ctypes.sh shows the argtypes.
 *
 * Thread safety: every function may be called from any thread, but
 * drift_recorder_close must not race with other calls on the same handle.
 * In a forked child (a DataLoader worker) every call is a no-op returning
 * DRIFT_OK. The recorder serialises its own HDF5 calls (the calling thread
 * before the start, the writer thread after); other HDF5 use in the same
 * process at the same time needs a thread-safe HDF5 build (Debian's is).
 * Errors: functions return a drift_status and fill the caller-owned
 * err (NULL allowed). */
#ifndef DRIFT_RECORDER_RECORDER_H
#define DRIFT_RECORDER_RECORDER_H

#include <stddef.h>
#include <stdint.h>

#include "formats/err.h"
#include "formats/trace.h"

typedef struct drift_recorder drift_recorder;

/* --- open / close --------------------------------------------------------- */

/* Creates (truncates) the trace at path and starts the writer thread.
 * side: 0 trainer, 1 rollout, 2 replay (drift_trace_side). rank/world_size:
 * this process's rank. run_id, family, plan_json: root attributes (borrowed;
 * NULL = ""). guidance_scale: CFG scale (1.0 without CFG).
 * options: NULL or "key=value" items separated by ';' or newlines:
 *   staging_mb=N         staging ring size in MiB (default 256; 1..1048576)
 *   staging_bytes=N      the same in bytes (>= 4096; for tests)
 *   max_pending=N        records in flight (default 16384; 1..16777216)
 *   policy=drop_step|block          (default drop_step)
 *   block_timeout_ms=N   bounded wait of policy=block (default 200; 0..600000)
 *   store_steps=SPEC     steps whose tensors are stored (default all; grammar
 *                        of drift_recorder_steps_parse)
 *   store_sites=GLOBS    sites whose tensors are stored (default "*"; grammar
 *                        of drift_recorder_sites_parse)
 *   compress=none|deflate|blosc     data datasets (default none)
 *   auto_start=1|0       start at the end of the first step (default 1)
 *   close_timeout_ms=N   how long close (and flush, by default) waits for a
 *                        writer making no progress (default 60000)
 *   quiet=0|1            1: no stderr line when turned off (callback still runs)
 *   device_wait=1|0      1: after a device capture the producer's stream waits
 *                        (on the GPU, never the host) for the copy, so later
 *                        in-place ops cannot change the tensor first; 0: the
 *                        caller keeps it unchanged until the copy has run
 *   producer=TEXT        root attribute "producer" (default "drift <version>")
 * Unknown keys and malformed values are DRIFT_E_USAGE naming the key.
 * DRIFT_E_IO if the file cannot be created. *out is owned by the caller:
 * drift_recorder_close. */
int drift_recorder_open(drift_recorder **out, const char *path, int side, int32_t rank, int32_t world_size,
                        const char *run_id, const char *family, double guidance_scale, const char *plan_json,
                        const char *options, drift_err *err);

/* Drains the queue (every ended step gets committed), stops the writer
 * thread, closes the file and frees r (NULL allowed). A step begun but not
 * ended is not committed. Close waits as long as the writer makes progress
 * (the backlog is bounded by the staging ring); if it makes none for
 * close_timeout_ms (a hung file system), r is handed to the writer thread
 * (which frees it when it finishes) and DRIFT_E_IO is returned; r must not be used after this call
 * in any case. Returns DRIFT_OK otherwise, also when an error turned the
 * recorder off (it was reported when it happened; check
 * drift_recorder_enabled / drift_recorder_error before closing to know). */
int drift_recorder_close(drift_recorder *r, drift_err *err);

/* --- before the start ------------------------------------------------------ */

/* Declares a site: name (borrowed; 1..511 bytes, no control characters),
 * dtype (drift_dtype: 1 fp32, 2 bf16, 3 fp16), ndim 0..8 and shape (borrowed,
 * ndim dims, each >= 1) of one record. Whether it stores tensors follows
 * store_sites. *site_id (may be NULL) gets its id (declaration order).
 * Declaring an existing name with the same dtype/shape is a no-op; after the
 * start, or with a different dtype/shape, DRIFT_E_USAGE. */
int drift_recorder_declare_site(drift_recorder *r, const char *name, int dtype, int ndim, const int64_t *shape,
                                int *site_id, drift_err *err);

/* Written synchronously, before the start only (DRIFT_E_USAGE after). Same
 * contracts as drift_trace_writer_add_param / _set_param_dtype /
 * _add_buffer / _set_graph; every pointer is borrowed. offset and
 * full_shape NULL mean "whole tensor". */
int drift_recorder_add_param(drift_recorder *r, const char *fqn, int ndim, const int64_t *shape,
                             const int64_t *offset, const int64_t *full_shape, const float *values, drift_err *err);
int drift_recorder_set_param_dtype(drift_recorder *r, const char *fqn, int dtype, drift_err *err);
int drift_recorder_add_buffer(drift_recorder *r, const char *name, int dtype, int ndim, const int64_t *shape,
                              const void *data, drift_err *err);
int drift_recorder_set_graph(drift_recorder *r, const char *json, size_t len, drift_err *err);
/* Before the start: creates /graph_steps (drift_trace_writer_reserve_step_graphs),
 * for a /graph specialised to one step's data. */
int drift_recorder_reserve_step_graphs(drift_recorder *r, drift_err *err);
/* In the open step (queued like a note): the step uses per-step graph
 * `graph` (1, 2, ... in order of first use; json, len bytes, borrowed,
 * the first time, NULL to reuse), or graph 0: none fits (reason, at most
 * 255 bytes, says why). docs/format.md 9.1. */
int drift_recorder_step_graph(drift_recorder *r, int64_t graph, const char *json, size_t len, const char *reason,
                              drift_err *err);
/* Parameters by reference instead of values (docs/format.md "/params_ref"):
 * json (len bytes, borrowed) is the reference to the checkpoint the run
 * loaded, validated here (DRIFT_E_INPUT naming the field). Before the start. */
int drift_recorder_set_params_ref(drift_recorder *r, const char *json, size_t len, drift_err *err);
/* The GPU and library identity of the run (docs/format.md "/libraries",
 * formats/libraries.h), so that a replay can say whether bitwise equality
 * with the recording can be expected. Before the start, at most once.
 * Versions as the libraries report them (cudaDriverGetVersion,
 * cudaRuntimeGetVersion, cublasLtGetVersion, cuBLAS 10000 x major + 100 x
 * minor + patch, cudnnGetVersion), 0 when unknown, each 0..2^31-1; strings
 * borrowed, NULL or "" when unknown (gpu_name and torch_version at most
 * 255 bytes, the paths 1023): DRIFT_E_USAGE naming the field otherwise.
 * Without this call, a recorder that made device captures writes what it
 * finds itself when the trace starts: the GPU of its captures, the CUDA
 * driver, and cuBLASLt / cuBLAS / cuDNN when the process has them loaded
 * (their own version calls, found by dlsym; paths by dladdr); the CUDA
 * runtime stays unknown (the recorder's static copy is not the job's). */
int drift_recorder_set_libraries(drift_recorder *r, const char *gpu_name, int cc_major, int cc_minor,
                                 int64_t driver_version, int64_t runtime_version, int64_t cublaslt_version,
                                 int64_t cublas_version, int64_t cudnn_version, const char *torch_version,
                                 const char *cublaslt_path, const char *cudnn_path, drift_err *err);
/* The recorded forward runs torch.compile'd code (docs/format.md "/libraries":
 * compiled, inductor_mode, compiled_modules): inductor_mode ("default",
 * "max-autotune", ...; NULL/"" unknown, at most 63 bytes) and the compiled
 * modules' FQNs, comma-separated ("<model>" the root module; at most 1023 bytes).
 * Written with /libraries; before the start and before set_libraries. */
int drift_recorder_set_compiled(drift_recorder *r, const char *inductor_mode, const char *modules, drift_err *err);
/* The GEMM workspaces the recorded forward's torch ran with, in bytes (0:
 * unknown, torch's default): cuBLAS's (what CUBLAS_WORKSPACE_CONFIG set) and
 * cuBLASLt's (CUBLASLT_WORKSPACE_SIZE). They choose the GEMM algorithms, so
 * a replay under the torch profile uses them (docs/format.md "/libraries":
 * cublas_workspace_bytes, cublaslt_workspace_bytes). Written with
 * /libraries; before the start and before set_libraries. */
int drift_recorder_set_blas_workspace(drift_recorder *r, int64_t cublas_bytes, int64_t cublaslt_bytes, drift_err *err);
/* drift-sum64 (formats/hash64.h) of nbytes at data into *out: host memory
 * (on_device 0, several threads) or CUDA device memory (on_device 1, on
 * stream, a cudaStream_t or NULL; waits). The same bytes give the same hash
 * either way. DRIFT_E_UNSUPPORTED for on_device without CUDA. */
int drift_recorder_hash64(const void *data, size_t nbytes, int on_device, void *stream, uint64_t *out, drift_err *err);

/* Starts the trace now: the writer thread declares every known site and
 * enters SWMR (asynchronously; an I/O failure turns the recorder off). Later
 * calls are no-ops. */
int drift_recorder_start(drift_recorder *r, drift_err *err);

/* --- steps and records ------------------------------------------------------- */

/* Opens step `step` (>= 0, greater than every earlier step). DRIFT_E_USAGE
 * if a step is already open or step does not increase. */
int drift_recorder_begin_step(drift_recorder *r, int64_t step, drift_err *err);
/* Ends the open step: queues its notes and its commit row (flagged
 * DRIFT_TRACE_STEP_DROPPED if anything of it was dropped). Starts the trace
 * if this ends the first step and auto_start=1. */
int drift_recorder_end_step(drift_recorder *r, drift_err *err);

/* Records one tensor of the open step from host memory: data (borrowed
 * until the call returns) holds prod(shape) contiguous elements of dtype
 * (raw bits for bf16/fp16). microbatch, denoise_index (-1 if not
 * applicable) and call_index (the n-th call of the site within (step,
 * microbatch, denoise_index), counted by the caller) form the record's index.
 * The site is found by name (or declared, during the warm-up); dtype and
 * shape must equal the site's. Returns DRIFT_OK when the record was taken
 * (stored, sampled out or dropped: see the counters), DRIFT_E_USAGE for a
 * call outside a step, an unknown site after the start, or a dtype/shape
 * mismatch; always DRIFT_OK once the recorder is off. */
int drift_recorder_record_host(drift_recorder *r, const char *site, int dtype, int ndim, const int64_t *shape,
                               const void *data, int32_t microbatch, int32_t denoise_index, int32_t call_index,
                               drift_err *err);

/* Same for a device pointer (CUDA builds only; DRIFT_E_UNSUPPORTED
 * otherwise). stream is the producer's cudaStream_t (NULL: the legacy
 * default stream). The call records an event on stream, makes the
 * recorder's copy stream wait for it and queues the copy into pinned staging
 * (or, for a sampled-out tensor, a small stats kernel whose 56-byte result
 * is copied): it never synchronises the host. dev_data must stay allocated
 * until then; with device_wait=1 (default) the producer's stream waits on
 * the GPU for the copy, so stream-ordered reuse and in-place updates are
 * safe; with device_wait=0 the caller keeps the tensor unchanged until the
 * copy has run. Every device pointer of one recorder must live on one device
 * (the current device at the first device capture). CUDA errors of the
 * capture are cleared from the runtime's last-error state (the job's own
 * checks never see them) and returned as DRIFT_E_INPUT. */
int drift_recorder_record_device(drift_recorder *r, const char *site, int dtype, int ndim, const int64_t *shape,
                                 const void *dev_data, void *stream, int32_t microbatch, int32_t denoise_index,
                                 int32_t call_index, drift_err *err);

/* Prepares device captures on the current CUDA device: pins the staging
 * ring (cudaHostRegister: a one-time cost of about 0.5 ms per MiB, measured
 * on an H200), creates the copy stream, its events and the stats kernel's
 * scratch. Optional: the first device capture does it otherwise, inside the
 * job's step. Call it once the job has chosen its device. CPU builds:
 * DRIFT_E_UNSUPPORTED; no CUDA device: DRIFT_E_UNSUPPORTED naming the CUDA
 * error (device captures then keep returning it; host captures work). */
int drift_recorder_prepare_device(drift_recorder *r, drift_err *err);

/* 1 if a record of site in the open step would store its tensor (step and
 * site sampling, site stores tensors); 0 otherwise (and outside a step, or
 * when off). Lets a binding skip preparing a tensor only its stats need. */
int drift_recorder_wants_tensor(drift_recorder *r, const char *site);

/* Queue rows of the open step (copied; borrowed pointers). row->step is
 * replaced by the open step. Metric site names may be any name. */
int drift_recorder_add_metric(drift_recorder *r, const char *site_name, const drift_trace_metric *row,
                              drift_err *err);
int drift_recorder_add_step_metrics(drift_recorder *r, const drift_trace_step_metrics *row, drift_err *err);
/* A note of the open step; level 0 info, 1 warning, 2 error; text borrowed
 * (truncated to DRIFT_TRACE_NOTE_MAX-1 bytes). */
int drift_recorder_note(drift_recorder *r, int level, const char *text, drift_err *err);
/* The batch composition of one micro-batch of the open step (formats/batch_note.h):
 * samples[p] is the id of the sample at batch position p (n of them, 1..32,
 * ids >= 0; borrowed), cfg 0 none, 1 split, 2 joined (conditional rows
 * first). Written as an info note that drift invariance reads back. */
int drift_recorder_batch(drift_recorder *r, int32_t micro_batch, int cfg, int n, const int64_t *samples,
                         drift_err *err);

/* Waits until everything queued so far has been written and committed, at
 * most timeout_ms (< 0: the close timeout). DRIFT_OK when drained (or the
 * recorder is off, or not started: nothing can be written yet), DRIFT_E_IO
 * on timeout. For checkpoints and tests; the job never needs it. */
int drift_recorder_flush(drift_recorder *r, int timeout_ms, drift_err *err);

/* --- state -------------------------------------------------------------------- */

enum drift_recorder_counter {
    DRIFT_RECORDER_RECORDS = 0,        /* records accepted (stored, sampled out or dropped) */
    DRIFT_RECORDER_STORED = 1,         /* tensors queued for storage */
    DRIFT_RECORDER_SAMPLED_OUT = 2,    /* records whose tensor was sampled out (stats only) */
    DRIFT_RECORDER_DROPPED = 3,        /* tensors not stored because staging was full (stats kept) */
    DRIFT_RECORDER_LOST = 4,           /* records lost entirely (no queue slot, device copy failed) */
    DRIFT_RECORDER_REJECTED = 5,       /* calls refused with DRIFT_E_USAGE */
    DRIFT_RECORDER_DROPPED_STEPS = 6,  /* steps committed with DRIFT_TRACE_STEP_DROPPED */
    DRIFT_RECORDER_ENDED_STEPS = 7,    /* steps ended by the caller */
    DRIFT_RECORDER_COMMITTED_STEPS = 8, /* steps committed to the file by the writer */
    DRIFT_RECORDER_LAST_COMMITTED = 9, /* last committed step, -1 if none */
    DRIFT_RECORDER_WRITTEN_RECORDS = 10, /* records written to the file */
    DRIFT_RECORDER_WRITTEN_BYTES = 11, /* tensor bytes written to the file */
    DRIFT_RECORDER_STAGING_BYTES = 12, /* staging ring size */
    DRIFT_RECORDER_STAGING_USED = 13,  /* bytes in use now */
    DRIFT_RECORDER_STAGING_HIGH = 14,  /* high-water mark */
    DRIFT_RECORDER_BLOCKED_NS = 15,    /* total time callers waited for staging */
    DRIFT_RECORDER_BLOCK_TIMEOUTS = 16, /* policy=block waits that timed out */
    DRIFT_RECORDER_OFF = 17,           /* 1 once turned off by an error */
    DRIFT_RECORDER_STARTED = 18,       /* 1 once the writer entered SWMR */
    DRIFT_RECORDER_N_SITES = 19,       /* sites known */
    DRIFT_RECORDER_COUNTER_COUNT = 20
};
/* Value of counter `which`; -1 for an unknown counter or r == NULL. */
int64_t drift_recorder_counter(drift_recorder *r, int which);
/* Static name of a counter ("records", "dropped", ...); "?" if unknown. */
const char *drift_recorder_counter_name(int which);

/* 1 while recording, 0 once turned off. */
int drift_recorder_enabled(drift_recorder *r);
/* The error that turned r off ("" while on); owned by r. */
const char *drift_recorder_error(drift_recorder *r);

/* Called once, from the writer thread (or the calling thread), when the
 * recorder turns itself off: cb(user, code, message). Replaces the default
 * stderr line ("drift recorder: PATH: recording turned off: ..."), unless
 * the option quiet=1 silenced that too. cb must not call back into r. */
typedef void (*drift_recorder_error_fn)(void *user, int code, const char *message);
int drift_recorder_set_error_callback(drift_recorder *r, drift_recorder_error_fn cb, void *user);

/* Message of the last call that failed on this thread ("" if none). */
const char *drift_recorder_last_error(void);

/* --- sampling specs (also used by the CLI and the Python binding) -------- */

/* Step specs. Items separated by ',' (spaces allowed around them):
 *   all | *          every step
 *   none             no step
 *   N                step N
 *   A:B              steps A..B, both included (A <= B)
 *   A:               steps >= A
 *   :B               steps 0..B
 *   every:N          steps divisible by N (N >= 1)
 * A step matches the spec if it matches any item: "0:10,every:50".
 * Numbers are decimal, 0..2^62. Malformed specs are DRIFT_E_USAGE with a
 * message naming the item and what was expected. *out owned by the caller:
 * drift_recorder_steps_free. */
typedef struct drift_recorder_steps drift_recorder_steps;
int drift_recorder_steps_parse(drift_recorder_steps **out, const char *spec, drift_err *err);
/* 1 if step matches. */
int drift_recorder_steps_match(const drift_recorder_steps *s, int64_t step);
void drift_recorder_steps_free(drift_recorder_steps *s);

/* Site glob lists: globs separated by ',' (Python fnmatch.fnmatchcase, as
 * drift_fnmatch: '*' matches dots too). A glob starting with '!' excludes.
 * A site matches if it matches some include glob and no exclude glob; a
 * list of excludes only includes everything else. "none" matches nothing.
 * Empty globs, empty lists and "!" alone are DRIFT_E_USAGE. */
typedef struct drift_recorder_sites drift_recorder_sites;
int drift_recorder_sites_parse(drift_recorder_sites **out, const char *globs, drift_err *err);
int drift_recorder_sites_match(const drift_recorder_sites *s, const char *site);
void drift_recorder_sites_free(drift_recorder_sites *s);

#endif
