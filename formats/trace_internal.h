/* Private to formats/trace_*.c: HDF5 types of schema v1, checked HDF5
 * helpers and the reader's state. Not a public header. */
#ifndef DRIFT_FORMATS_TRACE_INTERNAL_H
#define DRIFT_FORMATS_TRACE_INTERNAL_H

#include <hdf5.h>

#include "formats/trace.h"

/* --- layout names (docs/format.md) ------------------------------------- */
#define TR_SITES "/sites"
#define TR_STEPS "/steps"
#define TR_METRICS "/metrics"
#define TR_METRIC_ROWS "/metrics/rows"
#define TR_METRIC_STEPS "/metrics/steps"
#define TR_METRIC_NAMES "/metrics/site_names"
#define TR_NOTES "/notes"
#define TR_STATUS "/status" /* the writer's state string (drift_trace_writer_set_status) */
#define TR_PARAMS "/params"
#define TR_PARAM_DTYPES "/param_dtypes"
#define TR_BUFFERS "/buffers"
#define TR_GRAPH "/graph"
#define TR_GRAPH_STEPS "/graph_steps" /* the graphs of steps that do not use /graph (9.1) */
#define TR_PARAMS_REF "/params_ref" /* parameters by reference (formats/params_ref.h) */
#define TR_LIBRARIES "/libraries"   /* the recording's GPU and library identity (formats/libraries.h) */

#define TR_DTYPE_STR 8                 /* fixed string size of a dtype name */
#define TR_DIM_MAX ((int64_t)1 << 40)  /* largest dimension accepted */
#define TR_ROWS_MAX ((int64_t)1 << 40) /* largest table accepted */

/* Chunking (rows per chunk) of the tables. */
#define TR_CHUNK_INDEX 256
#define TR_CHUNK_STEPS 64
#define TR_CHUNK_METRICS 256
#define TR_CHUNK_NAMES 64
#define TR_CHUNK_NOTES 64
#define TR_DATA_CHUNK_BYTES 4096 /* small: sampled-out records leave their chunks unallocated */
#define TR_CHUNK_WRITE_MAX ((int64_t)16 << 20) /* the writer splits a larger record into chunks of this size */
#define TR_CHUNK_MAX ((int64_t)64 << 20)       /* a reader refuses larger chunks (decompressed whole) */
#define TR_ROWS_SLACK ((int64_t)1 << 20)       /* tr_guard_rows: bytes a table may declare past the file's size */

/* --- rows as stored (memory layouts are the public structs) ------------- */
typedef struct tr_param_dtype_row {
    char fqn[DRIFT_TRACE_NAME_MAX];
    char dtype[TR_DTYPE_STR];
} tr_param_dtype_row;

typedef struct tr_name_row {
    char name[DRIFT_TRACE_NAME_MAX];
} tr_name_row;

/* The compound types: file (packed little-endian) and memory (native, the
 * public structs). All are transient; the caller closes them. */
enum tr_table {
    TR_T_INDEX = 0,
    TR_T_STATS,
    TR_T_STEPS,
    TR_T_METRICS,
    TR_T_STEP_METRICS,
    TR_T_NOTES,
    TR_T_PARAM_DTYPES,
    TR_T_NAMES,
    TR_T_COUNT
};
hid_t tr_type_file(enum tr_table t);
hid_t tr_type_mem(enum tr_table t);
size_t tr_type_mem_size(enum tr_table t);
/* 0 if compound file type ft has every member of t with a usable class; else
 * -1 and "expected ..." text in buf. */
int tr_check_members(hid_t ft, enum tr_table t, char *buf, size_t bufsz);
const char *tr_table_label(enum tr_table t);

/* The HDF5 float type of a storage dtype (fp32, fp64, bf16, fp16): a new
 * transient type the caller closes; H5I_INVALID_HID for others. */
hid_t tr_float_type(drift_dtype dt);
/* Recognises a dataset/attribute type: the dtype it encodes exactly, or
 * DRIFT_DTYPE_INVALID with a description of what was found in desc. */
