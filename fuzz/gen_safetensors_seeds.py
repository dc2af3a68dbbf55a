#!/usr/bin/env python3
# Seeds of fuzz_safetensors, laid out as the reference writer lays them out
# (header JSON padded with spaces to 8 bytes), built byte by byte (numpy only).
# Usage: gen_safetensors_seeds.py DIR (run by fuzz/seeds.sh)
import json, struct, numpy as np, sys
def st(path, parts, meta=None, order=None, pad=True):
    hdr, off, data = {}, 0, b''
    if meta is not None: hdr['__metadata__'] = meta
    for name, dt, shape, raw in parts:
        hdr[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [off, off + len(raw)]}
        off += len(raw); data += raw
    h = json.dumps(hdr, separators=(',', ':')).encode()
    if pad: h += b' ' * ((8 - len(h) % 8) % 8)
    open(path, 'wb').write(struct.pack('<Q', len(h)) + h + data)
d = sys.argv[1]
x = np.arange(6, dtype=np.float32) - 2.5
st(d + '/f32_bf16_f16_f64.safetensors', [('w', 'F32', [2, 3], x.tobytes()),
   ('b', 'BF16', [3], (x[:3].view(np.uint32) >> 16).astype(np.uint16).tobytes()),
   ('h', 'F16', [2], x[:2].astype(np.float16).tobytes()), ('d', 'F64', [1, 1], np.float64([3.25]).tobytes())],
   meta={'format': 'pt'})
st(d + '/skip_i64_scalar.safetensors', [('ids', 'I64', [2], np.int64([1, 2]).tobytes()), ('s', 'F32', [], np.float32(1).tobytes()),
   ('e', 'F16', [0, 3], b'')])
st(d + '/empty.safetensors', [], pad=False)
