/* Loops over the samples unrolled by torch.export at the recorded batch, unrolled again at
 * another batch (aten_unroll.c, docs/invariance.md "Captured graphs"). */
#ifndef DRIFT_REPLAY_CAPTURE_ATEN_UNROLL_H
#define DRIFT_REPLAY_CAPTURE_ATEN_UNROLL_H

#include <stddef.h>
#include <stdint.h>

#include "formats/err.h"

/* The captured graph json (len bytes) with each loop over the samples of the recorded batch
 * rb_from run over rb_to samples: *out a new NUL-terminated document (caller frees with
 * drift_free) or NULL when the graph has no such loop; *n_loops the joins found (loops ended).
 * Iteration J > 0 is a copy of iteration 0 whose nodes are named NAME__bJ (NAME__cJ for a split
 * over chunks of the batch's rows: WanAnimate's B*T frames in chunks of 8; a shorter last chunk
 * gets its own row count).
 * batched (NULL: no filter): per node of the graph, 1 where the node's value holds the batch in
 * dim 0 (the re-batching probe's dims; -1: not known): a loop source must not index a tensor
 * known to hold it elsewhere or not at all. chunks_only: only splits over chunks of rows (whose
 * count may follow the batch beyond the probe's batch). */
int drift_aten_unroll(const char *json, size_t len, const char *source, int64_t rb_from, int64_t rb_to,
                      const int *batched, int chunks_only, char **out, size_t *out_len, int *n_loops, drift_err *err);

/* The name of the node a copy of iteration 0 came from, into buf: 'b' for NAME__bJ (a loop over the
 * samples: iteration J is sample J), 'c' for NAME__cJ (a split over chunks of rows: iteration J is
 * no sample), 0 if name is no copy. */
int drift_aten_unroll_template(const char *name, char *buf, size_t n);

#endif
