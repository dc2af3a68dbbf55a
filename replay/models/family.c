#include "replay/models/family.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Hard bounds on any size a spec may ask for: keeps every tensor of the
 * model and its activations well below 2^40 elements. */
#define MAX_LAYERS 512
#define MAX_WIDTH (1 << 17)
#define MAX_GRID 4096

static void set_tiny(drift_family_config *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->family, sizeof c->family, "tiny-dit");
    c->layers = 2; c->dim = 64; c->heads = 4; c->ffn_dim = 128;
    c->in_channels = 4; c->out_channels = 4; c->text_dim = 32; c->text_len = 8;
    c->freq_dim = 32; c->patch[0] = 1; c->patch[1] = 2; c->patch[2] = 2;
    c->frames = 2; c->height = 8; c->width = 8; c->batch = 1;
    c->eps = 1e-6; c->rope_theta = 10000.0;
}

/* Wan2.2-TI2V-5B widths; a small latent grid so that a default replay is cheap. */
static void set_wan22(drift_family_config *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->family, sizeof c->family, "wan2.2");
    c->layers = 30; c->dim = 3072; c->heads = 24; c->ffn_dim = 14336;
    c->in_channels = 48; c->out_channels = 48; c->text_dim = 4096; c->text_len = 32;
    c->freq_dim = 256; c->patch[0] = 1; c->patch[1] = 2; c->patch[2] = 2;
    c->frames = 1; c->height = 16; c->width = 16; c->batch = 1;
    c->eps = 1e-6; c->rope_theta = 10000.0;
}

/* wan2.2 with its dim changed: the widths not given follow it in Wan's
 * proportions (ffn_dim 14336/3072, text_dim 4096/3072 of dim), so a small
 * dim gives a small model; heads stay 24 unless dim is no multiple of 24
 * with an even head dim, then Wan's head dim 128 (or 64, 32, 16, 8). */
static void scale_wan22(drift_family_config *c, int given_ffn, int given_text, int given_heads) {
    if (!given_ffn) c->ffn_dim = (int)(((long long)c->dim * 14336 + 1536) / 3072);
    if (!given_text) c->text_dim = (int)(((long long)c->dim * 4096 + 1536) / 3072);
    if (!given_heads && (c->dim % c->heads != 0 || (c->dim / c->heads) % 2 != 0))
        for (int hd = 128; hd >= 8; hd /= 2)
            if (c->dim % hd == 0) {
                c->heads = c->dim / hd;
                break;
            }
}

static int parse_int(const char *spec, const char *key, const char *val, int lo, int hi, int *out,
                     drift_err *err) {
    char *end = NULL;
    errno = 0;
    long v = strtol(val, &end, 10);
    if (errno || end == val || *end != '\0' || v < lo || v > hi)
        return drift_err_set(err, DRIFT_E_USAGE, spec, "model key '%s': expected an integer in [%d, %d], got '%s'",
                             key, lo, hi, val);
    *out = (int)v;
    return DRIFT_OK;
}

static int parse_double(const char *spec, const char *key, const char *val, double lo, double hi, double *out,
                        drift_err *err) {
    char *end = NULL;
    errno = 0;
    double v = strtod(val, &end);
    if (errno || end == val || *end != '\0' || !(v >= lo && v <= hi))
        return drift_err_set(err, DRIFT_E_USAGE, spec, "model key '%s': expected a number in [%g, %g], got '%s'",
                             key, lo, hi, val);
    *out = v;
    return DRIFT_OK;
}

/* " (did you mean 'x'?)" for the candidate within edit distance 2 of word
 * (a typo), written into buf; "" when none is that close. */
static const char *suggest(const char *word, const char *const *cand, size_t n, char *buf, size_t sz) {
    size_t best = 3, lw = strlen(word);
    const char *pick = NULL;
    for (size_t k = 0; k < n && lw < 64; k++) {
        size_t lc = strlen(cand[k]), row[65];
        if (lc >= 64) continue;
        for (size_t j = 0; j <= lc; j++) row[j] = j;
        for (size_t i = 1; i <= lw; i++) { /* one row of the Levenshtein table at a time */
            size_t diag = row[0];
            row[0] = i;
            for (size_t j = 1; j <= lc; j++) {
                size_t up = row[j], v = diag + (word[i - 1] != cand[k][j - 1]);
                if (up + 1 < v) v = up + 1;
                if (row[j - 1] + 1 < v) v = row[j - 1] + 1;
                diag = up;
                row[j] = v;
            }
        }
        if (row[lc] < best) best = row[lc], pick = cand[k];
    }
    if (pick) snprintf(buf, sz, " (did you mean '%s'?)", pick);
    else if (sz) buf[0] = '\0';
    return buf;
}

