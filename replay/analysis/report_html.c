/* The HTML page of drift report (see report_html.h). Inline SVG and CSS
 * only: it opens offline, in a mail client's viewer, pasted into an issue. */
#include "replay/analysis/report_html.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "formats/html_escape.h"

static void esc(FILE *f, const char *s) { drift_html_escape(f, s); } /* formats/html_escape.h */

static const char *jstr(const drift_json_value *o, const char *k);

static const char *num(double v, char *buf, size_t n) {
    if (isnan(v)) snprintf(buf, n, "-");
    else if (v == 0) snprintf(buf, n, "0");
    else snprintf(buf, n, "%.3e", v);
    return buf;
}

static double val(const drift_html_report *r, size_t s, size_t t, int k) {
    return r->v[(s * r->n_steps + t) * DRIFT_HTML_NV + (size_t)k];
}

/* Log colour scale: t in [0, 1] from pale yellow through orange to dark red. */
static void colour(double t, char *buf, size_t n) {
    static const double stops[4][3] = {{255, 245, 204}, {253, 174, 97}, {227, 74, 51}, {127, 0, 0}};
    if (t < 0) t = 0;
    if (t > 1) t = 1;
    double x = t * 3;
    int i = x >= 3 ? 2 : (int)x;
    double u = x - i;
    int c[3];
    for (int k = 0; k < 3; k++) c[k] = (int)lround(stops[i][k] + (stops[i + 1][k] - stops[i][k]) * u);
    snprintf(buf, n, "#%02x%02x%02x", c[0], c[1], c[2]);
}

enum { LABEL_COLS = 44 }; /* monospace 11 px: ~6.6 px a character in the 300 px label column */

/* Where the label line starting at s ends: at most LABEL_COLS bytes, cut
 * after the last '.', ':' or '_' within them when there is one. */
static size_t label_cut(const char *s) {
    size_t n = strlen(s);
    if (n <= LABEL_COLS) return n;
    size_t cut = 0;
    for (size_t i = 0; i < LABEL_COLS; i++)
        if (s[i] == '.' || s[i] == ':' || s[i] == '_') cut = i + 1;
    return cut > LABEL_COLS / 3 ? cut : LABEL_COLS;
}

static int label_lines(const char *s) {
    int n = 0;
    do {
        s += label_cut(s);
        n++;
    } while (*s);
    return n;
}

/* A site label right-aligned at x, wrapped onto lines of one row. */
static void label(FILE *f, const char *s, int x, int y, int line) {
    fprintf(f, "<text class=\"site\" x=\"%d\" y=\"%d\" text-anchor=\"end\">", x, y);
    int k = 0;
    do {
        size_t n = label_cut(s);
        char part[LABEL_COLS + 1];
        memcpy(part, s, n);
        part[n] = 0;
        fprintf(f, "<tspan x=\"%d\" dy=\"%d\">", x, k++ ? line : 0);
        esc(f, part);
        fputs("</tspan>", f);
        s += n;
    } while (*s);
    fputs("</text>\n", f);
}

