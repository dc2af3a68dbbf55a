/* drift-aten-graph documents: parse, validate structure, summarise
 * (aten_graph.h). Lowering to drift ops is aten_lower.c. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "formats/alloc.h"
#include "replay/capture/aten_internal.h"

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

int aten_find(const drift_aten_graph *g, const char *name) {
    if (!g || !g->cap || !name) return -1;
    size_t m = g->cap - 1;
    for (size_t i = (size_t)hash_str(name) & m;; i = (i + 1) & m) {
        int id = g->slots[i];
        if (id < 0) return -1;
        if (strcmp(g->nodes[id].name, name) == 0) return id;
    }
}

int aten_node_fail(const drift_aten_graph *g, int i, drift_err *err, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const aten_node *n = (i >= 0 && i < g->n) ? &g->nodes[i] : NULL;
    if (!n)
        return drift_err_set(err, DRIFT_E_INPUT, g->source, "%s", msg);
    return drift_err_set(err, DRIFT_E_INPUT, g->source, "node %d '%s' (%s) in module '%s' (line %d): %s", i,
                         n->name ? n->name : "?", n->target ? n->target : "?", n->module ? n->module : "", n->line,
                         msg);
}

static int doc_fail(const drift_aten_graph *g, const drift_json_value *v, drift_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int doc_fail(const drift_aten_graph *g, const drift_json_value *v, drift_err *err, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return drift_err_set(err, DRIFT_E_INPUT, g->source, "line %d col %d: %s", v ? v->line : 0, v ? v->col : 0, msg);
}

int drift_aten_graph_sniff(const char *text, size_t len) {
    if (!text) return 0;
    size_t n = len < 4096 ? len : 4096; /* the format member comes first in what the recorder writes */
    static const char key[] = "\"drift-aten-graph\"";
    for (size_t i = 0; i + sizeof key - 1 <= n; i++)
        if (memcmp(text + i, key, sizeof key - 1) == 0) return 1;
    return 0;
}

/* Checks the argument tree v of node i: node references name earlier nodes;
 * tagged objects are known. */
static int check_arg(const drift_aten_graph *g, int i, const drift_json_value *v, drift_err *err) {
    if (v->type == DRIFT_JSON_ARRAY) {
        for (size_t k = 0; k < v->n_items; k++) {
            int rc = check_arg(g, i, &v->items[k], err);
            if (rc) return rc;
        }
        return DRIFT_OK;
    }
    if (v->type != DRIFT_JSON_OBJECT) return DRIFT_OK;
    if (v->n_members != 1)
        return aten_node_fail(g, i, err, "argument object at line %d must have one key (node, float, dtype, device, "
                                         "layout, memory_format)", v->line);
    const char *k = v->members[0].key;
    const drift_json_value *x = &v->members[0].value;
    if (!strcmp(k, "node")) {
        if (x->type != DRIFT_JSON_STRING) return aten_node_fail(g, i, err, "{\"node\": ...} needs a node name string");
        int j = aten_find(g, x->str);
        if (j < 0) return aten_node_fail(g, i, err, "input '%s' names no node (dangling reference)", x->str);
        if (j >= i)
            return aten_node_fail(g, i, err, "input '%s' is node %d, not an earlier node (a cycle or forward reference)",
                                  x->str, j);
        if (g->nodes[j].op == ATEN_OUTPUT) return aten_node_fail(g, i, err, "input '%s' is the output node", x->str);
        return DRIFT_OK;
    }
    if (!strcmp(k, "sym")) return aten_node_fail(g, i, err, "symbolic size (export with static shapes)");
    /* repr: an object the recorder could not encode (a higher-order op's function, a block
     * mask); dict: a dict argument (flex attention's kernel_options). Well-formed here; the
     * op that takes them is listed among the ops drift cannot run, or its lowering names
     * the argument it cannot read. */
    if (!strcmp(k, "float") || !strcmp(k, "dtype") || !strcmp(k, "device") || !strcmp(k, "layout") ||
        !strcmp(k, "memory_format") || !strcmp(k, "repr")) {
        if (x->type != DRIFT_JSON_STRING) return aten_node_fail(g, i, err, "{\"%s\": ...} needs a string", k);
        return DRIFT_OK;
    }
    if (!strcmp(k, "dict")) {
        if (x->type != DRIFT_JSON_OBJECT) return aten_node_fail(g, i, err, "{\"dict\": ...} needs an object");
        for (size_t m = 0; m < x->n_members; m++) {
            int rc = check_arg(g, i, &x->members[m].value, err);
            if (rc) return rc;
        }
        return DRIFT_OK;
    }
    return aten_node_fail(g, i, err, "unknown argument tag '%s' at line %d (expected node, float, dtype, device, "
                                     "layout, memory_format, repr or dict)", k, v->line);
}

