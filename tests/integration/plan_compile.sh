#!/usr/bin/env bash
# drift plan compile: the acceptance cases of the foundation issue, through the
# real binary. Exits non-zero on the first mismatch.
set -u
D="${DRIFT_BIN:?}"; PLANS="${DRIFT_TESTDATA:?}/plans"; PY="${PYTHON3:-/usr/bin/python3}"
fail() { echo "FAIL: $*"; exit 1; }
out="${DRIFT_TMP:-/tmp}/plan_compile.json"

# 1. Three patterns on wan2.2:layers=2: block maps and root map, nothing else.
"$D" plan compile --model wan2.2:layers=2 --json \
  --param-dtype '*.norm2.*=fp32' --param-dtype '*scale_shift_table=fp32' \
  --param-dtype 'condition_embedder.time_embedder.*=fp32' >"$out" || fail "compile exited $?"
"$PY" - "$out" <<'PY' || fail "maps differ"
import json, sys
d = json.load(open(sys.argv[1]))
blocks = {w["wrap"]: w["overrides"] for w in d["wraps"]}
assert set(blocks) == {"blocks.0", "blocks.1"}, blocks
for w, m in blocks.items():
    assert m == {"norm2.weight": "fp32", "norm2.bias": "fp32", "scale_shift_table": "fp32"}, (w, m)
root = d["root"]["overrides"]
assert root == {"scale_shift_table": "fp32",
                "condition_embedder.time_embedder.linear_1.weight": "fp32",
                "condition_embedder.time_embedder.linear_1.bias": "fp32",
                "condition_embedder.time_embedder.linear_2.weight": "fp32",
                "condition_embedder.time_embedder.linear_2.bias": "fp32"}, root
assert d["override_count"] == 11, d["override_count"]
PY

# 2. wan_controlnet.json on bare Wan: exit 2 naming the dead pattern.
err=$("$D" plan compile --plan "$PLANS/wan_controlnet.json" --model wan2.2 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "wan_controlnet: exit $rc, expected 2"
echo "$err" | grep -qF '*.condition_embedder.time_embedder.*' || fail "wan_controlnet: message does not name the pattern: $err"

# 3. Unknown dtype: exit 2, naming the flag or field.
err=$("$D" plan compile --model tiny-dit --param-dtype '*.norm2.*=int8' 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "unknown dtype: exit $rc"
echo "$err" | grep -q 'int8' || fail "unknown dtype message: $err"

# 4. A later pattern overrides an earlier one; 5. equal to forward compiles to nothing.
"$D" plan compile --model tiny-dit --json --param-dtype '*.norm2.*=fp32' --param-dtype 'blocks.1.norm2.bias=bf16' >"$out" || fail "override compile"
"$PY" - "$out" <<'PY' || fail "override semantics"
import json, sys
d = json.load(open(sys.argv[1]))
blocks = {w["wrap"]: w["overrides"] for w in d["wraps"]}
assert blocks["blocks.0"] == {"norm2.weight": "fp32", "norm2.bias": "fp32"}, blocks
assert blocks["blocks.1"] == {"norm2.weight": "fp32"}, blocks   # bias back to bf16 == forward: nothing
assert d["override_count"] == 3
PY

# 6. Every shipped plan parses and, except wan_controlnet, compiles on wan2.2:layers=2.
for p in "$PLANS"/*.json; do
  case "$p" in *wan_controlnet*) continue;; esac
  "$D" plan compile --plan "$p" --model wan2.2:layers=2 >/dev/null || fail "$p did not compile"
done

# 7. A malformed plan names file:line:col.
bad="${DRIFT_TMP:-/tmp}/bad_plan.json"
printf '{\n  "name": "x",\n  "diffusion_forward_dtype": "bf17"\n}\n' >"$bad"
err=$("$D" plan compile --plan "$bad" --model tiny-dit 2>&1 >/dev/null); rc=$?
[ $rc -eq 2 ] || fail "bad plan exit $rc"
echo "$err" | grep -q 'bad_plan.json:3:' || fail "bad plan position: $err"

# 8. --params FILE
pf="${DRIFT_TMP:-/tmp}/params.txt"
printf '# wraps: blocks.0\nblocks.0.norm2.weight (8,) blocks.0\nblocks.0.norm2.bias [8] blocks.0\nproj_out.weight 4,8 -\n' >"$pf"
"$D" plan compile --params "$pf" --param-dtype '*.norm2.*=fp32' --json >"$out" || fail "--params compile"
"$PY" -c "import json,sys; d=json.load(open('$out')); assert d['wraps'][0]['overrides']=={'norm2.weight':'fp32','norm2.bias':'fp32'}, d" || fail "--params maps"
echo "plan_compile: all checks passed"
