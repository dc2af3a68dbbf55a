#include "replay/replay_trace.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/trace.h"
#include "replay/forward.h"
#include "replay/sde.h"

void drift_replay_opts_init(drift_replay_opts *o) {
    memset(o, 0, sizeof *o);
    o->side = DRIFT_SIDE_TRAINER;
    o->ref = DRIFT_REF_TRAINER;
    o->step_first = o->step_last = -1;
    o->backend = "cpu";
    o->sites = 1;
}

void drift_replay_report_free(drift_replay_report *rep) {
    if (!rep) return;
    drift_sitecmp_free(&rep->cmp);
    if (rep->first_divergent)
        for (int64_t i = 0; i < rep->n_steps; i++) free(rep->first_divergent[i]);
    free(rep->first_divergent);
    free(rep->steps);
    memset(rep, 0, sizeof *rep);
}

int drift_replay_parse_steps(const char *s, int64_t *first, int64_t *last, drift_err *err) {
    *first = *last = -1;
    if (!s || !*s) return DRIFT_OK;
    const char *colon = strchr(s, ':');
    char *end = NULL;
    errno = 0;
    if (!colon) {
        long long v = strtoll(s, &end, 10);
        if (errno || *end || v < 0) goto bad;
        *first = *last = v;
        return DRIFT_OK;
    }
    if (colon != s) {
        long long v = strtoll(s, &end, 10);
        if (errno || end != colon || v < 0) goto bad;
        *first = v;
    }
    if (colon[1]) {
        long long v = strtoll(colon + 1, &end, 10);
        if (errno || *end || v < 0) goto bad;
        *last = v;
    }
    if (*first >= 0 && *last >= 0 && *last < *first) goto bad;
    return DRIFT_OK;
bad:
    return drift_err_set(err, DRIFT_E_USAGE, "--steps", "expected A:B, A:, :B or A (non-negative, A <= B), got '%s'", s);
}

/* Record of `site` whose index has step `step` (first such), or -1. Reads
 * the site's index once into a cache. */
typedef struct index_cache {
    long site;
    drift_trace_index *rows;
    int64_t n;
} index_cache;

static int record_of_step(drift_trace_reader *r, index_cache *ic, size_t n_ic, const char *name, int64_t step,
                          long *site_out, int64_t *rec, drift_err *err) {
    *rec = -1;
    long site = drift_trace_reader_find_site(r, name);
    *site_out = site;
    if (site < 0) return DRIFT_OK;
    index_cache *c = &ic[(size_t)site % n_ic];
    if (c->site != site || !c->rows) {
        free(c->rows);
        c->rows = NULL;
        c->site = site;
        drift_trace_site_info info;
        int rc = drift_trace_reader_site(r, (size_t)site, &info, err);
        if (rc) return rc;
        c->n = info.n_records;
        if (c->n == 0) return DRIFT_OK;
        c->rows = malloc((size_t)c->n * sizeof *c->rows);
        if (!c->rows) return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory reading the index");
        if ((rc = drift_trace_read_index(r, (size_t)site, 0, c->n, c->rows, err))) return rc;
    }
    for (int64_t i = 0; i < c->n; i++)
        if (c->rows[i].step == step && c->rows[i].stored) { *rec = i; break; }
    return DRIFT_OK;
}

/* A reader with its index caches. */
typedef struct src {
    drift_trace_reader *r;
    index_cache ic[64];
    float *buf;
    size_t cap;
} src;

static void src_close(src *s) {
    for (int i = 0; i < 64; i++) free(s->ic[i].rows);
    free(s->buf);
    drift_trace_reader_close(s->r);
    memset(s, 0, sizeof *s);
}

