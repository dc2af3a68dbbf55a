/* The op library's one door (DESIGN.md s10, after ggml's ggml-backend.h):
 * an opaque drift_backend and the drift_backend_* functions below, which
 * check their arguments once (shapes, numel against shape, dtypes, n_in,
 * ownership, overlap) and then dispatch to the backend's function table.
 * The table itself is private to kernels/ (kernels/backend_impl.h); ref
 * (fp64 oracle), cpu (exact dtype emulation) and cuda implement it with the
 * same semantics.
 *
 * Numeric contract (DESIGN.md s4), which every backend honours:
 *  - A tensor's values are always exactly representable in its dtype.
 *  - Ops take their inputs as they are (the executor inserts explicit CAST
 *    ops beforehand); elementwise ops compute in fp32 ("opmath") in the
 *    order documented per op, with no FMA contraction, and round once to
 *    op->out. GEMMs multiply the operands exactly, accumulate in fp32 and
 *    round once to op->out (bias added in fp32 before that rounding when
 *    fused). Norms accumulate in fp32.
 *  - The ref backend ignores dtypes: it stores fp64, computes in fp64 and
 *    never rounds. It is the oracle and the reference in kernel tests.
 *  - Every backend stores fp64 tensors. cpu and cuda run an op that touches
 *    fp64 (op->out, op->compute or an input F64) with the oracle's own
 *    bodies (inputs widened exactly; a non-fp64 out rounded to fp32, then
 *    to its dtype): bit for bit the ref backend's values. */
#ifndef DRIFT_KERNELS_BACKEND_H
#define DRIFT_KERNELS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "formats/dtype.h"
#include "formats/err.h"
#include "formats/libraries.h"
#include "formats/params.h" /* DRIFT_MAX_DIMS */

