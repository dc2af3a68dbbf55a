/* .safetensors files: a strict reader for untrusted files and a writer.
 *
 * Layout (https://github.com/huggingface/safetensors): an 8-byte
 * little-endian unsigned header length N, N bytes of UTF-8 JSON
 *
 *   {"__metadata__": {"format": "pt"},            (optional; string values)
 *    "blocks.0.norm2.weight": {"dtype": "F32", "shape": [1536],
 *                              "data_offsets": [0, 6144]}, ...}
 *
 * (possibly padded with trailing spaces), then the byte buffer; data_offsets
 * are [begin, end) relative to the start of the buffer, elements
 * little-endian, row-major.
 *
 * The reader trusts nothing: N is checked against the file size and
 * DRIFT_SAFETENSORS_HEADER_MAX; the header is parsed by the strict JSON reader
 * (formats/json.h) after a pre-scan bounding its nesting depth (3) and value
 * count; every tensor entry must have exactly the keys dtype (string), shape
 * (array of at most DRIFT_MAX_DIMS non-negative integers, product checked
 * against overflow) and data_offsets (two non-negative integers, begin <=
 * end); dtype size * numel must equal end - begin; sorted by begin, the
 * tensors must tile the buffer exactly as the reference implementation
 * requires (first begin 0, each begin equal to the previous end, the last
 * end equal to the buffer size): so no range overlaps another, none leaves
 * the buffer, no byte is unaccounted for. Names must be non-empty, at most
 * DRIFT_SAFETENSORS_NAME_MAX-1 bytes and free of NUL.
 *
 * Readable dtypes: F32, BF16, F16, F64 (widened to fp32 on read; F64 rounds to
 * nearest even). The other dtypes of the safetensors spec (BOOL, U8, I8,
 * I16, U16, I32, U32, I64, U64, F8_E4M3, F8_E5M2) and unknown dtype strings
 * are rejected unless DRIFT_SAFETENSORS_SKIP_UNSUPPORTED is given: then they
 * are left out of the tensor list (their layout is still checked; a spec
 * dtype's size too) and counted by drift_safetensors_n_skipped.
 *
 * All errors on bad input are DRIFT_E_INPUT with where = "FILE" or
 * "FILE:LINE:COL" (a position inside the JSON header, 1-based) and a message
 * naming the tensor, the field and what was expected. Unreadable files are
 * DRIFT_E_IO; allocation failures DRIFT_E_NOMEM. Allocation goes through
 * formats/alloc.h (fault-injectable).
 *
 * A handle is not thread-safe for concurrent reads (it shares one bounce
 * buffer); use one per thread. Tensor data is read with pread(2) (no mmap:
 * a file truncated under the reader gives an error, not SIGBUS). */
#ifndef DRIFT_FORMATS_SAFETENSORS_H
#define DRIFT_FORMATS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "formats/dtype.h"
#include "formats/err.h"
#include "formats/params.h" /* DRIFT_MAX_DIMS */

/* The reference implementation's limit is 100 MB; ours is additionally
 * bounded by what the JSON reader accepts (DRIFT_JSON_MAX_INPUT). */
#define DRIFT_SAFETENSORS_HEADER_MAX ((uint64_t)100 << 20)
#define DRIFT_SAFETENSORS_NAME_MAX 4096          /* bytes, including the NUL */
#define DRIFT_SAFETENSORS_MAX_TENSORS 1000000

/* drift_safetensors_open flags */
#define DRIFT_SAFETENSORS_SKIP_UNSUPPORTED 1u    /* leave out tensors of dtypes drift cannot widen */

typedef struct drift_safetensors drift_safetensors;

typedef struct drift_safetensors_info {
    const char *name;            /* owned by the handle */
    drift_dtype dtype;           /* DRIFT_F32, DRIFT_BF16, DRIFT_F16 or DRIFT_F64 */
    const char *dtype_name;      /* as in the file: "F32", "BF16", "F16", "F64" (static) */
    int ndim;                    /* 0 (scalar) .. DRIFT_MAX_DIMS */
    int64_t shape[DRIFT_MAX_DIMS];
    int64_t numel;               /* product of shape (1 for a scalar) */
    uint64_t offset;             /* absolute byte offset of the data in the file */
    uint64_t nbytes;             /* end - begin */
} drift_safetensors_info;

