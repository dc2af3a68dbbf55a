/* Private to replay/capture's lowering: the lowering context shared by the
 * core (aten_lower.c: values, views, the ops drift had first), the closed
 * opset's lowerings (aten_lower_opset.c) and the op registry
 * (aten_registry.c: one row per op, the only place that maps a target to
 * its lowering). Every al_* function reports through aten_node_fail naming
 * the node; ids are drift value ids of the graph being built. */
#ifndef DRIFT_REPLAY_CAPTURE_ATEN_LOWER_INTERNAL_H
#define DRIFT_REPLAY_CAPTURE_ATEN_LOWER_INTERNAL_H

#include "formats/plan.h" /* DRIFT_INPUT_COUNT */
#include "replay/capture/aten_internal.h"
#include "replay/capture/aten_views.h"
#include "replay/ir/graph.h"

/* FX_EMPTY: a tensor with a 0-size dim (no values to compute; a cat skips it). */
typedef enum fx_kind { FX_NONE = 0, FX_TENSOR, FX_MULTI, FX_OTHER, FX_EMPTY } fx_kind;

typedef struct fxv {
    fx_kind kind;
    aten_view t;
    aten_view *multi; /* FX_MULTI: n_multi views (split, chunk, unbind) */
    int n_multi;
    int mat_id, mat_version; /* cached materialisation, valid while the root's version is mat_version */
    int first_id;            /* drift id of the first materialisation (sites), -1 if none */
    int cplx;                /* a complex tensor: t is its logical view over (real, imag) float pairs,
                                the pair being a trailing dim of size 2 and stride 1 */
    int bax1;                /* re-batching (aten_rebatch.c): 1 + the dim that holds the batch, 0: none */
    int ragged;              /* re-batching: a size follows a re-counted nonzero (lctx.rb_nz), not the batch */
} fxv;

typedef struct root {
    int cur;                 /* drift id of the contents */
    int version;
} root;

typedef struct lctx {
    const drift_aten_graph *g;
    drift_graph *out;
    drift_err *err;
    fxv *fx;
    root *roots;
    int n_roots, cap_roots;
    int cur;                 /* FX node being lowered */
    int seen_input[DRIFT_INPUT_COUNT];
    unsigned char *live;     /* FX nodes that reach the output (or write in place) */
    int last_cplx;           /* the complex flag of the last tensor_arg */
    const char **child;      /* per FX node: the child module (one level below the node's module) of
                                its first consumer inside a child module call, or NULL */
    int *child_at;           /* that consumer's index */
    int64_t rb_from, rb_to;  /* re-batching the graph from batch rb_from to rb_to (0: off) */
    int *rb_dims_out;        /* per FX node: bax1 found, or NULL */
    const int *rb_dims_in;   /* per FX node: bax1 imposed, or NULL */
    const unsigned char *rb_lead; /* per FX node: its shape argument's leading entry is the batch, or NULL */
    const int64_t *rb_nz;    /* per FX node: the count a re-batched nonzero takes (-1: its 'val''s), or NULL */
    struct al_routed *routed; /* aten_routed_slices.c: the last argsort's partition (its slices are lowered
                                 in a row), NULL until one is met; freed with the context */
    uint64_t args_read;      /* positional arguments of the current node that al_arg handed out (bit i) */
    uint64_t kwargs_read;    /* its keyword arguments that al_arg handed out (bit: member index) */
} lctx;


#define FAIL(c, ...) aten_node_fail((c)->g, (c)->cur, (c)->err, __VA_ARGS__)

/* Two operands of a binary op: materialised ids, or a number. */
typedef struct operand {
    int is_num;
    double num;
    int id, fx;
} operand;

/* A lowering: lowers the current node (c->cur), whose target is target and
 * its op name without namespace and overload base; sets c->fx[c->cur]. */
typedef int (*aten_lower_fn)(lctx *c, const char *base, const char *target);

/* One row of the op registry (aten_registry.c). */
typedef struct aten_op_row {
    const char *base;     /* op name without "aten." and overload ("add", "index_select") */
    aten_lower_fn lower;
    const char *backends; /* where its kernels run: "ref cpu cuda" (docs/aten-graph.md "The opset") */
    const char *note;     /* how it lowers, for the docs table */
} aten_op_row;

/* The row for target ("aten.add.Tensor"), or NULL: drift cannot run it. */
const aten_op_row *aten_registry_find(const char *target);
/* All rows, *n of them (for the docs consistency test and `drift ops`). */
const aten_op_row *aten_registry_rows(int *n);

