"""Graph capture: a PyTorch model's own forward as drift-aten-graph JSON.

    from drift_recorder.capture import export_graph
    doc = export_graph(model, kwargs)          # dict, docs/aten-graph.md
    rec.set_graph(json.dumps(doc))

torch.export.export(model, (), kwargs, strict=False) on an fp32 model with
autocast off gives pre-dispatch ATen (linear, layer_norm, SDPA whole; the
model code's casts as aten.to / _to_copy / type_as). This module only
*describes* that graph (nodes, arguments, fake-tensor metadata, module
paths, the signature); drift's importer (replay/capture/) interprets it.
"""
import contextlib
import math
import re
import os
import time

from .capture_contiguous import contiguous_kept
from .capture_outputs import OutputTap

FORMAT = "drift-aten-graph"
VERSION = 1
CONSTANT_INLINE_LIMIT = 65536  # elements; larger lifted constants go to /buffers

# Boundary inputs whose dtype the plan's input_dtype_policy sets (DESIGN.md s1),
# by the keyword names diffusers' transformers use.
# and by the names research code gives them (DiT, SiT, Latte: forward(x, t, ...)).
ROLE_OF_KWARG = {
    "hidden_states": "latents",
    "sample": "latents",
    "encoder_hidden_states": "cond",
    "timestep": "timestep",
    "x": "latents",
    "t": "timestep",
    "context": "cond",
}


class CaptureError(RuntimeError):
    pass


def _dtype_name(d):
    return str(d).replace("torch.", "")


def _module_path(p):
    """nn_module_stack path -> dotted root-relative FQN.

    Strict export writes "L['self'].blocks[0].attn1" (or L__self___blocks_0);
    non-strict export writes "blocks.0.attn1". Both become blocks.0.attn1."""
    s = str(p)
    s = re.sub(r"^L\['self'\]\.?", "", s)
    s = re.sub(r"^self\.?", "", s)
    s = re.sub(r"\._modules\['([^']+)'\]", r".\1", s)
    s = re.sub(r"\[(\d+)\]", r".\1", s)
    s = re.sub(r"\['([^']+)'\]", r".\1", s)
    s = s.strip(".")
    s = re.sub(r"\.+", ".", s)
    return s


def _tensor_meta(t):
    import torch

    if isinstance(t, torch.Tensor):
        m = {"shape": [int(x) for x in t.shape], "dtype": _dtype_name(t.dtype)}
        try:
            m["stride"] = [int(x) for x in t.stride()]
            off = int(t.storage_offset())
            if off:
                m["storage_offset"] = off
        except Exception:  # sparse / nested: no strides
            pass
        return m
    return None


def _val(v):
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return [_val(x) for x in v]
    if isinstance(v, (bool, int, float)):
        return {"scalar": _arg(v, {})}
    import torch

    if isinstance(v, torch.Tensor):
        return _tensor_meta(v)
    if isinstance(v, torch.SymInt):
        return {"sym": str(v)}
    return None


def _plain(a):
    """JSON of a plain Python value (no torch needed); _NOT_PLAIN otherwise."""
    if a is None or isinstance(a, (bool, str)):
        return a
    if isinstance(a, int):
        return int(a)
    if isinstance(a, float):
        if math.isnan(a):
            return {"float": "nan"}
        if math.isinf(a):
            return {"float": "inf" if a > 0 else "-inf"}
        return a
    return _NOT_PLAIN


_NOT_PLAIN = object()


def _arg(a, alias=None):
    """Argument encoding of docs/aten-graph.md. Plain Python values (and
    lists, tuples, dicts of them) need no torch; torch is imported only for
    the first value that is not plain."""
    v = _plain(a)
    if v is not _NOT_PLAIN:
        return v
    if isinstance(a, (list, tuple)):
        return [_arg(x, alias) for x in a]
    if isinstance(a, dict):
        return {"dict": {str(k): _arg(x, alias) for k, x in a.items()}}
    import torch
    import torch.fx

    if isinstance(a, torch.fx.Node):
        return {"node": a.name}
    if isinstance(a, torch.dtype):
        return {"dtype": _dtype_name(a)}
    if isinstance(a, torch.device):
        return {"device": (alias or {}).get(str(a), str(a))}
    if isinstance(a, torch.layout):
        return {"layout": str(a).replace("torch.", "")}
    if isinstance(a, torch.memory_format):
        return {"memory_format": str(a).replace("torch.", "")}
    if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return {"sym": str(a)}
    return {"repr": repr(a)[:200]}


