#!/usr/bin/env bash
# Issue 34 item 17: a /graph nested deeper than 64 levels is a problem of
# the file that names /graph and the limit (check exit 1), never "out of
# memory"; a 20 MB /graph (docs/format.md allows 64 MiB) is checked as JSON.
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-/tmp}/integrity_graph_limits.$$"
fail() { echo "FAIL: $*"; exit 1; }
"$PY" -c 'import h5py' 2>/dev/null || { echo "skip: no h5py"; exit 0; }
mkdir -p "$W"; trap 'rm -rf "$W"' EXIT
S="$(dirname "$0")"
timeout 60 "$D" record --synthetic tiny-dit --steps 2 --trainer-plan "$T/plans/wan2_2.json" --rollout-plan "$T/plans/wan2_2.json" \
  -o "$W/a.h5" >/dev/null 2>&1 || fail "record"
cp "$W/a.h5" "$W/deep.h5"; "$PY" "$S/integrity_graph.py" "$W/deep.h5" deep || fail "h5py deep"
timeout 60 "$D" check "$W/deep.h5" >"$W/out" 2>&1; rc=$?
[ $rc = 1 ] || fail "check of a 65-level /graph exited $rc (expected 1): $(tail -3 "$W/out")"
grep -q "/graph.*64 levels (limit)" "$W/out" || fail "check does not name /graph and the limit: $(tail -3 "$W/out")"
grep -qi "out of memory\|nomem" "$W/out" && fail "check calls a limit out of memory"
timeout 60 "$D" check "$W/deep.h5" --json >"$W/out" 2>&1
grep -q "nomem" "$W/out" && fail "check --json reports nomem for a limit"
echo "ok   /graph nested 65 levels: check exit 1 naming /graph and the 64-level limit"
cp "$W/a.h5" "$W/big.h5"; "$PY" "$S/integrity_graph.py" "$W/big.h5" 20000000 || fail "h5py big"
timeout 60 "$D" check "$W/big.h5" >"$W/out" 2>&1; rc=$?
[ $rc = 0 ] || fail "check of a 20 MB /graph exited $rc (expected 0: within the 64 MiB of docs/format.md): $(tail -3 "$W/out")"
echo "ok   a 20 MB /graph: check exit 0"
