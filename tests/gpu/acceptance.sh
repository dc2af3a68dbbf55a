#!/usr/bin/env bash
# Issues 31 and 33 on the GPU machine in one device call: builds drift, then runs
# side by side
#   - gpu_test_parity (the kernel table and every op-registry row's ATen cases on
#     ref, cpu, cuda, cuda:kernels=torch) and tests/gpu/aten_parity.sh (the same
#     cases against torch's own ATen ops),
#   - tests/gpu/torch_parity.sh for PARITY_CASES (the torch profile's kernels
#     against torch, bitwise),
# and in the foreground the zoo (tests/gpu/zoo.sh: record, replay, invariance).
# Everything small comes back: the zoo's tables and $OUT/acceptance_logs.tgz
# (at most 6 files under $OUT).
#
#   tar xzf .pydeps/pipelines_full.tgz -C .pydeps/diffusers
#   DEBS=$PWD/.debs OUT=$OUT bash tests/gpu/acceptance.sh
# with .pydeps and .debs carried (prepared here by scripts/gpu_carry.sh from a diffusers snapshot).
# Env: GEMM_PROBE (1: also tests/gpu/gemm_forms_probe.sh), BUILD (/tmp/drift-gpu-build), TIME_BUDGET (s for the whole call, default 540),
# PARITY_CASES (regex, default the torch profile's newer kernels), MODELS (zoo subset),
# ZOO_STAGES (default "record replay invariance").
set -u
S="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:?set OUT}"
BUILD="${BUILD:-/tmp/drift-gpu-build}"
BUDGET="${TIME_BUDGET:-540}"
L=/tmp/acceptance_logs
T0=$(date +%s)
rm -rf "$L"; mkdir -p "$L" "$OUT"
say() { echo "[acceptance $(($(date +%s) - T0))s] $*"; }
left() { echo $((BUDGET - ($(date +%s) - T0))); }

STAGES=build BUILD_TARGETS="drift drift_recorder_shared torch_parity_run gpu_test_parity" BUILD="$BUILD" \
  OUT="$L/build" bash "$S/tests/gpu/run.sh" > "$L/build.out" 2>&1
say "build: $(tail -1 "$L/build/summary.txt" 2>/dev/null)"
[ -x "$BUILD/drift" ] || { say "FAIL: drift did not build"; tar czf "$OUT/acceptance_logs.tgz" -C /tmp acceptance_logs; exit 1; }

(timeout -s KILL $(( $(left) - 30 )) bash -c "
  TORCH_LIBS=1 STAGES=test TESTS=gpu_test_parity BUILD='$BUILD' OUT='$L/parity' bash '$S/tests/gpu/run.sh' > '$L/gpu_test_parity.out' 2>&1
  BUILD='$BUILD' OUT='$L/aten_parity' bash '$S/tests/gpu/aten_parity.sh' > '$L/aten_parity.out' 2>&1
") &
P1=$!
(PARITY_CASES="${PARITY_CASES:-softmax|sum_last|mean_last|sum_mid|mean_mid|rsqrt|sdpa_zoo|sdpa_flash|sdpa_mask_causal}" \
  PARITY_QUICK=1 BUILD="$BUILD" OUT="$L/torch_parity" timeout -s KILL 200 bash "$S/tests/gpu/torch_parity.sh" \
  > "$L/torch_parity.out" 2>&1) &
P2=$!
if [ "${GEMM_PROBE:-1}" = 1 ]; then # the cpu's table of the H200's GEMM forms (kernels/gemm_forms.c) checked
  (BUILD="$BUILD" OUT="$L/gemm_forms" timeout -s KILL 240 bash "$S/tests/gpu/gemm_forms_probe.sh" > "$L/gemm_forms.out" 2>&1) &
  P3=$!
fi

SKIP_BUILD=1 BUILD="$BUILD" ZOO_PACK_TRACES=0 TIME_BUDGET=$(( $(left) - 25 )) ZOO_STAGES="${ZOO_STAGES:-record replay invariance}" \
  OUT="$OUT" bash "$S/tests/gpu/zoo.sh" 2>&1 | tail -6
wait $P2
say "torch_parity: $(grep -h '^SUMMARY' "$L"/torch_parity/*.log 2>/dev/null | tr '\n' ' ')"
grep -h '^PARITY' "$L"/torch_parity/*.log 2>/dev/null | grep -v 'mismatches=0/' | head -20
[ -n "${P3:-}" ] && wait $P3 && say "gemm_forms_probe: $(grep -hE '^(RESULT|FAIL|PASS)' "$L/gemm_forms.out" | head -5 | tr '\n' ' ')"
wait $P1
say "gpu_test_parity: $(grep -h 'passed' "$L/parity/tests.log" 2>/dev/null | tail -2 | tr '\n' ' ')"
say "aten_parity: $(grep -h '^RESULT' "$L/aten_parity.out" "$L"/aten_parity/*.log 2>/dev/null | tr '\n' ' ')"
grep -h '^FAIL' "$L/aten_parity.out" 2>/dev/null | head -15
tar czf "$OUT/acceptance_logs.tgz" -C /tmp acceptance_logs 2>/dev/null
say "done"
