/* bench_tui: startup and refresh cost of `drift top` on a large metrics
 * trace, and the synthetic trace writer the dashboard's integration tests use.
 *
 *   bench_tui [--steps 1000] [--sites 300] [--reps 7] [--dir DIR]
 *       writes DIR/bench_tui.h5 (steps x sites metrics rows through the trace
 *       writer), then measures, each as the median of --reps runs:
 *         raw      H5Fopen + one H5Dread of the whole /metrics/rows table (baseline)
 *         reader   drift_trace_reader_open + drift_trace_read_metrics (all rows)
 *         load     drift_top_model_open: what `drift top` does before its first frame
 *         table    drift_top_table_build (sorted by mean |diff|) for step / mean / max
 *         batch    drift_top_batch_write JSON and CSV to /dev/null
 *         frame    end to end: spawn `drift top TRACE` on a 120x40 pseudo-terminal and
 *                  wait until its first full frame has been written (the footer's
 *                  last key hint); floor: spawn `drift top --help`
 *       and, with a writer process appending to a second trace under SWMR:
 *         refresh  drift_top_model_refresh + table build, with no new step and
 *                  with one new step (sites rows) committed since the last one
 *
 *   bench_tui --write-only PATH [--steps N] [--sites M] [--slow-ms K]
 *             [--guidance S] [--run-id ID] [--plan FILE] [--start-step S]
 *             [--pause-after K --gate FILE] [--ready FILE] [--late-site NAME]
 *             [--outlier F]
 *       writes a synthetic trace (Wan-like site names in execution order,
 *       deterministic values) for tests: sleeps K ms after each commit; after
 *       K steps creates --ready and waits (up to 120 s) for --gate to exist;
 *       --late-site adds one more metrics site from the step after the pause;
 *       blocks.1.norm2:out is F times worse than its neighbours (default 40).
 *
 *   bench_tui --writer-server PATH [--steps N] [--sites M]
 *       (internal) writes N steps, prints "ready", then commits one more step
 *       per "c" line read from stdin, answering "ok". */
#ifndef DRIFT_HAVE_TUI
#include <stdio.h>
int main(void) {
    fprintf(stderr, "bench_tui: this build has no dashboard (-DDRIFT_TUI=OFF)\n");
    return 77;
}
#else
#define _XOPEN_SOURCE 700 /* posix_openpt, grantpt, unlockpt, ptsname */
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <math.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "formats/trace.h"
#include "tui/batch.h"
#include "tui/model.h"

extern char **environ;

typedef struct opts {
    const char *write_only, *server, *dir, *plan_file, *ready, *gate, *late_site, *run_id;
    long steps, sites, reps, slow_ms, pause_after, start_step;
    double guidance, outlier;
} opts;

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void die(const char *what, const drift_err *e) {
    fprintf(stderr, "bench_tui: %s: %s: %s\n", what, e ? e->where : "", e ? e->msg : "");
    exit(2);
}

/* ---- synthetic run ------------------------------------------------------ */

static char **make_names(long m) {
    char **v = calloc((size_t)m, sizeof *v);
    if (!v) exit(2);
    static const char *const head[] = {"input:latents:pre_cast",
                                       "input:latents:post_cast",
                                       "input:timestep:post_cast",
                                       "input:cond:post_cast",
                                       "condition_embedder.time_embedder:out",
                                       "condition_embedder.time_proj:out",
                                       "condition_embedder.text_embedder:out",
                                       "patch_embedding:out"};
    static const char *const blk[] = {"norm1", "attn1", "norm2", "attn2", "norm3", "ffn", ""};
    static const char *const tail[] = {"norm_out:out", "proj_out:out", "output:noise_pred"};
    long nh = 8, nt = 3, i = 0;
    char buf[128];
    for (long k = 0; k < nh && i < m - (m > nt ? nt : 0); k++) v[i++] = strdup(head[k]);
    for (long b = 0; i < m - nt; b++)
        for (int k = 0; k < 7 && i < m - nt; k++) {
            if (blk[k][0])
                snprintf(buf, sizeof buf, "blocks.%ld.%s:out", b, blk[k]);
            else
                snprintf(buf, sizeof buf, "blocks.%ld:out", b);
            v[i++] = strdup(buf);
        }
    for (long k = 0; k < nt && i < m; k++) v[i++] = strdup(tail[k]);
    for (long k = 0; k < m; k++)
        if (!v[k]) exit(2);
    return v;
}

