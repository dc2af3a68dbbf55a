/* The drift trace: an HDF5 file, schema v1 (DESIGN.md s6; every group,
 * dataset and attribute is specified in docs/format.md).
 *
 * Writer lifecycle (SWMR needs every dataset a live reader sees to exist
 * before H5Fstart_swmr_write):
 *
 *   drift_trace_writer_create          root attributes
 *   drift_trace_writer_declare_site    ... sites (name, dtype, record shape)
 *   drift_trace_writer_add_param       ... /params, /param_dtypes, /buffers, /graph
 *   drift_trace_writer_start           enters SWMR: readers may open from here
 *   per step:
 *     drift_trace_writer_append        records (tensor + stats row) of this step
 *     drift_trace_writer_add_metric    comparison metrics of this step
 *     drift_trace_writer_commit_step   the commit row: the step becomes visible
 *   drift_trace_writer_close
 *
 * Readers trust a record, metric row or note only once its step has a
 * commit row in /steps. Handles are not thread-safe: use one per thread or
 * serialise calls. All functions that can fail return a drift_status and
 * fill the caller-owned err (NULL allowed); messages name the file, the HDF5
 * object and what was expected. Sizes read from a file are checked against
 * the limits below before anything is allocated. */
#ifndef DRIFT_FORMATS_TRACE_H
#define DRIFT_FORMATS_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "formats/dtype.h"
#include "formats/err.h"
#include "formats/libraries.h"
#include "formats/params.h" /* DRIFT_MAX_DIMS */

#define DRIFT_TRACE_FORMAT_NAME "drift-trace"
#define DRIFT_TRACE_FORMAT_VERSION 1

/* Limits (bytes include the terminating NUL for names). */
#define DRIFT_TRACE_NAME_MAX 512             /* site, param, buffer names */
#define DRIFT_TRACE_NOTE_MAX 256             /* one note's text */
#define DRIFT_TRACE_ATTR_MAX (1u << 20)      /* a root string attribute (the plan) */
#define DRIFT_TRACE_GRAPH_MAX (64ull << 20)  /* /graph JSON, /params_ref JSON */
#define DRIFT_TRACE_READ_MAX (1ull << 30)    /* one record / table / param read */
#define DRIFT_TRACE_MAX_SITES 100000
#define DRIFT_TRACE_MAX_PARAMS 1000000

typedef enum drift_trace_side {
    DRIFT_TRACE_SIDE_TRAINER = 0,
    DRIFT_TRACE_SIDE_ROLLOUT = 1,
    DRIFT_TRACE_SIDE_REPLAY = 2
} drift_trace_side;

/* "trainer" / "rollout" / "replay"; "invalid" otherwise. Static string. */
const char *drift_trace_side_name(drift_trace_side side);
/* Parses the above; returns -1 if unknown. */
int drift_trace_side_parse(const char *s);

/* Root attributes. For the writer the strings are borrowed (NULL = "");
 * producer NULL means "drift <version>", created is ignored (the writer
 * stamps the UTC time). From a reader every string is non-NULL and owned by
 * the reader (valid until drift_trace_reader_close). */
typedef struct drift_trace_meta {
    int format_version;          /* reader: 1 */
    drift_trace_side side;
    const char *run_id;
    int32_t rank;
    int32_t world_size;
    const char *family;          /* model spec, "tiny-dit" or "wan2.2:layers=2,..." */
    double guidance_scale;       /* CFG scale s; 1.0 when no CFG */
    const char *plan_json;       /* the dtype plan in force, JSON (opaque here) */
    const char *producer;        /* "drift 0.1.0", "recorder-python 0.1", ... */
    const char *created;         /* ISO 8601 UTC, "2025-01-31T12:00:00Z" */
} drift_trace_meta;

/* Tensor compression of a site's data dataset (stats/index never compressed). */
typedef enum drift_trace_compress {
    DRIFT_TRACE_COMPRESS_NONE = 0,
    DRIFT_TRACE_COMPRESS_DEFLATE = 1,    /* shuffle + deflate level 1 */
    DRIFT_TRACE_COMPRESS_BLOSC = 2       /* blosc/lz4 + shuffle (HDF5 filter 32001 plugin) */
} drift_trace_compress;

