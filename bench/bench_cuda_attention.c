/* Benchmark of the CUDA backend's ATTENTION on the wan2.2 self-attention
 * shape: B=1, H=24, Lq=Lk=4096, Dh=Dv=128, bf16 q/k/v/out, bf16 compute,
 * scale 0 (1/sqrt(128)); the fused kernel (backend spec cuda:attention=fused: the
 * wgmma kernel on sm_90; the mma.sync one, fused_mma, is timed too) against the unfused cuBLASLt path (cuda:attention=unfused) on the
 * same backend and operands, each in layout 0 (q, k, v, out [B, H, L, D])
 * and layout 1 ([B, L, H, D], the per-head view of a linear's output that
 * the Wan graph feeds without permutes; same values, permuted).
 *
 *   bench_cuda_attention [reps=20]
 *
 * Each call is timed with CUDA events on the backend stream around its
 * enqueue (host overhead counts); the four configurations are interleaved
 * rep by rep; medians after 3 warm-ups. The torch profile's attention
 * (backend spec cuda:kernels=torch: cuDNN's fused flash SDPA) is timed in
 * both layouts, and with sdpa_graph=composite (layout 0). Also prints the mean relative
 * difference of the fused and unfused outputs and the number of elements
 * where layout 1 differs from layout 0 (permuted back; must be 0). Last line:
 *   BENCH attention fused_ms=X unfused_ms=Y fused_l1_ms=Z unfused_l1_ms=W
 * Prints "SKIP" and exits 0 in a build without CUDA or without a device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DRIFT_HAVE_CUDA
#include <math.h>

#include <cuda_runtime_api.h>

#include "formats/dtype.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"

#define CK(call)                                                                                                       \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));                     \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)
#define DK(call)                                                                                                       \
    do {                                                                                                               \
        if ((call) != 0) {                                                                                             \
            char b_[2048];                                                                                             \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, drift_err_format(&err, b_, sizeof b_));      \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

#define NV 5 /* backends: fused, unfused, fused_mma, kernels=torch, kernels=torch:sdpa_graph=composite */
#define NC 8 /* timed configurations */

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float normalish(void) { /* sum of 4 uniforms, ~N(0,1) */
    double s = 0.0;
    for (int i = 0; i < 4; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        s += (double)(rng >> 11) * (1.0 / 9007199254740992.0) - 0.5;
    }
    return (float)(s * 1.7320508);
}

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* [B, n1, n2, D] -> [B, n2, n1, D] */
static void swap12(const float *src, float *dst, int64_t B, int64_t n1, int64_t n2, int64_t D) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < n1; i++)
            for (int64_t j = 0; j < n2; j++)
                memcpy(dst + ((b * n2 + j) * n1 + i) * D, src + ((b * n1 + i) * n2 + j) * D, (size_t)D * sizeof(float));
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 20;
    if (reps < 1) reps = 1;
    if (drift_cuda_device_count() <= 0) {
        printf("SKIP: no CUDA device\n");
        return 0;
    }
    drift_err err;
    drift_err_clear(&err);
    /* kernel variants are fixed at creation: one backend (and one copy of
       the tensors) per path: 0 fused, 1 unfused, 2 the mma.sync fused kernel */
    static const char *specs[NV] = {"cuda:attention=fused", "cuda:attention=unfused", "cuda:attention=fused_mma",
                                    "cuda:kernels=torch", "cuda:kernels=torch:sdpa_graph=composite"};
    drift_backend *bev[NV] = {NULL, NULL, NULL, NULL, NULL};
    cudaStream_t stv[NV];
    for (int v = 0; v < NV; v++) {
        DK(drift_backend_create(specs[v], &bev[v], &err));
        stv[v] = (cudaStream_t)drift_cuda_backend_stream(bev[v]);
    }

    const int64_t B = 1, H = 24, L = 4096, D = 128;
    /* per variant: t[0..2] q, k, v layout 0; t[3], t[4] fused / unfused out layout 0;
       t[5..7] q, k, v layout 1; t[8], t[9] fused / unfused out layout 1 */
    drift_tensor tv[NV][10];
    memset(tv, 0, sizeof tv);
    for (int v = 0; v < NV; v++)
        for (int i = 0; i < 10; i++) {
            drift_tensor *t = &tv[v][i];
            t->dtype = DRIFT_BF16;
            t->ndim = 4;
            t->shape[0] = B;
            t->shape[1] = i < 5 ? H : L;
            t->shape[2] = i < 5 ? L : H;
            t->shape[3] = D;
            DK(drift_backend_alloc(bev[v], t, &err));
        }
    const int64_t n = B * H * L * D;
    float *h = malloc((size_t)n * sizeof(float)), *h2 = malloc((size_t)n * sizeof(float));
    if (!h || !h2) return 1;
    for (int i = 0; i < 3; i++) {
        for (int64_t j = 0; j < n; j++) h[j] = normalish();
        swap12(h, h2, B, H, L, D);
        for (int v = 0; v < NV; v++) {
            DK(drift_backend_upload_f32(bev[v], &tv[v][i], h, &err));
            DK(drift_backend_upload_f32(bev[v], &tv[v][5 + i], h2, &err));
        }
    }
    drift_op op;
    memset(&op, 0, sizeof op);
    op.kind = DRIFT_OP_ATTENTION;
    op.compute = DRIFT_BF16;
    op.out = DRIFT_BF16;
    op.n_in = 3;
    op.scale = 0.0f;
    const drift_tensor *in0[NV][3], *in1[NV][3];
    for (int v = 0; v < NV; v++)
        for (int i = 0; i < 3; i++) {
            in0[v][i] = &tv[v][i];
            in1[v][i] = &tv[v][5 + i];
        }

    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float *ms[NC];
    for (int c = 0; c < NC; c++)
        if (!(ms[c] = malloc((size_t)reps * sizeof(float)))) return 1;
    for (int r = -3; r < reps; r++)
        for (int ci = 0; ci < NC; ci++) {
            /* c = layout * 2 + mode for c < 4; c = 4: the mma.sync fused kernel, layout 0;
               c = 5, 6: the torch profile (cuDNN fused SDPA, auto graph: unified), layout 0 and 1;
               c = 7: the torch profile with the composite cuDNN graph, layout 0 */
            const int c = ci == 0 ? 4 : ci < 5 ? ci - 1 : ci;
            const int m = c >= 4 ? 0 : c & 1, ly = c == 6 ? 1 : c >= 4 ? 0 : c >> 1,
                      v = c == 4 ? 2 : c == 7 ? 4 : c >= 5 ? 3 : m;
            op.layout = ly;
            CK(cudaEventRecord(e0, stv[v]));
            DK(drift_backend_run(bev[v], &op, ly ? in1[v] : in0[v], &tv[v][ly ? 8 + m : 3 + m], &err));
            CK(cudaEventRecord(e1, stv[v]));
            CK(cudaEventSynchronize(e1));
            float x = 0.0f;
            CK(cudaEventElapsedTime(&x, e0, e1));
            if (r >= 0) ms[c][r] = x;
        }
    DK(drift_backend_download_f32(bev[0], &tv[0][3], h, &err));
    DK(drift_backend_download_f32(bev[1], &tv[1][4], h2, &err));
    double sad = 0.0, sau = 0.0;
    int64_t differ = 0, nonfin = 0;
    for (int64_t j = 0; j < n; j++) {
        if (!isfinite(h[j]) || !isfinite(h2[j])) {
            nonfin++;
            continue;
        }
        sad += fabs((double)h[j] - (double)h2[j]);
        sau += fabs((double)h2[j]);
        differ += h[j] != h2[j];
    }
    /* layout 1 vs layout 0, per path, bitwise */
    int64_t l1_differ[2] = {0, 0};
    float *h3 = malloc((size_t)n * sizeof(float)), *h4 = malloc((size_t)n * sizeof(float));
    if (!h3 || !h4) return 1;
    for (int m = 0; m < 2; m++) {
        DK(drift_backend_download_f32(bev[m], &tv[m][3 + m], h3, &err));
        DK(drift_backend_download_f32(bev[m], &tv[m][8 + m], h4, &err));
        swap12(h4, h, B, L, H, D); /* [B, L, H, D] -> [B, H, L, D] */
        for (int64_t j = 0; j < n; j++) l1_differ[m] += memcmp(&h[j], &h3[j], sizeof(float)) != 0;
    }
    /* the two cuDNN graphs (unified, composite) on the same operands, bitwise */
    int64_t graphs_differ = 0;
    DK(drift_backend_download_f32(bev[3], &tv[3][3], h3, &err));
    DK(drift_backend_download_f32(bev[4], &tv[4][3], h4, &err));
    for (int64_t j = 0; j < n; j++) graphs_differ += memcmp(&h3[j], &h4[j], sizeof(float)) != 0;
    double med[NC];
    for (int c = 0; c < NC; c++) {
        qsort(ms[c], (size_t)reps, sizeof(float), cmp_f);
        med[c] = ms[c][reps / 2];
    }
    const double fm = med[0], um = med[1];
    /* useful flops: 2 GEMMs of 2*L*L*D per head (the fused kernel computes QK^T twice) */
    const double fl = 4.0 * (double)(B * H) * (double)L * (double)L * (double)D;
    printf("attention B=%lld H=%lld L=%lld D=%lld bf16, %d reps (medians; min fused %.3f unfused %.3f ms)\n",
           (long long)B, (long long)H, (long long)L, (long long)D, reps, (double)ms[0][0], (double)ms[1][0]);
    printf("  fused   layout 0 %.3f ms  %.1f TFLOP/s (2 GEMMs)\n", fm, fl / (fm * 1e-3) / 1e12);
    printf("  unfused layout 0 %.3f ms  %.1f TFLOP/s\n", um, fl / (um * 1e-3) / 1e12);
    printf("  fused (mma.sync kernel, attention=fused_mma) layout 0 %.3f ms  %.1f TFLOP/s\n", med[4],
           fl / (med[4] * 1e-3) / 1e12);
    printf("  fused   layout 1 %.3f ms  %.1f TFLOP/s; %lld elements differ from layout 0 (want 0)\n", med[2],
           fl / (med[2] * 1e-3) / 1e12, (long long)l1_differ[0]);
    printf("  unfused layout 1 %.3f ms  %.1f TFLOP/s; %lld elements differ from layout 0 (want 0)\n", med[3],
           fl / (med[3] * 1e-3) / 1e12, (long long)l1_differ[1]);
    printf("  speedup %.2fx; outputs: mean rel diff %.2e, %.3f%% elements differ, %lld non-finite\n", um / fm,
           sau > 0 ? sad / sau : sad, 100.0 * (double)differ / (double)n, (long long)nonfin);
    printf("  torch profile (cuDNN fused SDPA, kernels=torch) layout 0 %.3f ms  %.1f TFLOP/s; layout 1 %.3f ms\n", med[5],
           fl / (med[5] * 1e-3) / 1e12, med[6]);
    printf("  torch profile, composite cuDNN graph (sdpa_graph=composite) layout 0 %.3f ms; %lld elements differ "
           "from the auto graph's\n",
           med[7], (long long)graphs_differ);
    printf("BENCH attention fused_ms=%.3f unfused_ms=%.3f fused_l1_ms=%.3f unfused_l1_ms=%.3f fused_mma_ms=%.3f "
           "torch_ms=%.3f torch_l1_ms=%.3f torch_composite_ms=%.3f\n",
           fm, um, med[2], med[3], med[4], med[5], med[6], med[7]);
    for (int v = 0; v < NV; v++)
        for (int i = 0; i < 10; i++) drift_backend_release(bev[v], &tv[v][i]);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    for (int v = 0; v < NV; v++) drift_backend_free(bev[v]);
    free(h);
    free(h2);
    free(h3);
    free(h4);
    for (int c = 0; c < NC; c++) free(ms[c]);
    return l1_differ[0] || l1_differ[1] ? 1 : 0;
}

#else
int main(void) {
    printf("SKIP: built without CUDA\n");
    return 0;
}
#endif
