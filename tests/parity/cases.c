/* The parity table (parity.h): every op's cases and tolerances, one row
 * each (a row sweeps the dtypes its flags name). Adding an op's cases is
 * adding rows here; parity_run runs them on every backend instance.
 *
 * NMSE bounds vs the fp64 ref, by effective dtype (the coarsest of op->out,
 * op->compute for LINEAR/ATTENTION, and x's dtype for RMS_NORM, whose torch
 * composite rounds to it once inside). u is the unit roundoff 2^-p; one RNE
 * rounding of values with a uniform mantissa gives E[err^2]/E[x^2] = u^2/7,
 * and never more than u^2 (one element at the worst spot):
 *
 *   dtype | u             | typical one rounding | worst (u^2) | host  | device
 *   ------+---------------+----------------------+-------------+-------+-------
 *   bf16  | 2^-8  = 3.9e-3| 2.2e-6               | 1.5e-5      | 1e-4  | 2e-5
 *   fp16  | 2^-11 = 4.9e-4| 3.4e-8               | 2.4e-7      | 1e-6  | 1e-6
 *   fp32  | 2^-24 = 6.0e-8| 8.5e-16              | 3.6e-15     | 1e-11 | 1e-10
 *
 * Host bounds cover two chained roundings even on one element ((2u)^2:
 * attention's p then o, rms_norm's round_in then out); the fp16 bound stays
 * below the bf16 typical value, so an fp16 op computed or stored in bf16
 * fails; the fp32 bound allows fp32 sums of ~130 terms with cancellation and
 * 1-ulp libm results (measured 4e-14) and still fails any 16-bit rounding
 * where fp32 is expected. Device bounds are per op where their reduction
 * orders need it (rows below). NMSE cannot see a rounding mode or a missing
 * second rounding: tests/kernels/test_backend_ops.c checks the cpu's bits by
 * hand, and devices must match the cpu bit for bit on every pure-IEEE op
 * (cast, add/sub/mul, affine, rope, layouts) and within the stated ULPs on
 * the others.
 *
 * Measured maxima (OpenBLAS 0.3.21 as the cpu GEMM, before issue 32): bf16 ~1.1e-5, fp16 ~1.8e-7, fp32
 * ~4e-14; movement ops are exact. One op-specific host bound:
 * TIMESTEP_SINUSOID in fp32 with timesteps up to 1000 (arg = t * freq_j is an
 * fp32 value up to 1000, ulp 6.1e-5, and freq_j carries a few 2^-24
 * relative errors: per-element sin/cos errors up to ~1e-4, mean square far
 * below): 1e-8 (measured ~7e-11).
 *
 * The ATen-level ops of captured graphs (UNARY .. FILL, PUT, TAKE), inputs in
 * the output's dtype (PUT's and TAKE's int64 indices: PARITY_INDEX): on devices
 * bit-exact against the cpu for STRIDED, SCATTER, FILL, PUT, TAKE, DIV, REDUCE (sequential fp32 sums in index order on both), SCALAR
 * add/sub/rsub/mul/div/max/min and pow by 2, 3, 0.5, -0.5, -1, -2, UNARY
 * neg/rsqrt/sqrt/reciprocal/abs/relu/mask_bias; 4 ULPs of the output dtype
 * + 1e-6 for UNARY exp/sin/cos/tanh/sigmoid/gelu_erf, SCALAR pow 1.7 / -0.3
 * and rpow (CUDA's precise functions vs glibc's). Device NMSE: the default
 * bounds, 4x for SCALAR, 10x for REDUCE (sums of 4..33 terms), 1e-12 for
 * the moves. */
#include "tests/parity/parity.h"
#include "tests/parity/parity_util.h"

#include <stddef.h>

#define BF DRIFT_BF16
#define H16 DRIFT_F16
#define F32 DRIFT_F32
#define IN0 PARITY_DT_IN0
#define CMP PARITY_DT_COMPUTE
#define UNIF PARITY_UNIF
#define SPEC PARITY_SPECIALS
#define NONF PARITY_NONFINITE

#define IN(dt_, lo_, hi_, fill_, nd_, ...) {.dt = dt_, .nd = nd_, .sh = {__VA_ARGS__}, .lo = lo_, .hi = hi_, .fill = fill_}
#define SW_IO (PARITY_SW_IN0 | PARITY_SW_OUT)
#define SW_CO (PARITY_SW_COMPUTE | PARITY_SW_OUT)
#define EXACT {.exact = 1}
#define EXACT_OVF {.exact = 1, .may_overflow = 1}

/* ---- tolerance adjustments (the dtypes are known here) ----------------------- */

static double gc_bound(drift_dtype dt) { return parity_nmse_default(dt, 1); }
static void set_dev(parity_case *c, double b) { c->tol.nmse_dev[0] = c->tol.nmse_dev[1] = c->tol.nmse_dev[2] = b; }
static void no_ref(parity_case *c) {
    for (int i = 0; i < 3; i++) c->tol.nmse_host[i] = c->tol.nmse_dev[i] = -1.0;
}

/* fp16 subnormal outputs carry large relative rounding errors: exactness vs cpu is the check */
static void adj_cast_tiny(parity_case *c) {
    if (c->op.out == H16) no_ref(c);
}

/* SiLU: 1 ULP of a 16-bit output, 8 in fp32 (CUDA's expf within 2 ULPs) */
static void adj_silu(parity_case *c) {
    c->tol.ulps16 = 1.0;
    c->tol.ulps32 = 8.0;
    c->tol.may_overflow = 1;
    c->tol.nmse_dev[2] = 1e-9;
}

/* GELU-tanh: as SiLU, plus 2.4e-7 max|x| (1 + tanh cancels) */
static void adj_gelu(parity_case *c) {
    adj_silu(c);
    c->tol.atol = 2.4e-7;
    c->tol.atol_kind = PARITY_ATOL_MAX_IN0;
}

/* norms: 1 ULP (16-bit out) / 4 ULPs (fp32) + 4e-4 (max|x| + 1): the cpu sums sequentially */
static void adj_norm(parity_case *c) {
    c->tol.ulps16 = 1.0;
    c->tol.ulps32 = 4.0;
    c->tol.atol = 4e-4;
    c->tol.atol_kind = PARITY_ATOL_IN0_PLUS1;
    c->tol.nmse_dev[2] = 1e-9;
}

/* rms_norm rounds x*rstd to x's dtype before the weight: a different rstd
 * (sum order) moves it by one ULP of that dtype */
static void adj_rms(parity_case *c) {
    adj_norm(c);
    c->tol.ulp_of_coarser_in0 = 1;
    c->tol.nmse_dev[0] = 2.0 * gc_bound(BF);
    c->tol.nmse_dev[1] = 2.0 * gc_bound(H16);
}

/* a row with a NaN and a row with an inf: whole rows NaN, as on the cpu */
static void adj_norm_nonfinite(parity_case *c) {
    adj_norm(c);
    c->tol.nmse_dev[0] = c->tol.nmse_dev[1] = c->tol.nmse_dev[2] = -1.0;
}