/* Opens and validates path (flags: DRIFT_SAFETENSORS_*). *out is owned by the
 * caller (drift_safetensors_close); NULL on failure. The file stays open
 * until close. */
int drift_safetensors_open(drift_safetensors **out, const char *path, unsigned flags, drift_err *err);
/* The same over an in-memory image of a file: data[0..len) is borrowed and
 * must outlive the handle. source_name (NULL: "<memory>") names it in
 * errors. */
int drift_safetensors_open_mem(drift_safetensors **out, const void *data, size_t len, const char *source_name,
                               unsigned flags, drift_err *err);
/* NULL allowed. */
void drift_safetensors_close(drift_safetensors *f);

/* Source path or name; owned by f. */
const char *drift_safetensors_path(const drift_safetensors *f);
/* Listed tensors, in header order (skipped ones excluded). */
size_t drift_safetensors_n_tensors(const drift_safetensors *f);
/* Tensors left out under DRIFT_SAFETENSORS_SKIP_UNSUPPORTED. */
size_t drift_safetensors_n_skipped(const drift_safetensors *f);
/* Info of tensor i (0..n-1) into *out; DRIFT_E_USAGE if i is out of range. */
int drift_safetensors_tensor(const drift_safetensors *f, size_t i, drift_safetensors_info *out, drift_err *err);
/* Index of the tensor named name; -1 if absent (or skipped). */
long drift_safetensors_find(const drift_safetensors *f, const char *name);

/* Tensor i widened to fp32 into dst (caller-owned, dst_len floats, must be
 * >= numel: else DRIFT_E_USAGE naming both sizes). */
int drift_safetensors_read_f32(drift_safetensors *f, size_t i, float *dst, size_t dst_len, drift_err *err);
/* Raw little-endian elements of tensor i into dst (dst_bytes >= nbytes). */
int drift_safetensors_read_raw(drift_safetensors *f, size_t i, void *dst, size_t dst_bytes, drift_err *err);

/* "__metadata__" entries, in written order; strings owned by f. */
size_t drift_safetensors_n_metadata(const drift_safetensors *f);
int drift_safetensors_metadata(const drift_safetensors *f, size_t i, const char **key, const char **value);
/* Value of metadata key, or NULL. */
const char *drift_safetensors_find_metadata(const drift_safetensors *f, const char *key);

/* --- writer ----------------------------------------------------------------- */
typedef struct drift_safetensors_entry {
    const char *name;            /* borrowed; unique, non-empty, not "__metadata__" */
    drift_dtype dtype;           /* stored dtype: DRIFT_F32, DRIFT_BF16, DRIFT_F16 or DRIFT_F64 */
    int ndim;                    /* 0 .. DRIFT_MAX_DIMS */
    const int64_t *shape;        /* borrowed; ndim entries (NULL if ndim == 0) */
    const float *values;         /* borrowed; numel fp32 values, rounded (RNE) to dtype; or NULL and: */
    const void *raw;             /* borrowed; numel raw elements of dtype (bf16/fp16 bits) */
} drift_safetensors_entry;

/* Writes the n tensors (data laid out in the given order, header padded to a
 * multiple of 8 with spaces) and the optional metadata pairs (keys[i] ->
 * values[i], borrowed; n_meta may be 0 with NULL arrays) to path, through a
 * temporary file in the same directory renamed into place. Bad entries are
 * DRIFT_E_USAGE naming the entry and field; I/O errors DRIFT_E_IO. */
int drift_safetensors_write(const char *path, const drift_safetensors_entry *entries, size_t n,
                            const char *const *meta_keys, const char *const *meta_values, size_t n_meta,
                            drift_err *err);

#endif
