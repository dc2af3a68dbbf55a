#!/usr/bin/env bash
# Replay and bisect on a synthetic tiny-dit trace, through the real binary:
# the acceptance shapes of the CPU replay and bisect issues.
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-$(mktemp -d)}/replay_bisect"; rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
B="$T/bisect"

"$D" record --synthetic tiny-dit --steps 2 --trainer-plan "$T/plans/wan2_2.json" \
  --rollout-plan "$T/plans/wan2_2_no_norm2.json" -o "$W/t.h5" || fail "record exited $?"
[ -f "$W/t.rollout.h5" ] || fail "no rollout trace"

# 1. Replaying under the recorded plan reproduces every recorded trainer site bit for bit.
"$D" replay "$W/t.h5" --plan "$T/plans/wan2_2.json" --ref trainer --json >"$W/self.json" || fail "replay self"
"$PY" - "$W/self.json" <<'PY' || fail "self replay is not bitwise"
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["sites"]) >= 20, len(d["sites"])
for s in d["sites"]:
    assert s["steps"] == 2 and s["steps_bitwise_equal"] == 2 and s["n_diff"] == 0, s
assert all(f["site"] is None for f in d["first_divergent"]), d["first_divergent"]
PY

# 2. wan2_2 vs wan2_2_no_norm2: identical upstream of blocks.0.norm2, drift from there.
"$D" replay "$W/t.h5" --plan "$T/plans/wan2_2.json" --ref rollout --json >"$W/vs_rollout.json" || fail "replay vs rollout"
"$PY" - "$W/vs_rollout.json" <<'PY' || fail "drift shape"
import json, sys
d = json.load(open(sys.argv[1]))
names = [s["site"] for s in d["sites"]]
k = names.index("blocks.0.norm2:out")
for s in d["sites"][:k]:
    assert s["mean_abs_diff"] == 0 and s["bitwise_equal"], ("upstream site differs", s["site"])
assert d["sites"][k]["mean_abs_diff"] > 0 and d["sites"][k]["first_divergent_steps"] == 2, d["sites"][k]
assert [f["site"] for f in d["first_divergent"]] == ["blocks.0.norm2:out"] * 2, d["first_divergent"]
out = [s for s in d["sites"] if s["site"] == "output:noise_pred"][0]
assert out["mean_abs_diff"] > 0
assert d["logprob"]["vs_old"]["log_prob_mean_abs_diff"] > 0 and d["logprob"]["vs_new"]["log_prob_mean_abs_diff"] == 0
PY

# 3. --ref oracle: each side's RMSE against the fp64 oracle.
"$D" replay "$W/t.h5" --plan "$T/plans/wan2_2.json" --ref oracle --json >"$W/oracle.json" || fail "replay oracle"
"$PY" - "$W/oracle.json" <<'PY' || fail "oracle"
import json, sys, math
o = json.load(open(sys.argv[1]))["oracle"]
for k in ("replay_rmse", "trainer_rmse", "rollout_rmse"):
    assert o[k] is not None and 0 < o[k] < 1 and math.isfinite(o[k]), (k, o)
assert o["replay_rmse"] == o["trainer_rmse"]   # same plan, same backend: same output
PY

bis() { "$D" bisect "$W/t.h5" --good "$B/good.json" --json "$@"; }
# 4. One culprit among 16 differences, in at most 2*log2(16)+2 = 10 probes.
bis --bad "$B/bad16.json" >"$W/b16.json" || fail "bisect 16"
"$PY" - "$W/b16.json" <<'PY' || fail "one among 16"
import json, sys
d = json.load(open(sys.argv[1]))
assert len(d["differences"]) == 16, len(d["differences"])
assert [[c["name"] for c in s] for s in d["culprit_sets"]] == [["param_dtype_patterns['*.norm2.*']"]], d["culprit_sets"]
assert d["probes"] <= 10, d["probes"]
assert d["culprit_sets"][0][0]["first_divergent"] == "blocks.0.norm2:out"
assert d["culprit_sets"][0][0]["metric_without"] == 0    # the 15 others are harmless
assert d["culprit_sets"][0][0]["metric_alone"] == d["bad_metric"]
PY

