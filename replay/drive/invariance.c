/* drift invariance: one sample replayed alone and inside other batches
 * (invariance.h; the pieces in invariance_internal.h). */
#include "replay/drive/invariance_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/alloc.h"
#include "formats/dtype.h"
#include "formats/trace.h"
#include "replay/analysis/metrics.h"
#include "replay/capture/aten_model.h"
#include "replay/exec/forward.h"

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
    else
        snprintf(where, sizeof where, "in the %s branch run joined",
                 c->kind == DRIFT_INV_CFG_COND ? "conditional" : "unconditional");
    char algo[400] = "";
    if (c->op.kernel[0] && c->op_ref.kernel[0] && !strcmp(c->op.kind, "attention")) {
        /* flash's split of the keys follows batch x heads (another batch, another summation order) */
        if (strcmp(c->op.kernel, c->op_ref.kernel) != 0)
            snprintf(algo, sizeof algo, "; the attention kernel differs: alone %.150s, here %.150s", c->op_ref.kernel,
                     c->op.kernel);
        else
            snprintf(algo, sizeof algo, "; the same attention kernel alone and here (%.150s)", c->op.kernel);
    } else if (c->op.kernel[0] && c->op_ref.kernel[0]) {
        int64_t m1 = 1, m0 = 1; /* M: the rows of the GEMM, every dim of x but the last */
        for (int d = 0; d + 1 < c->op.in_ndim[0]; d++) m1 *= c->op.in_shape[0][d];
        for (int d = 0; d + 1 < c->op_ref.in_ndim[0]; d++) m0 *= c->op_ref.in_shape[0][d];
        if (strcmp(c->op.kernel, c->op_ref.kernel) != 0)
            snprintf(algo, sizeof algo, "; the GEMM differs between M=%lld (%.120s) and M=%lld (%.120s)", (long long)m0,
                     c->op_ref.kernel, (long long)m1, c->op.kernel);
        else
            snprintf(algo, sizeof algo, "; the same GEMM algorithm at M=%lld and M=%lld (%.120s)", (long long)m0,
                     (long long)m1, c->op.kernel);
    }
    if (c->op.input_from[0] && c->op_ref.input_from[0] && strcmp(c->op.input_from, c->op_ref.input_from)) {
        const size_t n = strlen(algo); /* the node is where another program's values are first compared */
        snprintf(algo + n, sizeof algo - n, "; its input comes from another op in each program: %s here, %s alone",
                 c->op.input_from, c->op_ref.input_from);
    }
    /* one verdict: the output changes in some configuration, or only values
     * inside the forward do (the sample still depends on its batch: exit 1) */
    int out_changes = 0;
    for (int i = 0; i < rep->n_cfg; i++) out_changes |= rep->cfg[i].out_n_diff != 0;
    snprintf(rep->summary, sizeof rep->summary,
             "%s with %s%s: first at %.200s (%s, input %s %s vs %s alone)%s%s%.200s; exact at batch %.200s",
             out_changes ? "output changes" : "values inside the forward change", what,
             out_changes ? "" : ", the output does not",
             c->op.label[0] ? c->op.label : "an unnamed node", c->op.kind, a, where, r, algo,
             c->first_site[0] ? "; first recorded site " : "", c->first_site, n_exact ? exact : "none but 1");
}

/* ---- the check ----------------------------------------------------------------- */

/* A forward of a captured graph re-batched to B failed while it ran (the program lowered): an
 * index the trace recorded (an input, a table) may address rows of the recorded batch only. */
static void run_failed(drift_err *err, const drift_model *m, int B, int recorded) {
    if (!m->captured || B == recorded) return;
    drift_err_prefix(err, "the captured graph re-batched from %d to %d failed as it ran (an index the graph takes from "
                          "its inputs may address the rows of the recorded batch only)", recorded, B);
}

