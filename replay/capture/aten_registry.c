/* The op registry: one row per ATen op (by name, every overload) that the
 * importer lowers, with where its kernels run. Adding an op is adding a row
 * here, its lowering, a parity case and its line in docs/aten-graph.md ("The
 * opset"; tests/capture/test_aten_registry.c keeps the two equal). Targets
 * outside the "aten." namespace are named in full (getitem, drift.tuple). */
#include <string.h>

#include "replay/capture/aten_lower_internal.h"

#define RCC "ref cpu cuda"
#define RCH "ref cpu cuda(host)" /* cuda runs the cpu body on the host until it has a kernel */

static const aten_op_row k_rows[] = {
    /* structure: tuples, assertions, regions */
    {"getitem", al_lower_getitem, RCC, "an element of a tuple (a view)"},
    {"drift.tuple", al_lower_tuple, RCC, "the outputs of an inlined region or decomposition (views)"},
    {"drift.constant", al_lower_constant, RCC, "an inline constant of a decomposition (a fill)"},
    {"_assert_tensor_metadata", al_lower_nothing, RCC, "no value"},
    {"_assert_scalar", al_lower_nothing, RCC, "no value"},
    {"sym_constrain_range_for_size", al_lower_nothing, RCC, "no value"},
    /* views and aliases (no kernel: a strided view of a root, docs/aten-graph.md) */
    {"view", al_lower_view_like, RCC, "view"},
    {"reshape", al_lower_view_like, RCC, "view, or a copy when not viewable"},
    {"_unsafe_view", al_lower_view_like, RCC, "view"},
    {"flatten", al_lower_view_like, RCC, "view"},
    {"unflatten", al_lower_view_like, RCC, "view"},
    {"unsqueeze", al_lower_view_like, RCC, "view"},
    {"squeeze", al_lower_view_like, RCC, "view"},
    {"permute", al_lower_view_like, RCC, "view"},
    {"transpose", al_lower_view_like, RCC, "view"},
    {"swapaxes", al_lower_view_like, RCC, "view"},
    {"expand", al_lower_view_like, RCC, "view (stride 0)"},
    {"slice", al_lower_view_like, RCC, "view"},
    {"select", al_lower_view_like, RCC, "view"},
    {"split_with_sizes", al_lower_multi, RCC, "views"},
    {"split", al_lower_multi, RCC, "views"},
    {"chunk", al_lower_multi, RCC, "views"},
    {"unbind", al_lower_multi, RCC, "views"},
    {"alias", al_lower_alias, RCC, "the same view"},
    {"detach", al_lower_alias, RCC, "the same view"},
    {"detach_", al_lower_alias, RCC, "the same view"},
    {"lift_fresh_copy", al_lower_alias, RCC, "the same view"},
    {"dropout", al_lower_dropout, RCC, "the same view (eval, or p = 0)"},
    {"view_as_complex", al_lower_view_as_complex, RCC, "view over (re, im) pairs"},
    {"view_as_real", al_lower_view_as_real, RCC, "view"},
    {"polar", al_lower_polar, RCH, "abs * (cos, sin) as (re, im) pairs"},
    {"einsum", al_lower_einsum, RCC, "one operand: a permutation (view); two: permutes + BMM ('...' as letters)"},
    /* copies and casts */
    {"clone", al_lower_copy_of, RCC, "STRIDED/VIEW materialisation"},
    {"contiguous", al_lower_copy_of, RCC, "STRIDED/VIEW materialisation"},
    {"to", al_lower_to, RCC, "CAST (integer targets: truncation, exact; complex64 <-> complex128: the pairs)"},
    {"_to_copy", al_lower_to, RCC, "CAST"},
    {"type_as", al_lower_type_as, RCC, "CAST"},
    {"copy_", al_lower_copy_, RCC, "SCATTER into the root (functionalized; complex: the pairs)"},
    {"copy", al_lower_copy_out, RCC, "SCATTER into a copy"},
    /* elementwise */
    {"neg", al_lower_unary, RCC, "UNARY"},
    {"exp", al_lower_unary, RCC, "UNARY"},
    {"sin", al_lower_unary, RCC, "UNARY"},
    {"cos", al_lower_unary, RCC, "UNARY"},
    {"rsqrt", al_lower_unary, RCC, "UNARY"},
    {"sqrt", al_lower_unary, RCC, "UNARY"},
    {"tanh", al_lower_unary, RCC, "UNARY"},
    {"sigmoid", al_lower_unary, RCC, "UNARY"},
    {"reciprocal", al_lower_unary, RCC, "UNARY"},
    {"abs", al_lower_unary, RCC, "UNARY"},
    {"relu", al_lower_unary, RCC, "UNARY"},
    {"silu", al_lower_unary, RCC, "SILU"},
    {"gelu", al_lower_unary, RCC, "GELU_TANH / UNARY gelu_erf"},
    {"log", al_lower_unary_ext, RCH, "UNARY"},
    {"log1p", al_lower_unary_ext, RCH, "UNARY"},
    {"expm1", al_lower_unary_ext, RCH, "UNARY"},
    {"log2", al_lower_unary_ext, RCH, "UNARY"},
    {"log10", al_lower_unary_ext, RCH, "UNARY"},
    {"erf", al_lower_unary_ext, RCH, "UNARY"},
    {"floor", al_lower_unary_ext, RCH, "UNARY"},
    {"ceil", al_lower_unary_ext, RCH, "UNARY"},
    {"round", al_lower_unary_ext, RCH, "UNARY (half to even)"},
    {"trunc", al_lower_unary_ext, RCH, "UNARY"},
    {"sign", al_lower_unary_ext, RCH, "UNARY"},
    {"tan", al_lower_unary_ext, RCH, "UNARY"},
    {"asin", al_lower_unary_ext, RCH, "UNARY"},
    {"acos", al_lower_unary_ext, RCH, "UNARY"},
    {"atan", al_lower_unary_ext, RCH, "UNARY"},
    {"sinh", al_lower_unary_ext, RCH, "UNARY"},
    {"cosh", al_lower_unary_ext, RCH, "UNARY"},
    {"exp2", al_lower_unary_ext, RCH, "UNARY"},
    {"isnan", al_lower_unary_ext, RCH, "UNARY -> bool"},
    {"isinf", al_lower_unary_ext, RCH, "UNARY -> bool"},
    {"isfinite", al_lower_unary_ext, RCH, "UNARY -> bool"},
    {"logical_not", al_lower_unary_ext, RCH, "UNARY -> bool"},
    {"bitwise_not", al_lower_unary_ext, RCH, "UNARY (integers; bool: logical not)"},
    {"softplus", al_lower_unary_ext, RCH, "UNARY (beta, threshold)"},
    {"hardsigmoid", al_lower_unary_ext, RCH, "UNARY"},
    {"hardswish", al_lower_unary_ext, RCH, "UNARY"},
    {"mish", al_lower_unary_ext, RCH, "UNARY"},
    {"elu", al_lower_unary_ext, RCH, "UNARY (alpha)"},
    {"leaky_relu", al_lower_unary_ext, RCH, "UNARY (slope)"},
    {"square", al_lower_unary_ext, RCH, "UNARY"},
    {"frac", al_lower_unary_ext, RCH, "UNARY"},
    {"add", al_lower_binary, RCC, "ADD / SCALAR add (alpha: SCALAR mul first)"},
    {"sub", al_lower_binary, RCC, "SUB / SCALAR sub, rsub (alpha: SCALAR mul first)"},
    {"mul", al_lower_mul, RCC, "MUL / SCALAR mul; complex: the complex product"},
    {"div", al_lower_binary, RCC, "DIV / SCALAR div; rounding modes: BINARY floordiv, truncdiv"},
    {"rsub", al_lower_rsub, RCC, "SCALAR rsub; a tensor other: SUB (alpha: SCALAR mul first)"},
    {"pow", al_lower_pow, RCC, "SCALAR pow, rpow; two tensors: BINARY pow"},
    {"clamp", al_lower_clamp, RCC, "SCALAR max/min; tensor bounds: BINARY max/min"},
    {"clip", al_lower_clamp, RCC, "SCALAR max/min; tensor bounds: BINARY max/min"},
    {"clamp_min", al_lower_clamp, RCC, "SCALAR max"},
    {"clamp_max", al_lower_clamp, RCC, "SCALAR min"},
    {"maximum", al_lower_binary_ext, RCH, "BINARY max"},
    {"minimum", al_lower_binary_ext, RCH, "BINARY min"},
    {"fmax", al_lower_binary_ext, RCH, "BINARY max, a NaN operand ignored (WHERE of UNARY isnan)"},
    {"fmin", al_lower_binary_ext, RCH, "BINARY min, a NaN operand ignored (WHERE of UNARY isnan)"},
    {"atan2", al_lower_binary_ext, RCH, "BINARY atan2"},
    {"remainder", al_lower_binary_ext, RCH, "BINARY rem"},
    {"fmod", al_lower_binary_ext, RCH, "BINARY fmod"},
    {"floor_divide", al_lower_binary_ext, RCH, "BINARY floordiv"},
    {"bitwise_and", al_lower_binary_ext, RCH, "BINARY (integers, bool)"},
    {"bitwise_or", al_lower_binary_ext, RCH, "BINARY (integers, bool)"},
    {"bitwise_xor", al_lower_binary_ext, RCH, "BINARY (integers, bool)"},
    {"logical_and", al_lower_binary_ext, RCH, "BINARY -> bool"},
    {"logical_or", al_lower_binary_ext, RCH, "BINARY -> bool"},
    {"logical_xor", al_lower_binary_ext, RCH, "BINARY -> bool"},
    {"eq", al_lower_binary_ext, RCH, "BINARY -> bool"},
    {"ne", al_lower_binary_ext, RCH, "BINARY -> bool"},
    {"lt", al_lower_binary_ext, RCH, "BINARY -> bool"},
    {"le", al_lower_binary_ext, RCH, "BINARY -> bool"},
    {"gt", al_lower_binary_ext, RCH, "BINARY -> bool"},
    {"ge", al_lower_binary_ext, RCH, "BINARY -> bool"},
    {"where", al_lower_where, RCH, "WHERE"},
    {"masked_fill", al_lower_masked_fill, RCH, "WHERE over a fill"},
    {"outer", al_lower_outer, RCC, "MUL of two views"},
    /* reductions */
    {"sum", al_lower_reduce, RCC, "REDUCE sum (any dims: those apart gathered last first)"},
    {"mean", al_lower_reduce, RCC, "REDUCE mean (any dims: those apart gathered last first)"},
    {"prod", al_lower_reduce_ext, RCH, "REDUCE prod"},
    {"amax", al_lower_reduce_ext, RCH, "REDUCE amax"},
    {"amin", al_lower_reduce_ext, RCH, "REDUCE amin"},
    {"any", al_lower_reduce_ext, RCH, "REDUCE any -> bool"},
    {"all", al_lower_reduce_ext, RCH, "REDUCE all -> bool"},
    {"argmax", al_lower_reduce_ext, RCH, "REDUCE argmax -> int64"},
    {"argmin", al_lower_reduce_ext, RCH, "REDUCE argmin -> int64"},
    {"var", al_lower_reduce_ext, RCH, "REDUCE var (correction)"},
    {"cumsum", al_lower_cumsum, RCH, "CUMSUM"},
    {"linalg_vector_norm", al_lower_vector_norm, RCC, "MUL + REDUCE sum + UNARY sqrt (ord 2; dtype: CAST first)"},
    {"avg_pool1d", al_lower_avg_pool, RCC, "view + REDUCE mean (stride == kernel, no padding)"},
    {"avg_pool2d", al_lower_avg_pool, RCC, "view + REDUCE mean (stride == kernel, no padding)"},
    {"avg_pool3d", al_lower_avg_pool, RCC, "view + REDUCE mean (stride == kernel, no padding)"},
    {"cumprod", al_lower_cumsum, RCH, "CUMSUM (product)"},
    {"softmax", al_lower_softmax, RCH, "SOFTMAX"},
    {"_softmax", al_lower_softmax, RCH, "SOFTMAX"},
    {"log_softmax", al_lower_softmax, RCH, "SOFTMAX (log)"},
    {"_log_softmax", al_lower_softmax, RCH, "SOFTMAX (log)"},
    {"argsort", al_lower_argsort, RCH, "ARGSORT (stable)"},
    {"topk", al_lower_topk, RCH, "ARGSORT (stable; NaN largest) + the first k indices (STRIDED) + TAKE of the values"},
    {"sort", al_lower_topk, RCH, "ARGSORT (stable; NaN largest) + TAKE of the values"},
    /* indexing */
    {"embedding", al_lower_index_select, RCH, "TAKE of rows"},
    {"index_select", al_lower_index_select, RCH, "TAKE along a dim"},
    {"index", al_lower_index, RCH, "TAKE (one integer index tensor, or a 1-d boolean mask: NONZERO with the recorded count)"},
    {"gather", al_lower_gather, RCH, "TAKE with coordinates"},
    {"index_put", al_lower_index_put, RCH, "PUT (one integer index tensor, negatives from the end, or a 1-d boolean mask: NONZERO with the recorded count)"},
    {"index_put_", al_lower_index_put, RCH, "PUT (functionalized)"},
    {"index_copy", al_lower_index_copy, RCH, "PUT along a dim"},
    {"index_add", al_lower_index_copy, RCH, "PUT accumulate along a dim (alpha: SCALAR mul first)"},
    {"scatter", al_lower_scatter, RCH, "PUT with coordinates (reduce='add' / 'multiply': accumulating / multiplying)"},
    {"scatter_add", al_lower_scatter, RCH, "PUT accumulate with coordinates"},
    {"nonzero", al_lower_nonzero, RCH, "NONZERO (the recorded count)"},
    {"nonzero_numpy", al_lower_nonzero_numpy, RCH, "NONZERO (the recorded count), one STRIDED column per dim"},
    {"scatter_reduce", al_lower_scatter, RCH, "PUT accumulate / amax / amin / prod with coordinates; mean: sum / count (include_self=False: the identity PUT first)"},
    {"constant_pad_nd", al_lower_pad, RCH, "FILL + SCATTER"},
    {"pad", al_lower_pad, RCH, "FILL + SCATTER (mode constant); replicate, reflect, circular: STRIDED slices + CONCAT"},
    {"repeat", al_lower_repeat, RCC, "views + materialisation"},
    {"repeat_interleave", al_lower_repeat_interleave, RCC, "views (integer repeats)"},
    {"meshgrid", al_lower_meshgrid, RCC, "views"},
    /* matmuls, norms, attention, convolution: whole, as eager runs them */
    {"linear", al_lower_linear, RCC, "LINEAR (cuBLASLt under the torch profile)"},
    {"bmm", al_lower_matmul, RCH, "BMM"},
    {"mm", al_lower_matmul, RCH, "BMM"},
    {"matmul", al_lower_matmul, RCH, "BMM (batch folded where torch folds it)"},
    {"baddbmm", al_lower_matmul, RCH, "BMM with C (beta, alpha)"},
    {"addmm", al_lower_matmul, RCH, "BMM with C (beta, alpha)"},
    {"layer_norm", al_lower_norm, RCC, "LAYER_NORM"},
    {"rms_norm", al_lower_norm, RCC, "RMS_NORM"},
    {"group_norm", al_lower_group_norm, RCH, "GROUP_NORM"},
    {"native_group_norm", al_lower_native_group_norm, RCH, "GROUP_NORM (the mean and rstd outputs unused)"},
    {"linalg_qr", al_lower_linalg_qr, RCH, "Householder QR (LAPACK geqrf/orgqr signs) unrolled over the columns: elementwise ops, WHERE, column sums (2-d; reduced or complete)"},
    {"diag_embed", al_lower_diag_embed, RCC, "FILL + SCATTER onto the diagonal (last two dims)"},
    {"scaled_dot_product_attention", al_lower_sdpa, RCC, "ATTENTION; attn_mask / is_causal: its fp32 additive bias (in3); enable_gqa: kv heads repeated (STRIDED)"},
    {"conv1d", al_lower_conv, RCC, "PATCHIFY + LINEAR (stride == kernel); else im2col STRIDED + BMM (any stride, padding, dilation, groups)"},
    {"conv2d", al_lower_conv, RCC, "PATCHIFY + LINEAR (stride == kernel); else im2col STRIDED + BMM (any stride, padding, dilation, groups)"},
    {"conv3d", al_lower_conv, RCC, "PATCHIFY + LINEAR (stride == kernel)"},
    {"convolution", al_lower_conv, RCC, "PATCHIFY + LINEAR (stride == kernel); 1-d/2-d else im2col STRIDED + BMM; transposed with stride == kernel: LINEAR + STRIDED + bias ADD"},
    /* creation, concatenation */
    {"arange", al_lower_fill, RCC, "FILL iota"},
    {"linspace", al_lower_linspace, RCC, "FILL linspace"},
    {"empty_like", al_lower_fill, RCC, "FILL"},
    {"zeros_like", al_lower_fill, RCC, "FILL"},
    {"ones_like", al_lower_fill, RCC, "FILL"},
    {"full_like", al_lower_fill, RCC, "FILL"},
    {"new_zeros", al_lower_fill, RCC, "FILL"},
    {"new_ones", al_lower_fill, RCC, "FILL"},
    {"new_full", al_lower_fill, RCC, "FILL"},
    {"new_empty", al_lower_fill, RCC, "FILL"},
    {"zeros", al_lower_fill, RCC, "FILL"},
    {"ones", al_lower_fill, RCC, "FILL"},
    {"full", al_lower_fill, RCC, "FILL; complex: (value, 0) pairs"},
    {"empty", al_lower_fill, RCC, "FILL"},
    {"scalar_tensor", al_lower_fill, RCC, "FILL"},
    {"fill", al_lower_fill_value, RCC, "FILL like self (Scalar); a 0-d tensor's value broadcast and cast (Tensor)"},
    {"cat", al_lower_cat, RCC, "CONCAT"},
    {"stack", al_lower_cat, RCC, "CONCAT of unsqueezed views"},
};

const aten_op_row *aten_registry_rows(int *n) {
    *n = (int)(sizeof k_rows / sizeof k_rows[0]);
    return k_rows;
}

static const aten_op_row k_inplace = {"X_", al_lower_inplace, RCC, "the functional X, written into self"};

const aten_op_row *aten_registry_find(const char *target) {
    char base[96];
    const int aten = !strncmp(target, "aten.", 5);
    const char *key = aten ? drift_aten_op_base(target, base, sizeof base) : target;
    for (size_t i = 0; i < sizeof k_rows / sizeof k_rows[0]; i++) {
        /* rows of other namespaces (getitem, drift.*) match only their full name */
        const int other = strchr(k_rows[i].base, '.') || !strcmp(k_rows[i].base, "getitem");
        if (other == !aten && !strcmp(k_rows[i].base, key)) return &k_rows[i];
    }
    size_t n = strlen(key);
    if (key == base && n > 1 && key[n - 1] == '_') { /* an in-place variant of a row */
        base[n - 1] = 0;
        for (size_t i = 0; i < sizeof k_rows / sizeof k_rows[0]; i++)
            if (!strcmp(k_rows[i].base, base)) return &k_inplace;
    }
    return NULL;
}
