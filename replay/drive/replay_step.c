/* The shared pieces of drift replay (replay_step.h). */
#include "replay/drive/replay_step.h"
#include "replay/drive/node_dump.h"
#include "formats/alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "replay/analysis/sde.h"
#include "kernels/gemm_forms.h"
#include "replay/capture/aten_model.h"
#include "replay/drive/synth.h" /* drift_synth_rollout_path */
#include "replay/exec/memplan.h"
#include "replay/exec/params_load.h"
#include "replay/exec/params_pipeline.h"

static const char *const INPUT_SITE[DRIFT_INPUT_COUNT] = {"input:latents:pre_cast", "input:cond:pre_cast",
                                                           "input:timestep:pre_cast"};
static const char *const INPUT_NAME[DRIFT_INPUT_COUNT] = {"latents", "cond", "timestep"};

/* ---- trace sources --------------------------------------------------------- */

/* Record of `site` whose index has step `step` (first such), or -1. Reads
 * the site's index once into a cache. */
typedef struct index_cache {
    long site;
    drift_trace_index *rows;
    int64_t n;
} index_cache;

/* A reader with its index caches. */
typedef struct src {
    drift_trace_reader *r;
    index_cache ic[64];
    float *buf;
    size_t cap;
} src;

static int record_of_step(src *s, const char *name, int64_t step, long *site_out, int64_t *rec, drift_err *err) {
    *rec = -1;
    long site = drift_trace_reader_find_site(s->r, name);
    *site_out = site;
    if (site < 0) return DRIFT_OK;
    index_cache *c = &s->ic[(size_t)site % 64];
    if (c->site != site || !c->rows) {
        free(c->rows);
        c->rows = NULL;
        c->site = site;
        drift_trace_site_info info;
        int rc = drift_trace_reader_site(s->r, (size_t)site, &info, err);
        if (rc) return rc;
        c->n = info.n_records;
        if (c->n == 0) return DRIFT_OK;
        c->rows = drift_malloc((size_t)c->n * sizeof *c->rows);
        if (!c->rows) return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory reading the index");
        if ((rc = drift_trace_read_index(s->r, (size_t)site, 0, c->n, c->rows, err))) return rc;
    }
    for (int64_t i = 0; i < c->n; i++)
        if (c->rows[i].step == step && c->rows[i].stored) { *rec = i; break; }
    return DRIFT_OK;
}

static void src_close(src *s) {
    for (int i = 0; i < 64; i++) free(s->ic[i].rows);
    free(s->buf);
    drift_trace_reader_close(s->r);
    memset(s, 0, sizeof *s);
}

/* Values of site at step into s->buf; *n = 0 if the trace has none. */
static int src_read(src *s, const char *site, int64_t step, int64_t *n, drift_trace_site_info *info_out, drift_err *err) {
    *n = 0;
    long id;
    int64_t rec;
    int rc = record_of_step(s, site, step, &id, &rec, err);
    if (rc || rec < 0) return rc;
    drift_trace_site_info info;
    if ((rc = drift_trace_reader_site(s->r, (size_t)id, &info, err))) return rc;
    if ((size_t)info.numel > s->cap) {
        float *b = drift_realloc(s->buf, (size_t)info.numel * sizeof *b);
        if (!b) return drift_err_set(err, DRIFT_E_NOMEM, site, "out of memory");
        s->buf = b;
        s->cap = (size_t)info.numel;
    }
    if ((rc = drift_trace_read_record_f32(s->r, (size_t)id, rec, s->buf, s->cap, err))) return rc;
    *n = info.numel;
    if (info_out) *info_out = info;
    return DRIFT_OK;
}

static int src_open(src *s, const char *path, drift_err *err) {
    memset(s, 0, sizeof *s);
    for (int i = 0; i < 64; i++) s->ic[i].site = -1;
    return drift_trace_reader_open(&s->r, path, DRIFT_TRACE_OPEN_NORMAL, err);
}

/* ---- shared ---------------------------------------------------------------- */

void drift_replay_shared_free(drift_replay_shared *s) {
    if (!s) return;
    drift_model_free(s->m);
    for (int64_t g = 0; g < s->n_gm; g++) drift_model_free(s->gm[g]);
    free(s->gm);
    free(s->sel_g);
    free(s->sel);
    if (s->sites)
        for (int i = 0; i < s->n_sites; i++) free(s->sites[i]);
    free(s->sites);
    memset(s, 0, sizeof *s);
}

/* Appends site to s->sites unless listed (a per-step graph's sites after /graph's). */
static int add_site(drift_replay_shared *s, const char *site, drift_err *err) {
    for (int i = 0; i < s->n_sites; i++)
        if (!strcmp(s->sites[i], site)) return DRIFT_OK;
    char **ns = drift_realloc(s->sites, (size_t)(s->n_sites + 1) * sizeof *ns);
    if (!ns) return drift_err_set(err, DRIFT_E_NOMEM, "replay", "out of memory");
    s->sites = ns;
    if (!(s->sites[s->n_sites] = drift_strdup(site))) return drift_err_set(err, DRIFT_E_NOMEM, "replay", "out of memory");
    s->n_sites++;
    return DRIFT_OK;
}

/* The graph of every selected step (docs/format.md 9.1): a step without one is
 * refused; each per-step graph a step uses is imported, its parameters and
 * buffers loaded, its sites added to the list. */
