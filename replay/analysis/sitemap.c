/* Site maps (see sitemap.h). */
#include "replay/analysis/sitemap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "formats/infile.h"
#include "formats/json.h"

#define MAX_CAPS 64 /* '*' per pattern (DRIFT_SITEMAP_MAX_STARS) */

typedef struct rename_rule { char *from, *to; } rename_rule;
typedef struct concat_rule {
    char *site;
    char *parts[DRIFT_SITEMAP_MAX_PARTS];
    size_t n_parts;
    int axis;
} concat_rule;

struct drift_sitemap {
    rename_rule *ren;
    size_t n_ren;
    concat_rule *cat;
    size_t n_cat;
};

/* '*' matches any run (shortest first, left to right), other bytes match
 * themselves. The two-pointer algorithm with one backtrack point: every
 * non-star byte consumes one byte of the name, so once the segment after a
 * star has matched, no earlier star needs to grow again (a match with the
 * segment at its first place exists whenever any match does). O(len(name) x
 * len(pat)) at worst, never exponential (a backtracking matcher took minutes
 * on "*a*a...*b" or engine.*.*.*.*:out against a 480-dot name). The captures
 * equal the leftmost-shortest ones of a backtracking search. */
static int cap_linear(const char *p, const char *s, size_t caps[][2]) {
    size_t pi = 0, si = 0, star_p = (size_t)-1, star_s = 0;
    int k = 0, cur = -1; /* stars passed; the star being extended */
    while (s[si]) {
        if (p[pi] == '*') {
            caps[k][0] = caps[k][1] = si;
            cur = k++;
            star_p = pi++;
            star_s = si;
        } else if (p[pi] && p[pi] == s[si]) {
            pi++;
            si++;
        } else if (star_p != (size_t)-1) {
            pi = star_p + 1;
            si = ++star_s;
            caps[cur][1] = star_s;
            k = cur + 1; /* the stars after it are met again */
        } else {
            return 0;
        }
    }
    while (p[pi] == '*') {
        caps[k][0] = caps[k][1] = si;
        k++;
        pi++;
    }
    return !p[pi];
}

int drift_sitemap_glob_capture(const char *pat, const char *name, size_t caps[][2], int max_caps) {
    int stars = 0;
    for (const char *q = pat; *q; q++) stars += *q == '*';
    if (stars > MAX_CAPS) return -1; /* refused when the map is loaded */
    size_t tmp[MAX_CAPS][2];
    if (!cap_linear(pat, name, tmp)) return -1;
    for (int i = 0; i < stars && i < max_caps; i++) {
        caps[i][0] = tmp[i][0];
        caps[i][1] = tmp[i][1] - tmp[i][0];
    }
    return stars;
}

/* Writes tmpl with its n-th `*` replaced by capture n of name. */
static int subst(const char *tmpl, const char *name, size_t caps[][2], int n_caps, char *buf, size_t bufsz) {
    size_t o = 0;
    int k = 0;
    for (const char *q = tmpl; *q; q++) {
        const char *src = q;
        size_t len = 1;
        if (*q == '*' && k < n_caps) {
            src = name + caps[k][0];
            len = caps[k][1];
            k++;
        }
        if (o + len >= bufsz) return -1;
        memcpy(buf + o, src, len);
        o += len;
    }
    if (o >= bufsz) return -1;
    buf[o] = 0;
    return 0;
}

int drift_sitemap_rename(const drift_sitemap *m, const char *name, char *buf, size_t bufsz) {
    size_t caps[MAX_CAPS][2];
    for (size_t i = 0; m && i < m->n_ren; i++) {
        int n = drift_sitemap_glob_capture(m->ren[i].from, name, caps, MAX_CAPS);
        if (n < 0) continue;
        return subst(m->ren[i].to, name, caps, n, buf, bufsz) ? -1 : 1;
    }
    if (strlen(name) >= bufsz) return -1;
    memcpy(buf, name, strlen(name) + 1);
    return 0;
}

