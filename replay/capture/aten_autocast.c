/* PyTorch's CUDA autocast op lists at the ATen level (docs/autocast.md):
 * which ops run in the autocast dtype, which in fp32, which promote to the
 * widest input. Facts from torch's autocast documentation; the table is
 * checked against docs/autocast.md by tests/replay/test_aten_import.c. */
#include <string.h>

#include "replay/capture/aten_graph.h"

typedef struct entry {
    const char *op;
    drift_aten_cast_class cls;
} entry;

static const entry k_table[] = {
    /* lower precision (fp16 / bf16) */
    {"addbmm", DRIFT_ATEN_CAST_LOWER}, {"addmm", DRIFT_ATEN_CAST_LOWER}, {"addmv", DRIFT_ATEN_CAST_LOWER},
    {"addr", DRIFT_ATEN_CAST_LOWER}, {"baddbmm", DRIFT_ATEN_CAST_LOWER}, {"bmm", DRIFT_ATEN_CAST_LOWER},
    {"chain_matmul", DRIFT_ATEN_CAST_LOWER}, {"linalg_multi_dot", DRIFT_ATEN_CAST_LOWER},
    {"conv1d", DRIFT_ATEN_CAST_LOWER}, {"conv2d", DRIFT_ATEN_CAST_LOWER}, {"conv3d", DRIFT_ATEN_CAST_LOWER},
    {"conv_transpose1d", DRIFT_ATEN_CAST_LOWER}, {"conv_transpose2d", DRIFT_ATEN_CAST_LOWER},
    {"conv_transpose3d", DRIFT_ATEN_CAST_LOWER}, {"convolution", DRIFT_ATEN_CAST_LOWER},
    {"einsum", DRIFT_ATEN_CAST_LOWER}, {"linear", DRIFT_ATEN_CAST_LOWER}, {"matmul", DRIFT_ATEN_CAST_LOWER},
    {"mm", DRIFT_ATEN_CAST_LOWER}, {"mv", DRIFT_ATEN_CAST_LOWER}, {"prelu", DRIFT_ATEN_CAST_LOWER},
    {"scaled_dot_product_attention", DRIFT_ATEN_CAST_LOWER},
    /* fp32 */
    {"acos", DRIFT_ATEN_CAST_FP32}, {"asin", DRIFT_ATEN_CAST_FP32}, {"cosh", DRIFT_ATEN_CAST_FP32},
    {"erfinv", DRIFT_ATEN_CAST_FP32}, {"exp", DRIFT_ATEN_CAST_FP32}, {"expm1", DRIFT_ATEN_CAST_FP32},
    {"log", DRIFT_ATEN_CAST_FP32}, {"log10", DRIFT_ATEN_CAST_FP32}, {"log2", DRIFT_ATEN_CAST_FP32},
    {"log1p", DRIFT_ATEN_CAST_FP32}, {"reciprocal", DRIFT_ATEN_CAST_FP32}, {"rsqrt", DRIFT_ATEN_CAST_FP32},
    {"sinh", DRIFT_ATEN_CAST_FP32}, {"tan", DRIFT_ATEN_CAST_FP32}, {"pow", DRIFT_ATEN_CAST_FP32},
    {"softplus", DRIFT_ATEN_CAST_FP32}, {"layer_norm", DRIFT_ATEN_CAST_FP32},
    {"native_layer_norm", DRIFT_ATEN_CAST_FP32}, {"group_norm", DRIFT_ATEN_CAST_FP32},
    {"frobenius_norm", DRIFT_ATEN_CAST_FP32}, {"nuclear_norm", DRIFT_ATEN_CAST_FP32},
    {"cosine_similarity", DRIFT_ATEN_CAST_FP32}, {"cdist", DRIFT_ATEN_CAST_FP32}, {"pdist", DRIFT_ATEN_CAST_FP32},
    {"dist", DRIFT_ATEN_CAST_FP32}, {"renorm", DRIFT_ATEN_CAST_FP32}, {"logsumexp", DRIFT_ATEN_CAST_FP32},
    {"prod", DRIFT_ATEN_CAST_FP32}, {"softmax", DRIFT_ATEN_CAST_FP32}, {"log_softmax", DRIFT_ATEN_CAST_FP32},
    {"cumprod", DRIFT_ATEN_CAST_FP32}, {"cumsum", DRIFT_ATEN_CAST_FP32}, {"sum", DRIFT_ATEN_CAST_FP32},
    {"norm", DRIFT_ATEN_CAST_FP32}, {"linalg_vector_norm", DRIFT_ATEN_CAST_FP32},
    {"binary_cross_entropy_with_logits", DRIFT_ATEN_CAST_FP32}, {"mse_loss", DRIFT_ATEN_CAST_FP32},
    {"l1_loss", DRIFT_ATEN_CAST_FP32}, {"smooth_l1_loss", DRIFT_ATEN_CAST_FP32}, {"kl_div", DRIFT_ATEN_CAST_FP32},
    {"nll_loss", DRIFT_ATEN_CAST_FP32},
    /* widest input type */
    {"addcdiv", DRIFT_ATEN_CAST_PROMOTE}, {"addcmul", DRIFT_ATEN_CAST_PROMOTE}, {"atan2", DRIFT_ATEN_CAST_PROMOTE},
    {"bilinear", DRIFT_ATEN_CAST_PROMOTE}, {"cross", DRIFT_ATEN_CAST_PROMOTE}, {"dot", DRIFT_ATEN_CAST_PROMOTE},
    {"grid_sampler", DRIFT_ATEN_CAST_PROMOTE}, {"index_put", DRIFT_ATEN_CAST_PROMOTE},
    {"scatter_add", DRIFT_ATEN_CAST_PROMOTE}, {"tensordot", DRIFT_ATEN_CAST_PROMOTE}, {"cat", DRIFT_ATEN_CAST_PROMOTE},
    {"stack", DRIFT_ATEN_CAST_PROMOTE},
};

drift_aten_cast_class drift_aten_autocast_class(const char *op) {
    for (size_t i = 0; op && i < sizeof k_table / sizeof k_table[0]; i++)
        if (strcmp(op, k_table[i].op) == 0) return k_table[i].cls;
    return DRIFT_ATEN_CAST_NONE;
}

const char *drift_aten_autocast_entry(int i, drift_aten_cast_class *cls) {
    if (i < 0 || (size_t)i >= sizeof k_table / sizeof k_table[0]) return NULL;
    if (cls) *cls = k_table[i].cls;
    return k_table[i].op;
}

const char *drift_aten_op_base(const char *target, char *buf, size_t bufsz) {
    if (!buf || !bufsz) return "";
    buf[0] = 0;
    if (!target) return buf;
    const char *s = strncmp(target, "aten.", 5) == 0 ? target + 5 : target;
    size_t n = strcspn(s, ".");
    if (n >= bufsz) n = bufsz - 1;
    memcpy(buf, s, n);
    buf[n] = 0;
    return buf;
}
