#!/usr/bin/env bash
# Recordings of torch.compile'd models (issue 36), without a GPU or torch:
#   1. drift_recorder/compiled.py over stand-in modules: OptimizedModule
#      wrappers (root and child), in-place compiles, the inductor mode from
#      the compiler config, eager_for_capture swaps the wrappers out and back;
#   2. the Recorder writes the marker into /libraries (compiled,
#      inductor_mode, compiled_modules) from what record_params saw; an
#      explicit compiled={...}; compiled=None writes none;
#   3. drift ls (text, --json) tells a compiled trace from a plain one;
#   4. drift compare of a compiled trace (with a compile-floor note) and a
#      plain one states the verdict, the first site where it shows and the
#      divergence in units of compilation alone; --json too;
#   5. drift replay of a synthetic trace carrying the marker states the
#      verdict beside the library verdict with the first divergent site; the
#      unmarked trace does not; a hostile "compiled" attribute is exit 2.
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
W="${DRIFT_TMP:-$(mktemp -d)}/recorder_compiled"; rm -rf "$W"; mkdir -p "$W"
PLANS="${DRIFT_TESTDATA:-$S/tests/data}/plans"
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# --- 1. compiled.py ---------------------------------------------------------------------------
if "$PY" - <<'PY'; then pass "compiled.py: wrappers, in-place compiles, modes, eager_for_capture"; else fail "compiled.py"; fi
import types
from drift_recorder import compiled as C

class Mod:
    def __init__(self, **children):
        self._modules = dict(children)
    def named_modules(self, prefix=""):
        yield prefix, self
        for n, c in self._modules.items():
            yield from c.named_modules(f"{prefix}.{n}" if prefix else n)
    def named_parameters(self):
        return iter(())

class OptimizedModule(Mod):  # torch._dynamo.eval_frame.OptimizedModule's name and _orig_mod
    def __init__(self, orig, cfg):
        super().__init__(_orig_mod=orig)
        self._orig_mod = orig
        self.dynamo_ctx = types.SimpleNamespace(compiler_config=cfg)

b0, b1 = Mod(), Mod()
b1._compiled_call_impl = types.SimpleNamespace(compiler_config={"max_autotune": True, "triton.cudagraphs": False})
blocks = Mod(**{"0": OptimizedModule(b0, {}), "1": b1})
root = OptimizedModule(Mod(blocks=blocks), {"triton.cudagraphs": True})
found = C.compiled_modules(root)
assert found == [("<model>", "reduce-overhead"), ("blocks.0", "default"), ("blocks.1", "max-autotune-no-cudagraphs")], found
assert C.compiled_modules(Mod(a=Mod())) == []
assert C.mode_from_config({"max_autotune": True, "triton.cudagraphs": True}) == "max-autotune"
assert C.mode_from_config(None) == ""
mode, text = C.describe(found)
assert mode == "default/max-autotune-no-cudagraphs/reduce-overhead" and text == "<model>, blocks.0, blocks.1", (mode, text)
assert C.describe([], 3) == ("", "<compiled regions: 3 dynamo graphs in this process>")
mode, text = C.describe([(f"blocks.{i}.attn", "default") for i in range(200)])
assert len(text) < 1024 and text.endswith("more)"), text
impl = b1._compiled_call_impl
with C.eager_for_capture(root) as orig:
    assert orig is root._orig_mod
    assert blocks._modules["0"] is b0 and b1._compiled_call_impl is None
    assert C.compiled_modules(orig) == []
assert isinstance(blocks._modules["0"], OptimizedModule) and b1._compiled_call_impl is impl
assert C.floor_note("output:noise_pred", 2, 0.00421, 0.81) == \
    "compile-floor v1 site=output:noise_pred step=2 mean_abs_diff=0.00421 mean_abs=0.81"
PY

# --- 2. the Recorder writes the marker --------------------------------------------------------
if "$PY" - "$W" <<'PY'; then pass "Recorder: /libraries compiled, inductor_mode, compiled_modules; explicit; None"; else fail "Recorder marker"; fi
import sys, types
import h5py, numpy as np
import drift_recorder as dr
from drift_recorder import compiled as C
w = sys.argv[1]

class Mod:
    def __init__(self, **children):
        self._modules = dict(children)
    def named_modules(self, prefix=""):
        yield prefix, self
        for n, c in self._modules.items():
            yield from c.named_modules(f"{prefix}.{n}" if prefix else n)
    def named_parameters(self):
        return iter(())

