/* Models that take their samples as lists (aten_listin.h; docs/invariance.md "Captured
 * graphs"). WanAnimate2's forward takes hidden_states, condition_latents and
 * encoder_hidden_states as Python lists of per-sample tensors ([C, F, H, W], [L, D]); the capture
 * flattens each into user inputs NAME.0 .. NAME.(N-1) and holds one copy of the per-element code
 * per recorded sample, up to the cat/stack that joins them into a batch. Another batch is a list
 * of another length, with inputs the graph does not have. Here each such list becomes one input
 * NAME of shape [N, ...] that holds the batch in dim 0, and NAME.k becomes select(NAME, 0, k):
 * the per-element code is then a loop over the samples as any other, which aten_unroll.c
 * unrolls at each batch (its copies of element 0's code pick sample J), and invariance builds
 * NAME's rows as it builds any per-sample input's. */
#include "replay/capture/aten_listin.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "formats/json.h"
#include "replay/capture/aten_internal.h"

/* 1 if node i is a user tensor input "NAME.k" (pytree's path of a list element): NAME's length
 * into *len, k into *k. */
static int list_element(const drift_aten_graph *g, int i, size_t *len, long long *k) {
    const aten_node *n = &g->nodes[i];
    const drift_aten_input *in = n->op == ATEN_PLACEHOLDER && n->input >= 0 && n->input < g->n_inputs ? &g->inputs[n->input] : NULL;
    if (!in || in->kind != DRIFT_ATEN_IN_USER || !in->is_tensor || !in->target) return 0;
    const char *dot = strrchr(in->target, '.');
    if (!dot || dot == in->target || !dot[1] || strlen(dot + 1) > 9 || strspn(dot + 1, "0123456789") != strlen(dot + 1))
        return 0;
    *len = (size_t)(dot - in->target);
    *k = atoll(dot + 1);
    return *len < DRIFT_MAX_FQN;
}

static const char *target_of(const drift_aten_graph *g, int i) { return g->inputs[g->nodes[i].input].target; }

/* The node of element k of the list NAME (len bytes), -1 if none. */
static int element(const drift_aten_graph *g, const char *name, size_t len, long long k) {
    for (int i = 0; i < g->n; i++) {
        size_t l;
        long long j;
        if (list_element(g, i, &l, &j) && j == k && l == len && !strncmp(target_of(g, i), name, len)) return i;
    }
    return -1;
}

/* 1 if node k joins `count` tensors along dim 0 (cat or stack). */
static int joins(const drift_aten_graph *g, int k, int count) {
    const aten_node *n = &g->nodes[k];
    if (n->op != ATEN_CALL || (strncmp(n->target, "aten.cat.", 9) && strncmp(n->target, "aten.stack.", 11))) return 0;
    const drift_json_value *a = n->args;
    return a && a->type == DRIFT_JSON_ARRAY && a->n_items && a->items[0].type == DRIFT_JSON_ARRAY &&
           (int64_t)a->items[0].n_items == count &&
           (a->n_items < 2 || (a->items[1].type == DRIFT_JSON_NUMBER && a->items[1].is_int && a->items[1].integer == 0));
}

int drift_aten_list_find(const drift_aten_graph *g, int64_t count, drift_aten_list *out, int cap) {
    int n = 0;
    for (int i = 0; i < g->n; i++) {
        size_t len;
        long long k;
        if (!list_element(g, i, &len, &k)) continue;
        const char *nm = target_of(g, i);
        int seen = 0;
        for (int f = 0; f < n && f < cap && !seen; f++) seen = strlen(out[f].name) == len && !strncmp(out[f].name, nm, len);
        if (seen) continue;
        int members = 0; /* NAME.0 .. NAME.(members - 1), each once */
        for (int j = 0; j < g->n; j++) {
            size_t l;
            long long kk;
            members += list_element(g, j, &l, &kk) && l == len && !strncmp(target_of(g, j), nm, len);
        }
        int whole = 1;
        for (long long e = 0; e < members && whole; e++) whole = element(g, nm, len, e) >= 0;
        if (!whole || (count > 0 && members != count)) continue;
        if (n < cap) {
            memcpy(out[n].name, nm, len);
            out[n].name[len] = 0;
            out[n].count = members;
            out[n].first = element(g, nm, len, 0);
            out[n].join = -1;
        }
        n++;
    }
    if (n > cap) n = cap;
    unsigned char *anc = n ? drift_malloc((size_t)g->n + 1) : NULL;
    if (n && !anc) return -1;
    for (int k = 0; k < g->n; k++) { /* the first join of each list: item i computed from element i */
        for (int f = 0; f < n; f++) {
            if (out[f].join >= 0 || !joins(g, k, out[f].count)) continue;
            const drift_json_value *items = &g->nodes[k].args->items[0];
            int all = 1;
            for (int i = 0; i < out[f].count && all; i++) {
                const drift_json_value *it = &items->items[i];
                const int r = it->type == DRIFT_JSON_OBJECT && it->n_members == 1 && !strcmp(it->members[0].key, "node") &&
                                      it->members[0].value.type == DRIFT_JSON_STRING
                                  ? aten_find(g, it->members[0].value.str) : -1;
                const int el = element(g, out[f].name, strlen(out[f].name), i);
                if (r < 0 || el < 0 || el > r) {
                    all = 0;
                    break;
                }
                aten_ancestors(g, r, anc);
                all = anc[el];
            }
            if (all) out[f].join = k;
        }
    }
    drift_free(anc);
    return n;
}

