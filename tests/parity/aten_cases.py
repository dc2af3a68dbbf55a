#!/usr/bin/env python3
"""The ATen-level parity cases (issue 31): one or more tiny graphs per row of
the op registry (replay/capture/aten_registry.c), written as drift-aten-graph
documents (docs/aten-graph.md) with a "parity" member that says how to make
the inputs and how close each backend must be. No torch needed.

    python3 tests/parity/aten_cases.py > tests/data/parity/aten_cases.jsonl

One document per line. The "parity" member (ignored by the importer):
  name      the case's name (unique)
  seed      the seed of its inputs (splitmix64, tests/parity/parity_util.c)
  inputs    {node: {"gen": G, ...}}: normal | unif lo hi | int lo hi (integers) |
            bool | perm (distinct values 0..n-1, shuffled, times scale) |
            special (normal with NaN, inf, -inf at fixed places) | values (given)
  exact     true: every backend gives the ref backend's bits (views, casts,
            integer and bool ops, indexing, comparisons, fills)
  nmse      otherwise the bound of NMSE against the fp64 oracle (0: the
            default of the output dtype, tests/parity/parity_util.c)
  autocast  "bfloat16": also run under a bf16 plan (torch: bf16 autocast)
  torch     "bitwise" where the row claims torch's bits under the torch
            profile, else {"rtol": R, "atol": A} against torch on the GPU;
            torch_fp32: the fp32 plan's claim where it is another
All inputs are buffers (kind "buffer"): a plan never casts them, as autocast
never casts a module's tensors (only at the ops of its lists).
"""
import json
import sys

CASES = []
SEED = [0]


def N(name):
    return {"node": name}


def DT(name):
    return {"dtype": name}


class T:
    """A tensor input: shape, dtype, generator."""

    def __init__(self, shape, dtype="float32", gen="normal", **kw):
        self.shape, self.dtype, self.gen, self.kw = list(shape), dtype, gen, kw


def meta(shape, dtype="float32", stride=None):
    """An FX val; stride: the captured strides of a view (absent: contiguous, as the importer reads it)."""
    m = {"shape": list(shape), "dtype": dtype}
    if stride is not None:
        m["stride"] = list(stride)
    return m


# Which ops' torch bits the torch profile claims (docs/aten-graph.md, kernels/cuda/README.md):
# exact ones always; whole ops kept for their bits; the elementwise rows that run on the device.
# bf16, fp16: two units in the last place, and as much times the output's largest value (a
# GEMM's or a reduction's rounding scales with its terms, not with the result)
TORCH_TOL = {"float32": {"rtol": 1e-5, "atol": 1e-6}, "bfloat16": {"rtol": 1.6e-2, "atol": 1.6e-2, "scale": "max"},
             "float16": {"rtol": 2e-3, "atol": 2e-3, "scale": "max"}, "float64": {"rtol": 1e-12, "atol": 1e-12}}


def case(name, ins, nodes, out, exact=False, nmse=0.0, autocast=None, torch=None, torch_fp32=None):
    """ins: {name: T}; nodes: [(name, target, args, kwargs, val)]; out: the output node."""
    SEED[0] += 1
    gnodes, ginputs, pin = [], [], {}
    for k, t in ins.items():
        gnodes.append({"name": k, "op": "placeholder", "target": k, "args": [], "kwargs": {},
                       "val": meta(t.shape, t.dtype), "module": ""})
        ginputs.append({"node": k, "kind": "buffer", "target": k})
        g = {"gen": t.gen}
        g.update(t.kw)
        pin[k] = g
    for (nm, target, args, kwargs, val) in nodes:
        gnodes.append({"name": nm, "op": "call_function", "target": target, "args": args, "kwargs": kwargs,
                       "val": val, "module": "m"})
    gnodes.append({"name": "output", "op": "output", "target": "output", "args": [[N(out)]], "kwargs": {},
                   "val": None, "module": ""})
    par = {"name": name, "seed": SEED[0], "inputs": pin, "exact": bool(exact)}
    if not exact:
        par["nmse"] = nmse
    if autocast:
        par["autocast"] = autocast
    if torch is None:
        torch = "bitwise" if exact else "tol"
    if torch == "tol":
        outv = [v for (nm, _, _, _, v) in nodes if nm == out][0]
        torch = dict(TORCH_TOL.get(outv["dtype"], TORCH_TOL["float32"]))
        if autocast:
            torch = dict(TORCH_TOL["bfloat16"])
    par["torch"] = torch
    if torch_fp32:  # the fp32 plan's claim where it differs (torch's fp32 conv is TF32 cuDNN)
        par["torch_fp32"] = torch_fp32
    CASES.append({"format": "drift-aten-graph", "version": 1, "producer": {"torch": "tests/parity/aten_cases.py"},
                  "model_class": "Parity", "nodes": gnodes, "inputs": ginputs,
                  "outputs": [{"node": out, "name": "output:noise_pred"}], "constants": {},
                  "non_tensor_inputs": {}, "parity": par})


def one(name, target, ins, args, out_shape, out_dtype="float32", kwargs=None, **kw):
    """A one-op case: y = target(args)."""
    case(name, ins, [("out", target, args, kwargs or {}, meta(out_shape, out_dtype))], "out", **kw)


X = {"x": T([2, 3, 4])}
S = [2, 3, 4]
x = N("x")

# ---- structure ---------------------------------------------------------------------------------
case("drift.tuple+getitem", X,
     [("a", "aten.neg.default", [x], {}, meta(S)), ("b", "aten.exp.default", [x], {}, meta(S)),
      ("t", "drift.tuple", [[N("a"), N("b")]], {}, [meta(S), meta(S)]),
      ("y", "getitem", [N("t"), 1], {}, meta(S))], "y", nmse=0, torch="tol")
case("drift.constant", {"x": T([4])},
     [("c", "drift.constant", [], {"shape": [4], "dtype": DT("float32"), "data": [0.0, 1.5, 3.0, 4.5]}, meta([4])),
      ("y", "aten.add.Tensor", [N("x"), N("c")], {}, meta([4]))], "y", nmse=0, torch="bitwise")
case("_assert_tensor_metadata", X,
     [("a", "aten._assert_tensor_metadata.default", [x], {"dtype": DT("float32")}, None),
      ("y", "aten.neg.default", [x], {}, meta(S))], "y", exact=True)
case("_assert_scalar", X,
     [("a", "aten._assert_scalar.default", [True, "a check"], {}, None),
      ("y", "aten.neg.default", [x], {}, meta(S))], "y", exact=True)
case("sym_constrain_range_for_size", X,
     [("a", "aten.sym_constrain_range_for_size.default", [3], {"min": 0, "max": 8}, None),
      ("y", "aten.neg.default", [x], {}, meta(S))], "y", exact=True)

# ---- views -------------------------------------------------------------------------------------
V = dict(exact=True)
one("view", "aten.view.default", X, [x, [6, 4]], [6, 4], **V)
one("reshape", "aten.reshape.default", X, [x, [4, 6]], [4, 6], **V)
case("reshape.copy", X,
     [("p", "aten.permute.default", [x, [0, 2, 1]], {}, meta([2, 4, 3])),
      ("y", "aten.reshape.default", [N("p"), [8, 3]], {}, meta([8, 3]))], "y", **V)
