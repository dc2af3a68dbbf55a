/* Parameter tables and the named_parameters() text dump parser (params.h). */
#include "formats/params.h"
#include "formats/infile.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"

#define NUMEL_LIMIT ((int64_t)1 << 48)
#define PARAMS_FILE_LIMIT ((size_t)64 << 20)

void drift_param_table_init(drift_param_table *t) {
    if (t) memset(t, 0, sizeof *t);
}

void drift_param_table_free(drift_param_table *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n; i++) free(t->params[i].fqn);
    free(t->params);
    for (size_t i = 0; i < t->n_wraps; i++) free(t->wraps[i]);
    free(t->wraps);
    drift_free(t->slots);
    memset(t, 0, sizeof *t);
}

/* FNV-1a of the FQN: the key of the table's open-addressing index. */
static size_t fqn_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

/* Puts row i into slots (n_slots a power of two, never full). */
static void slot_insert(size_t *slots, size_t n_slots, const char *fqn, size_t i) {
    size_t k = fqn_hash(fqn) & (n_slots - 1);
    while (slots[k]) k = (k + 1) & (n_slots - 1);
    slots[k] = i + 1;
}

/* Makes room in the index for one more row (load factor <= 1/2). */
static int slots_reserve(drift_param_table *t) {
    if (2 * (t->n + 1) < t->n_slots) return DRIFT_OK;
    size_t ns = t->n_slots ? 2 * t->n_slots : 64;
    while (2 * (t->n + 1) >= ns) ns *= 2;
    size_t *sl = drift_calloc(ns, sizeof *sl);
    if (!sl) return DRIFT_E_NOMEM;
    for (size_t i = 0; i < t->n; i++) slot_insert(sl, ns, t->params[i].fqn, i);
    drift_free(t->slots);
    t->slots = sl;
    t->n_slots = ns;
    return DRIFT_OK;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = drift_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* Checks a module/parameter name: non-empty, shorter than DRIFT_MAX_FQN, no
 * whitespace or control characters, no empty dotted component. */
static int check_name(const char *what, const char *s, drift_err *err) {
    if (!s || !s[0]) return drift_err_set(err, DRIFT_E_INPUT, "param table", "empty %s name", what);
    size_t n = strlen(s);
    if (n >= DRIFT_MAX_FQN)
        return drift_err_set(err, DRIFT_E_INPUT, "param table", "%s name is %zu bytes, over the limit of %d", what, n,
                             DRIFT_MAX_FQN - 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c == 0x7f)
            return drift_err_set(err, DRIFT_E_INPUT, "param table",
                                 "%s name \"%.80s\" contains whitespace or a control character", what, s);
    }
    if (s[0] == '.' || s[n - 1] == '.' || strstr(s, ".."))
        return drift_err_set(err, DRIFT_E_INPUT, "param table", "%s name \"%.80s\" has an empty dotted component", what,
                             s);
    return DRIFT_OK;
}

static long find_wrap(const drift_param_table *t, const char *w) {
    for (size_t i = 0; i < t->n_wraps; i++)
        if (strcmp(t->wraps[i], w) == 0) return (long)i;
    return -1;
}

int drift_param_table_add_wrap(drift_param_table *t, const char *wrap_fqn, int *index, drift_err *err) {
    if (!t) return drift_err_set(err, DRIFT_E_INTERNAL, "params", "NULL table");
    int rc = check_name("wrap", wrap_fqn, err);
    if (rc != DRIFT_OK) return rc;
    if (find_wrap(t, wrap_fqn) >= 0)
        return drift_err_set(err, DRIFT_E_INPUT, "param table", "wrap \"%s\" declared twice", wrap_fqn);
    if (t->n_wraps >= (size_t)DRIFT_PARAM_MAX_WRAPS)
        return drift_err_set(err, DRIFT_E_NOMEM, "param table", "more than %d wraps", DRIFT_PARAM_MAX_WRAPS);
    if (t->n_wraps == t->cap_wraps) {
        size_t cap = t->cap_wraps ? t->cap_wraps * 2 : 8;
        char **w = drift_realloc(t->wraps, cap * sizeof *w);
        if (!w) return drift_err_set(err, DRIFT_E_NOMEM, "param table", "out of memory");
        t->wraps = w;
        t->cap_wraps = cap;
    }
    char *d = dup_str(wrap_fqn);
    if (!d) return drift_err_set(err, DRIFT_E_NOMEM, "param table", "out of memory");
    t->wraps[t->n_wraps] = d;
    if (index) *index = (int)t->n_wraps;
    t->n_wraps++;
    return DRIFT_OK;
}

