/* The fp64 oracle's bodies of the closed opset's kernels (backend.h
 * DRIFT_OP_BINARY .. DRIFT_OP_NONZERO, REDUCE's variants, UNARY's variants
 * from DRIFT_UNARY_LOG on). Storage is double; integer and bool tensors hold
 * exact integers. Every backend runs these bodies for the ops that touch an
 * integer or fp64 tensor (kernels/cpu/cpu_f64.c, kernels/cuda/f64_cuda.c),
 * so they define the exact ops' results everywhere. Sums run in index order.
 * Transcendentals of the UNARY variants added with the opset are the host's
 * libm (the GPU oracle runs those variants on the host: ref_cuda.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "kernels/aten_internal.h"
#include "kernels/aten_math64.h"
#include "kernels/backend_impl.h"
#include "kernels/ref/ref_opset.h"
#include "kernels/topk_order.h"

static inline double *dd(const drift_tensor *t) { return (double *)t->data; }

/* ---- broadcasting ----------------------------------------------------------- */

typedef struct bview {
    int nd;                       /* the output's ndim */
    int64_t st[DRIFT_MAX_DIMS];   /* the input's stride per output dim (0: broadcast) */
} bview;

static void bview_init(bview *b, const drift_tensor *t, int ond) {
    int64_t s = 1;
    b->nd = ond;
    for (int d = ond - 1; d >= 0; d--) {
        int k = d - (ond - t->ndim);
        if (k < 0) {
            b->st[d] = 0;
            continue;
        }
        b->st[d] = t->shape[k] == 1 ? 0 : s;
        s *= t->shape[k];
    }
}

static int64_t bview_off(const bview *b, const int64_t *oshape, int64_t e) {
    int64_t off = 0;
    for (int d = b->nd - 1; d >= 0 && e; d--) {
        off += (e % oshape[d]) * b->st[d];
        e /= oshape[d];
    }
    return off;
}

/* ---- scalar semantics (shared with the cpu backend's fp32 bodies by formula) ---- */

static double fmax_nan(double a, double b) { return (a != a || b != b) ? NAN : (a > b ? a : b); }
static double fmin_nan(double a, double b) { return (a != a || b != b) ? NAN : (a < b ? a : b); }

double drift_ref_floordiv(double a, double b) {
    if (b == 0.0) return a / b;
    double mod = fmod(a, b), div = (a - mod) / b;
    if (mod != 0.0 && ((b < 0.0) != (mod < 0.0))) div -= 1.0;
    if (div == 0.0) return copysign(0.0, a / b);
    double f = floor(div);
    if (div - f > 0.5) f += 1.0;
    return f;
}

double drift_ref_remainder(double a, double b) {
    double mod = fmod(a, b);
    if (mod != 0.0 && ((b < 0.0) != (mod < 0.0))) mod += b;
    return mod;
}

/* dt's value of v for an integer result (int32 range checked by the caller's error path). */
static double as_int(double v) { return v < 0 ? -floor(-v) : floor(v); }

