#!/usr/bin/env bash
# drift bisect as a user reads it (issue 35), on the demo (good: the rollout
# plan, bad: the trainer plan, which adds '*.norm2.*' fp32):
#  1. one difference is answered by the good and the bad replay (plus the
#     noise floor's): no probe, 3 replays, its first divergent site;
#  2. the default threshold is the noise floor: differences below it are
#     harmless, not culprits; --threshold 0 asks the bitwise question;
#  3. differences and culprits are grouped under the plan pattern they came from;
#  4. --fix-out is a pretty-printed edit of the bad plan that keeps its glob,
#     shown as a diff against the bad plan.
set -euo pipefail
: "${DRIFT_BIN:?}" "${DRIFT_TMP:?}"
PY="${PYTHON3:-/usr/bin/python3}"
T="$DRIFT_TMP/bisect_users"
rm -rf "$T" && mkdir -p "$T"
fail() { echo "FAIL: $*" >&2; exit 1; }
"$DRIFT_BIN" demo --out "$T/demo" >"$T/demo.log" 2>&1 || fail "demo: $(tail -5 "$T/demo.log")"
D="$T/demo"
bis() { "$DRIFT_BIN" bisect "$D/demo.h5" --good "$D/rollout_plan.json" --bad "$D/trainer_plan.json" "$@"; }

# 1. one difference: two plan replays and the floor's, no probe
bis --json >"$T/one.json" 2>"$T/one.err" || fail "bisect one difference: $(cat "$T/one.err")"
"$PY" - "$T/one.json" <<'EOF' || fail "one difference is not answered by the good and the bad replay"
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["differences"]) == 1, d["differences"]
assert d["probes"] == 0 and d["replays"] == 3, (d["probes"], d.get("replays"))
[[c]] = d["culprit_sets"]
assert c["name"] == "param_dtype_patterns['*.norm2.*']" and c["first_divergent"] == "blocks.0.norm2:out", c
assert c["metric_alone"] == d["bad_metric"] and c["metric_without"] == d["good_metric"] == 0, c
assert c["pattern"] == "*.norm2.*" and c["pattern_plan"] == "bad", c
EOF

# 2. the default threshold is the noise floor; below it a difference is harmless
bis --granularity param --all --json >"$T/floor.json" 2>/dev/null || fail "bisect param --all"
bis --granularity param --all --threshold 0 --json >"$T/bitwise.json" 2>/dev/null || fail "bisect --threshold 0"
"$PY" - "$T/floor.json" "$T/bitwise.json" <<'EOF' || fail "harmless differences below the noise floor"
import json, sys
f, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert f["threshold_source"] == "noise_floor" and f["threshold"] == f["noise_floor"] > 0, f["threshold"]
names = [x["name"] for x in f["differences"]]
cul = [c["name"] for s in f["culprit_sets"] for c in s]
assert len(names) == 4 and 1 <= len(cul) < 4, (names, cul)
assert sorted(f["harmless"] + cul) == sorted(names), (f["harmless"], cul)
for x in f["differences"]:
    assert x["harmless"] == (x["name"] in f["harmless"]) and x["pattern"] == "*.norm2.*", x
for s in f["culprit_sets"]:
    if len(s) == 1:
        assert s[0]["metric_alone"] > f["noise_floor"] and not s[0]["alone_below_floor"], s
# the bitwise question: every difference changes the output, none is harmless
assert b["threshold_source"] == "explicit" and b["threshold"] == 0, b["threshold"]
assert sorted(c["name"] for s in b["culprit_sets"] for c in s) == sorted(names) and b["harmless"] == [], b["harmless"]
assert any(c["alone_below_floor"] for s in b["culprit_sets"] for c in s), b["culprit_sets"]
EOF

# 3. grouped under the plan pattern they came from (JSON and text)
"$PY" - "$T/floor.json" <<'EOF' || fail "culprits not grouped under their plan pattern"
import json, sys
f = json.load(open(sys.argv[1]))
cul = [c["name"] for s in f["culprit_sets"] for c in s]
assert f["patterns"] == [{"pattern": "*.norm2.*", "plan": "bad", "name": None, "culprits": cul, "differences": 4,
                          "harmless": 4 - len(cul)}], f["patterns"]
EOF
bis --granularity param --all >"$T/floor.txt" 2>/dev/null || fail "bisect text"
grep -q "^by plan entry:" "$T/floor.txt" && grep -qE "^  '\*\.norm2\.\*' \(bad plan\): 4 differences, [0-9] culprits? \(blocks\.[01]\.norm2\.[a-z]+.*\), [0-9] harmless$" "$T/floor.txt" ||
    fail "text has no group line: $(cat "$T/floor.txt")"
grep -qE "^harmless: [0-9] differences?, applied together, stays? within the threshold \(below the noise floor\)$" "$T/floor.txt" ||
    fail "text does not say which differences are harmless"
grep -qE "^  blocks\.[01]\.norm2\.[a-z]+ \(bf16 -> fp32\) from '\*\.norm2\.\*' \(bad plan\)$" "$T/floor.txt" ||
    fail "a culprit does not name its plan pattern"

bis --granularity param --all --format csv >"$T/floor.csv" 2>/dev/null || fail "bisect --format csv"
"$PY" - "$T/floor.csv" <<'EOF' || fail "the CSV does not name each culprit's plan pattern"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert rows and all(r["pattern"] == "*.norm2.*" and r["pattern_plan"] == "bad" for r in rows), rows
EOF

# 4. --fix-out: pretty, the bad plan's glob kept, the culprits as exact entries below it, a diff
bis --granularity param --all --fix-out "$T/fix.json" >"$T/fix.txt" 2>/dev/null || fail "bisect --fix-out"
bis --granularity param --all --fix-out "$T/fix2.json" --json >"$T/fix.jsonout" 2>/dev/null || fail "bisect --fix-out --json"
[ "$(wc -l <"$T/fix.json")" -ge 10 ] || fail "the fix is not pretty-printed: $(cat "$T/fix.json")"
grep -q '^    \["\*\.norm2\.\*", "fp32"\],$' "$T/fix.json" || fail "the fix lost the user's glob: $(cat "$T/fix.json")"
"$PY" - "$T/fix.json" "$T/floor.json" "$T/fix.jsonout" <<'EOF' || fail "the fix is not a minimal edit of the bad plan"
import json, sys
fix, f, j = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
cul = [c["name"] for s in f["culprit_sets"] for c in s]
assert fix["param_dtype_patterns"] == [["*.norm2.*", "fp32"]] + [[n, "bf16"] for n in cul], fix["param_dtype_patterns"]
assert j["fix"]["verified"] is True and j["fix"]["plan"] == fix, j["fix"]
d = j["fix"]["diff"]
assert d.startswith("--- ") and '+     ["blocks.' in d and "-" not in [l[:1] for l in d.splitlines()[2:] if '"*.norm2.*"' not in l and "name" not in l], d
EOF
grep -q "^--- $D/trainer_plan.json$" "$T/fix.txt" && grep -q "^+++ $T/fix.json$" "$T/fix.txt" &&
    grep -qE '^\+     \["blocks\.[01]\.norm2\.[a-z]+", "bf16"\]$' "$T/fix.txt" || fail "no diff of the fix against the bad plan: $(cat "$T/fix.txt")"
"$DRIFT_BIN" replay "$D/demo.h5" --plan "$T/fix.json" --json >/dev/null 2>"$T/replay.err" || fail "the fix does not load: $(cat "$T/replay.err")"
echo "ok: one difference in 3 replays; harmless below the floor; grouped by pattern; the fix an edit of the plan"
