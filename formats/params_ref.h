/* Parameters by reference (docs/format.md, "/params_ref"): instead of fp32
 * copies, a trace names the checkpoint the run loaded, a diffusers sharded
 * safetensors checkpoint (NAME.safetensors.index.json + its shards) or a
 * single .safetensors file, and for every tensor its file, dtype, shape and
 * drift-sum64 content hash (formats/hash64.h) of its bytes as stored. As
 * JSON (the /params_ref dataset):
 *
 *   {"format": "drift-params-ref", "version": 1, "hash": "drift-sum64",
 *    "weights_root": "/abs/dir/at/record/time",
 *    "index": "diffusion_pytorch_model.safetensors.index.json",   (or null)
 *    "tensors": [{"name": "blocks.0.attn1.to_q.weight",
 *                 "file": "diffusion_pytorch_model-00001-of-00003.safetensors",
 *                 "dtype": "BF16", "shape": [5120, 5120],
 *                 "hash": "0123456789abcdef"}, ...]}
 *
 * File names are relative to the weights root: non-empty, no leading '/',
 * no ".." component, no backslash. The parser trusts nothing and names the
 * field and the expectation in its errors (DRIFT_E_INPUT). */
#ifndef DRIFT_FORMATS_PARAMS_REF_H
#define DRIFT_FORMATS_PARAMS_REF_H

#include <stddef.h>
#include <stdint.h>

#include "formats/dtype.h"
#include "formats/err.h"
#include "formats/params.h" /* DRIFT_MAX_DIMS */

#define DRIFT_PARAMS_REF_FORMAT "drift-params-ref"
#define DRIFT_PARAMS_REF_VERSION 1
#define DRIFT_PARAMS_REF_PATH_MAX 4096 /* bytes, including the NUL */

typedef struct drift_params_ref_tensor {
    char *name;                  /* owned */
    char *file;                  /* owned; relative to the weights root */
    drift_dtype dtype;           /* as stored: DRIFT_F32, DRIFT_BF16, DRIFT_F16 or DRIFT_F64 */
    int ndim;
    int64_t shape[DRIFT_MAX_DIMS];
    int64_t numel;
    uint64_t hash;               /* drift-sum64 of the stored bytes */
} drift_params_ref_tensor;

typedef struct drift_params_ref {
    char *weights_root;          /* owned; the root at record time (may be NULL) */
    char *index;                 /* owned; index file relative to the root, or NULL */
    drift_params_ref_tensor *t;  /* owned array of n */
    size_t n, cap;
} drift_params_ref;

/* Zeroes ref. */
void drift_params_ref_init(drift_params_ref *ref);
/* Frees what ref owns (NULL allowed); ref is left initialised. */
void drift_params_ref_free(drift_params_ref *ref);
/* Appends a tensor (strings and shape copied). Rejects duplicate names (not
 * checked here: the index lookup does), bad files (see above), ndim outside
 * 0..DRIFT_MAX_DIMS and negative dims (DRIFT_E_USAGE). */
int drift_params_ref_add(drift_params_ref *ref, const char *name, const char *file, drift_dtype dtype, int ndim,
                         const int64_t *shape, uint64_t hash, drift_err *err);
/* Index of name or -1 (linear). */
long drift_params_ref_find(const drift_params_ref *ref, const char *name);
/* NULL if file is an acceptable relative file name, else what is wrong (static). */
const char *drift_params_ref_file_problem(const char *file);

/* The JSON above; *json is owned by the caller (drift_free). */
int drift_params_ref_to_json(const drift_params_ref *ref, char **json, size_t *len, drift_err *err);
/* Parses json[0..len) (source names it in errors) into ref (initialised,
 * empty; left empty on error). */
int drift_params_ref_parse(drift_params_ref *ref, const char *json, size_t len, const char *source, drift_err *err);

/* "F32", "BF16", "F16", "F64" (safetensors names) <-> dtype; NULL /
 * DRIFT_DTYPE_INVALID for others. */
const char *drift_params_ref_dtype_name(drift_dtype dt);
drift_dtype drift_params_ref_dtype_parse(const char *s);

#endif