one("_unsafe_view", "aten._unsafe_view.default", X, [x, [2, 12]], [2, 12], **V)
one("flatten", "aten.flatten.using_ints", X, [x, 1, 2], [2, 12], **V)
one("unflatten", "aten.unflatten.int", X, [x, 2, [2, 2]], [2, 3, 2, 2], **V)
one("unsqueeze", "aten.unsqueeze.default", X, [x, 1], [2, 1, 3, 4], **V)
one("squeeze", "aten.squeeze.dim", {"x": T([2, 1, 4])}, [x, 1], [2, 4], **V)
one("permute", "aten.permute.default", X, [x, [2, 0, 1]], [4, 2, 3], **V)
one("transpose", "aten.transpose.int", X, [x, 0, 2], [4, 3, 2], **V)
one("swapaxes", "aten.swapaxes.default", X, [x, 0, 1], [3, 2, 4], **V)
one("expand", "aten.expand.default", {"x": T([2, 1, 4])}, [x, [2, 3, 4]], [2, 3, 4], **V)
one("slice", "aten.slice.Tensor", X, [x, 2, 1, 3], [2, 3, 2], **V)
one("slice.step", "aten.slice.Tensor", X, [x, 1, 0, 3, 2], [2, 2, 4], **V)
one("select", "aten.select.int", X, [x, 1, 2], [2, 4], **V)
for nm, tgt, args, n_out, shp, k in [
        ("split_with_sizes", "aten.split_with_sizes.default", [x, [1, 2], 1], 2, [[2, 1, 4], [2, 2, 4]], 1),
        ("split", "aten.split.Tensor", [x, 2, 2], 2, [[2, 3, 2], [2, 3, 2]], 1),
        ("chunk", "aten.chunk.default", [x, 2, 2], 2, [[2, 3, 2], [2, 3, 2]], 0),
        ("unbind", "aten.unbind.int", [x, 1], 3, [[2, 4]] * 3, 2)]:
    case(nm, X, [("t", tgt, args, {}, [meta(s) for s in shp]),
                 ("y", "getitem", [N("t"), k], {}, meta(shp[k]))], "y", **V)
for nm in ("alias", "detach", "detach_", "lift_fresh_copy"):
    one(nm, "aten.%s.default" % nm, X, [x], S, **V)
one("dropout", "aten.dropout.default", X, [x, 0.0, False], S, **V)
case("view_as_complex+view_as_real", {"x": T([2, 3, 2])},
     [("c", "aten.view_as_complex.default", [x], {}, meta([2, 3], "complex64")),
      ("y", "aten.view_as_real.default", [N("c")], {}, meta([2, 3, 2]))], "y", **V)
case("complex.mul", {"x": T([2, 3, 2]), "r": T([3, 2])},
     [("c", "aten.view_as_complex.default", [x], {}, meta([2, 3], "complex64")),
      ("d", "aten.view_as_complex.default", [N("r")], {}, meta([3], "complex64")),
      ("m", "aten.mul.Tensor", [N("c"), N("d")], {}, meta([2, 3], "complex64")),
      ("y", "aten.view_as_real.default", [N("m")], {}, meta([2, 3, 2]))], "y", torch="tol")
case("polar", {"a": T([3], gen="unif", lo=0.5, hi=2.0), "t": T([3], gen="unif", lo=-3.0, hi=3.0)},
     [("c", "aten.polar.default", [N("a"), N("t")], {}, meta([3], "complex64")),
      ("y", "aten.view_as_real.default", [N("c")], {}, meta([3, 2]))], "y")
one("einsum.permute", "aten.einsum.default", {"x": T([3, 4])}, ["ij->ji", [x]], [4, 3], **V)
# one operand under bf16 autocast: einsum is on the lower-precision list, torch rounds x to bf16
one("einsum.permute.autocast", "aten.einsum.default", {"x": T([3, 4])}, ["ij->ji", [x]], [4, 3], autocast="bfloat16",
    torch="bitwise", nmse=1e-4)
one("einsum.bmm", "aten.einsum.default", {"a": T([2, 3, 4]), "b": T([2, 4, 5])},
    ["bij,bjk->bik", [N("a"), N("b")]], [2, 3, 5], torch="tol")

# ---- copies and casts --------------------------------------------------------------------------
one("clone", "aten.clone.default", X, [x], S, **V)
case("contiguous", X,
     [("p", "aten.transpose.int", [x, 1, 2], {}, meta([2, 4, 3])),
      ("y", "aten.contiguous.default", [N("p")], {}, meta([2, 4, 3]))], "y", **V)
one("to.bf16", "aten.to.dtype", X, [x, DT("bfloat16")], S, "bfloat16", **V)
one("to.fp16", "aten.to.dtype", X, [x, DT("float16")], S, "float16", **V)
one("to.int64", "aten.to.dtype", {"x": T(S, gen="unif", lo=-6.0, hi=6.0)}, [x, DT("int64")], S, "int64", **V)
one("to.int32", "aten.to.dtype", {"x": T(S, gen="unif", lo=-6.0, hi=6.0)}, [x, DT("int32")], S, "int32", **V)
one("to.bool", "aten.to.dtype", {"x": T(S, gen="int", lo=-1, hi=2)}, [x, DT("bool")], S, "bool", **V)
one("to.from_int64", "aten.to.dtype", {"i": T(S, "int64", gen="int", lo=-100, hi=100)}, [N("i"), DT("float32")], S, **V)
one("to.from_bool", "aten.to.dtype", {"b": T(S, "bool", gen="bool")}, [N("b"), DT("float32")], S, **V)
one("to.float64", "aten.to.dtype", X, [x, DT("float64")], S, "float64", **V)
one("_to_copy", "aten._to_copy.default", X, [x], S, "bfloat16", kwargs={"dtype": DT("bfloat16")}, **V)
one("type_as", "aten.type_as.default", {"x": T(S, gen="unif", lo=-6.0, hi=6.0), "i": T([1], "int64", gen="int", lo=0, hi=3)},
    [x, N("i")], S, "int64", **V)
one("copy_", "aten.copy_.default", {"x": T(S), "s": T([4])}, [x, N("s")], S, **V)
one("copy", "aten.copy.default", {"x": T(S), "s": T([3, 1])}, [x, N("s")], S, **V)

# ---- elementwise -------------------------------------------------------------------------------
POS = dict(gen="unif", lo=0.1, hi=4.0)
UNIT = dict(gen="unif", lo=-0.95, hi=0.95)
UNARY = {  # row -> (input generator, torch: bitwise where the row runs on the device)
    "neg": ({}, "bitwise"), "abs": ({}, "bitwise"), "relu": ({}, "bitwise"),
    "exp": ({}, "tol"), "sin": ({}, "tol"), "cos": ({}, "tol"), "rsqrt": (POS, "tol"), "sqrt": (POS, "tol"),
    "tanh": ({}, "tol"), "sigmoid": ({}, "tol"), "reciprocal": (POS, "tol"), "silu": ({}, "tol"), "gelu": ({}, "tol"),
    "log": (POS, "tol"), "log1p": (dict(gen="unif", lo=-0.5, hi=3.0), "tol"), "expm1": ({}, "tol"),
    "log2": (POS, "tol"), "log10": (POS, "tol"), "erf": ({}, "tol"),
    "floor": (dict(gen="unif", lo=-4.0, hi=4.0), "bitwise"), "ceil": (dict(gen="unif", lo=-4.0, hi=4.0), "bitwise"),
    "round": (dict(gen="int", lo=-9, hi=9, scale=0.5), "bitwise"), "trunc": (dict(gen="unif", lo=-4.0, hi=4.0), "bitwise"),
    "sign": (dict(gen="int", lo=-2, hi=3), "bitwise"), "tan": (UNIT, "tol"), "asin": (UNIT, "tol"), "acos": (UNIT, "tol"),
    "atan": ({}, "tol"), "sinh": ({}, "tol"), "cosh": ({}, "tol"), "exp2": ({}, "tol"),
    "softplus": ({}, "tol"), "hardsigmoid": (dict(gen="unif", lo=-4.0, hi=4.0), "tol"),
    "hardswish": (dict(gen="unif", lo=-4.0, hi=4.0), "tol"), "mish": ({}, "tol"), "elu": ({}, "tol"),
    "leaky_relu": ({}, "bitwise"), "square": ({}, "bitwise"), "frac": (dict(gen="unif", lo=-4.0, hi=4.0), "bitwise"),
}
for op, (g, claim) in UNARY.items():
    ins = {"x": T(S, **g)} if g else X
    exact = claim == "bitwise" and op in ("neg", "abs", "relu", "floor", "ceil", "round", "trunc", "sign", "frac")
    one(op, "aten.%s.default" % op, ins, [x], S, exact=exact, torch=claim)
