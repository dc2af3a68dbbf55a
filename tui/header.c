/* The run line of `drift top`'s header (see header.h). */
#include "tui/header.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

size_t drift_top_prefix_bytes(const char *s, int cells, int *used) {
    size_t i = 0;
    int c = 0;
    while (s[i] && c < cells) {
        unsigned char b = (unsigned char)s[i];
        size_t n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
        for (size_t k = 1; k < n; k++)
            if (!s[i + k]) {
                n = k;
                break;
            }
        i += n;
        c++;
    }
    if (used) *used = c;
    return i;
}

int drift_top_cells(const char *s) {
    int c = 0;
    if (s) drift_top_prefix_bytes(s, 1 << 30, &c);
    return c;
}

int drift_top_fit_path(const char *path, int cells, int utf8, char *out, size_t sz) {
    if (!out || sz == 0) return 0;
    out[0] = 0;
    if (!path) path = "";
    int n = drift_top_cells(path);
    if (n <= cells) {
        snprintf(out, sz, "%s", path);
        return drift_top_cells(out);
    }
    const char *ell = utf8 ? "\xe2\x80\xa6" : "...";
    int ell_w = utf8 ? 1 : 3;
    if (cells < ell_w + 1) return 0;
    /* the tail of cells - ell_w code points: skip the first n - (cells - ell_w) */
    size_t skip = drift_top_prefix_bytes(path, n - (cells - ell_w), NULL);
    snprintf(out, sz, "%s%s", ell, path + skip);
    return drift_top_cells(out);
}

