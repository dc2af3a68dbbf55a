#!/usr/bin/env bash
# Issue 35 on the GPU machine: replay loads the recording's own cuBLASLt /
# cuDNN, and the recorder installs with pip. One device call:
#
#   DEBS=$PWD/.debs OUT=$OUT bash tests/gpu/replay_libraries.sh
#   (or STAGES=scripts SCRIPTS=replay_libraries bash tests/gpu/run.sh)
#
# 1. builds drift (tests/gpu/run.sh STAGES=build; SKIP_BUILD=1 reuses $BUILD);
# 2. records small diffusers DiTs under torch (tests/gpu/capture_record.py
#    rollout: captured graph, bf16 autocast, 2 steps; MODELS, default
#    wan,ltx2): torch runs its wheel's cuBLASLt and cuDNN, whose paths the
#    trace records;
# 3. per model, drift replay --device cuda --ref trainer from a plain shell:
#    LD_LIBRARY_PATH holds only the folders drift itself needs (run.sh's
#    PREFIX: OpenBLAS, cmocka), never torch's. Default (--libraries recorded):
#    PASS when stderr names the recording's libraries, the replay's loaded
#    cuDNN / cuBLASLt are the recorded files, the verdict is "same" and
#    output:noise_pred is bitwise equal in every step. --libraries system:
#    the old behaviour (the toolkit's libraries): PASS when the verdict says
#    bitwise equality is not expected (INFO when the toolkit's builds equal
#    torch's: nothing to show); its output metrics are printed;
# 4. pip install --no-build-isolation --no-index ./recorder/python into a
#    fresh venv (python -m venv --system-site-packages, torch's site-packages
#    added by a .pth), then tests/gpu/recorder_quickstart.py (docs/recorder.md's
#    FSDP2 quickstart, torchrun, no DRIFT_RECORDER_LIB, no PYTHONPATH) records a
#    trace that drift check accepts.
# One PASS/FAIL/SKIP/INFO line per item (also $OUT/summary.txt); $OUT/logs.tgz.
# Env: BUILD (/tmp/drift-gpu-build), WORK (/tmp/replay_libraries), MODELS, PY, TIME_BUDGET (s, 400).
set -u
S="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="${OUT:?set OUT}"
BUILD="${BUILD:-/tmp/drift-gpu-build}"
W="${WORK:-/tmp/replay_libraries}"
PY="${PY:-python3}"
BUDGET="${TIME_BUDGET:-400}"
MODELS="${MODELS:-wan,ltx2}"
T0=$(date +%s)
rm -rf "$W"; mkdir -p "$W/logs" "$W/acc" "$OUT"
SUM="$OUT/summary.txt"; : > "$SUM"
fails=0
line() { echo "$*" | tee -a "$SUM"; }
pass() { line "PASS: $*"; }
fail() { line "FAIL: $*"; fails=$((fails + 1)); }
skip() { line "SKIP: $*"; }
info() { line "INFO: $*"; }
left() { echo $((BUDGET - ($(date +%s) - T0))); }
pack() { (cd "$W" && tar czf "$OUT/logs.tgz" logs) 2>/dev/null; }

# ---- 1. build ---------------------------------------------------------------------------------
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
# a plain shell: only drift's own dependencies on the loader's path, torch's folders never
drift() { if [ -n "$LIBDIRS" ]; then env LD_LIBRARY_PATH="$LIBDIRS" "$DRIFT" "$@"; else env -u LD_LIBRARY_PATH "$DRIFT" "$@"; fi; }
drift_to() { local lim=$1; shift; timeout -s KILL "$lim" bash -c "$(declare -f drift); LIBDIRS='$LIBDIRS' DRIFT='$DRIFT' drift \"\$@\"" drift "$@"; }
info "drift's LD_LIBRARY_PATH: ${LIBDIRS:-(unset)}; linked: $(drift --version 2>&1); $(readelf -d "$DRIFT" | grep -o -E 'R(UN)?PATH.*' | head -1)"
info "the loader's own cuBLASLt / cuDNN for drift: $( (LD_LIBRARY_PATH="$LIBDIRS" ldd "$DRIFT") | grep -o -E '(libcublasLt|libcudnn)\.so[^ ]* => [^ ]*' | tr '\n' ' ')"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1

