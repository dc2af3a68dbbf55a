/* Strict JSON reader with positions and a small JSON writer (see json.h). */
#include "formats/json.h"
#include "formats/infile.h"

#include <errno.h>
#include <inttypes.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "formats/alloc.h"

/* ======================================================================== */
/* reader                                                                   */
/* ======================================================================== */

typedef struct jparser {
    const unsigned char *s;
    size_t len, pos;
    int line, col;             /* position of s[pos] */
    const char *src;
    size_t n_values;
    drift_err *err;
} jparser;

typedef struct sbuf {
    char *data;
    size_t len, cap;
} sbuf;

static int sbuf_reserve(sbuf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 32;
    while (cap < b->len + extra + 1) cap *= 2;
    char *d = drift_realloc(b->data, cap);
    if (!d) return -1;
    b->data = d;
    b->cap = cap;
    return 0;
}

static int sbuf_put(sbuf *b, const void *p, size_t n) {
    if (sbuf_reserve(b, n) != 0) return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

static int sbuf_putc(sbuf *b, unsigned char c) { return sbuf_put(b, &c, 1); }

static int jp_fail_at(jparser *p, int line, int col, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int jp_fail_at(jparser *p, int line, int col, int code, const char *fmt, ...) {
    char where[512];
    snprintf(where, sizeof where, "%s:%d:%d", p->src, line, col);
    va_list ap;
    va_start(ap, fmt);
    drift_err_vset(p->err, code, where, fmt, ap);
    va_end(ap);
    return code;
}

#define JP_FAIL(p, ...) jp_fail_at((p), (p)->line, (p)->col, DRIFT_E_INPUT, __VA_ARGS__)

static int jp_eof(const jparser *p) { return p->pos >= p->len; }
static int jp_peek(const jparser *p) { return p->pos < p->len ? p->s[p->pos] : -1; }

static void jp_advance(jparser *p) {
    if (p->pos >= p->len) return;
    unsigned char c = p->s[p->pos++];
    if (c == '\n') {
        p->line++;
        p->col = 1;
    } else if (p->pos >= p->len || (p->s[p->pos] & 0xC0) != 0x80) {
        p->col++; /* columns count code points: continuation bytes do not advance */
    }
}

static void jp_skip_ws(jparser *p) {
    while (!jp_eof(p)) {
        int c = jp_peek(p);
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') jp_advance(p);
        else break;
    }
}

/* "end of input", "'x'", "byte 0x07" for the byte at the current position. */
static const char *jp_got(const jparser *p, char *buf, size_t n) {
    if (jp_eof(p)) {
        snprintf(buf, n, "end of input");
    } else {
        unsigned char c = p->s[p->pos];
        if (c >= 0x20 && c < 0x7f) snprintf(buf, n, "'%c'", c);
        else snprintf(buf, n, "byte 0x%02X", c);
    }
    return buf;
}

static void value_free_contents(drift_json_value *v);

static void value_free_contents(drift_json_value *v) {
    if (!v) return;
    switch (v->type) {
    case DRIFT_JSON_STRING:
        free(v->str);
        break;
    case DRIFT_JSON_ARRAY:
        for (size_t i = 0; i < v->n_items; i++) value_free_contents(&v->items[i]);
        free(v->items);
        break;
    case DRIFT_JSON_OBJECT:
        for (size_t i = 0; i < v->n_members; i++) {
            free(v->members[i].key);
            value_free_contents(&v->members[i].value);
        }
        free(v->members);
        break;
    default:
        break;
    }
    memset(v, 0, sizeof *v);
}

static int jp_parse_value(jparser *p, int depth, drift_json_value *out);

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads 4 hex digits at the current position (after "\u"). */
static int jp_hex4(jparser *p, unsigned *cp) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(jp_peek(p));
        if (h < 0) {
            char got[32];
            return JP_FAIL(p, "malformed JSON: expected 4 hex digits after \\u, got %s",
                           jp_got(p, got, sizeof got));
        }
        v = v * 16 + (unsigned)h;
        jp_advance(p);
    }
    *cp = v;
    return DRIFT_OK;
}

static int put_utf8(sbuf *b, unsigned cp) {
    unsigned char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (unsigned char)(0xC0 | (cp >> 6));
        u[1] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (unsigned char)(0xE0 | (cp >> 12));
        u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (unsigned char)(0xF0 | (cp >> 18));
        u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return sbuf_put(b, u, n);
}

/* Length of the valid UTF-8 sequence at s[0..n) (RFC 3629: no overlongs, no
 * surrogates, at most U+10FFFF), or 0 if invalid. */
static size_t utf8_seq_len(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (n < need) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < need; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return need;
}

int drift_json_utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq_len(u + i, n - i);
        if (k == 0) return 0;
        i += k;
    }
    return 1;
}

