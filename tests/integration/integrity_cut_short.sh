#!/usr/bin/env bash
# Issue 34 item 1: a trace whose writer was killed and which was then cut
# short (`truncate`) opens through SWMR, and HDF5 reads the missing bytes as
# zeros. Every reader must refuse it (exit 2, "cut short below its committed
# steps"), `check` must say so (exit 1) and `check --repair` must refuse it
# without touching it; a killed trace that is whole still reads. Bounded:
# 60 s per command (and for the writer's first 12 steps).
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-/tmp}/integrity_cut_short.$$"
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$W"; trap 'rm -rf "$W"' EXIT
PL="$T/plans"
"$D" record --synthetic tiny-dit --steps 400 --step-delay-ms 30 --trainer-plan "$PL/wan2_2.json" \
  --rollout-plan "$PL/wan2_2_no_norm2.json" -o "$W/k.h5" >/dev/null 2>&1 & p=$!
n=0
for _ in $(seq 600); do
  sleep 0.1
  n=$("$D" ls "$W/k.h5" --json 2>/dev/null | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["steps"]["committed"])' 2>/dev/null || echo 0)
  [ "$n" -ge 12 ] && break
done
kill -9 $p; wait $p 2>/dev/null
[ "$n" -ge 12 ] || fail "the writer committed only $n steps in 60 s"
n=$("$D" ls "$W/k.h5" --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["steps"]["committed"])') || fail "ls of the killed (whole) trace failed"
"$D" compare "$W/k.h5" "$W/k.rollout.h5" >/dev/null 2>&1; rc=$?
[ $rc -le 1 ] || fail "compare of the killed (whole) traces exited $rc"
echo "ok   a killed trace that is whole reads ($n committed steps)"
sz=$(stat -c %s "$W/k.h5")
truncate -s $((sz * 6 / 10)) "$W/k.h5"
cp "$W/k.h5" "$W/k.cut"
for cmd in "ls $W/k.h5" "ls $W/k.h5 --json" "compare $W/k.h5 $W/k.rollout.h5" "top $W/k.h5 --batch" \
           "replay $W/k.h5 --plan $PL/wan2_2.json --steps 3:5" "report $W/k.h5 -o $W/r.html"; do
  # shellcheck disable=SC2086
  timeout 60 "$D" $cmd >"$W/out" 2>"$W/err"; rc=$?
  [ $rc = 2 ] || fail "'drift $cmd' on the cut trace exited $rc (expected 2): $(tail -c 300 "$W/err")"
  cat "$W/out" "$W/err" | grep -q "cut short" || fail "'drift $cmd' did not say the file is cut short: $(tail -c 300 "$W/err")"
done
echo "ok   ls, ls --json, compare, top --batch, replay, report: exit 2, 'cut short'"
timeout 60 "$D" check "$W/k.h5" >"$W/out" 2>&1; rc=$?
[ $rc = 1 ] || fail "check of the cut trace exited $rc (expected 1)"
grep -q "cut short below its committed steps" "$W/out" || fail "check does not give the cause: $(cat "$W/out")"
grep -q "does not match its stats row" "$W/out" && fail "check reports zeros as corrupt data instead of the cut"
timeout 60 "$D" check --repair "$W/k.h5" >"$W/out" 2>&1; rc=$?
[ $rc = 2 ] || fail "check --repair of the cut trace exited $rc (expected 2)"
grep -qE 'HDF5|eof =|sblock' "$W/out" && fail "check --repair shows HDF5 internals: $(cat "$W/out")"
cmp -s "$W/k.h5" "$W/k.cut" || fail "check --repair changed the cut trace"
echo "ok   check: exit 1 naming the cut; check --repair: exit 2, nothing touched, no HDF5 text"
