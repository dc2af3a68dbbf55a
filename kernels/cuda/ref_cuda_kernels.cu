// The fp64 oracle's kernels on the GPU (ref_cuda_internal.h): the formulas
// of kernels/ref/ref_backend.c in double, one thread per output element, or
// one thread per row for every sum (in the CPU's index order; rows staged
// through shared memory in 32 x 32 tiles so that loads stay coalesced).
// Maxima (order-free) reduce in a tree. The elementwise math is
// kernels/aten_math64.h's, shared with the CPU. Compiled with --fmad=false:
// a * b + c stays a multiply and an add, as on the host.
#include "kernels/aten_math64.h"
#include "kernels/cuda/ref_cuda_internal.h"

#include <math.h>

#define RCU_THREADS 256

static unsigned grid_for(int64_t n) {
    int64_t g = (n + RCU_THREADS - 1) / RCU_THREADS;
    if (g < 1) g = 1;
    if (g > 65535 * 16) g = 65535 * 16;
    return (unsigned)g;
}

#define GRID_STRIDE(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

__global__ void k_unary(int op, const double *x, double *y, int64_t n, double al, double be) {
    GRID_STRIDE(i, n) {
        const double v = x[i];
        double r = v;
        if (op == RCU_UN_AFFINE) r = v * al + be;
        else if (op == RCU_UN_SILU) r = drift_aten_silu64(v);
        else if (op == RCU_UN_GELU_TANH) r = drift_aten_gelu_tanh64(v);
        y[i] = r;
    }
}

struct bin_args {
    int nd;
    int64_t shape[DRIFT_MAX_DIMS], sa[DRIFT_MAX_DIMS], sb[DRIFT_MAX_DIMS];
};

__global__ void k_binary(int op, const double *a, const double *b, double *y, bin_args g, int64_t n) {
    GRID_STRIDE(e, n) {
        int64_t rem = e, oa = 0, ob = 0;
        for (int d = g.nd - 1; d >= 0; d--) {
            const int64_t c = rem % g.shape[d];
            rem /= g.shape[d];
            oa += c * g.sa[d];
            ob += c * g.sb[d];
        }
        const double u = a[oa], v = b[ob];
        y[e] = op == RCU_BIN_ADD ? u + v : op == RCU_BIN_SUB ? u - v : op == RCU_BIN_MUL ? u * v : u / v;
    }
}


__global__ void k_aten_ew(int scalar_op, int sub, const double *x, double *y, int64_t n, double s) {
    GRID_STRIDE(i, n) y[i] = scalar_op ? drift_aten_scalar64(sub, x[i], s) : drift_aten_unary64(sub, x[i]);
}

// One thread per output element, summing in index order (as the CPU oracle: bitwise equal).
__global__ void k_reduce(const double *x, double *y, int64_t outer, int64_t n, int64_t inner, int mean) {
    GRID_STRIDE(e, outer * inner) {
        const int64_t o = e / inner, k = e % inner;
        double s = 0.0;
        for (int64_t i = 0; i < n; i++) s += x[(o * n + i) * inner + k];
        y[e] = mean ? s / (double)n : s;
    }
}

__global__ void k_fill(double *y, int64_t n, int sub, double value, double step) {
    GRID_STRIDE(i, n) {
        if (sub == 2) y[i] = n > 1 ? value + (step - value) * (double)i / (double)(n - 1) : value;
        else y[i] = sub ? value + (double)i * step : value;
    }
}

#define RS_T 32
enum { RS_SUM = 0, RS_SQ, RS_DEV2 };         // terms: v, v * v, (v - mu[r]) * (v - mu[r])
enum { RS_RAW = 0, RS_MEAN, RS_RSTD };      // out: s, s / cols, 1 / sqrt(s / cols + eps)

// out[r] = post(sum over c < cols, from +0.0 in column order, of term(x[r*ld + c])):
// one thread per row, 32 rows per block (one warp), 32 x 32 tiles of x through
// shared memory. The CPU's norm_rows / attn_rows sums, bit for bit.
__global__ void __launch_bounds__(RS_T) k_rowsum_seq(int term, int post, const double *x, int64_t ld, int64_t rows,
                                                     int64_t cols, const double *mu, double eps, double *out) {
    __shared__ double sh[RS_T][RS_T + 1];
    const int t = threadIdx.x;
    const int64_t r0 = (int64_t)blockIdx.x * RS_T, my = r0 + t;
    const double m = term == RS_DEV2 && my < rows ? mu[my] : 0.0;
    double s = 0.0;
    for (int64_t c0 = 0; c0 < cols; c0 += RS_T) {
        const int n = cols - c0 < RS_T ? (int)(cols - c0) : RS_T;
        for (int i = 0; i < RS_T; i++)
            if (r0 + i < rows && t < n) sh[i][t] = x[(r0 + i) * ld + c0 + t];
        __syncthreads();
        if (my < rows)
            for (int j = 0; j < n; j++) {
                const double v = sh[t][j];
                const double d = term == RS_DEV2 ? __dsub_rn(v, m) : v;
                s = __dadd_rn(s, term == RS_SUM ? v : __dmul_rn(d, d));
            }
        __syncthreads();
    }
    if (my < rows) out[my] = post == RS_RAW ? s : post == RS_MEAN ? s / (double)cols : 1.0 / sqrt(s / (double)cols + eps);
}

