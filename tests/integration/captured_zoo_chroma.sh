#!/usr/bin/env bash
# A zoo trace of diffusers' Chroma (tests/data/graphs/recorded/zoo, tests/gpu/zoo.py on the H200):
# `drift replay --device cpu --ref trainer` under the recorded plan is bitwise
# equal to torch's bf16 recording at every recorded site, both steps. It was
# not while the importer read rms_norm's eps=None as finfo(bf16).eps.
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-$(mktemp -d)}/captured_zoo_chroma"; rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
R="$T/graphs/recorded/zoo"
"$D" replay "$R/ChromaTransformer2DModel.h5" --ref trainer --device cpu --json >"$W/replay.json" \
  2>"$W/replay.err" || fail "replay exit $? ($(tail -1 "$W/replay.err"))"
"$PY" - "$W/replay.json" <<'PY' || fail "replay of the Chroma trace"
import json, sys
d = json.load(open(sys.argv[1]))
s = {x["site"]: x for x in d["sites"]}
assert "distilled_guidance_layer.layers.0:out" in s and "output:noise_pred" in s, sorted(s)
bad = {k: (v["steps_bitwise_equal"], v["steps"], v["mean_abs_diff"]) for k, v in s.items() if v["steps_bitwise_equal"] != v["steps"]}
assert not bad, ("sites not bitwise", bad)
print("replay: %d sites bitwise equal to the recording, %d steps" % (len(s), s["output:noise_pred"]["steps"]))
PY
echo "captured_zoo_chroma: ok"
