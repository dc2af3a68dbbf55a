#include "replay/drive/replay_trace.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "replay/drive/multi.h"
#include "replay/drive/replay_step.h"
#include "replay/exec/params_load.h"
#include "replay/exec/params_pipeline.h"
#if defined(DRIFT_HAVE_CUDA)
#include "kernels/cuda/cuda_backend.h"
#endif

/* Device memory in use now (every process), into *peak if higher: the
 * replay's reported peak GPU memory. */
static void sample_gpu(const char *backend, int64_t *peak) {
#if defined(DRIFT_HAVE_CUDA)
    if (!backend || strncmp(backend, "cuda", 4) != 0) return;
    size_t fr = 0, tot = 0;
    if (drift_cuda_mem_info(backend[4] == ':' ? atoi(backend + 5) : 0, &fr, &tot) == 0 && (int64_t)(tot - fr) > *peak)
        *peak = (int64_t)(tot - fr);
#else
    (void)backend;
    (void)peak;
#endif
}

int drift_replay_trace(const drift_replay_opts *o, drift_replay_report *rep, drift_err *err) {
    memset(rep, 0, sizeof *rep);
    drift_sitecmp_init(&rep->cmp, 1.0);
    rep->oracle_rmse_replay = rep->oracle_rmse_trainer = rep->oracle_rmse_rollout = NAN;
    rep->workers = 1;
    rep->gpu_peak_used = -1;
    if (o->mpi) return drift_replay_mpi(o, rep, err);
    if (o->devices) return drift_replay_multi(o, rep, err);
    if (o->fsdp)
        return drift_err_set(err, DRIFT_E_USAGE, "--fsdp", "shards the parameters over several devices: give --devices (or run under MPI)");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    drift_replay_shared s;
    drift_replay_worker *w = NULL;
    drift_replay_merger mg;
    drift_replay_step_partial st;
    memset(&mg, 0, sizeof mg);
    memset(&st, 0, sizeof st);
    int rc = drift_replay_shared_open(o, &s, rep, err);
    /* on a GPU the executor's cache keeps the parameters on the device in
       their forward dtypes across steps (uploaded and cast once, in setup):
       this halves a long replay. On the CPU an upload is a copy, cheap next
       to the forward, and residency would hold every cast parameter beside
       the masters for the whole replay: no cache there. */
    const char *re = getenv("DRIFT_REPLAY_RESIDENT"); /* "1"/"0" overrides (tests: the CPU through the GPU's path) */
    const int resident = re && (re[0] == '0' || re[0] == '1') && !re[1] ? re[0] == '1'
                                                                      : o->backend && strncmp(o->backend, "cuda", 4) == 0;
    if (!rc) rc = drift_replay_worker_open(&s, o->backend, resident, &w, err);
    if (!rc) drift_replay_worker_identity(w, rep);
    /* nothing resident (or DRIFT_LOAD_OVERLAP=0): a deferred /params_ref is read plainly, before the
       cast+upload is timed; else the warm-up reads it overlapped */
    if (!rc && (s.m->pending_ref || s.m->pending_trace) && (!drift_replay_worker_cache(w) || !drift_params_overlap_enabled()))
        rc = drift_model_load_pending(s.m, err);
    struct timespec tw0, tw1;
    clock_gettime(CLOCK_MONOTONIC, &tw0);
    if (!rc) rc = drift_replay_worker_warm(&s, w, err);
    clock_gettime(CLOCK_MONOTONIC, &tw1);
    if (s.m) rep->load = s.m->load; /* a deferred reference was read in the warm-up */
    rep->warm_seconds = (double)(tw1.tv_sec - tw0.tv_sec) + 1e-9 * (double)(tw1.tv_nsec - tw0.tv_nsec);
    rep->gpu_peak_used = -1;
    sample_gpu(o->backend, &rep->gpu_peak_used);
    if (!rc) rc = drift_replay_merger_open(&mg, &s, rep, 1, err);
    if (!rc) rc = drift_replay_step_partial_init(&s, o->out_path != NULL, &st, err);
    struct timespec t_steps;
    clock_gettime(CLOCK_MONOTONIC, &t_steps);
    for (int64_t k = 0; !rc && k < s.n_sel; k++) {
        if ((rc = drift_replay_run_step(&s, w, k, &st, err))) break;
        if ((rc = drift_replay_merger_add(&mg, &st, err))) break;
        sample_gpu(o->backend, &rep->gpu_peak_used);
        if (o->progress) o->progress("replay", (long)(k + 1), (long)s.n_sel, o->progress_user);
    }
    if (!rc) rc = drift_replay_merger_finish(&mg, err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    rep->steps_seconds = (double)(t1.tv_sec - t_steps.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t_steps.tv_nsec);
    rep->setup_seconds = (double)(t_steps.tv_sec - t0.tv_sec) + 1e-9 * (double)(t_steps.tv_nsec - t0.tv_nsec);
    rep->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    drift_replay_worker_fallbacks(w, rep);
    drift_replay_step_partial_free(&st);
    drift_replay_merger_free(&mg);
    drift_replay_worker_free(w);
    drift_replay_shared_free(&s);
    return rc;
}
