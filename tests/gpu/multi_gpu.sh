#!/usr/bin/env bash
# Acceptance job of the multi-GPU replay (issue 8), on a machine with 2 GPUs
# and a CUDA build of drift (NCCL and MPI found at configure time):
#
#   BUILD=/tmp/drift-gpu-build OUT=$OUT bash tests/gpu/multi_gpu.sh
#
# 1. drift replay --devices cuda:0,cuda:1 == one GPU, bit for bit (the --json
#    report and, with -o, the result traces' per-step output and metric rows),
#    for --ref rollout / trainer / oracle on a small trace; NCCL did the
#    reductions;
# 2. the speedup of two GPUs over one on a larger wan2.2 trace (the steps
#    phase, which is what runs in parallel, and end to end);
# 3. --fsdp (shard, cast, NCCL all-gather per wrap) == unsharded replay;
# 4. drift bisect --devices cuda:0,cuda:1: same culprits as one GPU, probes
#    on both GPUs at once (the log);
# 5. mpirun -n 2 drift replay --device cuda == the single process;
# 6. the NCCL unit test (gpu_test_multi_nccl) when it was built.
# One PASS/FAIL line per check; exit 1 on any failure, 77 without 2 GPUs.
# Knobs: SPEEDUP_MIN (1.8), BIG_SPEC / BIG_STEPS (the speedup workload).
set -u
S="$(cd "$(dirname "$0")/../.." && pwd)"
BUILD="${BUILD:?set BUILD to the drift CUDA build directory}"
D="$BUILD/drift"
PY="${PYTHON3:-python3}"
OUT="${OUT:-$(mktemp -d)}"
W="$OUT/multi_gpu"; rm -rf "$W"; mkdir -p "$W"
P="$S/tests/data/plans"; B="$S/tests/data/bisect"
SPEEDUP_MIN="${SPEEDUP_MIN:-1.8}"
BIG_SPEC="${BIG_SPEC:-wan2.2:layers=4,dim=1536,heads=12,ffn_dim=6144,frames=1,height=64,width=64,text_len=256}"
BIG_STEPS="${BIG_STEPS:-8}"
# the speedup workload that fills the GPUs: long sequences (L = 16384 tokens),
# few input channels, only the boundary inputs and the output recorded and
# compared, so a step is
# GPU compute and not host-side site comparison; 16 steps (8 per GPU), so that
# what a worker pays once in its first steps (allocator growth, first GEMM
# heuristics) weighs about as little as in a real replay of many steps (with
# 8 steps, 4 per GPU, the speedup measured 1.94x and 1.81x in two runs)
FILL_SPEC="${FILL_SPEC:-wan2.2:layers=16,dim=1536,heads=12,ffn_dim=6144,frames=1,height=256,width=256,text_len=256,text_dim=1024,in_channels=4,out_channels=4}"
FILL_STEPS="${FILL_STEPS:-16}"
export NCCL_NVLS_ENABLE="${NCCL_NVLS_ENABLE:-0}"  # no NVLink multicast (machine notes)
# OpenMPI in a container: no cross-memory-attach single copy
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
T0=$(date +%s)
el() { echo "$(($(date +%s) - T0))s"; }

[ -x "$D" ] || { echo "FAIL: $D not built"; exit 1; }
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -lt 2 ]; then echo "SKIP: needs 2 GPUs (found ${ngpu:-0})"; exit 77; fi

# the JSON report without wall time and backend name
same_json() {
  "$PY" - "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for d in (a, b):
    d.pop("seconds", None); d.pop("backend", None)
if a != b:
    for k in a:
        if a.get(k) != b.get(k): print("   differs:", k)
    sys.exit(1)
PY
}
# every step of output:noise_pred bitwise equal between two result traces, same metric rows
same_result() {
  "$D" compare "$1" "$2" --json >"$W/cmp.json" 2>"$W/cmp.err" || return 1
  [ "$("$D" ls "$1" | grep '^metrics')" = "$("$D" ls "$2" | grep '^metrics')" ] || { echo "   metric rows differ"; return 1; }
  "$PY" - "$W/cmp.json" "$3" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); n = int(sys.argv[2])