/* Parses a string at the current position (which holds '"'). */
static int jp_parse_string(jparser *p, char **out, size_t *out_len) {
    int line0 = p->line, col0 = p->col;
    sbuf b = {0};
    int rc = DRIFT_OK;
    jp_advance(p); /* opening quote */
    for (;;) {
        if (jp_eof(p)) {
            rc = JP_FAIL(p, "malformed JSON: unterminated string (opened at %d:%d): expected '\"', got end of input",
                         line0, col0);
            goto fail;
        }
        unsigned char c = p->s[p->pos];
        if (c == '"') {
            jp_advance(p);
            break;
        }
        if (c < 0x20) {
            rc = JP_FAIL(p, "malformed JSON: control character U+%04X inside a string (opened at %d:%d) must be escaped",
                         c, line0, col0);
            goto fail;
        }
        if (c == '\\') {
            int eline = p->line, ecol = p->col;
            jp_advance(p);
            if (jp_eof(p)) {
                rc = JP_FAIL(p, "malformed JSON: unterminated string (opened at %d:%d): expected an escape after '\\', got end of input",
                             line0, col0);
                goto fail;
            }
            int e = jp_peek(p);
            const char *simple = NULL;
            switch (e) {
            case '"': simple = "\""; break;
            case '\\': simple = "\\"; break;
            case '/': simple = "/"; break;
            case 'b': simple = "\b"; break;
            case 'f': simple = "\f"; break;
            case 'n': simple = "\n"; break;
            case 'r': simple = "\r"; break;
            case 't': simple = "\t"; break;
            default: break;
            }
            if (simple) {
                jp_advance(p);
                if (sbuf_putc(&b, (unsigned char)simple[0]) != 0) goto nomem;
                continue;
            }
            if (e != 'u') {
                char got[32];
                rc = jp_fail_at(p, eline, ecol, DRIFT_E_INPUT,
                                "malformed JSON: invalid escape: expected one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX, got '\\' followed by %s",
                                jp_got(p, got, sizeof got));
                goto fail;
            }
            jp_advance(p);
            unsigned cp;
            if ((rc = jp_hex4(p, &cp)) != DRIFT_OK) goto fail;
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
                rc = jp_fail_at(p, eline, ecol, DRIFT_E_INPUT,
                                "malformed JSON: unpaired low surrogate \\u%04X (expected a high surrogate \\uD800-\\uDBFF before it)",
                                cp);
                goto fail;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (p->pos + 1 < p->len && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u') {
                    jp_advance(p);
                    jp_advance(p);
                    unsigned lo;
                    if ((rc = jp_hex4(p, &lo)) != DRIFT_OK) goto fail;
                    if (lo < 0xDC00 || lo > 0xDFFF) {
                        rc = jp_fail_at(p, eline, ecol, DRIFT_E_INPUT,
                                        "malformed JSON: unpaired high surrogate \\u%04X: expected a low surrogate \\uDC00-\\uDFFF after it, got \\u%04X",
                                        cp, lo);
                        goto fail;
                    }
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else {
                    rc = jp_fail_at(p, eline, ecol, DRIFT_E_INPUT,
                                    "malformed JSON: unpaired high surrogate \\u%04X: expected a low surrogate \\uDC00-\\uDFFF after it",
                                    cp);
                    goto fail;
                }
            }
            if (put_utf8(&b, cp) != 0) goto nomem;
            continue;
        }
        if (c >= 0x80) {
            size_t n = utf8_seq_len(p->s + p->pos, p->len - p->pos);
            if (n == 0) {
                rc = JP_FAIL(p, "malformed JSON: invalid UTF-8 byte 0x%02X in a string (opened at %d:%d)", c,
                             line0, col0);
                goto fail;
            }
            if (sbuf_put(&b, p->s + p->pos, n) != 0) goto nomem;
            for (size_t i = 0; i < n; i++) jp_advance(p);
            continue;
        }
        if (sbuf_putc(&b, c) != 0) goto nomem;
        jp_advance(p);
    }
    if (!b.data) {
        b.data = drift_calloc(1, 1);
        if (!b.data) goto nomem;
    }
    *out = b.data;
    *out_len = b.len;
    return DRIFT_OK;
nomem:
    rc = jp_fail_at(p, line0, col0, DRIFT_E_NOMEM, "out of memory reading a string");
fail:
    free(b.data);
    return rc;
}

static int is_digit(int c) { return c >= '0' && c <= '9'; }