static int load_step_graphs(drift_replay_shared *s, drift_trace_reader *r, drift_replay_report *rep, drift_err *err) {
    const drift_replay_opts *o = s->o;
    drift_trace_step_graph *all = NULL;
    size_t n = 0;
    int rc = drift_trace_read_step_graphs(r, &all, &n, err);
    if (rc) return rc;
    s->sel_g = drift_calloc((size_t)(s->n_sel ? s->n_sel : 1), sizeof *s->sel_g);
    if (!s->sel_g) rc = drift_err_set(err, DRIFT_E_NOMEM, o->trace, "out of memory");
    for (int64_t k = 0, i = 0; !rc && k < s->n_sel; k++) {
        while ((size_t)i < n && all[i].step < s->sel[k]) i++;
        if ((size_t)i < n && all[i].step == s->sel[k]) s->sel_g[k] = all[i];
        else s->sel_g[k].step = s->sel[k];
        const drift_trace_step_graph *g = &s->sel_g[k];
        if (g->graph < 0) rc = drift_capture_refuse_step(o->trace, g, err);
        if (rc || g->graph <= 0) continue;
        if (g->graph > s->n_gm) {
            drift_model **ng = drift_realloc(s->gm, (size_t)g->graph * sizeof *ng);
            if (!ng) { rc = drift_err_set(err, DRIFT_E_NOMEM, o->trace, "out of memory"); break; }
            for (int64_t j = s->n_gm; j < g->graph; j++) ng[j] = NULL;
            s->gm = ng;
            s->n_gm = g->graph;
        }
        if (s->gm[g->graph - 1]) continue;
        drift_model *m = NULL;
        drift_forward *f = NULL;
        const drift_hostset *bufs;
        rc = drift_capture_model_for_step(r, drift_trace_reader_meta(r)->family, g, &m, err);
        if (!rc) {
            s->gm[g->graph - 1] = m;
            m->weights_root = o->weights_root;
            rc = drift_model_load_trace(m, r, err);
        }
        if (!rc) rc = drift_forward_prepare(m, o->plan, o->side, s->handed, &f, err);
        if (!rc) rc = drift_model_buffers(m, f->rope, &bufs, err);
        if (!rc && o->ref == DRIFT_REF_ORACLE) rc = drift_model_buffers(m, DRIFT_BUF_CPU_FP64, &bufs, err);
        int n_sites = rc ? 0 : drift_graph_sites(f->assigned, NULL, 0);
        int *ids = drift_malloc((size_t)(n_sites ? n_sites : 1) * sizeof *ids);
        if (!rc && !ids) rc = drift_err_set(err, DRIFT_E_NOMEM, o->trace, "out of memory");
        if (!rc) drift_graph_sites(f->assigned, ids, n_sites);
        for (int j = 0; !rc && j < n_sites; j++) rc = add_site(s, drift_graph_value(f->assigned, ids[j])->site, err);
        free(ids);
        const drift_value *ov = rc ? NULL : drift_graph_value(f->assigned, drift_graph_output(f->assigned));
        if (ov && ov->numel != s->out_numel && o->out_path) /* the -o trace's output site has /graph's shape */
            rc = drift_err_set(err, DRIFT_E_USAGE, "-o",
                               "step %lld's graph (/graph_steps graph %lld) outputs %lld elements, /graph %lld: one -o "
                               "trace cannot hold both (replay those steps without -o)",
                               (long long)g->step, (long long)g->graph, (long long)ov->numel, (long long)s->out_numel);
        drift_forward_free(f);
    }
    free(all);
    /* the report says which steps replayed with a graph of their own (a "note:" line) */
    char line[600];
    size_t k = 0;
    for (int64_t i = 0; !rc && i < s->n_sel && k + 40 < sizeof line; i++) {
        if (s->sel_g[i].graph <= 0) continue;
        if (!k) k = (size_t)snprintf(line, sizeof line, "steps replayed with a graph of their own (/graph_steps):");
        k += (size_t)snprintf(line + k, sizeof line - k, " %lld:%lld", (long long)s->sel_g[i].step,
                              (long long)s->sel_g[i].graph);
    }
    if (k) {
        size_t old = rep->warnings ? strlen(rep->warnings) : 0;
        char *w = drift_realloc(rep->warnings, old + k + 2);
        if (!w) return drift_err_set(err, DRIFT_E_NOMEM, o->trace, "out of memory");
        memcpy(w + old, line, k);
        w[old + k] = '\n';
        w[old + k + 1] = 0;
        rep->warnings = w;
    }
    return rc;
}

