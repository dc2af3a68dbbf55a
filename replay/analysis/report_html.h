/* drift report: one self-contained HTML page (inline SVG and CSS, no
 * script, no network) from what the command gathered (cli/cmd_report.c); replay/analysis/report_html.c. */
#ifndef DRIFT_REPLAY_ANALYSIS_REPORT_HTML_H
#define DRIFT_REPLAY_ANALYSIS_REPORT_HTML_H

#include <stdint.h>
#include <stdio.h>

#include "formats/json.h"

/* Per (site, step) values: mean |diff|, max |diff|, rel max, cosine, max ULP
 * (of the reference's magnitude; INFINITY for NaN against a number), RMSE
 * against the fp64 oracle, the flat index of the worst element (-1 none). */
enum {
    DRIFT_HTML_MEAN = 0, DRIFT_HTML_MAX = 1, DRIFT_HTML_REL = 2, DRIFT_HTML_COS = 3,
    DRIFT_HTML_ULP = 4, DRIFT_HTML_ORACLE = 5, DRIFT_HTML_WORST = 6, DRIFT_HTML_NV = 7
};

typedef struct drift_html_report {
    const char *title;           /* borrowed */
    const char *source;          /* how the data came about ("A against B", "replay result R") */
    const char *model;
    size_t n_sites, n_steps;
    const char *const *sites;    /* execution order */
    const int64_t *steps;
    const double *v;             /* [(site * n_steps + step) * DRIFT_HTML_NV + k], NaN = none */
    const uint8_t *present;      /* [site * n_steps + step] */
    const uint8_t *equal;        /* bitwise equal */
    const long *first;           /* per step: site index of the first divergence, -1 none */
    const double *lp, *ratio, *kl; /* per step, NaN = none; NULL = no series */
    const char *plan_a, *plan_b; /* plan JSON of both sides (NULL: unknown) */
    const char *label_a, *label_b;
    const drift_json_value *bisect; /* a bisect --json document, or NULL */
    const char *version;         /* drift's version, the command line, the UTC date (NULL: none) */
    const char *command_line;
    const char *date;
    const char *run_a, *run_b;   /* both traces' run ids (NULL: unknown) */
    const char *const *warnings; /* n_warnings lines */
    size_t n_warnings;
} drift_html_report;

/* Writes the page to f. Returns 0, or -1 on a write error. */
int drift_report_html_write(const drift_html_report *r, FILE *f);

#endif
