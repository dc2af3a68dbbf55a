/* Snapshots for prefix reuse (exec.h): ownership and the graph comparison
 * that says how far two assigned graphs are the same. */
#include "replay/exec/exec_snapshot.h"

#include "formats/alloc.h"

#include <string.h>

drift_exec_snapshot *drift_exec_snapshot_alloc(int k, int count) {
    drift_exec_snapshot *s = drift_calloc(1, sizeof *s);
    if (!s) return NULL;
    size_t n = (size_t)(count > 0 ? count : 1);
    s->k = k;
    s->count = count;
    s->ids = drift_calloc(n, sizeof *s->ids);
    s->dtype = drift_calloc(n, sizeof *s->dtype);
    s->numel = drift_calloc(n, sizeof *s->numel);
    s->f32 = drift_calloc(n, sizeof *s->f32);
    s->f64 = drift_calloc(n, sizeof *s->f64);
    if (!s->ids || !s->dtype || !s->numel || !s->f32 || !s->f64) {
        drift_exec_snapshot_free(s);
        return NULL;
    }
    return s;
}

void drift_exec_snapshot_free(drift_exec_snapshot *s) {
    if (!s) return;
    for (int i = 0; i < s->count; i++) {
        if (s->f32) drift_free(s->f32[i]);
        if (s->f64) drift_free(s->f64[i]);
    }
    drift_free(s->ids);
    drift_free(s->dtype);
    drift_free(s->numel);
    drift_free(s->f32);
    drift_free(s->f64);
    drift_free(s);
}

size_t drift_exec_snapshot_bytes(const drift_exec_snapshot *s) { return s ? s->bytes : 0; }
int drift_exec_snapshot_boundary(const drift_exec_snapshot *s) { return s ? s->k : -1; }

int drift_exec_snapshot_find(const drift_exec_snapshot *s, int id) {
    int lo = 0, hi = s->count - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (s->ids[mid] == id) return mid;
        if (s->ids[mid] < id) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

static int str_eq(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

/* Every field that decides a value's bits, given the same host sets. The op
 * is compared bytewise (padding included): a false difference only makes the
 * reused prefix shorter. */
static int same_value(const drift_value *a, const drift_value *b) {
    if (a->kind != b->kind || !str_eq(a->name, b->name) || a->ndim != b->ndim || a->numel != b->numel ||
        a->dtype != b->dtype || memcmp(a->shape, b->shape, sizeof a->shape) != 0)
        return 0;
    if (a->kind != DRIFT_VAL_NODE) return 1;
    return memcmp(&a->op, &b->op, sizeof a->op) == 0 && memcmp(a->in, b->in, sizeof a->in) == 0;
}

int drift_exec_first_difference(const drift_graph *a, const drift_graph *b) {
    int na = drift_graph_count(a), nb = drift_graph_count(b);
    int n = na < nb ? na : nb;
    for (int i = 0; i < n; i++)
        if (!same_value(drift_graph_value(a, i), drift_graph_value(b, i))) return i;
    return n;
}
