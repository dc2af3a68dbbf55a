"""Per-step graphs (issue 31, docs/format.md 9.1) without torch: a trace whose
/graph is specialised to step 0's data and whose later steps use graphs of
their own, written through the Recorder (libdrift_recorder.so, no torch),
then replayed, bisected and checked by drift.

Graph A (/graph) doubles the latents, graph B triples them, graph C takes
latents of another shape. Steps: 0 uses A, 1 uses B (its JSON), 2 uses A,
3 reuses B, 4 has none (the recorder could not trace it), 5 uses C.
The recorded output of each step is what its own graph computes, so a
replay that took /graph for every step would not be bitwise at steps 1 and 3.

    DRIFT_BIN=... DRIFT_RECORDER_LIB=... python3 step_graphs.py WORKDIR
"""
import json
import os
import subprocess
import sys

import h5py
import numpy as np

from drift_recorder import Recorder

W = sys.argv[1]
DRIFT = os.environ["DRIFT_BIN"]
checks = 0


def check(cond, what):
    global checks
    if not cond:
        raise AssertionError(what)
    checks += 1


def graph(factor, shape, name):
    val = {"shape": list(shape), "dtype": "float32"}
    return {"format": "drift-aten-graph", "version": 1, "model_class": name,
            "capture": {"mode": "dispatch", "seconds": 0.1, "specialized": True},
            "nodes": [{"name": "x", "op": "placeholder", "target": "x", "args": [], "kwargs": {}, "val": val,
                       "module": ""},
                      {"name": "mul", "op": "call_function", "target": "aten.mul.Tensor",
                       "args": [{"node": "x"}, float(factor)], "kwargs": {}, "val": val, "module": "head",
                       "module_stack": ["head"], "module_classes": ["Head"]},
                      {"name": "output", "op": "output", "target": "output", "args": [[{"node": "mul"}]],
                       "kwargs": {}, "val": None, "module": ""}],
            "inputs": [{"node": "x", "kind": "user_input", "target": "hidden_states", "role": "latents",
                        "site": "input:latents:pre_cast"}],
            "outputs": [{"node": "mul", "name": "output:noise_pred"}], "constants": {}, "non_tensor_inputs": {}}


PLAN = {"name": "fp32", "fsdp_master_dtype": "fp32", "fsdp_reduce_dtype": "fp32", "diffusion_forward_dtype": "fp32",
        "sglang_dit_precision": "fp32", "input_dtype_policy": {"latents": None, "cond": None, "timestep": None},
        "param_dtype_patterns": []}
A, B, C = graph(2, (1, 2, 4), "StepA"), graph(3, (1, 2, 4), "StepB"), graph(3, (1, 3, 4), "StepC")
# step -> (factor of the recorded output, graph number, JSON to write or None, reason)
STEPS = {0: (2, None, None, None), 1: (3, 1, B, None), 2: (2, None, None, None), 3: (3, 1, None, None),
         4: (5, 0, None, "dispatch trace failed: RuntimeError: boom"), 5: (3, 2, C, None)}

trace = os.path.join(W, "steps.h5")
with Recorder(trace, family="graph", run_id="steps", plan=PLAN, strict=True, quiet=True) as rec:
    rec.set_graph(json.dumps(A))
    rec.reserve_step_graphs()
    for s, (factor, g, doc, reason) in STEPS.items():
        x = (np.arange(8, dtype=np.float32).reshape(1, 2, 4) + s) / 7
        with rec.step(s):
            rec.input("latents", x)
            rec.output("noise_pred", x * np.float32(factor))
            if g is not None:
                check(rec.step_graph(g, json.dumps(doc) if doc else None, reason), f"step_graph of step {s}")
    check(rec.step_graphs == {1: 1, 3: 1, 4: -1, 5: 2}, f"rec.step_graphs {rec.step_graphs}")

# ---- the file as h5py sees it: the bytes and the notes -------------------------------------------
with h5py.File(trace, "r") as f:
    blob = f["graph_steps"][()].tobytes()
    notes = [(int(r["step"]), int(r["level"]), r["text"].decode()) for r in f["notes"][...]]
