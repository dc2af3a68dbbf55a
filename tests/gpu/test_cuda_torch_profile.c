/* The CUDA backend's torch kernel profile (kernels/cuda/torch/): what can be
 * checked without torch (bitwise parity with torch is tests/gpu/torch_parity.sh):
 *  - profile selection: the spec's kernels= and torch options, bad values refused,
 *    the profile readable back;
 *  - library identity filled (GPU name, driver, cuBLASLt version);
 *  - every torch-profile kernel (LINEAR with and without bias on both
 *    cuBLAS paths, LAYER_NORM with and without affine, RMS_NORM in the
 *    warp, wide-row (block_width > 32) and per-element configurations,
 *    GELU_TANH, SILU, ATTENTION through cuDNN in both layouts) is
 *    deterministic and writes every element (gc_run_case: two runs into
 *    differently poisoned outputs must agree bitwise, guard zones intact)
 *    and agrees with the cpu backend within the exact profile's tolerances
 *    (torch's arithmetic is another rounding of the same math) and with
 *    the fp64 ref backend;
 *  - the cuDNN patch convolution agrees with PATCHIFY + LINEAR, and is
 *    refused on an exact-profile backend;
 *  - drift_backend_last_choice names the path each LINEAR took (cuBLASLt with
 *    bias at any M (torch 2.11 on the H200), else cublasGemmEx; "" on the exact profile),
 *    and each ATTENTION's kernel (cuDNN SDPA; FlashAttention-2 and its split of the keys,
 *    another at batch 1 than at 16);
 *  - fallbacks are recorded: a misaligned layer-norm row, the sinusoid;
 *    single-IEEE-op kernels (CAST) are not counted;
 *  - the torch profile really is another kernel set: GELU-tanh differs from
 *    the exact profile's somewhere (torch's expression contracts an FMA). */
#include "gpu_check.h"

static gc_env E;
static drift_backend *T; /* torch profile */

static double max_abs(const gc_host *h) {
    double m = 0;
    for (int64_t i = 0; i < h->n; i++)
        if (isfinite(h->v[i]) && fabs(h->v[i]) > m) m = fabs(h->v[i]);
    return m;
}

static void spec_init(gc_case_spec *c, drift_op op, int n_in, int64_t guard) {
    memset(c, 0, sizeof *c);
    c->op = op;
    c->n_in = n_in;
    c->op.n_in = n_in; /* gc_run_cuda runs c->op as it is */
    c->out_ndim = -1;
    c->guard = guard;
}

static uint32_t fallbacks_after(gc_case_spec *c) {
    int64_t before = 0, after = 0;
    (void)drift_cuda_backend_torch_fallbacks(T, &before);
    GC_CHECK(gc_run_case(&E, T, c) == 0, "the case must run");
    free(c->out_cuda);
    c->out_cuda = NULL;
    uint64_t m = drift_cuda_backend_torch_fallbacks(T, &after);
    return after > before ? m : 0;
}