static int jp_parse_number(jparser *p, drift_json_value *out) {
    size_t start = p->pos;
    int line0 = p->line, col0 = p->col;
    int is_int = 1;
    char got[32];
    if (jp_peek(p) == '-') {
        jp_advance(p);
        if (jp_peek(p) == 'I')
            return JP_FAIL(p, "malformed JSON: expected a digit after '-', got 'I' (JSON has no Infinity)");
    }
    int c = jp_peek(p);
    if (c == '0') {
        jp_advance(p);
        if (is_digit(jp_peek(p)))
            return jp_fail_at(p, line0, col0, DRIFT_E_INPUT,
                              "malformed JSON: leading zeros are not allowed in a number");
    } else if (c >= '1' && c <= '9') {
        while (is_digit(jp_peek(p))) jp_advance(p);
    } else {
        return JP_FAIL(p, "malformed JSON: expected a digit after '-', got %s", jp_got(p, got, sizeof got));
    }
    if (jp_peek(p) == '.') {
        is_int = 0;
        jp_advance(p);
        if (!is_digit(jp_peek(p)))
            return JP_FAIL(p, "malformed JSON: expected a digit after '.', got %s", jp_got(p, got, sizeof got));
        while (is_digit(jp_peek(p))) jp_advance(p);
    }
    if (jp_peek(p) == 'e' || jp_peek(p) == 'E') {
        is_int = 0;
        jp_advance(p);
        if (jp_peek(p) == '+' || jp_peek(p) == '-') jp_advance(p);
        if (!is_digit(jp_peek(p)))
            return JP_FAIL(p, "malformed JSON: expected a digit in the exponent, got %s", jp_got(p, got, sizeof got));
        while (is_digit(jp_peek(p))) jp_advance(p);
    }
    size_t n = p->pos - start;
    const char *dp = localeconv()->decimal_point;
    size_t dpl = (dp && dp[0]) ? strlen(dp) : 1;
    char *tok = drift_malloc(n * dpl + 1);
    if (!tok) return jp_fail_at(p, line0, col0, DRIFT_E_NOMEM, "out of memory reading a number");
    size_t k = 0;
    for (size_t i = start; i < p->pos; i++) {
        if (p->s[i] == '.' && dp && dp[0]) { /* strtod follows the locale's decimal point */
            memcpy(tok + k, dp, dpl);
            k += dpl;
        } else {
            tok[k++] = (char)p->s[i];
        }
    }
    tok[k] = '\0';
    errno = 0;
    char *end = NULL;
    double d = strtod(tok, &end);
    int range = errno == ERANGE && isinf(d);
    int bad = end != tok + k;
    int64_t iv = 0;
    if (is_int && !bad && !range) {
        errno = 0;
        long long ll = strtoll(tok, &end, 10);
        if (errno == ERANGE) is_int = 0;
        else iv = (int64_t)ll;
    }
    free(tok);
    if (bad)
        return jp_fail_at(p, line0, col0, DRIFT_E_INTERNAL, "strtod did not accept the number literal");
    if (range)
        return jp_fail_at(p, line0, col0, DRIFT_E_INPUT,
                          "number out of range: %.*s does not fit a double", (int)(n > 40 ? 40 : n),
                          (const char *)p->s + start);
    out->type = DRIFT_JSON_NUMBER;
    out->number = d;
    out->is_int = is_int;
    out->integer = iv;
    return DRIFT_OK;
}

static int is_word_char(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static int jp_parse_word(jparser *p, drift_json_value *out) {
    size_t start = p->pos;
    int line0 = p->line, col0 = p->col;
    while (is_word_char(jp_peek(p))) jp_advance(p);
    size_t n = p->pos - start;
    const char *w = (const char *)p->s + start;
    if (n == 4 && memcmp(w, "true", 4) == 0) {
        out->type = DRIFT_JSON_BOOL;
        out->boolean = 1;
        return DRIFT_OK;
    }
    if (n == 5 && memcmp(w, "false", 5) == 0) {
        out->type = DRIFT_JSON_BOOL;
        out->boolean = 0;
        return DRIFT_OK;
    }
    if (n == 4 && memcmp(w, "null", 4) == 0) {
        out->type = DRIFT_JSON_NULL;
        return DRIFT_OK;
    }
    const char *hint = " (strings need double quotes)";
    if ((n == 3 && memcmp(w, "NaN", 3) == 0) || (n == 8 && memcmp(w, "Infinity", 8) == 0))
        hint = " (JSON has no NaN or Infinity)";
    else if (n == 4 && memcmp(w, "True", 4) == 0) hint = " (JSON spells it true)";
    else if (n == 5 && memcmp(w, "False", 5) == 0) hint = " (JSON spells it false)";
    else if (n == 4 && memcmp(w, "None", 4) == 0) hint = " (JSON spells it null)";
    return jp_fail_at(p, line0, col0, DRIFT_E_INPUT, "malformed JSON: expected a value, got '%.*s'%s",
                      (int)(n > 40 ? 40 : n), w, hint);
}

static const char *comment_hint(int c) { return c == '/' ? " (JSON has no comments)" : ""; }

static int jp_count_value(jparser *p) {
    if (++p->n_values > DRIFT_JSON_MAX_VALUES)
        return jp_fail_at(p, p->line, p->col, DRIFT_E_INPUT, "JSON document has more than %zu values (limit)",
                          (size_t)DRIFT_JSON_MAX_VALUES);
    return DRIFT_OK;
}

static int jp_parse_array(jparser *p, int depth, drift_json_value *out) {
    int line0 = p->line, col0 = p->col;
    char got[32];
    size_t cap = 0;
    out->type = DRIFT_JSON_ARRAY;
    jp_advance(p); /* '[' */
    jp_skip_ws(p);
    if (jp_peek(p) == ']') {
        jp_advance(p);
        return DRIFT_OK;
    }
    for (;;) {
        drift_json_value item;
        memset(&item, 0, sizeof item);
        int rc = jp_parse_value(p, depth + 1, &item);
        if (rc != DRIFT_OK) {
            value_free_contents(&item);
            return rc;
        }
        if (out->n_items == cap) {
            size_t ncap = cap ? cap * 2 : 4;
            drift_json_value *ni = drift_realloc(out->items, ncap * sizeof *ni);
            if (!ni) {
                value_free_contents(&item);
                return jp_fail_at(p, line0, col0, DRIFT_E_NOMEM, "out of memory reading an array");
            }
            out->items = ni;
            cap = ncap;
        }
        out->items[out->n_items++] = item;
        jp_skip_ws(p);
        int c = jp_peek(p);
        if (c == ']') {
            jp_advance(p);
            return DRIFT_OK;
        }
        if (c != ',') {
            if (c < 0)
                return JP_FAIL(p, "malformed JSON: unterminated array (opened at %d:%d): expected ',' or ']', got end of input",
                               line0, col0);
            return JP_FAIL(p, "malformed JSON: expected ',' or ']' after an array element, got %s%s",
                           jp_got(p, got, sizeof got), comment_hint(c));
        }
        int cline = p->line, ccol = p->col;
        jp_advance(p);
        jp_skip_ws(p);
        if (jp_peek(p) == ']')
            return jp_fail_at(p, cline, ccol, DRIFT_E_INPUT,
                              "malformed JSON: trailing comma before ']' (JSON allows none): expected a value after ','");
    }
}

/* Duplicate keys of one object: a linear scan while it is small, then an
 * open-addressing table of member indices (FNV-1a of the key), so an object
 * of n keys costs O(n), not O(n^2) (150k keys in /graph took `ls` 116 s). */
typedef struct keyset {
    uint32_t *slot; /* member index + 1; 0 = empty */
    size_t cap;     /* power of two, or 0 while scanning */
} keyset;

#define KEYSET_FROM 16 /* members before the table is built */

static uint64_t key_hash(const char *k, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)k[i]) * 1099511628211ull;
    return h;
}

