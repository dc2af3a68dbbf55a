/* Captured graphs as replayable models (replay/forward.h's drift_model):
 * the glue between an imported torch.export graph (aten_graph.h) and the
 * record / replay / bisect drivers. A captured model's spec is
 * "graph:MODEL_CLASS" in a trace (the graph itself is the trace's /graph) and
 * "graph:PATH.json" on the command line (drift record --synthetic). Its
 * parameters are the graph's, in graph order, with no FSDP wraps (every
 * pattern compiles against root FQNs); its buffers (RoPE tables, lifted
 * constants, non-boundary user inputs) are always the recorded ones. */
#ifndef DRIFT_REPLAY_CAPTURE_ATEN_MODEL_H
#define DRIFT_REPLAY_CAPTURE_ATEN_MODEL_H

#include <stddef.h>

#include "formats/err.h"
#include "formats/trace.h"
#include "replay/capture/aten_listin.h"
#include "replay/exec/forward.h"

/* 1 if spec names a captured graph ("graph" or "graph:..."). */
int drift_capture_is_spec(const char *spec);
/* A captured model from a drift-aten-graph document (source names it in
 * errors). Caller owns *out (drift_model_free). */
int drift_capture_model_create(const char *json, size_t len, const char *source, drift_model **out, drift_err *err);
/* The same against trace r (NULL: none): a module site the document cannot
 * place is told apart by the shape r recorded for it, and m->captured_notes
 * lists the sites r records that stay unmapped (drift_aten_lower_opts). r
 * stays the caller's. */
int drift_capture_model_create_against(const char *json, size_t len, const char *source, drift_trace_reader *r,
                                       drift_model **out, drift_err *err);
/* "graph:PATH.json": reads and imports the file. */
/* base's captured graph lowered again at another batch size (docs/invariance.md
 * "Captured graphs"); parameters and buffers not loaded. An op that cannot be
 * re-batched is DRIFT_E_INPUT naming it. The recorded device values are read when
 * that re-batches, else lowered as ops (a table stored at the recorded batch: LTX-Video's
 * rope grid); the first call decides, in base, for every later one. Caller owns *out. */
int drift_capture_model_rebatch(drift_model *base, int batch, drift_model **out, drift_err *err);
/* A graph captured in dispatch mode is specialised to its data: a nonzero (a MoE router's token
 * dispatch) keeps the count it recorded, and a batch of other samples has another. Later
 * drift_capture_model_rebatch calls on base lower nonzero node `node` with `count` (the values
 * computed from it get a size that follows the data; the ops that bring them back to the batch's
 * shape are checked as usual). Replaces an earlier count of that node. */
int drift_capture_model_set_count(drift_model *base, const char *node, int64_t count, drift_err *err);
/* Forgets every count set by drift_capture_model_set_count. */
void drift_capture_model_clear_counts(drift_model *base);
/* 1 if err is a forward's failure at a nonzero whose count differs from the one it was lowered
 * with ("value V (nonzero NAME): N non-zero elements where the recording had M"): NAME into node
 * (cap bytes), N into *count. */
int drift_capture_nonzero_failure(const drift_err *err, char *node, size_t cap, int64_t *count);
int drift_capture_model_from_file(const char *path, drift_model **out, drift_err *err);
/* The lists of samples of captured model m (user inputs NAME.0 .. NAME.(count-1) joined into a
 * batch inside its graph: WanAnimate2's hidden_states; aten_listin.h), which its re-batching
 * stacks into one input "input:NAME" of shape [count, ...]: at most cap into out; the number
 * found (0 for a model that is not captured), -1 when out of memory. */
int drift_capture_model_lists(const drift_model *m, drift_aten_list *out, int cap);
/* The model of trace r: its captured /graph when family is a captured spec
 * ("graph:..."), or when family is empty and /graph is a drift-aten-graph;
 * else the hand-written family (drift_model_create). Caller owns *out. */
