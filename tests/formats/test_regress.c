/* Fuzzing regressions: replays every input in tests/data/regress/<harness>/
 * (crashes and property violations found by fuzz/run.sh) and every seed in
 * fuzz/corpus/<harness>/ through the same code as the libFuzzer harness: the
 * harness sources are compiled in here, so a parser that crashes, leaks
 * (under the ASan build) or breaks a harness property (e.g. a serialised
 * plan that does not parse back) fails this test. Each file must come back
 * cleanly: DRIFT_OK or a documented error code. */
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

REPLAY_TEST(fuzz_json)
REPLAY_TEST(fuzz_plan)
REPLAY_TEST(fuzz_plan_flags)
REPLAY_TEST(fuzz_params)
REPLAY_TEST(fuzz_family_spec)
REPLAY_TEST(fuzz_safetensors)
REPLAY_TEST(fuzz_graph)
REPLAY_TEST(fuzz_trace)

int main(void) {
    if (!getenv("DRIFT_SRC") || !getenv("DRIFT_TESTDATA"))
        fprintf(stderr, "note: DRIFT_SRC / DRIFT_TESTDATA unset (run through ctest); nothing to replay\n");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fuzz_json),        cmocka_unit_test(test_fuzz_plan),
        cmocka_unit_test(test_fuzz_plan_flags),  cmocka_unit_test(test_fuzz_params),
        cmocka_unit_test(test_fuzz_family_spec), cmocka_unit_test(test_fuzz_safetensors),
        cmocka_unit_test(test_fuzz_graph),       cmocka_unit_test(test_fuzz_trace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