def _target_name(t):
    import operator

    if t is operator.getitem:
        return "getitem"
    if isinstance(t, str):
        return t
    s = str(t)
    if s.startswith("aten.") or s.startswith("prims.") or "." in s and not s.startswith("<"):
        return s
    mod = getattr(t, "__module__", "") or ""
    return (mod + "." if mod else "") + getattr(t, "__qualname__", getattr(t, "__name__", repr(t)))


def _module_info(node):
    stack = node.meta.get("nn_module_stack") or {}
    paths, classes = [], []
    for _, v in stack.items():
        path, cls = (v[0], v[1]) if isinstance(v, (tuple, list)) and len(v) >= 2 else (v, "")
        p = _module_path(path)
        if p == "" and not paths:
            continue  # the root itself
        paths.append(p)
        c = cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))
        classes.append(c.rsplit(".", 1)[-1])
    return (paths[-1] if paths else ""), paths, classes


def _flat_user_inputs(kwargs):
    """[(path, value)] of the kwargs' pytree leaves, in torch.export's order."""
    import torch.utils._pytree as pytree

    leaves, _ = pytree.tree_flatten_with_path(((), kwargs))
    out = []
    for path, v in leaves:
        keys = []
        for k in path[1:]:  # drop the (args, kwargs) index
            if hasattr(k, "key"):
                keys.append(str(k.key))
            elif hasattr(k, "idx"):
                keys.append(str(k.idx))
            else:
                keys.append(str(k))
        out.append((".".join(keys), v))
    return out


def input_site(target, role):
    """Trace site of a user input's values (docs/aten-graph.md "Inputs"): the
    three boundary inputs keep their names, every other one is named by its
    keyword-argument path."""
    if role in ("latents", "cond", "timestep"):
        return "input:%s:pre_cast" % role
    return "input:%s:pre_cast" % target


def flatten_inputs(kwargs):
    """[(path, value)] of the leaves of nested dicts, lists and tuples, paths
    dotted as describe() names user inputs ("img_shapes.0.1"), in insertion
    order (torch's pytree order for these containers). No torch needed."""
    out = []

    def walk(prefix, v):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(prefix + [str(k)], x)
        elif isinstance(v, (list, tuple)):
            for i, x in enumerate(v):
                walk(prefix + [str(i)], x)
        else:
            out.append((".".join(prefix), v))

    walk([], kwargs)
    return out


