#include "replay/search/bisect.h"
#include "formats/alloc.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "formats/fnmatch.h"
#include "formats/trace.h"
#include "kernels/gemm_forms.h"
#include "replay/search/ddmin.h"
#include "replay/exec/forward.h"
#include "replay/analysis/metrics.h"
#include "replay/drive/multi.h"
#include "replay/capture/aten_model.h"

#define MAX_SLOTS 16

void drift_bisect_opts_init(drift_bisect_opts *o) {
    memset(o, 0, sizeof *o);
    o->step_first = o->step_last = -1;
    o->backend = "cpu";
    o->parallel = 2;
}

const char *drift_bisect_metric_name(drift_bisect_metric m) {
    switch (m) {
    case DRIFT_BISECT_MEAN_ABS: return "model_output_mean_abs_diff";
    case DRIFT_BISECT_MAX_ABS: return "model_output_max_abs_diff";
    case DRIFT_BISECT_REL_MAX: return "model_output_rel_max";
    case DRIFT_BISECT_RMSE: return "rmse";
    }
    return "?";
}

int drift_bisect_metric_parse(const char *s) {
    for (int m = 0; m <= DRIFT_BISECT_RMSE; m++)
        if (strcmp(s, drift_bisect_metric_name((drift_bisect_metric)m)) == 0) return m;
    if (strcmp(s, "mean_abs_diff") == 0) return DRIFT_BISECT_MEAN_ABS;
    if (strcmp(s, "max_abs_diff") == 0) return DRIFT_BISECT_MAX_ABS;
    if (strcmp(s, "rel_max") == 0) return DRIFT_BISECT_REL_MAX;
    return -1;
}

/* ---- differences ----------------------------------------------------------- */
static const char *input_value(const drift_input_policy *p, char *buf, size_t n) {
    if (p->kind == DRIFT_INPUT_PASSTHROUGH) snprintf(buf, n, "null");
    else if (p->kind == DRIFT_INPUT_DEFAULT) snprintf(buf, n, "default");
    else snprintf(buf, n, "%s", drift_dtype_name(p->dtype));
    return buf;
}

static const char *rope_name(drift_buffer_prov p) {
    return p == DRIFT_BUF_CPU_FP64 ? "cpu" : p == DRIFT_BUF_DEVICE_FP32 ? "device" : "recorded";
}

static int push(drift_plan_diff **d, size_t *n, size_t *cap, const drift_plan_diff *x, drift_err *err) {
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 16;
        drift_plan_diff *nd = drift_realloc(*d, c * sizeof *nd);
        if (!nd) return drift_err_set(err, DRIFT_E_NOMEM, "bisect", "out of memory");
        *d = nd;
        *cap = c;
    }
    (*d)[(*n)++] = *x;
    return DRIFT_OK;
}

static int same_pattern(const drift_param_pattern *a, const drift_param_pattern *b) {
    return a->dtype == b->dtype && strcmp(a->glob, b->glob) == 0;
}

/* The last pattern of p matching name (later entries override earlier), or -1. */
static long last_match(const drift_plan *p, const char *name) {
    for (size_t i = p->n_patterns; i-- > 0;)
        if (drift_fnmatch(p->patterns[i].glob, name)) return (long)i;
    return -1;
}

static int in_plan(const drift_plan *p, const drift_param_pattern *x) {
    for (size_t i = 0; i < p->n_patterns; i++)
        if (same_pattern(&p->patterns[i], x)) return 1;
    return 0;
}

int drift_bisect_diff_plans(const drift_plan *good, const drift_plan *bad, const drift_param_table *table,
                            int granularity_param, drift_plan_diff **diffs, size_t *n, drift_err *err) {
    *diffs = NULL;
    *n = 0;
    size_t cap = 0;
    int rc = DRIFT_OK;
    drift_plan_diff x;
    const drift_dtype gf[4] = {good->fsdp_master_dtype, good->fsdp_reduce_dtype, good->diffusion_forward_dtype,
                               good->sglang_dit_precision};
    const drift_dtype bf[4] = {bad->fsdp_master_dtype, bad->fsdp_reduce_dtype, bad->diffusion_forward_dtype,
                               bad->sglang_dit_precision};
    static const char *const flag_names[4] = {"fsdp_master_dtype", "fsdp_reduce_dtype", "diffusion_forward_dtype",
                                              "sglang_dit_precision"};
    for (int i = 0; i < 4; i++) {
        if (gf[i] == bf[i]) continue;
        memset(&x, 0, sizeof x);
        x.kind = DRIFT_DIFF_FLAG;
        x.which = i;
        snprintf(x.name, sizeof x.name, "%s", flag_names[i]);
        snprintf(x.good_value, sizeof x.good_value, "%s", drift_dtype_name(gf[i]));
        snprintf(x.bad_value, sizeof x.bad_value, "%s", drift_dtype_name(bf[i]));
        if ((rc = push(diffs, n, &cap, &x, err))) goto fail;
    }
    static const char *const inputs[3] = {"latents", "cond", "timestep"};
    for (int i = 0; i < DRIFT_INPUT_COUNT; i++) {
        const drift_input_policy *a = &good->inputs[i], *b = &bad->inputs[i];
        if (a->kind == b->kind && (a->kind != DRIFT_INPUT_EXPLICIT || a->dtype == b->dtype)) continue;
        memset(&x, 0, sizeof x);
        x.kind = DRIFT_DIFF_INPUT;
        x.which = i;
        snprintf(x.name, sizeof x.name, "input_dtype_policy.%s", inputs[i]);
        input_value(a, x.good_value, sizeof x.good_value);
        input_value(b, x.bad_value, sizeof x.bad_value);
        if ((rc = push(diffs, n, &cap, &x, err))) goto fail;
    }
    if (good->rope_provenance != bad->rope_provenance) {
        memset(&x, 0, sizeof x);
        x.kind = DRIFT_DIFF_ROPE;
        snprintf(x.name, sizeof x.name, "buffer_provenance.rope");
        snprintf(x.good_value, sizeof x.good_value, "%s", rope_name(good->rope_provenance));
        snprintf(x.bad_value, sizeof x.bad_value, "%s", rope_name(bad->rope_provenance));
        if ((rc = push(diffs, n, &cap, &x, err))) goto fail;
    }
    if (!granularity_param) {
        for (size_t j = 0; j < bad->n_patterns; j++) {
            int found = 0;
            for (size_t i = 0; i < good->n_patterns && !found; i++) found = same_pattern(&good->patterns[i], &bad->patterns[j]);
            if (found) continue;
            memset(&x, 0, sizeof x);
            x.kind = DRIFT_DIFF_PATTERN_ADD;
            x.which = (int)j;
            snprintf(x.name, sizeof x.name, "param_dtype_patterns['%.500s']", bad->patterns[j].glob);
            snprintf(x.good_value, sizeof x.good_value, "absent");
            snprintf(x.bad_value, sizeof x.bad_value, "%s", drift_dtype_name(bad->patterns[j].dtype));
            snprintf(x.pattern, sizeof x.pattern, "%.510s", bad->patterns[j].glob);
            snprintf(x.pattern_plan, sizeof x.pattern_plan, "bad");
            if ((rc = push(diffs, n, &cap, &x, err))) goto fail;
        }
        for (size_t i = 0; i < good->n_patterns; i++) {
            int found = 0;
            for (size_t j = 0; j < bad->n_patterns && !found; j++) found = same_pattern(&good->patterns[i], &bad->patterns[j]);
            if (found) continue;
            memset(&x, 0, sizeof x);
            x.kind = DRIFT_DIFF_PATTERN_DROP;
            x.which = (int)i;
            snprintf(x.name, sizeof x.name, "param_dtype_patterns['%.500s']", good->patterns[i].glob);
            snprintf(x.good_value, sizeof x.good_value, "%s", drift_dtype_name(good->patterns[i].dtype));
            snprintf(x.bad_value, sizeof x.bad_value, "absent");
            snprintf(x.pattern, sizeof x.pattern, "%.510s", good->patterns[i].glob);
            snprintf(x.pattern_plan, sizeof x.pattern_plan, "good");
            if ((rc = push(diffs, n, &cap, &x, err))) goto fail;
        }
        return DRIFT_OK;
    }
    /* Parameter granularity: every parameter whose forward dtype differs. */
    drift_compiled_plan cg, cb;
    memset(&cg, 0, sizeof cg);
    memset(&cb, 0, sizeof cb);
    if ((rc = drift_plan_compile(good, table, &cg, err))) { drift_err_prefix(err, "good plan"); goto fail; }
    if ((rc = drift_plan_compile(bad, table, &cb, err))) {
        drift_err_prefix(err, "bad plan");
        drift_compiled_plan_free(&cg);
        goto fail;
    }
    for (size_t i = 0; i < table->n; i++) {
        if (cg.param_dtype[i] == cb.param_dtype[i]) continue;
        memset(&x, 0, sizeof x);
        x.kind = DRIFT_DIFF_PARAM;
        x.which = (int)i;
        snprintf(x.name, sizeof x.name, "%.590s", table->params[i].fqn);
        snprintf(x.good_value, sizeof x.good_value, "%s", drift_dtype_name(cg.param_dtype[i]));
        snprintf(x.bad_value, sizeof x.bad_value, "%s", drift_dtype_name(cb.param_dtype[i]));
        long pb = last_match(bad, table->params[i].fqn), pg = pb < 0 ? last_match(good, table->params[i].fqn) : -1;
        if (pb >= 0 || pg >= 0) {
            snprintf(x.pattern, sizeof x.pattern, "%.510s", pb >= 0 ? bad->patterns[pb].glob : good->patterns[pg].glob);
            snprintf(x.pattern_plan, sizeof x.pattern_plan, "%s", pb >= 0 ? "bad" : "good");
        }
        if ((rc = push(diffs, n, &cap, &x, err))) break;
    }
    drift_compiled_plan_free(&cg);
    drift_compiled_plan_free(&cb);
    if (rc) goto fail;
    return DRIFT_OK;
fail:
    free(*diffs);
    *diffs = NULL;
    *n = 0;
    return rc;
}

