/* Terminal-safe strings: see term_safe.h. */
#include "formats/term_safe.h"

#include <stdio.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at p that is printable (not a C0/C1
 * control nor DEL), or 0. */
static size_t printable_len(const unsigned char *p) {
    if (p[0] < 0x20 || p[0] == 0x7f) return 0;
    if (p[0] < 0x80) return 1;
    size_t n = p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : p[0] >= 0xe0 && p[0] < 0xf0 ? 3 : p[0] >= 0xc2 && p[0] < 0xe0 ? 2 : 0;
    if (!n) return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    if (n == 2 && p[0] == 0xc2 && p[1] < 0xa0) return 0;                             /* U+0080..U+009F: C1 */
    if (n == 3 && ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0))) return 0; /* overlong, surrogate */
    if (n == 4 && ((p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))) return 0;
    return n;
}

const char *drift_term_safe(const char *s, char *buf, size_t sz) {
    if (!buf || !sz) return "";
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        size_t n = printable_len(p);
        if (o + (n ? n : 4) + 4 > sz) {
            snprintf(buf + o, sz - o, "...");
            return buf;
        }
        if (n) {
            memcpy(buf + o, p, n);
            o += n;
            p += n;
        } else {
            o += (size_t)snprintf(buf + o, sz - o, "\\x%02x", *p);
            p++;
        }
    }
    buf[o] = '\0';
    return buf;
}

int drift_term_is_safe(const char *s) {
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    while (*p) {
        size_t n = printable_len(p);
        if (!n) return 0;
        p += n;
    }
    return 1;
}
