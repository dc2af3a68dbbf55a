#!/usr/bin/env bash
# A trace writer (h5py, SWMR, schema v1) SIGKILLed in the middle of a step:
# `drift check` reports exactly the committed steps and exits 1 (unclean),
# plain h5dump cannot open the file, `drift check --repair` makes it readable
# by h5dump and h5py with every committed record intact and nothing
# uncommitted, and a second check exits 0.
set -u
D="${DRIFT_BIN:?}"; PY="${PYTHON3:-/usr/bin/python3}"; T="${DRIFT_TMP:-/tmp}/trace_kill.$$"
SRC="${DRIFT_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}"
fail() { echo "FAIL: $*"; exit 1; }
mkdir -p "$T"
[ -x "$D" ] || fail "no drift binary at $D"
"$PY" -c 'import h5py, numpy' 2>/dev/null || { echo "SKIP: $PY lacks h5py/numpy"; exit 77; }
command -v h5dump >/dev/null || { echo "SKIP: no h5dump"; exit 77; }

# the independent writer of trace_interop.sh, extracted from it
sed -n "/^cat >\"\$T\/pywriter.py\" <<'PY'\$/,/^PY\$/p" "$SRC/tests/integration/trace_interop.sh" | sed '1d;$d' >"$T/pywriter.py"
[ -s "$T/pywriter.py" ] || fail "cannot extract the python writer"

( "$PY" "$T/pywriter.py" "$T/k.h5" 3 die ) 2>/dev/null; rc=$?
[ $rc -eq 137 ] || [ $rc -eq 9 ] || [ $rc -gt 128 ] || fail "writer was not killed (exit $rc)"

h5dump -H "$T/k.h5" >/dev/null 2>&1 && fail "h5dump opened the killed file before repair"

out=$("$D" check "$T/k.h5"); rc=$?
[ $rc -eq 1 ] || { echo "$out"; fail "check of the killed file exited $rc, expected 1"; }
echo "$out" | grep -q 'steps      3 committed' || fail "check does not report 3 committed steps: $out"
echo "$out" | grep -q 'not closed cleanly' || fail "check does not say unclean: $out"
"$D" ls --json "$T/k.h5" | "$PY" -c 'import json,sys; d=json.load(sys.stdin); assert d["unclean"] and d["steps"]["committed"]==3 and all(s["records"]==3 for s in d["sites"]), d' \
  || fail "ls --json of the killed file"

out=$("$D" check --repair "$T/k.h5" 2>"$T/repair.err"); rc=$?
[ $rc -eq 0 ] || { echo "$out"; cat "$T/repair.err"; fail "check --repair exited $rc"; }
echo "$out" | grep -q 'repaired' || fail "no repair line: $out"
echo "$out" | grep -q 'closed cleanly' || fail "not clean after repair: $out"

h5dump "$T/k.h5" >/dev/null 2>&1 || fail "h5dump cannot read the repaired file"
"$PY" - "$T/k.h5" <<'PY' || fail "h5py read of the repaired file"
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], 'r')
assert f['steps'].shape == (3,), f['steps'].shape
assert list(f['steps']['step']) == [0, 1, 2]
for i, (name, shp) in enumerate([('blocks.0:out', (2, 3)), ('input:latents:post_cast', (4,)), ('output:noise_pred', (5,))]):
    g = f['sites'][name]
    d = g['data']
    assert d.shape == (3,) + shp and g['index'].shape == (3,) and g['stats'].shape == (3,), (name, d.shape)
    vals = d.astype('f4')[...]
    for step in range(3):
        want = (np.arange(int(np.prod(shp)), dtype=np.float32) - 2.5) * (step + 1) * (i + 1) * 0.125
        if name.startswith('blocks'):   # bf16: round to nearest even
            u = want.view(np.uint32).astype(np.uint64)
            want = (((u + 0x7fff + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
        elif name.startswith('input'):
            want = want.astype(np.float16).astype(np.float32)
        assert np.array_equal(vals[step].reshape(-1), want), (name, step, vals[step], want)
assert f['metrics/rows'].shape == (9,)
PY
out=$("$D" check "$T/k.h5"); rc=$?
[ $rc -eq 0 ] || { echo "$out"; fail "check after repair exited $rc"; }
out=$("$D" check --repair "$T/k.h5"); rc=$?
[ $rc -eq 0 ] || fail "repair of a clean file exited $rc"
echo "$out" | grep -q 'repaired' && fail "a clean file was repaired again"

rm -rf "$T"
echo "ok"
