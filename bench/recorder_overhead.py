"""Overhead of drift_recorder hooks on a training step (issue 7 part 2).

One GPU, the Wan-like DiT of tests/gpu/fsdp_wan_debug.py (diffusers names,
drift's op order) at a realistic size: d=1536, 12 heads, L=4096 tokens
(latent 64x128x128 -> patch 1x2x2), 8 blocks, FFN 8960, 512 text tokens;
fp32 masters, bf16 autocast, forward + backward of a scalar loss. Three
configurations, each step timed with CUDA events, run interleaved step by
step (--rounds rounds of --steps steps each, the first round not counted), so
that drift of the machine over the run affects all three alike:

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
        python3 bench/recorder_overhead.py [--steps 1] [--rounds 81] [--dir /tmp]
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


def run(model, inputs, steps, first_step, rec=None):
    """steps training steps (forward + backward), timed one by one with CUDA
    events; the recorder, if any, records steps first_step, first_step+1, ..."""
    lat, ts, cond = inputs
    times = []
    for i in range(steps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        if rec is not None:
            rec.begin_step(first_step + i)
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
        times.append(s.elapsed_time(e))
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1, help="steps per configuration per round")
    ap.add_argument("--rounds", type=int, default=81, help="interleaved rounds (the first one is not counted)")
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

    # The three configurations run interleaved, in rounds of --steps steps
    # each (baseline, stats, full/10, baseline, ...), so that the machine's
    # drift over the run (clocks, allocator, other tenants) hits them alike.
    modes = (("baseline", None), ("stats", "none"), ("full/10", "every:10"))
    recs = {}
    for name, store in modes:
        if store is None:
            continue
        recs[name] = Recorder(os.path.join(d, f"bench_{store.replace(':', '')}.h5"), run_id="bench", family="",
                              options={"store_steps": store, "staging_mb": 512})
        recs[name].prepare_device()
    res = {name: [] for name, _ in modes}
    rounds_mean = {name: [] for name, _ in modes}
    next_step = {name: 0 for name, _ in modes}
    run(model, inputs, a.warmup, 0)  # warm-up without any recorder
    for r in range(a.rounds):
        for name, _ in modes:
            rec = recs.get(name)
            if rec is not None:  # only this configuration's hooks are installed while it runs
                rec.watch(model, outputs="blocks.?", param_dtypes=False)
            t = run(model, inputs, a.steps, next_step[name], rec)
            if rec is not None:
                rec.unwatch()
            next_step[name] += a.steps
            if r > 0 or a.rounds == 1:  # the first round of each warms its recorder up
                res[name] += t
                rounds_mean[name].append(statistics.mean(t))
    for name, rec in recs.items():
        cnt = rec.counters()
        rec.close()
        print(f"  {name}: records {cnt.get('records')}, stored {cnt.get('stored')}, dropped {cnt.get('dropped')}, "
              f"sampled out {cnt.get('sampled_out')}, recorder error: {rec.error or 'none'}")

    def trimmed(t, frac=0.1):
        """Mean without the lowest and highest 10 % (robust to the host's
        occasional stalls, which hit every configuration alike)."""
        t = sorted(t)
        k = int(len(t) * frac)
        return statistics.mean(t[k:len(t) - k] if len(t) > 2 * k else t)

    base_med, base_mean, base_trim = (statistics.median(res["baseline"]), statistics.mean(res["baseline"]),
                                      trimmed(res["baseline"]))
    for name, _ in modes:
        t = res[name]
        med, mean, trm = statistics.median(t), statistics.mean(t), trimmed(t)
        print(f"{name:10s} median {med:8.3f} ms  mean {mean:8.3f} ms  trimmed mean {trm:8.3f} ms  min {min(t):8.3f}  "
              f"max {max(t):8.3f}  ({len(t)} steps)  overhead median {100 * (med / base_med - 1):+6.2f} %  "
              f"mean {100 * (mean / base_mean - 1):+6.2f} %  trimmed {100 * (trm / base_trim - 1):+6.2f} %")
    so = 100 * (statistics.mean(res["stats"]) / base_mean - 1)
    fo = 100 * (statistics.mean(res["full/10"]) / base_mean - 1)
    print(f"acceptance (means): stats every step {so:+.2f} % (<= 2 %: {'PASS' if so <= 2 else 'FAIL'}), "
          f"full tensors 1 step in 10 {fo:+.2f} % (<= 5 %: {'PASS' if fo <= 5 else 'FAIL'})")

if __name__ == "__main__":
    main()
