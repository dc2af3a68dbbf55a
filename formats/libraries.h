/* Library identity: the GPU and the library builds a forward ran on (the
 * recording's, stored in a trace's /libraries group, docs/format.md section
 * 2.1; and a replay's own), and the comparison of the two that tells a
 * replay whether bitwise equality with the recording can be expected
 * (DESIGN.md s4, kernel profiles). Plain data, no CUDA: a replay's identity
 * comes from the CUDA backend (kernels/cuda/cuda_backend.h), a recording's
 * from the recorder. */
#ifndef DRIFT_FORMATS_LIBRARIES_H
#define DRIFT_FORMATS_LIBRARIES_H

#include <stddef.h>
#include <stdint.h>

#include "formats/err.h"

/* Longest string field a reader accepts, bytes with the NUL (a trace's
 * attribute longer than its field is refused, never cut). */
#define DRIFT_LIBRARIES_NAME_MAX 256
#define DRIFT_LIBRARIES_PATH_MAX 1024
#define DRIFT_LIBRARIES_MODE_MAX 64

/* Versions are the libraries' own runtime answers, 0 when unknown:
 *   driver, runtime  cudaDriverGetVersion / cudaRuntimeGetVersion: 1000 x major + 10 x minor (12080: 12.8)
 *   cublaslt, cublas 10000 x major + 100 x minor + patch (130100: 13.1.0)
 *   cudnn            cudnnGetVersion: 10000 x major + 100 x minor + patch from 9 on (91000: 9.10.0),
 *                    1000 x major + 100 x minor + patch before (8907: 8.9.7)
 * Strings are "" when unknown; the paths are the shared objects the process
 * had loaded. */
typedef struct drift_libraries {
    char gpu_name[DRIFT_LIBRARIES_NAME_MAX];
    int cc_major, cc_minor;      /* compute capability; 0.0 unknown */
    int64_t driver_version;
    int64_t runtime_version;
    int64_t cublaslt_version;
    int64_t cublas_version;
    int64_t cudnn_version;
    char torch_version[DRIFT_LIBRARIES_NAME_MAX]; /* torch.__version__, "" when not recorded from PyTorch */
    char cublaslt_path[DRIFT_LIBRARIES_PATH_MAX];
    char cudnn_path[DRIFT_LIBRARIES_PATH_MAX];
    /* torch.compile (docs/format.md 2.1): 1 when the recorded forward ran
     * compiled code (an OptimizedModule, or compiled regions inside it) */
    int compiled;
    char inductor_mode[DRIFT_LIBRARIES_MODE_MAX];        /* "default", "max-autotune", ...; "" unknown */
    char compiled_modules[DRIFT_LIBRARIES_PATH_MAX];     /* comma-separated FQNs, "<model>" for the root module */
    /* The GEMM workspaces torch ran with (docs/format.md 2.1), bytes, 0 when
     * unknown or torch's default: they choose cuBLAS's and cuBLASLt's
     * algorithms (split-K needs workspace), so a replay under the torch
     * profile must use the same. cublas_workspace: what
     * CUBLAS_WORKSPACE_CONFIG set (":16:8" = 128 KiB, the setting of
     * deterministic runs); cublaslt_workspace: CUBLASLT_WORKSPACE_SIZE. */
    int64_t cublas_workspace;
    int64_t cublaslt_workspace;
} drift_libraries;

/* Zeroes *l (every field unknown). */
void drift_libraries_init(drift_libraries *l);

/* 1 if l knows anything about a GPU (a name or a cuBLASLt version). */
int drift_libraries_known(const drift_libraries *l);

/* Version v of kind "driver", "runtime", "cublaslt", "cublas" or "cudnn" as
 * text ("12.8", "13.1.0", "9.10.0"; "unknown" for 0) into buf (caller-owned,
 * sz bytes); returns buf. */
const char *drift_libraries_version_text(const char *kind, int64_t v, char *buf, size_t sz);

/* One line describing l ("NVIDIA H200 (sm_90), driver 13.0, runtime 13.1,
 * cuBLASLt 13.1.0, cuBLAS 13.1.0, cuDNN 9.19.0, torch 2.11.0"), strings
 * escaped (control and non-ASCII bytes as \xNN), into buf; returns buf. */
const char *drift_libraries_describe(const drift_libraries *l, char *buf, size_t sz);

/* s with control characters, DEL and bytes >= 0x80 as \xNN, truncated with
 * "..." to fit buf (sz >= 4); returns buf. For strings read from a trace. */
const char *drift_libraries_escape(const char *s, char *buf, size_t sz);

typedef enum drift_libraries_verdict {
    DRIFT_LIBRARIES_SAME = 0,    /* GPU, compute capability, cuBLASLt, cuBLAS and cuDNN equal where both know them */
    DRIFT_LIBRARIES_DIFFER = 1,  /* one of those differs: bitwise equality with the recording is not expected */
    DRIFT_LIBRARIES_NONE = 2     /* the recording has no identity (or the replay none: not a CUDA device) */
} drift_libraries_verdict;

/* Compares the recording's identity (rec, NULL: the trace has none) with the
 * replay's (here, NULL: not a CUDA device). The verdict rests on the GPU
 * name, compute capability, cuBLASLt, cuBLAS and cuDNN versions, each
 * compared where both sides know it (a field unknown on one side is named in
 * the message, not counted as a difference); driver and CUDA runtime
 * differences are named too, as not expected to change cuBLAS(Lt)/cuDNN
 * results. msg (caller-owned, sz bytes) gets one sentence, e.g.
 *   "same libraries as the recording (NVIDIA H200 sm_90, cuBLASLt 13.1.0, cuDNN 9.19.0)"
 *   "bitwise equality with the recording is not expected: cuDNN 9.10.0 here vs 9.8.0 recorded"
 *   "the trace records no library identity: bitwise equality with the recording cannot be judged" */
drift_libraries_verdict drift_libraries_compare(const drift_libraries *rec, const drift_libraries *here, char *msg,
                                                size_t sz);
/* When the recording ran torch.compile'd code (rec->compiled): one sentence
 * into msg saying that bitwise equality is not expected for that reason,
 * naming the inductor mode and the compiled modules, and first_site (the
 * first divergent site, NULL or "" when none diverged) as where it first
 * shows; returns 1. 0 (msg "") when rec is NULL or not compiled. */
int drift_libraries_compiled_message(const drift_libraries *rec, const char *first_site, char *msg, size_t sz);

/* "same", "differ", "none" (static). */
const char *drift_libraries_verdict_name(drift_libraries_verdict v);

/* 1 if a trace was recorded from PyTorch: its identity names a torch
 * version, or its producer attribute is the Python recorder's with torch
 * loaded ("drift-recorder-python 0.1.0 torch 2.11.0"). producer and l may
 * be NULL. */
int drift_libraries_from_torch(const char *producer, const drift_libraries *l);

#endif
