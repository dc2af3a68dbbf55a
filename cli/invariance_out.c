/* drift invariance's table and JSON (invariance_out.h). */
#include "cli/invariance_out.h"

#include <math.h>
#include <stdlib.h>

#include "formats/json.h"

static void shape_str(char *buf, size_t sz, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, sz, "[");
    for (int i = 0; i < ndim && n < sz; i++) n += (size_t)snprintf(buf + n, sz - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < sz) snprintf(buf + n, sz - n, "]");
}

static void op_str(char *buf, size_t sz, const drift_inv_op *op) {
    char in[3][96];
    for (int k = 0; k < 3; k++) shape_str(in[k], sizeof in[k], k < op->n_in ? op->in_ndim[k] : 0, op->in_shape[k]);
    char out[96];
    shape_str(out, sizeof out, op->out_ndim, op->out_shape);
    snprintf(buf, sz, "%.300s %s(%s%s%s%s%s) -> %s %s%s%.128s%s", op->label[0] ? op->label : "(unnamed)", op->kind,
             in[0], op->n_in > 1 ? ", " : "", op->n_in > 1 ? in[1] : "", op->n_in > 2 ? ", " : "",
             op->n_in > 2 ? in[2] : "", out, op->dtype, op->kernel[0] ? " [" : "", op->kernel, op->kernel[0] ? "]" : "");
}

void drift_invariance_print_text(const drift_invariance_report *rep, FILE *f) {
    fprintf(f, "model %s on %s, %s side, step %lld, sample %d of a recorded batch of %d\n", rep->model, rep->backend,
            rep->side, (long long)rep->step, rep->sample, rep->recorded_batch);
    if (rep->batch_input[0] && strcmp(rep->batch_input, "latents"))
        fprintf(f, "the graph has no latents input: the sample in input %s (--batch-input)\n", rep->batch_input);
    if (rep->kernels[0])
        fprintf(f, "kernels %s%s%s%s\n", rep->kernels, rep->kernels_why[0] ? " (" : "", rep->kernels_why,
                rep->kernels_why[0] ? ")" : "");
    if (rep->has_composition) {
        fprintf(f, "recorded batch composition: micro-batch %d, cfg %s, samples", (int)rep->composition.micro_batch,
                drift_batch_cfg_name(rep->composition.cfg));
        for (int i = 0; i < rep->composition.n; i++) fprintf(f, "%s%lld", i ? "," : " ", (long long)rep->composition.samples[i]);
        fputc('\n', f);
    }
    fprintf(f, "reference: batch 1, %lld values compared per configuration, %.3f s; noise floor (one latent one ULP up): "
            "mean |diff| %.3g, max %.3g\n\n", (long long)rep->nodes, rep->ref_seconds, rep->floor_mean_abs, rep->floor_max_abs);
    fprintf(f, "%-32s %-8s %-9s %10s %11s %11s %8s %8s  %s\n", "configuration", "pad", "bitwise", "differ", "out mean|d|",
            "out max|d|", "floors", "seconds", "first divergent node");
    for (int i = 0; i < rep->n_cfg; i++) {
        const drift_inv_config *c = &rep->cfg[i];
        char op[1024] = "-";
        if (c->op.node >= 0) op_str(op, sizeof op, &c->op);
        fprintf(f, "%-32s %-8s %-9s %10lld %11.3g %11.3g %8.2f %8.3f  %s\n", c->name, c->pad, c->bitwise ? "yes" : "NO",
                (long long)c->nodes_diff, c->out_mean_abs, c->out_max_abs, c->out_floor_units, c->seconds, op);
        if (c->op.node >= 0) {
            char r[1024];
            op_str(r, sizeof r, &c->op_ref);
            fprintf(f, "%-32s   at batch 1: %s\n", "", r);
        }
        char ub[32];
        if (c->first_site[0])
            fprintf(f, "%-32s   first recorded site %s: %lld of %lld elements differ, max %s %s ULPs\n", "", c->first_site,
                    (long long)c->site_n_diff, (long long)c->site_numel,
                    drift_ulp_text(c->site_max_ulp, ub, sizeof ub), c->site_dtype);
        /* only informative when both differ from batch 1 (e.g. a micro-batch of 4 vs a batch of 8) */
        if (c->same_as >= 0 && c->out_n_diff) fprintf(f, "%-32s   output bitwise equal to %s\n", "", rep->cfg[c->same_as].name);
    }
    fprintf(f, "\n%s\n", rep->summary);
}

