/* FSDP2-style parameters for a multi-device replay (--fsdp): the fp32
 * masters are sharded over the workers of a comm group as FSDP2's
 * fully_shard shards them (dim-0 chunks of ceil(d0 / W) rows, torch.chunk
 * semantics: rank r holds rows [r*c, min(d0, (r+1)*c)), possibly none, each
 * shard padded to c rows), and for each wrap (every fully_shard group in
 * call order: the blocks, then the root) each worker rounds its shard to
 * the master dtype, casts it to the parameter's forward dtype of the
 * compiled plan (cast before gather, as FSDP2's mixed precision does) and
 * all-gathers it (one collective per wrap and forward dtype). The gathered
 * parameters are put into the worker's drift_exec_cache as the values the
 * forward reads (the param_cast node, or the leaf when no cast is needed),
 * so every step's forward uses them.
 *
 * Limitation: the executor still materialises the fp32 master leaf of a
 * parameter whose cast is cached (it is that cast's input) once per device;
 * the forward reads only the gathered cast. */
#ifndef DRIFT_REPLAY_FSDP_H
#define DRIFT_REPLAY_FSDP_H

#include <stdint.h>

#include "formats/err.h"
#include "replay/dist/comm.h"
#include "replay/exec/exec.h"
#include "replay/exec/forward.h"

typedef struct drift_fsdp_stats {
    int64_t params;              /* parameters gathered */
    int64_t collectives;         /* all-gathers issued (wrap x forward dtype) */
    int64_t shard_bytes;         /* this worker's padded shard bytes, summed */
    int64_t gathered_bytes;      /* bytes received, summed */
} drift_fsdp_stats;

/* The dim-0 chunk of a parameter of dim-0 size d0 for rank of world:
 * rows [*first, *first + *rows), padded size *chunk rows. */
void drift_fsdp_chunk(int64_t d0, int rank, int world, int64_t *chunk, int64_t *first, int64_t *rows);

/* Gathers every parameter of m that f's graph uses onto be and stores it in
 * cache (which must belong to be). Every worker of comm calls this with
 * the same model and plan. stats may be NULL. */
int drift_fsdp_gather(const drift_model *m, const drift_forward *f, const drift_backend *be, drift_exec_cache *cache,
                      drift_comm *comm, drift_fsdp_stats *stats, drift_err *err);

#endif
