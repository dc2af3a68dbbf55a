"""Graph capture in drift_recorder without torch (issue 15, recorder side).

Plain-Python parts of the capture (module-path normaliser, argument
encoder, input flattening and site names, module info of a node, the FSDP2
class unwrapping) and the Recorder's handling of capture_graph with
stand-in exporters: a failing export (note + one stderr line, the recording
goes on), a successful one (/graph, /buffers in their dtypes, the note),
no torch at all, a call after the trace started, and rec.inputs().

    DRIFT_RECORDER_LIB=.../libdrift_recorder.so python3 recorder_capture.py WORKDIR
"""
import contextlib
import importlib.util
import io
import json
import os
import sys

import h5py
import numpy as np

from drift_recorder import Recorder
from drift_recorder import capture as cap
from drift_recorder import capture_source as cs

W = sys.argv[1]
checks = 0


def check(cond, what):
    global checks
    if not cond:
        raise AssertionError(what)
    checks += 1


# ---- 1. module paths from nn_module_stack ------------------------------------------------------
for raw, want in [("L['self'].blocks[0].attn1", "blocks.0.attn1"), ("blocks.0.attn1.to_q", "blocks.0.attn1.to_q"),
                  ("self.blocks._modules['3'].ffn", "blocks.3.ffn"), ("L['self']", ""), ("", ""),
                  ("L['self'].transformer_blocks[1]['attn']", "transformer_blocks.1.attn"),
                  ("self.pos_embed", "pos_embed")]:
    got = cap._module_path(raw)
    check(got == want, f"_module_path({raw!r}) = {got!r}, want {want!r}")


class Node:  # stand-in for torch.fx.Node: only .meta is read
    def __init__(self, stack):
        self.meta = {"nn_module_stack": stack}


class WanAttention:
    pass


n = Node({"root": ("", "diffusers.WanTransformer3DModel"), "b": ("blocks", "torch.nn.ModuleList"),
          "b0": ("blocks.0", "diffusers.models.WanTransformerBlock"), "a": ("L['self'].blocks[0].attn1", WanAttention)})
module, stack, classes = cap._module_info(n)
check(module == "blocks.0.attn1", f"_module_info module {module}")
check(stack == ["blocks", "blocks.0", "blocks.0.attn1"], f"_module_info stack {stack}")
check(classes == ["ModuleList", "WanTransformerBlock", "WanAttention"], f"_module_info classes {classes}")
check(cap._module_info(Node({})) == ("", [], []), "a node outside every module is the root's")

# ---- 2. argument encoding of plain values (no torch imported) ------------------------------------
enc = cap._arg([1, -2.5, float("inf"), float("-inf"), None, True, False, "tanh", (3, [4]), {"k": 0.5}])
check(enc == [1, -2.5, {"float": "inf"}, {"float": "-inf"}, None, True, False, "tanh", [3, [4]],
              {"dict": {"k": 0.5}}], f"_arg plain {enc}")
check(cap._arg(float("nan")) == {"float": "nan"}, "nan")
check(json.loads(json.dumps(enc, allow_nan=False)) == enc, "encoded arguments are strict JSON")
check(type(cap._arg(True)) is bool and type(cap._arg(7)) is int, "bool stays bool, int stays int")
check(cap._val([1, 2.0]) == [{"scalar": 1}, {"scalar": 2.0}], f"_val scalars {cap._val([1, 2.0])}")
check("torch" not in sys.modules, "plain values were encoded without importing torch")

kw = {"hidden_states": "T1", "encoder_hidden_states": "T2", "timestep": "T3", "img_shapes": [(1, 4, 4)],
      "attention_kwargs": {"scale": 1.0}, "return_dict": False}
flat = cap.flatten_inputs(kw)
check([p for p, _ in flat] == ["hidden_states", "encoder_hidden_states", "timestep", "img_shapes.0.0",
                               "img_shapes.0.1", "img_shapes.0.2", "attention_kwargs.scale", "return_dict"],
      f"flatten_inputs {flat}")
check(cap.input_site("hidden_states", "latents") == "input:latents:pre_cast", "boundary latents site")
check(cap.input_site("timestep", "timestep") == "input:timestep:pre_cast", "boundary timestep site")
check(cap.input_site("img_ids", "other") == "input:img_ids:pre_cast", "other input site")
check(cap.ROLE_OF_KWARG["encoder_hidden_states"] == "cond" and cap.ROLE_OF_KWARG["sample"] == "latents", "roles")