/* Deterministic metrics of site i at step s: the first three sites are
 * bitwise equal, the fourth is the first divergent one, differences grow
 * with depth, and blocks.1.norm2 (a parameter that should have stayed fp32)
 * stands out by 40x (--outlier F; 1 for a good run). */
static double g_outlier = 40.0;

static void make_row(long i, const char *name, long s, drift_trace_metric *r) {
    memset(r, 0, sizeof *r);
    r->step = s;
    r->denoise_index = -1;
    r->numel = 1280L * 64;
    r->worst_index = -1;
    r->rmse = NAN;
    r->rmse_oracle = NAN;
    if (i < 3) {
        r->cosine = 1.0;
        r->flags = DRIFT_TRACE_METRIC_BITWISE_EQUAL;
        return;
    }
    double mean = 1e-5 * (1.0 + 0.35 * (double)i) * (1.0 + 0.25 * sin(0.7 * (double)s + (double)i));
    if (strcmp(name, "blocks.1.norm2:out") == 0) mean *= g_outlier;
    r->mean_abs_diff = mean;
    r->max_abs_diff = mean * (12.0 + 3.0 * cos((double)s + (double)i));
    r->rel_max = r->max_abs_diff / (2.0 + 0.01 * (double)i);
    r->cosine = 1.0 - 0.5 * mean;
    r->rmse = mean * 1.25;
    r->max_ulp_diff = (uint64_t)(mean * 1e6) + 1;
    r->worst_index = (i * 7919 + s * 104729) % r->numel;
    if (i == 3) r->flags = DRIFT_TRACE_METRIC_FIRST_DIVERGENT;
}

static void make_step(long s, drift_trace_step_metrics *m) {
    memset(m, 0, sizeof *m);
    m->step = s;
    m->denoise_index = -1;
    m->n_pairs = 16;
    m->log_prob_mean_abs_diff = 1e-3 * (1.0 + 0.3 * sin(0.3 * (double)s));
    m->ratio_abs_minus_1 = 0.98 * m->log_prob_mean_abs_diff;
    m->approx_kl = 0.5 * m->log_prob_mean_abs_diff * m->log_prob_mean_abs_diff;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "bench_tui: cannot read %s: %s\n", path, strerror(errno));
        exit(2);
    }
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    for (;;) {
        if (!b) exit(2);
        size_t k = fread(b + n, 1, cap - n - 1, f);
        n += k;
        if (k == 0) break;
        if (n + 1 == cap) b = realloc(b, cap *= 2);
    }
    fclose(f);
    b[n] = 0;
    return b;
}

typedef struct gen {
    drift_trace_writer *w;
    char **names;
    long n_names;
    const char *late;
    int late_on;
} gen;

static void gen_open(gen *g, const char *path, const opts *o) {
    drift_err e;
    drift_err_clear(&e);
    memset(g, 0, sizeof *g);
    char *plan = o->plan_file ? slurp(o->plan_file) : NULL;
    drift_trace_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.side = DRIFT_TRACE_SIDE_TRAINER;
    meta.run_id = o->run_id ? o->run_id : "bench-tui";
    meta.world_size = 1;
    meta.family = "wan2.2:layers=42";
    meta.guidance_scale = o->guidance;
    meta.plan_json = plan ? plan
                          : "{\"name\":\"wan2_2\",\"fsdp_master_dtype\":\"fp32\",\"fsdp_reduce_dtype\":\"fp32\","
                            "\"diffusion_forward_dtype\":\"bf16\",\"sglang_dit_precision\":\"bf16\","
                            "\"param_dtype_patterns\":[[\"*.norm2.*\",\"fp32\"]]}";
    meta.producer = "bench_tui";
    if (drift_trace_writer_create(&g->w, path, &meta, &e) != DRIFT_OK) die("create", &e);
    free(plan);
    if (drift_trace_writer_start(g->w, &e) != DRIFT_OK) die("start", &e);
    g->names = make_names(o->sites);
    g->n_names = o->sites;
    g->late = o->late_site;
}

