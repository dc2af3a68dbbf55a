/* The cpu backend's ops: fast, exact dtype emulation (kernels/backend.h).
 *
 * Storage: float, every value exactly representable in the tensor's dtype.
 * Each op computes in fp32 in the order written below (no FMA outside the
 * GEMM and FlashAttention-2's attention, cpu_attn_fa2.c: the build is ISO
 * C, where GCC does not contract, and no fma() is called here) and rounds
 * once to op->out with drift_round_to / drift_dtype_round_n. GEMMs go to
 * drift's own fp32 GEMM (cpu_gemm.h): bf16 and fp16 operands are exact in
 * fp32 and so are their products, so its fp32 accumulation is the "fp32 accumulate" of the contract, in one documented
 * order per output element that depends on K alone (fmaf chains over K
 * blocks of 256, block sums added in order): not on M, the batch, the
 * thread count or the processor.
 *
 * Operand dtype of GEMMs (LINEAR, ATTENTION's q, k, v): an input whose dtype
 * is not op->compute is first rounded to op->compute (when compute is bf16
 * or fp16), as autocast's cast would. When the executor has inserted the
 * casts (the contract) this is a no-op and no copy is made.
 *
 * Threading: every loop below splits by output element or row (the GEMM by
 * output tile); an element is always computed by one thread in one order, so
 * results do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "kernels/aten_internal.h"
#include "kernels/cpu/cpu_gemm.h"
#include "kernels/cpu/host_internal.h"
#include "kernels/gemm_forms.h"

#define BLK 1024                    /* elements computed before their rounding pass */
#define GRAIN ((int64_t)1 << 15)    /* elements per thread below which we stay serial */

static inline float *fd(const drift_tensor *t) { return (float *)t->data; }

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Rows per parallel range so that one range holds at least GRAIN elements. */
static int64_t row_grain(int64_t row_len) {
    if (row_len < 1) row_len = 1;
    int64_t g = GRAIN / row_len;
    return g < 1 ? 1 : g;
}

static int nomem(drift_err *err, const drift_op *op) {
    return drift_err_set(err, DRIFT_E_NOMEM, "op", "%s: out of memory for a scratch buffer", drift_op_name(op->kind));
}

/* ------------------------------------------------------------------------ */
/* Unary elementwise: CAST, AFFINE, SILU, GELU_TANH                          */

/* GELU-tanh constants as PyTorch's kernels form them (opmath fp32):
 * kBeta = M_SQRT2 * M_2_SQRTPI * 0.5 (= sqrt(2/pi)) rounded to fp32,
 * kKappa = 0.044715f. */
static const float k_gelu_beta = (float)(1.41421356237309504880 * 1.12837916709551257390 * 0.5);
static const float k_gelu_kappa = 0.044715f;

typedef struct un_job {
    drift_op_kind kind;
    float alpha, beta;
    const float *x;
    float *y;
    drift_dtype dt;
} un_job;

