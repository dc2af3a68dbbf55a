#!/usr/bin/env bash
# Builds and runs the libFuzzer harnesses for a bounded time:
#
#   fuzz/run.sh [SECONDS] [HARNESS...]       (default: 60 s, every harness)
#
# Each harness first replays its regression inputs (tests/data/regress/<h>/),
# then fuzzes for SECONDS (or FUZZ_RUNS=N executions: -runs=N) over a work
# corpus (build-fuzz/fuzz/work/<h>, seeded from fuzz/corpus/<h>, which is
# only read). Prints executions per harness and exits non-zero on any crash,
# leak, timeout or out-of-memory; each such input is copied to
# tests/data/regress/<h>/ (where tests/formats/test_regress.c replays it).
#
# Environment: FUZZ_RUNS=N (executions instead of time), FUZZ_PARALLEL=K
# (harnesses at once, default 1), FUZZ_KEEP_GOING=1 (libFuzzer fork mode with
# -ignore_crashes/-ignore_timeouts/-ignore_ooms: the run goes on past a
# finding, every finding is counted, the 3 smallest are copied to
# tests/data/regress), FUZZ_OUT (default build-fuzz/fuzz),
# FUZZ_NO_BUILD=1 (use the binaries already built), FUZZ_ARGS (extra
# libFuzzer flags). A summary is written to $FUZZ_OUT/summary.tsv.
# The whole script is one block: bash parses it before running any of it, so
# editing this file while a (long) run is going does not derail that run.
{
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${FUZZ_OUT:-$root/build-fuzz/fuzz}"
export FUZZ_OUT="$out"
secs=60
if [ $# -gt 0 ] && [[ "$1" =~ ^[0-9]+$ ]]; then secs="$1"; shift; fi
ALL="fuzz_json fuzz_plan fuzz_plan_flags fuzz_params fuzz_family_spec fuzz_specs fuzz_safetensors fuzz_graph fuzz_aten_graph fuzz_trace"
harnesses=()
for h in "$@"; do h="${h#fuzz/}"; h="${h%.c}"; [[ "$h" == fuzz_* ]] || h="fuzz_$h"; harnesses+=("$h"); done
[ ${#harnesses[@]} -eq 0 ] && read -r -a harnesses <<<"$ALL"

if [ "${FUZZ_NO_BUILD:-0}" != 1 ]; then
  "$root/fuzz/build.sh" "${harnesses[@]}" || { echo "fuzz/run.sh: build failed" >&2; exit 2; }
fi

# Largest input per harness (libFuzzer -max_len).
declare -A MAXLEN=([fuzz_json]=16384 [fuzz_plan]=8192 [fuzz_plan_flags]=4096 [fuzz_params]=8192
                   [fuzz_family_spec]=512 [fuzz_specs]=1024 [fuzz_safetensors]=16384 [fuzz_graph]=16384 [fuzz_aten_graph]=16384 [fuzz_trace]=65536)
# Per-harness libFuzzer flags. fuzz_trace: no per-input leak check (libhdf5
# leaks on about one corrupt file in four, and libFuzzer then re-runs the
# input and scans the heap: 7x slower); LeakSanitizer still checks the whole
# process at exit, which fails the run.
declare -A HARGS=([fuzz_trace]="-detect_leaks=0")
declare -A DICT=([fuzz_json]=json [fuzz_plan]=plan [fuzz_plan_flags]=plan_flags [fuzz_params]=params
                 [fuzz_family_spec]=family_spec [fuzz_specs]=specs [fuzz_safetensors]=safetensors [fuzz_graph]=graph
                 [fuzz_aten_graph]=aten_graph)

run_one() {
  local h="$1" bin="$out/$1" log="$out/logs/$1.log"
  local work="$out/work/$h" art="$out/artifacts/$h" reg="$root/tests/data/regress/$h"
  mkdir -p "$work" "$art" "$out/logs"
  rm -f "$art"/crash-* "$art"/leak-* "$art"/timeout-* "$art"/oom-* "$art"/slow-unit-*
  : >"$log"
  local status=ok rc=0 regfail=0
  # 1. regression inputs: each must run cleanly
  if [ -d "$reg" ] && [ -n "$(ls -A "$reg" 2>/dev/null)" ]; then
    for f in "$reg"/*; do
      [ -f "$f" ] || continue
      if ! "$bin" -runs=1 -rss_limit_mb=4096 -timeout=60 "$f" >>"$log" 2>&1; then
        echo "REGRESSION $h: $f still fails (see $log)" >&2
        regfail=$((regfail + 1))
      fi
    done
  fi
  # 2. fuzz
  local limit=(-max_total_time="$secs")
  [ -n "${FUZZ_RUNS:-}" ] && limit=(-runs="$FUZZ_RUNS")
  local dict=()
  [ -n "${DICT[$h]+x}" ] && [ -f "$root/fuzz/dict/${DICT[$h]}.dict" ] && dict=(-dict="$root/fuzz/dict/${DICT[$h]}.dict")
  local keep=()
  [ "${FUZZ_KEEP_GOING:-0}" = 1 ] && keep=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  local seeds="$root/fuzz/corpus/$h"
  mkdir -p "$seeds"
  local t0=$SECONDS
  # shellcheck disable=SC2086
  "$bin" "${limit[@]}" "${keep[@]}" "${dict[@]}" -max_len="${MAXLEN[$h]:-16384}" -timeout=25 -rss_limit_mb=2560 ${HARGS[$h]:-} \
    -print_final_stats=1 -artifact_prefix="$art/" ${FUZZ_ARGS:-} "$work" "$seeds" >>"$log" 2>&1
  rc=$?
  local dt=$((SECONDS - t0))
  # executions: libFuzzer's final stat line, or (fork mode, where the parent's
  # own stat line says 0) the last "#N" progress line; the larger of the two
  local execs e1 e2
  e1="$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')"
  e2="$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')"
  execs=$(( ${e1:-0} > ${e2:-0} ? ${e1:-0} : ${e2:-0} ))
  local found=0 copied=0
  # smallest first; at most 3 copied per run (fork mode can save many inputs of one bug)
  while read -r a; do
    [ -f "$a" ] || continue
    found=$((found + 1))
    if [ $copied -lt 3 ]; then
      mkdir -p "$reg"
      cp -f "$a" "$reg/"
      copied=$((copied + 1))
      echo "CRASH $h: $(basename "$a") -> tests/data/regress/$h/$(basename "$a")" >&2
    fi
  done < <(ls -S -r "$art"/crash-* "$art"/leak-* "$art"/timeout-* "$art"/oom-* 2>/dev/null)
  [ $found -gt $copied ] && echo "CRASH $h: $found finding(s) in all, in $art" >&2
  if [ $rc -ne 0 ] || [ $found -gt 0 ]; then
    status=crash
    [ $found -eq 0 ] && found=1
    echo "---- $h: libFuzzer exited $rc; the end of $log:" >&2
    grep -E 'ERROR|SUMMARY|fuzz property|#[0-9]+ 0x' "$log" | head -25 >&2
  fi
  [ $regfail -gt 0 ] && status="$status+regress($regfail)"
  local corpus
  corpus="$(find "$work" -type f | wc -l)"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$h" "$execs" "$dt" "$found" "$regfail" "$corpus" "$status" >"$out/logs/$h.tsv"
  printf '%-18s %12s executions in %5ss, corpus %6s, %s\n' "$h" "$execs" "$dt" "$corpus" "$status"
  [ "$status" = ok ]
}

par="${FUZZ_PARALLEL:-1}"
ran=()
pids=()
for h in "${harnesses[@]}"; do
  if [ ! -x "$out/$h" ]; then
    echo "SKIP $h: not built (sources missing?)" >&2
    continue
  fi
  ran+=("$h")
  rm -f "$out/logs/$h.tsv"
  run_one "$h" &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$par" ]; do wait -n; done
done
fail=0
for p in "${pids[@]}"; do wait "$p" || fail=1; done

{
  printf 'harness\texecutions\tseconds\tcrashes\tregressions_failing\tcorpus\tstatus\n'
  for h in "${ran[@]}"; do cat "$out/logs/$h.tsv" 2>/dev/null || printf '%s\t0\t0\t1\t0\t0\tno-result\n' "$h"; done
} >"$out/summary.tsv"
total="$(awk -F'\t' 'NR>1 {s+=$2} END {print s+0}' "$out/summary.tsv")"
echo "fuzz/run.sh: ${#ran[@]} harness(es), $total executions in total; summary in $out/summary.tsv"
if [ $fail -ne 0 ]; then echo "fuzz/run.sh: FAILED (crash or failing regression input)" >&2; exit 1; fi
exit 0
exit
}
