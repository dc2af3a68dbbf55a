/* drift's blocked fp32 GEMM (the order: cpu_gemm.h).
 *
 * Structure (the usual packed GEMM): the columns are taken in chunks whose
 * packed B (all of K, micro-panels of NR columns) fits CHUNK_FLOATS; the
 * chunk is packed once (threads over panels), then cut into work units of
 * MC rows x NU*NR columns, a thread taking a contiguous run of units. Per
 * unit, for each K block in order: pack that block of A (MC x kc,
 * micro-panels of MR rows), then run the MR x NR micro-kernel over every
 * (B panel, A panel) pair. The micro-kernel starts its accumulators at zero
 * (p_b of the order), runs the FMA chain over k, and stores C = p_b (first
 * block) or C = C + p_b. Every output element is owned by one unit, so the
 * thread split never changes a bit. Edges are zero-padded in the packs;
 * padded results are never stored. */
#include "kernels/cpu/cpu_gemm.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "formats/alloc.h"
#include "kernels/cpu/host_internal.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define GEMM_X86 1
#else
#define GEMM_X86 0
#endif

#define MR 6
#define NR 16
#define KC DRIFT_GEMM_KC
#define MC 96                        /* rows of A per unit: 16 micro-panels */
#define NU 16                        /* B micro-panels per unit: 256 columns */
#define CHUNK_FLOATS ((int64_t)1 << 20) /* packed B per chunk of columns: 4 MiB */
#define PACK_FLOATS ((int64_t)1 << 16)  /* packing work per thread below which fewer threads pack */
#define UNIT_FLOPS ((int64_t)1 << 22) /* work per thread below which fewer threads are used */

static atomic_int g_force_scalar;

void drift_cpu_gemm_force_scalar(int on) { atomic_store(&g_force_scalar, on ? 1 : 0); }

