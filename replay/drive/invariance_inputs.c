/* drift invariance: the recorded step and the batches built from it
 * (invariance_internal.h). */
#include "replay/drive/invariance_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "formats/dtype.h"
#include "replay/analysis/metrics.h"
#include "replay/capture/aten_model.h"

static const char *const INPUT_SITE[DRIFT_INPUT_COUNT] = {"input:latents:pre_cast", "input:cond:pre_cast",
                                                           "input:timestep:pre_cast"};
static const char *const INPUT_NAME[DRIFT_INPUT_COUNT] = {"latents", "cond", "timestep"};

/* ---- the recorded step ------------------------------------------------------ */

void drift_inv_recorded_free(drift_inv_recorded *r) {
    for (int i = 0; i < DRIFT_INV_MAX_INPUTS; i++) free(r->v[i]);
    memset(r, 0, sizeof *r);
}

/* The stored record of `site` (value id) at step: its values into *v (caller frees), its info. */
static int read_record(drift_trace_reader *rd, const char *path, const char *site, long id, int64_t step,
                       drift_trace_site_info *info, float **v, drift_err *err) {
    *v = NULL;
    int rc = drift_trace_reader_site(rd, (size_t)id, info, err);
    if (rc) return rc;
    int64_t n_rec = info->n_records, rec = -1;
    drift_trace_index *rows = drift_malloc((size_t)(n_rec ? n_rec : 1) * sizeof *rows);
    if (!rows) return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory reading the index");
    if (n_rec && (rc = drift_trace_read_index(rd, (size_t)id, 0, n_rec, rows, err))) { free(rows); return rc; }
    for (int64_t r = 0; r < n_rec && rec < 0; r++)
        if (rows[r].step == step && rows[r].stored) rec = r;
    free(rows);
    if (rec < 0)
        return drift_err_set(err, DRIFT_E_INPUT, path, "step %lld has no stored record of '%s'", (long long)step, site);
    *v = drift_malloc((size_t)(info->numel ? info->numel : 1) * sizeof(float));
    if (!*v) return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
    return drift_trace_read_record_f32(rd, (size_t)id, rec, *v, (size_t)info->numel, err);
}

/* Slot k from the stored record of `site` (value id) at step; its dim 0 is the batch. */
static int read_slot(drift_trace_reader *rd, const char *path, const char *site, long id, int64_t step, int k,
                     drift_inv_recorded *out, drift_err *err) {
    drift_trace_site_info info;
    int rc = drift_trace_reader_site(rd, (size_t)id, &info, err);
    if (rc) return rc;
    if (info.ndim < 1 || info.shape[0] < 1 || info.numel % info.shape[0])
        return drift_err_set(err, DRIFT_E_INPUT, path, "site '%s': shape has no batch dimension", site);
    if (out->batch && info.shape[0] != out->batch)
        return drift_err_set(err, DRIFT_E_INPUT, path, "site '%s': batch %lld, the latents have %d", site,
                             (long long)info.shape[0], out->batch);
    out->batch = (int)info.shape[0];
    out->dt[k] = info.dtype;
    out->ndim[k] = info.ndim;
    memcpy(out->shape[k], info.shape, sizeof out->shape[k]);
    out->row[k] = info.numel / info.shape[0];
    if ((rc = read_record(rd, path, site, id, step, &info, &out->v[k], err))) return rc;
    out->present[k] = 1;
    return DRIFT_OK;
}

/* Element j of list l at step: its recorded site's record, else the trace's /buffers copy (m's);
 * values into *v (caller frees), dims into *nd, shape, *numel, *dt. */
