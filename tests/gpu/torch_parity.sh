#!/usr/bin/env bash
# Op parity of the CUDA backend's torch kernel profile against PyTorch on
# this GPU (issue 16): builds drift (tests/gpu/run.sh STAGES=build, unless
# BUILD is configured already), has torch make seeded inputs and its outputs
# (tests/gpu/torch_parity.py gen), runs drift's ops on them
# (tests/gpu/torch_parity_run) under the torch profile with torch's own
# cuBLAS(Lt)/cuDNN libraries first on LD_LIBRARY_PATH, plus variants that show
# which choice torch makes, and prints one line per case:
#   PARITY <case> <shape> mismatches=N/T max_ulp=U
# The log goes to $OUT/torch_parity.log (nothing else is written under OUT;
# data stays in $DATA). Exit 0 when every step ran (mismatches do not fail
# it: the table is the result), 1 when a step failed or a case that claims
# torch's bits (tests/gpu/torch_parity.py BITWISE: the bmm_* cases) is not
# bitwise equal under the torch profile (its compare prints FAIL lines).
#
#   OUT=/some/dir bash tests/gpu/torch_parity.sh
# Environment: PARITY_CASES (a regex: only those cases), PARITY_QUICK=1 (only the torch profile's run),
# OUT (default <repo>/gpu-out/torch_parity), BUILD (default
# /tmp/drift-gpu-build), DATA (default /tmp/drift-torch-parity), PYTHON
# (python3 with torch), PREFIX/DEBS as for run.sh.
set -u
# the whole run stays under 5.5 minutes, build included
if [ -z "${TORCH_PARITY_INNER:-}" ]; then
  TORCH_PARITY_INNER=1 timeout "${TORCH_PARITY_TIMEOUT:-330}" bash "${BASH_SOURCE[0]}" "$@"
  rc=$?
  [ $rc = 124 ] && echo "[torch_parity] TIMEOUT after ${TORCH_PARITY_TIMEOUT:-330}s"
  exit $rc
fi
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$SRC/gpu-out/torch_parity}
BUILD=${BUILD:-/tmp/drift-gpu-build}
DATA=${DATA:-/tmp/drift-torch-parity}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
LOG=$OUT/torch_parity.log
: >"$LOG"
T0=$(date +%s)
OK=1
say() { echo "[torch_parity $(($(date +%s) - T0))s] $*" | tee -a "$LOG"; }
# runs "$@" with a timeout, output into the log (and stdout)
step() {
  local t=$1; shift
  timeout "$t" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || say "step rc=$rc: $*"
  return "$rc"
}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  say "SKIP: no GPU"
  exit 77
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | sed 's/^/GPU /' | tee -a "$LOG"

# ------------------------------------------------------------ build
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  say "configure + build via tests/gpu/run.sh STAGES=build"
  STAGES=build BUILD=$BUILD OUT=$DATA/build-logs step 200 bash "$SRC/tests/gpu/run.sh" >/dev/null || OK=0
  tail -n 5 "$DATA/build-logs/build.log" 2>/dev/null | tee -a "$LOG"
fi
say "build torch_parity_run"
step 120 cmake --build "$BUILD" -j"$(nproc)" --target torch_parity_run >/dev/null || OK=0
RUNNER=$BUILD/tests/torch_parity_run
if [ ! -x "$RUNNER" ]; then
  say "FAIL: $RUNNER was not built"
  cmake --build "$BUILD" --target torch_parity_run 2>&1 | tail -n 30 | tee -a "$LOG"
  exit 1
fi

# ------------------------------------------------------------ torch side
rm -rf "$DATA/cases"
mkdir -p "$DATA/cases"
say "torch: inputs and outputs"
(cd "$SRC" && PYTHONUNBUFFERED=1 step 150 "$PY" tests/gpu/torch_parity.py gen "$DATA/cases") || OK=0
if [ ! -s "$DATA/cases/manifest.txt" ]; then
  say "FAIL: torch wrote no manifest"
  exit 1
