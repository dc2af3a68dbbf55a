/* drift invariance: one sample replayed alone and inside other batches
 * (invariance.h). */
#include "replay/drive/invariance.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/alloc.h"
#include "formats/dtype.h"
#include "formats/trace.h"
#include "replay/analysis/metrics.h"
#include "replay/analysis/report.h" /* DRIFT_SITE_NOISE_PRED */
#include "replay/capture/aten_model.h"
#include "replay/exec/forward.h"

static const char *const INPUT_SITE[DRIFT_INPUT_COUNT] = {"input:latents:pre_cast", "input:cond:pre_cast",
                                                           "input:timestep:pre_cast"};
static const char *const INPUT_NAME[DRIFT_INPUT_COUNT] = {"latents", "cond", "timestep"};

/* A row of a batch: a recorded sample, a seeded copy, or the sample's
 * unconditional twin (zero text embeddings). */
enum { ROW_SEEDED = -1, ROW_UNCOND = -2 };

void drift_invariance_opts_init(drift_invariance_opts *o) {
    memset(o, 0, sizeof *o);
    o->step = -1;
    o->side = DRIFT_SIDE_TRAINER;
    o->side_from_trace = 1;
    o->batches[0] = 1, o->batches[1] = 2, o->batches[2] = 4, o->batches[3] = 8;
    o->n_batches = 4;
    o->seed = 1;
}

void drift_invariance_report_free(drift_invariance_report *rep) {
    if (!rep) return;
    free(rep->cfg);
    rep->cfg = NULL;
    rep->n_cfg = 0;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t hash_f32(const float *v, int64_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the fp32 bit patterns, a word at a time */
    for (int64_t i = 0; i < n; i++) {
        h ^= drift_f32_bits(v[i]);
        h *= 1099511628211ull;
    }
    return h;
}

/* ---- the recorded step ------------------------------------------------------ */

typedef struct recorded {
    drift_dtype dt[DRIFT_INPUT_COUNT];
    int ndim[DRIFT_INPUT_COUNT];
    int64_t shape[DRIFT_INPUT_COUNT][DRIFT_MAX_DIMS];
    int64_t row[DRIFT_INPUT_COUNT]; /* elements per sample */
    float *v[DRIFT_INPUT_COUNT];    /* owned: the recorded batch */
    int batch;
} recorded;

static void recorded_free(recorded *r) {
    for (int i = 0; i < DRIFT_INPUT_COUNT; i++) free(r->v[i]);
    memset(r, 0, sizeof *r);
}

static int read_inputs(drift_trace_reader *rd, const char *path, int64_t step, recorded *out, drift_err *err) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < DRIFT_INPUT_COUNT; i++) {
        long id = drift_trace_reader_find_site(rd, INPUT_SITE[i]);
        if (id < 0)
            return drift_err_set(err, DRIFT_E_INPUT, path, "site '%s' is missing: invariance needs the boundary inputs",
                                 INPUT_SITE[i]);
        drift_trace_site_info info;
        int rc = drift_trace_reader_site(rd, (size_t)id, &info, err);
        if (rc) return rc;
        if (info.ndim < 1 || info.shape[0] < 1 || info.numel % info.shape[0])
            return drift_err_set(err, DRIFT_E_INPUT, path, "site '%s': shape has no batch dimension", INPUT_SITE[i]);
        if (i > 0 && info.shape[0] != out->batch)
            return drift_err_set(err, DRIFT_E_INPUT, path, "site '%s': batch %lld, the latents have %d", INPUT_SITE[i],
                                 (long long)info.shape[0], out->batch);
        out->batch = (int)info.shape[0];
        out->dt[i] = info.dtype;
        out->ndim[i] = info.ndim;
        memcpy(out->shape[i], info.shape, sizeof out->shape[i]);
        out->row[i] = info.numel / info.shape[0];
        drift_trace_index key;
        memset(&key, 0, sizeof key);
        int64_t n_rec = info.n_records, rec = -1;
        drift_trace_index *rows = drift_malloc((size_t)(n_rec ? n_rec : 1) * sizeof *rows);
        if (!rows) return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory reading the index");
        if (n_rec && (rc = drift_trace_read_index(rd, (size_t)id, 0, n_rec, rows, err))) { free(rows); return rc; }
        for (int64_t k = 0; k < n_rec && rec < 0; k++)
            if (rows[k].step == step && rows[k].stored) rec = k;
        free(rows);
        if (rec < 0)
            return drift_err_set(err, DRIFT_E_INPUT, path, "step %lld has no stored record of '%s'", (long long)step,
                                 INPUT_SITE[i]);
        out->v[i] = drift_malloc((size_t)info.numel * sizeof(float));
        if (!out->v[i]) return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
        if ((rc = drift_trace_read_record_f32(rd, (size_t)id, rec, out->v[i], (size_t)info.numel, err))) return rc;
    }
    return DRIFT_OK;
}

