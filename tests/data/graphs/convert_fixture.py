#!/usr/bin/python3
"""Makes a CI fixture from a captured model (tests/gpu/capture_models.py output):
copies MODEL.json and rewrites MODEL.safetensors with every tensor as F32
(integer inputs such as Wan's int64 timestep become exact floats, which is how
drift's importer carries integers). Usage: convert_fixture.py SRC_DIR MODEL DST_DIR"""
import json, shutil, struct, sys
import numpy as np

src, model, dst = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.copyfile(f"{src}/{model}.json", f"{dst}/{model}.json")
raw = open(f"{src}/{model}.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
meta = hdr.pop("__metadata__", {})
np_of = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32, "BOOL": np.bool_, "F16": np.float16}
out_hdr, blobs, off = {"__metadata__": meta}, [], 0
for name in sorted(hdr):
    h = hdr[name]
    a, b = h["data_offsets"]
    x = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=np_of[h["dtype"]]).astype(np.float32)
    data = x.tobytes()
    out_hdr[name] = {"dtype": "F32", "shape": h["shape"], "data_offsets": [off, off + len(data)]}
    blobs.append(data)
    off += len(data)
h = json.dumps(out_hdr, separators=(",", ":")).encode()
h += b" " * ((8 - len(h) % 8) % 8)
with open(f"{dst}/{model}.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
