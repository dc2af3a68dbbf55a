#!/usr/bin/env bash
# drift record --weights FILE.safetensors: real weights by diffusers name,
# from a file written here by hand (numpy only), read back from /params.
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-$(mktemp -d)}/record_weights"; rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
"$D" record --synthetic tiny-dit --steps 1 --seed 3 --trainer-plan "$T/plans/wan2_2.json" \
  --rollout-plan "$T/plans/wan2_2.json" -o "$W/seeded.h5" 2>/dev/null || fail "seeded record"
# Write the seeded masters (x 0.5) to safetensors: norm weights as BF16, the rest F32, plus one extra tensor.
"$PY" - "$W" <<'PY' || fail "writing safetensors"
import h5py, json, struct, sys, numpy as np
w = sys.argv[1]
f = h5py.File(f"{w}/seeded.h5", "r")
tensors, names = {}, []
def visit(name, obj):
    if isinstance(obj, h5py.Dataset):
        fqn = obj.attrs["name"].decode() if "name" in obj.attrs else name
        tensors[fqn] = (obj[...].astype(np.float32) * np.float32(0.5))
f["params"].visititems(visit)
tensors["extra.unused"] = np.zeros((2, 2), np.float32)
header, blobs, off = {}, [], 0
expect = {}
for k, v in tensors.items():
    if k.endswith("norm2.weight"):
        bits = (v.view(np.uint32) + 0x7FFF + ((v.view(np.uint32) >> 16) & 1)) >> 16
        raw = bits.astype(np.uint16).tobytes(); dt = "BF16"
        expect[k] = (bits.astype(np.uint32) << 16).view(np.float32)
    else:
        raw = v.astype("<f4").tobytes(); dt = "F32"; expect[k] = v
    header[k] = {"dtype": dt, "shape": list(v.shape), "data_offsets": [off, off + len(raw)]}
    blobs.append(raw); off += len(raw)
h = json.dumps(header).encode(); h += b" " * (-len(h) % 8)
open(f"{w}/w.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
np.savez(f"{w}/expect.npz", **{k.replace(".", "__"): v for k, v in expect.items()})
PY
"$D" record --synthetic tiny-dit --steps 1 --weights "$W/w.safetensors" --trainer-plan "$T/plans/wan2_2.json" \
  --rollout-plan "$T/plans/wan2_2.json" -o "$W/real.h5" 2>/dev/null || fail "record --weights exited $?"
"$PY" - "$W" <<'PY' || fail "params differ from the file"
import h5py, sys, numpy as np
w = sys.argv[1]
e = np.load(f"{w}/expect.npz")
f = h5py.File(f"{w}/real.h5", "r")
n = 0
def visit(name, obj):
    global n
    if isinstance(obj, h5py.Dataset):
        fqn = obj.attrs["name"].decode() if "name" in obj.attrs else name
        assert np.array_equal(obj[...], e[fqn.replace(".", "__")]), fqn
        n += 1
f["params"].visititems(visit)
assert n == 69, n
PY
# A file missing a parameter: exit 2 naming it.
"$PY" -c "
import json, struct
h = json.dumps({'patch_embedding.weight': {'dtype': 'F32', 'shape': [1], 'data_offsets': [0, 4]}}).encode()
open('$W/bad.safetensors', 'wb').write(struct.pack('<Q', len(h)) + h + b'\0\0\0\0')"
err=$("$D" record --synthetic tiny-dit --steps 1 --weights "$W/bad.safetensors" --trainer-plan "$T/plans/wan2_2.json" \
  --rollout-plan "$T/plans/wan2_2.json" -o "$W/bad.h5" 2>&1); rc=$?
[ $rc -eq 2 ] || fail "bad weights: exit $rc"
echo "$err" | grep -q "patch_embedding.weight" || fail "bad weights message: $err"
echo "record_weights: all checks passed"
