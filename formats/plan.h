/* Dtype plans (DESIGN.md s1, s5): parse/validate JSON plans, overlay
 * command-line flags, and compile param_dtype_patterns against a parameter
 * table into per-wrap maps (compile_param_dtype_maps). */
#ifndef DRIFT_FORMATS_PLAN_H
#define DRIFT_FORMATS_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "formats/dtype.h"
#include "formats/err.h"
#include "formats/params.h"

/* The three boundary inputs of input_dtype_policy. */
enum { DRIFT_INPUT_LATENTS = 0, DRIFT_INPUT_COND = 1, DRIFT_INPUT_TIMESTEP = 2, DRIFT_INPUT_COUNT = 3 };
/* Value kinds of an input_dtype_policy entry. */
typedef enum drift_input_kind {
    DRIFT_INPUT_PASSTHROUGH = 0, /* JSON null: pass through whatever the rollout handed over */
    DRIFT_INPUT_DEFAULT = 1,     /* "default": the forward dtype */
    DRIFT_INPUT_EXPLICIT = 2     /* "fp32" / "bf16" / "fp16" */
} drift_input_kind;

typedef struct drift_input_policy {
    drift_input_kind kind;
    drift_dtype dtype;           /* meaningful for DRIFT_INPUT_EXPLICIT */
} drift_input_policy;

/* Where a numerically relevant buffer (the RoPE table) was built. A drift
 * extension to the plan format ("buffer_provenance": {"rope": "cpu"}). */
typedef enum drift_buffer_prov {
    DRIFT_BUF_CPU_FP64 = 0,      /* "cpu": computed in fp64 on the host, stored fp32 (diffusers' default) */
    DRIFT_BUF_DEVICE_FP32 = 1,   /* "device": computed in fp32 on the accelerator */
    DRIFT_BUF_RECORDED = 2       /* "recorded": taken from the trace's /buffers */
} drift_buffer_prov;

typedef struct drift_param_pattern {
    char *glob;                  /* owned; Python fnmatch.fnmatchcase semantics */
    drift_dtype dtype;           /* bf16, fp16 or fp32 */
    char origin[512];            /* "plan.json:9:5" or "--param-dtype" for error messages */
} drift_param_pattern;

typedef struct drift_plan {
    char name[128];
    char source[512];            /* file the plan came from, or "flags" */
    drift_dtype fsdp_master_dtype;       /* default fp32 */
    drift_dtype fsdp_reduce_dtype;       /* default fp32 */
    drift_dtype diffusion_forward_dtype; /* default bf16 */
    drift_dtype sglang_dit_precision;    /* default bf16 */
    drift_input_policy inputs[DRIFT_INPUT_COUNT]; /* default passthrough */
    drift_param_pattern *patterns;       /* owned, ordered */
    size_t n_patterns;
    drift_buffer_prov rope_provenance;   /* default DRIFT_BUF_CPU_FP64 */
} drift_plan;

/* Initialises p with the defaults of DESIGN.md s1 (no patterns). */
void drift_plan_init(drift_plan *p);
/* Frees what p owns (NULL allowed); p is left initialised. */
void drift_plan_free(drift_plan *p);
/* Deep copy into dst (which must not own anything). */
int drift_plan_copy(drift_plan *dst, const drift_plan *src, drift_err *err);

/* Parses a JSON plan from a file / a buffer into p (which is re-initialised:
 * p must not own anything, i.e. be fresh, zeroed or freed; on error it is
 * left initialised with the defaults). Keys absent from the file keep their
 * defaults. Dtypes are spelled bf16, fp16 or fp32 exactly. Unknown keys, wrong
 * types, unknown dtypes, duplicate keys and malformed JSON are errors
 * (DRIFT_E_INPUT) whose where is source:line:col of the offending value and
 * whose message names the field path (e.g. "param_dtype_patterns[2][1]") and
 * what was expected. Each pattern's origin is "source:line:col" of its glob. */
