#!/usr/bin/env bash
# DRIFT_NODE_SITES / DRIFT_NODE_DUMP (replay/drive/node_dump.h, the drift side of
# drift_recorder.node_parity) on a recorded zoo fixture, cpu:
#   * the replay with every node dumped reports what the plain replay reports (the fx:
#     sites are in no trace: nothing more is compared, nothing is lost);
#   * index.tsv names one file per dumped node, each of 4 * numel bytes;
#   * the graph output's dump is the recorded output bit for bit (this fixture's cpu
#     replay is bitwise with it);
#   * a dump folder that cannot be created is exit 2 naming it (--dump-nodes, and the
#     environment variable it sets).
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-$(mktemp -d)}/node_dump"; rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
f="$T/graphs/recorded/zoo/DiTTransformer2DModel.h5"
"$D" replay "$f" --device cpu --steps 0 --json > "$W/plain.json" 2> "$W/plain.err" || fail "plain replay exited $?"
"$D" replay "$f" --device cpu --steps 0 --json --dump-nodes "$W/nd" > "$W/dump.json" 2> "$W/dump.err" ||
  fail "replay with the dump exited $?: $(tail -2 "$W/dump.err")"
"$PY" - "$f" "$W/plain.json" "$W/dump.json" "$W/nd/step0" <<'PY' || fail "node dump"
import json, os, sys
import h5py, numpy as np
trace, plain, dump, d = sys.argv[1:]
a, b = json.load(open(plain)), json.load(open(dump))
assert a["first_divergent"] == b["first_divergent"], (a["first_divergent"], b["first_divergent"])
sa = {s["site"]: (s["n_diff"], s["max_abs_diff"]) for s in a["sites"]}
sb = {s["site"]: (s["n_diff"], s["max_abs_diff"]) for s in b["sites"]}
assert sa == sb, "the dump changed the compared sites"
rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(d, "index.tsv"))]
assert len(rows) > 20, len(rows)
for name, dt, shape in rows:
    n = int(np.prod([int(x) for x in shape.split(",") if x])) if shape else 1
    sz = os.path.getsize(os.path.join(d, name + ".f32"))
    assert sz == 4 * n, (name, sz, n)
with h5py.File(trace, "r") as f:
    raw = f["graph"][()]
    g = json.loads(raw.tobytes() if hasattr(raw, "tobytes") else raw)
    rec = f["sites/output:noise_pred/data"][0].astype(np.float32).reshape(-1)
out = g["outputs"][0]["node"]
mine = np.fromfile(os.path.join(d, out + ".f32"), dtype=np.float32)
assert mine.size == rec.size, (mine.size, rec.size)
assert (mine.view(np.int32) == rec.view(np.int32)).all(), "the output node's dump is not the recorded output"
print("node_dump: %d nodes dumped, output %s bitwise with the recording" % (len(rows), out))
PY
: > "$W/afile"
DRIFT_NODE_SITES=1 DRIFT_NODE_DUMP="$W/afile/sub" "$D" replay "$f" --device cpu --steps 0 > "$W/bad.out" 2> "$W/bad.err"
rc=$?
[ "$rc" = 2 ] || fail "an uncreatable dump folder exited $rc, want 2"
grep -q "afile/sub" "$W/bad.err" || fail "the error does not name the folder: $(tail -1 "$W/bad.err")"
"$D" replay "$f" --device cpu --steps 0 --dump-nodes "$W/afile/sub2" > "$W/bad2.out" 2> "$W/bad2.err"
rc=$?
[ "$rc" = 2 ] || fail "the flag with an uncreatable folder exited $rc, want 2"
grep -q "dump-nodes.*afile/sub2" "$W/bad2.err" || fail "the usage error does not name the flag and folder: $(tail -1 "$W/bad2.err")"
echo "node_dump: ok"
