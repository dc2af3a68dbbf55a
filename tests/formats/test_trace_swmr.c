/* formats/trace under SWMR: a writer killed with SIGKILL mid-step (the SWMR
 * reader and drift_trace_check see exactly the committed steps; repair makes
 * the file readable by plain h5dump with every committed record intact), a
 * writer killed at arbitrary points, and a follow-mode reader that sees each
 * step only once it is committed, and all of them eventually. The writer runs
 * in a forked child; synchronisation is by pipes, waits are bounded, and no
 * assertion depends on timing. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "test_trace_util.h"

static int setup(void **state) {
    (void)state;
    return tt_setup_tmp("trace_swmr");
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void put(int fd, char c) {
    while (write(fd, &c, 1) != 1 && errno == EINTR) {
    }
}

static char get(int fd) {
    char c = 0;
    ssize_t k;
    while ((k = read(fd, &c, 1)) < 0 && errno == EINTR) {
    }
    return k == 1 ? c : 0;
}

/* Child: commits k steps, appends most of step k, then SIGKILLs itself. */
static void child_commit_then_die(const char *path, int k) {
    drift_trace_writer *w = NULL;
    drift_err e;
    drift_err_clear(&e);
    if (tt_open_writer(path, &w, 1, &e)) _exit(3);
    for (int s = 0; s < k; s++)
        if (tt_write_step(w, s, 1, &e) || drift_trace_writer_commit_step(w, s, 0, &e)) _exit(4);
    /* the uncommitted step: records, metrics and notes, enough to spill */
    if (tt_write_step(w, k, 1, &e)) _exit(5);
    raise(SIGKILL);
    _exit(6);
}

static int all_records_match(drift_trace_reader *r, int64_t steps) {
    char why[600];
    for (int i = 0; i < TT_N_SITES; i++) {
        drift_trace_site_info si;
        drift_err e;
        if (drift_trace_reader_site(r, (size_t)i, &si, &e)) {
            fprintf(stderr, "%s: %s\n", e.where, e.msg);
            return 0;
        }
        if (si.n_records != steps * TT_RECS_PER_STEP) {
            fprintf(stderr, "site %s: %lld records, want %lld\n", si.name, (long long)si.n_records,
                    (long long)(steps * TT_RECS_PER_STEP));
            return 0;
        }
        for (int64_t rec = 0; rec < si.n_records; rec++) {
            if (!tt_sites[i].store || tt_sampled_out(i, rec)) continue;
            if (!tt_record_matches(r, i, rec, why, sizeof why)) {
                fprintf(stderr, "%s\n", why);
                return 0;
            }
        }
    }
    return 1;
}

static int run_ok(const char *fmt, const char *a) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, fmt, a);
    return system(cmd) == 0;
}

