#include "cli/progress.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli_util.h"

struct drift_cli_progress {
    pthread_t ticker;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    char cmd[32];
    char phase[128];
    long done, total;
    long base;                   /* done at the phase's first count: the rate counts from there */
    double t0, phase_t0, t_count; /* start, phase start, time of the last count */
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void fmt_secs(double s, char *buf, size_t n) {
    if (s < 0 || s != s) snprintf(buf, n, "?");
    else if (s < 60) snprintf(buf, n, "%.0fs", s);
    else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else snprintf(buf, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

/* Draws the status line (mu held). */
static void draw(drift_cli_progress *p) {
    double t = now_s();
    char el[32], eta[32];
    fmt_secs(t - p->t0, el, sizeof el);
    fprintf(stderr, "\r\033[Kdrift %s: %s", p->cmd, p->phase);
    if (p->total > 0) {
        /* rate over the items counted in this phase, as of the last count */
        double dt = p->t_count - p->phase_t0;
        fprintf(stderr, " %ld/%ld", p->done, p->total);
        if (p->done > p->base && dt > 0) {
            double rate = (double)(p->done - p->base) / dt, left = (double)(p->total - p->done) / rate - (t - p->t_count);
            fmt_secs(left > 0 ? left : 0, eta, sizeof eta);
            if (rate >= 1) fprintf(stderr, ", %.1f/s", rate);
            else fprintf(stderr, ", %.1f s each", 1.0 / rate);
            fprintf(stderr, ", ETA %s", eta);
        }
    } else if (p->done > 0) {
        fprintf(stderr, " %ld", p->done);
    }
    fprintf(stderr, " (%s elapsed)", el);
    fflush(stderr);
}

static void *tick(void *arg) {
    drift_cli_progress *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
        if (!p->stop) draw(p);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

drift_cli_progress *drift_cli_progress_start(const char *cmd, const char *phase) {
    if (!drift_cli_progress_enabled()) return NULL;
    drift_cli_progress *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    snprintf(p->cmd, sizeof p->cmd, "%s", cmd);
    snprintf(p->phase, sizeof p->phase, "%s", phase);
    p->t0 = p->phase_t0 = now_s();
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_mutex_lock(&p->mu);
    draw(p);
    pthread_mutex_unlock(&p->mu);
    if (pthread_create(&p->ticker, NULL, tick, p) != 0) {
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->cv);
        free(p);
        return NULL;
    }
    return p;
}

/* Returns 1 when the phase changed. */
static int set_phase(drift_cli_progress *p, const char *phase) {
    if (strcmp(p->phase, phase) == 0) return 0;
    snprintf(p->phase, sizeof p->phase, "%s", phase);
    p->phase_t0 = p->t_count = now_s();
    p->done = p->total = p->base = 0;
    return 1;
}

void drift_cli_progress_cb(const char *what, long done, long total, void *user) {
    drift_cli_progress *p = user;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    /* the library names the phase after the command ("replay" 3 of 8): those are steps */
    if (set_phase(p, !what ? "working" : strcmp(what, p->cmd) == 0 ? "step" : what)) p->base = done;
    p->done = done;
    p->total = total;
    p->t_count = now_s();
    draw(p);
    pthread_mutex_unlock(&p->mu);
}

void drift_cli_progress_phase(drift_cli_progress *p, const char *phase) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    set_phase(p, phase);
    draw(p);
    pthread_mutex_unlock(&p->mu);
}

void drift_cli_progress_line(drift_cli_progress *p, const char *line) {
    if (!p) {
        fprintf(stderr, "%s\n", line);
        return;
    }
    pthread_mutex_lock(&p->mu);
    fprintf(stderr, "\r\033[K%s\n", line);
    draw(p);
    pthread_mutex_unlock(&p->mu);
}

void drift_cli_progress_finish(drift_cli_progress *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->ticker, NULL);
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}