# ---- 3. the class FSDP2 wrapped, sharded parameters --------------------------------------------
class FSDPModule:
    pass


class WanTransformer3DModel:
    pass


class FSDPWanTransformer3DModel(FSDPModule, WanTransformer3DModel):
    pass


check(cs.base_class(FSDPWanTransformer3DModel()) is WanTransformer3DModel, "base_class of FSDP2's subclass")
check(cs.base_class(WanTransformer3DModel()) is WanTransformer3DModel, "base_class of the plain class")


class DTensor:
    pass


class Params:
    def __init__(self, ps):
        self.ps = ps

    def parameters(self):
        return iter(self.ps)


check(cs.is_sharded(Params([np.zeros(2), DTensor()])), "a DTensor parameter means sharded")
check(not cs.is_sharded(Params([np.zeros(2)])), "plain parameters: not sharded")


class P:
    def __init__(self, dtype):
        self.dtype = dtype


check(cs.all_fp32(Params([P("torch.float32"), np.zeros(2, np.float32)])), "fp32 parameters")
check(not cs.all_fp32(Params([P("torch.float32"), P("torch.bfloat16")])), "a bf16 parameter: not all fp32")

# ---- 4. Recorder.capture_graph with stand-in exporters --------------------------------------------
def fail_exporter(model, kwargs, factory=None, mode="auto"):
    raise cap.CaptureError("torch.export failed: Unsupported: data-dependent branch in Frobnicator.forward")


DOC = {"format": "drift-aten-graph", "version": 1, "model_class": "Stand", "capture": {"mode": "meta", "seconds": 1.25},
       "nodes": [{"name": "x", "op": "placeholder", "target": "x", "args": [], "kwargs": {}, "val": None,
                  "module": "", "module_stack": [], "module_classes": []}],
       "inputs": [{"node": "hidden_states", "kind": "user_input", "target": "hidden_states", "role": "latents",
                   "site": "input:latents:pre_cast"},
                  {"node": "mask", "kind": "user_input", "target": "encoder_hidden_states_mask", "role": "other",
                   "site": "input:encoder_hidden_states_mask:pre_cast"},
                  {"node": "b_rope", "kind": "buffer", "target": "rope.freqs_cos"}],
       "outputs": [{"node": "x", "name": "output:noise_pred"}], "constants": {}, "non_tensor_inputs": {}}
cos64 = np.linspace(0, 1, 12, dtype=np.float64).reshape(3, 4)
freqs = (np.arange(6) + 1j * np.arange(6) * 0.5).astype(np.complex64).reshape(2, 3)
TENSORS = [("rope.freqs_cos", cos64), ("constant:pos_embed.pos_freqs", freqs), ("constant:lifted_tensor_0", np.int64(3)),
           ("rope.freqs_cos", cos64 * 0)]  # the repeated name is skipped


def good_exporter(model, kwargs, factory=None, mode="auto"):
    check(factory == "F" and mode == "meta", "factory and mode are passed through")
    return DOC, TENSORS


def run(path, exporter, steps=2, before=True, mode="auto", factory=None, record_inputs=None, late=False):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        with Recorder(path, family="stand", run_id="cap", plan={"name": "p"}) as rec:
            kw = {"hidden_states": np.ones((1, 4), np.float32), "encoder_hidden_states": np.zeros((1, 2, 3), np.float32),
                  "timestep": np.array([500.0], np.float32), "encoder_hidden_states_mask": np.ones((1, 2), np.int64),
                  "img_shapes": [(1, 2, 2)], "return_dict": False}
            if before:
                got = rec.capture_graph("MODEL", kw, exporter=exporter, mode=mode, factory=factory)
            for s in range(steps):
                with rec.step(s):
                    if not before and not late and s == 0:
                        got = rec.capture_graph("MODEL", kw, exporter=exporter, mode=mode, factory=factory)
                        again = rec.capture_graph("MODEL", kw, exporter=fail_exporter)
                        check(again is got, "a second capture_graph returns the first graph, exports nothing")
                    if record_inputs:
                        record_inputs(rec, kw, s)
                    rec.output("noise_pred", np.full((1, 4), float(s), np.float32))
            if late:
                got = rec.capture_graph("MODEL", kw, exporter=exporter)  # after the start: refused
                check(got is None, "capture_graph after the trace started returns None")
            rec.flush(10000)
            committed = rec.counters().get("committed_steps")
    return got, err.getvalue(), committed


