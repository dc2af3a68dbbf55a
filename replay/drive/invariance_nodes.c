/* drift invariance: the forward at batch B with every node observed, and
 * the comparison against batch 1 (invariance_internal.h). */
#include "replay/drive/invariance_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "formats/dtype.h"
#include "replay/analysis/metrics.h"
#include "replay/capture/aten_model.h"

static uint64_t hash_f32(const float *v, int64_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the fp32 bit patterns, a word at a time */
    for (int64_t i = 0; i < n; i++) {
        h ^= drift_f32_bits(v[i]);
        h *= 1099511628211ull;
    }
    return h;
}

/* ---- one forward at batch B ------------------------------------------------- */


void drift_inv_fwd_free(drift_inv_fwd *b) {
    if (b->m) {
        b->m->params = NULL;
        for (int i = 0; i < 3; i++) b->m->buffers[i] = NULL;
    }
    drift_model_free(b->m);
    drift_forward_free(b->f);
    free(b->ids);
    free(b->ref_id);
    memset(b, 0, sizeof *b);
}

int drift_inv_fwd_make(drift_model *base, int B, const drift_plan *plan, drift_side side,
                          const drift_dtype handed[DRIFT_INPUT_COUNT], drift_inv_fwd *out, drift_err *err) {
    memset(out, 0, sizeof *out);
    int rc;
    if (base->captured) { /* the captured graph lowered again at batch B */
        if ((rc = drift_capture_model_rebatch(base, B, &out->m, err))) return rc;
    } else {
        drift_family_config cfg = base->cfg;
        cfg.batch = B;
        char spec[1024];
        drift_family_format(&cfg, spec, sizeof spec);
        if ((rc = drift_model_create(spec, &out->m, err))) return rc;
    }
    /* the same masters and buffers: nothing of them depends on the batch */
    drift_hostset_free(out->m->params);
    out->m->params = base->params;
    for (int i = 0; i < 3; i++) {
        drift_hostset_free(out->m->buffers[i]);
        out->m->buffers[i] = base->buffers[i];
    }
    if ((rc = drift_forward_prepare(out->m, plan, side, handed, &out->f, err))) return rc;
    int n = drift_graph_count(out->f->assigned);
    for (int id = 0; id < n && !rc; id++) {
        const drift_value *v = drift_graph_value(out->f->assigned, id);
        if (v->kind != DRIFT_VAL_NODE || v->site) continue;
        char name[32];
        snprintf(name, sizeof name, "@%d", id); /* every node observed, not only the recorded sites */
        rc = drift_graph_set_site(out->f->assigned, id, name, err);
    }
    if (rc) return rc;
    out->n_ids = drift_graph_sites(out->f->assigned, NULL, 0);
    out->ids = drift_malloc((size_t)(out->n_ids ? out->n_ids : 1) * sizeof *out->ids);
    if (!out->ids) return drift_err_set(err, DRIFT_E_NOMEM, "invariance", "out of memory");
    drift_graph_sites(out->f->assigned, out->ids, out->n_ids);
    return DRIFT_OK;
}

/* ---- comparing a run against the reference -------------------------------- */



static void fill_op(const drift_graph *g, int id, drift_inv_op *op) {
    memset(op, 0, sizeof *op);
    op->node = id;
    const drift_value *v = drift_graph_value(g, id);
    if (!v) { op->node = -1; return; }
    const char *label = v->name ? v->name : (v->site && v->site[0] != '@' ? v->site : "");
    snprintf(op->label, sizeof op->label, "%s", label);
    snprintf(op->kind, sizeof op->kind, "%s", drift_graph_op_name(v->op.kind));
    snprintf(op->dtype, sizeof op->dtype, "%s", drift_dtype_name(v->dtype));
    op->n_in = v->op.n_in;
    for (int k = 0; k < v->op.n_in && k < 3; k++) {
        const drift_value *x = drift_graph_value(g, v->in[k]);
        if (!x) continue;
        op->in_ndim[k] = x->ndim;
        memcpy(op->in_shape[k], x->shape, sizeof op->in_shape[k]);
    }
    op->out_ndim = v->ndim;
    memcpy(op->out_shape, v->shape, sizeof op->out_shape);
    /* the op that computed the first input, through moves and casts: another op at another batch
       (torch's one-row bmm alone, addmm in a batch) makes this node differ although it is no cause */
    const drift_value *x = v->op.n_in > 0 ? drift_graph_value(g, v->in[0]) : NULL;
    for (int hop = 0; x && x->kind == DRIFT_VAL_NODE && hop < 16; hop++) {
        const drift_op_kind k = x->op.kind;
        if (k != DRIFT_OP_VIEW && k != DRIFT_OP_NARROW && k != DRIFT_OP_STRIDED && k != DRIFT_OP_PERMUTE &&
            k != DRIFT_OP_CAST)
            break;
        x = x->op.n_in > 0 ? drift_graph_value(g, x->in[0]) : NULL;
    }
    if (x && x->kind == DRIFT_VAL_NODE) snprintf(op->input_from, sizeof op->input_from, "%s", drift_graph_op_name(x->op.kind));
}

