/* Sampling specs (by step, by site glob) and the recorder's option string. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "formats/fnmatch.h"
#include "recorder/recorder_internal.h"

#define STEP_MAX ((int64_t)1 << 62)

/* ======================================================================= */
/* Step specs                                                                */
/* ======================================================================= */
enum { ST_ALL, ST_ONE, ST_RANGE, ST_FROM, ST_EVERY };

typedef struct step_item {
    int kind;
    int64_t a, b;
} step_item;

struct drift_recorder_steps {
    step_item *items;
    size_t n;
};

/* Copies [s, e) trimmed of spaces into buf. */
static void trim_copy(const char *s, const char *e, char *buf, size_t bufsz) {
    while (s < e && isspace((unsigned char)*s)) s++;
    while (e > s && isspace((unsigned char)e[-1])) e--;
    size_t n = (size_t)(e - s);
    if (n >= bufsz) n = bufsz - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
}

/* A decimal in 0..STEP_MAX, the whole string. */
static int parse_num(const char *s, int64_t *out) {
    if (!*s) return -1;
    int64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        int d = *p - '0';
        if (v > (STEP_MAX - d) / 10) return -1; /* v * 10 + d > STEP_MAX, without overflowing */
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static int step_err(drift_err *err, const char *spec, const char *item, const char *what) {
    return drift_err_set(err, DRIFT_E_USAGE, "store_steps",
                         "step spec \"%s\": item \"%s\": %s (expected all, none, N, A:B, A:, :B or every:N, "
                         "separated by commas; numbers 0..2^62)",
                         spec, item, what);
}

static int parse_step_item(const char *spec, const char *item, step_item *it, drift_err *err) {
    if (!item[0]) return step_err(err, spec, item, "empty item");
    if (strcmp(item, "all") == 0 || strcmp(item, "*") == 0) {
        it->kind = ST_ALL;
        return DRIFT_OK;
    }
    if (strncmp(item, "every:", 6) == 0) {
        if (parse_num(item + 6, &it->a) != 0 || it->a < 1)
            return step_err(err, spec, item, "every:N needs an integer N >= 1");
        it->kind = ST_EVERY;
        return DRIFT_OK;
    }
    const char *colon = strchr(item, ':');
    if (!colon) {
        if (parse_num(item, &it->a) != 0) return step_err(err, spec, item, "not a non-negative integer");
        it->kind = ST_ONE;
        return DRIFT_OK;
    }
    if (strchr(colon + 1, ':')) return step_err(err, spec, item, "more than one ':'");
    char a[64], b[64];
    trim_copy(item, colon, a, sizeof a);
    trim_copy(colon + 1, colon + strlen(colon), b, sizeof b);
    if (!a[0] && !b[0]) return step_err(err, spec, item, "a range needs at least one bound");
    it->a = 0;
    if (a[0] && parse_num(a, &it->a) != 0) return step_err(err, spec, item, "range start is not a non-negative integer");
    if (!b[0]) {
        it->kind = ST_FROM;
        return DRIFT_OK;
    }
    if (parse_num(b, &it->b) != 0) return step_err(err, spec, item, "range end is not a non-negative integer");
    if (it->b < it->a) return step_err(err, spec, item, "range end is before its start");
    it->kind = ST_RANGE;
    return DRIFT_OK;
}

int drift_recorder_steps_parse(drift_recorder_steps **out, const char *spec, drift_err *err) {
    if (!out) return drift_err_set(err, DRIFT_E_INTERNAL, "store_steps", "NULL out");
    *out = NULL;
    if (!spec) return drift_err_set(err, DRIFT_E_USAGE, "store_steps", "NULL step spec");
    char buf[256];
    trim_copy(spec, spec + strlen(spec), buf, sizeof buf);
    if (!buf[0])
        return drift_err_set(err, DRIFT_E_USAGE, "store_steps",
                             "empty step spec (use \"all\" to store every step or \"none\" for stats only)");
    drift_recorder_steps *s = drift_calloc(1, sizeof *s);
    if (!s) return drift_err_set(err, DRIFT_E_NOMEM, "store_steps", "out of memory");
    if (strcmp(buf, "none") == 0) {
        *out = s; /* no items: matches nothing */
        return DRIFT_OK;
    }
    size_t cap = 1;
    for (const char *p = spec; *p; p++) cap += *p == ',';
    s->items = drift_calloc(cap, sizeof *s->items);
    if (!s->items) {
        free(s);
        return drift_err_set(err, DRIFT_E_NOMEM, "store_steps", "out of memory");
    }
    const char *p = spec;
    for (;;) {
        const char *e = strchr(p, ',');
        if (!e) e = p + strlen(p);
        char item[128];
        if ((size_t)(e - p) >= sizeof item) {
            char head[40];
            snprintf(head, sizeof head, "%.32s...", p);
            drift_recorder_steps_free(s);
            return step_err(err, spec, head, "item too long");
        }
        trim_copy(p, e, item, sizeof item);
        if (strcmp(item, "none") == 0) {
            drift_recorder_steps_free(s);
            return step_err(err, spec, item, "\"none\" cannot be combined with other items");
        }
        int rc = parse_step_item(spec, item, &s->items[s->n], err);
        if (rc) {
            drift_recorder_steps_free(s);
            return rc;
        }
        s->n++;
        if (!*e) break;
        p = e + 1;
    }
    *out = s;
    return DRIFT_OK;
}

int drift_recorder_steps_match(const drift_recorder_steps *s, int64_t step) {
    if (!s || step < 0) return 0;
    for (size_t i = 0; i < s->n; i++) {
        const step_item *it = &s->items[i];
        switch (it->kind) {
        case ST_ALL: return 1;
        case ST_ONE:
            if (step == it->a) return 1;
            break;
        case ST_RANGE:
            if (step >= it->a && step <= it->b) return 1;
            break;
        case ST_FROM:
            if (step >= it->a) return 1;
            break;
        case ST_EVERY:
            if (step % it->a == 0) return 1;
            break;
        default: break;
        }
    }
    return 0;
}

void drift_recorder_steps_free(drift_recorder_steps *s) {
    if (!s) return;
    free(s->items);
    free(s);
}

/* ======================================================================= */
/* Site globs                                                                */
/* ======================================================================= */
struct drift_recorder_sites {
    char **globs;   /* owned; an exclude keeps its leading '!' */
    size_t n;
    int n_include;
};

int drift_recorder_sites_parse(drift_recorder_sites **out, const char *globs, drift_err *err) {
    if (!out) return drift_err_set(err, DRIFT_E_INTERNAL, "store_sites", "NULL out");
    *out = NULL;
    if (!globs) return drift_err_set(err, DRIFT_E_USAGE, "store_sites", "NULL site glob list");
    char tbuf[16];
    trim_copy(globs, globs + strlen(globs), tbuf, sizeof tbuf);
    drift_recorder_sites *s = drift_calloc(1, sizeof *s);
    if (!s) return drift_err_set(err, DRIFT_E_NOMEM, "store_sites", "out of memory");
    if (strcmp(tbuf, "none") == 0) {
        *out = s;
        return DRIFT_OK;
    }
    size_t cap = 1;
    for (const char *p = globs; *p; p++) cap += *p == ',';
    s->globs = drift_calloc(cap, sizeof *s->globs);
    if (!s->globs) {
        free(s);
        return drift_err_set(err, DRIFT_E_NOMEM, "store_sites", "out of memory");
    }
    const char *p = globs;
    int rc = DRIFT_OK;
    for (;;) {
        const char *e = strchr(p, ',');
        if (!e) e = p + strlen(p);
        char g[DRIFT_TRACE_NAME_MAX + 2];
        if ((size_t)(e - p) >= sizeof g) {
            rc = drift_err_set(err, DRIFT_E_USAGE, "store_sites", "site glob list \"%.64s...\": a glob longer than %d bytes",
                               globs, DRIFT_TRACE_NAME_MAX);
            goto fail;
        }
        trim_copy(p, e, g, sizeof g);
        if (!g[0] || strcmp(g, "!") == 0) {
            rc = drift_err_set(err, DRIFT_E_USAGE, "store_sites",
                               "site glob list \"%s\": empty glob (expected GLOB or !GLOB separated by commas, "
                               "or \"none\")",
                               globs);
            goto fail;
        }
        if (strcmp(g, "none") == 0) {
            rc = drift_err_set(err, DRIFT_E_USAGE, "store_sites",
                               "site glob list \"%s\": \"none\" cannot be combined with globs", globs);
            goto fail;
        }
        s->globs[s->n] = drift_strdup(g);
        if (!s->globs[s->n]) {
            rc = drift_err_set(err, DRIFT_E_NOMEM, "store_sites", "out of memory");
            goto fail;
        }
        if (g[0] != '!') s->n_include++;
        s->n++;
        if (!*e) break;
        p = e + 1;
    }
    *out = s;
    return DRIFT_OK;
fail:
    drift_recorder_sites_free(s);
    return rc;
}

int drift_recorder_sites_match(const drift_recorder_sites *s, const char *site) {
    if (!s || !site || s->n == 0) return 0;
    int inc = s->n_include == 0; /* excludes only: everything else */
    for (size_t i = 0; i < s->n; i++) {
        const char *g = s->globs[i];
        if (g[0] == '!') {
            if (drift_fnmatch(g + 1, site)) return 0;
        } else if (!inc && drift_fnmatch(g, site)) {
            inc = 1;
        }
    }
    return inc;
}

void drift_recorder_sites_free(drift_recorder_sites *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) free(s->globs[i]);
    free(s->globs);
    free(s);
}