/* the sinusoid: 4 ULPs + 1e-4 (a 1-ULP difference of freq moves arg by ~6e-5) */
static void adj_sinusoid(parity_case *c) {
    c->tol.ulps16 = c->tol.ulps32 = 4.0;
    c->tol.atol = 1e-4;
    c->tol.nmse_host[2] = 1e-8;
    c->tol.nmse_dev[2] = 1e-7;
}

/* LINEAR: 1 ULP of a 16-bit output (4 for fp32) + K 2^-21 max|x| max|W| (fp32
 * accumulation in another order); ref NMSE 2 max(bound(out), bound(compute)),
 * fp32 1e-9 */
static void adj_linear(parity_case *c) {
    c->tol.ulps16 = 1.0;
    c->tol.ulps32 = 4.0;
    c->tol.atol = 4.76837158203125e-07; /* 2^-21 */
    c->tol.atol_kind = PARITY_ATOL_GEMM;
    double b = 2.0 * gc_bound(c->op.out);
    if (c->op.compute != F32 && 2.0 * gc_bound(c->op.compute) > b) b = 2.0 * gc_bound(c->op.compute);
    if (c->op.out == F32 && c->op.compute == F32) b = 1e-9;
    set_dev(c, b);
}

/* the operands are not in the compute dtype: rounded first (autocast's cast) */
static void adj_linear_rounded(parity_case *c) {
    adj_linear(c);
    set_dev(c, 4e-5);
}

/* ATTENTION: 2 ULPs of out + c max|v| (c = 8e-3 bf16, 1e-3 fp16, 1e-5 fp32
 * compute: P may round differently where p differs in the last bit); ref
 * NMSE max(3e-5 bf16 / 3e-6 fp16 / 1e-9 fp32 P, 2 bound(out)) */
static void adj_attention(parity_case *c) {
    const drift_dtype cp = c->op.compute;
    c->tol.ulps16 = c->tol.ulps32 = 2.0;
    c->tol.atol = cp == BF ? 8e-3 : cp == H16 ? 1e-3 : 1e-5;
    c->tol.atol_kind = PARITY_ATOL_MAX_IN2;
    double pb = cp == BF ? 3e-5 : cp == H16 ? 3e-6 : 1e-9, ob = 2.0 * gc_bound(c->op.out);
    set_dev(c, pb > ob ? pb : ob);
}

/* fp32 operands with bf16 compute: the ref uses the unrounded operands */
static void adj_attention_rounded(parity_case *c) {
    adj_attention(c);
    set_dev(c, 1e-4);
}

/* moves are exact: a same-dtype move must be bitwise the oracle */
static void adj_move(parity_case *c) {
    if (c->in[0].dt == c->op.out)
        for (int i = 0; i < 3; i++) c->tol.nmse_host[i] = c->tol.nmse_dev[i] = 1e-30;
}

/* no tolerance change */
#define ADJ_NONE NULL

/* ---- rows ----------------------------------------------------------------------- */

#define UNARY(fam, k, lo, hi, fill, adj, nd, ...)                                                                  \
    {{.family = fam, .op = {.kind = k, .n_in = 1, .out = F32, .compute = F32, .alpha = 1.7f, .beta = -0.3f},       \
      .in = {IN(F32, lo, hi, fill, nd, __VA_ARGS__)}, .tol = {.ulps16 = -1, .ulps32 = -1, .may_overflow = 1}},      \
     SW_IO, adj}
#define EXACT_UNARY(fam, k, a, b, lo, hi, fill, guard_, nd, ...)                                                    \
    {{.family = fam, .op = {.kind = k, .n_in = 1, .out = F32, .compute = F32, .alpha = a, .beta = b},               \
      .in = {IN(F32, lo, hi, fill, nd, __VA_ARGS__)}, .guard = guard_, .tol = EXACT_OVF},                          \
     SW_IO, ADJ_NONE}
#define BINARY(fam, k, fl, guard_, na, nb, A, B)                                                                  \
    {{.family = fam, .op = {.kind = k, .n_in = 2, .out = F32, .compute = F32},                                     \
      .in = {{.dt = F32, .nd = na, .sh = {UNPAREN A}, .lo = -4, .hi = 4, .fill = fl},                                     \
             {.dt = F32, .nd = nb, .sh = {UNPAREN B}, .lo = -4, .hi = 4, .fill = fl}},                                    \
      .guard = guard_, .tol = EXACT_OVF},                                                                          \
     SW_IO | PARITY_SW_IN1_ROT, ADJ_NONE}
#define UNPAREN(...) __VA_ARGS__
#define BIN3(fl, guard_, na, nb, A, B)                                                                            \
    BINARY("add", DRIFT_OP_ADD, fl, guard_, na, nb, A, B),                                                 \
        BINARY("sub", DRIFT_OP_SUB, fl, guard_, na, nb, A, B),                                             \
        BINARY("mul", DRIFT_OP_MUL, fl, guard_, na, nb, A, B)
/* ATTENTION q[B,H,Lq,Dh] k[B,H,Lk,Dh] v[B,H,Lk,Dv] in the compute dtype */
#define ATT(sc, qlo, guard_, B, H, Lq, Lk, Dh, Dv)                                                                  \
    {{.family = "attention", .op = {.kind = DRIFT_OP_ATTENTION, .n_in = 3, .out = F32, .compute = F32, .scale = sc}, \
      .in = {IN(CMP, qlo, -(qlo), UNIF, 4, B, H, Lq, Dh), IN(CMP, -1, 1, UNIF, 4, B, H, Lk, Dh),                  \
             IN(CMP, -1, 1, UNIF, 4, B, H, Lk, Dv)},                                                               \
      .guard = guard_},                                                                                            \
     SW_CO, adj_attention}
#define SINUS(B, dim_, flip, period)                                                                                 \
    {{.family = "timestep_sinusoid",                                                                               \
      .op = {.kind = DRIFT_OP_TIMESTEP_SINUSOID, .n_in = 1, .out = F32, .compute = F32, .dim = dim_,             \
             .flip_sin_to_cos = flip, .max_period = period},                                                       \
      .in = {IN(F32, 0, 1000, UNIF, 1, B)}},                                                                       \
     PARITY_SW_OUT, adj_sinusoid}

/* ATen-level ops: every input in op.out's dtype, op.out swept */
#define OUTD PARITY_DT_OUT
#define ATEN_TOL(exact_, b16, b16h, b32) {.exact = exact_, .ulps16 = 4, .ulps32 = 4, .atol = 1e-6, .nmse_dev = {b16, b16h, b32}}
#define ATEN_UNARY(sub_, lo, exact_)                                                                             \
    {{.family = "unary", .op = {.kind = DRIFT_OP_UNARY, .n_in = 1, .out = F32, .compute = F32, .sub = sub_},   \
      .in = {IN(OUTD, lo, 3, UNIF, 1, 4097)}, .tol = ATEN_TOL(exact_, 0, 0, 0)},                                   \
     PARITY_SW_OUT, ADJ_NONE}
