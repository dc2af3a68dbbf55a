#!/usr/bin/env bash
# Regenerates the figures of docs/RELIABILITY.md (the section between the
# "figures:begin" and "figures:end" markers is rewritten; nothing else is):
#
#   scripts/reliability.sh [RUNS]        (default RUNS = 1000000)
#
#   1. fuzzing: every libFuzzer harness (fuzz/build.sh, clang with
#      -fsanitize=fuzzer,address,undefined) for RUNS executions (-runs=RUNS)
#      over its seeds, after replaying its regression inputs (fuzz/run.sh);
#      TRACE_RUNS overrides RUNS for fuzz_trace (HDF5 makes it ~50 exec/s);
#   2. allocation fault injection: tests/formats/test_fault_alloc.c in the
#      sanitizer build (every allocation of each operation failed in turn);
#   3. regression inputs: tests/formats/test_regress.c in the sanitizer build;
#   4. crash consistency: fuzz/kill_trials.c (ASan + UBSan) with KILL_TRIALS
#      SIGKILL trials (default 200; half of them with a live follow-mode
#      reader) and DISK_TRIALS disk-full trials (default 20, RLIMIT_FSIZE);
#   5. valgrind memcheck over the formats unit tests of the normal build
#      (VALGRIND=0 skips it).
# Environment: FUZZ_PARALLEL (default: nproc), HARNESSES (default: all),
# BUILD_ASAN (default build-reliability-asan), BUILD_PLAIN (default
# build-reliability). Exits 1 if any step failed; the figures are written
# either way, with the failures in them.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
runs="${1:-1000000}"
trace_runs="${TRACE_RUNS:-$runs}"
kill_trials="${KILL_TRIALS:-200}"
disk_trials="${DISK_TRIALS:-20}"
jobs="$(nproc 2>/dev/null || echo 2)"
par="${FUZZ_PARALLEL:-$jobs}"
asan="${BUILD_ASAN:-$root/build-reliability-asan}"
plain="${BUILD_PLAIN:-$root/build-reliability}"
out="$root/build-fuzz/reliability"
mkdir -p "$out"
doc="$root/docs/RELIABILITY.md"
harnesses="${HARNESSES:-fuzz_json fuzz_plan fuzz_plan_flags fuzz_params fuzz_family_spec fuzz_safetensors fuzz_graph fuzz_trace}"
fail=0
t_start=$SECONDS

echo "== 1. fuzzing ($runs executions per harness; fuzz_trace $trace_runs)"
fast=""; slow=""
for h in $harnesses; do if [ "$h" = fuzz_trace ]; then slow="$h"; else fast="$fast $h"; fi; done
: >"$out/fuzz.tsv"
if [ -n "$fast" ]; then
  # shellcheck disable=SC2086
  FUZZ_RUNS="$runs" FUZZ_PARALLEL="$par" FUZZ_KEEP_GOING=1 fuzz/run.sh $fast || fail=1
  tail -n +2 build-fuzz/fuzz/summary.tsv >>"$out/fuzz.tsv"
fi
if [ -n "$slow" ]; then
  FUZZ_RUNS="$trace_runs" FUZZ_KEEP_GOING=1 FUZZ_ARGS="-fork=$par" fuzz/run.sh fuzz_trace || fail=1
  tail -n +2 build-fuzz/fuzz/summary.tsv >>"$out/fuzz.tsv"
fi

echo "== 2-3. sanitizer build: fault injection and regression inputs"
cmake -S "$root" -B "$asan" -DDRIFT_SANITIZE=ON -DDRIFT_CUDA=OFF -DDRIFT_TUI=OFF >"$out/cmake-asan.log" 2>&1 &&
  cmake --build "$asan" -j"$jobs" --target formats_test_fault_alloc formats_test_regress formats_test_safetensors \
    >"$out/build-asan.log" 2>&1 || { echo "sanitizer build failed: $out/build-asan.log"; fail=1; }
fault_status=not-run; regress_status=not-run
if [ -x "$asan/tests/formats_test_fault_alloc" ]; then
  (cd "$asan" && ctest -R 'formats_test_(fault_alloc|regress|safetensors)$' --output-on-failure >"$out/ctest-asan.log" 2>&1)
  grep -q 'formats_test_fault_alloc .*Passed' "$out/ctest-asan.log" && fault_status=passed || { fault_status=FAILED; fail=1; }
  grep -q 'formats_test_regress .*Passed' "$out/ctest-asan.log" && regress_status=passed || { regress_status=FAILED; fail=1; }
fi
# the per-operation counts: the test prints them (ctest keeps only failures' output)
DRIFT_SRC="$root" DRIFT_TESTDATA="$root/tests/data" DRIFT_TMP="$out" \
  "$asan/tests/formats_test_fault_alloc" >"$out/fault.log" 2>&1 || true
fault_ops="$(grep -c 'allocation failure point' "$out/fault.log" || true)"
fault_points="$(grep -o '[0-9]* allocation failure point' "$out/fault.log" | awk '{s+=$1} END {print s+0}')"
regress_inputs="$(find tests/data/regress -type f 2>/dev/null | wc -l)"

