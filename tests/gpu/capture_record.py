"""Records diffusers DiTs with drift_recorder and a captured graph (issue 15).
GPU machine, torch 2.11, diffusers source on PYTHONPATH. Three modes, each
looping over models so that torch is imported once; one model failing never
stops the others (one "RESULT <tag> <mode> OK|FAIL ..." line each):

    python3 capture_record.py fixtures --out DIR [--models wan,qwen,ltx2,flux,sd3]
        CI fixtures: seeded weights, fp32 forward plan, 2 steps, every block
        output, torch's output as output:noise_pred; DIR/<tag>/fixture.h5
        (kept small: < 2 MB).
    torchrun --nproc_per_node=1 capture_record.py trainer --out DIR [--models ...,wan_1p3b]
        acceptance: a frozen-weight FSDP2 recording (fully_shard per block,
        an fp32 island with its own fully_shard, bf16 autocast), the graph
        captured from a meta-device copy (never gathered); DIR/<tag>/trainer.h5,
        trainer_plan.json, info.json (torch's own noise floor: the same forward
        with the middle latent moved by one bf16 ULP, as drift bisect does).
    python3 capture_record.py rollout --out DIR [--models ...]
        the all-bf16 rollout of the same weights and inputs, in its own
        process: DIR/<tag>/rollout.h5, rollout_plan.json.
"""
import argparse
import fnmatch
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
from capture_models import build, seed_params  # noqa: E402

STEPS = 2
RUN_ID = "capture-record"
# nothing may be dropped: replay needs every input of every step
REC_OPTS = {"policy": "block", "block_timeout_ms": 30000, "close_timeout_ms": 120000}
# fp32 island per model: the first pattern that names whole modules of it
ISLANDS = {"wan": ["*.norm2.*"], "wan_1p3b": ["*.norm2.*"],
           "qwen": ["time_text_embed.*", "*timestep_embedder*"], "flux": ["time_text_embed.*"],
           "sd3": ["time_text_embed.*"], "ltx2": ["*time_embed*", "*.norm2.*"]}


def plan(name, forward, patterns=()):
    return {"name": name, "fsdp_master_dtype": "fp32", "fsdp_reduce_dtype": "fp32",
            "diffusion_forward_dtype": forward, "sglang_dit_precision": "bf16" if forward == "bf16" else forward,
            "input_dtype_policy": {"latents": None, "cond": None, "timestep": None},
            "param_dtype_patterns": [list(p) for p in patterns]}


def make(tag, dev):
    big = tag.endswith("_1p3b")
    name = tag[:-len("_1p3b")] if big else tag
    torch.manual_seed(0)
    m, kw = build(name, big)
    if name == "sd3" and not big:
        # diffusers' test config has pos_embed_max_size=96: a 96x96 table (1.2 MB) for a
        # 32x32 latent; 32 keeps the fixture small and the graph the same
        from diffusers import SD3Transformer2DModel
        m = SD3Transformer2DModel.from_config({**dict(m.config), "pos_embed_max_size": 32})
    if name == "qwen" and not big:
        # diffusers' test config records 2.44 MB (its RoPE tables alone are 512 KB): one
        # block keeps the graph's ops and the fixture under 2 MB
        from diffusers import QwenImageTransformer2DModel
        m = QwenImageTransformer2DModel.from_config({**dict(m.config), "num_layers": 1})
    seed_params(m, 7)
    m = m.to(dev).float().eval()
    for p in m.parameters():
        p.requires_grad_(False)  # frozen weights
    return m, kw


def step_inputs(kw, step, dev):
    """The kwargs of step `step`: new latents (seeded), the timestep moved."""
    out = {}
    for k, v in kw.items():
        if isinstance(v, torch.Tensor):
            v = v.clone()
            if k == "hidden_states" and step:
                v = torch.randn(v.shape, generator=torch.Generator("cpu").manual_seed(100 + step), dtype=v.dtype)
            if k == "timestep" and step:  # 500 -> 400 (int or float), 1.0 -> 0.8 (Flux/Qwen scale)
                v = v - 100 * step if (not v.is_floating_point() or float(v.max()) > 10) else v * (1 - 0.2 * step)
            v = v.to(dev)
        out[k] = v
    return out


def block_names(m):
    return [n for n, _ in m.named_modules() if re.fullmatch(r"(\w*blocks)\.\d+", n)]


