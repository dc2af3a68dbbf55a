#!/usr/bin/env bash
# drift bisect --fix-out (issue 17.5): the suggested fix is the bad plan with
# exactly the culprit differences taken from the good plan, checked by one
# more replay. On the demo with a bad plan of two differences (the culprit
# '*.norm2.*' fp32 and a harmless fsdp_reduce_dtype bf16): the fix keeps the
# harmless one, drops the culprit, is verified, and a replay of it is bitwise
# the good plan's output while the bad plan's is not. With two independent
# culprits and no --all, the fix (one set removed) is NOT verified. An
# existing --fix-out is kept without --force (exit 2, before any work); the
# report shows the fix.
set -euo pipefail
: "${DRIFT_BIN:?}" "${DRIFT_TMP:?}"
PY="${PYTHON3:-/usr/bin/python3}"
T="$DRIFT_TMP/bisect_fix"
rm -rf "$T" && mkdir -p "$T"
fail() { echo "FAIL: $*" >&2; exit 1; }
"$DRIFT_BIN" demo --out "$T/demo" >"$T/demo.log" 2>&1 || fail "demo: $(tail -5 "$T/demo.log")"
D="$T/demo"
"$PY" - "$D/trainer_plan.json" "$T" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
p.update(name="bad2", fsdp_reduce_dtype="bf16")       # harmless for the forward
json.dump(p, open(sys.argv[2] + "/bad2.json", "w"))
p = json.load(open(sys.argv[1]))
p.update(name="bad3", diffusion_forward_dtype="fp32")
json.dump(p, open(sys.argv[2] + "/bad3.json", "w"))     # two culprits, each alone drifts
EOF
"$DRIFT_BIN" bisect "$D/demo.h5" --good "$D/rollout_plan.json" --bad "$T/bad2.json" --fix-out "$T/fix.json" \
    >"$T/bisect.txt" 2>"$T/bisect.err" || fail "bisect --fix-out: $(cat "$T/bisect.err")"
grep -q "^fix: $T/fix.json (plan 'bad2_fixed'.*): verified, back at the good plan's value" "$T/bisect.txt" ||
    fail "the text names the fix and says it was verified: $(cat "$T/bisect.txt")"
"$PY" - "$T/fix.json" "$T/bad2.json" <<'EOF' || fail "the fix is not the bad plan less the culprit"
import json, sys
fix, bad = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert fix["param_dtype_patterns"] == [], fix          # the culprit taken from the good plan (which has none)
assert fix["fsdp_reduce_dtype"] == "bf16", fix         # the harmless difference kept from the bad plan
for k in ("fsdp_master_dtype", "diffusion_forward_dtype", "sglang_dit_precision"):
    assert fix[k] == bad[k], (k, fix[k], bad[k])
EOF
# the fix parses as a plan, and its replay is bitwise the good plan's; the bad plan's is not
for p in fix:"$T/fix.json" good:"$D/rollout_plan.json" bad:"$T/bad2.json"; do
    "$DRIFT_BIN" replay "$D/demo.h5" --plan "${p#*:}" -o "$T/r_${p%%:*}.h5" >/dev/null 2>"$T/replay.err" ||
        fail "replay --plan ${p#*:}: $(cat "$T/replay.err")"
done
"$DRIFT_BIN" compare "$T/r_fix.h5" "$T/r_good.h5" --json >"$T/fix_vs_good.json" 2>/dev/null
"$DRIFT_BIN" compare "$T/r_bad.h5" "$T/r_good.h5" --json >"$T/bad_vs_good.json" 2>/dev/null
"$PY" - "$T" <<'EOF' || fail "the fix's replay is not the good plan's output"
import json, sys
T = sys.argv[1]
out = lambda f: [s for s in json.load(open(T + f))["sites"] if s["site"] == "output:noise_pred"][0]
fx, bd = out("/fix_vs_good.json"), out("/bad_vs_good.json")
assert fx["max_abs_diff"] == 0 and fx["steps_bitwise_equal"] == fx["steps"] > 0, fx
assert bd["max_abs_diff"] > 0, bd
EOF
# an existing --fix-out is kept (exit 2) unless --force
set +e
"$DRIFT_BIN" bisect "$D/demo.h5" --good "$D/rollout_plan.json" --bad "$T/bad2.json" --fix-out "$T/fix.json" \
    >/dev/null 2>"$T/exists.err"; rc=$?
set -e
[ $rc = 2 ] && grep -q "fix.json exists; give --force" "$T/exists.err" || fail "existing --fix-out: rc $rc, $(cat "$T/exists.err")"
# two independent culprits, no --all: one set found, the fix without it still drifts: NOT verified (JSON)
"$DRIFT_BIN" bisect "$D/demo.h5" --good "$D/rollout_plan.json" --bad "$T/bad3.json" --fix-out "$T/fix.json" --force \
    --json >"$T/b3.json" 2>/dev/null || fail "bisect bad3 --force"
"$DRIFT_BIN" bisect "$D/demo.h5" --good "$D/rollout_plan.json" --bad "$T/bad3.json" --fix-out "$T/fix_all.json" \
    --all --json >"$T/b3all.json" 2>/dev/null || fail "bisect bad3 --all"
"$PY" - "$T" <<'EOF' || fail "the fix of a partial bisection"
import json, sys
T = sys.argv[1]
b, a = json.load(open(T + "/b3.json")), json.load(open(T + "/b3all.json"))
assert len(b["culprit_sets"]) == 1 and b["fix"]["verified"] is False and b["fix"]["output_metric"] > 0, b["fix"]
assert len(a["culprit_sets"]) == 2 and a["fix"]["verified"] is True and a["fix"]["output_metric"] == 0, a["fix"]
assert json.load(open(T + "/fix.json")) == b["fix"]["plan"] and json.load(open(T + "/fix_all.json")) == a["fix"]["plan"]
assert a["fix"]["plan"]["param_dtype_patterns"] == [] and a["fix"]["plan"]["diffusion_forward_dtype"] == "bf16"
p = b["fix"]["plan"]  # exactly one of the two culprits taken from the good plan
assert (p["param_dtype_patterns"] == []) != (p["diffusion_forward_dtype"] == "bf16"), p
EOF
# the report shows the fix and whether a replay verified it
"$DRIFT_BIN" report "$D/demo.h5" --against "$D/demo.rollout.h5" --bisect "$T/b3all.json" -o "$T/r.html" 2>/dev/null ||
    fail "report --bisect"
grep -q 'id="fix"' "$T/r.html" && grep -q "verified</b> by a replay" "$T/r.html" && grep -q "bad3_fixed" "$T/r.html" ||
    fail "the report shows the verified fix"
"$DRIFT_BIN" report "$D/demo.h5" --against "$D/demo.rollout.h5" --bisect "$T/b3.json" -o "$T/r3.html" 2>/dev/null
grep -q "NOT verified" "$T/r3.html" || fail "the report says the partial fix is not verified"
echo "ok: bisect --fix-out writes the verified fix; partial fixes say so; the report shows it"