#define ATEN_SCALAR(sub_, s_, exact_)                                                                            \
    {{.family = "scalar",                                                                                        \
      .op = {.kind = DRIFT_OP_SCALAR, .n_in = 1, .out = F32, .compute = F32, .sub = sub_, .scalar = s_},        \
      .in = {IN(OUTD, 0.25f, 3, UNIF, 1, 4097)}, .tol = ATEN_TOL(exact_, 8e-5, 4e-6, 4e-10)},   \
     PARITY_SW_OUT, ADJ_NONE}
/* the eight scalars of a SCALAR variant: the six with exact pow paths (e6), then 1.7 and -0.3 (e2) */
#define ATEN_SCALAR8(sub_, e6, e2)                                                                               \
    ATEN_SCALAR(sub_, 2.0, e6), ATEN_SCALAR(sub_, 3.0, e6), ATEN_SCALAR(sub_, 0.5, e6),                           \
        ATEN_SCALAR(sub_, -0.5, e6), ATEN_SCALAR(sub_, -1.0, e6), ATEN_SCALAR(sub_, -2.0, e6),                    \
        ATEN_SCALAR(sub_, 1.7, e2), ATEN_SCALAR(sub_, -0.3, e2)
#define ATEN_REDUCE(sub_, dim_)                                                                                  \
    {{.family = "reduce", .op = {.kind = DRIFT_OP_REDUCE, .n_in = 1, .out = F32, .compute = F32, .sub = sub_, .dim = dim_}, \
      .in = {IN(OUTD, -4, 4, UNIF, 3, 4, 5, 33)}, .tol = ATEN_TOL(1, 2e-4, 1e-5, 1e-9)},        \
     PARITY_SW_OUT, ADJ_NONE}
#define ATEN_MOVE {.exact = 1, .nmse_dev = {1e-12, 1e-12, 1e-12}}
#define ATEN_FILL(sub_, s_)                                                                                      \
    {{.family = "fill",                                                                                          \
      .op = {.kind = DRIFT_OP_FILL, .n_in = 1, .out = F32, .compute = F32, .sub = sub_, .scalar = s_, .step = 0.5}, \
      .in = {IN(OUTD, -4, 4, UNIF, 3, 2, 3, 4)}, .tol = {.exact = 1}},                                       \
     PARITY_SW_OUT, ADJ_NONE}

#define ATEN_PUT(sub_)                                                                                            \
    {{.family = "put", .op = {.kind = DRIFT_OP_PUT, .n_in = 3, .out = F32, .compute = F32, .sub = sub_},          \
      .in = {IN(OUTD, -2, 2, UNIF, 2, 3, 4), IN(DRIFT_I64, 0, 12, PARITY_INDEX, 1, 24), IN(OUTD, -2, 2, UNIF, 2, 4, 6)}, \
      .tol = ATEN_TOL(1, 1e-4, 1e-6, 1e-11)},                                                                 \
     PARITY_SW_OUT, ADJ_NONE}

