"""Which rounding does torch's rms_norm do on this GPU? (issue 15/16 probe)

GPU machine, torch 2.11: F.rms_norm / torch.nn.RMSNorm on bf16 rows of D
elements, weight bf16 or fp32, with and without bf16 autocast and with and
without requires_grad, against two emulations computed from the same fp32
statistics:

  double: y = bf16( bf16(u * r) * w )      (round to x's dtype, then weight)
  single: y = bf16( (u * r) * float(w) )   (one rounding at the end)

with u = float(x), r = rsqrt(mean(u*u) + eps). Prints, per case, the result
dtype, the kernels torch launched and how many elements differ from each
emulation (a 1-ULP flip of rstd moves few elements; a wrong rounding order
moves ~25% of them). Usage: python3 tests/gpu/rms_norm_probe.py
"""
import torch
import torch.nn.functional as F


def kernels_of(fn):
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = []
    for e in prof.events():
        if str(getattr(e, "device_type", "")).upper().endswith("CUDA") and e.name not in names:
            names.append(e.name[:60])
    return names


def main():
    dev = "cuda"
    bf16 = torch.bfloat16
    eps = 1e-6
    print("torch", torch.__version__, flush=True)
    for D in (24, 128, 1536):
        for wdt in (bf16, torch.float32):
            for ac in (False, True):
                for grad in (False, True):
                    g = torch.Generator(device=dev).manual_seed(D)
                    x = (torch.randn(256, D, device=dev, generator=g) * 2).to(bf16)
                    w = (1 + 0.1 * torch.randn(D, device=dev, generator=g)).to(wdt)
                    if grad:
                        w.requires_grad_(True)

                    def run():
                        with torch.autocast("cuda", dtype=bf16, enabled=ac):
                            return F.rms_norm(x, (D,), w, eps)
                    with torch.no_grad() if not grad else torch.enable_grad():
                        y = run()
                        ks = kernels_of(run)
                    u = x.float()
                    r = torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps)
                    wf = w.detach().float()
                    double = ((u * r).to(bf16).float() * wf).to(bf16)
                    single = ((u * r) * wf).to(bf16)
                    yy = y.detach().to(bf16)
                    nd = int((yy != double).sum())
                    ns = int((yy != single).sum())
                    print("RMSPROBE D=%d w=%s autocast=%d grad=%d out=%s differ_double=%d differ_single=%d of %d "
                          "kernels=%s" % (D, str(wdt).replace("torch.", ""), ac, grad, str(y.dtype).replace("torch.", ""),
                                          nd, ns, yy.numel(), "|".join(ks)), flush=True)
    # WanAttention's norm_q: torch.nn.RMSNorm with bf16 weights (FSDP2 param_dtype bf16)
    m = torch.nn.RMSNorm(24, eps=eps, elementwise_affine=True).to(dev)
    with torch.no_grad():
        m.weight.copy_(1 + 0.1 * torch.randn(24, device=dev))
    m = m.to(bf16)
    x = (torch.randn(128, 24, device=dev) * 2).to(bf16)
    with torch.autocast("cuda", dtype=bf16):
        y = m(x)
    u = x.float()
    r = torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps)
    wf = m.weight.detach().float()
    print("RMSPROBE module nn.RMSNorm(24) bf16 under autocast: out=%s differ_double=%d differ_single=%d" %
          (y.dtype, int((y.detach() != ((u * r).to(bf16).float() * wf).to(bf16)).sum()),
           int((y.detach() != ((u * r) * wf).to(bf16)).sum())), flush=True)


if __name__ == "__main__":
    main()
