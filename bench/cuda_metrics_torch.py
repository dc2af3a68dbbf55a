#!/usr/bin/env python3
"""PyTorch eager baseline for bench_cuda_metrics: the same metrics (mean and
max |t - r|, rel_max, cosine, NaN/inf counts per side) on two bf16 tensors of
2^log2_n elements, the way a training script would write them.

    python3 bench/cuda_metrics_torch.py [log2_n=28] [reps=20]

Timed with CUDA events around the whole metric computation (each metric
reduced to a Python number at the end, as a logger would), median after 3
warm-ups. GB/s counts the bytes of t and r read once (2 * 2 * n), as for
drift's fused kernel; a device-to-device copy (r.clone()) is timed the same
way and reported with read + write bytes. Prints SKIP and exits 0 without
torch or without a GPU."""
import math
import sys


def main():
    log2n = int(sys.argv[1]) if len(sys.argv) > 1 else 28
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    try:
        import torch
    except ImportError:
        print("SKIP: torch not installed")
        return 0
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 0
    n = 1 << log2n
    torch.manual_seed(0)
    dev = "cuda"
    r32 = torch.randn(n, device=dev, dtype=torch.float32)
    r = r32.to(torch.bfloat16)
    t = (r32 + 0.01 * torch.randn(n, device=dev, dtype=torch.float32)).to(torch.bfloat16)
    del r32
    eq = torch.rand(n, device=dev) < 0.3
    t = torch.where(eq, r, t)
    del eq
    torch.cuda.synchronize()

    def metrics():
        tf = t.float()
        rf = r.float()
        d = tf - rf
        ad = d.abs()
        mean_abs = ad.mean()
        max_abs = ad.max()
        rel_max = max_abs / (rf.abs().max() + 1e-30)
        cos = torch.nn.functional.cosine_similarity(tf, rf, dim=0)
        counts = torch.stack([torch.isnan(t).sum(), torch.isinf(t).sum(), torch.isnan(r).sum(), torch.isinf(r).sum()])
        return [mean_abs.item(), max_abs.item(), rel_max.item(), cos.item()] + counts.tolist()

    def timed(fn):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        ts = []
        out = None
        for _ in range(reps):
            e0.record()
            out = fn()
            e1.record()
            e1.synchronize()
            ts.append(e0.elapsed_time(e1))
        ts.sort()
        return ts[len(ts) // 2], ts[0], out

    bytes_read = 2 * t.numel() * t.element_size()
    ms, mn, res = timed(metrics)
    copy_ms, _, _ = timed(lambda: r.clone())
    gbps = bytes_read / (ms * 1e-3) / 1e9
    copy_gbps = 2 * r.numel() * r.element_size() / (copy_ms * 1e-3) / 1e9
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print(f"torch eager metrics bf16 n=2^{log2n}: median {ms:.3f} ms (min {mn:.3f}) {gbps:.1f} GB/s read "
          f"| copy (clone) {copy_ms:.3f} ms {copy_gbps:.1f} GB/s r+w | ratio {100.0 * gbps / copy_gbps:.1f}%")
    print(f"      result: mean|d| {res[0]:.6e}  max|d| {res[1]:.6e}  rel_max {res[2]:.6e}  cos {res[3]:.12f}  "
          f"nan {int(res[4])}/{int(res[6])}  inf {int(res[5])}/{int(res[7])}")
    print(f"BENCH torch_metrics_bf16_GBps={gbps:.1f} torch_copy_GBps={copy_gbps:.1f} torch_metrics_ms={ms:.3f}")
    assert math.isfinite(res[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