static void test_kill_mid_step(void **state) {
    (void)state;
    const int K = 3;
    char path[1400];
    snprintf(path, sizeof path, "%s", tt_path("killed.h5"));
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) child_commit_then_die(path, K);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

    /* plain HDF5 readers are locked out by the superblock status flags */
    assert_false(run_ok("h5dump -H '%s' >/dev/null 2>&1", path));

    drift_err e;
    drift_err_clear(&e);
    drift_trace_reader *r = NULL;
    int rc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &e);
    if (rc) fprintf(stderr, "%s: %s\n", e.where, e.msg);
    assert_int_equal(rc, DRIFT_OK);
    assert_int_equal(drift_trace_reader_unclean(r), 1);
    size_t n = 0;
    drift_trace_reader_steps(r, &n);
    assert_int_equal(n, K);
    assert_true(all_records_match(r, K));
    drift_trace_metric *m = NULL;
    size_t nm = 0;
    assert_int_equal(drift_trace_read_metrics(r, INT64_MIN, &m, &nm, &e), DRIFT_OK);
    assert_int_equal(nm, K * (TT_N_SITES + 1));
    free(m);
    drift_trace_reader_close(r);

    assert_int_equal(drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_FOLLOW, &e), DRIFT_OK);
    drift_trace_reader_steps(r, &n);
    assert_int_equal(n, K);
    drift_trace_reader_close(r);

    drift_trace_check_report rep;
    assert_int_equal(drift_trace_check(path, &rep, &e), DRIFT_OK);
    assert_int_equal(rep.unclean, 1);
    assert_int_equal(rep.committed_steps, K);
    assert_int_equal(rep.last_step, K - 1);
    assert_int_equal(rep.committed_records, K * TT_RECS_PER_STEP * TT_N_SITES);
    assert_true(rep.n_problems >= 1);
    assert_non_null(strstr(rep.problems[0], "not closed cleanly"));
    for (size_t i = 1; i < rep.n_problems; i++) fprintf(stderr, "unexpected problem: %s\n", rep.problems[i]);
    assert_int_equal(rep.n_problems, 1);
    drift_trace_check_report_free(&rep);

    int64_t trimmed = -1;
    rc = drift_trace_repair(path, &trimmed, &e);
    if (rc) fprintf(stderr, "%s: %s\n", e.where, e.msg);
    assert_int_equal(rc, DRIFT_OK);
    assert_true(trimmed >= 0);

    /* now an ordinary HDF5 reader opens it and sees exactly the committed rows */
    assert_true(run_ok("h5dump '%s' >/dev/null 2>&1", path));
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "h5dump -d /sites/blocks.0.ffn:out/data -b FILE -o '%s' '%s' >/dev/null 2>&1",
             tt_path("killed.bin"), path);
    assert_int_equal(system(cmd), 0);
    FILE *f = fopen(tt_path("killed.bin"), "rb");
    assert_non_null(f);
    size_t numel = (size_t)tt_numel(&tt_sites[0]);
    uint16_t buf[64], want[64];
    for (int64_t rec = 0; rec < K * TT_RECS_PER_STEP; rec++) {
        assert_int_equal(fread(buf, 2, numel, f), numel);
        tt_fill(0, rec, DRIFT_BF16, want, numel);
        assert_memory_equal(buf, want, numel * 2);
    }
    assert_int_equal(fread(buf, 2, 1, f), 0); /* trimmed to the committed records */
    fclose(f);

    assert_int_equal(drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &e), DRIFT_OK);
    assert_int_equal(drift_trace_reader_unclean(r), 0);
    drift_trace_reader_steps(r, &n);
    assert_int_equal(n, K);
    assert_true(all_records_match(r, K));
    drift_trace_reader_close(r);
    assert_int_equal(drift_trace_check(path, &rep, &e), DRIFT_OK);
    for (size_t i = 0; i < rep.n_problems; i++) fprintf(stderr, "problem after repair: %s\n", rep.problems[i]);
    assert_int_equal(rep.n_problems, 0);
    assert_int_equal(rep.uncommitted_records, 0);
    assert_int_equal(rep.committed_steps, K);
    drift_trace_check_report_free(&rep);
    /* a second repair is a no-op */
    assert_int_equal(drift_trace_repair(path, &trimmed, &e), DRIFT_OK);
    assert_int_equal(trimmed, 0);
}

/* Child: writes steps forever (the parent kills it). */
static void child_write_forever(const char *path, int ready_fd) {
    drift_trace_writer *w = NULL;
    drift_err e;
    drift_err_clear(&e);
    if (tt_open_writer(path, &w, 0, &e)) _exit(3);
    put(ready_fd, 'r');
    for (int64_t s = 0;; s++)
        if (tt_write_step(w, s, 1, &e) || drift_trace_writer_commit_step(w, s, 0, &e)) _exit(4);
}

/* Killed at arbitrary points: whatever was committed stays readable through
 * SWMR and, after repair, plainly; nothing uncommitted is ever reported. */
