/* The memory plan of a replay (issue 18): before anything large is read or
 * uploaded, replay estimates its peak GPU and host memory for the model, the
 * plan and the sites it compares, and refuses (DRIFT_E_NOMEM: exit 2, with
 * the estimate, its parts and the limit) when it cannot fit, instead of
 * failing halfway.
 *
 * The estimate follows the executor (replay/exec.h): values are simulated in
 * execution order, allocated when produced and released after their last use
 * (VIEWs and identity casts alias and cost nothing); with a device-resident
 * cache every parameter-only value (parameters, their casts) stays for the
 * whole replay. Element sizes are the backend's storage: cuda native (2 or 4
 * bytes), cpu fp32 (4), ref fp64 (8). Host: the fp32 masters, the fp64
 * oracle's run when --ref oracle (parameters and activations on the host),
 * the reference site values kept per step (every site, or only the output
 * with --output-only), the replayed output. Fixed allowances: 256 MiB of GPU
 * workspace (cuBLASLt, attention scratch) and
 * 64 MiB of host overhead.
 *
 * Where the oracle runs is the caller's choice (oracle_on_host below).
 * Limits: DRIFT_MEM_LIMIT_GPU / DRIFT_MEM_LIMIT_HOST (bytes, suffixes K M G T)
 * override; otherwise the device's free memory (cudaMemGetInfo) and the
 * host's MemAvailable (/proc/meminfo). DRIFT_MEM_PLAN=0 skips the check. */
#ifndef DRIFT_REPLAY_EXEC_MEMPLAN_H
#define DRIFT_REPLAY_EXEC_MEMPLAN_H

#include <stdint.h>

#include "formats/err.h"
#include "replay/exec/forward.h"

/* Where the fp64 oracle of --ref oracle runs: on the replay's GPU (the
 * "ref-cuda:N" backend) when the replay's backend is "cuda[:N]", unless
 * on_host asks for the host ref backend (drift_replay_opts.oracle_on_host).
 * The backend spec into buf ("ref" or "ref-cuda:N"); returns buf. */
const char *drift_oracle_backend(const char *backend, int on_host, char *buf, unsigned long bufsz);

typedef struct drift_mem_estimate {
    int on_gpu;                  /* the replay's backend is a CUDA device */
    int64_t gpu_resident;        /* parameters and their casts kept on the device */
    int64_t gpu_activations;     /* peak of the per-step values */
    int64_t gpu_workspace;
    int64_t gpu_oracle;          /* the fp64 oracle's run when it is on the GPU */
    int64_t gpu_total;
    int64_t host_masters;        /* fp32 masters */
    int64_t host_backend;        /* cpu backend: its resident values and activations; 0 on a GPU */
    int64_t host_oracle;         /* fp64 oracle on the ref backend (0 without --ref oracle) */
    int64_t host_sites;          /* reference site values kept per step, the replayed output */
    int64_t host_total;
    int64_t gpu_limit, host_limit; /* bytes; -1 unknown */
} drift_mem_estimate;

/* Estimates for forward f of m on backend ("cpu", "cuda[:N]", "ref"), with
 * a device-resident cache when resident, observing sites when sites, plus the
 * fp64 oracle's run when oracle is not NULL (where drift_oracle_backend
 * puts it, given oracle_on_host). Fills *e including the limits. All
 * arguments borrowed. */
int drift_memplan_estimate(const drift_model *m, const drift_forward *f, const drift_forward *oracle, int oracle_on_host,
                           const char *backend, int resident, int sites, drift_mem_estimate *e, drift_err *err);
/* DRIFT_OK if e fits its limits (or the check is off), else DRIFT_E_NOMEM
 * with "replay needs about X GiB of GPU memory (...) but DEVICE has Y GiB
 * free" and the parts. what names the replay in the message. */
int drift_memplan_check(const drift_mem_estimate *e, const char *what, drift_err *err);
/* "12.3 GiB", "512 MiB", ... into buf. */
const char *drift_memplan_bytes(int64_t b, char *buf, unsigned long bufsz);

#endif