static int add_pattern(drift_plan *p, const char *glob, drift_dtype dt, drift_err *err) {
    char v[1200];
    snprintf(v, sizeof v, "%s=%s", glob, drift_dtype_name(dt));
    return drift_plan_apply_flag(p, "--param-dtype", v, err);
}

int drift_bisect_apply(const drift_plan *good, const drift_plan *bad, const drift_param_table *table,
                       const drift_plan_diff *diffs, size_t n, const unsigned char *mask, drift_plan *out,
                       drift_err *err) {
    drift_plan_init(out);
    drift_plan_free(out);
    int rc = drift_plan_copy(out, good, err);
    if (rc) return rc;
    int patterns_changed = 0;
    for (size_t k = 0; k < n; k++) {
        if (!mask[k]) continue;
        const drift_plan_diff *d = &diffs[k];
        switch (d->kind) {
        case DRIFT_DIFF_FLAG:
            if (d->which == 0) out->fsdp_master_dtype = bad->fsdp_master_dtype;
            else if (d->which == 1) out->fsdp_reduce_dtype = bad->fsdp_reduce_dtype;
            else if (d->which == 2) out->diffusion_forward_dtype = bad->diffusion_forward_dtype;
            else out->sglang_dit_precision = bad->sglang_dit_precision;
            break;
        case DRIFT_DIFF_INPUT: out->inputs[d->which] = bad->inputs[d->which]; break;
        case DRIFT_DIFF_ROPE: out->rope_provenance = bad->rope_provenance; break;
        default: patterns_changed = 1; break;
        }
    }
    if (!patterns_changed) return DRIFT_OK;
    /* Rebuild the pattern list: good's entries not dropped, then bad's added
     * entries, then per-parameter overrides (exact FQNs), in that order. */
    for (size_t i = 0; i < out->n_patterns; i++) free(out->patterns[i].glob);
    free(out->patterns);
    out->patterns = NULL;
    out->n_patterns = 0;
    for (size_t i = 0; i < good->n_patterns; i++) {
        int dropped = 0;
        for (size_t k = 0; k < n && !dropped; k++)
            dropped = mask[k] && diffs[k].kind == DRIFT_DIFF_PATTERN_DROP && (size_t)diffs[k].which == i;
        if (!dropped && (rc = add_pattern(out, good->patterns[i].glob, good->patterns[i].dtype, err))) goto fail;
    }
    for (size_t k = 0; k < n; k++) {
        if (!mask[k] || diffs[k].kind != DRIFT_DIFF_PATTERN_ADD) continue;
        const drift_param_pattern *p = &bad->patterns[diffs[k].which];
        if ((rc = add_pattern(out, p->glob, p->dtype, err))) goto fail;
    }
    for (size_t k = 0; k < n; k++) {
        if (!mask[k] || diffs[k].kind != DRIFT_DIFF_PARAM) continue;
        if ((rc = add_pattern(out, table->params[diffs[k].which].fqn, drift_dtype_parse(diffs[k].bad_value), err)))
            goto fail;
    }
    return DRIFT_OK;
fail:
    drift_plan_free(out);
    return rc;
}

/* ---- the fix: a minimal edit of the bad plan ------------------------------- */
/* Where a PARAM difference comes from in the edit's terms: a bad-plan entry
 * the good plan lacks (*bad_entry), a good-plan entry the bad plan lacks
 * (*good_entry), or neither (-1 both). */
static void param_source(const drift_plan *good, const drift_plan *bad, const char *name, long *bad_entry, long *good_entry) {
    long pb = last_match(bad, name), pg = last_match(good, name);
    *bad_entry = pb >= 0 && !in_plan(good, &bad->patterns[pb]) ? pb : -1;
    *good_entry = *bad_entry < 0 && pg >= 0 && !in_plan(bad, &good->patterns[pg]) ? pg : -1;
}

