/* Dtype census tables in a drift trace (DESIGN.md s7d, docs/format.md
 * "Census"): which GEMMs ran in which dtypes in which NVTX range, which
 * collectives moved which dtype. Written by the LD_PRELOAD interposer
 * (recorder/intercept) at exit/flush, read by drift ls and drift top.
 *
 * Layout in the file (HDF5, beside the ordinary trace schema):
 *   /census                 group; attributes: see drift_census_info
 *   /census/gemm            1-D compound table of drift_census_gemm rows
 *   /census/collective      1-D compound table of drift_census_coll rows
 *
 * The row structs are plain fixed-size C structs with no HDF5 or CUDA
 * types, so the interposer can aggregate into them on the job's hot path
 * without including HDF5; strings are NUL-terminated and truncated to their
 * field (every string field is always NUL-terminated in memory, also after a
 * read of a hostile file). */
#ifndef DRIFT_FORMATS_CENSUS_H
#define DRIFT_FORMATS_CENSUS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "formats/err.h"
#include "formats/trace.h"

#define DRIFT_CENSUS_RANGE_MAX 160   /* NVTX range path "forward/blocks.1/attn1", bytes with NUL */
#define DRIFT_CENSUS_NAME_MAX 32     /* api / op names */
#define DRIFT_CENSUS_TYPE_MAX 24     /* dtype / compute type / epilogue names */
#define DRIFT_CENSUS_NOTES_MAX 2048  /* /census notes attribute */
#define DRIFT_CENSUS_MAX_ROWS 1000000 /* largest table a reader accepts */

/* One distinct GEMM signature in one range. Key fields first. */
typedef struct drift_census_gemm {
    char range[DRIFT_CENSUS_RANGE_MAX];     /* innermost NVTX range path; "" = none */
    char api[DRIFT_CENSUS_NAME_MAX];        /* "cublasGemmEx", "cublasLtMatmul", ... */
    char a_type[DRIFT_CENSUS_TYPE_MAX];     /* "bf16", "fp32", "fp16", "fp8e4m3", "cuda_type_N" */
    char b_type[DRIFT_CENSUS_TYPE_MAX];
    char c_type[DRIFT_CENSUS_TYPE_MAX];
    char d_type[DRIFT_CENSUS_TYPE_MAX];     /* output; = c_type for cuBLAS */
    char compute_type[DRIFT_CENSUS_TYPE_MAX]; /* "fp32", "fp32_fast_tf32", "fp16", ... */
    char scale_type[DRIFT_CENSUS_TYPE_MAX]; /* alpha/beta type; "" when implied */
    char epilogue[DRIFT_CENSUS_TYPE_MAX];   /* "default", "bias", "gelu_bias", ...; "" for cuBLAS */
    char transa[2], transb[2];              /* "N", "T", "C" ("?" unknown) */
    int64_t m, n, k;                        /* as passed (column-major GEMM view) */
    int64_t batch;                          /* batch count, 1 if not batched */
    /* counters */
    int64_t calls;
    int64_t failed;                         /* calls whose real function returned an error */
    int64_t bytes;                          /* sum over calls of A+B+D operand bytes */
    int64_t first_seq, last_seq;            /* process-wide GEMM sequence numbers (0-based) */
} drift_census_gemm;

/* One distinct collective signature in one range, per communicator. */
typedef struct drift_census_coll {
    char range[DRIFT_CENSUS_RANGE_MAX];
    char op[DRIFT_CENSUS_NAME_MAX];         /* "allgather", "reducescatter", "allreduce", "broadcast",
                                               "reduce", "send", "recv" */
    char dtype[DRIFT_CENSUS_TYPE_MAX];      /* "bf16", "fp32", ... */
    char redop[DRIFT_CENSUS_TYPE_MAX];      /* "sum", "prod", "max", "min", "avg", "custom", "" */
    int64_t count;                          /* elements per call as passed (allgather: send count,
                                               reducescatter: recv count) */
    int32_t root;                           /* root (broadcast/reduce) or peer (send/recv); -1 */
    int32_t comm;                           /* communicator index, in order first seen; -1 = NULL */
    int32_t comm_rank, comm_nranks;         /* from the real library; -1 if it refused */
    /* counters */
    int64_t calls;
    int64_t failed;
    int64_t bytes;                          /* sum over calls of the bytes this rank sends/receives */
    int64_t first_seq, last_seq;            /* per-communicator collective sequence numbers */
} drift_census_coll;