/* ---- helpers (aten_lower.c) ---- */
const aten_node *al_cur_node(const lctx *c);
const drift_json_value *al_arg(const lctx *c, int i, const char *kw);
int al_is_none(const drift_json_value *v);
int al_node_ref(const drift_json_value *v);
int al_get_int(lctx *c, const drift_json_value *v, const char *what, int64_t dflt, int64_t *out);
int al_get_num(lctx *c, const drift_json_value *v, const char *what, double dflt, double *out);
int al_get_ints(lctx *c, const drift_json_value *v, const char *what, int64_t *out, int *n);
int al_get_str(lctx *c, const drift_json_value *v, const char *what, const char *dflt, const char **out);
int al_parse_dtype(const char *s, drift_dtype *dt, int *is_int);
drift_dtype al_complex_part(const char *s);
int al_get_dtype(lctx *c, const drift_json_value *v, const char *what, int *given, drift_dtype *dt, int *is_int);
int al_new_root(lctx *c, int id, aten_view *v);
int al_add_node(lctx *c, drift_node_spec *s, int *id);
int al_mat_view(lctx *c, const aten_view *v, int *id);
int al_mat_fx(lctx *c, int j, int *id);
int al_ref_of(const lctx *c, const drift_json_value *v);
const char *al_val_dtype_str(const aten_node *n);
int al_resolve_alias(const lctx *c, int j, int for_type_as);
int al_tensor_arg(lctx *c, const drift_json_value *v, const char *what, int *fxi);
int al_mat_arg(lctx *c, const drift_json_value *v, const char *what, int *id);
int al_set_result(lctx *c, int id);
int al_set_result_cplx(lctx *c, int id);
int al_set_view(lctx *c, const aten_view *v);
drift_dtype_rule al_rule_of(const char *target);
int al_emit(lctx *c, drift_op_kind k, const drift_op *attrs, int n_in, const int *in, drift_dtype_rule rule,
                int *id);
int al_emit_cast(lctx *c, int x, drift_dtype_rule rule, drift_dtype to, int ref, int *id);
/* A tensor of x's shape and dtype holding value (a FILL like x). */
int al_fill_like(lctx *c, int x, double value, int *id);
/* An int64 iota [n] viewed (nd, shape) with n along dim d (aten_lower_linalg.c). */
int al_iota_along(lctx *c, int64_t n, int nd, int d, int *id);
/* a (sub) b as a bool tensor: DRIFT_OP_BINARY comparison `sub` (aten_lower_linalg.c). */
int al_cmp(lctx *c, int sub, int a, int b, int *id);
int al_emit_view_to(lctx *c, int x, int nd, const int64_t *shape, int *id);
/* A STRIDED gather of drift value x: (nd, shape) at stride from start, contiguous. */
int al_emit_gather(lctx *c, int x, int nd, const int64_t *shape, const int64_t *stride, int64_t start, int *id);
int al_val_shape(lctx *c, const drift_json_value *val, int *nd, int64_t *shape);
int al_get_operand(lctx *c, const drift_json_value *v, const char *what, operand *o);
int al_emit_scalar(lctx *c, int x, int sub, double s, drift_dtype_rule rule);
int al_val_dtype(lctx *c, drift_dtype *dt);

/* ---- torch's strides of a captured tensor (aten_torch_strides.c) ---- */
/* The sizes and strides torch holds FX node j with at the batch lowered now: the sizes are
 * the lowered view's (c->fx[j].t) where its nd is the val's, else the val's shape; the strides
 * are the captured ones (val "stride"; absent: contiguous) at the recorded batch, and while
 * re-batching (c->rb_from, rb_to != rb_from) torch's at the new batch: a reshape-family node's
 * from its input's (torch's computeStride; contiguous where torch copies), another node's
 * recorded dense layout re-derived at its new sizes (aten_torch_strides.c says what is not
 * modelled). Writes *nd (1..DRIFT_MAX_DIMS) and nd entries of the caller's size and stride;
 * 1 when known, 0 when the val has no usable shape (nothing written that counts). Reads c
 * only (nodes lowered so far). The one source of the strides noncontig_nd and
 * al_matmul_layout / al_matmul_folds read. */
int al_torch_strides(const lctx *c, int j, int *nd, int64_t *size, int64_t *stride);

/* ---- torch's operand layout of a matmul (aten_matmul_layout.c) ---- */
/* BMM's DRIFT_BMM_* bits for FX node j as the first (second = 0) or second operand of a matmul
 * whose output has the nbat batch dims bs (0: mm), from torch's strides (al_torch_strides); 0
 * without them.
 * *exact (may be NULL): 1 when the captured strides are exactly those of the dense operand the
 * bits describe (no wider leading dim or batch stride that drift does not carry). */
