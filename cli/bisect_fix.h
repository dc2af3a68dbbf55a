/* The fix plan of drift bisect --fix-out as the user reads it: pretty JSON
 * (one key a line, one pattern entry a line, so that an edit is a line) and
 * a line diff against the bad plan. */
#ifndef DRIFT_CLI_BISECT_FIX_H
#define DRIFT_CLI_BISECT_FIX_H

#include "formats/plan.h"

/* p as pretty JSON, newline-terminated (malloc'd; NULL when out of memory).
 * drift_plan_parse_json reads it back as p. */
char *drift_bisect_plan_pretty(const drift_plan *p);
/* A unified-style diff of text a (from) and b (to), line by line: "--- a_name",
 * "+++ b_name", then each line of b prefixed "  " (same), "- " (only in a) or
 * "+ " (only in b), unchanged runs longer than 2*context+1 lines cut to
 * "  ..." (malloc'd; "" when equal; NULL when out of memory). */
char *drift_bisect_line_diff(const char *a, const char *b, const char *a_name, const char *b_name, int context);

#endif
