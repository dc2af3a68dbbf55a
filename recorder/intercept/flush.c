/* Load-time setup and census output of libdrift_intercept.so.
 *
 * At load (constructor): allocate the tables (state.c), register the exit
 * flush, start the periodic flusher when DRIFT_INTERCEPT_FLUSH_S is set.
 * At flush: snapshot the tables, then write
 *   - the trace (HDF5) through libdrift_intercept_writer.so, dlopen'd from
 *     this library's directory only now, RTLD_LOCAL: the job never gets HDF5
 *     in its global symbol scope and never pays for it before exit;
 *     written to "<out>.tmp.<pid>" and renamed over <out>, so a reader
 *     never sees half a census;
 *   - a readable summary "<out>.txt" (plain stdio, no HDF5).
 * Every failure is reported once on stderr ("drift intercept: ...") and the
 * job continues. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "recorder/intercept/intercept.h"
#include "recorder/intercept/writer_api.h"

static struct {
    pthread_mutex_t mu;     /* serialises flushes */
    int final_done;
    int rank, world, local_rank;
    char out[4096];
    pthread_t flusher;
    int flusher_on;
    double period;
    pthread_mutex_t stop_mu;
    pthread_cond_t stop_cv;
    int stop;
} f = {.mu = PTHREAD_MUTEX_INITIALIZER, .stop_mu = PTHREAD_MUTEX_INITIALIZER, .stop_cv = PTHREAD_COND_INITIALIZER};

static int env_int(const char *name, int dflt) {
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    return (end == s || *end || v < -1 || v > 1 << 30) ? dflt : (int)v;
}

/* <out>: DRIFT_INTERCEPT_OUT with "{rank}" replaced by the rank; a
 * directory (existing, or ending in '/') gets the default file name; when
 * the world has several ranks and the name has no "{rank}", ".rank<R>" is
 * inserted before ".h5" so that ranks never overwrite each other. Default:
 * drift-census.rank<R>.h5 (drift-census.pid<PID>.h5 without RANK). */
static void build_out(void) {
    char dflt[64];
    if (f.rank >= 0) snprintf(dflt, sizeof dflt, "drift-census.rank%d.h5", f.rank);
    else snprintf(dflt, sizeof dflt, "drift-census.pid%ld.h5", (long)getpid());
    const char *o = getenv("DRIFT_INTERCEPT_OUT");
    if (!o || !*o) {
        snprintf(f.out, sizeof f.out, "%s", dflt);
        return;
    }
    struct stat st;
    size_t ol = strlen(o);
    if (o[ol - 1] == '/' || (stat(o, &st) == 0 && S_ISDIR(st.st_mode))) {
        snprintf(f.out, sizeof f.out, "%s%s%s", o, o[ol - 1] == '/' ? "" : "/", dflt);
        return;
    }
    const char *ph = strstr(o, "{rank}");
    char rk[32];
    snprintf(rk, sizeof rk, "%d", f.rank >= 0 ? f.rank : (int)getpid());
    if (ph) {
        snprintf(f.out, sizeof f.out, "%.*s%s%s", (int)(ph - o), o, rk, ph + 6);
    } else if (f.world > 1) {
        size_t stem = (ol > 3 && strcmp(o + ol - 3, ".h5") == 0) ? ol - 3 : ol;
        snprintf(f.out, sizeof f.out, "%.*s.rank%s%s", (int)stem, o, rk, o + stem);
    } else {
        snprintf(f.out, sizeof f.out, "%s", o);
    }
}