static void gen_step(gen *g, long s) {
    drift_err e;
    drift_err_clear(&e);
    drift_trace_metric r;
    for (long i = 0; i < g->n_names; i++) {
        make_row(i, g->names[i], s, &r);
        if (drift_trace_writer_add_metric(g->w, g->names[i], &r, &e) != DRIFT_OK) die("add_metric", &e);
    }
    if (g->late && g->late_on) {
        make_row(g->n_names, g->late, s, &r);
        r.flags = 0;
        if (drift_trace_writer_add_metric(g->w, g->late, &r, &e) != DRIFT_OK) die("add_metric", &e);
    }
    drift_trace_step_metrics sm;
    make_step(s, &sm);
    if (drift_trace_writer_add_step_metrics(g->w, &sm, &e) != DRIFT_OK) die("add_step_metrics", &e);
    if (drift_trace_writer_commit_step(g->w, s, 0, &e) != DRIFT_OK) die("commit", &e);
}

static void gen_close(gen *g) {
    drift_err e;
    drift_err_clear(&e);
    if (drift_trace_writer_close(g->w, &e) != DRIFT_OK) die("close", &e);
    for (long i = 0; i < g->n_names; i++) free(g->names[i]);
    free(g->names);
}

static void touch(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "bench_tui: cannot create %s: %s\n", path, strerror(errno));
        exit(2);
    }
    fclose(f);
}

static int write_only(const opts *o) {
    gen g;
    gen_open(&g, o->write_only, o);
    for (long k = 0; k < o->steps; k++) {
        long s = o->start_step + k;
        gen_step(&g, s);
        if (o->slow_ms > 0) sleep_ms(o->slow_ms);
        if (o->pause_after > 0 && k + 1 == o->pause_after) {
            if (o->ready) touch(o->ready);
            if (o->gate) {
                struct stat st;
                double t0 = mono();
                while (stat(o->gate, &st) != 0) {
                    if (mono() - t0 > 120.0) {
                        fprintf(stderr, "bench_tui: gave up waiting for %s\n", o->gate);
                        gen_close(&g);
                        return 2;
                    }
                    sleep_ms(20);
                }
            }
            g.late_on = 1;
        }
    }
    if (o->ready && o->pause_after <= 0) touch(o->ready);
    gen_close(&g);
    return 0;
}

static int writer_server(const opts *o) {
    gen g;
    gen_open(&g, o->server, o);
    long s = 0;
    for (; s < o->steps; s++) gen_step(&g, s);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (line[0] != 'c') break;
        gen_step(&g, s++);
        printf("ok\n");
        fflush(stdout);
    }
    gen_close(&g);
    return 0;
}

/* ---- measurements --------------------------------------------------------- */

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct stat_t {
    double med, min;
} stat_t;

static stat_t summarize(double *t, long n) {
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    stat_t s = {n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]), t[0]};
    return s;
}

static double raw_read(const char *path, size_t *rows_out) {
    double t0 = mono();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        fprintf(stderr, "bench_tui: H5Fopen %s failed\n", path);
        exit(2);
    }
    hid_t ds = H5Dopen2(f, "/metrics/rows", H5P_DEFAULT);
    hid_t ft = H5Dget_type(ds);
    hid_t mt = H5Tget_native_type(ft, H5T_DIR_ASCEND);
    hid_t sp = H5Dget_space(ds);
    hssize_t n = H5Sget_simple_extent_npoints(sp);
    size_t sz = H5Tget_size(mt);
    void *buf = malloc((size_t)n * sz + 1);
    if (!buf || H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
        fprintf(stderr, "bench_tui: H5Dread /metrics/rows failed\n");
        exit(2);
    }
    double t = mono() - t0;
    free(buf);
    H5Sclose(sp);
    H5Tclose(mt);
    H5Tclose(ft);
    H5Dclose(ds);
    H5Fclose(f);
    *rows_out = (size_t)n;
    return t;
}

