/* Graph IR of a replayed forward (DESIGN.md s4, s6 "/graph", s8).
 *
 * A graph is a list of values in execution order. A value is a leaf
 * (a parameter by root FQN, a buffer, a boundary input) or a node (one
 * drift_op of kernels/backend.h applied to earlier values). Inputs of a node
 * must refer to smaller ids, so a graph is acyclic by construction and its
 * order is an execution order.
 *
 * Two stages share this type:
 *  - a *semantic* graph (built by a family, replay/models) carries on each
 *    node a dtype rule (autocast list, type promotion, an explicit model
 *    cast, ...) and no dtypes;
 *  - an *assigned* graph (replay/assign) has every dtype explicit: leaves
 *    carry their stored dtype, nodes carry op.compute and op.out, and every
 *    cast is a CAST node (model casts, FSDP parameter casts, autocast's
 *    operand casts, promotion's widenings). The executor runs only assigned
 *    graphs and knows no rules.
 *
 * A value may be tagged as a recorded site "<module FQN>:<kind>", the name a
 * forward hook would record it under (e.g. "blocks.0.norm2:out").
 *
 * The handle is opaque; values are read through drift_graph_value (a borrowed
 * read-only view valid until the graph is modified or freed). Every adding
 * function validates: ids in range and earlier, shapes consistent with the
 * op (and checked against overflow), names unique per kind, sites unique. */
#ifndef DRIFT_REPLAY_GRAPH_H
#define DRIFT_REPLAY_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "formats/dtype.h"
#include "formats/err.h"
#include "formats/params.h"
#include "kernels/backend.h"

#define DRIFT_GRAPH_MAX_VALUES (1 << 22) /* values per graph */
#define DRIFT_GRAPH_MAX_DIM ((int64_t)1 << 40) /* one dimension */
#define DRIFT_GRAPH_MAX_NUMEL ((int64_t)1 << 48) /* elements of one value */
#define DRIFT_GRAPH_FORMAT "drift-graph"
#define DRIFT_GRAPH_VERSION 1

typedef enum drift_value_kind {
    DRIFT_VAL_PARAM = 0,   /* a parameter, named by its root FQN */
    DRIFT_VAL_BUFFER = 1,  /* a non-parameter tensor (RoPE tables) */
    DRIFT_VAL_INPUT = 2,   /* a boundary input: "latents", "cond" or "timestep" */
    DRIFT_VAL_NODE = 3     /* the output of an op */
} drift_value_kind;

/* Dtype rules of semantic nodes (docs/autocast.md has the full table). */
typedef enum drift_dtype_rule {
    DRIFT_RULE_NONE = 0,       /* no rule: assigned graphs, and leaves */
    DRIFT_RULE_AUTOCAST_LOWER, /* autocast "lower precision" list (linear, matmul, conv, SDPA) */
    DRIFT_RULE_AUTOCAST_FP32,  /* autocast "fp32" list (layer_norm, group_norm, softmax, exp, pow, rsqrt, sum) */
    DRIFT_RULE_PROMOTE,        /* type promotion of the floating inputs; inputs widened to the result */
    DRIFT_RULE_LIKE_INPUT0,    /* output has input 0's dtype, no casts (views, rope's empty_like) */
    DRIFT_RULE_RMS_NORM,       /* torch composite rms_norm: out = promote(x, weight), no casts */
    DRIFT_RULE_CAST_TO,        /* explicit .float() / .to(dtype): CAST to rule_dtype */
    DRIFT_RULE_TYPE_AS,        /* explicit .type_as(v) / .to(v.dtype): CAST to the dtype value rule_ref has */
    DRIFT_RULE_INPUT_POLICY,   /* boundary cast of input rule_ref (DRIFT_INPUT_*) by input_dtype_policy */
    DRIFT_RULE_FIXED,          /* output always rule_dtype, no casts (timestep sinusoid: fp32) */
    DRIFT_RULE_HALF_AS,        /* `if v.dtype in (fp16, bf16): x = x.to(v.dtype)` (diffusers' RMSNorm before
                                  its weight): CAST to rule_ref's dtype when that is bf16/fp16, else none */
    DRIFT_RULE_COUNT
} drift_dtype_rule;

