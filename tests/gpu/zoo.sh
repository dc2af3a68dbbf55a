#!/usr/bin/env bash
# The zoo on the GPU machine (issue 31), in one device call:
#
#   DEBS=$PWD/.debs OUT=$OUT ZOO_STAGES="build record replay" bash tests/gpu/zoo.sh
#
# Stages (ZOO_STAGES, default "build record replay"):
#   build   drift and libdrift_recorder.so (tests/gpu/run.sh STAGES=build; BUILD_TARGETS);
#   record  tests/gpu/zoo.py record in ZOO_SHARDS (4) concurrent torchrun processes on the
#           one GPU: every diffusers transformer class at its test configuration and the
#           plain-PyTorch DiTs, FSDP2 + bf16 autocast + an fp32 island, 2 steps;
#           $OUT/zoo_record.jsonl (one row per model), $OUT/zoo_traces_*.tgz;
#   replay  tests/gpu/zoo_replay.py over the recorded traces: drift check, replay on
#           cuda (torch profile, torch's own libraries) and cpu against the recording,
#           drift's noise floor; $OUT/zoo_table.md;
#   invariance  tests/gpu/zoo_invariance.py (issue 33): per captured model, PyTorch's own
#           batch verdicts (1,2,4,8 at both positions, CFG joined) against drift invariance
#           --kernels torch; $OUT/zoo_invariance.md.
# Env: BUILD (/tmp/drift-gpu-build), WORK (/tmp/zoo), MODELS (comma list), ZOO_SHARDS, ZOO_WATCH (globs, "*": every module),
# TIME_BUDGET (s, default 540), ZOO_PACK_TRACES (1: bring the traces back), INV_MODELS (the invariance stage's
# models, default MODELS: its models run in name order until the budget ends), ZOO_INV_JOBS (1: chains of
# invariance workers at once). At most 8 files under $OUT.
set -u
S="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:?set OUT}"
BUILD="${BUILD:-/tmp/drift-gpu-build}"
W="${WORK:-/tmp/zoo}"
PY="${PY:-python3}"
BUDGET="${TIME_BUDGET:-540}"
STAGES="${ZOO_STAGES:-build record replay}"
SHARDS="${ZOO_SHARDS:-4}"
T0=$(date +%s)
mkdir -p "$W/logs" "$W/rec" "$OUT"
left() { echo $((BUDGET - ($(date +%s) - T0))); }
has() { case " $STAGES " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
say() { echo "[zoo.sh $(($(date +%s) - T0))s] $*"; }
pack() {
  (cd "$W" && tar czf "$OUT/zoo_logs.tgz" logs) 2>/dev/null
  [ "${ZOO_PACK_TRACES:-1}" = 1 ] || return 0
  # traces in archives of < 16 MiB each (the device tool's limit per file)
  local list=() i=0 part size=0
  rm -f "$OUT"/zoo_traces_*.tgz
  (cd "$W/rec" && ls -d */ 2>/dev/null | tr -d /) > "$W/tags.txt"
  part="$W/part0.txt"; : > "$part"
  while read -r t; do
    s=$(du -sk "$W/rec/$t" | cut -f1)
    # a trace over 14 MB stays behind (named in the log): archives must stay under the 16 MiB limit
    if [ "$s" -gt 14000 ]; then echo "zoo.sh: not packed: $t ($s KB)" >&2; continue; fi
    if [ $((size + s)) -gt 14000 ] && [ -s "$part" ]; then i=$((i + 1)); part="$W/part$i.txt"; : > "$part"; size=0; fi
    echo "$t" >> "$part"; size=$((size + s))
  done < "$W/tags.txt"
  for p in "$W"/part*.txt; do
    [ -s "$p" ] || continue
    n=$(basename "$p" .txt)
    (cd "$W/rec" && tar czf "$OUT/zoo_traces_${n#part}.tgz" -T "$p") 2>/dev/null
  done
}

if has build && [ "${SKIP_BUILD:-0}" != 1 ]; then
  s=$(date +%s)
  STAGES=build BUILD_TARGETS="${BUILD_TARGETS:-drift}" OUT="$W/logs/build" BUILD="$BUILD" bash "$S/tests/gpu/run.sh" \
    > "$W/logs/build_stage.log" 2>&1
  say "build: $(( $(date +%s) - s )) s, $(tail -1 "$W/logs/build/summary.txt" 2>/dev/null)"
fi
export DRIFT_RECORDER_LIB="$BUILD/libdrift_recorder.so"
export PYTHONPATH="$S/.pydeps:$S/recorder/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export DIFFUSERS_TESTS="$S/.pydeps/dtests" NCCL_NVLS_ENABLE=0

if has record; then
  [ -f "$DRIFT_RECORDER_LIB" ] || { say "no $DRIFT_RECORDER_LIB"; pack; exit 1; }
  lim=$(( $(left) - 60 )); [ $lim -lt 60 ] && lim=60
  pids=()
  for i in $(seq 0 $((SHARDS - 1))); do
    timeout -s KILL $lim "$PY" -m torch.distributed.run --standalone --nproc_per_node=1 "$S/tests/gpu/zoo.py" record \
      --out "$W/rec" --shard "$i/$SHARDS" ${MODELS:+--models "$MODELS"} > "$W/logs/record_$i.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  grep -h "^ZOO " "$W"/logs/record_*.log | sed 's/^ZOO [^ ]* //' > "$OUT/zoo_record.jsonl"
  say "record: $(wc -l < "$OUT/zoo_record.jsonl") rows, $(grep -c '"captured": true' "$OUT/zoo_record.jsonl") captured"
  pack
fi

if has replay; then
  "$PY" "$S/tests/gpu/zoo_replay.py" --rec "$W/rec" --drift "$BUILD/drift" --out "$OUT" --budget "$(( $(left) - 20 ))" \
    > "$W/logs/replay.log" 2>&1
  say "replay: $(tail -1 "$W/logs/replay.log")"
  pack
fi
if has invariance; then
  IM="${INV_MODELS:-${MODELS:-}}"
  "$PY" "$S/tests/gpu/zoo_invariance.py" --rec "$W/rec" --drift "$BUILD/drift" --out "$OUT" \
    --budget "$(( $(left) - 20 ))" --jobs "${ZOO_INV_JOBS:-1}" ${IM:+--models "$IM"} > "$W/logs/invariance.log" 2>&1
  say "invariance: $(tail -1 "$W/logs/invariance.log")"
  pack
fi
say "done"
