/* The drift side of the op-parity harness (tests/gpu/torch_parity.sh):
 *
 *   torch_parity_run DIR exact|torch TAG [OPS]
 *
 * reads DIR/manifest.txt (written by tests/gpu/torch_parity.py), runs every
 * case's op on a CUDA backend with the given kernel profile and writes the
 * output's raw bits to DIR/<case>.<TAG>.bin. The python side compares them
 * with torch's. One failing case does not stop the others: it prints
 * "RUN <case> error: ..." and its output file is not written.
 *
 * Manifest (one directive per line, '#' comments):
 *   case NAME OP [eps=X] [patch=PF,PH,PW] [layout=1] [order=1] [bmm_layout=N] [alpha=X] [beta=X]
 *   in DTYPE NDIM D0 .. FILE        (raw little-endian bits, FILE relative to DIR)
 *   out DTYPE NDIM D0 ..
 *   end
 * OP: linear (x, w[, b]), layer_norm (x[, w, b]), rms_norm (x[, w]),
 * gelu_tanh, silu (x), modulation (x, scale, shift: fp32(x) * (1 + scale) +
 * shift), sdpa (q, k, v [B, H, L, D], bf16 compute[, ATTENTION's fp32 bias
 * [Bb, Hb, Lqb, Lk]: SDPA's mask / is_causal]), conv_patch (latents
 * [B, C, F, H, W], w [N, C*pf*ph*pw] in Conv3d order, b [N]: the weight
 * PERMUTEd to [N, pf, ph, pw, C], PATCHIFY layout 1 (channels-last), LINEAR,
 * ADD b: the replay graph's lowering of the conv),
 * conv_cudnn (the same inputs: drift_cuda_torch_conv3d_patch, ADD b,
 * PERMUTE to [B, L, N]), bmm (a [..., M, K], b [..., K, N][, an added term
 * broadcast to the output]: one BMM, compute dtype a's, op->layout =
 * bmm_layout (DRIFT_BMM_* bits: how torch held the operands), op->alpha /
 * op->beta = alpha / beta, default 1).
 * Prints IDENTITY (GPU, driver, library versions and paths) and, per case,
 * FALLBACK when an op of it ran on the exact kernels under the torch
 * profile. OPS (optional) is a comma-separated list of the ops to run
 * (default: all). Exit: 0 when every case ran, 1 when some failed, 2 on bad usage
 * or a bad manifest, 77 without a GPU. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/dtype.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"

#define MAX_IN 4
#define MAX_LINE 4096

typedef struct hcase {
    char name[128], op[32];
    float eps;
    int patch[3];
    int layout; /* sdpa: 1 = q, k, v, out given [B, L, H, D] (ATTENTION's layout 1) */
    int order;  /* sdpa: ATTENTION's op->sub (1: flash's key order, with a bias: square is_causal) */
    int groups; /* group_norm: G */
    int bmm_layout;    /* bmm: BMM's op->layout (DRIFT_BMM_* bits) */
    float alpha, beta; /* bmm: BMM's op->alpha, op->beta */
    int n_in;
    drift_dtype in_dt[MAX_IN];
    int in_nd[MAX_IN];
    int64_t in_shape[MAX_IN][DRIFT_MAX_DIMS];
    char in_file[MAX_IN][512];
    drift_dtype out_dt;
    int out_nd;
    int64_t out_shape[DRIFT_MAX_DIMS];
    int has_out;
} hcase;

static const char *g_dir;

static int bad(const char *msg, int line) {
    fprintf(stderr, "torch_parity_run: %s/manifest.txt line %d: %s\n", g_dir, line, msg);
    return 2;
}