/* The member with this key, or -1. */
static long keyset_find(const keyset *ks, const drift_json_value *o, const char *key, size_t klen) {
    if (!ks->cap) {
        for (size_t i = 0; i < o->n_members; i++)
            if (o->members[i].key_len == klen && memcmp(o->members[i].key, key, klen) == 0) return (long)i;
        return -1;
    }
    for (size_t i = (size_t)key_hash(key, klen) & (ks->cap - 1);; i = (i + 1) & (ks->cap - 1)) {
        uint32_t v = ks->slot[i];
        if (!v) return -1;
        const drift_json_member *m = &o->members[v - 1];
        if (m->key_len == klen && memcmp(m->key, key, klen) == 0) return (long)(v - 1);
    }
}

static void keyset_put(keyset *ks, const drift_json_member *m, size_t idx) {
    size_t i = (size_t)key_hash(m->key, m->key_len) & (ks->cap - 1);
    while (ks->slot[i]) i = (i + 1) & (ks->cap - 1);
    ks->slot[i] = (uint32_t)(idx + 1);
}

/* After member n_members-1 was added: builds or grows the table (load <= 1/2). */
static int keyset_added(keyset *ks, const drift_json_value *o) {
    size_t n = o->n_members;
    if (n < KEYSET_FROM) return DRIFT_OK;
    if (ks->cap && 2 * n <= ks->cap) {
        keyset_put(ks, &o->members[n - 1], n - 1);
        return DRIFT_OK;
    }
    size_t cap = ks->cap ? ks->cap * 2 : 64;
    while (cap < 2 * n) cap *= 2;
    uint32_t *slot = drift_calloc(cap, sizeof *slot);
    if (!slot) return DRIFT_E_NOMEM;
    free(ks->slot);
    ks->slot = slot;
    ks->cap = cap;
    for (size_t i = 0; i < n; i++) keyset_put(ks, &o->members[i], i);
    return DRIFT_OK;
}

static int jp_parse_object_ks(jparser *p, int depth, drift_json_value *out, keyset *ks);

static int jp_parse_object(jparser *p, int depth, drift_json_value *out) {
    keyset ks = {NULL, 0};
    int rc = jp_parse_object_ks(p, depth, out, &ks);
    free(ks.slot);
    return rc;
}

