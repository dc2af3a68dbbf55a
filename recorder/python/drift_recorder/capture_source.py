"""Which module a recording exports, and the tensors its graph refers to.

An unsharded model is exported as it is. An FSDP2-sharded one is not: its
parameters are DTensor shards and exporting it would gather the whole model
on this rank. Instead a copy with the same structure is built from the
model's class and its diffusers `config` (or a user-supplied factory) and
exported with inputs of the real shapes and dtypes: the graph, its shapes and
its parameter FQNs are the same, no parameter value is needed. Buffers and
attribute constants (RoPE tables) are not sharded by FSDP2, so their values
come from the real model.

The copy is a FakeTensorMode copy on the model's GPU ("fake": no memory),
each parameter in the dtype the forward sees (an FSDP2 module's
MixedPrecisionPolicy.param_dtype), exported under the run's autocast: model
code that decides on a dtype at run time (`timestep.to(hidden_states.dtype)`,
diffusers' RMSNorm `if self.weight.dtype in (fp16, bf16)`) takes the
branch the recorded run takes, and the graph holds the casts the run made
(docs/aten-graph.md "Dtype decisions"). Where that export fails, a real
copy on the GPU with arbitrary values is exported the same way ("device"),
when it takes at most a quarter of the free GPU memory; else (no GPU, a big
model) a meta-device copy in fp32 without autocast ("meta"), as before. The
capture says which and why ("fallback").

    doc, tensors = capture_for_recording(model, kwargs)   # tensors: [(name, tensor)]

Every failure is a CaptureError with a one-line message.
"""
from .capture import CaptureError, dataless, describe, export_program, output_tap
from .capture_device_values import device_values

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
        m = _build(model, factory)
    m = m.to("meta").eval()
    want = sorted(_strip(n) for n, _ in model.named_parameters())
    have = sorted(n for n, _ in m.named_parameters())
    if want != have:
        extra = sorted(set(have) - set(want))[:1] + sorted(set(want) - set(have))[:1]
        raise CaptureError("the meta copy's parameters differ from the model's (%d vs %d, e.g. %s): "
                           "pass capture_graph(..., factory=)" % (len(have), len(want), extra))
    return m


def forward_param_dtypes(model):
    """{FQN: torch.dtype} each parameter has in the forward: the param_dtype of
    the innermost FSDP2 module that manages it (when set), else its own."""
    owner = {}
    try:
        from torch.distributed.fsdp import FSDPModule
    except Exception:  # noqa: BLE001 - no FSDP2 in this torch
        FSDPModule = None
    if FSDPModule is not None:
        for mn, mod in model.named_modules():
            if isinstance(mod, FSDPModule):
                dt = None
                try:
                    pg = mod._get_fsdp_state()._fsdp_param_group
                    dt = pg.mp_policy.param_dtype if pg is not None else None
                except Exception:  # noqa: BLE001 - a private API: fall back to the parameter's dtype
                    dt = None
                owner[_strip(mn)] = dt
    out = {}
    for n, p in model.named_parameters():
        fq = _strip(n)
        parts, dt = fq.split("."), None
        for i in range(len(parts) - 1, -1, -1):
            key = ".".join(parts[:i])
            if key in owner:
                dt = owner[key]
                break
        out[fq] = dt if dt is not None else p.dtype
    return out


