"""Issue 20 on the GPU machine: a real diffusers WanTransformer3DModel
(Wan2.1-1.3B widths, 4 blocks, 5x32x32 latent = 1280 tokens, seeded
weights), recorded with drift_recorder as a wan2.2 family trace, and the
batch configurations of `drift invariance` run in PyTorch on the same inputs.

    python3 invariance_torch.py --out DIR [--batches 1,2,4,8] [--samples 8] [--captured]

--captured (issue 33): the trace holds the model's torch.export graph
(capture_graph, family "graph", every per-sample input through rec.inputs)
instead of naming the wan2.2 family, so `drift invariance` re-batches the
captured program; PyTorch's sites are then every module's output (drift's
sites of a captured graph), in completion order.

writes DIR/wan.h5 (one step: a batch of `samples` distinct samples, their
batch composition, the fp32 masters), DIR/plan.json, and
DIR/torch_verdicts.json: per configuration (named exactly as drift names
them) whether sample 0's every recorded module output is bitwise equal to
the batch-1 forward, the first one that is not (execution order), every
divergent one, and the output's element count that differs.

The layout is drift's (replay/drive/invariance.c): batch B with the sample
at position 0 and at B-1, the other rows the other recorded samples in
order, cycled; the CFG pair is [sample, sample with zero text embeddings].
The forward is the plan's: parameters bf16 except *.norm2.* (fp32), as
FSDP2 mixed precision gathers them, under bf16 autocast; inputs fp32.
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "recorder", "python"))
sys.path.insert(0, HERE)
from drift_recorder import Recorder  # noqa: E402
from capture_models import build, seed_params  # noqa: E402

PLAN = {"name": "wan_invariance", "fsdp_master_dtype": "fp32", "fsdp_reduce_dtype": "fp32",
        "diffusion_forward_dtype": "bf16", "sglang_dit_precision": "bf16",
        "input_dtype_policy": {"latents": None, "cond": None, "timestep": None},
        "param_dtype_patterns": [["*.norm2.*", "fp32"]]}


def family_spec(m, text_len, frames, height, width, batch):
    c = m.config
    dim = c.num_attention_heads * c.attention_head_dim
    p = c.patch_size
    return (f"wan2.2:layers={c.num_layers},dim={dim},heads={c.num_attention_heads},ffn_dim={c.ffn_dim},"
            f"in_channels={c.in_channels},out_channels={c.out_channels},text_dim={c.text_dim},text_len={text_len},"
            f"freq_dim={c.freq_dim},patch={p[0]}x{p[1]}x{p[2]},frames={frames},height={height},width={width},"
            f"batch={batch},eps={c.eps:g},rope_theta=10000")


def site_modules(m):
    """drift's recorded module sites of the wan2.2 family, in its order."""
    names = ["patch_embedding", "condition_embedder.time_embedder", "condition_embedder.time_proj",
             "condition_embedder.text_embedder"]
    for i in range(m.config.num_layers):
        names += [f"blocks.{i}.{k}" for k in ("norm1", "attn1", "norm2", "attn2", "norm3", "ffn")] + [f"blocks.{i}"]
    return names + ["norm_out", "proj_out"]


def layout(B, pos, sample, rec_batch):
    """drift's rows for batch B with the sample at pos (invariance.c layout())."""
    rows, k = [], 0
    for p in range(B):
        if p == pos:
            rows.append(sample)
            continue
        j = k % (rec_batch - 1)
        rows.append(j + 1 if j >= sample else j)
        k += 1
    return rows


def bits(t):
    t = t.detach().float().contiguous()
    return t.view(torch.int32)


