/* drift invariance: which value of the reference forward (batch 1) each value
 * of a forward at another batch is (invariance_internal.h). A family model
 * builds the same program at every batch, value for value; a captured graph
 * lowered at another batch may not (a view that is a no-op at one batch needs
 * a node at another), so its compute values are matched by their graph node
 * (label), op and rank among the values of that label and op. Pure data
 * movement is not matched (its values are its input's), nor a key whose count
 * differs between the two programs (ambiguous). */
#include "replay/drive/invariance_internal.h"

#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"

typedef struct key {
    const char *label;
    int kind, rank, id, count;
} key;

static int moves_data(int kind) {
    return kind == DRIFT_OP_VIEW || kind == DRIFT_OP_STRIDED || kind == DRIFT_OP_PERMUTE;
}

static int cmp_label_kind(const key *a, const key *b) {
    int c = strcmp(a->label, b->label);
    return c ? c : (a->kind > b->kind) - (a->kind < b->kind);
}

static int cmp_key(const void *pa, const void *pb) {
    const key *a = pa, *b = pb;
    int c = cmp_label_kind(a, b);
    return c ? c : (a->id > b->id) - (a->id < b->id); /* rank follows graph order */
}

/* The compute values of g as keys sorted by (label, op, rank), with counts; *n of them. */
static key *keys_of(const drift_graph *g, int *n) {
    int total = drift_graph_count(g), k = 0;
    key *ks = drift_malloc((size_t)(total ? total : 1) * sizeof *ks);
    if (!ks) return NULL;
    for (int id = 0; id < total; id++) {
        const drift_value *v = drift_graph_value(g, id);
        if (v->kind != DRIFT_VAL_NODE || moves_data(v->op.kind)) continue;
        ks[k++] = (key){v->name ? v->name : "", v->op.kind, 0, id, 0};
    }
    qsort(ks, (size_t)k, sizeof *ks, cmp_key);
    for (int i = 0; i < k;) {
        int j = i;
        while (j < k && !cmp_label_kind(&ks[i], &ks[j])) j++;
        for (int q = i; q < j; q++) ks[q].rank = q - i, ks[q].count = j - i;
        i = j;
    }
    *n = k;
    return ks;
}

int drift_inv_fwd_match(drift_inv_fwd *cur, const drift_inv_fwd *ref, drift_err *err) {
    const drift_graph *gc = cur->f->assigned, *gr = ref->f->assigned;
    int nc = drift_graph_count(gc);
    free(cur->ref_id);
    cur->ref_id = drift_malloc((size_t)(nc ? nc : 1) * sizeof *cur->ref_id);
    if (!cur->ref_id) return drift_err_set(err, DRIFT_E_NOMEM, "invariance", "out of memory");
    if (!cur->m->captured && nc == drift_graph_count(gr)) { /* a family: the same program */
        for (int i = 0; i < nc; i++) cur->ref_id[i] = i;
        return DRIFT_OK;
    }
    for (int i = 0; i < nc; i++) cur->ref_id[i] = -1;
    int kc = 0, kr = 0;
    key *a = keys_of(gc, &kc), *b = keys_of(gr, &kr);
    if (!a || !b) {
        free(a);
        free(b);
        return drift_err_set(err, DRIFT_E_NOMEM, "invariance", "out of memory");
    }
    for (int i = 0, j = 0; i < kc && j < kr;) {
        int c = cmp_label_kind(&a[i], &b[j]);
        if (c < 0) { i++; continue; }
        if (c > 0) { j++; continue; }
        if (a[i].count == b[j].count) cur->ref_id[a[i].id] = b[j].id;
        i++, j++;
    }
    free(a);
    free(b);
    return DRIFT_OK;
}
