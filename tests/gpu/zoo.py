"""The zoo as the test (issue 31): every diffusers transformer class at its own
test configuration, plus plain_dits.py, recorded the way a trainer records.
GPU machine, torch 2.11, diffusers' source and tests folder on the paths
(zoo_models.py). One process per share of the zoo (ZOO_SHARD=i/n):

    torchrun --standalone --nproc_per_node=1 zoo.py record --out DIR [--models A,B] [--shard i/n]

For each model: seeded weights, the test's dummy inputs, FSDP2 (world 1:
fully_shard per block in bf16, an fp32 island with its own fully_shard, the
root), bf16 autocast, 2 steps (step 1: new latents, the timestep moved),
drift_recorder with record_params / capture_graph / watch (block outputs) /
inputs / output; torch's own noise floor (the middle latent moved by one bf16 ULP; each
element of it when the output does not depend on the middle one). Writes DIR/<tag>/trainer.h5, trainer_plan.json, info.json and one
"ZOO <tag> {json}" line (the row: built, captured mode, nodes, decomposed
composites, ops left whole, seconds, or the reason it failed).
"""
import argparse
import fnmatch
import gzip
import json
import math
import os
import re
import sys
import time
import traceback

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "recorder", "python"))
sys.path.insert(0, HERE)
from drift_recorder import Recorder  # noqa: E402
import zoo_models  # noqa: E402

STEPS = 2
# ZOO_WATCH: globs of the modules whose outputs are recorded (default: the blocks); "*" records
# every module, so a replay names the first leaf module whose output differs
WATCH = [g for g in os.environ.get("ZOO_WATCH", "").split(",") if g]
REC_OPTS = {"policy": "block", "block_timeout_ms": 30000, "close_timeout_ms": 120000}
# fp32 island candidates, first that names whole modules with parameters wins
ISLANDS = ["*.norm2.*", "*.norm2_context.*", "*norm_out*", "*time_embed*", "*timestep_embedder*",
           "*time_text_embed*", "*t_embedder*", "*.norm1.*", "*norm*"]


def plan(name, forward, patterns=()):
    return {"name": name, "fsdp_master_dtype": "fp32", "fsdp_reduce_dtype": "fp32",
            "diffusion_forward_dtype": forward, "sglang_dit_precision": "bf16" if forward == "bf16" else forward,
            "input_dtype_policy": {"latents": None, "cond": None, "timestep": None},
            "param_dtype_patterns": [list(p) for p in patterns]}


def block_names(m):
    """Modules named <...>blocks.N / layers.N, outermost only."""
    out = []
    for n, mod in m.named_modules():
        if type(mod).forward is torch.nn.Module.forward:
            continue  # a container (ConsisID's layers.N is a ModuleList): fully_shard needs a forward
        if re.fullmatch(r"([\w.]*?)(blocks|layers|refiner|transformer_blocks)\.\d+", n) and \
                not any(n.startswith(o + ".") for o in out):
            out.append(n)
    return out


def island_modules(m, patterns):
    names = [n for n, p in m.named_parameters() if p.is_floating_point()]
    for pat in patterns:
        hit = [n for n in names if fnmatch.fnmatchcase(n, pat)]
        if not hit:
            continue
        chosen = []
        for mn, mod in sorted(m.named_modules(), key=lambda x: x[0].count(".") if x[0] else -1):
            if not mn or any(mn == c or mn.startswith(c + ".") for c in chosen):
                continue
            if type(mod).forward is torch.nn.Module.forward:
                continue  # a container (ModuleList): fully_shard needs a forward, its children are tried
            ps = [mn + "." + n for n, _ in mod.named_parameters()]
            if ps and all(fnmatch.fnmatchcase(x, pat) for x in ps):
                chosen.append(mn)
        covered = {mn + "." + n for mn in chosen for n, _ in m.get_submodule(mn).named_parameters()}
        if chosen and covered == set(hit):
            return pat, chosen
    return None, []


def is_float_list(v):
    """A list of floating tensors (diffusers' list-of-samples inputs, e.g. WanAnimate-2's hidden_states)."""
    return (isinstance(v, (list, tuple)) and len(v) > 0
            and all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in v))


