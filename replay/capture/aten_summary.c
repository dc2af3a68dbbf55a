/* Captured-graph summary for drift ls (aten_summary.h). */
#include "formats/alloc.h"
#include "replay/capture/aten_summary.h"

#include <stdlib.h>
#include <string.h>

#include "formats/plan.h"
#include "replay/capture/aten_graph.h"
#include "replay/capture/aten_internal.h"
#include "replay/capture/aten_model.h"

/* Per target: how many results in each dtype (fp32, bf16, fp16, fp64). */
typedef struct op_dt {
    const char *target;
    int count[4];
} op_dt;

static int dt_slot(drift_dtype d) { return d == DRIFT_F32 ? 0 : d == DRIFT_BF16 ? 1 : d == DRIFT_F16 ? 2 : d == DRIFT_F64 ? 3 : -1; }
static const char *const k_dt[4] = {"fp32", "bf16", "fp16", "fp64"};

typedef struct summary {
    drift_aten_graph *g;
    drift_model *m;
    drift_forward *f;
    op_dt *ops; /* one per census entry */
    char import_error[2048];
} summary;

static void summary_free(summary *s) {
    drift_forward_free(s->f);
    drift_model_free(s->m);
    drift_aten_graph_free(s->g);
    free(s->ops);
}

/* Parse (errors returned), then import and assign under the plan (errors kept as text). */
static int summarise(summary *s, const char *json, size_t len, const char *source, const char *plan_json,
                     drift_trace_reader *r, drift_err *err) {
    memset(s, 0, sizeof *s);
    int rc = drift_aten_graph_parse(json, len, source, &s->g, err);
    if (rc) return rc;
    int n = drift_aten_graph_op_count(s->g);
    s->ops = drift_calloc((size_t)(n ? n : 1), sizeof *s->ops);
    if (!s->ops) return drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory");
    for (int i = 0; i < n; i++) s->ops[i].target = drift_aten_graph_op(s->g, i, NULL);
    drift_err e2;
    drift_err_clear(&e2);
    drift_plan plan;
    drift_plan_init(&plan);
    if (plan_json && *plan_json && drift_plan_parse_json(&plan, plan_json, strlen(plan_json), "plan", &e2)) {
        snprintf(s->import_error, sizeof s->import_error, "the recorded plan does not parse: %s", e2.msg);
        drift_plan_free(&plan);
        return DRIFT_OK;
    }
    if (drift_capture_model_create_against(json, len, source, r, &s->m, &e2) ||
        drift_forward_prepare(s->m, &plan, DRIFT_SIDE_TRAINER, NULL, &s->f, &e2)) {
        snprintf(s->import_error, sizeof s->import_error, "%s%s%s", e2.where, e2.where[0] ? ": " : "", e2.msg);
        drift_plan_free(&plan);
        return DRIFT_OK;
    }
    drift_plan_free(&plan);
    /* the result of FX node X is the last assigned value labelled X */
    const drift_graph *a = s->f->assigned;
    int na = drift_graph_count(a);
    for (int i = 0; i < s->g->n; i++) {
        const aten_node *nd = &s->g->nodes[i];
        if (nd->op != ATEN_CALL) continue;
        int last = -1;
        for (int k = 0; k < na; k++) {
            const drift_value *v = drift_graph_value(a, k);
            if (v->kind == DRIFT_VAL_NODE && v->origin == DRIFT_ORIGIN_MODEL && v->name && !strcmp(v->name, nd->name)) last = k;
        }
        if (last < 0) continue; /* a view, or dead code */
        int sl = dt_slot(drift_graph_value(a, last)->dtype);
        for (int k = 0; sl >= 0 && k < n; k++)
            if (!strcmp(s->ops[k].target, nd->target)) s->ops[k].count[sl]++;
    }
    return DRIFT_OK;
}

static const char *const k_kind[] = {"parameter", "buffer", "constant", "user_input"};

