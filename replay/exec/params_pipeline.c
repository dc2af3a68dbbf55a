/* Read, cast and upload overlapped (params_pipeline.h). */
#include "replay/exec/params_pipeline.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/alloc.h"
#include "formats/checkpoint.h"
#include "replay/exec/params_load.h"
#include "replay/exec/params_trace_stream.h"

static double pl_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The executor's await hook: parameter fqn's host values are ready. One
 * source: the checkpoint's readers, or the trace's. */
typedef struct gate {
    drift_ckpt_stream *ck;
    drift_params_trace_stream *tr;
    const drift_param_table *table;
    const size_t *pos;           /* table index -> the checkpoint stream's job */
} gate;

static int await_param(const char *fqn, void *user, drift_err *err) {
    const gate *g = user;
    long i = drift_param_table_find(g->table, fqn);
    if (i < 0) return DRIFT_OK; /* not one of the model's: the executor reports it has no values */
    return g->ck ? drift_ckpt_stream_wait(g->ck, g->pos[i], err) : drift_params_trace_stream_wait(g->tr, (size_t)i, err);
}

/* order[k]: the table index of the k-th parameter the graph reads (value id
 * order, as the executor materialises leaves), then those it never reads. */
static void first_use_order(const drift_model *m, const drift_graph *g, size_t *order, unsigned char *seen) {
    size_t k = 0, n = m->table.n;
    for (int id = 0; id < drift_graph_count(g); id++) {
        const drift_value *v = drift_graph_value(g, id);
        if (!v || v->kind != DRIFT_VAL_PARAM || !v->name) continue;
        long i = drift_param_table_find(&m->table, v->name);
        if (i < 0 || seen[i]) continue;
        seen[i] = 1;
        order[k++] = (size_t)i;
    }
    for (size_t i = 0; i < n; i++)
        if (!seen[i]) order[k++] = i;
}

/* Adopts set as m's masters and drops what was pending (success). */
static void adopt(drift_model *m, drift_hostset *set) {
    drift_hostset_free(m->params);
    m->params = set;
    drift_params_ref_free(m->pending_ref);
    drift_free(m->pending_ref);
    m->pending_ref = NULL;
    drift_free(m->pending_trace);
    m->pending_trace = NULL;
}