static void test_selection(void) {
    gc_case_set("profile selection");
    GC_CHECK(drift_cuda_kernel_profile_parse("torch") == DRIFT_CUDA_KERNELS_TORCH, "parse torch");
    GC_CHECK(drift_cuda_kernel_profile_parse("exact") == DRIFT_CUDA_KERNELS_EXACT, "parse exact");
    GC_CHECK(drift_cuda_kernel_profile_parse("Torch") == -1 && drift_cuda_kernel_profile_parse(NULL) == -1,
             "unknown names are -1");
    GC_CHECK(strcmp(drift_cuda_kernel_profile_name(DRIFT_CUDA_KERNELS_TORCH), "torch") == 0, "name");
    GC_CHECK(drift_cuda_backend_kernel_profile(T) == DRIFT_CUDA_KERNELS_TORCH, "T uses the torch profile");
    GC_CHECK(drift_cuda_backend_kernel_profile(E.cuda) == DRIFT_CUDA_KERNELS_EXACT, "the default is exact");
    GC_CHECK(drift_cuda_backend_kernel_profile(E.cpu) == -1, "not a cuda backend: -1");
    drift_err err;
    drift_err_clear(&err);
    drift_backend *be = NULL;
    GC_CHECK(drift_backend_create("cuda:0:kernels=fast", &be, &err) == DRIFT_E_INPUT && !be, "kernels=fast refused");
    GC_CHECK(strstr(err.msg, "fast") != NULL, "the message names the value: %s", err.msg);
    drift_err_clear(&err);
    GC_CHECK(drift_backend_create("cuda:0:torch_gemm=fast", &be, &err) == DRIFT_E_INPUT && !be,
             "torch_gemm=fast refused");
    drift_err_clear(&err);
    GC_CHECK(drift_backend_create("cuda:0:kernels=torch:ln_threads=100", &be, &err) == DRIFT_E_INPUT && !be,
             "ln_threads=100 refused (not a multiple of 32)");
    drift_err_clear(&err);
    GC_CHECK(drift_backend_create("cuda:0:kernels=torch", &be, &err) == DRIFT_OK && be, "kernels=torch: created");
    GC_CHECK(drift_cuda_backend_kernel_profile(be) == DRIFT_CUDA_KERNELS_TORCH, "the spec selects the profile");
    drift_backend_free(be);
    be = NULL;

    drift_cuda_identity id;
    GC_CHECK(drift_cuda_backend_identity(T, &id, &err) == DRIFT_OK, "identity");
    GC_CHECK(id.gpu_name[0] != '\0' && id.cc_major >= 7, "gpu name/cc: '%s' %d.%d", id.gpu_name, id.cc_major,
             id.cc_minor);
    GC_CHECK(id.driver_version > 0 && id.runtime_version > 0 && id.cublaslt_version > 0,
             "versions: driver %d runtime %d cublaslt %ld", id.driver_version, id.runtime_version,
             id.cublaslt_version);
    printf("identity: %s cc %d.%d driver %d runtime %d cublasLt %ld (%s) cublas %ld cudnn %ld (%s)\n", id.gpu_name,
           id.cc_major, id.cc_minor, id.driver_version, id.runtime_version, id.cublaslt_version, id.cublaslt_path,
           id.cublas_version, id.cudnn_version, id.cudnn_path);
    GC_CHECK(drift_cuda_backend_identity(E.cpu, &id, &err) == DRIFT_E_INPUT, "identity of the cpu backend refused");
}

static void test_linear(void) {
    const int64_t Ms[3] = {1, 64, 300};
    for (int mi = 0; mi < 3; mi++)
        for (int bias = 0; bias < 2; bias++) {
            const int64_t M = Ms[mi], K = 256, N = 192;
            int64_t xs[2] = {M, K}, ws[2] = {N, K}, bs[1] = {N};
            gc_host x = gc_host_make(DRIFT_BF16, 2, xs, 1.0), w = gc_host_make(DRIFT_BF16, 2, ws, 0.1),
                    b = gc_host_make(DRIFT_BF16, 1, bs, 0.5);
            drift_op op = gc_op(DRIFT_OP_LINEAR, DRIFT_BF16);
            op.compute = DRIFT_BF16;
            gc_case_spec c;
            spec_init(&c, op, bias ? 3 : 2, 64);
            c.in[0] = &x;
            c.in[1] = &w;
            c.in[2] = &b;
            c.ulps = 1.0;
            c.atol = (double)K * ldexp(1.0, -21) * max_abs(&x) * max_abs(&w) + (bias ? ldexp(1.0, -8) * 2.0 : 0.0);
            c.nmse_ref = gc_nmse_bound(DRIFT_BF16);
            gc_case_set("LINEAR torch M=%lld bias=%d", (long long)M, bias);
            GC_CHECK(fallbacks_after(&c) == 0, "LINEAR must not fall back");
            /* what the library chose, for drift invariance: torch's rule picks the path */
            char g[128];
            drift_backend_last_choice(T, g, sizeof g);
            const char *want = bias ? "cuBLASLt algo " : "cublasGemmEx ";
            GC_CHECK(strncmp(g, want, strlen(want)) == 0, "last GEMM '%s', expected '%s...'", g, want);
            drift_backend_last_choice(E.cuda, g, sizeof g);
            GC_CHECK(g[0] == '\0', "the exact profile has nothing to tell: '%s'", g);
            gc_host_free(&x);
            gc_host_free(&w);
            gc_host_free(&b);
        }
}

