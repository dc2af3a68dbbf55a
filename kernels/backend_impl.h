/* Private to kernels/ (after ggml's ggml-backend-impl.h): the body of a
 * drift_backend, its function table, what backend constructors receive, and
 * the broadcast plan every backend shares. Nothing outside kernels/
 * includes this file (tests/layering.sh checks it).
 *
 * The door (kernels/door.c) checks every argument before calling a table
 * entry, so entries may assume: tensors are non-NULL, allocated on this
 * backend, numel equal to their shape's, dtypes the backend stores; run()'s
 * op has a valid kind and n_in, its inputs and out the shapes
 * drift_op_infer_shape gives and no overlap; metrics() has an acc and equal
 * shapes; alloc() has a valid dtype and shape (numel filled in). Entries
 * check only what is theirs (e.g. CUDA alias alignment). Compiles as C11
 * and as CUDA C++. */
#ifndef DRIFT_KERNELS_BACKEND_IMPL_H
#define DRIFT_KERNELS_BACKEND_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

struct drift_backend {
    const char *name;      /* "ref", "cpu", "cuda:0" (owned by ctx or static) */
    void *ctx;             /* backend-private state */
    /* 1 if the backend stores tensors of dtype dt. */
    int (*stores)(drift_dtype dt);
    /* Bytes one element of dtype dt occupies in this backend's storage. */
    size_t (*elem_bytes)(drift_dtype dt);
    int (*supports_op)(const drift_backend *be, const drift_op *op);
    int (*alloc)(const drift_backend *be, drift_tensor *t, drift_err *err);
    void (*release)(const drift_backend *be, drift_tensor *t);
    int (*upload_f32)(const drift_backend *be, drift_tensor *t, const float *src, drift_err *err);
    int (*upload_f64)(const drift_backend *be, drift_tensor *t, const double *src, drift_err *err);
    int (*download_f32)(const drift_backend *be, const drift_tensor *t, float *dst, drift_err *err);
    int (*download_f64)(const drift_backend *be, const drift_tensor *t, double *dst, drift_err *err);
    int (*run)(const drift_backend *be, const drift_op *op, const drift_tensor *const *in, drift_tensor *out,
               drift_err *err);
    int (*metrics)(const drift_backend *be, const drift_tensor *t, const drift_tensor *r, drift_metric_acc *acc,
                   drift_err *err);
    int (*sync)(const drift_backend *be, drift_err *err);
    /* Frees the backend itself (ctx and the struct). */
    void (*destroy)(drift_backend *be);
    /* Optional (NULL: never aliases). out fits inside base (checked). */
    int (*alias)(const drift_backend *be, const drift_tensor *base, int64_t elem_offset, drift_tensor *out,
                 drift_err *err);
    /* Optional (NULL: nothing to tell): drift_backend_last_choice. buf non-NULL, bufsz > 0. */
    void (*last_choice)(const drift_backend *be, char *buf, size_t bufsz);
};

/* A backend spec's options ("cuda:1:gemm=naive" -> device 1, one option). */
#define DRIFT_BACKEND_MAX_OPTS 8
typedef struct drift_backend_opts {
    const char *spec;      /* the whole spec, for messages */
    int device;            /* cuda: N (0 when not given) */
    int n;
    char key[DRIFT_BACKEND_MAX_OPTS][24];
    char value[DRIFT_BACKEND_MAX_OPTS][40];
} drift_backend_opts;

/* The value of option key as an integer in [lo, hi] (*v unchanged when the
 * option is absent); DRIFT_E_INPUT naming the spec and key otherwise. */
int drift_backend_opt_int(const drift_backend_opts *o, const char *key, long lo, long hi, long *v, drift_err *err);
/* The value of option key, or NULL when absent. */
const char *drift_backend_opt_str(const drift_backend_opts *o, const char *key);
/* DRIFT_E_INPUT naming the first option not in keys (NULL-terminated). */
int drift_backend_opts_check(const drift_backend_opts *o, const char *const *keys, drift_err *err);

