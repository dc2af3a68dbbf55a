/* LINEAR's fused bias on the CUDA backend: one rounding, as on the cpu.
 * (LINEAR and ATTENTION parity over shapes, dtypes and the kernel variants
 * gemm=unfused|naive, attn_scratch=..., attention=unfused is the parity
 * table, tests/parity/cases.c, run by tests/gpu/test_parity.c.) */
#include "gpu_check.h"

static gc_env E;

static double max_abs(const gc_host *h) {
    double m = 0.0;
    for (int64_t i = 0; i < h->n; i++)
        if (isfinite(h->v[i]) && fabs(h->v[i]) > m) m = fabs(h->v[i]);
    return m;
}

/* A fused bias (one rounding) differs from LINEAR + ADD (two roundings).
 * The bias is large (N(0,3)) against the product (N(0,1)) so that rounding
 * before the bias is visible: the cuda LINEAR with a bf16 bias must equal
 * the cpu's within 1 ULP, on shapes where cuBLASLt would pick split-K
 * (small M*N, whose reduction kernel rounds before adding the bias) and on
 * a large one; and on the first shape it must differ from the two-rounding
 * result somewhere (the epilogue really rounds once). */
static void test_bias_rounding(void) {
    static const int64_t mnk[][3] = {{64, 128, 256}, {127, 255, 129}, {17, 33, 3}, {2, 3072, 3072}, {33, 4097, 17}};
    for (size_t s = 0; s < sizeof mnk / sizeof *mnk; s++) {
        int64_t M = mnk[s][0], N = mnk[s][1], K = mnk[s][2];
        int64_t xs[2] = {M, K}, ws[2] = {N, K}, bs[1] = {N};
        gc_host x = gc_host_make(DRIFT_BF16, 2, xs, 1.0), w = gc_host_make(DRIFT_BF16, 2, ws, 1.0 / sqrt((double)K)),
                b = gc_host_make(DRIFT_BF16, 1, bs, 3.0);
        drift_op op = gc_op(DRIFT_OP_LINEAR, DRIFT_BF16);
        op.compute = DRIFT_BF16;
        gc_case_spec c;
        memset(&c, 0, sizeof c);
        c.op = op;
        c.n_in = 3;
        c.in[0] = &x;
        c.in[1] = &w;
        c.in[2] = &b;
        c.out_ndim = -1;
        c.guard = 64;
        c.ulps = 1.0;
        c.atol = (double)K * ldexp(1.0, -21) * max_abs(&x) * max_abs(&w);
        c.nmse_ref = 4e-5;
        gc_case_set("linear fused bias bf16 M=%lld N=%lld K=%lld", (long long)M, (long long)N, (long long)K);
        gc_run_case(&E, E.cuda, &c);
        float *fused = c.out_cuda;
        c.out_cuda = NULL;
        c.n_in = 2;
        gc_case_set("linear no bias bf16 M=%lld N=%lld K=%lld", (long long)M, (long long)N, (long long)K);
        gc_run_case(&E, E.cuda, &c);
        float *nobias = c.out_cuda;
        c.out_cuda = NULL;
        if (fused && nobias && s == 0) {
            int64_t n = M * N, differ = 0;
            for (int64_t i = 0; i < n; i++) {
                float two = drift_round_to(nobias[i] + b.v[i % N], DRIFT_BF16);
                differ += !gc_same_bits(two, fused[i]);
            }
            GC_CHECK(differ > 0, "fused bias equals bias added after rounding everywhere (rounded twice?)");
        }
        free(fused);
        free(nobias);
        gc_host_free(&x);
        gc_host_free(&w);
        gc_host_free(&b);
    }
}

int main(void) {
    gc_require_gpu("test_cuda_gemm");
    gc_seed(777);
    gc_env_open(&E);
    if (!E.cuda) return gc_finish("test_cuda_gemm");
    test_bias_rounding();
    gc_env_close(&E);
    return gc_finish("test_cuda_gemm");
}
