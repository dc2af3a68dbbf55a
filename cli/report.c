#include "cli/report.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/json.h"

const char *drift_report_num(double v, char *buf, size_t bufsz) {
    if (isnan(v)) snprintf(buf, bufsz, "nan");
    else if (v == 0) snprintf(buf, bufsz, "0");
    else snprintf(buf, bufsz, "%.3e", v);
    return buf;
}

/* Enough digits to see 1 - cos of a bf16 difference (1e-8). */
static const char *cos_str(double v, char *buf, size_t n) {
    if (isnan(v)) snprintf(buf, n, "nan");
    else snprintf(buf, n, "%.8f", v);
    return buf;
}

static const char *ulp_str(uint64_t u, char *buf, size_t n) {
    if (u == UINT64_MAX) snprintf(buf, n, "nan");
    else snprintf(buf, n, "%llu", (unsigned long long)u);
    return buf;
}

void drift_report_replay_text(const drift_replay_opts *o, const drift_replay_report *rep, FILE *f) {
    if (o->plan)
        fprintf(f, "replay of %s\n  model %s\n  plan %s (%s side), backend %s\n  reference: %s\n", o->trace, rep->model,
                o->plan->name[0] ? o->plan->name : "(unnamed)", drift_assign_side_name(o->side),
                o->backend ? o->backend : "cpu", rep->ref_desc);
    else
        fprintf(f, "compare %s (candidate)\n  against %s (reference)\n  model %s\n", o->trace, rep->ref_desc, rep->model);
    fprintf(f, "  %lld step%s in %.2f s\n\n", (long long)rep->n_steps, rep->n_steps == 1 ? "" : "s", rep->seconds);
    fprintf(f, "%-44s %-5s %7s %10s %10s %10s %10s %8s\n", "site (execution order)", "dtype", "equal", "mean|d|",
            "max|d|", "rel_max", "cosine", "max ulp");
    for (size_t i = 0; i < rep->cmp.n; i++) {
        const drift_sitecmp_entry *e = &rep->cmp.e[i];
        drift_site_metrics m;
        drift_sitecmp_finish(&rep->cmp, e, &m);
        char a[32], b[32], c[32], d[32], u[32], eq[32];
        snprintf(eq, sizeof eq, "%lld/%lld", (long long)e->steps_equal, (long long)e->steps);
        fprintf(f, "%-44s %-5s %7s %10s %10s %10s %10s %8s%s\n", e->site, drift_dtype_name(e->dtype), eq,
                drift_report_num(m.mean_abs_diff, a, sizeof a), drift_report_num(m.max_abs_diff, b, sizeof b),
                drift_report_num(m.rel_max, c, sizeof c), cos_str(m.cosine, d, sizeof d),
                ulp_str(m.ulp_max, u, sizeof u), e->first_divergent ? "  <- first divergence" : "");
    }
    fprintf(f, "\nfirst divergent site per step:");
    int any = 0;
    for (int64_t s = 0; s < rep->n_steps; s++) {
        fprintf(f, "%s step %lld: %s", s ? "," : "", (long long)rep->steps[s],
                rep->first_divergent[s] ? rep->first_divergent[s] : "none (bitwise equal)");
        any |= rep->first_divergent[s] != NULL;
    }
    fprintf(f, "\n");
    if (!any) fprintf(f, "every compared site is bitwise equal to the reference\n");
    if (rep->has_logprob && !o->plan) {
        char a[32], b[32], c[32];
        fprintf(f, "log-prob, candidate logprob:new vs reference logprob:old: mean|d| %s, |ratio-1| %s, approx_kl %s\n",
                drift_report_num(rep->lp_vs_old.log_prob_mean_abs_diff, a, sizeof a),
                drift_report_num(rep->lp_vs_old.ratio_abs_minus_1, b, sizeof b),
                drift_report_num(rep->lp_vs_old.approx_kl, c, sizeof c));
    } else if (rep->has_logprob) {
        char a[32], b[32], c[32];
        fprintf(f, "log-prob of the replayed output vs recorded log_prob_old: mean|d| %s, |ratio-1| %s, approx_kl %s\n",
                drift_report_num(rep->lp_vs_old.log_prob_mean_abs_diff, a, sizeof a),
                drift_report_num(rep->lp_vs_old.ratio_abs_minus_1, b, sizeof b),
                drift_report_num(rep->lp_vs_old.approx_kl, c, sizeof c));
        fprintf(f, "log-prob of the replayed output vs recorded log_prob_new: mean|d| %s, |ratio-1| %s\n",
                drift_report_num(rep->lp_vs_new.log_prob_mean_abs_diff, a, sizeof a),
                drift_report_num(rep->lp_vs_new.ratio_abs_minus_1, b, sizeof b));
    }
    if (rep->has_oracle) {
        char a[32], b[32], c[32];
        fprintf(f, "output RMSE vs the fp64 oracle: replay %s, recorded trainer %s, recorded rollout %s",
                drift_report_num(rep->oracle_rmse_replay, a, sizeof a),
                drift_report_num(rep->oracle_rmse_trainer, b, sizeof b),
                drift_report_num(rep->oracle_rmse_rollout, c, sizeof c));
        if (rep->oracle_rmse_rollout > 0 && !isnan(rep->oracle_rmse_trainer))
            fprintf(f, " (trainer/rollout %.3f)", rep->oracle_rmse_trainer / rep->oracle_rmse_rollout);
        fprintf(f, "\n");
    }
}