typedef enum drift_op_kind {
    DRIFT_OP_CAST = 0,     /* in0 -> out: round to op->out */
    DRIFT_OP_LINEAR,       /* in0 x[..., K], in1 W[N, K], optional in2 bias[N] (fused epilogue):
                              y[..., N] = x W^T (+ b); fp32 accumulate, one rounding */
    DRIFT_OP_ADD,          /* in0 + in1, numpy broadcasting of in1 against in0's shape */
    DRIFT_OP_SUB,          /* in0 - in1, broadcasting as ADD */
    DRIFT_OP_MUL,          /* in0 * in1, broadcasting as ADD */
    DRIFT_OP_AFFINE,       /* y = in0 * alpha + beta (fp32: t = x*alpha; y = t+beta) */
    DRIFT_OP_SILU,         /* y = x / (1 + exp(-x)) in fp32 */
    DRIFT_OP_GELU_TANH,    /* y = 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) in fp32 */
    DRIFT_OP_LAYER_NORM,   /* over the last dim; optional in1 weight[D], in2 bias[D] (n_in says);
                              mean and biased variance in fp32, y = (x-mean)*rsqrt(var+eps)*w+b */
    DRIFT_OP_RMS_NORM,     /* over the last dim; optional in1 weight[D]; in fp32:
                              y = round_out((x*rsqrt(mean(x^2)+eps)) * w), one rounding (torch 2.11:
                              the fused kernel and the composite alike; tests/gpu/rms_norm_probe.py) */
    DRIFT_OP_ROPE,         /* in0 x[B, L, H, Dh], in1 cos[L, Dh], in2 sin[L, Dh] (fp32 tables);
                              pairs (x[2i], x[2i+1]): out[2i] = x0*cos[2i] - x1*sin[2i+1],
                              out[2i+1] = x0*sin[2i+1] + x1*cos[2i]; fp32, one rounding */
    DRIFT_OP_ATTENTION,    /* in0 q[B, H, Lq, Dh], in1 k[B, H, Lk, Dh], in2 v[B, H, Lk, Dv]
                              -> out[B, H, Lq, Dv] (layout 0), or with layout 1 q[B, Lq, H, Dh],
                              k[B, Lk, H, Dh], v[B, Lk, H, Dv] -> out[B, Lq, H, Dv] (the linear's
                              output viewed per head, no permutes): the same math on the same
                              (b, h, l, d) elements, bitwise equal to layout 0 on permuted data:
                              s = q k^T * scale (fp32 accumulate), p = exp(s - rowmax) fp32,
                              l = sum p (fp32), p rounded to op->compute, o = (p v)/l fp32,
                              rounded to op->out. Optional in3: an fp32 additive bias
                              [Bb, Hb, Lqb, Lk] (this order in both layouts; Bb in {1, B},
                              Hb in {1, H}, Lqb in {1, Lq}: broadcast over the dims of size
                              1) added after the scale, s = fl(q k^T * scale) + bias, before
                              the softmax (SDPA's attn_mask: a -inf bias is probability 0, a
                              row of -inf biases gives NaN, as a plain softmax does).
                              op->sub: the order of a flash kernel's key tiles where a backend
                              runs one (drift_attn_order; the cpu's 16-bit flash order) */
    DRIFT_OP_PERMUTE,      /* out[...] = in0 permuted by perm[0..ndim-1] (out dim i = in dim perm[i]) */
    DRIFT_OP_NARROW,       /* slice of in0 along dim: [start, start+length) */
    DRIFT_OP_CONCAT,       /* in0 ++ in1 along dim (same dtype) */
    DRIFT_OP_VIEW,         /* same data, new shape (out's shape), numel equal */
    DRIFT_OP_PATCHIFY,     /* in0 latents[B, C, F, H, W] -> [B, (F/pf)(H/ph)(W/pw), C*pf*ph*pw],
                              token order (f, h, w); feature order per op->layout: 0 = (c, pf, ph, pw)
                              as Conv3d weights flatten, 1 = channels-last (pf, ph, pw, c), the K order
                              of cuDNN's NHWC implicit GEMM (a conv lowered with its weight permuted) */
    DRIFT_OP_UNPATCHIFY,   /* inverse of PATCHIFY for in0 [B, L, C*pf*ph*pw] into out's [B, C, F, H, W]
                              (feature order (pf, ph, pw, c) as diffusers Wan's proj_out reshape) */
    DRIFT_OP_TIMESTEP_SINUSOID, /* in0 t[B] -> [B, dim]: half = dim/2,
                              freq_j = exp(-ln(max_period) * j / half) (fp32),
                              arg = t*freq_j, out = flip ? [cos, sin] : [sin, cos] (fp32) */
    /* ATen-level ops of captured graphs (replay/capture; kernels/aten_shapes.c,
     * ref/ref_aten_ops.c, cpu/cpu_aten_ops.c). Elementwise ones compute in
     * opmath (fp32; fp64 for fp64) and round once to op->out. */
    DRIFT_OP_UNARY,        /* y = f(x), f = op->sub (drift_unary_kind) */
    DRIFT_OP_SCALAR,       /* y = x (op->sub: drift_scalar_kind) s, s = op->scalar rounded to opmath */
    DRIFT_OP_DIV,          /* in0 / in1, broadcasting as ADD */
    DRIFT_OP_REDUCE,       /* sum or mean (op->sub: drift_reduce_kind) over dim op->dim, kept with
                              size 1; sequential in index order, opmath accumulator */
    DRIFT_OP_STRIDED,      /* as_strided gather: out (shape requested, as VIEW) [i..] =
                              flat(in0)[start + sum_k i_k * stride[k]]; strides >= 0 (0 = expand) */
    DRIFT_OP_SCATTER,      /* out = in0 (base) with flat(out)[start + sum_k i_k * stride[k]] = in1[i..]
                              (a copy_ into a strided view; in1's shape is the view's; the region
                              must be injective; dtypes equal: the copy's cast is a CAST before) */
    DRIFT_OP_FILL,         /* n_in 0 (shape requested) or 1 (in0's shape, values ignored):
                              op->sub 0 = constant op->scalar, 1 = iota: scalar + i * step (flat i),
                              computed in fp64, rounded once to op->out; 2 = linspace from scalar to
                              step over numel points, torch's formula in opmath (ref: exact) */
    /* The closed opset's kernels (docs/aten-graph.md "The opset"; kernels/aten_ops2 files).
     * Integer and bool operands are exact (formats/dtype.h); "exact" ops move or select values
     * and are bitwise equal on every backend. */
    DRIFT_OP_BINARY,       /* in0 (op->sub: drift_binary_kind) in1, broadcasting both ways (numpy);
                              comparisons and logical ops give bool (0/1) and are exact, min/max
                              exact (NaN propagates), bitwise ops on integers; the rest in opmath
                              (fp32; fp64 for fp64; exact for integers), one rounding */
    DRIFT_OP_WHERE,        /* in0 cond (bool), in1, in2, all broadcast together: cond ? in1 : in2 (exact) */
    DRIFT_OP_TAKE,         /* out (in1's shape) = flat(in0)[in1]; in1 int64 in [0, numel(in0)): an
                              index outside is an error (exact) */
    DRIFT_OP_PUT,          /* out = in0 with flat(out)[in1[j]] = in2[j] in j order (op->sub 0: the last
                              write wins) or += in2[j] (sub 1: accumulated in opmath in j order, each
                              touched element rounded once; sub 2 / 3 / 4: max / min (NaN wins) /
                              product likewise: scatter_reduce's amax, amin, prod); in1 int64,
                              numel(in1) == numel(in2) */
    DRIFT_OP_ARGSORT,      /* int64 indices sorting in0 along op->dim, stable; op->sub 1: descending;
                              NaN sorts above every number (exact). op->length = k > 0: the first
                              k entries in torch's CUDA topk order instead (kernels/topk_order.h;
                              op->start 1: sorted=True), the rest stable */
    DRIFT_OP_CUMSUM,       /* running sum (sub 0) or product (sub 1) along op->dim, opmath
                              accumulator in index order, each output rounded once */
    DRIFT_OP_SOFTMAX,      /* along op->dim: m = max, e_i = exp(x_i - m), s = sum e (index order),
                              sub 0: y = e / s; sub 1 (log_softmax): y = (x - m) - log(s); fp32
                              (fp64 for fp64), one rounding */
    DRIFT_OP_BMM,          /* in0 A [..., M, K] @ in1 B [..., K, N] (equal batch dims) -> [..., M, N],
                              products exact, fp32 accumulation in the cpu GEMM's order (kernels/cpu/
                              cpu_gemm.h: fmaf chains over K blocks of 256, block sums in order); optional in2 C
                              broadcast to the output: out = beta C + alpha (A B) (op->beta, op->alpha;
                              addmm / baddbmm), one rounding; op->layout: how torch held A and B
                              (DRIFT_BMM_*, below: the CUDA torch profile's cuBLAS call) */
    DRIFT_OP_GROUP_NORM,   /* in0 x [N, C, *], optional in1 weight [C], in2 bias [C]; op->length
                              groups: per (n, group) mean and biased variance in fp32 (two passes,
                              index order), y = (x - mean) * rsqrt(var + eps) * w + b, one rounding */
    DRIFT_OP_NONZERO,      /* int64 [n, ndim(in0)]: the indices of in0's non-zero elements in row-major
                              order; n is out's requested dim 0 (the recorded count): another count
                              is an error (exact) */
    DRIFT_OP_COUNT
} drift_op_kind;

