"""Which node of a captured graph does drift compute differently from torch?

`drift replay --dump-nodes DIR` writes every node's value of the replay
(replay/drive/node_dump.h). This script runs each node's
ATen op in torch on the GPU on drift's own input values (the dumps of its
argument nodes, cast to the dtypes and laid out with the strides the capture
recorded) and compares torch's
result with drift's value of the node, bit for bit. A node whose inputs came
from drift and whose output differs is a node whose kernel (or lowering)
differs from torch's: the cause of a non-bitwise replay, found without
guessing from module outputs.

    drift replay TRACE --device cuda --kernels torch --steps 0 --dump-nodes /tmp/nd
    python3 -m drift_recorder.node_parity TRACE /tmp/nd [--step 0] [--show 25]

(needs torch and h5py; tests/gpu/node_parity.sh runs it over zoo models)

Prints one line per differing node (graph order) and a summary line
`NODE_PARITY model=... nodes=N compared=C differ=D first=NAME(TARGET)`.
Nodes run under torch.autocast in the capture's ambient dtype (a node's own autocast
region where the capture recorded one), dispatch captures too: their ops are recorded
above autocast, an fp32 input of a linear and all.
"""
import argparse
import json
import operator
import os
import sys

import numpy as np

try:
    import h5py
    import torch
except ImportError as e:  # the recorder itself needs neither
    sys.exit("drift_recorder.node_parity needs torch and h5py: %s" % e)

DT = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64,
      "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
      "bool": torch.bool, "complex64": torch.complex64, "complex128": torch.complex128}


def load_graph(trace):
    with h5py.File(trace, "r") as f:
        raw = f["graph"][()]
    raw = raw.tobytes() if hasattr(raw, "tobytes") else raw
    return json.loads(raw.decode() if isinstance(raw, bytes) else raw)


def load_dumps(d):
    out = {}
    idx = os.path.join(d, "index.tsv")
    for line in open(idx):
        name, dtype, shape = (line.rstrip("\n").split("\t") + [""])[:3]
        shp = [int(x) for x in shape.split(",") if x]
        out[name] = (dtype, shp, os.path.join(d, name + ".f32"))
    return out


class Runner:
    def __init__(self, g, dumps, dev):
        self.g, self.dumps, self.dev = g, dumps, dev
        self.by_name = {n["name"]: n for n in g["nodes"]}
        self.torch_out = {}  # node name -> torch's result (for getitem and nodes without a dump)
        cap = g.get("capture") or {}
        self.mode = cap.get("mode")
        self.ambient = DT.get(cap.get("autocast") or "", None)
        self.strided = True  # inputs with the recorded strides (--contiguous: plain copies)

    def val_dtype(self, name):
        v = (self.by_name.get(name) or {}).get("val")
        if isinstance(v, dict) and v.get("dtype") in DT:
            return DT[v["dtype"]]
        return None

    def drift_value(self, name, strided=True):
        d = self.dumps.get(name)
        if d is None:
            return None
        dtype, shp, path = d
        a = np.fromfile(path, dtype=np.float32).reshape(shp) if shp else np.fromfile(path, dtype=np.float32).reshape(())
        t = torch.from_numpy(a).to(self.dev)
        want = self.val_dtype(name)
        t = t.to(want) if want is not None else t
        return self.with_strides(name, t) if strided else t

    def with_strides(self, name, t):
        """t laid out with the strides the capture recorded for node name (a transposed or
        permuted view stays one: torch picks kernels by layout, e.g. a GEMM's transposition
        or the SDPA backend), when they describe a dense layout of t's shape; else t."""
        v = (self.by_name.get(name) or {}).get("val")
        st = v.get("stride") if isinstance(v, dict) else None
        if not self.strided or not st or len(st) != t.dim() or list(v.get("shape") or []) != list(t.shape):
            return t
        if list(st) == list(t.contiguous().stride()):
            return t
        span = 1 + sum((n - 1) * s for n, s in zip(t.shape, st) if n > 0)
        if any(s < 0 for s in st) or span > 4 * max(t.numel(), 1):
            return t  # an expanded or sparse layout: kept contiguous
        try:
            out = torch.empty_strided(tuple(t.shape), tuple(st), dtype=t.dtype, device=t.device)
            out.copy_(t)  # refused for an overlapping layout (an expand): kept contiguous then
        except RuntimeError:
            return t
        return out

    def arg(self, a):
        if isinstance(a, list):
            return [self.arg(x) for x in a]
        if isinstance(a, dict):
            if "node" in a:
                name = a["node"]
                v = self.drift_value(name)
                if v is None:
                    v = self.torch_out.get(name)
                if v is None:
                    raise KeyError(name)
                return v
            if "dtype" in a:
                return DT[a["dtype"]]
            if "device" in a:
                return torch.device(self.dev)
            if "layout" in a:
                return getattr(torch, a["layout"])
            if "memory_format" in a:
                return getattr(torch, a["memory_format"])
            if "float" in a:
                return float(a["float"])
            if "dict" in a:
                return {k: self.arg(v) for k, v in a["dict"].items()}
            raise ValueError("argument %r" % (a,))
        return a

    def op(self, target):
        if target == "getitem":
            return operator.getitem
        if not target.startswith("aten."):
            return None
        parts = target.split(".")
        try:
            o = getattr(torch.ops.aten, parts[1])
            return getattr(o, parts[2]) if len(parts) > 2 else o.default
        except AttributeError:
            return None

    def run(self, n):
        fn = self.op(n["target"])
        if fn is None:
            return None, "no torch op for %s" % n["target"]
        try:
            args = self.arg(n.get("args") or [])
            kwargs = self.arg({"dict": n.get("kwargs") or {}})
        except KeyError as e:
            return None, "input %s unavailable" % e
        region = n.get("autocast")
        enabled = self.ambient is not None  # a dispatch trace records the ops above autocast too
        dtype = self.ambient
        if region is not None:
            enabled = bool(region.get("enabled"))
            dtype = DT.get(region.get("dtype") or "", self.ambient)
        try:
            with torch.autocast(self.dev.split(":")[0], dtype=dtype or torch.bfloat16, enabled=enabled):
                r = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 (reported per node)
            return None, "torch: %s" % str(e).split("\n")[0][:160]
        return r, None