static void add(drift_top_segs *o, drift_top_seg_kind k, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(drift_top_segs *o, drift_top_seg_kind k, const char *fmt, ...) {
    if (o->n >= DRIFT_TOP_SEG_MAX) return;
    drift_top_seg *s = &o->s[o->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->text, sizeof s->text, fmt, ap);
    va_end(ap);
    s->kind = k;
    o->cells += drift_top_cells(s->text);
}

static int bad_state(const char *st) {
    return st && (strncmp(st, "failed", 6) == 0 || strcmp(st, "stopped without closing") == 0);
}

/* The state word as shown: whole (a failure's reason cut to 40 cells), or short ("failed", "stopped"). */
static void state_text(const char *st, int shrt, char *out, size_t sz) {
    if (!st || !st[0]) st = "?";
    if (shrt && strncmp(st, "failed", 6) == 0) snprintf(out, sz, "failed");
    else if (shrt && strcmp(st, "stopped without closing") == 0) snprintf(out, sz, "stopped");
    else {
        int used = 0;
        size_t b = drift_top_prefix_bytes(st, 40, &used);
        snprintf(out, sz, "%.*s", (int)b, st);
    }
}

typedef struct form {
    int title, range, shrt, paths;
} form;

/* Builds form f into o; returns 0 when it does not fit width. */
static int build(const drift_top_header *h, const form *f, int width, int utf8, drift_top_segs *o) {
    memset(o, 0, sizeof *o);
    char sa[64], sb[64];
    state_text(h->writer, f->shrt, sa, sizeof sa);
    state_text(h->against_writer, f->shrt, sb, sizeof sb);
    /* everything but the paths' text first, to know the paths' room */
    drift_top_segs t;
    memset(&t, 0, sizeof t);
    if (f->title) add(&t, DRIFT_TOP_SEG_BOLD, "drift top  ");
    if (h->steps_committed > 0 && f->range)
        add(&t, DRIFT_TOP_SEG_NORMAL, "steps %lld [%lld..%lld]", (long long)h->steps_committed,
            (long long)h->first_step, (long long)h->last_step);
    else
        add(&t, DRIFT_TOP_SEG_NORMAL, "steps %lld", (long long)h->steps_committed);
    if (h->steps_per_s >= 10) add(&t, DRIFT_TOP_SEG_NORMAL, "  %.0f steps/s", h->steps_per_s);
    else if (h->steps_per_s > 0) add(&t, DRIFT_TOP_SEG_NORMAL, "  %.2g steps/s", h->steps_per_s);
    if (h->world_size > 1) add(&t, DRIFT_TOP_SEG_NORMAL, "  rank %d/%d", (int)h->rank, (int)h->world_size);
    int single = !h->against || !h->against[0];
    if (single && f->paths) return 0; /* the paths' forms are --against's */
    int fixed = t.cells + (f->paths ? 2 + 1 + 2 + 3 + 1 : 2 + 5) + drift_top_cells(sa) + drift_top_cells(sb);
    char pa[200] = "", pb[200] = "";
    if (f->paths) {
        int room = width - fixed;
        int na = drift_top_cells(h->path), nb = drift_top_cells(h->against);
        int wa = na, wb = nb;
        if (na + nb > room) { /* the shorter keeps its length while it fits half; the other takes the rest */
            wa = room / 2;
            wb = room - wa;
            if (na < wa) { wa = na; wb = room - na; }
            else if (nb < wb) { wb = nb; wa = room - nb; }
        }
        if (wa < (na < 10 ? na : 10) || wb < (nb < 10 ? nb : 10)) return 0; /* a cut path keeps 10 cells */
        drift_top_fit_path(h->path, wa, utf8, pa, sizeof pa);
        drift_top_fit_path(h->against, wb, utf8, pb, sizeof pb);
    }
    *o = t;
    if (single) { /* one trace: its writer alone */
        add(o, DRIFT_TOP_SEG_NORMAL, "  writer ");
        add(o, bad_state(h->writer) ? DRIFT_TOP_SEG_BAD : DRIFT_TOP_SEG_NORMAL, "%s", sa);
        return o->cells <= width;
    }
    if (f->paths) {
        add(o, DRIFT_TOP_SEG_BOLD, "  %s", pa);
        add(o, bad_state(h->writer) ? DRIFT_TOP_SEG_BAD : DRIFT_TOP_SEG_NORMAL, " %s", sa);
        add(o, DRIFT_TOP_SEG_BOLD, "  vs %s", pb);
        add(o, bad_state(h->against_writer) ? DRIFT_TOP_SEG_BAD : DRIFT_TOP_SEG_NORMAL, " %s", sb);
    } else {
        add(o, DRIFT_TOP_SEG_NORMAL, "  ");
        add(o, bad_state(h->writer) ? DRIFT_TOP_SEG_BAD : DRIFT_TOP_SEG_NORMAL, "%s", sa);
        add(o, DRIFT_TOP_SEG_NORMAL, "  vs ");
        add(o, bad_state(h->against_writer) ? DRIFT_TOP_SEG_BAD : DRIFT_TOP_SEG_NORMAL, "%s", sb);
    }
    return o->cells <= width;
}

void drift_top_header_run_segs(const drift_top_header *h, int width, int utf8, drift_top_segs *out) {
    static const form forms[] = {{1, 1, 0, 1}, {1, 0, 0, 1}, {0, 0, 0, 1}, {0, 0, 1, 1}, {1, 1, 0, 0},
                                 {1, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 1, 0},
                                 {1, 0, 1, 0}}; /* the last resort, clipped by the view: at least the name */
    size_t nf = sizeof forms / sizeof forms[0];
    size_t i = 0;
    while (i + 1 < nf && !build(h, &forms[i], width, utf8, out)) i++;
    if (i + 1 == nf) build(h, &forms[i], width, utf8, out); /* the narrowest: the view clips it */
    /* the rest while it fits whole; the family last, its head when cut */
    char buf[200];
    snprintf(buf, sizeof buf, "  run %.80s", h->run_id && h->run_id[0] ? h->run_id : "?");
    if (out->cells + drift_top_cells(buf) <= width) add(out, DRIFT_TOP_SEG_NORMAL, "%s", buf);
    snprintf(buf, sizeof buf, "  %.40s", h->side && h->side[0] ? h->side : "?");
    if ((!h->against || !h->against[0]) && out->cells + drift_top_cells(buf) <= width) add(out, DRIFT_TOP_SEG_NORMAL, "%s", buf);
    snprintf(buf, sizeof buf, "  cfg s=%g", h->guidance_scale);
    if (out->cells + drift_top_cells(buf) <= width) add(out, DRIFT_TOP_SEG_NORMAL, "%s", buf);
    const char *fam = h->family && h->family[0] ? h->family : "?";
    int left = width - out->cells - 2;
    if (left >= 8) { /* its head, then an ellipsis when cut */
        int n = drift_top_cells(fam);
        if (n <= left) add(out, DRIFT_TOP_SEG_NORMAL, "  %.180s", fam);
        else add(out, DRIFT_TOP_SEG_NORMAL, "  %.*s%s", (int)drift_top_prefix_bytes(fam, left - (utf8 ? 1 : 3), NULL), fam,
                 utf8 ? "\xe2\x80\xa6" : "...");
    }
}
