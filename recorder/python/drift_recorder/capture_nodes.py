"""The node list of a drift-aten-graph document (docs/aten-graph.md "Nodes"),
from an exported program's FX graph, with three rewrites:

* higher-order regions inlined: `wrap_with_autocast` (an autocast region of
  the model code) and `wrap_with_set_grad_enabled` call a submodule; its nodes
  are written in place of the call (names prefixed with the call's), each
  with "autocast": {"enabled", "dtype"} of the innermost CUDA autocast region
  it ran in, and the call becomes a `drift.tuple` of the submodule's outputs
  (the `getitem`s that read it stay). `_enter_autocast` / `_exit_autocast`
  pairs (an unwrapped region) mark the nodes between them the same way;
* composites outside drift's opset decomposed (capture_decompose.py): their
  nodes carry "decomposed_from" {"node", "target"}, and an `aten.alias` (or
  a `drift.tuple`) under the original name holds the result;
* everything else written as it is.

    em = NodeEmitter(graph_module, device_alias, autocast=torch.bfloat16)
    nodes = em.emit(graph_module.graph)
    em.summary()   # {"decomposed": {target: count}, "regions": n, "left_whole": {target: count}}
"""
from . import capture_decompose as _dec

HOP_AUTOCAST = "wrap_with_autocast"
HOP_GRAD = "wrap_with_set_grad_enabled"
ENTER_AUTOCAST = "_enter_autocast"
CONSTANT_LIMIT = 4096  # elements of a composite's tensor constant written inline
EXIT_AUTOCAST = "_exit_autocast"


def _op_name(target):
    """A higher-order op's or function's short name."""
    n = getattr(target, "_name", None) or getattr(target, "__name__", None)
    return str(n) if n is not None else str(target)