static void heatmap(const drift_html_report *r, FILE *f) {
    double lo = INFINITY, hi = 0;
    for (size_t s = 0; s < r->n_sites; s++)
        for (size_t t = 0; t < r->n_steps; t++) {
            double x = val(r, s, t, DRIFT_HTML_MEAN);
            if (r->present[s * r->n_steps + t] && isfinite(x) && x > 0) {
                if (x < lo) lo = x;
                if (x > hi) hi = x;
            }
        }
    /* the page's width: steps share what the labels leave (8..300 px each);
     * long site names wrap onto more lines of their row */
    int lw = 300, top = 40, line = 13, page = 1200;
    int cw = r->n_steps ? (page - lw - 20) / (int)r->n_steps : 16;
    if (cw > 300) cw = 300;
    if (cw < 8) cw = 8;
    int *y0 = drift_calloc(r->n_sites + 1, sizeof *y0);
    if (!y0) return;
    for (size_t s = 0; s < r->n_sites; s++) y0[s + 1] = y0[s] + label_lines(r->sites[s]) * line + 2;
    int w = lw + cw * (int)r->n_steps + 20, h = top + y0[r->n_sites] + 50;
    if (w < lw + 330) w = lw + 330; /* room for the legend */
    char a[32], b[32];
    fprintf(f, "<h2 id=\"heat\">Heatmap: mean |diff| per site and step</h2>\n<p>Rows: sites in execution order; "
               "columns: steps. Log colour scale from %s (pale) to %s (dark red); cyan = bitwise equal; grey = not "
               "recorded; a black frame marks the first divergent site of each step.</p>\n",
            num(hi > 0 ? lo : NAN, a, sizeof a), num(hi > 0 ? hi : NAN, b, sizeof b));
    fprintf(f, "<svg id=\"heatmap\" xmlns=\"http://www.w3.org/2000/svg\" width=\"100%%\" "
               "style=\"max-width:%dpx\" viewBox=\"0 0 %d %d\" font-family=\"monospace\" font-size=\"11\">\n",
            w, w, h);
    fprintf(f, "<text x=\"%d\" y=\"14\">step</text>\n", lw);
    int every = cw >= 40 ? 1 : cw >= 16 ? 2 : 10;
    for (size_t t = 0; t < r->n_steps; t++)
        if (t % (size_t)every == 0)
            fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%lld</text>\n", lw + cw * (int)t + cw / 2, top - 6,
                    (long long)r->steps[t]);
    for (size_t s = 0; s < r->n_sites; s++) {
        int y = top + y0[s], ch = y0[s + 1] - y0[s];
        label(f, r->sites[s], lw - 6, y + line - 2, line);
        for (size_t t = 0; t < r->n_steps; t++) {
            size_t i = s * r->n_steps + t;
            double x = val(r, s, t, DRIFT_HTML_MEAN);
            char fill[16];
            const char *cls = "cell";
            if (!r->present[i]) snprintf(fill, sizeof fill, "#dddddd");
            else if (r->equal[i] || x == 0) snprintf(fill, sizeof fill, "#9fe2ec");
            else if (!isfinite(x)) snprintf(fill, sizeof fill, "#000000");
            else colour(hi > lo ? (log10(x) - log10(lo)) / (log10(hi) - log10(lo)) : 1.0, fill, sizeof fill);
            int first = r->first[t] == (long)s;
            if (first) cls = "cell first";
            fprintf(f, "<rect class=\"%s\" data-site=\"", cls);
            esc(f, r->sites[s]);
            fprintf(f, "\" data-step=\"%lld\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\"%s><title>",
                    (long long)r->steps[t], lw + cw * (int)t, y, cw - 1, ch - 1, fill,
                    first ? " stroke=\"#000\" stroke-width=\"2\"" : "");
            esc(f, r->sites[s]);
            fprintf(f, " step %lld: mean|d| %s%s</title></rect>\n", (long long)r->steps[t],
                    r->present[i] ? num(x, a, sizeof a) : "not recorded", first ? " (first divergent)" : "");
        }
    }
    /* legend */
    int ly = top + y0[r->n_sites] + 16;
    drift_free(y0);
    for (int k = 0; k < 10; k++) {
        char fill[16];
        colour(k / 9.0, fill, sizeof fill);
        fprintf(f, "<rect class=\"legend\" x=\"%d\" y=\"%d\" width=\"20\" height=\"10\" fill=\"%s\"/>\n", lw + 20 * k, ly,
                fill);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text><text x=\"%d\" y=\"%d\">%s (log10)</text>\n",
            lw - 6, ly + 9, num(hi > 0 ? lo : NAN, a, sizeof a), lw + 206, ly + 9, num(hi > 0 ? hi : NAN, b, sizeof b));
    fputs("</svg>\n", f);
}