# 4a. a model that cannot be exported: a note, one warning line, the recording goes on
got, err, committed = run(os.path.join(W, "fail.h5"), fail_exporter, steps=3)
check(got is None, "a failed capture returns None")
lines = [l for l in err.splitlines() if "graph capture failed" in l]
check(len(lines) == 1 and "Frobnicator" in lines[0] and "the job goes on" in lines[0], f"one warning line: {err!r}")
check(committed == 3, f"every step committed after a failed capture ({committed})")
with h5py.File(os.path.join(W, "fail.h5"), "r") as f:
    check("graph" not in f, "no /graph after a failed capture")
    notes = [(int(r["step"]), int(r["level"]), r["text"].decode()) for r in f["notes"][...]]
    hits = [n for n in notes if "graph capture failed" in n[2]]
    check(len(hits) == 1 and hits[0][0] == 0 and hits[0][1] == 1 and "Frobnicator" in hits[0][2],
          f"a warning note of step 0 names the failure: {notes}")

# 4b. no torch and no exporter: ImportError becomes the same note
if importlib.util.find_spec("torch") is None:
    got, err, committed = run(os.path.join(W, "notorch.h5"), None, steps=1)
    check(got is None and committed == 1, "capture without torch: None, the step commits")
    check(err.count("graph capture failed") == 1 and "torch" in err, f"no-torch warning: {err!r}")

# 4c. a successful capture in step 0 (inside the step, before it ends)
seen = {}


def rec_inputs(rec, kw, s):
    rec.input("latents", kw["hidden_states"] * 2, kw["hidden_states"])  # the boundary recorded by hand first
    seen[s] = rec.inputs(kw)


got, err, committed = run(os.path.join(W, "good.h5"), good_exporter, steps=2, before=False, mode="meta",
                          factory="F", record_inputs=rec_inputs)
check(got is DOC and committed == 2 and err == "", f"capture ok, quiet: {err!r}")
check(seen == {0: 3, 1: 3}, f"rec.inputs records cond, timestep and the mask each step (not latents again): {seen}")
with h5py.File(os.path.join(W, "good.h5"), "r") as f:
    g = f["graph"][()]
    g = g.decode() if isinstance(g, bytes) else g
    check(json.loads(g.rstrip("\0")) == DOC, "/graph holds the document")
    bufs = {f["buffers"][k].attrs["name"].decode() if isinstance(f["buffers"][k].attrs["name"], bytes)
            else f["buffers"][k].attrs["name"]: f["buffers"][k] for k in f["buffers"]}
    check(set(bufs) == {"rope.freqs_cos", "constant:pos_embed.pos_freqs", "constant:lifted_tensor_0"}, f"buffers {set(bufs)}")
    b = bufs["rope.freqs_cos"]
    check(b.dtype == np.float64 and np.array_equal(b[...], cos64), "an fp64 buffer stays fp64, first value wins")
    b = bufs["constant:pos_embed.pos_freqs"]
    check(b.shape == (2, 3, 2) and b.dtype == np.float32 and np.array_equal(b[..., 0], freqs.real)
          and np.array_equal(b[..., 1], freqs.imag), "a complex constant as (real, imag) pairs")
    b = bufs["constant:lifted_tensor_0"]
    check(b.shape == (1,) and b[0] == 3.0, "a 0-d integer constant as fp32 [1]")
    notes = [(int(r["step"]), r["text"].decode()) for r in f["notes"][...]]
    check(any(s == 0 and "graph captured: Stand, 1 nodes, 2 tensor inputs, 3 buffers, export 1.25 s (meta)" in t
              for s, t in notes), f"capture note with export time: {notes}")
ls = os.popen(f"{os.environ['DRIFT_BIN']} ls {os.path.join(W, 'good.h5')} --json").read()
names = {s["name"]: s for s in json.loads(ls)["sites"]}
for want in ("input:latents:pre_cast", "input:latents:post_cast", "input:cond:pre_cast", "input:cond:post_cast",
             "input:timestep:pre_cast", "input:encoder_hidden_states_mask:pre_cast", "output:noise_pred"):
    check(want in names and names[want]["records"] == 2, f"site {want}: {names.get(want)}")
check(names["input:latents:pre_cast"]["records"] == 2, "latents recorded once per step, by rec.input()")
check(not any("img_shapes" in n or "return_dict" in n for n in names), "Python scalars are not sites")

