#!/usr/bin/env bash
# libdrift_intercept.so without a GPU: runs recorder/intercept/test_app.c
# (linked against the real cuBLAS, cuBLASLt and NCCL, which load without a
# driver and fail on NULL handles/communicators) under LD_PRELOAD with the
# NVTX injection, then checks the census through `drift ls --json`: rows,
# dtypes, counts, range paths; plus pass-through (DRIFT_INTERCEPT=0), a
# missing writer (the job must not notice), {rank} output names and the
# periodic flush. Skips (77) when the interposer or the test program was not
# built (no CUDA/NCCL headers or libraries).
set -u
DRIFT_BIN=${DRIFT_BIN:?DRIFT_BIN not set}
B=$(cd "$(dirname "$DRIFT_BIN")" && pwd)
LIB=$B/libdrift_intercept.so
# In the sanitizer build the interposer is ASan-instrumented: the ASan runtime
# must come first in the preload list.
ASAN_RT=$(ldd "$LIB" 2>/dev/null | awk '/libasan/ {print $3; exit}')
[ -n "$ASAN_RT" ] && ASAN_RT="$ASAN_RT:"
APP=$B/drift_intercept_test_app
PY=${PYTHON3:-python3}
T=${DRIFT_TMP:-/tmp}/intercept_local.$$
mkdir -p "$T"
if [ ! -f "$LIB" ] || [ ! -x "$APP" ]; then
  echo "SKIP: $LIB or $APP not built (needs cublasLt.h, nccl.h, nvtx3 and libcublas/libcublasLt/libnccl)"
  exit 77
fi
# The CUDA libraries must at least load here (they do without a driver).
if ! "$APP" > "$T/plain.out" 2> "$T/plain.err"; then
  echo "SKIP: the test program cannot run here without the interposer:"; cat "$T/plain.err"
  exit 77
fi
fail=0
check() { # name, python expression over d (the census JSON)
  if "$PY" - "$T/ls.json" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))["census"]
def g(**kw):
    return [r for r in d["gemm"] if all(r[k] == v for k, v in kw.items())]
def c(**kw):
    return [r for r in d["collective"] if all(r[k] == v for k, v in kw.items())]
ok = eval(sys.argv[2])
sys.exit(0 if ok else 1)
EOF
  then echo "PASS $1"; else echo "FAIL $1: $2"; fail=1; fi
}

run() { # env assignments..., then the app runs under the interposer
  env "$@" LD_PRELOAD="$ASAN_RT$LIB" "$APP" > "$T/app.out" 2> "$T/app.err"
}

# --- 1. the census of the test program ---------------------------------------
run NVTX_INJECTION64_PATH="$LIB" DRIFT_INTERCEPT_OUT="$T/census.h5"
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: the test program exited $rc under the interposer"; cat "$T/app.err"; exit 1; }
# the job's own output is unchanged by the interposer (same statuses)
diff "$T/plain.out" "$T/app.out" > /dev/null || { echo "FAIL: call statuses differ under the interposer"; diff "$T/plain.out" "$T/app.out"; fail=1; }
[ -f "$T/census.h5" ] || { echo "FAIL: no census written"; cat "$T/app.err"; exit 1; }
[ -f "$T/census.h5.txt" ] || { echo "FAIL: no readable summary"; fail=1; }
"$DRIFT_BIN" ls --json "$T/census.h5" > "$T/ls.json" || { echo "FAIL: drift ls --json"; exit 1; }
"$DRIFT_BIN" ls "$T/census.h5" > "$T/ls.txt" || { echo "FAIL: drift ls"; exit 1; }
grep -q "census GEMMs (5)" "$T/ls.txt" && grep -q "forward/blocks.0/attn1" "$T/ls.txt" || { echo "FAIL: drift ls text lacks the census"; fail=1; }
check "producer and side" "json.load(open(sys.argv[1]))['producer'].startswith('drift-intercept') and json.load(open(sys.argv[1]))['side'] == 'trainer'"
check "nvtx injected" "d['nvtx_injected'] and d['nvtx_ranges'] >= 8"
check "5 gemm rows, 3 collective rows" "len(d['gemm']) == 5 and len(d['collective']) == 3"
check "GemmEx bf16 in forward/blocks.0/attn1, 3 calls" \
  "len(g(range='forward/blocks.0/attn1', api='cublasGemmEx', a_type='bf16', b_type='bf16', c_type='bf16', compute_type='fp32', m=64, n=32, k=16, transa='N', transb='T', calls=3, failed=3)) == 1"
check "LtMatmul bf16 bias in forward/blocks.0/ffn" \
  "len(g(range='forward/blocks.0/ffn', api='cublasLtMatmul', a_type='bf16', d_type='bf16', compute_type='fp32', scale_type='fp32', epilogue='bias', transa='T', transb='N', m=8, n=4, k=16, batch=1, calls=1)) == 1"
check "Sgemm outside any range" "len(g(range='', api='cublasSgemm_v2', a_type='fp32', calls=1)) == 1"
check "wide-string range, strided batched fp16" \
  "len(g(range='wide', api='cublasGemmStridedBatchedEx', a_type='fp16', batch=4, calls=1)) == 1"
