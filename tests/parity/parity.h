/* The op-parity harness (after ggml's test-backend-ops): one table of op
 * cases with their tolerances (tests/parity/cases.c), run over every backend
 * instance present. Plain C, no cmocka, so the GPU machine needs nothing
 * else: tests/kernels/test_parity.c runs it over ref and cpu (and cuda when
 * this build and machine have one), tests/gpu/test_parity.c over ref, cpu
 * and every cuda kernel variant.
 *
 * Per case: inputs drawn from a seeded PRNG (never zero unless a fill says
 * so), rounded to their dtype on the host and uploaded as the same values
 * to every backend. The ref backend (fp64, never rounds) gives the oracle.
 * Every other backend then runs the op twice, its output first poisoned
 * with NaN and then with a finite sentinel, inside guard elements on both
 * sides (a view at an offset into a larger allocation), and must:
 *   - give the same bits both times (every element written, deterministic);
 *   - leave the guards and its inputs untouched;
 *   - agree with the oracle on NaN/inf positions and stay within the
 *     case's NMSE bound by effective dtype (nmse_host for cpu, nmse_dev for
 *     devices);
 *   - for device backends, match the cpu backend bit for bit (exact) or
 *     within ulps + atol (the cpu is the exact-dtype reference).
 *
 * NMSE = sum (x - r)^2 / sum r^2 over elements finite on both sides. The
 * default bounds and why they hold are in cases.c. A backend without an op
 * (drift_backend_supports says no) is reported and skipped for that case. */
#ifndef DRIFT_TESTS_PARITY_H
#define DRIFT_TESTS_PARITY_H

#include <stdint.h>

#include "kernels/backend.h"

/* How an input is filled. */
typedef enum parity_fill {
    PARITY_UNIF = 0,     /* uniform in [lo, hi), rounded to dt, never zero */
    PARITY_SPECIALS,     /* uniform, then ~5% NaN/inf/-inf/+-0/huge/tiny (elementwise ops) */
    PARITY_PATTERNS,     /* every 16-bit pattern of dt (bf16/fp16; numel 65536) */
    PARITY_TIES,         /* fp32 values at bf16 and fp16 rounding ties (numel 65536) */
    PARITY_NONFINITE,    /* uniform with NaN at 0, +inf at n/2, -inf at n-1 */
    PARITY_INDEX         /* integers uniform in [lo, hi), zero included (an int64 index input) */
} parity_fill;

typedef struct parity_in {
    drift_dtype dt;
    int nd;
    int64_t sh[DRIFT_MAX_DIMS];
    float lo, hi;
    parity_fill fill;
} parity_in;

/* The scale of the absolute tolerance of device-vs-cpu comparisons. */
typedef enum parity_atol {
    PARITY_ATOL_NONE = 0,
    PARITY_ATOL_MAX_IN0,     /* atol * max|in0| */
    PARITY_ATOL_MAX_IN2,     /* atol * max|in2| (attention: max|v|) */
    PARITY_ATOL_IN0_PLUS1,   /* atol * (max|in0| + 1) */
    PARITY_ATOL_GEMM         /* atol * K * max|x| * max|W| */
} parity_atol;

typedef struct parity_tol {
    /* vs ref: NMSE bound by effective dtype {bf16, fp16, fp32}; 0 entries
     * take the defaults; a negative bound skips the ref comparison (values
     * outside every dtype's range, e.g. all bit patterns). */
    double nmse_host[3], nmse_dev[3];
    /* device vs cpu: bit-exact, or |x - c| <= ulps * ulp(max(|x|, |c|)) + atol */
    int exact;
    double ulps16, ulps32;       /* ULPs of the ulp dtype when 16-bit / fp32; < 0: no elementwise check */
    int ulp_of_coarser_in0;      /* ULPs of the coarser of out and in0 (RMS_NORM rounds to x's dtype) */
    double atol;
    parity_atol atol_kind;
    int may_overflow;            /* a 16-bit result may be inf where the oracle is finite and huge */
} parity_tol;

typedef struct parity_case {
    const char *family;          /* the table row's name */
    drift_op op;
    parity_in in[3];             /* op.n_in of them */
    int out_nd;                  /* VIEW, UNPATCHIFY: the requested output shape */
    int64_t out_sh[DRIFT_MAX_DIMS];
    int64_t guard;               /* guard elements around device tensors (0: 64); 1 gives odd offsets */
    parity_tol tol;
} parity_case;

/* Sweeps of a table row (parity_row.sweep): each swept dtype takes bf16,
 * fp16 and fp32 in turn. */
enum {
    PARITY_SW_OUT = 1,           /* op.out */
    PARITY_SW_IN0 = 2,           /* in[0].dt, and every input with dt PARITY_DT_IN0 */
    PARITY_SW_COMPUTE = 4,       /* op.compute, and every input with dt PARITY_DT_COMPUTE */
    PARITY_SW_IN1_ROT = 8        /* in[1].dt = the (in0 + out) rotation (mixed binary dtypes) */
};
#define PARITY_DT_IN0 ((drift_dtype)100)
#define PARITY_DT_COMPUTE ((drift_dtype)101)
#define PARITY_DT_OUT ((drift_dtype)102) /* an input in op.out's dtype (swept with PARITY_SW_OUT) */

/* One row of the table: a case, the dtypes it sweeps, and optionally a
 * function that sets the tolerances once the dtypes are known. */
typedef struct parity_row {
    parity_case c;
    int sweep;
    void (*adjust)(parity_case *c);
} parity_row;

/* The table (cases.c). */
extern const parity_row parity_rows[];
extern const int parity_n_rows;

/* One backend instance under test. */
typedef struct parity_backend {
    const char *spec;            /* "cpu", "cuda:i64=1", ... */
    drift_backend *be;
    int device;                  /* compared with the cpu backend too */
} parity_backend;

typedef struct parity_stats {
    long cases, checks, failed, skipped;
} parity_stats;

/* Runs every row's expansion on ref (the oracle), cpu (required) and the
 * other backends of bes. Prints one line per family and every failure;
 * returns the totals. only_family: NULL, or run only rows whose family
 * starts with it. */
parity_stats parity_run(const parity_backend *bes, int n, const char *only_family);

/* The fp64 table (tests/parity/f64.c): every op kind with an fp64 output,
 * and the casts into and out of fp64, on every backend of bes but ref (which
 * is required), each bit for bit against ref (a non-fp64 output: ref's value
 * rounded to fp32, then to its dtype). Prints one line; returns the totals
 * (checks: one per case and backend). */
parity_stats parity_run_f64(const parity_backend *bes, int n);

#endif