static int read_element(drift_trace_reader *rd, const char *path, int64_t step, const drift_model *m,
                        const drift_aten_list *l, int j, float **v, int *nd, int64_t *shape, int64_t *numel,
                        drift_dtype *dt, drift_err *err) {
    char site[DRIFT_MAX_FQN + 48], buf[DRIFT_MAX_FQN + 32];
    snprintf(site, sizeof site, "input:%s.%d:pre_cast", l->name, j);
    snprintf(buf, sizeof buf, "input:%s.%d", l->name, j);
    *v = NULL;
    long id = drift_trace_reader_find_site(rd, site);
    if (id >= 0) {
        drift_trace_site_info info;
        int rc = read_record(rd, path, site, id, step, &info, v, err);
        *nd = info.ndim, *numel = info.numel, *dt = info.dtype;
        memcpy(shape, info.shape, sizeof info.shape);
        return rc;
    }
    const drift_hostset *bs = m->buffers[DRIFT_BUF_RECORDED];
    const drift_host_tensor *t = bs ? drift_hostset_find(bs, buf) : NULL;
    if (!t || !t->f32)
        return drift_err_set(err, DRIFT_E_INPUT, path, "list input '%s' (%d elements): element %d has neither a stored "
                             "record of '%s' nor /buffers/%s", l->name, l->count, j, site, buf);
    if (!(*v = drift_malloc((size_t)(t->numel ? t->numel : 1) * sizeof **v)))
        return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
    memcpy(*v, t->f32, (size_t)t->numel * sizeof **v);
    *nd = t->ndim, *numel = t->numel, *dt = DRIFT_F32;
    memcpy(shape, t->shape, (size_t)t->ndim * sizeof *shape);
    return DRIFT_OK;
}

/* A list of samples (user inputs NAME.0 .. NAME.(count-1), one tensor per sample: WanAnimate2's
 * hidden_states) into slot k as the one input "input:NAME" of shape [count, ...] that the
 * re-batched graph takes (aten_listin.c): element j is row j. */
static int read_list(drift_trace_reader *rd, const char *path, int64_t step, const drift_model *m,
                     const drift_aten_list *l, int k, drift_inv_recorded *out, drift_err *err) {
    snprintf(out->name[k], sizeof out->name[k], "input:%s", l->name);
    for (int j = 0; j < l->count; j++) {
        int nd = 0, rc;
        int64_t shape[DRIFT_MAX_DIMS], numel = 0;
        drift_dtype dt = DRIFT_F32;
        float *v = NULL;
        rc = read_element(rd, path, step, m, l, j, &v, &nd, shape, &numel, &dt, err);
        if (!rc && j == 0) {
            if (nd + 1 > DRIFT_MAX_DIMS) rc = drift_err_set(err, DRIFT_E_INPUT, path, "list input '%s': %d dims", l->name, nd);
            else if (!(out->v[k] = drift_malloc((size_t)(numel > 0 ? numel * l->count : 1) * sizeof(float))))
                rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
            if (!rc) {
                out->dt[k] = dt;
                out->ndim[k] = nd + 1;
                out->shape[k][0] = l->count;
                memcpy(out->shape[k] + 1, shape, (size_t)nd * sizeof *shape);
                out->row[k] = numel;
                out->present[k] = 1;
            }
        } else if (!rc && (numel != out->row[k] || nd + 1 != out->ndim[k])) {
            rc = drift_err_set(err, DRIFT_E_INPUT, path, "list input '%s': element %d has %lld elements, element 0 %lld: "
                               "only a list of samples of one shape is re-batched", l->name, j, (long long)numel,
                               (long long)out->row[k]);
        }
        if (!rc) memcpy(out->v[k] + (size_t)(j * out->row[k]), v, (size_t)numel * sizeof(float));
        free(v);
        if (rc) return rc;
    }
    return DRIFT_OK;
}

/* The list of samples of m (lists[0..n)) whose element buffer v ("input:NAME.j") is, -1 if none. */
static int list_of(const drift_value *v, const drift_aten_list *lists, int n) {
    for (int f = 0; f < n; f++) {
        const size_t len = strlen(lists[f].name);
        if (!strncmp(v->name, "input:", 6) && !strncmp(v->name + 6, lists[f].name, len) && v->name[6 + len] == '.' &&
            v->name[7 + len] && strspn(v->name + 7 + len, "0123456789") == strlen(v->name + 7 + len))
            return f;
    }
    return -1;
}

/* Graph input buffer v ("input:NAME") into slot k: its record at step, else the trace's /buffers copy. */
static int read_one(drift_trace_reader *rd, const char *path, int64_t step, const drift_model *m, const drift_value *v,
                    const char *site, int k, drift_inv_recorded *out, drift_err *err) {
    snprintf(out->name[k], sizeof out->name[k], "%s", v->name);
    long id = drift_trace_reader_find_site(rd, site);
    if (id >= 0) return read_slot(rd, path, site, id, step, k, out, err);
    const drift_hostset *bs = m->buffers[DRIFT_BUF_RECORDED];
    const drift_host_tensor *t = bs ? drift_hostset_find(bs, v->name) : NULL;
    if (!t || t->numel != v->numel || !t->f32)
        return drift_err_set(err, DRIFT_E_INPUT, path, "input '%s': neither a stored record of '%s' nor /buffers/%s",
                             v->name, site, v->name);
    out->dt[k] = DRIFT_F32;
    out->ndim[k] = v->ndim;
    memcpy(out->shape[k], v->shape, sizeof out->shape[k]);
    out->row[k] = v->numel / v->shape[0];
    if (!(out->v[k] = drift_malloc((size_t)v->numel * sizeof(float))))
        return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
    memcpy(out->v[k], t->f32, (size_t)v->numel * sizeof(float));
    out->present[k] = 1;
    return DRIFT_OK;
}