one("gelu.tanh", "aten.gelu.default", X, [x], S, kwargs={"approximate": "tanh"})
one("softplus.beta", "aten.softplus.default", X, [x, 2.0, 1.0], S)
one("elu.alpha", "aten.elu.default", X, [x, 0.5], S)
one("leaky_relu.slope", "aten.leaky_relu.default", X, [x, 0.2], S, torch="bitwise")
SPEC = {"x": T(S, gen="special")}
for op in ("isnan", "isinf", "isfinite"):
    one(op, "aten.%s.default" % op, SPEC, [x], S, "bool", **V)
one("logical_not", "aten.logical_not.default", {"b": T(S, "bool", gen="bool")}, [N("b")], S, "bool", **V)
one("bitwise_not", "aten.bitwise_not.default", {"i": T(S, "int64", gen="int", lo=-50, hi=50)}, [N("i")], S, "int64", **V)
one("bitwise_not.bool", "aten.bitwise_not.default", {"b": T(S, "bool", gen="bool")}, [N("b")], S, "bool", **V)

XY = {"x": T(S), "y": T(S)}
XB = {"x": T(S), "y": T([4])}
y = N("y")
one("add", "aten.add.Tensor", XB, [x, y], S, torch="bitwise")
one("add.alpha", "aten.add.Tensor", XY, [x, y], S, kwargs={"alpha": 2.5})  # torch's a + alpha * b may be one FMA
one("add.scalar", "aten.add.Tensor", X, [x, 1.25], S, torch="bitwise")
one("add.int64", "aten.add.Tensor", {"i": T(S, "int64", gen="int", lo=-50, hi=50), "j": T(S, "int64", gen="int", lo=-50, hi=50)},
    [N("i"), N("j")], S, "int64", **V)
one("sub", "aten.sub.Tensor", XB, [x, y], S, torch="bitwise")
one("sub.alpha", "aten.sub.Tensor", XY, [x, y], S, kwargs={"alpha": 0.5})
one("mul", "aten.mul.Tensor", XB, [x, y], S, torch="bitwise")
one("mul.scalar", "aten.mul.Tensor", X, [x, 0.3], S, torch="bitwise")
one("mul.int64", "aten.mul.Tensor", {"i": T(S, "int64", gen="int", lo=-50, hi=50), "j": T(S, "int64", gen="int", lo=-50, hi=50)},
    [N("i"), N("j")], S, "int64", **V)
one("div", "aten.div.Tensor", {"x": T(S), "y": T([4], **POS)}, [x, y], S, torch="bitwise")
one("div.scalar", "aten.div.Tensor", X, [x, 3.0], S, torch="bitwise")
one("div.floor", "aten.div.Tensor_mode", {"x": T(S), "y": T(S, **POS)}, [x, y], S, kwargs={"rounding_mode": "floor"})
one("div.trunc", "aten.div.Tensor_mode", {"x": T(S), "y": T(S, **POS)}, [x, y], S, kwargs={"rounding_mode": "trunc"})
one("div.int_floor", "aten.div.Tensor_mode", {"i": T(S, "int64", gen="int", lo=-50, hi=50), "j": T(S, "int64", gen="int", lo=1, hi=7)},
    [N("i"), N("j")], S, "int64", kwargs={"rounding_mode": "floor"}, **V)
one("rsub", "aten.rsub.Scalar", X, [x, 1.0], S, torch="bitwise")
one("rsub.tensor", "aten.rsub.Tensor", XB, [x, y], S, torch="bitwise")
one("rsub.tensor_alpha", "aten.rsub.Tensor", XY, [x, y], S, kwargs={"alpha": 2.0})
one("pow.scalar", "aten.pow.Tensor_Scalar", X, [x, 2], S, torch="bitwise")
one("pow.scalar_frac", "aten.pow.Tensor_Scalar", {"x": T(S, **POS)}, [x, 1.5], S)
one("pow.tensor", "aten.pow.Tensor_Tensor", {"x": T(S, **POS), "y": T(S, gen="unif", lo=-2.0, hi=2.0)}, [x, y], S)
one("pow.rpow", "aten.pow.Scalar", X, [2.0, x], S)
one("clamp", "aten.clamp.default", X, [x, -0.5, 0.5], S, **V)
one("clip", "aten.clip.default", X, [x, -0.5, 0.5], S, **V)
one("clamp_min", "aten.clamp_min.default", X, [x, 0.0], S, **V)
one("clamp_max", "aten.clamp_max.default", X, [x, 0.25], S, **V)
SPXY = {"x": T(S, gen="special"), "y": T(S)}
for op in ("maximum", "minimum", "fmax", "fmin"):
    one(op, "aten.%s.default" % op, SPXY, [x, y], S, **V)
for op in ("fmax", "fmin"):  # NaN in the other operand
    one(op + ".nan_other", "aten.%s.default" % op, SPXY, [y, x], S, **V)
one("atan2", "aten.atan2.default", XY, [x, y], S)
one("remainder", "aten.remainder.Tensor", {"x": T(S, gen="unif", lo=-5.0, hi=5.0), "y": T(S, gen="unif", lo=0.5, hi=2.0)}, [x, y], S)
one("remainder.int", "aten.remainder.Scalar", {"i": T(S, "int64", gen="int", lo=-50, hi=50)}, [N("i"), 7], S, "int64", **V)
one("fmod", "aten.fmod.Tensor", {"x": T(S, gen="unif", lo=-5.0, hi=5.0), "y": T(S, gen="unif", lo=0.5, hi=2.0)}, [x, y], S)
one("floor_divide", "aten.floor_divide.default", {"i": T(S, "int64", gen="int", lo=-50, hi=50), "j": T(S, "int64", gen="int", lo=1, hi=7)},
    [N("i"), N("j")], S, "int64", **V)
II = {"i": T(S, "int64", gen="int", lo=-64, hi=64), "j": T(S, "int64", gen="int", lo=-64, hi=64)}
BB = {"a": T(S, "bool", gen="bool"), "b": T(S, "bool", gen="bool")}
for op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    one(op, "aten.%s.Tensor" % op, II, [N("i"), N("j")], S, "int64", **V)
    one(op + ".bool", "aten.%s.Tensor" % op, BB, [N("a"), N("b")], S, "bool", **V)
