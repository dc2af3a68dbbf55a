"""Which graph node is a module's recorded output (docs/aten-graph.md, "module_outputs").

The Recorder records a module's site `M:out` from the first tensor of what
the module returned (output_tensors(out)[0]). For a module that returns
several tensors (diffusers' rotary embeddings return (cos, sin); joint
blocks return (encoder_hidden_states, hidden_states)) the exported graph
alone does not say which of the values leaving the module was that first
tensor. OutputTap watches the modules while torch.export traces them and
writes, per module that returned several tensors, the graph nodes of those
tensors in this order; drift's importer maps `M:out` to the first one.

No torch is imported here until a trace asks for a node.
"""


def output_tensors(out):
    """The tensors of a module's output in the order the Recorder walks them:
    tuples and lists in order, dicts by value in insertion order, a
    diffusers output (`.sample`) through its sample."""
    if hasattr(out, "data_ptr") or hasattr(out, "__array_interface__"):
        return [out]
    found = []
    if isinstance(out, (tuple, list)):
        for o in out:
            found.extend(output_tensors(o))
    elif isinstance(out, dict):
        for o in out.values():
            found.extend(output_tensors(o))
    elif hasattr(out, "sample"):  # diffusers' Transformer2DModelOutput
        found.extend(output_tensors(out.sample))
    return found


def remove_hooks(hooks):
    """Removes every hook handle in hooks (a list, emptied); a handle that
    fails to remove is skipped: removal never raises into the training job."""
    for h in hooks:
        try:
            h.remove()
        except Exception:  # noqa: BLE001
            pass
    del hooks[:]


def first_tensor(out):
    """The tensor the Recorder records as a module's output, or None."""
    ts = output_tensors(out)
    return ts[0] if ts else None


def proxy_node(t):
    """The FX node torch.export's tracer made for tensor t, or None (outside a
    trace, or a tensor the tracer does not know)."""
    try:
        from torch.fx.experimental import proxy_tensor as pt

        mode = pt.get_proxy_mode()
        if mode is None:
            return None
        slot = pt.get_proxy_slot(t, mode.tracer, None)
    except Exception:  # noqa: BLE001  (an internal API: absent or changed means "not known")
        return None
    return getattr(getattr(slot, "proxy", None), "node", None)


def _shape(x):
    try:
        return tuple(int(d) for d in x.shape)
    except Exception:  # noqa: BLE001
        return None


class OutputTap:
    """Forward hooks on every submodule of model while it is exported.

        tap = OutputTap(model, fqn_of)
        with tap:
            ep = torch.export.export(model, ...)
        doc["module_outputs"] = tap.module_outputs(ep.graph)

    fqn_of(name) turns a named_modules() name into the module path the
    graph's nodes carry. node_of(tensor) finds a tensor's FX node (proxy_node;
    tests pass their own). A module called several times keeps its last call,
    as the importer's last-value rule does."""

    def __init__(self, model, fqn_of=lambda n: n, node_of=proxy_node):
        self.model = model
        self.fqn_of = fqn_of
        self.node_of = node_of
        self.seen = {}  # module path -> [(node or None, shape)] of a call that returned several tensors
        self.ok = False  # hooks were in place for the whole export
        self._hooks = []

    def __enter__(self):
        try:
            for name, m in self.model.named_modules():
                if name:
                    self._hooks.append(m.register_forward_hook(self._hook(self.fqn_of(name))))
            self.ok = True
        except Exception:  # noqa: BLE001  (no tap: the document says nothing, the importer stays cautious)
            self.ok = False
        return self

    def __exit__(self, *exc):
        remove_hooks(self._hooks)
        return False

    def _hook(self, fqn):
        def hook(module, args, output):
            try:
                ts = output_tensors(output)
                if len(ts) >= 2:
                    self.seen[fqn] = [(self.node_of(t), _shape(t)) for t in ts]
            except Exception:  # noqa: BLE001
                self.seen[fqn] = [(None, None), (None, None)]  # several, not matched
            return None
        return hook

    def module_outputs(self, graph):
        """{module path: [node name or None, ...]} over graph (the exported
        program's), or None when the tap did not run. A node the trace made
        is found by identity, else by name when that node has the tensor's
        shape; anything else is None (the importer then leaves the site
        unmapped rather than guess)."""
        if not self.ok:
            return None
        nodes = list(graph.nodes)
        by_id = {id(n): n.name for n in nodes}
        by_name = {n.name: n for n in nodes}
        out = {}
        for fqn, entries in self.seen.items():
            names = []
            for node, shape in entries:
                name = by_id.get(id(node)) if node is not None else None
                if name is None and node is not None:
                    cand = by_name.get(getattr(node, "name", None))
                    val = cand.meta.get("val") if cand is not None else None
                    if val is not None and shape is not None and _shape(val) == shape:
                        name = cand.name
                names.append(name)
            out[fqn] = names
        return out