/* 0 when m is a captured graph without boundary input i (DiT: no text condition). */
int drift_replay_shared_open(const drift_replay_opts *o, drift_replay_shared *s, drift_replay_report *rep, drift_err *err) {
    memset(s, 0, sizeof *s);
    s->o = o;
    src main_src;
    drift_trace_reader *rr = NULL;
    drift_forward *f = NULL;
    int rc = src_open(&main_src, o->trace, err);
    if (rc) goto done;
    const drift_trace_meta *meta = drift_trace_reader_meta(main_src.r);
    rep->cmp.guidance_scale = meta->guidance_scale;
    if ((rc = drift_trace_read_libraries(main_src.r, &rep->libs_rec, &rep->has_libs_rec, err))) goto done;
    s->gpu_as = drift_gemm_table_for(meta->producer, rep->has_libs_rec ? &rep->libs_rec : NULL);
    if ((rc = drift_capture_model_for_trace(main_src.r, meta->family, &s->m, err))) {
        if (!drift_capture_is_spec(meta->family)) drift_err_prefix(err, "%s: root attribute 'family'", o->trace);
        goto done;
    }
    snprintf(rep->model, sizeof rep->model, "%s", s->m->spec);
    s->batch = s->m->cfg.batch;
    /* the import's notes: recorded module sites it left unmapped */
    if (s->m->captured_notes && !rep->warnings && !(rep->warnings = drift_strdup(s->m->captured_notes))) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, o->trace, "out of memory");
        goto done;
    }

    /* The dtypes the boundary inputs were handed over in: the pre-cast sites'. */
    for (int i = 0; i < DRIFT_INPUT_COUNT; i++) {
        long id = drift_trace_reader_find_site(main_src.r, INPUT_SITE[i]);
        if (id < 0 && !drift_capture_model_takes_input(s->m, i)) {
            s->handed[i] = DRIFT_F32; /* a captured model without this input (DiT: no text condition) */
            continue;
        }
        if (id < 0) {
            rc = drift_err_set(err, DRIFT_E_INPUT, o->trace, "site '%s' is missing: replay needs the boundary inputs as handed over",
                               INPUT_SITE[i]);
            goto done;
        }
        drift_trace_site_info info;
        if ((rc = drift_trace_reader_site(main_src.r, (size_t)id, &info, err))) goto done;
        s->handed[i] = info.dtype;
    }
    if ((rc = drift_forward_prepare(s->m, o->plan, o->side, s->handed, &f, err))) goto done;
    /* The memory plan, before anything large is read or uploaded (one-device replays). */
    if (!o->devices && !o->mpi) {
        drift_forward *fo = NULL;
        const int on_gpu = o->backend && strncmp(o->backend, "cuda", 4) == 0;
        if (o->ref == DRIFT_REF_ORACLE) rc = drift_forward_prepare(s->m, NULL, DRIFT_SIDE_ORACLE, s->handed, &fo, err);
        drift_mem_estimate me;
        memset(&me, 0, sizeof me);
        if (!rc) rc = drift_memplan_estimate(s->m, f, fo, o->oracle_on_host, o->backend, on_gpu, o->sites, &me, err);
        drift_forward_free(fo);
        if (!rc) rc = drift_memplan_check(&me, o->trace, err);
        if (rc) goto done;
        rep->mem_planned = 1;
        rep->mem_on_gpu = me.on_gpu;
        rep->mem_gpu_planned = me.gpu_total;
        rep->mem_host_planned = me.host_total;
    }
    s->m->weights_root = o->weights_root;
    const char *prof = getenv("DRIFT_REPLAY_PROFILE");
    s->m->load_baseline = prof && prof[0] == '1';
    /* one device: parameters (by reference, or whole by value) are read in the worker's warm-up,
       overlapped with their upload */
    s->m->defer_params = !o->devices && !o->mpi;
    if ((rc = drift_model_load_trace(s->m, main_src.r, err))) goto done;
    rep->load = s->m->load;
    /* Build the buffers every worker will use now: the model is read-only after this. */
    const drift_hostset *bufs;
    if ((rc = drift_model_buffers(s->m, f->rope, &bufs, err))) goto done;
    if (o->ref == DRIFT_REF_ORACLE && (rc = drift_model_buffers(s->m, DRIFT_BUF_CPU_FP64, &bufs, err))) goto done;
    int n_sites = drift_graph_sites(f->assigned, NULL, 0);
    int *ids = drift_malloc((size_t)(n_sites ? n_sites : 1) * sizeof *ids);
    s->sites = drift_calloc((size_t)(n_sites ? n_sites : 1), sizeof *s->sites);
    if (!ids || !s->sites) { free(ids); rc = drift_err_set(err, DRIFT_E_NOMEM, o->trace, "out of memory"); goto done; }
    drift_graph_sites(f->assigned, ids, n_sites);
    for (int i = 0; i < n_sites; i++) {
        s->sites[i] = drift_strdup(drift_graph_value(f->assigned, ids[i])->site);
        if (!s->sites[i]) { free(ids); rc = drift_err_set(err, DRIFT_E_NOMEM, o->trace, "out of memory"); goto done; }
        s->n_sites = i + 1;
    }
    free(ids);
    const drift_value *ov = drift_graph_value(f->assigned, drift_graph_output(f->assigned));
    if (!ov) { rc = drift_err_set(err, DRIFT_E_INTERNAL, "replay", "the forward has no output"); goto done; }
    s->out_dtype = ov->dtype;
    s->out_ndim = ov->ndim;
    memcpy(s->out_shape, ov->shape, sizeof s->out_shape);
    s->out_numel = ov->numel;

    switch (o->ref) {
    case DRIFT_REF_TRAINER:
        snprintf(rep->ref_desc, sizeof rep->ref_desc, "recorded sites of %s", o->trace);
        break;
    case DRIFT_REF_ROLLOUT:
    case DRIFT_REF_TRACE:
        if (o->ref_path) snprintf(s->ref_path, sizeof s->ref_path, "%s", o->ref_path);
        else drift_synth_rollout_path(o->trace, s->ref_path, sizeof s->ref_path);
        if (o->ref == DRIFT_REF_ROLLOUT && !o->ref_path && access(s->ref_path, F_OK) != 0 &&
            drift_trace_reader_find_site(main_src.r, DRIFT_SITE_ROLLOUT_OUTPUT) >= 0) {
            /* no sibling rollout file: the trainer recorded what the rollout handed over */
            s->ref_self_rollout = 1;
            snprintf(rep->ref_desc, sizeof rep->ref_desc,
                     "the trace's own %s (no rollout trace %s beside it): the output only", DRIFT_SITE_ROLLOUT_OUTPUT,
                     s->ref_path);
            snprintf(s->ref_path, sizeof s->ref_path, "%s", o->trace);
            break;
        }
        if ((rc = drift_trace_reader_open(&rr, s->ref_path, DRIFT_TRACE_OPEN_NORMAL, err))) {
            if (o->ref == DRIFT_REF_ROLLOUT && !o->ref_path)
                drift_err_prefix(err, "--ref rollout looks for the rollout trace beside %s", o->trace);
            goto done;
        }
        snprintf(rep->ref_desc, sizeof rep->ref_desc, "%s trace %s",
                 drift_trace_side_name(drift_trace_reader_meta(rr)->side), s->ref_path);
        break;
    case DRIFT_REF_ORACLE:
        snprintf(rep->ref_desc, sizeof rep->ref_desc, "fp64 oracle");
        rep->has_oracle = 1;
        break;
    }

    size_t n_all = 0;
    const drift_trace_step *st = drift_trace_reader_steps(main_src.r, &n_all);
    rep->steps = drift_calloc(n_all ? n_all : 1, sizeof *rep->steps);
    rep->first_divergent = drift_calloc(n_all ? n_all : 1, sizeof *rep->first_divergent);
    s->sel = drift_calloc(n_all ? n_all : 1, sizeof *s->sel);
    if (!rep->steps || !rep->first_divergent || !s->sel) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, o->trace, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n_all; i++)
        if ((o->step_first < 0 || st[i].step >= o->step_first) && (o->step_last < 0 || st[i].step <= o->step_last))
            s->sel[s->n_sel++] = st[i].step;
    if (s->n_sel == 0)
        rc = drift_err_set(err, DRIFT_E_USAGE, "--steps", "no committed step of %s is in the range (the trace has %zu)",
                           o->trace, n_all);
    if (!rc && s->m->captured) rc = load_step_graphs(s, main_src.r, rep, err);