/* The most inputs an op takes (ATTENTION with its bias). */
#define DRIFT_OP_MAX_IN 4

typedef struct drift_op {
    drift_op_kind kind;
    drift_dtype compute;   /* GEMM operand / attention probability dtype; fp32 for elementwise */
    drift_dtype out;       /* output dtype (one rounding at the end) */
    int n_in;              /* number of inputs actually given */
    /* attributes (meaning per kind above; unused ones stay zero) */
    float eps;             /* LAYER_NORM, RMS_NORM */
    float alpha, beta;     /* AFFINE */
    float scale;           /* ATTENTION softmax scale */
    int layout;            /* ATTENTION: 0 = q, k, v, out [B, H, L, D]; 1 = [B, L, H, D];
                              PATCHIFY: 0 = features (c, pf, ph, pw), 1 = (pf, ph, pw, c);
                              BMM: torch's operand layout bits (DRIFT_BMM_*) */
    float max_period;      /* TIMESTEP_SINUSOID (10000) */
    int flip_sin_to_cos;   /* TIMESTEP_SINUSOID */
    int dim;               /* NARROW, CONCAT */
    int64_t start, length; /* NARROW */
    int perm[DRIFT_MAX_DIMS]; /* PERMUTE */
    int patch[3];          /* PATCHIFY/UNPATCHIFY: pf, ph, pw */
    int sub;               /* UNARY, SCALAR, REDUCE, FILL: the variant */
    double scalar, step;   /* SCALAR: s; FILL: value (and iota step) */
    int64_t stride[DRIFT_MAX_DIMS]; /* STRIDED, SCATTER: element strides into in0 (offset: start) */
} drift_op;
/* Also: REDUCE reduces the op->length (0 means 1) consecutive dims from op->dim as one
 * flattened dim (index order over them); GROUP_NORM's groups are op->length. */

