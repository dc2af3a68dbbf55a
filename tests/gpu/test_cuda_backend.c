/* The CUDA backend's plumbing: creation and naming, supports_op, storage,
 * upload/download (f32 and f64, every bf16/fp16 bit pattern, transfers
 * larger than the pinned staging buffers, empty tensors), run() validation
 * (errors, never crashes, backend usable afterwards), metrics errors, and
 * determinism of a chain of ops across runs and across backend instances. */
#include "gpu_check.h"

static gc_env E;

static void test_create(void) {
    gc_case_set("create");
    drift_err err;
    GC_CHECK(drift_cuda_backend_is_cuda(E.cuda), "drift_backend_create(\"cuda\") must give a cuda backend");
    GC_CHECK(strcmp(drift_backend_name(E.cuda), "cuda:0") == 0, "name '%s', expected cuda:0", drift_backend_name(E.cuda));
    GC_CHECK(drift_cuda_backend_stream(E.cuda) != NULL, "stream");
    GC_CHECK(drift_cuda_backend_stream(E.cpu) == NULL, "stream of a non-cuda backend must be NULL");
    drift_backend *be = NULL;
    drift_err_clear(&err);
    int rc = drift_backend_create("cuda:999", &be, &err);
    GC_CHECK(rc == DRIFT_E_UNSUPPORTED && be == NULL, "cuda:999 must be DRIFT_E_UNSUPPORTED, got %d", rc);
    GC_CHECK(err.msg[0] != '\0', "error message must be set");
    int n = drift_cuda_device_count();
    GC_CHECK(n >= 1, "device count %d", n);
    /* create/destroy repeatedly: no leak of streams/handles that would make this fail */
    for (int i = 0; i < 8; i++) {
        drift_err_clear(&err);
        rc = drift_backend_create("cuda:0", &be, &err);
        GC_CHECK(rc == 0, "create #%d: %s", i, gc_errstr(&err));
        drift_backend_free(be);
        be = NULL;
    }
    drift_backend_free(NULL);
}

static void test_supports(void) {
    gc_case_set("supports_op");
    for (int k = 0; k < DRIFT_OP_COUNT; k++) {
        drift_op op = gc_op((drift_op_kind)k, DRIFT_BF16);
        op.compute = DRIFT_BF16;
        GC_CHECK(drift_backend_supports(E.cuda, &op) == 1, "%s bf16 must be supported", drift_op_name((drift_op_kind)k));
        op.out = DRIFT_F64; /* through the GPU oracle's bodies (f64_cuda.c) */
        GC_CHECK(drift_backend_supports(E.cuda, &op) == 1, "%s fp64 out must be supported",
                 drift_op_name((drift_op_kind)k));
        op.out = DRIFT_DTYPE_INVALID;
        GC_CHECK(drift_backend_supports(E.cuda, &op) == 0, "%s invalid out dtype must not be supported",
                 drift_op_name((drift_op_kind)k));
    }
    drift_op bad = gc_op(DRIFT_OP_COUNT, DRIFT_F32);
    GC_CHECK(drift_backend_supports(E.cuda, &bad) == 0, "invalid kind");
    drift_op lin = gc_op(DRIFT_OP_LINEAR, DRIFT_F32);
    lin.compute = DRIFT_F64;
    GC_CHECK(drift_backend_supports(E.cuda, &lin) == 1, "fp64 compute GEMM");
    lin.compute = DRIFT_DTYPE_INVALID;
    GC_CHECK(drift_backend_supports(E.cuda, &lin) == 0, "invalid compute GEMM");
}