def step_inputs(kw, main, step):
    out = {}
    for k, v in kw.items():
        if step and k == main and is_float_list(v):
            g = torch.Generator("cpu").manual_seed(100 + step)
            v = [torch.randn(t.shape, generator=g).to(t.device, t.dtype) for t in v]
        elif isinstance(v, torch.Tensor):
            v = v.clone()
            if step and k == main and v.is_floating_point():
                g = torch.Generator("cpu").manual_seed(100 + step)
                v = torch.randn(v.shape, generator=g).to(v.device, v.dtype)
            elif step and k in ("timestep", "t"):
                v = (v - 100 * step if (not v.is_floating_point() or float(v.float().max()) > 10)
                     else v * (1 - 0.2 * step))
        out[k] = v
    return out


def first_tensor(out):
    if isinstance(out, (tuple, list)):
        return first_tensor(out[0])
    if hasattr(out, "sample"):
        return out.sample
    if isinstance(out, dict):
        return first_tensor(next(iter(out.values())))
    return out


def nudge(kw, main, every=False):
    """kw with main's middle element moved up by one bf16 ULP (every=True: each element of
    main: the fallback when the output does not depend on the middle one)."""
    k2 = dict(kw)
    if is_float_list(kw[main]):  # a list of samples: nudge the first one
        k2[main] = [nudge({main: kw[main][0]}, main, every)[main]] + list(kw[main][1:])
        return k2
    x = kw[main].clone()
    if every:
        a = x.detach().abs().float().clamp_min(1.0e-30)
        ulp = torch.exp2(torch.floor(torch.log2(a)) - 7).where(x != 0, torch.full_like(a, 2.0 ** -7))
        k2[main] = (x.float() + ulp).to(x.dtype)
        return k2
    flat = x.view(-1)
    i = flat.numel() // 2
    v = float(flat[i])
    flat[i] = v + 2.0 ** (math.floor(math.log2(abs(v) or 1.0)) - 7)
    k2[main] = x
    return k2


def record(entry, out):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    tag = entry["tag"].replace(":", "_")
    row = {"tag": tag, "test": entry.get("test")}
    if entry.get("error"):
        row.update(built=False, reason=entry["error"])
        return row
    d = os.path.join(out, tag)
    os.makedirs(d, exist_ok=True)
    t0 = time.perf_counter()
    try:
        m, kw, main = zoo_models.build(entry)
    except Exception as e:  # noqa: BLE001
        row.update(built=False, reason="build: %s: %s" % (type(e).__name__, " ".join(str(e).split())[:300]))
        return row
    row["built"] = True
    row["params"] = sum(p.numel() for p in m.parameters())
    main_ok = main in kw and (is_float_list(kw[main]) or (isinstance(kw[main], torch.Tensor) and kw[main].is_floating_point()))
    if not main_ok:
        main = next((k for k, v in kw.items()
                     if is_float_list(v) or (isinstance(v, torch.Tensor) and v.is_floating_point())), main)
    row["main"] = main
    try:  # eager, unsharded: the model runs at all
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            first_tensor(m(**step_inputs(kw, main, 0)))
    except Exception as e:  # noqa: BLE001
        row.update(reason="eager forward: %s: %s" % (type(e).__name__, " ".join(str(e).split())[:300]))
        return row
    pat, island = island_modules(m, ISLANDS)
    row["island"] = pat
    p = plan("trainer_" + tag, "bf16", [(pat, "fp32")] if pat else [])
    json.dump(p, open(os.path.join(d, "trainer_plan.json"), "w"))
    path = os.path.join(d, "trainer.h5")
    for per_block in (True, False):
        if not per_block:  # a fresh copy: the first one is sharded
            m, kw, main2 = zoo_models.build(entry)
        err, got = _record_sharded(m, kw, main, pat, island, per_block, tag, p, path, row)
        if err is None:
            g, floors, cnt = got
            break
        # a root forward that calls into a block's submodules directly (DiT's norm1.emb) meets
        # the block's sharded parameters: FSDP2 per block cannot run it, the root + island can
        if per_block and "mixed torch.Tensor and DTensor" in str(err):
            row["sharding"] = "root + island (per-block fully_shard failed: %s)" % str(err)[:120]
            for f in (path, path + ".lock"):
                if os.path.exists(f):
                    os.remove(f)
            continue
        row.update(reason="record: %s: %s" % (type(err).__name__, " ".join(str(err).split())[:300]))
        return row
    cap = (g or {}).get("capture", {})
    row.update(captured=g is not None, mode=cap.get("mode"), fallback=cap.get("fallback"),
               nodes=len(g["nodes"]) if g else 0, opset=(g or {}).get("opset"),
               committed=cnt.get("committed_steps"), dropped=cnt.get("dropped"), step_graphs=cnt.get("step_graphs"),
               torch_floor=floors, seconds=round(time.perf_counter() - t0, 2),
               mb=round(os.path.getsize(path) / 2 ** 20, 2))
    if g is None:
        notes = []
        try:
            import h5py
            with h5py.File(path, "r") as f:
                notes = [r["text"].decode() for r in f["notes"][...]] if "notes" in f else []
        except Exception:  # noqa: BLE001
            pass
        row["reason"] = "capture: " + "; ".join(n for n in notes if "capture" in n)[:400]
    info = dict(row)
    info["island_modules"] = island
    json.dump(info, open(os.path.join(d, "info.json"), "w"), indent=1)
    return row