/* Parses "DTYPE NDIM D0 .. [FILE]" from the strtok stream. */
static int parse_tensor(drift_dtype *dt, int *nd, int64_t *shape, char *file, size_t fsz, int line) {
    char *t = strtok(NULL, " \t\n");
    if (!t || (*dt = drift_dtype_parse(t)) == DRIFT_DTYPE_INVALID) return bad("expected a dtype (bf16, fp16, fp32)", line);
    t = strtok(NULL, " \t\n");
    char *end = NULL;
    long n = t ? strtol(t, &end, 10) : -1;
    if (!t || *end || n < 0 || n > DRIFT_MAX_DIMS) return bad("expected an ndim 0..8", line);
    *nd = (int)n;
    for (int i = 0; i < *nd; i++) {
        t = strtok(NULL, " \t\n");
        long long d = t ? strtoll(t, &end, 10) : -1;
        if (!t || *end || d < 0 || d > (1LL << 32)) return bad("expected a dimension >= 0", line);
        shape[i] = d;
    }
    if (drift_shape_numel(*nd, shape) < 0 || drift_shape_numel(*nd, shape) > (1LL << 31))
        return bad("tensor too large (limit 2^31 elements)", line);
    if (file) {
        t = strtok(NULL, " \t\n");
        if (!t || strlen(t) >= fsz || strstr(t, "..") || t[0] == '/') return bad("expected a relative file name", line);
        strcpy(file, t);
    }
    return 0;
}

/* Reads numel elements of dt from DIR/file into host fp32. */
static float *read_bits(const char *file, drift_dtype dt, int64_t numel) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", g_dir, file);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "torch_parity_run: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t es = drift_dtype_size(dt), n = (size_t)numel;
    void *raw = malloc(n * es + 1);
    float *v = malloc(n * sizeof(float) + 1);
    if (!raw || !v || fread(raw, es, n, f) != n || fgetc(f) != EOF) {
        fprintf(stderr, "torch_parity_run: %s: expected exactly %zu elements of %s\n", path, n, drift_dtype_name(dt));
        free(raw);
        free(v);
        fclose(f);
        return NULL;
    }
    fclose(f);
    drift_dtype_to_f32_n(raw, dt, v, n);
    free(raw);
    return v;
}

static int write_bits(const char *name, const char *tag, const float *v, drift_dtype dt, int64_t numel) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.%s.bin", g_dir, name, tag);
    size_t es = drift_dtype_size(dt), n = (size_t)numel;
    void *raw = malloc(n * es + 1);
    if (!raw) return -1;
    drift_dtype_from_f32_n(v, raw, dt, n);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(raw, es, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    free(raw);
    return ok ? 0 : -1;
}

typedef struct runner {
    drift_backend *be;
    drift_tensor tmp[8];
    int ntmp;
    drift_err *err;
} runner;

static drift_tensor *new_tensor(runner *r, drift_dtype dt, int nd, const int64_t *shape) {
    if (r->ntmp >= 8) return NULL;
    drift_tensor *t = &r->tmp[r->ntmp];
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = nd;
    memcpy(t->shape, shape, (size_t)nd * sizeof(int64_t));
    if (drift_backend_alloc(r->be, t, r->err)) return NULL;
    r->ntmp++;
    return t;
}

static int run1(runner *r, const drift_op *op, const drift_tensor *a, const drift_tensor *b, const drift_tensor *c,
                drift_tensor *out) {
    const drift_tensor *in[3] = {a, b, c};
    return drift_backend_run(r->be, op, in, out, r->err);
}

static drift_op mkop(drift_op_kind k, drift_dtype compute, drift_dtype out, int n_in) {
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = k;
    op.compute = compute;
    op.out = out;
    op.n_in = n_in;
    return op;
}