static const char *opt_str(const drift_json_value *o, const char *key) {
    const drift_json_value *v = drift_json_object_get(o, key);
    return v && v->type == DRIFT_JSON_STRING ? v->str : NULL;
}

static int add_op(drift_aten_graph *g, const char *target) {
    for (int i = 0; i < g->n_ops; i++)
        if (strcmp(g->ops[i].target, target) == 0) {
            g->ops[i].count++;
            return DRIFT_OK;
        }
    g->ops[g->n_ops].target = target;
    g->ops[g->n_ops].count = 1;
    g->n_ops++;
    return DRIFT_OK;
}

static int parse_nodes(drift_aten_graph *g, const drift_json_value *nodes, drift_err *err) {
    if (!nodes || nodes->type != DRIFT_JSON_ARRAY || nodes->n_items == 0)
        return doc_fail(g, nodes ? nodes : g->doc, err, "'nodes': expected a non-empty array");
    if (nodes->n_items > DRIFT_ATEN_MAX_NODES) {
        const char *nm = opt_str(&nodes->items[DRIFT_ATEN_MAX_NODES], "name");
        return doc_fail(g, &nodes->items[DRIFT_ATEN_MAX_NODES], err,
                        "node %d '%s': more than %d nodes (the document has %zu)", DRIFT_ATEN_MAX_NODES,
                        nm ? nm : "?", DRIFT_ATEN_MAX_NODES, nodes->n_items);
    }
    g->n = (int)nodes->n_items;
    g->nodes = drift_calloc((size_t)g->n, sizeof *g->nodes);
    g->cap = 64;
    while (g->cap < (size_t)g->n * 2) g->cap *= 2;
    g->slots = drift_malloc(g->cap * sizeof *g->slots);
    g->ops = drift_calloc((size_t)g->n, sizeof *g->ops);
    if (!g->nodes || !g->slots || !g->ops) return drift_err_set(err, DRIFT_E_NOMEM, g->source, "out of memory");
    for (size_t i = 0; i < g->cap; i++) g->slots[i] = -1;
    static const char *const keys[] = {"name", "op", "target", "args", "kwargs", "val", "module", "module_stack",
                                       "module_classes", "decomposed_from", "autocast", NULL};
    /* pass 1: fields and the name index (references are checked in pass 2, so
     * that a forward reference is told apart from a dangling one) */
    for (int i = 0; i < g->n; i++) {
        const drift_json_value *o = &nodes->items[i];
        aten_node *n = &g->nodes[i];
        n->input = -1;
        n->line = o->line;
        n->col = o->col;
        if (o->type != DRIFT_JSON_OBJECT) return doc_fail(g, o, err, "nodes[%d]: expected an object", i);
        for (size_t m = 0; m < o->n_members; m++) {
            int ok = 0;
            for (int k = 0; keys[k]; k++) ok |= strcmp(o->members[m].key, keys[k]) == 0;
            if (!ok) return doc_fail(g, &o->members[m].value, err, "nodes[%d]: unknown key '%s'", i, o->members[m].key);
        }
        n->name = opt_str(o, "name");
        n->target = opt_str(o, "target");
        const char *op = opt_str(o, "op");
        n->module = opt_str(o, "module");
        if (!n->module) n->module = "";
        if (!n->name || !*n->name || strlen(n->name) >= DRIFT_MAX_FQN)
            return doc_fail(g, o, err, "nodes[%d]: 'name' must be a non-empty string shorter than %d bytes", i,
                            DRIFT_MAX_FQN);
        if (!op) return aten_node_fail(g, i, err, "'op' must be a string");
        if (!n->target) return aten_node_fail(g, i, err, "'target' must be a string");
        if (!strcmp(op, "placeholder")) n->op = ATEN_PLACEHOLDER;
        else if (!strcmp(op, "call_function")) n->op = ATEN_CALL;
        else if (!strcmp(op, "output")) n->op = ATEN_OUTPUT;
        else if (!strcmp(op, "get_attr")) n->op = ATEN_CALL, n->is_attr = 1; /* listed among the ops drift cannot run */
        else
            return aten_node_fail(g, i, err, "'op' \"%s\": expected placeholder, call_function, get_attr or output", op);
        n->args = drift_json_object_get(o, "args");
        n->kwargs = drift_json_object_get(o, "kwargs");
        n->val = drift_json_object_get(o, "val");
        n->stack = drift_json_object_get(o, "module_stack");
        n->autocast = drift_json_object_get(o, "autocast");
        if (!n->args || n->args->type != DRIFT_JSON_ARRAY) return aten_node_fail(g, i, err, "'args' must be an array");
        if (n->kwargs && n->kwargs->type != DRIFT_JSON_OBJECT)
            return aten_node_fail(g, i, err, "'kwargs' must be an object");
        if (n->stack && n->stack->type != DRIFT_JSON_ARRAY)
            return aten_node_fail(g, i, err, "'module_stack' must be an array of strings");
        for (size_t k = 0; n->stack && k < n->stack->n_items; k++)
            if (n->stack->items[k].type != DRIFT_JSON_STRING)
                return aten_node_fail(g, i, err, "'module_stack' must be an array of strings");
        const drift_json_value *cls = drift_json_object_get(o, "module_classes");
        if (cls && cls->type != DRIFT_JSON_ARRAY)
            return aten_node_fail(g, i, err, "'module_classes' must be an array of strings");
        for (size_t k = 0; cls && k < cls->n_items; k++)
            if (cls->items[k].type != DRIFT_JSON_STRING)
                return aten_node_fail(g, i, err, "'module_classes' must be an array of strings");
        n->module_class = cls && cls->n_items ? cls->items[cls->n_items - 1].str : "";
        const drift_json_value *md = drift_json_object_get(o, "module");
        if (md && md->type != DRIFT_JSON_STRING) return aten_node_fail(g, i, err, "'module' must be a string");
        if (aten_find(g, n->name) >= 0)
            return aten_node_fail(g, i, err, "duplicate node name (first at node %d)", aten_find(g, n->name));
        size_t mask = g->cap - 1, s = (size_t)hash_str(n->name) & mask;
        while (g->slots[s] >= 0) s = (s + 1) & mask;
        g->slots[s] = i;
        if (n->op == ATEN_OUTPUT && i != g->n - 1) return aten_node_fail(g, i, err, "the output node must be the last");
        if (n->op == ATEN_CALL) add_op(g, n->target);
    }
    if (g->nodes[g->n - 1].op != ATEN_OUTPUT) return aten_node_fail(g, g->n - 1, err, "the last node must be the output");
    g->output = g->n - 1;
    for (int i = 0; i < g->n; i++) {
        int rc = check_arg(g, i, g->nodes[i].args, err);
        for (size_t k = 0; !rc && g->nodes[i].kwargs && k < g->nodes[i].kwargs->n_members; k++)
            rc = check_arg(g, i, &g->nodes[i].kwargs->members[k].value, err);
        if (rc) return rc;
    }
    const drift_json_value *oa = g->nodes[g->output].args;
    if (oa->n_items != 1 || oa->items[0].type != DRIFT_JSON_ARRAY || oa->items[0].n_items == 0)
        return aten_node_fail(g, g->output, err, "'args' must be [[outputs...]] with at least one output");
    return DRIFT_OK;
}

