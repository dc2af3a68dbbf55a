/* Multi-device and multi-rank replay (multi.h). */
#include "replay/drive/multi.h"
#include "formats/alloc.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "replay/dist/comm.h"
#include "replay/dist/fsdp.h"
#include "replay/drive/replay_step.h"

#define MAX_DEVICES 64

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void drift_replay_devices_free(char **d, int n) {
    if (!d) return;
    for (int i = 0; i < n; i++) free(d[i]);
    free(d);
}

int drift_replay_parse_devices(const char *s, char ***out, int *n, drift_err *err) {
    *out = NULL;
    *n = 0;
    if (!s || !*s) return drift_err_set(err, DRIFT_E_USAGE, "--devices", "expected a list like cuda:0,cuda:1");
    char **d = drift_calloc(MAX_DEVICES, sizeof *d);
    if (!d) return drift_err_set(err, DRIFT_E_NOMEM, "--devices", "out of memory");
    int k = 0;
    const char *p = s;
    for (;;) {
        const char *q = strchr(p, ',');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        if (len == 0 || k == MAX_DEVICES) {
            drift_replay_devices_free(d, k);
            return drift_err_set(err, DRIFT_E_USAGE, "--devices",
                                 len == 0 ? "empty item in '%s' (expected a list like cuda:0,cuda:1)"
                                          : "more than 64 devices in '%s'", s);
        }
        d[k] = drift_malloc(len + 1);
        if (!d[k]) {
            drift_replay_devices_free(d, k);
            return drift_err_set(err, DRIFT_E_NOMEM, "--devices", "out of memory");
        }
        memcpy(d[k], p, len);
        d[k][len] = '\0';
        k++;
        if (!q) break;
        p = q + 1;
    }
    *out = d;
    *n = k;
    return DRIFT_OK;
}

/* ---- the round exchange ------------------------------------------------------ */

enum { H_VALID, H_STEP, H_ORC0, H_ORC1, H_ORC2, H_LP, H_OLD, H_NEW, H_B, H_COUNT };
enum { SI_PRESENT, SI_DTYPE, SI_ACC_DTYPE, SI_ARGMAX, SI_NUMEL, SI_NAN_T, SI_INF_T, SI_NAN_R, SI_INF_R, SI_NDIFF,
       SI_ROWS, SI_ULP_MAX, SI_ULP_COUNT, SI_ULP_NANMIS, SI_ULP_ARGMAX, SI_ULP_NUMEL, SI_ULP_ZERO, SI_COUNT };
enum { SS_ABS, SS_SQ, SS_TR, SS_TT, SS_RR, SS_ULP, SS_WORST_T, SS_WORST_R, SS_COUNT }; /* worst: SUM with -0 is a copy */
enum { SM_MAXD, SM_MAXR, SM_REL, SM_COUNT };

typedef struct layout {
    size_t ni, ns, nm;           /* per slot: int64, fp64 SUM, fp64 MAX values */
    size_t lp_off, out_off, site_s_off;
    int64_t B, out_n;
} layout;

static void make_layout(const drift_replay_shared *s, int keep_out, layout *L) {
    L->B = s->batch > 0 && s->batch <= DRIFT_REPLAY_MAX_BATCH ? s->batch : 0;
    L->out_n = keep_out ? s->out_numel : 0;
    L->ni = 1 + H_COUNT + (size_t)s->n_sites * SI_COUNT; /* [0]: error count */
    L->lp_off = 3;
    L->out_off = L->lp_off + 3 * (size_t)L->B;
    L->site_s_off = L->out_off + (size_t)L->out_n;
    L->ns = L->site_s_off + (size_t)s->n_sites * SS_COUNT;
    L->nm = (size_t)s->n_sites * SM_COUNT;
}

/* Identity of each reduction over the n slots of one exchange. */
static void fill_identity(const layout *L, size_t n, int64_t *I, double *S, double *M) {
    memset(I, 0, n * L->ni * sizeof *I);
    for (size_t i = 0; i < n * L->ns; i++) S[i] = -0.0;
    for (size_t i = 0; i < n * L->nm; i++) M[i] = -INFINITY;
}