static const char *const KEYS[] = {"layers", "dim",    "heads",  "ffn_dim", "in_channels", "out_channels",
                                   "text_dim", "text_len", "freq_dim", "frames", "height", "width",
                                   "batch",  "patch",  "eps",    "rope_theta"};

static int apply_kv(drift_family_config *c, const char *spec, const char *key, const char *val, drift_err *err) {
    struct { const char *name; int *field; int lo, hi; } ints[] = {
        {"layers", &c->layers, 0, MAX_LAYERS},     {"dim", &c->dim, 2, MAX_WIDTH},
        {"heads", &c->heads, 1, 1024},             {"ffn_dim", &c->ffn_dim, 1, MAX_WIDTH * 4},
        {"in_channels", &c->in_channels, 1, 4096}, {"out_channels", &c->out_channels, 1, 4096},
        {"text_dim", &c->text_dim, 1, MAX_WIDTH},  {"text_len", &c->text_len, 1, MAX_GRID},
        {"freq_dim", &c->freq_dim, 2, MAX_WIDTH},  {"frames", &c->frames, 1, MAX_GRID},
        {"height", &c->height, 1, MAX_GRID},       {"width", &c->width, 1, MAX_GRID},
        {"batch", &c->batch, 1, 1024},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (strcmp(key, ints[i].name) == 0) return parse_int(spec, key, val, ints[i].lo, ints[i].hi, ints[i].field, err);
    if (strcmp(key, "eps") == 0) return parse_double(spec, key, val, 0.0, 1.0, &c->eps, err);
    if (strcmp(key, "rope_theta") == 0) return parse_double(spec, key, val, 1.0, 1e12, &c->rope_theta, err);
    if (strcmp(key, "patch") == 0) {
        int p[3];
        char extra;
        if (sscanf(val, "%dx%dx%d%c", &p[0], &p[1], &p[2], &extra) != 3 || p[0] < 1 || p[1] < 1 || p[2] < 1 ||
            p[0] > 64 || p[1] > 64 || p[2] > 64)
            return drift_err_set(err, DRIFT_E_USAGE, spec, "model key 'patch': expected PFxPHxPW (e.g. 1x2x2), got '%s'", val);
        memcpy(c->patch, p, sizeof p);
        return DRIFT_OK;
    }
    char dym[96];
    return drift_err_set(err, DRIFT_E_USAGE, spec,
                         "unknown model key '%s' (expected one of layers, dim, heads, ffn_dim, in_channels, "
                         "out_channels, text_dim, text_len, freq_dim, frames, height, width, batch, patch, eps, rope_theta)%s",
                         key, suggest(key, KEYS, sizeof KEYS / sizeof KEYS[0], dym, sizeof dym));
}

static int validate(const drift_family_config *c, const char *spec, drift_err *err) {
    if (c->dim % c->heads != 0)
        return drift_err_set(err, DRIFT_E_USAGE, spec, "dim (%d) must be a multiple of heads (%d)", c->dim, c->heads);
    int hd = c->dim / c->heads;
    if (hd % 2 != 0 || hd < 6)
        return drift_err_set(err, DRIFT_E_USAGE, spec, "head dim dim/heads = %d must be even and >= 6 (RoPE over 3 axes)", hd);
    if (c->freq_dim % 2 != 0)
        return drift_err_set(err, DRIFT_E_USAGE, spec, "freq_dim (%d) must be even", c->freq_dim);
    if (c->frames % c->patch[0] || c->height % c->patch[1] || c->width % c->patch[2])
        return drift_err_set(err, DRIFT_E_USAGE, spec, "latent grid %dx%dx%d is not divisible by patch %dx%dx%d",
                             c->frames, c->height, c->width, c->patch[0], c->patch[1], c->patch[2]);
    /* Largest activations: tokens x max(ffn_dim, dim*6) per sample, and attention's L x L scores. */
    long long tokens = drift_family_tokens(c);
    long long widest = c->ffn_dim > 6LL * c->dim ? c->ffn_dim : 6LL * c->dim;
    if (tokens * widest * c->batch > (1LL << 40) || tokens * tokens * c->heads * (long long)c->batch > (1LL << 40))
        return drift_err_set(err, DRIFT_E_USAGE, spec, "model too large: %lld tokens x width %lld exceeds the 2^40-element limit",
                             tokens, widest);
    return DRIFT_OK;
}

int drift_family_parse(const char *spec, drift_family_config *cfg, drift_err *err) {
    if (!spec || !*spec) return drift_err_set(err, DRIFT_E_USAGE, "--model", "empty model spec (expected FAMILY[:K=V,...])");
    char buf[1024];
    if (strlen(spec) >= sizeof buf) return drift_err_set(err, DRIFT_E_USAGE, "--model", "model spec too long");
    snprintf(buf, sizeof buf, "%s", spec);
    char *colon = strchr(buf, ':');
    if (colon) *colon = '\0';
    drift_family_config c;
    if (strcmp(buf, "tiny-dit") == 0) {
        set_tiny(&c);
    } else if (strcmp(buf, "wan2.2") == 0 || strcmp(buf, "wan") == 0) {
        set_wan22(&c);
    } else {
        static const char *const FAMILIES[] = {"tiny-dit", "wan2.2"};
        char dym[96];
        return drift_err_set(err, DRIFT_E_USAGE, spec,
                             "unknown model family '%.200s' (expected tiny-dit, wan2.2 or graph:FILE.json, a captured graph)%s",
                             buf, suggest(buf, FAMILIES, 2, dym, sizeof dym));
    }
    int given_ffn = 0, given_text = 0, given_heads = 0, given_dim = 0;
    if (colon) {
        char *save = NULL;
        for (char *kv = strtok_r(colon + 1, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(kv, '=');
            if (!eq || eq == kv)
                return drift_err_set(err, DRIFT_E_USAGE, spec, "expected K=V in model spec, got '%s'", kv);
            *eq = '\0';
            int rc = apply_kv(&c, spec, kv, eq + 1, err);
            if (rc) return rc;
            given_ffn |= strcmp(kv, "ffn_dim") == 0;
            given_text |= strcmp(kv, "text_dim") == 0;
            given_heads |= strcmp(kv, "heads") == 0;
            given_dim |= strcmp(kv, "dim") == 0;
        }
    }
    if (given_dim && strcmp(c.family, "wan2.2") == 0) {
        scale_wan22(&c, given_ffn, given_text, given_heads);
        /* the derived widths obey the limits of the keys they stand for (the canonical spec names them) */
        if (c.ffn_dim > MAX_WIDTH * 4 || c.text_dim > MAX_WIDTH || c.heads > 1024)
            return drift_err_set(err, DRIFT_E_USAGE, spec,
                                 "dim=%d: the widths it implies (ffn_dim %d, text_dim %d, heads %d) exceed the limits "
                                 "(%d, %d, 1024): give ffn_dim, text_dim and heads", c.dim, c.ffn_dim, c.text_dim,
                                 c.heads, MAX_WIDTH * 4, MAX_WIDTH);
    }
    int rc = validate(&c, spec, err);
    if (rc) return rc;
    *cfg = c;
    return DRIFT_OK;
}

void drift_family_format(const drift_family_config *c, char *buf, unsigned long bufsz) {
    snprintf(buf, bufsz,
             "%s:layers=%d,dim=%d,heads=%d,ffn_dim=%d,in_channels=%d,out_channels=%d,text_dim=%d,text_len=%d,"
             "freq_dim=%d,patch=%dx%dx%d,frames=%d,height=%d,width=%d,batch=%d,eps=%g,rope_theta=%g",
             c->family, c->layers, c->dim, c->heads, c->ffn_dim, c->in_channels, c->out_channels, c->text_dim,
             c->text_len, c->freq_dim, c->patch[0], c->patch[1], c->patch[2], c->frames, c->height, c->width,
             c->batch, c->eps, c->rope_theta);
}

long drift_family_tokens(const drift_family_config *c) {
    return (long)(c->frames / c->patch[0]) * (c->height / c->patch[1]) * (c->width / c->patch[2]);
}

/* Adds one parameter; shape given as up to 5 dims, 0-terminated. */
static int add(drift_param_table *t, const char *fqn, int wrap, int64_t d0, int64_t d1, int64_t d2, int64_t d3,
               int64_t d4, drift_err *err) {
    int64_t s[5] = {d0, d1, d2, d3, d4};
    int nd = 0;
    while (nd < 5 && s[nd] > 0) nd++;
    return drift_param_table_add(t, fqn, nd, s, wrap, err);
}

static int add_linear(drift_param_table *t, const char *prefix, int wrap, int64_t out, int64_t in, drift_err *err) {
    char name[DRIFT_MAX_FQN];
    snprintf(name, sizeof name, "%s.weight", prefix);
    int rc = add(t, name, wrap, out, in, 0, 0, 0, err);
    if (rc) return rc;
    snprintf(name, sizeof name, "%s.bias", prefix);
    return add(t, name, wrap, out, 0, 0, 0, 0, err);
}

static int add_attention(drift_param_table *t, const char *prefix, int wrap, int64_t dim, drift_err *err) {
    static const char *lin[] = {"to_q", "to_k", "to_v", "to_out.0"};
    char name[DRIFT_MAX_FQN];
    for (size_t i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "%s.%s", prefix, lin[i]);
        int rc = add_linear(t, name, wrap, dim, dim, err);
        if (rc) return rc;
    }
    snprintf(name, sizeof name, "%s.norm_q.weight", prefix);
    int rc = add(t, name, wrap, dim, 0, 0, 0, 0, err);
    if (rc) return rc;
    snprintf(name, sizeof name, "%s.norm_k.weight", prefix);
    return add(t, name, wrap, dim, 0, 0, 0, 0, err);
}

int drift_family_param_table(const drift_family_config *c, drift_param_table *t, drift_err *err) {
    int rc;
    char name[DRIFT_MAX_FQN];
    const int64_t dim = c->dim;
    /* Wraps first (blocks.N, in call order); the root is implicit. */
    for (int i = 0; i < c->layers; i++) {
        snprintf(name, sizeof name, "blocks.%d", i);
        if ((rc = drift_param_table_add_wrap(t, name, NULL, err))) return rc;
    }
    /* named_parameters() order follows module registration in diffusers' __init__. */
    if ((rc = add(t, "patch_embedding.weight", -1, dim, c->in_channels, c->patch[0], c->patch[1], c->patch[2], err))) return rc;
    if ((rc = add(t, "patch_embedding.bias", -1, dim, 0, 0, 0, 0, err))) return rc;
    if ((rc = add_linear(t, "condition_embedder.time_embedder.linear_1", -1, dim, c->freq_dim, err))) return rc;
    if ((rc = add_linear(t, "condition_embedder.time_embedder.linear_2", -1, dim, dim, err))) return rc;
    if ((rc = add_linear(t, "condition_embedder.time_proj", -1, 6 * dim, dim, err))) return rc;
    if ((rc = add_linear(t, "condition_embedder.text_embedder.linear_1", -1, dim, c->text_dim, err))) return rc;
    if ((rc = add_linear(t, "condition_embedder.text_embedder.linear_2", -1, dim, dim, err))) return rc;
    for (int i = 0; i < c->layers; i++) {
        char p[DRIFT_MAX_FQN];
        snprintf(p, sizeof p, "blocks.%d.attn1", i);
        if ((rc = add_attention(t, p, i, dim, err))) return rc;
        snprintf(p, sizeof p, "blocks.%d.attn2", i);
        if ((rc = add_attention(t, p, i, dim, err))) return rc;
        snprintf(p, sizeof p, "blocks.%d.norm2.weight", i);
        if ((rc = add(t, p, i, dim, 0, 0, 0, 0, err))) return rc;
        snprintf(p, sizeof p, "blocks.%d.norm2.bias", i);
        if ((rc = add(t, p, i, dim, 0, 0, 0, 0, err))) return rc;
        snprintf(p, sizeof p, "blocks.%d.ffn.net.0.proj", i);
        if ((rc = add_linear(t, p, i, c->ffn_dim, dim, err))) return rc;
        snprintf(p, sizeof p, "blocks.%d.ffn.net.2", i);
        if ((rc = add_linear(t, p, i, dim, c->ffn_dim, err))) return rc;
        snprintf(p, sizeof p, "blocks.%d.scale_shift_table", i);
        if ((rc = add(t, p, i, 1, 6, dim, 0, 0, err))) return rc;
    }
    int64_t patch_vol = (int64_t)c->patch[0] * c->patch[1] * c->patch[2];
    if ((rc = add_linear(t, "proj_out", -1, c->out_channels * patch_vol, dim, err))) return rc;
    return add(t, "scale_shift_table", -1, 1, 2, dim, 0, 0, err);
}