/* ======================================================================= */
/* Options                                                                   */
/* ======================================================================= */
static int opt_int(const char *key, const char *v, int64_t lo, int64_t hi, int64_t *out, drift_err *err) {
    errno = 0;
    char *end = NULL;
    long long x = strtoll(v, &end, 10);
    if (!v[0] || errno || !end || *end || x < lo || x > hi)
        return drift_err_set(err, DRIFT_E_USAGE, key, "option %s=%s: expected an integer in %lld..%lld", key, v,
                             (long long)lo, (long long)hi);
    *out = x;
    return DRIFT_OK;
}

static int opt_bool(const char *key, const char *v, int *out, drift_err *err) {
    if (strcmp(v, "1") == 0 || strcmp(v, "true") == 0 || strcmp(v, "yes") == 0 || strcmp(v, "on") == 0) *out = 1;
    else if (strcmp(v, "0") == 0 || strcmp(v, "false") == 0 || strcmp(v, "no") == 0 || strcmp(v, "off") == 0) *out = 0;
    else return drift_err_set(err, DRIFT_E_USAGE, key, "option %s=%s: expected 1 or 0", key, v);
    return DRIFT_OK;
}

static int opt_set(rec_options *o, const char *key, const char *v, drift_err *err) {
    int64_t x = 0;
    int rc = DRIFT_OK;
    if (strcmp(key, "staging_mb") == 0) {
        if ((rc = opt_int(key, v, 1, 1048576, &x, err)) == DRIFT_OK) o->staging_bytes = (size_t)x << 20;
    } else if (strcmp(key, "staging_bytes") == 0) {
        if ((rc = opt_int(key, v, 4096, (int64_t)1 << 40, &x, err)) == DRIFT_OK) o->staging_bytes = (size_t)x;
    } else if (strcmp(key, "max_pending") == 0) {
        if ((rc = opt_int(key, v, 1, 16777216, &x, err)) == DRIFT_OK) o->max_pending = (size_t)x;
    } else if (strcmp(key, "policy") == 0) {
        if (strcmp(v, "block") == 0) o->policy_block = 1;
        else if (strcmp(v, "drop_step") == 0 || strcmp(v, "drop") == 0) o->policy_block = 0;
        else rc = drift_err_set(err, DRIFT_E_USAGE, key, "option policy=%s: expected drop_step or block", v);
    } else if (strcmp(key, "block_timeout_ms") == 0) {
        if ((rc = opt_int(key, v, 0, 600000, &x, err)) == DRIFT_OK) o->block_timeout_ms = (int)x;
    } else if (strcmp(key, "close_timeout_ms") == 0) {
        if ((rc = opt_int(key, v, 0, 86400000, &x, err)) == DRIFT_OK) o->close_timeout_ms = (int)x;
    } else if (strcmp(key, "auto_start") == 0) {
        rc = opt_bool(key, v, &o->auto_start, err);
    } else if (strcmp(key, "quiet") == 0) {
        rc = opt_bool(key, v, &o->quiet, err);
    } else if (strcmp(key, "device_wait") == 0) {
        rc = opt_bool(key, v, &o->device_wait, err);
    } else if (strcmp(key, "compress") == 0) {
        if (strcmp(v, "none") == 0) o->compress = DRIFT_TRACE_COMPRESS_NONE;
        else if (strcmp(v, "deflate") == 0) o->compress = DRIFT_TRACE_COMPRESS_DEFLATE;
        else if (strcmp(v, "blosc") == 0) o->compress = DRIFT_TRACE_COMPRESS_BLOSC;
        else rc = drift_err_set(err, DRIFT_E_USAGE, key, "option compress=%s: expected none, deflate or blosc", v);
    } else if (strcmp(key, "store_steps") == 0) {
        drift_recorder_steps *s = NULL;
        if ((rc = drift_recorder_steps_parse(&s, v, err)) == DRIFT_OK) {
            drift_recorder_steps_free(o->steps);
            o->steps = s;
        }
    } else if (strcmp(key, "store_sites") == 0) {
        drift_recorder_sites *s = NULL;
        if ((rc = drift_recorder_sites_parse(&s, v, err)) == DRIFT_OK) {
            drift_recorder_sites_free(o->sites);
            o->sites = s;
        }
    } else if (strcmp(key, "producer") == 0) {
        if (strlen(v) >= sizeof o->producer)
            rc = drift_err_set(err, DRIFT_E_USAGE, key, "option producer: longer than %zu bytes", sizeof o->producer - 1);
        else snprintf(o->producer, sizeof o->producer, "%s", v);
    } else {
        rc = drift_err_set(err, DRIFT_E_USAGE, key,
                           "unknown recorder option \"%s\" (expected staging_mb, staging_bytes, max_pending, policy, "
                           "block_timeout_ms, store_steps, store_sites, compress, auto_start, close_timeout_ms, quiet, "
                           "device_wait, producer)",
                           key);
    }
    return rc;
}