static void unary_block(const un_job *j, const float *x, float *y, int64_t n) {
    switch (j->kind) {
    case DRIFT_OP_AFFINE: {
        const float al = j->alpha, be = j->beta;
        for (int64_t i = 0; i < n; i++) {
            float t = x[i] * al; /* t = x * alpha */
            y[i] = t + be;       /* y = t + beta   */
        }
        break;
    }
    case DRIFT_OP_SILU:
        for (int64_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
        break;
    case DRIFT_OP_GELU_TANH:
        for (int64_t i = 0; i < n; i++) {
            float v = x[i];
            float cube = v * v * v;                                  /* (x*x)*x */
            float inner = k_gelu_beta * (v + k_gelu_kappa * cube);   /* kBeta*(x + kKappa*x^3) */
            y[i] = 0.5f * v * (1.0f + tanhf(inner));                 /* (0.5*x)*(1 + tanh) */
        }
        break;
    default: /* CAST */
        memcpy(y, x, (size_t)n * sizeof(float));
        break;
    }
}

static void unary_range(void *p, int64_t b, int64_t e) {
    const un_job *j = p;
    for (int64_t s = b; s < e; s += BLK) {
        int64_t n = min64(BLK, e - s);
        unary_block(j, j->x + s, j->y + s, n);
        drift_dtype_round_n(j->y + s, (size_t)n, j->dt);
    }
}

static int run_unary(int nt, const drift_op *op, const drift_tensor *x, drift_tensor *out) {
    un_job j = {op->kind, op->alpha, op->beta, fd(x), fd(out), op->out};
    int64_t grain = op->kind == DRIFT_OP_CAST || op->kind == DRIFT_OP_AFFINE ? GRAIN * 4 : GRAIN / 8;
    drift_host_parallel_for(nt, out->numel, grain, unary_range, &j);
    return DRIFT_OK;
}

/* ------------------------------------------------------------------------ */
/* Binary elementwise with broadcasting: ADD, SUB, MUL                        */

typedef struct bin_job {
    drift_op_kind kind;
    const float *a, *b;
    float *y;
    drift_bcast bc;
    drift_dtype dt;
} bin_job;

#define BIN_LOOP(EXPR)                                                                  \
    do {                                                                                \
        if (ia == 1 && ib == 1)                                                         \
            for (int64_t i = 0; i < n; i++) { float u = a[i], v = b[i]; y[i] = EXPR; }  \
        else if (ia == 1 && ib == 0)                                                    \
            for (int64_t i = 0; i < n; i++) { float u = a[i], v = b[0]; y[i] = EXPR; }  \
        else if (ia == 0 && ib == 1)                                                    \
            for (int64_t i = 0; i < n; i++) { float u = a[0], v = b[i]; y[i] = EXPR; }  \
        else                                                                            \
            for (int64_t i = 0; i < n; i++) {                                           \
                float u = a[i * ia], v = b[i * ib];                                     \
                y[i] = EXPR;                                                            \
            }                                                                           \
    } while (0)

static void binary_block(drift_op_kind kind, const float *a, int64_t ia, const float *b, int64_t ib, float *y,
                         int64_t n) {
    if (kind == DRIFT_OP_ADD)
        BIN_LOOP(u + v);
    else if (kind == DRIFT_OP_SUB)
        BIN_LOOP(u - v);
    else
        BIN_LOOP(u * v);
}

/* Flat output range [e0, e1): an odometer over the collapsed outer dims. */
static void binary_range(void *p, int64_t e0, int64_t e1) {
    const bin_job *j = p;
    const drift_bcast *bc = &j->bc;
    int nd = bc->nd;
    int64_t inner = bc->shape[nd - 1], ia = bc->sa[nd - 1], ib = bc->sb[nd - 1];
    int64_t k = e0 % inner;
    drift_bcast_rows r;
    drift_bcast_rows_seek(&r, bc, e0 / inner);
    int64_t pos = e0;
    while (pos < e1) {
        int64_t n = min64(inner - k, e1 - pos);
        for (int64_t s = 0; s < n; s += BLK) {
            int64_t m = min64(BLK, n - s);
            float *y = j->y + pos + s;
            binary_block(j->kind, j->a + r.oa + (k + s) * ia, ia, j->b + r.ob + (k + s) * ib, ib, y, m);
            drift_dtype_round_n(y, (size_t)m, j->dt);
        }
        pos += n;
        k = 0;
        drift_bcast_rows_next(&r);
    }
}

static int run_binary(int nt, const drift_op *op, const drift_tensor *a, const drift_tensor *b, drift_tensor *out) {
    bin_job j;
    j.kind = op->kind;
    j.a = fd(a);
    j.b = fd(b);
    j.y = fd(out);
    j.dt = op->out;
    drift_bcast_plan(a, b, &j.bc);
    drift_host_parallel_for(nt, out->numel, GRAIN * 4, binary_range, &j);
    return DRIFT_OK;
}

/* ------------------------------------------------------------------------ */
/* LINEAR                                                                     */

/* t's values as op->compute operands: t's own storage, or a rounded copy in
 * *tmp (caller frees) when t's dtype is not the (narrow) compute dtype. */
static const float *gemm_operand(const drift_tensor *t, drift_dtype compute, float **tmp) {
    *tmp = NULL;
    if (compute == DRIFT_F32 || t->dtype == compute) return fd(t);
    float *c = drift_malloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof(float));
    if (!c) return NULL;
    memcpy(c, fd(t), (size_t)t->numel * sizeof(float));
    drift_dtype_round_n(c, (size_t)t->numel, compute);
    *tmp = c;
    return c;
}

typedef struct epi_job {
    float *y;
    const float *bias; /* [N], or NULL */
    const float *add;  /* [M, N], or NULL: added after bias */
    int64_t N;
    drift_dtype dt;
} epi_job;

/* y[m, :] = (y[m, :] + bias) + add[m, :] (fp32, each term that is given),
 * then one rounding to out. */
static void linear_epilogue(void *p, int64_t r0, int64_t r1) {
    const epi_job *j = p;
    for (int64_t r = r0; r < r1; r++) {
        float *y = j->y + r * j->N;
        if (j->bias)
            for (int64_t n = 0; n < j->N; n++) y[n] = y[n] + j->bias[n];
        if (j->add) {
            const float *a = j->add + r * j->N;
            for (int64_t n = 0; n < j->N; n++) y[n] = y[n] + a[n];
        }
        drift_dtype_round_n(y, (size_t)j->N, j->dt);
    }
}

static void epilogue(int nt, float *y, const float *bias, const float *add, int64_t M, int64_t N, drift_dtype dt) {
    epi_job j = {y, bias, add, N, dt};
    drift_host_parallel_for(nt, M, row_grain(N), linear_epilogue, &j);
}

/* y = x W^T over k in [k0, k0 + kc) (drift's GEMM order within it). */
static int gemm_part(int nt, const float *xa, const float *wa, int64_t M, int64_t N, int64_t K, int64_t k0, int64_t kc,
                     float *y) {
    const drift_gemm g = {M, N, kc, xa + k0, K, 1, wa + k0, 1, K, y, N};
    return drift_cpu_gemm(nt, &g);
}

/* The GEMM form (kernels/gemm_forms.h): drift's one rounding, unless the
 * backend follows a recording GPU's table (gpu_as=) that lists the shape. */