/* A captured graph's other per-sample inputs (its "input:NAME" buffers whose dim 0
 * is the batch): recorded per step, else the trace's /buffers copy. */
static int read_other_inputs(drift_trace_reader *rd, const char *path, int64_t step, const drift_model *m,
                             const drift_aten_list *lists, int n_lists, drift_inv_recorded *out, drift_err *err) {
    for (int i = 0; i < drift_graph_count(m->sem); i++) {
        const drift_value *v = drift_graph_value(m->sem, i);
        char site[DRIFT_MAX_FQN + 32];
        if (v->kind != DRIFT_VAL_BUFFER || !drift_capture_step_input_site(v->name, site, sizeof site)) continue;
        const int f = list_of(v, lists, n_lists);
        const int listed = f >= 0 && lists[f].count == out->batch; /* a list of this batch's samples: stacked */
        if (listed && strcmp(v->name + strlen(v->name) - 2, ".0")) continue; /* read with element 0 */
        if (!listed && (v->ndim < 1 || v->shape[0] != out->batch)) continue; /* no batch dim: the same at every batch */
        if (out->n == DRIFT_INV_MAX_INPUTS)
            return drift_err_set(err, DRIFT_E_UNSUPPORTED, path, "more than %d per-sample inputs",
                                 DRIFT_INV_MAX_INPUTS - DRIFT_INPUT_COUNT);
        int rc = listed ? read_list(rd, path, step, m, &lists[f], out->n++, out, err)
                        : read_one(rd, path, step, m, v, site, out->n++, out, err);
        if (rc) return rc;
    }
    return DRIFT_OK;
}

/* A captured graph without a latents input: the error, naming the inputs it has. */
static int no_latents(const char *path, const drift_model *m, const char *want, drift_err *err) {
    char names[512] = "";
    size_t len = 0;
    for (int i = 0; i < drift_graph_count(m->sem) && len < sizeof names; i++) {
        const drift_value *v = drift_graph_value(m->sem, i);
        const char *nm = v->kind == DRIFT_VAL_INPUT                                      ? v->name
                         : v->kind == DRIFT_VAL_BUFFER && !strncmp(v->name, "input:", 6) ? v->name + 6
                                                                                         : NULL;
        if (nm) len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "", nm);
    }
    if (want)
        return drift_err_set(err, DRIFT_E_USAGE, "--batch-input",
                             "'%s' is not a per-sample input of the captured graph of %s (one whose dim 0 is the "
                             "recorded batch; its inputs: %s)", want, path, names[0] ? names : "none");
    return drift_err_set(err, DRIFT_E_INPUT, path,
                         "the captured graph has no input with the role 'latents' and no per-sample input with "
                         "fractional values to put the sample in a batch along dim 0 (its inputs: %s): give "
                         "--batch-input NAME; a model that takes its samples as a list or packs them into one "
                         "sequence has no batch dim to re-batch",
                         names[0] ? names : "none");
}

/* 1 if slot k holds a value that is not an integer (a float input, not ids or a mask). */
static int fractional(const drift_inv_recorded *r, int k) {
    const int64_t n = r->row[k] * r->shape[k][0];
    for (int64_t e = 0; e < n; e++)
        if (r->v[k][e] != floorf(r->v[k][e])) return 1;
    return 0;
}

/* Without a latents input: the stand-in's name into name (want, else the first input buffer
 * with fractional values; one whose dim 0 is out->batch where a timestep set it) and the recorded
 * batch (its dim 0) into out->batch. */
