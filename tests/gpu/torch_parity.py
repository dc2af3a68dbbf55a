#!/usr/bin/env python3
"""The torch side of the op-parity harness (tests/gpu/torch_parity.sh).

  python3 tests/gpu/torch_parity.py gen DIR
      makes seeded inputs for each op class and shape of the Wan 1.3B
      recording (and a Qwen-Image block), runs torch's op under bf16 autocast
      as the model does, writes inputs and torch's outputs as raw bits plus
      DIR/manifest.txt (read by tests/gpu/torch_parity_run.c), and
      DIR/torch_libdirs.txt: the folders of the libcublasLt / libcudnn this
      torch process loaded (for LD_LIBRARY_PATH of the drift side).
      Prints TORCH (versions, settings), TORCHLIB (loaded libraries) and
      KERNELS (the CUDA kernels torch ran per case) lines.
  python3 tests/gpu/torch_parity.py compare DIR TAG [TAG ...]
      compares DIR/<case>.<TAG>.bin with torch's output and prints, for the
      first TAG, "PARITY <case> <shape> mismatches=N/T max_ulp=U" per case,
      for the others "VARIANT <tag> <case> ..." lines, then a SUMMARY line
      per tag. A missing drift output prints "mismatches=MISSING". Exit 1
      when a case of BITWISE (the bmm_* family) is not bitwise equal for the
      first TAG ("FAIL <case>" lines), else 0.

Only torch's documented Python API is used; nothing here needs drift.
"""
import functools
import os
import re
import sys
import traceback
import zlib

import numpy as np

CASES = []  # (name, op, fn): fn() -> (inputs, torch op closure, manifest attributes)


# ----------------------------------------------------------------- torch side