int drift_plan_load_file(drift_plan *p, const char *path, drift_err *err);
int drift_plan_parse_json(drift_plan *p, const char *text, size_t len, const char *source_name,
                          drift_err *err);

/* 1 if name (with leading "--") is a plan flag: --fsdp-master-dtype,
 * --fsdp-reduce-dtype, --diffusion-forward-dtype, --sglang-dit-precision,
 * --param-dtype PATTERN=DTYPE, --input-dtype KEY=VALUE, --rope-provenance P,
 * --plan-name NAME. */
int drift_plan_is_flag(const char *name);
/* Overlays one flag on p. --param-dtype appends a pattern (it overrides the
 * file's patterns, being later); --input-dtype accepts default, null/passthrough
 * or a dtype. Bad values are DRIFT_E_USAGE errors naming the flag. */
int drift_plan_apply_flag(drift_plan *p, const char *name, const char *value, drift_err *err);

/* Serialises p as compact JSON (the format of DESIGN.md s5, patterns as an
 * array of pairs, plus "buffer_provenance"; parsing it back gives p again,
 * less the patterns' origins). Returns malloc'd string owned by the caller,
 * or NULL on allocation failure. */
char *drift_plan_to_json(const drift_plan *p);

/* Bounded work for plans from strangers (docs/RELIABILITY.md, attack 12):
 * drift_plan_compile refuses more patterns, a glob with more wildcard
 * characters ('*', '?', '['), or patterns x parameters matching work (glob
 * bytes times parameters) above these, with an error naming the limit. */
#define DRIFT_PLAN_MAX_PATTERNS 1024
#define DRIFT_PLAN_MAX_WILDCARDS 64
#define DRIFT_PLAN_MATCH_BUDGET ((uint64_t)1 << 28) /* about 3 s on a slow core */

/* --- compile_param_dtype_maps ------------------------------------------- */
typedef struct drift_param_override {
    char *local_fqn;             /* owned; wrap-local FQN (root FQN in the root map) */
    size_t param_index;          /* row in the parameter table */
    drift_dtype dtype;
    size_t pattern_index;        /* the (last) pattern that assigned it */
} drift_param_override;

typedef struct drift_wrap_map {
    char *wrap;                  /* owned; wrap module FQN, "" for the root map */
    drift_param_override *entries; /* owned, in parameter-table order */
    size_t n;
} drift_wrap_map;

typedef struct drift_compiled_plan {
    drift_wrap_map *wraps;       /* owned; one per wrap of the table, call order */
    size_t n_wraps;
    drift_wrap_map root;         /* unclaimed parameters, root FQNs */
    size_t override_count;
    int64_t override_numel;
    drift_dtype *param_dtype;    /* owned; per table row: dtype in the forward */
    size_t n_params;
    char **warnings;             /* owned; human-readable warnings (not errors) */
    size_t n_warnings;
} drift_compiled_plan;

/* Compiles plan->patterns against table exactly as DESIGN.md s5: pass 1
 * expands patterns in order (later overrides earlier; a pattern matching no
 * parameter is an error naming it; an assignment equal to the forward dtype
 * compiles to nothing), pass 2 claims each parameter for the first wrap that
 * reaches it and re-keys it to its wrap-local FQN; two parameters of one wrap
 * sharing a local FQN with different dtypes ("no override" counts) are
 * rejected. A parameter's wrap is the table's params[i].wrap (the table
 * already resolved "first wrap that reaches it"). Errors are DRIFT_E_INPUT
 * with where = the offending pattern's origin. Warnings (forward dtype !=
 * rollout precision; reduce dtype bf16) go to out->warnings. out is
 * overwritten (it must not own anything) and is left zeroed on error; free it
 * with drift_compiled_plan_free. */
int drift_plan_compile(const drift_plan *plan, const drift_param_table *table,
                       drift_compiled_plan *out, drift_err *err);
void drift_compiled_plan_free(drift_compiled_plan *c);

#endif
