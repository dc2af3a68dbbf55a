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
 *  - Aliases (DRIFT_EXEC_ALIAS=0 turns them off): where the backend has an
 *    alias function, a VIEW shares its input's storage, and so does a NARROW
 *    whose slice is contiguous (every dim before `dim` has size 1) at an
 *    element offset. An alias holds a reference on the buffer that owns the
 *    storage, which is released only after its last alias.
 *  - Cast folding (DRIFT_EXEC_FUSE_CASTS=0 turns it off; replay/ir/fuse.h):
 *    exact widening casts read by ops that widen anyway are skipped, and an
 *    fp32 elementwise op followed only by a narrowing cast rounds to the
 *    cast's dtype itself. Every materialised value keeps its bits: the
 *    output and every reported site are bitwise equal with and without.
 *  - Only live values run: the output, recorded sites when a site callback
 *    is given, and what they depend on.
 *  - The site callback sees every recorded site in execution order, as a
 *    backend tensor that lives for the duration of the call.
 *  - Deterministic: the same graph, inputs and backend give identical bits.
 *
 * Host tensors are collected in a drift_hostset: named tensors of fp32
 * values (exactly representable in the tensor's declared dtype), optionally
 * with exact fp64 values (hostset.c).
 *
 * A run is a pure plan (replay/exec/exec_plan.h: liveness, use counts, the
 * cache's fixed set, cast folding) and the run loop over it (exec.c);
 * DRIFT_EXEC_PROFILE=1 times the loop's nodes (exec_profile.h). */
#ifndef DRIFT_REPLAY_EXEC_H
#define DRIFT_REPLAY_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "formats/dtype.h"
#include "formats/err.h"
#include "kernels/backend.h"
#include "replay/ir/graph.h"

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
/* Adds a tensor like drift_hostset_add but leaves its fp32 storage
 * uninitialised (no f64): the caller fills (*added)->f32 with numel values
 * representable in dtype before the set is used (e.g. from several threads). */
int drift_hostset_add_alloc(drift_hostset *s, const char *name, drift_dtype dtype, int ndim, const int64_t *shape,
                            drift_host_tensor **added, drift_err *err);
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

/* A parameter's host values are about to be read (drift_exec_inputs.await_param). */
typedef int (*drift_exec_param_fn)(const char *fqn, void *user, drift_err *err);

typedef struct drift_exec_inputs {
    const drift_hostset *params;   /* fp32 masters by root FQN */
    const drift_hostset *buffers;  /* buffers by name (e.g. the RoPE tables) */
    const drift_hostset *inputs;   /* boundary inputs by name, in their handed-over dtype; an entry
                                      named as a buffer replaces it for this run (not fixed: a
                                      captured graph's per-step user inputs "input:NAME") */
    drift_exec_site_fn on_site;    /* may be NULL */
    void *user;
    struct drift_exec_cache *cache; /* may be NULL: see drift_exec_cache below */
    drift_exec_param_fn await_param; /* may be NULL: called with a parameter's name before its host
                                        values are read (an overlapped load blocks there until they
                                        are filled, replay/exec/params_pipeline.h); non-zero stops the run */
    void *await_user;
} drift_exec_inputs;

/* Device residency across runs. Values that depend only on parameters and
 * buffers (the masters, their FSDP casts, autocast's casts of them, views of
 * them) are the same in every run of one graph: with a cache they are
 * computed on the first run and kept on the backend, as a trainer keeps its
 * gathered bf16 parameters, so later runs upload and cast nothing but the
 * boundary inputs. A cache belongs to one backend and one graph at a time;
 * given another graph it empties itself first, or, with adoption on
 * (drift_exec_cache_set_adopt), keeps the entries that graph computes the
 * same way (equal structural keys, exec_keys.h: a bisect probe's plan changes
 * a few parameters' casts) and releases the rest. Adoption assumes the host
 * parameters and buffers did not change between the two graphs' runs. */
typedef struct drift_exec_cache drift_exec_cache;
/* Creates an empty cache for be (borrowed; must outlive the cache). */
int drift_exec_cache_create(const drift_backend *be, drift_exec_cache **out, drift_err *err);
/* Releases every cached tensor and frees c (NULL allowed). */
void drift_exec_cache_free(drift_exec_cache *c);
/* Tensors and bytes held. */
size_t drift_exec_cache_count(const drift_exec_cache *c);
/* Entries handed from one bound graph to the next (same structural key,
 * replay/exec/exec_keys.h) instead of being computed again. */
size_t drift_exec_cache_adopted(const drift_exec_cache *c);
/* Adoption across graphs on (1) or off (0, the default); DRIFT_EXEC_ADOPT=0
 * turns it off everywhere (an A/B switch). */
void drift_exec_cache_set_adopt(drift_exec_cache *c, int on);
/* Forgets the bound graph (call before freeing it while the cache lives on):
 * the next run's graph, even one at the same address, is bound afresh and
 * adopts the entries it computes the same way. */
void drift_exec_cache_detach(drift_exec_cache *c);

/* Adopts t (allocated on c's backend, with value id's dtype and shape) as
 * the cached value of value id of g, binding c to g first (which empties it
 * if it held another graph): runs of g with c use it instead of computing
 * the value, as if an earlier run had cached it. t's storage moves to the
 * cache (t->data is set to NULL). For values that depend on parameters and
 * buffers only (e.g. FSDP-gathered parameters, replay/dist/fsdp.h). */
int drift_exec_cache_put(drift_exec_cache *c, const drift_graph *g, int id, drift_tensor *t, drift_err *err);

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

/* What one run did (drift_exec_run_ex). */
typedef struct drift_exec_stats {
    int64_t kernels;        /* backend run() calls */
    int64_t identity_casts; /* CASTs served as aliases because the input already had the dtype */
    int64_t views_aliased;  /* VIEWs served as aliases */
    int64_t narrows_aliased;/* NARROWs served as aliases */
    int64_t casts_skipped;  /* (a) widening CASTs skipped (fuse.h) */
    int64_t casts_folded;   /* (b) narrowing CASTs folded into their producer (fuse.h) */
    int64_t live_nodes;     /* live values of the run's plan (leaves and nodes) */
    int64_t resumed_at;     /* the boundary a resumed run started from (drift_exec_options.resume), -1: none */
    int64_t prefix_skipped; /* live values below that boundary not run (restored or not needed) */
} drift_exec_stats;

/* ---- prefix reuse (drift bisect) ------------------------------------------------ */

/* The values a run holds at a node boundary K: every live value with id < K
 * that a value >= K (or the output) reads, except those a device cache
 * keeps (fixed: they depend on parameters and buffers only), copied to the
 * host with their stored dtype. A later run of a graph whose values < K are
 * identical to the captured one's (drift_exec_first_difference), on the
 * same inputs, parameters and buffers, computes the same bits below K: it
 * can restore these and start at K (drift_exec_options.resume). */
typedef struct drift_exec_snapshot drift_exec_snapshot;
void drift_exec_snapshot_free(drift_exec_snapshot *s); /* NULL allowed */
size_t drift_exec_snapshot_bytes(const drift_exec_snapshot *s);
int drift_exec_snapshot_boundary(const drift_exec_snapshot *s);
/* The first value id at which a and b differ (kind, name, shape, dtype, op
 * and its attributes, inputs), or the smaller count when one is a prefix of
 * the other. Conservative: a difference it reports may be harmless, never
 * the other way round. */
int drift_exec_first_difference(const drift_graph *a, const drift_graph *b);

/* Per-run switches. -1 = the environment's setting (DRIFT_EXEC_ALIAS,
 * DRIFT_EXEC_FUSE_CASTS: "0" turns off, anything else or unset is on). */
typedef struct drift_exec_options {
    int alias;                /* -1, 0 or 1 */
    int fuse_casts;           /* -1, 0 or 1 */
    drift_exec_stats *stats;  /* may be NULL; filled (zeroed first) by the run */
    int fixed_only;           /* 1: only fill the cache (in->cache required): compute the values
                                 that depend on parameters and buffers only, as a full run with the
                                 same in (same site callback, hence the same liveness and fusion)
                                 would, call no site callback, need no inputs; out must be NULL */
    /* Capture (may be 0/NULL): snapshots at the n_capture boundaries
     * capture_at (ascending value ids) into captured[0..n_capture-1]
     * (caller frees each; NULL where not taken: a boundary past the graph,
     * or one that would take the host bytes past *capture_budget, which is
     * decreased by what is taken; NULL budget: unlimited). */
    const int *capture_at;
    int n_capture;
    drift_exec_snapshot **captured;
    size_t *capture_budget;
    /* Resume (may be NULL): restore the snapshot's values and run from its
     * boundary. Only with a device cache and no site callback; the caller
     * guarantees the graph below the boundary is the captured one's and the
     * inputs are the same. When this run needs a value below the boundary the
     * snapshot lacks (or holds in a dtype it cannot give exactly), it runs
     * from the start instead (stats->resumed_at -1). */
    const drift_exec_snapshot *resume;
} drift_exec_options;

/* Runs the assigned graph g on be. Every live leaf must be found in the
 * matching set with the leaf's shape; an input's host dtype must equal the
 * leaf's dtype (the one the assignment was told was handed over) unless the
 * leaf is fp64. out (zeroed or freed before) receives the output; it may be
 * NULL when only the site callback matters. Everything the run allocated on
 * be is released before returning, on success and on failure. */
int drift_exec_run(const drift_graph *g, const drift_backend *be, const drift_exec_inputs *in, drift_exec_result *out,
                   drift_err *err);
/* The same with explicit switches (opts NULL: as drift_exec_run). */
int drift_exec_run_ex(const drift_graph *g, const drift_backend *be, const drift_exec_inputs *in,
                      const drift_exec_options *opts, drift_exec_result *out, drift_err *err);

#endif
