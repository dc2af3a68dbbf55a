#!/usr/bin/env bash
# Parity per op-registry row against torch on this GPU (issue 31): runs
# `gpu_test_parity aten` (every case of tests/data/parity/aten_cases.jsonl on
# ref, cpu, cuda and cuda:kernels=torch against ref and the fp64 oracle) with
# torch's own cuBLAS(Lt)/cuDNN first on LD_LIBRARY_PATH, writing the torch
# profile's outputs (ATEN_PARITY_DUMP), then tests/gpu/aten_parity.py runs
# each case's graph with torch's real ATen ops on the GPU (bf16 autocast for
# the bf16 plan) and compares: bitwise where the case claims it, else its
# tolerance. PASS/FAIL lines, RESULT lines; logs under $OUT.
#
#   DEBS=$PWD/.debs OUT=$OUT STAGES="build test scripts" TESTS=gpu_test_parity SCRIPTS=aten_parity bash tests/gpu/run.sh
#   BUILD=/tmp/drift-gpu-build OUT=/some/dir bash tests/gpu/aten_parity.sh
# Exit 0 when both sides ran and nothing failed, 1 otherwise, 77 without a GPU.
set -u
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$SRC/gpu-out/aten_parity}
BUILD=${BUILD:-/tmp/drift-gpu-build}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
T0=$(date +%s)
say() { echo "[aten_parity $(($(date +%s) - T0))s] $*"; }

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: no GPU"
  exit 77
fi
EXE=$BUILD/tests/gpu_test_parity
if [ ! -x "$EXE" ]; then
  say "building gpu_test_parity"
  cmake --build "$BUILD" -j"$(nproc)" --target gpu_test_parity >"$OUT/build.log" 2>&1 || { tail -n 30 "$OUT/build.log"; echo "FAIL: gpu_test_parity did not build"; exit 1; }
fi

# run.sh gives scripts the original LD_LIBRARY_PATH: add PREFIX's library folders (OpenBLAS,
# cmocka) as run.sh does for its tests, and torch's cuBLAS(Lt)/cuDNN first
. "$SRC/tests/gpu/lib_torch_libs.sh"
TL=$(torch_lib_dirs)
PFX=${PREFIX:-/tmp/drift-gpu-prefix}
PL=""
[ -d "$PFX" ] && PL=$(find "$PFX" \( -name '*.so' -o -name '*.so.*' \) -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
say "torch's libraries: ${TL:-none found}"

DUMP=$OUT/drift_outputs.jsonl
rm -f "$DUMP"
say "drift: gpu_test_parity aten (log: $OUT/drift.log)"
(cd "$BUILD" && env LD_LIBRARY_PATH="${TL}${TL:+:}${PL}${LD_LIBRARY_PATH:-}" DRIFT_SRC="$SRC" ATEN_PARITY_DUMP="$DUMP" \
   timeout 300 "$EXE" aten) >"$OUT/drift.log" 2>&1
DRC=$?
grep -E '^(FAIL|aten_parity:)' "$OUT/drift.log" | head -n 60
if [ "$DRC" = 0 ]; then
  echo "PASS gpu_test_parity aten (every case on cuda and cuda:kernels=torch against ref and the oracle)"
else
  echo "FAIL gpu_test_parity aten: rc $DRC (see drift.log)"
  tail -n 5 "$OUT/drift.log"
fi
if [ ! -s "$DUMP" ]; then
  echo "FAIL: drift wrote no outputs ($DUMP)"
  exit 1
fi

say "torch: tests/gpu/aten_parity.py (log: $OUT/torch.log)"
(cd "$SRC" && timeout 300 "$PY" tests/gpu/aten_parity.py tests/data/parity/aten_cases.jsonl "$DUMP") >"$OUT/torch.log" 2>&1
TRC=$?
grep -E '^FAIL' "$OUT/torch.log"
grep -E '^RESULT' "$OUT/torch.log"
grep -E '^PASS' "$OUT/torch.log"
if [ "$TRC" != 0 ]; then
  echo "FAIL aten_parity.py: rc $TRC (see torch.log)"
  grep -q '^RESULT' "$OUT/torch.log" || tail -n 20 "$OUT/torch.log" # it stopped early: why
fi
say "done"
[ "$DRC" = 0 ] && [ "$TRC" = 0 ]
