#!/usr/bin/env bash
# Library identity (docs/format.md "/libraries", issue 16): without a GPU.
#   1. drift_recorder/identity.py against a fake torch and a fake
#      /proc/self/maps: every field from where the docs say it comes;
#   2. the Recorder writes /libraries before the trace starts: h5py finds every
#      documented attribute under /libraries with the values given, and the
#      producer attribute names the Python recorder (and torch when loaded);
#      a string too long for its field is refused by set_libraries;
#   3. drift ls (text and --json) shows the identity; hostile attributes (a
#      control character, a string longer than its field, a version of the
#      wrong type, a compute capability of 3 numbers) are escaped or refused
#      with exit 2 naming the attribute;
#   4. drift replay on the CPU of a trace with /libraries reports the
#      recording's identity and says no comparison is possible; --kernels
#      torch off CUDA and --kernels beside --device ...:kernels= exit 2.
# Needs libdrift_recorder.so, python3 with numpy and h5py (skips without).
set -u
S="${DRIFT_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}"
DRIFT="${DRIFT_BIN:-$S/build/drift}"
SO="${DRIFT_RECORDER_SO:-$(dirname "$DRIFT")/libdrift_recorder.so}"
PY="${PYTHON3:-python3}"
if [ -f "$SO" ] && asan=$(ldd "$SO" 2>/dev/null | awk '/libasan/ {print $3}') && [ -n "$asan" ]; then
  export LD_PRELOAD="$asan${LD_PRELOAD:+:$LD_PRELOAD}"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
[ -x "$DRIFT" ] || { echo "SKIP: $DRIFT not built"; exit 77; }
[ -f "$SO" ] || { echo "SKIP: $SO not built"; exit 77; }
"$PY" -c "import numpy, h5py" 2>/dev/null || { echo "SKIP: $PY has no numpy/h5py"; exit 77; }
export DRIFT_RECORDER_LIB="$SO" PYTHONPATH="$S/recorder/python${PYTHONPATH:+:$PYTHONPATH}"
W="${DRIFT_TMP:-$(mktemp -d)}/recorder_libraries"; rm -rf "$W"; mkdir -p "$W"
PLANS="${DRIFT_TESTDATA:-$S/tests/data}/plans"
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# --- 1. identity.py ---------------------------------------------------------------
if "$PY" - "$W" <<'PY'; then pass "identity.py: fields from a fake torch and maps"; else fail "identity.py"; fi
import os, sys, types
from drift_recorder import identity as I
w = sys.argv[1]
maps = os.path.join(w, "maps")
with open(maps, "w") as f:
    f.write("7f00-7f01 r-xp 00000000 08:01 1 /opt/venv/site-packages/nvidia/cublas/lib/libcublasLt.so.12\n"
            "7f01-7f02 r-xp 00000000 08:01 2 /opt/venv/site-packages/nvidia/cudnn/lib/libcudnn_graph.so.9\n"
            "7f02-7f03 r-xp 00000000 08:01 3 /opt/venv/site-packages/nvidia/cudnn/lib/libcudnn.so.9\n"
            "7f03-7f04 rw-p 00000000 00:00 0 \n")
cuda = types.SimpleNamespace(is_available=lambda: True, current_device=lambda: 0,
                             get_device_name=lambda d: "NVIDIA H200", get_device_capability=lambda d: (9, 0))
torch = types.SimpleNamespace(__version__="2.11.0+cu128", cuda=cuda, version=types.SimpleNamespace(cuda="12.8"),
                              backends=types.SimpleNamespace(cudnn=types.SimpleNamespace(is_available=lambda: True,
                                                                                        version=lambda: 91002)))
got = I.library_identity(torch, maps_path=maps)
want = {"gpu_name": "NVIDIA H200", "cc_major": 9, "cc_minor": 0, "runtime_version": 12080, "cudnn_version": 91002,
        "torch_version": "2.11.0+cu128",
        "cublaslt_path": "/opt/venv/site-packages/nvidia/cublas/lib/libcublasLt.so.12",
        "cudnn_path": "/opt/venv/site-packages/nvidia/cudnn/lib/libcudnn.so.9"}
for k, v in want.items():
    assert got[k] == v, (k, got[k], v)
