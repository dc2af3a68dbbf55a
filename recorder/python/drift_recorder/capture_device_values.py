"""Device values: what the recording's GPU computed from constants alone.

A captured graph builds some tables from nothing but constants: LTX-2's and
Flux's RoPE frequencies (`theta ** linspace(...)`, then cos/sin of the
position grid), the timestep frequencies `exp(-log(10000) * arange / half)`.
torch computes them on the GPU with CUDA's pow/exp/sin/cos, which differ
from the host's libm (and from a correctly rounded result) in one ULP for a
few to a third of the arguments (tests/gpu/math_probe.py); a --device cpu
replay that rebuilds them with libm starts from other tables, the same
drift DESIGN.md s1 describes for a RoPE table built on the CPU on one side
and on the GPU on the other.

So the recorder evaluates the graph's constant-only nodes (those computed
from literals and the model code's lifted torch.tensor constants) once, on
the recording device under the run's autocast, and stores the float32 values at
the frontier (constant-only nodes read by a node that is not) whose
subgraph contains a transcendental op, as /buffers "device:NODE"; the
document lists them in "device_values" (docs/aten-graph.md). The importer
reads those nodes as buffer leaves (DRIFT_DEVICE_VALUES=0 computes them).

    values = device_values(ep, device, autocast, leaves)   # [(node name, tensor)]

Never raises: a node that cannot be evaluated is left to be computed.
"""
import operator

# ops whose CUDA results may differ from the host's (ATen base names)
TRANSCENDENTAL = {"pow", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan",
                  "sinh", "cosh", "tanh", "sigmoid", "erf", "erfc", "rsqrt", "sqrt", "reciprocal",
                  "atan", "atan2", "asin", "acos", "polar", "softmax", "_softmax", "logsumexp"}
# never constant: no values (empty), random, plan-dependent (autocast-lowered GEMMs)
NOT_CONSTANT = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "rand", "randn",
                "rand_like", "randn_like", "randint", "normal", "bernoulli", "dropout", "native_dropout",
                "linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "conv1d", "conv2d", "conv3d",
                "convolution", "scaled_dot_product_attention", "einsum", "_assert_tensor_metadata"}
MAX_ELEMENTS = 1 << 24  # per value: larger frontier tables are computed by the replay


# ops whose result shares its first argument's storage
VIEWS = {"view", "slice", "select", "unsqueeze", "squeeze", "permute", "transpose", "expand", "reshape",
         "flatten", "unflatten", "alias", "as_strided", "narrow", "t", "unbind", "split", "chunk", "getitem",
         "view_as_real", "view_as_complex", "diagonal", "unfold", "detach", "movedim", "split_with_sizes"}


def _base(target):
    """aten.pow.Scalar -> pow; getitem -> getitem."""
    if target is operator.getitem:
        return "getitem"
    parts = str(target).split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "aten" else parts[0]


def _is_node(a):
    """An fx Node (duck-typed: the logic below is tested without torch)."""
    return hasattr(a, "op") and hasattr(a, "users") and hasattr(a, "target") and hasattr(a, "args")


def _refs(a, out):
    if _is_node(a):
        out.append(a)
    elif isinstance(a, (list, tuple)):
        for x in a:
            _refs(x, out)
    elif isinstance(a, dict):
        for x in a.values():
            _refs(x, out)
    return out


def _inplace(n):
    b = _base(n.target)
    return b.endswith("_") and b != "detach_"


def _view_bases(n):
    """n and every tensor n is a view of (through VIEWS ops)."""
    out, todo = set(), [n]
    while todo:
        r = todo.pop()
        if r in out:
            continue
        out.add(r)
        if r.op == "call_function" and _base(r.target) in VIEWS and r.args:
            todo += _refs(r.args[0], [])
    return out


def _written_by(op):
    """The nodes an in-place op writes: its first argument and its view bases."""
    out = set()
    for r in _refs(op.args[0], []):
        out |= _view_bases(r)
    return out