int drift_capture_summary_print(FILE *out, const char *json, size_t len, const char *source, const char *plan_json,
                                drift_trace_reader *r, drift_err *err) {
    summary s;
    int rc = summarise(&s, json, len, source, plan_json, r, err);
    if (rc) {
        summary_free(&s);
        return rc;
    }
    int np = 0, nb = 0;
    for (int i = 0; i < drift_aten_graph_input_count(s.g); i++) {
        const drift_aten_input *in = drift_aten_graph_input(s.g, i);
        np += in->kind == DRIFT_ATEN_IN_PARAMETER;
        nb += in->kind == DRIFT_ATEN_IN_BUFFER || in->kind == DRIFT_ATEN_IN_CONSTANT;
    }
    const int ndv = drift_aten_graph_device_value_count(s.g);
    fprintf(out, "captured  %s (torch.export): %d nodes, %d distinct ops, %d parameters, %d buffers/constants",
            drift_aten_graph_model_class(s.g)[0] ? drift_aten_graph_model_class(s.g) : "?", drift_aten_graph_node_count(s.g),
            drift_aten_graph_op_count(s.g), np, nb);
    if (ndv) fprintf(out, ", %d device values (tables the recording's GPU built from constants)", ndv);
    fprintf(out, "\n");
    fprintf(out, "  inputs:");
    for (int i = 0; i < drift_aten_graph_input_count(s.g); i++) {
        const drift_aten_input *in = drift_aten_graph_input(s.g, i);
        if (in->kind == DRIFT_ATEN_IN_USER)
            fprintf(out, " %s (%s%s)", in->target, in->role, in->is_tensor ? "" : ", not a tensor");
    }
    fprintf(out, "\n");
    if (s.import_error[0]) fprintf(out, "  does not replay: %s\n", s.import_error);
    for (const char *p = s.m && s.m->captured_notes ? s.m->captured_notes : ""; *p;) { /* sites left unmapped */
        const char *nl = strchr(p, '\n');
        int n = nl ? (int)(nl - p) : (int)strlen(p);
        fprintf(out, "  note: %.*s\n", n, p);
        p += n + (nl ? 1 : 0);
    }
    fprintf(out, "  %-46s %6s   %s\n", "OP", "NODES", s.import_error[0] ? "" : "RESULTS BY DTYPE UNDER THE RECORDED PLAN (trainer)");
    for (int i = 0; i < drift_aten_graph_op_count(s.g); i++) {
        int nodes = 0;
        const char *t = drift_aten_graph_op(s.g, i, &nodes);
        char base[96];
        drift_aten_cast_class cls = drift_aten_autocast_class(drift_aten_op_base(t, base, sizeof base));
        fprintf(out, "  %-46s %6d  ", t, nodes);
        int any = 0;
        for (int k = 0; k < 4; k++)
            if (s.ops[i].count[k]) {
                fprintf(out, " %s x%d", k_dt[k], s.ops[i].count[k]);
                any = 1;
            }
        if (!any && !s.import_error[0]) fprintf(out, " (views / no value)");
        if (cls == DRIFT_ATEN_CAST_LOWER) fprintf(out, "   [autocast lower]");
        if (cls == DRIFT_ATEN_CAST_FP32) fprintf(out, "   [autocast fp32]");
        fprintf(out, "\n");
    }
    summary_free(&s);
    return DRIFT_OK;
}

int drift_capture_summary_json(drift_json_buf *b, const char *json, size_t len, const char *source,
                               const char *plan_json, drift_trace_reader *r, drift_err *err) {
    summary s;
    int rc = summarise(&s, json, len, source, plan_json, r, err);
    if (rc) {
        summary_free(&s);
        return rc;
    }
    drift_json_buf_begin_object(b);
    drift_json_buf_field_string(b, "model_class", drift_aten_graph_model_class(s.g));
    drift_json_buf_field_int(b, "nodes", drift_aten_graph_node_count(s.g));
    if (s.import_error[0]) drift_json_buf_field_string(b, "import_error", s.import_error);
    else drift_json_buf_field_null(b, "import_error");
    drift_json_buf_add_key(b, "notes"); /* module sites left unmapped */
    drift_json_buf_begin_array(b);
    for (const char *p = s.m && s.m->captured_notes ? s.m->captured_notes : ""; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        drift_json_buf_add_string_n(b, p, n);
        p += n + (nl ? 1 : 0);
    }
    drift_json_buf_end_array(b);
    drift_json_buf_add_key(b, "inputs");
    drift_json_buf_begin_array(b);
    for (int i = 0; i < drift_aten_graph_input_count(s.g); i++) {
        const drift_aten_input *in = drift_aten_graph_input(s.g, i);
        drift_json_buf_begin_object(b);
        drift_json_buf_field_string(b, "node", in->node);
        drift_json_buf_field_string(b, "kind", k_kind[in->kind]);
        drift_json_buf_field_string(b, "target", in->target);
        if (in->role) drift_json_buf_field_string(b, "role", in->role);
        drift_json_buf_field_bool(b, "tensor", in->is_tensor);
        drift_json_buf_end_object(b);
    }
    drift_json_buf_end_array(b);
    drift_json_buf_add_key(b, "ops");
    drift_json_buf_begin_array(b);
    for (int i = 0; i < drift_aten_graph_op_count(s.g); i++) {
        int nodes = 0;
        const char *t = drift_aten_graph_op(s.g, i, &nodes);
        char base[96];
        static const char *const cls_name[] = {"none", "lower", "fp32", "promote"};
        drift_json_buf_begin_object(b);
        drift_json_buf_field_string(b, "target", t);
        drift_json_buf_field_int(b, "nodes", nodes);
        drift_json_buf_field_string(b, "autocast", cls_name[drift_aten_autocast_class(drift_aten_op_base(t, base, sizeof base))]);
        drift_json_buf_add_key(b, "dtypes");
        drift_json_buf_begin_object(b);
        for (int k = 0; k < 4; k++)
            if (s.ops[i].count[k]) drift_json_buf_field_int(b, k_dt[k], s.ops[i].count[k]);
        drift_json_buf_end_object(b);
        drift_json_buf_end_object(b);
    }
    drift_json_buf_end_array(b);
    drift_json_buf_end_object(b);
    summary_free(&s);
    return DRIFT_OK;
}