/* 1 + the one dim of t that is B times the reference's while every other dim equals it, else 0. */
static int batch_dim(const drift_tensor *t, const drift_inv_ref *r, int B) {
    int d = 0;
    if (t->ndim != r->ndim) return 0;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == r->shape[i]) continue;
        if (d || t->shape[i] != (int64_t)B * r->shape[i]) return 0;
        d = i + 1;
    }
    return d;
}

/* The sample's block (position pos) of dim d of v (shape sh, nd dims), rb rows of it per sample,
 * gathered into out. */
static void gather_sample(const float *v, int nd, const int64_t *sh, int d, int64_t rb, int pos, float *out) {
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < d; i++) outer *= sh[i];
    for (int i = d + 1; i < nd; i++) inner *= sh[i];
    for (int64_t o = 0; o < outer; o++)
        memcpy(out + (size_t)(o * rb * inner), v + (size_t)((o * sh[d] + pos * rb) * inner), (size_t)(rb * inner) * sizeof *out);
}

/* Counts node id (reference value rid, observed at site) compared, and as the first divergent
 * node and site when mine (the sample's values) differs from the reference's. */
static int compare(drift_inv_run *s, const drift_inv_fwd *bf, int id, int rid, const char *site, const drift_tensor *t,
                   const drift_inv_ref *r, const float *mine, const char *kernel) {
    drift_inv_config *c = s->c;
    c->nodes_compared++;
    if (hash_f32(mine, r->numel) == r->hash) return DRIFT_OK;
    c->nodes_diff++;
    if (c->op.node < 0) {
        fill_op(bf->f->assigned, id, &c->op);
        fill_op(s->ref_bf->f->assigned, rid, &c->op_ref);
        snprintf(c->op.kernel, sizeof c->op.kernel, "%s", kernel);
        snprintf(c->op_ref.kernel, sizeof c->op_ref.kernel, "%s", r->kernel);
    }
    if (site[0] != '@' && !c->first_site[0]) {
        int64_t rn = 0;
        drift_dtype dt = DRIFT_F32;
        const float *rv = drift_site_cache_get(s->sites, site, &rn, &dt);
        if (rv && rn == r->numel) {
            snprintf(c->first_site, sizeof c->first_site, "%s", site);
            drift_metric_acc acc;
            drift_metric_acc_init(&acc);
            drift_metric_acc_add_f32(&acc, mine, rv, (size_t)rn, NULL, NULL);
            drift_ulp_acc ua;
            drift_metrics_ulp_init(&ua);
            drift_metrics_accumulate_ulp_f32(mine, rv, (size_t)rn, t->dtype, &ua);
            c->site_n_diff = acc.n_diff;
            c->site_numel = rn;
            c->site_max_ulp = ua.max_ulp;
            snprintf(c->site_dtype, sizeof c->site_dtype, "%s", drift_dtype_name(t->dtype));
        }
    }
    return DRIFT_OK;
}

