/* drift invariance: which value of the reference forward (batch 1) each value
 * of a forward at another batch is (invariance_internal.h). A family model
 * builds the same program at every batch, value for value; a captured graph
 * lowered at another batch may not (a view that is a no-op at one batch needs
 * a node at another), so its compute values are matched by their graph node
 * (label), op and rank among the values of that label and op. Pure data
 * movement is not matched (its values are its input's), nor a key whose count
 * differs between the two programs (ambiguous). A loop over the samples unrolled
 * again at this batch (replay/capture/aten_unroll.c) runs iteration 0 as NAME and
 * iteration J as NAME__bJ: the sample at position p is iteration p, so NAME__bp is
 * matched with the reference's NAME, and the other iterations (pad rows) with none. A
 * split over chunks of rows (NAME__cJ) holds the sample's rows in the same chunks as
 * alone only at position 0: matched there by name, elsewhere not at all (the join's rows
 * are compared). Integer values (ids, masks, indices: exact, and an index into the batch moves
 * with the sample's position) are not matched. */
#include "replay/drive/invariance_internal.h"

#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "replay/capture/aten_unroll.h"

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

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The template of value label: drift_aten_unroll_template of its node's name (the label up to its
 * first ':'), with the rest of the label kept (an autocast cast of a copy, "conv3d__b1:autocast:bf16",
 * is the cast of "conv3d": "conv3d:autocast:bf16"); the copy's index into *j. */
static int template_of(const char *label, char *buf, size_t n, int *j) {
    const char *colon = strchr(label, ':');
    const size_t len = colon ? (size_t)(colon - label) : strlen(label);
    char node[DRIFT_MAX_FQN];
    if (len >= sizeof node) return 0;
    memcpy(node, label, len);
    node[len] = 0;
    const int kind = drift_aten_unroll_template(node, buf, n);
    if (!kind) return 0;
    *j = atoi(node + strlen(buf) + 3);
    if (colon && strlen(buf) + strlen(colon) < n) strcat(buf, colon);
    return kind;
}

/* The compute values of g as keys sorted by (label, op, rank), with counts; *n of them. pos >= 0
 * (the forward at another batch): a loop's iteration pos stands for iteration 0 (its label the
 * template's, kept in *names to free), the other iterations are left out. */
static key *keys_of(const drift_graph *g, int pos, char ***names, int *n_names, int *n) {
    int total = drift_graph_count(g), k = 0, nt = 0, nn = 0;
    key *ks = drift_malloc((size_t)(total ? total : 1) * sizeof *ks);
    const char **tmpl = drift_malloc((size_t)(total ? total : 1) * sizeof *tmpl); /* templates with copies, sorted */
    char **own = drift_calloc((size_t)(total ? total : 1), sizeof *own);
    char buf[DRIFT_MAX_FQN];
    if (!ks || !tmpl || !own) goto oom;
    for (int id = 0; pos >= 0 && id < total; id++) {
        const drift_value *v = drift_graph_value(g, id);
        int j;
        if (v->kind != DRIFT_VAL_NODE || !v->name || !template_of(v->name, buf, sizeof buf, &j)) continue;
        if (!(own[nn] = drift_malloc(strlen(buf) + 1))) goto oom;
        memcpy(own[nn], buf, strlen(buf) + 1);
        tmpl[nt++] = own[nn++];
    }
    qsort(tmpl, (size_t)nt, sizeof *tmpl, cmp_str);
    for (int id = 0; id < total; id++) {
        const drift_value *v = drift_graph_value(g, id);
        /* integer values (ids, masks, indices) are exact: they cannot round differently at another
         * batch, and an index into the batch moves with it (a router's token ids at position 1, an
         * index wrapped by the size of the batch's rows) */
        if (v->kind != DRIFT_VAL_NODE || moves_data(v->op.kind) || drift_dtype_is_int(v->dtype)) continue;
        const char *label = v->name ? v->name : "";
        int j = 0;
        const int kind = pos >= 0 ? template_of(label, buf, sizeof buf, &j) : 0;
        if (kind == 'c') { /* chunks of rows: the same chunk as alone at position 0 only */
            if (pos > 0) continue;
        } else if (kind == 'b') {
            if (j != pos) continue; /* another iteration: a pad row's */
            const char **t = bsearch(&(const char *){buf}, tmpl, (size_t)nt, sizeof *tmpl, cmp_str);
            if (!t) continue;
            label = *t;
        } else if (pos > 0 && nt && bsearch(&label, tmpl, (size_t)nt, sizeof *tmpl, cmp_str)) {
            continue; /* iteration 0: a pad row's here */
        }
        ks[k++] = (key){label, v->op.kind, 0, id, 0};
    }
    qsort(ks, (size_t)k, sizeof *ks, cmp_key);
    for (int i = 0; i < k;) {
        int j = i;
        while (j < k && !cmp_label_kind(&ks[i], &ks[j])) j++;
        for (int q = i; q < j; q++) ks[q].rank = q - i, ks[q].count = j - i;
        i = j;
    }
    free(tmpl);
    *names = own;
    *n_names = nn;
    *n = k;
    return ks;
oom:
    for (int i = 0; own && i < nn; i++) free(own[i]);
    free(own);
    free(tmpl);
    free(ks);
    return NULL;
}

/* 1 unless a and b are a chunk of rows (NAME__cJ) of another shape (the chunk that holds the
 * sample's last rows and pad rows at once). */
static int same_chunk(const drift_graph *ga, key a, const drift_graph *gb, key b) {
    char buf[DRIFT_MAX_FQN];
    int j;
    if (template_of(a.label, buf, sizeof buf, &j) != 'c') return 1;
    const drift_value *va = drift_graph_value(ga, a.id), *vb = drift_graph_value(gb, b.id);
    return va->ndim == vb->ndim && !memcmp(va->shape, vb->shape, (size_t)va->ndim * sizeof *va->shape);
}

int drift_inv_fwd_match(drift_inv_fwd *cur, const drift_inv_fwd *ref, int pos, drift_err *err) {
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
    int kc = 0, kr = 0, na = 0, nb = 0;
    char **sa = NULL, **sb = NULL;
    key *a = keys_of(gc, pos, &sa, &na, &kc), *b = keys_of(gr, -1, &sb, &nb, &kr);
    int rc = DRIFT_OK;
    if (!a || !b) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, "invariance", "out of memory");
        goto done;
    }
    for (int i = 0, j = 0; i < kc && j < kr;) {
        int c = cmp_label_kind(&a[i], &b[j]);
        if (c < 0) { i++; continue; }
        if (c > 0) { j++; continue; }
        if (a[i].count == b[j].count && same_chunk(gc, a[i], gr, b[j])) cur->ref_id[a[i].id] = b[j].id;
        i++, j++;
    }
done:
    for (int i = 0; i < na; i++) free(sa[i]);
    for (int i = 0; i < nb; i++) free(sb[i]);
    free(sa);
    free(sb);
    free(a);
    free(b);
    return rc;
}