done:
    drift_forward_free(f);
    drift_trace_reader_close(rr);
    src_close(&main_src);
    return rc;
}

/* ---- workers ----------------------------------------------------------------- */

struct drift_replay_worker {
    src main_src, ref_src;
    int has_ref;
    drift_forward *f, *fo;
    drift_forward **gf, **gfo;   /* per-step graph k's forward (and oracle) at [k - 1]; NULL where unused */
    drift_exec_cache **gc;       /* their resident parameters (use_cache), made at first use */
    drift_backend *be, *ref_be;
    drift_exec_cache *cache;
    drift_exec_cache *ocache;    /* the oracle's parameters kept on its GPU (ref-cuda) between steps */
    drift_site_cache *oracle;
    drift_exec_result res, ores;
    float *f32;
    size_t cap;
    /* per step, for the site callback */
    const drift_replay_shared *s;
    drift_replay_step_partial *st;
    int cursor;
    /* DRIFT_REPLAY_PROFILE=1: seconds per phase of drift_replay_run_step, printed at free */
    int prof;
    long prof_steps;
    double prof_t[4]; /* inputs read, forward (incl. site comparisons), oracle, after the forward */
    char prof_name[32];
};

static double rs_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void drift_replay_worker_free(drift_replay_worker *w) {
    if (!w) return;
    if (w->prof && w->prof_steps)
        fprintf(stderr, "replay profile (%s): %ld steps: inputs %.1f ms, forward+sites %.1f ms, oracle %.1f ms, "
                "after %.1f ms per step\n", w->prof_name, w->prof_steps, 1e3 * w->prof_t[0] / w->prof_steps,
                1e3 * w->prof_t[1] / w->prof_steps, 1e3 * w->prof_t[2] / w->prof_steps, 1e3 * w->prof_t[3] / w->prof_steps);
    drift_exec_result_free(&w->res);
    drift_exec_result_free(&w->ores);
    drift_exec_cache_free(w->cache);
    drift_exec_cache_free(w->ocache);
    drift_site_cache_free(w->oracle);
    drift_forward_free(w->f);
    drift_forward_free(w->fo);
    for (int64_t g = 0; g < w->s->n_gm; g++) {
        if (w->gf) drift_forward_free(w->gf[g]);
        if (w->gfo) drift_forward_free(w->gfo[g]);
        if (w->gc) drift_exec_cache_free(w->gc[g]);
    }
    free(w->gf);
    free(w->gfo);
    free(w->gc);
    drift_backend_free(w->be);
    drift_backend_free(w->ref_be);
    src_close(&w->main_src);
    src_close(&w->ref_src);
    free(w->f32);
    free(w);
}

