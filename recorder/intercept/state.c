/* The interposer's in-memory census: two bounded hash tables (GEMM and
 * collective rows, keyed by every field before the counters), the
 * communicator table with per-communicator sequence numbers, the notes and
 * the once-only reporting. Allocated once at load; the hot path only
 * hashes, probes at most ICPT_PROBE slots and adds counters under a mutex. */
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "recorder/intercept/intercept.h"

#define ICPT_PROBE 64        /* longest probe sequence; past it the call is dropped */
#define ICPT_DEFAULT_ROWS 4096
#define ICPT_MAX_ROWS 1000000
#define ICPT_MAX_COMMS 256

typedef struct icpt_table {
    pthread_mutex_t mu;
    size_t rsz, key_sz;       /* row size; bytes of the key prefix */
    size_t cap, n;            /* rows allocated / used (first-seen order) */
    size_t nslots;            /* power of two, >= 2 cap */
    unsigned char *rows;      /* owned: cap rows */
    uint32_t *slots;          /* owned: row index + 1, 0 = empty */
    int64_t calls, dropped;
} icpt_table;

typedef struct icpt_comm {
    const void *comm;
    int64_t seq;              /* next collective sequence number */
} icpt_comm;

static struct {
    int enabled;
    icpt_table gemm, coll;
    pthread_mutex_t comm_mu;
    icpt_comm comms[ICPT_MAX_COMMS];
    int n_comms;
    atomic_llong gemm_seq;
    atomic_llong nested;
    pthread_mutex_t notes_mu;
    char notes[DRIFT_CENSUS_NOTES_MAX];
    size_t notes_len;
    double t0;
    pid_t pid;
} g = {.comm_mu = PTHREAD_MUTEX_INITIALIZER, .notes_mu = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local int tl_depth;

int icpt_enabled(void) { return g.enabled; }

int icpt_enter(void) {
    if (tl_depth++ == 0) return 1;
    atomic_fetch_add_explicit(&g.nested, 1, memory_order_relaxed);
    return 0;
}

void icpt_leave(void) {
    if (tl_depth > 0) tl_depth--;
}

/* ---- notes and reporting ------------------------------------------------ */
static void vnote(const char *fmt, va_list ap) {
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    pthread_mutex_lock(&g.notes_mu);
    size_t len = strlen(line);
    if (g.notes_len + len + 2 < sizeof g.notes) {
        memcpy(g.notes + g.notes_len, line, len);
        g.notes_len += len;
        g.notes[g.notes_len++] = '\n';
        g.notes[g.notes_len] = '\0';
    }
    pthread_mutex_unlock(&g.notes_mu);
}

void icpt_note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vnote(fmt, ap);
    va_end(ap);
}

void icpt_report_once(atomic_int *flag, const char *fmt, ...) {
    int expected = 0;
    if (flag && !atomic_compare_exchange_strong(flag, &expected, 1)) return;
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "drift intercept: %s\n", line);
    icpt_note("%s", line);
}

/* ---- tables --------------------------------------------------------------- */
static int table_init(icpt_table *t, size_t rsz, size_t key_sz, size_t cap) {
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    t->rsz = rsz;
    t->key_sz = key_sz;
    t->cap = cap;
    t->nslots = 1;
    while (t->nslots < 2 * cap) t->nslots <<= 1;
    t->rows = calloc(cap, rsz);
    t->slots = calloc(t->nslots, sizeof *t->slots);
    return t->rows && t->slots ? 0 : -1;
}

static uint64_t hash_key(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* Returns the row for key (a full row whose key prefix is set), inserting a
 * copy of it; NULL when the table is full. Caller holds t->mu. */
static unsigned char *table_find(icpt_table *t, const void *key) {
    uint64_t h = hash_key(key, t->key_sz);
    size_t mask = t->nslots - 1;
    for (size_t p = 0; p < ICPT_PROBE; p++) {
        size_t s = (size_t)(h + p) & mask;
        uint32_t v = t->slots[s];
        if (v == 0) {
            if (t->n >= t->cap) return NULL;
            unsigned char *row = t->rows + t->n * t->rsz;
            memcpy(row, key, t->rsz);
            t->slots[s] = (uint32_t)(++t->n);
            return row;
        }
        unsigned char *row = t->rows + (size_t)(v - 1) * t->rsz;
        if (memcmp(row, key, t->key_sz) == 0) return row;
    }
    return NULL;
}

static size_t env_rows(void) {
    const char *s = getenv("DRIFT_INTERCEPT_MAX_ROWS");
    if (!s || !*s) return ICPT_DEFAULT_ROWS;
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 1 || v > ICPT_MAX_ROWS) {
        fprintf(stderr, "drift intercept: DRIFT_INTERCEPT_MAX_ROWS='%s' ignored (expected 1..%d)\n", s, ICPT_MAX_ROWS);
        return ICPT_DEFAULT_ROWS;
    }
    return (size_t)v;
}

static void on_fork_child(void) {
    /* A forked child (a DataLoader worker) inherits the parent's census: it
     * must not write it again under the parent's name. */
    g.enabled = 0;
}