# ---- 2. record under torch --------------------------------------------------------------------
( export DRIFT_RECORDER_LIB="$BUILD/libdrift_recorder.so" PYTHONPATH="$S/.pydeps:$S/recorder/python${PYTHONPATH:+:$PYTHONPATH}"
  timeout -s KILL $(( $(left) / 2 )) "$PY" "$S/tests/gpu/capture_record.py" rollout --out "$W/acc" --models "$MODELS" ) \
  > "$W/logs/record.log" 2>&1
for t in ${MODELS//,/ }; do
  r=$(grep -m1 "^RESULT $t rollout " "$W/logs/record.log")
  case "$r" in *" OK "*) pass "record $t under torch: ${r#RESULT $t rollout OK }" ;;
    *) fail "record $t: ${r:-no result (logs/record.log)}"; tail -5 "$W/logs/record.log" ;; esac
done
pack

# ---- 3. replay: recorded libraries by default, --libraries system ---------------------------------
CHECK=$(cat <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1])); mode = sys.argv[2]
l = d["libraries"]; rec, here = l["recorded"] or {}, l["replay"] or {}
sites = {s["site"]: s for s in d["sites"]}
o = sites.get("output:noise_pred", {})
bitwise = o.get("steps") and o.get("steps_bitwise_equal") == o.get("steps")
fd = [f.get("site") for f in d.get("first_divergent", [])]
def same_dir(a, b):
    return bool(a and b) and os.path.realpath(os.path.dirname(a)) == os.path.realpath(os.path.dirname(b))
msg = "verdict %s; output mean|d| %.4g, bitwise %s/%s steps; first divergent %s; cuDNN here %s (recorded %s); cuBLASLt here %s (recorded %s)" % (
    l["verdict"], o.get("mean_abs_diff", float("nan")), o.get("steps_bitwise_equal"), o.get("steps"), fd,
    here.get("versions", {}).get("cudnn"), rec.get("versions", {}).get("cudnn"),
    here.get("versions", {}).get("cublaslt"), rec.get("versions", {}).get("cublaslt"))
if mode == "recorded":
    ok = l["verdict"] == "same" and bitwise
    for k in ("cudnn_path", "cublaslt_path"):
        if rec.get(k) and os.path.exists(rec[k]):
            ok = ok and same_dir(rec[k], here.get(k))
            msg += "; %s %s" % (k, "as recorded" if same_dir(rec[k], here.get(k)) else "NOT the recorded one: " + str(here.get(k)))
    print(msg); sys.exit(0 if ok else 1)
