#!/usr/bin/env bash
# Parameters by reference through the recorder's C API (ctypes, no torch):
# drift_recorder_hash64 of host bytes equals an independent numpy drift-sum64
# (docs/format.md) for lengths 0..17 and a large odd one; a malformed
# reference is refused naming the field; a valid one lands in /params_ref of
# the trace, byte for byte, with /params left empty.
set -u
SO="${DRIFT_RECORDER_SO:-$(dirname "${DRIFT_BIN:-/nonexistent/drift}")/libdrift_recorder.so}"
PY="${PYTHON3:-/usr/bin/python3}"
if [ -f "$SO" ] && asan=$(ldd "$SO" 2>/dev/null | awk '/libasan/ {print $3}') && [ -n "$asan" ]; then
  export LD_PRELOAD="$asan${LD_PRELOAD:+:$LD_PRELOAD}"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
[ -f "$SO" ] || { echo "SKIP: $SO not built"; exit 77; }
OUTH5="${DRIFT_TMP:-/tmp}/params_ref_recorder.h5"
rm -f "$OUTH5"
"$PY" - "$SO" "$OUTH5" <<'PY' || { echo "FAIL: params_ref through the recorder"; exit 1; }
import ctypes as C, json, sys
import numpy as np, h5py
so, path = sys.argv[1], sys.argv[2]
lib = C.CDLL(so)
P, I, I32, D, S = C.c_void_p, C.c_int, C.c_int32, C.c_double, C.c_char_p
lib.drift_recorder_open.argtypes = [C.POINTER(P), S, I, I32, I32, S, S, D, S, S, P]
lib.drift_recorder_set_params_ref.argtypes = [P, S, C.c_size_t, P]
lib.drift_recorder_hash64.argtypes = [P, C.c_size_t, I, P, C.POINTER(C.c_uint64), P]
lib.drift_recorder_start.argtypes = [P, P]
lib.drift_recorder_close.argtypes = [P, P]
lib.drift_recorder_last_error.restype = S

def fmix(k):
    k = k.astype(np.uint64)
    k ^= k >> np.uint64(33); k *= np.uint64(0xff51afd7ed558ccd)
    k ^= k >> np.uint64(33); k *= np.uint64(0xc4ceb9fe1a85ec53)
    k ^= k >> np.uint64(33); return k
def sum64(b):
    n = len(b); words = np.frombuffer(b + b"\0" * (-n % 8), "<u8")
    with np.errstate(over="ignore"):
        s = int(fmix(words + np.arange(1, len(words) + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)).sum(dtype=np.uint64)) if len(words) else 0
        return int(fmix(np.array([s ^ int(fmix(np.array([n], np.uint64))[0])], np.uint64))[0])

rng = np.random.default_rng(7)
for n in list(range(18)) + [(9 << 20) + 3]:
    b = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    buf = C.create_string_buffer(b, max(n, 1))
    out = C.c_uint64(0)
    assert lib.drift_recorder_hash64(C.cast(buf, P), n, 0, None, C.byref(out), None) == 0
    assert out.value == sum64(b), (n, hex(out.value), hex(sum64(b)))

r = P()
assert lib.drift_recorder_open(C.byref(r), path.encode(), 0, 0, 1, b"ref-run", b"tiny-dit", 1.0, b"{}", b"", None) == 0
bad = b'{"format": "drift-params-ref", "version": 1, "hash": "md5"}'
assert lib.drift_recorder_set_params_ref(r, bad, len(bad), None) != 0
assert b"hash" in lib.drift_recorder_last_error(), lib.drift_recorder_last_error()
doc = json.dumps({"format": "drift-params-ref", "version": 1, "hash": "drift-sum64", "weights_root": "/ck",
                  "index": "diffusion_pytorch_model.safetensors.index.json",
                  "tensors": [{"name": "blocks.0.norm2.weight", "file": "diffusion_pytorch_model-00001-of-00001.safetensors",
                               "dtype": "BF16", "shape": [64], "hash": "%016x" % sum64(b"x")}]}).encode()
assert lib.drift_recorder_set_params_ref(r, doc, len(doc), None) == 0, lib.drift_recorder_last_error()
assert lib.drift_recorder_start(r, None) == 0
assert lib.drift_recorder_close(r, None) == 0
f = h5py.File(path, "r")
assert f["params_ref"][()] == doc, f["params_ref"][()]
assert len(f["params"].keys()) == 0
print("params_ref through the recorder: ok")
PY
echo "PASS params_ref_recorder"