static cudaError_t rowsum(cudaStream_t s, int term, int post, const double *x, int64_t ld, int64_t rows, int64_t cols,
                          const double *mu, double eps, double *out) {
    if (rows <= 0) return cudaSuccess;
    const int64_t blocks = (rows + RS_T - 1) / RS_T;
    if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
    k_rowsum_seq<<<(unsigned)blocks, RS_T, 0, s>>>(term, post, x, ld, rows, cols, mu, eps, out);
    return cudaGetLastError();
}

__device__ double block_max(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = RCU_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s && sh[threadIdx.x + s] > sh[threadIdx.x]) sh[threadIdx.x] = sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

// y from the row statistics: LAYER_NORM ((x - mean) * rstd) [* w] [+ b], RMS_NORM (x * rstd) [* w].
__global__ void k_norm_apply(int kind, const double *x, const double *w, const double *b, double *y, int64_t rows,
                             int64_t D, const double *mean, const double *rstd) {
    GRID_STRIDE(e, rows * D) {
        const int64_t r = e / D, i = e % D;
        double t;
        if (kind == RCU_LAYER_NORM) {
            t = (x[e] - mean[r]) * rstd[r];
            if (w) t *= w[i];
            if (b) t += b[i];
        } else {
            t = x[e] * rstd[r];
            if (w) t *= w[i];
        }
        y[e] = t;
    }
}

__global__ void k_rope(const double *x, const double *cs, const double *sn, double *y, int64_t B, int64_t L, int64_t H,
                       int64_t Dh) {
    const int64_t half = Dh / 2, n = B * L * H * half;
    GRID_STRIDE(e, n) {
        const int64_t i = e % half, rh = e / half, r = rh / H, l = r % L;
        const int64_t o = rh * Dh;
        const double x0 = x[o + 2 * i], x1 = x[o + 2 * i + 1];
        const double c0 = cs[l * Dh + 2 * i], s1 = sn[l * Dh + 2 * i + 1];
        y[o + 2 * i] = x0 * c0 - x1 * s1;
        y[o + 2 * i + 1] = x0 * s1 + x1 * c0;
    }
}

// Per row: m = its max (the CPU's `if (s > m) m = s` from -inf: NaN never wins), s = exp(s - m).
__global__ void k_softmax_exp(double *sc, int64_t rows, int64_t cols) {
    __shared__ double sh[RCU_THREADS];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        double *s = sc + r * cols;
        double m = -INFINITY;
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = s[c] > m ? s[c] : m;
        m = block_max(m, sh);
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s[c] = drift_m64_exp(s[c] - m);
    }
}

__global__ void k_copy(const double *src, double *dst, rcu_copy c) {
    GRID_STRIDE(e, c.n) {
        int64_t rem = e, so = c.soff, dso = c.doff;
        for (int d = c.nd - 1; d >= 0; d--) {
            const int64_t k = rem % c.shape[d];
            rem /= c.shape[d];
            so += k * c.ss[d];
            dso += k * c.ds[d];
        }
        dst[dso] = src[so];
    }
}

__global__ void k_patch(int unp, int cl, const double *x, double *y, int64_t B, int64_t C, int64_t F, int64_t H, int64_t W,
                        int64_t pf, int64_t ph, int64_t pw) {
    const int64_t Fp = F / pf, Hp = H / ph, Wp = W / pw, L = Fp * Hp * Wp, P = C * pf * ph * pw;
    const int64_t n = B * C * Fp * pf * Hp * ph * Wp * pw;
    GRID_STRIDE(e, n) {
        // e enumerates (b, c, f, h, w) of the covered image region
        int64_t rem = e;
        const int64_t w = rem % (Wp * pw); rem /= Wp * pw;
        const int64_t h = rem % (Hp * ph); rem /= Hp * ph;
        const int64_t f = rem % (Fp * pf); rem /= Fp * pf;
        const int64_t c = rem % C, b = rem / C;
        const int64_t t = ((f / pf) * Hp + h / ph) * Wp + w / pw, i = f % pf, j = h % ph, k = w % pw;
        const int64_t img = (((b * C + c) * F + f) * H + h) * W + w;
        if (unp) y[img] = x[(b * L + t) * P + ((i * ph + j) * pw + k) * C + c];
        else if (cl) y[(b * L + t) * P + ((i * ph + j) * pw + k) * C + c] = x[img];  // PATCHIFY layout 1
        else y[(b * L + t) * P + ((c * pf + i) * ph + j) * pw + k] = x[img];
    }
}

