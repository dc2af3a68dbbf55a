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
#   5. valgrind memcheck over every unit test of the normal build (ctest -L
#      unit; VG_SKIP below lists the ones that cannot run under it, with the
#      reason; VALGRIND=0 skips the step), nproc tests at a time.
# Environment: FUZZ_PARALLEL (default: nproc), HARNESSES (default: all),
# BUILD_ASAN (default build-reliability-asan), BUILD_PLAIN (default
# build-reliability), STEPS (default "fuzz fault regress kill valgrind integrity": the
# steps to run). Exits 1 if any step failed; the figures are written either
# way, with the failures in them.
#
# Every result is kept with its date and commit (build-fuzz/reliability/rows/
# per harness, checks/ per check), and the figures list the latest of each:
# a run with fewer HARNESSES or STEPS refreshes those and keeps the others
# (each row and check says when it ran). E.g. the long trace campaign alone:
#   STEPS=fuzz HARNESSES=fuzz_trace TRACE_RUNS=1000000 scripts/reliability.sh
# and the checks after a fix:  STEPS="fault regress valgrind" scripts/reliability.sh
# The whole script is one block: bash parses it before running any of it, so
# editing this file while a (long) run is going does not derail that run.
{
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
all_harnesses="fuzz_json fuzz_plan fuzz_plan_flags fuzz_params fuzz_family_spec fuzz_specs fuzz_safetensors fuzz_graph fuzz_trace"
harnesses="${HARNESSES:-$all_harnesses}"
steps=" ${STEPS:-fuzz fault regress kill valgrind integrity} "
fail=0
t_start=$SECONDS
commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
dirty="$(git -C "$root" status --porcelain 2>/dev/null | grep -q . && echo ' + uncommitted changes' || true)"
mkdir -p "$out/rows"

# Appends the executions asked for, the date and the commit to each
# harness's fuzz/run.sh result row and keeps it as the harness's latest row.
#   keep_rows ASKED HARNESS...
keep_rows() {
  local asked="$1" when h line
  shift
  when="$(date -u +%Y-%m-%dT%H:%MZ)"
  for h in "$@"; do
    line="$(cat "build-fuzz/fuzz/logs/$h.tsv" 2>/dev/null || printf '%s\t0\t0\t1\t0\t0\tno-result' "$h")"
    printf '%s\t%s\t%s\t%s\n' "$line" "$asked" "$when" "$commit$dirty" >"$out/rows/$h.tsv"
  done
}

# keep_check KEY RESULT: the latest result of a check, with its date and commit
mkdir -p "$out/checks"
keep_check() {
  printf '%s (%s, %s)\n' "$2" "$(date -u +%Y-%m-%dT%H:%MZ)" "$commit$dirty" >"$out/checks/$1"
}
check_line() { cat "$out/checks/$1" 2>/dev/null || echo "not run"; }

if [[ "$steps" == *" fuzz "* ]]; then
  echo "== 1. fuzzing ($runs executions per harness; fuzz_trace $trace_runs)"
  fast=""; slow=""
  for h in $harnesses; do if [ "$h" = fuzz_trace ]; then slow="$h"; else fast="$fast $h"; fi; done
  if [ -n "$fast" ]; then
    # shellcheck disable=SC2086
    FUZZ_RUNS="$runs" FUZZ_PARALLEL="$par" FUZZ_KEEP_GOING=1 fuzz/run.sh $fast || fail=1
    # shellcheck disable=SC2086
    keep_rows "$runs" $fast
  fi
  if [ -n "$slow" ]; then
    FUZZ_RUNS="$trace_runs" FUZZ_KEEP_GOING=1 FUZZ_ARGS="-fork=$par" fuzz/run.sh fuzz_trace || fail=1
    keep_rows "$trace_runs" fuzz_trace
  fi
fi
: >"$out/fuzz.tsv"
for h in $all_harnesses; do
  if [ -f "$out/rows/$h.tsv" ]; then cat "$out/rows/$h.tsv" >>"$out/fuzz.tsv"
  else printf '%s\t0\t0\t0\t0\t0\tnot run\t0\t-\t-\n' "$h" >>"$out/fuzz.tsv"; fi
done

fault_status=not-run; regress_status=not-run; fault_ops=0; fault_points=0
regress_inputs="$(find tests/data/regress -type f 2>/dev/null | wc -l)"
kill_status=not-run; kill_summary=""; kill_fail_lines=0
vg_status=not-run
if [[ "$steps" == *" fault "* || "$steps" == *" regress "* ]]; then
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
  [[ "$steps" == *" fault "* ]] &&
    keep_check fault "$fault_status: $fault_points failure points over $fault_ops operations, each DRIFT_E_NOMEM with nothing leaked"
  [[ "$steps" == *" regress "* ]] &&
    keep_check regress "$regress_status: $regress_inputs input(s) in tests/data/regress and fuzz/corpus replayed, the killed and cut-short traces repaired"
fi

if [[ "$steps" == *" kill "* ]]; then
  echo "== 4. crash consistency ($kill_trials SIGKILL trials, $disk_trials disk-full trials)"
  CC_KT="${CC:-clang}"
  # shellcheck disable=SC2046
  "$CC_KT" -std=c11 -g -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -D_POSIX_C_SOURCE=200809L \
    -DDRIFT_VERSION=\"kill-trials\" -I"$root" $(pkg-config --cflags hdf5) fuzz/kill_trials.c formats/trace_*.c formats/outpath.c formats/params_ref.c formats/hash64.c \
    formats/dtype.c formats/json.c formats/infile.c formats/err.c formats/alloc.c $(pkg-config --libs hdf5) -lm -o "$out/kill_trials" \
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
  keep_check kill "$kill_status: ${kill_summary//$'\n'/; } ($kill_fail_lines failure line(s) in the log)"

fi

if [[ "$steps" == *" integrity "* ]]; then
  # issue 34: the integrity and bounds tests through the binary, with their figures
  echo "== 6. integrity (issue 34: tests/integration/integrity_*.sh)"
  ibin="${DRIFT_BIN:-$plain/drift}"
  if [ ! -x "$ibin" ]; then
    cmake -S "$root" -B "$plain" -DDRIFT_CUDA=OFF >"$out/cmake-plain.log" 2>&1 &&
      cmake --build "$plain" -j"$jobs" --target drift >"$out/build-plain.log" 2>&1
  fi
  int_status=passed; int_figs=""; n_int=0
  mkdir -p "$out/integrity"
  for t in "$root"/tests/integration/integrity_*.sh; do
    n=$(basename "$t" .sh)
    if DRIFT_BIN="$ibin" DRIFT_TESTDATA="$root/tests/data" DRIFT_TMP="$out/integrity" PYTHON3=/usr/bin/python3         timeout 600 bash "$t" >"$out/integrity/$n.log" 2>&1; then
      n_int=$((n_int + 1))
    else
      int_status=FAILED; fail=1; int_figs="$int_figs; $n FAILED ($(grep -m1 FAIL "$out/integrity/$n.log"))"
    fi
  done
  # the figures: the timed lines of integrity_linear, the disk-full and memory-plan lines
  while IFS= read -r l; do int_figs="$int_figs; ${l#ok }"; done < <(
    grep -h '^ok ' "$out/integrity/integrity_linear.log" "$out/integrity/integrity_record_mem.log" 2>/dev/null | sed 's/  */ /g'
    grep -h '^ok   record on a full disk' "$out/integrity/integrity_disk_full.log" 2>/dev/null)
  keep_check integrity "$int_status: $n_int integrity_*.sh tests through the binary$int_figs"
fi

if [[ "$steps" == *" valgrind "* ]]; then
  echo "== 5. valgrind memcheck (every unit test of the normal build)"
  vg_status=skipped
  if [ "${VALGRIND:-1}" = 1 ] && command -v valgrind >/dev/null; then
    vg_status=clean
    cmake -S "$root" -B "$plain" -DDRIFT_CUDA=OFF >"$out/cmake-plain.log" 2>&1 &&
      cmake --build "$plain" -j"$jobs" >"$out/build-plain.log" 2>&1 ||
      { vg_status="FAILED (build: $out/build-plain.log)"; fail=1; }
    rm -rf "$out/valgrind"; mkdir -p "$out/valgrind"
    # Tests that cannot run under valgrind, each with its reason, as
    #   [test_name]="reason"
    # None at present: every unit test of the normal build runs (ctest -L unit;
    # recorder_test_recorder's forked writers and disk-full children included).
    declare -A VG_SKIP=()
    tests_all="$(ctest --test-dir "$plain" -N -L unit 2>/dev/null | awk '/Test +#/ {print $3}')"
    : >"$out/valgrind/run.tsv"
    vg_one() { # NAME: one test under memcheck; appends "name<TAB>rc<TAB>seconds"
      local t="$1" t0=$SECONDS rc=0
      mkdir -p "$out/valgrind/tmp/$t"
      DRIFT_BIN="$plain/drift" DRIFT_SRC="$root" DRIFT_TESTDATA="$root/tests/data" DRIFT_TMP="$out/valgrind/tmp/$t" \
        PYTHON3=/usr/bin/python3 timeout 3600 valgrind --error-exitcode=99 --leak-check=full \
        --errors-for-leak-kinds=definite --show-leak-kinds=definite --num-callers=30 \
        --suppressions="$root/fuzz/valgrind.supp" "$plain/tests/$t" >"$out/valgrind/$t.log" 2>&1 || rc=$?
      printf '%s\t%s\t%s\n' "$t" "$rc" "$((SECONDS - t0))" >>"$out/valgrind/run.tsv"
    }
    vg_skipped=""; n_run=0
    for t in $tests_all; do
      if [ -n "${VG_SKIP[$t]+x}" ]; then vg_skipped="$vg_skipped; $t (${VG_SKIP[$t]})"; continue; fi
      [ -x "$plain/tests/$t" ] || { echo "FAIL $t: not built" >>"$out/valgrind/run.tsv"; continue; }
      n_run=$((n_run + 1))
      vg_one "$t" &
      while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    done
    wait
    vg_bad="$(awk -F'\t' '$2 != 0 {print $1 "(rc " $2 ")"}' "$out/valgrind/run.tsv" | tr '\n' ' ')"
    vg_errors="$(cat "$out/valgrind"/*.log 2>/dev/null | grep -c 'ERROR SUMMARY: [1-9]' || true)"
    if [ -n "$vg_bad" ] || [ -z "$tests_all" ]; then
      vg_status="FAILED: ${vg_bad:-no tests found} (logs in build-fuzz/reliability/valgrind/)"; fail=1
    else
      vg_status="clean: $n_run unit tests (ctest -L unit), no memcheck error, no definite leak"
    fi
    [ -n "$vg_skipped" ] && vg_status="$vg_status; skipped${vg_skipped#;}"
    [ "$vg_errors" != 0 ] && vg_status="$vg_status; $vg_errors log(s) with errors"
  fi
  keep_check valgrind "$vg_status"
fi

echo "== writing the figures into docs/RELIABILITY.md"
fig="$out/figures.md"
{
  echo "<!-- figures:begin (generated by scripts/reliability.sh; do not edit by hand) -->"
  echo "Written $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -m), $jobs cores, by \`scripts/reliability.sh $runs\`"
  echo "(STEPS=\"$(echo $steps)\" HARNESSES=\"$harnesses\" TRACE_RUNS=$trace_runs KILL_TRIALS=$kill_trials"
  echo "DISK_TRIALS=$disk_trials), in $(( (SECONDS - t_start) / 60 )) min. Each row says when it ran and on which commit"
  echo "(rows not run this time are kept from their last run)."
  echo
  echo "| harness | executions | asked | seconds | crashes found | failing regression inputs | corpus | status | run (UTC, commit) |"
  echo "|---|---:|---:|---:|---:|---:|---:|---|---|"
  awk -F'\t' '{printf "| %s | %\047d | %\047d | %s | %s | %s | %s | %s | %s, %s |\n", $1, $2, $8, $3, $4, $5, $6, $7, $9, $10}' "$out/fuzz.tsv"
  echo
  echo "| check | result |"
  echo "|---|---|"
  echo "| allocation fault injection (test_fault_alloc, ASan) | $(check_line fault) |"
  echo "| regression inputs (test_regress, ASan) | $(check_line regress) |"
  echo "| SIGKILL + disk-full trials (kill_trials, ASan) | $(check_line kill) |"
  echo "| valgrind memcheck (unit tests, normal build) | $(check_line valgrind) |"
  echo "| integrity and bounds (issue 34, integrity_*.sh) | $(check_line integrity) |"
  echo "<!-- figures:end -->"
} >"$fig"
if [ -z "$(ls "$out/rows" 2>/dev/null)" ] && [ -z "${RELIABILITY_WRITE:-}" ]; then
  # a checkout without the kept rows of earlier runs (a fresh clone): print, do not erase the committed figures
  echo "(no rows of earlier runs in $out: docs/RELIABILITY.md left as it is; RELIABILITY_WRITE=1 writes anyway)"
elif [ -f "$doc" ] && grep -q 'figures:begin' "$doc" && grep -q 'figures:end' "$doc"; then
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
exit
}