for op in ("logical_and", "logical_or", "logical_xor"):
    one(op, "aten.%s.default" % op, BB, [N("a"), N("b")], S, "bool", **V)
TIES = {"x": T(S, gen="int", lo=-3, hi=3), "y": T([4], gen="int", lo=-3, hi=3)}
for op in ("eq", "ne", "lt", "le", "gt", "ge"):
    one(op, "aten.%s.Tensor" % op, TIES, [x, y], S, "bool", **V)
    one(op + ".scalar", "aten.%s.Scalar" % op, TIES, [x, 1.0], S, "bool", **V)
one("eq.int64", "aten.eq.Tensor", II, [N("i"), N("j")], S, "bool", **V)
one("where", "aten.where.self", {"c": T(S, "bool", gen="bool"), "x": T(S), "y": T([4])}, [N("c"), x, y], S, **V)
one("where.scalar", "aten.where.ScalarOther", {"c": T(S, "bool", gen="bool"), "x": T(S)}, [N("c"), x, 0.0], S, **V)
one("masked_fill", "aten.masked_fill.Scalar", {"x": T(S), "m": T([3, 1], "bool", gen="bool")}, [x, N("m"), {"float": "-inf"}], S, **V)
one("outer", "aten.outer.default", {"a": T([3]), "b": T([4])}, [N("a"), N("b")], [3, 4], torch="bitwise")
case("add_", XY, [("y_", "aten.add_.Tensor", [x, y], {}, meta(S))], "y_", torch="bitwise")
case("div_", {"x": T(S), "y": T(S, **POS)}, [("y_", "aten.div_.Tensor", [x, y], {}, meta(S))], "y_", torch="bitwise")

# ---- reductions --------------------------------------------------------------------------------
R = {"x": T([2, 3, 5])}
one("sum", "aten.sum.dim_IntList", R, [x, [1]], [2, 5])
one("sum.all", "aten.sum.default", R, [x], [])
one("sum.dims_apart", "aten.sum.dim_IntList", R, [x, [0, 2], True], [1, 3, 1])
one("mean", "aten.mean.dim", R, [x, [-1], True], [2, 3, 1])
one("mean.dims_apart", "aten.mean.dim", R, [x, [0, 2]], [3])
one("prod", "aten.prod.dim_int", {"x": T([2, 3, 5], gen="unif", lo=0.5, hi=1.5)}, [x, 1], [2, 5])
one("amax", "aten.amax.default", R, [x, [1]], [2, 5], **V)
one("amin", "aten.amin.default", R, [x, [-1], True], [2, 3, 1], **V)
one("any", "aten.any.dim", {"b": T([2, 3, 5], "bool", gen="bool", p=0.2)}, [N("b"), 2], [2, 3], "bool", **V)
one("all", "aten.all.dim", {"b": T([2, 3, 5], "bool", gen="bool", p=0.8)}, [N("b"), 2], [2, 3], "bool", **V)
PERM = {"x": T([2, 3, 5], gen="perm", scale=0.25)}
one("argmax", "aten.argmax.default", PERM, [x, 2], [2, 3], "int64", **V)
one("argmin", "aten.argmin.default", PERM, [x, 1, True], [2, 1, 5], "int64", **V)
one("var", "aten.var.correction", R, [x, [2]], [2, 3], kwargs={"correction": 1})
one("var.keep0", "aten.var.correction", R, [x, [1]], [2, 1, 5], kwargs={"correction": 0, "keepdim": True})
one("cumsum", "aten.cumsum.default", R, [x, 2], [2, 3, 5])
one("cumsum.int64", "aten.cumsum.default", {"i": T([2, 3, 5], "int64", gen="int", lo=-9, hi=9)}, [N("i"), 2], [2, 3, 5], "int64", **V)
one("cumprod", "aten.cumprod.default", {"x": T([2, 3, 5], gen="unif", lo=0.5, hi=1.5)}, [x, 1], [2, 3, 5])
one("linalg_vector_norm", "aten.linalg_vector_norm.default", R, [x, 2, [-1], True], [2, 3, 1])
one("avg_pool1d", "aten.avg_pool1d.default", {"x": T([2, 3, 8])}, [x, [2], [2]], [2, 3, 4])
one("avg_pool2d", "aten.avg_pool2d.default", {"x": T([1, 2, 4, 6])}, [x, [2, 2], [2, 2]], [1, 2, 2, 3])
one("avg_pool3d", "aten.avg_pool3d.default", {"x": T([1, 2, 4, 4, 4])}, [x, [2, 2, 2], [2, 2, 2]], [1, 2, 2, 2, 2])
one("softmax", "aten.softmax.int", R, [x, -1], [2, 3, 5])
one("_softmax", "aten._softmax.default", R, [x, 1, False], [2, 3, 5])
one("log_softmax", "aten.log_softmax.int", R, [x, -1], [2, 3, 5])
one("_log_softmax", "aten._log_softmax.default", R, [x, 2, False], [2, 3, 5])
one("argsort", "aten.argsort.default", PERM, [x, 2], [2, 3, 5], "int64", **V)
one("argsort.stable_desc", "aten.argsort.stable", {"x": T([2, 3, 5], gen="int", lo=0, hi=3)}, [x],
    [2, 3, 5], "int64", kwargs={"stable": True, "dim": 2, "descending": True}, **V)
for k, dt in ((0, "float32"), (1, "int64")):
    case("topk.%d" % k, PERM, [("t", "aten.topk.default", [x, 2, 2], {}, [meta([2, 3, 2]), meta([2, 3, 2], "int64")]),
                               ("y", "getitem", [N("t"), k], {}, meta([2, 3, 2], dt))], "y", **V)
    case("sort.%d" % k, PERM, [("t", "aten.sort.default", [x, 1], {}, [meta([2, 3, 5]), meta([2, 3, 5], "int64")]),
                               ("y", "getitem", [N("t"), k], {}, meta([2, 3, 5], dt))], "y", **V)
case("sort.stable_desc", {"x": T([2, 6], gen="int", lo=0, hi=3)},
     [("t", "aten.sort.stable", [x], {"stable": True, "dim": 1, "descending": True}, [meta([2, 6]), meta([2, 6], "int64")]),
      ("y", "getitem", [N("t"), 1], {}, meta([2, 6], "int64"))], "y", **V)

# ---- indexing ----------------------------------------------------------------------------------
IDX = lambda shape, hi: T(shape, "int64", gen="int", lo=0, hi=hi)  # noqa: E731
one("embedding", "aten.embedding.default", {"w": T([10, 4]), "i": IDX([2, 3], 10)}, [N("w"), N("i")], [2, 3, 4], **V)
one("index_select", "aten.index_select.default", {"x": T(S), "i": IDX([5], 3)}, [x, 1, N("i")], [2, 5, 4], **V)
one("index", "aten.index.Tensor", {"x": T(S), "i": IDX([2, 2], 2)}, [x, [N("i")]], [2, 2, 3, 4], **V)
one("index.dim1", "aten.index.Tensor", {"x": T(S), "i": IDX([5], 3)}, [x, [None, N("i")]], [2, 5, 4], **V)
one("index.mask", "aten.index.Tensor", {"x": T([5, 3]), "m": T([5], "bool", gen="values", values=[1, 0, 1, 1, 0])},
    [x, [N("m")]], [3, 3], **V)