int drift_capture_model_for_trace(drift_trace_reader *r, const char *family, drift_model **out, drift_err *err);
/* Per-step graphs (docs/format.md 9.1; aten_steps.c). A graph traced from
 * one step's forward (the recorder's dispatch capture) is specialised to that
 * step's data; a later step whose data took another path has its own graph
 * in /graph_steps, named by its step-graph note. */
/* The model of the graph sg names (NULL or graph 0: /graph, as
 * drift_capture_model_for_trace); graph -1 (none fits the step) is
 * DRIFT_E_INPUT with the recorder's reason. Caller owns *out. */
int drift_capture_model_for_step(drift_trace_reader *r, const char *family, const drift_trace_step_graph *sg,
                                 drift_model **out, drift_err *err);
/* The one graph of the committed steps in [first, last] (-1: open end) into
 * *out (out->step: the first such step, -1 if none); DRIFT_E_INPUT naming
 * two steps when they use different graphs, or a step without one. */
int drift_capture_steps_graph(drift_trace_reader *r, int64_t first, int64_t last, drift_trace_step_graph *out,
                              drift_err *err);
/* DRIFT_E_INPUT (naming path, the step, the input, both shapes and the
 * graph) when an entry of in (boundary inputs "latents"..., user inputs
 * "input:NAME") has another shape than m's graph leaf of that name. */
int drift_capture_check_step_shapes(const drift_model *m, const drift_hostset *in, const char *path,
                                    const drift_trace_step_graph *sg, drift_err *err);
/* The refusal of a step whose graph is none (sg->graph -1). */
int drift_capture_refuse_step(const char *path, const drift_trace_step_graph *sg, drift_err *err);
/* "/graph", "/graph_steps graph K" into out. */
void drift_capture_graph_name(const drift_trace_step_graph *sg, char *out, size_t cap);
/* Fills m->buffers[RECORDED] with every buffer leaf of m's graph from the
 * trace's /buffers (fp32; a missing one is an error naming it); a user input
 * "input:NAME" not in /buffers comes from the first stored record of its
 * site input:NAME:pre_cast (each step's replaces it: drift_capture_step_inputs). */
int drift_capture_load_trace_buffers(drift_model *m, drift_trace_reader *r, drift_err *err);
/* "input:NAME" -> "input:NAME:pre_cast" into site (cap bytes): the site
 * that holds a captured graph's user input NAME per step. 0 if name is not
 * such an input (or does not fit). */
int drift_capture_step_input_site(const char *name, char *site, size_t cap);

/* 1 if m reads boundary input `input` (DRIFT_INPUT_*): every family model does; a captured
 * graph only when it has that input (DiT and other class-conditional models take no text
 * condition, so their traces have no input:cond site). Owner: aten_model.c. */
int drift_capture_model_takes_input(const drift_model *m, int input);
/* Adds to dst, under its buffer name "input:NAME", every per-step user input
 * of m's graph (masks, ids, pooled projections: not the three boundary
 * inputs) whose site input:NAME:pre_cast trace r records, from the record
 * of `step` (fp32); a site without a stored record for the step is an error
 * naming both. Inputs without a site stay the /buffers values. The executor
 * takes dst's entries in place of those buffers (exec.h). No-op for a
 * hand-written family. dst stays the caller's. */
int drift_capture_step_inputs(const drift_model *m, drift_trace_reader *r, int64_t step, drift_hostset *dst,
                              drift_err *err);
/* The same from a safetensors file: entries "buffer:NAME" for buffer NAME,
 * and "constant:NAME" / "input:NAME" under their own names. */
int drift_capture_load_safetensors_buffers(drift_model *m, const char *path, drift_err *err);
/* Seeded boundary inputs with the graph's input shapes: latents and cond
 * N(0, 1), timestep uniform in [0, 1000). Caller owns *out. */
int drift_capture_seed_inputs(const drift_model *m, uint64_t seed, drift_hostset **out, drift_err *err);

#endif
