#!/usr/bin/env bash
# Graph capture of drift_recorder (issue 15, recorder side) without torch:
# the plain-Python encoder/normaliser and Recorder.capture_graph with
# stand-in exporters (tests/integration/recorder_capture.py). Needs
# libdrift_recorder.so and python3 with numpy and h5py (skips without).
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
if "$PY" -c "import torch" 2>/dev/null; then
  echo "NOTE: torch is importable here; the no-torch checks use stand-ins anyway"
fi
W="${DRIFT_TMP:-$(mktemp -d)}/recorder_capture"; rm -rf "$W"; mkdir -p "$W"
DRIFT_BIN="$DRIFT" DRIFT_RECORDER_LIB="$SO" PYTHONPATH="$S/recorder/python${PYTHONPATH:+:$PYTHONPATH}" \
  "$PY" "$S/tests/integration/recorder_capture.py" "$W"