/* 1 if the blosc filter plugin (id 32001) can encode here. */
int drift_trace_blosc_available(void);

/* A recording point: "<module FQN>:<kind>", e.g. "blocks.3.ffn:out",
 * "input:latents:post_cast", "output:noise_pred", "logprob:old". */
typedef struct drift_trace_site_decl {
    const char *name;            /* borrowed; 1..DRIFT_TRACE_NAME_MAX-1 bytes, no control chars, not "." */
    drift_dtype dtype;           /* DRIFT_F32, DRIFT_BF16 or DRIFT_F16 */
    int ndim;                    /* 0..DRIFT_MAX_DIMS (0: one scalar per record) */
    int64_t shape[DRIFT_MAX_DIMS]; /* per-record shape; one record <= DRIFT_TRACE_READ_MAX bytes */
    int store_tensors;           /* 1: a data dataset holds (sampled) tensors; 0: stats only */
    drift_trace_compress compress;
} drift_trace_site_decl;

/* One record's position. */
typedef struct drift_trace_index {
    int64_t step;                /* training step, >= 0 */
    int32_t microbatch;
    int32_t denoise_index;       /* denoising (sampler) step, -1 if not applicable */
    int32_t call_index;          /* n-th call of the module within (step, microbatch, denoise_index) */
    uint8_t stored;              /* reader: 1 if the tensor is in the data dataset */
} drift_trace_index;

/* Cheap per-record statistics (fp64 accumulation over the values widened to
 * fp32). min/max over the non-NaN values (so +-inf show); mean, mean_abs and
 * l2 (= sqrt(sum x^2)) over the finite values; NaN when there are none. */
typedef struct drift_trace_stats {
    double min, max, mean, mean_abs, l2;
    int64_t nan_count, inf_count;
} drift_trace_stats;

/* Computes stats of n elements of dtype (raw bits for bf16/fp16). */
void drift_trace_stats_compute(const void *data, drift_dtype dtype, size_t n, drift_trace_stats *out);

/* A committed step: the row of /steps. */
typedef struct drift_trace_step {
    int64_t step;
    int64_t n_records;           /* records of this step, over all sites */
    int64_t metrics_rows;        /* /metrics/rows rows when committed (cumulative) */
    int64_t step_metrics_rows;   /* /metrics/steps rows when committed (cumulative) */
    int64_t notes_rows;          /* /notes rows when committed (cumulative) */
    double time;                 /* commit time, seconds since the Unix epoch */
    uint32_t flags;              /* DRIFT_TRACE_STEP_* */
} drift_trace_step;

#define DRIFT_TRACE_STEP_DROPPED 1u   /* the producer dropped records of this step (staging full) */

/* Per-step, per-site comparison metrics (DESIGN.md s7), one row of
 * /metrics/rows. Candidate t against reference r; NaN where not computed. */
typedef struct drift_trace_metric {
    int64_t step;
    int32_t site;                /* index into the metrics site-name table (writer fills it) */
    int32_t variant;             /* which comparison, 0 unless a producer writes several */
    int32_t denoise_index;       /* -1: aggregated over all denoising steps */
    uint32_t flags;              /* DRIFT_TRACE_METRIC_* */
    int64_t numel;
    double mean_abs_diff, max_abs_diff, rel_max, cosine, rmse, rmse_oracle;
    int64_t nan_count, inf_count;          /* in t */
    int64_t ref_nan_count, ref_inf_count;  /* in r */
    int64_t worst_index;         /* flat index of max |t - r|, -1 if none */
    uint64_t max_ulp_diff;       /* in ULPs of the site's dtype; UINT64_MAX for NaN vs number */
} drift_trace_metric;

#define DRIFT_TRACE_METRIC_FIRST_DIVERGENT 1u /* first site (in call order) not bitwise equal */
#define DRIFT_TRACE_METRIC_BITWISE_EQUAL 2u

