/* libFuzzer harness: the command-line spec parsers. The input is split at
 * its first newline into A and B; every input goes through all of:
 *
 *   drift_replay_parse_steps(A)      `drift replay/bisect --steps A:B`
 *   drift_recorder_steps_parse(A)    recorder step specs ("0:10,every:50"),
 *                                    matched against a spread of steps
 *   drift_recorder_sites_parse(A)    recorder site globs ("blocks.*,!*:pre"),
 *                                    matched against B and a few names
 *   drift_rec_options_parse(A)       the recorder's K=V option string (';' or
 *                                    newline separated: A and B joined)
 *   drift_fnmatch(A, B)              checked for equality against fn_ref below,
 *                                    an independent matcher
 *
 * (FAMILY[:K=V,...] model specs are fuzz_family_spec's.) Properties: every
 * status is a documented one and failures carry a message; an accepted step
 * range has first <= last, and its canonical form parses to the same range;
 * recorder specs match deterministically; drift_fnmatch == fn_ref wherever
 * fn_ref applies. */
#include <stddef.h>
#include <stdint.h>

#include "formats/fnmatch.h"
#include "fuzz/fuzz_common.h"
#include "recorder/recorder.h"
#include "recorder/recorder_internal.h" /* drift_rec_options_parse */
#include "replay/analysis/report.h"         /* drift_replay_parse_steps */

/* ---- reference matcher ------------------------------------------------------
 * fnmatch.fnmatchcase over ASCII, written from the rules, not from
 * formats/fnmatch.c: '*' any run (dots, newlines too), '?' one character,
 * '[...]' a set up to the first ']' that is not its first member ('[!...]'
 * negated), members are characters and ranges "x-y" (a '-' first, last or
 * right after a range is literal), an unclosed '[' is literal, '\' is an
 * ordinary character. Python drops a reversed range (x > y) together with its
 * end points, in ways that depend on the neighbouring ranges: fn_ref declines
 * such patterns (returns -1) rather than imitate it. Time O(|pat| * |name|). */
enum { REF_LIT, REF_ANY, REF_STAR, REF_SET };
typedef struct ref_el {
    int kind, neg;
    unsigned char c;
    size_t first, n; /* REF_SET: ranges[first .. first+n) */
} ref_el;

