#!/usr/bin/env bash
# GPU acceptance of issue 17 (live two-trace comparison), on a machine with a
# GPU (two: two FSDP2 ranks), torch and a CUDA build of drift:
#
#   BUILD=/tmp/drift-gpu-build OUT=$OUT bash tests/gpu/top_against_fsdp.sh
#
# The recorder's FSDP2 job (tests/gpu/fsdp_wan_debug.py, torchrun, 2 ranks)
# writes trace.rank0.h5 / trace.rank1.h5 while a second process
# (tests/gpu/rollout_wan_debug.py) records the rollout side into rollout.h5,
# both slowed to one step per second. While they run, `drift top
# trace.rank0.h5 --against rollout.h5 --batch` is polled: the steps it
# compares must grow while the writers run; with tmux, the real dashboard
# (--follow) runs too and must show the layers. After the run: every layer
# the rollout recorded is a row, and the first divergent site of every step
# equals drift compare's; the same for rank 1 and through a merged index.
# With one GPU the trainer is one FSDP2 rank and the rollout shares the GPU.
# One PASS/FAIL line per check; exit 1 on any failure, 77 without a GPU.
set -u
S="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${BUILD:?set BUILD to the drift CUDA build directory}"
DRIFT="$BUILD/drift"
export DRIFT_RECORDER_LIB="${DRIFT_RECORDER_LIB:-$BUILD/libdrift_recorder.so}"
PY="${PYTHON3:-python3}"
OUT="${OUT:-$(mktemp -d)}"
W="$OUT/top_against_fsdp"; rm -rf "$W"; mkdir -p "$W"
N=8
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
[ -x "$DRIFT" ] || { echo "FAIL: $DRIFT not built"; exit 1; }
ngpu=$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
if [ "${ngpu:-0}" -lt 1 ]; then echo "SKIP: needs a GPU and torch (found ${ngpu:-0})"; exit 77; fi
# two FSDP2 ranks on two GPUs and the rollout on the second; on one GPU one rank, the rollout beside it
NP=$(( ngpu >= 2 ? 2 : 1 )); RGPU=$(( NP - 1 ))
echo "INFO: $ngpu GPU(s): the trainer runs $NP FSDP2 rank(s), the rollout on GPU $RGPU"
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"

SOCK="drift-gpu-against-$$"
TM=""
TMUX_BIN=$(command -v tmux || true)
PREFIX="${PREFIX:-/tmp/drift-gpu-prefix}" # run.sh unpacks .debs (tmux among them) there
if [ -z "$TMUX_BIN" ] && [ -x "$PREFIX/usr/bin/tmux" ]; then
  TMUX_BIN="$PREFIX/usr/bin/tmux"
  TMUX_LD="$(find "$PREFIX" -name 'libevent_core*.so*' -printf '%h:' -quit)"
fi
[ -n "$TMUX_BIN" ] && TM=1
tm() { LD_LIBRARY_PATH="${TMUX_LD:-}${LD_LIBRARY_PATH:-}" "$TMUX_BIN" -L "$SOCK" -f /dev/null "$@"; }
if [ -n "$TM" ]; then # the real dashboard, started before the files exist
  tm new-session -d -s top -x 160 -y 45 \
    "env LANG=C.UTF-8 LC_ALL=C.UTF-8 '$DRIFT' top '$W/trace.rank0.h5' --against '$W/rollout.h5' --follow --interval 200 2>'$W/top.err'; echo \$? >'$W/top.exit'; sleep 600"
fi
timeout -s KILL 300 "$PY" -m torch.distributed.run --standalone --nproc_per_node=$NP "$S/tests/gpu/fsdp_wan_debug.py" \
  --out "$W" --steps $N --sleep 1.0 >"$W/trainer.log" 2>&1 &
TR=$!
DRIFT_ROLLOUT_GPU=$RGPU timeout -s KILL 300 "$PY" "$S/tests/gpu/rollout_wan_debug.py" --out "$W" --steps $N --sleep 1.0 \
  >"$W/rollout.log" 2>&1 &