static void test_alloc(void) {
    drift_err err;
    gc_case_set("alloc");
    drift_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = DRIFT_F64;
    t.ndim = 1;
    t.shape[0] = 4;
    drift_err_clear(&err);
    /* fp64 is stored (8 bytes, kernels/cuda/f64_cuda.c): a value off the fp32 grid round-trips */
    const double d64[4] = {1.0 + 0x1p-40, -3.0 - 0x1p-35, 0.1, 7.0};
    double b64[4] = {0, 0, 0, 0};
    int ok64 = drift_backend_alloc(E.cuda, &t, &err) == DRIFT_OK;
    GC_CHECK(ok64, "fp64 storage: %s", gc_errstr(&err));
    if (ok64) {
        GC_CHECK(drift_backend_upload_f64(E.cuda, &t, d64, &err) == DRIFT_OK &&
                     drift_backend_download_f64(E.cuda, &t, b64, &err) == DRIFT_OK && memcmp(d64, b64, sizeof d64) == 0,
                 "fp64 values must round-trip bit for bit");
        drift_backend_release(E.cuda, &t);
    }
    t.dtype = DRIFT_DTYPE_INVALID;
    GC_CHECK(drift_backend_alloc(E.cuda, &t, &err) == DRIFT_E_UNSUPPORTED, "an invalid dtype must be refused");
    t.dtype = DRIFT_BF16;
    t.shape[0] = -1;
    GC_CHECK(drift_backend_alloc(E.cuda, &t, &err) == DRIFT_E_INPUT, "negative dim must be DRIFT_E_INPUT");
    t.ndim = 2;
    t.shape[0] = (int64_t)1 << 40;
    t.shape[1] = (int64_t)1 << 20;
    GC_CHECK(drift_backend_alloc(E.cuda, &t, &err) == DRIFT_E_INPUT, "numel over 2^48 must be DRIFT_E_INPUT");
    t.ndim = 2;
    t.shape[0] = 3;
    t.shape[1] = 0;
    drift_err_clear(&err);
    GC_CHECK(drift_backend_alloc(E.cuda, &t, &err) == 0 && t.numel == 0 && t.data != NULL && t.be == E.cuda,
             "empty tensor alloc: %s", gc_errstr(&err));
    float dummy = 0;
    GC_CHECK(drift_backend_upload_f32(E.cuda, &t, &dummy, &err) == 0, "empty upload");
    GC_CHECK(drift_backend_download_f32(E.cuda, &t, &dummy, &err) == 0, "empty download");
    drift_backend_release(E.cuda, &t);
    GC_CHECK(t.data == NULL, "release must clear data");
    drift_backend_release(E.cuda, &t); /* twice: no-op */
    drift_backend_release(E.cuda, NULL);
    /* a huge allocation fails cleanly */
    t.ndim = 1;
    t.dtype = DRIFT_F32;
    t.shape[0] = (int64_t)1 << 46; /* 256 TiB */
    drift_err_clear(&err);
    int rc = drift_backend_alloc(E.cuda, &t, &err);
    GC_CHECK(rc == DRIFT_E_NOMEM, "256 TiB alloc must be DRIFT_E_NOMEM, got %d (%s)", rc, gc_errstr(&err));
}

static void roundtrip(drift_dtype dt, int64_t n, int use_f64) {
    drift_err err;
    drift_err_clear(&err);
    gc_dev d;
    int64_t shape[1] = {n};
    if (gc_dev_alloc(E.cuda, dt, 1, shape, 0, &d)) return;
    float *src = malloc((size_t)n * sizeof(float)), *back = malloc((size_t)n * sizeof(float));
    double *s64 = malloc((size_t)n * sizeof(double)), *b64 = malloc((size_t)n * sizeof(double));
    if (!src || !back || !s64 || !b64) exit(2);
    for (int64_t i = 0; i < n; i++) {
        s64[i] = gc_normal() * 100.0;
        src[i] = (float)s64[i];
    }
    int rc = use_f64 ? drift_backend_upload_f64(E.cuda, &d.t, s64, &err) : drift_backend_upload_f32(E.cuda, &d.t, src, &err);
    GC_CHECK(rc == 0, "upload: %s", gc_errstr(&err));
    rc = use_f64 ? drift_backend_download_f64(E.cuda, &d.t, b64, &err) : drift_backend_download_f32(E.cuda, &d.t, back, &err);
    GC_CHECK(rc == 0, "download: %s", gc_errstr(&err));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float want = drift_round_to((float)s64[i], dt); /* f64 -> fp32 (RNE) -> dtype */
        if (use_f64 ? (b64[i] != (double)want) : !gc_same_bits(back[i], drift_round_to(src[i], dt))) bad++;
    }
    GC_CHECK(bad == 0, "%s n=%lld %s roundtrip: %lld wrong", gc_dt(dt), (long long)n, use_f64 ? "f64" : "f32",
             (long long)bad);
    free(src);
    free(back);
    free(s64);
    free(b64);
    gc_dev_free(&d);
}

