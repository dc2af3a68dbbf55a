#!/usr/bin/env bash
# Issue 34 item 12: strings from a file (a family, a plan name, a site name)
# carrying ESC/BEL sequences and UTF-8 C1 controls (U+009B CSI, U+009D OSC)
# reach no terminal raw: ls (text, --json, --format csv), check, compare
# (text, --json; the model line and the mismatch warning), top --batch and
# replay's "replaying the plan" line print them escaped (formats/term_safe.c;
# JSON as \u001b / \u009b).
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-/tmp}/integrity_term.$$"
fail() { echo "FAIL: $*"; exit 1; }
"$PY" -c 'import h5py' 2>/dev/null || { echo "skip: no h5py"; exit 0; }
mkdir -p "$W"; trap 'rm -rf "$W"' EXIT
PL="$T/plans"
timeout 60 "$D" record --synthetic tiny-dit --steps 2 --trainer-plan "$PL/wan2_2.json" --rollout-plan "$PL/wan2_2.json" \
  -o "$W/a.h5" >/dev/null 2>&1 || fail "record"
"$PY" "$(dirname "$0")/integrity_term.py" "$W/a.h5" "$W/a.rollout.h5" differ || fail "crafting"
n=0
while IFS= read -r c; do
  [ -n "$c" ] || continue
  # shellcheck disable=SC2086
  timeout 60 "$D" $c >"$W/out" 2>&1; rc=$?
  [ $rc -le 2 ] || fail "'drift $c' exited $rc"
  "$PY" - "$W/out" "$c" <<'PY' || exit 1
import sys
b = open(sys.argv[1], "rb").read()
for bad, what in ((b"\x1b", "ESC"), (b"\x07", "BEL"), (b"\xc2\x9b", "U+009B (CSI)"), (b"\xc2\x9d", "U+009D (OSC)"), (b"\x9b", "0x9b")):
    if bad in b:
        i = b.index(bad)
        print("FAIL: 'drift %s' printed %s raw: %r" % (sys.argv[2], what, b[max(0, i - 40):i + 20]))
        sys.exit(1)
PY
  n=$((n + 1))
done <<EOC
ls $W/a.h5
ls $W/a.h5 --json
ls $W/a.h5 --format csv
check $W/a.h5
check $W/a.h5 --json
compare $W/a.h5 $W/a.rollout.h5 --allow-mismatch
compare $W/a.h5 $W/a.rollout.h5 --allow-mismatch --json
compare $W/a.h5 $W/a.rollout.h5
top $W/a.h5 --against $W/a.rollout.h5 --allow-mismatch --batch
top $W/a.h5 --against $W/a.rollout.h5 --allow-mismatch --batch --format csv
replay $W/a.h5 --steps 0:0
EOC
grep -q 'u009b' <("$D" ls "$W/a.h5" --json) || fail "ls --json does not write U+009B as \\u009b"
echo "ok   $n commands on a trace with ESC, BEL, U+009B and U+009D in its family, plan name and a site name: all escaped"
