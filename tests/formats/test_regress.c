/* Fuzzing regressions: replays every input in tests/data/regress/<harness>/
 * (crashes and property violations found by fuzz/run.sh) and every seed in
 * fuzz/corpus/<harness>/ through the same code as the libFuzzer harness: the
 * harness sources are compiled in here, so a parser that crashes, leaks
 * (under the ASan build) or breaks a harness property (e.g. a serialised
 * plan that does not parse back) fails this test. Each file must come back
 * cleanly: DRIFT_OK or a documented error code. tests/data/regress/repair/
 * holds traces left by writers killed in fuzz/kill_trials.c that repair must
 * restore with every committed step. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#define DRIFT_FUZZ_IN_TEST 1

#define LLVMFuzzerTestOneInput drift_fuzz_json_one
#include "fuzz/fuzz_json.c"
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerTestOneInput drift_fuzz_plan_one
#include "fuzz/fuzz_plan.c"
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerTestOneInput drift_fuzz_plan_flags_one
#include "fuzz/fuzz_plan_flags.c"
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerTestOneInput drift_fuzz_params_one
#include "fuzz/fuzz_params.c"
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerTestOneInput drift_fuzz_family_spec_one
#include "fuzz/fuzz_family_spec.c"
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerTestOneInput drift_fuzz_specs_one
#include "fuzz/fuzz_specs.c"
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerTestOneInput drift_fuzz_safetensors_one
#include "fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerTestOneInput drift_fuzz_graph_one
#include "fuzz/fuzz_graph.c"
#undef LLVMFuzzerTestOneInput

#define LLVMFuzzerTestOneInput drift_fuzz_trace_one
#include "fuzz/fuzz_trace.c"
#undef LLVMFuzzerTestOneInput

/* Time allowed per input (a fuzz_trace input runs the reader several times). */
#define REPLAY_SECONDS 60

/* libhdf5 (1.10) leaks a few cache entries when it fails to open a corrupted
 * file; not drift's (fuzz_trace checks drift's HDF5 handles separately). */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libhdf5\n"; }

typedef int (*one_input_fn)(const uint8_t *data, size_t size);

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    unsigned char *b = malloc(cap);
    for (;;) {
        if (n == cap) {
            cap *= 2;
            b = realloc(b, cap);
        }
        size_t got = fread(b + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    *len = n;
    return b;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Runs fn over every regular file of dir (sorted, hidden files and *.md
 * skipped). Returns the number of files; a missing directory counts 0. */
static int replay_dir(const char *dir, one_input_fn fn) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        size_t l = strlen(e->d_name);
        if (l > 3 && strcmp(e->d_name + l - 3, ".md") == 0) continue;
        names = realloc(names, (n + 1) * sizeof *names);
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            size_t len = 0;
            unsigned char *data = read_all(path, &len);
            assert_non_null(data);
            fprintf(stderr, "  replay %s (%zu bytes)\n", path, len);
            /* A hang is a finding too: SIGALRM ends the test, the line above names the input. */
            alarm(REPLAY_SECONDS);
            assert_int_equal(fn(data, len), 0);
            alarm(0);
            free(data);
            count++;
        }
        free(names[i]);
    }
    free(names);
    return count;
}

static void replay_harness(const char *name, one_input_fn fn) {
    const char *src = getenv("DRIFT_SRC");
    const char *data = getenv("DRIFT_TESTDATA");
    char dir[4096];
    int n_reg = 0, n_seed = 0;
    if (data && data[0]) {
        snprintf(dir, sizeof dir, "%s/regress/%s", data, name);
        n_reg = replay_dir(dir, fn);
    }
    if (src && src[0]) {
        snprintf(dir, sizeof dir, "%s/fuzz/corpus/%s", src, name);
        n_seed = replay_dir(dir, fn);
    }
    fprintf(stderr, "%s: %d regression input(s), %d seed(s) replayed cleanly\n", name, n_reg, n_seed);
}

#define REPLAY_TEST(h)                                                                                  \
    static void test_##h(void **state) {                                                              \
        (void)state;                                                                                    \
        replay_harness(#h, drift_##h##_one);                                                           \
    }

/* Crash-consistency regressions (fuzz/kill_trials.c): traces as a killed
 * writer left them, gzipped, named NAME[.damaged-D].commits-N.h5.gz where N is
 * the number of steps whose commit had returned. drift_trace_repair must
 * succeed and the repaired file must hold at least N committed steps, every
 * record readable, except in the D sites whose object headers the kill tore
 * (listed as damaged, reading them fails with DRIFT_E_INPUT naming the site,
 * and drift_trace_check reports each). */