/* 1 if prefix is a dotted prefix of fqn ("a.b" of "a.b.c", not of "a.bc"). */
static int is_dotted_prefix(const char *prefix, const char *fqn) {
    size_t n = strlen(prefix);
    return strncmp(prefix, fqn, n) == 0 && fqn[n] == '.';
}

int drift_param_table_add(drift_param_table *t, const char *fqn, int ndim, const int64_t *shape, int wrap,
                          drift_err *err) {
    if (!t) return drift_err_set(err, DRIFT_E_INTERNAL, "params", "NULL table");
    int rc = check_name("parameter", fqn, err);
    if (rc != DRIFT_OK) return rc;
    if (ndim < 0 || ndim > DRIFT_MAX_DIMS)
        return drift_err_set(err, DRIFT_E_INPUT, fqn, "shape has %d dimensions; expected 0 to %d", ndim,
                             DRIFT_MAX_DIMS);
    if (ndim > 0 && !shape) return drift_err_set(err, DRIFT_E_INTERNAL, fqn, "NULL shape with ndim %d", ndim);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return drift_err_set(err, DRIFT_E_INPUT, fqn, "shape dimension %d is %" PRId64 "; expected >= 0", d,
                                 shape[d]);
        if (shape[d] > NUMEL_LIMIT || (shape[d] > 0 && numel > NUMEL_LIMIT / shape[d]))
            return drift_err_set(err, DRIFT_E_INPUT, fqn, "shape has more than 2^48 elements");
        numel *= shape[d];
    }
    int w;
    if (wrap == DRIFT_PARAM_WRAP_AUTO) {
        w = -1;
        for (size_t i = 0; i < t->n_wraps; i++) {
            if (is_dotted_prefix(t->wraps[i], fqn)) {
                w = (int)i;
                break;
            }
        }
    } else if (wrap == DRIFT_PARAM_WRAP_ROOT) {
        w = -1;
    } else if (wrap >= 0 && (size_t)wrap < t->n_wraps) {
        w = wrap;
    } else {
        return drift_err_set(err, DRIFT_E_INTERNAL, fqn, "wrap index %d out of range (table has %zu wraps)", wrap,
                             t->n_wraps);
    }
    if (drift_param_table_find(t, fqn) >= 0)
        return drift_err_set(err, DRIFT_E_INPUT, fqn, "duplicate parameter \"%s\"", fqn);
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        drift_param_info *p = drift_realloc(t->params, cap * sizeof *p);
        if (!p) return drift_err_set(err, DRIFT_E_NOMEM, fqn, "out of memory");
        t->params = p;
        t->cap = cap;
    }
    if (slots_reserve(t) != DRIFT_OK) return drift_err_set(err, DRIFT_E_NOMEM, fqn, "out of memory");
    drift_param_info *pi = &t->params[t->n];
    memset(pi, 0, sizeof *pi);
    pi->fqn = dup_str(fqn);
    if (!pi->fqn) return drift_err_set(err, DRIFT_E_NOMEM, fqn, "out of memory");
    slot_insert(t->slots, t->n_slots, pi->fqn, t->n);
    pi->ndim = ndim;
    for (int d = 0; d < ndim; d++) pi->shape[d] = shape[d];
    pi->numel = numel;
    pi->wrap = w;
    t->n++;
    return DRIFT_OK;
}

long drift_param_table_find(const drift_param_table *t, const char *fqn) {
    if (!t || !fqn) return -1;
    if (!t->n_slots) { /* a table not built by drift_param_table_add (or empty) */
        for (size_t i = 0; i < t->n; i++)
            if (strcmp(t->params[i].fqn, fqn) == 0) return (long)i;
        return -1;
    }
    for (size_t k = fqn_hash(fqn) & (t->n_slots - 1); t->slots[k]; k = (k + 1) & (t->n_slots - 1)) {
        size_t i = t->slots[k] - 1;
        if (i < t->n && strcmp(t->params[i].fqn, fqn) == 0) return (long)i;
    }
    return -1;
}

const char *drift_param_table_local_name(const drift_param_table *t, size_t i) {
    if (!t || i >= t->n) return NULL;
    const drift_param_info *p = &t->params[i];
    if (p->wrap < 0 || (size_t)p->wrap >= t->n_wraps) return p->fqn;
    const char *w = t->wraps[p->wrap];
    if (!is_dotted_prefix(w, p->fqn)) return p->fqn; /* explicit wrap that is not a prefix: full FQN */
    return p->fqn + strlen(w) + 1;
}

/* ---- text dump ---------------------------------------------------------- */

