"""docs/recorder.md's quickstart, as a user runs it after
`pip install --no-build-isolation ./recorder/python` (issue 35): an FSDP2
trainer (a small stand-in model with blocks and a norm2 each) recorded with
the ten quickstart lines, from the installed package (no PYTHONPATH, no
DRIFT_RECORDER_LIB). Run by tests/gpu/replay_libraries.sh:

    torchrun --standalone --nproc_per_node=1 tests/gpu/recorder_quickstart.py WORKDIR

writes WORKDIR/traces/trainer.rank0.h5 and prints one RESULT line.
"""
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ffn = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d)

    def forward(self, x):
        return x + self.norm2(self.ffn(x))


class Model(nn.Module):
    def __init__(self, d=64, n=2):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d) for _ in range(n))
        self.proj_out = nn.Linear(d, d)

    def forward(self, latents, t, cond):
        x = latents + cond + t[:, None, None]
        for b in self.blocks:
            x = b(x)
        return self.proj_out(x)


def main():
    os.chdir(sys.argv[1])
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    torch.manual_seed(0)
    model = Model().cuda()
    loader = [(torch.randn(2, 16, 64, device="cuda"), torch.rand(2, device="cuda"), torch.randn(2, 16, 64, device="cuda"))
              for _ in range(2)]
    import drift_recorder
    assert "site-packages" in drift_recorder.__file__, drift_recorder.__file__  # the installed package
    # ---- the quickstart of docs/recorder.md, its lines as written (the plan read from the checkout)
    from drift_recorder import Recorder                       # pip install --no-build-isolation ./recorder/python
    fully_shard(model)                                        # your FSDP2 wrapping, as usual
    rec = Recorder("traces/trainer.rank{rank}.h5", run_id="debug-1", family="wan2.2:layers=30,dim=3072",
                   plan=open(os.path.join(REPO, "tests/data/plans/wan2_2.json")).read())   # the dtype plan in force
    rec.record_params(model)                                  # this rank's fp32 master shards
    rec.watch(model, outputs=["blocks.*"])                    # each block's output, gathered dtypes
    for step, (latents, t, cond) in enumerate(loader):
        with rec.step(step):
            rec.input("latents", latents); out = model(latents, t, cond); rec.output("noise_pred", out)
    rec.close()                                               # then: drift replay traces/trainer.rank0.h5
    # ----
    print("RESULT quickstart: %s, library %s, %d failures" % (rec.path, drift_recorder.find_library(), rec.failures),
          flush=True)
    dist.destroy_process_group()
    sys.exit(0 if rec.failures == 0 else 1)


if __name__ == "__main__":
    main()
