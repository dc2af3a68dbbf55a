/* Parameters by reference to a checkpoint (params_load.h). */
#include "replay/exec/params_load.h"

#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "formats/checkpoint.h"
#include "replay/exec/params_pipeline.h"

int drift_model_alloc_params(const drift_model *m, drift_hostset **set, float ***dst, drift_err *err) {
    *set = NULL;
    *dst = drift_calloc(m->table.n ? m->table.n : 1, sizeof **dst);
    if (!*dst) return drift_err_set(err, DRIFT_E_NOMEM, "params", "out of memory");
    int rc = drift_hostset_create(set, err);
    for (size_t i = 0; !rc && i < m->table.n; i++) {
        const drift_param_info *pi = &m->table.params[i];
        drift_host_tensor *t = NULL;
        if (!(rc = drift_hostset_add_alloc(*set, pi->fqn, DRIFT_F32, pi->ndim, pi->shape, &t, err))) (*dst)[i] = t->f32;
    }
    if (rc) {
        drift_hostset_free(*set);
        *set = NULL;
        drift_free(*dst);
        *dst = NULL;
    }
    return rc;
}

/* The end of both loads: the read's figures into m->load, and the new
 * parameter set adopted on success (freed otherwise). Takes set. */
static void finish_load(drift_model *m, const drift_ckpt_stats *st, int rc, drift_hostset *set) {
    m->load.bytes = st->bytes;
    m->load.tensors = st->tensors;
    m->load.files = st->files;
    m->load.threads = st->threads;
    m->load.seconds = st->seconds;
    if (!rc) {
        drift_hostset_free(m->params);
        m->params = set;
        set = NULL;
    }
    drift_hostset_free(set);
}

int drift_model_match_params_ref(const drift_model *m, const drift_params_ref *ref, size_t *which, drift_err *err) {
    for (size_t i = 0; i < m->table.n; i++) {
        const drift_param_info *pi = &m->table.params[i];
        long k = drift_params_ref_find(ref, pi->fqn);
        if (k < 0)
            return drift_err_set(err, DRIFT_E_INPUT, "/params_ref",
                                 "/params_ref has no tensor '%s' (model %s needs it)", pi->fqn, m->spec);
        const drift_params_ref_tensor *t = &ref->t[k];
        int same = t->ndim == pi->ndim;
        for (int d = 0; same && d < pi->ndim; d++) same = t->shape[d] == pi->shape[d];
        if (!same)
            return drift_err_set(err, DRIFT_E_INPUT, "/params_ref",
                                 "/params_ref tensor '%s': %d dims / %lld elements, the model needs %d dims / %lld",
                                 pi->fqn, t->ndim, (long long)t->numel, pi->ndim, (long long)pi->numel);
        which[i] = (size_t)k;
    }
    return DRIFT_OK;
}

int drift_model_load_params_ref(drift_model *m, const drift_params_ref *ref, const char *root, drift_err *err) {
    if (!root) root = m->weights_root ? m->weights_root : ref->weights_root;
    size_t *which = drift_calloc(m->table.n ? m->table.n : 1, sizeof *which);
    if (!which) return drift_err_set(err, DRIFT_E_NOMEM, "params", "out of memory");
    int rc = drift_model_match_params_ref(m, ref, which, err);
    drift_hostset *set = NULL;
    float **dst = NULL;
    if (!rc) rc = drift_model_alloc_params(m, &set, &dst, err);
    memset(&m->load, 0, sizeof m->load);
    m->load.by_reference = 1;
    int threads = drift_ckpt_default_threads();
    if (!rc && m->load_baseline)
        rc = drift_ckpt_read_sequential(ref, root, which, m->table.n, 1, &m->load.baseline_bytes,
                                        &m->load.baseline_seconds, err);
    if (!rc && m->load_baseline) drift_ckpt_drop_cache(ref, root, which, m->table.n);
    drift_ckpt_stats st;
    memset(&st, 0, sizeof st);
    if (!rc) rc = drift_ckpt_load(ref, root, which, dst, m->table.n, threads, &st, err);
    finish_load(m, &st, rc, set);
    drift_free(dst);
    drift_free(which);
    return rc;
}

int drift_model_load_pending(drift_model *m, drift_err *err) {
    if (!m->pending_ref && m->pending_trace) return drift_model_load_pending_values(m, err); /* by value */
    if (!m->pending_ref) return drift_err_set(err, DRIFT_E_INTERNAL, "params", "no deferred /params_ref to read");
    int rc = drift_model_load_params_ref(m, m->pending_ref, NULL, err);
    drift_params_ref_free(m->pending_ref);
    drift_free(m->pending_ref);
    m->pending_ref = NULL;
    return rc;
}

int drift_model_load_checkpoint(drift_model *m, const char *path, drift_params_ref *ref, drift_err *err) {
    drift_hostset *set = NULL;
    float **dst = NULL;
    const char **names = drift_calloc(m->table.n ? m->table.n : 1, sizeof *names);
    int64_t *numel = drift_calloc(m->table.n ? m->table.n : 1, sizeof *numel);
    if (!names || !numel) {
        drift_free(names);
        drift_free(numel);
        return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
    }
    int rc = drift_model_alloc_params(m, &set, &dst, err);
    for (size_t i = 0; !rc && i < m->table.n; i++) {
        names[i] = m->table.params[i].fqn;
        numel[i] = m->table.params[i].numel;
    }
    drift_ckpt_stats st;
    memset(&st, 0, sizeof st);
    if (!rc) rc = drift_ckpt_describe(path, names, numel, dst, m->table.n, drift_ckpt_default_threads(), ref, &st, err);
    /* The model's shapes must match the checkpoint's. */
    for (size_t i = 0; !rc && i < m->table.n; i++) {
        const drift_param_info *pi = &m->table.params[i];
        const drift_params_ref_tensor *t = &ref->t[drift_params_ref_find(ref, pi->fqn)];
        int same = t->ndim == pi->ndim;
        for (int d = 0; same && d < pi->ndim; d++) same = t->shape[d] == pi->shape[d];
        if (!same)
            rc = drift_err_set(err, DRIFT_E_INPUT, path, "checkpoint tensor '%s' (%s): %d dims / %lld elements, model %s needs %d dims / %lld",
                               pi->fqn, t->file, t->ndim, (long long)t->numel, m->spec, pi->ndim, (long long)pi->numel);
    }
    if (rc) drift_params_ref_free(ref);
    memset(&m->load, 0, sizeof m->load);
    finish_load(m, &st, rc, set);
    drift_free(dst);
    drift_free(names);
    drift_free(numel);
    return rc;
}