/* Per-step scalar metrics (one row of /metrics/steps). */
typedef struct drift_trace_step_metrics {
    int64_t step;
    int32_t variant;
    int32_t denoise_index;       /* -1: all */
    int64_t n_pairs;
    double log_prob_mean_abs_diff, ratio_abs_minus_1, approx_kl;
} drift_trace_step_metrics;

/* A producer's note (an error reported once, a dropped-records event). */
typedef struct drift_trace_note {
    int64_t step;
    double time;
    int32_t level;               /* 0 info, 1 warning, 2 error */
    char text[DRIFT_TRACE_NOTE_MAX];
} drift_trace_note;

/* ======================================================================= */
/* Writer                                                                   */
/* ======================================================================= */
typedef struct drift_trace_writer drift_trace_writer;

/* Creates (truncates) path with libver bounds (latest, latest) and writes
 * the root attributes from meta (borrowed). *out is owned by the caller:
 * drift_trace_writer_close. */
int drift_trace_writer_create(drift_trace_writer **out, const char *path, const drift_trace_meta *meta,
                              drift_err *err);

/* Before start. Declares a site (decl borrowed); *site_id (0, 1, ...) names
 * it in later calls. Duplicate names are errors. */
int drift_trace_writer_declare_site(drift_trace_writer *w, const drift_trace_site_decl *decl, int *site_id,
                                    drift_err *err);

/* Before start. Stores fp32 master values of parameter fqn (borrowed):
 * values hold numel(shape) floats (borrowed). For a shard, offset[d] is where
 * the shard starts in the full tensor and full_shape the full tensor's shape;
 * offset NULL and full_shape NULL mean "whole" (zeros / shape). */
int drift_trace_writer_add_param(drift_trace_writer *w, const char *fqn, int ndim, const int64_t *shape,
                                 const int64_t *offset, const int64_t *full_shape, const float *values,
                                 drift_err *err);
/* Before start. Records the dtype parameter fqn had in the forward. */
int drift_trace_writer_set_param_dtype(drift_trace_writer *w, const char *fqn, drift_dtype dtype, drift_err *err);
/* Before start. Stores a buffer (RoPE table...) in its own dtype (fp32, fp64,
 * bf16, fp16; complex as a trailing dimension of 2); data borrowed. */
int drift_trace_writer_add_buffer(drift_trace_writer *w, const char *name, drift_dtype dtype, int ndim,
                                  const int64_t *shape, const void *data, drift_err *err);
/* Before start. Stores the model graph (IR JSON, len bytes, borrowed). */
int drift_trace_writer_set_graph(drift_trace_writer *w, const char *json, size_t len, drift_err *err);
/* Before start. Creates /graph_steps (docs/format.md 9.1): a graph specialised
 * to one step's data (a dispatch-level trace) may not fit a later step, whose
 * own graph drift_trace_writer_step_graph appends there. No-op when done. */
int drift_trace_writer_reserve_step_graphs(drift_trace_writer *w, drift_err *err);
/* After start, in the step being built: step uses per-step graph `graph`
 * (1, 2, ... in order of first use). The first time a number is given, json
 * (len bytes, borrowed) is appended to /graph_steps; later steps reuse it
 * with json NULL. graph 0: no graph fits the step (reason says why, the
 * replay refuses it). Written as the step's note "step-graph v1 ...". */
int drift_trace_writer_step_graph(drift_trace_writer *w, int64_t step, int64_t graph, const char *json, size_t len,
                                  const char *reason, drift_err *err);
/* Before start. Stores /params_ref: the parameters as a reference to a
 * safetensors checkpoint instead of values (JSON of formats/params_ref.h,
 * len bytes, borrowed; opaque here). */
int drift_trace_writer_set_params_ref(drift_trace_writer *w, const char *json, size_t len, drift_err *err);

/* Before start. Stores /libraries: the GPU and library identity of the
 * forward being recorded (formats/libraries.h; lib borrowed; unknown fields
 * are written as 0 / ""). At most once. */
int drift_trace_writer_set_libraries(drift_trace_writer *w, const drift_libraries *lib, drift_err *err);

/* Creates the tables and enters SWMR-write mode. After this only the
 * per-step calls below and close are allowed. */