static int first_batch_input(drift_trace_reader *rd, const char *path, int64_t step, const drift_model *m,
                             const drift_aten_list *lists, int n_lists, const char *want, char *name, size_t cap,
                             drift_inv_recorded *out, drift_err *err) {
    for (int i = 0; i < drift_graph_count(m->sem); i++) {
        const drift_value *v = drift_graph_value(m->sem, i);
        char site[DRIFT_MAX_FQN + 32], nm[DRIFT_MAX_FQN + 8];
        if (v->kind != DRIFT_VAL_BUFFER || !drift_capture_step_input_site(v->name, site, sizeof site)) continue;
        /* a list of samples (one tensor each) is one input "input:NAME" [count, ...] (read_list) */
        const int f = list_of(v, lists, n_lists);
        const int listed = f >= 0 && (!out->batch || lists[f].count == out->batch);
        if (listed && strcmp(v->name + strlen(v->name) - 2, ".0")) continue;
        if (!listed && (v->ndim < 1 || v->shape[0] < 1 || (out->batch && v->shape[0] != out->batch))) continue;
        snprintf(nm, sizeof nm, listed ? "input:%s" : "%s", listed ? lists[f].name : v->name);
        int pick;
        if (want) {
            pick = !strcmp(nm, want) || !strcmp(nm + 6, want);
        } else {
            drift_inv_recorded tmp;
            memset(&tmp, 0, sizeof tmp);
            int rc = listed ? read_list(rd, path, step, m, &lists[f], 0, &tmp, err) : read_one(rd, path, step, m, v, site, 0, &tmp, err);
            pick = !rc && fractional(&tmp, 0);
            drift_inv_recorded_free(&tmp);
            if (rc) return rc;
        }
        if (pick) {
            snprintf(name, cap, "%s", nm);
            if (!out->batch) out->batch = listed ? lists[f].count : (int)v->shape[0];
            return DRIFT_OK;
        }
    }
    return no_latents(path, m, want, err);
}

/* A captured graph without a latents input (T5FilmDecoder's decoder_input_tokens, MiniMax's
 * inputs_embeds): one of its per-sample inputs stands in for the latents in slot 0 (seeded in
 * the pad rows, nudged for the noise floor): `want` ("NAME" or "input:NAME"), else the first
 * with fractional values, as `drift replay`'s noise floor picks it. */
static int stand_in_latents(const char *path, const char *name, drift_inv_recorded *r, drift_err *err) {
    int k = -1;
    for (int i = DRIFT_INPUT_COUNT; i < r->n && k < 0; i++)
        if (r->present[i] && !strcmp(r->name[i], name)) k = i;
    if (k < 0) return drift_err_set(err, DRIFT_E_INPUT, path, "input '%s': not read", name);
    const int L = DRIFT_INPUT_LATENTS;
    free(r->v[L]);
    snprintf(r->name[L], sizeof r->name[L], "%s", r->name[k]);
    r->present[L] = 1;
    r->dt[L] = r->dt[k];
    r->ndim[L] = r->ndim[k];
    memcpy(r->shape[L], r->shape[k], sizeof r->shape[L]);
    r->row[L] = r->row[k];
    r->v[L] = r->v[k];
    r->whole[L] = 0;
    for (int i = k; i + 1 < r->n; i++) { /* close the gap */
        snprintf(r->name[i], sizeof r->name[i], "%s", r->name[i + 1]);
        r->present[i] = r->present[i + 1];
        r->dt[i] = r->dt[i + 1];
        r->ndim[i] = r->ndim[i + 1];
        memcpy(r->shape[i], r->shape[i + 1], sizeof r->shape[i]);
        r->row[i] = r->row[i + 1];
        r->v[i] = r->v[i + 1];
        r->whole[i] = r->whole[i + 1];
        r->bdim[i] = r->bdim[i + 1];
    }
    r->n--;
    r->v[r->n] = NULL;
    r->present[r->n] = 0;
    return DRIFT_OK;
}