/* DRIFT_OP_ATTENTION's op->sub: which flash kernel's key-tile order. */
typedef enum drift_attn_order {
    DRIFT_ATTN_ORDER_FIRST_LAST = 0, /* tiles from k = 0 up (cuDNN's fused SDPA: torch's kernel on sm90) */
    DRIFT_ATTN_ORDER_LAST_FIRST = 1  /* from the last tile down (FlashAttention-2: torch's kernel for a
                                        head dim that is no multiple of 8, which cuDNN refuses) */
} drift_attn_order;

/* DRIFT_OP_BMM's op->layout: how PyTorch held each operand when the graph was captured. The
 * cuBLAS call torch makes (transposition flags, leading dims, batch strides) depends on it, the
 * values do not: the operands themselves are always given materialised (contiguous). Bit 0 / 1:
 * in0 / in1 was a transposed view (its last two dims swapped: element strides (.., 1, rows));
 * bit 2 / 3: in0 / in1 was broadcast over the batch (stride 0: every batch of the materialised
 * operand is equal); bit 4: the BMM stands for another torch op (a convolution's im2col GEMM,
 * which torch runs in cuDNN): no torch call to reproduce. Only the CUDA backend's torch profile
 * reads it (kernels/cuda/torch/bmm_torch.c). */
enum {
    DRIFT_BMM_A_T = 1, DRIFT_BMM_B_T = 2, DRIFT_BMM_A_BCAST = 4, DRIFT_BMM_B_BCAST = 8, DRIFT_BMM_STAND_IN = 16,
    DRIFT_BMM_LAYOUT_MAX = 31
};

/* DRIFT_OP_LINEAR's op->layout: 0, or DRIFT_LINEAR_CONV: the LINEAR is a convolution's GEMM (a
 * patch embedding lowered as PATCHIFY + LINEAR), which torch runs in cuDNN, not cuBLAS. The CUDA
 * torch profile runs it with drift's default cuBLAS workspace, not the recording's: the
 * CUBLAS_WORKSPACE_CONFIG a run sets governs torch's cuBLAS calls, not cuDNN's (measured on the
 * H200: Sana's and HunyuanVideo-Framepack's patch convolutions give cuDNN's bits under the 32 MiB
 * default and not under the recorded 128 KiB). The other backends ignore it. */
enum { DRIFT_LINEAR_CONV = 16 };

