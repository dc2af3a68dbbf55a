/* The setup-phase line of drift replay: how the parameters were read (by
 * reference: GB/s, against a sequential read of the same files when
 * DRIFT_REPLAY_PROFILE=1), casting/uploading, forward. */
#ifndef DRIFT_CLI_LOAD_REPORT_H
#define DRIFT_CLI_LOAD_REPORT_H

#include "replay/drive/replay_trace.h"

/* Prints the line on stderr when the parameters came by reference or
 * DRIFT_REPLAY_PROFILE=1; nothing otherwise. rep borrowed. */
void drift_cli_print_load(const char *cmd, const drift_replay_report *rep);

#endif