sg = {s: t for s, _, t in notes if t.startswith("step-graph v1 ")}
check(set(sg) == {1, 3, 4, 5}, f"step-graph notes of steps 1, 3, 4, 5: {sg}")
lb = len(json.dumps(B))
check(sg[1] == f"step-graph v1 graph=1 offset=0 length={lb}" and sg[3] == sg[1], f"B written once, reused: {sg}")
check(sg[5] == f"step-graph v1 graph=2 offset={lb} length={len(json.dumps(C))}", f"C after B: {sg[5]}")
check(json.loads(blob[:lb]) == B and json.loads(blob[lb:]) == C, "/graph_steps holds B then C")
check(sg[4].startswith("step-graph v1 graph=none reason=dispatch trace failed"), f"step 4's refusal: {sg[4]}")
check(any(s == 4 and lvl == 1 for s, lvl, t in notes if t.startswith("step-graph")), "step 4's note is a warning")


def drift(*args, want=0):
    p = subprocess.run([DRIFT, *args], capture_output=True, text=True)
    check(p.returncode == want, f"drift {' '.join(args)}: exit {p.returncode}, want {want}\n{p.stdout}\n{p.stderr}")
    return p.stdout if "--json" in args else p.stdout + p.stderr


# ---- replay: each step its own graph, bitwise -----------------------------------------------------
out = drift("replay", trace, "--device", "cpu", "--ref", "trainer", "--steps", "0:3", "--json")
rep = json.loads(out)
rows = {r["site"]: r for r in rep.get("sites", [])}
noise = rows.get("output:noise_pred")
check(noise is not None and noise.get("bitwise_equal") is True,
      f"steps 0..3 replay bitwise, each with its own graph: {json.dumps(noise)[:400]}")
check(rep.get("steps") == [0, 1, 2, 3], f"replayed steps: {rep.get('steps')}")

check("note: steps replayed with a graph of their own (/graph_steps): 1:1 3:1" in
      drift("replay", trace, "--device", "cpu", "--ref", "trainer", "--steps", "0:3"), "the text report names them")
# the same with the executor's resident cache (one per graph, made at the graph's first step)
os.environ["DRIFT_REPLAY_RESIDENT"] = "1"
rep = json.loads(drift("replay", trace, "--device", "cpu", "--ref", "trainer", "--steps", "0:3", "--json"))
del os.environ["DRIFT_REPLAY_RESIDENT"]
noise = {r["site"]: r for r in rep.get("sites", [])}.get("output:noise_pred")
check(noise and noise.get("bitwise_equal") is True, "steps 0..3 bitwise with a resident cache per graph")
# two workers (replay/drive/multi.c): each prepares every per-step graph's forward
rep = json.loads(drift("replay", trace, "--devices", "cpu,cpu", "--ref", "trainer", "--steps", "0:3", "--json"))
noise = {r["site"]: r for r in rep.get("sites", [])}.get("output:noise_pred")
check(noise and noise.get("steps_bitwise_equal") == 4, "steps 0..3 bitwise over two workers")
# drift ls names the steps with their own graph
ls = json.loads(drift("ls", trace, "--json"))["step_graphs"]
check([(x["step"], x["graph"]) for x in ls] == [(1, 1), (3, 1), (4, -1), (5, 2)] and "boom" in ls[2]["reason"],
      f"ls --json step_graphs: {ls}")
check("steps with a graph of their own (/graph_steps, 2 graphs): 1:1 3:1 4:none 5:2" in drift("ls", trace),
      "drift ls lists them")
# bisect takes the one graph of its steps; steps of two graphs are refused naming both
PL = os.path.join(W, "plan.json")
json.dump(PLAN, open(PL, "w"))
err = drift("bisect", trace, "--good", PL, "--bad", PL, "--device", "cpu", "--steps", "0:1", want=2)
check("step 0 uses /graph, step 1 uses /graph_steps graph 1" in err, f"bisect over two graphs refused: {err}")
drift("bisect", trace, "--good", PL, "--bad", PL, "--device", "cpu", "--steps", "3")  # step 3 alone: its graph

# a step the recorder could not trace: exit 2 with its reason
err = drift("replay", trace, "--device", "cpu", "--ref", "trainer", "--steps", "4", want=2)
check("step 4 has no graph" in err and "boom" in err, f"step 4 refused with the reason: {err}")
# a step whose inputs do not have its graph's shapes: exit 2 naming input, shapes and graph
err = drift("replay", trace, "--device", "cpu", "--ref", "trainer", "--steps", "5", want=2)
check("step 5: input 'latents'" in err and "[1,2,4]" in err and "[1,3,4]" in err and "/graph_steps graph 2" in err,
      f"step 5 refused naming its input's shape: {err}")
# the old single-graph path: step 0 alone
drift("replay", trace, "--device", "cpu", "--ref", "trainer", "--steps", "0")

# ---- check: the file reads back; a note pointing outside /graph_steps is found ------------------
drift("check", trace)
bad = os.path.join(W, "bad.h5")
with open(trace, "rb") as a, open(bad, "wb") as b:
    b.write(a.read())
