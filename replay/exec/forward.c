#include "replay/exec/forward.h"
#include "formats/alloc.h"
#include "formats/checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/safetensors.h"
#include "replay/capture/aten_model.h"
#include "replay/models/wan_graph.h"
#include "replay/exec/params_init.h"
#include "replay/exec/params_load.h"
#include "replay/exec/params_trace_stream.h"

int drift_model_create(const char *spec, drift_model **out, drift_err *err) {
    *out = NULL;
    if (spec && !strncmp(spec, "graph:", 6)) return drift_capture_model_from_file(spec + 6, out, err); /* a captured graph */
    drift_model *m = drift_calloc(1, sizeof *m);
    if (!m) return drift_err_set(err, DRIFT_E_NOMEM, spec, "out of memory");
    drift_param_table_init(&m->table);
    int rc;
    if ((rc = drift_family_parse(spec, &m->cfg, err))) goto fail;
    drift_family_format(&m->cfg, m->spec, sizeof m->spec);
    if ((rc = drift_family_param_table(&m->cfg, &m->table, err))) goto fail;
    if ((rc = drift_wan_graph_build(&m->cfg, &m->sem, err))) goto fail;
    *out = m;
    return DRIFT_OK;
fail:
    drift_model_free(m);
    return rc;
}

void drift_model_free(drift_model *m) {
    if (!m) return;
    drift_param_table_free(&m->table);
    drift_graph_free(m->sem);
    free(m->captured_json);
    drift_free(m->captured_notes);
    drift_hostset_free(m->params);
    for (int i = 0; i < 3; i++) drift_hostset_free(m->buffers[i]);
    drift_params_ref_free(m->pending_ref);
    drift_free(m->pending_ref);
    drift_free(m->pending_trace);
    for (int i = 0; i < m->rebatch_nz_n; i++) drift_free(m->rebatch_nz_names[i]);
    drift_free(m->rebatch_nz_names);
    drift_free(m->rebatch_nz_counts);
    free(m);
}

int drift_model_seed_params(drift_model *m, uint64_t seed, drift_err *err) {
    drift_hostset *p = NULL;
    int rc = drift_params_init_seeded(&m->table, seed, &p, err);
    if (rc) return rc;
    drift_hostset_free(m->params);
    m->params = p;
    return DRIFT_OK;
}

/* --- shard assembly -------------------------------------------------------- */
/* An FSDP run writes one trace per rank ("...rank<N>..."), each holding its
 * shard of every parameter (offset + full shape). Replaying one rank file
 * assembles each sharded parameter from the sibling files of the same run:
 * same directory and name with N = 0 .. world_size-1, same run id. */
typedef struct shard_siblings {
    int world, own;
    drift_trace_reader **r;      /* [world]; r[own] is the caller's (borrowed) */
    char (*path)[4096];          /* [world] */
} shard_siblings;

static void siblings_close(shard_siblings *s) {
    if (!s->r) return;
    for (int k = 0; k < s->world; k++)
        if (k != s->own) drift_trace_reader_close(s->r[k]);
    free(s->r);
    free(s->path);
    memset(s, 0, sizeof *s);
}