/* A line chart of one per-step series with labelled axes. */
static void curve(const drift_html_report *r, const double *y, const char *id, const char *title, FILE *f) {
    double hi = 0;
    size_t n = 0;
    for (size_t t = 0; t < r->n_steps; t++)
        if (isfinite(y[t])) {
            n++;
            if (y[t] > hi) hi = y[t];
        }
    if (!n) return;
    if (hi <= 0) hi = 1;
    int W = 520, H = 220, L = 80, B = 40, T = 20, R = 20;
    double xs = r->n_steps > 1 ? (double)(W - L - R) / (double)(r->n_steps - 1) : 0;
    char a[32];
    fprintf(f, "<figure><svg id=\"%s\" class=\"curve\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "font-family=\"sans-serif\" font-size=\"11\">\n", id, W, H);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#000\"/>\n", L, H - B, W - R, H - B);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#000\"/>\n", L, T, L, H - B);
    for (int k = 0; k <= 4; k++) { /* y ticks */
        int yy = H - B - (H - B - T) * k / 4;
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n", L - 4, yy + 4, num(hi * k / 4.0, a, sizeof a));
    }
    for (size_t t = 0; t < r->n_steps; t += (r->n_steps > 10 ? r->n_steps / 10 : 1))
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%lld</text>\n", L + xs * (double)t, H - B + 14,
                (long long)r->steps[t]);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">step</text>\n", (L + W - R) / 2, H - 6);
    fputs("<polyline fill=\"none\" stroke=\"#c0392b\" stroke-width=\"2\" points=\"", f);
    for (size_t t = 0; t < r->n_steps; t++)
        if (isfinite(y[t])) fprintf(f, "%.1f,%.1f ", L + xs * (double)t, (H - B) - (H - B - T) * (y[t] / hi));
    fputs("\"/>\n</svg><figcaption>", f);
    esc(f, title);
    fputs("</figcaption></figure>\n", f);
}


/* Compact text of a JSON value: strings bare at the top level, quoted inside
 * arrays and objects; truncated to n bytes. */
static size_t jtext_r(const drift_json_value *v, char *buf, size_t n, size_t o, int top) {
    if (o >= n) return o;
    switch (v->type) {
    case DRIFT_JSON_NULL: o += (size_t)snprintf(buf + o, n - o, "null"); break;
    case DRIFT_JSON_BOOL: o += (size_t)snprintf(buf + o, n - o, v->boolean ? "true" : "false"); break;
    case DRIFT_JSON_NUMBER: o += (size_t)snprintf(buf + o, n - o, "%.17g", v->number); break;
    case DRIFT_JSON_STRING: o += (size_t)snprintf(buf + o, n - o, top ? "%s" : "\"%s\"", v->str); break;
    case DRIFT_JSON_ARRAY:
        o += (size_t)snprintf(buf + o, n - o, "[");
        for (size_t i = 0; i < v->n_items && o < n; i++) {
            if (i) o += (size_t)snprintf(buf + o, n - o, ", ");
            if (o < n) o = jtext_r(&v->items[i], buf, n, o, 0);
        }
        if (o < n) o += (size_t)snprintf(buf + o, n - o, "]");
        break;
    case DRIFT_JSON_OBJECT:
        o += (size_t)snprintf(buf + o, n - o, "{");
        for (size_t i = 0; i < v->n_members && o < n; i++) {
            o += (size_t)snprintf(buf + o, n - o, "%s\"%s\": ", i ? ", " : "", v->members[i].key);
            if (o < n) o = jtext_r(&v->members[i].value, buf, n, o, 0);
        }
        if (o < n) o += (size_t)snprintf(buf + o, n - o, "}");
        break;
    }
    return o < n ? o : n;
}

static const char *jtext(const drift_json_value *v, char *buf, size_t n) {
    buf[0] = 0;
    jtext_r(v, buf, n, 0, 1);
    buf[n - 1] = 0;
    return buf;
}

/* Flattens a plan document into "key: value" rows; lists and objects give a
 * row per member, so an empty one gives none (as the key absent). */