static void pack(const drift_replay_shared *s, const layout *L, const drift_replay_step_partial *st, int64_t *I, double *S, double *M) {
    int64_t *h = I + 1;
    h[H_VALID] = 1;
    h[H_STEP] = st->step;
    for (int i = 0; i < 3; i++) {
        h[H_ORC0 + i] = st->has_orc[i];
        if (st->has_orc[i]) S[i] = st->orc[i];
    }
    h[H_LP] = st->has_lp && L->B == st->B;
    h[H_OLD] = st->has_old;
    h[H_NEW] = st->has_new;
    h[H_B] = st->B;
    if (h[H_LP])
        for (int64_t b = 0; b < L->B; b++) {
            S[L->lp_off + (size_t)b] = st->lp[b];
            S[L->lp_off + (size_t)(L->B + b)] = st->lp_old[b];
            S[L->lp_off + (size_t)(2 * L->B + b)] = st->lp_new[b];
        }
    if (L->out_n && st->out)
        for (int64_t i = 0; i < L->out_n; i++) S[L->out_off + (size_t)i] = st->out[i];
    for (int j = 0; j < s->n_sites; j++) {
        const drift_replay_site_partial *e = &st->site[j];
        if (!e->present) continue;
        int64_t *si = I + 1 + H_COUNT + (size_t)j * SI_COUNT;
        double *ss = S + L->site_s_off + (size_t)j * SS_COUNT, *sm = M + (size_t)j * SM_COUNT;
        const drift_site_acc *a = &e->acc;
        si[SI_PRESENT] = 1;
        si[SI_DTYPE] = e->dtype;
        si[SI_ACC_DTYPE] = a->dtype;
        si[SI_ARGMAX] = a->m.argmax;
        si[SI_NUMEL] = a->m.numel;
        si[SI_NAN_T] = a->m.nan_t;
        si[SI_INF_T] = a->m.inf_t;
        si[SI_NAN_R] = a->m.nan_r;
        si[SI_INF_R] = a->m.inf_r;
        si[SI_NDIFF] = a->m.n_diff;
        si[SI_ROWS] = a->rows;
        memcpy(&si[SI_ULP_MAX], &a->ulp.max_ulp, sizeof a->ulp.max_ulp);
        si[SI_ULP_COUNT] = a->ulp.count;
        si[SI_ULP_NANMIS] = a->ulp.nan_mismatch;
        si[SI_ULP_ARGMAX] = a->ulp.argmax;
        si[SI_ULP_NUMEL] = a->ulp.numel;
        si[SI_ULP_ZERO] = a->ulp.zero_ref;
        ss[SS_ABS] = a->m.sum_abs_diff;
        ss[SS_SQ] = a->m.sum_sq_diff;
        ss[SS_TR] = a->m.sum_tr;
        ss[SS_TT] = a->m.sum_tt;
        ss[SS_RR] = a->m.sum_rr;
        ss[SS_ULP] = a->ulp.sum_ulp;
        ss[SS_WORST_T] = a->worst_t;
        ss[SS_WORST_R] = a->worst_r;
        sm[SM_MAXD] = a->m.max_abs_diff;
        sm[SM_MAXR] = a->m.max_abs_ref;
        sm[SM_REL] = a->rel_max;
    }
}

