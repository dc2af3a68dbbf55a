/* A family model and one side's forward of it, ready to run (DESIGN.md s4,
 * s8): the glue between a model spec, its parameters and buffers, a dtype
 * plan, and the executor.
 *
 *   drift_model    plan-independent: family config, parameter table,
 *                  semantic graph, fp32 master parameters, RoPE buffers by
 *                  provenance.
 *   drift_forward  one side under one plan: the compiled plan and the
 *                  assigned graph (or the fp64 oracle). Cheap to make, so
 *                  bisect makes one per probe. */
#ifndef DRIFT_REPLAY_FORWARD_H
#define DRIFT_REPLAY_FORWARD_H

#include <stdint.h>

#include "formats/err.h"
#include "formats/params.h"
#include "formats/checkpoint.h" /* drift_load_report */
#include "formats/plan.h"
#include "formats/trace.h"
#include "kernels/backend.h"
#include "replay/ir/assign.h"
#include "replay/exec/exec.h"
#include "replay/ir/graph.h"
#include "replay/models/family.h"

typedef struct drift_model {
    drift_family_config cfg;
    char spec[1024];             /* canonical "family:k=v,..." */
    drift_param_table table;     /* owned */
    drift_graph *sem;            /* owned: semantic graph */
    drift_hostset *params;       /* owned: fp32 masters by root FQN (NULL until seeded/loaded) */
    drift_hostset *buffers[3];   /* owned, indexed by drift_buffer_prov; built or loaded on demand */
    const char *weights_root;    /* borrowed; overrides the weights root a trace's /params_ref recorded */
    int load_baseline;           /* 1: also time a sequential read of the referenced files (load) */
    drift_load_report load;      /* filled by drift_model_load_trace */
    int defer_params;            /* 1: drift_model_load_trace keeps a trace's /params_ref in pending_ref, or
                                    the path of a trace whose whole by-value /params it could read, in
                                    pending_trace, instead of reading the values (params stays NULL): the
                                    replay reads them while it uploads (params_pipeline.h) or later
                                    (drift_model_load_pending) */
    drift_params_ref *pending_ref; /* owned: that reference, not read yet; NULL otherwise */
    char *pending_trace;         /* owned: that trace's path, its /params not read yet; NULL otherwise */
    int captured;                /* 1: sem is an imported torch.export graph (replay/capture/aten_model.h);
                                    cfg then holds only family "graph" and batch; buffers are the recorded ones */
    char *captured_json;         /* owned: the drift-aten-graph document (written to a trace's /graph) */
    size_t captured_len;
    char *captured_notes;        /* owned, NULL or lines ending in '\n': module sites the import left unmapped
                                    (drift_aten_graph_lower_ex) */
    int rebatch_device_values;   /* re-batching this captured model: 0 not decided yet, 1 read the recorded
                                    device values, 2 lower them as ops (one choice for every batch) */
    char **rebatch_nz_names;     /* owned: re-batching, the nonzero nodes whose count follows the data of the
                                    batch the graph runs on (drift_capture_model_set_count) */
    int64_t *rebatch_nz_counts;  /* owned: their counts */
    int rebatch_nz_n;
} drift_model;

/* Parses spec, builds the parameter table and the semantic graph. The model
 * has no parameter values yet. Caller owns *out (drift_model_free). */
int drift_model_create(const char *spec, drift_model **out, drift_err *err);
/* Frees m and everything it owns (NULL allowed). */
void drift_model_free(drift_model *m);
/* Fills m->params with seeded fp32 masters (replaces any). */
int drift_model_seed_params(drift_model *m, uint64_t seed, drift_err *err);
/* Fills m->params from the trace's /params (every parameter of the table
 * must be there with its shape) and m->buffers[RECORDED] from its /buffers
 * when it has the RoPE tables. A parameter stored as a shard (an FSDP rank
 * file) is assembled from the sibling rank files of the same run: the same
 * path with the file name's last "rank<N>" replaced by N = 0..world_size-1,
 * each with the same run id; every element must be covered exactly once
 * (errors name the missing rank file or parameter). */
int drift_model_load_trace(drift_model *m, drift_trace_reader *r, drift_err *err);
/* (A trace with /params_ref instead of values: the parameters are read from
 * the referenced checkpoint under m->weights_root or the recorded root, every
 * hash checked: replay/exec/params_load.h; with m->defer_params the
 * reference is only parsed and kept in m->pending_ref, and a by-value /params
 * of whole tensors (no FSDP shards) is only checked, its path kept in
 * m->pending_trace.) */
