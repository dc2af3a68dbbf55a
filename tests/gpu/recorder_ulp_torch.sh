#!/usr/bin/env bash
# The Python recorder's max_ulp_diff on torch tensors (issue 35): the torch
# path (drift_recorder.metrics._torch_ulp_of_ref, on CUDA when present)
# equals the numpy path, ULPs of the reference's magnitude with zero
# references left out: fp32 across zero ~2^24 (not ~2e9), a bf16 3 against
# 0 left out, inf vs 1.0 the values between.
#
#   OUT=DIR bash tests/gpu/recorder_ulp_torch.sh
set -u
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${PYTHON3:-python3}
PYLD=${PY_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}
LD_LIBRARY_PATH=$PYLD PYTHONPATH="$SRC/recorder/python${PYTHONPATH:+:$PYTHONPATH}" "$PY" - <<'EOF'
import sys
try:
    import numpy as np, torch
except ImportError as e:
    print("SKIP: %s" % e); sys.exit(77)
from drift_recorder import metrics as M, _lib
dev = "cuda" if torch.cuda.is_available() else "cpu"
fails = 0
def check(name, t, r, dt, want=None, lo=None, hi=None):
    global fails
    n = M._np_ulp_of_ref(np.array(t, np.float32), np.array(r, np.float32), dt)
    g = M._torch_ulp_of_ref(torch.tensor(t, dtype=torch.float32, device=dev),
                            torch.tensor(r, dtype=torch.float32, device=dev), dt)
    ok = n == g and (want is None or g == want) and (lo is None or lo < g < hi)
    print("%s: %s torch %d numpy %d (%s)" % ("PASS" if ok else "FAIL", name, g, n, dev))
    fails += not ok
check("fp32 across zero", [-1e-30], [1e-30], _lib.DT_FP32, lo=2 ** 23, hi=2 ** 25)
check("bf16 zero reference left out", [3.0, 0.75], [0.0, 1.0], _lib.DT_BF16, want=32)
check("bf16 one ulp", [1.0078125], [1.0], _lib.DT_BF16, want=1)
check("inf vs 1.0", [float("inf")], [1.0], _lib.DT_FP32, want=0x7F800000 - 0x3F800000)
x = torch.randn(1 << 16, device=dev)
y = x + 1e-3 * torch.randn(1 << 16, device=dev)
m_t = M.compare_metrics(x, y)["max_ulp_diff"]
m_n = M.compare_metrics(x.cpu().numpy(), y.cpu().numpy())["max_ulp_diff"]
print("%s: compare_metrics random fp32 torch %d numpy %d" % ("PASS" if m_t == m_n else "FAIL", m_t, m_n))
fails += m_t != m_n
sys.exit(1 if fails else 0)
EOF