int drift_inv_read_inputs(drift_trace_reader *rd, const char *path, int64_t step, const drift_model *m,
                          const char *batch_input, drift_inv_recorded *out, drift_err *err) {
    memset(out, 0, sizeof *out);
    out->n = DRIFT_INPUT_COUNT;
    for (int i = 0; i < DRIFT_INV_MAX_INPUTS; i++) out->dt[i] = DRIFT_F32;
    int rc, stand_in = 0;
    for (int i = 0; i < DRIFT_INPUT_COUNT; i++) {
        snprintf(out->name[i], sizeof out->name[i], "%s", INPUT_NAME[i]);
        long id = drift_trace_reader_find_site(rd, INPUT_SITE[i]);
        if (id < 0 && i == DRIFT_INPUT_LATENTS && m->captured && !drift_capture_model_takes_input(m, i)) {
            stand_in = 1;
            continue;
        }
        if (id < 0 && i != DRIFT_INPUT_LATENTS && !drift_capture_model_takes_input(m, i)) continue;
        if (id < 0)
            return drift_err_set(err, DRIFT_E_INPUT, path, "site '%s' is missing: invariance needs the boundary inputs",
                                 INPUT_SITE[i]);
        if ((rc = read_slot(rd, path, INPUT_SITE[i], id, step, i, out, err))) return rc;
    }
    if (batch_input && !stand_in)
        return drift_err_set(err, DRIFT_E_USAGE, "--batch-input",
                             "%s has a latents input, which holds the sample: --batch-input is for a captured graph "
                             "without one", path);
    if (!m->captured) return DRIFT_OK;
    char name[DRIFT_MAX_FQN + 8] = "";
    drift_aten_list lists[16]; /* lists of samples: one input each, as the re-batched graph takes them */
    const int n_lists = drift_capture_model_lists(m, lists, 16);
    if (n_lists < 0) return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
    if (stand_in && (rc = first_batch_input(rd, path, step, m, lists, n_lists, batch_input, name, sizeof name, out, err)))
        return rc;
    if ((rc = read_other_inputs(rd, path, step, m, lists, n_lists, out, err))) return rc;
    return stand_in ? stand_in_latents(path, name, out, err) : DRIFT_OK;
}