class OptimizedModule(Mod):
    def __init__(self, orig):
        super().__init__(_orig_mod=orig)
        self._orig_mod = orig
        self.dynamo_ctx = types.SimpleNamespace(compiler_config={})

def attrs(path):
    with h5py.File(path, "r") as f:
        if "libraries" not in f:
            return None
        return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f["libraries"].attrs.items()}

def trace(path, compiled, model=None, out=0.0, floor=None):
    rec = dr.Recorder(path, run_id="c", family="tiny-dit", strict=True, libraries={"torch_version": "2.11.0"},
                      compiled=compiled)
    if model is not None:
        assert rec.record_params(model) == 0
    with rec.step(0):
        rec.record("blocks.0:out", np.arange(6, dtype=np.float32).reshape(2, 3))
        rec.output("noise_pred", np.arange(6, dtype=np.float32).reshape(2, 3) + out)
        if floor is not None:
            rec.note(C.floor_note("output:noise_pred", 0, floor, 2.5))
    found = rec.compiled
    rec.close()
    return found

found = trace(f"{w}/auto.h5", "auto", OptimizedModule(Mod(blocks=Mod())), out=0.5, floor=0.25)
assert found == {"<model>": "default"}, found
a = attrs(f"{w}/auto.h5")
assert int(a["compiled"]) == 1 and a["inductor_mode"] == "default" and a["compiled_modules"] == "<model>", a
trace(f"{w}/explicit.h5", {"mode": "max-autotune", "modules": ["blocks.0", "blocks.1"]})
a = attrs(f"{w}/explicit.h5")
assert a["inductor_mode"] == "max-autotune" and a["compiled_modules"] == "blocks.0, blocks.1", a
trace(f"{w}/plain.h5", "auto", Mod(blocks=Mod()))
a = attrs(f"{w}/plain.h5")
assert "compiled" not in a and a["torch"] == "2.11.0", a
trace(f"{w}/off.h5", None, OptimizedModule(Mod()))
assert "compiled" not in attrs(f"{w}/off.h5")
# no identity at all (libraries=None) but compiled: the marker is still written
rec = dr.Recorder(f"{w}/bare.h5", run_id="c", strict=True, libraries=None, compiled={"mode": "default"})
with rec.step(0):
    rec.record("blocks.0:out", np.zeros(3, np.float32))
rec.close()
a = attrs(f"{w}/bare.h5")
assert int(a["compiled"]) == 1 and a["compiled_modules"] == "<model>", a
PY

# --- 3. drift ls ------------------------------------------------------------------------------
o=$("$DRIFT" ls "$W/auto.h5" 2>&1)
p=$("$DRIFT" ls "$W/plain.h5" 2>&1)
if echo "$o" | grep -q "^libraries .*, torch 2.11.0, torch.compile (inductor default: <model>)$" &&
   echo "$p" | grep -q "^libraries .*, torch 2.11.0$"; then
  pass "ls: the compiled trace says torch.compile, the plain one does not"
else
  fail "ls: $o // $p"
fi
if "$DRIFT" ls "$W/auto.h5" --json | "$PY" -c '
import json, sys
l = json.load(sys.stdin)["libraries"]
assert l["compiled"] is True and l["inductor_mode"] == "default" and l["compiled_modules"] == "<model>", l' &&
   "$DRIFT" ls "$W/plain.h5" --json | "$PY" -c '
import json, sys
l = json.load(sys.stdin)["libraries"]
assert l["compiled"] is False and l["inductor_mode"] is None and l["compiled_modules"] is None, l'; then
  pass "ls --json: compiled, inductor_mode, compiled_modules"
else
  fail "ls --json compiled"
fi

# --- 4. drift compare -------------------------------------------------------------------------
o=$("$DRIFT" compare "$W/auto.h5" "$W/plain.h5" 2>&1); rc=$?
if [ $rc -eq 0 ] &&
   echo "$o" | grep -qF "  compiled: bitwise equality with the recording is not expected: the recording ran torch.compile'd kernels (inductor default; compiled: <model>), replay follows eager semantics; it first shows at output:noise_pred" &&
   echo "$o" | grep -qF "  compile floor: output:noise_pred mean |eager - compiled| 0.25 at step 0 (compilation alone" &&
   echo "$o" | grep -qF "this comparison: output:noise_pred mean |diff| 0.5 = 2 x compilation alone"; then
  pass "compare: verdict, first site, divergence in units of compilation alone"