static int jp_parse_object_ks(jparser *p, int depth, drift_json_value *out, keyset *ks) {
    int line0 = p->line, col0 = p->col;
    char got[32];
    size_t cap = 0;
    out->type = DRIFT_JSON_OBJECT;
    jp_advance(p); /* '{' */
    jp_skip_ws(p);
    if (jp_peek(p) == '}') {
        jp_advance(p);
        return DRIFT_OK;
    }
    for (;;) {
        int c = jp_peek(p);
        if (c != '"') {
            if (c < 0)
                return JP_FAIL(p, "malformed JSON: unterminated object (opened at %d:%d): expected a string key, got end of input",
                               line0, col0);
            const char *hint = "";
            if (c == '\'') hint = " (JSON strings use double quotes)";
            else if (is_word_char(c)) hint = " (object keys must be double-quoted strings)";
            else if (c == '/') hint = " (JSON has no comments)";
            return JP_FAIL(p, "malformed JSON: expected a string key, got %s%s", jp_got(p, got, sizeof got), hint);
        }
        int kline = p->line, kcol = p->col;
        char *key = NULL;
        size_t klen = 0;
        int rc = jp_parse_string(p, &key, &klen);
        if (rc != DRIFT_OK) return rc;
        long dup = keyset_find(ks, out, key, klen);
        if (dup >= 0) {
            size_t i = (size_t)dup;
            rc = jp_fail_at(p, kline, kcol, DRIFT_E_INPUT, "duplicate key \"%s\" in object (first at %d:%d, again at %d:%d)",
                            key, out->members[i].line, out->members[i].col, kline, kcol);
            free(key);
            return rc;
        }
        jp_skip_ws(p);
        if (jp_peek(p) != ':') {
            rc = JP_FAIL(p, "malformed JSON: expected ':' after object key \"%s\", got %s%s", key,
                         jp_got(p, got, sizeof got), comment_hint(jp_peek(p)));
            free(key);
            return rc;
        }
        jp_advance(p);
        drift_json_member m;
        memset(&m, 0, sizeof m);
        m.key = key;
        m.key_len = klen;
        m.line = kline;
        m.col = kcol;
        rc = jp_parse_value(p, depth + 1, &m.value);
        if (rc == DRIFT_OK && out->n_members == cap) {
            size_t ncap = cap ? cap * 2 : 4;
            drift_json_member *nm = drift_realloc(out->members, ncap * sizeof *nm);
            if (!nm) {
                rc = jp_fail_at(p, line0, col0, DRIFT_E_NOMEM, "out of memory reading an object");
            } else {
                out->members = nm;
                cap = ncap;
            }
        }
        if (rc != DRIFT_OK) {
            free(m.key);
            value_free_contents(&m.value);
            return rc;
        }
        out->members[out->n_members++] = m;
        if (keyset_added(ks, out) != DRIFT_OK) return jp_fail_at(p, line0, col0, DRIFT_E_NOMEM, "out of memory reading an object");
        jp_skip_ws(p);
        c = jp_peek(p);
        if (c == '}') {
            jp_advance(p);
            return DRIFT_OK;
        }
        if (c != ',') {
            if (c < 0)
                return JP_FAIL(p, "malformed JSON: unterminated object (opened at %d:%d): expected ',' or '}', got end of input",
                               line0, col0);
            return JP_FAIL(p, "malformed JSON: expected ',' or '}' after an object member, got %s%s",
                           jp_got(p, got, sizeof got), comment_hint(c));
        }
        int cline = p->line, ccol = p->col;
        jp_advance(p);
        jp_skip_ws(p);
        if (jp_peek(p) == '}')
            return jp_fail_at(p, cline, ccol, DRIFT_E_INPUT,
                              "malformed JSON: trailing comma before '}' (JSON allows none): expected a string key after ','");
    }
}

