/* drift_fnmatch: Python's fnmatch.fnmatchcase(name, pat), exactly.
 *
 * Python translates the pattern to a regular expression (fnmatch.translate,
 * CPython 3.8-3.13). This file reproduces that translation's meaning without
 * a regex engine:
 *   '*'   any run of characters, dots and newlines included
 *   '?'   any one character
 *   '['   a set up to the next ']' (a ']' right after '[' or '[!' is a member);
 *         with no closing ']' the '[' is a literal character
 *   '[!'  a negated set; '^' is not special
 *   'a-z' ranges, split exactly as translate() splits them: a '-' right after
 *         '[' or '[!' is literal, the character after a range's '-' cannot
 *         start another range, a trailing '-' is literal, and empty ranges
 *         (lo > hi) are removed together with their end points
 *   no backslash escapes: '\' is an ordinary character
 * Characters are Unicode code points (the strings are decoded as UTF-8; an
 * invalid byte stands for itself as a distinct code point).
 *
 * It cannot fail: the compiled pattern lives in fixed buffers on the stack
 * (about 30 KiB), sized for DRIFT_FNMATCH_MAX bytes of pattern, and the name
 * is decoded as it is matched. (It used to malloc six buffers per call and
 * report an allocation failure as "no match": docs/RELIABILITY.md, fixed
 * finding 2.) */
#include "formats/fnmatch.h"

#include <stdint.h>
#include <string.h>

enum { TOK_LIT, TOK_ANY, TOK_STAR, TOK_SET };
enum { SET_NORMAL, SET_NEVER, SET_ALWAYS };

typedef struct fn_tok {
    uint8_t kind;
    uint8_t set_kind;        /* TOK_SET */
    uint8_t neg;             /* TOK_SET */
    uint32_t c;              /* TOK_LIT */
    uint16_t first, count;   /* TOK_SET: intervals [first, first+count) */
} fn_tok;

typedef struct fn_iv {
    uint32_t lo, hi;
} fn_iv;

/* Decodes the code point at *u (not NUL) and returns it; *len gets its
 * length in bytes (1..4). */
static uint32_t decode_one(const unsigned char *u, size_t *len) {
    unsigned char c = u[0];
    uint32_t v = 0;
    size_t l = 0;
    if (c < 0x80) {
        v = c;
        l = 1;
    } else if (c >= 0xC2 && c <= 0xDF && (u[1] & 0xC0) == 0x80) {
        v = ((uint32_t)(c & 0x1F) << 6) | (u[1] & 0x3F);
        l = 2;
    } else if (c >= 0xE0 && c <= 0xEF && (u[1] & 0xC0) == 0x80 && (u[2] & 0xC0) == 0x80) {
        v = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
        l = (v >= 0x800 && (v < 0xD800 || v > 0xDFFF)) ? 3 : 0;
    } else if (c >= 0xF0 && c <= 0xF4 && (u[1] & 0xC0) == 0x80 && (u[2] & 0xC0) == 0x80 && (u[3] & 0xC0) == 0x80) {
        v = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) | ((uint32_t)(u[2] & 0x3F) << 6) |
            (u[3] & 0x3F);
        l = (v >= 0x10000 && v <= 0x10FFFF) ? 4 : 0;
    }
    if (l == 0) {
        v = 0x110000u + c; /* invalid byte: a code point no valid character has */
        l = 1;
    }
    *len = l;
    return v;
}

/* Decodes s into cp (capacity strlen(s)); returns the number of code points. */
static size_t decode_utf8(const char *s, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    size_t n = 0, len = 0;
    while (*u) {
        cp[n++] = decode_one(u, &len);
        u += len;
    }
    return n;
}

/* Compiles the set pat[i..j) (i just after '[', pat[j] == ']') into tok,
 * appending intervals to iv. scratch and bounds have room for j - i + 2. */
