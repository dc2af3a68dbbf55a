#!/usr/bin/env bash
# The Recorder's own traces (tests/data/graphs/recorded, made by
# tests/gpu/capture_record.py fixtures on the GPU machine) through `drift
# replay --ref trainer` under their fp32 plan: the captured graph, /params,
# boundary inputs and each step's other user inputs (read per step by the
# replay driver, with its execution cache) reproduce torch's output within
# capture_record.sh's criteria (max |diff| <= 1e-4 x max |torch|, cosine >=
# 0.99999, inputs bitwise). Then flux's step-1 pooled_projections is moved by
# 1 %: step 1 must stop matching while step 0 still matches, which fails if
# the driver held that input fixed at its first record. A trace whose
# pooled_projections site is gone exits 2 naming the input and the site.
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-$(mktemp -d)}/replay_recorded"; rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
R="$T/graphs/recorded"
cat > "$W/fp32.json" <<'EOF'
{"name": "fp32_forward", "fsdp_master_dtype": "fp32", "fsdp_reduce_dtype": "fp32", "diffusion_forward_dtype": "fp32",
 "sglang_dit_precision": "fp32", "input_dtype_policy": {"latents": null, "cond": null, "timestep": null},
 "param_dtype_patterns": []}
EOF
CHECK=$(cat <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
want = sys.argv[2]  # match | nomatch
s = {x["site"]: x for x in d["sites"]}
o = s["output:noise_pred"]
bad = [k for k, v in s.items() if k.startswith("input:") and v["steps_bitwise_equal"] != v["steps"]]
ok = o["rel_max"] <= 1e-4 and o["cosine"] >= 0.99999 and not bad
print("%s: rel_max %.3g cosine %.9f, %d steps, inputs not bitwise: %s" % (sys.argv[1], o["rel_max"], o["cosine"], o["steps"], bad))
sys.exit(0 if ok == (want == "match") else 1)
PY
)
for m in wan ltx2 flux sd3 qwen; do
  [ $m = qwen ] && [ ! -f "$R/qwen.h5" ] && { echo "qwen: no committed fixture yet (capture_record.py fixtures), not replayed"; continue; }
  dev=cpu  # Flux's fp64 RoPE part runs at fp64 on the cpu backend too
  "$D" replay "$R/$m.h5" --plan "$W/fp32.json" --device $dev --ref trainer --json > "$W/$m.json" 2> "$W/$m.err" ||
    fail "replay $m exited $?: $(head -c 300 "$W/$m.err")"
  "$PY" -c "$CHECK" "$W/$m.json" match || fail "$m does not match torch's output"
done
# flux's pooled_projections is a per-step input (not a boundary one): its site has a record per step
"$D" ls "$R/flux.h5" | grep -q "input:pooled_projections:pre_cast" || fail "flux.h5 has no input:pooled_projections:pre_cast"

cp "$R/flux.h5" "$W/flux_moved.h5"
"$PY" - "$W/flux_moved.h5" <<'PY' || fail "could not move step 1's pooled_projections"
import h5py, sys
with h5py.File(sys.argv[1], "r+") as f:
    for k in f["sites"]:
        n = f["sites"][k].attrs["name"]
        if (n.decode() if isinstance(n, bytes) else n) == "input:pooled_projections:pre_cast":
            g = f["sites"][k]
            steps = [int(r["step"]) for r in g["index"][...]]
            i = steps.index(1)
            g["data"][i] = g["data"][i] * 1.01
            break
    else:
        sys.exit("no input:pooled_projections:pre_cast")
PY
for st in 0 1; do
  "$D" replay "$W/flux_moved.h5" --plan "$W/fp32.json" --device cpu --ref trainer --steps $st:$st --json \
    > "$W/moved$st.json" 2> "$W/moved$st.err" || fail "replay moved step $st exited $?: $(head -c 300 "$W/moved$st.err")"
done
"$PY" -c "$CHECK" "$W/moved0.json" match || fail "step 0 (unchanged) no longer matches"
"$PY" -c "$CHECK" "$W/moved1.json" nomatch || fail "step 1 with pooled_projections x 1.01 still matches: read per step?"
# a trace without the per-step input's site: exit 2 naming the input and the site
cp "$R/flux.h5" "$W/flux_nosite.h5"
"$PY" - "$W/flux_nosite.h5" <<'PY' || fail "could not rename the pooled_projections site"
import h5py, numpy as np, sys
with h5py.File(sys.argv[1], "r+") as f:
    for k in f["sites"]:
        n = f["sites"][k].attrs["name"]
        if (n.decode() if isinstance(n, bytes) else n) == "input:pooled_projections:pre_cast":
            f["sites"][k].attrs["name"] = np.bytes_(b"input:renamed_away:pre_cast")
            break
    else:
        sys.exit("no input:pooled_projections:pre_cast")
PY
"$D" replay "$W/flux_nosite.h5" --plan "$W/fp32.json" --device cpu --ref trainer > /dev/null 2> "$W/nosite.err"
rc=$?
[ $rc -eq 2 ] || fail "a missing per-step input site: exit $rc, expected 2"
grep -q "user input 'pooled_projections' is missing.*input:pooled_projections:pre_cast" "$W/nosite.err" ||
  fail "the error does not name the input and its site: $(cat "$W/nosite.err")"
echo "replay_recorded: ok"
