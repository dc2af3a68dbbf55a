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

/* Reads m->pending_ref (a reference drift_model_load_trace kept, with
 * m->defer_params) as drift_model_load_params_ref does, then frees it (or
 * m->pending_trace's /params: drift_model_load_pending_values). A
 * replay that keeps nothing resident reads its deferred reference so; one
 * that does reads it overlapped with the upload (params_pipeline.h). */
int drift_model_load_pending(drift_model *m, drift_err *err);

/* The pieces both loads share. which[i] (caller-owned, m->table.n entries)
 * gets the index in ref of parameter i of m's table; a parameter ref lacks,
 * or has with another shape, is DRIFT_E_INPUT naming it. */
int drift_model_match_params_ref(const drift_model *m, const drift_params_ref *ref, size_t *which, drift_err *err);
/* A new set (caller owns *set: drift_hostset_free) with uninitialised fp32
 * storage for every parameter of m, in table order; *dst (caller frees it
 * with drift_free) gets the storage pointers in that order. */
int drift_model_alloc_params(const drift_model *m, drift_hostset **set, float ***dst, drift_err *err);

/* Fills m->params from the checkpoint at path (a directory with a sharded
 * index or one .safetensors file, or the file) and *ref (initialised, empty)
 * with its reference: every tensor's hash computed while it is read. */
int drift_model_load_checkpoint(drift_model *m, const char *path, drift_params_ref *ref, drift_err *err);

#endif