int drift_bisect_fix_edit(const drift_plan *good, const drift_plan *bad, const drift_plan_diff *diffs, size_t n_diffs,
                          const size_t *culprits, size_t n_culprits, int globs, drift_plan *out, drift_err *err) {
    drift_plan_init(out);
    drift_plan_free(out);
    int rc = drift_plan_copy(out, bad, err);
    if (rc) return rc;
    unsigned char *drop = drift_calloc(bad->n_patterns + 1, 1);
    /* appended entries: good-plan entries (index >= 0) or exact names (culprit diff, as -1 - k) */
    long *add = drift_calloc(n_culprits + 1, sizeof *add);
    size_t n_add = 0;
    if (!drop || !add) { rc = drift_err_set(err, DRIFT_E_NOMEM, "bisect", "out of memory"); goto done; }
    for (size_t c = 0; c < n_culprits; c++) {
        const drift_plan_diff *d = &diffs[culprits[c]];
        long a = LONG_MIN;
        switch (d->kind) {
        case DRIFT_DIFF_FLAG:
            if (d->which == 0) out->fsdp_master_dtype = good->fsdp_master_dtype;
            else if (d->which == 1) out->fsdp_reduce_dtype = good->fsdp_reduce_dtype;
            else if (d->which == 2) out->diffusion_forward_dtype = good->diffusion_forward_dtype;
            else out->sglang_dit_precision = good->sglang_dit_precision;
            break;
        case DRIFT_DIFF_INPUT: out->inputs[d->which] = good->inputs[d->which]; break;
        case DRIFT_DIFF_ROPE: out->rope_provenance = good->rope_provenance; break;
        case DRIFT_DIFF_PATTERN_ADD: drop[d->which] = 1; break;
        case DRIFT_DIFF_PATTERN_DROP: a = d->which; break;
        case DRIFT_DIFF_PARAM: {
            /* the user's glob is reverted when every difference it makes is a
             * culprit; otherwise the glob stays and the culprit gets an exact entry */
            long pb = -1, pg = -1;
            if (globs) param_source(good, bad, d->name, &pb, &pg);
            int whole = pb >= 0 || pg >= 0;
            for (size_t i = 0; i < n_diffs && whole; i++) {
                if (diffs[i].kind != DRIFT_DIFF_PARAM) continue;
                long qb, qg;
                param_source(good, bad, diffs[i].name, &qb, &qg);
                if (qb != pb || qg != pg) continue;
                int cul = 0;
                for (size_t q = 0; q < n_culprits && !cul; q++) cul = culprits[q] == i;
                whole = cul;
            }
            if (whole && pb >= 0) drop[pb] = 1;
            else if (whole) a = pg;
            else a = -1 - (long)c;
            break;
        }
        }
        if (a == LONG_MIN) continue;
        int dup = 0;
        for (size_t q = 0; q < n_add && !dup; q++) dup = add[q] == a;
        if (!dup) add[n_add++] = a;
    }
    for (size_t i = 0; i < out->n_patterns; i++) free(out->patterns[i].glob);
    free(out->patterns);
    out->patterns = NULL;
    out->n_patterns = 0;
    for (size_t j = 0; j < bad->n_patterns && !rc; j++)
        if (!drop[j]) rc = add_pattern(out, bad->patterns[j].glob, bad->patterns[j].dtype, err);
    for (size_t q = 0; q < n_add && !rc; q++) {
        if (add[q] >= 0) rc = add_pattern(out, good->patterns[add[q]].glob, good->patterns[add[q]].dtype, err);
        else {
            const drift_plan_diff *x = &diffs[culprits[-1 - add[q]]];
            rc = add_pattern(out, x->name, drift_dtype_parse(x->good_value), err);
        }
    }
done:
    free(drop);
    free(add);
    if (rc) drift_plan_free(out);
    return rc;
}

/* ---- the replay session behind every probe -------------------------------- */
/* A replay whose activations later replays start from: its forward, and per
 * step the snapshots at its boundaries (the first value each difference
 * changes when applied to it, or taken back from it). */
typedef struct prefix_src {
    drift_forward *f;
    int first_buffer;            /* its first buffer value (a RoPE provenance difference starts there) */
    int *bounds;                 /* ascending value ids */
    int n_bounds;
    drift_exec_snapshot **snap;  /* [step * n_bounds + b], NULL where not kept */
} prefix_src;

typedef struct session {
    const drift_bisect_opts *o;
    drift_model *m;
    drift_dtype handed[DRIFT_INPUT_COUNT];
    int64_t n_steps;
    drift_hostset **inputs;      /* per step */
    float **ref;                 /* per step: reference output */
    int64_t out_numel;
    const char *gpu_as;         /* the cpu's GEMM-form table for the recording GPU (kernels/gemm_forms.h), or NULL */
    drift_backend *be[MAX_SLOTS];
    drift_exec_cache *cache[MAX_SLOTS]; /* per slot, across probes: what a probe's graph computes like
                                           the last one (every parameter it casts the same way) stays */
    int slots;
    drift_plan_diff *diffs;
    size_t n_diffs;
    double threshold;
    size_t probes_done, bound;
    char slot_dev[MAX_SLOTS][64]; /* device name of each slot, for the probe log */
    pthread_mutex_t log_mu;
    int running;
    long probe_seq;
    int round;                   /* search round, for on_probe */
    size_t remaining;            /* differences still in the search space this round */
    double t0;
    size_t probes_before;        /* probes of the earlier --all rounds: progress counts overall */
    long probe_total;            /* estimated total probes (progress), grows per round */
    long probes_finished;
    /* sequential phases count their steps: progress(phase, done, total) */
    const char *phase;
    long phase_done, phase_total;
    size_t replays;              /* full replays run (atomic enough: under log_mu) */
    drift_site_cache *good0;     /* the good plan's sites at the first step (first divergent sites) */
    /* prefix reuse (drift_bisect_opts.no_prefix_cache): the good and the bad replay */
    prefix_src src[2];
    int prefix_on;
    size_t prefix_budget;        /* host bytes left for snapshots */
    size_t prefix_candidates, prefix_reused;
    int64_t prefix_skipped, prefix_live;
} session;

static void session_free(session *s) {
    for (int64_t i = 0; i < s->n_steps; i++) {
        if (s->inputs) drift_hostset_free(s->inputs[i]);
        if (s->ref) free(s->ref[i]);
    }
    free(s->inputs);
    free(s->ref);
    drift_site_cache_free(s->good0);
    for (int q = 0; q < 2; q++) {
        prefix_src *x = &s->src[q];
        if (x->snap)
            for (int64_t i = 0; i < s->n_steps * x->n_bounds; i++) drift_exec_snapshot_free(x->snap[i]);
        free(x->snap);
        free(x->bounds);
        drift_forward_free(x->f);
    }
    for (int i = 0; i < MAX_SLOTS; i++) drift_exec_cache_free(s->cache[i]);
    for (int i = 0; i < MAX_SLOTS; i++) drift_backend_free(s->be[i]);
    drift_model_free(s->m);
}

static const char *const INPUT_SITE[DRIFT_INPUT_COUNT] = {"input:latents:pre_cast", "input:cond:pre_cast",
                                                           "input:timestep:pre_cast"};
static const char *const INPUT_NAME[DRIFT_INPUT_COUNT] = {"latents", "cond", "timestep"};

/* First stored record of site at step, or -1. */
static int64_t find_rec(drift_trace_reader *r, long site, int64_t step, drift_err *err, int *rc) {
    drift_trace_site_info info;
    *rc = drift_trace_reader_site(r, (size_t)site, &info, err);
    if (*rc || info.n_records == 0) return -1;
    drift_trace_index *rows = drift_malloc((size_t)info.n_records * sizeof *rows);
    if (!rows) { *rc = drift_err_set(err, DRIFT_E_NOMEM, "bisect", "out of memory"); return -1; }
    int64_t found = -1;
    if (!(*rc = drift_trace_read_index(r, (size_t)site, 0, info.n_records, rows, err)))
        for (int64_t i = 0; i < info.n_records && found < 0; i++)
            if (rows[i].step == step && rows[i].stored) found = i;
    free(rows);
    return found;
}