static int binary_one(int sub, double a, double b, int ints, double *y) {
    switch (sub) {
    case DRIFT_BINARY_MAX: *y = fmax_nan(a, b); return 0;
    case DRIFT_BINARY_MIN: *y = fmin_nan(a, b); return 0;
    case DRIFT_BINARY_POW: *y = ints ? pow(a, b) : drift_m64_pow(a, b); return 0;
    case DRIFT_BINARY_ATAN2: *y = atan2(a, b); return 0;
    case DRIFT_BINARY_REM:
        if (ints && b == 0.0) return -1;
        *y = drift_ref_remainder(a, b);
        return 0;
    case DRIFT_BINARY_FMOD:
        if (ints && b == 0.0) return -1;
        *y = fmod(a, b);
        return 0;
    case DRIFT_BINARY_FLOORDIV:
        if (ints && b == 0.0) return -1;
        *y = ints ? floor(a / b) : drift_ref_floordiv(a, b);
        return 0;
    case DRIFT_BINARY_TRUNCDIV:
        if (ints && b == 0.0) return -1;
        *y = as_int(a / b);
        return 0;
    case DRIFT_BINARY_BITAND: *y = (double)((int64_t)a & (int64_t)b); return 0;
    case DRIFT_BINARY_BITOR: *y = (double)((int64_t)a | (int64_t)b); return 0;
    case DRIFT_BINARY_BITXOR: *y = (double)((int64_t)a ^ (int64_t)b); return 0;
    case DRIFT_BINARY_LOGAND: *y = (a != 0.0) && (b != 0.0); return 0;
    case DRIFT_BINARY_LOGOR: *y = (a != 0.0) || (b != 0.0); return 0;
    case DRIFT_BINARY_LOGXOR: *y = (a != 0.0) != (b != 0.0); return 0;
    case DRIFT_BINARY_EQ: *y = a == b; return 0;
    case DRIFT_BINARY_NE: *y = a != b; return 0;
    case DRIFT_BINARY_LT: *y = a < b; return 0;
    case DRIFT_BINARY_LE: *y = a <= b; return 0;
    case DRIFT_BINARY_GT: *y = a > b; return 0;
    case DRIFT_BINARY_GE: *y = a >= b; return 0;
    default: return -2;
    }
}

double drift_ref_unary_ext(int sub, double x, double p, double q) {
    switch (sub) {
    case DRIFT_UNARY_LOG: return log(x);
    case DRIFT_UNARY_LOG1P: return log1p(x);
    case DRIFT_UNARY_EXPM1: return expm1(x);
    case DRIFT_UNARY_LOG2: return log2(x);
    case DRIFT_UNARY_LOG10: return log10(x);
    case DRIFT_UNARY_ERF: return erf(x);
    case DRIFT_UNARY_FLOOR: return floor(x);
    case DRIFT_UNARY_CEIL: return ceil(x);
    case DRIFT_UNARY_ROUND: return nearbyint(x); /* the default rounding mode: half to even */
    case DRIFT_UNARY_TRUNC: return trunc(x);
    case DRIFT_UNARY_SIGN: return x != x ? x : (x > 0.0) - (x < 0.0);
    case DRIFT_UNARY_TAN: return tan(x);
    case DRIFT_UNARY_ASIN: return asin(x);
    case DRIFT_UNARY_ACOS: return acos(x);
    case DRIFT_UNARY_ATAN: return atan(x);
    case DRIFT_UNARY_SINH: return sinh(x);
    case DRIFT_UNARY_COSH: return cosh(x);
    case DRIFT_UNARY_EXP2: return exp2(x);
    case DRIFT_UNARY_ISNAN: return x != x;
    case DRIFT_UNARY_ISINF: return isinf(x) ? 1.0 : 0.0;
    case DRIFT_UNARY_ISFINITE: return isfinite(x) ? 1.0 : 0.0;
    case DRIFT_UNARY_LOGICAL_NOT: return x == 0.0;
    case DRIFT_UNARY_BITWISE_NOT: return -x - 1.0;
    case DRIFT_UNARY_SOFTPLUS: {
        const double bx = x * p;
        return bx > q ? x : log1p(exp(bx)) / p;
    }
    case DRIFT_UNARY_HARDSIGMOID: return fmin(fmax(x + 3.0, 0.0), 6.0) / 6.0;
    case DRIFT_UNARY_HARDSWISH: return x * fmin(fmax(x + 3.0, 0.0), 6.0) / 6.0;
    case DRIFT_UNARY_MISH: return x * tanh(log1p(exp(x)));
    case DRIFT_UNARY_ELU: return x > 0.0 ? x : p * expm1(x);
    case DRIFT_UNARY_LEAKY_RELU: return x > 0.0 ? x : x * p;
    case DRIFT_UNARY_SQUARE: return x * x;
    case DRIFT_UNARY_FRAC: return x - trunc(x);
    default: return drift_aten_unary64(sub, x);
    }
}