/* Values of site at step into s->buf; *n = 0 if the trace has none. */
static int src_read(src *s, const char *site, int64_t step, int64_t *n, drift_dtype *dt, drift_err *err) {
    *n = 0;
    long id;
    int64_t rec;
    int rc = record_of_step(s->r, s->ic, 64, site, step, &id, &rec, err);
    if (rc || rec < 0) return rc;
    drift_trace_site_info info;
    if ((rc = drift_trace_reader_site(s->r, (size_t)id, &info, err))) return rc;
    if ((size_t)info.numel > s->cap) {
        float *b = realloc(s->buf, (size_t)info.numel * sizeof *b);
        if (!b) return drift_err_set(err, DRIFT_E_NOMEM, site, "out of memory");
        s->buf = b;
        s->cap = (size_t)info.numel;
    }
    if ((rc = drift_trace_read_record_f32(s->r, (size_t)id, rec, s->buf, s->cap, err))) return rc;
    *n = info.numel;
    if (dt) *dt = info.dtype;
    return DRIFT_OK;
}

typedef struct run_ctx {
    src *ref;                    /* reference trace, or NULL (oracle) */
    drift_site_cache *oracle;    /* oracle values, or NULL */
    drift_sitecmp *cmp;
    drift_trace_writer *out;
    int64_t step, batch;
    int sites;
    float *f32;
    size_t cap;
    char *first_div;             /* first divergent site of this step (owned) */
} run_ctx;

