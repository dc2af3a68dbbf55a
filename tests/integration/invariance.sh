#!/usr/bin/env bash
# drift invariance through the real binary: the exact cpu kernels are
# batch-invariant (exit 0, every configuration bitwise, the JSON contract),
# a recorded batch of 3 pads with its own samples and its batch composition
# is read back, and bad usage or input exits 2 naming what is wrong.
# (The batch-dependent kernel that must be caught is test-only:
# tests/replay/test_invariance.c.)
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-$(mktemp -d)}/invariance"; rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }

"$D" record --synthetic tiny-dit --steps 2 --trainer-plan "$T/plans/wan2_2.json" \
  --rollout-plan "$T/plans/wan2_2_no_norm2.json" -o "$W/t.h5" >/dev/null || fail "record"
"$D" record --synthetic tiny-dit:batch=3 --steps 1 --trainer-plan "$T/plans/wan2_2.json" \
  --rollout-plan "$T/plans/wan2_2.json" -o "$W/b3.h5" >/dev/null || fail "record batch 3"

# 1. text: exit 0, the summary line last
"$D" invariance "$W/t.h5" --cfg-batch joined >"$W/text.txt"; rc=$?
[ "$rc" = 0 ] || { cat "$W/text.txt"; fail "invariance exited $rc on exact kernels"; }
tail -n 1 "$W/text.txt" | grep -q "^invariant: sample 0 is bitwise equal at every node at batch 1, 2, 4, 8 (positions 0 and last) and with CFG joined$" \
  || { cat "$W/text.txt"; fail "summary line"; }

# 2. JSON: one document, every configuration bitwise over every value
"$D" invariance "$W/t.h5" --batch 1,2,3 --step 1 --cfg-batch joined --json >"$W/inv.json" || fail "json run"
"$PY" - "$W/inv.json" <<'PY' || fail "json contract"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["invariant"] is True and d["step"] == 1 and d["backend"] == "cpu", d
names = [c["name"] for c in d["configurations"]]
assert names == ["batch 2, position 0", "batch 2, position 1", "batch 3, position 0", "batch 3, position 2",
                 "cfg joined, conditional branch", "cfg joined, unconditional branch"], names
assert d["values_compared"] > 200
for c in d["configurations"]:
    assert c["bitwise"] and c["values_differ"] == 0 and c["values_compared"] == d["values_compared"], c
    assert c["first_divergent_node"] is None and c["output_n_diff"] == 0 and c["model_output_mean_abs_diff"] == 0, c
assert d["noise_floor_mean_abs"] > 0
assert d["composition"] == {"micro_batch": 0, "cfg": "none", "samples": [0]}, d["composition"]
PY

# 3. a recorded batch of 3: pad rows are the other recorded samples
"$D" invariance "$W/b3.h5" --sample 2 --batch 1,4 --json >"$W/b3.json" || fail "batch-3 trace"
"$PY" - "$W/b3.json" <<'PY' || fail "recorded padding"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["recorded_batch"] == 3 and d["sample"] == 2 and d["invariant"], d
assert d["composition"]["samples"] == [0, 1, 2], d["composition"]
assert [c["pad"] for c in d["configurations"]] == ["recorded", "recorded"], d["configurations"]
PY

# 4. bad usage and input: exit 2, the message names the option or file
expect2() {
  local what="$1" pat="$2"; shift 2
  "$D" invariance "$@" >"$W/out.txt" 2>"$W/err.txt"; local rc=$?
  [ "$rc" = 2 ] || fail "$what: exit $rc, expected 2"
  grep -q -- "$pat" "$W/err.txt" || { cat "$W/err.txt"; fail "$what: message lacks '$pat'"; }
  [ -s "$W/out.txt" ] && fail "$what: wrote to stdout"
  return 0
}
expect2 "no trace" "missing TRACE"
expect2 "bad batch" "--batch" "$W/t.h5" --batch 2,x
expect2 "zero batch" "--batch" "$W/t.h5" --batch 0
expect2 "bad cfg" "--cfg-batch" "$W/t.h5" --cfg-batch both
expect2 "torch on cpu" "--kernels torch" "$W/t.h5" --kernels torch
expect2 "bad step" "--step" "$W/t.h5" --step 7
expect2 "bad sample" "--sample" "$W/t.h5" --sample 1
expect2 "missing file" "$W/nope.h5" "$W/nope.h5"
expect2 "not a trace" "$W/text.txt" "$W/text.txt"
# a malformed batch-composition note: bad input naming /notes and the field
cp "$W/t.h5" "$W/badnote.h5"
"$PY" - "$W/badnote.h5" <<'PY' || fail "could not plant the bad note"
import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    n = f["notes"]
    for i, r in enumerate(n[...]):
        if r["text"].startswith(b"batch-composition v1 ") and r["step"] == 0:
            r["text"] = b"batch-composition v1 micro=0 cfg=sideways samples=0"
            n[i] = r
            break
    else:
        sys.exit("no batch-composition note in the synthetic trace")
PY
expect2 "bad batch note" "/notes of step 0: field 'cfg': 'sideways'" "$W/badnote.h5"
"$D" invariance "$W/badnote.h5" --step 1 >/dev/null || fail "step 1's note is intact, its check must run"
"$D" invariance --help | grep -q "usage: drift invariance" || fail "--help"
echo "invariance: ok"
