#!/usr/bin/env python3
"""The zoo's invariance table (issue 33), on the GPU machine after zoo.py record:

    python3 tests/gpu/zoo_invariance.py --rec /tmp/zoo/rec --drift BUILD/drift --out $OUT \
        [--models A,B] [--batches 1,2,4,8] [--budget SECONDS] [--jobs N]

For every recorded model with a captured graph, two verdicts on the same question
("does sample 0's output change when it runs inside a batch?"):

* PyTorch's own: the real diffusers module (zoo_models.build: the same seeded weights
  and dummy inputs as the recording), parameters in the recording's plan (bf16, the
  fp32 island in fp32: what FSDP2's mixed precision gathers), bf16 autocast, torch's
  kernels. Batch 1 is the sample alone; batch B puts it at position 0 and at B-1,
  the other rows as drift builds them (docs/invariance.md: the recorded batch's other
  samples cycled, or seeded latents with the sample's other inputs when it recorded
  one); CFG joined is [sample, sample with zero text embeddings]. Every tensor input
  whose dim 0 is the recorded batch is per-sample, as drift's re-batching assumes.
* drift's: `drift invariance TRACE --device cuda --kernels torch --batch ... --cfg-batch
  joined --json` on the recorded trace (re-lowered captured graph).

A configuration matches when both say the same about sample 0's output (bitwise equal
to batch 1, or not). Writes $OUT/zoo_invariance.md (model x configuration: torch's
verdict and differing element count, drift's, drift's first divergent node) and
$OUT/zoo_invariance.jsonl; prints one summary line.
"""
import argparse
import json
import os
import subprocess
import threading
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "recorder", "python"))
sys.path.insert(0, HERE)
import zoo_models  # noqa: E402
from drift_recorder.capture import ROLE_OF_KWARG  # noqa: E402
from zoo import first_tensor, island_modules, ISLANDS, step_inputs  # noqa: E402


def _leaves(v):
    """The tensor leaves of an input (nested lists, tuples and dicts walked, as the Recorder flattens
    them: each leaf is one graph input that drift re-batches on its own)."""
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, dict):
        return [x for y in v.values() for x in _leaves(y)]
    if isinstance(v, (list, tuple)):
        return [x for y in v for x in _leaves(y)]
    return []


