/* Captured graphs as models (aten_model.h). */
#include "replay/capture/aten_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "formats/infile.h"
#include "formats/safetensors.h"
#include "replay/capture/aten_graph.h"
#include "replay/capture/aten_internal.h" /* the document's inline constants */
#include "replay/capture/aten_listin.h"
#include "replay/capture/aten_unroll.h"

int drift_capture_is_spec(const char *spec) {
    return spec && (!strcmp(spec, "graph") || !strncmp(spec, "graph:", 6));
}

/* The document's inline lifted constants ("constants": {NAME: {shape, dtype,
 * data}}) that m's graph reads, as buffers "constant:NAME" in a new set
 * m->buffers[RECORDED] (load_buffers takes them from there). A complex
 * constant's data are (real, imag) pairs: shape gets a trailing 2, as its leaf. */
static int inline_constants(drift_model *m, const drift_aten_graph *g, const char *source, drift_err *err) {
    if (!g->constants || !g->constants->n_members) return DRIFT_OK;
    drift_hostset *b = NULL;
    int rc = drift_hostset_create(&b, err);
    float *v = NULL;
    double *v64 = NULL;
    for (size_t i = 0; !rc && i < g->constants->n_members; i++) {
        const drift_json_member *mb = &g->constants->members[i];
        char name[DRIFT_MAX_FQN + 16];
        if (snprintf(name, sizeof name, "constant:%s", mb->key) >= (int)sizeof name) continue;
        int leaf = -1;
        for (int k = 0; k < drift_graph_count(m->sem) && leaf < 0; k++) {
            const drift_value *x = drift_graph_value(m->sem, k);
            if (x->kind == DRIFT_VAL_BUFFER && !strcmp(x->name, name)) leaf = k;
        }
        if (leaf < 0) continue; /* a constant the graph does not read */
        const drift_value *x = drift_graph_value(m->sem, leaf);
        const drift_json_value *data = drift_json_object_get(&mb->value, "data");
        if (!data || data->type != DRIFT_JSON_ARRAY || (int64_t)data->n_items != x->numel) {
            rc = drift_err_set(err, DRIFT_E_INPUT, source, "constants.%s.data: expected an array of %lld numbers (its shape)",
                               mb->key, (long long)x->numel);
            break;
        }
        drift_free(v);
        if (!(v = drift_malloc((size_t)(x->numel ? x->numel : 1) * sizeof *v))) {
            rc = drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory");
            break;
        }
        /* an fp64 leaf (a complex128 constant's pairs) keeps the exact values too */
        const int f64 = x->dtype == DRIFT_F64;
        drift_free(v64);
        v64 = NULL;
        if (f64 && !(v64 = drift_malloc((size_t)(x->numel ? x->numel : 1) * sizeof *v64))) {
            rc = drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory");
            break;
        }
        for (int64_t e = 0; !rc && e < x->numel; e++) {
            const drift_json_value *it = &data->items[e];
            const drift_json_value *fl = it->type == DRIFT_JSON_OBJECT ? drift_json_object_get(it, "float") : NULL;
            double d = 0;
            if (it->type == DRIFT_JSON_NUMBER) d = it->number;
            else if (it->type == DRIFT_JSON_BOOL) d = (double)it->boolean;
            else if (fl && fl->type == DRIFT_JSON_STRING && !strcmp(fl->str, "nan")) d = NAN;
            else if (fl && fl->type == DRIFT_JSON_STRING && !strcmp(fl->str, "inf")) d = INFINITY;
            else if (fl && fl->type == DRIFT_JSON_STRING && !strcmp(fl->str, "-inf")) d = -INFINITY;
            else
                rc = drift_err_set(err, DRIFT_E_INPUT, source, "constants.%s.data[%lld]: expected a number", mb->key,
                                   (long long)e);
            v[e] = (float)d;
            if (f64) v64[e] = d;
        }
        if (!rc) rc = drift_hostset_add(b, name, f64 ? DRIFT_F64 : DRIFT_F32, x->ndim, x->shape, v, v64, NULL, err);
    }
    drift_free(v);
    drift_free(v64);
    if (rc) {
        drift_hostset_free(b);
        return rc;
    }
    drift_hostset_free(m->buffers[DRIFT_BUF_RECORDED]);
    m->buffers[DRIFT_BUF_RECORDED] = b;
    return DRIFT_OK;
}