def watched(m, tag):
    """The modules whose outputs a trainer records: the blocks, or with
    WATCH=all every named module (not for the 1.3B-wide model: its trace would be GBs),
    or with WATCH_1P3B=REGEX (the 1.3B-wide model only) the blocks and the modules
    whose names match REGEX (e.g. 'blocks\\.0\\..*': locates the first divergent op there)."""
    if os.environ.get("WATCH") == "all" and not tag.endswith("_1p3b"):
        return [n for n, _ in m.named_modules() if n]
    rx = os.environ.get("WATCH_1P3B")
    if rx and tag.endswith("_1p3b"):
        return block_names(m) + [n for n, _ in m.named_modules() if n and re.fullmatch(rx, n)]
    return block_names(m)


def first_tensor(out):
    if isinstance(out, (tuple, list)):
        return out[0]
    return getattr(out, "sample", out)


def size_mb(path):
    return os.path.getsize(path) / 2 ** 20


def clean(cnt):
    """True when every step committed and no record was dropped, lost or rejected."""
    return cnt.get("committed_steps") == STEPS and not any(cnt.get(k) for k in ("dropped", "lost", "rejected"))


def cstr(cnt):
    return " [committed %s, dropped %s, lost %s, rejected %s]" % tuple(cnt.get(k) for k in (
        "committed_steps", "dropped", "lost", "rejected"))


def result(tag, mode, ok, msg):
    print("RESULT %s %s %s %s" % (tag, mode, "OK" if ok else "FAIL", msg), flush=True)


# ------------------------------------------------------------------ fixtures
def fixture(tag, out, dev):
    d = os.path.join(out, tag)
    os.makedirs(d, exist_ok=True)
    m, kw = make(tag, dev)
    p = plan("fp32_forward", "fp32")
    json.dump(p, open(os.path.join(d, "plan.json"), "w"))
    path = os.path.join(d, "fixture.h5")
    t0 = time.perf_counter()
    with Recorder(path, side="trainer", run_id=RUN_ID + "-" + tag, family="graph", plan=p, options=REC_OPTS) as rec:
        rec.record_params(m)
        # before watch(): the export runs the forward with no recorder hook on it
        g = rec.capture_graph(m, step_inputs(kw, 0, dev))
        if g is None:
            raise RuntimeError("capture_graph failed (see the note / stderr)")
        rec.watch(m, outputs=block_names(m))
        for s in range(STEPS):
            k = step_inputs(kw, s, dev)
            with rec.step(s), torch.no_grad():
                rec.inputs(k)
                rec.output("noise_pred", first_tensor(m(**k)).float())
        rec.flush(60000)  # counters of the committed steps
        cnt = rec.counters()
    mb = size_mb(path)
    ok = clean(cnt) and mb < 2.0
    result(tag, "fixtures", ok, "%s: %d nodes, export %.2f s (%s), %d steps, %.2f MB%s, %.1f s" % (
        path, len(g["nodes"]), g["capture"]["seconds"], g["capture"]["mode"], cnt.get("committed_steps", -1), mb,
        "" if mb < 2.0 else " (over 2 MB)", time.perf_counter() - t0) + cstr(cnt))


# ------------------------------------------------------------------ FSDP2 trainer
def island_modules(m, patterns):
    """(pattern, [module FQNs]) of the first pattern whose parameters are
    exactly the parameters of some whole modules."""
    names = [n for n, _ in m.named_parameters()]
    for pat in patterns:
        hit = [n for n in names if fnmatch.fnmatchcase(n, pat)]
        if not hit:
            continue
        chosen = []
        for mn, mod in sorted(m.named_modules(), key=lambda x: x[0].count(".") if x[0] else -1):
            if not mn or any(mn == c or mn.startswith(c + ".") for c in chosen):
                continue
            ps = [mn + "." + n for n, _ in mod.named_parameters()]
            if ps and all(fnmatch.fnmatchcase(x, pat) for x in ps):
                chosen.append(mn)
        covered = {mn + "." + n for mn in chosen for n, _ in m.get_submodule(mn).named_parameters()}
        if covered == set(hit):
            return pat, chosen
    raise RuntimeError("no fp32 island pattern of %s names whole modules" % patterns)