static const drift_json_value *shape_of(const aten_node *n) {
    const drift_json_value *s = n->val && n->val->type == DRIFT_JSON_OBJECT ? drift_json_object_get(n->val, "shape") : NULL;
    return s && s->type == DRIFT_JSON_ARRAY ? s : NULL;
}

static const char *dtype_of(const aten_node *n) {
    const drift_json_value *d = n->val && n->val->type == DRIFT_JSON_OBJECT ? drift_json_object_get(n->val, "dtype") : NULL;
    return d && d->type == DRIFT_JSON_STRING ? d->str : "";
}

static void shape_str(const drift_json_value *s, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (size_t i = 0; s && i < s->n_items && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)s->items[i].integer);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* DRIFT_OK when every element of list l has element 0's shape and dtype, else the refusal. */
static int elements_alike(const drift_aten_graph *g, const drift_aten_list *l, drift_err *err) {
    const aten_node *e0 = &g->nodes[l->first];
    const drift_json_value *s0 = shape_of(e0);
    for (int k = 1; k < l->count; k++) {
        const aten_node *ek = &g->nodes[element(g, l->name, strlen(l->name), k)];
        const drift_json_value *sk = shape_of(ek);
        int same = s0 && sk && s0->n_items == sk->n_items && !strcmp(dtype_of(e0), dtype_of(ek));
        for (size_t d = 0; same && d < s0->n_items; d++)
            same = s0->items[d].type == DRIFT_JSON_NUMBER && sk->items[d].type == DRIFT_JSON_NUMBER &&
                   s0->items[d].integer == sk->items[d].integer;
        if (same) continue;
        char a[160], b[160];
        shape_str(s0, a, sizeof a);
        shape_str(sk, b, sizeof b);
        return drift_err_set(err, DRIFT_E_INPUT, g->source,
                             "cannot be re-batched: the model takes its samples as lists, and the elements of list '%s' "
                             "differ: node '%s' (%s.0) is %s %s, node '%s' (%s.%d) is %s %s; the capture holds one program "
                             "per recorded sample, and a batch of another size would need one for each shape (only "
                             "samples of one shape are re-batched)",
                             l->name, e0->name, l->name, a, dtype_of(e0), ek->name, l->name, k, b, dtype_of(ek));
    }
    return DRIFT_OK;
}

/* Which stacked list node i is an element of (its index into lists), -1 if none; *k the index. */
static int stacked_element(const drift_aten_graph *g, const drift_aten_list *lists, int n, int i, long long *k) {
    size_t len;
    if (!list_element(g, i, &len, k)) return -1;
    for (int f = 0; f < n; f++)
        if (strlen(lists[f].name) == len && !strncmp(lists[f].name, target_of(g, i), len)) return f;
    return -1;
}

/* A node name for list f's stacked input: "list_NAME" (dots as underscores), made unique. */
static void stacked_name(const drift_aten_graph *g, const drift_aten_list *l, char *buf, size_t cap) {
    snprintf(buf, cap, "list_%s", l->name);
    for (char *p = buf; *p; p++)
        if (*p == '.') *p = '_';
    while (aten_find(g, buf) >= 0 && strlen(buf) + 1 < cap) strcat(buf, "_");
}

/* The stacked input of list l: a placeholder [count, ...element 0's shape]. */
static void put_stacked(drift_json_buf *b, const drift_aten_graph *g, const drift_aten_list *l, const char *node) {
    const aten_node *e0 = &g->nodes[l->first];
    const drift_json_value *s0 = shape_of(e0);
    drift_json_buf_begin_object(b);
    drift_json_buf_field_string(b, "name", node);
    drift_json_buf_field_string(b, "op", "placeholder");
    drift_json_buf_field_string(b, "target", node);
    drift_json_buf_add_key(b, "args");
    drift_json_buf_begin_array(b);
    drift_json_buf_end_array(b);
    drift_json_buf_add_key(b, "kwargs");
    drift_json_buf_begin_object(b);
    drift_json_buf_end_object(b);
    aten_json_val_lead(b, l->count, s0, dtype_of(e0));
    drift_json_buf_field_string(b, "module", "");
    drift_json_buf_end_object(b);
}

/* Element k of a stacked list, read where the graph read NAME.k: select(stacked, 0, k), its name
 * and value as the element's. */