static int read_site(drift_trace_reader *r, const char *name, int64_t step, float **vals, drift_trace_site_info *info,
                     drift_err *err) {
    *vals = NULL;
    long id = drift_trace_reader_find_site(r, name);
    if (id < 0) return drift_err_set(err, DRIFT_E_INPUT, drift_trace_reader_path(r), "the trace has no site '%s'", name);
    int rc;
    int64_t rec = find_rec(r, id, step, err, &rc);
    if (rc) return rc;
    if (rec < 0)
        return drift_err_set(err, DRIFT_E_INPUT, drift_trace_reader_path(r), "site '%s' has no stored record at step %lld",
                             name, (long long)step);
    if ((rc = drift_trace_reader_site(r, (size_t)id, info, err))) return rc;
    *vals = drift_malloc((size_t)info->numel * sizeof **vals);
    if (!*vals) return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory");
    if ((rc = drift_trace_read_record_f32(r, (size_t)id, rec, *vals, (size_t)info->numel, err))) {
        free(*vals);
        *vals = NULL;
    }
    return rc;
}

static int session_load(session *s, const drift_bisect_opts *o, drift_err *err) {
    drift_trace_reader *r = NULL;
    int rc = drift_trace_reader_open(&r, o->trace, DRIFT_TRACE_OPEN_NORMAL, err);
    if (rc) return rc;
    const drift_trace_meta *meta = drift_trace_reader_meta(r);
    /* the one graph the bisected steps use (docs/format.md 9.1: per-step graphs of a trace
       specialised to each step's data) */
    drift_trace_step_graph sg;
    drift_libraries libs;
    int has_libs = 0;
    if ((rc = drift_trace_read_libraries(r, &libs, &has_libs, err))) goto done;
    s->gpu_as = drift_gemm_table_for(meta->producer, has_libs ? &libs : NULL);
    if ((rc = drift_capture_steps_graph(r, o->step_first, o->step_last, &sg, err))) goto done;
    if ((rc = drift_capture_model_for_step(r, meta->family, &sg, &s->m, err))) goto done;
    if ((rc = drift_model_load_trace(s->m, r, err))) goto done;
    const drift_hostset *tmp;
    if ((rc = drift_model_buffers(s->m, DRIFT_BUF_CPU_FP64, &tmp, err))) goto done;
    if ((rc = drift_model_buffers(s->m, DRIFT_BUF_DEVICE_FP32, &tmp, err))) goto done;
    size_t n_all = 0;
    const drift_trace_step *st = drift_trace_reader_steps(r, &n_all);
    s->inputs = drift_calloc(n_all ? n_all : 1, sizeof *s->inputs);
    s->ref = drift_calloc(n_all ? n_all : 1, sizeof *s->ref);
    if (!s->inputs || !s->ref) { rc = drift_err_set(err, DRIFT_E_NOMEM, "bisect", "out of memory"); goto done; }
    for (size_t i = 0; i < n_all; i++) {
        int64_t step = st[i].step;
        if ((o->step_first >= 0 && step < o->step_first) || (o->step_last >= 0 && step > o->step_last)) continue;
        int64_t k = s->n_steps++;
        if ((rc = drift_hostset_create(&s->inputs[k], err))) goto done;
        for (int j = 0; j < DRIFT_INPUT_COUNT; j++) {
            float *v;
            drift_trace_site_info info;
            if (!drift_capture_model_takes_input(s->m, j)) { /* DiT: no text condition, no input:cond site */
                s->handed[j] = DRIFT_F32;
                continue;
            }
            if ((rc = read_site(r, INPUT_SITE[j], step, &v, &info, err))) goto done;
            s->handed[j] = info.dtype;
            rc = drift_hostset_add(s->inputs[k], INPUT_NAME[j], info.dtype, info.ndim, info.shape, v, NULL, NULL, err);
            free(v);
            if (rc) goto done;
        }
        /* a captured graph's other user inputs of this step (masks, ids, pooled projections) */
        if ((rc = drift_capture_step_inputs(s->m, r, step, s->inputs[k], err))) goto done;
        if (o->ref == DRIFT_BISECT_REF_ROLLOUT) {
            drift_trace_site_info info;
            if ((rc = read_site(r, DRIFT_SITE_ROLLOUT_OUTPUT, step, &s->ref[k], &info, err))) goto done;
            s->out_numel = info.numel;
        }
        if (o->progress) o->progress("loading the trace: step", (long)i + 1, (long)n_all, o->progress_user);
    }
    if (s->n_steps == 0)
        rc = drift_err_set(err, DRIFT_E_USAGE, "--steps", "no committed step of %s is in the range", o->trace);
done:
    drift_trace_reader_close(r);
    return rc;
}

/* Runs plan over the steps on slot's backend; accumulates the output metric
 * against ref (per step) and, when outs is given, keeps the outputs. site0
 * (may be NULL) observes the sites of the first step. Parameters and their
 * casts stay on the backend from step to step (an exec cache per run). */
/* run_plan_all's prefix modes: none, resume, or capture into src[0] (good) / src[1] (bad) */
enum { PREFIX_NONE = 0, PREFIX_RESUME = 1, PREFIX_CAPTURE_GOOD = 2, PREFIX_CAPTURE_BAD = 3 };

/* Where f's forward first differs from x's (value id). */
static int first_change(const prefix_src *x, const drift_forward *f) {
    int k = drift_exec_first_difference(x->f->assigned, f->assigned);
    if (f->rope != x->f->rope && x->first_buffer >= 0 && x->first_buffer < k) k = x->first_buffer;
    return k;
}

/* For step k, the deepest kept boundary of either source at or below the
 * first value where f's forward departs from that source's (kfirst[q]); NULL if none. */
static const drift_exec_snapshot *prefix_for(const session *s, const int kfirst[2], int64_t k) {
    const drift_exec_snapshot *best = NULL;
    for (int q = 0; q < 2; q++) {
        const prefix_src *x = &s->src[q];
        for (int b = x->n_bounds; b-- > 0;) {
            const drift_exec_snapshot *sn = x->snap ? x->snap[k * x->n_bounds + b] : NULL;
            if (x->bounds[b] > kfirst[q] || !sn) continue;
            if (!best || x->bounds[b] > drift_exec_snapshot_boundary(best)) best = sn;
            break;
        }
    }
    return best;
}