/* ---- bodies ----------------------------------------------------------------- */

static int run_binary(const drift_op *op, const drift_tensor *const *in, drift_tensor *out, drift_err *err) {
    bview ba, bb;
    bview_init(&ba, in[0], out->ndim);
    bview_init(&bb, in[1], out->ndim);
    const int ints = drift_dtype_is_int(in[0]->dtype) && drift_dtype_is_int(in[1]->dtype);
    double *y = dd(out);
    for (int64_t e = 0; e < out->numel; e++) {
        double a = dd(in[0])[bview_off(&ba, out->shape, e)], b = dd(in[1])[bview_off(&bb, out->shape, e)];
        int r = binary_one(op->sub, a, b, ints, &y[e]);
        if (r == -1)
            return drift_err_set(err, DRIFT_E_INPUT, "op binary", "%s: integer division by zero at element %lld",
                                 drift_op_sub_name(op->kind, op->sub), (long long)e);
        if (r) return drift_err_set(err, DRIFT_E_INPUT, "op binary", "unknown variant %d", op->sub);
        if (drift_dtype_is_int(op->out)) y[e] = drift_dtype_round_int(y[e], op->out);
    }
    return DRIFT_OK;
}

static int run_where(const drift_tensor *const *in, drift_tensor *out) {
    bview bc, ba, bb;
    bview_init(&bc, in[0], out->ndim);
    bview_init(&ba, in[1], out->ndim);
    bview_init(&bb, in[2], out->ndim);
    for (int64_t e = 0; e < out->numel; e++)
        dd(out)[e] = dd(in[0])[bview_off(&bc, out->shape, e)] != 0.0 ? dd(in[1])[bview_off(&ba, out->shape, e)]
                                                                     : dd(in[2])[bview_off(&bb, out->shape, e)];
    return DRIFT_OK;
}

static int bad_index(drift_err *err, const char *op, double v, int64_t j, int64_t n) {
    return drift_err_set(err, DRIFT_E_INPUT, op, "index %.0f at position %lld is outside [0, %lld)", v, (long long)j,
                         (long long)n);
}

static int run_take(const drift_tensor *const *in, drift_tensor *out, drift_err *err) {
    const int64_t n = in[0]->numel;
    for (int64_t j = 0; j < out->numel; j++) {
        double v = dd(in[1])[j];
        if (!(v >= 0.0 && v < (double)n)) return bad_index(err, "op take", v, j, n);
        dd(out)[j] = dd(in[0])[(int64_t)v];
    }
    return DRIFT_OK;
}

static int run_put(const drift_op *op, const drift_tensor *const *in, drift_tensor *out, drift_err *err) {
    const int64_t n = out->numel;
    memcpy(out->data, in[0]->data, (size_t)n * sizeof(double));
    for (int64_t j = 0; j < in[1]->numel; j++) {
        double v = dd(in[1])[j];
        if (!(v >= 0.0 && v < (double)n)) return bad_index(err, "op put", v, j, n);
        double *o = &dd(out)[(int64_t)v];
        const double w = dd(in[2])[j];
        switch (op->sub) {
        case 1: *o += w; break;
        case 2: *o = (*o != *o || w != w) ? NAN : fmax(*o, w); break; /* amax: NaN wins, as torch's */
        case 3: *o = (*o != *o || w != w) ? NAN : fmin(*o, w); break;
        case 4: *o *= w; break;
        default: *o = w; break;
        }
    }
    return DRIFT_OK;
}

