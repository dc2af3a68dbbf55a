#!/usr/bin/env bash
# The recorder as a pip package (issue 35, docs/recorder.md "Install"):
#   pip install --no-build-isolation --no-index ./recorder/python into a fresh
#   venv (python3 -m venv --system-site-packages: numpy and h5py from the
#   system; setuptools from python3-setuptools, no PyPI), which builds
#   libdrift_recorder.so through the project's CMake and ships it inside the
#   package; then, from another folder, with neither DRIFT_RECORDER_LIB nor
#   PYTHONPATH: import drift_recorder (the library found inside the installed
#   package), record a numpy trace, and `drift check` accepts it.
set -u
S="${DRIFT_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}"
DRIFT="${DRIFT_BIN:-$S/build/drift}"
PY="${PYTHON3:-python3}"
[ -x "$DRIFT" ] || { echo "SKIP: $DRIFT not built"; exit 77; }
"$PY" -c "import numpy, h5py" 2>/dev/null || { echo "SKIP: $PY has no numpy/h5py"; exit 77; }
"$PY" -c "import ensurepip, setuptools" 2>/dev/null || { echo "SKIP: $PY lacks venv/ensurepip or setuptools (scripts/setup.sh installs python3-venv python3-setuptools)"; exit 77; }
command -v cmake >/dev/null || { echo "SKIP: no cmake"; exit 77; }
W="${DRIFT_TMP:-$(mktemp -d)}/recorder_pip"; rm -rf "$W"; mkdir -p "$W"
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
unset DRIFT_RECORDER_LIB PYTHONPATH LD_PRELOAD
"$PY" -m venv --system-site-packages "$W/venv" || { fail "python3 -m venv"; exit 1; }
V="$W/venv/bin/python"
# a private copy of the package folder: the in-tree build leaves build/ and *.egg-info beside setup.py
cp -r "$S/recorder/python" "$W/pkg"; rm -rf "$W/pkg/build" "$W/pkg"/*.egg-info
extra=""; command -v ccache >/dev/null && extra="-DCMAKE_C_COMPILER_LAUNCHER=ccache"
t0=$(date +%s)
if DRIFT_SOURCE_DIR="$S" DRIFT_RECORDER_BUILD_DIR="$W/cmake" DRIFT_CMAKE_ARGS="-DDRIFT_CUDA=OFF $extra" \
   "$V" -m pip install --no-build-isolation --no-index --no-cache-dir "$W/pkg" > "$W/pip.log" 2>&1; then
  pass "pip install --no-build-isolation --no-index ./recorder/python ($(( $(date +%s) - t0 )) s)"
else
  fail "pip install: $(tail -20 "$W/pip.log")"; exit 1
fi
mkdir -p "$W/elsewhere"
if (cd "$W/elsewhere" && "$V" - "traces/t.h5" <<'PY'); then pass "import without DRIFT_RECORDER_LIB (library inside the installed package), numpy trace recorded into a folder the recorder created (traces/)"; else fail "import / record"; fi
import os, sys
import numpy as np
import drift_recorder as dr
lib = dr.find_library()
pkg = os.path.dirname(dr.__file__)
assert "site-packages" in pkg and lib == os.path.join(pkg, "libdrift_recorder.so"), (pkg, lib)
with dr.Recorder(sys.argv[1], run_id="pip", family="tiny-dit", strict=True) as rec:
    for step in range(2):
        with rec.step(step):
            rec.record("blocks.0:out", np.arange(12, dtype=np.float32).reshape(3, 4) + step)
            rec.output("noise_pred", np.ones((3, 4), np.float32))
PY
o=$("$DRIFT" check "$W/elsewhere/traces/t.h5" 2>&1); rc=$?
[ $rc -eq 0 ] && pass "drift check accepts the trace" || fail "drift check (rc $rc): $o"
"$V" -m pip show drift-recorder 2>/dev/null | grep -q "^Version: 0.1.0" && pass "pip show: drift-recorder 0.1.0" || fail "pip show"

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