int drift_replay_worker_open(const drift_replay_shared *s, const char *backend, int use_cache, drift_replay_worker **out,
                         drift_err *err) {
    *out = NULL;
    const drift_replay_opts *o = s->o;
    drift_replay_worker *w = drift_calloc(1, sizeof *w);
    if (!w) return drift_err_set(err, DRIFT_E_NOMEM, "replay", "out of memory");
    w->s = s;
    const char *pe = getenv("DRIFT_REPLAY_PROFILE");
    w->prof = pe && pe[0] == '1';
    snprintf(w->prof_name, sizeof w->prof_name, "%s", backend ? backend : "cpu");
    int rc = src_open(&w->main_src, o->trace, err);
    if (!rc && (o->ref == DRIFT_REF_ROLLOUT || o->ref == DRIFT_REF_TRACE)) {
        w->has_ref = 1;
        rc = src_open(&w->ref_src, s->ref_path, err);
    }
    if (!rc) rc = drift_forward_prepare(s->m, o->plan, o->side, s->handed, &w->f, err);
    char spec0[512], spec[600];
    if (!rc) rc = drift_backend_spec_with_kernels(backend, o->kernels, spec0, sizeof spec0, err);
    if (!rc) rc = drift_backend_spec_with_gemm_table(spec0, s->gpu_as, spec, sizeof spec, err);
    if (!rc) rc = drift_backend_create(spec, &w->be, err);
    if (!rc && use_cache) rc = drift_exec_cache_create(w->be, &w->cache, err);
    if (!rc && o->ref == DRIFT_REF_ORACLE) {
        rc = drift_forward_prepare(s->m, NULL, DRIFT_SIDE_ORACLE, s->handed, &w->fo, err);
        char ob[64];
        if (!rc) rc = drift_backend_create(drift_oracle_backend(backend, o->oracle_on_host, ob, sizeof ob), &w->ref_be, err);
        if (!rc && strcmp(ob, "ref") != 0) rc = drift_exec_cache_create(w->ref_be, &w->ocache, err);
        if (!rc) rc = drift_site_cache_create(&w->oracle, err);
    }
    if (!rc && s->n_gm > 0) { /* the per-step graphs' forwards */
        w->gf = drift_calloc((size_t)s->n_gm, sizeof *w->gf);
        w->gfo = drift_calloc((size_t)s->n_gm, sizeof *w->gfo);
        w->gc = drift_calloc((size_t)s->n_gm, sizeof *w->gc);
        if (!w->gf || !w->gfo || !w->gc) rc = drift_err_set(err, DRIFT_E_NOMEM, "replay", "out of memory");
        for (int64_t g = 0; !rc && g < s->n_gm; g++) {
            if (!s->gm[g]) continue;
            rc = drift_forward_prepare(s->gm[g], o->plan, o->side, s->handed, &w->gf[g], err);
            if (!rc && w->fo) rc = drift_forward_prepare(s->gm[g], NULL, DRIFT_SIDE_ORACLE, s->handed, &w->gfo[g], err);
        }
    }
    if (rc) {
        drift_replay_worker_free(w);
        return rc;
    }
    *out = w;
    return DRIFT_OK;
}

const drift_backend *drift_replay_worker_backend(const drift_replay_worker *w) { return w->be; }

void drift_replay_worker_identity(const drift_replay_worker *w, drift_replay_report *rep) {
    if (!w || !rep) return;
    const char *k = drift_backend_kernels(w->be);
    snprintf(rep->kernels, sizeof rep->kernels, "%s", k ? k : "");
    rep->has_libs_here = drift_backend_libraries(w->be, &rep->libs_here);
}
void drift_replay_worker_fallbacks(const drift_replay_worker *w, drift_replay_report *rep) {
    if (!w || !rep) return;
    rep->kernel_fallbacks = drift_backend_kernel_fallbacks(w->be, rep->kernel_fallback_ops, sizeof rep->kernel_fallback_ops,
                                                           rep->kernel_fallback_why, sizeof rep->kernel_fallback_why);
}
const drift_forward *drift_replay_worker_forward(const drift_replay_worker *w) { return w->f; }
drift_exec_cache *drift_replay_worker_cache(drift_replay_worker *w) { return w->cache; }

/* ---- steps ---------------------------------------------------------------------- */

int drift_replay_step_partial_init(const drift_replay_shared *s, int keep_out, drift_replay_step_partial *st, drift_err *err) {
    memset(st, 0, sizeof *st);
    st->site = drift_calloc((size_t)(s->n_sites ? s->n_sites : 1), sizeof *st->site);
    if (keep_out) st->out = drift_calloc((size_t)(s->out_numel ? s->out_numel : 1), sizeof *st->out);
    if (!st->site || (keep_out && !st->out)) {
        drift_replay_step_partial_free(st);
        return drift_err_set(err, DRIFT_E_NOMEM, "replay", "out of memory");
    }
    return DRIFT_OK;
}

void drift_replay_step_partial_reset(const drift_replay_shared *s, drift_replay_step_partial *st) {
    drift_replay_site_partial *site = st->site;
    float *out = st->out;
    memset(site, 0, (size_t)s->n_sites * sizeof *site);
    memset(st, 0, sizeof *st);
    st->site = site;
    st->out = out;
    for (int i = 0; i < 3; i++) st->orc[i] = NAN;
}

void drift_replay_step_partial_free(drift_replay_step_partial *st) {
    if (!st) return;
    free(st->site);
    free(st->out);
    memset(st, 0, sizeof *st);
}

static int on_site(const char *site, const drift_tensor *t, void *user, drift_err *err) {
    drift_replay_worker *w = user;
    const drift_replay_shared *s = w->s;
    const int dump = drift_node_dump_dir() && strncmp(site, "fx:", 3) == 0;
    if (!dump && !s->o->sites && strcmp(site, DRIFT_SITE_NOISE_PRED) != 0) return DRIFT_OK;
    /* sites arrive in execution order: find this one from the cursor on */
    int j = -1;
    for (int k = 0; k < s->n_sites && j < 0; k++) {
        int i = (w->cursor + k) % s->n_sites;
        if (strcmp(s->sites[i], site) == 0) j = i;
    }
    if (j < 0) return drift_err_set(err, DRIFT_E_INTERNAL, site, "site '%s' is not in the forward's site list", site);
    w->cursor = j + 1;
    if ((size_t)t->numel > w->cap) {
        float *b = drift_realloc(w->f32, (size_t)t->numel * sizeof *b);
        if (!b) return drift_err_set(err, DRIFT_E_NOMEM, site, "out of memory");
        w->f32 = b;
        w->cap = (size_t)t->numel;
    }
    int rc = drift_backend_download_f32(t->be, t, w->f32, err);
    if (rc) return rc;
    if (dump) return drift_node_dump_write(site, t, w->f32, w->st->step, err);
    const float *r = NULL;
    int64_t rn = 0;
    if (w->oracle) {
        r = drift_site_cache_get(w->oracle, site, &rn, NULL);
    } else {
        src *ref = w->has_ref ? &w->ref_src : &w->main_src;
        const char *rsite = site;
        if (s->ref_self_rollout) { /* only the output has a rollout-side twin in the trace */
            if (strcmp(site, DRIFT_SITE_NOISE_PRED) != 0) return DRIFT_OK;
            rsite = DRIFT_SITE_ROLLOUT_OUTPUT;
        }
        if ((rc = src_read(ref, rsite, w->st->step, &rn, NULL, err))) return rc;
        r = rn ? ref->buf : NULL;
    }
    if (!r || rn != t->numel) return DRIFT_OK; /* the reference did not record this site */
    drift_replay_site_partial *e = &w->st->site[j];
    e->present = 1;
    e->dtype = t->dtype;
    return drift_sitecmp_step_acc(t->dtype, w->f32, r, t->numel, s->batch, &e->acc, err);
}

