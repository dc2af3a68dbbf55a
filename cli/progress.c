/* The progress line of long work (cli/progress.h). */
#include "cli/progress.h"

#include <stdio.h>

static double elapsed(const drift_cli_progress *p) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - p->t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - p->t0.tv_nsec);
}

void drift_cli_progress_init(drift_cli_progress *p) {
    clock_gettime(CLOCK_MONOTONIC, &p->t0);
    p->open = 0;
}

void drift_cli_progress_steps(const char *what, long done, long total, void *user) {
    drift_cli_progress *p = user;
    double el = elapsed(p);
    double rate = el > 0 ? (double)done / el : 0;
    fprintf(stderr, "\r%s: step %ld/%ld", what, done, total);
    if (rate > 0) fprintf(stderr, ", %.3g steps/s, %.0f s left ", rate, (double)(total - done) / rate);
    p->open = 1;
    if (done >= total) {
        fputc('\n', stderr);
        p->open = 0;
    }
    fflush(stderr);
}

void drift_cli_progress_bound(const char *what, long done, long total, void *user) {
    drift_cli_progress *p = user;
    double el = elapsed(p);
    fprintf(stderr, "\r%s %ld (of at most %ld), %.3g probes/s, %.1f s so far ", what, done, total,
            el > 0 ? (double)done / el : 0.0, el);
    p->open = 1;
    fflush(stderr);
}

void drift_cli_progress_end(drift_cli_progress *p) {
    if (p && p->open) fputc('\n', stderr);
    if (p) p->open = 0;
}
