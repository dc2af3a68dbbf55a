/* One HTML escaping helper for every string that reaches a page from an
 * input file (trace names, plans, bisect JSON, paths): text and attribute
 * values alike. */
#ifndef DRIFT_HTML_ESCAPE_H
#define DRIFT_HTML_ESCAPE_H

#include <stdio.h>

/* Writes s (NULL: nothing) to f with & < > " ' as entities, and C0 controls
 * (but tab and newline), DEL and invalid UTF-8 bytes as U+FFFD, so that no
 * byte of s can open a tag, an attribute, a script or an entity. */
void drift_html_escape(FILE *f, const char *s);

#endif