int al_matmul_layout(const lctx *c, int j, int second, int nbat, const int64_t *bs, int *exact);
/* 1 if torch.matmul folds FX node j ([..., M, K], 3+ dims, times a 2-d operand) into one mm
 * (should_fold), from torch's strides (al_torch_strides); 1 without them (contiguous). */
int al_matmul_folds(const lctx *c, int j);

/* ---- re-batching a static graph (aten_rebatch.c; no-ops unless c->rb_from) ---- */
/* A user input's recorded shape at the new batch (dim 0 when it is the batch). */
void al_rb_input(lctx *c, int nd, int64_t *shape);
/* The current node's output against its 'val': equal except in one dim, the
 * batch, scaled by rb_to / rb_from (that dim tagged), or equal (no batch). */
int al_rb_check(lctx *c, int nd_val, const int64_t *val, int nd, const int64_t *got, int *bax1);
/* The count a nonzero lowered at the current node takes: the re-counted one (c->rb_nz) or recorded. */
int64_t al_rb_nonzero_count(const lctx *c, int64_t recorded);
/* 1 if the current node's result may have a size that follows a re-counted nonzero: it is one
 * (fx ragged) or reads one (aten_rebatch.c). */
int al_rb_ragged(lctx *c);
/* Re-batching from a batch >= 2: an index_select along the dim that holds the batch of FX node x,
 * by an index (FX node ij) without it, picks rows of the recorded batch by their position (a table
 * whose rows are not samples: MiniMax-H3's noise levels per timestep): an error, so that the probe
 * tries that table's input as batch-free. */
int al_rb_index_rows(lctx *c, int x, int d, int ij);
/* A view/reshape size list of FX tensor j rewritten for the new batch. */
void al_rb_reshape(const lctx *c, int j, int nd, int64_t *size);
/* An unflatten of dim d of FX tensor j into parts, rewritten likewise. */
void al_rb_unflatten(const lctx *c, int j, int d, int np, int64_t *parts);
/* An expand size list of FX tensor j: its batch dim kept (-1). */
void al_rb_expand(const lctx *c, int j, int nd, int64_t *size);
/* repeat(x, reps) of a batch-free x whose leading dim is 1, repeated by the recorded batch
 * (LTX-Video's rope grid: grid.unsqueeze(0).repeat(batch_size, 1, ...)): the factor becomes
 * the new batch. */
void al_rb_repeat(const lctx *c, int j, int nr, int64_t *reps);
/* A factory's shape (nd, sh: its 'val'), the leading entry rewritten for the new batch where
 * the probe found it is the batch (c->rb_lead). */
void al_rb_factory(const lctx *c, int nd, int64_t *sh);
/* check_val of an op that gives another number of tensors at the new batch (a split of the batch
 * dim): the error naming it. */
int al_rb_multi_count(lctx *c, int n_val, int n_got);
/* Drift value *x (untagged: 1 if it holds no batch), one operand of a cat
 * along cat_dim whose other operands hold the batch in dim bdim: broadcast
 * from the recorded batch 1 (a node at every batch, so programs match). */
int al_rb_align(lctx *c, int *x, int untagged, int bdim, int cat_dim);

/* The recorded count n of a 1-d boolean mask as int64 indices [n]: NONZERO with the count of
 * the graph's shapes (a dispatch-level trace is specialised to its step); a replayed step
 * whose mask has another count is an error naming both counts (NONZERO's). aten_lower_opset.c. */
int al_mask_indices(lctx *c, int mask, int64_t n, int *idx);

/* ---- a MoE's routed slices (aten_routed_slices.c) ---- */
/* While re-batching, the current node slice(x, 0, *start, *end) where FX node j (x) is an
 * argsort of a router's flattened top-k expert ids (or an elementwise function of it) whose
 * slices tile it one interval per expert (counts burnt in from the host: HiDream's moe_infer):
 * *start, *end become the expert's interval at this batch's counts (re-counted, else the
 * recorded ones scaled); *routed 1, or 2 when the count is not the recorded one (the size
 * follows the data). At the interval's first slice *check is the drift id of a check of the
 * count ([count] column of a NONZERO), else -1. Else *routed 0 and nothing changes. A router
 * whose experts did not all get tokens at the recorded batch is an error naming it. */
int al_routed_slice(lctx *c, int j, int64_t n_now, int64_t *start, int64_t *end, int *routed, int *check);
/* Sets the current node to slice view o, read through the check (so that it runs). */
int al_routed_slice_bind(lctx *c, const aten_view *o, int check);

