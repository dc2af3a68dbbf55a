/* Host tensor sets (exec.h): named tensors of fp32 values, found by name
 * through an open-addressing table. */
#include "replay/exec/exec.h"

#include "formats/alloc.h"

#include <string.h>

/* ---- host tensor sets ------------------------------------------------------ */

struct drift_hostset {
    drift_host_tensor **items;
    size_t n, cap;
    size_t *slots;      /* index + 1, 0 empty; open addressing */
    size_t n_slots;     /* power of two */
};

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

int drift_hostset_create(drift_hostset **out, drift_err *err) {
    if (!out) return drift_err_set(err, DRIFT_E_INTERNAL, "hostset", "drift_hostset_create: out is NULL");
    *out = drift_calloc(1, sizeof **out);
    if (!*out) return drift_err_set(err, DRIFT_E_NOMEM, "hostset", "out of memory");
    return DRIFT_OK;
}

static void host_tensor_free(drift_host_tensor *t) {
    if (!t) return;
    drift_free((char *)t->name);
    drift_free(t->f32);
    drift_free(t->f64);
    drift_free(t);
}

void drift_hostset_free(drift_hostset *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) host_tensor_free(s->items[i]);
    drift_free(s->items);
    drift_free(s->slots);
    drift_free(s);
}

static size_t *find_slot(const drift_hostset *s, const char *name) {
    if (!s->n_slots) return NULL;
    size_t mask = s->n_slots - 1, i = (size_t)hash_str(name) & mask;
    for (;;) {
        size_t *sl = &s->slots[i];
        if (*sl == 0 || strcmp(s->items[*sl - 1]->name, name) == 0) return sl;
        i = (i + 1) & mask;
    }
}

const drift_host_tensor *drift_hostset_find(const drift_hostset *s, const char *name) {
    if (!s || !name) return NULL;
    size_t *sl = find_slot(s, name);
    return (sl && *sl) ? s->items[*sl - 1] : NULL;
}

size_t drift_hostset_count(const drift_hostset *s) { return s ? s->n : 0; }
const drift_host_tensor *drift_hostset_at(const drift_hostset *s, size_t i) {
    return (s && i < s->n) ? s->items[i] : NULL;
}

static int rehash(drift_hostset *s, size_t want) {
    size_t ns = s->n_slots ? s->n_slots : 64;
    while (ns < want * 2) ns *= 2;
    if (ns == s->n_slots) return 0;
    size_t *old = s->slots, old_n = s->n_slots;
    s->slots = drift_calloc(ns, sizeof *s->slots);
    if (!s->slots) {
        s->slots = old;
        return -1;
    }
    s->n_slots = ns;
    for (size_t i = 0; i < old_n; i++)
        if (old[i]) *find_slot(s, s->items[old[i] - 1]->name) = old[i];
    drift_free(old);
    return 0;
}

/* The shared part of the two adds: checks, allocates and inserts. */
static int hostset_insert(drift_hostset *s, const char *name, drift_dtype dtype, int ndim, const int64_t *shape,
                          int with_f64, drift_host_tensor **added, drift_err *err) {
    if (!s || !name || !*name)
        return drift_err_set(err, DRIFT_E_INPUT, "hostset", "drift_hostset_add: a set and a name are required");
    if (dtype != DRIFT_F32 && dtype != DRIFT_BF16 && dtype != DRIFT_F16 && dtype != DRIFT_F64)
        return drift_err_set(err, DRIFT_E_INPUT, name, "host tensor '%s': expected a float dtype", name);
    if (ndim < 0 || ndim > DRIFT_MAX_DIMS || (ndim && !shape))
        return drift_err_set(err, DRIFT_E_INPUT, name, "host tensor '%s': ndim must be in 0..%d", name, DRIFT_MAX_DIMS);
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1 || shape[i] > DRIFT_GRAPH_MAX_DIM || numel > DRIFT_GRAPH_MAX_NUMEL / shape[i])
            return drift_err_set(err, DRIFT_E_INPUT, name,
                                 "host tensor '%s': dims must be in 1..2^40 with at most 2^48 elements", name);
        numel *= shape[i];
    }
    if (drift_hostset_find(s, name))
        return drift_err_set(err, DRIFT_E_INPUT, name, "host tensor '%s' given twice", name);
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        drift_host_tensor **ni = drift_realloc(s->items, nc * sizeof *ni);
        if (!ni) return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory");
        s->items = ni;
        s->cap = nc;
    }
    if (rehash(s, s->n + 1)) return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory");
    drift_host_tensor *t = drift_calloc(1, sizeof *t);
    if (!t) return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory");
    t->name = drift_strdup(name);
    t->f32 = drift_malloc((size_t)numel * sizeof *t->f32);
    t->f64 = with_f64 ? drift_malloc((size_t)numel * sizeof *t->f64) : NULL;
    if (!t->name || !t->f32 || (with_f64 && !t->f64)) {
        host_tensor_free(t);
        return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory for host tensor '%s'", name);
    }
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->numel = numel;
    s->items[s->n] = t;
    *find_slot(s, name) = s->n + 1;
    s->n++;
    *added = t;
    return DRIFT_OK;
}

int drift_hostset_add(drift_hostset *s, const char *name, drift_dtype dtype, int ndim, const int64_t *shape,
                      const float *f32, const double *f64, drift_host_tensor **added, drift_err *err) {
    if (!f32)
        return drift_err_set(err, DRIFT_E_INPUT, "hostset", "drift_hostset_add: a set, a name and fp32 values are required");
    drift_host_tensor *t = NULL;
    int rc = hostset_insert(s, name, dtype, ndim, shape, f64 != NULL, &t, err);
    if (rc) return rc;
    memcpy(t->f32, f32, (size_t)t->numel * sizeof *t->f32);
    drift_dtype_round_n(t->f32, (size_t)t->numel, dtype);
    if (f64) memcpy(t->f64, f64, (size_t)t->numel * sizeof *t->f64);
    if (added) *added = t;
    return DRIFT_OK;
}

int drift_hostset_add_alloc(drift_hostset *s, const char *name, drift_dtype dtype, int ndim, const int64_t *shape,
                            drift_host_tensor **added, drift_err *err) {
    drift_host_tensor *t = NULL;
    int rc = hostset_insert(s, name, dtype, ndim, shape, 0, &t, err);
    if (!rc && added) *added = t;
    return rc;
}
