#!/usr/bin/env bash
# Traces from strangers (issue 23): h5py-crafted files that link, map or
# filter their way to other files, or declare more than they hold; every
# reading command exits 2 naming the object, opens nothing foreign (strace),
# stays under 20 s and 400 MB. The crafted files are made at test time by
# tests/integration/hostile_files.py from a freshly recorded trace.
set -u
D="${DRIFT_BIN:?}"; PY="${PYTHON3:-/usr/bin/python3}"; T="${DRIFT_TESTDATA:?}"
W="${DRIFT_TMP:-/tmp}/hostile_files.$$"
[ -x "$D" ] || { echo "FAIL: no drift binary at $D"; exit 1; }
"$PY" -c 'import h5py, numpy' 2>/dev/null || { echo "SKIP: $PY lacks h5py/numpy"; exit 77; }
command -v strace >/dev/null || echo "note: no strace (apt-get install strace): foreign opens are not traced"
mkdir -p "$W"
"$PY" "$(dirname "$0")/hostile_files.py" "$D" "$T/plans" "$W" ${DRIFT_HOSTILE_CORPUS:+--keep-corpus "$DRIFT_HOSTILE_CORPUS"}
rc=$?
[ $rc -eq 0 ] && rm -rf "$W"
exit $rc