/* ---- lowerings (aten_lower.c, aten_lower_opset.c): aten_lower_fn each ---- */
int al_lower_repeat_interleave(lctx *c, const char *base, const char *target);
int al_lower_repeat(lctx *c, const char *base, const char *target);
int al_lower_meshgrid(lctx *c, const char *base, const char *target);
int al_lower_outer(lctx *c, const char *base, const char *target);
int al_lower_clamp(lctx *c, const char *base, const char *target);
int al_lower_linspace(lctx *c, const char *base, const char *target);
int al_lower_view_like(lctx *c, const char *base, const char *target);
int al_lower_multi(lctx *c, const char *base, const char *target);
int al_lower_getitem(lctx *c, const char *base, const char *target);
int al_lower_alias(lctx *c, const char *base, const char *target);
int al_lower_copy_of(lctx *c, const char *base, const char *target);
int al_lower_einsum(lctx *c, const char *base, const char *target);
int al_lower_to(lctx *c, const char *base, const char *target);
int al_lower_type_as(lctx *c, const char *base, const char *target);
int al_lower_unary(lctx *c, const char *base, const char *target);
int al_lower_binary(lctx *c, const char *base, const char *target);
int al_lower_rsub(lctx *c, const char *base, const char *target);
int al_lower_pow(lctx *c, const char *base, const char *target);
int al_lower_reduce(lctx *c, const char *base, const char *target);
int al_lower_norm(lctx *c, const char *base, const char *target);
int al_lower_linear(lctx *c, const char *base, const char *target);
int al_lower_sdpa(lctx *c, const char *base, const char *target);
int al_lower_conv(lctx *c, const char *base, const char *target);
int al_lower_vector_norm(lctx *c, const char *base, const char *target);
/* einsum of two operands (aten_lower_opset.c), eq its equation. */
int al_lower_einsum2(lctx *c, const char *eq);
int al_lower_avg_pool(lctx *c, const char *base, const char *target);
/* A 1-d/2-d convolution that is not a patch embedding (aten_lower_opset.c): im2col + BMM. */
int al_lower_conv_im2col(lctx *c, int x, int w, int b, int sp, const int64_t *st, const int64_t *pad,
                         const int64_t *dil, int64_t groups);
int al_lower_fill(lctx *c, const char *base, const char *target);
int al_lower_copy_(lctx *c, const char *base, const char *target);

int al_lower_nothing(lctx *c, const char *base, const char *target);
int al_lower_view_as_complex(lctx *c, const char *base, const char *target);
int al_lower_view_as_real(lctx *c, const char *base, const char *target);
int al_lower_cat(lctx *c, const char *base, const char *target);
int al_lower_mul(lctx *c, const char *base, const char *target);
int al_lower_dropout(lctx *c, const char *base, const char *target);
int al_lower_tuple(lctx *c, const char *base, const char *target);
int al_lower_constant(lctx *c, const char *base, const char *target);
int al_lower_copy_out(lctx *c, const char *base, const char *target);
int al_lower_unary_ext(lctx *c, const char *base, const char *target);
int al_lower_binary_ext(lctx *c, const char *base, const char *target);
int al_lower_where(lctx *c, const char *base, const char *target);
int al_lower_masked_fill(lctx *c, const char *base, const char *target);
int al_lower_reduce_ext(lctx *c, const char *base, const char *target);
int al_lower_cumsum(lctx *c, const char *base, const char *target);
int al_lower_softmax(lctx *c, const char *base, const char *target);
int al_lower_argsort(lctx *c, const char *base, const char *target);
int al_lower_topk(lctx *c, const char *base, const char *target);
int al_lower_matmul(lctx *c, const char *base, const char *target);
int al_lower_group_norm(lctx *c, const char *base, const char *target);
int al_lower_index_select(lctx *c, const char *base, const char *target);
int al_lower_index(lctx *c, const char *base, const char *target);
int al_lower_gather(lctx *c, const char *base, const char *target);
int al_lower_index_put(lctx *c, const char *base, const char *target);
int al_lower_index_copy(lctx *c, const char *base, const char *target);
int al_lower_scatter(lctx *c, const char *base, const char *target);
int al_lower_nonzero(lctx *c, const char *base, const char *target);
int al_lower_fill_value(lctx *c, const char *base, const char *target);
int al_lower_nonzero_numpy(lctx *c, const char *base, const char *target);
int al_lower_pad(lctx *c, const char *base, const char *target);
int al_lower_inplace(lctx *c, const char *base, const char *target);
int al_lower_polar(lctx *c, const char *base, const char *target);
int al_lower_native_group_norm(lctx *c, const char *base, const char *target);
/* aten_lower_linalg.c */
int al_lower_linalg_qr(lctx *c, const char *base, const char *target);
int al_lower_diag_embed(lctx *c, const char *base, const char *target);
/* convolution(..., transposed=True) of drift values x, w, bias b (-1: none) over sp dims. */
int al_lower_conv_transposed(lctx *c, int x, int w, int b, int sp);

#endif
