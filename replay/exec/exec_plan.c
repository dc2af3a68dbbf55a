/* The executor's per-run plan (exec_plan.h). */
#include "replay/exec/exec_plan.h"

#include "formats/alloc.h"

#include <string.h>

void drift_exec_plan_free(drift_exec_plan *p) {
    if (!p) return;
    drift_free(p->live);
    drift_free(p->uses);
    drift_free(p->fixed);
    drift_fuse_plan_free(&p->fuse);
    memset(p, 0, sizeof *p);
}

/* liveness, backwards: the output, sites (when observed), their inputs */
static void plan_liveness(const drift_graph *g, int observe_sites, drift_exec_plan *p) {
    if (p->output >= 0) p->live[p->output] = 1;
    for (int i = p->n - 1; i >= 0; i--) {
        const drift_value *v = drift_graph_value(g, i);
        if (v->site && observe_sites) p->live[i] = 1;
        if (!p->live[i]) continue;
        p->n_live++;
        if (v->kind != DRIFT_VAL_NODE) continue;
        for (int k = 0; k < v->op.n_in; k++) {
            p->live[v->in[k]] = 1;
            p->uses[v->in[k]]++;
        }
    }
    if (p->output >= 0) p->uses[p->output]++;
}

/* values that depend on parameters and buffers only (forwards: inputs come first) */
static void plan_fixed(const drift_graph *g, const unsigned char *per_step, drift_exec_plan *p) {
    for (int i = 0; i < p->n; i++) {
        const drift_value *v = drift_graph_value(g, i);
        if (v->kind == DRIFT_VAL_PARAM || (v->kind == DRIFT_VAL_BUFFER && !(per_step && per_step[i]))) {
            p->fixed[i] = 1;
        } else if (v->kind == DRIFT_VAL_NODE) {
            int all = 1;
            for (int k = 0; k < v->op.n_in; k++) all &= p->fixed[v->in[k]];
            p->fixed[i] = (unsigned char)all;
        }
    }
}

int drift_exec_plan_build(const drift_graph *g, const drift_exec_plan_opts *o, drift_exec_plan *p, drift_err *err) {
    if (p) memset(p, 0, sizeof *p);
    if (!g || !p) return drift_err_set(err, DRIFT_E_INTERNAL, "exec", "drift_exec_plan_build: NULL argument");
    if (!drift_graph_is_assigned(g))
        return drift_err_set(err, DRIFT_E_INPUT, "exec", "the graph has no explicit dtypes (run drift_assign_dtypes first)");
    const drift_exec_plan_opts none = {0};
    if (!o) o = &none;
    p->n = drift_graph_count(g);
    p->output = drift_graph_output(g);
    size_t nn = (size_t)(p->n ? p->n : 1);
    p->live = drift_calloc(nn, 1);
    p->uses = drift_calloc(nn, sizeof *p->uses);
    p->fixed = o->cached ? drift_calloc(nn, 1) : NULL;
    if (!p->live || !p->uses || (o->cached && !p->fixed))
        return drift_err_set(err, DRIFT_E_NOMEM, "exec", "out of memory (run plan)");
    plan_liveness(g, o->observe_sites, p);
    if (p->fixed) plan_fixed(g, o ? o->per_step : NULL, p);
    if (o->fuse_casts) {
        drift_fuse_opts fo = {.live = p->live, .fixed = p->fixed, .observe_sites = o->observe_sites != 0};
        int rc = drift_fuse_plan_build(g, &fo, &p->fuse, err);
        if (rc) return rc;
        p->fused = 1;
    }
    return DRIFT_OK;
}