assert set(got) == set(I.FIELDS), sorted(got)
assert got["cublaslt_version"] == 0  # the fake path cannot be loaded: unknown, no exception
assert I.runtime_code("13.1") == 13010 and I.runtime_code(None) == 0 and I.runtime_code("abc") == 0
cpu = types.SimpleNamespace(__version__="2.11.0", cuda=types.SimpleNamespace(is_available=lambda: False))
c = I.library_identity(cpu, maps_path=maps)
assert c["torch_version"] == "2.11.0" and c["gpu_name"] == "" and c["cublaslt_path"] == "", c
assert I.library_identity(None) is None or "torch" in sys.modules  # no torch loaded: no identity
# the GEMM workspaces torch takes from the environment (CublasHandlePool.cpp's syntax)
assert I.blas_workspace({"CUBLAS_WORKSPACE_CONFIG": ":16:8"}) == (131072, 0)
assert I.blas_workspace({"CUBLAS_WORKSPACE_CONFIG": ":4096:2:16:8", "CUBLASLT_WORKSPACE_SIZE": "2048"}) == ((8192 + 128) * 1024, 2 << 20)
assert I.blas_workspace({"CUBLAS_WORKSPACE_CONFIG": ":16"}) == (0, 0)  # torch cannot parse it: its default
assert I.blas_workspace({"CUBLASLT_WORKSPACE_SIZE": "lots"}) == (0, 0) and I.blas_workspace({}) == (0, 0)
PY

# --- 2. the Recorder writes /libraries ---------------------------------------------------
T="$W/rec.h5"
if "$PY" - "$T" <<'PY'; then pass "Recorder: /libraries at the documented attributes, producer"; else fail "Recorder /libraries"; fi
import sys
import h5py, numpy as np
import drift_recorder as dr
path = sys.argv[1]
ident = {"gpu_name": "NVIDIA H200", "cc_major": 9, "cc_minor": 0, "driver_version": 13000, "runtime_version": 12080,
         "cublaslt_version": 120804, "cublas_version": 120804, "cudnn_version": 90800, "torch_version": "2.11.0+cu128",
         "cublaslt_path": "/venv/nvidia/cublas/lib/libcublasLt.so.12", "cudnn_path": "/venv/nvidia/cudnn/lib/libcudnn.so.9"}
rec = dr.Recorder(path, run_id="ident", family="tiny-dit", strict=True, libraries=ident)
with rec.step(0):
    rec.record("blocks.0:out", np.arange(6, dtype=np.float32).reshape(2, 3))
rec.close()
with h5py.File(path, "r") as f:
    a = f["/libraries"].attrs
    def s(k):
        v = a[k]
        return v.decode() if isinstance(v, bytes) else str(v)
    assert s("gpu_name") == "NVIDIA H200"
    assert list(a["compute_capability"]) == [9, 0]
    for k, v in (("cuda_driver", 13000), ("cuda_runtime", 12080), ("cublaslt", 120804), ("cublas", 120804), ("cudnn", 90800)):
        assert int(a[k]) == v, (k, a[k])
    assert s("torch") == "2.11.0+cu128"
    assert s("cublaslt_path") == ident["cublaslt_path"] and s("cudnn_path") == ident["cudnn_path"]
    prod = f.attrs["producer"]
    prod = prod.decode() if isinstance(prod, bytes) else str(prod)
    assert prod.startswith("drift-recorder-python "), prod
# a run that set CUBLAS_WORKSPACE_CONFIG (the deterministic :16:8): /libraries says so; none said without it
import os
assert "cublas_workspace_bytes" not in h5py.File(path, "r")["/libraries"].attrs
os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"
rec = dr.Recorder(path + ".ws.h5", run_id="ident", family="tiny-dit", strict=True, libraries=ident)
# torch reads it when it creates its cuBLAS handle (the first GEMM): a change after the recorder
# started is not what torch used, and not what /libraries (written after the first step) says
os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
with rec.step(0):
    rec.record("blocks.0:out", np.arange(6, dtype=np.float32).reshape(2, 3))
rec.close()
del os.environ["CUBLAS_WORKSPACE_CONFIG"]
with h5py.File(path + ".ws.h5", "r") as f:
    a = f["/libraries"].attrs
    assert int(a["cublas_workspace_bytes"]) == 131072 and "cublaslt_workspace_bytes" not in a, dict(a)