static int run_linear(int nt, int gemm_table, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                      drift_err *err) {
    const drift_tensor *x = in[0], *w = in[1], *bias = op->n_in > 2 ? in[2] : NULL;
    int64_t K = x->shape[x->ndim - 1], N = w->shape[0], M = 1;
    for (int i = 0; i < x->ndim - 1; i++) M *= x->shape[i];
    if (M == 0 || N == 0) return DRIFT_OK;
    float *y = fd(out);
    const float *b = bias ? fd(bias) : NULL;
    drift_gemm_form form = drift_gemm_form_lookup(gemm_table, op->compute, op->out, M, N, K, bias != NULL);
    if (form.kind == DRIFT_GEMM_FORM_SPLITK_INPLACE && (form.chunk <= 0 || form.chunk >= K)) form.kind = DRIFT_GEMM_FORM_ONE;
    if (K == 0) {
        memset(y, 0, (size_t)(M * N) * sizeof(float));
        epilogue(nt, y, b, NULL, M, N, op->out);
        return DRIFT_OK;
    }
    float *tx = NULL, *tw = NULL, *part = NULL;
    const float *xa = gemm_operand(x, op->compute, &tx);
    const float *wa = xa ? gemm_operand(w, op->compute, &tw) : NULL;
    int rc = DRIFT_OK;
    if (!xa || !wa) {
        rc = nomem(err, op);
    } else if (form.kind == DRIFT_GEMM_FORM_SPLITK_INPLACE) {
        /* y = round(p_0 + bias); y = round(y + p_i) */
        if (gemm_part(nt, xa, wa, M, N, K, 0, form.chunk, y)) {
            rc = nomem(err, op);
        } else {
            epilogue(nt, y, b, NULL, M, N, op->out);
            part = drift_malloc((size_t)(M * N) * sizeof(float));
            if (!part) rc = nomem(err, op);
            for (int64_t k0 = form.chunk; !rc && k0 < K; k0 += form.chunk) {
                if (gemm_part(nt, xa, wa, M, N, K, k0, min64(form.chunk, K - k0), part)) rc = nomem(err, op);
                else epilogue(nt, y, NULL, part, M, N, op->out);
            }
        }
    } else if (gemm_part(nt, xa, wa, M, N, K, 0, K, y)) { /* y[M, N] = x[M, K] W[N, K]^T */
        rc = nomem(err, op);
    } else if (form.kind == DRIFT_GEMM_FORM_BIAS_AFTER && b) {
        epilogue(nt, y, NULL, NULL, M, N, op->out);
        epilogue(nt, y, b, NULL, M, N, op->out);
    } else {
        epilogue(nt, y, b, NULL, M, N, op->out);
    }
    drift_free(part);
    free(tx);
    free(tw);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Norms                                                                      */

typedef struct norm_job {
    const float *x, *w, *b;
    float *y;
    int64_t D;
    float eps;
    drift_dtype in_dt, out_dt;
} norm_job;

/* mean = (sum_i x_i) / D, var = (sum_i (x_i - mean)^2) / D (sequential fp32
 * sums in index order), rstd = 1 / sqrtf(var + eps),
 * y = ((x - mean) * rstd) * w + b, rounded once. */
static void layer_norm_rows(void *p, int64_t r0, int64_t r1) {
    const norm_job *j = p;
    const int64_t D = j->D;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->x + r * D;
        float *y = j->y + r * D;
        float sum = 0.0f;
        for (int64_t i = 0; i < D; i++) sum += x[i];
        const float mean = sum / (float)D;
        float sq = 0.0f;
        for (int64_t i = 0; i < D; i++) {
            float d = x[i] - mean;
            sq += d * d;
        }
        const float var = sq / (float)D;
        const float rstd = 1.0f / sqrtf(var + j->eps);
        for (int64_t i = 0; i < D; i++) {
            float t = (x[i] - mean) * rstd;
            if (j->w) t = t * j->w[i];
            if (j->b) t = t + j->b[i];
            y[i] = t;
        }
        drift_dtype_round_n(y, (size_t)D, j->out_dt);
    }
}

/* rms_norm: ms = (sum_i x_i^2) / D (sequential fp32), r = 1 / sqrtf(ms + eps),
 * y = (x * r) * w in fp32, rounded once to out (torch 2.11 rounds once, in its
 * fused kernel and in its composite alike). */
static void rms_norm_rows(void *p, int64_t r0, int64_t r1) {
    const norm_job *j = p;
    const int64_t D = j->D;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->x + r * D;
        float *y = j->y + r * D;
        float ss = 0.0f;
        for (int64_t i = 0; i < D; i++) ss += x[i] * x[i];
        const float ms = ss / (float)D;
        const float rr = 1.0f / sqrtf(ms + j->eps);
        for (int64_t i = 0; i < D; i++) y[i] = x[i] * rr;
        if (j->w)
            for (int64_t i = 0; i < D; i++) y[i] = y[i] * j->w[i];
        drift_dtype_round_n(y, (size_t)D, j->out_dt);
    }
}

