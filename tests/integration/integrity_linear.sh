#!/usr/bin/env bash
# Issue 34 items 13-14: JSON objects and site-map globs in linear time.
# A JSON object of 10^6 keys (with and without a duplicate), a checkpoint
# index naming 80,000 shards, and site-map rules of 15 and 64 stars against
# every site name are each answered within 120 s (they took minutes to hours; the bound is a hang guard for a
# loaded or sanitized build, not a speed claim: the times are printed).
# Prints the times (docs/RELIABILITY.md figures).
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-/tmp}/integrity_linear.$$"
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$W/ix"; trap 'rm -rf "$W"' EXIT
PL="$T/plans"
timed() { # timed LABEL EXPECT_RC WORDS CMD...: bounded by 120 s, prints the time
  local label=$1 want=$2 words=$3; shift 3
  local t0 t1 rc
  t0=$(date +%s.%N)
  timeout 120 "$D" "$@" >"$W/out" 2>&1; rc=$?
  t1=$(date +%s.%N)
  [ $rc = 124 ] && fail "$label: over 120 s"
  [ $rc = "$want" ] || fail "$label: exit $rc (expected $want): $(tail -c 300 "$W/out")"
  grep -q -- "$words" "$W/out" || fail "$label: no '$words' in: $(tail -c 300 "$W/out")"
  printf 'ok   %-58s %6.2f s\n' "$label" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')"
}
"$PY" - "$W" <<'PY'
import json, sys
w = sys.argv[1]
body = ",".join('"k%d": %d' % (i, i) for i in range(10**6))
open(w + "/keys.json", "w").write("{" + body + "}")
open(w + "/dup.json", "w").write("{" + body + ', "k999999": 0}')
json.dump({"metadata": {}, "weight_map": {"t%d" % i: "s%d.safetensors" % i for i in range(80000)}},
          open(w + "/ix/diffusion_pytorch_model.safetensors.index.json", "w"))
json.dump({"rename": [["*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", "x"]]}, open(w + "/map15.json", "w"))
json.dump({"rename": [["*" + "*a" * 62 + "*b", "x"]]}, open(w + "/map64.json", "w"))
PY
timeout 60 "$D" record --synthetic tiny-dit --steps 2 --trainer-plan "$PL/wan2_2.json" --rollout-plan "$PL/wan2_2.json" \
  -o "$W/a.h5" >/dev/null 2>&1 || fail "record"
timed "JSON object of 10^6 keys (report)" 2 "culprit_sets" report "$W/keys.json" -o "$W/r.html"
timed "JSON object of 10^6 keys, the last a duplicate" 2 "duplicate key \"k999999\"" report "$W/dup.json" -o "$W/r.html"
timed "checkpoint index of 80,000 shards (record --params-ref)" 2 "s0.safetensors" record --synthetic tiny-dit --steps 1 \
  --trainer-plan "$PL/wan2_2.json" --rollout-plan "$PL/wan2_2.json" --params-ref "$W/ix" -o "$W/p.h5"
timed "site map rule of 15 stars (compare)" 0 "" compare "$W/a.h5" "$W/a.rollout.h5" --sitemap "$W/map15.json"
timed "site map rule of 64 stars (compare)" 0 "" compare "$W/a.h5" "$W/a.rollout.h5" --sitemap "$W/map64.json"