const parity_row parity_rows[] = {
    /* CAST: odd shapes; fp16 overflow and subnormals; every 16-bit pattern; rounding ties */
    {{.family = "cast", .op = {.kind = DRIFT_OP_CAST, .n_in = 1, .out = F32, .compute = F32}, .in = {IN(F32, -8, 8, UNIF, 1, 1)}, .tol = EXACT}, SW_IO, ADJ_NONE},
    {{.family = "cast", .op = {.kind = DRIFT_OP_CAST, .n_in = 1, .out = F32, .compute = F32}, .in = {IN(F32, -8, 8, UNIF, 1, 7)}, .tol = EXACT}, SW_IO, ADJ_NONE},
    {{.family = "cast", .op = {.kind = DRIFT_OP_CAST, .n_in = 1, .out = F32, .compute = F32}, .in = {IN(F32, -8, 8, UNIF, 2, 3, 17)}, .guard = 1, .tol = EXACT}, SW_IO, ADJ_NONE},
    {{.family = "cast", .op = {.kind = DRIFT_OP_CAST, .n_in = 1, .out = F32, .compute = F32}, .in = {IN(F32, -8, 8, UNIF, 3, 2, 33, 65)}, .tol = EXACT}, SW_IO, ADJ_NONE},
    {{.family = "cast", .op = {.kind = DRIFT_OP_CAST, .n_in = 1, .out = F32, .compute = F32}, .in = {IN(F32, -3e4f, 3e4f, SPEC, 1, 4097)}, .tol = EXACT_OVF}, SW_IO, ADJ_NONE},
    {{.family = "cast", .op = {.kind = DRIFT_OP_CAST, .n_in = 1, .out = F32, .compute = F32}, .in = {IN(F32, -3e-6f, 3e-6f, SPEC, 1, 70001)}, .tol = EXACT_OVF}, SW_IO, adj_cast_tiny},
    {{.family = "cast", .op = {.kind = DRIFT_OP_CAST, .n_in = 1, .out = F32, .compute = F32}, .in = {IN(F32, -4, 4, NONF, 2, 7, 9)}, .tol = EXACT}, PARITY_SW_OUT, ADJ_NONE},
    {{.family = "cast", .op = {.kind = DRIFT_OP_CAST, .n_in = 1, .out = F32, .compute = F32}, .in = {IN(BF, 0, 1, PARITY_PATTERNS, 1, 65536)}, .tol = EXACT_OVF}, PARITY_SW_OUT, no_ref},
    {{.family = "cast", .op = {.kind = DRIFT_OP_CAST, .n_in = 1, .out = F32, .compute = F32}, .in = {IN(H16, 0, 1, PARITY_PATTERNS, 1, 65536)}, .tol = EXACT_OVF}, PARITY_SW_OUT, no_ref},
    {{.family = "cast", .op = {.kind = DRIFT_OP_CAST, .n_in = 1, .out = F32, .compute = F32}, .in = {IN(F32, 0, 1, PARITY_TIES, 1, 65536)}, .tol = EXACT_OVF}, PARITY_SW_OUT, no_ref},

    /* AFFINE y = x*alpha + beta */
    EXACT_UNARY("affine", DRIFT_OP_AFFINE, 1.7f, -0.3f, 0.25f, 6, UNIF, 0, 1, 1),
    EXACT_UNARY("affine", DRIFT_OP_AFFINE, 1.7f, -0.3f, -6, 6, UNIF, 0, 2, 3, 17),
    EXACT_UNARY("affine", DRIFT_OP_AFFINE, 1.7f, -0.3f, -6, 6, UNIF, 0, 3, 7, 5, 33),
    EXACT_UNARY("affine", DRIFT_OP_AFFINE, 1.7f, -0.3f, -6, 6, UNIF, 0, 1, 65),
    EXACT_UNARY("affine", DRIFT_OP_AFFINE, 2.0f, 0.5f, -4, 4, NONF, 0, 2, 7, 9),
    EXACT_UNARY("affine", DRIFT_OP_AFFINE, 1.0f, 0.0f, -10, 10, SPEC, 0, 1, 17),
    EXACT_UNARY("affine", DRIFT_OP_AFFINE, 0.5f, -3.0f, -10, 10, SPEC, 1, 1, 4097),
    EXACT_UNARY("affine", DRIFT_OP_AFFINE, -1e-3f, 7.25f, -10, 10, SPEC, 0, 1, 70001),
    EXACT_UNARY("affine", DRIFT_OP_AFFINE, 3.1f, 1e-7f, -10, 10, SPEC, 0, 1, 17),
    EXACT_UNARY("affine", DRIFT_OP_AFFINE, 0.0f, 2.0f, -10, 10, UNIF, 0, 1, 1),

    /* SILU, GELU_TANH: the one-element case draws from the positive side (the
     * negative tails lose relative precision in fp32 opmath, as in PyTorch's
     * own kernel, and land in fp16 subnormals); the bulk shapes cover the tails */
    UNARY("silu", DRIFT_OP_SILU, 0.25f, 6, UNIF, adj_silu, 1, 1),
    UNARY("silu", DRIFT_OP_SILU, -6, 6, UNIF, adj_silu, 2, 3, 17),
    UNARY("silu", DRIFT_OP_SILU, -6, 6, UNIF, adj_silu, 3, 7, 5, 33),
    UNARY("silu", DRIFT_OP_SILU, -6, 6, UNIF, adj_silu, 1, 65),
    UNARY("silu", DRIFT_OP_SILU, -4, 4, NONF, adj_silu, 2, 7, 9),
    UNARY("silu", DRIFT_OP_SILU, -100, 100, SPEC, adj_silu, 1, 4097),
    UNARY("gelu_tanh", DRIFT_OP_GELU_TANH, 0.25f, 6, UNIF, adj_gelu, 1, 1),
    UNARY("gelu_tanh", DRIFT_OP_GELU_TANH, -6, 6, UNIF, adj_gelu, 2, 3, 17),
    UNARY("gelu_tanh", DRIFT_OP_GELU_TANH, -6, 6, UNIF, adj_gelu, 3, 7, 5, 33),
    UNARY("gelu_tanh", DRIFT_OP_GELU_TANH, -6, 6, UNIF, adj_gelu, 1, 65),
    UNARY("gelu_tanh", DRIFT_OP_GELU_TANH, -4, 4, NONF, adj_gelu, 2, 7, 9),
    UNARY("gelu_tanh", DRIFT_OP_GELU_TANH, -100, 100, SPEC, adj_gelu, 1, 4097),

    /* ADD, SUB, MUL: numpy broadcasting of in1 against in0 */
    BIN3(UNIF, 0, 2, 2, (3, 17), (3, 17)),
    BIN3(UNIF, 0, 2, 1, (7, 33), (33)),
    BIN3(UNIF, 0, 3, 2, (2, 7, 17), (7, 1)),
    BIN3(UNIF, 0, 2, 2, (1, 33), (5, 1)),
    BIN3(UNIF, 0, 1, 1, (65), (1)),
    BIN3(UNIF, 0, 4, 4, (2, 3, 7, 5), (2, 1, 7, 1)),
    BIN3(UNIF, 0, 3, 3, (1, 6, 33), (3, 6, 33)),
    BIN3(UNIF, 0, 1, 1, (1), (1)),
    BIN3(NONF, 0, 2, 1, (7, 9), (9)),
    BIN3(SPEC, 0, 1, 1, (1000), (1000)),
    BIN3(SPEC, 1, 3, 3, (5, 1, 7), (1, 6, 1)),
    BIN3(SPEC, 0, 1, 1, (4097), (1)),
    BIN3(SPEC, 0, 8, 8, (2, 3, 4, 5, 3, 7, 2, 3), (1, 3, 1, 5, 1, 7, 1, 3)),
    BIN3(SPEC, 0, 1, 2, (1), (2, 3)),
    BIN3(SPEC, 0, 2, 3, (17, 1), (2, 1, 33)),
    BIN3(SPEC, 0, 3, 2, (64, 3, 128), (3, 128)),

    /* LINEAR: x, W in the compute dtype; bias fp32 or bf16; odd M, N, K */
#define LW(N_, K_) IN(CMP, -1, 1, UNIF, 2, N_, K_)
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 2, .out = F32, .compute = F32}, .in = {LW(1, 1), LW(1, 1)}}, SW_CO, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 3, .out = F32, .compute = F32}, .in = {LW(1, 1), LW(1, 1), IN(BF, -1, 1, UNIF, 1, 1)}}, SW_CO, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 2, .out = F32, .compute = F32}, .in = {IN(CMP, -1, 1, UNIF, 3, 2, 3, 7), LW(17, 7)}}, SW_CO, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 3, .out = F32, .compute = F32}, .in = {IN(CMP, -1, 1, UNIF, 3, 2, 3, 7), LW(17, 7), IN(F32, -1, 1, UNIF, 1, 17)}, .guard = 1}, SW_CO, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 2, .out = F32, .compute = F32}, .in = {LW(17, 33), LW(7, 33)}}, SW_CO, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 3, .out = F32, .compute = F32}, .in = {LW(17, 33), LW(7, 33), IN(F32, -1, 1, UNIF, 1, 7)}}, SW_CO, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 2, .out = F32, .compute = F32}, .in = {IN(CMP, -1, 1, UNIF, 3, 2, 33, 65), LW(3, 65)}}, SW_CO, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 3, .out = F32, .compute = F32}, .in = {IN(CMP, -1, 1, UNIF, 3, 2, 33, 65), LW(3, 65), IN(BF, -1, 1, UNIF, 1, 3)}}, SW_CO, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 2, .out = F32, .compute = F32}, .in = {LW(65, 17), LW(33, 17)}}, SW_CO, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 3, .out = F32, .compute = F32}, .in = {LW(65, 17), LW(33, 17), IN(F32, -1, 1, UNIF, 1, 33)}}, SW_CO, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 2, .out = F32, .compute = F32}, .in = {IN(CMP, -1, 1, UNIF, 3, 2, 7, 129), LW(65, 129)}}, SW_CO, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 3, .out = F32, .compute = F32}, .in = {IN(CMP, -1, 1, UNIF, 3, 2, 7, 129), LW(65, 129), IN(F32, -1, 1, UNIF, 1, 65)}}, SW_CO, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 3, .out = F32, .compute = F32}, .in = {LW(127, 129), LW(255, 129), IN(F32, -1, 1, UNIF, 1, 255)}, .guard = 1}, SW_CO, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 2, .out = F32, .compute = F32}, .in = {LW(4097, 7), LW(5, 7)}}, SW_CO, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 3, .out = BF, .compute = BF}, .in = {IN(BF, -1, 1, UNIF, 2, 33, 17), IN(BF, -0.25f, 0.25f, UNIF, 2, 4097, 17), IN(BF, -1, 1, UNIF, 1, 4097)}}, 0, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 3, .out = F32, .compute = BF}, .in = {IN(BF, -1, 1, UNIF, 2, 64, 64), IN(BF, -0.125f, 0.125f, UNIF, 2, 64, 64), IN(F32, -1, 1, UNIF, 1, 64)}}, 0, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 2, .out = BF, .compute = BF}, .in = {IN(BF, -1, 1, UNIF, 2, 2, 3072), IN(BF, -0.018f, 0.018f, UNIF, 2, 3072, 3072)}}, 0, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 3, .out = F32, .compute = BF}, .in = {IN(BF, -1, 1, UNIF, 2, 256, 1536), IN(BF, -0.025f, 0.025f, UNIF, 2, 1024, 1536), IN(BF, -1, 1, UNIF, 1, 1024)}}, 0, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 3, .out = H16, .compute = H16}, .in = {IN(H16, -1, 1, UNIF, 3, 2, 3, 0), IN(H16, -1, 1, UNIF, 2, 8, 0), IN(H16, -1, 1, UNIF, 1, 8)}}, 0, adj_linear},
    /* operands not yet in the compute dtype: rounded first, as autocast casts them */
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 3, .out = F32, .compute = BF}, .in = {IN(F32, -1, 1, UNIF, 2, 17, 33), IN(F32, -1, 1, UNIF, 2, 7, 33), IN(F32, -1, 1, UNIF, 1, 7)}}, 0, adj_linear_rounded},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 3, .out = F32, .compute = H16}, .in = {IN(F32, -1, 1, UNIF, 2, 17, 33), IN(F32, -1, 1, UNIF, 2, 7, 33), IN(F32, -1, 1, UNIF, 1, 7)}}, 0, adj_linear_rounded},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 2, .out = F32, .compute = F32}, .in = {IN(BF, -1, 1, UNIF, 2, 33, 17), IN(F32, -1, 1, UNIF, 2, 9, 17)}}, 0, adj_linear},
    /* non-finite x, W, bias */
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 3, .out = BF, .compute = BF}, .in = {IN(BF, -1, 1, NONF, 2, 5, 17), IN(BF, -1, 1, UNIF, 2, 7, 17), IN(F32, -1, 1, UNIF, 1, 7)}}, 0, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 3, .out = BF, .compute = BF}, .in = {IN(BF, -1, 1, UNIF, 2, 5, 17), IN(BF, -1, 1, NONF, 2, 7, 17), IN(F32, -1, 1, UNIF, 1, 7)}}, 0, adj_linear},
    {{.family = "linear", .op = {.kind = DRIFT_OP_LINEAR, .n_in = 3, .out = BF, .compute = BF}, .in = {IN(BF, -1, 1, UNIF, 2, 5, 17), IN(BF, -1, 1, UNIF, 2, 7, 17), IN(F32, -1, 1, NONF, 1, 7)}}, 0, adj_linear},