static int run_norm(int nt, const drift_op *op, const drift_tensor *const *in, drift_tensor *out) {
    const drift_tensor *x = in[0];
    norm_job j;
    j.D = x->shape[x->ndim - 1];
    if (j.D == 0 || x->numel == 0) return DRIFT_OK;
    j.x = fd(x);
    j.w = op->n_in > 1 ? fd(in[1]) : NULL;
    j.b = op->n_in > 2 ? fd(in[2]) : NULL;
    j.y = fd(out);
    j.eps = op->eps;
    j.in_dt = x->dtype;
    j.out_dt = op->out;
    drift_host_parallel_for(nt, x->numel / j.D, row_grain(j.D * 4), op->kind == DRIFT_OP_LAYER_NORM ? layer_norm_rows
                                                                                                    : rms_norm_rows, &j);
    return DRIFT_OK;
}

/* ------------------------------------------------------------------------ */
/* ROPE                                                                       */

typedef struct rope_job {
    const float *x, *cos, *sin;
    float *y;
    int64_t L, H, Dh;
    drift_dtype dt;
} rope_job;

/* Per pair i: c = cos[l, 2i], s = sin[l, 2i+1];
 * y[2i] = (x0*c) - (x1*s), y[2i+1] = (x0*s) + (x1*c), each product rounded
 * to fp32 (diffusers' apply_rotary_emb), then one rounding to out. */
static void rope_rows(void *p, int64_t r0, int64_t r1) {
    const rope_job *j = p;
    const int64_t HD = j->H * j->Dh, half = j->Dh / 2;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t l = r % j->L;
        const float *c = j->cos + l * j->Dh, *s = j->sin + l * j->Dh;
        for (int64_t h = 0; h < j->H; h++) {
            const float *x = j->x + r * HD + h * j->Dh;
            float *y = j->y + r * HD + h * j->Dh;
            for (int64_t i = 0; i < half; i++) {
                float x0 = x[2 * i], x1 = x[2 * i + 1], cc = c[2 * i], ss = s[2 * i + 1];
                float t1 = x0 * cc, t2 = x1 * ss;
                float t3 = x0 * ss, t4 = x1 * cc;
                y[2 * i] = t1 - t2;
                y[2 * i + 1] = t3 + t4;
            }
        }
        drift_dtype_round_n(j->y + r * HD, (size_t)HD, j->dt);
    }
}

static int run_rope(int nt, const drift_op *op, const drift_tensor *const *in, drift_tensor *out) {
    const drift_tensor *x = in[0];
    rope_job j = {fd(x), fd(in[1]), fd(in[2]), fd(out), x->shape[1], x->shape[2], x->shape[3], op->out};
    int64_t rows = x->shape[0] * x->shape[1];
    drift_host_parallel_for(nt, rows, row_grain(j.H * j.Dh), rope_rows, &j);
    return DRIFT_OK;
}

/* ------------------------------------------------------------------------ */
/* ATTENTION                                                                  */

typedef struct flash_job {
    float *s;       /* [rows, Lk] scores in, rounded probabilities out */
    float *l;       /* [rows] row sums */
    float *alpha;   /* [rows, nt] per key tile: the factor the accumulator is rescaled by */
    int64_t Lk, N, nt;
    float scale;
    drift_dtype compute;
    const float *bias; /* NULL, or the additive bias of row 0 (rows bias_ld apart, 0: broadcast) */
    int64_t bias_ld;
} flash_job;

/* Online softmax over key tiles of N columns, as a flash kernel runs it
 * (torch's fused SDPA on sm90 is cuDNN's flash kernel, key tiles of 128; with
 * this order a cpu replay of LTX-2's 512-key attention matches it at the
 * block output where one softmax over all keys differs in 2,297 of 16,384
 * elements). Per tile, m' = max(m, max_j s_j); alpha = exp(m - m'); l = l alpha + sum_j p_j
 * (p_j = exp(s_j - m'), unrounded); p_j rounded to compute relative to the
 * running maximum (m' = -inf counts as 0, as flash kernels do). op->sub
 * DRIFT_ATTN_ORDER_LAST_FIRST with a 16-bit compute is FlashAttention-2's
 * kernel instead (cpu_attn_fa2.c). */
static void flash_rows(void *p, int64_t r0, int64_t r1) {
    const flash_job *j = p;
    const int64_t Lk = j->Lk, N = j->N;
    for (int64_t r = r0; r < r1; r++) {
        float *s = j->s + r * Lk, *al = j->alpha + r * j->nt;
        const float *bi = j->bias ? j->bias + r * j->bias_ld : NULL;
        float m = -INFINITY, l = 0.0f;
        for (int64_t t = 0; t * N < Lk; t++) {
            const int64_t c0 = t * N, c1 = min64(Lk, c0 + N);
            float mt = m;
            for (int64_t c = c0; c < c1; c++) {
                float v = s[c] * j->scale;
                if (bi) v += bi[c]; /* fl(fl(qk * scale) + bias) */
                s[c] = v;
                if (v > mt) mt = v;
            }
            /* no finite score yet: exponents relative to 0, so -inf scores give 0, not NaN */
            const float ms = mt == -INFINITY ? 0.0f : mt;
            const float a = m == -INFINITY ? 0.0f : expf(m - ms);
            float sum = 0.0f;
            for (int64_t c = c0; c < c1; c++) {
                float e = expf(s[c] - ms);
                s[c] = e;
                sum += e;
            }
            l = l * a + sum;
            al[t] = a;
            m = mt;
            drift_dtype_round_n(s + c0, (size_t)(c1 - c0), j->compute);
        }
        j->l[r] = l;
    }
}

