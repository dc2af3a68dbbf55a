/* Captured graphs: the drift-aten-graph JSON (docs/aten-graph.md) that the
 * recorder writes from torch.export, parsed, validated, summarised and
 * lowered to drift's semantic graph IR (replay/graph.h), on which the
 * dtype-assignment pass (replay/assign.h) applies the plan with PyTorch's
 * CUDA autocast lists at the ATen level (docs/autocast.md).
 *
 * The document is untrusted: every error is DRIFT_E_INPUT (exit 2) with a
 * message naming the source, the node (name, target, module path) and what
 * was expected: an unknown op, a reference to a node that does not exist
 * (dangling) or comes later (a cycle or forward reference), a shape that
 * differs from the one the importer computes, too many nodes. */
#ifndef DRIFT_REPLAY_CAPTURE_ATEN_GRAPH_H
#define DRIFT_REPLAY_CAPTURE_ATEN_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#include "formats/err.h"
#include "replay/ir/graph.h"

#define DRIFT_ATEN_FORMAT "drift-aten-graph"
#define DRIFT_ATEN_VERSION 1
#define DRIFT_ATEN_MAX_NODES 200000 /* nodes per document (the largest DiT export has ~10^4) */

typedef struct drift_aten_graph drift_aten_graph;

/* What a graph input (placeholder) is, per the document's "inputs". */
typedef enum drift_aten_input_kind {
    DRIFT_ATEN_IN_PARAMETER = 0,
    DRIFT_ATEN_IN_BUFFER,
    DRIFT_ATEN_IN_CONSTANT,
    DRIFT_ATEN_IN_USER,
    DRIFT_ATEN_IN_COUNT
} drift_aten_input_kind;

/* Read-only view of one input; strings owned by the graph. */
typedef struct drift_aten_input {
    const char *node;     /* placeholder name */
    drift_aten_input_kind kind;
    const char *target;   /* FQN, constant name or keyword path */
    const char *role;     /* user inputs: "latents", "cond", "timestep", "other"; else NULL */
    int is_tensor;        /* 0 for non-tensor user inputs (return_dict, img_shapes...) */
} drift_aten_input;

/* 1 if text looks like a drift-aten-graph document (its "format" member),
 * without validating it. */
int drift_aten_graph_sniff(const char *text, size_t len);

/* Parses and structurally validates text[0..len): format and version,
 * node fields and types, unique names, every {"node": X} reference naming an
 * earlier node, one final output node, inputs naming placeholders.
 * source_name (NULL: "<graph>") prefixes errors. Caller owns *out
 * (drift_aten_graph_free). */
int drift_aten_graph_parse(const char *text, size_t len, const char *source_name, drift_aten_graph **out,
                           drift_err *err);
/* Frees g (NULL allowed). */
void drift_aten_graph_free(drift_aten_graph *g);

/* Summary accessors (borrowed strings, valid until g is freed). */
int drift_aten_graph_node_count(const drift_aten_graph *g);
const char *drift_aten_graph_model_class(const drift_aten_graph *g); /* "" if absent */
/* Distinct call_function targets in first-use order: n (count), each with
 * its number of nodes. */
int drift_aten_graph_op_count(const drift_aten_graph *g);
const char *drift_aten_graph_op(const drift_aten_graph *g, int i, int *nodes);
int drift_aten_graph_input_count(const drift_aten_graph *g);
const drift_aten_input *drift_aten_graph_input(const drift_aten_graph *g, int i);

/* Lowers g to a new semantic graph (caller owns *out): parameters,
 * buffers and constants become leaves (constants as buffers named
 * "constant:NAME"), the latents/cond/timestep user inputs INPUT leaves with
 * their input_policy casts (sites input:K:pre_cast / post_cast), every
 * call_function node drift ops with the dtype rule of its ATen op (autocast
 * list, promotion, explicit cast), views and in-place copy_ into views as
 * strided gathers and scatters, recorded module outputs as sites
 * "<module>:out" (docs/aten-graph.md "Sites"), the first output as the
 * graph output and site output:noise_pred. Unknown ops, unsupported
 * arguments and shape mismatches are errors naming the node. */
