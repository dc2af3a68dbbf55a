#include "cli/report.h"
#include "formats/term_safe.h"

/* a string from a file, made safe for the terminal (formats/term_safe.h) */
static const char *SAFE(const char *s) {
    static _Thread_local char buf[4][4096]; /* four per printf at most */
    static _Thread_local unsigned k;
    k = (k + 1) & 3;
    return drift_term_safe(s, buf[k], sizeof buf[k]);
}

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/compiled_out.h"
#include "cli/libraries_out.h"
#include "cli/cli_util.h"
#include "cli/libraries_pick.h"
#include "formats/json.h"
#include "formats/trace.h"

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

static const char *ulp_str(uint64_t u, char *buf, size_t n) { return drift_ulp_text(u, buf, n); }

/* The trace o->trace opened quietly for site shapes (NULL when it cannot be:
 * the worst element is then given as a flat offset). Caller closes it. */
static drift_trace_reader *open_shapes(const drift_replay_opts *o) {
    drift_trace_reader *r = NULL;
    drift_err e;
    drift_err_clear(&e);
    if (!o->trace || drift_trace_reader_open(&r, o->trace, DRIFT_TRACE_OPEN_NORMAL, &e) != DRIFT_OK) return NULL;
    return r;
}

/* The worst element's coordinate in the site's recorded shape ("[0,3,17]"),
 * or its flat offset ("offset 1234") when the shape is unknown or does not
 * hold one step's elements. 0 when e has no worst element. */
static int worst_coord(drift_trace_reader *r, const drift_sitecmp_entry *e, int64_t *idx, int *ndim, char *buf,
                       size_t sz) {
    *ndim = 0;
    if (e->worst_step < 0 || e->worst_offset < 0) return 0;
    drift_trace_site_info si;
    long k = r ? drift_trace_reader_find_site(r, e->site) : -1;
    drift_err err;
    drift_err_clear(&err);
    int64_t per_step = e->steps > 0 ? e->acc.m.numel / e->steps : 0;
    if (k >= 0 && drift_trace_reader_site(r, (size_t)k, &si, &err) == DRIFT_OK && si.ndim > 0 &&
        si.ndim <= DRIFT_MAX_DIMS && si.numel == per_step && e->worst_offset < si.numel) {
        int64_t rest = e->worst_offset;
        for (int d = si.ndim - 1; d >= 0; d--) { /* row-major: the last axis varies fastest */
            idx[d] = si.shape[d] > 0 ? rest % si.shape[d] : 0;
            rest = si.shape[d] > 0 ? rest / si.shape[d] : 0;
        }
        *ndim = si.ndim;
        size_t o = (size_t)snprintf(buf, sz, "[");
        for (int d = 0; d < si.ndim && o < sz; d++)
            o += (size_t)snprintf(buf + o, sz - o, "%s%lld", d ? "," : "", (long long)idx[d]);
        if (o < sz) snprintf(buf + o, sz - o, "]");
    } else {
        snprintf(buf, sz, "offset %lld", (long long)e->worst_offset);
    }
    return 1;
}

/* The worst element (largest |d|) of the sites a reader looks at first: the
 * first divergent ones and the output. */
static void worst_text(const drift_replay_opts *o, const drift_replay_report *rep, FILE *f) {
    int header = 0;
    drift_trace_reader *r = NULL;
    for (size_t i = 0; i < rep->cmp.n; i++) {
        const drift_sitecmp_entry *e = &rep->cmp.e[i];
        if (!e->first_divergent && strcmp(e->site, "output:noise_pred") != 0) continue;
        if (e->worst_step < 0 || e->acc.m.max_abs_diff == 0) continue;
        if (!header) {
            r = open_shapes(o);
            fprintf(f, "worst element (largest |d|) of the first divergent sites and the output "
                       "(--json and --format csv give every site's):\n");
            header = 1;
        }
        char c[256];
        int64_t idx[DRIFT_MAX_DIMS];
        int nd = 0;
        worst_coord(r, e, idx, &nd, c, sizeof c);
        fprintf(f, "  %-40s step %lld %-20s %s %.9g, reference %.9g, |d| %.3e\n", e->site, (long long)e->worst_step, c,
                o->plan ? "replay" : "candidate", (double)e->acc.worst_t, (double)e->acc.worst_r,
                fabs((double)e->acc.worst_t - (double)e->acc.worst_r));
    }
    drift_trace_reader_close(r);
}

/* The kernel profile and the library comparison (a GPU replay, or a trace
 * that recorded its libraries). */
/* drift compare's compiled trace (drift_report_compiled_source); replay uses its own trace's. */
static int g_compiled_set;
static drift_libraries g_compiled_libs;
static char g_compiled_trace[4096];

