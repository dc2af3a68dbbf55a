/* `drift top --batch` (see batch.h). */
#include "tui/batch.h"
#include "formats/term_safe.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/census.h" /* intercept census */
#include "formats/json.h"

static const char *const mkeys[DRIFT_TOP_M_COUNT] = {"mean_abs_diff", "max_abs_diff", "rel_max", "cosine"};
static const char *const skeys[DRIFT_TOP_S_COUNT] = {"log_prob_mean_abs_diff", "ratio_abs_minus_1", "approx_kl"};

/* "first_divergent|bitwise_equal|nonfinite" subsets. */
static void flag_names(uint32_t f, const char **names, int *n) {
    *n = 0;
    if (f & DRIFT_TRACE_METRIC_FIRST_DIVERGENT) names[(*n)++] = "first_divergent";
    if (f & DRIFT_TRACE_METRIC_BITWISE_EQUAL) names[(*n)++] = "bitwise_equal";
    if (f & DRIFT_TOP_FLAG_NONFINITE) names[(*n)++] = "nonfinite";
}

static void json_flags(drift_json_buf *b, uint32_t f) {
    const char *names[3];
    int n;
    flag_names(f, names, &n);
    drift_json_buf_add_key(b, "flags");
    drift_json_buf_begin_array(b);
    for (int i = 0; i < n; i++) drift_json_buf_add_string(b, names[i]);
    drift_json_buf_end_array(b);
}

static void json_metrics(drift_json_buf *b, const char *key, const double *v) {
    drift_json_buf_add_key(b, key);
    drift_json_buf_begin_object(b);
    for (int m = 0; m < DRIFT_TOP_M_COUNT; m++) drift_json_buf_field_number(b, mkeys[m], v[m]);
    drift_json_buf_end_object(b);
}

