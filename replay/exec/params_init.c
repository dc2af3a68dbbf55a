/* Seeded parameters, synthetic inputs, Wan RoPE tables (params_init.h). */
#include "replay/exec/params_init.h"

#include "formats/alloc.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay/models/wan_graph.h"

/* ---- PRNG: splitmix64 seeding xoshiro256** -------------------------------- */

typedef struct rng {
    uint64_t s[4];
    int have_spare;
    double spare;
} rng;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

static void rng_seed(rng *r, uint64_t seed, const char *name) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = name; *p; p++) {
        h ^= (unsigned char)*p;
        h *= 1099511628211ull;
    }
    uint64_t x = seed ^ rotl(h, 32);
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
    r->have_spare = 0;
}

/* uniform in [0, 1) with 53 random bits */
static double uniform(rng *r) { return (double)(next_u64(r) >> 11) * 0x1.0p-53; }

static double normal(rng *r) {
    if (r->have_spare) {
        r->have_spare = 0;
        return r->spare;
    }
    double u1 = 1.0 - uniform(r), u2 = uniform(r); /* u1 in (0, 1] */
    double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
    r->spare = rad * sin(th);
    r->have_spare = 1;
    return rad * cos(th);
}

/* ---- parameters -------------------------------------------------------------- */

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

static void init_param(const drift_param_info *p, uint64_t seed, float *dst) {
    rng r;
    rng_seed(&r, seed, p->fqn);
    double mean = 0.0, std = 0.02;
    if (ends_with(p->fqn, "scale_shift_table")) {
        std = 1.0 / sqrt((double)(p->ndim ? p->shape[p->ndim - 1] : 1));
    } else if (ends_with(p->fqn, ".bias") || strcmp(p->fqn, "bias") == 0) {
        std = 0.02;
    } else if (ends_with(p->fqn, "weight") && p->ndim >= 2) {
        int64_t fan_in = 1;
        for (int i = 1; i < p->ndim; i++) fan_in *= p->shape[i];
        std = 1.0 / sqrt((double)fan_in);
    } else if (ends_with(p->fqn, "weight") && p->ndim == 1) {
        mean = 1.0;
        std = 0.1;
    }
    for (int64_t i = 0; i < p->numel; i++) dst[i] = (float)(mean + std * normal(&r));
}

int drift_params_init_seeded(const drift_param_table *t, uint64_t seed, drift_hostset **out, drift_err *err) {
    if (!t || !out) return drift_err_set(err, DRIFT_E_INTERNAL, "params", "drift_params_init_seeded: NULL argument");
    *out = NULL;
    drift_hostset *s = NULL;
    float *buf = NULL;
    int rc = drift_hostset_create(&s, err);
    if (rc) return rc;
    for (size_t i = 0; i < t->n; i++) {
        const drift_param_info *p = &t->params[i];
        float *nb = drift_realloc(buf, (size_t)(p->numel ? p->numel : 1) * sizeof *nb);
        if (!nb) {
            rc = drift_err_set(err, DRIFT_E_NOMEM, p->fqn, "out of memory initialising '%s'", p->fqn);
            goto fail;
        }
        buf = nb;
        init_param(p, seed, buf);
        if ((rc = drift_hostset_add(s, p->fqn, DRIFT_F32, p->ndim, p->shape, buf, NULL, NULL, err))) goto fail;
    }
    drift_free(buf);
    *out = s;
    return DRIFT_OK;
fail:
    drift_free(buf);
    drift_hostset_free(s);
    return rc;
}

/* ---- inputs --------------------------------------------------------------------- */

static int add_random(drift_hostset *s, const char *name, int ndim, const int64_t *shape, uint64_t seed, int uniform1000,
                      drift_err *err) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    float *v = drift_malloc((size_t)n * sizeof *v);
    if (!v) return drift_err_set(err, DRIFT_E_NOMEM, name, "out of memory for input '%s'", name);
    rng r;
    rng_seed(&r, seed, name);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(uniform1000 ? 1000.0 * uniform(&r) : normal(&r));
    int rc = drift_hostset_add(s, name, DRIFT_F32, ndim, shape, v, NULL, NULL, err);
    drift_free(v);
    return rc;
}

int drift_params_init_inputs(const drift_family_config *cfg, uint64_t seed, drift_hostset **out, drift_err *err) {
    if (!cfg || !out) return drift_err_set(err, DRIFT_E_INTERNAL, "inputs", "drift_params_init_inputs: NULL argument");
    *out = NULL;
    drift_hostset *s = NULL;
    int rc = drift_hostset_create(&s, err);
    if (rc) return rc;
    int64_t lat[5] = {cfg->batch, cfg->in_channels, cfg->frames, cfg->height, cfg->width};
    int64_t cond[3] = {cfg->batch, cfg->text_len, cfg->text_dim};
    int64_t ts[1] = {cfg->batch};
    if ((rc = add_random(s, "latents", 5, lat, seed, 0, err)) || (rc = add_random(s, "cond", 3, cond, seed, 0, err)) ||
        (rc = add_random(s, "timestep", 1, ts, seed, 1, err))) {
        drift_hostset_free(s);
        return rc;
    }
    *out = s;
    return DRIFT_OK;
}

/* ---- RoPE ------------------------------------------------------------------------ */

/* One axis of width d (even) at position p, column c (0..d-1): the fp64
 * value (cpu provenance) or the fp32 evaluation (device provenance). */