static int jp_parse_value(jparser *p, int depth, drift_json_value *out) {
    char got[32];
    jp_skip_ws(p);
    out->line = p->line;
    out->col = p->col;
    if (jp_eof(p)) return JP_FAIL(p, "malformed JSON: expected a value, got end of input");
    int rc = jp_count_value(p);
    if (rc != DRIFT_OK) return rc;
    int c = jp_peek(p);
    if (c == '{' || c == '[') {
        if (depth + 1 > DRIFT_JSON_MAX_DEPTH)
            return jp_fail_at(p, p->line, p->col, DRIFT_E_INPUT,
                              "JSON nesting deeper than %d levels (limit)", DRIFT_JSON_MAX_DEPTH);
        return c == '{' ? jp_parse_object(p, depth, out) : jp_parse_array(p, depth, out);
    }
    if (c == '"') {
        out->type = DRIFT_JSON_STRING;
        return jp_parse_string(p, &out->str, &out->str_len);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return jp_parse_number(p, out);
    if (is_word_char(c)) return jp_parse_word(p, out);
    const char *hint = "";
    if (c == '/') hint = " (JSON has no comments)";
    else if (c == '\'') hint = " (JSON strings use double quotes)";
    else if (c == ']' || c == '}') hint = "";
    return JP_FAIL(p, "malformed JSON: expected a value, got %s%s", jp_got(p, got, sizeof got), hint);
}

int drift_json_parse(const char *text, size_t len, const char *source_name, drift_json_value **out,
                     drift_err *err) {
    jparser p;
    memset(&p, 0, sizeof p);
    p.s = (const unsigned char *)text;
    p.len = text ? len : 0;
    p.line = 1;
    p.col = 1;
    p.src = source_name ? source_name : "<json>";
    p.err = err;
    if (out) *out = NULL;
    if (!out) return drift_err_set(err, DRIFT_E_INTERNAL, p.src, "drift_json_parse: out is NULL");
    if (p.len > DRIFT_JSON_MAX_INPUT)
        return drift_err_set(err, DRIFT_E_INPUT, p.src, "JSON input is %zu bytes, over the %zu-byte limit", p.len,
                             (size_t)DRIFT_JSON_MAX_INPUT);
    if (p.len >= 3 && p.s[0] == 0xEF && p.s[1] == 0xBB && p.s[2] == 0xBF) p.pos = 3; /* BOM */
    drift_json_value *root = drift_calloc(1, sizeof *root);
    if (!root) return drift_err_set(err, DRIFT_E_NOMEM, p.src, "out of memory");
    int rc = jp_parse_value(&p, 0, root);
    if (rc == DRIFT_OK) {
        jp_skip_ws(&p);
        if (!jp_eof(&p)) {
            char got[32];
            const char *hint = jp_peek(&p) == '/' ? " (JSON has no comments)" : "";
            rc = JP_FAIL(&p, "malformed JSON: expected end of input after the top-level value, got %s%s",
                         jp_got(&p, got, sizeof got), hint);
        }
    }
    if (rc != DRIFT_OK) {
        drift_json_free(root);
        return rc;
    }
    *out = root;
    return DRIFT_OK;
}

int drift_json_parse_file(const char *path, drift_json_value **out, drift_err *err) {
    if (out) *out = NULL;
    FILE *f = drift_in_fopen(path, err); /* a FIFO is refused before it can block */
    if (!f) return err ? err->code : DRIFT_E_IO;
    sbuf b = {0};
    int rc = DRIFT_OK;
    char chunk[65536];
    for (;;) {
        size_t n = fread(chunk, 1, sizeof chunk, f);
        if (n > 0) {
            if (b.len + n > DRIFT_JSON_MAX_INPUT) {
                rc = drift_err_set(err, DRIFT_E_INPUT, path, "file is larger than the %zu-byte JSON limit",
                                   (size_t)DRIFT_JSON_MAX_INPUT);
                goto cleanup;
            }
            if (sbuf_put(&b, chunk, n) != 0) {
                rc = drift_err_set(err, DRIFT_E_NOMEM, path, "out of memory reading the file");
                goto cleanup;
            }
        }
        if (n < sizeof chunk) {
            if (ferror(f)) {
                rc = drift_err_set(err, DRIFT_E_IO, path, "read error: %s", strerror(errno));
                goto cleanup;
            }
            break;
        }
    }
    rc = drift_json_parse(b.data ? b.data : "", b.len, path, out, err);
cleanup:
    fclose(f);
    free(b.data);
    return rc;
}

void drift_json_free(drift_json_value *root) {
    if (!root) return;
    value_free_contents(root);
    free(root);
}

const drift_json_member *drift_json_object_member(const drift_json_value *obj, const char *key) {
    if (!obj || obj->type != DRIFT_JSON_OBJECT || !key) return NULL;
    size_t kl = strlen(key);
    for (size_t i = 0; i < obj->n_members; i++)
        if (obj->members[i].key_len == kl && memcmp(obj->members[i].key, key, kl) == 0) return &obj->members[i];
    return NULL;
}

const drift_json_value *drift_json_object_get(const drift_json_value *obj, const char *key) {
    const drift_json_member *m = drift_json_object_member(obj, key);
    return m ? &m->value : NULL;
}

const char *drift_json_type_name(drift_json_type t) {
    switch (t) {
    case DRIFT_JSON_NULL: return "null";
    case DRIFT_JSON_BOOL: return "boolean";
    case DRIFT_JSON_NUMBER: return "number";
    case DRIFT_JSON_STRING: return "string";
    case DRIFT_JSON_ARRAY: return "array";
    case DRIFT_JSON_OBJECT: return "object";
    }
    return "invalid";
}

const char *drift_json_describe(const drift_json_value *v, char *buf, size_t bufsz) {
    if (!buf || bufsz == 0) return buf;
    if (!v) {
        snprintf(buf, bufsz, "nothing");
        return buf;
    }
    switch (v->type) {
    case DRIFT_JSON_NULL: snprintf(buf, bufsz, "null"); break;
    case DRIFT_JSON_BOOL: snprintf(buf, bufsz, "%s", v->boolean ? "true" : "false"); break;
    case DRIFT_JSON_NUMBER:
        if (v->is_int) snprintf(buf, bufsz, "number %" PRId64, v->integer);
        else snprintf(buf, bufsz, "number %.17g", v->number);
        break;
    case DRIFT_JSON_STRING: {
        /* Quoted, control characters and quotes escaped, cut at 60 bytes. */
        size_t k = 0;
        const size_t cut = 60;
        if (k + 1 < bufsz) buf[k++] = '"';
        size_t i = 0;
        /* stop at the cut, but never inside a UTF-8 sequence */
        for (; i < v->str_len && (i < cut || ((unsigned char)v->str[i] & 0xC0) == 0x80) && k + 8 < bufsz; i++) {
            unsigned char c = (unsigned char)v->str[i];
            if (c == '"' || c == '\\') {
                buf[k++] = '\\';
                buf[k++] = (char)c;
            } else if (c < 0x20) {
                k += (size_t)snprintf(buf + k, bufsz - k, "\\u%04x", c);
            } else {
                buf[k++] = (char)c;
            }
        }
        if (i < v->str_len && k + 4 < bufsz) {
            memcpy(buf + k, "...", 3);
            k += 3;
        }
        if (k + 1 < bufsz) buf[k++] = '"';
        buf[k < bufsz ? k : bufsz - 1] = '\0';
        break;
    }
    case DRIFT_JSON_ARRAY: snprintf(buf, bufsz, "an array"); break;
    case DRIFT_JSON_OBJECT: snprintf(buf, bufsz, "an object"); break;
    default: snprintf(buf, bufsz, "an invalid value"); break;
    }
    return buf;
}

/* ======================================================================== */
/* writer                                                                   */
/* ======================================================================== */

void drift_json_buf_init(drift_json_buf *b) {
    if (!b) return;
    memset(b, 0, sizeof *b);
}

void drift_json_buf_init_pretty(drift_json_buf *b, int indent) {
    if (!b) return;
    drift_json_buf_init(b);
    b->indent = indent > 0 ? indent : 0;
}

void drift_json_buf_free(drift_json_buf *b) {
    if (!b) return;
    int indent = b->indent;
    free(b->data);
    drift_json_buf_init(b);
    b->indent = indent;
}

int drift_json_buf_status(const drift_json_buf *b) { return b ? b->status : DRIFT_E_INTERNAL; }

static int wb_fail(drift_json_buf *b, int code) {
    if (b->status == DRIFT_OK) b->status = code;
    return b->status;
}

static int wb_put(drift_json_buf *b, const char *s, size_t n) {
    if (b->status != DRIFT_OK) return b->status;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) {
            if (cap > SIZE_MAX / 2) return wb_fail(b, DRIFT_E_NOMEM);
            cap *= 2;
        }
        char *d = drift_realloc(b->data, cap);
        if (!d) return wb_fail(b, DRIFT_E_NOMEM);
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return DRIFT_OK;
}

