/* FSDP2-style shard, cast and all-gather of the parameters (fsdp.h). */
#include "replay/fsdp.h"

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
    if (t->data) be->release(be, t);
    t->data = NULL;
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
    float *host = calloc((size_t)S, sizeof *host);
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
    drift_tensor shard, cast, recv, piece, acc, cat, full;
    tensor_1d(&shard, be, master, S);
    tensor_1d(&cast, be, fwd, S);
    tensor_1d(&recv, be, fwd, S * W);
    memset(&acc, 0, sizeof acc);
    memset(&piece, 0, sizeof piece);
    memset(&cat, 0, sizeof cat);
    memset(&full, 0, sizeof full);
    /* the master shard (upload rounds to the master dtype, as the leaf's does),
     * cast to the forward dtype before the gather */
    int rc = be->alloc(be, &shard, err);
    if (!rc) rc = be->upload_f32(be, &shard, host, err);
    free(host);
    const drift_tensor *send = &shard;
    if (!rc && master != fwd) {
        drift_op op;
        memset(&op, 0, sizeof op);
        op.kind = DRIFT_OP_CAST;
        op.n_in = 1;
        op.compute = fwd;
        op.out = fwd;
        const drift_tensor *in[1] = {&shard};
        rc = be->alloc(be, &cast, err);
        if (!rc) rc = be->run(be, &op, in, &cast, err);
        send = &cast;
    }
    if (!rc) rc = be->alloc(be, &recv, err);
    if (!rc) rc = comm->allgather(comm, send, &recv, err);
    if (!rc) {
        st->collectives++;
        st->shard_bytes += S * (int64_t)drift_dtype_size(fwd);
        st->gathered_bytes += S * W * (int64_t)drift_dtype_size(fwd);
    }
    /* each parameter: its rows from every rank, in rank order, then its shape */
    for (size_t i = 0; !rc && i < n; i++) {
        fparam *p = &ps[i];
        for (int r = 0; !rc && r < W; r++) {
            int64_t c, first, rows;
            drift_fsdp_chunk(p->d0, r, W, &c, &first, &rows);
            if (rows == 0) continue;
            drift_op nar;
            memset(&nar, 0, sizeof nar);
            nar.kind = DRIFT_OP_NARROW;
            nar.n_in = 1;
            nar.compute = DRIFT_F32;
            nar.out = fwd;
            nar.dim = 0;
            nar.start = (int64_t)r * S + p->off;
            nar.length = rows * p->inner;
            tensor_1d(&piece, be, fwd, nar.length);
            const drift_tensor *in1[1] = {&recv};
            if ((rc = be->alloc(be, &piece, err)) || (rc = be->run(be, &nar, in1, &piece, err))) break;
            if (!acc.data) {
                acc = piece;
                memset(&piece, 0, sizeof piece);
                continue;
            }
            drift_op con;
            memset(&con, 0, sizeof con);
            con.kind = DRIFT_OP_CONCAT;
            con.n_in = 2;
            con.compute = DRIFT_F32;
            con.out = fwd;
            con.dim = 0;
            tensor_1d(&cat, be, fwd, acc.numel + piece.numel);
            const drift_tensor *in2[2] = {&acc, &piece};
            if ((rc = be->alloc(be, &cat, err)) || (rc = be->run(be, &con, in2, &cat, err))) break;
            release(be, &acc);
            release(be, &piece);
            acc = cat;
            memset(&cat, 0, sizeof cat);
        }
        if (rc) break;
        const drift_value *v = drift_graph_value(g, p->target);
        drift_op view;
        memset(&view, 0, sizeof view);
        view.kind = DRIFT_OP_VIEW;
        view.n_in = 1;
        view.compute = DRIFT_F32;
        view.out = fwd;
        memset(&full, 0, sizeof full);
        full.be = be;
        full.dtype = fwd;
        full.ndim = v->ndim;
        memcpy(full.shape, v->shape, sizeof full.shape);
        full.numel = v->numel;
        const drift_tensor *in3[1] = {&acc};
        if ((rc = be->alloc(be, &full, err)) || (rc = be->run(be, &view, in3, &full, err))) break;
        release(be, &acc);
        if ((rc = drift_exec_cache_put(cache, g, p->target, &full, err))) break;
        st->params++;
    }
    release(be, &full);
    release(be, &cat);
    release(be, &piece);
    release(be, &acc);
    release(be, &recv);
    release(be, &cast);
    release(be, &shard);
    if (!rc) rc = be->sync(be, err);
    return rc;
}

int drift_fsdp_gather(const drift_model *m, const drift_forward *f, const drift_backend *be, drift_exec_cache *cache,
                      drift_comm *comm, drift_fsdp_stats *stats, drift_err *err) {
    drift_fsdp_stats local;
    memset(&local, 0, sizeof local);
    const drift_graph *g = f->assigned;
    size_t np = m->table.n;
    fparam *all = calloc(np ? np : 1, sizeof *all), *grp = calloc(np ? np : 1, sizeof *grp);
    unsigned char *used = calloc(np ? np : 1, 1);
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