/* DRIFT_OP_UNARY variants. */
typedef enum drift_unary_kind {
    DRIFT_UNARY_NEG = 0, DRIFT_UNARY_EXP, DRIFT_UNARY_SIN, DRIFT_UNARY_COS, DRIFT_UNARY_RSQRT,
    DRIFT_UNARY_SQRT, DRIFT_UNARY_TANH, DRIFT_UNARY_SIGMOID, DRIFT_UNARY_GELU_ERF, DRIFT_UNARY_RECIP,
    DRIFT_UNARY_ABS, DRIFT_UNARY_RELU,
    DRIFT_UNARY_MASK_BIAS, /* x != 0 ? 0 : -inf: a boolean attention mask as an additive bias */
    DRIFT_UNARY_LOG, DRIFT_UNARY_LOG1P, DRIFT_UNARY_EXPM1, DRIFT_UNARY_LOG2, DRIFT_UNARY_LOG10,
    DRIFT_UNARY_ERF, DRIFT_UNARY_FLOOR, DRIFT_UNARY_CEIL, DRIFT_UNARY_ROUND, /* half to even */
    DRIFT_UNARY_TRUNC, DRIFT_UNARY_SIGN, DRIFT_UNARY_TAN, DRIFT_UNARY_ASIN, DRIFT_UNARY_ACOS,
    DRIFT_UNARY_ATAN, DRIFT_UNARY_SINH, DRIFT_UNARY_COSH, DRIFT_UNARY_EXP2,
    DRIFT_UNARY_ISNAN, DRIFT_UNARY_ISINF, DRIFT_UNARY_ISFINITE, /* -> bool */
    DRIFT_UNARY_LOGICAL_NOT,  /* -> bool: x == 0 */
    DRIFT_UNARY_BITWISE_NOT,  /* integers: -x - 1; bool: !x */
    DRIFT_UNARY_SOFTPLUS,     /* op->scalar beta, op->step threshold: x*beta > threshold ? x :
                                 log1p(exp(x*beta)) / beta */
    DRIFT_UNARY_HARDSIGMOID,  /* min(max(x + 3, 0), 6) / 6 */
    DRIFT_UNARY_HARDSWISH,    /* x * min(max(x + 3, 0), 6) / 6 */
    DRIFT_UNARY_MISH,         /* x * tanh(softplus(x)) */
    DRIFT_UNARY_ELU,          /* op->scalar alpha: x > 0 ? x : alpha * expm1(x) */
    DRIFT_UNARY_LEAKY_RELU,   /* op->scalar slope: x > 0 ? x : x * slope */
    DRIFT_UNARY_SQUARE,       /* x * x */
    DRIFT_UNARY_FRAC,         /* x - trunc(x) */
    DRIFT_UNARY_COUNT
} drift_unary_kind;
/* DRIFT_OP_BINARY variants (a op b). */
typedef enum drift_binary_kind {
    DRIFT_BINARY_MAX = 0, DRIFT_BINARY_MIN, DRIFT_BINARY_POW, DRIFT_BINARY_ATAN2,
    DRIFT_BINARY_REM,      /* Python's remainder: a - floor(a / b) * b (sign of b) */
    DRIFT_BINARY_FMOD,     /* C's fmod (sign of a) */
    DRIFT_BINARY_FLOORDIV, /* floor(a / b) as torch's div(rounding_mode="floor") */
    DRIFT_BINARY_TRUNCDIV, /* trunc(a / b) */
    DRIFT_BINARY_BITAND, DRIFT_BINARY_BITOR, DRIFT_BINARY_BITXOR,
    DRIFT_BINARY_LOGAND, DRIFT_BINARY_LOGOR, DRIFT_BINARY_LOGXOR,
    DRIFT_BINARY_EQ, DRIFT_BINARY_NE, DRIFT_BINARY_LT, DRIFT_BINARY_LE, DRIFT_BINARY_GT, DRIFT_BINARY_GE,
    DRIFT_BINARY_COUNT
} drift_binary_kind;
/* 1 if a BINARY variant gives bool. */
static inline int drift_binary_is_bool(int sub) { return sub >= DRIFT_BINARY_LOGAND && sub <= DRIFT_BINARY_GE; }
/* 1 if a UNARY variant gives bool. */
static inline int drift_unary_is_bool(int sub) { return sub >= DRIFT_UNARY_ISNAN && sub <= DRIFT_UNARY_LOGICAL_NOT; }
/* DRIFT_OP_SCALAR variants: x + s, x - s, s - x, x * s, x * (1/s) (CUDA's division by a
 * host scalar: the reciprocal rounded to opmath, then a multiply), x ^ s (2: x*x,
 * 3: x*x*x, 0.5: sqrt, -0.5: rsqrt, -1: 1/x, -2: 1/(x*x), as torch's CUDA pow), s ^ x,
 * max(x, s) and min(x, s) (clamp; NaN stays NaN). */