print(msg)
sys.exit(0 if l["verdict"] == "differ" else 3 if l["verdict"] == "same" else 1)
PY
)
for t in ${MODELS//,/ }; do
  T="$W/acc/$t/rollout.h5"
  [ -f "$T" ] || { skip "replay $t: no trace"; continue; }
  [ "$(left)" -lt 40 ] && { skip "replay $t: time budget spent"; continue; }
  drift ls "$T" > "$W/logs/ls_$t.txt" 2>&1
  info "$t recorded: $(grep -A1 '^libraries' "$W/logs/ls_$t.txt" | tr -s ' ' | tr '\n' ' ')"
  js="$W/logs/replay_${t}_recorded.json"
  drift_to 200 replay "$T" --device cuda --ref trainer --json > "$js" 2> "${js%.json}.err"
  rc=$?
  lib=$(grep -m1 "drift replay: libraries:" "${js%.json}.err")
  info "$t stderr: ${lib:-no libraries line}"
  if [ $rc -gt 1 ]; then fail "replay $t (default --libraries recorded): exit $rc: $(tail -3 "${js%.json}.err" | tr '\n' ' ')"
  elif ! echo "$lib" | grep -q "the recording's: "; then fail "replay $t: stderr does not name the recording's libraries: ${lib:-none}"
  elif msg=$("$PY" -c "$CHECK" "$js" recorded 2>&1); then pass "replay $t from a plain shell loads the recorded libraries and is bitwise at the output: $msg"
  else fail "replay $t (recorded libraries): $msg"; fi
  js="$W/logs/replay_${t}_system.json"
  drift_to 200 replay "$T" --device cuda --ref trainer --libraries system --json > "$js" 2> "${js%.json}.err"
  rc=$?
  msg=$("$PY" -c "$CHECK" "$js" system 2>&1); c=$?
  if [ $rc -gt 1 ]; then fail "replay $t --libraries system: exit $rc: $(tail -3 "${js%.json}.err" | tr '\n' ' ')"
  elif [ $c = 0 ]; then pass "replay $t --libraries system: the old verdict (bitwise equality not expected): $msg"
  elif [ $c = 3 ]; then info "replay $t --libraries system: the toolkit's builds equal torch's here, nothing to contrast: $msg"
  else fail "replay $t --libraries system: $msg"; fi
  grep "libraries" "${js%.json}.err" | head -1 | sed 's/^/INFO: system stderr: /' | tee -a "$SUM"
done
pack

# ---- 4. pip install into a fresh venv, then the quickstart ----------------------------------------
if [ "$(left)" -lt 120 ]; then skip "pip install + quickstart: time budget spent"; pack; [ $fails -eq 0 ]; exit $?; fi
V="$W/venv"
if "$PY" -m venv --system-site-packages "$V" > "$W/logs/venv.log" 2>&1; then
  # torch's own site-packages (a venv python's --system-site-packages is its base interpreter's)
  site=$("$V/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$PY" -c 'import os, sysconfig, torch; print(sysconfig.get_paths()["purelib"]); print(os.path.dirname(os.path.dirname(torch.__file__)))' \
    2>/dev/null | sort -u > "$site/drift_torch_env.pth"
  if ! "$V/bin/python" -c "import setuptools, torch" > "$W/logs/venv_import.log" 2>&1; then
    skip "pip install: the venv lacks setuptools or torch: $(tail -1 "$W/logs/venv_import.log")"
  else
    cp -r "$S/recorder/python" "$W/pkg"; rm -rf "$W/pkg/build" "$W/pkg"/*.egg-info
    s=$(date +%s)
    if (cd "$W" && env -u PYTHONPATH -u DRIFT_RECORDER_LIB DRIFT_SOURCE_DIR="$S" DRIFT_RECORDER_BUILD_DIR="$W/pipbuild" \
          "$V/bin/python" -m pip install -v --no-build-isolation --no-index --no-cache-dir "$W/pkg") > "$W/logs/pip.log" 2>&1; then
      cuda=$(grep -o "CUDA=[A-Z]*" "$W/logs/pip.log" | head -1)
      pass "pip install --no-build-isolation --no-index ./recorder/python in a fresh venv ($(( $(date +%s) - s )) s, drift: $cuda)"
      mkdir -p "$W/qs"
      if (cd "$W/qs" && env -u PYTHONPATH -u DRIFT_RECORDER_LIB timeout -s KILL 180 "$V/bin/python" -m torch.distributed.run \
            --standalone --nproc_per_node=1 "$S/tests/gpu/recorder_quickstart.py" "$W/qs") > "$W/logs/quickstart.log" 2>&1 &&
         [ -f "$W/qs/traces/trainer.rank0.h5" ]; then
        o=$(drift check "$W/qs/traces/trainer.rank0.h5" 2>&1); rc=$?
        [ $rc -eq 0 ] && pass "the quickstart (installed package, FSDP2, torchrun) recorded a trace drift check accepts: $(grep -m1 RESULT "$W/logs/quickstart.log")" \
          || fail "drift check of the quickstart trace (rc $rc): $o"
      else fail "quickstart: $(tail -5 "$W/logs/quickstart.log" | tr '\n' ' ')"; fi
    else fail "pip install: $(tail -15 "$W/logs/pip.log" | tr '\n' ' ')"; fi
  fi
else skip "python -m venv: $(tail -1 "$W/logs/venv.log")"; fi
pack
info "total $(( $(date +%s) - T0 )) s"
[ $fails -eq 0 ]
