/* One sanitizer for every string read from a file that reaches a terminal
 * (names, attributes, status, plan names, model families, messages): no
 * byte of it can start an escape sequence (a title change, a screen clear,
 * an OSC 52 clipboard write). */
#ifndef DRIFT_TERM_SAFE_H
#define DRIFT_TERM_SAFE_H

#include <stddef.h>

/* s (NULL: "") made safe for a terminal: C0 controls, DEL, C1 controls (the
 * bytes 0x80-0x9f and their UTF-8 forms U+0080-U+009F, e.g. U+009B CSI,
 * U+009D OSC) and invalid UTF-8 become \xNN; written into buf (owned by the
 * caller), cut with "..." when it does not fit; returns buf ("" if sz is 0). */
const char *drift_term_safe(const char *s, char *buf, size_t sz);
/* 1 if s needs no change (drift_term_safe would copy it as it is). */
int drift_term_is_safe(const char *s);

#endif