out = [s for s in d["sites"] if s["site"] == "output:noise_pred"]
ok = len(d["steps"]) == n and out and out[0]["steps"] == n and out[0]["steps_bitwise_equal"] == n
if not ok: print("   ", d["steps"], out); sys.exit(1)
PY
}
# "setup X s, steps Y s, total Z s" from the stderr summary line
steps_s() { sed -n 's/.*steps \([0-9.]*\) s, total.*/\1/p' "$1" | tail -1; }
total_s() { sed -n 's/.*total \([0-9.]*\) s$/\1/p' "$1" | tail -1; }
json_s() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["seconds"])' "$1"; }

echo "== traces ($(el))"
"$D" record --synthetic tiny-dit --steps 6 --trainer-plan "$P/wan2_2.json" --rollout-plan "$P/wan2_2_no_norm2.json" \
  --device cuda:0 -o "$W/small.h5" >"$W/rec_small.log" 2>&1 && pass "record small trace" || fail "record small: $(tail -3 "$W/rec_small.log")"
"$D" record --synthetic "$BIG_SPEC" --steps "$BIG_STEPS" --trainer-plan "$P/wan2_2.json" --rollout-plan "$P/wan2_2_no_norm2.json" \
  --device cuda:0 -o "$W/big.h5" >"$W/rec_big.log" 2>&1 && pass "record $BIG_SPEC x $BIG_STEPS steps ($(du -sh "$W/big.h5" | cut -f1))" \
  || fail "record big: $(tail -3 "$W/rec_big.log")"

echo "== 1. two GPUs == one GPU, bit for bit ($(el))"
for ref in rollout trainer oracle; do
  for plan in wan2_2 wan2_2_no_norm2; do
    "$D" replay "$W/small.h5" --plan "$P/$plan.json" --ref $ref --device cuda:0 --json -o "$W/r1.h5" --force >"$W/one.json" 2>"$W/one.err" \
      || { fail "1-GPU replay $ref $plan: $(tail -2 "$W/one.err")"; continue; }
    "$D" replay "$W/small.h5" --plan "$P/$plan.json" --ref $ref --devices cuda:0,cuda:1 --json -o "$W/r2.h5" --force >"$W/two.json" 2>"$W/two.err" \
      || { fail "2-GPU replay $ref $plan: $(tail -2 "$W/two.err")"; continue; }
    same_json "$W/one.json" "$W/two.json" && same_result "$W/r1.h5" "$W/r2.h5" 6 \
      && pass "--ref $ref --plan $plan: 2-GPU report and result trace == 1-GPU" || fail "--ref $ref --plan $plan: 2 GPUs differ from 1"
  done
done
grep -q "reduced through nccl" "$W/two.err" && pass "reductions went through NCCL: $(grep 'reduced through' "$W/two.err")" \
  || fail "not reduced through NCCL (build without NCCL?): $(cat "$W/two.err")"

echo "== 2. speedup on $BIG_SPEC, $BIG_STEPS steps, every site compared ($(el))"
R=(replay "$W/big.h5" --plan "$P/wan2_2_no_norm2.json" --ref rollout --json)
"$D" "${R[@]}" --device cuda:0 >"$W/big0.json" 2>"$W/big0.err" || fail "big 1-GPU (--device): $(tail -2 "$W/big0.err")"
"$D" "${R[@]}" --devices cuda:0 >"$W/big1.json" 2>"$W/big1.err" || fail "big 1-GPU (--devices): $(tail -2 "$W/big1.err")"
"$D" "${R[@]}" --devices cuda:0,cuda:1 >"$W/big2.json" 2>"$W/big2.err" || fail "big 2-GPU: $(tail -2 "$W/big2.err")"
same_json "$W/big0.json" "$W/big2.json" && same_json "$W/big1.json" "$W/big2.json" \
  && pass "big trace: 2-GPU report == 1-GPU report" || fail "big trace: reports differ"