def _record_sharded(m, kw, main, pat, island, per_block, tag, p, path, row):
    """Shards m (FSDP2: the fp32 island, each block when per_block, the root) and records
    STEPS steps. (None, (graph, floors, counters)) or (exception, None)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    bf16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False)
    fp32 = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32, cast_forward_inputs=False)
    blocks = block_names(m)
    row["blocks"] = len(blocks)
    try:
        for mn in island:
            fully_shard(m.get_submodule(mn), mp_policy=fp32)
        for mn in (blocks if per_block else []):
            if mn not in island and not any(mn.startswith(i + ".") for i in island):
                fully_shard(m.get_submodule(mn), mp_policy=bf16)
        fully_shard(m, mp_policy=bf16)
    except Exception as e:  # noqa: BLE001
        return RuntimeError("fully_shard: %s: %s" % (type(e).__name__, " ".join(str(e).split())[:300])), None
    floors = []
    try:
        with Recorder(path, side="trainer", run_id="zoo-" + tag, family="graph", plan=p, options=REC_OPTS) as rec:
            rec.record_params(m)
            g = rec.capture_graph(m, step_inputs(kw, main, 0))
            if g is not None and os.environ.get("ZOO_GRAPH_DUMP"):  # the graph alone (a trace too big to bring back)
                with gzip.open(os.path.join(os.path.dirname(path), "graph.json.gz"), "wt") as f:
                    json.dump(g, f, default=lambda o: {"repr": repr(o)[:200]})
            rec.watch(m, outputs=WATCH or blocks)
            for s in range(STEPS):
                k = step_inputs(kw, main, s)
                with rec.step(s), torch.no_grad():
                    rec.inputs(k)
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        o = first_tensor(m(**k))
                    rec.output("noise_pred", o)
                with rec.paused(), torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
                    a = first_tensor(m(**k)).float()
                    b = first_tensor(m(**nudge(k, main))).float()
                    fl = float((a - b).abs().mean())
                    if fl == 0.0 and (is_float_list(k[main]) or torch.is_floating_point(k[main])):  # the middle element does not reach the output
                        b = first_tensor(m(**nudge(k, main, every=True))).float()
                        fl = float((a - b).abs().mean())
                    floors.append(fl)
            rec.flush(60000)
            cnt = rec.counters()
            # a graph specialised to step 0's data (dispatch): the graph each later step got (0: /graph)
            cnt["step_graphs"] = {str(k): v for k, v in rec.step_graphs.items()}
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        return e, None
    return None, (g, floors, cnt)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["record", "list"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=None)
    ap.add_argument("--shard", default="0/1")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    entries = zoo_models.zoo()
    if a.models:
        want = set(a.models.split(","))
        entries = [e for e in entries if e["tag"] in want or e["tag"].replace(":", "_") in want]
    i, n = (int(x) for x in a.shard.split("/"))
    entries = entries[i::n]
    os.makedirs(a.out, exist_ok=True)
    if a.mode == "list":
        for e in entries:
            print("ZOO %s %s" % (e["tag"], json.dumps({"test": e.get("test"), "error": e.get("error")})), flush=True)
        return
    torch.distributed.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    for e in entries:
        try:
            row = record(e, a.out)
        except Exception as ex:  # noqa: BLE001 - one model never stops the others
            row = {"tag": e["tag"], "reason": "%s: %s" % (type(ex).__name__, " ".join(str(ex).split())[:300])}
            traceback.print_exc()
        print("ZOO %s %s" % (row["tag"], json.dumps(row, default=str)), flush=True)
        torch.cuda.empty_cache()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
