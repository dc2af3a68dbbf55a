#!/usr/bin/env bash
# The recorder's C API through Python ctypes, as recorder/python will use it:
# plain C types only, opaque handle, err = NULL + drift_recorder_last_error.
# Records host tensors (and, where PyTorch sees a GPU and the library was
# built with CUDA, device tensors on the current stream), then checks the
# trace with h5py or h5dump. Needs libdrift_recorder.so (skips without it).
set -u
SO="${DRIFT_RECORDER_SO:-$(dirname "${DRIFT_BIN:-/nonexistent/drift}")/libdrift_recorder.so}"
PY="${PYTHON3:-python3}"
# A sanitizer build of the library needs the ASan runtime loaded first in the
# (uninstrumented) Python process; Python's own allocations are not ours to
# leak-check.
if [ -f "$SO" ] && asan=$(ldd "$SO" 2>/dev/null | awk '/libasan/ {print $3}') && [ -n "$asan" ]; then
  export LD_PRELOAD="$asan${LD_PRELOAD:+:$LD_PRELOAD}"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
if [ ! -f "$SO" ]; then
  echo "SKIP: $SO not built (add the shared-library lines of the recorder to CMake)"
  exit 77
fi
OUTH5="${DRIFT_TMP:-/tmp}/recorder_ctypes.h5"
rm -f "$OUTH5"
"$PY" - "$SO" "$OUTH5" <<'PY' || { echo "FAIL: ctypes recording"; exit 1; }
import array, ctypes as C, sys

so, path = sys.argv[1], sys.argv[2]
lib = C.CDLL(so)
P, I, I32, I64, D, S = C.c_void_p, C.c_int, C.c_int32, C.c_int64, C.c_double, C.c_char_p
lib.drift_recorder_open.argtypes = [C.POINTER(P), S, I, I32, I32, S, S, D, S, S, P]
lib.drift_recorder_declare_site.argtypes = [P, S, I, I, C.POINTER(I64), C.POINTER(I), P]
lib.drift_recorder_begin_step.argtypes = [P, I64, P]
lib.drift_recorder_end_step.argtypes = [P, P]
lib.drift_recorder_record_host.argtypes = [P, S, I, I, C.POINTER(I64), P, I32, I32, I32, P]
lib.drift_recorder_record_device.argtypes = [P, S, I, I, C.POINTER(I64), P, P, I32, I32, I32, P]
lib.drift_recorder_note.argtypes = [P, I, S, P]
lib.drift_recorder_flush.argtypes = [P, I, P]
lib.drift_recorder_close.argtypes = [P, P]
lib.drift_recorder_counter.argtypes = [P, I]
lib.drift_recorder_counter.restype = I64
lib.drift_recorder_enabled.argtypes = [P]
lib.drift_recorder_last_error.restype = S
ERRFN = C.CFUNCTYPE(None, P, I, S)
lib.drift_recorder_set_error_callback.argtypes = [P, ERRFN, P]
F32, BF16, F16 = 1, 2, 3

def check(rc, what):
    if rc != 0:
        raise SystemExit(f"{what}: rc {rc}: {lib.drift_recorder_last_error().decode()}")

r = P()
check(lib.drift_recorder_open(C.byref(r), path.encode(), 1, 0, 1, b"ctypes-run", b"tiny-dit", 1.0, b"{}",
                              b"staging_mb=8;store_steps=0,2;producer=recorder-python-test", None), "open")
errors = []
cb = ERRFN(lambda user, code, msg: errors.append(msg))
check(lib.drift_recorder_set_error_callback(r, cb, None), "callback")
shape = (I64 * 2)(2, 3)

# Optional device capture: PyTorch on a GPU, current stream, data_ptr().
torch = None
try:
    import torch as _t
    if _t.cuda.is_available():
        torch = _t
except Exception:
    pass