static void test_transfers(void) {
    static const drift_dtype dts[3] = {DRIFT_F32, DRIFT_BF16, DRIFT_F16};
    for (int i = 0; i < 3; i++) {
        /* staging chunk = 16 MiB / element size: cross it twice, plus odd sizes */
        int64_t chunk = ((int64_t)16 << 20) / (int64_t)drift_dtype_size(dts[i]);
        int64_t sizes[4] = {1, 4097, chunk, 2 * chunk + 12345};
        for (int s = 0; s < 4; s++)
            for (int f = 0; f < 2; f++) {
                if (s == 3 && f == 1 && i != 1) continue; /* keep host memory moderate */
                gc_case_set("transfer %s n=%lld %s", gc_dt(dts[i]), (long long)sizes[s], f ? "f64" : "f32");
                roundtrip(dts[i], sizes[s], f);
            }
    }
    /* every 16-bit pattern through upload_f32(widened) / download */
    for (int i = 1; i < 3; i++) {
        gc_case_set("all %s patterns", gc_dt(dts[i]));
        int64_t n = 65536;
        gc_dev d;
        if (gc_dev_alloc(E.cuda, dts[i], 1, &n, 0, &d)) continue;
        float *src = malloc(65536 * sizeof(float)), *back = malloc(65536 * sizeof(float));
        if (!src || !back) exit(2);
        for (int k = 0; k < 65536; k++)
            src[k] = dts[i] == DRIFT_BF16 ? drift_bf16_to_f32((uint16_t)k) : drift_f16_to_f32((uint16_t)k);
        drift_err err;
        drift_err_clear(&err);
        GC_CHECK(drift_backend_upload_f32(E.cuda, &d.t, src, &err) == 0, "upload");
        GC_CHECK(drift_backend_download_f32(E.cuda, &d.t, back, &err) == 0, "download");
        int64_t bad = 0;
        for (int k = 0; k < 65536; k++) bad += !gc_same_bits(back[k], drift_round_to(src[k], dts[i]));
        GC_CHECK(bad == 0, "%lld patterns changed", (long long)bad);
        free(src);
        free(back);
        gc_dev_free(&d);
    }
    /* transfer errors */
    gc_case_set("transfer errors");
    drift_err err;
    drift_tensor t;
    memset(&t, 0, sizeof t);
    float v = 0;
    GC_CHECK(drift_backend_upload_f32(E.cuda, &t, &v, &err) == DRIFT_E_INPUT, "unallocated tensor upload");
    int64_t one = 1;
    gc_dev d;
    if (gc_dev_alloc(E.cuda, DRIFT_F32, 1, &one, 0, &d) == 0) {
        GC_CHECK(drift_backend_upload_f32(E.cuda, &d.t, NULL, &err) == DRIFT_E_INPUT, "NULL host buffer");
        if (E.cpu) GC_CHECK(drift_backend_download_f32(E.cpu, &d.t, &v, &err) != 0, "cpu must refuse a cuda tensor");
    }
    gc_dev_free(&d);
}

