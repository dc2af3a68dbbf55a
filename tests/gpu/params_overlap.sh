#!/usr/bin/env bash
# Loading at disk speed on a GPU (issue 18, deliverable 2): `drift replay
# --device "$DEVICE"` of a trace recorded with parameters by reference reads the
# checkpoint, casts the parameters per the plan and uploads them overlapped.
# Checks, on a small Wan model in a checkpoint of many shards:
#   * the setup line reports the overlapped pipeline (read+cast+upload ...
#     GB/s overlapped) and, with DRIFT_REPLAY_PROFILE=1, the sequential-read
#     baseline of the same run;
#   * the replayed output (-o) is bitwise the same with 1 and 8 reader
#     threads, as with the reads done first and the cast+upload after
#     (DRIFT_LOAD_OVERLAP=0), and as without residency (DRIFT_REPLAY_RESIDENT=0);
#   * a changed byte in one shard and a missing shard exit 2 naming the
#     tensor and the file through the pipeline;
#   * a by-value trace of the same model streams its /params the same way
#     (one reader thread): the same output bits.
#
#   BUILD=/tmp/drift-gpu-build OUT=DIR bash tests/gpu/params_overlap.sh
#
# Needs a CUDA build of drift ($BUILD/drift or DRIFT_BIN), a GPU (exit 77
# without one) and python3 (json only). Prints PASS:/FAIL: lines; exit 0
# when every check passed. DEVICE=cpu DRIFT_REPLAY_RESIDENT=1 runs the same
# checks on the host (a dry run of the script without a GPU).
set -u
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-/tmp/drift-gpu-build}
DRIFT=${DRIFT_BIN:-$BUILD/drift}
OUT=${OUT:-${DRIFT_TMP:-/tmp}/params_overlap}
PY=${PYTHON3:-python3}
PYLD=${PY_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}
py() { LD_LIBRARY_PATH=$PYLD "$PY" "$@"; }
PLANS=$SRC/tests/data/plans
[ -x "$DRIFT" ] || { echo "SKIP: $DRIFT not built"; exit 77; }
DEVICE=${DEVICE:-cuda}
if [ "$DEVICE" = cuda ] && ! [ -e /dev/nvidia0 ] && ! command -v nvidia-smi >/dev/null 2>&1; then echo "SKIP: no GPU"; exit 77; fi
W=$OUT/work; rm -rf "$W"; mkdir -p "$W"
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
M="wan2.2:layers=2,dim=256,heads=4,ffn_dim=512,text_dim=64,text_len=8,frames=2,height=16,width=16"
P=$PLANS/wan2_2.json; R=$PLANS/wan2_2_no_norm2.json

"$DRIFT" weights --model "$M" --seed 3 -o "$W/ck" --shard-size 256K > "$W/weights.log" 2>&1 || { cat "$W/weights.log"; echo "FAIL: drift weights"; exit 1; }
"$DRIFT" record --synthetic "$M" --seed 3 --steps 2 --trainer-plan "$P" --rollout-plan "$R" --params-ref "$W/ck" \
  -o "$W/ref.h5" > "$W/record.log" 2>&1 || { cat "$W/record.log"; echo "FAIL: drift record --params-ref"; exit 1; }
