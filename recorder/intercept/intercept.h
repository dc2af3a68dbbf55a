/* Private to recorder/intercept: the LD_PRELOAD interposer's shared state
 * (docs/intercept.md, DESIGN.md s7d).
 *
 * Rules every file here follows, because this code runs inside someone
 * else's training job:
 *  - never crash or stall the job: no HDF5 on the hot path (the census is
 *    written at flush by a separately dlopen'd writer library), fixed-size
 *    rows, every lock held for a bounded number of steps, no allocation
 *    after initialisation on the hot path;
 *  - every failure is swallowed and reported once on stderr, prefixed
 *    "drift intercept:", and named in the census notes;
 *  - a wrapper whose real function cannot be found returns the library's
 *    "not initialized"/"internal error" status. */
#ifndef DRIFT_RECORDER_INTERCEPT_H
#define DRIFT_RECORDER_INTERCEPT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "formats/census.h"

/* ---- symbol resolution (resolve.c) ------------------------------------ */
/* A real function, resolved lazily and at most once successfully. Static
 * storage; fn is published with release/acquire ordering. */
/* A generic function pointer (ISO C forbids object <-> function pointer
 * conversions; dlsym's result is copied into one with memcpy). */
typedef void (*icpt_fn)(void);

typedef struct icpt_sym {
    const char *lib;      /* soname for the RTLD_NOLOAD fallback: "libnccl.so.2" */
    const char *name;     /* "ncclAllGather" */
    const char *strong;   /* preferred alias ("pncclAllGather") or NULL */
    icpt_fn self;         /* our wrapper: never return it (no recursion); 0 if none */
    _Atomic(icpt_fn) fn;
    atomic_int reported;
} icpt_sym;

#define ICPT_SYM(lib, name, strong, self) {lib, name, strong, (icpt_fn)(self), 0, 0}
#define ICPT_SYM_REAL(lib, name, strong) {lib, name, strong, 0, 0, 0}

/* The real function, or NULL (reported once). Thread-safe, lock-free. */
icpt_fn icpt_resolve(icpt_sym *s);

/* ---- reporting (state.c) ---------------------------------------------- */
/* Prints "drift intercept: <msg>" once per key (a static string) and adds
 * the message to the census notes. Thread-safe. */
void icpt_report_once(atomic_int *flag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Adds a line to the census notes (bounded; extra lines are dropped). */
void icpt_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- state (state.c) ---------------------------------------------------- */
/* Reads DRIFT_INTERCEPT / DRIFT_INTERCEPT_MAX_ROWS and allocates the tables
 * (the library constructor calls it once). */
void icpt_state_init(void);
/* 1 when recording is on (DRIFT_INTERCEPT != 0, tables allocated, not a
 * forked child). Wrappers pass through when 0. */
int icpt_enabled(void);

/* Per-thread API nesting: a wrapper entered while another wrapper of this
 * thread runs (cuBLAS calling cuBLASLt) is passed through and counted in
 * nested_skipped. enter returns 1 if the caller is the outermost. */
int icpt_enter(void);
void icpt_leave(void);

/* Records one call: key fields of row filled (the rest zero), counters are
 * added here. O(1) under a mutex: a bounded probe of a fixed hash table;
 * when full, the call is counted as dropped. */
void icpt_record_gemm(drift_census_gemm *row, int failed);
/* comm: the communicator pointer (NULL allowed); rank/nranks as the real
 * library reported (-1 if not). */
void icpt_record_coll(drift_census_coll *row, const void *comm, int failed);

/* Snapshot of everything recorded (caller frees gemm/coll with free()). */
int icpt_snapshot(drift_census *out);

/* ---- NVTX (nvtx_inject.c) --------------------------------------------- */
/* The calling thread's range path, innermost ranges kept when it is longer
 * than DRIFT_CENSUS_RANGE_MAX - 1 bytes (then it starts with ".../").
 * Writes "" when the thread has no open range. */
void icpt_range_path(char out[DRIFT_CENSUS_RANGE_MAX]);
int64_t icpt_nvtx_ranges(void);
int icpt_nvtx_injected(void);

/* ---- names (names.c) ---------------------------------------------------- */
const char *icpt_cuda_type_name(int t, char *buf, size_t sz);
int icpt_cuda_type_size(int t); /* bytes per element, 0 if unknown or sub-byte */
const char *icpt_compute_type_name(int t, char *buf, size_t sz);
const char *icpt_epilogue_name(unsigned e, char *buf, size_t sz);
const char *icpt_op_name(int op); /* cublasOperation_t -> "N", "T", "C", "?" */
const char *icpt_nccl_type_name(int t, char *buf, size_t sz);
int icpt_nccl_type_size(int t);
const char *icpt_nccl_redop_name(int op);

/* Bounded copy, always NUL-terminated (field size sz). */
void icpt_copy(char *dst, size_t sz, const char *src);

/* ---- flush (flush.c) ------------------------------------------------------ */
/* Writes the census now (final = 1 at exit: later flushes are skipped). */
void icpt_flush(int final);

#endif
