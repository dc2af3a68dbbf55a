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
    char why[96];        /* "--kernels", "--device ...:kernels=", "default: ..." */
} drift_cli_kernels;

/* The profile for device (a --device spec or a --devices list; NULL: cpu),
 * kernels (the --kernels value, NULL if not given) and whether the trace
 * was recorded from PyTorch. Returns 0 with *out filled, or reports a usage
 * error for cmd and returns 2: --kernels together with a device spec that
 * names kernels=, or --kernels torch off CUDA. Pure (no file is read). */
int drift_cli_kernels_pick(const char *cmd, const char *device, const char *kernels, int from_torch,
                           drift_cli_kernels *out);

/* 1 if the trace at path was recorded from PyTorch (formats/libraries.h,
 * drift_libraries_from_torch: its /libraries names torch, or its producer is
 * the Python recorder); 0 otherwise, also when it cannot be read (the
 * command reports that when it opens the trace itself). */
int drift_cli_trace_from_torch(const char *path);

#endif
