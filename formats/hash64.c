/* drift-sum64 on the CPU (hash64.h). */
#include "formats/hash64.h"

#include <pthread.h>
#include <string.h>

uint64_t drift_hash64_partial(const void *data, size_t n, uint64_t first_word) {
    const unsigned char *p = data;
    uint64_t s = 0, i = first_word;
    size_t full = n / 8;
    for (size_t k = 0; k < full; k++, i++) {
        uint64_t w = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(&w, p + 8 * k, 8);
#else
        for (int b = 7; b >= 0; b--) w = (w << 8) | p[8 * k + (size_t)b]; /* little-endian on any host */
#endif
        s += drift_hash64_fmix(w + (i + 1) * DRIFT_HASH64_GOLDEN);
    }
    if (n % 8) {
        uint64_t w = 0;
        for (size_t b = n % 8; b-- > 0;) w = (w << 8) | p[8 * full + b];
        s += drift_hash64_fmix(w + (i + 1) * DRIFT_HASH64_GOLDEN);
    }
    return s;
}

typedef struct hash_job {
    const unsigned char *p;
    size_t n;
    uint64_t first_word, sum;
} hash_job;

static void *hash_thread(void *arg) {
    hash_job *j = arg;
    j->sum = drift_hash64_partial(j->p, j->n, j->first_word);
    return NULL;
}

#define HASH_MAX_THREADS 64
#define HASH_MIN_PER_THREAD ((size_t)1 << 22) /* below 4 MiB a thread costs more than it saves */

uint64_t drift_hash64(const void *data, size_t n, int threads) {
    if (threads > HASH_MAX_THREADS) threads = HASH_MAX_THREADS;
    if (threads > 1 && n / (size_t)threads < HASH_MIN_PER_THREAD) threads = (int)(n / HASH_MIN_PER_THREAD);
    if (threads <= 1) return drift_hash64_finish(drift_hash64_partial(data, n, 0), n);
    hash_job jobs[HASH_MAX_THREADS];
    pthread_t tid[HASH_MAX_THREADS];
    int started[HASH_MAX_THREADS];
    size_t words = (n + 7) / 8, per = (words + (size_t)threads - 1) / (size_t)threads;
    for (int t = 0; t < threads; t++) {
        size_t w0 = (size_t)t * per, w1 = w0 + per < words ? w0 + per : words;
        size_t b0 = w0 * 8 < n ? w0 * 8 : n, b1 = w1 * 8 < n ? w1 * 8 : n;
        jobs[t] = (hash_job){(const unsigned char *)data + b0, b1 - b0, w0, 0};
        /* a thread that cannot start is done by the caller: same sum */
        started[t] = t > 0 && pthread_create(&tid[t], NULL, hash_thread, &jobs[t]) == 0;
    }
    uint64_t s = 0;
    for (int t = 0; t < threads; t++) {
        if (started[t]) pthread_join(tid[t], NULL);
        else hash_thread(&jobs[t]);
        s += jobs[t].sum;
    }
    return drift_hash64_finish(s, n);
}

void drift_hash64_hex(uint64_t h, char out[17]) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--, h >>= 4) out[i] = hex[h & 15];
    out[16] = '\0';
}

int drift_hash64_parse(const char *s, uint64_t *h) {
    uint64_t v = 0;
    if (!s || strlen(s) != 16) return -1;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = (v << 4) | (uint64_t)d;
    }
    *h = v;
    return 0;
}
