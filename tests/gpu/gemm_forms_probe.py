#!/usr/bin/env python3
"""What cuBLASLt computes for each bf16 GEMM shape of the zoo, on this GPU (issue 31; docs/gemm-forms.md).

    python3 tests/gpu/gemm_forms_probe.py [--shapes tests/gpu/gemm_shapes_zoo.json] [--rec DIR] [--out DIR]

For every (M, N, K, bias) it runs torch's own F.linear (bias: addmm through cuBLASLt's bias
epilogue) or torch.mm (no bias) on bf16 operands holding small integers, so that every fp32
partial sum is exact whatever the order: only the roundings to bf16 tell the forms apart. The
result is compared with each candidate form computed exactly in numpy:
  one             round(sum + b)                           (drift's default)
  bias_after      round(round(sum) + b)
  splitk C        y = round(p_0 + b), y = round(y + p_i)   (K in chunks of C, reduced in place in bf16)
  splitk_blast C  y = round(p_0), y = round(y + p_i), then round(y + b)  (reported, not a table form)
Writes $OUT/gemm_forms.jsonl (one row per shape: the forms that match, the modules that use it)
and $OUT/gemm_forms_rows.c (the rows for kernels/gemm_forms.c of every shape whose form is not
`one`). Prints PASS/FAIL lines: FAIL for a shape no candidate explains, and for the table's own
rows (kernels/gemm_forms.c) when this GPU does not compute them as the table says.
Shapes: --shapes (default tests/gpu/gemm_shapes_zoo.json: every bf16 linear/addmm/mm of the 60
local zoo traces of 2026-12-04), plus those of every DIR/*/trainer.h5 with --rec (needs h5py)."""
import argparse
import glob
import json
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
# kernels/gemm_forms.c's rows for the H200 + cuBLASLt 13.1.0: (M, N, K, bias) -> (form, chunk)
TABLE = {(2048, 4, 32, True): ("splitk", 16), (2, 64, 1556, True): ("splitk", 784), (1, 20, 256, True): ("bias_after", 0),
         (1, 12, 256, True): ("bias_after", 0)}


def bf16(x):
    """float64 values exact in fp32 -> bf16, round to nearest even, as float64."""
    x = np.asarray(x, np.float64).astype(np.float32)
    b = x.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return (r & 0xFFFFFFFF).astype(np.uint32).view(np.float32).astype(np.float64)


def shapes_from_traces(rec):
    import h5py  # noqa: PLC0415  (only for --rec)
    rows = []
    for p in sorted(glob.glob(os.path.join(rec, "*", "trainer.h5"))):
        with h5py.File(p, "r") as f:
            if "graph" not in f:
                continue
            g = f["graph"][()]
        g = g.tobytes() if isinstance(g, np.ndarray) else g
        d = json.loads(bytes(g).rstrip(b"\0"))
        by = {n["name"]: n for n in d["nodes"]}
        model = os.path.basename(os.path.dirname(p))
        for n in d["nodes"]:
            v = n.get("val") if isinstance(n.get("val"), dict) else None
            t = n.get("target") or ""
            if not v or v.get("dtype") != "bfloat16":
                continue
            try:
                a = [by[x["node"]]["val"] if isinstance(x, dict) and "node" in x else None for x in n["args"][:3]]
                if t == "aten.linear.default":
                    M, K, N, b = math.prod(a[0]["shape"][:-1]), a[0]["shape"][-1], a[1]["shape"][0], len(n["args"]) > 2 and n["args"][2] is not None
                elif t == "aten.addmm.default":
                    (M, K), N, b = a[1]["shape"], a[2]["shape"][1], True
                elif t == "aten.mm.default":
                    (M, K), N, b = a[0]["shape"], a[1]["shape"][1], False
                else:
                    continue
            except Exception:  # noqa: BLE001
                continue
            rows.append({"M": int(M), "N": int(N), "K": int(K), "bias": bool(b), "uses": ["%s %s" % (model, n.get("module") or "")]})
    return rows


def chunks(K):
    cs = set()
    for s in range(2, 17):
        for g in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            c = int(math.ceil(K / s / g) * g)
            if 0 < c < K:
                cs.add(c)
    return sorted(cs)


def candidates(x, w, b, K):
    """name -> exact bf16 result (float64) of each form."""
    xs, ws = x.astype(np.float64), w.astype(np.float64)
    full = xs @ ws.T
    bb = b if b is not None else 0.0
    out = {"one": bf16(full + bb)}
    if b is not None:
        out["bias_after"] = bf16(bf16(full) + b)
    for c in chunks(K):
        parts = [xs[:, k0:k0 + c] @ ws[:, k0:k0 + c].T for k0 in range(0, K, c)]
        y = bf16(parts[0] + bb)
        for p in parts[1:]:
            y = bf16(y + p)
        out["splitk %d" % c] = y
        if b is not None:
            y = bf16(parts[0])
            for p in parts[1:]:
                y = bf16(y + p)
            out["splitk_blast %d" % c] = bf16(y + b)
    return out


