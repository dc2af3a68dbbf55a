/* The setup-phase line of drift replay: how the parameters were read (by
 * reference: GB/s, against a sequential read of the same files when
 * DRIFT_REPLAY_PROFILE=1), casting/uploading, forward. With the parameters
 * kept resident (a GPU replay) reading, casting and uploading overlap: the
 * line then gives the whole pipeline's bytes, seconds and GB/s
 * ("read+cast+upload ... (X GB/s overlapped, ...)"), else the read's and the
 * cast+upload's seconds apart. */
#ifndef DRIFT_CLI_LOAD_REPORT_H
#define DRIFT_CLI_LOAD_REPORT_H

#include "replay/drive/replay_trace.h"

/* Prints the line on stderr when the parameters came by reference or
 * DRIFT_REPLAY_PROFILE=1; nothing otherwise. rep borrowed. */
void drift_cli_print_load(const char *cmd, const drift_replay_report *rep);

#endif