static void test_kill_anywhere(void **state) {
    (void)state;
    for (int round = 0; round < 4; round++) {
        char name[64];
        snprintf(name, sizeof name, "anywhere%d.h5", round);
        char path[1400];
        snprintf(path, sizeof path, "%s", tt_path(name));
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        fflush(NULL);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            child_write_forever(path, fds[1]);
        }
        close(fds[1]);
        assert_int_equal(get(fds[0]), 'r');
        close(fds[0]);
        /* let it run until a reader sees a few steps (bounded), then kill */
        drift_err e;
        drift_err_clear(&e);
        drift_trace_reader *r = NULL;
        int64_t seen = 0;
        for (int tries = 0; tries < 20000 && seen < 2 + round; tries++) {
            if (!r && drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_FOLLOW, &e) != DRIFT_OK) r = NULL;
            if (r) {
                int64_t add = 0;
                assert_int_equal(drift_trace_reader_refresh(r, &add, &e), DRIFT_OK);
                size_t n = 0;
                drift_trace_reader_steps(r, &n);
                seen = (int64_t)n;
            }
            sleep_ms(1);
        }
        drift_trace_reader_close(r);
        sleep_ms(round * 3); /* vary where the kill lands; no assertion depends on it */
        kill(pid, SIGKILL);
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFSIGNALED(st));

        r = NULL;
        int rc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &e);
        if (rc) fprintf(stderr, "round %d: %s: %s\n", round, e.where, e.msg);
        assert_int_equal(rc, DRIFT_OK);
        size_t k = 0;
        drift_trace_reader_steps(r, &k);
        assert_true((int64_t)k >= seen);
        assert_true(all_records_match(r, (int64_t)k));
        drift_trace_reader_close(r);
        int64_t trimmed = 0;
        rc = drift_trace_repair(path, &trimmed, &e);
        if (rc) fprintf(stderr, "round %d: %s: %s\n", round, e.where, e.msg);
        assert_int_equal(rc, DRIFT_OK);
        assert_true(run_ok("h5dump -H '%s' >/dev/null 2>&1", path));
        assert_int_equal(drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &e), DRIFT_OK);
        size_t k2 = 0;
        drift_trace_reader_steps(r, &k2);
        assert_int_equal(k2, k);
        assert_int_equal(drift_trace_reader_unclean(r), 0);
        assert_true(all_records_match(r, (int64_t)k));
        drift_trace_reader_close(r);
        drift_trace_check_report rep;
        assert_int_equal(drift_trace_check(path, &rep, &e), DRIFT_OK);
        for (size_t i = 0; i < rep.n_problems; i++) fprintf(stderr, "round %d problem: %s\n", round, rep.problems[i]);
        assert_int_equal(rep.n_problems, 0);
        drift_trace_check_report_free(&rep);
    }
}

/* Child of the lockstep follow test. */
static void child_lockstep(const char *path, int n_steps, int to_parent, int from_parent) {
    drift_trace_writer *w = NULL;
    drift_err e;
    drift_err_clear(&e);
    if (tt_open_writer(path, &w, 1, &e)) _exit(3);
    put(to_parent, 'r');
    for (int s = 0; s < n_steps; s++) {
        if (tt_write_step(w, s, 1, &e)) _exit(4);
        put(to_parent, 'a'); /* appended, not committed */
        if (get(from_parent) != 'g') _exit(5);
        if (drift_trace_writer_commit_step(w, s, 0, &e)) _exit(6);
        put(to_parent, 'c');
    }
    if (drift_trace_writer_close(w, &e)) _exit(7);
    _exit(0);
}