/* "module_outputs" (optional, the Recorder's capture extra): per module FQN the
 * nodes of its tensor outputs in the order the Recorder walks them, each a
 * node name or null (not matched at capture). */
static int parse_module_outputs(drift_aten_graph *g, const drift_json_value *mo, drift_err *err) {
    if (!mo) return DRIFT_OK;
    if (mo->type != DRIFT_JSON_OBJECT)
        return doc_fail(g, mo, err, "'module_outputs': expected an object (module FQN -> [node name or null, ...])");
    for (size_t k = 0; k < mo->n_members; k++) {
        const drift_json_value *a = &mo->members[k].value;
        const char *m = mo->members[k].key;
        if (a->type != DRIFT_JSON_ARRAY || a->n_items == 0)
            return doc_fail(g, a, err, "'module_outputs' of '%s': expected a non-empty array of node names or null", m);
        for (size_t i = 0; i < a->n_items; i++) {
            const drift_json_value *x = &a->items[i];
            if (x->type == DRIFT_JSON_NULL) continue;
            if (x->type != DRIFT_JSON_STRING)
                return doc_fail(g, x, err, "'module_outputs' of '%s', entry %zu: expected a node name or null", m, i);
            int j = aten_find(g, x->str);
            if (j < 0 || g->nodes[j].op == ATEN_OUTPUT)
                return doc_fail(g, x, err, "'module_outputs' of '%s', entry %zu: '%s' names no node of the graph", m, i,
                                x->str);
        }
    }
    g->module_outputs = mo;
    return DRIFT_OK;
}