int drift_aten_graph_lower(const drift_aten_graph *g, drift_graph **out, drift_err *err);
/* Options of drift_aten_graph_lower_ex (all may be NULL / zero). */
typedef struct drift_aten_lower_opts {
    /* Receives one line ending in '\n' per module site "<module>:out" left
     * unmapped because nothing says which of the module's several output
     * tensors the Recorder recorded; NULL when there is nothing to say.
     * Caller owns *notes (drift_free). */
    char **notes;
    /* The trace the graph replays against: 1 and (*ndim, shape) the shape it
     * recorded for site, or 0 when it does not record the site (such a site
     * gets no note). Lets a module's outputs be told apart by shape when the
     * document does not name the first one. NULL: no trace. */
    int (*recorded_shape)(void *user, const char *site, int *ndim, int64_t *shape);
    void *user;
    /* 1: lower the subgraphs of the document's "device_values" nodes as ops
     * (DRIFT_DEVICE_VALUES=0) instead of reading each node's recorded value
     * as a buffer leaf (the default, also with o == NULL). */
    int compute_device_values;
    /* > 0: lower the graph at batch rebatch_to instead of the recorded
     * rebatch_from (`drift invariance`, docs/invariance.md): user
     * inputs whose dim 0 is rebatch_from take rebatch_to, shape arguments
     * follow; an op that cannot be re-batched is an error naming it. */
    int64_t rebatch_from, rebatch_to;
    /* Re-batching (both may be NULL): per document node, 1 + the dim that
     * holds the batch (0: none). batch_dims_out receives what the lowering
     * found (from the shapes at a batch other than the recorded one);
     * batch_dims_in imposes it, so that lowerings at every batch, the
     * recorded one included, build the same program. */
    int *batch_dims_out;
    const int *batch_dims_in;
    /* Re-batching (NULL: none): per document node, 1 where the probe
     * flipped what a size equal to the recorded batch B means: the shape
     * argument of the node spells the batch in its leading entry, which the
     * lowering then rewrites (a factory ones(B, L), x.new_zeros(B, L, D); a
     * repeat or expand of a batch-free tensor by B), or a user input's dim 0
     * (not latents, cond, timestep) is not the batch and keeps its recorded
     * size. Nothing tells that B from any other size equal to it (2 heads at
     * batch 2), so drift_aten_rebatch_probe decides it: only where the
     * program fails without the flip. */
    const unsigned char *batch_lead;
    /* Receives the node at which the lowering failed (-1: none); NULL: not asked. */
    int *failed_node;
    /* Re-batching (NULL: none): per document node, >= 0 the count a nonzero /
     * nonzero_numpy takes instead of the one its 'val' recorded (the count of
     * the batch it runs on: a MoE router's token dispatch at another batch),
     * -1 the recorded one. The values computed from such a count have a dim
     * whose size follows the data, not the batch ("ragged"): the lowering
     * accepts them, and the ops that bring them back to the batch's shape
     * (index_add into a [B*L, D] buffer) are checked as usual. */
    const int64_t *nonzero_counts;
} drift_aten_lower_opts;
/* Re-batching's probe (docs/invariance.md "Captured graphs"): lowers g with
 * options o (its rebatch and batch_* fields ignored) from its recorded batch
 * rb_from to rb_from + 1, and fills dims (node count + 1 entries, as
 * batch_dims_out) and lead (node count entries, as batch_lead) for the
 * lowerings at every batch. A default (batch_lead) is flipped only where
 * the program fails without the flip, nearest the failing node first, and
 * kept only when the failure moves later. The output must hold the batch in
 * dim 0. On failure err names the op and its module, and the node where the
 * batch dim was lost, if one was, and dims holds the first lowering's (-1 past
 * the failing node: not known). */
int drift_aten_rebatch_probe(const drift_aten_graph *g, const drift_aten_lower_opts *o, int64_t rb_from, int *dims,
                             unsigned char *lead, drift_err *err);
/* Number of nodes whose device value the document records ("device_values"). */
int drift_aten_graph_device_value_count(const drift_aten_graph *g);
/* drift_aten_graph_lower with options (o may be NULL). */
int drift_aten_graph_lower_ex(const drift_aten_graph *g, const drift_aten_lower_opts *o, drift_graph **out,
                              drift_err *err);

/* Autocast class of an ATen op at the pre-dispatch level (the table of
 * docs/autocast.md): the op's base name ("linear" for
 * "aten.linear.default"). */
typedef enum drift_aten_cast_class {
    DRIFT_ATEN_CAST_NONE = 0,   /* not on an autocast list: type promotion (or no floating output) */
    DRIFT_ATEN_CAST_LOWER,      /* runs in the autocast dtype */
    DRIFT_ATEN_CAST_FP32,       /* runs in fp32 */
    DRIFT_ATEN_CAST_PROMOTE     /* widest input type */
} drift_aten_cast_class;
drift_aten_cast_class drift_aten_autocast_class(const char *op_base);
/* The table itself, for docs and tests: entry i (NULL past the end). */
const char *drift_aten_autocast_entry(int i, drift_aten_cast_class *cls);
/* The base name of a target ("aten.linear.default" -> "linear"), into buf. */
const char *drift_aten_op_base(const char *target, char *buf, size_t bufsz);

#endif