static void test_follow_lockstep(void **state) {
    (void)state;
    const int N = 5;
    char path[1400];
    snprintf(path, sizeof path, "%s", tt_path("follow.h5"));
    int up[2], down[2];
    assert_int_equal(pipe(up), 0);
    assert_int_equal(pipe(down), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        child_lockstep(path, N, up[1], down[0]);
    }
    close(up[1]);
    close(down[0]);
    assert_int_equal(get(up[0]), 'r');
    drift_err e;
    drift_err_clear(&e);
    drift_trace_reader *r = NULL;
    int rc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_FOLLOW, &e);
    if (rc) fprintf(stderr, "%s: %s\n", e.where, e.msg);
    assert_int_equal(rc, DRIFT_OK);
    assert_non_null(drift_trace_reader_status(r));
    assert_string_equal(drift_trace_reader_status(r), "recording");
    for (int s = 0; s < N; s++) {
        assert_int_equal(get(up[0]), 'a');
        /* appended but not committed: invisible */
        int64_t add = -1;
        assert_int_equal(drift_trace_reader_refresh(r, &add, &e), DRIFT_OK);
        assert_int_equal(add, 0);
        size_t n = 0;
        drift_trace_reader_steps(r, &n);
        assert_int_equal(n, (size_t)s);
        drift_trace_site_info si;
        assert_int_equal(drift_trace_reader_site(r, 0, &si, &e), DRIFT_OK);
        assert_int_equal(si.n_records, s * TT_RECS_PER_STEP);
        drift_trace_metric *m = NULL;
        size_t nm = 0;
        assert_int_equal(drift_trace_read_metrics(r, s - 1, &m, &nm, &e), DRIFT_OK);
        assert_int_equal(nm, 0);
        put(down[1], 'g');
        assert_int_equal(get(up[0]), 'c');
        /* committed: visible (bounded retries; the commit is flushed before 'c') */
        int64_t total = 0;
        for (int tries = 0; tries < 1000 && total < 1; tries++) {
            assert_int_equal(drift_trace_reader_refresh(r, &add, &e), DRIFT_OK);
            total += add;
            if (total < 1) sleep_ms(1);
        }
        assert_int_equal(total, 1);
        drift_trace_reader_steps(r, &n);
        assert_int_equal(n, (size_t)s + 1);
        assert_true(all_records_match(r, s + 1));
        assert_int_equal(drift_trace_read_metrics(r, s - 1, &m, &nm, &e), DRIFT_OK);
        assert_int_equal(nm, TT_N_SITES + 1);
        for (size_t i = 0; i < nm; i++) assert_int_equal(m[i].step, s);
        assert_string_equal(drift_trace_reader_metric_site(r, (size_t)m[TT_N_SITES].site), "replay:only_node");
        free(m);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int64_t add = 0;
    assert_int_equal(drift_trace_reader_refresh(r, &add, &e), DRIFT_OK);
    assert_int_equal(add, 0);
    /* the follower re-reads /status: the writer that closed says so (drift top's CLOSED) */
    assert_non_null(drift_trace_reader_status(r));
    assert_string_equal(drift_trace_reader_status(r), "closed");
    drift_trace_reader_close(r);
    close(up[0]);
    close(down[1]);
}

/* Free-running writer; the reader polls and must see every step, in order,
 * each with intact records. */
static void test_follow_free_running(void **state) {
    (void)state;
    const int N = 25;
    char path[1400];
    snprintf(path, sizeof path, "%s", tt_path("follow2.h5"));
    int up[2];
    assert_int_equal(pipe(up), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(up[0]);
        drift_trace_writer *w = NULL;
        drift_err e;
        drift_err_clear(&e);
        if (tt_open_writer(path, &w, 0, &e)) _exit(3);
        put(up[1], 'r');
        for (int s = 0; s < N; s++) {
            if (tt_write_step(w, s, 1, &e) || drift_trace_writer_commit_step(w, s, 0, &e)) _exit(4);
            sleep_ms(2);
        }
        _exit(drift_trace_writer_close(w, &e) ? 5 : 0);
    }
    close(up[1]);
    assert_int_equal(get(up[0]), 'r');
    close(up[0]);
    drift_err e;
    drift_err_clear(&e);
    drift_trace_reader *r = NULL;
    assert_int_equal(drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_FOLLOW, &e), DRIFT_OK);
    size_t n = 0, last = 0;
    drift_trace_reader_steps(r, &n); /* the writer may have committed some already */
    int64_t total = (int64_t)n;
    for (int tries = 0; tries < 60000 && n < (size_t)N; tries++) {
        int64_t add = 0;
        int rc = drift_trace_reader_refresh(r, &add, &e);
        if (rc) fprintf(stderr, "%s: %s\n", e.where, e.msg);
        assert_int_equal(rc, DRIFT_OK);
        total += add;
        const drift_trace_step *st = drift_trace_reader_steps(r, &n);
        assert_int_equal((int64_t)n, total);
        if (n != last) {
            for (size_t i = 0; i < n; i++) assert_int_equal(st[i].step, (int64_t)i);
            assert_true(all_records_match(r, (int64_t)n));
            last = n;
        } else {
            sleep_ms(1);
        }
    }
    assert_int_equal(n, N);
    drift_trace_reader_close(r);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill_mid_step),
        cmocka_unit_test(test_kill_anywhere),
        cmocka_unit_test(test_follow_lockstep),
        cmocka_unit_test(test_follow_free_running),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
