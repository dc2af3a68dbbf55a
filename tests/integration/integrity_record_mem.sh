#!/usr/bin/env bash
# Issue 34 item 15: `record` plans its host memory before it makes or reads
# the weights (replay/exec/memplan.h, as replay does): a model that cannot
# fit stops at once with exit 2 naming the need and the limit, instead of
# allocating until it is killed. The limit is set (DRIFT_MEM_LIMIT_HOST) so
# that the test does not depend on the machine.
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"
W="${DRIFT_TMP:-/tmp}/integrity_record_mem.$$"
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$W"; trap 'rm -rf "$W"' EXIT
PL="$T/plans"
R=(--steps 2 --trainer-plan "$PL/wan2_2.json" --rollout-plan "$PL/wan2_2.json")
DRIFT_MEM_LIMIT_HOST=8G /usr/bin/time -f "%e %M" -o "$W/time" timeout 60 "$D" record --synthetic wan2.2:layers=40 "${R[@]}" \
  -o "$W/big.h5" >/dev/null 2>"$W/err"; rc=$?
[ $rc = 2 ] || fail "record of wan2.2:layers=40 under an 8 GiB host limit exited $rc (expected 2): $(tail -c 300 "$W/err")"
grep -q "record (a trainer and a rollout forward) needs about .* of host memory (fp32 masters .* but 8.0 GiB is available" "$W/err" ||
  fail "the refusal does not name the need and the limit: $(cat "$W/err")"
read -r secs kb < <(tail -1 "$W/time")
[ "$kb" -lt 300000 ] || fail "record allocated ${kb} KB before refusing"
ls "$W" | grep -q '^big' && fail "the refused record left files: $(ls "$W")"
echo "ok   record wan2.2:layers=40 under DRIFT_MEM_LIMIT_HOST=8G: exit 2 in ${secs} s, max RSS ${kb} KB, nothing written"
DRIFT_MEM_LIMIT_HOST=2G timeout 60 "$D" record --synthetic tiny-dit "${R[@]}" -o "$W/small.h5" >/dev/null 2>"$W/err" ||
  fail "record tiny-dit under 2 GiB: $(cat "$W/err")"
echo "ok   record tiny-dit under DRIFT_MEM_LIMIT_HOST=2G: recorded"
