#!/usr/bin/env bash
# Issue 36 on the GPU machine: recordings of torch.compile'd models. One device call:
#
#   DEBS=$PWD/.debs OUT=$OUT bash tests/gpu/compiled_record.sh
#   (or STAGES=scripts SCRIPTS=compiled_record bash tests/gpu/run.sh)
#
# 1. builds drift (tests/gpu/run.sh STAGES=build; SKIP_BUILD=1 reuses $BUILD);
# 2. tests/gpu/compiled_record.py: a small diffusers DiT (MODEL, default wan:
#    WanTransformer3DModel at diffusers' test configuration) recorded eager
#    and under torch.compile (inductor default), captured graph, bf16, 2
#    steps, the blocks' outputs; the compiled one with rec.compile_floor();
# 3. drift ls tells them apart (torch.compile on the compiled trace's
#    libraries line only); drift replay --device cuda --ref trainer of the
#    compiled trace prints the compiled verdict (with the first site where it
#    shows) and the compile floor with the divergence in units of it; the
#    eager trace replays bitwise at the output (every site listed), without
#    the verdict.
# drift runs from a plain shell: only run.sh's PREFIX folders on its
# LD_LIBRARY_PATH (it loads the recording's cuBLASLt/cuDNN itself, issue 35).
# One PASS/FAIL/SKIP/INFO line per item (also $OUT/summary.txt); $OUT/logs.tgz.
# Env: BUILD (/tmp/drift-gpu-build), WORK (/tmp/compiled_record), MODEL, PY, TIME_BUDGET (s, 400).
set -u
S="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:?set OUT}"
BUILD="${BUILD:-/tmp/drift-gpu-build}"
W="${WORK:-/tmp/compiled_record}"
PY="${PY:-python3}"
BUDGET="${TIME_BUDGET:-400}"
T0=$(date +%s)
rm -rf "$W"; mkdir -p "$W/logs" "$W/rec" "$OUT"
SUM="$OUT/summary.txt"; : > "$SUM"
fails=0
line() { echo "$*" | tee -a "$SUM"; }
pass() { line "PASS: $*"; }
fail() { line "FAIL: $*"; fails=$((fails + 1)); }
info() { line "INFO: $*"; }
left() { echo $((BUDGET - ($(date +%s) - T0))); }
pack() { (cd "$W" && tar czf "$OUT/logs.tgz" logs rec/plan.json) 2>/dev/null; }

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  STAGES=build BUILD_TARGETS="${BUILD_TARGETS:-drift}" OUT="$W/logs/build" BUILD="$BUILD" bash "$S/tests/gpu/run.sh" \
    > "$W/logs/build_stage.log" 2>&1
fi
DRIFT="$BUILD/drift"
[ -x "$DRIFT" ] && [ -f "$BUILD/libdrift_recorder.so" ] || { fail "build: $DRIFT or libdrift_recorder.so missing"; pack; exit 1; }
PREFIX="${PREFIX:-/tmp/drift-gpu-prefix}"
. "$S/tests/gpu/lib_torch_libs.sh" # prefix_lib_dirs: not the .debs' terminal libraries
LIBDIRS=$(prefix_lib_dirs "$PREFIX")
LIBDIRS="${LIBDIRS%:}"
drift() { if [ -n "$LIBDIRS" ]; then env LD_LIBRARY_PATH="$LIBDIRS" "$DRIFT" "$@"; else env -u LD_LIBRARY_PATH "$DRIFT" "$@"; fi; }

# ---- 2. record eager and compiled ---------------------------------------------------------------
( export DRIFT_RECORDER_LIB="$BUILD/libdrift_recorder.so" PYTHONPATH="$S/.pydeps:$S/recorder/python${PYTHONPATH:+:$PYTHONPATH}" \
         PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR="$W/inductor"
  timeout -s KILL $(( $(left) - 120 )) "$PY" "$S/tests/gpu/compiled_record.py" "$W/rec" --model "${MODEL:-wan}" ) \
  > "$W/logs/record.log" 2>&1
for n in eager compiled; do
  r=$(grep -m1 "^RESULT $n " "$W/logs/record.log")
  case "$r" in "RESULT $n OK "*) pass "record $n: ${r#RESULT $n OK }" ;;
    *) fail "record $n: ${r:-no result (logs/record.log)}"; tail -8 "$W/logs/record.log" ;; esac
done
pack
E="$W/rec/eager.h5"; C="$W/rec/compiled.h5"
[ -f "$E" ] && [ -f "$C" ] || { fail "traces missing"; pack; exit 1; }

