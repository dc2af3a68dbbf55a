#include "formats/alloc.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* countdown >= 0: that many more allocations succeed, then one fails.
 * countdown < 0: disarmed. sticky: once at 0, stay there. */
static _Atomic long g_countdown = -1;
static atomic_int g_sticky = 0;
static _Atomic long g_injected = 0;
static _Atomic long g_count = 0;

static int should_fail(void) {
    atomic_fetch_add_explicit(&g_count, 1, memory_order_relaxed);
    long v = atomic_load_explicit(&g_countdown, memory_order_acquire);
    while (v >= 0) {
        if (v == 0) {
            if (atomic_load_explicit(&g_sticky, memory_order_relaxed) ||
                atomic_compare_exchange_weak_explicit(&g_countdown, &v, -1, memory_order_acq_rel,
                                                      memory_order_acquire)) {
                atomic_fetch_add_explicit(&g_injected, 1, memory_order_relaxed);
                errno = ENOMEM;
                return 1;
            }
        } else if (atomic_compare_exchange_weak_explicit(&g_countdown, &v, v - 1, memory_order_acq_rel,
                                                         memory_order_acquire)) {
            return 0;
        }
    }
    return 0;
}

void *drift_malloc(size_t n) {
    if (should_fail()) return NULL;
    return malloc(n ? n : 1);
}

void *drift_calloc(size_t n, size_t size) {
    if (should_fail()) return NULL;
    if (n == 0 || size == 0) return calloc(1, 1);
    if (n > SIZE_MAX / size) { /* checked here: sanitizers treat it as a fatal error */
        errno = ENOMEM;
        return NULL;
    }
    return calloc(n, size);
}

void *drift_realloc(void *p, size_t n) {
    if (should_fail()) return NULL;
    return realloc(p, n ? n : 1);
}

void *drift_reallocarray(void *p, size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    return drift_realloc(p, n * size);
}

int drift_grow(void **arr, size_t *cap, size_t n, size_t size, size_t first) {
    if (n < *cap) return 0;
    size_t nc = *cap ? 2 * *cap : (first ? first : 1);
    void *na = drift_reallocarray(*arr, nc, size);
    if (!na) return -1;
    *arr = na;
    *cap = nc;
    return 0;
}

char *drift_strndup(const char *s, size_t n) {
    if (!s) return NULL;
    size_t len = 0;
    while (len < n && s[len]) len++;
    char *d = drift_malloc(len + 1);
    if (!d) return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

char *drift_strdup(const char *s) {
    if (!s) return NULL;
    return drift_strndup(s, strlen(s));
}

void drift_free(void *p) { free(p); }

void drift_alloc_fail_after_ex(long n, int sticky) {
    atomic_store_explicit(&g_countdown, -1, memory_order_release);
    atomic_store_explicit(&g_injected, 0, memory_order_relaxed);
    atomic_store_explicit(&g_sticky, sticky ? 1 : 0, memory_order_relaxed);
    atomic_store_explicit(&g_countdown, n < 0 ? -1 : n, memory_order_release);
}

void drift_alloc_fail_after(long n) { drift_alloc_fail_after_ex(n, 0); }

long drift_alloc_injected(void) { return atomic_load_explicit(&g_injected, memory_order_relaxed); }

long drift_alloc_count(void) { return atomic_load_explicit(&g_count, memory_order_relaxed); }