static void repair_one(const char *dir, const char *name) {
    const char *tmp = getenv("DRIFT_TMP");
    const char *c = strstr(name, ".commits-");
    assert_non_null(c);
    long want = strtol(c + 9, NULL, 10);
    char src[8448], path[4200], cmd[13000];
    assert_true(snprintf(src, sizeof src, "%s/%s", dir, name) < (int)sizeof src);
    assert_true(snprintf(path, sizeof path, "%s/repair-%ld.h5", tmp && tmp[0] ? tmp : "/tmp", (long)getpid()) <
                (int)sizeof path);
    assert_true(snprintf(cmd, sizeof cmd, "gzip -dc '%s' > '%s'", src, path) < (int)sizeof cmd);
    assert_int_equal(system(cmd), 0);
    fprintf(stderr, "  repair %s (%ld committed steps)\n", src, want);
    drift_err err;
    drift_err_clear(&err);
    int64_t trimmed = 0;
    int rc = drift_trace_repair(path, &trimmed, &err);
    if (rc != DRIFT_OK) fprintf(stderr, "  repair: rc %d: %s: %s\n", rc, err.where, err.msg);
    assert_int_equal(rc, DRIFT_OK);
    drift_trace_reader *r = NULL;
    rc = drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &err);
    if (rc != DRIFT_OK) fprintf(stderr, "  open after repair: rc %d: %s: %s\n", rc, err.where, err.msg);
    assert_int_equal(rc, DRIFT_OK);
    size_t n = 0;
    drift_trace_reader_steps(r, &n);
    assert_true((long)n >= want);
    long damaged = 0;
    for (size_t s = 0; s < drift_trace_reader_n_sites(r); s++) {
        drift_trace_site_info si;
        assert_int_equal(drift_trace_reader_site(r, s, &si, &err), DRIFT_OK);
        if (si.damaged) {
            /* listed, marked, and reading it is a clear input error naming it */
            damaged++;
            fprintf(stderr, "  damaged site \"%s\": %s\n", si.name, si.damaged);
            assert_int_equal(si.n_records, 0);
            drift_trace_index ix;
            drift_err_clear(&err);
            assert_int_equal(drift_trace_read_index(r, s, 0, 1, &ix, &err), DRIFT_E_INPUT);
            assert_non_null(strstr(err.msg, si.name));
            assert_non_null(strstr(err.msg, "damaged"));
            continue;
        }
        float *buf = malloc((size_t)si.numel * sizeof *buf + 1);
        drift_trace_index ix;
        for (int64_t k = 0; k < si.n_records; k++) {
            assert_int_equal(drift_trace_read_index(r, s, k, 1, &ix, &err), DRIFT_OK);
            if (si.has_data && ix.stored)
                assert_int_equal(drift_trace_read_record_f32(r, s, k, buf, (size_t)si.numel, &err), DRIFT_OK);
        }
        free(buf);
    }
    drift_trace_reader_close(r);
    /* name.damaged-N.commits-M.h5.gz: exactly N sites are damaged, and
     * drift_trace_check reports each of them */
    const char *d = strstr(name, ".damaged-");
    assert_int_equal(damaged, d ? strtol(d + 9, NULL, 10) : 0);
    if (damaged) {
        drift_trace_check_report rep;
        assert_int_equal(drift_trace_check(path, &rep, &err), DRIFT_OK);
        long reported = 0;
        for (size_t i = 0; i < rep.n_problems; i++) reported += strstr(rep.problems[i], "is damaged") != NULL;
        assert_int_equal(reported, damaged);
        assert_true(rep.committed_steps >= want);
        drift_trace_check_report_free(&rep);
    }
    unlink(path);
}

static void test_repair_regressions(void **state) {
    (void)state;
    const char *data = getenv("DRIFT_TESTDATA");
    if (!data || !data[0]) skip();
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/regress/repair", data);
    DIR *d = opendir(dir);
    if (!d) return;
    /* names first, so that a failing assertion leaves no open directory */
    static char names[64][256];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 64) {
        size_t l = strlen(e->d_name);
        if (l > 6 && l < sizeof names[0] && strcmp(e->d_name + l - 6, ".h5.gz") == 0 && strstr(e->d_name, ".commits-"))
            snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    }
    closedir(d);
    for (int i = 0; i < n; i++) repair_one(dir, names[i]);
    fprintf(stderr, "repair: %d killed trace(s) repaired with every committed step\n", n);
}

/* A trace cut short as a full disk leaves it (docs/RELIABILITY.md, fixed
 * finding 3): the reader's error and drift_trace_check name the cause and the
 * remedy; drift_trace_repair restores it. Made from the clean seed trace, one
 * byte short of its stored end of file. */
/* Writes a small clean trace (one fp32 site, three committed steps) to path:
 * the seed traces of fuzz/corpus/fuzz_trace are generated, not committed. */