one("gather", "aten.gather.default", {"x": T(S), "i": IDX([2, 2, 4], 3)}, [x, 1, N("i")], [2, 2, 4], **V)
UNIQ = {"x": T([5, 4]), "i": T([3], "int64", gen="values", values=[4, 0, 2]), "v": T([3, 4])}
one("index_put", "aten.index_put.default", UNIQ, [x, [N("i")], N("v")], [5, 4], **V)
one("index_put.accumulate", "aten.index_put.default",
    {"x": T([5, 4]), "i": T([3], "int64", gen="values", values=[4, 0, 4]), "v": T([3, 4])},
    [x, [N("i")], N("v"), True], [5, 4])
one("index_put_", "aten.index_put_.default", UNIQ, [x, [N("i")], N("v")], [5, 4], **V)
one("index_put.mask", "aten.index_put.default", {"x": T([5, 3]), "m": T([5], "bool", gen="values", values=[0, 1, 1, 0, 1]),
                                                  "v": T([3, 3])}, [x, [N("m")], N("v")], [5, 3], **V)
one("index.mask2d", "aten.index.Tensor",
    {"x": T([2, 3, 4]), "m": T([3, 4], "bool", gen="values", values=[0, 1, 0, 1, 1, 0, 1, 0, 0, 1, 0, 0])},
    [x, [None, N("m")]], [2, 5], **V)
one("index_put.mask2d", "aten.index_put.default",
    {"x": T([2, 3, 4]), "m": T([3, 4], "bool", gen="values", values=[0, 1, 0, 1, 1, 0, 1, 0, 0, 1, 0, 0]), "v": T([5])},
    [x, [None, N("m")], N("v")], [2, 3, 4], **V)
one("index_copy", "aten.index_copy.default", UNIQ, [x, 0, N("i"), N("v")], [5, 4], **V)
one("index_add", "aten.index_add.default", {"x": T([5, 4]), "i": T([3], "int64", gen="values", values=[4, 0, 4]), "v": T([3, 4])},
    [x, 0, N("i"), N("v")], [5, 4], kwargs={"alpha": 2.0})
SC = {"x": T([3, 5]), "i": T([3, 2], "int64", gen="values", values=[4, 0, 1, 3, 2, 2]), "v": T([3, 2])}
one("scatter", "aten.scatter.src", {"x": T([3, 5]), "i": T([3, 2], "int64", gen="values", values=[4, 0, 1, 3, 2, 0]),
                                    "v": T([3, 2])}, [x, 1, N("i"), N("v")], [3, 5], **V)
one("scatter.value", "aten.scatter.value", SC, [x, 1, N("i"), 2.5], [3, 5], **V)
one("scatter_add", "aten.scatter_add.default", SC, [x, 1, N("i"), N("v")], [3, 5])
for mode in ("sum", "prod", "mean", "amax", "amin"):
    for inc in (True, False):
        one("scatter_reduce.%s.%s" % (mode, "self" if inc else "noself"), "aten.scatter_reduce.two", SC,
            [x, 1, N("i"), N("v"), mode], [3, 5], kwargs={"include_self": inc}, exact=mode in ("amax", "amin"))
one("nonzero", "aten.nonzero.default", {"b": T([2, 3], "bool", gen="values", values=[0, 1, 1, 0, 0, 1])}, [N("b")], [3, 2],
    "int64", **V)
case("nonzero_numpy", {"b": T([2, 3], "bool", gen="values", values=[0, 1, 1, 0, 0, 1])},
     [("t", "aten.nonzero_numpy.default", [N("b")], {}, [meta([3], "int64"), meta([3], "int64")]),
      ("y", "getitem", [N("t"), 1], {}, meta([3], "int64"))], "y", **V)
one("constant_pad_nd", "aten.constant_pad_nd.default", X, [x, [1, 2], 0.5], [2, 3, 7], **V)
one("constant_pad_nd.2d", "aten.constant_pad_nd.default", X, [x, [1, 0, 0, 2]], [2, 5, 5], **V)
one("pad", "aten.pad.default", X, [x, [1, 1], "constant", 0.0], [2, 3, 6], **V)
for mode in ("reflect", "replicate", "circular"):
    one("pad." + mode, "aten.pad.default", X, [x, [2, 1], mode], [2, 3, 7], **V)
one("repeat", "aten.repeat.default", X, [x, [2, 1, 2]], [4, 3, 8], **V)
one("repeat.5d", "aten.repeat.default", {"x": T([1, 2, 1, 2, 2])}, [x, [2, 1, 3, 1, 1]], [2, 2, 3, 2, 2], **V)
one("repeat_interleave", "aten.repeat_interleave.self_int", X, [x, 2, 1], [2, 6, 4], **V)
case("meshgrid", {"a": T([3]), "b": T([4])},
     [("t", "aten.meshgrid.indexing", [[N("a"), N("b")]], {"indexing": "ij"}, [meta([3, 4]), meta([3, 4])]),
      ("y", "getitem", [N("t"), 1], {}, meta([3, 4]))], "y", **V)

# ---- matmuls, norms, attention, convolution: whole, as eager runs them ---------------------------
AC = dict(autocast="bfloat16", torch="bitwise")
SDPA_FP32 = {"rtol": 1e-4, "atol": 1e-5}  # torch's fp32 SDPA: the memory-efficient kernel, not cuDNN
LIN = {"x": T([2, 3, 16]), "w": T([8, 16]), "b": T([8])}
one("linear", "aten.linear.default", LIN, [x, N("w"), N("b")], [2, 3, 8], **AC)
one("linear.nobias", "aten.linear.default", LIN, [x, N("w")], [2, 3, 8], **AC)
# x^T as a capture records it (strides 48, 1, 3): torch's linear does not flatten a non-contiguous
# input but runs matmul, which does not fold it: bmm('t', 't') of x^T and W^T expanded over the batch
# (stride 0), then the bias added (rounded twice in bf16): a BMM with op->layout 11 and an ADD
case("linear.transposed_in", {"x": T([2, 16, 3]), "w": T([8, 16]), "b": T([8])},
     [("p", "aten.transpose.int", [x, 1, 2], {}, meta([2, 3, 16], stride=[48, 1, 3])),
      ("y", "aten.linear.default", [N("p"), N("w"), N("b")], {}, meta([2, 3, 8]))], "y", **AC)
MM = dict(autocast="bfloat16", torch="tol")
MMB = dict(autocast="bfloat16", torch="bitwise")  # torch's cuBLAS call (kernels/cuda/torch/bmm_torch.c)
one("bmm", "aten.bmm.default", {"a": T([2, 3, 16]), "b": T([2, 16, 5])}, [N("a"), N("b")], [2, 3, 5], **MMB)
one("mm", "aten.mm.default", {"a": T([3, 16]), "b": T([16, 5])}, [N("a"), N("b")], [3, 5], **MMB)
one("matmul", "aten.matmul.default", {"a": T([2, 3, 16]), "b": T([16, 5])}, [N("a"), N("b")], [2, 3, 5], **MMB)
one("matmul.batched", "aten.matmul.default", {"a": T([2, 1, 3, 16]), "b": T([2, 16, 5])}, [N("a"), N("b")], [2, 2, 3, 5], **MMB)
one("baddbmm", "aten.baddbmm.default", {"c": T([2, 3, 5]), "a": T([2, 3, 16]), "b": T([2, 16, 5])},
    [N("c"), N("a"), N("b")], [2, 3, 5], kwargs={"beta": 0.5, "alpha": 2.0}, **MMB)
