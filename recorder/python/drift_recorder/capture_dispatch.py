"""The capture that never gives up: a trace of the forward as it ran.

When torch.export fails (a data-dependent shape such as a mask-derived
length, a tensor subclass in the fake copy, `.numpy()` on a fake tensor),
the Recorder traces one forward of the model with the real tensors of that
step instead: make_fx at the pre-dispatch level (the ops the model code
called, above autocast, as torch.export records them), tracing_mode "real",
so every data-dependent decision takes the branch the run took and every
shape is the step's concrete shape. The graph is specialised to those
shapes; /graph says so ("capture": {"mode": "dispatch", "specialized":
true}) and drift's replay refuses a step whose inputs have other shapes.

Parameters and buffers are the graph's leading placeholders (by FQN, through
torch.func.functional_call), then one placeholder per tensor leaf of the
forward's kwargs; Python values in the kwargs are constants of the trace.
Module paths come from forward hooks on every submodule while the trace
runs (the nodes created inside a module carry its stack).

    ep_like, user_leaves, seconds = trace_forward(model, kwargs, autocast)

Raises CaptureError on failure.
"""
import contextlib
import time

from .capture import CaptureError, flatten_inputs
from .capture_contiguous import contiguous_kept


def _data_as_detach():
    """A TorchFunctionMode that reads `t.data` as `t.detach()` while the trace runs.

    `.data` makes an alias the trace cannot see (no dispatched op): a write through
    it (CogVideoX's patch embedding fills `joint.data[:, n:]` with its positional
    table) lands in a lifted constant and the graph reads the untouched original.
    detach is the same alias as an op, so the write reaches its root in the graph
    (drift's importer versions a root written through any view). Same values: the
    trace runs on the real tensors under no_grad. None when torch lacks the modes."""
    try:
        import torch
        from torch.overrides import TorchFunctionMode
    except Exception:  # noqa: BLE001
        return None
    data_get = torch.Tensor.data.__get__

    class DataAsDetach(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func == data_get and len(args) == 1 and isinstance(args[0], torch.Tensor):
                return args[0].detach()
            return func(*args, **(kwargs or {}))

    return DataAsDetach()


class _ModuleStack:
    """Forward pre/post hooks on every submodule: the current module stack,
    attached to each FX node created meanwhile as nn_module_stack."""

    def __init__(self, model, fqn_of):
        self.model = model
        self.fqn_of = fqn_of
        self.stack = []
        self.hooks = []
        self._orig = None

    def __enter__(self):
        import torch

        for name, mod in self.model.named_modules():
            if not name:
                continue
            fq = self.fqn_of(name)
            cls = type(mod).__name__

            def pre(m, args, fq=fq, cls=cls):
                self.stack.append((fq, cls))

            def post(m, args, out):
                if self.stack:
                    self.stack.pop()

            self.hooks.append(mod.register_forward_pre_hook(pre))
            self.hooks.append(mod.register_forward_hook(post))
        graph_cls = torch.fx.Graph
        self._orig = graph_cls.create_node
        me = self

        def create_node(graph, *a, **kw):
            node = me._orig(graph, *a, **kw)
            if me.stack:
                node.meta["nn_module_stack"] = {"m%d" % i: (p, c) for i, (p, c) in enumerate(me.stack)}
            return node

        graph_cls.create_node = create_node
        return self

    def __exit__(self, *exc):
        import torch

        if self._orig is not None:
            torch.fx.Graph.create_node = self._orig
        for h in self.hooks:
            h.remove()
        return False


class _Spec:
    """Duck-typed stand-ins of torch.export's input and output specs."""

    def __init__(self, kind, name, target=None, persistent=True):
        self.kind = kind
        self.arg = type("Arg", (), {"name": name})()
        self.target = target
        self.persistent = persistent


class TracedProgram:
    """What describe() reads of an ExportedProgram, for a make_fx trace."""

    def __init__(self, gm, input_specs, output_specs):
        self.graph_module = gm
        self.graph = gm.graph
        self.graph_signature = type("Sig", (), {"input_specs": input_specs, "output_specs": output_specs})()
        self.constants = {}
        self.state_dict = {}


def trace_forward(model, kwargs, autocast=None, fqn_of=lambda n: n, tap=None):
    """(TracedProgram, user_leaves [(path, value)], seconds) of one real
    forward of model(**kwargs) under autocast (a torch dtype or None)."""
    import torch
    from torch.export.graph_signature import InputKind, OutputKind
    from torch.fx.experimental.proxy_tensor import make_fx
    import torch.utils._pytree as pytree

    params = [(n, p) for n, p in model.named_parameters()]
    bufs = [(n, b) for n, b in model.named_buffers()]
    leaves = flatten_inputs(kwargs)
    tensor_pos = [i for i, (_, v) in enumerate(leaves) if isinstance(v, torch.Tensor)]
    user = [leaves[i] for i in tensor_pos]

    def rebuild(v, it):
        if isinstance(v, dict):
            return {k: rebuild(x, it) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            items = [rebuild(x, it) for x in v]
            return type(v)(*items) if hasattr(v, "_fields") else type(v)(items)
        return next(it)

    n_p, n_b = len(params), len(bufs)

    def fn(*flat):
        state = {n: flat[i] for i, (n, _) in enumerate(params)}
        state.update({n: flat[n_p + i] for i, (n, _) in enumerate(bufs)})
        vals = [v for _, v in leaves]
        for j, i in enumerate(tensor_pos):
            vals[i] = flat[n_p + n_b + j]
        kw = rebuild(kwargs, iter(vals))
        out = torch.func.functional_call(model, state, (), kw)
        if hasattr(out, "to_tuple"):
            out = out.to_tuple()
        return tuple(x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor))

    amp = (torch.autocast("cuda", dtype=autocast) if autocast is not None
           else torch.autocast("cuda", enabled=False))
    args = [p for _, p in params] + [b for _, b in bufs] + [v for _, v in user]
    t0 = time.perf_counter()
    try:
        with amp, torch.autocast("cpu", enabled=False), torch.no_grad(), \
                _ModuleStack(model, fqn_of), (tap or contextlib.nullcontext()), \
                (_data_as_detach() or contextlib.nullcontext()), contiguous_kept():
            # a .item() / data-dependent value is read from the real tensor and burnt in: the
            # trace is specialised to this step (what "never gives up" means)
            gm = make_fx(fn, tracing_mode="real", pre_dispatch=True, _error_on_data_dependent_ops=False)(*args)
    except Exception as e:  # noqa: BLE001
        raise CaptureError("dispatch trace failed: %s: %s" % (type(e).__name__,
                                                                (str(e).splitlines() or [""])[0][:300]))
    seconds = time.perf_counter() - t0
    try:  # the scalar reads burnt in above leave nodes nothing uses (aten._local_scalar_dense)
        gm.graph.eliminate_dead_code()
    except Exception:  # noqa: BLE001
        pass
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(phs) != len(args):
        raise CaptureError("dispatch trace: %d placeholders for %d inputs" % (len(phs), len(args)))
    constants = _lift_constants(gm, phs[n_p + n_b] if len(phs) > n_p + n_b else None)
    specs = []
    for i, n in enumerate(phs[:n_p + n_b]):
        if i < n_p:
            specs.append(_Spec(InputKind.PARAMETER, n.name, fqn_of(params[i][0])))
        else:
            specs.append(_Spec(InputKind.BUFFER, n.name, fqn_of(bufs[i - n_p][0])))
    for ph, target in constants:
        specs.append(_Spec(InputKind.CONSTANT_TENSOR, ph.name, target))
    for i, n in enumerate(phs[n_p + n_b:]):
        specs.append(_Spec(InputKind.USER_INPUT, n.name, user[i][0]))
    outn = [n for n in gm.graph.nodes if n.op == "output"]
    outs = outn[0].args[0] if outn else []
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    ospecs = [_Spec(OutputKind.USER_OUTPUT, getattr(o, "name", None)) for o in outs]
    prog = TracedProgram(gm, specs, ospecs)
    prog.constants = {target: ph.meta["val"] for ph, target in constants}
    return prog, user, seconds


def _lift_constants(gm, before):
    """Turns the trace's tensor attributes (torch.tensor(...) made inside the forward, a RoPE
    table: get_attr nodes `_tensor_constantN`) into constant placeholders after the buffers, as
    torch.export lifts them. [(placeholder, target)]; the placeholder's meta "val" is the value."""
    import torch

    out = []
    anchor = before
    if anchor is None:
        anchor = next(n for n in gm.graph.nodes if n.op != "placeholder")
    for n in list(gm.graph.nodes):
        if n.op != "get_attr":
            continue
        v = gm
        for part in str(n.target).split("."):
            v = getattr(v, part, None)
        if not isinstance(v, torch.Tensor):
            continue  # a submodule of a higher-order region: read where it is called
        with gm.graph.inserting_before(anchor):
            ph = gm.graph.placeholder("c_" + n.name)
        ph.meta.update(n.meta)
        ph.meta["val"] = v.detach()
        n.replace_all_uses_with(ph)
        gm.graph.erase_node(n)
        out.append((ph, str(n.target)))
    return out