check "start/end range attribution" "len(g(range='startend', api='cublasGemmEx', a_type='fp32')) == 1"
check "allgather bf16 x2 in fsdp/blocks.0" \
  "len(c(range='fsdp/blocks.0', op='allgather', dtype='bf16', count=1000, calls=2, failed=2, bytes=4000, comm=-1)) == 1"
check "allgather fp32 x1" "len(c(op='allgather', dtype='fp32', count=500, calls=1)) == 1"
check "reducescatter fp32 sum" "len(c(op='reducescatter', dtype='fp32', redop='sum', count=250, calls=1)) == 1"
check "call counters" "d['gemm_calls'] == 7 and d['collective_calls'] == 4 and d['gemm_dropped'] == 0"
check "gemm sequence numbers" "g(range='forward/blocks.0/attn1')[0]['first_seq'] == 0 and g(range='forward/blocks.0/attn1')[0]['last_seq'] == 2"

# drift top: the census in --batch JSON, and the dashboard's census view (key C)
"$DRIFT_BIN" top "$T/census.h5" --batch --format json > "$T/top.json" 2> "$T/top.err" || { echo "FAIL: drift top --batch"; cat "$T/top.err"; fail=1; }
cp "$T/top.json" "$T/ls.json"
check "drift top --batch json carries the census" "len(d['gemm']) == 5 and c(op='allgather', dtype='bf16')[0]['calls'] == 2"
if command -v tmux > /dev/null; then
  SOCK="drift-icpt-$$"
  tmux -L "$SOCK" -f /dev/null new-session -d -s top -x 140 -y 40 "TERM=xterm '$DRIFT_BIN' top '$T/census.h5' 2> '$T/tui.err'"
  seen=0
  for _ in $(seq 100); do
    tmux -L "$SOCK" send-keys -t top C 2> /dev/null
    sleep 0.2
    if tmux -L "$SOCK" capture-pane -p -t top 2> /dev/null | grep -q "forward/blocks.0/attn1"; then seen=1; break; fi
  done
  tmux -L "$SOCK" send-keys -t top x q 2> /dev/null; sleep 0.3; tmux -L "$SOCK" kill-server 2> /dev/null
  [ $seen = 1 ] && echo "PASS dashboard census view (key C)" || { echo "FAIL: the census view did not show the GEMM range"; fail=1; }
else
  echo "SKIP dashboard census view: tmux not installed"
fi

# --- 2. without the NVTX injection: no ranges ---------------------------------
run DRIFT_INTERCEPT_OUT="$T/nonvtx.h5"
"$DRIFT_BIN" ls --json "$T/nonvtx.h5" > "$T/ls.json" || { echo "FAIL: drift ls (no nvtx)"; fail=1; }
check "no NVTX: every range empty" "not d['nvtx_injected'] and all(r['range'] == '' for r in d['gemm'] + d['collective'])"

# --- 3. DRIFT_INTERCEPT=0: pass-through, nothing written ----------------------
run DRIFT_INTERCEPT=0 DRIFT_INTERCEPT_OUT="$T/off.h5"
[ $? -eq 0 ] && [ ! -e "$T/off.h5" ] && echo "PASS disabled: no census" || { echo "FAIL: DRIFT_INTERCEPT=0 wrote a census"; fail=1; }
diff "$T/plain.out" "$T/app.out" > /dev/null || { echo "FAIL: statuses differ when disabled"; fail=1; }

# --- 4. the writer cannot load: the job exits 0, one message, summary kept ----
run DRIFT_INTERCEPT_WRITER=/nonexistent/libnope.so DRIFT_INTERCEPT_OUT="$T/nowriter.h5"
rc=$?
n=$(grep -c "^drift intercept:" "$T/app.err")
if [ $rc -eq 0 ] && [ "$n" = 1 ] && [ -f "$T/nowriter.h5.txt" ] && [ ! -e "$T/nowriter.h5" ]; then
  echo "PASS missing writer: job unaffected, reported once"
else
  echo "FAIL missing writer: rc=$rc messages=$n"; cat "$T/app.err"; fail=1
fi

# --- 5. {rank} and the torchrun variables -------------------------------------
run RANK=3 WORLD_SIZE=4 LOCAL_RANK=1 DRIFT_INTERCEPT_OUT="$T/c.{rank}.h5"
"$DRIFT_BIN" ls --json "$T/c.3.h5" > "$T/ls.json" || { echo "FAIL: {rank} output"; fail=1; }
check "rank from the environment" "d['rank'] == 3 and d['world_size'] == 4 and d['local_rank'] == 1"
run RANK=2 WORLD_SIZE=4 DRIFT_INTERCEPT_OUT="$T/multi.h5"
[ -f "$T/multi.rank2.h5" ] && echo "PASS multi-rank name gets .rank<R>" || { echo "FAIL: expected $T/multi.rank2.h5"; ls "$T"; fail=1; }

# --- 6. a tiny row cap: overflow counted, never a crash -------------------------
run DRIFT_INTERCEPT_MAX_ROWS=2 DRIFT_INTERCEPT_OUT="$T/cap.h5"
"$DRIFT_BIN" ls --json "$T/cap.h5" > "$T/ls.json" || { echo "FAIL: capped census"; fail=1; }
check "row cap: 2 rows, the rest dropped" "len(d['gemm']) == 2 and d['gemm_dropped'] == 3 and len(d['notes']) >= 1"

exit $fail