static int fn_ref(const char *pat, const char *name) {
    size_t pl = strlen(pat), nl = strlen(name);
    for (size_t i = 0; i < pl; i++)
        if ((unsigned char)pat[i] >= 0x80) return -1;
    for (size_t i = 0; i < nl; i++)
        if ((unsigned char)name[i] >= 0x80) return -1;
    if ((pl + 1) * (nl + 1) > (1u << 22)) return -1;
    ref_el *el = malloc((pl + 1) * sizeof *el);
    unsigned char(*rg)[2] = malloc((pl + 1) * sizeof *rg);
    unsigned char *row = malloc(nl + 1), *next = malloc(nl + 1);
    if (!el || !rg || !row || !next) abort();
    size_t ne = 0, nr = 0;
    int result = -1;
    for (size_t i = 0; i < pl;) {
        unsigned char c = (unsigned char)pat[i];
        if (c == '*') {
            el[ne++] = (ref_el){REF_STAR, 0, 0, 0, 0};
            i++;
        } else if (c == '?') {
            el[ne++] = (ref_el){REF_ANY, 0, 0, 0, 0};
            i++;
        } else if (c == '[') {
            size_t j = i + 1, first = nr;
            int neg = 0, closed = 0, reversed = 0;
            if (j < pl && pat[j] == '!') {
                neg = 1;
                j++;
            }
            for (int member = 0; j < pl; member++) {
                unsigned char a = (unsigned char)pat[j];
                if (a == ']' && member > 0) {
                    closed = 1;
                    break;
                }
                if (j + 2 < pl && pat[j + 1] == '-' && pat[j + 2] != ']') {
                    unsigned char b = (unsigned char)pat[j + 2];
                    if (a > b) reversed = 1;
                    rg[nr][0] = a;
                    rg[nr++][1] = b;
                    j += 3;
                } else {
                    rg[nr][0] = rg[nr][1] = a;
                    nr++;
                    j++;
                }
            }
            if (!closed) {
                nr = first; /* an unclosed '[' is a literal */
                el[ne++] = (ref_el){REF_LIT, 0, '[', 0, 0};
                i++;
            } else {
                if (reversed) goto done;
                el[ne++] = (ref_el){REF_SET, neg, 0, first, nr - first};
                i = j + 1;
            }
        } else {
            el[ne++] = (ref_el){REF_LIT, 0, c, 0, 0};
            i++;
        }
    }
    /* row[k]: the elements so far match name[0..k) */
    memset(row, 0, nl + 1);
    row[0] = 1;
    for (size_t e = 0; e < ne; e++) {
        memset(next, 0, nl + 1);
        const ref_el *x = &el[e];
        if (x->kind == REF_STAR) {
            int any = 0;
            for (size_t k = 0; k <= nl; k++) {
                any |= row[k];
                next[k] = (unsigned char)any;
            }
        } else {
            for (size_t k = 0; k < nl; k++) {
                if (!row[k]) continue;
                unsigned char ch = (unsigned char)name[k];
                int ok = 0;
                if (x->kind == REF_ANY) {
                    ok = 1;
                } else if (x->kind == REF_LIT) {
                    ok = ch == x->c;
                } else {
                    int in = 0;
                    for (size_t r = x->first; r < x->first + x->n; r++) in |= ch >= rg[r][0] && ch <= rg[r][1];
                    ok = in != x->neg;
                }
                if (ok) next[k + 1] = 1;
            }
        }
        unsigned char *t = row;
        row = next;
        next = t;
    }
    result = row[nl];
done:
    free(el);
    free(rg);
    free(row);
    free(next);
    return result;
}

/* ---- the parsers --------------------------------------------------------- */
static void specs_replay_steps(const char *a) {
    int64_t first = 0, last = 0;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_replay_parse_steps(a, &first, &last, &err);
    fuzz_report("replay --steps", rc, &err);
    FUZZ_CHECK(rc == DRIFT_OK || (rc == DRIFT_E_USAGE && err.msg[0]), "parse_steps(\"%s\"): rc %d: %s", a, rc, err.msg);
    if (rc != DRIFT_OK) return;
    FUZZ_CHECK(first >= -1 && last >= -1 && (first < 0 || last < 0 || first <= last), "\"%s\" -> %lld:%lld", a,
               (long long)first, (long long)last);
    char canon[64];
    if (first >= 0 && first == last) snprintf(canon, sizeof canon, "%lld", (long long)first);
    else if (first >= 0 || last >= 0) {
        char f[24] = "", l[24] = "";
        if (first >= 0) snprintf(f, sizeof f, "%lld", (long long)first);
        if (last >= 0) snprintf(l, sizeof l, "%lld", (long long)last);
        snprintf(canon, sizeof canon, "%s:%s", f, l);
    } else {
        canon[0] = '\0';
    }
    int64_t f2 = 0, l2 = 0;
    rc = drift_replay_parse_steps(canon, &f2, &l2, &err);
    FUZZ_CHECK(rc == DRIFT_OK && f2 == first && l2 == last, "canonical \"%s\" of \"%s\" parses to %lld:%lld", canon, a,
               (long long)f2, (long long)l2);
}

