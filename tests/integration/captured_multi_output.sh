#!/usr/bin/env bash
# Issue 15: the recorded site of a module that returns several tensors.
# Diffusers' WanRotaryPosEmbed returns (freqs_cos, freqs_sin) and the
# Recorder records rope:out from the first, freqs_cos. From the Recorder's
# Wan trace (tests/data/graphs/recorded/wan.h5) this makes three traces whose
# site blocks.1:out is replaced by a recorded rope:out holding freqs_cos as
# torch computes it (numpy, from /buffers/rope.freqs_cos and the graph's own
# slices: exact in fp32):
#   old.h5     /graph as captured before module_outputs: rope:out cannot be
#              placed (both outputs are [1,128,1,12]); drift ls and replay
#              say so and the replay does not compare it;
#   new.h5     /graph with module_outputs {"rope": [cos node, sin node]}:
#              rope:out is compared and bitwise equal (fp32 plan);
#   swapped.h5 module_outputs naming sin first: rope:out is compared and
#              differs (the check above can fail).
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-$(mktemp -d)}/captured_multi_output"; rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
"$PY" -c "import h5py, numpy" 2>/dev/null || { echo "SKIP: h5py/numpy not importable by $PY"; exit 77; }

"$PY" - "$T/graphs/recorded/wan.h5" "$W" <<'PY' || fail "making the traces"
import json, shutil, sys
import h5py, numpy as np

src, w = sys.argv[1], sys.argv[2]
with h5py.File(src, "r") as f:
    raw = f["graph"][()]
    doc = json.loads((raw.tobytes() if hasattr(raw, "tobytes") else raw).decode().rstrip("\0"))
    cos = f["buffers/rope.freqs_cos"][...].astype(np.float32)
nodes = {n["name"]: n for n in doc["nodes"]}
assert "module_outputs" not in doc, "the fixture already has module_outputs"
# the two escaping values of rope: reshape(cat(cos parts)) and reshape_1(cat(sin parts))
first, second = "reshape", "reshape_1"
assert nodes[first]["module"] == "rope" and nodes[second]["module"] == "rope"
# freqs_cos as the graph computes it: split [t, h, w] dims, each part sliced to its
# grid extent, broadcast over the (F, H, W) grid, concatenated, flattened
split = nodes["split_with_sizes"]["args"][1]
F, H, Wd = nodes["expand"]["args"][1][:3]
parts, o = [], 0
for k, n in enumerate(split):
    p = cos[:, o:o + n]
    o += n
    ext = (F, H, Wd)[k]
    shape = [1, 1, 1, n]
    shape[k] = ext
    parts.append(np.broadcast_to(p[:ext].reshape(shape), (F, H, Wd, n)))
want = np.concatenate(parts, axis=-1).reshape(1, F * H * Wd, 1, -1).astype(np.float32)
assert list(want.shape) == nodes[first]["val"]["shape"], (want.shape, nodes[first]["val"]["shape"])

def make(name, module_outputs):
    path = "%s/%s.h5" % (w, name)
    shutil.copy(src, path)
    with h5py.File(path, "r+") as f:
        old = f["sites/blocks.1:out"]
        attrs = dict(old.attrs)
        index = old["index"][...]
        stats = old["stats"][...]
        n = index.shape[0]
        del f["sites/blocks.1:out"]
        g = f.create_group("sites/rope:out")
        for k, v in attrs.items():
            g.attrs[k] = v
        g.attrs["name"] = np.bytes_("rope:out")
        g.attrs["shape"] = np.array(want.shape, dtype=attrs["shape"].dtype)
        data = np.broadcast_to(want, (n,) + want.shape).copy()
        g.create_dataset("data", data=data, chunks=(1,) + want.shape, maxshape=(None,) + want.shape)
        x = want.astype(np.float64)
        for r in range(n):
            stats[r] = (x.min(), x.max(), x.mean(), np.abs(x).mean(), np.sqrt((x * x).sum()), 0, 0)
        g.create_dataset("index", data=index, chunks=(256,), maxshape=(None,))
        g.create_dataset("stats", data=stats, chunks=(256,), maxshape=(None,))
        if module_outputs is not None:
            d = dict(doc, module_outputs=module_outputs)
            del f["graph"]
            f["graph"] = np.bytes_(json.dumps(d))