__global__ void k_timestep(const double *t, double *y, int64_t B, int64_t dim, double mp, int flip) {
    const int64_t half = dim / 2;
    GRID_STRIDE(e, B * half) {
        const int64_t b = e / half, j = e % half;
        const double arg = drift_aten_timestep_arg64(t[b], j, half, mp), sn = drift_m64_sin(arg), cs = drift_m64_cos(arg);
        y[b * dim + j] = flip ? cs : sn;
        y[b * dim + half + j] = flip ? sn : cs;
        if (j == 0 && dim % 2) y[b * dim + dim - 1] = 0.0;
    }
}

// One thread per chunk of DRIFT_ORACLE_METRIC_CHUNK elements, in index order
// from zero: the CPU's ref_metrics per chunk, bit for bit.
__global__ void k_metrics(const double *t, const double *r, int64_t n, rcu_metric_part *out) {
    GRID_STRIDE(ch, (n + DRIFT_ORACLE_METRIC_CHUNK - 1) / DRIFT_ORACLE_METRIC_CHUNK) {
        rcu_metric_part p = {0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0};
        const int64_t i0 = ch * DRIFT_ORACLE_METRIC_CHUNK;
        const int64_t i1 = n - i0 < DRIFT_ORACLE_METRIC_CHUNK ? n : i0 + DRIFT_ORACLE_METRIC_CHUNK;
        for (int64_t i = i0; i < i1; i++) {
            const double a = t[i], b = r[i];
            const int an = isnan(a), bn = isnan(b);
            if (__double_as_longlong(a) != __double_as_longlong(b) && !(an && bn)) p.n_diff++;
            if (an) p.nan_t++;
            else if (isinf(a)) p.inf_t++;
            if (bn) p.nan_r++;
            else if (isinf(b)) p.inf_r++;
            if (!isfinite(a) || !isfinite(b)) continue;
            const double d = a - b, ad = fabs(d), ar = fabs(b);
            p.sum_abs += ad;
            p.sum_sq += d * d;
            p.sum_tr += a * b;
            p.sum_tt += a * a;
            p.sum_rr += b * b;
            if (p.arg < 0 || ad > p.max_d) { p.max_d = ad; p.arg = i; } // first occurrence
            if (ar > p.max_ref) p.max_ref = ar;
        }
        out[ch] = p;
    }
}

// fp64 <-> fp32 on the device (IEEE round to nearest even, as the host's casts).
__global__ void k_to_f32(const double *x, float *y, int64_t n) {
    GRID_STRIDE(i, n) y[i] = (float)x[i];
}
__global__ void k_from_f32(const float *x, double *y, int64_t n) {
    GRID_STRIDE(i, n) y[i] = (double)x[i];
}

