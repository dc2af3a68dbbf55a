/* Progress of long work on stderr (docs/cli.md "Progress"): shown only when
 * stderr is a terminal and --json is off; from the first second on a ticker
 * redraws one status line: the phase, the count, the rate and an ETA.
 * Library progress callbacks (drift_progress_fn) feed it. */
#ifndef DRIFT_CLI_PROGRESS_H
#define DRIFT_CLI_PROGRESS_H

/* Starts the line for cmd in phase ("loading", ...). Returns NULL (and
 * every call below accepts NULL) when progress is not shown. The caller owns
 * the result: drift_cli_progress_finish. */
typedef struct drift_cli_progress drift_cli_progress;
drift_cli_progress *drift_cli_progress_start(const char *cmd, const char *phase);
/* A drift_progress_fn: user is the drift_cli_progress. what names the
 * phase (a new name restarts the rate), done of total items. */
void drift_cli_progress_cb(const char *what, long done, long total, void *user);
/* Sets the phase without a count ("writing", "measuring the noise floor"). */
void drift_cli_progress_phase(drift_cli_progress *p, const char *phase);
/* Prints line above the status line (the line is redrawn below it). Lines
 * are printed even when p is NULL (on stderr), so callers need no branch. */
void drift_cli_progress_line(drift_cli_progress *p, const char *line);
/* Clears the status line, stops the ticker, frees p. */
void drift_cli_progress_finish(drift_cli_progress *p);

#endif
