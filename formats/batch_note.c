/* Batch-composition notes (batch_note.h). */
#include "formats/batch_note.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const CFG_NAMES[] = {"none", "split", "joined"};

const char *drift_batch_cfg_name(drift_batch_cfg c) {
    return (int)c >= 0 && (int)c < 3 ? CFG_NAMES[c] : "?";
}

int drift_batch_cfg_parse(const char *s) {
    for (int i = 0; s && i < 3; i++)
        if (strcmp(s, CFG_NAMES[i]) == 0) return i;
    return -1;
}

int drift_batch_note_is(const char *text) {
    return text && strncmp(text, DRIFT_BATCH_NOTE_PREFIX, strlen(DRIFT_BATCH_NOTE_PREFIX)) == 0;
}

int drift_batch_note_format(const drift_batch_composition *c, char *buf, size_t bufsz, drift_err *err) {
    if (!c || !buf || bufsz < 1) return drift_err_set(err, DRIFT_E_INPUT, "batch composition", "no composition or buffer");
    if (c->n < 1 || c->n > DRIFT_BATCH_NOTE_MAX_SAMPLES)
        return drift_err_set(err, DRIFT_E_INPUT, "batch composition", "field 'samples': %d positions, expected 1..%d",
                             c->n, DRIFT_BATCH_NOTE_MAX_SAMPLES);
    if (c->micro_batch < 0)
        return drift_err_set(err, DRIFT_E_INPUT, "batch composition", "field 'micro': %d, expected >= 0",
                             (int)c->micro_batch);
    if ((int)c->cfg < 0 || (int)c->cfg > 2)
        return drift_err_set(err, DRIFT_E_INPUT, "batch composition", "field 'cfg': %d, expected none, split or joined",
                             (int)c->cfg);
    size_t len = (size_t)snprintf(buf, bufsz, "%smicro=%d cfg=%s samples=", DRIFT_BATCH_NOTE_PREFIX,
                                  (int)c->micro_batch, CFG_NAMES[c->cfg]);
    for (int i = 0; i < c->n && len < bufsz; i++) {
        if (c->samples[i] < 0)
            return drift_err_set(err, DRIFT_E_INPUT, "batch composition", "field 'samples': position %d holds %lld, "
                                 "expected a sample id >= 0", i, (long long)c->samples[i]);
        len += (size_t)snprintf(buf + len, bufsz - len, "%s%lld", i ? "," : "", (long long)c->samples[i]);
    }
    if (len >= bufsz)
        return drift_err_set(err, DRIFT_E_INPUT, "batch composition", "the note needs %zu bytes, the buffer has %zu",
                             len + 1, bufsz);
    return DRIFT_OK;
}

/* The value of " key=" in text (up to the next space) into v; 0 if absent. */
static int field(const char *text, const char *key, char *v, size_t vsz) {
    char pat[16];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(text, pat);
    if (!p) return 0;
    p += strlen(pat);
    size_t n = strcspn(p, " ");
    if (n >= vsz) n = vsz - 1;
    memcpy(v, p, n);
    v[n] = '\0';
    return 1;
}

int drift_batch_note_parse(const char *text, drift_batch_composition *out, drift_err *err) {
    memset(out, 0, sizeof *out);
    if (!drift_batch_note_is(text))
        return drift_err_set(err, DRIFT_E_INPUT, "batch composition", "note does not start with '%s'",
                             DRIFT_BATCH_NOTE_PREFIX);
    const char *t = text + strlen(DRIFT_BATCH_NOTE_PREFIX) - 1; /* keep the space before the first key */
    char v[256];
    if (!field(t, "micro", v, sizeof v))
        return drift_err_set(err, DRIFT_E_INPUT, "batch composition", "field 'micro' is missing");
    char *end;
    errno = 0;
    long mb = strtol(v, &end, 10);
    if (errno || *end || end == v || mb < 0 || mb > INT32_MAX)
        return drift_err_set(err, DRIFT_E_INPUT, "batch composition", "field 'micro': '%s', expected an integer >= 0", v);
    out->micro_batch = (int32_t)mb;
    if (!field(t, "cfg", v, sizeof v))
        return drift_err_set(err, DRIFT_E_INPUT, "batch composition", "field 'cfg' is missing");
    int c = drift_batch_cfg_parse(v);
    if (c < 0)
        return drift_err_set(err, DRIFT_E_INPUT, "batch composition", "field 'cfg': '%s', expected none, split or joined", v);
    out->cfg = (drift_batch_cfg)c;
    if (!field(t, "samples", v, sizeof v))
        return drift_err_set(err, DRIFT_E_INPUT, "batch composition", "field 'samples' is missing");
    const char *p = v;
    while (*p) {
        if (out->n == DRIFT_BATCH_NOTE_MAX_SAMPLES)
            return drift_err_set(err, DRIFT_E_INPUT, "batch composition", "field 'samples': more than %d positions",
                                 DRIFT_BATCH_NOTE_MAX_SAMPLES);
        errno = 0;
        long long s = strtoll(p, &end, 10);
        if (errno || end == p || s < 0 || (*end && *end != ','))
            return drift_err_set(err, DRIFT_E_INPUT, "batch composition",
                                 "field 'samples': '%s', expected comma-separated sample ids >= 0", v);
        out->samples[out->n++] = (int64_t)s;
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return drift_err_set(err, DRIFT_E_INPUT, "batch composition", "field 'samples': '%s' ends with a comma", v);
    }
    if (out->n == 0) return drift_err_set(err, DRIFT_E_INPUT, "batch composition", "field 'samples' is empty");
    return DRIFT_OK;
}
