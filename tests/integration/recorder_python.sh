#!/usr/bin/env bash
# recorder/python (drift_recorder) without torch: numpy arrays stand in for
# tensors. Checks
#   1. the ctypes mirrors of drift_trace_metric / drift_trace_step_metrics
#      against the C layout (sizeof and every offsetof);
#   2. the Recorder class: records (non-contiguous, bf16 bits, fp16), call
#      indices, the input/output/rollout/logprob/sde names, compare() and
#      step_metrics() rows as they land in /metrics, hooks on a fake module
#      tree (module outputs, gathered dtypes, a dtype change note), and the
#      failure policy (never raises, logs once; strict=True raises);
#   3. shard assembly for replay: a synthetic tiny-dit trace re-written as two
#      FSDP-style rank files (every parameter sharded, one along dim 1), then
#      `drift replay trace.rank0.h5` must equal the replay of the whole trace,
#      bit for bit; a missing rank file, a foreign run id, overlapping shards
#      and a gap must each fail with exit 2 and a message naming them.
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
W="${DRIFT_TMP:-$(mktemp -d)}/recorder_python"; rm -rf "$W"; mkdir -p "$W"
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# --- 1. struct layout ---------------------------------------------------------
cat > "$W/layout.c" <<'C'
#include <stddef.h>
#include <stdio.h>
#include "formats/trace.h"
#define F(T, f) printf("%s.%s %zu\n", #T, #f, offsetof(T, f))
int main(void) {
    printf("drift_trace_metric %zu\ndrift_trace_step_metrics %zu\n", sizeof(drift_trace_metric),
           sizeof(drift_trace_step_metrics));
    F(drift_trace_metric, step); F(drift_trace_metric, site); F(drift_trace_metric, variant);
    F(drift_trace_metric, denoise_index); F(drift_trace_metric, flags); F(drift_trace_metric, numel);
    F(drift_trace_metric, mean_abs_diff); F(drift_trace_metric, max_abs_diff); F(drift_trace_metric, rel_max);
    F(drift_trace_metric, cosine); F(drift_trace_metric, rmse); F(drift_trace_metric, rmse_oracle);
    F(drift_trace_metric, nan_count); F(drift_trace_metric, inf_count); F(drift_trace_metric, ref_nan_count);
    F(drift_trace_metric, ref_inf_count); F(drift_trace_metric, worst_index); F(drift_trace_metric, max_ulp_diff);
    F(drift_trace_step_metrics, step); F(drift_trace_step_metrics, variant);
    F(drift_trace_step_metrics, denoise_index); F(drift_trace_step_metrics, n_pairs);
    F(drift_trace_step_metrics, log_prob_mean_abs_diff); F(drift_trace_step_metrics, ratio_abs_minus_1);
    F(drift_trace_step_metrics, approx_kl);
    return 0;
}
C
if cc -std=c11 -I"$S" -o "$W/layout" "$W/layout.c" 2>"$W/layout.err"; then
  "$W/layout" > "$W/layout.c.txt"
  "$PY" - > "$W/layout.py.txt" <<'PY'
import ctypes as C
from drift_recorder import _lib
for T, name in ((_lib.TraceMetric, "drift_trace_metric"), (_lib.TraceStepMetrics, "drift_trace_step_metrics")):
    print(name, C.sizeof(T))
for T, name in ((_lib.TraceMetric, "drift_trace_metric"), (_lib.TraceStepMetrics, "drift_trace_step_metrics")):
    for f, _ in T._fields_:
        print(f"{name}.{f}", getattr(T, f).offset)
PY
  if diff <(sort "$W/layout.c.txt") <(sort "$W/layout.py.txt") > "$W/layout.diff"; then
    pass "ctypes row structs match formats/trace.h ($(wc -l < "$W/layout.c.txt") sizes/offsets)"
  else
    fail "ctypes row structs differ from formats/trace.h:"; cat "$W/layout.diff"
  fi
else
  fail "cannot compile the layout probe"; cat "$W/layout.err"
fi

# --- 2. the Recorder class --------------------------------------------------------
if "$PY" - "$W" "$DRIFT" > "$W/class.log" 2>&1 <<'PY'; then pass "Recorder class (numpy)"; else fail "Recorder class (numpy)"; cat "$W/class.log"; fi
import io, json, math, os, subprocess, sys, contextlib
import numpy as np, h5py
import drift_recorder as dr
from drift_recorder._tensor import f32_to_bf16_bits, bf16_bits_to_f32

