/* Structural keys of a graph's values (exec_keys.h): what lets a device cache
 * hand a value computed for one graph to another graph that computes the same
 * thing (bisect's probes: one graph per plan, nearly all parameters cast the
 * same way in each). */
#include "replay/exec/exec_keys.h"

#include <string.h>

static uint64_t mix(uint64_t h, uint64_t x) {
    /* FNV-1a over the 8 bytes of x, then a final avalanche step (splitmix64) */
    for (int i = 0; i < 8; i++) {
        h ^= (x >> (8 * i)) & 0xffu;
        h *= 0x100000001b3ull;
    }
    h ^= h >> 31;
    h *= 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

static uint64_t mix_f64(uint64_t h, double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return mix(h, u);
}

static uint64_t mix_str(uint64_t h, const char *s) {
    if (!s) return mix(h, 0x5eedull);
    for (; *s; s++) h = mix(h, (unsigned char)*s);
    return mix(h, 0xffull);
}

/* Every attribute of op that a kernel reads (field by field: the struct's
 * padding is not part of the key). */
static uint64_t mix_op(uint64_t h, const drift_op *op) {
    h = mix(h, (uint64_t)op->kind);
    h = mix(h, (uint64_t)op->compute);
    h = mix(h, (uint64_t)op->out);
    h = mix(h, (uint64_t)op->n_in);
    h = mix_f64(h, op->eps);
    h = mix_f64(h, op->alpha);
    h = mix_f64(h, op->beta);
    h = mix_f64(h, op->scale);
    h = mix(h, (uint64_t)op->layout);
    h = mix_f64(h, op->max_period);
    h = mix(h, (uint64_t)op->flip_sin_to_cos);
    h = mix(h, (uint64_t)op->dim);
    h = mix(h, (uint64_t)op->start);
    h = mix(h, (uint64_t)op->length);
    for (int d = 0; d < DRIFT_MAX_DIMS; d++) h = mix(h, (uint64_t)op->perm[d]);
    for (int d = 0; d < 3; d++) h = mix(h, (uint64_t)op->patch[d]);
    h = mix(h, (uint64_t)op->sub);
    h = mix_f64(h, op->scalar);
    h = mix_f64(h, op->step);
    for (int d = 0; d < DRIFT_MAX_DIMS; d++) h = mix(h, (uint64_t)op->stride[d]);
    return h;
}

void drift_exec_value_keys(const drift_graph *g, uint64_t *keys) {
    const int n = drift_graph_count(g);
    for (int i = 0; i < n; i++) {
        const drift_value *v = drift_graph_value(g, i);
        uint64_t h = mix(0xcbf29ce484222325ull, (uint64_t)v->kind);
        h = mix(h, (uint64_t)v->dtype);
        h = mix(h, (uint64_t)v->ndim);
        for (int d = 0; d < v->ndim; d++) h = mix(h, (uint64_t)v->shape[d]);
        if (v->kind == DRIFT_VAL_NODE) {
            h = mix_op(h, &v->op);
            for (int k = 0; k < v->op.n_in; k++) h = mix(h, keys[v->in[k]]);
        } else {
            h = mix_str(h, v->name); /* a leaf is its name: the same parameter, buffer or input */
        }
        keys[i] = h;
    }
}