def noise_floor(m, k):
    """torch's chaos floor, as drift bisect measures its own: output mean |diff|
    when the middle element of the latents moves by one bf16 ULP (one fp32 ULP
    would mostly vanish in autocast's bf16 rounding)."""
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        a = first_tensor(m(**k)).float()
        k2 = dict(k)
        x = k["hidden_states"].clone()
        flat = x.view(-1)
        i = flat.numel() // 2
        v = float(flat[i])
        flat[i] = v + 2.0 ** (math.floor(math.log2(abs(v))) - 7)
        k2["hidden_states"] = x
        b = first_tensor(m(**k2)).float()
    return float((a - b).abs().mean()), float(a.abs().mean())


class ConvProbe:
    """PROBE_CONV=1: does the patch embedding's Conv3d inside the FSDP2 forward
    give the bits a standalone conv of the same operands gives (issue 16: the
    1.3B replay's first divergent site)? Keeps step 0's operands and output."""

    def __init__(self, m):
        self.got = None
        self.h = m.patch_embedding.register_forward_hook(self.hook)

    def hook(self, mod, args, out):
        if self.got is None:
            w, b = mod.weight, mod.bias
            self.got = (args[0].detach().clone(), w.detach().clone(), b.detach().clone(), out.detach().clone(),
                        {"x": (str(args[0].dtype), list(args[0].stride()), args[0].data_ptr() % 256),
                         "w": (str(w.dtype), list(w.stride()), w.data_ptr() % 256, type(w).__name__),
                         "b": (str(b.dtype), b.data_ptr() % 256), "stride": list(mod.stride),
                         "autocast": torch.is_autocast_enabled(), "benchmark": torch.backends.cudnn.benchmark,
                         "deterministic": torch.backends.cudnn.deterministic})
            self.ptrs = (args[0].data_ptr(), w.data_ptr())

    def report(self, tag):
        self.h.remove()
        if self.got is None:
            print("PROBE conv %s: the hook never ran" % tag, flush=True)
            return
        x, w, b, out, meta = self.got
        print("PROBE conv %s: operands %s out %s %s" % (tag, meta, str(out.dtype), list(out.shape)), flush=True)
        import torch.nn.functional as F
        xb = x.to(torch.bfloat16)
        wb = w.to(torch.bfloat16)

        def one(xv, wv, label):
            y = F.conv3d(xv, wv, None, stride=tuple(meta["stride"]))
            y.add_(b.to(y.dtype).reshape(1, -1, 1, 1, 1))
            n = int((y != out).sum())
            print("PROBE conv %s: standalone %s: %d of %d elements differ from the in-model output" % (
                tag, label, n, out.numel()), flush=True)

        with torch.no_grad():
            one(xb, wb, "fresh operands")
            for k in (1, 2, 4, 8):  # the weight at a byte offset of 2k (pointer alignment 2k)
                buf = torch.empty(wb.numel() + 64, dtype=wb.dtype, device=wb.device)
                wv = buf[k:k + wb.numel()].view_as(wb)
                wv.copy_(wb)
                one(xb, wv, "weight at alignment %d bytes" % (2 * k))
            for bi in range(xb.shape[0]):  # per sample, batch 1
                y = F.conv3d(xb[bi:bi + 1], wb, None, stride=tuple(meta["stride"]))
                y.add_(b.to(y.dtype).reshape(1, -1, 1, 1, 1))
                print("PROBE conv %s: sample %d alone: %d differ" % (tag, bi, int((y != out[bi:bi + 1]).sum())), flush=True)


