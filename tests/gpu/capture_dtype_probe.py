"""Probe (issue 15): which export reproduces the dtype decisions the trainer's
Python code makes at run time (`timestep.to(hidden_states.dtype)`, diffusers
RMSNorm's `if self.weight.dtype in (fp16, bf16)`)? GPU machine, torch 2.11,
diffusers source on PYTHONPATH.

    python3 tests/gpu/capture_dtype_probe.py OUTDIR [--models qwen,wan,...]

For each model (capture_record.py's small configs and wan_1p3b), with the
trainer's forward dtypes (parameters bf16, the island fp32, bf16 autocast):
  run:   the casts the real forward makes (a TorchFunctionMode logging
         Tensor.to / type_as / float: source and target dtype, in order);
  fake:  torch.export of a FakeTensorMode copy on cuda, parameters in their
         forward dtype, under autocast: its aten.to nodes' dtypes;
  meta:  the same on the meta device (autocast does not apply there).
Prints one line per variant and writes OUTDIR/<tag>.fake.json (the described
graph, drift-aten-graph) when the fake export worked.
"""
import argparse
import json
import os
import sys
import time
import traceback

import torch
from torch.overrides import TorchFunctionMode

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "recorder", "python"))
sys.path.insert(0, HERE)
from capture_record import ISLANDS, island_modules, make, step_inputs  # noqa: E402
from drift_recorder.capture import describe  # noqa: E402


class CastLog(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.casts = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", str(func))
        if name in ("to", "type_as", "float", "bfloat16", "half") and args and isinstance(args[0], torch.Tensor) \
                and isinstance(out, torch.Tensor) and args[0].is_floating_point():
            self.casts.append((name, str(args[0].dtype).replace("torch.", ""), str(out.dtype).replace("torch.", "")))
        return out


def to_nodes(ep):
    r = []
    for n in ep.graph.nodes:
        if n.op == "call_function" and str(n.target) in ("aten.to.dtype", "aten.type_as.default", "aten._to_copy.default",
                                                         "aten.to.dtype_layout"):
            src = n.args[0].meta.get("val") if hasattr(n.args[0], "meta") else None
            v = n.meta.get("val")
            r.append((str(n.target).split(".")[1], str(getattr(src, "dtype", "?")).replace("torch.", ""),
                      str(getattr(v, "dtype", "?")).replace("torch.", "")))
    return r


def forward_dtypes(model, island):
    """bf16 parameters, fp32 in the island modules (the trainer's FSDP2 policies)."""
    model.to(torch.bfloat16)
    for mn in island:
        model.get_submodule(mn).float()
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--models", default="qwen,wan,ltx2,flux,sd3,wan_1p3b")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    dev = "cuda"
    for tag in a.models.split(","):
        try:
            real, kw = make(tag, dev)
            k0 = step_inputs(kw, 0, dev)
            pat, island = island_modules(real, ISLANDS.get(tag, ["*.norm2.*"]))
            cls, cfg = type(real), real.config
            # run: the casts of the trainer's forward
            run = forward_dtypes(cls.from_config(cfg).to(dev).eval(), island)
            run.load_state_dict({k: v.to(run.state_dict()[k].dtype) for k, v in real.state_dict().items()})
            log = CastLog()
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16), log:
                run(**k0)
            print("PROBE %s run: %d casts: %s" % (tag, len(log.casts), log.casts[:40]), flush=True)
            del run
            # fake: FakeTensorMode copy on cuda under autocast
            from torch._subclasses.fake_tensor import FakeTensorMode
            t0 = time.perf_counter()
            try:
                fm = FakeTensorMode(allow_non_fake_inputs=True)
                with fm, torch.device(dev):
                    fake = forward_dtypes(cls.from_config(cfg).eval(), island)
                fkw = {k: fm.from_tensor(v) if isinstance(v, torch.Tensor) else v for k, v in k0.items()}
                with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                    ep = torch.export.export(fake, (), kwargs=fkw, strict=False)
                dt = time.perf_counter() - t0
                tn = to_nodes(ep)
                lin = [str(n.meta["val"].dtype).replace("torch.", "") for n in ep.graph.nodes
                       if n.op == "call_function" and str(n.target) == "aten.linear.default"]
                print("PROBE %s fake: OK %.2f s, %d nodes, to-nodes %s; linear val dtypes %s" % (
                    tag, dt, len(ep.graph.nodes), tn, sorted(set(lin))), flush=True)
                try:
                    named = dict(real.named_buffers())

                    def cv(target, c):
                        v = named.get(target)
                        if v is None:
                            o = real
                            for p in target.split("."):
                                o = getattr(o, p, None)
                            v = o if isinstance(o, torch.Tensor) else None
                        return v
                    doc = describe(ep, k0, model_class=cls.__name__, export_seconds=dt, device_alias=None,
                                   constant_value=cv)
                    json.dump(doc, open(os.path.join(a.out, tag + ".fake.json"), "w"))
                    print("PROBE %s fake: described, %d nodes -> %s.fake.json" % (tag, len(doc["nodes"]), tag), flush=True)
                except Exception as e:
                    print("PROBE %s fake: describe FAILED %s: %s" % (tag, type(e).__name__, str(e)[:300]), flush=True)
            except Exception as e:
                print("PROBE %s fake: FAILED %.2f s %s: %s" % (tag, time.perf_counter() - t0, type(e).__name__,
                                                              str(e).splitlines()[0][:300] if str(e) else ""), flush=True)
                traceback.print_exc(limit=3)
            # meta: the same on the meta device
            t0 = time.perf_counter()
            try:
                with torch.device("meta"):
                    meta = forward_dtypes(cls.from_config(cfg).eval(), island)
                mkw = {k: torch.empty(v.shape, dtype=v.dtype, device="meta") if isinstance(v, torch.Tensor) else v
                       for k, v in k0.items()}
                with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                    ep = torch.export.export(meta, (), kwargs=mkw, strict=False)
                print("PROBE %s meta: OK %.2f s, to-nodes %s" % (tag, time.perf_counter() - t0, to_nodes(ep)), flush=True)
            except Exception as e:
                print("PROBE %s meta: FAILED %s: %s" % (tag, type(e).__name__, str(e).splitlines()[0][:200] if str(e) else ""),
                      flush=True)
        except Exception as e:
            print("PROBE %s: FAILED %s: %s" % (tag, type(e).__name__, str(e)[:300]), flush=True)
            traceback.print_exc(limit=4)


if __name__ == "__main__":
    main()