void drift_report_compiled_source(const drift_libraries *l, const char *trace) {
    g_compiled_set = l != NULL;
    if (l) g_compiled_libs = *l;
    snprintf(g_compiled_trace, sizeof g_compiled_trace, "%s", trace ? trace : "");
}

/* The identity whose torch.compile marker the report states, and its compile floor. */
static const drift_libraries *compiled_source(const drift_replay_opts *o, const drift_replay_report *rep,
                                              drift_compile_floor *fl) {
    if (g_compiled_set) {
        drift_compile_floor_read(g_compiled_trace, fl);
        return &g_compiled_libs;
    }
    drift_compile_floor_read(o->trace, fl);
    return rep->has_libs_rec ? &rep->libs_rec : NULL;
}

static void identity_text(const drift_replay_opts *o, const drift_replay_report *rep, FILE *f) {
    if (rep->kernels[0])
        fprintf(f, "  kernels %s%s%s%s\n", rep->kernels, rep->kernels_why[0] ? " (" : "", rep->kernels_why,
                rep->kernels_why[0] ? ")" : "");
    if (rep->kernel_fallbacks)
        fprintf(f, "  kernel fallbacks: %lld op run%s of %s on drift's exact kernels, not torch's (last reason: %s)\n",
                (long long)rep->kernel_fallbacks, rep->kernel_fallbacks == 1 ? "" : "s", rep->kernel_fallback_ops,
                rep->kernel_fallback_why);
    drift_compile_floor fl;
    const drift_libraries *src = compiled_source(o, rep, &fl);
    if (!rep->has_libs_here && !rep->has_libs_rec) {
        drift_cli_compiled_text(f, "  ", src, rep, &fl);
        return;
    }
    char msg[2048];
    drift_libraries_compare(rep->has_libs_rec ? &rep->libs_rec : NULL, rep->has_libs_here ? &rep->libs_here : NULL, msg,
                            sizeof msg);
    fprintf(f, "  libraries: %s\n", msg);
    if (rep->has_libs_rec) drift_cli_text_libraries(f, "    ", "recorded: ", &rep->libs_rec);
    if (rep->has_libs_here) drift_cli_text_libraries(f, "    ", "here:     ", &rep->libs_here);
    char esc[5200];
    if (drift_cli_libraries_note()[0])
        fprintf(f, "    loaded:   %s\n", drift_cli_printable(drift_cli_libraries_note(), esc, sizeof esc));
    drift_cli_compiled_text(f, "  ", src, rep, &fl);
}

void drift_report_replay_text(const drift_replay_opts *o, const drift_replay_report *rep, FILE *f) {
    if (o->plan)
        fprintf(f, "replay of %s\n  model %s\n  plan %s (%s side), backend %s\n  reference: %s\n", o->trace, SAFE(rep->model),
                o->plan->name[0] ? SAFE(o->plan->name) : "(unnamed)", drift_assign_side_name(o->side),
                o->backend ? o->backend : "cpu", rep->ref_desc);
    else
        fprintf(f, "compare %s (candidate)\n  against %s (reference)\n  model %s\n", o->trace, rep->ref_desc, SAFE(rep->model));
    identity_text(o, rep, f);
    fprintf(f, "  %lld step%s in %.2f s\n\n", (long long)rep->n_steps, rep->n_steps == 1 ? "" : "s", rep->seconds);
    fprintf(f, "%-44s %-5s %7s %10s %10s %10s %10s %8s\n", "site (execution order)", "dtype", "equal", "mean|d|",
            "max|d|", "rel_max", "cosine", "max ulp");
    for (size_t i = 0; i < rep->cmp.n; i++) {
        const drift_sitecmp_entry *e = &rep->cmp.e[i];
        drift_site_metrics m;
        drift_sitecmp_finish(&rep->cmp, e, &m);
        char a[32], b[32], c[32], d[32], u[32], eq[32];
        snprintf(eq, sizeof eq, "%lld/%lld", (long long)e->steps_equal, (long long)e->steps);
        fprintf(f, "%-44s %-5s %7s %10s %10s %10s %10s %8s%s\n", SAFE(e->site), drift_dtype_name(e->dtype), eq,
                drift_report_num(m.mean_abs_diff, a, sizeof a), drift_report_num(m.max_abs_diff, b, sizeof b),
                drift_report_num(m.rel_max, c, sizeof c), cos_str(m.cosine, d, sizeof d),
                ulp_str(m.ulp_max, u, sizeof u), e->first_divergent ? "  <- first divergence" : "");
    }
    int64_t zero_ref = 0, zero_sites = 0;
    for (size_t i = 0; i < rep->cmp.n; i++) {
        drift_site_metrics m;
        drift_sitecmp_finish(&rep->cmp, &rep->cmp.e[i], &m);
        zero_ref += m.ulp_zero_ref;
        zero_sites += m.ulp_zero_ref > 0;
    }
    if (zero_ref)
        fprintf(f, "max ulp leaves out %lld element%s of %lld site%s whose reference is zero (a ULP of zero is the "
                   "subnormal spacing); --json gives each site's ulp_zero_reference\n",
                (long long)zero_ref, zero_ref == 1 ? "" : "s", (long long)zero_sites, zero_sites == 1 ? "" : "s");
    fprintf(f, "\nfirst divergent site per step:");
    int any = 0;
    for (int64_t s = 0; s < rep->n_steps; s++) {
        fprintf(f, "%s step %lld: %s", s ? "," : "", (long long)rep->steps[s],
                rep->first_divergent[s] ? SAFE(rep->first_divergent[s]) : "none (bitwise equal)");
        any |= rep->first_divergent[s] != NULL;
    }
    fprintf(f, "\n");
    if (!any) fprintf(f, "every compared site is bitwise equal to the reference\n");
    else if (o->plan && o->ref == DRIFT_REF_TRAINER && !strcmp(rep->kernels, "torch") && !strncmp(rep->model, "captured:", 9))
        fprintf(f, "to find the op inside the first divergent site that torch computes otherwise: add --dump-nodes DIR, "
                   "then python3 -m drift_recorder.node_parity %s DIR --step N (docs/recorder.md)\n", o->trace);
    for (const char *p = o->plan && rep->warnings ? rep->warnings : ""; *p;) { /* replay: sites the import left out */
        const char *nl = strchr(p, '\n');
        int n = nl ? (int)(nl - p) : (int)strlen(p);
        fprintf(f, "note: %.*s\n", n, p);
        p += n + (nl ? 1 : 0);
    }
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
    worst_text(o, rep, f);
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
    drift_json_buf_field_int(b, "ulp_zero_reference", m->ulp_zero_ref);
    drift_json_buf_field_int(b, "worst_index", m->argmax);
    drift_json_buf_field_int(b, "nan", m->nan_t);
    drift_json_buf_field_int(b, "inf", m->inf_t);
}