def trainer(tag, out, dev):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    d = os.path.join(out, tag)
    os.makedirs(d, exist_ok=True)
    m, kw = make(tag, dev)
    pat, island = island_modules(m, ISLANDS.get(tag, ["*.norm2.*"]))
    p = plan("trainer_" + tag, "bf16", [(pat, "fp32")])
    json.dump(p, open(os.path.join(d, "trainer_plan.json"), "w"))
    # cast_forward_inputs=False: fp32 RoPE tables and inputs stay as the model passes them
    # (docs/recorder.md "Limits"); autocast does the bf16 compute
    bf16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False)
    fp32 = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32, cast_forward_inputs=False)
    for mn in island:
        fully_shard(m.get_submodule(mn), mp_policy=fp32)
    for mn in block_names(m):
        fully_shard(m.get_submodule(mn), mp_policy=bf16)
    fully_shard(m, mp_policy=bf16)
    path = os.path.join(d, "trainer.h5")
    t0 = time.perf_counter()
    floors = []
    with Recorder(path, side="trainer", run_id=RUN_ID + "-" + tag, family="graph", plan=p, options=REC_OPTS) as rec:
        rec.record_params(m)                              # this rank's shards
        g = rec.capture_graph(m, step_inputs(kw, 0, dev))  # sharded: a meta copy is exported
        # WATCH=all: every module's output (small models: locates the first divergent op)
        rec.watch(m, outputs=watched(m, tag))
        probe = ConvProbe(m) if os.environ.get("PROBE_CONV") == "1" and hasattr(m, "patch_embedding") else None
        for s in range(STEPS):
            k = step_inputs(kw, s, dev)
            with rec.step(s), torch.no_grad():
                rec.inputs(k)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    o = first_tensor(m(**k))
                rec.output("noise_pred", o)
            with rec.paused():
                floors.append(noise_floor(m, k))
        rec.flush(60000)  # counters of the committed steps
        cnt = rec.counters()
    if probe is not None:
        probe.report(tag)
    info = {"tag": tag, "island": pat, "island_modules": island, "steps": STEPS,
            "torch_floor_mean_abs_diff": [f[0] for f in floors], "noise_pred_mean_abs": [f[1] for f in floors],
            "capture": g.get("capture") if g else None, "nodes": len(g["nodes"]) if g else 0,
            "record_seconds": round(time.perf_counter() - t0, 2)}
    json.dump(info, open(os.path.join(d, "info.json"), "w"), indent=1)
    ok = g is not None and g["capture"]["mode"] in ("fake", "device", "meta") and clean(cnt)
    result(tag, "trainer", ok, "%s: island %s (%d modules), graph %s, torch floor %.3g, %.1f MB, %.1f s" % (
        path, pat, len(island), ("%d nodes, export %.2f s from a %s copy, autocast %s%s" % (
            info["nodes"], g["capture"]["seconds"], g["capture"]["mode"], g["capture"].get("autocast"),
            " (fell back: %s)" % g["capture"]["fallback"] if g["capture"].get("fallback") else "")) if g else "NOT captured",
        sum(info["torch_floor_mean_abs_diff"]) / STEPS, size_mb(path), info["record_seconds"]) + cstr(cnt))


# ------------------------------------------------------------------ rollout
def rollout(tag, out, dev):
    d = os.path.join(out, tag)
    os.makedirs(d, exist_ok=True)
    m, kw = make(tag, dev)
    p = plan("rollout_all_bf16", "bf16")
    json.dump(p, open(os.path.join(d, "rollout_plan.json"), "w"))
    path = os.path.join(d, "rollout.h5")
    with Recorder(path, side="rollout", run_id=RUN_ID + "-" + tag, family="graph", plan=p, options=REC_OPTS) as rec:
        rec.record_params(m)                                 # fp32 masters, as the trainer's
        g = rec.capture_graph(m, step_inputs(kw, 0, dev))    # unsharded fp32 model: exported itself
        for prm in m.parameters():
            prm.data = prm.data.to(torch.bfloat16)           # the engine's bf16 weights (buffers stay)
        rec.watch(m, outputs=block_names(m))
        for s in range(STEPS):
            k = step_inputs(kw, s, dev)
            with rec.step(s), torch.no_grad():
                rec.inputs(k)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    rec.output("noise_pred", first_tensor(m(**k)))
        rec.flush(60000)  # counters of the committed steps
        cnt = rec.counters()
    ok = g is not None and clean(cnt)
    result(tag, "rollout", ok, "%s: graph %s, %.1f MB" % (path, ("%d nodes (%s)" % (len(g["nodes"]),
                                                                                  g["capture"]["mode"])) if g else
                                                          "NOT captured", size_mb(path)) + cstr(cnt))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["fixtures", "trainer", "rollout"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default=None)
    a = ap.parse_args()
    default = "wan,qwen,ltx2,flux,sd3" + ("" if a.mode == "fixtures" else ",wan_1p3b")
    tags = [t for t in (a.models or default).split(",") if t]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if a.mode == "trainer":
        torch.distributed.init_process_group("nccl")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dev = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    fn = {"fixtures": fixture, "trainer": trainer, "rollout": rollout}[a.mode]
    for tag in tags:
        try:
            fn(tag, a.out, dev)
        except Exception as e:  # noqa: BLE001 - one model failing never stops the others
            result(tag, a.mode, False, "%s: %s" % (type(e).__name__, " ".join(str(e).split())[:400]))
            traceback.print_exc()
        torch.cuda.empty_cache()
    if a.mode == "trainer":
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