static size_t plan_rows(const drift_json_value *p, char rows[][2][512], size_t max) {
    size_t n = 0;
    if (!p || p->type != DRIFT_JSON_OBJECT) return 0;
    for (size_t i = 0; i < p->n_members && n < max; i++) {
        const drift_json_member *m = &p->members[i];
        const drift_json_value *v = &m->value;
        if (v->type == DRIFT_JSON_OBJECT) {
            for (size_t k = 0; k < v->n_members && n < max; k++) {
                snprintf(rows[n][0], 512, "%s.%s", m->key, v->members[k].key);
                jtext(&v->members[k].value, rows[n][1], 512);
                n++;
            }
        } else if (v->type == DRIFT_JSON_ARRAY) {
            for (size_t k = 0; k < v->n_items && n < max; k++) {
                const drift_json_value *it = &v->items[k];
                if (it->type == DRIFT_JSON_ARRAY && it->n_items == 2 && it->items[0].type == DRIFT_JSON_STRING) {
                    snprintf(rows[n][0], 512, "%s[%.400s]", m->key, it->items[0].str);
                    jtext(&it->items[1], rows[n][1], 512);
                } else {
                    snprintf(rows[n][0], 512, "%s[%zu]", m->key, k);
                    jtext(it, rows[n][1], 512);
                }
                n++;
            }
            /* an empty list adds no row: it means what an absent one does */
        } else {
            snprintf(rows[n][0], 512, "%s", m->key);
            jtext(v, rows[n][1], 512);
            n++;
        }
    }
    return n;
}

static void plans(const drift_html_report *r, FILE *f) {
    if (!r->plan_a && !r->plan_b) return;
    enum { MAXR = 256 };
    char (*ra)[2][512] = drift_calloc(MAXR, sizeof *ra), (*rb)[2][512] = drift_calloc(MAXR, sizeof *rb);
    drift_json_value *pa = NULL, *pb = NULL;
    if (!ra || !rb) goto done;
    if (r->plan_a) drift_json_parse(r->plan_a, strlen(r->plan_a), "plan", &pa, NULL);
    if (r->plan_b) drift_json_parse(r->plan_b, strlen(r->plan_b), "plan", &pb, NULL);
    size_t na = plan_rows(pa, ra, MAXR), nb = plan_rows(pb, rb, MAXR);
    fputs("<h2 id=\"plans\">Plans side by side</h2>\n<table class=\"plans\"><tr><th>setting</th><th>", f);
    esc(f, r->label_a);
    fputs("</th><th>", f);
    esc(f, r->label_b);
    fputs("</th></tr>\n", f);
    /* A's rows in order, then B's rows A lacks */
    for (int pass = 0; pass < 2; pass++) {
        size_t n = pass ? nb : na;
        for (size_t i = 0; i < n; i++) {
            const char *key = pass ? rb[i][0] : ra[i][0];
            const char *va = NULL, *vb = NULL;
            for (size_t k = 0; k < na; k++)
                if (!strcmp(ra[k][0], key)) va = ra[k][1];
            for (size_t k = 0; k < nb; k++)
                if (!strcmp(rb[k][0], key)) vb = rb[k][1];
            if (pass && va) continue;
            int same = va && vb && !strcmp(va, vb);
            fprintf(f, "<tr class=\"%s\"><td>", same ? "same" : "diff");
            esc(f, key);
            fputs("</td><td>", f);
            esc(f, va ? va : "(absent)");
            fputs("</td><td>", f);
            esc(f, vb ? vb : "(absent)");
            fputs("</td></tr>\n", f);
        }
    }
    fputs("</table>\n", f);
done:
    drift_json_free(pa);
    drift_json_free(pb);
    drift_free(ra);
    drift_free(rb);
}

static const char *jstr(const drift_json_value *o, const char *k) {
    const drift_json_value *v = drift_json_object_get(o, k);
    return v && v->type == DRIFT_JSON_STRING ? v->str : "";
}

static double jnum(const drift_json_value *o, const char *k) {
    const drift_json_value *v = drift_json_object_get(o, k);
    return v && v->type == DRIFT_JSON_NUMBER ? v->number : NAN;
}