# 5. Two culprits that drift only together: each alone below the threshold.
ma=$(bis --bad "$B/only_a.json" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["bad_metric"])')
mb=$(bis --bad "$B/only_b.json" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["bad_metric"])')
mab=$(bis --bad "$B/pair.json" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["bad_metric"])')
thr=$("$PY" -c "a,b,ab=$ma,$mb,$mab; assert ab > 1.1*max(a,b), (a,b,ab); print((max(a,b)+ab)/2)") || fail "pair precondition: $ma $mb $mab"
bis --bad "$B/pair.json" --threshold "$thr" >"$W/pair.json" || fail "bisect pair"
"$PY" - "$W/pair.json" <<'PY' || fail "pair not found together"
import json, sys
d = json.load(open(sys.argv[1]))
sets = [sorted(c["name"] for c in s) for s in d["culprit_sets"]]
assert sets == [["param_dtype_patterns['blocks.1.norm2.bias']", "param_dtype_patterns['scale_shift_table']"]], sets
for c in d["culprit_sets"][0]:
    assert c["metric_alone"] <= d["threshold"], c
PY

# 6. Only harmless differences: no culprit, exit 0, said so.
out=$("$D" bisect "$W/t.h5" --good "$B/good.json" --bad "$B/harmless.json") || fail "harmless exit $?"
echo "$out" | grep -q "no culprit" || fail "harmless: $out"

# 7. A good plan over the threshold: exit 1 with a clear message.
out=$("$D" bisect "$W/t.h5" --good "$T/plans/wan2_2.json" --bad "$B/good.json" --ref rollout --threshold 1e-12 2>&1); rc=$?
[ $rc -eq 1 ] || fail "good over threshold: exit $rc"
echo "$out" | grep -q "good plan is itself over the threshold" || fail "message: $out"

# 8. --granularity param narrows *.norm2.* to the parameters.
"$D" bisect "$W/t.h5" --good "$T/plans/wan2_2_no_norm2.json" --bad "$T/plans/wan2_2.json" --granularity param --all --json >"$W/param.json" || fail "param granularity"
"$PY" - "$W/param.json" <<'PY' || fail "param granularity names"
import json, sys
d = json.load(open(sys.argv[1]))
names = [c["name"] for s in d["culprit_sets"] for c in s]
assert "blocks.0.norm2.weight" in names and all(n.startswith("blocks.") and ".norm2." in n for n in names), names
PY

# 9. Parallel probes give the same answer as serial ones.
"$D" bisect "$W/t.h5" --good "$B/good.json" --bad "$B/bad16.json" --parallel 1 --json >"$W/p1.json" || fail "parallel 1"
"$PY" -c "
import json; a=json.load(open('$W/p1.json')); b=json.load(open('$W/b16.json'))
assert a['culprit_sets']==b['culprit_sets'] and a['max_concurrent_probes']==1 and b['max_concurrent_probes']==2
" || fail "parallel vs serial"

# 10. The demo names the planted cause first among the divergent layers, and bisect names it.
"$D" demo --out "$W/demo" >"$W/demo.txt" || fail "demo exited $?"
first=$(grep -m1 '<- first divergence' "$W/demo.txt" | awk '{print $1}')
[ "$first" = "blocks.0.norm2:out" ] || fail "demo first divergent: '$first'"
grep -q "param_dtype_patterns\['\*.norm2.\*'\] (absent -> fp32)" "$W/demo.txt" || fail "demo bisect did not name *.norm2.*"
# 11. drift compare of the two recorded sides finds the same first divergence.
"$D" compare "$W/t.h5" "$W/t.rollout.h5" --json >"$W/cmp.json" || fail "compare"
"$PY" -c "
import json; d=json.load(open('$W/cmp.json'))
assert [f['site'] for f in d['first_divergent']] == ['blocks.0.norm2:out']*2, d['first_divergent']
" || fail "compare first divergence"
echo "replay_bisect: all checks passed"
