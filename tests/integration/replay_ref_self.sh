#!/usr/bin/env bash
# drift replay TRACE --ref rollout without a sibling NAME.rollout.h5 (issue
# 17 item 4): the trainer's trace holds rollout:model_output (what the rollout
# handed over); replay compares its output with it, says so, and gets the
# same output metrics as against the rollout's own file. With neither, exit 2.
set -euo pipefail
: "${DRIFT_BIN:?}" "${DRIFT_TMP:?}"
PY="${PYTHON3:-/usr/bin/python3}"
T="$DRIFT_TMP/replay_ref_self"
rm -rf "$T" && mkdir -p "$T/solo"
PLANS="${DRIFT_TESTDATA:-$(dirname "$0")/../data}/plans"
fail() { echo "FAIL: $*" >&2; exit 1; }
"$DRIFT_BIN" record --synthetic tiny-dit --steps 2 --trainer-plan "$PLANS/wan2_2.json" \
    --rollout-plan "$PLANS/wan2_2_no_norm2.json" -o "$T/run.h5" 2>/dev/null
cp "$T/run.h5" "$T/solo/run.h5"
"$DRIFT_BIN" replay "$T/run.h5" --plan "$PLANS/wan2_2.json" --ref rollout --json >"$T/pair.json"
"$DRIFT_BIN" replay "$T/solo/run.h5" --plan "$PLANS/wan2_2.json" --ref rollout --json >"$T/self.json" ||
    fail "replay --ref rollout without a sibling file"
"$PY" - "$T/pair.json" "$T/self.json" <<'PYEOF' || fail "the output against rollout:model_output differs from the rollout file's"
import json, sys
p, s = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert "rollout:model_output" in s["reference"] and "no rollout trace" in s["reference"], s["reference"]
ps = {x["site"]: x for x in p["sites"]}
ss = {x["site"]: x for x in s["sites"]}
assert list(ss) == ["output:noise_pred"], list(ss)  # the only site with a rollout-side twin
for k in ("mean_abs_diff", "max_abs_diff", "rel_max", "cosine", "max_ulp"):
    assert ss["output:noise_pred"][k] == ps["output:noise_pred"][k], k
PYEOF
# a trace with neither: the rollout file alone has no rollout:model_output
cp "$T/run.rollout.h5" "$T/solo/alone.h5"
set +e
"$DRIFT_BIN" replay "$T/solo/alone.h5" --plan "$PLANS/wan2_2.json" --ref rollout >/dev/null 2>"$T/err"; rc=$?
set -e
[ $rc = 2 ] && grep -q "looks for the rollout trace beside" "$T/err" || fail "neither sibling nor rollout:* sites: exit 2 ($rc: $(cat "$T/err"))"
echo "ok: --ref rollout falls back to the trace's own rollout:model_output and says so"