drift_dtype tr_dtype_of_type(hid_t type, char *desc, size_t descsz);

/* Silences HDF5's automatic error printing for this thread. */
void tr_h5_quiet(void);
/* The innermost message of the current HDF5 error stack ("" if none). */
const char *tr_h5_msg(char *buf, size_t bufsz);
/* drift_err_set with the HDF5 cause appended. */
int tr_h5_fail(drift_err *err, int code, const char *file, const char *obj, const char *what);

/* '/' -> "%2F", '%' -> "%25". Returns 0, or -1 if out is too small. */
int tr_escape_name(const char *name, char *out, size_t outsz);
/* Validates a site/param/buffer name; returns NULL or a description of the problem. */
const char *tr_name_problem(const char *name);

/* checked products: returns 0 and *out, or -1 on overflow past limit. */
int tr_mul_checked(int64_t a, int64_t b, int64_t limit, int64_t *out);
int tr_numel(int ndim, const int64_t *shape, int64_t *numel);

/* --- the open policy (trace_guard.c, docs/RELIABILITY.md) -------------- */
/* Every refusal's message ends with this: such an error fails the whole
 * open (a site refused by the policy is not a damaged site). */
#define TR_POLICY "[refused: docs/RELIABILITY.md, open policy]"
int tr_guard_refused(const drift_err *e);
/* Once per process: external links made untraversable, filter plugins off. */
void tr_guard_init(void);
/* Every component of path (relative to loc) that exists must be a hard
 * link: 1 if all exist, 0 if one is absent, DRIFT_E_INPUT naming the link
 * (external, soft, user-defined) otherwise. */
int tr_guard_path(hid_t loc, const char *path, const char *file, const char *obj, drift_err *err);
/* DRIFT_OK for a hard link; DRIFT_E_INPUT naming the link otherwise. */
int tr_guard_link_info(hid_t loc, const char *name, const H5L_info_t *li, const char *file, const char *obj,
                       drift_err *err);
/* The dataset policy: one hard link, no external raw storage, no virtual
 * layout unless allow_virtual, only the filters drift writes, chunks of at
 * most TR_CHUNK_MAX bytes. Turns filter plugins on when blosc/lz4 is used. */
int tr_guard_dataset(hid_t ds, int allow_virtual, const char *file, const char *obj, drift_err *err);
/* Reads dataset name's object header (and, for a virtual layout, its global
 * heap collection) with drift's own bounded reads, before HDF5 decodes it
 * (trace_ohdr.c): DRIFT_E_INPUT naming obj when it is virtual and
 * !allow_virtual, or when the header or the collection is malformed (a
 * collection HDF5 would loop on); DRIFT_OK otherwise, also when the header
 * cannot be read here (a chunk failing its checksum, an in-memory file):
 * HDF5 then judges it. */
int tr_guard_header(hid_t loc, const char *name, int allow_virtual, const char *file, const char *obj,
                    drift_err *err);
/* Refuses a file whose HDF5 superblock is version 0 or 1 (unchecksummed
 * metadata throughout) before HDF5 parses it; DRIFT_OK for v2/v3 and for
 * what is not HDF5 at all (the open that follows reports that). */
int tr_guard_superblock(const char *path, drift_err *err);
/* The same reading for a group's header (version 1, or a checksummed
 * header that does not parse, is refused); tr_open_group calls it. */
int tr_guard_group_header(hid_t loc, const char *name, const char *file, const char *obj, drift_err *err);
/* Jenkins lookup3 (hashlittle, initial value 0) of n bytes: HDF5's metadata checksum. */
uint32_t tr_ohdr_lookup3(const uint8_t *k, size_t n);
/* Opens dataset / group name of loc under the policy; *out owned by the
 * caller (H5Dclose / H5Gclose). DRIFT_E_INPUT naming obj (or name) when it
 * is missing, another kind of object, or refused. */