cat "$W/big1.err" "$W/big2.err" | grep "drift replay:" | sed 's/^/   /'
s1=$(steps_s "$W/big1.err"); s2=$(steps_s "$W/big2.err"); t1=$(total_s "$W/big1.err"); t2=$(total_s "$W/big2.err")
t0=$(json_s "$W/big0.json")
sp=$("$PY" -c "print('%.2f' % ($s1 / $s2))" 2>/dev/null || echo 0)
spt=$("$PY" -c "print('%.2f' % ($t1 / $t2))" 2>/dev/null || echo 0)
spd=$("$PY" -c "print('%.2f' % ($t0 / $t2))" 2>/dev/null || echo 0)
echo "SPEEDUP: steps phase ${sp}x (${s1} s on 1 GPU -> ${s2} s on 2), end to end ${spt}x (${t1} -> ${t2} s; --device cuda:0 took ${t0} s: ${spd}x)"
echo "INFO: every site compared (host-side comparison dominates a step): steps phase ${sp}x"
echo "== 2b. speedup on a workload that fills the GPUs: $FILL_SPEC, $FILL_STEPS steps, output only ($(el))"
"$D" record --synthetic "$FILL_SPEC" --steps "$FILL_STEPS" --trainer-plan "$P/wan2_2.json" --rollout-plan "$P/wan2_2_no_norm2.json" \
  --sites 'output:*' --device cuda:0 -o "$W/fill.h5" >"$W/rec_fill.log" 2>&1 && pass "record $FILL_SPEC x $FILL_STEPS steps, inputs and output only ($(du -sh "$W/fill.h5" | cut -f1))" \
  || fail "record fill: $(tail -3 "$W/rec_fill.log")"
F=(replay "$W/fill.h5" --plan "$P/wan2_2.json" --ref trainer --output-only --json)
"$D" "${F[@]}" --devices cuda:0 >"$W/fill1.json" 2>"$W/fill1.err" || fail "fill 1-GPU: $(tail -2 "$W/fill1.err")"
"$D" "${F[@]}" --devices cuda:0,cuda:1 >"$W/fill2.json" 2>"$W/fill2.err" || fail "fill 2-GPU: $(tail -2 "$W/fill2.err")"
same_json "$W/fill1.json" "$W/fill2.json" && pass "fill trace: 2-GPU report == 1-GPU report" || fail "fill trace: reports differ"
cat "$W/fill1.err" "$W/fill2.err" | grep "drift replay:" | sed 's/^/   /'
f1=$(steps_s "$W/fill1.err"); f2=$(steps_s "$W/fill2.err")
fsp=$("$PY" -c "print('%.2f' % ($f1 / $f2))" 2>/dev/null || echo 0)
echo "SPEEDUP: GPU-filling workload: steps phase ${fsp}x (${f1} s on 1 GPU -> ${f2} s on 2)"
"$PY" -c "import sys; sys.exit(0 if $fsp >= $SPEEDUP_MIN else 1)" && pass "step-parallel speedup ${fsp}x >= $SPEEDUP_MIN (GPU-filling workload)" \
  || fail "step-parallel speedup ${fsp}x < $SPEEDUP_MIN (GPU-filling workload)"
# the GPU-bound variant (only the output compared): for information
"$D" "${R[@]}" --output-only --devices cuda:0 >/dev/null 2>"$W/oo1.err" && "$D" "${R[@]}" --output-only --devices cuda:0,cuda:1 >/dev/null 2>"$W/oo2.err" \
  && echo "INFO: --output-only: steps $(steps_s "$W/oo1.err") s on 1 GPU, $(steps_s "$W/oo2.err") s on 2"

echo "== 3. --fsdp == unsharded ($(el))"
for plan in wan2_2 wan2_2_no_norm2; do
  "$D" replay "$W/small.h5" --plan "$P/$plan.json" --ref rollout --device cuda:0 --json >"$W/one.json" 2>/dev/null
  "$D" replay "$W/small.h5" --plan "$P/$plan.json" --ref rollout --devices cuda:0,cuda:1 --fsdp --json >"$W/fsdp.json" 2>"$W/fsdp.err" \
    && same_json "$W/one.json" "$W/fsdp.json" && pass "--fsdp --plan $plan == unsharded ($(grep 'fsdp:' "$W/fsdp.err" | sed 's/drift replay: //'))" \
    || fail "--fsdp --plan $plan: $(tail -3 "$W/fsdp.err")"
done
"$D" "${R[@]}" --output-only --devices cuda:0,cuda:1 --fsdp >"$W/bigf.json" 2>"$W/bigf.err" \
  && "$D" "${R[@]}" --output-only --devices cuda:0,cuda:1 >"$W/bign.json" 2>/dev/null && same_json "$W/bign.json" "$W/bigf.json" \
  && pass "--fsdp on the big trace == unsharded ($(grep 'fsdp:' "$W/bigf.err" | sed 's/drift replay: //'))" \
  || fail "--fsdp big: $(tail -3 "$W/bigf.err")"

echo "== 4. bisect on two GPUs ($(el))"
"$D" bisect "$W/small.h5" --good "$B/good.json" --bad "$B/bad16.json" --device cuda:0 --threshold 0 --json >"$W/b1.json" 2>"$W/b1.err" \
  || fail "1-GPU bisect: $(tail -2 "$W/b1.err")"