int drift_rec_options_parse(rec_options *o, const char *text, drift_err *err) {
    memset(o, 0, sizeof *o);
    o->staging_bytes = (size_t)256 << 20;
    o->max_pending = 16384;
    o->block_timeout_ms = 200;
    o->close_timeout_ms = 60000;
    o->auto_start = 1;
    o->device_wait = 1;
    int rc = drift_recorder_steps_parse(&o->steps, "all", err);
    if (!rc) rc = drift_recorder_sites_parse(&o->sites, "*", err);
    if (rc || !text) goto out;
    const char *p = text;
    while (*p) {
        const char *e = p;
        while (*e && *e != ';' && *e != '\n') e++;
        char item[2048];
        if ((size_t)(e - p) >= sizeof item) {
            rc = drift_err_set(err, DRIFT_E_USAGE, "options", "recorder option \"%.40s...\" longer than %zu bytes", p,
                               sizeof item - 1);
            goto out;
        }
        trim_copy(p, e, item, sizeof item);
        if (item[0]) {
            char *eq = strchr(item, '=');
            if (!eq) {
                rc = drift_err_set(err, DRIFT_E_USAGE, "options", "recorder option \"%s\": expected key=value", item);
                goto out;
            }
            *eq = '\0';
            char key[64], val[2048];
            trim_copy(item, eq, key, sizeof key);
            trim_copy(eq + 1, eq + 1 + strlen(eq + 1), val, sizeof val);
            rc = opt_set(o, key, val, err);
            if (rc) goto out;
        }
        p = *e ? e + 1 : e;
    }
out:
    if (rc) drift_rec_options_free(o);
    return rc;
}

void drift_rec_options_free(rec_options *o) {
    if (!o) return;
    drift_recorder_steps_free(o->steps);
    drift_recorder_sites_free(o->sites);
    o->steps = NULL;
    o->sites = NULL;
}
