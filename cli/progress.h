/* One progress line on stderr for long work (replay, compare, bisect),
 * rewritten in place with \r: what, count, rate and time left. The commands
 * install it only when stderr is a terminal and not with --json
 * (drift_cli_progress_enabled). */
#ifndef DRIFT_CLI_PROGRESS_H
#define DRIFT_CLI_PROGRESS_H

#include <time.h>

typedef struct drift_cli_progress {
    struct timespec t0;          /* when the work started */
    int open;                    /* a line is on screen, not yet ended */
} drift_cli_progress;

/* Starts the clock. */
void drift_cli_progress_init(drift_cli_progress *p);
/* drift_progress_fn for a known total (user = drift_cli_progress *):
 * "replay: step 3/8, 2.5 steps/s, 2 s left"; the line ends at done == total. */
void drift_cli_progress_steps(const char *what, long done, long total, void *user);
/* The same for an upper bound (bisect's probes): "bisect probe 3 (of at
 * most 18), 4.1 probes/s, 5.2 s so far"; no time left (the bound is loose). */
void drift_cli_progress_bound(const char *what, long done, long total, void *user);
/* Ends a line left open (NULL allowed). */
void drift_cli_progress_end(drift_cli_progress *p);

#endif