static void test_norms(void) {
    /* layer_norm: FP32LayerNorm-style fp32 rows, out fp32 and bf16 */
    for (int affine = 0; affine < 2; affine++)
        for (int oi = 0; oi < 2; oi++) {
            const drift_dtype odt = oi ? DRIFT_BF16 : DRIFT_F32;
            int64_t xs[2] = {40, 1536}, ws[1] = {1536};
            gc_host x = gc_host_make(DRIFT_F32, 2, xs, 2.0), w = gc_host_make(DRIFT_F32, 1, ws, 0.2),
                    b = gc_host_make(DRIFT_F32, 1, ws, 0.2);
            for (int64_t i = 0; i < x.n; i++) x.v[i] += 0.5f;
            for (int64_t i = 0; i < w.n; i++) w.v[i] += 1.0f;
            drift_op op = gc_op(DRIFT_OP_LAYER_NORM, odt);
            op.eps = 1e-6f;
            gc_case_spec c;
            spec_init(&c, op, affine ? 3 : 1, 0);
            c.in[0] = &x;
            c.in[1] = &w;
            c.in[2] = &b;
            c.ulps = odt == DRIFT_F32 ? 4.0 : 1.0;
            c.atol = 2e-4 * 2.0 * (max_abs(&x) + 1.0);
            c.nmse_ref = odt == DRIFT_F32 ? 1e-9 : gc_nmse_bound(odt);
            gc_case_set("LAYER_NORM torch affine=%d out=%s", affine, gc_dt(odt));
            GC_CHECK(fallbacks_after(&c) == 0, "an aligned D %% 4 == 0 layer_norm must not fall back");
            /* a 1-element guard misaligns the rows: recorded fallback, same tolerance */
            spec_init(&c, op, affine ? 3 : 1, 1);
            c.in[0] = &x;
            c.in[1] = &w;
            c.in[2] = &b;
            c.ulps = odt == DRIFT_F32 ? 4.0 : 1.0;
            c.atol = 2e-4 * 2.0 * (max_abs(&x) + 1.0);
            c.nmse_ref = -1;
            gc_case_set("LAYER_NORM torch misaligned affine=%d out=%s", affine, gc_dt(odt));
            uint32_t m = fallbacks_after(&c);
            GC_CHECK(m & (1ull << DRIFT_OP_LAYER_NORM), "a misaligned layer_norm is a recorded fallback (mask %llx)", (unsigned long long)m);
            GC_CHECK(strstr(drift_cuda_backend_torch_fallback_reason(T), "layer_norm") != NULL, "reason: %s",
                     drift_cuda_backend_torch_fallback_reason(T));
            gc_host_free(&x);
            gc_host_free(&w);
            gc_host_free(&b);
        }
    /* rms_norm: bf16 x, bf16 and fp32 weights; rows >= 512 (warp rows),
       3 rows (block_width 128 > 32), D = 128 (element-wise accumulators) */
    const int64_t shapes[3][2] = {{600, 1536}, {3, 1536}, {700, 128}};
    for (int si = 0; si < 3; si++)
        for (int wi = 0; wi < 2; wi++) {
            const drift_dtype wdt = wi ? DRIFT_F32 : DRIFT_BF16, odt = wi ? DRIFT_F32 : DRIFT_BF16;
            int64_t xs[2] = {shapes[si][0], shapes[si][1]}, ws[1] = {shapes[si][1]};
            gc_host x = gc_host_make(DRIFT_BF16, 2, xs, 3.0), w = gc_host_make(wdt, 1, ws, 0.1);
            for (int64_t i = 0; i < w.n; i++) w.v[i] = drift_round_to(1.0f + w.v[i], wdt);
            drift_op op = gc_op(DRIFT_OP_RMS_NORM, odt);
            op.eps = 1e-6f;
            gc_case_spec c;
            spec_init(&c, op, 2, 64);
            c.in[0] = &x;
            c.in[1] = &w;
            c.ulp_dt = DRIFT_BF16;
            /* bf16 out rounds twice ((u * r).type_as(x), then * w): a different
               rstd that flips the first rounding moves y by up to two ULPs
               (measured on the H200: 1 of 921,600 elements at 2 ULPs) */
            c.ulps = odt == DRIFT_BF16 ? 2.0 : 1.0;
            c.atol = 2e-4 * 2.0 * (max_abs(&x) + 1.0);
            c.nmse_ref = 2.0 * gc_nmse_bound(DRIFT_BF16);
            gc_case_set("RMS_NORM torch %lldx%lld w=%s", (long long)xs[0], (long long)xs[1], gc_dt(wdt));
            GC_CHECK(fallbacks_after(&c) == 0, "rms_norm must not fall back for this shape");
            gc_host_free(&x);
            gc_host_free(&w);
        }
    /* the fused kernel (x and w of one dtype, or no weight): fp32 rows of a
       wide dynamic range, bf16 without a weight, and misaligned rows (torch's
       non-vectorized fallback is not emulated: a recorded fallback) */
    for (int k = 0; k < 3; k++) {
        const drift_dtype dt = k == 0 ? DRIFT_F32 : DRIFT_BF16;
        int64_t xs[2] = {k == 1 ? 700 : 600, k == 1 ? 128 : 1536}, ws[1] = {xs[1]};
        gc_host x = gc_host_make(dt, 2, xs, 3.0), w = gc_host_make(dt, 1, ws, 0.1);
        for (int64_t r = 0; r < xs[0]; r++)
            for (int64_t i = 0; i < xs[1]; i++)
                x.v[r * xs[1] + i] = drift_round_to(x.v[r * xs[1] + i] * (float)(1 + r % 7), dt);
        for (int64_t i = 0; i < w.n; i++) w.v[i] = drift_round_to(1.0f + w.v[i], dt);
        drift_op op = gc_op(DRIFT_OP_RMS_NORM, dt);
        op.eps = 1e-6f;
        gc_case_spec c;
        spec_init(&c, op, k == 1 ? 1 : 2, k == 2 ? 1 : 64);
        c.in[0] = &x;
        c.in[1] = &w;
        c.ulp_dt = dt;
        c.ulps = dt == DRIFT_F32 ? 4.0 : 2.0;
        c.atol = 2e-4 * 2.0 * (max_abs(&x) + 1.0);
        c.nmse_ref = dt == DRIFT_F32 ? 1e-9 : 2.0 * gc_nmse_bound(DRIFT_BF16);
        gc_case_set("RMS_NORM torch fused %lldx%lld %s%s", (long long)xs[0], (long long)xs[1], gc_dt(dt),
                    k == 1 ? " no weight" : k == 2 ? " misaligned" : "");
        const uint32_t m = fallbacks_after(&c);
        if (k < 2) {
            GC_CHECK(m == 0, "an aligned fused rms_norm must not fall back (mask %llx)", (unsigned long long)m);
        } else {
            GC_CHECK(m & (1ull << DRIFT_OP_RMS_NORM), "a misaligned fused rms_norm is a recorded fallback (mask %llx)", (unsigned long long)m);
            GC_CHECK(strstr(drift_cuda_backend_torch_fallback_reason(T), "rms_norm") != NULL, "reason: %s",
                     drift_cuda_backend_torch_fallback_reason(T));
        }
        gc_host_free(&x);
        gc_host_free(&w);
    }
}

