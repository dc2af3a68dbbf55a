/* drift top: a selection given on the command line that matches nothing
 * (--filter, --variant) is exit 2, as everywhere (docs/cli.md "Selections"). */
#ifndef DRIFT_CLI_TOP_SELECT_H
#define DRIFT_CLI_TOP_SELECT_H

#include "formats/err.h"
#include "tui/model.h"

/* Checks d (borrowed) of trace: filter (NULL: none) must pass some layer;
 * variant (NULL: not given) must have some metric row. Returns DRIFT_OK, or
 * DRIFT_E_USAGE in err naming the option and what the trace has. */
int drift_cli_top_check_selection(const drift_top_data *d, const char *trace, const char *filter, const char *variant,
                                  drift_err *err);

#endif