int drift_model_warm_load(drift_model *m, const drift_forward *f, const drift_backend *be, drift_exec_cache *cache,
                          drift_exec_site_fn on_site, drift_err *err) {
    if ((!m->pending_ref && !m->pending_trace) || !cache)
        return drift_err_set(err, DRIFT_E_INTERNAL, "params", "drift_model_warm_load: nothing deferred or no cache");
    const drift_params_ref *ref = m->pending_ref;
    const char *root = ref ? (m->weights_root ? m->weights_root : ref->weights_root) : NULL;
    const size_t n = m->table.n, nn = n ? n : 1;
    size_t *which = drift_calloc(nn, sizeof *which), *order = drift_calloc(nn, sizeof *order);
    size_t *pos = drift_calloc(nn, sizeof *pos), *swhich = drift_calloc(nn, sizeof *swhich);
    float **sdst = drift_calloc(nn, sizeof *sdst);
    unsigned char *seen = drift_calloc(nn, 1);
    drift_hostset *set = NULL;
    float **dst = NULL;
    gate g = {.table = &m->table, .pos = pos};
    int rc = which && order && pos && swhich && sdst && seen ? DRIFT_OK
                                                             : drift_err_set(err, DRIFT_E_NOMEM, "params", "out of memory");
    if (!rc && ref) rc = drift_model_match_params_ref(m, ref, which, err);
    if (!rc) rc = drift_model_alloc_params(m, &set, &dst, err);
    drift_load_report *l = &m->load;
    memset(l, 0, sizeof *l);
    l->by_reference = ref != NULL;
    l->overlapped = 1;
    if (!rc && ref && m->load_baseline) {
        rc = drift_ckpt_read_sequential(ref, root, which, n, 1, &l->baseline_bytes, &l->baseline_seconds, err);
        if (!rc) drift_ckpt_drop_cache(ref, root, which, n); /* the pipeline reads cold too */
    }
    const drift_hostset *bufs = NULL;
    if (!rc) rc = drift_model_buffers(m, f->rope, &bufs, err);
    if (!rc) {
        first_use_order(m, f->assigned, order, seen);
        for (size_t k = 0; k < n; k++) {
            swhich[k] = which[order[k]];
            sdst[k] = dst[order[k]];
            pos[order[k]] = k;
        }
    }
    const double t0 = pl_now();
    if (!rc && ref) rc = drift_ckpt_stream_start(ref, root, swhich, sdst, n, drift_ckpt_default_threads(), &g.ck, err);
    if (!rc && !ref) rc = drift_params_trace_stream_start(m->pending_trace, &m->table, order, dst, 1, &g.tr, err);
    if (!rc) {
        drift_exec_inputs in = {.params = set, .buffers = bufs, .on_site = on_site, .cache = cache,
                                .await_param = await_param, .await_user = &g};
        drift_exec_options opts = {.alias = -1, .fuse_casts = -1, .fixed_only = 1};
        rc = drift_exec_run_ex(f->assigned, be, &in, &opts, NULL, err);
        if (!rc) rc = drift_backend_sync(be, err);
    }
    if (g.ck || g.tr) {
        drift_ckpt_stats st;
        memset(&st, 0, sizeof st);
        drift_err lerr;
        drift_err_clear(&lerr);
        int lrc = g.ck ? drift_ckpt_stream_finish(g.ck, rc != DRIFT_OK, &st, &lerr)
                       : drift_params_trace_stream_finish(g.tr, rc != DRIFT_OK, &st.bytes, &st.seconds, &lerr);
        if (g.tr) {
            st.tensors = n;
            st.files = st.threads = 1;
        }
        if (lrc) { /* the load's own error (hash, file) explains a stopped warm-up best */
            rc = lrc;
            if (err) *err = lerr;
        }
        l->bytes = st.bytes;
        l->tensors = st.tensors;
        l->files = st.files;
        l->threads = st.threads;
        l->seconds = st.seconds;
        l->pipeline_seconds = pl_now() - t0;
    }
    if (!rc) {
        adopt(m, set);
        set = NULL;
    }
    drift_hostset_free(set);
    drift_free(dst);
    drift_free(which);
    drift_free(order);
    drift_free(pos);
    drift_free(swhich);
    drift_free(sdst);
    drift_free(seen);
    return rc;
}

int drift_model_load_pending_values(drift_model *m, drift_err *err) {
    if (!m->pending_trace) return drift_err_set(err, DRIFT_E_INTERNAL, "params", "no deferred /params to read");
    const size_t nn = m->table.n ? m->table.n : 1;
    size_t *order = drift_calloc(nn, sizeof *order);
    drift_hostset *set = NULL;
    float **dst = NULL;
    drift_params_trace_stream *s = NULL;
    int rc = order ? DRIFT_OK : drift_err_set(err, DRIFT_E_NOMEM, "params", "out of memory");
    for (size_t i = 0; order && i < m->table.n; i++) order[i] = i;
    if (!rc) rc = drift_model_alloc_params(m, &set, &dst, err);
    if (!rc) rc = drift_params_trace_stream_start(m->pending_trace, &m->table, order, dst, 0, &s, err);
    if (!rc) rc = drift_params_trace_stream_finish(s, 0, NULL, NULL, err); /* no consumer: read all, then use */
    memset(&m->load, 0, sizeof m->load);
    if (!rc) {
        adopt(m, set);
        set = NULL;
    }
    drift_hostset_free(set);
    drift_free(dst);
    drift_free(order);
    return rc;
}

int drift_params_overlap_enabled(void) {
    const char *e = getenv("DRIFT_LOAD_OVERLAP");
    return !(e && e[0] == '0' && e[1] == '\0');
}
