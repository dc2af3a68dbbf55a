/* --kernels exact|torch (drift replay, bisect, invariance): one option-table
 * entry and one rule for which CUDA kernel profile runs
 * (kernels/cuda/cuda_backend.h, kernels=; docs/cli.md "Kernel profiles"). */
#ifndef DRIFT_CLI_KERNELS_OPT_H
#define DRIFT_CLI_KERNELS_OPT_H

extern const char *const drift_cli_kernel_choices[]; /* "exact", "torch", NULL */

#define DRIFT_CLI_KERNELS_SPEC                                                                                   \
    {"--kernels", NULL, "K",                                                                                     \
     "CUDA kernel profile: torch (what PyTorch runs on the GPU, bit for bit) or exact\n"                         \
     "(drift's own order-defined kernels); default torch for a trace recorded from\n"                            \
     "PyTorch, else exact (the same as --device cuda:N:kernels=K; give one)",                                   \
     drift_cli_kernel_choices, 0}

typedef struct drift_cli_kernels {
    const char *profile; /* for the library (replay/bisect opts .kernels): "exact", "torch", or NULL (not
                            CUDA, or the --device spec names kernels= itself) */
    char shown[8];       /* the profile that will run: "exact", "torch"; "" off CUDA */
    char why[192];       /* "--kernels", "--device ...:kernels=", "default: ..."; the recorded workspaces */
    char spec[96];       /* profile with options ("torch:cublas_ws=N"): drift_cli_kernels_pick_trace */
} drift_cli_kernels;

/* The profile for device (a --device spec or a --devices list; NULL: cpu),
 * kernels (the --kernels value, NULL if not given) and whether the trace
 * was recorded from PyTorch. Returns 0 with *out filled, or reports a usage
 * error for cmd and returns 2: --kernels together with a device spec that
 * names kernels=, or --kernels torch off CUDA. Pure (no file is read). */
int drift_cli_kernels_pick(const char *cmd, const char *device, const char *kernels, int from_torch,
                           drift_cli_kernels *out);

/* drift_cli_kernels_pick for the trace at path (its /libraries read once):
 * whether it was recorded from PyTorch (formats/libraries.h,
 * drift_libraries_from_torch: its /libraries names torch, or its producer is
 * the Python recorder; not when it cannot be read: the command reports that
 * when it opens the trace itself) chooses the default profile, and under
 * the torch profile the GEMM workspaces its torch ran with (/libraries
 * cublas_workspace_bytes, cublaslt_workspace_bytes, set by
 * CUBLAS_WORKSPACE_CONFIG / CUBLASLT_WORKSPACE_SIZE) become the profile's
 * options: out->profile points to out->spec ("torch:cublas_ws=N:lt_ws_kib=K")
 * and out->why says so. They choose cuBLAS's algorithms (split-K needs
 * workspace): without them a run with CUBLAS_WORKSPACE_CONFIG=:16:8 (the
 * deterministic setting) does not replay bitwise. No options are added when
 * the trace recorded none or cannot be read, or the device spec sets
 * cublas_ws= or lt_ws_kib= itself. Returns 0, or 2 after a usage error as
 * drift_cli_kernels_pick. */
int drift_cli_kernels_pick_trace(const char *cmd, const char *device, const char *kernels, const char *trace,
                                 drift_cli_kernels *out);

#endif