one("addmm", "aten.addmm.default", {"c": T([5]), "a": T([3, 16]), "b": T([16, 5])}, [N("c"), N("a"), N("b")], [3, 5], **MM)
NORM = {"x": T([2, 3, 16]), "w": T([16]), "b": T([16])}
one("layer_norm", "aten.layer_norm.default", NORM, [x, [16], N("w"), N("b"), 1e-5], [2, 3, 16], autocast="bfloat16",
    torch="bitwise")
one("layer_norm.noaffine", "aten.layer_norm.default", NORM, [x, [16], None, None, 1e-6], [2, 3, 16], torch="bitwise")
one("rms_norm", "aten.rms_norm.default", NORM, [x, [16], N("w"), 1e-6], [2, 3, 16], autocast="bfloat16", torch="bitwise")
one("rms_norm.eps_none", "aten.rms_norm.default", NORM, [x, [16], N("w"), None], [2, 3, 16], torch="bitwise")
GN = {"x": T([2, 4, 3, 3]), "w": T([4]), "b": T([4])}
one("group_norm", "aten.group_norm.default", GN, [x, 2, N("w"), N("b"), 1e-5], [2, 4, 3, 3], autocast="bfloat16")
case("native_group_norm", GN,
     [("t", "aten.native_group_norm.default", [x, N("w"), N("b"), 2, 4, 9, 2, 1e-5], {},
       [meta([2, 4, 3, 3]), meta([2, 2]), meta([2, 2])]),
      ("y", "getitem", [N("t"), 0], {}, meta([2, 4, 3, 3]))], "y")
for k in (0, 1):
    case("linalg_qr.%d" % k, {"a": T([4, 3])},
         [("t", "aten.linalg_qr.default", [N("a")], {}, [meta([4, 3]), meta([3, 3])]),
          ("y", "getitem", [N("t"), k], {}, meta([[4, 3], [3, 3]][k]))], "y", nmse=1e-10,
         torch={"rtol": 1e-4, "atol": 1e-5})
one("diag_embed", "aten.diag_embed.default", {"x": T([2, 3])}, [x], [2, 3, 3], **V)
QKV = {"q": T([1, 2, 8, 16]), "k": T([1, 2, 8, 16]), "v": T([1, 2, 8, 16])}
q, k_, v = N("q"), N("k"), N("v")
one("scaled_dot_product_attention", "aten.scaled_dot_product_attention.default", QKV, [q, k_, v], [1, 2, 8, 16],
    torch_fp32=SDPA_FP32, **AC)
one("sdpa.causal", "aten.scaled_dot_product_attention.default", QKV, [q, k_, v], [1, 2, 8, 16],
    kwargs={"is_causal": True}, autocast="bfloat16")
one("sdpa.bool_mask", "aten.scaled_dot_product_attention.default",
    dict(QKV, m=T([1, 1, 1, 8], "bool", gen="values", values=[1, 1, 1, 0, 1, 0, 1, 1])), [q, k_, v, N("m")], [1, 2, 8, 16],
    autocast="bfloat16")
one("sdpa.gqa", "aten.scaled_dot_product_attention.default",
    {"q": T([1, 4, 8, 16]), "k": T([1, 2, 8, 16]), "v": T([1, 2, 8, 16])}, [q, k_, v], [1, 4, 8, 16],
    kwargs={"enable_gqa": True}, autocast="bfloat16", torch="bitwise", torch_fp32=SDPA_FP32)
# torch's fp32 conv: cuDNN in TF32. drift's convolutions are PATCHIFY + LINEAR or im2col + BMM, not
# cuDNN: bitwise with torch claimed for the Conv3d patch embedding only (Wan's, bitwise on the H200)
CONV = dict(autocast="bfloat16", torch_fp32={"rtol": 1e-2, "atol": 1e-2})
one("conv1d.patch", "aten.conv1d.default", {"x": T([1, 2, 8]), "w": T([3, 2, 2]), "b": T([3])},
    [x, N("w"), N("b"), [2]], [1, 3, 4], **CONV)
one("conv1d.pad", "aten.conv1d.default", {"x": T([1, 2, 8]), "w": T([3, 2, 3]), "b": T([3])},
    [x, N("w"), N("b"), [1], [1]], [1, 3, 8], **CONV)
one("conv2d.patch", "aten.conv2d.default", {"x": T([1, 2, 4, 4]), "w": T([3, 2, 2, 2]), "b": T([3])},
    [x, N("w"), N("b"), [2, 2]], [1, 3, 2, 2], **CONV)
one("conv2d.depthwise", "aten.conv2d.default", {"x": T([1, 4, 5, 5]), "w": T([4, 1, 3, 3]), "b": T([4])},
    [x, N("w"), N("b"), [1, 1], [1, 1], [1, 1], 4], [1, 4, 5, 5], **CONV)
one("conv3d.patch", "aten.conv3d.default", {"x": T([1, 2, 2, 4, 4]), "w": T([3, 2, 1, 2, 2]), "b": T([3])},
    [x, N("w"), N("b"), [1, 2, 2]], [1, 3, 2, 2, 2], **CONV, torch="bitwise")
one("convolution", "aten.convolution.default", {"x": T([1, 2, 4, 4]), "w": T([3, 2, 2, 2]), "b": T([3])},
    [x, N("w"), N("b"), [2, 2], [0, 0], [1, 1], False, [0, 0], 1], [1, 3, 2, 2], **CONV)
one("convolution.transposed", "aten.convolution.default", {"x": T([1, 2, 3, 3]), "w": T([2, 3, 2, 2]), "b": T([3])},
    [x, N("w"), N("b"), [2, 2], [0, 0], [1, 1], True, [0, 0], 1], [1, 3, 6, 6], **CONV)

# ---- creation, concatenation -------------------------------------------------------------------
F32 = {"dtype": DT("float32")}
case("arange", X, [("a", "aten.arange.start", [0, 4], F32, meta([4])),
                   ("y", "aten.add.Tensor", [x, N("a")], {}, meta(S))], "y", torch="bitwise")
one("arange.int64", "aten.arange.start_step", {}, [1, 11, 3], [4], "int64", kwargs={"dtype": DT("int64")}, **V)
one("linspace", "aten.linspace.default", {}, [-1.0, 2.0, 7], [7], kwargs=F32)
for nm in ("zeros_like", "ones_like"):
    one(nm, "aten.%s.default" % nm, X, [x], S, **V)
one("full_like", "aten.full_like.default", X, [x, 2.5], S, **V)
for nm, args in (("empty_like", [x]), ("new_empty", [x, [2, 5]]), ("empty", [[2, 5]])):
    shp = S if nm == "empty_like" else [2, 5]
    case(nm, X, [("e", "aten.%s.%s" % (nm, "memory_format" if nm == "empty" else "default"), args,
                  F32 if nm == "empty" else {}, meta(shp)),
                 ("y", "aten.fill.Scalar", [N("e"), -1.5], {}, meta(shp))], "y", **V)
