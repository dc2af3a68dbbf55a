"""Zoo entries for the diffusers transformer classes that no diffusers *model* test
configures (issue 31).

A class that tests/models/transformers/ never names is built from

* the keyword arguments of the call that constructs it in get_dummy_components of
  the diffusers *pipeline* test that uses it, read with ast and literal-evaluated
  (the test module is never imported: it pulls in transformers and Hub downloads);
  local names bound to literals (module level, function defaults, earlier
  assignments) are followed, anything else is an error naming file, line and
  keyword;
* or, where diffusers ships no configuration of the class at all, drift's own
  configuration: the class's defaults scaled down (marked as such).

Pipeline tests give no forward inputs: each class has a small input builder
here, shaped from the configuration and the forward signature the way the
class's pipeline calls it. The builders return torch-free specs (T), so the
shapes can be listed without torch:

    python3 tests/gpu/zoo_pipeline_configs.py --list-configs \\
        [--tests-root DIR] [--diffusers-src DIR]

prints per class the source, the init dict (every key checked against the
class's __init__ in the diffusers source) and the inputs (names checked
against its forward). Exit 1 if a configuration cannot be read or a check fails.
"""
import argparse
import ast
import operator
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..", "..")
TESTS_ROOT = os.environ.get("DIFFUSERS_TESTS", os.path.join(REPO, ".pydeps", "dtests"))
INPUTS_NOTE = "inputs: drift's builder from the forward signature (tests/gpu/zoo_pipeline_configs.py)"


class ConfigError(Exception):
    pass


# ---------------------------------------------------------------- tensor specs

class T:
    """A forward input described without torch: kind randn | ones | zeros |
    arange | value | mask | additive_mask | rope1d, a shape, a dtype name."""

    def __init__(self, kind, shape, dtype="float32", **arg):
        self.kind, self.shape, self.dtype, self.arg = kind, tuple(int(s) for s in shape), dtype, arg

    def __repr__(self):
        extra = "".join(" %s=%s" % kv for kv in sorted(self.arg.items()) if kv[0] != "values")
        if self.kind == "value":
            extra = " %s" % (self.arg["values"],)
        if self.kind == "rope1d":
            return "rope1d (cos, sin) each %s %s" % (list(self.shape), self.dtype)
        return "%s%s %s%s" % (self.kind, list(self.shape), self.dtype, extra)


def materialize(v, gen):
    """The spec tree with every T made a CPU tensor (randn from gen)."""
    import torch

    if isinstance(v, T):
        dt = getattr(torch, v.dtype)
        if v.kind == "randn":
            return torch.randn(v.shape, generator=gen).to(dt)
        if v.kind == "ones":
            return torch.ones(v.shape, dtype=dt)
        if v.kind == "zeros":
            return torch.zeros(v.shape, dtype=dt)
        if v.kind == "arange":
            return torch.arange(v.shape[0], dtype=dt)
        if v.kind == "value":
            return torch.tensor(v.arg["values"], dtype=dt)
        if v.kind == "mask":  # 1 on the first `valid` entries of the last dim, 0 after (padding)
            m = torch.zeros(v.shape, dtype=dt)
            m[..., :v.arg["valid"]] = 1
            return m
        if v.kind == "additive_mask":  # what UNet2DConditionModel makes of a 0/1 mask: (1 - m) * -10000
            m = torch.zeros(v.shape, dtype=dt)
            m[..., v.arg["valid"]:] = -10000.0
            return m
        if v.kind == "rope1d":  # (cos, sin), as StableAudioPipeline builds rotary_embedding
            from diffusers.models.embeddings import get_1d_rotary_pos_embed
            seq, dim = v.shape
            return get_1d_rotary_pos_embed(dim, seq, use_real=True, repeat_interleave_real=False)
        raise ValueError("unknown input kind %r" % v.kind)
    if isinstance(v, dict):
        return {k: materialize(x, gen) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(materialize(x, gen) for x in v)
    return v


# ---------------------------------------------------------------- ast reading

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNOPS = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}