def fake_copy(model, factory, dtypes, device):
    """(copy, fake_mode): an unsharded copy of model whose tensors are
    FakeTensors on device (no memory), parameter FQN in dtypes[FQN], buffers
    in the real model's dtypes. Raises CaptureError."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    fm = FakeTensorMode(allow_non_fake_inputs=True)
    real_bufs = {_strip(n): b for n, b in model.named_buffers()}
    with fm, torch.device(device):
        m = _build(model, factory)
        m.eval()
        for name, p in list(m.named_parameters()):
            mod_name, _, leaf = name.rpartition(".")
            mod = m.get_submodule(mod_name) if mod_name else m
            want = dtypes.get(name, p.dtype)
            # a new Parameter instead of module.to(): FakeTensor params cannot be swapped in place
            setattr(mod, leaf, torch.nn.Parameter(torch.empty(p.shape, dtype=want), requires_grad=False))
        for name, b in list(m.named_buffers()):
            rb = real_bufs.get(name)
            if rb is not None and rb.dtype != b.dtype:
                mod_name, _, leaf = name.rpartition(".")
                mod = m.get_submodule(mod_name) if mod_name else m
                mod.register_buffer(leaf, torch.empty(b.shape, dtype=rb.dtype), persistent=leaf not in getattr(
                    mod, "_non_persistent_buffers_set", set()))
        # a tensor attribute made outside the mode (a cached table, a class-level
        # constant) would be fakified by the export in a second mode: one mode for all
        for mod in m.modules():
            for k, v in list(vars(mod).items()):
                if isinstance(v, torch.Tensor) and not dataless(v):
                    setattr(mod, k, fm.from_tensor(v))
    have = sorted(n for n, _ in m.named_parameters())
    if have != sorted(dtypes):
        raise CaptureError("the fake copy's parameters differ from the model's (%d vs %d)" % (len(have), len(dtypes)))
    return m, fm


DEVICE_COPY_SHARE = 0.25  # the largest share of the GPU's free memory a device copy may take


def device_copy(model, factory, dtypes, device):
    """An unsharded copy of model on device with arbitrary parameter values
    (the export needs shapes and dtypes, not values), each parameter in
    dtypes[FQN]; only when its parameters take at most DEVICE_COPY_SHARE of the
    device's free memory. Never touches model's own (sharded) storage."""
    import torch

    need = 0
    for n, p in model.named_parameters():
        need += p.numel() * torch.empty((), dtype=dtypes.get(_strip(n), p.dtype)).element_size()
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    if need > DEVICE_COPY_SHARE * free:
        raise CaptureError("a device copy needs %.1f GB, more than %d%% of the %.1f GB free" % (
            need / 1e9, int(DEVICE_COPY_SHARE * 100), free / 1e9))
    try:
        with torch.device(device):
            m = _build(model, factory)
        m.eval()
        with torch.no_grad():
            for name, p in list(m.named_parameters()):
                want = dtypes.get(name, p.dtype)
                if p.dtype != want:
                    mod_name, _, leaf = name.rpartition(".")
                    mod = m.get_submodule(mod_name) if mod_name else m
                    setattr(mod, leaf, torch.nn.Parameter(p.detach().to(want), requires_grad=False))
                else:
                    p.requires_grad_(False)
    except CaptureError:
        raise
    except Exception as e:  # noqa: BLE001
        raise CaptureError("device copy: %s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:200]))
    return m


def fill_values(copy, real):
    """Copies real's parameter and buffer values into copy (same FQNs, copy's dtypes: the cast
    FSDP2's param_dtype makes, round to nearest even), so that a trace of copy takes the run's
    data-dependent branches (MoE routing, masks). A DTensor parameter gives its local shard when
    that is the whole tensor (world 1, replicated); the FQNs of the others (shards of other ranks,
    never gathered here) are returned."""
    import torch

    cp = dict(copy.named_parameters())
    cb = dict(copy.named_buffers())
    left = []
    with torch.no_grad():
        for n, p in real.named_parameters():
            dst = cp.get(_strip(n))
            v = p.to_local() if hasattr(p, "to_local") and hasattr(p, "placements") else p  # a DTensor: its shard
            if dst is None or tuple(v.shape) != tuple(dst.shape):
                left.append(_strip(n))
                continue
            dst.data.copy_(v.detach())
        for n, b in real.named_buffers():
            dst = cb.get(_strip(n))
            if dst is not None and tuple(b.shape) == tuple(dst.shape) and not hasattr(b, "placements"):
                dst.data.copy_(b.detach())
    return left


def _build(model, factory):
    """factory(), else the model's class from its diffusers config, else a
    copy of its own module structure (structural_copy), under the caller's
    device context."""
    if factory is not None:
        return factory()
    cfg = getattr(model, "config", None)
    cls = base_class(model)
    if cfg is not None and hasattr(cls, "from_config"):
        return cls.from_config(cfg)
    return structural_copy(model)


_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks",
               "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called",
               "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
               "_load_state_dict_post_hooks")


def structural_copy(model):
    """An unsharded copy of model built from its own module tree, for a model
    without a diffusers config (plain PyTorch research code): every module
    re-instantiated without __init__ as its own class (FSDP2's generated
    subclass undone), its attributes shared, its hooks and FSDP2 state left
    behind, every parameter and buffer a new empty tensor of the global shape
    and dtype (a DTensor's shape is the global one) made under the caller's
    device context (fake, a GPU or meta). Values are not copied: the export
    needs shapes and dtypes; buffer values come from the real model."""
    import torch

    def cp(mod):
        cls = base_class(mod)
        new = cls.__new__(cls)
        d = {k: v for k, v in mod.__dict__.items() if "composable" not in k and not k.startswith("_fsdp")}
        for k in _HOOK_DICTS:
            if k in d:
                d[k] = type(d[k])()
        params = type(mod._parameters)()
        for n, p in mod._parameters.items():
            params[n] = None if p is None else torch.nn.Parameter(torch.empty(tuple(p.shape), dtype=p.dtype),
                                                                  requires_grad=False)
        bufs = type(mod._buffers)()
        for n, b in mod._buffers.items():
            bufs[n] = None if b is None else torch.empty(tuple(b.shape), dtype=b.dtype)
        kids = type(mod._modules)()
        for n, c in mod._modules.items():
            kids[n] = None if c is None else cp(c)
        d["_parameters"], d["_buffers"], d["_modules"] = params, bufs, kids
        new.__dict__.update(d)
        return new

    try:
        return cp(model)
    except Exception as e:  # noqa: BLE001
        raise CaptureError("the model has no .config and its module tree could not be copied (%s: %s): "
                           "pass capture_graph(..., factory=)" % (type(e).__name__, str(e)[:200]))


def to_fake(v, fm):
    """kwargs with every tensor replaced by a fake tensor of fm (same shape, dtype, device)."""
    import torch

    if isinstance(v, torch.Tensor):
        if type(v).__name__ == "DTensor":  # never gathered: a fake of its global shape
            with fm:
                return torch.empty(tuple(v.shape), dtype=v.dtype, device=v.device)
        return fm.from_tensor(v)
    if isinstance(v, dict):
        return {k: to_fake(x, fm) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(to_fake(x, fm) for x in v) if not hasattr(v, "_fields") else type(v)(*[to_fake(x, fm) for x in v])
    return v


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
                    if isinstance(t, torch.Tensor) and dataless(t) and _plain_data(data):
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


def capture_for_recording(model, kwargs, factory=None, mode="auto", autocast=None):
    """(doc, tensors) for Recorder.capture_graph.

    mode: "auto" (a fake copy in the forward's parameter dtypes if the model
    is sharded or has parameters that are not fp32, falling back to a device
    copy, then to a meta copy in fp32, when that export fails; else the model
    itself), "model", "fake", "device" or "meta". autocast: the run's autocast dtype (torch.bfloat16,
    torch.float16) or None: the export runs under it (not in "meta" mode,
    where autocast cannot apply). doc: the drift-aten-graph dict with
    "capture": {"mode", "seconds", "autocast"[, "fallback"]}; tensors:
    [(name, tensor)] to write to /buffers: every buffer input under its FQN,
    every lifted constant not inlined under constant:NAME (values from the
    real model). Raises CaptureError."""
    import torch

    real = unwrap(model)
    fallback = None
    dispatch_err = None  # the last resort's reason leads the message when every mode failed
    if mode == "auto":
        # a sharded model is never gathered; a model whose parameters are not
        # fp32 (a bf16 rollout engine) is exported as a copy in its own dtypes
        if is_sharded(real) or not all_fp32(real):
            dev = _first_device(kwargs, real)
            if dev.startswith("cuda"):
                try:
                    doc, tensors = _capture(real, kwargs, factory, "fake", autocast)
                    if not doc["capture"].get("missing_values"):
                        return doc, tensors
                    # a constant made inside the forward whose value the fake copy cannot give
                    # (CogVideoX 1.5's patch_embed.lifted_tensor_0): a device copy computes it
                    fallback = "fake copy: no values for " + ", ".join(doc["capture"]["missing_values"])[:300]
                    try:
                        d2, t2 = _capture(real, kwargs, factory, "device", autocast)
                        if not d2["capture"].get("missing_values"):
                            d2["capture"]["fallback"] = fallback
                            return d2, t2
                    except CaptureError:
                        pass
                    # torch.export traces with fake tensors even on a device copy: a constant the
                    # forward builds through `.data` has no value there; the dispatch trace runs
                    # on the real tensors and keeps it
                    try:
                        d3, t3 = _capture(real, kwargs, factory, "dispatch", autocast)
                        if not d3["capture"].get("missing_values"):
                            d3["capture"]["fallback"] = fallback
                            return d3, t3
                    except CaptureError as e:
                        fallback += "; dispatch trace: " + str(e)[:300]
                    return doc, tensors
                except CaptureError as e:
                    fallback = "fake copy: " + str(e)[:600]
                try:  # a real copy with arbitrary values, when it fits in a small share of the free memory
                    doc, tensors = _capture(real, kwargs, factory, "device", autocast)
                    doc["capture"]["fallback"] = fallback
                    return doc, tensors
                except CaptureError as e:
                    fallback += "; device copy: " + str(e)[:300]
                try:  # torch.export failed: trace the forward as it runs (capture_dispatch.py)
                    doc, tensors = _capture(real, kwargs, factory, "dispatch", autocast)
                    doc["capture"]["fallback"] = fallback
                    return doc, tensors
                except CaptureError as e:
                    dispatch_err = str(e)
            else:
                fallback = "fake copy: the inputs are not on a GPU (%s)" % dev
            mode = "meta"
        else:
            try:
                return _capture(real, kwargs, factory, "model", autocast)
            except CaptureError as e:
                fallback = "export: " + str(e)[:600]
            mode = "dispatch"
    try:
        doc, tensors = _capture(real, kwargs, factory, mode, autocast)
    except CaptureError as e:
        if not fallback:
            raise
        # every mode tried: the dispatch trace's reason first (the capture that should never give
        # up), then this mode's, then the exports' (notes keep 255 characters)
        lead = ("dispatch trace: %s; %s mode: " % (dispatch_err[:300], mode)) if dispatch_err else ""
        raise CaptureError("%s%s (after: %s)" % (lead, e, fallback))
    if fallback:
        doc["capture"]["fallback"] = fallback
    return doc, tensors


def _constant_leaves(ep, real_value):
    """{placeholder name: tensor} of ep's lifted tensor constants that have
    data (a fake or meta export's through real_value)."""
    import torch
    from torch.export.graph_signature import InputKind

    out = {}
    for spec in ep.graph_signature.input_specs:
        if spec.kind != InputKind.CONSTANT_TENSOR:
            continue
        v = ep.constants.get(spec.target)
        if (not isinstance(v, torch.Tensor) or dataless(v)) and real_value is not None:
            v = real_value(spec.target, v)
        if isinstance(v, torch.Tensor) and not dataless(v):
            out[spec.arg.name] = v
    return out


def _add_device_values(doc, tensors, ep, device, autocast, real_value=None):
    """doc["device_values"] and their tensors (capture_device_values.py)."""
    import time as _time

    t0 = _time.perf_counter()
    try:
        leaves = _constant_leaves(ep, real_value)
    except Exception:  # noqa: BLE001 - the recorder never raises into the job
        leaves = {}
    vals = device_values(ep, device, autocast, leaves)
    if vals:
        doc["device_values"] = {name: "device:" + name for name, _ in vals}
        tensors.extend(("device:" + name, v) for name, v in vals)
    doc["capture"]["device_values"] = {"count": len(vals), "device": device,
                                       "seconds": round(_time.perf_counter() - t0, 3)}


def _capture(real, kwargs, factory, mode, autocast):
    """_capture_mode, every failure a CaptureError (describing an export with
    data-dependent shapes raises torch's own errors): the caller's chain of
    fallbacks then goes on to the next mode."""
    try:
        return _capture_mode(real, kwargs, factory, mode, autocast)
    except CaptureError:
        raise
    except Exception as e:  # noqa: BLE001 - the recorder never raises into the job
        raise CaptureError("%s capture: %s: %s" % (mode, type(e).__name__, (str(e).splitlines() or [""])[0][:300]))


def _capture_mode(real, kwargs, factory, mode, autocast, src_given=None, inline_limit=RECORDER_INLINE_LIMIT):
    import torch

    alias = None
    if mode == "fake":
        dtypes = forward_param_dtypes(real)
        try:
            src, fm = fake_copy(real, factory, dtypes, _first_device(kwargs, real))
            ekw = to_fake(kwargs, fm)
        except CaptureError:
            raise
        except Exception as e:  # noqa: BLE001
            raise CaptureError("fake copy: %s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:200]))
    elif mode == "device":
        dtypes = forward_param_dtypes(real)
        src = device_copy(real, factory, dtypes, _first_device(kwargs, real))
        ekw = kwargs
    elif mode == "meta":
        autocast = None  # autocast does not apply to meta tensors: fp32 semantics
        src = meta_copy(real, factory)
        ekw = to_meta(kwargs)
        alias = {"meta": _first_device(kwargs, real)}
    elif mode == "model":
        if is_sharded(real):
            raise CaptureError("mode='model' on a sharded model would gather it: use mode='auto' or 'meta'")
        src, ekw = real, kwargs
    elif mode == "dispatch":
        values = None
        if src_given is not None:
            src = src_given
        elif is_sharded(real):
            src = device_copy(real, factory, forward_param_dtypes(real), _first_device(kwargs, real))
            # the trace takes the branches of the data it computes: the copy gets the run's values
            values = fill_values(src, real)
        else:
            src = real
        ekw = kwargs
    else:
        raise CaptureError("capture mode %r: expected auto, model, fake, device, meta or dispatch" % (mode,))
    tap = ConstantTap()
    outs = output_tap(src)  # which node each multi-tensor module output is (capture_outputs.py)
    user_leaves = None
    if mode == "dispatch":
        from .capture_dispatch import trace_forward
        ep, user_leaves, seconds = trace_forward(src, ekw, autocast, fqn_of=_strip, tap=outs)
    elif mode in ("meta", "fake", "device"):
        with tap:
            try:
                ep, seconds = export_program(src, ekw, autocast, tap=outs)
            except CaptureError as e:
                if mode != "fake" or "doesn't match mode" not in str(e):
                    raise
                with fm:  # a fake tensor of a second mode among the inputs: trace inside the copy's mode
                    ep, seconds = export_program(src, ekw, autocast, tap=outs)
    else:
        ep, seconds = export_program(src, ekw, autocast, tap=outs)

    def real_value(target, c):
        """A meta export's constant: the real model's attribute of that name,
        else the data its torch.tensor call was given (ConstantTap)."""
        v = _attr_path(real, target)
        if isinstance(v, torch.Tensor):
            return v
        return tap.value_of(target, c)

    doc = describe(ep, kwargs, model_class=base_class(real).__name__, export_seconds=seconds,
                   inline_limit=inline_limit, device_alias=alias,
                   constant_value=real_value if mode in ("meta", "fake", "device") else None,
                   module_outputs=outs.module_outputs(ep.graph), autocast=autocast, user_leaves=user_leaves)
    doc["capture"] = {"mode": mode, "seconds": round(seconds, 3),
                      "autocast": str(autocast).replace("torch.", "") if autocast is not None else None}
    if mode == "dispatch":
        # specialised to this step's shapes: the replay checks every step's inputs against them
        doc["capture"]["specialized"] = True
        if values is not None and values:
            doc["capture"]["arbitrary_values"] = len(values)  # shards of other ranks: filled per step later
    tensors, missing = [], []
    if mode != "dispatch":
        _add_device_values(doc, tensors, ep, _first_device(kwargs, real), autocast,
                           real_value if mode in ("meta", "fake", "device") else None)
    named_bufs = {_strip(n): b for n, b in real.named_buffers()}
    for inp in doc["inputs"]:
        if inp["kind"] == "buffer":
            name, v = inp["target"], named_bufs.get(inp["target"])
            if v is None and mode == "model":
                v = ep.state_dict.get(name, ep.constants.get(name))
        elif inp["kind"] == "constant" and inp["target"] not in doc["constants"]:
            name, v = "constant:" + inp["target"], ep.constants.get(inp["target"])
            if not isinstance(v, torch.Tensor) or dataless(v):
                v = real_value(inp["target"], v)
        else:
            continue
        if isinstance(v, torch.Tensor) and not dataless(v):
            tensors.append((name, v))
        else:
            missing.append(name)
    if missing:
        doc["capture"]["missing_values"] = missing
    return doc, tensors