extern "C" {

cudaError_t rcu_unary(cudaStream_t s, int op, const double *x, double *y, int64_t n, double alpha, double beta) {
    k_unary<<<grid_for(n), RCU_THREADS, 0, s>>>(op, x, y, n, alpha, beta);
    return cudaGetLastError();
}

cudaError_t rcu_binary(cudaStream_t s, int op, const double *a, const double *b, double *y, int nd,
                       const int64_t *shape, const int64_t *sa, const int64_t *sb, int64_t n) {
    bin_args g;
    g.nd = nd;
    for (int d = 0; d < DRIFT_MAX_DIMS; d++) {
        g.shape[d] = d < nd ? shape[d] : 1;
        g.sa[d] = d < nd ? sa[d] : 0;
        g.sb[d] = d < nd ? sb[d] : 0;
    }
    k_binary<<<grid_for(n), RCU_THREADS, 0, s>>>(op, a, b, y, g, n);
    return cudaGetLastError();
}

cudaError_t rcu_aten_ew(cudaStream_t s, int scalar_op, int sub, const double *x, double *y, int64_t n, double scalar) {
    k_aten_ew<<<grid_for(n), RCU_THREADS, 0, s>>>(scalar_op, sub, x, y, n, scalar);
    return cudaGetLastError();
}

cudaError_t rcu_reduce(cudaStream_t s, const double *x, double *y, int64_t outer, int64_t n, int64_t inner, int mean) {
    k_reduce<<<grid_for(outer * inner), RCU_THREADS, 0, s>>>(x, y, outer, n, inner, mean);
    return cudaGetLastError();
}

cudaError_t rcu_fill(cudaStream_t s, double *y, int64_t n, int sub, double value, double step) {
    k_fill<<<grid_for(n), RCU_THREADS, 0, s>>>(y, n, sub, value, step);
    return cudaGetLastError();
}

cudaError_t rcu_norm(cudaStream_t s, int kind, const double *x, const double *w, const double *b, double *y,
                     int64_t rows, int64_t D, double eps, double *scratch) {
    double *mean = scratch, *rstd = scratch + rows;
    cudaError_t e = cudaSuccess;
    if (kind == RCU_LAYER_NORM) {
        e = rowsum(s, RS_SUM, RS_MEAN, x, D, rows, D, NULL, eps, mean);
        if (e == cudaSuccess) e = rowsum(s, RS_DEV2, RS_RSTD, x, D, rows, D, mean, eps, rstd);
    } else {
        e = rowsum(s, RS_SQ, RS_RSTD, x, D, rows, D, NULL, eps, rstd);
    }
    if (e != cudaSuccess) return e;
    k_norm_apply<<<grid_for(rows * D), RCU_THREADS, 0, s>>>(kind, x, w, b, y, rows, D, mean, rstd);
    return cudaGetLastError();
}

cudaError_t rcu_rope(cudaStream_t s, const double *x, const double *cs, const double *sn, double *y, int64_t B,
                     int64_t L, int64_t H, int64_t Dh) {
    k_rope<<<grid_for(B * L * H * (Dh / 2)), RCU_THREADS, 0, s>>>(x, cs, sn, y, B, L, H, Dh);
    return cudaGetLastError();
}

cudaError_t rcu_softmax_rows(cudaStream_t s, double *sc, int64_t rows, int64_t cols, double *l) {
    unsigned g = rows < 65535 * 16 ? (unsigned)(rows > 0 ? rows : 1) : 65535 * 16;
    k_softmax_exp<<<g, RCU_THREADS, 0, s>>>(sc, rows, cols);
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : rowsum(s, RS_SUM, RS_RAW, sc, cols, rows, cols, NULL, 0.0, l);
}

cudaError_t rcu_copy_run(cudaStream_t s, const double *src, double *dst, const rcu_copy *c) {
    k_copy<<<grid_for(c->n), RCU_THREADS, 0, s>>>(src, dst, *c);
    return cudaGetLastError();
}

cudaError_t rcu_patch(cudaStream_t s, int unpatchify, int channels_last, const double *x, double *y, int64_t B,
                      int64_t C, int64_t F, int64_t H, int64_t W, int64_t pf, int64_t ph, int64_t pw) {
    k_patch<<<grid_for(B * C * F * H * W), RCU_THREADS, 0, s>>>(unpatchify, channels_last, x, y, B, C, F, H, W, pf,
                                                                ph, pw);
    return cudaGetLastError();
}

cudaError_t rcu_timestep(cudaStream_t s, const double *t, double *y, int64_t B, int64_t dim, double max_period,
                         int flip) {
    k_timestep<<<grid_for(B * (dim / 2 > 0 ? dim / 2 : 1)), RCU_THREADS, 0, s>>>(t, y, B, dim, max_period, flip);
    return cudaGetLastError();
}

cudaError_t rcu_to_f32(cudaStream_t s, const double *x, float *y, int64_t n) {
    k_to_f32<<<grid_for(n), RCU_THREADS, 0, s>>>(x, y, n);
    return cudaGetLastError();
}

cudaError_t rcu_from_f32(cudaStream_t s, const float *x, double *y, int64_t n) {
    k_from_f32<<<grid_for(n), RCU_THREADS, 0, s>>>(x, y, n);
    return cudaGetLastError();
}

cudaError_t rcu_metrics(cudaStream_t s, const double *t, const double *r, int64_t n, rcu_metric_part *part) {
    k_metrics<<<grid_for((n + DRIFT_ORACLE_METRIC_CHUNK - 1) / DRIFT_ORACLE_METRIC_CHUNK), RCU_THREADS, 0, s>>>(t, r, n, part);
    return cudaGetLastError();
}

} // extern "C"