static void unpack(const drift_replay_shared *s, const layout *L, const int64_t *I, const double *S, const double *M,
                   drift_replay_step_partial *st) {
    drift_replay_step_partial_reset(s, st);
    const int64_t *h = I + 1;
    st->step = h[H_STEP];
    for (int i = 0; i < 3; i++) {
        st->has_orc[i] = (int)h[H_ORC0 + i];
        if (st->has_orc[i]) st->orc[i] = S[i];
    }
    st->has_lp = (int)h[H_LP];
    st->has_old = (int)h[H_OLD];
    st->has_new = (int)h[H_NEW];
    st->B = h[H_B];
    if (st->has_lp)
        for (int64_t b = 0; b < L->B; b++) {
            st->lp[b] = (float)S[L->lp_off + (size_t)b];
            st->lp_old[b] = (float)S[L->lp_off + (size_t)(L->B + b)];
            st->lp_new[b] = (float)S[L->lp_off + (size_t)(2 * L->B + b)];
        }
    if (L->out_n && st->out)
        for (int64_t i = 0; i < L->out_n; i++) st->out[i] = (float)S[L->out_off + (size_t)i];
    for (int j = 0; j < s->n_sites; j++) {
        const int64_t *si = I + 1 + H_COUNT + (size_t)j * SI_COUNT;
        if (!si[SI_PRESENT]) continue;
        const double *ss = S + L->site_s_off + (size_t)j * SS_COUNT, *sm = M + (size_t)j * SM_COUNT;
        drift_replay_site_partial *e = &st->site[j];
        e->present = 1;
        e->dtype = (drift_dtype)si[SI_DTYPE];
        drift_site_acc *a = &e->acc;
        drift_metrics_site_init(a, (drift_dtype)si[SI_ACC_DTYPE]);
        a->m.argmax = si[SI_ARGMAX];
        a->m.numel = si[SI_NUMEL];
        a->m.nan_t = si[SI_NAN_T];
        a->m.inf_t = si[SI_INF_T];
        a->m.nan_r = si[SI_NAN_R];
        a->m.inf_r = si[SI_INF_R];
        a->m.n_diff = si[SI_NDIFF];
        a->rows = si[SI_ROWS];
        memcpy(&a->ulp.max_ulp, &si[SI_ULP_MAX], sizeof a->ulp.max_ulp);
        a->ulp.count = si[SI_ULP_COUNT];
        a->ulp.nan_mismatch = si[SI_ULP_NANMIS];
        a->ulp.argmax = si[SI_ULP_ARGMAX];
        a->ulp.numel = si[SI_ULP_NUMEL];
        a->ulp.zero_ref = si[SI_ULP_ZERO];
        a->m.sum_abs_diff = ss[SS_ABS];
        a->m.sum_sq_diff = ss[SS_SQ];
        a->m.sum_tr = ss[SS_TR];
        a->m.sum_tt = ss[SS_TT];
        a->m.sum_rr = ss[SS_RR];
        a->ulp.sum_ulp = ss[SS_ULP];
        a->worst_t = (float)ss[SS_WORST_T];
        a->worst_r = (float)ss[SS_WORST_R];
        a->m.max_abs_diff = sm[SM_MAXD];
        a->m.max_abs_ref = sm[SM_MAXR];
        a->rel_max = sm[SM_REL];
    }
}

/* ---- one worker's loop (a thread, or this rank) --------------------------------- */

typedef struct job {
    const drift_replay_shared *s;
    const char *device;
    drift_replay_worker *w;          /* owned */
    drift_comm *comm;            /* owned */
    drift_replay_merger *mg;         /* NULL: this worker does not merge */
    drift_replay_report *rep;    /* with mg: where progress and stats go */
    int fsdp;
    int rc;
    drift_err err;
    double t_steps;
    double t_warm; /* the FSDP gather and drift_replay_worker_warm, counted as setup */
    drift_fsdp_stats fsdp_stats;
} job;

/* Rounds per exchange: DRIFT_REPLAY_EXCHANGE_ROUNDS (1..4096) or 8, at most
 * the number of rounds, and at most 256 MiB of exchange buffers. The same on
 * every worker (it depends only on shared values). */
static int64_t exchange_rounds(const layout *L, int W, int64_t rounds) {
    int64_t k = 8;
    const char *e = getenv("DRIFT_REPLAY_EXCHANGE_ROUNDS");
    if (e && *e) {
        char *end = NULL;
        long v = strtol(e, &end, 10);
        if (end && *end == '\0' && v >= 1 && v <= 4096) k = v;
    }
    const double slot_bytes = 8.0 * (double)(L->ni + L->ns + L->nm);
    while (k > 1 && (double)k * W * slot_bytes > 256.0 * 1024 * 1024) k /= 2;
    if (k > rounds) k = rounds;
    return k < 1 ? 1 : k;
}

/* An error count over the group; *others: how many other workers failed. */
static int agree(job *j, int failed, int64_t *total) {
    int64_t v = failed ? 1 : 0;
    drift_err e;
    drift_err_clear(&e);
    int rc = j->comm->allreduce_i64(j->comm, &v, 1, DRIFT_COMM_SUM, &e);
    if (rc) {
        if (!j->rc) { j->rc = rc; j->err = e; }
        *total = 1;
        return rc;
    }
    *total = v;
    return DRIFT_OK;
}

static void peer_failed(job *j) {
    if (!j->rc) j->rc = drift_err_set(&j->err, DRIFT_E_IO, "replay", "another worker failed (see its message)");
}