int drift_replay_worker_warm(const drift_replay_shared *s, drift_replay_worker *w, drift_err *err) {
    if (s->m->pending_ref || s->m->pending_trace) /* not read yet: read now, cast and uploaded as they arrive */
        return w->cache ? drift_model_warm_load(s->m, w->f, w->be, w->cache, on_site, err)
                        : drift_model_load_pending(s->m, err);
    if (!w->cache) return DRIFT_OK;
    int rc = drift_forward_warm(w->f, s->m, w->be, w->cache, on_site, err);
    if (!rc) rc = drift_backend_sync(w->be, err);
    return rc;
}

static int oracle_site(const char *site, const drift_tensor *t, void *user, drift_err *err) {
    return drift_site_cache_put((drift_site_cache *)user, site, t, err);
}

static double rmse_of(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        s += d * d;
    }
    return n ? sqrt(s / (double)n) : NAN;
}

/* The noise floor of a model without a latents input (Cosmos3-Omni's noisy input is
 * vision_tokens, a user input of role "other"): the first per-step user input holding a
 * non-integer value (never ids, indices or masks, whose values are integers) gets the
 * latents' nudge, one element by one ULP of the forward dtype; none: no nudge (floor 0). */
static void nudge_other_input(const drift_replay_shared *s, drift_hostset *in) {
    for (size_t i = 0; i < drift_hostset_count(in); i++) {
        drift_host_tensor *t = (drift_host_tensor *)drift_hostset_at(in, i); /* the set is this step's own */
        if (strncmp(t->name, "input:", 6) || t->numel <= 0 || !t->f32) continue;
        int frac = 0;
        for (int64_t e = 0; e < t->numel && !frac; e++) frac = t->f32[e] != floorf(t->f32[e]);
        if (!frac) continue;
        float *x = t->f32 + t->numel / 2;
        drift_metrics_nudge_ulp_f32(x, 1, drift_assign_forward_dtype(s->o->plan, s->o->side), 1.0, 12345);
        if (t->f64) t->f64[t->numel / 2] = (double)*x;
        return;
    }
}

