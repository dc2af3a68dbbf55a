/* Compiled recordings: verdict and compile floor (cli/compiled_out.h). */
#include "cli/compiled_out.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli_util.h"
#include "formats/trace.h"
#include "replay/analysis/sitecmp.h"

int drift_compile_floor_parse(const char *text, drift_compile_floor *out) {
    memset(out, 0, sizeof *out);
    size_t pl = strlen(DRIFT_COMPILE_FLOOR_NOTE);
    if (!text || strncmp(text, DRIFT_COMPILE_FLOOR_NOTE, pl) != 0) return 0;
    int have_site = 0, have_step = 0, have_diff = 0;
    const char *p = text + pl;
    while (*p) {
        while (*p == ' ') p++;
        if (!*p) break;
        size_t l = strcspn(p, " ");
        const char *eq = memchr(p, '=', l);
        if (!eq) return -1;
        size_t kl = (size_t)(eq - p), vl = l - kl - 1;
        char v[160];
        if (vl == 0 || vl >= sizeof v) return -1;
        memcpy(v, eq + 1, vl);
        v[vl] = '\0';
        char *end = NULL;
        if (kl == 4 && strncmp(p, "site", 4) == 0) {
            if (vl >= sizeof out->site) return -1;
            memcpy(out->site, v, vl + 1);
            have_site = 1;
        } else if (kl == 4 && strncmp(p, "step", 4) == 0) {
            out->step = strtoll(v, &end, 10);
            if (*end || out->step < 0) return -1;
            have_step = 1;
        } else if (kl == 13 && strncmp(p, "mean_abs_diff", 13) == 0) {
            out->mean_abs_diff = strtod(v, &end);
            if (*end || !(out->mean_abs_diff >= 0) || isinf(out->mean_abs_diff)) return -1;
            have_diff = 1;
        } else if (kl == 8 && strncmp(p, "mean_abs", 8) == 0) {
            out->mean_abs = strtod(v, &end);
            if (*end || !(out->mean_abs >= 0) || isinf(out->mean_abs)) return -1;
        } /* other keys: a later version's, ignored */
        p += l;
    }
    if (!have_site || !have_step || !have_diff) {
        memset(out, 0, sizeof *out);
        return -1;
    }
    out->known = 1;
    return 1;
}

void drift_compile_floor_read(const char *trace, drift_compile_floor *out) {
    memset(out, 0, sizeof *out);
    drift_trace_reader *r = NULL;
    if (!trace || drift_trace_reader_open(&r, trace, DRIFT_TRACE_OPEN_NORMAL, NULL)) return;
    drift_trace_note *rows = NULL;
    size_t n = 0;
    if (drift_trace_read_notes(r, -1, &rows, &n, NULL) == DRIFT_OK) {
        for (size_t i = 0; i < n; i++) {
            drift_compile_floor f;
            int k = drift_compile_floor_parse(rows[i].text, &f);
            if (k == 1) *out = f;
            else if (k < 0)
                fprintf(stderr, "drift: warning: %s: /notes: a compile-floor v1 note that does not parse (expected "
                                "site=S step=N mean_abs_diff=X, numbers >= 0): ignored\n", trace);
        }
    }
    free(rows);
    drift_trace_reader_close(r);
}

const char *drift_cli_first_divergent(const drift_replay_report *rep) {
    if (!rep || !rep->first_divergent) return NULL;
    for (int64_t s = 0; s < rep->n_steps; s++)
        if (rep->first_divergent[s]) return rep->first_divergent[s];
    return NULL;
}

/* The report's mean |diff| at site (or -1 when not compared). */
static double site_mean_diff(const drift_replay_report *rep, const char *site) {
    if (!rep) return -1;
    for (size_t i = 0; i < rep->cmp.n; i++)
        if (strcmp(rep->cmp.e[i].site, site) == 0) {
            drift_site_metrics m;
            drift_sitecmp_finish(&rep->cmp, &rep->cmp.e[i], &m);
            return m.mean_abs_diff;
        }
    return -1;
}

void drift_cli_compiled_text(FILE *f, const char *indent, const drift_libraries *rec, const drift_replay_report *rep,
                             const drift_compile_floor *fl) {
    char msg[8192], esc[256];
    if (drift_libraries_compiled_message(rec, drift_cli_first_divergent(rep), msg, sizeof msg))
        fprintf(f, "%scompiled: %s\n", indent, msg);
    if (!fl || !fl->known) {
        if (rec && rec->compiled)
            fprintf(f, "%scompile floor: not measured (the recorder's rec.compile_floor() stores it)\n", indent);
        return;
    }
    fprintf(f, "%scompile floor: %s mean |eager - compiled| %.6g at step %lld (compilation alone", indent,
            drift_cli_printable(fl->site, esc, sizeof esc), fl->mean_abs_diff, fl->step);
    if (fl->mean_abs > 0) fprintf(f, "; %.3g of the output's mean |x|", fl->mean_abs_diff / fl->mean_abs);
    fprintf(f, ")\n");
    double d = site_mean_diff(rep, fl->site);
    if (d >= 0 && fl->mean_abs_diff > 0)
        fprintf(f, "%s  this comparison: %s mean |diff| %.6g = %.4g x compilation alone\n", indent, esc, d,
                d / fl->mean_abs_diff);
}

void drift_cli_compiled_json(drift_json_buf *b, const drift_libraries *rec, const drift_replay_report *rep,
                             const drift_compile_floor *fl) {
    drift_json_buf_add_key(b, "compiled");
    char msg[8192];
    if (!drift_libraries_compiled_message(rec, drift_cli_first_divergent(rep), msg, sizeof msg) && !(fl && fl->known)) {
        drift_json_buf_add_null(b);
        return;
    }
    drift_json_buf_begin_object(b);
    if (msg[0]) drift_json_buf_field_string(b, "message", msg);
    else drift_json_buf_field_null(b, "message");
    const char *first = drift_cli_first_divergent(rep);
    if (first) drift_json_buf_field_string(b, "first_site", first);
    else drift_json_buf_field_null(b, "first_site");
    if (rec && rec->compiled) {
        drift_json_buf_field_string(b, "inductor_mode", rec->inductor_mode);
        drift_json_buf_field_string(b, "modules", rec->compiled_modules);
    }
    drift_json_buf_add_key(b, "compile_floor");
    if (!fl || !fl->known) {
        drift_json_buf_add_null(b);
    } else {
        drift_json_buf_begin_object(b);
        drift_json_buf_field_string(b, "site", fl->site);
        drift_json_buf_field_int(b, "step", fl->step);
        drift_json_buf_field_number(b, "mean_abs_diff", fl->mean_abs_diff);
        drift_json_buf_field_number(b, "mean_abs", fl->mean_abs);
        double d = site_mean_diff(rep, fl->site);
        if (d >= 0 && fl->mean_abs_diff > 0) drift_json_buf_field_number(b, "units", d / fl->mean_abs_diff);
        else drift_json_buf_field_null(b, "units");
        drift_json_buf_end_object(b);
    }
    drift_json_buf_end_object(b);
}