typedef struct attn_out_job {
    float *o;       /* [rows, Dv] */
    const float *l;
    int64_t Dv;
    drift_dtype dt;
} attn_out_job;

/* o = (P V) / l in fp32, rounded once to out. */
static void attn_out_rows(void *p, int64_t r0, int64_t r1) {
    const attn_out_job *j = p;
    for (int64_t r = r0; r < r1; r++) {
        float *o = j->o + r * j->Dv;
        const float l = j->l[r];
        for (int64_t d = 0; d < j->Dv; d++) o[d] = o[d] / l;
        drift_dtype_round_n(o, (size_t)j->Dv, j->dt);
    }
}

/* scale == 0 means the SDPA default 1/sqrt(Dh). */
static float attn_scale(const drift_op *op, int64_t Dh) {
    return op->scale != 0.0f ? op->scale : (float)(1.0 / sqrt((double)Dh));
}

/* The [L, D] rows of one head (row stride ld elements) to / from a
 * contiguous [L, D] buffer. */
static void head_gather(float *c, const float *t, int64_t L, int64_t D, int64_t ld) {
    for (int64_t i = 0; i < L; i++) memcpy(c + i * D, t + i * ld, (size_t)D * sizeof(float));
}
static void head_scatter(float *t, const float *c, int64_t L, int64_t D, int64_t ld) {
    for (int64_t i = 0; i < L; i++) memcpy(t + i * ld, c + i * D, (size_t)D * sizeof(float));
}

/* tile: key tile of the flash order (cpu:attn_tile=, default 128): a 16-bit
 * compute with more than tile keys runs flash_rows and accumulates O over the
 * tiles, O = O alpha_t + P_t V_t, then O / l; else one softmax over all keys
 * (flash_rows with one tile), O = (P V) / l.
 * Layout 0: heads are contiguous [L, D] blocks of q, k, v, out and the GEMMs
 * read and write them in place. Layout 1 ([B, L, H, D]): each head's rows
 * are gathered into contiguous buffers first and its output scattered back
 * (the copies are O(L D) per head against the O(Lq Lk D) products); the
 * GEMM's order does not depend on the layout, so both are bitwise equal. */