def compare(mine, t):
    """(n_diff, numel, max |d|) between drift's f32 dump and torch's tensor (complex as
    (real, imag) pairs, as drift keeps them)."""
    if t.is_complex():
        t = torch.view_as_real(t)
    if mine.is_complex():
        mine = torch.view_as_real(mine)
    a = mine.float().reshape(-1)
    b = t.detach().float().reshape(-1)
    if a.numel() != b.numel():
        return None
    same = (a.view(torch.int32) == b.view(torch.int32)) | (torch.isnan(a) & torch.isnan(b))
    nd = int((~same).sum())
    md = float((a - b).abs().nan_to_num(0).max()) if nd else 0.0
    return nd, a.numel(), md


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("dump")
    ap.add_argument("--step", type=int, default=0)
    ap.add_argument("--show", type=int, default=25)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--contiguous", action="store_true", help="hand torch contiguous inputs (default: the "
                    "strides the capture recorded for each argument)")
    ap.add_argument("--json", default=None, help="write every differing node here")
    ap.add_argument("--save", default=None, help="folder: per differing node (first 40) NAME.npz with torch_out, "
                    "drift_out and drift's inputs in0, in1, ...")
    a = ap.parse_args()
    g = load_graph(a.trace)
    dumps = load_dumps(os.path.join(a.dump, "step%d" % a.step))
    r = Runner(g, dumps, a.device)
    r.strided = not a.contiguous
    compared, differ, skipped, rows = 0, 0, {}, []
    skipped_names = {}  # reason -> the first nodes skipped for it

    def skip(why, name):
        skipped[why] = skipped.get(why, 0) + 1
        skipped_names.setdefault(why, []).append(name)
    for n in g["nodes"]:
        if n.get("op") != "call_function":
            continue
        if n["target"].startswith(("aten.empty", "aten.new_empty")):  # uninitialised memory: nothing to compare
            continue
        res, why = r.run(n)
        if res is None:
            if n["name"] in dumps:
                skip(why, n["name"])
            continue
        if not isinstance(res, torch.Tensor):
            r.torch_out[n["name"]] = res
            continue
        r.torch_out[n["name"]] = res
        mine = r.drift_value(n["name"], strided=False)
        if mine is None:
            continue
        c = compare(mine, res)
        if c is None:
            skip("shape differs", n["name"])
            continue
        tdt = str(res.dtype).replace("torch.", "")
        ddt = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp64": "float64"}.get(dumps[n["name"]][0],
                                                                                            dumps[n["name"]][0])
        if not res.is_complex() and ddt != tdt and not (tdt.startswith("int") or tdt == "bool"):
            # torch computes this node in another dtype than drift's plan gave it: a
            # difference of its own (autocast or promotion), named with the node
            skip("dtype differs (torch %s, drift %s)" % (tdt, ddt), "%s(%s, %s)" % (
                n["name"], n["target"], n.get("module", "")))
            continue
        compared += 1
        if c[0] and a.save and differ < 40:
            os.makedirs(a.save, exist_ok=True)
            arrs = {"torch_out": res.detach().float().cpu().numpy() if not res.is_complex() else
                    torch.view_as_real(res).detach().cpu().numpy(), "drift_out": mine.float().cpu().numpy()}
            for k, x in enumerate(n.get("args") or []):
                if isinstance(x, dict) and "node" in x and x["node"] in dumps:
                    arrs["in%d" % k] = r.drift_value(x["node"]).float().cpu().numpy()
            np.savez(os.path.join(a.save, "%s.npz" % n["name"]), **arrs)
        if c[0]:
            differ += 1
            row = {"node": n["name"], "target": n["target"], "module": n.get("module", ""), "n_diff": c[0],
                   "numel": c[1], "max_abs_diff": c[2], "dtype": str(res.dtype).replace("torch.", ""),
                   "drift_dtype": dumps[n["name"]][0], "shape": list(res.shape),
                   "args": json.dumps(n.get("args"))[:200]}
            rows.append(row)
    for row in rows[:a.show]:
        print("DIFF %(node)s %(target)s module=%(module)s dtype=%(dtype)s/%(drift_dtype)s shape=%(shape)s "
              "n_diff=%(n_diff)d/%(numel)d max|d|=%(max_abs_diff).3g args=%(args)s" % row)
    for why, k in sorted(skipped.items(), key=lambda kv: -kv[1])[:8]:
        names = skipped_names.get(why, [])
        print("SKIP %d: %s: %s%s" % (k, why, ", ".join(names[:4]), ", ..." if len(names) > 4 else ""))
    first = "%s(%s)" % (rows[0]["node"], rows[0]["target"]) if rows else "-"
    print("NODE_PARITY model=%s nodes=%d compared=%d differ=%d first=%s" % (
        g.get("model_class"), len(g["nodes"]), compared, differ, first))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