def _map_leaves(v, fn):
    if isinstance(v, torch.Tensor):
        return fn(v)
    if isinstance(v, dict):
        return {k: _map_leaves(x, fn) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        items = [_map_leaves(x, fn) for x in v]
        return type(v)(*items) if hasattr(v, "_fields") else type(v)(items)
    return v


# How a model's inputs hold the batch where "every tensor leaf whose dim 0 is the recorded batch
# is per-sample" is wrong (read from each model's forward in the diffusers source):
#   shared: inputs that are not per-sample although their dim 0 may equal the recorded batch;
#   dim:    inputs whose batch is another dim;
#   lists:  inputs that are a list with one entry per sample (the list grows with the batch);
#   main:   the input that holds the sample (seeded in pad rows) where it is not a tensor;
#   list_output: the output is a list of per-sample tensors (stacked to read the sample's row);
#   unbatched: the model has no batch to vary (the reason, shown in the table).
LAYOUT = {
    # the forward repeats the padding mask by the batch itself: padding_mask.repeat(batch_size, ...)
    "CosmosTransformer3DModel": {"shared": {"padding_mask"}},
    # encoder_hidden_states_llama3 is [llama layers, B, L, D] (the test sizes both by batch_size)
    "HiDreamImageTransformer2DModel": {"dim": {"encoder_hidden_states_llama3": 1}},
    # timestep holds one noise level per row of the AdaLN table, addressed per token by timestep_indices
    "MiniMaxH3Transformer3DModel": {"shared": {"timestep"}},
    # shape_list: one list of (t, h, w) patch shapes per sample
    "JoyImageEditPlusTransformer3DModel": {"lists": {"shape_list"}},
    # x and cap_feats: one tensor per sample ([C, F, H, W], [L, D]), no batch dim; the output is a list too
    "ZImageTransformer2DModel": {"lists": {"x", "cap_feats"}, "main": "x", "list_output": True},
    # hidden_states, condition_latents and encoder_hidden_states: one tensor per sample ([C, F, H, W],
    # [L, D]); the output is a list of [C, F, H, W] (read from the recorded graph: user inputs NAME.0, an
    # unbind of the batch before the output; not checked against the diffusers source here)
    "WanAnimate2Transformer3DModel": {"lists": {"hidden_states", "condition_latents", "encoder_hidden_states"},
                                      "main": "hidden_states", "list_output": True},
    "Cosmos3OmniTransformer": {"unbatched": "packs its samples into one sequence (vision_tokens: one entry per "
                                            "item, addressed by indexes into the packed sequence): no batch dim"},
}


def _bdim(k, lay):
    return lay.get("dim", {}).get(k, 0)


def _is_ps(v, b0, d=0):
    return isinstance(v, torch.Tensor) and v.ndim > d and v.shape[d] == b0


def _is_list_ps(k, v, b0, lay):
    return k in lay.get("lists", ()) and isinstance(v, (list, tuple)) and len(v) == b0


def per_sample(kw, b0, lay=None):
    """Names of the per-sample inputs: a tensor leaf whose batch dim (LAYOUT's, else 0) is the
    recorded batch, or a per-sample list; not LAYOUT's shared ones."""
    lay = lay or {}
    return [k for k, v in kw.items() if k not in lay.get("shared", ()) and
            (_is_list_ps(k, v, b0, lay) or any(_is_ps(x, b0, _bdim(k, lay)) for x in _leaves(v)))]


def assemble(kw, names, b0, rows, main=None, seed=0, lay=None):
    """kwargs for a batch whose position p holds rows[p]: ("rec", j) the recorded row j, ("seed", j)
    row j with the main input's values seeded N(0, 1), ("uncond", j) row j with the text condition
    zeroed. Non per-sample inputs are passed as they are."""
    lay = lay or {}
    g = torch.Generator("cpu").manual_seed(seed)
    out = dict(kw)
    for k in names:
        cond = ROLE_OF_KWARG.get(k) == "cond"

        def pick(x, kind):
            if kind == "seed" and k == main and isinstance(x, torch.Tensor) and x.is_floating_point():
                return torch.randn(x.shape, generator=g).to(x.device, x.dtype)
            if kind == "uncond" and cond and isinstance(x, torch.Tensor):
                return torch.zeros_like(x)
            return x

        if _is_list_ps(k, kw[k], b0, lay):  # one entry per sample: the entries of the rows
            out[k] = type(kw[k])(_map_leaves(kw[k][j], lambda x, kind=kind: pick(x, kind)) for kind, j in rows)
            continue
        d = _bdim(k, lay)

        def one(v, d=d):
            if not _is_ps(v, b0, d):
                return v
            return torch.cat([pick(v.narrow(d, j, 1), kind) for kind, j in rows], d)
        out[k] = _map_leaves(kw[k], one)
    return out


def rows_for(kw, names, b0, batch, pos, main, seed, lay=None):
    """kwargs at `batch` with sample 0 at `pos`; other rows as drift builds them: the recorded
    batch's other samples cycled, else seeded latents with the sample's other inputs."""
    others = list(range(1, b0))
    rows = []
    for r in range(batch):
        if r == pos:
            rows.append(("rec", 0))
        elif others:
            rows.append(("rec", others[(r - (1 if r > pos else 0)) % len(others)]))
        else:
            rows.append(("seed", 0))
    return assemble(kw, names, b0, rows, main, seed, lay)


def cfg_pair(kw, names, b0=1, lay=None):
    """[sample, sample with zero text embeddings] as one batch of 2."""
    return assemble(kw, names, b0, [("rec", 0), ("uncond", 0)], lay=lay)


def alone(kw, names, b0, row=0, zero_cond=False, lay=None):
    """kwargs with row `row` of every per-sample input (zeros for the text condition when
    zero_cond): the sample alone, at batch 1."""
    return assemble(kw, names, b0, [("uncond" if zero_cond else "rec", row)], lay=lay)


def first_divergent_module(m, run, k1, k2):
    """PyTorch's own first module (execution order) whose output row 0 differs between the
    sample alone (k1) and inside a batch of 2 (k2): (name, class, output shape at batch 2)."""
    seen = {}

    def hook(name):
        def h(mod, args, out):
            t = first_tensor(out) if not isinstance(out, torch.Tensor) else out
            if isinstance(t, torch.Tensor) and t.ndim >= 1:
                seen.setdefault(name, []).append(t.detach().float().clone())
        return h

    hs = [mod.register_forward_hook(hook(n)) for n, mod in m.named_modules() if n]
    try:
        order = []
        seen.clear()
        run(k1)
        a = {n: v[0] for n, v in seen.items()}
        order = list(seen)
        seen.clear()
        run(k2)
        b = {n: v[0] for n, v in seen.items()}
    finally:
        for h in hs:
            h.remove()
    for n in order:
        if n in b and a[n].shape[1:] == b[n].shape[1:] and a[n].shape[0] >= 1 and b[n].shape[0] >= 1:
            if not torch.equal(a[n][0], b[n][0]):
                return "%s (%s) %s" % (n, type(m.get_submodule(n)).__name__, list(b[n].shape))
    return None


def prepared(entry, island_pat):
    """The zoo model in the recording's plan (bf16 parameters, the fp32 island kept) with its
    step-0 inputs: (model, kwargs, main input, recorded batch, per-sample names, island params, layout)."""
    lay = LAYOUT.get(entry.get("tag", ""), {})
    m, kw, main = zoo_models.build(entry)
    main = lay.get("main", main)
    v = kw.get(main)
    if not ((isinstance(v, (list, tuple)) and main in lay.get("lists", ())) or
            (isinstance(v, torch.Tensor) and v.is_floating_point())):
        main = next((k for k, v in kw.items() if isinstance(v, torch.Tensor) and v.is_floating_point()), main)
    kw = step_inputs(kw, main, 0)
    _, island = island_modules(m, [island_pat]) if island_pat else (None, [])
    keep = {mn + "." + n for mn in island for n, _ in m.get_submodule(mn).named_parameters()}
    with torch.no_grad():
        for n, p in m.named_parameters():
            if p.is_floating_point() and n not in keep:
                p.data = p.data.to(torch.bfloat16)
    b0 = len(kw[main]) if isinstance(kw[main], (list, tuple)) else kw[main].shape[_bdim(main, lay)]
    return m, kw, main, b0, per_sample(kw, b0, lay), keep, lay


def sample_rows(out, lay):
    """The model's output with the batch in dim 0 (a list of per-sample tensors stacked)."""
    if lay.get("list_output"):
        o = out[0] if isinstance(out, tuple) else getattr(out, "sample", out)
        return torch.stack([t.float() for t in o])
    return first_tensor(out).float()


def torch_verdicts(entry, batches, island_pat):
    """{configuration name: (bitwise, n_diff, numel)} of PyTorch's own forward."""
    m, kw, main, b0, names, keep, lay = prepared(entry, island_pat)

    def run(k):
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            return sample_rows(m(**k), lay)

    ref = run(alone(kw, names, b0, lay=lay))[0]
    out = {}
    again = run(alone(kw, names, b0, lay=lay))[0]  # the same forward twice: is PyTorch deterministic here at all?
    out["repeat"] = (bool(torch.equal(again, ref)), int((again != ref).sum()), again.numel())
    if keep:  # the island in bf16 too: does PyTorch's output change? (what zoo_replay's bisect must say)
        saved = {n: p.data for n, p in m.named_parameters() if n in keep}
        with torch.no_grad():
            for n, p in m.named_parameters():
                if n in keep:
                    p.data = p.data.to(torch.bfloat16)
        o = run(alone(kw, names, b0, lay=lay))[0]
        for n, p in m.named_parameters():
            if n in keep:
                p.data = saved[n]
        out["island"] = (bool(torch.equal(o, ref)), int((o != ref).sum()), o.numel())
    for b in batches:
        if b == 1:
            continue
        for pos in (0, b - 1):
            o = run(rows_for(kw, names, b0, b, pos, main, 1234 + b, lay))[pos]
            nd = int((o != ref).sum())
            out["batch %d, position %d" % (b, pos)] = (nd == 0, nd, o.numel())
            if nd and pos == 0:  # PyTorch's own first module whose row 0 changes at this batch
                out["first_module batch %d" % b] = first_divergent_module(
                    m, run, alone(kw, names, b0, lay=lay), rows_for(kw, names, b0, b, 0, main, 1234 + b, lay))
    if any(ROLE_OF_KWARG.get(k) == "cond" for k in names):
        o = run(cfg_pair(kw, names, b0, lay))
        ref_u = run(alone(kw, names, b0, zero_cond=True, lay=lay))[0]
        for name, got, want in (("cfg joined, conditional branch", o[0], ref),
                                ("cfg joined, unconditional branch", o[1], ref_u)):
            nd = int((got != want).sum())
            out[name] = (nd == 0, nd, got.numel())
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rec", required=True)
    ap.add_argument("--drift", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=None)
    ap.add_argument("--batches", default="1,2,4,8")
    ap.add_argument("--budget", type=float, default=240)
    ap.add_argument("--jobs", type=int, default=1, help="models run in this many chains of workers at once")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--shard", default="0/1", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if not a.worker:
        return parent(a)
    t_end = time.time() + a.budget
    batches = [int(x) for x in a.batches.split(",")]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    entries = {e["tag"].replace(":", "_"): e for e in zoo_models.zoo()}
    want = set(a.models.split(",")) if a.models else None
    rows, n = [], {"models": 0, "configs": 0, "match": 0, "torch_dependent": 0}
    done = set()
    part = os.path.join(a.out, "zoo_invariance.part.jsonl")
    if os.path.exists(part):
        done = {json.loads(x)["model"] for x in open(part) if x.strip()}
    shard, shards = (int(x) for x in a.shard.split("/"))
    for i, tag in enumerate(sorted(os.listdir(a.rec))):
        if tag in done or i % shards != shard:
            continue
        tr = os.path.join(a.rec, tag, "trainer.h5")
        info_p = os.path.join(a.rec, tag, "info.json")
        if (want and tag not in want) or not os.path.exists(tr) or tag not in entries:
            continue
        info = json.load(open(info_p)) if os.path.exists(info_p) else {}
        if not info.get("captured"):
            continue
        if time.time() > t_end:
            _append(part, {"model": tag, "error": "not run: the time budget ran out"})
            continue
        n["models"] += 1
        row = {"model": tag}
        why = LAYOUT.get(tag, {}).get("unbatched")
        if why:  # no batch to vary in torch: drift must refuse the trace (exit 2) rather than give a verdict
            p = subprocess.run([a.drift, "invariance", tr, "--device", "cuda", "--kernels", "torch", "--batch",
                                a.batches, "--json"], capture_output=True, text=True, timeout=120)
            row["not_applicable"] = why
            row["drift_refused"] = p.returncode == 2
            err = [x for x in p.stderr.splitlines() if x.startswith("drift") and "libraries:" not in x]
            row["drift_message"] = (err[-1] if err else p.stdout.strip()[-200:])[:240]
            rows.append(row)
            print("ZOO_INV " + json.dumps(row), flush=True)
            _append(part, row)
            continue
        try:
            tv = torch_verdicts(entries[tag], batches, info.get("island"))
        except Exception as e:  # noqa: BLE001
            row["error"] = "torch: %s: %s" % (type(e).__name__, " ".join(str(e).split())[:200])
            rows.append(row)
            print("ZOO_INV " + json.dumps(row), flush=True)
            _append(part, row)
            if "CUDA error" in str(e) or "AcceleratorError" in type(e).__name__:
                return 3  # a device-side assert poisons this process's CUDA context: the parent starts another
            continue
        try:
            p = subprocess.run([a.drift, "invariance", tr, "--device", "cuda", "--kernels", "torch", "--batch",
                                a.batches, "--cfg-batch", "joined", "--json"], capture_output=True, text=True,
                               timeout=120)
            dj = json.loads(p.stdout) if p.stdout.strip() else None
        except Exception as e:  # noqa: BLE001
            dj, p = None, type("P", (), {"stderr": "%s: %s" % (type(e).__name__, e)})()
        if dj is not None and "error" in dj:  # drift's JSON error document (exit 2)
            e = dj["error"]
            dj, p = None, type("P", (), {"stderr": "drift %s: %s: %s" % (e.get("command"), e.get("field"),
                                                                        e.get("message"))})()
        if dj is None:
            err = [x for x in p.stderr.splitlines() if x.startswith("drift") and "libraries:" not in x]
            msg = err[-1] if err else p.stderr.strip()[-400:]
            # the reason comes last in drift's messages (file, graph, node, then why): keep both ends
            row["error"] = "drift: " + (msg if len(msg) <= 600 else msg[:200] + " ... " + msg[-400:])
            tv.pop("repeat", None)
            for k in [k for k in tv if k.startswith("first_module")]:
                tv.pop(k)
            row["torch"] = {k: v[1] for k, v in tv.items()}
            if "island" in tv:
                row["torch_island_changes_output"] = not tv["island"][0]
            rows.append(row)
            print("ZOO_INV " + json.dumps(row), flush=True)
            _append(part, row)
            continue
        dc = {c["name"]: c for c in dj.get("configurations", [])}
        row["configs"] = []
        for k in [k for k in tv if k.startswith("first_module")]:
            row["torch_" + k.replace(" ", "_")] = tv.pop(k)
        rep = tv.pop("repeat", None)
        if rep is not None:
            row["torch_deterministic"] = rep[0]
        isl = tv.pop("island", None)
        if isl is not None:  # PyTorch's answer to the zoo's bisect: the output without the island
            row["torch_island_changes_output"] = not isl[0]
            row["torch_island_n_diff"] = isl[1]
        for name, (tb, tnd, numel) in tv.items():
            c = dc.get(name)
            d_out_same = None if c is None else (c.get("output_n_diff", 0) == 0)
            match = c is not None and d_out_same == tb
            n["configs"] += 1
            n["match"] += match
            n["torch_dependent"] += (not tb)
            fd = (c or {}).get("first_divergent_node")
            row["configs"].append({"name": name, "torch_bitwise": tb, "torch_n_diff": tnd, "numel": numel,
                                   "drift_output_bitwise": d_out_same,
                                   "drift_n_diff": None if c is None else c.get("output_n_diff"),
                                   "drift_first_node": fd, "match": match})
        rows.append(row)
        print("ZOO_INV " + json.dumps(row, default=str), flush=True)
        _append(part, row)
    return 0


def _append(path, row):
    with open(path, "a") as f:
        f.write(json.dumps(row, default=str) + "\n")


def parent(a):
    """Runs the models in worker processes (one after another: a device-side assert in one
    model's PyTorch forward ends its worker, the next worker goes on after it), in --jobs
    chains at once (model i in chain i % jobs; the verdicts compare bits within one process,
    so sharing the GPU changes none), then writes the table from their rows (one line each,
    appended whole to one file)."""
    t_end = time.time() + a.budget
    part = os.path.join(a.out, "zoo_invariance.part.jsonl")
    if os.path.exists(part):
        os.remove(part)
    args = [sys.executable, os.path.abspath(__file__), "--rec", a.rec, "--drift", a.drift, "--out", a.out,
            "--batches", a.batches, "--worker"] + (["--models", a.models] if a.models else [])
    jobs = max(1, a.jobs)

    def chain(k):
        for _ in range(40):
            left = t_end - time.time()
            if left < 10:
                break
            rc = subprocess.call(args + ["--budget", str(int(left)), "--shard", "%d/%d" % (k, jobs)])
            if rc != 3:
                break

    threads = [threading.Thread(target=chain, args=(k,)) for k in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = [json.loads(x) for x in open(part)] if os.path.exists(part) else []
    rows.sort(key=lambda r: r["model"])
    if os.path.exists(part):
        os.remove(part)  # the table and the jsonl below hold it (files under $OUT are counted)
    n = {"models": len(rows), "configs": 0, "match": 0, "torch_dependent": 0,
         "unbatched": sum("not_applicable" in r for r in rows),
         "unbatched_refused": sum(bool(r.get("drift_refused")) for r in rows),
         "errors": sum("error" in r for r in rows)}
    for r in rows:
        for c in r.get("configs", []):
            n["configs"] += 1
            n["match"] += c["match"]
            n["torch_dependent"] += (not c["torch_bitwise"])
    with open(os.path.join(a.out, "zoo_invariance.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r, default=str) + "\n")
    with open(os.path.join(a.out, "zoo_invariance.md"), "w") as f:
        f.write("| model | configuration | torch: sample 0 | drift --kernels torch | first divergent node (drift) "
                "| match |\n|---|---|---|---|---|---|\n")
        for r in rows:
            if "not_applicable" in r:
                f.write("| %s | | no batch: %s | %s | %s | %s |\n" % (
                    r["model"], r["not_applicable"], "refused" if r["drift_refused"] else "not refused",
                    r.get("drift_message", "").replace("|", "/"), "yes" if r["drift_refused"] else "no"))
                continue
            if "error" in r:
                f.write("| %s | | | | %s | no |\n" % (r["model"], r["error"].replace("|", "/")))
                continue
            for c in r["configs"]:
                tv = "bitwise" if c["torch_bitwise"] else "%d of %d differ" % (c["torch_n_diff"], c["numel"])
                fm = r.get("torch_first_module_batch_%s" % c["name"].split(",")[0].split(" ")[-1])
                if fm and not c["torch_bitwise"] and c["name"].endswith("position 0"):
                    tv += " (first module: %s)" % fm
                dv = ("not run" if c["drift_output_bitwise"] is None else "bitwise" if c["drift_output_bitwise"]
                      else "%s of %d differ" % (c["drift_n_diff"], c["numel"]))
                fd = c["drift_first_node"]
                fd = fd if isinstance(fd, str) else json.dumps(fd, default=str) if fd else ""
                f.write("| %s | %s | %s | %s | %s | %s |\n" % (r["model"], c["name"], tv, dv, fd.replace("|", "/"),
                                                               "yes" if c["match"] else "no"))
    print("zoo invariance: %(models)d models, %(configs)d configurations, %(match)d verdicts match, "
          "%(torch_dependent)d batch-dependent in torch; %(errors)d models error; %(unbatched)d without a batch "
          "(%(unbatched_refused)d refused by drift)" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
