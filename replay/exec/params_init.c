/* Seeded parameters, synthetic inputs, Wan RoPE tables (params_init.h). */
#include "replay/exec/params_init.h"

#include "formats/alloc.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static void init_scale(const drift_param_info *p, double *mean_out, double *std_out) {
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
    *mean_out = mean;
    *std_out = std;
}

void drift_params_init_one(const drift_param_info *p, uint64_t seed, float *dst) {
    rng r;
    rng_seed(&r, seed, p->fqn);
    double mean, std;
    init_scale(p, &mean, &std);
    for (int64_t i = 0; i < p->numel; i++) dst[i] = (float)(mean + std * normal(&r));
}

/* ---- jump-ahead: the same streams, cut into chunks ----------------------------- */
/* xoshiro256**'s state transition is linear over GF(2): T^CHUNK (as the
 * images of the 256 unit states) moves a stream CHUNK draws ahead. Output i
 * of a tensor uses draws 2(i/2) and 2(i/2)+1 (Box-Muller pairs), so a chunk
 * starting at an even output c starts at draw c with no spare: chunk k's
 * state is (T^CHUNK)^k of the tensor's seeded state, and every chunk can be
 * filled on its own thread with exactly the values of the sequential stream. */
#define SEED_CHUNK ((int64_t)1 << 16) /* outputs (= draws) per chunk; even */

typedef struct gf2 {
    uint64_t col[256][4]; /* col[j]: the image of the state with only bit j set */
} gf2;

static void state_step(uint64_t *s) {
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
}

static void gf2_apply(const gf2 *m, const uint64_t *v, uint64_t *out) {
    uint64_t o[4] = {0, 0, 0, 0};
    for (int j = 0; j < 256; j++)
        if ((v[j >> 6] >> (j & 63)) & 1u)
            for (int w = 0; w < 4; w++) o[w] ^= m->col[j][w];
    memcpy(out, o, sizeof o);
}

static gf2 g_jump;
static pthread_once_t g_jump_once = PTHREAD_ONCE_INIT;

static void jump_build(void) {
    static gf2 t, sq; /* T, then squared 16 times: T^(2^16) */
    for (int j = 0; j < 256; j++) {
        memset(t.col[j], 0, sizeof t.col[j]);
        t.col[j][j >> 6] = (uint64_t)1 << (j & 63);
        state_step(t.col[j]);
    }
    for (int k = 0; (int64_t)1 << k < SEED_CHUNK; k++) {
        for (int j = 0; j < 256; j++) gf2_apply(&t, t.col[j], sq.col[j]); /* (T o T) e_j */
        t = sq;
    }
    g_jump = t;
}

typedef struct seed_chunk {
    size_t param;
    int64_t first, count;
    uint64_t state[4];
} seed_chunk;

static void fill_chunk(const drift_param_info *p, const seed_chunk *c, float *dst) {
    rng r;
    memcpy(r.s, c->state, sizeof r.s);
    r.have_spare = 0;
    double mean, std;
    init_scale(p, &mean, &std);
    for (int64_t i = 0; i < c->count; i++) dst[c->first + i] = (float)(mean + std * normal(&r));
}

int drift_params_seed_threads(void) {
    const char *e = getenv("DRIFT_SEED_THREADS");
    if (e && *e) {
        char *end = NULL;
        long v = strtol(e, &end, 10);
        if (end && !*end && v >= 1 && v <= DRIFT_SEED_MAX_THREADS) return (int)v;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

/* Chunks of every tensor's stream are dealt to threads from a shared
 * counter: any thread count gives the same bits. */
typedef struct seed_pool {
    const drift_param_table *t;
    drift_host_tensor **dst;     /* per parameter, in table order */
    seed_chunk *chunks;
    size_t n_chunks;
    atomic_size_t next;
} seed_pool;

static void *seed_thread(void *arg) {
    seed_pool *p = arg;
    for (;;) {
        size_t k = atomic_fetch_add(&p->next, 1);
        if (k >= p->n_chunks) break;
        const seed_chunk *c = &p->chunks[k];
        fill_chunk(&p->t->params[c->param], c, p->dst[c->param]->f32);
    }
    return NULL;
}

int drift_params_init_seeded_threads(const drift_param_table *t, uint64_t seed, int threads, drift_hostset **out,
                                     drift_err *err) {
    if (!t || !out) return drift_err_set(err, DRIFT_E_INTERNAL, "params", "drift_params_init_seeded: NULL argument");
    *out = NULL;
    if (threads < 1) threads = drift_params_seed_threads();
    if (threads > DRIFT_SEED_MAX_THREADS) threads = DRIFT_SEED_MAX_THREADS;
    drift_hostset *s = NULL;
    seed_pool p;
    memset(&p, 0, sizeof p);
    int rc = drift_hostset_create(&s, err);
    if (rc) return rc;
    p.t = t;
    p.dst = drift_calloc(t->n ? t->n : 1, sizeof *p.dst);
    size_t n_chunks = 0;
    for (size_t i = 0; i < t->n; i++) n_chunks += (size_t)((t->params[i].numel + SEED_CHUNK - 1) / SEED_CHUNK);
    p.chunks = drift_calloc(n_chunks ? n_chunks : 1, sizeof *p.chunks);
    if (!p.dst || !p.chunks) {
        rc = drift_err_set(err, DRIFT_E_NOMEM, "params", "out of memory seeding %zu parameters", t->n);
        goto done;
    }
    pthread_once(&g_jump_once, jump_build);
    for (size_t i = 0; i < t->n; i++) {
        const drift_param_info *pi = &t->params[i];
        if ((rc = drift_hostset_add_alloc(s, pi->fqn, DRIFT_F32, pi->ndim, pi->shape, &p.dst[i], err))) goto done;
        rng r;
        rng_seed(&r, seed, pi->fqn);
        for (int64_t first = 0; first < pi->numel; first += SEED_CHUNK) {
            seed_chunk *c = &p.chunks[p.n_chunks++];
            c->param = i;
            c->first = first;
            c->count = pi->numel - first < SEED_CHUNK ? pi->numel - first : SEED_CHUNK;
            memcpy(c->state, r.s, sizeof c->state);
            gf2_apply(&g_jump, r.s, r.s); /* the next chunk's start */
        }
    }
    atomic_init(&p.next, 0);
    pthread_t tid[DRIFT_SEED_MAX_THREADS];
    int started = 0;
    for (int k = 1; k < threads && (size_t)k < p.n_chunks; k++) {
        if (pthread_create(&tid[started], NULL, seed_thread, &p) != 0) break; /* fewer threads: same values */
        started++;
    }
    seed_thread(&p);
    for (int k = 0; k < started; k++) pthread_join(tid[k], NULL);
done:
    drift_free(p.dst);
    drift_free(p.chunks);
    if (rc) {
        drift_hostset_free(s);
        return rc;
    }
    *out = s;
    return DRIFT_OK;
}

int drift_params_init_seeded(const drift_param_table *t, uint64_t seed, drift_hostset **out, drift_err *err) {
    return drift_params_init_seeded_threads(t, seed, 0, out, err);
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