# ---- 3. ls, replay ---------------------------------------------------------------------------------
le=$(drift ls "$E" 2>&1 | grep '^libraries'); lc=$(drift ls "$C" 2>&1 | grep '^libraries')
info "eager:    $le"; info "compiled: $lc"
if echo "$lc" | grep -q "torch.compile (inductor default: <model>)" && ! echo "$le" | grep -q "torch.compile"; then
  pass "drift ls tells them apart (the compiled trace's libraries line ends with torch.compile (inductor default: <model>))"
else fail "drift ls: eager '$le' / compiled '$lc'"; fi
drift ls "$C" --json | "$PY" -c 'import json,sys; l=json.load(sys.stdin)["libraries"]; assert l["compiled"] is True and l["inductor_mode"] == "default", l' \
  && pass "drift ls --json: compiled true, inductor_mode default" || fail "drift ls --json compiled"

timeout -s KILL 200 bash -c "$(declare -f drift); LIBDIRS='$LIBDIRS' DRIFT='$DRIFT' drift replay '$C' --device cuda --ref trainer" \
  > "$W/logs/replay_compiled.txt" 2> "$W/logs/replay_compiled.err"; rc=$?
grep -E "^  (libraries|compiled|compile floor)|this comparison|first divergent" "$W/logs/replay_compiled.txt" | sed 's/^/INFO: /' | tee -a "$SUM"
if [ $rc -le 1 ] && grep -q "^  compiled: bitwise equality with the recording is not expected: the recording ran torch.compile'd kernels (inductor default; compiled: <model>), replay follows eager semantics; it first shows at " "$W/logs/replay_compiled.txt"; then
  pass "replay of the compiled trace: the compiled verdict beside the library verdict, naming the first site"
else fail "replay compiled (rc $rc): $(head -30 "$W/logs/replay_compiled.txt" "$W/logs/replay_compiled.err")"; fi
if grep -q "^  compile floor: output:noise_pred mean |eager - compiled| " "$W/logs/replay_compiled.txt" &&
   grep -q "this comparison: output:noise_pred mean |diff| .* x compilation alone" "$W/logs/replay_compiled.txt"; then
  pass "replay of the compiled trace: the compile floor and the output in units of compilation alone"
else fail "compile floor lines missing: $(grep -n compile "$W/logs/replay_compiled.txt")"; fi
# the noise floor beside it (drift's own: --max-floor measures it; exit 1 is a verdict, not an error)
timeout -s KILL 200 bash -c "$(declare -f drift); LIBDIRS='$LIBDIRS' DRIFT='$DRIFT' drift replay '$C' --device cuda --ref trainer --output-only --max-floor 1000000" \
  > "$W/logs/replay_compiled_floor.txt" 2> "$W/logs/replay_compiled_floor.err"
grep -E "noise floor" "$W/logs/replay_compiled_floor.err" "$W/logs/replay_compiled_floor.txt" | head -2 | sed 's/^[^:]*:/INFO: /' | tee -a "$SUM"

timeout -s KILL 200 bash -c "$(declare -f drift); LIBDIRS='$LIBDIRS' DRIFT='$DRIFT' drift replay '$E' --device cuda --ref trainer --json" \
  > "$W/logs/replay_eager.json" 2> "$W/logs/replay_eager.err"; rc=$?
grep "libraries:" "$W/logs/replay_eager.err" | head -1 | sed 's/^/INFO: /' | tee -a "$SUM"
if [ $rc -le 1 ] && msg=$("$PY" - "$W/logs/replay_eager.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
bad = [s["site"] for s in d["sites"] if s.get("steps_bitwise_equal") != s.get("steps")]
o = {s["site"]: s for s in d["sites"]}["output:noise_pred"]
print("%d sites, not bitwise: %s; output bitwise %s/%s; libraries %s; compiled %s" % (
    len(d["sites"]), bad or "none", o["steps_bitwise_equal"], o["steps"], d["libraries"]["verdict"], d["compiled"]))
sys.exit(0 if o["steps"] and o["steps_bitwise_equal"] == o["steps"] and d["compiled"] is None else 1)
PY
); then pass "replay of the eager trace: bitwise at the output, no compiled verdict ($msg)"
else fail "replay eager (rc $rc): ${msg:-$(tail -3 "$W/logs/replay_eager.err")}"; fi
pack
info "total $(( $(date +%s) - T0 )) s"
[ $fails -eq 0 ]
