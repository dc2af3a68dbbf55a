/* Per-step graphs (docs/format.md 9.1): the model of the graph a recorded
 * step uses, and the check that a step's inputs have that graph's shapes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "replay/capture/aten_graph.h"
#include "replay/capture/aten_model.h"

void drift_capture_graph_name(const drift_trace_step_graph *sg, char *out, size_t cap) {
    if (!sg || sg->graph == 0) snprintf(out, cap, "/graph");
    else if (sg->graph > 0) snprintf(out, cap, "/graph_steps graph %lld", (long long)sg->graph);
    else snprintf(out, cap, "none");
}

int drift_capture_refuse_step(const char *path, const drift_trace_step_graph *sg, drift_err *err) {
    return drift_err_set(err, DRIFT_E_INPUT, path,
                         "step %lld has no graph: its data takes another path than /graph was captured on and the "
                         "recorder could not capture the step's own (%s); replay the other steps (--steps)",
                         (long long)sg->step, sg->reason);
}

int drift_capture_model_for_step(drift_trace_reader *r, const char *family, const drift_trace_step_graph *sg,
                                 drift_model **out, drift_err *err) {
    *out = NULL;
    const char *path = drift_trace_reader_path(r);
    if (!sg || sg->graph == 0) return drift_capture_model_for_trace(r, family, out, err);
    if (sg->graph < 0) return drift_capture_refuse_step(path, sg, err);
    char *json = NULL;
    size_t len = 0;
    int rc = drift_trace_read_step_graph(r, sg, &json, &len, err);
    if (rc) return rc;
    char src[4300];
    snprintf(src, sizeof src, "%s:/graph_steps graph %lld (step %lld)", path, (long long)sg->graph, (long long)sg->step);
    if (!drift_aten_graph_sniff(json, len)) rc = drift_err_set(err, DRIFT_E_INPUT, src, "expected a drift-aten-graph document");
    else rc = drift_capture_model_create_against(json, len, src, r, out, err);
    free(json);
    return rc;
}

int drift_capture_steps_graph(drift_trace_reader *r, int64_t first, int64_t last, drift_trace_step_graph *out,
                              drift_err *err) {
    memset(out, 0, sizeof *out);
    out->step = -1;
    drift_trace_step_graph *all = NULL;
    size_t n = 0;
    int rc = drift_trace_read_step_graphs(r, &all, &n, err);
    if (rc) return rc;
    int have = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if ((first >= 0 && all[i].step < first) || (last >= 0 && all[i].step > last)) continue;
        if (all[i].graph < 0) {
            rc = drift_capture_refuse_step(drift_trace_reader_path(r), &all[i], err);
        } else if (!have) {
            *out = all[i];
            have = 1;
        } else if (all[i].graph != out->graph) {
            char a[64], b[64];
            drift_capture_graph_name(out, a, sizeof a);
            drift_capture_graph_name(&all[i], b, sizeof b);
            rc = drift_err_set(err, DRIFT_E_INPUT, drift_trace_reader_path(r),
                               "step %lld uses %s, step %lld uses %s (graphs specialised to each step's data): give "
                               "--steps covering steps of one graph", (long long)out->step, a, (long long)all[i].step, b);
        }
    }
    free(all);
    return rc;
}

/* "[1,2,4]" */
static void shape_text(int nd, const int64_t *sh, char *out, size_t cap) {
    size_t k = (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < nd && k < cap; i++) k += (size_t)snprintf(out + k, cap - k, "%s%lld", i ? "," : "", (long long)sh[i]);
    if (k < cap) snprintf(out + k, cap - k, "]");
}

int drift_capture_check_step_shapes(const drift_model *m, const drift_hostset *in, const char *path,
                                    const drift_trace_step_graph *sg, drift_err *err) {
    if (!m->captured) return DRIFT_OK;
    for (int i = 0; i < drift_graph_count(m->sem); i++) {
        const drift_value *v = drift_graph_value(m->sem, i);
        if (v->kind != DRIFT_VAL_INPUT && v->kind != DRIFT_VAL_BUFFER) continue;
        const drift_host_tensor *h = drift_hostset_find(in, v->name);
        if (!h) continue;
        int same = h->ndim == v->ndim;
        for (int d = 0; same && d < v->ndim; d++) same = h->shape[d] == v->shape[d];
        if (same) continue;
        char a[200], b[200], g[64], site[DRIFT_MAX_FQN + 32];
        shape_text(h->ndim, h->shape, a, sizeof a);
        shape_text(v->ndim, v->shape, b, sizeof b);
        drift_capture_graph_name(sg, g, sizeof g);
        if (!drift_capture_step_input_site(v->name, site, sizeof site)) snprintf(site, sizeof site, "input:%s:pre_cast", v->name);
        return drift_err_set(err, DRIFT_E_INPUT, path,
                             "step %lld: input '%s' (site %s) has shape %s, but the graph this step uses (%s) was "
                             "specialised to %s: a graph traced from one step's forward replays only inputs of its shapes",
                             (long long)(sg ? sg->step : -1), v->name, site, a, g, b);
    }
    return DRIFT_OK;
}