static void test_run_errors(void) {
    drift_err err;
    int64_t s[2] = {4, 8}, s2[2] = {4, 9};
    gc_dev a, b, o, wrong;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&o, 0, sizeof o);
    memset(&wrong, 0, sizeof wrong);
    if (gc_dev_alloc(E.cuda, DRIFT_BF16, 2, s, 0, &a) || gc_dev_alloc(E.cuda, DRIFT_BF16, 2, s, 0, &b) ||
        gc_dev_alloc(E.cuda, DRIFT_BF16, 2, s, 0, &o) || gc_dev_alloc(E.cuda, DRIFT_BF16, 2, s2, 0, &wrong))
        return;
    const drift_tensor *in[3] = {&a.t, &b.t, NULL};
    drift_op add = gc_op(DRIFT_OP_ADD, DRIFT_BF16);
    add.n_in = 2;

    gc_case_set("run: wrong out shape");
    drift_err_clear(&err);
    GC_CHECK(drift_backend_run(E.cuda, &add, in, &wrong.t, &err) == DRIFT_E_INPUT, "wrong out shape");
    gc_case_set("run: out dtype != op->out");
    drift_op add32 = add;
    add32.out = DRIFT_F32;
    GC_CHECK(drift_backend_run(E.cuda, &add32, in, &o.t, &err) == DRIFT_E_INPUT, "dtype mismatch");
    gc_case_set("run: in place");
    GC_CHECK(drift_backend_run(E.cuda, &add, in, &a.t, &err) == DRIFT_E_INPUT, "out == input must be refused");
    gc_case_set("run: invalid out dtype");
    drift_op add64 = add;
    add64.out = DRIFT_DTYPE_INVALID;
    GC_CHECK(drift_backend_run(E.cuda, &add64, in, &o.t, &err) == DRIFT_E_UNSUPPORTED, "invalid out dtype");
    gc_case_set("run: wrong n_in");
    drift_op add1 = add;
    add1.n_in = 1;
    GC_CHECK(drift_backend_run(E.cuda, &add1, in, &o.t, &err) == DRIFT_E_INPUT, "n_in 1 for add");
    gc_case_set("run: NULL input");
    const drift_tensor *in_null[3] = {&a.t, NULL, NULL};
    GC_CHECK(drift_backend_run(E.cuda, &add, in_null, &o.t, &err) == DRIFT_E_INPUT, "NULL input");
    gc_case_set("run: input of another backend");
    if (E.cpu) {
        gc_dev c;
        if (gc_dev_alloc(E.cpu, DRIFT_BF16, 2, s, 0, &c) == 0) {
            const drift_tensor *in_cpu[3] = {&a.t, &c.t, NULL};
            GC_CHECK(drift_backend_run(E.cuda, &add, in_cpu, &o.t, &err) == DRIFT_E_INPUT, "cpu tensor");
        }
        gc_dev_free(&c);
    }
    gc_case_set("run: invalid kind");
    drift_op badk = add;
    badk.kind = (drift_op_kind)99;
    GC_CHECK(drift_backend_run(E.cuda, &badk, in, &o.t, &err) != 0, "invalid kind");
    gc_case_set("run: bad permutation");
    drift_op perm = gc_op(DRIFT_OP_PERMUTE, DRIFT_BF16);
    perm.n_in = 1;
    perm.perm[0] = 0;
    perm.perm[1] = 0;
    GC_CHECK(drift_backend_run(E.cuda, &perm, in, &o.t, &err) == DRIFT_E_INPUT, "perm {0,0}");
    gc_case_set("run: narrow out of range");
    drift_op nar = gc_op(DRIFT_OP_NARROW, DRIFT_BF16);
    nar.n_in = 1;
    nar.dim = 1;
    nar.start = 5;
    nar.length = 8;
    GC_CHECK(drift_backend_run(E.cuda, &nar, in, &o.t, &err) == DRIFT_E_INPUT, "narrow [5, 13) of 8");

    /* still usable: a valid add gives a + b */
    gc_case_set("run: usable after errors");
    float av[32], bv[32], ov[32];
    for (int i = 0; i < 32; i++) {
        av[i] = (float)i;
        bv[i] = 0.5f * (float)i;
    }
    drift_err_clear(&err);
    GC_CHECK(drift_backend_upload_f32(E.cuda, &a.t, av, &err) == 0 && drift_backend_upload_f32(E.cuda, &b.t, bv, &err) == 0,
             "upload");
    GC_CHECK(drift_backend_run(E.cuda, &add, in, &o.t, &err) == 0, "valid add: %s", gc_errstr(&err));
    GC_CHECK(drift_backend_sync(E.cuda, &err) == 0, "sync: %s", gc_errstr(&err));
    GC_CHECK(drift_backend_download_f32(E.cuda, &o.t, ov, &err) == 0, "download");
    int bad = 0;
    for (int i = 0; i < 32; i++) bad += ov[i] != drift_round_to(av[i] + bv[i], DRIFT_BF16);
    GC_CHECK(bad == 0, "add after errors: %d wrong", bad);
    gc_dev_free(&a);
    gc_dev_free(&b);
    gc_dev_free(&o);
    gc_dev_free(&wrong);
}

/* A small block: LINEAR -> LAYER_NORM -> GELU -> ATTENTION(self) -> metrics,
 * run on two backends (and twice on one): identical bits everywhere. */