int drift_inv_on_node(const char *site, const drift_tensor *t, void *user, drift_err *err) {
    drift_inv_run *s = user;
    const drift_inv_fwd *bf = s->bf;
    /* sites arrive in execution order */
    int j = -1;
    for (int k = 0; k < bf->n_ids && j < 0; k++) {
        int i = (s->cursor + k) % bf->n_ids;
        const drift_value *v = drift_graph_value(bf->f->assigned, bf->ids[i]);
        if (v && v->site && strcmp(v->site, site) == 0) j = i;
    }
    if (j < 0) return drift_err_set(err, DRIFT_E_INTERNAL, site, "not in the forward's site list");
    s->cursor = j + 1;
    int id = bf->ids[j], rid = s->storing || !bf->ref_id ? id : bf->ref_id[id];
    if (rid < 0) return DRIFT_OK; /* no counterpart in the reference */
    if ((size_t)t->numel > s->cap) {
        float *b = drift_realloc(s->buf, (size_t)t->numel * sizeof *b);
        if (!b) return drift_err_set(err, DRIFT_E_NOMEM, site, "out of memory");
        s->buf = b;
        s->cap = (size_t)t->numel;
    }
    int rc = drift_backend_download_f32(t->be, t, s->buf, err);
    if (rc) return rc;
    drift_inv_ref *r = &s->ref[rid];
    const drift_value *val = drift_graph_value(bf->f->assigned, id);
    char kernel[128] = ""; /* the backend's choice for a GEMM or an attention, read right after it ran */
    if (val->kind == DRIFT_VAL_NODE &&
        (val->op.kind == DRIFT_OP_LINEAR || val->op.kind == DRIFT_OP_BMM || val->op.kind == DRIFT_OP_ATTENTION))
        drift_backend_last_choice(t->be, kernel, sizeof kernel);
    if (s->storing) {
        snprintf(r->kernel, sizeof r->kernel, "%s", kernel);
        r->hash = hash_f32(s->buf, t->numel);
        r->numel = t->numel;
        r->dim0 = t->ndim ? t->shape[0] : 1;
        r->ndim = t->ndim;
        memcpy(r->shape, t->shape, sizeof r->shape);
        r->seen = 1;
        if (site[0] != '@') return drift_site_cache_put_f32(s->sites, site, t->dtype, s->buf, t->numel, err);
        return DRIFT_OK;
    }
    if (!r->seen) return DRIFT_OK;
    /* the sample's block of dim 0, or of the one dim B times the reference's ([3, B, L, D]
     * rope tables), or the whole value when it has no batch dim */
    const float *mine = NULL;
    float *gathered = NULL;
    int64_t dim0 = t->ndim ? t->shape[0] : 1;
    int bd = 0;
    if (s->B > 1 && t->numel == (int64_t)s->B * r->numel && dim0 == (int64_t)s->B * r->dim0)
        mine = s->buf + (size_t)s->pos * (size_t)r->numel;
    else if (t->numel == r->numel)
        mine = s->buf;
    else if (s->B > 1 && t->numel == (int64_t)s->B * r->numel && (bd = batch_dim(t, r, s->B)) > 0) {
        if (!(gathered = drift_malloc((size_t)(r->numel ? r->numel : 1) * sizeof *gathered)))
            return drift_err_set(err, DRIFT_E_NOMEM, site, "out of memory");
        gather_sample(s->buf, t->ndim, t->shape, bd - 1, r->shape[bd - 1], s->pos, gathered);
        mine = gathered;
    }
    if (!mine) return DRIFT_OK;
    rc = compare(s, bf, id, rid, site, t, r, mine, kernel);
    drift_free(gathered);
    return rc;
}

/* Runs bf on inputs; with st the nodes are observed (stored or compared).
 * The sample's output row goes to *row_out (owned by the caller, out_row
 * elements). */
int drift_inv_run_one(const drift_inv_fwd *bf, const drift_backend *be, const drift_hostset *in, drift_inv_run *st, int pos,
                   float **row_out, int64_t *out_row, drift_err *err) {
    drift_exec_result res;
    memset(&res, 0, sizeof res);
    int rc = drift_forward_run(bf->f, bf->m, be, in, st ? drift_inv_on_node : NULL, st, &res, err);
    if (!rc) {
        int B = bf->m->cfg.batch;
        int64_t n = res.numel / B;
        *row_out = drift_malloc((size_t)(n ? n : 1) * sizeof **row_out);
        if (!*row_out) rc = drift_err_set(err, DRIFT_E_NOMEM, "invariance", "out of memory");
        else {
            memcpy(*row_out, res.f32 + (size_t)pos * (size_t)n, (size_t)n * sizeof **row_out);
            *out_row = n;
        }
    }
    drift_exec_result_free(&res);
    return rc;
}
