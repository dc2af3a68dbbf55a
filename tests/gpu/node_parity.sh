#!/usr/bin/env bash
# Node-level parity of zoo models against torch (python3 -m drift_recorder.node_parity), in one device call:
# records MODELS with tests/gpu/zoo.sh (build, record), then for each trace replays step 0 on
# cuda (torch profile, torch's own libraries first) with every node's value dumped and names
# the nodes whose values torch computes differently from the same inputs.
#
#   MODELS=A,B DEBS=$PWD/.debs OUT=$OUT bash tests/gpu/node_parity.sh
# Env: BUILD, WORK (/tmp/zoo), TIME_BUDGET (s, 400), SKIP_RECORD=1 (traces already in WORK/rec),
# STEPS (trace steps to check, default "0"), ZOO_STAGES (default "build record"; add replay for the
# zoo table too).
# Output: $OUT/node_parity.txt (per model and step: the differing nodes and a NODE_PARITY line),
# $OUT/node_saves.tgz (per differing node: torch's output, drift's output and inputs, .npz),
# $OUT/zoo_table.md when the zoo's replay stage ran.
set -u
S="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:?set OUT}"
BUILD="${BUILD:-/tmp/drift-gpu-build}"
W="${WORK:-/tmp/zoo}"
PY="${PY:-python3}"
BUDGET="${TIME_BUDGET:-400}"
T0=$(date +%s)
mkdir -p "$OUT"
left() { echo $((BUDGET - ($(date +%s) - T0))); }
. "$S/tests/gpu/lib_torch_libs.sh"
if [ "${SKIP_RECORD:-0}" != 1 ]; then
  ZOO_STAGES="${ZOO_STAGES:-build record}" BUILD_TARGETS="drift drift_recorder_shared" ZOO_PACK_TRACES=0 \
    TIME_BUDGET=$(( $(left) / 2 )) WORK="$W" BUILD="$BUILD" OUT="$W/zoo_out" bash "$S/tests/gpu/zoo.sh" 2>&1 | tail -4
fi
[ -f "$W/zoo_out/zoo_table.md" ] && cp "$W/zoo_out/zoo_table.md" "$OUT/"
TL=$(torch_lib_dirs)
rm -rf "$W/nps"; mkdir -p "$W/nps"
R="$OUT/node_parity.txt"; : > "$R"
for d in "$W"/rec/*/; do
  m=$(basename "$d"); tr="$d/trainer.h5"
  [ -f "$tr" ] || continue
  case ",${MODELS:-$m}," in *",$m,"*) ;; *) continue ;; esac # a warm machine may hold other traces
  [ "$(left)" -gt 20 ] || { echo "node_parity.sh: time budget spent before $m" >> "$R"; break; }
  for st in ${STEPS:-0}; do
    echo "== $m step $st" >> "$R"
    rm -rf "$W/nd_$m"
    ( export LD_LIBRARY_PATH="${TL:+$TL:}${LD_LIBRARY_PATH:-}"
      timeout 120 "$BUILD/drift" replay "$tr" --device cuda --kernels torch --steps "$st" \
        --dump-nodes "$W/nd_$m" > "$W/nd_$m.replay.log" 2>&1 )
    grep -E "first divergent site|^drift replay: [^ln]" "$W/nd_$m.replay.log" | head -3 >> "$R"
    PYTHONPATH="$S/recorder/python${PYTHONPATH:+:$PYTHONPATH}" timeout 120 "$PY" -m drift_recorder.node_parity \
      "$tr" "$W/nd_$m" --step "$st" --show 12 \
      --save "$W/nps/${m}_step$st" >> "$R" 2>&1
    rm -rf "$W/nd_$m"
  done
done
(cd "$W" && tar czf "$OUT/node_saves.tgz" nps) 2>/dev/null
grep "^NODE_PARITY" "$R"
