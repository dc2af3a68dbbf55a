#!/usr/bin/env bash
# Per-step graphs on the GPU (issue 31): plain_video (tests/gpu/plain_dits.py, a top-2 MoE
# routed with boolean selections: torch.export cannot capture it, the recorder traces the
# forward) recorded by tests/gpu/zoo.py (FSDP2 world 1, bf16 autocast, fp32 island, 2 steps),
# then: the record row says which graph each step got, drift ls / check read the trace, and
# drift replay --device cuda --ref trainer is bitwise at the output on both steps (each step
# with its own graph), --device cpu replays both steps.
#
#   BUILD=/tmp/drift-gpu-build OUT=$OUT bash tests/gpu/step_graphs.sh
#   (or STAGES=scripts SCRIPTS=step_graphs bash tests/gpu/run.sh)
# One PASS/FAIL line per check; exit 1 on any failure, 77 without torch or a GPU.
set -u
S="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${BUILD:?set BUILD to the drift CUDA build directory}"
DRIFT="$BUILD/drift"
OUT="${OUT:-$(mktemp -d)}"
PY="${PYTHON3:-python3}"
W="$OUT/step_graphs"; rm -rf "$W"; mkdir -p "$W"
export DRIFT_RECORDER_LIB="${DRIFT_RECORDER_LIB:-$BUILD/libdrift_recorder.so}"
export PYTHONPATH="$S/.pydeps:$S/recorder/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export DIFFUSERS_TESTS="$S/.pydeps/dtests" NCCL_NVLS_ENABLE=0
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
[ -x "$DRIFT" ] || { echo "FAIL: $DRIFT not built"; exit 1; }
[ -f "$DRIFT_RECORDER_LIB" ] || { echo "FAIL: $DRIFT_RECORDER_LIB not built"; exit 1; }
"$PY" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || { echo "SKIP: no torch with a GPU"; exit 77; }

timeout -s KILL 300 "$PY" -m torch.distributed.run --standalone --nproc_per_node=1 "$S/tests/gpu/zoo.py" record \
  --out "$W/rec" --models plain_video > "$W/record.log" 2>&1
row=$(grep -h "^ZOO plain_video " "$W/record.log" | sed 's/^ZOO [^ ]* //')
echo "$row" > "$W/row.json"
T="$W/rec/plain_video/trainer.h5"
if [ -f "$T" ] && [ -n "$row" ]; then pass "plain_video recorded"; else fail "plain_video not recorded: $(tail -3 "$W/record.log")"; fi
"$PY" - "$W/row.json" <<'PY' && pass "record row: dispatch capture, step 0 uses /graph, step 1 a graph of its own" \
  || fail "record row: $(cut -c1-400 "$W/row.json")"
import json, sys
r = json.load(open(sys.argv[1]))
sg = r.get("step_graphs") or {}
print("mode", r.get("mode"), "step_graphs", sg, "fallback", (r.get("fallback") or "")[:200])
assert r.get("mode") == "dispatch" and sg.get("0") == 0 and sg.get("1", -1) >= 0, sg
PY
"$DRIFT" ls "$T" > "$W/ls.txt" 2>&1; grep -E "graph|step" "$W/ls.txt" | head -20
"$DRIFT" ls "$T" --json > "$W/ls.json" 2>&1 && pass "drift ls --json: step_graphs $("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["step_graphs"])' "$W/ls.json")" \
  || fail "drift ls --json: $(tail -2 "$W/ls.json")"
"$DRIFT" check "$T" > "$W/check.txt" 2>&1 && pass "drift check" || fail "drift check: $(tail -3 "$W/check.txt")"
TL=$("$PY" -c 'import glob,os,torch; b=os.path.dirname(os.path.dirname(torch.__file__)); print(":".join(sorted(glob.glob(b+"/nvidia/*/lib"))+[os.path.dirname(torch.__file__)+"/lib"]))')
LD_LIBRARY_PATH="$TL${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$DRIFT" replay "$T" --device cuda --ref trainer --json \
  > "$W/replay_cuda.json" 2> "$W/replay_cuda.err"
rc=$?
"$PY" - "$W/replay_cuda.json" <<PY && pass "replay --device cuda: output bitwise on both steps" \
  || fail "replay --device cuda (exit $rc): $(grep -v 'no --plan' "$W/replay_cuda.err" | head -3)"
import json, sys
j = json.load(open(sys.argv[1]))
o = next(s for s in j["sites"] if s["site"] == "output:noise_pred")
print("steps", j["steps"], "first divergent", j["first_divergent"], "output steps bitwise", o["steps_bitwise_equal"],
      "of", o["steps"], "max |d|", o["max_abs_diff"])
assert j["steps"] == [0, 1] and o["bitwise_equal"] is True
PY
"$DRIFT" replay "$T" --device cpu --ref trainer > "$W/replay_cpu.txt" 2>&1 \
  && pass "replay --device cpu: both steps replay" || fail "replay --device cpu: $(grep -v 'no --plan' "$W/replay_cpu.txt" | tail -3)"
echo "RESULT: $fails failed"
[ $fails = 0 ]