static int wb_puts(drift_json_buf *b, const char *s) { return wb_put(b, s, strlen(s)); }

static int wb_newline(drift_json_buf *b, int level) {
    if (b->indent <= 0) return b->status;
    wb_put(b, "\n", 1);
    for (int i = 0; i < level * b->indent; i++) wb_put(b, " ", 1);
    return b->status;
}

/* Bookkeeping before any value: commas, misuse checks. */
static int wb_pre_value(drift_json_buf *b) {
    if (b->status != DRIFT_OK) return b->status;
    if (b->done) return wb_fail(b, DRIFT_E_INTERNAL); /* a second top-level value */
    if (b->depth > 0) {
        if (b->kind[b->depth] == 'o') {
            if (!b->want_value) return wb_fail(b, DRIFT_E_INTERNAL); /* a value where a key is due */
            b->want_value = 0;
        } else {
            if (b->count[b->depth] > 0) wb_put(b, ",", 1);
            wb_newline(b, b->depth);
            b->count[b->depth]++;
        }
    }
    return b->status;
}

static int wb_post_value(drift_json_buf *b) {
    if (b->status == DRIFT_OK && b->depth == 0) b->done = 1;
    return b->status;
}

static int wb_escaped(drift_json_buf *b, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t run = 0; /* start of the pending run of bytes copied verbatim */
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        const char *esc = NULL;
        char tmp[8];
        size_t adv = 1;
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20) {
            snprintf(tmp, sizeof tmp, "\\u%04x", c);
            esc = tmp;
        } else if (c == 0x7f) {
            esc = "\\u007f";
        } else if (c >= 0x80) {
            size_t l = utf8_seq_len(u + i, n - i);
            if (l == 0) esc = "\\ufffd";
            else if (l == 2 && c == 0xc2 && u[i + 1] < 0xa0) { /* C1 controls (U+009B CSI...): escaped, as a terminal may see them */
                snprintf(tmp, sizeof tmp, "\\u%04x", u[i + 1]);
                esc = tmp;
                adv = 2;
            } else adv = l;
        }
        if (esc) {
            wb_put(b, s + run, i - run);
            wb_puts(b, esc);
            i += adv;
            run = i;
        } else {
            i += adv;
        }
    }
    wb_put(b, s + run, n - run);
    return b->status;
}

int drift_json_buf_begin_object(drift_json_buf *b) {
    if (!b) return DRIFT_E_INTERNAL;
    if (wb_pre_value(b) != DRIFT_OK) return b->status;
    if (b->depth >= DRIFT_JSON_MAX_DEPTH) return wb_fail(b, DRIFT_E_INTERNAL);
    wb_put(b, "{", 1);
    b->depth++;
    b->kind[b->depth] = 'o';
    b->count[b->depth] = 0;
    b->want_value = 0;
    return b->status;
}

int drift_json_buf_begin_array(drift_json_buf *b) {
    if (!b) return DRIFT_E_INTERNAL;
    if (wb_pre_value(b) != DRIFT_OK) return b->status;
    if (b->depth >= DRIFT_JSON_MAX_DEPTH) return wb_fail(b, DRIFT_E_INTERNAL);
    wb_put(b, "[", 1);
    b->depth++;
    b->kind[b->depth] = 'a';
    b->count[b->depth] = 0;
    return b->status;
}

static int wb_end(drift_json_buf *b, char kind, const char *close) {
    if (!b) return DRIFT_E_INTERNAL;
    if (b->status != DRIFT_OK) return b->status;
    if (b->depth == 0 || b->kind[b->depth] != kind || b->want_value) return wb_fail(b, DRIFT_E_INTERNAL);
    if (b->count[b->depth] > 0) wb_newline(b, b->depth - 1);
    wb_put(b, close, 1);
    b->depth--;
    return wb_post_value(b);
}

int drift_json_buf_end_object(drift_json_buf *b) { return wb_end(b, 'o', "}"); }
int drift_json_buf_end_array(drift_json_buf *b) { return wb_end(b, 'a', "]"); }