W, DRIFT = sys.argv[1], sys.argv[2]
path = os.path.join(W, "cls.h5")
rng = np.random.default_rng(1)

# -- bf16 conversion is RNE with c10's NaN
x = np.array([1.0, 1.00390625, 1.01171875, -3.5, np.inf, np.nan, 3.4e38], np.float32)
b = f32_to_bf16_bits(x)
assert list(b[:4]) == [0x3F80, 0x3F80, 0x3F82, 0xC060], [hex(v) for v in b]   # ties to even
assert b[4] == 0x7F80 and b[5] == 0x7FC0 and b[6] == 0x7F80, [hex(v) for v in b]

# -- names
assert dr.strip_fqn("_orig_mod.blocks.0._fsdp_wrapped_module._checkpoint_wrapped_module.attn1.to_q.weight") == \
    "blocks.0.attn1.to_q.weight"
assert dr.strip_fqn("module.transformer.proj_out.bias", ("module.", )) == "transformer.proj_out.bias"

# -- a fake module tree (the hook API torch.nn.Module has), params as numpy
class Handle:
    def __init__(self, lst, fn): self.lst, self.fn = lst, fn
    def remove(self): self.lst.remove(self.fn)

class Mod:
    def __init__(self, **children):
        self._children, self._params, self._pre, self._post = children, {}, [], []
    def named_modules(self, prefix=""):
        yield prefix, self
        for n, c in self._children.items():
            yield from c.named_modules(f"{prefix}.{n}" if prefix else n)
    def named_parameters(self, prefix="", recurse=True):
        for n, p in self._params.items():
            yield (f"{prefix}.{n}" if prefix else n), p
        if recurse:
            for n, c in self._children.items():
                yield from c.named_parameters(f"{prefix}.{n}" if prefix else n)
    def parameters(self, recurse=True):
        return (p for _, p in self.named_parameters(recurse=recurse))
    def register_forward_pre_hook(self, fn): self._pre.append(fn); return Handle(self._pre, fn)
    def register_forward_hook(self, fn): self._post.append(fn); return Handle(self._post, fn)
    def __call__(self, x):
        for h in self._pre: h(self, (x,))
        y = self.forward(x)
        for h in self._post: h(self, (x,), y)
        return y

class Lin(Mod):
    def __init__(self, n, dt=np.float32):
        super().__init__()
        self._params["weight"] = np.ones((n, n), dt)
    def forward(self, x): return (x @ np.ones((x.shape[-1], x.shape[-1]), np.float32)).astype(np.float32)

class Block(Mod):
    def __init__(self, n):
        super().__init__(attn1=Lin(n, np.uint16), norm2=Lin(n))
    def forward(self, x): return self._children["norm2"](self._children["attn1"](x)) * 0.5

class Net(Mod):
    def __init__(self, n):
        super().__init__(blocks=Mod(**{"0": Block(n), "1": Block(n)}))
        self._params["scale_shift_table"] = np.zeros((1, 2, n), np.float32)
    def forward(self, x):
        for i in ("0", "1"):
            x = self._children["blocks"]._children[i](x)
        return x

net = Net(4)
err = io.StringIO()
with contextlib.redirect_stderr(err):
    rec = dr.Recorder(path, side="trainer", rank=0, world_size=1, run_id="cls-run", family="tiny-dit",
                      plan={"name": "p"}, options={"staging_mb": 8, "store_steps": "0,2"})
    assert rec.enabled
    rec.watch(net, outputs=["blocks.*"], gathered="blocks.1.norm2.*")
    rows, srows = {}, {}
    for step in range(3):
        with rec.step(step):
            lat = rng.standard_normal((1, 4, 2, 4, 4)).astype(np.float32)
            rec.input("latents", lat, lat)
            rec.input("timestep", np.array([1000.0 - step], np.float64))   # converted to fp32
            h = rec.record("nc:out", lat[0, :, 0].transpose(0, 2, 1))        # non-contiguous
            assert h is True
            rec.record("bf:out", f32_to_bf16_bits(lat[0, 0]))
            rec.record("h:out", lat[0, 0].astype(np.float16))
            if step == 2:   # the gathered dtype of one parameter changes
                net._children["blocks"]._children["0"]._children["norm2"]._params["weight"] = np.ones((4, 4), np.uint16)
            y = net(rng.standard_normal((3, 4)).astype(np.float32))
            rec.output("noise_pred", y)
            ref = y + np.float32(1e-3) * rng.standard_normal(y.shape).astype(np.float32)
            ref[0, 0] = y[0, 0]
            rec.rollout("model_output", ref)
            rows[step] = rec.compare("output:noise_pred", y, ref)
            rows[step, "eq"] = rec.compare("blocks.0:out", y, y.copy())
            lp_old = rng.standard_normal(3).astype(np.float32)
            lp_new = lp_old + np.float32(0.01)
            rec.logprob("old", lp_old); rec.logprob("new", lp_new)
            srows[step] = rec.step_metrics(lp_new, lp_old)
            rec.sde("params", np.array([0.9, 0.8, 0.95, 0.7], np.float32))
            rec.note(f"hello {step}")
            rec.batch([2, 0, 1], cfg="joined" if step == 1 else "none", microbatch=step)
        if step == 0:
            # after the start: an unknown site is refused by the C API; never raises, logged once
            pass
    with rec.step(3):
        for _ in range(3):
            assert rec.record("late:site", np.zeros(2, np.float32)) is False
        y = net(np.ones((3, 4), np.float32))
    assert rec.record("outside:step", np.zeros(2, np.float32)) is False
    c = rec.counters()
    rec.close()
    rec.close()  # idempotent