#undef LW

    /* LAYER_NORM (weight, bias optional), RMS_NORM (weight optional) over the last dim */
#define WB(D_) IN(F32, 0.5f, 1.5f, UNIF, 1, D_), IN(F32, -1, 1, UNIF, 1, D_)
#define WBB(D_) IN(BF, 0.5f, 1.5f, UNIF, 1, D_), IN(F32, -1, 1, UNIF, 1, D_)
#define LN(nin, W, adj, nd, D_, ...) {{.family = "layer_norm", .op = {.kind = DRIFT_OP_LAYER_NORM, .n_in = nin, .out = F32, .compute = F32, .eps = 1e-6f}, .in = {IN(F32, -3, 5, UNIF, nd, __VA_ARGS__), W(D_)}}, SW_IO, adj}
#define RMS(nin, W, adj, nd, D_, ...) {{.family = "rms_norm", .op = {.kind = DRIFT_OP_RMS_NORM, .n_in = nin, .out = F32, .compute = F32, .eps = 1e-6f}, .in = {IN(F32, -3, 5, UNIF, nd, __VA_ARGS__), W(D_)}}, SW_IO, adj}
    LN(1, WB, adj_norm, 3, 1, 2, 1, 1), LN(2, WBB, adj_norm, 3, 1, 2, 1, 1), LN(3, WB, adj_norm, 3, 1, 2, 1, 1),
    LN(1, WBB, adj_norm, 2, 3, 3, 3), LN(2, WB, adj_norm, 2, 3, 3, 3), LN(3, WBB, adj_norm, 2, 3, 3, 3),
    LN(1, WB, adj_norm, 3, 7, 2, 7, 7), LN(2, WBB, adj_norm, 3, 7, 2, 7, 7), LN(3, WB, adj_norm, 3, 7, 2, 7, 7),
    LN(1, WBB, adj_norm, 2, 17, 1, 17), LN(2, WB, adj_norm, 2, 17, 3, 17), LN(3, WBB, adj_norm, 2, 17, 7, 17),
    LN(1, WB, adj_norm, 3, 33, 2, 3, 33), LN(2, WBB, adj_norm, 3, 33, 2, 3, 33), LN(3, WB, adj_norm, 3, 33, 2, 3, 33),
    LN(1, WBB, adj_norm, 2, 65, 7, 65), LN(2, WB, adj_norm, 2, 65, 7, 65), LN(3, WBB, adj_norm, 2, 65, 7, 65),
    LN(3, WB, adj_norm, 3, 63, 3, 12, 63), LN(2, WB, adj_norm, 3, 64, 3, 12, 64), LN(3, WBB, adj_norm, 3, 257, 3, 12, 257),
    LN(3, WB, adj_norm, 3, 1000, 3, 3, 1000), LN(2, WBB, adj_norm, 3, 2049, 3, 3, 2049), LN(3, WB, adj_norm, 3, 4097, 1, 3, 4097),
    LN(3, WB, adj_norm, 3, 13000, 1, 3, 13000),
    {{.family = "layer_norm", .op = {.kind = DRIFT_OP_LAYER_NORM, .n_in = 2, .out = BF, .compute = F32, .eps = 1e-6f}, .in = {IN(BF, -3, 5, NONF, 2, 5, 17), IN(F32, 0.5f, 1.5f, UNIF, 1, 17)}}, 0, adj_norm_nonfinite},
    {{.family = "layer_norm", .op = {.kind = DRIFT_OP_LAYER_NORM, .n_in = 2, .out = BF, .compute = F32, .eps = 1e-6f}, .in = {IN(BF, -3, 5, UNIF, 2, 5, 17), IN(F32, 0.5f, 1.5f, NONF, 1, 17)}}, 0, adj_norm_nonfinite},
    {{.family = "layer_norm", .op = {.kind = DRIFT_OP_LAYER_NORM, .n_in = 3, .out = F32, .compute = F32, .eps = 1e-6f}, .in = {IN(F32, -3, 5, NONF, 2, 37, 256), WB(256)}}, SW_IO, adj_norm_nonfinite},
    RMS(1, WB, adj_rms, 3, 1, 2, 1, 1), RMS(2, WBB, adj_rms, 3, 1, 2, 1, 1),
    RMS(1, WBB, adj_rms, 2, 3, 3, 3), RMS(2, WB, adj_rms, 2, 3, 3, 3),
    RMS(1, WB, adj_rms, 3, 7, 2, 7, 7), RMS(2, WBB, adj_rms, 3, 7, 2, 7, 7),
    RMS(1, WBB, adj_rms, 2, 17, 1, 17), RMS(2, WB, adj_rms, 2, 17, 3, 17),
    RMS(1, WB, adj_rms, 3, 33, 2, 3, 33), RMS(2, WBB, adj_rms, 3, 33, 2, 3, 33),
    RMS(1, WBB, adj_rms, 2, 65, 7, 65), RMS(2, WB, adj_rms, 2, 65, 7, 65),
    RMS(2, WB, adj_rms, 3, 255, 3, 12, 255), RMS(2, WBB, adj_rms, 3, 256, 3, 12, 256), RMS(1, WB, adj_rms, 3, 2048, 3, 3, 2048),
    RMS(2, WB, adj_rms, 3, 3072, 1, 3, 3072), RMS(2, WBB, adj_rms, 3, 13000, 1, 3, 13000),
    {{.family = "rms_norm", .op = {.kind = DRIFT_OP_RMS_NORM, .n_in = 2, .out = BF, .compute = F32, .eps = 1e-6f}, .in = {IN(BF, -3, 5, NONF, 2, 5, 17), IN(F32, 0.5f, 1.5f, UNIF, 1, 17)}}, 0, adj_norm_nonfinite},
    {{.family = "rms_norm", .op = {.kind = DRIFT_OP_RMS_NORM, .n_in = 2, .out = BF, .compute = F32, .eps = 1e-6f}, .in = {IN(BF, -3, 5, UNIF, 2, 5, 17), IN(F32, 0.5f, 1.5f, NONF, 1, 17)}}, 0, adj_norm_nonfinite},