/* splitmix64 -> N(0, 1) by Box-Muller: the seeded pad rows. */
static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float gauss(uint64_t *s) {
    double u1 = ((double)(splitmix(s) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(splitmix(s) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* The inputs of a batch whose position p holds rows[p] (a recorded row, or
 * ROW_SEEDED k-th pad with seed, or ROW_UNCOND of `sample`). */
static int make_inputs(const recorded *rc_, int sample, const int *rows, const int *pad_k, int B, uint64_t seed,
                       int nudge, drift_dtype nudge_dt, drift_hostset **out, drift_err *err) {
    *out = NULL;
    drift_hostset *hs = NULL;
    int rc = drift_hostset_create(&hs, err);
    float *buf = NULL;
    for (int i = 0; i < DRIFT_INPUT_COUNT && !rc; i++) {
        int64_t rn = rc_->row[i];
        buf = drift_malloc((size_t)(rn * B) * sizeof *buf);
        if (!buf) { rc = drift_err_set(err, DRIFT_E_NOMEM, "invariance", "out of memory"); break; }
        for (int p = 0; p < B; p++) {
            float *dst = buf + (size_t)p * (size_t)rn;
            int src = rows[p] >= 0 ? rows[p] : sample;
            memcpy(dst, rc_->v[i] + (size_t)src * (size_t)rn, (size_t)rn * sizeof *dst);
            if (rows[p] == ROW_SEEDED && i == DRIFT_INPUT_LATENTS) {
                uint64_t s = seed * 0x100000001b3ull + (uint64_t)pad_k[p];
                for (int64_t k = 0; k < rn; k++) dst[k] = gauss(&s);
            }
            if (rows[p] == ROW_UNCOND && i == DRIFT_INPUT_COND) memset(dst, 0, (size_t)rn * sizeof *dst);
        }
        /* one latent of position 0 moved by one ULP of the forward dtype: the noise floor (as bisect) */
        if (nudge && i == DRIFT_INPUT_LATENTS) {
            buf[rn / 2] = drift_round_to(buf[rn / 2], rc_->dt[i]);
            drift_metrics_nudge_ulp_f32(buf + rn / 2, 1, nudge_dt, 1.0, 12345);
        }
        int64_t shape[DRIFT_MAX_DIMS];
        memcpy(shape, rc_->shape[i], sizeof shape);
        shape[0] = B;
        rc = drift_hostset_add(hs, INPUT_NAME[i], rc_->dt[i], rc_->ndim[i], shape, buf, NULL, NULL, err);
        free(buf);
        buf = NULL;
    }
    if (rc) { drift_hostset_free(hs); return rc; }
    *out = hs;
    return DRIFT_OK;
}

/* ---- one forward at batch B ------------------------------------------------- */

typedef struct batch_fwd {
    drift_model *m;              /* owned; params and buffers borrowed from the trace's model */
    drift_forward *f;            /* owned; every node tagged as a site */
    int *ids;                    /* owned: site value ids in execution order */
    int n_ids;
} batch_fwd;

static void batch_fwd_free(batch_fwd *b) {
    if (b->m) {
        b->m->params = NULL;
        for (int i = 0; i < 3; i++) b->m->buffers[i] = NULL;
    }
    drift_model_free(b->m);
    drift_forward_free(b->f);
    free(b->ids);
    memset(b, 0, sizeof *b);
}

static int batch_fwd_make(drift_model *base, int B, const drift_plan *plan, drift_side side,
                          const drift_dtype handed[DRIFT_INPUT_COUNT], batch_fwd *out, drift_err *err) {
    memset(out, 0, sizeof *out);
    drift_family_config cfg = base->cfg;
    cfg.batch = B;
    char spec[1024];
    drift_family_format(&cfg, spec, sizeof spec);
    int rc = drift_model_create(spec, &out->m, err);
    if (rc) return rc;
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

typedef struct ref_node {
    uint64_t hash;
    int64_t numel, dim0;
    int seen;
    char gemm[128];              /* LINEAR: drift_backend_last_gemm right after it ran */
} ref_node;

typedef struct run_state {
    const batch_fwd *bf, *ref_bf;
    int B, pos, storing;         /* storing: the reference run fills ref[] and sites */
    ref_node *ref;               /* by value id */
    drift_site_cache *sites;     /* the reference's recorded sites, full */
    int cursor;
    float *buf;
    size_t cap;
    drift_inv_config *c;
} run_state;

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
}

static int on_node(const char *site, const drift_tensor *t, void *user, drift_err *err) {
    run_state *s = user;
    const batch_fwd *bf = s->bf;
    /* sites arrive in execution order */
    int j = -1;
    for (int k = 0; k < bf->n_ids && j < 0; k++) {
        int i = (s->cursor + k) % bf->n_ids;
        const drift_value *v = drift_graph_value(bf->f->assigned, bf->ids[i]);
        if (v && v->site && strcmp(v->site, site) == 0) j = i;
    }
    if (j < 0) return drift_err_set(err, DRIFT_E_INTERNAL, site, "not in the forward's site list");
    s->cursor = j + 1;
    int id = bf->ids[j];
    if ((size_t)t->numel > s->cap) {
        float *b = drift_realloc(s->buf, (size_t)t->numel * sizeof *b);
        if (!b) return drift_err_set(err, DRIFT_E_NOMEM, site, "out of memory");
        s->buf = b;
        s->cap = (size_t)t->numel;
    }
    int rc = drift_backend_download_f32(t->be, t, s->buf, err);
    if (rc) return rc;
    ref_node *r = &s->ref[id];
    const drift_value *val = drift_graph_value(bf->f->assigned, id);
    char gemm[128] = "";
    if (val->kind == DRIFT_VAL_NODE && val->op.kind == DRIFT_OP_LINEAR) drift_backend_last_gemm(t->be, gemm, sizeof gemm);
    if (s->storing) {
        snprintf(r->gemm, sizeof r->gemm, "%s", gemm);
        r->hash = hash_f32(s->buf, t->numel);
        r->numel = t->numel;
        r->dim0 = t->ndim ? t->shape[0] : 1;
        r->seen = 1;
        if (site[0] != '@') return drift_site_cache_put_f32(s->sites, site, t->dtype, s->buf, t->numel, err);
        return DRIFT_OK;
    }
    if (!r->seen) return DRIFT_OK;
    /* the sample's block of dim 0, or the whole value when it has no batch dim */
    const float *mine = NULL;
    int64_t dim0 = t->ndim ? t->shape[0] : 1;
    if (s->B > 1 && t->numel == (int64_t)s->B * r->numel && dim0 == (int64_t)s->B * r->dim0)
        mine = s->buf + (size_t)s->pos * (size_t)r->numel;
    else if (t->numel == r->numel)
        mine = s->buf;
    if (!mine) return DRIFT_OK;
    drift_inv_config *c = s->c;
    c->nodes_compared++;
    if (hash_f32(mine, r->numel) == r->hash) return DRIFT_OK;
    c->nodes_diff++;
    if (c->op.node < 0) {
        fill_op(bf->f->assigned, id, &c->op);
        fill_op(s->ref_bf->f->assigned, id, &c->op_ref);
        snprintf(c->op.gemm, sizeof c->op.gemm, "%s", gemm);
        snprintf(c->op_ref.gemm, sizeof c->op_ref.gemm, "%s", r->gemm);
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

/* Runs bf on inputs; with st the nodes are observed (stored or compared).
 * The sample's output row goes to *row_out (owned by the caller, out_row
 * elements). */
static int run_one(const batch_fwd *bf, const drift_backend *be, const drift_hostset *in, run_state *st, int pos,
                   float **row_out, int64_t *out_row, drift_err *err) {
    drift_exec_result res;
    memset(&res, 0, sizeof res);
    int rc = drift_forward_run(bf->f, bf->m, be, in, st ? on_node : NULL, st, &res, err);
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

/* ---- the report -------------------------------------------------------------- */

static void shape_str(char *buf, size_t sz, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, sz, "[");
    for (int i = 0; i < ndim && n < sz; i++) n += (size_t)snprintf(buf + n, sz - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < sz) snprintf(buf + n, sz - n, "]");
}

static void summarise(drift_invariance_report *rep, const drift_invariance_opts *o) {
    char exact[256] = "", *p = exact;
    int first_bad = -1, n_exact = 0;
    for (int b = 0; b < o->n_batches; b++) {
        int B = o->batches[b], all = 1;
        for (int i = 0; i < rep->n_cfg; i++)
            if (rep->cfg[i].kind == DRIFT_INV_BATCH && rep->cfg[i].batch == B && !rep->cfg[i].bitwise) all = 0;
        if (all) {
            p += snprintf(p, sizeof exact - (size_t)(p - exact), "%s%d", n_exact ? ", " : "", B);
            n_exact++;
        }
    }
    for (int i = 0; i < rep->n_cfg && first_bad < 0; i++)
        if (!rep->cfg[i].bitwise) first_bad = i;
    rep->invariant = first_bad < 0;
    int cfg_run = 0;
    for (int i = 0; i < rep->n_cfg; i++) cfg_run |= rep->cfg[i].kind != DRIFT_INV_BATCH;
    if (first_bad < 0) {
        snprintf(rep->summary, sizeof rep->summary,
                 "invariant: sample %d is bitwise equal at every node at batch %s (positions 0 and last)%s", rep->sample,
                 exact, cfg_run ? " and with CFG joined" : "");
        return;
    }
    const drift_inv_config *c = &rep->cfg[first_bad];
    char a[96], r[96];
    shape_str(a, sizeof a, c->op.in_ndim[0], c->op.in_shape[0]);
    shape_str(r, sizeof r, c->op_ref.in_ndim[0], c->op_ref.in_shape[0]);
    const char *what = c->kind == DRIFT_INV_BATCH ? "batch size" : "CFG batching (joined vs split)";
    char where[160];
    if (c->kind == DRIFT_INV_BATCH) snprintf(where, sizeof where, "at batch %d", c->batch);
    else snprintf(where, sizeof where, "in the %s branch run joined", c->kind == DRIFT_INV_CFG_COND ? "conditional" : "unconditional");
    char algo[400] = "";
    if (c->op.gemm[0] && c->op_ref.gemm[0]) {
        int64_t m1 = 1, m0 = 1; /* M: the rows of the GEMM, every dim of x but the last */
        for (int d = 0; d + 1 < c->op.in_ndim[0]; d++) m1 *= c->op.in_shape[0][d];
        for (int d = 0; d + 1 < c->op_ref.in_ndim[0]; d++) m0 *= c->op_ref.in_shape[0][d];
        if (strcmp(c->op.gemm, c->op_ref.gemm) != 0)
            snprintf(algo, sizeof algo, "; the GEMM differs between M=%lld (%.120s) and M=%lld (%.120s)", (long long)m0,
                     c->op_ref.gemm, (long long)m1, c->op.gemm);
        else
            snprintf(algo, sizeof algo, "; the same GEMM algorithm at M=%lld and M=%lld (%.120s)", (long long)m0,
                     (long long)m1, c->op.gemm);
    }
    snprintf(rep->summary, sizeof rep->summary,
             "output changes with %s: first at %.200s (%s, input %s %s vs %s alone)%s%s%.200s%s; exact at batch %.200s",
             what, c->op.label[0] ? c->op.label : "an unnamed node", c->op.kind, a, where, r, algo,
             c->first_site[0] ? "; first recorded site " : "", c->first_site, c->out_n_diff ? "" : "; the output itself is bitwise equal",
             n_exact ? exact : "none but 1");
}

/* ---- the check ----------------------------------------------------------------- */

static int pick_step(drift_trace_reader *rd, const char *path, int64_t want, int64_t *step, drift_err *err) {
    size_t n = 0;
    const drift_trace_step *st = drift_trace_reader_steps(rd, &n);
    if (n == 0) return drift_err_set(err, DRIFT_E_INPUT, path, "the trace has no committed step");
    if (want < 0) { *step = st[0].step; return DRIFT_OK; }
    for (size_t i = 0; i < n; i++)
        if (st[i].step == want) { *step = want; return DRIFT_OK; }
    return drift_err_set(err, DRIFT_E_USAGE, "--step", "step %lld is not a committed step of %s (first %lld, last %lld)",
                         (long long)want, path, (long long)st[0].step, (long long)st[n - 1].step);
}

static int read_composition(drift_trace_reader *rd, int64_t step, drift_invariance_report *rep, drift_err *err) {
    drift_trace_note *notes = NULL;
    size_t n = 0;
    int rc = drift_trace_read_notes(rd, step - 1, &notes, &n, err);
    if (rc) return rc;
    for (size_t i = 0; i < n && !rep->has_composition; i++) {
        if (notes[i].step != step || !drift_batch_note_is(notes[i].text)) continue;
        drift_err e;
        drift_err_clear(&e);
        if (drift_batch_note_parse(notes[i].text, &rep->composition, &e) == DRIFT_OK) rep->has_composition = 1;
        else {
            rc = drift_err_set(err, DRIFT_E_INPUT, drift_trace_reader_path(rd), "/notes of step %lld: %s",
                               (long long)step, e.msg);
            break;
        }
    }
    free(notes);
    return rc;
}

static int check_opts(const drift_invariance_opts *o, drift_err *err) {
    if (!o->trace) return drift_err_set(err, DRIFT_E_USAGE, "invariance", "no trace");
    if (o->n_batches < 1 || o->n_batches > DRIFT_INV_MAX_BATCHES)
        return drift_err_set(err, DRIFT_E_USAGE, "--batch", "%d batch sizes, expected 1..%d", o->n_batches,
                             DRIFT_INV_MAX_BATCHES);
    for (int i = 0; i < o->n_batches; i++)
        if (o->batches[i] < 1 || o->batches[i] > DRIFT_INV_MAX_BATCH)
            return drift_err_set(err, DRIFT_E_USAGE, "--batch", "batch size %d, expected 1..%d", o->batches[i],
                                 DRIFT_INV_MAX_BATCH);
    if (o->sample < 0) return drift_err_set(err, DRIFT_E_USAGE, "--sample", "%d, expected >= 0", o->sample);
    if (o->side != DRIFT_SIDE_TRAINER && o->side != DRIFT_SIDE_ROLLOUT)
        return drift_err_set(err, DRIFT_E_USAGE, "--side", "expected trainer or rollout");
    return DRIFT_OK;
}

/* Fills c's rows for kind/B/pos; pad rows numbered for their seeds. */
static void layout(const drift_inv_config *c, int sample, int rec_batch, int *rows, int *pad_k) {
    int k = 0;
    for (int p = 0; p < c->batch; p++) {
        pad_k[p] = 0;
        if (c->kind != DRIFT_INV_BATCH) {
            rows[p] = (p == 0) ? sample : ROW_UNCOND;
            continue;
        }
        if (p == c->position) { rows[p] = sample; continue; }
        if (rec_batch > 1) {
            int j = k % (rec_batch - 1); /* the other recorded samples, cycled */
            rows[p] = j >= sample ? j + 1 : j;
        } else {
            rows[p] = ROW_SEEDED;
        }
        pad_k[p] = k++;
    }
}

int drift_invariance_run(const drift_invariance_opts *o, const drift_backend *be, drift_invariance_report *rep,
                         drift_err *err) {
    memset(rep, 0, sizeof *rep);
    int rc = check_opts(o, err);
    if (rc) return rc;
    drift_trace_reader *rd = NULL;
    drift_model *m = NULL;
    drift_plan plan;
    drift_plan_init(&plan);
    recorded rec;
    memset(&rec, 0, sizeof rec);
    batch_fwd ref = {0}, ref_u = {0}, cur = {0};
    ref_node *refn = NULL, *refn_u = NULL;
    drift_site_cache *sites = NULL, *sites_u = NULL;
    float *ref_out = NULL, *ref_out_u = NULL, *floor_out = NULL, **outs = NULL;
    int64_t out_row = 0, n_tmp = 0;
    run_state st;
    memset(&st, 0, sizeof st);
    drift_hostset *in = NULL;
    int rows[DRIFT_INV_MAX_BATCH], pad_k[DRIFT_INV_MAX_BATCH];

    if ((rc = drift_trace_reader_open(&rd, o->trace, DRIFT_TRACE_OPEN_NORMAL, err))) goto done;
    const drift_trace_meta *meta = drift_trace_reader_meta(rd);
    if ((rc = drift_capture_model_for_trace(rd, meta->family, &m, err))) {
        drift_err_prefix(err, "%s: root attribute 'family'", o->trace);
        goto done;
    }
    if (m->captured) {
        rc = drift_err_set(err, DRIFT_E_UNSUPPORTED, o->trace,
                           "a captured graph is exported for one batch size; invariance needs a family model "
                           "(root attribute 'family' tiny-dit or wan2.2:...)");
        goto done;
    }
    if ((rc = drift_model_load_trace(m, rd, err))) goto done;
    const drift_plan *pl = o->plan;
    if (!pl) {
        if (!meta->plan_json[0]) {
            rc = drift_err_set(err, DRIFT_E_INPUT, o->trace, "root attribute 'plan' is empty: give --plan");
            goto done;
        }
        if ((rc = drift_plan_parse_json(&plan, meta->plan_json, strlen(meta->plan_json), o->trace, err))) goto done;
        pl = &plan;
    }
    drift_side side = o->side;
    if (o->side_from_trace) side = meta->side == DRIFT_TRACE_SIDE_ROLLOUT ? DRIFT_SIDE_ROLLOUT : DRIFT_SIDE_TRAINER;
    snprintf(rep->side, sizeof rep->side, "%s", drift_assign_side_name(side));
    snprintf(rep->backend, sizeof rep->backend, "%s", drift_backend_name(be));
    if ((rc = pick_step(rd, o->trace, o->step, &rep->step, err))) goto done;
    if ((rc = read_inputs(rd, o->trace, rep->step, &rec, err))) goto done;
    if ((rc = read_composition(rd, rep->step, rep, err))) goto done;
    rep->recorded_batch = rec.batch;
    rep->sample = o->sample;
    if (o->sample >= rec.batch) {
        rc = drift_err_set(err, DRIFT_E_USAGE, "--sample", "sample %d, step %lld of %s recorded %d", o->sample,
                           (long long)rep->step, o->trace, rec.batch);
        goto done;
    }
    drift_trace_reader_close(rd);
    rd = NULL;

    /* the reference: the sample alone; the buffers built once in m, shared by every batch */
    if ((rc = batch_fwd_make(m, 1, pl, side, rec.dt, &ref, err))) goto done;
    {
        const drift_hostset *bufs;
        if ((rc = drift_model_buffers(m, ref.f->rope, &bufs, err))) goto done;
        for (int i = 0; i < 3; i++) ref.m->buffers[i] = m->buffers[i];
    }
    snprintf(rep->model, sizeof rep->model, "%s", ref.m->spec);
    int n_vals = drift_graph_count(ref.f->assigned);
    rep->nodes = ref.n_ids;
    refn = drift_calloc((size_t)n_vals, sizeof *refn);
    if (!refn) { rc = drift_err_set(err, DRIFT_E_NOMEM, "invariance", "out of memory"); goto done; }
    if ((rc = drift_site_cache_create(&sites, err))) goto done;

    rows[0] = o->sample;
    pad_k[0] = 0;
    if ((rc = make_inputs(&rec, o->sample, rows, pad_k, 1, o->seed, 0, DRIFT_F32, &in, err))) goto done;
    st.bf = st.ref_bf = &ref;
    st.B = 1;
    st.storing = 1;
    st.ref = refn;
    st.sites = sites;
    double t0 = now_s();
    if ((rc = run_one(&ref, be, in, &st, 0, &ref_out, &out_row, err))) goto done;
    rep->ref_seconds = now_s() - t0;
    drift_hostset_free(in);
    in = NULL;

    /* the noise floor: the same sample with one latent one ULP up */
    if ((rc = make_inputs(&rec, o->sample, rows, pad_k, 1, o->seed, 1, drift_assign_forward_dtype(pl, side), &in,
                          err)))
        goto done;
    if ((rc = run_one(&ref, be, in, NULL, 0, &floor_out, &n_tmp, err))) goto done;
    drift_hostset_free(in);
    in = NULL;
    {
        drift_metric_acc acc;
        drift_metric_acc_init(&acc);
        drift_metric_acc_add_f32(&acc, floor_out, ref_out, (size_t)out_row, NULL, NULL);
        rep->floor_mean_abs = acc.numel ? acc.sum_abs_diff / (double)acc.numel : 0;
        rep->floor_max_abs = acc.max_abs_diff;
    }

    /* the configurations */
    int max_cfg = 2 * o->n_batches + 2;
    rep->cfg = drift_calloc((size_t)max_cfg, sizeof *rep->cfg);
    outs = drift_calloc((size_t)max_cfg, sizeof *outs);
    if (!rep->cfg || !outs) { rc = drift_err_set(err, DRIFT_E_NOMEM, "invariance", "out of memory"); goto done; }
    for (int b = 0; b < o->n_batches; b++) {
        int B = o->batches[b];
        if (B == 1) continue;
        for (int pi = 0; pi < 2; pi++) {
            drift_inv_config *c = &rep->cfg[rep->n_cfg++];
            c->kind = DRIFT_INV_BATCH;
            c->batch = B;
            c->position = pi ? B - 1 : 0;
            snprintf(c->pad, sizeof c->pad, "%s", rec.batch > 1 ? "recorded" : "seeded");
            snprintf(c->name, sizeof c->name, "batch %d, position %d", B, c->position);
        }
    }
    if (o->cfg_joined)
        for (int k = 0; k < 2; k++) {
            drift_inv_config *c = &rep->cfg[rep->n_cfg++];
            c->kind = k ? DRIFT_INV_CFG_UNCOND : DRIFT_INV_CFG_COND;
            c->batch = 2;
            c->position = k;
            snprintf(c->pad, sizeof c->pad, "%s", k ? "cond" : "uncond");
            snprintf(c->name, sizeof c->name, "cfg joined, %s branch", k ? "unconditional" : "conditional");
        }

    /* the unconditional branch alone: the reference of the joined pair's row 1 */
    if (o->cfg_joined) {
        if ((rc = batch_fwd_make(m, 1, pl, side, rec.dt, &ref_u, err))) goto done;
        refn_u = drift_calloc((size_t)n_vals, sizeof *refn_u);
        if (!refn_u) { rc = drift_err_set(err, DRIFT_E_NOMEM, "invariance", "out of memory"); goto done; }
        if ((rc = drift_site_cache_create(&sites_u, err))) goto done;
        rows[0] = ROW_UNCOND;
        if ((rc = make_inputs(&rec, o->sample, rows, pad_k, 1, o->seed, 0, DRIFT_F32, &in, err))) goto done;
        run_state su = st;
        su.bf = su.ref_bf = &ref_u;
        su.ref = refn_u;
        su.sites = sites_u;
        su.cursor = 0;
        su.storing = 1;
        rc = run_one(&ref_u, be, in, &su, 0, &ref_out_u, &n_tmp, err);
        st.buf = su.buf, st.cap = su.cap;
        drift_hostset_free(in);
        in = NULL;
        if (rc) goto done;
    }

    int have_B = -1;
    for (int i = 0; i < rep->n_cfg; i++) {
        drift_inv_config *c = &rep->cfg[i];
        c->op.node = c->op_ref.node = -1;
        c->same_as = -1;
        if (have_B != c->batch) {
            batch_fwd_free(&cur);
            if ((rc = batch_fwd_make(m, c->batch, pl, side, rec.dt, &cur, err))) goto done;
            if (drift_graph_count(cur.f->assigned) != n_vals) {
                rc = drift_err_set(err, DRIFT_E_INTERNAL, "invariance", "the forward at batch %d has %d values, at batch 1 %d",
                                   c->batch, drift_graph_count(cur.f->assigned), n_vals);
                goto done;
            }
            have_B = c->batch;
        }
        layout(c, o->sample, rec.batch, rows, pad_k);
        if ((rc = make_inputs(&rec, o->sample, rows, pad_k, c->batch, o->seed, 0, DRIFT_F32, &in, err))) goto done;
        int uncond = c->kind == DRIFT_INV_CFG_UNCOND;
        st.bf = &cur;
        st.ref_bf = uncond ? &ref_u : &ref;
        st.ref = uncond ? refn_u : refn;
        st.sites = uncond ? sites_u : sites;
        st.B = c->batch;
        st.pos = c->position;
        st.storing = 0;
        st.cursor = 0;
        st.c = c;
        t0 = now_s();
        rc = run_one(&cur, be, in, &st, c->position, &outs[i], &n_tmp, err);
        c->seconds = now_s() - t0;
        drift_hostset_free(in);
        in = NULL;
        if (rc) goto done;
        c->bitwise = c->nodes_diff == 0;
        drift_metric_acc acc;
        drift_metric_acc_init(&acc);
        drift_metric_acc_add_f32(&acc, outs[i], uncond ? ref_out_u : ref_out, (size_t)out_row, NULL, NULL);
        c->out_n_diff = acc.n_diff;
        c->out_numel = out_row;
        c->out_mean_abs = acc.numel ? acc.sum_abs_diff / (double)acc.numel : 0;
        c->out_max_abs = acc.max_abs_diff;
        c->out_floor_units = drift_metrics_floor_ratio(c->out_mean_abs, rep->floor_mean_abs);
        for (int j = 0; j < i && c->same_as < 0; j++)
            if ((rep->cfg[j].kind == DRIFT_INV_CFG_UNCOND) == uncond &&
                memcmp(outs[j], outs[i], (size_t)out_row * sizeof(float)) == 0)
                c->same_as = j;
    }
    summarise(rep, o);

done:
    if (outs)
        for (int i = 0; i < 2 * o->n_batches + 2; i++) free(outs[i]);
    free(outs);
    free(ref_out);
    free(ref_out_u);
    free(floor_out);
    free(st.buf);
    free(refn);
    free(refn_u);
    drift_site_cache_free(sites);
    drift_site_cache_free(sites_u);
    drift_hostset_free(in);
    batch_fwd_free(&cur);
    batch_fwd_free(&ref);
    batch_fwd_free(&ref_u);
    recorded_free(&rec);
    drift_plan_free(&plan);
    drift_model_free(m);
    drift_trace_reader_close(rd);
    return rc;
}
