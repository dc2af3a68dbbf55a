"""Overhead of drift_recorder hooks on a training step (issue 7 part 2).

One GPU, the Wan-like DiT of tests/gpu/fsdp_wan_debug.py (diffusers names,
drift's op order) at a realistic size: d=1536, 12 heads, L=4096 tokens
(latent 64x128x128 -> patch 1x2x2), 8 blocks, FFN 8960, 512 text tokens;
fp32 masters, bf16 autocast, forward + backward of a scalar loss. Three
configurations, each timed with CUDA events over --steps steps after
--warmup steps:

  baseline   no recorder
  stats      every block output recorded every step, tensors sampled out
             (store_steps=none): a small stats kernel per record, 56 bytes back
  full/10    every block output recorded every step, full tensors stored on one
             step in ten (store_steps=every:10): D2H copies into pinned staging,
             written by the recorder's thread

Prints the median (and mean) step time of each and the overheads;
acceptance: stats <= 2 %, full/10 <= 5 % (on the mean, which carries the
stored steps; the median is shown too).

    BUILD=/tmp/drift-gpu-build DRIFT_RECORDER_LIB=$BUILD/libdrift_recorder.so \
        python3 bench/recorder_overhead.py [--steps 20] [--dir /tmp]
"""
import argparse
import os
import statistics
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "recorder", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "gpu"))
from drift_recorder import Recorder  # noqa: E402
import fsdp_wan_debug as wan  # noqa: E402


def run(model, inputs, steps, warmup, rec=None):
    lat, ts, cond = inputs
    times = []
    for i in range(warmup + steps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        if rec is not None:
            rec.begin_step(i)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(lat, ts, cond)
        loss = out.float().pow(2).mean()
        loss.backward()
        if rec is not None:
            rec.end_step()
        e.record()
        torch.cuda.synchronize()
        for p in model.parameters():
            p.grad = None
        if i >= warmup:
            times.append(s.elapsed_time(e))
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--dim", type=int, default=1536)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--ffn", type=int, default=8960)
    ap.add_argument("--hw", type=int, default=128, help="latent height = width (L = (hw/2)^2)")
    ap.add_argument("--dir", default=None, help="where the traces go (default: a temp dir)")
    a = ap.parse_args()
    c = dict(wan.CFG, layers=a.layers, dim=a.dim, heads=a.heads, ffn_dim=a.ffn, in_channels=16, out_channels=16,
             text_dim=4096, text_len=512, freq_dim=256, frames=1, height=a.hw, width=a.hw)
    torch.manual_seed(0)
    dev = torch.device("cuda", 0)
    model = wan.WanLike(c)
    wan.init_weights(model, 0)
    model = model.to(dev)
    g = torch.Generator(device=dev).manual_seed(1)
    inputs = (torch.randn(1, 16, 1, a.hw, a.hw, device=dev, generator=g), torch.tensor([700.0], device=dev),
              torch.randn(1, c["text_len"], c["text_dim"], device=dev, generator=g))
    d = a.dir or tempfile.mkdtemp(prefix="drift-rec-bench-")
    L = (a.hw // 2) ** 2
    print(f"wan-like train step: layers={a.layers} dim={a.dim} heads={a.heads} L={L} ffn={a.ffn}, "
          f"{a.steps} steps after {a.warmup} warm-up, traces in {d}")

    res = {}
    res["baseline"] = run(model, inputs, a.steps, a.warmup)
    for name, store in (("stats", "none"), ("full/10", "every:10")):
        rec = Recorder(os.path.join(d, f"bench_{store.replace(':', '')}.h5"), run_id="bench", family="",
                       options={"store_steps": store, "staging_mb": 512})
        rec.prepare_device()
        rec.watch(model, outputs="blocks.?", param_dtypes=False)
        res[name] = run(model, inputs, a.steps, a.warmup, rec)
        cnt = rec.counters()
        rec.close()
        print(f"  {name}: records {cnt.get('records')}, stored {cnt.get('stored')}, dropped {cnt.get('dropped')}, "
              f"sampled out {cnt.get('sampled_out')}, recorder error: {rec.error or 'none'}")
    res["baseline2"] = run(model, inputs, a.steps, a.warmup)  # drift of the machine over the run

    base_med = statistics.median(res["baseline"] + res["baseline2"])
    base_mean = statistics.mean(res["baseline"] + res["baseline2"])
    for name in ("baseline", "stats", "full/10", "baseline2"):
        t = res[name]
        med, mean = statistics.median(t), statistics.mean(t)
        print(f"{name:10s} median {med:8.3f} ms  mean {mean:8.3f} ms  min {min(t):8.3f}  max {max(t):8.3f}   "
              f"overhead median {100 * (med / base_med - 1):+6.2f} %  mean {100 * (mean / base_mean - 1):+6.2f} %")
    so = 100 * (statistics.mean(res["stats"]) / base_mean - 1)
    fo = 100 * (statistics.mean(res["full/10"]) / base_mean - 1)
    print(f"acceptance: stats every step {so:+.2f} % (<= 2 %: {'PASS' if so <= 2 else 'FAIL'}), "
          f"full tensors 1 step in 10 {fo:+.2f} % (<= 5 %: {'PASS' if fo <= 5 else 'FAIL'})")


if __name__ == "__main__":
    main()