int drift_replay_run_step(const drift_replay_shared *s, drift_replay_worker *w, int64_t k, drift_replay_step_partial *st, drift_err *err) {
    const drift_replay_opts *o = s->o;
    drift_replay_step_partial_reset(s, st);
    int64_t step = s->sel[k];
    st->step = step;
    double pt0 = w->prof ? rs_now() : 0, pt1 = 0, pt2 = 0, pt3 = 0;
    /* the graph this step uses: /graph's model, or its own (docs/format.md 9.1) */
    drift_trace_step_graph g0 = {.step = step};
    const drift_trace_step_graph *sgr = s->sel_g ? &s->sel_g[k] : &g0;
    const int64_t gi = sgr->graph > 0 ? sgr->graph - 1 : -1;
    drift_model *m = gi >= 0 ? s->gm[gi] : s->m;
    drift_forward *f = gi >= 0 ? w->gf[gi] : w->f, *fo = gi >= 0 ? w->gfo[gi] : w->fo;
    drift_exec_cache *ocache = gi >= 0 ? NULL : w->ocache;
    if (gi >= 0 && w->cache && !w->gc[gi]) {
        int crc = drift_exec_cache_create(w->be, &w->gc[gi], err);
        if (crc) return crc;
    }
    drift_exec_cache *cache = gi >= 0 ? w->gc[gi] : w->cache;
    drift_hostset *in = NULL;
    int rc = drift_hostset_create(&in, err);
    if (rc) return rc;
    /* Inputs as handed over. */
    for (int i = 0; i < DRIFT_INPUT_COUNT; i++) {
        int64_t n;
        drift_trace_site_info info;
        if (!drift_capture_model_takes_input(m, i)) continue;
        if ((rc = src_read(&w->main_src, INPUT_SITE[i], step, &n, &info, err))) goto done;
        if (!n) {
            rc = drift_err_set(err, DRIFT_E_INPUT, o->trace, "step %lld has no stored record of '%s'", (long long)step,
                               INPUT_SITE[i]);
            goto done;
        }
        drift_host_tensor *added = NULL;
        if ((rc = drift_hostset_add(in, INPUT_NAME[i], info.dtype, info.ndim, info.shape, w->main_src.buf, NULL, &added, err)))
            goto done;
        /* the noise floor's replay: the smallest change that flips a rounding upstream (as bisect's floor) */
        if (o->nudge_latents && i == DRIFT_INPUT_LATENTS && added->numel > 0)
            drift_metrics_nudge_ulp_f32(added->f32 + added->numel / 2, 1, drift_assign_forward_dtype(o->plan, o->side), 1.0,
                                        12345);
    }
    /* A captured graph's other user inputs (masks, ids, pooled projections) of this step. */
    if ((rc = drift_capture_step_inputs(m, w->main_src.r, step, in, err))) goto done;
    /* a graph traced from one step's forward is specialised to its shapes: say which input does not fit */
    if ((rc = drift_capture_check_step_shapes(m, in, o->trace, sgr, err))) goto done;
    if (o->nudge_latents && !drift_capture_model_takes_input(m, DRIFT_INPUT_LATENTS)) nudge_other_input(s, in);
    if (w->prof) pt1 = rs_now();
    if (fo) {
        drift_site_cache_clear(w->oracle);
        drift_exec_result_free(&w->ores);
        if ((rc = drift_forward_run_cached(fo, m, w->ref_be, in, ocache, oracle_site, w->oracle, &w->ores, err)))
            goto done;
    }
    if (w->prof) pt2 = rs_now();
    drift_exec_result_free(&w->res);
    w->st = st;
    w->cursor = 0;
    if ((rc = drift_forward_run_cached(f, m, w->be, in, cache, on_site, w, &w->res, err))) goto done;
    if (w->prof) pt3 = rs_now();
    if (st->out && w->res.numel == s->out_numel) memcpy(st->out, w->res.f32, (size_t)s->out_numel * sizeof *st->out);

    /* Each recorded side's output against the oracle. */
    if (fo) {
        int64_t n;
        if ((rc = src_read(&w->main_src, DRIFT_SITE_NOISE_PRED, step, &n, NULL, err))) goto done;
        if (n == w->ores.numel) { st->has_orc[0] = 1; st->orc[0] = rmse_of(w->main_src.buf, w->ores.f32, n); }
        if ((rc = src_read(&w->main_src, DRIFT_SITE_ROLLOUT_OUTPUT, step, &n, NULL, err))) goto done;
        if (n == w->ores.numel) { st->has_orc[1] = 1; st->orc[1] = rmse_of(w->main_src.buf, w->ores.f32, n); }
        if (w->res.numel == w->ores.numel) { st->has_orc[2] = 1; st->orc[2] = rmse_of(w->res.f32, w->ores.f32, w->res.numel); }
    }
    /* Log-prob of the replayed output on the recorded SDE sample. */
    int64_t np = 0, nx = 0;
    float sp[4];
    if ((rc = src_read(&w->main_src, DRIFT_SITE_SDE_PARAMS, step, &np, NULL, err))) goto done;
    if (np != 4) goto done;
    memcpy(sp, w->main_src.buf, sizeof sp);
    const drift_host_tensor *lat = drift_hostset_find(in, "latents");
    if ((rc = src_read(&w->main_src, DRIFT_SITE_SDE_XNEXT, step, &nx, NULL, err))) goto done;
    size_t B = (size_t)s->batch;
    if (nx != lat->numel || w->res.numel != lat->numel || B > DRIFT_REPLAY_MAX_BATCH) goto done;
    float sg[DRIFT_REPLAY_MAX_BATCH], sgn[DRIFT_REPLAY_MAX_BATCH];
    for (size_t b = 0; b < B; b++) { sg[b] = sp[0]; sgn[b] = sp[1]; }
    if (drift_sde_log_prob_f32(lat->f32, w->res.f32, w->main_src.buf, B, (size_t)nx / B, sg, sgn, sp[2], sp[3], st->lp,
                               NULL, err) != DRIFT_OK) {
        drift_err_clear(err); /* as before: a sample the SDE cannot score has no log-prob */
        goto done;
    }
    st->has_lp = 1;
    st->B = (int64_t)B;
    int64_t nl;
    if ((rc = src_read(&w->main_src, DRIFT_SITE_LOGPROB_OLD, step, &nl, NULL, err))) goto done;
    if (nl == (int64_t)B) { st->has_old = 1; memcpy(st->lp_old, w->main_src.buf, B * sizeof *st->lp_old); }
    if ((rc = src_read(&w->main_src, DRIFT_SITE_LOGPROB_NEW, step, &nl, NULL, err))) goto done;
    if (nl == (int64_t)B) { st->has_new = 1; memcpy(st->lp_new, w->main_src.buf, B * sizeof *st->lp_new); }
done:
    drift_hostset_free(in);
    if (w->prof && pt3 > 0) {
        double end = rs_now();
        w->prof_t[0] += pt1 - pt0;
        w->prof_t[2] += pt2 - pt1;
        w->prof_t[1] += pt3 - pt2;
        w->prof_t[3] += end - pt3;
        w->prof_steps++;
    }
    return rc;
}

/* ---- merging ------------------------------------------------------------------- */

int drift_replay_merger_open(drift_replay_merger *mg, const drift_replay_shared *s, drift_replay_report *rep, int write_out,
                         drift_err *err) {
    memset(mg, 0, sizeof *mg);
    mg->s = s;
    mg->rep = rep;
    mg->out_site = -1;
    drift_metrics_logprob_init(&mg->lpo);
    drift_metrics_logprob_init(&mg->lpn);
    const drift_replay_opts *o = s->o;
    if (!o->out_path || !write_out) return DRIFT_OK;
    drift_trace_reader *r = NULL;
    int rc = drift_trace_reader_open(&r, o->trace, DRIFT_TRACE_OPEN_NORMAL, err);
    if (rc) return rc;
    const drift_trace_meta *meta = drift_trace_reader_meta(r);
    char *pj = drift_plan_to_json(o->plan);
    drift_trace_meta om = {.side = DRIFT_TRACE_SIDE_REPLAY, .run_id = meta->run_id, .rank = meta->rank,
                           .world_size = meta->world_size, .family = s->m->spec,
                           .guidance_scale = meta->guidance_scale, .plan_json = pj ? pj : "{}"};
    rc = drift_trace_writer_create(&mg->out, o->out_path, &om, err);
    free(pj);
    drift_trace_reader_close(r);
    if (rc) return rc;
    /* The replayed output of every step (the result's per-step tensor). */
    drift_trace_site_decl d;
    memset(&d, 0, sizeof d);
    d.name = DRIFT_SITE_NOISE_PRED;
    d.dtype = s->out_dtype == DRIFT_BF16 || s->out_dtype == DRIFT_F16 ? s->out_dtype : DRIFT_F32;
    d.ndim = s->out_ndim;
    memcpy(d.shape, s->out_shape, sizeof d.shape);
    d.store_tensors = 1;
    if ((rc = drift_trace_writer_declare_site(mg->out, &d, &mg->out_site, err))) return rc;
    return drift_trace_writer_start(mg->out, err);
}