/* Why a node exists (assigned graphs; semantic nodes are all MODEL). */
typedef enum drift_node_origin {
    DRIFT_ORIGIN_MODEL = 0,      /* written in the model code */
    DRIFT_ORIGIN_PARAM_CAST = 1, /* FSDP mixed precision: master -> forward parameter dtype */
    DRIFT_ORIGIN_AUTOCAST = 2,   /* autocast's operand cast */
    DRIFT_ORIGIN_PROMOTE = 3,    /* type promotion's (exact) widening of an operand */
    DRIFT_ORIGIN_COUNT
} drift_node_origin;

/* Read-only view of one value. Strings are owned by the graph. */
typedef struct drift_value {
    drift_value_kind kind;
    const char *name;      /* PARAM: root FQN; BUFFER: buffer name; INPUT: input name;
                              NODE: a label (e.g. "blocks.0.attn1.to_q") or NULL */
    const char *site;      /* recorded site name or NULL */
    int ndim;
    int64_t shape[DRIFT_MAX_DIMS];
    int64_t numel;
    drift_dtype dtype;     /* leaves: stored dtype (INVALID for a semantic graph's inputs: the
                              assignment decides); nodes: op.out (INVALID in a semantic graph) */
    /* NODE only */
    drift_op op;           /* kind and attributes; compute/out explicit in assigned graphs */
    int in[DRIFT_OP_MAX_IN]; /* op.n_in input ids, each < this value's id */
    drift_dtype_rule rule;
    drift_dtype rule_dtype; /* CAST_TO, FIXED */
    int rule_ref;          /* TYPE_AS: a value id < this id; INPUT_POLICY: DRIFT_INPUT_* */
    drift_node_origin origin;
    int sem_id;            /* assigned graphs: the semantic value this came from, -1 if inserted */
} drift_value;

/* Description of a node to add. Unused fields zero (use drift_node_spec_init). */
typedef struct drift_node_spec {
    drift_op op;           /* kind, n_in, attributes; compute/out only for assigned graphs */
    int in[DRIFT_OP_MAX_IN];
    drift_dtype_rule rule;
    drift_dtype rule_dtype;
    int rule_ref;
    drift_node_origin origin;
    int sem_id;            /* -1 unless the graph is assigned */
    const char *name;      /* copied; may be NULL */
    const char *site;      /* copied; may be NULL */
    int ndim;              /* output shape: required for VIEW and UNPATCHIFY (which cannot infer it); */
    int64_t shape[DRIFT_MAX_DIMS]; /* otherwise 0 = infer, or given and checked against inference */
} drift_node_spec;

typedef struct drift_graph drift_graph;

/* Zeroes s and sets sem_id = -1, rule_ref = -1, in[] = -1. */
void drift_node_spec_init(drift_node_spec *s, drift_op_kind kind);

/* Creates an empty graph. assigned = 0 for a semantic graph, 1 for one with
 * explicit dtypes. Caller owns *out (drift_graph_free). */
int drift_graph_create(int assigned, drift_graph **out, drift_err *err);
/* Frees g (NULL allowed). */
void drift_graph_free(drift_graph *g);

/* Appends a leaf (kind PARAM, BUFFER or INPUT); name copied. dtype may be
 * INVALID only for INPUT leaves of a semantic graph. Names are unique per
 * kind; INPUT names are "latents", "cond" or "timestep". *id (may be NULL)
 * receives the new id. */
int drift_graph_add_leaf(drift_graph *g, drift_value_kind kind, const char *name, drift_dtype dtype, int ndim,
                         const int64_t *shape, int *id, drift_err *err);
/* Appends a node; strings copied. Validates inputs (earlier ids), the op's
 * attributes, its rule (semantic graphs) or its dtypes (assigned graphs),
 * and infers/checks the output shape. *id (may be NULL) receives the id. */
int drift_graph_add_node(drift_graph *g, const drift_node_spec *spec, int *id, drift_err *err);
/* Tags value id as recorded site (copied; unique in the graph). */
int drift_graph_set_site(drift_graph *g, int id, const char *site, drift_err *err);
/* Marks value id as the graph's output (noise_pred). */
int drift_graph_set_output(drift_graph *g, int id, drift_err *err);
/* Free-form description of the model ("tiny-dit:layers=2,..."); copied. */
int drift_graph_set_model(drift_graph *g, const char *model, drift_err *err);

