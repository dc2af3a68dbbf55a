#!/usr/bin/env bash
# One-off device probe: environment facts and the forward profiles (drift and torch).
set -u
OUT=${OUT:-/tmp/probe}; mkdir -p "$OUT"
{
  echo "== env"; nproc; nvidia-smi -L; which mpirun mpicc nsys ncu clang gcc cmake h5cc python3
  python3 -c "import torch,sys; print(torch.__version__, torch.cuda.device_count(), sys.version)"
  python3 -c "import torch.distributed.fsdp as f; print(f.fully_shard, f.MixedPrecisionPolicy)"
  python3 - <<'PY'
import importlib.util, os, glob
for m in ["nvidia.nccl", "nvidia.cublas", "nvidia.cuda_runtime", "nvidia.cuda_cupti", "nvidia.nvtx"]:
    s = importlib.util.find_spec(m)
    loc = list(s.submodule_search_locations) if s else None
    print(m, loc)
    if loc:
        for f in glob.glob(loc[0] + "/**/*.so*", recursive=True)[:6] + glob.glob(loc[0] + "/include/*.h")[:6]:
            print("   ", f)
PY
  ls /usr/include/nccl.h /usr/lib/x86_64-linux-gnu/libnccl* 2>&1 | head
  ls /usr/lib/x86_64-linux-gnu/openmpi 2>&1 | head -3
} >"$OUT/env.txt" 2>&1
STAGES=build DEBS=$PWD/.debs OUT=$OUT bash tests/gpu/run.sh >"$OUT/run.txt" 2>&1
B=/tmp/drift-gpu-build
export LD_LIBRARY_PATH=/tmp/drift-gpu-prefix/usr/lib/x86_64-linux-gnu:/tmp/drift-gpu-prefix/usr/lib/x86_64-linux-gnu/openblas-pthread:${LD_LIBRARY_PATH:-}
{
  $B/bench_cuda_forward 2>&1 | tail -3
  DRIFT_EXEC_PROFILE=1 $B/bench_cuda_forward "wan2.2:layers=8,dim=3072,heads=24,ffn_dim=14336,frames=1,height=128,width=128,text_len=512" 3 2>&1 | tail -24
  DRIFT_EXEC_PROFILE=1 $B/bench_cuda_forward "wan2.2:layers=1,dim=3072,heads=24,ffn_dim=14336,frames=1,height=128,width=128,text_len=512" 3 2>&1 | tail -24
  $B/bench_cuda_forward "wan2.2:layers=1,dim=3072,heads=24,ffn_dim=14336,frames=1,height=128,width=128,text_len=512" 5 2>&1 | tail -2
  env -u LD_LIBRARY_PATH python3 bench/cuda_forward_torch.py --profile 2>&1 | tail -40
  env -u LD_LIBRARY_PATH python3 bench/cuda_forward_torch.py --layers 1 2>&1 | tail -2
} >"$OUT/profile.txt" 2>&1
tail -5 "$OUT/run.txt"