/* outer x n x inner decomposition of a dim (or a span of dims) of t */
static void split_dims(const drift_tensor *t, int d, int span, int64_t *outer, int64_t *n, int64_t *inner) {
    *outer = *n = *inner = 1;
    for (int i = 0; i < d; i++) *outer *= t->shape[i];
    for (int i = d; i < d + span && i < t->ndim; i++) *n *= t->shape[i];
    for (int i = d + span; i < t->ndim; i++) *inner *= t->shape[i];
}

typedef struct sort_key {
    double v;
    int64_t i;
    int desc;
} sort_key;

/* NaN above every number; ties in index order (stable) either way */
static int sort_cmp(const void *pa, const void *pb) {
    const sort_key *a = pa, *b = pb;
    int an = a->v != a->v, bn = b->v != b->v;
    int c = an || bn ? (an - bn) : (a->v > b->v) - (a->v < b->v);
    if (a->desc) c = -c;
    if (c) return c;
    return (a->i > b->i) - (a->i < b->i);
}

static int run_argsort(const drift_op *op, const drift_tensor *x, drift_tensor *out, drift_err *err) {
    int d = x->ndim ? drift_op_norm_dim(op->dim, x->ndim) : 0;
    int64_t outer, n, inner;
    split_dims(x, d, x->ndim ? 1 : 0, &outer, &n, &inner);
    const int64_t topk = op->length; /* > 0: the first topk in torch's CUDA topk order */
    sort_key *k = drift_malloc((size_t)(n > 0 ? n : 1) * sizeof *k);
    int64_t *perm = drift_malloc((size_t)(n > 0 ? n : 1) * 2 * sizeof *perm);
    if (!k || !perm) {
        drift_free(k);
        drift_free(perm);
        return drift_err_set(err, DRIFT_E_NOMEM, "op argsort", "out of memory");
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t q = 0; q < inner; q++) {
            const double *xs = dd(x) + o * n * inner + q;
            for (int64_t i = 0; i < n; i++) k[i] = (sort_key){xs[i * inner], i, op->sub};
            qsort(k, (size_t)n, sizeof *k, sort_cmp);
            for (int64_t i = 0; i < n; i++) perm[i] = k[i].i;
            if (topk > 0 && topk <= n) { /* the same k as the stable order's first k, torch's order */
                drift_topk_torch_order(xs, inner, n, topk, op->sub, (int)op->start, perm, perm + n);
                for (int64_t i = 0; i < topk; i++) perm[i] = perm[n + i];
            }
            for (int64_t i = 0; i < n; i++) dd(out)[(o * n + i) * inner + q] = (double)perm[i];
        }
    drift_free(k);
    drift_free(perm);
    return DRIFT_OK;
}

static void run_cumsum(const drift_op *op, const drift_tensor *x, drift_tensor *out) {
    int d = x->ndim ? drift_op_norm_dim(op->dim, x->ndim) : 0;
    int64_t outer, n, inner;
    split_dims(x, d, x->ndim ? 1 : 0, &outer, &n, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t q = 0; q < inner; q++) {
            double acc = op->sub ? 1.0 : 0.0;
            for (int64_t i = 0; i < n; i++) {
                int64_t at = (o * n + i) * inner + q;
                acc = op->sub ? acc * dd(x)[at] : acc + dd(x)[at];
                dd(out)[at] = acc;
            }
        }
}

static void run_softmax(const drift_op *op, const drift_tensor *x, drift_tensor *out) {
    int d = x->ndim ? drift_op_norm_dim(op->dim, x->ndim) : 0;
    int64_t outer, n, inner;
    split_dims(x, d, x->ndim ? 1 : 0, &outer, &n, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t q = 0; q < inner; q++) {
            const double *a = dd(x) + o * n * inner + q;
            double *y = dd(out) + o * n * inner + q;
            double m = -INFINITY, s = 0.0;
            for (int64_t i = 0; i < n; i++) m = fmax_nan(m, a[i * inner]);
            const double mm = m == -INFINITY ? 0.0 : m; /* every input -inf: no NaN from -inf - -inf */
            for (int64_t i = 0; i < n; i++) s += drift_m64_exp(a[i * inner] - mm);
            const double ls = drift_m64_log(s);
            for (int64_t i = 0; i < n; i++)
                y[i * inner] = op->sub ? (a[i * inner] - mm) - ls : drift_m64_exp(a[i * inner] - mm) / s;
        }
}

