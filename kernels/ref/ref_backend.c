/* The ref backend: the fp64 oracle (kernels/backend.h). Naive on purpose.
 *
 * Storage is double whatever the tensor's logical dtype; every op computes
 * in fp64 with the mathematical formula of backend.h and never rounds (no
 * bf16/fp16/fp32 rounding anywhere, op->compute and op->out are ignored
 * except for validation). Transcendentals are drift's own
 * (kernels/math64.h, through kernels/aten_math64.h), shared with the GPU
 * oracle (kernels/cuda/ref_cuda*), which reproduces every sum below in the
 * same order: the two agree bit for bit. Sums are sequential in index order;
 * loops are split across threads by output row only, so results do not
 * depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "kernels/aten_internal.h"
#include "kernels/aten_math64.h"
#include "kernels/cpu/host_internal.h"

#define GRAIN ((int64_t)1 << 14)

static inline double *dd(const drift_tensor *t) { return (double *)t->data; }

static int64_t row_grain(int64_t row_cost) {
    if (row_cost < 1) row_cost = 1;
    int64_t g = GRAIN / row_cost;
    return g < 1 ? 1 : g;
}

static int dtype_ok(drift_dtype dt) { return drift_dtype_is_float(dt) || drift_dtype_is_int(dt); }

static size_t ref_elem_bytes(drift_dtype dt) {
    (void)dt;
    return sizeof(double);
}

static int ref_supports_op(const drift_backend *be, const drift_op *op) {
    (void)be;
    return dtype_ok(op->out);
}

static int ref_alloc(const drift_backend *be, drift_tensor *t, drift_err *err) {
    (void)be;
    double *d = drift_malloc((size_t)(t->numel > 0 ? t->numel : 1) * sizeof(double));
    if (!d) return drift_err_set(err, DRIFT_E_NOMEM, "ref", "alloc: cannot allocate %lld elements", (long long)t->numel);
    t->data = d;
    return DRIFT_OK;
}

static void ref_release(const drift_backend *be, drift_tensor *t) {
    (void)be;
    drift_free(t->data);
}

/* A view of base's double storage elem_offset elements in (fits: checked). */
static int ref_alias(const drift_backend *be, const drift_tensor *base, int64_t elem_offset, drift_tensor *out,
                     drift_err *err) {
    (void)be;
    (void)err;
    out->data = dd(base) + elem_offset;
    return DRIFT_OK;
}

static int ref_upload_f32(const drift_backend *be, drift_tensor *t, const float *src, drift_err *err) {
    (void)be;
    (void)err;
    for (int64_t i = 0; i < t->numel; i++) dd(t)[i] = src[i];
    return DRIFT_OK;
}

static int ref_upload_f64(const drift_backend *be, drift_tensor *t, const double *src, drift_err *err) {
    (void)be;
    (void)err;
    memcpy(t->data, src, (size_t)t->numel * sizeof(double));
    return DRIFT_OK;
}

static int ref_download_f32(const drift_backend *be, const drift_tensor *t, float *dst, drift_err *err) {
    (void)be;
    (void)err;
    for (int64_t i = 0; i < t->numel; i++) dst[i] = (float)dd(t)[i];
    return DRIFT_OK;
}

static int ref_download_f64(const drift_backend *be, const drift_tensor *t, double *dst, drift_err *err) {
    (void)be;
    (void)err;
    memcpy(dst, t->data, (size_t)t->numel * sizeof(double));
    return DRIFT_OK;
}

/* ------------------------------------------------------------------------ */
/* Elementwise                                                                */

typedef struct ew_job {
    const drift_op *op;
    const double *a, *b;
    double *y;
    drift_bcast bc;
} ew_job;

static void unary_range(void *p, int64_t i0, int64_t i1) {
    const ew_job *j = p;
    const double *x = j->a;
    double *y = j->y;
    const double al = j->op->alpha, be = j->op->beta;
    for (int64_t i = i0; i < i1; i++) {
        const double v = x[i];
        switch (j->op->kind) {
        case DRIFT_OP_AFFINE: y[i] = v * al + be; break;
        case DRIFT_OP_SILU: y[i] = drift_aten_silu64(v); break;
        case DRIFT_OP_GELU_TANH: y[i] = drift_aten_gelu_tanh64(v); break;
        default: y[i] = drift_dtype_round_int(v, j->op->out); break; /* CAST: never rounds, but to an integer */
        }
    }
}

