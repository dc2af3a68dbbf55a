"""Per-step graphs: a graph specialised to one step's data, checked at every step.

A forward traced as it ran (capture_dispatch.py) holds the branches and the
data-dependent sizes of that step (how many tokens each MoE expert got, a
mask-derived length, an `.item()` burnt in). A later step whose data takes
another path needs its own graph. At the end of every step the Recorder
asks a StepGraphs for the step's signature: one forward (no grad, the run's
autocast) under a dispatch mode that hashes every op with its output shapes
and every scalar read (`.item()`). A signature seen before names the graph
that fits; a new one is traced (the same trace as the capture's) and
written to /graph_steps (docs/format.md 9.1). The forward runs on the model
itself, or for a sharded model on the capture's unsharded copy, whose
values follow the run: refreshed from each parameter's local tensor when it
is the whole tensor (world 1), else from the unsharded parameters FSDP2
gathers in the step's own forward (pre-hooks; no collective of our own).

    sg = StepGraphs(model, kwargs, autocast, factory)     # after a specialised capture
    sig = sg.signature(kwargs)                            # at the end of each step
    doc, tensors = sg.capture(kwargs)                     # a new signature: the step's graph

Every failure is an exception the Recorder turns into a note.
"""
import hashlib

from .capture_source import (_capture_mode, _strip, device_copy, fill_values, forward_param_dtypes, is_sharded,
                             unwrap, _first_device)

# every constant of a per-step graph is written into its document: /buffers is fixed at the start
STEP_INLINE_LIMIT = 1 << 24


def _leaves(out):
    if isinstance(out, (list, tuple)):
        for x in out:
            yield from _leaves(x)
    else:
        yield out


def stateful_input(kwargs, prefix=""):
    """(name, type name) of the first input that is neither a tensor, a plain value nor a
    container of those (WanAnimate-2's KV cache): a forward run again to check a step's data
    sees such an object as the step left it, so its signature, and a graph traced from it,
    would not be the step's. None when every input is plain."""
    try:
        import torch
        plain = (torch.Tensor, torch.dtype, torch.device)
    except Exception:  # noqa: BLE001 - without torch: arrays and plain values
        plain = ()
    if isinstance(kwargs, dict):
        items = kwargs.items()
    elif isinstance(kwargs, (list, tuple)):
        items = ((str(i), v) for i, v in enumerate(kwargs))
    else:
        items = ()
    for k, v in items:
        name = "%s%s" % (prefix, k)
        if v is None or isinstance(v, (bool, int, float, str) + plain) or hasattr(v, "__array__"):
            continue
        if isinstance(v, (dict, list, tuple)):
            found = stateful_input(v, name + ".")
            if found:
                return found
            continue
        return name, type(v).__name__
    return None


def data_signature(model, kwargs, autocast=None):
    """Hex digest of the ops model(**kwargs) dispatches, their output shapes and every
    scalar read from a tensor: equal digests mean the same trace."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    h = hashlib.sha1()

    class Signature(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            parts = [str(func)]
            for t in _leaves(out):
                if isinstance(t, torch.Tensor):
                    parts.append(str(tuple(t.shape)))
                elif isinstance(t, (bool, int, float)):
                    parts.append(repr(t))  # _local_scalar_dense: .item() decides branches
            h.update(("|".join(parts) + ";").encode())
            return out

    amp = (torch.autocast("cuda", dtype=autocast) if autocast is not None
           else torch.autocast("cuda", enabled=False))
    with amp, torch.autocast("cpu", enabled=False), torch.no_grad(), Signature():
        model(**kwargs)
    return h.hexdigest()


def _rng_kept():
    """The job's random streams (CPU, this CUDA device) as they were after the block: the extra
    forwards never shift the run's dropout or noise."""
    import torch

    devs = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    return torch.random.fork_rng(devices=devs)


class StepGraphs:
    """The model a specialised capture traced (the model itself, or its unsharded copy
    with the run's values), its signature per step, and new traces."""

    def __init__(self, model, kwargs, autocast=None, factory=None):
        self.real = unwrap(model)
        self.autocast = autocast
        self.hooks = []
        self.partial = []
        if is_sharded(self.real):
            self.src = device_copy(self.real, factory, forward_param_dtypes(self.real), _first_device(kwargs, self.real))
            self.partial = fill_values(self.src, self.real)
            if self.partial:
                self._hook_gathered()
        else:
            self.src = self.real
        self.enabled = True  # the Recorder's gate for the hooks

    def _hook_gathered(self):
        """Forward pre-hooks after FSDP2's own unshard (which is prepended): each FSDP module's
        unsharded parameters are copied into the copy during the step's forward."""
        import torch

        try:
            from torch.distributed.fsdp import FSDPModule
        except Exception:  # noqa: BLE001
            FSDPModule = None
        dst = dict(self.src.named_parameters())
        want = set(self.partial)
        for mn, mod in self.real.named_modules():
            if FSDPModule is None or not isinstance(mod, FSDPModule):
                continue
            prefix = _strip(mn)

            def pre(m, args, prefix=prefix):
                if not self.enabled:
                    return None
                try:
                    with torch.no_grad():
                        for pn, p in m.named_parameters():
                            if type(p).__name__ == "DTensor":
                                continue  # another group's, still sharded
                            fq = _strip(prefix + "." + pn if prefix else pn)
                            d = dst.get(fq)
                            if fq in want and d is not None and tuple(d.shape) == tuple(p.shape):
                                d.data.copy_(p.detach())
                except Exception:  # noqa: BLE001 - the job's forward never fails here
                    pass
                return None

            self.hooks.append(mod.register_forward_pre_hook(pre))

    def refresh(self):
        """The run's current values into the copy (the optimizer moved them since)."""
        if self.src is not self.real:
            fill_values(self.src, self.real)

    def signature(self, kwargs):
        with _rng_kept():
            return data_signature(self.src, kwargs, self.autocast)

    def capture(self, kwargs):
        """(doc, tensors) of the step's own graph: the capture's forward trace, every constant
        inline."""
        with _rng_kept():
            return _capture_mode(self.real, kwargs, None, "dispatch", self.autocast, src_given=self.src,
                                 inline_limit=STEP_INLINE_LIMIT)

    def close(self):
        for h in self.hooks:
            try:
                h.remove()
            except Exception:  # noqa: BLE001
                pass
        self.hooks = []
        self.src = None