static void test_elementwise(void) {
    for (int oi = 0; oi < 2; oi++)
        for (int k = 0; k < 2; k++) {
            const drift_dtype dt = oi ? DRIFT_F32 : DRIFT_BF16;
            int64_t xs[1] = {70001};
            gc_host x = gc_host_make(dt, 1, xs, 4.0);
            gc_host_specials(&x, 0.001);
            drift_op op = gc_op(k ? DRIFT_OP_SILU : DRIFT_OP_GELU_TANH, dt);
            gc_case_spec c;
            spec_init(&c, op, 1, 1);
            c.in[0] = &x;
            c.ulps = dt == DRIFT_F32 ? 8.0 : 1.0;
            c.atol = k ? 0.0 : 2.4e-7 * max_abs(&x);
            c.nmse_ref = -1;
            gc_case_set("%s torch %s", drift_op_name(op.kind), gc_dt(dt));
            GC_CHECK(fallbacks_after(&c) == 0, "elementwise ops must not fall back");
            gc_host_free(&x);
        }
    /* torch's GELU expression contracts x + kKappa*x^3 into an FMA: somewhere
       it rounds differently from the exact profile's separate operations */
    int64_t xs[1] = {1 << 18};
    gc_host x = gc_host_make(DRIFT_F32, 1, xs, 3.0);
    drift_op op = gc_op(DRIFT_OP_GELU_TANH, DRIFT_F32);
    float *a = malloc(sizeof(float) << 18), *b = malloc(sizeof(float) << 18);
    gc_case_spec c;
    spec_init(&c, op, 1, 0);
    c.in[0] = &x;
    c.ulps = -1;
    c.nmse_ref = -1;
    gc_case_set("GELU_TANH torch vs exact");
    int64_t diff = 0;
    if (a && b && gc_run_cuda(T, &c, 1, xs, a) == 0 && gc_run_cuda(E.cuda, &c, 1, xs, b) == 0)
        for (int64_t i = 0; i < x.n; i++) diff += !gc_same_bits(a[i], b[i]);
    else
        GC_CHECK(0, "running GELU on both profiles");
    printf("GELU_TANH fp32: torch and exact profiles differ in %lld of %lld elements\n", (long long)diff,
           (long long)x.n);
    GC_CHECK(diff > 0, "the torch profile's GELU is the exact kernel again");
    free(a);
    free(b);
    gc_host_free(&x);
}