static double reader_read(const char *path, size_t *rows_out) {
    drift_err e;
    drift_err_clear(&e);
    double t0 = mono();
    drift_trace_reader *r = NULL;
    if (drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &e) != DRIFT_OK) die("reader_open", &e);
    drift_trace_metric *rows = NULL;
    size_t n = 0;
    if (drift_trace_read_metrics(r, INT64_MIN, &rows, &n, &e) != DRIFT_OK) die("read_metrics", &e);
    double t = mono() - t0;
    free(rows);
    drift_trace_reader_close(r);
    *rows_out = n;
    return t;
}

static drift_top_model *load(const char *path, int follow, double *t) {
    drift_err e;
    drift_err_clear(&e);
    drift_top_open_opts o;
    memset(&o, 0, sizeof o);
    o.path = path;
    o.follow = follow;
    o.step_lo = INT64_MIN;
    o.step_hi = INT64_MAX;
    double t0 = mono();
    drift_top_model *m = NULL;
    if (drift_top_model_open(&m, &o, &e) != DRIFT_OK) die("model_open", &e);
    *t = mono() - t0;
    return m;
}

static double table_once(const drift_top_model *m, drift_top_agg agg) {
    drift_err e;
    drift_top_query q;
    drift_top_query_default(&q);
    drift_top_model_query_init(m, &q);
    q.agg = agg;
    q.sort = DRIFT_TOP_SORT_MEAN;
    q.descending = 1;
    drift_top_table t;
    double t0 = mono();
    if (drift_top_table_build(drift_top_model_data(m), NULL, &q, &t, &e) != DRIFT_OK) die("table_build", &e);
    double dt = mono() - t0;
    drift_top_table_free(&t);
    return dt;
}

static void self_exe(char *buf, size_t n, const char *argv0) {
    ssize_t k = readlink("/proc/self/exe", buf, n - 1);
    if (k > 0) {
        buf[k] = 0;
        return;
    }
    snprintf(buf, n, "%s", argv0);
}

/* Spawns argv on a new 120x40 pseudo-terminal and returns the seconds until
 * the output contains `until` (NULL: until the process exits); then sends q
 * and reaps it. Returns -1 on failure. */
static double pty_run(char *const argv[], const char *until) {
    int mfd = posix_openpt(O_RDWR | O_NOCTTY);
    if (mfd < 0 || grantpt(mfd) || unlockpt(mfd)) return -1;
    const char *sn = ptsname(mfd);
    if (!sn) return -1;
    struct winsize ws;
    memset(&ws, 0, sizeof ws);
    ws.ws_row = 40;
    ws.ws_col = 120;
    ioctl(mfd, TIOCSWINSZ, &ws);
    int sfd = open(sn, O_RDWR | O_NOCTTY);
    if (sfd < 0) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sfd, 0);
    posix_spawn_file_actions_adddup2(&fa, sfd, 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addclose(&fa, mfd);
    char *envp[] = {"TERM=xterm-256color", "LANG=C.UTF-8", "LC_ALL=C.UTF-8", NULL};
    pid_t pid;
    double t0 = mono();
    if (posix_spawn(&pid, argv[0], &fa, NULL, argv, envp) != 0) {
        posix_spawn_file_actions_destroy(&fa);
        close(sfd);
        close(mfd);
        return -1;
    }
    posix_spawn_file_actions_destroy(&fa);
    close(sfd);
    static char buf[1 << 20];
    size_t n = 0, ul = until ? strlen(until) : 0;
    double t = -1;
    while (mono() - t0 < 30.0) {
        struct pollfd pf = {mfd, POLLIN, 0};
        if (poll(&pf, 1, 100) <= 0) continue;
        ssize_t k = read(mfd, buf + n, sizeof buf - 1 - n);
        if (k <= 0) { /* the process is gone (EIO on a closed pty) */
            if (!until) t = mono() - t0;
            break;
        }
        n += (size_t)k;
        buf[n] = 0;
        if (until && n >= ul) {
            size_t from = n - (size_t)k >= ul ? n - (size_t)k - ul + 1 : 0;
            for (size_t i = from; i + ul <= n; i++)
                if (memcmp(buf + i, until, ul) == 0) {
                    t = mono() - t0;
                    break;
                }
        }
        if (t >= 0) break;
        if (n + 1 >= sizeof buf) n = 0;
    }
    if (write(mfd, "q", 1) != 1) kill(pid, SIGTERM);
    int status;
    waitpid(pid, &status, 0);
    close(mfd);
    return t;
}

