#!/usr/bin/env bash
# Library identity and the kernel profile on a GPU (issue 16): a trace
# recorded with `drift record --device cuda` stores the GPU and the library
# builds (/libraries), `drift ls` shows them, and `drift replay --device cuda`
# of it reports its own identity, compares ("same libraries"), names its kernel
# profile (exact by default for a drift recording, torch for a PyTorch one,
# --kernels and --device cuda:0:kernels= both honoured) and says plainly when a
# library differs. bisect and invariance report the profile too.
#
#   BUILD=/tmp/drift-gpu-build OUT=DIR bash tests/gpu/identity.sh
#
# Needs a CUDA build of drift ($BUILD/drift or DRIFT_BIN) and a GPU (exit 77
# without one); the steps that edit a trace need python3 with h5py (each says
# SKIP without it). Exit 0 when every check passed.
set -u
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-/tmp/drift-gpu-build}
DRIFT=${DRIFT_BIN:-$BUILD/drift}
OUT=${OUT:-${DRIFT_TMP:-/tmp}/identity}
PY=${PYTHON3:-python3}
# python3 runs with the machine's own libraries (run.sh's PREFIX folders are for drift only)
PYLD=${PY_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}
py() { LD_LIBRARY_PATH=$PYLD "$PY" "$@"; }
PLANS=$SRC/tests/data/plans
[ -x "$DRIFT" ] || { echo "SKIP: $DRIFT not built"; exit 77; }
if ! [ -e /dev/nvidia0 ] && ! command -v nvidia-smi >/dev/null 2>&1; then echo "SKIP: no GPU"; exit 77; fi
W=$OUT/work; rm -rf "$W"; mkdir -p "$W"
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
jq_py() { py -c "import json, sys; d = json.load(sys.stdin); $1"; }
have_h5py=0; py -c "import h5py, numpy" 2>/dev/null && have_h5py=1

T=$W/run.h5
if ! "$DRIFT" record --synthetic tiny-dit --steps 2 --trainer-plan "$PLANS/wan2_2.json" \
     --rollout-plan "$PLANS/wan2_2_no_norm2.json" --device cuda -o "$T" >"$W/record.log" 2>&1; then
  if grep -qi "without CUDA\|no CUDA device\|no such device" "$W/record.log"; then echo "SKIP: $(tail -n1 "$W/record.log")"; exit 77; fi
  echo "FAIL: record --device cuda: $(cat "$W/record.log")"; exit 1
fi

# --- ls shows the identity -------------------------------------------------------------
"$DRIFT" ls "$T" >"$W/ls.txt" 2>&1
line=$(grep '^libraries ' "$W/ls.txt")
echo "RESULT: $line"
if [ -n "$line" ] && ! echo "$line" | grep -q "unknown GPU\|cuBLASLt unknown" && echo "$line" | grep -q "(sm_[0-9]*)"; then
  pass "ls: the GPU, its compute capability and the cuBLASLt version"
else
  fail "ls text: $(cat "$W/ls.txt")"
fi
if "$DRIFT" ls "$T" --json | jq_py '
l = d["libraries"]
assert l and l["gpu_name"] and l["compute_capability"] and l["cublaslt"] > 0 and l["cuda_driver"] > 0 and l["cuda_runtime"] > 0, l
assert l["cublaslt_path"], l
assert l["torch"] is None and d["from_torch"] is False, d
'; then pass "ls --json: gpu_name, compute_capability, driver, runtime, cuBLASLt and its path; not from PyTorch"
else fail "ls --json libraries"; fi
for side in "$T" "${T%.h5}.rollout.h5"; do
  "$DRIFT" ls "$side" --json | jq_py 'assert d["libraries"]["gpu_name"]' || fail "no /libraries in $side"
done

# --- replay compares -------------------------------------------------------------------------
"$DRIFT" replay "$T" --device cuda >"$W/replay.txt" 2>"$W/replay.err"; rc=$?
grep -E '^  (kernels|libraries)|^    (recorded|here)' "$W/replay.txt" | sed 's/^/RESULT: /'
if [ $rc -eq 0 ] && grep -q "^  kernels exact (default: the trace was not recorded from PyTorch)$" "$W/replay.txt" &&
   grep -q "^  libraries: same libraries as the recording (" "$W/replay.txt" && grep -q "^    here:     " "$W/replay.txt"; then
  pass "replay --device cuda: kernels exact by default, same libraries"