/* Runs case hc on r->be: inputs uploaded, output downloaded into *outv. */
static int run_case(runner *r, const hcase *hc, float **outv) {
    drift_tensor *in[MAX_IN] = {NULL, NULL, NULL, NULL};
    for (int i = 0; i < hc->n_in; i++) {
        in[i] = new_tensor(r, hc->in_dt[i], hc->in_nd[i], hc->in_shape[i]);
        if (!in[i]) return -1;
        float *v = read_bits(hc->in_file[i], hc->in_dt[i], in[i]->numel);
        if (!v) return drift_err_set(r->err, DRIFT_E_INPUT, hc->in_file[i], "unreadable input");
        int rc = drift_backend_upload_f32(r->be, in[i], v, r->err);
        free(v);
        if (rc) return rc;
    }
    drift_tensor *out = new_tensor(r, hc->out_dt, hc->out_nd, hc->out_shape);
    if (!out) return -1;
    const char *o = hc->op;
    int rc;
    if (!strcmp(o, "linear")) {
        drift_op op = mkop(DRIFT_OP_LINEAR, hc->in_dt[0], hc->out_dt, hc->n_in);
        rc = run1(r, &op, in[0], in[1], in[2], out);
    } else if (!strcmp(o, "layer_norm") || !strcmp(o, "rms_norm")) {
        drift_op op = mkop(!strcmp(o, "layer_norm") ? DRIFT_OP_LAYER_NORM : DRIFT_OP_RMS_NORM, DRIFT_F32, hc->out_dt,
                           hc->n_in);
        op.eps = hc->eps;
        rc = run1(r, &op, in[0], in[1], in[2], out);
    } else if ((!strcmp(o, "mean_last") || !strcmp(o, "sum_last")) && hc->n_in == 1) {
        /* mean_last: torch's pow(2) (x*x, fp32) then mean(-1) for fp32 x, mean(-1) of x for 16-bit x */
        drift_tensor *sq = in[0];
        rc = 0;
        if (!strcmp(o, "mean_last") && in[0]->dtype == DRIFT_F32) {
            sq = new_tensor(r, DRIFT_F32, in[0]->ndim, in[0]->shape);
            if (!sq) return -1;
            drift_op pw = mkop(DRIFT_OP_SCALAR, DRIFT_F32, DRIFT_F32, 1);
            pw.sub = DRIFT_SCALAR_POW;
            pw.scalar = 2.0;
            rc = run1(r, &pw, in[0], NULL, NULL, sq);
        }
        drift_op red = mkop(DRIFT_OP_REDUCE, DRIFT_F32, hc->out_dt, 1);
        red.sub = !strcmp(o, "mean_last") ? DRIFT_REDUCE_MEAN : DRIFT_REDUCE_SUM;
        red.dim = in[0]->ndim - 1;
        if (!rc) rc = run1(r, &red, sq, NULL, NULL, out);
    } else if ((!strcmp(o, "mean_mid") || !strcmp(o, "sum_mid")) && hc->n_in == 1 && in[0]->ndim == 3) {
        /* a reduction over dim 1 of [outer, N, inner]: reduce_kernel's outputs along block.x */
        drift_op red = mkop(DRIFT_OP_REDUCE, DRIFT_F32, hc->out_dt, 1);
        red.sub = !strcmp(o, "mean_mid") ? DRIFT_REDUCE_MEAN : DRIFT_REDUCE_SUM;
        red.dim = 1;
        rc = run1(r, &red, in[0], NULL, NULL, out);
    } else if (!strcmp(o, "group_norm") && hc->groups > 0) { /* fp32 compute: autocast's fp32 list */
        drift_op op = mkop(DRIFT_OP_GROUP_NORM, DRIFT_F32, hc->out_dt, hc->n_in);
        op.eps = hc->eps;
        op.length = hc->groups;
        rc = run1(r, &op, in[0], hc->n_in > 1 ? in[1] : NULL, hc->n_in > 2 ? in[2] : NULL, out);
    } else if ((!strcmp(o, "softmax") || !strcmp(o, "log_softmax")) && hc->n_in == 1) {
        drift_op op = mkop(DRIFT_OP_SOFTMAX, DRIFT_F32, hc->out_dt, 1);
        op.sub = !strcmp(o, "log_softmax");
        op.dim = in[0]->ndim - 1;
        rc = run1(r, &op, in[0], NULL, NULL, out);
    } else if (!strcmp(o, "rsqrt") && hc->n_in == 1) {
        drift_op op = mkop(DRIFT_OP_UNARY, DRIFT_F32, hc->out_dt, 1);
        op.sub = DRIFT_UNARY_RSQRT;
        rc = run1(r, &op, in[0], NULL, NULL, out);
    } else if (!strcmp(o, "gelu_tanh") || !strcmp(o, "silu")) {
        drift_op op = mkop(!strcmp(o, "silu") ? DRIFT_OP_SILU : DRIFT_OP_GELU_TANH, DRIFT_F32, hc->out_dt, 1);
        rc = run1(r, &op, in[0], NULL, NULL, out);
    } else if (!strcmp(o, "modulation") && hc->n_in == 3) {
        drift_tensor *x32 = new_tensor(r, DRIFT_F32, in[0]->ndim, in[0]->shape);
        drift_tensor *s1 = new_tensor(r, DRIFT_F32, in[1]->ndim, in[1]->shape);
        drift_tensor *m = new_tensor(r, DRIFT_F32, in[0]->ndim, in[0]->shape);
        if (!x32 || !s1 || !m) return -1;
        drift_op cast = mkop(DRIFT_OP_CAST, DRIFT_F32, DRIFT_F32, 1);
        drift_op aff = mkop(DRIFT_OP_AFFINE, DRIFT_F32, DRIFT_F32, 1);
        aff.alpha = 1.0f;
        aff.beta = 1.0f;
        drift_op mul = mkop(DRIFT_OP_MUL, DRIFT_F32, DRIFT_F32, 2), add = mkop(DRIFT_OP_ADD, DRIFT_F32, hc->out_dt, 2);
        rc = run1(r, &cast, in[0], NULL, NULL, x32);
        if (!rc) rc = run1(r, &aff, in[1], NULL, NULL, s1);
        if (!rc) rc = run1(r, &mul, x32, s1, NULL, m);
        if (!rc) rc = run1(r, &add, m, in[2], NULL, out);
    } else if (!strcmp(o, "bmm") && (hc->n_in == 2 || hc->n_in == 3)) {
        /* one BMM as the importer emits it for bmm / baddbmm / mm / matmul */
        drift_op op = mkop(DRIFT_OP_BMM, hc->in_dt[0], hc->out_dt, hc->n_in);
        op.layout = hc->bmm_layout;
        op.alpha = hc->alpha;
        op.beta = hc->beta;
        rc = run1(r, &op, in[0], in[1], in[2], out);
    } else if (!strcmp(o, "sdpa") && (hc->n_in == 3 || hc->n_in == 4)) {
        drift_op op = mkop(DRIFT_OP_ATTENTION, hc->in_dt[0], hc->out_dt, hc->n_in);
        op.layout = hc->layout;
        op.sub = hc->order;
        const drift_tensor *ins[4] = {in[0], in[1], in[2], in[3]};
        rc = drift_backend_run(r->be, &op, ins, out, r->err);
    } else if (!strcmp(o, "conv_patch") && hc->n_in == 3 && in[0]->ndim == 5) {
        const int64_t *s = in[0]->shape;
        int64_t L = (s[2] / hc->patch[0]) * (s[3] / hc->patch[1]) * (s[4] / hc->patch[2]);
        int64_t pshape[3] = {s[0], L, s[1] * hc->patch[0] * hc->patch[1] * hc->patch[2]};
        /* as the replay graph lowers a conv (replay/capture/aten_lower.c lower_conv):
           channels-last patches (pf, ph, pw, c) and the weight permuted to
           [N, pf, ph, pw, C], so the GEMM sums K in cuDNN's NHWC order */
        const int64_t N = in[1]->shape[0], w5[5] = {N, s[1], hc->patch[0], hc->patch[1], hc->patch[2]};
        const int64_t wcl[5] = {N, hc->patch[0], hc->patch[1], hc->patch[2], s[1]};
        drift_tensor *p = new_tensor(r, in[0]->dtype, 3, pshape);
        drift_tensor *y = new_tensor(r, hc->out_dt, hc->out_nd, hc->out_shape);
        drift_tensor *wp = new_tensor(r, in[1]->dtype, 5, wcl);
        if (!p || !y || !wp) return -1;
        if (in[1]->numel != w5[0] * w5[1] * w5[2] * w5[3] * w5[4])
            return drift_err_set(r->err, DRIFT_E_INPUT, hc->name, "conv_patch weight must have N*C*pf*ph*pw elements");
        drift_tensor wv = *in[1], wk = *wp; /* the same data viewed [N, C, pf, ph, pw] / [N, K] */
        wv.ndim = 5;
        memcpy(wv.shape, w5, sizeof w5);
        wk.ndim = 2;
        wk.shape[0] = N;
        wk.shape[1] = pshape[2];
        drift_op perm = mkop(DRIFT_OP_PERMUTE, in[1]->dtype, in[1]->dtype, 1);
        perm.perm[0] = 0, perm.perm[1] = 2, perm.perm[2] = 3, perm.perm[3] = 4, perm.perm[4] = 1;
        drift_op pat = mkop(DRIFT_OP_PATCHIFY, in[0]->dtype, in[0]->dtype, 1);
        memcpy(pat.patch, hc->patch, sizeof pat.patch);
        pat.layout = 1;
        drift_op lin = mkop(DRIFT_OP_LINEAR, in[0]->dtype, hc->out_dt, 2);
        drift_op add = mkop(DRIFT_OP_ADD, DRIFT_F32, hc->out_dt, 2);
        rc = run1(r, &perm, &wv, NULL, NULL, wp);
        if (!rc) rc = run1(r, &pat, in[0], NULL, NULL, p);
        if (!rc) rc = run1(r, &lin, p, &wk, NULL, y);
        if (!rc) rc = run1(r, &add, y, in[2], NULL, out);
    } else if (!strcmp(o, "conv_cudnn") && hc->n_in == 3 && in[0]->ndim == 5) {
        /* torch's order: cuDNN convolution [N, K, D', H', W'], bias added in
           the output dtype, then flatten(2).transpose(1, 2) */
        const int64_t *s = in[0]->shape, K = in[1]->shape[0];
        int64_t ys[5] = {s[0], K, s[2] / hc->patch[0], s[3] / hc->patch[1], s[4] / hc->patch[2]};
        int64_t L = ys[2] * ys[3] * ys[4];
        int64_t v3[3] = {s[0], K, L}, b3[3] = {1, K, 1};
        drift_tensor *y5 = new_tensor(r, hc->out_dt, 5, ys);
        if (!y5) return -1;
        rc = drift_cuda_torch_conv3d_patch(r->be, in[0], in[1], hc->patch, y5, r->err);
        drift_tensor yv = *y5, bv = *in[2];
        yv.ndim = 3;
        memcpy(yv.shape, v3, sizeof v3);
        bv.ndim = 3;
        memcpy(bv.shape, b3, sizeof b3);
        drift_tensor *yb = new_tensor(r, hc->out_dt, 3, v3);
        if (!yb) return -1;
        drift_op add = mkop(DRIFT_OP_ADD, DRIFT_F32, hc->out_dt, 2);
        drift_op perm = mkop(DRIFT_OP_PERMUTE, hc->out_dt, hc->out_dt, 1);
        perm.perm[0] = 0;
        perm.perm[1] = 2;
        perm.perm[2] = 1;
        if (!rc) rc = run1(r, &add, &yv, &bv, NULL, yb);
        if (!rc) rc = run1(r, &perm, yb, NULL, NULL, out);
    } else {
        return drift_err_set(r->err, DRIFT_E_INPUT, hc->name, "unknown op '%s' or wrong number of inputs (%d)", o,
                             hc->n_in);
    }
    if (rc) return rc;
    *outv = malloc((size_t)out->numel * sizeof(float) + 1);
    if (!*outv) return drift_err_set(r->err, DRIFT_E_NOMEM, hc->name, "no memory for the output");
    return drift_backend_download_f32(r->be, out, *outv, r->err);
}