static int run_plan_all(session *s, const drift_plan *plan, int slot, float **ref, float **outs, int nudge, double *metric,
                        drift_site_metrics *all, drift_exec_site_fn site0, void *site0_user, int prefix, double *skipped_frac,
                        drift_err *err) {
    drift_forward *f = NULL;
    int rc = drift_forward_prepare(s->m, plan, DRIFT_SIDE_TRAINER, s->handed, &f, err);
    if (rc) return rc;
    if (!s->prefix_on || nudge) prefix = PREFIX_NONE; /* a nudged run's inputs are not the good run's */
    int kfirst[2] = {-1, -1};
    for (int q = 0; q < 2 && prefix == PREFIX_RESUME; q++)
        if (s->src[q].f) kfirst[q] = first_change(&s->src[q], f);
    int reused = 0;
    int64_t skipped = 0, live = 0;
    if (!s->cache[slot]) {
        if ((rc = drift_exec_cache_create(s->be[slot], &s->cache[slot], err))) {
            drift_forward_free(f);
            return rc;
        }
        drift_exec_cache_set_adopt(s->cache[slot], 1); /* the masters never change during a bisection */
    }
    drift_exec_cache *cache = s->cache[slot];
    drift_site_acc acc;
    drift_metrics_site_init(&acc, DRIFT_F32);
    drift_exec_result res;
    memset(&res, 0, sizeof res);
    drift_hostset *nudged = NULL;
    for (int64_t k = 0; k < s->n_steps && !rc; k++) {
        const drift_hostset *in = s->inputs[k];
        if (nudge) {
            /* the same inputs with the latents moved by one ULP of their dtype */
            drift_hostset_free(nudged);
            nudged = NULL;
            if ((rc = drift_hostset_create(&nudged, err))) break;
            for (size_t j = 0; j < drift_hostset_count(in) && !rc; j++) {
                const drift_host_tensor *t = drift_hostset_at(in, j);
                drift_host_tensor *added = NULL;
                rc = drift_hostset_add(nudged, t->name, t->dtype, t->ndim, t->shape, t->f32, NULL, &added, err);
                /* One element of the latents moved by one ULP of the dtype it
                 * is computed in (the forward dtype; a nudge of the handed-over
                 * fp32 value would mostly vanish in autocast's bf16 rounding):
                 * the smallest change that flips a rounding upstream. */
                if (!rc && !strcmp(t->name, INPUT_NAME[DRIFT_INPUT_LATENTS]))
                    drift_metrics_nudge_ulp_f32(added->f32 + added->numel / 2, 1,
                                                drift_assign_forward_dtype(plan, DRIFT_SIDE_TRAINER), 1.0, 12345);
            }
            if (rc) break;
            in = nudged;
        }
        drift_exec_result_free(&res);
        drift_exec_stats st;
        drift_exec_options eo = {.alias = -1, .fuse_casts = -1, .stats = &st};
        if (prefix == PREFIX_CAPTURE_GOOD || prefix == PREFIX_CAPTURE_BAD) {
            prefix_src *x = &s->src[prefix == PREFIX_CAPTURE_BAD];
            eo.capture_at = x->bounds;
            eo.n_capture = x->n_bounds;
            eo.captured = &x->snap[k * x->n_bounds];
            eo.capture_budget = &s->prefix_budget;
        } else if (prefix == PREFIX_RESUME) {
            eo.resume = prefix_for(s, kfirst, k);
        }
        if ((rc = drift_forward_run_ex(f, s->m, s->be[slot], in, cache, &eo, k == 0 ? site0 : NULL, site0_user, &res, err)))
            break;
        if (st.resumed_at >= 0) {
            reused = 1;
            skipped += st.prefix_skipped;
        }
        live += st.live_nodes;
        if (ref && ref[k]) {
            if ((rc = drift_metrics_site_add_f32(&acc, res.f32, ref[k], 1, (size_t)res.numel, err))) break;
        }
        if (outs) {
            outs[k] = res.f32;
            res.f32 = NULL;
        }
        if (s->phase && s->o->progress) s->o->progress(s->phase, ++s->phase_done, s->phase_total, s->o->progress_user);
    }
    drift_exec_result_free(&res);
    drift_hostset_free(nudged);
    drift_exec_cache_detach(cache); /* its graph goes with f; the entries stay for the next probe */
    drift_forward_free(f);
    if (rc) return rc;
    if (skipped_frac) *skipped_frac = live > 0 ? (double)skipped / (double)live : 0.0;
    pthread_mutex_lock(&s->log_mu);
    s->replays++;
    if (prefix == PREFIX_RESUME) {
        s->prefix_candidates++;
        s->prefix_reused += (size_t)reused;
        s->prefix_skipped += skipped;
        s->prefix_live += live;
    }
    pthread_mutex_unlock(&s->log_mu);
    drift_site_metrics m;
    drift_metrics_site_finish(&acc, 1.0, &m);
    if (all) *all = m;
    switch (s->o->metric) {
    case DRIFT_BISECT_MEAN_ABS: *metric = m.mean_abs_diff; break;
    case DRIFT_BISECT_MAX_ABS: *metric = m.max_abs_diff; break;
    case DRIFT_BISECT_REL_MAX: *metric = m.rel_max; break;
    case DRIFT_BISECT_RMSE: *metric = m.rmse; break;
    }
    return DRIFT_OK;
}

static int run_plan(session *s, const drift_plan *plan, int slot, float **ref, float **outs, int nudge, double *metric,
                    double *skipped_frac,
                    drift_err *err) {
    return run_plan_all(s, plan, slot, ref, outs, nudge, metric, NULL, NULL, NULL, PREFIX_RESUME, skipped_frac, err);
}

static double mono_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One log line per probe start and finish (which device, how many run). */
static long probe_log(session *s, int slot, long id, int start, int fails, double secs) {
    char line[256];
    pthread_mutex_lock(&s->log_mu);
    if (start) id = ++s->probe_seq; /* counted always: the overall probe number of on_probe */
    if (!s->o->log) {
        pthread_mutex_unlock(&s->log_mu);
        return id;
    }
    if (start) {
        s->running++;
        snprintf(line, sizeof line, "[%7.2f s] probe %ld on %s started (%d running)", mono_s() - s->t0, id,
                 s->slot_dev[slot], s->running);
    } else {
        s->running--;
        snprintf(line, sizeof line, "[%7.2f s] probe %ld on %s finished in %.2f s: %s (%d running)", mono_s() - s->t0, id,
                 s->slot_dev[slot], secs, fails < 0 ? "error" : fails ? "fails" : "passes", s->running);
    }
    s->o->log(line, s->o->log_user);
    pthread_mutex_unlock(&s->log_mu);
    return id;
}

static int probe(const unsigned char *mask, size_t n, int slot, void *user, int *fails, drift_err *err) {
    session *s = user;
    slot %= s->slots;
    double t = mono_s();
    long id = probe_log(s, slot, 0, 1, 0, 0);
    drift_plan p;
    int rc = drift_bisect_apply(s->o->good, s->o->bad, &s->m->table, s->diffs, n, mask, &p, err);
    if (rc) return rc;
    double metric = 0;
    double skipped = 0;
    rc = run_plan(s, &p, slot, s->ref, NULL, 0, &metric, &skipped, err);
    drift_plan_free(&p);
    if (!rc) *fails = metric > s->threshold || isnan(metric);
    double secs = mono_s() - t;
    probe_log(s, slot, id, 0, rc ? -1 : *fails, secs);
    if (s->o->progress) {
        size_t applied = 0;
        for (size_t i = 0; i < n; i++) applied += mask[i] != 0;
        pthread_mutex_lock(&s->log_mu);
        long done = ++s->probes_finished;
        /* a later round's first probe (everything left) drifts: a search follows */
        if (!rc && *fails && s->round > 1 && applied == s->remaining)
            s->probe_total = done + (long)drift_ddmin_single_bound(s->remaining) - 1 + (s->o->all ? 1 : 0);
        if (s->probe_total <= done) s->probe_total = done + 1; /* an estimate: never shown as finished early */
        s->o->progress("probe", done, s->probe_total, s->o->progress_user);
        pthread_mutex_unlock(&s->log_mu);
    }
    if (s->o->on_probe) {
        drift_bisect_probe ev = {.seq = id, .round = s->round, .n_diffs = s->remaining, .fails = rc ? -1 : *fails, .metric = metric,
                                 .seconds = secs, .device = s->slot_dev[slot], .prefix_skipped = skipped};
        for (size_t i = 0; i < n; i++) ev.n_applied += mask[i] != 0;
        pthread_mutex_lock(&s->log_mu);
        s->o->on_probe(&ev, s->o->event_user);
        pthread_mutex_unlock(&s->log_mu);
    }
    return rc;
}

