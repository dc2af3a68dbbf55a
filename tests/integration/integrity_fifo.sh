#!/usr/bin/env bash
# Issue 34 item 16: a FIFO named on the command line (a trace, --sitemap, a
# report JSON, --plan, --trainer-plan, top --against, bisect --good) is
# refused with exit 2 before it is opened (formats/infile.c), never waited on.
# Each command is bounded by 10 s (a hang fails the test).
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"
W="${DRIFT_TMP:-/tmp}/integrity_fifo.$$"
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$W"; trap 'rm -rf "$W"' EXIT
PL="$T/plans"
timeout 60 "$D" record --synthetic tiny-dit --steps 2 --trainer-plan "$PL/wan2_2.json" --rollout-plan "$PL/wan2_2.json" \
  -o "$W/a.h5" >/dev/null 2>&1 || fail "record"
mkfifo "$W/fifo.h5" "$W/fifo.json"
n=0
while IFS= read -r c; do
  [ -n "$c" ] || continue
  # shellcheck disable=SC2086
  timeout 10 "$D" $c >/dev/null 2>"$W/err"; rc=$?
  [ $rc = 124 ] && fail "'drift $c' hung on the FIFO"
  [ $rc = 2 ] || fail "'drift $c' exited $rc (expected 2): $(head -c 300 "$W/err")"
  grep -q "FIFO" "$W/err" || fail "'drift $c' did not say FIFO: $(head -c 300 "$W/err")"
  n=$((n + 1))
done <<EOC
compare $W/a.h5 $W/fifo.h5
compare $W/a.h5 $W/a.rollout.h5 --sitemap $W/fifo.json
report $W/fifo.json -o $W/r.html
report $W/a.h5 --against $W/a.rollout.h5 --sitemap $W/fifo.json -o $W/r.html
replay $W/a.h5 --plan $W/fifo.json
record --synthetic tiny-dit --steps 2 --trainer-plan $W/fifo.json --rollout-plan $PL/wan2_2.json -o $W/n.h5
top $W/a.h5 --against $W/fifo.h5 --batch
ls $W/fifo.h5
check $W/fifo.h5
bisect $W/a.h5 --good $W/fifo.json --bad $PL/wan2_2.json
plan compile --plan $W/fifo.json --model tiny-dit
EOC
echo "ok   $n commands naming a FIFO: exit 2 'FIFO', none blocked"
