"""Issue 15, recorder side, on the GPU machine (torch 2.11, diffusers source on
PYTHONPATH): the capture's "module_outputs" names, for every module that
returns several tensors, the graph node of the tensor the Recorder records
as M:out (capture_outputs.py).

    python3 tests/gpu/capture_module_outputs.py [--models wan,ltx2,sd3,qwen,flux] [--modes model,meta]

For each model and capture mode: exports the model (mode "model": the model
itself; "meta": a meta-device copy, as for an FSDP2 model), then runs the
exported graph (fp32, the same inputs; mode "model" only) node by node and
the real model with forward hooks, and checks for every module_outputs entry that the named first
node's value equals the module's first output tensor (max |diff| <= 1e-5 x
max |value|), and, where the module's second tensor differs from its first,
that the second entry's value does not equal the first output (so a swap
would be caught). Expected: every entry matched (no null), Wan's "rope" and
LTX-2's "rope", "audio_rope", "cross_attn_rope" among them. One
"RESULT <model> <mode> OK|FAIL ..." line each; exit 1 if any FAIL.
"""
import argparse
import os
import sys
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "recorder", "python"))
sys.path.insert(0, HERE)
from drift_recorder.capture import export_graph  # noqa: E402
from drift_recorder.capture_outputs import output_tensors  # noqa: E402
from drift_recorder import capture_source as cs  # noqa: E402
from capture_models import build, seed_params  # noqa: E402

MUST = {"wan": ["rope"], "ltx2": ["rope", "audio_rope", "cross_attn_rope"]}


def node_values(ep, kw):
    """{node name: value} of ep's graph run on kw (params and buffers from ep)."""
    import torch.utils._pytree as pytree

    vals = {}
    gm = ep.module()

    class Rec(torch.fx.Interpreter):
        def run_node(self, n):
            v = super().run_node(n)
            vals[n.name] = v
            return v

    flat = pytree.tree_leaves(((), kw))
    with torch.no_grad():
        Rec(gm).run(*flat)
    return vals


def real_outputs(m, kw):
    """{module path: [tensors]} of the real model's forward (every module)."""
    outs, hooks = {}, []
    for name, mod in m.named_modules():
        if name:
            hooks.append(mod.register_forward_hook(
                lambda mod, a, o, name=name: outs.__setitem__(name, [t.detach().clone() for t in output_tensors(o)])))
    with torch.no_grad():
        m(**kw)
    for h in hooks:
        h.remove()
    return outs


def close(a, b):
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape:
        return False
    scale = float(b.abs().max()) if b.numel() else 0.0
    return float((a.float() - b.float()).abs().max()) <= 1e-5 * max(scale, 1e-30)


def check(tag, mode, dev):
    torch.manual_seed(0)
    m, kw = build(tag)
    seed_params(m, 7)
    m = m.to(dev).float().eval()
    kw = {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    if mode == "model":
        doc, ep = export_graph(m, kw)
    else:
        doc, _ = cs.capture_for_recording(m, kw, mode=mode)  # the Recorder's path (meta: an FSDP2 model's)
        ep = None
    mo = doc.get("module_outputs")
    if mo is None:
        return "FAIL", "no module_outputs in the document"
    missing = [k for k in MUST.get(tag, []) if k not in mo]
    nulls = [k for k, v in mo.items() if v[0] is None]
    if missing or nulls:
        return "FAIL", "missing %s, unmatched %s (of %d entries)" % (missing, nulls, len(mo))
    if ep is None:
        return "OK", "%d entries, all matched (values not checked for mode %s)" % (len(mo), mode)
    vals, real = node_values(ep, kw), real_outputs(m, kw)
    bad, swapped_checked = [], 0
    for mod, names in mo.items():
        ts = real.get(mod)
        if not ts:
            bad.append("%s: not called in the real forward" % mod)
            continue
        if not close(vals.get(names[0]), ts[0]):
            bad.append("%s: node %s is not its first output" % (mod, names[0]))
        if len(ts) > 1 and len(names) > 1 and names[1] and not close(ts[1], ts[0]):
            swapped_checked += 1
            if close(vals.get(names[1]), ts[0]):
                bad.append("%s: the second entry %s equals the first output" % (mod, names[1]))
    if bad:
        return "FAIL", "; ".join(bad[:6])
    return "OK", "%d entries, first outputs equal to the real forward's, %d with a distinct second checked" % (
        len(mo), swapped_checked)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="wan,ltx2,sd3,qwen,flux")
    ap.add_argument("--modes", default="model")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    fails = 0
    for tag in [t for t in a.models.split(",") if t]:
        for mode in [x for x in a.modes.split(",") if x]:
            try:
                st, msg = check(tag, mode, dev)
            except Exception as e:  # noqa: BLE001 - one model failing never stops the others
                traceback.print_exc()
                st, msg = "FAIL", "%s: %s" % (type(e).__name__, " ".join(str(e).split())[:300])
            fails += st == "FAIL"
            print("RESULT %s %s %s %s" % (tag, mode, st, msg), flush=True)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
