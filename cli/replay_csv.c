#include "cli/replay_csv.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cli/cli_util.h"

static void num(FILE *f, double v) {
    if (isnan(v)) fputs(",", f);
    else fprintf(f, ",%.9g", v);
}

void drift_replay_csv_write(const drift_replay_report *rep, FILE *f) { drift_replay_csv_write_floor(rep, NAN, f); }

void drift_replay_csv_write_floor(const drift_replay_report *rep, double floor, FILE *f) {
    fputs("site,dtype,steps,steps_bitwise_equal,first_divergent_steps,numel,mean_abs_diff,max_abs_diff,rel_max,"
          "cosine,one_minus_cosine,rmse,n_diff,max_ulp,worst_index,nan,inf,rmse_oracle,worst_step,worst_offset,"
          "worst_candidate,worst_reference,x_floor\n", f);
    for (size_t i = 0; i < rep->cmp.n; i++) {
        const drift_sitecmp_entry *e = &rep->cmp.e[i];
        drift_site_metrics m;
        drift_sitecmp_finish(&rep->cmp, e, &m);
        /* site names hold ':' and '.', never '"' or ','; quote anyway for safety */
        fputc('"', f);
        for (const char *p = e->site; *p; p++) {
            if (*p == '"') fputc('"', f);
            fputc(*p, f);
        }
        fprintf(f, "\",%s,%lld,%lld,%lld,%lld", drift_dtype_name(e->dtype), (long long)e->steps, (long long)e->steps_equal,
                (long long)e->first_divergent, (long long)m.numel);
        num(f, m.mean_abs_diff);
        num(f, m.max_abs_diff);
        num(f, m.rel_max);
        num(f, m.cosine);
        num(f, 1.0 - m.cosine);
        num(f, m.rmse);
        fprintf(f, ",%lld,", (long long)m.n_diff);
        if (m.ulp_max != UINT64_MAX) fprintf(f, "%llu", (unsigned long long)m.ulp_max);
        fprintf(f, ",%lld,%lld,%lld", (long long)m.argmax, (long long)m.nan_t, (long long)m.inf_t);
        num(f, e->rmse_oracle);
        if (e->worst_step >= 0 && m.max_abs_diff > 0) {
            fprintf(f, ",%lld,%lld", (long long)e->worst_step, (long long)e->worst_offset);
            num(f, (double)e->acc.worst_t);
            num(f, (double)e->acc.worst_r);
        } else {
            fputs(",,,,", f);
        }
        if (!isnan(floor) && strcmp(e->site, "output:noise_pred") == 0)
            num(f, floor > 0 ? m.mean_abs_diff / floor : (m.mean_abs_diff > 0 ? INFINITY : 0));
        else
            fputc(',', f);
        fputc('\n', f);
    }
}

int drift_replay_check_tolerance(const char *cmd, const drift_replay_report *rep, const char *site, double atol,
                                 double rtol) {
    if (!site) site = "output:noise_pred";
    const drift_sitecmp_entry *e = NULL;
    for (size_t i = 0; i < rep->cmp.n && !e; i++)
        if (strcmp(rep->cmp.e[i].site, site) == 0) e = &rep->cmp.e[i];
    if (!e) {
        drift_err err;
        drift_err_set(&err, DRIFT_E_INPUT, site, "--atol/--rtol: the site was not compared (nothing to check)");
        return drift_cli_report(cmd, &err);
    }
    drift_site_metrics m;
    drift_sitecmp_finish(&rep->cmp, e, &m);
    int over = 0;
    if (atol >= 0 && !(m.max_abs_diff <= atol)) {
        fprintf(stderr, "drift %s: %s: max_abs_diff %.6g exceeds --atol %.6g\n", cmd, site, m.max_abs_diff, atol);
        over = 1;
    }
    if (rtol >= 0 && !(m.rel_max <= rtol)) {
        fprintf(stderr, "drift %s: %s: rel_max %.6g exceeds --rtol %.6g\n", cmd, site, m.rel_max, rtol);
        over = 1;
    }
    return over;
}
