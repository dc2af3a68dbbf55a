/* FSDP2-style shard, cast and all-gather of the parameters (fsdp.h). */
#include "replay/dist/fsdp.h"
#include "formats/alloc.h"

#include <stdlib.h>
#include <string.h>

void drift_fsdp_chunk(int64_t d0, int rank, int world, int64_t *chunk, int64_t *first, int64_t *rows) {
    int64_t c = world > 0 ? (d0 + world - 1) / world : d0;
    int64_t f = (int64_t)rank * c;
    int64_t r = d0 - f;
    if (r < 0) r = 0;
    if (r > c) r = c;
    *chunk = c;
    *first = f < d0 ? f : d0;
    *rows = r;
}

typedef struct fparam {
    size_t row;                  /* table row */
    int target;                  /* value id the forward reads (cast node or leaf) */
    drift_dtype master, fwd;
    int64_t d0, inner, chunk, first, rows, off; /* off: element offset in the packed shard */
} fparam;

static void tensor_1d(drift_tensor *t, const drift_backend *be, drift_dtype dt, int64_t n) {
    memset(t, 0, sizeof *t);
    t->be = be;
    t->dtype = dt;
    t->ndim = 1;
    t->shape[0] = n > 0 ? n : 1;
    t->numel = t->shape[0];
}

static void release(const drift_backend *be, drift_tensor *t) {
    if (t->data) drift_backend_release(be, t);
    t->data = NULL;
}

/* t's descriptor for dtype dt and shape (nd, shape): nothing allocated. */
static void describe(drift_tensor *t, const drift_backend *be, drift_dtype dt, int nd, const int64_t *shape) {
    memset(t, 0, sizeof *t);
    t->be = be;
    t->dtype = dt;
    t->ndim = nd;
    for (int d = 0; d < nd; d++) t->shape[d] = shape[d];
    t->numel = drift_shape_numel(nd, t->shape);
}

/* out (described by the caller) as a view of base's storage elem_offset
 * elements in. DRIFT_E_UNSUPPORTED, with err untouched, when the backend
 * cannot alias there (no alias function, or e.g. a misaligned offset on
 * cuda): the caller copies instead. Never release a view. */
static int view_of(const drift_backend *be, const drift_tensor *base, int64_t elem_offset, drift_tensor *out,
                   drift_err *err) {
    if (!drift_backend_can_alias(be)) return DRIFT_E_UNSUPPORTED;
    drift_err local;
    drift_err_clear(&local);
    int rc = drift_backend_alias(be, base, elem_offset, out, &local);
    if (rc == DRIFT_E_UNSUPPORTED) return rc;
    if (rc && err) *err = local;
    return rc;
}

static int run1(const drift_backend *be, const drift_op *op, const drift_tensor *in, drift_tensor *out,
                drift_err *err) {
    const drift_tensor *ins[1] = {in};
    return drift_backend_run(be, op, ins, out, err);
}

/* A one-input op of this kind, compute and output dtype; nothing else set. */
static void unary_op(drift_op *op, drift_op_kind kind, drift_dtype compute, drift_dtype out) {
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->n_in = 1;
    op->compute = compute;
    op->out = out;
}

static void narrow_op(drift_op *op, drift_dtype dt, int dim, int64_t start, int64_t length) {
    unary_op(op, DRIFT_OP_NARROW, DRIFT_F32, dt);
    op->dim = dim;
    op->start = start;
    op->length = length;
}

/* Parameter p out of recv ([W, S]: row r is rank r's packed shard of the
 * group) into full (allocated with p's dtype and shape). Rank r's slot of
 * p is recv[r, off .. off + chunk*inner); by torch.chunk semantics ranks
 * 0..K-1 (K = d0 / chunk) hold chunk rows each, rank K holds the tail
 * (d0 - K*chunk rows, maybe none) and the rest only padding, so full is
 * recv[0..K, off .. off + chunk*inner) followed by rank K's tail rows.
 *
 * Where the backend aliases: one 2-D NARROW of the first K rows straight
 * into full's first K*chunk rows and one NARROW of the tail into its place:
 * every element of full written once. Otherwise (no alias function, or a
 * view the backend declines, e.g. an unaligned tail offset on cuda): a 2-D
 * NARROW of all W slots (padding included), a VIEW as [W*chunk, ...] and a
 * NARROW of the first d0 rows into full: three copies, still linear in the
 * size of p (the old pairwise CONCATs copied the growing result W-1 times). */