static void add_metrics(drift_json_buf *b, const drift_site_metrics *m) {
    drift_json_buf_field_int(b, "numel", m->numel);
    drift_json_buf_field_number(b, "mean_abs_diff", m->mean_abs_diff);
    drift_json_buf_field_number(b, "max_abs_diff", m->max_abs_diff);
    drift_json_buf_field_number(b, "rel_max", m->rel_max);
    drift_json_buf_field_number(b, "cosine", m->cosine);
    drift_json_buf_field_number(b, "rmse", m->rmse);
    drift_json_buf_field_number(b, "mean_abs_diff_cfg", m->mean_abs_diff_cfg);
    drift_json_buf_field_number(b, "max_abs_diff_cfg", m->max_abs_diff_cfg);
    drift_json_buf_field_int(b, "n_diff", m->n_diff);
    drift_json_buf_field_bool(b, "bitwise_equal", m->bitwise_equal);
    drift_json_buf_add_key(b, "max_ulp");
    if (m->ulp_max == UINT64_MAX) drift_json_buf_add_null(b);
    else drift_json_buf_add_uint(b, m->ulp_max);
    drift_json_buf_field_int(b, "worst_index", m->argmax);
    drift_json_buf_field_int(b, "nan", m->nan_t);
    drift_json_buf_field_int(b, "inf", m->inf_t);
}

static void add_lp(drift_json_buf *b, const char *key, const drift_logprob_metrics *m) {
    drift_json_buf_add_key(b, key);
    drift_json_buf_begin_object(b);
    drift_json_buf_field_number(b, "log_prob_mean_abs_diff", m->log_prob_mean_abs_diff);
    drift_json_buf_field_number(b, "ratio_abs_minus_1", m->ratio_abs_minus_1);
    drift_json_buf_field_number(b, "approx_kl", m->approx_kl);
    drift_json_buf_end_object(b);
}

int drift_report_replay_json(const drift_replay_opts *o, const drift_replay_report *rep, FILE *f) {
    drift_json_buf b;
    drift_json_buf_init_pretty(&b, 2);
    drift_json_buf_begin_object(&b);
    drift_json_buf_field_string(&b, "trace", o->trace);
    drift_json_buf_field_string(&b, "model", rep->model);
    drift_json_buf_field_string(&b, "plan", o->plan ? o->plan->name : "");
    drift_json_buf_field_string(&b, "side", drift_assign_side_name(o->side));
    drift_json_buf_field_string(&b, "backend", o->backend ? o->backend : "cpu");
    drift_json_buf_field_string(&b, "reference", rep->ref_desc);
    drift_json_buf_field_number(&b, "seconds", rep->seconds);
    drift_json_buf_add_key(&b, "steps");
    drift_json_buf_begin_array(&b);
    for (int64_t s = 0; s < rep->n_steps; s++) drift_json_buf_add_int(&b, rep->steps[s]);
    drift_json_buf_end_array(&b);
    drift_json_buf_add_key(&b, "first_divergent");
    drift_json_buf_begin_array(&b);
    for (int64_t s = 0; s < rep->n_steps; s++) {
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_int(&b, "step", rep->steps[s]);
        drift_json_buf_field_string(&b, "site", rep->first_divergent[s]);
        drift_json_buf_end_object(&b);
    }
    drift_json_buf_end_array(&b);
    drift_json_buf_add_key(&b, "sites");
    drift_json_buf_begin_array(&b);
    for (size_t i = 0; i < rep->cmp.n; i++) {
        const drift_sitecmp_entry *e = &rep->cmp.e[i];
        drift_site_metrics m;
        drift_sitecmp_finish(&rep->cmp, e, &m);
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_string(&b, "site", e->site);
        drift_json_buf_field_string(&b, "dtype", drift_dtype_name(e->dtype));
        drift_json_buf_field_int(&b, "steps", e->steps);
        drift_json_buf_field_int(&b, "steps_bitwise_equal", e->steps_equal);
        drift_json_buf_field_int(&b, "first_divergent_steps", e->first_divergent);
        add_metrics(&b, &m);
        drift_json_buf_field_number(&b, "rmse_oracle", e->rmse_oracle);
        drift_json_buf_end_object(&b);
    }
    drift_json_buf_end_array(&b);
    if (rep->has_logprob && !o->plan) {
        add_lp(&b, "logprob", &rep->lp_vs_old); /* compare: candidate logprob:new vs reference logprob:old */
    } else if (rep->has_logprob) {
        drift_json_buf_add_key(&b, "logprob");
        drift_json_buf_begin_object(&b);
        add_lp(&b, "vs_old", &rep->lp_vs_old);
        add_lp(&b, "vs_new", &rep->lp_vs_new);
        drift_json_buf_end_object(&b);
    }
    if (rep->warnings) { /* compare: allowed mismatches, unpaired sites */
        drift_json_buf_add_key(&b, "warnings");
        drift_json_buf_begin_array(&b);
        for (const char *p = rep->warnings; *p;) {
            const char *nl = strchr(p, '\n');
            size_t len = nl ? (size_t)(nl - p) : strlen(p);
            drift_json_buf_add_string_n(&b, p, len);
            p += len + (nl ? 1 : 0);
        }
        drift_json_buf_end_array(&b);
    }
    if (rep->has_oracle) {
        drift_json_buf_add_key(&b, "oracle");
        drift_json_buf_begin_object(&b);
        drift_json_buf_field_number(&b, "replay_rmse", rep->oracle_rmse_replay);
        drift_json_buf_field_number(&b, "trainer_rmse", rep->oracle_rmse_trainer);
        drift_json_buf_field_number(&b, "rollout_rmse", rep->oracle_rmse_rollout);
        drift_json_buf_end_object(&b);
    }
    drift_json_buf_end_object(&b);
    char *s = drift_json_buf_take(&b);
    if (!s) {
        fprintf(stderr, "drift replay: out of memory writing JSON\n");
        return 2;
    }
    fprintf(f, "%s\n", s);
    free(s);
    return 0;
}
