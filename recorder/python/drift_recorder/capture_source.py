"""Which module a recording exports, and the tensors its graph refers to.

An unsharded model is exported as it is. An FSDP2-sharded one is not: its
parameters are DTensor shards and exporting it would gather the whole model
on this rank. Instead a copy with the same structure is built on the meta
device (no storage) from the model's class and its diffusers `config` (or a
user-supplied factory) and exported with meta inputs of the real shapes and
dtypes: the graph, its shapes and its parameter FQNs are the same, no
parameter value is needed. Buffers and attribute constants (RoPE tables) are
not sharded by FSDP2, so their values come from the real model.

    doc, tensors = capture_for_recording(model, kwargs)   # tensors: [(name, tensor)]

Every failure is a CaptureError with a one-line message.
"""
from .capture import CaptureError, describe, export_program

# lifted constants above this many elements go to /buffers as constant:NAME,
# not into the JSON (keeps /graph small: Qwen-Image's RoPE table is 32768)
RECORDER_INLINE_LIMIT = 4096
_WRAPPER_PARTS = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod")


def is_sharded(model):
    """True if any parameter of model is a DTensor (FSDP2 / tensor parallel)."""
    for p in model.parameters():
        if type(p).__name__ == "DTensor" or hasattr(p, "_local_tensor"):
            return True
    return False


def all_fp32(model):
    """True if every floating-point parameter of model is fp32."""
    for p in model.parameters():
        dt = str(getattr(p, "dtype", "float32")).replace("torch.", "")
        if dt in ("bfloat16", "float16", "float64"):
            return False
    return True


def base_class(model):
    """The model's own class: FSDP2's fully_shard swaps it for a generated
    subclass FSDP<Name>(FSDPModule, Name)."""
    for c in type(model).__mro__:
        if not (c.__name__.startswith("FSDP") or c.__name__ in ("FSDPModule", "UnshardHandle")):
            return c
    return type(model)


def unwrap(model):
    """DDP's .module, torch.compile's _orig_mod; FSDP2 keeps the module itself."""
    for attr in ("module", "_orig_mod"):
        inner = getattr(model, attr, None)
        if inner is not None and type(model).__name__ in ("DistributedDataParallel", "DataParallel",
                                                          "OptimizedModule"):
            return unwrap(inner)
    return model


def meta_copy(model, factory=None):
    """An unsharded copy of model on the meta device: factory() if given, else
    base_class(model).from_config(model.config) (diffusers ModelMixin), else
    base_class(model)(**model.config), built under torch.device("meta")."""
    import torch

    with torch.device("meta"):
        if factory is not None:
            m = factory()
        else:
            cfg = getattr(model, "config", None)
            if cfg is None:
                raise CaptureError("the model is sharded (FSDP2) and has no .config to rebuild it from: "
                                   "pass capture_graph(..., factory=) building an unsharded copy")
            cls = base_class(model)
            m = cls.from_config(cfg) if hasattr(cls, "from_config") else cls(**dict(cfg))
    m = m.to("meta").eval()
    want = sorted(_strip(n) for n, _ in model.named_parameters())
    have = sorted(n for n, _ in m.named_parameters())
    if want != have:
        extra = sorted(set(have) - set(want))[:1] + sorted(set(want) - set(have))[:1]
        raise CaptureError("the meta copy's parameters differ from the model's (%d vs %d, e.g. %s): "
                           "pass capture_graph(..., factory=)" % (len(have), len(want), extra))
    return m


def _strip(name):
    return ".".join(p for p in name.split(".") if p not in _WRAPPER_PARTS)