static int reassemble(const drift_backend *be, const fparam *p, int W, int64_t S, const drift_tensor *recv,
                      drift_tensor *full, drift_err *err) {
    drift_dtype dt = full->dtype;
    if (full->numel == 0 || p->d0 == 0 || p->inner == 0) return DRIFT_OK;
    const int64_t c = p->chunk, ci = c * p->inner, K = p->d0 / c, tail = p->d0 - K * c;
    drift_op op;
    /* the aliasing path */
    drift_tensor src, dst, tsrc, tdst;
    int64_t s_ks[2] = {K, S}, s_kc[2] = {K, ci}, s_flat[1] = {(int64_t)W * S}, s_tail[1] = {tail * p->inner};
    describe(&src, be, dt, 2, s_ks);
    describe(&dst, be, dt, 2, s_kc);
    describe(&tsrc, be, dt, 1, s_flat);
    describe(&tdst, be, dt, 1, s_tail);
    int rc = view_of(be, recv, 0, &src, err);
    if (!rc) rc = view_of(be, full, 0, &dst, err);
    if (!rc && tail) rc = view_of(be, recv, 0, &tsrc, err);
    if (!rc && tail) rc = view_of(be, full, K * ci, &tdst, err);
    if (!rc) {
        narrow_op(&op, dt, 1, p->off, ci);
        rc = run1(be, &op, &src, &dst, err);
        if (!rc && tail) {
            narrow_op(&op, dt, 0, K * S + p->off, tail * p->inner);
            rc = run1(be, &op, &tsrc, &tdst, err);
        }
        return rc;
    }
    if (rc != DRIFT_E_UNSUPPORTED) return rc;
    /* the copying path */
    drift_tensor slots, rows, last;
    int64_t s_wc[2] = {W, ci}, s_rows[DRIFT_MAX_DIMS], s_one[1] = {p->d0 * p->inner};
    int nd = full->ndim > 0 ? full->ndim : 1;
    s_rows[0] = (int64_t)W * c;
    for (int d = 1; d < nd; d++) s_rows[d] = full->shape[d];
    if (full->ndim == 0) s_rows[0] = (int64_t)W * ci; /* a scalar: d0 = inner = 1 */
    describe(&slots, be, dt, 2, s_wc);
    describe(&rows, be, dt, nd, s_rows);
    describe(&last, be, dt, 1, s_one);
    drift_op view;
    unary_op(&view, DRIFT_OP_VIEW, DRIFT_F32, dt);
    narrow_op(&op, dt, 1, p->off, ci);
    rc = drift_backend_alloc(be, &slots, err);
    if (!rc) rc = run1(be, &op, recv, &slots, err);
    if (!rc) rc = drift_backend_alloc(be, &rows, err);
    if (!rc) rc = run1(be, &view, &slots, &rows, err);
    release(be, &slots);
    narrow_op(&op, dt, 0, 0, full->ndim > 0 ? p->d0 : 1);
    if (!rc && full->ndim > 0) {
        rc = run1(be, &op, &rows, full, err);
    } else if (!rc) { /* a scalar: narrow to [1], then view as [] */
        rc = drift_backend_alloc(be, &last, err);
        if (!rc) rc = run1(be, &op, &rows, &last, err);
        if (!rc) rc = run1(be, &view, &last, full, err);
        release(be, &last);
    }
    release(be, &rows);
    return rc;
}

/* One all-gather: the parameters ps[0..n) (one wrap, one forward dtype). */
static int gather_group(const drift_model *m, const drift_graph *g, const drift_backend *be, drift_exec_cache *cache,
                        drift_comm *comm, fparam *ps, size_t n, drift_fsdp_stats *st, drift_err *err) {
    int W = comm->size;
    int64_t S = 0;
    for (size_t i = 0; i < n; i++) {
        ps[i].off = S;
        S += ps[i].chunk * ps[i].inner;
    }
    if (S == 0) S = 1;
    float *host = drift_calloc((size_t)S, sizeof *host);
    if (!host) return drift_err_set(err, DRIFT_E_NOMEM, "fsdp", "out of memory");
    /* this rank's rows of every parameter, each padded to its chunk */
    for (size_t i = 0; i < n; i++) {
        const drift_host_tensor *h = drift_hostset_find(m->params, m->table.params[ps[i].row].fqn);
        if (!h) {
            free(host);
            return drift_err_set(err, DRIFT_E_INTERNAL, "fsdp", "no master for '%s'", m->table.params[ps[i].row].fqn);
        }
        memcpy(host + ps[i].off, h->f32 + ps[i].first * ps[i].inner, (size_t)(ps[i].rows * ps[i].inner) * sizeof *host);
    }
    drift_dtype master = ps[0].master, fwd = ps[0].fwd;
    drift_tensor shard, cast, recv, full;
    int64_t s_recv[2] = {W, S};
    tensor_1d(&shard, be, master, S);
    tensor_1d(&cast, be, fwd, S);
    describe(&recv, be, fwd, 2, s_recv); /* row r: rank r's shard (the gather only counts elements) */
    memset(&full, 0, sizeof full);
    /* the master shard (upload rounds to the master dtype, as the leaf's does),
     * cast to the forward dtype before the gather */
    int rc = drift_backend_alloc(be, &shard, err);
    if (!rc) rc = drift_backend_upload_f32(be, &shard, host, err);
    free(host);
    const drift_tensor *send = &shard;
    if (!rc && master != fwd) {
        drift_op op;
        unary_op(&op, DRIFT_OP_CAST, fwd, fwd);
        const drift_tensor *in[1] = {&shard};
        rc = drift_backend_alloc(be, &cast, err);
        if (!rc) rc = drift_backend_run(be, &op, in, &cast, err);
        send = &cast;
    }
    if (!rc) rc = drift_backend_alloc(be, &recv, err);
    if (!rc) rc = comm->allgather(comm, send, &recv, err);
    if (!rc) {
        st->collectives++;
        st->shard_bytes += S * (int64_t)drift_dtype_size(fwd);
        st->gathered_bytes += S * W * (int64_t)drift_dtype_size(fwd);
    }
    /* each parameter: allocated once in its shape, its rows from every rank copied into place */
    for (size_t i = 0; !rc && i < n; i++) {
        fparam *p = &ps[i];
        const drift_value *v = drift_graph_value(g, p->target);
        describe(&full, be, fwd, v->ndim, v->shape);
        if ((rc = drift_backend_alloc(be, &full, err)) || (rc = reassemble(be, p, W, S, &recv, &full, err))) break;
        if ((rc = drift_exec_cache_put(cache, g, p->target, &full, err))) break;
        st->params++;
    }
    release(be, &full);
    release(be, &recv);
    release(be, &cast);
    release(be, &shard);
    if (!rc) rc = drift_backend_sync(be, err);
    return rc;
}