one("new_zeros", "aten.new_zeros.default", X, [x, [2, 5]], [2, 5], **V)
one("new_ones", "aten.new_ones.default", X, [x, [2, 5]], [2, 5], **V)
one("new_full", "aten.new_full.default", X, [x, [2, 5], 3.0], [2, 5], **V)
one("zeros", "aten.zeros.default", {}, [[2, 3]], [2, 3], kwargs=F32, **V)
one("ones", "aten.ones.default", {}, [[2, 3]], [2, 3], kwargs=F32, **V)
one("full", "aten.full.default", {}, [[2, 3], 0.75], [2, 3], kwargs=F32, **V)
one("full.int64", "aten.full.default", {}, [[2, 3], 7], [2, 3], "int64", kwargs={"dtype": DT("int64")}, **V)
case("scalar_tensor", X, [("s", "aten.scalar_tensor.default", [0.5], F32, meta([])),
                          ("y", "aten.mul.Tensor", [x, N("s")], {}, meta(S))], "y", torch="bitwise")
one("fill.tensor", "aten.fill.Tensor", {"x": T(S), "v": T([], gen="values", values=[1.25])}, [x, N("v")], S, **V)
one("cat", "aten.cat.default", {"x": T(S), "y": T([2, 2, 4])}, [[x, y], 1], [2, 5, 4], **V)
one("cat.int64", "aten.cat.default", {"i": T([2, 2], "int64", gen="int", lo=0, hi=9), "j": T([2, 3], "int64", gen="int", lo=0, hi=9)},
    [[N("i"), N("j")], -1], [2, 5], "int64", **V)
one("stack", "aten.stack.default", XY, [[x, y], 1], [2, 2, 3, 4], **V)

# ---- overloads and arguments as exports write them ---------------------------------------------
BIG = 9223372036854775807
one("slice.to_end", "aten.slice.Tensor", X, [x, 1, 1, BIG], [2, 2, 4], **V)
one("slice.negative", "aten.slice.Tensor", X, [x, 2, -3, -1], [2, 3, 2], **V)
one("expand.minus1", "aten.expand.default", {"x": T([2, 1, 4])}, [x, [-1, 3, -1]], [2, 3, 4], **V)
one("squeeze.dims", "aten.squeeze.dims", {"x": T([2, 1, 4, 1])}, [x, [1, 3]], [2, 4], **V)
one("squeeze.all", "aten.squeeze.default", {"x": T([2, 1, 4, 1])}, [x], [2, 4], **V)
one("to.dtype_layout", "aten.to.dtype_layout", X, [x], S, "bfloat16",
    kwargs={"dtype": DT("bfloat16"), "layout": {"layout": "strided"}, "device": {"device": "cuda:0"}}, **V)
one("to.device", "aten.to.device", X, [x, {"device": "cuda:0"}, DT("float16")], S, "float16", **V)
one("_to_copy.int64", "aten._to_copy.default", {"x": T(S, gen="unif", lo=-6.0, hi=6.0)}, [x], S, "int64",
    kwargs={"dtype": DT("int64")}, **V)
one("sum.dtype", "aten.sum.dim_IntList", R, [x, [1]], [2, 5], "float64", kwargs={"dtype": DT("float64")})
one("sum.bool", "aten.sum.dim_IntList", {"b": T([2, 3, 5], "bool", gen="bool")}, [N("b"), [2]], [2, 3], "int64", **V)
one("mean.all", "aten.mean.default", R, [x], [])
one("softmax.dtype", "aten.softmax.int", R, [x, -1, DT("float32")], [2, 3, 5])
one("clamp.tensor", "aten.clamp.Tensor", {"x": T(S), "lo": T([4], gen="unif", lo=-1.0, hi=0.0)}, [x, N("lo")], S, **V)
one("clamp.tensor_both", "aten.clamp.Tensor", {"x": T(S, gen="special"), "lo": T([3, 1], gen="unif", lo=-1.0, hi=0.0),
                                               "hi": T([4], gen="unif", lo=0.0, hi=1.0)}, [x, N("lo"), N("hi")], S, **V)
one("where.scalar_self", "aten.where.ScalarSelf", {"c": T(S, "bool", gen="bool"), "x": T(S)}, [N("c"), 1.0, x], S, **V)
one("masked_fill.tensor", "aten.masked_fill.Tensor", {"x": T(S), "m": T(S, "bool", gen="bool"),
                                                      "v": T([], gen="values", values=[0.5])}, [x, N("m"), N("v")], S, **V)
one("full_like.dtype", "aten.full_like.default", X, [x, 3], S, "int64", kwargs={"dtype": DT("int64")}, **V)
one("new_zeros.dtype", "aten.new_zeros.default", X, [x, [3]], [3], "bool", kwargs={"dtype": DT("bool")}, **V)
one("arange.default", "aten.arange.default", {}, [5], [5], "int64", **V)
one("arange.float_step", "aten.arange.start_step", {}, [0.0, 1.0, 0.25], [4], kwargs=F32)
one("cat.promote", "aten.cat.default", {"x": T([2, 3]), "i": T([2, 2], "int64", gen="int", lo=0, hi=9)},
    [[x, N("i")], 1], [2, 5], **V)
one("cat.bf16_fp32", "aten.cat.default", {"x": T([2, 3], "bfloat16"), "y": T([2, 2])}, [[x, y], 1], [2, 5], **V)
one("add.bf16_fp32", "aten.add.Tensor", {"x": T(S, "bfloat16"), "y": T(S)}, [x, y], S, torch="bitwise")
one("mul.int_float", "aten.mul.Tensor", {"i": T(S, "int64", gen="int", lo=-9, hi=9), "x": T(S)}, [N("i"), x], S, torch="bitwise")
one("div.int_true", "aten.div.Tensor", {"i": T(S, "int64", gen="int", lo=-9, hi=9), "j": T(S, "int64", gen="int", lo=1, hi=5)},
    [N("i"), N("j")], S, torch="bitwise")
one("add.int_scalar", "aten.add.Tensor", {"i": T(S, "int64", gen="int", lo=-9, hi=9)}, [N("i"), 3], S, "int64", **V)
one("mul.bool_float", "aten.mul.Tensor", {"x": T(S), "b": T(S, "bool", gen="bool")}, [x, N("b")], S, **V)
one("embedding.padding_idx", "aten.embedding.default", {"w": T([10, 4]), "i": IDX([2, 3], 10)}, [N("w"), N("i"), 0], [2, 3, 4],
    **V)
one("index_select.int32", "aten.index_select.default", {"x": T(S), "i": T([5], "int32", gen="int", lo=0, hi=3)},
    [x, 1, N("i")], [2, 5, 4], **V)
one("gather.neg_dim", "aten.gather.default", {"x": T(S), "i": IDX([2, 3, 2], 4)}, [x, -1, N("i")], [2, 3, 2], **V)
one("argmax.all", "aten.argmax.default", PERM, [x], [], "int64", **V)
one("amax.all", "aten.amax.default", R, [x, []], [], **V)
one("any.all", "aten.any.default", {"b": T([2, 3, 5], "bool", gen="bool", p=0.05)}, [N("b")], [], "bool", **V)
one("cumsum.dtype", "aten.cumsum.default", R, [x, 1], [2, 3, 5], "float64", kwargs={"dtype": DT("float64")})
one("unsqueeze.neg", "aten.unsqueeze.default", X, [x, -1], [2, 3, 4, 1], **V)
one("permute.neg", "aten.permute.default", X, [x, [-1, 0, -2]], [4, 2, 3], **V)
one("select.neg", "aten.select.int", X, [x, -1, -1], [2, 3], **V)
one("index.negative", "aten.index.Tensor", {"x": T([5, 3]), "i": T([4], "int64", gen="values", values=[-1, 0, -5, 2])},
    [x, [N("i")]], [4, 3], **V)