/* A JSON value as indented text (HTML-escaped): members and items one per
 * line, a list of scalars (a [pattern, dtype] pair) on one line. */
static void pretty(const drift_json_value *v, int ind, FILE *f) {
    char buf[64];
    switch (v->type) {
    case DRIFT_JSON_NULL: fputs("null", f); return;
    case DRIFT_JSON_BOOL: fputs(v->boolean ? "true" : "false", f); return;
    case DRIFT_JSON_NUMBER: snprintf(buf, sizeof buf, "%.17g", v->number); fputs(buf, f); return;
    case DRIFT_JSON_STRING:
        fputc('"', f);
        for (const char *c = v->str; *c; c++) {
            if (*c == '\\' || *c == '"') fputc('\\', f);
            char one[2] = {*c, 0};
            esc(f, one);
        }
        fputc('"', f);
        return;
    case DRIFT_JSON_ARRAY: {
        int flat = 1;
        for (size_t i = 0; i < v->n_items; i++)
            flat &= v->items[i].type != DRIFT_JSON_ARRAY && v->items[i].type != DRIFT_JSON_OBJECT;
        fputc('[', f);
        for (size_t i = 0; i < v->n_items; i++) {
            if (flat) fputs(i ? ", " : "", f);
            else fprintf(f, "%s\n%*s", i ? "," : "", ind + 2, "");
            pretty(&v->items[i], ind + 2, f);
        }
        if (!flat && v->n_items) fprintf(f, "\n%*s", ind, "");
        fputc(']', f);
        return;
    }
    case DRIFT_JSON_OBJECT:
        fputc('{', f);
        for (size_t i = 0; i < v->n_members; i++) {
            fprintf(f, "%s\n%*s\"", i ? "," : "", ind + 2, "");
            esc(f, v->members[i].key);
            fputs("\": ", f);
            pretty(&v->members[i].value, ind + 2, f);
        }
        if (v->n_members) fprintf(f, "\n%*s", ind, "");
        fputc('}', f);
        return;
    }
}

/* The fix as a diff against the bad plan: per culprit, the bad plan's line
 * (-) and the fixed plan's (+), which is the good plan's value. */
static void fix_diff(const drift_json_value *b, FILE *f) {
    const drift_json_value *sets = drift_json_object_get(b, "culprit_sets");
    fputs("<pre class=\"fixdiff\">--- bad plan ", f);
    esc(f, jstr(b, "bad"));
    fputs("\n+++ the fixed plan\n", f);
    for (size_t k = 0; sets && sets->type == DRIFT_JSON_ARRAY && k < sets->n_items; k++)
        for (size_t i = 0; sets->items[k].type == DRIFT_JSON_ARRAY && i < sets->items[k].n_items; i++) {
            const drift_json_value *e = &sets->items[k].items[i];
            fputs("<span class=\"del\">- ", f);
            esc(f, jstr(e, "name"));
            fputs(": ", f);
            esc(f, *jstr(e, "bad") ? jstr(e, "bad") : "(absent)");
            fputs("</span>\n<span class=\"add\">+ ", f);
            esc(f, jstr(e, "name"));
            fputs(": ", f);
            esc(f, *jstr(e, "good") ? jstr(e, "good") : "(absent)");
            fputs("</span>\n", f);
        }
    fputs("</pre>\n", f);
}

