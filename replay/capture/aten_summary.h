/* What `drift ls` shows of a captured graph (replay/capture): node count, op
 * census, inputs, and the dtype each ATen op's results have under the
 * recorded plan (the trainer side, after the dtype-assignment pass). */
#ifndef DRIFT_REPLAY_CAPTURE_ATEN_SUMMARY_H
#define DRIFT_REPLAY_CAPTURE_ATEN_SUMMARY_H

#include <stddef.h>
#include <stdio.h>

#include "formats/err.h"
#include "formats/json.h"
#include "formats/trace.h"

/* Text, for drift ls. json: the /graph document; plan_json: the trace's plan
 * ("" or NULL: none, the census only); r: the trace it came from (NULL:
 * none), whose recorded sites the import's notes are about (module sites
 * left unmapped: drift_capture_model_create_against). A graph that does not
 * import prints its census and the import error instead of the dtype table. */
int drift_capture_summary_print(FILE *out, const char *json, size_t len, const char *source, const char *plan_json,
                                drift_trace_reader *r, drift_err *err);
/* The same as one JSON value (an object) appended to b. */
int drift_capture_summary_json(drift_json_buf *b, const char *json, size_t len, const char *source,
                               const char *plan_json, drift_trace_reader *r, drift_err *err);

#endif