static int on_site(const char *site, const drift_tensor *t, void *user, drift_err *err) {
    run_ctx *c = user;
    if (!c->sites && strcmp(site, DRIFT_SITE_NOISE_PRED) != 0) return DRIFT_OK;
    if ((size_t)t->numel > c->cap) {
        float *b = realloc(c->f32, (size_t)t->numel * sizeof *b);
        if (!b) return drift_err_set(err, DRIFT_E_NOMEM, site, "out of memory");
        c->f32 = b;
        c->cap = (size_t)t->numel;
    }
    int rc = t->be->download_f32(t->be, t, c->f32, err);
    if (rc) return rc;
    const float *r = NULL;
    int64_t rn = 0;
    if (c->oracle) {
        r = drift_site_cache_get(c->oracle, site, &rn, NULL);
    } else {
        if ((rc = src_read(c->ref, site, c->step, &rn, NULL, err))) return rc;
        r = rn ? c->ref->buf : NULL;
    }
    if (!r || rn != t->numel) return DRIFT_OK; /* the reference did not record this site */
    int was = c->cmp->step_diverged;
    drift_trace_metric row;
    if ((rc = drift_sitecmp_add(c->cmp, site, t->dtype, c->f32, r, t->numel, c->batch, c->step, &row, err))) return rc;
    if (!was && c->cmp->step_diverged && !c->first_div) c->first_div = strdup(site);
    if (c->oracle) {
        row.rmse_oracle = row.rmse;
        drift_sitecmp_entry *e = drift_sitecmp_find(c->cmp, site);
        if (e) {
            drift_site_metrics m;
            drift_sitecmp_finish(c->cmp, e, &m);
            e->rmse_oracle = m.rmse;
        }
    }
    if (c->out) return drift_trace_writer_add_metric(c->out, site, &row, err);
    return DRIFT_OK;
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

int drift_replay_trace(const drift_replay_opts *o, drift_replay_report *rep, drift_err *err) {
    memset(rep, 0, sizeof *rep);
    drift_sitecmp_init(&rep->cmp, 1.0);
    rep->oracle_rmse_replay = rep->oracle_rmse_trainer = rep->oracle_rmse_rollout = NAN;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc;
    src main_src, ref_src;
    memset(&main_src, 0, sizeof main_src);
    memset(&ref_src, 0, sizeof ref_src);
    drift_model *m = NULL;
    drift_forward *f = NULL, *fo = NULL;
    drift_backend *be = NULL, *ref_be = NULL;
    drift_site_cache *oracle = NULL;
    drift_hostset *in = NULL;
    drift_trace_writer *out = NULL;
    drift_exec_result res, ores;
    memset(&res, 0, sizeof res);
    memset(&ores, 0, sizeof ores);
    run_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    drift_logprob_acc lpo, lpn;
    drift_metrics_logprob_init(&lpo);
    drift_metrics_logprob_init(&lpn);
    float *x = NULL, *xn = NULL, *lp = NULL, *lrec = NULL;
    size_t xcap = 0;

    if ((rc = drift_trace_reader_open(&main_src.r, o->trace, DRIFT_TRACE_OPEN_NORMAL, err))) goto done;
    const drift_trace_meta *meta = drift_trace_reader_meta(main_src.r);
    rep->cmp.guidance_scale = meta->guidance_scale;
    if ((rc = drift_model_create(meta->family, &m, err))) {
        drift_err_prefix(err, "%s: root attribute 'family'", o->trace);
        goto done;
    }
    snprintf(rep->model, sizeof rep->model, "%s", m->spec);
    if ((rc = drift_model_load_trace(m, main_src.r, err))) goto done;

    /* The dtypes the boundary inputs were handed over in: the pre-cast sites'. */
    drift_dtype handed[DRIFT_INPUT_COUNT];
    static const char *const input_site[DRIFT_INPUT_COUNT] = {"input:latents:pre_cast", "input:cond:pre_cast",
                                                               "input:timestep:pre_cast"};
    for (int i = 0; i < DRIFT_INPUT_COUNT; i++) {
        long id = drift_trace_reader_find_site(main_src.r, input_site[i]);
        if (id < 0) {
            rc = drift_err_set(err, DRIFT_E_INPUT, o->trace, "site '%s' is missing: replay needs the boundary inputs as handed over",
                               input_site[i]);
            goto done;
        }
        drift_trace_site_info info;
        if ((rc = drift_trace_reader_site(main_src.r, (size_t)id, &info, err))) goto done;
        handed[i] = info.dtype;
    }
    if ((rc = drift_forward_prepare(m, o->plan, o->side, handed, &f, err))) goto done;
    if ((rc = drift_backend_create(o->backend ? o->backend : "cpu", &be, err))) goto done;

    switch (o->ref) {
    case DRIFT_REF_TRAINER:
        snprintf(rep->ref_desc, sizeof rep->ref_desc, "recorded sites of %s", o->trace);
        break;
    case DRIFT_REF_ROLLOUT:
    case DRIFT_REF_TRACE: {
        char path[4096];
        if (o->ref_path) snprintf(path, sizeof path, "%s", o->ref_path);
        else drift_synth_rollout_path(o->trace, path, sizeof path);
        if ((rc = drift_trace_reader_open(&ref_src.r, path, DRIFT_TRACE_OPEN_NORMAL, err))) {
            if (o->ref == DRIFT_REF_ROLLOUT && !o->ref_path)
                drift_err_prefix(err, "--ref rollout looks for the rollout trace beside %s", o->trace);
            goto done;
        }
        snprintf(rep->ref_desc, sizeof rep->ref_desc, "%s trace %s",
                 drift_trace_side_name(drift_trace_reader_meta(ref_src.r)->side), path);
        break;
    }
    case DRIFT_REF_ORACLE:
        snprintf(rep->ref_desc, sizeof rep->ref_desc, "fp64 oracle");
        if ((rc = drift_forward_prepare(m, NULL, DRIFT_SIDE_ORACLE, handed, &fo, err))) goto done;
        if ((rc = drift_backend_create("ref", &ref_be, err))) goto done;
        if ((rc = drift_site_cache_create(&oracle, err))) goto done;
        rep->has_oracle = 1;
        break;
    }
    ctx.ref = o->ref == DRIFT_REF_TRAINER ? &main_src : (o->ref == DRIFT_REF_ORACLE ? NULL : &ref_src);
    ctx.oracle = oracle;
    ctx.cmp = &rep->cmp;
    ctx.batch = m->cfg.batch;
    ctx.sites = o->sites;

    if (o->out_path) {
        char *pj = drift_plan_to_json(o->plan);
        drift_trace_meta om = {.side = DRIFT_TRACE_SIDE_REPLAY, .run_id = meta->run_id, .rank = meta->rank,
                               .world_size = meta->world_size, .family = m->spec,
                               .guidance_scale = meta->guidance_scale, .plan_json = pj ? pj : "{}"};
        rc = drift_trace_writer_create(&out, o->out_path, &om, err);
        free(pj);
        if (rc) goto done;
        if ((rc = drift_trace_writer_start(out, err))) goto done;
        ctx.out = out;
    }

    size_t n_all = 0;
    const drift_trace_step *st = drift_trace_reader_steps(main_src.r, &n_all);
    rep->steps = calloc(n_all ? n_all : 1, sizeof *rep->steps);
    rep->first_divergent = calloc(n_all ? n_all : 1, sizeof *rep->first_divergent);
    if (!rep->steps || !rep->first_divergent) { rc = drift_err_set(err, DRIFT_E_NOMEM, o->trace, "out of memory"); goto done; }
    int64_t n_sel = 0;
    for (size_t i = 0; i < n_all; i++)
        if ((o->step_first < 0 || st[i].step >= o->step_first) && (o->step_last < 0 || st[i].step <= o->step_last)) n_sel++;
    if (n_sel == 0) {
        rc = drift_err_set(err, DRIFT_E_USAGE, "--steps", "no committed step of %s is in the range (the trace has %zu)",
                           o->trace, n_all);
        goto done;
    }
    int64_t done_steps = 0;
    for (size_t i = 0; i < n_all; i++) {
        int64_t step = st[i].step;
        if ((o->step_first >= 0 && step < o->step_first) || (o->step_last >= 0 && step > o->step_last)) continue;
        /* Inputs as handed over. */
        drift_hostset_free(in);
        in = NULL;
        if ((rc = drift_hostset_create(&in, err))) goto done;
        static const char *const input_name[DRIFT_INPUT_COUNT] = {"latents", "cond", "timestep"};
        for (int k = 0; k < DRIFT_INPUT_COUNT; k++) {
            int64_t n;
            drift_dtype dt;
            if ((rc = src_read(&main_src, input_site[k], step, &n, &dt, err))) goto done;
            if (!n) {
                rc = drift_err_set(err, DRIFT_E_INPUT, o->trace, "step %lld has no stored record of '%s'",
                                   (long long)step, input_site[k]);
                goto done;
            }
            long id = drift_trace_reader_find_site(main_src.r, input_site[k]);
            drift_trace_site_info info;
            if ((rc = drift_trace_reader_site(main_src.r, (size_t)id, &info, err))) goto done;
            if ((rc = drift_hostset_add(in, input_name[k], dt, info.ndim, info.shape, main_src.buf, NULL, NULL, err)))
                goto done;
        }
        ctx.step = step;
        free(ctx.first_div);
        ctx.first_div = NULL;
        drift_sitecmp_begin_step(&rep->cmp);
        if (fo) {
            drift_site_cache_clear(oracle);
            drift_exec_result_free(&ores);
            if ((rc = drift_forward_run(fo, m, ref_be, in, oracle_site, oracle, &ores, err))) goto done;
        }
        drift_exec_result_free(&res);
        if ((rc = drift_forward_run(f, m, be, in, on_site, &ctx, &res, err))) goto done;
        rep->steps[done_steps] = step;
        rep->first_divergent[done_steps] = ctx.first_div;
        ctx.first_div = NULL;
        done_steps++;
        rep->n_steps = done_steps;

        /* Each recorded side's output against the oracle. */
        if (fo) {
            int64_t n;
            if ((rc = src_read(&main_src, DRIFT_SITE_NOISE_PRED, step, &n, NULL, err))) goto done;
            if (n == ores.numel) rep->oracle_rmse_trainer = rmse_of(main_src.buf, ores.f32, n);
            if ((rc = src_read(&main_src, DRIFT_SITE_ROLLOUT_OUTPUT, step, &n, NULL, err))) goto done;
            if (n == ores.numel) rep->oracle_rmse_rollout = rmse_of(main_src.buf, ores.f32, n);
            if (res.numel == ores.numel) rep->oracle_rmse_replay = rmse_of(res.f32, ores.f32, res.numel);
        }
        /* Log-prob of the replayed output on the recorded SDE sample. */
        int64_t np = 0, nx = 0;
        float sp[4];
        if ((rc = src_read(&main_src, DRIFT_SITE_SDE_PARAMS, step, &np, NULL, err))) goto done;
        if (np == 4) {
            memcpy(sp, main_src.buf, sizeof sp);
            const drift_host_tensor *lat = drift_hostset_find(in, "latents");
            if ((rc = src_read(&main_src, DRIFT_SITE_SDE_XNEXT, step, &nx, NULL, err))) goto done;
            if (nx == lat->numel && res.numel == lat->numel) {
                size_t B = (size_t)m->cfg.batch, per = (size_t)nx / B;
                if ((size_t)nx > xcap) {
                    float *a = realloc(x, (size_t)nx * sizeof *a), *b = a ? realloc(xn, (size_t)nx * sizeof *b) : NULL;
                    if (a) x = a;
                    if (!a || !b) { rc = drift_err_set(err, DRIFT_E_NOMEM, o->trace, "out of memory"); goto done; }
                    xn = b;
                    xcap = (size_t)nx;
                }
                memcpy(xn, main_src.buf, (size_t)nx * sizeof *xn);
                memcpy(x, lat->f32, (size_t)nx * sizeof *x);
                float *lp2 = realloc(lp, B * sizeof *lp2);
                if (!lp2) { rc = drift_err_set(err, DRIFT_E_NOMEM, o->trace, "out of memory"); goto done; }
                lp = lp2;
                float *l2 = realloc(lrec, B * sizeof *l2);
                if (!l2) { rc = drift_err_set(err, DRIFT_E_NOMEM, o->trace, "out of memory"); goto done; }
                lrec = l2;
                float sg[64], sgn[64];
                for (size_t b = 0; b < B && b < 64; b++) { sg[b] = sp[0]; sgn[b] = sp[1]; }
                if (B <= 64 && !drift_sde_log_prob_f32(x, res.f32, xn, B, per, sg, sgn, sp[2], sp[3], lp, NULL, err)) {
                    int64_t nl;
                    if ((rc = src_read(&main_src, DRIFT_SITE_LOGPROB_OLD, step, &nl, NULL, err))) goto done;
                    if (nl == (int64_t)B) { drift_metrics_accumulate_logprob_f32(lp, main_src.buf, B, &lpo); rep->has_logprob = 1; }
                    if ((rc = src_read(&main_src, DRIFT_SITE_LOGPROB_NEW, step, &nl, NULL, err))) goto done;
                    if (nl == (int64_t)B) drift_metrics_accumulate_logprob_f32(lp, main_src.buf, B, &lpn);
                    if (out) {
                        drift_logprob_acc one;
                        drift_metrics_logprob_init(&one);
                        if ((rc = src_read(&main_src, DRIFT_SITE_LOGPROB_OLD, step, &nl, NULL, err))) goto done;
                        if (nl == (int64_t)B) {
                            drift_metrics_accumulate_logprob_f32(lp, main_src.buf, B, &one);
                            drift_logprob_metrics lm;
                            drift_metrics_finish_logprob(&one, &lm);
                            drift_trace_step_metrics sm = {.step = step, .denoise_index = -1, .n_pairs = (int64_t)B,
                                                           .log_prob_mean_abs_diff = lm.log_prob_mean_abs_diff,
                                                           .ratio_abs_minus_1 = lm.ratio_abs_minus_1,
                                                           .approx_kl = lm.approx_kl};
                            if ((rc = drift_trace_writer_add_step_metrics(out, &sm, err))) goto done;
                        }
                    }
                }
            }
        }
        if (out && (rc = drift_trace_writer_commit_step(out, step, 0, err))) goto done;
        if (o->progress) o->progress("replay", (long)done_steps, (long)n_sel, o->progress_user);
    }
    drift_metrics_finish_logprob(&lpo, &rep->lp_vs_old);
    drift_metrics_finish_logprob(&lpn, &rep->lp_vs_new);
    if (out) {
        rc = drift_trace_writer_close(out, err);
        out = NULL;
    }
done:
    clock_gettime(CLOCK_MONOTONIC, &t1);
    rep->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    free(ctx.first_div);
    free(ctx.f32);
    free(x); free(xn); free(lp); free(lrec);
    drift_trace_writer_close(out, NULL);
    drift_exec_result_free(&res);
    drift_exec_result_free(&ores);
    drift_hostset_free(in);
    drift_site_cache_free(oracle);
    drift_forward_free(f);
    drift_forward_free(fo);
    drift_backend_free(be);
    drift_backend_free(ref_be);
    drift_model_free(m);
    src_close(&main_src);
    src_close(&ref_src);
    return rc;
}
