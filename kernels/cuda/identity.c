/* What a CUDA backend runs on (cuda_backend.h, drift_cuda_identity): GPU,
 * driver, runtime, cuBLAS/cuBLASLt/cuDNN versions as the loaded libraries
 * report them, and the paths of the loaded shared objects (dladdr), so that
 * a replay can say when they differ from a recording's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>

#ifdef DRIFT_HAVE_CUDNN
#include <cudnn.h>
#endif

#include "kernels/cuda/cuda_internal.h"

static void path_of(const void *sym, char *dst, size_t n) {
    Dl_info info;
    dst[0] = '\0';
    if (sym && dladdr(sym, &info) && info.dli_fname) snprintf(dst, n, "%s", info.dli_fname);
}

void dcu_identity_fill(dcu_ctx *ctx) {
    drift_cuda_identity *id = &ctx->identity;
    memset(id, 0, sizeof *id);
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, ctx->device) == cudaSuccess) {
        snprintf(id->gpu_name, sizeof id->gpu_name, "%s", prop.name);
        id->cc_major = prop.major;
        id->cc_minor = prop.minor;
    }
    (void)cudaDriverGetVersion(&id->driver_version);
    (void)cudaRuntimeGetVersion(&id->runtime_version);
    (void)cudaGetLastError();
    id->cublaslt_version = (long)cublasLtGetVersion();
    int v = 0;
    if (cublasGetProperty(MAJOR_VERSION, &v) == CUBLAS_STATUS_SUCCESS) {
        int mi = 0, pa = 0;
        (void)cublasGetProperty(MINOR_VERSION, &mi);
        (void)cublasGetProperty(PATCH_LEVEL, &pa);
        id->cublas_version = (long)v * 10000 + mi * 100 + pa;
    }
    /* function pointers through a union: ISO C forbids casting them to void * */
    union {
        size_t (*f)(void);
        const void *p;
    } u;
    u.f = cublasLtGetVersion;
    path_of(u.p, id->cublaslt_path, sizeof id->cublaslt_path);
#ifdef DRIFT_HAVE_CUDNN
    id->cudnn_version = (long)cudnnGetVersion();
    u.f = cudnnGetVersion;
    path_of(u.p, id->cudnn_path, sizeof id->cudnn_path);
#endif
}

int drift_cuda_backend_identity(const drift_backend *be, drift_cuda_identity *out, drift_err *err) {
    if (!drift_cuda_backend_is_cuda(be) || !out)
        return drift_err_set(err, DRIFT_E_INPUT, "cuda", "identity: not a CUDA backend");
    *out = ((const dcu_ctx *)be->ctx)->identity;
    return DRIFT_OK;
}