# a field too long for the trace is refused by the C API (strict: raised)
bad = dict(ident, gpu_name="x" * 300)
rec = dr.Recorder(path + ".bad.h5", run_id="ident", strict=True, libraries=bad)
try:
    with rec.step(0):
        rec.record("a:out", np.zeros(2, np.float32))
    raise SystemExit("a 300-byte gpu_name was accepted")
except dr.RecorderError as e:
    assert "gpu_name" in str(e), e
finally:
    try:
        rec.close()
    except dr.RecorderError:
        pass
PY

# --- 3. drift ls ------------------------------------------------------------------------------
out=$("$DRIFT" ls "$T" 2>&1)
if echo "$out" | grep -q "^libraries NVIDIA H200 (sm_90), driver 13.0, runtime 12.8, cuBLASLt 12.8.4, cuBLAS 12.8.4, cuDNN 9.8.0, torch 2.11.0+cu128$" &&
   echo "$out" | grep -q "cuBLASLt /venv/nvidia/cublas/lib/libcublasLt.so.12, cuDNN /venv/nvidia/cudnn/lib/libcudnn.so.9"; then
  pass "ls: the identity line and the library paths"
else
  fail "ls text: $out"
fi
if "$DRIFT" ls "$T" --json | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
l = d["libraries"]
assert l["gpu_name"] == "NVIDIA H200" and l["compute_capability"] == "9.0", l
assert l["cudnn"] == 90800 and l["versions"]["cudnn"] == "9.8.0" and l["versions"]["cuda_driver"] == "13.0", l
assert l["torch"] == "2.11.0+cu128" and d["from_torch"] is True, d
'; then pass "ls --json: libraries object, from_torch"; else fail "ls --json libraries"; fi
if "$DRIFT" ls "$T.ws.h5" | grep -q "GEMM workspaces: cuBLAS 131072 bytes, cuBLASLt 0 bytes" &&
   "$DRIFT" ls "$T.ws.h5" --json | "$PY" -c 'import json,sys; l=json.load(sys.stdin)["libraries"]; assert l["cublas_workspace_bytes"] == 131072 and l["cublaslt_workspace_bytes"] is None, l' &&
   ! "$DRIFT" ls "$T" | grep -q "GEMM workspaces"; then
  pass "ls: the recorded GEMM workspaces (text and json), none when not set"
else
  fail "ls GEMM workspaces: $("$DRIFT" ls "$T.ws.h5" 2>&1)"
fi
P="$W/plain.h5"
"$DRIFT" record --synthetic tiny-dit --steps 1 --trainer-plan "$PLANS/wan2_2.json" --rollout-plan "$PLANS/wan2_2_no_norm2.json" \
  -o "$P" >/dev/null 2>&1 || fail "record"
if "$DRIFT" ls "$P" | grep -q "^libraries - (no GPU and library identity recorded)$" &&
   "$DRIFT" ls "$P" --json | "$PY" -c 'import json,sys; d=json.load(sys.stdin); assert d["libraries"] is None and d["from_torch"] is False'; then
  pass "ls: a CPU recording has no identity (text and json)"
else
  fail "ls of a trace without /libraries"
fi

# hostile attributes: escaped when printable is in doubt, refused when out of bounds
hostile() { # NAME PYTHON-ASSIGNMENT
  cp "$T" "$W/$1.h5"
  "$PY" -c "
import h5py, numpy as np, sys
with h5py.File(sys.argv[1], 'r+') as f:
    a = f['/libraries'].attrs
    $2
" "$W/$1.h5"
}
hostile esc "a['gpu_name'] = np.bytes_(b'NVIDIA \x1b[2J H200')"
o=$("$DRIFT" ls "$W/esc.h5" 2>&1); rc=$?
if [ $rc -eq 0 ] && ! printf '%s' "$o" | grep -q $'\x1b' && echo "$o" | grep -qF 'NVIDIA \x1b[2J H200'; then
  pass "ls: a control character in gpu_name is printed as \\x1b"
else
  fail "ls escape (rc $rc): $o"
