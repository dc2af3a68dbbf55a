#include "replay/drive/synth.h"
#include "formats/alloc.h"
#include "formats/batch_note.h"
#include "formats/fnmatch.h"

#include "replay/capture/aten_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/trace.h"
#include "formats/alloc.h"
#include "replay/analysis/sde.h"
#include "replay/analysis/sitecmp.h"
#include "replay/exec/forward.h"
#include "replay/exec/params_init.h"
#include "replay/exec/params_load.h"
#include "replay/exec/memplan.h"

void drift_synth_opts_init(drift_synth_opts *o) {
    memset(o, 0, sizeof *o);
    o->model = "tiny-dit";
    o->steps = 4;
    o->shift = 3.0;
    o->eta = 0.7f;
    o->backend = "cpu";
}

void drift_synth_rollout_path(const char *trainer_path, char *buf, unsigned long bufsz) {
    size_t n = strlen(trainer_path);
    if (n > 3 && strcmp(trainer_path + n - 3, ".h5") == 0)
        snprintf(buf, bufsz, "%.*s.rollout.h5", (int)(n - 3), trainer_path);
    else
        snprintf(buf, bufsz, "%s.rollout.h5", trainer_path);
}

/* splitmix64 + Box-Muller: the SDE noise, reproducible from the seed. */
static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void normal_fill(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed;
    for (size_t i = 0; i < n; i += 2) {
        double u1 = ((double)(splitmix(&s) >> 11) + 0.5) * 0x1p-53, u2 = (double)(splitmix(&s) >> 11) * 0x1p-53;
        double r = sqrt(-2.0 * log(u1));
        x[i] = (float)(r * cos(6.283185307179586 * u2));
        if (i + 1 < n) x[i + 1] = (float)(r * sin(6.283185307179586 * u2));
    }
}

/* One side being recorded. */
typedef struct side_rec {
    const char *label;
    drift_trace_writer *w;
    drift_forward *f;
    char **names;                /* site names of the graph, execution order */
    int *ids;                    /* writer site ids, parallel to names */
    drift_dtype *dtypes;
    size_t n_sites;
    drift_site_cache *keep;      /* rollout: values kept for the trainer's comparison */
    drift_site_cache *ref;       /* trainer: the rollout's values */
    drift_sitecmp *cmp;          /* trainer: per-site metrics */
    int64_t step, batch;
    float *f32;
    void *raw;
    size_t cap;
    const char *sites;           /* borrowed: drift_synth_opts.sites (NULL: every site) */
    const char *params_ref;      /* borrowed: /params_ref JSON instead of the values (NULL: values) */
} side_rec;

/* Whether graph site name is recorded under the --sites globs: the boundary
 * inputs and the output always are (replay needs them). */
static int site_wanted(const char *globs, const char *name) {
    if (!globs || strncmp(name, "input:", 6) == 0 || strcmp(name, DRIFT_SITE_NOISE_PRED) == 0) return 1;
    char pat[1024];
    const char *p = globs;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n > 0 && n < sizeof pat) {
            memcpy(pat, p, n);
            pat[n] = '\0';
            if (drift_fnmatch(pat, name)) return 1;
        }
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

/* Every --sites glob must match some graph site (as a plan pattern must
 * match some parameter): an empty selection is a mistake, not a choice. */