int tr_open_dataset(hid_t loc, const char *name, int allow_virtual, const char *file, const char *obj, hid_t *out,
                    drift_err *err);
int tr_open_group(hid_t loc, const char *name, const char *file, const char *obj, hid_t *out, drift_err *err);
/* Where the storage holding row `row` of ds ends (the chunk's address plus
 * its size; for a contiguous dataset its whole storage): 0 and *end, or 1
 * when that chunk was never written (*end -1), -1 when HDF5 cannot say (its
 * chunk index lies past a cut). */
int tr_row_end(hid_t ds, int64_t row, int64_t *end);

/* The start of that error's message: drift_trace_check reports it as it is,
 * drift_trace_repair refuses such a file (nothing it could trim restores it). */
#define TR_CUT_BELOW_COMMITS "the file is cut short below its committed steps:"
/* DRIFT_E_INPUT "the file is cut short" when committed row `row` of ds
 * (obj) does not lie in the reader's file (trace_reader.c). */
int tr_reader_row_in_file(drift_trace_reader *r, hid_t ds, int64_t row, const char *obj, drift_err *err);

/* rows of row_bytes must fit in file_bytes (+ TR_ROWS_SLACK); file_bytes <= 0
 * skips the check (an index view: the rows lie in the rank files). */
int tr_guard_rows(int64_t rows, size_t row_bytes, int64_t file_bytes, const char *file, const char *obj,
                  drift_err *err);

/* H5Fclose that remembers a failure (see drift_trace_process_init). */
herr_t tr_h5_close_file(hid_t f);

/* --- exclusive writers (trace_lock.c) ------------------------------------ */
/* "<path>.lock" into out; -1 if it does not fit. */
int tr_lock_path(const char *path, char *out, size_t sz);
/* Takes the writer lock of path (non-blocking); *fd owned by the caller,
 * released by tr_lock_release. DRIFT_E_IO naming the holder's pid if busy. */
int tr_lock_take(const char *path, int *fd, drift_err *err);
void tr_lock_release(const char *path, int fd);
/* 1 if a writer holds the lock of path (*pid its pid when known). */
int tr_lock_busy(const char *path, int *pid);

/* --- checked reading helpers (return drift_status) ----------------------- */
int tr_attr_exists(hid_t loc, const char *name);
/* Fixed-length string attribute into a malloc'd NUL-terminated string. */
/* H5Literate over g's links in the file's native order (not by name: see
 * trace_h5.c); callers that need an order sort afterwards. */
herr_t tr_iterate_links(hid_t g, H5L_iterate_t cb, void *data);
int tr_read_attr_str(hid_t loc, const char *name, size_t max, char **out, const char *file, const char *obj,
                     drift_err *err);
int tr_read_attr_i64(hid_t loc, const char *name, int64_t *out, const char *file, const char *obj,
                     drift_err *err);
int tr_read_attr_f64(hid_t loc, const char *name, double *out, const char *file, const char *obj,
                     drift_err *err);
/* 1-D int64 array attribute of 0..maxn elements. */
int tr_read_attr_i64v(hid_t loc, const char *name, int64_t *out, int maxn, int *n, const char *file,
                      const char *obj, drift_err *err);

int tr_write_attr_str(hid_t loc, const char *name, const char *value);
int tr_write_attr_i64(hid_t loc, const char *name, int64_t v);
int tr_write_attr_f64(hid_t loc, const char *name, double v);
int tr_write_attr_i64v(hid_t loc, const char *name, const int64_t *v, int n);

/* Dimensions of a dataset: rank in 1..maxrank, every dim <= TR_DIM_MAX. */
int tr_dataset_dims(hid_t ds, int maxrank, int *rank, int64_t *dims, const char *file, const char *obj,
                    drift_err *err);
/* Checks that dataset ds is a 1-D table of compound type t (every member
 * present with the right class); *rows gets its extent. */