/* drift_aten_lower_opts.recorded_shape over a trace reader. */
static int trace_site_shape(void *user, const char *site, int *ndim, int64_t *shape) {
    drift_trace_reader *r = user;
    long id = drift_trace_reader_find_site(r, site);
    if (id < 0) return 0;
    drift_trace_site_info si;
    drift_err e;
    drift_err_clear(&e);
    if (drift_trace_reader_site(r, (size_t)id, &si, &e) || si.damaged) return 0;
    *ndim = si.ndim;
    memcpy(shape, si.shape, sizeof si.shape);
    return 1;
}

int drift_capture_model_create(const char *json, size_t len, const char *source, drift_model **out, drift_err *err) {
    return drift_capture_model_create_against(json, len, source, NULL, out, err);
}

static int create_model(const char *json, size_t len, const char *source, drift_trace_reader *r, int64_t rb_from,
                        int64_t rb_to, int compute_dv, const drift_model *nz, drift_model **out, drift_err *err);

int drift_capture_model_create_against(const char *json, size_t len, const char *source, drift_trace_reader *r,
                                       drift_model **out, drift_err *err) {
    return create_model(json, len, source, r, 0, 0, 0, NULL, out, err);
}

int drift_capture_model_rebatch(drift_model *base, int batch, drift_model **out, drift_err *err) {
    *out = NULL;
    if (!base->captured || !base->captured_json)
        return drift_err_set(err, DRIFT_E_INTERNAL, "rebatch", "not a captured model");
    int rc;
    if (base->rebatch_device_values == 0) { /* decide once: read the tables, or lower them as ops */
        rc = create_model(base->captured_json, base->captured_len, base->spec, NULL, base->cfg.batch, batch, 0, base, out, err);
        if (rc) {
            drift_err first = *err;
            drift_err_clear(err);
            if (create_model(base->captured_json, base->captured_len, base->spec, NULL, base->cfg.batch, batch, 1, base,
                             out, err)) {
                *err = first; /* the tables as recorded: the failure to report */
            } else {
                rc = DRIFT_OK;
                base->rebatch_device_values = 2;
            }
        } else {
            base->rebatch_device_values = 1;
        }
    } else {
        rc = create_model(base->captured_json, base->captured_len, base->spec, NULL, base->cfg.batch, batch,
                          base->rebatch_device_values == 2, base, out, err);
    }
    if (rc) {
        drift_err_prefix(err, "the captured graph at batch %d (recorded at %d)", batch, base->cfg.batch);
        return rc;
    }
    (*out)->cfg.batch = batch;
    return DRIFT_OK;
}

int drift_capture_model_set_count(drift_model *base, const char *node, int64_t count, drift_err *err) {
    for (int i = 0; i < base->rebatch_nz_n; i++)
        if (!strcmp(base->rebatch_nz_names[i], node)) {
            base->rebatch_nz_counts[i] = count;
            return DRIFT_OK;
        }
    const int n = base->rebatch_nz_n + 1;
    char **nn = drift_realloc(base->rebatch_nz_names, (size_t)n * sizeof *nn);
    if (nn) base->rebatch_nz_names = nn;
    int64_t *nc = nn ? drift_realloc(base->rebatch_nz_counts, (size_t)n * sizeof *nc) : NULL;
    if (nc) base->rebatch_nz_counts = nc;
    char *nm = nc ? drift_malloc(strlen(node) + 1) : NULL;
    if (!nm) return drift_err_set(err, DRIFT_E_NOMEM, "rebatch", "out of memory");
    memcpy(nm, node, strlen(node) + 1);
    base->rebatch_nz_names[n - 1] = nm;
    base->rebatch_nz_counts[n - 1] = count;
    base->rebatch_nz_n = n;
    return DRIFT_OK;
}

void drift_capture_model_clear_counts(drift_model *base) {
    for (int i = 0; i < base->rebatch_nz_n; i++) drift_free(base->rebatch_nz_names[i]);
    drift_free(base->rebatch_nz_names);
    drift_free(base->rebatch_nz_counts);
    base->rebatch_nz_names = NULL;
    base->rebatch_nz_counts = NULL;
    base->rebatch_nz_n = 0;
}

