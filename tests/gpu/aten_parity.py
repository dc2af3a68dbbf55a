#!/usr/bin/env python3
"""Parity per op-registry row against torch on the GPU (issue 31).

    python3 tests/gpu/aten_parity.py CASES.jsonl DUMP.jsonl

CASES: tests/data/parity/aten_cases.jsonl (tests/parity/aten_cases.py), one
drift-aten-graph document per line with its "parity" member. DUMP: what
`gpu_test_parity aten` wrote with ATEN_PARITY_DUMP set: per case and plan,
the inputs drift drew and the output of drift's cuda torch profile
(cuda:kernels=torch). For each line this runs the case's graph with torch on
the GPU, node by node with the real ATen ops (torch.ops.aten.*), under
torch.autocast("cuda", torch.bfloat16) for the "bf16" plan, on the same
inputs, and compares: bitwise where the case's "torch" is "bitwise", else
|drift - torch| <= atol + rtol * |torch| elementwise (atol times max |torch| where the
claim says "scale": "max": a sum's rounding scales with its terms, not its result), NaN
where torch has NaN.
Prints one PASS/FAIL line per case and plan and a summary line; exit 1 when
any FAIL. Needs torch with CUDA; no other package.
"""
import json
import math
import os
import operator
import sys

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64,
          "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
          "bool": torch.bool, "complex64": torch.complex64, "complex128": torch.complex128}
DRIFT_NAME = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.float64: "fp64",
              torch.int64: "int64", torch.int32: "int32", torch.bool: "bool"}
FACTORIES = ("arange", "linspace", "zeros", "ones", "full", "empty", "scalar_tensor")
DEV = torch.device(os.environ.get("ATEN_PARITY_DEVICE", "cuda"))  # "cpu": a dry run of this script without a GPU


def num(v):
    if isinstance(v, str):
        return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}[v]
    return v


def resolve(target):
    if target == "getitem":
        return operator.getitem
    if target == "drift.tuple":
        return lambda outs: tuple(outs)
    if target == "drift.constant":
        return lambda shape, dtype, data: torch.tensor(data, dtype=torch.float64).to(dtype).reshape(shape).to(DEV)
    ns, name, overload = target.split(".")
    assert ns == "aten", target
    return getattr(getattr(torch.ops.aten, name), overload)


def decode(v, env):
    if isinstance(v, list):
        return [decode(x, env) for x in v]
    if isinstance(v, dict):
        if "node" in v:
            return env[v["node"]]
        if "dtype" in v:
            return DTYPES[v["dtype"]]
        if "float" in v:
            return num(v["float"])
        if "device" in v:
            return DEV
        if "layout" in v:
            return torch.strided
        if "memory_format" in v:
            return getattr(torch, v["memory_format"])
        raise ValueError("cannot decode %r" % (v,))
    return v


def run_graph(doc, inputs, autocast):
    env = {}
    for n in doc["nodes"]:
        if n["op"] == "placeholder":
            meta = n["val"]
            vals = [float(num(x)) for x in inputs[n["name"]]]
            t = torch.tensor(vals, dtype=torch.float64).reshape(meta["shape"])
            env[n["name"]] = t.to(DTYPES[meta["dtype"]]).to(DEV)
    with torch.autocast(DEV.type, dtype=torch.bfloat16, enabled=autocast):
        for n in doc["nodes"]:
            if n["op"] != "call_function":
                continue
            fn = resolve(n["target"])
            args = decode(n["args"], env)
            kwargs = {k: decode(v, env) for k, v in n["kwargs"].items()}
            base = n["target"].split(".")[1] if n["target"].startswith("aten.") else ""
            if base in FACTORIES and "device" not in kwargs:
                kwargs["device"] = DEV  # the capture's device; drift's cases leave it out
            if autocast and base == "convolution":
                # a model reaches aten.convolution through conv_transposeNd / convNd, which autocast
                # casts; called directly it is below autocast's list: cast as those entries do
                args = [a.to(torch.bfloat16) if torch.is_tensor(a) and a.is_floating_point() else a for a in args]
            env[n["name"]] = fn(*args, **kwargs)
    out = [n for n in doc["nodes"] if n["op"] == "output"][0]["args"][0][0]["node"]
    return env[out]