static int run_attention(int nt, int64_t tile, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                         drift_err *err) {
    const drift_tensor *q = in[0], *k = in[1], *v = in[2];
    const int ly = op->layout != 0, hd = ly ? 2 : 1, ld = ly ? 1 : 2;
    const int64_t B = q->shape[0], H = q->shape[hd], BH = B * H, Lq = q->shape[ld], Dh = q->shape[3];
    const int64_t Lk = k->shape[ld], Dv = v->shape[3];
    if (BH == 0 || Lq == 0 || Dv == 0) return DRIFT_OK;
    /* Query tiles keep the score buffer near 4 MiB; the tile size is a function of
     * the shape only, so results stay deterministic. */
    int64_t T = ((int64_t)1 << 20) / Lk;
    if (T < 64) T = 64;
    if (T > Lq) T = Lq;
    /* one softmax over all keys is the flash order with a single tile */
    const int flash = tile > 0 && Lk > tile && op->compute != DRIFT_F32;
    const int64_t kt = flash ? tile : Lk, ntl = (Lk + kt - 1) / kt;
    float *tq = NULL, *tk = NULL, *tv = NULL, *hb = NULL, *al = NULL, *pv = NULL;
    float *S = drift_malloc((size_t)(T * Lk) * sizeof(float));
    float *l = drift_malloc((size_t)T * sizeof(float));
    al = drift_malloc((size_t)(T * ntl) * sizeof(float));      /* per row and key tile: the rescale factor */
    if (flash) pv = drift_malloc((size_t)(T * Dv) * sizeof(float)); /* one tile's P V */
    if (ly) hb = drift_malloc((size_t)(Lq * Dh + Lk * Dh + Lk * Dv + Lq * Dv) * sizeof(float));
    const float *qa = gemm_operand(q, op->compute, &tq);
    const float *ka = qa ? gemm_operand(k, op->compute, &tk) : NULL;
    const float *va = ka ? gemm_operand(v, op->compute, &tv) : NULL;
    int rc = DRIFT_OK;
    if (!S || !l || !al || !va || (ly && !hb) || (flash && !pv)) {
        rc = nomem(err, op);
        goto done;
    }
    const float scale = attn_scale(op, Dh);
    float *o = fd(out);
    int64_t bs[3] = {0, 0, 0};
    if (op->n_in > 3) drift_attn_bias_strides(in[3], bs);
    for (int64_t bh = 0; bh < BH; bh++) {
        const float *qh, *kh, *vh;
        float *oh;
        if (ly) {
            /* head h of sample b: rows at stride H*D from b*L*H*D + h*D */
            const int64_t b = bh / H, h = bh - b * H;
            float *cq = hb, *ck = cq + Lq * Dh, *cv = ck + Lk * Dh;
            head_gather(cq, qa + b * Lq * H * Dh + h * Dh, Lq, Dh, H * Dh);
            head_gather(ck, ka + b * Lk * H * Dh + h * Dh, Lk, Dh, H * Dh);
            head_gather(cv, va + b * Lk * H * Dv + h * Dv, Lk, Dv, H * Dv);
            qh = cq, kh = ck, vh = cv, oh = cv + Lk * Dv;
        } else {
            qh = qa + bh * Lq * Dh, kh = ka + bh * Lk * Dh, vh = va + bh * Lk * Dv;
            oh = o + bh * Lq * Dv;
        }
        for (int64_t r0 = 0; r0 < Lq; r0 += T) {
            const int64_t nr = min64(T, Lq - r0);
            /* S[nr, Lk] = q[nr, Dh] k[Lk, Dh]^T */
            const drift_gemm qk = {nr, Lk, Dh, qh + r0 * Dh, Dh, 1, kh, 1, Dh, S, Lk};
            if (drift_cpu_gemm(nt, &qk)) {
                rc = nomem(err, op);
                goto done;
            }
            flash_job fj = {S, l, al, Lk, kt, ntl, scale, op->compute, NULL, bs[2]};
            if (op->n_in > 3) fj.bias = (const float *)fd(in[3]) + (bh / H) * bs[0] + (bh % H) * bs[1] + r0 * bs[2];
            drift_host_parallel_for(nt, nr, row_grain(Lk * 8), flash_rows, &fj);
            if (flash) {
                /* O = O alpha_t + P_t V_t over the key tiles */
                float *acc = oh + r0 * Dv;
                for (int64_t t = 0; t < ntl; t++) {
                    const int64_t c0 = t * kt, nc = min64(Lk, c0 + kt) - c0;
                    const drift_gemm pvt = {nr, Dv, nc, S + c0, Lk, 1, vh + c0 * Dv, Dv, 1, pv, Dv};
                    if (drift_cpu_gemm(nt, &pvt)) {
                        rc = nomem(err, op);
                        goto done;
                    }
                    for (int64_t i = 0; i < nr; i++)
                        for (int64_t d = 0; d < Dv; d++)
                            acc[i * Dv + d] = t == 0 ? pv[i * Dv + d] : acc[i * Dv + d] * al[i * ntl + t] + pv[i * Dv + d];
                }
            } else {
                /* O[nr, Dv] = P[nr, Lk] V[Lk, Dv] */
                const drift_gemm pvg = {nr, Dv, Lk, S, Lk, 1, vh, Dv, 1, oh + r0 * Dv, Dv};
                if (drift_cpu_gemm(nt, &pvg)) {
                    rc = nomem(err, op);
                    goto done;
                }
            }
            attn_out_job oj = {oh + r0 * Dv, l, Dv, op->out};
            drift_host_parallel_for(nt, nr, row_grain(Dv), attn_out_rows, &oj);
        }
        if (ly) {
            const int64_t b = bh / H, h = bh - b * H;
            head_scatter(o + b * Lq * H * Dv + h * Dv, oh, Lq, Dv, H * Dv);
        }
    }
done:
    free(S);
    free(l);
    free(al);
    free(pv);
    free(hb);
    free(tq);
    free(tk);
    free(tv);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Movement: PERMUTE, NARROW, CONCAT, VIEW, PATCHIFY, UNPATCHIFY              */

/* Rounds n values just copied from a tensor of dtype src to out (no-op when equal). */
static void round_moved(float *y, int64_t n, drift_dtype src, drift_dtype out) {
    if (src != out) drift_dtype_round_n(y, (size_t)n, out);
}

typedef struct perm_job {
    const float *x;
    float *y;
    int nd;
    int64_t shape[DRIFT_MAX_DIMS];   /* output shape */
    int64_t stride[DRIFT_MAX_DIMS];  /* input stride of each output dim */
    drift_dtype src, dt;
} perm_job;

static void permute_range(void *p, int64_t e0, int64_t e1) {
    const perm_job *j = p;
    const int nd = j->nd;
    const int64_t inner = j->shape[nd - 1], is = j->stride[nd - 1];
    int64_t idx[DRIFT_MAX_DIMS] = {0};
    int64_t row = e0 / inner, k = e0 % inner, off = 0;
    for (int d = nd - 2; d >= 0; d--) {
        idx[d] = row % j->shape[d];
        row /= j->shape[d];
        off += idx[d] * j->stride[d];
    }
    int64_t pos = e0;
    while (pos < e1) {
        int64_t n = min64(inner - k, e1 - pos);
        const float *x = j->x + off + k * is;
        float *y = j->y + pos;
        for (int64_t i = 0; i < n; i++) y[i] = x[i * is];
        round_moved(y, n, j->src, j->dt);
        pos += n;
        k = 0;
        for (int d = nd - 2; d >= 0; d--) {
            idx[d]++;
            off += j->stride[d];
            if (idx[d] < j->shape[d]) break;
            off -= j->stride[d] * j->shape[d];
            idx[d] = 0;
        }
    }
}

static int run_permute(int nt, const drift_op *op, const drift_tensor *x, drift_tensor *out) {
    perm_job j;
    j.x = fd(x);
    j.y = fd(out);
    j.src = x->dtype;
    j.dt = op->out;
    int64_t istride[DRIFT_MAX_DIMS], c = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        istride[d] = c;
        c *= x->shape[d];
    }
    if (x->ndim == 0) {
        j.nd = 1;
        j.shape[0] = 1;
        j.stride[0] = 1;
    } else {
        j.nd = x->ndim;
        for (int d = 0; d < x->ndim; d++) {
            j.shape[d] = x->shape[op->perm[d]];
            j.stride[d] = istride[op->perm[d]];
        }
    }
    drift_host_parallel_for(nt, out->numel, GRAIN * 4, permute_range, &j);
    return DRIFT_OK;
}

