/* Shared helpers of the libFuzzer harnesses (fuzz/build.sh). A harness
 * returns 0 for every input; a property violation is reported with
 * FUZZ_CHECK, which aborts so that libFuzzer saves the input. */
#ifndef DRIFT_FUZZ_COMMON_H
#define DRIFT_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/err.h"

#ifdef DRIFT_FUZZ_IN_TEST
/* Compiled into tests/formats/test_regress.c (cmocka): a violation fails the
 * running test instead of aborting the process. */
#define FUZZ_CHECK(cond, ...)                                                          \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "fuzz property violated at %s:%d: %s\n  ", __FILE__, __LINE__, \
                    #cond);                                                            \
            fprintf(stderr, __VA_ARGS__);                                              \
            fprintf(stderr, "\n");                                                     \
            fail_msg("fuzz property violated: %s", #cond);                             \
        }                                                                              \
    } while (0)
#else
#define FUZZ_CHECK(cond, ...)                                                          \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "fuzz property violated at %s:%d: %s\n  ", __FILE__, __LINE__, \
                    #cond);                                                            \
            fprintf(stderr, __VA_ARGS__);                                              \
            fprintf(stderr, "\n");                                                     \
            abort();                                                                   \
        }                                                                              \
    } while (0)
#endif

/* A parser's status must be one of the documented codes; DRIFT_E_INTERNAL
 * (a bug in drift) and anything else is a finding. */
static inline int fuzz_status_ok(int rc) {
    return rc == DRIFT_OK || rc == DRIFT_E_INPUT || rc == DRIFT_E_USAGE || rc == DRIFT_E_NOMEM ||
           rc == DRIFT_E_UNSUPPORTED || rc == DRIFT_E_IO;
}

/* FUZZ_VERBOSE=1 in the environment: print each input's parse status (to
 * check that seeds are valid inputs). */
static inline void fuzz_report(const char *what, int rc, const drift_err *err) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("FUZZ_VERBOSE") && getenv("FUZZ_VERBOSE")[0] == '1';
    if (verbose) fprintf(stderr, "%s: rc %d%s%s%s%s\n", what, rc, rc ? " " : "", rc ? err->where : "", rc ? ": " : "",
                         rc ? err->msg : "");
}

/* A NUL-terminated copy (malloc'd) of data. */
static inline char *fuzz_cstr(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    if (size) memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

#endif
