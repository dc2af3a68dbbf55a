/* Cast folding plan (fuse.h). */
#include "replay/ir/fuse.h"

#include <string.h>

#include "formats/alloc.h"

int drift_fuse_exact_widening(drift_dtype from, drift_dtype to) {
    return to == DRIFT_F32 && (from == DRIFT_BF16 || from == DRIFT_F16);
}

void drift_fuse_plan_free(drift_fuse_plan *p) {
    if (!p) return;
    drift_free(p->action);
    drift_free(p->out);
    memset(p, 0, sizeof *p);
}

static int is_elementwise(drift_op_kind k) {
    return k == DRIFT_OP_ADD || k == DRIFT_OP_SUB || k == DRIFT_OP_MUL || k == DRIFT_OP_AFFINE || k == DRIFT_OP_SILU ||
           k == DRIFT_OP_GELU_TANH;
}

/* Consumers that read any float dtype exactly (widened to fp32) and whose
 * result does not depend on the input's storage dtype (fuse.h, (a)). */
static int reads_widened(drift_op_kind k) {
    return is_elementwise(k) || k == DRIFT_OP_CAST || k == DRIFT_OP_LAYER_NORM || k == DRIFT_OP_ROPE;
}

int drift_fuse_plan_build(const drift_graph *g, const drift_fuse_opts *o, drift_fuse_plan *p, drift_err *err) {
    if (!p) return drift_err_set(err, DRIFT_E_INTERNAL, "fuse", "drift_fuse_plan_build: NULL plan");
    memset(p, 0, sizeof *p);
    if (!g) return drift_err_set(err, DRIFT_E_INTERNAL, "fuse", "drift_fuse_plan_build: NULL graph");
    if (!drift_graph_is_assigned(g))
        return drift_err_set(err, DRIFT_E_INPUT, "fuse", "the graph has no explicit dtypes");
    const unsigned char *live = o ? o->live : NULL, *fixed = o ? o->fixed : NULL;
    const int sites = o ? o->observe_sites : 0;
    const int n = drift_graph_count(g), output = drift_graph_output(g);
    const size_t nn = (size_t)(n ? n : 1);
    int rc = DRIFT_OK;
    int *ncons = drift_calloc(nn + 1, sizeof *ncons); /* CSR offsets of live consumers */
    int *cons = NULL, *fill = NULL;
    p->action = drift_calloc(nn, sizeof *p->action);
    p->out = drift_calloc(nn, sizeof *p->out);
    if (!ncons || !p->action || !p->out) goto nomem;
    p->n = n;

    /* live consumers of every value (one entry per input slot) */
    for (int i = 0; i < n; i++) {
        const drift_value *v = drift_graph_value(g, i);
        p->out[i] = v->kind == DRIFT_VAL_NODE ? v->op.out : v->dtype;
        if (v->kind != DRIFT_VAL_NODE || (live && !live[i])) continue;
        for (int k = 0; k < v->op.n_in; k++) ncons[v->in[k] + 1]++;
    }
    for (int i = 0; i < n; i++) ncons[i + 1] += ncons[i];
    cons = drift_malloc((size_t)(ncons[n] ? ncons[n] : 1) * sizeof *cons);
    fill = drift_calloc(nn, sizeof *fill);
    if (!cons || !fill) goto nomem;
    for (int i = 0; i < n; i++) {
        const drift_value *v = drift_graph_value(g, i);
        if (v->kind != DRIFT_VAL_NODE || (live && !live[i])) continue;
        for (int k = 0; k < v->op.n_in; k++) cons[ncons[v->in[k]] + fill[v->in[k]]++] = i;
    }

    /* In id (execution) order, so p->out of every input is final. */
    for (int i = 0; i < n; i++) {
        const drift_value *v = drift_graph_value(g, i);
        if (v->kind != DRIFT_VAL_NODE || (live && !live[i]) || p->action[i]) continue;
        const int observed = sites && v->site, nc = ncons[i + 1] - ncons[i];
        if (v->op.kind == DRIFT_OP_CAST) {
            /* (a) skip an exact widening whose consumers all read the narrow value as well */
            const drift_dtype from = p->out[v->in[0]];
            if (!drift_fuse_exact_widening(from, v->op.out) || observed || i == output || nc == 0) continue;
            int ok = 1;
            for (int c = ncons[i]; c < ncons[i + 1] && ok; c++) {
                const drift_value *w = drift_graph_value(g, cons[c]);
                ok = reads_widened(w->op.kind) && !(fixed && fixed[i] && !fixed[cons[c]]);
            }
            if (!ok) continue;
            p->action[i] = DRIFT_FUSE_SKIP_CAST;
            p->out[i] = from;
            p->skipped++;
        } else if (is_elementwise(v->op.kind) && v->op.out == DRIFT_F32) {
            /* (b) round once to the dtype of the only consumer, a narrowing cast */
            if (nc != 1 || observed || i == output || (fixed && fixed[i])) continue;
            const int c = cons[ncons[i]];
            const drift_value *w = drift_graph_value(g, c);
            if (w->op.kind != DRIFT_OP_CAST || (w->op.out != DRIFT_BF16 && w->op.out != DRIFT_F16) || p->action[c])
                continue;
            p->out[i] = w->op.out;
            p->action[c] = DRIFT_FUSE_FOLD_CAST;
            p->out[c] = w->op.out;
            p->folded++;
        }
    }
    goto done;
nomem:
    rc = drift_err_set(err, DRIFT_E_NOMEM, "fuse", "out of memory (cast folding plan)");
    drift_fuse_plan_free(p);
done:
    drift_free(ncons);
    drift_free(cons);
    drift_free(fill);
    return rc;
}
