/* Library identities in text and JSON (cli/libraries_out.h). */
#include "cli/libraries_out.h"

#include <stdio.h>
#include <string.h>

static void field_str(drift_json_buf *b, const char *key, const char *s) {
    if (s && s[0]) drift_json_buf_field_string(b, key, s);
    else drift_json_buf_field_null(b, key);
}

void drift_cli_json_libraries(drift_json_buf *b, const drift_libraries *l) {
    if (!l) {
        drift_json_buf_add_null(b);
        return;
    }
    char cc[32], v[32];
    drift_json_buf_begin_object(b);
    field_str(b, "gpu_name", l->gpu_name);
    snprintf(cc, sizeof cc, "%d.%d", l->cc_major, l->cc_minor);
    field_str(b, "compute_capability", l->cc_major > 0 ? cc : NULL);
    static const char *const keys[5] = {"cuda_driver", "cuda_runtime", "cublaslt", "cublas", "cudnn"};
    static const char *const kinds[5] = {"driver", "runtime", "cublaslt", "cublas", "cudnn"};
    const int64_t vals[5] = {l->driver_version, l->runtime_version, l->cublaslt_version, l->cublas_version,
                             l->cudnn_version};
    for (int k = 0; k < 5; k++) drift_json_buf_field_int(b, keys[k], vals[k]);
    drift_json_buf_add_key(b, "versions");
    drift_json_buf_begin_object(b);
    for (int k = 0; k < 5; k++)
        field_str(b, keys[k], vals[k] > 0 ? drift_libraries_version_text(kinds[k], vals[k], v, sizeof v) : NULL);
    drift_json_buf_end_object(b);
    field_str(b, "torch", l->torch_version);
    field_str(b, "cublaslt_path", l->cublaslt_path);
    field_str(b, "cudnn_path", l->cudnn_path);
    drift_json_buf_field_bool(b, "compiled", l->compiled);
    field_str(b, "inductor_mode", l->compiled ? l->inductor_mode : NULL);
    if (l->compiled) drift_json_buf_field_string(b, "compiled_modules", l->compiled_modules);
    else drift_json_buf_field_null(b, "compiled_modules");
    /* torch's GEMM workspaces when the run set them (CUBLAS_WORKSPACE_CONFIG, CUBLASLT_WORKSPACE_SIZE) */
    if (l->cublas_workspace > 0) drift_json_buf_field_int(b, "cublas_workspace_bytes", l->cublas_workspace);
    else drift_json_buf_field_null(b, "cublas_workspace_bytes");
    if (l->cublaslt_workspace > 0) drift_json_buf_field_int(b, "cublaslt_workspace_bytes", l->cublaslt_workspace);
    else drift_json_buf_field_null(b, "cublaslt_workspace_bytes");
    drift_json_buf_end_object(b);
}

void drift_cli_json_libraries_cmp(drift_json_buf *b, const drift_libraries *rec, const drift_libraries *here) {
    char msg[2048];
    drift_libraries_verdict v = drift_libraries_compare(rec, here, msg, sizeof msg);
    drift_json_buf_add_key(b, "libraries");
    drift_json_buf_begin_object(b);
    drift_json_buf_field_string(b, "verdict", drift_libraries_verdict_name(v));
    drift_json_buf_field_bool(b, "bitwise_possible", v == DRIFT_LIBRARIES_SAME);
    drift_json_buf_field_string(b, "message", msg);
    drift_json_buf_add_key(b, "recorded");
    drift_cli_json_libraries(b, rec);
    drift_json_buf_add_key(b, "replay");
    drift_cli_json_libraries(b, here);
    drift_json_buf_end_object(b);
}

void drift_cli_text_libraries(FILE *f, const char *indent, const char *label, const drift_libraries *l) {
    char d[2048], p1[DRIFT_LIBRARIES_PATH_MAX * 4], p2[DRIFT_LIBRARIES_PATH_MAX * 4];
    fprintf(f, "%s%s%s\n", indent, label, drift_libraries_describe(l, d, sizeof d));
    if (l->cublaslt_path[0] || l->cudnn_path[0])
        fprintf(f, "%s%*s cuBLASLt %s, cuDNN %s\n", indent, (int)strlen(label) - 1, "",
                l->cublaslt_path[0] ? drift_libraries_escape(l->cublaslt_path, p1, sizeof p1) : "(path unknown)",
                l->cudnn_path[0] ? drift_libraries_escape(l->cudnn_path, p2, sizeof p2) : "(path unknown)");
    if (l->cublas_workspace > 0 || l->cublaslt_workspace > 0)
        fprintf(f, "%s%*s GEMM workspaces: cuBLAS %lld bytes, cuBLASLt %lld bytes (0: torch's default)\n", indent,
                (int)strlen(label) - 1, "", (long long)l->cublas_workspace, (long long)l->cublaslt_workspace);
}