static void put_pick(drift_json_buf *b, const aten_node *e, const char *node, long long k) {
    drift_json_buf_begin_object(b);
    drift_json_buf_field_string(b, "name", e->name);
    drift_json_buf_field_string(b, "op", "call_function");
    drift_json_buf_field_string(b, "target", "aten.select.int");
    drift_json_buf_add_key(b, "args");
    drift_json_buf_begin_array(b);
    drift_json_buf_begin_object(b);
    drift_json_buf_field_string(b, "node", node);
    drift_json_buf_end_object(b);
    drift_json_buf_add_int(b, 0);
    drift_json_buf_add_int(b, k);
    drift_json_buf_end_array(b);
    drift_json_buf_add_key(b, "kwargs");
    drift_json_buf_begin_object(b);
    drift_json_buf_end_object(b);
    drift_json_buf_add_key(b, "val");
    drift_json_buf_add_value(b, e->val);
    drift_json_buf_field_string(b, "module", "");
    drift_json_buf_end_object(b);
}

#define MAX_LISTS 32

int drift_aten_list_stack(const drift_aten_graph *g, int64_t rb_from, char **out, size_t *out_len, drift_err *err) {
    *out = NULL;
    *out_len = 0;
    if (rb_from < 1) return DRIFT_OK;
    const char *source = g->source;
    drift_aten_list all[MAX_LISTS], lists[MAX_LISTS];
    char names[MAX_LISTS][DRIFT_MAX_FQN + 8];
    int rc = DRIFT_OK, n_all = drift_aten_list_find(g, rb_from, all, MAX_LISTS), n = 0;
    if (n_all < 0) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory");
        goto done;
    }
    for (int f = 0; f < n_all; f++) /* lists of samples: joined into a batch */
        if (all[f].join >= 0) lists[n++] = all[f];
    if (!n) goto done;
    for (int f = 0; f < n; f++) {
        if ((rc = elements_alike(g, &lists[f], err))) goto done;
        stacked_name(g, &lists[f], names[f], sizeof names[f]);
    }
    const drift_json_value *doc = g->doc;
    drift_json_buf b;
    drift_json_buf_init(&b);
    drift_json_buf_begin_object(&b);
    for (size_t m = 0; m < doc->n_members; m++) {
        const char *key = doc->members[m].key;
        const drift_json_value *v = &doc->members[m].value;
        drift_json_buf_add_key(&b, key);
        if (!strcmp(key, "nodes")) {
            unsigned char put[MAX_LISTS] = {0};
            drift_json_buf_begin_array(&b);
            for (int i = 0; i < g->n; i++) {
                long long k;
                const int f = stacked_element(g, lists, n, i, &k);
                if (f < 0) {
                    drift_json_buf_add_value(&b, &v->items[i]);
                    continue;
                }
                if (!put[f]) put_stacked(&b, g, &lists[f], names[f]), put[f] = 1; /* before its first element */
                put_pick(&b, &g->nodes[i], names[f], k);
            }
            drift_json_buf_end_array(&b);
        } else if (!strcmp(key, "inputs") && v->type == DRIFT_JSON_ARRAY) {
            drift_json_buf_begin_array(&b);
            for (size_t i = 0; i < v->n_items; i++) {
                const char *node = g->inputs[i].node;
                const int nd = aten_find(g, node);
                long long k;
                const int f = nd >= 0 ? stacked_element(g, lists, n, nd, &k) : -1;
                if (f < 0) {
                    drift_json_buf_add_value(&b, &v->items[i]);
                } else if (k == 0) { /* the list's one input, where its element 0 was */
                    drift_json_buf_begin_object(&b);
                    drift_json_buf_field_string(&b, "node", names[f]);
                    drift_json_buf_field_string(&b, "kind", "user_input");
                    drift_json_buf_field_string(&b, "target", lists[f].name);
                    drift_json_buf_field_string(&b, "role", "other");
                    drift_json_buf_end_object(&b);
                }
            }
            drift_json_buf_end_array(&b);
        } else {
            drift_json_buf_add_value(&b, v);
        }
    }
    drift_json_buf_add_key(&b, "list_inputs"); /* what was stacked: aten_unroll.c joins a list output too */
    drift_json_buf_begin_array(&b);
    for (int f = 0; f < n; f++) {
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_string(&b, "name", lists[f].name);
        drift_json_buf_field_string(&b, "node", names[f]);
        drift_json_buf_field_int(&b, "count", lists[f].count);
        drift_json_buf_end_object(&b);
    }
    drift_json_buf_end_array(&b);
    drift_json_buf_end_object(&b);
    if (drift_json_buf_status(&b)) {
        drift_json_buf_free(&b);
        rc = drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory writing the graph with its lists stacked");
        goto done;
    }
    *out = drift_json_buf_take(&b);
    *out_len = strlen(*out);
done:
    return rc;
}