static int write_json(const drift_top_model *mo, const drift_top_query *q, const drift_top_table *t, FILE *out,
                      drift_err *err) {
    const drift_top_header *h = drift_top_model_header(mo);
    const drift_top_data *d = drift_top_model_data(mo);
    size_t ns = drift_top_data_n_steps(d);
    drift_json_buf b;
    drift_json_buf_init(&b);
    drift_json_buf_begin_object(&b);
    drift_json_buf_field_string(&b, "trace", h->path);
    drift_json_buf_field_string(&b, "run_id", h->run_id);
    drift_json_buf_field_string(&b, "side", h->side);
    drift_json_buf_field_string(&b, "family", h->family);
    drift_json_buf_field_int(&b, "rank", h->rank);
    drift_json_buf_field_int(&b, "world_size", h->world_size);
    drift_json_buf_field_number(&b, "guidance_scale", h->guidance_scale);
    drift_json_buf_add_key(&b, "plan");
    drift_json_buf_begin_object(&b);
    drift_json_buf_field_bool(&b, "ok", h->plan_ok);
    if (h->plan_ok) {
        drift_json_buf_field_string(&b, "name", h->plan_name);
        drift_json_buf_field_string(&b, "diffusion_forward_dtype", h->fwd);
        drift_json_buf_field_string(&b, "sglang_dit_precision", h->rollout);
        drift_json_buf_field_string(&b, "fsdp_reduce_dtype", h->reduce);
        drift_json_buf_field_string(&b, "fsdp_master_dtype", h->master);
        drift_json_buf_field_int(&b, "n_patterns", h->n_patterns);
    } else {
        drift_json_buf_field_string(&b, "error", h->plan_error);
    }
    drift_json_buf_add_key(&b, "warnings");
    drift_json_buf_begin_array(&b);
    if (h->warn_fwd_rollout) drift_json_buf_add_string(&b, "forward dtype != rollout precision");
    if (h->warn_reduce_bf16) drift_json_buf_add_string(&b, "reduce dtype bf16");
    drift_json_buf_end_array(&b);
    drift_json_buf_end_object(&b);
    drift_json_buf_field_int(&b, "steps_committed", h->steps_committed);
    drift_json_buf_add_key(&b, "steps");
    drift_json_buf_begin_array(&b);
    for (size_t c = 0; c < ns; c++) drift_json_buf_add_int(&b, drift_top_data_step(d, c));
    drift_json_buf_end_array(&b);
    drift_json_buf_add_key(&b, "against"); /* the live comparison's reference trace */
    if (h->against[0]) drift_json_buf_add_string(&b, h->against);
    else drift_json_buf_add_null(&b);
    drift_json_buf_field_string(&b, "writer", h->writer);
    drift_json_buf_add_key(&b, "reference");
    if (h->has_ref) {
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_string(&b, "trace", h->ref_path);
        drift_json_buf_field_string(&b, "run_id", h->ref_run_id);
        drift_json_buf_end_object(&b);
    } else {
        drift_json_buf_add_null(&b);
    }
    drift_json_buf_add_key(&b, "query");
    drift_json_buf_begin_object(&b);
    drift_json_buf_field_string(&b, "agg", drift_top_agg_name(q->agg));
    if (t->step >= 0)
        drift_json_buf_field_int(&b, "step", t->step);
    else
        drift_json_buf_field_null(&b, "step");
    drift_json_buf_field_bool(&b, "cfg_normalise", q->cfg_normalise);
    drift_json_buf_field_string(&b, "sort", drift_top_sort_name(q->sort));
    drift_json_buf_field_bool(&b, "descending", q->descending);
    drift_json_buf_field_string(&b, "filter", q->filter ? q->filter : "");
    drift_json_buf_end_object(&b);
    if (t->first_divergent >= 0)
        drift_json_buf_field_string(&b, "first_divergent", drift_top_data_layer_name(d, (size_t)t->first_divergent));
    else
        drift_json_buf_field_null(&b, "first_divergent");

    drift_json_buf_add_key(&b, "layers");
    drift_json_buf_begin_array(&b);
    for (size_t i = 0; i < t->n; i++) {
        const drift_top_row *r = &t->rows[i];
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_string(&b, "name", r->name);
        drift_json_buf_field_int(&b, "order", (int64_t)r->layer);
        json_metrics(&b, "value", r->v);
        if (h->has_ref)
            json_metrics(&b, "ref", r->ref);
        else
            drift_json_buf_field_null(&b, "ref");
        drift_json_buf_add_key(&b, "class");
        drift_json_buf_begin_object(&b);
        for (int m = 0; m < DRIFT_TOP_M_COUNT; m++)
            drift_json_buf_field_string(&b, mkeys[m], drift_top_class_name(r->cls[m]));
        drift_json_buf_end_object(&b);
        drift_json_buf_field_string(&b, "row_class", drift_top_class_name(r->row_cls));
        json_flags(&b, r->flags);
        if (r->max_ulp_diff >= 0)
            drift_json_buf_field_int(&b, "max_ulp_diff", r->max_ulp_diff);
        else
            drift_json_buf_field_null(&b, "max_ulp_diff");
        drift_json_buf_field_int(&b, "n_values", (int64_t)r->n_values);
        drift_json_buf_add_key(&b, "history");
        drift_json_buf_begin_array(&b);
        for (size_t c = 0; c < ns; c++) {
            const drift_top_cell *x = drift_top_data_cell(d, r->layer, c);
            if (!x->present) continue;
            drift_json_buf_begin_object(&b);
            drift_json_buf_field_int(&b, "step", drift_top_data_step(d, c));
            for (int m = 0; m < DRIFT_TOP_M_COUNT; m++) drift_json_buf_field_number(&b, mkeys[m], x->v[m]);
            drift_json_buf_add_key(&b, "max_ulp_diff");
            drift_json_buf_add_uint(&b, x->max_ulp_diff);
            json_flags(&b, x->flags);
            drift_json_buf_end_object(&b);
        }
        drift_json_buf_end_array(&b);
        drift_json_buf_end_object(&b);
    }
    drift_json_buf_end_array(&b);

    drift_json_buf_add_key(&b, "step_metrics");
    drift_json_buf_begin_array(&b);
    for (size_t c = 0; c < ns; c++) {
        double sv[DRIFT_TOP_S_COUNT];
        int any = 0;
        for (int s = 0; s < DRIFT_TOP_S_COUNT; s++) {
            sv[s] = drift_top_data_series(d, (drift_top_series)s, c);
            any |= !isnan(sv[s]);
        }
        if (!any) continue;
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_int(&b, "step", drift_top_data_step(d, c));
        for (int s = 0; s < DRIFT_TOP_S_COUNT; s++) drift_json_buf_field_number(&b, skeys[s], sv[s]);
        drift_json_buf_end_object(&b);
    }
    drift_json_buf_end_array(&b);
    drift_json_buf_add_key(&b, "census"); /* intercept census (docs/intercept.md), null if none */
    drift_census_json(&b, drift_top_model_census(mo));
    drift_json_buf_end_object(&b);
    char *doc = drift_json_buf_take(&b);
    if (!doc) {
        drift_json_buf_free(&b);
        return drift_err_set(err, DRIFT_E_NOMEM, "drift top --batch", "could not build the JSON document");
    }
    int ok = fputs(doc, out) >= 0 && fputc('\n', out) != EOF;
    free(doc);
    drift_json_buf_free(&b);
    if (!ok) return drift_err_set(err, DRIFT_E_IO, "stdout", "write failed");
    return DRIFT_OK;
}