/* A forward of a captured graph specialised to its data (dispatch mode) failed at a nonzero whose
 * count the data of this batch changes (a MoE router's token dispatch: the other rows route their
 * tokens too): the count is taken for the next lowerings (drift_capture_model_set_count) and
 * DRIFT_OK returned with err cleared, to lower and run again; else err's code. At most
 * RECOUNT_MAX of them per run. */
#define RECOUNT_MAX 4096
static int recount(drift_model *m, int *tries, drift_err *err) {
    char node[DRIFT_MAX_FQN];
    int64_t n = 0;
    if (!m->captured || !drift_capture_nonzero_failure(err, node, sizeof node, &n) || ++*tries > RECOUNT_MAX)
        return err->code ? err->code : DRIFT_E_INTERNAL;
    drift_err e;
    drift_err_clear(&e);
    if (drift_capture_model_set_count(m, node, n, &e)) {
        *err = e;
        return e.code;
    }
    drift_err_clear(err);
    return DRIFT_OK;
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

int drift_invariance_run(const drift_invariance_opts *o, const drift_backend *be, drift_invariance_report *rep,
                         drift_err *err) {
    memset(rep, 0, sizeof *rep);
    int rc = check_opts(o, err);
    if (rc) return rc;
    drift_trace_reader *rd = NULL;
    drift_model *m = NULL;
    drift_plan plan;
    drift_plan_init(&plan);
    drift_inv_recorded rec;
    memset(&rec, 0, sizeof rec);
    drift_inv_fwd ref = {0}, ref_u = {0}, cur = {0};
    drift_inv_ref *refn = NULL, *refn_u = NULL;
    drift_site_cache *sites = NULL, *sites_u = NULL;
    float *ref_out = NULL, *ref_out_u = NULL, *floor_out = NULL, **outs = NULL;
    int64_t out_row = 0, n_tmp = 0;
    drift_inv_run st;
    memset(&st, 0, sizeof st);
    drift_hostset *in = NULL;
    int rows[DRIFT_INV_MAX_BATCH], pad_k[DRIFT_INV_MAX_BATCH];

    if ((rc = drift_trace_reader_open(&rd, o->trace, DRIFT_TRACE_OPEN_NORMAL, err))) goto done;
    const drift_trace_meta *meta = drift_trace_reader_meta(rd);
    if ((rc = drift_capture_model_for_trace(rd, meta->family, &m, err))) {
        if (!drift_capture_is_spec(meta->family)) drift_err_prefix(err, "%s: root attribute 'family'", o->trace);
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
    const char *kern = drift_backend_kernels(be);
    snprintf(rep->kernels, sizeof rep->kernels, "%s", kern ? kern : "");
    if ((rc = drift_inv_pick_step(rd, o->trace, o->step, &rep->step, err))) goto done;
    if ((rc = drift_inv_read_inputs(rd, o->trace, rep->step, m, o->batch_input, &rec, err))) goto done;
    /* the recorded batch the graph is re-batched from: the latents' dim 0, else the stand-in's */
    if (m->captured && !drift_capture_model_takes_input(m, DRIFT_INPUT_LATENTS)) m->cfg.batch = rec.batch;
    if ((rc = drift_inv_read_composition(rd, rep->step, rep, err))) goto done;
    rep->recorded_batch = rec.batch;
    snprintf(rep->batch_input, sizeof rep->batch_input, "%.500s",
             strncmp(rec.name[DRIFT_INPUT_LATENTS], "input:", 6) ? rec.name[DRIFT_INPUT_LATENTS] : rec.name[DRIFT_INPUT_LATENTS] + 6);
    rep->sample = o->sample;
    if (o->sample >= rec.batch) {
        rc = drift_err_set(err, DRIFT_E_USAGE, "--sample", "sample %d, step %lld of %s recorded %d", o->sample,
                           (long long)rep->step, o->trace, rec.batch);
        goto done;
    }
    drift_trace_reader_close(rd);
    rd = NULL;

    /* the reference: the sample alone; the buffers built once in m, shared by every batch */
    int n_vals = 0, recounts = 0;
    double t0 = now_s();
    for (;;) {
        if ((rc = drift_inv_fwd_make(m, 1, pl, side, rec.dt, &ref, err))) goto done;
        if ((rc = drift_inv_keep_fixed_inputs(&rec, ref.m, o->trace, err))) goto done;
        {
            const drift_hostset *bufs;
            if ((rc = drift_model_buffers(m, ref.f->rope, &bufs, err))) goto done;
            for (int i = 0; i < 3; i++) ref.m->buffers[i] = m->buffers[i];
        }
        snprintf(rep->model, sizeof rep->model, "%s", ref.m->spec);
        n_vals = drift_graph_count(ref.f->assigned);
        rep->nodes = ref.n_ids;
        refn = drift_calloc((size_t)n_vals, sizeof *refn);
        if (!refn) { rc = drift_err_set(err, DRIFT_E_NOMEM, "invariance", "out of memory"); goto done; }
        if ((rc = drift_site_cache_create(&sites, err))) goto done;

        rows[0] = o->sample;
        pad_k[0] = 0;
        if ((rc = drift_inv_make_inputs(&rec, o->sample, rows, pad_k, 1, o->seed, 0, DRIFT_F32, &in, err))) goto done;
        st.bf = st.ref_bf = &ref;
        st.B = 1;
        st.storing = 1;
        st.ref = refn;
        st.sites = sites;
        st.cursor = 0;
        if (o->progress) o->progress("the reference (batch 1)", 0, 0, o->progress_user);
        t0 = now_s();
        if (!(rc = drift_inv_run_one(&ref, be, in, &st, 0, &ref_out, &out_row, err))) break;
        if (recount(m, &recounts, err)) { /* not a count the data of this batch changed */
            run_failed(err, m, 1, rec.batch);
            goto done;
        }
        drift_hostset_free(in); /* lowered again with the count this sample's data gives */
        in = NULL;
        free(refn);
        refn = NULL;
        drift_site_cache_free(sites);
        sites = NULL;
        drift_inv_fwd_free(&ref);
    }
    rep->ref_seconds = now_s() - t0;
    drift_hostset_free(in);
    in = NULL;

    /* the noise floor: the same sample with one latent one ULP up */
    if ((rc = drift_inv_make_inputs(&rec, o->sample, rows, pad_k, 1, o->seed, 1, drift_assign_forward_dtype(pl, side), &in,
                          err)))
        goto done;
    if ((rc = drift_inv_run_one(&ref, be, in, NULL, 0, &floor_out, &n_tmp, err))) {
        /* the nudge moved a router's count: that forward lowered with it (the reference keeps its own) */
        while (m->captured && !recount(m, &recounts, err)) {
            drift_inv_fwd fl = {0};
            if ((rc = drift_inv_fwd_make(m, 1, pl, side, rec.dt, &fl, err))) goto done;
            for (int i = 0; i < 3; i++) fl.m->buffers[i] = m->buffers[i];
            rc = drift_inv_run_one(&fl, be, in, NULL, 0, &floor_out, &n_tmp, err);
            drift_inv_fwd_free(&fl);
            if (!rc) break;
        }
        if (rc) goto done;
    }
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
        if ((rc = drift_inv_fwd_make(m, 1, pl, side, rec.dt, &ref_u, err))) goto done;
        refn_u = drift_calloc((size_t)n_vals, sizeof *refn_u);
        if (!refn_u) { rc = drift_err_set(err, DRIFT_E_NOMEM, "invariance", "out of memory"); goto done; }
        if ((rc = drift_site_cache_create(&sites_u, err))) goto done;
        rows[0] = DRIFT_INV_ROW_UNCOND;
        if ((rc = drift_inv_make_inputs(&rec, o->sample, rows, pad_k, 1, o->seed, 0, DRIFT_F32, &in, err))) goto done;
        drift_inv_run su = st;
        su.bf = su.ref_bf = &ref_u;
        su.ref = refn_u;
        su.sites = sites_u;
        su.cursor = 0;
        su.storing = 1;
        rc = drift_inv_run_one(&ref_u, be, in, &su, 0, &ref_out_u, &n_tmp, err);
        while (rc && !recount(m, &recounts, err)) { /* the unconditional branch routes other tokens */
            drift_inv_fwd_free(&ref_u);
            if ((rc = drift_inv_fwd_make(m, 1, pl, side, rec.dt, &ref_u, err))) break;
            for (int i = 0; i < 3; i++) ref_u.m->buffers[i] = m->buffers[i];
            free(refn_u);
            refn_u = drift_calloc((size_t)drift_graph_count(ref_u.f->assigned), sizeof *refn_u);
            drift_site_cache_free(sites_u);
            sites_u = NULL;
            if (!refn_u) { rc = drift_err_set(err, DRIFT_E_NOMEM, "invariance", "out of memory"); break; }
            if ((rc = drift_site_cache_create(&sites_u, err))) break;
            su.ref = refn_u;
            su.sites = sites_u;
            su.cursor = 0;
            rc = drift_inv_run_one(&ref_u, be, in, &su, 0, &ref_out_u, &n_tmp, err);
        }
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
            drift_inv_fwd_free(&cur);
            if ((rc = drift_inv_fwd_make(m, c->batch, pl, side, rec.dt, &cur, err))) goto done;
            if (!m->captured && drift_graph_count(cur.f->assigned) != n_vals) {
                rc = drift_err_set(err, DRIFT_E_INTERNAL, "invariance", "the forward at batch %d has %d values, at batch 1 %d",
                                   c->batch, drift_graph_count(cur.f->assigned), n_vals);
                goto done;
            }
            have_B = c->batch;
        }
        /* per configuration: the sample's iteration of a loop over the samples is its position's */
        if ((rc = drift_inv_fwd_match(&cur, &ref, c->position, err))) goto done;
        if (o->progress) o->progress("configurations", i, rep->n_cfg, o->progress_user);
        drift_inv_layout(c, o->sample, rec.batch, rows, pad_k);
        if ((rc = drift_inv_make_inputs(&rec, o->sample, rows, pad_k, c->batch, o->seed, 0, DRIFT_F32, &in, err))) goto done;
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
        const drift_inv_config c0 = *c;
        rc = drift_inv_run_one(&cur, be, in, &st, c->position, &outs[i], &n_tmp, err);
        while (rc && !recount(m, &recounts, err)) { /* the batch's other rows route their tokens too */
            *c = c0;
            drift_inv_fwd_free(&cur);
            have_B = -1;
            if ((rc = drift_inv_fwd_make(m, c->batch, pl, side, rec.dt, &cur, err))) break;
            have_B = c->batch;
            if ((rc = drift_inv_fwd_match(&cur, &ref, c->position, err))) break;
            st.bf = &cur;
            st.cursor = 0;
            rc = drift_inv_run_one(&cur, be, in, &st, c->position, &outs[i], &n_tmp, err);
        }
        c->seconds = now_s() - t0;
        drift_hostset_free(in);
        in = NULL;
        if (rc) {
            run_failed(err, m, c->batch, rec.batch);
            goto done;
        }
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
    if (o->progress && rep->n_cfg) o->progress("configurations", rep->n_cfg, rep->n_cfg, o->progress_user);
    summarise(rep, o);

done:
    if (rc && err && m && m->captured && !strcmp(err->where, m->spec)) { /* the graph that failed: the trace's */
        char where[sizeof err->where];
        snprintf(where, sizeof where, "%.300s:/graph (%.150s)", o->trace, m->spec);
        memcpy(err->where, where, sizeof where);
    }
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
    drift_inv_fwd_free(&cur);
    drift_inv_fwd_free(&ref);
    drift_inv_fwd_free(&ref_u);
    drift_inv_recorded_free(&rec);
    drift_plan_free(&plan);
    drift_model_free(m);
    drift_trace_reader_close(rd);
    return rc;
}