static int run_narrow(const drift_op *op, const drift_tensor *x, drift_tensor *out) {
    int d = drift_op_norm_dim(op->dim, x->ndim);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < d; i++) outer *= x->shape[i];
    for (int i = d + 1; i < x->ndim; i++) inner *= x->shape[i];
    const int64_t blk = op->length * inner, src_row = x->shape[d] * inner, off = op->start * inner;
    for (int64_t o = 0; o < outer; o++) {
        float *y = fd(out) + o * blk;
        memcpy(y, fd(x) + o * src_row + off, (size_t)blk * sizeof(float));
        round_moved(y, blk, x->dtype, op->out);
    }
    return DRIFT_OK;
}

static int run_concat(const drift_op *op, const drift_tensor *a, const drift_tensor *b, drift_tensor *out) {
    int d = drift_op_norm_dim(op->dim, a->ndim);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < d; i++) outer *= a->shape[i];
    for (int i = d + 1; i < a->ndim; i++) inner *= a->shape[i];
    const int64_t na = a->shape[d] * inner, nb = b->shape[d] * inner;
    for (int64_t o = 0; o < outer; o++) {
        float *y = fd(out) + o * (na + nb);
        memcpy(y, fd(a) + o * na, (size_t)na * sizeof(float));
        memcpy(y + na, fd(b) + o * nb, (size_t)nb * sizeof(float));
        round_moved(y, na + nb, a->dtype, op->out);
    }
    return DRIFT_OK;
}

static int run_view(const drift_op *op, const drift_tensor *x, drift_tensor *out) {
    memcpy(fd(out), fd(x), (size_t)x->numel * sizeof(float));
    round_moved(fd(out), x->numel, x->dtype, op->out);
    return DRIFT_OK;
}

typedef struct patch_job {
    const float *src;
    float *dst;
    int64_t C, F, H, W, pf, ph, pw, Hp, Wp, L, P;
    int cl; /* PATCHIFY layout 1: features (pf, ph, pw, c) */
    drift_dtype srcdt, dt;
} patch_job;

/* One unit = one (batch, token); token t = (f', h', w') in row-major order. */
static void patchify_units(void *p, int64_t u0, int64_t u1) {
    const patch_job *j = p;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t b = u / j->L, t = u % j->L;
        const int64_t f0 = (t / (j->Hp * j->Wp)) * j->pf, h0 = ((t / j->Wp) % j->Hp) * j->ph, w0 = (t % j->Wp) * j->pw;
        float *y = j->dst + u * j->P;
        int64_t n = 0;
        if (j->cl) {
            /* channels-last (pf, ph, pw, c): the K order of cuDNN's NHWC implicit GEMM */
            const int64_t cs = j->F * j->H * j->W;
            for (int64_t i = 0; i < j->pf; i++)
                for (int64_t jj = 0; jj < j->ph; jj++)
                    for (int64_t k = 0; k < j->pw; k++) {
                        const float *x = j->src + ((b * j->C * j->F + f0 + i) * j->H + h0 + jj) * j->W + w0 + k;
                        for (int64_t c = 0; c < j->C; c++) y[n++] = x[c * cs];
                    }
        } else {
            /* feature order (c, pf, ph, pw), as a Conv3d weight [out, C, pf, ph, pw] flattens */
            for (int64_t c = 0; c < j->C; c++)
                for (int64_t i = 0; i < j->pf; i++)
                    for (int64_t jj = 0; jj < j->ph; jj++) {
                        const float *x = j->src + (((b * j->C + c) * j->F + f0 + i) * j->H + h0 + jj) * j->W + w0;
                        for (int64_t k = 0; k < j->pw; k++) y[n++] = x[k];
                    }
        }
        round_moved(y, j->P, j->srcdt, j->dt);
    }
}

static void unpatchify_units(void *p, int64_t u0, int64_t u1) {
    const patch_job *j = p;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t b = u / j->L, t = u % j->L;
        const int64_t f0 = (t / (j->Hp * j->Wp)) * j->pf, h0 = ((t / j->Wp) % j->Hp) * j->ph, w0 = (t % j->Wp) * j->pw;
        const float *x = j->src + u * j->P;
        /* feature order (pf, ph, pw, c), as diffusers Wan reshapes proj_out */
        for (int64_t i = 0; i < j->pf; i++)
            for (int64_t jj = 0; jj < j->ph; jj++)
                for (int64_t k = 0; k < j->pw; k++)
                    for (int64_t c = 0; c < j->C; c++) {
                        float v = x[((i * j->ph + jj) * j->pw + k) * j->C + c];
                        if (j->srcdt != j->dt) v = drift_round_to(v, j->dt);
                        j->dst[(((b * j->C + c) * j->F + f0 + i) * j->H + h0 + jj) * j->W + w0 + k] = v;
                    }
    }
}