static void bisect(const drift_json_value *b, FILE *f) {
    char x[32], y[32], z[32]; /* one buffer per number of a printf */
    fputs("<h2 id=\"bisect\">Bisect: the culprits</h2>\n<p>good plan <b>", f);
    esc(f, jstr(b, "good"));
    fputs("</b>, bad plan <b>", f);
    esc(f, jstr(b, "bad"));
    fputs("</b>, metric ", f);
    esc(f, jstr(b, "metric")); /* from the bisect JSON: a string like any other */
    fprintf(f, ": good %s, bad %s, noise floor %s.</p>\n",
            num(jnum(b, "good_metric"), x, sizeof x), num(jnum(b, "bad_metric"), y, sizeof y),
            num(jnum(b, "noise_floor"), z, sizeof z));
    const drift_json_value *sets = drift_json_object_get(b, "culprit_sets");
    fputs("<table class=\"culprits\"><tr><th>set</th><th>culprit</th><th>kind</th><th>good</th><th>bad</th>"
          "<th>effect alone</th><th>x floor</th><th>first divergent site alone</th></tr>\n", f);
    for (size_t k = 0; sets && sets->type == DRIFT_JSON_ARRAY && k < sets->n_items; k++) {
        const drift_json_value *set = &sets->items[k];
        for (size_t i = 0; set->type == DRIFT_JSON_ARRAY && i < set->n_items; i++) {
            const drift_json_value *e = &set->items[i];
            fprintf(f, "<tr class=\"culprit\"><td>%zu</td><td>", k + 1);
            esc(f, jstr(e, "name"));
            fputs("</td><td>", f);
            esc(f, jstr(e, "kind"));
            fputs("</td><td>", f);
            esc(f, jstr(e, "good"));
            fputs("</td><td>", f);
            esc(f, jstr(e, "bad"));
            fprintf(f, "</td><td>%s</td><td>%s</td><td>", num(jnum(e, "metric_alone"), x, sizeof x),
                    num(jnum(e, "floor_units"), y, sizeof y));
            esc(f, jstr(e, "first_divergent"));
            fputs("</td></tr>\n", f);
        }
    }
    fputs("</table>\n", f);
    const drift_json_value *d = drift_json_object_get(b, "differences");
    if (d && d->type == DRIFT_JSON_ARRAY) {
        fprintf(f, "<details><summary>%zu difference(s) between the plans searched</summary><ul>\n", d->n_items);
        for (size_t i = 0; i < d->n_items; i++) {
            fputs("<li>", f);
            esc(f, jstr(&d->items[i], "name"));
            fputs(": ", f);
            esc(f, jstr(&d->items[i], "good"));
            fputs(" (good) vs ", f);
            esc(f, jstr(&d->items[i], "bad"));
            fputs(" (bad)</li>\n", f);
        }
        fputs("</ul></details>\n", f);
    }
    const drift_json_value *fix = drift_json_object_get(b, "fix");
    if (fix && fix->type == DRIFT_JSON_OBJECT) {
        const drift_json_value *ver = drift_json_object_get(fix, "verified");
        int ok = ver && ver->type == DRIFT_JSON_BOOL && ver->boolean;
        fputs("<h2 id=\"fix\">The suggested fix</h2>\n<p>Plan file <code>", f);
        esc(f, jstr(fix, "path"));
        fprintf(f, "</code>: the bad plan with the culprit differences taken from the good plan; %s (output ",
                ok ? "<b class=\"ok\">verified</b> by a replay" : "<b class=\"bad\">NOT verified</b>");
        esc(f, jstr(b, "metric"));
        fprintf(f, " %s, the good plan's %s).</p>\n", num(jnum(fix, "output_metric"), x, sizeof x),
                num(jnum(fix, "good_output_metric"), y, sizeof y));
        fix_diff(b, f);
        const drift_json_value *plan = drift_json_object_get(fix, "plan");
        if (plan) {
            fputs("<details open><summary>the whole fixed plan</summary><pre class=\"fixplan\">", f);
            pretty(plan, 0, f);
            fputs("</pre></details>\n", f);
        }
    }
}

/* A max ULP readably: exact up to a million, then in powers of ten; a NaN
 * against a number says so. */
static const char *ulp_text(double u, char *buf, size_t n) {
    if (isnan(u)) snprintf(buf, n, "-");
    else if (isinf(u)) snprintf(buf, n, "NaN vs number");
    else if (u < 1e6) snprintf(buf, n, "%.0f", u);
    else snprintf(buf, n, "%.1e", u);
    return buf;
}

/* Over all steps per site; the worst element, max ULP and oracle RMSE
 * columns appear when some row knows them. */