/* Accessors. drift_graph_value returns NULL for an id out of range; the
 * pointer is borrowed and valid until g is modified or freed. */
int drift_graph_count(const drift_graph *g);
const drift_value *drift_graph_value(const drift_graph *g, int id);
int drift_graph_output(const drift_graph *g);          /* -1 if unset */
int drift_graph_is_assigned(const drift_graph *g);
const char *drift_graph_model(const drift_graph *g);   /* "" if unset */
/* Id of the value tagged site, or -1. */
int drift_graph_find_site(const drift_graph *g, const char *site);
/* Id of the leaf of kind with name, or -1. */
int drift_graph_find_leaf(const drift_graph *g, drift_value_kind kind, const char *name);
/* Recorded sites in execution (id) order: fills ids[0..min(n, cap)) and
 * returns n, the number of sites. */
int drift_graph_sites(const drift_graph *g, int *ids, int cap);

/* Structural equality (kinds, names, sites, shapes, dtypes, ops and their
 * attributes, inputs, rules, origins, output, model). 1 if equal. When not
 * equal and why != NULL, writes the first difference. */
int drift_graph_equal(const drift_graph *a, const drift_graph *b, char *why, size_t whysz);

/* Names: stable spellings used in the JSON format and in messages. */
const char *drift_graph_op_name(drift_op_kind k);       /* "linear", ...; "?" if unknown */
drift_op_kind drift_graph_op_parse(const char *s);      /* DRIFT_OP_COUNT if unknown */
const char *drift_graph_rule_name(drift_dtype_rule r);  /* "autocast_lower", ... */
drift_dtype_rule drift_graph_rule_parse(const char *s); /* DRIFT_RULE_COUNT if unknown */
const char *drift_graph_kind_name(drift_value_kind k);  /* "param", "buffer", "input", "node" */
const char *drift_graph_origin_name(drift_node_origin o); /* "model", "param_cast", "autocast", "promote" */
const char *drift_graph_input_name(int input);          /* DRIFT_INPUT_* -> "latents"/"cond"/"timestep" */
int drift_graph_input_parse(const char *s);             /* -> DRIFT_INPUT_*, or -1 */

/* --- JSON (graph_json.c) -------------------------------------------------
 * The document stored in a trace's /graph:
 *   {"format": "drift-graph", "version": 1, "assigned": false, "model": "...",
 *    "output": 123,
 *    "values": [ {"id": 0, "kind": "param", "name": "...", "shape": [..], "dtype": "fp32"},
 *                {"id": 7, "kind": "node", "op": "linear", "in": [5, 0, 1], "shape": [..],
 *                 "rule": "autocast_lower", "site": "...", "name": "...",
 *                 "attrs": {...}, "dtype": "bf16", "compute": "bf16", "origin": "model",
 *                 "sem_id": 3}, ... ]}
 * Node attrs by op: layer_norm/rms_norm {eps}, affine {alpha, beta},
 * attention {scale, layout (optional, written only when 1 = [B, L, H, D])}, timestep_sinusoid {dim, max_period, flip_sin_to_cos},
 * narrow {dim, start, length}, concat {dim}, permute {perm}, patchify and
 * unpatchify {patch}. Rules with arguments: cast_to/fixed {"to": dtype},
 * type_as {"ref": id}, input_policy {"input": name}. */

/* Serialises g. Returns a malloc'd NUL-terminated string owned by the
 * caller; indent > 0 pretty-prints. NULL on allocation failure (err set). */
char *drift_graph_to_json(const drift_graph *g, int indent, drift_err *err);
/* Parses and fully validates an untrusted document (every check of the
 * adding functions, plus unknown keys, types, ids equal to positions, and the
 * JSON reader's limits). source_name prefixes positions in errors
 * ("src:line:col"). Caller owns *out. */
int drift_graph_from_json(const char *text, size_t len, const char *source_name, drift_graph **out,
                          drift_err *err);

#endif