class Sites:
    """Forward hooks keeping the sample's row of every site module's output."""

    def __init__(self, model, names):
        self.names, self.rows, self.order, self.pos, self.B = names, {}, [], 0, 1
        mods = dict(model.named_modules())
        self.handles = [mods[n].register_forward_hook(self._hook(n)) for n in names if n in mods]
        self.missing = [n for n in names if n not in mods]

    def _hook(self, name):
        def f(mod, args, out):
            o = out[0] if isinstance(out, (tuple, list)) else out
            if not torch.is_tensor(o):
                return
            if o.dim() >= 1 and o.shape[0] == self.B:
                o = o[self.pos]
            elif o.dim() >= 1 and o.shape[0] == 1:  # no batch dim (rope tables): the same at every batch
                o = o[0]
            self.rows[name] = bits(o).clone()
            self.order.append(name)
        return f

    def start(self, B, pos):
        self.rows, self.order, self.B, self.pos = {}, [], B, pos


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--batches", default="1,2,4,8")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--captured", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    dev = "cuda"
    torch.manual_seed(0)
    m, kw = build("wan", True)
    seed_params(m, 7)
    m = m.to(dev).float().eval()
    for p in m.parameters():
        p.requires_grad_(False)
    N = a.samples
    _, C, F, H, W = kw["hidden_states"].shape
    L, D = kw["encoder_hidden_states"].shape[1:]
    g = torch.Generator("cpu").manual_seed(11)
    lat = torch.randn(N, C, F, H, W, generator=g).to(dev)
    cond = torch.randn(N, L, D, generator=g).to(dev)
    ts = torch.full((N,), 500.0, device=dev)

    # ---- the recording: fp32 masters, the inputs of one step, its batch composition
    with open(os.path.join(a.out, "plan.json"), "w") as f:
        json.dump(PLAN, f)
    spec = "graph" if a.captured else family_spec(m, L, F, H, W, N)
    rec = Recorder(os.path.join(a.out, "wan.h5"), side="trainer", run_id="invariance", family=spec, plan=PLAN,
                   options={"policy": "block", "block_timeout_ms": 30000, "close_timeout_ms": 120000})
    n_params = rec.record_params(m)
    kwargs = {"hidden_states": lat, "timestep": ts, "encoder_hidden_states": cond, "return_dict": False}
    if a.captured:
        g = rec.capture_graph(m, kwargs)
        if g is None:
            raise RuntimeError("capture_graph failed (see the trace's notes / stderr)")
        print(f"captured: {len(g['nodes'])} nodes, mode {g['capture']['mode']}", flush=True)
    # the plan's forward dtypes, as FSDP2 mixed precision gathers them
    for n, p in m.named_parameters():
        if ".norm2." not in n:
            p.data = p.data.to(torch.bfloat16)
    with rec.step(0), torch.no_grad():
        if a.captured:
            rec.inputs(kwargs)
        else:
            rec.input("latents", lat, lat)
            rec.input("cond", cond, cond)
            rec.input("timestep", ts, ts)
        rec.batch(list(range(N)), cfg="none")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = m(hidden_states=lat, timestep=ts, encoder_hidden_states=cond, return_dict=False)[0]
        rec.output("noise_pred", out)
    rec.flush(60000)
    rec.close()
    print(f"recorded {spec}: {n_params} params, {N} samples", flush=True)

    # ---- the configurations in PyTorch
    names = [n for n, _ in m.named_modules() if n] if a.captured else site_modules(m)
    hooks = Sites(m, names)
    if hooks.missing:
        print("WARNING: modules not found:", hooks.missing, flush=True)

    def run(rows_lat, rows_cond, B, pos):
        hooks.start(B, pos)
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            o = m(hidden_states=rows_lat, timestep=torch.full((B,), 500.0, device=dev), encoder_hidden_states=rows_cond,
                  return_dict=False)[0]
        torch.cuda.synchronize()
        return dict(hooks.rows), list(hooks.order), bits(o[pos]).clone()

    sample = 0
    zero = torch.zeros_like(cond[:1])
    ref_sites, ref_order, ref_out = run(lat[:1], cond[:1], 1, 0)
    unc_sites, _, unc_out = run(lat[:1], zero, 1, 0)
    confs = []
    for B in [int(x) for x in a.batches.split(",")]:
        if B == 1:
            continue
        for pos in (0, B - 1):
            rows = layout(B, pos, sample, N)
            confs.append((f"batch {B}, position {pos}", lat[rows], cond[rows], B, pos, False))
    pair_lat = torch.cat([lat[:1], lat[:1]])
    pair_cond = torch.cat([cond[:1], zero])
    confs.append(("cfg joined, conditional branch", pair_lat, pair_cond, 2, 0, False))
    confs.append(("cfg joined, unconditional branch", pair_lat, pair_cond, 2, 1, True))
    verdicts = []
    for name, xl, xc, B, pos, unc in confs:
        sites, order, o = run(xl, xc, B, pos)
        rs, ro = (unc_sites, unc_out) if unc else (ref_sites, ref_out)
        div = [n for n in order if n in rs and not torch.equal(sites[n], rs[n])]
        n_out = int((o != ro).sum().item())
        v = {"name": name, "batch": B, "position": pos, "bitwise": not div and n_out == 0,
             "first_site": (div[0] + ":out") if div else None, "divergent_sites": [d + ":out" for d in div],
             "output_n_diff": n_out, "output_numel": o.numel()}
        verdicts.append(v)
        print(f"torch {name}: {'bitwise' if v['bitwise'] else 'DIFFERS'}; first {v['first_site']}; "
              f"output {n_out}/{o.numel()} elements differ", flush=True)
    info = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "family": spec,
            "site_order": [n + ":out" for n in ref_order], "configurations": verdicts}
    with open(os.path.join(a.out, "torch_verdicts.json"), "w") as f:
        json.dump(info, f, indent=1)


if __name__ == "__main__":
    main()