static void site_table(const drift_html_report *r, FILE *f) {
    char a[32], b[32], c[32], d[32], e[32], g[32], w[96];
    int has_worst = 0, has_oracle = 0;
    for (size_t i = 0; i < r->n_sites * r->n_steps; i++) {
        if (!r->present[i]) continue;
        has_worst |= r->v[i * DRIFT_HTML_NV + DRIFT_HTML_WORST] >= 0;
        has_oracle |= isfinite(r->v[i * DRIFT_HTML_NV + DRIFT_HTML_ORACLE]);
    }
    fputs("<h2 id=\"sites\">Per-site table (over all steps)</h2>\n<table class=\"sitetable\"><tr><th>site</th>"
          "<th>bitwise-equal steps</th><th>mean of mean |diff|</th><th>max |diff|</th><th>max rel max</th>"
          "<th>min cosine</th><th>first divergent in steps</th>", f);
    if (has_worst) fputs("<th>worst element (step, flat index)</th>", f);
    fputs("<th title=\"|t - r| in units of the reference's last place\">max ULP</th>", f);
    if (has_oracle) fputs("<th>RMSE vs fp64 oracle</th>", f);
    fputs("</tr>\n", f);
    for (size_t s = 0; s < r->n_sites; s++) {
        double sum = 0, mx = NAN, rel = NAN, cs = NAN, ulp = NAN, orc = NAN;
        size_t n = 0, eq = 0, fd = 0, wt = 0;
        for (size_t t = 0; t < r->n_steps; t++) {
            size_t i = s * r->n_steps + t;
            if (!r->present[i]) continue;
            double m = val(r, s, t, DRIFT_HTML_MEAN);
            if (!isnan(m)) { sum += m; n++; }
            double x = val(r, s, t, DRIFT_HTML_MAX), y = val(r, s, t, DRIFT_HTML_REL), z = val(r, s, t, DRIFT_HTML_COS);
            double u = val(r, s, t, DRIFT_HTML_ULP), o = val(r, s, t, DRIFT_HTML_ORACLE);
            if (!isnan(x) && (isnan(mx) || x > mx)) { mx = x; wt = t; }
            if (!isnan(y) && (isnan(rel) || y > rel)) rel = y;
            if (!isnan(z) && (isnan(cs) || z < cs)) cs = z;
            if (!isnan(u) && (isnan(ulp) || u > ulp)) ulp = u;
            if (!isnan(o) && (isnan(orc) || o > orc)) orc = o;
            eq += r->equal[i];
            fd += r->first[t] == (long)s;
        }
        fprintf(f, "<tr%s><td>", fd ? " class=\"first\"" : "");
        esc(f, r->sites[s]);
        fprintf(f, "</td><td class=\"num\">%zu</td><td class=\"num\">%s</td><td class=\"num\">%s</td>"
                   "<td class=\"num\">%s</td><td class=\"num\">%s</td><td class=\"num\">%zu</td>",
                eq, num(n ? sum / (double)n : NAN, a, sizeof a), num(mx, b, sizeof b), num(rel, c, sizeof c),
                isnan(cs) ? "-" : (snprintf(d, sizeof d, "%.8f", cs), d), fd);
        if (has_worst) {
            double wi = isnan(mx) || mx == 0 ? -1 : val(r, s, wt, DRIFT_HTML_WORST);
            if (wi >= 0) snprintf(w, sizeof w, "step %lld, %.0f", (long long)r->steps[wt], wi);
            else snprintf(w, sizeof w, "-");
            fprintf(f, "<td class=\"num worst\">%s</td>", w);
        }
        fprintf(f, "<td class=\"num ulp\">%s</td>", ulp_text(ulp, e, sizeof e));
        if (has_oracle) fprintf(f, "<td class=\"num oracle\">%s</td>", num(orc, g, sizeof g));
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

int drift_report_html_write(const drift_html_report *r, FILE *f) {
    char a[32];
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>", f);
    esc(f, r->title);
    fputs("</title>\n<style>body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse;"
          "margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;font-size:13px}td.num{text-align:right;"
          "font-family:monospace}tr.diff td{background:#fde2e2}tr.first td{background:#fff3cd}.ok{color:#1a7f37}"
          ".bad{color:#c0392b}figure{display:inline-block;margin:0 1em}code,pre{background:#f6f8fa}pre{white-space:pre-wrap;overflow-wrap:anywhere}"
          ".del{color:#b31d28;background:#ffeef0}.add{color:#22863a;background:#f0fff4}"
          ".warn{color:#9a6700}</style>\n</head><body>\n<h1>", f);
    esc(f, r->title);
    fputs("</h1>\n<p>", f);
    esc(f, r->source);
    fputs("<br>model <code>", f);
    esc(f, r->model);
    fputs("</code><br>", f);
    if (r->n_sites == 0 && r->bisect) { /* a bisect document alone: its trace, not "0 sites" */
        const drift_json_value *st = drift_json_object_get(r->bisect, "steps");
        fputs("bisect of trace <code>", f);
        esc(f, jstr(r->bisect, "trace"));
        fputs("</code>", f);
        if (st && st->type == DRIFT_JSON_NUMBER) fprintf(f, ", %.0f step(s) replayed", st->number);
        fputs("</p>\n", f);
    } else {
        fprintf(f, "%zu sites, %zu steps</p>\n", r->n_sites, r->n_steps);
    }
    fputs("<table class=\"provenance\">", f);
    const char *rows[][2] = {{"drift version", r->version}, {"command line", r->command_line}, {"date (UTC)", r->date},
                             {r->label_b && *r->label_b ? "run id (candidate)" : "run id", r->run_a},
                             {"run id (reference)", r->run_b}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (!rows[i][1]) continue;
        fprintf(f, "<tr><th>%s</th><td class=\"prov\"><code>", rows[i][0]);
        esc(f, *rows[i][1] ? rows[i][1] : "(not recorded)");
        fputs("</code></td></tr>\n", f);
    }
    fputs("</table>\n", f);
    for (size_t i = 0; i < r->n_warnings; i++) {
        fputs("<p class=\"warn\">warning: ", f);
        esc(f, r->warnings[i]);
        fputs("</p>\n", f);
    }
    if (r->n_steps > 0) {
        fputs("<h2 id=\"first\">First divergence per step</h2>\n<table class=\"firstdiv\"><tr><th>step</th>"
              "<th>first divergent site</th><th>mean |diff| there</th></tr>\n", f);
        for (size_t t = 0; t < r->n_steps; t++) {
            long s = r->first[t];
            fprintf(f, "<tr class=\"firststep\" data-step=\"%lld\"><td>%lld</td><td class=\"site\">",
                    (long long)r->steps[t], (long long)r->steps[t]);
            esc(f, s >= 0 ? r->sites[s] : "none (bitwise equal)");
            fprintf(f, "</td><td class=\"num\">%s</td></tr>\n", s >= 0 ? num(val(r, (size_t)s, t, DRIFT_HTML_MEAN), a, sizeof a) : "0");
        }
        fputs("</table>\n", f);
        heatmap(r, f);
        if (r->lp || r->ratio || r->kl) {
            fputs("<h2 id=\"curves\">Log-prob and ratio drift per step</h2>\n", f);
            if (r->lp) curve(r, r->lp, "curve-logprob", "log_prob_mean_abs_diff = mean |lp_new - lp_old|", f);
            if (r->ratio) curve(r, r->ratio, "curve-ratio", "ratio_abs_minus_1 = mean |exp(lp_new - lp_old) - 1|", f);
            if (r->kl) curve(r, r->kl, "curve-kl", "approx_kl = 0.5 mean (lp_new - lp_old)^2", f);
        }
        site_table(r, f);
    }
    plans(r, f);
    if (r->bisect) bisect(r->bisect, f);
    fputs("<p><small>drift report: one self-contained page, no scripts, no network.</small></p>\n</body></html>\n", f);
    return ferror(f) ? -1 : 0;
}