fi
if "$DRIFT" ls "$W/esc.h5" --json | "$PY" -c 'import json,sys; assert json.load(sys.stdin)["libraries"]["gpu_name"] == "NVIDIA \x1b[2J H200"'; then
  pass "ls --json: the control character as a JSON escape"
else
  fail "ls --json escape"
fi
for c in "long|a['gpu_name'] = np.bytes_(b'x' * 300)|gpu_name" \
         "type|a['cudnn'] = np.bytes_(b'9.8')|cudnn" \
         "range|a['cublaslt'] = np.int64(-5)|cublaslt" \
         "cc|a['compute_capability'] = np.array([9, 0, 1], np.int64)|compute_capability"; do
  IFS='|' read -r name code attr <<<"$c"
  hostile "$name" "$code"
  o=$("$DRIFT" ls "$W/$name.h5" 2>&1); rc=$?
  if [ $rc -eq 2 ] && echo "$o" | grep -q "/libraries" && echo "$o" | grep -q "$attr"; then
    pass "ls: hostile $name refused (exit 2, names /libraries and $attr)"
  else
    fail "ls hostile $name (rc $rc): $o"
  fi
done

# --- 4. replay on the CPU, --kernels --------------------------------------------------------
cp "$P" "$W/gpu.h5"; cp "${P%.h5}.rollout.h5" "$W/gpu.rollout.h5"
"$PY" -c "
import h5py, numpy as np, sys
with h5py.File(sys.argv[1], 'r+') as f:
    g = f.create_group('libraries')
    g.attrs['gpu_name'] = np.bytes_(b'NVIDIA H200')
    g.attrs['compute_capability'] = np.array([9, 0], np.int64)
    g.attrs['cublaslt'] = np.int64(130100)
    g.attrs['cudnn'] = np.int64(91900)
" "$W/gpu.h5"
o=$("$DRIFT" replay "$W/gpu.h5" 2>/dev/null); rc=$?
if [ $rc -eq 0 ] && echo "$o" | grep -q "^  libraries: not a CUDA device: no library identity to compare with the recording's$" &&
   echo "$o" | grep -q "^    recorded: NVIDIA H200 (sm_90), driver unknown, runtime unknown, cuBLASLt 13.1.0, cuBLAS unknown, cuDNN 9.19.0$" &&
   ! echo "$o" | grep -q "^  kernels"; then
  pass "replay (cpu): the recording's identity, no comparison, no kernel profile"
else
  fail "replay text (rc $rc): $o"
fi
if "$DRIFT" replay "$W/gpu.h5" --json 2>/dev/null | "$PY" -c '
import json, sys
d = json.load(sys.stdin)
l = d["libraries"]
assert d["kernels"] is None and l["verdict"] == "none" and l["bitwise_possible"] is False, d
assert l["recorded"]["cudnn"] == 91900 and l["replay"] is None, l
'; then pass "replay --json (cpu): kernels null, libraries verdict none"; else fail "replay --json libraries"; fi
o=$("$DRIFT" replay "$P" --kernels torch 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$o" | grep -q "CUDA kernel profile" && pass "replay --kernels torch on the CPU: exit 2" || fail "replay --kernels torch cpu (rc $rc): $o"
for cmd in replay bisect; do
  extra=""; [ $cmd = bisect ] && extra="--good $PLANS/wan2_2_no_norm2.json --bad $PLANS/wan2_2.json"
  o=$("$DRIFT" $cmd "$P" $extra --device cuda:0:kernels=torch --kernels exact --json 2>/dev/null); rc=$?
  if [ $rc -eq 2 ] && echo "$o" | "$PY" -c 'import json,sys; e=json.load(sys.stdin)["error"]; assert e["field"] == "--kernels" and "give one" in e["message"], e'; then
    pass "$cmd: --kernels beside --device ...:kernels= is exit 2 (json error names --kernels)"
  else
    fail "$cmd conflict (rc $rc): $o"
  fi
done
o=$("$DRIFT" invariance "$P" --kernels torch 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$o" | grep -q "CUDA kernel profile" && pass "invariance --kernels torch on the CPU: exit 2" || fail "invariance --kernels torch (rc $rc): $o"
for cmd in replay bisect invariance; do
  "$DRIFT" $cmd --help | grep -q -- "--kernels K" && pass "$cmd --help lists --kernels" || fail "$cmd --help lacks --kernels"
done

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