int drift_trace_writer_start(drift_trace_writer *w, drift_err *err);

/* After start. Appends one record to site_id. idx (borrowed; idx->stored is
 * ignored) must carry the step being built: every append/metric/note between
 * two commits has the same step, greater than the last committed one. data
 * holds numel(record shape) elements of the site's dtype (raw bits for
 * bf16/fp16; borrowed). The stats row is computed from data. The tensor is
 * stored if store != 0 and the site stores tensors; otherwise only index and
 * stats are written (sampled out). */
int drift_trace_writer_append(drift_trace_writer *w, int site_id, const drift_trace_index *idx,
                              const void *data, int store, drift_err *err);
/* After start. Appends a sampled-out record whose stats the caller computed
 * (e.g. on the GPU). */
int drift_trace_writer_append_stats(drift_trace_writer *w, int site_id, const drift_trace_index *idx,
                                    const drift_trace_stats *stats, drift_err *err);
/* After start. Appends a metrics row for site_name (borrowed; any name, not
 * only declared sites; added to /metrics/site_names on first use). row is
 * borrowed; row->site is ignored. */
int drift_trace_writer_add_metric(drift_trace_writer *w, const char *site_name, const drift_trace_metric *row,
                                  drift_err *err);
int drift_trace_writer_add_step_metrics(drift_trace_writer *w, const drift_trace_step_metrics *row,
                                        drift_err *err);
/* After start. Appends a note (text truncated to DRIFT_TRACE_NOTE_MAX-1 bytes). */
int drift_trace_writer_note(drift_trace_writer *w, int64_t step, int level, const char *text, drift_err *err);

/* After start. Flushes everything appended, then appends and flushes the
 * commit row of step (> last committed; equal to the step of the appends
 * since the last commit). */
int drift_trace_writer_commit_step(drift_trace_writer *w, int64_t step, uint32_t flags, drift_err *err);

/* The writer's state, a string readers show (`/status`, at most
 * DRIFT_TRACE_STATUS_MAX-1 bytes): "recording" from the start, "closed" at a
 * clean close, or what the producer sets, e.g. "failed: disk full after step
 * 41". Its bytes are allocated when the trace starts and overwritten in
 * place, so it can be written after an I/O error (a full disk) when nothing
 * else can. After start; text borrowed. */
#define DRIFT_TRACE_STATUS_MAX 512
int drift_trace_writer_set_status(drift_trace_writer *w, const char *text, drift_err *err);

/* The producer failed (e.g. the run it records stopped, or the other side's
 * trace could not be written): records "failed at step S: REASON; steps A..L
 * are committed" in /status and stops the writer. Close then keeps a new
 * trace with its committed steps (and the failed state), and leaves an
 * existing file that the trace was to replace as it was. Never fails. */
int drift_trace_writer_fail(drift_trace_writer *w, const char *reason);

/* Closes and frees w (NULL allowed). Appends after the last commit stay
 * invisible to readers. Frees w even when it reports an error. */
int drift_trace_writer_close(drift_trace_writer *w, drift_err *err);

/* ======================================================================= */
/* Reader                                                                   */
/* ======================================================================= */
typedef struct drift_trace_reader drift_trace_reader;

typedef enum drift_trace_open_mode {
    /* Plain read; if the file is still open by (or was killed in) an SWMR
     * writer, falls back to an SWMR read of the committed steps
     * (drift_trace_reader_unclean then returns 1). */
    DRIFT_TRACE_OPEN_NORMAL = 0,
    /* SWMR read of a file being written; drift_trace_reader_refresh polls. */
    DRIFT_TRACE_OPEN_FOLLOW = 1
} drift_trace_open_mode;

/* Opens and validates path (root attributes, site schema, steps). *out is
 * owned by the caller: drift_trace_reader_close. DRIFT_E_IO if HDF5 cannot
 * open it, DRIFT_E_INPUT if it is not a valid v1 trace. */
int drift_trace_reader_open(drift_trace_reader **out, const char *path, drift_trace_open_mode mode,
                            drift_err *err);
