#!/usr/bin/env bash
# Which cuDNN engine runs the Wan Conv3d patch embedding (16 -> 1536, patch
# (1, 2, 2), 5x32x32 latents) at batch 1 and 2 under torch 2.11 and under
# drift's torch profile (issue 16: batch 2 differs in 50 of 3.9 M elements)?
# cuDNN's API log of each, reduced to the engine / knob / heuristics lines.
# Needs torch_parity.sh's cases (DATA) and runner (BUILD).
#   BUILD=/tmp/drift-gpu-build DATA=/tmp/drift-torch-parity OUT=$OUT bash tests/gpu/conv_engine_probe.sh
set -u
BUILD="${BUILD:-/tmp/drift-gpu-build}"
DATA="${DATA:-/tmp/drift-torch-parity}"
OUT="${OUT:?set OUT}"; mkdir -p "$OUT"
TL=$(cat "$DATA/cases/torch_libdirs.txt" 2>/dev/null || true)
reduce() { grep -n -i -E 'engine|knob|behavior|numerical|heur' "$1" | cut -c1-200 | head -150; }
for B in 1 2; do
  CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG="$OUT/conv_torch_b$B.raw" B=$B timeout 90 python3 - > "$OUT/conv_torch_b$B.txt" 2>&1 <<'PY'
import os, torch
B = int(os.environ["B"])
torch.manual_seed(0)
conv = torch.nn.Conv3d(16, 1536, kernel_size=(1, 2, 2), stride=(1, 2, 2)).cuda()
x = torch.randn(B, 16, 5, 32, 32, device="cuda").bfloat16()
with torch.autocast("cuda", dtype=torch.bfloat16):
    y = conv(x)
torch.cuda.synchronize()
print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), "B", B, "y", tuple(y.shape), y.dtype)
PY
  reduce "$OUT/conv_torch_b$B.raw" > "$OUT/conv_torch_b$B.engines"
done
for c in conv3d_cudnn_16x5x32x32_to_1536 conv3d_cudnn_b2_16x5x32x32_to_1536; do
  (cd "$BUILD" && CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG="$OUT/conv_drift_$c.raw" LD_LIBRARY_PATH="$TL${TL:+:}${LD_LIBRARY_PATH:-}" \
    timeout 60 ./tests/torch_parity_run "$DATA/cases" torch probe conv_cudnn > "$OUT/conv_drift_$c.txt" 2>&1)
  reduce "$OUT/conv_drift_$c.raw" > "$OUT/conv_drift_$c.engines"
  break  # one run of the runner covers every conv_cudnn case
done
rm -f "$OUT"/*.raw
for f in "$OUT"/*.engines; do echo "== $f"; grep -i -E 'GLOBAL_INDEX|engine_id|ENGINE_GLOBAL' "$f" | head -12; done
