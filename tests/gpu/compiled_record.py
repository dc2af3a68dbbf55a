"""Issue 36 on the GPU: a small diffusers DiT (WanTransformer3DModel at
diffusers' test configuration, tests/gpu/capture_models.py) recorded twice
in one process with drift_recorder, each with a captured graph, bf16
autocast, 2 steps, the blocks' outputs:

    python3 tests/gpu/compiled_record.py OUTDIR [--model wan]

  OUTDIR/eager.h5     the module as is;
  OUTDIR/compiled.h5  torch.compile(module) (inductor, default mode): the
                      recorder finds the OptimizedModule, capture_graph
                      exports its _orig_mod, and rec.compile_floor() measures
                      step 0's output eager vs compiled;
  OUTDIR/plan.json    the all-bf16 plan both ran (fp32 masters recorded, then
                      the weights cast to bf16, as capture_record.py's rollout).
One "RESULT <name> OK|FAIL ..." line each.
"""
import argparse
import json
import os
import sys
import time
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "recorder", "python"))
sys.path.insert(0, HERE)
from drift_recorder import Recorder  # noqa: E402
from capture_record import REC_OPTS, STEPS, block_names, first_tensor, make, plan, step_inputs  # noqa: E402


def record(name, tag, p, out, dev):
    model, kw = make(tag, dev)  # seeded: the same weights and inputs both times
    run = torch.compile(model) if name == "compiled" else model
    path = os.path.join(out, name + ".h5")
    t0 = time.perf_counter()
    floor = None
    with Recorder(path, side="trainer", run_id="compiled-" + name, family="graph", plan=p, options=REC_OPTS) as rec:
        rec.record_params(run)
        g = rec.capture_graph(run, step_inputs(kw, 0, dev))
        for prm in model.parameters():
            prm.data = prm.data.to(torch.bfloat16)  # the all-bf16 plan's weights (as capture_record.py's rollout)
        rec.watch(run, outputs=block_names(model))
        for s in range(STEPS):
            k = step_inputs(kw, s, dev)
            with rec.step(s), torch.no_grad():
                rec.inputs(k)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    o = first_tensor(run(**k))
                    if name == "compiled" and s == 0:
                        floor = rec.compile_floor(run, k)
                rec.output("noise_pred", o)
        rec.flush(60000)
        cnt = rec.counters()
        found = rec.compiled
    ok = g is not None and cnt.get("committed_steps") == STEPS and rec.failures == 0
    if name == "compiled":
        ok = ok and found.get("<model>") is not None and floor is not None
    print("RESULT %s %s %s: graph %s, compiled %s, compile floor %s, %.1f s, %d recorder failures" % (
        name, "OK" if ok else "FAIL", path, "%d nodes (%s)" % (len(g["nodes"]), g["capture"]["mode"]) if g else "NOT captured",
        found or "none", "mean|d| %.4g of mean|x| %.4g" % floor if floor else "-", time.perf_counter() - t0,
        rec.failures), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--model", default="wan")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda", 0)
    p = plan("all_bf16", "bf16")
    json.dump(p, open(os.path.join(a.out, "plan.json"), "w"))
    for name in ("eager", "compiled"):
        try:
            record(name, a.model, p, a.out, dev)
        except Exception as e:  # noqa: BLE001
            print("RESULT %s FAIL %s: %s" % (name, type(e).__name__, " ".join(str(e).split())[:400]), flush=True)
            traceback.print_exc()


if __name__ == "__main__":
    main()
