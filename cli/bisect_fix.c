#include "cli/bisect_fix.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/json.h"

typedef struct sbuf {
    char *s;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) { b->oom = 1; return; }
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->len + (size_t)n + 1) c *= 2;
        char *t = realloc(b->s, c);
        if (!t) { b->oom = 1; return; }
        b->s = t;
        b->cap = c;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* s as a JSON string literal (escaped), or "null" for NULL. */
static void put_str(sbuf *b, const char *s) {
    drift_json_buf j;
    drift_json_buf_init(&j);
    drift_json_buf_add_string(&j, s);
    char *t = drift_json_buf_take(&j);
    if (!t) { b->oom = 1; return; }
    put(b, "%s", t);
    free(t);
}

static const char *input_value(const drift_input_policy *p) {
    if (p->kind == DRIFT_INPUT_DEFAULT) return "default";
    if (p->kind == DRIFT_INPUT_EXPLICIT) return drift_dtype_name(p->dtype);
    return NULL;
}

char *drift_bisect_plan_pretty(const drift_plan *p) {
    sbuf b = {0};
    static const char *const inputs[DRIFT_INPUT_COUNT] = {"latents", "cond", "timestep"};
    put(&b, "{\n  \"name\": ");
    put_str(&b, p->name);
    put(&b, ",\n  \"fsdp_master_dtype\": \"%s\",\n", drift_dtype_name(p->fsdp_master_dtype));
    put(&b, "  \"fsdp_reduce_dtype\": \"%s\",\n", drift_dtype_name(p->fsdp_reduce_dtype));
    put(&b, "  \"diffusion_forward_dtype\": \"%s\",\n", drift_dtype_name(p->diffusion_forward_dtype));
    put(&b, "  \"sglang_dit_precision\": \"%s\",\n", drift_dtype_name(p->sglang_dit_precision));
    put(&b, "  \"input_dtype_policy\": {");
    for (int i = 0; i < DRIFT_INPUT_COUNT; i++) {
        put(&b, "%s\"%s\": ", i ? ", " : "", inputs[i]);
        put_str(&b, input_value(&p->inputs[i]));
    }
    put(&b, "},\n  \"param_dtype_patterns\": [%s", p->n_patterns ? "\n" : "");
    for (size_t i = 0; i < p->n_patterns; i++) {
        put(&b, "    [");
        put_str(&b, p->patterns[i].glob);
        put(&b, ", \"%s\"]%s\n", drift_dtype_name(p->patterns[i].dtype), i + 1 < p->n_patterns ? "," : "");
    }
    put(&b, "%s],\n", p->n_patterns ? "  " : "");
    put(&b, "  \"buffer_provenance\": {\"rope\": \"%s\"}\n}\n",
        p->rope_provenance == DRIFT_BUF_CPU_FP64 ? "cpu" : p->rope_provenance == DRIFT_BUF_DEVICE_FP32 ? "device" : "recorded");
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* Splits text into lines (pointers into a copy; lens without '\n'). */
typedef struct lines {
    char *copy;
    const char **at;
    size_t *len, n;
} lines;

static int split(const char *t, lines *l) {
    memset(l, 0, sizeof *l);
    size_t n = 0, tl = strlen(t);
    for (size_t i = 0; i < tl; i++) n += t[i] == '\n';
    if (tl && t[tl - 1] != '\n') n++;
    l->copy = malloc(tl + 1);
    l->at = malloc((n + 1) * sizeof *l->at);
    l->len = malloc((n + 1) * sizeof *l->len);
    if (!l->copy || !l->at || !l->len) return -1;
    memcpy(l->copy, t, tl + 1);
    const char *p = l->copy;
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        l->at[l->n] = p;
        l->len[l->n++] = k;
        p += k + (e ? 1 : 0);
    }
    return 0;
}

static void lines_free(lines *l) {
    free(l->copy);
    free(l->at);
    free(l->len);
}

static int same_line(const lines *a, size_t i, const lines *b, size_t j) {
    return a->len[i] == b->len[j] && memcmp(a->at[i], b->at[j], a->len[i]) == 0;
}

char *drift_bisect_line_diff(const char *a, const char *b, const char *a_name, const char *b_name, int context) {
    lines la, lb;
    if (split(a, &la) || split(b, &lb)) {
        lines_free(&la);
        lines_free(&lb);
        return NULL;
    }
    size_t n = la.n, m = lb.n;
    /* LCS table (plans are short: a few hundred lines at most) */
    unsigned *L = calloc((n + 1) * (m + 1), sizeof *L);
    /* ops: 's' same, '-' from a, '+' from b, with the line index */
    char *op = malloc(n + m + 1);
    size_t *idx = malloc((n + m + 1) * sizeof *idx);
    sbuf o = {0};
    if (!L || !op || !idx) goto oom;
    for (size_t i = n; i-- > 0;)
        for (size_t j = m; j-- > 0;)
            L[i * (m + 1) + j] = same_line(&la, i, &lb, j) ? L[(i + 1) * (m + 1) + j + 1] + 1
                                 : L[(i + 1) * (m + 1) + j] > L[i * (m + 1) + j + 1] ? L[(i + 1) * (m + 1) + j]
                                                                                     : L[i * (m + 1) + j + 1];
    size_t k = 0, i = 0, j = 0, changes = 0;
    while (i < n || j < m) {
        if (i < n && j < m && same_line(&la, i, &lb, j)) { op[k] = 's'; idx[k++] = j; i++; j++; }
        else if (i < n && (j == m || L[(i + 1) * (m + 1) + j] >= L[i * (m + 1) + j + 1])) { op[k] = '-'; idx[k++] = i++; changes++; }
        else { op[k] = '+'; idx[k++] = j++; changes++; }
    }
    put(&o, "%s", "");
    if (changes) {
        put(&o, "--- %s\n+++ %s\n", a_name, b_name);
        /* a same line is shown within context of a change; each cut run is one "..." */
        long last_change = -1000000;
        for (size_t q = 0; q < k; q++) {
            if (op[q] != 's') last_change = (long)q;
            long next_change = 1000000;
            for (size_t r = q; r < k && r <= q + (size_t)context; r++)
                if (op[r] != 's') { next_change = (long)r; break; }
            int show = op[q] != 's' || (long)q - last_change <= context || next_change - (long)q <= context;
            if (op[q] == '-') put(&o, "- %.*s\n", (int)la.len[idx[q]], la.at[idx[q]]);
            else if (op[q] == '+') put(&o, "+ %.*s\n", (int)lb.len[idx[q]], lb.at[idx[q]]);
            else if (show) put(&o, "  %.*s\n", (int)lb.len[idx[q]], lb.at[idx[q]]);
            else if (q == 0 || op[q - 1] != 's' || (long)(q - 1) - last_change <= context) put(&o, "  ...\n");
        }
    }
    free(L);
    free(op);
    free(idx);
    lines_free(&la);
    lines_free(&lb);
    if (o.oom) { free(o.s); return NULL; }
    return o.s;
oom:
    free(L);
    free(op);
    free(idx);
    free(o.s);
    lines_free(&la);
    lines_free(&lb);
    return NULL;
}