dev_ok = torch is not None
for step in range(3):
    check(lib.drift_recorder_begin_step(r, step, None), "begin")
    vals = array.array("f", [step + 0.5 * i for i in range(6)])
    addr, _ = vals.buffer_info()
    check(lib.drift_recorder_record_host(r, b"host:out", F32, 2, shape, C.c_void_p(addr), 0, -1, 0, None), "record")
    bf = array.array("H", [0x3f80 + step] * 6)  # bf16 raw bits
    addr, _ = bf.buffer_info()
    check(lib.drift_recorder_record_host(r, b"host:bf16", BF16, 2, shape, C.c_void_p(addr), 0, -1, 0, None), "bf16")
    if dev_ok:
        t = torch.arange(6, device="cuda", dtype=torch.float32).reshape(2, 3) * (step + 1)
        rc = lib.drift_recorder_record_device(r, b"dev:out", F32, 2, shape, C.c_void_p(t.data_ptr()),
                                              C.c_void_p(torch.cuda.current_stream().cuda_stream), 0, -1, 0, None)
        if rc == 6 and step == 0:  # DRIFT_E_UNSUPPORTED: a CPU build of the library
            print("device captures unsupported by this build:", lib.drift_recorder_last_error().decode())
            dev_ok = False
        else:
            check(rc, "record_device")
            t.fill_(-1.0)  # in-place right after: the stream waits for the recorder's copy
    check(lib.drift_recorder_note(r, 0, f"step {step} from ctypes".encode(), None), "note")
    check(lib.drift_recorder_end_step(r, None), "end")

# misuse comes back as a status and a message, never an exception or a crash
rc = lib.drift_recorder_record_host(r, b"host:out", F32, 2, shape, None, 0, -1, 0, None)
assert rc == 2, rc
assert b"no open step" in lib.drift_recorder_last_error() or b"NULL data" in lib.drift_recorder_last_error()
check(lib.drift_recorder_flush(r, 10000, None), "flush")
assert lib.drift_recorder_enabled(r) == 1
committed = lib.drift_recorder_counter(r, 8)
assert committed == 3, committed
check(lib.drift_recorder_close(r, None), "close")
assert not errors, errors
print(f"ctypes: recorded 3 steps, device captures {'on' if dev_ok else 'off'}")
with open(path + ".dev", "w") as f:
    f.write("1" if dev_ok else "0")
PY

# Check the file with h5py when there is one, else h5dump.
if "$PY" -c "import h5py, numpy" 2>/dev/null; then
  "$PY" - "$OUTH5" <<'PY' || { echo "FAIL: trace content (h5py)"; exit 1; }
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
p = f.attrs["producer"]
p = p.decode() if isinstance(p, bytes) else str(p)
assert p == "recorder-python-test", p
steps = f["steps"][...]
assert len(steps) == 3, steps
d = f["sites/host:out/data"][...]
idx = f["sites/host:out/index"][...]
stored = idx["stored"]
assert list(stored) == [1, 0, 1], stored   # store_steps=0,2
assert np.array_equal(d[0].ravel(), np.arange(6) * 0.5 + 0.0)
assert np.array_equal(d[2].ravel(), np.arange(6) * 0.5 + 2.0)
st = f["sites/host:out/stats"][...]
assert st["max"][1] == 1.0 + 2.5, st  # sampled out, stats kept
if open(sys.argv[1] + ".dev").read() == "1":
    dd = f["sites/dev:out/data"][...]
    di = f["sites/dev:out/index"][...]
    assert list(di["stored"]) == [1, 0, 1], di
    assert np.array_equal(dd[2].ravel(), np.arange(6, dtype=np.float32) * 3), dd[2]
    ds = f["sites/dev:out/stats"][...]
    assert ds["max"][1] == 5 * 2 and ds["min"][1] == 0, ds  # device-side stats of step 1
    # no set_libraries call: the recorder filled /libraries from its device captures
    a = f["libraries"].attrs
    name = a["gpu_name"].decode() if isinstance(a["gpu_name"], bytes) else str(a["gpu_name"])
    assert name and int(a["cuda_driver"]) > 0 and list(a["compute_capability"])[0] > 0, dict(a)
    assert int(a["cuda_runtime"]) == 0, dict(a)  # the recorder's own runtime is not the job's: unknown
    print("libraries (filled by the recorder):", name, int(a["cuda_driver"]), int(a["cublaslt"]))
else:
    assert "libraries" not in f, "host captures only: no identity"
print("trace content OK (h5py)")
PY
elif command -v h5dump >/dev/null; then
  h5dump -H -d /steps "$OUTH5" | grep -q "( 3 ) / ( H5S_UNLIMITED )" || { echo "FAIL: /steps is not 3 rows"; exit 1; }
  h5dump -d "/sites/host:out/data" -w 0 "$OUTH5" | grep -q "(2,0,0): 2, 2.5, 3" || { echo "FAIL: step 2 data"; exit 1; }
  echo "trace content OK (h5dump)"
else
  echo "no h5py or h5dump: content not checked"
fi
echo "PASS: recorder_ctypes"