/* Opens every rank file of r's run. Errors name the missing rank's file. */
static int siblings_open(shard_siblings *s, drift_trace_reader *r, const char *fqn, drift_err *err) {
    const char *path = drift_trace_reader_path(r);
    const drift_trace_meta *meta = drift_trace_reader_meta(r);
    if (meta->world_size < 1 || meta->world_size > 65535 || meta->rank < 0 || meta->rank >= meta->world_size)
        return drift_err_set(err, DRIFT_E_INPUT, path,
                             "/params/%s is a shard, but the root attributes give rank %d of world size %d", fqn,
                             (int)meta->rank, (int)meta->world_size);
    /* the last "rank<digits>" of the file name (not of the directory) */
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *at = NULL;
    for (const char *p = strstr(base, "rank"); p; p = strstr(p + 1, "rank"))
        if (p[4] >= '0' && p[4] <= '9') at = p;
    if (!at)
        return drift_err_set(err, DRIFT_E_INPUT, path,
                             "/params/%s is a shard (world size %d): the other ranks' shards are looked for in "
                             "sibling files named like this one with rank<N>, but this file name has no rank<N>",
                             fqn, (int)meta->world_size);
    const char *digits_end = at + 4;
    while (*digits_end >= '0' && *digits_end <= '9') digits_end++;
    s->world = meta->world_size;
    s->own = meta->rank;
    s->r = drift_calloc((size_t)s->world, sizeof *s->r);
    s->path = drift_calloc((size_t)s->world, sizeof *s->path);
    if (!s->r || !s->path) {
        siblings_close(s);
        return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
    }
    for (int k = 0; k < s->world; k++) {
        int n = snprintf(s->path[k], sizeof s->path[k], "%.*s%d%s", (int)(at + 4 - path), path, k, digits_end);
        if (n < 0 || (size_t)n >= sizeof s->path[k]) {
            siblings_close(s);
            return drift_err_set(err, DRIFT_E_INPUT, path, "file name too long");
        }
        if (k == s->own) {
            s->r[k] = r;
            continue;
        }
        drift_err e2;
        drift_err_clear(&e2);
        if (drift_trace_reader_open(&s->r[k], s->path[k], DRIFT_TRACE_OPEN_NORMAL, &e2)) {
            int rc = drift_err_set(err, DRIFT_E_INPUT, s->path[k],
                                   "cannot open the trace of rank %d of %d (needed to assemble sharded /params, "
                                   "e.g. '%s', for %s): %s",
                                   k, s->world, fqn, path, e2.msg);
            siblings_close(s);
            return rc;
        }
        const drift_trace_meta *mk = drift_trace_reader_meta(s->r[k]);
        if (strcmp(mk->run_id, meta->run_id) != 0 || mk->rank != k || mk->world_size != meta->world_size) {
            int rc = drift_err_set(err, DRIFT_E_INPUT, s->path[k],
                                   "expected rank %d of world size %d of run '%s' (sibling of %s), found rank %d of "
                                   "world size %d of run '%s'",
                                   k, s->world, meta->run_id, path, (int)mk->rank, (int)mk->world_size, mk->run_id);
            siblings_close(s);
            return rc;
        }
    }
    return DRIFT_OK;
}

/* Assembles pi's full tensor into full (pi->numel floats) from every rank's
 * piece; each element must be covered exactly once. */