/* "device_values": {NODE: "device:NODE", ...}: call nodes whose value the
 * recording's GPU computed from constants alone (docs/aten-graph.md "Device
 * values"); the importer reads each as a buffer leaf instead of its subgraph. */
static int parse_device_values(drift_aten_graph *g, const drift_json_value *dv, drift_err *err) {
    if (!dv) return DRIFT_OK;
    if (dv->type != DRIFT_JSON_OBJECT)
        return doc_fail(g, dv, err, "'device_values': expected an object (node name -> \"device:NAME\")");
    if (!dv->n_members) return DRIFT_OK;
    g->device_value = drift_calloc((size_t)g->n, sizeof *g->device_value);
    if (!g->device_value) return drift_err_set(err, DRIFT_E_NOMEM, g->source, "out of memory");
    for (size_t k = 0; k < dv->n_members; k++) {
        const char *node = dv->members[k].key;
        const drift_json_value *b = &dv->members[k].value;
        int j = aten_find(g, node);
        if (j < 0 || g->nodes[j].op != ATEN_CALL)
            return doc_fail(g, b, err, "'device_values': '%s' names no call node of the graph", node);
        if (b->type != DRIFT_JSON_STRING || strncmp(b->str, "device:", 7) || !b->str[7] ||
            strlen(b->str) >= DRIFT_MAX_FQN)
            return doc_fail(g, b, err, "'device_values' of '%s': expected a /buffers name \"device:NAME\" shorter than %d bytes",
                            node, DRIFT_MAX_FQN);
        g->device_value[j] = b->str;
    }
    return DRIFT_OK;
}