def constant_only(graph, leaves=()):
    """{node: has_transcendental} for the nodes of graph computed from
    constants alone: call nodes with no placeholder upstream other than the
    lifted tensor constants named in leaves (constant leaves themselves), no
    op of NOT_CONSTANT. In-place ops count when all their inputs do (the
    model code's `coords[:, 0] = coords[:, 0] / fps` on a constant grid,
    evaluated in graph order as eager does); a tensor written by a
    non-constant in-place op is not constant, nor is anything read from it."""
    inplace = [n for n in graph.nodes if n.op == "call_function" and _inplace(n) and n.args]
    tainted = set()
    while True:
        const = {}
        for n in graph.nodes:
            if n in tainted:
                continue
            if n.op == "placeholder":
                if n.name in leaves:
                    const[n] = False  # a lifted torch.tensor(...) constant (LTX-2's RoPE grid)
                continue
            if n.op != "call_function" or _base(n.target) in NOT_CONSTANT:
                continue
            ins = _refs(list(n.args), []) + _refs(dict(n.kwargs), [])
            if all(i in const for i in ins):
                const[n] = _base(n.target) in TRANSCENDENTAL or any(const[i] for i in ins)
        more = set()
        for op in inplace:
            if op not in const:
                more |= _written_by(op)
        if more <= tainted:
            return const
        tainted |= more


def frontier(const):
    """The constant-only nodes with transcendental ancestry that a
    non-constant node reads, except in-place ops and tensors an in-place op
    writes (their value depends on when they are read)."""
    written = set()
    for n in const:
        if _inplace(n):
            written |= _written_by(n)
    out = []
    for n, trans in const.items():
        if not trans or _inplace(n) or _view_bases(n) & written:
            continue
        if any(u not in const for u in n.users):
            out.append(n)
    return out


def _on_device(a, device):
    import torch

    if isinstance(a, torch.device):
        return torch.device(device)
    if isinstance(a, (list, tuple)):
        return type(a)(_on_device(x, device) for x in a)
    if isinstance(a, dict):
        return {k: _on_device(x, device) for k, x in a.items()}
    return a


def _subst(a, env):
    if _is_node(a):
        return env[a]
    if isinstance(a, (list, tuple)):
        return type(a)(_subst(x, env) for x in a)
    if isinstance(a, dict):
        return {k: _subst(x, env) for k, x in a.items()}
    return a


def device_values(ep, device, autocast=None, leaves=None):
    """[(node name, fp32 tensor on the CPU)] of the frontier constant-only
    nodes of ep's graph whose subgraph holds a transcendental op, evaluated
    on device (str) under CUDA autocast to autocast (None: off). leaves:
    {placeholder name: tensor with data} of the lifted tensor constants."""
    try:
        import torch
    except Exception:  # noqa: BLE001
        return []
    try:
        graph = ep.graph
        leaves = {k: v for k, v in (leaves or {}).items() if isinstance(v, torch.Tensor)}
        const = constant_only(graph, set(leaves))
        if not const:
            return []
        want = set()
        for n in frontier(const):
            val = n.meta.get("val")
            if isinstance(val, torch.Tensor) and val.dtype == torch.float32 and 0 < val.numel() <= MAX_ELEMENTS:
                want.add(n)
        if not want:
            return []
        env, out = {}, []
        amp = (torch.autocast("cuda", dtype=autocast) if autocast is not None and str(device).startswith("cuda")
               else torch.autocast("cuda", enabled=False))
        with torch.no_grad(), amp:
            for n in graph.nodes:
                if n not in const:
                    continue
                if n.op == "placeholder":
                    try:
                        env[n] = leaves[n.name].detach().to(device)
                    except Exception:  # noqa: BLE001 - its users are left to the replay
                        pass
                    continue
                try:
                    ins = _refs(list(n.args), []) + _refs(dict(n.kwargs), [])
                    if any(i not in env for i in ins):
                        continue  # an upstream node failed: computed by the replay
                    args = _on_device(_subst(n.args, env), device)
                    kwargs = _on_device(_subst(dict(n.kwargs), env), device)
                    env[n] = n.target(*args, **kwargs)
                except Exception:  # noqa: BLE001 - left to the replay
                    if _inplace(n):  # what it should have written is unknown: nothing reads it
                        for r in _written_by(n):
                            env.pop(r, None)
                    continue
                if n in want:
                    v = env[n]
                    val = n.meta.get("val")
                    if (isinstance(v, torch.Tensor) and v.dtype == torch.float32 and
                            tuple(v.shape) == tuple(val.shape)):
                        out.append((n.name, v.detach().float().contiguous().cpu()))
        return out
    except Exception:  # noqa: BLE001 - the recorder never raises into the job
        return []