typedef enum drift_scalar_kind {
    DRIFT_SCALAR_ADD = 0, DRIFT_SCALAR_SUB, DRIFT_SCALAR_RSUB, DRIFT_SCALAR_MUL, DRIFT_SCALAR_DIV,
    DRIFT_SCALAR_POW, DRIFT_SCALAR_RPOW, DRIFT_SCALAR_MAX, DRIFT_SCALAR_MIN, DRIFT_SCALAR_COUNT
} drift_scalar_kind;
/* DRIFT_OP_REDUCE variants: sum and mean and prod (opmath accumulator in index order), amax/amin
 * (NaN propagates), any/all (-> bool), argmax/argmin (-> int64, first occurrence, NaN counts as the
 * maximum), var (two passes in index order, divisor n - op->scalar: the correction). */
typedef enum drift_reduce_kind {
    DRIFT_REDUCE_SUM = 0, DRIFT_REDUCE_MEAN, DRIFT_REDUCE_PROD, DRIFT_REDUCE_AMAX, DRIFT_REDUCE_AMIN,
    DRIFT_REDUCE_ANY, DRIFT_REDUCE_ALL, DRIFT_REDUCE_ARGMAX, DRIFT_REDUCE_ARGMIN, DRIFT_REDUCE_VAR,
    DRIFT_REDUCE_COUNT
} drift_reduce_kind;
/* Names of the variants ("exp", "pow", "mean", ...); "?" when out of range. */
const char *drift_op_sub_name(drift_op_kind k, int sub);
/* The variant named s for op kind k, or -1. */
int drift_op_sub_parse(drift_op_kind k, const char *s);

/* Opaque: made by drift_backend_create, freed by drift_backend_free. */
typedef struct drift_backend drift_backend;

typedef struct drift_tensor {
    drift_dtype dtype;     /* logical dtype */
    int ndim;
    int64_t shape[DRIFT_MAX_DIMS];
    int64_t numel;
    void *data;            /* backend-owned storage (ref: double, cpu: float, or double for fp64, cuda: native) */
    const drift_backend *be; /* the backend that owns data (set by alloc/alias) */
} drift_tensor;

/* Partial sums of the metrics of DESIGN.md s7 between a candidate t and a
 * reference r, mergeable across tensors, micro-batches and ranks. */
typedef struct drift_metric_acc {
    double sum_abs_diff;   /* sum |t - r| */
    double sum_sq_diff;    /* sum (t - r)^2 */
    double sum_tr, sum_tt, sum_rr; /* cosine terms */
    double max_abs_diff;   /* max |t - r| */
    double max_abs_ref;    /* max |r| */
    int64_t argmax;        /* flat index of the first element attaining max_abs_diff */
    int64_t numel;
    int64_t nan_t, inf_t, nan_r, inf_r;
    int64_t n_diff;        /* elements whose bits differ (NaN == NaN) */
} drift_metric_acc;

/* Creates a backend from a spec: a kind, then options, ':'-separated:
 *   ref
 *   cpu[:threads=N][:attn_tile=T][:gpu_as=TABLE]  N worker threads (1..256; default: the
 *                                   process default, drift_backend_set_host_threads);
 *                                   attention with a 16-bit compute over more than T
 *                                   keys in a flash kernel's order, key tiles of T
 *                                   (default 128: torch's cuDNN SDPA on sm90), 0: one
 *                                   softmax over all keys; gpu_as=TABLE: the
 *                                   recording GPU's GEMM forms and SM count
 *                                   (kernels/gemm_forms.h), none: drift's own
 *   cuda[:N][:gemm=auto|unfused|naive][:attention=auto|unfused|fused|fused_mma|fused_wgmma]
 *       [:i64=0|1][:norm_smem=0|1][:attn_scratch=BYTES][:metrics_grid=N]
 *                                   device N (default 0) and the kernel variants
 *                                   (kernels/cuda/cuda_backend.h; defaults auto)
 *   ref-cuda[:N][:attn_scratch=BYTES]  the fp64 oracle (ref's semantics) on CUDA
 *                                   device N: DGEMMs and fp64 kernels, attention
 *                                   scores in query chunks of at most BYTES (1 GiB)
 * Variants are fixed at creation; the library reads no environment.
 * DRIFT_E_UNSUPPORTED when built without CUDA or no such device;
 * DRIFT_E_INPUT naming the option on a bad spec. Caller owns *out; free with
 * drift_backend_free (NULL allowed). */
