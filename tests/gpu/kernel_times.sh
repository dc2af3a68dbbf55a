#!/usr/bin/env bash
# Where the wan2.2-shaped forward's GPU time goes, drift against torch eager
# (issue 16's speed target): builds bench/kernel_times (a CUPTI preload),
# runs bench_cuda_forward under the torch profile and bench/cuda_forward_torch.py
# with it, and prints each process's kernel table (KT lines: total kernel
# time, GPU busy time, gaps between kernels; per kernel name) plus the two
# medians. Needs run.sh's build stage (BUILD) and libcupti (the toolkit's or
# torch's nvidia wheel).
#   BUILD=/tmp/drift-gpu-build OUT=$OUT bash tests/gpu/kernel_times.sh
set -u
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-/tmp/drift-gpu-build}
OUT=${OUT:?set OUT}; mkdir -p "$OUT"
PREFIX=${PREFIX:-/tmp/drift-gpu-prefix}
REPS=${REPS:-10}
CUPTI=$(find /usr/local/cuda*/ /opt -name 'libcupti.so*' 2>/dev/null | head -n1)
[ -n "$CUPTI" ] || { echo "SKIP: no libcupti"; exit 77; }
CD=$(dirname "$CUPTI")
gcc -O2 -shared -fPIC -I/usr/local/cuda/include -o "$OUT/libkernel_times.so" "$SRC/bench/kernel_times/kernel_times.c" \
  "$CUPTI" -Wl,-rpath,"$CD" || { echo "FAIL: building the preload"; exit 1; }
. "$SRC/tests/gpu/lib_torch_libs.sh"
TL=$(torch_lib_dirs)
LIBD=$(find "$PREFIX" -name '*.so*' -printf '%h\n' 2>/dev/null | sort -u | paste -sd: -)
(cd "$BUILD" && KT_OUT="$OUT/kt_drift.txt" LD_PRELOAD="$OUT/libkernel_times.so" LD_LIBRARY_PATH="$TL:$LIBD:$CD" \
  timeout 150 ./bench_cuda_forward "" "$REPS" cuda:0:kernels=torch) > "$OUT/fwd_drift.txt" 2>&1
(cd "$SRC" && KT_OUT="$OUT/kt_torch.txt" LD_PRELOAD="$OUT/libkernel_times.so" LD_LIBRARY_PATH="$CD" \
  timeout 150 python3 bench/cuda_forward_torch.py --reps "$REPS") > "$OUT/fwd_torch.txt" 2>&1
rm -f "$OUT/libkernel_times.so"
echo "== drift: $(grep -o 'median [0-9.]* ms' "$OUT/fwd_drift.txt" | tail -n1)"; head -n 45 "$OUT/kt_drift.txt"
echo "== torch eager: $(grep -o 'median [0-9.]* ms' "$OUT/fwd_torch.txt" | tail -n1)"; head -n 45 "$OUT/kt_torch.txt"
