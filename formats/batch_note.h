/* The batch composition of a step (docs/format.md s6): which samples a
 * forward computed, in which positions, and whether the CFG branches ran
 * joined (conditional and unconditional in one batch) or split. A producer
 * records it as one info note per micro-batch in /notes, so the schema and
 * SWMR rules stay as they are; drift invariance reads it back to reproduce
 * the rollout's batching and the trainer's. The text is
 *
 *   batch-composition v1 micro=M cfg=none|split|joined samples=S0,S1,...
 *
 * samples in batch position order (position p holds sample S_p; with CFG
 * joined the conditional rows come first, then the unconditional ones).
 * The text must fit one note (DRIFT_TRACE_NOTE_MAX - 1 = 255 bytes): 32
 * positions of ids up to 5 digits do; a longer one is refused, never cut. */
#ifndef DRIFT_FORMATS_BATCH_NOTE_H
#define DRIFT_FORMATS_BATCH_NOTE_H

#include <stddef.h>
#include <stdint.h>

#include "formats/err.h"

#define DRIFT_BATCH_NOTE_PREFIX "batch-composition v1 "
#define DRIFT_BATCH_NOTE_MAX_SAMPLES 32 /* what fits a note (DRIFT_TRACE_NOTE_MAX) */

typedef enum drift_batch_cfg {
    DRIFT_BATCH_CFG_NONE = 0,   /* no classifier-free guidance */
    DRIFT_BATCH_CFG_SPLIT = 1,  /* the two branches in separate forwards */
    DRIFT_BATCH_CFG_JOINED = 2  /* both branches in one batch */
} drift_batch_cfg;

typedef struct drift_batch_composition {
    int32_t micro_batch;
    drift_batch_cfg cfg;
    int n;                                     /* positions, 1..DRIFT_BATCH_NOTE_MAX_SAMPLES */
    int64_t samples[DRIFT_BATCH_NOTE_MAX_SAMPLES]; /* sample id at each position, >= 0 */
} drift_batch_composition;

/* "none", "split", "joined"; "?" out of range. */
const char *drift_batch_cfg_name(drift_batch_cfg c);
/* The cfg named s, or -1. */
int drift_batch_cfg_parse(const char *s);
/* Writes the note text of c into buf (bufsz >= 1). DRIFT_E_INPUT (naming the
 * field) when c is out of range or the text does not fit. */
int drift_batch_note_format(const drift_batch_composition *c, char *buf, size_t bufsz, drift_err *err);
/* 1 if text is a batch-composition note (starts with the prefix). */
int drift_batch_note_is(const char *text);
/* Parses an untrusted note text into *out. DRIFT_E_INPUT naming the field
 * and what was expected otherwise. */
int drift_batch_note_parse(const char *text, drift_batch_composition *out, drift_err *err);

#endif