static int chain(drift_backend *be, const gc_host *x, const gc_host *w, float *out, drift_metric_acc *acc) {
    drift_err err;
    drift_err_clear(&err);
    int64_t M = x->shape[0], K = x->shape[1], N = w->shape[0];
    gc_dev dx, dw, y1, y2, y3, y4;
    memset(&y4, 0, sizeof y4);
    int64_t ys[2] = {M, N}, as[4] = {1, 1, M, N};
    int rc = gc_dev_alloc(be, DRIFT_BF16, 2, x->shape, 0, &dx) || gc_dev_alloc(be, DRIFT_BF16, 2, w->shape, 0, &dw) ||
             gc_dev_alloc(be, DRIFT_BF16, 2, ys, 0, &y1) || gc_dev_alloc(be, DRIFT_BF16, 2, ys, 0, &y2) ||
             gc_dev_alloc(be, DRIFT_BF16, 2, ys, 0, &y3) || gc_dev_alloc(be, DRIFT_BF16, 4, as, 0, &y4);
    if (rc) return 1;
    (void)K;
    rc = drift_backend_upload_f32(be, &dx.t, x->v, &err) || drift_backend_upload_f32(be, &dw.t, w->v, &err);
    drift_op lin = gc_op(DRIFT_OP_LINEAR, DRIFT_BF16);
    lin.compute = DRIFT_BF16;
    lin.n_in = 2;
    const drift_tensor *i1[3] = {&dx.t, &dw.t, NULL};
    if (!rc) rc = drift_backend_run(be, &lin, i1, &y1.t, &err);
    drift_op ln = gc_op(DRIFT_OP_LAYER_NORM, DRIFT_BF16);
    ln.n_in = 1;
    ln.eps = 1e-6f;
    const drift_tensor *i2[3] = {&y1.t, NULL, NULL};
    if (!rc) rc = drift_backend_run(be, &ln, i2, &y2.t, &err);
    drift_op ge = gc_op(DRIFT_OP_GELU_TANH, DRIFT_BF16);
    ge.n_in = 1;
    const drift_tensor *i3[3] = {&y2.t, NULL, NULL};
    if (!rc) rc = drift_backend_run(be, &ge, i3, &y3.t, &err);
    drift_tensor v4 = y3.t; /* same data viewed as [1, 1, M, N] */
    v4.ndim = 4;
    v4.shape[0] = 1;
    v4.shape[1] = 1;
    v4.shape[2] = M;
    v4.shape[3] = N;
    drift_op at = gc_op(DRIFT_OP_ATTENTION, DRIFT_BF16);
    at.compute = DRIFT_BF16;
    at.n_in = 3;
    const drift_tensor *i4[3] = {&v4, &v4, &v4};
    if (!rc) rc = drift_backend_run(be, &at, i4, &y4.t, &err);
    if (!rc) rc = drift_backend_download_f32(be, &y4.t, out, &err);
    drift_tensor t3 = y3.t;
    drift_metric_acc_init(acc);
    if (!rc) {
        /* metrics of y4 (as [M, N]) against y3 */
        drift_tensor a4 = y4.t;
        a4.ndim = 2;
        a4.shape[0] = M;
        a4.shape[1] = N;
        rc = drift_backend_metrics(be, &a4, &t3, acc, &err);
    }
    GC_CHECK(rc == 0, "chain on %s: %s", drift_backend_name(be), gc_errstr(&err));
    gc_dev_free(&dx);
    gc_dev_free(&dw);
    gc_dev_free(&y1);
    gc_dev_free(&y2);
    gc_dev_free(&y3);
    gc_dev_free(&y4);
    return rc;
}

static void test_determinism(void) {
    gc_case_set("determinism chain");
    int64_t xs[2] = {300, 192}, ws[2] = {256, 192};
    gc_host x = gc_host_make(DRIFT_BF16, 2, xs, 1.0), w = gc_host_make(DRIFT_BF16, 2, ws, 0.07);
    int64_t n = 300 * 256;
    float *o1 = malloc((size_t)n * sizeof(float)), *o2 = malloc((size_t)n * sizeof(float)),
          *o3 = malloc((size_t)n * sizeof(float));
    if (!o1 || !o2 || !o3) exit(2);
    drift_metric_acc a1, a2, a3;
    drift_backend *other = gc_cuda_with_opt(NULL, NULL);
    GC_CHECK(other != NULL, "second backend");
    if (other && chain(E.cuda, &x, &w, o1, &a1) == 0 && chain(E.cuda, &x, &w, o2, &a2) == 0 &&
        chain(other, &x, &w, o3, &a3) == 0) {
        int64_t d12 = 0, d13 = 0;
        for (int64_t i = 0; i < n; i++) {
            d12 += drift_f32_bits(o1[i]) != drift_f32_bits(o2[i]);
            d13 += drift_f32_bits(o1[i]) != drift_f32_bits(o3[i]);
        }
        GC_CHECK(d12 == 0, "same backend, two runs: %lld elements differ", (long long)d12);
        GC_CHECK(d13 == 0, "two backend instances: %lld elements differ", (long long)d13);
        GC_CHECK(memcmp(&a1, &a2, sizeof a1) == 0 && memcmp(&a1, &a3, sizeof a1) == 0, "metrics differ between runs");
    }
    drift_backend_free(other);
    free(o1);
    free(o2);
    free(o3);
    gc_host_free(&x);
    gc_host_free(&w);
}

int main(void) {
    gc_require_gpu("test_cuda_backend");
    gc_seed(99);
    gc_env_open(&E);
    if (!E.cuda) return gc_finish("test_cuda_backend");
    test_create();
    test_supports();
    test_alloc();
    test_transfers();
    test_run_errors();
    test_determinism();
    gc_env_close(&E);
    return gc_finish("test_cuda_backend");
}
