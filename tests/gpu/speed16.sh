#!/usr/bin/env bash
# Issue 16's speed figures in one run, on the GPU machine, after run.sh's
# build stage (BUILD holds the benchmarks):
#   * the attention bench (exact kernels, the torch profile's cuDNN SDPA with
#     the unified and the composite graph), B 1, H 24, L 4096, D 128;
#   * the wan2.2-shaped forward (d 3072, 24 heads, L 4096, 8 blocks) under the
#     torch profile and the exact kernels, and torch eager on the same shapes
#     (bench/cuda_forward_torch.py), interleaved twice.
# drift runs with torch's own cuBLASLt/cuDNN first on LD_LIBRARY_PATH (the
# libraries torch ran). Prints RESULT lines with the ratios.
#
#   BUILD=/tmp/drift-gpu-build OUT=/some/dir bash tests/gpu/speed16.sh
#   (or through run.sh: STAGES="build scripts" SCRIPTS=speed16)
set -u
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-/tmp/drift-gpu-build}
OUT=${OUT:-/tmp/speed16}
PREFIX=${PREFIX:-/tmp/drift-gpu-prefix}
mkdir -p "$OUT"
[ -x "$BUILD/bench_cuda_forward" ] || { echo "SKIP: no $BUILD/bench_cuda_forward (run run.sh's build stage first)"; exit 77; }
command -v nvidia-smi >/dev/null 2>&1 || { echo "SKIP: no GPU"; exit 77; }
. "$SRC/tests/gpu/lib_torch_libs.sh"
TL=$(torch_lib_dirs)
LIBD=$(find "$PREFIX" -name '*.so*' -printf '%h\n' 2>/dev/null | sort -u | paste -sd: -)
DLD="$TL${TL:+:}$LIBD${LIBD:+:}${LD_LIBRARY_PATH:-}"
echo "INFO: drift's LD_LIBRARY_PATH starts with torch's libraries: ${TL:-none found}"

ms_of() { grep '^BENCH' "$1" | grep -o " $2=[0-9.]*" | tail -n1 | cut -d= -f2; } # " fused_ms=", not "unfused_ms="
div() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.3f", a / b; else print "nan" }'; }

(cd "$BUILD" && LD_LIBRARY_PATH=$DLD timeout 120 ./bench_cuda_attention 10) >"$OUT/attention.log" 2>&1
cat "$OUT/attention.log"
a_ex=$(ms_of "$OUT/attention.log" fused_ms)
a_to=$(ms_of "$OUT/attention.log" torch_ms)
a_co=$(ms_of "$OUT/attention.log" torch_composite_ms)
echo "RESULT attention: torch profile (auto graph) ${a_to:-?} ms, composite graph ${a_co:-?} ms, exact ${a_ex:-?} ms; exact / torch profile $(div "${a_ex:-0}" "${a_to:-0}")x"

for round in 1 2; do
  (cd "$BUILD" && LD_LIBRARY_PATH=$DLD timeout 200 ./bench_cuda_forward "" 10 cuda:0:kernels=torch) >"$OUT/fwd_torch_$round.log" 2>&1
  (cd "$BUILD" && LD_LIBRARY_PATH=$DLD timeout 200 ./bench_cuda_forward "" 10 cuda:0) >"$OUT/fwd_exact_$round.log" 2>&1
  (cd "$SRC" && timeout 200 python3 bench/cuda_forward_torch.py) >"$OUT/fwd_eager_$round.log" 2>&1
  tail -n 3 "$OUT/fwd_torch_$round.log" "$OUT/fwd_exact_$round.log" "$OUT/fwd_eager_$round.log"
done
med() { grep -o 'median [0-9.]* ms' "$1" | tail -n1 | awk '{print $2}'; }
for round in 1 2; do
  t=$(med "$OUT/fwd_torch_$round.log")
  e=$(med "$OUT/fwd_exact_$round.log")
  g=$(med "$OUT/fwd_eager_$round.log")
  echo "RESULT forward round $round: torch profile ${t:-?} ms, exact ${e:-?} ms, torch eager ${g:-?} ms: $(div "${t:-0}" "${g:-0}")x / $(div "${e:-0}" "${g:-0}")x torch eager"
done
