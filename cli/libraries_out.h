/* Printing library identities (formats/libraries.h): drift ls's and drift
 * replay's text lines and JSON objects. Every string read from a trace is
 * escaped (text: drift_libraries_escape; JSON: the JSON writer's escapes). */
#ifndef DRIFT_CLI_LIBRARIES_OUT_H
#define DRIFT_CLI_LIBRARIES_OUT_H

#include <stdio.h>

#include "formats/json.h"
#include "formats/libraries.h"

/* l as a JSON object (null for NULL): gpu_name, compute_capability ("9.0"
 * or null), cuda_driver, cuda_runtime, cublaslt, cublas, cudnn (integers, 0
 * unknown) and their text forms in "versions", torch, cublaslt_path,
 * cudnn_path (null when unknown). The value of the current key. */
void drift_cli_json_libraries(drift_json_buf *b, const drift_libraries *l);

/* The replay's comparison: "libraries": {"verdict", "message", "recorded", "replay"}
 * (rec / here NULL: null). Adds the key and its value. */
void drift_cli_json_libraries_cmp(drift_json_buf *b, const drift_libraries *rec, const drift_libraries *here);

/* Text: indent + "LABEL <description>" and, when known, the loaded paths on
 * a second line. */
void drift_cli_text_libraries(FILE *f, const char *indent, const char *label, const drift_libraries *l);

#endif