def describe(ep, kwargs, model_class="", export_seconds=None, inline_limit=CONSTANT_INLINE_LIMIT,
             device_alias=None, constant_value=None, module_outputs=None, autocast=None, decompose=True,
             user_leaves=None):
    """ExportedProgram -> drift-aten-graph dict (docs/aten-graph.md).

    inline_limit: lifted constants of at most this many elements are written
    into the document, larger ones are left to the caller (/buffers under
    constant:NAME). device_alias: {"meta": "cuda:0"} when ep was exported
    from a meta-device copy. constant_value(target, tensor) -> tensor or None:
    the real value of a constant whose exported one has no data (meta).
    module_outputs: OutputTap.module_outputs(ep.graph) (capture_outputs.py),
    written as the document's "module_outputs" unless None. autocast: the
    dtype the export ran under (torch.bfloat16 / float16) or None: the
    boundary casts of decomposed composites (capture_decompose.py).
    decompose: replace composites outside drift's opset by what they call."""
    import torch
    from torch.export.graph_signature import InputKind, OutputKind

    sig = ep.graph_signature
    graph = ep.graph
    # torch.export makes one user-input placeholder per pytree leaf of the
    # kwargs (tensors and Python scalars alike), in flattening order.
    flat = list(user_leaves) if user_leaves is not None else [(p, v) for p, v in _flat_user_inputs(kwargs)]
    inputs, constants = [], {}
    user_i = 0
    for spec in sig.input_specs:
        name = getattr(spec.arg, "name", None)
        if spec.kind == InputKind.PARAMETER:
            inputs.append({"node": name, "kind": "parameter", "target": spec.target})
        elif spec.kind == InputKind.BUFFER:
            inputs.append({"node": name, "kind": "buffer", "target": spec.target,
                           "persistent": bool(getattr(spec, "persistent", True))})
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            inputs.append({"node": name, "kind": "constant", "target": spec.target})
            c = ep.constants.get(spec.target)
            if constant_value is not None and isinstance(c, torch.Tensor) and dataless(c):
                c = constant_value(spec.target, c)
            if isinstance(c, torch.Tensor) and not dataless(c) and c.numel() <= inline_limit:
                c = c.detach().cpu()
                entry = {"shape": list(c.shape), "dtype": _dtype_name(c.dtype)}
                if c.is_complex():  # stored as interleaved (real, imag) pairs
                    c = torch.view_as_real(c.resolve_conj())
                entry["data"] = [_arg(x) for x in c.reshape(-1).tolist()]
                constants[spec.target] = entry
        elif spec.kind == InputKind.USER_INPUT:
            target = name
            is_tensor = True
            if user_i < len(flat):
                target = flat[user_i][0]
                is_tensor = isinstance(flat[user_i][1], torch.Tensor)
            user_i += 1
            role = ROLE_OF_KWARG.get(target, "other")
            d = {"node": name, "kind": "user_input", "target": target, "role": role}
            if is_tensor:
                d["site"] = input_site(target, role)
            inputs.append(d)
        else:
            inputs.append({"node": name, "kind": str(spec.kind).split(".")[-1].lower(), "target": spec.target})

    from .capture_nodes import NodeEmitter
    em = NodeEmitter(ep.graph_module, device_alias, autocast=autocast, decompose=decompose)
    nodes = em.emit(graph)

    outputs = []
    for i, spec in enumerate(sig.output_specs):
        if spec.kind == OutputKind.USER_OUTPUT:
            nm = "output:noise_pred" if not outputs else "output:%d" % i
            outputs.append({"node": getattr(spec.arg, "name", None), "name": nm})

    non_tensor = {p: _arg(v) for p, v in flatten_inputs(kwargs) if not isinstance(v, torch.Tensor)}
    try:
        import diffusers
        dver = diffusers.__version__
    except Exception:
        dver = None
    from . import __version__ as rec_version
    doc = {"format": FORMAT, "version": VERSION,
           "producer": {"torch": torch.__version__, "drift_recorder": rec_version, "diffusers": dver},
           "model_class": model_class, "nodes": nodes, "inputs": inputs, "outputs": outputs,
           "constants": constants, "non_tensor_inputs": non_tensor}
    if export_seconds is not None:
        doc["export_seconds"] = round(export_seconds, 3)
    if module_outputs is not None:
        doc["module_outputs"] = module_outputs
    doc["opset"] = em.summary()
    return doc


def dataless(t):
    """True for a tensor without values: on the meta device, or a FakeTensor."""
    return t.device.type == "meta" or type(t).__name__ == "FakeTensor"


def output_tap(model):
    """An OutputTap over model's modules, keyed by the module paths the
    graph's nodes carry (capture_outputs.py)."""
    return OutputTap(model, fqn_of=_module_path)


def export_program(model, kwargs, autocast=None, tap=None):
    """(ExportedProgram, seconds) of model(**kwargs), no grad, under CUDA
    autocast to the dtype autocast (torch.bfloat16 / torch.float16) or, for
    None, with autocast off (fp32 semantics); tap (an OutputTap, optional)
    watches the module outputs during the trace. Raises CaptureError with
    torch's message on failure."""

    import torch

    t0 = time.perf_counter()
    amp = (torch.autocast("cuda", dtype=autocast) if autocast is not None
           else torch.autocast("cuda", enabled=False))
    try:
        with amp, torch.autocast("cpu", enabled=False), torch.no_grad(), (tap or contextlib.nullcontext()), \
                contiguous_kept():
            ep = torch.export.export(model, args=(), kwargs=kwargs, strict=False)
    except Exception as e:  # the recorder never raises into the job
        import traceback
        tb = traceback.extract_tb(e.__traceback__)
        where = " (at %s:%d)" % (os.path.basename(tb[-1].filename), tb[-1].lineno) if tb else ""
        raise CaptureError("torch.export failed: %s: %s%s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:300],
                                                              where))
    return ep, time.perf_counter() - t0


def export_graph(model, kwargs, **describe_kw):
    """Exports model(**kwargs) (fp32, autocast off) and describes the graph:
    (doc, ExportedProgram). Raises CaptureError when the model cannot be
    exported; the Recorder turns that into a note in the trace."""
    tap = output_tap(model)
    ep, dt = export_program(model, kwargs, tap=tap)
    describe_kw.setdefault("module_outputs", tap.module_outputs(ep.graph))
    describe_kw.setdefault("autocast", None)
    return describe(ep, kwargs, model_class=type(model).__name__, export_seconds=dt, **describe_kw), ep