static void run_job(job *j) {
    const drift_replay_shared *s = j->s;
    const drift_replay_opts *o = s->o;
    int W = j->comm->size, rank = j->comm->rank;
    int keep_out = o->out_path != NULL;
    int64_t total = 0;
    double tw = now_s(); /* setup from here: the FSDP gather and the warm-up */
    if (j->fsdp) {
        if (agree(j, j->rc != 0, &total) || total) { peer_failed(j); return; }
        j->rc = drift_fsdp_gather(s->m, drift_replay_worker_forward(j->w), drift_replay_worker_backend(j->w),
                                  drift_replay_worker_cache(j->w), j->comm, &j->fsdp_stats, &j->err);
        if (j->rc) return; /* a failed collective cannot be agreed on */
    }
    /* setup, not step time: parameters uploaded and cast once (the first
       step would do it; a failure here is agreed on at the first exchange) */
    if (!j->rc) j->rc = drift_replay_worker_warm(s, j->w, &j->err);
    /* every worker ends its setup here (MPI ranks finish reading the trace
       at different times; the first collective also sets up NCCL's
       connections): the steps phase starts together */
    int setup_failed = agree(j, j->rc != 0, &total) || total;
    j->t_warm = now_s() - tw;
    if (setup_failed) { peer_failed(j); return; }
    double t0 = now_s();
    layout L;
    make_layout(s, keep_out, &L);
    int64_t rounds = (s->n_sel + W - 1) / W;
    /* A round is one step per worker; K rounds share one exchange, so that a
       worker waits for the slowest only once per K steps (step times vary
       by several percent between devices). Merging slot (q, w) in q-major
       order keeps the step order of the single-device replay. */
    const int64_t K = exchange_rounds(&L, W, rounds);
    const size_t nslot = (size_t)K * (size_t)W;
    int64_t *I = drift_malloc(nslot * L.ni * sizeof *I);
    double *S = drift_malloc(nslot * L.ns * sizeof *S), *M = drift_malloc(nslot * L.nm * sizeof *M);
    drift_replay_step_partial st;
    int have_st = 0;
    if (!I || !S || !M) j->rc = drift_err_set(&j->err, DRIFT_E_NOMEM, "replay", "out of memory");
    else if (!(j->rc = drift_replay_step_partial_init(s, keep_out, &st, &j->err))) have_st = 1;
    const char *pe = getenv("DRIFT_REPLAY_PROFILE");
    int prof = pe && pe[0] == '1';
    double t_step = 0, t_xchg = 0, t_merge = 0;
    int64_t n_xchg = 0;
    for (int64_t r0 = 0; r0 < rounds; r0 += K) {
        const int64_t kr = rounds - r0 < K ? rounds - r0 : K;
        const size_t ns = (size_t)kr * (size_t)W; /* slots of this exchange */
        if (I && S && M) fill_identity(&L, ns, I, S, M);
        double pa = prof ? now_s() : 0;
        for (int64_t q = 0; q < kr; q++) {
            int64_t k = (r0 + q) * W + rank;
            if (j->rc || k >= s->n_sel) continue;
            j->rc = drift_replay_run_step(s, j->w, k, &st, &j->err);
            size_t slot = (size_t)q * (size_t)W + (size_t)rank;
            if (!j->rc && I && S && M) pack(s, &L, &st, I + slot * L.ni, S + slot * L.ns, M + slot * L.nm);
        }
        if (I) I[(size_t)rank * L.ni] = j->rc ? 1 : 0;
        double pb = prof ? now_s() : 0;
        t_step += pb - pa;
        /* everyone reaches the error count, whatever happened */
        if (agree(j, j->rc != 0 || !I || !S || !M, &total) || total) { peer_failed(j); break; }
        drift_err e;
        drift_err_clear(&e);
        int rc = j->comm->allreduce_i64(j->comm, I, ns * L.ni, DRIFT_COMM_SUM, &e);
        if (!rc) rc = j->comm->allreduce_f64(j->comm, S, ns * L.ns, DRIFT_COMM_SUM, &e);
        if (!rc) rc = j->comm->allreduce_f64(j->comm, M, ns * L.nm, DRIFT_COMM_MAX, &e);
        if (rc) { j->rc = rc; j->err = e; break; }
        double pc = prof ? now_s() : 0;
        t_xchg += pc - pb;
        n_xchg++;
        if (!j->mg) continue;
        for (size_t slot = 0; slot < ns && !rc; slot++) {
            const int64_t *Iw = I + slot * L.ni;
            if (!Iw[1 + H_VALID]) continue;
            unpack(s, &L, Iw, S + slot * L.ns, M + slot * L.nm, &st);
            if ((rc = drift_replay_merger_add(j->mg, &st, &e))) { j->rc = rc; j->err = e; break; }
            if (o->progress) o->progress("replay", (long)j->rep->n_steps, (long)s->n_sel, o->progress_user);
        }
        /* a merge failure is this worker's own: the others learn it at the next exchange */
        if (prof) t_merge += now_s() - pc;
    }
    j->t_steps = now_s() - t0;
    if (prof)
        fprintf(stderr, "replay profile (worker %d of %d): %lld rounds in %lld exchanges of up to %lld: step %.1f ms per "
                "round, exchange %.1f ms, merge %.1f ms per exchange\n",
                rank, W, (long long)rounds, (long long)n_xchg, (long long)K,
                1e3 * t_step / (double)(rounds ? rounds : 1), 1e3 * t_xchg / (double)(n_xchg ? n_xchg : 1),
                1e3 * t_merge / (double)(n_xchg ? n_xchg : 1));
    if (have_st) drift_replay_step_partial_free(&st);
    free(I);
    free(S);
    free(M);
}