else
  fail "compare (rc $rc): $o"
fi
if "$DRIFT" compare "$W/plain.h5" "$W/auto.h5" --format json | "$PY" -c '
import json, sys
c = json.load(sys.stdin)["compiled"]
assert c["first_site"] == "output:noise_pred" and "torch.compile" in c["message"], c
f = c["compile_floor"]
assert f["mean_abs_diff"] == 0.25 and f["step"] == 0 and abs(f["units"] - 2.0) < 1e-12, f'; then
  pass "compare --format json (compiled side second): compiled.message, first_site, compile_floor.units"
else
  fail "compare json compiled"
fi
o=$("$DRIFT" compare "$W/plain.h5" "$W/off.h5" 2>&1)
echo "$o" | grep -q "compiled:\|compile floor" && fail "compare of two plain traces mentions compilation: $o" || pass "compare: plain traces, no compile lines"

# --- 5. drift replay --------------------------------------------------------------------------
P="$W/syn.h5"
"$DRIFT" record --synthetic tiny-dit --steps 1 --trainer-plan "$PLANS/wan2_2.json" --rollout-plan "$PLANS/wan2_2_no_norm2.json" \
  -o "$P" >/dev/null 2>&1 || fail "record"
cp "$P" "$W/comp.h5"
"$PY" -c "
import h5py, numpy as np, sys
with h5py.File(sys.argv[1], 'r+') as f:
    g = f.create_group('libraries')
    g.attrs['torch'] = np.bytes_(b'2.11.0')
    g.attrs['compiled'] = np.int64(1)
    g.attrs['inductor_mode'] = np.bytes_(b'default')
    g.attrs['compiled_modules'] = np.bytes_(b'<model>')
" "$W/comp.h5"
o=$("$DRIFT" replay "$W/comp.h5" --plan "$PLANS/wan2_2_no_norm2.json" 2>/dev/null); rc=$?
if [ $rc -eq 0 ] && echo "$o" | grep -q "^  libraries: " &&
   echo "$o" | grep -qF "  compiled: bitwise equality with the recording is not expected: the recording ran torch.compile'd kernels (inductor default; compiled: <model>), replay follows eager semantics; it first shows at blocks.0.norm2:out" &&
   echo "$o" | grep -qF "  compile floor: not measured"; then
  pass "replay: the compiled verdict beside the library verdict, first site blocks.0.norm2:out"
else
  fail "replay compiled (rc $rc): $o"
fi
o=$("$DRIFT" replay "$W/comp.h5" 2>/dev/null)
echo "$o" | grep -qF "compiled: bitwise equality with the recording is not expected" && echo "$o" | grep -qF "; no site diverged" &&
  pass "replay of the recorded plan: the verdict, no site diverged" || fail "replay recorded plan: $o"
if "$DRIFT" replay "$W/comp.h5" --plan "$PLANS/wan2_2_no_norm2.json" --json 2>/dev/null | "$PY" -c '
import json, sys
c = json.load(sys.stdin)["compiled"]
assert c["first_site"] == "blocks.0.norm2:out" and c["inductor_mode"] == "default" and c["compile_floor"] is None, c'; then
  pass "replay --json: compiled object"
else
  fail "replay --json compiled"
fi
o=$("$DRIFT" replay "$P" --plan "$PLANS/wan2_2_no_norm2.json" 2>/dev/null)
echo "$o" | grep -q "compiled:" && fail "an uncompiled trace gets the compiled verdict: $o" || pass "replay of the uncompiled trace: no compiled verdict"
"$DRIFT" replay "$P" --json 2>/dev/null | "$PY" -c 'import json,sys; assert json.load(sys.stdin)["compiled"] is None' &&
  pass "replay --json of the uncompiled trace: compiled null" || fail "replay --json uncompiled"
cp "$W/comp.h5" "$W/hostile.h5"
"$PY" -c "
import h5py, numpy as np, sys
with h5py.File(sys.argv[1], 'r+') as f:
    f['libraries'].attrs['compiled'] = np.int64(7)
" "$W/hostile.h5"
o=$("$DRIFT" ls "$W/hostile.h5" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$o" | grep -q "/libraries" && echo "$o" | grep -q '"compiled"' && pass "ls: compiled=7 is exit 2 naming /libraries and compiled" || fail "hostile compiled (rc $rc): $o"

[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
