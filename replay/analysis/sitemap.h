/* Site maps: pairing the sites of two traces whose producers name their
 * modules differently (docs/compare.md). A small JSON file:
 *
 *   {"rename": [["transformer.blocks.*", "blocks.*"], ...],
 *    "concat": [{"site": "blocks.*.attn1.qkv_proj:out",
 *                "parts": ["blocks.*.attn1.to_q:out", "blocks.*.attn1.to_k:out",
 *                          "blocks.*.attn1.to_v:out"],
 *                "axis": -1}]}
 *
 * rename: ordered [FROM, TO] glob pairs applied to the reference side's
 * (TRACE_B, --against) site names; the first FROM that matches the whole
 * name wins; each `*` of FROM captures (shortest first, `*` also matches
 * dots) and the n-th `*` of TO is replaced by the n-th capture. No other
 * glob characters are special.
 * concat: a site (after renames) on one side equals the concatenation of
 * parts on the other side along axis (negative counts from the end); `*`
 * captures of site fill the `*`s of the parts. At most
 * DRIFT_SITEMAP_MAX_PARTS parts. */
#ifndef DRIFT_REPLAY_ANALYSIS_SITEMAP_H
#define DRIFT_REPLAY_ANALYSIS_SITEMAP_H

#include <stddef.h>

#include "formats/err.h"

#define DRIFT_SITEMAP_MAX_PARTS 16
#define DRIFT_SITEMAP_NAME_MAX 512
#define DRIFT_SITEMAP_MAX_RULES 4096

typedef struct drift_sitemap drift_sitemap;

/* Parses text[0..len) (source names it in errors). *out owned by the caller:
 * drift_sitemap_free. Errors (DRIFT_E_INPUT) name source, the field and
 * what was expected. */
int drift_sitemap_parse(drift_sitemap **out, const char *text, size_t len, const char *source, drift_err *err);
/* Reads and parses the file at path. */
int drift_sitemap_load(drift_sitemap **out, const char *path, drift_err *err);
/* NULL allowed. */
void drift_sitemap_free(drift_sitemap *m);

/* The reference-side name of a site in the candidate's naming: writes the
 * renamed name (or name itself when no rule matches, or m is NULL) to buf.
 * Returns 1 if a rule applied, 0 if not, -1 if the result does not fit. */
int drift_sitemap_rename(const drift_sitemap *m, const char *name, char *buf, size_t bufsz);

/* Concatenation rules: if name matches the site pattern of a rule, writes
 * its parts (captures substituted) to parts and the axis to *axis and
 * returns the number of parts; 0 if no rule matches (or m is NULL). */
size_t drift_sitemap_concat_of(const drift_sitemap *m, const char *name,
                               char parts[][DRIFT_SITEMAP_NAME_MAX], int *axis);
/* The reverse: if name matches the FIRST part pattern of a rule, writes the
 * site it belongs to (to site), its parts and axis as above; 0 if none. */
size_t drift_sitemap_concat_by_first_part(const drift_sitemap *m, const char *name, char *site,
                                          char parts[][DRIFT_SITEMAP_NAME_MAX], int *axis);

/* Glob match of the whole name against pat where only `*` is special;
 * fills up to max_caps captures (start offset, length). Returns the number
 * of `*` in pat on a match, -1 on no match. Exposed for tests. */
int drift_sitemap_glob_capture(const char *pat, const char *name, size_t caps[][2], int max_caps);

#endif