static void axis_entry_f64(double theta, int d, int64_t p, int c, double *cs, double *sn) {
    int j = c / 2;
    double e = (double)(2 * j) / (double)d;   /* torch.arange(0, d, 2, dtype=float64) / d */
    double freq = 1.0 / pow(theta, e);        /* 1.0 / (theta ** e) */
    double ang = (double)p * freq;            /* torch.outer(pos, freqs) */
    *cs = cos(ang);
    *sn = sin(ang);
}

static void axis_entry_f32(double theta, int d, int64_t p, int c, float *cs, float *sn) {
    int j = c / 2;
    float e = (float)(2 * j) / (float)d;      /* arange(..., dtype=float32) / d */
    float pw = powf((float)theta, e);         /* theta ** e in fp32 */
    float freq = 1.0f / pw;
    float ang = (float)p * freq;
    *cs = cosf(ang);
    *sn = sinf(ang);
}

int drift_params_build_rope(const drift_family_config *cfg, drift_buffer_prov prov, drift_hostset *dst, drift_err *err) {
    if (!cfg || !dst) return drift_err_set(err, DRIFT_E_INTERNAL, "rope", "drift_params_build_rope: NULL argument");
    if (prov == DRIFT_BUF_RECORDED)
        return drift_err_set(err, DRIFT_E_INPUT, "buffer_provenance",
                             "rope provenance 'recorded' takes the tables from the trace's /buffers; nothing to build");
    if (prov != DRIFT_BUF_CPU_FP64 && prov != DRIFT_BUF_DEVICE_FP32)
        return drift_err_set(err, DRIFT_E_INPUT, "buffer_provenance", "unknown rope provenance %d", (int)prov);
    if (cfg->heads < 1 || cfg->dim % cfg->heads || (cfg->dim / cfg->heads) % 2 || cfg->patch[0] < 1 ||
        cfg->patch[1] < 1 || cfg->patch[2] < 1)
        return drift_err_set(err, DRIFT_E_INPUT, cfg->family, "model config: head dim must be a positive even number");
    const int Dh = cfg->dim / cfg->heads;
    const int hw = 2 * (Dh / 6), td = Dh - 2 * hw;
    const int64_t Fp = cfg->frames / cfg->patch[0], Hp = cfg->height / cfg->patch[1], Wp = cfg->width / cfg->patch[2];
    const int64_t L = Fp * Hp * Wp;
    const size_t n = (size_t)L * (size_t)Dh;
    int rc = DRIFT_OK;
    float *c32 = drift_malloc(n * sizeof *c32), *s32 = drift_malloc(n * sizeof *s32);
    double *c64 = prov == DRIFT_BUF_CPU_FP64 ? drift_malloc(n * sizeof *c64) : NULL;
    double *s64 = prov == DRIFT_BUF_CPU_FP64 ? drift_malloc(n * sizeof *s64) : NULL;
    if (!c32 || !s32 || (prov == DRIFT_BUF_CPU_FP64 && (!c64 || !s64))) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, "rope", "out of memory for the RoPE tables");
        goto done;
    }
    /* WanRotaryPosEmbed.forward splits the concatenated buffer by
     * [Dh - 2 (Dh // 3), Dh // 3, Dh // 3] and takes rows f, h, w from the
     * three parts; __init__ built its columns by [t, h, w] = [Dh - 4 (Dh // 6),
     * 2 (Dh // 6), 2 (Dh // 6)]. The two agree when Dh % 6 < 3 (Dh = 128 in
     * every Wan checkpoint); otherwise a column may take its row from one axis
     * and its frequency from another, exactly as diffusers does. */
    const int s1 = Dh / 3, s0 = Dh - 2 * s1;
    for (int64_t f = 0, tok = 0; f < Fp; f++)
        for (int64_t h = 0; h < Hp; h++)
            for (int64_t w = 0; w < Wp; w++, tok++)
                for (int col = 0; col < Dh; col++) {
                    int64_t p = col < s0 ? f : col < s0 + s1 ? h : w; /* forward: which row */
                    int d, c;                                        /* __init__: which axis table */
                    if (col < td) { d = td; c = col; }
                    else if (col < td + hw) { d = hw; c = col - td; }
                    else { d = hw; c = col - td - hw; }
                    size_t at = (size_t)tok * (size_t)Dh + (size_t)col;
                    if (prov == DRIFT_BUF_CPU_FP64) {
                        axis_entry_f64(cfg->rope_theta, d, p, c, &c64[at], &s64[at]);
                        c32[at] = (float)c64[at]; /* .float() */
                        s32[at] = (float)s64[at];
                    } else {
                        axis_entry_f32(cfg->rope_theta, d, p, c, &c32[at], &s32[at]);
                    }
                }
    int64_t shape[2] = {L, Dh};
    if ((rc = drift_hostset_add(dst, DRIFT_WAN_ROPE_COS, DRIFT_F32, 2, shape, c32, c64, NULL, err))) goto done;
    rc = drift_hostset_add(dst, DRIFT_WAN_ROPE_SIN, DRIFT_F32, 2, shape, s32, s64, NULL, err);
done:
    drift_free(c32);
    drift_free(s32);
    drift_free(c64);
    drift_free(s64);
    return rc;
}

int drift_params_init_buffers(const drift_family_config *cfg, drift_buffer_prov prov, drift_hostset **out,
                              drift_err *err) {
    if (!out) return drift_err_set(err, DRIFT_E_INTERNAL, "buffers", "drift_params_init_buffers: out is NULL");
    *out = NULL;
    drift_hostset *s = NULL;
    int rc = drift_hostset_create(&s, err);
    if (rc) return rc;
    if ((rc = drift_params_build_rope(cfg, prov, s, err))) {
        drift_hostset_free(s);
        return rc;
    }
    *out = s;
    return DRIFT_OK;
}