/* NULL allowed. */
void drift_trace_reader_close(drift_trace_reader *r);

/* Root attributes; owned by r. */
const drift_trace_meta *drift_trace_reader_meta(const drift_trace_reader *r);
/* 1 if the file was not closed cleanly (read through SWMR). */
int drift_trace_reader_unclean(const drift_trace_reader *r);
/* The writer's status string (drift_trace_writer_set_status) as read at
 * open or, for a SWMR reader, at the last drift_trace_reader_refresh (a
 * followed writer that closes reads "closed"); NULL for traces written
 * before it existed. Owned by r, valid until the next refresh. */
const char *drift_trace_reader_status(const drift_trace_reader *r);
/* How the trace's writer ended, from the superblock state, the writer lock
 * and /status: "closed", "failed" (its /status gives the reason), "killed"
 * (never closed, no writer holds it), "writing" (a writer holds its lock),
 * "repaired" (killed, then `drift check --repair`), "unknown" (no /status:
 * not written by drift's writer). Static string. */
const char *drift_trace_reader_ended(const drift_trace_reader *r);
/* The path r was opened with; owned by r. */
const char *drift_trace_reader_path(const drift_trace_reader *r);

/* Follow mode: re-reads /steps and the tables; *new_steps (may be NULL) gets
 * the number of steps committed since the last open/refresh. Also usable in
 * normal mode (then always 0). */
int drift_trace_reader_refresh(drift_trace_reader *r, int64_t *new_steps, drift_err *err);

/* --- steps ---------------------------------------------------------------- */
/* Committed steps, in commit order (strictly increasing step). The array is
 * owned by r and valid until the next refresh or close. */
const drift_trace_step *drift_trace_reader_steps(const drift_trace_reader *r, size_t *n);

/* --- sites ---------------------------------------------------------------- */
typedef struct drift_trace_site_info {
    const char *name;            /* owned by r */
    int id;
    drift_dtype dtype;
    int ndim;
    int64_t shape[DRIFT_MAX_DIMS];
    int64_t numel;
    int has_data;                /* tensors stored (else stats only) */
    drift_trace_compress compress;
    int64_t n_records;           /* records of committed steps (0 if damaged) */
    const char *damaged;         /* NULL, or why the site is unreadable (its object headers are
                                    damaged, e.g. torn by a kill): owned by r; its records cannot
                                    be read (DRIFT_E_INPUT naming the site), every other site can */
} drift_trace_site_info;

size_t drift_trace_reader_n_sites(const drift_trace_reader *r);
/* Info of site i (0..n_sites-1, declaration order = id). Fills *out; counts
 * committed records (a few small reads in follow mode). A damaged site
 * (out->damaged != NULL) is still listed: DRIFT_OK, with its name and what
 * could be read of it. */
int drift_trace_reader_site(drift_trace_reader *r, size_t i, drift_trace_site_info *out, drift_err *err);
/* Site index by name; -1 if absent. */
long drift_trace_reader_find_site(const drift_trace_reader *r, const char *name);

/* Index / stats rows [first, first+count) of site i; rows must be committed.
 * dst holds count rows (caller-owned). */
int drift_trace_read_index(drift_trace_reader *r, size_t site, int64_t first, int64_t count,
                           drift_trace_index *dst, drift_err *err);
int drift_trace_read_stats(drift_trace_reader *r, size_t site, int64_t first, int64_t count,
                           drift_trace_stats *dst, drift_err *err);
/* First committed record of site with this (step, microbatch, denoise_index,
 * call_index); *record = -1 if none. */
int drift_trace_find_record(drift_trace_reader *r, size_t site, const drift_trace_index *key, int64_t *record,
                            drift_err *err);
/* Record rec of site widened to fp32 into dst (caller-owned, dst_len
 * elements, must be >= the record's numel). DRIFT_E_INPUT if the record was
 * sampled out or the site stores no tensors. */
int drift_trace_read_record_f32(drift_trace_reader *r, size_t site, int64_t rec, float *dst, size_t dst_len,
                                drift_err *err);
