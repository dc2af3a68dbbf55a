/* Crash-consistency trials of the trace writer (formats/trace.h), DESIGN.md s6:
 * "After a crash, readers in SWMR mode still read every committed step;
 * drift check --repair restores a killed file for ordinary readers, losing
 * nothing committed."
 *
 *   kill_trials [--trials N] [--disk-full N] [--seed S] [--dir DIR] [--max-ms MS] [--keep] [--keep-failing]
 *
 * Kill trials (N, default 200): a child process records steps as fast as it
 * can (two sites, two micro-batches, a metric and a note per step) and reports
 * each step on a pipe once drift_trace_writer_commit_step has returned. The
 * parent SIGKILLs it after a random delay (0..max-ms). Every other trial a
 * follow-mode reader (DRIFT_TRACE_OPEN_FOLLOW) polls the file while it is
 * being written and verifies every step it sees. After the kill the parent
 *   1. opens the killed file as is (SWMR fallback) and verifies,
 *   2. runs drift_trace_check, then drift_trace_repair,
 *   3. opens it again (must now be clean), verifies, and checks again.
 * "Verifies" = every step the child reported committed is present, every
 * committed step has exactly its records, and every stored value is the
 * deterministic value written. A step whose commit reached the file but
 * whose report did not reach the pipe is fine (more, never fewer).
 *
 * Disk-full trials (N, default 20): the same writer under RLIMIT_FSIZE (a
 * random limit between 24 KiB and 2 MiB, SIGXFSZ ignored): writes beyond it
 * fail with EFBIG, as on a full disk. The writer must report an error (not
 * crash); then the file is verified, repaired and verified as above.
 *
 * Prints one line per failure and a summary; exits 1 if any trial lost a
 * committed step, crashed or failed a check. Build: scripts/reliability.sh
 * (clang/gcc with ASan+UBSan, no libFuzzer). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "formats/trace.h"

#define SITE0_N 64          /* fp32 [64] */
#define SITE1_R 4           /* bf16 [4, 8] */
#define SITE1_C 8
#define MICROBATCHES 2
#define MAX_STEPS 1000000

/* libhdf5 (1.10) leaks a few cache entries when it fails to open a damaged
 * file; not drift's. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libhdf5\n"; }

static unsigned long long g_rng = 88172645463325252ull;
static unsigned long long rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static float value(int64_t step, int mb, int site, int i) {
    return (float)((step * 131 + mb * 17 + site * 7 + i) % 1000) * 0.25f - 100.0f;
}

/* ---- the writer (child) ------------------------------------------------------- */

static void report(int fd, int64_t v) {
    ssize_t w = write(fd, &v, sizeof v);
    (void)w;
}

/* Records steps until killed (or until a write fails: disk full). Returns
 * the exit code: 0 = stopped by an error reported cleanly (disk full),
 * 3 = an unexpected status. */