log = err.getvalue()
assert log.count("record late:site") == 1, log        # logged once
assert c["rejected"] == 3, c

f = h5py.File(path, "r")
assert f.attrs["run_id"] == b"cls-run"
S = f["sites"]
for name in ("input:latents:pre_cast", "input:latents:post_cast", "input:timestep:pre_cast", "nc:out", "bf:out",
             "h:out", "output:noise_pred", "rollout:model_output", "logprob:old", "logprob:new", "sde:params",
             "blocks.0:out", "blocks.1:out", "blocks.0.attn1:out", "blocks.1.norm2:out",
             "param:blocks.1.norm2.weight:gathered"):
    assert name in S, (name, list(S.keys()))
assert S["bf:out"].attrs["dtype"] == b"bf16" and S["h:out"].attrs["dtype"] == b"fp16"
assert S["input:timestep:pre_cast"].attrs["dtype"] == b"fp32"
assert list(S["nc:out"].attrs["shape"]) == [4, 4, 4]
idx = S["nc:out/index"][...]
assert list(idx["stored"]) == [1, 0, 1, 0][:len(idx)], idx                # store_steps=0,2
assert "blocks.0:out" in S and len(S["blocks.0:out/index"]) == 4
assert list(S["blocks.0.attn1:out/index"]["call_index"]) == [0, 0, 0, 0]
pd = {k.decode(): v.decode() for k, v in f["param_dtypes"][...]}
assert pd == {"scale_shift_table": "fp32", "blocks.0.attn1.weight": "bf16", "blocks.0.norm2.weight": "fp32",
              "blocks.1.attn1.weight": "bf16", "blocks.1.norm2.weight": "fp32"}, pd
notes = [(int(r["step"]), r["text"].decode()) for r in f["notes"][...]]
assert (2, "hello 2") in notes, notes
# the batch composition of each step (docs/format.md: batch-composition notes)
assert (1, "batch-composition v1 micro=1 cfg=joined samples=2,0,1") in notes, notes
assert (0, "batch-composition v1 micro=0 cfg=none samples=2,0,1") in notes, notes
try:
    rec.batch([0], cfg="both")
    raise AssertionError("cfg='both' accepted")
except ValueError:
    pass
assert any(s == 2 and "param dtype changed: blocks.0.norm2.weight gathered as bf16" in t for s, t in notes), notes
# /metrics rows are what compare() returned (the ctypes struct lands intact)
names = [n.decode() for n in f["metrics/site_names"]["name"]]
mr = f["metrics/rows"][...]
assert len(mr) == 6, mr
for r in mr:
    step = int(r["step"])
    site = names[int(r["site"])]
    want = rows[step] if site == "output:noise_pred" else rows[step, "eq"]
    assert r["denoise_index"] == -1 and r["variant"] == 0
    for k in ("numel", "nan_count", "inf_count", "ref_nan_count", "ref_inf_count", "worst_index", "max_ulp_diff",
              "flags"):
        assert int(r[k]) == int(want[k]), (site, k, r[k], want[k])
    for k in ("mean_abs_diff", "max_abs_diff", "rel_max", "cosine", "rmse"):
        assert r[k] == want[k], (site, k, r[k], want[k])
    assert math.isnan(r["rmse_oracle"])
    if site == "blocks.0:out":
        assert r["flags"] == 2 and r["max_ulp_diff"] == 0 and r["mean_abs_diff"] == 0  # bitwise equal
    else:
        assert r["flags"] == 1  # first divergent of its step
