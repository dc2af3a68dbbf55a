/* DRIFT_NODE_DUMP=DIR: replay writes the value of every "fx:NAME" site (the
 * lowering's DRIFT_NODE_SITES=1: one per node of a captured graph) under DIR,
 * for drift_recorder.node_parity, which runs each node's ATen op in torch on
 * drift's own inputs and names the nodes whose kernels differ. */
#ifndef DRIFT_REPLAY_DRIVE_NODE_DUMP_H
#define DRIFT_REPLAY_DRIVE_NODE_DUMP_H

#include <stdint.h>

#include "formats/err.h"
#include "kernels/backend.h"

/* The dump folder (DRIFT_NODE_DUMP), or NULL when off. */
const char *drift_node_dump_dir(void);
/* Appends site's values (t's logical dtype and shape; v: t widened to fp32, t->numel of them)
 * of step `step` to DIR/step<step>/: NAME.f32 (raw little-endian fp32) and a line of
 * index.tsv (name, dtype, shape). Errors name the file. */
int drift_node_dump_write(const char *site, const drift_tensor *t, const float *v, int64_t step, drift_err *err);

#endif