def compare(got, want, claim):
    """got: drift's values (floats); want: torch's tensor. Returns (ok, text)."""
    w = want.detach().to("cpu")
    if w.is_complex():
        w = torch.view_as_real(w)
    wd = DRIFT_NAME.get(w.dtype, str(w.dtype))
    w = w.to(torch.float64).reshape(-1)
    g = torch.tensor([float(num(x)) for x in got], dtype=torch.float64)
    if g.numel() != w.numel():
        return False, "drift has %d elements, torch %d" % (g.numel(), w.numel()), wd
    nan_w, nan_g = torch.isnan(w), torch.isnan(g)
    if not torch.equal(nan_w, nan_g):
        return False, "NaN in other places (drift %d, torch %d)" % (int(nan_g.sum()), int(nan_w.sum())), wd
    fin = ~nan_w
    gw, ww = g[fin], w[fin]
    diff = (gw - ww).abs()
    diff[gw == ww] = 0  # equal infinities
    maxd = float(diff.max()) if diff.numel() else 0.0
    if claim == "bitwise":
        same = gw == ww
        if want.is_floating_point():  # -0.0 is not 0.0 (an integer's zero has no sign)
            same &= torch.signbit(gw) == torch.signbit(ww)
        bad = int((~same).sum())
        return bad == 0, "bitwise: %d of %d differ, max |d| %.3g" % (bad, g.numel(), maxd), wd
    atol = claim["atol"]
    if claim.get("scale") == "max" and ww.numel():  # atol relative to the output's largest value
        atol *= float(ww.abs()[torch.isfinite(ww)].max()) if bool(torch.isfinite(ww).any()) else 1.0
    tol = atol + claim["rtol"] * ww.abs()
    bad = int((diff > tol).sum())
    return bad == 0, "rtol %g atol %g: %d of %d outside, max |d| %.3g" % (claim["rtol"], claim["atol"], bad, g.numel(), maxd), wd


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    cases = {}
    with open(sys.argv[1]) as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                cases[d["parity"]["name"]] = d
    npass = nfail = 0
    seen = set()
    torch.backends.cuda.matmul.allow_tf32 = False  # torch's defaults, said out loud
    torch.backends.cudnn.allow_tf32 = True
    with open(sys.argv[2]) as f:
        for line in f:
            if not line.strip():
                continue
            r = json.loads(line)
            name, plan = r["name"], r["plan"]
            seen.add(name)
            doc = cases.get(name)
            if doc is None:
                print("FAIL %s [%s]: not in the cases file" % (name, plan))
                nfail += 1
                continue
            claim = doc["parity"].get("torch_" + plan, doc["parity"]["torch"])
            try:
                want = run_graph(doc, r["inputs"], plan == "bf16")
                if DEV.type == "cuda":
                    torch.cuda.synchronize()
                ok, text, wd = compare(r["out"], want, claim)
                if ok and wd != r["dtype"]:
                    ok, text = False, "dtype: drift %s, torch %s" % (r["dtype"], wd)
            except Exception as e:  # a case torch refuses is a failure of the case, named
                ok, text = False, "torch: %s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            print("%s %s [%s] %s" % ("PASS" if ok else "FAIL", name, plan, text))
            npass += ok
            nfail += not ok
    missing = sorted(set(cases) - seen)
    for name in missing:
        print("FAIL %s: drift wrote no output (see the gpu_test_parity log for why)" % name)
    nfail += len(missing)
    print("RESULT aten_parity vs torch %s on %s: %d passed, %d failed (case and plan pairs; %d cases)"
          % (torch.__version__, DEV.type, npass, nfail, len(cases)))
    return 1 if nfail else 0


if __name__ == "__main__":
    sys.exit(main())