sm = f["metrics/steps"][...]
assert len(sm) == 3 and all(abs(r["log_prob_mean_abs_diff"] - srows[int(r["step"])]["log_prob_mean_abs_diff"]) == 0
                            for r in sm), sm
assert all(int(r["n_pairs"]) == 3 and r["denoise_index"] == -1 for r in sm)
assert abs(sm[0]["approx_kl"] - 0.5 * np.mean((np.float64(np.float32(0.01))) ** 2)) < 1e-9, sm[0]
f.close()
out = subprocess.run([DRIFT, "check", path], capture_output=True, text=True)
assert out.returncode == 0, out.stdout + out.stderr
out = subprocess.run([DRIFT, "top", path, "--batch", "--format", "json"], capture_output=True, text=True)
assert out.returncode == 0, out.stderr
top = json.loads(out.stdout)
lay = {l["name"]: l for l in top["layers"]}
hist = {h["step"]: h for h in lay["output:noise_pred"]["history"]}
for s in range(3):
    for k in ("mean_abs_diff", "max_abs_diff", "rel_max", "cosine"):
        assert hist[s][k] == rows[s][k], (s, k, hist[s][k], rows[s][k])
assert [r["step"] for r in top["step_metrics"]] == [0, 1, 2], top["step_metrics"]

# -- compare() semantics against hand-computed values, with non-finite pairs
t = np.array([[1, 2, np.nan, 4], [1, np.inf, 3, -5]], np.float32)
r = np.array([[1, 2.5, np.nan, 3], [2, 1, 3, -5]], np.float32)
m = dr.compare_metrics(t, r)
assert m["numel"] == 8 and m["nan_count"] == 1 and m["ref_nan_count"] == 1 and m["inf_count"] == 1
assert m["mean_abs_diff"] == (0.5 + 1 + 1) / 8 and m["max_abs_diff"] == 1.0 and m["worst_index"] == 3, m
assert m["rel_max"] == 1 / (3 + 1e-30), m          # per row, finite pairs only: max(1/3, 1/5)
assert m["max_ulp_diff"] == 0x7F800000 - 0x3F800000, m   # inf vs 1.0 (NaN vs NaN counts 0)
assert m["n_diff"] == 4 and not m["bitwise_equal"], m
m1 = dr.compare_metrics(np.array([np.nan, 1], np.float32), np.array([1, 1], np.float32))
assert m1["max_ulp_diff"] == 2 ** 64 - 1 and m1["mean_abs_diff"] == 0 and m1["worst_index"] == 1, m1
z = dr.compare_metrics(np.zeros(4, np.float32), np.zeros(4, np.float32))
assert z["cosine"] == 1.0 and z["bitwise_equal"] and z["worst_index"] == 0
mb = dr.compare_metrics(f32_to_bf16_bits(np.array([1.0, 2.0], np.float32)),
                        f32_to_bf16_bits(np.array([1.0078125, 2.0], np.float32)))
assert mb["max_ulp_diff"] == 1, mb  # one bf16 ULP
# ULPs of the reference's magnitude as replay/analysis/metrics.c (issue 35): across
# zero in fp32 ~2^24, not the ~2e9 representable values between; a zero
# reference (bf16 3 vs 0: 2^134 subnormal ULPs) left out, not 9223372036854775807
mz = dr.compare_metrics(np.array([-1e-30, 3.0, 0.75], np.float32), np.array([1e-30, 0.0, 1.0], np.float32))
assert 2 ** 23 < mz["max_ulp_diff"] < 2 ** 25, mz
mz = dr.compare_metrics(f32_to_bf16_bits(np.array([3.0, 0.75], np.float32)),
                        f32_to_bf16_bits(np.array([0.0, 1.0], np.float32)))
assert mz["max_ulp_diff"] == 32, mz  # 0.25 / 2^-7; the zero reference left out

# -- failure policy: an unwritable path never raises; strict raises (the recorder creates
#    missing folders, so the path goes through a regular file: no folder can be made there)
import tempfile
blocker = tempfile.NamedTemporaryFile(delete=False).name
with contextlib.redirect_stderr(io.StringIO()) as e2:
    bad = dr.Recorder(blocker + "/x/t.h5", run_id="r")
    assert not bad.enabled
    with bad.step(0):
        assert bad.record("a:out", np.zeros(3, np.float32)) is False
        assert bad.compare("a", np.zeros(3, np.float32), np.zeros(3, np.float32)) is None
    bad.record_params(net)
    bad.close()