with h5py.File(bad, "r+") as f:
    rows = f["notes"][...]
    for i, r in enumerate(rows):
        if r["text"].decode().startswith("step-graph v1 graph=1"):
            r["text"] = b"step-graph v1 graph=1 offset=999999 length=10"
            rows[i] = r
    f["notes"][...] = rows
err = drift("replay", bad, "--device", "cpu", "--ref", "trainer", "--steps", "1", want=2)
check("graph_steps" in err and "999999" in err, f"a note outside /graph_steps: exit 2 naming it: {err}")
err = drift("check", bad, want=1)
check("graph_steps" in err and "999999" in err, f"drift check names the bad note: {err}")
with h5py.File(bad, "r+") as f:
    rows = f["notes"][...]
    for i, r in enumerate(rows):
        if r["text"].decode().startswith("step-graph v1 graph=1"):
            r["text"] = b"step-graph v1 graph=x"
            rows[i] = r
    f["notes"][...] = rows
err = drift("replay", bad, "--device", "cpu", "--ref", "trainer", "--steps", "0", want=2)
check("/notes" in err and "step-graph" in err and "expected" in err, f"a malformed note: exit 2: {err}")

# ---- the Recorder's own check at the end of each step, with a stand-in for the torch parts ----------
class StandIn:
    """capture_steps.StepGraphs without torch: the step's signature is its kwargs' 'sig', a new
    signature is captured as graph B (or fails for 'bad')."""
    def __init__(self):
        self.refreshed = self.captured = 0

    def refresh(self):
        self.refreshed += 1

    def signature(self, kw):
        return kw["sig"]

    def capture(self, kw):
        self.captured += 1
        if kw["sig"] == "bad":
            raise RuntimeError("dispatch trace failed: GuardOnDataDependentSymNode")
        return B, []

    def close(self):
        pass


auto = os.path.join(W, "auto.h5")
sigs = ["s0", "s1", "s0", "s1", "bad", "bad", None]  # None: no rec.inputs() in that step
sd = StandIn()
with Recorder(auto, family="graph", run_id="auto", plan=PLAN, quiet=True) as rec:
    rec.set_graph(json.dumps(A))
    rec.reserve_step_graphs()
    rec._stepg, rec._sig_graph = sd, {"s0": 0}
    for s, sig in enumerate(sigs):
        x = (np.arange(8, dtype=np.float32).reshape(1, 2, 4) + s) / 7
        with rec.step(s):
            if sig is not None:
                rec.inputs({"hidden_states": x, "sig": sig})
            else:
                rec.input("latents", x)
            rec.output("noise_pred", x * np.float32(3 if sig == "s1" else 2))
    check(rec.step_graphs == {0: 0, 1: 1, 2: 0, 3: 1, 4: -1, 5: -1}, f"auto step_graphs {rec.step_graphs}")
    check(sd.captured == 2 and sd.refreshed == 6, f"traced once per new signature ({sd.captured}), refreshed per step")
with h5py.File(auto, "r") as f:
    notes = [(int(r["step"]), r["text"].decode()) for r in f["notes"][...]]
    blob = f["graph_steps"][()].tobytes()
check(json.loads(blob) == B, "graph B appended once")
check([s for s, t in notes if t.startswith("step-graph v1 graph=none") and "GuardOnDataDependent" in t] == [4, 5],
      f"steps 4 and 5 refused with the trace's reason: {notes}")
check([s for s, t in notes if "no rec.inputs(kwargs)" in t] == [6], "a step without rec.inputs() is said once")
rep = json.loads(drift("replay", auto, "--device", "cpu", "--ref", "trainer", "--steps", "0:3", "--json"))
noise = {r["site"]: r for r in rep.get("sites", [])}.get("output:noise_pred")
check(noise and noise.get("bitwise_equal") is True, "the Recorder's own per-step graphs replay bitwise")

# an input the forward may change (a cache object) turns the per-step check off: a forward run
# again would see it as the step left it (WanAnimate-2's KV cache)
from drift_recorder.capture_steps import stateful_input  # noqa: E402


class Cache:
    pass


check(stateful_input({"hidden_states": np.zeros(2), "timestep": 3, "ids": [np.zeros(1), None]}) is None,
      "tensors, numbers and lists of them are plain inputs")
check(stateful_input({"hidden_states": np.zeros(2), "kv": [1, {"cache": Cache()}]}) == ("kv.1.cache", "Cache"),
      "a cache object inside a list is named")

print(f"step_graphs: {checks} checks passed")