def probe(M, N, K, bias, dev, rng, trials=3):
    """The forms that match in every one of trials random draws (a small shape can leave two forms
    equal on one draw), and how many elements the default form got wrong over them."""
    match, nd = None, 0
    for _ in range(trials):
        m, d = probe_once(M, N, K, bias, dev, rng)
        match = m if match is None else [x for x in match if x in m]
        nd += d
    return match, nd


def probe_once(M, N, K, bias, dev, rng):
    R = 15 if K * 225 < 2 ** 23 else max(1, int(math.sqrt(2 ** 23 / K)))
    x = rng.integers(-R, R + 1, size=(M, K)).astype(np.float64)
    w = rng.integers(-R, R + 1, size=(N, K)).astype(np.float64)
    b = bf16(rng.integers(-4096, 4097, size=(N,)).astype(np.float64)) if bias else None
    tx = torch.tensor(x, dtype=torch.bfloat16, device=dev)
    tw = torch.tensor(w, dtype=torch.bfloat16, device=dev)
    with torch.no_grad():
        if bias:
            y = torch.nn.functional.linear(tx, tw, torch.tensor(b, dtype=torch.bfloat16, device=dev))
        else:
            y = torch.mm(tx, tw.t())
    got = y.float().cpu().numpy().astype(np.float64)
    cand = candidates(x, w, b, K)
    match = [k for k, v in cand.items() if np.array_equal(v, got)]
    # how far the default form is: elements that differ
    return match, int((cand["one"] != got).sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=os.path.join(HERE, "gemm_shapes_zoo.json"))
    ap.add_argument("--rec", default=None)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--seed", type=int, default=31)
    a = ap.parse_args()
    rows = json.load(open(a.shapes)) if a.shapes and os.path.exists(a.shapes) else []
    if a.rec:
        rows += shapes_from_traces(a.rec)
    uniq = {}
    for r in rows:
        k = (r["M"], r["N"], r["K"], bool(r["bias"]))
        u = uniq.setdefault(k, {"M": r["M"], "N": r["N"], "K": r["K"], "bias": bool(r["bias"]), "uses": []})
        u["uses"] += [x for x in r.get("uses", []) if x not in u["uses"]][:6]
    for k in TABLE:
        uniq.setdefault(k, {"M": k[0], "N": k[1], "K": k[2], "bias": k[3], "uses": ["kernels/gemm_forms.c"]})
    dev = torch.device("cuda")
    print("GPU %s, torch %s (CUDA %s); %d shapes" % (torch.cuda.get_device_name(0), torch.__version__, torch.version.cuda,
                                                     len(uniq)))
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    counts, unexplained, table_bad = {}, [], []
    crow = []
    with open(os.path.join(a.out, "gemm_forms.jsonl"), "w") as f:
        for k in sorted(uniq):
            r = uniq[k]
            match, ndiff = probe(r["M"], r["N"], r["K"], r["bias"], dev, rng)
            r.update(match=match, one_differs=ndiff)
            f.write(json.dumps(r) + "\n")
            kind = "one" if "one" in match else (match[0].split()[0] if match else "unexplained")
            counts[kind] = counts.get(kind, 0) + 1
            if not match:
                unexplained.append(r)
            elif "one" not in match:
                m = match[0]
                form = "DRIFT_GEMM_FORM_BIAS_AFTER, 0" if m == "bias_after" else (
                    "DRIFT_GEMM_FORM_SPLITK_INPLACE, %s" % m.split()[1] if m.startswith("splitk ") else None)
                line = "    /* %s: matches %s (%d of 3 x %d elements differ with one rounding) */\n" % (
                    "; ".join(r["uses"][:3]), ", ".join(match[:4]), ndiff, r["M"] * r["N"])
                line += ("    {0, DRIFT_BF16, DRIFT_BF16, %d, %d, %d, %d, {%s}},\n" % (r["M"], r["N"], r["K"], int(r["bias"]), form)
                         if form else "    /* no table form for %s yet */\n" % m)
                crow.append(line)
            t = TABLE.get(k)
            if t:
                want = "bias_after" if t[0] == "bias_after" else "splitk %d" % t[1]
                if want not in match:
                    table_bad.append((k, want, match))
    with open(os.path.join(a.out, "gemm_forms_rows.c"), "w") as f:
        f.writelines(crow)
    print("forms: %s" % ", ".join("%s %d" % kv for kv in sorted(counts.items())))
    for r in unexplained:
        print("FAIL: M %d N %d K %d bias %d: no candidate form matches (%s)" % (r["M"], r["N"], r["K"], r["bias"], "; ".join(r["uses"][:2])))
    for k, want, match in table_bad:
        print("FAIL: table row M %d N %d K %d bias %d says %s, this GPU computes %s" % (k + (want, match or "none")))
    if not table_bad:
        print("PASS: the %d rows of kernels/gemm_forms.c are what this GPU computes" % len(TABLE))
    print("%s: %d shapes probed, %d unexplained, %d not drift's default (rows in %s)" % (
        "PASS" if not unexplained else "FAIL", len(uniq), len(unexplained), len(crow), os.path.join(a.out, "gemm_forms_rows.c")))
    return 1 if unexplained or table_bad else 0


if __name__ == "__main__":
    sys.exit(main())
