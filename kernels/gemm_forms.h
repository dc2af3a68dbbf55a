/* GEMM forms: how a recording GPU's GEMM library summed a LINEAR, where that
 * is not drift's default (one fp32 sum per output element, the bias added to
 * it, one rounding), for the shapes drift knows (docs/gemm-forms.md).
 *
 * cuBLASLt's heuristic picks an algorithm per (GPU, library build, dtypes,
 * M, N, K, epilogue, alignments); some split K and reduce the partial sums
 * in the output dtype, or add the bias after rounding. The CUDA torch profile
 * reproduces them by calling the same heuristic; the cpu backend cannot, so
 * it follows a table of forms measured on the recording GPU, chosen by the
 * trace's recorded identity (the replay appends `gpu_as=TABLE` to a cpu
 * backend's spec). A shape not in the table keeps drift's default form. */
#ifndef DRIFT_KERNELS_GEMM_FORMS_H
#define DRIFT_KERNELS_GEMM_FORMS_H

#include <stddef.h>
#include <stdint.h>

#include "formats/dtype.h"
#include "formats/libraries.h"

typedef enum drift_gemm_form_kind {
    DRIFT_GEMM_FORM_ONE = 0,        /* sum (+ bias) in fp32, one rounding to out: drift's default */
    DRIFT_GEMM_FORM_BIAS_AFTER,     /* y = round(round(sum) + bias): the bias after the rounding */
    DRIFT_GEMM_FORM_SPLITK_INPLACE  /* K in chunks of `chunk` from k = 0, p_i each chunk's fp32 sum:
                                       y = round(p_0 + bias), then y = round(y + p_i) for i = 1, 2, ...
                                       (split-K reduced in place in the output dtype) */
} drift_gemm_form_kind;

typedef struct drift_gemm_form {
    drift_gemm_form_kind kind;
    int64_t chunk; /* SPLITK_INPLACE: K elements per chunk (> 0, < K) */
} drift_gemm_form;

/* The name of the table measured on the GPU and cuBLASLt build that rec
 * describes, recorded from PyTorch (producer: the trace's producer
 * attribute), or NULL when drift has none ("h200-sm90-cublaslt-13.1.0"). */
const char *drift_gemm_table_for(const char *producer, const drift_libraries *rec);

/* Index of the table named name, or -1 ("none" and unknown names: -1). */
int drift_gemm_table_find(const char *name);

/* The streaming multiprocessor count of table t's GPU (FlashAttention-2's
 * split-KV heuristic, kernels/cpu/cpu_ops.c), 0 for none (t = -1). */
int drift_gemm_table_sms(int t);

/* The form of LINEAR y[M, N] = x[M, K] W[N, K]^T (+ bias) with compute and
 * out dtypes in table t (-1: no table): DRIFT_GEMM_FORM_ONE unless listed. */
drift_gemm_form drift_gemm_form_lookup(int t, drift_dtype compute, drift_dtype out, int64_t M, int64_t N, int64_t K,
                                       int bias);

/* spec with ":gpu_as=table" appended when spec is a cpu backend ("cpu",
 * "cpu:...") naming no gpu_as= itself and table is non-NULL; any other spec
 * copied unchanged. Into out (sz bytes); DRIFT_E_INPUT when it does not fit. */
int drift_backend_spec_with_gemm_table(const char *spec, const char *table, char *out, size_t sz, drift_err *err);

#endif
