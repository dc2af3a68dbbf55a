"""The diffusers zoo: every transformer model class diffusers ships, built
from its own diffusers test file (issue 31).

    from zoo_models import zoo, build
    for entry in zoo():                 # one per class in diffusers.models.transformers
        model, kwargs, main = build(entry)   # seeded weights, the test's dummy inputs

The classes are the ModelMixin subclasses that
`diffusers.models.transformers` exports. Each class's configuration is read
from the diffusers test module that names it (tests/models/transformers/
test_models_*.py: a config class with `model_class`, `get_init_dict()` and
`get_dummy_inputs()`), imported from the diffusers checkout's tests folder
(DIFFUSERS_TESTS, default <repo>/.pydeps/dtests) with any import it needs
that this machine lacks replaced by an empty stand-in module: the configs
are read, not copied. A class no model test names is built from the diffusers
pipeline test that constructs it, or from drift's own configuration where
diffusers ships none (zoo_pipeline_configs.py; entry["test"] says which, and
that the inputs are drift's); a class with neither has entry["error"].

    python3 tests/gpu/zoo_models.py --list-configs   # those classes' configs and inputs, no torch

The plain-PyTorch DiTs of plain_dits.py join the zoo as "plain:NAME".
"""
import importlib
import importlib.abc
import importlib.machinery
import inspect
import os
import re
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..", "..")
TESTS_ROOT = os.environ.get("DIFFUSERS_TESTS", os.path.join(REPO, ".pydeps", "dtests"))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import zoo_pipeline_configs  # noqa: E402


def _decorator(*a, **k):
    """Any attribute of a stand-in: a decorator (@x.y) or a decorator factory (@x.y(args))."""
    if len(a) == 1 and not k and callable(a[0]):
        return a[0]
    return lambda f: f


