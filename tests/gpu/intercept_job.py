"""A small Wan-like DiT trained for a few steps under FSDP2 with a bf16
mixed-precision policy and norm2 kept in fp32, for tests/gpu/intercept.sh.

Imports no drift code: the census comes from libdrift_intercept.so
(LD_PRELOAD + NVTX_INJECTION64_PATH). The only instrumentation is the job's
own NVTX ranges, pushed by module forward pre/post hooks (what a training
codebase with NVTX annotations looks like). FQNs follow diffusers:
blocks.N.attn1.to_q, blocks.N.attn1.to_out.0, blocks.N.norm2,
blocks.N.ffn.net.0.proj, blocks.N.ffn.net.2.

Run: torchrun --standalone --nproc_per_node=2 tests/gpu/intercept_job.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

DIM, HEADS, FFN, IN_CH, SEQ, BATCH, STEPS = 256, 4, 1024, 16, 64, 2, 3


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.to_q = nn.Linear(DIM, DIM)
        self.to_k = nn.Linear(DIM, DIM)
        self.to_v = nn.Linear(DIM, DIM)
        self.to_out = nn.ModuleList([nn.Linear(DIM, DIM)])

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (t.view(b, s, HEADS, DIM // HEADS).transpose(1, 2) for t in (self.to_q(x), self.to_k(x), self.to_v(x)))
        o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, DIM)
        return self.to_out[0](o)


class GELUProj(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(DIM, FFN)

    def forward(self, x):
        return F.gelu(self.proj(x), approximate="tanh")


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.ModuleList([GELUProj(), nn.Identity(), nn.Linear(FFN, DIM)])

    def forward(self, x):
        for m in self.net:
            x = m(x)
        return x


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn1 = Attention()
        self.norm2 = nn.LayerNorm(DIM, elementwise_affine=True)
        self.ffn = FeedForward()

    def forward(self, x):
        x = x + self.attn1(x)
        return x + self.ffn(self.norm2(x))


class TinyDiT(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj_in = nn.Linear(IN_CH, DIM)
        self.blocks = nn.ModuleList([Block() for _ in range(2)])
        self.proj_out = nn.Linear(DIM, IN_CH)

    def forward(self, x):
        x = self.proj_in(x)
        for b in self.blocks:
            x = b(x)
        return self.proj_out(x)


def add_nvtx_hooks(model):
    """Pushes one NVTX range per called module, named relative to the
    nearest called ancestor: forward/blocks.0/attn1/to_q."""
    called = {n: m for n, m in model.named_modules() if n and not isinstance(m, (nn.ModuleList, nn.Identity))}
    for fqn, mod in called.items():
        parent = max((a for a in called if fqn.startswith(a + ".")), key=len, default="")
        name = fqn[len(parent) + 1:] if parent else fqn
        # prepend: run before FSDP2's own pre-forward hook (registered with
        # prepend=True by fully_shard), so the range encloses its all-gather
        # (a hook's non-None return value would replace the module's input or
        # output, and range_push/range_pop return the nesting depth)
        def push(m, a, n=name):
            torch.cuda.nvtx.range_push(n)

        def pop(m, a, o):
            torch.cuda.nvtx.range_pop()

        mod.register_forward_pre_hook(push, prepend=True)
        mod.register_forward_hook(pop)


def main():
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    torch.manual_seed(0)
    model = TinyDiT().cuda()
    bf16 = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block.norm2, mp_policy=MixedPrecisionPolicy(param_dtype=torch.float32))
        fully_shard(block, mp_policy=bf16)
    fully_shard(model, mp_policy=bf16)
    add_nvtx_hooks(model)  # after fully_shard, prepended: the ranges enclose FSDP's all-gathers
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator(device="cuda").manual_seed(1 + rank)
    for step in range(STEPS):
        x = torch.randn(BATCH, SEQ, IN_CH, device="cuda", generator=g)
        target = torch.randn(BATCH, SEQ, IN_CH, device="cuda", generator=g)
        torch.cuda.nvtx.range_push("forward")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
        torch.cuda.nvtx.range_pop()
        loss = F.mse_loss(out.float(), target)
        torch.cuda.nvtx.range_push("backward")
        loss.backward()
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_push("optimizer")
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.nvtx.range_pop()
        if rank == 0:
            print(f"step {step} loss {loss.item():.6f}", flush=True)
    torch.cuda.synchronize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
