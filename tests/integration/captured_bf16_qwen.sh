#!/usr/bin/env bash
# A captured-graph trace of a real bf16 autocast FSDP2 run
# (tests/data/graphs/recorded_bf16/README.md, diffusers' Qwen-Image):
# 1. drift replay --ref trainer on the CPU under the recorded plan reproduces
#    torch's bf16 output: at most 1 element of the 512 per step differs, by at
#    most one bf16 ULP (the CPU's GEMM order is not cuBLASLt's), inputs bitwise;
# 2. drift bisect between a plan with three planted fp32 islands and the
#    all-bf16 plan names exactly the island that matters
#    (transformer_blocks.0.attn.norm_q.weight: diffusers' RMSNorm rounds to its
#    weight's dtype) and not the two that autocast makes harmless (img_mlp,
#    txt_mod linears), with its first divergent site inside that norm.
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-$(mktemp -d)}/captured_bf16_qwen"; rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
R="$T/graphs/recorded_bf16"
"$D" replay "$R/qwen_trainer.h5" --plan "$R/qwen_trainer_plan.json" --ref trainer --device cpu --json >"$W/replay.json" \
  2>"$W/replay.err" || fail "replay exit $? ($(tail -1 "$W/replay.err"))"
"$PY" - "$W/replay.json" <<'PY' || fail "replay of the bf16 trace"
import json, sys
d = json.load(open(sys.argv[1]))
s = {x["site"]: x for x in d["sites"]}
o = s["output:noise_pred"]
bad = [k for k, v in s.items() if k.startswith("input:") and v["steps_bitwise_equal"] != v["steps"]]
assert not bad, ("inputs not bitwise", bad)
assert o["max_ulp"] <= 1 and o["mean_abs_diff"] <= 1e-5, o
print("replay: output max ulp %s, mean |d| %.3g, %d of %d steps bitwise" % (o["max_ulp"], o["mean_abs_diff"],
      o["steps_bitwise_equal"], o["steps"]))
PY
"$D" bisect "$R/qwen_trainer.h5" --good "$R/qwen_planted_island_plan.json" --bad "$R/qwen_all_bf16_plan.json" \
  --granularity param --device cpu --json >"$W/bisect.json" 2>"$W/bisect.err" || fail "bisect exit $? ($(tail -1 "$W/bisect.err"))"
"$PY" - "$W/bisect.json" <<'PY' || fail "bisect of the planted islands"
import json, sys
d = json.load(open(sys.argv[1]))
sets = d["culprit_sets"]
names = [[c["name"] for c in s] for s in sets]
assert names == [["transformer_blocks.0.attn.norm_q.weight"]], names
c = sets[0][0]
assert c["first_divergent"].startswith("transformer_blocks.0.attn.norm_q"), c
assert len(d["differences"]) == 7, len(d["differences"])
print("bisect: culprit %s, first divergent %s, %.2f x floor, %d differences" % (c["name"], c["first_divergent"],
      c["floor_units"], len(d["differences"])))
PY
echo "captured_bf16_qwen: ok"
