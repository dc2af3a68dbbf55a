#!/usr/bin/env bash
# Issue 33: drift invariance on hand-written captured graphs (tests/data/graphs/rebatch),
# recorded here by drift record --synthetic graph:FILE.json at their batch of 2:
#   * input_heads.json: a user input whose dim 0 is 2 heads (not the batch) keeps its 2 rows at
#     every batch, in the graph and in the inputs invariance builds: invariant at 1, 2, 3 and
#     CFG-joined (it was refused: [3, 2, 8] and [3, 8] do not broadcast);
#   * batch_mix_dim1.json: a cumsum over the batch on a value whose batch is dim 1 ([4, B]) is the
#     first divergent node named (values whose batch is not dim 0 were not compared: the next
#     op, a mul, was named);
#   * index_rows.json: index data that address the rows of the recorded batch (MiniMax-H3's
#     per-token timestep indices): the forward fails as it runs, and invariance exits 2 saying
#     that the graph was re-batched and from which batch.
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-$(mktemp -d)}/invariance_rebatch_synthetic"; rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
P='{"name": "fp32", "fsdp_master_dtype": "fp32", "fsdp_reduce_dtype": "fp32", "diffusion_forward_dtype": "fp32",
    "sglang_dit_precision": "fp32", "input_dtype_policy": {}, "param_dtype_patterns": []}'
echo "$P" > "$W/plan.json"
rec() { # rec GRAPH OUT [--weights FILE]
  local g="$1" o="$2"; shift 2
  "$D" record --synthetic "graph:$T/graphs/rebatch/$g" --steps 1 --trainer-plan "$W/plan.json" \
    --rollout-plan "$W/plan.json" -o "$o" "$@" > "$o.txt" 2>&1 || { cat "$o.txt"; fail "record $g"; }
}

# the head table's values: a safetensors file with input:head_table [2, 8]
"$PY" - "$W/heads.safetensors" <<'PY' || fail "safetensors"
import json, struct, sys
data = struct.pack("<16f", *[0.25 * i for i in range(16)])
hdr = json.dumps({"input:head_table": {"dtype": "F32", "shape": [2, 8], "data_offsets": [0, len(data)]}}).encode()
hdr += b" " * ((8 - len(hdr) % 8) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(hdr)) + hdr + data)
PY
rec input_heads.json "$W/heads.h5" --weights "$W/heads.safetensors"
"$D" invariance "$W/heads.h5" --device cpu --batch 1,2,3 --cfg-batch joined > "$W/heads.txt" 2>&1; rc=$?
[ "$rc" = 0 ] || { cat "$W/heads.txt"; fail "input_heads: exit $rc"; }
tail -n 1 "$W/heads.txt" | grep -q "^invariant: .*at batch 1, 2, 3 .*and with CFG joined" || { cat "$W/heads.txt"; fail "input_heads verdict"; }
echo "  input_heads: $(tail -n 1 "$W/heads.txt")"

rec index_rows.json "$W/idx.h5"
"$D" invariance "$W/idx.h5" --device cpu --batch 1,2 > "$W/inv.txt" 2> "$W/inv.err"; rc=$?
[ "$rc" = 2 ] || { cat "$W/inv.txt" "$W/inv.err"; fail "index_rows: exit $rc, expected 2"; }
grep -q "the captured graph re-batched from 2 to 1 failed as it ran" "$W/inv.err" &&
  grep -q "index 4 at position 0 is outside \[0, 4)" "$W/inv.err" || { cat "$W/inv.err"; fail "index_rows message"; }
echo "  index_rows: $(cut -c1-160 "$W/inv.err")"
rec batch_mix_dim1.json "$W/mix.h5"
"$D" invariance "$W/mix.h5" --device cpu --batch 1,2 > "$W/mix.txt" 2>&1; rc=$?
[ "$rc" = 1 ] || { cat "$W/mix.txt"; fail "batch_mix_dim1: exit $rc, expected 1"; }
tail -n 1 "$W/mix.txt" | grep -q "first at cs (cumsum, input \[4, 2\] at batch 2 vs \[4, 1\] alone)" ||
  { cat "$W/mix.txt"; fail "batch_mix_dim1: the cumsum over the batch in dim 1 is not named first"; }
echo "  batch_mix_dim1: $(tail -n 1 "$W/mix.txt")"
echo "invariance_rebatch_synthetic: ok"