class NodeEmitter:
    def __init__(self, root, device_alias=None, autocast=None, decompose=True, keep=None):
        self.root = root
        self.alias = device_alias
        self.autocast = autocast            # the export's ambient autocast dtype, or None
        self.decompose = decompose
        self.keep = keep                    # opset override (tests); None: opset.txt
        self.out = []
        self.decomposed = {}
        self.left_whole = {}
        self.regions = 0

    # ------------------------------------------------------------ encoding
    def _enc(self, a, env):
        import torch

        if isinstance(a, torch.fx.Node):
            return env.get(a, {"node": a.name})
        if isinstance(a, (list, tuple)):
            return [self._enc(x, env) for x in a]
        if isinstance(a, dict):
            return {"dict": {str(k): self._enc(x, env) for k, x in a.items()}}
        from .capture import _arg
        return _arg(a, self.alias)

    def _node(self, name, n, target, args, kwargs, env, info=None, region=None, extra=None, val=None,
              encoded=False):
        """Writes one call node; args/kwargs are FX arguments (encoded through
        env) or, with encoded=True, already in the document's encoding."""
        from .capture import _module_info, _val

        module, stack, classes = info if info is not None else _module_info(n)
        d = {"name": name, "op": "call_function", "target": target,
             "args": list(args) if encoded else [self._enc(a, env) for a in args],
             "kwargs": dict(kwargs) if encoded else {k: self._enc(v, env) for k, v in kwargs.items()},
             "val": _val(val if val is not None else n.meta.get("val")),
             "module": module, "module_stack": stack, "module_classes": classes}
        if region is not None:
            d["autocast"] = region
        if extra:
            d.update(extra)
        self.out.append(d)
        return {"node": name}

    # ------------------------------------------------------------ regions
    def _effective(self, region):
        """The autocast dtype in force under region (a model-code region or the ambient one)."""
        import torch

        if region is None:
            return self.autocast
        if not region.get("enabled"):
            return None
        dt = region.get("dtype")
        return {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(dt, self.autocast)

    @staticmethod
    def _region_of(device_type, dtype, enabled):
        from .capture import _dtype_name

        if str(device_type) != "cuda":
            return None  # a CPU autocast region does not touch CUDA tensors
        return {"enabled": bool(enabled), "dtype": _dtype_name(dtype) if dtype is not None else None}

    # ------------------------------------------------------------ walk
    def emit(self, graph):
        self._walk(graph, self.root, "", None, None)
        return self.out

    def summary(self):
        return {"decomposed": dict(sorted(self.decomposed.items())), "regions": self.regions,
                "left_whole": dict(sorted(self.left_whole.items()))}

    def _walk(self, graph, owner, prefix, inputs, region, info=None, origin=None):
        """Writes graph's nodes; returns the encoded outputs when inputs (the
        encoded values of its placeholders) are given, else writes the
        output node too."""
        import torch
        from .capture import _module_info, _target_name, _val

        env = {}
        stack = []  # _enter_autocast regions open in this graph
        ph = 0
        for n in graph.nodes:
            cur = stack[-1] if stack else region
            name = prefix + n.name
            if n.op == "placeholder":
                if inputs is None:
                    m, s, c = _module_info(n)
                    self.out.append({"name": n.name, "op": "placeholder", "target": n.name, "args": [],
                                     "kwargs": {}, "val": _val(n.meta.get("val")), "module": m,
                                     "module_stack": s, "module_classes": c})
                else:
                    env[n] = inputs[ph] if ph < len(inputs) else None
                ph += 1
                continue
            if n.op == "get_attr":
                sub = getattr(owner, str(n.target), None)
                if isinstance(sub, torch.fx.GraphModule):
                    env[n] = ("submodule", sub)  # read by the higher-order call below
                    continue
                if isinstance(sub, torch.Tensor) and sub.numel() <= CONSTANT_LIMIT and inputs is not None:
                    env[n] = self._constant(name, n, sub, info, region, origin)
                    continue
                m, s, c = _module_info(n)
                self.out.append({"name": name, "op": "get_attr", "target": str(n.target), "args": [], "kwargs": {},
                                 "val": _val(n.meta.get("val")), "module": m, "module_stack": s,
                                 "module_classes": c})
                env[n] = {"node": name}
                continue
            if n.op == "output":
                outs = n.args[0] if n.args else []
                if inputs is not None:
                    return [self._enc(o, env) for o in (outs if isinstance(outs, (list, tuple)) else [outs])]
                self.out.append({"name": n.name, "op": "output", "target": "output",
                                 "args": [self._enc(a, env) for a in n.args], "kwargs": {}, "val": None,
                                 "module": "", "module_stack": [], "module_classes": []})
                continue
            if n.op != "call_function":
                self.out.append({"name": name, "op": n.op, "target": _target_name(n.target), "args": [],
                                 "kwargs": {}, "val": None, "module": "", "module_stack": [], "module_classes": []})
                env[n] = {"node": name}
                continue
            op = _op_name(n.target)
            if op in (HOP_AUTOCAST, HOP_GRAD):
                env[n] = self._inline(n, name, owner, env, cur, op == HOP_AUTOCAST)
                continue
            if op == ENTER_AUTOCAST:
                a = list(n.args) + [None] * 4
                r = self._region_of(a[0], a[1], a[2] if a[2] is not None else True)
                stack.append(r if r is not None else cur)
                self.regions += 1
                env[n] = None
                continue
            if op == EXIT_AUTOCAST:
                if stack:
                    stack.pop()
                env[n] = None
                continue
            node_info = info if info is not None else None
            extra = {"decomposed_from": origin} if origin else None
            if origin is None and self.decompose and _dec.wants_decomposition(n.target, self.keep):
                res = _dec.trace(n, self._effective(cur))
                if res is not None:
                    env[n] = self._splice(n, name, res, env, cur)
                    continue
                t = _target_name(n.target)
                self.left_whole[t] = self.left_whole.get(t, 0) + 1
            env[n] = self._node(name, n, _target_name(n.target), n.args, n.kwargs, env, info=node_info,
                                region=cur, extra=extra)
        return []

    def _constant(self, name, n, t, info, region, origin):
        """A tensor constant of a traced composite, written inline (drift.constant)."""
        from .capture import _arg, _dtype_name

        t = t.detach().to("cpu") if t.device.type != "meta" else None
        if t is None:
            return {"node": name}
        data = [_arg(x) for x in t.reshape(-1).tolist()]
        kw = {"shape": list(t.shape), "dtype": {"dtype": _dtype_name(t.dtype)}, "data": data}
        return self._node(name, n, "drift.constant", [], kw, {}, info=info, region=region,
                          extra={"decomposed_from": origin} if origin else None, encoded=True,
                          val=t)

    def _inline(self, n, name, owner, env, cur, is_autocast):
        """A higher-order region call: its submodule's nodes in place, then a drift.tuple of its outputs."""
        args = list(n.args)
        k = 4 if is_autocast else 1
        if len(args) <= k:
            return self._node(name, n, _op_name(n.target), n.args, n.kwargs, env, region=cur)
        sub = env.get(args[k]) if hasattr(args[k], "op") else None
        if not (isinstance(sub, tuple) and sub and sub[0] == "submodule"):
            return self._node(name, n, _op_name(n.target), n.args, n.kwargs, env, region=cur)
        gm = sub[1]
        region = cur
        if is_autocast:
            r = self._region_of(args[0], args[1], args[2])
            region = r if r is not None else cur
        self.regions += 1
        ins = [self._enc(a, env) for a in args[k + 1:]]
        outs = self._walk(gm.graph, gm, name + "__", ins, region)
        return self._node(name, n, "drift.tuple", [outs], {}, {}, region=cur, encoded=True)

    def _splice(self, n, name, res, env, cur):
        """n replaced by the nodes of its traced composite (res = (gm, inputs))."""
        from .capture import _module_info

        gm, ins = res
        t = str(n.target)
        self.decomposed[t] = self.decomposed.get(t, 0) + 1
        origin = {"node": name, "target": t}
        outs = self._walk(gm.graph, gm, name + "__", [env.get(x, {"node": x.name}) for x in ins], cur,
                          info=_module_info(n), origin=origin)
        info = _module_info(n)
        if len(outs) == 1 and not isinstance(n.meta.get("val"), (list, tuple)):
            return self._node(name, n, "aten.alias.default", [outs[0]], {}, {}, info=info, region=cur,
                              extra={"decomposed_from": origin}, encoded=True)
        return self._node(name, n, "drift.tuple", [outs], {}, {}, info=info, region=cur,
                          extra={"decomposed_from": origin}, encoded=True)
