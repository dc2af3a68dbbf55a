#!/usr/bin/env bash
# A/B of the torch profile's GEMM workspaces on recorded zoo traces (after zoo.sh record): each
# trace replayed on cuda against the recording with the recorded workspaces (the default, from
# /libraries) and with WS_SPEC (default drift's old default: cuBLAS 32 MiB, cuBLASLt 1 MiB).
#   MODELS=A,B BUILD=... OUT=$OUT bash tests/gpu/ws_ab.sh   -> $OUT/ws_ab.txt
set -u
BUILD="${BUILD:-/tmp/drift-gpu-build}"; W="${WORK:-/tmp/zoo}"; OUT="${OUT:?set OUT}"
SPEC="${WS_SPEC:-cublas_ws=33554432:lt_ws_kib=1024}"
mkdir -p "$OUT"
for m in ${MODELS//,/ }; do
  tr="$W/rec/$m/trainer.h5"
  for dev in cuda "cuda:0:$SPEC"; do
    "$BUILD/drift" replay "$tr" --device "$dev" --kernels torch --ref trainer --json > /tmp/ws_ab.json 2> /tmp/ws_ab.err
    python3 - "$m" "$dev" /tmp/ws_ab.json <<'PY' >> "$OUT/ws_ab.txt"
import json, sys
m, dev, p = sys.argv[1:4]
try:
    d = json.load(open(p))
except Exception as e:  # noqa: BLE001
    print(m, dev, "no json:", e); sys.exit()
s = [x for x in d.get("sites", []) if x.get("site") == "output:noise_pred"]
first = next((x.get("site") for x in d.get("sites", []) if x.get("max_abs_diff")), None)
print(m, dev, "kernels_why:", d.get("kernels_why"), "| output max|d|:", s[0].get("max_abs_diff") if s else None, "| first differing site:", first)
PY
  done
done
cat "$OUT/ws_ab.txt"