#undef WB
#undef WBB
#undef LN
#undef RMS

    /* ROPE x[B, L, H, Dh] with fp32 cos/sin tables [L, Dh] */
#define ROPE(fill, guard_, B, L, H, D) {{.family = "rope", .op = {.kind = DRIFT_OP_ROPE, .n_in = 3, .out = F32, .compute = F32}, .in = {IN(F32, -4, 4, fill, 4, B, L, H, D), IN(F32, -1, 1, UNIF, 2, L, D), IN(F32, -1, 1, UNIF, 2, L, D)}, .guard = guard_, .tol = EXACT_OVF}, SW_IO, ADJ_NONE}
    ROPE(UNIF, 0, 1, 1, 1, 2), ROPE(UNIF, 0, 2, 7, 3, 16), ROPE(UNIF, 0, 1, 17, 2, 64), ROPE(UNIF, 0, 2, 33, 1, 8),
    ROPE(NONF, 0, 2, 5, 3, 8), ROPE(SPEC, 0, 2, 5, 2, 128), ROPE(UNIF, 1, 1, 33, 4, 6),
#undef ROPE

    /* ATTENTION (B, H, Lq, Lk, Dh, Dv); scale 0 is the SDPA default 1/sqrt(Dh) */
    ATT(1.0f, -1, 0, 1, 1, 1, 1, 1, 1), ATT(0.25f, -1, 0, 1, 2, 7, 17, 16, 16), ATT(0.0f, -1, 0, 2, 3, 17, 33, 8, 8),
    ATT(0.125f, -1, 0, 1, 1, 65, 7, 64, 32), ATT(0.1767767f, -1, 0, 1, 2, 33, 65, 32, 32),
    ATT(0.3f, -1, 0, 1, 1, 1, 7, 16, 16), ATT(0.0f, -1, 0, 2, 3, 17, 33, 64, 64), ATT(0.0f, -1, 0, 1, 2, 129, 77, 80, 80),
    ATT(0.3f, -1, 0, 1, 1, 300, 5, 8, 8), ATT(0.0f, -1, 1, 1, 2, 5, 300, 3, 3), ATT(0.0f, -1, 0, 1, 1, 64, 64, 128, 64),
    ATT(0.3f, -8, 0, 2, 2, 40, 40, 32, 48),
    /* long keys: the cpu backend tiles queries */
    {{.family = "attention", .op = {.kind = DRIFT_OP_ATTENTION, .n_in = 3, .out = F32, .compute = BF, .scale = 0.35f}, .in = {IN(BF, -1, 1, UNIF, 4, 1, 1, 130, 8), IN(BF, -1, 1, UNIF, 4, 1, 1, 20000, 8), IN(BF, -1, 1, UNIF, 4, 1, 1, 20000, 8)}}, 0, adj_attention},
    /* fp32 operands with bf16 compute: rounded first, as on the cpu */
    {{.family = "attention", .op = {.kind = DRIFT_OP_ATTENTION, .n_in = 3, .out = BF, .compute = BF}, .in = {IN(F32, -1, 1, UNIF, 4, 1, 2, 33, 64), IN(F32, -1, 1, UNIF, 4, 1, 2, 33, 64), IN(F32, -1, 1, UNIF, 4, 1, 2, 33, 64)}}, 0, adj_attention_rounded},
    /* non-finite q, k, v */
#define ATTN_NF(f0, f1, f2) {{.family = "attention", .op = {.kind = DRIFT_OP_ATTENTION, .n_in = 3, .out = BF, .compute = F32, .scale = 0.25f}, .in = {IN(CMP, -1, 1, f0, 4, 1, 2, 7, 16), IN(CMP, -1, 1, f1, 4, 1, 2, 9, 16), IN(CMP, -1, 1, f2, 4, 1, 2, 9, 16)}}, PARITY_SW_COMPUTE, adj_attention}
    ATTN_NF(NONF, UNIF, UNIF), ATTN_NF(UNIF, NONF, UNIF), ATTN_NF(UNIF, UNIF, NONF),