int drift_replay_merger_add(drift_replay_merger *mg, const drift_replay_step_partial *st, drift_err *err) {
    const drift_replay_shared *s = mg->s;
    drift_replay_report *rep = mg->rep;
    int oracle = s->o->ref == DRIFT_REF_ORACLE;
    int rc;
    char *first = NULL;
    drift_sitecmp_begin_step(&rep->cmp);
    for (int j = 0; j < s->n_sites; j++) {
        const drift_replay_site_partial *e = &st->site[j];
        if (!e->present) continue;
        int was = rep->cmp.step_diverged;
        drift_trace_metric row;
        if ((rc = drift_sitecmp_add_acc(&rep->cmp, s->sites[j], e->dtype, &e->acc, st->step, &row, err))) goto fail;
        if (!was && rep->cmp.step_diverged && !first) {
            first = drift_strdup(s->sites[j]);
            if (!first) { rc = drift_err_set(err, DRIFT_E_NOMEM, "replay", "out of memory"); goto fail; }
        }
        if (oracle) {
            row.rmse_oracle = row.rmse;
            drift_sitecmp_entry *ce = drift_sitecmp_find(&rep->cmp, s->sites[j]);
            if (ce) {
                drift_site_metrics m;
                drift_sitecmp_finish(&rep->cmp, ce, &m);
                ce->rmse_oracle = m.rmse;
            }
        }
        if (mg->out && (rc = drift_trace_writer_add_metric(mg->out, s->sites[j], &row, err))) goto fail;
    }
    rep->steps[rep->n_steps] = st->step;
    rep->first_divergent[rep->n_steps] = first;
    first = NULL;
    rep->n_steps++;
    if (st->has_orc[0]) rep->oracle_rmse_trainer = st->orc[0];
    if (st->has_orc[1]) rep->oracle_rmse_rollout = st->orc[1];
    if (st->has_orc[2]) rep->oracle_rmse_replay = st->orc[2];
    if (st->has_lp) {
        size_t B = (size_t)st->B;
        if (st->has_old) {
            drift_metrics_accumulate_logprob_f32(st->lp, st->lp_old, B, &mg->lpo);
            rep->has_logprob = 1;
        }
        if (st->has_new) drift_metrics_accumulate_logprob_f32(st->lp, st->lp_new, B, &mg->lpn);
        if (mg->out && st->has_old) {
            drift_logprob_acc one;
            drift_metrics_logprob_init(&one);
            drift_metrics_accumulate_logprob_f32(st->lp, st->lp_old, B, &one);
            drift_logprob_metrics lm;
            drift_metrics_finish_logprob(&one, &lm);
            drift_trace_step_metrics sm = {.step = st->step, .denoise_index = -1, .n_pairs = (int64_t)B,
                                           .log_prob_mean_abs_diff = lm.log_prob_mean_abs_diff,
                                           .ratio_abs_minus_1 = lm.ratio_abs_minus_1, .approx_kl = lm.approx_kl};
            if ((rc = drift_trace_writer_add_step_metrics(mg->out, &sm, err))) goto fail;
        }
    }
    if (mg->out) {
        if (st->out && mg->out_site >= 0) {
            size_t n = (size_t)s->out_numel;
            drift_dtype dt = s->out_dtype == DRIFT_BF16 || s->out_dtype == DRIFT_F16 ? s->out_dtype : DRIFT_F32;
            void *raw = drift_malloc((n ? n : 1) * drift_dtype_size(dt));
            if (!raw) { rc = drift_err_set(err, DRIFT_E_NOMEM, "replay", "out of memory"); goto fail; }
            drift_dtype_from_f32_n(st->out, raw, dt, n);
            drift_trace_index idx = {.step = st->step, .microbatch = 0, .denoise_index = -1, .call_index = 0};
            rc = drift_trace_writer_append(mg->out, mg->out_site, &idx, raw, 1, err);
            free(raw);
            if (rc) goto fail;
        }
        if ((rc = drift_trace_writer_commit_step(mg->out, st->step, 0, err))) goto fail;
    }
    return DRIFT_OK;
fail:
    free(first);
    return rc;
}

int drift_replay_merger_finish(drift_replay_merger *mg, drift_err *err) {
    drift_metrics_finish_logprob(&mg->lpo, &mg->rep->lp_vs_old);
    drift_metrics_finish_logprob(&mg->lpn, &mg->rep->lp_vs_new);
    int rc = DRIFT_OK;
    if (mg->out) {
        rc = drift_trace_writer_close(mg->out, err);
        mg->out = NULL;
    }
    return rc;
}

void drift_replay_merger_free(drift_replay_merger *mg) {
    if (!mg) return;
    /* still open: the replay stopped before finishing (a finished one closed it) */
    if (mg->out) drift_trace_writer_fail(mg->out, "the replay stopped before its last step");
    drift_trace_writer_close(mg->out, NULL);
    mg->out = NULL;
}