/* A bf16 ATTENTION case of q, k, v (the caller's) in layout 0 ([B, H, L, D]) or 1 ([B, L, H, D]),
 * with the tolerances of a fused attention against the cpu and ref backends. */
static void attention_case(gc_case_spec *c, int layout, gc_host *q, gc_host *k, gc_host *v) {
    drift_op op = gc_op(DRIFT_OP_ATTENTION, DRIFT_BF16);
    op.compute = DRIFT_BF16;
    op.layout = layout;
    spec_init(c, op, 3, 0);
    c->in[0] = q;
    c->in[1] = k;
    c->in[2] = v;
    c->ulps = 2.0;
    c->atol = 1e-2 * max_abs(v);
    c->nmse_ref = 4.0 * gc_nmse_bound(DRIFT_BF16);
}

static void test_attention(void) {
    for (int layout = 0; layout < 2; layout++) {
        const int64_t B = 1, H = 2, Lq = 200, Lk = 136, D = 64;
        int64_t qs[4] = {B, layout ? Lq : H, layout ? H : Lq, D}, ks[4] = {B, layout ? Lk : H, layout ? H : Lk, D};
        gc_host q = gc_host_make(DRIFT_BF16, 4, qs, 1.0), k = gc_host_make(DRIFT_BF16, 4, ks, 1.0),
                v = gc_host_make(DRIFT_BF16, 4, ks, 1.0);
        gc_case_spec c;
        attention_case(&c, layout, &q, &k, &v);
        gc_case_set("ATTENTION torch layout %d", layout);
        uint32_t m = fallbacks_after(&c);
        if (m & (1ull << DRIFT_OP_ATTENTION)) {
            printf("NOTE: ATTENTION layout %d fell back to the exact kernels: %s\n", layout,
                   drift_cuda_backend_torch_fallback_reason(T));
        } else {
            char g[128];
            drift_backend_last_choice(T, g, sizeof g);
            GC_CHECK(strncmp(g, "cuDNN SDPA ", 11) == 0, "last attention '%s', expected 'cuDNN SDPA ...'", g);
            printf("ATTENTION layout %d ran through cuDNN's fused SDPA: %s\n", layout, g);
        }
        gc_host_free(&q);
        gc_host_free(&k);
        gc_host_free(&v);
    }
}

/* FlashAttention-2 (head dim 12: cuDNN declines it, torch pads and runs flash) splits the keys by
 * batch x heads against the SM count: drift_backend_last_choice names the split count, which
 * differs between a batch of 1 (few row blocks: split) and of 16 (enough blocks: one), as drift
 * invariance reports it (WanAnimate's attention at 1,344 tokens). */