int tr_check_table(hid_t ds, enum tr_table t, int64_t *rows, const char *file, const char *obj, drift_err *err);
/* Reads rows [first, first+count) of a 1-D table into dst (memory type of t). */
int tr_read_rows(hid_t ds, enum tr_table t, int64_t first, int64_t count, void *dst, const char *file,
                 const char *obj, drift_err *err);
/* Creates an empty extendible 1-D table. */
hid_t tr_create_table(hid_t loc, const char *name, enum tr_table t, hsize_t chunk_rows);
/* Memory types and a transfer list built once by a writer (or zeroed: then
 * tr_append_rows builds them per call). */
typedef struct tr_io {
    hid_t mt[TR_T_COUNT];
    hid_t dxpl;
    int ready;
} tr_io;
int tr_io_init(tr_io *io);
void tr_io_free(tr_io *io);
/* Appends count rows (memory layout of t) at row *rows; updates *rows.
 * io may be NULL. */
int tr_append_rows(hid_t ds, enum tr_table t, int64_t *rows, const void *src, int64_t count, const tr_io *io);

/* --- reader state -------------------------------------------------------- */
typedef struct tr_site {
    char *name;
    int id;
    drift_dtype dtype;
    int ndim;
    int64_t shape[DRIFT_MAX_DIMS];
    int64_t numel;
    drift_trace_compress compress;
    hid_t grp, data, index, stats;   /* data < 0 if stats only */
    int64_t n_index, n_stats, n_data; /* extents */
    int64_t committed;               /* committed records */
    int64_t committed_for;           /* step count committed was computed for (-1 = stale) */
    char *damaged;                   /* owned; non-NULL: the site could not be loaded (why): its
                                        records are unreadable, every other site reads */
} tr_site;

typedef struct tr_param {
    char *fqn;
    char *link;                      /* HDF5 link name (escaped) */
    int ndim;
    int64_t shape[DRIFT_MAX_DIMS], offset[DRIFT_MAX_DIMS], full_shape[DRIFT_MAX_DIMS];
    int64_t numel;
    drift_dtype dtype;               /* buffers only */
} tr_param;

struct drift_trace_reader {
    char *path;
    hid_t file;
    int follow, unclean, swmr;
    int view;           /* an index view: virtual datasets over the rank file are expected */
    int64_t file_bytes; /* size of the file on disk at open/refresh (0 for a view) */
    drift_trace_meta meta;
    char *meta_strs[7]; /* run_id, family, plan, producer, created */
    tr_site *sites;
    size_t n_sites;
    hid_t steps, mrows, msteps, mnames, notes;
    drift_trace_step *stp;
    size_t n_steps, cap_steps;
    int64_t steps_extent;
    char **mnames_v;
    size_t n_mnames;
    tr_param *params, *buffers;
    size_t n_params, n_buffers;
    tr_param_dtype_row *pdt;
    size_t n_pdt;
};

/* trace_reader.c internals used by trace_check.c */
int tr_reader_open_file(drift_trace_reader *r, drift_err *err);
/* 1 if path is shorter than the end-of-file address its (v2/v3) superblock
 * records: a writer stopped mid-write (disk full); *size and *eof filled.
 * trace_check.c. */
int tr_short_file(const char *path, int64_t *size, int64_t *eof);
int tr_site_sync(drift_trace_reader *r, size_t i, drift_err *err);
int64_t tr_last_step(const drift_trace_reader *r);
/* Loads params/buffers/param dtypes (trace_read_tables.c). */
int tr_reader_load_extra(drift_trace_reader *r, drift_err *err);
void tr_reader_free_extra(drift_trace_reader *r);

/* Internal to formats/ (the open entry point of trace_reader.c): opens
 * r->path as a trace, or, when it names an index (or INDEX#rank=N), as an
 * in-memory view of that rank whose datasets are the index's virtual
 * datasets. Same statuses as drift_trace_reader_open. */
int tr_index_reader_open_file(drift_trace_reader *r, drift_err *err);

#endif