/* CSV field: quoted when it holds a comma, quote or line break. */
static void csv_str(FILE *out, const char *raw) {
    char safe[3 * 4096];
    const char *s = drift_term_safe(raw, safe, sizeof safe); /* a name from a file: controls as \xNN */
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, out);
        return;
    }
    fputc('"', out);
    for (const char *p = s; *p; p++) {
        if (*p == '"') fputc('"', out);
        fputc(*p, out);
    }
    fputc('"', out);
}

static void csv_num(FILE *out, double v) {
    fputc(',', out);
    if (isnan(v)) return;
    if (isinf(v)) {
        fputs(v > 0 ? "inf" : "-inf", out);
        return;
    }
    fprintf(out, "%.17g", v);
}

static void csv_flags(FILE *out, uint32_t f) {
    const char *names[3];
    int n;
    flag_names(f, names, &n);
    fputc(',', out);
    for (int i = 0; i < n; i++) fprintf(out, "%s%s", i ? "|" : "", names[i]);
}

static int write_csv(const drift_top_model *mo, const drift_top_query *q, const drift_top_table *t, FILE *out,
                     drift_err *err) {
    const drift_top_data *d = drift_top_model_data(mo);
    size_t ns = drift_top_data_n_steps(d);
    fputs("kind,layer,order,step,mean_abs_diff,max_abs_diff,rel_max,cosine,max_ulp_diff,flags,class,"
          "log_prob_mean_abs_diff,ratio_abs_minus_1,approx_kl,ref_mean_abs_diff,ref_max_abs_diff,ref_rel_max,"
          "ref_cosine,ratio_mean_abs_diff\n",
          out);
    for (size_t i = 0; i < t->n; i++) {
        const drift_top_row *r = &t->rows[i];
        fputs("layer,", out);
        csv_str(out, r->name);
        fprintf(out, ",%zu,", r->layer);
        if (q->agg == DRIFT_TOP_AGG_STEP && t->step >= 0) fprintf(out, "%" PRId64, t->step);
        for (int m = 0; m < DRIFT_TOP_M_COUNT; m++) csv_num(out, r->v[m]);
        fputc(',', out);
        if (r->max_ulp_diff >= 0) fprintf(out, "%" PRId64, r->max_ulp_diff);
        csv_flags(out, r->flags);
        fprintf(out, ",%s,,,", drift_top_class_name(r->row_cls));
        for (int m = 0; m < DRIFT_TOP_M_COUNT; m++) csv_num(out, r->ref[m]);
        csv_num(out, r->ref[DRIFT_TOP_M_MEAN] > 0 ? r->v[DRIFT_TOP_M_MEAN] / r->ref[DRIFT_TOP_M_MEAN] : NAN);
        fputc('\n', out);
    }
    for (size_t i = 0; i < t->n; i++) {
        const drift_top_row *r = &t->rows[i];
        for (size_t c = 0; c < ns; c++) {
            const drift_top_cell *x = drift_top_data_cell(d, r->layer, c);
            if (!x->present) continue;
            fputs("history,", out);
            csv_str(out, r->name);
            fprintf(out, ",%zu,%" PRId64, r->layer, drift_top_data_step(d, c));
            for (int m = 0; m < DRIFT_TOP_M_COUNT; m++) csv_num(out, x->v[m]);
            fprintf(out, ",%" PRIu64, x->max_ulp_diff);
            csv_flags(out, x->flags);
            fputs(",,,,,,,,,\n", out);
        }
    }
    for (size_t c = 0; c < ns; c++) {
        double sv[DRIFT_TOP_S_COUNT];
        int any = 0;
        for (int s = 0; s < DRIFT_TOP_S_COUNT; s++) {
            sv[s] = drift_top_data_series(d, (drift_top_series)s, c);
            any |= !isnan(sv[s]);
        }
        if (!any) continue;
        fprintf(out, "step,,,%" PRId64 ",,,,,,,", drift_top_data_step(d, c));
        for (int s = 0; s < DRIFT_TOP_S_COUNT; s++) csv_num(out, sv[s]);
        fputs(",,,,,\n", out);
    }
    if (fflush(out) != 0 || ferror(out)) return drift_err_set(err, DRIFT_E_IO, "stdout", "write failed");
    return DRIFT_OK;
}

int drift_top_batch_write(const drift_top_model *m, const drift_top_query *q, drift_top_format fmt, FILE *out,
                          drift_err *err) {
    drift_top_table t;
    int rc = drift_top_table_build(drift_top_model_data(m), drift_top_model_ref(m), q, &t, err);
    if (rc != DRIFT_OK) return rc;
    rc = fmt == DRIFT_TOP_FORMAT_CSV ? write_csv(m, q, &t, out, err) : write_json(m, q, &t, out, err);
    drift_top_table_free(&t);
    return rc;
}
