#!/usr/bin/env bash
# Per-step graphs (issue 31, docs/format.md 9.1) without torch: a trace whose
# /graph is specialised to step 0's data and whose later steps carry graphs
# of their own, written through the Recorder (ctypes), then replayed (each
# step with its graph, bitwise), refused (a step without a graph, a step
# whose inputs lack its graph's shapes: exit 2) and checked
# (tests/integration/step_graphs.py). Needs libdrift_recorder.so and python3
# with numpy and h5py (skips without).
set -u
S="${DRIFT_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}"
DRIFT="${DRIFT_BIN:-$S/build/drift}"
SO="${DRIFT_RECORDER_SO:-$(dirname "$DRIFT")/libdrift_recorder.so}"
PY="${PYTHON3:-python3}"
if [ -f "$SO" ] && asan=$(ldd "$SO" 2>/dev/null | awk '/libasan/ {print $3}') && [ -n "$asan" ]; then
  export LD_PRELOAD="$asan${LD_PRELOAD:+:$LD_PRELOAD}"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
[ -x "$DRIFT" ] || { echo "SKIP: $DRIFT not built"; exit 77; }
[ -f "$SO" ] || { echo "SKIP: $SO not built"; exit 77; }
"$PY" -c "import numpy, h5py" 2>/dev/null || { echo "SKIP: $PY has no numpy/h5py"; exit 77; }
W="${DRIFT_TMP:-$(mktemp -d)}/step_graphs"; rm -rf "$W"; mkdir -p "$W"
cd "$S" && DRIFT_BIN="$DRIFT" DRIFT_RECORDER_LIB="$SO" PYTHONPATH="$S/recorder/python${PYTHONPATH:+:$PYTHONPATH}" \
  "$PY" "$S/tests/integration/step_graphs.py" "$W"