RO=$!
# poll the live comparison while both write
seen=""
while kill -0 $TR 2>/dev/null || kill -0 $RO 2>/dev/null; do
  if "$DRIFT" top "$W/trace.rank0.h5" --against "$W/rollout.h5" --batch >"$W/live.json" 2>/dev/null; then
    n=$("$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["steps"]))' "$W/live.json" 2>/dev/null)
    [ -n "$n" ] && seen="$seen $n"
  fi
  sleep 0.5
done
wait $TR; rt=$?; wait $RO; rr=$?
[ $rt = 0 ] && [ $rr = 0 ] && grep -q "recorder on" "$W/rollout.log" && pass "trainer ($NP rank(s)) and rollout recorded in separate processes" ||
  { fail "the recording jobs (trainer $rt, rollout $rr; logs $W/trainer.log $W/rollout.log)"; tail -20 "$W/trainer.log" "$W/rollout.log"; }
distinct=$(echo $seen | tr ' ' '\n' | awk '$1 < '$N | sort -un | wc -l)
[ "$distinct" -ge 2 ] && pass "steps appeared live while both wrote (counts seen:$seen)" ||
  fail "the live comparison did not grow while the writers ran (counts seen:$seen)"
if [ -n "$TM" ]; then
  sleep 1
  tm capture-pane -p -t top >"$W/screen.txt"
  grep -q "blocks.1.ffn:out" "$W/screen.txt" && grep -q "steps $N \[0..$((N - 1))\]" "$W/screen.txt" &&
    pass "drift top --against --follow in tmux shows the layers and all $N steps" ||
    { fail "the tmux dashboard"; cat "$W/screen.txt"; cat "$W/top.err"; }
  # both writers closed while it followed: the badge (right end of the first line) says CLOSED, not IDLE
  for _ in $(seq 20); do head -1 "$W/screen.txt" | grep -q "CLOSED" && break; sleep 0.5; tm capture-pane -p -t top >"$W/screen.txt"; done
  head -1 "$W/screen.txt" | grep -q "CLOSED" && pass "the followed writers' close shows (CLOSED)" ||
    { fail "the dashboard did not see both writers close"; head -2 "$W/screen.txt"; }
  tm send-keys -t top q; sleep 1; tm kill-server 2>/dev/null
else
  echo "SKIP: tmux not installed: the --follow screen was not checked (the batch polls were)"
fi
last=$((NP - 1))
ranks=""; for r in $(seq 0 $last); do ranks="$ranks $W/trace.rank$r.h5"; done
"$DRIFT" merge $ranks -o "$W/index.h5" >/dev/null 2>&1 || fail "drift merge"
srcs="trace.rank0.h5"; [ $NP = 2 ] && srcs="$srcs trace.rank1.h5"
for src in $srcs "index.h5#rank=$last"; do
  own="${src%%#*}"; [ "$src" = "index.h5#rank=$last" ] && own="trace.rank$last.h5"
  "$DRIFT" top "$W/$src" --against "$W/rollout.h5" --batch >"$W/top.json" 2>"$W/top_b.err" &&
  "$DRIFT" compare "$W/$own" "$W/rollout.h5" --json >"$W/cmp.json" 2>"$W/cmp.err" &&
  "$DRIFT" ls "$W/rollout.h5" --json >"$W/ls_rollout.json" 2>/dev/null &&
  "$PY" - "$W/top.json" "$W/cmp.json" "$W/ls_rollout.json" $N <<'PYEOF' >"$W/check.txt" 2>&1 && pass "$src --against rollout.h5: every recorded layer, first divergence per step = compare's ($(cat "$W/check.txt"))" || { fail "$src --against rollout.h5"; cat "$W/check.txt" "$W/top_b.err" "$W/cmp.err"; }
import json, sys
t, c, ls, N = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), json.load(open(sys.argv[3])), int(sys.argv[4])
assert t["steps"] == list(range(N)), t["steps"]
layers = {L["name"] for L in t["layers"]}
sites = [s["name"] for s in ls.get("sites", [])] if isinstance(ls.get("sites"), list) else []
module_sites = [s for s in sites if s.endswith(":out")]
missing = [s for s in module_sites if s not in layers]
assert module_sites and not missing, ("rollout sites without a row", missing)
fd = {f["step"]: f["site"] for f in c["first_divergent"]}
for L in t["layers"]:
    for h in L["history"]:
        assert ("first_divergent" in h["flags"]) == (fd[h["step"]] == L["name"]), (L["name"], h["step"], fd[h["step"]])
print(len(layers), "layers; first divergent", sorted({v for v in fd.values() if v}))
PYEOF
done
echo "top_against_fsdp: $fails failure(s)"
[ $fails = 0 ]
