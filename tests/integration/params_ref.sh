#!/usr/bin/env bash
# Parameters by reference (issue 18): `drift weights` writes a sharded
# diffusers checkpoint from a seed; `drift record --params-ref DIR` stores
# /params_ref (file, dtype, shape, drift-sum64 hash per tensor) and no values;
# the hash recorded is the one an independent numpy implementation of the
# spec in docs/format.md computes from the shard; `drift replay` reads the
# checkpoint and reproduces every recorded site bit for bit, also with
# reading, casting and uploading overlapped (DRIFT_REPLAY_RESIDENT=1, the GPU
# replay's path, on 1 and 3 reader threads); a changed byte and a missing
# shard exit 2 naming the tensor and the file on both paths; the checkpoint
# moved elsewhere replays with --weights-root.
set -u
D="${DRIFT_BIN:?}"; T="${DRIFT_TESTDATA:?}"; PY="${PYTHON3:-/usr/bin/python3}"
W="${DRIFT_TMP:-$(mktemp -d)}/params_ref"; rm -rf "$W"; mkdir -p "$W"
fail() { echo "FAIL: $*"; exit 1; }
M="wan2.2:layers=2,dim=64,heads=4,ffn_dim=128,text_dim=32,text_len=8,frames=2,height=8,width=8"
P="$T/plans/wan2_2.json"; R="$T/plans/wan2_2_no_norm2.json"

"$D" weights --model "$M" --seed 5 -o "$W/ck" --shard-size 48K --json > "$W/weights.json" || fail "drift weights exited $?"
"$PY" - "$W" <<'PY' || fail "weights summary / index"
import json, sys, glob, os
w = sys.argv[1]
s = json.load(open(f"{w}/weights.json"))
idx = json.load(open(f"{w}/ck/diffusion_pytorch_model.safetensors.index.json"))
shards = sorted(set(idx["weight_map"].values()))
assert s["shards"] == len(shards) >= 3, (s, shards)
assert s["tensors"] == len(idx["weight_map"]), s
assert all(os.path.exists(f"{w}/ck/{f}") for f in shards)
assert idx["metadata"]["total_size"] == s["bytes"]
PY

"$D" record --synthetic "$M" --seed 5 --steps 2 --trainer-plan "$P" --rollout-plan "$R" --params-ref "$W/ck" \
  -o "$W/ref.h5" 2>/dev/null || fail "record --params-ref exited $?"
"$D" record --synthetic "$M" --seed 5 --steps 2 --trainer-plan "$P" --rollout-plan "$R" -o "$W/val.h5" 2>/dev/null \
  || fail "record by value exited $?"

"$PY" - "$W" <<'PY' || fail "the trace's reference"
import h5py, json, sys, struct, numpy as np
w = sys.argv[1]
M64 = (1 << 64) - 1
def fmix(k):
    k = k.astype(np.uint64)
    k ^= k >> np.uint64(33); k *= np.uint64(0xff51afd7ed558ccd)
    k ^= k >> np.uint64(33); k *= np.uint64(0xc4ceb9fe1a85ec53)
    k ^= k >> np.uint64(33); return k
def sum64(b):  # docs/format.md: drift-sum64
    n = len(b); pad = b + b"\0" * (-n % 8)
    words = np.frombuffer(pad, "<u8")
    with np.errstate(over="ignore"):
        i = np.arange(1, len(words) + 1, dtype=np.uint64)
        s = int(fmix(words + i * np.uint64(0x9E3779B97F4A7C15)).sum(dtype=np.uint64)) if len(words) else 0
        return int(fmix(np.array([s ^ int(fmix(np.array([n], np.uint64))[0])], np.uint64))[0])
for side in ("ref.h5", "ref.rollout.h5"):
    f = h5py.File(f"{w}/{side}", "r")
    assert "params_ref" in f, side
    assert len(f["params"].keys()) == 0, f"{side}: /params holds values"
    ref = json.loads(f["params_ref"][()].decode())
    assert ref["format"] == "drift-params-ref" and ref["hash"] == "drift-sum64", ref
    assert len(ref["tensors"]) == len(f["param_dtypes"]), (len(ref["tensors"]), len(f["param_dtypes"]))