static int use_avx2(void) {
    if (atomic_load(&g_force_scalar)) return 0;
    const char *e = getenv("DRIFT_CPU_GEMM");
    if (e && strcmp(e, "scalar") == 0) return 0;
#if GEMM_X86
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

const char *drift_cpu_gemm_path(void) { return use_avx2() ? "avx2+fma" : "scalar"; }

/* The mr x nr valid part of an accumulator tile into C. */
static void tile_store(float acc[MR][NR], float *c, int64_t ldc, int mr, int nr, int first) {
    for (int i = 0; i < mr; i++) {
        float *ci = c + i * ldc;
        if (first)
            for (int j = 0; j < nr; j++) ci[j] = acc[i][j];
        else
            for (int j = 0; j < nr; j++) ci[j] = ci[j] + acc[i][j];
    }
}

typedef void (*ukernel_fn)(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, int mr, int nr,
                           int first);

/* ap: kc x MR (k-major), bp: kc x NR (k-major). */
static void ukernel_scalar(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc, int mr, int nr,
                           int first) {
    float acc[MR][NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = 0.0f;
    for (int64_t k = 0; k < kc; k++, ap += MR, bp += NR)
        for (int i = 0; i < MR; i++) {
            const float a = ap[i];
            for (int j = 0; j < NR; j++) acc[i][j] = fmaf(a, bp[j], acc[i][j]);
        }
    tile_store(acc, c, ldc, mr, nr, first);
}

#if GEMM_X86
/* The same operations, eight columns per instruction: vfmadd computes
 * a*b + acc with one rounding per lane (= fmaf), vaddps C + p (= C + p). */
__attribute__((target("avx2,fma"))) static void ukernel_avx2(int64_t kc, const float *ap, const float *bp, float *c,
                                                             int64_t ldc, int mr, int nr, int first) {
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps(), c10 = _mm256_setzero_ps(),
           c11 = _mm256_setzero_ps(), c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps(),
           c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps(), c40 = _mm256_setzero_ps(),
           c41 = _mm256_setzero_ps(), c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();
    for (int64_t k = 0; k < kc; k++, ap += MR, bp += NR) {
        const __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
        __m256 a = _mm256_broadcast_ss(ap);
        c00 = _mm256_fmadd_ps(a, b0, c00);
        c01 = _mm256_fmadd_ps(a, b1, c01);
        a = _mm256_broadcast_ss(ap + 1);
        c10 = _mm256_fmadd_ps(a, b0, c10);
        c11 = _mm256_fmadd_ps(a, b1, c11);
        a = _mm256_broadcast_ss(ap + 2);
        c20 = _mm256_fmadd_ps(a, b0, c20);
        c21 = _mm256_fmadd_ps(a, b1, c21);
        a = _mm256_broadcast_ss(ap + 3);
        c30 = _mm256_fmadd_ps(a, b0, c30);
        c31 = _mm256_fmadd_ps(a, b1, c31);
        a = _mm256_broadcast_ss(ap + 4);
        c40 = _mm256_fmadd_ps(a, b0, c40);
        c41 = _mm256_fmadd_ps(a, b1, c41);
        a = _mm256_broadcast_ss(ap + 5);
        c50 = _mm256_fmadd_ps(a, b0, c50);
        c51 = _mm256_fmadd_ps(a, b1, c51);
    }
    const __m256 r[MR][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
    if (mr == MR && nr == NR) {
        for (int i = 0; i < MR; i++) {
            float *ci = c + i * ldc;
            if (first) {
                _mm256_storeu_ps(ci, r[i][0]);
                _mm256_storeu_ps(ci + 8, r[i][1]);
            } else {
                _mm256_storeu_ps(ci, _mm256_add_ps(_mm256_loadu_ps(ci), r[i][0]));
                _mm256_storeu_ps(ci + 8, _mm256_add_ps(_mm256_loadu_ps(ci + 8), r[i][1]));
            }
        }
        _mm256_zeroupper();
        return;
    }
    float acc[MR][NR];
    for (int i = 0; i < MR; i++) {
        _mm256_storeu_ps(acc[i], r[i][0]);
        _mm256_storeu_ps(acc[i] + 8, r[i][1]);
    }
    /* clean upper halves before SSE code runs: with them dirty, the SSE code
     * after the GEMM (softmax's expf) ran 12x slower on a Zen 3 */
    _mm256_zeroupper();
    tile_store(acc, c, ldc, mr, nr, first);
}
#endif

/* A rows [m0, m0+mc) x cols [k0, k0+kc) -> micro-panels ap[ip][k][i], rows past mc zero.
 * k outer: the pack is written in order, the MR source rows read as streams. */
static void pack_a(const drift_gemm *g, int64_t m0, int64_t mc, int64_t k0, int64_t kc, float *ap) {
    for (int64_t ip = 0; ip * MR < mc; ip++) {
        float *p = ap + ip * kc * MR;
        const int mv = mc - ip * MR < MR ? (int)(mc - ip * MR) : MR;
        const float *a = g->a + (m0 + ip * MR) * g->a_m + k0 * g->a_k;
        for (int64_t k = 0; k < kc; k++, p += MR) {
            const float *ak = a + k * g->a_k;
            int i = 0;
            for (; i < mv; i++) p[i] = ak[i * g->a_m];
            for (; i < MR; i++) p[i] = 0.0f;
        }
    }
}

/* B rows [k0, k0+kc) x cols [n0, n0+nc) -> micro-panels bp[jp][k][j], cols past nc zero. */
static void pack_b(const drift_gemm *g, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float *bp) {
    for (int64_t jp = 0; jp * NR < nc; jp++) {
        float *p = bp + jp * kc * NR;
        const int nv = nc - jp * NR < NR ? (int)(nc - jp * NR) : NR;
        const float *b = g->b + k0 * g->b_k + (n0 + jp * NR) * g->b_n;
        for (int64_t k = 0; k < kc; k++, p += NR) {
            const float *bk = b + k * g->b_k;
            int j = 0;
            for (; j < nv; j++) p[j] = bk[j * g->b_n];
            for (; j < NR; j++) p[j] = 0.0f;
        }
    }
}

typedef struct gemm_job {
    const drift_gemm *g;
    ukernel_fn uk;
    int64_t n0, nc;      /* the chunk of columns in bpk */
    int64_t units, mblocks, nslots;
    float *bpk;          /* the chunk of B: panel p (NR columns, all K) at p*K*NR, [k][j] */
    float *abufs;        /* per slot: MC*KC floats of A */
} gemm_job;

/* Panels [p0, p1) of the chunk of B, all of K. */
static void pack_b_range(void *p, int64_t p0, int64_t p1) {
    const gemm_job *j = p;
    const int64_t K = j->g->K;
    for (int64_t q = p0; q < p1; q++) {
        const int64_t nv = j->nc - q * NR < NR ? j->nc - q * NR : NR;
        pack_b(j->g, 0, K, j->n0 + q * NR, nv, j->bpk + q * K * NR);
    }
}

/* Unit u: rows [m0, m0+MC) x panels [q0, q0+NU) of the chunk, every K block in order. */
static void run_unit(const gemm_job *j, int64_t u, float *ap) {
    const drift_gemm *g = j->g;
    const int64_t mb = u % j->mblocks, nb = u / j->mblocks;
    const int64_t m0 = mb * MC, mc = g->M - m0 < MC ? g->M - m0 : MC;
    const int64_t c0 = nb * NU * NR, nc = j->nc - c0 < NU * NR ? j->nc - c0 : NU * NR;
    for (int64_t k0 = 0; k0 < g->K; k0 += KC) {
        const int64_t kc = g->K - k0 < KC ? g->K - k0 : KC;
        pack_a(g, m0, mc, k0, kc, ap);
        for (int64_t jp = 0; jp * NR < nc; jp++) {
            const int nr = (int)(nc - jp * NR < NR ? nc - jp * NR : NR);
            const float *bp = j->bpk + (c0 / NR + jp) * g->K * NR + k0 * NR;
            for (int64_t ip = 0; ip * MR < mc; ip++) {
                const int mr = (int)(mc - ip * MR < MR ? mc - ip * MR : MR);
                float *c = g->c + (m0 + ip * MR) * g->c_m + j->n0 + c0 + jp * NR;
                j->uk(kc, ap + ip * kc * MR, bp, c, g->c_m, mr, nr, k0 == 0);
            }
        }
    }
}

/* Slot s runs units [s*U/S, (s+1)*U/S) with its own A buffer. */
static void slot_range(void *p, int64_t s0, int64_t s1) {
    const gemm_job *j = p;
    for (int64_t s = s0; s < s1; s++)
        for (int64_t u = s * j->units / j->nslots; u < (s + 1) * j->units / j->nslots; u++)
            run_unit(j, u, j->abufs + s * (int64_t)MC * KC);
}

int drift_cpu_gemm(int nthreads, const drift_gemm *g) {
    if (g->M <= 0 || g->N <= 0) return 0;
    if (g->K <= 0) {
        for (int64_t m = 0; m < g->M; m++) memset(g->c + m * g->c_m, 0, (size_t)g->N * sizeof(float));
        return 0;
    }
    gemm_job j;
    memset(&j, 0, sizeof j);
    j.g = g;
    j.uk = ukernel_scalar;
#if GEMM_X86
    if (use_avx2()) j.uk = ukernel_avx2;
#endif
    const int nt = nthreads < 1 ? 1 : nthreads;
    /* columns per chunk: B packed once per chunk (at most CHUNK_FLOATS), NU*NR at least */
    const int64_t npan = (g->N + NR - 1) / NR;
    int64_t chp = CHUNK_FLOATS / (g->K * NR);
    chp = chp < NU ? NU : chp > npan ? npan : chp;
    j.mblocks = (g->M + MC - 1) / MC;
    j.bpk = drift_malloc((size_t)(chp * NR * g->K) * sizeof(float));
    j.abufs = drift_malloc((size_t)nt * MC * KC * sizeof(float));
    if (!j.bpk || !j.abufs) {
        drift_free(j.bpk);
        drift_free(j.abufs);
        return -1;
    }
    for (j.n0 = 0; j.n0 < g->N; j.n0 += chp * NR) {
        j.nc = g->N - j.n0 < chp * NR ? g->N - j.n0 : chp * NR;
        const int64_t panels = (j.nc + NR - 1) / NR;
        drift_host_parallel_for(nt, panels, (PACK_FLOATS + g->K * NR - 1) / (g->K * NR), pack_b_range, &j);
        j.units = j.mblocks * ((panels + NU - 1) / NU);
        const double flops = 2.0 * (double)g->M * (double)j.nc * (double)g->K;
        int64_t ns = nt < j.units ? nt : j.units;
        if ((double)ns * (double)UNIT_FLOPS > flops) ns = (int64_t)(flops / (double)UNIT_FLOPS);
        j.nslots = ns < 1 ? 1 : ns;
        drift_host_parallel_for((int)j.nslots, j.nslots, 1, slot_range, &j);
    }
    drift_free(j.bpk);
    drift_free(j.abufs);
    return 0;
}