"$D" bisect "$W/small.h5" --good "$B/good.json" --bad "$B/bad16.json" --devices cuda:0,cuda:1 --threshold 0 --json >"$W/b2.json" 2>"$W/b2.log" \
  || fail "2-GPU bisect: $(tail -2 "$W/b2.log")"
"$PY" - "$W/b1.json" "$W/b2.json" <<'PY' && pass "bisect: same culprits on 2 GPUs" || fail "bisect: culprits differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
key = lambda d: [[c["name"] for c in s] for s in d["culprit_sets"]]
print("   culprits:", key(b), "probes:", b["probes"], "max concurrent:", b["max_concurrent_probes"])
sys.exit(0 if key(a) == key(b) and key(a) else 1)
PY
sed 's/^/   /' "$W/b2.log" | head -8
grep -q "on cuda:0 started" "$W/b2.log" && grep -q "on cuda:1 started" "$W/b2.log" && grep -q "(2 running)" "$W/b2.log" \
  && pass "bisect probes ran on cuda:0 and cuda:1 at once" || fail "bisect log shows no overlap on both GPUs"

echo "== 5. mpirun -n 2 == single process ($(el))"
if command -v mpirun >/dev/null 2>&1; then
  M=(mpirun --allow-run-as-root --oversubscribe -n 2)
  "$D" replay "$W/small.h5" --plan "$P/wan2_2.json" --ref rollout --device cuda:0 --json -o "$W/m1.h5" >"$W/one.json" 2>/dev/null
  timeout -s KILL 180 "${M[@]}" "$D" replay "$W/small.h5" --plan "$P/wan2_2.json" --ref rollout --device cuda --json -o "$W/m2.h5" \
    >"$W/mpi.json" 2>"$W/mpi.err" && same_json "$W/one.json" "$W/mpi.json" && same_result "$W/m1.h5" "$W/m2.h5" 6 \
    && pass "mpirun -n 2 --device cuda == single process ($(grep 'drift replay:' "$W/mpi.err" | sed 's/drift replay: //'))" \
    || fail "mpirun -n 2 --device cuda: $(tail -4 "$W/mpi.err")"
  grep -q "reduced through nccl" "$W/mpi.err" && pass "MPI ranks reduced through NCCL (id broadcast over MPI)" || fail "MPI ranks did not use NCCL"
  timeout -s KILL 180 "${M[@]}" "$D" "${R[@]}" --device cuda >"$W/bigm.json" 2>"$W/bigm.err" && same_json "$W/big0.json" "$W/bigm.json" \
    && pass "mpirun -n 2 on the big trace == 1 GPU; $(grep 'drift replay:' "$W/bigm.err" | sed 's/drift replay: //')" \
    || fail "mpirun big: $(tail -3 "$W/bigm.err")"
  timeout -s KILL 120 "${M[@]}" "$D" replay "$W/small.h5" --plan "$P/wan2_2.json" --ref rollout --device cpu --json >"$W/mpic.json" 2>"$W/mpic.err" \
    && "$D" replay "$W/small.h5" --plan "$P/wan2_2.json" --ref rollout --device cpu --json >"$W/onec.json" 2>/dev/null \
    && same_json "$W/onec.json" "$W/mpic.json" && pass "mpirun -n 2 --device cpu == single process (MPI_Allreduce)" \
    || fail "mpirun --device cpu: $(tail -3 "$W/mpic.err")"
else
  fail "mpirun not found"
fi

echo "== 6. NCCL unit test ($(el))"
if [ -x "$BUILD/tests/gpu_test_multi_nccl" ]; then
  "$BUILD/tests/gpu_test_multi_nccl" >"$W/nccl_test.log" 2>&1 && pass "$(tail -1 "$W/nccl_test.log")" || fail "$(tail -5 "$W/nccl_test.log")"
elif [ -x "$BUILD/gpu_test_multi_nccl" ]; then
  "$BUILD/gpu_test_multi_nccl" >"$W/nccl_test.log" 2>&1 && pass "$(tail -1 "$W/nccl_test.log")" || fail "$(tail -5 "$W/nccl_test.log")"
else
  echo "INFO: gpu_test_multi_nccl not built"
fi

echo "multi_gpu: $fails failure(s) in $(el)"
[ $fails -eq 0 ] || exit 1
exit 0
