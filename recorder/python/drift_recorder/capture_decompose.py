"""The closed opset: which ops of a captured graph stay whole, and torch's own
decomposition of the others (docs/aten-graph.md "The opset").

An exported (pre-dispatch) graph holds the ops the model code called. drift's
importer runs a closed set of them: the rows of its op registry, listed in
opset.txt beside this file (generated from replay/capture/aten_registry.c;
tests/replay/test_aten_registry.c keeps the two equal). Every other op that
eager PyTorch runs as a composite (a CompositeImplicitAutograd kernel: it
has no kernel of its own, it calls other ops) is replaced here by what that
composite calls, traced with torch's own dispatcher on meta tensors: the same
ops eager runs, so the decomposition cannot change what eager computes. An
op with a kernel of its own that drift does not know stays whole, and drift
names it (every such op at once) instead of approximating it.

Autocast: an op on autocast's lists (linear, matmul, softmax, ...) is cast at
its own boundary, before its composite runs (the composite's inner ops are not
cast again). The decomposed nodes therefore carry "decomposed_from" (the
original op and node): the importer applies the original op's autocast rule
to the group's inputs and plain type promotion inside it. The trace itself
runs on inputs cast as autocast would cast them at the boundary, so the
composite takes the branches the run took.

    nodes = decompose(node, region, keep)   # [(name, target, args, kwargs, val)] or None

Never raises: an op whose composite cannot be traced stays whole.
"""
import os

OPSET_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "opset.txt")

# autocast's CUDA op lists (torch/csrc/autograd/autocast_mode.cpp), by ATen base name:
# the ops autocast runs in the lower precision, and those it runs in fp32
AUTOCAST_LOWER = {"_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
                  "conv_transpose3d", "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm",
                  "mv", "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
                  "_scaled_dot_product_flash_attention", "scaled_dot_product_attention"}
AUTOCAST_FP32 = {"acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal",
                 "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "group_norm",
                 "frobenius_norm", "nuclear_norm", "cosine_similarity", "dist", "pdist", "cdist", "renorm",
                 "logsumexp", "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
                 "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
                 "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa", "upsample_trilinear3d",
                 "upsample_bicubic2d", "_upsample_bicubic2d_aa", "prod", "softmax", "log_softmax", "cumprod",
                 "cumsum", "linalg_vector_norm", "linalg_matrix_norm", "sum", "norm"}

_keep_cache = None


def opset():
    """The set of op names ("aten.linear.default", ...) drift's importer runs
    whole (opset.txt; empty when the file is missing)."""
    global _keep_cache
    if _keep_cache is None:
        names = set()
        try:
            with open(OPSET_FILE) as f:
                for line in f:
                    line = line.split("#", 1)[0].strip()
                    if line:
                        names.add(line)
        except OSError:
            pass
        _keep_cache = names
    return _keep_cache


def base_name(target):
    """aten.softmax.int -> softmax."""
    parts = str(target).split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "aten" else parts[0]


def is_composite(op):
    """True if op (an OpOverload) has a CompositeImplicitAutograd kernel: eager
    runs it as the ops its composite calls."""
    try:
        import torch
        return bool(op.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd))
    except Exception:  # noqa: BLE001
        return False


def wants_decomposition(op, keep=None):
    """True if op is an ATen OpOverload outside drift's opset whose eager
    kernel is a composite."""
    try:
        import torch
        if not isinstance(op, torch._ops.OpOverload):
            return False
    except Exception:  # noqa: BLE001
        return False
    name = str(op)
    if not name.startswith("aten."):
        return False
    keep = keep if keep is not None else opset()
    if name in keep or "aten." + base_name(name) in keep:  # an entry without overload keeps them all
        return False
    return is_composite(op)


def _boundary_dtype(base, val_dtype, region):
    """The dtype autocast hands op `base` a floating input of val_dtype in, or
    val_dtype itself. region: the autocast dtype in force at the node, or None."""
    import torch

    if region is None or not val_dtype.is_floating_point or val_dtype == torch.float64:
        return val_dtype
    if base in AUTOCAST_LOWER:
        return region
    if base in AUTOCAST_FP32:
        return torch.float32
    return val_dtype


def trace(node, region=None):
    """torch.fx.GraphModule of node's op applied to meta tensors shaped like
    its inputs (cast as autocast would at the boundary), and the list of input
    nodes in placeholder order; None when it cannot be traced."""
    try:
        import torch
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch.fx.node import map_arg
    except Exception:  # noqa: BLE001
        return None
    ins = []

    def collect(n):
        if n not in ins:
            ins.append(n)
        return n

    try:
        map_arg((node.args, node.kwargs), collect)
        metas = []
        base = base_name(node.target)
        for n in ins:
            v = n.meta.get("val")
            if not isinstance(v, torch.Tensor):
                return None  # a symbolic size or a non-tensor value: left whole
            dt = _boundary_dtype(base, v.dtype, region)
            metas.append(torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=dt, device="meta"))
        pos = {n: i for i, n in enumerate(ins)}
        op = node.target

        def fn(*xs):
            a, k = map_arg((node.args, node.kwargs), lambda n: xs[pos[n]])
            return op(*a, **k)

        with torch.no_grad():
            gm = make_fx(fn, tracing_mode="real")(*metas)
        return gm, ins
    except Exception:  # noqa: BLE001 - left whole: the importer names it if it cannot run it
        return None