static void write_small_trace(const char *path) {
    drift_err err;
    drift_err_clear(&err);
    drift_trace_meta m;
    memset(&m, 0, sizeof m);
    m.side = DRIFT_TRACE_SIDE_TRAINER;
    m.run_id = "short";
    m.world_size = 1;
    m.family = "tiny-dit:layers=1";
    m.guidance_scale = 1.0;
    m.plan_json = "{}";
    drift_trace_writer *w = NULL;
    assert_int_equal(drift_trace_writer_create(&w, path, &m, &err), DRIFT_OK);
    drift_trace_site_decl a;
    memset(&a, 0, sizeof a);
    a.name = "blocks.0.ffn:out";
    a.dtype = DRIFT_F32;
    a.ndim = 1;
    a.shape[0] = 4;
    a.store_tensors = 1;
    int id = -1;
    assert_int_equal(drift_trace_writer_declare_site(w, &a, &id, &err), DRIFT_OK);
    assert_int_equal(drift_trace_writer_start(w, &err), DRIFT_OK);
    for (int64_t st = 0; st < 3; st++) {
        drift_trace_index ix;
        memset(&ix, 0, sizeof ix);
        ix.step = st;
        ix.denoise_index = -1;
        float x[4] = {0.5f * (float)st, -1.0f, 2.0f, 0.0f};
        assert_int_equal(drift_trace_writer_append(w, id, &ix, x, 1, &err), DRIFT_OK);
        assert_int_equal(drift_trace_writer_commit_step(w, st, 0, &err), DRIFT_OK);
    }
    assert_int_equal(drift_trace_writer_close(w, &err), DRIFT_OK);
}

static void test_short_file(void **state) {
    (void)state;
    const char *tmp = getenv("DRIFT_TMP");
    char from[4096], path[4200];
    snprintf(from, sizeof from, "%s/clean-%ld.h5", tmp && tmp[0] ? tmp : "/tmp", (long)getpid());
    snprintf(path, sizeof path, "%s/short-%ld.h5", tmp && tmp[0] ? tmp : "/tmp", (long)getpid());
    write_small_trace(from);
    size_t len = 0;
    unsigned char *img = read_all(from, &len);
    assert_non_null(img);
    assert_true(len > 1);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(img, 1, len - 1, f), len - 1);
    fclose(f);
    free(img);

    drift_err err;
    drift_err_clear(&err);
    drift_trace_reader *r = NULL;
    assert_int_equal(drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &err), DRIFT_E_INPUT);
    fprintf(stderr, "  reader: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "cut short"));
    assert_non_null(strstr(err.msg, "drift check --repair"));
    drift_trace_check_report rep;
    assert_int_equal(drift_trace_check(path, &rep, &err), DRIFT_OK);
    assert_true(rep.unclean);
    assert_true(rep.cut_short);
    assert_int_equal(rep.n_problems, 1);
    fprintf(stderr, "  check: %s\n", rep.problems[0]);
    assert_non_null(strstr(rep.problems[0], "cut short"));
    assert_non_null(strstr(rep.problems[0], "drift check --repair"));
    drift_trace_check_report_free(&rep);
    int64_t trimmed = 0;
    assert_int_equal(drift_trace_repair(path, &trimmed, &err), DRIFT_OK);
    assert_int_equal(drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, &err), DRIFT_OK);
    size_t n = 0;
    drift_trace_reader_steps(r, &n);
    assert_int_equal(n, 3);
    drift_trace_reader_close(r);
    unlink(path);
    unlink(from);
}

REPLAY_TEST(fuzz_json)
REPLAY_TEST(fuzz_plan)
REPLAY_TEST(fuzz_plan_flags)
REPLAY_TEST(fuzz_params)
REPLAY_TEST(fuzz_family_spec)
REPLAY_TEST(fuzz_specs)
REPLAY_TEST(fuzz_safetensors)
REPLAY_TEST(fuzz_graph)
REPLAY_TEST(fuzz_trace)

int main(void) {
    if (!getenv("DRIFT_SRC") || !getenv("DRIFT_TESTDATA"))
        fprintf(stderr, "note: DRIFT_SRC / DRIFT_TESTDATA unset (run through ctest); nothing to replay\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fuzz_json),        cmocka_unit_test(test_fuzz_plan),
        cmocka_unit_test(test_fuzz_plan_flags),  cmocka_unit_test(test_fuzz_params),
        cmocka_unit_test(test_fuzz_family_spec), cmocka_unit_test(test_fuzz_specs),
        cmocka_unit_test(test_fuzz_safetensors),
        cmocka_unit_test(test_fuzz_graph),       cmocka_unit_test(test_fuzz_trace),
        cmocka_unit_test(test_repair_regressions), cmocka_unit_test(test_short_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
