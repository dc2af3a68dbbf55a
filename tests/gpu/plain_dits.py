"""Three DiTs written in plain PyTorch the way research code writes them (no
diffusers, no .config), for the zoo (issue 31): each must record under FSDP2
without capture_graph(factory=) and replay.

    dit     the original DiT: Conv2d patch embedding, a fixed 2-D sin-cos
            position table made with numpy, sinusoidal timestep MLP, class
            labels through nn.Embedding, adaLN-Zero blocks (chunk(6)),
            qkv attention with F.scaled_dot_product_attention, GELU-tanh MLP,
            learned sigma, unpatchify with einsum.
    mmdit   joint text/image attention: torch.nn.RMSNorm on q and k, RoPE as
            complex rotations (torch.polar, view_as_complex), SwiGLU, a text
            padding mask from lengths (a boolean SDPA mask), a pooled vector.
    video   a video DiT: reshape/permute patchify of a frame-padded video
            (F.pad), 3-D RoPE from torch.outer with rotate_half, GroupNorm on
            the input, a top-2 mixture-of-experts FFN routed per token with
            boolean selections (data-dependent shapes: torch.export cannot
            capture it), repeat_interleave of the time embedding over frames.

    model, kwargs = build(name)
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = ("dit", "mmdit", "video")


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


def timestep_embedding(t, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(0, half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden, freq=256):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(freq, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.freq = freq

    def forward(self, t):
        return self.mlp(timestep_embedding(t, self.freq))


def sincos_2d(dim, grid):
    """numpy position table, as DiT's get_2d_sincos_pos_embed."""
    gh, gw = np.meshgrid(np.arange(grid, dtype=np.float32), np.arange(grid, dtype=np.float32), indexing="xy")

    def one(d, pos):
        omega = 1.0 / 10000 ** (np.arange(d // 2, dtype=np.float64) / (d / 2.0))
        out = np.einsum("m,d->md", pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)

    return np.concatenate([one(dim // 2, gw), one(dim // 2, gh)], axis=1)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class DiTBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(approximate="tanh"), nn.Linear(dim * 4, dim))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))

    def forward(self, x, c):
        sm, scm, gm, sp, scp, gp = self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + gm.unsqueeze(1) * self.attn(modulate(self.norm1(x), sm, scm))
        return x + gp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), sp, scp))


class DiT(nn.Module):
    def __init__(self, size=16, patch=2, cin=4, dim=64, depth=2, heads=4, classes=10):
        super().__init__()
        self.patch, self.cin, self.cout = patch, cin, cin * 2
        self.x_embedder = nn.Conv2d(cin, dim, kernel_size=patch, stride=patch)
        self.t_embedder = TimestepEmbedder(dim)
        self.y_embedder = nn.Embedding(classes + 1, dim)
        n = (size // patch) ** 2
        self.register_buffer("pos_embed", torch.from_numpy(sincos_2d(dim, size // patch)).float().unsqueeze(0),
                             persistent=False)
        assert self.pos_embed.shape[1] == n
        self.blocks = nn.ModuleList([DiTBlock(dim, heads) for _ in range(depth)])
        self.norm_final = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.adaLN_final = nn.Sequential(nn.SiLU(), nn.Linear(dim, 2 * dim))
        self.linear = nn.Linear(dim, patch * patch * self.cout)

    def unpatchify(self, x):
        p, c = self.patch, self.cout
        h = w = int(x.shape[1] ** 0.5)
        x = x.reshape(x.shape[0], h, w, p, p, c)
        x = torch.einsum("nhwpqc->nchpwq", x)
        return x.reshape(x.shape[0], c, h * p, w * p)

    def forward(self, x, t, y):
        x = self.x_embedder(x).flatten(2).transpose(1, 2) + self.pos_embed
        c = self.t_embedder(t) + self.y_embedder(y)
        for block in self.blocks:
            x = block(x, c)
        shift, scale = self.adaLN_final(c).chunk(2, dim=1)
        x = self.linear(modulate(self.norm_final(x), shift, scale))
        return self.unpatchify(x)


# ---------------------------------------------------------------- mmdit
def rope_complex(pos, dim, theta=10000.0):
    freqs = 1.0 / theta ** (torch.arange(0, dim, 2, device=pos.device).float() / dim)
    angles = torch.outer(pos.float(), freqs)
    return torch.polar(torch.ones_like(angles), angles)


def apply_rope(x, f):
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * f).flatten(-2).type_as(x)


class JointBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.mod_x = nn.Linear(dim, 6 * dim)
        self.mod_c = nn.Linear(dim, 6 * dim)
        self.qkv_x = nn.Linear(dim, 3 * dim)
        self.qkv_c = nn.Linear(dim, 3 * dim)
        self.q_norm = nn.RMSNorm(dim // heads, eps=1e-6)
        self.k_norm = nn.RMSNorm(dim // heads, eps=1e-6)
        self.out_x = nn.Linear(dim, dim)
        self.out_c = nn.Linear(dim, dim)
        self.w1 = nn.Linear(dim, 2 * dim, bias=False)
        self.w3 = nn.Linear(dim, 2 * dim, bias=False)
        self.w2 = nn.Linear(2 * dim, dim, bias=False)
        self.ffc = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def heads_of(self, t):
        B, N, _ = t.shape
        return t.view(B, N, self.heads, -1).transpose(1, 2)

    def forward(self, x, c, vec, freqs, mask):
        ln = lambda t: F.layer_norm(t, t.shape[-1:], eps=1e-6)  # noqa: E731
        mx = self.mod_x(F.silu(vec)).unsqueeze(1).chunk(6, dim=-1)
        mc = self.mod_c(F.silu(vec)).unsqueeze(1).chunk(6, dim=-1)
        hx = ln(x) * (1 + mx[1]) + mx[0]
        hc = ln(c) * (1 + mc[1]) + mc[0]
        qx, kx, vx = [self.heads_of(t) for t in self.qkv_x(hx).chunk(3, dim=-1)]
        qc, kc, vc = [self.heads_of(t) for t in self.qkv_c(hc).chunk(3, dim=-1)]
        q = torch.cat([self.q_norm(qc), self.q_norm(qx)], dim=2)
        k = torch.cat([self.k_norm(kc), self.k_norm(kx)], dim=2)
        v = torch.cat([vc, vx], dim=2)
        q, k = apply_rope(q, freqs), apply_rope(k, freqs)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        o = o.transpose(1, 2).flatten(2)
        oc, ox = o[:, :c.shape[1]], o[:, c.shape[1]:]
        x = x + mx[2] * self.out_x(ox)
        c = c + mc[2] * self.out_c(oc)
        hx = ln(x) * (1 + mx[4]) + mx[3]
        x = x + mx[5] * self.w2(F.silu(self.w1(hx)) * self.w3(hx))
        c = c + mc[5] * self.ffc(ln(c) * (1 + mc[4]) + mc[3])
        return x, c


class MMDiT(nn.Module):
    def __init__(self, size=16, patch=2, cin=4, dim=64, depth=2, heads=4, text_dim=32, pooled_dim=32):
        super().__init__()
        self.patch, self.cin, self.heads = patch, cin, heads
        self.proj_in = nn.Linear(cin * patch * patch, dim)
        self.context_in = nn.Linear(text_dim, dim)
        self.time = TimestepEmbedder(dim)
        self.pooled = nn.Sequential(nn.Linear(pooled_dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.blocks = nn.ModuleList([JointBlock(dim, heads) for _ in range(depth)])
        self.norm_out = nn.LayerNorm(dim, elementwise_affine=False)
        self.final_mod = nn.Linear(dim, 2 * dim)
        self.proj_out = nn.Linear(dim, cin * patch * patch)

    def forward(self, x, t, context, pooled, context_lens):
        B, C, H, W = x.shape
        p = self.patch
        tokens = x.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5).reshape(B, -1, C * p * p)
        h = self.proj_in(tokens)
        c = self.context_in(context)
        vec = self.time(t) + self.pooled(pooled)
        L = c.shape[1] + h.shape[1]
        pos = torch.arange(L, device=x.device)
        freqs = rope_complex(pos, h.shape[-1] // self.heads)
        text_ok = torch.arange(c.shape[1], device=x.device)[None, :] < context_lens[:, None]
        mask = torch.cat([text_ok, torch.ones(B, h.shape[1], dtype=torch.bool, device=x.device)], dim=1)
        for b in self.blocks:
            h, c = b(h, c, vec, freqs, mask)
        shift, scale = self.final_mod(F.silu(vec)).chunk(2, dim=-1)
        h = self.proj_out(self.norm_out(h) * (1 + scale[:, None]) + shift[:, None])
        return h.reshape(B, H // p, W // p, C, p, p).permute(0, 3, 1, 4, 2, 5).reshape(B, C, H, W)


# ---------------------------------------------------------------- video
def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class MoEFFN(nn.Module):
    """Top-2 routing as research code writes it: a loop over experts with
    boolean token selections (shapes depend on the routing)."""

    def __init__(self, dim, experts=4, k=2):
        super().__init__()
        self.k = k
        self.gate = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList([nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(approximate="tanh"),
                                                    nn.Linear(2 * dim, dim)) for _ in range(experts)])

    def forward(self, x):
        B, N, D = x.shape
        flat = x.reshape(-1, D)
        probs = self.gate(flat).softmax(dim=-1, dtype=torch.float32)
        w, idx = probs.topk(self.k, dim=-1)
        w = (w / w.sum(dim=-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            sel = (idx == e)
            rows = sel.any(dim=-1).nonzero(as_tuple=True)[0]
            if rows.numel() == 0:
                continue
            we = (w * sel.to(w.dtype)).sum(dim=-1)[rows]
            out.index_add_(0, rows, (expert(flat[rows]) * we[:, None]).to(out.dtype))
        return out.reshape(B, N, D)


class VideoBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.moe = MoEFFN(dim)
        self.scale_shift = nn.Parameter(torch.randn(1, 4, dim) / dim ** 0.5)

    def forward(self, x, temb, cos, sin):
        s1, b1, s2, b2 = (self.scale_shift + temb).unbind(1)  # temb: (B, 4, dim)
        h = self.norm1(x) * (1 + s1[:, None]) + b1[:, None]
        B, N, D = h.shape
        q, k, v = self.qkv(h).view(B, N, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, N, D))
        return x + self.moe(self.norm2(x) * (1 + s2[:, None]) + b2[:, None])


class VideoDiT(nn.Module):
    def __init__(self, cin=4, dim=64, depth=2, heads=4, pt=2, ps=2):
        super().__init__()
        self.pt, self.ps, self.cin, self.heads = pt, ps, cin, heads
        self.norm_in = nn.GroupNorm(2, cin)
        self.embed = nn.Linear(cin * pt * ps * ps, dim)
        self.time = TimestepEmbedder(dim)
        self.temb_proj = nn.Linear(dim, 4 * dim)
        self.blocks = nn.ModuleList([VideoBlock(dim, heads) for _ in range(depth)])
        self.out = nn.Linear(dim, cin * pt * ps * ps)

    def rope3d(self, f, h, w, device):
        d = self.embed.out_features // self.heads
        parts = [d // 3 // 2 * 2, d // 3 // 2 * 2]
        parts.insert(0, d - sum(parts))
        grids = torch.meshgrid(torch.arange(f, device=device), torch.arange(h, device=device),
                               torch.arange(w, device=device), indexing="ij")
        angles = []
        for g, n in zip(grids, parts):
            inv = 1.0 / (10000 ** (torch.arange(0, n, 2, device=device).float() / n))
            a = torch.outer(g.reshape(-1).float(), inv)
            angles.append(torch.cat([a, a], dim=-1))
        ang = torch.cat(angles, dim=-1)
        return ang.cos()[None, None], ang.sin()[None, None]

    def forward(self, x, t):
        video = x
        B, C, T, H, W = video.shape
        pad = (-T) % self.pt
        x = F.pad(video, (0, 0, 0, 0, 0, pad))
        x = self.norm_in(x.flatten(2)).view(B, C, T + pad, H, W)
        f, h, w = (T + pad) // self.pt, H // self.ps, W // self.ps
        x = x.view(B, C, f, self.pt, h, self.ps, w, self.ps).permute(0, 2, 4, 6, 1, 3, 5, 7).reshape(B, f * h * w, -1)
        x = self.embed(x)
        temb = self.time(t)
        per_frame = self.temb_proj(F.silu(temb)).view(B, 4, -1)
        per_frame = torch.repeat_interleave(per_frame[:, None], f, dim=1).mean(dim=1)
        cos, sin = self.rope3d(f, h, w, video.device)
        for b in self.blocks:
            x = b(x, per_frame, cos, sin)
        x = self.out(x).view(B, f, h, w, C, self.pt, self.ps, self.ps)
        x = x.permute(0, 4, 1, 5, 2, 6, 3, 7).reshape(B, C, f * self.pt, H, W)
        return x[:, :, :T]


def build(name):
    """(model, kwargs) on the CPU, fp32; seeded inputs."""
    g = torch.Generator("cpu").manual_seed(1)
    if name == "dit":
        return DiT(), {"x": torch.randn(1, 4, 16, 16, generator=g), "t": torch.tensor([500.0]),
                       "y": torch.tensor([3])}
    if name == "mmdit":
        return MMDiT(), {"x": torch.randn(1, 4, 16, 16, generator=g), "t": torch.tensor([700.0]),
                         "context": torch.randn(1, 12, 32, generator=g),
                         "pooled": torch.randn(1, 32, generator=g), "context_lens": torch.tensor([9])}
    if name == "video":
        return VideoDiT(), {"x": torch.randn(1, 4, 3, 8, 8, generator=g), "t": torch.tensor([300.0])}
    raise KeyError(name)
