/* Staging: one byte ring (the arena tensors are copied into) and one ring of
 * queue entries describing them. Allocation happens at the tail, in the
 * order the entries are queued; the writer thread frees at the head, in the
 * same order, so a ring is exact: no fragmentation, O(1) both ways. An
 * allocation that does not fit before the end of the arena wraps to its
 * start and is charged the unused tail, which comes back when it is freed.
 * The caller holds the recorder's mutex around every call. */
#include <stdlib.h>
#include <string.h>

#include "recorder/recorder_internal.h"
#include "formats/alloc.h"

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

int drift_rec_staging_init(rec_staging *s, size_t bytes, size_t max_records, drift_err *err) {
    memset(s, 0, sizeof *s);
    if (bytes < 4096 || max_records < 1)
        return drift_err_set(err, DRIFT_E_USAGE, "staging", "expected at least 4096 bytes and 1 record");
    bytes = round_up(bytes, 4096);
    void *p = NULL;
    /* Page-aligned so that cudaHostRegister can pin it later; untouched pages
     * cost nothing until a capture uses them. */
    if (posix_memalign(&p, 4096, bytes) != 0 || !p)
        return drift_err_set(err, DRIFT_E_NOMEM, "staging", "cannot allocate %zu bytes of staging", bytes);
    s->base = p;
    s->cap = bytes;
    s->max_records = max_records;
    s->qcap = max_records + REC_CONTROL_RESERVE;
    s->q = drift_calloc(s->qcap, sizeof *s->q);
    if (!s->q) {
        free(s->base);
        memset(s, 0, sizeof *s);
        return drift_err_set(err, DRIFT_E_NOMEM, "staging", "cannot allocate %zu queue entries", max_records);
    }
    return DRIFT_OK;
}

void drift_rec_staging_free(rec_staging *s) {
    if (!s) return;
    while (s->q && s->qcount) drift_rec_staging_pop(s);
    free(s->q);
    free(s->base);
    memset(s, 0, sizeof *s);
}

int drift_rec_staging_too_big(const rec_staging *s, size_t len) { return round_up(len, REC_ALIGN) > s->cap; }

/* Byte ring: returns the offset and the charge, or -1 if it does not fit. */
static int ring_alloc(rec_staging *s, size_t n, size_t *off, size_t *charge) {
    if (n == 0) {
        *off = 0;
        *charge = 0;
        return 0;
    }
    if (n > s->cap) return -1;
    if (s->used == 0) s->head = s->tail = 0;
    if (s->used == 0 || s->head > s->tail) {
        /* free: [head, cap) and [0, tail) */
        if (s->cap - s->head >= n) {
            *off = s->head;
            *charge = n;
        } else if (s->tail >= n && s->used > 0) {
            *off = 0;
            *charge = (s->cap - s->head) + n;
        } else {
            return -1;
        }
    } else if (s->head < s->tail) {
        /* free: [head, tail) */
        if (s->tail - s->head < n) return -1;
        *off = s->head;
        *charge = n;
    } else {
        return -1; /* head == tail with used > 0: full */
    }
    s->head = *off + n;
    s->used += *charge;
    if (s->used > s->high) s->high = s->used;
    return 0;
}

rec_entry *drift_rec_staging_reserve(rec_staging *s, size_t len, int control, void **dst) {
    if (dst) *dst = NULL;
    size_t limit = control ? s->qcap : s->max_records;
    if (s->qcount >= limit) return NULL;
    size_t n = round_up(len, REC_ALIGN), off = 0, charge = 0;
    if (ring_alloc(s, n, &off, &charge) != 0) return NULL;
    rec_entry *e = &s->q[(s->qhead + s->qcount) % s->qcap];
    memset(e, 0, sizeof *e);
    e->off = off;
    e->len = len;
    e->charge = charge;
    s->qcount++;
    if (dst && len) *dst = s->base + off;
    return e;
}

rec_entry *drift_rec_staging_head(rec_staging *s) { return s->qcount ? &s->q[s->qhead] : NULL; }

void drift_rec_staging_pop(rec_staging *s) {
    if (!s->qcount) return;
    rec_entry *e = &s->q[s->qhead];
    if (e->charge) {
        s->tail += e->charge;
        if (s->tail >= s->cap) s->tail -= s->cap;
        s->used -= e->charge;
        if (s->used == 0) s->head = s->tail = 0;
    }
    free(e->aux);
    memset(e, 0, sizeof *e);
    s->qhead = (s->qhead + 1) % s->qcap;
    s->qcount--;
}