static void binary_range(void *p, int64_t e0, int64_t e1) {
    const ew_job *j = p;
    const drift_bcast *bc = &j->bc;
    const int nd = bc->nd;
    const int64_t inner = bc->shape[nd - 1], ia = bc->sa[nd - 1], ib = bc->sb[nd - 1];
    int64_t k = e0 % inner;
    drift_bcast_rows r;
    drift_bcast_rows_seek(&r, bc, e0 / inner);
    for (int64_t pos = e0; pos < e1;) {
        const int64_t n = (inner - k < e1 - pos) ? inner - k : e1 - pos;
        const double *a = j->a + r.oa + k * ia, *b = j->b + r.ob + k * ib;
        double *y = j->y + pos;
        for (int64_t i = 0; i < n; i++) {
            const double u = a[i * ia], v = b[i * ib];
            y[i] = j->op->kind == DRIFT_OP_ADD ? u + v : j->op->kind == DRIFT_OP_SUB ? u - v : u * v;
        }
        pos += n;
        k = 0;
        drift_bcast_rows_next(&r);
    }
}

/* ------------------------------------------------------------------------ */
/* LINEAR: y[m, n] = sum_k x[m, k] w[n, k] (+ b[n]) */

typedef struct lin_job {
    const double *x, *w, *b;
    double *y;
    int64_t N, K;
} lin_job;

