/* Parameters from a safetensors checkpoint by reference (DESIGN.md s8,
 * docs/format.md "/params_ref"): replay reads the tensors a trace references
 * (memory-mapped, in parallel, every content hash checked), and recording
 * describes the checkpoint it loads as such a reference. */
#ifndef DRIFT_REPLAY_EXEC_PARAMS_LOAD_H
#define DRIFT_REPLAY_EXEC_PARAMS_LOAD_H

#include "formats/err.h"
#include "formats/params_ref.h"
#include "replay/exec/forward.h"

/* Fills m->params with every parameter of m's table from the checkpoint ref
 * names, read under root (NULL: m->weights_root, else ref->weights_root),
 * widened to fp32 masters. Every parameter must be in ref with the model's
 * shape; a missing or changed file, or a hash mismatch, is DRIFT_E_INPUT
 * naming the tensor and the file. Fills m->load (with a sequential-read
 * baseline when m->load_baseline). */
int drift_model_load_params_ref(drift_model *m, const drift_params_ref *ref, const char *root, drift_err *err);

/* Fills m->params from the checkpoint at path (a directory with a sharded
 * index or one .safetensors file, or the file) and *ref (initialised, empty)
 * with its reference: every tensor's hash computed while it is read. */
int drift_model_load_checkpoint(drift_model *m, const char *path, drift_params_ref *ref, drift_err *err);

#endif
