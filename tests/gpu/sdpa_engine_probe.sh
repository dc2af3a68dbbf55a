#!/usr/bin/env bash
# Which cuDNN engine runs SDPA under torch 2.11 and under drift's torch
# profile (issue 16: drift's cuDNN SDPA measured 1.28 ms against torch's
# ~0.2 ms at B=1, H=24, L=4096, D=128)? cuDNN's own API log of both, reduced
# to the engine / knob / version lines, and the libraries each process maps.
#   BUILD=/tmp/drift-gpu-build OUT=$OUT bash tests/gpu/sdpa_engine_probe.sh
set -u
BUILD="${BUILD:-/tmp/drift-gpu-build}"
OUT="${OUT:?set OUT}"; mkdir -p "$OUT"
LIBD=$(find /tmp/drift-gpu-prefix \( -name '*.so' -o -name '*.so.*' \) -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
reduce() { grep -n -i -E 'engine|knob|cudnn_version|cudnnGetVersion|version' "$1" | grep -v -i 'heur_mode' | cut -c1-240 | head -120; }
CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG="$OUT/cudnn_torch.raw" timeout 90 python3 - > "$OUT/sdpa_torch.txt" 2>&1 <<'PY'
import torch, torch.nn.functional as F
print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version())
q = torch.randn(1, 24, 4096, 128, device="cuda", dtype=torch.bfloat16)
for _ in range(3):
    F.scaled_dot_product_attention(q, q, q)
torch.cuda.synchronize()
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
e0.record()
for _ in range(10):
    F.scaled_dot_product_attention(q, q, q)
e1.record(); torch.cuda.synchronize()
print("torch sdpa ms", e0.elapsed_time(e1) / 10)
import re
print([l for l in open("/proc/self/maps").read().split("\n") if "cudnn" in l][:3])
PY
(cd "$BUILD" && CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG="$OUT/cudnn_drift.raw" LD_LIBRARY_PATH=$LIBD timeout 90 ./bench_cuda_attention 3 > "$OUT/sdpa_drift.txt" 2>&1)
(cd "$BUILD" && LD_LIBRARY_PATH=$LIBD ldd ./bench_cuda_attention | grep -i -E 'cudnn|cublas') >> "$OUT/sdpa_drift.txt" 2>&1
reduce "$OUT/cudnn_torch.raw" > "$OUT/cudnn_torch.txt"; reduce "$OUT/cudnn_drift.raw" > "$OUT/cudnn_drift.txt"
for f in "$OUT"/*.raw; do ls -la "$f"; tail -c 3000000 "$f" > "${f%.raw}.tail"; rm -f "$f"; done
tail -3 "$OUT/sdpa_torch.txt"; grep -E 'torch profile|cudnn|cublas' "$OUT/sdpa_drift.txt"
