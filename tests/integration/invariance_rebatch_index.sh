#!/usr/bin/env bash
# Issue 33: a captured graph that lowers at another batch but whose index data address the rows
# of the recorded batch (MiniMax-H3's per-token timestep indices): the forward fails as it runs,
# and drift invariance exits 2 saying that the graph was re-batched and from which batch
# (tests/data/graphs/rebatch/index_rows.json, recorded here by drift record --synthetic).
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"
W="${DRIFT_TMP:-$(mktemp -d)}/invariance_rebatch_index"; rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
P='{"name": "fp32", "fsdp_master_dtype": "fp32", "fsdp_reduce_dtype": "fp32", "diffusion_forward_dtype": "fp32",
    "sglang_dit_precision": "fp32", "input_dtype_policy": {}, "param_dtype_patterns": []}'
echo "$P" > "$W/plan.json"
"$D" record --synthetic "graph:$T/graphs/rebatch/index_rows.json" --steps 1 --trainer-plan "$W/plan.json" \
  --rollout-plan "$W/plan.json" -o "$W/idx.h5" > "$W/record.txt" 2>&1 || { cat "$W/record.txt"; fail "record"; }
"$D" invariance "$W/idx.h5" --device cpu --batch 1,2 > "$W/inv.txt" 2> "$W/inv.err"; rc=$?
[ "$rc" = 2 ] || { cat "$W/inv.txt" "$W/inv.err"; fail "exit $rc, expected 2"; }
grep -q "the captured graph re-batched from 2 to 1 failed as it ran" "$W/inv.err" &&
  grep -q "index 4 at position 0 is outside \[0, 4)" "$W/inv.err" || { cat "$W/inv.err"; fail "message"; }
echo "invariance_rebatch_index: ok: $(cut -c1-160 "$W/inv.err")"
