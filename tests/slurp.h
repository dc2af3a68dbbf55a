/* Test helper (header only): a whole file read into memory. */
#ifndef DRIFT_TESTS_SLURP_H
#define DRIFT_TESTS_SLURP_H

#include <stdio.h>
#include <stdlib.h>

/* The bytes of path, NUL-terminated, *len their count (0 on failure); NULL when the file
 * cannot be opened or memory runs out. Caller frees. */
static inline char *test_slurp(const char *path, size_t *len) {
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!b) {
        fclose(f);
        return NULL;
    }
    if (fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
    fclose(f);
    b[n] = 0;
    *len = (size_t)n;
    return b;
}

#endif