checked = 0
for t in ref["tensors"]:
    raw = open(f"{ref['weights_root']}/{t['file']}", "rb").read()
    hl = struct.unpack("<Q", raw[:8])[0]; hdr = json.loads(raw[8:8 + hl])
    a, b = hdr[t["name"]]["data_offsets"]
    data = raw[8 + hl + a:8 + hl + b]
    assert hdr[t["name"]]["dtype"] == t["dtype"] == "BF16", t
    assert "%016x" % sum64(data) == t["hash"], (t["name"], "%016x" % sum64(data), t["hash"])
    checked += 1
assert checked == len(ref["tensors"])
import os
print("trace sizes", os.path.getsize(f"{w}/ref.h5"), "by reference,", os.path.getsize(f"{w}/val.h5"), "by value")
assert os.path.getsize(f"{w}/ref.h5") < os.path.getsize(f"{w}/val.h5")
PY

# Replay reads the checkpoint: every recorded site bit for bit (same plan, same backend).
"$D" replay "$W/ref.h5" --plan "$P" --json > "$W/rep.json" 2> "$W/rep.err" || { cat "$W/rep.err"; fail "replay exited $?"; }
grep -q "by reference from" "$W/rep.err" || fail "no setup line: $(cat "$W/rep.err")"
"$PY" -c "
import json, sys; d = json.load(open('$W/rep.json'))
assert d['sites'] and all(s['bitwise_equal'] for s in d['sites']), [s['site'] for s in d['sites'] if not s['bitwise_equal']]
" || fail "replay of the reference trace is not bitwise equal to its recording"
DRIFT_REPLAY_PROFILE=1 "$D" replay "$W/ref.h5" --plan "$P" --output-only > /dev/null 2> "$W/prof.err" || fail "profiled replay"
grep -q "a plain sequential read of the same files" "$W/prof.err" || fail "no baseline: $(cat "$W/prof.err")"

# Overlapped (what a GPU replay does; DRIFT_REPLAY_RESIDENT=1 takes the CPU through it): reading, casting
# and uploading in one pipeline, on 1 and 3 reader threads: the same sites bit for bit, the result trace
# identical to the plain load's, the setup line the pipeline's figures and the baseline.
"$D" replay "$W/ref.h5" --plan "$P" -o "$W/plain.h5" > /dev/null 2>&1 || fail "plain replay -o"
for t in 1 3; do
  DRIFT_REPLAY_RESIDENT=1 DRIFT_LOAD_THREADS=$t DRIFT_REPLAY_PROFILE=1 "$D" replay "$W/ref.h5" --plan "$P" --json \
    -o "$W/ovl$t.h5" > "$W/ovl$t.json" 2> "$W/ovl$t.err" || { cat "$W/ovl$t.err"; fail "overlapped replay ($t threads) exited $?"; }
  grep -q "read+cast+upload [0-9]* tensors, .* by reference from .* GB/s overlapped, $t reader thread" "$W/ovl$t.err" \
    || fail "overlapped setup line ($t threads): $(cat "$W/ovl$t.err")"
  grep -q "a plain sequential read of the same files: .* GB/s" "$W/ovl$t.err" || fail "no baseline: $(cat "$W/ovl$t.err")"
  "$PY" - "$W/ovl$t.json" "$W/plain.h5" "$W/ovl$t.h5" <<'PY' || fail "overlapped replay ($t threads) differs"
import json, sys, h5py, numpy as np
d = json.load(open(sys.argv[1]))
assert d['sites'] and all(s['bitwise_equal'] for s in d['sites']), [s['site'] for s in d['sites'] if not s['bitwise_equal']]
a, b = h5py.File(sys.argv[2], "r"), h5py.File(sys.argv[3], "r")
n = 0
def same(name, obj):
    global n
    if isinstance(obj, h5py.Dataset) and name.startswith("sites/") and obj.dtype.kind == "f":
        assert np.array_equal(obj[()].view(np.uint8), b[name][()].view(np.uint8)), name
        n += 1
