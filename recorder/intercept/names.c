/* Names of CUDA library enums as they appear in the census. Numeric values
 * from library_types.h, cublas_api.h, cublasLt.h and nccl.h (CUDA 13, NCCL
 * 2.28); unknown values print as "<kind>_<number>" so nothing is lost. */
#include <stdio.h>
#include <string.h>

#include "recorder/intercept/intercept.h"

void icpt_copy(char *dst, size_t sz, const char *src) {
    if (!dst || !sz) return;
    size_t i = 0;
    if (src)
        for (; i + 1 < sz && src[i]; i++) dst[i] = src[i];
    dst[i] = '\0';
}

static const char *pick(const char *s, int v, const char *kind, char *buf, size_t sz) {
    if (s) return s;
    snprintf(buf, sz, "%s_%d", kind, v);
    return buf;
}

const char *icpt_cuda_type_name(int t, char *buf, size_t sz) {
    const char *s = NULL;
    switch (t) {
    case 0: s = "fp32"; break;
    case 1: s = "fp64"; break;
    case 2: s = "fp16"; break;
    case 3: s = "int8"; break;
    case 4: s = "c_fp32"; break;
    case 5: s = "c_fp64"; break;
    case 6: s = "c_fp16"; break;
    case 8: s = "uint8"; break;
    case 10: s = "int32"; break;
    case 12: s = "uint32"; break;
    case 14: s = "bf16"; break;
    case 15: s = "c_bf16"; break;
    case 20: s = "int16"; break;
    case 24: s = "int64"; break;
    case 28: s = "fp8e4m3"; break;
    case 29: s = "fp8e5m2"; break;
    case 30: s = "fp8e8m0"; break;
    case 31: s = "fp6e2m3"; break;
    case 32: s = "fp6e3m2"; break;
    case 33: s = "fp4e2m1"; break;
    default: break;
    }
    return pick(s, t, "cuda_type", buf, sz);
}

int icpt_cuda_type_size(int t) {
    switch (t) {
    case 0: return 4;
    case 1: return 8;
    case 2: return 2;
    case 3: return 1;
    case 4: return 8;
    case 5: return 16;
    case 6: return 4;
    case 8: return 1;
    case 10: return 4;
    case 12: return 4;
    case 14: return 2;
    case 15: return 4;
    case 20: return 2;
    case 24: return 8;
    case 28: case 29: case 30: return 1;
    default: return 0;
    }
}

const char *icpt_compute_type_name(int t, char *buf, size_t sz) {
    const char *s = NULL;
    switch (t) {
    case 64: s = "fp16"; break;
    case 65: s = "fp16_pedantic"; break;
    case 68: s = "fp32"; break;
    case 69: s = "fp32_pedantic"; break;
    case 70: s = "fp64"; break;
    case 71: s = "fp64_pedantic"; break;
    case 72: s = "int32"; break;
    case 73: s = "int32_pedantic"; break;
    case 74: s = "fp32_fast_fp16"; break;
    case 75: s = "fp32_fast_bf16"; break;
    case 77: s = "fp32_fast_tf32"; break;
    case 78: s = "fp32_emulated_bf16x9"; break;
    case 79: s = "fp64_emulated_fixed"; break;
    default: break;
    }
    return pick(s, t, "compute", buf, sz);
}

const char *icpt_epilogue_name(unsigned e, char *buf, size_t sz) {
    const char *s = NULL;
    switch (e) {
    case 1: s = "default"; break;
    case 2: s = "relu"; break;
    case 2 | 128: s = "relu_aux"; break;
    case 4: s = "bias"; break;
    case 2 | 4: s = "relu_bias"; break;
    case 2 | 128 | 4: s = "relu_aux_bias"; break;
    case 8 | 128: s = "drelu"; break;
    case 8 | 128 | 16: s = "drelu_bgrad"; break;
    case 32: s = "gelu"; break;
    case 32 | 128: s = "gelu_aux"; break;
    case 32 | 4: s = "gelu_bias"; break;
    case 32 | 128 | 4: s = "gelu_aux_bias"; break;
    case 64 | 128: s = "dgelu"; break;
    case 64 | 128 | 16: s = "dgelu_bgrad"; break;
    case 256: s = "bgrada"; break;
    case 512: s = "bgradb"; break;
    default: break;
    }
    return pick(s, (int)e, "epilogue", buf, sz);
}

const char *icpt_op_name(int op) {
    switch (op) {
    case 0: return "N";
    case 1: return "T";
    case 2: return "C";
    default: return "?";
    }
}

const char *icpt_nccl_type_name(int t, char *buf, size_t sz) {
    static const char *const n[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                    "fp16", "fp32",  "fp64",  "bf16",   "fp8e4m3", "fp8e5m2"};
    return pick(t >= 0 && t < (int)(sizeof n / sizeof n[0]) ? n[t] : NULL, t, "nccl_type", buf, sz);
}

int icpt_nccl_type_size(int t) {
    static const int s[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    return t >= 0 && t < (int)(sizeof s / sizeof s[0]) ? s[t] : 0;
}

const char *icpt_nccl_redop_name(int op) {
    switch (op) {
    case 0: return "sum";
    case 1: return "prod";
    case 2: return "max";
    case 3: return "min";
    case 4: return "avg";
    default: return "custom";
    }
}