/* Same, raw elements of the site's dtype (2 or 4 bytes each) into dst
 * (dst_bytes >= numel * size). */
int drift_trace_read_record_raw(drift_trace_reader *r, size_t site, int64_t rec, void *dst, size_t dst_bytes,
                                drift_err *err);

/* --- metrics ---------------------------------------------------------------- */
/* Committed /metrics/rows with step > after_step (INT64_MIN: all), in append
 * order, one read. *rows is malloc'd, owned by the caller (free()); NULL when
 * *n == 0. */
int drift_trace_read_metrics(drift_trace_reader *r, int64_t after_step, drift_trace_metric **rows, size_t *n,
                             drift_err *err);
int drift_trace_read_step_metrics(drift_trace_reader *r, int64_t after_step, drift_trace_step_metrics **rows,
                                  size_t *n, drift_err *err);
/* The metrics site-name table (row->site indexes it); names owned by r,
 * valid until close. Count covers every committed metrics row. */
size_t drift_trace_reader_n_metric_sites(const drift_trace_reader *r);
const char *drift_trace_reader_metric_site(const drift_trace_reader *r, size_t i);
/* Committed notes with step > after_step; *rows malloc'd, caller frees. */
int drift_trace_read_notes(drift_trace_reader *r, int64_t after_step, drift_trace_note **rows, size_t *n,
                           drift_err *err);

/* --- params, buffers, graph ----------------------------------------------- */
typedef struct drift_trace_param_info {
    const char *fqn;             /* owned by r */
    int ndim;
    int64_t shape[DRIFT_MAX_DIMS];      /* stored (shard) shape */
    int64_t offset[DRIFT_MAX_DIMS];     /* shard start in the full tensor (zeros if whole) */
    int64_t full_shape[DRIFT_MAX_DIMS];
    int64_t numel;                      /* of the stored shape */
    int is_shard;
} drift_trace_param_info;

size_t drift_trace_reader_n_params(const drift_trace_reader *r);
int drift_trace_reader_param(const drift_trace_reader *r, size_t i, drift_trace_param_info *out);
long drift_trace_reader_find_param(const drift_trace_reader *r, const char *fqn);
/* Values of param i into dst (caller-owned, dst_len >= numel floats). */
int drift_trace_read_param(drift_trace_reader *r, size_t i, float *dst, size_t dst_len, drift_err *err);

/* The forward-dtype table (/param_dtypes). */
size_t drift_trace_reader_n_param_dtypes(const drift_trace_reader *r);
/* Row i: *fqn owned by r. */
int drift_trace_reader_param_dtype(const drift_trace_reader *r, size_t i, const char **fqn, drift_dtype *dtype);
/* dtype of fqn, DRIFT_DTYPE_INVALID if absent. */
drift_dtype drift_trace_reader_find_param_dtype(const drift_trace_reader *r, const char *fqn);

typedef struct drift_trace_buffer_info {
    const char *name;            /* owned by r */
    drift_dtype dtype;
    int ndim;
    int64_t shape[DRIFT_MAX_DIMS];
    int64_t numel;
} drift_trace_buffer_info;

size_t drift_trace_reader_n_buffers(const drift_trace_reader *r);
int drift_trace_reader_buffer(const drift_trace_reader *r, size_t i, drift_trace_buffer_info *out);
long drift_trace_reader_find_buffer(const drift_trace_reader *r, const char *name);
/* Raw elements of the buffer's dtype into dst (dst_bytes >= numel * size). */
int drift_trace_read_buffer(drift_trace_reader *r, size_t i, void *dst, size_t dst_bytes, drift_err *err);

/* The /graph JSON: *json malloc'd and NUL-terminated, owned by the caller;
 * *json = NULL, *len = 0 if the trace has none. */
int drift_trace_read_graph(drift_trace_reader *r, char **json, size_t *len, drift_err *err);

/* Which graph a committed step uses (docs/format.md 9.1): its "step-graph v1"
 * note, else /graph. */