/* "worst": the element of largest |d| as a step and coordinate with both
 * values, or null when the site never differed. */
static void add_worst(drift_json_buf *b, drift_trace_reader *r, const drift_sitecmp_entry *e) {
    drift_json_buf_add_key(b, "worst");
    char c[256];
    int64_t idx[DRIFT_MAX_DIMS];
    int nd = 0;
    if (e->acc.m.max_abs_diff == 0 || !worst_coord(r, e, idx, &nd, c, sizeof c)) {
        drift_json_buf_add_null(b);
        return;
    }
    drift_json_buf_begin_object(b);
    drift_json_buf_field_int(b, "step", e->worst_step);
    drift_json_buf_field_int(b, "offset", e->worst_offset);
    drift_json_buf_add_key(b, "index");
    if (nd > 0) {
        drift_json_buf_begin_array(b);
        for (int d = 0; d < nd; d++) drift_json_buf_add_int(b, idx[d]);
        drift_json_buf_end_array(b);
    } else {
        drift_json_buf_add_null(b);
    }
    drift_json_buf_field_number(b, "candidate", (double)e->acc.worst_t);
    drift_json_buf_field_number(b, "reference", (double)e->acc.worst_r);
    drift_json_buf_end_object(b);
}

static void add_lp(drift_json_buf *b, const char *key, const drift_logprob_metrics *m) {
    drift_json_buf_add_key(b, key);
    drift_json_buf_begin_object(b);
    drift_json_buf_field_number(b, "log_prob_mean_abs_diff", m->log_prob_mean_abs_diff);
    drift_json_buf_field_number(b, "ratio_abs_minus_1", m->ratio_abs_minus_1);
    drift_json_buf_field_number(b, "approx_kl", m->approx_kl);
    drift_json_buf_end_object(b);
}

double drift_report_floor_units(double mean_abs_diff, double floor) {
    return floor > 0 ? mean_abs_diff / floor : (mean_abs_diff > 0 ? INFINITY : 0);
}

static const drift_sitecmp_entry *output_entry(const drift_replay_report *rep) {
    for (size_t i = 0; i < rep->cmp.n; i++)
        if (strcmp(rep->cmp.e[i].site, "output:noise_pred") == 0) return &rep->cmp.e[i];
    return NULL;
}

void drift_report_floor_text(const drift_replay_report *rep, const drift_report_checks *c, FILE *f) {
    const drift_sitecmp_entry *e = output_entry(rep);
    if (!c || !c->has_floor || !e) return;
    drift_site_metrics m;
    drift_sitecmp_finish(&rep->cmp, e, &m);
    char a[32], b[32];
    fprintf(f, "noise floor: output:noise_pred mean|d| %s under a one-ULP latent nudge; this replay's %s = %.4g x floor\n",
            drift_report_num(c->floor, a, sizeof a), drift_report_num(m.mean_abs_diff, b, sizeof b),
            drift_report_floor_units(m.mean_abs_diff, c->floor));
}

