#!/usr/bin/env bash
# Issue 33: `drift invariance` accepts every zoo trace whose graph replays, on cuda with
# --kernels torch and exact, and on cpu. After tests/gpu/zoo.sh recorded the zoo into $REC:
#
#   REC=/tmp/zoo/rec BUILD=/tmp/drift-gpu-build OUT=$OUT bash tests/gpu/zoo_inv_profiles.sh
#
# runs `drift invariance TRACE --batch 1,2 --cfg-batch joined --json` per trace on cuda
# (--kernels exact; the torch profile's verdicts are zoo_invariance.py's) and on cpu, JOBS at
# once, and writes $OUT/zoo_inv_profiles.md: per model and run the exit code (0 invariant,
# 1 batch-dependent, 2 refused) and the verdict or the refusal. Exit 0 when no run was refused
# but those of models that do not replay (the zoo table's) or have no batch (Cosmos3-Omni).
# Env: RUNS ("cuda:exact cpu:-": DEVICE:KERNELS, - the default), JOBS (4), TIMEOUT (s per run, 180), TIME_BUDGET (s, 300: runs not started by then are
# listed as not run).
set -u
REC="${REC:?set REC, the folder of the zoo recordings}"; BUILD="${BUILD:-/tmp/drift-gpu-build}"; OUT="${OUT:?set OUT}"
JOBS="${JOBS:-4}"; TO="${TIMEOUT:-180}"; BUDGET="${TIME_BUDGET:-300}"
W=/tmp/zoo_inv_profiles; rm -rf "$W"; mkdir -p "$W" "$OUT"
T_END=$(( $(date +%s) + BUDGET ))
export D="$BUILD/drift" W TO T_END

one() { # one TAG DEVICE KERNELS: a line "TAG|DEVICE KERNELS|rc|text" into $W/TAG.DEVICE
  local tag="$1" dev="$2" k="$3" rc msg f="$W/$1.$2"
  if [ "$(date +%s)" -gt "$T_END" ]; then echo "$tag|$dev $k|-|not run: the time budget ran out" > "$f"; return; fi
  timeout -s KILL "$TO" "$D" invariance "$REC/$tag/trainer.h5" --device "$dev" ${k:+--kernels "$k"} --batch 1,2 \
    --cfg-batch joined --json > "$f.json" 2> "$f.err"; rc=$?
  msg=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
print(("refused: " + d["error"].get("message", "")) if "error" in d else d.get("summary", ""))' "$f.json" 2>/dev/null \
    | cut -c1-200)
  [ -n "$msg" ] || msg="$(grep -v 'libraries:' "$f.err" | tail -n 1 | cut -c1-200)"
  msg="${msg//|//}"
  echo "$tag|$dev $k|$rc|$msg" > "$f"
}
export -f one
export REC

ls "$REC" | while read -r t; do
  [ -f "$REC/$t/trainer.h5" ] || continue
  for r in ${RUNS:-cuda:exact cpu:-}; do echo "$t ${r%%:*} ${r#*:}"; done
done | xargs -P "$JOBS" -L 1 bash -c 'one "$0" "$1" "$( [ "$2" = - ] || echo "$2")"'

{
  echo "| model | run | exit | verdict or refusal |"
  echo "|---|---|---|---|"
  cat "$W"/*.cuda "$W"/*.cpu 2>/dev/null | sort | awk -F'|' '{printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4}'
} > "$OUT/zoo_inv_profiles.md"
n=$(cat "$W"/*.cuda "$W"/*.cpu 2>/dev/null | wc -l)
refused=$(cat "$W"/*.cuda "$W"/*.cpu 2>/dev/null | awk -F'|' '$3 == 2' | grep -v -e AnyFlowFAR -e Cosmos3Omni | wc -l)
notrun=$(cat "$W"/*.cuda "$W"/*.cpu 2>/dev/null | awk -F'|' '$3 == "-"' | wc -l)
echo "zoo_inv_profiles: $n runs (cuda exact, cpu), $refused refused (besides AnyFlowFAR and Cosmos3-Omni), $notrun not run"
cat "$W"/*.cuda "$W"/*.cpu 2>/dev/null | awk -F'|' '$3 == 2' | grep -v -e AnyFlowFAR -e Cosmos3Omni | head -10
[ "$refused" = 0 ]
