/* Layout ops as one strided-copy kernel (PERMUTE, NARROW, CONCAT, VIEW,
 * PATCHIFY, UNPATCHIFY are all "iterate an index space of <= 8 dims, read at
 * src strides, write at dst strides"; backend_cuda.c builds the strides).
 *
 * Same dtype: raw 16- or 32-bit copies (bit-exact, NaN payloads kept, as
 * the values are exactly representable by contract). Different dtypes:
 * widen and round once to the destination dtype.
 *
 * Launch configurations: contiguous 1-dim same-dtype copies go to
 * cudaMemcpyAsync; otherwise FLAT (1 dim after simplification) or GENERAL
 * (index decomposition), RAW16 / RAW32 / CONVERT, 32- or 64-bit indexing. */
#include "kernels/cuda/dev_common.cuh"

namespace {

enum { M_RAW16 = 0, M_RAW32 = 1, M_CONVERT = 2 };

struct CopyArgs {
    int nd;
    int64_t shape[DRIFT_MAX_DIMS];
    int64_t ss[DRIFT_MAX_DIMS];
    int64_t ds[DRIFT_MAX_DIMS];
    const void *src;
    void *dst;
    int64_t soff, doff;
    int ts, td;
};

template <int MODE, typename I, bool FLAT>
__global__ void k_copy(CopyArgs a, I n) {
    I stride = (I)gridDim.x * (I)blockDim.x;
    for (I i = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; i < n; i += stride) {
        I so = (I)a.soff, dof = (I)a.doff;
        if (FLAT) {
            so += i * (I)a.ss[0];
            dof += i * (I)a.ds[0];
        } else {
            I rem = i;
            for (int d = a.nd - 1; d >= 0; d--) {
                I s = (I)a.shape[d];
                I c = rem % s;
                rem /= s;
                so += c * (I)a.ss[d];
                dof += c * (I)a.ds[d];
            }
        }
        if (MODE == M_RAW16)
            ((uint16_t *)a.dst)[dof] = ((const uint16_t *)a.src)[so];
        else if (MODE == M_RAW32)
            ((uint32_t *)a.dst)[dof] = ((const uint32_t *)a.src)[so];
        else
            dcu_st<I>(a.dst, a.td, dof, dcu_ld<I>(a.src, a.ts, so));
    }
}

template <int MODE, typename I>
void launch_mode(const dcu_ctx *ctx, const CopyArgs &a, int64_t n) {
    unsigned blocks = dcu_blocks_for(n, DCU_THREADS, ctx);
    if (a.nd == 1)
        k_copy<MODE, I, true><<<blocks, DCU_THREADS, 0, ctx->stream>>>(a, (I)n);
    else
        k_copy<MODE, I, false><<<blocks, DCU_THREADS, 0, ctx->stream>>>(a, (I)n);
}

} // namespace

extern "C" void dcu_copy_simplify(dcu_copy *c) {
    int m = 0;
    for (int i = 0; i < c->nd; i++) {
        if (c->shape[i] == 1) continue;
        if (m > 0 && c->ss[m - 1] == c->ss[i] * c->shape[i] && c->ds[m - 1] == c->ds[i] * c->shape[i]) {
            c->shape[m - 1] *= c->shape[i];
            c->ss[m - 1] = c->ss[i];
            c->ds[m - 1] = c->ds[i];
            continue;
        }
        c->shape[m] = c->shape[i];
        c->ss[m] = c->ss[i];
        c->ds[m] = c->ds[i];
        m++;
    }
    if (m == 0) {
        c->shape[0] = 1;
        c->ss[0] = 0;
        c->ds[0] = 0;
        m = 1;
    }
    for (int i = m; i < DRIFT_MAX_DIMS; i++) {
        c->shape[i] = 1;
        c->ss[i] = 0;
        c->ds[i] = 0;
    }
    c->nd = m;
}

extern "C" cudaError_t dcu_launch_copy(const dcu_ctx *ctx, const dcu_copy *c) {
    if (c->nd < 1 || c->nd > DRIFT_MAX_DIMS) return cudaErrorInvalidValue;
    int64_t n = 1, smax = c->soff, dmax = c->doff;
    for (int i = 0; i < c->nd; i++) {
        if (c->shape[i] <= 0) return cudaSuccess;
        n *= c->shape[i];
        smax += (c->shape[i] - 1) * c->ss[i];
        dmax += (c->shape[i] - 1) * c->ds[i];
    }
    size_t es = drift_dtype_size(c->ts);
    if ((es != 2 && es != 4) || (drift_dtype_size(c->td) != 2 && drift_dtype_size(c->td) != 4))
        return cudaErrorInvalidValue;
    if (c->ts == c->td && c->nd == 1 && c->ss[0] == 1 && c->ds[0] == 1 && !ctx->force_i64)
        return cudaMemcpyAsync((char *)c->dst + (size_t)c->doff * es, (const char *)c->src + (size_t)c->soff * es,
                               (size_t)n * es, cudaMemcpyDeviceToDevice, ctx->stream);
    CopyArgs a;
    a.nd = c->nd;
    for (int i = 0; i < DRIFT_MAX_DIMS; i++) {
        a.shape[i] = i < c->nd ? c->shape[i] : 1;
        a.ss[i] = i < c->nd ? c->ss[i] : 0;
        a.ds[i] = i < c->nd ? c->ds[i] : 0;
    }
    a.src = c->src;
    a.dst = c->dst;
    a.soff = c->soff;
    a.doff = c->doff;
    a.ts = c->ts;
    a.td = c->td;
    int64_t maxi = n;
    if (smax > maxi) maxi = smax;
    if (dmax > maxi) maxi = dmax;
    if (c->nd == 1) { /* flat path: i * stride before the add */
        int64_t ps = n * (c->ss[0] < 0 ? -c->ss[0] : c->ss[0]) + c->soff;
        int64_t pd = n * (c->ds[0] < 0 ? -c->ds[0] : c->ds[0]) + c->doff;
        if (ps > maxi) maxi = ps;
        if (pd > maxi) maxi = pd;
    }
    int mode = c->ts != c->td ? M_CONVERT : (es == 2 ? M_RAW16 : M_RAW32);
    bool i32 = dcu_use_i32(ctx, maxi);
    if (mode == M_RAW16) {
        if (i32) launch_mode<M_RAW16, int32_t>(ctx, a, n);
        else launch_mode<M_RAW16, int64_t>(ctx, a, n);
    } else if (mode == M_RAW32) {
        if (i32) launch_mode<M_RAW32, int32_t>(ctx, a, n);
        else launch_mode<M_RAW32, int64_t>(ctx, a, n);
    } else {
        if (i32) launch_mode<M_CONVERT, int32_t>(ctx, a, n);
        else launch_mode<M_CONVERT, int64_t>(ctx, a, n);
    }
    return cudaGetLastError();
}