def to_meta(v):
    """kwargs with every tensor replaced by a meta tensor of its shape and dtype."""
    import torch

    if isinstance(v, torch.Tensor):  # a DTensor's shape is the global one
        return torch.empty(tuple(v.shape), dtype=v.dtype, device="meta")
    if isinstance(v, dict):
        return {k: to_meta(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(to_meta(x) for x in v) if not hasattr(v, "_fields") else type(v)(*[to_meta(x) for x in v])
    return v


def _attr_path(obj, path):
    for part in path.split("."):
        if not hasattr(obj, part):
            return None
        obj = getattr(obj, part)
    return obj


def _plain_data(v, depth=0):
    """True if v is a Python number / bool or nested lists / tuples of them
    (what torch.tensor(data) turns into a lifted constant)."""
    if isinstance(v, (bool, int, float)):
        return True
    if isinstance(v, (list, tuple)) and depth < 8:
        return all(_plain_data(x, depth + 1) for x in v)
    return False


class ConstantTap:
    """While a meta-device copy is exported, remembers the Python data of
    every torch.tensor / torch.as_tensor call whose result lands on the meta
    device (diffusers' `torch.tensor(..., device=x.device)`: sequence lengths,
    frame sizes). torch.export lifts those tensors as constants without
    values (meta); value_of(target, constant) rebuilds one on the CPU from
    its data after the export (outside torch's tracing modes): the same
    tensor object if torch kept it, else the first unused one of the same
    shape and dtype in creation order (lifted_tensor_N follow first use)."""

    NAMES = ("tensor", "as_tensor")

    def __init__(self):
        self.made = []  # [meta tensor, data, used]
        self._orig = {}
        self._by_target = {}  # target -> the value given (asked again for the /buffers entries)

    def __enter__(self):
        import torch

        def wrap(fn):
            def tapped(data, *args, **kw):
                t = fn(data, *args, **kw)
                try:
                    if isinstance(t, torch.Tensor) and t.device.type == "meta" and _plain_data(data):
                        self.made.append([t, data, False])
                except Exception:  # noqa: BLE001 - the tap never breaks the export
                    pass
                return t
            return tapped

        for n in self.NAMES:
            self._orig[n] = getattr(torch, n)
            setattr(torch, n, wrap(self._orig[n]))
        return self

    def __exit__(self, *exc):
        import torch

        for n, fn in self._orig.items():
            setattr(torch, n, fn)
        return False

    def value_of(self, target, c):
        import torch

        if target in self._by_target:
            return self._by_target[target]
        if not isinstance(c, torch.Tensor):
            return None
        pick = next((e for e in self.made if e[0] is c), None)
        if pick is None:
            pick = next((e for e in self.made if not e[2] and tuple(e[0].shape) == tuple(c.shape)
                         and e[0].dtype == c.dtype), None)
        if pick is None:
            return None
        try:
            v = self._orig.get("tensor", torch.tensor)(pick[1], dtype=c.dtype)
        except Exception:  # noqa: BLE001
            return None
        if tuple(v.shape) != tuple(c.shape):
            return None
        pick[2] = True
        self._by_target[target] = v
        return v


def _first_device(kwargs, model):
    import torch

    for v in (kwargs.values() if isinstance(kwargs, dict) else []):
        if isinstance(v, torch.Tensor) and v.device.type != "meta":
            return str(v.device) if v.device.type != "cuda" else "cuda:%d" % (v.device.index or 0)
    for p in model.buffers():
        return str(p.device)
    return "cpu"


def capture_for_recording(model, kwargs, factory=None, mode="auto"):
    """(doc, tensors) for Recorder.capture_graph.

    mode: "auto" (a meta copy if the model is sharded or has parameters that
    are not fp32, else the model itself),
    "model" or "meta". doc: the drift-aten-graph dict with "capture": {"mode",
    "seconds"}; tensors: [(name, tensor)] to write to /buffers: every buffer
    input under its FQN, every lifted constant not inlined under
    constant:NAME (values from the real model). Raises CaptureError."""
    import torch

    real = unwrap(model)
    if mode == "auto":
        # a sharded model is never gathered; a model whose parameters are not
        # fp32 (a bf16 rollout engine) would be exported with its casts baked in
        mode = "meta" if is_sharded(real) or not all_fp32(real) else "model"
    alias = None
    if mode == "meta":
        src = meta_copy(real, factory)
        ekw = to_meta(kwargs)
        alias = {"meta": _first_device(kwargs, real)}
    elif mode == "model":
        if is_sharded(real):
            raise CaptureError("mode='model' on a sharded model would gather it: use mode='auto' or 'meta'")
        src, ekw = real, kwargs
    else:
        raise CaptureError("capture mode %r: expected auto, model or meta" % (mode,))
    tap = ConstantTap()
    if mode == "meta":
        with tap:
            ep, seconds = export_program(src, ekw)
    else:
        ep, seconds = export_program(src, ekw)

    def real_value(target, c):
        """A meta export's constant: the real model's attribute of that name,
        else the data its torch.tensor call was given (ConstantTap)."""
        v = _attr_path(real, target)
        if isinstance(v, torch.Tensor):
            return v
        return tap.value_of(target, c)

    doc = describe(ep, kwargs, model_class=base_class(real).__name__, export_seconds=seconds,
                   inline_limit=RECORDER_INLINE_LIMIT, device_alias=alias,
                   constant_value=real_value if mode == "meta" else None)
    doc["capture"] = {"mode": mode, "seconds": round(seconds, 3)}
    tensors, missing = [], []
    named_bufs = {_strip(n): b for n, b in real.named_buffers()}
    for inp in doc["inputs"]:
        if inp["kind"] == "buffer":
            name, v = inp["target"], named_bufs.get(inp["target"])
            if v is None and mode == "model":
                v = ep.state_dict.get(name, ep.constants.get(name))
        elif inp["kind"] == "constant" and inp["target"] not in doc["constants"]:
            name, v = "constant:" + inp["target"], ep.constants.get(inp["target"])
            if not isinstance(v, torch.Tensor) or v.device.type == "meta":
                v = real_value(inp["target"], v)
        else:
            continue
        if isinstance(v, torch.Tensor) and v.device.type != "meta":
            tensors.append((name, v))
        else:
            missing.append(name)
    if missing:
        doc["capture"]["missing_values"] = missing
    return doc, tensors