static size_t expand(const concat_rule *c, const char *name, size_t caps[][2], int n,
                     char parts[][DRIFT_SITEMAP_NAME_MAX]) {
    for (size_t k = 0; k < c->n_parts; k++)
        if (subst(c->parts[k], name, caps, n, parts[k], DRIFT_SITEMAP_NAME_MAX)) return 0;
    return c->n_parts;
}

size_t drift_sitemap_concat_of(const drift_sitemap *m, const char *name, char parts[][DRIFT_SITEMAP_NAME_MAX],
                               int *axis) {
    size_t caps[MAX_CAPS][2];
    for (size_t i = 0; m && i < m->n_cat; i++) {
        int n = drift_sitemap_glob_capture(m->cat[i].site, name, caps, MAX_CAPS);
        if (n < 0) continue;
        *axis = m->cat[i].axis;
        return expand(&m->cat[i], name, caps, n, parts);
    }
    return 0;
}

size_t drift_sitemap_concat_by_first_part(const drift_sitemap *m, const char *name, char *site,
                                          char parts[][DRIFT_SITEMAP_NAME_MAX], int *axis) {
    size_t caps[MAX_CAPS][2];
    for (size_t i = 0; m && i < m->n_cat; i++) {
        int n = drift_sitemap_glob_capture(m->cat[i].parts[0], name, caps, MAX_CAPS);
        if (n < 0) continue;
        if (subst(m->cat[i].site, name, caps, n, site, DRIFT_SITEMAP_NAME_MAX)) return 0;
        *axis = m->cat[i].axis;
        return expand(&m->cat[i], name, caps, n, parts);
    }
    return 0;
}

void drift_sitemap_free(drift_sitemap *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_ren; i++) {
        free(m->ren[i].from);
        free(m->ren[i].to);
    }
    for (size_t i = 0; i < m->n_cat; i++) {
        free(m->cat[i].site);
        for (size_t k = 0; k < m->cat[i].n_parts; k++) free(m->cat[i].parts[k]);
    }
    free(m->ren);
    free(m->cat);
    free(m);
}

static int bad(drift_err *err, const char *src, const drift_json_value *v, const char *fmt, const char *what) {
    return drift_err_set(err, DRIFT_E_INPUT, src, "%d:%d: %s: %s", v ? v->line : 0, v ? v->col : 0, fmt, what);
}

static int pattern(const drift_json_value *v, const char *src, const char *field, char **out, drift_err *err) {
    if (!v || v->type != DRIFT_JSON_STRING || v->str_len == 0 || v->str_len >= DRIFT_SITEMAP_NAME_MAX ||
        strlen(v->str) != v->str_len)
        return bad(err, src, v, field, "expected a non-empty site name pattern (at most 511 bytes)");
    int stars = 0;
    for (const char *q = v->str; *q; q++) stars += *q == '*';
    if (stars > MAX_CAPS) return bad(err, src, v, field, "at most 64 '*' in one pattern (limit)");
    *out = drift_strdup(v->str);
    return *out ? DRIFT_OK : drift_err_set(err, DRIFT_E_NOMEM, src, "out of memory");
}

