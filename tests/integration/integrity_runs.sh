#!/usr/bin/env bash
# Issue 34 items 3-5: compare / top / report refuse two different runs (run
# ids) and a --steps range past the committed steps; report refuses a bisect
# of another run; a report page of a trace whose writer did not finish says
# PARTIAL; after `check --repair` a killed trace reads "repaired", not
# "NOT closed cleanly". Bounded: 60 s per command.
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-/tmp}/integrity_runs.$$"
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$W"; trap 'rm -rf "$W"' EXIT
PL="$T/plans"
R=(--synthetic tiny-dit --trainer-plan "$PL/wan2_2.json" --rollout-plan "$PL/wan2_2_no_norm2.json")
run() { timeout 60 "$D" "$@"; }
expect2() { # expect2 WORDS CMD...: exit 2 and WORDS in the output
  local words=$1; shift
  run "$@" >"$W/out" 2>&1; local rc=$?
  [ $rc = 2 ] || fail "'drift $*' exited $rc (expected 2): $(tail -c 300 "$W/out")"
  grep -q "$words" "$W/out" || fail "'drift $*' did not say '$words': $(tail -c 300 "$W/out")"
}
run record "${R[@]}" --steps 8 -o "$W/a.h5" >/dev/null 2>&1 || fail "record a"
run record "${R[@]}" --steps 8 --seed 7 -o "$W/b.h5" >/dev/null 2>&1 || fail "record b"

# ---- 3: different runs, out-of-range steps, a bisect of another run ---------------------------------
expect2 "run id differs" compare "$W/a.h5" "$W/b.h5"
expect2 "run id differs" top "$W/a.h5" --against "$W/b.h5" --batch
expect2 "run id differs" report "$W/a.h5" --against "$W/b.h5" -o "$W/r.html"
run compare "$W/a.h5" "$W/b.h5" --allow-mismatch >/dev/null 2>"$W/err"; rc=$?
[ $rc -le 1 ] && grep -q "run id differs" "$W/err" || fail "compare --allow-mismatch of two runs: exit $rc, no warning"
echo "ok   compare / top --against / report --against of two runs: exit 2 naming both run ids (--allow-mismatch: a warning)"
expect2 "out of range" compare "$W/a.h5" "$W/a.rollout.h5" --steps 2:50
expect2 "out of range" report "$W/a.h5" --against "$W/a.rollout.h5" --steps 2:50 -o "$W/r.html"
run compare "$W/a.h5" "$W/a.rollout.h5" --steps 2:5 >/dev/null 2>&1; [ $? -le 1 ] || fail "compare --steps 2:5 failed"
echo "ok   compare / report --steps 2:50 of an 8-step trace: exit 2 (2:5 runs)"
run bisect "$W/b.h5" --good "$PL/wan2_2.json" --bad "$PL/wan2_2_no_norm2.json" --json >"$W/b.json" 2>/dev/null || fail "bisect b"
grep -q '"run_id"' "$W/b.json" || fail "bisect --json does not name its run"
expect2 "a bisect of run" report "$W/a.h5" "$W/b.json" -o "$W/r.html"
[ -e "$W/r.html" ] && fail "report wrote a page with another run's bisect"
echo "ok   report TRACE BISECT.json of another run: exit 2, no page"

# ---- 4: a page of a trace whose writer did not finish says PARTIAL -------------------------------------
run record "${R[@]}" --steps 300 -o "$W/l.h5" >/dev/null 2>&1 || fail "record l"
got=0
for try in 1 2 3 4 5 6; do
  rm -f "$W"/l.res.*
  "$D" replay "$W/l.h5" --plan "$PL/wan2_2_no_norm2.json" -o "$W/l.res.h5" >/dev/null 2>&1 & p=$!
  for _ in $(seq 100); do
    n=$("$D" ls "$W/l.res.h5" --json 2>/dev/null | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["steps"]["committed"])' 2>/dev/null || echo 0)
    [ "$n" -ge 3 ] && break
    sleep 0.02
  done
  kill -9 $p 2>/dev/null; wait $p 2>/dev/null
  ended=$("$D" ls "$W/l.res.h5" --json 2>/dev/null | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(d["ended"], d["steps"]["committed"])' 2>/dev/null)
  case "$ended" in killed\ [1-9]*) got=1; break;; esac
done
if [ $got = 1 ]; then
  run report "$W/l.res.h5" -o "$W/p.html" >/dev/null 2>&1 || fail "report of the killed replay result failed"
  grep -q "PARTIAL" "$W/p.html" || fail "the page of a killed replay result does not say PARTIAL"
  echo "ok   report of a replay -o result whose writer was killed: the page says PARTIAL ($ended)"
else
  echo "skip report of a killed replay -o result: the replay finished before it could be killed 6 times"
fi
"$D" record "${R[@]}" --steps 400 --step-delay-ms 30 -o "$W/k.h5" >/dev/null 2>&1 & p=$!
for _ in $(seq 100); do
  sleep 0.1
  n=$("$D" ls "$W/k.h5" --json 2>/dev/null | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["steps"]["committed"])' 2>/dev/null || echo 0)
  [ "$n" -ge 3 ] && break
done
run report "$W/k.h5" --against "$W/k.rollout.h5" -o "$W/w.html" >/dev/null 2>&1 || fail "report of a trace being written failed"
grep -q "PARTIAL.*still being written" "$W/w.html" || fail "the page of a trace being written does not say PARTIAL"
kill -9 $p; wait $p 2>/dev/null
run report "$W/k.h5" --against "$W/k.rollout.h5" -o "$W/k.html" >/dev/null 2>&1 || fail "report of a killed trace failed"
grep -q "PARTIAL.*killed" "$W/k.html" || fail "the page of a killed trace does not say PARTIAL"
echo "ok   report of traces being written / killed: the page says PARTIAL"

# ---- 5: after check --repair a killed trace reads "repaired" ---------------------------------------
run check --repair "$W/k.h5" >/dev/null 2>&1 || fail "check --repair of the killed trace failed"
"$D" ls "$W/k.h5" >"$W/ls" 2>&1 || fail "ls after repair failed"
grep -q "NOT closed cleanly\|writer killed\|killed while recording" "$W/ls" && fail "ls after repair still says killed: $(head -3 "$W/ls")"
grep -q "^status    repaired: its writer stopped without closing after step" "$W/ls" || fail "ls after repair: $(grep status "$W/ls")"
run check "$W/k.h5" >"$W/chk" 2>&1; rc=$?
[ $rc = 0 ] || fail "check after repair exited $rc"
grep -q "NOT closed cleanly" "$W/chk" && fail "check after repair still says NOT closed cleanly"
grep -q "^state      closed cleanly by \`drift check --repair\`" "$W/chk" || fail "check after repair: $(grep state "$W/chk")"
echo "ok   after check --repair: ls and check say 'repaired', check exits 0"