/* ---- readable summary ---------------------------------------------------------- */
static void write_summary(const char *path, const drift_census *c) {
    FILE *fp = fopen(path, "w");
    if (!fp) return;
    const drift_census_info *in = &c->info;
    fprintf(fp, "drift intercept census: rank %d of %d (local %d), pid %lld\n", (int)in->rank, (int)in->world_size,
            (int)in->local_rank, (long long)in->pid);
    fprintf(fp, "gemm calls %lld (%lld dropped, %lld nested skipped), collective calls %lld (%lld dropped), "
                "nvtx %s, %lld ranges\n\n",
            (long long)in->gemm_calls, (long long)in->gemm_dropped, (long long)in->nested_skipped,
            (long long)in->coll_calls, (long long)in->coll_dropped, in->nvtx_injected ? "injected" : "not injected",
            (long long)in->nvtx_ranges);
    fprintf(fp, "GEMMs (%zu rows)\n%-40s %-29s %-24s %-22s %-10s %-24s %8s\n", c->n_gemm, "RANGE", "API", "A,B->D",
            "COMPUTE", "EPILOGUE", "M,N,K x BATCH (TA TB)", "CALLS");
    for (size_t i = 0; i < c->n_gemm; i++) {
        const drift_census_gemm *g = &c->gemm[i];
        char dt[96], shp[96];
        snprintf(dt, sizeof dt, "%s,%s->%s", g->a_type, g->b_type, g->d_type);
        snprintf(shp, sizeof shp, "%lld,%lld,%lld x%lld (%s %s)", (long long)g->m, (long long)g->n, (long long)g->k,
                 (long long)g->batch, g->transa, g->transb);
        fprintf(fp, "%-40s %-29s %-24s %-22s %-10s %-24s %8lld\n", g->range[0] ? g->range : "-", g->api, dt,
                g->compute_type, g->epilogue[0] ? g->epilogue : "-", shp, (long long)g->calls);
    }
    fprintf(fp, "\ncollectives (%zu rows)\n%-40s %-14s %-8s %-6s %12s %5s %9s %8s %14s\n", c->n_coll, "RANGE", "OP",
            "DTYPE", "REDOP", "COUNT", "ROOT", "RANK/N", "CALLS", "BYTES");
    for (size_t i = 0; i < c->n_coll; i++) {
        const drift_census_coll *x = &c->coll[i];
        char rn[32];
        snprintf(rn, sizeof rn, "%d/%d", (int)x->comm_rank, (int)x->comm_nranks);
        fprintf(fp, "%-40s %-14s %-8s %-6s %12lld %5d %9s %8lld %14lld\n", x->range[0] ? x->range : "-", x->op,
                x->dtype, x->redop[0] ? x->redop : "-", (long long)x->count, (int)x->root, rn, (long long)x->calls,
                (long long)x->bytes);
    }
    if (in->notes[0]) fprintf(fp, "\nnotes:\n%s", in->notes);
    fclose(fp);
}

/* ---- the writer library ------------------------------------------------------------ */
static drift_icpt_write_fn load_writer(char *why, size_t whysz) {
    static drift_icpt_write_fn fn;
    if (fn) return fn;
    char path[4096];
    const char *env = getenv("DRIFT_INTERCEPT_WRITER");
    if (env && *env) {
        snprintf(path, sizeof path, "%s", env);
    } else {
        Dl_info di;
        if (!dladdr((const void *)&f, &di) || !di.dli_fname) {
            snprintf(why, whysz, "cannot find this library's directory (dladdr)");
            return NULL;
        }
        const char *slash = strrchr(di.dli_fname, '/');
        if (slash) snprintf(path, sizeof path, "%.*s/%s", (int)(slash - di.dli_fname), di.dli_fname, DRIFT_ICPT_WRITER_SO);
        else snprintf(path, sizeof path, "%s", DRIFT_ICPT_WRITER_SO);
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, whysz, "cannot load the census writer %.400s: %.150s", path, e ? e : "?");
        return NULL;
    }
    void *p = dlsym(h, DRIFT_ICPT_WRITE_SYM);
    memcpy(&fn, &p, sizeof fn < sizeof p ? sizeof fn : sizeof p); /* ISO C: no object -> function cast */
    if (!fn) snprintf(why, whysz, "%.400s has no %s", path, DRIFT_ICPT_WRITE_SYM);
    return fn;
}

