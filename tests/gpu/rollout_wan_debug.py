"""The rollout side of the frozen-weight debug run of fsdp_wan_debug.py, as its
own process (issue 17: the trainer and the rollout engine record separately).

The same model, weights, data and SDE noise as the trainer script (same seeds),
run all-bf16 (parameters bf16, RoPE tables fp32, bf16 autocast) like the
trainer's in-process rollout copy, with the recorder's hooks on the same module
names, into one trace of side "rollout": module outputs, output:noise_pred,
sde:x_next and logprob:old. `drift top TRAINER --against ROLLOUT --follow`
then compares the two files layer by layer while both are written.
"""
import argparse
import copy
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "recorder", "python"))
from drift_recorder import Recorder  # noqa: E402
from fsdp_wan_debug import CFG, WanLike, family_spec, init_weights, sde_logprob  # noqa: E402

ROLLOUT_PLAN = {"name": "wan2_2_rollout_all_bf16", "fsdp_master_dtype": "fp32", "fsdp_reduce_dtype": "fp32",
                "diffusion_forward_dtype": "bf16", "sglang_dit_precision": "bf16",
                "input_dtype_policy": {"latents": None, "cond": None, "timestep": None}, "param_dtype_patterns": []}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--trace", default="rollout.h5")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--sleep", type=float, default=0.0, help="seconds between steps")
    ap.add_argument("--run-id", default="fsdp-wan-debug")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    torch.cuda.set_device(int(os.environ.get("DRIFT_ROLLOUT_GPU", "0")))
    dev = torch.device("cuda", torch.cuda.current_device())
    c = CFG
    torch.manual_seed(a.seed)
    model = WanLike(c)
    init_weights(model, a.seed)
    rollout = copy.deepcopy(model).to(dev).to(torch.bfloat16)  # as the trainer script's rollout copy
    rollout.rope_cos.data = model.rope_cos.to(dev)
    rollout.rope_sin.data = model.rope_sin.to(dev)
    rollout.eval()
    os.makedirs(a.out, exist_ok=True)
    rec = Recorder(os.path.join(a.out, a.trace), side="rollout", rank=0, world_size=1, run_id=a.run_id,
                   family=family_spec(c), plan=ROLLOUT_PLAN, options={"staging_mb": 64, "close_timeout_ms": 20000})
    rec.watch(rollout, outputs=["patch_embedding", "condition_embedder.time_embedder", "condition_embedder.time_proj",
                                "condition_embedder.text_embedder", "blocks.?", "blocks.?.norm[123]",
                                "blocks.?.attn[12]", "blocks.?.ffn", "norm_out", "proj_out"])
    g = torch.Generator(device=dev).manual_seed(a.seed + 7)  # the trainer script's data and noise
    B, C = c["batch"], c["in_channels"]
    x = torch.randn(B, C, c["frames"], c["height"], c["width"], device=dev, generator=g)
    cond = torch.randn(B, c["text_len"], c["text_dim"], device=dev, generator=g)
    sig = torch.linspace(1.0, 0.0, a.steps + 2).tolist()
    smax, eta = sig[1], 0.7
    t0 = time.time()
    for step in range(a.steps):
        sg, sgn = sig[step], sig[step + 1]
        ts = torch.full((B,), sg * 1000.0, device=dev, dtype=torch.float32)
        with rec.step(step), torch.no_grad():
            rec.input("latents", x, x)
            rec.input("cond", cond, cond)
            rec.input("timestep", ts, ts)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                rout = rollout(x, ts, cond)
            rec.output("noise_pred", rout)
            noise = torch.randn(x.shape, device=dev, generator=g)
            _, mu, ns = sde_logprob(x, rout, x, sg, sgn, smax, eta)
            xn = mu + ns * noise
            lp_old, _, _ = sde_logprob(x, rout, xn, sg, sgn, smax, eta)
            rec.sde("x_next", xn)
            rec.sde("params", torch.tensor([sg, sgn, smax, eta], dtype=torch.float32))
            rec.logprob("old", lp_old)
        rec.flush(20000)
        x = xn
        if a.sleep:
            time.sleep(a.sleep)
    err = rec.error
    rec.close()
    print(f"rollout: finished {a.steps} steps in {time.time() - t0:.1f} s; recorder {'OFF: ' + err if err else 'on'}",
          flush=True)


if __name__ == "__main__":
    main()
