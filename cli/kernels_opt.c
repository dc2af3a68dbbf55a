/* --kernels: the option-table entry's choices and the profile rule
 * (cli/kernels_opt.h). */
#include "cli/kernels_opt.h"

#include <stdio.h>
#include <string.h>

#include "cli/cli_util.h"
#include "formats/libraries.h"
#include "formats/trace.h"

const char *const drift_cli_kernel_choices[] = {"exact", "torch", NULL};

/* 1 if some comma-separated item of list is a CUDA backend (cuda, cuda:...; not ref-cuda). */
static int names_cuda(const char *list) {
    for (const char *p = list; p && *p;) {
        if (strncmp(p, "cuda", 4) == 0 && (p[4] == '\0' || p[4] == ':' || p[4] == ',')) return 1;
        const char *c = strchr(p, ',');
        p = c ? c + 1 : NULL;
    }
    return 0;
}

int drift_cli_kernels_pick(const char *cmd, const char *device, const char *kernels, int from_torch,
                           drift_cli_kernels *out) {
    memset(out, 0, sizeof *out);
    const char *dev = device ? device : "cpu";
    const char *in_spec = strstr(dev, "kernels=");
    if (kernels && in_spec)
        return drift_cli_usage_error_field(cmd, "--kernels", "--kernels %s and --device %s both choose the kernel profile: give one",
                                           kernels, dev);
    if (!names_cuda(dev)) {
        if (kernels && strcmp(kernels, "torch") == 0)
            return drift_cli_usage_error_field(cmd, "--kernels", "--kernels torch is a CUDA kernel profile: give --device cuda[:N]");
        return 0; /* exact on the host is what the host backends are anyway */
    }
    if (in_spec) {
        size_t n = strcspn(in_spec + 8, ":,");
        snprintf(out->shown, sizeof out->shown, "%.*s", (int)(n < sizeof out->shown ? n : sizeof out->shown - 1), in_spec + 8);
        snprintf(out->why, sizeof out->why, "--device ...:kernels=");
        return 0;
    }
    if (kernels) {
        out->profile = strcmp(kernels, "torch") == 0 ? "torch" : "exact";
        snprintf(out->why, sizeof out->why, "--kernels");
    } else {
        out->profile = from_torch ? "torch" : "exact";
        snprintf(out->why, sizeof out->why, "default: the trace was %srecorded from PyTorch", from_torch ? "" : "not ");
    }
    snprintf(out->shown, sizeof out->shown, "%s", out->profile);
    return 0;
}

/* The recording's GEMM workspaces (l) as the torch profile's options, unless the device spec sets them. */
static void add_recorded(const drift_libraries *l, const char *device, drift_cli_kernels *out) {
    if (!out->profile || strcmp(out->profile, "torch") != 0) return;
    if (device && (strstr(device, "cublas_ws=") || strstr(device, "lt_ws_kib="))) return;
    if (l->cublas_workspace <= 0 && l->cublaslt_workspace <= 0) return;
    int n = snprintf(out->spec, sizeof out->spec, "torch");
    if (l->cublas_workspace > 0)
        n += snprintf(out->spec + n, sizeof out->spec - (size_t)n, ":cublas_ws=%lld", (long long)l->cublas_workspace);
    if (l->cublaslt_workspace > 0)
        snprintf(out->spec + n, sizeof out->spec - (size_t)n, ":lt_ws_kib=%lld", (long long)(l->cublaslt_workspace / 1024));
    out->profile = out->spec;
    size_t w = strlen(out->why);
    snprintf(out->why + w, sizeof out->why - w, "%sthe recording's GEMM workspaces: %s", w ? "; " : "", out->spec + 6);
}

/* The trace's /libraries (*present 0: none or unreadable) and whether it was recorded from PyTorch. */
static int read_trace_libraries(const char *path, drift_libraries *l, int *present) {
    drift_trace_reader *r = NULL;
    memset(l, 0, sizeof *l);
    *present = 0;
    if (!path || drift_trace_reader_open(&r, path, DRIFT_TRACE_OPEN_NORMAL, NULL)) return 0;
    int ok = drift_trace_read_libraries(r, l, present, NULL) == DRIFT_OK;
    if (!ok) *present = 0;
    int yes = drift_libraries_from_torch(drift_trace_reader_meta(r)->producer, ok && *present ? l : NULL);
    drift_trace_reader_close(r);
    return yes;
}

int drift_cli_kernels_pick_trace(const char *cmd, const char *device, const char *kernels, const char *trace,
                                 drift_cli_kernels *out) {
    drift_libraries l;
    int present = 0;
    const int from_torch = read_trace_libraries(trace, &l, &present);
    if (drift_cli_kernels_pick(cmd, device, kernels, from_torch, out)) return 2;
    if (present) add_recorded(&l, device, out);
    return 0;
}