int drift_inv_keep_fixed_inputs(drift_inv_recorded *r, const drift_model *m1, const char *path, drift_err *err) {
    if (!m1->captured || r->batch == 1) return DRIFT_OK;
    if (!strncmp(r->name[DRIFT_INPUT_LATENTS], "input:", 6)) { /* the stand-in for the latents must hold the batch */
        const int id = drift_graph_find_leaf(m1->sem, DRIFT_VAL_BUFFER, r->name[DRIFT_INPUT_LATENTS]);
        const drift_value *v = id >= 0 ? drift_graph_value(m1->sem, id) : NULL;
        if (v && v->ndim >= 1 && v->shape[0] == r->batch)
            return drift_err_set(err, DRIFT_E_INPUT, path,
                                 "input '%s' holds the sample but the re-batching found that its dim 0 (%d) is no "
                                 "batch: give --batch-input with a per-sample input",
                                 r->name[DRIFT_INPUT_LATENTS] + 6, r->batch);
    }
    if (r->present[DRIFT_INPUT_TIMESTEP]) { /* a table of noise levels the probe kept whole (MiniMax-H3) */
        const int id = drift_graph_find_leaf(m1->sem, DRIFT_VAL_INPUT, r->name[DRIFT_INPUT_TIMESTEP]);
        const drift_value *v = id >= 0 ? drift_graph_value(m1->sem, id) : NULL;
        if (v && v->ndim >= 1 && v->shape[0] == r->batch) r->whole[DRIFT_INPUT_TIMESTEP] = 1;
    }
    for (int k = DRIFT_INPUT_COUNT; k < r->n; k++) {
        const int id = r->present[k] ? drift_graph_find_leaf(m1->sem, DRIFT_VAL_BUFFER, r->name[k]) : -1;
        const drift_value *v = id >= 0 ? drift_graph_value(m1->sem, id) : NULL;
        if (!v || v->ndim < 1 || v->shape[0] != r->batch) continue;
        int d = -1; /* the dim m1 re-batched (to 1): none keeps it whole */
        for (int i = 1; i < v->ndim && i < r->ndim[k] && d < 0; i++)
            if (v->shape[i] != r->shape[k][i] && r->shape[k][i] == r->batch) d = i;
        if (d < 0) r->whole[k] = 1;
        else r->bdim[k] = d;
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
 * DRIFT_INV_ROW_SEEDED k-th pad with seed, or DRIFT_INV_ROW_UNCOND of `sample`). */
int drift_inv_make_inputs(const drift_inv_recorded *rc_, int sample, const int *rows, const int *pad_k, int B, uint64_t seed,
                       int nudge, drift_dtype nudge_dt, drift_hostset **out, drift_err *err) {
    *out = NULL;
    drift_hostset *hs = NULL;
    int rc = drift_hostset_create(&hs, err);
    float *buf = NULL;
    for (int i = 0; i < rc_->n && !rc; i++) {
        if (!rc_->present[i]) continue;
        if (rc_->whole[i]) { /* not per sample: as recorded at every batch */
            rc = drift_hostset_add(hs, rc_->name[i], rc_->dt[i], rc_->ndim[i], rc_->shape[i], rc_->v[i], NULL, NULL, err);
            continue;
        }
        /* the batch in dim d (0 but for [layers, B, L, D]): each of the outer blocks holds B rows of inner */
        const int d = rc_->bdim[i];
        int64_t outer = 1, inner = 1, shape[DRIFT_MAX_DIMS];
        for (int k = 0; k < rc_->ndim[i]; k++) {
            if (k < d) outer *= rc_->shape[i][k];
            else if (k > d) inner *= rc_->shape[i][k];
        }
        const int64_t B0 = rc_->shape[i][d];
        buf = drift_malloc((size_t)(outer * B * inner) * sizeof *buf);
        if (!buf) { rc = drift_err_set(err, DRIFT_E_NOMEM, "invariance", "out of memory"); break; }
        for (int64_t o = 0; o < outer; o++)
            for (int p = 0; p < B; p++) {
                float *dst = buf + (size_t)((o * B + p) * inner);
                const int src = rows[p] >= 0 ? rows[p] : sample;
                memcpy(dst, rc_->v[i] + (size_t)((o * B0 + src) * inner), (size_t)inner * sizeof *dst);
                if (rows[p] == DRIFT_INV_ROW_SEEDED && i == DRIFT_INPUT_LATENTS) {
                    uint64_t s = seed * 0x100000001b3ull + (uint64_t)pad_k[p];
                    for (int64_t k = 0; k < inner; k++) dst[k] = gauss(&s);
                }
                if (rows[p] == DRIFT_INV_ROW_UNCOND && i == DRIFT_INPUT_COND) memset(dst, 0, (size_t)inner * sizeof *dst);
            }
        /* one latent of position 0 moved by one ULP of the forward dtype: the noise floor (as bisect) */
        if (nudge && i == DRIFT_INPUT_LATENTS) {
            const int64_t m = inner / 2; /* the latents hold the batch in dim 0: position 0 is the first block */
            buf[m] = drift_round_to(buf[m], rc_->dt[i]);
            drift_metrics_nudge_ulp_f32(buf + m, 1, nudge_dt, 1.0, 12345);
        }
        memcpy(shape, rc_->shape[i], sizeof shape);
        shape[d] = B;
        rc = drift_hostset_add(hs, rc_->name[i], rc_->dt[i], rc_->ndim[i], shape, buf, NULL, NULL, err);
        free(buf);
        buf = NULL;
    }
    if (rc) { drift_hostset_free(hs); return rc; }
    *out = hs;
    return DRIFT_OK;
}

int drift_inv_pick_step(drift_trace_reader *rd, const char *path, int64_t want, int64_t *step, drift_err *err) {
    size_t n = 0;
    const drift_trace_step *st = drift_trace_reader_steps(rd, &n);
    if (n == 0) return drift_err_set(err, DRIFT_E_INPUT, path, "the trace has no committed step");
    if (want < 0) { *step = st[0].step; return DRIFT_OK; }
    for (size_t i = 0; i < n; i++)
        if (st[i].step == want) { *step = want; return DRIFT_OK; }
    return drift_err_set(err, DRIFT_E_USAGE, "--step", "step %lld is not a committed step of %s (first %lld, last %lld)",
                         (long long)want, path, (long long)st[0].step, (long long)st[n - 1].step);
}

int drift_inv_read_composition(drift_trace_reader *rd, int64_t step, drift_invariance_report *rep, drift_err *err) {
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

/* Fills c's rows for kind/B/pos; pad rows numbered for their seeds. */
void drift_inv_layout(const drift_inv_config *c, int sample, int rec_batch, int *rows, int *pad_k) {
    int k = 0;
    for (int p = 0; p < c->batch; p++) {
        pad_k[p] = 0;
        if (c->kind != DRIFT_INV_BATCH) {
            rows[p] = (p == 0) ? sample : DRIFT_INV_ROW_UNCOND;
            continue;
        }
        if (p == c->position) { rows[p] = sample; continue; }
        if (rec_batch > 1) {
            int j = k % (rec_batch - 1); /* the other recorded samples, cycled */
            rows[p] = j >= sample ? j + 1 : j;
        } else {
            rows[p] = DRIFT_INV_ROW_SEEDED;
        }
        pad_k[p] = k++;
    }
}