else
  fail "replay text (rc $rc): $(cat "$W/replay.txt" "$W/replay.err")"
fi
if "$DRIFT" replay "$T" --device cuda --json 2>/dev/null | jq_py '
import os
l = d["libraries"]
assert d["kernels"] == "exact" and l["verdict"] == "same" and l["bitwise_possible"] is True, (d["kernels"], l)
assert l["replay"]["cublaslt_path"] and os.path.exists(l["replay"]["cublaslt_path"]), l["replay"]
assert l["recorded"]["cublaslt"] == l["replay"]["cublaslt"], l
assert all(x["site"] is None for x in d["first_divergent"]), d["first_divergent"]
'; then pass "replay --json: verdict same, the loaded cuBLASLt path exists, bitwise equal to the recording"
else fail "replay --json (same libraries)"; fi
if "$DRIFT" replay "$T" --device cuda --kernels torch --json 2>/dev/null | jq_py '
assert d["kernels"] == "torch" and d["kernels_why"] == "--kernels", d["kernels"]'; then
  pass "replay --kernels torch: the report names torch"
else fail "replay --kernels torch"; fi
if "$DRIFT" replay "$T" --device cuda:0:kernels=torch --json 2>/dev/null | jq_py '
assert d["kernels"] == "torch" and d["kernels_why"].startswith("--device"), (d["kernels"], d["kernels_why"])'; then
  pass "replay --device cuda:0:kernels=torch keeps working"
else fail "replay --device cuda:0:kernels=torch"; fi
o=$("$DRIFT" replay "$T" --device cuda:0:kernels=torch --kernels exact 2>&1); rc=$?
[ $rc -eq 2 ] && pass "--kernels beside --device ...:kernels=: exit 2" || fail "conflict (rc $rc): $o"

# --- a PyTorch recording (torch named in /libraries), and one with another cuBLASLt ----------------
if [ $have_h5py = 1 ]; then
  edit() { # COPY PYTHON
    cp "$T" "$W/$1.h5"; cp "${T%.h5}.rollout.h5" "$W/$1.rollout.h5"
    py -c "
import h5py, numpy as np, sys
with h5py.File(sys.argv[1], 'r+') as f:
    a = f['/libraries'].attrs
    $2
" "$W/$1.h5"
  }
  edit torch "a['torch'] = np.bytes_(b'2.11.0+cu128')"
  if "$DRIFT" replay "$W/torch.h5" --device cuda --json 2>/dev/null | jq_py '
assert d["kernels"] == "torch" and d["kernels_why"] == "default: the trace was recorded from PyTorch", (d["kernels"], d["kernels_why"])'; then
    pass "replay of a PyTorch recording: kernels torch by default"
  else fail "default for a PyTorch recording"; fi
  edit lt "a['cublaslt'] = np.int64(120000)"
  "$DRIFT" replay "$W/lt.h5" --device cuda >"$W/lt.txt" 2>&1
  grep '^  libraries' "$W/lt.txt" | sed 's/^/RESULT: /'
  if grep -q "^  libraries: bitwise equality with the recording is not expected: cuBLASLt [0-9.]* here vs 12.0.0 recorded" "$W/lt.txt"; then
    pass "replay: another cuBLASLt build is named, bitwise equality not expected"
  else fail "differing cuBLASLt: $(cat "$W/lt.txt")"; fi
else
  echo "SKIP: $PY has no h5py: the PyTorch-default and differing-library checks"
fi

# --- bisect and invariance name the profile ---------------------------------------------------------
if "$DRIFT" bisect "$T" --good "$PLANS/wan2_2_no_norm2.json" --bad "$PLANS/wan2_2.json" --device cuda --kernels torch \
     --json 2>/dev/null | jq_py 'assert d["kernels"] == "torch" and d["kernels_why"] == "--kernels", d.get("kernels")'; then
  pass "bisect --kernels torch: the answer names the profile"
else fail "bisect --kernels"; fi
if "$DRIFT" invariance "$T" --batch 1,2 --device cuda --json 2>/dev/null | jq_py '
assert d["kernels"] == "exact" and d["kernels_why"].startswith("default"), (d.get("kernels"), d.get("kernels_why"))'; then
  pass "invariance --device cuda: kernels exact by default, named"
else fail "invariance kernels"; fi

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