int drift_backend_create(const char *spec, drift_backend **out, drift_err *err);
void drift_backend_free(drift_backend *be);
/* The backend's canonical name ("ref", "cpu", "cuda:0", "ref-cuda:0"), without options.
 * Borrowed from be; "(none)" for NULL. */
const char *drift_backend_name(const drift_backend *be);
/* The kernel profile of be: "exact" or "torch" for a CUDA backend
 * (kernels/cuda/cuda_backend.h, kernels=), NULL for any other. Static string. */
const char *drift_backend_kernels(const drift_backend *be);
/* The ops the torch kernel profile handed to drift's exact kernels since be
 * was created (a cuDNN graph declined, a shape torch's kernel does not take:
 * such an op is not expected to be bitwise with torch): the number of such
 * runs, the op names of their kinds, each with its first reason ("attention (why); reduce (why)"), into ops and the
 * last reason into why (both caller-owned, NUL-terminated, truncated to
 * their sizes; NULL allowed). 0 for any backend that is not CUDA. */
int64_t drift_backend_kernel_fallbacks(const drift_backend *be, char *ops, size_t ops_size, char *why,
                                       size_t why_size);
/* spec with the kernel profile kernels ("exact"/"torch") appended as
 * ":kernels=K" when spec is a CUDA backend ("cuda", "cuda:N", "cuda:N:...")
 * that names no kernels= itself; any other spec, or kernels NULL, is copied
 * unchanged. Into out (caller-owned, sz bytes); DRIFT_E_INPUT when it does
 * not fit. */
int drift_backend_spec_with_kernels(const char *spec, const char *kernels, char *out, size_t sz, drift_err *err);
/* The GPU and library identity be runs on (formats/libraries.h, from the
 * CUDA backend's drift_cuda_backend_identity) into *out: 1 for a CUDA
 * backend, 0 (*out all unknown) for any other. */
int drift_backend_libraries(const drift_backend *be, drift_libraries *out);

/* Worker threads of host backends (ref, cpu) created after this call with no
 * threads= option: n in 1..256, or 0 for the default (online cores, at most
 * 8). Process-wide, as OpenBLAS's own count is; the CLI sets it from
 * DRIFT_CPU_THREADS. Not thread-safe against concurrent creation. */
void drift_backend_set_host_threads(int n);

/* 1 if be implements op with these dtypes, else 0 (NULL be or op: 0). */
int drift_backend_supports(const drift_backend *be, const drift_op *op);
/* Allocates t->data for t's dtype/shape (filled in by the caller); sets
 * t->numel (overflow-checked) and t->be. The caller owns t->data and
 * releases it with drift_backend_release. */
int drift_backend_alloc(const drift_backend *be, drift_tensor *t, drift_err *err);
/* Frees t->data and sets it to NULL (t NULL or unallocated allowed). */
void drift_backend_release(const drift_backend *be, drift_tensor *t);
/* Host fp32 values in (t->numel of them, borrowed), rounded to t->dtype
 * (ref: widened, not rounded). */
int drift_backend_upload_f32(const drift_backend *be, drift_tensor *t, const float *src, drift_err *err);
/* Host fp64 values in (ref and fp64 tensors: exact; others round via fp32 then t->dtype). */
int drift_backend_upload_f64(const drift_backend *be, drift_tensor *t, const double *src, drift_err *err);
/* Values out into the caller's buffer of t->numel, widened (ref narrows
 * fp64 to fp32 in download_f32). Waits for queued work. */
