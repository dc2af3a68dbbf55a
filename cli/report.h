/* Printing replay results: the per-site table (text) and the JSON document
 * of drift replay / drift demo. */
#ifndef DRIFT_CLI_REPORT_H
#define DRIFT_CLI_REPORT_H

#include <stdio.h>

#include "replay/drive/replay_trace.h"

/* The per-site table in execution order, first divergent sites marked. */
void drift_report_replay_text(const drift_replay_opts *o, const drift_replay_report *rep, FILE *f);
/* One JSON document; returns the exit code (2 on allocation failure). */
int drift_report_replay_json(const drift_replay_opts *o, const drift_replay_report *rep, FILE *f);
/* Formats a metric value compactly ("0", "1.23e-03", "nan"). */
const char *drift_report_num(double v, char *buf, size_t bufsz);

#endif