static void run_bmm(const drift_op *op, const drift_tensor *const *in, drift_tensor *out) {
    const drift_tensor *A = in[0], *B = in[1];
    const int nd = A->ndim;
    const int64_t M = A->shape[nd - 2], K = A->shape[nd - 1], N = B->shape[nd - 1];
    const int64_t batch = M * N > 0 ? out->numel / (M * N) : 0;
    bview bc;
    if (op->n_in > 2) bview_init(&bc, in[2], out->ndim);
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double acc = 0.0;
                const double *a = dd(A) + (b * M + i) * K, *bb = dd(B) + b * K * N + j;
                for (int64_t k = 0; k < K; k++) acc += a[k] * bb[k * N];
                const int64_t e = (b * M + i) * N + j;
                double r = (double)op->alpha * acc;
                if (op->n_in > 2 && op->beta != 0.0f) r += (double)op->beta * dd(in[2])[bview_off(&bc, out->shape, e)];
                dd(out)[e] = r;
            }
}

static void run_group_norm(const drift_op *op, const drift_tensor *const *in, drift_tensor *out) {
    const drift_tensor *x = in[0];
    const int64_t N = x->shape[0], C = x->shape[1], G = op->length, cg = C / G;
    int64_t sp = 1;
    for (int i = 2; i < x->ndim; i++) sp *= x->shape[i];
    const int64_t cnt = cg * sp;
    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < G; g++) {
            const int64_t base = (n * C + g * cg) * sp;
            const double *a = dd(x) + base;
            double s = 0.0, q = 0.0;
            for (int64_t i = 0; i < cnt; i++) s += a[i];
            const double mean = s / (double)cnt;
            for (int64_t i = 0; i < cnt; i++) q += (a[i] - mean) * (a[i] - mean);
            const double rstd = 1.0 / sqrt(q / (double)cnt + (double)op->eps);
            for (int64_t i = 0; i < cnt; i++) {
                const int64_t c = g * cg + i / sp;
                double v = (a[i] - mean) * rstd;
                if (op->n_in > 1) v *= dd(in[1])[c];
                if (op->n_in > 2) v += dd(in[2])[c];
                dd(out)[base + i] = v;
            }
        }
}

static int run_nonzero(const drift_tensor *x, drift_tensor *out, drift_err *err) {
    int64_t cnt = 0;
    for (int64_t e = 0; e < x->numel; e++) cnt += dd(x)[e] != 0.0;
    if (cnt != out->shape[0])
        return drift_err_set(err, DRIFT_E_INPUT, "op nonzero",
                             "%lld non-zero elements where the recording had %lld: the graph is specialised to the "
                             "recorded data", (long long)cnt, (long long)out->shape[0]);
    int64_t r = 0;
    for (int64_t e = 0; e < x->numel; e++) {
        if (dd(x)[e] == 0.0) continue;
        int64_t rem = e;
        for (int d = x->ndim - 1; d >= 0; d--) {
            dd(out)[r * x->ndim + d] = (double)(rem % x->shape[d]);
            rem /= x->shape[d];
        }
        r++;
    }
    return DRIFT_OK;
}

