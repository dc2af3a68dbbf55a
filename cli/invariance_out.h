/* drift invariance's output: the per-configuration table with the summary
 * line, or one JSON document (docs/invariance.md lists its fields). */
#ifndef DRIFT_CLI_INVARIANCE_OUT_H
#define DRIFT_CLI_INVARIANCE_OUT_H

#include <stdio.h>

#include "replay/drive/invariance.h"

/* Writes rep as text to f (borrowed). */
void drift_invariance_print_text(const drift_invariance_report *rep, FILE *f);
/* Writes rep as one JSON document and a newline; DRIFT_E_NOMEM on failure. */
int drift_invariance_print_json(const drift_invariance_report *rep, FILE *f);

#endif