static void compile_set(const uint32_t *pat, size_t i, size_t j, fn_tok *tok, fn_iv *iv, size_t *n_iv,
                        uint32_t *scratch, uint32_t *bounds) {
    tok->kind = TOK_SET;
    tok->set_kind = SET_NORMAL;
    tok->neg = 0;
    tok->first = (uint16_t)*n_iv;
    tok->count = 0;

    /* chunks: contiguous in scratch, chunk k = scratch[bounds[k] .. bounds[k+1]) */
    uint32_t L = 0;
    size_t nc = 0;
    int has_dash = 0;
    for (size_t x = i; x < j; x++)
        if (pat[x] == '-') has_dash = 1;
    if (!has_dash) {
        for (size_t x = i; x < j; x++) scratch[L++] = pat[x];
        bounds[0] = 0;
        nc = 1;
    } else {
        size_t k = (pat[i] == '!') ? i + 2 : i + 1;
        size_t start = i;
        bounds[0] = 0;
        for (;;) {
            size_t f = (size_t)-1;
            for (size_t x = k; x < j; x++) {
                if (pat[x] == '-') {
                    f = x;
                    break;
                }
            }
            if (f == (size_t)-1) break;
            for (size_t x = start; x < f; x++) scratch[L++] = pat[x];
            bounds[++nc] = L;
            start = f + 1;
            k = f + 3;
        }
        if (start < j) {
            for (size_t x = start; x < j; x++) scratch[L++] = pat[x];
            bounds[++nc] = L;
        } else {
            scratch[L++] = '-'; /* chunks[-1] += '-' */
            bounds[nc] = L;
        }
        /* Remove empty ranges, last to first: chunks[k-1][:-1] + chunks[k][1:]. */
        for (size_t kk = nc - 1; kk >= 1; kk--) {
            size_t b = bounds[kk];
            if (scratch[b - 1] > scratch[b]) {
                memmove(scratch + b - 1, scratch + b + 1, (L - b - 1) * sizeof *scratch);
                L -= 2;
                for (size_t m = kk; m < nc; m++) bounds[m] = bounds[m + 1] - 2;
                nc--;
            }
        }
    }
    bounds[nc] = L;

    if (L == 0) {
        tok->set_kind = SET_NEVER; /* empty set: never matches */
        return;
    }
    if (L == 1 && scratch[0] == '!') {
        tok->set_kind = SET_ALWAYS; /* "negated empty set": any character */
        return;
    }
    size_t from = 0;
    if (scratch[0] == '!') {
        tok->neg = 1;
        from = 1;
    }
    for (size_t x = from; x < L; x++) {
        iv[*n_iv].lo = iv[*n_iv].hi = scratch[x];
        (*n_iv)++;
    }
    for (size_t k = 1; k < nc; k++) {
        iv[*n_iv].lo = scratch[bounds[k] - 1];
        iv[*n_iv].hi = scratch[bounds[k]];
        (*n_iv)++;
    }
    tok->count = (uint16_t)(*n_iv - tok->first);
}

static int tok_match(const fn_tok *t, const fn_iv *iv, uint32_t c) {
    switch (t->kind) {
    case TOK_LIT: return t->c == c;
    case TOK_ANY: return 1;
    case TOK_SET: {
        if (t->set_kind == SET_NEVER) return 0;
        if (t->set_kind == SET_ALWAYS) return 1;
        int in = 0;
        for (size_t k = t->first; k < (size_t)t->first + t->count; k++) {
            if (c >= iv[k].lo && c <= iv[k].hi) {
                in = 1;
                break;
            }
        }
        return in != t->neg;
    }
    default: return 0;
    }
}

int drift_fnmatch(const char *pat, const char *name) {
    if (!pat || !name) return 0;
    size_t pl = strlen(pat);
    if (pl > DRIFT_FNMATCH_MAX) return 0;
    /* Fixed buffers: a pattern of pl bytes has at most pl code points, pl
     * tokens, and its sets at most pl intervals and pl + 2 chunk bounds. */
    uint32_t pc[DRIFT_FNMATCH_MAX + 1];
    fn_tok tok[DRIFT_FNMATCH_MAX + 1];
    fn_iv iv[DRIFT_FNMATCH_MAX + 2];
    uint32_t scratch[DRIFT_FNMATCH_MAX + 2];
    uint32_t bounds[DRIFT_FNMATCH_MAX + 2];
    size_t m = decode_utf8(pat, pc);

    /* tokenize as fnmatch.translate does */
    size_t nt = 0, n_iv = 0;
    for (size_t i = 0; i < m;) {
        uint32_t c = pc[i++];
        if (c == '*') {
            if (nt == 0 || tok[nt - 1].kind != TOK_STAR) tok[nt++].kind = TOK_STAR;
        } else if (c == '?') {
            tok[nt++].kind = TOK_ANY;
        } else if (c == '[') {
            size_t j = i;
            if (j < m && pc[j] == '!') j++;
            if (j < m && pc[j] == ']') j++;
            while (j < m && pc[j] != ']') j++;
            if (j >= m) {
                tok[nt].kind = TOK_LIT;
                tok[nt++].c = '[';
            } else {
                compile_set(pc, i, j, &tok[nt++], iv, &n_iv, scratch, bounds);
                i = j + 1;
            }
        } else {
            tok[nt].kind = TOK_LIT;
            tok[nt++].c = c;
        }
    }

    /* match: every non-star token consumes exactly one character, so the
     * single-backtrack-point algorithm is exact; the name is decoded as it
     * goes (positions are byte offsets) */
    const unsigned char *u = (const unsigned char *)name;
    size_t ti = 0, ni = 0, star_t = (size_t)-1, star_n = 0, len = 0;
    while (u[ni]) {
        if (ti < nt && tok[ti].kind == TOK_STAR) {
            star_t = ti++;
            star_n = ni;
        } else if (ti < nt && tok_match(&tok[ti], iv, decode_one(u + ni, &len))) {
            ti++;
            ni += len;
        } else if (star_t != (size_t)-1) {
            ti = star_t + 1;
            decode_one(u + star_n, &len);
            star_n += len;
            ni = star_n;
        } else {
            return 0;
        }
    }
    while (ti < nt && tok[ti].kind == TOK_STAR) ti++;
    return ti == nt;
}
