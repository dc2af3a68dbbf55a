#!/usr/bin/env bash
# Issue 34 item 2 (docs/RELIABILITY.md "Outputs", the failed state): a full
# disk during `record` leaves both traces in the `failed` state, recorded in
# /status as one sentence with the reason and the last committed step; the
# error names the system's reason, never HDF5 internals; `check` exits 1.
# The disk is a 20 MB tmpfs when this runs as root and mount works, else a
# `ulimit -f` (EFBIG, reported like ENOSPC). Bounded: 60 s per command.
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-/tmp}/integrity_disk_full.$$"
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$W/disk"
mounted=0
if [ -z "${DRIFT_NO_MOUNT:-}" ] && [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=20m tmpfs "$W/disk" 2>/dev/null; then mounted=1; fi
trap '[ $mounted = 1 ] && umount "$W/disk"; rm -rf "$W"' EXIT
PL="$T/plans"
rec() { "$D" record --synthetic tiny-dit --steps 200 --trainer-plan "$PL/wan2_2.json" --rollout-plan "$PL/wan2_2_no_norm2.json" -o "$W/disk/x.h5"; }
if [ $mounted = 1 ]; then how="a 20 MB tmpfs"; timeout 60 bash -c "$(declare -f rec); D='$D' PL='$PL' W='$W'; rec" >/dev/null 2>"$W/err"; rc=$?
else how="ulimit -f 20000"; (ulimit -f 20000; timeout 60 bash -c "$(declare -f rec); D='$D' PL='$PL' W='$W'; rec") >/dev/null 2>"$W/err"; rc=$?; fi
[ $rc = 2 ] || fail "record on a full disk ($how) exited $rc (expected 2): $(tail -c 400 "$W/err")"
grep -qE 'buf = 0x|bytes actually written|HDF5|H5[A-Z]' "$W/err" && fail "the error shows HDF5 internals: $(cat "$W/err")"
grep -qE 'No space left on device|File too large' "$W/err" || fail "the error does not give the system's reason: $(cat "$W/err")"
grep -qE 'steps 0\.\.[0-9]+ are committed' "$W/err" || fail "the error does not name the last committed step: $(cat "$W/err")"
for f in x.h5 x.rollout.h5; do
  # under ulimit -f the file can end before its stored end (promise 5): repair first, as `ls` says
  if ! "$D" ls "$W/disk/$f" >/dev/null 2>"$W/lserr"; then
    grep -q 'cut short' "$W/lserr" || fail "ls $f: $(cat "$W/lserr")"
    "$D" check --repair "$W/disk/$f" >/dev/null 2>&1
  fi
  st=$("$D" ls "$W/disk/$f" --json 2>/dev/null | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(d.get("status") or "", "|", d["steps"]["committed"])')
  case "$st" in "failed at step "*"are committed |"*) ;; *) fail "$f after a full disk: status '$st' (expected the failed state)";; esac
  "$D" check "$W/disk/$f" >"$W/chk" 2>&1; rc=$?
  [ $rc = 1 ] || fail "check $f after a full disk exited $rc (expected 1): $(tail -5 "$W/chk")"
  grep -q "failed at step" "$W/chk" || fail "check $f does not report the failure: $(cat "$W/chk")"
  echo "ok   $f: ${st}"
done
echo "ok   record on a full disk ($how): exit 2, the system's reason, both traces in the failed state, check exit 1"