static void test_attention_choice(void) {
    char g[2][128];
    const int64_t Bs[2] = {1, 16};
    for (int bi = 0; bi < 2; bi++) {
        const int64_t B = Bs[bi], H = 2, L = 1344, D = 12;
        int64_t s[4] = {B, H, L, D};
        gc_host q = gc_host_make(DRIFT_BF16, 4, s, 1.0), k = gc_host_make(DRIFT_BF16, 4, s, 1.0),
                v = gc_host_make(DRIFT_BF16, 4, s, 1.0);
        gc_case_spec c;
        attention_case(&c, 0, &q, &k, &v);
        gc_case_set("ATTENTION torch flash D=12 B=%lld", (long long)B);
        GC_CHECK(!(fallbacks_after(&c) & (1ull << DRIFT_OP_ATTENTION)), "flash fell back: %s",
                 drift_cuda_backend_torch_fallback_reason(T));
        drift_backend_last_choice(T, g[bi], sizeof g[bi]);
        GC_CHECK(strncmp(g[bi], "FlashAttention-2 ", 17) == 0, "last attention '%s', expected 'FlashAttention-2 ...'",
                 g[bi]);
        printf("ATTENTION flash D=12 B=%lld: %s\n", (long long)B, g[bi]);
        gc_host_free(&q);
        gc_host_free(&k);
        gc_host_free(&v);
    }
    GC_CHECK(strcmp(g[0], g[1]) != 0, "the same flash split at batch 1 and 16: '%s'", g[0]);
}

/* drift_cuda_torch_conv3d_patch against PATCHIFY + LINEAR on the exact
 * profile (the same sums in another order) */
static void test_conv(void) {
    gc_case_set("conv3d patch embedding (cuDNN)");
    const int64_t N = 1, C = 4, D = 2, H = 8, W = 8, K = 16;
    const int kern[3] = {1, 2, 2};
    int64_t xs[5] = {N, C, D, H, W}, ws[2] = {K, C * 4}, ys[5] = {N, K, D, H / 2, W / 2};
    const int64_t L = D * (H / 2) * (W / 2);
    gc_host x = gc_host_make(DRIFT_BF16, 5, xs, 1.0), w = gc_host_make(DRIFT_BF16, 2, ws, 0.3);
    drift_err err;
    drift_err_clear(&err);
    drift_tensor tx = {0}, tw = {0}, ty = {0}, ex = {0}, ep = {0}, ey = {0};
    tx.dtype = tw.dtype = ty.dtype = DRIFT_BF16;
    tx.ndim = 5;
    memcpy(tx.shape, xs, sizeof xs);
    tw.ndim = 2;
    memcpy(tw.shape, ws, sizeof ws);
    ty.ndim = 5;
    memcpy(ty.shape, ys, sizeof ys);
    ex = tx;
    int64_t ps[3] = {N, L, C * 4}, os[3] = {N, L, K};
    ep.dtype = ey.dtype = DRIFT_BF16;
    ep.ndim = ey.ndim = 3;
    memcpy(ep.shape, ps, sizeof ps);
    memcpy(ey.shape, os, sizeof os);
    drift_tensor ew = tw;
    int ok = !drift_backend_alloc(T, &tx, &err) && !drift_backend_alloc(T, &tw, &err) && !drift_backend_alloc(T, &ty, &err) &&
             !drift_backend_alloc(E.cuda, &ex, &err) && !drift_backend_alloc(E.cuda, &ew, &err) &&
             !drift_backend_alloc(E.cuda, &ep, &err) && !drift_backend_alloc(E.cuda, &ey, &err) &&
             !drift_backend_upload_f32(T, &tx, x.v, &err) && !drift_backend_upload_f32(T, &tw, w.v, &err) &&
             !drift_backend_upload_f32(E.cuda, &ex, x.v, &err) && !drift_backend_upload_f32(E.cuda, &ew, w.v, &err);
    GC_CHECK(ok, "allocations and uploads: %s", gc_errstr(&err));
    if (ok) {
        drift_err e2;
        drift_err_clear(&e2);
        GC_CHECK(drift_cuda_torch_conv3d_patch(E.cuda, &ex, &ew, kern, &ey, &e2) == DRIFT_E_UNSUPPORTED,
                 "the exact profile has no cuDNN convolution");
        int rc = drift_cuda_torch_conv3d_patch(T, &tx, &tw, kern, &ty, &err);
        if (rc == DRIFT_E_UNSUPPORTED) {
            printf("NOTE: cuDNN declined the patch convolution: %s\n", gc_errstr(&err));
        } else {
            GC_CHECK(rc == DRIFT_OK, "conv3d: %s", gc_errstr(&err));
            drift_op pat = gc_op(DRIFT_OP_PATCHIFY, DRIFT_BF16), lin = gc_op(DRIFT_OP_LINEAR, DRIFT_BF16);
            pat.n_in = 1;
            pat.patch[0] = 1;
            pat.patch[1] = 2;
            pat.patch[2] = 2;
            lin.n_in = 2;
            lin.compute = DRIFT_BF16;
            const drift_tensor *i1[1] = {&ex}, *i2[2] = {&ep, &ew};
            GC_CHECK(drift_backend_run(E.cuda, &pat, i1, &ep, &err) == 0 && drift_backend_run(E.cuda, &lin, i2, &ey, &err) == 0,
                     "patchify + linear: %s", gc_errstr(&err));
            float *a = malloc(sizeof(float) * (size_t)(K * L)), *b = malloc(sizeof(float) * (size_t)(K * L));
            if (a && b && !drift_backend_download_f32(T, &ty, a, &err) && !drift_backend_download_f32(E.cuda, &ey, b, &err)) {
                double tol = (double)(C * 4) * ldexp(1.0, -21) * max_abs(&x) * max_abs(&w);
                int64_t bad = 0;
                for (int64_t k = 0; k < K; k++)
                    for (int64_t l = 0; l < L; l++) {
                        double u = a[k * L + l], v = b[l * K + k];
                        if (fabs(u - v) > gc_ulp(v, DRIFT_BF16) + tol) bad++;
                    }
                GC_CHECK(bad == 0, "%lld of %lld conv outputs differ from patchify+linear by more than 1 ULP + %g",
                         (long long)bad, (long long)(K * L), tol);
            } else {
                GC_CHECK(0, "downloads: %s", gc_errstr(&err));
            }
            free(a);
            free(b);
        }
    }
    drift_backend_release(T, &tx);
    drift_backend_release(T, &tw);
    drift_backend_release(T, &ty);
    drift_backend_release(E.cuda, &ex);
    drift_backend_release(E.cuda, &ew);
    drift_backend_release(E.cuda, &ep);
    drift_backend_release(E.cuda, &ey);
    gc_host_free(&x);
    gc_host_free(&w);
}