/* ---- threads ---------------------------------------------------------------------- */

static void *open_main(void *arg) {
    job *j = arg;
    j->rc = drift_replay_worker_open(j->s, j->device, 1, &j->w, &j->err);
    return NULL;
}

static void *run_main(void *arg) {
    run_job(arg);
    return NULL;
}

/* Runs fn on every job, one thread each (the calling thread takes job 0). */
static void run_threads(job *jobs, int n, void *(*fn)(void *)) {
    pthread_t th[MAX_DEVICES];
    int started[MAX_DEVICES] = {0};
    for (int i = 1; i < n; i++) started[i] = pthread_create(&th[i], NULL, fn, &jobs[i]) == 0;
    for (int i = 1; i < n; i++)
        if (!started[i]) fn(&jobs[i]); /* could not start a thread: run it here (only before any collective) */
    fn(&jobs[0]);
    for (int i = 1; i < n; i++)
        if (started[i]) pthread_join(th[i], NULL);
}

static int is_cuda(const char *d) { return strncmp(d, "cuda", 4) == 0; }

static void fill_rep_stats(drift_replay_report *rep, const job *j, int W, const char *comm_kind, double t_setup) {
    rep->workers = W;
    snprintf(rep->comm, sizeof rep->comm, "%s", comm_kind);
    rep->steps_seconds = j->t_steps;
    rep->setup_seconds = t_setup + j->t_warm;
    rep->fsdp_params = j->fsdp_stats.params;
    rep->fsdp_collectives = j->fsdp_stats.collectives;
    rep->fsdp_shard_bytes = j->fsdp_stats.shard_bytes;
    rep->fsdp_gathered_bytes = j->fsdp_stats.gathered_bytes;
}

int drift_replay_multi(const drift_replay_opts *o, drift_replay_report *rep, drift_err *err) {
    double t0 = now_s();
    char **dev = NULL;
    int W = 0;
    drift_replay_shared s;
    memset(&s, 0, sizeof s);
    drift_replay_merger mg;
    memset(&mg, 0, sizeof mg);
    job jobs[MAX_DEVICES];
    memset(jobs, 0, sizeof jobs);
    int rc = drift_replay_parse_devices(o->devices, &dev, &W, err);
    if (rc) return rc;
    int n_cuda = 0;
    for (int i = 0; i < W; i++) n_cuda += is_cuda(dev[i]);
    if (n_cuda && n_cuda != W) {
        rc = drift_err_set(err, DRIFT_E_USAGE, "--devices", "mix of CUDA and host devices in '%s': give one kind", o->devices);
        goto done;
    }
    if ((rc = drift_replay_shared_open(o, &s, rep, err))) goto done;
    if ((rc = drift_replay_merger_open(&mg, &s, rep, 1, err))) goto done;
    for (int i = 0; i < W; i++) {
        jobs[i].s = &s;
        jobs[i].device = dev[i];
        jobs[i].fsdp = o->fsdp;
        drift_err_clear(&jobs[i].err);
    }
    /* Backends, readers and forwards: one thread per device, in parallel. */
    run_threads(jobs, W, open_main);
    for (int i = 0; i < W && !rc; i++)
        if (jobs[i].rc) {
            *err = jobs[i].err;
            rc = jobs[i].rc;
            drift_err_prefix(err, "worker %d (%s)", i, dev[i]);
        }
    if (rc) goto done;
    drift_replay_worker_identity(jobs[0].w, rep); /* one kind of device: the first speaks for all */
    drift_comm *comms[MAX_DEVICES] = {0};
    const char *kind = "local";
    if (n_cuda && drift_comm_have_nccl()) {
        const drift_backend *bes[MAX_DEVICES];
        for (int i = 0; i < W; i++) bes[i] = drift_replay_worker_backend(jobs[i].w);
        rc = drift_comm_nccl_group(W, bes, comms, err);
        kind = "nccl";
    } else {
        rc = drift_comm_local_group(W, comms, err);
    }
    if (rc) goto done;
    for (int i = 0; i < W; i++) jobs[i].comm = comms[i];
    jobs[0].mg = &mg;
    jobs[0].rep = rep;
    double t_setup = now_s() - t0;
    run_threads(jobs, W, run_main);
    /* the first failure in worker order; "another worker failed" only if nothing better */
    for (int pass = 0; pass < 2 && !rc; pass++)
        for (int i = 0; i < W && !rc; i++)
            if (jobs[i].rc && (pass == 1 || strstr(jobs[i].err.msg, "another worker failed") == NULL)) {
                *err = jobs[i].err;
                rc = jobs[i].rc;
                drift_err_prefix(err, "worker %d (%s)", i, dev[i]);
            }
    if (!rc) rc = drift_replay_merger_finish(&mg, err);
    fill_rep_stats(rep, &jobs[0], W, kind, t_setup);
    drift_replay_worker_fallbacks(jobs[0].w, rep); /* worker 0 speaks for all, as for the identity */
done:
    for (int i = 0; i < W; i++) {
        drift_comm_free(jobs[i].comm);
        drift_replay_worker_free(jobs[i].w);
    }
    drift_replay_merger_free(&mg);
    drift_replay_shared_free(&s);
    drift_replay_devices_free(dev, W);
    rep->seconds = now_s() - t0;
    return rc;
}

