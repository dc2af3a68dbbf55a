#!/usr/bin/env bash
# Writers under stress (issue 23, docs/RELIABILITY.md "Writers"): no crash
# after an I/O error (ulimit -f, record / merge / replay -o), a failed record
# never destroys an existing trace nor leaves an empty one, a reader holding
# the file open does not cost it, two writers of one file exclude each other,
# and check --repair refuses a file that is still being written. Each
# scenario is bounded (timeout 60 s per command).
set -u
D="${DRIFT_BIN:?}"; PY="${PYTHON3:-/usr/bin/python3}"; T="${DRIFT_TESTDATA:?}"
W="${DRIFT_TMP:-/tmp}/hostile_writers.$$"
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$W"
[ -x "$D" ] || fail "no drift binary at $D"
PL="$T/plans"
rec() { # rec OUT STEPS [extra...]
  local out=$1 steps=$2; shift 2
  timeout 60 "$D" record --synthetic tiny-dit --steps "$steps" --trainer-plan "$PL/wan2_2.json" \
    --rollout-plan "$PL/wan2_2_no_norm2.json" -o "$out" "$@"
}
steps_of() { "$D" ls "$1" --json 2>/dev/null | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["steps"]["committed"])' 2>/dev/null || echo none; }

# ---- 1 + 17: write failures (ulimit -f): exit 2, no crash, nothing left behind -----------------
for lim in 64 200 400 800 1200; do
  rm -f "$W"/f.*
  (ulimit -f $lim; rec "$W/f.h5" 30 >/dev/null 2>"$W/err")
  rc=$?
  [ $rc -eq 2 ] || fail "record under ulimit -f $lim exited $rc (expected 2; 139 is the exit-time crash): $(tail -c 300 "$W/err")"
  left=$(ls "$W" | grep '^f\.' || true)
  [ -z "$left" ] || fail "record under ulimit -f $lim left files behind: $left"
done
echo "ok   record under ulimit -f (5 limits): exit 2, no crash, no empty or temporary files left"

rec "$W/a.h5" 4 >/dev/null 2>&1 || fail "record a.h5"
rec "$W/b.h5" 4 >/dev/null 2>&1 || fail "record b.h5"
for lim in 8 40; do
  (ulimit -f $lim; timeout 60 "$D" merge "$W/a.h5" -o "$W/m.h5" >/dev/null 2>"$W/err")
  rc=$?
  [ $rc -eq 2 ] || fail "merge under ulimit -f $lim exited $rc: $(tail -c 300 "$W/err")"
  (ulimit -f $lim; timeout 60 "$D" replay "$W/a.h5" --plan "$PL/wan2_2.json" --ref rollout -o "$W/r.h5" >/dev/null 2>"$W/err")
  rc=$?
  [ $rc -eq 2 ] || fail "replay -o under ulimit -f $lim exited $rc: $(tail -c 300 "$W/err")"
done
echo "ok   merge -o / replay -o under ulimit -f: exit 2, no crash"

# ---- 3: a failed record over an existing trace (--force) leaves it as it was --------------------------
cp "$W/a.h5" "$W/a.orig"
(ulimit -f 400; rec "$W/a.h5" 30 --force >/dev/null 2>"$W/err")
[ $? -eq 2 ] || fail "record over a.h5 under ulimit -f did not fail with exit 2"
cmp -s "$W/a.h5" "$W/a.orig" || fail "a failed record changed the existing a.h5"
ls "$W" | grep -q 'drift-tmp' && fail "a failed record left its temporary file"
echo "ok   a failed record over an existing trace leaves it byte for byte"

# a reader holds the trace open (h5py; drift top --follow does the same) while it is re-recorded
if "$PY" -c 'import h5py' 2>/dev/null; then
  "$PY" -c 'import h5py,sys,time; f=h5py.File(sys.argv[1],"r"); open(sys.argv[2],"w").close(); time.sleep(8)' \
    "$W/a.h5" "$W/reader.up" &
  rp=$!
  for _ in $(seq 50); do [ -e "$W/reader.up" ] && break; sleep 0.1; done
  rec "$W/a.h5" 6 --force >/dev/null 2>"$W/err"; rc=$?
  kill $rp 2>/dev/null; wait $rp 2>/dev/null
  n=$(steps_of "$W/a.h5")
  if [ $rc -eq 0 ]; then
    [ "$n" = 6 ] || fail "record while a reader held a.h5 exited 0 but a.h5 holds $n steps"
  else
    cmp -s "$W/a.h5" "$W/a.orig" || fail "record while a reader held a.h5 failed ($rc) and changed it ($n steps)"
  fi
  echo "ok   re-recording a trace a reader holds open: a complete trace either way ($n steps)"
fi

# ---- 4: two writers of one file --------------------------------------------------------------------
for trial in 1 2 3; do
  rm -f "$W"/same.*
  # the first writer paces its steps (20 ms each, >= 1.2 s) so that it is still writing when the second starts
  rec "$W/same.h5" 60 --step-delay-ms 20 >"$W/o1" 2>"$W/e1" & p1=$!
  sleep 0.$((trial * 3))
  # --force: an existing file is not what stops it (docs/cli.md "Outputs"), the lock is
  rec "$W/same.h5" 60 --force >"$W/o2" 2>"$W/e2"; r2=$?
  wait $p1; r1=$?
  [ $r1 -eq 0 ] || fail "trial $trial: the first writer exited $r1: $(tail -c 300 "$W/e1")"
  [ $r2 -eq 2 ] || fail "trial $trial: the second writer exited $r2 (expected 2: the trace is being written)"
  grep -q "another writer" "$W/e2" || fail "trial $trial: the second writer does not say why: $(cat "$W/e2")"
  "$D" check "$W/same.h5" >/dev/null || fail "trial $trial: same.h5 does not check clean after two writers"
  [ "$(steps_of "$W/same.h5")" = 60 ] || fail "trial $trial: same.h5 does not hold the first writer's 60 steps"
done
echo "ok   two writers of one file: the second exits 2 (another writer), the first's trace is whole (3 trials)"

# ---- 5: check --repair on a live writer ------------------------------------------------------------
rm -f "$W"/live.*
rec "$W/live.h5" 80 --step-delay-ms 30 >/dev/null 2>"$W/el" & pl=$!  # paced: still writing when check runs
for _ in $(seq 100); do [ -e "$W/live.h5" ] && break; sleep 0.05; done
sleep 0.5
timeout 60 "$D" check "$W/live.h5" --repair >"$W/o" 2>"$W/e"; rr=$?
wait $pl; rw=$?
[ $rr -eq 2 ] || fail "check --repair on a live writer exited $rr (expected 2): $(cat "$W/o" "$W/e" | tail -c 400)"
grep -q "still writing" "$W/e" || fail "check --repair on a live writer does not say why: $(cat "$W/e")"
[ $rw -eq 0 ] || fail "the live writer exited $rw"
"$D" check "$W/live.h5" >"$W/o" || fail "the live writer's trace does not check clean: $(cat "$W/o")"
echo "ok   check --repair refuses a trace whose writer is still writing; the writer's trace stays whole"

rm -rf "$W"
echo "hostile_writers: all scenarios passed"