static int check_sites(const char *globs, const drift_graph *g, drift_err *err) {
    if (!globs) return DRIFT_OK;
    int n = drift_graph_sites(g, NULL, 0);
    int *gids = drift_malloc((size_t)(n > 0 ? n : 1) * sizeof *gids);
    if (!gids) return drift_err_set(err, DRIFT_E_NOMEM, "--sites", "out of memory");
    drift_graph_sites(g, gids, n);
    int rc = DRIFT_OK;
    const char *p = globs;
    while (*p && !rc) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char pat[1024];
        if (len == 0 || len >= sizeof pat) {
            rc = drift_err_set(err, DRIFT_E_USAGE, "--sites", "expected comma-separated globs, got an empty or over-long one in '%.200s'", globs);
            break;
        }
        memcpy(pat, p, len);
        pat[len] = '\0';
        int hit = 0;
        for (int i = 0; i < n && !hit; i++) hit = drift_fnmatch(pat, drift_graph_value(g, gids[i])->site);
        if (!hit) {
            const char *ex = n > 0 ? drift_graph_value(g, gids[n > 8 ? 8 : n - 1])->site : "";
            rc = drift_err_set(err, DRIFT_E_USAGE, "--sites", "'%s' matches no site of the model (sites are named like '%s')", pat, ex);
        }
        if (!e) break;
        p = e + 1;
    }
    drift_free(gids);
    return rc;
}

/* Bytes of tensor data one side's trace holds: its recorded sites x steps. */
static int64_t estimate_bytes(const char *globs, const drift_graph *g, int steps) {
    int n = drift_graph_sites(g, NULL, 0);
    int *gids = drift_malloc((size_t)(n > 0 ? n : 1) * sizeof *gids);
    if (!gids) return -1;
    drift_graph_sites(g, gids, n);
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        const drift_value *v = drift_graph_value(g, gids[i]);
        if (!site_wanted(globs, v->site)) continue;
        int64_t numel = 1;
        for (int d = 0; d < v->ndim; d++) numel *= v->shape[d];
        total += numel * (int64_t)drift_dtype_size(v->dtype);
    }
    drift_free(gids);
    return total * steps;
}

static int grow(side_rec *s, size_t n, drift_err *err) {
    if (n <= s->cap) return DRIFT_OK;
    float *a = drift_realloc(s->f32, n * sizeof *a);
    if (!a) return drift_err_set(err, DRIFT_E_NOMEM, s->label, "out of memory");
    s->f32 = a;
    void *b = drift_realloc(s->raw, n * 4);
    if (!b) return drift_err_set(err, DRIFT_E_NOMEM, s->label, "out of memory");
    s->raw = b;
    s->cap = n;
    return DRIFT_OK;
}

static int append_f32(drift_trace_writer *w, int id, drift_dtype dt, int64_t step, const float *v, size_t n,
                      void *raw, drift_err *err) {
    drift_trace_index idx = {.step = step, .microbatch = 0, .denoise_index = (int32_t)step, .call_index = 0};
    drift_dtype_from_f32_n(v, raw, dt, n);
    return drift_trace_writer_append(w, id, &idx, raw, 1, err);
}

static int on_site(const char *site, const drift_tensor *t, void *user, drift_err *err) {
    side_rec *s = user;
    size_t k = 0;
    while (k < s->n_sites && strcmp(s->names[k], site) != 0) k++;
    if (k == s->n_sites && s->sites && !site_wanted(s->sites, site)) return DRIFT_OK; /* not recorded (--sites) */
    if (k == s->n_sites) return drift_err_set(err, DRIFT_E_INTERNAL, site, "site not declared in the %s trace", s->label);
    int rc = grow(s, (size_t)t->numel, err);
    if (rc) return rc;
    if ((rc = drift_backend_download_f32(t->be, t, s->f32, err))) return rc;
    if ((rc = append_f32(s->w, s->ids[k], s->dtypes[k], s->step, s->f32, (size_t)t->numel, s->raw, err))) return rc;
    if (s->keep && (rc = drift_site_cache_put_f32(s->keep, site, t->dtype, s->f32, t->numel, err))) return rc;
    if (s->ref && s->cmp) {
        int64_t rn = 0;
        const float *r = drift_site_cache_get(s->ref, site, &rn, NULL);
        if (r && rn == t->numel) {
            drift_trace_metric row;
            if ((rc = drift_sitecmp_add(s->cmp, site, t->dtype, s->f32, r, t->numel, s->batch, s->step, &row, err)))
                return rc;
            if ((rc = drift_trace_writer_add_metric(s->w, site, &row, err))) return rc;
        }
    }
    return DRIFT_OK;
}