a.visititems(same)
assert n > 0, "no replayed values compared"
PY
done

# By value too: the trace's /params read on one thread while the warm-up casts and uploads.
"$D" replay "$W/val.h5" --plan "$P" -o "$W/vplain.h5" > /dev/null 2>&1 || fail "plain by-value replay -o"
DRIFT_REPLAY_RESIDENT=1 DRIFT_REPLAY_PROFILE=1 "$D" replay "$W/val.h5" --plan "$P" --json -o "$W/vovl.h5" \
  > "$W/vovl.json" 2> "$W/vovl.err" || { cat "$W/vovl.err"; fail "overlapped by-value replay exited $?"; }
grep -q "read+cast+upload [0-9]* tensors, .* from the trace's /params in .* GB/s overlapped" "$W/vovl.err" \
  || fail "overlapped by-value setup line: $(cat "$W/vovl.err")"
"$D" compare "$W/vplain.h5" "$W/vovl.h5" --format json | "$PY" -c "
import json, sys; d = json.load(sys.stdin)
assert d['sites'] and all(s['bitwise_equal'] for s in d['sites']), d['sites']
d = json.load(open('$W/vovl.json'))
assert d['sites'] and all(s['bitwise_equal'] for s in d['sites'])" || fail "overlapped by-value replay differs"

# Moved: the recorded root is gone; --weights-root finds it.
mv "$W/ck" "$W/moved"
"$D" replay "$W/ref.h5" --plan "$P" --output-only > /dev/null 2> "$W/gone.err"; rc=$?
[ $rc -eq 2 ] || fail "replay with the checkpoint gone: exit $rc, expected 2"
grep -q "tensor '" "$W/gone.err" || fail "no tensor named: $(cat "$W/gone.err")"
"$D" replay "$W/ref.h5" --plan "$P" --output-only --weights-root "$W/moved" > /dev/null 2>&1 || fail "--weights-root replay"

# One byte changed in one shard: exit 2 naming the tensor and the file.
cp -r "$W/moved" "$W/bad"
SHARD=$(cd "$W/bad" && ls diffusion_pytorch_model-00002-of-*.safetensors)
"$PY" - "$W/bad/$SHARD" > "$W/victim" <<'PY' || fail "corrupting"
import json, struct, sys
p = sys.argv[1]; raw = bytearray(open(p, "rb").read())
hl = struct.unpack("<Q", raw[:8])[0]; hdr = json.loads(raw[8:8 + hl]); hdr.pop("__metadata__", None)
name, e = max(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0])
raw[8 + hl + e["data_offsets"][0] + 1] ^= 0x01
open(p, "wb").write(raw); print(name)
PY
"$D" replay "$W/ref.h5" --plan "$P" --output-only --weights-root "$W/bad" > /dev/null 2> "$W/bad.err"; rc=$?
[ $rc -eq 2 ] || fail "hash mismatch: exit $rc, expected 2"
grep -q "tensor '$(cat "$W/victim")'" "$W/bad.err" || fail "mismatch does not name the tensor: $(cat "$W/bad.err")"
grep -q "$SHARD" "$W/bad.err" || fail "mismatch does not name the file: $(cat "$W/bad.err")"
grep -q "content hash" "$W/bad.err" || fail "mismatch does not say hash: $(cat "$W/bad.err")"

# The same through the overlapped pipeline, on 1 and 4 reader threads.
for t in 1 4; do
  DRIFT_REPLAY_RESIDENT=1 DRIFT_LOAD_THREADS=$t "$D" replay "$W/ref.h5" --plan "$P" --output-only --weights-root "$W/bad" \
    > /dev/null 2> "$W/bado.err"; rc=$?
  [ $rc -eq 2 ] || fail "hash mismatch, overlapped ($t threads): exit $rc, expected 2"
  grep -q "tensor '$(cat "$W/victim")' in .*$SHARD: content hash" "$W/bado.err" \
    || fail "overlapped mismatch ($t threads) does not name the tensor and the file: $(cat "$W/bado.err")"