# 4d. called after the first step ended: refused with a note, nothing written
got, err, committed = run(os.path.join(W, "late.h5"), good_exporter, steps=1, before=False, late=True)
check(err.count("called after the first step ended") == 1, f"late capture warned once: {err!r}")
with h5py.File(os.path.join(W, "late.h5"), "r") as f:
    check("graph" not in f and committed == 1, "a late capture writes nothing, the step stays committed")

# ---- 5. ConstantTap: values of a meta export's lifted constants (a stand-in torch) -----------------
import types  # noqa: E402


class _Dev:
    def __init__(self, t):
        self.type = t


class _T:
    def __init__(self, shape, dtype, dev, data=None):
        self.shape, self.dtype, self.device, self.data = tuple(shape), dtype, _Dev(dev), data


def _shape(d):
    return [len(d)] + (_shape(d[0]) if d else []) if isinstance(d, (list, tuple)) else []


def _tensor(data, dtype="int64", device="cpu"):
    return _T(_shape(data), dtype, device, data)


stub = types.ModuleType("torch")
stub.Tensor, stub.tensor, stub.as_tensor = _T, _tensor, _tensor
real_torch = sys.modules.get("torch")
sys.modules["torch"] = stub
try:
    with cs.ConstantTap() as tap:
        check(stub.tensor is not _tensor, "the tap wraps torch.tensor while the export runs")
        a = stub.tensor([8, 32, 32], device="meta")
        stub.tensor(8, device="meta")
        stub.tensor([1.0], dtype="float32")          # on the cpu: has values, not tapped
        stub.as_tensor([[1, 2]], device="meta")
        stub.tensor([_T([], "int64", "meta")], device="meta")  # not plain data: not tapped
    check(stub.tensor is _tensor and stub.as_tensor is _tensor, "torch.tensor restored after the export")
    check(len(tap.made) == 3, f"three meta tensors from plain data tapped: {len(tap.made)}")
    v = tap.value_of("lifted_tensor_0", a)            # torch kept the object: by identity
    check(v is not None and v.device.type == "cpu" and v.data == [8, 32, 32], "by identity: the cpu value")
    w = tap.value_of("lifted_tensor_1", _T([], "int64", "meta"))  # another object: first unused of its shape
    check(w is not None and w.data == 8, f"by shape and dtype: {getattr(w, 'data', None)}")
    check(tap.value_of("lifted_tensor_1", _T([], "int64", "meta")) is w, "asked again: the same value")
    check(tap.value_of("lifted_tensor_2", _T([], "int64", "meta")) is None, "nothing left of that shape: no value")
    check(tap.value_of("lifted_tensor_3", _T([1, 2], "float32", "meta")) is None, "dtype must match")
    check(tap.value_of("lifted_tensor_4", _T([1, 2], "int64", "meta")).data == [[1, 2]], "as_tensor tapped too")
finally:
    if real_torch is None:
        del sys.modules["torch"]
    else:
        sys.modules["torch"] = real_torch

# ---- 6. module_outputs: which node a multi-tensor module output is (capture_outputs.py) ----------
from drift_recorder import capture_outputs as co  # noqa: E402


class _A:  # a tensor stand-in: has data_ptr, a shape and (for the tap) the node that made it
    def __init__(self, tag, shape=(2, 3), node=None):
        self.tag, self.shape, self.node = tag, shape, node

    def data_ptr(self):
        return 0


class _Sample(dict):  # diffusers' BaseOutput is a dict with attributes
    pass


a, b, c = _A("a"), _A("b"), _A("c")
check([t.tag for t in co.output_tensors((a, b))] == ["a", "b"], "tuple order")
check([t.tag for t in co.output_tensors([None, (b, a), {"k": c}, 3])] == ["b", "a", "c"], "nested, non-tensors skipped")
check([t.tag for t in co.output_tensors(_Sample(sample=a, other=b))] == ["a", "b"], "dict values in order")
check(co.first_tensor((None, (b, a))) is b and co.first_tensor((1, "x")) is None, "first_tensor")
import drift_recorder.recorder as recmod  # noqa: E402
check(recmod.first_tensor is co.first_tensor, "the Recorder's out hook records capture_outputs.first_tensor")


class _Node:
    def __init__(self, name, shape):
        self.name, self.meta = name, {"val": _A(name, shape)}