def _lit(node, env, where):
    """The value of a literal expression; names are looked up in env."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        if any(isinstance(e, ast.Starred) for e in node.elts):
            raise ConfigError("%s: %s: a starred element is not a literal" % (where, ast.unparse(node)))
        vals = [_lit(e, env, where) for e in node.elts]
        return tuple(vals) if isinstance(node, ast.Tuple) else set(vals) if isinstance(node, ast.Set) else vals
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise ConfigError("%s: %s: a ** entry is not a literal" % (where, ast.unparse(node)))
        return {_lit(k, env, where): _lit(v, env, where) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise ConfigError("%s: name %r is bound to no literal in the test module" % (where, node.id))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNOPS:
        return _UNOPS[type(node.op)](_lit(node.operand, env, where))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return _BINOPS[type(node.op)](_lit(node.left, env, where), _lit(node.right, env, where))
    raise ConfigError("%s: %s is not a literal (a call, an attribute or a comprehension)" % (where, ast.unparse(node)))


def _bind(stmts, env):
    """Adds the literal assignments of stmts (`name = literal`) to env, in order;
    a name later bound to a non-literal is dropped."""
    for s in stmts:
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            name, value = s.targets[0].id, s.value
        elif isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.value is not None:
            name, value = s.target.id, s.value
        else:
            continue
        try:
            env[name] = _lit(value, env, "")
        except ConfigError:
            env.pop(name, None)


def _calls(node, name):
    return [c for c in ast.walk(node) if isinstance(c, ast.Call) and (
        (isinstance(c.func, ast.Name) and c.func.id == name) or
        (isinstance(c.func, ast.Attribute) and c.func.attr == name))]


def call_kwargs(src, call, func="get_dummy_components", label="<test>"):
    """({keyword: value}, "label:LINE func") of the first call of `call` inside a
    function `func` (a method of any class, or module level) of the source src."""
    tree = ast.parse(src)
    env = {}
    _bind(tree.body, env)
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == func]
    for f in funcs:
        if not _calls(f, call):
            continue
        fenv = dict(env)
        a = f.args
        pos = a.posonlyargs + a.args
        for arg, d in zip(pos[len(pos) - len(a.defaults):], a.defaults):
            try:
                fenv[arg.arg] = _lit(d, fenv, "")
            except ConfigError:
                pass
        for arg, d in zip(a.kwonlyargs, a.kw_defaults):
            if d is not None:
                try:
                    fenv[arg.arg] = _lit(d, fenv, "")
                except ConfigError:
                    pass
        for s in f.body:  # the statements before the one that holds the call bind its names
            found = _calls(s, call)
            if not found:
                _bind([s], fenv)
                continue
            c = found[0]
            where = "%s:%d %s" % (label, c.lineno, func)
            if c.args:
                raise ConfigError("%s: %s(...) takes positional arguments; only keywords are read" % (where, call))
            out = {}
            for k in c.keywords:
                if k.arg is None:
                    raise ConfigError("%s: %s(**%s): a ** argument is not a literal" % (
                        where, call, ast.unparse(k.value)))
                out[k.arg] = _lit(k.value, fenv, "%s keyword %s" % (where, k.arg))
            return out, where
    raise ConfigError("%s: no %s(...) call inside a function %s" % (label, call, func))


def _test_path(rel, root=None):
    """The pipeline test file rel ("pipelines/x/test_x.py") under the diffusers tests
    folder: ROOT/tests/rel, else ROOT/rel (an extracted tests/ folder itself)."""
    root = root or TESTS_ROOT
    for p in (os.path.join(root, "tests", rel), os.path.join(root, rel)):
        if os.path.isfile(p):
            return p
    return None


# ---------------------------------------------------------------- input builders
# Each takes the class's full configuration (defaults + the test's keywords) and
# returns ({forward kwarg: spec}, main input name). Batch 1, as the pipelines run
# each guidance branch in the fixtures these configurations come from.

def _inputs_dreamlite(c, extra):
    # DreamLiteUNetModel's blocks call it with the block's feature map, the prompt
    # embeddings and the encoder mask the UNet made additive ((1 - m) * -10000, (B, 1, L));
    # no timestep (norm_type layer_norm), self-attention mask None.
    s = extra.get("size", 4)
    L = 8
    return {"hidden_states": T("randn", (1, c["in_channels"], s, s)),
            "encoder_hidden_states": T("randn", (1, L, c["cross_attention_dim"])),
            "encoder_attention_mask": T("additive_mask", (1, 1, L), valid=L - 2)}, "hidden_states"


def _inputs_hunyuan_image(c, extra):
    # HunyuanImagePipeline: latents (B, C, H, W) (5-d with a 3-d patch), timestep t
    # (0..1000, float) per sample, Qwen2.5-VL embeddings + mask, ByT5 glyph embeddings
    # + mask when text_embed_2_dim is set, guidance / timestep_r only when configured.
    p = tuple(c["patch_size"])
    grid = (8, 8) if len(p) == 2 else (2, 8, 8)
    L, L2 = 6, 4
    kw = {"hidden_states": T("randn", (1, c["in_channels"]) + tuple(g * q for g, q in zip(grid, p))),
          "timestep": T("value", (1,), values=[500.0]),
          "encoder_hidden_states": T("randn", (1, L, c["text_embed_dim"])),
          "encoder_attention_mask": T("ones", (1, L))}
    if c.get("text_embed_2_dim"):
        kw["encoder_hidden_states_2"] = T("randn", (1, L2, c["text_embed_2_dim"]))
        kw["encoder_attention_mask_2"] = T("ones", (1, L2))
    if c.get("guidance_embeds"):
        kw["guidance"] = T("value", (1,), values=[3500.0])
    if c.get("use_meanflow"):
        kw["timestep_r"] = T("value", (1,), values=[400.0])
    return kw, "hidden_states"


def _inputs_kandinsky5(c, extra):
    # Kandinsky5T2VPipeline at the test's 5 frames of 32x32 (latents (B, 2, 4, 4, C),
    # channels last), rope positions per post-patch axis, text positions 0..L-1, the
    # scale factor it picks below 480p, sparse_params None (attention_type "regular").
    if c.get("attention_type", "regular") != "regular":
        raise ConfigError("Kandinsky5: attention_type %r needs sparse_params (not built)" % c["attention_type"])
    p = tuple(c["patch_size"])
    dims = (2 * p[0], 2 * p[1], 2 * p[2])
    C = c["in_visual_dim"]
    C = 2 * C + 1 if c.get("visual_cond") else C
    L = 8
    return {"hidden_states": T("randn", (1,) + dims + (C,)),
            "encoder_hidden_states": T("randn", (1, L, c["in_text_dim"])),
            "timestep": T("value", (1,), values=[500.0]),
            "pooled_projections": T("randn", (1, c["in_text_dim2"])),
            "visual_rope_pos": [T("arange", (d // q,), "int64") for d, q in zip(dims, p)],
            "text_rope_pos": T("arange", (L,), "int64"),
            "scale_factor": (1, 3.16, 3.16)}, "hidden_states"


def _inputs_stable_audio(c, extra):
    # StableAudioPipeline: latents (B, in_channels, sample_size), t.unsqueeze(0) (a
    # cosine-DPM timestep in [0, 1)), prompt + seconds embeddings for cross-attention,
    # the seconds embedding as the one global token, and the partial rotary embedding
    # over sample_size + 1 positions (the global token is prepended).
    S = c["sample_size"]
    return {"hidden_states": T("randn", (1, c["in_channels"], S)),
            "timestep": T("value", (1,), values=[0.5]),
            "encoder_hidden_states": T("randn", (1, 8, c["cross_attention_input_dim"])),
            "global_hidden_states": T("randn", (1, 1, c["global_states_input_dim"])),
            "rotary_embedding": T("rope1d", (S + 1, c["attention_head_dim"] // 2))}, "hidden_states"


def _inputs_minimax_rvq(c, extra):
    # MiniMax Music 3's depth decoder: the global LM's hidden state then the 7 residual
    # codes of one frame, each projected: (B, 8 steps, hidden_size).
    steps = min(c["num_codebooks"], c["max_position_embeddings"])
    return {"inputs_embeds": T("randn", (1, steps, c["hidden_size"]))}, "inputs_embeds"


def _inputs_t5_film(c, extra):
    # SpectrogramDiffusionPipeline.decode: the noisy context chunk (B, targets_length,
    # input_dims), noise time in [0, 1), and the two encoders' outputs with their masks
    # (the notes encoder's mask is input_tokens > 0: padding at the end; the continuous one is all set).
    S, d = c["targets_length"], c["d_model"]
    return {"encodings_and_masks": [(T("randn", (1, 12, d)), T("mask", (1, 12), "bool", valid=9)),
                                    (T("randn", (1, S, d)), T("ones", (1, S), "bool"))],
            "decoder_input_tokens": T("randn", (1, S, c["input_dims"])),
            "decoder_noise_time": T("value", (1,), values=[0.5])}, "decoder_input_tokens"


# ---------------------------------------------------------------- the classes

def _dreamlite_preview(u):
    """The configuration DreamLiteUNetModel(**u) gives the transformer of its first
    DreamLiteCrossAttnDownBlock2D (the one with self-attention), by the UNet's rules
    (attention_head_dim is the head count: diffusers' legacy naming), and that block's
    feature-map size. The build takes the built UNet's own sub-module config instead
    and warns if this preview differs."""
    types = list(u["down_block_types"])
    i = types.index("DreamLiteCrossAttnDownBlock2D") if "DreamLiteCrossAttnDownBlock2D" in types else 0

    def at(v):
        return v[i] if isinstance(v, (list, tuple)) else v

    ch = at(u["block_out_channels"])
    heads = at(u["num_attention_heads"] or u["attention_head_dim"])
    cfg = {"num_attention_heads": heads, "attention_head_dim": ch // heads, "in_channels": ch,
           "num_layers": at(u["transformer_layers_per_block"]), "cross_attention_dim": at(u["cross_attention_dim"]),
           "norm_num_groups": u["norm_num_groups"], "use_linear_projection": u["use_linear_projection"],
           "only_cross_attention": bool(at(u["only_cross_attention"])), "upcast_attention": u["upcast_attention"],
           "attention_type": u["attention_type"], "qk_norm": u["qk_norm"], "ff_mult": u["ff_mult"],
           "num_kv_heads": u["num_kv_heads"]}
    size = (u["sample_size"] or 8) // 2 ** i
    return cfg, {"size": size, "level": i}


SPECS = {
    "DreamLiteTransformer2DModel": {
        "file": "pipelines/dreamlite/test_pipeline_dreamlite.py", "call": "DreamLiteUNetModel",
        "how": "its DreamLiteCrossAttnDownBlock2D transformer, with the GQA processor the UNet installs",
        "inputs": _inputs_dreamlite, "forward": "DreamLiteTransformer2DModel"},
    "HunyuanImageTransformer2DModel": {
        "file": "pipelines/hunyuan_image_21/test_hunyuanimage.py", "call": "HunyuanImageTransformer2DModel",
        "inputs": _inputs_hunyuan_image},
    "Kandinsky5Transformer3DModel": {
        "file": "pipelines/kandinsky5/test_kandinsky5.py", "call": "Kandinsky5Transformer3DModel",
        "inputs": _inputs_kandinsky5},
    "StableAudioDiTModel": {
        "file": "pipelines/stable_audio/test_stable_audio.py", "call": "StableAudioDiTModel",
        "inputs": _inputs_stable_audio},
    "MiniMaxMusic3RVQDepthDecoder": {
        "own": {"hidden_size": 32, "num_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
                "audio_vocab_size": 16, "num_codebooks": 8, "max_position_embeddings": 16},
        "why": "diffusers' only test of it (tests/modular_pipelines/minimax_music3/"
               "test_modular_pipeline_minimax_music3.py) loads it from the Hub "
               "(hf-internal-testing/tiny-minimax-music3-modular-pipe)",
        "inputs": _inputs_minimax_rvq},
    "T5FilmDecoder": {
        "own": {"input_dims": 8, "targets_length": 16, "max_decoder_noise_time": 2000.0, "d_model": 32,
                "num_layers": 2, "num_heads": 2, "d_kv": 16, "d_ff": 64, "dropout_rate": 0.1},
        "why": "diffusers ships no test of it",
        "inputs": _inputs_t5_film},
}


def source_note(name):
    s = SPECS[name]
    if "own" in s:
        return "config: drift's own, the class defaults scaled down (%s); %s" % (s["why"], INPUTS_NOTE)
    how = " (%s)" % s["how"] if "how" in s else ""
    return "config: pipeline test tests/%s, get_dummy_components' %s(...)%s; %s" % (
        s["file"], s["call"], how, INPUTS_NOTE)


def entry_for(name, cls, root=None):
    """The zoo entry of class `name` (None if SPECS has none): {"tag", "class", "test",
    "pipeline", "init"} or {"tag", "class", "error"}. Reads the test with ast only."""
    s = SPECS.get(name)
    if s is None:
        return None
    e = {"tag": name, "class": cls, "pipeline": name}
    if "own" in s:
        e.update(test=source_note(name), init=dict(s["own"]), where="drift's own")
        return e
    p = _test_path(s["file"], root)
    if p is None:
        e["error"] = ("no diffusers model test names it and its pipeline test tests/%s is not under "
                      "DIFFUSERS_TESTS (%s)" % (s["file"], root or TESTS_ROOT))
        return e
    try:
        init, where = call_kwargs(open(p).read(), s["call"], label="tests/" + s["file"])
    except (ConfigError, SyntaxError) as ex:
        e["error"] = "pipeline test configuration: %s" % ex
        return e
    e.update(test=source_note(name), init=init, where=where)
    return e


def _dreamlite_class():
    """DreamLiteTransformer2DModel as the DreamLite UNet runs it: the UNet installs
    DreamLiteAttnProcessor2_0 (GQA-aware) on every Attention after building; this
    subclass does the same in __init__ (its signature is the class's own), so the
    copy a capture makes with from_config(model.config) runs the same processor."""
    import functools

    from diffusers import DreamLiteTransformer2DModel
    from diffusers.models.attention_processor import Attention
    from diffusers.models.unets.unet_dreamlite import DreamLiteAttnProcessor2_0

    base = DreamLiteTransformer2DModel

    @functools.wraps(base.__init__)
    def __init__(self, *a, **k):
        base.__init__(self, *a, **k)
        for mod in self.modules():
            if isinstance(mod, Attention):
                mod.set_processor(DreamLiteAttnProcessor2_0())

    return type("DreamLiteTransformer2DModel", (base,), {"__init__": __init__, "__module__": base.__module__,
                                                         "__qualname__": "DreamLiteTransformer2DModel"})


def _config_of(model):
    import inspect

    keys = set(inspect.signature(type(model).__init__).parameters) - {"self"}
    return {k: v for k, v in dict(model.config).items() if k in keys}


def build(entry):
    """(model fp32 on cpu, kwargs on cpu, main input name) of a SPECS entry; the
    caller seeds torch and the weights."""
    import torch

    name = entry["pipeline"]
    s = SPECS[name]
    extra = {}
    if name == "DreamLiteTransformer2DModel":
        from diffusers import DreamLiteUNetModel, DreamLiteTransformer2DModel

        unet = DreamLiteUNetModel(**entry["init"])
        want, extra = _dreamlite_preview(_full(unet.config, entry["init"]))
        sub = [m for m in unet.down_blocks[extra["level"]].modules() if isinstance(m, DreamLiteTransformer2DModel)]
        if not sub:
            raise ConfigError("DreamLiteUNetModel(%s) has no DreamLiteTransformer2DModel in down block %d" % (
                entry["init"], extra["level"]))
        cfg = _config_of(sub[0])
        diff = {k: (v, cfg.get(k)) for k, v in want.items() if cfg.get(k) != v}
        if diff:
            sys.stderr.write("zoo: DreamLite: the UNet's transformer config differs from the preview: %s\n" % diff)
        del unet
        model = _dreamlite_class()(**cfg)
    else:
        model = entry["class"](**entry["init"])
        cfg = _config_of(model)
    spec, main = s["inputs"](cfg, extra)
    kw = materialize(spec, torch.Generator("cpu").manual_seed(0))
    return model, kw, main


def _full(config, init):
    d = {k: v for k, v in dict(config).items() if not k.startswith("_")}
    d.update(init)
    return d


# ---------------------------------------------------------------- listing (no torch)

def _class_source(src_root, name):
    """(path, ClassDef) of class `name` in the diffusers source tree src_root."""
    needle = "class %s(" % name
    for d, _, files in sorted(os.walk(os.path.join(src_root, "models"))):
        for fn in sorted(files):
            if fn.endswith(".py"):
                p = os.path.join(d, fn)
                text = open(p).read()
                if needle in text:
                    for n in ast.parse(text).body:
                        if isinstance(n, ast.ClassDef) and n.name == name:
                            return p, n
    return None, None


def _signature(cls_node, method):
    """({param: default or the default's source}, has **kwargs) of method in the class body."""
    for n in cls_node.body:
        if isinstance(n, ast.FunctionDef) and n.name == method:
            a = n.args
            pos = a.posonlyargs + a.args
            out = {x.arg: "<required>" for x in pos[1:]}
            for x, d in zip(pos[len(pos) - len(a.defaults):], a.defaults):
                try:
                    out[x.arg] = _lit(d, {}, "")
                except ConfigError:
                    out[x.arg] = "<%s>" % ast.unparse(d)
            for x, d in zip(a.kwonlyargs, a.kw_defaults):
                out[x.arg] = "<required>" if d is None else _lit(d, {}, "")
            return out, a.kwarg is not None
    return None, False


def list_configs(root, src_root):
    ok = True
    for name, s in SPECS.items():
        print("== %s" % name)
        e = entry_for(name, None, root)
        if e.get("error"):
            print("   FAIL %s" % e["error"])
            ok = False
            continue
        print("   source: %s" % e["test"])
        print("   read at: %s" % e["where"])
        print("   init dict: %s" % e["init"])
        ctor = s.get("call", name)
        path, node = _class_source(src_root, ctor)
        if node is None:
            print("   FAIL class %s not found under %s" % (ctor, src_root))
            ok = False
            continue
        params, var_kw = _signature(node, "__init__")
        bad = sorted(k for k in e["init"] if k not in params) if not var_kw else []
        if bad:
            print("   FAIL %s.__init__ (%s) has no parameter %s" % (ctor, os.path.relpath(path, src_root), bad))
            ok = False
        else:
            print("   check: every key is a parameter of %s.__init__ (%s)" % (ctor, os.path.relpath(path, src_root)))
        full = {k: v for k, v in params.items()}
        full.update(e["init"])
        extra = {}
        if name == "DreamLiteTransformer2DModel":
            cfg, extra = _dreamlite_preview(full)
            print("   transformer config (preview by the UNet's rules; the build reads the built UNet's): %s" % cfg)
            tpath, tnode = _class_source(src_root, name)
            tparams, _ = _signature(tnode, "__init__")
            bad = sorted(k for k in cfg if k not in tparams)
            if bad:
                print("   FAIL %s.__init__ has no parameter %s" % (name, bad))
                ok = False
            full = dict(tparams)
            full.update(cfg)
            path, node = tpath, tnode
        try:
            kw, main = s["inputs"](full, extra)
        except Exception as ex:  # noqa: BLE001
            print("   FAIL input builder: %s: %s" % (type(ex).__name__, ex))
            ok = False
            continue
        fparams, fvar = _signature(node, "forward")
        print("   inputs (main %s):" % main)
        for k, v in kw.items():
            print("     %s: %s" % (k, v))
        bad = sorted(k for k in kw if k not in fparams) if not fvar else []
        missing = sorted(k for k, d in fparams.items() if d == "<required>" and k not in kw)
        if bad or missing or main not in kw:
            print("   FAIL forward: unknown %s, required but not given %s, main %s given: %s" % (
                bad, missing, main, main in kw))
            ok = False
        else:
            print("   check: every input is a parameter of forward, every required one is given")
    return ok


def self_test():
    """The ast reader on inline sources: names followed, non-literals refused."""
    src = ("X = 16\n"
           "class C:\n"
           "    def get_dummy_components(self, n: int = 2, g: bool = False):\n"
           "        h = 32\n"
           "        enc = Enc(h)\n"
           "        m = diffusers.M(a=X, b=n, c=(1, 2), d=h * 2, e=g, f=-1.5, s='x')\n")
    got, where = call_kwargs(src, "M")
    assert got == {"a": 16, "b": 2, "c": (1, 2), "d": 64, "e": False, "f": -1.5, "s": "x"}, got
    assert where == "<test>:6 get_dummy_components", where
    for bad, msg in (("M(a=enc.config.d)", "not a literal"), ("M(a=enc)", "bound to no literal"),
                     ("M(1)", "positional"), ("M(**kw)", "** argument")):
        try:
            call_kwargs(src.replace("diffusers.M(a=X, b=n, c=(1, 2), d=h * 2, e=g, f=-1.5, s='x')", bad), "M")
        except ConfigError as ex:
            assert msg in str(ex), (bad, str(ex))
        else:
            raise AssertionError("%s was accepted" % bad)
    try:
        call_kwargs(src, "Missing")
    except ConfigError as ex:
        assert "no Missing(...) call" in str(ex)
    for name, sp in SPECS.items():  # drift's own configurations: their builders run on them as they are
        if "own" in sp:
            kw, main = sp["inputs"](sp["own"], {})
            assert main in kw and isinstance(kw[main], T), (name, kw)
    print("PASS zoo_pipeline_configs self-test")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list-configs", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--tests-root", default=TESTS_ROOT,
                    help="the diffusers tests folder's parent (ROOT/tests/pipelines/...) or the folder itself")
    ap.add_argument("--diffusers-src", default=os.path.join(REPO, ".pydeps", "diffusers"),
                    help="the diffusers package folder (src/diffusers) for the signature checks")
    a = ap.parse_args(argv)
    rc = 0
    if a.self_test:
        self_test()
    if a.list_configs:
        rc = 0 if list_configs(a.tests_root, a.diffusers_src) else 1
        print("PASS" if rc == 0 else "FAIL", "zoo pipeline configs")
    if not (a.self_test or a.list_configs):
        ap.print_help()
    return rc


if __name__ == "__main__":
    sys.exit(main())
