/* Models that take their samples as lists (WanAnimate2's hidden_states, ZImage's x: one tensor
 * per sample, joined into a batch inside the graph), re-batched by stacking each list into one
 * input and picking its elements back (aten_listin.c, docs/invariance.md "Captured graphs"). */
#ifndef DRIFT_REPLAY_CAPTURE_ATEN_LISTIN_H
#define DRIFT_REPLAY_CAPTURE_ATEN_LISTIN_H

#include <stddef.h>
#include <stdint.h>

#include "formats/err.h"
#include "formats/params.h" /* DRIFT_MAX_FQN */
#include "replay/capture/aten_graph.h"

/* A list of samples: user inputs NAME.0 .. NAME.(count-1) (pytree's flattening of a list
 * argument), every index once. */
typedef struct drift_aten_list {
    char name[DRIFT_MAX_FQN]; /* NAME */
    int count;
    int first;                /* the node of NAME.0 */
    int join;                 /* a cat/stack of `count` tensors along dim 0 that an element reaches (the
                                 list joined into a batch), -1: none (a list of something else) */
} drift_aten_list;

/* The lists of g's user inputs with `count` elements (count <= 0: any count), at most cap into
 * out (borrowing nothing); the number found, or -1 when out of memory. */
int drift_aten_list_find(const drift_aten_graph *g, int64_t count, drift_aten_list *out, int cap);

/* Captured graph g (parsed from its document; borrowed) with each list of samples of the recorded
 * batch rb_from (its elements joined into a batch) turned into one user input NAME of shape
 * [rb_from, ...] whose elements the graph picks back by select(NAME, 0, k) where it read NAME.k:
 * the per-sample code becomes a loop over the samples, which aten_unroll.c unrolls at each batch.
 * The document gains "list_inputs": [{"name": NAME, "node": NODE, "count": rb_from}, ...].
 * *out a new NUL-terminated document (caller frees with drift_free), or NULL when g takes no such
 * list. A list whose elements differ in shape or dtype is refused (DRIFT_E_INPUT naming g's
 * source, both elements and why). */
int drift_aten_list_stack(const drift_aten_graph *g, int64_t rb_from, char **out, size_t *out_len, drift_err *err);

#endif
