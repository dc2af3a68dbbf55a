#!/usr/bin/env bash
# drift bisect's prefix reuse through the real binary: the JSON answer is the
# same with and without it (every number bit for bit: JSON prints %.17g),
# the text says how much was reused, DRIFT_BISECT_PREFIX=0 turns it off, and
# bad --prefix-cache-mb values are exit 2 naming the flag.
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-$(mktemp -d)}/bisect_prefix"; rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
G="$T/plans/wan2_2_no_norm2.json"; B="$T/plans/wan2_2.json"

"$D" record --synthetic tiny-dit --steps 2 --trainer-plan "$B" --rollout-plan "$G" -o "$W/t.h5" 2>/dev/null || fail "record"
ARGS=(--good "$G" --bad "$B" --granularity param --all --threshold 0 --parallel 1)
"$D" bisect "$W/t.h5" "${ARGS[@]}" --json >"$W/on.json" 2>/dev/null || fail "bisect (prefix cache) exited $?"
"$D" bisect "$W/t.h5" "${ARGS[@]}" --json --no-prefix-cache >"$W/off.json" 2>/dev/null || fail "bisect --no-prefix-cache exited $?"
DRIFT_BISECT_PREFIX=0 "$D" bisect "$W/t.h5" "${ARGS[@]}" --json >"$W/env.json" 2>/dev/null || fail "DRIFT_BISECT_PREFIX=0 bisect"
"$PY" - "$W/on.json" "$W/off.json" "$W/env.json" <<'PY' || fail "answers differ or the cache was not used"
import json, sys
on, off, env = (json.load(open(p)) for p in sys.argv[1:])
pc = on.pop("prefix_cache")
assert pc["on"] and pc["reused"] > 0 and pc["boundaries"] == 8 and 0 < pc["skipped_fraction"] < 1, pc
for d in (off, env):
    assert d.pop("prefix_cache")["on"] is False
for d in (on, off, env):
    d.pop("seconds")
    # values the device cache kept between replays: how many depends on which replays resumed
    assert d.pop("values_adopted") > 0
assert on == off == env, "the answers differ"
assert sum(len(s) for s in on["culprit_sets"]) == 4, on["culprit_sets"]
PY

"$D" bisect "$W/t.h5" "${ARGS[@]}" >"$W/on.txt" 2>/dev/null || fail "bisect text"
grep -Eq '^prefix reuse: [1-9][0-9]* of [0-9]+ probe replays started past the inputs, [0-9.]+% of their forward skipped \(8 boundaries' "$W/on.txt" \
  || fail "no prefix reuse line: $(tail -2 "$W/on.txt")"
"$D" bisect "$W/t.h5" "${ARGS[@]}" --no-prefix-cache >"$W/off.txt" 2>/dev/null || fail "bisect text off"
grep -q '^prefix reuse' "$W/off.txt" && fail "prefix reuse line with --no-prefix-cache"
"$D" bisect "$W/t.h5" "${ARGS[@]}" 2>"$W/stream.txt" >/dev/null || fail "bisect stream"
grep -Eq "^probe [0-9]+ .*, [0-9]+% of the forward reused\)" "$W/stream.txt" || fail "no reuse share on the probe lines: $(head -3 "$W/stream.txt")"

for bad in 0 -3 12x; do
  "$D" bisect "$W/t.h5" "${ARGS[@]}" --prefix-cache-mb "$bad" >/dev/null 2>"$W/err.txt"; rc=$?
  [ $rc -eq 2 ] || fail "--prefix-cache-mb $bad: exit $rc, expected 2"
  grep -q -- "--prefix-cache-mb" "$W/err.txt" || fail "--prefix-cache-mb $bad: error does not name the flag: $(cat "$W/err.txt")"
done
"$D" bisect "$W/t.h5" "${ARGS[@]}" --prefix-cache-mb 4 --no-prefix-cache >/dev/null 2>"$W/err.txt"; rc=$?
[ $rc -eq 2 ] || fail "--prefix-cache-mb with --no-prefix-cache: exit $rc"
"$D" bisect --help | grep -q -- "--no-prefix-cache" || fail "--help lacks --no-prefix-cache"
echo "PASS bisect_prefix"