#undef ATTN_NF

    /* layouts: PERMUTE, NARROW, CONCAT, VIEW, PATCHIFY, UNPATCHIFY */
    {{.family = "permute", .op = {.kind = DRIFT_OP_PERMUTE, .n_in = 1, .out = F32, .compute = F32, .perm = {2, 0, 1}}, .in = {IN(F32, -4, 4, UNIF, 3, 2, 3, 7)}, .tol = EXACT}, SW_IO, adj_move},
    {{.family = "permute", .op = {.kind = DRIFT_OP_PERMUTE, .n_in = 1, .out = F32, .compute = F32, .perm = {4, 2, 0, 3, 1}}, .in = {IN(F32, -4, 4, UNIF, 5, 3, 1, 5, 2, 4)}, .tol = EXACT}, SW_IO, adj_move},
    {{.family = "permute", .op = {.kind = DRIFT_OP_PERMUTE, .n_in = 1, .out = F32, .compute = F32, .perm = {0}}, .in = {IN(F32, -4, 4, UNIF, 1, 17)}, .tol = EXACT}, SW_IO, adj_move},
    {{.family = "permute", .op = {.kind = DRIFT_OP_PERMUTE, .n_in = 1, .out = F32, .compute = F32, .perm = {1, 0}}, .in = {IN(F32, -4, 4, NONF, 2, 3, 5)}, .tol = EXACT}, PARITY_SW_OUT, adj_move},
    {{.family = "permute", .op = {.kind = DRIFT_OP_PERMUTE, .n_in = 1, .out = F32, .compute = F32, .perm = {7, 3, 5, 1, 0, 6, 2, 4}}, .in = {IN(F32, -4, 4, SPEC, 8, 2, 3, 1, 4, 2, 3, 2, 3)}, .guard = 1, .tol = EXACT_OVF}, SW_IO, adj_move},
    {{.family = "permute", .op = {.kind = DRIFT_OP_PERMUTE, .n_in = 1, .out = F32, .compute = F32, .perm = {3, 1, 2, 0}}, .in = {IN(F32, -4, 4, UNIF, 4, 7, 5, 9, 3)}, .tol = EXACT}, SW_IO, adj_move},
    {{.family = "narrow", .op = {.kind = DRIFT_OP_NARROW, .n_in = 1, .out = F32, .compute = F32, .dim = 1, .start = 3, .length = 9}, .in = {IN(F32, -4, 4, UNIF, 2, 7, 17)}, .tol = EXACT}, SW_IO, adj_move},
    {{.family = "narrow", .op = {.kind = DRIFT_OP_NARROW, .n_in = 1, .out = F32, .compute = F32, .dim = -1, .start = 32, .length = 1}, .in = {IN(F32, -4, 4, UNIF, 3, 5, 3, 33)}, .tol = EXACT}, SW_IO, adj_move},
    {{.family = "narrow", .op = {.kind = DRIFT_OP_NARROW, .n_in = 1, .out = F32, .compute = F32, .dim = 0, .start = 0, .length = 3}, .in = {IN(F32, -4, 4, UNIF, 4, 3, 17, 5, 33)}, .tol = EXACT}, SW_IO, adj_move},
    {{.family = "narrow", .op = {.kind = DRIFT_OP_NARROW, .n_in = 1, .out = F32, .compute = F32, .dim = 2, .start = 1, .length = 0}, .in = {IN(F32, -4, 4, UNIF, 4, 3, 17, 5, 33)}, .tol = EXACT}, SW_IO, adj_move},
    {{.family = "narrow", .op = {.kind = DRIFT_OP_NARROW, .n_in = 1, .out = F32, .compute = F32, .dim = 1, .start = 1, .length = 15}, .in = {IN(F32, -4, 4, UNIF, 4, 3, 17, 5, 33)}, .guard = 1, .tol = EXACT}, SW_IO, adj_move},
    {{.family = "concat", .op = {.kind = DRIFT_OP_CONCAT, .n_in = 2, .out = F32, .compute = F32, .dim = 1}, .in = {IN(F32, -4, 4, UNIF, 2, 3, 7), IN(IN0, -4, 4, UNIF, 2, 3, 10)}, .tol = EXACT}, SW_IO, adj_move},
    {{.family = "concat", .op = {.kind = DRIFT_OP_CONCAT, .n_in = 2, .out = F32, .compute = F32, .dim = -2}, .in = {IN(F32, -4, 4, UNIF, 3, 2, 3, 5), IN(IN0, -4, 4, UNIF, 3, 2, 1, 5)}, .tol = EXACT}, SW_IO, adj_move},
    {{.family = "concat", .op = {.kind = DRIFT_OP_CONCAT, .n_in = 2, .out = F32, .compute = F32, .dim = 0}, .in = {IN(F32, -4, 4, UNIF, 3, 4, 7, 9), IN(IN0, -4, 4, SPEC, 3, 6, 7, 9)}, .tol = EXACT_OVF}, SW_IO, adj_move},
    {{.family = "concat", .op = {.kind = DRIFT_OP_CONCAT, .n_in = 2, .out = F32, .compute = F32, .dim = -1}, .in = {IN(F32, -4, 4, UNIF, 3, 4, 7, 9), IN(IN0, -4, 4, SPEC, 3, 4, 7, 11)}, .guard = 1, .tol = EXACT_OVF}, SW_IO, adj_move},
    {{.family = "view", .op = {.kind = DRIFT_OP_VIEW, .n_in = 1, .out = F32, .compute = F32}, .in = {IN(F32, -4, 4, UNIF, 3, 3, 7, 5)}, .out_nd = 2, .out_sh = {21, 5}, .tol = EXACT}, SW_IO, adj_move},
    {{.family = "view", .op = {.kind = DRIFT_OP_VIEW, .n_in = 1, .out = F32, .compute = F32}, .in = {IN(F32, -4, 4, UNIF, 2, 33, 130)}, .out_nd = 3, .out_sh = {11, 3, 130}, .tol = EXACT}, SW_IO, adj_move},
#define PATCH(B, C, F, Hh, W, pf, ph, pw) {{.family = "patchify", .op = {.kind = DRIFT_OP_PATCHIFY, .n_in = 1, .out = F32, .compute = F32, .patch = {pf, ph, pw}}, .in = {IN(F32, -4, 4, UNIF, 5, B, C, F, Hh, W)}, .tol = EXACT}, SW_IO, adj_move}
/* layout 1: channels-last features (pf, ph, pw, c), the patch embedding's (issue 16) */
#define PATCHCL(B, C, F, Hh, W, pf, ph, pw) {{.family = "patchify", .op = {.kind = DRIFT_OP_PATCHIFY, .n_in = 1, .out = F32, .compute = F32, .patch = {pf, ph, pw}, .layout = 1}, .in = {IN(F32, -4, 4, UNIF, 5, B, C, F, Hh, W)}, .tol = EXACT}, SW_IO, adj_move}
#define UNPATCH(B, C, F, Hh, W, pf, ph, pw) {{.family = "unpatchify", .op = {.kind = DRIFT_OP_UNPATCHIFY, .n_in = 1, .out = F32, .compute = F32, .patch = {pf, ph, pw}}, .in = {IN(F32, -4, 4, UNIF, 3, B, (F / pf) * (Hh / ph) * (W / pw), C * pf * ph * pw)}, .out_nd = 5, .out_sh = {B, C, F, Hh, W}, .tol = EXACT}, SW_IO, adj_move}
    PATCH(2, 5, 3, 6, 9, 3, 2, 3), PATCH(1, 16, 3, 8, 6, 1, 2, 2), PATCH(2, 3, 4, 4, 6, 2, 2, 2), PATCH(1, 5, 2, 3, 3, 1, 1, 1),
    PATCH(1, 2, 6, 5, 4, 3, 1, 2),
    PATCHCL(2, 5, 3, 6, 9, 3, 2, 3), PATCHCL(1, 16, 3, 8, 6, 1, 2, 2), PATCHCL(1, 2, 6, 5, 4, 3, 1, 2),
    UNPATCH(2, 5, 3, 6, 9, 3, 2, 3), UNPATCH(1, 16, 3, 8, 6, 1, 2, 2), UNPATCH(2, 3, 4, 4, 6, 2, 2, 2), UNPATCH(1, 5, 2, 3, 3, 1, 1, 1),
    UNPATCH(1, 2, 6, 5, 4, 3, 1, 2),