assert e2.getvalue().count("drift recorder:") == 1, e2.getvalue()
try:
    dr.Recorder(blocker + "/x/t.h5", run_id="r", strict=True)
    raise SystemExit("strict=True did not raise")
except dr.RecorderError as e:
    assert "open" in str(e)
os.remove(blocker)
print("class checks OK")
PY

# --- 3. shard assembly ---------------------------------------------------------------------
cd "$W" || exit 1
PLANS="$S/tests/data/plans"
[ -f "$PLANS/wan2_2.json" ] || { fail "no $PLANS/wan2_2.json (the committed plan fixtures)"; exit 1; }
PLAN="$PLANS/wan2_2.json"
"$DRIFT" record --synthetic tiny-dit --steps 2 --trainer-plan "$PLAN" --rollout-plan "$PLANS/all_bf16.json" \
  --seed 11 -o whole.h5 > /dev/null 2>&1 || { fail "drift record --synthetic"; exit 1; }

# write_ranks DIR MODE: the whole trace re-recorded as 2 rank files through the Recorder
write_ranks() {
  "$PY" - whole.h5 "$1" "$2" <<'PY'
import os, sys
import numpy as np, h5py
import drift_recorder as dr
from drift_recorder._tensor import f32_to_bf16_bits

src, out, mode = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(out, exist_ok=True)
f = h5py.File(src, "r")
A = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
params = {k: f["params"][k][...].astype(np.float32) for k in f["params"]}
pdt = [(a.decode(), b.decode()) for a, b in f["param_dtypes"][...]]
sites = sorted(f["sites"], key=lambda n: int(f["sites"][n].attrs["site_id"]))
steps = [int(s["step"]) for s in f["steps"][...]]
W = 2
for rank in range(W):
    run = "py-shard-run" if not (mode == "badrun" and rank == 1) else "another-run"
    with dr.Recorder(os.path.join(out, f"trace.rank{rank}.h5"), side="trainer", rank=rank, world_size=W, run_id=run,
                     family=A["family"], plan=A["plan"], guidance_scale=float(A["guidance_scale"]), strict=True,
                     options={"staging_mb": 32}) as rec:
        for name, v in params.items():
            if mode == "gap" and rank == 1 and name == "blocks.1.ffn.net.2.weight":
                continue
            if name == "proj_out.weight":            # sharded along dim 1 (any block layout must work)
                c = -(-v.shape[1] // W)
                lo, hi = min(rank * c, v.shape[1]), min((rank + 1) * c, v.shape[1])
                rec.add_param(name, v[:, lo:hi], (0, lo), v.shape)
                continue
            c = -(-v.shape[0] // W)                  # FSDP2: torch.chunk along dim 0
            lo, hi = min(rank * c, v.shape[0]), min((rank + 1) * c, v.shape[0])
            if mode == "overlap" and name == "blocks.0.attn1.to_q.bias":
                lo, hi = 0, c
            if hi > lo:
                off = (lo,) + (0,) * (v.ndim - 1)
                rec.add_param(name, v[lo:hi], off, v.shape)
        for name, dt in pdt:
            rec.set_param_dtype(name, dt)
        for b in f["buffers"]:
            rec.add_buffer(b, f["buffers"][b][...].astype(np.float32))
        for step in steps:
            with rec.step(step):
                for s in sites:
                    g = f["sites"][s]
                    idx = g["index"][...]
                    data = g["data"][...] if "data" in g else None
                    for i, row in enumerate(idx):
                        if int(row["step"]) != step or not row["stored"]:
                            continue
                        v = data[i].astype(np.float32)
                        if g.attrs["dtype"] == b"bf16":
                            v = f32_to_bf16_bits(v)
                        elif g.attrs["dtype"] == b"fp16":
                            v = v.astype(np.float16)
                        assert rec.record(s, v, int(row["microbatch"]), int(row["denoise_index"]),
                                          int(row["call_index"]))
PY
}

if write_ranks good good; then pass "wrote 2 rank files through the Recorder"; else fail "writing rank files"; fi
for k in 0 1; do
  if "$DRIFT" check good/trace.rank$k.h5 > "$W/check$k.log" 2>&1; then pass "drift check trace.rank$k.h5"
  else fail "drift check trace.rank$k.h5"; cat "$W/check$k.log"; fi
done
"$DRIFT" ls good/trace.rank1.h5 > ls1.txt 2>&1
if grep -q "blocks.0.attn1.to_q.weight" ls1.txt && grep -Eq "offset|shard" ls1.txt; then pass "drift ls shows shards"
else fail "drift ls shows no shard offsets"; sed -n 1,40p ls1.txt; fi

norm() { "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); [d.pop(k,None) for k in ("trace","seconds","reference")]; print(json.dumps(d,sort_keys=True))' "$1"; }
"$DRIFT" replay whole.h5 --plan "$PLAN" --json > whole.json 2> whole.err; rw=$?
"$DRIFT" replay good/trace.rank0.h5 --plan "$PLAN" --json > r0.json 2> r0.err; r0=$?
"$DRIFT" replay good/trace.rank1.h5 --plan "$PLAN" --json > r1.json 2> r1.err; r1=$?
if [ $rw -eq 0 ] && [ $r0 -eq 0 ] && [ $r1 -eq 0 ] && [ "$(norm whole.json)" = "$(norm r0.json)" ] &&
   [ "$(norm whole.json)" = "$(norm r1.json)" ]; then
  pass "replay of rank0/rank1 (assembled shards) equals the replay of the whole trace"
else
  fail "replay of the rank files differs (exit whole $rw rank0 $r0 rank1 $r1)"; cat r0.err r1.err; diff <(norm whole.json) <(norm r0.json) | head
fi
if "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert all(x["site"] is None for x in d["first_divergent"]), d["first_divergent"]; assert all(s["steps_bitwise_equal"]==s["steps"] for s in d["sites"]), [s for s in d["sites"] if s["steps_bitwise_equal"]!=s["steps"]][:2]; assert len(d["sites"]) > 20' r0.json; then
  pass "replay of rank0 is bitwise equal to its recording (every site, every step)"
else
  fail "replay of rank0 not bitwise equal to its recording"
fi
"$DRIFT" replay good/trace.rank0.h5 --plan "$PLAN" --ref whole.h5 --json > rx.json 2> rx.err
if "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert all(x["site"] is None for x in d["first_divergent"])' rx.json; then
  pass "replay of rank0 against the whole trace: bitwise equal"
else fail "replay of rank0 --ref whole.h5"; cat rx.err; fi

# a negative control: a plan that differs must diverge (the comparison can fail)
"$DRIFT" replay good/trace.rank0.h5 --plan "$(dirname "$PLAN")/wan2_2_no_norm2.json" --json > neg.json
if "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["first_divergent"][0]["site"] == "blocks.0.norm2:out", d["first_divergent"]' neg.json; then
  pass "negative control: the plan without the norm2 island first diverges at blocks.0.norm2:out"
else fail "negative control did not diverge at blocks.0.norm2:out"; head -c 600 neg.json; fi

expect_fail() { # NAME DIR PATTERN
  "$DRIFT" replay "$2/trace.rank0.h5" --plan "$PLAN" > "$1.out" 2> "$1.err"; local rc=$?
  if [ $rc -eq 2 ] && grep -q -- "$3" "$1.err"; then pass "$1: exit 2, '$(head -c 220 "$1.err" | tr '\n' ' ')'"
  else fail "$1: exit $rc (expected 2 with '$3')"; cat "$1.err"; fi
}
mkdir -p missing && cp good/trace.rank0.h5 missing/
expect_fail "missing rank file" missing "trace.rank1.h5"
write_ranks badrun badrun && expect_fail "foreign run id" badrun "another-run"
write_ranks overlap overlap && expect_fail "overlapping shards" overlap "blocks.0.attn1.to_q.bias: element 0 is covered by rank 0 and rank 1"
write_ranks gap gap && expect_fail "gap" gap "blocks.1.ffn.net.2.weight: .* elements are in no rank file.*rank files without this parameter: 1"
ln -s good/trace.rank0.h5 norank.h5 2>/dev/null
"$DRIFT" replay norank.h5 --plan "$PLAN" > /dev/null 2> norank.err; rc=$?
if [ $rc -eq 2 ] && grep -q "no rank<N>" norank.err; then pass "sharded file without rank<N> in its name: clear error"
else fail "file without rank<N>: exit $rc"; cat norank.err; fi

if [ $fails -ne 0 ]; then echo "FAIL: recorder_python ($fails checks failed)"; exit 1; fi
echo "PASS: recorder_python"