class _Graph:
    def __init__(self, nodes):
        self.nodes = nodes


class _Handle:
    def __init__(self, hooks, h):
        self.hooks, self.h = hooks, h

    def remove(self):
        self.hooks.remove(self.h)


class _Mod:  # register_forward_hook / named_modules / __call__ as nn.Module has them
    def __init__(self, fn, children=()):
        self.fn, self.children, self.hooks = fn, list(children), []

    def register_forward_hook(self, h):
        self.hooks.append(h)
        return _Handle(self.hooks, h)

    def named_modules(self, prefix=""):
        yield prefix, self
        for n, m in self.children:
            yield from m.named_modules(prefix + ("." if prefix else "") + n)

    def __call__(self, *args):
        out = self.fn(*args)
        for h in list(self.hooks):
            h(self, args, out)
        return out


n_cos, n_sin, n_x = _Node("reshape", (4, 8)), _Node("reshape_1", (4, 8)), _Node("add_3", (1, 4))
copied = _Node("mul_7", (1, 2))  # the graph torch returned holds a copy of this node: matched by name and shape
rope = _Mod(lambda: (_A("cos", (4, 8), n_cos), _A("sin", (4, 8), n_sin)))
norm = _Mod(lambda: (_A("x", (1, 4), n_x), _A("g", (1, 2), _Node("mul_7", (1, 2))), _A("h", (9,), _Node("gone", (9,)))))
lin = _Mod(lambda: _A("y", (1, 4), n_x))
model = _Mod(lambda: (rope(), norm(), lin()), [("rope", rope), ("blocks", _Mod(None, [("0", _Mod(None, [("norm1", norm)]))])),
                                                ("proj", lin)])
tap = co.OutputTap(model, fqn_of=cap._module_path, node_of=lambda t: t.node)
with tap:
    check(len(rope.hooks) == 1 and len(lin.hooks) == 1 and not model.hooks, "a hook on every submodule, none on the root")
    model()
check(not rope.hooks and not norm.hooks, "hooks removed after the export")
mo = tap.module_outputs(_Graph([n_cos, n_sin, n_x, copied]))
check(mo == {"rope": ["reshape", "reshape_1"], "blocks.0.norm1": ["add_3", "mul_7", None]},
      f"module_outputs: identity, then name and shape, else null; one-tensor modules absent: {mo}")
rope.fn = lambda: (_A("sin", (4, 8), n_sin), _A("cos", (4, 8), n_cos))  # called again, returning (sin, cos)
with tap:
    model()
check(tap.module_outputs(_Graph([n_cos, n_sin, n_x, copied]))["rope"] == ["reshape_1", "reshape"], "the last call counts")
wrong_shape = _Node("mul_7", (3, 3))
check(tap.module_outputs(_Graph([n_cos, n_sin, n_x, wrong_shape]))["blocks.0.norm1"][1] is None,
      "a node of that name with another shape: not matched")


class _NoHooks:
    def named_modules(self):
        raise RuntimeError("not a module")


t2 = co.OutputTap(_NoHooks())
with t2:
    pass
check(t2.module_outputs(_Graph([])) is None, "no tap: no module_outputs member (the importer stays cautious)")
check(co.proxy_node(a) is None, "proxy_node outside a trace (or without torch): None")

# ---- device values: which nodes are constant-only (capture_device_values.py, no torch needed)
from drift_recorder import capture_device_values as dv


class _FxNode:
    def __init__(self, name, op, target, args=(), kwargs=None):
        self.name, self.op, self.target, self.args, self.kwargs = name, op, target, tuple(args), kwargs or {}
        self.users = {}
        for r in dv._refs(list(self.args) + list(self.kwargs.values()), []):
            r.users[self] = None


class _FxGraph:
    def __init__(self, nodes):
        self.nodes = nodes