#undef PATCH
#undef PATCHCL
#undef UNPATCH

    /* TIMESTEP_SINUSOID t[B] -> [B, dim]; max_period 0 means the default 10000 */
    SINUS(1, 1, 0, 0.0f), SINUS(3, 2, 1, 10000.0f), SINUS(7, 7, 0, 0.0f), SINUS(1, 16, 1, 10000.0f), SINUS(3, 33, 0, 0.0f),
    SINUS(7, 256, 1, 10000.0f), SINUS(3, 1, 1, 10000.0f), SINUS(7, 2, 0, 0.0f), SINUS(1, 7, 1, 10000.0f),
    SINUS(3, 16, 0, 0.0f), SINUS(7, 33, 1, 10000.0f), SINUS(1, 256, 0, 0.0f), SINUS(17, 3, 0, 100.0f),
    SINUS(3, 8, 1, 100.0f), SINUS(17, 255, 0, 10000.0f), SINUS(3, 320, 1, 100.0f),
    {{.family = "timestep_sinusoid", .op = {.kind = DRIFT_OP_TIMESTEP_SINUSOID, .n_in = 1, .out = F32, .compute = F32, .dim = 9}, .in = {IN(F32, 0, 1000, NONF, 1, 4)}}, 0, adj_sinusoid},

    /* ATen-level ops (captured graphs). UNARY: rsqrt, sqrt, reciprocal on positive inputs */
    ATEN_UNARY(DRIFT_UNARY_NEG, -3.0f, 1), ATEN_UNARY(DRIFT_UNARY_EXP, -3.0f, 0), ATEN_UNARY(DRIFT_UNARY_SIN, -3.0f, 0),
    ATEN_UNARY(DRIFT_UNARY_COS, -3.0f, 0), ATEN_UNARY(DRIFT_UNARY_RSQRT, 0.25f, 1), ATEN_UNARY(DRIFT_UNARY_SQRT, 0.25f, 1),
    ATEN_UNARY(DRIFT_UNARY_TANH, -3.0f, 0), ATEN_UNARY(DRIFT_UNARY_SIGMOID, -3.0f, 0),
    ATEN_UNARY(DRIFT_UNARY_GELU_ERF, -3.0f, 0), ATEN_UNARY(DRIFT_UNARY_RECIP, 0.25f, 1),
    ATEN_UNARY(DRIFT_UNARY_ABS, -3.0f, 1), ATEN_UNARY(DRIFT_UNARY_RELU, -3.0f, 1),
    ATEN_UNARY(DRIFT_UNARY_MASK_BIAS, -3.0f, 1),
    ATEN_SCALAR8(DRIFT_SCALAR_ADD, 1, 1), ATEN_SCALAR8(DRIFT_SCALAR_SUB, 1, 1), ATEN_SCALAR8(DRIFT_SCALAR_RSUB, 1, 1),
    ATEN_SCALAR8(DRIFT_SCALAR_MUL, 1, 1), ATEN_SCALAR8(DRIFT_SCALAR_DIV, 1, 1), ATEN_SCALAR8(DRIFT_SCALAR_POW, 1, 0),
    ATEN_SCALAR8(DRIFT_SCALAR_RPOW, 0, 0), ATEN_SCALAR8(DRIFT_SCALAR_MAX, 1, 1), ATEN_SCALAR8(DRIFT_SCALAR_MIN, 1, 1),
    /* DIV broadcasting [5, 1] against [4, 5, 33] */
    {{.family = "div", .op = {.kind = DRIFT_OP_DIV, .n_in = 2, .out = F32, .compute = F32}, .in = {IN(OUTD, -4, 4, UNIF, 3, 4, 5, 33), IN(OUTD, 0.5f, 4, UNIF, 2, 5, 1)}, .tol = {.exact = 1}}, PARITY_SW_OUT, ADJ_NONE},
    ATEN_REDUCE(DRIFT_REDUCE_SUM, 0), ATEN_REDUCE(DRIFT_REDUCE_MEAN, 0), ATEN_REDUCE(DRIFT_REDUCE_SUM, 1),
    ATEN_REDUCE(DRIFT_REDUCE_MEAN, 1), ATEN_REDUCE(DRIFT_REDUCE_SUM, 2), ATEN_REDUCE(DRIFT_REDUCE_MEAN, 2),
    /* STRIDED x[..., 1::2] of [2, 3, 4]; an expand of row 1 ([3] at offset 4) to [5, 3] */
    {{.family = "strided", .op = {.kind = DRIFT_OP_STRIDED, .n_in = 1, .out = F32, .compute = F32, .start = 1, .stride = {12, 4, 2}}, .in = {IN(OUTD, -4, 4, UNIF, 3, 2, 3, 4)}, .out_nd = 3, .out_sh = {2, 3, 2}, .tol = ATEN_MOVE}, PARITY_SW_OUT, ADJ_NONE},
    {{.family = "strided", .op = {.kind = DRIFT_OP_STRIDED, .n_in = 1, .out = F32, .compute = F32, .start = 4, .stride = {0, 1}}, .in = {IN(OUTD, -4, 4, UNIF, 3, 2, 3, 4)}, .out_nd = 2, .out_sh = {5, 3}, .tol = ATEN_MOVE}, PARITY_SW_OUT, ADJ_NONE},
    /* SCATTER: copy_ of [2, 3] into x[:, :, 3] of [2, 3, 4] */
    /* PUT (index_put, scatter*, index_add, scatter_reduce): 24 int64 indices into 12 elements,
     * repeats included; every variant (set, accumulate, amax, amin, prod) is one fp64 body rounded
     * once on every backend (an int64 input sends the op to it): exact against the cpu */
    ATEN_PUT(0), ATEN_PUT(1), ATEN_PUT(2), ATEN_PUT(3), ATEN_PUT(4),
    /* TAKE (gather, index, topk's and sort's values): int64 indices into 12 elements, a move */
    {{.family = "take", .op = {.kind = DRIFT_OP_TAKE, .n_in = 2, .out = F32, .compute = F32},
      .in = {IN(OUTD, -4, 4, UNIF, 2, 3, 4), IN(DRIFT_I64, 0, 12, PARITY_INDEX, 2, 5, 7)}, .tol = ATEN_MOVE},
     PARITY_SW_OUT, ADJ_NONE},
    {{.family = "scatter", .op = {.kind = DRIFT_OP_SCATTER, .n_in = 2, .out = F32, .compute = F32, .start = 3, .stride = {12, 4}}, .in = {IN(OUTD, -4, 4, UNIF, 3, 2, 3, 4), IN(OUTD, -4, 4, UNIF, 2, 2, 3)}, .tol = ATEN_MOVE}, PARITY_SW_OUT, ADJ_NONE},
    /* FILL like input 0: a constant, an iota, a linspace */
    ATEN_FILL(0, 1.0 / 3.0), ATEN_FILL(1, -3.0), ATEN_FILL(2, -3.0),
};

const int parity_n_rows = (int)(sizeof parity_rows / sizeof parity_rows[0]);
