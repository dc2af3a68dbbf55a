/* Private to replay/capture: the parsed document shared by the parser
 * (aten_doc.c) and the lowering (aten_lower.c, aten_views.c). */
#ifndef DRIFT_REPLAY_CAPTURE_ATEN_INTERNAL_H
#define DRIFT_REPLAY_CAPTURE_ATEN_INTERNAL_H

#include "formats/json.h"
#include "replay/capture/aten_graph.h"

typedef enum aten_node_op { ATEN_PLACEHOLDER = 0, ATEN_CALL = 1, ATEN_OUTPUT = 2 } aten_node_op;

typedef struct aten_node {
    const char *name, *target, *module; /* module: "" for the root */
    aten_node_op op;
    const drift_json_value *args, *kwargs, *val, *stack; /* stack: module_stack array or NULL */
    const drift_json_value *autocast;   /* the recorder's {"enabled", "dtype"} of the node's autocast region, or NULL */
    const char *module_class;           /* class of the innermost module (module_classes' last), or "" */
    int line, col;
    int input;                          /* placeholders: index into inputs, else -1 */
    int is_attr;                        /* a get_attr node (a higher-order op's submodule or callable the
                                           capture could not inline): ATEN_CALL, never in the registry */
} aten_node;

typedef struct aten_op_count {
    const char *target;
    int count;
} aten_op_count;

struct drift_aten_graph {
    drift_json_value *doc;
    char source[256];
    aten_node *nodes;
    int n;
    int *slots;                         /* name index: node ids, -1 empty */
    size_t cap;
    aten_op_count *ops;
    int n_ops;
    drift_aten_input *inputs;
    int n_inputs;
    const char *model_class;
    const drift_json_value *constants;  /* object or NULL */
    const drift_json_value *module_outputs; /* object (module -> [node name | null, ...]) or NULL (older captures) */
    int output;                         /* index of the output node */
    const char **device_value;          /* per node: the /buffers name of its recorded device value
                                           ("device_values"), or NULL; NULL array when none */
};

/* Index of the node named name, or -1. */
int aten_find(const drift_aten_graph *g, const char *name);
/* mark[k] = 1 for node i and every node it depends on (refs point backwards), else 0; mark holds
 * g->n bytes (aten_rebatch.c). */
void aten_ancestors(const drift_aten_graph *g, int i, unsigned char *mark);
/* Writes a node's "val" member, {"shape": [lead, shape...], "dtype": dtype}: a tensor of the
 * recorded shape (a JSON array, or NULL for none) with a leading batch of lead (the list and
 * unroll passes' stacked inputs). b: the caller's. */
void aten_json_val_lead(drift_json_buf *b, int64_t lead, const drift_json_value *shape, const char *dtype);
/* Sets err (DRIFT_E_INPUT) to "SRC: node I 'NAME' (TARGET) in module 'M': MSG"; returns the code. */
int aten_node_fail(const drift_aten_graph *g, int i, drift_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