/* Fills m->params from a .safetensors file (untrusted: parsed with
 * formats/safetensors checks): every parameter of the table must be there
 * under its diffusers name with the model's shape (any of F32/BF16/F16/F64,
 * widened to fp32 masters). Extra tensors are ignored and counted in
 * *n_extra (may be NULL). */
int drift_model_load_safetensors(drift_model *m, const char *path, size_t *n_extra, drift_err *err);
/* The buffers for provenance prov (built on first use for CPU/DEVICE;
 * RECORDED must have been loaded). Borrowed. */
int drift_model_buffers(drift_model *m, drift_buffer_prov prov, const drift_hostset **out, drift_err *err);

typedef struct drift_forward {
    drift_side side;
    drift_plan plan;             /* owned copy (unused for the oracle) */
    drift_compiled_plan compiled;/* owned */
    drift_graph *assigned;       /* owned */
    drift_buffer_prov rope;      /* which RoPE tables this side uses */
    drift_dtype handed[DRIFT_INPUT_COUNT];
} drift_forward;

/* Compiles plan against m's parameters and assigns dtypes for side. plan may
 * be NULL only for DRIFT_SIDE_ORACLE. handed (NULL: all fp32): the dtypes the
 * boundary inputs arrive in. Caller owns *out (drift_forward_free). */
int drift_forward_prepare(const drift_model *m, const drift_plan *plan, drift_side side,
                          const drift_dtype handed[DRIFT_INPUT_COUNT], drift_forward **out, drift_err *err);
/* Frees f (NULL allowed). */
void drift_forward_free(drift_forward *f);
/* Runs f on be with inputs ("latents", "cond", "timestep" in the handed-over
 * dtypes). on_site/user as drift_exec_inputs; out may be NULL. */
int drift_forward_run(const drift_forward *f, drift_model *m, const drift_backend *be, const drift_hostset *inputs,
                      drift_exec_site_fn on_site, void *user, drift_exec_result *out, drift_err *err);

/* The same with a device-residency cache (replay/exec/exec.h): parameters and
 * their casts stay on be between runs of f. cache may be NULL. */
int drift_forward_run_cached(const drift_forward *f, drift_model *m, const drift_backend *be,
                             const drift_hostset *inputs, drift_exec_cache *cache, drift_exec_site_fn on_site,
                             void *user, drift_exec_result *out, drift_err *err);
/* The same with executor switches (opts may be NULL): prefix capture and
 * resume (exec.h) for drift bisect. */
int drift_forward_run_ex(const drift_forward *f, drift_model *m, const drift_backend *be, const drift_hostset *inputs,
                         drift_exec_cache *cache, const drift_exec_options *opts, drift_exec_site_fn on_site, void *user,
                         drift_exec_result *out, drift_err *err);
/* Fills cache (not NULL) with everything drift_forward_run_cached(f, m, be,
 * ..., cache, on_site, ...) would keep there (parameters uploaded, cast per
 * the plan, their views), without inputs and without running the rest:
 * one-time setup work moved out of the first step. on_site is only looked at
 * (a run observing sites plans its buffers differently), never called. */
int drift_forward_warm(const drift_forward *f, drift_model *m, const drift_backend *be, drift_exec_cache *cache,
                       drift_exec_site_fn on_site, drift_err *err);

/* Recorded site values of one run, kept on the host (fp32 widened), by site
 * name in execution order: the reference side of a comparison. */
typedef struct drift_site_cache drift_site_cache;
int drift_site_cache_create(drift_site_cache **out, drift_err *err);
void drift_site_cache_free(drift_site_cache *c);
/* Drops the values (keeps the allocation for reuse). */
void drift_site_cache_clear(drift_site_cache *c);
/* Stores a copy of t's values under site (downloaded through t->be). */
int drift_site_cache_put(drift_site_cache *c, const char *site, const drift_tensor *t, drift_err *err);
/* Stores n fp32 values under site with dtype dt. */
int drift_site_cache_put_f32(drift_site_cache *c, const char *site, drift_dtype dt, const float *v, int64_t n,
                             drift_err *err);
/* Values of site (borrowed) and their count/dtype; NULL if absent. */
const float *drift_site_cache_get(const drift_site_cache *c, const char *site, int64_t *n, drift_dtype *dt);

#endif