int drift_json_buf_add_key(drift_json_buf *b, const char *key) {
    if (!b) return DRIFT_E_INTERNAL;
    if (b->status != DRIFT_OK) return b->status;
    if (!key || b->depth == 0 || b->kind[b->depth] != 'o' || b->want_value) return wb_fail(b, DRIFT_E_INTERNAL);
    if (b->count[b->depth] > 0) wb_put(b, ",", 1);
    wb_newline(b, b->depth);
    wb_put(b, "\"", 1);
    wb_escaped(b, key, strlen(key));
    wb_puts(b, b->indent > 0 ? "\": " : "\":");
    b->count[b->depth]++;
    b->want_value = 1;
    return b->status;
}

int drift_json_buf_add_string_n(drift_json_buf *b, const char *s, size_t n) {
    if (!b) return DRIFT_E_INTERNAL;
    if (!s) return drift_json_buf_add_null(b);
    if (wb_pre_value(b) != DRIFT_OK) return b->status;
    wb_put(b, "\"", 1);
    wb_escaped(b, s, n);
    wb_put(b, "\"", 1);
    return wb_post_value(b);
}

int drift_json_buf_add_string(drift_json_buf *b, const char *s) {
    return drift_json_buf_add_string_n(b, s, s ? strlen(s) : 0);
}

static int wb_scalar(drift_json_buf *b, const char *text) {
    if (!b) return DRIFT_E_INTERNAL;
    if (wb_pre_value(b) != DRIFT_OK) return b->status;
    wb_puts(b, text);
    return wb_post_value(b);
}

int drift_json_buf_add_number(drift_json_buf *b, double x) {
    if (!isfinite(x)) return wb_scalar(b, "null");
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%.17g", x);
    /* printf follows the locale's decimal point; JSON needs '.' */
    const char *dp = localeconv()->decimal_point;
    if (dp && dp[0] && strcmp(dp, ".") != 0) {
        char *at = strstr(tmp, dp);
        if (at) {
            size_t dl = strlen(dp);
            *at = '.';
            memmove(at + 1, at + dl, strlen(at + dl) + 1);
        }
    }
    return wb_scalar(b, tmp);
}

int drift_json_buf_add_int(drift_json_buf *b, int64_t x) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%" PRId64, x);
    return wb_scalar(b, tmp);
}

int drift_json_buf_add_uint(drift_json_buf *b, uint64_t x) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%" PRIu64, x);
    return wb_scalar(b, tmp);
}

int drift_json_buf_add_bool(drift_json_buf *b, int x) { return wb_scalar(b, x ? "true" : "false"); }
int drift_json_buf_add_null(drift_json_buf *b) { return wb_scalar(b, "null"); }

int drift_json_buf_add_raw(drift_json_buf *b, const char *json) {
    if (!b) return DRIFT_E_INTERNAL;
    if (!json || !json[0]) return wb_fail(b, DRIFT_E_INTERNAL);
    return wb_scalar(b, json);
}

int drift_json_buf_add_value(drift_json_buf *b, const drift_json_value *v) {
    if (!b) return DRIFT_E_INTERNAL;
    if (!v) return wb_fail(b, DRIFT_E_INTERNAL);
    switch (v->type) {
    case DRIFT_JSON_NULL: return drift_json_buf_add_null(b);
    case DRIFT_JSON_BOOL: return drift_json_buf_add_bool(b, v->boolean);
    case DRIFT_JSON_NUMBER: return v->is_int ? drift_json_buf_add_int(b, v->integer) : drift_json_buf_add_number(b, v->number);
    case DRIFT_JSON_STRING: return drift_json_buf_add_string_n(b, v->str, v->str_len);
    case DRIFT_JSON_ARRAY:
        drift_json_buf_begin_array(b);
        for (size_t i = 0; i < v->n_items; i++) drift_json_buf_add_value(b, &v->items[i]);
        return drift_json_buf_end_array(b);
    case DRIFT_JSON_OBJECT:
        drift_json_buf_begin_object(b);
        for (size_t i = 0; i < v->n_members; i++) {
            drift_json_buf_add_key(b, v->members[i].key);
            drift_json_buf_add_value(b, &v->members[i].value);
        }
        return drift_json_buf_end_object(b);
    }
    return wb_fail(b, DRIFT_E_INTERNAL);
}

int drift_json_buf_field_string(drift_json_buf *b, const char *key, const char *s) {
    drift_json_buf_add_key(b, key);
    return drift_json_buf_add_string(b, s);
}
int drift_json_buf_field_number(drift_json_buf *b, const char *key, double x) {
    drift_json_buf_add_key(b, key);
    return drift_json_buf_add_number(b, x);
}
int drift_json_buf_field_int(drift_json_buf *b, const char *key, int64_t x) {
    drift_json_buf_add_key(b, key);
    return drift_json_buf_add_int(b, x);
}
int drift_json_buf_field_bool(drift_json_buf *b, const char *key, int x) {
    drift_json_buf_add_key(b, key);
    return drift_json_buf_add_bool(b, x);
}
int drift_json_buf_field_null(drift_json_buf *b, const char *key) {
    drift_json_buf_add_key(b, key);
    return drift_json_buf_add_null(b);
}

char *drift_json_buf_take(drift_json_buf *b) {
    if (!b) return NULL;
    char *out = NULL;
    if (b->status == DRIFT_OK && b->done && b->depth == 0 && b->data) {
        out = b->data;
        b->data = NULL;
    }
    drift_json_buf_free(b);
    return out;
}