int drift_ref_reduce(const drift_op *op, const drift_tensor *x, drift_tensor *out) {
    const int d = drift_op_norm_dim(op->dim, x->ndim);
    const int span = op->length > 0 ? (int)op->length : 1;
    int64_t outer, n, inner;
    split_dims(x, d, span, &outer, &n, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < inner; k++) {
            const double *a = dd(x) + o * n * inner + k;
            double r;
            switch (op->sub) {
            case DRIFT_REDUCE_SUM:
            case DRIFT_REDUCE_MEAN:
                r = 0.0;
                for (int64_t i = 0; i < n; i++) r += a[i * inner];
                if (op->sub == DRIFT_REDUCE_MEAN) r /= (double)n;
                break;
            case DRIFT_REDUCE_PROD:
                r = 1.0;
                for (int64_t i = 0; i < n; i++) r *= a[i * inner];
                break;
            case DRIFT_REDUCE_AMAX:
            case DRIFT_REDUCE_AMIN:
                r = a[0];
                for (int64_t i = 1; i < n; i++)
                    r = op->sub == DRIFT_REDUCE_AMAX ? fmax_nan(r, a[i * inner]) : fmin_nan(r, a[i * inner]);
                break;
            case DRIFT_REDUCE_ANY:
            case DRIFT_REDUCE_ALL: {
                int any = 0, all = 1;
                for (int64_t i = 0; i < n; i++) {
                    any |= a[i * inner] != 0.0;
                    all &= a[i * inner] != 0.0;
                }
                r = op->sub == DRIFT_REDUCE_ANY ? any : all;
                break;
            }
            case DRIFT_REDUCE_ARGMAX:
            case DRIFT_REDUCE_ARGMIN: {
                int64_t best = 0;
                double bv = a[0];
                for (int64_t i = 1; i < n && bv == bv; i++) {
                    double v = a[i * inner];
                    if (v != v || (op->sub == DRIFT_REDUCE_ARGMAX ? v > bv : v < bv)) {
                        best = i;
                        bv = v;
                    }
                }
                r = (double)best;
                break;
            }
            case DRIFT_REDUCE_VAR: {
                double s = 0.0, q = 0.0;
                for (int64_t i = 0; i < n; i++) s += a[i * inner];
                const double mean = s / (double)n;
                for (int64_t i = 0; i < n; i++) q += (a[i * inner] - mean) * (a[i * inner] - mean);
                r = q / ((double)n - op->scalar);
                break;
            }
            default: r = 0.0; break;
            }
            dd(out)[o * inner + k] = r;
        }
    return DRIFT_OK;
}

int drift_ref_run_opset(const drift_op *op, const drift_tensor *const *in, drift_tensor *out, drift_err *err) {
    switch (op->kind) {
    case DRIFT_OP_UNARY:
        for (int64_t i = 0; i < out->numel; i++) {
            double v = drift_ref_unary_ext(op->sub, dd(in[0])[i], op->scalar, op->step);
            dd(out)[i] = drift_dtype_is_int(op->out) ? drift_dtype_round_int(v, op->out) : v;
        }
        return DRIFT_OK;
    case DRIFT_OP_REDUCE: return drift_ref_reduce(op, in[0], out);
    case DRIFT_OP_BINARY: return run_binary(op, in, out, err);
    case DRIFT_OP_WHERE: return run_where(in, out);
    case DRIFT_OP_TAKE: return run_take(in, out, err);
    case DRIFT_OP_PUT: return run_put(op, in, out, err);
    case DRIFT_OP_ARGSORT: return run_argsort(op, in[0], out, err);
    case DRIFT_OP_CUMSUM: run_cumsum(op, in[0], out); return DRIFT_OK;
    case DRIFT_OP_SOFTMAX: run_softmax(op, in[0], out); return DRIFT_OK;
    case DRIFT_OP_BMM: run_bmm(op, in, out); return DRIFT_OK;
    case DRIFT_OP_GROUP_NORM: run_group_norm(op, in, out); return DRIFT_OK;
    case DRIFT_OP_NONZERO: return run_nonzero(in[0], out, err);
    default: break;
    }
    return drift_err_set(err, DRIFT_E_UNSUPPORTED, "op", "ref backend: op %s not implemented", drift_op_name(op->kind));
}
