/* GEMM forms measured on recording GPUs (kernels/gemm_forms.h, docs/gemm-forms.md). */
#include "kernels/gemm_forms.h"

#include <stdio.h>
#include <string.h>

typedef struct gemm_table {
    const char *name;
    const char *gpu_name;
    int cc_major, cc_minor;
    int64_t cublaslt;
    int sms; /* streaming multiprocessors: FlashAttention-2's split-KV heuristic counts them */
} gemm_table;

/* One row per shape whose form is not drift's default, with its evidence. */
typedef struct gemm_row {
    int table;
    drift_dtype compute, out;
    int64_t M, N, K;
    int bias;
    drift_gemm_form form;
} gemm_row;

static const gemm_table tables[] = {
    {"h200-sm90-cublaslt-13.1.0", "NVIDIA H200", 9, 0, 130100, 132},
};

/* torch 2.11 addmm (cuBLASLt, bias epilogue) on the H200, found by replaying the recorded
 * module inputs through each form (bench/zoo/emulate/splitk_search.py, bench/RESULTS.md
 * "Issue 31: importer numerics" and "Issue 31: cpu noise floor"): */
static const gemm_row rows[] = {
    /* TransformerTemporalModel proj_out: split-K 2; the emulator's output then differs from
       the recording in 16 of 16384 elements (about 1800 of 8192 per step with one rounding) */
    {0, DRIFT_BF16, DRIFT_BF16, 2048, 4, 32, 1, {DRIFT_GEMM_FORM_SPLITK_INPLACE, 16}},
    /* HunyuanDiT2DModel time_extra_emb.extra_embedder.linear_1: split-K 2 (784 + 772); the
       emulator is then bitwise with the recording at the block and the output, both steps */
    {0, DRIFT_BF16, DRIFT_BF16, 2, 64, 1556, 1, {DRIFT_GEMM_FORM_SPLITK_INPLACE, 784}},
    /* HunyuanVideoTransformer3DModel time_text_embed.timestep_embedder.linear_1: 40 of 40
       recorded elements with the bias after the rounding (5 differ with one rounding) */
    {0, DRIFT_BF16, DRIFT_BF16, 1, 20, 256, 1, {DRIFT_GEMM_FORM_BIAS_AFTER, 0}},
    /* Cosmos3OmniTransformer time_embedder.linear_1: 24 of 24 recorded elements (2 steps) fed
       the recorded input with the bias after the rounding, 6 differ with one rounding */
    {0, DRIFT_BF16, DRIFT_BF16, 1, 12, 256, 1, {DRIFT_GEMM_FORM_BIAS_AFTER, 0}},
};

const char *drift_gemm_table_for(const char *producer, const drift_libraries *rec) {
    if (!rec || !drift_libraries_from_torch(producer, rec)) return NULL;
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        const gemm_table *t = &tables[i];
        if (!strcmp(rec->gpu_name, t->gpu_name) && rec->cc_major == t->cc_major && rec->cc_minor == t->cc_minor &&
            rec->cublaslt_version == t->cublaslt)
            return t->name;
    }
    return NULL;
}

int drift_gemm_table_find(const char *name) {
    if (!name) return -1;
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++)
        if (!strcmp(name, tables[i].name)) return (int)i;
    return -1;
}

int drift_gemm_table_sms(int t) {
    return t >= 0 && (size_t)t < sizeof tables / sizeof tables[0] ? tables[t].sms : 0;
}

drift_gemm_form drift_gemm_form_lookup(int t, drift_dtype compute, drift_dtype out, int64_t M, int64_t N, int64_t K,
                                       int bias) {
    const drift_gemm_form one = {DRIFT_GEMM_FORM_ONE, 0};
    if (t < 0) return one;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const gemm_row *r = &rows[i];
        if (r->table == t && r->compute == compute && r->out == out && r->M == M && r->N == N && r->K == K &&
            r->bias == (bias != 0))
            return r->form;
    }
    return one;
}

int drift_backend_spec_with_gemm_table(const char *spec, const char *table, char *out, size_t sz, drift_err *err) {
    if (!out || sz == 0) return drift_err_set(err, DRIFT_E_INTERNAL, "backend", "spec_with_gemm_table: no output buffer");
    const char *s = spec ? spec : "cpu";
    const int is_cpu = !strncmp(s, "cpu", 3) && (s[3] == '\0' || s[3] == ':');
    const int add = table && is_cpu && !strstr(s, "gpu_as=");
    int n = add ? snprintf(out, sz, "%s:gpu_as=%s", s, table) : snprintf(out, sz, "%s", s);
    if (n < 0 || (size_t)n >= sz)
        return drift_err_set(err, DRIFT_E_INPUT, "backend", "backend '%s': spec too long (at most %zu bytes)", s, sz - 1);
    return DRIFT_OK;
}