static int parse_inputs(drift_aten_graph *g, const drift_json_value *in, drift_err *err) {
    if (!in || in->type != DRIFT_JSON_ARRAY) return doc_fail(g, in ? in : g->doc, err, "'inputs': expected an array");
    g->inputs = drift_calloc(in->n_items ? in->n_items : 1, sizeof *g->inputs);
    if (!g->inputs) return drift_err_set(err, DRIFT_E_NOMEM, g->source, "out of memory");
    static const char *const kinds[DRIFT_ATEN_IN_COUNT] = {"parameter", "buffer", "constant", "user_input"};
    for (size_t i = 0; i < in->n_items; i++) {
        const drift_json_value *o = &in->items[i];
        if (o->type != DRIFT_JSON_OBJECT) return doc_fail(g, o, err, "inputs[%zu]: expected an object", i);
        drift_aten_input *x = &g->inputs[i];
        x->node = opt_str(o, "node");
        x->target = opt_str(o, "target");
        const char *kind = opt_str(o, "kind");
        x->role = opt_str(o, "role");
        if (!x->node || !x->target || !kind)
            return doc_fail(g, o, err, "inputs[%zu]: 'node', 'kind' and 'target' must be strings", i);
        if (!*x->target || strlen(x->target) >= DRIFT_MAX_FQN)
            return doc_fail(g, o, err, "inputs[%zu]: 'target' must be non-empty and shorter than %d bytes", i,
                            DRIFT_MAX_FQN);
        int k = -1;
        for (int j = 0; j < DRIFT_ATEN_IN_COUNT; j++)
            if (!strcmp(kind, kinds[j])) k = j;
        if (k < 0)
            return doc_fail(g, o, err, "inputs[%zu]: 'kind' \"%s\": expected parameter, buffer, constant or user_input",
                            i, kind);
        x->kind = (drift_aten_input_kind)k;
        if (x->kind == DRIFT_ATEN_IN_USER) {
            if (!x->role) x->role = "other";
            if (strcmp(x->role, "latents") && strcmp(x->role, "cond") && strcmp(x->role, "timestep") &&
                strcmp(x->role, "other"))
                return doc_fail(g, o, err, "inputs[%zu]: 'role' \"%s\": expected latents, cond, timestep or other", i,
                                x->role);
        } else {
            x->role = NULL;
        }
        int nd = aten_find(g, x->node);
        if (nd < 0 || g->nodes[nd].op != ATEN_PLACEHOLDER)
            return doc_fail(g, o, err, "inputs[%zu]: node '%s' is not a placeholder of the graph", i, x->node);
        if (g->nodes[nd].input >= 0) return doc_fail(g, o, err, "inputs[%zu]: node '%s' is described twice", i, x->node);
        g->nodes[nd].input = (int)i;
        const drift_json_value *val = g->nodes[nd].val;
        x->is_tensor = val && val->type == DRIFT_JSON_OBJECT && drift_json_object_get(val, "shape") != NULL;
        g->n_inputs++;
    }
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == ATEN_PLACEHOLDER && g->nodes[i].input < 0)
            return aten_node_fail(g, i, err, "placeholder not described in 'inputs'");
    return DRIFT_OK;
}