void icpt_state_init(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    g.t0 = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    g.pid = getpid();
    const char *on = getenv("DRIFT_INTERCEPT");
    if (on && strcmp(on, "0") == 0) return;
    size_t cap = env_rows();
    if (table_init(&g.gemm, sizeof(drift_census_gemm), offsetof(drift_census_gemm, calls), cap) ||
        table_init(&g.coll, sizeof(drift_census_coll), offsetof(drift_census_coll, calls), cap)) {
        fprintf(stderr, "drift intercept: out of memory for %zu census rows: recording disabled\n", cap);
        return;
    }
    pthread_atfork(NULL, NULL, on_fork_child);
    g.enabled = 1;
}


/* ---- recording -------------------------------------------------------------- */
/* The counters that end both row kinds, in this order (checked below). */
typedef struct icpt_counters {
    int64_t calls, failed, bytes, first_seq, last_seq;
} icpt_counters;
_Static_assert(offsetof(drift_census_gemm, last_seq) - offsetof(drift_census_gemm, calls) ==
                   offsetof(icpt_counters, last_seq), "drift_census_gemm counters out of order");
_Static_assert(offsetof(drift_census_coll, last_seq) - offsetof(drift_census_coll, calls) ==
                   offsetof(icpt_counters, last_seq), "drift_census_coll counters out of order");

/* Counts one call of the signature in key (its counters, at byte offset
 * off, zeroed here: they are not part of the signature) into t. Returns 0
 * when the table was full and the call is counted as dropped. */
static int table_count(icpt_table *t, unsigned char *key, size_t off, int64_t seq, int failed) {
    icpt_counters *k = (icpt_counters *)(key + off);
    int64_t bytes = k->bytes;
    memset(k, 0, sizeof *k);
    pthread_mutex_lock(&t->mu);
    t->calls++;
    unsigned char *r = table_find(t, key);
    if (r) {
        icpt_counters *c = (icpt_counters *)(r + off);
        if (c->calls == 0) c->first_seq = seq;
        c->calls++;
        c->failed += failed ? 1 : 0;
        c->bytes += bytes;
        c->last_seq = seq;
    } else {
        t->dropped++;
    }
    pthread_mutex_unlock(&t->mu);
    return r != NULL;
}

void icpt_record_gemm(drift_census_gemm *row, int failed) {
    if (!g.enabled) return;
    int64_t seq = (int64_t)atomic_fetch_add_explicit(&g.gemm_seq, 1, memory_order_relaxed);
    if (!table_count(&g.gemm, (unsigned char *)row, offsetof(drift_census_gemm, calls), seq, failed)) {
        static atomic_int rep;
        icpt_report_once(&rep, "the GEMM census table is full (%zu rows, DRIFT_INTERCEPT_MAX_ROWS): further new "
                               "signatures are counted as dropped", g.gemm.cap);
    }
}

void icpt_record_coll(drift_census_coll *row, const void *comm, int failed) {
    if (!g.enabled) return;
    int64_t seq = -1;
    pthread_mutex_lock(&g.comm_mu);
    int idx = -1;
    if (comm) {
        for (int i = 0; i < g.n_comms; i++)
            if (g.comms[i].comm == comm) {
                idx = i;
                break;
            }
        if (idx < 0 && g.n_comms < ICPT_MAX_COMMS) {
            idx = g.n_comms++;
            g.comms[idx].comm = comm;
            g.comms[idx].seq = 0;
        }
        if (idx >= 0) seq = g.comms[idx].seq++;
    }
    pthread_mutex_unlock(&g.comm_mu);
    row->comm = idx;
    if (!table_count(&g.coll, (unsigned char *)row, offsetof(drift_census_coll, calls), seq, failed)) {
        static atomic_int rep;
        icpt_report_once(&rep, "the collective census table is full (%zu rows): further new signatures are "
                               "counted as dropped", g.coll.cap);
    }
}

/* ---- snapshot --------------------------------------------------------------- */
static void *copy_rows(icpt_table *t, size_t *n, int64_t *calls, int64_t *dropped) {
    void *p = NULL;
    pthread_mutex_lock(&t->mu);
    *n = t->n;
    *calls = t->calls;
    *dropped = t->dropped;
    if (t->n) {
        p = malloc(t->n * t->rsz);
        if (p) memcpy(p, t->rows, t->n * t->rsz);
    }
    pthread_mutex_unlock(&t->mu);
    if (*n && !p) *n = 0;
    return p;
}

int icpt_snapshot(drift_census *out) {
    memset(out, 0, sizeof *out);
    if (!g.enabled && !g.gemm.rows) return -1;
    void *gp = copy_rows(&g.gemm, &out->n_gemm, &out->info.gemm_calls, &out->info.gemm_dropped);
    void *cp = copy_rows(&g.coll, &out->n_coll, &out->info.coll_calls, &out->info.coll_dropped);
    out->gemm = gp;
    out->coll = cp;
    out->info.nested_skipped = (int64_t)atomic_load(&g.nested);
    out->info.nvtx_ranges = icpt_nvtx_ranges();
    out->info.nvtx_injected = icpt_nvtx_injected();
    out->info.pid = (int64_t)g.pid;
    out->info.time_start = g.t0;
    pthread_mutex_lock(&g.notes_mu);
    memcpy(out->info.notes, g.notes, sizeof out->info.notes);
    pthread_mutex_unlock(&g.notes_mu);
    return 0;
}