/* First site (execution order) where plan's forward differs from good's, at
 * the first selected step. */
typedef struct firstdiff_ctx {
    drift_site_cache *good;
    char *first;
    float *buf;
    size_t cap;
} firstdiff_ctx;

static int cache_site(const char *site, const drift_tensor *t, void *user, drift_err *err) {
    return drift_site_cache_put((drift_site_cache *)user, site, t, err);
}

static int diff_site(const char *site, const drift_tensor *t, void *user, drift_err *err) {
    firstdiff_ctx *c = user;
    if (c->first) return DRIFT_OK;
    int64_t n = 0;
    const float *g = drift_site_cache_get(c->good, site, &n, NULL);
    if (!g || n != t->numel) return DRIFT_OK;
    if ((size_t)n > c->cap) {
        float *b = drift_realloc(c->buf, (size_t)n * sizeof *b);
        if (!b) return drift_err_set(err, DRIFT_E_NOMEM, site, "out of memory");
        c->buf = b;
        c->cap = (size_t)n;
    }
    int rc = drift_backend_download_f32(t->be, t, c->buf, err);
    if (rc) return rc;
    if (memcmp(c->buf, g, (size_t)n * sizeof *g) != 0) c->first = drift_strdup(site);
    return DRIFT_OK;
}

/* The first site of plan's first step that differs from the good plan's (cached in s->good0). */
static int first_divergent(session *s, const drift_plan *plan, char *out, size_t outsz, drift_err *err) {
    out[0] = '\0';
    drift_forward *fp = NULL;
    firstdiff_ctx c;
    memset(&c, 0, sizeof c);
    c.good = s->good0;
    int rc = drift_forward_prepare(s->m, plan, DRIFT_SIDE_TRAINER, s->handed, &fp, err);
    if (!rc) rc = drift_forward_run(fp, s->m, s->be[0], s->inputs[0], diff_site, &c, NULL, err);
    if (!rc && c.first) snprintf(out, outsz, "%s", c.first);
    free(c.first);
    free(c.buf);
    drift_forward_free(fp);
    return rc;
}

/* *same = 1 when plan compiles to the good plan (flags, inputs, RoPE and
 * every parameter's forward dtype): its replay is the good plan's. */
static int same_as_good(session *s, const drift_plan *plan, int *same, drift_err *err) {
    const drift_plan *g = s->o->good;
    *same = 0;
    if (plan->fsdp_master_dtype != g->fsdp_master_dtype || plan->fsdp_reduce_dtype != g->fsdp_reduce_dtype ||
        plan->diffusion_forward_dtype != g->diffusion_forward_dtype || plan->sglang_dit_precision != g->sglang_dit_precision ||
        plan->rope_provenance != g->rope_provenance || memcmp(plan->inputs, g->inputs, sizeof plan->inputs) != 0)
        return DRIFT_OK;
    drift_plan_diff *d = NULL;
    size_t n = 0;
    int rc = drift_bisect_diff_plans(g, plan, &s->m->table, 1, &d, &n, err);
    free(d);
    if (!rc) *same = n == 0;
    return rc;
}

/* Source q's forward (the good plan, or the bad one) and its boundaries:
 * for each difference, the first value its forward changes when that
 * difference alone is applied to the good plan (q 0) or taken back from the
 * bad plan (q 1): where probes depart from it. */
static int prefix_source(session *s, const drift_bisect_opts *o, int q, unsigned char *mask, drift_err *err) {
    prefix_src *x = &s->src[q];
    int rc = drift_forward_prepare(s->m, q ? o->bad : o->good, DRIFT_SIDE_TRAINER, s->handed, &x->f, err);
    if (rc) return rc;
    x->first_buffer = -1;
    int n = drift_graph_count(x->f->assigned);
    for (int i = 0; i < n && x->first_buffer < 0; i++)
        if (drift_graph_value(x->f->assigned, i)->kind == DRIFT_VAL_BUFFER) x->first_buffer = i;
    if (!(x->bounds = drift_calloc(s->n_diffs, sizeof *x->bounds))) return drift_err_set(err, DRIFT_E_NOMEM, "bisect", "out of memory");
    for (size_t d = 0; d < s->n_diffs && !rc; d++) {
        memset(mask, q ? 1 : 0, s->n_diffs);
        mask[d] = !q;
        drift_plan p;
        drift_forward *f = NULL;
        if ((rc = drift_bisect_apply(o->good, o->bad, &s->m->table, s->diffs, s->n_diffs, mask, &p, err))) break;
        rc = drift_forward_prepare(s->m, &p, DRIFT_SIDE_TRAINER, s->handed, &f, err);
        drift_plan_free(&p);
        if (rc) break;
        int k = first_change(x, f);
        drift_forward_free(f);
        if (k <= 0 || k >= n) continue; /* nothing to skip, or no change at all */
        int at = 0; /* insert sorted, once */
        while (at < x->n_bounds && x->bounds[at] < k) at++;
        if (at < x->n_bounds && x->bounds[at] == k) continue;
        memmove(x->bounds + at + 1, x->bounds + at, (size_t)(x->n_bounds - at) * sizeof *x->bounds);
        x->bounds[at] = k;
        x->n_bounds++;
    }
    if (rc || x->n_bounds == 0) return rc;
    if (!(x->snap = drift_calloc((size_t)(s->n_steps * x->n_bounds), sizeof *x->snap)))
        return drift_err_set(err, DRIFT_E_NOMEM, "bisect", "out of memory");
    s->prefix_on = 1;
    return DRIFT_OK;
}

/* The boundaries the good and the bad replay keep. Nothing with fewer than
 * two differences (no probe then) or with the cache off. The good replay
 * runs first and fills the budget first. */
static int prefix_setup(session *s, const drift_bisect_opts *o, drift_err *err) {
    if (o->no_prefix_cache || s->n_diffs < 2) return DRIFT_OK;
    unsigned char *mask = drift_calloc(s->n_diffs, 1);
    if (!mask) return drift_err_set(err, DRIFT_E_NOMEM, "bisect", "out of memory");
    int rc = prefix_source(s, o, 0, mask, err);
    if (!rc) rc = prefix_source(s, o, 1, mask, err);
    free(mask);
    s->prefix_budget = o->prefix_cache_bytes ? o->prefix_cache_bytes : (size_t)1 << 30;
    return rc;
}

void drift_bisect_result_free(drift_bisect_result *res) {
    if (!res) return;
    if (res->has_fix) drift_plan_free(&res->fix_plan);
    free(res->diffs);
    free(res->set_start);
    free(res->set_len);
    free(res->culprits);
    free(res->harmless);
    memset(res, 0, sizeof *res);
}

