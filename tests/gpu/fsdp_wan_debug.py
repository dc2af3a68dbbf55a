"""A frozen-weight FSDP2 debug run of a Wan-like DiT, recorded with drift_recorder.

Run by tests/gpu/recorder_fsdp.sh (torchrun --nproc_per_node=2), or alone
(--no-fsdp: one process, no torch.distributed; for the disk-full trial).

The model is diffusers' WanTransformer3DModel reduced to what drift's
wan2.2 family replays (replay/models/wan_graph.c), as nn.Modules with the
diffusers parameter names, the same op order and the same explicit casts:
patch embedding as patchify + GEMM + a separate bias add, FP32LayerNorm,
RMSNorm on q/k across heads, RoPE from fp32 per-token tables (recorded as
buffers), SDPA, GELU-tanh FFN, fp32 modulation. Each step:
  * the trainer forward (FSDP2: fully_shard per block and per norm2 with an
    fp32 policy, then the root; bf16 param_dtype, fp32 reduce_dtype; bf16
    autocast) is recorded: masters once (local shards with offsets), the
    gathered dtypes, boundary inputs pre/post cast, module outputs, the
    gathered values of two parameters, output:noise_pred;
  * a second forward of an all-bf16 copy stands in for the rollout: its
    output is recorded as rollout:model_output and compared live
    (rec.compare -> /metrics), an SDE step gives sde:x_next, logprob:old/new
    and the per-step log-prob metrics;
  * the same metrics computed independently here go to --metrics-json.
"""
import argparse
import copy
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "recorder", "python"))
from drift_recorder import Recorder  # noqa: E402

CFG = dict(layers=2, dim=256, heads=2, ffn_dim=1024, in_channels=16, out_channels=16, text_dim=256, text_len=32,
           freq_dim=256, patch=(1, 2, 2), frames=1, height=32, width=32, batch=1, eps=1e-6, rope_theta=10000.0)


def family_spec(c):
    return ("wan2.2:layers={layers},dim={dim},heads={heads},ffn_dim={ffn_dim},in_channels={in_channels},"
            "out_channels={out_channels},text_dim={text_dim},text_len={text_len},freq_dim={freq_dim},"
            "patch={p0}x{p1}x{p2},frames={frames},height={height},width={width},batch={batch},eps={eps},"
            "rope_theta={rope_theta:g}").format(p0=c["patch"][0], p1=c["patch"][1], p2=c["patch"][2], **c)


TRAINER_PLAN = {"name": "wan2_2_trainer", "fsdp_master_dtype": "fp32", "fsdp_reduce_dtype": "fp32",
                "diffusion_forward_dtype": "bf16", "sglang_dit_precision": "bf16",
                "input_dtype_policy": {"latents": None, "cond": None, "timestep": None},
                "param_dtype_patterns": [["*.norm2.*", "fp32"]], "buffer_provenance": {"rope": "recorded"}}