int drift_capture_nonzero_failure(const drift_err *err, char *node, size_t cap, int64_t *count) {
    const char *p = err && err->code ? strstr(err->msg, "(nonzero ") : NULL;
    if (!p || !cap) return 0;
    p += 9;
    const char *q = strstr(p, "): ");
    if (!q || (size_t)(q - p) >= cap) return 0;
    long long n = -1, rec = -1;
    if (sscanf(q + 3, "%lld non-zero elements where the recording had %lld", &n, &rec) != 2 || n < 0) return 0;
    memcpy(node, p, (size_t)(q - p));
    node[q - p] = 0;
    *count = n;
    return 1;
}

/* df, lf (gf's nodes) from ds, ls (gs's): by name, a copy NAME__bJ / NAME__cJ of an unrolled loop
 * taking NAME's; the chunks of rows of a split (its copies and their template) hold no batch (each
 * gets its own row count). 0, or -1 where a name is not gs's. */
static int map_dims(const drift_aten_graph *gf, const drift_aten_graph *gs, const int *ds, const unsigned char *ls,
                    int *df, unsigned char *lf) {
    const int nf = drift_aten_graph_node_count(gf);
    for (int k = 0; k < nf; k++) {
        char tmpl[512], copy[600];
        const char *nm = gf->nodes[k].name;
        const int kind = drift_aten_unroll_template(nm, tmpl, sizeof tmpl);
        int j = aten_find(gs, nm);
        if (j < 0 && kind) j = aten_find(gs, tmpl);
        if (j < 0) return -1;
        df[k] = ds[j];
        lf[k] = ls[j];
        snprintf(copy, sizeof copy, "%s__c1", nm);
        if (kind == 'c' || (!kind && aten_find(gf, copy) >= 0)) df[k] = 0;
    }
    df[nf] = ds[drift_aten_graph_node_count(gs)];
    return 0;
}

/* The probe passed on *g: a split over chunks of rows whose count did not change at the probe's
 * batch may at rb_to (chunks of 3 rows: 1 at batch 2 and 3, 2 at 4); *g, *dims and *lead become
 * the graph with its chunks unrolled at rb_to (each copy with its template's dims). */
static int chunk_loops(const char *json, size_t len, const char *source, int64_t rb_from, int64_t rb_to,
                       drift_aten_graph **g, int **dims, unsigned char **lead, drift_err *err) {
    char *fj = NULL;
    size_t fl = 0;
    int loops = 0, rc;
    drift_aten_graph *gf = NULL;
    int *df = NULL;
    unsigned char *lf = NULL;
    if ((rc = drift_aten_unroll(json, len, source, rb_from, rb_to, *dims, 1, &fj, &fl, &loops, err)) || !fj) return rc;
    if ((rc = drift_aten_graph_parse(fj, fl, source, &gf, err))) goto done;
    const int nf = drift_aten_graph_node_count(gf);
    df = drift_calloc((size_t)nf + 1, sizeof *df);
    lf = drift_calloc((size_t)nf + 1, 1);
    if (!df || !lf) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory");
        goto done;
    }
    if (map_dims(gf, *g, *dims, *lead, df, lf)) goto done; /* not the graph's own names: left as it is */
    drift_aten_graph_free(*g);
    drift_free(*dims);
    drift_free(*lead);
    *g = gf, *dims = df, *lead = lf;
    gf = NULL, df = NULL, lf = NULL;
done:
    drift_free(fj);
    drift_aten_graph_free(gf);
    drift_free(df);
    drift_free(lf);
    return rc;
}

/* The probe failed on *g (err): a loop over the samples unrolled at the recorded batch
 * (aten_unroll.c) is unrolled again, at rb_from + 1 for the probe and at rb_to for the
 * lowering; on success *g, *dims and *lead are the rb_to graph's (each copy of iteration 0
 * takes its template's batch dim), *orig the probe's error and err cleared; else err is left as
 * the probe said. */