static int bench(const opts *o, const char *argv0) {
    char path[1024], live[1024];
    const char *dir = o->dir ? o->dir : "/tmp";
    snprintf(path, sizeof path, "%s/bench_tui.h5", dir);
    snprintf(live, sizeof live, "%s/bench_tui_live.h5", dir);
    long R = o->reps > 0 ? o->reps : 7;
    double *t = calloc((size_t)R, sizeof *t);
    if (!t) return 2;

    printf("bench_tui: %ld steps x %ld sites = %ld metrics rows, %ld reps (median, min)\n", o->steps, o->sites,
           o->steps * o->sites, R);
    double t0 = mono();
    {
        gen g;
        gen_open(&g, path, o);
        for (long s = 0; s < o->steps; s++) gen_step(&g, s);
        gen_close(&g);
    }
    double t_write = mono() - t0;
    struct stat st;
    stat(path, &st);
    printf("  write trace          %9.2f ms   (%s, %.1f MiB)\n", t_write * 1e3, path, (double)st.st_size / (1 << 20));

    size_t rows = 0, rows2 = 0;
    for (long k = 0; k < R; k++) t[k] = raw_read(path, &rows);
    stat_t s_raw = summarize(t, R);
    printf("  raw H5Dread rows     %9.2f ms   min %.2f   (%zu rows, baseline)\n", s_raw.med * 1e3, s_raw.min * 1e3,
           rows);
    for (long k = 0; k < R; k++) t[k] = reader_read(path, &rows2);
    stat_t s_rd = summarize(t, R);
    printf("  reader open+metrics  %9.2f ms   min %.2f   (%zu rows)  %.2fx raw\n", s_rd.med * 1e3, s_rd.min * 1e3,
           rows2, s_rd.med / s_raw.med);
    drift_top_model *m = NULL;
    for (long k = 0; k < R; k++) {
        drift_top_model_close(m);
        m = load(path, 0, &t[k]);
    }
    stat_t s_ld = summarize(t, R);
    printf("  model load (startup) %9.2f ms   min %.2f   %.2fx raw\n", s_ld.med * 1e3, s_ld.min * 1e3,
           s_ld.med / s_raw.med);
    static const char *const an[3] = {"step", "mean", "max"};
    for (int a = 0; a < 3; a++) {
        for (long k = 0; k < R; k++) t[k] = table_once(m, (drift_top_agg)a);
        stat_t s_tb = summarize(t, R);
        printf("  table build agg=%-4s %9.3f ms   min %.3f\n", an[a], s_tb.med * 1e3, s_tb.min * 1e3);
    }
    FILE *null = fopen("/dev/null", "w");
    for (int f = 0; f < 2 && null; f++) {
        drift_top_query q;
        drift_top_query_default(&q);
        drift_top_model_query_init(m, &q);
        for (long k = 0; k < R; k++) {
            drift_err e;
            double b0 = mono();
            if (drift_top_batch_write(m, &q, f ? DRIFT_TOP_FORMAT_CSV : DRIFT_TOP_FORMAT_JSON, null, &e) != DRIFT_OK)
                die("batch", &e);
            t[k] = mono() - b0;
        }
        stat_t s_b = summarize(t, R);
        printf("  batch %-4s           %9.2f ms   min %.2f\n", f ? "csv" : "json", s_b.med * 1e3, s_b.min * 1e3);
    }
    if (null) fclose(null);
    drift_top_model_close(m);

    /* end to end: the real binary on a pseudo-terminal */
    char exe0[1024], drift_path[1100];
    self_exe(exe0, sizeof exe0, argv0);
    char *slash = strrchr(exe0, '/');
    if (slash) *slash = 0;
    snprintf(drift_path, sizeof drift_path, "%s/drift", slash ? exe0 : ".");
    if (access(drift_path, X_OK) == 0) {
        char *help_argv[] = {drift_path, "top", "--help", NULL};
        char *top_argv[] = {drift_path, "top", path, NULL};
        long okk = 0;
        for (long k = 0; k < R; k++) {
            t[k] = pty_run(help_argv, NULL);
            okk += t[k] >= 0;
        }
        stat_t s_help = summarize(t, R);
        for (long k = 0; k < R; k++) {
            t[k] = pty_run(top_argv, "chart");
            okk += t[k] >= 0;
        }
        stat_t s_frame = summarize(t, R);
        if (okk == 2 * R) {
            printf("  first frame (e2e)    %9.2f ms   min %.2f   (%s top on a 120x40 pty)\n", s_frame.med * 1e3,
                   s_frame.min * 1e3, drift_path);
            printf("  process floor        %9.2f ms   min %.2f   (drift top --help)\n", s_help.med * 1e3,
                   s_help.min * 1e3);
        } else {
            printf("  first frame (e2e)    skipped: no pseudo-terminal here\n");
        }
    } else {
        printf("  first frame (e2e)    skipped: %s not built\n", drift_path);
    }

    /* live: a writer process appends one step at a time under SWMR */
    char exe[1024];
    self_exe(exe, sizeof exe, argv0);
    char steps_s[32], sites_s[32];
    snprintf(steps_s, sizeof steps_s, "%ld", o->steps);
    snprintf(sites_s, sizeof sites_s, "%ld", o->sites);
    int to_child[2], from_child[2];
    if (pipe(to_child) || pipe(from_child)) return 2;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to_child[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from_child[1], 1);
    posix_spawn_file_actions_addclose(&fa, to_child[1]);
    posix_spawn_file_actions_addclose(&fa, from_child[0]);
    char *cargv[] = {exe, "--writer-server", live, "--steps", steps_s, "--sites", sites_s, NULL};
    pid_t pid;
    if (posix_spawn(&pid, exe, &fa, NULL, cargv, environ) != 0) {
        fprintf(stderr, "bench_tui: cannot start the writer process\n");
        return 2;
    }
    posix_spawn_file_actions_destroy(&fa);
    close(to_child[0]);
    close(from_child[1]);
    FILE *cin = fdopen(to_child[1], "w"), *cout = fdopen(from_child[0], "r");
    char line[64];
    if (!fgets(line, sizeof line, cout) || strncmp(line, "ready", 5) != 0) {
        fprintf(stderr, "bench_tui: writer process did not start\n");
        return 2;
    }
    double t_live = 0;
    m = load(live, 1, &t_live);
    printf("  model load (follow)  %9.2f ms   (SWMR read of the live file)\n", t_live * 1e3);
    long NR = R * 3;
    double *t2 = calloc((size_t)NR, sizeof *t2);
    if (!t2) return 2;
    drift_err e;
    for (long k = 0; k < NR; k++) {
        int64_t nn = 0;
        double r0 = mono();
        if (drift_top_model_refresh(m, &nn, &e) != DRIFT_OK) die("refresh", &e);
        double tb = table_once(m, DRIFT_TOP_AGG_STEP);
        (void)tb;
        t2[k] = mono() - r0;
        if (nn != 0) {
            fprintf(stderr, "bench_tui: unexpected new steps\n");
            return 2;
        }
    }
    stat_t s_idle = summarize(t2, NR);
    printf("  refresh, no new step %9.3f ms   min %.3f   (refresh + table build)\n", s_idle.med * 1e3,
           s_idle.min * 1e3);
    for (long k = 0; k < NR; k++) {
        fputs("c\n", cin);
        fflush(cin);
        if (!fgets(line, sizeof line, cout) || strncmp(line, "ok", 2) != 0) {
            fprintf(stderr, "bench_tui: writer process stopped\n");
            return 2;
        }
        int64_t nn = 0;
        double r0 = mono();
        if (drift_top_model_refresh(m, &nn, &e) != DRIFT_OK) die("refresh", &e);
        table_once(m, DRIFT_TOP_AGG_STEP);
        t2[k] = mono() - r0;
        if (nn != 1) {
            fprintf(stderr, "bench_tui: refresh saw %lld new steps, expected 1\n", (long long)nn);
            return 2;
        }
    }
    stat_t s_new = summarize(t2, NR);
    printf("  refresh, 1 new step  %9.3f ms   min %.3f   (%ld rows ingested + table build; %zu steps now)\n",
           s_new.med * 1e3, s_new.min * 1e3, o->sites, drift_top_data_n_steps(drift_top_model_data(m)));
    drift_top_model_close(m);
    fclose(cin);
    int status = 0;
    waitpid(pid, &status, 0);
    fclose(cout);
    free(t);
    free(t2);
    unlink(live);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 2;
}