def torch_gen(outdir):
    import torch
    import torch.nn.functional as F

    dev = torch.device("cuda")
    bf16 = torch.bfloat16
    os.makedirs(outdir, exist_ok=True)
    man = open(os.path.join(outdir, "manifest.txt"), "w")
    man.write("# written by tests/gpu/torch_parity.py gen\n")

    def dtname(t):
        return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[t.dtype]

    def save(name, tag, t):
        t = t.detach().contiguous()
        fn = "%s.%s.bin" % (name, tag)
        view = {2: torch.int16, 4: torch.int32}[t.element_size()]
        t.view(view).cpu().numpy().tofile(os.path.join(outdir, fn))
        return fn

    def emit(name, op, ins, out, attrs=""):
        man.write("case %s %s%s\n" % (name, op, (" " + attrs) if attrs else ""))
        for i, t in enumerate(ins):
            fn = save(name, "in%d" % i, t)
            man.write("in %s %d %s %s\n" % (dtname(t), t.dim(), " ".join(str(d) for d in t.shape), fn))
        save(name, "torch", out)
        man.write("out %s %d %s\n" % (dtname(out), out.dim(), " ".join(str(d) for d in out.shape)))
        man.write("end\n")
        man.flush()

    def kernels_of(fn):
        """Names of the CUDA kernels fn launches (torch.profiler)."""
        try:
            from torch.profiler import profile, ProfilerActivity
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn()
                torch.cuda.synchronize()
            names = []
            for e in prof.events():
                if str(getattr(e, "device_type", "")).upper().endswith("CUDA"):
                    if e.name not in names:
                        names.append(e.name)
            return names
        except Exception as ex:  # profiler unavailable: say so, keep going
            return ["(profiler: %s)" % ex]

    def run(name, op, fn):
        torch.manual_seed(zlib.crc32(name.encode()))
        try:
            ins, out_fn, attrs = fn()
            with torch.autocast("cuda", dtype=bf16):
                out = out_fn()
            torch.cuda.synchronize()
            if op == "rms_norm" and rms_upcast[0]:
                # autocast ran rms_norm in fp32: drift gets the upcast operands
                ins = [t.float() for t in ins]
            ks = kernels_of(lambda: _autocast(out_fn))
            emit(name, op, ins, out, attrs)
            print("KERNELS %s: %s" % (name, " | ".join(k[:160] for k in ks)), flush=True)
            print("TORCHCASE %s ok out=%s %s" % (name, dtname(out), list(out.shape)), flush=True)
        except Exception:
            print("TORCHCASE %s error: %s" % (name, traceback.format_exc().strip().replace("\n", " / ")), flush=True)

    def _autocast(f):
        with torch.autocast("cuda", dtype=bf16):
            return f()

    def rb(*shape, scale=1.0):
        """bf16-representable fp32 values."""
        return (torch.randn(*shape, device=dev) * scale).to(bf16)

    # linear: aten::linear under autocast (weights and bias cast to bf16)
    lin_shapes = [(1536, 1536), (1536, 8960), (8960, 1536)]
    for M in (1, 64, 1280, 4096):
        for K, N in lin_shapes:
            for bias in (True, False):
                nm = "linear_%s_M%d_K%d_N%d" % ("bias" if bias else "nobias", M, K, N)

                def f(M=M, K=K, N=N, bias=bias):
                    x = rb(1, M, K)
                    w = torch.randn(N, K, device=dev) * K ** -0.5
                    b = torch.randn(N, device=dev) * 0.1 if bias else None
                    wb, bb = w.to(bf16), (b.to(bf16) if bias else None)
                    ins = [x, wb] + ([bb] if bias else [])
                    return ins, (lambda: F.linear(x, w, b)), ""
                CASES.append((nm, "linear", f))
    # the timestep embedder's small-M GEMMs (batch 1, 2, 4, 8 of one Wan step: time_embedder.linear_1
    # K 256, linear_2 K 1536, time_projection N 6*1536), the rows of one seeded x shared across M, and
    # torch's own verdict: is row 0 at M equal to row 0 at M = 1 (batch invariance of torch itself)?
    for K, N in ((256, 1536), (1536, 1536), (1536, 9216)):
        gk = torch.Generator(device=dev).manual_seed(1000 + K + N)
        x8 = (torch.randn(1, 8, K, device=dev, generator=gk)).to(bf16)
        w = torch.randn(N, K, device=dev, generator=gk) * K ** -0.5
        b = torch.randn(N, device=dev, generator=gk) * 0.1
        with torch.autocast("cuda", dtype=bf16):
            row0 = {M: F.linear(x8[:, :M], w, b)[0, 0].float() for M in (1, 2, 4, 8)}
        for M in (2, 4, 8):
            same = bool(torch.equal(row0[M], row0[1]))
            nd = int((row0[M] != row0[1]).sum().item())
            print("TORCHINV linear_bias K=%d N=%d: row 0 at M=%d %s row 0 at M=1 (%d of %d differ)"
                  % (K, N, M, "==" if same else "!=", nd, N), flush=True)
        for M in (1, 2, 4, 8):
            nm = "linear_bias_temb_M%d_K%d_N%d" % (M, K, N)

            def f(M=M, x8=x8, w=w, b=b):
                x = x8[:, :M].contiguous()
                return [x, w.to(bf16), b.to(bf16)], (lambda: F.linear(x, w, b)), ""
            CASES.append((nm, "linear", f))
    # a Qwen-Image block's widths (d 3072, ffn 12288), 4096 image tokens
    for K, N in ((3072, 3072), (3072, 12288), (12288, 3072)):
        nm = "linear_bias_qwen_M4096_K%d_N%d" % (K, N)

        def f(K=K, N=N):
            x = rb(1, 4096, K)
            w = torch.randn(N, K, device=dev) * K ** -0.5
            b = torch.randn(N, device=dev) * 0.1
            return [x, w.to(bf16), b.to(bf16)], (lambda: F.linear(x, w, b)), ""
        CASES.append((nm, "linear", f))

    # layer_norm: diffusers' FP32LayerNorm (fp32 input, weights, output)
    for affine in (True, False):
        nm = "layer_norm_%s_1280x1536" % ("affine" if affine else "noaffine")

        def f(affine=affine):
            x = rb(1280, 1536, scale=2.0).float() + 0.5
            w = (1 + 0.1 * torch.randn(1536, device=dev)) if affine else None
            b = (0.1 * torch.randn(1536, device=dev)) if affine else None
            ins = [x] + ([w, b] if affine else [])
            return ins, (lambda: F.layer_norm(x, (1536,), w, b, 1e-6)), "eps=1e-06"
        CASES.append((nm, "layer_norm", f))

    # rms_norm: WanAttention's norm_q / norm_k (torch.nn.RMSNorm over all
    # heads), self (1280 rows) and cross-attention keys (512 text rows);
    # weights bf16 (FSDP2 bf16 gather) and fp32; Qwen-Image's per-head 128
    for rows, D, wdt, tag in ((1280, 1536, bf16, "wbf16"), (1280, 1536, torch.float32, "wfp32"),
                              (512, 1536, bf16, "wbf16"), (4096 * 24, 128, bf16, "wbf16")):
        nm = "rms_norm_%s_%dx%d" % (tag, rows, D)

        def f(rows=rows, D=D, wdt=wdt):
            x = rb(1, rows, D, scale=3.0)
            w = (1 + 0.1 * torch.randn(D, device=dev)).to(wdt)
            return [x, w], (lambda: F.rms_norm(x, (D,), w, 1e-6)), "eps=1e-06"
        CASES.append((nm, "rms_norm", f))

    # rms_norm cases whose sum of squares rounds in most rows, so that a
    # different summation order shows (bf16 inputs of N(0, 9) rarely do):
    # fp32 x and w (every element carries rstd's last bits), bf16 x over a
    # wide dynamic range, and no weight (which kernel torch takes then)
    def f_rms_f32(rows=1280, D=1536):
        x = torch.randn(1, rows, D, device=dev) * torch.exp(torch.randn(1, rows, 1, device=dev))
        w = 1 + 0.1 * torch.randn(D, device=dev)
        return [x, w], (lambda: F.rms_norm(x, (D,), w, 1e-6)), "eps=1e-06"
    CASES.append(("rms_norm_xf32_wf32_1280x1536", "rms_norm", f_rms_f32))

    def f_rms_wide(rows=1280, D=1536):
        x = (torch.randn(1, rows, D, device=dev) * torch.exp(2 * torch.randn(1, rows, D, device=dev))).to(bf16)
        w = (1 + 0.1 * torch.randn(D, device=dev)).to(bf16)
        return [x, w], (lambda: F.rms_norm(x, (D,), w, 1e-6)), "eps=1e-06"
    CASES.append(("rms_norm_wide_wbf16_1280x1536", "rms_norm", f_rms_wide))

    def f_rms_now(rows=1280, D=1536):
        x = (torch.randn(1, rows, D, device=dev) * torch.exp(2 * torch.randn(1, rows, D, device=dev))).to(bf16)
        return [x], (lambda: F.rms_norm(x, (D,), None, 1e-6)), "eps=1e-06"
    CASES.append(("rms_norm_wide_noweight_1280x1536", "rms_norm", f_rms_now))

    def f_rms_now32(rows=1280, D=1536):
        x = torch.randn(1, rows, D, device=dev) * torch.exp(torch.randn(1, rows, 1, device=dev))
        return [x], (lambda: F.rms_norm(x, (D,), None, 1e-6)), "eps=1e-06"
    CASES.append(("rms_norm_xf32_noweight_1280x1536", "rms_norm", f_rms_now32))

    # the composite RMSNorm diffusers and T5 write (x.float().pow(2).mean(-1) then rsqrt): the
    # mean is reduce_kernel's order (a tree over lanes, four accumulators per lane), the rsqrt
    # CUDA's rsqrtf; per-head widths and a model width, fp32 and bf16 inputs
    for rows, N, dt in ((8, 32, torch.float32), (256, 16, torch.float32), (1024, 12, torch.float32),
                        (64, 200, torch.float32), (16, 1536, torch.float32), (128, 64, bf16), (300, 24, torch.float32)):
        def f_mean(rows=rows, N=N, dt=dt):
            x = (torch.randn(rows, N, device=dev) * torch.exp(torch.randn(rows, 1, device=dev))).to(dt)
            return [x], (lambda: x.pow(2).mean(-1, keepdim=True) if dt == torch.float32 else x.mean(-1, keepdim=True)), ""
        CASES.append(("mean_last_%s_%dx%d" % ("f32" if dt == torch.float32 else "bf16", rows, N), "mean_last", f_mean))

        def f_sum(rows=rows, N=N, dt=dt):
            x = (torch.randn(rows, N, device=dev) * torch.exp(torch.randn(rows, 1, device=dev))).to(dt)
            return [x], (lambda: x.sum(-1, keepdim=True)), ""
        CASES.append(("sum_last_%s_%dx%d" % ("f32" if dt == torch.float32 else "bf16", rows, N), "sum_last", f_sum))

    # sum / mean over a dim that is not the innermost (Lumina-Next's masked caption mean over the
    # tokens, HunyuanVideo-1.5's token refiner): one thread per output, 4 accumulators
    for outer, N, inner, dt in ((2, 16, 32, torch.float32), (1, 6, 16, torch.float32), (4, 77, 64, torch.float32),
                                (2, 200, 8, torch.float32), (3, 24, 40, bf16)):
        def f_mid(outer=outer, N=N, inner=inner, dt=dt, mean=0):
            x = (torch.randn(outer, N, inner, device=dev) * torch.exp(torch.randn(outer, 1, inner, device=dev))).to(dt)
            return [x], (lambda: x.mean(1) if mean else x.sum(1)), ""
        tag = "%s_%dx%dx%d" % ("f32" if dt == torch.float32 else "bf16", outer, N, inner)
        CASES.append(("sum_mid_" + tag, "sum_mid", f_mid))
        CASES.append(("mean_mid_" + tag, "mean_mid", functools.partial(f_mid, mean=1)))

    # group norm (torch's Welford moments, then a * x + b): plain_video's norm_in (fp32 [1, 4, 256],
    # 2 groups: 512 per group, a 512-thread block), a VAE-like [2, 32, 8, 8] / 8 groups (256 per
    # group: one warp), a bf16 input and output with fp32 affine, and no affine
    for N, C, HW, G, dt, affine in ((1, 4, (256,), 2, torch.float32, 1), (2, 32, (8, 8), 8, torch.float32, 1),
                                    (2, 64, (4, 16, 16), 32, bf16, 1), (1, 16, (33,), 4, torch.float32, 0)):
        def f_gn(N=N, C=C, HW=HW, G=G, dt=dt, affine=affine):
            x = (torch.randn(N, C, *HW, device=dev) * 2 + 0.5).to(dt)
            w = torch.randn(C, device=dev).to(dt) if affine else None
            b = torch.randn(C, device=dev).to(dt) if affine else None
            ins = [x] + ([w, b] if affine else [])
            return ins, (lambda: F.group_norm(x, G, w, b, 1e-6)), "eps=1e-06 groups=%d" % G
        CASES.append(("group_norm_%s_%dx%dx%s_G%d%s" % ("f32" if dt == torch.float32 else "bf16", N, C,
                                                        "x".join(map(str, HW)), G, "" if affine else "_noaffine"),
                      "group_norm", f_gn))

    # softmax over the last dim (T5's attention in fp32, an MoE router's 4 experts, wider rows in bf16)
    for rows, N, dt, logsm in ((512, 16, torch.float32, 0), (448, 28, torch.float32, 0), (1024, 4, torch.float32, 0),
                               (64, 77, bf16, 0), (16, 1000, torch.float32, 0), (128, 300, bf16, 1)):
        def f_sm(rows=rows, N=N, dt=dt, logsm=logsm):
            x = (3 * torch.randn(rows, N, device=dev)).to(dt)
            return [x], (lambda: torch.log_softmax(x, -1) if logsm else torch.softmax(x, -1)), ""
        CASES.append(("%s_%s_%dx%d" % ("log_softmax" if logsm else "softmax", "f32" if dt == torch.float32 else "bf16",
                                        rows, N), "log_softmax" if logsm else "softmax", f_sm))

    # bmm / baddbmm / mm / matmul: torch's cuBLAS call (kernels/cuda/torch/bmm_torch.c). drift gets each
    # operand materialised (save() writes it contiguous) and the layout torch held it in as BMM's
    # op->layout bits ("bmm_layout=": 1 / 2 first / second operand a transposed view, 4 / 8 broadcast over
    # the batch, kernels/backend.h DRIFT_BMM_*); these cases claim torch's bits (BITWISE below).
    def noac(f):
        """f without autocast (fp16 / fp32 operands stay in their dtype)."""
        def g():
            with torch.autocast("cuda", enabled=False):
                return f()
        return g

    def rdt(dt, *shape):
        return torch.randn(*shape, device=dev).to(dt)

    for dt, B, M, K, N in ((bf16, 2, 16, 16, 16), (bf16, 4, 128, 64, 96), (torch.float16, 4, 128, 64, 96),
                           (torch.float32, 4, 128, 64, 96), (bf16, 1, 64, 32, 48), (bf16, 3, 5, 7, 1),
                           (bf16, 3, 1, 40, 24)):
        def f_bmm(dt=dt, B=B, M=M, K=K, N=N):
            a, b = rdt(dt, B, M, K), rdt(dt, B, K, N)
            return [a, b], noac(lambda: torch.bmm(a, b)), "bmm_layout=0"
        tag = {bf16: "bf16", torch.float16: "fp16", torch.float32: "f32"}[dt]
        CASES.append(("bmm_%s_%dx%dx%dx%d" % (tag, B, M, K, N), "bmm", f_bmm))

    # transposed operands: attention scores q @ k^T (diffusers' get_attention_scores: baddbmm with beta 0 and
    # alpha = scale on an empty self), a transposed first operand, a 4-D matmul (torch folds the batch dims)
    for dt in (bf16, torch.float16):
        tag = "bf16" if dt == bf16 else "fp16"

        def f_bt(dt=dt):
            a, k = rdt(dt, 8, 77, 64), rdt(dt, 8, 77, 64)
            return [a, k.transpose(1, 2)], noac(lambda: torch.bmm(a, k.transpose(1, 2))), "bmm_layout=2"
        CASES.append(("bmm_bt_%s_8x77x64x77" % tag, "bmm", f_bt))

    def f_scores():
        q, k = rb(8, 77, 64), rb(8, 77, 64)
        empty = torch.zeros(8, 77, 77, device=dev, dtype=bf16)
        return [q, k.transpose(1, 2)], (lambda: torch.baddbmm(empty, q, k.transpose(1, 2), beta=0, alpha=0.125)), \
            "bmm_layout=2 alpha=0.125"
    CASES.append(("bmm_baddbmm_scores_bf16_8x77x64x77", "bmm", f_scores))

    def f_at():
        a, b = rb(4, 96, 40), rb(4, 96, 72)
        return [a.transpose(1, 2), b], (lambda: torch.bmm(a.transpose(1, 2), b)), "bmm_layout=1"
    CASES.append(("bmm_at_bf16_4x40x96x72", "bmm", f_at))

    def f_4d():
        q, k = rb(2, 4, 77, 64), rb(2, 4, 77, 64)
        return [q, k.transpose(-1, -2)], (lambda: torch.matmul(q, k.transpose(-1, -2))), "bmm_layout=2"
    CASES.append(("bmm_matmul4d_bt_bf16_2x4x77x64x77", "bmm", f_4d))

    # baddbmm with beta != 0: self copied into the result, cuBLAS's beta
    def f_baddbmm():
        c, a, b = rb(2, 1, 48), rb(2, 32, 64), rb(2, 64, 48)
        return [a, b, c], (lambda: torch.baddbmm(c, a, b, beta=0.5, alpha=2.0)), "bmm_layout=0 alpha=2 beta=0.5"
    CASES.append(("bmm_baddbmm_bf16_2x32x64x48", "bmm", f_baddbmm))

    # linear on a transposed 3-D input (tests/parity's linear.transposed_in): torch's linear takes matmul
    # (the input is not contiguous) and matmul does not fold it (its batch dims are not mergeable): bmm
    # of x^T and W^T expanded over the batch (stride 0), both 't'; the bias added after (not here)
    def f_lin_t():
        x, w = rb(2, 64, 48), rb(96, 64)
        return [x.transpose(1, 2), w.t().expand(2, 64, 96)], (lambda: torch.matmul(x.transpose(1, 2), w.t())), \
            "bmm_layout=11"
    CASES.append(("bmm_linear_transposed_in_bf16_2x48x64x96", "bmm", f_lin_t))

    # mm (2-D): x @ W^T is LINEAR without bias (gemm_torch.c's call), and a plain mm
    def f_mm_wt():
        x, w = rb(64, 256), rb(128, 256)
        return [x, w.t()], (lambda: torch.mm(x, w.t())), "bmm_layout=2"
    CASES.append(("bmm_mm_wt_bf16_64x256x128", "bmm", f_mm_wt))

    def f_mm():
        x, w = rb(64, 256), rb(256, 128)
        return [x, w], (lambda: torch.mm(x, w)), "bmm_layout=0"
    CASES.append(("bmm_mm_bf16_64x256x128", "bmm", f_mm))

    def f_rsqrt():
        x = torch.rand(4096, 64, device=dev) * torch.exp(4 * torch.randn(4096, 1, device=dev)) + 1e-6
        return [x], (lambda: torch.rsqrt(x)), ""
    CASES.append(("rsqrt_f32_4096x64", "rsqrt", f_rsqrt))

    # activations on bf16 linear outputs (and an fp32 SiLU, the time embedder's)
    def f_gelu():
        x = rb(1, 1280, 8960, scale=3.0)
        return [x], (lambda: F.gelu(x, approximate="tanh")), ""
    CASES.append(("gelu_tanh_1280x8960", "gelu_tanh", f_gelu))

    def f_silu():
        x = rb(1, 1280, 1536, scale=4.0)
        return [x], (lambda: F.silu(x)), ""
    CASES.append(("silu_bf16_1280x1536", "silu", f_silu))

    def f_silu32():
        x = torch.randn(1, 8960, device=dev) * 4.0
        return [x], (lambda: F.silu(x)), ""
    CASES.append(("silu_fp32_8960", "silu", f_silu32))

    # the Wan block's modulation: fp32(x) * (1 + scale) + shift
    def f_mod():
        x = rb(1, 1280, 1536, scale=2.0)
        sc = torch.randn(1, 1, 1536, device=dev) * 0.2
        sh = torch.randn(1, 1, 1536, device=dev) * 0.2
        return [x, sc, sh], (lambda: x.float() * (1 + sc) + sh), ""
    CASES.append(("modulation_1280x1536", "modulation", f_mod))

    # SDPA: self (1280 tokens) and cross (512 text tokens), 12 heads of 128
    for Lk, tag in ((1280, "self"), (512, "cross")):
        nm = "sdpa_%s_H12_Lq1280_Lk%d_D128" % (tag, Lk)

        def f(Lk=Lk):
            q, k, v = rb(1, 12, 1280, 128), rb(1, 12, Lk, 128), rb(1, 12, Lk, 128)
            return [q, k, v], (lambda: F.scaled_dot_product_attention(q, k, v)), ""
        CASES.append((nm, "sdpa", f))

    # SDPA with a mask, is_causal, enable_gqa (torch 2.11 runs cuDNN's fused flash SDPA for
    # every one of them on an H200: tests/gpu/sdpa_backend_probe.py). drift gets what its
    # importer makes of them: ATTENTION with the fp32 additive bias [Bb, Hb, Lqb, Lk] as the
    # 4th input (a bool mask as 0 / -inf, an additive bf16 mask widened, is_causal as tril
    # top-left), GQA's kv heads repeated (repeat_interleave over the heads).
    def sdpa_mask_case(kind, D, L):
        B, H = 2, 4
        Hk = 2 if kind.startswith("gqa") else H
        q, k, v = rb(B, H, L, D), rb(B, Hk, L, D), rb(B, Hk, L, D)
        mask, causal, ninf = None, False, float("-inf")
        if kind.endswith("boolkey"):
            mask = torch.rand(B, 1, 1, L, device=dev) > 0.3
            mask[..., 0] = True
            bias = torch.zeros(B, 1, 1, L, device=dev).masked_fill(~mask, ninf)
        elif kind == "addkey":  # diffusers' additive key mask: 0 kept, a large negative dropped, in bf16
            mask = (torch.randn(B, 1, 1, L, device=dev) * 0.5).to(bf16)
            mask[..., L // 2:] = torch.finfo(bf16).min
            bias = mask.float()
        elif kind == "addkey32":  # an fp32 additive mask with bf16 operands: what torch hands cuDNN then
            mask = torch.randn(B, 1, 1, L, device=dev) * 0.5
            mask[..., L // 2:] = ninf
            bias = mask
        elif kind.endswith("boolfull"):
            mask = torch.rand(B, 1, L, L, device=dev) > 0.3
            mask[..., 0] = True
            bias = torch.zeros(B, 1, L, L, device=dev).masked_fill(~mask, ninf)
        else:  # causal
            causal = True
            tril = torch.ones(L, L, dtype=torch.bool, device=dev).tril()
            bias = torch.zeros(L, L, device=dev).masked_fill(~tril, ninf).view(1, 1, L, L)
        gqa = Hk != H
        kr = k.repeat_interleave(H // Hk, dim=1) if gqa else k
        vr = v.repeat_interleave(H // Hk, dim=1) if gqa else v
        fn = (lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa))
        return [q, kr, vr, bias.contiguous()], fn, ""

    for D, L in ((64, 256), (8, 16)):
        for kind in ("boolkey", "addkey", "addkey32", "boolfull", "causal", "gqa_boolkey", "gqa_boolfull", "gqa_causal"):
            def f(kind=kind, D=D, L=L):
                return sdpa_mask_case(kind, D, L)
            CASES.append(("sdpa_mask_%s_B2_H4_L%d_D%d" % (kind, L, D), "sdpa", f))

    # the zoo's masked shapes (Ernie-Image, plain_mmdit: a bool key mask, all kept or the tail
    # dropped; Lumina-Next: cross-attention with a full bool mask; HunyuanVideo-1.5: a full mask
    # with masked-out rows): torch hands cuDNN where(!mask, -65504, 0) in the operands' dtype
    def sdpa_maskzoo_case(B, H, Sq, Sk, D, full, drop):
        q, k, v = rb(B, H, Sq, D), rb(B, H, Sk, D), rb(B, H, Sk, D)
        mask = torch.ones((B, 1, Sq, Sk) if full else (B, 1, 1, Sk), dtype=torch.bool, device=dev)
        if drop:
            mask[..., Sk - drop:] = False
            if full:
                mask[:, :, Sq - 2:, :] = False  # whole rows masked out
        bias = torch.zeros(mask.shape, device=dev).masked_fill(~mask, -65504.0)
        fn = (lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
        return [q, k, v, bias.contiguous()], fn, ""

    for nm, B, H, Sq, Sk, D, full, drop in (("ernie", 1, 1, 272, 272, 16, 0, 0), ("mmdit", 1, 4, 76, 76, 16, 0, 5),
                                            ("lumina", 2, 3, 64, 16, 8, 1, 0), ("hy15", 1, 2, 77, 77, 8, 1, 6),
                                            ("d64", 1, 2, 272, 272, 64, 0, 5)):
        def f_mz(B=B, H=H, Sq=Sq, Sk=Sk, D=D, full=full, drop=drop):
            return sdpa_maskzoo_case(B, H, Sq, Sk, D, full, drop)
        CASES.append(("sdpa_maskzoo_%s" % nm, "sdpa", f_mz))

    # head dims that are no multiple of 8, no mask: cuDNN declines them and torch pads q, k, v to a
    # multiple of 8 and runs FlashAttention-2 (drift: flash_torch.cu), the zoo's small heads
    # (B, H) 2, 2 unless given; Motif's and WanAnimate's long self-attention split the keys
    # (flash's num_splits_heuristic), B 2 H 16 L 1024 fills the SMs (one split, 8 key blocks)
    for D, Lq, Lk, B, H in ((12, 128, 128, 2, 2), (12, 212, 212, 2, 2), (4, 512, 9, 2, 2), (4, 1024, 8, 2, 2),
                            (2, 144, 144, 2, 2), (6, 64, 12, 2, 2), (20, 100, 256, 2, 2), (36, 77, 130, 2, 2),
                            (12, 2316, 2316, 1, 2), (12, 1344, 1344, 1, 2), (12, 1024, 1024, 2, 16),
                            (44, 700, 3000, 1, 3)):
        def f_flash(D=D, Lq=Lq, Lk=Lk, B=B, H=H):
            q, k, v = rb(B, H, Lq, D), rb(B, H, Lk, D), rb(B, H, Lk, D)
            return [q, k, v], (lambda: F.scaled_dot_product_attention(q, k, v)), ""
        CASES.append(("sdpa_flash_D%d_Lq%d_Lk%d_B%dH%d" % (D, Lq, Lk, B, H), "sdpa", f_flash))

    # is_causal with as many queries as keys at a head dim that is no multiple of 8: flash with its
    # causal mask (Cosmos3-Omni: head dim 6, GQA); the importer marks it with flash's order
    for D, L, B, H in ((6, 64, 2, 2), (12, 300, 2, 2), (6, 2, 1, 2)):
        def f_fc(D=D, L=L, B=B, H=H):
            q, k, v = rb(B, H, L, D), rb(B, H, L, D), rb(B, H, L, D)
            bias = torch.zeros(L, L, device=dev).masked_fill(
                ~torch.ones(L, L, dtype=torch.bool, device=dev).tril(), float("-inf")).view(1, 1, L, L)
            return [q, k, v, bias], (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)), "order=1"
        CASES.append(("sdpa_flash_causal_D%d_L%d_B%dH%d" % (D, L, B, H), "sdpa", f_fc))

    # the zoo's masked attention as the models hand it to torch: q, k, v [B, L, H, D] transposed
    # (drift's layout 1), the mask's own shape and dtype (Ernie, plain_mmdit, LTX-2, Lumina-Next,
    # MiniMax-Music's causal); torch's KERNELS line says which backend ran
    def sdpa_zoo(B, H, Lq, Lk, D, mask_kind, Hk=None):
        Hk = Hk or H
        q, k, v = rb(B, Lq, H, D), rb(B, Lk, Hk, D), rb(B, Lk, Hk, D)
        causal, mask, bias = False, None, None
        if mask_kind == "boolkey":
            mask = torch.rand(B, 1, 1, Lk, device=dev) > 0.3
            mask[..., 0] = True
            bias = torch.zeros(B, 1, 1, Lk, device=dev).masked_fill(~mask, float("-inf"))
        elif mask_kind == "f32head":
            mask = torch.zeros(B, H, 1, Lk, device=dev).masked_fill(torch.rand(B, H, 1, Lk, device=dev) > 0.7, -1e9)
            mask[..., 0] = 0
            bias = mask
        elif mask_kind == "boolfull_exp":
            m = torch.rand(B, 1, 1, Lk, device=dev) > 0.3
            m[..., 0] = True
            mask = m.expand(B, H, Lq, Lk)
            bias = torch.zeros(B, 1, 1, Lk, device=dev).masked_fill(~m, float("-inf"))
        else:
            causal = True
            bias = torch.zeros(Lq, Lk, device=dev).masked_fill(
                ~torch.ones(Lq, Lk, dtype=torch.bool, device=dev).tril(), float("-inf")).view(1, 1, Lq, Lk)
        fn = (lambda: F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                     attn_mask=mask, is_causal=causal).transpose(1, 2))
        return [q, k, v, bias.contiguous()], fn, "layout=1"
    for nm, args in (("ernie", (1, 1, 272, 272, 16, "boolkey")), ("plain_mmdit", (1, 4, 76, 76, 16, "boolkey")),
                     ("ltx2_cross", (2, 2, 512, 16, 8, "f32head")), ("lumina_next", (2, 3, 64, 64, 8, "boolfull_exp")),
                     ("minimax_causal", (1, 2, 8, 8, 16, "causal")), ("key_L80", (2, 4, 80, 80, 64, "boolkey")),
                     ("key_L72", (2, 4, 72, 72, 64, "boolkey"))):
        def f_zoo(args=args):
            return sdpa_zoo(*args)
        CASES.append(("sdpa_zoo_%s" % nm, "sdpa", f_zoo))

    # Conv3d patch embedding 16 -> 1536, patch (1, 2, 2), 5x32x32 latents -> 1280 tokens;
    # batch 2 as in the Wan 1.3B FSDP2 recording (its first divergent site)
    for B in (1, 2):
        def f_conv(B=B):
            conv = torch.nn.Conv3d(16, 1536, kernel_size=(1, 2, 2), stride=(1, 2, 2)).to(dev)
            x = rb(B, 16, 5, 32, 32)
            w = conv.weight.detach().to(bf16).reshape(1536, 64)
            b = conv.bias.detach().to(bf16)
            return [x, w, b], (lambda: conv(x).flatten(2).transpose(1, 2).contiguous()), "patch=1,2,2"
        bt = "" if B == 1 else "b%d_" % B
        CASES.append(("conv3d_patch_%s16x5x32x32_to_1536" % bt, "conv_patch", f_conv))
        CASES.append(("conv3d_cudnn_%s16x5x32x32_to_1536" % bt, "conv_cudnn", f_conv))

    import ctypes
    print("TORCH version=%s cuda=%s cudnn=%s gpu=\"%s\" cc=%s" % (
        torch.__version__, torch.version.cuda, torch.backends.cudnn.version(),
        torch.cuda.get_device_name(0), torch.cuda.get_device_capability(0)), flush=True)
    try:
        print("TORCH preferred_blas=%s allow_bf16_reduced_precision_reduction=%s cudnn.enabled=%s "
              "flash_sdp=%s mem_efficient_sdp=%s cudnn_sdp=%s" % (
                  torch.backends.cuda.preferred_blas_library(),
                  torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
                  torch.backends.cudnn.enabled, torch.backends.cuda.flash_sdp_enabled(),
                  torch.backends.cuda.mem_efficient_sdp_enabled(), torch.backends.cuda.cudnn_sdp_enabled()),
              flush=True)
    except Exception as ex:
        print("TORCH settings: %s" % ex, flush=True)
    for k in ("CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE", "TORCH_CUBLASLT_UNIFIED_WORKSPACE",
              "TORCH_BLAS_PREFER_CUBLASLT"):
        print("TORCH env %s=%s" % (k, os.environ.get(k, "")), flush=True)

    # does autocast run rms_norm in fp32 (bf16 operands, fp32 result)?
    rms_upcast = [False]
    with torch.autocast("cuda", dtype=bf16):
        probe = F.rms_norm(rb(4, 256), (256,), torch.ones(256, device=dev, dtype=bf16), 1e-6)
    rms_upcast[0] = probe.dtype == torch.float32
    print("TORCH autocast_rms_norm_dtype=%s" % probe.dtype, flush=True)

    only = os.environ.get("PARITY_CASES")  # a regular expression: only the cases it finds in their name
    for name, op, fn in CASES:
        if only and not re.search(only, name):
            continue
        run(name, op, fn)
    man.close()

    # which cuBLAS(Lt)/cuDNN builds this process loaded
    libs = {}
    with open("/proc/self/maps") as mf:
        for line in mf:
            p = line.split()[-1] if "/" in line else ""
            base = os.path.basename(p)
            for key in ("libcublasLt.so", "libcublas.so", "libcudnn.so", "libcudnn_engines", "libcudnn_graph"):
                if base.startswith(key):
                    libs[base] = p
    dirs = []
    for base, p in sorted(libs.items()):
        print("TORCHLIB %s" % p, flush=True)
        d = os.path.dirname(p)
        if d not in dirs:
            dirs.append(d)
    for base, p in libs.items():
        if base.startswith("libcublasLt.so"):
            try:
                lib = ctypes.CDLL(p)
                lib.cublasLtGetVersion.restype = ctypes.c_size_t
                print("TORCH cublaslt_version=%d" % lib.cublasLtGetVersion(), flush=True)
            except OSError as ex:
                print("TORCH cublaslt_version=? (%s)" % ex, flush=True)
    with open(os.path.join(outdir, "torch_libdirs.txt"), "w") as f:
        f.write(":".join(dirs))


# ----------------------------------------------------------------- compare

def ordered(bits, width):
    """Maps float bit patterns to integers ordered like the floats."""
    b = bits.astype(np.int64)
    sign = np.int64(1) << (width - 1)
    mag = b & (sign - 1)
    return np.where(b & sign, -mag, mag)


def parse_manifest(d):
    cases, cur = [], None
    with open(os.path.join(d, "manifest.txt")) as f:
        for line in f:
            t = line.split()
            if not t or t[0].startswith("#"):
                continue
            if t[0] == "case":
                cur = {"name": t[1], "op": t[2]}
            elif t[0] == "out":
                cur["dtype"], nd = t[1], int(t[2])
                cur["shape"] = [int(x) for x in t[3:3 + nd]]
            elif t[0] == "end":
                cases.append(cur)
    return cases


# Cases whose claim is torch's bits under the torch profile: a mismatch (or a missing output) of the
# first tag fails the compare (exit 1); the other cases' mismatches are the table, not a failure.
BITWISE = re.compile(r"^bmm_")


def compare(d, tags):
    cases = parse_manifest(d)
    summary = {t: [0, 0] for t in tags}
    failed = []
    for c in cases:
        width = 32 if c["dtype"] == "fp32" else 16
        npt = np.uint32 if width == 32 else np.uint16
        ref = np.fromfile(os.path.join(d, "%s.torch.bin" % c["name"]), dtype=npt)
        shape = "x".join(str(s) for s in c["shape"])
        for i, tag in enumerate(tags):
            p = os.path.join(d, "%s.%s.bin" % (c["name"], tag))
            head = "PARITY" if i == 0 else "VARIANT %s" % tag
            must = i == 0 and BITWISE.search(c["name"]) is not None
            if not os.path.exists(p):
                print("%s %s %s mismatches=MISSING" % (head, c["name"], shape))
                if must:
                    failed.append(c["name"])
                continue
            got = np.fromfile(p, dtype=npt)
            if got.size != ref.size:
                print("%s %s %s mismatches=SIZE(%d vs %d)" % (head, c["name"], shape, got.size, ref.size))
                if must:
                    failed.append(c["name"])
                continue
            expo = (npt(0xff) << 23) if width == 32 else npt(0x7f80)
            mant = (npt(1) << 23) - 1 if width == 32 else npt(0x7f)
            nan_r = ((ref & expo) == expo) & ((ref & mant) != 0)
            nan_g = ((got & expo) == expo) & ((got & mant) != 0)
            diff = (ref != got) & ~(nan_r & nan_g)
            n = int(diff.sum())
            ulp = 0
            if n:
                ulp = int(np.abs(ordered(ref[diff], width) - ordered(got[diff], width)).max())
            summary[tag][1] += 1
            if n == 0:
                summary[tag][0] += 1
            print("%s %s %s mismatches=%d/%d max_ulp=%d" % (head, c["name"], shape, n, ref.size, ulp))
            if must and n:
                failed.append(c["name"])
    for tag in tags:
        print("SUMMARY %s: %d/%d cases bitwise equal to torch" % (tag, summary[tag][0], summary[tag][1]))
    for name in failed:
        print("FAIL %s: claimed bitwise equal to torch under the torch profile (tag %s)" % (name, tags[0]))
    return 1 if failed else 0


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "gen":
        torch_gen(sys.argv[2])
    elif len(sys.argv) >= 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3:]))
    else:
        sys.stderr.write(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
