/* Internal to replay/exec: the body of a drift_exec_snapshot (exec.h), the
 * host copies of the values a run holds at a node boundary. Filled by the
 * run loop (exec.c), read back by a resumed run. */
#ifndef DRIFT_REPLAY_EXEC_SNAPSHOT_H
#define DRIFT_REPLAY_EXEC_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "formats/dtype.h"
#include "replay/exec/exec.h"

struct drift_exec_snapshot {
    int k;              /* boundary: the values held are < k */
    int count;
    int *ids;           /* ascending value ids */
    drift_dtype *dtype; /* each value's stored dtype in the captured run */
    int64_t *numel;
    float **f32;        /* per value: fp32 values (float dtypes but fp64), or NULL */
    double **f64;       /* per value: exact values of a wide dtype (fp64, integers), or NULL */
    size_t bytes;
};

/* Allocates a snapshot for count values at boundary k (arrays zeroed); NULL when out of memory. */
drift_exec_snapshot *drift_exec_snapshot_alloc(int k, int count);
/* Index of value id in s, or -1. */
int drift_exec_snapshot_find(const drift_exec_snapshot *s, int id);

#endif
