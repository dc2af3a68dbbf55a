/* Glob matching with Python's fnmatch.fnmatchcase semantics (formats/fnmatch.c),
 * shared by plans (param_dtype_patterns), the recorder's site globs and the
 * dashboard's filter, which need the matcher and not the plan API. */
#ifndef DRIFT_FORMATS_FNMATCH_H
#define DRIFT_FORMATS_FNMATCH_H

/* Longest pattern drift_fnmatch takes, in bytes (plan globs are at most 1024;
 * "*." is prepended to one for a hint). A longer pattern matches nothing. */
#define DRIFT_FNMATCH_MAX 1088
/* Python fnmatch.fnmatchcase(name, pat): '*' matches any run (dots too), '?'
 * one char, [seq] / [!seq] with ranges, no escapes, an unclosed '[' literal.
 * Returns 1 or 0; cannot fail (no allocation; names of any length). */
int drift_fnmatch(const char *pat, const char *name);

#endif