int drift_aten_graph_parse(const char *text, size_t len, const char *source_name, drift_aten_graph **out,
                           drift_err *err) {
    if (!out) return drift_err_set(err, DRIFT_E_INTERNAL, "aten", "drift_aten_graph_parse: out is NULL");
    *out = NULL;
    drift_aten_graph *g = drift_calloc(1, sizeof *g);
    if (!g) return drift_err_set(err, DRIFT_E_NOMEM, "aten", "out of memory");
    snprintf(g->source, sizeof g->source, "%s", source_name ? source_name : "<graph>");
    int rc = drift_json_parse(text, len, g->source, &g->doc, err);
    if (rc == DRIFT_E_NOMEM && len > DRIFT_JSON_MAX_INPUT)
        rc = drift_err_set(err, DRIFT_E_INPUT, g->source, "graph document of %zu bytes exceeds the %zu-byte limit", len,
                           (size_t)DRIFT_JSON_MAX_INPUT);
    else if (rc == DRIFT_E_NOMEM)
        rc = err ? (err->code = DRIFT_E_INPUT) : DRIFT_E_INPUT; /* a JSON limit (values, depth): bad input, not a failed allocation */
    if (rc) goto fail;
    const drift_json_value *d = g->doc;
    if (d->type != DRIFT_JSON_OBJECT) {
        rc = doc_fail(g, d, err, "expected a JSON object");
        goto fail;
    }
    const char *fmt = opt_str(d, "format");
    if (!fmt || strcmp(fmt, DRIFT_ATEN_FORMAT)) {
        rc = doc_fail(g, d, err, "'format': expected \"%s\", got %s%s%s", DRIFT_ATEN_FORMAT, fmt ? "\"" : "",
                      fmt ? fmt : "nothing", fmt ? "\"" : "");
        goto fail;
    }
    const drift_json_value *ver = drift_json_object_get(d, "version");
    if (!ver || ver->type != DRIFT_JSON_NUMBER || !ver->is_int || ver->integer != DRIFT_ATEN_VERSION) {
        rc = doc_fail(g, ver ? ver : d, err, "'version': expected %d", DRIFT_ATEN_VERSION);
        goto fail;
    }
    g->model_class = opt_str(d, "model_class");
    g->constants = drift_json_object_get(d, "constants");
    if (g->constants && g->constants->type != DRIFT_JSON_OBJECT) {
        rc = doc_fail(g, g->constants, err, "'constants': expected an object");
        goto fail;
    }
    if ((rc = parse_nodes(g, drift_json_object_get(d, "nodes"), err))) goto fail;
    if ((rc = parse_inputs(g, drift_json_object_get(d, "inputs"), err))) goto fail;
    if ((rc = parse_module_outputs(g, drift_json_object_get(d, "module_outputs"), err))) goto fail;
    if ((rc = parse_device_values(g, drift_json_object_get(d, "device_values"), err))) goto fail;
    *out = g;
    return DRIFT_OK;
fail:
    drift_aten_graph_free(g);
    return rc;
}

void drift_aten_graph_free(drift_aten_graph *g) {
    if (!g) return;
    drift_json_free(g->doc);
    drift_free(g->nodes);
    drift_free(g->slots);
    drift_free(g->ops);
    drift_free(g->inputs);
    drift_free(g->device_value);
    drift_free(g);
}

int drift_aten_graph_node_count(const drift_aten_graph *g) { return g ? g->n : 0; }
const char *drift_aten_graph_model_class(const drift_aten_graph *g) {
    return g && g->model_class ? g->model_class : "";
}
int drift_aten_graph_op_count(const drift_aten_graph *g) { return g ? g->n_ops : 0; }
const char *drift_aten_graph_op(const drift_aten_graph *g, int i, int *nodes) {
    if (!g || i < 0 || i >= g->n_ops) return NULL;
    if (nodes) *nodes = g->ops[i].count;
    return g->ops[i].target;
}
int drift_aten_graph_device_value_count(const drift_aten_graph *g) {
    int k = 0;
    for (int i = 0; g && g->device_value && i < g->n; i++) k += g->device_value[i] != NULL;
    return k;
}
int drift_aten_graph_input_count(const drift_aten_graph *g) { return g ? g->n_inputs : 0; }
const drift_aten_input *drift_aten_graph_input(const drift_aten_graph *g, int i) {
    return g && i >= 0 && i < g->n_inputs ? &g->inputs[i] : NULL;
}

void aten_json_val_lead(drift_json_buf *b, int64_t lead, const drift_json_value *shape, const char *dtype) {
    drift_json_buf_add_key(b, "val");
    drift_json_buf_begin_object(b);
    drift_json_buf_add_key(b, "shape");
    drift_json_buf_begin_array(b);
    drift_json_buf_add_int(b, lead);
    for (size_t d = 0; shape && shape->type == DRIFT_JSON_ARRAY && d < shape->n_items; d++)
        drift_json_buf_add_value(b, &shape->items[d]);
    drift_json_buf_end_array(b);
    drift_json_buf_field_string(b, "dtype", dtype);
    drift_json_buf_end_object(b);
}