# ---------------------------------------------------------------- RoPE tables
def rope_tables(c):
    """[L, Dh] fp32 cos/sin per token, token order (f, h, w), built in fp64 on
    the CPU as diffusers' WanRotaryPosEmbed does (replay/exec/params_init.c)."""
    Dh = c["dim"] // c["heads"]
    hw = 2 * (Dh // 6)
    td = Dh - 2 * hw
    s1 = Dh // 3
    s0 = Dh - 2 * s1
    Fp, Hp, Wp = c["frames"] // c["patch"][0], c["height"] // c["patch"][1], c["width"] // c["patch"][2]
    col = torch.arange(Dh)
    d = torch.where(col < td, td, hw).double()
    cc = torch.where(col < td, col, torch.where(col < td + hw, col - td, col - td - hw))
    j = (cc // 2).double()
    freq = 1.0 / (c["rope_theta"] ** ((2 * j) / d))
    f, h, w = torch.meshgrid(torch.arange(Fp), torch.arange(Hp), torch.arange(Wp), indexing="ij")
    f, h, w = f.reshape(-1, 1), h.reshape(-1, 1), w.reshape(-1, 1)
    pos = torch.where(col < s0, f, torch.where(col < s0 + s1, h, w)).double()
    ang = pos * freq
    return ang.cos().float(), ang.sin().float()


def apply_rotary_emb(x, cos, sin):
    # diffusers: x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1); out[..., 0::2] = x1*cos - x2*sin; ...
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    c = cos[None, :, None, 0::2]
    s = sin[None, :, None, 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * c - x2 * s
    out[..., 1::2] = x1 * s + x2 * c
    return out.type_as(x)


# ---------------------------------------------------------------- modules
class FP32LayerNorm(nn.LayerNorm):
    def forward(self, x):
        od = x.dtype
        return F.layer_norm(x.float(), self.normalized_shape, self.weight.float() if self.weight is not None else None,
                            self.bias.float() if self.bias is not None else None, self.eps).to(od)


class PatchEmbedding(nn.Module):
    """Conv3d(kernel = stride = patch) parameters; computed as drift models
    cuDNN's path: patchify, GEMM, then a separate bias add (two roundings).
    Returns the Conv3d layout [B, dim, F', H', W'] a hook sees."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.weight = nn.Parameter(torch.empty(c["dim"], c["in_channels"], *c["patch"]))
        self.bias = nn.Parameter(torch.empty(c["dim"]))

    def forward(self, x):
        c = self.c
        B, C, Fr, H, W = x.shape
        pf, ph, pw = c["patch"]
        Fp, Hp, Wp = Fr // pf, H // ph, W // pw
        p = x.reshape(B, C, Fp, pf, Hp, ph, Wp, pw).permute(0, 2, 4, 6, 1, 3, 5, 7).reshape(B, Fp * Hp * Wp, -1)
        y = F.linear(p, self.weight.reshape(self.weight.shape[0], -1))
        y = y + self.bias
        return y.transpose(1, 2).reshape(B, -1, Fp, Hp, Wp)


class TimeEmbedding(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.linear_1 = nn.Linear(i, o)
        self.act = nn.SiLU()
        self.linear_2 = nn.Linear(o, o)

    def forward(self, x):
        return self.linear_2(self.act(self.linear_1(x)))


class TextProjection(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.linear_1 = nn.Linear(i, o)
        self.act_1 = nn.GELU(approximate="tanh")
        self.linear_2 = nn.Linear(o, o)

    def forward(self, x):
        return self.linear_2(self.act_1(self.linear_1(x)))


class ConditionEmbedder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.freq_dim = c["freq_dim"]
        self.time_embedder = TimeEmbedding(c["freq_dim"], c["dim"])
        self.act_fn = nn.SiLU()
        self.time_proj = nn.Linear(c["dim"], 6 * c["dim"])
        self.text_embedder = TextProjection(c["text_dim"], c["dim"])

    def forward(self, timestep, enc):
        half = self.freq_dim // 2  # Timesteps(freq_dim, flip_sin_to_cos=True, downscale_freq_shift=0)
        exponent = -math.log(10000) * torch.arange(0, half, dtype=torch.float32, device=timestep.device)
        emb = torch.exp(exponent / half)
        emb = timestep[:, None].float() * emb[None, :]
        t = torch.cat([torch.cos(emb), torch.sin(emb)], dim=-1)
        ted = next(iter(self.time_embedder.parameters())).dtype
        if t.dtype != ted:
            t = t.to(ted)
        temb = self.time_embedder(t).type_as(enc)
        tproj = self.time_proj(self.act_fn(temb))
        return temb, tproj, self.text_embedder(enc)


class Attention(nn.Module):
    def __init__(self, dim, heads, eps):
        super().__init__()
        self.heads = heads
        self.to_q, self.to_k, self.to_v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.to_out = nn.ModuleList([nn.Linear(dim, dim), nn.Dropout(0.0)])
        self.norm_q = nn.RMSNorm(dim, eps=eps, elementwise_affine=True)
        self.norm_k = nn.RMSNorm(dim, eps=eps, elementwise_affine=True)

    def forward(self, x, ctx=None, rope=None):
        ctx = x if ctx is None else ctx
        q, k, v = self.to_q(x), self.to_k(ctx), self.to_v(ctx)
        q, k = self.norm_q(q), self.norm_k(k)
        q, k, v = (t.unflatten(2, (self.heads, -1)) for t in (q, k, v))
        if rope is not None:
            q = apply_rotary_emb(q, *rope)
            k = apply_rotary_emb(k, *rope)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        o = o.transpose(1, 2).flatten(2, 3).type_as(q)
        return self.to_out[1](self.to_out[0](o))


class GELUProj(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.proj = nn.Linear(i, o)

    def forward(self, x):
        return F.gelu(self.proj(x), approximate="tanh")


class FeedForward(nn.Module):
    def __init__(self, dim, ffn):
        super().__init__()
        self.net = nn.ModuleList([GELUProj(dim, ffn), nn.Dropout(0.0), nn.Linear(ffn, dim)])

    def forward(self, x):
        for m in self.net:
            x = m(x)
        return x


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, e = c["dim"], c["eps"]
        self.norm1 = FP32LayerNorm(d, e, elementwise_affine=False)
        self.attn1 = Attention(d, c["heads"], e)
        self.attn2 = Attention(d, c["heads"], e)
        self.norm2 = FP32LayerNorm(d, e, elementwise_affine=True)
        self.ffn = FeedForward(d, c["ffn_dim"])
        self.norm3 = FP32LayerNorm(d, e, elementwise_affine=False)
        self.scale_shift_table = nn.Parameter(torch.randn(1, 6, d) / d ** 0.5)

    def forward(self, h, enc, temb, rope):
        sm, scm, gm, csm, cscm, cgm = (self.scale_shift_table + temb.float()).chunk(6, dim=1)
        n = (self.norm1(h.float()) * (1 + scm) + sm).type_as(h)
        a = self.attn1(n, None, rope)
        h = (h.float() + a * gm).type_as(h)
        n = self.norm2(h.float()).type_as(h)
        h = h + self.attn2(n, enc)
        n = (self.norm3(h.float()) * (1 + cscm) + csm).type_as(h)
        ff = self.ffn(n)
        return (h.float() + ff.float() * cgm).type_as(h)


class WanLike(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        d = c["dim"]
        P = c["patch"][0] * c["patch"][1] * c["patch"][2]
        self.patch_embedding = PatchEmbedding(c)
        self.condition_embedder = ConditionEmbedder(c)
        self.blocks = nn.ModuleList([Block(c) for _ in range(c["layers"])])
        self.norm_out = FP32LayerNorm(d, c["eps"], elementwise_affine=False)
        self.proj_out = nn.Linear(d, c["out_channels"] * P)
        self.scale_shift_table = nn.Parameter(torch.randn(1, 2, d) / d ** 0.5)
        cos, sin = rope_tables(c)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, latents, timestep, cond):
        c = self.c
        B = latents.shape[0]
        pf, ph, pw = c["patch"]
        Fp, Hp, Wp = c["frames"] // pf, c["height"] // ph, c["width"] // pw
        rope = (self.rope_cos, self.rope_sin)
        h = self.patch_embedding(latents).flatten(2).transpose(1, 2)
        temb, tproj, enc = self.condition_embedder(timestep, cond)
        tproj = tproj.unflatten(1, (6, -1))
        for b in self.blocks:
            h = b(h, enc, tproj, rope)
        shift, scale = (self.scale_shift_table + temb.unsqueeze(1)).chunk(2, dim=1)
        h = (self.norm_out(h.float()) * (1 + scale) + shift).type_as(h)
        h = self.proj_out(h)
        h = h.reshape(B, Fp, Hp, Wp, pf, ph, pw, -1).permute(0, 7, 1, 4, 2, 5, 3, 6)
        return h.flatten(6, 7).flatten(4, 5).flatten(2, 3)


def init_weights(model, seed):
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        with torch.no_grad():
            if name.endswith("scale_shift_table"):
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
            elif name.endswith("bias"):
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
            elif p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p[0].numel()))
            else:  # norm weights: non-trivial
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))


# ---------------------------------------------------------------- metrics (independent)
def ref_metrics(t, r):
    t64, r64 = t.double().reshape(t.shape[0], -1), r.double().reshape(r.shape[0], -1)
    d = (t64 - r64).abs()
    return {"mean_abs_diff": float(d.sum() / d.numel()), "max_abs_diff": float(d.max()),
            "rel_max": float((d.amax(1) / (r64.abs().amax(1) + 1e-30)).max()),
            "cosine": float((t64 * r64).sum() / torch.sqrt((t64 * t64).sum() * (r64 * r64).sum()))}


def sde_logprob(x, v, xn, sg, sgn, smax, eta):
    dt = sgn - sg
    std_t = math.sqrt(sg / (1 - (smax if sg == 1 else sg))) * eta
    mu = x * (1 + std_t ** 2 / (2 * sg) * dt) + v.float() * (1 + std_t ** 2 * (1 - sg) / (2 * sg)) * dt
    ns = std_t * math.sqrt(-dt)
    lp = -((xn - mu) ** 2) / (2 * ns ** 2) - math.log(ns) - math.log(math.sqrt(2 * math.pi))
    return lp.reshape(lp.shape[0], -1).mean(1), mu, ns


# ---------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="directory for traces and JSON")
    ap.add_argument("--trace", default="trace.rank{rank}.h5")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--no-fsdp", action="store_true", help="one process, no torch.distributed")
    ap.add_argument("--sleep", type=float, default=0.0, help="seconds between steps (kill trial)")
    ap.add_argument("--progress", default=None, help="file to write the last committed step to")
    ap.add_argument("--metrics-json", default=None)
    ap.add_argument("--run-id", default="fsdp-wan-debug")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()

    dist = not a.no_fsdp
    if dist:
        torch.distributed.init_process_group("nccl")
        rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    else:
        rank, world = 0, 1
        torch.cuda.set_device(0)
    dev = torch.device("cuda", torch.cuda.current_device())
    c = CFG
    torch.manual_seed(a.seed)
    model = WanLike(c)
    init_weights(model, a.seed)
    # the rollout: an all-bf16 copy (parameters bf16, RoPE tables fp32), unhooked
    rollout = copy.deepcopy(model).to(dev).to(torch.bfloat16)
    rollout.rope_cos.data = model.rope_cos.to(dev)
    rollout.rope_sin.data = model.rope_sin.to(dev)
    rollout.eval()
    model = model.to(dev)
    if dist:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        # cast_forward_inputs=False: the boundary casts belong to the plan's
        # input_dtype_policy (done explicitly below, recorded pre/post), and the
        # fp32 RoPE tables passed to every block must stay fp32 (DESIGN.md s4).
        bf16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False)
        fp32 = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32, cast_forward_inputs=False)
        for b in model.blocks:
            fully_shard(b.norm2, mp_policy=fp32)
            fully_shard(b, mp_policy=bf16)
        fully_shard(model, mp_policy=bf16)
    model.eval()

    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"pid.rank{rank}"), "w") as f:
        f.write(str(os.getpid()))
    with open(os.path.join(a.out, "trainer_plan.json"), "w") as f:
        json.dump(TRAINER_PLAN, f)
    rec = Recorder(os.path.join(a.out, a.trace), side="trainer", rank=rank, world_size=world, run_id=a.run_id,
                   family=family_spec(c), plan=TRAINER_PLAN, options={"staging_mb": 64, "close_timeout_ms": 20000})
    n_params = rec.record_params(model)
    if not dist:
        # no FSDP: the plan's dtypes by hand (bf16 copies except norm2), as FSDP would gather them
        for n, p in model.named_parameters():
            if ".norm2." not in n:
                p.data = p.data.to(torch.bfloat16)
    rec.add_buffer("rope.freqs_cos", model.rope_cos)
    rec.add_buffer("rope.freqs_sin", model.rope_sin)
    rec.watch(model, outputs=["patch_embedding", "condition_embedder.time_embedder", "condition_embedder.time_proj",
                              "condition_embedder.text_embedder", "blocks.?", "blocks.?.norm[123]", "blocks.?.attn[12]",
                              "blocks.?.ffn", "norm_out", "proj_out"],
              gathered=["blocks.0.norm2.weight", "blocks.0.attn1.to_q.weight"])
    print(f"rank {rank}: recording {rec.path}, {n_params} params (local shards)", flush=True)

    g = torch.Generator(device=dev).manual_seed(a.seed + 7)  # same data on every rank
    B, C = c["batch"], c["in_channels"]
    x = torch.randn(B, C, c["frames"], c["height"], c["width"], device=dev, generator=g)
    cond = torch.randn(B, c["text_len"], c["text_dim"], device=dev, generator=g)
    sig = torch.linspace(1.0, 0.0, a.steps + 2).tolist()
    smax, eta = sig[1], 0.7
    out_json = {"family": family_spec(c), "steps": [], "noise_pred_mean_abs": [], "metrics": [], "step_metrics": []}
    t0 = time.time()
    for step in range(a.steps):
        sg, sgn = sig[step], sig[step + 1]
        ts = torch.full((B,), sg * 1000.0, device=dev, dtype=torch.float32)
        with rec.step(step), torch.no_grad():
            # boundary inputs: wan2_2 passes them through (input_dtype_policy null)
            lat_in, ts_in, cond_in = x, ts, cond
            rec.input("latents", x, lat_in)
            rec.input("cond", cond, cond_in)
            rec.input("timestep", ts, ts_in)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = model(lat_in, ts_in, cond_in)
            rec.output("noise_pred", out)
            with rec.paused(), torch.autocast("cuda", dtype=torch.bfloat16):
                rout = rollout(x, ts, cond)
            rec.rollout("model_output", rout)
            m = rec.compare("output:noise_pred", out, rout)
            # SDE step from the rollout's output; log-probs of both sides
            noise = torch.randn(x.shape, device=dev, generator=g)
            _, mu, ns = sde_logprob(x, rout, x, sg, sgn, smax, eta)
            xn = mu + ns * noise
            lp_old, _, _ = sde_logprob(x, rout, xn, sg, sgn, smax, eta)
            lp_new, _, _ = sde_logprob(x, out, xn, sg, sgn, smax, eta)
            rec.sde("x_next", xn)
            rec.sde("params", torch.tensor([sg, sgn, smax, eta], dtype=torch.float32))
            rec.logprob("old", lp_old)
            rec.logprob("new", lp_new)
            sm = rec.step_metrics(lp_new, lp_old)
        rec.flush(20000)
        if a.progress and rank == int(os.environ.get("DRIFT_PROGRESS_RANK", rank)):
            with open(a.progress + ".tmp", "w") as f:
                f.write(str(rec.counters().get("last_committed", -1)))
            os.replace(a.progress + ".tmp", a.progress)
        d = (lp_new.double() - lp_old.double())
        out_json["steps"].append(step)
        out_json["noise_pred_mean_abs"].append(float(out.double().abs().mean()))
        out_json["metrics"].append(dict(step=step, site="output:noise_pred", **ref_metrics(out, rout)))
        out_json["step_metrics"].append(dict(step=step, log_prob_mean_abs_diff=float(d.abs().mean()),
                                             ratio_abs_minus_1=float(torch.expm1(d).abs().mean()),
                                             approx_kl=float(0.5 * (d * d).mean())))
        out_json.setdefault("recorder_metrics", []).append({k: m[k] for k in ("mean_abs_diff", "max_abs_diff",
                                                                             "rel_max", "cosine")} if m else None)
        out_json.setdefault("recorder_step_metrics", []).append(sm)
        x = xn
        if a.sleep:
            time.sleep(a.sleep)
    cnt = rec.counters()
    err = rec.error
    rec.close()
    print(f"rank {rank}: finished {a.steps} steps in {time.time() - t0:.1f} s; recorder "
          f"{'OFF: ' + err if err else 'on'}; committed {cnt.get('committed_steps')} steps", flush=True)
    if a.metrics_json and rank == 0:
        out_json["recorder_error"] = err
        with open(a.metrics_json, "w") as f:
            json.dump(out_json, f, indent=1)
    if dist:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