/* One asked bound: {"option", "site", "metric", "value", "limit", "exceeded"}. */
static void add_check(drift_json_buf *b, const char *opt, const char *metric, double v, double limit) {
    drift_json_buf_begin_object(b);
    drift_json_buf_field_string(b, "option", opt);
    drift_json_buf_field_string(b, "site", "output:noise_pred");
    drift_json_buf_field_string(b, "metric", metric);
    drift_json_buf_field_number(b, "value", v);
    drift_json_buf_field_number(b, "limit", limit);
    drift_json_buf_field_bool(b, "exceeded", !(v <= limit)); /* NaN exceeds */
    drift_json_buf_end_object(b);
}

static void add_checks(drift_json_buf *b, const drift_replay_report *rep, const drift_report_checks *c) {
    const drift_sitecmp_entry *e = output_entry(rep);
    drift_site_metrics m;
    if (e) drift_sitecmp_finish(&rep->cmp, e, &m);
    if (c->has_floor) {
        drift_json_buf_add_key(b, "noise_floor");
        drift_json_buf_begin_object(b);
        drift_json_buf_field_string(b, "site", "output:noise_pred");
        drift_json_buf_field_number(b, "mean_abs_diff", c->floor);
        drift_json_buf_end_object(b);
    }
    drift_json_buf_add_key(b, "checks");
    drift_json_buf_begin_array(b);
    if (e) {
        if (c->atol >= 0) add_check(b, "--atol", "max_abs_diff", m.max_abs_diff, c->atol);
        if (c->rtol >= 0) add_check(b, "--rtol", "rel_max", m.rel_max, c->rtol);
        if (c->max_floor >= 0 && c->has_floor)
            add_check(b, "--max-floor", "x_floor", drift_report_floor_units(m.mean_abs_diff, c->floor), c->max_floor);
    }
    drift_json_buf_end_array(b);
}

int drift_report_replay_json(const drift_replay_opts *o, const drift_replay_report *rep, FILE *f) {
    return drift_report_replay_json_checks(o, rep, NULL, f);
}

int drift_report_replay_json_checks(const drift_replay_opts *o, const drift_replay_report *rep,
                                    const drift_report_checks *c, FILE *f) {
    drift_json_buf b;
    drift_json_buf_init_pretty(&b, 2);
    drift_json_buf_begin_object(&b);
    drift_json_buf_field_string(&b, "trace", o->trace);
    drift_json_buf_field_string(&b, "model", rep->model);
    drift_json_buf_field_string(&b, "plan", o->plan ? o->plan->name : "");
    drift_json_buf_field_string(&b, "side", drift_assign_side_name(o->side));
    drift_json_buf_field_string(&b, "backend", o->backend ? o->backend : "cpu");
    drift_json_buf_field_string(&b, "reference", rep->ref_desc);
    drift_json_buf_field_string(&b, "kernels", rep->kernels[0] ? rep->kernels : NULL);
    drift_json_buf_field_string(&b, "kernels_why", rep->kernels_why[0] ? rep->kernels_why : NULL);
    if (rep->kernels[0]) {
        drift_json_buf_field_int(&b, "kernel_fallbacks", rep->kernel_fallbacks);
        drift_json_buf_field_string(&b, "kernel_fallback_ops", rep->kernel_fallback_ops[0] ? rep->kernel_fallback_ops : NULL);
        drift_json_buf_field_string(&b, "kernel_fallback_why", rep->kernel_fallback_why[0] ? rep->kernel_fallback_why : NULL);
    }
    drift_cli_json_libraries_cmp(&b, rep->has_libs_rec ? &rep->libs_rec : NULL, rep->has_libs_here ? &rep->libs_here : NULL);
    drift_json_buf_field_string(&b, "libraries_loaded", drift_cli_libraries_note()[0] ? drift_cli_libraries_note() : NULL);
    drift_compile_floor cfl;
    const drift_libraries *csrc = compiled_source(o, rep, &cfl);
    drift_cli_compiled_json(&b, csrc, rep, &cfl);
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
    drift_trace_reader *shapes = open_shapes(o);
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
        add_worst(&b, shapes, e);
        if (c && c->has_floor && strcmp(e->site, "output:noise_pred") == 0)
            drift_json_buf_field_number(&b, "x_floor", drift_report_floor_units(m.mean_abs_diff, c->floor));
        drift_json_buf_field_number(&b, "rmse_oracle", e->rmse_oracle);
        drift_json_buf_end_object(&b);
    }
    drift_trace_reader_close(shapes);
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
    if (c) add_checks(&b, rep, c);
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