void icpt_flush(int final) {
    static atomic_int rep_writer, rep_write, rep_rename;
    if (!icpt_enabled()) return;
    pthread_mutex_lock(&f.mu);
    if (f.final_done) {
        pthread_mutex_unlock(&f.mu);
        return;
    }
    if (final) f.final_done = 1;
    drift_census c;
    if (icpt_snapshot(&c) != 0) {
        pthread_mutex_unlock(&f.mu);
        return;
    }
    c.info.rank = f.rank;
    c.info.world_size = f.world;
    c.info.local_rank = f.local_rank;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    c.info.time_end = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    /* a process that ran no GEMM and no collective (torchrun's launcher,
     * helper processes) writes nothing */
    if (c.info.gemm_calls == 0 && c.info.coll_calls == 0) goto done;

    char txt[4200];
    snprintf(txt, sizeof txt, "%s.txt", f.out);
    write_summary(txt, &c);

    char why[600] = "";
    drift_icpt_write_fn wfn = load_writer(why, sizeof why);
    if (!wfn) {
        icpt_report_once(&rep_writer, "%s: no HDF5 census (summary in %s)", why, txt);
        goto done;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", f.out, (long)getpid());
    char err[1024] = "";
    const char *run_id = getenv("DRIFT_RUN_ID");
    if (!run_id || !*run_id) run_id = getenv("TORCHELASTIC_RUN_ID");
    if (wfn(tmp, &c, run_id ? run_id : "", err, sizeof err) != 0) {
        icpt_report_once(&rep_write, "cannot write the census %s: %s", f.out, err);
        unlink(tmp);
        goto done;
    }
    if (rename(tmp, f.out) != 0) {
        icpt_report_once(&rep_rename, "cannot rename %s to %s: %s", tmp, f.out, strerror(errno));
        unlink(tmp);
        goto done;
    }
    if (final)
        fprintf(stderr, "drift intercept: census written to %s (%zu GEMM rows, %zu collective rows; summary %s)\n",
                f.out, c.n_gemm, c.n_coll, txt);
done:
    free(c.gemm);
    free(c.coll);
    pthread_mutex_unlock(&f.mu);
}

/* ---- periodic flusher ------------------------------------------------------------- */
static void *flusher_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&f.stop_mu);
    while (!f.stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double t = (double)until.tv_sec + (double)until.tv_nsec * 1e-9 + f.period;
        until.tv_sec = (time_t)t;
        until.tv_nsec = (long)((t - (double)until.tv_sec) * 1e9);
        int rc = pthread_cond_timedwait(&f.stop_cv, &f.stop_mu, &until);
        if (f.stop) break;
        if (rc == ETIMEDOUT) {
            pthread_mutex_unlock(&f.stop_mu);
            icpt_flush(0);
            pthread_mutex_lock(&f.stop_mu);
        }
    }
    pthread_mutex_unlock(&f.stop_mu);
    return NULL;
}

static void stop_flusher(void) {
    if (!f.flusher_on) return;
    pthread_mutex_lock(&f.stop_mu);
    f.stop = 1;
    pthread_cond_signal(&f.stop_cv);
    pthread_mutex_unlock(&f.stop_mu);
    /* no join: at exit the thread may be inside a flush; icpt_flush's
     * mutex and final_done keep the two apart */
    f.flusher_on = 0;
}

static void at_exit_flush(void) {
    stop_flusher();
    icpt_flush(1);
}

__attribute__((constructor)) static void icpt_load(void) {
    icpt_state_init();
    if (!icpt_enabled()) return;
    f.rank = env_int("RANK", -1);
    f.world = env_int("WORLD_SIZE", -1);
    f.local_rank = env_int("LOCAL_RANK", -1);
    build_out();
    atexit(at_exit_flush);
    const char *p = getenv("DRIFT_INTERCEPT_FLUSH_S");
    if (p && *p) {
        char *end = NULL;
        double v = strtod(p, &end);
        if (end != p && !*end && v >= 0.1 && v <= 86400) {
            f.period = v;
            if (pthread_create(&f.flusher, NULL, flusher_main, NULL) == 0) {
                pthread_detach(f.flusher);
                f.flusher_on = 1;
            }
        } else {
            fprintf(stderr, "drift intercept: DRIFT_INTERCEPT_FLUSH_S='%s' ignored (expected 0.1..86400 seconds)\n", p);
        }
    }
}

/* Runs after atexit handlers at a normal exit (no-op then), and at dlclose. */
__attribute__((destructor)) static void icpt_unload(void) { at_exit_flush(); }