fi
TORCHLIBS=$(cat "$DATA/cases/torch_libdirs.txt" 2>/dev/null || true)
say "torch's library folders: ${TORCHLIBS:-none found}"

# ------------------------------------------------------------ drift side
# TAG PROFILE[:OPTION=V] OPS LIBS: one run of the driver (OPS "" = all; the
# options are the cuda backend spec's torch options, kernels/cuda/cuda_backend.h)
drift_run() {
  local tag=$1 prof=$2 ops=$3 libs=$4; shift 4
  say "drift: $tag ($prof${ops:+, $ops}${*:+, $*})"
  env LD_LIBRARY_PATH="${libs}${libs:+:}${LD_LIBRARY_PATH:-}" "$@" timeout 60 "$RUNNER" "$DATA/cases" "$prof" "$tag" \
    ${ops:+"$ops"} 2>&1 | grep -v '^RUN .* ok$' | tee -a "$LOG"
}
drift_run torch torch "" "$TORCHLIBS"
if [ "${PARITY_QUICK:-0}" = 1 ]; then # only torch's own profile (with PARITY_CASES: a few cases in one short call)
  drift_run flashfast torch:flash_fast=1 sdpa "$TORCHLIBS"
  (cd "$SRC" && step 90 "$PY" tests/gpu/torch_parity.py compare "$DATA/cases" torch flashfast) || OK=0
  say "done (log: $LOG)"
  [ $OK = 1 ]
  exit
fi
drift_run exact exact "" "$TORCHLIBS"
drift_run lt torch:torch_gemm=lt linear "$TORCHLIBS"
drift_run cublas torch:torch_gemm=cublas linear "$TORCHLIBS"
drift_run ws32m torch:lt_ws_kib=32768 linear "$TORCHLIBS"
drift_run ws0 torch:lt_ws_kib=0 linear "$TORCHLIBS"
drift_run lnc1 torch:ln_combine=1 layer_norm "$TORCHLIBS"
drift_run lnc2 torch:ln_combine=2 layer_norm "$TORCHLIBS"
drift_run lnt256 torch:ln_threads=256 layer_norm "$TORCHLIBS"
drift_run rmsv1 torch:rms_variant=1 rms_norm "$TORCHLIBS"
drift_run rmsv2 torch:rms_variant=2 rms_norm "$TORCHLIBS"
drift_run rmsnw torch:rms_variant=4 rms_norm "$TORCHLIBS"
drift_run rmscomp torch:rms_variant=8 rms_norm "$TORCHLIBS"
drift_run convheura torch:conv_heur=a conv_cudnn "$TORCHLIBS"
drift_run convheurb torch:conv_heur=b conv_cudnn "$TORCHLIBS"
drift_run convskip1 torch:conv_skip=1 conv_cudnn "$TORCHLIBS"
drift_run convskip2 torch:conv_skip=2 conv_cudnn "$TORCHLIBS"
drift_run convskip3 torch:conv_skip=3 conv_cudnn "$TORCHLIBS"
drift_run sdpastats torch:sdpa_stats=1 sdpa "$TORCHLIBS"
drift_run sdpacomp torch:sdpa_graph=composite sdpa "$TORCHLIBS"
drift_run sdpauni torch:sdpa_graph=unified sdpa "$TORCHLIBS"
drift_run flashfast torch:flash_fast=1 sdpa "$TORCHLIBS"
drift_run syslibs torch linear,sdpa,conv_patch,conv_cudnn ""

# ------------------------------------------------------------ table
say "compare"
(cd "$SRC" && step 90 "$PY" tests/gpu/torch_parity.py compare "$DATA/cases" torch exact lt cublas ws32m ws0 lnc1 lnc2 lnt256 rmsv1 rmsv2 rmsnw rmscomp convheura convheurb convskip1 convskip2 convskip3 sdpastats sdpacomp sdpauni flashfast syslibs) ||
  OK=0
say "done (log: $LOG)"
[ $OK = 1 ]
