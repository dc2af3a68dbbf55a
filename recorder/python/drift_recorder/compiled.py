"""torch.compile'd models (docs/recorder.md "Compiled models", docs/format.md
"/libraries": compiled, inductor_mode, compiled_modules).

A trace recorded from a compiled forward holds inductor's fused numerics;
drift replays eager semantics, so the recording says it ran compiled code
and replay states that bitwise equality is not expected. Found here:

* OptimizedModule wrappers (torch.compile(module)) anywhere in the tree,
  the root included;
* modules compiled in place (module.compile(): _compiled_call_impl);
* compiled regions inside the forward (torch.compile'd functions): dynamo
  graphs compiled in this process, counted by dynamo itself
  (dynamo_graphs(); process-wide, so named as such).

Never imports torch: a job that has not loaded torch._dynamo compiled
nothing.
"""
import contextlib
import sys

ROOT = "<model>"  # the FQN written for the recorded module itself
_WRAPPERS = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod")


def _fqn(name):
    return ".".join(p for p in name.split(".") if p and p not in _WRAPPERS) or ROOT


def is_optimized(m):
    """True for torch.compile's OptimizedModule wrapper."""
    return type(m).__name__ == "OptimizedModule" and hasattr(m, "_orig_mod")


def compiled_in_place(m):
    """True for a module compiled with module.compile()."""
    return getattr(m, "_compiled_call_impl", None) is not None


def mode_from_config(cfg):
    """torch.compile's mode from the inductor config it applies (the mode's
    patches: max_autotune, triton.cudagraphs); "" when not inductor's."""
    if not isinstance(cfg, dict):
        return ""
    ma, cg = bool(cfg.get("max_autotune")), bool(cfg.get("triton.cudagraphs"))
    if ma:
        return "max-autotune" if cg else "max-autotune-no-cudagraphs"
    return "reduce-overhead" if cg else "default"


def mode_of(m):
    """The inductor mode of a compiled module, "" when unknown."""
    for obj in (getattr(m, "dynamo_ctx", None), getattr(m, "_compiled_call_impl", None), m):
        cfg = getattr(obj, "compiler_config", None)
        if isinstance(cfg, dict):
            return mode_from_config(cfg)
    return ""


def compiled_modules(model):
    """[(fqn, mode)] of the compiled modules in model (wrapper components
    stripped; the root is "<model>")."""
    out, seen = [], set()
    try:
        mods = list(model.named_modules())
    except Exception:  # noqa: BLE001 - not a module
        return out
    for name, m in mods:
        if is_optimized(m) or compiled_in_place(m):
            f = _fqn(name)
            if f not in seen:
                seen.add(f)
                out.append((f, mode_of(m)))
    return out


def dynamo_graphs():
    """Dynamo graphs compiled in this process so far (0 when torch._dynamo is
    not loaded)."""
    if "torch._dynamo" not in sys.modules:
        return 0
    try:
        from torch._dynamo.utils import counters
        return int(counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001
        return 0


def describe(found, graphs=0):
    """(inductor_mode, modules text) for set_compiled: the modules
    comma-separated, or the process-wide region count."""
    modes = sorted({m for _, m in found if m})
    names = [f for f, _ in found]
    if not names and graphs:
        names = [f"<compiled regions: {graphs} dynamo graphs in this process>"]
    text = ", ".join(names)
    if len(text) > 1000:
        keep, n = [], 0
        for f in names:
            if n + len(f) + 2 > 950:
                break
            keep.append(f)
            n += len(f) + 2
        text = ", ".join(keep) + f", ... ({len(names) - len(keep)} more)"
    return ("/".join(modes) if modes else ""), text


def floor_note(site, step, mean_abs_diff, mean_abs):
    """The compile floor's note text (docs/format.md section 6; parsed by
    cli/compiled_out.c)."""
    return f"compile-floor v1 site={site} step={int(step)} mean_abs_diff={mean_abs_diff:.9g} mean_abs={mean_abs:.9g}"


def _children_swapped(model):
    """[(parent, name, wrapper)] for every child that is an OptimizedModule."""
    out = []
    for _, parent in model.named_modules():
        for name, child in list(getattr(parent, "_modules", {}).items()):
            if child is not None and is_optimized(child):
                out.append((parent, name, child))
    return out


@contextlib.contextmanager
def eager_for_capture(model):
    """The module tree without compile wrappers for the block: every
    OptimizedModule child replaced by its _orig_mod, every in-place compile
    switched off (restored after). Yields the root (a wrapped root's
    _orig_mod). For graph capture: no stance, torch.export runs dynamo itself."""
    root = model
    while is_optimized(root):
        root = root._orig_mod
    if not hasattr(root, "named_modules"):  # not a module (a test's stand-in): nothing to swap
        yield root
        return
    swapped = _children_swapped(root)
    for parent, name, child in swapped:
        parent._modules[name] = child._orig_mod
    impls = []
    for _, m in root.named_modules():
        if compiled_in_place(m):
            impls.append((m, m._compiled_call_impl))
            m._compiled_call_impl = None
    try:
        yield root
    finally:
        for m, impl in impls:
            m._compiled_call_impl = impl
        for parent, name, child in swapped:
            parent._modules[name] = child


@contextlib.contextmanager
def eager(model):
    """model as eager code for the block: eager_for_capture's module tree,
    under torch.compiler's "force_eager" stance where torch has it (compiled
    regions inside the forward run their Python). Yields the module to call."""
    stance = contextlib.nullcontext()
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(getattr(torch, "compiler", None), "set_stance"):
        try:
            stance = torch.compiler.set_stance("force_eager")
        except Exception:  # noqa: BLE001 - an older torch
            stance = contextlib.nullcontext()
    with eager_for_capture(model) as root, stance:
        yield root