static int writer_main(const char *path, int fd) {
    drift_err err;
    drift_err_clear(&err);
    drift_trace_meta m;
    memset(&m, 0, sizeof m);
    m.side = DRIFT_TRACE_SIDE_TRAINER;
    m.run_id = "kill-trial";
    m.world_size = 1;
    m.family = "tiny-dit";
    m.guidance_scale = 1.0;
    m.plan_json = "{}";
    drift_trace_writer *w = NULL;
    int rc = drift_trace_writer_create(&w, path, &m, &err);
    drift_trace_site_decl a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.name = "blocks.0.ffn:out";
    a.dtype = DRIFT_F32;
    a.ndim = 1;
    a.shape[0] = SITE0_N;
    a.store_tensors = 1;
    b.name = "output:noise_pred";
    b.dtype = DRIFT_BF16;
    b.ndim = 2;
    b.shape[0] = SITE1_R;
    b.shape[1] = SITE1_C;
    b.store_tensors = 1;
    int id = 0;
    if (rc == DRIFT_OK) rc = drift_trace_writer_declare_site(w, &a, &id, &err);
    if (rc == DRIFT_OK) rc = drift_trace_writer_declare_site(w, &b, &id, &err);
    float pw[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int64_t ps[1] = {8};
    if (rc == DRIFT_OK) rc = drift_trace_writer_add_param(w, "blocks.0.norm2.weight", 1, ps, NULL, NULL, pw, &err);
    if (rc == DRIFT_OK) rc = drift_trace_writer_start(w, &err);
    if (rc == DRIFT_OK) report(fd, -1); /* started: readers may open */
    for (int64_t s = 0; rc == DRIFT_OK && s < MAX_STEPS; s++) {
        for (int mb = 0; rc == DRIFT_OK && mb < MICROBATCHES; mb++) {
            drift_trace_index ix;
            memset(&ix, 0, sizeof ix);
            ix.step = s;
            ix.microbatch = mb;
            ix.denoise_index = -1;
            float x[SITE0_N];
            uint16_t y[SITE1_R * SITE1_C];
            for (int i = 0; i < SITE0_N; i++) x[i] = value(s, mb, 0, i);
            for (int i = 0; i < SITE1_R * SITE1_C; i++) y[i] = drift_f32_to_bf16(value(s, mb, 1, i));
            rc = drift_trace_writer_append(w, 0, &ix, x, 1, &err);
            if (rc == DRIFT_OK) rc = drift_trace_writer_append(w, 1, &ix, y, 1, &err);
        }
        if (rc == DRIFT_OK) {
            drift_trace_metric mt;
            memset(&mt, 0, sizeof mt);
            mt.step = s;
            mt.denoise_index = -1;
            mt.numel = SITE0_N;
            mt.mean_abs_diff = (double)s;
            mt.worst_index = -1;
            rc = drift_trace_writer_add_metric(w, "blocks.0.ffn:out", &mt, &err);
        }
        if (rc == DRIFT_OK && s % 7 == 0) rc = drift_trace_writer_note(w, s, 0, "trial note", &err);
        if (rc == DRIFT_OK) rc = drift_trace_writer_commit_step(w, s, 0, &err);
        if (rc == DRIFT_OK) report(fd, s);
    }
    int crc = drift_trace_writer_close(w, NULL);
    (void)crc;
    if (rc == DRIFT_E_IO || rc == DRIFT_E_NOMEM) return 0; /* a clean failure: disk full */
    fprintf(stderr, "writer: unexpected status %d: %s: %s\n", rc, err.where, err.msg);
    return 3;
}

/* ---- verification ----------------------------------------------------------------- */

typedef struct stats {
    long trials, failures, committed_known, steps_verified, steps_lost, records_verified;
    long follow_trials, follow_refreshes, follow_steps_seen;
    long repaired_unclean, trimmed_rows;
    long disk_trials, disk_clean_errors;
    int final_phase;     /* set while verifying the repaired file: only then are missing steps "lost" */
    long kill_failures, disk_failures, kill_committed, disk_committed, kill_lost, disk_lost;
    long disk_unreadable_as_is; /* disk-full files that could not be opened before repair (allowed) */
    long disk_no_file;          /* disk-full writers stopped before their file existed, nothing committed */
} stats;

static int fail_line(stats *st, long trial, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_line(stats *st, long trial, const char *what, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL trial %ld: %s: ", trial, what);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    st->failures++;
    return -1;
}

/* Verifies an open reader against last_known (-1: no step reported).
 * Returns the number of committed steps in the file, or -1 on a failure. */
static int64_t verify_reader(drift_trace_reader *r, int64_t last_known, stats *st, long trial, const char *phase) {
    drift_err err;
    drift_err_clear(&err);
    size_t ns = 0;
    const drift_trace_step *steps = drift_trace_reader_steps(r, &ns);
    for (size_t i = 0; i < ns; i++)
        if (steps[i].step != (int64_t)i)
            return fail_line(st, trial, phase, "step row %zu holds step %" PRId64 ", expected %zu", i, steps[i].step, i);
    if ((int64_t)ns < last_known + 1) {
        if (st->final_phase) st->steps_lost += last_known + 1 - (int64_t)ns;
        return fail_line(st, trial, phase, "%zu committed steps readable, but the writer committed %" PRId64, ns,
                         last_known + 1);
    }
    if (drift_trace_reader_n_sites(r) != 2)
        return fail_line(st, trial, phase, "%zu sites, expected 2", drift_trace_reader_n_sites(r));
    for (size_t site = 0; site < 2; site++) {
        drift_trace_site_info si;
        if (drift_trace_reader_site(r, site, &si, &err) != DRIFT_OK)
            return fail_line(st, trial, phase, "site %zu: %s", site, err.msg);
        if (si.n_records != (int64_t)ns * MICROBATCHES)
            return fail_line(st, trial, phase, "site %s: %" PRId64 " committed records for %zu steps, expected %zu",
                             si.name, si.n_records, ns, ns * MICROBATCHES);
        if (si.n_records == 0) continue;
        drift_trace_index *ix = calloc((size_t)si.n_records, sizeof *ix);
        float *buf = malloc((size_t)si.numel * sizeof *buf);
        int bad = 0;
        if (drift_trace_read_index(r, site, 0, si.n_records, ix, &err) != DRIFT_OK) {
            bad = fail_line(st, trial, phase, "site %s: read_index: %s", si.name, err.msg);
        }
        for (int64_t k = 0; !bad && k < si.n_records; k++) {
            if (ix[k].step != k / MICROBATCHES || ix[k].microbatch != (int32_t)(k % MICROBATCHES)) {
                bad = fail_line(st, trial, phase, "site %s record %" PRId64 ": step %" PRId64 " mb %d", si.name, k,
                                ix[k].step, ix[k].microbatch);
                break;
            }
            if (drift_trace_read_record_f32(r, site, k, buf, (size_t)si.numel, &err) != DRIFT_OK) {
                bad = fail_line(st, trial, phase, "site %s record %" PRId64 ": %s", si.name, k, err.msg);
                break;
            }
            for (int64_t i = 0; i < si.numel; i++) {
                float want = value(ix[k].step, ix[k].microbatch, (int)site, (int)i);
                if (site == 1) want = drift_round_to(want, DRIFT_BF16);
                if (buf[i] != want) {
                    bad = fail_line(st, trial, phase, "site %s record %" PRId64 " element %" PRId64 ": %g, expected %g",
                                    si.name, k, i, buf[i], want);
                    break;
                }
            }
            st->records_verified++;
        }
        free(ix);
        free(buf);
        if (bad) return -1;
    }
    drift_trace_metric *mr = NULL;
    size_t n = 0;
    if (drift_trace_read_metrics(r, INT64_MIN, &mr, &n, &err) != DRIFT_OK)
        return fail_line(st, trial, phase, "read_metrics: %s", err.msg);
    int bad = 0;
    if (n != ns) bad = fail_line(st, trial, phase, "%zu metric rows for %zu steps", n, ns);
    for (size_t i = 0; !bad && i < n; i++)
        if (mr[i].step != (int64_t)i || mr[i].mean_abs_diff != (double)i)
            bad = fail_line(st, trial, phase, "metric row %zu: step %" PRId64, i, mr[i].step);
    free(mr);
    return bad ? -1 : (int64_t)ns;
}

static int64_t verify_path(const char *path, int64_t last_known, stats *st, long trial, const char *phase,
                           int want_clean) {
    drift_trace_reader *r = NULL;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &err);
    if (rc != DRIFT_OK) {
        if (last_known < 0) return 0; /* killed before anything was committed: nothing to lose */
        if (st->final_phase) st->steps_lost += last_known + 1;
        return fail_line(st, trial, phase, "cannot open: rc %d: %s: %s", rc, err.where, err.msg);
    }
    if (want_clean && drift_trace_reader_unclean(r)) {
        drift_trace_reader_close(r);
        return fail_line(st, trial, phase, "still unclean after repair");
    }
    int64_t n = verify_reader(r, last_known, st, trial, phase);
    drift_trace_reader_close(r);
    return n;
}

/* Reads the pipe to EOF: the last step reported (-1 none) and whether the
 * writer started. */
static int64_t drain(int fd, int *started) {
    int64_t last = -1, v;
    for (;;) {
        ssize_t n = read(fd, &v, sizeof v);
        if (n == (ssize_t)sizeof v) {
            if (v == -1)
                *started = 1;
            else if (v > last)
                last = v;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        break;
    }
    return last;
}

static void trial_body(const char *dir, long trial, int disk_full, double max_ms, int keep, stats *st,
                       int64_t *committed);
static int g_keep_failing;

/* Runs one trial and books its failures, committed and lost steps under its kind. */
static void one_trial(const char *dir, long trial, int disk_full, double max_ms, int keep, stats *st) {
    long f0 = st->failures, l0 = st->steps_lost;
    int64_t committed = 0;
    trial_body(dir, trial, disk_full, max_ms, keep, st, &committed);
    if (disk_full) {
        st->disk_failures += st->failures - f0;
        st->disk_lost += st->steps_lost - l0;
        st->disk_committed += committed;
    } else {
        st->kill_failures += st->failures - f0;
        st->kill_lost += st->steps_lost - l0;
        st->kill_committed += committed;
    }
}

static void trial_body(const char *dir, long trial, int disk_full, double max_ms, int keep, stats *st,
                       int64_t *committed) {
    long f_start = st->failures;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s-%ld.h5", dir, disk_full ? "full" : "kill", trial);
    unlink(path);
    int p[2];
    if (pipe(p) != 0) {
        perror("pipe");
        exit(2);
    }
    long fsize = 24 * 1024 + (long)(rnd() % (2 * 1024 * 1024));
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        if (disk_full) {
            struct rlimit rl = {(rlim_t)fsize, (rlim_t)fsize};
            signal(SIGXFSZ, SIG_IGN);
            setrlimit(RLIMIT_FSIZE, &rl);
        }
        _exit(writer_main(path, p[1]));
    }
    close(p[1]);
    int fl = fcntl(p[0], F_GETFL);
    int started = 0, follow = !disk_full && (trial % 2 == 1);
    int64_t last_known = -1;
    drift_trace_reader *fr = NULL;
    int64_t follow_seen = 0;
    if (!disk_full) {
        double delay = (double)(rnd() % 1000000) / 1e6 * max_ms / 1000.0;
        double t_end = now_s() + delay;
        if (follow) fcntl(p[0], F_SETFL, fl | O_NONBLOCK);
        while (now_s() < t_end) {
            if (follow) {
                int64_t v;
                while (read(p[0], &v, sizeof v) == (ssize_t)sizeof v) {
                    if (v == -1) started = 1;
                    else if (v > last_known) last_known = v;
                }
                if (started && !fr) {
                    drift_err err;
                    if (drift_trace_reader_open(&fr, path, DRIFT_TRACE_OPEN_FOLLOW, &err) != DRIFT_OK) fr = NULL;
                }
                if (fr) {
                    drift_err err;
                    int64_t fresh = 0;
                    int rc = drift_trace_reader_refresh(fr, &fresh, &err);
                    st->follow_refreshes++;
                    if (rc != DRIFT_OK) {
                        fail_line(st, trial, "follow", "refresh: rc %d: %s", rc, err.msg);
                        drift_trace_reader_close(fr);
                        fr = NULL;
                    } else if (fresh > 0) {
                        follow_seen = verify_reader(fr, -1, st, trial, "follow (live)");
                        if (follow_seen < 0) {
                            drift_trace_reader_close(fr);
                            fr = NULL;
                        }
                    }
                }
                sleep_s(0.002);
            } else {
                double left = t_end - now_s();
                sleep_s(left);
            }
        }
        kill(pid, SIGKILL);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    fcntl(p[0], F_SETFL, fl);
    int64_t rest = drain(p[0], &started);
    if (rest > last_known) last_known = rest;
    close(p[0]);
    st->trials++;
    if (disk_full) {
        st->disk_trials++;
        if (WIFSIGNALED(status)) {
            fail_line(st, trial, "disk full", "the writer died by signal %d (limit %ld bytes)", WTERMSIG(status), fsize);
        } else if (WEXITSTATUS(status) != 0) {
            fail_line(st, trial, "disk full", "the writer exited %d (limit %ld bytes)", WEXITSTATUS(status), fsize);
        } else {
            st->disk_clean_errors++;
        }
    } else if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
        fail_line(st, trial, "kill", "the writer was not killed by SIGKILL (status 0x%x)", status);
    }
    st->committed_known += last_known + 1;
    *committed = last_known + 1;

    /* the follower keeps reading the killed file: it still sees every committed step */
    if (fr) {
        drift_err err;
        int64_t fresh = 0;
        if (drift_trace_reader_refresh(fr, &fresh, &err) != DRIFT_OK)
            fail_line(st, trial, "follow (after kill)", "refresh: %s", err.msg);
        else {
            int64_t n = verify_reader(fr, last_known, st, trial, "follow (after kill)");
            if (n > follow_seen) follow_seen = n;
        }
        drift_trace_reader_close(fr);
        st->follow_trials++;
        st->follow_steps_seen += follow_seen > 0 ? follow_seen : 0;
    }

    /* 1. as killed (SWMR fallback). After a full disk the file is shorter than
     * the end of file HDF5 recorded, and nothing opens it before repair: that
     * is allowed (promise 5 is about what repair recovers) and counted, but
     * the reader's error and drift_trace_check must name the cause and the
     * remedy. */
    int cut_short = 0;
    drift_trace_check_report rep;
    memset(&rep, 0, sizeof rep);
    drift_err err;
    drift_err_clear(&err);
    int rc;
    if (disk_full && access(path, F_OK) != 0) {
        /* a limit below what creating the file needs: the writer stops with a clean error
         * before its file exists; allowed when it committed nothing (nothing is lost) */
        if (last_known >= 0)
            fail_line(st, trial, "disk full", "no file, but the writer reported %" PRId64 " committed step(s) (limit %ld bytes)",
                      last_known + 1, fsize);
        else
            st->disk_no_file++;
        return;
    }
    if (disk_full) {
        drift_trace_reader *r0 = NULL;
        if (drift_trace_reader_open(&r0, path, DRIFT_TRACE_OPEN_NORMAL, &err) == DRIFT_OK) {
            verify_reader(r0, last_known, st, trial, "disk-full file, as is");
            drift_trace_reader_close(r0);
        } else {
            st->disk_unreadable_as_is++;
            cut_short = 1;
            if (!strstr(err.msg, "cut short") || !strstr(err.msg, "drift check --repair"))
                fail_line(st, trial, "disk-full file, as is", "the reader's error does not name the cause: %s: %s",
                          err.where, err.msg);
        }
    } else {
        verify_path(path, last_known, st, trial, "killed file, as is", 0);
    }
    /* the file as the writer left it, kept if the trial fails (--keep-failing) */
    char saved[4200] = "";
    if (g_keep_failing && access(path, F_OK) == 0) {
        snprintf(saved, sizeof saved, "%s.as-killed", path);
        char cmd[9000];
        snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, saved);
        if (system(cmd) != 0) saved[0] = '\0';
    }
    /* 2. check and repair */
    rc = drift_trace_check(path, &rep, &err);
    if (cut_short) {
        /* cannot be examined before repair: check reports why, as a problem */
        int named = 0;
        for (size_t i = 0; rc == DRIFT_OK && i < rep.n_problems; i++)
            named |= strstr(rep.problems[i], "cut short") && strstr(rep.problems[i], "drift check --repair");
        if (rc != DRIFT_OK || !rep.unclean || !named)
            fail_line(st, trial, "check", "a cut-short file: rc %d, unclean %d, %zu problem(s)%s%s: %s", rc, rep.unclean,
                      rep.n_problems, rep.n_problems ? ": " : "", rep.n_problems ? rep.problems[0] : "", err.msg);
        else
            st->repaired_unclean++;
    } else if (rc == DRIFT_OK) {
        if (rep.committed_steps < last_known + 1)
            fail_line(st, trial, "check", "reports %" PRId64 " committed steps, the writer committed %" PRId64,
                      rep.committed_steps, last_known + 1);
        if (rep.unclean) st->repaired_unclean++;
    } else if (last_known >= 0) {
        fail_line(st, trial, "check", "rc %d: %s: %s", rc, err.where, err.msg);
    }
    drift_trace_check_report_free(&rep);
    int64_t trimmed = 0;
    rc = drift_trace_repair(path, &trimmed, &err);
    if (rc != DRIFT_OK) {
        if (last_known >= 0) {
            fail_line(st, trial, "repair", "rc %d: %s: %s", rc, err.where, err.msg);
            st->steps_lost += last_known + 1;
        }
    } else {
        st->trimmed_rows += trimmed;
        /* 3. repaired: clean, complete, and check finds no problem */
        st->final_phase = 1;
        int64_t n = verify_path(path, last_known, st, trial, "after repair", 1);
        st->final_phase = 0;
        if (n >= 0) st->steps_verified += n;
        memset(&rep, 0, sizeof rep);
        rc = drift_trace_check(path, &rep, &err);
        /* a writer stopped by a full disk records its failed state (issue 34): the one problem expected */
        int failed_state = rep.n_problems == 1 && strstr(rep.problems[0], "the writer recorded a failure: failed at step") &&
                           (strstr(rep.problems[0], "File too large") || strstr(rep.problems[0], "No space left"));
        if (rc != DRIFT_OK || (rep.n_problems > 0 && !failed_state))
            fail_line(st, trial, "check after repair", "rc %d, %zu problem(s)%s%s", rc, rep.n_problems,
                      rep.n_problems ? ": " : "", rep.n_problems ? rep.problems[0] : "");
        drift_trace_check_report_free(&rep);
    }
    if (saved[0]) {
        if (st->failures > f_start) {
            fprintf(stderr, "FAIL trial %ld: the file as left by the writer is kept: %s\n", trial, saved);
        } else {
            unlink(saved);
        }
    }
    if (!keep && !(g_keep_failing && st->failures > f_start)) unlink(path);
}