int drift_sitemap_parse(drift_sitemap **out, const char *text, size_t len, const char *source, drift_err *err) {
    *out = NULL;
    drift_json_value *root = NULL;
    int rc = drift_json_parse(text, len, source, &root, err);
    if (rc) return rc;
    drift_sitemap *m = drift_calloc(1, sizeof *m);
    if (!m) {
        drift_json_free(root);
        return drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory");
    }
    if (root->type != DRIFT_JSON_OBJECT) {
        rc = bad(err, source, root, "site map", "expected an object with \"rename\" and/or \"concat\"");
        goto done;
    }
    for (size_t i = 0; i < root->n_members; i++) {
        const char *k = root->members[i].key;
        if (strcmp(k, "rename") && strcmp(k, "concat")) {
            rc = bad(err, source, &root->members[i].value, k, "unknown key (expected \"rename\" or \"concat\")");
            goto done;
        }
    }
    const drift_json_value *ren = drift_json_object_get(root, "rename");
    const drift_json_value *cat = drift_json_object_get(root, "concat");
    if (ren) {
        if (ren->type != DRIFT_JSON_ARRAY || ren->n_items > DRIFT_SITEMAP_MAX_RULES) {
            rc = bad(err, source, ren, "rename", "expected an array of [FROM, TO] pairs (at most 4096)");
            goto done;
        }
        m->ren = drift_calloc(ren->n_items ? ren->n_items : 1, sizeof *m->ren);
        if (!m->ren) { rc = drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory"); goto done; }
        for (size_t i = 0; i < ren->n_items; i++) {
            const drift_json_value *p = &ren->items[i];
            if (p->type != DRIFT_JSON_ARRAY || p->n_items != 2) {
                rc = bad(err, source, p, "rename", "each entry must be [FROM, TO]");
                goto done;
            }
            m->n_ren++;
            if ((rc = pattern(&p->items[0], source, "rename FROM", &m->ren[i].from, err))) goto done;
            if ((rc = pattern(&p->items[1], source, "rename TO", &m->ren[i].to, err))) goto done;
        }
    }
    if (cat) {
        if (cat->type != DRIFT_JSON_ARRAY || cat->n_items > DRIFT_SITEMAP_MAX_RULES) {
            rc = bad(err, source, cat, "concat", "expected an array of {\"site\", \"parts\", \"axis\"} (at most 4096)");
            goto done;
        }
        m->cat = drift_calloc(cat->n_items ? cat->n_items : 1, sizeof *m->cat);
        if (!m->cat) { rc = drift_err_set(err, DRIFT_E_NOMEM, source, "out of memory"); goto done; }
        for (size_t i = 0; i < cat->n_items; i++) {
            const drift_json_value *c = &cat->items[i];
            if (c->type != DRIFT_JSON_OBJECT) {
                rc = bad(err, source, c, "concat", "each entry must be an object {\"site\", \"parts\", \"axis\"}");
                goto done;
            }
            concat_rule *r = &m->cat[m->n_cat++];
            if ((rc = pattern(drift_json_object_get(c, "site"), source, "concat site", &r->site, err))) goto done;
            const drift_json_value *parts = drift_json_object_get(c, "parts");
            if (!parts || parts->type != DRIFT_JSON_ARRAY || parts->n_items < 2 ||
                parts->n_items > DRIFT_SITEMAP_MAX_PARTS) {
                rc = bad(err, source, parts ? parts : c, "concat parts", "expected an array of 2 to 16 site names");
                goto done;
            }
            for (size_t k = 0; k < parts->n_items; k++) {
                r->n_parts++;
                if ((rc = pattern(&parts->items[k], source, "concat parts", &r->parts[k], err))) goto done;
            }
            const drift_json_value *ax = drift_json_object_get(c, "axis");
            if (ax && (ax->type != DRIFT_JSON_NUMBER || !ax->is_int || ax->integer < -8 || ax->integer > 7)) {
                rc = bad(err, source, ax, "concat axis", "expected an integer in -8..7");
                goto done;
            }
            r->axis = ax ? (int)ax->integer : -1;
        }
    }
done:
    drift_json_free(root);
    if (rc) {
        drift_sitemap_free(m);
        return rc;
    }
    *out = m;
    return DRIFT_OK;
}

int drift_sitemap_load(drift_sitemap **out, const char *path, drift_err *err) {
    *out = NULL;
    FILE *f = drift_in_fopen(path, err); /* a FIFO is refused before it can block */
    if (!f) {
        drift_err_prefix(err, "cannot open the site map");
        return err ? err->code : DRIFT_E_IO;
    }
    char *buf = drift_malloc(1 << 20);
    if (!buf) {
        fclose(f);
        return drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory");
    }
    size_t n = fread(buf, 1, 1 << 20, f);
    int more = fgetc(f) != EOF;
    fclose(f);
    int rc;
    if (more) rc = drift_err_set(err, DRIFT_E_INPUT, path, "site map larger than 1 MiB");
    else rc = drift_sitemap_parse(out, buf, n, path, err);
    free(buf);
    return rc;
}
