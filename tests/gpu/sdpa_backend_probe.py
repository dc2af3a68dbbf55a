#!/usr/bin/env python3
"""Which kernel does torch run for scaled_dot_product_attention, per mask / GQA / causal /
shape, and which explicit form is bitwise with it? (issue 31, on the GPU machine)

    python3 tests/gpu/sdpa_backend_probe.py

bf16 operands (what autocast hands SDPA), B 2, 4 query heads. For each configuration:
the CUDA kernels torch's default call launched, and whether its output is bitwise equal
to each backend forced alone (math, efficient, flash, cudnn; '-' when that backend
refuses the inputs) and to two explicit forms drift can lower to:
  m32  torch's math backend as drift's SDPA_MATH32 writes it: q, k, v widened to fp32,
       q and k each scaled by sqrt(scale), scores + mask, softmax, P V, one cast back;
  f32p scores and softmax in fp32 from the bf16 operands, P rounded to bf16, P V with
       fp32 accumulation, one cast back (flash attention's form).
Prints one SDPA line per configuration; nothing is written.
"""
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

DEV = "cuda"
BF = torch.bfloat16


def kernels(fn):
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        fn()
        torch.cuda.synchronize()
    names = [e.name for e in p.events() if e.device_type.name == "CUDA"]
    keep = [n for n in names if any(w in n.lower() for w in ("attn", "attention", "sdpa", "fmha", "flash", "softmax",
                                                               "gemm", "cutlass", "cudnn"))]
    return [n[:70] for n in (keep or names)][:4]


def forms(q, k, v, mask, causal, gqa, scale):
    hq, hk = q.shape[1], k.shape[1]
    if gqa and hk != hq:
        k = k.repeat_interleave(hq // hk, 1)
        v = v.repeat_interleave(hq // hk, 1)
    lq, lk = q.shape[2], k.shape[2]
    bias = torch.zeros(lq, lk, device=DEV, dtype=torch.float32)
    if causal:
        bias = bias.masked_fill(torch.ones(lq, lk, dtype=torch.bool, device=DEV).tril().logical_not(), float("-inf"))
    if mask is not None:
        bias = bias + (torch.zeros_like(mask, dtype=torch.float32).masked_fill(mask.logical_not(), float("-inf"))
                       if mask.dtype == torch.bool else mask.float())
    s = math.sqrt(scale)
    qf, kf, vf = q.float() * s, k.float() * s, v.float()
    p = torch.softmax(qf @ kf.transpose(-2, -1) + bias, -1)
    m32 = (p @ vf).to(BF)
    sc = (q.float() @ k.float().transpose(-2, -1)) * scale + bias
    p2 = torch.softmax(sc, -1).to(BF)
    f32p = torch.matmul(p2.float(), v.float()).to(BF)
    return {"m32": m32, "f32p": f32p}


def probe(d, lq, lk, hk, mask_kind, causal):
    g = torch.Generator(DEV).manual_seed(lq * 1000 + d)
    B, H = 2, 4
    q = torch.randn(B, H, lq, d, device=DEV, generator=g).to(BF)
    k = torch.randn(B, hk, lk, d, device=DEV, generator=g).to(BF)
    v = torch.randn(B, hk, lk, d, device=DEV, generator=g).to(BF)
    keep = torch.ones(B, 1, 1, lk, dtype=torch.bool, device=DEV)
    keep[1, ..., lk - max(1, lk // 4):] = False
    mask = None
    if mask_kind == "boolkey":
        mask = keep
    elif mask_kind == "addkey_bf16":
        mask = torch.zeros(B, 1, 1, lk, device=DEV, dtype=BF).masked_fill(keep.logical_not(), -1e4)
    elif mask_kind == "addkey_f32":
        mask = torch.zeros(B, 1, 1, lk, device=DEV).masked_fill(keep.logical_not(), float("-inf"))
    elif mask_kind == "boolfull":
        mask = keep.expand(B, 1, lq, lk).clone()
        mask[0, 0, 0, -1] = False
    elif mask_kind == "boolkey_expanded":
        mask = keep.expand(B, H, lq, lk)
    gqa = hk != H
    scale = 1.0 / math.sqrt(d)

    def call():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa)

    try:
        out = call()
    except Exception as e:  # noqa: BLE001
        print("SDPA d=%d lq=%d lk=%d hk=%d mask=%s causal=%d ERROR %s" % (d, lq, lk, hk, mask_kind, causal,
                                                                         str(e)[:120]), flush=True)
        return
    ks = kernels(call)
    eq = {}
    for name, be in (("math", SDPBackend.MATH), ("eff", SDPBackend.EFFICIENT_ATTENTION),
                     ("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel([be]):
                o = call()
            eq[name] = "Y" if torch.equal(o, out) else "N%d" % int((o != out).sum())
        except Exception:  # noqa: BLE001
            eq[name] = "-"
    for name, o in forms(q, k, v, mask, causal, gqa, scale).items():
        both = torch.isfinite(out) & torch.isfinite(o)
        eq[name] = "Y" if torch.equal(o, out) else "N%d" % int((o != out)[both].sum())
    print("SDPA d=%d lq=%d lk=%d hk=%d mask=%s causal=%d eq %s kernels %s" % (
        d, lq, lk, hk, mask_kind, causal, " ".join("%s=%s" % kv for kv in eq.items()), ks), flush=True)


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    print("TORCH %s cudnn %s device %s" % (torch.__version__, torch.backends.cudnn.version(),
                                          torch.cuda.get_device_name()), flush=True)
    for d in (8, 16, 64, 128):
        for lq, lk in ((4, 4), (16, 16), (64, 24), (256, 256)):
            for hk in (4, 2):
                for mk in ("none", "boolkey", "addkey_bf16", "addkey_f32", "boolfull", "boolkey_expanded"):
                    probe(d, lq, lk, hk, mk, False)
                if lq == lk:
                    probe(d, lq, lk, hk, "none", True)


if __name__ == "__main__":
    main()