/* ---- MPI ranks -------------------------------------------------------------------- */

int drift_replay_mpi(const drift_replay_opts *o, drift_replay_report *rep, drift_err *err) {
    double t0 = now_s();
    int rank = 0, size = 1, local = 0;
    drift_mpi_world(&rank, &size, &local);
    drift_replay_shared s;
    memset(&s, 0, sizeof s);
    drift_replay_merger mg;
    memset(&mg, 0, sizeof mg);
    job j;
    memset(&j, 0, sizeof j);
    drift_err_clear(&j.err);
    char dev[64];
    const char *be = o->backend ? o->backend : "cpu";
    int auto_dev = strcmp(be, "cuda") == 0;
    if (auto_dev) snprintf(dev, sizeof dev, "cuda:%d", local);
    else snprintf(dev, sizeof dev, "%s", be);
    /* Every step below that can fail on one rank alone is followed by an
     * agreement over MPI, so that no rank waits for a failed one. */
    drift_comm *mpi = NULL;
    int rc = drift_comm_mpi(&mpi, err);
    if (rc) return rc;
    j.comm = mpi;
    j.rc = drift_replay_shared_open(o, &s, rep, &j.err);
    if (!j.rc) j.rc = drift_replay_merger_open(&mg, &s, rep, rank == 0, &j.err);
    j.s = &s;
    j.device = dev;
    j.fsdp = o->fsdp;
    if (!j.rc) j.rc = drift_replay_worker_open(&s, dev, 1, &j.w, &j.err);
    if (!j.rc) drift_replay_worker_identity(j.w, rep);
    int64_t total = 0;
    if (agree(&j, j.rc != 0, &total) || total) {
        peer_failed(&j);
        goto done;
    }
    const char *kind = "mpi";
    if (auto_dev && drift_comm_have_nccl()) {
        drift_comm *nc = NULL;
        j.rc = drift_comm_nccl_mpi(drift_replay_worker_backend(j.w), &nc, &j.err);
        if (agree(&j, j.rc != 0, &total) || total) {
            drift_comm_free(nc);
            peer_failed(&j);
            goto done;
        }
        j.comm = nc;
        kind = "nccl";
    }
    j.mg = &mg;
    j.rep = rep;
    double t_setup = now_s() - t0;
    run_job(&j);
    if (!j.rc) j.rc = drift_replay_merger_finish(&mg, &j.err);
    fill_rep_stats(rep, &j, size, kind, t_setup);
    drift_replay_worker_fallbacks(j.w, rep);
done:
    rc = j.rc;
    if (rc) {
        *err = j.err;
        drift_err_prefix(err, "rank %d (%s)", rank, dev);
    }
    if (j.comm != mpi) drift_comm_free(j.comm);
    drift_comm_free(mpi);
    drift_replay_worker_free(j.w);
    drift_replay_merger_free(&mg);
    drift_replay_shared_free(&s);
    rep->rank = rank;
    rep->seconds = now_s() - t0;
    return rc;
}