done

# A missing shard: exit 2 naming a tensor of it and the file.
rm "$W/bad/$SHARD"
DRIFT_REPLAY_RESIDENT=1 "$D" replay "$W/ref.h5" --plan "$P" --output-only --weights-root "$W/bad" > /dev/null 2> "$W/misso.err"; rc=$?
[ $rc -eq 2 ] || fail "missing shard, overlapped: exit $rc, expected 2"
grep -q "tensor '.*$SHARD" "$W/misso.err" || fail "missing shard, overlapped: $(cat "$W/misso.err")"
# and with the sequential-read baseline first (DRIFT_REPLAY_PROFILE=1), which meets the missing file first
DRIFT_REPLAY_PROFILE=1 "$D" replay "$W/ref.h5" --plan "$P" --output-only --weights-root "$W/bad" > /dev/null 2> "$W/missp.err"; rc=$?
[ $rc -eq 2 ] && grep -q "tensor '.*$SHARD" "$W/missp.err" || fail "missing shard, profiled: exit $rc: $(cat "$W/missp.err")"
"$D" replay "$W/ref.h5" --plan "$P" --output-only --weights-root "$W/bad" > /dev/null 2> "$W/miss.err"; rc=$?
[ $rc -eq 2 ] || fail "missing shard: exit $rc, expected 2"
grep -q "$SHARD" "$W/miss.err" || fail "missing shard not named: $(cat "$W/miss.err")"
grep -q "tensor '" "$W/miss.err" || fail "missing shard: no tensor named: $(cat "$W/miss.err")"

# The memory plan refuses before reading anything, naming the estimate and the limit.
DRIFT_MEM_LIMIT_HOST=1M "$D" replay "$W/ref.h5" --plan "$P" --weights-root "$W/moved" > /dev/null 2> "$W/mem.err"; rc=$?
[ $rc -eq 2 ] || fail "memory plan: exit $rc, expected 2"
grep -q "needs about .* of host memory .* but 1 MiB is available" "$W/mem.err" || fail "memory plan message: $(cat "$W/mem.err")"

# A malformed reference: drift check reports it, replay exits 2 naming the field.
"$D" check "$W/ref.h5" > /dev/null || fail "drift check of the reference trace"
"$PY" - "$W/ref.h5" "$W/badref.h5" <<'PY' || fail "writing a bad reference"
import h5py, numpy as np, shutil, sys
shutil.copy(sys.argv[1], sys.argv[2])
f = h5py.File(sys.argv[2], "r+"); s = f["params_ref"][()]; del f["params_ref"]
f.create_dataset("params_ref", data=np.bytes_(s.replace(b'"drift-sum64"', b'"md5"')))
PY
"$D" check "$W/badref.h5" > "$W/chk.out" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q "params_ref.*hash" "$W/chk.out" || fail "check of a bad reference: exit $rc: $(cat "$W/chk.out")"
"$D" replay "$W/badref.h5" --plan "$P" --weights-root "$W/moved" > /dev/null 2> "$W/br.err"; rc=$?
[ $rc -eq 2 ] && grep -q "'hash'" "$W/br.err" || fail "replay of a bad reference: exit $rc: $(cat "$W/br.err")"

# Usage errors.
"$D" weights --model "$M" -o "$W/x" --dtype int8 > /dev/null 2>&1; [ $? -eq 2 ] || fail "--dtype int8 not exit 2"
"$D" record --synthetic "$M" --steps 1 --trainer-plan "$P" --rollout-plan "$R" --params-ref "$W/nowhere" \
  -o "$W/n.h5" > /dev/null 2> "$W/n.err"; [ $? -eq 2 ] || fail "--params-ref to nothing not exit 2"
grep -q nowhere "$W/n.err" || fail "--params-ref error does not name the path"
echo "PASS params_ref"
