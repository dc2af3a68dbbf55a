/* Structural keys of a graph's values: two values of two graphs with equal
 * keys compute the same thing from the same leaves (same op attributes,
 * dtypes, shapes and, recursively, inputs; a leaf is its kind and name).
 * Used by the device cache (exec.c) to carry values that depend only on
 * parameters and buffers from one graph to the next. */
#ifndef DRIFT_REPLAY_EXEC_EXEC_KEYS_H
#define DRIFT_REPLAY_EXEC_EXEC_KEYS_H

#include <stdint.h>

#include "replay/ir/graph.h"

/* keys[i] for every value id of g (keys holds drift_graph_count(g) entries).
 * Owner: replay/exec. */
void drift_exec_value_keys(const drift_graph *g, uint64_t *keys);

#endif