static void side_free(side_rec *s) {
    for (size_t i = 0; i < s->n_sites; i++) free(s->names[i]);
    free(s->names);
    free(s->ids);
    free(s->dtypes);
    free(s->f32);
    free(s->raw);
    drift_forward_free(s->f);
    drift_site_cache_free(s->keep);
    drift_trace_writer_close(s->w, NULL);
}

static int declare(drift_trace_writer *w, const char *name, drift_dtype dt, int ndim, const int64_t *shape, int *id,
                   drift_err *err) {
    drift_trace_site_decl d;
    memset(&d, 0, sizeof d);
    d.name = name;
    d.dtype = dt;
    d.ndim = ndim;
    for (int i = 0; i < ndim; i++) d.shape[i] = shape[i];
    d.store_tensors = 1;
    return drift_trace_writer_declare_site(w, &d, id, err);
}

/* Creates the writer, declares the graph's sites plus extra, writes params,
 * dtypes, buffers, graph. */
static int side_open(side_rec *s, drift_model *m, const char *path, drift_trace_side side, const drift_plan *plan,
                     uint64_t seed, int32_t rank, int32_t world_size, drift_err *err) {
    int rc;
    char *plan_json = drift_plan_to_json(plan), *graph_json = NULL;
    char run_id[64];
    snprintf(run_id, sizeof run_id, "synthetic-%016llx", (unsigned long long)seed);
    drift_trace_meta meta = {.side = side, .run_id = run_id, .rank = rank, .world_size = world_size > 0 ? world_size : 1, .family = m->spec,
                             .guidance_scale = 1.0, .plan_json = plan_json ? plan_json : "{}"};
    if ((rc = drift_trace_writer_create(&s->w, path, &meta, err))) goto done;
    const drift_graph *g = s->f->assigned;
    int n = drift_graph_sites(g, NULL, 0);
    int *gids = drift_malloc((size_t)(n > 0 ? n : 1) * sizeof *gids);
    s->names = drift_calloc((size_t)n + 1, sizeof *s->names);
    s->ids = drift_calloc((size_t)n + 1, sizeof *s->ids);
    s->dtypes = drift_calloc((size_t)n + 1, sizeof *s->dtypes);
    if (!gids || !s->names || !s->ids || !s->dtypes) {
        free(gids);
        rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
        goto done;
    }
    drift_graph_sites(g, gids, n);
    for (int i = 0, k = 0; i < n; i++) {
        const drift_value *v = drift_graph_value(g, gids[i]);
        if (!site_wanted(s->sites, v->site)) continue;
        s->names[k] = drift_strdup(v->site);
        s->dtypes[k] = v->dtype;
        s->n_sites = (size_t)k + 1;
        if (!s->names[k]) { rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory"); break; }
        if ((rc = declare(s->w, v->site, v->dtype, v->ndim, v->shape, &s->ids[k], err))) break;
        k++;
    }
    free(gids);
    if (rc) goto done;
    /* Parameters (fp32 masters), the dtype each had in the forward, buffers, graph. */
    if (s->params_ref && (rc = drift_trace_writer_set_params_ref(s->w, s->params_ref, strlen(s->params_ref), err))) goto done;
    for (size_t i = 0; i < m->table.n; i++) {
        const drift_host_tensor *p = drift_hostset_find(m->params, m->table.params[i].fqn);
        if (!s->params_ref &&
            (rc = drift_trace_writer_add_param(s->w, p->name, p->ndim, p->shape, NULL, NULL, p->f32, err))) goto done;
        if ((rc = drift_trace_writer_set_param_dtype(s->w, p->name, s->f->compiled.param_dtype[i], err))) goto done;
    }
    const drift_hostset *bufs = NULL;
    if ((rc = drift_model_buffers(m, s->f->rope, &bufs, err))) goto done;
    for (size_t i = 0; i < drift_hostset_count(bufs); i++) {
        const drift_host_tensor *b = drift_hostset_at(bufs, i);
        if ((rc = drift_trace_writer_add_buffer(s->w, b->name, DRIFT_F32, b->ndim, b->shape, b->f32, err))) goto done;
    }
    if (m->captured) { /* the captured document itself: replay imports it again */
        rc = drift_trace_writer_set_graph(s->w, m->captured_json, m->captured_len, err);
        goto done;
    }
    graph_json = drift_graph_to_json(m->sem, 0, err);
    if (!graph_json) { rc = err ? err->code : DRIFT_E_NOMEM; goto done; }
    rc = drift_trace_writer_set_graph(s->w, graph_json, strlen(graph_json), err);
done:
    free(plan_json);
    free(graph_json);
    return rc;
}

/* The boundary inputs with the shapes of the model graph's input leaves
 * (a family's [B, C, F, H, W], [B, text_len, text_dim], [B]; a captured
 * graph's own). */
static int set_inputs(drift_hostset **in, const drift_model *m, const float *x, const float *cond,
                      const float *timestep, drift_err *err) {
    drift_hostset_free(*in);
    *in = NULL;
    int rc = drift_hostset_create(in, err);
    if (rc) return rc;
    const char *names[3] = {"latents", "cond", "timestep"};
    const float *vals[3] = {x, cond, timestep};
    for (int k = 0; k < 3; k++) {
        const drift_value *v = drift_graph_value(m->sem, drift_graph_find_leaf(m->sem, DRIFT_VAL_INPUT, names[k]));
        if (!v) continue; /* a captured graph without this input */
        if ((rc = drift_hostset_add(*in, names[k], DRIFT_F32, v->ndim, v->shape, vals[k], NULL, NULL, err))) return rc;
    }
    return DRIFT_OK;
}

/* The step's batch composition (formats/batch_note.h): samples 0..B-1 in
 * order, one forward, no CFG. */
static int note_batch(drift_trace_writer *w, int64_t step, int64_t B, drift_err *err) {
    if (B > DRIFT_BATCH_NOTE_MAX_SAMPLES) return DRIFT_OK; /* does not fit a note: not recorded */
    drift_batch_composition c;
    memset(&c, 0, sizeof c);
    c.cfg = DRIFT_BATCH_CFG_NONE;
    c.n = (int)B;
    for (int i = 0; i < c.n; i++) c.samples[i] = i;
    char text[DRIFT_TRACE_NOTE_MAX];
    int rc = drift_batch_note_format(&c, text, sizeof text, err);
    return rc ? rc : drift_trace_writer_note(w, step, 0, text, err);
}

/* The host (and GPU) memory of a record, planned before the weights are
 * made or read (replay/exec/memplan.h, as replay does): the fp32 masters
 * once, both forwards' values and the site values each side keeps. A
 * record that cannot fit stops with exit 2 naming the need and the limit
 * (`record --synthetic wan2.2:layers=40` on a 24 GB machine allocated until
 * it was killed). */
static int record_memplan(const drift_model *m, const drift_forward *tf, const drift_forward *rf, const char *backend,
                          const char *what, drift_err *err) {
    drift_mem_estimate a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    int rc = drift_memplan_estimate(m, tf, NULL, 1, backend, 0, 1, &a, err);
    if (!rc) rc = drift_memplan_estimate(m, rf, NULL, 1, backend, 0, 1, &b, err);
    if (rc) return rc;
    a.host_backend += b.host_backend;
    a.host_sites += b.host_sites;
    a.host_total += b.host_total - b.host_masters - b.host_oracle; /* the masters are shared */
    a.gpu_activations += b.gpu_activations;
    a.gpu_total += b.gpu_activations;
    if (!(rc = drift_memplan_check(&a, what, err))) return DRIFT_OK;
    /* the check speaks of "the replay": this is a record of two forwards */
    char msg[sizeof err->msg];
    const char *tail = strncmp(err->msg, "the replay needs", 16) == 0 ? err->msg + 16 : NULL;
    if (tail) {
        snprintf(msg, sizeof msg, "record (a trainer and a rollout forward) needs%s", tail);
        char *oo = strstr(msg, "; --output-only keeps fewer values"); /* a replay option */
        if (oo) snprintf(oo, sizeof msg - (size_t)(oo - msg), "; --sites GLOBS keeps fewer values)");
        snprintf(err->msg, sizeof err->msg, "%s", msg);
    }
    return rc;
}

int drift_synth_record(const drift_synth_opts *o, drift_err *err) {
    int rc;
    drift_model *m = NULL;
    drift_backend *be = NULL;
    drift_hostset *seed_inputs = NULL, *in = NULL;
    side_rec ro, tr;
    memset(&ro, 0, sizeof ro);
    memset(&tr, 0, sizeof tr);
    ro.label = "rollout";
    tr.label = "trainer";
    ro.sites = tr.sites = o->sites;
    drift_sitecmp cmp;
    drift_sitecmp_init(&cmp, 1.0);
    drift_exec_result vr, vt;
    memset(&vr, 0, sizeof vr);
    memset(&vt, 0, sizeof vt);
    float *sigmas = NULL, *x = NULL, *xn = NULL, *noise = NULL, *ts = NULL, *lp_old = NULL, *lp_new = NULL;
    float *cond_copy = NULL;
    char *ref_json = NULL;

    if (o->steps < 1 || o->steps > 100000)
        return drift_err_set(err, DRIFT_E_USAGE, "--steps", "expected 1..100000 denoising steps, got %d", o->steps);
    if ((rc = drift_model_create(o->model, &m, err))) goto done;
    /* The forwards need the parameter table, not the values: plans, --sites
     * and the size are checked before the (slow, for big models) weights. */
    if ((rc = drift_forward_prepare(m, o->rollout_plan, DRIFT_SIDE_ROLLOUT, NULL, &ro.f, err))) goto done;
    if ((rc = drift_forward_prepare(m, o->trainer_plan, DRIFT_SIDE_TRAINER, NULL, &tr.f, err))) goto done;
    if ((rc = check_sites(o->sites, tr.f->assigned, err))) goto done;
    if (o->on_size) {
        int64_t masters = 0; /* each trace holds the fp32 masters too */
        for (size_t i = 0; i < m->table.n; i++) masters += m->table.params[i].numel * 4;
        o->on_size(masters + estimate_bytes(o->sites, tr.f->assigned, o->steps),
                   masters + estimate_bytes(o->sites, ro.f->assigned, o->steps), o->on_size_user);
    }
    if ((rc = record_memplan(m, tr.f, ro.f, o->backend ? o->backend : "cpu", o->model, err))) goto done;
    if (o->params_ref && o->weights) {
        rc = drift_err_set(err, DRIFT_E_USAGE, "--params-ref", "--params-ref DIR loads the weights from DIR: leave out --weights");
        goto done;
    }
    if (o->params_ref) {
        drift_params_ref ref;
        drift_params_ref_init(&ref);
        size_t len = 0;
        rc = drift_model_load_checkpoint(m, o->params_ref, &ref, err);
        if (!rc) rc = drift_params_ref_to_json(&ref, &ref_json, &len, err);
        drift_params_ref_free(&ref);
    } else if (o->weights) {
        rc = drift_model_load_safetensors(m, o->weights, NULL, err);
    } else {
        rc = drift_model_seed_params(m, o->seed, err);
    }
    if (rc) goto done;
    ro.params_ref = tr.params_ref = ref_json;
    if ((rc = drift_backend_create(o->backend ? o->backend : "cpu", &be, err))) goto done;
    if ((rc = drift_site_cache_create(&ro.keep, err))) goto done;
    tr.ref = ro.keep;
    tr.cmp = &cmp;
    ro.batch = tr.batch = m->cfg.batch;

    if ((rc = side_open(&tr, m, o->trainer_path, DRIFT_TRACE_SIDE_TRAINER, o->trainer_plan, o->seed, o->rank, o->world_size, err))) goto done;
    char rpath[4096];
    if (o->rollout_path) snprintf(rpath, sizeof rpath, "%s", o->rollout_path);
    else drift_synth_rollout_path(o->trainer_path, rpath, sizeof rpath);
    if ((rc = side_open(&ro, m, rpath, DRIFT_TRACE_SIDE_ROLLOUT, o->rollout_plan, o->seed, o->rank, o->world_size, err))) goto done;
    /* What the rollout hands over, recorded on both sides. */
    const drift_value *outv = drift_graph_value(ro.f->assigned, drift_graph_output(ro.f->assigned));
    const int64_t B = m->cfg.batch;
    const drift_value *latv = drift_graph_value(m->sem, drift_graph_find_leaf(m->sem, DRIFT_VAL_INPUT, "latents"));
    const drift_value *tsv = drift_graph_value(m->sem, drift_graph_find_leaf(m->sem, DRIFT_VAL_INPUT, "timestep"));
    if (!latv || !tsv || tsv->numel != B || latv->ndim < 1 || latv->shape[0] != B || outv->numel != latv->numel) {
        rc = drift_err_set(err, DRIFT_E_INPUT, o->model,
                           "a synthetic run needs latents [B, ...], a timestep of B values and an output shaped as the "
                           "latents (B = %lld)", (long long)B);
        goto done;
    }
    const int lat_nd = latv->ndim;
    int64_t lat_shape[DRIFT_MAX_DIMS];
    memcpy(lat_shape, latv->shape, sizeof lat_shape);
    int64_t b_shape[1] = {B}, p_shape[1] = {4};
    int id_rout = -1, id_lpo = -1, id_lpn = -1, id_xn = -1, id_sp = -1, rid_lpo = -1, rid_xn = -1, rid_sp = -1;
    if ((rc = declare(tr.w, DRIFT_SITE_ROLLOUT_OUTPUT, outv->dtype, outv->ndim, outv->shape, &id_rout, err)) ||
        (rc = declare(tr.w, DRIFT_SITE_LOGPROB_OLD, DRIFT_F32, 1, b_shape, &id_lpo, err)) ||
        (rc = declare(tr.w, DRIFT_SITE_LOGPROB_NEW, DRIFT_F32, 1, b_shape, &id_lpn, err)) ||
        (rc = declare(tr.w, DRIFT_SITE_SDE_XNEXT, DRIFT_F32, lat_nd, lat_shape, &id_xn, err)) ||
        (rc = declare(tr.w, DRIFT_SITE_SDE_PARAMS, DRIFT_F32, 1, p_shape, &id_sp, err)))
        goto done;
    if (ro.w && ((rc = declare(ro.w, DRIFT_SITE_LOGPROB_OLD, DRIFT_F32, 1, b_shape, &rid_lpo, err)) ||
                 (rc = declare(ro.w, DRIFT_SITE_SDE_XNEXT, DRIFT_F32, lat_nd, lat_shape, &rid_xn, err)) ||
                 (rc = declare(ro.w, DRIFT_SITE_SDE_PARAMS, DRIFT_F32, 1, p_shape, &rid_sp, err))))
        goto done;
    /* on a GPU both sides record what they ran on (docs/format.md /libraries) */
    drift_libraries libs;
    if (drift_backend_libraries(be, &libs) &&
        ((rc = drift_trace_writer_set_libraries(tr.w, &libs, err)) ||
         (ro.w && (rc = drift_trace_writer_set_libraries(ro.w, &libs, err)))))
        goto done;
    if ((rc = drift_trace_writer_start(tr.w, err))) goto done;
    if (ro.w && (rc = drift_trace_writer_start(ro.w, err))) goto done;

    /* Trajectory state. */
    if ((rc = m->captured ? drift_capture_seed_inputs(m, o->seed, &seed_inputs, err)
                          : drift_params_init_inputs(&m->cfg, o->seed, &seed_inputs, err)))
        goto done;
    const drift_host_tensor *lat0 = drift_hostset_find(seed_inputs, "latents");
    const drift_host_tensor *cond = drift_hostset_find(seed_inputs, "cond");
    if (!cond) {
        rc = drift_err_set(err, DRIFT_E_INPUT, o->model, "the model has no cond input");
        goto done;
    }
    size_t nlat = (size_t)lat0->numel, per = nlat / (size_t)B;
    sigmas = drift_malloc(((size_t)o->steps + 2) * sizeof *sigmas);
    x = drift_malloc(nlat * sizeof *x);
    xn = drift_malloc(nlat * sizeof *xn);
    noise = drift_malloc(nlat * sizeof *noise);
    ts = drift_malloc((size_t)B * sizeof *ts);
    lp_old = drift_malloc((size_t)B * sizeof *lp_old);
    lp_new = drift_malloc((size_t)B * sizeof *lp_new);
    cond_copy = drift_malloc((size_t)cond->numel * sizeof *cond_copy);
    if (!sigmas || !x || !xn || !noise || !ts || !lp_old || !lp_new || !cond_copy) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, "record", "out of memory");
        goto done;
    }
    memcpy(x, lat0->f32, nlat * sizeof *x);
    memcpy(cond_copy, cond->f32, (size_t)cond->numel * sizeof *cond_copy);
    /* N+1 schedule intervals, of which the first N are recorded: every
     * recorded step keeps sigma_next > 0, so its log-prob is defined. */
    if ((rc = drift_sde_schedule_sigmas(o->steps + 1, o->shift, sigmas, err))) goto done;
    const float sigma_max = sigmas[1];

    for (int s = 0; s < o->steps; s++) {
        float sg = sigmas[s], sgn = sigmas[s + 1];
        for (int64_t b = 0; b < B; b++) ts[b] = sg * 1000.0f;
        if ((rc = set_inputs(&in, m, x, cond_copy, ts, err))) goto done;
        ro.step = tr.step = s;
        drift_site_cache_clear(ro.keep);
        drift_sitecmp_begin_step(&cmp);
        drift_exec_result_free(&vr);
        drift_exec_result_free(&vt);
        /* Rollout: its own forward picks the sample. */
        if ((rc = drift_forward_run(ro.f, m, be, in, on_site, &ro, &vr, err))) goto done;
        normal_fill(noise, nlat, o->seed * 1000003ull + (uint64_t)s + 1);
        drift_sde_coef c;
        if ((rc = drift_sde_coef_compute(sg, sgn, sigma_max, o->eta, &c, err))) goto done;
        drift_sde_sample_f32(x, vr.f32, noise, nlat, &c, xn, NULL);
        float sgv[64], sgnv[64];
        for (int64_t b = 0; b < B && b < 64; b++) { sgv[b] = sg; sgnv[b] = sgn; }
        if (B > 64) { rc = drift_err_set(err, DRIFT_E_USAGE, "batch", "synthetic runs support batch <= 64"); goto done; }
        if ((rc = drift_sde_log_prob_f32(x, vr.f32, xn, (size_t)B, per, sgv, sgnv, sigma_max, o->eta, lp_old, NULL, err)))
            goto done;
        /* Trainer: same sample, its own forward. */
        if ((rc = drift_forward_run(tr.f, m, be, in, on_site, &tr, &vt, err))) goto done;
        if ((rc = drift_sde_log_prob_f32(x, vt.f32, xn, (size_t)B, per, sgv, sgnv, sigma_max, o->eta, lp_new, NULL, err)))
            goto done;
        float sp[4] = {sg, sgn, sigma_max, o->eta};
        if ((rc = grow(&tr, nlat > 4 ? nlat : 4, err))) goto done;
        if ((rc = append_f32(tr.w, id_rout, outv->dtype, s, vr.f32, (size_t)vr.numel, tr.raw, err)) ||
            (rc = append_f32(tr.w, id_lpo, DRIFT_F32, s, lp_old, (size_t)B, tr.raw, err)) ||
            (rc = append_f32(tr.w, id_lpn, DRIFT_F32, s, lp_new, (size_t)B, tr.raw, err)) ||
            (rc = append_f32(tr.w, id_xn, DRIFT_F32, s, xn, nlat, tr.raw, err)) ||
            (rc = append_f32(tr.w, id_sp, DRIFT_F32, s, sp, 4, tr.raw, err)))
            goto done;
        drift_logprob_acc la;
        drift_metrics_logprob_init(&la);
        drift_metrics_accumulate_logprob_f32(lp_new, lp_old, (size_t)B, &la);
        drift_logprob_metrics lm;
        drift_metrics_finish_logprob(&la, &lm);
        drift_trace_step_metrics sm = {.step = s, .variant = 0, .denoise_index = s, .n_pairs = B,
                                       .log_prob_mean_abs_diff = lm.log_prob_mean_abs_diff,
                                       .ratio_abs_minus_1 = lm.ratio_abs_minus_1, .approx_kl = lm.approx_kl};
        if ((rc = drift_trace_writer_add_step_metrics(tr.w, &sm, err))) goto done;
        if ((rc = note_batch(tr.w, s, B, err))) goto done;
        if ((rc = drift_trace_writer_commit_step(tr.w, s, 0, err))) goto done;
        if (ro.w) {
            if ((rc = grow(&ro, nlat > 4 ? nlat : 4, err))) goto done;
            if ((rc = append_f32(ro.w, rid_lpo, DRIFT_F32, s, lp_old, (size_t)B, ro.raw, err)) ||
                (rc = append_f32(ro.w, rid_xn, DRIFT_F32, s, xn, nlat, ro.raw, err)) ||
                (rc = append_f32(ro.w, rid_sp, DRIFT_F32, s, sp, 4, ro.raw, err)) ||
                (rc = drift_trace_writer_commit_step(ro.w, s, 0, err)))
                goto done;
        }
        memcpy(x, xn, nlat * sizeof *x);
        if (o->progress) o->progress("record", s + 1, o->steps, o->progress_user);
        if (o->step_delay_ms > 0) {
            struct timespec wait_ts = {o->step_delay_ms / 1000, (long)(o->step_delay_ms % 1000) * 1000000L};
            nanosleep(&wait_ts, NULL);
        }
    }
    rc = drift_trace_writer_close(tr.w, err);
    tr.w = NULL;
    if (!rc && ro.w) rc = drift_trace_writer_close(ro.w, err);
    ro.w = NULL;
done:
    if (rc) { /* both traces record that the run failed (a new trace keeps its committed steps) */
        char why[DRIFT_TRACE_STATUS_MAX], msg[sizeof why];
        const char *em = err ? err->msg : "the record failed";
        if (strncmp(em, "recording ", 10) == 0) em += 10; /* the other trace's write error: its reason, not its tail */
        snprintf(msg, sizeof msg, "%.500s", em);
        char *tail = strstr(msg, "; ");
        if (tail) *tail = '\0';
        snprintf(why, sizeof why, "%.200s%s%.300s", err && err->where[0] ? err->where : "", err && err->where[0] ? ": " : "", msg);
        drift_trace_writer_fail(tr.w, why);
        drift_trace_writer_fail(ro.w, why);
    }
    side_free(&tr);
    side_free(&ro);
    drift_sitecmp_free(&cmp);
    drift_exec_result_free(&vr);
    drift_exec_result_free(&vt);
    drift_hostset_free(seed_inputs);
    drift_hostset_free(in);
    drift_backend_free(be);
    drift_model_free(m);
    free(sigmas); free(x); free(xn); free(noise); free(ts); free(lp_old); free(lp_new); free(cond_copy);
    drift_free(ref_json);
    return rc;
}
