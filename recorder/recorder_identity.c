/* The identity of the process a recorder runs in, for /libraries when the
 * caller set none (recorder_internal.h, drift_rec_identity): the GPU of its
 * device captures and the CUDA driver through the recorder's own CUDA
 * runtime, and cuBLASLt / cuBLAS / cuDNN through their version calls when
 * the process has them loaded (dlsym on the global scope: the job's own
 * copies, whatever loaded them; their paths by dladdr). The CUDA runtime
 * version is left unknown: the recorder's static copy is not the job's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "recorder/recorder_internal.h"

#ifdef DRIFT_HAVE_CUDA
#include <cuda_runtime.h>

/* A loaded symbol's address, through a union: ISO C has no object-to-function pointer cast. */
typedef union {
    void *p;
    size_t (*size_fn)(void);
    int (*prop_fn)(int, int *);
} sym;

static void path_of(void *p, char *dst, size_t n) {
    Dl_info info;
    if (p && dladdr(p, &info) && info.dli_fname) snprintf(dst, n, "%s", info.dli_fname);
}

int drift_rec_identity(drift_recorder *r, drift_libraries *out) {
    drift_libraries_init(out);
    int dev = drift_rec_cuda_device(r);
    if (dev < 0) return 0;
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
        snprintf(out->gpu_name, sizeof out->gpu_name, "%s", prop.name);
        out->cc_major = prop.major;
        out->cc_minor = prop.minor;
    }
    int v = 0;
    if (cudaDriverGetVersion(&v) == cudaSuccess) out->driver_version = v;
    (void)cudaGetLastError(); /* the job must not see our errors */
    sym s;
    if ((s.p = dlsym(RTLD_DEFAULT, "cublasLtGetVersion"))) {
        out->cublaslt_version = (int64_t)s.size_fn();
        path_of(s.p, out->cublaslt_path, sizeof out->cublaslt_path);
    }
    if ((s.p = dlsym(RTLD_DEFAULT, "cublasGetProperty"))) { /* MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL */
        int ma = 0, mi = 0, pa = 0;
        if (s.prop_fn(0, &ma) == 0 && s.prop_fn(1, &mi) == 0 && s.prop_fn(2, &pa) == 0)
            out->cublas_version = (int64_t)ma * 10000 + mi * 100 + pa;
    }
    if ((s.p = dlsym(RTLD_DEFAULT, "cudnnGetVersion"))) {
        out->cudnn_version = (int64_t)s.size_fn();
        path_of(s.p, out->cudnn_path, sizeof out->cudnn_path);
    }
    return 1;
}
#else
int drift_rec_identity(drift_recorder *r, drift_libraries *out) {
    (void)r;
    drift_libraries_init(out);
    return 0;
}
#endif