static int assemble_param(const drift_param_info *pi, shard_siblings *s, float *full, drift_err *err) {
    int rc = DRIFT_OK;
    uint16_t *owner = drift_calloc((size_t)(pi->numel ? pi->numel : 1), sizeof *owner);
    float *piece = NULL;
    char missing[256] = "";
    size_t mlen = 0;
    if (!owner) return drift_err_set(err, DRIFT_E_NOMEM, pi->fqn, "out of memory assembling /params/%s", pi->fqn);
    for (int k = 0; k < s->world && !rc; k++) {
        const char *path = s->path[k];
        long id = drift_trace_reader_find_param(s->r[k], pi->fqn);
        if (id < 0) {
            if (mlen < sizeof missing - 16) mlen += (size_t)snprintf(missing + mlen, sizeof missing - mlen, "%s%d", mlen ? ", " : "", k);
            continue;
        }
        drift_trace_param_info info;
        if ((rc = drift_trace_reader_param(s->r[k], (size_t)id, &info))) break;
        int ok = info.ndim == pi->ndim;
        for (int d = 0; ok && d < pi->ndim; d++) {
            int64_t fs = info.is_shard ? info.full_shape[d] : info.shape[d];
            int64_t off = info.is_shard ? info.offset[d] : 0;
            ok = fs == pi->shape[d] && off >= 0 && info.shape[d] >= 0 && off <= fs && info.shape[d] <= fs - off;
        }
        if (!ok) {
            rc = drift_err_set(err, DRIFT_E_INPUT, path,
                               "/params/%s: rank %d's piece does not fit the model's shape (%d dims, numel %lld): "
                               "%d dims, numel %lld",
                               pi->fqn, k, pi->ndim, (long long)pi->numel, info.ndim, (long long)info.numel);
            break;
        }
        if (info.numel == 0) continue;
        float *np2 = drift_realloc(piece, (size_t)info.numel * sizeof *np2);
        if (!np2) { rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory reading /params/%s", pi->fqn); break; }
        piece = np2;
        if ((rc = drift_trace_read_param(s->r[k], (size_t)id, piece, (size_t)info.numel, err))) break;
        /* place row by row (rows along the last dim) */
        const int nd = pi->ndim;
        const int64_t last = nd ? info.shape[nd - 1] : 1, rows = last ? info.numel / last : 0;
        for (int64_t row = 0; row < rows && !rc; row++) {
            int64_t rem = row, base = 0, stride = nd ? pi->shape[nd - 1] : 1;
            for (int d = nd - 2; d >= 0; d--) {
                int64_t idx = rem % info.shape[d];
                rem /= info.shape[d];
                base += (idx + (info.is_shard ? info.offset[d] : 0)) * stride;
                stride *= pi->shape[d];
            }
            if (nd) base += info.is_shard ? info.offset[nd - 1] : 0;
            for (int64_t j = 0; j < last; j++) {
                if (owner[base + j]) {
                    rc = drift_err_set(err, DRIFT_E_INPUT, path,
                                       "/params/%s: element %lld is covered by rank %d and rank %d (shards overlap)",
                                       pi->fqn, (long long)(base + j), owner[base + j] - 1, k);
                    break;
                }
                owner[base + j] = (uint16_t)(k + 1);
                full[base + j] = piece[row * last + j];
            }
        }
    }
    if (!rc) {
        int64_t first = -1, n_missing = 0;
        for (int64_t i = 0; i < pi->numel; i++)
            if (!owner[i]) {
                if (first < 0) first = i;
                n_missing++;
            }
        if (n_missing)
            rc = drift_err_set(err, DRIFT_E_INPUT, s->path[s->own],
                               "/params/%s: %lld of %lld elements are in no rank file (first: flat index %lld); "
                               "rank files without this parameter: %s",
                               pi->fqn, (long long)n_missing, (long long)pi->numel, (long long)first,
                               mlen ? missing : "none (the shards leave a gap)");
    }
    free(owner);
    free(piece);
    return rc;
}

int drift_model_load_trace(drift_model *m, drift_trace_reader *r, drift_err *err) {
    const char *path = drift_trace_reader_path(r);
    drift_hostset *set = NULL;
    float *buf = NULL;
    shard_siblings sib;
    memset(&sib, 0, sizeof sib);
    int rc = drift_hostset_create(&set, err);
    if (rc) return rc;
    /* Parameters by reference to a checkpoint instead of values. */
    char *ref_json = NULL;
    size_t ref_len = 0;
    if ((rc = drift_trace_read_params_ref(r, &ref_json, &ref_len, err))) goto done;
    const int by_ref = ref_json != NULL;
    if (by_ref) {
        drift_params_ref ref;
        drift_params_ref_init(&ref);
        char src[4200];
        snprintf(src, sizeof src, "%s:/params_ref", path);
        rc = drift_params_ref_parse(&ref, ref_json, ref_len, src, err);
        free(ref_json);
        /* a trace does not choose where drift reads: its root must lie in its own folder, unless the user names one */
        if (!rc && !m->weights_root) rc = drift_ckpt_root_allowed(ref.weights_root, path, err);
        if (!rc && m->defer_params) { /* read later, overlapped with the upload (params_pipeline.h) */
            drift_params_ref_free(m->pending_ref);
            drift_free(m->pending_ref);
            if (!(m->pending_ref = drift_malloc(sizeof *m->pending_ref)))
                rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
            else {
                *m->pending_ref = ref; /* moved */
                drift_params_ref_init(&ref);
                memset(&m->load, 0, sizeof m->load);
                m->load.by_reference = 1;
            }
        } else if (!rc) {
            rc = drift_model_load_params_ref(m, &ref, NULL, err);
        }
        drift_params_ref_free(&ref);
        if (rc) goto done;
    } else {
        memset(&m->load, 0, sizeof m->load);
    }
    /* By value, whole tensors: read later, overlapped with the upload (params_pipeline.h). */
    const int later = !by_ref && m->defer_params && drift_trace_reader_meta(r)->world_size <= 1 &&
                      drift_params_trace_streamable(path, &m->table);
    if (later) {
        drift_free(m->pending_trace);
        if (!(m->pending_trace = drift_strdup(path))) { rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory"); goto done; }
    }
    for (size_t i = 0; !by_ref && !later && i < m->table.n; i++) {
        const drift_param_info *pi = &m->table.params[i];
        long k = drift_trace_reader_find_param(r, pi->fqn);
        drift_trace_param_info info;
        memset(&info, 0, sizeof info);
        if (k < 0 && drift_trace_reader_meta(r)->world_size <= 1) {
            rc = drift_err_set(err, DRIFT_E_INPUT, path, "/params has no parameter '%s' (model %s needs it)", pi->fqn,
                               m->spec);
            goto done;
        }
        if (k >= 0 && (rc = drift_trace_reader_param(r, (size_t)k, &info))) goto done;
        /* An FSDP shard, or (k < 0) a parameter whose shard on this rank is
         * empty: assemble from the sibling rank files. */
        if (k < 0 || info.is_shard) {
            if (!sib.r && (rc = siblings_open(&sib, r, pi->fqn, err))) goto done;
            float *nb = drift_realloc(buf, (size_t)(pi->numel ? pi->numel : 1) * sizeof *nb);
            if (!nb) { rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory reading /params/%s", pi->fqn); goto done; }
            buf = nb;
            if ((rc = assemble_param(pi, &sib, buf, err))) goto done;
            if ((rc = drift_hostset_add(set, pi->fqn, DRIFT_F32, pi->ndim, pi->shape, buf, NULL, NULL, err))) goto done;
            continue;
        }
        int same = info.ndim == pi->ndim && !info.is_shard;
        for (int d = 0; same && d < pi->ndim; d++) same = info.shape[d] == pi->shape[d];
        if (!same) {
            rc = drift_err_set(err, DRIFT_E_INPUT, path,
                               "/params/%s: expected the whole tensor with the model's shape (%d dims, numel %lld), "
                               "got %s of %d dims, numel %lld",
                               pi->fqn, pi->ndim, (long long)pi->numel, info.is_shard ? "a shard" : "a tensor",
                               info.ndim, (long long)info.numel);
            goto done;
        }
        float *nb = drift_realloc(buf, (size_t)pi->numel * sizeof *nb);
        if (!nb) { rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory reading /params/%s", pi->fqn); goto done; }
        buf = nb;
        if ((rc = drift_trace_read_param(r, (size_t)k, buf, (size_t)pi->numel, err))) goto done;
        if ((rc = drift_hostset_add(set, pi->fqn, DRIFT_F32, pi->ndim, pi->shape, buf, NULL, NULL, err))) goto done;
    }
    if (!by_ref && !later) {
        drift_hostset_free(m->params);
        m->params = set;
        set = NULL;
    }
    if (m->captured) { /* every buffer the captured graph reads */
        rc = drift_capture_load_trace_buffers(m, r, err);
        goto done;
    }
    /* Recorded RoPE tables, when the trace has them. */
    long kc = drift_trace_reader_find_buffer(r, DRIFT_WAN_ROPE_COS), ks = drift_trace_reader_find_buffer(r, DRIFT_WAN_ROPE_SIN);
    if (kc >= 0 && ks >= 0) {
        drift_hostset *b = NULL;
        if ((rc = drift_hostset_create(&b, err))) goto done;
        long ks2[2] = {kc, ks};
        const char *names[2] = {DRIFT_WAN_ROPE_COS, DRIFT_WAN_ROPE_SIN};
        for (int j = 0; j < 2; j++) {
            drift_trace_buffer_info bi;
            if ((rc = drift_trace_reader_buffer(r, (size_t)ks2[j], &bi))) { drift_hostset_free(b); goto done; }
            if (bi.dtype != DRIFT_F32) {
                rc = drift_err_set(err, DRIFT_E_INPUT, path, "/buffers/%s: expected fp32, got %s", names[j],
                                   drift_dtype_name(bi.dtype));
                drift_hostset_free(b);
                goto done;
            }
            float *nb = drift_realloc(buf, (size_t)bi.numel * sizeof *nb);
            if (!nb) { rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory"); drift_hostset_free(b); goto done; }
            buf = nb;
            if ((rc = drift_trace_read_buffer(r, (size_t)ks2[j], buf, (size_t)bi.numel * 4, err)) ||
                (rc = drift_hostset_add(b, names[j], DRIFT_F32, bi.ndim, bi.shape, buf, NULL, NULL, err))) {
                drift_hostset_free(b);
                goto done;
            }
        }
        drift_hostset_free(m->buffers[DRIFT_BUF_RECORDED]);
        m->buffers[DRIFT_BUF_RECORDED] = b;
    }
done:
    siblings_close(&sib);
    free(buf);
    drift_hostset_free(set);
    return rc;
}

int drift_model_load_safetensors(drift_model *m, const char *path, size_t *n_extra, drift_err *err) {
    drift_safetensors *f = NULL;
    drift_hostset *set = NULL;
    float *buf = NULL;
    int rc = drift_safetensors_open(&f, path, 0, err);
    if (rc) return rc;
    if ((rc = drift_hostset_create(&set, err))) goto done;
    for (size_t i = 0; i < m->table.n; i++) {
        const drift_param_info *pi = &m->table.params[i];
        long k = drift_safetensors_find(f, pi->fqn);
        if (k < 0) {
            rc = drift_err_set(err, DRIFT_E_INPUT, path, "no tensor '%s' (model %s needs it under its diffusers name)",
                               pi->fqn, m->spec);
            goto done;
        }
        drift_safetensors_info info;
        if ((rc = drift_safetensors_tensor(f, (size_t)k, &info, err))) goto done;
        int same = info.ndim == pi->ndim;
        for (int d = 0; same && d < pi->ndim; d++) same = info.shape[d] == pi->shape[d];
        if (!same) {
            rc = drift_err_set(err, DRIFT_E_INPUT, path, "tensor '%s': expected %d dims / %lld elements (the model's shape), got %d dims / %lld",
                               pi->fqn, pi->ndim, (long long)pi->numel, info.ndim, (long long)info.numel);
            goto done;
        }
        float *nb = drift_realloc(buf, (size_t)pi->numel * sizeof *nb);
        if (!nb) { rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory reading '%s'", pi->fqn); goto done; }
        buf = nb;
        if ((rc = drift_safetensors_read_f32(f, (size_t)k, buf, (size_t)pi->numel, err))) goto done;
        if ((rc = drift_hostset_add(set, pi->fqn, DRIFT_F32, pi->ndim, pi->shape, buf, NULL, NULL, err))) goto done;
    }
    if (n_extra) *n_extra = drift_safetensors_n_tensors(f) - m->table.n;
    drift_hostset_free(m->params);
    m->params = set;
    set = NULL;
    if (m->captured) rc = drift_capture_load_safetensors_buffers(m, path, err); /* RoPE tables, constants */
done:
    free(buf);
    drift_hostset_free(set);
    drift_safetensors_close(f);
    return rc;
}

int drift_model_buffers(drift_model *m, drift_buffer_prov prov, const drift_hostset **out, drift_err *err) {
    if ((int)prov < 0 || prov > DRIFT_BUF_RECORDED)
        return drift_err_set(err, DRIFT_E_INPUT, "buffer_provenance", "unknown RoPE provenance %d", (int)prov);
    if (m->captured) { /* a captured graph's buffers are the recorded ones, whatever the plan's provenance */
        if (!m->buffers[DRIFT_BUF_RECORDED] && drift_graph_count(m->sem) > 0) {
            int any = 0;
            for (int i = 0; i < drift_graph_count(m->sem); i++) any |= drift_graph_value(m->sem, i)->kind == DRIFT_VAL_BUFFER;
            if (any)
                return drift_err_set(err, DRIFT_E_INPUT, "buffers",
                                     "the captured graph reads buffers, but none were loaded (from a trace's /buffers or "
                                     "the weights file's buffer:NAME entries)");
            int rc = drift_hostset_create(&m->buffers[DRIFT_BUF_RECORDED], err);
            if (rc) return rc;
        }
        *out = m->buffers[DRIFT_BUF_RECORDED];
        return DRIFT_OK;
    }
    if (!m->buffers[prov]) {
        if (prov == DRIFT_BUF_RECORDED)
            return drift_err_set(err, DRIFT_E_INPUT, "buffer_provenance",
                                 "rope provenance 'recorded' needs a trace whose /buffers holds %s and %s",
                                 DRIFT_WAN_ROPE_COS, DRIFT_WAN_ROPE_SIN);
        int rc = drift_params_init_buffers(&m->cfg, prov, &m->buffers[prov], err);
        if (rc) return rc;
    }
    *out = m->buffers[prov];
    return DRIFT_OK;
}

int drift_forward_prepare(const drift_model *m, const drift_plan *plan, drift_side side,
                          const drift_dtype handed[DRIFT_INPUT_COUNT], drift_forward **out, drift_err *err) {
    *out = NULL;
    if (!plan && side != DRIFT_SIDE_ORACLE)
        return drift_err_set(err, DRIFT_E_INTERNAL, "forward", "a plan is required except for the oracle");
    drift_forward *f = drift_calloc(1, sizeof *f);
    if (!f) return drift_err_set(err, DRIFT_E_NOMEM, "forward", "out of memory");
    f->side = side;
    drift_plan_init(&f->plan);
    int rc;
    drift_assign_opts o;
    drift_assign_opts_init(&o);
    o.side = side;
    for (int i = 0; i < DRIFT_INPUT_COUNT; i++) {
        f->handed[i] = handed && handed[i] != DRIFT_DTYPE_INVALID ? handed[i] : DRIFT_F32;
        o.handed_over[i] = f->handed[i];
    }
    if (plan) {
        drift_plan_free(&f->plan);
        if ((rc = drift_plan_copy(&f->plan, plan, err))) goto fail;
        f->rope = plan->rope_provenance;
        if ((rc = drift_plan_compile(&f->plan, &m->table, &f->compiled, err))) goto fail;
        rc = drift_assign_dtypes(m->sem, &f->plan, &f->compiled, &m->table, &o, &f->assigned, err);
    } else {
        f->rope = DRIFT_BUF_CPU_FP64;
        rc = drift_assign_dtypes(m->sem, NULL, NULL, NULL, &o, &f->assigned, err);
    }
    if (rc) goto fail;
    *out = f;
    return DRIFT_OK;
fail:
    drift_forward_free(f);
    return rc;
}

void drift_forward_free(drift_forward *f) {
    if (!f) return;
    drift_plan_free(&f->plan);
    drift_compiled_plan_free(&f->compiled);
    drift_graph_free(f->assigned);
    free(f);
}

int drift_forward_run(const drift_forward *f, drift_model *m, const drift_backend *be, const drift_hostset *inputs,
                      drift_exec_site_fn on_site, void *user, drift_exec_result *out, drift_err *err) {
    return drift_forward_run_cached(f, m, be, inputs, NULL, on_site, user, out, err);
}

int drift_forward_run_cached(const drift_forward *f, drift_model *m, const drift_backend *be,
                             const drift_hostset *inputs, drift_exec_cache *cache, drift_exec_site_fn on_site,
                             void *user, drift_exec_result *out, drift_err *err) {
    return drift_forward_run_ex(f, m, be, inputs, cache, NULL, on_site, user, out, err);
}

int drift_forward_run_ex(const drift_forward *f, drift_model *m, const drift_backend *be, const drift_hostset *inputs,
                         drift_exec_cache *cache, const drift_exec_options *opts, drift_exec_site_fn on_site, void *user,
                         drift_exec_result *out, drift_err *err) {
    if (!m->params) return drift_err_set(err, DRIFT_E_INTERNAL, "forward", "model has no parameter values");
    const drift_hostset *bufs = NULL;
    int rc = drift_model_buffers(m, f->rope, &bufs, err);
    if (rc) return rc;
    drift_exec_inputs in = {.params = m->params, .buffers = bufs, .inputs = inputs, .on_site = on_site, .user = user,
                            .cache = cache};
    return drift_exec_run_ex(f->assigned, be, &in, opts, out, err);
}

int drift_forward_warm(const drift_forward *f, drift_model *m, const drift_backend *be, drift_exec_cache *cache,
                       drift_exec_site_fn on_site, drift_err *err) {
    if (!m->params) return drift_err_set(err, DRIFT_E_INTERNAL, "forward", "model has no parameter values");
    if (!cache) return drift_err_set(err, DRIFT_E_INTERNAL, "forward", "drift_forward_warm: no cache");
    const drift_hostset *bufs = NULL;
    int rc = drift_model_buffers(m, f->rope, &bufs, err);
    if (rc) return rc;
    drift_exec_inputs in = {.params = m->params, .buffers = bufs, .inputs = NULL, .on_site = on_site, .user = NULL,
                            .cache = cache};
    drift_exec_options opts = {.alias = -1, .fuse_casts = -1, .stats = NULL, .fixed_only = 1};
    return drift_exec_run_ex(f->assigned, be, &in, &opts, NULL, err);
}

/* --- site cache ----------------------------------------------------------- */
typedef struct cache_entry {
    char *site;
    drift_dtype dtype;
    int64_t n;
    float *v;
    int64_t cap;
    int used;
} cache_entry;

struct drift_site_cache {
    cache_entry *e;
    size_t n, cap;
};

int drift_site_cache_create(drift_site_cache **out, drift_err *err) {
    *out = drift_calloc(1, sizeof **out);
    return *out ? DRIFT_OK : drift_err_set(err, DRIFT_E_NOMEM, "site cache", "out of memory");
}

void drift_site_cache_free(drift_site_cache *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) {
        free(c->e[i].site);
        free(c->e[i].v);
    }
    free(c->e);
    free(c);
}

void drift_site_cache_clear(drift_site_cache *c) {
    for (size_t i = 0; i < c->n; i++) c->e[i].used = 0;
}

static cache_entry *cache_slot(drift_site_cache *c, const char *site, int64_t n, drift_err *err) {
    cache_entry *e = NULL;
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->e[i].site, site) == 0) e = &c->e[i];
    if (!e) {
        void *arr = c->e;
        if (drift_grow(&arr, &c->cap, c->n, sizeof *c->e, 64)) { drift_err_set(err, DRIFT_E_NOMEM, site, "out of memory"); return NULL; }
        c->e = arr;
        e = &c->e[c->n];
        memset(e, 0, sizeof *e);
        e->site = drift_strdup(site);
        if (!e->site) { drift_err_set(err, DRIFT_E_NOMEM, site, "out of memory"); return NULL; }
        c->n++;
    }
    if (e->cap < n) {
        float *nv = drift_realloc(e->v, (size_t)n * sizeof *nv);
        if (!nv) { drift_err_set(err, DRIFT_E_NOMEM, site, "out of memory caching %lld values", (long long)n); return NULL; }
        e->v = nv;
        e->cap = n;
    }
    e->n = n;
    e->used = 1;
    return e;
}

int drift_site_cache_put(drift_site_cache *c, const char *site, const drift_tensor *t, drift_err *err) {
    cache_entry *e = cache_slot(c, site, t->numel, err);
    if (!e) return err ? err->code : DRIFT_E_NOMEM;
    e->dtype = t->dtype;
    return drift_backend_download_f32(t->be, t, e->v, err);
}

int drift_site_cache_put_f32(drift_site_cache *c, const char *site, drift_dtype dt, const float *v, int64_t n,
                             drift_err *err) {
    cache_entry *e = cache_slot(c, site, n, err);
    if (!e) return err ? err->code : DRIFT_E_NOMEM;
    e->dtype = dt;
    memcpy(e->v, v, (size_t)n * sizeof *v);
    return DRIFT_OK;
}

const float *drift_site_cache_get(const drift_site_cache *c, const char *site, int64_t *n, drift_dtype *dt) {
    for (size_t i = 0; i < c->n; i++) {
        if (c->e[i].used && strcmp(c->e[i].site, site) == 0) {
            if (n) *n = c->e[i].n;
            if (dt) *dt = c->e[i].dtype;
            return c->e[i].v;
        }
    }
    return NULL;
}