nshards=$(ls "$W/ck"/*.safetensors | wc -l)

run() { # run NAME ENV... : replay on the GPU with -o NAME.h5, stderr in NAME.err
  local n=$1; shift
  env "$@" "$DRIFT" replay "$W/ref.h5" --plan "$P" --device "$DEVICE" -o "$W/$n.h5" > "$W/$n.out" 2> "$W/$n.err"
}
same() { # same A B: the replayed outputs of A.h5 and B.h5 are bitwise equal
  "$DRIFT" compare "$W/$1.h5" "$W/$2.h5" --format json 2> "$W/cmp.err" | py -c "
import json, sys; d = json.load(sys.stdin)
assert d['sites'] and all(s['bitwise_equal'] for s in d['sites']), d['sites']"
}

if run ovl1 DRIFT_LOAD_THREADS=1 DRIFT_REPLAY_PROFILE=1; then pass "overlapped replay, 1 reader thread ($nshards shards)"; else cat "$W/ovl1.err"; fail "overlapped replay, 1 reader thread"; fi
grep setup "$W/ovl1.err"
if grep -q "read+cast+upload [0-9]* tensors, .* GB/s overlapped, 1 reader thread.*a plain sequential read of the same files: .* GB/s" "$W/ovl1.err"; then
  pass "the setup line reports the overlapped pipeline and the sequential baseline"
else fail "setup line: $(grep setup "$W/ovl1.err")"; fi
run ovl8 DRIFT_LOAD_THREADS=8 || { cat "$W/ovl8.err"; fail "overlapped replay, 8 reader threads"; }
run seq DRIFT_LOAD_OVERLAP=0 || { cat "$W/seq.err"; fail "replay with the reads first (DRIFT_LOAD_OVERLAP=0)"; }
grep -q "cast+upload [0-9.]* s" "$W/seq.err" && ! grep -q overlapped "$W/seq.err" || fail "DRIFT_LOAD_OVERLAP=0 setup line: $(grep setup "$W/seq.err")"
run cold DRIFT_REPLAY_RESIDENT=0 || { cat "$W/cold.err"; fail "replay without residency"; }
if same ovl1 ovl8; then pass "1 and 8 reader threads: the same output bits"; else fail "1 vs 8 reader threads differ"; fi
if same ovl1 seq; then pass "overlapped and read-then-upload: the same output bits"; else fail "overlapped vs DRIFT_LOAD_OVERLAP=0 differ"; fi
if same ovl1 cold; then pass "resident (overlapped) and not resident: the same output bits"; else fail "resident vs DRIFT_REPLAY_RESIDENT=0 differ"; fi

# By value: the trace's /params read on one thread while the warm-up casts and uploads.
"$DRIFT" record --synthetic "$M" --seed 3 --steps 2 --trainer-plan "$P" --rollout-plan "$R" -o "$W/val.h5" > "$W/recval.log" 2>&1 \
  || fail "drift record by value: $(cat "$W/recval.log")"
runv() { local n=$1; shift; env "$@" "$DRIFT" replay "$W/val.h5" --plan "$P" --device "$DEVICE" -o "$W/$n.h5" > "$W/$n.out" 2> "$W/$n.err"; }
runv vovl DRIFT_REPLAY_PROFILE=1 || { cat "$W/vovl.err"; fail "overlapped by-value replay"; }
runv vseq DRIFT_LOAD_OVERLAP=0 || { cat "$W/vseq.err"; fail "by-value replay, reads first"; }
grep setup "$W/vovl.err"
if grep -q "from the trace's /params in .* GB/s overlapped" "$W/vovl.err" && same vovl vseq; then
  pass "by value: overlapped, the same output bits as read-then-upload"
else fail "by value: $(grep setup "$W/vovl.err")"; fi

# One byte of the second shard changed: exit 2 naming the tensor and the file.
cp -r "$W/ck" "$W/bad"
SH=$(cd "$W/bad" && ls diffusion_pytorch_model-00002-of-*.safetensors)
py - "$W/bad/$SH" > "$W/victim" <<'PY'
import json, struct, sys
p = sys.argv[1]; raw = bytearray(open(p, "rb").read())
hl = struct.unpack("<Q", raw[:8])[0]; hdr = json.loads(raw[8:8 + hl]); hdr.pop("__metadata__", None)
name, e = max(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0])
raw[8 + hl + e["data_offsets"][0] + 1] ^= 0x01
open(p, "wb").write(raw); print(name)
PY
for t in 1 8; do
  DRIFT_LOAD_THREADS=$t "$DRIFT" replay "$W/ref.h5" --plan "$P" --device "$DEVICE" --output-only --weights-root "$W/bad" > /dev/null 2> "$W/bad$t.err"; rc=$?
  if [ $rc -eq 2 ] && grep -q "tensor '$(cat "$W/victim")' in .*$SH: content hash" "$W/bad$t.err"; then
    pass "hash mismatch, $t reader thread(s): exit 2 naming $(cat "$W/victim") and $SH"
  else fail "hash mismatch, $t reader thread(s): exit $rc: $(cat "$W/bad$t.err")"; fi
done
rm "$W/bad/$SH"
"$DRIFT" replay "$W/ref.h5" --plan "$P" --device "$DEVICE" --output-only --weights-root "$W/bad" > /dev/null 2> "$W/miss.err"; rc=$?
if [ $rc -eq 2 ] && grep -q "tensor '.*$SH" "$W/miss.err"; then pass "missing shard: exit 2 naming a tensor and $SH"
else fail "missing shard: exit $rc: $(cat "$W/miss.err")"; fi

echo "params_overlap.sh: $fails failed check(s)"
[ $fails -eq 0 ]