one("index_put.negative", "aten.index_put.default", {"x": T([5, 4]), "i": T([2], "int64", gen="values", values=[-1, 1]),
                                                     "v": T([2, 4])}, [x, [N("i")], N("v")], [5, 4], **V)
for k, dt in ((0, "float32"), (1, "int64")):
    case("topk.smallest.%d" % k, PERM, [("t", "aten.topk.default", [x, 3, 1, False], {}, [meta([2, 3, 5]), meta([2, 3, 5], "int64")]),
                                        ("y", "getitem", [N("t"), k], {}, meta([2, 3, 5], dt))], "y", **V)
# ties everywhere (integral values 0..2): which indices and in which order torch's CUDA topk
# returns them (kernels/topk_order.h); the indices are compared, exactly
TIES = {"x": T([8, 16], gen="int", lo=0, hi=3)}
for nm, args, k in (("k2", [x, 2], 2), ("k4", [x, 4], 4), ("k8", [x, 8], 8), ("smallest", [x, 3, -1, False], 3),
                    ("unsorted", [x, 4, -1, True, False], 4)):
    case("topk.ties.%s" % nm, TIES, [("t", "aten.topk.default", args, {}, [meta([8, k]), meta([8, k], "int64")]),
                                     ("y", "getitem", [N("t"), 1], {}, meta([8, k], "int64"))], "y", **V)
case("topk.ties.k40", {"x": T([4, 64], gen="int", lo=0, hi=3)},
     [("t", "aten.topk.default", [x, 40], {}, [meta([4, 40]), meta([4, 40], "int64")]),
      ("y", "getitem", [N("t"), 1], {}, meta([4, 40], "int64"))], "y", **V)
case("sort.descending", PERM, [("t", "aten.sort.default", [x, -1, True], {}, [meta([2, 3, 5]), meta([2, 3, 5], "int64")]),
                               ("y", "getitem", [N("t"), 1], {}, meta([2, 3, 5], "int64"))], "y", **V)
one("argsort.descending", "aten.argsort.default", PERM, [x, 1, True], [2, 3, 5], "int64", **V)
one("scatter.reduce_add", "aten.scatter.reduce", SC, [x, 1, N("i"), N("v")], [3, 5], kwargs={"reduce": "add"})
one("scatter.reduce_multiply", "aten.scatter.value_reduce", SC, [x, 1, N("i"), 1.5], [3, 5], kwargs={"reduce": "multiply"})
one("var.dim", "aten.var.dim", R, [x, [2], False, True], [2, 3, 1])
one("where.bcast_cond", "aten.where.self", {"c": T([3, 1], "bool", gen="bool"), "x": T(S), "y": T([4])}, [N("c"), x, y], S, **V)
one("pow.int_exponent", "aten.pow.Tensor_Tensor", {"x": T(S), "e": T(S, "int64", gen="int", lo=0, hi=4)}, [x, N("e")], S)
one("linalg_vector_norm.dtype", "aten.linalg_vector_norm.default", R, [x, 2, [-1], False], [2, 3], "float64",
    kwargs={"dtype": DT("float64")})
one("index_select.dim0", "aten.index_select.default", {"x": T([5, 3]), "i": IDX([7], 5)}, [x, 0, N("i")], [7, 3], **V)
one("gather.dim0", "aten.gather.default", {"x": T([4, 3]), "i": IDX([2, 3], 4)}, [x, 0, N("i")], [2, 3], **V)
one("embedding.1d", "aten.embedding.default", {"w": T([10, 4]), "i": IDX([5], 10)}, [N("w"), N("i")], [5, 4], **V)

# bf16 tensors as a model makes them (graph inputs are fp32 buffers: a bf16 buffer leaf is fp32 to the
# importer, the report's open point): an explicit cast, then the op in bf16
def bf16_then(name, target, ins, cast, args, out_shape, out_dtype="bfloat16", kwargs=None, **kw):
    nodes = [(c + "_h", "aten.to.dtype", [N(c), DT("bfloat16")], {}, meta(ins[c].shape, "bfloat16")) for c in cast]
    nodes.append(("out", target, args, kwargs or {}, meta(out_shape, out_dtype)))
    kw.setdefault("nmse", 1e-4)  # the oracle does not round the bf16 cast: bf16's bound
    case(name, ins, nodes, "out", **kw)


H = N("x_h")
bf16_then("add.bf16", "aten.add.Tensor", XY, ["x", "y"], [H, N("y_h")], S, torch="bitwise")
bf16_then("_softmax.bf16", "aten._softmax.default", R, ["x"], [H, -1, False], [2, 3, 5])
# half_to_float: torch's CUDA softmax takes it for a Half input only (bf16 is refused)
case("_softmax.half_to_float", R, [("x_f16", "aten.to.dtype", [x, DT("float16")], {}, meta([2, 3, 5], "float16")),
                                   ("out", "aten._softmax.default", [N("x_f16"), -1, True], {}, meta([2, 3, 5]))],
     "out", nmse=1e-5)
bf16_then("gelu.bf16", "aten.gelu.default", X, ["x"], [H], S)
bf16_then("silu.bf16", "aten.silu.default", X, ["x"], [H], S)
bf16_then("sum.bf16", "aten.sum.dim_IntList", R, ["x"], [H, [1]], [2, 5])
bf16_then("rms_norm.bf16_in", "aten.rms_norm.default", {"x": T([2, 3, 16]), "w": T([16])}, ["x", "w"],
          [H, [16], N("w_h"), 1e-6], [2, 3, 16], torch="bitwise")
bf16_then("linear.bf16_weights", "aten.linear.default", {"x": T([2, 3, 16]), "w": T([8, 16]), "b": T([8])}, ["x", "w", "b"],
          [H, N("w_h"), N("b_h")], [2, 3, 8], torch="bitwise")

# transposed operands as a capture records them (the val's strides): BMM's op->layout says how torch
# held them (replay/capture/aten_matmul_layout.c), so that the torch profile makes torch's cuBLAS call
case("bmm.transposed_b", {"a": T([2, 3, 16]), "k": T([2, 5, 16])},
     [("p", "aten.transpose.int", [N("k"), 1, 2], {}, meta([2, 16, 5], stride=[80, 1, 16])),
      ("y", "aten.bmm.default", [N("a"), N("p")], {}, meta([2, 3, 5]))], "y", **MMB)
case("matmul.transposed_in", {"x": T([2, 16, 3]), "w": T([16, 5])},
     [("p", "aten.transpose.int", [x, 1, 2], {}, meta([2, 3, 16], stride=[48, 1, 3])),
      ("y", "aten.matmul.default", [N("p"), N("w")], {}, meta([2, 3, 5]))], "y", **MMB)
case("linear.transposed_in.nobias", {"x": T([2, 16, 3]), "w": T([8, 16])},
     [("p", "aten.transpose.int", [x, 1, 2], {}, meta([2, 3, 16], stride=[48, 1, 3])),
      ("y", "aten.linear.default", [N("p"), N("w")], {}, meta([2, 3, 8]))], "y", **AC)

if __name__ == "__main__":
    names = set()
    for c in CASES:
        n = c["parity"]["name"]
        if n in names:
            sys.exit("duplicate case name %s" % n)
        names.add(n)
        sys.stdout.write(json.dumps(c, separators=(",", ":")) + "\n")