typedef struct line_ctx {
    const char *src;
    int line;
    const char *start; /* first byte of the line */
    drift_err *err;
} line_ctx;

static int lfail(const line_ctx *lc, const char *at, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int lfail(const line_ctx *lc, const char *at, int code, const char *fmt, ...) {
    char where[512];
    snprintf(where, sizeof where, "%s:%d:%d", lc->src, lc->line, (int)(at - lc->start) + 1);
    va_list ap;
    va_start(ap, fmt);
    drift_err_vset(lc->err, code, where, fmt, ap);
    va_end(ap);
    return code;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }
static const char *skip_sp(const char *p, const char *end) {
    while (p < end && is_space(*p)) p++;
    return p;
}
static const char *token_end(const char *p, const char *end) {
    while (p < end && !is_space(*p)) p++;
    return p;
}

/* What the user wrote at p, for "got ..." (up to the end of the token). */
static void got_text(const char *p, const char *end, char *buf, size_t n) {
    if (p >= end) {
        snprintf(buf, n, "end of line");
        return;
    }
    const char *e = token_end(p, end);
    snprintf(buf, n, "\"%.*s\"", (int)(e - p > 60 ? 60 : e - p), p);
}

static int parse_dim(const line_ctx *lc, const char **pp, const char *end, int64_t *out) {
    const char *p = *pp;
    char got[96];
    if (p >= end || *p < '0' || *p > '9') {
        got_text(p, end, got, sizeof got);
        return lfail(lc, p, DRIFT_E_INPUT, "expected a dimension (a non-negative integer), got %s", got);
    }
    int64_t v = 0;
    const char *s = p;
    while (p < end && *p >= '0' && *p <= '9') {
        if (v > (NUMEL_LIMIT - 9) / 10)
            return lfail(lc, s, DRIFT_E_INPUT, "dimension too large (more than 2^48)");
        v = v * 10 + (*p - '0');
        p++;
    }
    *out = v;
    *pp = p;
    return DRIFT_OK;
}

/* Parses SHAPE at *pp: "1536", "1,6,1536", "(1, 6, 1536)", "(1536,)", "()",
 * "[1, 6, 1536]", "[]", "torch.Size([1, 6, 1536])". */
static int parse_shape(const line_ctx *lc, const char **pp, const char *end, int *ndim, int64_t *shape) {
    const char *p = *pp;
    const char *shape_start = p;
    char got[96];
    int rc;
    *ndim = 0;
    static const char torch_size[] = "torch.Size(";
    size_t tsl = sizeof torch_size - 1;
    int torch = 0;
    char close = 0;
    if ((size_t)(end - p) >= tsl && memcmp(p, torch_size, tsl) == 0) {
        torch = 1;
        p += tsl;
        if (p >= end || *p != '[') {
            got_text(p, end, got, sizeof got);
            return lfail(lc, p, DRIFT_E_INPUT, "expected '[' after \"torch.Size(\", got %s", got);
        }
    }
    if (p < end && (*p == '(' || *p == '[')) {
        close = *p == '(' ? ')' : ']';
        const char *open = p;
        p++;
        p = skip_sp(p, end);
        if (p < end && *p == close) {
            p++;
        } else {
            for (;;) {
                if (*ndim >= DRIFT_MAX_DIMS)
                    return lfail(lc, p, DRIFT_E_INPUT, "shape has more than %d dimensions", DRIFT_MAX_DIMS);
                if ((rc = parse_dim(lc, &p, end, &shape[*ndim])) != DRIFT_OK) return rc;
                (*ndim)++;
                p = skip_sp(p, end);
                if (p < end && *p == close) {
                    p++;
                    break;
                }
                if (p >= end || *p != ',') {
                    got_text(p, end, got, sizeof got);
                    return lfail(lc, p, DRIFT_E_INPUT, "expected ',' or '%c' in the shape opened at column %d, got %s",
                                 close, (int)(open - lc->start) + 1, got);
                }
                p++;
                p = skip_sp(p, end);
                if (close == ')' && p < end && *p == ')') { /* Python 1-tuple "(1536,)" */
                    p++;
                    break;
                }
            }
        }
        if (torch) {
            if (p >= end || *p != ')') {
                got_text(p, end, got, sizeof got);
                return lfail(lc, p, DRIFT_E_INPUT, "expected ')' closing \"torch.Size(\", got %s", got);
            }
            p++;
        }
    } else {
        /* bare: 1536 or 1,6,1536 (no spaces) */
        for (;;) {
            if (*ndim >= DRIFT_MAX_DIMS)
                return lfail(lc, p, DRIFT_E_INPUT, "shape has more than %d dimensions", DRIFT_MAX_DIMS);
            if (p >= end || *p < '0' || *p > '9') {
                got_text(p, end, got, sizeof got);
                return lfail(lc, p, DRIFT_E_INPUT,
                             "expected a shape (\"1536\", \"1,6,1536\", \"(1, 6, 1536)\", \"[1, 6, 1536]\" or \"torch.Size([...])\"), got %s",
                             got);
            }
            if ((rc = parse_dim(lc, &p, end, &shape[*ndim])) != DRIFT_OK) return rc;
            (*ndim)++;
            if (p < end && *p == ',') {
                p++;
                continue;
            }
            break;
        }
    }
    if (p < end && !is_space(*p)) {
        got_text(p, end, got, sizeof got);
        return lfail(lc, p, DRIFT_E_INPUT, "expected whitespace or end of line after the shape starting at column %d, got %s",
                     (int)(shape_start - lc->start) + 1, got);
    }
    *pp = p;
    return DRIFT_OK;
}

/* "# wraps: A B C" -> returns pointer after "wraps:", else NULL. */
static const char *wraps_directive(const char *p, const char *end) {
    if (p >= end || *p != '#') return NULL;
    p = skip_sp(p + 1, end);
    static const char kw[] = "wraps:";
    if ((size_t)(end - p) < sizeof kw - 1 || memcmp(p, kw, sizeof kw - 1) != 0) return NULL;
    return p + sizeof kw - 1;
}

static int is_root_word(const char *p, size_t n) {
    return (n == 1 && p[0] == '-') || (n == 4 && memcmp(p, "root", 4) == 0);
}

/* Adds the wrap named p[0..n) unless present; reports errors at p. */
static int ensure_wrap(drift_param_table *t, const line_ctx *lc, const char *p, size_t n, int must_be_new,
                       int *index) {
    char name[DRIFT_MAX_FQN + 1];
    if (n >= DRIFT_MAX_FQN)
        return lfail(lc, p, DRIFT_E_INPUT, "wrap name is %zu bytes, over the limit of %d", n, DRIFT_MAX_FQN - 1);
    memcpy(name, p, n);
    name[n] = '\0';
    long w = find_wrap(t, name);
    if (w >= 0) {
        if (must_be_new) return lfail(lc, p, DRIFT_E_INPUT, "wrap \"%s\" declared twice", name);
        if (index) *index = (int)w;
        return DRIFT_OK;
    }
    drift_err e2;
    drift_err_clear(&e2);
    int rc = drift_param_table_add_wrap(t, name, index, &e2);
    if (rc != DRIFT_OK) return lfail(lc, p, rc, "%s", e2.msg);
    return DRIFT_OK;
}

int drift_param_table_parse_text(drift_param_table *t, const char *text, size_t len, const char *source_name,
                                 drift_err *err) {
    if (!t) return drift_err_set(err, DRIFT_E_INTERNAL, "params", "NULL table");
    const char *src = source_name ? source_name : "<params>";
    if (t->n != 0 || t->n_wraps != 0)
        return drift_err_set(err, DRIFT_E_INTERNAL, src, "drift_param_table_parse_text needs an empty table");
    const char *end_all = text ? text + len : NULL;
    int rc = DRIFT_OK;
    int *row_line = NULL; /* line of each parameter row, for duplicate messages */
    size_t row_cap = 0;
    drift_param_table tmp;
    drift_param_table_init(&tmp);
    /* pass 0: "# wraps:" lines; pass 1: WRAP columns naming undeclared wraps
     * (and every line's syntax); pass 2: parameters. */
    for (int pass = 0; pass < 3; pass++) {
        const char *p = text;
        int line = 0;
        while (text && p < end_all) {
            const char *eol = memchr(p, '\n', (size_t)(end_all - p));
            const char *end = eol ? eol : end_all;
            line_ctx lc = {src, ++line, p, err};
            p = eol ? eol + 1 : end_all;
            const char *nul = memchr(lc.start, '\0', (size_t)(end - lc.start));
            if (nul) {
                rc = lfail(&lc, nul, DRIFT_E_INPUT, "NUL byte in a text file");
                goto fail;
            }
            const char *q = skip_sp(lc.start, end);
            const char *after = wraps_directive(q, end);
            if (after) {
                if (pass != 0) continue;
                const char *w = skip_sp(after, end);
                while (w < end) {
                    const char *we = token_end(w, end);
                    if (is_root_word(w, (size_t)(we - w))) {
                        rc = lfail(&lc, w, DRIFT_E_INPUT,
                                   "the root is implicit (always the last wrap); do not list \"%.*s\" in \"# wraps:\"",
                                   (int)(we - w), w);
                        goto fail;
                    }
                    if ((rc = ensure_wrap(&tmp, &lc, w, (size_t)(we - w), 1, NULL)) != DRIFT_OK) goto fail;
                    w = skip_sp(we, end);
                }
                continue;
            }
            if (q >= end || *q == '#' || pass == 0) continue;
            const char *fq = q, *fqe = token_end(q, end);
            const char *sp = skip_sp(fqe, end);
            if (sp >= end) {
                rc = lfail(&lc, sp, DRIFT_E_INPUT, "expected a shape after the parameter name \"%.*s\", got end of line",
                           (int)(fqe - fq > 200 ? 200 : fqe - fq), fq);
                goto fail;
            }
            int ndim = 0;
            int64_t shape[DRIFT_MAX_DIMS];
            const char *r = sp;
            if ((rc = parse_shape(&lc, &r, end, &ndim, shape)) != DRIFT_OK) goto fail;
            r = skip_sp(r, end);
            int wrap = DRIFT_PARAM_WRAP_AUTO;
            const char *wp = NULL, *wpe = NULL;
            if (r < end) {
                wp = r;
                wpe = token_end(r, end);
                r = skip_sp(wpe, end);
                if (r < end) {
                    char got[96];
                    got_text(r, end, got, sizeof got);
                    rc = lfail(&lc, r, DRIFT_E_INPUT, "expected end of line after the wrap column, got %s", got);
                    goto fail;
                }
            }
            if (wp && is_root_word(wp, (size_t)(wpe - wp))) {
                wrap = DRIFT_PARAM_WRAP_ROOT;
            } else if (wp) {
                if ((rc = ensure_wrap(&tmp, &lc, wp, (size_t)(wpe - wp), 0, &wrap)) != DRIFT_OK) goto fail;
            }
            if (pass != 2) continue;
            char name[DRIFT_MAX_FQN + 1];
            size_t fl = (size_t)(fqe - fq);
            if (fl >= DRIFT_MAX_FQN) {
                rc = lfail(&lc, fq, DRIFT_E_INPUT, "parameter name is %zu bytes, over the limit of %d", fl,
                           DRIFT_MAX_FQN - 1);
                goto fail;
            }
            memcpy(name, fq, fl);
            name[fl] = '\0';
            long prev = drift_param_table_find(&tmp, name);
            if (prev >= 0) {
                rc = lfail(&lc, fq, DRIFT_E_INPUT, "duplicate parameter \"%s\" (first on line %d)", name,
                           row_line[prev]);
                goto fail;
            }
            drift_err e2;
            drift_err_clear(&e2);
            if ((rc = drift_param_table_add(&tmp, name, ndim, shape, wrap, &e2)) != DRIFT_OK) {
                rc = lfail(&lc, strncmp(e2.msg, "shape", 5) == 0 ? sp : fq, rc, "%s", e2.msg);
                goto fail;
            }
            if (tmp.n > row_cap) {
                size_t ncap = row_cap ? row_cap * 2 : 64;
                int *nl = drift_realloc(row_line, ncap * sizeof *nl);
                if (!nl) {
                    rc = lfail(&lc, fq, DRIFT_E_NOMEM, "out of memory");
                    goto fail;
                }
                row_line = nl;
                row_cap = ncap;
            }
            row_line[tmp.n - 1] = lc.line;
        }
    }
    free(row_line);
    *t = tmp;
    return DRIFT_OK;
fail:
    free(row_line);
    drift_param_table_free(&tmp);
    return rc;
}

int drift_param_table_parse_file(drift_param_table *t, const char *path, drift_err *err) {
    FILE *f = drift_in_fopen(path, err); /* a FIFO is refused before it can block */
    if (!f) return err ? err->code : DRIFT_E_IO;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = DRIFT_OK;
    for (;;) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 65536;
            char *nb = drift_realloc(buf, ncap);
            if (!nb) {
                rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory reading the file");
                goto cleanup;
            }
            buf = nb;
            cap = ncap;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (len > PARAMS_FILE_LIMIT) {
            rc = drift_err_set(err, DRIFT_E_NOMEM, path, "file is larger than the %zu-byte limit",
                               (size_t)PARAMS_FILE_LIMIT);
            goto cleanup;
        }
        if (n == 0) {
            if (ferror(f)) {
                rc = drift_err_set(err, DRIFT_E_IO, path, "read error: %s", strerror(errno));
                goto cleanup;
            }
            break;
        }
    }
    rc = drift_param_table_parse_text(t, buf ? buf : "", len, path, err);
cleanup:
    fclose(f);
    free(buf);
    return rc;
}