/* /census attributes. */
typedef struct drift_census_info {
    int32_t rank, world_size, local_rank;   /* from RANK/WORLD_SIZE/LOCAL_RANK; -1 if unset */
    int64_t pid;
    int64_t gemm_calls, coll_calls;         /* every intercepted call, recorded or not */
    int64_t gemm_dropped, coll_dropped;     /* calls not recorded: the table was full */
    int64_t nested_skipped;                 /* cuBLASLt calls made by cuBLAS itself (not counted twice) */
    int64_t nvtx_ranges;                    /* NVTX ranges pushed/started (all threads) */
    int32_t nvtx_injected;                  /* 1 if the NVTX injection was initialised */
    double time_start, time_end;            /* epoch seconds: load and flush */
    char notes[DRIFT_CENSUS_NOTES_MAX];     /* degradations, unresolved symbols, one per line */
} drift_census_info;

/* A census: rows and info. In a census returned by drift_census_read every
 * pointer is owned by the census (drift_census_free); for writing the
 * pointers are borrowed. */
typedef struct drift_census {
    drift_census_info info;
    drift_census_gemm *gemm;
    size_t n_gemm;
    drift_census_coll *coll;
    size_t n_coll;
} drift_census;

/* Writes a complete trace at path (truncating it): the root attributes of
 * meta (borrowed; side, producer, rank... as given), no steps, and the
 * census tables of c (borrowed). The file is closed when this returns. */
int drift_census_write_trace(const char *path, const drift_trace_meta *meta, const drift_census *c,
                             drift_err *err);

/* Adds /census to an existing, closed trace file (replacing an existing
 * /census). c borrowed. */
int drift_census_append(const char *path, const drift_census *c, drift_err *err);

/* Reads /census of an open trace. *out is NULL (and DRIFT_OK returned) when
 * the trace has no census; otherwise owned by the caller: drift_census_free.
 * Table sizes are checked against DRIFT_CENSUS_MAX_ROWS before allocating;
 * strings are forced NUL-terminated. */
int drift_census_read(drift_trace_reader *r, drift_census **out, drift_err *err);

/* NULL allowed. */
void drift_census_free(drift_census *c);

/* A short "bf16,bf16->bf16" dtype signature of a GEMM row into buf
 * (always NUL-terminated). Returns buf. */
const char *drift_census_gemm_dtypes(const drift_census_gemm *g, char *buf, size_t bufsz);

/* Appends the census as one JSON value to b (formats/json.h): null when c
 * is NULL, else {"rank", "world_size", "local_rank", "pid", "gemm_calls",
 * "collective_calls", "gemm_dropped", "collective_dropped",
 * "nested_skipped", "nvtx_injected", "nvtx_ranges", "notes":[lines],
 * "gemm":[{range, api, a_type, b_type, c_type, d_type, compute_type,
 * scale_type, epilogue, transa, transb, m, n, k, batch, calls, failed,
 * bytes, first_seq, last_seq}], "collective":[{range, op, dtype, redop,
 * count, root, comm, comm_rank, comm_nranks, calls, failed, bytes,
 * first_seq, last_seq}]}. */
struct drift_json_buf;
void drift_census_json(struct drift_json_buf *b, const drift_census *c);

/* Prints the census as two tables (GEMMs: range, api, dtypes, compute
 * type, epilogue, shape, calls; collectives: range, op, dtype, redop,
 * count, root/peer, rank/nranks, calls, bytes) and the notes to out. */
void drift_census_print(FILE *out, const drift_census *c);

#endif