static int run_patch(int nt, const drift_op *op, const drift_tensor *x, drift_tensor *out) {
    const drift_tensor *img = op->kind == DRIFT_OP_PATCHIFY ? x : out;
    const drift_tensor *tok = op->kind == DRIFT_OP_PATCHIFY ? out : x;
    patch_job j;
    j.src = fd(x);
    j.dst = fd(out);
    j.C = img->shape[1];
    j.F = img->shape[2];
    j.H = img->shape[3];
    j.W = img->shape[4];
    j.pf = op->patch[0];
    j.ph = op->patch[1];
    j.pw = op->patch[2];
    j.Hp = j.H / j.ph;
    j.Wp = j.W / j.pw;
    j.L = tok->shape[1];
    j.P = tok->shape[2];
    j.cl = op->kind == DRIFT_OP_PATCHIFY && op->layout == 1;
    j.srcdt = x->dtype;
    j.dt = op->out;
    int64_t units = img->shape[0] * j.L;
    if (units == 0 || j.P == 0) return DRIFT_OK;
    drift_host_parallel_for(nt, units, row_grain(j.P), op->kind == DRIFT_OP_PATCHIFY ? patchify_units : unpatchify_units,
                            &j);
    return DRIFT_OK;
}

/* ------------------------------------------------------------------------ */
/* TIMESTEP_SINUSOID                                                          */

/* diffusers get_timestep_embedding (downscale_freq_shift 0, scale 1), fp32:
 * c = fp32(-ln(max_period)) (a Python float, rounded when it meets the fp32
 * tensor), e_j = (c * j) / half (two fp32 roundings), freq_j = expf(e_j),
 * arg = t * freq_j, out = [sin(arg), cos(arg)] or, flipped, [cos, sin];
 * an odd dim gets a zero last column. max_period 0 means 10000. */
static int run_timestep(const drift_op *op, const drift_tensor *t, drift_tensor *out) {
    const int64_t B = t->shape[0], dim = op->dim, half = dim / 2;
    const double mp = op->max_period != 0.0f ? (double)op->max_period : 10000.0;
    const float c = (float)(-log(mp));
    for (int64_t b = 0; b < B; b++) {
        const float tv = fd(t)[b];
        float *y = fd(out) + b * dim;
        for (int64_t jj = 0; jj < half; jj++) {
            float e = c * (float)jj;
            e = e / (float)half;
            const float freq = expf(e);
            const float arg = tv * freq;
            const float sv = sinf(arg), cv = cosf(arg);
            y[jj] = op->flip_sin_to_cos ? cv : sv;
            y[half + jj] = op->flip_sin_to_cos ? sv : cv;
        }
        if (dim % 2) y[dim - 1] = 0.0f;
        drift_dtype_round_n(y, (size_t)dim, op->out);
    }
    return DRIFT_OK;
}

/* ------------------------------------------------------------------------ */

int drift_cpu_run_op(int nt, int attn_tile, int gemm_table, const drift_op *op, const drift_tensor *const *in,
                     drift_tensor *out, drift_err *err) {
    switch (op->kind) {
    case DRIFT_OP_CAST:
    case DRIFT_OP_AFFINE:
    case DRIFT_OP_SILU:
    case DRIFT_OP_GELU_TANH: return run_unary(nt, op, in[0], out);
    case DRIFT_OP_ADD:
    case DRIFT_OP_SUB:
    case DRIFT_OP_MUL: return run_binary(nt, op, in[0], in[1], out);
    case DRIFT_OP_LINEAR: return run_linear(nt, gemm_table, op, in, out, err);
    case DRIFT_OP_LAYER_NORM:
    case DRIFT_OP_RMS_NORM: return run_norm(nt, op, in, out);
    case DRIFT_OP_ROPE: return run_rope(nt, op, in, out);
    case DRIFT_OP_ATTENTION:
        if (op->sub == DRIFT_ATTN_ORDER_LAST_FIRST && op->compute != DRIFT_F32 && attn_tile > 0)
            return drift_cpu_attention_fa2(nt, drift_gemm_table_sms(gemm_table), op, in, out, err);
        return run_attention(nt, attn_tile, op, in, out, err);
    case DRIFT_OP_PERMUTE: return run_permute(nt, op, in[0], out);
    case DRIFT_OP_NARROW: return run_narrow(op, in[0], out);
    case DRIFT_OP_CONCAT: return run_concat(op, in[0], in[1], out);
    case DRIFT_OP_VIEW: return run_view(op, in[0], out);
    case DRIFT_OP_PATCHIFY:
    case DRIFT_OP_UNPATCHIFY: return run_patch(nt, op, in[0], out);
    case DRIFT_OP_TIMESTEP_SINUSOID: return run_timestep(op, in[0], out);
    default:
        if (drift_aten_is_kind(op->kind)) return drift_cpu_run_aten(nt, op, in, out, err);
        break;
    }
    return drift_err_set(err, DRIFT_E_UNSUPPORTED, "op", "cpu backend: op %s not implemented", drift_op_name(op->kind));
}