static int unroll_loops(const char *json, size_t len, const char *source, int64_t rb_from, int64_t rb_to,
                        const drift_aten_lower_opts *lo, int lists, drift_aten_graph **g, int **dims, unsigned char **lead,
                        drift_err *orig, drift_err *err) {
    char *pj = NULL, *fj = NULL;
    size_t pl = 0, fl = 0;
    int loops = 0, rc;
    drift_err e;
    drift_err_clear(&e);
    drift_aten_graph *gp = NULL, *gf = NULL;
    int *dp = NULL, *df = NULL;
    unsigned char *lp = NULL, *lf = NULL;
    if (drift_aten_unroll(json, len, source, rb_from, rb_from + 1, *dims, 0, &pj, &pl, &loops, &e) || !pj) goto keep;
    if (drift_aten_graph_parse(pj, pl, source, &gp, &e)) goto keep;
    const int np = drift_aten_graph_node_count(gp);
    dp = drift_calloc((size_t)np + 1, sizeof *dp);
    lp = drift_calloc((size_t)np + 1, 1);
    if (!dp || !lp || drift_aten_rebatch_probe(gp, lo, rb_from, dp, lp, &e)) goto keep;
    if (drift_aten_unroll(json, len, source, rb_from, rb_to, *dims, 0, &fj, &fl, &loops, &e)) goto keep;
    if (drift_aten_graph_parse(fj ? fj : json, fj ? fl : len, source, &gf, &e)) goto keep;
    const int nf = drift_aten_graph_node_count(gf);
    df = drift_calloc((size_t)nf + 1, sizeof *df);
    lf = drift_calloc((size_t)nf + 1, 1);
    if (!df || !lf) goto keep;
    if (map_dims(gf, gp, dp, lp, df, lf)) goto keep;
    drift_aten_graph_free(*g);
    drift_free(*dims);
    drift_free(*lead);
    *g = gf, *dims = df, *lead = lf;
    gf = NULL, df = NULL, lf = NULL;
    *orig = *err;
    drift_err_clear(err);
    rc = DRIFT_OK;
    goto done;
keep:
    rc = err->code ? err->code : DRIFT_E_INPUT;
    if (e.code == DRIFT_E_NOMEM) *err = e, rc = DRIFT_E_NOMEM;
    else if (lists) { /* stacked lists of samples (aten_listin.c): their per-sample code must unroll */
        if (e.code) *err = e;
        else if (!err->code) drift_err_set(err, DRIFT_E_INPUT, source, "no loop over the samples ends in a join");
        drift_err_prefix(err, "the model takes its samples as lists, stacked into one input each, and their per-sample "
                              "code could not be run once per sample");
        rc = err->code;
    }
done:
    drift_free(pj);
    drift_free(fj);
    drift_aten_graph_free(gp);
    drift_aten_graph_free(gf);
    drift_free(dp);
    drift_free(lp);
    drift_free(df);
    drift_free(lf);
    return rc;
}