static void op_json(drift_json_buf *b, const char *key, const drift_inv_op *op) {
    drift_json_buf_add_key(b, key);
    if (op->node < 0) {
        drift_json_buf_add_null(b);
        return;
    }
    drift_json_buf_begin_object(b);
    drift_json_buf_field_int(b, "node", op->node);
    drift_json_buf_field_string(b, "label", op->label);
    drift_json_buf_field_string(b, "kind", op->kind);
    drift_json_buf_field_string(b, "dtype", op->dtype);
    const int is_gemm = !strcmp(op->kind, "linear") || !strcmp(op->kind, "bmm");
    drift_json_buf_add_key(b, "gemm"); /* a GEMM's choice (as before "kernel" took any) */
    if (is_gemm && op->kernel[0]) drift_json_buf_add_string(b, op->kernel);
    else drift_json_buf_add_null(b);
    drift_json_buf_add_key(b, "kernel");
    if (op->kernel[0]) drift_json_buf_add_string(b, op->kernel);
    else drift_json_buf_add_null(b);
    drift_json_buf_add_key(b, "input_from");
    if (op->input_from[0]) drift_json_buf_add_string(b, op->input_from);
    else drift_json_buf_add_null(b);
    drift_json_buf_add_key(b, "in_shapes");
    drift_json_buf_begin_array(b);
    for (int k = 0; k < op->n_in && k < 3; k++) {
        drift_json_buf_begin_array(b);
        for (int d = 0; d < op->in_ndim[k]; d++) drift_json_buf_add_int(b, op->in_shape[k][d]);
        drift_json_buf_end_array(b);
    }
    drift_json_buf_end_array(b);
    drift_json_buf_add_key(b, "out_shape");
    drift_json_buf_begin_array(b);
    for (int d = 0; d < op->out_ndim; d++) drift_json_buf_add_int(b, op->out_shape[d]);
    drift_json_buf_end_array(b);
    drift_json_buf_end_object(b);
}

static const char *kind_name(drift_inv_kind k) {
    return k == DRIFT_INV_BATCH ? "batch" : k == DRIFT_INV_CFG_COND ? "cfg_cond" : "cfg_uncond";
}