class _AnyAttr(type):
    """Metaclass of the stand-in classes: every attribute is a decorator
    (`parameterized.expand([...])`, `pytest.mark.skipif(...)`)."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _decorator


class _Stub(types.ModuleType):
    """A module that has every attribute: a callable stand-in class."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _AnyAttr(name, (), {"__init__": lambda self, *a, **k: None, "__call__": lambda self, *a, **k: None})


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Provides a _Stub for the modules in `names` (added as imports fail)."""

    names = set()

    def find_spec(self, fullname, path, target=None):
        if fullname in self.names or any(fullname.startswith(n + ".") for n in self.names):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _Stub(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


_finder = _StubFinder()


def _import_test_module(name):
    """Imports tests.models.transformers.<name>, stubbing missing imports."""
    if TESTS_ROOT not in sys.path:
        sys.path.insert(0, TESTS_ROOT)
    if _finder not in sys.meta_path:
        sys.meta_path.append(_finder)
    os.environ.setdefault("DIFFUSERS_TEST_DEVICE", "cuda")
    full = "tests.models.transformers." + name
    for _ in range(25):
        try:
            return importlib.import_module(full)
        except ModuleNotFoundError as e:
            missing = e.name
            if not missing or missing in _StubFinder.names or missing.startswith("diffusers") or \
                    missing.startswith("tests"):
                raise
            _StubFinder.names.add(missing.split(".")[0] if missing.split(".")[0] not in ("torch",) else missing)
            for k in [k for k in sys.modules if k == full or k.startswith("tests.models.transformers.")]:
                sys.modules.pop(k, None)
    raise ImportError("too many missing imports in " + full)


def model_classes():
    """[(name, class)] of the ModelMixin classes diffusers.models.transformers exports."""
    import diffusers.models.transformers as T
    from diffusers.models.modeling_utils import ModelMixin

    out = []
    src = open(T.__file__).read()
    for line in src.splitlines():
        line = line.strip()
        if line.startswith("from .") and " import " in line:
            for nm in line.split(" import ", 1)[1].split(","):
                nm = nm.strip()
                cls = getattr(T, nm, None)
                if inspect.isclass(cls) and issubclass(cls, ModelMixin):
                    out.append((nm, cls))
    return out


def _configs():
    """{model class name: (test module, config class)}: the first config class of
    each test module that names a model class."""
    d = os.path.join(TESTS_ROOT, "tests", "models", "transformers")
    out, errors = {}, {}
    for fn in sorted(os.listdir(d)):
        if not (fn.startswith("test_") and fn.endswith(".py")):
            continue
        try:
            mod = _import_test_module(fn[:-3])
        except Exception as e:  # noqa: BLE001
            errors[fn] = "%s: %s" % (type(e).__name__, str(e)[:200])
            sys.stderr.write("zoo: %s failed to import: %s\n" % (fn, errors[fn]))
            continue
        for _, c in inspect.getmembers(mod, inspect.isclass):
            if c.__module__ != mod.__name__ or not hasattr(c, "get_init_dict") or not hasattr(c, "get_dummy_inputs"):
                continue
            try:
                inst = c.__new__(c)
                mc = inst.model_class
            except Exception:  # noqa: BLE001
                continue
            if inspect.isclass(mc):
                # the configuration class itself before the test classes built on it
                # and the base-most configuration (FluxTransformerTesterConfig, not its SDNQ
                # subclass whose dummy inputs fit a quantized Hub checkpoint)
                prev = out.get(mc.__name__)
                test_c = c.__name__.startswith("Test")
                if prev is None or (prev[1].__name__.startswith("Test") and not test_c) or \
                        (not test_c and prev[1] is not c and issubclass(prev[1], c)):
                    out[mc.__name__] = (fn, c)
    # a class the tests build only through from_config(init_dict) of another class's
    # configuration (Transformer2DModel remaps a DiT config to DiTTransformer2DModel)
    for fn in sorted(os.listdir(d)):
        if not (fn.startswith("test_") and fn.endswith(".py")) or fn in errors:
            continue
        src = open(os.path.join(d, fn)).read()
        base = next((v for v in out.values() if v[0] == fn), None)
        for name in re.findall(r"(\w+)\.from_config\(init_dict\)", src):
            if base and name not in out and name != "self":
                out[name] = (fn, base[1], "from_config")
    return out, errors


def zoo():
    """[entry]: {"tag", "class", "test", "config"} or {"tag", "error"}, one per
    diffusers transformer class, then the plain-PyTorch DiTs."""
    configs, errors = _configs()
    out = []
    for name, cls in model_classes():
        if name in configs:
            fn, c = configs[name][:2]
            out.append({"tag": name, "class": cls, "test": fn, "config": c,
                        "from_config": len(configs[name]) > 2})
        elif name in zoo_pipeline_configs.SPECS:
            out.append(zoo_pipeline_configs.entry_for(name, cls))
        else:
            out.append({"tag": name, "class": cls, "error": "no diffusers test configuration names it" + (
                " (%d test modules failed to import; first: %s)" % (len(errors), "; ".join(
                    "%s: %s" % (k, errors[k]) for k in sorted(errors)[:2])) if errors else "")})
    import plain_dits
    for name in plain_dits.MODELS:
        out.append({"tag": "plain:" + name, "plain": name})
    return out


def seed_params(model, seed):
    """Seeded, non-trivial weights (norm weights away from 1, biases non-zero)."""
    import torch

    gen = torch.Generator("cpu").manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not p.is_floating_point():
                continue
            if p.ndim <= 1 or name.endswith("scale_shift_table"):
                v = (1.0 + 0.1 * torch.randn(p.shape, generator=gen) if "norm" in name and name.endswith("weight")
                     else 0.05 * torch.randn(p.shape, generator=gen))
            else:
                v = torch.randn(p.shape, generator=gen) / max(1, p[0].numel()) ** 0.5
            p.copy_(v.to(p.dtype))


def _glm_image_prior_per_token(m, kw):
    """GlmImage's prior tokens are one per image token, [B, (H/p)(W/p)] as its pipeline builds them
    (pipeline_glm_image.py: prior_token_ids "(batch_size, num_tokens)"); the diffusers test gives one
    per sample ([B]), which adds a [B, D] embedding to [B, L, D]: that broadcasts at batch 1 only."""
    import torch

    p = m.config.patch_size
    _, _, h, w = kw["hidden_states"].shape
    n = (h // p) * (w // p)
    for k in ("prior_token_id", "prior_token_drop"):
        v = kw.get(k)
        if isinstance(v, torch.Tensor) and v.ndim == 1:
            kw[k] = v[:, None].expand(-1, n).contiguous()
    return kw


# Inputs a diffusers test config builds in a form that works at its own batch size only,
# corrected to the form the model's pipeline passes (used by the recording and the torch side alike).
INPUT_FIXES = {"GlmImageTransformer2DModel": _glm_image_prior_per_token}


def build(entry, seed=7):
    """(model fp32 eval, kwargs on cuda, main input name) of a zoo entry."""
    import torch

    if "plain" in entry:
        import plain_dits
        torch.manual_seed(0)
        m, kw = plain_dits.build(entry["plain"])
        main = "x" if "x" in kw else next(iter(kw))
    elif entry.get("pipeline"):  # no model test: a pipeline test's configuration (or drift's), drift's inputs
        torch.manual_seed(0)
        m, kw, main = zoo_pipeline_configs.build(entry)
    else:
        c = entry["config"]
        inst = c()
        torch.manual_seed(0)
        if entry.get("from_config"):  # the class remaps the configuration to another (its test's own use)
            m = entry["class"].from_config(inst.get_init_dict())
        else:
            m = entry["class"](**inst.get_init_dict())
        kw = inst.get_dummy_inputs()
        main = getattr(inst, "main_input_name", None) or "hidden_states"
    seed_params(m, seed)
    m = m.to("cuda").float().eval()
    for p in m.parameters():
        p.requires_grad_(False)

    def dev(v):
        if isinstance(v, torch.Tensor):
            v = v.to("cuda")
            return v.float() if v.is_floating_point() else v
        if isinstance(v, dict):
            return {k: dev(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return type(v)(dev(x) for x in v) if not hasattr(v, "_fields") else type(v)(*[dev(x) for x in v])
        return v

    kw = dev(kw)
    fix = INPUT_FIXES.get(entry.get("tag", ""))
    if fix:
        kw = fix(m, kw)
    kw.setdefault("return_dict", False) if "return_dict" in inspect.signature(m.forward).parameters else None
    return m, kw, main


if __name__ == "__main__":
    if sys.argv[1:2] == ["--list-configs"]:
        sys.exit(zoo_pipeline_configs.main(sys.argv[1:]))
    sys.exit("usage: python3 tests/gpu/zoo_models.py --list-configs [--tests-root DIR] [--diffusers-src DIR]")