static void test_fallback_bookkeeping(void) {
    int64_t ts[1] = {4};
    gc_host t = gc_host_unif(DRIFT_F32, 1, ts, 0.0, 1000.0);
    drift_op op = gc_op(DRIFT_OP_TIMESTEP_SINUSOID, DRIFT_F32);
    op.dim = 32;
    op.max_period = 10000.0f;
    gc_case_spec c;
    spec_init(&c, op, 1, 0);
    c.in[0] = &t;
    c.ulps = 4.0;
    c.atol = 1e-4;
    c.nmse_ref = -1;
    gc_case_set("TIMESTEP_SINUSOID torch (fallback)");
    uint32_t m = fallbacks_after(&c);
    GC_CHECK(m & (1ull << DRIFT_OP_TIMESTEP_SINUSOID), "the sinusoid is a recorded fallback (mask %llx)", (unsigned long long)m);
    gc_host cx = gc_host_make(DRIFT_F32, 1, ts, 1.0);
    drift_op cast = gc_op(DRIFT_OP_CAST, DRIFT_BF16);
    spec_init(&c, cast, 1, 0);
    c.in[0] = &cx;
    c.exact = 1;
    c.nmse_ref = -1;
    gc_case_set("CAST torch");
    GC_CHECK(fallbacks_after(&c) == 0, "CAST is torch's arithmetic already: no fallback recorded");
    gc_host_free(&t);
    gc_host_free(&cx);
}

int main(void) {
    gc_require_gpu("test_cuda_torch_profile");
    gc_seed(16);
    gc_env_open(&E);
    drift_err err;
    drift_err_clear(&err);
    GC_CHECK(drift_backend_create("cuda:0:kernels=torch", &T, &err) == DRIFT_OK, "torch profile backend: %s",
             gc_errstr(&err));
    if (E.cuda && T) {
        test_selection();
        test_linear();
        test_norms();
        test_elementwise();
        test_attention();
        test_attention_choice();
        test_conv();
        test_fallback_bookkeeping();
    }
    drift_backend_free(T);
    gc_env_close(&E);
    return gc_finish("test_cuda_torch_profile");
}