static void specs_recorder_steps(const char *a) {
    drift_recorder_steps *s = NULL;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_recorder_steps_parse(&s, a, &err);
    fuzz_report("recorder steps", rc, &err);
    FUZZ_CHECK(fuzz_status_ok(rc) && rc != DRIFT_E_INPUT && (rc == DRIFT_OK || err.msg[0]),
               "steps_parse(\"%s\"): rc %d: %s", a, rc, err.msg);
    FUZZ_CHECK((rc == DRIFT_OK) == (s != NULL), "steps_parse(\"%s\"): rc %d with out %p", a, rc, (void *)s);
    static const int64_t probe[] = {0, 1, 2, 3, 7, 10, 49, 50, 51, 99, 100, 1000, 123456789, (int64_t)1 << 40,
                                    ((int64_t)1 << 62) - 1, (int64_t)1 << 62, INT64_MAX, -1};
    for (size_t i = 0; s && i < sizeof probe / sizeof probe[0]; i++) {
        int m1 = drift_recorder_steps_match(s, probe[i]), m2 = drift_recorder_steps_match(s, probe[i]);
        FUZZ_CHECK((m1 == 0 || m1 == 1) && m1 == m2, "steps_match(\"%s\", %lld) = %d, %d", a, (long long)probe[i], m1,
                   m2);
    }
    drift_recorder_steps_free(s);
}

static void specs_recorder_sites(const char *a, const char *b) {
    drift_recorder_sites *s = NULL;
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_recorder_sites_parse(&s, a, &err);
    fuzz_report("recorder sites", rc, &err);
    FUZZ_CHECK(fuzz_status_ok(rc) && rc != DRIFT_E_INPUT && (rc == DRIFT_OK || err.msg[0]),
               "sites_parse(\"%s\"): rc %d: %s", a, rc, err.msg);
    FUZZ_CHECK((rc == DRIFT_OK) == (s != NULL), "sites_parse(\"%s\"): rc %d with out %p", a, rc, (void *)s);
    const char *names[] = {b, "blocks.0.attn1:out", "output:noise_pred", "input:latents:pre_cast", "", "none"};
    for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++) {
        int m1 = drift_recorder_sites_match(s, names[i]), m2 = drift_recorder_sites_match(s, names[i]);
        FUZZ_CHECK((m1 == 0 || m1 == 1) && m1 == m2, "sites_match(\"%s\", \"%s\") = %d, %d", a, names[i], m1, m2);
    }
    drift_recorder_sites_free(s);
}

static void specs_rec_options(const char *text) {
    rec_options o;
    memset(&o, 0, sizeof o);
    drift_err err;
    drift_err_clear(&err);
    int rc = drift_rec_options_parse(&o, text, &err);
    fuzz_report("recorder options", rc, &err);
    FUZZ_CHECK(fuzz_status_ok(rc) && rc != DRIFT_E_INPUT && (rc == DRIFT_OK || err.msg[0]),
               "rec_options_parse: rc %d: %s", rc, err.msg);
    if (rc == DRIFT_OK) FUZZ_CHECK(o.staging_bytes > 0 && o.max_pending > 0, "options: zero sizes accepted");
    drift_rec_options_free(&o);
}

static void specs_fnmatch(const char *pat, const char *name) {
    int got = drift_fnmatch(pat, name);
    FUZZ_CHECK(got == 0 || got == 1, "drift_fnmatch returned %d", got);
    int want = fn_ref(pat, name);
    if (want >= 0)
        FUZZ_CHECK(got == want, "drift_fnmatch(\"%s\", \"%s\") = %d, the reference says %d", pat, name, got, want);
    /* a pattern always matches itself when it has no special characters */
    if (!strpbrk(pat, "*?[")) FUZZ_CHECK(drift_fnmatch(pat, pat) == 1, "literal \"%s\" does not match itself", pat);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 8192) return 0;
    char *all = fuzz_cstr(data, size);
    char *b = strchr(all, '\n');
    char *a = fuzz_cstr(data, b ? (size_t)(b - all) : strlen(all));
    b = b ? b + 1 : all + strlen(all);
    specs_replay_steps(a);
    specs_recorder_steps(a);
    specs_recorder_sites(a, b);
    specs_rec_options(all);
    specs_fnmatch(a, b);
    free(a);
    free(all);
    return 0;
}
