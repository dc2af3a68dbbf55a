/* drift's allocator wrappers, with a fault-injection hook for tests
 * (DESIGN.md s10: "fault-injecting allocators", as in SQLite and Redis).
 *
 * Library code that wants its out-of-memory paths tested allocates through
 * drift_malloc / drift_calloc / drift_realloc / drift_strdup and releases
 * through drift_free (which is free(): memory from either side may be
 * released by the other, so converting a module can be done call site by
 * call site). In production the wrappers cost one relaxed atomic load.
 *
 * Semantics that differ from the C library, so that NULL always means
 * failure: a request for 0 bytes allocates 1 byte; drift_realloc(p, 0)
 * returns a 1-byte block (it never frees p and returns NULL). On failure
 * (real or injected) the wrappers return NULL, set errno to ENOMEM and, for
 * drift_realloc, leave p untouched and owned by the caller.
 *
 * Fault injection (tests only; thread-safe, lock-free):
 *
 *     for (long n = 0;; n++) {
 *         drift_alloc_fail_after(n);          // the n-th allocation from now fails
 *         int rc = operation_under_test(...);
 *         long hit = drift_alloc_injected();  // failures injected since arming
 *         drift_alloc_fail_after(-1);         // disarm
 *         if (hit == 0) { assert rc == DRIFT_OK; break; }  // ran past every allocation
 *         assert rc == DRIFT_E_NOMEM (and nothing leaked: ASan's leak check)
 *     }
 *
 * Allocations are counted across all threads in the order they reach the
 * counter; with one thread the sequence is deterministic. */
#ifndef DRIFT_FORMATS_ALLOC_H
#define DRIFT_FORMATS_ALLOC_H

#include <stddef.h>

/* Returns a new block the caller owns (drift_free), or NULL. */
void *drift_malloc(size_t n);
/* Zeroed array of n elements of size bytes; NULL on failure or n*size overflow. */
void *drift_calloc(size_t n, size_t size);
/* Resizes p (NULL allowed: like drift_malloc). On failure returns NULL and p
 * stays valid and owned by the caller. */
void *drift_realloc(void *p, size_t n);
/* Resizes p to n * size bytes, checking the product for overflow. */
void *drift_reallocarray(void *p, size_t n, size_t size);
/* Makes room for one more element in a growable array (*arr of *cap elements of
 * size bytes, n in use): when n == *cap it doubles the capacity (first when 0)
 * through drift_realloc. 0 on success; -1 on failure, *arr and *cap untouched
 * (the caller still owns *arr). */
int drift_grow(void **arr, size_t *cap, size_t n, size_t size, size_t first);
/* Copies of a NUL-terminated string / of at most n bytes of s (always
 * NUL-terminated); owned by the caller (drift_free). NULL s gives NULL. */
char *drift_strdup(const char *s);
char *drift_strndup(const char *s, size_t n);
/* free(p); NULL allowed. */
void drift_free(void *p);

/* Test hook: the n-th allocation from now fails (n = 0: the very next one);
 * every other allocation succeeds. n < 0 disarms. Resets the injected count. */
void drift_alloc_fail_after(long n);
/* Like drift_alloc_fail_after, but with sticky != 0 every allocation from the
 * n-th on fails too (a persistent out-of-memory condition). */
void drift_alloc_fail_after_ex(long n, int sticky);
/* Failures injected since the last drift_alloc_fail_after*() call. */
long drift_alloc_injected(void);
/* Allocation calls (successful or not) through the wrappers since process
 * start, over all threads. */
long drift_alloc_count(void);

#endif