static long parse_long(const char *s, const char *name) {
    char *e = NULL;
    long v = strtol(s, &e, 10);
    if (!e || *e || e == s) {
        fprintf(stderr, "bench_tui: %s: expected an integer, got \"%s\"\n", name, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv) {
    opts o;
    memset(&o, 0, sizeof o);
    o.steps = 1000;
    o.sites = 300;
    o.reps = 7;
    o.guidance = 1.0;
    o.outlier = 40.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VAL()                                                        \
    do {                                                             \
        if (!v) {                                                    \
            fprintf(stderr, "bench_tui: %s needs a value\n", a);     \
            return 2;                                                \
        }                                                            \
        i++;                                                         \
    } while (0)
        if (strcmp(a, "--write-only") == 0) { VAL(); o.write_only = v; }
        else if (strcmp(a, "--writer-server") == 0) { VAL(); o.server = v; }
        else if (strcmp(a, "--dir") == 0) { VAL(); o.dir = v; }
        else if (strcmp(a, "--plan") == 0) { VAL(); o.plan_file = v; }
        else if (strcmp(a, "--ready") == 0) { VAL(); o.ready = v; }
        else if (strcmp(a, "--gate") == 0) { VAL(); o.gate = v; }
        else if (strcmp(a, "--late-site") == 0) { VAL(); o.late_site = v; }
        else if (strcmp(a, "--run-id") == 0) { VAL(); o.run_id = v; }
        else if (strcmp(a, "--steps") == 0) { VAL(); o.steps = parse_long(v, a); }
        else if (strcmp(a, "--sites") == 0) { VAL(); o.sites = parse_long(v, a); }
        else if (strcmp(a, "--reps") == 0) { VAL(); o.reps = parse_long(v, a); }
        else if (strcmp(a, "--slow-ms") == 0) { VAL(); o.slow_ms = parse_long(v, a); }
        else if (strcmp(a, "--pause-after") == 0) { VAL(); o.pause_after = parse_long(v, a); }
        else if (strcmp(a, "--start-step") == 0) { VAL(); o.start_step = parse_long(v, a); }
        else if (strcmp(a, "--guidance") == 0) { VAL(); o.guidance = strtod(v, NULL); }
        else if (strcmp(a, "--outlier") == 0) { VAL(); o.outlier = strtod(v, NULL); }
        else if (strcmp(a, "--help") == 0) {
            printf("usage: bench_tui [--steps N] [--sites M] [--reps R] [--dir DIR]\n"
                   "       bench_tui --write-only PATH [--steps N] [--sites M] [--slow-ms K] [--guidance S]\n"
                   "                 [--run-id ID] [--plan FILE] [--start-step S] [--pause-after K --gate FILE]\n"
                   "                 [--ready FILE] [--late-site NAME] [--outlier F]\n");
            return 0;
        } else {
            fprintf(stderr, "bench_tui: unknown argument %s\n", a);
            return 2;
        }
#undef VAL
    }
    if (o.steps < 0 || o.sites < 1 || o.sites > 100000) {
        fprintf(stderr, "bench_tui: --steps >= 0 and --sites in 1..100000\n");
        return 2;
    }
    g_outlier = o.outlier;
    if (o.write_only) return write_only(&o);
    if (o.server) return writer_server(&o);
    return bench(&o, argv[0]);
}
#endif