int drift_bisect_run(const drift_bisect_opts *o, drift_bisect_result *res, drift_err *err) {
    memset(res, 0, sizeof *res);
    res->noise_floor = NAN;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    session s;
    memset(&s, 0, sizeof s);
    s.o = o;
    float **good_out = NULL;
    unsigned char *universe = NULL, *mask = NULL;
    drift_plan_diff *diffs = NULL;
    int rc;
    pthread_mutex_init(&s.log_mu, NULL);
    s.t0 = mono_s();
    char **devs = NULL;
    int n_dev = 0;
    if (o->devices && (rc = drift_replay_parse_devices(o->devices, &devs, &n_dev, err))) goto done;
    if ((rc = session_load(&s, o, err))) goto done;
    s.slots = o->parallel < 1 ? 1 : (o->parallel > MAX_SLOTS ? MAX_SLOTS : o->parallel);
    /* each slot its own backend; with --devices, slot i on device i % n */
    for (int i = 0; i < s.slots; i++) {
        const char *name = devs ? devs[i % n_dev] : (o->backend ? o->backend : "cpu");
        char spec0[512], spec[600];
        if ((rc = drift_backend_spec_with_kernels(name, o->kernels, spec0, sizeof spec0, err)) ||
            (rc = drift_backend_spec_with_gemm_table(spec0, s.gpu_as, spec, sizeof spec, err)) ||
            (rc = drift_backend_create(spec, &s.be[i], err))) {
            drift_err_prefix(err, "probe slot %d", i);
            goto done;
        }
        snprintf(s.slot_dev[i], sizeof s.slot_dev[i], "%s", drift_backend_name(s.be[i]));
        if (strncmp(drift_backend_name(s.be[i]), "cuda", 4) != 0) /* host backends share a name: tell the slots apart */
            snprintf(s.slot_dev[i], sizeof s.slot_dev[i], "%.40s[slot %d]", drift_backend_name(s.be[i]), i);
    }
    const char *kern = drift_backend_kernels(s.be[0]);
    snprintf(res->kernels, sizeof res->kernels, "%s", kern ? kern : "");
    res->n_steps = s.n_steps;
    size_t nd = 0;
    if ((rc = drift_bisect_diff_plans(o->good, o->bad, &s.m->table, o->granularity_param, &diffs, &nd, err))) goto done;
    res->diffs = diffs;
    res->n_diffs = nd;
    s.diffs = diffs;
    s.n_diffs = nd;

    /* The good plan's outputs: the reference (ref good) and the floor's base;
     * its first step's sites are kept for the first divergent sites. */
    good_out = drift_calloc((size_t)s.n_steps, sizeof *good_out);
    if (!good_out) { rc = drift_err_set(err, DRIFT_E_NOMEM, "bisect", "out of memory"); goto done; }
    if ((rc = drift_site_cache_create(&s.good0, err))) goto done;
    double good_vs_ref = 0, floor_metric = 0, bad_metric = 0;
    s.phase = "reference replays (good, noise floor, bad): step";
    s.phase_total = 3 * (long)s.n_steps;
    if ((rc = prefix_setup(&s, o, err))) goto done;
    if ((rc = run_plan_all(&s, o->good, 0, s.ref, good_out, 0, &good_vs_ref, NULL, cache_site, s.good0, PREFIX_CAPTURE_GOOD, NULL, err))) {
        drift_err_prefix(err, "good plan");
        goto done;
    }
    if (o->ref == DRIFT_BISECT_REF_GOOD) {
        for (int64_t k = 0; k < s.n_steps; k++) { s.ref[k] = good_out[k]; good_out[k] = NULL; }
        good_vs_ref = 0;
    }
    float **base = o->ref == DRIFT_BISECT_REF_GOOD ? s.ref : good_out;
    if ((rc = run_plan(&s, o->good, 0, base, NULL, 1, &floor_metric, NULL, err))) goto done;
    /* the bad plan's first divergent site, from the same replay: with one
     * difference it is the culprit's */
    char bad_first[256] = "";
    firstdiff_ctx bc;
    memset(&bc, 0, sizeof bc);
    bc.good = s.good0;
    rc = run_plan_all(&s, o->bad, 0, s.ref, NULL, 0, &bad_metric, NULL, diff_site, &bc, PREFIX_CAPTURE_BAD, NULL, err);
    if (!rc && bc.first) snprintf(bad_first, sizeof bad_first, "%s", bc.first);
    free(bc.first);
    free(bc.buf);
    s.phase = NULL;
    if (rc) { drift_err_prefix(err, "bad plan"); goto done; }
    res->good_metric = good_vs_ref;
    res->bad_metric = bad_metric;
    res->noise_floor = floor_metric;
    if (o->has_threshold) {
        s.threshold = o->threshold;
        if (good_vs_ref > o->threshold) {
            res->good_fails = 1;
            res->threshold = s.threshold;
            goto done;
        }
    } else {
        /* the good plan's own value plus K noise floors (K = 1 unless
         * --threshold-floor): a difference below the floor is harmless;
         * --threshold 0 asks the bitwise question */
        s.threshold = good_vs_ref + (o->has_threshold_floor ? o->threshold_floor : 1.0) * floor_metric;
        res->threshold_from_floor = 1;
    }
    res->threshold = s.threshold;
    if (nd == 0) goto done;

    universe = drift_malloc(nd);
    mask = drift_malloc(nd);
    res->culprits = drift_calloc(nd, sizeof *res->culprits);
    res->set_start = drift_calloc(nd, sizeof *res->set_start);
    res->set_len = drift_calloc(nd, sizeof *res->set_len);
    res->harmless = drift_calloc(nd, 1);
    if (!universe || !mask || !res->culprits || !res->set_start || !res->set_len || !res->harmless) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, "bisect", "out of memory");
        goto done;
    }
    memset(universe, 1, nd);
    int bad_fails = bad_metric > s.threshold || isnan(bad_metric);
    drift_ddmin_opts dopts = {.parallel = s.slots, .probe = probe, .user = &s};
    for (;;) {
        s.remaining = 0;
        for (size_t i = 0; i < nd; i++) s.remaining += universe[i] != 0;
        /* Round 1 starts from the bad plan, already replayed: it is the
         * whole set's probe. Without a drift there is nothing to search; a
         * single difference that drifts is its own answer. */
        if (s.round == 0 && !bad_fails) {
            memcpy(res->harmless, universe, nd);
            res->harmless_known = 1;
            break;
        }
        s.round++;
        drift_ddmin_result dr;
        if (s.round == 1 && s.remaining == 1) {
            memset(&dr, 0, sizeof dr);
            dr.found = 1;
            dr.culprit = drift_malloc(nd);
            if (!dr.culprit) { rc = drift_err_set(err, DRIFT_E_NOMEM, "bisect", "out of memory"); goto done; }
            memcpy(dr.culprit, universe, nd);
        } else {
            dopts.assume_full_fails = s.round == 1;
            /* estimate: round 1 a single culprit's bound (the whole set is
             * the bad plan) plus --all's final check; a later round its
             * first probe, grown when that drifts (probe) */
            pthread_mutex_lock(&s.log_mu);
            s.probe_total = (long)s.probe_seq + (s.round == 1 ? (long)drift_ddmin_single_bound(s.remaining) - 1 + (o->all ? 1 : 0) : 1);
            pthread_mutex_unlock(&s.log_mu);
            if ((rc = drift_ddmin_run(nd, universe, &dopts, &dr, err))) goto done;
        }
        res->probes += dr.probes;
        s.probes_before = res->probes;
        res->memo_hits += dr.memo_hits;
        if (dr.max_concurrent > res->max_concurrent) res->max_concurrent = dr.max_concurrent;
        if (!dr.found) {
            /* what is left applied together stays within the threshold */
            memcpy(res->harmless, universe, nd);
            res->harmless_known = 1;
            drift_ddmin_result_free(&dr);
            break;
        }
        res->set_start[res->n_sets] = res->n_culprits;
        for (size_t i = 0; i < nd; i++) {
            if (!dr.culprit[i]) continue;
            res->culprits[res->n_culprits++].diff = i;
            universe[i] = 0;
        }
        res->set_len[res->n_sets] = res->n_culprits - res->set_start[res->n_sets];
        res->n_sets++;
        drift_ddmin_result_free(&dr);
        if (o->on_set) o->on_set(res, res->n_sets - 1, o->event_user);
        int any = 0;
        for (size_t i = 0; i < nd; i++) any |= universe[i];
        if (!any) {
            res->harmless_known = 1; /* nothing left: no harmless difference */
            break;
        }
        if (!o->all) break;
    }
    /* Each culprit's own effect: applied alone to the good plan, and every
     * other difference without it. With one difference those are the bad
     * and the good plan, already replayed. */
    s.phase = "culprit effects: replay step";
    s.phase_total = (long)s.n_steps * 2 * (long)(nd == 1 ? 0 : res->n_culprits);
    s.phase_done = 0;
    for (size_t c = 0; c < res->n_culprits; c++) {
        drift_culprit_effect *e = &res->culprits[c];
        if (nd == 1) {
            e->metric = bad_metric;
            e->metric_without = good_vs_ref;
            snprintf(e->first_divergent, sizeof e->first_divergent, "%s", bad_first);
            e->floor_units = drift_metrics_floor_ratio(e->metric, floor_metric);
            continue;
        }
        memset(mask, 0, nd);
        mask[e->diff] = 1;
        drift_plan p;
        if ((rc = drift_bisect_apply(o->good, o->bad, &s.m->table, diffs, nd, mask, &p, err))) goto done;
        rc = run_plan(&s, &p, 0, s.ref, NULL, 0, &e->metric, NULL, err);
        if (!rc) rc = first_divergent(&s, &p, e->first_divergent, sizeof e->first_divergent, err);
        drift_plan_free(&p);
        if (rc) goto done;
        memset(mask, 1, nd);
        mask[e->diff] = 0;
        if ((rc = drift_bisect_apply(o->good, o->bad, &s.m->table, diffs, nd, mask, &p, err))) goto done;
        rc = run_plan(&s, &p, 0, s.ref, NULL, 0, &e->metric_without, NULL, err);
        drift_plan_free(&p);
        if (rc) goto done;
        e->floor_units = drift_metrics_floor_ratio(e->metric, floor_metric);
    }
    /* A one-member set whose every-other-difference replay stays within the
     * threshold: the rest are harmless. */
    if (!res->harmless_known && res->n_sets == 1 && res->set_len[0] == 1 &&
        !(res->culprits[0].metric_without > s.threshold)) {
        for (size_t i = 0; i < nd; i++) res->harmless[i] = i != res->culprits[0].diff;
        res->harmless_known = 1;
    }
    /* The fix: the bad plan with the culprits taken back from the good plan,
     * as an edit of the user's plan (their globs kept); one replay verifies it,
     * none when it compiles to the good plan. */
    if (o->fix && res->n_culprits > 0) {
        s.phase = "verifying the fix: step";
        s.phase_done = 0;
        s.phase_total = (long)s.n_steps * (o->ref == DRIFT_BISECT_REF_GOOD ? 1 : 2); /* with ref rollout the good plan again */
        size_t *cl = drift_malloc(res->n_culprits * sizeof *cl);
        if (!cl) { rc = drift_err_set(err, DRIFT_E_NOMEM, "bisect", "out of memory"); goto done; }
        for (size_t c = 0; c < res->n_culprits; c++) cl[c] = res->culprits[c].diff;
        for (int keep_globs = 1; keep_globs >= 0; keep_globs--) {
            if (res->has_fix) drift_plan_free(&res->fix_plan);
            res->has_fix = 0;
            if ((rc = drift_bisect_fix_edit(o->good, o->bad, diffs, nd, cl, res->n_culprits, keep_globs, &res->fix_plan, err)))
                break;
            res->has_fix = 1;
            res->fix_reverts_globs = keep_globs;
            snprintf(res->fix_plan.name, sizeof res->fix_plan.name, "%.100s_fixed", o->bad->name[0] ? o->bad->name : "bad");
            drift_site_metrics fm, gm;
            memset(&gm, 0, sizeof gm); /* ref good: the good output is the reference, 0 by definition */
            int same = 0;
            if ((rc = same_as_good(&s, &res->fix_plan, &same, err))) break;
            if (same) {
                res->fix_metric = good_vs_ref;
                memset(&fm, 0, sizeof fm);
                if (o->ref != DRIFT_BISECT_REF_GOOD &&
                    (rc = run_plan_all(&s, o->good, 0, s.ref, NULL, 0, &good_vs_ref, &gm, NULL, NULL, PREFIX_RESUME, NULL, err)))
                    break;
                fm = gm;
            } else {
                if ((rc = run_plan_all(&s, &res->fix_plan, 0, s.ref, NULL, 0, &res->fix_metric, &fm, NULL, NULL, PREFIX_RESUME, NULL, err)))
                    break;
                if (o->ref != DRIFT_BISECT_REF_GOOD &&
                    (rc = run_plan_all(&s, o->good, 0, s.ref, NULL, 0, &good_vs_ref, &gm, NULL, NULL, PREFIX_RESUME, NULL, err)))
                    break;
            }
            res->fix_output_mean_abs_diff = fm.mean_abs_diff;
            res->good_output_mean_abs_diff = gm.mean_abs_diff;
            res->fix_verified = !(res->fix_metric > s.threshold) && !isnan(res->fix_metric);
            /* a glob revert that does not verify: the culprits' exact names instead */
            if (res->fix_verified || !o->granularity_param) break;
        }
        free(cl);
        if (rc) goto done;
    }
done:
    s.phase = NULL;
    res->replays = s.replays;
    res->prefix_on = s.prefix_on;
    for (int q = 0; q < 2; q++) {
        res->prefix_boundaries += (size_t)s.src[q].n_bounds;
        for (int64_t i = 0; s.src[q].snap && i < s.n_steps * s.src[q].n_bounds; i++)
            res->prefix_bytes += drift_exec_snapshot_bytes(s.src[q].snap[i]);
    }
    res->prefix_candidates = s.prefix_candidates;
    res->prefix_reused = s.prefix_reused;
    for (int i = 0; i < MAX_SLOTS; i++) res->values_adopted += drift_exec_cache_adopted(s.cache[i]);
    res->prefix_skipped_fraction = s.prefix_live > 0 ? (double)s.prefix_skipped / (double)s.prefix_live : 0.0;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    res->seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (good_out) {
        for (int64_t k = 0; k < s.n_steps; k++) free(good_out[k]);
        free(good_out);
    }
    free(universe);
    free(mask);
    session_free(&s);
    drift_replay_devices_free(devs, n_dev);
    pthread_mutex_destroy(&s.log_mu);
    return rc;
}