int drift_backend_download_f32(const drift_backend *be, const drift_tensor *t, float *dst, drift_err *err);
int drift_backend_download_f64(const drift_backend *be, const drift_tensor *t, double *dst, drift_err *err);
/* Runs op on in[0..op->n_in-1] into out (allocated by the caller on be with
 * out->dtype == op->out and the op's output shape; for VIEW and UNPATCHIFY
 * out's shape is the requested one). Checked first: op kind and n_in, every
 * tensor allocated on be with numel equal to its shape's, dtypes be stores,
 * out's dtype and shape (drift_op_infer_shape), out overlapping no input.
 * DRIFT_E_UNSUPPORTED when drift_backend_supports says no. */
int drift_backend_run(const drift_backend *be, const drift_op *op, const drift_tensor *const *in,
                      drift_tensor *out, drift_err *err);
/* Accumulates metrics of t against r (same shape, both on be) into acc. */
int drift_backend_metrics(const drift_backend *be, const drift_tensor *t, const drift_tensor *r,
                          drift_metric_acc *acc, drift_err *err);
/* Waits for queued work (no-op on host backends). */
int drift_backend_sync(const drift_backend *be, drift_err *err);
/* Makes out (dtype, ndim and shape filled in by the caller; dtype ==
 * base->dtype) a view of base's storage starting elem_offset elements in;
 * out->numel and out->be are set, nothing is allocated. out must fit inside
 * base. DRIFT_E_UNSUPPORTED means "not here" (a backend that never aliases,
 * or a misaligned offset): the caller copies instead. An alias borrows
 * base's storage: never release it, and release base only after every alias
 * of it is dead. */
int drift_backend_alias(const drift_backend *be, const drift_tensor *base, int64_t elem_offset, drift_tensor *out,
                        drift_err *err);
/* 1 if be can alias at all (drift_backend_alias may still decline an offset). */
int drift_backend_can_alias(const drift_backend *be);
/* What the last LINEAR, BMM or ATTENTION run on be chose, where the
 * backend's choice depends on the shapes the way torch's does (the CUDA torch
 * profile: "cuBLASLt algo 21 tile 20 splitK 1 reduction 0 stages 14",
 * "cublasGemmEx default tensor-op algo", "FlashAttention-2 3 splits ...",
 * "cuDNN SDPA ..."), written into buf (bufsz > 0, NUL-terminated, cut to
 * fit); "" where there is nothing to tell (ref, cpu, the exact profile, NULL
 * be). drift invariance reports it for the first divergent node. */
void drift_backend_last_choice(const drift_backend *be, char *buf, size_t bufsz);

/* Helpers shared by all backends. */
/* numel of shape with overflow check (limit 2^48); -1 on bad shape. */
int64_t drift_shape_numel(int ndim, const int64_t *shape);
/* Output shape of op for the given inputs (for shape checks and allocation). */
int drift_op_infer_shape(const drift_op *op, const drift_tensor *const *in, int *ndim, int64_t *shape,
                         drift_err *err);
const char *drift_op_name(drift_op_kind k);
/* Element strides (b, h, l) of ATTENTION's contiguous bias [Bb, Hb, Lqb, Lk] (in3), 0 on the
 * broadcast dims of size 1; its row of keys is contiguous. */
void drift_attn_bias_strides(const drift_tensor *bias, int64_t s[3]);
/* Initialises acc (argmax -1). Merges b into a. */
void drift_metric_acc_init(drift_metric_acc *acc);
void drift_metric_acc_merge(drift_metric_acc *a, const drift_metric_acc *b);
/* The one host pass of the metrics (semantics: replay/analysis/metrics.h):
 * adds n pairs (t[i], r[i]) of fp32 values to acc, fp64 differences, sums in
 * element order over pairs where both sides are finite, first-occurrence
 * argmax with indices continuing at acc->numel, NaN/inf counts per side,
 * n_diff over fp32 bit patterns with NaN == NaN. chunk_max_d / chunk_max_r
 * (NULL allowed) receive the maxima of these n pairs alone. */
void drift_metric_acc_add_f32(drift_metric_acc *acc, const float *t, const float *r, size_t n, double *chunk_max_d,
                              double *chunk_max_r);

#endif