int drift_fsdp_gather(const drift_model *m, const drift_forward *f, const drift_backend *be, drift_exec_cache *cache,
                      drift_comm *comm, drift_fsdp_stats *stats, drift_err *err) {
    drift_fsdp_stats local;
    memset(&local, 0, sizeof local);
    const drift_graph *g = f->assigned;
    size_t np = m->table.n;
    fparam *all = drift_calloc(np ? np : 1, sizeof *all), *grp = drift_calloc(np ? np : 1, sizeof *grp);
    unsigned char *used = drift_calloc(np ? np : 1, 1);
    int rc = all && grp && used ? DRIFT_OK : drift_err_set(err, DRIFT_E_NOMEM, "fsdp", "out of memory");
    size_t n_all = 0;
    for (size_t i = 0; !rc && i < np; i++) {
        const drift_param_info *pi = &m->table.params[i];
        int leaf = drift_graph_find_leaf(g, DRIFT_VAL_PARAM, pi->fqn);
        if (leaf < 0) continue; /* not read by this forward */
        const drift_value *lv = drift_graph_value(g, leaf), *nv = drift_graph_value(g, leaf + 1);
        fparam *p = &all[n_all++];
        p->row = i;
        p->target = nv && nv->kind == DRIFT_VAL_NODE && nv->origin == DRIFT_ORIGIN_PARAM_CAST && nv->in[0] == leaf
                        ? leaf + 1 : leaf;
        p->master = lv->dtype;
        p->fwd = drift_graph_value(g, p->target)->dtype;
        p->d0 = pi->ndim ? pi->shape[0] : 1;
        p->inner = p->d0 ? pi->numel / p->d0 : 0;
        drift_fsdp_chunk(p->d0, comm->rank, comm->size, &p->chunk, &p->first, &p->rows);
    }
    /* wraps in call order, then the root (-1); within a wrap one gather per forward dtype */
    for (long w = 0; !rc && w <= (long)m->table.n_wraps; w++) {
        int wrap = w < (long)m->table.n_wraps ? (int)w : -1;
        for (;;) {
            size_t n = 0;
            drift_dtype dt = DRIFT_DTYPE_INVALID;
            for (size_t k = 0; k < n_all; k++) {
                fparam *p = &all[k];
                if (used[k] || m->table.params[p->row].wrap != wrap) continue;
                if (dt == DRIFT_DTYPE_INVALID) dt = p->fwd;
                if (p->fwd != dt) continue;
                grp[n++] = *p;
                used[k] = 1;
            }
            if (n == 0) break;
            if ((rc = gather_group(m, g, be, cache, comm, grp, n, &local, err))) break;
        }
    }
    for (size_t k = 0; !rc && k < n_all; k++)
        if (!used[k])
            rc = drift_err_set(err, DRIFT_E_INTERNAL, "fsdp", "parameter '%s' belongs to no wrap (wrap index %d)",
                               m->table.params[all[k].row].fqn, m->table.params[all[k].row].wrap);
    free(all);
    free(grp);
    free(used);
    if (stats) *stats = local;
    return rc;
}