/* 1 if op is in the comma-separated list ops. */
static int op_selected(const char *ops, const char *op) {
    size_t n = strlen(op);
    for (const char *p = ops; *p;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len == n && !strncmp(p, op, n)) return 1;
        if (!c) break;
        p = c + 1;
    }
    return 0;
}

static void print_identity(const drift_backend *be) {
    drift_cuda_identity id;
    drift_err err;
    memset(&err, 0, sizeof err);
    if (drift_cuda_backend_identity(be, &id, &err)) return;
    printf("IDENTITY gpu=\"%s\" cc=%d.%d driver=%d runtime=%d cublaslt=%ld cublas=%ld cudnn=%ld\n", id.gpu_name,
           id.cc_major, id.cc_minor, id.driver_version, id.runtime_version, id.cublaslt_version, id.cublas_version,
           id.cudnn_version);
    printf("IDENTITY cublaslt_path=%s\nIDENTITY cudnn_path=%s\n", id.cublaslt_path[0] ? id.cublaslt_path : "?",
           id.cudnn_path[0] ? id.cudnn_path : "?");
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: torch_parity_run DIR exact|torch[:OPTION=V...] TAG [OPS]\n");
        return 2;
    }
    g_dir = argv[1];
    for (const char *p = argv[3]; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-')) {
            fprintf(stderr, "torch_parity_run: TAG must be [a-z0-9_-]+\n");
            return 2;
        }
    if (drift_cuda_device_count() <= 0) {
        printf("SKIP: no CUDA device (torch_parity_run)\n");
        return 77;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/manifest.txt", g_dir);
    FILE *mf = fopen(path, "r");
    if (!mf) {
        fprintf(stderr, "torch_parity_run: cannot open %s: %s\n", path, strerror(errno));
        return 2;
    }
    drift_err err;
    memset(&err, 0, sizeof err);
    /* PROFILE[:OPTIONS]: the backend spec "cuda:0:kernels=PROFILE[:OPTIONS]" */
    char spec[512];
    snprintf(spec, sizeof spec, "cuda:0:kernels=%s", argv[2]);
    drift_backend *be = NULL;
    if (drift_backend_create(spec, &be, &err)) {
        fprintf(stderr, "torch_parity_run: cannot create the cuda backend: %s\n", err.msg);
        fclose(mf);
        return 1;
    }
    print_identity(be);
    char line[MAX_LINE];
    int lineno = 0, failed = 0, ran = 0, rcode = 0;
    hcase hc;
    int in_case = 0;
    while (fgets(line, sizeof line, mf)) {
        lineno++;
        char *t = strtok(line, " \t\n");
        if (!t || t[0] == '#') continue;
        if (!strcmp(t, "case")) {
            memset(&hc, 0, sizeof hc);
            in_case = 1;
            char *n = strtok(NULL, " \t\n"), *o = n ? strtok(NULL, " \t\n") : NULL;
            if (!n || !o || strlen(n) >= sizeof hc.name || strlen(o) >= sizeof hc.op) {
                rcode = bad("expected: case NAME OP [k=v ...]", lineno);
                break;
            }
            strcpy(hc.name, n);
            strcpy(hc.op, o);
            hc.eps = 1e-5f;
            hc.alpha = 1.0f;
            hc.beta = 1.0f;
            while ((t = strtok(NULL, " \t\n")) != NULL) {
                if (!strncmp(t, "eps=", 4))
                    hc.eps = strtof(t + 4, NULL);
                else if (!strcmp(t, "layout=1"))
                    hc.layout = 1;
                else if (!strcmp(t, "order=1"))
                    hc.order = 1;
                else if (!strncmp(t, "groups=", 7) && (hc.groups = atoi(t + 7)) > 0)
                    ;
                else if (!strncmp(t, "bmm_layout=", 11) && sscanf(t + 11, "%d", &hc.bmm_layout) == 1 &&
                         hc.bmm_layout >= 0 && hc.bmm_layout <= DRIFT_BMM_LAYOUT_MAX)
                    ;
                else if (!strncmp(t, "alpha=", 6))
                    hc.alpha = strtof(t + 6, NULL);
                else if (!strncmp(t, "beta=", 5))
                    hc.beta = strtof(t + 5, NULL);
                else if (!strncmp(t, "patch=", 6) &&
                         sscanf(t + 6, "%d,%d,%d", &hc.patch[0], &hc.patch[1], &hc.patch[2]) == 3 &&
                         hc.patch[0] > 0 && hc.patch[1] > 0 && hc.patch[2] > 0)
                    ;
                else {
                    rcode = bad("unknown case attribute", lineno);
                    break;
                }
            }
            if (rcode) break;
        } else if (!strcmp(t, "in") && in_case && hc.n_in < MAX_IN) {
            int i = hc.n_in;
            if ((rcode = parse_tensor(&hc.in_dt[i], &hc.in_nd[i], hc.in_shape[i], hc.in_file[i], sizeof hc.in_file[i],
                                      lineno)))
                break;
            hc.n_in++;
        } else if (!strcmp(t, "out") && in_case) {
            if ((rcode = parse_tensor(&hc.out_dt, &hc.out_nd, hc.out_shape, NULL, 0, lineno))) break;
            hc.has_out = 1;
        } else if (!strcmp(t, "end") && in_case && hc.has_out) {
            in_case = 0;
            if (argc == 5 && !op_selected(argv[4], hc.op)) continue;
            runner r;
            memset(&r, 0, sizeof r);
            r.be = be;
            r.err = &err;
            memset(&err, 0, sizeof err);
            int64_t before = 0, after = 0;
            (void)drift_cuda_backend_torch_fallbacks(be, &before);
            float *outv = NULL;
            int rc = run_case(&r, &hc, &outv);
            if (!rc) {
                drift_err e2;
                memset(&e2, 0, sizeof e2);
                rc = drift_backend_sync(be, &e2);
                if (rc) err = e2;
            }
            uint64_t mask = drift_cuda_backend_torch_fallbacks(be, &after);
            if (after > before) {
                printf("FALLBACK %s:", hc.name);
                for (int k = 0; k < DRIFT_OP_COUNT && k < 64; k++)
                    if (mask & (1ull << k)) printf(" %s", drift_op_name((drift_op_kind)k));
                printf(" (ran on the exact kernels; last reason: %s)\n", drift_cuda_backend_torch_fallback_reason(be));
            }
            if (!rc && write_bits(hc.name, argv[3], outv, hc.out_dt, drift_shape_numel(hc.out_nd, hc.out_shape))) {
                rc = -1;
                snprintf(err.msg, sizeof err.msg, "cannot write the output file");
            }
            if (rc) {
                printf("RUN %s error: %s\n", hc.name, err.msg[0] ? err.msg : "allocation failed");
                failed++;
            } else {
                printf("RUN %s ok\n", hc.name);
            }
            ran++;
            free(outv);
            for (int i = r.ntmp - 1; i >= 0; i--) drift_backend_release(be, &r.tmp[i]);
            fflush(stdout);
        } else {
            rcode = bad("unexpected directive (case / in / out / end)", lineno);
            break;
        }
    }
    fclose(mf);
    drift_backend_free(be);
    if (rcode) return rcode;
    printf("DONE %d cases, %d failed (profile %s, tag %s)\n", ran, failed, argv[2], argv[3]);
    return failed ? 1 : 0;
}