make("old", None)
make("new", {"rope": [first, second]})
make("swapped", {"rope": [second, first]})
PY

# old: not placed, and said so
"$D" ls "$W/old.h5" > "$W/old.ls" 2>&1 || fail "drift ls old.h5: $(tail -3 "$W/old.ls")"
grep -q "note: rope:out not mapped: module 'rope' returns 2 tensors.*2 of them have the recorded shape" "$W/old.ls" ||
  fail "drift ls old.h5 does not say rope:out is not mapped: $(grep -i note "$W/old.ls")"
"$D" ls "$W/old.h5" --json > "$W/old.ls.json" || fail "drift ls --json old.h5"
"$PY" -c "
import json, sys
n = json.load(open(sys.argv[1]))['captured_graph']['notes']
sys.exit(0 if len(n) == 1 and n[0].startswith('rope:out not mapped') else 1)" "$W/old.ls.json" ||
  fail "drift ls --json: captured_graph.notes: $(grep -o '"notes": \[[^]]*\]' "$W/old.ls.json" | head -1)"
"$D" replay "$W/old.h5" > "$W/old.replay" 2>&1 || fail "drift replay old.h5: $(tail -3 "$W/old.replay")"
grep -q "^note: rope:out not mapped" "$W/old.replay" || fail "drift replay old.h5 has no note: $(tail -5 "$W/old.replay")"
grep -q "^rope:out " "$W/old.replay" && fail "drift replay old.h5 compares rope:out although nothing says which tensor it is"
"$D" replay "$W/old.h5" --json > "$W/old.json" 2>/dev/null || fail "drift replay --json old.h5"

CHECK=$(cat <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s = {x["site"]: x for x in d["sites"]}
want = sys.argv[2]
if want == "absent":
    w = d.get("warnings") or []
    ok = "rope:out" not in s and any(x.startswith("rope:out not mapped") for x in w)
    print("%s: rope:out %s, warnings %s" % (sys.argv[1], "compared" if "rope:out" in s else "not compared", w))
else:
    r = s.get("rope:out")
    print("%s: rope:out %s" % (sys.argv[1], {k: r[k] for k in ("mean_abs_diff", "max_abs_diff", "steps", "steps_bitwise_equal")} if r else "not compared"))
    ok = r is not None and (r["steps_bitwise_equal"] == r["steps"] == 2 if want == "equal" else r["mean_abs_diff"] > 0.05)
sys.exit(0 if ok else 1)
PY
)
"$PY" -c "$CHECK" "$W/old.json" absent || fail "old.h5: rope:out must be left out with a warning"

# new: the capture names the first output: rope:out is freqs_cos, bitwise
"$D" ls "$W/new.h5" > "$W/new.ls" 2>&1 || fail "drift ls new.h5: $(tail -3 "$W/new.ls")"
grep -q "note:" "$W/new.ls" && fail "drift ls new.h5 still has a note: $(grep note: "$W/new.ls")"
"$D" replay "$W/new.h5" --json > "$W/new.json" 2>"$W/new.err" || fail "drift replay new.h5: $(tail -3 "$W/new.err")"
"$PY" -c "$CHECK" "$W/new.json" equal || fail "new.h5: rope:out must be compared and bitwise equal to the recorded freqs_cos"

# swapped: the same site on freqs_sin differs from the recorded freqs_cos
"$D" replay "$W/swapped.h5" --json > "$W/swapped.json" 2>"$W/swapped.err" || fail "drift replay swapped.h5: $(tail -3 "$W/swapped.err")"
"$PY" -c "$CHECK" "$W/swapped.json" differs || fail "swapped.h5: rope:out on freqs_sin must differ from the recorded freqs_cos"
echo "ok: rope:out of a captured Wan graph is the recorded first output with module_outputs, left out (and said so) without"
