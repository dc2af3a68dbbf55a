/* HTML escaping: see html_escape.h. */
#include "formats/html_escape.h"

#include <stddef.h>

/* Length of the valid UTF-8 sequence at u (1..4), or 0 if it is not one. */
static size_t utf8_len(const unsigned char *u) {
    if (u[0] < 0x80) return 1;
    size_t n = u[0] >= 0xF0 && u[0] <= 0xF4 ? 4 : u[0] >= 0xE0 ? 3 : u[0] >= 0xC2 && u[0] <= 0xDF ? 2 : 0;
    if (!n || (u[0] >= 0xF8)) return 0;
    for (size_t i = 1; i < n; i++)
        if ((u[i] & 0xC0) != 0x80) return 0;
    if (n == 3 && ((u[0] == 0xE0 && u[1] < 0xA0) || (u[0] == 0xED && u[1] >= 0xA0))) return 0; /* overlong, surrogate */
    if (n == 4 && ((u[0] == 0xF0 && u[1] < 0x90) || (u[0] == 0xF4 && u[1] >= 0x90))) return 0;
    return n;
}

void drift_html_escape(FILE *f, const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    while (u && *u) {
        unsigned char c = *u;
        switch (c) {
        case '<': fputs("&lt;", f); u++; continue;
        case '>': fputs("&gt;", f); u++; continue;
        case '&': fputs("&amp;", f); u++; continue;
        case '"': fputs("&quot;", f); u++; continue;
        case '\'': fputs("&#39;", f); u++; continue;
        default: break;
        }
        if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7F) {
            fputs("\xEF\xBF\xBD", f);
            u++;
            continue;
        }
        size_t n = utf8_len(u);
        if (!n) {
            fputs("\xEF\xBF\xBD", f);
            u++;
            continue;
        }
        fwrite(u, 1, n, f);
        u += n;
    }
}