px = _FxNode("x", "placeholder", "x")
ar = _FxNode("arange", "call_function", "aten.arange.start", [0, 4])
ex = _FxNode("exp", "call_function", "aten.exp.default", [ar])
vw = _FxNode("unsqueeze", "call_function", "aten.unsqueeze.default", [ex, 0])
ml = _FxNode("mul", "call_function", "aten.mul.Tensor", [px, vw])
ar2 = _FxNode("arange_1", "call_function", "aten.arange.start", [0, 4])
neg = _FxNode("neg", "call_function", "aten.neg.default", [ar2])           # constant, no transcendental
em = _FxNode("empty_like", "call_function", "aten.empty_like.default", [ar2])
cp = _FxNode("copy_", "call_function", "aten.copy_.default", [em, neg])      # in place: never constant
ar3 = _FxNode("arange_2", "call_function", "aten.arange.start", [0, 4])
sl = _FxNode("slice", "call_function", "aten.slice.Tensor", [ar3, 0, 0, 2])
mu_ = _FxNode("mul_", "call_function", "aten.mul_.Tensor", [sl, px])         # writes ar3 through a view
cs3 = _FxNode("cos", "call_function", "aten.cos.default", [ar3])
lin = _FxNode("linear", "call_function", "aten.linear.default", [vw, vw])    # plan-dependent: never constant
const = dv.constant_only(_FxGraph([px, ar, ex, vw, ml, ar2, neg, em, cp, ar3, sl, mu_, cs3, lin]))
check(set(const) == {ar, ex, vw, ar2, neg}, "constant-only: arange -> exp -> unsqueeze and arange -> neg; "
      "not the placeholder's users, empty_like, an in-place op, a tensor written through a view, a linear: %s"
      % sorted(n.name for n in const))
check(const[vw] and const[ex] and not const[ar] and not const[neg], "transcendental ancestry flags: %s" % const)
check(dv._base("aten.pow.Scalar") == "pow" and dv._inplace(cp) and not dv._inplace(ex), "op base names")
# a constant written in place by a constant (coords[:, 0] = coords[:, 0] / fps) stays constant;
# the frontier skips in-place ops and written tensors
ar5 = _FxNode("arange_4", "call_function", "aten.arange.start", [0, 4])
se5 = _FxNode("select", "call_function", "aten.select.int", [ar5, 0, 0])
dv5 = _FxNode("div", "call_function", "aten.div.Tensor", [se5, 25.0])
cp5 = _FxNode("copy__1", "call_function", "aten.copy_.default", [se5, dv5])
ex5 = _FxNode("exp_1", "call_function", "aten.exp.default", [ar5])
ex6 = _FxNode("exp_2", "call_function", "aten.exp.default", [ar5])
cp6 = _FxNode("copy__2", "call_function", "aten.copy_.default", [ex6, ex5])  # exp_2 written after it is made
m5 = _FxNode("mul_3", "call_function", "aten.mul.Tensor", [px, ex5])
m6 = _FxNode("mul_4", "call_function", "aten.mul.Tensor", [px, ex6])
m7 = _FxNode("mul_5", "call_function", "aten.mul.Tensor", [px, cp5])
c5 = dv.constant_only(_FxGraph([px, ar5, se5, dv5, cp5, ex5, ex6, cp6, m5, m6, m7]))
check(set(c5) == {ar5, se5, dv5, cp5, ex5, ex6, cp6}, "a constant written in place by constants is constant: %s"
      % sorted(n.name for n in c5))
check(dv.frontier(c5) == [ex5], "the frontier: exp_1, not the written exp_2 nor an in-place op: %s"
      % [n.name for n in dv.frontier(c5)])
# a lifted torch.tensor(...) constant (a placeholder) is a constant leaf only when named
pc = _FxNode("c_lifted_tensor_0", "placeholder", "c_lifted_tensor_0")
pv = _FxNode("view", "call_function", "aten.view.default", [pc, [2, 1]])
ar4 = _FxNode("arange_3", "call_function", "aten.arange.start", [0, 4])
gm = _FxNode("mul_1", "call_function", "aten.mul.Tensor", [pv, ar4])
cs4 = _FxNode("cos_1", "call_function", "aten.cos.default", [gm])
us = _FxNode("mul_2", "call_function", "aten.mul.Tensor", [px, cs4])
g2 = _FxGraph([px, pc, pv, ar4, gm, cs4, us])
check(set(dv.constant_only(g2)) == {ar4}, "without leaves a lifted constant's users are not constant-only")
c2 = dv.constant_only(g2, {"c_lifted_tensor_0"})
check(set(c2) == {pc, pv, ar4, gm, cs4} and c2[cs4] and not c2[gm] and not c2[pc],
      "with the lifted constant as a leaf its RoPE-like chain is constant-only, cos flagged: %s"
      % sorted(n.name for n in c2))
if importlib.util.find_spec("torch") is None:
    check(dv.device_values(None, "cuda:0") == [], "no torch: no device values, no exception")

print(f"recorder_capture: {checks} checks passed")