static int create_model(const char *json, size_t len, const char *source, drift_trace_reader *r, int64_t rb_from,
                        int64_t rb_to, int compute_dv, const drift_model *nz, drift_model **out, drift_err *err) {
    *out = NULL;
    drift_model *m = drift_calloc(1, sizeof *m);
    if (!m) return drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory");
    drift_param_table_init(&m->table);
    m->captured = 1;
    drift_aten_graph *g = NULL;
    int rc = drift_aten_graph_parse(json, len, source, &g, err);
    const char *dv = getenv("DRIFT_DEVICE_VALUES"); /* "0": compute them (docs/aten-graph.md "Device values") */
    drift_aten_lower_opts lo = {&m->captured_notes, r ? trace_site_shape : NULL, r, dv && !strcmp(dv, "0"), 0, 0,
                                NULL, NULL, NULL, NULL, NULL};
    int *dims = NULL;
    int64_t *counts = NULL;
    unsigned char *lead = NULL;
    drift_err probe_err; /* set when the graph lowered is the probe's failure with its loops unrolled */
    drift_err_clear(&probe_err);
    char *sj = NULL; /* the graph with its lists of samples stacked (aten_listin.c), or NULL */
    size_t sl = 0;
    const char *wj = json; /* the graph re-batched: json, or sj */
    size_t wl = len;
    if (!rc && rb_from > 0 && !(rc = drift_aten_list_stack(g, rb_from, &sj, &sl, err)) && sj) {
        drift_aten_graph_free(g);
        g = NULL;
        wj = sj, wl = sl;
        rc = drift_aten_graph_parse(wj, wl, source, &g, err);
    }
    if (!rc && rb_from > 0) { /* find each value's batch dim at a batch the capture did not see, then impose it */
        const int n = drift_aten_graph_node_count(g);
        dims = drift_calloc((size_t)n + 1, sizeof *dims);
        lead = drift_calloc((size_t)n + 1, 1);
        if (!dims || !lead) {
            drift_free(dims);
            drift_free(lead);
            rc = drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory");
            goto fail;
        }
        /* the tables the recording's GPU built from constants are stored at the recorded batch:
         * lowered as ops when that is what re-batches (LTX-Video's rope grid is repeated by it) */
        if (compute_dv) lo.compute_device_values = 1;
        /* lists of samples stacked: their per-sample code is a loop to unroll even where the probe passed
           (the other inputs may broadcast against the one sample) */
        if (((rc = drift_aten_rebatch_probe(g, &lo, rb_from, dims, lead, err)) && err->code != DRIFT_E_NOMEM) || (!rc && sj)) {
            /* before the lists' code is replicated the probe's dims say little (the other inputs broadcast
               against the one sample, or fail to): not known */
            for (int k = 0; sj && k <= n; k++) dims[k] = -1;
            rc = unroll_loops(wj, wl, source, rb_from, rb_to, &lo, sj != NULL, &g, &dims, &lead, &probe_err, err);
        } else if (!rc)
            rc = chunk_loops(wj, wl, source, rb_from, rb_to, &g, &dims, &lead, err);
        if (rc) {
            drift_err_prefix(err, "lowered at batch %lld to find each value's batch dim", (long long)rb_from + 1);
            drift_free(dims);
            drift_free(lead);
            goto fail;
        }
        lo.rebatch_from = rb_from;
        lo.rebatch_to = rb_to;
        lo.batch_dims_in = dims;
        lo.batch_lead = lead;
        if (nz && nz->rebatch_nz_n) { /* the nonzero counts of the data this batch runs on */
            const int nn = drift_aten_graph_node_count(g);
            if (!(counts = drift_malloc(((size_t)nn + 1) * sizeof *counts))) {
                drift_free(dims);
                drift_free(lead);
                rc = drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory");
                goto fail;
            }
            for (int k = 0; k <= nn; k++) counts[k] = -1;
            for (int i = 0; i < nz->rebatch_nz_n; i++) {
                const int k = aten_find(g, nz->rebatch_nz_names[i]);
                if (k >= 0) counts[k] = nz->rebatch_nz_counts[i];
            }
            lo.nonzero_counts = counts;
        }
    }
    if (!rc) rc = drift_aten_graph_lower_ex(g, &lo, &m->sem, err);
    if (rc && probe_err.code && err->code != DRIFT_E_NOMEM) { /* the loops unrolled did not lower: the probe's error */
        drift_err unrolled = *err; /* and where the unrolled program stops (HiDream: its MoE's routed slices) */
        *err = probe_err;
        drift_err_prefix(err, "lowered at batch %lld to find each value's batch dim", (long long)rb_from + 1);
        size_t k = strlen(err->msg);
        snprintf(err->msg + k, sizeof err->msg - k, "; with the loops over the samples unrolled it stops at %s",
                 unrolled.msg);
    }
    drift_free(dims);
    drift_free(lead);
    drift_free(counts);
    drift_free(sj);
    sj = NULL;
    if (rc) goto fail;
    snprintf(m->cfg.family, sizeof m->cfg.family, "graph");
    snprintf(m->spec, sizeof m->spec, "graph:%s", drift_aten_graph_model_class(g)[0] ? drift_aten_graph_model_class(g) : "captured");
    m->cfg.batch = 1;
    for (int i = 0; i < drift_graph_count(m->sem); i++) {
        const drift_value *v = drift_graph_value(m->sem, i);
        if (v->kind == DRIFT_VAL_PARAM &&
            (rc = drift_param_table_add(&m->table, v->name, v->ndim, v->shape, DRIFT_PARAM_WRAP_ROOT, err)))
            goto fail;
        if (v->kind == DRIFT_VAL_INPUT && !strcmp(v->name, "latents") && v->ndim > 0) m->cfg.batch = (int)v->shape[0];
    }
    if ((rc = inline_constants(m, g, source, err))) goto fail;
    drift_aten_graph_free(g);
    if (!(m->captured_json = drift_malloc(len + 1))) {
        drift_model_free(m);
        return drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory");
    }
    memcpy(m->captured_json, json, len);
    m->captured_json[len] = 0;
    m->captured_len = len;
    *out = m;
    return DRIFT_OK;
fail:
    drift_free(sj);
    drift_aten_graph_free(g);
    drift_model_free(m);
    return rc;
}