static void linear_rows(void *p, int64_t m0, int64_t m1) {
    const lin_job *j = p;
    for (int64_t m = m0; m < m1; m++) {
        const double *x = j->x + m * j->K;
        for (int64_t n = 0; n < j->N; n++) {
            const double *w = j->w + n * j->K;
            double s = 0.0;
            for (int64_t k = 0; k < j->K; k++) s += x[k] * w[k];
            if (j->b) s += j->b[n];
            j->y[m * j->N + n] = s;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Norms */

typedef struct norm_job {
    const drift_op *op;
    const double *x, *w, *b;
    double *y;
    int64_t D;
} norm_job;

static void norm_rows(void *p, int64_t r0, int64_t r1) {
    const norm_job *j = p;
    const int64_t D = j->D;
    const double eps = j->op->eps;
    for (int64_t r = r0; r < r1; r++) {
        const double *x = j->x + r * D;
        double *y = j->y + r * D;
        if (j->op->kind == DRIFT_OP_LAYER_NORM) {
            double s = 0.0, q = 0.0;
            for (int64_t i = 0; i < D; i++) s += x[i];
            const double mean = s / (double)D;
            for (int64_t i = 0; i < D; i++) q += (x[i] - mean) * (x[i] - mean);
            const double rstd = 1.0 / sqrt(q / (double)D + eps);
            for (int64_t i = 0; i < D; i++) {
                double t = (x[i] - mean) * rstd;
                if (j->w) t *= j->w[i];
                if (j->b) t += j->b[i];
                y[i] = t;
            }
        } else {
            double q = 0.0;
            for (int64_t i = 0; i < D; i++) q += x[i] * x[i];
            const double rr = 1.0 / sqrt(q / (double)D + eps);
            for (int64_t i = 0; i < D; i++) y[i] = x[i] * rr * (j->w ? j->w[i] : 1.0);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* ROPE */

typedef struct rope_job {
    const double *x, *cos, *sin;
    double *y;
    int64_t L, H, Dh;
} rope_job;

static void rope_rows(void *p, int64_t r0, int64_t r1) {
    const rope_job *j = p;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t l = r % j->L;
        const double *c = j->cos + l * j->Dh, *s = j->sin + l * j->Dh;
        for (int64_t h = 0; h < j->H; h++) {
            const int64_t o = (r * j->H + h) * j->Dh;
            for (int64_t i = 0; i < j->Dh / 2; i++) {
                const double x0 = j->x[o + 2 * i], x1 = j->x[o + 2 * i + 1];
                j->y[o + 2 * i] = x0 * c[2 * i] - x1 * s[2 * i + 1];
                j->y[o + 2 * i + 1] = x0 * s[2 * i + 1] + x1 * c[2 * i];
            }
        }
    }
}

/* ------------------------------------------------------------------------ */
/* ATTENTION: per query row, two passes over the keys (max, then exp and the
 * weighted sum of v accumulated straight into the output row). Rows are
 * addressed through strides, so layout 1 ([B, L, H, D]) runs the same
 * operations in the same order as layout 0 ([B, H, L, D]). */

typedef struct attn_job {
    const double *q, *k, *v;
    double *o;
    int64_t H, Lq, Lk, Dh, Dv;
    /* element strides of b, h, l (d is contiguous) */
    int64_t qs[3], ks[3], vs[3], os[3];
    double scale;
    const double *bias; /* NULL, or the additive bias at strides bs (b, h, l; 0 where broadcast) */
    int64_t bs[3];
} attn_job;

static double attn_score(const attn_job *j, const double *q, const double *k) {
    double s = 0.0;
    for (int64_t d = 0; d < j->Dh; d++) s += q[d] * k[d];
    return s * j->scale;
}

/* Rows r = (b*H + h)*Lq + i. */
static void attn_rows(void *p, int64_t r0, int64_t r1) {
    const attn_job *j = p;
    for (int64_t r = r0; r < r1; r++) {
        const int64_t bh = r / j->Lq, i = r - bh * j->Lq, b = bh / j->H, h = bh - b * j->H;
        const double *q = j->q + b * j->qs[0] + h * j->qs[1] + i * j->qs[2];
        const double *k = j->k + b * j->ks[0] + h * j->ks[1], *v = j->v + b * j->vs[0] + h * j->vs[1];
        double *o = j->o + b * j->os[0] + h * j->os[1] + i * j->os[2];
        const int64_t kl = j->ks[2], vl = j->vs[2];
        const double *bi = j->bias ? j->bias + b * j->bs[0] + h * j->bs[1] + i * j->bs[2] : NULL;
        double m = -INFINITY;
        for (int64_t c = 0; c < j->Lk; c++) {
            double s = attn_score(j, q, k + c * kl);
            if (bi) s += bi[c];
            if (s > m) m = s;
        }
        double l = 0.0;
        for (int64_t d = 0; d < j->Dv; d++) o[d] = 0.0;
        for (int64_t c = 0; c < j->Lk; c++) {
            double s = attn_score(j, q, k + c * kl);
            if (bi) s += bi[c];
            const double pr = drift_m64_exp(s - m);
            l += pr;
            for (int64_t d = 0; d < j->Dv; d++) o[d] += pr * v[c * vl + d];
        }
        for (int64_t d = 0; d < j->Dv; d++) o[d] /= l;
    }
}

/* Strides (b, h, l) of a contiguous 4-d tensor t in `layout`. */
static void attn_strides(const drift_tensor *t, int layout, int64_t *s) {
    const int64_t D = t->shape[3], n1 = t->shape[1], n2 = t->shape[2];
    s[0] = n1 * n2 * D;
    if (layout) {
        s[1] = D;      /* h: dim 2 */
        s[2] = n2 * D; /* l: dim 1 */
    } else {
        s[1] = n2 * D;
        s[2] = D;
    }
}

/* ------------------------------------------------------------------------ */
/* Movement */

static void run_permute(const drift_op *op, const drift_tensor *x, drift_tensor *out) {
    const int nd = x->ndim;
    int64_t istride[DRIFT_MAX_DIMS], c = 1, idx[DRIFT_MAX_DIMS] = {0};
    for (int d = nd - 1; d >= 0; d--) {
        istride[d] = c;
        c *= x->shape[d];
    }
    for (int64_t e = 0; e < out->numel; e++) {
        int64_t rem = e, off = 0;
        for (int d = nd - 1; d >= 0; d--) {
            idx[d] = rem % out->shape[d];
            rem /= out->shape[d];
            off += idx[d] * istride[op->perm[d]];
        }
        dd(out)[e] = dd(x)[off];
    }
}

static void run_narrow(const drift_op *op, const drift_tensor *x, drift_tensor *out) {
    const int d = drift_op_norm_dim(op->dim, x->ndim);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < d; i++) outer *= x->shape[i];
    for (int i = d + 1; i < x->ndim; i++) inner *= x->shape[i];
    for (int64_t o = 0; o < outer; o++)
        memcpy(dd(out) + o * op->length * inner, dd(x) + (o * x->shape[d] + op->start) * inner,
               (size_t)(op->length * inner) * sizeof(double));
}

static void run_concat(const drift_op *op, const drift_tensor *a, const drift_tensor *b, drift_tensor *out) {
    const int d = drift_op_norm_dim(op->dim, a->ndim);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < d; i++) outer *= a->shape[i];
    for (int i = d + 1; i < a->ndim; i++) inner *= a->shape[i];
    const int64_t na = a->shape[d] * inner, nb = b->shape[d] * inner;
    for (int64_t o = 0; o < outer; o++) {
        memcpy(dd(out) + o * (na + nb), dd(a) + o * na, (size_t)na * sizeof(double));
        memcpy(dd(out) + o * (na + nb) + na, dd(b) + o * nb, (size_t)nb * sizeof(double));
    }
}

/* PATCHIFY: out[b, t, ((c*pf + i)*ph + j)*pw + k] = x[b, c, f'pf+i, h'ph+j, w'pw+k]
 * (layout 1: out[b, t, ((i*ph + j)*pw + k)*C + c]);
 * UNPATCHIFY: out[b, c, f'pf+i, h'ph+j, w'pw+k] = x[b, t, ((i*ph + j)*pw + k)*C + c];
 * token t = (f'*Hp + h')*Wp + w'. */
static void run_patch(const drift_op *op, const drift_tensor *x, drift_tensor *out) {
    const int unp = op->kind == DRIFT_OP_UNPATCHIFY, cl = !unp && op->layout == 1;
    const drift_tensor *img = unp ? out : x;
    const int64_t B = img->shape[0], C = img->shape[1], F = img->shape[2], H = img->shape[3], W = img->shape[4];
    const int64_t pf = op->patch[0], ph = op->patch[1], pw = op->patch[2];
    const int64_t Fp = F / pf, Hp = H / ph, Wp = W / pw, L = Fp * Hp * Wp, P = C * pf * ph * pw;
    for (int64_t b = 0; b < B; b++)
        for (int64_t f = 0; f < Fp; f++)
            for (int64_t h = 0; h < Hp; h++)
                for (int64_t w = 0; w < Wp; w++) {
                    const int64_t t = (f * Hp + h) * Wp + w;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t i = 0; i < pf; i++)
                            for (int64_t jj = 0; jj < ph; jj++)
                                for (int64_t k = 0; k < pw; k++) {
                                    const int64_t img_i =
                                        (((b * C + c) * F + f * pf + i) * H + h * ph + jj) * W + w * pw + k;
                                    if (unp)
                                        dd(out)[img_i] = dd(x)[(b * L + t) * P + ((i * ph + jj) * pw + k) * C + c];
                                    else if (cl)
                                        dd(out)[(b * L + t) * P + ((i * ph + jj) * pw + k) * C + c] = dd(x)[img_i];
                                    else
                                        dd(out)[(b * L + t) * P + ((c * pf + i) * ph + jj) * pw + k] = dd(x)[img_i];
                                }
                }
}

/* freq_j = exp(-ln(max_period) * j / half), arg = t * freq_j (fp64). */
static void run_timestep(const drift_op *op, const drift_tensor *t, drift_tensor *out) {
    const int64_t B = t->shape[0], dim = op->dim, half = dim / 2;
    const double mp = op->max_period != 0.0f ? (double)op->max_period : 10000.0;
    for (int64_t b = 0; b < B; b++) {
        double *y = dd(out) + b * dim;
        for (int64_t j = 0; j < half; j++) {
            const double arg = drift_aten_timestep_arg64(dd(t)[b], j, half, mp), sn = drift_m64_sin(arg),
                         cs = drift_m64_cos(arg);
            y[j] = op->flip_sin_to_cos ? cs : sn;
            y[half + j] = op->flip_sin_to_cos ? sn : cs;
        }
        if (dim % 2) y[dim - 1] = 0.0;
    }
}

/* ------------------------------------------------------------------------ */

int drift_ref_run_op(int nt, const drift_op *op, const drift_tensor *const *in, drift_tensor *out, drift_err *err) {
    const drift_tensor *x = op->n_in > 0 ? in[0] : NULL;
    switch (op->kind) {
    case DRIFT_OP_CAST:
    case DRIFT_OP_AFFINE:
    case DRIFT_OP_SILU:
    case DRIFT_OP_GELU_TANH: {
        ew_job j = {.op = op, .a = dd(x), .y = dd(out)};
        drift_host_parallel_for(nt, out->numel, GRAIN, unary_range, &j);
        return DRIFT_OK;
    }
    case DRIFT_OP_ADD:
    case DRIFT_OP_SUB:
    case DRIFT_OP_MUL: {
        ew_job j = {.op = op, .a = dd(x), .b = dd(in[1]), .y = dd(out)};
        drift_bcast_plan(x, in[1], &j.bc);
        drift_host_parallel_for(nt, out->numel, GRAIN * 4, binary_range, &j);
        return DRIFT_OK;
    }
    case DRIFT_OP_LINEAR: {
        lin_job j = {dd(x), dd(in[1]), op->n_in > 2 ? dd(in[2]) : NULL, dd(out), in[1]->shape[0],
                     x->shape[x->ndim - 1]};
        int64_t M = 1;
        for (int i = 0; i < x->ndim - 1; i++) M *= x->shape[i];
        drift_host_parallel_for(nt, M, row_grain(j.N * (j.K + 1)), linear_rows, &j);
        return DRIFT_OK;
    }
    case DRIFT_OP_LAYER_NORM:
    case DRIFT_OP_RMS_NORM: {
        norm_job j = {op, dd(x), op->n_in > 1 ? dd(in[1]) : NULL, op->n_in > 2 ? dd(in[2]) : NULL, dd(out),
                      x->shape[x->ndim - 1]};
        if (j.D > 0) drift_host_parallel_for(nt, x->numel / j.D, row_grain(j.D * 3), norm_rows, &j);
        return DRIFT_OK;
    }
    case DRIFT_OP_ROPE: {
        rope_job j = {dd(x), dd(in[1]), dd(in[2]), dd(out), x->shape[1], x->shape[2], x->shape[3]};
        drift_host_parallel_for(nt, x->shape[0] * x->shape[1], row_grain(j.H * j.Dh), rope_rows, &j);
        return DRIFT_OK;
    }
    case DRIFT_OP_ATTENTION: {
        const int ly = op->layout != 0, hd = ly ? 2 : 1, ld = ly ? 1 : 2;
        const int64_t Dh = x->shape[3];
        attn_job j;
        memset(&j, 0, sizeof j);
        j.q = dd(x), j.k = dd(in[1]), j.v = dd(in[2]), j.o = dd(out);
        j.H = x->shape[hd], j.Lq = x->shape[ld], j.Lk = in[1]->shape[ld], j.Dh = Dh, j.Dv = in[2]->shape[3];
        attn_strides(x, ly, j.qs);
        attn_strides(in[1], ly, j.ks);
        attn_strides(in[2], ly, j.vs);
        attn_strides(out, ly, j.os);
        j.scale = op->scale != 0.0f ? (double)op->scale : 1.0 / sqrt((double)Dh);
        if (op->n_in > 3) drift_attn_bias_strides(in[3], j.bs), j.bias = dd(in[3]);
        drift_host_parallel_for(nt, x->shape[0] * j.H * j.Lq, row_grain(j.Lk * (2 * j.Dh + j.Dv)), attn_rows, &j);
        return DRIFT_OK;
    }
    case DRIFT_OP_PERMUTE: run_permute(op, x, out); return DRIFT_OK;
    case DRIFT_OP_NARROW: run_narrow(op, x, out); return DRIFT_OK;
    case DRIFT_OP_CONCAT: run_concat(op, x, in[1], out); return DRIFT_OK;
    case DRIFT_OP_VIEW: memcpy(out->data, x->data, (size_t)x->numel * sizeof(double)); return DRIFT_OK;
    case DRIFT_OP_PATCHIFY:
    case DRIFT_OP_UNPATCHIFY: run_patch(op, x, out); return DRIFT_OK;
    case DRIFT_OP_TIMESTEP_SINUSOID: run_timestep(op, x, out); return DRIFT_OK;
    default:
        if (drift_aten_is_kind(op->kind)) return drift_ref_run_aten(nt, op, in, out, err);
        break;
    }
    return drift_err_set(err, DRIFT_E_UNSUPPORTED, "op", "ref backend: op %s not implemented", drift_op_name(op->kind));
}

static int ref_run(const drift_backend *be, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
                   drift_err *err) {
    return drift_ref_run_op(drift_host_backend_threads(be), op, in, out, err);
}

/* Metrics over fp64 values, with the rules of replay/analysis/metrics.h (pairs with a
 * non-finite side are counted, not summed; first-occurrence argmax; n_diff
 * over fp64 bit patterns, NaN == NaN). The sums run per chunk of
 * DRIFT_ORACLE_METRIC_CHUNK elements from zero, the chunks added to acc in
 * order: the GPU oracle's order (kernels/cuda/ref_cuda.c rc_metrics). */
static int ref_metrics(const drift_backend *be, const drift_tensor *t, const drift_tensor *r, drift_metric_acc *acc,
                       drift_err *err) {
    (void)be;
    (void)err;
    const double *tv = t->data, *rv = r->data;
    const int64_t base = acc->numel;
    for (int64_t i0 = 0; i0 < t->numel; i0 += DRIFT_ORACLE_METRIC_CHUNK) {
        const int64_t i1 = t->numel - i0 < DRIFT_ORACLE_METRIC_CHUNK ? t->numel : i0 + DRIFT_ORACLE_METRIC_CHUNK;
        double sad = 0, ssd = 0, str = 0, stt = 0, srr = 0;
        for (int64_t i = i0; i < i1; i++) {
            const double a = tv[i], b = rv[i];
            const int a_nan = isnan(a), b_nan = isnan(b);
            uint64_t ua, ub;
            memcpy(&ua, &a, 8);
            memcpy(&ub, &b, 8);
            if (ua != ub && !(a_nan && b_nan)) acc->n_diff++;
            if (a_nan)
                acc->nan_t++;
            else if (isinf(a))
                acc->inf_t++;
            if (b_nan)
                acc->nan_r++;
            else if (isinf(b))
                acc->inf_r++;
            if (!isfinite(a) || !isfinite(b)) continue;
            const double d = a - b, ad = fabs(d), ar = fabs(b);
            sad += ad;
            ssd += d * d;
            str += a * b;
            stt += a * a;
            srr += b * b;
            if (acc->argmax < 0 || ad > acc->max_abs_diff) {
                acc->max_abs_diff = ad;
                acc->argmax = base + i;
            }
            if (ar > acc->max_abs_ref) acc->max_abs_ref = ar;
        }
        acc->sum_abs_diff += sad;
        acc->sum_sq_diff += ssd;
        acc->sum_tr += str;
        acc->sum_tt += stt;
        acc->sum_rr += srr;
    }
    acc->numel = base + t->numel;
    return DRIFT_OK;
}

/* The ref backend's entries (name, context, sync and destroy: drift_host_backend_new). */
static const drift_backend ref_iface = {
    .stores = dtype_ok,
    .elem_bytes = ref_elem_bytes,
    .supports_op = ref_supports_op,
    .alloc = ref_alloc,
    .release = ref_release,
    .upload_f32 = ref_upload_f32,
    .upload_f64 = ref_upload_f64,
    .download_f32 = ref_download_f32,
    .download_f64 = ref_download_f64,
    .run = ref_run,
    .metrics = ref_metrics,
    .alias = ref_alias,
};

int drift_ref_backend_create(const drift_backend_opts *o, drift_backend **out, drift_err *err) {
    drift_backend *be = NULL;
    int rc = drift_host_backend_new(o, "ref", &ref_iface, 0, &be, err);
    if (rc) return rc;
    *out = be;
    return DRIFT_OK;
}
