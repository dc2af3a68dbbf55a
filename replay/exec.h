/* Graph executor (DESIGN.md s4, s7b): runs an assigned graph on a
 * drift_backend, node by node in id order, with no dtype rules of its own.
 *
 *  - Leaves are materialised at their position in the order (families place
 *    each parameter right before its first use, so parameters are uploaded
 *    lazily): parameters from fp32 masters (rounded to the leaf's master
 *    dtype by the upload), buffers and boundary inputs from host tensors.
 *    On an fp64 leaf (the oracle) a host tensor's exact fp64 values are used
 *    when it has them (e.g. the RoPE tables built in fp64).
 *  - Values are reference counted and released after their last use; a CAST
 *    whose input already has the target dtype aliases its input (no copy).
 *  - Only live values run: the output, recorded sites when a site callback
 *    is given, and what they depend on.
 *  - The site callback sees every recorded site in execution order, as a
 *    backend tensor that lives for the duration of the call.
 *  - Deterministic: the same graph, inputs and backend give identical bits.
 *
 * Host tensors are collected in a drift_hostset: named tensors of fp32
 * values (exactly representable in the tensor's declared dtype), optionally
 * with exact fp64 values. */
#ifndef DRIFT_REPLAY_EXEC_H
#define DRIFT_REPLAY_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "formats/dtype.h"
#include "formats/err.h"
#include "kernels/backend.h"
#include "replay/graph.h"

/* ---- host tensor sets --------------------------------------------------- */

typedef struct drift_host_tensor {
    const char *name;      /* owned by the set */
    drift_dtype dtype;     /* the dtype the values are representable in */
    int ndim;
    int64_t shape[DRIFT_MAX_DIMS];
    int64_t numel;
    float *f32;            /* owned by the set: numel values (widened to fp32) */
    double *f64;           /* owned by the set: exact values, or NULL */
} drift_host_tensor;

typedef struct drift_hostset drift_hostset;

/* Creates an empty set; caller owns *out (drift_hostset_free). */
int drift_hostset_create(drift_hostset **out, drift_err *err);
/* Frees s and everything it owns (NULL allowed). */
void drift_hostset_free(drift_hostset *s);
/* Adds a tensor (name, shape and values copied). f32 values are rounded to
 * dtype (a no-op when they are representable); f64 may be NULL. Duplicate
 * names, bad shapes (dims 1..2^40, at most 2^48 elements) and non-float
 * dtypes are DRIFT_E_INPUT. *added (may be NULL) receives a pointer owned by
 * the set, valid until s is freed. */
int drift_hostset_add(drift_hostset *s, const char *name, drift_dtype dtype, int ndim, const int64_t *shape,
                      const float *f32, const double *f64, drift_host_tensor **added, drift_err *err);
/* The tensor named name, or NULL. Borrowed. */
const drift_host_tensor *drift_hostset_find(const drift_hostset *s, const char *name);
/* Number of tensors and the i-th in insertion order (NULL if out of range). */
size_t drift_hostset_count(const drift_hostset *s);
const drift_host_tensor *drift_hostset_at(const drift_hostset *s, size_t i);

/* ---- execution ------------------------------------------------------------ */

/* Called for each recorded site in execution order. t is borrowed for the
 * duration of the call (download it or compute metrics with its backend).
 * A non-zero return stops the run; it is returned by drift_exec_run (set err
 * too, or the executor reports a generic DRIFT_E_CHECK message). */
typedef int (*drift_exec_site_fn)(const char *site, const drift_tensor *t, void *user, drift_err *err);

typedef struct drift_exec_inputs {
    const drift_hostset *params;   /* fp32 masters by root FQN */
    const drift_hostset *buffers;  /* buffers by name (e.g. the RoPE tables) */
    const drift_hostset *inputs;   /* boundary inputs by name, in their handed-over dtype */
    drift_exec_site_fn on_site;    /* may be NULL */
    void *user;
    struct drift_exec_cache *cache; /* may be NULL: see drift_exec_cache below */
} drift_exec_inputs;

/* Device residency across runs. Values that depend only on parameters and
 * buffers (the masters, their FSDP casts, autocast's casts of them, views of
 * them) are the same in every run of one graph: with a cache they are
 * computed on the first run and kept on the backend, as a trainer keeps its
 * gathered bf16 parameters, so later runs upload and cast nothing but the
 * boundary inputs. A cache belongs to one backend and one graph; given
 * another graph it empties itself first. */
typedef struct drift_exec_cache drift_exec_cache;
/* Creates an empty cache for be (borrowed; must outlive the cache). */
int drift_exec_cache_create(const drift_backend *be, drift_exec_cache **out, drift_err *err);
/* Releases every cached tensor and frees c (NULL allowed). */
void drift_exec_cache_free(drift_exec_cache *c);
/* Tensors and bytes held. */
size_t drift_exec_cache_count(const drift_exec_cache *c);

/* The graph's output (noise_pred) after a run. */
typedef struct drift_exec_result {
    drift_dtype dtype;     /* the output value's dtype */
    int ndim;
    int64_t shape[DRIFT_MAX_DIMS];
    int64_t numel;
    float *f32;            /* owned: values as fp32 (exact unless fp64) */
    double *f64;           /* owned: values as fp64 (exact) */
} drift_exec_result;

/* Frees what r owns (NULL allowed) and zeroes it. */
void drift_exec_result_free(drift_exec_result *r);

/* Runs the assigned graph g on be. Every live leaf must be found in the
 * matching set with the leaf's shape; an input's host dtype must equal the
 * leaf's dtype (the one the assignment was told was handed over) unless the
 * leaf is fp64. out (zeroed or freed before) receives the output; it may be
 * NULL when only the site callback matters. Everything the run allocated on
 * be is released before returning, on success and on failure. */
int drift_exec_run(const drift_graph *g, const drift_backend *be, const drift_exec_inputs *in, drift_exec_result *out,
                   drift_err *err);

#endif
