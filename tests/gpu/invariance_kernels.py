#!/usr/bin/env python3
"""Why is PyTorch batch-dependent where drift says invariant? (issue 33, on the GPU machine)

    python3 tests/gpu/invariance_kernels.py --rec /tmp/zoo/rec [--models A,B] [--module FQN]

For each model: the first module (execution order) whose output row 0 differs between the
sample alone and the sample inside a batch of 2 (as zoo_invariance.py finds it); then that
module run alone on the inputs it received at batch 1 and at batch 2, under torch.profiler:
its inputs' shapes, strides and contiguity, the CUDA kernels it launched, whether running it
alone reproduces the difference, and whether a contiguous copy of the batch-2 input does.
Prints KERN / ALONE lines; nothing is written.
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import zoo_models  # noqa: E402
from zoo_invariance import alone, prepared, rows_for  # noqa: E402
from zoo import first_tensor  # noqa: E402

DEFAULT = ("BriaTransformer2DModel,JoyImageEditTransformer3DModel,LongCatImageTransformer2DModel,"
           "OvisImageTransformer2DModel,SD3Transformer2DModel,TransformerTemporalModel,plain_mmdit,PRXTransformer2DModel")


def kernels(fn):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as p:
        fn()
        torch.cuda.synchronize()
    return [e.name[:90] for e in p.events() if e.device_type.name == "CUDA"]


def describe(args):
    return [(list(a.shape), list(a.stride()), a.is_contiguous(), str(a.dtype).replace("torch.", ""))
            for a in args if isinstance(a, torch.Tensor)]


def probe(entry, island_pat, module=None):
    m, kw, main, b0, names, _, lay = prepared(entry, island_pat)
    seen_out, seen_in = {}, {}

    def hook(name):
        def pre(mod, args, kwargs):
            seen_in.setdefault(name, []).append((args, kwargs))

        def post(mod, args, out):
            t = first_tensor(out) if not isinstance(out, torch.Tensor) else out
            if isinstance(t, torch.Tensor) and t.ndim >= 1:
                seen_out.setdefault(name, []).append(t.detach().float().clone())
        return pre, post

    hs = []
    for n, mod in m.named_modules():
        if n:
            pre, post = hook(n)
            hs.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
            hs.append(mod.register_forward_hook(post))

    def run(k):
        seen_out.clear()
        seen_in.clear()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            m(**k)
        return dict(seen_out), dict(seen_in)

    a_out, a_in = run(alone(kw, names, b0, lay=lay))
    b_out, b_in = run(rows_for(kw, names, b0, 2, 0, main, 1236, lay))
    for h in hs:
        h.remove()
    first = None
    for n in a_out:
        x, y = a_out[n][0], b_out.get(n, [None])[0]
        if y is not None and x.shape[1:] == y.shape[1:] and not torch.equal(x[0], y[0]):
            first = n
            break
    if module is not None:  # a named module, whether it differs or not (why do torch's two paths agree?)
        if module not in a_in or module not in b_in:
            print("KERN %s module %s did not run" % (entry["tag"], module), flush=True)
            return
        first = module
    if first is None:
        print("KERN %s no module differs at batch 2" % entry["tag"], flush=True)
        return
    mod = m.get_submodule(first)
    print("KERN %s first module %s (%s)" % (entry["tag"], first, type(mod).__name__), flush=True)
    res = {}
    for tag, ins in (("batch1", a_in[first][0]), ("batch2", b_in[first][0])):
        args, kwargs = ins

        def call(args=args, kwargs=kwargs):
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                return first_tensor(mod(*args, **kwargs))
        ks = kernels(call)
        res[tag] = call().float()
        print("KERN %s %s %s inputs %s kernels %s" % (entry["tag"], first, tag, json.dumps(describe(args)),
                                                       json.dumps(ks)), flush=True)
        if tag == "batch2":
            cargs = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in args]

            def callc(cargs=cargs, kwargs=kwargs):
                with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                    return first_tensor(mod(*cargs, **kwargs))
            res["batch2_contig"] = callc().float()
            print("KERN %s %s batch2-contiguous kernels %s" % (entry["tag"], first, json.dumps(kernels(callc))),
                  flush=True)
    d = int((res["batch1"][0] != res["batch2"][0]).sum())
    dc = int((res["batch1"][0] != res["batch2_contig"][0]).sum())
    print("ALONE %s %s differs=%d contiguous_copy_differs=%d of %d" % (entry["tag"], first, d, dc,
                                                                      res["batch1"][0].numel()), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rec", required=True)
    ap.add_argument("--models", default=DEFAULT)
    ap.add_argument("--module", default=None, help="probe this module (FQN) instead of the first that differs")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    want = set(a.models.split(","))
    for e in zoo_models.zoo():
        if e["tag"] not in want or e.get("error"):
            continue
        island = None
        info = os.path.join(a.rec, e["tag"], "info.json")
        if os.path.exists(info):
            isl = json.load(open(info)).get("island")
            island = isl if isinstance(isl, str) else None
        try:
            probe(e, island, a.module)
        except Exception as ex:  # noqa: BLE001 - one model never stops the others
            print("KERN %s error %s: %s" % (e["tag"], type(ex).__name__, str(ex)[:300]), flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
