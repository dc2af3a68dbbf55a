/* The executor's profiler (exec_profile.h). */
#include "replay/exec/exec_profile.h"

#include <string.h>
#include <time.h>

static double prof_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void drift_exec_profile_init(drift_exec_profile *p, int on) {
    memset(p, 0, sizeof *p);
    p->on = on != 0;
}

void drift_exec_profile_begin(drift_exec_profile *p, const drift_backend *be) {
    if (!p->on) return;
    drift_backend_sync(be, NULL);
    p->t0 = prof_now();
}

void drift_exec_profile_end(drift_exec_profile *p, const drift_backend *be, int kind) {
    if (!p->on || kind < 0 || kind > DRIFT_OP_COUNT) return;
    drift_backend_sync(be, NULL);
    p->t[kind] += prof_now() - p->t0;
    p->n[kind]++;
}

void drift_exec_profile_print(const drift_exec_profile *p, const drift_backend *be, const drift_exec_stats *st, FILE *f) {
    if (!p->on) return;
    double tot = 0;
    for (int k = 0; k <= DRIFT_OP_COUNT; k++) tot += p->t[k];
    fprintf(f, "exec profile (%s): %.3f ms in nodes\n", drift_backend_name(be), tot * 1e3);
    for (int k = 0; k <= DRIFT_OP_COUNT; k++)
        if (p->n[k])
            fprintf(f, "  %-18s %5ld x %9.3f ms  %5.1f%%\n", k == DRIFT_OP_COUNT ? "(leaves)" : drift_op_name((drift_op_kind)k),
                    p->n[k], p->t[k] * 1e3, tot > 0 ? 100 * p->t[k] / tot : 0);
    fprintf(f, "  kernels %lld; aliases: %lld identity casts, %lld views, %lld narrows; casts skipped %lld, folded %lld\n",
            (long long)st->kernels, (long long)st->identity_casts, (long long)st->views_aliased,
            (long long)st->narrows_aliased, (long long)st->casts_skipped, (long long)st->casts_folded);
}
