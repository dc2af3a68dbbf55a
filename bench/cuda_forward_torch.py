"""PyTorch eager baseline for the wan2.2-shaped replay forward (CUDA issue).

A Wan-like DiT forward written after diffusers' WanTransformer3DModel (the
same op sequence and explicit casts drift's wan2.2 family replays: fp32
modulation, FP32LayerNorm, RMSNorm on q/k across heads, RoPE on q/k, SDPA,
cross-attention over the text, GELU-tanh FFN), under bf16 autocast with bf16
parameters and the norm2 fp32 island, at d=3072, 24 heads, L=4096 tokens,
8 blocks. Prints the median forward time over cuda events.

    python3 bench/cuda_forward_torch.py [--layers 8] [--tokens-hw 128] [--reps 20]
"""
import argparse
import math

import torch
import torch.nn.functional as F


def rope_tables(f, h, w, head_dim, theta=10000.0, device="cuda"):
    t_dim = head_dim - 4 * (head_dim // 6)
    hw_dim = 2 * (head_dim // 6)
    def axis(n, d):
        freqs = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64)[: d // 2] / d))
        ang = torch.outer(torch.arange(n, dtype=torch.float64), freqs)
        return ang.cos().repeat_interleave(2, 1).float(), ang.sin().repeat_interleave(2, 1).float()
    ct, st = axis(f, t_dim)
    ch, sh = axis(h, hw_dim)
    cw, sw = axis(w, hw_dim)
    cos = torch.cat([ct[:, None, None].expand(f, h, w, -1), ch[None, :, None].expand(f, h, w, -1),
                     cw[None, None, :].expand(f, h, w, -1)], -1).reshape(f * h * w, head_dim)
    sin = torch.cat([st[:, None, None].expand(f, h, w, -1), sh[None, :, None].expand(f, h, w, -1),
                     sw[None, None, :].expand(f, h, w, -1)], -1).reshape(f * h * w, head_dim)
    return cos.to(device), sin.to(device)


def apply_rope(x, cos, sin):
    x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
    c = cos[None, :, None, 0::2]
    s = sin[None, :, None, 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * c - x2 * s
    out[..., 1::2] = x1 * s + x2 * c
    return out.type_as(x)


def lin(out_f, in_f, dtype):
    w = (torch.randn(out_f, in_f, device="cuda") / math.sqrt(in_f)).to(dtype)
    b = (torch.randn(out_f, device="cuda") * 0.02).to(dtype)
    return w, b


class Attn:
    def __init__(self, dim, heads, dtype):
        self.heads = heads
        self.q, self.k, self.v, self.o = (lin(dim, dim, dtype) for _ in range(4))
        self.nq = (1 + 0.1 * torch.randn(dim, device="cuda")).to(dtype)
        self.nk = (1 + 0.1 * torch.randn(dim, device="cuda")).to(dtype)

    def __call__(self, x, ctx, rope):
        q = F.linear(x, *self.q)
        k = F.linear(ctx, *self.k)
        v = F.linear(ctx, *self.v)
        q = F.rms_norm(q, (q.shape[-1],), self.nq, 1e-6)
        k = F.rms_norm(k, (k.shape[-1],), self.nk, 1e-6)
        q, k, v = (t.unflatten(2, (self.heads, -1)) for t in (q, k, v))
        if rope is not None:
            q = apply_rope(q, *rope)
            k = apply_rope(k, *rope)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        o = o.transpose(1, 2).flatten(2, 3).type_as(q)
        return F.linear(o, *self.o)


class Block:
    def __init__(self, dim, heads, ffn, dtype):
        self.attn1 = Attn(dim, heads, dtype)
        self.attn2 = Attn(dim, heads, dtype)
        self.n2w = 1 + 0.1 * torch.randn(dim, device="cuda")          # fp32 island (*.norm2.*)
        self.n2b = 0.02 * torch.randn(dim, device="cuda")
        self.f1 = lin(ffn, dim, dtype)
        self.f2 = lin(dim, ffn, dtype)
        self.sst = (torch.randn(1, 6, dim, device="cuda") / math.sqrt(dim)).to(dtype)

    def __call__(self, h, enc, temb, rope):
        sm, scm, gm, csm, cscm, cgm = (self.sst + temb.float()).chunk(6, dim=1)
        n = (F.layer_norm(h.float(), (h.shape[-1],), eps=1e-6) * (1 + scm) + sm).type_as(h)
        a = self.attn1(n, n, rope)
        h = (h.float() + a * gm).type_as(h)
        n = F.layer_norm(h.float(), (h.shape[-1],), self.n2w.float(), self.n2b.float(), 1e-6).type_as(h)
        h = h + self.attn2(n, enc, None)
        n = (F.layer_norm(h.float(), (h.shape[-1],), eps=1e-6) * (1 + cscm) + csm).type_as(h)
        ff = F.linear(F.gelu(F.linear(n, *self.f1), approximate="tanh"), *self.f2)
        return (h.float() + ff.float() * cgm).type_as(h)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--dim", type=int, default=3072)
    ap.add_argument("--heads", type=int, default=24)
    ap.add_argument("--ffn", type=int, default=14336)
    ap.add_argument("--tokens-hw", type=int, default=128, help="latent height=width (patch 2): L = (hw/2)^2")
    ap.add_argument("--text-len", type=int, default=512)
    ap.add_argument("--text-dim", type=int, default=4096)
    ap.add_argument("--channels", type=int, default=48)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--profile", action="store_true", help="print torch.profiler's CUDA kernel table of one forward")
    a = ap.parse_args()
    torch.manual_seed(0)
    dt = torch.bfloat16
    hw = a.tokens_hw // 2
    L = hw * hw
    hd = a.dim // a.heads
    patch_w = lin(a.dim, a.channels * 4, dt)
    t1, t2, tp = lin(a.dim, 256, dt), lin(a.dim, a.dim, dt), lin(6 * a.dim, a.dim, dt)
    x1, x2 = lin(a.dim, a.text_dim, dt), lin(a.dim, a.dim, dt)
    blocks = [Block(a.dim, a.heads, a.ffn, dt) for _ in range(a.layers)]
    sst = (torch.randn(1, 2, a.dim, device="cuda") / math.sqrt(a.dim)).to(dt)
    po = lin(a.channels * 4, a.dim, dt)
    rope = rope_tables(1, hw, hw, hd)
    lat = torch.randn(1, a.channels, 1, a.tokens_hw, a.tokens_hw, device="cuda")
    cond = torch.randn(1, a.text_len, a.text_dim, device="cuda")
    ts = torch.tensor([700.0], device="cuda")

    def forward():
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            p = lat.reshape(1, a.channels, 1, hw, 2, hw, 2).permute(0, 2, 3, 5, 1, 4, 6).reshape(1, L, a.channels * 4)
            h = F.linear(p, *patch_w)
            half = 128
            freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32, device="cuda") / half)
            arg = ts[:, None].float() * freqs[None]
            sin = torch.cat([torch.cos(arg), torch.sin(arg)], -1).to(dt)
            temb = F.linear(F.silu(F.linear(sin, *t1)), *t2).type_as(cond)
            tproj = F.linear(F.silu(temb), *tp).unflatten(1, (6, -1))
            enc = F.linear(F.gelu(F.linear(cond, *x1), approximate="tanh"), *x2)
            for b in blocks:
                h = b(h, enc, tproj, rope)
            shift, scale = (sst + temb.unsqueeze(1)).chunk(2, dim=1)
            h = (F.layer_norm(h.float(), (a.dim,), eps=1e-6) * (1 + scale) + shift).type_as(h)
            return F.linear(h, *po)

    for _ in range(3):
        forward()
    torch.cuda.synchronize()
    times = []
    for _ in range(a.reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        forward()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    if a.profile:
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            forward()
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25))
    print(f"torch eager wan-like forward: layers={a.layers} dim={a.dim} heads={a.heads} L={L} ffn={a.ffn} "
          f"text={a.text_len}: median {times[len(times) // 2]:.3f} ms over {a.reps} reps")


if __name__ == "__main__":
    main()