echo "== 4. crash consistency ($kill_trials SIGKILL trials, $disk_trials disk-full trials)"
CC_KT="${CC:-clang}"
# shellcheck disable=SC2046
"$CC_KT" -std=c11 -g -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -D_POSIX_C_SOURCE=200809L \
  -DDRIFT_VERSION=\"kill-trials\" -I"$root" $(pkg-config --cflags hdf5) fuzz/kill_trials.c formats/trace_*.c \
  formats/dtype.c formats/json.c formats/err.c formats/alloc.c $(pkg-config --libs hdf5) -lm -o "$out/kill_trials" \
  >"$out/kill-build.log" 2>&1 || { echo "kill_trials build failed: $out/kill-build.log"; fail=1; }
kill_status=not-run
if [ -x "$out/kill_trials" ]; then
  rm -rf "$out/kill"; mkdir -p "$out/kill"
  # a failing trial's file is kept in $out/kill (as the writer left it: *.as-killed)
  if "$out/kill_trials" --trials "$kill_trials" --disk-full "$disk_trials" --seed 1 --dir "$out/kill" --keep-failing \
      >"$out/kill.log" 2>&1; then
    kill_status=passed
  else
    kill_status=FAILED; fail=1
  fi
fi
kill_summary="$(grep '^kill_trials:' "$out/kill.log" 2>/dev/null | sed 's/^kill_trials: //')"
kill_fail_lines="$(grep -c '^FAIL' "$out/kill.log" 2>/dev/null || true)"

echo "== 5. valgrind memcheck (formats unit tests, normal build)"
vg_status=skipped
if [ "${VALGRIND:-1}" = 1 ] && command -v valgrind >/dev/null; then
  cmake -S "$root" -B "$plain" -DDRIFT_CUDA=OFF -DDRIFT_TUI=OFF >"$out/cmake-plain.log" 2>&1 &&
    cmake --build "$plain" -j"$jobs" --target formats_test_fault_alloc formats_test_regress formats_test_safetensors \
      formats_test_dtype >"$out/build-plain.log" 2>&1
  vg_status=clean
  : >"$out/valgrind.log"
  for t in formats_test_dtype formats_test_safetensors formats_test_fault_alloc formats_test_regress; do
    [ -x "$plain/tests/$t" ] || { vg_status="FAILED (not built: $t)"; fail=1; continue; }
    if ! DRIFT_SRC="$root" DRIFT_TESTDATA="$root/tests/data" DRIFT_TMP="$out" PYTHON3=/usr/bin/python3 \
        valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
        --suppressions="$root/fuzz/valgrind.supp" "$plain/tests/$t" >>"$out/valgrind.log" 2>&1; then
      vg_status="FAILED ($t)"; fail=1
    fi
  done
fi

echo "== writing the figures into docs/RELIABILITY.md"
commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
dirty="$(git -C "$root" status --porcelain 2>/dev/null | grep -q . && echo ' + uncommitted changes' || true)"
fig="$out/figures.md"
{
  echo "<!-- figures:begin (generated by scripts/reliability.sh; do not edit by hand) -->"
  echo "Generated $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -m), $jobs cores, commit $commit$dirty, in $(( (SECONDS - t_start) / 60 )) min:"
  echo "\`scripts/reliability.sh $runs\` (TRACE_RUNS=$trace_runs KILL_TRIALS=$kill_trials DISK_TRIALS=$disk_trials)."
  echo
  echo "| harness | executions | seconds | crashes found | failing regression inputs | corpus | status |"
  echo "|---|---:|---:|---:|---:|---:|---|"
  awk -F'\t' '{printf "| %s | %\047d | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7}' "$out/fuzz.tsv"
  echo
  echo "| check | result |"
  echo "|---|---|"
  echo "| allocation fault injection (test_fault_alloc, ASan) | $fault_status: $fault_points failure points over $fault_ops operations, each DRIFT_E_NOMEM with nothing leaked |"
  echo "| regression inputs (test_regress, ASan) | $regress_status: $regress_inputs input(s) in tests/data/regress |"
  echo "| SIGKILL + disk-full trials (kill_trials, ASan) | $kill_status: ${kill_summary//$'\n'/; } ($kill_fail_lines failure line(s) in the log) |"
  echo "| valgrind memcheck (formats unit tests) | $vg_status |"
  echo "<!-- figures:end -->"
} >"$fig"
if [ -f "$doc" ] && grep -q 'figures:begin' "$doc" && grep -q 'figures:end' "$doc"; then
  awk -v f="$fig" '
    /figures:begin/ { while ((getline l < f) > 0) print l; skip = 1; next }
    /figures:end/   { skip = 0; next }
    !skip { print }' "$doc" >"$doc.tmp" && mv "$doc.tmp" "$doc"
else
  { echo; echo "## Figures"; echo; cat "$fig"; } >>"$doc"
fi
cat "$fig"
[ $fail -ne 0 ] && echo "scripts/reliability.sh: some checks FAILED (logs in $out)" >&2
exit $fail