int main(int argc, char **argv) {
    long trials = 200, disk = 20;
    double max_ms = 400;
    int keep = 0;
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--trials") && i + 1 < argc) trials = atol(argv[++i]);
        else if (!strcmp(argv[i], "--disk-full") && i + 1 < argc) disk = atol(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) g_rng = strtoull(argv[++i], NULL, 10) | 1;
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--max-ms") && i + 1 < argc) max_ms = atof(argv[++i]);
        else if (!strcmp(argv[i], "--keep")) keep = 1;
        else if (!strcmp(argv[i], "--keep-failing")) g_keep_failing = 1;
        else {
            fprintf(stderr, "usage: kill_trials [--trials N] [--disk-full N] [--seed S] [--dir DIR] [--max-ms MS] [--keep] [--keep-failing]\n");
            return 2;
        }
    }
    char tmpl[4096];
    if (!dir) {
        const char *t = getenv("TMPDIR");
        snprintf(tmpl, sizeof tmpl, "%s/drift-kill-XXXXXX", t && t[0] ? t : "/tmp");
        if (!mkdtemp(tmpl)) {
            perror("mkdtemp");
            return 2;
        }
        dir = tmpl;
    }
    stats st;
    memset(&st, 0, sizeof st);
    double t0 = now_s();
    for (long t = 0; t < trials; t++) one_trial(dir, t, 0, max_ms, keep, &st);
    for (long t = 0; t < disk; t++) one_trial(dir, trials + t, 1, max_ms, keep, &st);
    if (!keep && !g_keep_failing && dir == tmpl) rmdir(tmpl);
    printf("kill_trials: SIGKILL: %ld trials, %ld steps committed, %ld committed steps lost, %ld failure(s); "
           "%ld of them with a live follow-mode reader (%ld refreshes, %ld steps seen live)\n",
           trials, st.kill_committed, st.kill_lost, st.kill_failures, st.follow_trials, st.follow_refreshes,
           st.follow_steps_seen);
    printf("kill_trials: disk full: %ld trials, %ld writers stopped by a clean error, %ld steps committed, "
           "%ld committed steps lost, %ld failure(s); %ld file(s) unreadable until repaired, %ld stopped before "
           "creating their file (nothing committed)\n",
           st.disk_trials, st.disk_clean_errors, st.disk_committed, st.disk_lost, st.disk_failures,
           st.disk_unreadable_as_is, st.disk_no_file);
    printf("kill_trials: in all: %ld steps committed, %ld verified after repair (%ld records read back over all "
           "phases), %ld lost; %ld unclean files repaired, %ld uncommitted rows trimmed\n",
           st.committed_known, st.steps_verified, st.records_verified, st.steps_lost, st.repaired_unclean,
           st.trimmed_rows);
    printf("kill_trials: %ld failure(s) in %.1f s\n", st.failures, now_s() - t0);
    fflush(stdout); /* before the leak checker's exit, which does not flush stdio */
    return st.failures || st.steps_lost ? 1 : 0;
}