int drift_invariance_print_json(const drift_invariance_report *rep, FILE *f) {
    drift_json_buf b;
    drift_json_buf_init(&b);
    drift_json_buf_begin_object(&b);
    drift_json_buf_field_string(&b, "model", rep->model);
    drift_json_buf_field_string(&b, "backend", rep->backend);
    drift_json_buf_field_string(&b, "kernels", rep->kernels[0] ? rep->kernels : NULL);
    drift_json_buf_field_string(&b, "kernels_why", rep->kernels[0] && rep->kernels_why[0] ? rep->kernels_why : NULL);
    drift_json_buf_field_string(&b, "side", rep->side);
    drift_json_buf_field_int(&b, "step", rep->step);
    drift_json_buf_field_int(&b, "sample", rep->sample);
    drift_json_buf_field_int(&b, "recorded_batch", rep->recorded_batch);
    drift_json_buf_field_string(&b, "batch_input", rep->batch_input);
    drift_json_buf_add_key(&b, "composition");
    if (rep->has_composition) {
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_int(&b, "micro_batch", rep->composition.micro_batch);
        drift_json_buf_field_string(&b, "cfg", drift_batch_cfg_name(rep->composition.cfg));
        drift_json_buf_add_key(&b, "samples");
        drift_json_buf_begin_array(&b);
        for (int i = 0; i < rep->composition.n; i++) drift_json_buf_add_int(&b, rep->composition.samples[i]);
        drift_json_buf_end_array(&b);
        drift_json_buf_end_object(&b);
    } else {
        drift_json_buf_add_null(&b);
    }
    drift_json_buf_field_int(&b, "values_compared", rep->nodes);
    drift_json_buf_field_number(&b, "noise_floor_mean_abs", rep->floor_mean_abs);
    drift_json_buf_field_number(&b, "noise_floor_max_abs", rep->floor_max_abs);
    drift_json_buf_field_number(&b, "reference_seconds", rep->ref_seconds);
    drift_json_buf_field_bool(&b, "invariant", rep->invariant);
    drift_json_buf_field_string(&b, "summary", rep->summary);
    drift_json_buf_add_key(&b, "configurations");
    drift_json_buf_begin_array(&b);
    for (int i = 0; i < rep->n_cfg; i++) {
        const drift_inv_config *c = &rep->cfg[i];
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_string(&b, "name", c->name);
        drift_json_buf_field_string(&b, "kind", kind_name(c->kind));
        drift_json_buf_field_int(&b, "batch", c->batch);
        drift_json_buf_field_int(&b, "position", c->position);
        drift_json_buf_field_string(&b, "pad", c->pad);
        drift_json_buf_field_bool(&b, "bitwise", c->bitwise);
        drift_json_buf_field_int(&b, "values_compared", c->nodes_compared);
        drift_json_buf_field_int(&b, "values_differ", c->nodes_diff);
        op_json(&b, "first_divergent_node", &c->op);
        op_json(&b, "first_divergent_node_at_batch_1", &c->op_ref);
        drift_json_buf_add_key(&b, "first_divergent_site");
        if (c->first_site[0]) {
            drift_json_buf_begin_object(&b);
            drift_json_buf_field_string(&b, "site", c->first_site);
            drift_json_buf_field_string(&b, "dtype", c->site_dtype);
            drift_json_buf_field_int(&b, "n_diff", c->site_n_diff);
            drift_json_buf_field_int(&b, "numel", c->site_numel);
            drift_json_buf_add_key(&b, "max_ulp");
            drift_json_buf_add_uint(&b, c->site_max_ulp);
            drift_json_buf_end_object(&b);
        } else {
            drift_json_buf_add_null(&b);
        }
        drift_json_buf_field_int(&b, "output_n_diff", c->out_n_diff);
        drift_json_buf_field_int(&b, "output_numel", c->out_numel);
        drift_json_buf_field_number(&b, "model_output_mean_abs_diff", c->out_mean_abs);
        drift_json_buf_field_number(&b, "model_output_max_abs_diff", c->out_max_abs);
        drift_json_buf_add_key(&b, "floor_units");
        if (isfinite(c->out_floor_units)) drift_json_buf_add_number(&b, c->out_floor_units);
        else drift_json_buf_add_null(&b);
        drift_json_buf_add_key(&b, "output_same_as");
        if (c->same_as >= 0) drift_json_buf_add_string(&b, rep->cfg[c->same_as].name);
        else drift_json_buf_add_null(&b);
        drift_json_buf_field_number(&b, "seconds", c->seconds);
        drift_json_buf_end_object(&b);
    }
    drift_json_buf_end_array(&b);
    drift_json_buf_end_object(&b);
    if (drift_json_buf_status(&b)) {
        drift_json_buf_free(&b);
        return DRIFT_E_NOMEM;
    }
    char *s = drift_json_buf_take(&b);
    if (!s) return DRIFT_E_NOMEM;
    fprintf(f, "%s\n", s);
    free(s);
    return DRIFT_OK;
}