int drift_capture_model_from_file(const char *path, drift_model **out, drift_err *err) {
    drift_err oe;
    drift_err_clear(&oe);
    FILE *f = drift_in_fopen(path, &oe); /* a FIFO is refused before it can block */
    if (!f && oe.code == DRIFT_E_INPUT && err) *err = oe;
    if (!f) return oe.code == DRIFT_E_INPUT ? DRIFT_E_INPUT
                                            : drift_err_set(err, DRIFT_E_INPUT, path, "cannot open the captured graph (expected a drift-aten-graph JSON file)");
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = DRIFT_OK;
    for (;;) {
        if (len == cap) {
            if (cap >= DRIFT_TRACE_GRAPH_MAX) {
                rc = drift_err_set(err, DRIFT_E_INPUT, path, "larger than %llu bytes", (unsigned long long)DRIFT_TRACE_GRAPH_MAX);
                break;
            }
            size_t nc = cap ? cap * 2 : 1 << 16;
            char *nb = drift_realloc(buf, nc);
            if (!nb) { rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory"); break; }
            buf = nb;
            cap = nc;
        }
        size_t k = fread(buf + len, 1, cap - len, f);
        len += k;
        if (k == 0) break;
    }
    fclose(f);
    if (!rc) rc = drift_capture_model_create(buf, len, path, out, err);
    free(buf);
    return rc;
}

int drift_capture_model_lists(const drift_model *m, drift_aten_list *out, int cap) {
    if (!m || !m->captured || !m->captured_json) return 0;
    drift_aten_graph *g = NULL;
    drift_err e;
    drift_err_clear(&e);
    if (drift_aten_graph_parse(m->captured_json, m->captured_len, m->spec, &g, &e)) return e.code == DRIFT_E_NOMEM ? -1 : 0;
    int n = drift_aten_list_find(g, 0, out, cap), k = 0;
    for (int f = 0; f < n; f++) /* joined into a batch: lists of samples */
        if (out[f].join >= 0) out[k++] = out[f];
    drift_aten_graph_free(g);
    return n < 0 ? -1 : k;
}

int drift_capture_model_for_trace(drift_trace_reader *r, const char *family, drift_model **out, drift_err *err) {
    const char *path = drift_trace_reader_path(r);
    if (!drift_capture_is_spec(family) && family && *family) return drift_model_create(family, out, err);
    char *json = NULL;
    size_t len = 0;
    int rc = drift_trace_read_graph(r, &json, &len, err);
    if (rc) {
        drift_err_prefix(err, "%s: family '%s' needs the captured graph in /graph", path, family ? family : "");
        return rc;
    }
    if (!json || len == 0) {
        free(json);
        return drift_err_set(err, DRIFT_E_INPUT, path,
                             "no /graph: the recorder could not capture the model's graph (its reason is in /notes: "
                             "drift ls %s)", path);
    }
    if (!drift_aten_graph_sniff(json, len)) {
        free(json);
        return drift_err_set(err, DRIFT_E_INPUT, path, "/graph: expected a drift-aten-graph document (family '%s')",
                             family ? family : "");
    }
    char src[4200];
    snprintf(src, sizeof src, "%s:/graph", path);
    rc = drift_capture_model_create_against(json, len, src, r, out, err);
    free(json);
    return rc;
}

/* Adds every buffer leaf of m's graph, read by get(name), to a new RECORDED set. */
typedef int (*buf_get_fn)(void *ctx, const char *name, drift_hostset *dst, drift_err *err);

static int load_buffers(drift_model *m, buf_get_fn get, void *ctx, drift_err *err) {
    drift_hostset *b = NULL;
    int rc = drift_hostset_create(&b, err);
    const drift_hostset *inl = m->buffers[DRIFT_BUF_RECORDED]; /* the document's inline constants, if any */
    for (int i = 0; !rc && i < drift_graph_count(m->sem); i++) {
        const drift_value *v = drift_graph_value(m->sem, i);
        if (v->kind != DRIFT_VAL_BUFFER) continue;
        const drift_host_tensor *c = inl && !strncmp(v->name, "constant:", 9) ? drift_hostset_find(inl, v->name) : NULL;
        rc = c ? drift_hostset_add(b, v->name, DRIFT_F32, c->ndim, c->shape, c->f32, NULL, NULL, err)
               : get(ctx, v->name, b, err);
        const drift_host_tensor *t = rc ? NULL : drift_hostset_find(b, v->name);
        if (!rc && (!t || t->numel != v->numel))
            rc = drift_err_set(err, DRIFT_E_INPUT, v->name, "buffer '%s' has %lld elements, the graph needs %lld", v->name,
                               (long long)(t ? t->numel : 0), (long long)v->numel);
    }
    if (rc) {
        drift_hostset_free(b);
        return rc;
    }
    drift_hostset_free(m->buffers[DRIFT_BUF_RECORDED]);
    m->buffers[DRIFT_BUF_RECORDED] = b;
    return DRIFT_OK;
}

int drift_capture_model_takes_input(const drift_model *m, int input) {
    return !m->captured || drift_graph_find_leaf(m->sem, DRIFT_VAL_INPUT, drift_graph_input_name(input)) >= 0;
}

int drift_capture_step_input_site(const char *name, char *site, size_t cap) {
    if (strncmp(name, "input:", 6) != 0 || !name[6]) return 0;
    return snprintf(site, cap, "%s:pre_cast", name) < (int)cap;
}

/* The values of user input `name` ("input:NAME") at the first stored record
 * of its site whose step is `step` (any step if step < 0); *found = 0 when
 * the trace has no such record. */
static int read_input_site(drift_trace_reader *r, const char *name, int64_t step, drift_hostset *dst, int *found,
                           drift_err *err) {
    *found = 0;
    char site[DRIFT_MAX_FQN + 32];
    if (!drift_capture_step_input_site(name, site, sizeof site)) return DRIFT_OK;
    long id = drift_trace_reader_find_site(r, site);
    if (id < 0) return DRIFT_OK;
    drift_trace_site_info info;
    int rc = drift_trace_reader_site(r, (size_t)id, &info, err);
    if (rc || info.n_records <= 0) return rc;
    drift_trace_index *rows = drift_malloc((size_t)info.n_records * sizeof *rows);
    if (!rows) return drift_err_set(err, DRIFT_E_NOMEM, site, "out of memory reading the index");
    int64_t rec = -1;
    rc = drift_trace_read_index(r, (size_t)id, 0, info.n_records, rows, err);
    for (int64_t i = 0; !rc && i < info.n_records && rec < 0; i++)
        if (rows[i].stored && (step < 0 || rows[i].step == step)) rec = i;
    drift_free(rows);
    if (rc || rec < 0) return rc;
    float *v = drift_malloc((size_t)(info.numel ? info.numel : 1) * sizeof *v);
    if (!v) return drift_err_set(err, DRIFT_E_NOMEM, site, "out of memory");
    rc = drift_trace_read_record_f32(r, (size_t)id, rec, v, (size_t)info.numel, err);
    if (!rc) rc = drift_hostset_add(dst, name, DRIFT_F32, info.ndim, info.shape, v, NULL, NULL, err);
    drift_free(v);
    if (!rc) *found = 1;
    return rc;
}

static int get_trace_buffer(void *ctx, const char *name, drift_hostset *dst, drift_err *err) {
    drift_trace_reader *r = ctx;
    long k = drift_trace_reader_find_buffer(r, name);
    if (k < 0) { /* a per-step user input: the first stored record stands in (drift_capture_step_inputs sets each step's) */
        int found = 0;
        int rc = read_input_site(r, name, -1, dst, &found, err);
        if (rc || found) return rc;
        char site[DRIFT_MAX_FQN + 32];
        if (drift_capture_step_input_site(name, site, sizeof site))
            return drift_err_set(err, DRIFT_E_INPUT, drift_trace_reader_path(r),
                                 "user input '%s' is missing: the captured graph reads it, and the trace has neither "
                                 "a stored record of site '%s' nor /buffers/%s", name + 6, site, name);
        return drift_err_set(err, DRIFT_E_INPUT, drift_trace_reader_path(r),
                             "/buffers/%s is missing: the captured graph reads it", name);
    }
    drift_trace_buffer_info bi;
    int rc = drift_trace_reader_buffer(r, (size_t)k, &bi);
    if (rc) return drift_err_set(err, rc, drift_trace_reader_path(r), "/buffers/%s: unreadable", name);
    if (bi.dtype != DRIFT_F32)
        return drift_err_set(err, DRIFT_E_INPUT, drift_trace_reader_path(r), "/buffers/%s: expected fp32, got %s", name,
                             drift_dtype_name(bi.dtype));
    float *v = drift_malloc((size_t)(bi.numel ? bi.numel : 1) * sizeof *v);
    if (!v) return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory");
    rc = drift_trace_read_buffer(r, (size_t)k, v, (size_t)bi.numel * 4, err);
    if (!rc) rc = drift_hostset_add(dst, name, DRIFT_F32, bi.ndim, bi.shape, v, NULL, NULL, err);
    free(v);
    return rc;
}

int drift_capture_load_trace_buffers(drift_model *m, drift_trace_reader *r, drift_err *err) {
    return load_buffers(m, get_trace_buffer, r, err);
}

int drift_capture_step_inputs(const drift_model *m, drift_trace_reader *r, int64_t step, drift_hostset *dst,
                              drift_err *err) {
    if (!m->captured) return DRIFT_OK;
    char site[DRIFT_MAX_FQN + 32];
    for (int i = 0; i < drift_graph_count(m->sem); i++) {
        const drift_value *v = drift_graph_value(m->sem, i);
        if (v->kind != DRIFT_VAL_BUFFER || !drift_capture_step_input_site(v->name, site, sizeof site)) continue;
        if (drift_trace_reader_find_site(r, site) < 0) continue; /* held fixed: from /buffers */
        int found = 0;
        int rc = read_input_site(r, v->name, step, dst, &found, err);
        if (rc) return rc;
        if (!found)
            return drift_err_set(err, DRIFT_E_INPUT, drift_trace_reader_path(r), "step %lld has no stored record of '%s'",
                                 (long long)step, site);
        const drift_host_tensor *t = drift_hostset_find(dst, v->name);
        if (t->numel != v->numel)
            return drift_err_set(err, DRIFT_E_INPUT, drift_trace_reader_path(r),
                                 "site '%s' at step %lld has %lld elements, the graph's input has %lld", site,
                                 (long long)step, (long long)t->numel, (long long)v->numel);
    }
    return DRIFT_OK;
}

static int get_st_buffer(void *ctx, const char *name, drift_hostset *dst, drift_err *err) {
    drift_safetensors *f = ctx;
    char key[DRIFT_MAX_FQN + 16];
    if (!strncmp(name, "constant:", 9) || !strncmp(name, "input:", 6) || !strncmp(name, "device:", 7))
        snprintf(key, sizeof key, "%s", name);
    else snprintf(key, sizeof key, "buffer:%s", name);
    long k = drift_safetensors_find(f, key);
    if (k < 0)
        return drift_err_set(err, DRIFT_E_INPUT, drift_safetensors_path(f), "tensor '%s' is missing: the captured graph reads it",
                             key);
    drift_safetensors_info inf;
    int rc = drift_safetensors_tensor(f, (size_t)k, &inf, err);
    if (rc) return rc;
    float *v = drift_malloc((size_t)(inf.numel ? inf.numel : 1) * sizeof *v);
    if (!v) return drift_err_set(err, DRIFT_E_NOMEM, key, "out of memory");
    rc = drift_safetensors_read_f32(f, (size_t)k, v, (size_t)inf.numel, err);
    if (!rc) rc = drift_hostset_add(dst, name, DRIFT_F32, inf.ndim, inf.shape, v, NULL, NULL, err);
    free(v);
    return rc;
}

int drift_capture_load_safetensors_buffers(drift_model *m, const char *path, drift_err *err) {
    drift_safetensors *f = NULL;
    int rc = drift_safetensors_open(&f, path, DRIFT_SAFETENSORS_SKIP_UNSUPPORTED, err);
    if (rc) return rc;
    rc = load_buffers(m, get_st_buffer, f, err);
    drift_safetensors_close(f);
    return rc;
}

/* splitmix64 + Box-Muller: deterministic per seed, independent of the platform's rand(). */
static uint64_t sm64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double unif(uint64_t *s) { return ((double)(sm64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

int drift_capture_seed_inputs(const drift_model *m, uint64_t seed, drift_hostset **out, drift_err *err) {
    int rc = drift_hostset_create(out, err);
    uint64_t st = seed * 0x2545f4914f6cdd1dull + 17;
    for (int i = 0; !rc && i < drift_graph_count(m->sem); i++) {
        const drift_value *v = drift_graph_value(m->sem, i);
        if (v->kind != DRIFT_VAL_INPUT) continue;
        float *x = drift_malloc((size_t)v->numel * sizeof *x);
        if (!x) return drift_err_set(err, DRIFT_E_NOMEM, v->name, "out of memory");
        for (int64_t k = 0; k < v->numel; k++) {
            if (!strcmp(v->name, "timestep")) x[k] = (float)(unif(&st) * 1000.0);
            else {
                const double u1 = unif(&st), u2 = unif(&st);
                x[k] = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
            }
        }
        rc = drift_hostset_add(*out, v->name, DRIFT_F32, v->ndim, v->shape, x, NULL, NULL, err);
        drift_free(x);
    }
    return rc;
}