typedef struct drift_trace_step_graph {
    int64_t step;
    int64_t graph;               /* 0: /graph; k >= 1: per-step graph k; -1: none fits (reason) */
    int64_t offset, length;      /* graph >= 1: its bytes in /graph_steps */
    char reason[DRIFT_TRACE_NOTE_MAX]; /* graph -1: why the producer has no graph for the step */
} drift_trace_step_graph;
/* The graph of every committed step, in /steps order (*n = committed
 * steps); *out malloc'd, caller frees. A malformed step-graph note is
 * DRIFT_E_INPUT naming the file, /notes, the step and what was expected. */
int drift_trace_read_step_graphs(drift_trace_reader *r, drift_trace_step_graph **out, size_t *n, drift_err *err);
/* The same for one committed step (graph 0 for a step not committed). */
int drift_trace_step_graph_of(drift_trace_reader *r, int64_t step, drift_trace_step_graph *out, drift_err *err);
/* The document of per-step graph g (g->graph >= 1) from /graph_steps:
 * *json malloc'd and NUL-terminated. DRIFT_E_INPUT naming /graph_steps when
 * the bytes lie outside it or the dataset is not 1-D bytes. */
int drift_trace_read_step_graph(drift_trace_reader *r, const drift_trace_step_graph *g, char **json, size_t *len,
                                drift_err *err);
/* The recording's /libraries into *out (caller-owned); *present = 0 (and
 * *out all unknown) when the trace has none. DRIFT_E_INPUT naming the
 * attribute for a wrong type, a string longer than its field or a version
 * out of range. Strings are returned as stored: escape them
 * (drift_libraries_escape) before printing. */
int drift_trace_read_libraries(drift_trace_reader *r, drift_libraries *out, int *present, drift_err *err);
/* The /params_ref JSON, the same way (NULL, 0 when the trace stores its
 * parameters by value). */
int drift_trace_read_params_ref(drift_trace_reader *r, char **json, size_t *len, drift_err *err);

/* ======================================================================= */
/* Check and repair (drift check)                                            */
/* ======================================================================= */
typedef struct drift_trace_check_report {
    int unclean;                 /* not closed cleanly: status flags set (killed or still writing) */
    int swmr;                    /* had to be read through SWMR */
    int cut_short;               /* shorter than its stored end of file (full disk): not opened,
                                    so the counts below are unknown (0) until repaired */
    const char *ended;           /* static: "closed", "failed", "killed", "writing", "repaired", "cut short", "unknown"
                                    (drift_trace_reader_ended) */
    int64_t committed_steps;
    int64_t last_step;           /* -1 if none */
    int64_t committed_records;   /* over all sites */
    int64_t uncommitted_records; /* rows past the last commit (invisible to readers) */
    size_t n_sites, n_params, n_buffers, n_metric_rows;
    char **problems;             /* owned: one line each */
    size_t n_problems;
} drift_trace_check_report;

/* Validates path: structure, types, sizes, every record's step committed,
 * per-step record counts, table consistency. Returns DRIFT_OK when the file
 * could be examined (problems, if any, are in rep, owned by the caller:
 * drift_trace_check_report_free), DRIFT_E_IO/DRIFT_E_INPUT when it cannot be
 * opened as a drift trace at all. */
int drift_trace_check(const char *path, drift_trace_check_report *rep, drift_err *err);
/* NULL allowed; rep left zeroed. */
void drift_trace_check_report_free(drift_trace_check_report *rep);

/* Restores a file whose writer was killed for ordinary (non-SWMR) readers:
 * clears the superblock status flags and sets the EOA to the file's end
 * (what `h5clear -s --increment=0` does), then trims the tables and site
 * datasets to the committed rows. Loses nothing committed. *trimmed (may be
 * NULL) gets the number of uncommitted rows removed. A clean file is left
 * unchanged (DRIFT_OK). */
int drift_trace_repair(const char *path, int64_t *trimmed, drift_err *err);

/* Call first in main(), before any other HDF5 use: replaces HDF5's exit
 * cleanup with one that is skipped after a file failed to close (HDF5 1.10
 * crashes closing such a file again at exit: docs/RELIABILITY.md, attack 1).
 * Owns nothing; idempotent. */
void drift_trace_process_init(void);

#endif