/* Constructors (dispatched by drift_backend_create). Caller owns *out. */
int drift_ref_backend_create(const drift_backend_opts *o, drift_backend **out, drift_err *err);
int drift_cpu_backend_create(const drift_backend_opts *o, drift_backend **out, drift_err *err);
int drift_cuda_backend_create_opts(const drift_backend_opts *o, drift_backend **out, drift_err *err);
/* "ref-cuda[:N][:attn_scratch=BYTES]": the fp64 oracle on CUDA device N
 * (kernels/cuda/ref_cuda.c). */
int drift_cuda_ref_backend_create(const drift_backend_opts *o, drift_backend **out, drift_err *err);

/* The host thread count for a new host backend: threads= when given, else
 * the process default (drift_backend_set_host_threads), else online cores
 * capped at 8. */
int drift_backend_host_threads(const drift_backend_opts *o, int *n, drift_err *err);

/* Broadcast plan of a binary op (numpy rules) for a contiguous output:
 * dims of size 1 removed and mergeable neighbours collapsed, so that the
 * innermost dim is as long as possible. Strides are in elements (0 where an
 * operand is broadcast). One plan for every backend (kernels/bcast.c). */
typedef struct drift_bcast {
    int nd;                         /* >= 1 */
    int64_t shape[DRIFT_MAX_DIMS];  /* collapsed output shape */
    int64_t sa[DRIFT_MAX_DIMS];     /* strides of in0 */
    int64_t sb[DRIFT_MAX_DIMS];     /* strides of in1 */
    int64_t numel;
} drift_bcast;
void drift_bcast_plan(const drift_tensor *a, const drift_tensor *b, drift_bcast *bc);

/* Offsets into in0 and in1 of flat output element e of plan bc. */
static inline void drift_bcast_offsets(const drift_bcast *bc, int64_t e, int64_t *oa, int64_t *ob) {
    int64_t a = 0, b = 0;
    for (int d = bc->nd - 1; d >= 0; d--) {
        const int64_t i = e % bc->shape[d];
        e /= bc->shape[d];
        a += i * bc->sa[d];
        b += i * bc->sb[d];
    }
    *oa = a;
    *ob = b;
}

/* Walks the rows of a plan (a row: the innermost collapsed dim) in order,
 * an odometer over the outer dims: the host backends' binary loops. */
typedef struct drift_bcast_rows {
    const drift_bcast *bc;
    int64_t idx[DRIFT_MAX_DIMS];
    int64_t oa, ob; /* offsets of the current row's first element in in0 and in1 */
} drift_bcast_rows;

/* Positions r (over bc, borrowed) at row `row`. */
static inline void drift_bcast_rows_seek(drift_bcast_rows *r, const drift_bcast *bc, int64_t row) {
    r->bc = bc;
    r->oa = r->ob = 0;
    for (int d = bc->nd - 1; d >= 0; d--) r->idx[d] = 0;
    for (int d = bc->nd - 2; d >= 0; d--) {
        r->idx[d] = row % bc->shape[d];
        row /= bc->shape[d];
        r->oa += r->idx[d] * bc->sa[d];
        r->ob += r->idx[d] * bc->sb[d];
    }
}

/* Moves r to the next row. */
static inline void drift_bcast_rows_next(drift_bcast_rows *r) {
    const drift_bcast *bc = r->bc;
    for (int d = bc->nd - 2; d >= 0; d--) {
        r->idx[d]++;
        r->oa += bc->sa[d];
        r->ob += bc->sb[d];
        if (r->idx[d] < bc->shape[d]) break;
        r->oa -= bc->sa[d] * bc->shape[d];
        r->ob -= bc->sb[d] * bc->shape[d];
        r->idx[d] = 0;
    }
}

/* Normalises a possibly negative dim against ndim; -1 if out of range. */
int drift_op_norm_dim(int dim, int ndim);
/* Sets err to DRIFT_E_INPUT at "op <name>" with the message; returns DRIFT_E_INPUT
 * (shape-rule failures of kernels/backend.c and kernels/aten_shapes.c). */
int drift_op_shape_err(drift_err *err, const drift_op *op, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif

#endif
